/* The in-process daemon that fuzz_ctl and fuzz_http talk to: linerate-target's own
 * target_main() on a thread of the fuzzer's process, with one reactor, a 1 MiB RAM LUN, the
 * control socket and the metrics endpoint, started once per process. Each input then goes
 * through a real socket, so the bytes take the daemon's own read loop, line and head framing,
 * limits and response path.
 *
 * Sandbox: the control protocol can make the daemon listen on new portals (add_portal,
 * add_target) and the fuzzer runs as whoever runs it, so the process first moves into a network
 * namespace of its own (as root; else in a user namespace of its own too) where only its own
 * loopback exists: nothing it binds can take a port another program on the machine wants.
 * Where neither namespace can be had, the harness is skipped (exit 77, saying what is missing)
 * before it runs an input: see LLVMFuzzerInitialize below. Files:
 * every path the daemon is given is in a scratch directory (state dir, control socket); the
 * requests that would create files elsewhere are left out by fuzz_ctl (see there). */
#ifndef LR_FUZZ_DAEMON_H
#define LR_FUZZ_DAEMON_H

#include <errno.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/config.h"
#include "util/log.h"

static struct {
    bool up;
    char dir[256];
    char ctl_path[300];
    unsigned metrics_port, iscsi_port;
    pthread_t thread;
    volatile bool exited;
} FD;

static void *fd_daemon_main(void *arg)
{
    char **argv = arg;
    int argc = 0;
    while (argv[argc])
        argc++;
    target_main(argc, argv);
    FD.exited = true;
    return NULL;
}

static bool fd_loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return false;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    bool ok = ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags |= IFF_UP;
    ok = ok && ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
    close(s);
    return ok;
}

/* connect(), 0 or -1. libFuzzer's timer signal may interrupt a connect: the connection then
 * completes on its own, and a second connect() says so (EISCONN) or waits on. */
static int connect_retry(int fd, const struct sockaddr *addr, socklen_t len)
{
    int rc;
    while ((rc = connect(fd, addr, len)) < 0 && errno == EINTR)
        ;
    return rc < 0 && errno != EISCONN ? -1 : 0;
}

static int fd_connect_unix(const char *path)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    if (connect_retry(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(s);
        return -1;
    }
    return s;
}

static int fd_connect_tcp(unsigned port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect_retry(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(s);
        return -1;
    }
    return s;
}

/* libFuzzer calls this once, before any input (and before it starts a thread of its own:
 * a process with threads cannot enter a new user namespace). The sandbox above or a skip: a
 * test runner reads exit status 77 as "skipped" (run.sh does, with the line printed here). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *name = *argc > 0 ? (*argv)[0] : "fuzz";
    name = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    int as_user = 0, in_userns = 0;
    bool ns = unshare(CLONE_NEWNET) == 0;
    if (!ns) {
        as_user = errno;
        ns = unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0;
        in_userns = ns ? 0 : errno;
    }
    if (!ns) {
        fprintf(stderr,
                "%s: skipped: no network namespace of its own to run the daemon in "
                "(unshare as this user: %s; in a user namespace of its own: %s)\n",
                name, strerror(as_user), strerror(in_userns));
        exit(77);
    }
    if (!fd_loopback_up()) {
        fprintf(stderr, "%s: skipped: the loopback of its network namespace did not come up: %s\n",
                name, strerror(errno));
        exit(77);
    }
    return 0;
}

/* Start the daemon once (in the namespace LLVMFuzzerInitialize made); aborts if it cannot be
 * had. */
static void fd_daemon_up(void)
{
    if (FD.up)
        return;
    FD.up = true;
    signal(SIGPIPE, SIG_IGN);
    const char *tmp = getenv("TMPDIR"); /* run.sh: a directory in the build dir */
    snprintf(FD.dir, sizeof(FD.dir), "%s/fuzz_daemon.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(FD.dir))
        abort();
    snprintf(FD.ctl_path, sizeof(FD.ctl_path), "%s/ctl.sock", FD.dir);
    /* fixed ports: the namespace is ours */
    FD.iscsi_port = 3260;
    FD.metrics_port = 3261;
    static char listen[64], metrics[64], lun[] = "ram:1M", state[300];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", FD.iscsi_port);
    snprintf(metrics, sizeof(metrics), "127.0.0.1:%u", FD.metrics_port);
    snprintf(state, sizeof(state), "%s/state", FD.dir);
    static char *argv[32];
    int n = 0;
    argv[n++] = "linerate-target";
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--lun";
    argv[n++] = lun;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--log-level";
    argv[n++] = getenv("FUZZ_LOG") ? "debug" : "error";
    argv[n++] = "--ctl-socket";
    argv[n++] = FD.ctl_path;
    argv[n++] = "--metrics";
    argv[n++] = metrics;
    argv[n++] = "--state-dir";
    argv[n++] = state;
    argv[n] = NULL;
    FD.exited = false;
    if (pthread_create(&FD.thread, NULL, fd_daemon_main, argv) != 0)
        abort();
    /* up once both sockets answer */
    for (int i = 0; i < 500 && !FD.exited; i++) {
        int a = fd_connect_unix(FD.ctl_path);
        int b = a >= 0 ? fd_connect_tcp(FD.metrics_port) : -1;
        if (a >= 0)
            close(a);
        if (b >= 0) {
            close(b);
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fputs(FD.exited ? "fuzz: the daemon would not start\n"
                    : "fuzz: the daemon did not come up in 5 s\n",
          stderr);
    abort();
}

/* Write all of in[0..len) to s (then shut its write side) while reading everything the daemon
 * answers into *out until it closes. The daemon must close within 10 s: else a hang, abort. */
static size_t fd_exchange(int s, const uint8_t *in, size_t len, char **out)
{
    size_t off = 0, cap = 4096, got = 0;
    char *buf = malloc(cap + 1);
    bool shut = false;
    uint64_t waited_ms = 0;
    if (!buf)
        abort();
    for (;;) {
        if (off == len && !shut) {
            shutdown(s, SHUT_WR);
            shut = true;
        }
        struct pollfd p = {.fd = s, .events = POLLIN | (shut ? 0 : POLLOUT)};
        int rc = poll(&p, 1, 100);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0) {
            waited_ms += 100;
            if (waited_ms >= 10000) {
                fprintf(stderr, "fuzz: no end of the daemon's answer after 10 s\n");
                abort();
            }
            continue;
        }
        waited_ms = 0;
        if (p.revents & POLLOUT) {
            ssize_t n = send(s, in + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && errno != EAGAIN && errno != EINTR)
                off = len; /* the daemon closed first: what is left is not read */
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            if (got == cap) {
                cap *= 2;
                char *nb = realloc(buf, cap + 1);
                if (!nb)
                    abort();
                buf = nb;
            }
            ssize_t n = recv(s, buf + got, cap - got, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                break;
            if (n > 0)
                got += (size_t)n;
        }
    }
    buf[got] = '\0';
    *out = buf;
    return got;
}

#endif
