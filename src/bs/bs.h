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
     * zero-copy send; NULL if it does not (then the caller uses a buffer and submit()). */
    void *(*map)(struct bs *bs, uint64_t offset, uint64_t len);
    /* Release priv (the file store first makes written data stable). */
    void (*close)(struct bs *bs);
    /* Optional, for GET LBA STATUS (SBC-4 §5.7): the provisioning state at offset. On entry
     * *len is how far to look (> 0, within the store); on return it is the length of the run
     * starting at offset whose state is *mapped (at least 1 byte, at most the entry value; a
     * store may stop early to bound the work). Ends fall on the store's allocation unit (page,
     * file system block) except at offset + the entry *len. Synchronous and cheap: it reads
     * metadata only. 0 or -errno. NULL: every byte counts as mapped. */
    int (*lba_status)(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped);
};

struct bs {
    const struct bs_ops *ops;
    uint64_t size;    /* bytes */
    bool write_cache; /* volatile cache present: WRITE without FUA may need FLUSH */
    bool thin;        /* UNMAP releases space */
    char desc[256];   /* what the store is, for logs: "ram:1G", "file:/srv/a.img" */
    void *priv;
};

/* Parse a --lun SPEC ("ram:SIZE", "null:SIZE", "file:PATH[,size=SIZE][,direct]") and open the
 * store. On failure returns NULL and writes a one-line reason into err. */
struct bs *bs_open_spec(const char *spec, char *err, size_t errlen);
/* Close and free a store. No request may be in flight. */
void bs_close(struct bs *bs);

static inline void bs_submit(struct bs *bs, struct bs_io *io)
{
    bs->ops->submit(bs, io);
}

static inline void *bs_map(struct bs *bs, uint64_t offset, uint64_t len)
{
    return bs->ops->map ? bs->ops->map(bs, offset, len) : NULL;
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
