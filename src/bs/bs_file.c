/* The file store: a regular file or a block device behind io_uring. Each reactor thread gets
 * its own ring, created on its first submit, whose completion eventfd sits in that reactor's
 * epoll set; a thread without a running reactor (unit tests, shutdown) does plain syscalls.
 * Data already in the page cache skips the ring: a READ first tries preadv2(RWF_NOWAIT) on the
 * reactor thread, and a buffered non-FUA WRITE of whole pages is written there with pwritev2,
 * timed, the LUN going back to the ring for a while when one is slow (file_inline_write);
 * one whose pages are all cached is copied into a shared mapping of the file instead, which
 * skips the file system's per-block write path (file_map_write). With ",send-min=SIZE" a READ
 * whose pages are all in the page cache is sent from that mapping (read_pin), never read into
 * a buffer of ours. */
#include <assert.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bs/bs_io.h"
#include "bs/bs_store.h"
#include "reactor/reactor.h"
#include "util/fault_guard.h"
#include "util/log.h"

/* Requests in flight per ring. Also the SQ size, so a prepared request always finds an SQE,
 * and half the CQ size, so completions can never overflow the CQ. */
#define FILE_RING_DEPTH 256

/* A buffered WRITE done on the reactor thread that slept and took longer than this (dirty-page
 * throttling, a journal commit, a page read from the medium) sends the LUN's WRITEs back to
 * the ring for FILE_BACKOFF_MIN_NS, doubled each time it happens again soon after, up to
 * FILE_BACKOFF_MAX_NS. This is not a bound: the write that blocked holds the reactor for as
 * long as it blocks (a medium that hangs hangs the reactor), once per back-off period; a LUN
 * on a medium that can hang (a network file system) wants write-inline=off. */
#define FILE_INLINE_BUDGET_NS 1000000ull
#define FILE_BACKOFF_MIN_NS 1000000000ull
#define FILE_BACKOFF_MAX_NS 64000000000ull

struct bs_file {
    int fd;
    bool blockdev;
    bool direct;
    /* Shared by every reactor submitting to the LUN, hence atomic (relaxed: each is a hint,
     * a stale value costs one extra ring trip or one extra try). */
    _Atomic bool nowait_unsupported;       /* RWF_NOWAIT reads refused (tmpfs): EOPNOTSUPP seen */
    _Atomic bool nowait_write_unsupported; /* RWF_NOWAIT buffered writes refused (ext4, tmpfs) */
    unsigned page;                         /* the page size: a WRITE of whole pages goes inline */
    _Atomic bool no_cachestat;             /* cachestat(2) missing (ENOSYS) or refused (EPERM) */
    bool write_inline;                     /* ",write-inline=off" clears it; set before any I/O */
    _Atomic uint64_t inline_until;         /* CLOCK_MONOTONIC ns before which WRITEs use the ring */
    _Atomic uint64_t backoff_ns;           /* the current back-off period, 0 before the first */
    _Atomic bool backoff_logged;
    /* The file mapped shared (NULL: never, as with direct), its first map_len bytes (a LUN
     * grown later goes through the kernel past them): READs of send_min bytes and up are sent
     * from it, cached WRITEs copied into it when map_writable (not read-only). */
    uint8_t *map;
    uint64_t map_len;
    bool map_writable;
    uint64_t send_min;
};

/* ---- the part of a request still to transfer ------------------------------------------- */

/* Point at the bytes of io's buffers not yet transferred, [st.done, length), trimming the
 * first and last iovec entries in place; file_iov_restore() puts them back. Trimming in place
 * instead of copying the vector keeps the path free of allocations, and the caller does not
 * look at io->iov while the store owns the request. Returns the number of entries. */
static int file_iov_window(struct bs_io *io, struct iovec **out)
{
    struct iovec *iov = io->iov;
    uint64_t skip = io->st.done, want = io->length - io->st.done;
    int i = 0;
    while (skip >= iov[i].iov_len) {
        skip -= iov[i].iov_len;
        i++;
    }
    io->st.head = io->st.tail = -1;
    if (skip) {
        io->st.head = i;
        io->st.head_orig = iov[i];
        iov[i].iov_base = (uint8_t *)iov[i].iov_base + skip;
        iov[i].iov_len -= skip;
    }
    /* bs_io_check() made sure the entries add up to at least length. */
    int j = i;
    uint64_t acc = 0;
    while (acc + iov[j].iov_len < want) {
        acc += iov[j].iov_len;
        j++;
    }
    if (iov[j].iov_len > want - acc) {
        if (j != io->st.head) { /* a head trim already saved this entry's original */
            io->st.tail = j;
            io->st.tail_orig = iov[j];
        }
        iov[j].iov_len = (size_t)(want - acc);
    }
    *out = &iov[i];
    return j - i + 1;
}

static void file_iov_restore(struct bs_io *io)
{
    if (io->op != BS_READ && io->op != BS_WRITE)
        return;
    if (io->st.tail >= 0)
        io->iov[io->st.tail] = io->st.tail_orig;
    if (io->st.head >= 0)
        io->iov[io->st.head] = io->st.head_orig;
    io->st.head = io->st.tail = -1;
}

static int file_punch(int fd, uint64_t offset, uint64_t len)
{
    /* KEEP_SIZE: the LUN keeps its capacity; the hole reads back as zeros (LBPRZ). */
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)len) < 0)
        return -errno;
    return 0;
}

/* ---- synchronous path: no reactor on this thread ---------------------------------------- */

static int file_rw_sync(struct bs_file *f, struct bs_io *io)
{
    while (io->st.done < io->length) {
        struct iovec *v;
        int cnt = file_iov_window(io, &v);
        off_t off = (off_t)(io->offset + io->st.done);
        ssize_t n = io->op == BS_READ ? preadv2(f->fd, v, cnt, off, 0)
                                      : pwritev2(f->fd, v, cnt, off, io->fua ? RWF_DSYNC : 0);
        int saved = errno;
        file_iov_restore(io);
        if (n < 0) {
            if (saved == EINTR || saved == EAGAIN)
                continue;
            return -saved;
        }
        if (n == 0) /* the file shrank under us: the exported size no longer exists */
            return -EIO;
        io->st.done += (uint64_t)n;
    }
    return 0;
}

static void file_submit_sync(struct bs_file *f, struct bs_io *io)
{
    int err;
    switch (io->op) {
    case BS_READ:
    case BS_WRITE:
        err = file_rw_sync(f, io);
        break;
    case BS_FLUSH:
        err = fdatasync(f->fd) < 0 ? -errno : 0;
        break;
    case BS_UNMAP:
        err = file_punch(f->fd, io->offset, io->length);
        break;
    default:
        err = -EINVAL;
    }
    io->done(io, err);
}

/* ---- io_uring path: one ring per reactor thread ----------------------------------------- */

struct file_ring {
    struct io_uring ring;
    struct reactor *r;
    int efd; /* completion notification, polled by the reactor */
    struct reactor_fd handle;
    struct reactor_deferred flush; /* one io_uring_enter per loop turn, not per request */
    struct reactor_timer retry;    /* io_uring_enter failed: try again shortly */
    bool warned;
    unsigned inflight;         /* prepared or submitted, CQE not yet reaped */
    struct list_node overflow; /* waiting for room, FIFO */
};

/* Sentinel for "this thread tried and has no ring": use the synchronous path. */
#define FILE_RING_NONE ((struct file_ring *)1)

static __thread struct file_ring *tls_ring;
static pthread_key_t ring_key;
static pthread_once_t ring_key_once = PTHREAD_ONCE_INIT;

/* Thread exit: closing the eventfd also drops it from the reactor's epoll set. Requests still
 * in flight are cancelled by the kernel without completion, so owners drain before exiting. */
static void file_ring_free(void *arg)
{
    struct file_ring *fr = arg;
    if (!fr || fr == FILE_RING_NONE)
        return;
    io_uring_queue_exit(&fr->ring);
    close(fr->efd);
    free(fr);
}

static void file_ring_key_init(void)
{
    pthread_key_create(&ring_key, file_ring_free);
}

void bs_file_thread_reset(void)
{
    if (!tls_ring)
        return;
    file_ring_free(tls_ring);
    tls_ring = NULL;
    pthread_setspecific(ring_key, NULL);
}

static void file_ring_flush(void *arg);

static void file_ring_retry(void *arg)
{
    file_ring_flush(arg);
}

static void file_ring_flush(void *arg)
{
    struct file_ring *fr = arg;
    int ret = io_uring_submit(&fr->ring);
    if (ret >= 0) {
        fr->warned = false;
        return;
    }
    /* The SQEs stay in the ring; any later submit carries them too. Retry on a timer rather
     * than from this end-of-turn hook, which would spin. */
    if (!fr->warned) {
        LOG_WARN("bs file: io_uring_submit on reactor %d: %s (retrying)", reactor_id(fr->r),
                 strerror(-ret));
        fr->warned = true;
    }
    reactor_timer_start(fr->r, &fr->retry, 1, file_ring_retry, fr);
}

/* Prepare one SQE for io; the caller made sure there is room (inflight < depth). */
static void file_ring_start(struct file_ring *fr, struct bs_io *io)
{
    struct bs_file *f = io->st.bs->priv;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&fr->ring);
    if (!sqe) { /* cannot happen while inflight bounds the SQ; be safe anyway */
        io_uring_submit(&fr->ring);
        sqe = io_uring_get_sqe(&fr->ring);
        if (!sqe) {
            list_add_tail(&fr->overflow, &io->st.node);
            return;
        }
    }
    struct iovec *v;
    int cnt;
    switch (io->op) {
    case BS_READ:
        cnt = file_iov_window(io, &v);
        io_uring_prep_readv(sqe, f->fd, v, (unsigned)cnt, io->offset + io->st.done);
        break;
    case BS_WRITE:
        cnt = file_iov_window(io, &v);
        io_uring_prep_writev2(sqe, f->fd, v, (unsigned)cnt, io->offset + io->st.done,
                              io->fua ? RWF_DSYNC : 0);
        break;
    case BS_FLUSH:
        io_uring_prep_fsync(sqe, f->fd, IORING_FSYNC_DATASYNC);
        break;
    case BS_UNMAP:
        io_uring_prep_fallocate(sqe, f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                (off_t)io->offset, (off_t)io->length);
        break;
    default: /* the optional ops: bs_io_check() refused them, the file store offers none */
        assert(!"unreachable bs op");
        io_uring_prep_nop(sqe);
        break;
    }
    io_uring_sqe_set_data(sqe, io);
    fr->inflight++;
    reactor_defer(fr->r, &fr->flush, file_ring_flush, fr);
}

/* A full ring queues instead of failing: the initiator's queue depth is the CmdSN window,
 * which may exceed the ring, and "busy" is not an answer SCSI wants for it. */
static void file_ring_queue(struct file_ring *fr, struct bs_io *io)
{
    if (fr->inflight >= FILE_RING_DEPTH || !list_empty(&fr->overflow))
        list_add_tail(&fr->overflow, &io->st.node);
    else
        file_ring_start(fr, io);
}

static void file_ring_complete(struct file_ring *fr, struct bs_io *io, int res)
{
    fr->inflight--;
    file_iov_restore(io);
    if (res == -EINTR || res == -EAGAIN) {
        file_ring_queue(fr, io);
        return;
    }
    if (res < 0) {
        io->done(io, res);
        return;
    }
    if (io->op == BS_READ || io->op == BS_WRITE) {
        if (res == 0) { /* no progress: the file shrank under us */
            io->done(io, -EIO);
            return;
        }
        io->st.done += (uint64_t)res;
        if (io->st.done < io->length) { /* short transfer: carry on from where it stopped */
            file_ring_queue(fr, io);
            return;
        }
    }
    io->done(io, 0);
}

static void file_ring_event(void *arg, uint32_t events)
{
    struct file_ring *fr = arg;
    (void)events;
    uint64_t v;
    /* Reset the counter before reaping: a CQE posted after this read signals again. */
    ssize_t n = read(fr->efd, &v, sizeof(v));
    (void)n;
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&fr->ring, &cqe) == 0) {
        struct bs_io *io = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        /* Free the CQE slot first: done() may submit more work on this ring. */
        io_uring_cqe_seen(&fr->ring, cqe);
        file_ring_complete(fr, io, res);
    }
    while (fr->inflight < FILE_RING_DEPTH && !list_empty(&fr->overflow)) {
        struct list_node *node = list_pop(&fr->overflow);
        file_ring_start(fr, list_entry(node, struct bs_io, st.node));
    }
}

static struct file_ring *file_ring_create(struct reactor *r)
{
    struct file_ring *fr = calloc(1, sizeof(*fr));
    if (!fr)
        return NULL;
    fr->r = r;
    fr->efd = -1;
    list_init(&fr->overflow);
    /* SINGLE_ISSUER: only this thread submits, which lets the kernel skip some locking. */
    int ret = io_uring_queue_init(FILE_RING_DEPTH, &fr->ring, IORING_SETUP_SINGLE_ISSUER);
    if (ret == -EINVAL)
        ret = io_uring_queue_init(FILE_RING_DEPTH, &fr->ring, 0);
    if (ret < 0) {
        LOG_WARN("bs file: io_uring unavailable on reactor %d (%s): synchronous I/O", reactor_id(r),
                 strerror(-ret));
        free(fr);
        return NULL;
    }
    fr->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fr->efd < 0 || (ret = io_uring_register_eventfd(&fr->ring, fr->efd)) < 0 ||
        (ret = reactor_fd_add(r, &fr->handle, fr->efd, EPOLLIN, file_ring_event, fr)) < 0) {
        LOG_WARN("bs file: cannot attach io_uring to reactor %d (%s): synchronous I/O",
                 reactor_id(r), strerror(fr->efd < 0 ? errno : -ret));
        io_uring_queue_exit(&fr->ring);
        if (fr->efd >= 0)
            close(fr->efd);
        free(fr);
        return NULL;
    }
    return fr;
}

/* The calling thread's ring, or NULL to do the I/O synchronously. */
static struct file_ring *file_ring_get(void)
{
    struct reactor *r = reactor_self();
    if (!r)
        return NULL;
    if (!tls_ring) {
        pthread_once(&ring_key_once, file_ring_key_init);
        tls_ring = file_ring_create(r);
        if (!tls_ring)
            tls_ring = FILE_RING_NONE;
        else
            pthread_setspecific(ring_key, tls_ring);
    }
    /* A thread that later runs a different reactor keeps working, synchronously. */
    if (tls_ring == FILE_RING_NONE || tls_ring->r != r)
        return NULL;
    return tls_ring;
}

/* ---- what the page cache holds --------------------------------------------------------- */

/* cachestat(2) (Linux 6.5), not in every libc's headers yet. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct file_cachestat_range {
    uint64_t off, len;
};
struct file_cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* Is every page of [offset, offset+len) in the page cache? Sending from a page that is not
 * would fault it in from the medium on the reactor's thread (the mapping's fault blocks), and so
 * would a WRITE copied into one, so such a request goes through the kernel instead. A kernel
 * without cachestat (ENOSYS), or one that does not answer for this file (EPERM), never sends in
 * place, and is asked only once. A page reclaimed between this check and the send is read in by the
 * send: rare, and as long as one read of the medium. */
static bool file_cached(struct bs_file *f, uint64_t offset, uint64_t len)
{
    if (atomic_load_explicit(&f->no_cachestat, memory_order_relaxed))
        return false;
    uint64_t mask = (uint64_t)f->page - 1; /* cachestat counts pages of the kernel's size */
    uint64_t first = offset & ~mask, end = (offset + len + mask) & ~mask;
    struct file_cachestat_range r = {first, end - first};
    struct file_cachestat cs;
    if (syscall(__NR_cachestat, f->fd, &r, &cs, 0) < 0) {
        /* the answer will not change for this file: stop asking on every READ */
        if (errno == ENOSYS || errno == EPERM) {
            if (!atomic_exchange_explicit(&f->no_cachestat, true, memory_order_relaxed))
                LOG_INFO("bs file: cachestat(2): %s: READs and WRITEs skip the mapping",
                         strerror(errno));
        }
        return false;
    }
    return cs.nr_cache >= (end - first) / f->page;
}

/* ---- inline: data in the page cache, on the reactor thread ------------------------------ */

static uint64_t file_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How often this thread has slept so far (voluntary context switches: waiting for a lock, a
 * page, the journal, dirty-page throttling); preemption is not counted. */
static long file_thread_sleeps(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) < 0)
        return 0;
    return ru.ru_nvcsw;
}

/* A READ whose pages are all cached completes here, without a ring trip, a worker or a
 * wake-up of the reactor; RWF_NOWAIT (preadv2(2)) returns what is cached and never waits for
 * the medium. What it did not get (a short read, EAGAIN) the ring reads, from where this
 * stopped. O_DIRECT reads bypass the cache, so they go to the ring at once. True: the request
 * completed (done() already ran). */
static bool file_inline_read(struct bs_file *f, struct bs_io *io)
{
    if (f->direct || atomic_load_explicit(&f->nowait_unsupported, memory_order_relaxed))
        return false;
    struct iovec *v;
    int cnt = file_iov_window(io, &v);
    ssize_t n = preadv2(f->fd, v, cnt, (off_t)io->offset, RWF_NOWAIT);
    int saved = errno;
    file_iov_restore(io);
    if (n < 0) {
        if (saved == EOPNOTSUPP) /* tmpfs: its reads cannot promise not to block; ask once */
            atomic_store_explicit(&f->nowait_unsupported, true, memory_order_relaxed);
        return false; /* EAGAIN: not cached; a real error the ring meets again and reports */
    }
    io->st.done = (uint64_t)n; /* 0 (the file shrank): the ring finds the end too, -EIO */
    if (io->st.done < io->length)
        return false;
    io->done(io, 0);
    return true;
}

/* A WRITE on the reactor thread took `took` ns: send the LUN's WRITEs to the ring for a while,
 * twice as long as last time if this comes within a period of the last back-off ending. */
static void file_inline_backoff(struct bs *bs, uint64_t now, uint64_t took)
{
    struct bs_file *f = bs->priv;
    uint64_t prev = atomic_load_explicit(&f->backoff_ns, memory_order_relaxed);
    uint64_t until = atomic_load_explicit(&f->inline_until, memory_order_relaxed);
    uint64_t next = prev && now < until + prev ? prev * 2 : FILE_BACKOFF_MIN_NS;
    if (next > FILE_BACKOFF_MAX_NS)
        next = FILE_BACKOFF_MAX_NS;
    atomic_store_explicit(&f->backoff_ns, next, memory_order_relaxed);
    atomic_store_explicit(&f->inline_until, now + next, memory_order_relaxed);
    if (!atomic_exchange_explicit(&f->backoff_logged, true, memory_order_relaxed))
        LOG_INFO("bs %s: a WRITE into the page cache took %llu us on the reactor thread: "
                 "WRITEs go through io_uring for %llu ms, longer if it recurs (logged once)",
                 bs->desc, (unsigned long long)(took / 1000), (unsigned long long)(next / 1000000));
}

/* file_map_write's copy, run under util/fault_guard. */
struct file_map_copy {
    uint8_t *dst;
    const struct bs_io *io;
};

static void file_map_copy_run(void *arg)
{
    const struct file_map_copy *c = arg;
    uint64_t left = c->io->length;
    uint8_t *dst = c->dst;
    for (int i = 0; i < c->io->iovcnt && left; i++) {
        size_t n = c->io->iov[i].iov_len < left ? c->io->iov[i].iov_len : (size_t)left;
        memcpy(dst, c->io->iov[i].iov_base, n);
        dst += n;
        left -= n;
    }
    assert(left == 0); /* bs_io_check: the buffers hold length bytes */
}

enum file_map_result {
    FILE_MAP_SKIPPED, /* not for the mapping: the caller writes it another way */
    FILE_MAP_DONE,    /* written, done() already ran */
    FILE_MAP_FAULTED, /* SIGBUS: nothing acknowledged, the ring must write it and report */
};

/* A WRITE whose pages are all in the page cache, copied into the shared mapping: a write fault
 * goes through the file system only when a clean page is first written (page_mkwrite, once per
 * page between two writebacks), where pwritev2 walks ext4's per-block write path every time
 * (ext4_block_write_begin, block_commit_write: twice the target's CPU per KB of a RAM LUN at
 * 4 KiB, 1.4x at 64 KiB; a cached copy costs what the RAM LUN's memcpy does). The pages are
 * marked dirty by that fault, so fdatasync (SYNCHRONIZE CACHE, close) writes them as it writes
 * pwritev2's. A fault the file system refuses raises SIGBUS (no space or quota for the page's
 * blocks, which a page may need again after any writeback, and a copy-on-write file system at
 * every such first write; EIO; the file truncated meanwhile): fault_guard catches it and the
 * ring writes the whole range again and reports the error with its errno.
 * Only a range inside the file's current size: a file shrunk to a size that is not a multiple
 * of the page keeps its last page mapped, and a store past the new end there is no fault, only
 * lost at writeback, where pwritev2 would have extended the file (a shrink between this check
 * and the copy can still lose it: a file must not shrink under its LUN, whose in-place READs
 * fail too).
 * The fault may sleep (a journal handle, dirty-page throttling) like a plain write: timed and
 * backed off in the same way. */
static enum file_map_result file_map_write(struct bs *bs, struct bs_io *io, uint64_t start)
{
    struct bs_file *f = bs->priv;
    if (!f->map_writable || io->offset > f->map_len || io->length > f->map_len - io->offset)
        return FILE_MAP_SKIPPED;
    if (!f->blockdev) { /* a device's size only changes when an admin resizes it */
        off_t size = lseek(f->fd, 0, SEEK_END);
        if (size < 0 || io->offset + io->length > (uint64_t)size)
            return FILE_MAP_SKIPPED;
    }
    if (!file_cached(f, io->offset, io->length))
        return FILE_MAP_SKIPPED;
    assert(io->st.done == 0);
    long sleeps = file_thread_sleeps();
    struct file_map_copy c = {f->map + io->offset, io};
    int rc = fault_guard_run(file_map_copy_run, &c);
    uint64_t end = file_now_ns();
    if (end - start > FILE_INLINE_BUDGET_NS && file_thread_sleeps() != sleeps)
        file_inline_backoff(bs, end, end - start);
    if (rc < 0) {
        LOG_DEBUG("bs %s: a WRITE into the mapping at %llu took SIGBUS: written again through "
                  "io_uring",
                  bs->desc, (unsigned long long)io->offset);
        return FILE_MAP_FAULTED;
    }
    io->st.done = io->length;
    io->done(io, 0);
    return FILE_MAP_DONE;
}

/* A buffered WRITE without FUA only copies into the page cache, in microseconds as a rule, yet
 * ext4 and tmpfs refuse RWF_NOWAIT for buffered writes, so io_uring hands every one of them to
 * a worker thread: a thread switch and a wake-up per WRITE. Written here instead when it covers
 * whole pages (a partial page not cached would be read from the medium first): copied into the
 * mapping when every page is cached (file_map_write), else with RWF_NOWAIT where the file
 * system takes it (XFS, btrfs: it never blocks; EAGAIN goes to the ring), else a plain
 * pwritev2. A block device's page cache behaves as a file's, so it is
 * included. The plain write is timed: dirty-page throttling or a journal wait can block it,
 * and then the LUN backs off (file_inline_backoff), which limits how often, not how long, a
 * slow medium holds the reactor. FUA (RWF_DSYNC) waits for the medium: always the ring. True:
 * the request completed (done() already ran). */
static bool file_inline_write(struct bs *bs, struct bs_io *io)
{
    struct bs_file *f = bs->priv;
    if (!f->write_inline || io->fua || (io->offset | io->length) % f->page)
        return false;
    uint64_t start = file_now_ns();
    bool backed_off = start < atomic_load_explicit(&f->inline_until, memory_order_relaxed);
    if (!backed_off) {
        enum file_map_result r = file_map_write(bs, io, start);
        if (r != FILE_MAP_SKIPPED)
            return r == FILE_MAP_DONE; /* a fault: not a second try that may block here */
    }
    struct iovec *v;
    int cnt;
    if (!atomic_load_explicit(&f->nowait_write_unsupported, memory_order_relaxed)) {
        cnt = file_iov_window(io, &v);
        ssize_t n = pwritev2(f->fd, v, cnt, (off_t)io->offset, RWF_NOWAIT);
        int saved = errno;
        file_iov_restore(io);
        if (n < 0 && saved == EOPNOTSUPP) {
            atomic_store_explicit(&f->nowait_write_unsupported, true, memory_order_relaxed);
        } else {
            if (n <= 0 || (uint64_t)n < io->length) {
                io->st.done = n > 0 ? (uint64_t)n : 0; /* the ring writes the rest */
                return false;
            }
            io->st.done = (uint64_t)n;
            io->done(io, 0);
            return true;
        }
    }
    if (backed_off)
        return false;
    start = file_now_ns();
    long sleeps = file_thread_sleeps();
    cnt = file_iov_window(io, &v);
    ssize_t n = pwritev2(f->fd, v, cnt, (off_t)io->offset, 0);
    file_iov_restore(io);
    uint64_t end = file_now_ns();
    /* Only a write that slept counts: one that was merely preempted on a busy machine would
     * have been preempted anywhere else in the reactor just as well. */
    if (end - start > FILE_INLINE_BUDGET_NS && file_thread_sleeps() != sleeps)
        file_inline_backoff(bs, end, end - start);
    if (n <= 0)
        return false; /* the ring tries again and reports the error (ENOSPC, EIO) */
    io->st.done = (uint64_t)n;
    if (io->st.done < io->length)
        return false;
    io->done(io, 0);
    return true;
}

void bs_file_set_write_inline(struct bs *bs, bool on)
{
    struct bs_file *f = bs->priv;
    f->write_inline = on && !f->direct;
}

static void bs_file_submit(struct bs *bs, struct bs_io *io)
{
    int err = bs_io_check(bs, io);
    if (err) {
        io->done(io, err);
        return;
    }
    io->st.bs = bs;
    io->st.done = 0;
    io->st.head = io->st.tail = -1;
    if ((io->op == BS_READ || io->op == BS_WRITE || io->op == BS_UNMAP) && io->length == 0) {
        io->done(io, 0);
        return;
    }
    struct file_ring *fr = file_ring_get();
    if (!fr) {
        file_submit_sync(bs->priv, io);
        return;
    }
    if (io->op == BS_READ && file_inline_read(bs->priv, io))
        return;
    if (io->op == BS_WRITE && file_inline_write(bs, io))
        return;
    file_ring_queue(fr, io);
}

static void bs_file_close(struct bs *bs)
{
    struct bs_file *f = bs->priv;
    /* Whatever was acknowledged without FUA sits in the page cache, written there by the
     * kernel or through the mapping (whose write faults marked its pages dirty): make it
     * stable. */
    if (f->map)
        munmap(f->map, (size_t)f->map_len);
    if (fdatasync(f->fd) < 0)
        LOG_ERR("bs %s: fdatasync on close: %s", bs->desc, strerror(errno));
    close(f->fd);
    free(f);
}

/* Holes are deallocated, data extents mapped (SEEK_HOLE/SEEK_DATA, lseek(2)). A block device,
 * or a file system that cannot tell (EINVAL), reports everything mapped. Ends fall on file
 * system blocks, so a partly punched block stays mapped. */
static int bs_file_lba_status(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped)
{
    struct bs_file *f = bs->priv;
    if (!*len || offset > bs->size || *len > bs->size - offset)
        return -EINVAL;
    uint64_t end = offset + *len;
    *mapped = true;
    if (f->blockdev)
        return 0;
    off_t data = lseek(f->fd, (off_t)offset, SEEK_DATA);
    if (data < 0) {
        if (errno == ENXIO) { /* no data at or after offset: a hole to the end */
            *mapped = false;
            return 0;
        }
        return errno == EINVAL ? 0 : -errno;
    }
    if ((uint64_t)data > offset) {
        *mapped = false;
        *len = ((uint64_t)data < end ? (uint64_t)data : end) - offset;
        return 0;
    }
    off_t hole = lseek(f->fd, (off_t)offset, SEEK_HOLE);
    if (hole < 0)
        return errno == EINVAL || errno == ENXIO ? 0 : -errno;
    if ((uint64_t)hole > offset && (uint64_t)hole < end)
        *len = (uint64_t)hole - offset;
    return 0;
}

/* A regular file is extended (a sparse tail, reading as zeros); a block device can only be
 * "grown" to the size it already has, after the device itself was grown. */
static int bs_file_grow(struct bs *bs, uint64_t size, char *err, size_t errlen)
{
    struct bs_file *f = bs->priv;
    if (f->blockdev) {
        uint64_t have;
        if (ioctl(f->fd, BLKGETSIZE64, &have) < 0) {
            snprintf(err, errlen, "%s: BLKGETSIZE64: %s", bs->desc, strerror(errno));
            return -1;
        }
        if (size > have) {
            snprintf(err, errlen, "%s: the device has only %llu bytes", bs->desc,
                     (unsigned long long)have);
            return -1;
        }
    } else {
        struct stat st;
        if (fstat(f->fd, &st) < 0 ||
            ((uint64_t)st.st_size < size && ftruncate(f->fd, (off_t)size) < 0)) {
            snprintf(err, errlen, "%s: cannot extend to %llu bytes: %s", bs->desc,
                     (unsigned long long)size, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* ---- READs sent from the page cache in place ------------------------------------------- */

/* The READ's data as the mapped page cache (bs_ops.read_pin). Unlike the RAM store this store
 * keeps nothing whole by itself (bs->order_rw): the SCSI core holds the READ's range in its
 * range lock until unpin, and every writer takes its range as a WRITE there (WRITE, WRITE SAME,
 * UNMAP, EXTENDED COPY's destination; COMPARE AND WRITE, ORWRITE, WRITE ATOMIC and SANITIZE
 * exclusively), so nothing changes those pages while the READ's Data-In point into them; the
 * kernel's copy into the socket is then the only copy, and a data digest is computed over the
 * same pages. A file shrunk meanwhile takes the pages away: the wire's CRC and copy-away read
 * them under util/fault_guard (SIGBUS fails that connection), the send gets EFAULT. */
static int bs_file_read_pin(struct bs *bs, uint64_t offset, uint64_t len, struct iovec *iov,
                            int max)
{
    struct bs_file *f = bs->priv;
    if (!f->map || len < f->send_min || max < 1 || offset > f->map_len ||
        len > f->map_len - offset || !file_cached(f, offset, len))
        return 0;
    iov[0] = (struct iovec){.iov_base = f->map + offset, .iov_len = (size_t)len};
    return 1;
}

static void bs_file_unpin(struct bs *bs, uint64_t offset, uint64_t len)
{
    (void)bs, (void)offset, (void)len; /* the caller's range lock did the holding */
}

void bs_file_set_send_min(struct bs *bs, uint64_t min)
{
    struct bs_file *f = bs->priv;
    f->send_min = min;
}

/* Map a buffered LUN's file, shared, writable unless the LUN is read-only (its descriptor is
 * then O_RDONLY too). O_DIRECT bypasses the page cache a mapping is made of: never mapped. A
 * failed mmap (address space: a 64-bit process has 128 TiB of it) costs only the copies. */
static void file_map(struct bs *bs, const char *path)
{
    struct bs_file *f = bs->priv;
    if (f->direct)
        return;
    if (bs->size > SIZE_MAX) /* a 32-bit process: the length would be cut short */
        return;
    bool writable = !bs->read_only;
    void *m =
        mmap(NULL, (size_t)bs->size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, f->fd, 0);
    if (m == MAP_FAILED && writable) { /* a file system without shared writable mappings */
        LOG_WARN("bs file:%s: cannot map the file for writing (%s): every WRITE is copied by "
                 "the kernel",
                 path, strerror(errno));
        writable = false;
        m = mmap(NULL, (size_t)bs->size, PROT_READ, MAP_SHARED, f->fd, 0);
    }
    if (m == MAP_FAILED) {
        LOG_WARN("bs file:%s: cannot map the file (%s): every READ is copied", path,
                 strerror(errno));
        return;
    }
    f->map = m;
    f->map_len = bs->size;
    f->map_writable = writable;
}

static const struct bs_ops bs_file_ops = {
    .name = "file",
    .product = "FILEDISK",
    .submit = bs_file_submit,
    .close = bs_file_close,
    .lba_status = bs_file_lba_status,
    .grow = bs_file_grow,
    .read_pin = bs_file_read_pin,
    .unpin = bs_file_unpin,
    .pin_can_fault = true,
};

/* Work out the exported size: the device's, the file's, or size= (growing a short file). */
static int file_size(int fd, const char *path, uint64_t want, bool *blockdev, uint64_t *out,
                     char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "file:%s: %s", path, strerror(errno));
        return -1;
    }
    uint64_t have;
    if (S_ISBLK(st.st_mode)) {
        *blockdev = true;
        if (ioctl(fd, BLKGETSIZE64, &have) < 0) {
            snprintf(err, errlen, "file:%s: BLKGETSIZE64: %s", path, strerror(errno));
            return -1;
        }
        if (want > have) {
            snprintf(err, errlen, "file:%s: size= exceeds the device's %llu bytes", path,
                     (unsigned long long)have);
            return -1;
        }
    } else if (S_ISREG(st.st_mode)) {
        *blockdev = false;
        have = (uint64_t)st.st_size;
        if (want > have && ftruncate(fd, (off_t)want) < 0) {
            snprintf(err, errlen, "file:%s: cannot extend to %llu bytes: %s", path,
                     (unsigned long long)want, strerror(errno));
            return -1;
        }
    } else {
        snprintf(err, errlen, "file:%s: not a regular file or block device", path);
        return -1;
    }
    *out = want ? want : have;
    if (*out == 0 || *out % 512) {
        snprintf(err, errlen,
                 "file:%s: size %llu is not a positive multiple of 512 (give size=SIZE)", path,
                 (unsigned long long)*out);
        return -1;
    }
    return 0;
}

struct bs *bs_file_open(const char *path, uint64_t size, bool direct, bool read_only, char *err,
                        size_t errlen)
{
    /* O_CREAT only with size=: without it a new file would be an empty LUN. A read-only LUN
     * opens the file read-only (it may lack write permission) and never creates it. */
    int flags = O_CLOEXEC | (direct ? O_DIRECT : 0);
    flags |= read_only ? O_RDONLY : O_RDWR | (size ? O_CREAT : 0);
    /* O_NOATIME: a READ served on the reactor (RWF_NOWAIT) still updates the access time, and
     * on ext4 that starts a journal handle, which can wait for a commit; RWF_NOWAIT does not
     * cover it. Only the file's owner (or CAP_FOWNER) may ask: without it, atime as mounted. */
    int fd = open(path, flags | O_NOATIME, 0644);
    if (fd < 0 && errno == EPERM)
        fd = open(path, flags, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "file:%s: %s", path, strerror(errno));
        return NULL;
    }
    bool blockdev;
    uint64_t bytes;
    if (file_size(fd, path, size, &blockdev, &bytes, err, errlen) < 0) {
        close(fd);
        return NULL;
    }
    struct bs *bs = calloc(1, sizeof(*bs));
    struct bs_file *f = calloc(1, sizeof(*f));
    if (!bs || !f) {
        snprintf(err, errlen, "file:%s: out of memory", path);
        free(bs);
        free(f);
        close(fd);
        return NULL;
    }
    f->fd = fd;
    f->blockdev = blockdev;
    f->direct = direct;
    f->write_inline = !direct; /* O_DIRECT writes wait for the device: always the ring */
    long page = sysconf(_SC_PAGESIZE);
    f->page = page > 0 ? (unsigned)page : 4096u;
    assert((f->page & (f->page - 1)) == 0); /* file_cached rounds with it as a mask */
    f->send_min = UINT64_MAX;
    bs->ops = &bs_file_ops;
    bs->size = bytes;
    bs->write_cache = true; /* the page cache (or the disk's cache with O_DIRECT) is volatile */
    bs->thin = !blockdev;   /* punching holes in a file frees space; on a device it may not */
    /* buffered: the page cache copies a READ out while a WRITE copies in, without excluding
     * each other; O_DIRECT: the device's guarantees are not known here */
    bs->order_rw = true;
    /* no write_atomic: a write of many blocks may reach the medium in part before a power
     * loss (the page cache writes pages back one by one; a device promises at most its own
     * atomic write unit, which is not known here) */
    bs->read_only = read_only;
    bs->priv = f;
    file_map(bs, path);
    return bs;
}
