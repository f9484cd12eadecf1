/* The RAM store: one anonymous, lazily populated mapping the size of the LUN, and an allocation
 * map of its own (one bit per page) that says which pages may hold data. The map, not the
 * kernel's page tables, is the provisioning state (SBC-4 §4.7.3): only WRITE (and what writes:
 * WRITE SAME, COMPARE AND WRITE, EXTENDED COPY, SANITIZE OVERWRITE) maps a page, only UNMAP
 * (and WRITE SAME with UNMAP, SANITIZE BLOCK ERASE) deallocates one, and a READ never does: a
 * never-written range is served from a shared zero buffer without touching the mapping, so
 * reading a large thin LUN costs no memory on any kernel. A request completes before submit
 * returns, except a WRITE or UNMAP over pages that a READ sent in place still pins
 * (bs_ram_read_pin): it waits, queued, and completes when the last such pin goes
 * (bs_ram_unpin). */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bs/bs_io.h"
#include "bs/bs_store.h"
#include "util/log.h"

/* Invariant: a page whose bit is clear reads as zeros in the mapping. Writers set the bits
 * before the data lands (and again after, see below); UNMAP clears the bits of whole pages
 * before it gives them back with MADV_DONTNEED. Concurrent commands on other reactors use
 * atomic word updates, and every interleaving of a write with an overlapping UNMAP ends with
 * either the bit set or the page zero, never a clear bit over data. */
struct bs_ram {
    uint8_t *base;
    size_t page;
    unsigned page_shift;
    uint64_t npages;
    _Atomic uint64_t *alloc; /* bit p set: page p may hold data (mapped) */
    bool prealloc;           /* ",prealloc": every page allocated at open and kept */
    /* Bytes mapped (and covered by the allocation map): a thin LUN reserves room to grow
     * into at run time (bs_ram_grow) without moving memory that tasks point into. */
    uint64_t cap;
    struct ram_stripe *stripes; /* RAM_STRIPES */
    /* READs sent in place (bs_ram_read_pin): per RAM_PIN_SHIFT region modulo RAM_PINS, the
     * READs whose data the transport still sends from the LUN, and the WRITEs (UNMAPs)
     * waiting for them; a region with a writer waiting takes no new pin (its READs copy), so
     * a steady stream of READs cannot starve a WRITE. */
    struct ram_pin *pins;
    uint64_t send_min;        /* READs shorter than this copy (BS_RAM_SEND_MIN) */
    pthread_mutex_t wait_m;   /* guards waiting */
    struct list_node waiting; /* WRITE/UNMAP bs_io (st.node) waiting for pins to go */
    _Atomic unsigned nwaiting;
};

#define RAM_PINS 1024
#define RAM_PIN_SHIFT 16
struct ram_pin {
    _Atomic uint32_t readers, writers;
};

/* Copies in and out of the LUN exclude each other where they overlap, so a READ returns every
 * block wholly before or wholly after a concurrent WRITE (and a WRITE or UNMAP does not mix
 * with another): a reader-writer lock per stripe, the stripe of a byte being its
 * RAM_STRIPE_SHIFT region modulo RAM_STRIPES. A request takes the stripes its range touches in
 * ascending order (all of them when it spans RAM_STRIPES regions or more). The copies are at
 * most SCSI_MAX_XFER_BYTES of memcpy, so a reactor waits microseconds at worst. */
#define RAM_STRIPES 64
#define RAM_STRIPE_SHIFT 20
struct ram_stripe {
    pthread_rwlock_t lock;
} __attribute__((aligned(64)));

/* Address space a thin RAM LUN reserves beyond its size: as much again, at least 64 GiB.
 * Untouched, it costs neither memory nor commit charge (MAP_NORESERVE). */
#define RAM_GROW_MIN (64ull << 30)

/* The zero buffer that unmapped runs are sent from: real, written memory (so no kernel's
 * zero-page policy is involved), shared by every RAM LUN and never written after setup. */
#define RAM_ZERO_LEN (1u << 20)
static uint8_t *ram_zeros;
static pthread_once_t ram_zeros_once = PTHREAD_ONCE_INIT;

static void ram_zeros_init(void)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, RAM_ZERO_LEN) == 0) {
        memset(p, 0, RAM_ZERO_LEN);
        ram_zeros = p;
    }
}

/* ---- the allocation map ---------------------------------------------------------------- */

/* Set or clear the bits of pages [first, end). A word that already has the bits set is only
 * read: rewrites of mapped data (the steady state) cost no locked instruction and leave the
 * cache line shared between reactors. */
static void ram_bits(struct bs_ram *ram, uint64_t first, uint64_t end, bool set)
{
    while (first < end) {
        uint64_t w = first / 64, lo = first % 64;
        uint64_t n = end - first < 64 - lo ? end - first : 64 - lo;
        uint64_t mask = (~0ull >> (64 - n)) << lo;
        if (set) {
            if ((atomic_load_explicit(&ram->alloc[w], memory_order_relaxed) & mask) != mask)
                atomic_fetch_or_explicit(&ram->alloc[w], mask, memory_order_release);
        } else {
            atomic_fetch_and_explicit(&ram->alloc[w], ~mask, memory_order_release);
        }
        first += n;
    }
}

static bool ram_bit(struct bs_ram *ram, uint64_t p)
{
    return (atomic_load_explicit(&ram->alloc[p / 64], memory_order_acquire) >> (p % 64)) & 1;
}

/* Mark the pages that [offset, offset+len) touches as mapped. */
static void ram_mark(struct bs_ram *ram, uint64_t offset, uint64_t len)
{
    if (len)
        ram_bits(ram, offset >> ram->page_shift, ((offset + len - 1) >> ram->page_shift) + 1, true);
}

/* The run of pages from `first` (before `limit`) whose bits equal first's: its length in
 * pages (at least 1), first's state in *mapped. A word of the map at a time. */
static uint64_t ram_run(struct bs_ram *ram, uint64_t first, uint64_t limit, bool *mapped)
{
    bool m = ram_bit(ram, first);
    uint64_t p = first;
    while (p < limit) {
        uint64_t w = atomic_load_explicit(&ram->alloc[p / 64], memory_order_acquire);
        uint64_t differ = (m ? ~w : w) >> (p % 64); /* ones where a page's state is not m */
        if (differ) {
            p += (uint64_t)__builtin_ctzll(differ);
            break;
        }
        p += 64 - p % 64;
    }
    *mapped = m;
    if (p > limit)
        p = limit;
    return p > first ? p - first : 1; /* a page changed under us: report it alone */
}

/* The end of the run of pages in one state that holds byte `off`, in bytes and at most `end`
 * (the map is looked at no further than the page of end - 1); the state in *mapped. */
static uint64_t ram_run_end(struct bs_ram *ram, uint64_t off, uint64_t end, bool *mapped)
{
    uint64_t p = off >> ram->page_shift, limit = ((end - 1) >> ram->page_shift) + 1;
    uint64_t run_end = (p + ram_run(ram, p, limit, mapped)) << ram->page_shift;
    return run_end < end ? run_end : end;
}

/* ---- data ---------------------------------------------------------------------------------- */

/* Copy n bytes of src (zeros when src is NULL) into the iovec, starting `at` bytes into it. A
 * buffer that already is the source (the caller mapped the range and submitted anyway) is left
 * alone: memcpy onto itself is undefined. */
static void iov_put(const struct iovec *iov, uint64_t at, const uint8_t *src, uint64_t n)
{
    for (int i = 0; n; i++) {
        if (at >= iov[i].iov_len) {
            at -= iov[i].iov_len;
            continue;
        }
        uint8_t *dst = (uint8_t *)iov[i].iov_base + at;
        size_t k = iov[i].iov_len - at < n ? iov[i].iov_len - at : (size_t)n;
        if (!src)
            memset(dst, 0, k);
        else if (dst != src)
            memcpy(dst, src, k);
        if (src)
            src += k;
        n -= k;
        at = 0;
    }
}

/* READ: mapped runs are copied, unmapped ones zero-filled; the mapping of a never-written page
 * is not read. */
static void ram_read(struct bs_ram *ram, const struct bs_io *io)
{
    uint64_t off = io->offset, end = io->offset + io->length;
    while (off < end) {
        bool m;
        uint64_t run_end = ram_run_end(ram, off, end, &m);
        iov_put(io->iov, off - io->offset, m ? ram->base + off : NULL, run_end - off);
        off = run_end;
    }
}

/* Clear [a, b) in the pages that hold data; a page without data already reads as zeros and
 * is left untouched. */
static void ram_zero_part(struct bs_ram *ram, uint64_t a, uint64_t b)
{
    while (a < b) {
        uint64_t next = ((a >> ram->page_shift) + 1) << ram->page_shift;
        uint64_t e = next < b ? next : b;
        if (ram_bit(ram, a >> ram->page_shift))
            memset(ram->base + a, 0, e - a);
        a = e;
    }
}

/* UNMAP: whole pages are deallocated (bits cleared first, then the memory given back:
 * MADV_DONTNEED on a private anonymous mapping makes them read as zeros again); the partial
 * pages at either end keep their state and have their part cleared. */
static void ram_unmap(struct bs_ram *ram, uint64_t offset, uint64_t len)
{
    uint64_t end = offset + len;
    if (ram->prealloc) { /* fully provisioned: the memory stays, zeroed */
        memset(ram->base + offset, 0, len);
        return;
    }
    uint64_t first = (offset + ram->page - 1) >> ram->page_shift;
    uint64_t last = end >> ram->page_shift; /* whole pages are [first, last) */
    if (first >= last) {
        ram_zero_part(ram, offset, end);
        return;
    }
    uint64_t head = first << ram->page_shift, tail = last << ram->page_shift;
    ram_zero_part(ram, offset, head);
    ram_zero_part(ram, tail, end);
    ram_bits(ram, first, last, false);
    if (madvise(ram->base + head, tail - head, MADV_DONTNEED) < 0) {
        /* the memory cannot go back: the pages still have to read as zeros */
        ram_bits(ram, first, last, true);
        memset(ram->base + head, 0, tail - head);
    }
}

enum ram_hold { RAM_READ_LOCK, RAM_WRITE_LOCK, RAM_UNLOCK };

static void ram_stripe_run(struct bs_ram *ram, unsigned from, unsigned to, enum ram_hold how)
{
    for (unsigned i = from; i < to; i++) {
        pthread_rwlock_t *l = &ram->stripes[i].lock;
        if (how == RAM_READ_LOCK)
            pthread_rwlock_rdlock(l);
        else if (how == RAM_WRITE_LOCK)
            pthread_rwlock_wrlock(l);
        else
            pthread_rwlock_unlock(l);
    }
}

/* Lock (or unlock) the stripes [offset, offset+len) touches, in ascending order of index: one
 * run of them, or two when the range wraps around the array. */
static void ram_stripes(struct bs_ram *ram, uint64_t offset, uint64_t len, enum ram_hold how)
{
    uint64_t a = offset >> RAM_STRIPE_SHIFT, b = (offset + len - 1) >> RAM_STRIPE_SHIFT;
    unsigned first = (unsigned)(a % RAM_STRIPES), last = (unsigned)(b % RAM_STRIPES);
    if (b - a + 1 >= RAM_STRIPES) {
        ram_stripe_run(ram, 0, RAM_STRIPES, how);
    } else if (first <= last) {
        ram_stripe_run(ram, first, last + 1, how);
    } else {
        ram_stripe_run(ram, 0, last + 1, how);
        ram_stripe_run(ram, first, RAM_STRIPES, how);
    }
}

/* ---- READs sent in place ------------------------------------------------------------------- */

/* The pin slots [offset, offset+len) touches: fn on each once (all of them when the range
 * spans RAM_PINS regions or more); stops and returns true when fn does. */
static bool ram_pin_each(struct bs_ram *ram, uint64_t offset, uint64_t len,
                         bool (*fn)(struct ram_pin *p, void *arg), void *arg)
{
    uint64_t a = offset >> RAM_PIN_SHIFT, b = (offset + len - 1) >> RAM_PIN_SHIFT;
    if (b - a + 1 >= RAM_PINS)
        a = 0, b = RAM_PINS - 1;
    for (uint64_t i = a; i <= b; i++)
        if (fn(&ram->pins[i % RAM_PINS], arg))
            return true;
    return false;
}

static bool pin_has_writer(struct ram_pin *p, void *arg)
{
    (void)arg;
    return atomic_load(&p->writers) != 0;
}

static bool pin_has_reader(struct ram_pin *p, void *arg)
{
    (void)arg;
    return atomic_load(&p->readers) != 0;
}

static bool pin_add(struct ram_pin *p, void *arg)
{
    atomic_fetch_add(arg ? &p->writers : &p->readers, 1);
    return false;
}

static bool pin_drop(struct ram_pin *p, void *arg)
{
    uint32_t before = atomic_fetch_sub(arg ? &p->writers : &p->readers, 1);
    assert(before);
    (void)before;
    return false;
}

void bs_ram_set_send_min(struct bs *bs, uint64_t min)
{
    ((struct bs_ram *)bs->priv)->send_min = min;
}

/* Under the stripes' read lock, so no WRITE is halfway through the range: the pieces as
 * read_iov gives them, pinned until bs_ram_unpin. A region with a WRITE waiting is not pinned
 * again: the READ copies instead (the WRITE waits only for the pins taken before it came). */
static int bs_ram_read_pin(struct bs *bs, uint64_t offset, uint64_t len, struct iovec *iov, int max)
{
    struct bs_ram *ram = bs->priv;
    if (len < ram->send_min || !len || offset > bs->size || len > bs->size - offset)
        return 0;
    ram_stripes(ram, offset, len, RAM_READ_LOCK);
    int n = 0;
    if (!ram_pin_each(ram, offset, len, pin_has_writer, NULL)) {
        n = bs->ops->read_iov(bs, offset, len, iov, max);
        if (n)
            ram_pin_each(ram, offset, len, pin_add, NULL);
    }
    ram_stripes(ram, offset, len, RAM_UNLOCK);
    return n;
}

static void ram_resubmit(void *arg);

/* Under wait_m: every waiting WRITE whose range no READ pins any more moves to `ready`. */
static void ram_wake(struct bs_ram *ram, struct list_node *ready)
{
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &ram->waiting)
    {
        struct bs_io *io = list_entry(n, struct bs_io, st.node);
        if (ram_pin_each(ram, io->offset, io->length, pin_has_reader, NULL))
            continue;
        list_del(&io->st.node);
        atomic_fetch_sub(&ram->nwaiting, 1);
        list_add_tail(ready, &io->st.node);
    }
}

static void bs_ram_unpin(struct bs *bs, uint64_t offset, uint64_t len)
{
    struct bs_ram *ram = bs->priv;
    ram_pin_each(ram, offset, len, pin_drop, NULL);
    /* seq_cst: pairs with ram_wait's increment of nwaiting before its look at the pins */
    if (!atomic_load(&ram->nwaiting))
        return;
    struct list_node ready, *n;
    list_init(&ready);
    pthread_mutex_lock(&ram->wait_m);
    ram_wake(ram, &ready);
    pthread_mutex_unlock(&ram->wait_m);
    /* Each goes again on the reactor it was submitted on (a message), not on the thread that
     * let go of the pages nor inside its stack. One submitted off every reactor (st.r NULL:
     * the daemon's WRITEs and UNMAPs all come from reactors, a unit test's or a tool's do not)
     * has no reactor to go back to: it runs here, on the unpinning thread, with no lock of
     * this store held, and its done() runs here too; such a submitter waits for done() in a
     * way any thread may end (test_bs.c test_ram_pin). */
    while ((n = list_pop(&ready)) != NULL) {
        struct bs_io *io = list_entry(n, struct bs_io, st.node);
        if (io->st.r)
            reactor_post(io->st.r, &io->st.msg, ram_resubmit, io);
        else
            ram_resubmit(io);
    }
}

/* A WRITE or UNMAP over pages a READ still sends from waits (without the stripes' lock) until
 * the last such pin goes; its regions count it as a writer (no new pins) until it has run.
 * true: queued; false: nothing pins the range any more, go on. */
static bool ram_wait(struct bs_ram *ram, struct bs_io *io)
{
    if (!ram_pin_each(ram, io->offset, io->length, pin_has_reader, NULL))
        return false;
    pthread_mutex_lock(&ram->wait_m);
    if (!io->st.res) { /* counted as a writer from the first wait to its end */
        io->st.res = 1;
        ram_pin_each(ram, io->offset, io->length, pin_add, io);
    }
    atomic_fetch_add(&ram->nwaiting, 1);
    bool still = ram_pin_each(ram, io->offset, io->length, pin_has_reader, NULL);
    if (still) {
        io->st.r = reactor_self();
        list_add_tail(&ram->waiting, &io->st.node);
    } else {
        atomic_fetch_sub(&ram->nwaiting, 1);
    }
    pthread_mutex_unlock(&ram->wait_m);
    return still;
}

static void ram_submit(struct bs *bs, struct bs_io *io);

static void ram_resubmit(void *arg)
{
    struct bs_io *io = arg;
    ram_submit(io->st.bs, io);
}

static void bs_ram_submit(struct bs *bs, struct bs_io *io)
{
    io->st.bs = bs;
    io->st.res = 0; /* not waiting for pins (ram_wait) */
    ram_submit(bs, io);
}

static void ram_submit(struct bs *bs, struct bs_io *io)
{
    struct bs_ram *ram = bs->priv;
    int err = bs_io_check(bs, io);
    bool locked =
        !err && io->length && (io->op == BS_READ || io->op == BS_WRITE || io->op == BS_UNMAP);
    if (locked)
        ram_stripes(ram, io->offset, io->length,
                    io->op == BS_READ ? RAM_READ_LOCK : RAM_WRITE_LOCK);
    if (locked && io->op != BS_READ && ram_wait(ram, io)) {
        ram_stripes(ram, io->offset, io->length, RAM_UNLOCK);
        return; /* ram_wake submits it again */
    }
    if (!err) {
        switch (io->op) {
        case BS_READ:
            ram_read(ram, io);
            break;
        case BS_WRITE:
            /* mapped before the data lands and again after: an UNMAP on another reactor in
             * between cannot leave data under a clear bit */
            ram_mark(ram, io->offset, io->length);
            bs_copy_from_iov(ram->base + io->offset, io->iov, io->length);
            ram_mark(ram, io->offset, io->length);
            break;
        case BS_FLUSH: /* nothing volatile to make stable: RAM is all there is */
            break;
        case BS_UNMAP:
            ram_unmap(ram, io->offset, io->length);
            break;
        default:
            err = -EINVAL;
        }
    }
    if (locked)
        ram_stripes(ram, io->offset, io->length, RAM_UNLOCK);
    if (io->st.res) { /* it waited: its regions may take pins again */
        ram_pin_each(ram, io->offset, io->length, pin_drop, io);
        io->st.res = 0;
    }
    io->done(io, err);
}

static void *bs_ram_map(struct bs *bs, uint64_t offset, uint64_t len, bool write)
{
    struct bs_ram *ram = bs->priv;
    if (offset > bs->size || len > bs->size - offset)
        return NULL;
    if (write)
        ram_mark(ram, offset, len);
    return ram->base + offset;
}

static int bs_ram_read_iov(struct bs *bs, uint64_t offset, uint64_t len, struct iovec *iov, int max)
{
    struct bs_ram *ram = bs->priv;
    if (offset > bs->size || len > bs->size - offset || !ram_zeros)
        return 0;
    int n = 0;
    uint64_t off = offset, end = offset + len;
    while (off < end) {
        bool m;
        uint64_t run_end = ram_run_end(ram, off, end, &m);
        while (off < run_end) { /* a zero run longer than the zero buffer takes several */
            uint64_t k = run_end - off;
            if (!m && k > RAM_ZERO_LEN)
                k = RAM_ZERO_LEN;
            if (n == max)
                return 0;
            iov[n++] =
                (struct iovec){.iov_base = m ? ram->base + off : ram_zeros, .iov_len = (size_t)k};
            off += k;
        }
    }
    return n;
}

/* Pages looked at per lba_status() call: bounds the work of one GET LBA STATUS (4 GiB of 4 KiB
 * pages, 16384 words of the map). */
#define RAM_STATUS_MAX_PAGES (1u << 20)

static int bs_ram_lba_status(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped)
{
    struct bs_ram *ram = bs->priv;
    if (!*len || offset > bs->size || *len > bs->size - offset)
        return -EINVAL;
    uint64_t end = offset + *len;
    uint64_t stop = ((offset >> ram->page_shift) + RAM_STATUS_MAX_PAGES) << ram->page_shift;
    *len = ram_run_end(ram, offset, end < stop ? end : stop, mapped) - offset;
    return 0;
}

static void bs_ram_close(struct bs *bs)
{
    struct bs_ram *ram = bs->priv;
    munmap(ram->base, ram->cap);
    assert(list_empty(&ram->waiting));
    pthread_mutex_destroy(&ram->wait_m);
    free(ram->pins);
    for (unsigned i = 0; i < RAM_STRIPES; i++)
        pthread_rwlock_destroy(&ram->stripes[i].lock);
    free(ram->stripes);
    free(ram->alloc);
    free(ram);
}

/* Within the reserved mapping the new pages are untouched (zero) and their bits are clear;
 * the size is published last, so no request sees the range before it is there. */
static int bs_ram_grow(struct bs *bs, uint64_t size, char *err, size_t errlen)
{
    struct bs_ram *ram = bs->priv;
    if (ram->prealloc || size > ram->cap) {
        snprintf(err, errlen, "%s: can grow only up to %llu bytes (%s)", bs->desc,
                 (unsigned long long)ram->cap,
                 ram->prealloc ? "preallocated" : "the room reserved when it was created");
        return -1;
    }
    return 0;
}

static const struct bs_ops bs_ram_ops = {
    .name = "ram",
    .product = "RAMDISK",
    .submit = bs_ram_submit,
    .map = bs_ram_map,
    .read_iov = bs_ram_read_iov,
    .read_pin = bs_ram_read_pin,
    .unpin = bs_ram_unpin,
    .close = bs_ram_close,
    .lba_status = bs_ram_lba_status,
    .grow = bs_ram_grow,
};

/* ",prealloc": allocate the whole LUN now, so the benchmark (or the first guest boot) does not
 * pay a page fault per page of first writes. A reserved huge page pool is used when it has room
 * (MAP_HUGETLB, whole 2 MiB pages), otherwise ordinary memory asked to be backed by transparent
 * huge pages where the system allows it (MADV_HUGEPAGE); MADV_POPULATE_WRITE (Linux 5.14)
 * faults it all in, or a write per page where the kernel lacks it. */
static int ram_prealloc(struct bs_ram *ram, uint64_t size, const char **how)
{
    *how = "huge page pool";
    if (size % (2u << 20) == 0) {
        ram->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
        if (ram->base != MAP_FAILED)
            return 0;
    }
    ram->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ram->base == MAP_FAILED)
        return -errno;
    *how = madvise(ram->base, size, MADV_HUGEPAGE) == 0 ? "transparent huge pages if the system "
                                                          "grants them"
                                                        : "4 KiB pages";
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    if (madvise(ram->base, size, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL) /* ENOMEM, EFAULT: there is not that much memory to have */
        return -errno;
    for (uint64_t off = 0; off < size; off += ram->page)
        ((volatile uint8_t *)ram->base)[off] = 0;
    return 0;
}

struct bs *bs_ram_open(uint64_t size, bool prealloc, char *err, size_t errlen)
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
    pthread_once(&ram_zeros_once, ram_zeros_init);
    ram->page = (size_t)sysconf(_SC_PAGESIZE);
    assert(ram->page && !(ram->page & (ram->page - 1)));
    ram->page_shift = (unsigned)__builtin_ctzl(ram->page);
    ram->cap = size;
    if (!prealloc) {
        uint64_t room = size > RAM_GROW_MIN ? size : RAM_GROW_MIN;
        ram->cap = size <= SIZE_MAX - room ? size + room : size;
    }
    ram->npages = (ram->cap + ram->page - 1) >> ram->page_shift;
    if (prealloc) {
        /* Faulting in more than the machine has would end with the OOM killer (with
         * overcommit, nothing refuses the mapping first): refused here, by name. */
        uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * ram->page;
        if (phys && size > phys) {
            snprintf(err, errlen,
                     "ram: cannot preallocate %llu bytes: this machine has %llu bytes of memory",
                     (unsigned long long)size, (unsigned long long)phys);
            goto fail;
        }
    }
    /* the map is 1/32768 of the LUN with 4 KiB pages: 32 MiB for a 1 TiB LUN (calloc'd, so
     * the part for the room to grow is not touched until used) */
    ram->alloc = calloc((ram->npages + 63) / 64, sizeof(*ram->alloc));
    ram->stripes = aligned_alloc(64, RAM_STRIPES * sizeof(*ram->stripes));
    ram->pins = calloc(RAM_PINS, sizeof(*ram->pins));
    ram->send_min = BS_RAM_SEND_MIN;
    list_init(&ram->waiting);
    pthread_mutex_init(&ram->wait_m, NULL);
    if (!ram->alloc || !ram->stripes || !ram->pins || !ram_zeros) {
        snprintf(err, errlen, "ram: out of memory for the allocation map of %llu bytes",
                 (unsigned long long)size);
        goto fail;
    }
    if (prealloc) {
        const char *how;
        int e = ram_prealloc(ram, size, &how);
        if (e) {
            if (ram->base != MAP_FAILED)
                munmap(ram->base, size);
            snprintf(err, errlen, "ram: cannot preallocate %llu bytes: %s",
                     (unsigned long long)size, strerror(-e));
            goto fail;
        }
        LOG_INFO("bs ram: %llu bytes preallocated (%s)", (unsigned long long)size, how);
        ram->prealloc = true;
        ram_bits(ram, 0, ram->npages, true);
    } else {
        /* MAP_NORESERVE: a 1T LUN on a 64G host is fine as long as it is never filled. */
        ram->base = mmap(NULL, ram->cap, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (ram->base == MAP_FAILED && ram->cap > size) { /* strict overcommit: no room */
            ram->cap = size;
            ram->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        }
        if (ram->base == MAP_FAILED) {
            snprintf(err, errlen, "ram: cannot map %llu bytes: %s", (unsigned long long)size,
                     strerror(errno));
            goto fail;
        }
    }
    /* writers first: readers on other reactors must not keep a WRITE waiting indefinitely */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    for (unsigned i = 0; i < RAM_STRIPES; i++)
        pthread_rwlock_init(&ram->stripes[i].lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    bs->ops = &bs_ram_ops;
    bs->size = size;
    bs->write_atomic = true; /* under the range lock, and there is no crash to survive */
    bs->write_cache = false;
    bs->thin = !prealloc; /* a preallocated LUN is fully provisioned: no UNMAP */
    bs->priv = ram;
    return bs;
fail:
    if (ram) {
        free(ram->pins);
        free(ram->stripes);
        free(ram->alloc);
    }
    free(ram);
    free(bs);
    return NULL;
}
