/* The RAM store: one anonymous, lazily populated mapping the size of the LUN. Untouched pages
 * cost nothing and read as zeros; map() hands out its memory for direct data placement and
 * zero-copy send; UNMAP gives whole pages back to the kernel. Completes synchronously. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bs/bs_priv.h"

struct bs_ram {
    uint8_t *base;
    size_t page;
};

static void *bs_ram_map(struct bs *bs, uint64_t offset, uint64_t len)
{
    struct bs_ram *ram = bs->priv;
    if (offset > bs->size || len > bs->size - offset)
        return NULL;
    return ram->base + offset;
}

/* Zero [offset, offset+len): whole pages go back to the kernel (MADV_DONTNEED on a private
 * anonymous mapping makes them read as zeros again and frees the memory), the partial pages at
 * either end are cleared by hand. */
static void bs_ram_unmap(struct bs_ram *ram, uint64_t offset, uint64_t len)
{
    uint64_t end = offset + len;
    uint64_t first = (offset + ram->page - 1) / ram->page * ram->page;
    uint64_t last = end / ram->page * ram->page;
    if (first >= last) {
        memset(ram->base + offset, 0, len);
        return;
    }
    memset(ram->base + offset, 0, first - offset);
    memset(ram->base + last, 0, end - last);
    if (madvise(ram->base + first, last - first, MADV_DONTNEED) < 0)
        memset(ram->base + first, 0, last - first);
}

static void bs_ram_submit(struct bs *bs, struct bs_io *io)
{
    struct bs_ram *ram = bs->priv;
    int err = bs_io_check(bs, io);
    if (!err) {
        switch (io->op) {
        case BS_READ:
            bs_copy_to_iov(io->iov, ram->base + io->offset, io->length);
            break;
        case BS_WRITE:
            bs_copy_from_iov(ram->base + io->offset, io->iov, io->length);
            break;
        case BS_FLUSH: /* nothing volatile to make stable: RAM is all there is */
            break;
        case BS_UNMAP:
            bs_ram_unmap(ram, io->offset, io->length);
            break;
        default:
            err = -EINVAL;
        }
    }
    io->done(io, err);
}

static void bs_ram_close(struct bs *bs)
{
    struct bs_ram *ram = bs->priv;
    munmap(ram->base, bs->size);
    free(ram);
}

static const struct bs_ops bs_ram_ops = {
    .name = "ram",
    .submit = bs_ram_submit,
    .map = bs_ram_map,
    .close = bs_ram_close,
};

struct bs *bs_ram_open(uint64_t size, char *err, size_t errlen)
{
    struct bs *bs = calloc(1, sizeof(*bs));
    struct bs_ram *ram = calloc(1, sizeof(*ram));
    if (!bs || !ram) {
        snprintf(err, errlen, "ram: out of memory");
        goto fail;
    }
    if (size > SIZE_MAX) {
        snprintf(err, errlen, "ram: size too large for this machine");
        goto fail;
    }
    /* MAP_NORESERVE: a 1T LUN on a 64G host is fine as long as it is never filled. */
    ram->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ram->base == MAP_FAILED) {
        snprintf(err, errlen, "ram: cannot map %llu bytes: %s", (unsigned long long)size,
                 strerror(errno));
        goto fail;
    }
    ram->page = (size_t)sysconf(_SC_PAGESIZE);
    bs->ops = &bs_ram_ops;
    bs->size = size;
    bs->write_cache = false;
    bs->thin = true;
    bs->priv = ram;
    return bs;
fail:
    free(ram);
    free(bs);
    return NULL;
}
