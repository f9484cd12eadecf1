/* Data-out shortfall without sockets: a command given an EDTL (or no W bit) below what its CDB
 * asks to send. WRITE and WRITE AND VERIFY with whole blocks of EDTL store those blocks, GOOD
 * (FCP-4 §9.4.2 a), as libiscsi 1.19's iSCSIResiduals require); every other shortfall is refused
 * with CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN COMMAND INFORMATION UNIT (0Eh/03h)
 * and writes nothing (§9.4.2 b)). dir and xfer_len stay the CDB's for the transport's overflow
 * residual. An EDTL above the need (underflow) is served as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h" /* the LU's NAA for the EXTENDED COPY list */
#include "util/bytes.h"

#include "scsi_fixture.h"

/* --- fixture: LUN 0 ram 4M/512 (mapped, thin), LUN 1 test store 1M/512 (no map); every block
 * holds 'a' before each test --- */
struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1;
    struct sfx_store *m;
    struct scsi_task t;
};

static int run(struct fx *f, uint64_t lun, const uint8_t *cdb, const void *out, size_t out_len)
{
    return sfx_run(&f->t, &f->tg, f->n1, lun, cdb, out, out_len, 4096,
                   SFX_CHECK_DONE | SFX_CHECK_REFUSAL);
}

static const uint8_t TUR[16] = {0x00};
static uint8_t A[8192], B[8192];

static void cdb12(uint8_t *c, uint8_t op, uint32_t lba, uint32_t n)
{
    memset(c, 0, 16);
    c[0] = op;
    put_be32(c + 2, lba);
    put_be32(c + 6, n);
}

static void cdb16(uint8_t *c, uint8_t op, uint64_t lba, uint32_t n)
{
    memset(c, 0, 16);
    c[0] = op;
    put_be64(c + 2, lba);
    put_be32(c + 10, n);
}

/* The first 16 blocks of the LUN still hold 'a' (READ(10)). */
static void assert_untouched(struct fx *f, uint64_t lun)
{
    uint8_t c[16];
    sfx_cdb10(c, 0x28, 0, 0, 16);
    assert_int_equal(run(f, lun, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_memory_equal(f->t.iov[0].iov_base, A, 16 * 512);
}

/* The shortfall answer: 5/0Eh/03h from setup, nothing for the transport to fill, the CDB's
 * data-out length kept for the residual. */
static void assert_shortfall(struct fx *f, uint64_t lun, const uint8_t *cdb, const void *out,
                             size_t edtl, uint32_t want_xfer)
{
    int writes = f->m->writes;
    assert_int_equal(run(f, lun, cdb, out, edtl), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, SFX_SENSE_LEN | SFX_SENSE_FIXED, 0x5, 0x0e, 0x03);
    assert_int_equal(f->t.dir, SCSI_DIR_WRITE);
    assert_int_equal(f->t.xfer_len, want_xfer); /* residual: want_xfer - edtl, overflow */
    assert_int_equal(f->t.iovcnt, 0);
    assert_false(f->t.buffered);
    assert_int_equal(f->m->writes, writes);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[128];
    memset(A, 'a', sizeof(A));
    memset(B, 'b', sizeof(B));
    assert_int_equal(scsi_target_init(&f->tg, "iqn.2024-01.io.linerate:dataout", 1), 0);
    sfx_add_lun(&f->tg, 0, bs_open_spec("ram:4M", err, sizeof(err)), 512, false);
    sfx_add_lun(&f->tg, 1, sfx_store_open(1 << 20, false, &f->m), 512, false);
    f->n1 = sfx_nexus_get(&f->tg, 1);
    for (uint64_t lun = 0; lun < 2; lun++) {
        run(f, lun, TUR, NULL, 0); /* the power-on UA */
        uint8_t c[16];
        sfx_cdb10(c, 0x2a, 0, 0, 16);
        assert_int_equal(run(f, lun, c, A, 16 * 512), SCSI_STATUS_GOOD);
    }
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

/* WRITE 6/10/12/16 and WRITE AND VERIFY 10/12/16, on the mapped RAM LUN (direct placement)
 * and through a store's submit: an EDTL that cuts a block is refused, nothing stored. */
static void test_write_torn_block(void **state)
{
    struct fx *f = *state;
    for (uint64_t lun = 0; lun < 2; lun++) {
        uint8_t c[16];
        memset(c, 0, 16);
        c[0] = 0x0a; /* WRITE(6) LBA 3, one block */
        c[3] = 3;
        c[4] = 1;
        assert_shortfall(f, lun, c, B, 200, 512);
        static const uint8_t ops10[] = {0x2a, 0x2e}, ops12[] = {0xaa, 0xae}, ops16[] = {0x8a, 0x8e};
        for (int i = 0; i < 2; i++) {
            sfx_cdb10(c, ops10[i], 0, 2, 1);
            assert_shortfall(f, lun, c, B, 200, 512);
            sfx_cdb10(c, ops10[i], 0, 2, 2);
            assert_shortfall(f, lun, c, B, 513, 1024);
            cdb12(c, ops12[i], 4, 1);
            assert_shortfall(f, lun, c, B, 511, 512);
            cdb16(c, ops16[i], 5, 8);
            assert_shortfall(f, lun, c, B, 7 * 512 + 1, 4096);
        }
        assert_untouched(f, lun);
    }
}

/* The same with EDTL a whole number of blocks: those blocks are stored, GOOD, the rest of the
 * range untouched; no W bit (EDTL 0) stores nothing, GOOD. */
static void test_write_whole_blocks(void **state)
{
    struct fx *f = *state;
    static const uint8_t ops[] = {0x2a, 0x2e};
    for (uint64_t lun = 0; lun < 2; lun++) {
        for (int i = 0; i < 2; i++) {
            uint8_t c[16];
            int writes = f->m->writes;
            sfx_cdb10(c, ops[i], 0, 2, 2);
            assert_int_equal(run(f, lun, c, NULL, 0), SCSI_STATUS_GOOD);
            assert_int_equal(f->t.dir, SCSI_DIR_WRITE);
            assert_int_equal(f->t.xfer_len, 1024); /* residual: 1024 overflow */
            assert_int_equal(f->m->writes, writes);
            assert_untouched(f, lun);
            cdb16(c, ops[i] == 0x2a ? 0x8a : 0x8e, 10, 4);
            assert_int_equal(run(f, lun, c, B, 1024), SCSI_STATUS_GOOD);
            assert_int_equal(f->t.xfer_len, 2048); /* residual: 1024 overflow */
            sfx_cdb10(c, 0x28, 0, 9, 6);
            assert_int_equal(run(f, lun, c, NULL, 0), SCSI_STATUS_GOOD);
            const uint8_t *d = f->t.iov[0].iov_base;
            assert_memory_equal(d, A, 512);         /* LBA 9 */
            assert_memory_equal(d + 512, B, 1024);  /* LBA 10-11: the blocks that came */
            assert_memory_equal(d + 1536, A, 1536); /* LBA 12-14 */
            sfx_cdb10(c, 0x2a, 0, 10, 2);
            assert_int_equal(run(f, lun, c, A, 1024), SCSI_STATUS_GOOD); /* back to 'a' */
        }
    }
}

/* An EDTL above what the CDB asks (underflow) is no shortfall: the CDB's blocks are written. */
static void test_write_underflow_served(void **state)
{
    struct fx *f = *state;
    for (uint64_t lun = 0; lun < 2; lun++) {
        uint8_t c[16];
        sfx_cdb10(c, 0x2a, 0, 1, 1);
        assert_int_equal(run(f, lun, c, B, 10000), SCSI_STATUS_GOOD);
        assert_int_equal(f->t.xfer_len, 512); /* residual: 10000 - 512, underflow */
        sfx_cdb10(c, 0x28, 0, 0, 3);
        assert_int_equal(run(f, lun, c, NULL, 0), SCSI_STATUS_GOOD);
        const uint8_t *d = f->t.iov[0].iov_base;
        assert_memory_equal(d, A, 512);
        assert_memory_equal(d + 512, B, 512);
        assert_memory_equal(d + 1024, A, 512);
    }
}

/* WRITE SAME 10/16, COMPARE AND WRITE, ORWRITE(16), WRITE ATOMIC(16). */
static void test_block_commands(void **state)
{
    struct fx *f = *state;
    for (uint64_t lun = 0; lun < 2; lun++) {
        uint8_t c[16];
        sfx_cdb10(c, 0x41, 0, 0, 4); /* WRITE SAME(10) of 4 blocks: one block of data-out */
        assert_shortfall(f, lun, c, B, 200, 512);
        assert_shortfall(f, lun, c, NULL, 0, 512);
        cdb16(c, 0x93, 0, 4);
        assert_shortfall(f, lun, c, B, 511, 512);

        memset(c, 0, 16); /* COMPARE AND WRITE of 1 block: compare 'a' and write 'b' */
        c[0] = 0x89;
        put_be64(c + 2, 6);
        c[13] = 1;
        uint8_t cw[1024];
        memset(cw, 'a', 512);
        memset(cw + 512, 'b', 512);
        assert_shortfall(f, lun, c, cw, 1023, 1024);
        assert_shortfall(f, lun, c, cw, 512, 1024);

        cdb16(c, 0x8b, 7, 1); /* ORWRITE(16) */
        assert_shortfall(f, lun, c, B, 200, 512);

        memset(c, 0, 16); /* WRITE ATOMIC(16) of 2 blocks */
        c[0] = 0x9c;
        put_be64(c + 2, 8);
        put_be16(c + 12, 2);
        assert_shortfall(f, lun, c, B, 512, 1024);
        assert_untouched(f, lun);
    }
}

/* UNMAP and SANITIZE (OVERWRITE) parameter lists cut short: nothing is unmapped or
 * overwritten, and no sanitize starts. */
static void test_unmap_and_sanitize(void **state)
{
    struct fx *f = *state;
    uint8_t list[24] = {0, 22, 0, 16};
    put_be64(list + 8, 0);
    put_be32(list + 16, 16);
    uint8_t c[16] = {0x42};
    put_be16(c + 7, sizeof(list));
    assert_shortfall(f, 0, c, list, 16, 24);
    assert_shortfall(f, 0, c, NULL, 0, 24);
    assert_untouched(f, 0);

    for (uint64_t lun = 0; lun < 2; lun++) {
        uint8_t s[16] = {0x48, 0x01}; /* SANITIZE OVERWRITE, one pass of a 4-byte pattern */
        put_be16(s + 7, 8);
        uint8_t p[8] = {0x01, 0, 0, 4, 'z', 'z', 'z', 'z'};
        assert_shortfall(f, lun, s, p, 4, 8);
        assert_int_equal(run(f, lun, TUR, NULL, 0), SCSI_STATUS_GOOD); /* no sanitize running */
        assert_untouched(f, lun);
    }
}

/* EXTENDED COPY (LID1): a valid list cut short copies nothing. */
static void test_extended_copy(void **state)
{
    struct fx *f = *state;
    uint8_t p[16 + 32 + 28] = {0};
    p[1] = 0x18; /* LIST ID USAGE 11b: not held */
    put_be16(p + 2, 32);
    put_be32(p + 8, 28);
    uint8_t *d = p + 16; /* identification CSCD descriptor naming LUN 0 by its NAA */
    d[0] = 0xe4;
    d[4] = 0x01;
    d[5] = 0x03;
    d[7] = 8;
    memcpy(d + 8, scsi_target_lun(&f->tg, 0)->ident.naa, 8);
    put_be24(d + 29, 512);
    uint8_t *s = p + 48; /* block to block: LBA 0 -> LBA 1, one block */
    s[0] = 0x02;
    put_be16(s + 2, 24);
    put_be16(s + 4, 0);
    put_be16(s + 6, 0);
    put_be16(s + 10, 1);
    put_be64(s + 12, 0);
    put_be64(s + 20, 1);
    uint8_t c[16] = {0x83};
    put_be32(c + 10, sizeof(p));
    uint8_t one[512];
    memset(one, 'q', sizeof(one));
    uint8_t w[16];
    sfx_cdb10(w, 0x2a, 0, 0, 1);
    assert_int_equal(run(f, 0, w, one, 512), SCSI_STATUS_GOOD); /* LBA 0 now differs */
    assert_shortfall(f, 0, c, p, sizeof(p) - 1, sizeof(p));
    sfx_cdb10(w, 0x28, 0, 1, 1);
    assert_int_equal(run(f, 0, w, NULL, 0), SCSI_STATUS_GOOD);
    assert_memory_equal(f->t.iov[0].iov_base, A, 512);              /* LBA 1 not copied over */
    assert_int_equal(run(f, 0, c, p, sizeof(p)), SCSI_STATUS_GOOD); /* whole: it copies */
    assert_int_equal(run(f, 0, w, NULL, 0), SCSI_STATUS_GOOD);
    assert_memory_equal(f->t.iov[0].iov_base, one, 512);
}

/* PERSISTENT RESERVE OUT (REGISTER) cut short registers nothing. */
static void test_persistent_reserve_out(void **state)
{
    struct fx *f = *state;
    uint8_t c[16] = {0x5f, 0x00, 0, 0, 0, 0, 0, 0, 24};
    uint8_t list[24] = {0};
    put_be64(list + 8, 0x1234);
    assert_shortfall(f, 0, c, list, 16, 24);
    uint8_t in[16] = {0x5e, 0x00, 0, 0, 0, 0, 0, 0, 64}; /* READ KEYS */
    assert_int_equal(run(f, 0, in, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = f->t.iov[0].iov_base;
    assert_int_equal(get_be32(d + 4), 0); /* ADDITIONAL LENGTH: no key */
    assert_int_equal(run(f, 0, c, list, 24), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, 0, in, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(get_be32((const uint8_t *)f->t.iov[0].iov_base + 4), 8);
}

/* MODE SELECT 6/10 cut short change no page: the caching page's WCE stays as it was. */
static void test_mode_select(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    bool wce = atomic_load(&lu->wce);
    /* MODE SELECT(6), PF=1: header + caching page (08h) with WCE flipped */
    uint8_t l6[4 + 20] = {0};
    l6[4] = 0x08;
    l6[5] = 0x12;
    l6[6] = wce ? 0 : 0x04;
    uint8_t s6[16] = {0x15, 0x10, 0, 0, sizeof(l6)};
    assert_shortfall(f, 0, s6, l6, 12, sizeof(l6));
    assert_int_equal(atomic_load(&lu->wce), wce);
    uint8_t l10[8 + 20] = {0};
    memcpy(l10 + 8, l6 + 4, 20);
    uint8_t s10[16] = {0x55, 0x10, 0, 0, 0, 0, 0, 0, sizeof(l10)};
    assert_shortfall(f, 0, s10, l10, sizeof(l10) - 1, sizeof(l10));
    assert_int_equal(atomic_load(&lu->wce), wce);
}

/* VERIFY 10/12/16 with BYTCHK=01b: the compare data cut short is refused, not compared. */
/* A transport refusing a command after setup (scsi_task_refuse): the buffer and the range
 * lock are given back, exec only calls done, nothing reaches the medium. TASK SET FULL is a
 * status without sense before any data moved; a lost data-out is ABORTED COMMAND, PROTOCOL
 * SERVICE CRC ERROR (RFC 7143 §11.4.7.2) with the CDB's transfer kept for the residual. */
static void test_transport_refusal(void **state)
{
    struct fx *f = *state;
    for (uint64_t lun = 0; lun < 2; lun++) {
        for (int why = 0; why < 2; why++) {
            uint8_t c[16];
            sfx_cdb10(c, 0x2a, 0, 2, 2);
            int writes = f->m->writes;
            struct scsi_task *t = &f->t;
            scsi_task_release(t); /* the previous command's, as sfx_run does */
            scsi_task_init(t);
            memcpy(t->cdb, c, 16);
            t->lun = lun;
            t->target = &f->tg;
            t->nexus = f->n1;
            t->edtl = 1024;
            t->edtl_write = true;
            t->done = sfx_on_done;
            assert_int_equal(scsi_task_setup(t), 0);
            assert_true(t->buffered); /* a RAM LUN's data-out too lands in a task buffer */
            memset(t->iov[0].iov_base, 'b', 512); /* part of the data-out arrived */
            scsi_task_refuse(t, why ? SCSI_REFUSE_PROTOCOL_CRC_ERROR : SCSI_REFUSE_TASK_SET_FULL);
            assert_false(t->buffered);
            assert_int_equal(t->iovcnt, 0);
            if (why) {
                sfx_assert_sense(t, SFX_SENSE_LEN | SFX_SENSE_FIXED, 0xb, 0x47, 0x05);
                assert_int_equal(t->dir, SCSI_DIR_WRITE);
                assert_int_equal(t->xfer_len, 1024);
            } else {
                assert_int_equal(t->status, SCSI_STATUS_TASK_SET_FULL);
                assert_int_equal(t->sense_len, 0);
                assert_int_equal(t->dir, SCSI_DIR_NONE);
                assert_int_equal(t->xfer_len, 0);
            }
            sfx_done_calls = 0;
            scsi_task_exec(t);
            assert_int_equal(sfx_done_calls, 1);
            scsi_task_release(t); /* again: harmless */
            assert_int_equal(f->m->writes, writes);
            assert_untouched(f, lun);
        }
    }
    /* nothing is held after the refusal: a COMPARE AND WRITE runs at once */
    uint8_t c[16] = {0x89}, buf[1024];
    put_be64(c + 2, 2);
    c[13] = 1;
    memset(buf, 'a', 512); /* LUN 0 block 2: the refused data never reached the LUN */
    memset(buf + 512, 'c', 512);
    assert_int_equal(run(f, 0, c, buf, sizeof(buf)), SCSI_STATUS_GOOD);
    assert_int_equal(scsi_lun_id(scsi_target_lun(&f->tg, 1)), 1);
}

static void test_verify_bytchk(void **state)
{
    struct fx *f = *state;
    for (uint64_t lun = 0; lun < 2; lun++) {
        uint8_t c[16];
        sfx_cdb10(c, 0x2f, 0x02, 0, 2);
        assert_shortfall(f, lun, c, A, 512, 1024);
        cdb12(c, 0xaf, 0, 1);
        c[1] = 0x02;
        assert_shortfall(f, lun, c, A, 100, 512);
        cdb16(c, 0x8f, 0, 1);
        c[1] = 0x02;
        assert_shortfall(f, lun, c, NULL, 0, 512);
        sfx_cdb10(c, 0x2f, 0x02, 0, 2); /* whole: GOOD */
        assert_int_equal(run(f, lun, c, A, 1024), SCSI_STATUS_GOOD);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_torn_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_whole_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_underflow_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmap_and_sanitize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extended_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persistent_reserve_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_select, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_bytchk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transport_refusal, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
