/* The public face of the reactor (include/linerate/reactor.h): what a user of the initiator
 * library needs to run sessions, as thin wrappers over the internal API, and timers that the
 * caller holds by pointer so their layout stays the reactor's own. */
#include <errno.h>
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

/* The public call carries no storage of the caller's (its types are opaque), so it allocates
 * the message here, where the failure is returned to the application (-ENOMEM); the internal
 * rule is unchanged: posting itself cannot fail. */
struct lr_call {
    struct reactor_msg msg;
    void (*fn)(void *arg);
    void *arg;
};

static void lr_call_run(void *p)
{
    struct lr_call *c = p;
    void (*fn)(void *) = c->fn;
    void *arg = c->arg;
    free(c);
    fn(arg);
}

int lr_reactor_call(struct reactor *r, void (*fn)(void *arg), void *arg)
{
    struct lr_call *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fn = fn;
    c->arg = arg;
    reactor_post(r, &c->msg, lr_call_run, c);
    return 0;
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
