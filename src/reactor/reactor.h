/* One event loop per thread (epoll). A reactor owns the file descriptors registered on it,
 * runs timers, runs functions sent to it from other threads (messages), and calls its
 * end-of-turn hooks after each batch of events so that replies are flushed together. */
#ifndef LR_REACTOR_H
#define LR_REACTOR_H

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

struct reactor *reactor_create(int id);
void reactor_destroy(struct reactor *r);
int reactor_id(const struct reactor *r);
/* The reactor running on the calling thread, or NULL. */
struct reactor *reactor_self(void);

int reactor_fd_add(struct reactor *r, struct reactor_fd *h, int fd, uint32_t events,
                   reactor_fd_fn fn, void *arg);
int reactor_fd_mod(struct reactor *r, struct reactor_fd *h, uint32_t events);
void reactor_fd_del(struct reactor *r, struct reactor_fd *h);

void reactor_timer_start(struct reactor *r, struct reactor_timer *t, uint64_t ms, reactor_fn fn,
                         void *arg);
void reactor_timer_stop(struct reactor *r, struct reactor_timer *t);
uint64_t reactor_now_ms(void);

/* Queue fn(arg) to run at the end of this loop turn (idempotent while queued). */
void reactor_defer(struct reactor *r, struct reactor_deferred *d, reactor_fn fn, void *arg);
/* Take d out of its reactor's queue if it is there (on that reactor's thread, before freeing
 * d or running its work now). Returns whether it was queued. */
bool reactor_undefer(struct reactor_deferred *d);

/* Run fn(arg) on r's thread. Safe from any thread. Returns 0 or -errno. */
int reactor_send(struct reactor *r, reactor_fn fn, void *arg);

/* Load hint for the listener: connections currently owned (maintained by the owners). */
void reactor_load_add(struct reactor *r, int delta);
int reactor_load(const struct reactor *r);

/* Run the loop on the calling thread until reactor_stop(). */
void reactor_run(struct reactor *r);
void reactor_stop(struct reactor *r);
/* One turn without blocking, on the calling thread (which must not be running another
 * reactor's loop): expired timers, deferred hooks, ready descriptors and messages, deferred
 * hooks again. Returns how many callbacks ran; 0 means r was idle. Tests drive a reactor this
 * way, keeping everything on their own thread. */
int reactor_poll(struct reactor *r);

#endif
