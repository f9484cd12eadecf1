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
#include "iscsi/node.h"
#include "scsi/scsi_internal.h"
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

/* LUN 0 as spec, and the initiator's [host] entry with these caps */
static struct tgt *up_entry(const char *spec, const char *host_limits)
{
    struct tgt_opts o;
    tgt_opts_default(&o);
    o.lun_spec = spec;
    o.host_limits = host_limits;
    return tgt_login(&o);
}

static struct rate_limit *entry_limit(struct tgt *t)
{
    struct iscsi_host_limit *l = iscsi_node_host_limit_peek(tgt_node(t), TGT_INITIATOR_NAME);
    assert_non_null(l);
    return &l->limit;
}

static uint64_t delayed(const struct rate_limit *r)
{
    return atomic_load(&r->delayed);
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

/* n writes sent together (at most 8): every one answered GOOD, in the order they were sent. */
static void writes_in_order(struct tgt *t, unsigned n)
{
    uint32_t itt[8];
    assert_true(n <= 8);
    send_writes(t, n, itt, NULL);
    for (unsigned i = 0; i < n; i++) {
        struct tgt_rsp r = next_answer(t);
        expect_good(&r, itt[i]);
    }
}

/* n writes in one read at 20 IOPS: every one answered GOOD, in the order they were sent. */
static void writes_keep_order(void)
{
    struct tgt *t = up("ram:4M,iops=20");
    enum { N = 6 };
    writes_in_order(t, N);
    assert_int_equal(tgt_pending(t), 0);
    tgt_free(t);
}

static void test_waiting_commands_keep_order(void **state)
{
    (void)state;
    writes_keep_order();
}

/* At 1 IOPS without a burst the first write goes, the next ones wait (seconds). ABORT TASK of
 * the last one is answered FUNCTION COMPLETE and it is never answered; a LOGICAL UNIT RESET then
 * ends the others, answered too; the next command sees the reset's unit attention. */
static void abort_waiting(struct tgt *t)
{
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
}

static void test_abort_of_waiting_commands(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,iops=1");
    abort_waiting(t);
    tgt_free(t);
}

/* The same with the cap on the initiator's entry, the LUN uncapped: the writes wait (the
 * entry counts them delayed, the LUN does not) and the aborts end them at once. */
static void test_abort_of_commands_waiting_for_entry(void **state)
{
    (void)state;
    struct tgt *t = up_entry("ram:4M", "iops=1");
    abort_waiting(t);
    assert_true(delayed(entry_limit(t)) >= 1);
    assert_int_equal(delayed(scsi_lun_rate_limit(scsi_target_lun(tgt_scsi_target(t), 0))), 0);
    tgt_free(t);
}

/* An entry capped at 4 IOPS, the LUN not: writes sent together wait their turns (a quarter
 * second apart: the entry counts each but the first delayed) and are answered in order. */
static void test_entry_cap_keeps_order(void **state)
{
    (void)state;
    struct tgt *t = up_entry("ram:4M", "iops=4,burst=0");
    enum { N = 4 };
    writes_in_order(t, N);
    assert_int_equal(tgt_pending(t), 0);
    assert_int_equal(delayed(entry_limit(t)), N - 1);
    tgt_free(t);
    /* an entry without caps: nothing waits */
    t = up_entry("ram:4M", "");
    writes_in_order(t, N);
    assert_int_equal(delayed(entry_limit(t)), 0);
    tgt_free(t);
}

/* A capped LUN from a capped entry: each command is charged to both. With both at 4 IOPS
 * each cap holds the writes back (each counts them delayed); with the LUN at 4 and the entry
 * far above, only the LUN does, and the entry's clock still moved (it was charged). */
static void test_command_charged_to_both(void **state)
{
    (void)state;
    enum { N = 3 };
    struct tgt *t = up_entry("ram:4M,iops=4,burst=0", "iops=4,burst=0");
    struct rate_limit *lu = scsi_lun_rate_limit(scsi_target_lun(tgt_scsi_target(t), 0));
    writes_in_order(t, N);
    assert_int_equal(delayed(lu), N - 1);
    assert_int_equal(delayed(entry_limit(t)), N - 1);
    tgt_free(t);
    t = up_entry("ram:4M,iops=4,burst=0", "iops=100000");
    lu = scsi_lun_rate_limit(scsi_target_lun(tgt_scsi_target(t), 0));
    writes_in_order(t, N);
    assert_int_equal(delayed(lu), N - 1);
    assert_int_equal(delayed(entry_limit(t)), 0);
    assert_true(atomic_load(&entry_limit(t)->tat[RATE_IOPS]) > 0);
    tgt_free(t);
}

/* The connection is lost with writes waiting: they end unanswered and nothing leaks (the
 * sanitizer build checks the last part), under a LUN's cap and under an entry's. */
static void test_connection_lost_while_waiting(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,mbps=1,burst=0");
    send_writes(t, 4, NULL, NULL);
    tgt_kill(t);
    tgt_wait_ms(t, 20);
    assert_true(tgt_closed(t));
    tgt_free(t);
    /* the same under an entry's cap: the session's end drops its reference to the limiter,
     * the node's goes with the target (the sanitizer build sees a leak or a use after free) */
    t = up_entry("ram:4M", "iops=1");
    send_writes(t, 4, NULL, NULL);
    tgt_kill(t);
    tgt_wait_ms(t, 20);
    assert_true(tgt_closed(t));
    assert_true(delayed(entry_limit(t)) >= 1);
    tgt_free(t);
}

/* A group's cap is the group's: its two initiators' sessions charge one limiter. A second
 * initiator logs in beside the first; a write from each, at 1 IOPS for the group: the second
 * one waits (the group counts it delayed) although its session sent nothing before. */
static void test_group_shares_its_cap(void **state)
{
    (void)state;
    struct tgt_opts o;
    tgt_opts_default(&o);
    o.lun_spec = "ram:4M";
    o.host_limits = "iops=1";
    o.host_group = true;
    struct tgt *t = tgt_login(&o);
    struct iscsi_host_limit *a = iscsi_node_host_limit_peek(tgt_node(t), TGT_INITIATOR_NAME);
    assert_non_null(a);
    assert_ptr_equal(a, iscsi_node_host_limit_peek(tgt_node(t), TGT_INITIATOR2_NAME));
    uint32_t itt;
    send_writes(t, 1, &itt, NULL);
    struct tgt_rsp r = next_answer(t);
    expect_good(&r, itt);
    assert_int_equal(delayed(&a->limit), 0);
    uint32_t sn = 100;
    tgt_login_session(t, TGT_INITIATOR2_NAME, sn);
    struct tgt_pdu p;
    uint8_t cdb[16] = {0};
    for (int i = 0; i < 4; i++) { /* its POWER ON unit attention (TEST UNIT READY: no cap) */
        tgt_pdu_scsi_cmd(&p, 0x500 + (uint32_t)i, sn++, cdb, 0, ISCSI_FLAG_FINAL, NULL, 0);
        tgt_send(t, &p);
        r = next_answer(t);
        if (r.status == 0)
            break;
    }
    assert_int_equal(r.status, 0);
    static uint8_t block[TGT_BLOCK];
    tgt_cdb_rw10(cdb, WRITE10, 0, 1);
    tgt_pdu_scsi_cmd(&p, 0x600, sn++, cdb, TGT_BLOCK, ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, block,
                     TGT_BLOCK);
    tgt_send(t, &p);
    r = next_answer(t);
    expect_good(&r, 0x600);
    assert_int_equal(delayed(&a->limit), 1);
    tgt_free(t);
}

/* One TMF for the LUN (ABORT TASK of itt/sn, or LOGICAL UNIT RESET): answered FUNCTION
 * COMPLETE, after the tasks it ends have ended. */
static void tmf_ok(struct tgt *t, uint8_t fn, uint32_t tmf_itt, uint32_t itt, uint32_t sn)
{
    struct tgt_pdu tmf;
    tgt_pdu_tmf(&tmf, fn, tmf_itt, itt, sn, tgt_peek_cmdsn(t), true);
    tgt_send(t, &tmf);
    struct tgt_rsp r = next_answer(t);
    assert_int_equal(r.opcode, ISCSI_OP_TMF_RSP);
    assert_int_equal(r.itt, tmf_itt);
    assert_int_equal(r.response, ISCSI_TMF_RSP_COMPLETE);
}

/* One write, answered GOOD (before the writes still waiting, whose turns are seconds off). */
static void write_goes(struct tgt *t)
{
    struct tgt_pdu p;
    uint32_t itt = write_pdu(t, &p, 7);
    tgt_send(t, &p);
    struct tgt_rsp r = next_answer(t);
    expect_good(&r, itt);
}

/* At 1 IOPS, seven writes wait behind the first (the cap's clock seven seconds ahead). The cap
 * raised to 100000 IOPS: the next write does not wait behind the slots reserved at the old
 * pace (the LUN's delayed count stays); nor after the cap is taken off and set to 1 IOPS
 * again. The waiting writes are ended by a LOGICAL UNIT RESET. No time is measured: only
 * whether the cap made a command wait. */
static void test_raised_cap_frees_reserved_slots(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,iops=1,burst=0");
    struct rate_limit *lu = scsi_lun_rate_limit(scsi_target_lun(tgt_scsi_target(t), 0));
    enum { N = 8 };
    uint32_t itt[N];
    send_writes(t, N, itt, NULL);
    struct tgt_rsp r = next_answer(t);
    expect_good(&r, itt[0]);
    uint64_t d0 = delayed(lu);
    assert_int_equal(d0, N - 1);
    struct rate_limit_conf c = {.cap = {[RATE_IOPS] = 100000}};
    rate_limit_set(lu, &c);
    write_goes(t);
    assert_int_equal(delayed(lu), d0);
    struct rate_limit_conf none = {0}, one = {.cap = {[RATE_IOPS] = 1}};
    rate_limit_set(lu, &none);
    rate_limit_set(lu, &one);
    write_goes(t);
    assert_int_equal(delayed(lu), d0);
    tmf_ok(t, ISCSI_TMF_LOGICAL_UNIT_RESET, 0x901, ISCSI_RSVD_TAG, 0);
    tgt_free(t);
}

/* At 1 IOPS three writes are charged (the clock three seconds ahead of the first's start);
 * ABORT TASK of the last, then of the one before it: each was the last slot handed out when
 * aborted, so each gives its second back: the clock is where the first write left it. */
static void test_aborted_waiting_command_gives_its_slot_back(void **state)
{
    (void)state;
    struct tgt *t = up("ram:4M,iops=1,burst=0");
    struct rate_limit *lu = scsi_lun_rate_limit(scsi_target_lun(tgt_scsi_target(t), 0));
    enum { N = 3 };
    uint32_t itt[N], sn[N];
    send_writes(t, N, itt, sn);
    struct tgt_rsp r = next_answer(t);
    expect_good(&r, itt[0]);
    uint64_t tat = atomic_load(&lu->tat[RATE_IOPS]);
    tmf_ok(t, ISCSI_TMF_ABORT_TASK, 0x900, itt[2], sn[2]);
    assert_int_equal(atomic_load(&lu->tat[RATE_IOPS]), tat - 1000000000ull);
    tmf_ok(t, ISCSI_TMF_ABORT_TASK, 0x901, itt[1], sn[1]);
    assert_int_equal(atomic_load(&lu->tat[RATE_IOPS]), tat - 2000000000ull);
    assert_int_equal(tgt_pending(t), 0);
    tgt_free(t);
}

/* When the record a waiting command keeps its state in cannot be allocated, the command still
 * waits (in its reactor's spare queue): writes are answered GOOD in their order; ABORT TASK and
 * LOGICAL UNIT RESET end the waiting ones without waiting for their turns; a lost connection
 * ends them and nothing leaks or is used after its free (the sanitizer build). Their slots are
 * not given back there (nothing kept them), which this test does not look at. */
static void test_waiting_without_a_record(void **state)
{
    (void)state;
    atomic_store(&scsi_throttle_no_record, true);
    writes_keep_order();
    struct tgt *t = up("ram:4M,iops=1");
    abort_waiting(t);
    tgt_free(t);
    t = up("ram:4M,mbps=1,burst=0");
    send_writes(t, 4, NULL, NULL);
    tgt_kill(t);
    for (unsigned waited = 0; !tgt_closed(t) && waited < PATIENCE_MS; waited += 20)
        tgt_wait_ms(t, 20);
    assert_true(tgt_closed(t));
    tgt_free(t);
    atomic_store(&scsi_throttle_no_record, false);
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
    const char *bad[] = {"ram:4M,iops=-1",
                         "ram:4M,mbps=1.5",
                         "ram:4M,burst=2m",
                         "ram:4M,burst=61s",
                         "ram:4M,burst=18446744073709552s",
                         "ram:4M,iops=",
                         "ram:4M,write-mbps=x"};
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
        cmocka_unit_test(test_abort_of_commands_waiting_for_entry),
        cmocka_unit_test(test_entry_cap_keeps_order),
        cmocka_unit_test(test_command_charged_to_both),
        cmocka_unit_test(test_group_shares_its_cap),
        cmocka_unit_test(test_connection_lost_while_waiting),
        cmocka_unit_test(test_raised_cap_frees_reserved_slots),
        cmocka_unit_test(test_aborted_waiting_command_gives_its_slot_back),
        cmocka_unit_test(test_limit_options),
        cmocka_unit_test(test_waiting_without_a_record), /* last: it sets a switch for all */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
