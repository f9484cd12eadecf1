/* Backing stores behind one small vtable: null, ram, file. The SCSI core addresses a store
 * in bytes; a store never sees a CDB. Completions run on the reactor thread that submitted. */
#ifndef LR_BS_H
#define LR_BS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "util/list.h"

struct bs;
struct reactor;

enum bs_op { BS_READ, BS_WRITE, BS_FLUSH, BS_UNMAP };

/* Store-private progress of one request; callers need not initialise it. The file store may
 * trim the first and last entries of io->iov in place while the request is in flight (to
 * resume a short transfer without copying the vector); it restores them before done(). */
struct bs_io_state {
    struct bs *bs;
    uint64_t done;         /* bytes transferred so far */
    struct list_node node; /* per-ring overflow queue while the ring is full */
    int head, tail;        /* iov entries trimmed in place, -1 if none */
    struct iovec head_orig, tail_orig;
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
    bool fua; /* WRITE: stable before completion (RWF_DSYNC on the file store) */
    /* Called exactly once, possibly before bs_submit() returns, with 0 or -errno. */
    void (*done)(struct bs_io *io, int err);
    void *arg;
    struct bs_io_state st;
};

struct bs_ops {
    const char *name;
    /* Serve a READ/WRITE/FLUSH/UNMAP. Never blocks the reactor. A range outside the store or
     * an iovec shorter than length completes with -EINVAL. */
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
    /* Release priv (the file store first makes written data stable). */
    void (*close)(struct bs *bs);
    /* Optional, for GET LBA STATUS (SBC-4 §5.7): the provisioning state at offset. On entry
     * *len is how far to look (> 0, within the store); on return it is the length of the run
     * starting at offset whose state is *mapped (at least 1 byte, at most the entry value; a
     * store may stop early to bound the work). Ends fall on the store's allocation unit (page,
     * file system block) except at offset + the entry *len. Synchronous and cheap: it reads
     * metadata only. 0 or -errno. NULL: every byte counts as mapped. */
    int (*lba_status)(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped);
    /* Optional: grow to `size` bytes (> the current size) while requests run, for a LUN
     * resized at run time. The new bytes read as zeros. 0, or -1 with a one-line reason in
     * err. NULL: the store cannot grow. */
    int (*grow)(struct bs *bs, uint64_t size, char *err, size_t errlen);
};

struct bs {
    const struct bs_ops *ops;
    uint64_t size;    /* bytes */
    bool write_cache; /* volatile cache present: WRITE without FUA may need FLUSH */
    bool thin;        /* UNMAP releases space */
    bool read_only;   /* opened read-only: writes would fail */
    char desc[256];   /* what the store is, for logs: "ram:1G", "file:/srv/a.img" */
    void *priv;
};

/* Parse a --lun SPEC ("ram:SIZE", "null:SIZE", "file:PATH[,size=SIZE][,direct]") and open the
 * store. On failure returns NULL and writes a one-line reason into err. */
struct bs *bs_open_spec(const char *spec, char *err, size_t errlen);
/* Grow the store (see bs_ops.grow); the new size is published last, with release. 0 or -1
 * with a reason in err. */
int bs_grow(struct bs *bs, uint64_t size, char *err, size_t errlen);
/* Close and free a store. No request may be in flight. */
void bs_close(struct bs *bs);

static inline void bs_submit(struct bs *bs, struct bs_io *io)
{
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
