/* IOPS and bytes-per-second caps with a burst (rate_limit.h): the clocks of a GCRA. */
#include <string.h>
#include <time.h>

#include "util/rate_limit.h"

#define NS_PER_S 1000000000ull

bool rate_limit_conf_any(const struct rate_limit_conf *c)
{
    for (unsigned d = 0; d < RATE_NDIM; d++)
        if (c->cap[d])
            return true;
    return false;
}

bool rate_limit_conf_same(const struct rate_limit_conf *a, const struct rate_limit_conf *b)
{
    for (unsigned d = 0; d < RATE_NDIM; d++)
        if (a->cap[d] != b->cap[d])
            return false;
    return a->burst_ms == b->burst_ms;
}

void rate_limit_init(struct rate_limit *r, const struct rate_limit_conf *c)
{
    memset(r, 0, sizeof(*r));
    rate_limit_set(r, c);
}

/* Pull clock d back to at most `limit` (another thread may be charging it meanwhile). */
static void clamp_tat(struct rate_limit *r, unsigned d, uint64_t limit)
{
    uint64_t old = atomic_load_explicit(&r->tat[d], memory_order_relaxed);
    while (old > limit && !atomic_compare_exchange_weak_explicit(
                              &r->tat[d], &old, limit, memory_order_relaxed, memory_order_relaxed))
        ;
}

void rate_limit_set(struct rate_limit *r, const struct rate_limit_conf *c)
{
    /* the waits are reactor timers, in whole milliseconds and late by up to a loop turn: a
     * slot missed by that much is taken late rather than lost, or a cap of 20000 IOPS would
     * give a session at QD 32 two thirds of it */
    uint64_t burst = (uint64_t)c->burst_ms * 1000000u;
    burst = burst > RATE_SLACK_NS ? burst : RATE_SLACK_NS;
    uint64_t now = rate_limit_now_ns();
    for (unsigned d = 0; d < RATE_NDIM; d++) {
        /* 16.16 fixed point keeps a byte's cost exact enough at 10 GB/s (0.1 ns) */
        uint64_t cost = c->cap[d] ? (uint64_t)(((unsigned __int128)NS_PER_S << 16) / c->cap[d]) : 0;
        cost = cost ? cost : (c->cap[d] ? 1 : 0);
        uint64_t was = atomic_exchange_explicit(&r->cost[d], cost, memory_order_relaxed);
        /* A cap raised, or set where there was none (its clock may be left from an old cap,
         * minutes ahead): the slots reserved at the old pace are not made to wait. The next
         * command's slot starts within the burst of now, so it goes at once. */
        if (cost && (!was || cost < was))
            clamp_tat(r, d, now + burst);
        atomic_store_explicit(&r->cap[d], c->cap[d], memory_order_relaxed);
    }
    atomic_store_explicit(&r->burst_ns, burst, memory_order_relaxed);
    atomic_store_explicit(&r->burst_ms, c->burst_ms, memory_order_relaxed);
    atomic_store_explicit(&r->on, rate_limit_conf_any(c), memory_order_release);
}

void rate_limit_get(const struct rate_limit *r, struct rate_limit_conf *c)
{
    for (unsigned d = 0; d < RATE_NDIM; d++)
        c->cap[d] = atomic_load_explicit(&r->cap[d], memory_order_relaxed);
    c->burst_ms = atomic_load_explicit(&r->burst_ms, memory_order_relaxed);
}

uint64_t rate_limit_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* One dimension: the slot starts when the previous one ended, or now if the clock fell behind
 * (an idle limiter saves no credit but the burst); returns its start. */
static uint64_t charge_one(struct rate_limit *r, enum rate_dim d, uint64_t units, uint64_t now,
                           struct rate_slot *slot)
{
    uint64_t cost = atomic_load_explicit(&r->cost[d], memory_order_relaxed);
    if (!cost)
        return 0;
    uint64_t need = (uint64_t)(((unsigned __int128)units * cost) >> 16);
    uint64_t old = atomic_load_explicit(&r->tat[d], memory_order_relaxed), start;
    do
        start = old > now ? old : now;
    while (!atomic_compare_exchange_weak_explicit(&r->tat[d], &old, start + need,
                                                  memory_order_relaxed, memory_order_relaxed));
    if (slot)
        slot->end[d] = start + need, slot->need[d] = need;
    return start;
}

uint64_t rate_limit_charge(struct rate_limit *r, enum rate_op op, uint64_t bytes, uint64_t now,
                           struct rate_slot *slot)
{
    if (slot)
        memset(slot, 0, sizeof(*slot));
    uint64_t start = charge_one(r, RATE_IOPS, 1, now, slot), s;
    if (bytes && (s = charge_one(r, RATE_BPS, bytes, now, slot)) > start)
        start = s;
    if (op != RATE_OP_OTHER) {
        bool rd = op == RATE_OP_READ;
        if ((s = charge_one(r, rd ? RATE_READ_IOPS : RATE_WRITE_IOPS, 1, now, slot)) > start)
            start = s;
        if (bytes &&
            (s = charge_one(r, rd ? RATE_READ_BPS : RATE_WRITE_BPS, bytes, now, slot)) > start)
            start = s;
    }
    /* a slot within the burst of now goes at once: the bucket held that much */
    uint64_t burst = atomic_load_explicit(&r->burst_ns, memory_order_relaxed);
    return start > burst ? start - burst : 0;
}

void rate_limit_refund(struct rate_limit *r, const struct rate_slot *slot)
{
    for (unsigned d = 0; d < RATE_NDIM; d++) {
        uint64_t end = slot->end[d];
        /* only if no slot was handed out after it (nor the clock pulled back by a set) */
        if (slot->need[d])
            atomic_compare_exchange_strong_explicit(&r->tat[d], &end, end - slot->need[d],
                                                    memory_order_relaxed, memory_order_relaxed);
    }
}

void rate_limit_count_delay(struct rate_limit *r, uint64_t ns)
{
    atomic_fetch_add_explicit(&r->delayed, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->delayed_ns, ns, memory_order_relaxed);
}
