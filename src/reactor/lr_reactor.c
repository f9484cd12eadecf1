/* The public face of the reactor (include/linerate/reactor.h): what a user of the initiator
 * library needs to run sessions, as thin wrappers over the internal API, and timers that the
 * caller holds by pointer so their layout stays the reactor's own. */
#include <stdlib.h>

#include "linerate/reactor.h"
#include "reactor/reactor.h"

struct reactor *lr_reactor_create(int id)
{
    return reactor_create(id);
}

void lr_reactor_destroy(struct reactor *r)
{
    reactor_destroy(r);
}

void lr_reactor_run(struct reactor *r)
{
    reactor_run(r);
}

void lr_reactor_stop(struct reactor *r)
{
    reactor_stop(r);
}

int lr_reactor_call(struct reactor *r, void (*fn)(void *arg), void *arg)
{
    return reactor_send(r, fn, arg);
}

struct reactor *lr_reactor_self(void)
{
    return reactor_self();
}

struct lr_timer {
    struct reactor *r;
    struct reactor_timer t;
    reactor_fn fn;
    void *arg;
};

struct lr_timer *lr_timer_new(struct reactor *r, void (*fn)(void *arg), void *arg)
{
    struct lr_timer *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->r = r;
    t->fn = fn;
    t->arg = arg;
    return t;
}

void lr_timer_start(struct lr_timer *t, uint64_t ms)
{
    reactor_timer_start(t->r, &t->t, ms, t->fn, t->arg);
}

void lr_timer_stop(struct lr_timer *t)
{
    reactor_timer_stop(t->r, &t->t);
}

void lr_timer_free(struct lr_timer *t)
{
    if (!t)
        return;
    /* Off r's thread the reactor no longer runs (the contract): its timer list is not ours to
     * touch, and may be gone with it. */
    if (reactor_self() == t->r)
        reactor_timer_stop(t->r, &t->t);
    free(t);
}
