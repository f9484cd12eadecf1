/* The null store: a LUN of a given size that reads zeros and discards writes, for measuring
 * the transport without any storage cost. It has no memory, so map() is absent (a mapping
 * would have to be writable, and writes must not land anywhere). Completes synchronously. */
#include <stdio.h>
#include <stdlib.h>

#include "bs/bs_io.h"
#include "bs/bs_store.h"

static void bs_null_submit(struct bs *bs, struct bs_io *io)
{
    int err = bs_io_check(bs, io);
    if (!err && io->op == BS_READ) {
        uint64_t left = io->length;
        for (int i = 0; left; i++) {
            size_t n = io->iov[i].iov_len < left ? io->iov[i].iov_len : (size_t)left;
            memset(io->iov[i].iov_base, 0, n);
            left -= n;
        }
    }
    io->done(io, err);
}

/* Nothing to do: the new blocks read as zeros like the others. */
static int bs_null_grow(struct bs *bs, uint64_t size, char *err, size_t errlen)
{
    (void)bs;
    (void)size;
    (void)err;
    (void)errlen;
    return 0;
}

static const struct bs_ops bs_null_ops = {
    .name = "null",
    .product = "NULLDISK",
    .submit = bs_null_submit,
    .grow = bs_null_grow,
};

struct bs *bs_null_open(uint64_t size, char *err, size_t errlen)
{
    struct bs *bs = calloc(1, sizeof(*bs));
    if (!bs) {
        snprintf(err, errlen, "null: out of memory");
        return NULL;
    }
    bs->ops = &bs_null_ops;
    bs->size = size;
    bs->write_cache = false;
    bs->thin = true; /* UNMAP is trivially honoured: every block already reads as zero */
    return bs;
}
