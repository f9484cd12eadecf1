/* linerate-bench internals: options, the per-session worker (one reactor thread each) and the
 * result of one cell (size x rw x digest x connections), shared by bench_main.c (options and
 * orchestration), bench_worker.c (the load loop and --verify) and bench_report.c (output). */
#ifndef LR_BENCH_H
#define LR_BENCH_H

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "linerate/initiator.h"
#include "linerate/initiator_test.h"
#include "linerate/multipath.h"
#include "linerate/reactor.h"
#include "util/inject.h"

#define BENCH_MAX_LIST 32
#define BENCH_HIST_BUCKETS 640

enum bench_rw { RW_READ, RW_WRITE, RW_RANDREAD, RW_RANDWRITE, RW_MIXED, RW_COUNT };
enum bench_fmt { FMT_TABLE, FMT_CSV, FMT_JSON };

struct bench_opts {
    struct lr_url url; /* CHAP user and secret from USER%SECRET@ or the options below */
    char chap_mutual_user[256];
    char chap_mutual_secret[256];
    uint32_t sizes[BENCH_MAX_LIST];
    unsigned nsizes;
    enum bench_rw rws[RW_COUNT];
    unsigned nrws;
    bool digests[2];
    unsigned ndigests;
    uint32_t conns[BENCH_MAX_LIST];
    unsigned nconns;
    unsigned sessions, qd;
    double seconds;
    bool verify;
    enum bench_fmt fmt;
    const char *svg;
    pid_t target_pid;
    uint32_t erl;               /* --erl: ErrorRecoveryLevel asked for */
    uint32_t cmd_timeout_ms;    /* --cmd-timeout, or 0: 15000 */
    struct inject_spec inject;  /* --inject */
    int log_level;              /* --log-level: the initiator's log (default warn) */
    const char *initiator_name; /* --initiator-name, or NULL: the library's default */
    /* --portal: more portals of the URL's LUN; with any, each session is a multipath device
     * (lr_mpath) over the URL's portal and these */
    struct {
        char host[256];
        uint16_t port;
    } portals[LR_MPATH_MAX_PATHS - 1];
    unsigned nportals;
    const char *verify_midway; /* --verify-midway CMD */
    unsigned verify_paths;     /* --verify-paths N: paths up before --verify reads back */
};

/* One cell of the table. NAN in a double means "unknown" (printed empty). */
struct bench_cell {
    uint32_t size;
    enum bench_rw rw;
    bool digest_asked, digest; /* digest: HeaderDigest and DataDigest in force */
    uint32_t conns_asked, conns;
    unsigned qd;
    bool ran;
    double mb_per_s, iops, p50_us, p99_us, ini_us_per_kb, tgt_us_per_kb;
    uint64_t errors;
    /* --inject: what was done to the sessions during the cell */
    uint64_t conns_cut, digests_corrupted, pdus_dropped;
};

struct bench_stats {
    uint64_t bytes, ops, errors, conn_lost;
    uint64_t conns_cut, digests_corrupted, pdus_dropped; /* --inject */
    uint64_t hist[BENCH_HIST_BUCKETS];
    uint64_t elapsed_ns;
};

/* --inject kill-connection at ErrorRecoveryLevel 2: what one cut stalled, in ms from the cut
 * to the first and to the last completion of a command carried over from the cut connection */
struct bench_stall {
    double first_ms, last_ms;
};

struct worker;
struct bench_loop;

/* A reactor thread carrying one or more sessions. */
struct bench_loop *bench_loop_start(int id);
void bench_loop_stop(struct bench_loop *l);
struct reactor *bench_loop_reactor(const struct bench_loop *l);

/* bench_worker.c: a worker's connections run on conn_r[0..conns-1], the worker itself (login,
 * timers, logout) on conn_r[0]; the main thread posts a step and waits on `done` for each. */
struct worker *worker_start(int id, const struct bench_opts *o, bool digest, uint32_t conns,
                            sem_t *done, struct reactor *const *conn_r);
void worker_post_login(struct worker *w);
void worker_post_cell(struct worker *w, uint32_t size, enum bench_rw rw);
void worker_post_verify(struct worker *w);
void worker_post_logout(struct worker *w);
void worker_free(struct worker *w); /* once its loop has stopped */
/* Results of the last step. */
const char *worker_error(const struct worker *w); /* NULL when fine */
uint32_t worker_conns_up(const struct worker *w);
uint32_t worker_conns_granted(const struct worker *w);
bool worker_digests(const struct worker *w);
uint32_t worker_block_size(const struct worker *w);
const struct bench_stats *worker_stats(const struct worker *w);
const char *worker_verify_failure(const struct worker *w); /* NULL when every block matched */
uint64_t worker_verify_blocks(const struct worker *w);
/* Chunks read back over another connection than the one that wrote them. */
uint64_t worker_verify_cross(const struct worker *w);
/* The stalls of its cuts so far, the cuts with nothing to recover, the commands recovered. */
const struct bench_stall *worker_stalls(const struct worker *w, unsigned *n, uint64_t *unmeasured,
                                        uint64_t *recovered);

unsigned bench_hist_bucket(uint64_t ns);
double bench_hist_value_us(unsigned bucket);

/* bench_mpath.c: --portal's list, the multipath device of a session, I/O to either kind,
 * and what the paths did */
int bench_portal_add(struct bench_opts *o, const char *list);
struct lr_mpath *bench_mpath_create(struct reactor *r, const struct lr_session_opts *so,
                                    const struct bench_opts *o);
int bench_io(struct lr_session *s, struct lr_mpath *mp, bool write, uint64_t lba, uint32_t nb,
             uint32_t bs, void *buf, lr_done_fn done, void *arg);
void bench_mpath_report(FILE *f, int id, const struct lr_mpath *mp, double pause_ms);
/* bench_worker.c: with --portal, what the session's paths did (after its loop stopped) */
void worker_mpath_report(const struct worker *w, FILE *f);

/* bench_report.c */
const char *bench_rw_name(enum bench_rw rw);
void bench_report(const struct bench_opts *o, const struct bench_cell *cells, unsigned n);
/* "Injected: LIST over N cells: K connections cut, ..., F commands failed (ErrorRecoveryLevel
 * L)": what --inject did, stated with the failures it caused. */
void bench_inject_summary(FILE *f, const struct bench_opts *o, const struct bench_cell *cells,
                          unsigned n);
/* "Stall after a cut: N cuts ..., first recovered completion median/p90/max, ..." */
void bench_stall_summary(FILE *f, const struct bench_stall *st, unsigned n, uint64_t unmeasured,
                         uint64_t recovered);
int bench_svg(const char *path, const struct bench_opts *o, const struct bench_cell *cells,
              unsigned n);

#endif
