/* The daemon: reactor threads, listening sockets owned by reactor 0 that hand each accepted
 * connection to the least loaded reactor, the signal-driven shutdown (stop accepting, close
 * connections, flush LUNs, exit 0), and target_main() tying it all together. */
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

#define LISTEN_BACKLOG 1024
#define ACCEPTS_PER_WAKEUP 64  /* then let reactor 0 serve its own connections */
#define ACCEPT_PAUSE_MS 200    /* out of descriptors: retry accepting after this */
#define SHUTDOWN_DRAIN_MS 2000 /* how long connections get to close at shutdown */
#define SYNC_CALL_TIMEOUT_S 5

/* A connection on its way from the listener to its reactor. */
struct handoff {
    struct daemon *d;
    struct reactor *r;
    int fd;
    const struct iscsi_portal_addr *portal;
    struct reactor_msg msg;
};

/* --- listening --- */

static int listener_open(struct listener *l, const struct target_portal *p)
{
    int fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* An IPv6 portal serves IPv6 only, so that [::]:3260 and 0.0.0.0:3260 can coexist and
     * SendTargets reports exactly what is listened on. */
    if (p->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&p->addr, p->addrlen) < 0 ||
        listen(fd, LISTEN_BACKLOG) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    l->fd = fd;
    snprintf(l->portal.text, sizeof(l->portal.text), "%s", p->text);
    l->portal.tpgt = 1;
    if (!l->portal.stats)
        l->portal.stats = iostats_new(); /* NULL: the portal's metrics read 0 */
    return 0;
}

static void handoff_run(void *arg)
{
    struct handoff *h = arg;
    if (atomic_load(&h->d->srv.shutting_down))
        close(h->fd);
    else
        iscsi_conn_accept(&h->d->srv, h->r, h->fd, h->portal);
    /* The hint added at hand-off time; the connection now counts itself. */
    reactor_load_add(h->r, -1);
    free(h);
}

/* The reactor with the fewest connections; ties go round-robin so that a burst of connects
 * (one initiator opening several sessions) spreads over the cores. */
static struct reactor *pick_reactor(struct daemon *d)
{
    unsigned n = d->nreactors;
    unsigned start = d->next_rr++ % n;
    unsigned best = start;
    int best_load = reactor_load(d->reactors[best]);
    for (unsigned k = 1; k < n; k++) {
        unsigned i = (start + k) % n;
        int load = reactor_load(d->reactors[i]);
        if (load < best_load) {
            best = i;
            best_load = load;
        }
    }
    return d->reactors[best];
}

static void hand_off(struct daemon *d, int fd, const struct iscsi_portal_addr *portal)
{
    struct reactor *r = pick_reactor(d);
    struct handoff *h = malloc(sizeof(*h));
    if (!h) {
        LOG_WARN("accept on %s: out of memory, connection dropped", portal->text);
        close(fd);
        return;
    }
    *h = (struct handoff){.d = d, .r = r, .fd = fd, .portal = portal};
    /* Count the connection before it arrives, so the next accept sees it. */
    reactor_load_add(r, 1);
    reactor_post(r, &h->msg, handoff_run, h);
}

static void listeners_set_events(struct daemon *d, uint32_t events)
{
    for (unsigned i = 0; i < d->nlisteners; i++)
        if (d->listeners[i].fd >= 0)
            reactor_fd_mod(d->reactors[0], &d->listeners[i].h, events);
    for (struct listener *l = d->extra_listeners; l; l = l->next)
        if (l->fd >= 0)
            reactor_fd_mod(d->reactors[0], &l->h, events);
}

static void accept_resume(void *arg)
{
    struct daemon *d = arg;
    d->accept_paused = false;
    if (!atomic_load(&d->srv.shutting_down))
        listeners_set_events(d, EPOLLIN);
}

/* Out of descriptors: the pending connection stays in the backlog and the listener stays
 * readable, so accepting again at once would spin. Stop listening for a moment instead. */
static void accept_pause(struct daemon *d, const char *portal, int err)
{
    if (!d->accept_warned)
        LOG_WARN("accept on %s: %s; pausing accepts for %d ms (further occurrences not logged)",
                 portal, strerror(err), ACCEPT_PAUSE_MS);
    d->accept_warned = true;
    if (d->accept_paused)
        return;
    d->accept_paused = true;
    listeners_set_events(d, 0);
    reactor_timer_start(d->reactors[0], &d->accept_pause, ACCEPT_PAUSE_MS, accept_resume, d);
}

static void on_accept(void *arg, uint32_t events)
{
    struct listener *l = arg;
    struct daemon *d = l->d;
    (void)events;
    for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            switch (errno) {
            case EAGAIN:
                return;
            case EINTR:
            case ECONNABORTED:
            case EPROTO:
            case EPERM:
                continue;
            case EMFILE:
            case ENFILE:
            case ENOBUFS:
            case ENOMEM:
                accept_pause(d, l->portal.text, errno);
                return;
            default:
                LOG_WARN("accept on %s: %s", l->portal.text, strerror(errno));
                return;
            }
        }
        d->accept_warned = false;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        hand_off(d, fd, &l->portal);
    }
}

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

static void close_listeners_on_r0(struct daemon *d, struct reactor *r)
{
    reactor_timer_stop(r, &d->accept_pause);
    for (struct listener *l = d->extra_listeners; l; l = l->next) {
        if (l->fd >= 0) {
            reactor_fd_del(r, &l->h);
            close(l->fd);
            l->fd = -1;
        }
    }
    for (unsigned i = 0; i < d->nlisteners; i++) {
        struct listener *l = &d->listeners[i];
        if (l->fd < 0)
            continue;
        reactor_fd_del(r, &l->h);
        close(l->fd);
        l->fd = -1;
    }
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

/* --- listeners added at run time --- */

/* A listener on its way to or from reactor 0, shared by the waiting control thread and the
 * message, freed by the last of them (the control thread may give up waiting). */
struct listen_call {
    atomic_int refs;
    sem_t done;
    struct daemon *d;
    struct listener *l;
    bool open; /* watch l (opened already), else stop watching it and close it */
    bool link; /* a new listener: linked into d->extra_listeners once watched */
    int rc;
    struct reactor_msg msg;
};

static void listen_call_put(struct listen_call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        sem_destroy(&c->done);
        free(c);
    }
}

static void listen_call_run(void *arg)
{
    struct listen_call *c = arg;
    struct daemon *d = c->d;
    struct listener *l = c->l;
    if (!c->open) {
        /* Connections accepted through it keep their pointer to l->portal (and its
         * counters): the struct stays, only the socket goes. */
        if (l->fd >= 0) {
            reactor_fd_del(d->reactors[0], &l->h);
            close(l->fd);
            l->fd = -1;
        }
        c->rc = 0;
    } else {
        c->rc = atomic_load(&d->srv.shutting_down)
                    ? -ESHUTDOWN
                    : reactor_fd_add(d->reactors[0], &l->h, l->fd, d->accept_paused ? 0 : EPOLLIN,
                                     on_accept, l);
        if (c->rc == 0 && c->link) {
            l->next = d->extra_listeners;
            d->extra_listeners = l;
        } else if (c->rc < 0) {
            close(l->fd);
            l->fd = -1;
            if (c->link) {
                iostats_free(l->portal.stats);
                free(l);
            }
        }
    }
    sem_post(&c->done);
    listen_call_put(c);
}

/* Any listener for this address, listening or closed at run time. */
static struct listener *find_listener(struct daemon *d, const char *text)
{
    for (unsigned i = 0; i < d->nlisteners; i++)
        if (strcmp(d->listeners[i].portal.text, text) == 0)
            return &d->listeners[i];
    for (struct listener *l = d->extra_listeners; l; l = l->next)
        if (strcmp(l->portal.text, text) == 0)
            return l;
    return NULL;
}

/* Post c to reactor 0 and wait (bounded) for it: 0, the call's error, or -ETIMEDOUT. */
static int listen_call_wait(struct daemon *d, struct listen_call *c)
{
    atomic_init(&c->refs, 2);
    sem_init(&c->done, 0, 0);
    c->d = d;
    reactor_post(d->reactors[0], &c->msg, listen_call_run, c);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += SYNC_CALL_TIMEOUT_S;
    int waited;
    while ((waited = sem_timedwait(&c->done, &ts)) < 0 && errno == EINTR)
        ;
    int rc = waited < 0 ? -ETIMEDOUT : c->rc;
    listen_call_put(c);
    return rc;
}

int daemon_listen_portal(struct daemon *d, const struct target_portal *p, char *err, size_t errlen)
{
    struct listener *l = find_listener(d, p->text);
    if (l && l->fd >= 0)
        return 0;
    bool fresh = !l;
    struct listen_call *c = calloc(1, sizeof(*c));
    if (fresh)
        l = calloc(1, sizeof(*l));
    if (!l || !c) {
        if (fresh)
            free(l);
        free(c);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (fresh) {
        l->d = d;
        l->fd = -1;
    }
    int rc = listener_open(l, p); /* a closed listener keeps its counters */
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", p->text, strerror(-rc));
        if (fresh) {
            iostats_free(l->portal.stats);
            free(l);
        }
        free(c);
        return -1;
    }
    c->l = l;
    c->open = true;
    c->link = fresh;
    rc = listen_call_wait(d, c);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", p->text, strerror(-rc));
        return -1;
    }
    LOG_INFO("listening on %s", p->text);
    return 0;
}

int daemon_unlisten_portal(struct daemon *d, const char *text)
{
    struct listener *l = find_listener(d, text);
    if (!l || l->fd < 0)
        return 0;
    struct listen_call *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->l = l;
    c->open = false;
    int rc = listen_call_wait(d, c);
    if (rc == 0)
        LOG_INFO("stopped listening on %s", text);
    return rc;
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

static int daemon_open_listeners(struct daemon *d)
{
    d->listeners = calloc(d->cfg.nlisten ? d->cfg.nlisten : 1, sizeof(*d->listeners));
    if (!d->listeners)
        return -1;
    for (unsigned i = 0; i < d->cfg.nlisten; i++) {
        struct listener *l = &d->listeners[i];
        l->d = d;
        l->fd = -1;
        d->nlisteners = i + 1;
        int rc = listener_open(l, &d->cfg.listen[i]);
        if (rc < 0) {
            LOG_ERR("cannot listen on %s: %s", d->cfg.listen[i].text, strerror(-rc));
            /* Once: the log line is on stderr already unless the log goes to syslog. */
            if (d->cfg.log_syslog)
                fprintf(stderr, "linerate-target: cannot listen on %s: %s\n", d->cfg.listen[i].text,
                        strerror(-rc));
            return -1;
        }
    }
    return 0;
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
    d->srv.nop_interval_s = d->cfg.nop_interval_s;
    d->srv.nop_timeout_s = d->cfg.nop_timeout_s;
    d->srv.login_timeout_s = d->cfg.login_timeout_s;
    d->srv.inject = d->cfg.inject;
    bs_inject_delay((unsigned)d->cfg.inject.store_delay_ms); /* reactors run no I/O yet */
    d->srv.limits = d->cfg.limits;
    atomic_store(&d->srv.shutting_down, false);

    /* Listeners are registered before reactor 0 runs, so no message is needed. */
    for (unsigned i = 0; i < d->nlisteners; i++) {
        struct listener *l = &d->listeners[i];
        rc = reactor_fd_add(d->reactors[0], &l->h, l->fd, EPOLLIN, on_accept, l);
        if (rc < 0) {
            LOG_ERR("cannot watch listener %s: %s", l->portal.text, strerror(-rc));
            return -1;
        }
    }
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
    bool running = d->nthreads_started == d->nreactors && d->nreactors > 0 && calls;
    if (d->srv_ready)
        atomic_store(&d->srv.shutting_down, true);
    if (running) {
        if (sync_call(&calls[2 * d->nreactors], d, d->reactors[0], close_listeners_on_r0) < 0)
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
            int left = atomic_load(&d->srv.nconns);
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
    for (unsigned i = 0; i < d->nlisteners; i++)
        iostats_free(d->listeners[i].portal.stats);
    free(d->listeners);
    while (d->extra_listeners) {
        struct listener *l = d->extra_listeners;
        d->extra_listeners = l->next;
        if (l->fd >= 0)
            close(l->fd);
        iostats_free(l->portal.stats);
        free(l);
    }
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

/* Tell a service manager (NOTIFY_SOCKET) that the daemon serves, and what (`note`, if any,
 * goes after it in the STATUS line). */
void daemon_notify_ready(const struct daemon *d, const char *note)
{
    unsigned luns = 0;
    for (unsigned t = 0; t < d->cfg.ntargets; t++)
        luns += d->cfg.targets[t].nluns;
    int rc = sd_notifyf_lr("READY=1\nSTATUS=serving %u target%s, %u LUN%s on %u portal%s%s%s",
                           d->cfg.ntargets, d->cfg.ntargets == 1 ? "" : "s", luns,
                           luns == 1 ? "" : "s", d->cfg.nlisten, d->cfg.nlisten == 1 ? "" : "s",
                           note ? "; " : "", note ? note : "");
    if (rc < 0)
        LOG_WARN("NOTIFY_SOCKET: cannot notify the service manager: %s", strerror(-rc));
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
