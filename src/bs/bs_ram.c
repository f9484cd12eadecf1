/* The RAM store: one anonymous, lazily populated mapping the size of the LUN. Untouched pages
 * cost nothing and read as zeros; map() hands out its memory for direct data placement and
 * zero-copy send; UNMAP gives whole pages back to the kernel; lba_status() tells pages that
 * hold data of their own from those that do not. Completes synchronously. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bs/bs_priv.h"

struct bs_ram {
    uint8_t *base;
    size_t page;
    int pagemap; /* /proc/self/pagemap, or -1: fall back to mincore() */
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

/* Pages looked at per lba_status() call: bounds the work of one GET LBA STATUS (4 GiB of 4 KiB
 * pages), and per read of the page map. */
#define RAM_STATUS_MAX_PAGES (1u << 20)
#define RAM_STATUS_BATCH 512

/* pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst) */
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_EXCLUSIVE (1ull << 56)

/* Whether pages [first, first + n) hold memory of their own, into out[]. A page only ever read
 * maps the kernel's shared zero page: mincore() calls it resident, but it is not allocated to
 * the LUN, so the page map's "exclusively mapped" bit is what tells a written page. */
static int ram_pages_mapped(struct bs_ram *ram, uint64_t first, size_t n, bool *out)
{
    if (ram->pagemap >= 0) {
        uint64_t e[RAM_STATUS_BATCH];
        off_t at = (off_t)(((uintptr_t)ram->base / ram->page + first) * sizeof(e[0]));
        ssize_t got = pread(ram->pagemap, e, n * sizeof(e[0]), at);
        if (got == (ssize_t)(n * sizeof(e[0]))) {
            for (size_t i = 0; i < n; i++)
                out[i] = (e[i] & PM_SWAPPED) ||
                         (e[i] & (PM_PRESENT | PM_EXCLUSIVE)) == (PM_PRESENT | PM_EXCLUSIVE);
            return 0;
        }
    }
    unsigned char v[RAM_STATUS_BATCH];
    if (mincore(ram->base + first * ram->page, n * ram->page, v) < 0)
        return -errno;
    for (size_t i = 0; i < n; i++)
        out[i] = v[i] & 1;
    return 0;
}

static int bs_ram_lba_status(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped)
{
    struct bs_ram *ram = bs->priv;
    if (!*len || offset > bs->size || *len > bs->size - offset)
        return -EINVAL;
    uint64_t end = offset + *len;
    uint64_t page = offset / ram->page, last = (end - 1) / ram->page;
    uint64_t stop = last + 1;
    if (stop - page > RAM_STATUS_MAX_PAGES)
        stop = page + RAM_STATUS_MAX_PAGES;
    bool state[RAM_STATUS_BATCH];
    bool first = true;
    while (page < stop) {
        size_t n = stop - page < RAM_STATUS_BATCH ? (size_t)(stop - page) : RAM_STATUS_BATCH;
        int err = ram_pages_mapped(ram, page, n, state);
        if (err)
            return err;
        for (size_t i = 0; i < n; i++) {
            if (first) {
                *mapped = state[0];
                first = false;
            } else if (state[i] != *mapped) {
                *len = (page + i) * ram->page - offset;
                return 0;
            }
        }
        page += n;
    }
    uint64_t run_end = stop * ram->page;
    *len = (run_end < end ? run_end : end) - offset;
    return 0;
}

static void bs_ram_close(struct bs *bs)
{
    struct bs_ram *ram = bs->priv;
    munmap(ram->base, bs->size);
    if (ram->pagemap >= 0)
        close(ram->pagemap);
    free(ram);
}

static const struct bs_ops bs_ram_ops = {
    .name = "ram",
    .submit = bs_ram_submit,
    .map = bs_ram_map,
    .close = bs_ram_close,
    .lba_status = bs_ram_lba_status,
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
    ram->pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
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
