/* One linerate-bench session: a reactor thread that logs in (MC/S as asked), reads the
 * capacity, runs load cells with QD commands always outstanding for a bounded time, runs the
 * --verify write/read-back pass, and logs out. The main thread posts steps and waits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "util/bytes.h"
#include "util/crc32c.h"

#define VERIFY_MAX_BYTES (32ull << 20)

enum wstep { WS_IDLE, WS_LOGIN, WS_CAPACITY, WS_CELL, WS_VERIFY_WRITE, WS_VERIFY_READ, WS_LOGOUT };

struct slot {
    struct worker *w;
    uint8_t *buf;
    uint64_t t0, lba;
    uint32_t len;
    bool write;
    uint8_t ua_retries; /* issued again after a unit attention (ua_retry) */
};

struct worker {
    int id;
    const struct bench_opts *o;
    bool digest;
    uint32_t conns_asked;
    sem_t *done;
    struct reactor *r; /* shared with the other sessions of its bench_loop */
    /* Each connection's reactor in full feature phase. With more than one thread the session's
     * callbacks run on them, under the session lock; what runs on r takes that lock too. */
    struct reactor *conn_r[LR_MAX_CONNECTIONS];
    struct lr_session *s; /* NULL with --portal: */
    struct lr_mpath *mp;  /* then the multipath device in its place */
    enum wstep step;
    char err[256];
    bool failed;
    uint64_t lun_blocks;
    uint32_t bs;
    uint64_t region_start, region_blocks;
    uint32_t granted, conns_up;
    bool digests;

    uint8_t *mem;
    size_t slot_bytes;
    struct slot *slots;
    unsigned nslots;
    unsigned *free_slots, nfree;

    /* the running cell */
    uint32_t size;
    enum bench_rw rw;
    bool stopping;
    unsigned outstanding;
    uint64_t start_ns, next_seq, rng;
    struct lr_timer *timer, *kill_timer, *paths_timer;
    struct bench_stats st;
    bool lost_reported;
    bool ua_reported;
    unsigned kill_next; /* --inject kill-connection: the next connection to cut */
    /* Commands completed GOOD so far, and that count at the last cut: a cut waits until one
     * has since the one before (a cut's own failures are no progress), so that cuts faster
     * than the session recovers (a slow or loaded machine) delay the run instead of stopping
     * it. */
    uint64_t ended, ended_at_cut;
    /* The stall a cut causes (ErrorRecoveryLevel 2): from the cut to the first completion of a
     * command carried over from the cut connection (lr_result.recovered), and to the last one
     * before the next cut. Under the session lock (completions run on any connection's
     * thread). */
    uint64_t cut_ns, cut_first_ns, cut_last_ns; /* cut_ns 0: no cut open */
    unsigned cut_conn;
    struct bench_stall *stalls;
    unsigned nstalls, stalls_cap;
    uint64_t cuts_unmeasured, recovered;

    /* --verify */
    uint64_t gen, vchunks, vnext, vdone, vblocks, vcross;
    int8_t *vconn; /* connection each chunk was written on */
    uint32_t vnconns;
    uint32_t vsize;
    char vfail[256];
    uint64_t vfail_lba;
    bool vfailed;
    bool midway_ran;        /* --verify-midway */
    uint64_t paths_wait_ns; /* --verify-paths: when the wait began, 0 not waiting */
    char *mp_report;        /* what the paths did, kept when the device is destroyed at logout */
    /* the longest time without a command completing, during cells and --verify */
    uint64_t last_done_ns, max_gap_ns;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Log-linear latency buckets: 16 per power of two of nanoseconds. */
unsigned bench_hist_bucket(uint64_t ns)
{
    if (ns < 16)
        return (unsigned)ns;
    unsigned m = 63u - (unsigned)__builtin_clzll(ns);
    unsigned b = (m - 3) * 16 + (unsigned)((ns >> (m - 4)) & 15);
    return b < BENCH_HIST_BUCKETS ? b : BENCH_HIST_BUCKETS - 1;
}

double bench_hist_value_us(unsigned b)
{
    if (b < 16)
        return b / 1000.0;
    unsigned m = b / 16 + 3, sub = b % 16;
    double lo = (double)(16 + sub) * ldexp(1.0, (int)m - 4);
    double width = ldexp(1.0, (int)m - 4);
    return (lo + width / 2) / 1000.0;
}

/* The session lock (lr_session_lock); a multipath device runs on one thread and needs none. */
static void wlock(struct worker *w)
{
    if (w->s)
        lr_session_lock(w->s);
}

static void wunlock(struct worker *w)
{
    if (w->s)
        lr_session_unlock(w->s);
}

static uint32_t conns_up_now(const struct worker *w)
{
    if (w->mp)
        return lr_mpath_paths_up(w->mp);
    struct lr_session_info info;
    lr_session_get_info(w->s, &info);
    return info.connections_up;
}

/* A command completed: the gap since the one before (or the step's start). */
static void note_done(struct worker *w, uint64_t t)
{
    if (w->last_done_ns && t - w->last_done_ns > w->max_gap_ns)
        w->max_gap_ns = t - w->last_done_ns;
    w->last_done_ns = t;
}

static void finish_step(struct worker *w)
{
    w->step = WS_IDLE;
    sem_post(w->done);
}

static void fail_step(struct worker *w, const char *fmt, const char *detail)
{
    snprintf(w->err, sizeof(w->err), fmt, detail);
    w->failed = true;
    finish_step(w);
}

/* ---- loops: --sessions spread over min(sessions, CPUs) reactor threads ---- */

struct bench_loop {
    struct reactor *r;
    pthread_t th;
};

static void *loop_thread(void *arg)
{
    struct bench_loop *l = arg;
    lr_reactor_run(l->r);
    return NULL;
}

struct bench_loop *bench_loop_start(int id)
{
    struct bench_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->r = lr_reactor_create(id);
    if (!l->r || pthread_create(&l->th, NULL, loop_thread, l) != 0) {
        lr_reactor_destroy(l->r);
        free(l);
        return NULL;
    }
    return l;
}

static void do_stop(void *arg)
{
    lr_reactor_stop(arg);
}

void bench_loop_stop(struct bench_loop *l)
{
    /* after the messages already sent to it */
    lr_reactor_call(l->r, do_stop, l->r);
    pthread_join(l->th, NULL);
    lr_reactor_destroy(l->r);
    free(l);
}

struct reactor *bench_loop_reactor(const struct bench_loop *l)
{
    return l->r;
}

static void cell_timer(void *arg);
static void kill_timer(void *arg);
static void paths_timer(void *arg);

/* A command carried over to another connection completed (ERL 2). */
static void note_recovered(struct worker *w, uint64_t t)
{
    w->recovered++;
    if (!w->cut_ns)
        return;
    if (!w->cut_first_ns) {
        w->cut_first_ns = t;
        fprintf(stderr,
                "linerate-bench: session %d: --inject: connection %u: first recovered command "
                "completed %.1f ms after the cut\n",
                w->id, w->cut_conn, (t - w->cut_ns) / 1e6);
    }
    w->cut_last_ns = t;
}

/* The open cut's figures are final (the next cut, or the end of the step). */
static void close_cut(struct worker *w)
{
    if (!w->cut_ns)
        return;
    if (!w->cut_first_ns) {
        w->cuts_unmeasured++; /* nothing of it to recover: no command was on it */
    } else {
        if (w->nstalls == w->stalls_cap) {
            unsigned cap = w->stalls_cap ? w->stalls_cap * 2 : 64;
            struct bench_stall *n = realloc(w->stalls, cap * sizeof(*n));
            if (!n) {
                w->cut_ns = 0;
                return;
            }
            w->stalls = n;
            w->stalls_cap = cap;
        }
        w->stalls[w->nstalls++] = (struct bench_stall){
            .first_ms = (w->cut_first_ns - w->cut_ns) / 1e6,
            .last_ms = (w->cut_last_ns - w->cut_ns) / 1e6,
        };
    }
    w->cut_ns = w->cut_first_ns = w->cut_last_ns = 0;
}

struct worker *worker_start(int id, const struct bench_opts *o, bool digest, uint32_t conns,
                            sem_t *done, struct reactor *const *conn_r)
{
    struct worker *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->id = id;
    w->o = o;
    w->digest = digest;
    w->conns_asked = conns;
    w->done = done;
    for (uint32_t i = 0; i < conns && i < LR_MAX_CONNECTIONS; i++)
        w->conn_r[i] = conn_r[i];
    w->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)id << 32) ^ now_ns();
    w->r = conn_r[0];
    w->timer = lr_timer_new(w->r, cell_timer, w);
    w->kill_timer = lr_timer_new(w->r, kill_timer, w);
    w->paths_timer = lr_timer_new(w->r, paths_timer, w);
    if (!w->timer || !w->kill_timer || !w->paths_timer) {
        worker_free(w);
        return NULL;
    }
    uint32_t maxsize = 0;
    for (unsigned i = 0; i < o->nsizes; i++)
        maxsize = o->sizes[i] > maxsize ? o->sizes[i] : maxsize;
    w->slot_bytes = (maxsize + 4095) & ~(size_t)4095;
    w->nslots = o->qd;
    if (posix_memalign((void **)&w->mem, 4096, w->slot_bytes * w->nslots) != 0) {
        worker_free(w);
        return NULL;
    }
    /* Written data is not all zeros, so nothing along the path can take a shortcut. */
    for (size_t i = 0; i < w->slot_bytes * w->nslots; i++)
        w->mem[i] = (uint8_t)(i * 131 + 7);
    w->slots = calloc(w->nslots, sizeof(*w->slots));
    w->free_slots = calloc(w->nslots, sizeof(*w->free_slots));
    for (unsigned i = 0; i < w->nslots; i++) {
        w->slots[i].w = w;
        w->slots[i].buf = w->mem + i * w->slot_bytes;
        w->free_slots[w->nfree++] = i;
    }
    return w;
}

/* ---- login ---- */

static void on_capacity(void *arg, const struct lr_result *res, uint64_t blocks, uint32_t bs)
{
    struct worker *w = arg;
    if (res->err != LR_OK || !bs || !blocks) {
        fail_step(w, "READ CAPACITY failed: %s", res->what ? res->what : lr_err_name(res->err));
        return;
    }
    w->lun_blocks = blocks;
    w->bs = bs;
    unsigned n = w->o->sessions;
    w->region_blocks = blocks / n;
    w->region_start = w->region_blocks * (uint64_t)w->id;
    finish_step(w);
}

/* With --portal: one connection per path; the digests are what the first live path agreed. */
static void mpath_logged_in(struct worker *w)
{
    w->granted = 1;
    w->conns_up = 1;
    for (unsigned i = 0;; i++) {
        struct lr_mpath_path_info pi;
        if (!lr_mpath_path_info(w->mp, i, &pi))
            break;
        if (w->id == 0)
            fprintf(stderr, "linerate-bench: path %u %s:%u: %s, target port group %d, %s\n", i,
                    pi.host, pi.port, pi.up ? "logged in" : "login failed", pi.group,
                    lr_alua_state_name(pi.state));
        if (pi.up && !w->digests)
            w->digests = pi.header_digest && pi.data_digest;
    }
    w->step = WS_CAPACITY;
    if (lr_mpath_read_capacity(w->mp, on_capacity, w) < 0)
        fail_step(w, "%s", "cannot queue READ CAPACITY");
}

static void on_login(void *arg, const struct lr_result *res)
{
    struct worker *w = arg;
    if (res->err != LR_OK) {
        char why[160];
        if (res->err == LR_ERR_LOGIN)
            snprintf(why, sizeof(why), "login refused, status class %u detail %u (%s)",
                     res->login_status >> 8, res->login_status & 0xff, res->what ? res->what : "-");
        else
            snprintf(why, sizeof(why), "%s (%s)", lr_err_name(res->err),
                     res->what ? res->what : "-");
        fail_step(w, "%s", why);
        return;
    }
    if (w->mp) {
        mpath_logged_in(w);
        return;
    }
    struct lr_session_info info;
    lr_session_get_info(w->s, &info);
    w->granted = info.connections_granted;
    w->conns_up = info.connections_up;
    w->digests = info.header_digest && info.data_digest;
    char t2[64] = "";
    if (info.erl >= 2) /* what a lost connection's commands wait, then may wait at most */
        snprintf(t2, sizeof(t2), " DefaultTime2Wait=%u DefaultTime2Retain=%u", info.time2wait,
                 info.time2retain);
    if (w->id == 0)
        fprintf(stderr,
                "linerate-bench: negotiated TSIH %u: HeaderDigest=%s DataDigest=%s "
                "ImmediateData=%s InitialR2T=%s FirstBurstLength=%u MaxBurstLength=%u "
                "MaxOutstandingR2T=%u ErrorRecoveryLevel=%u target MaxRecvDataSegmentLength=%u, "
                "%u of %u connections%s\n",
                info.tsih, info.header_digest ? "CRC32C" : "None",
                info.data_digest ? "CRC32C" : "None", info.immediate_data ? "Yes" : "No",
                info.initial_r2t ? "Yes" : "No", info.first_burst, info.max_burst,
                info.max_outstanding_r2t, info.erl, info.peer_max_recv_dsl, info.connections_up,
                info.connections_asked, t2);
    w->step = WS_CAPACITY;
    if (lr_read_capacity(w->s, on_capacity, w) < 0)
        fail_step(w, "%s", "cannot queue READ CAPACITY");
}

static void do_login(void *arg)
{
    struct worker *w = arg;
    const struct bench_opts *o = w->o;
    struct lr_session_opts so = {
        .host = o->url.host,
        .port = o->url.port,
        .target_name = o->url.target,
        .initiator_name = o->initiator_name,
        .lun = o->url.lun,
        .header_digest = w->digest,
        .data_digest = w->digest,
        .connections = w->conns_asked,
        .max_tasks = o->qd + 8,
        .cmd_timeout_ms = o->cmd_timeout_ms ? o->cmd_timeout_ms : 15000,
        .chap_user = o->url.chap_user[0] ? o->url.chap_user : NULL,
        .chap_secret = o->url.chap_secret,
        .chap_mutual_user = o->chap_mutual_user[0] ? o->chap_mutual_user : NULL,
        .chap_mutual_secret = o->chap_mutual_secret,
        .error_recovery_level = o->erl,
    };
    memcpy(so.conn_reactors, w->conn_r, sizeof(so.conn_reactors));
    w->failed = false;
    w->step = WS_LOGIN;
    if (o->nportals) {
        /* every path on this worker's thread (conn_r[0]): one connection each */
        so.connections = 1;
        w->mp = bench_mpath_create(w->r, &so, o);
        if (!w->mp) {
            fail_step(w, "cannot create the multipath device: %s", strerror(errno));
            return;
        }
        if (lr_mpath_login(w->mp, on_login, w) < 0)
            fail_step(w, "%s", "cannot log in any path");
        return;
    }
    w->s = lr_session_create(w->r, &so);
    if (!w->s) {
        fail_step(w, "cannot create session: %s", strerror(errno));
        return;
    }
    struct lr_faults f = {.digest_error = o->inject.digest_error, .drop_pdu = o->inject.drop_pdu};
    if ((f.digest_error > 0 || f.drop_pdu > 0) && lr_session_set_faults(w->s, &f) < 0) {
        fail_step(w, "--inject: the initiator library cannot inject these faults: %s",
                  strerror(errno));
        return;
    }
    lr_session_login(w->s, on_login, w);
}

void worker_post_login(struct worker *w)
{
    lr_reactor_call(w->r, do_login, w);
}

/* ---- load cells ---- */

static void issue(struct worker *w);

static void cell_finish_msg(void *arg);

static void cell_maybe_done(struct worker *w)
{
    if (w->outstanding || !w->stopping || w->step != WS_CELL)
        return;
    if (lr_reactor_self() != w->r) {
        /* the last command completed on another connection's thread: the timers are r's */
        lr_reactor_call(w->r, cell_finish_msg, w);
        return;
    }
    lr_timer_stop(w->timer);
    lr_timer_stop(w->kill_timer);
    close_cut(w);
    w->st.elapsed_ns = now_ns() - w->start_ns;
    w->conns_up = conns_up_now(w);
    /* the session's counters run over its life; the cell reports its own share */
    struct lr_fault_counts fc = {0};
    if (w->s)
        lr_session_fault_counts(w->s, &fc);
    w->st.digests_corrupted = fc.digests_corrupted - w->st.digests_corrupted;
    w->st.pdus_dropped = fc.pdus_dropped - w->st.pdus_dropped;
    finish_step(w);
}

/* A unit attention (SAM-5 §5.14) reports an event on the logical unit -- a reset, a changed
 * capacity, commands cleared by an iSCSI protocol event (RFC 7143 §11.14.5) -- and the command
 * that received it did not run. As qemu's iSCSI driver and the Linux SCSI midlayer do, it is
 * issued again (a few times at most: each UA is reported once) and the first is logged. */
#define BENCH_UA_RETRIES 4

static bool ua_retry(struct worker *w, struct slot *sl, const struct lr_result *res,
                     lr_done_fn done)
{
    if (res->err != LR_SCSI_STATUS || res->sense_len < 3 || sl->ua_retries >= BENCH_UA_RETRIES)
        return false;
    bool desc = (res->sense[0] & 0x7f) >= 0x72; /* descriptor format (SPC-4 §4.5.2) */
    uint8_t key = desc ? res->sense[1] & 0x0f : res->sense[2] & 0x0f;
    if (key != 0x6)
        return false;
    uint8_t asc = 0, ascq = 0;
    if (desc) {
        asc = res->sense[2];
        ascq = res->sense[3];
    } else if (res->sense_len >= 14) {
        asc = res->sense[12];
        ascq = res->sense[13];
    }
    if (!w->ua_reported) {
        fprintf(stderr,
                "linerate-bench: session %d: unit attention %02Xh/%02Xh: command issued again\n",
                w->id, asc, ascq);
        w->ua_reported = true;
    }
    sl->ua_retries++;
    uint32_t nb = sl->len / w->bs;
    return bench_io(w->s, w->mp, sl->write, sl->lba, nb, w->bs, sl->buf, done, sl) == 0;
}

static void on_io(void *arg, const struct lr_result *res)
{
    struct slot *sl = arg;
    struct worker *w = sl->w;
    if (ua_retry(w, sl, res, on_io))
        return; /* still outstanding */
    uint64_t t = now_ns();
    note_done(w, t);
    w->outstanding--;
    w->free_slots[w->nfree++] = (unsigned)(sl - w->slots);
    if (res->recovered)
        note_recovered(w, t);
    if (res->err == LR_OK) {
        w->ended++;
        /* an underflow moved fewer bytes than asked (§11.4.5): count what moved */
        uint32_t moved = sl->len;
        if (res->residual_kind == LR_RESIDUAL_UNDERFLOW)
            moved = res->residual < sl->len ? sl->len - res->residual : 0;
        w->st.bytes += moved;
        w->st.ops++;
        w->st.hist[bench_hist_bucket(t - sl->t0)]++;
    } else {
        w->st.errors++;
        if (res->err == LR_ERR_CONN_LOST || res->err == LR_ERR_TIMEOUT)
            w->st.conn_lost++;
        uint32_t up = conns_up_now(w);
        if (!w->lost_reported) {
            fprintf(stderr,
                    "linerate-bench: session %d: command failed (%s%s%s); %u %s%s"
                    " still logged in\n",
                    w->id, lr_err_name(res->err), res->what ? ": " : "", res->what ? res->what : "",
                    up, w->mp ? "path" : "connection", up == 1 ? "" : "s");
            w->lost_reported = true;
        }
        if (up == 0)
            w->stopping = true;
    }
    if (!w->stopping)
        issue(w);
    cell_maybe_done(w);
}

static uint64_t pick_lba(struct worker *w, uint32_t nb, bool random)
{
    uint64_t span = w->region_blocks / nb;
    if (span == 0)
        return w->region_start;
    if (random)
        return w->region_start + (xorshift(&w->rng) % span) * nb;
    if (w->next_seq + nb > w->region_blocks)
        w->next_seq = 0;
    uint64_t lba = w->region_start + w->next_seq;
    w->next_seq += nb;
    return lba;
}

static void issue(struct worker *w)
{
    uint32_t nb = w->size / w->bs;
    while (!w->stopping && w->nfree) {
        struct slot *sl = &w->slots[w->free_slots[--w->nfree]];
        bool write = w->rw == RW_WRITE || w->rw == RW_RANDWRITE ||
                     (w->rw == RW_MIXED && (xorshift(&w->rng) & 1));
        bool random = w->rw == RW_RANDREAD || w->rw == RW_RANDWRITE || w->rw == RW_MIXED;
        sl->lba = pick_lba(w, nb, random);
        sl->ua_retries = 0;
        sl->len = w->size;
        sl->write = write;
        sl->t0 = now_ns();
        w->outstanding++;
        int rc = bench_io(w->s, w->mp, write, sl->lba, nb, w->bs, sl->buf, on_io, sl);
        if (rc < 0) {
            w->outstanding--;
            w->free_slots[w->nfree++] = (unsigned)(sl - w->slots);
            w->st.errors++;
            w->stopping = true;
        }
    }
}

static void cell_finish_msg(void *arg)
{
    struct worker *w = arg;
    wlock(w);
    cell_maybe_done(w);
    wunlock(w);
}

static void cell_timer(void *arg)
{
    struct worker *w = arg;
    wlock(w);
    w->stopping = true;
    cell_maybe_done(w);
    wunlock(w);
}

/* --inject kill-connection: cut the next live connection, round robin, every SECONDS of the
 * cell, once a command has completed since the last cut and every connection is logged in (a
 * tick without is skipped: otherwise, where recovering takes longer than SECONDS, every
 * connection would be cut again as soon as it is back and the run would never end). At ERL 0
 * nothing replaces it: its commands fail and are counted by on_io. */
static void kill_timer(void *arg)
{
    struct worker *w = arg;
    wlock(w);
    bool loading = (w->step == WS_CELL && !w->stopping) || w->step == WS_VERIFY_WRITE ||
                   w->step == WS_VERIFY_READ;
    /* and only with every connection of the session logged in: one connection recovering at
     * a time, the others carrying the load */
    struct lr_session_info info;
    lr_session_get_info(w->s, &info);
    uint32_t conns = info.connections_granted && info.connections_granted < w->conns_asked
                         ? info.connections_granted
                         : w->conns_asked;
    bool progressed =
        (w->ended != w->ended_at_cut || w->st.conns_cut == 0) && info.connections_up >= conns;
    if (loading && !progressed)
        lr_timer_start(w->kill_timer, (uint64_t)(w->o->inject.kill_conn_s * 1000));
    else if (loading) {
        unsigned n = w->conns_asked;
        for (unsigned k = 0; k < n; k++) {
            unsigned i = (w->kill_next + k) % n;
            uint16_t port = lr_session_conn_port(w->s, i);
            if (!port)
                continue;
            fprintf(stderr,
                    "linerate-bench: session %d: --inject: cutting connection %u (port %u)\n",
                    w->id, i, port);
            close_cut(w);
            w->cut_ns = now_ns();
            w->cut_conn = i;
            w->ended_at_cut = w->ended;
            lr_session_conn_kill(w->s, i);
            w->st.conns_cut++;
            w->kill_next = (i + 1) % n;
            break;
        }
        lr_timer_start(w->kill_timer, (uint64_t)(w->o->inject.kill_conn_s * 1000));
    }
    wunlock(w);
}

struct cell_msg {
    struct worker *w;
    uint32_t size;
    enum bench_rw rw;
};

static void do_cell(void *arg)
{
    struct cell_msg *m = arg;
    struct worker *w = m->w;
    w->size = m->size;
    w->rw = m->rw;
    free(m);
    wlock(w);
    memset(&w->st, 0, sizeof(w->st));
    w->failed = false;
    w->stopping = false;
    w->lost_reported = false;
    w->next_seq = 0;
    w->step = WS_CELL;
    w->start_ns = now_ns();
    w->last_done_ns = w->start_ns;
    lr_timer_start(w->timer, (uint64_t)(w->o->seconds * 1000));
    if (w->o->inject.kill_conn_s > 0)
        lr_timer_start(w->kill_timer, (uint64_t)(w->o->inject.kill_conn_s * 1000));
    /* the session's fault counters now, so that the cell reports what it added */
    struct lr_fault_counts fc = {0};
    if (w->s)
        lr_session_fault_counts(w->s, &fc);
    w->st.digests_corrupted = fc.digests_corrupted;
    w->st.pdus_dropped = fc.pdus_dropped;
    issue(w);
    cell_maybe_done(w);
    wunlock(w);
}

void worker_post_cell(struct worker *w, uint32_t size, enum bench_rw rw)
{
    struct cell_msg *m = malloc(sizeof(*m));
    m->w = w;
    m->size = size;
    m->rw = rw;
    lr_reactor_call(w->r, do_cell, m);
}

/* ---- --verify: every block stamped with its LBA, a generation and a checksum ---- */

static void stamp(uint8_t *b, uint32_t bs, uint64_t lba, uint64_t gen)
{
    memcpy(b, "LRVERIFY", 8);
    put_be64(b + 8, lba);
    put_be64(b + 16, gen);
    uint64_t x = lba * 0x9e3779b97f4a7c15ull ^ gen;
    for (uint32_t i = 32; i + 8 <= bs; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, 8);
    }
    uint32_t crc = crc32c_update(CRC32C_INIT, b, 28);
    crc = crc32c_update(crc, b + 32, bs - 32);
    put_be32(b + 28, crc32c_final(crc));
}

static const char *check(const uint8_t *b, uint32_t bs, uint64_t lba, uint64_t gen)
{
    if (memcmp(b, "LRVERIFY", 8) != 0)
        return "no stamp (never written or overwritten)";
    uint32_t crc = crc32c_update(CRC32C_INIT, b, 28);
    crc = crc32c_update(crc, b + 32, bs - 32);
    if (crc32c_final(crc) != get_be32(b + 28))
        return "checksum mismatch (corrupted data)";
    if (get_be64(b + 8) != lba)
        return "stamped with another LBA (misplaced data)";
    if (get_be64(b + 16) != gen)
        return "stamped with an older generation (lost write)";
    return NULL;
}

static void verify_issue(struct worker *w);

/* The end of --verify: the kill timer is w->r's, stopped there. */
static void verify_finish(void *arg)
{
    struct worker *w = arg;
    if (lr_reactor_self() != w->r) {
        lr_reactor_call(w->r, verify_finish, w);
        return;
    }
    wlock(w);
    lr_timer_stop(w->kill_timer);
    close_cut(w);
    wunlock(w);
    finish_step(w);
}

/* --verify-paths N: true once N paths of the device are up; meanwhile polled every 50 ms, for
 * at most 60 s (then the verify fails). The wait is no I/O pause: it is left out of it. */
static bool paths_back(struct worker *w)
{
    if (!w->o->verify_paths || !w->mp)
        return true;
    uint64_t t = now_ns();
    if (lr_mpath_paths_up(w->mp) >= w->o->verify_paths) {
        if (w->paths_wait_ns) {
            fprintf(stderr,
                    "linerate-bench: --verify-paths: %u paths up after %.1f ms, reading back\n",
                    w->o->verify_paths, (t - w->paths_wait_ns) / 1e6);
            w->last_done_ns = t;
        }
        w->paths_wait_ns = 0;
        return true;
    }
    if (!w->paths_wait_ns)
        w->paths_wait_ns = t;
    if (t - w->paths_wait_ns > 60000000000ull) {
        snprintf(w->err, sizeof(w->err), "--verify-paths: only %u of %u paths up after 60 s",
                 lr_mpath_paths_up(w->mp), w->o->verify_paths);
        w->failed = true;
        return true;
    }
    lr_timer_start(w->paths_timer, 50);
    return false;
}

static void verify_done(struct worker *w)
{
    if (w->outstanding)
        return;
    if (w->step == WS_VERIFY_WRITE && !w->failed && !paths_back(w))
        return;
    if (w->step == WS_VERIFY_WRITE && !w->failed) {
        w->step = WS_VERIFY_READ;
        w->vnext = w->vdone = 0;
        verify_issue(w);
        return;
    }
    if (w->step == WS_VERIFY_WRITE || w->step == WS_VERIFY_READ) {
        w->step = WS_IDLE; /* once: a late completion finds nothing left to finish */
        verify_finish(w);
    }
}

static void paths_timer(void *arg)
{
    struct worker *w = arg;
    wlock(w);
    verify_done(w);
    wunlock(w);
}

/* --verify-midway CMD: once half the chunks are written, with the others outstanding, CMD
 * runs (sh -c) while this thread waits: what it does to a path (kill a gateway) happens with
 * commands in flight on it. The first session only. */
static void verify_midway(struct worker *w)
{
    if (!w->o->verify_midway || w->midway_ran || w->id != 0)
        return;
    w->midway_ran = true;
    fprintf(stderr, "linerate-bench: --verify-midway: %u commands outstanding, running: %s\n",
            w->outstanding, w->o->verify_midway);
    int rc = system(w->o->verify_midway);
    if (rc != 0)
        fprintf(stderr, "linerate-bench: --verify-midway: the command exited with status %d\n", rc);
}

static void on_verify_io(void *arg, const struct lr_result *res)
{
    struct slot *sl = arg;
    struct worker *w = sl->w;
    if (ua_retry(w, sl, res, on_verify_io))
        return; /* still outstanding */
    note_done(w, now_ns());
    w->outstanding--;
    w->ended += res->err == LR_OK;
    w->free_slots[w->nfree++] = (unsigned)(sl - w->slots);
    if (res->recovered)
        note_recovered(w, now_ns());
    if (res->err != LR_OK) {
        if (!w->failed)
            snprintf(w->err, sizeof(w->err), "verify %s at LBA %llu failed: %s",
                     sl->write ? "write" : "read", (unsigned long long)sl->lba,
                     res->what ? res->what : lr_err_name(res->err));
        w->failed = true;
    } else if (res->residual_kind != LR_RESIDUAL_NONE) {
        /* GOOD status but not the whole chunk moved (or the target wanted more): the blocks
         * the check would read are not what was asked for */
        if (!w->failed)
            snprintf(w->err, sizeof(w->err), "verify %s at LBA %llu: residual %s of %u bytes",
                     sl->write ? "write" : "read", (unsigned long long)sl->lba,
                     res->residual_kind == LR_RESIDUAL_UNDERFLOW ? "underflow" : "overflow",
                     res->residual);
        w->failed = true;
    } else if (sl->write) {
        w->vconn[(sl->lba - w->region_start) / (w->vsize / w->bs)] = (int8_t)res->conn;
    } else {
        uint64_t k = (sl->lba - w->region_start) / (w->vsize / w->bs);
        w->vcross += res->conn != w->vconn[k];
        for (uint32_t off = 0; off < sl->len; off += w->bs) {
            uint64_t lba = sl->lba + off / w->bs;
            const char *why = check(sl->buf + off, w->bs, lba, w->gen);
            w->vblocks++;
            if (why && (!w->vfailed || lba < w->vfail_lba)) {
                w->vfailed = true;
                w->vfail_lba = lba;
                snprintf(w->vfail, sizeof(w->vfail), "first bad block: LBA %llu: %s",
                         (unsigned long long)lba, why);
            }
        }
    }
    w->vdone++;
    if (w->step == WS_VERIFY_WRITE && w->vdone * 2 >= w->vchunks)
        verify_midway(w);
    if (!w->failed)
        verify_issue(w);
    verify_done(w);
}

static void verify_issue(struct worker *w)
{
    uint32_t nb = w->vsize / w->bs;
    bool write = w->step == WS_VERIFY_WRITE;
    while (w->nfree && w->vnext < w->vchunks && !w->failed) {
        struct slot *sl = &w->slots[w->free_slots[--w->nfree]];
        sl->lba = w->region_start + w->vnext * nb;
        sl->ua_retries = 0;
        sl->len = w->vsize;
        sl->write = write;
        w->vnext++;
        if (write)
            for (uint32_t off = 0; off < w->vsize; off += w->bs)
                stamp(sl->buf + off, w->bs, sl->lba + off / w->bs, w->gen);
        else {
            memset(sl->buf, 0, w->vsize);
            /* read each chunk back over another connection than the one that wrote it */
            int wc = w->vconn[w->vnext - 1];
            if (w->s && w->vnconns > 1 && wc >= 0)
                lr_session_next_conn(w->s, (wc + 1) % (int)w->vnconns);
        }
        w->outstanding++;
        int rc = bench_io(w->s, w->mp, write, sl->lba, nb, w->bs, sl->buf, on_verify_io, sl);
        if (rc < 0) {
            w->outstanding--;
            w->free_slots[w->nfree++] = (unsigned)(sl - w->slots);
            snprintf(w->err, sizeof(w->err), "%s", "verify: cannot queue a command");
            w->failed = true;
        }
    }
}

static void do_verify(void *arg)
{
    struct worker *w = arg;
    wlock(w);
    w->failed = false;
    w->vfailed = false;
    w->vblocks = 0;
    w->gen = now_ns() ^ ((uint64_t)w->id << 56);
    /* The first size of --sizes (at least one block), over at most 32 MiB of the region. */
    w->vsize = w->o->sizes[0] < w->bs ? w->bs : w->o->sizes[0] / w->bs * w->bs;
    uint64_t region_bytes = w->region_blocks * w->bs;
    if (region_bytes > VERIFY_MAX_BYTES)
        region_bytes = VERIFY_MAX_BYTES;
    w->vchunks = region_bytes / w->vsize;
    free(w->vconn);
    w->vconn = calloc(w->vchunks ? w->vchunks : 1, 1);
    w->vcross = 0;
    w->midway_ran = false;
    w->paths_wait_ns = 0;
    w->last_done_ns = now_ns();
    w->vnconns = conns_up_now(w);
    w->vnext = w->vdone = 0;
    w->step = WS_VERIFY_WRITE;
    w->st.conns_cut = 0;
    /* --inject kill-connection cuts during --verify too: under recovery (ERL 2) no command
     * may fail and no block may differ; at ERL 0 the failures are the verdict */
    if (w->o->inject.kill_conn_s > 0)
        lr_timer_start(w->kill_timer, (uint64_t)(w->o->inject.kill_conn_s * 1000));
    verify_issue(w);
    verify_done(w);
    wunlock(w);
}

void worker_post_verify(struct worker *w)
{
    lr_reactor_call(w->r, do_verify, w);
}

/* ---- logout and teardown ---- */

/* The per-path report, written before the device goes (worker_mpath_report prints it). */
static void mpath_keep_report(struct worker *w)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        bench_mpath_report(f, w->id, w->mp, w->max_gap_ns / 1e6);
        fclose(f);
        free(w->mp_report);
        w->mp_report = buf;
    }
    lr_mpath_destroy(w->mp);
    w->mp = NULL;
}

void worker_mpath_report(const struct worker *w, FILE *f)
{
    if (w->mp_report)
        fputs(w->mp_report, f);
}

static void free_session(void *arg)
{
    struct worker *w = arg;
    if (w->s)
        lr_session_destroy(w->s);
    w->s = NULL;
    if (w->mp)
        mpath_keep_report(w);
    finish_step(w);
}

static void on_logout(void *arg, const struct lr_result *res)
{
    struct worker *w = arg;
    (void)res;
    /* Not from inside the session's own callback: destroy on the next loop turn. */
    lr_reactor_call(w->r, free_session, w);
}

static void do_logout(void *arg)
{
    struct worker *w = arg;
    w->step = WS_LOGOUT;
    if (w->mp) {
        lr_mpath_logout(w->mp, on_logout, w);
        return;
    }
    if (!w->s) {
        finish_step(w);
        return;
    }
    if (lr_session_logout(w->s, on_logout, w) < 0)
        free_session(w);
}

void worker_post_logout(struct worker *w)
{
    lr_reactor_call(w->r, do_logout, w);
}

/* After its loop stopped: nothing runs on the reactor any more. */
void worker_free(struct worker *w)
{
    if (w->s)
        lr_session_destroy(w->s);
    lr_mpath_destroy(w->mp);
    free(w->mp_report);
    lr_timer_free(w->timer);
    lr_timer_free(w->kill_timer);
    lr_timer_free(w->paths_timer);
    free(w->mem);
    free(w->vconn);
    free(w->stalls);
    free(w->slots);
    free(w->free_slots);
    free(w);
}

const char *worker_error(const struct worker *w)
{
    return w->failed ? w->err : NULL;
}

uint32_t worker_conns_up(const struct worker *w)
{
    return w->conns_up;
}

uint32_t worker_conns_granted(const struct worker *w)
{
    return w->granted;
}

bool worker_digests(const struct worker *w)
{
    return w->digests;
}

uint32_t worker_block_size(const struct worker *w)
{
    return w->bs;
}

const struct bench_stats *worker_stats(const struct worker *w)
{
    return &w->st;
}

const char *worker_verify_failure(const struct worker *w)
{
    return w->vfailed ? w->vfail : NULL;
}

uint64_t worker_verify_blocks(const struct worker *w)
{
    return w->vblocks;
}

uint64_t worker_verify_cross(const struct worker *w)
{
    return w->vcross;
}

const struct bench_stall *worker_stalls(const struct worker *w, unsigned *n, uint64_t *unmeasured,
                                        uint64_t *recovered)
{
    *n = w->nstalls;
    *unmeasured = w->cuts_unmeasured;
    *recovered = w->recovered;
    return w->stalls;
}
