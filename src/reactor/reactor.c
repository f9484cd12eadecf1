/* epoll-based reactor: fds, timers (sorted list; there are few per reactor: one idle timer
 * per connection), cross-thread messages through an eventfd-signalled queue, and end-of-turn
 * hooks that give connections a place to flush everything they produced in one writev. */
#include "reactor/reactor.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

#define REACTOR_MAX_EVENTS 128

struct reactor_msg {
    reactor_fn fn;
    void *arg;
    struct reactor_msg *next;
};

struct reactor {
    int id;
    int epfd;
    int msg_efd;
    struct reactor_fd msg_handle;
    pthread_mutex_t msg_lock;
    struct reactor_msg *msg_head, *msg_tail;
    struct list_node timers;   /* sorted by deadline */
    struct list_node deferred; /* end-of-turn hooks */
    atomic_int load;
    atomic_bool stopping;
    /* The batch of events being dispatched: a descriptor removed meanwhile loses its entry, so
     * that the owner may free it before the batch is done (see reactor_fd_del). */
    struct epoll_event *batch;
    int batch_n;
};

static __thread struct reactor *current_reactor;

uint64_t reactor_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void reactor_drain_messages(void *arg, uint32_t events)
{
    struct reactor *r = arg;
    (void)events;
    uint64_t v;
    ssize_t n = read(r->msg_efd, &v, sizeof(v));
    (void)n;
    pthread_mutex_lock(&r->msg_lock);
    struct reactor_msg *m = r->msg_head;
    r->msg_head = r->msg_tail = NULL;
    pthread_mutex_unlock(&r->msg_lock);
    while (m) {
        struct reactor_msg *next = m->next;
        m->fn(m->arg);
        free(m);
        m = next;
    }
}

struct reactor *reactor_create(int id)
{
    struct reactor *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->id = id;
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->msg_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->epfd < 0 || r->msg_efd < 0) {
        LOG_ERR("reactor %d: cannot create epoll/eventfd", id);
        if (r->epfd >= 0)
            close(r->epfd);
        if (r->msg_efd >= 0)
            close(r->msg_efd);
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->msg_lock, NULL);
    list_init(&r->timers);
    list_init(&r->deferred);
    reactor_fd_add(r, &r->msg_handle, r->msg_efd, EPOLLIN, reactor_drain_messages, r);
    return r;
}

void reactor_destroy(struct reactor *r)
{
    if (!r)
        return;
    reactor_drain_messages(r, 0);
    close(r->msg_efd);
    close(r->epfd);
    pthread_mutex_destroy(&r->msg_lock);
    free(r);
}

int reactor_id(const struct reactor *r)
{
    return r->id;
}

struct reactor *reactor_self(void)
{
    return current_reactor;
}

int reactor_fd_add(struct reactor *r, struct reactor_fd *h, int fd, uint32_t events,
                   reactor_fd_fn fn, void *arg)
{
    h->fd = fd;
    h->events = events;
    h->fn = fn;
    h->arg = arg;
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int reactor_fd_mod(struct reactor *r, struct reactor_fd *h, uint32_t events)
{
    if (h->events == events)
        return 0;
    h->events = events;
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(r->epfd, EPOLL_CTL_MOD, h->fd, &ev) < 0 ? -errno : 0;
}

void reactor_fd_del(struct reactor *r, struct reactor_fd *h)
{
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, h->fd, NULL);
    h->fn = NULL;
    /* An event for h may still wait in the batch being dispatched, after the callback (or
     * message) that removes h, which may also free it: h->fn = NULL is not enough then. */
    if (r == current_reactor)
        for (int i = 0; i < r->batch_n; i++)
            if (r->batch[i].data.ptr == h)
                r->batch[i].data.ptr = NULL;
}

void reactor_timer_start(struct reactor *r, struct reactor_timer *t, uint64_t ms, reactor_fn fn,
                         void *arg)
{
    if (t->armed)
        list_del(&t->node);
    t->deadline_ms = reactor_now_ms() + ms;
    t->fn = fn;
    t->arg = arg;
    t->armed = true;
    /* Insert sorted, scanning from the tail: new timers usually expire last. */
    struct list_node *pos = r->timers.prev;
    while (pos != &r->timers &&
           list_entry(pos, struct reactor_timer, node)->deadline_ms > t->deadline_ms)
        pos = pos->prev;
    t->node.prev = pos;
    t->node.next = pos->next;
    pos->next->prev = &t->node;
    pos->next = &t->node;
}

void reactor_timer_stop(struct reactor *r, struct reactor_timer *t)
{
    (void)r;
    if (t->armed) {
        list_del(&t->node);
        t->armed = false;
    }
}

void reactor_defer(struct reactor *r, struct reactor_deferred *d, reactor_fn fn, void *arg)
{
    if (d->queued)
        return;
    d->fn = fn;
    d->arg = arg;
    d->queued = true;
    list_add_tail(&r->deferred, &d->node);
}

bool reactor_undefer(struct reactor_deferred *d)
{
    if (!d->queued)
        return false;
    list_del(&d->node);
    d->queued = false;
    return true;
}

int reactor_send(struct reactor *r, reactor_fn fn, void *arg)
{
    struct reactor_msg *m = malloc(sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->fn = fn;
    m->arg = arg;
    m->next = NULL;
    pthread_mutex_lock(&r->msg_lock);
    if (r->msg_tail)
        r->msg_tail->next = m;
    else
        r->msg_head = m;
    r->msg_tail = m;
    pthread_mutex_unlock(&r->msg_lock);
    uint64_t one = 1;
    ssize_t n = write(r->msg_efd, &one, sizeof(one));
    (void)n;
    return 0;
}

void reactor_load_add(struct reactor *r, int delta)
{
    atomic_fetch_add(&r->load, delta);
}

int reactor_load(const struct reactor *r)
{
    return atomic_load(&((struct reactor *)r)->load);
}

/* Returns how many hooks ran. */
static int reactor_run_deferred(struct reactor *r)
{
    /* A hook may queue further hooks (a flush that completes I/O); run until quiet. */
    struct list_node *n;
    int ran = 0;
    while ((n = list_pop(&r->deferred)) != NULL) {
        struct reactor_deferred *d = list_entry(n, struct reactor_deferred, node);
        d->queued = false;
        d->fn(d->arg);
        ran++;
    }
    return ran;
}

/* Runs the expired timers (counted in *ran if given); returns ms until the next, or -1. */
static int reactor_run_timers(struct reactor *r, int *ran)
{
    uint64_t now = reactor_now_ms();
    while (!list_empty(&r->timers)) {
        struct reactor_timer *t = list_entry(r->timers.next, struct reactor_timer, node);
        if (t->deadline_ms > now)
            return (int)(t->deadline_ms - now);
        list_del(&t->node);
        t->armed = false;
        t->fn(t->arg);
        if (ran)
            (*ran)++;
    }
    return -1;
}

/* Dispatch one batch of ready descriptors; returns how many callbacks ran. */
static int reactor_dispatch(struct reactor *r, struct epoll_event *events, int n)
{
    int ran = 0;
    r->batch = events;
    r->batch_n = n;
    for (int i = 0; i < n; i++) {
        struct reactor_fd *h = events[i].data.ptr;
        if (h && h->fn) {
            h->fn(h->arg, events[i].events);
            ran++;
        }
    }
    r->batch_n = 0;
    return ran;
}

int reactor_poll(struct reactor *r)
{
    struct epoll_event events[REACTOR_MAX_EVENTS];
    struct reactor *prev = current_reactor;
    current_reactor = r;
    int ran = 0;
    reactor_run_timers(r, &ran);
    ran += reactor_run_deferred(r);
    int n = epoll_wait(r->epfd, events, REACTOR_MAX_EVENTS, 0);
    if (n > 0)
        ran += reactor_dispatch(r, events, n);
    ran += reactor_run_deferred(r);
    current_reactor = prev;
    return ran;
}

void reactor_run(struct reactor *r)
{
    struct epoll_event events[REACTOR_MAX_EVENTS];
    current_reactor = r;
    while (!atomic_load(&r->stopping)) {
        int timeout = reactor_run_timers(r, NULL);
        reactor_run_deferred(r);
        if (timeout < 0 || timeout > 1000)
            timeout = 1000;
        int n = epoll_wait(r->epfd, events, REACTOR_MAX_EVENTS, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            LOG_ERR("reactor %d: epoll_wait: %m", r->id);
            break;
        }
        reactor_dispatch(r, events, n);
        reactor_run_deferred(r);
    }
    reactor_run_deferred(r);
    /* Work done on this thread after the loop (a shutdown flush) must not be queued to a
     * reactor that no longer runs. */
    current_reactor = NULL;
    atomic_store(&r->stopping, false);
}

void reactor_stop(struct reactor *r)
{
    atomic_store(&r->stopping, true);
    uint64_t one = 1;
    ssize_t n = write(r->msg_efd, &one, sizeof(one));
    (void)n;
}
