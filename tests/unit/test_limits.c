/* A LUN's IOPS and MiB/s caps (",iops=", ",mbps=", ..., docs/qos.md) through the target's iSCSI
 * engine (tgt_harness.c): commands over the cap wait and are answered later, in their order;
 * a command waiting is aborted at once by ABORT TASK, LOGICAL UNIT RESET or the loss of its
 * connection, and the task management function is answered without waiting for its turn. No
 * rate is asserted (the machine is shared): only order, completion and the answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/config.h"
#include "tgt_harness.h"

#define WRITE10 0x2a
/* how long a test waits for answers it expects before it fails (never reached when they come) */
#define PATIENCE_MS 30000u

static struct tgt *up(const char *spec)
{
    struct tgt_opts o;
    tgt_opts_default(&o);
    o.lun_spec = spec;
    return tgt_login(&o);
}

/* WRITE(10) of one block at lba, its data immediate; the PDU for the caller to send. */
static uint32_t write_pdu(struct tgt *t, struct tgt_pdu *p, uint32_t lba)
{
    static uint8_t block[TGT_BLOCK];
    uint8_t cdb[16];
    tgt_cdb_rw10(cdb, WRITE10, lba, 1);
    uint32_t itt = tgt_new_itt(t);
    tgt_pdu_scsi_cmd(p, itt, tgt_next_cmdsn(t), cdb, TGT_BLOCK, ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE,
                     block, TGT_BLOCK);
    return itt;
}

/* n one-block writes at LBAs 0.., fed in one read; their ITTs and CmdSNs. */
static void send_writes(struct tgt *t, unsigned n, uint32_t *itt, uint32_t *sn)
{
    struct tgt_pdu p[8];
    const struct tgt_pdu *pp[8];
    assert_true(n <= 8);
    for (unsigned i = 0; i < n; i++) {
        if (sn)
            sn[i] = tgt_peek_cmdsn(t);
        uint32_t x = write_pdu(t, &p[i], i);
        if (itt)
            itt[i] = x;
        pp[i] = &p[i];
    }
    tgt_send_together(t, pp, n);
}

/* The next answer, waiting for it with the reactor running (its timers fire). */
static struct tgt_rsp next_answer(struct tgt *t)
{
    for (unsigned waited = 0; !tgt_pending(t) && waited < PATIENCE_MS; waited += 20)
        tgt_wait_ms(t, 20);
    struct tgt_rsp r;
    assert_true(tgt_recv(t, &r));
    return r;
}

static void expect_good(const struct tgt_rsp *r, uint32_t itt)
{
    assert_int_equal(r->opcode, ISCSI_OP_SCSI_RSP);
    assert_int_equal(r->itt, itt);
    assert_int_equal(r->status, 0);
}

/* n writes in one read at 20 IOPS: every one answered GOOD, in the order they were sent. */
static void test_waiting_commands_keep_order(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,iops=20");
    enum { N = 6 };
    uint32_t itt[N];
    send_writes(t, N, itt, NULL);
    for (unsigned i = 0; i < N; i++) {
        struct tgt_rsp r = next_answer(t);
        expect_good(&r, itt[i]);
    }
    assert_int_equal(tgt_pending(t), 0);
    tgt_free(t);
}

/* At 1 IOPS without a burst the first write goes, the next ones wait (seconds). ABORT TASK of
 * the last one is answered FUNCTION COMPLETE and it is never answered; a LOGICAL UNIT RESET then
 * ends the others, answered too; the next command sees the reset's unit attention. */
static void test_abort_of_waiting_commands(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,iops=1");
    enum { N = 5 };
    uint32_t itt[N], sn[N];
    send_writes(t, N, itt, sn);
    struct tgt_rsp r = next_answer(t);
    expect_good(&r, itt[0]);
    struct tgt_pdu tmf;
    tgt_pdu_tmf(&tmf, ISCSI_TMF_ABORT_TASK, 0x900, itt[N - 1], sn[N - 1], tgt_peek_cmdsn(t), true);
    tgt_send(t, &tmf);
    /* the answer to the TMF comes next: not the waiting writes' (their turns are seconds off) */
    r = next_answer(t);
    assert_int_equal(r.opcode, ISCSI_OP_TMF_RSP);
    assert_int_equal(r.itt, 0x900);
    assert_int_equal(r.response, ISCSI_TMF_RSP_COMPLETE);
    tgt_pdu_tmf(&tmf, ISCSI_TMF_LOGICAL_UNIT_RESET, 0x901, ISCSI_RSVD_TAG, 0, tgt_peek_cmdsn(t),
                true);
    tgt_send(t, &tmf);
    r = next_answer(t);
    assert_int_equal(r.opcode, ISCSI_OP_TMF_RSP);
    assert_int_equal(r.itt, 0x901);
    assert_int_equal(r.response, ISCSI_TMF_RSP_COMPLETE);
    assert_int_equal(tgt_pending(t), 0);
    /* TEST UNIT READY (no medium access, never capped): the reset's unit attention */
    uint8_t cdb[16] = {0};
    struct tgt_pdu tur;
    uint32_t titt = tgt_new_itt(t);
    tgt_pdu_scsi_cmd(&tur, titt, tgt_next_cmdsn(t), cdb, 0, ISCSI_FLAG_FINAL, NULL, 0);
    tgt_send(t, &tur);
    r = next_answer(t);
    assert_int_equal(r.itt, titt);
    assert_int_equal(r.status, 0x02);
    assert_int_equal(r.sense_key, 0x06);
    assert_int_equal(r.asc, 0x29);
    assert_int_equal(r.ascq, 0x03);
    assert_int_equal(tgt_pending(t), 0);
    tgt_free(t);
}

/* The connection is lost with writes waiting: they end unanswered and nothing leaks (the
 * sanitizer build checks the last part). */
static void test_connection_lost_while_waiting(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,mbps=1,burst=0");
    send_writes(t, 4, NULL, NULL);
    tgt_kill(t);
    tgt_wait_ms(t, 20);
    assert_true(tgt_closed(t));
    tgt_free(t);
}

/* The options as a config file and linerate-ctl take them, and as save writes them back. */
static void test_limit_options(void **state)
{
    (void)state;
    struct target_lun_conf l = {0};
    char err[512], out[512];
    assert_int_equal(target_parse_lun_spec("ram:4M,iops=500,read-mbps=100,write-iops=50,burst=1s",
                                           &l, err, sizeof(err)),
                     0);
    assert_int_equal(l.limits.cap[RATE_IOPS], 500);
    assert_int_equal(l.limits.cap[RATE_READ_BPS], 100ull << 20);
    assert_int_equal(l.limits.cap[RATE_WRITE_IOPS], 50);
    assert_int_equal(l.limits.burst_ms, 1000);
    assert_int_equal(target_lun_spec_format(&l, out, sizeof(out)), 0);
    assert_string_equal(out, "ram:4M,iops=500,write-iops=50,read-mbps=100,burst=1000ms");
    free(l.bs_spec);
    const char *bad[] = {"ram:4M,iops=-1",   "ram:4M,mbps=1.5", "ram:4M,burst=2m",
                         "ram:4M,burst=61s", "ram:4M,iops=",    "ram:4M,write-mbps=x"};
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&l, 0, sizeof(l));
        assert_int_equal(target_parse_lun_spec(bad[i], &l, err, sizeof(err)), -1);
    }
    struct rate_limit_conf c = {.cap = {[RATE_IOPS] = 7}};
    assert_int_equal(target_lun_limits_parse(&c, "mbps=2", err, sizeof(err)), 0);
    assert_int_equal(c.cap[RATE_IOPS], 7); /* the caps not named stay */
    assert_int_equal(c.cap[RATE_BPS], 2u << 20);
    assert_int_equal(target_lun_limits_parse(&c, "none", err, sizeof(err)), 0);
    assert_false(rate_limit_conf_any(&c));
    assert_int_equal(target_lun_limits_parse(&c, "ro", err, sizeof(err)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waiting_commands_keep_order),
        cmocka_unit_test(test_abort_of_waiting_commands),
        cmocka_unit_test(test_connection_lost_while_waiting),
        cmocka_unit_test(test_limit_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
