/* What a store's failure says to the initiator, and the store-level WRITE SAME and COMPARE
 * AND WRITE a network store (rbd) offers, through the fixture's store with injected results
 * instead of a cluster: each -errno a store may return (-EIO, -ENOSPC, -EROFS, -ETIMEDOUT,
 * -ESHUTDOWN for a fenced store) becomes the sense sbc_io_reason() promises for READ, WRITE,
 * SYNCHRONIZE CACHE, WRITE SAME and COMPARE AND WRITE; a store with write_same gets one
 * request per WRITE SAME; one with caw_unit gets a COMPARE AND WRITE that fits the unit, with
 * the miscompare offset in INFORMATION, longer ones refused as VPD 0xB0 says. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bs/bs.h"
#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#include "scsi_fixture.h"

#define BSZ 512u

struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1;
    struct sfx_store *m;
    struct bs *bs;
    struct scsi_task t;
};

static int run(struct fx *f, const uint8_t *cdb, const void *out, size_t out_len)
{
    return sfx_run(&f->t, &f->tg, f->n1, 0, cdb, out, out_len, 64 * 1024, SFX_CHECK_DONE);
}

static void caw_cdb(uint8_t *c, uint64_t lba, uint8_t n)
{
    memset(c, 0, 16);
    c[0] = 0x89;
    put_be64(c + 2, lba);
    c[13] = n;
}

/* ILLEGAL REQUEST, INVALID FIELD IN CDB, the field pointer at byte `byte` */
static void assert_cdb_field(struct fx *f, uint16_t byte)
{
    sfx_assert_sense(&f->t, 0, 0x05, 0x24, 0x00);
    assert_int_equal(f->t.sense[15] & 0xc0, 0xc0); /* SKSV, C/D: in the CDB */
    assert_int_equal(get_be16(f->t.sense + 16), byte);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_int_equal(scsi_target_init(&f->tg, "iqn.2024-01.io.linerate:bserr", 1), 0);
    f->bs = sfx_store_open(1 << 20, true, &f->m);
    f->bs->thin = true;
    f->bs->write_same = true;
    f->bs->caw_unit = 512; /* what the rbd store says: librbd compares within one sector */
    sfx_add_lun(&f->tg, 0, f->bs, BSZ, false);
    f->n1 = sfx_nexus_get(&f->tg, 1);
    uint8_t tur[16] = {0};
    run(f, tur, NULL, 0); /* the power-on unit attention */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sfx_target_down(&f->tg, &f->t, f->n1, NULL, NULL);
    free(f);
    return 0;
}

static const struct sfx_err_case cases[] = {
    {-EIO, 0x03, 0x0c, 0x00, 0x03, 0x11, 0x00}, /* MEDIUM ERROR: WRITE / UNRECOVERED READ */
    {-ENOSPC, 0x07, 0x27, 0x07, 0, 0, 0},       /* SPACE ALLOCATION FAILED WRITE PROTECT */
    {-EROFS, 0x07, 0x27, 0x00, 0, 0, 0},        /* DATA PROTECT, WRITE PROTECTED */
    {-ETIMEDOUT, 0x0b, 0x3e, 0x02, 0, 0, 0},    /* ABORTED COMMAND, TIMEOUT ON LU */
    {-ESHUTDOWN, 0x02, 0x04, 0x03, 0, 0, 0},    /* NOT READY, MANUAL INTERVENTION */
};

static void test_errno_to_sense(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[2 * BSZ];
    memset(buf, 0x5a, sizeof(buf));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct sfx_err_case *e = &cases[i];
        f->m->fail_err = e->err;
        sfx_cdb10(c, 0x28, 0, 8, 1); /* READ(10) */
        assert_int_equal(run(f, c, NULL, 0), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, true);
        sfx_cdb10(c, 0x2a, 0, 8, 1); /* WRITE(10) */
        assert_int_equal(run(f, c, buf, BSZ), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, false);
        sfx_cdb10(c, 0x2a, 0x08, 8, 1); /* WRITE(10) FUA */
        assert_int_equal(run(f, c, buf, BSZ), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, false);
        sfx_cdb10(c, 0x35, 0, 0, 0); /* SYNCHRONIZE CACHE(10) */
        assert_int_equal(run(f, c, NULL, 0), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, false);
        sfx_cdb10(c, 0x41, 0, 16, 8); /* WRITE SAME(10) */
        assert_int_equal(run(f, c, buf, BSZ), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, false);
        sfx_cdb10(c, 0x41, 0x08, 16, 8); /* WRITE SAME(10) UNMAP */
        assert_int_equal(run(f, c, buf, BSZ), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, false);
        caw_cdb(c, 4, 1); /* COMPARE AND WRITE in the store */
        assert_int_equal(run(f, c, buf, 2 * BSZ), SCSI_STATUS_CHECK_CONDITION);
        sfx_assert_err_case(&f->t, e, false);
    }
    f->m->fail_err = 0;
    sfx_cdb10(c, 0x28, 0, 8, 1);
    assert_int_equal(run(f, c, NULL, 0), SCSI_STATUS_GOOD);
}

static void test_write_same_in_store(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], blk[BSZ];
    for (unsigned i = 0; i < BSZ; i++)
        blk[i] = (uint8_t)(i * 7);
    sfx_cdb10(c, 0x41, 0, 100, 300); /* 300 blocks: one request, the store repeats the block */
    assert_int_equal(run(f, c, blk, BSZ), SCSI_STATUS_GOOD);
    assert_int_equal(f->m->write_sames, 1);
    assert_int_equal(f->m->writes, 0);
    assert_int_equal(f->m->last_same_len, 300u * BSZ);
    for (unsigned b = 0; b < 300; b++)
        assert_memory_equal(f->m->mem + (100u + b) * BSZ, blk, BSZ);
    assert_int_equal(f->m->mem[100u * BSZ - 1], 0);
    assert_int_equal(f->m->mem[400u * BSZ], 0);
    /* NDOB: zeros, no data-out */
    uint8_t c16[16] = {0x93, 0x01};
    put_be64(c16 + 2, 100);
    put_be32(c16 + 10, 2);
    assert_int_equal(run(f, c16, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->m->write_sames, 2);
    for (unsigned i = 0; i < 2 * BSZ; i++)
        assert_int_equal(f->m->mem[100u * BSZ + i], 0);
    assert_int_equal(f->m->mem[102u * BSZ + 1], blk[1]);
}

static void test_caw_in_store(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[4 * BSZ];
    memset(f->m->mem + 10 * BSZ, 0x11, 2 * BSZ);
    /* one block, equal: written by the store */
    memset(buf, 0x11, BSZ);
    memset(buf + BSZ, 0x22, BSZ);
    caw_cdb(c, 10, 1);
    assert_int_equal(run(f, c, buf, 2 * BSZ), SCSI_STATUS_GOOD);
    assert_int_equal(f->m->caws, 1);
    assert_int_equal(f->m->mem[10 * BSZ], 0x22);
    assert_int_equal(f->m->mem[11 * BSZ - 1], 0x22);
    /* one block, differing at byte 37: MISCOMPARE, INFORMATION 37, nothing written */
    memset(buf, 0x22, BSZ);
    buf[37] = 0;
    memset(buf + BSZ, 0x33, BSZ);
    assert_int_equal(run(f, c, buf, 2 * BSZ), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x0e, 0x1d, 0x00);
    assert_int_equal(get_be32(f->t.sense + 3), 37);
    assert_int_equal(f->m->caws, 2);
    assert_int_equal(f->m->mem[10 * BSZ], 0x22);
    /* two blocks may straddle the store's unit: not atomic across gateways, so refused as
     * more than MAXIMUM COMPARE AND WRITE LENGTH (INVALID FIELD IN CDB at byte 13), with
     * nothing read or written */
    int reads = f->m->reads, writes = f->m->writes;
    memset(buf, 0x22, BSZ);
    memset(buf + BSZ, 0x11, BSZ);
    memset(buf + 2 * BSZ, 0x44, 2 * BSZ);
    caw_cdb(c, 10, 2);
    assert_int_equal(run(f, c, buf, 4 * BSZ), SCSI_STATUS_CHECK_CONDITION);
    assert_cdb_field(f, 13);
    assert_int_equal(f->m->caws, 2);
    assert_int_equal(f->m->reads, reads);
    assert_int_equal(f->m->writes, writes);
    assert_int_equal(f->m->mem[12 * BSZ - 1], 0x11);
}

/* VPD 0xB0 byte 5 of LUN lun: MAXIMUM COMPARE AND WRITE LENGTH */
static uint8_t max_caw(struct fx *f, uint64_t lun)
{
    uint8_t inq[16] = {0x12, 1, 0xb0, 0, 255};
    assert_int_equal(sfx_run(&f->t, &f->tg, f->n1, lun, inq, NULL, 0, 255, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);
    return ((const uint8_t *)f->t.iov[0].iov_base)[5];
}

/* What VPD 0xB0 advertises is what the store compares atomically: one block on a 512-byte
 * LUN of a store with a 512-byte unit, none on a 4 KiB LUN of it (COMPARE AND WRITE refused,
 * zero blocks still a no-op), and the range-locked emulation's 255 on a store without one. */
static void test_caw_limit_advertised(void **state)
{
    struct fx *f = *state;
    struct sfx_store *m4, *mp;
    struct bs *bs4 = sfx_store_open(1 << 20, true, &m4);
    bs4->caw_unit = 512;
    sfx_add_lun(&f->tg, 1, bs4, 4096, false);
    struct bs *bsp = sfx_store_open(1 << 20, true, &mp); /* RAM/file-like: no caw_unit */
    sfx_add_lun(&f->tg, 2, bsp, BSZ, false);
    uint8_t tur[16] = {0};
    sfx_run(&f->t, &f->tg, f->n1, 1, tur, NULL, 0, 0, 0); /* power-on unit attentions */
    sfx_run(&f->t, &f->tg, f->n1, 2, tur, NULL, 0, 0, 0);
    assert_int_equal(max_caw(f, 0), 1);
    assert_int_equal(max_caw(f, 1), 0);
    assert_int_equal(max_caw(f, 2), SBC_MAX_CAW_BLOCKS);

    uint8_t c[16], buf[2 * 4096];
    memset(buf, 0, sizeof(buf));
    caw_cdb(c, 1, 1);
    assert_int_equal(sfx_run(&f->t, &f->tg, f->n1, 1, c, buf, sizeof(buf), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_CHECK_CONDITION);
    assert_cdb_field(f, 13);
    assert_int_equal(m4->caws + m4->reads + m4->writes, 0);
    caw_cdb(c, 1, 0);
    assert_int_equal(sfx_run(&f->t, &f->tg, f->n1, 1, c, NULL, 0, 0, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);

    /* the emulated store still takes long ones, under the range lock */
    memset(buf, 0, 4 * BSZ);
    memset(buf + 4 * BSZ, 0x66, 4 * BSZ);
    caw_cdb(c, 3, 4);
    assert_int_equal(sfx_run(&f->t, &f->tg, f->n1, 2, c, buf, 8 * BSZ, 0, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);
    assert_int_equal(mp->mem[7 * BSZ - 1], 0x66);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_errno_to_sense, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_same_in_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caw_in_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caw_limit_advertised, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
