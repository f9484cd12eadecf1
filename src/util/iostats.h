/* I/O counters for the metrics (linerate-ctl stats, the Prometheus endpoint): commands, bytes,
 * errors by sense key, latency histograms, digest errors, R2Ts, aborts and resets, kept for a
 * LUN, a session or a portal.
 *
 * The hot path: each reactor owns one shard of every counter set and is its only writer, so a
 * count is a relaxed load and a relaxed store on memory no other core writes (a plain `inc` on
 * x86: no lock, no atomic read-modify-write, no shared cache line between reactors). Threads
 * that are no reactor (the control thread, a store's completion thread, tests) share a last
 * shard and add to it with an atomic RMW; nothing on the data path writes from such a thread.
 *
 * The reader (the control thread) merges the shards with relaxed loads while the reactors keep
 * counting. Each value it reads is one the writer stored (never torn), but a snapshot is not
 * one instant: a command may show in its count and not yet in its bytes, or in one histogram
 * bucket of one shard and not yet in another counter. Every counter only grows, so the next
 * snapshot catches up; rates over an interval are exact to within the commands completing
 * while the snapshot was taken. */
#ifndef LR_IOSTATS_H
#define LR_IOSTATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* LR_METRICS (meson -Dmetrics, default on). 0 compiles the counting out of the data path, to
 * measure what it costs (bench/metrics-cost.sh): the writers below do nothing, iostats_new()
 * makes no set (NULL) and iostats_shard() finds none, so a reader sees zeros. The daemon does
 * not show those zeros as counts: `stats` and the endpoint say the build has none
 * (target/ctl_cmds.c and target/metrics.c test IOSTATS_ENABLED). */
#ifndef LR_METRICS
#define LR_METRICS 1
#endif
#define IOSTATS_ENABLED (LR_METRICS != 0)

enum iostats_op { IOSTATS_READ, IOSTATS_WRITE, IOSTATS_OTHER, IOSTATS_NOPS };

/* Latency buckets on a log2 scale: bucket i counts latencies below 2^(IOSTATS_LAT_SHIFT + i)
 * ns (bucket 0: under 1.024 us; bucket 24: under 2^34 ns = 17.2 s), the last one the rest. */
#define IOSTATS_LAT_SHIFT 10
#define IOSTATS_LAT_BUCKETS 26
/* Errors: by sense key of a CHECK CONDITION (SPC-4 §4.5.6, 0-15), and a last slot for a status
 * other than GOOD without sense (RESERVATION CONFLICT, TASK SET FULL, BUSY). */
#define IOSTATS_ERR_SLOTS 17
#define IOSTATS_ERR_NO_SENSE_STATUS 16

struct iostats_values {
    uint64_t cmds[IOSTATS_NOPS];
    uint64_t bytes[IOSTATS_NOPS];
    uint64_t lat_sum_ns[IOSTATS_NOPS];
    uint64_t lat[IOSTATS_NOPS][IOSTATS_LAT_BUCKETS];
    uint64_t errors[IOSTATS_ERR_SLOTS];
    uint64_t digest_errors; /* header or data digest failures (RFC 7143 §7.8) */
    uint64_t r2ts;          /* R2T PDUs sent (§11.8), recovery R2Ts included */
    uint64_t aborts;        /* tasks aborted by a TMF (ABORT TASK, ABORT/CLEAR TASK SET, resets) */
    uint64_t resets;        /* LOGICAL UNIT RESET, TARGET WARM/COLD RESET received */
    /* A gauge, not a counter: commands received and not yet answered (or ended) that entered
     * with iostats_queue(); the shards' sum, each shard never below 0 (see iostats_queue). */
    uint64_t in_flight;
};

struct iostats;

/* The number of reactors, set once at start before any counter set is created (shards are
 * reactor ids 0..n-1, plus the shared one). Default 8. */
void iostats_set_reactors(unsigned n);
/* NULL when out of memory, and always when !IOSTATS_ENABLED: counting into NULL does nothing,
 * reading it gives zeros. */
struct iostats *iostats_new(void);
void iostats_free(struct iostats *s);
/* Merge every shard into *out (zeroed first). Any thread; see the top of this file. */
void iostats_read(const struct iostats *s, struct iostats_values *out);
/* out += in */
void iostats_add(struct iostats_values *out, const struct iostats_values *in);

/* Monotonic nanoseconds, for a command's arrival and completion. */
uint64_t iostats_now_ns(void);
static inline unsigned iostats_lat_bucket(uint64_t ns)
{
    if (ns < (1ull << IOSTATS_LAT_SHIFT))
        return 0;
    unsigned b = (unsigned)(63 - __builtin_clzll(ns)) - IOSTATS_LAT_SHIFT + 1;
    return b < IOSTATS_LAT_BUCKETS ? b : IOSTATS_LAT_BUCKETS - 1;
}
/* Upper bound of latency bucket i in seconds (+Inf for the last). */
double iostats_lat_bound_s(unsigned i);
/* The sense key names used as label values ("illegal_request"...), slot 16 "none". */
const char *iostats_err_name(unsigned slot);

/* --- writers --- */

/* One shard: struct iostats_values as atomics, so the reader's loads race with nothing. Here
 * (not in iostats.c) so that counting inlines into the data path. */
struct iostats_shard {
    _Atomic uint64_t cmds[IOSTATS_NOPS];
    _Atomic uint64_t bytes[IOSTATS_NOPS];
    _Atomic uint64_t lat_sum_ns[IOSTATS_NOPS];
    _Atomic uint64_t lat[IOSTATS_NOPS][IOSTATS_LAT_BUCKETS];
    _Atomic uint64_t errors[IOSTATS_ERR_SLOTS];
    _Atomic uint64_t digest_errors, r2ts, aborts, resets;
    _Atomic uint64_t in_flight; /* iostats_queue: enters minus leaves, modulo 2^64 */
    bool shared;                /* the non-reactor shard: several writers, so atomic adds */
} __attribute__((aligned(64)));

/* The shard of the calling thread: `reactor` is its reactor id, -1 for any other thread.
 * NULL for a NULL set (counting into it does nothing). */
struct iostats_shard *iostats_shard(struct iostats *s, int reactor);

/* One command answered, computed once and added to each of its counter sets. */
struct iostats_sample {
    enum iostats_op op;
    uint64_t bytes;
    uint64_t lat_ns;
    unsigned bucket; /* iostats_lat_bucket(lat_ns) */
    int err_slot;    /* iostats_err_slot(): -1 for GOOD */
};
/* The shared shard's writers (slow path, iostats.c). */
void iostats_cmd_shared(struct iostats_shard *h, const struct iostats_sample *c);

/* The single writer of a reactor shard needs no read-modify-write: load, add, store, all
 * relaxed (plain moves on x86 and arm64). */
static inline void iostats_bump(_Atomic uint64_t *v, uint64_t by)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

static inline void iostats_cmd(struct iostats_shard *h, const struct iostats_sample *c)
{
    if (!IOSTATS_ENABLED || !h)
        return;
    if (__builtin_expect(h->shared, 0)) {
        iostats_cmd_shared(h, c);
        return;
    }
    iostats_bump(&h->cmds[c->op], 1);
    iostats_bump(&h->bytes[c->op], c->bytes);
    iostats_bump(&h->lat_sum_ns[c->op], c->lat_ns);
    iostats_bump(&h->lat[c->op][c->bucket], 1);
    if (c->err_slot >= 0)
        iostats_bump(&h->errors[c->err_slot], 1);
}

/* A command enters (+1) or leaves (-1) the in-flight gauge of h. Both go to the same shard,
 * from its own reactor (the caller keeps the shard it entered, iscsi_task.st_queue), so that
 * a shard's gauge never goes below 0 and the reader's sum, even of shards read at different
 * moments, never does either. */
static inline void iostats_queue(struct iostats_shard *h, int d)
{
    if (!IOSTATS_ENABLED || !h)
        return;
    if (__builtin_expect(h->shared, 0))
        atomic_fetch_add_explicit(&h->in_flight, (uint64_t)(int64_t)d, memory_order_relaxed);
    else
        iostats_bump(&h->in_flight, (uint64_t)(int64_t)d);
}

enum iostats_event { IOSTATS_DIGEST_ERROR, IOSTATS_R2T, IOSTATS_ABORT, IOSTATS_RESET };
void iostats_event(struct iostats_shard *h, enum iostats_event ev);

/* Error slot for a SCSI status and its fixed- or descriptor-format sense: -1 for GOOD. */
int iostats_err_slot(uint8_t status, const uint8_t *sense, unsigned sense_len);

#endif
