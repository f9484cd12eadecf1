/* One event loop per thread (epoll). A reactor owns the file descriptors registered on it,
 * runs timers, runs functions posted to it from other threads (messages), and calls its
 * end-of-turn hooks after each batch of events so that replies are flushed together.
 *
 * Messages are embedded; posting cannot fail. A struct reactor_msg lives in the object it is
 * about (a connection, a task, one leg of a fan-out), the way a reactor_deferred does, so the
 * cross-thread path never allocates and has nothing to run dry. Code that needs a variable
 * number of messages in flight embeds one in each object that exists anyway, or allocates the
 * object that carries them up front, where running out of memory has a protocol answer (a TMF
 * answered FUNCTION REJECTED, a command INSUFFICIENT RESOURCES, a connection refused), never
 * at the moment of posting. */
#ifndef LR_REACTOR_H
#define LR_REACTOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "util/list.h"

struct reactor;

typedef void (*reactor_fd_fn)(void *arg, uint32_t events);
typedef void (*reactor_fn)(void *arg);

/* A registered descriptor. Embedded by its owner; valid until reactor_fd_del(). Removed on its
 * reactor's thread, it may be freed at once, even by a callback or message in the middle of a
 * batch of events that still holds one for it: that event is dropped. */
struct reactor_fd {
    int fd;
    uint32_t events;
    reactor_fd_fn fn;
    void *arg;
};

/* A one-shot timer, re-armed by its callback if it wants to be periodic. */
struct reactor_timer {
    uint64_t deadline_ms;
    reactor_fn fn;
    void *arg;
    bool armed;
    struct list_node node;
};

/* An end-of-turn hook: run once after the current batch of events, then forgotten. */
struct reactor_deferred {
    reactor_fn fn;
    void *arg;
    bool queued;
    struct list_node node;
};

/* A message: fn(arg) run on a reactor's thread (see the policy above). Zeroed means idle. The
 * owner keeps it, and what fn needs, alive until fn has started (typically the message holds a
 * reference that fn drops); it may free or reuse it from fn itself. */
struct reactor_msg {
    reactor_fn fn;
    void *arg;
    struct reactor_msg *next;
    atomic_bool pending; /* posted or yielded, fn not started yet */
};

/* A buffer the reactor's sockets take turns with (iscsi/wire.c reads into it): with hundreds of
 * connections on one thread, a buffer of each one's own is cold whenever it is used again,
 * while one shared buffer stays in cache. On the reactor's thread only; `busy` while one user
 * has it. */
#define REACTOR_SCRATCH_SIZE (512u * 1024u)
struct reactor_scratch {
    uint8_t *buf;
    uint32_t size;
    bool busy;
};

struct reactor *reactor_create(int id);
/* After a turn with events, poll (epoll_wait without blocking) for up to `us` microseconds
 * before sleeping; 0 (the default) sleeps at once. Set before reactor_run. */
void reactor_set_poll_us(struct reactor *r, unsigned us);
/* After its loop has returned, on a thread of the caller's choice: messages still queued
 * (posted or yielded) and deferred hooks are run there, not dropped, until none is left (a
 * message typically holds a reference its fn drops); reactor_self() is r meanwhile. Posting
 * to r after it is destroyed is a bug. */
void reactor_destroy(struct reactor *r);
int reactor_id(const struct reactor *r);
/* The reactor running on the calling thread, or NULL. */
struct reactor *reactor_self(void);
/* Whether the reactor on the calling thread had nothing to do just before the events it is
 * dispatching now (it slept, or polled and found none): then it is the faster end, and the
 * peers it serves are what sets the pace. false off a reactor's thread. */
bool reactor_was_idle(void);
/* r's scratch buffer (REACTOR_SCRATCH_SIZE bytes, allocated at the first call; its pages come
 * in as they are written), or NULL when memory ran out. */
struct reactor_scratch *reactor_scratch(struct reactor *r);

int reactor_fd_add(struct reactor *r, struct reactor_fd *h, int fd, uint32_t events,
                   reactor_fd_fn fn, void *arg);
int reactor_fd_mod(struct reactor *r, struct reactor_fd *h, uint32_t events);
void reactor_fd_del(struct reactor *r, struct reactor_fd *h);

void reactor_timer_start(struct reactor *r, struct reactor_timer *t, uint64_t ms, reactor_fn fn,
                         void *arg);
/* The same at an absolute deadline on reactor_now_ms()'s clock. Timers with one deadline fire
 * in the order they were started, so work started in order with non-decreasing deadlines
 * runs in that order. */
void reactor_timer_at(struct reactor *r, struct reactor_timer *t, uint64_t deadline_ms,
                      reactor_fn fn, void *arg);
void reactor_timer_stop(struct reactor *r, struct reactor_timer *t);
uint64_t reactor_now_ms(void);

/* Queue fn(arg) to run at the end of this loop turn (idempotent while queued). */
void reactor_defer(struct reactor *r, struct reactor_deferred *d, reactor_fn fn, void *arg);
/* Take d out of its reactor's queue if it is there (on that reactor's thread, before freeing
 * d or running its work now). Returns whether it was queued. */
bool reactor_undefer(struct reactor_deferred *d);

/* Run fn(arg) on r's thread, from any thread (r's own included): m is linked into r's inbox
 * (a lock-free list; the eventfd is written only when the inbox was empty) and runs on a later
 * turn of r's loop. Messages from one thread run in the order they were posted. Cannot fail.
 * A message already pending is not queued twice: the post does nothing and returns false
 * (the earlier post's fn and arg stand), so a message is a kick and several posts before it
 * runs make one run. Returns true when this call queued m. pending is cleared just before fn
 * runs, so fn may post m again; that run comes on a later turn, after other events. */
bool reactor_post(struct reactor *r, struct reactor_msg *m, reactor_fn fn, void *arg);

/* On r's own thread: run fn(arg) on the next loop turn, after the next epoll_wait (which then
 * does not block) has dispatched whatever descriptors are ready. For long work done in steps:
 * unlike reactor_defer, whose hooks run until none is left within the turn (a hook deferring
 * itself would never let the loop go on), a step that yields again lets the other descriptors
 * run between two steps. Same kick semantics as reactor_post (false: already pending). */
bool reactor_yield(struct reactor *r, struct reactor_msg *m, reactor_fn fn, void *arg);

/* Load hint for the listener: connections currently owned (maintained by the owners). */
void reactor_load_add(struct reactor *r, int delta);
int reactor_load(const struct reactor *r);

/* Run the loop on the calling thread until reactor_stop(). */
void reactor_run(struct reactor *r);
void reactor_stop(struct reactor *r);
/* One turn without blocking, on the calling thread (which must not be running another
 * reactor's loop): expired timers, deferred hooks, ready descriptors and messages, what was
 * yielded before the turn, deferred hooks again. Returns how many callbacks ran; 0 means r was
 * idle. Tests drive a reactor this way, keeping everything on their own thread. */
int reactor_poll(struct reactor *r);

#endif
