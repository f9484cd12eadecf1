/* The event loop linerate's initiator runs on: one reactor per thread, which owns the sessions
 * (and connections) created on it and runs their callbacks. The caller makes one or more,
 * runs each on a thread of its own, and hands work to them with lr_reactor_call. This is
 * all of the loop a library user needs; the rest of it is internal to linerate. */
#ifndef LINERATE_REACTOR_H
#define LINERATE_REACTOR_H

#include <stdint.h>

struct reactor;  /* opaque */
struct lr_timer; /* opaque */

/* A new reactor; id names it in logs. NULL when out of memory or descriptors. */
struct reactor *lr_reactor_create(int id);
/* Frees a reactor that no longer runs (lr_reactor_run returned) and owns no session. */
void lr_reactor_destroy(struct reactor *r);
/* Runs the loop on the calling thread until lr_reactor_stop(r). */
void lr_reactor_run(struct reactor *r);
/* Makes lr_reactor_run return after the current turn. Safe from any thread. */
void lr_reactor_stop(struct reactor *r);
/* Runs fn(arg) on r's thread, in order with the other calls made to r. Safe from any thread.
 * Returns 0, or -ENOMEM (fn will not run). */
int lr_reactor_call(struct reactor *r, void (*fn)(void *arg), void *arg);
/* The reactor running on the calling thread, or NULL. */
struct reactor *lr_reactor_self(void);

/* A one-shot timer on r that runs fn(arg) on r's thread. NULL when out of memory. */
struct lr_timer *lr_timer_new(struct reactor *r, void (*fn)(void *arg), void *arg);
/* On r's thread: fire in ms milliseconds (re-arms a timer already armed; fn may re-arm it for
 * a periodic timer). */
void lr_timer_start(struct lr_timer *t, uint64_t ms);
/* On r's thread: disarm; nothing if it is not armed. */
void lr_timer_stop(struct lr_timer *t);
/* Frees t (NULL: nothing). On r's thread, where an armed timer is stopped first; or once r no
 * longer runs, with t not armed. */
void lr_timer_free(struct lr_timer *t);

#endif
