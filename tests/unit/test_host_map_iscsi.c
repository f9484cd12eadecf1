/* Host LUN maps (issue 29 item 3) through the iSCSI target: an initiator whose entry shows the
 * target's LUN 0 as its LUN 5 addresses it as 5 in SCSI commands and in task management
 * (RFC 7143 §11.5: the TMF's LUN field is the LUN the initiator addresses), and its 0 is no
 * LUN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "iscsi/pdu.h"
#include "scsi/scsi.h"
#include "tgt_harness.h"

#define HOST_LUN 5

static struct tgt_rsp expect(struct tgt *t, enum iscsi_opcode op)
{
    struct tgt_rsp r;
    assert_true(tgt_recv(t, &r));
    assert_int_equal(r.opcode, op);
    return r;
}

/* TEST UNIT READY to lun: the SCSI status, and the sense in *r. */
static uint8_t tur(struct tgt *t, uint64_t lun, struct tgt_rsp *r)
{
    uint8_t cdb[16] = {0};
    struct tgt_pdu p;
    uint32_t itt = tgt_new_itt(t);
    tgt_pdu_scsi_cmd(&p, itt, tgt_next_cmdsn(t), cdb, 0, ISCSI_FLAG_FINAL, NULL, 0);
    scsi_lun_to_wire(lun, p.bhs.b + BHS_LUN);
    tgt_send(t, &p);
    *r = expect(t, ISCSI_OP_SCSI_RSP);
    assert_int_equal(r->itt, itt);
    return r->status;
}

static void assert_tur_sense(struct tgt *t, uint64_t lun, uint8_t key, uint8_t asc, uint8_t ascq)
{
    struct tgt_rsp r;
    assert_int_equal(tur(t, lun, &r), 0x02);
    assert_true(r.has_sense);
    assert_int_equal(r.sense_key, key);
    assert_int_equal(r.asc, asc);
    assert_int_equal(r.ascq, ascq);
}

static uint8_t tmf(struct tgt *t, uint8_t function, uint64_t lun)
{
    struct tgt_pdu p;
    tgt_pdu_tmf(&p, function, tgt_new_itt(t), ISCSI_RSVD_TAG, 0, tgt_peek_cmdsn(t), true);
    scsi_lun_to_wire(lun, p.bhs.b + BHS_LUN);
    tgt_send(t, &p);
    return expect(t, ISCSI_OP_TMF_RSP).response;
}

/* Logged in, then given an entry that maps LUN 0 as HOST_LUN (as linerate-ctl would while
 * the session runs), its REPORTED LUNS DATA HAS CHANGED taken. */
static struct tgt *up_mapped(void)
{
    struct tgt_opts o;
    tgt_opts_default(&o);
    struct tgt *t = tgt_login(&o);
    struct scsi_target *st = tgt_scsi_target(t);
    char err[256];
    assert_int_equal(scsi_target_host_add(st, TGT_INITIATOR_NAME, err, sizeof(err)), 0);
    assert_int_equal(
        scsi_target_host_map(st, TGT_INITIATOR_NAME, HOST_LUN, 0, false, err, sizeof(err)), 0);
    assert_tur_sense(t, HOST_LUN, 0x6, 0x3f, 0x0e);
    struct tgt_rsp r;
    assert_int_equal(tur(t, HOST_LUN, &r), 0x00);
    return t;
}

/* Commands go by the host's number: 5 is the disk, 0 is nothing. */
static void test_commands_by_host_lun(void **state)
{
    (void)state;
    struct tgt *t = up_mapped();
    assert_tur_sense(t, 0, 0x5, 0x25, 0x00);
    tgt_free(t);
}

/* LOGICAL UNIT RESET of the host's 5 resets the disk (its nexus then sees 29h/03h on 5); of
 * its 0, "LUN does not exist" (§11.6.1). */
static void test_lun_reset_by_host_lun(void **state)
{
    (void)state;
    struct tgt *t = up_mapped();
    assert_int_equal(tmf(t, ISCSI_TMF_LOGICAL_UNIT_RESET, 0), ISCSI_TMF_RSP_NO_LUN);
    assert_int_equal(tmf(t, ISCSI_TMF_LOGICAL_UNIT_RESET, HOST_LUN), ISCSI_TMF_RSP_COMPLETE);
    assert_tur_sense(t, HOST_LUN, 0x6, 0x29, 0x03);
    tgt_free(t);
}

/* ABORT TASK SET and CLEAR TASK SET name the LUN by the host's number too. */
static void test_task_sets_by_host_lun(void **state)
{
    (void)state;
    struct tgt *t = up_mapped();
    assert_int_equal(tmf(t, ISCSI_TMF_ABORT_TASK_SET, 0), ISCSI_TMF_RSP_NO_LUN);
    assert_int_equal(tmf(t, ISCSI_TMF_ABORT_TASK_SET, HOST_LUN), ISCSI_TMF_RSP_COMPLETE);
    assert_int_equal(tmf(t, ISCSI_TMF_CLEAR_TASK_SET, 0), ISCSI_TMF_RSP_NO_LUN);
    assert_int_equal(tmf(t, ISCSI_TMF_CLEAR_TASK_SET, HOST_LUN), ISCSI_TMF_RSP_COMPLETE);
    struct tgt_rsp r;
    assert_int_equal(tur(t, HOST_LUN, &r), 0x00);
    tgt_free(t);
}

/* LOGICAL UNIT RESET aborts every initiator's tasks on the logical unit (SAM-5 §6.3.3), by
 * whatever number each host sent them: host A resets its LUN 0 while host B's WRITE waits for
 * its data on the same disk, which B knows as 5. B's write is aborted (no answer, its data
 * taken for nothing) and B then sees the reset's unit attention on 5 (on new_b if B's map
 * moved the disk there while the write waited: the write is still the disk's). */
static void lun_reset_reaches_other_host(uint64_t new_b)
{
    struct tgt_opts o;
    tgt_opts_default(&o);
    struct tgt *t = tgt_login(&o);
    struct scsi_target *st = tgt_scsi_target(t);
    char err[256];
    const char *host_b = "iqn.2026-12.org.linerate:host-b";
    assert_int_equal(scsi_target_host_add(st, TGT_INITIATOR_NAME, err, sizeof(err)), 0);
    assert_int_equal(scsi_target_host_add(st, host_b, err, sizeof(err)), 0);
    assert_int_equal(scsi_target_host_map(st, TGT_INITIATOR_NAME, 0, 0, false, err, sizeof(err)),
                     0);
    assert_int_equal(scsi_target_host_map(st, host_b, HOST_LUN, 0, false, err, sizeof(err)), 0);
    assert_tur_sense(t, 0, 0x6, 0x3f, 0x0e);

    uint32_t bsn = 100; /* host B's session numbers its commands itself */
    int b = tgt_login_session(t, host_b, bsn);
    uint8_t cdb[16] = {0};
    struct tgt_pdu p;
    struct tgt_rsp r;
    for (int i = 0; i < 4; i++) { /* its POWER ON (and maps) unit attentions */
        tgt_pdu_scsi_cmd(&p, 0x500 + (uint32_t)i, bsn++, cdb, 0, ISCSI_FLAG_FINAL, NULL, 0);
        scsi_lun_to_wire(HOST_LUN, p.bhs.b + BHS_LUN);
        tgt_send(t, &p);
        r = expect(t, ISCSI_OP_SCSI_RSP);
        if (r.status == 0)
            break;
    }
    assert_int_equal(r.status, 0);
    uint8_t wr[16];
    tgt_cdb_rw10(wr, 0x2a, 8, 1);
    tgt_pdu_scsi_cmd(&p, 0x600, bsn++, wr, TGT_BLOCK, ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, NULL, 0);
    scsi_lun_to_wire(HOST_LUN, p.bhs.b + BHS_LUN);
    tgt_send(t, &p);
    r = expect(t, ISCSI_OP_R2T); /* InitialR2T=Yes: it waits for its data */
    uint32_t ttt = r.ttt;
    if (new_b != HOST_LUN) { /* as `linerate-ctl unmap lun` and `map lun` would meanwhile */
        assert_int_equal(scsi_target_host_unmap(st, host_b, HOST_LUN, err, sizeof(err)), 0);
        assert_int_equal(scsi_target_host_map(st, host_b, new_b, 0, false, err, sizeof(err)), 0);
    }

    tgt_use(t, 0);
    assert_int_equal(tmf(t, ISCSI_TMF_LOGICAL_UNIT_RESET, 0), ISCSI_TMF_RSP_COMPLETE);

    tgt_use(t, b);
    static uint8_t block[TGT_BLOCK];
    tgt_pdu_data_out(&p, 0x600, ttt, 0, 0, block, TGT_BLOCK, true);
    tgt_send(t, &p);
    assert_false(tgt_recv(t, &r)); /* aborted: no answer */
    tgt_pdu_scsi_cmd(&p, 0x601, bsn++, cdb, 0, ISCSI_FLAG_FINAL, NULL, 0);
    scsi_lun_to_wire(new_b, p.bhs.b + BHS_LUN);
    tgt_send(t, &p);
    r = expect(t, ISCSI_OP_SCSI_RSP);
    assert_int_equal(r.itt, 0x601);
    assert_int_equal(r.status, 0x02);
    assert_int_equal(r.sense_key, 0x6);
    assert_int_equal(r.asc, 0x29);
    tgt_free(t);
}

static void test_lun_reset_reaches_other_host(void **state)
{
    (void)state;
    lun_reset_reaches_other_host(HOST_LUN);
}

/* The same when B's map changed while its write waited (5 unmapped, the disk mapped as 6). */
static void test_lun_reset_reaches_remapped_host(void **state)
{
    (void)state;
    lun_reset_reaches_other_host(HOST_LUN + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands_by_host_lun),
        cmocka_unit_test(test_lun_reset_by_host_lun),
        cmocka_unit_test(test_task_sets_by_host_lun),
        cmocka_unit_test(test_lun_reset_reaches_other_host),
        cmocka_unit_test(test_lun_reset_reaches_remapped_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
