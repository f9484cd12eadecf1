/* Backing stores behind one small vtable: null, ram, file. The SCSI core addresses a store
 * in bytes; a store never sees a CDB. Completions run on the reactor thread that submitted. */
#ifndef LR_BS_H
#define LR_BS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct bs;
struct reactor;

enum bs_op { BS_READ, BS_WRITE, BS_FLUSH, BS_UNMAP };

/* One request. The caller owns it until done() runs. */
struct bs_io {
    enum bs_op op;
    uint64_t offset;
    uint64_t length;
    struct iovec *iov; /* READ/WRITE: buffers totalling length bytes */
    int iovcnt;
    bool fua;          /* WRITE: stable before completion (RWF_DSYNC on the file store) */
    /* Called exactly once, possibly before bs_submit() returns, with 0 or -errno. */
    void (*done)(struct bs_io *io, int err);
    void *arg;
};

struct bs_ops {
    const char *name;
    /* Serve a READ/WRITE/FLUSH/UNMAP. Never blocks the reactor. */
    void (*submit)(struct bs *bs, struct bs_io *io);
    /* Memory of [offset, offset+len) if the store lives in RAM, for direct data placement and
     * zero-copy send; NULL if it does not (then the caller uses a buffer and submit()). */
    void *(*map)(struct bs *bs, uint64_t offset, uint64_t len);
    void (*close)(struct bs *bs);
};

struct bs {
    const struct bs_ops *ops;
    uint64_t size;      /* bytes */
    bool write_cache;   /* volatile cache present: WRITE without FUA may need FLUSH */
    bool thin;          /* UNMAP releases space */
    char desc[256];     /* what the store is, for logs: "ram:1G", "file:/srv/a.img" */
    void *priv;
};

/* Parse a --lun SPEC ("ram:SIZE", "null:SIZE", "file:PATH[,size=SIZE][,direct]") and open the
 * store. On failure returns NULL and writes a one-line reason into err. */
struct bs *bs_open_spec(const char *spec, char *err, size_t errlen);
void bs_close(struct bs *bs);

static inline void bs_submit(struct bs *bs, struct bs_io *io)
{
    bs->ops->submit(bs, io);
}

static inline void *bs_map(struct bs *bs, uint64_t offset, uint64_t len)
{
    return bs->ops->map ? bs->ops->map(bs, offset, len) : NULL;
}

#endif
