/* Backing stores behind one small vtable: null, ram, file, rbd (Ceph, when built with librbd). The
 * SCSI core addresses a store in bytes; a store never sees a CDB. Completions run on the reactor
 * thread that submitted. */
#ifndef LR_BS_H
#define LR_BS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "reactor/reactor.h"
#include "util/list.h"

struct bs;
struct reactor;

enum bs_op {
    BS_READ,
    BS_WRITE,
    BS_FLUSH,
    BS_UNMAP,
    /* Only for a store that offers them (struct bs: write_same, caw_unit); bs_io_check()
     * refuses them elsewhere, so the SCSI core emulates them with READ and WRITE there. */
    BS_WRITE_SAME,        /* iov[0] (its iov_len bytes, dividing length) repeated over the range */
    BS_COMPARE_AND_WRITE, /* iov[0]: length bytes to compare with the medium; iov[1]: length
                             bytes written if they are equal, atomically; else -EILSEQ with
                             io->miscompare the offset of the first differing byte */
};

/* Store-private progress of one request; callers need not initialise it. The file store may
 * trim the first and last entries of io->iov in place while the request is in flight (to
 * resume a short transfer without copying the vector); it restores them before done(). */
struct bs_io_state {
    struct bs *bs;
    uint64_t done;         /* bytes transferred so far */
    struct list_node node; /* per-ring overflow queue while the ring is full */
    int head, tail;        /* iov entries trimmed in place, -1 if none */
    struct iovec head_orig, tail_orig;
    /* Stores completing on another thread (rbd): the submitting reactor, the message that
     * hands the completion back to it, and the result carried across. */
    struct reactor *r;
    struct reactor_msg msg;
    int res;
    uint64_t due_ms; /* the file store under --inject store-delay: when it may start */
};

/* One request. The store owns it from bs_submit() until done() runs. For a store opened with
 * ",direct" (O_DIRECT), READ/WRITE buffers, lengths and offsets must be 4096-aligned (the
 * SCSI core allocates with posix_memalign). */
struct bs_io {
    enum bs_op op;
    uint64_t offset;
    uint64_t length;
    struct iovec *iov; /* READ/WRITE: buffers totalling length bytes */
    int iovcnt;
    bool fua;            /* WRITE: stable before completion (RWF_DSYNC on the file store) */
    uint64_t miscompare; /* out, COMPARE AND WRITE failing with -EILSEQ: see enum bs_op */
    /* Called exactly once, possibly before bs_submit() returns, with 0 or -errno. */
    void (*done)(struct bs_io *io, int err);
    void *arg;
    struct bs_io_state st;
};

struct bs_ops {
    const char *name;
    /* What INQUIRY reports as PRODUCT IDENTIFICATION (SPC-4 §6.6.2, at most 16 bytes) for a
     * LUN on this store; NULL: "linerate". */
    const char *product;
    /* Serve a READ/WRITE/FLUSH/UNMAP; may complete (done()) before it returns. Waits for no
     * medium, with one exception: the file store's plain buffered WRITE into the page cache on
     * the reactor thread (write-inline), which blocks when the kernel throttles it and then
     * backs off to io_uring for a while (bs_file.c, file_inline_write). A range outside the
     * store or an iovec shorter than length completes with -EINVAL. */
    void (*submit)(struct bs *bs, struct bs_io *io);
    /* Memory of [offset, offset+len) if the store lives in RAM, for direct data placement and
     * in-place compares and copies; NULL if it does not (then the caller uses a buffer and
     * submit()). With `write` the caller is about to store data there: the store counts the
     * range as mapped (provisioned) from now on, and the caller calls map() with `write` again
     * once the data is in (an UNMAP running meanwhile may have given the pages back). Without
     * it the caller only reads; reading a never-written range through the mapping may cost the
     * process memory (the kernel decides), so the READ data path uses read_iov() instead. */
    void *(*map)(struct bs *bs, uint64_t offset, uint64_t len, bool write);
    /* Optional, with map(): [offset, offset+len) for sending in place, as at most max iovecs:
     * the store's memory where it holds data, a shared read-only zero buffer where it does
     * not, so reading a thin LUN touches no memory of its own. Returns the entry count, or 0
     * when the range needs more than max entries (then the caller uses a buffer and submit()).
     * Absent: one entry, the map() memory. */
    int (*read_iov)(struct bs *bs, uint64_t offset, uint64_t len, struct iovec *iov, int max);
    /* Optional: a READ of [offset, offset+len) served in place, for sending without a copy of
     * our own: iovecs as read_iov() gives, taken whole (no WRITE is halfway through them) and
     * kept so until unpin() of the same range: a WRITE or UNMAP that overlaps waits for it
     * (queued, never blocking a reactor). 0: not offered for this request (shorter than the
     * store's send-min, a writer waiting there, more than max pieces); the caller then copies
     * with submit(). A store with order_rw (a file: its pages in the page cache) keeps nothing
     * whole itself: the caller holds the range against WRITEs from before read_pin until
     * unpin. docs/performance.md, "RAM LUN reads without the copy". */
    int (*read_pin)(struct bs *bs, uint64_t offset, uint64_t len, struct iovec *iov, int max);
    void (*unpin)(struct bs *bs, uint64_t offset, uint64_t len);
    /* read_pin's memory can vanish under its reader: a shared mapping of a file that another
     * process truncates raises SIGBUS past the new end (mmap(2)). Whoever reads it (the
     * transport's data digest, its copy-away) does so under util/fault_guard; memory of ours
     * (a RAM LUN's) is read plainly. */
    bool pin_can_fault;
    /* Release priv (the file store first makes written data stable). */
    void (*close)(struct bs *bs);
    /* Optional, for GET LBA STATUS (SBC-4 §5.7): the provisioning state at offset. On entry
     * *len is how far to look (> 0, within the store); on return it is the length of the run
     * starting at offset whose state is *mapped (at least 1 byte, at most the entry value; a
     * store may stop early to bound the work). Ends fall on the store's allocation unit (page,
     * file system block, RADOS object) except at offset + the entry *len. Synchronous: it
     * reads metadata only, cheaply unless the store sets lba_status_blocks (then it waits for
     * the cluster and may only be called off the reactors). 0 or -errno. NULL: every byte
     * counts as mapped. */
    int (*lba_status)(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped);
    /* Optional: grow to `size` bytes (> the current size) while requests run, for a LUN
     * resized at run time. The new bytes read as zeros. 0, or -1 with a one-line reason in
     * err. Called by bs_grow() only, never for a read-only store, and bs_grow() publishes the
     * new bs->size once it returns 0. NULL: the store cannot grow. */
    int (*grow)(struct bs *bs, uint64_t size, char *err, size_t errlen);
    /* Optional (rbd): a small object shared by every client of the medium (every gateway that
     * exports the image), for state that must agree across them: persistent reservations.
     * `name` is a short tag ("pr"); the store derives the object's name from the medium's.
     * All block on the cluster: call them off the reactors.
     * obj_read: the content, malloc'd into *buf with a NUL after its *len bytes (NULL, *len 0
     * when the object does not exist),
     * and its version (0 when it does not exist). 0 or -errno.
     * obj_write: replace the content if its version is still ver (0: the object must not
     * exist yet), atomically in the cluster; -ECANCELED when someone changed it first; the
     * version written in *newver. 0 or -errno.
     * obj_notify: hand buf to every watcher of the object (this client's own watch too) and
     * wait up to timeout_ms until each has acknowledged: -ETIMEDOUT when one has not. */
    int (*obj_read)(struct bs *bs, const char *name, char **buf, size_t *len, uint64_t *ver);
    int (*obj_write)(struct bs *bs, const char *name, const void *buf, size_t len, uint64_t ver,
                     uint64_t *newver);
    int (*obj_notify)(struct bs *bs, const char *name, const void *buf, size_t len,
                      unsigned timeout_ms);
    /* Watch the object (it must exist): cb(arg, buf, len, 0) for every notify, on a store
     * thread, acknowledged to the notifier once cb returns; cb(arg, NULL, 0, -errno) when the
     * watch broke and notifies may have been missed (call obj_watch again to re-arm it;
     * -ESHUTDOWN: the cluster fenced this client, the store fails everything from now on).
     * One watch per store, ended by close. 0 or -errno. */
    int (*obj_watch)(struct bs *bs, const char *name,
                     void (*cb)(void *arg, const void *buf, size_t len, int err), void *arg);
    /* Optional (rbd), both: the medium's size may change under the store (`rbd resize` by an
     * operator or another gateway). size_watch: cb(arg) on a store thread whenever the medium
     * may have changed (often when its size did not); cb must not block: it hands the work
     * on. cb NULL ends the watch, waiting for a cb still running. 0 or -errno. size_refresh:
     * the medium's current size into *size, published as bs->size (release); blocks on the
     * cluster, so only off the reactors. 0 or -errno. */
    int (*size_watch)(struct bs *bs, void (*cb)(void *arg), void *arg);
    int (*size_refresh)(struct bs *bs, uint64_t *size);
    /* Optional (rbd), for automatic failover between gateways: client_addr writes this
     * store's client address as the cluster knows it (0 or -errno); fence blocklists the
     * client at addr in the cluster, so that it can never write again (blocks on the
     * cluster; 0, or -errno with the cluster's words in err). */
    int (*client_addr)(struct bs *bs, char *buf, size_t len);
    int (*fence)(struct bs *bs, const char *addr, char *err, size_t errlen);
};

struct bs {
    const struct bs_ops *ops;
    uint64_t size;    /* bytes */
    bool write_cache; /* volatile cache present: WRITE without FUA may need FLUSH */
    bool thin;        /* UNMAP releases space */
    bool read_only;   /* opened read-only: writes would fail */
    bool write_same;  /* BS_WRITE_SAME is served by the store itself */
    /* Requests in flight together may mix inside a block: a READ overlapping a WRITE can
     * return a block half old, half new (the file store: the page cache copies without a
     * lock against readers). The SCSI core then keeps overlapping READs and WRITEs apart. A
     * store without it keeps every block whole by itself (RAM copies under its own locks). */
    bool order_rw;
    /* A WRITE of up to the SCSI core's atomic limit is all or nothing, for readers (with the
     * range lock) and across a crash (RAM: nothing outlives one). WRITE ATOMIC is offered
     * only on such a store. */
    bool write_atomic;
    /* Bytes of the store's allocation unit, when UNMAP releases only whole aligned units of it
     * (rbd: the RADOS object; a partial one is zeroed and stays allocated); 0: a page. */
    uint64_t unmap_unit;
    /* BS_COMPARE_AND_WRITE is served by the store, atomically for every client of the medium
     * (several gateways of one RBD image), for a range that stays within one aligned unit of
     * this many bytes (512 for rbd: librbd 16 compares within one sector); 0: not offered. */
    uint64_t caw_unit;
    /* lba_status blocks (it asks the cluster): the SCSI core calls it off the reactors. */
    bool lba_status_blocks;
    char desc[256]; /* what the store is, for logs: "ram:1G", "file:/srv/a.img" */
    /* A stable identity of the medium itself, the same wherever it is opened (the RBD image
     * id), for designators that must agree across gateways; empty when the store has none. */
    char medium_id[64];
    void *priv;
};

/* Parse a --lun SPEC ("ram:SIZE", "null:SIZE", "file:PATH[,size=SIZE][,direct]",
 * "rbd:POOL/IMAGE[,conf=PATH][,id=CLIENT][,size=SIZE][,timeout=SECONDS][,ro]") and open the
 * store. On failure returns NULL and writes a one-line reason into err. */
struct bs *bs_open_spec(const char *spec, char *err, size_t errlen);
/* The same, and *transient (when not NULL) says whether the failure may pass by itself: the
 * Ceph cluster did not answer, as opposed to a bad spec or a refused key. */
struct bs *bs_open_spec_ex(const char *spec, bool *transient, char *err, size_t errlen);
/* Grow the store (see bs_ops.grow); the new size is published last, with release. 0 or -1
 * with a reason in err. */
int bs_grow(struct bs *bs, uint64_t size, char *err, size_t errlen);
/* Close and free a store. No request may be in flight. */
void bs_close(struct bs *bs);
/* --inject store-delay (a testing aid, never for production, bs_delay.c): every READ or WRITE
 * a store that is not memory (file, rbd) takes on a reactor starts ms milliseconds per MiB it
 * moves late (other requests 1 ms), so tests can hold large writes in the store while they
 * abort them and small ones pass; 0 (the default) turns it off. Set before the reactors
 * start. */
extern unsigned bs_inject_delay_ms;
void bs_inject_delay(unsigned ms);
void bs_submit_delayed(struct bs *bs, struct bs_io *io);
/* The calling thread's file ring and store-delay queue are bound to the reactor it ran first;
 * a thread that destroys that reactor and creates another (the unit tests' harness, one per
 * test) drops them with these, once nothing of its is in flight: else a new reactor at the
 * old one's address would wait on an eventfd and a timer of the freed one. */
void bs_file_thread_reset(void);
void bs_delay_thread_reset(void);

static inline void bs_submit(struct bs *bs, struct bs_io *io)
{
    if (__builtin_expect(bs_inject_delay_ms != 0, 0) && !bs->ops->map)
        bs_submit_delayed(bs, io);
    else
        bs->ops->submit(bs, io);
}

/* Store memory to write [offset, offset+len) in place (see bs_ops.map), or NULL. */
static inline void *bs_map_write(struct bs *bs, uint64_t offset, uint64_t len)
{
    return bs->ops->map ? bs->ops->map(bs, offset, len, true) : NULL;
}

/* Store memory to read [offset, offset+len) in place (compares, copies), or NULL. */
static inline void *bs_map_read(struct bs *bs, uint64_t offset, uint64_t len)
{
    return bs->ops->map ? bs->ops->map(bs, offset, len, false) : NULL;
}

/* [offset, offset+len) as iovecs to send from (see bs_ops.read_iov): the count, or 0 when the
 * store has no memory or the range needs more than max entries. */
static inline int bs_read_iov(struct bs *bs, uint64_t offset, uint64_t len, struct iovec *iov,
                              int max)
{
    if (bs->ops->read_iov)
        return bs->ops->read_iov(bs, offset, len, iov, max);
    void *p = bs_map_read(bs, offset, len);
    if (!p || max < 1)
        return 0;
    iov[0] = (struct iovec){.iov_base = p, .iov_len = (size_t)len};
    return 1;
}

/* The provisioning state of [offset, offset + *len): see bs_ops.lba_status. A store without the
 * op reports the whole range mapped. */
static inline int bs_lba_status(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped)
{
    if (bs->ops->lba_status)
        return bs->ops->lba_status(bs, offset, len, mapped);
    *mapped = true;
    return 0;
}

#endif
