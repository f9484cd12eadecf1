/* Per-reactor I/O counters merged on read (iostats.h says why it is safe without locks). */
#include "util/iostats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct iostats {
    unsigned nshards;
    struct iostats_shard shard[];
};

static unsigned n_reactors = 8;

void iostats_set_reactors(unsigned n)
{
    n_reactors = n ? n : 1;
}

struct iostats *iostats_new(void)
{
    if (!IOSTATS_ENABLED)
        return NULL; /* nothing counts into it: no memory per LUN, session and portal */
    unsigned n = n_reactors + 1;
    size_t size = sizeof(struct iostats_shard) * (n + 1); /* header rounded up to a shard */
    struct iostats *s = aligned_alloc(64, size);
    if (!s)
        return NULL;
    memset(s, 0, size);
    s->nshards = n;
    s->shard[n - 1].shared = true;
    return s;
}

void iostats_free(struct iostats *s)
{
    free(s);
}

struct iostats_shard *iostats_shard(struct iostats *s, int reactor)
{
    if (!s)
        return NULL;
    if (reactor < 0 || (unsigned)reactor >= s->nshards - 1)
        return &s->shard[s->nshards - 1];
    return &s->shard[reactor];
}

/* Events are rare (an R2T at most per 64 KiB or so): one function for both kinds of shard. */
static void bump(struct iostats_shard *h, _Atomic uint64_t *v, uint64_t by)
{
    if (h->shared)
        atomic_fetch_add_explicit(v, by, memory_order_relaxed);
    else
        iostats_bump(v, by);
}

double iostats_lat_bound_s(unsigned i)
{
    if (i >= IOSTATS_LAT_BUCKETS - 1)
        return __builtin_inf();
    return (double)(1ull << (IOSTATS_LAT_SHIFT + i)) / 1e9;
}

void iostats_cmd_shared(struct iostats_shard *h, const struct iostats_sample *c)
{
    atomic_fetch_add_explicit(&h->cmds[c->op], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->bytes[c->op], c->bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->lat_sum_ns[c->op], c->lat_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->lat[c->op][c->bucket], 1, memory_order_relaxed);
    if (c->err_slot >= 0)
        atomic_fetch_add_explicit(&h->errors[c->err_slot], 1, memory_order_relaxed);
}

void iostats_event(struct iostats_shard *h, enum iostats_event ev)
{
    if (!IOSTATS_ENABLED || !h)
        return;
    switch (ev) {
    case IOSTATS_DIGEST_ERROR:
        bump(h, &h->digest_errors, 1);
        return;
    case IOSTATS_R2T:
        bump(h, &h->r2ts, 1);
        return;
    case IOSTATS_ABORT:
        bump(h, &h->aborts, 1);
        return;
    case IOSTATS_RESET:
        bump(h, &h->resets, 1);
        return;
    }
}

static uint64_t ld(const _Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

void iostats_read(const struct iostats *s, struct iostats_values *out)
{
    memset(out, 0, sizeof(*out));
    if (!s)
        return;
    for (unsigned k = 0; k < s->nshards; k++) {
        const struct iostats_shard *h = &s->shard[k];
        for (unsigned op = 0; op < IOSTATS_NOPS; op++) {
            out->cmds[op] += ld(&h->cmds[op]);
            out->bytes[op] += ld(&h->bytes[op]);
            out->lat_sum_ns[op] += ld(&h->lat_sum_ns[op]);
            for (unsigned b = 0; b < IOSTATS_LAT_BUCKETS; b++)
                out->lat[op][b] += ld(&h->lat[op][b]);
        }
        for (unsigned e = 0; e < IOSTATS_ERR_SLOTS; e++)
            out->errors[e] += ld(&h->errors[e]);
        out->digest_errors += ld(&h->digest_errors);
        out->r2ts += ld(&h->r2ts);
        out->aborts += ld(&h->aborts);
        out->resets += ld(&h->resets);
        out->in_flight += ld(&h->in_flight); /* wraps back: the sum is >= 0 */
    }
}

void iostats_add(struct iostats_values *out, const struct iostats_values *in)
{
    uint64_t *o = (uint64_t *)out;
    const uint64_t *i = (const uint64_t *)in;
    for (size_t k = 0; k < sizeof(*out) / sizeof(uint64_t); k++)
        o[k] += i[k];
}

uint64_t iostats_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int iostats_err_slot(uint8_t status, const uint8_t *sense, unsigned sense_len)
{
    if (status == 0) /* GOOD */
        return -1;
    if (status != 0x02 || sense_len < 3) /* no CHECK CONDITION, or no sense to read */
        return IOSTATS_ERR_NO_SENSE_STATUS;
    /* response code 72h/73h: descriptor format, key in byte 1; else fixed, byte 2 */
    uint8_t rc = sense[0] & 0x7f;
    return (rc == 0x72 || rc == 0x73) ? sense[1] & 0x0f : sense[2] & 0x0f;
}

static const char *const err_names[IOSTATS_ERR_SLOTS] = {
    "no_sense",       "recovered_error", "not_ready",      "medium_error",
    "hardware_error", "illegal_request", "unit_attention", "data_protect",
    "blank_check",    "vendor_specific", "copy_aborted",   "aborted_command",
    "reserved_0c",    "volume_overflow", "miscompare",     "completed",
    "none",
};

const char *iostats_err_name(unsigned slot)
{
    return slot < IOSTATS_ERR_SLOTS ? err_names[slot] : "none";
}
