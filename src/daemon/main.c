/* The daemon's top: target_main() reads the configuration, builds the targets, starts the
 * reactor threads, the listeners (listen.c) and the control thread (ctl.c), and on SIGTERM or
 * SIGINT shuts down (stop accepting, close connections, flush LUNs, exit 0). */
#include "daemon/config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bs/bs.h"
#include "reactor/reactor.h"
#include "daemon/daemon.h"
#include "util/sdnotify.h"

#define SHUTDOWN_DRAIN_MS 2000 /* how long connections get to close at shutdown */
#define SYNC_CALL_TIMEOUT_S 5

/* --- running code on reactors --- */

static void sync_call_run(void *arg)
{
    struct sync_call *c = arg;
    c->fn(c->d, c->r);
    sem_post(&c->done);
}

/* Run fn on r's thread and wait (bounded) for it. Returns 0, or -1 if it did not finish in
 * time; then `c` must stay valid and is not used again (its message may still be queued),
 * which is why callers keep each call in the daemon's lifetime. */
static int sync_call(struct sync_call *c, struct daemon *d, struct reactor *r,
                     void (*fn)(struct daemon *, struct reactor *))
{
    c->d = d;
    c->r = r;
    c->fn = fn;
    sem_init(&c->done, 0, 0);
    reactor_post(r, &c->msg, sync_call_run, c);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += SYNC_CALL_TIMEOUT_S;
    while (sem_timedwait(&c->done, &ts) < 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

static void close_conns_on_reactor(struct daemon *d, struct reactor *r)
{
    iscsi_server_close_reactor_conns(&d->srv, r);
}

static void stop_reactor(struct daemon *d, struct reactor *r)
{
    (void)d;
    reactor_stop(r);
}

static void *reactor_thread(void *arg)
{
    reactor_run(arg);
    return NULL;
}

/* --- lifecycle --- */

static void print_urls(const struct target_config *cfg)
{
    for (unsigned t = 0; t < cfg->ntargets; t++) {
        const struct target_node_conf *n = &cfg->targets[t];
        for (unsigned p = 0; p < n->nportals; p++)
            for (unsigned l = 0; l < n->nluns; l++)
                printf("iscsi://%s/%s/%llu\n", n->portals[p].text, n->name,
                       (unsigned long long)n->luns[l].lun);
    }
    fflush(stdout);
}

static unsigned default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > TARGET_THREADS_MAX ? TARGET_THREADS_MAX : (unsigned)n;
}

static int daemon_start(struct daemon *d)
{
    unsigned n = d->cfg.threads ? d->cfg.threads : default_threads();
    d->reactors = calloc(n, sizeof(*d->reactors));
    d->threads = calloc(n, sizeof(*d->threads));
    if (!d->reactors || !d->threads)
        return -1;
    for (unsigned i = 0; i < n; i++) {
        d->reactors[i] = reactor_create((int)i);
        if (!d->reactors[i])
            return -1;
        reactor_set_poll_us(d->reactors[i], d->cfg.poll_us);
        d->nreactors = i + 1;
    }
    int rc = iscsi_server_init(&d->srv);
    if (rc < 0) {
        LOG_ERR("cannot initialise the iSCSI server: %s", strerror(rc < -1 ? -rc : ENOMEM));
        return -1;
    }
    d->srv_ready = true;
    iscsi_server_set_nodes(&d->srv, d->built.nodes, d->built.n);
    if (iscsi_server_set_reactors(&d->srv, d->reactors, d->nreactors) < 0) {
        LOG_ERR("cannot initialise the iSCSI server: %s", strerror(ENOMEM));
        return -1;
    }
    d->srv.discovery_chap = d->cfg.discovery_chap;
    d->srv.discovery_chap_any = !d->cfg.discovery_chap_match;
    d->srv.nop_interval_s = d->cfg.nop_interval_s;
    d->srv.nop_timeout_s = d->cfg.nop_timeout_s;
    d->srv.login_timeout_s = d->cfg.login_timeout_s;
    d->srv.inject = d->cfg.inject;
    bs_inject_delay((unsigned)d->cfg.inject.store_delay_ms); /* reactors run no I/O yet */
    d->srv.limits = d->cfg.limits;
    atomic_store(&d->srv.shutting_down, false);

    /* Listeners are registered before reactor 0 runs, so no message is needed. */
    if (daemon_watch_listeners(d) < 0)
        return -1;
    for (unsigned i = 0; i < n; i++) {
        rc = pthread_create(&d->threads[i], NULL, reactor_thread, d->reactors[i]);
        if (rc != 0) {
            LOG_ERR("cannot start reactor thread %u: %s", i, strerror(rc));
            return -1;
        }
        d->nthreads_started = i + 1;
    }
    LOG_INFO("linerate-target %s: %u reactor thread%s (poll %u us), nop %us/%us, login timeout %us",
#ifdef LINERATE_VERSION
             LINERATE_VERSION,
#else
             "",
#endif
             n, n == 1 ? "" : "s", d->cfg.poll_us, d->cfg.nop_interval_s, d->cfg.nop_timeout_s,
             d->cfg.login_timeout_s);
    for (unsigned i = 0; i < d->nlisteners; i++)
        LOG_INFO("listening on %s", d->listeners[i].portal.text);
    if (inject_any(&d->cfg.inject)) {
        char what[160];
        inject_format(&d->cfg.inject, what, sizeof(what));
        LOG_WARN("test hook: --inject %s: this target breaks its own connections, or slows its "
                 "own file and rbd LUNs, on purpose",
                 what);
    }
    return 0;
}

/* Stop accepting, close every connection, stop the reactors. Safe on a partial start. */
static void daemon_stop(struct daemon *d)
{
    /* Per reactor: its connections closed, then its stop; and reactor 0's listeners. */
    struct sync_call *calls = calloc(2 * d->nreactors + 1, sizeof(*calls));
    int left = 0;
    bool running = d->nthreads_started == d->nreactors && d->nreactors > 0 && calls;
    if (d->srv_ready)
        atomic_store(&d->srv.shutting_down, true);
    if (running) {
        if (sync_call(&calls[2 * d->nreactors], d, d->reactors[0], daemon_close_listeners) < 0)
            LOG_WARN("reactor 0 did not close the listeners in time");
        if (d->srv_ready) {
            for (unsigned i = 0; i < d->nreactors; i++)
                if (sync_call(&calls[i], d, d->reactors[i], close_conns_on_reactor) < 0)
                    LOG_WARN("reactor %u did not close its connections in time", i);
            uint64_t deadline = reactor_now_ms() + SHUTDOWN_DRAIN_MS;
            while (atomic_load(&d->srv.nconns) > 0 && reactor_now_ms() < deadline) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            left = atomic_load(&d->srv.nconns);
            if (left > 0)
                LOG_WARN("%d connection%s still open after %d ms; stopping anyway", left,
                         left == 1 ? "" : "s", SHUTDOWN_DRAIN_MS);
        }
    }
    /* A stop message queued behind everything already sent lets each reactor finish what is
     * in its queue (hand-offs, completions) before it leaves its loop. */
    for (unsigned i = 0; i < d->nthreads_started; i++) {
        struct sync_call *c = calls ? &calls[d->nreactors + i] : NULL;
        if (c) {
            c->d = d;
            c->r = d->reactors[i];
            c->fn = stop_reactor;
            sem_init(&c->done, 0, 0);
            reactor_post(d->reactors[i], &c->msg, sync_call_run, c);
        } else {
            reactor_stop(d->reactors[i]);
        }
    }
    for (unsigned i = 0; i < d->nthreads_started; i++)
        pthread_join(d->threads[i], NULL);
    d->nthreads_started = 0;
    if (left > 0) {
        /* A connection outlives the drain only while a command of it is in a store that does
         * not answer (an rbd LUN cut from its cluster: librbd keeps the request until the
         * cluster is back). The store will still complete it into its reactor and its LUN, so
         * neither may be freed, and a last flush would wait as long as the store hangs: the
         * process ends here, its stores as they are (a store that answered acknowledged
         * nothing it has not written; the fence keeps a cut gateway's late writes out). */
        LOG_ERR("%d connection%s still had commands in a store after %d ms: exiting without "
                "the last flush",
                left, left == 1 ? "" : "s", SHUTDOWN_DRAIN_MS);
        _exit(TARGET_EXIT_RUNTIME);
    }
    /* Listeners never handed to a running reactor 0 (failed start). */
    for (unsigned i = 0; i < d->nlisteners; i++) {
        if (d->listeners[i].fd >= 0) {
            close(d->listeners[i].fd);
            d->listeners[i].fd = -1;
        }
    }
    /* Drain what arrived after the stop message (hand-offs close their socket now that
     * shutting_down is set), then free the reactors. */
    for (unsigned i = 0; i < d->nreactors; i++)
        reactor_destroy(d->reactors[i]);
    d->nreactors = 0;
    free(calls);
}

static void daemon_free(struct daemon *d)
{
    ctl_stop(d);
    /* No reactor runs any more: LUNs removed at run time that commands still held go now. */
    ctl_reap_zombies(d, true);
    if (d->srv_ready)
        iscsi_server_destroy(&d->srv);
    d->srv_ready = false;
    target_built_free(&d->built);
    ctl_free_retired(d);
    target_config_free(&d->cfg);
    target_config_free(&d->file_cfg);
    daemon_free_listeners(d);
    free(d->reactors);
    free(d->threads);
}

/* Every connection is a descriptor: the soft limit (often 1024) is raised to the hard one, so
 * that max-pending-logins and max-sessions, not the shell's ulimit, decide how many the daemon
 * holds. Past the hard limit accept() fails with EMFILE and accepting pauses (accept_pause). */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        LOG_WARN("cannot raise the descriptor limit from %llu to %llu: %s", (unsigned long long)was,
                 (unsigned long long)rl.rlim_max, strerror(errno));
    else
        LOG_DEBUG("descriptor limit raised from %llu to %llu", (unsigned long long)was,
                  (unsigned long long)rl.rlim_max);
}

/* Signals are blocked in every thread (the mask is inherited by the reactor threads) and
 * taken synchronously by the main thread with sigwait(), so no handler runs in a reactor. */
static void block_signals(sigset_t *set)
{
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    sigset_t with_pipe = *set;
    sigaddset(&with_pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &with_pipe, NULL);
}

/* SIGHUP re-reads --config and applies the difference (ctl_reload.c), on the control thread. */
static int wait_for_shutdown(struct daemon *d, const sigset_t *set)
{
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            ctl_reload_signal(d);
            continue;
        }
        return sig;
    }
}

int target_main(int argc, char **argv)
{
    struct daemon *d = calloc(1, sizeof(*d));
    if (!d) {
        fprintf(stderr, "linerate-target: out of memory\n");
        return TARGET_EXIT_RUNTIME;
    }
    target_config_init(&d->cfg);
    target_config_init(&d->file_cfg);
    /* Lines logged while the config is read already go to the journal in its form; syslog,
     * if asked for, takes over once the command line and the file have been read. */
    log_set_dest(LOG_DEST_STDERR, "linerate-target");
    int rc = target_cli_parse(&d->cfg, argc, argv);
    if (rc >= 0) {
        target_config_free(&d->cfg);
        free(d);
        return rc;
    }
    log_set_level(d->cfg.log_level);
    if (d->cfg.log_syslog)
        log_set_dest(LOG_DEST_SYSLOG, "linerate-target");

    sigset_t set;
    block_signals(&set);
    raise_fd_limit();

    /* Counter shards are per reactor: their number is known before the first LUN exists. */
    iostats_set_reactors(d->cfg.threads ? d->cfg.threads : default_threads());
    char err[1024];
    rc = target_build(&d->cfg, &d->built, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "linerate-target: %s\n", err);
        daemon_free(d);
        free(d);
        /* A cluster that did not answer is not a bad configuration: exit 1, which the
         * systemd unit restarts (Restart=on-failure), so a gateway that booted before its
         * Ceph cluster comes up with it; exit 2 is not restarted. */
        return rc == -2 ? TARGET_EXIT_RUNTIME : TARGET_EXIT_USAGE;
    }
    /* The file as read, apart from what linerate-ctl will change in d->cfg (read again: it
     * loaded a moment ago, and a failure only leaves reload without its baseline). */
    if (d->cfg.config_path[0] &&
        target_config_load(&d->file_cfg, d->cfg.config_path, err, sizeof(err)) < 0) {
        target_config_free(&d->file_cfg);
        target_config_init(&d->file_cfg);
    }
    /* The control socket is created while this is the only thread (its mode is set with the
     * umask) and served once the reactors run. */
    if (ctl_open(d) < 0 || daemon_open_listeners(d) < 0 || daemon_start(d) < 0) {
        ctl_stop(d);
        daemon_stop(d);
        daemon_free(d);
        free(d);
        return TARGET_EXIT_RUNTIME;
    }
    /* Before ctl_start: from then on d->cfg belongs to the control thread (add-lun,
     * add-target and reload change it), so this thread reads it no more. The control socket
     * listens already; a client that connects on READY=1 is served as soon as its thread
     * runs, a moment later. */
    print_urls(&d->cfg);
    /* Type=notify: the service is up once it listens and the control socket answers. */
    daemon_notify_ready(d, NULL);
    if (ctl_start(d) < 0) {
        ctl_stop(d);
        daemon_stop(d);
        daemon_free(d);
        free(d);
        return TARGET_EXIT_RUNTIME;
    }

    int sig = wait_for_shutdown(d, &set);
    LOG_INFO("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    sd_notifyf_lr("STOPPING=1\nSTATUS=shutting down (%s)", sig == SIGINT ? "SIGINT" : "SIGTERM");
    /* No administration while the reactors go away; a request waiting gives up. */
    ctl_stop(d);
    daemon_stop(d);
    int failed = target_built_flush(&d->built);
    daemon_free(d);
    free(d);
    if (failed) {
        LOG_ERR("%d LUN%s failed to flush", failed, failed == 1 ? "" : "s");
        return TARGET_EXIT_RUNTIME;
    }
    LOG_INFO("stopped");
    return TARGET_EXIT_OK;
}
