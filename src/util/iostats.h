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
    uint64_t aborts;        /* tasks aborted by a TMF (ABORT TASK, ABORT/CLEAR TASK SET) */
    uint64_t resets;        /* LOGICAL UNIT RESET, TARGET WARM/COLD RESET received */
};

struct iostats;

/* The number of reactors, set once at start before any counter set is created (shards are
 * reactor ids 0..n-1, plus the shared one). Default 8. */
void iostats_set_reactors(unsigned n);
struct iostats *iostats_new(void);
void iostats_free(struct iostats *s);
/* Merge every shard into *out (zeroed first). Any thread; see the top of this file. */
void iostats_read(const struct iostats *s, struct iostats_values *out);
/* out += in */
void iostats_add(struct iostats_values *out, const struct iostats_values *in);

/* Monotonic nanoseconds, for a command's arrival and completion. */
uint64_t iostats_now_ns(void);
unsigned iostats_lat_bucket(uint64_t ns);
/* Upper bound of latency bucket i in seconds (+Inf for the last). */
double iostats_lat_bound_s(unsigned i);
/* The sense key names used as label values ("illegal_request"...), slot 16 "none". */
const char *iostats_err_name(unsigned slot);

/* --- writers: `shard` is the calling thread's reactor id (-1 for any other thread) --- */
struct iostats_shard;
struct iostats_shard *iostats_shard(struct iostats *s, int reactor);

/* One command answered: its class, bytes moved, latency, SCSI status and sense key. */
void iostats_cmd(struct iostats_shard *h, enum iostats_op op, uint64_t bytes, uint64_t lat_ns,
                 int err_slot);
enum iostats_event { IOSTATS_DIGEST_ERROR, IOSTATS_R2T, IOSTATS_ABORT, IOSTATS_RESET };
void iostats_event(struct iostats_shard *h, enum iostats_event ev);

/* Error slot for a SCSI status and its fixed- or descriptor-format sense: -1 for GOOD. */
int iostats_err_slot(uint8_t status, const uint8_t *sense, unsigned sense_len);

#endif
