/* A cap on commands per second and bytes per second (total, read, write) with a burst, shared
 * by every thread that charges it: a LUN holds one (scsi/throttle.c), and anything else that
 * commands pass through (an initiator entry) can hold one and be charged by the same calls.
 *
 * It is a generic cell rate algorithm (GCRA, the virtual-scheduling form of a token bucket)
 * that never refuses: each command reserves its slot on one clock per capped dimension with a
 * compare-and-swap, and is told when that slot comes. Slots are handed out in the order the
 * charges happen, so commands charged one after another on one thread go in that order. No
 * lock anywhere; an uncapped limiter costs its user one relaxed load (rate_limit_on). */
#ifndef LR_UTIL_RATE_LIMIT_H
#define LR_UTIL_RATE_LIMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The capped dimensions: commands per second and bytes per second, of every kind, of reads,
 * of writes. */
enum rate_dim {
    RATE_IOPS,
    RATE_READ_IOPS,
    RATE_WRITE_IOPS,
    RATE_BPS,
    RATE_READ_BPS,
    RATE_WRITE_BPS,
    RATE_NDIM,
};

/* What the admin sets: cap[d] per second (0: none) and the burst, how many milliseconds' worth
 * of every cap a limiter that was idle lets through at once (0: one command at a time). */
struct rate_limit_conf {
    uint64_t cap[RATE_NDIM];
    uint32_t burst_ms;
};

/* The least burst in force whatever is set: the waits' timer resolution and lateness, so that
 * over any 100 ms a capped LUN gets its cap within 5 %. */
#define RATE_SLACK_NS 5000000ull
/* The longest burst accepted (a minute's worth of each cap). */
#define RATE_BURST_MS_MAX 60000u

struct rate_limit {
    atomic_bool on; /* any cap set */
    /* per dimension: nanoseconds per unit (a command, a byte) in 16.16 fixed point (0: not
     * capped), and the theoretical arrival time of the next unit (ns, CLOCK_MONOTONIC) */
    _Atomic uint64_t cost[RATE_NDIM];
    _Atomic uint64_t tat[RATE_NDIM];
    _Atomic uint64_t burst_ns;
    _Atomic uint64_t cap[RATE_NDIM]; /* as set, for show */
    _Atomic uint32_t burst_ms;
    /* counted for stats: commands that had to wait, and the nanoseconds they waited in all */
    _Atomic uint64_t delayed, delayed_ns;
};

enum rate_op { RATE_OP_READ, RATE_OP_WRITE, RATE_OP_OTHER };

void rate_limit_init(struct rate_limit *r, const struct rate_limit_conf *c);
/* A new setting, from any thread while others charge: commands charged afterwards are paced by
 * it, behind the slots already handed out; where a cap was raised or newly set, no further
 * than its burst from now (slots reserved under the old, slower cap are not waited out). */
void rate_limit_set(struct rate_limit *r, const struct rate_limit_conf *c);
void rate_limit_get(const struct rate_limit *r, struct rate_limit_conf *c);
bool rate_limit_conf_any(const struct rate_limit_conf *c);
/* The same caps and burst (field by field: the struct has padding a memcmp would read). */
bool rate_limit_conf_same(const struct rate_limit_conf *a, const struct rate_limit_conf *b);

static inline bool rate_limit_on(const struct rate_limit *r)
{
    return atomic_load_explicit(&r->on, memory_order_relaxed);
}

/* The slots one charge reserved, per dimension: where the clock was left and how far it moved
 * (need 0: that dimension was not charged), so an aborted command can give them back. */
struct rate_slot {
    uint64_t end[RATE_NDIM], need[RATE_NDIM];
};

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t rate_limit_now_ns(void);
/* Reserve a command of kind op moving `bytes`: returns when (ns, the clock above) it may go;
 * at or before now, at once. The slots reserved go to *slot unless it is NULL. */
uint64_t rate_limit_charge(struct rate_limit *r, enum rate_op op, uint64_t bytes, uint64_t now,
                           struct rate_slot *slot);
/* A command charged into *slot will not run: each slot that is still the last one handed out
 * is taken back (a later one stays, so nobody behind it moves forward out of order). */
void rate_limit_refund(struct rate_limit *r, const struct rate_slot *slot);
/* A command charged had to wait `ns`: counted for stats. */
void rate_limit_count_delay(struct rate_limit *r, uint64_t ns);

#endif
