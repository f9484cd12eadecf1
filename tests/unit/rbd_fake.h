/* A stand-in for librbd and librados, linked into test_bs_rbd in place of -lrbd -lrados: one
 * image in memory behind the calls bs_rbd.c makes. Every asynchronous request is logged;
 * its result is scripted by the test (rbd_fake_script) and it completes the way librbd
 * completes: at once for a completion without a callback (the caller waits for it), or,
 * with a callback, when the test says so, on a thread of the fake's own as librbd's finisher
 * thread would (rbd_fake_complete). Not a model of Ceph: only the error paths and the request
 * mapping are tested against it (issue 13); the behaviour against a cluster is tested with
 * scripts/ceph-mini. */
#ifndef LINERATE_TESTS_UNIT_RBD_FAKE_H
#define LINERATE_TESTS_UNIT_RBD_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum rbd_fake_op { FAKE_READ, FAKE_WRITE, FAKE_FLUSH, FAKE_DISCARD, FAKE_WRITESAME, FAKE_CAW };

/* One request as bs_rbd.c issued it. */
struct rbd_fake_req {
    enum rbd_fake_op op;
    uint64_t off, len; /* len: what librbd was asked to transfer (the iovec's sum) */
    int iovcnt;        /* readv/writev */
    size_t data_len;   /* writesame: the pattern's length */
    bool has_cb;       /* asynchronous: a completion with a callback */
    ssize_t result;    /* what it completed with */
};

#define RBD_FAKE_LOG_MAX 64
#define RBD_FAKE_SCRIPT_MAX 16

struct rbd_fake {
    uint8_t *mem; /* the image */
    uint64_t size, obj_size;
    uint64_t stripe_unit, stripe_count; /* 0: the object size and 1 (no fancy striping) */
    bool exists;                        /* rbd_open: -ENOENT until rbd_create */
    bool opened_read_only;
    char client_id[64];
    char osd_op_timeout[16]; /* what rados_conf_set was told */
    char skip_partial_discard[8];
    char rbd_cache[8];       /* what rados_conf_set was told */
    char image_rbd_cache[8]; /* "": none; else the image's own rbd_cache (rbd config image set) */
    char pwl_mode[16];       /* rbd_persistent_cache_mode as rados_conf_set was told */
    char pool_plugins[32];   /* the pool's own rbd_plugins (rbd config pool set), "": none */
    struct rbd_fake_req log[RBD_FAKE_LOG_MAX];
    int nlog;
    /* Results for the next requests, in order (a negative errno, or 0 for success); once
     * they run out every request succeeds (a read returning its length, as librbd does). */
    ssize_t script[RBD_FAKE_SCRIPT_MAX];
    int nscript, next_script;
    int submit_err;              /* nonzero: the next rbd_aio_* call refuses with it, once */
    uint64_t mismatch_image_off; /* what a -EILSEQ compare and write reports, as librbd would */
    int completions;             /* created and not yet released */
    /* the shared object (rados_read/rados_write_op_*): one, enough for the "pr" object */
    char obj[4096];
    size_t obj_len;
    uint64_t obj_ver; /* 0: absent */
    uint64_t update_handle;
    bool update_watched;
};

extern struct rbd_fake rbd_fake;

/* A fresh image of size bytes, zeroed, existing, with 4 MiB objects; an empty log. */
void rbd_fake_reset(uint64_t size);
void rbd_fake_free(void);
/* Append results for the next requests (see rbd_fake.script). */
void rbd_fake_script(ssize_t result);
/* Requests with a callback issued and not completed yet. */
int rbd_fake_pending(void);
/* Complete every pending request, oldest first, on a new thread (librbd's finisher), and
 * wait for that thread to end. Returns how many completed. */
int rbd_fake_complete(void);

#endif
