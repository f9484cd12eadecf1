/* Removable medium without sockets: a LUN added with removable=true reports RMB=1, START STOP
 * UNIT with LOEJ ejects and loads it, PREVENT ALLOW MEDIUM REMOVAL holds it per I_T nexus until
 * that nexus allows, loses its session, or a LUN/target reset; while it is out, every command
 * that needs the medium is NOT READY, MEDIUM NOT PRESENT and the others still run. A fixed LUN
 * answers the same CDBs GOOD and keeps its medium. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#include "scsi_fixture.h"

enum { FIXED = 0, RMB = 1 }; /* LUN 0 fixed ram:1M, LUN 1 removable ram:1M */

struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1, *n2;
    struct scsi_task t;
};

/* One command from nexus n: setup, data-out (out_len bytes), exec. Returns the status. */
static int run_on(struct fx *f, struct scsi_nexus *n, uint64_t lun, const uint8_t *cdb,
                  const void *out, size_t out_len)
{
    return sfx_run(&f->t, &f->tg, n, lun, cdb, out, out_len, 4096, SFX_CHECK_DONE);
}

static int run(struct fx *f, uint64_t lun, const uint8_t *cdb)
{
    return run_on(f, f->n1, lun, cdb, NULL, 0);
}

static void assert_sense(const struct scsi_task *t, uint8_t key, uint8_t asc, uint8_t ascq)
{
    sfx_assert_sense(t, 0, key, asc, ascq);
}

static const uint8_t TUR[16] = {0x00};
static const uint8_t INQUIRY[16] = {0x12, 0, 0, 0, 96};
static const uint8_t PREVENT[16] = {0x1e, 0, 0, 0, 0x01};
static const uint8_t ALLOW[16] = {0x1e, 0, 0, 0, 0x00};
static const uint8_t EJECT[16] = {0x1b, 0, 0, 0, 0x02};         /* LOEJ=1 START=0 */
static const uint8_t LOAD[16] = {0x1b, 0, 0, 0, 0x03};          /* LOEJ=1 START=1 */
static const uint8_t STOP[16] = {0x1b, 0, 0, 0, 0x00};          /* LOEJ=0 START=0 */
static const uint8_t EJECT_PWR[16] = {0x1b, 0, 0, 0, 0x32};     /* power condition 3h, LOEJ */
static const uint8_t EJECT_NOFLUSH[16] = {0x1b, 1, 0, 0, 0x06}; /* IMMED, NO_FLUSH, LOEJ */

static void expect_no_medium(struct fx *f, const uint8_t *cdb)
{
    assert_int_equal(run(f, RMB, cdb), SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0x2, 0x3a, 0x00);
}

static void expect_prevented(struct fx *f, struct scsi_nexus *n, const uint8_t *cdb)
{
    assert_int_equal(run_on(f, n, RMB, cdb, NULL, 0), SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0x5, 0x53, 0x02);
}

static void expect_good(struct fx *f, struct scsi_nexus *n, uint64_t lun, const uint8_t *cdb)
{
    assert_int_equal(run_on(f, n, lun, cdb, NULL, 0), SCSI_STATUS_GOOD);
}

/* Report every pending unit attention (new nexus, reset) of both nexuses on both LUNs. */
static void clear_uas(struct fx *f)
{
    struct scsi_nexus *ns[2] = {f->n1, f->n2};
    for (uint64_t lun = 0; lun < 2; lun++)
        for (int i = 0; i < 2; i++)
            while (run_on(f, ns[i], lun, TUR, NULL, 0) == SCSI_STATUS_CHECK_CONDITION &&
                   (f->t.sense[2] & 0x0f) == 0x6)
                ;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[128];
    assert_int_equal(scsi_target_init(&f->tg, "iqn.2024-01.io.linerate:rmb", 1), 0);
    for (uint64_t lun = 0; lun < 2; lun++) {
        struct scsi_lun_config c = {.lun = lun,
                                    .bs = bs_open_spec("ram:1M", err, sizeof(err)),
                                    .block_size = 512,
                                    .removable = lun == RMB};
        assert_non_null(c.bs);
        assert_int_equal(scsi_target_add_lun(&f->tg, &c, err, sizeof(err)), 0);
    }
    f->n1 = sfx_nexus_get(&f->tg, 1);
    f->n2 = sfx_nexus_get(&f->tg, 2);
    clear_uas(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sfx_target_down(&f->tg, &f->t, f->n1, f->n2, NULL);
    free(f);
    return 0;
}

static void test_rmb_bit(void **state)
{
    struct fx *f = *state;
    expect_good(f, f->n1, FIXED, INQUIRY);
    assert_int_equal(((uint8_t *)f->t.iov[0].iov_base)[1], 0x00);
    expect_good(f, f->n1, RMB, INQUIRY);
    assert_int_equal(((uint8_t *)f->t.iov[0].iov_base)[1], 0x80);
}

/* A fixed LUN: as before the option existed, nothing ejects and PREVENT is accepted. */
static void test_fixed_lun_keeps_its_medium(void **state)
{
    struct fx *f = *state;
    expect_good(f, f->n1, FIXED, PREVENT);
    expect_good(f, f->n1, FIXED, EJECT);
    expect_good(f, f->n1, FIXED, TUR);
    uint8_t rc10[16] = {0x25};
    expect_good(f, f->n1, FIXED, rc10);
    expect_good(f, f->n1, FIXED, LOAD);
    expect_good(f, f->n1, FIXED, ALLOW);
}

static void test_eject_and_load(void **state)
{
    struct fx *f = *state;
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 8, 0, 0, 1}, r10[16] = {0x28, 0, 0, 0, 0, 8, 0, 0, 1};
    uint8_t block[512];
    memset(block, 0x5a, sizeof(block));
    assert_int_equal(run_on(f, f->n1, RMB, w10, block, sizeof(block)), SCSI_STATUS_GOOD);

    expect_good(f, f->n1, RMB, STOP); /* LOEJ=0: the medium stays */
    expect_good(f, f->n1, RMB, TUR);
    expect_good(f, f->n1, RMB, EJECT_PWR); /* a power condition ignores LOEJ */
    expect_good(f, f->n1, RMB, TUR);

    expect_good(f, f->n1, RMB, EJECT);
    expect_no_medium(f, TUR);
    expect_good(f, f->n2, RMB, EJECT); /* already out: still GOOD */
    expect_no_medium(f, TUR);
    expect_good(f, f->n1, FIXED, TUR); /* the other LUN is not affected */

    /* every command that touches the medium */
    uint8_t rc10[16] = {0x25}, rc16[16] = {0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32};
    uint8_t sync10[16] = {0x35}, sync16[16] = {0x91};
    uint8_t lbas[16] = {0x9e, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24};
    uint8_t pf10[16] = {0x34, 0, 0, 0, 0, 0, 0, 0, 1}, vfy10[16] = {0x2f, 0, 0, 0, 0, 0, 0, 0, 1};
    uint8_t ws16[16] = {0x93, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    uint8_t unmap[16] = {0x42, 0, 0, 0, 0, 0, 0, 0, 24};
    uint8_t defect[16] = {0x37, 0, 0x08, 0, 0, 0, 0, 0, 4};
    const uint8_t *need[] = {TUR, r10, rc10, rc16, sync10, sync16, lbas, pf10, vfy10, defect};
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        expect_no_medium(f, need[i]);
    assert_int_equal(run_on(f, f->n1, RMB, w10, block, sizeof(block)), SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0x2, 0x3a, 0x00);
    assert_int_equal(run_on(f, f->n1, RMB, ws16, block, sizeof(block)),
                     SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0x2, 0x3a, 0x00);
    uint8_t ulist[24] = {0, 22, 0, 16};
    put_be64(ulist + 8, 0);
    put_be32(ulist + 16, 1);
    assert_int_equal(run_on(f, f->n1, RMB, unmap, ulist, sizeof(ulist)),
                     SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&f->t, 0x2, 0x3a, 0x00);

    /* and those that do not */
    uint8_t luns[16] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, sense6[16] = {0x1a, 0, 0x3f, 0, 255};
    uint8_t reqsense[16] = {0x03, 0, 0, 0, 18}, prin[16] = {0x5e, 0, 0, 0, 0, 0, 0, 0, 64};
    const uint8_t *fine[] = {INQUIRY, luns, sense6, reqsense, prin, PREVENT, ALLOW};
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
        expect_good(f, f->n1, RMB, fine[i]);

    expect_good(f, f->n2, RMB, LOAD);
    expect_good(f, f->n1, RMB, TUR);
    assert_int_equal(run(f, RMB, r10), SCSI_STATUS_GOOD);
    assert_memory_equal(f->t.iov[0].iov_base, block, sizeof(block)); /* the same data */

    expect_good(f, f->n1, RMB, EJECT_NOFLUSH);
    expect_no_medium(f, TUR);
    expect_good(f, f->n1, RMB, LOAD);
    expect_good(f, f->n1, RMB, TUR);
}

static void test_prevent_is_per_nexus(void **state)
{
    struct fx *f = *state;
    expect_good(f, f->n1, RMB, PREVENT);
    expect_prevented(f, f->n1, EJECT);
    expect_prevented(f, f->n2, EJECT); /* prevention holds the medium for everyone */
    expect_good(f, f->n1, RMB, TUR);
    expect_good(f, f->n2, RMB, ALLOW); /* n2 never prevented: changes nothing */
    expect_prevented(f, f->n2, EJECT);
    expect_good(f, f->n2, RMB, PREVENT);
    expect_good(f, f->n1, RMB, PREVENT); /* twice from one nexus counts once */
    expect_good(f, f->n1, RMB, ALLOW);
    expect_prevented(f, f->n1, EJECT); /* n2 still prevents */
    expect_good(f, f->n2, RMB, ALLOW);
    expect_good(f, f->n1, RMB, EJECT);
    expect_no_medium(f, TUR);

    /* a load is a removal operation too while prevented (libiscsi PreventAllow.Eject) */
    expect_good(f, f->n1, RMB, PREVENT);
    expect_prevented(f, f->n1, LOAD);
    expect_no_medium(f, TUR);
    expect_good(f, f->n1, RMB, ALLOW);
    expect_good(f, f->n1, RMB, LOAD);
    expect_good(f, f->n1, RMB, TUR);
}

static void test_prevent_ends_on_nexus_loss_and_resets(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, RMB);

    expect_good(f, f->n2, RMB, PREVENT);
    expect_prevented(f, f->n1, EJECT);
    scsi_nexus_lost(f->n2); /* I_T nexus loss (the session ended) */
    expect_good(f, f->n1, RMB, EJECT);
    expect_good(f, f->n1, RMB, LOAD);

    expect_good(f, f->n1, RMB, PREVENT);
    expect_good(f, f->n2, RMB, PREVENT);
    scsi_lun_reset(lu, f->n1);
    clear_uas(f);
    expect_good(f, f->n1, RMB, EJECT);
    expect_good(f, f->n1, RMB, LOAD);

    for (int cold = 0; cold < 2; cold++) {
        expect_good(f, f->n2, RMB, PREVENT);
        expect_prevented(f, f->n1, EJECT);
        scsi_target_reset(&f->tg, f->n1, cold);
        clear_uas(f);
        expect_good(f, f->n1, RMB, EJECT);
        expect_no_medium(f, TUR); /* a reset does not load the medium */
        expect_good(f, f->n1, RMB, LOAD);
    }
    assert_int_equal(lu->nprevent, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rmb_bit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fixed_lun_keeps_its_medium, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eject_and_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prevent_is_per_nexus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prevent_ends_on_nexus_loss_and_resets, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
