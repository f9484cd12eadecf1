/* The listening sockets: owned by reactor 0, which accepts and hands each connection to the
 * least loaded reactor; those of the configuration opened at start, others opened and closed
 * at run time for the control thread (a target or portal added or removed). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "reactor/reactor.h"
#include "daemon/daemon.h"

#define LISTEN_BACKLOG 1024
#define ACCEPTS_PER_WAKEUP 64 /* then let reactor 0 serve its own connections */
#define ACCEPT_PAUSE_MS 200   /* out of descriptors: retry accepting after this */
#define LISTEN_CALL_TIMEOUT_S 5

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

/* --- at start and at exit --- */

int daemon_open_listeners(struct daemon *d)
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

int daemon_watch_listeners(struct daemon *d)
{
    for (unsigned i = 0; i < d->nlisteners; i++) {
        struct listener *l = &d->listeners[i];
        int rc = reactor_fd_add(d->reactors[0], &l->h, l->fd, EPOLLIN, on_accept, l);
        if (rc < 0) {
            LOG_ERR("cannot watch listener %s: %s", l->portal.text, strerror(-rc));
            return -1;
        }
    }
    return 0;
}

void daemon_close_listeners(struct daemon *d, struct reactor *r)
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

void daemon_free_listeners(struct daemon *d)
{
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
    ts.tv_sec += LISTEN_CALL_TIMEOUT_S;
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
