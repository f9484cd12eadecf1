/* The rbd store (src/bs/bs_rbd.c) against a fake librbd (rbd_fake.c, linked in place of
 * -lrbd -lrados), for what a real cluster cannot be made to do on demand (issue 13): the
 * request mapping (READ/WRITE to readv/writev on the command's buffers, FUA as the write alone
 * (librbd's cache off), SYNCHRONIZE CACHE to a flush, UNMAP to discards of the right bytes, WRITE
 * SAME and COMPARE AND WRITE to their librbd calls) and every error a user meets, as sense: -EROFS
 * DATA PROTECT, -ENOSPC SPACE ALLOCATION FAILED WRITE PROTECT, -ETIMEDOUT (timeout=, the
 * OSD silent) ABORTED COMMAND / TIMEOUT ON LOGICAL UNIT which initiators retry, -EIO MEDIUM
 * ERROR, -EILSEQ MISCOMPARE with the offset, -EBLOCKLISTED the LUN given up with a log line
 * and NOT READY / MANUAL INTERVENTION REQUIRED from then on without asking the cluster (the
 * failure semantics docs/rbd.md documents). Commands run on a reactor as the
 * daemon runs them; librbd's completions come from another thread and must reach the SCSI
 * core only through the reactor that submitted. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bs/bs.h"
#include "reactor/reactor.h"
#include "scsi/scsi.h"
#include "util/bytes.h"

#include "rbd_fake.h"
#include "scsi_fixture.h"

#define BSZ 512u
#define IMAGE_SIZE (1u << 20)
#define EBLOCKLISTED ESHUTDOWN /* librados's name for it (ceph's include/errno.h) */

struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1;
    struct bs *bs;
    struct reactor *r;
    struct scsi_task t;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[256];
    rbd_fake_reset(IMAGE_SIZE);
    f->bs = bs_open_spec("rbd:pool/img,id=gw1,timeout=7", err, sizeof(err));
    if (!f->bs)
        fail_msg("%s", err);
    assert_int_equal(scsi_target_init(&f->tg, "iqn.2024-01.io.linerate:rbd", 1), 0);
    sfx_add_lun(&f->tg, 0, f->bs, BSZ, false);
    f->n1 = sfx_nexus_get(&f->tg, 1);
    uint8_t tur[16] = {0};
    sfx_run(&f->t, &f->tg, f->n1, 0, tur, NULL, 0, 0, SFX_CHECK_DONE); /* power-on UA */
    f->r = reactor_create(1);
    assert_non_null(f->r);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    assert_int_equal(rbd_fake_pending(), 0);
    sfx_target_down(&f->tg, &f->t, f->n1, NULL, NULL); /* closes the store */
    reactor_destroy(f->r);
    assert_int_equal(rbd_fake.completions, 0); /* each one released */
    assert_false(rbd_fake.update_watched);     /* the size watch ended with the LUN */
    rbd_fake_free();
    free(f);
    return 0;
}

/* ---- running a command on the reactor ---------------------------------------------------- */

struct arun {
    struct fx *f;
    const uint8_t *cdb;
    const void *out;
    size_t out_len;
    struct reactor_msg msg;
};

static void arun_start(void *arg)
{
    struct arun *a = arg;
    assert_ptr_equal(reactor_self(), a->f->r);
    sfx_run(&a->f->t, &a->f->tg, a->f->n1, 0, a->cdb, a->out, a->out_len, 64 * 1024, 0);
}

static void poll_all(struct fx *f)
{
    for (int i = 0; i < 100 && reactor_poll(f->r) > 0; i++)
        ;
}

/* Starts the command from the reactor, as a connection does. */
static void start(struct fx *f, struct arun *a, const uint8_t *cdb, const void *out, size_t out_len)
{
    *a = (struct arun){.f = f, .cdb = cdb, .out = out, .out_len = out_len};
    reactor_post(f->r, &a->msg, arun_start, a);
    poll_all(f);
}

/* Completes what librbd was asked, on the fake's finisher thread: nothing of the SCSI core
 * may run there, the command is answered only once the reactor has run. */
static void finish_step(struct fx *f)
{
    int n = rbd_fake_pending();
    assert_true(n > 0);
    int before = sfx_done_calls;
    assert_int_equal(rbd_fake_complete(), n);
    assert_int_equal(sfx_done_calls, before);
    poll_all(f);
}

/* Runs one command to its end, completing each librbd request as it comes. */
static int run(struct fx *f, const uint8_t *cdb, const void *out, size_t out_len)
{
    struct arun a;
    start(f, &a, cdb, out, out_len);
    for (int i = 0; i < 8 && sfx_done_calls == 0; i++)
        finish_step(f);
    assert_int_equal(sfx_done_calls, 1);
    return f->t.status;
}

static const struct rbd_fake_req *req(int i)
{
    assert_true(i < rbd_fake.nlog);
    return &rbd_fake.log[i];
}

/* ---- what the store asks of librbd -------------------------------------------------------- */

static void test_open(void **state)
{
    struct fx *f = *state;
    assert_string_equal(rbd_fake.client_id, "gw1");
    /* timeout= is the OSD timeout: a silent OSD turns into -ETIMEDOUT, not a hang */
    assert_string_equal(rbd_fake.osd_op_timeout, "7");
    /* UNMAP promises zeros: partial discards must zero, not be skipped */
    assert_string_equal(rbd_fake.skip_partial_discard, "false");
    assert_int_equal(f->bs->size, IMAGE_SIZE);
    /* librbd's cache off: write errors reach the initiator, and no volatile cache (WCE=0) */
    assert_string_equal(rbd_fake.rbd_cache, "false");
    assert_string_equal(rbd_fake.pwl_mode, "disabled"); /* nor its persistent write-log cache */
    assert_false(f->bs->write_cache);
    assert_true(f->bs->thin);
    assert_int_equal(f->bs->caw_unit, 512);
    assert_string_equal(f->bs->medium_id, "10f2a5b7c3d9");
    assert_true(rbd_fake.update_watched); /* resizes by others are noticed */
    assert_int_equal(rbd_fake.nlog, 0);
    /* a discard frees whole objects only: the granularity is the object size */
    assert_int_equal(f->bs->unmap_unit, rbd_fake.obj_size);
}

/* Fancy striping (stripe unit below the object size): an object-size range touches
 * stripe_count objects without freeing one; a whole object set frees them all. A stripe
 * count with whole-object stripe units moves whole objects, so the object size stands. */
static void test_unmap_unit_striped(void **state)
{
    (void)state;
    static const struct {
        uint64_t unit, count, want;
    } cases[] = {
        {64 << 10, 8, 32u << 20}, /* 4 MiB objects, 8 per set */
        {4u << 20, 8, 4u << 20},  /* stripe unit = object: whole objects round robin */
        {64 << 10, 1, 4u << 20},  /* one object per set: no striping to speak of */
    };
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[256];
        rbd_fake.stripe_unit = cases[i].unit;
        rbd_fake.stripe_count = cases[i].count;
        struct bs *bs = bs_open_spec("rbd:pool/img2,id=gw1", err, sizeof(err));
        if (!bs)
            fail_msg("%s", err);
        assert_int_equal(bs->unmap_unit, cases[i].want);
        bs_close(bs);
    }
    rbd_fake.stripe_unit = rbd_fake.stripe_count = 0;
}

static void test_read_write(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[8 * BSZ];
    for (unsigned i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 13 + 1);
    sfx_cdb10(c, 0x2a, 0, 16, 8); /* WRITE(10), 8 blocks at LBA 16 */
    assert_int_equal(run(f, c, buf, sizeof(buf)), SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 1); /* no flush: librbd does not cache */
    assert_int_equal(req(0)->op, FAKE_WRITE);
    assert_int_equal(req(0)->off, 16 * BSZ);
    assert_int_equal(req(0)->len, sizeof(buf));
    assert_true(req(0)->has_cb);
    assert_memory_equal(rbd_fake.mem + 16 * BSZ, buf, sizeof(buf));

    memset(rbd_fake.mem + 40 * BSZ, 0x3c, 3 * BSZ);
    sfx_cdb10(c, 0x28, 0, 40, 3); /* READ(10) */
    assert_int_equal(run(f, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(req(1)->op, FAKE_READ);
    assert_int_equal(req(1)->off, 40 * BSZ);
    assert_int_equal(req(1)->len, 3 * BSZ);
    assert_int_equal(f->t.data_len, 3 * BSZ);
    for (int i = 0; i < f->t.iovcnt; i++)
        for (size_t k = 0; k < f->t.iov[i].iov_len && k < 3 * BSZ; k++)
            assert_int_equal(((uint8_t *)f->t.iov[i].iov_base)[k], 0x3c);
}

/* FUA: librbd's cache is off, so the write completes once the cluster has it and nothing is
 * flushed after it (SBC-4 §5.45 FUA); a failed write fails the command. Before, a FUA write was
 * a write then a flush, which librbd's cache answers 0 for a write it lost. */
static void test_fua(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[BSZ];
    memset(buf, 0x77, sizeof(buf));
    sfx_cdb10(c, 0x2a, 0x08, 4, 1); /* WRITE(10) FUA */
    assert_int_equal(run(f, c, buf, sizeof(buf)), SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 1);
    assert_int_equal(req(0)->op, FAKE_WRITE);

    rbd_fake_script(-ETIMEDOUT); /* the write fails: the command fails */
    assert_int_equal(run(f, c, buf, sizeof(buf)), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x0b, 0x3e, 0x02);
    assert_int_equal(rbd_fake.nlog, 2);
}

/* A pool or image that sets rbd_cache itself overrides the client's setting: such an image
 * is refused, and the message says where the setting is. */
static void test_image_cache_refused(void **state)
{
    (void)state;
    char err[512];
    snprintf(rbd_fake.image_rbd_cache, sizeof(rbd_fake.image_rbd_cache), "true");
    struct bs *bs = bs_open_spec("rbd:pool/img2,id=gw1", err, sizeof(err));
    rbd_fake.image_rbd_cache[0] = '\0';
    assert_null(bs);
    assert_non_null(strstr(err, "rbd_cache is true for this image"));
    assert_non_null(strstr(err, "rbd config image remove pool/img2 rbd_cache"));
}

/* The persistent write-log cache (rbd_plugins=pwl_cache) keeps acknowledged writes on the
 * gateway: a pool that loads it is refused too. */
static void test_pool_pwl_refused(void **state)
{
    (void)state;
    char err[512];
    snprintf(rbd_fake.pool_plugins, sizeof(rbd_fake.pool_plugins), "pwl_cache");
    struct bs *bs = bs_open_spec("rbd:pool/img2,id=gw1", err, sizeof(err));
    rbd_fake.pool_plugins[0] = '\0';
    assert_null(bs);
    assert_non_null(strstr(err, "rbd_plugins is pwl_cache for this pool"));
    assert_non_null(strstr(err, "rbd config pool remove pool rbd_plugins"));
}

/* The address to fence comes from a peer's heartbeat object: only an entity address's
 * characters reach the monitors' JSON command; the fake's monitor refuses every command. */
static void test_fence_address(void **state)
{
    struct fx *f = *state;
    char err[256];
    const char *bad[] = {"", "1.2.3.4:0/1\", \"x\": \"", "1.2.3.4:0/1 }", "1.2.3.4\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(f->bs->ops->fence(f->bs, bad[i], err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "bad client address");
    }
    const char *good[] = {"127.0.0.1:0/3141", "v2:[::1]:6800/12,v1:10.0.0.1:6801/12"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(f->bs->ops->fence(f->bs, good[i], err, sizeof(err)), -EOPNOTSUPP);
}

static void test_sync_cache(void **state)
{
    struct fx *f = *state;
    uint8_t c[16];
    sfx_cdb10(c, 0x35, 0, 0, 0); /* SYNCHRONIZE CACHE(10) */
    assert_int_equal(run(f, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 1);
    assert_int_equal(req(0)->op, FAKE_FLUSH);
}

/* UNMAP: one discard per descriptor, in bytes; WRITE SAME with UNMAP a discard too; WRITE
 * SAME one writesame of the block. */
static void test_unmap_write_same(void **state)
{
    struct fx *f = *state;
    memset(rbd_fake.mem, 0xee, IMAGE_SIZE);
    uint8_t c[16] = {0x42}, pl[8 + 2 * 16] = {0};
    put_be16(c + 7, sizeof(pl));
    put_be16(pl, sizeof(pl) - 2);
    put_be16(pl + 2, 2 * 16);
    put_be64(pl + 8, 8); /* LBA 8, 4 blocks */
    put_be32(pl + 16, 4);
    put_be64(pl + 24, 100); /* LBA 100, 2 blocks */
    put_be32(pl + 32, 2);
    assert_int_equal(run(f, c, pl, sizeof(pl)), SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 2);
    bool seen8 = false, seen100 = false;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(req(i)->op, FAKE_DISCARD);
        if (req(i)->off == 8 * BSZ && req(i)->len == 4 * BSZ)
            seen8 = true;
        if (req(i)->off == 100 * BSZ && req(i)->len == 2 * BSZ)
            seen100 = true;
    }
    assert_true(seen8 && seen100);
    assert_int_equal(rbd_fake.mem[8 * BSZ - 1], 0xee);
    assert_int_equal(rbd_fake.mem[12 * BSZ], 0xee);

    uint8_t blk[BSZ];
    memset(blk, 0, sizeof(blk));
    sfx_cdb10(c, 0x41, 0x08, 200, 16); /* WRITE SAME(10) UNMAP */
    assert_int_equal(run(f, c, blk, sizeof(blk)), SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 3);
    assert_int_equal(req(2)->op, FAKE_DISCARD);
    assert_int_equal(req(2)->off, 200 * BSZ);
    assert_int_equal(req(2)->len, 16 * BSZ);

    for (unsigned i = 0; i < BSZ; i++)
        blk[i] = (uint8_t)i;
    sfx_cdb10(c, 0x41, 0, 300, 10); /* WRITE SAME(10) */
    assert_int_equal(run(f, c, blk, sizeof(blk)), SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 4);
    assert_int_equal(req(3)->op, FAKE_WRITESAME);
    assert_int_equal(req(3)->off, 300 * BSZ);
    assert_int_equal(req(3)->len, 10 * BSZ);
    assert_int_equal(req(3)->data_len, BSZ);
    assert_memory_equal(rbd_fake.mem + 309 * BSZ, blk, BSZ);
}

/* ---- errors as sense ---------------------------------------------------------------------- */

static const struct sfx_err_case cases[] = {
    {-EROFS, 0x07, 0x27, 0x00, 0, 0, 0},        /* DATA PROTECT, WRITE PROTECTED */
    {-ENOSPC, 0x07, 0x27, 0x07, 0, 0, 0},       /* SPACE ALLOCATION FAILED WRITE PROTECT */
    {-ETIMEDOUT, 0x0b, 0x3e, 0x02, 0, 0, 0},    /* ABORTED COMMAND, TIMEOUT ON LU: retried */
    {-EIO, 0x03, 0x0c, 0x00, 0x03, 0x11, 0x00}, /* MEDIUM ERROR: WRITE / UNRECOVERED READ */
};

/* Each error on each kind of request, then the same command again GOOD: an error of the
 * cluster fails the command, not the LUN (a timed-out command retried succeeds). */
static void test_errors(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[2 * BSZ];
    memset(buf, 0x5a, sizeof(buf));
    struct {
        uint8_t op, b1;
        uint16_t n;
        size_t out;
    } cmds[] = {
        {0x28, 0, 2, 0},       /* READ(10) */
        {0x2a, 0, 2, 2 * BSZ}, /* WRITE(10) */
        {0x35, 0, 0, 0},       /* SYNCHRONIZE CACHE(10) */
        {0x41, 0, 2, BSZ},     /* WRITE SAME(10) */
        {0x41, 0x08, 2, BSZ},  /* WRITE SAME(10) UNMAP */
        {0x89, 0, 1, 2 * BSZ}, /* COMPARE AND WRITE */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
            if (cmds[k].op == 0x89) {
                memset(c, 0, 16);
                c[0] = 0x89;
                put_be64(c + 2, 6);
                c[13] = 1;
            } else {
                sfx_cdb10(c, cmds[k].op, cmds[k].b1, 6, cmds[k].n);
            }
            const void *out = cmds[k].out ? buf : NULL;
            int before = rbd_fake.nlog;
            rbd_fake_script(cases[i].err);
            assert_int_equal(run(f, c, out, cmds[k].out), SCSI_STATUS_CHECK_CONDITION);
            sfx_assert_err_case(&f->t, &cases[i], cmds[k].op == 0x28);
            assert_int_equal(rbd_fake.nlog, before + 1);
            /* the retry */
            if (cmds[k].op == 0x89)
                memcpy(buf, rbd_fake.mem + 6 * BSZ, BSZ); /* compare equal */
            assert_int_equal(run(f, c, out, cmds[k].out), SCSI_STATUS_GOOD);
        }
    }
}

/* librbd refusing a request outright (its return value, not the completion's): the same
 * answers, and the completion is not leaked (teardown counts them). */
static void test_refused_at_submit(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[BSZ] = {0};
    rbd_fake.submit_err = -EROFS;
    sfx_cdb10(c, 0x2a, 0, 0, 1);
    assert_int_equal(run(f, c, buf, sizeof(buf)), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x07, 0x27, 0x00);
    assert_int_equal(rbd_fake.nlog, 0);
    rbd_fake.submit_err = -EINVAL;
    sfx_cdb10(c, 0x28, 0, 0, 1);
    assert_int_equal(run(f, c, NULL, 0), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x03, 0x11, 0x00);
}

/* COMPARE AND WRITE that differs: MISCOMPARE DURING VERIFY, INFORMATION the offset of the
 * first differing byte within the compare, whether librbd reports it as an image offset (as
 * it means to) or, as 16.2 does, as the object's start plus that offset. */
static void test_miscompare(void **state)
{
    struct fx *f = *state;
    uint8_t c[16] = {0x89}, buf[2 * BSZ];
    memset(buf, 0x11, sizeof(buf));
    put_be64(c + 2, 4);
    c[13] = 1;
    rbd_fake.mismatch_image_off = 4 * BSZ + 37;
    rbd_fake_script(-EILSEQ);
    assert_int_equal(run(f, c, buf, sizeof(buf)), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x0e, 0x1d, 0x00);
    assert_true(f->t.sense[0] & 0x80); /* VALID: INFORMATION holds the offset */
    assert_int_equal(get_be32(f->t.sense + 3), 37);
    assert_int_equal(req(0)->op, FAKE_CAW);
    assert_int_equal(req(0)->off, 4 * BSZ);
    assert_int_equal(req(0)->len, BSZ);

    rbd_fake.mismatch_image_off = 0 + 200; /* object 0 starts at 0 */
    put_be64(c + 2, 1000);                 /* 512000 bytes into it */
    rbd_fake_script(-EILSEQ);
    assert_int_equal(run(f, c, buf, sizeof(buf)), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x0e, 0x1d, 0x00);
    assert_int_equal(get_be32(f->t.sense + 3), 200);
}

/* Blocklisted (the cluster fenced this client): the LUN is given up, said once in the log,
 * and every later command is NOT READY / MANUAL INTERVENTION REQUIRED without a request to
 * the cluster. */
static void test_blocklisted(void **state)
{
    struct fx *f = *state;
    char path[] = "/tmp/test_bs_rbd_log.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);

    uint8_t c[16], buf[BSZ] = {0};
    rbd_fake_script(-EBLOCKLISTED);
    sfx_cdb10(c, 0x2a, 0, 0, 1);
    int st1 = run(f, c, buf, sizeof(buf));
    uint8_t key1 = f->t.sense[2] & 0x0f, asc1 = f->t.sense[12], ascq1 = f->t.sense[13];
    sfx_cdb10(c, 0x28, 0, 0, 1); /* later commands: answered at once, the cluster not asked */
    int st2 = run(f, c, NULL, 0);
    uint8_t key2 = f->t.sense[2] & 0x0f, asc2 = f->t.sense[12], ascq2 = f->t.sense[13];
    sfx_cdb10(c, 0x35, 0, 0, 0);
    int st3 = run(f, c, NULL, 0);
    int nlog = rbd_fake.nlog;

    dup2(saved, STDERR_FILENO);
    close(saved);
    char text[4096] = {0};
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    assert_true(n > 0);

    assert_int_equal(st1, SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(key1, 0x02);
    assert_int_equal(asc1, 0x04);
    assert_int_equal(ascq1, 0x03);
    assert_int_equal(st2, SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(key2, 0x02);
    assert_int_equal(asc2, 0x04);
    assert_int_equal(ascq2, 0x03);
    assert_int_equal(st3, SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x02, 0x04, 0x03);
    assert_int_equal(nlog, 1);
    const char *line = strstr(text, "blocklisted");
    assert_non_null(line);
    assert_non_null(strstr(text, "rbd:pool/img"));
    assert_null(strstr(line + 1, "blocklisted")); /* said once */
}

/* ---- the store alone: which thread completes ------------------------------------------- */

struct sio {
    struct bs *bs;
    struct bs_io io;
    struct iovec iov[2];
    uint8_t a[4096], b[4096];
    struct reactor_msg msg;
    int calls, err;
    struct reactor *done_on;
    pthread_t done_thread;
};

static void sio_done(struct bs_io *io, int err)
{
    struct sio *s = io->arg;
    s->calls++;
    s->err = err;
    s->done_on = reactor_self();
    s->done_thread = pthread_self();
}

static void sio_submit(void *arg)
{
    struct sio *s = arg;
    bs_submit(s->bs, &s->io);
}

/* librbd calls back on its own thread; done() runs on the reactor that submitted, on its
 * thread, only when that reactor runs. The caller's vector, longer than the request, is
 * trimmed for librbd (which transfers the sum of the entries) and given back whole. */
static void test_completion_on_reactor(void **state)
{
    struct fx *f = *state;
    struct sio *s = calloc(1, sizeof(*s));
    memset(rbd_fake.mem + 8192, 0x42, 6144);
    s->iov[0] = (struct iovec){s->a, sizeof(s->a)};
    s->iov[1] = (struct iovec){s->b, sizeof(s->b)};
    s->io = (struct bs_io){.op = BS_READ,
                           .offset = 8192,
                           .length = 6144,
                           .iov = s->iov,
                           .iovcnt = 2,
                           .done = sio_done,
                           .arg = s};
    s->bs = f->bs;
    reactor_post(f->r, &s->msg, sio_submit, s);
    poll_all(f);
    assert_int_equal(s->calls, 0);
    assert_int_equal(rbd_fake.nlog, 1);
    assert_int_equal(req(0)->op, FAKE_READ);
    assert_int_equal(req(0)->off, 8192);
    assert_int_equal(req(0)->len, 6144); /* not 8192: the vector was trimmed */
    assert_int_equal(req(0)->iovcnt, 2);
    assert_int_equal(rbd_fake_complete(), 1);
    assert_int_equal(s->calls, 0); /* not on librbd's thread */
    poll_all(f);
    assert_int_equal(s->calls, 1);
    assert_int_equal(s->err, 0);
    assert_ptr_equal(s->done_on, f->r);
    assert_true(pthread_equal(s->done_thread, pthread_self()));
    assert_int_equal(s->iov[1].iov_len, sizeof(s->b)); /* restored */
    assert_int_equal(s->a[0], 0x42);
    assert_int_equal(s->b[2047], 0x42);
    assert_int_equal(s->b[2048], 0);
    free(s);
}

/* Without a reactor (the shutdown flush, a unit test) the store waits for each completion
 * itself: the command is answered before exec returns, with the same sense. */
static void test_without_reactor(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[BSZ];
    memset(buf, 0x66, sizeof(buf));
    sfx_cdb10(c, 0x2a, 0x08, 3, 1); /* WRITE FUA: the write waited for */
    assert_int_equal(sfx_run(&f->t, &f->tg, f->n1, 0, c, buf, sizeof(buf), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);
    assert_int_equal(rbd_fake.nlog, 1);
    assert_false(req(0)->has_cb);
    assert_int_equal(req(0)->op, FAKE_WRITE);
    assert_memory_equal(rbd_fake.mem + 3 * BSZ, buf, BSZ);
    rbd_fake_script(-ENOSPC);
    sfx_cdb10(c, 0x2a, 0, 3, 1);
    assert_int_equal(sfx_run(&f->t, &f->tg, f->n1, 0, c, buf, sizeof(buf), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x07, 0x27, 0x07);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmap_unit_striped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fua, setup, teardown),
        cmocka_unit_test_setup_teardown(test_image_cache_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_pwl_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fence_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmap_write_same, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_at_submit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_miscompare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blocklisted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completion_on_reactor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_reactor, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
