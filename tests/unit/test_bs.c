/* Backing stores against real memory and real files under /tmp: the --lun spec parser and its
 * messages, null/ram semantics, the file store's synchronous path and its io_uring path run
 * from inside a reactor, short transfers, and O_DIRECT with aligned buffers. */
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "bs/bs.h"
#include "reactor/reactor.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static char tmpdir[64];

static int setup_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/lr-test-bs-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void tmp_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", tmpdir, name);
}

static struct bs *open_ok(const char *spec)
{
    char err[256] = "";
    struct bs *bs = bs_open_spec(spec, err, sizeof(err));
    if (!bs)
        fail_msg("bs_open_spec(%s): %s", spec, err);
    return bs;
}

/* Synchronous submit: on a thread without a reactor every store completes inline. */
struct sync_result {
    int calls;
    int err;
};

static void sync_done(struct bs_io *io, int err)
{
    struct sync_result *res = io->arg;
    res->calls++;
    res->err = err;
}

static int submit_iov(struct bs *bs, enum bs_op op, uint64_t off, uint64_t len, struct iovec *iov,
                      int iovcnt, bool fua)
{
    struct sync_result res = {0};
    struct bs_io io = {.op = op,
                       .offset = off,
                       .length = len,
                       .iov = iov,
                       .iovcnt = iovcnt,
                       .fua = fua,
                       .done = sync_done,
                       .arg = &res};
    bs_submit(bs, &io);
    assert_int_equal(res.calls, 1); /* exactly once, and before bs_submit returned */
    return res.err;
}

static int submit_buf(struct bs *bs, enum bs_op op, uint64_t off, void *buf, uint64_t len, bool fua)
{
    struct iovec iov = {buf, len};
    return submit_iov(bs, op, off, len, buf ? &iov : NULL, buf ? 1 : 0, fua);
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 31 + seed * 7 + 1);
}

static bool all_zero(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i])
            return false;
    return true;
}

/* ---- the io_uring path: a batch of requests submitted from inside a reactor ------------- */

struct batch {
    struct reactor *r;
    struct reactor_msg start_msg;
    struct bs *bs;
    struct bs_io *ios;
    int *errs;
    int n;
    int completed;
    int completed_inline; /* completions that ran before their bs_submit() returned */
    bool submitting;
    bool wrong_thread;
};

static void batch_done(struct bs_io *io, int err)
{
    struct batch *b = io->arg;
    if (reactor_self() != b->r)
        b->wrong_thread = true;
    if (b->submitting)
        b->completed_inline++;
    b->errs[io - b->ios] = err;
    if (++b->completed == b->n)
        reactor_stop(b->r);
}

static void batch_start(void *arg)
{
    struct batch *b = arg;
    b->submitting = true;
    for (int i = 0; i < b->n; i++) {
        b->ios[i].done = batch_done;
        b->ios[i].arg = b;
        bs_submit(b->bs, &b->ios[i]);
    }
    b->submitting = false;
    if (b->completed == b->n)
        reactor_stop(b->r);
}

static void *batch_thread(void *arg)
{
    reactor_run(arg);
    return NULL; /* thread exit releases this thread's ring */
}

/* Run ios[0..n) on a fresh reactor thread; errs[i] gets each result. Returns how many
 * completed inline (0 means they really went through the ring). */
static int run_batch(struct bs *bs, struct bs_io *ios, int *errs, int n)
{
    struct batch b = {.bs = bs, .ios = ios, .errs = errs, .n = n};
    b.r = reactor_create(1);
    assert_non_null(b.r);
    for (int i = 0; i < n; i++)
        errs[i] = 1; /* not a possible result: catches a missing completion */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, batch_thread, b.r), 0);
    reactor_post(b.r, &b.start_msg, batch_start, &b);
    pthread_join(t, NULL);
    reactor_destroy(b.r);
    assert_int_equal(b.completed, n);
    assert_false(b.wrong_thread);
    return b.completed_inline;
}

/* ---- spec parsing ------------------------------------------------------------------------ */

static void test_spec_good(void **state)
{
    (void)state;
    struct bs *bs = open_ok("ram:1M");
    assert_int_equal(bs->size, 1 << 20);
    assert_string_equal(bs->desc, "ram:1M");
    assert_string_equal(bs->ops->name, "ram");
    assert_false(bs->write_cache);
    assert_true(bs->thin);
    bs_close(bs);

    bs = open_ok("null:4k");
    assert_int_equal(bs->size, 4096);
    assert_string_equal(bs->ops->name, "null");
    bs_close(bs);

    bs = open_ok("ram:512");
    assert_int_equal(bs->size, 512);
    bs_close(bs);

    /* size= creates a missing file and gives it that size */
    char path[128], spec[192];
    tmp_path(path, sizeof(path), "good.img");
    snprintf(spec, sizeof(spec), "file:%s,size=2M", path);
    bs = open_ok(spec);
    assert_int_equal(bs->size, 2 << 20);
    assert_true(bs->write_cache);
    assert_true(bs->thin);
    assert_string_equal(bs->desc, spec);
    bs_close(bs);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 2 << 20);

    /* without size= the file's own size is exported; a smaller size= exposes a prefix */
    snprintf(spec, sizeof(spec), "file:%s", path);
    bs = open_ok(spec);
    assert_int_equal(bs->size, 2 << 20);
    bs_close(bs);
    snprintf(spec, sizeof(spec), "file:%s,size=1M", path);
    bs = open_ok(spec);
    assert_int_equal(bs->size, 1 << 20);
    bs_close(bs);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 2 << 20); /* never shrunk */

    /* write-inline takes on and off */
    snprintf(spec, sizeof(spec), "file:%s,write-inline=off", path);
    bs_close(open_ok(spec));
    snprintf(spec, sizeof(spec), "file:%s,write-inline=on,size=1M", path);
    bs_close(open_ok(spec));

    /* ,ro opens the file read-only: reads work, a write fails, and a missing file is not made */
    snprintf(spec, sizeof(spec), "file:%s,ro", path);
    bs = open_ok(spec);
    assert_int_equal(bs->size, 2 << 20);
    static uint8_t blk[512];
    assert_int_equal(submit_buf(bs, BS_READ, 0, blk, sizeof(blk), false), 0);
    assert_true(submit_buf(bs, BS_WRITE, 0, blk, sizeof(blk), false) < 0);
    bs_close(bs);
    char missing[128];
    tmp_path(missing, sizeof(missing), "missing-ro.img");
    snprintf(spec, sizeof(spec), "file:%s,size=1M,ro", missing);
    assert_null(bs_open_spec(spec, (char[256]){0}, 256));
}

static void expect_error(const char *spec, const char *message)
{
    char err[256] = "";
    struct bs *bs = bs_open_spec(spec, err, sizeof(err));
    if (bs) {
        bs_close(bs);
        fail_msg("'%s' opened, expected '%s'", spec ? spec : "(null)", message);
    }
    assert_string_equal(err, message);
}

static void test_spec_bad(void **state)
{
    (void)state;
    expect_error(NULL, "empty store spec (expected ram:SIZE, null:SIZE or file:PATH)");
    expect_error("", "empty store spec (expected ram:SIZE, null:SIZE or file:PATH)");
    expect_error("foo:1G", "unknown store type 'foo' (expected ram, null, file or rbd)");
    expect_error("RAM:1G", "unknown store type 'RAM' (expected ram, null, file or rbd)");
    expect_error("ram", "ram: size missing");
    expect_error("ram:", "ram: size missing");
    expect_error("null:", "null: size missing");
    expect_error("ram:lots", "ram: bad size 'lots' (expected e.g. 512, 4k, 1G)");
    expect_error("ram:1X", "ram: bad size '1X' (expected e.g. 512, 4k, 1G)");
    expect_error("ram:0", "ram: size 0 is not a positive multiple of 512");
    expect_error("ram:1000", "ram: size 1000 is not a positive multiple of 512");
    expect_error("null:1G,direct", "null: unknown option 'direct'");
    expect_error("null:1G,prealloc", "null: unknown option 'prealloc'");
    expect_error("null:1G,send-min=4k", "null: unknown option 'send-min=4k'");
    expect_error("ram:1G,send-min=1000",
                 "ram: send-min: size 1000 is not a positive multiple of 512");
    /* rbd: the spec is checked before any cluster is contacted */
    expect_error("rbd:", "rbd:: expected rbd:POOL/IMAGE");
    expect_error("rbd:pool", "rbd:pool: expected rbd:POOL/IMAGE");
    expect_error("rbd:/img", "rbd:/img: expected rbd:POOL/IMAGE");
    expect_error("rbd:pool/", "rbd:pool/: expected rbd:POOL/IMAGE");
    expect_error("rbd:a/b/c", "rbd:a/b/c: expected rbd:POOL/IMAGE");
    expect_error("rbd:p/i,timeout=0", "rbd:p/i: bad timeout '0' (expected seconds, 1..3600)");
    expect_error("rbd:p/i,timeout=x", "rbd:p/i: bad timeout 'x' (expected seconds, 1..3600)");
    expect_error("rbd:p/i,size=1000", "rbd:p/i: size 1000 is not a positive multiple of 512");
    expect_error("rbd:p/i,direct", "rbd:p/i: unknown or bad option 'direct'");
    expect_error("rbd:p/i,conf=", "rbd:p/i: unknown or bad option 'conf='");
    expect_error("ram:1G,prealloc,thin", "ram: unknown option 'thin'");
    expect_error("ram:1G,preallocate", "ram: unknown option 'preallocate'");
    {
        /* more than the machine has is refused before anything is faulted in (no OOM kill) */
        char want[256];
        unsigned long long phys =
            (unsigned long long)sysconf(_SC_PHYS_PAGES) * (unsigned long long)sysconf(_SC_PAGESIZE);
        snprintf(want, sizeof(want),
                 "ram: cannot preallocate %llu bytes: this machine has %llu bytes of memory",
                 1ull << 50, phys);
        expect_error("ram:1024T,prealloc", want);
    }
    expect_error("ram:1G,ro,x", "ram: unknown option 'ro'");
    expect_error("file:", "file: path missing");
    expect_error("file:,size=1M", "file: path missing");
    expect_error("file:/nonexistent-lr/x.img",
                 "file:/nonexistent-lr/x.img: No such file or directory");
    expect_error("file:/nonexistent-lr/x.img,size=1M",
                 "file:/nonexistent-lr/x.img: No such file or directory");

    char path[128], spec[192], msg[256];
    tmp_path(path, sizeof(path), "bad.img");
    snprintf(spec, sizeof(spec), "file:%s,size=1M,bogus", path);
    snprintf(msg, sizeof(msg), "file:%s: unknown option 'bogus'", path);
    expect_error(spec, msg);
    snprintf(spec, sizeof(spec), "file:%s,size=1M,write-inline=no", path);
    snprintf(msg, sizeof(msg), "file:%s: bad write-inline 'no' (expected on or off)", path);
    expect_error(spec, msg);
    snprintf(spec, sizeof(spec), "file:%s,size=1k1", path);
    snprintf(msg, sizeof(msg), "file:%s: bad size '1k1' (expected e.g. 512, 4k, 1G)", path);
    expect_error(spec, msg);
    snprintf(spec, sizeof(spec), "file:%s,size=100", path);
    snprintf(msg, sizeof(msg), "file:%s: size 100 is not a positive multiple of 512", path);
    expect_error(spec, msg);
    snprintf(spec, sizeof(spec), "file:%s,size=", path);
    snprintf(msg, sizeof(msg), "file:%s: size missing", path);
    expect_error(spec, msg);

    /* an existing file whose size is not whole sectors, and an empty one */
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 1000), 0);
    close(fd);
    snprintf(spec, sizeof(spec), "file:%s", path);
    snprintf(msg, sizeof(msg),
             "file:%s: size 1000 is not a positive multiple of 512 (give size=SIZE)", path);
    expect_error(spec, msg);
    assert_int_equal(truncate(path, 0), 0);
    snprintf(msg, sizeof(msg), "file:%s: size 0 is not a positive multiple of 512 (give size=SIZE)",
             path);
    expect_error(spec, msg);

    /* a directory is neither a file nor a device */
    snprintf(spec, sizeof(spec), "file:%s", tmpdir);
    snprintf(msg, sizeof(msg), "file:%s: Is a directory", tmpdir);
    expect_error(spec, msg);
}

/* ---- null -------------------------------------------------------------------------------- */

static void test_null(void **state)
{
    (void)state;
    struct bs *bs = open_ok("null:64k");
    uint8_t buf[8192];
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, buf, sizeof(buf), true), 0);
    /* reads are zeros across every iovec, whatever was written */
    struct iovec iov[3] = {{buf, 100}, {buf + 100, 4000}, {buf + 4100, 4092}};
    assert_int_equal(submit_iov(bs, BS_READ, 0, sizeof(buf), iov, 3, false), 0);
    assert_true(all_zero(buf, sizeof(buf)));
    assert_int_equal(submit_buf(bs, BS_FLUSH, 0, NULL, 0, false), 0);
    assert_int_equal(submit_buf(bs, BS_UNMAP, 0, NULL, 65536, false), 0);
    assert_null(bs_map_read(bs, 0, 512));
    /* out of range */
    assert_int_equal(submit_buf(bs, BS_READ, 65536 - 512, buf, 1024, false), -EINVAL);
    bs_close(bs);
}

/* ---- ram --------------------------------------------------------------------------------- */

/* Copies take the RAM store's stripe locks of the 1 MiB regions they touch (64 stripes): a
 * range wrapping around the stripe array, one spanning every stripe, and an UNMAP of more than
 * that each lock every stripe once and let go (a stripe locked twice, or left locked, would
 * hang the next request). */
static void test_ram_stripes(void **state)
{
    (void)state;
    const uint64_t mib = 1 << 20;
    struct bs *bs = open_ok("ram:160M");
    uint8_t *wr = malloc(8 * mib), *rd = malloc(8 * mib);
    assert_non_null(wr);
    assert_non_null(rd);
    fill(wr, 8 * mib, 7);
    uint64_t offs[] = {63 * mib + 4096, 60 * mib, 127 * mib + 512};
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        assert_int_equal(submit_buf(bs, BS_WRITE, offs[i], wr, 8 * mib, false), 0);
        assert_int_equal(submit_buf(bs, BS_READ, offs[i], rd, 8 * mib, false), 0);
        assert_memory_equal(rd, wr, 8 * mib);
    }
    assert_int_equal(submit_buf(bs, BS_UNMAP, 0, NULL, 150 * mib, false), 0);
    assert_int_equal(submit_buf(bs, BS_READ, 60 * mib, rd, 8 * mib, false), 0);
    assert_true(all_zero(rd, 8 * mib));
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, wr, 4096, false), 0); /* all unlocked */
    free(wr);
    free(rd);
    bs_close(bs);
}

static void pin_write_done(struct bs_io *io, int err)
{
    *(int *)io->arg = err == 0 ? 1 : -1;
}

/* A READ sent in place (read_pin) keeps its pages as they were: a WRITE over them waits,
 * without blocking, until unpin; meanwhile READs of that region copy (no new pin) and a WRITE
 * elsewhere goes through. Shorter than send-min (4 KiB by default) or with send-min=off, no pin
 * at all. */
static void test_ram_pin(void **state)
{
    (void)state;
    struct bs *bs = open_ok("ram:16M,send-min=8k");
    assert_non_null(bs->ops->read_pin);
    uint8_t *a = malloc(65536), *b = malloc(65536);
    assert_non_null(a);
    assert_non_null(b);
    fill(a, 65536, 1);
    fill(b, 65536, 2);
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, a, 65536, false), 0);
    struct iovec iov[8];
    assert_int_equal(bs->ops->read_pin(bs, 0, 4096, iov, 8), 0); /* under send-min */
    int n = bs->ops->read_pin(bs, 0, 65536, iov, 8);
    assert_int_equal(n, 1);
    assert_int_equal(iov[0].iov_len, 65536);
    int done = 0;
    struct iovec wiov = {b, 4096};
    struct bs_io w = {.op = BS_WRITE,
                      .offset = 8192,
                      .length = 4096,
                      .iov = &wiov,
                      .iovcnt = 1,
                      .done = pin_write_done,
                      .arg = &done};
    bs_submit(bs, &w);
    assert_int_equal(done, 0); /* waits for the pin */
    assert_memory_equal(iov[0].iov_base, a, 65536);
    assert_int_equal(bs->ops->read_pin(bs, 0, 65536, iov + 1, 7), 0); /* a writer waits there */
    assert_int_equal(submit_buf(bs, BS_WRITE, 1 << 20, b, 4096, false), 0); /* elsewhere: goes */
    bs->ops->unpin(bs, 0, 65536);
    assert_int_equal(done, 1); /* no reactor here: it ran on the unpinning thread */
    assert_memory_equal((uint8_t *)iov[0].iov_base + 8192, b, 4096);
    n = bs->ops->read_pin(bs, 0, 65536, iov, 8); /* the writer is gone: pins again */
    assert_int_equal(n, 1);
    bs->ops->unpin(bs, 0, 65536);
    bs_close(bs);
    bs = open_ok("ram:16M,send-min=off");
    assert_int_equal(bs->ops->read_pin(bs, 0, 65536, iov, 8), 0);
    bs_close(bs);
    bs = open_ok("ram:16M"); /* by default READs from 4 KiB on are sent in place */
    assert_int_equal(bs->ops->read_pin(bs, 0, 2048, iov, 8), 0);
    assert_int_equal(bs->ops->read_pin(bs, 0, 4096, iov, 8), 1);
    bs->ops->unpin(bs, 0, 4096);
    bs_close(bs);
    free(a);
    free(b);
}

static void test_ram_round_trip(void **state)
{
    (void)state;
    const size_t size = 256 * 1024;
    struct bs *bs = open_ok("ram:256k");
    uint8_t *wr = malloc(size), *rd = malloc(size);
    assert_non_null(wr);
    assert_non_null(rd);

    /* untouched memory reads as zeros */
    memset(rd, 0xff, size);
    assert_int_equal(submit_buf(bs, BS_READ, 0, rd, size, false), 0);
    assert_true(all_zero(rd, size));

    fill(wr, size, 1);
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, wr, size, false), 0);
    /* scattered read, iovecs totalling more than length: only length bytes are touched */
    memset(rd, 0x5a, size);
    struct iovec iov[3] = {{rd, 513}, {rd + 513, 7000}, {rd + 7513, 10000}};
    assert_int_equal(submit_iov(bs, BS_READ, 4096, 8192, iov, 3, false), 0);
    assert_memory_equal(rd, wr + 4096, 8192);
    assert_int_equal(rd[8192], 0x5a);

    /* the map is the store's memory */
    uint8_t *m = bs_map_read(bs, 4096, 512);
    assert_non_null(m);
    assert_memory_equal(m, wr + 4096, 512);
    m[0] ^= 0xff;
    assert_int_equal(submit_buf(bs, BS_READ, 4096, rd, 512, false), 0);
    assert_int_equal(rd[0], (uint8_t)(wr[4096] ^ 0xff));
    m[0] ^= 0xff;

    /* UNMAP of a range with partial pages at both ends and whole pages between */
    const uint64_t uoff = 1536, ulen = 3 * 4096 + 1024;
    assert_int_equal(submit_buf(bs, BS_UNMAP, uoff, NULL, ulen, false), 0);
    assert_int_equal(submit_buf(bs, BS_READ, 0, rd, size, false), 0);
    assert_memory_equal(rd, wr, uoff);
    assert_true(all_zero(rd + uoff, ulen));
    assert_memory_equal(rd + uoff + ulen, wr + uoff + ulen, size - uoff - ulen);
    /* UNMAP within one page */
    assert_int_equal(submit_buf(bs, BS_UNMAP, 65536 + 512, NULL, 1024, false), 0);
    assert_int_equal(submit_buf(bs, BS_READ, 65536, rd, 4096, false), 0);
    assert_memory_equal(rd, wr + 65536, 512);
    assert_true(all_zero(rd + 512, 1024));
    assert_memory_equal(rd + 1536, wr + 65536 + 1536, 4096 - 1536);
    /* and the unmapped pages take writes again */
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, wr, size, false), 0);
    assert_int_equal(submit_buf(bs, BS_READ, 0, rd, size, false), 0);
    assert_memory_equal(rd, wr, size);

    assert_int_equal(submit_buf(bs, BS_FLUSH, 0, NULL, 0, false), 0);
    free(wr);
    free(rd);
    bs_close(bs);
}

/* The state of [off, off+len) as lba_status reports its first run: 1 mapped, 0 deallocated;
 * *run gets the run's length. */
static int ram_state(struct bs *bs, uint64_t off, uint64_t len, uint64_t *run)
{
    bool mapped = false;
    *run = len;
    assert_int_equal(bs_lba_status(bs, off, run, &mapped), 0);
    return mapped;
}

/* VmRSS of this process in KiB. */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = atol(line + 6);
    fclose(f);
    assert_true(kib > 0);
    return kib;
}

/* The provisioning state is the store's own allocation map (SBC-4 §4.7): a READ, whichever way
 * it goes, never maps a page; WRITE and write-mapping do; UNMAP gives whole pages back and
 * keeps partial ones. Does not depend on what the kernel does on a read fault. */
static void test_ram_allocation_map(void **state)
{
    (void)state;
    const uint64_t size = 1 << 20;
    struct bs *bs = open_ok("ram:1M");
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    uint64_t run;

    assert_int_equal(ram_state(bs, 0, size, &run), 0);
    assert_int_equal(run, size);
    /* reads by copy, by iovec and through the read map leave everything deallocated */
    memset(buf, 0xff, size);
    assert_int_equal(submit_buf(bs, BS_READ, 0, buf, size, false), 0);
    assert_true(all_zero(buf, size));
    struct iovec iov[16];
    int n = bs_read_iov(bs, 0, size, iov, 16);
    assert_int_equal(n, 1);
    assert_int_equal(iov[0].iov_len, size);
    assert_ptr_not_equal(iov[0].iov_base, bs_map_read(bs, 0, size)); /* the zero buffer */
    assert_true(all_zero(iov[0].iov_base, size));
    const volatile uint8_t *m = bs_map_read(bs, 0, size);
    unsigned sum = 0;
    for (uint64_t i = 0; i < size; i += 4096)
        sum += m[i];
    assert_int_equal(sum, 0);
    assert_int_equal(ram_state(bs, 0, size, &run), 0);
    assert_int_equal(run, size);

    /* one 512-byte write maps its page, nothing more */
    memset(buf, 0x5a, 512);
    assert_int_equal(submit_buf(bs, BS_WRITE, 3 * 4096 + 1024, buf, 512, false), 0);
    assert_int_equal(ram_state(bs, 0, size, &run), 0);
    assert_int_equal(run, 3 * 4096);
    assert_int_equal(ram_state(bs, 3 * 4096, size - 3 * 4096, &run), 1);
    assert_int_equal(run, 4096);
    assert_int_equal(ram_state(bs, 4 * 4096, size - 4 * 4096, &run), 0);
    assert_int_equal(run, size - 4 * 4096);
    /* a READ across it: memory where mapped, zero buffer around it */
    n = bs_read_iov(bs, 0, 8 * 4096, iov, 16);
    assert_int_equal(n, 3);
    assert_int_equal(iov[0].iov_len, 3 * 4096);
    assert_ptr_equal(iov[1].iov_base, bs_map_read(bs, 3 * 4096, 4096));
    assert_int_equal(iov[1].iov_len, 4096);
    assert_int_equal(iov[2].iov_len, 4 * 4096);
    assert_int_equal(((uint8_t *)iov[1].iov_base)[1024], 0x5a);
    assert_int_equal(bs_read_iov(bs, 0, 8 * 4096, iov, 2), 0); /* does not fit: 0 */

    /* write-mapping counts as written: direct data placement */
    uint8_t *w = bs_map_write(bs, 64 * 1024, 8192);
    assert_non_null(w);
    assert_int_equal(ram_state(bs, 64 * 1024, 8192, &run), 1);
    assert_int_equal(run, 8192);
    memset(w, 0x77, 8192);

    /* UNMAP of part of a page keeps it mapped (and zeroes that part); of the whole page,
     * deallocates it */
    assert_int_equal(submit_buf(bs, BS_UNMAP, 3 * 4096 + 1024, NULL, 512, false), 0);
    assert_int_equal(ram_state(bs, 3 * 4096, 4096, &run), 1);
    assert_int_equal(submit_buf(bs, BS_READ, 3 * 4096, buf, 4096, false), 0);
    assert_true(all_zero(buf, 4096));
    assert_int_equal(submit_buf(bs, BS_UNMAP, 3 * 4096 - 512, NULL, 4096 + 1024, false), 0);
    assert_int_equal(ram_state(bs, 0, 64 * 1024, &run), 0);
    assert_int_equal(run, 64 * 1024);
    /* an unaligned UNMAP over two written pages: the whole page between goes, the ends stay */
    assert_int_equal(submit_buf(bs, BS_UNMAP, 64 * 1024 + 512, NULL, 4096, false), 0);
    assert_int_equal(ram_state(bs, 64 * 1024, 8192, &run), 1);
    assert_int_equal(run, 8192);
    assert_int_equal(submit_buf(bs, BS_READ, 64 * 1024, buf, 8192, false), 0);
    assert_int_equal(buf[0], 0x77);
    assert_true(all_zero(buf + 512, 4096));
    assert_int_equal(buf[4608], 0x77);
    assert_int_equal(submit_buf(bs, BS_UNMAP, 60 * 1024, NULL, 16 * 1024, false), 0);
    assert_int_equal(ram_state(bs, 0, size, &run), 0);
    assert_int_equal(run, size);

    /* a fragmented range: more runs than iovecs */
    for (uint64_t p = 0; p < 64; p += 2)
        assert_int_equal(submit_buf(bs, BS_WRITE, p * 4096, buf, 512, false), 0);
    assert_int_equal(bs_read_iov(bs, 0, 64 * 4096, iov, 16), 0);
    assert_int_equal(bs_read_iov(bs, 0, 16 * 4096, iov, 16), 16);
    assert_int_equal(ram_state(bs, 0, size, &run), 1);
    assert_int_equal(run, 4096);
    free(buf);
    bs_close(bs);
}

/* ",prealloc": the memory is there from the start and the LUN is fully provisioned (not thin,
 * every block mapped, reads sent from its own memory); BS_UNMAP only zeroes. */
static void test_ram_prealloc(void **state)
{
    (void)state;
    struct bs *bs = open_ok("ram:4M,prealloc");
    assert_false(bs->thin);
    uint64_t run;
    assert_int_equal(ram_state(bs, 0, 4 << 20, &run), 1);
    assert_int_equal(run, 4 << 20);
    struct iovec iov[2];
    assert_int_equal(bs_read_iov(bs, 0, 1 << 20, iov, 2), 1);
    assert_ptr_equal(iov[0].iov_base, bs_map_read(bs, 0, 1 << 20));
    uint8_t buf[8192];
    memset(buf, 0x3c, sizeof(buf));
    assert_int_equal(submit_buf(bs, BS_WRITE, 4096, buf, sizeof(buf), false), 0);
    assert_int_equal(submit_buf(bs, BS_UNMAP, 4096, NULL, sizeof(buf), false), 0);
    assert_int_equal(submit_buf(bs, BS_READ, 4096, buf, sizeof(buf), false), 0);
    assert_true(all_zero(buf, sizeof(buf)));
    assert_int_equal(ram_state(bs, 0, 4 << 20, &run), 1);
    assert_int_equal(run, 4 << 20);
    bs_close(bs);
}

/* Reading 1 GiB of a never-written 64 GiB RAM LUN, by copy and by iovec, costs the process no
 * memory: RSS stays within a few MiB (the zero buffer is 1 MiB). */
static void test_ram_thin_read_costs_nothing(void **state)
{
    (void)state;
    struct bs *bs = open_ok("ram:64G");
    const uint64_t chunk = 1 << 20;
    uint8_t *buf = malloc(chunk);
    assert_non_null(buf);
    memset(buf, 1, chunk);
    long before = rss_kib();
    unsigned long sum = 0;
    for (uint64_t off = 0; off < (1ull << 30); off += chunk) {
        assert_int_equal(submit_buf(bs, BS_READ, off, buf, chunk, false), 0);
        sum += buf[chunk - 1];
        struct iovec iov[16];
        int n = bs_read_iov(bs, off + (32ull << 30), chunk * 8, iov, 16);
        assert_true(n > 0);
        for (int i = 0; i < n; i++) /* what the transport would send */
            for (size_t k = 0; k < iov[i].iov_len; k += 4096)
                sum += ((const uint8_t *)iov[i].iov_base)[k];
    }
    long after = rss_kib();
    assert_int_equal(sum, 0);
    if (after - before > 4096)
        fail_msg("RSS grew by %ld KiB reading 9 GiB of an unwritten LUN", after - before);
    uint64_t run;
    assert_int_equal(ram_state(bs, 0, 64ull << 30, &run), 0);
    free(buf);
    bs_close(bs);
}

static void test_ram_bounds(void **state)
{
    (void)state;
    struct bs *bs = open_ok("ram:64k");
    assert_non_null(bs_map_read(bs, 0, 65536));
    assert_non_null(bs_map_read(bs, 65536 - 512, 512));
    assert_ptr_equal((uint8_t *)bs_map_read(bs, 512, 512),
                     (uint8_t *)bs_map_read(bs, 0, 512) + 512);
    assert_null(bs_map_read(bs, 65536 - 512, 1024));
    assert_null(bs_map_read(bs, 65536 + 512, 0));
    assert_null(bs_map_read(bs, UINT64_MAX - 100, 512)); /* offset + len wraps */
    assert_null(bs_map_read(bs, 512, UINT64_MAX));

    uint8_t buf[1024];
    assert_int_equal(submit_buf(bs, BS_WRITE, 65536 - 512, buf, 1024, false), -EINVAL);
    assert_int_equal(submit_buf(bs, BS_READ, UINT64_MAX - 511, buf, 1024, false), -EINVAL);
    assert_int_equal(submit_buf(bs, BS_UNMAP, 0, NULL, 65536 + 512, false), -EINVAL);
    /* iovecs shorter than length */
    struct iovec iov = {buf, 512};
    assert_int_equal(submit_iov(bs, BS_READ, 0, 1024, &iov, 1, false), -EINVAL);
    bs_close(bs);
}

/* ---- file, synchronous path ------------------------------------------------------------- */

static void test_file_sync_persistence(void **state)
{
    (void)state;
    char path[128], spec[192];
    tmp_path(path, sizeof(path), "sync.img");
    snprintf(spec, sizeof(spec), "file:%s,size=1M", path);
    struct bs *bs = open_ok(spec);
    enum { BLK = 4096 };
    uint8_t a[BLK], b[BLK], rd[2 * BLK];
    fill(a, BLK, 2);
    fill(b, BLK, 3);
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, a, BLK, false), 0);
    assert_int_equal(submit_buf(bs, BS_WRITE, 1 << 19, b, BLK, true), 0); /* FUA */
    assert_int_equal(submit_buf(bs, BS_FLUSH, 0, NULL, 0, false), 0);
    bs_close(bs);

    /* a fresh open sees both, and the untouched middle reads as zeros */
    snprintf(spec, sizeof(spec), "file:%s", path);
    bs = open_ok(spec);
    assert_int_equal(bs->size, 1 << 20);
    assert_int_equal(submit_buf(bs, BS_READ, 0, rd, BLK, false), 0);
    assert_memory_equal(rd, a, BLK);
    assert_int_equal(submit_buf(bs, BS_READ, 1 << 19, rd, BLK, false), 0);
    assert_memory_equal(rd, b, BLK);
    assert_int_equal(submit_buf(bs, BS_READ, 65536, rd, 2 * BLK, false), 0);
    assert_true(all_zero(rd, 2 * BLK));

    /* UNMAP punches a hole that reads back as zeros, the neighbours untouched */
    struct iovec iov[2] = {{a, BLK}, {b, BLK}};
    assert_int_equal(submit_iov(bs, BS_WRITE, 8192, 2 * BLK, iov, 2, false), 0);
    assert_int_equal(submit_buf(bs, BS_UNMAP, 8192, NULL, BLK, false), 0);
    assert_int_equal(submit_buf(bs, BS_READ, 8192, rd, 2 * BLK, false), 0);
    assert_true(all_zero(rd, BLK));
    assert_memory_equal(rd + BLK, b, BLK);

    assert_int_equal(submit_buf(bs, BS_READ, (1 << 20) - 512, rd, 1024, false), -EINVAL);
    bs_close(bs);
}

/* The file shrinks under an open store: the read stops short, the resumed part finds nothing
 * (-EIO, not a hang or a silent partial buffer), and the caller's iovecs come back intact. */
static void check_short_read(bool ring)
{
    char path[128], spec[192];
    tmp_path(path, sizeof(path), ring ? "short-ring.img" : "short-sync.img");
    snprintf(spec, sizeof(spec), "file:%s,size=16k", path);
    struct bs *bs = open_ok(spec);
    uint8_t wr[16384], rd[16384 + 512];
    fill(wr, sizeof(wr), 4);
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, wr, sizeof(wr), false), 0);
    assert_int_equal(truncate(path, 6144), 0);

    memset(rd, 0, sizeof(rd));
    struct iovec iov[4] = {
        {rd, 4096}, {rd + 4096, 4096}, {rd + 8192, 4096}, {rd + 12288, 4096 + 512}};
    struct iovec orig[4];
    memcpy(orig, iov, sizeof(iov));
    int err;
    if (ring) {
        struct bs_io io = {.op = BS_READ, .offset = 0, .length = 16384, .iov = iov, .iovcnt = 4};
        assert_int_equal(run_batch(bs, &io, &err, 1), 0);
    } else {
        err = submit_iov(bs, BS_READ, 0, 16384, iov, 4, false);
    }
    assert_int_equal(err, -EIO);
    assert_memory_equal(iov, orig, sizeof(iov));
    assert_memory_equal(rd, wr, 6144);
    bs_close(bs);
}

static void test_file_short_read_sync(void **state)
{
    (void)state;
    check_short_read(false);
}

/* ---- file, io_uring path ----------------------------------------------------------------- */

/* More requests than the ring holds (256), so the overflow queue is exercised; scattered
 * buffers; a third with FUA; then a FLUSH; then read everything back, both through the store
 * (from the page cache, mostly inline) and through an independent descriptor. write-inline=off
 * keeps every WRITE on the ring. */
static void test_file_uring(void **state)
{
    (void)state;
    enum { N = 600, BLK = 4096 };
    char path[128], spec[192];
    tmp_path(path, sizeof(path), "uring.img");
    snprintf(spec, sizeof(spec), "file:%s,size=4M,write-inline=off", path);
    struct bs *bs = open_ok(spec);

    uint8_t *wr = malloc((size_t)N * BLK), *rd = malloc((size_t)N * BLK);
    struct bs_io *ios = calloc(N, sizeof(*ios));
    struct iovec *iov = calloc(2 * N, sizeof(*iov));
    int *errs = calloc(N, sizeof(*errs));
    assert_true(wr && rd && ios && iov && errs);
    fill(wr, (size_t)N * BLK, 5);

    for (int i = 0; i < N; i++) {
        uint8_t *p = wr + (size_t)i * BLK;
        iov[2 * i] = (struct iovec){p, 1000};
        iov[2 * i + 1] = (struct iovec){p + 1000, BLK - 1000};
        ios[i] = (struct bs_io){.op = BS_WRITE,
                                .offset = (uint64_t)i * BLK,
                                .length = BLK,
                                .iov = &iov[2 * i],
                                .iovcnt = 2,
                                .fua = i % 3 == 0};
    }
    assert_int_equal(run_batch(bs, ios, errs, N), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(errs[i], 0);

    struct bs_io flush = {.op = BS_FLUSH};
    assert_int_equal(run_batch(bs, &flush, errs, 1), 0);
    assert_int_equal(errs[0], 0);

    memset(rd, 0, (size_t)N * BLK);
    for (int i = 0; i < N; i++) {
        iov[i] = (struct iovec){rd + (size_t)i * BLK, BLK};
        ios[i] = (struct bs_io){
            .op = BS_READ, .offset = (uint64_t)i * BLK, .length = BLK, .iov = &iov[i], .iovcnt = 1};
    }
    run_batch(bs, ios, errs, N); /* cached pages complete inline, the rest on the ring */
    for (int i = 0; i < N; i++)
        assert_int_equal(errs[i], 0);
    assert_memory_equal(rd, wr, (size_t)N * BLK);

    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    memset(rd, 0, (size_t)N * BLK);
    assert_int_equal(pread(fd, rd, (size_t)N * BLK, 0), N * BLK);
    close(fd);
    assert_memory_equal(rd, wr, (size_t)N * BLK);

    /* UNMAP through the ring, and a bad request that fails before reaching it */
    ios[0] = (struct bs_io){.op = BS_UNMAP, .offset = 0, .length = 2 * BLK};
    ios[1] = (struct bs_io){
        .op = BS_READ, .offset = 4 << 20, .length = BLK, .iov = &iov[1], .iovcnt = 1};
    assert_int_equal(run_batch(bs, ios, errs, 2), 1);
    assert_int_equal(errs[0], 0);
    assert_int_equal(errs[1], -EINVAL);
    ios[0] = (struct bs_io){.op = BS_READ, .offset = 0, .length = BLK, .iov = &iov[0], .iovcnt = 1};
    memset(rd, 0xff, BLK);
    run_batch(bs, ios, errs, 1);
    assert_int_equal(errs[0], 0);
    assert_true(all_zero(rd, BLK));

    bs_close(bs);
    free(wr);
    free(rd);
    free(ios);
    free(iov);
    free(errs);
}

/* The SCSI core's pattern: a completion submits the next request from inside the ring's
 * completion handler. Each of N blocks is written, then read back with the same bs_io. */
struct chain {
    struct reactor *r;
    struct reactor_msg start_msg;
    struct bs *bs;
    struct bs_io *ios;
    struct iovec *iov;
    uint8_t *rd;
    int left;
    int errors;
};

static void chain_done(struct bs_io *io, int err)
{
    struct chain *c = io->arg;
    if (err)
        c->errors++;
    if (io->op == BS_WRITE) {
        int i = (int)(io - c->ios);
        c->iov[i] = (struct iovec){c->rd + (size_t)i * 4096, 4096};
        io->op = BS_READ;
        bs_submit(c->bs, io);
        return;
    }
    if (--c->left == 0)
        reactor_stop(c->r);
}

static void chain_start(void *arg)
{
    struct chain *c = arg;
    /* c->left drops while this runs: a request may complete (and chain) inline */
    int n = c->left;
    for (int i = 0; i < n; i++)
        bs_submit(c->bs, &c->ios[i]);
}

static void test_file_uring_chain(void **state)
{
    (void)state;
    enum { N = 400, BLK = 4096 };
    char path[128], spec[192];
    tmp_path(path, sizeof(path), "chain.img");
    snprintf(spec, sizeof(spec), "file:%s,size=2M", path);
    struct chain c = {.left = N};
    c.bs = open_ok(spec);
    uint8_t *wr = malloc((size_t)N * BLK);
    c.rd = calloc(N, BLK);
    c.ios = calloc(N, sizeof(*c.ios));
    c.iov = calloc(N, sizeof(*c.iov));
    assert_true(wr && c.rd && c.ios && c.iov);
    fill(wr, (size_t)N * BLK, 7);
    for (int i = 0; i < N; i++) {
        c.iov[i] = (struct iovec){wr + (size_t)i * BLK, BLK};
        c.ios[i] = (struct bs_io){.op = BS_WRITE,
                                  .offset = (uint64_t)i * BLK,
                                  .length = BLK,
                                  .iov = &c.iov[i],
                                  .iovcnt = 1,
                                  .done = chain_done,
                                  .arg = &c};
    }
    c.r = reactor_create(2);
    assert_non_null(c.r);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, batch_thread, c.r), 0);
    reactor_post(c.r, &c.start_msg, chain_start, &c);
    pthread_join(t, NULL);
    reactor_destroy(c.r);
    assert_int_equal(c.left, 0);
    assert_int_equal(c.errors, 0);
    assert_memory_equal(c.rd, wr, (size_t)N * BLK);
    bs_close(c.bs);
    free(wr);
    free(c.rd);
    free(c.ios);
    free(c.iov);
}

static void test_file_short_read_uring(void **state)
{
    (void)state;
    check_short_read(true);
}

/* ---- file, inline: the page cache served on the reactor thread --------------------------- */

/* Does the file system under tmpdir promise RWF_NOWAIT buffered reads (ext4, xfs, btrfs)?
 * tmpfs refuses them (EOPNOTSUPP) and the store then reads through the ring. */
static bool tmpdir_reads_nowait(void)
{
    struct statfs sf;
    if (statfs(tmpdir, &sf) < 0)
        return false;
    return sf.f_type == 0xEF53 || sf.f_type == 0x58465342 ||
           sf.f_type == (typeof(sf.f_type))0x9123683E;
}

/* Mixed traffic on one LUN, every kind at once: whole-page WRITEs without FUA (written on the
 * reactor thread), FUA ones and ones off the page or of part of a page (always the ring), over
 * scattered buffers; then everything read back, aligned and not, through the store and through
 * an independent descriptor. Which path each took is checked where it is certain: the first
 * whole-page WRITE of a LUN is inline, a FUA or partial-page one never, nothing is with
 * write-inline=off, and a READ of cached pages is where the file system allows RWF_NOWAIT. */
static void test_file_inline(void **state)
{
    (void)state;
    enum { N = 96, SLOT = 16384, BLK = 4096 };
    char path[128], spec[192];
    tmp_path(path, sizeof(path), "inline.img");
    snprintf(spec, sizeof(spec), "file:%s,size=2M", path);
    struct bs *bs = open_ok(spec);
    uint8_t *wr = calloc(N, SLOT), *rd = malloc((size_t)N * SLOT);
    struct bs_io ios[N];
    struct iovec iov[2 * N];
    int errs[N];
    assert_true(wr && rd);

    /* the LUN's first whole-page WRITE, no FUA, two pieces: written inline */
    fill(wr, 2 * BLK, 11);
    iov[0] = (struct iovec){wr, 1000};
    iov[1] = (struct iovec){wr + 1000, 2 * BLK - 1000};
    ios[0] =
        (struct bs_io){.op = BS_WRITE, .offset = 0, .length = 2 * BLK, .iov = iov, .iovcnt = 2};
    assert_int_equal(run_batch(bs, ios, errs, 1), 1);
    assert_int_equal(errs[0], 0);

    /* slot i of SLOT bytes gets one WRITE: kind i % 4 is whole pages without FUA, whole pages
     * with FUA, 1536 bytes at 512 past the page, 6144 bytes from the page (one and a half) */
    static const uint64_t off_in_slot[4] = {0, 0, 512, 0}, len[4] = {2 * BLK, BLK, 1536, 6144};
    fill(wr, (size_t)N * SLOT, 12);
    for (int i = 0; i < N; i++) {
        int k = i % 4;
        uint64_t off = (uint64_t)i * SLOT + off_in_slot[k];
        uint8_t *p = wr + off;
        iov[2 * i] = (struct iovec){p, 700};
        iov[2 * i + 1] = (struct iovec){p + 700, len[k] - 700};
        ios[i] = (struct bs_io){.op = BS_WRITE,
                                .offset = off,
                                .length = len[k],
                                .iov = &iov[2 * i],
                                .iovcnt = 2,
                                .fua = k == 1};
    }
    int inline_writes = run_batch(bs, ios, errs, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(errs[i], 0);
    assert_true(inline_writes <= N / 4); /* only kind 0 may be inline (a slow one backs off) */

    /* only FUA and partial-page WRITEs: never inline */
    for (int i = 0; i < N / 4; i++) {
        int k = 1 + i % 3;
        ios[i].offset = (uint64_t)(i * 4 + k) * SLOT + off_in_slot[k];
        ios[i].length = len[k];
        ios[i].fua = k == 1;
        iov[2 * i] = (struct iovec){wr + ios[i].offset, 700};
        iov[2 * i + 1] = (struct iovec){wr + ios[i].offset + 700, len[k] - 700};
        ios[i].iov = &iov[2 * i];
    }
    assert_int_equal(run_batch(bs, ios, errs, N / 4), 0);
    for (int i = 0; i < N / 4; i++)
        assert_int_equal(errs[i], 0);

    /* read back: every slot whole (aligned), then each WRITE's own bytes (unaligned ones too) */
    memset(rd, 0, (size_t)N * SLOT);
    for (int i = 0; i < N; i++) {
        iov[i] = (struct iovec){rd + (size_t)i * SLOT, SLOT};
        ios[i] = (struct bs_io){.op = BS_READ,
                                .offset = (uint64_t)i * SLOT,
                                .length = SLOT,
                                .iov = &iov[i],
                                .iovcnt = 1};
    }
    int inline_reads = run_batch(bs, ios, errs, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(errs[i], 0);
        int k = i % 4;
        uint64_t off = (uint64_t)i * SLOT + off_in_slot[k];
        assert_memory_equal(rd + off, wr + off, len[k]);
    }
    if (tmpdir_reads_nowait())
        assert_true(inline_reads > 0);
    else
        printf("inline READs not checked: %s refuses RWF_NOWAIT buffered reads\n", tmpdir);
    memset(rd, 0, (size_t)N * SLOT);
    for (int i = 0; i < N; i++) {
        int k = i % 4;
        uint64_t off = (uint64_t)i * SLOT + off_in_slot[k];
        iov[i] = (struct iovec){rd + off, len[k]};
        ios[i] = (struct bs_io){
            .op = BS_READ, .offset = off, .length = len[k], .iov = &iov[i], .iovcnt = 1};
    }
    run_batch(bs, ios, errs, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(errs[i], 0);
        assert_memory_equal(rd + ios[i].offset, wr + ios[i].offset, ios[i].length);
    }
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    memset(rd, 0, (size_t)N * SLOT);
    assert_int_equal(pread(fd, rd, (size_t)N * SLOT, 0), N * SLOT);
    close(fd);
    for (int i = 0; i < N; i++) {
        int k = i % 4;
        uint64_t off = (uint64_t)i * SLOT + off_in_slot[k];
        assert_memory_equal(rd + off, wr + off, len[k]);
    }
    bs_close(bs);

    /* write-inline=off: the same first whole-page WRITE goes through the ring */
    snprintf(spec, sizeof(spec), "file:%s,write-inline=off", path);
    bs = open_ok(spec);
    iov[0] = (struct iovec){wr, 2 * BLK};
    ios[0] =
        (struct bs_io){.op = BS_WRITE, .offset = 0, .length = 2 * BLK, .iov = iov, .iovcnt = 1};
    assert_int_equal(run_batch(bs, ios, errs, 1), 0);
    assert_int_equal(errs[0], 0);
    bs_close(bs);
    free(wr);
    free(rd);
}

/* ---- O_DIRECT ---------------------------------------------------------------------------- */

/* A buffered file LUN sends cached READs of 16 KiB and more from its mapping by default
 * (send-min=16k); send-min=off and direct never do. */
static void test_file_send_min_default(void **state)
{
    (void)state;
    char path[128], spec[192];
    tmp_path(path, sizeof(path), "sendmin.img");
    snprintf(spec, sizeof(spec), "file:%s,size=1M", path);
    struct bs *bs = open_ok(spec);
    static uint8_t buf[65536];
    fill(buf, sizeof(buf), 9);
    assert_int_equal(submit_buf(bs, BS_WRITE, 0, buf, sizeof(buf), false), 0);
    /* cachestat(2) (Linux 6.5, syscall 451) tells the store the pages are cached */
    uint64_t range[2] = {0, 4096}, stat[5];
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    bool have_cachestat = syscall(451, fd, range, stat, 0) == 0 || errno != ENOSYS;
    close(fd);
    if (!have_cachestat) {
        bs_close(bs);
        unlink(path);
        printf("skipping: this kernel has no cachestat(2), so file READs are never mapped\n");
        skip();
    }
    struct iovec iov[4];
    assert_int_equal(bs->ops->read_pin(bs, 0, 8192, iov, 4), 0); /* under 16 KiB: copied */
    assert_int_equal(bs->ops->read_pin(bs, 0, 16384, iov, 4), 1);
    assert_memory_equal(iov[0].iov_base, buf, 16384);
    bs->ops->unpin(bs, 0, 16384);
    bs_close(bs);
    snprintf(spec, sizeof(spec), "file:%s,send-min=off", path);
    bs = open_ok(spec);
    assert_int_equal(bs->ops->read_pin(bs, 0, 16384, iov, 4), 0);
    bs_close(bs);
    unlink(path);
}

static void test_file_direct(void **state)
{
    (void)state;
    enum { BLK = 4096 };
    char path[128], spec[192], err[256] = "";
    tmp_path(path, sizeof(path), "direct.img");
    snprintf(spec, sizeof(spec), "file:%s,size=1M,direct", path);
    struct bs *bs = bs_open_spec(spec, err, sizeof(err));
    if (!bs && strstr(err, "Invalid argument")) {
        printf("skipping O_DIRECT test: %s refuses O_DIRECT (%s)\n", tmpdir, err);
        skip();
    }
    if (!bs)
        fail_msg("%s", err);

    uint8_t *wr = NULL, *rd = NULL;
    assert_int_equal(posix_memalign((void **)&wr, 4096, 4 * BLK), 0);
    assert_int_equal(posix_memalign((void **)&rd, 4096, 4 * BLK), 0);
    fill(wr, 4 * BLK, 6);

    /* synchronous path */
    assert_int_equal(submit_buf(bs, BS_WRITE, 8 * BLK, wr, 2 * BLK, true), 0);
    memset(rd, 0, 2 * BLK);
    assert_int_equal(submit_buf(bs, BS_READ, 8 * BLK, rd, 2 * BLK, false), 0);
    assert_memory_equal(rd, wr, 2 * BLK);

    /* ring path, with page-aligned scattered buffers */
    struct iovec wiov[2] = {{wr + 2 * BLK, BLK}, {wr + 3 * BLK, BLK}};
    struct iovec riov[2] = {{rd + 2 * BLK, BLK}, {rd + 3 * BLK, BLK}};
    struct bs_io ios[3] = {
        {.op = BS_WRITE, .offset = 16 * BLK, .length = 2 * BLK, .iov = wiov, .iovcnt = 2},
        {.op = BS_WRITE, .offset = 32 * BLK, .length = BLK, .iov = wiov, .iovcnt = 1, .fua = true},
    };
    int errs[3];
    assert_int_equal(run_batch(bs, ios, errs, 2), 0);
    assert_int_equal(errs[0], 0);
    assert_int_equal(errs[1], 0);
    ios[0] = (struct bs_io){.op = BS_FLUSH};
    ios[1] = (struct bs_io){
        .op = BS_READ, .offset = 16 * BLK, .length = 2 * BLK, .iov = riov, .iovcnt = 2};
    assert_int_equal(run_batch(bs, ios, errs, 2), 0);
    assert_int_equal(errs[0], 0);
    assert_int_equal(errs[1], 0);
    assert_memory_equal(rd + 2 * BLK, wr + 2 * BLK, 2 * BLK);
    bs_close(bs);

    /* persisted: read through the page cache with a plain open */
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, rd, BLK, 32 * BLK), BLK);
    close(fd);
    assert_memory_equal(rd, wr + 2 * BLK, BLK);
    free(wr);
    free(rd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_good),
        cmocka_unit_test(test_spec_bad),
        cmocka_unit_test(test_null),
        cmocka_unit_test(test_ram_round_trip),
        cmocka_unit_test(test_ram_stripes),
        cmocka_unit_test(test_ram_pin),
        cmocka_unit_test(test_ram_bounds),
        cmocka_unit_test(test_ram_allocation_map),
        cmocka_unit_test(test_ram_thin_read_costs_nothing),
        cmocka_unit_test(test_ram_prealloc),
        cmocka_unit_test(test_file_sync_persistence),
        cmocka_unit_test(test_file_short_read_sync),
        cmocka_unit_test(test_file_uring),
        cmocka_unit_test(test_file_uring_chain),
        cmocka_unit_test(test_file_short_read_uring),
        cmocka_unit_test(test_file_inline),
        cmocka_unit_test(test_file_send_min_default),
        cmocka_unit_test(test_file_direct),
    };
    return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}
