/* lr_task_abort against linerate-target (issue 27): ABORT TASK of a write whose data the
 * target has not got yet, of a task already completed, and of writes caught by an ERL 2
 * connection loss; and the ERL 2 recovery of writes whose live connection logs itself out
 * for recovery (lr_session_conn_logout_recovery). What a user checks: each task's callback runs
 * once, the abort's done() once, and the blocks of an aborted write hold the old or the new data
 * whole, and keep it. Usage: abort_task --target PATH */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "linerate/initiator.h"
#include "linerate/initiator_test.h"
#include "linerate/reactor.h"
#include "target_spawn.h"

#define BS 512
#define NB 32 /* 16 KiB: more than FirstBurstLength, so R2Ts */
#define IQN "iqn.2026-12.org.linerate:abort"

static struct reactor *R;
static struct lr_timer *poll_t;
static const bool *wait_flag;
static char dir[PATH_MAX];
static pid_t tpid;
static uint16_t port;
static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "abort_task: FAIL line %d: ", __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void poll_fn(void *arg)
{
    (void)arg;
    if (*wait_flag)
        lr_reactor_stop(R);
    else
        lr_timer_start(poll_t, 2);
}

/* Run the reactor until *flag (at most 40 s: past every timeout of the session). */
static bool wait_until(const bool *flag)
{
    for (int i = 0; i < 400 && !*flag; i++) {
        wait_flag = flag;
        lr_timer_start(poll_t, 2);
        lr_reactor_run(R);
    }
    return *flag;
}

struct done {
    bool fired;
    int calls;
    struct lr_result res;
};

static void on_done(void *arg, const struct lr_result *res)
{
    struct done *d = arg;
    d->calls++;
    d->fired = true;
    d->res = *res;
}

static uint16_t pick_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) < 0)
        exit(2);
    close(fd);
    return ntohs(a.sin_port);
}

static void target_start(const char *target)
{
    char url[PATH_MAX + 8], log[PATH_MAX + 16], conf[PATH_MAX + 16];
    snprintf(url, sizeof(url), "%s/url", dir);
    snprintf(log, sizeof(log), "%s/target.log", dir);
    snprintf(conf, sizeof(conf), "%s/target.conf", dir);
    for (int attempt = 0; attempt < 20; attempt++) {
        port = pick_port();
        FILE *f = fopen(conf, "w");
        if (!f)
            exit(2);
        fprintf(f,
                "threads = 2\nlog-level = warn\nctl-socket = none\nerror-recovery-level = 2\n"
                "max-connections = 4\ndefault-time2wait = 1\ndefault-time2retain = 20\n"
                "[target %s]\nportal = 127.0.0.1:%u\nlun = ram:1M\n",
                IQN, port);
        fclose(f);
        const char *const argv[] = {target, "--config", conf, NULL};
        pid_t pid = target_spawn(argv, url, log);
        if (pid > 0) {
            tpid = pid;
            return;
        }
    }
    fprintf(stderr, "abort_task: linerate-target did not start (%s)\n", log);
    exit(2);
}

static struct lr_session *login(uint32_t erl, uint32_t conns)
{
    struct lr_session_opts o = {
        .host = "127.0.0.1",
        .port = port,
        .target_name = IQN,
        .initiator_name = "iqn.2026-12.org.linerate:abort-test",
        .connections = conns,
        .max_recv_dsl = 8192,
        .max_burst = 8192,
        .first_burst = 8192,
        .no_immediate_data = true, /* the data waits for the target's R2T */
        .initial_r2t = true,
        .cmd_timeout_ms = 15000,
        .error_recovery_level = erl,
    };
    struct lr_session *s = lr_session_create(R, &o);
    struct done d = {0};
    if (!s || lr_session_login(s, on_done, &d) < 0 || !wait_until(&d.fired) || d.res.err != LR_OK) {
        fprintf(stderr, "abort_task: login failed\n");
        exit(2);
    }
    /* the unit attention of a new nexus (SAM-5 §5.14) out of the way */
    static const uint8_t tur[6] = {0};
    for (int i = 0; i < 3; i++) {
        struct done t = {0};
        if (lr_scsi(s, tur, 6, LR_DIR_NONE, NULL, 0, on_done, &t) < 0 || !wait_until(&t.fired))
            exit(2);
    }
    return s;
}

static void logout(struct lr_session *s)
{
    struct done d = {0};
    if (lr_session_logout(s, on_done, &d) == 0)
        wait_until(&d.fired);
    lr_session_destroy(s);
}

static void fill(uint8_t *b, uint8_t v)
{
    memset(b, v, (size_t)NB * BS);
}

static void write_sync(struct lr_session *s, uint64_t lba, uint8_t v)
{
    static uint8_t b[NB * BS];
    fill(b, v);
    struct done d = {0};
    if (lr_write(s, lba, NB, BS, b, on_done, &d) < 0 || !wait_until(&d.fired))
        exit(2);
    CHECK(d.res.err == LR_OK, "write of 0x%02x: %s", v, lr_err_name(d.res.err));
}

/* What the blocks hold: v if every byte is v, -1 if mixed (torn) */
static int read_value(struct lr_session *s, uint64_t lba)
{
    static uint8_t b[NB * BS];
    struct done d = {0};
    if (lr_read(s, lba, NB, BS, b, on_done, &d) < 0 || !wait_until(&d.fired))
        exit(2);
    CHECK(d.res.err == LR_OK, "read: %s", lr_err_name(d.res.err));
    for (size_t i = 1; i < sizeof(b); i++)
        if (b[i] != b[0])
            return -1;
    return b[0];
}

/* 1. The target has the command, not its data (InitialR2T=Yes, no immediate data), when the
 * ABORT TASK arrives right behind it: the task ends aborted, "function complete", nothing
 * landed. */
static void held_back(void)
{
    struct lr_session *s = login(0, 1);
    write_sync(s, 0, 0x11);
    static uint8_t nb[NB * BS];
    fill(nb, 0x22);
    struct done t = {0}, a = {0};
    uint32_t tag = 0;
    CHECK(lr_write_tag(s, 0, NB, BS, nb, on_done, &t, &tag) == 0, "lr_write_tag");
    CHECK(lr_task_abort(s, tag, on_done, &a) == 0, "lr_task_abort: %s", strerror(errno));
    CHECK(lr_task_abort(s, tag, on_done, &a) < 0 && errno == EALREADY, "a second abort");
    wait_until(&t.fired);
    wait_until(&a.fired);
    CHECK(t.calls == 1 && t.res.err == LR_ERR_TASK_ABORTED, "held-back write: %d calls, %s",
          t.calls, lr_err_name(t.res.err));
    CHECK(a.calls == 1 && a.res.err == LR_OK && a.res.response == 0,
          "held-back write's abort: %s, response %u", lr_err_name(a.res.err), a.res.response);
    int v = read_value(s, 0);
    CHECK(v == 0x11, "held-back write aborted, the blocks hold 0x%02x, not the old 0x11", v);
    printf("abort_task: held-back write: task %s, abort %s (%s), blocks 0x%02x\n",
           lr_err_name(t.res.err), lr_err_name(a.res.err), a.res.what ? a.res.what : "", v);
    logout(s);
}

/* 2. A task that completed: no abort (ESRCH), its callback not run again. */
static void completed(void)
{
    struct lr_session *s = login(0, 1);
    static uint8_t nb[NB * BS];
    fill(nb, 0x33);
    struct done t = {0};
    uint32_t tag = 0;
    CHECK(lr_write_tag(s, 0, NB, BS, nb, on_done, &t, &tag) == 0, "lr_write_tag");
    wait_until(&t.fired);
    CHECK(t.res.err == LR_OK, "write: %s", lr_err_name(t.res.err));
    struct done a = {0};
    errno = 0;
    CHECK(lr_task_abort(s, tag, on_done, &a) < 0 && errno == ESRCH,
          "abort of a completed task: not refused ESRCH (%s)", strerror(errno));
    int v = read_value(s, 0);
    CHECK(t.calls == 1 && a.calls == 0 && v == 0x33, "completed: %d calls, abort %d, 0x%02x",
          t.calls, a.calls, v);
    printf("abort_task: completed task: abort refused (ESRCH), blocks 0x%02x\n", v);
    logout(s);
}

static void stop_now(void *arg)
{
    (void)arg;
    lr_reactor_stop(R);
}

/* Run the reactor for ms. */
static void run_for(unsigned ms)
{
    struct lr_timer *once = lr_timer_new(R, stop_now, NULL);
    lr_timer_start(once, ms);
    lr_reactor_run(R);
    lr_timer_free(once);
}

/* 3. ERL 2, two connections: writes on connection 0, which stops reading (one direction
 * stalled: the target's R2Ts pile up unread, so no data goes out), then is cut; each write is
 * aborted while the session recovers the connection. The ABORT TASKs go out after
 * Time2Wait (1 s) and the Logout for recovery, in place of the TASK REASSIGNs: every task
 * ends aborted, every abort "function complete", nothing of the writes landed, then or
 * later. */
static void recovery(void)
{
    struct lr_session *s = login(2, 2);
    enum { N = 4 };
    static uint8_t nb[N][NB * BS];
    struct done t[N] = {0}, a[N] = {0};
    uint32_t tag[N];
    for (int i = 0; i < N; i++)
        write_sync(s, (uint64_t)i * NB, 0x44);
    lr_session_conn_rx_hold(s, 0, true);
    for (int i = 0; i < N; i++) {
        fill(nb[i], 0x55);
        lr_session_next_conn(s, 0);
        CHECK(lr_write_tag(s, (uint64_t)i * NB, NB, BS, nb[i], on_done, &t[i], &tag[i]) == 0,
              "lr_write_tag");
    }
    /* the commands out (a loop turn), then connection 0 cut */
    run_for(100);
    lr_session_conn_kill(s, 0);
    for (int i = 0; i < N; i++)
        CHECK(lr_task_abort(s, tag[i], on_done, &a[i]) == 0, "abort in recovery: %s",
              strerror(errno));
    for (int i = 0; i < N; i++) {
        wait_until(&t[i].fired);
        wait_until(&a[i].fired);
    }
    for (int i = 0; i < N; i++) {
        int v = read_value(s, (uint64_t)i * NB);
        CHECK(t[i].calls == 1 && t[i].res.err == LR_ERR_TASK_ABORTED,
              "recovery %d: %d calls, %s (%s)", i, t[i].calls, lr_err_name(t[i].res.err),
              t[i].res.what ? t[i].res.what : "");
        CHECK(a[i].calls == 1 && a[i].res.err == LR_OK && a[i].res.response == 0,
              "recovery %d: abort %d calls, %s, response %u (%s)", i, a[i].calls,
              lr_err_name(a[i].res.err), a[i].res.response, a[i].res.what ? a[i].res.what : "");
        CHECK(v == 0x44, "recovery %d: aborted write, blocks 0x%02x, not the old 0x44", i, v);
        printf("abort_task: recovery %d: task %s (%s), abort %s response %u (%s), blocks 0x%02x\n",
               i, lr_err_name(t[i].res.err), t[i].res.what ? t[i].res.what : "",
               lr_err_name(a[i].res.err), a[i].res.response, a[i].res.what ? a[i].res.what : "", v);
    }
    run_for(300); /* nothing of them lands later */
    for (int i = 0; i < N; i++) {
        int v = read_value(s, (uint64_t)i * NB);
        CHECK(v == 0x44, "recovery %d: the aborted write landed after its abort (0x%02x)", i, v);
    }
    logout(s);
}

/* 4. ERL 2, two connections: writes on connection 0 whose R2Ts it does not read yet (its
 * receiving held), when it logs itself out "remove the connection for recovery"
 * (lr_session_conn_logout_recovery, RFC 7143 §11.14.1 reason 2) and reads again. No write
 * fails: the target closes connection 0 after the answer and keeps the writes, which are
 * reassigned to connection 1 after Time2Wait (1 s), answered there GOOD, and read back. */
static void logout_for_recovery(void)
{
    struct lr_session *s = login(2, 2);
    enum { N = 4 };
    static uint8_t nb[N][NB * BS];
    struct done t[N] = {0};
    for (int i = 0; i < N; i++)
        write_sync(s, (uint64_t)(N + i) * NB, 0x66);
    lr_session_conn_rx_hold(s, 0, true);
    for (int i = 0; i < N; i++) {
        fill(nb[i], 0x77);
        lr_session_next_conn(s, 0);
        CHECK(lr_write(s, (uint64_t)(N + i) * NB, NB, BS, nb[i], on_done, &t[i]) == 0, "lr_write");
    }
    run_for(100); /* the commands out */
    CHECK(lr_session_conn_logout_recovery(s, 0) == 0, "lr_session_conn_logout_recovery: %s",
          strerror(errno));
    errno = 0;
    CHECK(lr_session_conn_logout_recovery(s, 0) < 0 && errno == EAGAIN, "a second one");
    run_for(100); /* the Logout out */
    lr_session_conn_rx_hold(s, 0, false);
    for (int i = 0; i < N; i++)
        wait_until(&t[i].fired);
    for (int i = 0; i < N; i++) {
        int v = read_value(s, (uint64_t)(N + i) * NB);
        CHECK(t[i].calls == 1 && t[i].res.err == LR_OK && t[i].res.recovered && t[i].res.conn == 1,
              "logout for recovery %d: %d calls, %s (%s), recovered %d, connection %d", i,
              t[i].calls, lr_err_name(t[i].res.err), t[i].res.what ? t[i].res.what : "",
              t[i].res.recovered, t[i].res.conn);
        CHECK(v == 0x77, "logout for recovery %d: blocks 0x%02x, not the write's 0x77", i, v);
        printf("abort_task: logout for recovery %d: task %s, recovered %d on connection %d, "
               "blocks 0x%02x\n",
               i, lr_err_name(t[i].res.err), t[i].res.recovered, t[i].res.conn, v);
    }
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    CHECK(info.connections_up == 2, "connection 0 not logged in again (%u up)",
          info.connections_up);
    logout(s);
}

int main(int argc, char **argv)
{
    const char *target = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--target"))
            target = argv[++i];
    if (!target) {
        fprintf(stderr, "usage: abort_task --target PATH\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(dir, sizeof(dir), "/tmp/lr-abort-XXXXXX");
    if (!mkdtemp(dir))
        return 2;
    target_start(target);
    R = lr_reactor_create(0);
    poll_t = lr_timer_new(R, poll_fn, NULL);
    held_back();
    completed();
    recovery();
    logout_for_recovery();
    lr_timer_free(poll_t);
    lr_reactor_destroy(R);
    kill(tpid, SIGTERM);
    int status = 0;
    waitpid(tpid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "linerate-target did not exit 0");
    if (failures) {
        fprintf(stderr, "abort_task: %d failures; the target's log: %s/target.log\n", failures,
                dir);
    } else {
        static const char *const files[] = {"url", "target.log", "target.conf"};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            char p[PATH_MAX + 16];
            snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    return failures ? 1 : 0;
}
