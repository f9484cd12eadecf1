/* The SIGBUS guard (fault_guard.h): a per-thread jump target set around the guarded call; the
 * handler jumps back to it, or, with none set, puts the previous disposition back and returns
 * so that the fault happens again under it. sigsetjmp saves no mask (no system call on the
 * path taken when nothing faults), so SIGBUS is unblocked again after a jump: the next fault
 * is caught too. */
#include "util/fault_guard.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>

static _Thread_local sigjmp_buf *volatile guard_env;
static struct sigaction prev_bus;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    sigjmp_buf *env = guard_env;
    if (env) {
        guard_env = NULL;
        siglongjmp(*env, 1);
    }
    sigaction(SIGBUS, &prev_bus, NULL); /* not a guarded access: fault again as before */
}

static void install(void)
{
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &prev_bus);
}

int fault_guard_run(void (*fn)(void *arg), void *arg)
{
    pthread_once(&install_once, install);
    sigjmp_buf env;
    if (sigsetjmp(env, 0)) {
        /* The handler cleared guard_env. SA_NODEFER kept SIGBUS unblocked, but a sanitizer's
         * handler that called ours may have blocked it: a blocked SIGBUS on the next fault
         * would kill the process, so unblock it here, on this rare path only. */
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
        return -EFAULT;
    }
    guard_env = &env;
    fn(arg);
    guard_env = NULL;
    return 0;
}
