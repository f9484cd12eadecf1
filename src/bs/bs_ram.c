/* The RAM store: one anonymous, lazily populated mapping the size of the LUN. Untouched pages
 * cost nothing and read as zeros; map() hands out its memory for direct data placement and
 * zero-copy send; UNMAP gives whole pages back to the kernel; lba_status() tells pages that
 * hold data of their own from those that do not. Completes synchronously. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bs/bs_priv.h"

struct bs_ram {
    uint8_t *base;
    size_t page;
    int pagemap;  /* /proc/self/pagemap, or -1: fall back to mincore() */
    bool no_scan; /* the kernel has no PAGEMAP_SCAN: read the page map */
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
/* PAGEMAP_SCAN (Linux 6.7): the kernel walks the range and returns runs of pages with equal
 * categories, instead of one 8-byte entry per page. Much cheaper than read() of the page map
 * on a populated LUN (qemu asks GET LBA STATUS of the whole LUN before large reads). Defined
 * here because older uapi headers lack it. */
#ifndef PAGEMAP_SCAN
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region {
    uint64_t start, end, categories;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_PRESENT (1ull << 3)
#define PAGE_IS_SWAPPED (1ull << 4)
#define PAGE_IS_PFNZERO (1ull << 5)
#endif

/* Runs of pages from page `first`: *mapped for the first run, its length in pages as the
 * return value; 0 when PAGEMAP_SCAN is not available. */
static size_t ram_scan_run(struct bs_ram *ram, uint64_t first, uint64_t n, bool *mapped)
{
    if (ram->pagemap < 0 || ram->no_scan)
        return 0;
    struct page_region v[16];
    uint64_t start = (uint64_t)(uintptr_t)ram->base + first * ram->page;
    struct pm_scan_arg a = {
        .size = sizeof(a),
        .start = start,
        .end = start + n * ram->page,
        .vec = (uint64_t)(uintptr_t)v,
        .vec_len = 16,
        .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_PFNZERO,
    };
    long got = ioctl(ram->pagemap, PAGEMAP_SCAN, &a);
    if (got < 0) {
        ram->no_scan = true;
        return 0;
    }
    /* pages absent from the answer (holes) are not mapped; regions come sorted */
    uint64_t at = start, end = a.walk_end ? a.walk_end : a.end;
    bool first_state = false, have = false;
    for (long i = 0; i <= got; i++) {
        uint64_t rs = i < got ? v[i].start : end, re = i < got ? v[i].end : end;
        if (rs > at) { /* a gap: unmapped */
            if (!have) {
                first_state = false;
                have = true;
            } else if (first_state) {
                break;
            }
            at = rs;
        }
        if (i == got)
            break;
        uint64_t c = v[i].categories;
        bool m = (c & PAGE_IS_SWAPPED) || ((c & PAGE_IS_PRESENT) && !(c & PAGE_IS_PFNZERO));
        if (!have) {
            first_state = m;
            have = true;
        } else if (m != first_state) {
            break;
        }
        at = re;
    }
    if (!have || at == start)
        return 0;
    *mapped = first_state;
    /* a full vector may have stopped the walk early: report only what was seen */
    return (at - start) / ram->page;
}

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
    bool m = false;
    size_t run = ram_scan_run(ram, page, stop - page, &m);
    if (run) {
        *mapped = m;
        uint64_t run_end = (page + run) * ram->page;
        *len = (run_end < end ? run_end : end) - offset;
        return 0;
    }
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
