/* EXTENDED COPY (LID1) and RECEIVE COPY RESULTS driven through the SCSI core without sockets:
 * copies within a LUN and across LUNs (RAM stores by memmove, stores without map() in chunks
 * through submit, completions inline or deferred), every refusal's sense, and what RECEIVE COPY
 * RESULTS reports. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h" /* the LU's NAA: the designator an initiator reads from VPD 0x83 */
#include "util/bytes.h"

#include "scsi_fixture.h"
#include "iscsi/scsi_port.h"

/* --- a store without map(): completions inline, or queued until the test pumps them --- */
struct mstore {
    uint8_t *mem;
    bool defer;     /* queue completions instead of calling them in submit */
    int fail_after; /* > 0: the fail_after-th READ/WRITE fails with fail_err */
    int fail_err;
    int ios, writes, fua_writes;
    uint64_t max_len; /* largest single request seen */
    struct bs_io *queue[64];
    int nqueue;
};

static void m_complete(struct mstore *m, struct bs_io *io)
{
    int err = 0;
    if ((io->op == BS_READ || io->op == BS_WRITE) && m->fail_after > 0 && ++m->ios == m->fail_after)
        err = m->fail_err;
    if (!err && (io->op == BS_READ || io->op == BS_WRITE)) {
        assert_int_equal(io->iovcnt, 1);
        assert_true(io->iov[0].iov_len >= io->length);
        if (io->op == BS_READ)
            memcpy(io->iov[0].iov_base, m->mem + io->offset, io->length);
        else
            memcpy(m->mem + io->offset, io->iov[0].iov_base, io->length);
    }
    io->done(io, err);
}

static void m_submit(struct bs *bs, struct bs_io *io)
{
    struct mstore *m = bs->priv;
    assert_true(io->offset + io->length <= bs->size);
    if (io->length > m->max_len)
        m->max_len = io->length;
    if (io->op == BS_WRITE) {
        m->writes++;
        m->fua_writes += io->fua;
    }
    if (m->defer) {
        assert_true(m->nqueue < 64);
        m->queue[m->nqueue++] = io;
        return;
    }
    m_complete(m, io);
}

/* Completes the oldest queued request (which may queue the next). */
static void m_pump1(struct mstore *m)
{
    assert_true(m->nqueue > 0);
    struct bs_io *io = m->queue[0];
    memmove(m->queue, m->queue + 1, (size_t)--m->nqueue * sizeof(m->queue[0]));
    m_complete(m, io);
}

/* Completes queued requests until none is left; returns how many. */
static int m_pump(struct mstore *m)
{
    int n = 0;
    for (; m->nqueue; n++)
        m_pump1(m);
    return n;
}

static void m_close(struct bs *bs)
{
    struct mstore *m = bs->priv;
    free(m->mem);
    free(m);
}

static const struct bs_ops mstore_ops = {.name = "test", .submit = m_submit, .close = m_close};

static struct bs *mstore_open(uint64_t size, struct mstore **out)
{
    struct bs *bs = calloc(1, sizeof(*bs));
    struct mstore *m = calloc(1, sizeof(*m));
    m->mem = calloc(1, size);
    bs->ops = &mstore_ops;
    bs->size = size;
    bs->write_cache = true;
    bs->priv = m;
    *out = m;
    return bs;
}

/* --- fixture: LUN 0 ram 64M/512, LUN 1 and LUN 4 test stores 4M/512 (no map), LUN 2 ram 1M
 * read-only, LUN 3 ram 16M/4096; two nexuses with their power-on UAs cleared --- */
struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1, *n2;
    struct mstore *m1, *m4;
    struct scsi_task t, t2;
    struct scsi_task *cur; /* the task the helpers below use: t, or t2 beside a running t */
};

/* done() calls of the last command started, and of each task (transport_priv) */
static int done_calls;
static void on_done(struct scsi_task *t)
{
    done_calls++;
    (*(int *)t->transport_priv)++;
}

/* Sets up and starts one command with out_len bytes of data-out; returns once exec returned
 * (the task may still be running on deferred completions). */
static void start(struct fx *f, struct scsi_nexus *n, uint64_t lun, const uint8_t *cdb,
                  const void *out, size_t out_len, int *task_done)
{
    struct scsi_task *t = f->cur;
    scsi_task_release(t);
    scsi_task_init(t);
    *task_done = 0;
    t->transport_priv = task_done;
    memcpy(t->cdb, cdb, SCSI_CDB_MAX);
    t->lun = lun;
    t->target = &f->tg;
    t->nexus = n;
    t->done = on_done;
    t->edtl = (uint32_t)out_len;
    t->edtl_write = out != NULL;
    t->edtl_read = out == NULL;
    done_calls = 0;
    if (scsi_task_setup(t) == 0) {
        if (t->dir == SCSI_DIR_WRITE && out) {
            assert_int_equal(t->iovcnt, 1);
            memcpy(t->iov[0].iov_base, out, t->xfer_len);
        }
        scsi_task_exec(t);
    } else {
        scsi_task_exec(t); /* calls done with the refusal */
    }
}

static int run(struct fx *f, struct scsi_nexus *n, uint64_t lun, const uint8_t *cdb,
               const void *out, size_t out_len)
{
    int task_done;
    start(f, n, lun, cdb, out, out_len, &task_done);
    assert_int_equal(task_done, 1);
    return f->cur->status;
}

static void assert_sense(const struct scsi_task *t, uint8_t key, uint8_t asc, uint8_t ascq)
{
    sfx_assert_sense(t, SFX_SENSE_LEN, key, asc, ascq);
}

/* ILLEGAL REQUEST with a field pointer into the parameter list (C/D=0) */
static void assert_param_field(const struct scsi_task *t, uint8_t asc, uint8_t ascq, unsigned byte)
{
    assert_sense(t, 0x5, asc, ascq);
    sfx_assert_field_pointer(t, 0x80, byte); /* SKSV, C/D=0 */
}

static const uint8_t TUR[16] = {0x00};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[128];
    f->cur = &f->t;
    assert_int_equal(scsi_target_init(&f->tg, "iqn.2024-01.io.linerate:xcopy", 1), 0);
    sfx_add_lun(&f->tg, 0, bs_open_spec("ram:64M", err, sizeof(err)), 512, false);
    sfx_add_lun(&f->tg, 1, mstore_open(4 << 20, &f->m1), 512, false);
    sfx_add_lun(&f->tg, 2, bs_open_spec("ram:1M", err, sizeof(err)), 512, true);
    sfx_add_lun(&f->tg, 3, bs_open_spec("ram:16M", err, sizeof(err)), 4096, false);
    sfx_add_lun(&f->tg, 4, mstore_open(4 << 20, &f->m4), 512, false);
    f->n1 = sfx_nexus_get(&f->tg, 1);
    f->n2 = sfx_nexus_get(&f->tg, 2);
    for (uint64_t lun = 0; lun < 5; lun++) {
        run(f, f->n1, lun, TUR, NULL, 0);
        run(f, f->n2, lun, TUR, NULL, 0);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    scsi_task_release(&f->t2);
    sfx_target_down(&f->tg, &f->t, f->n1, f->n2, NULL);
    free(f);
    return 0;
}

/* --- building parameter lists as an initiator does (libiscsi's iscsi-support.c helpers) --- */

struct plist {
    uint8_t b[4096];
    unsigned ncscd_bytes, nseg_bytes;
};

static void plist_init(struct plist *l)
{
    memset(l, 0, sizeof(*l));
}

/* An identification CSCD descriptor (E4h) with the NAA designator VPD 0x83 gives lun. */
static void add_cscd(struct plist *l, struct fx *f, uint64_t lun)
{
    uint8_t *d = l->b + 16 + l->ncscd_bytes;
    const struct scsi_lun *lu = f->tg.luns[lun];
    d[0] = 0xe4;
    d[4] = 0x01;              /* binary */
    d[5] = 0x03;              /* association LU, NAA */
    d[7] = lu->ident.naa_len; /* 8, or 16 for NAA 6h */
    memcpy(d + 8, lu->ident.naa, lu->ident.naa_len);
    put_be24(d + 29, lu->block_size);
    l->ncscd_bytes += 32;
}

static uint8_t *add_b2b(struct plist *l, uint16_t src, uint16_t dst, uint16_t nblk,
                        uint64_t src_lba, uint64_t dst_lba)
{
    uint8_t *d = l->b + 16 + l->ncscd_bytes + l->nseg_bytes;
    d[0] = 0x02;
    put_be16(d + 2, 0x18);
    put_be16(d + 4, src);
    put_be16(d + 6, dst);
    put_be16(d + 10, nblk);
    put_be64(d + 12, src_lba);
    put_be64(d + 20, dst_lba);
    l->nseg_bytes += 28;
    return d;
}

/* Writes the header (segments must follow all CSCD descriptors) and returns the list length. */
static uint32_t list_finish(struct plist *l, uint8_t list_id, unsigned usage)
{
    l->b[0] = list_id;
    l->b[1] = (uint8_t)(usage << 3);
    put_be16(l->b + 2, (uint16_t)l->ncscd_bytes);
    put_be32(l->b + 8, l->nseg_bytes);
    return 16 + l->ncscd_bytes + l->nseg_bytes;
}

static int task_done_main, task_done_side;

static void xcopy_start(struct fx *f, struct scsi_nexus *n, uint64_t lun, const struct plist *l,
                        uint32_t len)
{
    uint8_t cdb[16] = {0x83};
    put_be32(cdb + 10, len);
    start(f, n, lun, cdb, len ? l->b : NULL, len,
          f->cur == &f->t ? &task_done_main : &task_done_side);
}

static int xcopy(struct fx *f, uint64_t lun, const struct plist *l, uint32_t len)
{
    xcopy_start(f, f->n1, lun, l, len);
    assert_int_equal(done_calls, 1);
    return f->cur->status;
}

static int rcr(struct fx *f, struct scsi_nexus *n, uint64_t lun, uint8_t sa, uint8_t list_id,
               uint32_t alloc)
{
    uint8_t cdb[16] = {0x84, sa, list_id};
    put_be32(cdb + 10, alloc);
    return run(f, n, lun, cdb, NULL, 0);
}

static const uint8_t *data(struct fx *f)
{
    return f->cur->iov[0].iov_base;
}

/* A RAM LUN's memory to look at, and to set up data in (counted as written, as a WRITE would). */
static uint8_t *ram(struct fx *f, uint64_t lun, uint64_t off)
{
    return bs_map_read(f->tg.luns[lun]->bs, off, 1);
}

static uint8_t *ram_w(struct fx *f, uint64_t lun, uint64_t off, uint64_t len)
{
    return bs_map_write(f->tg.luns[lun]->bs, off, len);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 7 + i / 509);
}

/* --- copies --- */

static void test_copy_within_ram_lun(void **state)
{
    struct fx *f = *state;
    uint8_t *want = malloc(1 << 20);
    fill(ram_w(f, 0, 0, 1 << 20), 1 << 20, 1);
    memcpy(want, ram(f, 0, 0), 1 << 20);

    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 2048, 0, 131072 - 2048); /* libiscsi's Simple: start to end of LUN */
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 2)), SCSI_STATUS_GOOD);
    assert_memory_equal(ram(f, 0, (131072 - 2048) * 512ull), want, 1 << 20);

    /* overlapping ranges move as memmove does, both directions */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 1000, 0, 500);
    add_b2b(&l, 0, 0, 100, 600, 550);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 2, 3)), SCSI_STATUS_GOOD);
    uint8_t *exp = malloc(1 << 20);
    memcpy(exp, want, 1 << 20);
    memmove(exp + 500 * 512, exp, 1000 * 512);
    memmove(exp + 550 * 512, exp + 600 * 512, 100 * 512);
    assert_memory_equal(ram(f, 0, 0), exp, 1 << 20);

    /* CSCD index FFFFh is the LUN that received the command; zero blocks is no error */
    plist_init(&l);
    add_b2b(&l, 0xffff, 0xffff, 8, 0, 2000);
    add_b2b(&l, 0xffff, 0xffff, 0, 0, 2100);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 3, 3)), SCSI_STATUS_GOOD);
    assert_memory_equal(ram(f, 0, 2000 * 512), exp, 8 * 512);
    free(exp);
    free(want);
}

/* RAM-to-RAM copies move a chunk (1 MiB) at a time: overlapping segments of several chunks
 * still end as one memmove would leave them, in both directions. */
static void test_copy_within_ram_lun_chunks(void **state)
{
    struct fx *f = *state;
    size_t len = 16u << 20;
    uint8_t *exp = malloc(len);
    fill(ram_w(f, 0, 0, len), len, 7);
    memcpy(exp, ram(f, 0, 0), len);
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 9000, 100, 1100);    /* 4.4 MiB up by 0.5 MiB: backward */
    add_b2b(&l, 0, 0, 7000, 20000, 19000); /* 3.4 MiB down by 0.5 MiB: forward */
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 4, 3)), SCSI_STATUS_GOOD);
    memmove(exp + 1100 * 512, exp + 100 * 512, 9000 * 512);
    memmove(exp + 19000 * 512, exp + 20000 * 512, 7000 * 512);
    assert_memory_equal(ram(f, 0, 0), exp, len);
    free(exp);
}

static void test_copy_across_luns(void **state)
{
    struct fx *f = *state;
    /* ram LUN 0 -> test store LUN 1: written from the source's memory in 1 MiB chunks */
    fill(ram_w(f, 0, 0, 3 << 20), 3 << 20, 2);
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1);
    add_b2b(&l, 0, 1, 6144, 0, 100);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    assert_memory_equal(f->m1->mem + 100 * 512, ram(f, 0, 0), 3 << 20);
    assert_int_equal(f->m1->writes, 3);
    assert_int_equal(f->m1->max_len, 1 << 20);
    assert_int_equal(f->m1->fua_writes, 0); /* WCE=1 on a store with a cache */

    /* test store LUN 1 -> test store LUN 4 through the bounce buffer, sent to LUN 4 */
    plist_init(&l);
    add_cscd(&l, f, 1);
    add_cscd(&l, f, 4);
    add_b2b(&l, 0, 1, 5000, 100, 7);
    assert_int_equal(xcopy(f, 4, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    assert_memory_equal(f->m4->mem + 7 * 512, f->m1->mem + 100 * 512, 5000 * 512);

    /* test store LUN 4 -> ram LUN 0: read straight into the LUN's memory */
    plist_init(&l);
    add_cscd(&l, f, 4);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 1, 3000, 7, 40000);
    assert_int_equal(xcopy(f, 1, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    assert_memory_equal(ram(f, 0, 40000 * 512), f->m4->mem + 7 * 512, 3000 * 512);

    /* 512-byte LUN 0 -> 4096-byte LUN 3: 16 source blocks are 2 destination blocks; with
     * DC=1 NUMBER OF BLOCKS counts destination blocks */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 3);
    add_b2b(&l, 0, 1, 16, 40000, 5);
    uint8_t *d = add_b2b(&l, 0, 1, 2, 40016, 9);
    d[1] = 0x02;
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 3)), SCSI_STATUS_GOOD);
    assert_memory_equal(ram(f, 3, 5 * 4096), ram(f, 0, 40000 * 512), 8192);
    assert_memory_equal(ram(f, 3, 9 * 4096), ram(f, 0, 40016 * 512), 8192);

    /* WCE=0 (caching page): every write of the copy is write-through */
    atomic_store(&f->tg.luns[1]->wce, false);
    f->m1->fua_writes = f->m1->writes = 0;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1);
    add_b2b(&l, 0, 1, 8, 0, 0);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 3)), SCSI_STATUS_GOOD);
    assert_int_equal(f->m1->fua_writes, 1);
}

/* A LUN whose identity an admin set to a 16-byte NAA 6h designator (SPC-4 §7.8.6.6) is named
 * by it in a CSCD descriptor, as by an 8-byte one. */
static void test_copy_to_naa6_lun(void **state)
{
    struct fx *f = *state;
    char err[128];
    struct scsi_lun_config c = {.lun = 5, .bs = bs_open_spec("ram:1M", err, sizeof(err))};
    static const uint8_t naa6[16] = {0x60, 0x01, 0x40, 0x51, 0x23, 0x45, 0x67, 0x89,
                                     0x01, 0x23, 0x45, 0x67, 0x89, 0x0a, 0xbc, 0xde};
    memcpy(c.identity.naa, naa6, 16);
    c.identity.naa_len = 16;
    assert_int_equal(scsi_target_add_lun(&f->tg, &c, err, sizeof(err)), 0);
    run(f, f->n1, 5, TUR, NULL, 0); /* its power-on UA */
    fill(ram_w(f, 0, 0, 64 << 10), 64 << 10, 5);
    struct plist l;
    plist_init(&l); /* from the LUN the command is sent to (FFFFh) to the one named by NAA 6h */
    add_cscd(&l, f, 5);
    add_b2b(&l, 0xffff, 0, 128, 0, 16);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    assert_memory_equal(ram(f, 5, 16 * 512), ram(f, 0, 0), 64 << 10);
}

/* A copy between RAM LUNs keeps them thin: a chunk of the source never written deallocates
 * the destination's chunk (which then reads as zeros) instead of filling it with zeros; a
 * written chunk maps it. */
static void test_copy_keeps_ram_thin(void **state)
{
    struct fx *f = *state;
    struct bs *bs = f->tg.luns[0]->bs;
    const uint64_t mib = 1 << 20, dst = 32 * mib;
    fill(ram_w(f, 0, 0, mib), mib, 3);
    memset(ram_w(f, 0, dst, 2 * mib), 0xee, 2 * mib); /* old data where the copy goes */
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 4096, 0, dst / 512); /* 1 MiB written, then 1 MiB never written */
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    assert_memory_equal(ram(f, 0, dst), ram(f, 0, 0), mib);
    bool mapped = false;
    uint64_t run = 2 * mib;
    assert_int_equal(bs_lba_status(bs, dst, &run, &mapped), 0);
    assert_true(mapped);
    assert_int_equal(run, mib);
    run = mib;
    assert_int_equal(bs_lba_status(bs, dst + mib, &run, &mapped), 0);
    assert_false(mapped);
    assert_int_equal(run, mib);
    const uint8_t *old = ram(f, 0, dst + mib);
    for (uint64_t i = 0; i < mib; i++)
        if (old[i])
            fail_msg("byte %llu of the deallocated chunk is %#x", (unsigned long long)i, old[i]);
}

/* An overlapping copy inside a store without map() goes backward when the destination is
 * above the source, chunk by chunk, and ends as memmove would. */
static void test_copy_within_unmapped_lun(void **state)
{
    struct fx *f = *state;
    uint8_t *exp = malloc(4 << 20);
    fill(f->m1->mem, 4 << 20, 3);
    memcpy(exp, f->m1->mem, 4 << 20);
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 1);
    add_b2b(&l, 0, 0, 5000, 10, 1000);  /* up, overlapping: backward */
    add_b2b(&l, 0, 0, 4000, 3000, 100); /* down, overlapping: forward */
    assert_int_equal(xcopy(f, 1, &l, list_finish(&l, 1, 3)), SCSI_STATUS_GOOD);
    memmove(exp + 1000 * 512, exp + 10 * 512, 5000 * 512);
    memmove(exp + 100 * 512, exp + 3000 * 512, 4000 * 512);
    assert_memory_equal(f->m1->mem, exp, 4 << 20);
    free(exp);
}

/* A COMPARE AND WRITE of a range an EXTENDED COPY is writing waits for that segment to be
 * copied: it compares against the copied data, not a half-copied range. */
static void test_copy_ordered_with_compare_and_write(void **state)
{
    struct fx *f = *state;
    fill(ram_w(f, 0, 0, 1 << 20), 1 << 20, 9);
    memset(f->m4->mem, 'A', 4 << 20);
    f->m4->defer = true;
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 4);
    add_b2b(&l, 0, 1, 2048, 0, 0); /* 1 MiB from RAM into the deferred store: one write */
    int caw_done = 0;
    xcopy_start(f, f->n1, 4, &l, list_finish(&l, 5, 0));
    assert_int_equal(f->m4->nqueue, 1);

    uint8_t cdb[16] = {0x89}, buf[1024];
    put_be64(cdb + 2, 0);
    cdb[13] = 1;
    memcpy(buf, ram(f, 0, 0), 512); /* what the copy will have put there */
    memset(buf + 512, 'C', 512);
    f->cur = &f->t2;
    start(f, f->n1, 4, cdb, buf, sizeof(buf), &caw_done);
    assert_int_equal(caw_done, 0);
    assert_int_equal(f->m4->nqueue, 1); /* the CAW waits for the copy's segment: no I/O yet */
    m_pump1(f->m4);                     /* the copy's write completes; the CAW starts */
    assert_int_equal(task_done_main, 1);
    assert_int_equal(f->t.status, SCSI_STATUS_GOOD);
    m_pump(f->m4); /* the CAW's read and write */
    assert_int_equal(caw_done, 1);
    assert_int_equal(f->t2.status, SCSI_STATUS_GOOD); /* compared equal to the copied block */
    uint8_t want[512];
    memset(want, 'C', 512);
    assert_memory_equal(f->m4->mem, want, 512);
    assert_memory_equal(f->m4->mem + 512, ram(f, 0, 512), (1 << 20) - 512);
    f->cur = &f->t;
}

/* Starts n1's copy, sent to lun, of two segments from src_lun to dst_lun: 2048 blocks at LBA 0
 * to LBA 0, then n2 blocks at LBA 2048 to LBA 2048; LIST IDENTIFIER list_id, held. */
static void start_two_segments(struct fx *f, uint64_t lun, uint64_t src_lun, uint64_t dst_lun,
                               uint16_t n2, uint8_t list_id)
{
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, src_lun);
    add_cscd(&l, f, dst_lun);
    add_b2b(&l, 0, 1, 2048, 0, 0);
    add_b2b(&l, 0, 1, n2, 2048, 2048);
    xcopy_start(f, f->n1, lun, &l, list_finish(&l, list_id, 0));
}

/* Completions that arrive later drive the copy on; RECEIVE COPY RESULTS sees it running. */
static void test_copy_deferred_and_status(void **state)
{
    struct fx *f = *state;
    fill(f->m1->mem, 4 << 20, 4);
    f->m1->defer = f->m4->defer = true;
    start_two_segments(f, 1, 1, 4, 4096, 7);
    assert_int_equal(done_calls, 0);
    assert_int_equal(f->m1->nqueue, 1); /* one READ into the bounce buffer */
    m_pump(f->m1);
    assert_int_equal(f->m4->nqueue, 1); /* then its WRITE */
    m_pump(f->m4);
    assert_int_equal(done_calls, 0);
    /* the rest: 3 chunks of 1 MiB in all, READ then WRITE each */
    int guard = 0;
    while (done_calls == 0 && guard++ < 100) {
        m_pump(f->m1);
        m_pump(f->m4);
    }
    assert_int_equal(done_calls, 1);
    assert_int_equal(f->t.status, SCSI_STATUS_GOOD);
    assert_memory_equal(f->m4->mem, f->m1->mem, 6144 * 512);
    f->m1->defer = f->m4->defer = false;
}

/* --- refusals --- */

static void test_refusals_lengths(void **state)
{
    struct fx *f = *state;
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 8, 0, 8);
    uint32_t len = list_finish(&l, 1, 0);

    assert_int_equal(xcopy(f, 0, &l, 0), SCSI_STATUS_GOOD); /* no list: nothing to do */
    xcopy(f, 0, &l, 8);                                     /* shorter than the header */
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    xcopy(f, 0, &l, 16 + 31); /* cuts the CSCD descriptor (libiscsi ParamHdr) */
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    xcopy(f, 0, &l, len - 1); /* cuts the segment descriptor */
    assert_sense(&f->t, 0x5, 0x1a, 0x00);

    /* longer than 16 + MAXIMUM DESCRIPTOR LIST LENGTH: refused before the data moves */
    uint8_t cdb[16] = {0x83};
    put_be32(cdb + 10, 16 + 1024 + 1);
    int task_done;
    start(f, f->n1, 0, cdb, l.b, sizeof(l.b), &task_done);
    assert_int_equal(task_done, 1);
    assert_int_equal(f->t.xfer_len, 0);
    assert_sense(&f->t, 0x5, 0x1a, 0x00);

    /* descriptor lists over MAXIMUM DESCRIPTOR LIST LENGTH (libiscsi DescrLimits sends too
     * many of both, which is refused by the CDB's length already) */
    plist_init(&l);
    for (int i = 0; i < 17; i++)
        add_cscd(&l, f, 0);
    for (int i = 0; i < 33; i++)
        add_b2b(&l, 0, 0, 1, 0, 1);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 8, 0, 8);
    len = list_finish(&l, 1, 0);
    put_be32(l.b + 8, 1000); /* the header claims more than the maximum */
    xcopy(f, 0, &l, len);
    assert_sense(&f->t, 0x5, 0x1a, 0x00);

    /* inline data is not taken */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 8, 0, 8);
    len = list_finish(&l, 1, 0);
    put_be32(l.b + 12, 4);
    xcopy(f, 0, &l, len + 4);
    assert_param_field(&f->t, 0x26, 0x0b, 12);
}

static void test_refusals_descriptors(void **state)
{
    struct fx *f = *state;
    struct plist l;

    /* 17 CSCD descriptors (one over the maximum), one segment */
    plist_init(&l);
    for (int i = 0; i < 17; i++)
        add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 8, 0, 8);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x06, 16 + 16 * 32);

    /* 33 segment descriptors */
    plist_init(&l);
    add_cscd(&l, f, 0);
    for (int i = 0; i < 33; i++)
        add_b2b(&l, 0, 0, 1, 0, 1);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x08, 48);

    /* Fibre Channel N_Port_Name CSCD descriptor (E0h) */
    plist_init(&l);
    add_cscd(&l, f, 0);
    l.b[16] = 0xe0;
    add_b2b(&l, 0, 0, 8, 0, 8);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x07, 16);

    /* a tape (peripheral device type 01h) is not a copy target here */
    plist_init(&l);
    add_cscd(&l, f, 0);
    l.b[17] = 0x01;
    add_b2b(&l, 0, 0, 8, 0, 8);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x07, 17);

    /* the obsolete LU ID TYPE and NUL bits are ignored (SPC-4; libiscsi ValidTgtDescr) */
    plist_init(&l);
    add_cscd(&l, f, 0);
    l.b[17] = 0xe0;
    add_b2b(&l, 0, 0, 8, 0, 8);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);

    /* stream-to-stream segment descriptor (03h, 20 bytes) */
    plist_init(&l);
    add_cscd(&l, f, 0);
    uint8_t *d = add_b2b(&l, 0, 0, 8, 0, 8);
    d[0] = 0x03;
    put_be16(d + 2, 16);
    l.nseg_bytes = 20;
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x09, 48);

    /* a block-to-block descriptor of the wrong length */
    plist_init(&l);
    add_cscd(&l, f, 0);
    d = add_b2b(&l, 0, 0, 8, 0, 8);
    put_be16(d + 2, 0x14);
    l.nseg_bytes = 24;
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x00, 48 + 2);

    /* DISK BLOCK LENGTH that is not the LUN's */
    plist_init(&l);
    add_cscd(&l, f, 0);
    put_be24(l.b + 16 + 29, 4096);
    add_b2b(&l, 0, 0, 8, 0, 8);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x00, 16 + 29);

    /* header: LIST ID USAGE 01b is reserved, so are bytes 4-7 */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 8, 0, 8);
    uint32_t len = list_finish(&l, 1, 1);
    xcopy(f, 0, &l, len);
    assert_param_field(&f->t, 0x26, 0x00, 1);
    list_finish(&l, 1, 0);
    l.b[5] = 1;
    xcopy(f, 0, &l, len);
    assert_param_field(&f->t, 0x26, 0x00, 5);

    /* half a 4096-byte block: the copy would leave a residue */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 3);
    add_b2b(&l, 0, 1, 1, 0, 0);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_param_field(&f->t, 0x26, 0x00, 80 + 10);
}

/* Copy targets that cannot be reached: COPY ABORTED, COPY TARGET DEVICE NOT REACHABLE. Nothing
 * of a refused list is copied, even segments before the bad one. */
static void test_refusals_copy_aborted(void **state)
{
    struct fx *f = *state;
    struct plist l;
    memset(ram_w(f, 0, 0, 4096), 0x11, 4096);
    memset(ram_w(f, 0, 4096, 4096), 0x22, 4096);

    /* destination index past the CSCD list (libiscsi ValidSegDescr) */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 8, 0, 8);
    add_b2b(&l, 0, 1, 8, 0, 8);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_sense(&f->t, 0xa, 0x0d, 0x02);
    assert_int_equal(ram(f, 0, 4096)[0], 0x22);

    /* past the end of the destination */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 2048, 0, 131072 - 1);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_sense(&f->t, 0xa, 0x0d, 0x02);
    /* past the end of the source, LBA overflow */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 2, UINT64_MAX, 0);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_sense(&f->t, 0xa, 0x0d, 0x02);

    /* a designator no LUN of this target has */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1);
    l.b[16 + 32 + 15] ^= 0xff;
    add_b2b(&l, 0, 1, 8, 0, 8);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_sense(&f->t, 0xa, 0x0d, 0x02);
    /* ... which is no error while no segment uses it */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1);
    l.b[16 + 32 + 15] ^= 0xff;
    add_b2b(&l, 0, 0, 8, 0, 8);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    assert_int_equal(ram(f, 0, 4096)[0], 0x11);

    /* a read-only destination */
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 2);
    add_b2b(&l, 0, 1, 8, 0, 0);
    xcopy(f, 0, &l, list_finish(&l, 1, 0));
    assert_sense(&f->t, 0x7, 0x27, 0x00);
    /* ... which may still be the source, and receive the command */
    plist_init(&l);
    add_cscd(&l, f, 2);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 1, 8, 0, 0);
    assert_int_equal(xcopy(f, 2, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);

    /* EXTENDED COPY (LID4) is not offered: unknown service action */
    uint8_t cdb[16] = {0x83, 0x01};
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
}

/* A store error mid-copy: COPY ABORTED, THIRD PARTY DEVICE FAILURE; the held result says
 * "completed with errors" and FAILED SEGMENT DETAILS returns the sense. */
static void test_copy_io_error(void **state)
{
    struct fx *f = *state;
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1);
    add_b2b(&l, 0, 1, 2048, 0, 0);
    add_b2b(&l, 0, 1, 4096, 0, 2048); /* its second chunk fails */
    f->m1->fail_after = 3;
    f->m1->fail_err = -EIO;
    xcopy(f, 0, &l, list_finish(&l, 9, 0));
    assert_sense(&f->t, 0xa, 0x0d, 0x01);

    assert_int_equal(rcr(f, f->n1, 0, 0x04, 9, 1024), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(get_be32(d), 56 + 18);
    assert_int_equal(d[56], SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(get_be16(d + 58), 18);
    assert_int_equal(d[60 + 2] & 0x0f, 0xa);
    assert_int_equal(d[60 + 12], 0x0d);
    assert_int_equal(f->t.data_len, 60 + 18);
    /* reported whole: gone */
    rcr(f, f->n1, 0, 0x04, 9, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);

    /* the same with COPY STATUS: status 2, one segment done, 1.5 MiB moved */
    f->m1->ios = 0;
    f->m1->fail_after = 3;
    xcopy(f, 0, &l, list_finish(&l, 9, 2));
    assert_sense(&f->t, 0xa, 0x0d, 0x01);
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 9, 64), SCSI_STATUS_GOOD);
    d = data(f);
    assert_int_equal(d[4], 2);
    assert_int_equal(get_be16(d + 5), 1);
    assert_int_equal(d[7], 0);
    assert_int_equal(get_be32(d + 8), 2u << 20); /* the first chunk of segment 2 landed */
    f->m1->fail_after = 0;

    /* ENOSPC from a thin store is the space allocation failure it is */
    f->m1->ios = 0;
    f->m1->fail_after = 1;
    f->m1->fail_err = -ENOSPC;
    xcopy(f, 0, &l, list_finish(&l, 9, 3));
    assert_sense(&f->t, 0x7, 0x27, 0x07);
    f->m1->fail_after = 0;
}

/* --- RECEIVE COPY RESULTS --- */

static void test_rcr_operating_parameters(void **state)
{
    struct fx *f = *state;
    assert_int_equal(rcr(f, f->n1, 0, 0x03, 0, 1024), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 46);
    assert_int_equal(get_be32(d), 42);
    assert_int_equal(d[4] & 1, 1);            /* SNLID */
    assert_int_equal(get_be16(d + 8), 16);    /* MAXIMUM CSCD DESCRIPTOR COUNT */
    assert_int_equal(get_be16(d + 10), 32);   /* MAXIMUM SEGMENT DESCRIPTOR COUNT */
    assert_int_equal(get_be32(d + 12), 1024); /* MAXIMUM DESCRIPTOR LIST LENGTH */
    assert_int_equal(get_be32(d + 16), 32u << 20);
    assert_int_equal(get_be32(d + 20), 0); /* inline data */
    assert_int_equal(get_be32(d + 24), 0); /* held data */
    assert_int_equal(d[43], 2);
    assert_int_equal(d[44], 0x02);
    assert_int_equal(d[45], 0xe4);

    /* the reported maxima are accepted: 16 CSCD descriptors, 32 segments in 1024 bytes */
    struct plist l;
    plist_init(&l);
    for (int i = 0; i < 16; i++)
        add_cscd(&l, f, 0);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 3)), SCSI_STATUS_GOOD);
    plist_init(&l);
    add_cscd(&l, f, 0);
    for (int i = 0; i < 32; i++)
        add_b2b(&l, 0, 0, 1, 0, 1);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 3)), SCSI_STATUS_GOOD);
    /* a whole 4096-byte LUN; one block over MAXIMUM SEGMENT LENGTH is refused before the
     * range is looked at */
    plist_init(&l);
    add_cscd(&l, f, 3);
    add_b2b(&l, 0, 0, 4096, 0, 0);
    assert_int_equal(xcopy(f, 3, &l, list_finish(&l, 1, 3)), SCSI_STATUS_GOOD);
    put_be16(l.b + 48 + 10, 8193);
    xcopy(f, 3, &l, list_finish(&l, 1, 3));
    assert_param_field(&f->t, 0x26, 0x00, 48 + 10);

    /* truncated to the allocation length */
    rcr(f, f->n1, 0, 0x03, 0, 10);
    assert_int_equal(f->t.data_len, 10);
    /* LIST IDENTIFIER is reserved for OPERATING PARAMETERS; LID4 service actions unknown */
    rcr(f, f->n1, 0, 0x03, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    rcr(f, f->n1, 0, 0x05, 0, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
}

static void test_rcr_copy_status(void **state)
{
    struct fx *f = *state;
    /* nothing by that LIST IDENTIFIER yet: INVALID FIELD IN CDB at byte 2 */
    rcr(f, f->n1, 0, 0x00, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    assert_int_equal(get_be16(f->t.sense + 16), 2);

    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_b2b(&l, 0, 0, 2048, 0, 4096);
    add_b2b(&l, 0, 0, 16, 0, 8192);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);

    /* another nexus, another LUN: not theirs */
    rcr(f, f->n2, 0, 0x00, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    rcr(f, f->n1, 1, 0x00, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    /* failed segment details of a copy without errors: AVAILABLE DATA 0 */
    assert_int_equal(rcr(f, f->n1, 0, 0x04, 1, 1024), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 4);
    assert_int_equal(get_be32(data(f)), 0);
    /* ... which discarded it */
    rcr(f, f->n1, 0, 0x00, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);

    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 2)), SCSI_STATUS_GOOD);
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 1, 1024), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 12);
    assert_int_equal(get_be32(d), 8);
    assert_int_equal(d[4], 1); /* completed without errors */
    assert_int_equal(get_be16(d + 5), 2);
    assert_int_equal(d[7], 0);
    assert_int_equal(get_be32(d + 8), 2064 * 512);
    /* reported once, then discarded */
    rcr(f, f->n1, 0, 0x00, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);

    /* LIST ID USAGE 11b: not tracked */
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 5, 3)), SCSI_STATUS_GOOD);
    rcr(f, f->n1, 0, 0x00, 5, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);

    /* more held results than slots: the oldest finished ones make room */
    for (uint8_t id = 10; id < 20; id++)
        assert_int_equal(xcopy(f, 0, &l, list_finish(&l, id, 0)), SCSI_STATUS_GOOD);
    rcr(f, f->n1, 0, 0x00, 11, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 12, 1024), SCSI_STATUS_GOOD);
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 19, 1024), SCSI_STATUS_GOOD);

    /* I_T nexus loss discards what was held (the session ended: last reference put) */
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_GOOD);
    const uint8_t isid1[6] = {0x80, 0, 0, 0, 0, 1};
    scsi_nexus_put(f->n1);
    f->n1 = scsi_nexus_get(&f->tg, &iscsi_scsi_transport, "iqn.2024-01.test:init1", isid1);
    rcr(f, f->n1, 0, 0x00, 1, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
}

/* While a copy runs: COPY STATUS says so, its LIST IDENTIFIER is taken, FAILED SEGMENT DETAILS
 * is not available yet. The running copy stays in f->t; the other commands use f->t2. */
static void test_rcr_in_progress(void **state)
{
    struct fx *f = *state;
    f->m1->defer = true;
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1);
    add_b2b(&l, 0, 1, 2048, 0, 0);
    add_b2b(&l, 0, 1, 2048, 0, 2048);
    uint32_t len = list_finish(&l, 3, 0);
    xcopy_start(f, f->n1, 0, &l, len);
    assert_int_equal(task_done_main, 0);
    assert_int_equal(f->m1->nqueue, 1);

    f->cur = &f->t2;
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 3, 1024), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[4], 0); /* in progress */
    assert_int_equal(get_be16(data(f) + 5), 0);
    rcr(f, f->n1, 0, 0x04, 3, 1024);
    assert_sense(&f->t2, 0x5, 0x24, 0x00);
    xcopy(f, 0, &l, len);
    assert_sense(&f->t2, 0x5, 0x00, 0x16); /* OPERATION IN PROGRESS */
    /* another nexus may use the same LIST IDENTIFIER */
    f->m1->defer = false;
    xcopy_start(f, f->n2, 0, &l, len);
    assert_int_equal(task_done_side, 1);
    assert_int_equal(f->t2.status, SCSI_STATUS_GOOD);
    f->m1->defer = true;

    m_pump1(f->m1); /* first segment done, the second one's WRITE queued */
    assert_int_equal(task_done_main, 0);
    assert_int_equal(f->m1->nqueue, 1);
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 3, 1024), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[4], 0);
    assert_int_equal(get_be16(data(f) + 5), 1);
    assert_int_equal(get_be32(data(f) + 8), 1 << 20);
    m_pump1(f->m1);
    assert_int_equal(task_done_main, 1);
    assert_int_equal(f->t.status, SCSI_STATUS_GOOD);
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 3, 1024), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[4], 1);
    assert_int_equal(get_be16(data(f) + 5), 2);
    f->m1->defer = false;
}

/* --- every segment meets the checks a READ of its source and a WRITE of its destination,
 * sent by the same nexus, would meet on those LUNs --- */

/* PERSISTENT RESERVE OUT by n on lun with a 24-byte parameter list */
static int prout(struct fx *f, struct scsi_nexus *n, uint64_t lun, unsigned sa, unsigned type,
                 uint64_t rk, uint64_t sark)
{
    uint8_t cdb[16] = {0x5f, (uint8_t)sa, (uint8_t)type};
    put_be32(cdb + 5, 24);
    uint8_t p[24] = {0};
    put_be64(p, rk);
    put_be64(p + 8, sark);
    return run(f, n, lun, cdb, p, sizeof(p));
}

/* One segment of nblk blocks, src_lun to dst_lun (named by their NAA), sent by n to lun. */
static int copy1(struct fx *f, struct scsi_nexus *n, uint64_t lun, uint64_t src_lun,
                 uint64_t dst_lun, uint16_t nblk, uint64_t src_lba, uint64_t dst_lba)
{
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, src_lun);
    add_cscd(&l, f, dst_lun);
    add_b2b(&l, 0, 1, nblk, src_lba, dst_lba);
    xcopy_start(f, n, lun, &l, list_finish(&l, 1, 3));
    assert_int_equal(done_calls, 1);
    return f->cur->status;
}

/* Both directions between LUN 0 and LUN 1, sent by n1 to LUN 0, refused with sense
 * key/asc/ascq; neither LUN changed. */
static void assert_both_refused(struct fx *f, uint8_t key, uint8_t asc, uint8_t ascq)
{
    uint8_t before0 = ram(f, 0, 0)[0], before1 = f->m1->mem[0];
    int writes = f->m1->writes;
    copy1(f, f->n1, 0, 1, 0, 8, 0, 0); /* LUN 1 read */
    assert_sense(f->cur, key, asc, ascq);
    assert_int_equal(ram(f, 0, 0)[0], before0);
    copy1(f, f->n1, 0, 0, 1, 8, 0, 0); /* LUN 1 written */
    assert_sense(f->cur, key, asc, ascq);
    assert_int_equal(f->m1->mem[0], before1);
    assert_int_equal(f->m1->writes, writes);
}

static void test_copy_checks_reservations(void **state)
{
    struct fx *f = *state;
    memset(f->m1->mem, 0x33, 8192);
    memset(ram_w(f, 0, 0, 4096), 0x44, 4096);
    /* n2 holds EXCLUSIVE ACCESS on LUN 1: n1's copies out of it and into it are refused as a
     * copy target the copy manager cannot reach for n1 */
    assert_int_equal(prout(f, f->n2, 1, 0x00, 0, 0, 0xb2), SCSI_STATUS_GOOD);
    assert_int_equal(prout(f, f->n2, 1, 0x01, 3, 0xb2, 0), SCSI_STATUS_GOOD);
    assert_both_refused(f, 0xa, 0x0d, 0x02);
    /* the holder copies both ways */
    assert_int_equal(copy1(f, f->n2, 0, 1, 0, 8, 0, 16), SCSI_STATUS_GOOD);
    assert_int_equal(ram(f, 0, 16 * 512)[0], 0x33);
    assert_int_equal(copy1(f, f->n2, 0, 0, 1, 1, 0, 15), SCSI_STATUS_GOOD);
    assert_int_equal(f->m1->mem[15 * 512], 0x44);

    /* WRITE EXCLUSIVE: n1 may copy out of LUN 1, not into it */
    assert_int_equal(prout(f, f->n2, 1, 0x02, 3, 0xb2, 0), SCSI_STATUS_GOOD);
    assert_int_equal(prout(f, f->n2, 1, 0x01, 1, 0xb2, 0), SCSI_STATUS_GOOD);
    assert_int_equal(copy1(f, f->n1, 0, 1, 0, 8, 0, 24), SCSI_STATUS_GOOD);
    assert_int_equal(ram(f, 0, 24 * 512)[0], 0x33);
    int writes = f->m1->writes;
    copy1(f, f->n1, 0, 0, 1, 8, 0, 0);
    assert_sense(f->cur, 0xa, 0x0d, 0x02);
    assert_int_equal(f->m1->mem[0], 0x33);
    assert_int_equal(f->m1->writes, writes);
    /* sent to LUN 1 itself it is the command's own reservation conflict, as before */
    assert_int_equal(copy1(f, f->n1, 1, 1, 0, 8, 0, 0), SCSI_STATUS_RESERVATION_CONFLICT);

    /* SPC-2 RESERVE held by n2 */
    assert_int_equal(prout(f, f->n2, 1, 0x03, 0, 0xb2, 0), SCSI_STATUS_GOOD); /* CLEAR */
    const uint8_t reserve6[16] = {0x16}, release6[16] = {0x17};
    assert_int_equal(run(f, f->n2, 1, reserve6, NULL, 0), SCSI_STATUS_GOOD);
    assert_both_refused(f, 0xa, 0x0d, 0x02);
    assert_int_equal(copy1(f, f->n2, 0, 1, 0, 8, 0, 32), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, f->n2, 1, release6, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(copy1(f, f->n1, 0, 0, 1, 8, 0, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->m1->mem[0], 0x44);
}

static void test_copy_checks_write_protect(void **state)
{
    struct fx *f = *state;
    memset(ram_w(f, 0, 0, 8192), 0x55, 4096);
    /* software write protect (control mode page SWP) on LUN 0: a copy within it is refused
     * as a WRITE there is */
    atomic_store(&f->tg.luns[0]->swp, true);
    copy1(f, f->n1, 0, 0, 0, 8, 0, 8);
    assert_sense(f->cur, 0x7, 0x27, 0x02);
    assert_int_equal(ram(f, 0, 8 * 512)[0], 0);
    /* ... and may still be the source */
    assert_int_equal(copy1(f, f->n1, 0, 0, 1, 8, 0, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->m1->mem[0], 0x55);
    atomic_store(&f->tg.luns[0]->swp, false);
    /* SWP on the other LUN, the destination */
    atomic_store(&f->tg.luns[1]->swp, true);
    int writes = f->m1->writes;
    copy1(f, f->n1, 0, 0, 1, 8, 0, 100);
    assert_sense(f->cur, 0x7, 0x27, 0x02);
    assert_int_equal(f->m1->writes, writes);
    atomic_store(&f->tg.luns[1]->swp, false);
    /* a read-only destination named by another LUN's command */
    copy1(f, f->n1, 1, 0, 2, 8, 0, 0);
    assert_sense(f->cur, 0x7, 0x27, 0x00);
}

static void test_copy_checks_lun_state(void **state)
{
    struct fx *f = *state;
    memset(f->m1->mem, 0x66, 4096);
    memset(ram_w(f, 0, 0, 4096), 0x77, 4096);
    struct scsi_lun *lu1 = f->tg.luns[1];
    /* this port in standby for LUN 1 (active for LUN 0) */
    lu1->alua[0].state = SCSI_ALUA_STANDBY;
    assert_both_refused(f, 0xa, 0x0d, 0x02);
    lu1->alua[0].state = SCSI_ALUA_ACTIVE_OPTIMIZED;
    /* a SANITIZE running on LUN 1 */
    atomic_store(&lu1->sanitize, SANITIZE_RUNNING);
    assert_both_refused(f, 0xa, 0x0d, 0x02);
    atomic_store(&lu1->sanitize, SANITIZE_IDLE);
    /* LUN 1's removable medium ejected */
    atomic_store(&lu1->medium_absent, true);
    assert_both_refused(f, 0xa, 0x0d, 0x02);
    atomic_store(&lu1->medium_absent, false);
    assert_int_equal(copy1(f, f->n1, 0, 0, 1, 8, 0, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->m1->mem[0], 0x77);
}

/* A reservation taken while the copy runs stops it before its next segment: the checks are
 * made again as each segment (and chunk) starts, not only when the list is parsed. */
static void test_copy_checks_each_segment(void **state)
{
    struct fx *f = *state;
    memset(ram_w(f, 0, 0, 2 << 20), 0x88, 2 << 20);
    f->m1->defer = true;
    start_two_segments(f, 0, 0, 1, 2048, 5);
    assert_int_equal(task_done_main, 0);
    assert_int_equal(f->m1->nqueue, 1); /* the first segment's WRITE */

    f->cur = &f->t2;
    f->m1->defer = false;
    assert_int_equal(prout(f, f->n2, 1, 0x00, 0, 0, 0xc2), SCSI_STATUS_GOOD);
    assert_int_equal(prout(f, f->n2, 1, 0x01, 1, 0xc2, 0), SCSI_STATUS_GOOD);
    f->m1->defer = true;

    m_pump1(f->m1); /* the first segment ends; the second meets the reservation */
    assert_int_equal(task_done_main, 1);
    assert_int_equal(f->m1->nqueue, 0);
    assert_sense(&f->t, 0xa, 0x0d, 0x02);
    assert_int_equal(f->m1->mem[0], 0x88);
    assert_int_equal(f->m1->mem[2048 * 512], 0);
    assert_int_equal(f->m1->writes, 1);
    /* the held result: completed with errors after one segment */
    assert_int_equal(rcr(f, f->n1, 0, 0x00, 5, 1024), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[4], 2);
    assert_int_equal(get_be16(data(f) + 5), 1);
    f->m1->defer = false;
}

/* --- INQUIRY and REPORT SUPPORTED OPERATION CODES say so --- */

static void test_advertised(void **state)
{
    struct fx *f = *state;
    uint8_t inq[16] = {0x12, 0, 0, 0, 96};
    assert_int_equal(run(f, f->n1, 0, inq, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[5] & 0x08, 0x08); /* 3PC */

    uint8_t one[16] = {0xa3, 0x0c, 0x02, 0x83, 0, 0x00, 0, 0, 1, 0};
    assert_int_equal(run(f, f->n1, 0, one, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[1] & 7, 3);
    assert_int_equal(get_be16(data(f) + 2), 16);
    static const uint8_t usage[16] = {0x83, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    assert_memory_equal(data(f) + 4, usage, 16);
    one[3] = 0x84;
    one[5] = 0x03;
    assert_int_equal(run(f, f->n1, 0, one, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[1] & 7, 3);
    assert_int_equal(data(f)[5], 0x03);
    one[5] = 0x01; /* RECEIVE DATA: no held data, not offered */
    assert_int_equal(run(f, f->n1, 0, one, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[1] & 7, 1);
}

/* With host LUN maps (host_map.c) the copy manager reaches only the LUNs the sender's host
 * sees, and a LUN mapped read-only for it is write protected as its WRITE would be. */
static void test_copy_through_host_map(void **state)
{
    struct fx *f = *state;
    char err[128];
    const char *host = f->n1->initiator_name;
    assert_int_equal(scsi_target_host_add(&f->tg, host, err, sizeof(err)), 0);
    assert_int_equal(scsi_target_host_map(&f->tg, host, 0, 0, false, err, sizeof(err)), 0);
    assert_int_equal(scsi_target_host_map(&f->tg, host, 3, 1, true, err, sizeof(err)), 0);
    run(f, f->n1, 0, TUR, NULL, 0); /* REPORTED LUNS DATA HAS CHANGED */
    struct plist l;
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 4); /* not mapped for n1's host */
    add_b2b(&l, 0, 1, 8, 0, 0);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0xa, 0x0d, 0x02);
    assert_int_equal(f->m4->writes, 0);
    plist_init(&l);
    add_cscd(&l, f, 0);
    add_cscd(&l, f, 1); /* mapped read-only for it */
    add_b2b(&l, 0, 1, 8, 0, 0);
    assert_int_equal(xcopy(f, 0, &l, list_finish(&l, 1, 0)), SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0x7, 0x27, 0x00);
    assert_int_equal(f->m1->writes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_within_ram_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_within_ram_lun_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_across_luns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_to_naa6_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_within_unmapped_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_keeps_ram_thin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_ordered_with_compare_and_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_deferred_and_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_lengths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_descriptors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_copy_aborted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_io_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rcr_operating_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rcr_copy_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rcr_in_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_advertised, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_checks_reservations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_checks_write_protect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_checks_lun_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_checks_each_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_through_host_map, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
