/* Initiator unit tests without sockets: the login state machine fed with canned Login
 * Responses, and a two-connection (MC/S) session whose connections are detached (no fd):
 * target PDUs are pushed through the receive parser and the transmit queues are inspected. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc_fail.h"
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/orphan.h"
#include "initiator/sched.h"
#include "initiator/session.h"
#include "initiator/snack.h"
#include "util/crc32c.h"

/* ---- helpers ---- */

static bool text_has(const struct iscsi_text *t, const char *kv)
{
    size_t n = strlen(kv) + 1;
    for (uint32_t off = 0; off + n <= t->len; off += (uint32_t)strlen(t->data + off) + 1)
        if (!memcmp(t->data + off, kv, n))
            return true;
    return false;
}

static void login_rsp(struct iscsi_bhs *h, uint8_t flags, uint32_t itt, uint16_t tsih,
                      uint16_t status)
{
    bhs_init(h, ISCSI_OP_LOGIN_RSP, flags);
    put_be16(h->b + BHS_TSIH, tsih);
    bhs_put32(h, BHS_ITT, itt);
    bhs_put32(h, BHS_STATSN, 7);
    bhs_put32(h, BHS_EXPCMDSN, 1);
    bhs_put32(h, BHS_MAXCMDSN, 32);
    h->b[BHS_STATUS_CLASS] = (uint8_t)(status >> 8);
    h->b[BHS_STATUS_DETAIL] = (uint8_t)status;
}

static const uint8_t isid[6] = {0x80, 1, 2, 3, 4, 1};

static void local_params(struct iscsi_params *p, uint32_t conns)
{
    iscsi_params_default(p);
    p->header_digest = true;
    p->data_digest = true;
    p->max_connections = conns;
    p->initial_r2t = false;
    p->immediate_data = true;
    p->max_recv_dsl = 262144;
}

/* ---- login state machine ---- */

static void test_login_leading_full(void **state)
{
    (void)state;
    struct iscsi_params local;
    local_params(&local, 4);
    struct ini_login l;
    ini_login_init(&l, &local, true, false, "iqn.2026-01.org.linerate:test",
                   "iqn.2026-01.org.linerate:tgt", isid, 0, 0, 0x80000000u, 1);
    struct iscsi_bhs req, rsp;
    assert_int_equal(ini_login_start(&l, &req), 0);
    assert_int_equal(req.b[0], ISCSI_OP_LOGIN_REQ | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(req.b[1],
                     ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_SECURITY << 2) | ISCSI_STAGE_OPERATIONAL);
    assert_memory_equal(req.b + BHS_ISID, isid, 6);
    assert_int_equal(get_be16(req.b + BHS_TSIH), 0);
    assert_true(text_has(&l.tx, "InitiatorName=iqn.2026-01.org.linerate:test"));
    assert_true(text_has(&l.tx, "SessionType=Normal"));
    assert_true(text_has(&l.tx, "TargetName=iqn.2026-01.org.linerate:tgt"));
    assert_true(text_has(&l.tx, "AuthMethod=None"));
    assert_int_equal(bhs_dlength(&req), l.tx.len);

    /* security stage answered, target transits to operational */
    static const char sec[] = "TargetPortalGroupTag=1\0AuthMethod=None";
    login_rsp(&rsp, ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_SECURITY << 2) | ISCSI_STAGE_OPERATIONAL,
              0x80000000u, 0, 0);
    assert_int_equal(ini_login_rx(&l, &rsp, (const uint8_t *)sec, sizeof(sec), &req), ILSTEP_SEND);
    assert_int_equal(l.state, ILS_OPERATIONAL);
    assert_int_equal(req.b[1], ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_OPERATIONAL << 2) |
                                   ISCSI_STAGE_FULL_FEATURE);
    assert_int_equal(bhs_get32(&req, BHS_EXPSTATSN), 8);
    assert_true(text_has(&l.tx, "HeaderDigest=CRC32C,None"));
    assert_true(text_has(&l.tx, "DataDigest=CRC32C,None"));
    assert_true(text_has(&l.tx, "MaxConnections=4"));
    assert_true(text_has(&l.tx, "InitialR2T=No"));
    assert_true(text_has(&l.tx, "MaxRecvDataSegmentLength=262144"));

    /* operational answers: two connections granted, digests on, target declares 65536 */
    static const char op[] = "HeaderDigest=CRC32C\0DataDigest=CRC32C\0MaxConnections=2\0"
                             "InitialR2T=Yes\0ImmediateData=Yes\0MaxBurstLength=131072\0"
                             "FirstBurstLength=65536\0DefaultTime2Wait=2\0"
                             "DefaultTime2Retain=20\0MaxOutstandingR2T=1\0DataPDUInOrder=Yes\0"
                             "DataSequenceInOrder=Yes\0ErrorRecoveryLevel=0\0"
                             "MaxRecvDataSegmentLength=65536";
    login_rsp(&rsp, ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_OPERATIONAL << 2) | ISCSI_STAGE_FULL_FEATURE,
              0x80000000u, 9, 0);
    assert_int_equal(ini_login_rx(&l, &rsp, (const uint8_t *)op, sizeof(op), &req), ILSTEP_DONE);
    assert_int_equal(l.tsih, 9);
    struct iscsi_params res;
    iscsi_neg_result(&l.neg, &res);
    assert_true(res.header_digest);
    assert_true(res.data_digest);
    assert_int_equal(res.max_connections, 2);
    assert_true(res.initial_r2t);
    assert_int_equal(res.max_burst, 131072);
    assert_int_equal(res.peer_max_recv_dsl, 65536);
    ini_login_free(&l);
}

static void test_login_refused(void **state)
{
    (void)state;
    struct iscsi_params local;
    local_params(&local, 1);
    struct ini_login l;
    ini_login_init(&l, &local, true, false, "iqn.2026-01.org.linerate:test", "iqn.x:nope", isid, 0,
                   0, 0x80000000u, 1);
    struct iscsi_bhs req, rsp;
    ini_login_start(&l, &req);
    login_rsp(&rsp, 0, 0x80000000u, 0, ISCSI_LOGIN_NOT_FOUND);
    assert_int_equal(ini_login_rx(&l, &rsp, NULL, 0, &req), ILSTEP_FAILED);
    assert_int_equal(l.status, ISCSI_LOGIN_NOT_FOUND);
    assert_int_equal(l.state, ILS_FAILED);
    ini_login_free(&l);
}

static void test_login_continuation_and_non_leading(void **state)
{
    (void)state;
    struct iscsi_params local;
    local_params(&local, 4);
    struct ini_login l;
    ini_login_init(&l, &local, false, false, "iqn.2026-01.org.linerate:test", "iqn.x:t", isid, 9, 3,
                   0x80000003u, 17);
    struct iscsi_bhs req, rsp;
    ini_login_start(&l, &req);
    assert_false(text_has(&l.tx, "SessionType=Normal")); /* leading-only key */
    assert_int_equal(get_be16(req.b + BHS_TSIH), 9);
    assert_int_equal(get_be16(req.b + BHS_CID), 3);
    assert_int_equal(bhs_get32(&req, BHS_CMDSN), 17);
    /* the target splits its answer: C bit first; we answer with an empty request, T=0 */
    static const char part1[] = "TargetPortalGroupTag=1";
    login_rsp(&rsp, ISCSI_FLAG_CONTINUE | (ISCSI_STAGE_SECURITY << 2), 0x80000003u, 0, 0);
    assert_int_equal(ini_login_rx(&l, &rsp, (const uint8_t *)part1, sizeof(part1), &req),
                     ILSTEP_SEND);
    assert_int_equal(bhs_dlength(&req), 0);
    assert_int_equal(req.b[1] & ISCSI_LOGIN_TRANSIT, 0);
    static const char part2[] = "AuthMethod=None";
    login_rsp(&rsp, ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_SECURITY << 2) | ISCSI_STAGE_OPERATIONAL,
              0x80000003u, 0, 0);
    assert_int_equal(ini_login_rx(&l, &rsp, (const uint8_t *)part2, sizeof(part2), &req),
                     ILSTEP_SEND);
    /* non-leading: only connection-scope keys are proposed */
    assert_true(text_has(&l.tx, "HeaderDigest=CRC32C,None"));
    assert_false(text_has(&l.tx, "MaxConnections=4"));
    assert_false(text_has(&l.tx, "InitialR2T=No"));
    ini_login_free(&l);
}

/* ---- a detached two-connection session ---- */

struct done_log {
    int calls;
    enum lr_err last;
    uint8_t status;
    uint32_t sense_len;
    uint8_t sense_key;
    uint32_t residual;
    uint8_t residual_kind;
    const char *what;
};

static void on_done(void *arg, const struct lr_result *r)
{
    struct done_log *d = arg;
    d->calls++;
    d->last = r->err;
    d->status = r->scsi_status;
    d->sense_len = r->sense_len;
    d->sense_key = r->sense_len > 2 ? r->sense[2] & 0xf : 0;
    d->residual = r->residual;
    d->residual_kind = r->residual_kind;
    d->what = r->what;
}

static struct reactor *R;

static struct lr_session *fake_session(unsigned nconns, uint32_t exp, uint32_t max)
{
    struct lr_session_opts o = {
        .host = "127.0.0.1", .target_name = "iqn.x:t", .lun = 1, .connections = nconns};
    struct lr_session *s = lr_session_create(R, &o);
    assert_non_null(s);
    for (unsigned i = 0; i < nconns; i++) {
        struct ini_conn *c = ini_conn_new(s, i, (uint16_t)i);
        c->state = ICS_FFP;
        c->peer_mrdsl = 8192;
        wire_set_limits(&c->w, 262144, 0); /* what conn_logged_in sets */
        s->conns[s->nconns++] = c;
    }
    s->params.immediate_data = true;
    s->params.initial_r2t = true;
    s->params.first_burst = 65536;
    s->params.max_burst = 262144;
    s->logged_in = true;
    s->cmdsn = exp;
    s->expcmdsn = exp;
    s->maxcmdsn = max;
    return s;
}

static unsigned txq_len(const struct ini_conn *c)
{
    return wire_tx_count(&c->w);
}

static const struct wire_pdu *txq_at(const struct ini_conn *c, unsigned k)
{
    const struct list_node *it = c->w.txq.next;
    while (k--)
        it = it->next;
    return list_entry(it, struct wire_pdu, node);
}

static void rsp_hdr(uint8_t *h, enum iscsi_opcode op, uint8_t flags, uint32_t itt, uint32_t statsn,
                    uint32_t exp, uint32_t max)
{
    memset(h, 0, ISCSI_BHS_LEN);
    h[0] = (uint8_t)op;
    h[1] = flags;
    put_be32(h + BHS_ITT, itt);
    put_be32(h + BHS_STATSN, statsn);
    put_be32(h + BHS_EXPCMDSN, exp);
    put_be32(h + BHS_MAXCMDSN, max);
}

static void test_mcs_cmdsn_window(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(2, 10, 13); /* window of 4 */
    static uint8_t bufs[6][4096];
    struct done_log d = {0};
    for (int i = 0; i < 6; i++)
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, bufs[i], on_done, &d), 0);
    /* four commands went out, spread over both connections, CmdSN 10..13 session-wide */
    assert_int_equal(txq_len(s->conns[0]), 2);
    assert_int_equal(txq_len(s->conns[1]), 2);
    uint32_t seen = 0;
    for (unsigned c = 0; c < 2; c++)
        for (unsigned k = 0; k < 2; k++) {
            const uint8_t *h = txq_at(s->conns[c], k)->hdr;
            assert_int_equal(h[0] & ISCSI_OPCODE_MASK, ISCSI_OP_SCSI_CMD);
            assert_int_equal(h[BHS_CDB], 0x28); /* READ(10) */
            uint32_t sn = get_be32(h + BHS_CMDSN);
            assert_true(sn >= 10 && sn <= 13);
            seen |= 1u << (sn - 10);
        }
    assert_int_equal(seen, 0xf);
    assert_int_equal(lr_session_inflight(s), 6);
    assert_int_equal(s->cmdsn, 14);

    /* Data-In with status (phase collapse) on connection 0 opens the window by two */
    const uint8_t *cmd = txq_at(s->conns[0], 0)->hdr;
    uint32_t itt = get_be32(cmd + BHS_ITT);
    uint8_t pdu[ISCSI_BHS_LEN + 4096];
    rsp_hdr(pdu, ISCSI_OP_DATA_IN, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, itt, 100, 11, 15);
    put_be24(pdu + BHS_DATA_SEG_LEN, 4096);
    memset(pdu + ISCSI_BHS_LEN, 0xab, 4096);
    assert_int_equal(ini_conn_feed(s->conns[0], pdu, sizeof(pdu)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(s->conns[0]->expstatsn, 101);
    assert_int_equal(s->maxcmdsn, 15);
    assert_int_equal(s->cmdsn, 16); /* the two queued commands got CmdSN 14 and 15 */
    assert_int_equal(lr_session_inflight(s), 5);
    int found = 0;
    for (unsigned k = 0; k < 2; k++)
        for (unsigned q = 0; q < txq_len(s->conns[k]); q++)
            if (get_be32(txq_at(s->conns[k], q)->hdr + BHS_CMDSN) >= 14)
                found++;
    assert_int_equal(found, 2);
    /* the payload landed in exactly one caller's buffer */
    int landed = 0;
    for (int i = 0; i < 6; i++)
        landed += bufs[i][0] == 0xab && bufs[i][4095] == 0xab;
    assert_int_equal(landed, 1);
    /* a stale MaxCmdSN (lower than the one we hold) never shrinks the window */
    ini_session_update_window(s, 11, 12);
    assert_int_equal(s->maxcmdsn, 15);
    lr_session_destroy(s);
}

static void test_check_condition_sense(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    static uint8_t buf[512];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 1ull << 33, 1, 512, buf, on_done, &d), 0);
    const uint8_t *cmd = txq_at(s->conns[0], 0)->hdr;
    assert_int_equal(cmd[BHS_CDB], 0x88); /* READ(16): the LBA needs 64 bits */
    uint8_t pdu[ISCSI_BHS_LEN + 20] = {0};
    rsp_hdr(pdu, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, get_be32(cmd + BHS_ITT), 5, 2, 9);
    pdu[BHS_STATUS] = 0x02;
    put_be24(pdu + BHS_DATA_SEG_LEN, 20);
    put_be16(pdu + ISCSI_BHS_LEN, 18);
    pdu[ISCSI_BHS_LEN + 2] = 0x70;
    pdu[ISCSI_BHS_LEN + 4] = 0x05;  /* ILLEGAL REQUEST */
    pdu[ISCSI_BHS_LEN + 14] = 0x21; /* LBA out of range */
    assert_int_equal(ini_conn_feed(s->conns[0], pdu, sizeof(pdu)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_SCSI_STATUS);
    assert_int_equal(d.status, 0x02);
    assert_int_equal(d.sense_len, 18);
    assert_int_equal(d.sense_key, 0x05);
    lr_session_destroy(s);
}

static void test_write_r2t_data_out(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    static uint8_t buf[65536];
    struct done_log d = {0};
    /* ImmediateData=Yes, InitialR2T=Yes: 8 KiB (the target's MRDSL) rides with the command */
    assert_int_equal(lr_write(s, 0, 128, 512, buf, on_done, &d), 0);
    struct ini_conn *c = s->conns[0];
    assert_int_equal(txq_len(c), 1);
    const struct wire_pdu *cmd = txq_at(c, 0);
    assert_int_equal(cmd->dlen, 8192);
    assert_int_equal(cmd->hdr[1] & (ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE),
                     ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE);
    assert_int_equal(get_be32(cmd->hdr + BHS_EDTL), 65536);
    uint32_t itt = get_be32(cmd->hdr + BHS_ITT);
    /* R2T for the remaining 56 KiB: seven Data-Out PDUs of 8 KiB, DataSN 0..6, F on the last */
    uint8_t r2t[ISCSI_BHS_LEN];
    rsp_hdr(r2t, ISCSI_OP_R2T, ISCSI_FLAG_FINAL, itt, 2, 2, 9);
    put_be32(r2t + BHS_TTT, 0x1234);
    put_be32(r2t + BHS_BUFFER_OFFSET, 8192);
    put_be32(r2t + BHS_DESIRED_LEN, 57344);
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c), 8);
    for (unsigned k = 1; k < 8; k++) {
        const struct wire_pdu *p = txq_at(c, k);
        assert_int_equal(p->hdr[0], ISCSI_OP_DATA_OUT);
        assert_int_equal(get_be32(p->hdr + BHS_TTT), 0x1234);
        assert_int_equal(get_be32(p->hdr + BHS_DATASN), k - 1);
        assert_int_equal(get_be32(p->hdr + BHS_BUFFER_OFFSET), 8192 * k);
        assert_int_equal(p->dlen, 8192);
        assert_int_equal(p->datacnt, 1);
        assert_ptr_equal(p->data[0].iov_base, buf + 8192 * k); /* sent from the caller's buffer */
        assert_int_equal(!!(p->hdr[1] & ISCSI_FLAG_FINAL), k == 7);
    }
    /* an R2T outside the buffer is a protocol error: the task fails, the connection drops */
    put_be32(r2t + BHS_BUFFER_OFFSET, 60000);
    put_be32(r2t + BHS_DESIRED_LEN, 8192);
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), -1);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->state, ICS_DEAD);
    lr_session_destroy(s);
}

static void test_conn_loss_keeps_session(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(2, 1, 100);
    static uint8_t buf[4][512];
    struct done_log d = {0};
    for (int i = 0; i < 4; i++)
        lr_read(s, (uint64_t)i, 1, 512, buf[i], on_done, &d);
    /* connection 0 carried two commands: one reached the socket, one did not */
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    struct ini_task *sent = txq_at(c0, 0)->arg, *unsent = txq_at(c0, 1)->arg;
    sent->cmd_sent = true;
    uint32_t unsent_sn = unsent->cmdsn;
    ini_conn_close(c0, "test: connection dropped");
    /* the sent one fails to the caller; the unsent one keeps its CmdSN and moves to conn 1 */
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_CONN_LOST);
    assert_int_equal(txq_len(c1), 3);
    assert_int_equal(get_be32(txq_at(c1, 2)->hdr + BHS_CMDSN), unsent_sn);
    assert_int_equal(lr_session_inflight(s), 3);
    /* new work goes to the survivor only */
    lr_read(s, 9, 1, 512, buf[0], on_done, &d);
    assert_int_equal(txq_len(c1), 4);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 1);
    lr_session_destroy(s); /* the rest complete as aborted */
    assert_int_equal(d.calls, 5);
    assert_int_equal(d.last, LR_ERR_ABORTED);
}

static void test_digests_and_nop(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    wire_set_digests(&c->w, true, true);
    /* a target ping (NOP-In with a TTT and 5 bytes of data) with good digests */
    uint8_t pdu[ISCSI_BHS_LEN + 4 + 8 + 4];
    rsp_hdr(pdu, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 3, 1, 8);
    put_be32(pdu + BHS_TTT, 0x77);
    put_be24(pdu + BHS_DATA_SEG_LEN, 5);
    put_le32(pdu + ISCSI_BHS_LEN, crc32c(pdu, ISCSI_BHS_LEN));
    uint8_t *data = pdu + ISCSI_BHS_LEN + 4;
    memcpy(data, "hello\0\0\0", 8);
    put_le32(data + 8, crc32c(data, 8));
    assert_int_equal(ini_conn_feed(c, pdu, ISCSI_BHS_LEN + 4 + 8 + 4), 0);
    assert_int_equal(txq_len(c), 1);
    const struct wire_pdu *p = txq_at(c, 0);
    assert_int_equal(p->hdr[0], ISCSI_OP_NOP_OUT | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(get_be32(p->hdr + BHS_TTT), 0x77);
    assert_int_equal(get_be32(p->hdr + BHS_ITT), ISCSI_RSVD_TAG);
    assert_int_equal(p->hdr_len, ISCSI_BHS_LEN + 4);
    assert_int_equal(get_le32(p->hdr + ISCSI_BHS_LEN), crc32c(p->hdr, ISCSI_BHS_LEN));
    assert_int_equal(p->dlen, 5);
    assert_memory_equal(p->data[0].iov_base, "hello", 5);
    assert_int_equal(p->trailer_len, 3 + 4);
    assert_int_equal(get_le32(p->trailer + 3), crc32c("hello\0\0\0", 8));
    /* a bad header digest ends the connection (RFC 7143 §7.8 at ERL 0) */
    pdu[ISCSI_BHS_LEN] ^= 1;
    assert_int_equal(ini_conn_feed(c, pdu, ISCSI_BHS_LEN + 4 + 8 + 4), -1);
    assert_int_equal(c->state, ICS_DEAD);
    lr_session_destroy(s);
}

/* The initiator's data is memory of the caller's, which cannot vanish: its data digests and
 * its copy-away of a finished command's queued data read it plainly, and a program that links
 * only the initiator (linerate-bench, the library's users) keeps its SIGBUS disposition
 * (util/fault_guard installs a handler only for a target's file LUN pages). cmocka has its
 * own SIGBUS handler in place while a test runs, so the test puts a marker of its own there
 * and checks nobody replaced it; it runs first, before another test could have installed
 * fault_guard's handler once and for all. */
static void sigbus_marker(int sig)
{
    (void)sig;
}

static void test_no_sigbus_handler(void **state)
{
    (void)state;
    struct sigaction mark = {.sa_handler = sigbus_marker}, saved;
    sigemptyset(&mark.sa_mask);
    assert_int_equal(sigaction(SIGBUS, &mark, &saved), 0);
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    wire_set_digests(&c->w, false, true); /* data digests: the ones that read the data */
    static uint8_t buf[65536];
    memset(buf, 0x5a, sizeof(buf));
    struct done_log d = {0};
    assert_int_equal(lr_write(s, 0, 128, 512, buf, on_done, &d), 0);
    assert_int_equal(txq_len(c), 1);
    const struct wire_pdu *cmd = txq_at(c, 0);
    assert_int_equal(cmd->dlen, 8192); /* immediate data, digested as it was queued */
    assert_int_equal(get_le32(cmd->trailer), crc32c(buf, 8192));
    /* the target answers before the command left: its queued data is copied away */
    uint8_t pdu[ISCSI_BHS_LEN] = {0};
    rsp_hdr(pdu, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, get_be32(cmd->hdr + BHS_ITT), 5, 2, 9);
    assert_int_equal(ini_conn_feed(c, pdu, sizeof(pdu)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(txq_len(c), 1);
    assert_ptr_not_equal(txq_at(c, 0)->data[0].iov_base, buf);
    struct sigaction now;
    assert_int_equal(sigaction(SIGBUS, &saved, &now), 0);
    assert_true(!(now.sa_flags & SA_SIGINFO) && now.sa_handler == sigbus_marker);
    lr_session_destroy(s);
}

/* A response for a task we do not have (a target answering twice) is ignored: the
 * connection and its other tasks carry on. */
static void test_stale_response_ignored(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    static uint8_t buf[4096];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &d), 0);
    struct ini_conn *c = s->conns[0];
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt ^ 0x10000u, 1, 1, 8);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    uint8_t din[ISCSI_BHS_LEN + 512];
    rsp_hdr(din, ISCSI_OP_DATA_IN, 0, itt ^ 0x20000u, 0, 1, 8);
    put_be24(din + BHS_DATA_SEG_LEN, 512);
    assert_int_equal(ini_conn_feed(c, din, sizeof(din)), 0);
    assert_int_equal(c->state, ICS_FFP);
    assert_int_equal(c->stale_pdus, 2);
    assert_int_equal(d.calls, 0);
    /* the real answer: no data, all of it an underflow (a GOOD READ must account for it) */
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL | ISCSI_RSP_UNDERFLOW, itt, 2, 2, 9);
    put_be32(rsp + BHS_RESIDUAL, 4096);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    lr_session_destroy(s);
}

/* The session asks for the level it is given, and never for one the library cannot perform
 * (RFC 7143 §13.20: what is agreed, the target relies on); fault rates it cannot apply are
 * refused the same way. */
static void test_erl_option(void **state)
{
    (void)state;
    struct lr_session_opts o = {.host = "127.0.0.1", .target_name = "iqn.x:t"};
    o.error_recovery_level = lr_erl_max();
    struct lr_session *s = lr_session_create(R, &o);
    assert_non_null(s);
    assert_int_equal(s->local.erl, lr_erl_max());
    lr_session_destroy(s);
    for (uint32_t erl = lr_erl_max() + 1; erl <= 3; erl++) {
        o.error_recovery_level = erl;
        errno = 0;
        assert_null(lr_session_create(R, &o));
        assert_int_equal(errno, ENOTSUP);
    }
    /* fault rates: out of range is EINVAL; in range, the connections' engines apply them */
    o.error_recovery_level = 0;
    s = lr_session_create(R, &o);
    assert_non_null(s);
    const struct {
        double digest, drop;
        int err;
    } faults[] = {{-0.1, 0, EINVAL}, {1, 0, EINVAL}, {0, 1.5, EINVAL}};
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
        struct lr_faults f = {.digest_error = faults[i].digest, .drop_pdu = faults[i].drop};
        errno = 0;
        assert_int_equal(lr_session_set_faults(s, &f), -1);
        assert_int_equal(errno, faults[i].err);
    }
    struct lr_faults none = {0, 0};
    assert_int_equal(lr_session_set_faults(s, &none), 0);
    struct lr_fault_counts fc;
    lr_session_fault_counts(s, &fc);
    assert_true(fc.digests_corrupted == 0 && fc.pdus_dropped == 0);
    lr_session_destroy(s);
}

/* Injected faults reach the connections' engines: SCSI Commands and Data-Out may be dropped
 * (what ERL 1 repairs), other PDUs never; data digests are corrupted once negotiated. The
 * session reports what its connections did. */
static void test_faults_applied(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 64);
    struct ini_conn *c = s->conns[0];
    struct lr_faults f = {.digest_error = 0.5, .drop_pdu = 0.5};
    assert_int_equal(lr_session_set_faults(s, &f), 0);
    assert_true(c->w.faults_on);
    assert_int_equal(c->w.faults.drop_ops, 1ull << ISCSI_OP_SCSI_CMD | 1ull << ISCSI_OP_DATA_OUT);
    wire_set_digests(&c->w, false, true);
    static uint8_t buf[32][512];
    struct done_log d = {0};
    for (int i = 0; i < 32; i++)
        assert_int_equal(lr_write(s, (uint64_t)i, 1, 512, buf[i], on_done, &d), 0);
    /* a target ping's answer (a NOP-Out) is never dropped */
    uint8_t nop[ISCSI_BHS_LEN];
    rsp_hdr(nop, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 1, 1, 64);
    put_be32(nop + BHS_TTT, 0x55);
    assert_int_equal(ini_conn_feed(c, nop, sizeof(nop)), 0);
    unsigned dropped = 0, corrupted = 0, n = txq_len(c);
    for (unsigned k = 0; k < n; k++) {
        const struct wire_pdu *p = txq_at(c, k);
        if ((p->hdr[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_NOP_OUT)
            assert_false(p->dropped);
        dropped += p->dropped;
        if (!p->dropped && p->dlen)
            corrupted +=
                get_le32(p->trailer + p->trailer_len - 4) != crc32c(p->data[0].iov_base, p->dlen);
    }
    assert_int_equal(n, 33);
    assert_true(dropped > 0 && dropped < 32);
    assert_true(corrupted > 0);
    struct lr_fault_counts fc;
    lr_session_fault_counts(s, &fc);
    assert_int_equal(fc.pdus_dropped, dropped);
    assert_int_equal(fc.digests_corrupted, corrupted);
    lr_session_destroy(s);
}

/* InitialR2T=No: immediate data up to the target's MRDSL, unsolicited Data-Out to
 * FirstBurstLength, then every R2T answered by its own sequence (TTT echoed, DataSN from 0,
 * offsets from the R2T, F on the last); an R2T beyond MaxBurstLength is a protocol error. */
static void test_write_unsolicited_and_r2t_sequences(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    s->params.initial_r2t = false;
    s->params.first_burst = 16384;
    s->params.max_burst = 16384;
    static uint8_t buf[65536];
    struct done_log d = {0};
    assert_int_equal(lr_write(s, 0, 128, 512, buf, on_done, &d), 0);
    struct ini_conn *c = s->conns[0];
    assert_int_equal(txq_len(c), 2);
    const struct wire_pdu *cmd = txq_at(c, 0);
    assert_int_equal(cmd->dlen, 8192); /* immediate: the target's MRDSL */
    assert_int_equal(cmd->hdr[1] & (ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE), ISCSI_CMD_WRITE);
    uint32_t itt = get_be32(cmd->hdr + BHS_ITT);
    const struct wire_pdu *u = txq_at(c, 1);
    assert_int_equal(u->hdr[0], ISCSI_OP_DATA_OUT);
    assert_int_equal(u->hdr[1], ISCSI_FLAG_FINAL);
    assert_int_equal(get_be32(u->hdr + BHS_TTT), ISCSI_RSVD_TAG);
    assert_int_equal(get_be32(u->hdr + BHS_DATASN), 0);
    assert_int_equal(get_be32(u->hdr + BHS_BUFFER_OFFSET), 8192);
    assert_int_equal(u->dlen, 8192);
    /* two R2Ts in one read */
    uint8_t r2t[2][ISCSI_BHS_LEN];
    for (unsigned k = 0; k < 2; k++) {
        rsp_hdr(r2t[k], ISCSI_OP_R2T, ISCSI_FLAG_FINAL, itt, 2, 2, 9);
        put_be32(r2t[k] + BHS_TTT, 0xa0 + k);
        put_be32(r2t[k] + BHS_R2TSN, k);
        put_be32(r2t[k] + BHS_BUFFER_OFFSET, 16384 + 16384 * k);
        put_be32(r2t[k] + BHS_DESIRED_LEN, 16384);
    }
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c), 6);
    for (unsigned k = 0; k < 4; k++) {
        const struct wire_pdu *p = txq_at(c, 2 + k);
        assert_int_equal(p->hdr[0], ISCSI_OP_DATA_OUT);
        assert_int_equal(get_be32(p->hdr + BHS_ITT), itt);
        assert_int_equal(get_be32(p->hdr + BHS_TTT), 0xa0 + k / 2);
        assert_int_equal(get_be32(p->hdr + BHS_DATASN), k % 2);
        assert_int_equal(get_be32(p->hdr + BHS_BUFFER_OFFSET), 16384 + 8192 * k);
        assert_int_equal(!!(p->hdr[1] & ISCSI_FLAG_FINAL), k % 2 == 1);
        assert_int_equal(p->dlen, 8192);
        assert_ptr_equal(p->data[0].iov_base, buf + 16384 + 8192 * k);
    }
    assert_int_equal(d.calls, 0);
    /* DesiredDataTransferLength above MaxBurstLength (§11.8.4): the task fails, the
     * connection drops */
    put_be32(r2t[0] + BHS_BUFFER_OFFSET, 0);
    put_be32(r2t[0] + BHS_DESIRED_LEN, 32768);
    assert_int_equal(ini_conn_feed(c, r2t[0], ISCSI_BHS_LEN), -1);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->state, ICS_DEAD);
    lr_session_destroy(s);
}

/* One Data-In PDU: header (+ data) as the target sends it. */
static size_t data_in(uint8_t *pdu, uint32_t itt, uint32_t datasn, uint32_t off, uint32_t len,
                      uint8_t flags, uint32_t statsn, uint32_t residual)
{
    rsp_hdr(pdu, ISCSI_OP_DATA_IN, flags, itt, statsn, 2, 9);
    put_be24(pdu + BHS_DATA_SEG_LEN, len);
    put_be32(pdu + BHS_TTT, ISCSI_RSVD_TAG);
    put_be32(pdu + BHS_DATASN, datasn);
    put_be32(pdu + BHS_BUFFER_OFFSET, off);
    put_be32(pdu + BHS_RESIDUAL, residual);
    memset(pdu + ISCSI_BHS_LEN, (int)(0x40 + datasn), len);
    return ISCSI_BHS_LEN + len;
}

/* A Data-In DataSN gap means a lost PDU: at ERL 0 nothing is retransmitted, the task fails
 * when its status arrives (§7.1); the connection and the next task carry on. */
static void test_data_in_datasn_gap(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[12288];
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 24, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    size_t n = data_in(pdu, itt, 0, 0, 4096, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    n = data_in(pdu, itt, 2, 4096, 4096, 0, 0, 0); /* DataSN 1 lost */
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 0);
    n = data_in(pdu, itt, 3, 8192, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 4, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->state, ICS_FFP);
    assert_int_equal(c->expstatsn, 5);
    /* in sequence: fine */
    assert_int_equal(lr_read(s, 0, 24, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 1)->hdr + BHS_ITT);
    for (uint32_t k = 0; k < 3; k++) {
        n = data_in(pdu, itt, k, 4096 * k, 4096,
                    k == 2 ? ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS : 0, 5, 0);
        assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    }
    assert_int_equal(d.calls, 2);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(buf[4096], 0x41);
    lr_session_destroy(s);
}

/* A data digest error on Data-In fails the task, not the connection (the PDU boundaries are
 * intact); a data digest error on a NOP-In is dropped (§7.8). */
static void test_data_in_digest_error(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    wire_set_digests(&c->w, false, true);
    static uint8_t buf[512];
    uint8_t pdu[ISCSI_BHS_LEN + 512 + 4];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 1, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    data_in(pdu, itt, 0, 0, 512, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 3, 0);
    put_le32(pdu + ISCSI_BHS_LEN + 512, crc32c(pdu + ISCSI_BHS_LEN, 512) ^ 1);
    assert_int_equal(ini_conn_feed(c, pdu, sizeof(pdu)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->state, ICS_FFP);
    /* a ping with a bad data digest is not answered */
    uint8_t nop[ISCSI_BHS_LEN + 4 + 4];
    rsp_hdr(nop, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 4, 1, 8);
    put_be32(nop + BHS_TTT, 0x99);
    put_be24(nop + BHS_DATA_SEG_LEN, 4);
    memcpy(nop + ISCSI_BHS_LEN, "ping", 4);
    put_le32(nop + ISCSI_BHS_LEN + 4, crc32c("ping", 4) ^ 1);
    unsigned before = txq_len(c);
    assert_int_equal(ini_conn_feed(c, nop, sizeof(nop)), 0);
    assert_int_equal(txq_len(c), before);
    lr_session_destroy(s);
}

/* The residual of a Data-In with status or of a SCSI Response reaches the caller, with its
 * kind: underflow (U) or overflow (O), §11.4.5; none without either bit. */
static void test_residuals_reported(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[4096];
    uint8_t pdu[ISCSI_BHS_LEN + 2048];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    data_in(pdu, itt, 0, 0, 2048, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_UNDERFLOW,
            3, 2048);
    assert_int_equal(ini_conn_feed(c, pdu, sizeof(pdu)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(d.residual, 2048);
    assert_int_equal(d.residual_kind, LR_RESIDUAL_UNDERFLOW);
    /* SCSI Response with underflow, then with overflow */
    const uint8_t flags[2] = {ISCSI_RSP_UNDERFLOW, ISCSI_RSP_OVERFLOW};
    const uint8_t kinds[2] = {LR_RESIDUAL_UNDERFLOW, LR_RESIDUAL_OVERFLOW};
    for (unsigned k = 0; k < 2; k++) {
        assert_int_equal(lr_write(s, 0, 8, 512, buf, on_done, &d), 0);
        itt = get_be32(txq_at(c, 1 + k)->hdr + BHS_ITT);
        uint8_t rsp[ISCSI_BHS_LEN];
        rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL | flags[k], itt, 4 + k, 2, 9);
        put_be32(rsp + BHS_RESIDUAL, 1024u >> k);
        assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
        assert_int_equal(d.calls, 2 + k);
        assert_int_equal(d.last, LR_OK);
        assert_int_equal(d.residual, 1024u >> k);
        assert_int_equal(d.residual_kind, kinds[k]);
    }
    /* and none: a clean response after them says so */
    assert_int_equal(lr_write(s, 0, 8, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 3)->hdr + BHS_ITT);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt, 6, 2, 9);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 4);
    assert_int_equal(d.residual, 0);
    assert_int_equal(d.residual_kind, LR_RESIDUAL_NONE);
    lr_session_destroy(s);
}

/* A READ reported good has all of its data (ERL 0): a GOOD status with no Data-In, with two
 * Data-In at one offset, or with less than the transfer minus the underflow fails the command,
 * and a DataSN gap says so rather than blaming a digest. */
static void test_read_good_needs_its_data(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 16);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[4096];
    uint8_t pdu[ISCSI_BHS_LEN + 2048];
    struct done_log d = {0};
    /* 1: status GOOD, no Data-In at all */
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt, 2, 2, 16);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_string_equal(d.what, "GOOD status without all of the Data-In");
    /* 2: two Data-In PDUs at offset 0 (DataSN in sequence), the second with status */
    assert_int_equal(lr_read(s, 0, 4, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 1)->hdr + BHS_ITT);
    size_t n = data_in(pdu, itt, 0, 0, 1024, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    n = data_in(pdu, itt, 1, 0, 1024, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 3, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 2);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_string_equal(d.what, "Data-In buffer offset out of order (DataPDUInOrder=Yes)");
    /* 3: half the data and a GOOD status that claims no residual */
    assert_int_equal(lr_read(s, 0, 4, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 2)->hdr + BHS_ITT);
    n = data_in(pdu, itt, 0, 0, 1024, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 4, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 3);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    /* ... the same with its underflow said is good */
    assert_int_equal(lr_read(s, 0, 4, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 3)->hdr + BHS_ITT);
    n = data_in(pdu, itt, 0, 0, 1024,
                ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_UNDERFLOW, 5, 1024);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 4);
    assert_int_equal(d.last, LR_OK);
    /* 4: a DataSN gap names itself */
    assert_int_equal(lr_read(s, 0, 4, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 4)->hdr + BHS_ITT);
    n = data_in(pdu, itt, 0, 0, 1024, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    n = data_in(pdu, itt, 2, 1024, 1024, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 6, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 5);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_string_equal(d.what, "Data-In DataSN out of sequence (a PDU lost or sent twice)");
    assert_int_equal(c->state, ICS_FFP); /* the task failed, not the connection */
    lr_session_destroy(s);
}

/* Residuals that say nothing usable fail the command: U and O together, or an underflow
 * larger than the transfer (RFC 7143 §11.4.5). */
static void test_residuals_impossible(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 16);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[4096];
    struct done_log d = {0};
    const uint8_t flags[2] = {ISCSI_RSP_UNDERFLOW | ISCSI_RSP_OVERFLOW, ISCSI_RSP_UNDERFLOW};
    const uint32_t residual[2] = {512, 4097};
    for (unsigned k = 0; k < 2; k++) {
        assert_int_equal(lr_write(s, 0, 8, 512, buf, on_done, &d), 0);
        uint32_t itt = get_be32(txq_at(c, k)->hdr + BHS_ITT);
        uint8_t rsp[ISCSI_BHS_LEN];
        rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL | flags[k], itt, 2 + k, 2, 16);
        put_be32(rsp + BHS_RESIDUAL, residual[k]);
        assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
        assert_int_equal(d.calls, 1 + k);
        assert_int_equal(d.last, LR_ERR_PROTOCOL);
    }
    lr_session_destroy(s);
}

/* A target that pings with data and never reads the answers cannot grow the connection
 * without bound: past INI_PING_BACKLOG_MAX of unsent answers the connection fails. */
static void test_ping_flood_bounded(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    static uint8_t nop[ISCSI_BHS_LEN + 65536];
    rsp_hdr(nop, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 1, 1, 8);
    put_be32(nop + BHS_TTT, 0x77);
    put_be24(nop + BHS_DATA_SEG_LEN, 65536);
    unsigned sent = 0;
    /* detached: nothing leaves the queue, as with a target that does not read */
    while (c->state == ICS_FFP && sent < 64) {
        ini_conn_feed(c, nop, sizeof(nop));
        sent++;
    }
    assert_int_equal(c->state, ICS_DEAD);
    assert_true(sent <= INI_PING_BACKLOG_MAX / 65536 + 1);
    lr_session_destroy(s);
}

/* Below ERL 1 an R2T never asks for data again: one that does fails its task and the
 * connection, rather than queuing the same data without end. */
static void test_r2t_again_refused(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    static uint8_t buf[65536];
    struct done_log d = {0};
    assert_int_equal(lr_write(s, 0, 128, 512, buf, on_done, &d), 0);
    struct ini_conn *c = s->conns[0];
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    uint8_t r2t[ISCSI_BHS_LEN];
    rsp_hdr(r2t, ISCSI_OP_R2T, ISCSI_FLAG_FINAL, itt, 2, 2, 9);
    put_be32(r2t + BHS_TTT, 0x1234);
    put_be32(r2t + BHS_BUFFER_OFFSET, 8192);
    put_be32(r2t + BHS_DESIRED_LEN, 8192);
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c), 2);
    /* the same range again; then one inside the immediate data */
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), -1);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->state, ICS_DEAD);
    lr_session_destroy(s);
}

/* A NOP-In that is no ping (TTT reserved) is not answered; one answering a NOP-Out of ours
 * (ITT set) carries a StatSN, one with ITT reserved does not (§11.19). */
static void test_nop_in_not_a_ping(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    c->expstatsn = 3;
    uint8_t nop[ISCSI_BHS_LEN];
    rsp_hdr(nop, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 3, 1, 8);
    put_be32(nop + BHS_TTT, ISCSI_RSVD_TAG);
    assert_int_equal(ini_conn_feed(c, nop, sizeof(nop)), 0);
    assert_int_equal(txq_len(c), 0);
    assert_int_equal(c->expstatsn, 3);
    rsp_hdr(nop, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, 0x1234, 3, 1, 8);
    put_be32(nop + BHS_TTT, ISCSI_RSVD_TAG);
    assert_int_equal(ini_conn_feed(c, nop, sizeof(nop)), 0);
    assert_int_equal(txq_len(c), 0);
    assert_int_equal(c->expstatsn, 4);
    lr_session_destroy(s);
}

/* A Reject carries the rejected header (§11.17): a rejected SCSI Command fails its task; any
 * other is counted. The connection stays, and the Reject's StatSN is acknowledged. */
static void test_reject_handling(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[512];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 1, 512, buf, on_done, &d), 0);
    uint8_t rej[2 * ISCSI_BHS_LEN];
    rsp_hdr(rej, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 6, 1, 8);
    rej[BHS_REJECT_REASON] = ISCSI_REJECT_INVALID_PDU_FIELD;
    put_be24(rej + BHS_DATA_SEG_LEN, ISCSI_BHS_LEN);
    memcpy(rej + ISCSI_BHS_LEN, txq_at(c, 0)->hdr, ISCSI_BHS_LEN);
    assert_int_equal(ini_conn_feed(c, rej, sizeof(rej)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->rejects, 1);
    assert_int_equal(c->state, ICS_FFP);
    assert_int_equal(c->expstatsn, 7);
    /* a rejected NOP-Out: nothing to fail */
    memset(rej + ISCSI_BHS_LEN, 0, ISCSI_BHS_LEN);
    rej[ISCSI_BHS_LEN] = ISCSI_OP_NOP_OUT | ISCSI_BHS_IMMEDIATE;
    put_be32(rej + BHS_STATSN, 7);
    assert_int_equal(ini_conn_feed(c, rej, sizeof(rej)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(c->rejects, 2);
    assert_int_equal(c->state, ICS_FFP);
    lr_session_destroy(s);
}

/* Drain the transmit queue as the socket would (commands count as sent). */
static void take_all(struct ini_conn *c)
{
    static uint8_t sink[1 << 20];
    while (wire_take_tx(&c->w, sink, sizeof(sink)))
        ;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* An ITT does not come back soon, even for a slot taken again at once (one command at a time
 * takes the same slot every time): at ERL 2 the target keeps answered tasks of a lost
 * connection for Time2Retain and a TASK REASSIGN names them by ITT alone (RFC 7143 §11.5.1),
 * so an ITT used again within seconds claimed an old task. 70000 commands in a row are past
 * the 32768 after which the former session-wide generation came round. */
static void test_itt_not_reused_soon(void **state)
{
    (void)state;
    enum { N = 70000 };
    static uint32_t itts[N];
    static uint8_t buf[512];
    struct lr_session *s = fake_session(1, 1, 1000);
    struct ini_conn *c = s->conns[0];
    struct done_log d = {0};
    for (uint32_t i = 0; i < N; i++) {
        assert_int_equal(lr_read(s, 0, 1, 512, buf, on_done, &d), 0);
        itts[i] = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
        assert_int_equal(itts[i] & 0x80000000u, 0); /* tags above it are login/logout/TMF */
        take_all(c);
        uint8_t rsp[ISCSI_BHS_LEN];
        rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL | ISCSI_RSP_UNDERFLOW, itts[i], i, 2 + i,
                1000 + i);
        put_be32(rsp + BHS_RESIDUAL, 512); /* no data: all of it an underflow */
        assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
        assert_int_equal(d.calls, i + 1);
    }
    assert_int_equal(d.last, LR_OK);
    qsort(itts, N, sizeof(itts[0]), cmp_u32);
    for (uint32_t i = 1; i < N; i++)
        assert_int_not_equal(itts[i - 1], itts[i]);
    lr_session_destroy(s);
}

/* Async Message (§11.9): a SCSI async event (0) and a renegotiation request (4) leave the
 * connection as it is; a logout request (1) is answered by a Logout (§11.9.1): with no task
 * outstanding at once, and for the only connection "close the session". A command issued
 * meanwhile waits for the session to log in anew (relogin.c): it is neither sent on the
 * connection logging out nor failed. */
static void test_async_message(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 8);
    struct ini_conn *c = s->conns[0];
    uint8_t am[ISCSI_BHS_LEN];
    const uint8_t events[3] = {0, 4, 1};
    for (unsigned k = 0; k < 3; k++) {
        rsp_hdr(am, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 10 + k, 1, 8);
        am[BHS_ASYNC_EVENT] = events[k];
        put_be16(am + BHS_ASYNC_PARAM3, 5);
        assert_int_equal(ini_conn_feed(c, am, sizeof(am)), 0);
        assert_int_equal(c->state, ICS_FFP);
        assert_int_equal(c->expstatsn, 11 + k);
    }
    assert_int_equal(txq_len(c), 1);
    const uint8_t *h = txq_at(c, 0)->hdr;
    assert_int_equal(h[0], ISCSI_OP_LOGOUT_REQ | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(h[1], ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_SESSION);
    assert_int_equal(get_be32(h + BHS_ITT), INI_LOGOUT_ITT);
    assert_int_equal(get_be32(h + BHS_EXPSTATSN), 13);
    /* a new command waits; the answer closes the session, which is to log in anew */
    static uint8_t buf[512];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 1, 512, buf, on_done, &d), 0);
    assert_int_equal(txq_len(c), 1);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_LOGOUT_ITT, 13, 1, 8);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), -1);
    assert_int_equal(c->state, ICS_DEAD);
    assert_int_equal(d.calls, 0);
    assert_true(s->reestablish);
    assert_int_equal(lr_session_inflight(s), 1);
    assert_int_equal(lr_read(s, 1, 1, 512, buf, on_done, &d), 0); /* still taken */
    lr_session_destroy(s);
    assert_int_equal(d.calls, 2);
    assert_int_equal(d.last, LR_ERR_ABORTED);
}

/* §11.9.1 with another connection up: the asked one takes no new command, and once its task
 * is done it is logged out with "close the connection" (its CID); that task is not failed. */
static void test_async_logout_request_drains(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(2, 1, 64);
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    c0->expstatsn = 20;
    static uint8_t buf[2][4096];
    struct done_log d = {0};
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c0, 0)->hdr + BHS_ITT);
    take_all(c0);
    uint8_t am[ISCSI_BHS_LEN];
    rsp_hdr(am, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 20, 1, 64);
    am[BHS_ASYNC_EVENT] = 1;
    put_be16(am + BHS_ASYNC_PARAM3, 10);
    assert_int_equal(ini_conn_feed(c0, am, sizeof(am)), 0);
    assert_int_equal(txq_len(c0), 0); /* its task still runs */
    /* new work, even steered there, goes to the other connection */
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &d), 0);
    assert_int_equal(txq_len(c0), 0);
    assert_int_equal(txq_len(c1), 1);
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    size_t n = data_in(pdu, itt, 0, 0, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 21, 0);
    assert_int_equal(ini_conn_feed(c0, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    ini_orphan_tick(s, reactor_now_ms());
    assert_int_equal(txq_len(c0), 1);
    const uint8_t *h = txq_at(c0, 0)->hdr;
    assert_int_equal(h[0], ISCSI_OP_LOGOUT_REQ | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(h[1], ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_CONNECTION);
    assert_int_equal(get_be16(h + BHS_CID), c0->cid);
    assert_int_equal(get_be32(h + BHS_ITT), INI_CLOGOUT_ITT + 0);
    assert_int_equal(get_be32(h + BHS_EXPSTATSN), 22);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_CLOGOUT_ITT + 0, 22, 2, 64);
    assert_int_equal(ini_conn_feed(c0, rsp, sizeof(rsp)), -1);
    assert_int_equal(c0->state, ICS_DEAD);
    assert_int_equal(c1->state, ICS_FFP); /* the session goes on */
    assert_int_equal(d.calls, 1);
    lr_session_destroy(s);
}

/* §11.9.1 on every connection (a target that wants the session gone): the last one asked
 * closes the session; the first, draining a task meanwhile, sends no Logout of its own. */
static void test_async_logout_request_all_connections(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(2, 1, 64);
    static uint8_t buf[4096];
    struct done_log d = {0};
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(s->conns[0], 0)->hdr + BHS_ITT);
    take_all(s->conns[0]);
    uint8_t am[ISCSI_BHS_LEN];
    for (unsigned i = 0; i < 2; i++) {
        rsp_hdr(am, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 5, 1, 64);
        am[BHS_ASYNC_EVENT] = 1;
        put_be16(am + BHS_ASYNC_PARAM3, 10);
        assert_int_equal(ini_conn_feed(s->conns[i], am, sizeof(am)), 0);
    }
    assert_int_equal(txq_len(s->conns[0]), 0);
    assert_int_equal(txq_len(s->conns[1]), 1);
    const uint8_t *h = txq_at(s->conns[1], 0)->hdr;
    assert_int_equal(h[1], ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_SESSION);
    /* the task on the first completes; nothing more is sent there */
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    size_t n = data_in(pdu, itt, 0, 0, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 6, 0);
    assert_int_equal(ini_conn_feed(s->conns[0], pdu, (uint32_t)n), 0);
    assert_int_equal(d.last, LR_OK);
    ini_orphan_tick(s, reactor_now_ms());
    assert_int_equal(txq_len(s->conns[0]), 0);
    lr_session_destroy(s);
}

/* The session's Logout goes out on one connection of two, and that connection is lost before
 * the answer (which would come on it, §11.14) while the other stays up: lr_session_logout
 * ends at once with LR_ERR_CONN_LOST, as initiator.h says, not later with LR_ERR_TIMEOUT, and
 * the other connection is closed. */
static void test_logout_carrier_lost(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(2, 1, 64);
    struct done_log lo = {0};
    assert_int_equal(lr_session_logout(s, on_done, &lo), 0);
    assert_int_equal(txq_len(s->conns[0]), 1);
    assert_int_equal(txq_at(s->conns[0], 0)->hdr[0], ISCSI_OP_LOGOUT_REQ | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(txq_len(s->conns[1]), 0);
    ini_conn_close(s->conns[0], "test: connection cut");
    assert_int_equal(lo.calls, 1);
    assert_int_equal(lo.last, LR_ERR_CONN_LOST);
    assert_string_equal(lo.what, "test: connection cut");
    assert_int_equal(s->conns[1]->state, ICS_DEAD);
    lr_session_destroy(s);
    assert_int_equal(lo.calls, 1);
}

/* No memory for the Logout PDU: lr_session_logout says so (-1), and its done() is not called
 * later when the connection goes (discovery.c frees its state on -1: a later call would
 * reach freed memory). */
static void test_logout_no_memory(void **state)
{
    (void)state;
    struct lr_session *s = fake_session(1, 1, 64);
    struct done_log lo = {0};
    af_fail_sized(sizeof(struct wire_pdu), 0);
    assert_int_equal(lr_session_logout(s, on_done, &lo), -1);
    assert_true(af_fired());
    ini_conn_close(s->conns[0], "test: connection cut");
    lr_session_destroy(s);
    assert_int_equal(lo.calls, 0);
}

/* No memory for the leading connection: lr_session_login fails at once (-1, ENOMEM) rather
 * than returning 0 with a done() that never comes. */
static void test_login_no_memory(void **state)
{
    (void)state;
    struct lr_session_opts o = {.host = "127.0.0.1", .port = 1, .target_name = "iqn.x:t"};
    struct lr_session *s = lr_session_create(R, &o);
    assert_non_null(s);
    struct done_log d = {0};
    af_fail_sized(sizeof(struct ini_conn), 0);
    errno = 0;
    assert_int_equal(lr_session_login(s, on_done, &d), -1);
    assert_int_equal(errno, ENOMEM);
    assert_true(af_fired());
    lr_session_destroy(s);
    assert_int_equal(d.calls, 0);
}

/* ---- ErrorRecoveryLevel 2 (orphan.c) ---- */

/* nconns connections at ERL 2, DefaultTime2Wait 0, DefaultTime2Retain 20, each connection's
 * next StatSN 5 */
static struct lr_session *erl2_session(unsigned nconns)
{
    struct lr_session *s = fake_session(nconns, 1, 64);
    s->params.erl = 2;
    s->params.default_time2wait = 0;
    s->params.default_time2retain = 20;
    for (unsigned i = 0; i < nconns; i++) {
        struct ini_conn *c = s->conns[i];
        c->w.erl = 2;
        c->expstatsn = 5;
        ini_snack_start(c);
    }
    return s;
}

/* The tag of the TASK REASSIGN for the task whose ITT is itt: its slot's (the ITT's low
 * itt_idx_bits) above INI_TMF_ITT. */
static uint32_t tmf_itt(const struct lr_session *s, uint32_t itt)
{
    return INI_TMF_ITT + (itt & ((1u << s->itt_idx_bits) - 1));
}

static void assert_reassign(const struct lr_session *s, const struct wire_pdu *p, uint32_t itt,
                            uint32_t expdatasn, uint32_t cmdsn)
{
    assert_int_equal(p->hdr[0], ISCSI_OP_TMF_REQ | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(p->hdr[1], ISCSI_FLAG_FINAL | ISCSI_TMF_TASK_REASSIGN); /* 0x88 */
    assert_int_equal(p->hdr[BHS_LUN + 1], 1);                                /* the task's LUN */
    assert_int_equal(get_be32(p->hdr + BHS_ITT), tmf_itt(s, itt));
    assert_int_equal(get_be32(p->hdr + BHS_RTT), itt);
    assert_int_equal(get_be32(p->hdr + BHS_CMDSN), cmdsn);
    assert_int_equal(get_be32(p->hdr + BHS_REFCMDSN), 0); /* reserved for TASK REASSIGN */
    assert_int_equal(get_be32(p->hdr + BHS_TMF_EXPDATASN), expdatasn);
    assert_int_equal(p->dlen, 0);
}

static const struct wire_pdu *find_pdu(const struct ini_conn *c, uint8_t op, uint32_t off,
                                       uint32_t val)
{
    for (unsigned k = 0; k < txq_len(c); k++) {
        const struct wire_pdu *p = txq_at(c, k);
        if ((p->hdr[0] & ISCSI_OPCODE_MASK) == op && get_be32(p->hdr + off) == val)
            return p;
    }
    return NULL;
}

/* The one PDU queued on carrier: Logout reason 2 (immediate) for lost's CID, ExpStatSN the lost
 * connection's last (5 in erl2_session), CmdSN the session's next. */
static void assert_cleanup_logout(const struct ini_conn *carrier, const struct ini_conn *lost,
                                  uint32_t cmdsn)
{
    assert_int_equal(txq_len(carrier), 1);
    const uint8_t *h = txq_at(carrier, 0)->hdr;
    assert_int_equal(h[0], ISCSI_OP_LOGOUT_REQ | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(h[1], ISCSI_FLAG_FINAL | ISCSI_LOGOUT_REMOVE_FOR_RECOVERY);
    assert_int_equal(get_be16(h + BHS_CID), lost->cid);
    assert_int_equal(get_be32(h + BHS_ITT), INI_CLOGOUT_ITT + lost->idx);
    assert_int_equal(get_be32(h + BHS_CMDSN), cmdsn);
    assert_int_equal(get_be32(h + BHS_EXPSTATSN), 5);
}

struct rec_log {
    int calls;
    enum lr_err last;
    bool recovered;
};

static void on_rec(void *arg, const struct lr_result *r)
{
    struct rec_log *d = arg;
    d->calls++;
    d->last = r->err;
    d->recovered = r->recovered;
}

/* §7.1.4, §11.14, §11.5.1: a connection lost at ERL 2 fails nothing. On the other connection:
 * Logout reason 2 for its CID (immediate, ExpStatSN its last), then on "closed" a TASK
 * REASSIGN per task, keeping its CmdSN (the TMF carries the next one, not taken): a read
 * resumes at the DataSN after the last received, a write answers the target's new R2Ts from
 * its buffer. */
static void test_erl2_logout_reassign_resume(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(2);
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    static uint8_t rbuf[8192], wbuf[16384];
    static uint8_t pdu[ISCSI_BHS_LEN + 8192];
    for (unsigned i = 0; i < sizeof(wbuf); i++)
        wbuf[i] = (uint8_t)(i * 7);
    struct rec_log dr = {0}, dw = {0};
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 0, 16, 512, rbuf, on_rec, &dr), 0);
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_write(s, 100, 32, 512, wbuf, on_rec, &dw), 0);
    uint32_t ritt = get_be32(txq_at(c0, 0)->hdr + BHS_ITT);
    uint32_t witt = get_be32(txq_at(c0, 1)->hdr + BHS_ITT);
    assert_int_equal(get_be32(txq_at(c0, 1)->hdr + BHS_CMDSN), 2);
    take_all(c0);
    /* the first half of the read arrives; the target acknowledged both commands */
    size_t n = data_in(pdu, ritt, 0, 0, 4096, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c0, pdu, (uint32_t)n), 0);
    ini_session_update_window(s, 3, 66);
    ini_conn_close(c0, "test: connection cut");
    assert_int_equal(dr.calls + dw.calls, 0);
    assert_int_equal(lr_session_inflight(s), 2);

    assert_cleanup_logout(c1, c0, 3);
    take_all(c1);

    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_CLOGOUT_ITT + 0, 5, 3, 66);
    put_be16(rsp + BHS_TIME2WAIT, 0);
    put_be16(rsp + BHS_TIME2RETAIN, 20);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_int_equal(txq_len(c1), 2);
    assert_reassign(s, find_pdu(c1, ISCSI_OP_TMF_REQ, BHS_RTT, ritt), ritt, 1, 3);
    assert_reassign(s, find_pdu(c1, ISCSI_OP_TMF_REQ, BHS_RTT, witt), witt, 0, 3);
    assert_int_equal(s->cmdsn, 3); /* no CmdSN taken */
    take_all(c1);

    /* read: function complete, then Data-In from DataSN 1 with the status */
    rsp_hdr(rsp, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, tmf_itt(s, ritt), 6, 3, 66);
    rsp[BHS_RESPONSE] = ISCSI_TMF_RSP_COMPLETE;
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    n = data_in(pdu, ritt, 1, 4096, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 7, 0);
    assert_int_equal(ini_conn_feed(c1, pdu, (uint32_t)n), 0);
    assert_int_equal(dr.calls, 1);
    assert_int_equal(dr.last, LR_OK);
    assert_true(dr.recovered);
    assert_int_equal(rbuf[0], 0x40);
    assert_int_equal(rbuf[4096], 0x41);
    assert_int_equal(txq_len(c1), 0); /* no SNACK: nothing missing */

    /* write: function complete, then an R2T for all of it, numbered on by the target */
    rsp_hdr(rsp, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, tmf_itt(s, witt), 8, 3, 66);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    uint8_t r2t[ISCSI_BHS_LEN];
    rsp_hdr(r2t, ISCSI_OP_R2T, ISCSI_FLAG_FINAL, witt, 9, 3, 66);
    put_be32(r2t + BHS_TTT, 0x77);
    put_be32(r2t + BHS_R2TSN, 3);
    put_be32(r2t + BHS_BUFFER_OFFSET, 0);
    put_be32(r2t + BHS_DESIRED_LEN, 16384);
    assert_int_equal(ini_conn_feed(c1, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c1), 2); /* two Data-Out, no R2T SNACK */
    for (unsigned k = 0; k < 2; k++) {
        const struct wire_pdu *p = txq_at(c1, k);
        assert_int_equal(p->hdr[0], ISCSI_OP_DATA_OUT);
        assert_int_equal(get_be32(p->hdr + BHS_ITT), witt);
        assert_int_equal(get_be32(p->hdr + BHS_TTT), 0x77);
        assert_int_equal(get_be32(p->hdr + BHS_DATASN), k);
        assert_int_equal(get_be32(p->hdr + BHS_BUFFER_OFFSET), 8192 * k);
        assert_ptr_equal(p->data[0].iov_base, wbuf + 8192 * k);
    }
    take_all(c1);
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, witt, 9, 3, 66);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_int_equal(dw.calls, 1);
    assert_int_equal(dw.last, LR_OK);
    assert_true(dw.recovered);
    assert_int_equal(c1->expstatsn, 10);
    assert_int_equal(c1->state, ICS_FFP);
    lr_session_destroy(s);
}

struct expired_log {
    int calls;
    enum lr_err last;
    const struct lr_session *s;
    enum ini_cr_state slot0_st; /* slot 0's recovery state when the callback ran */
};

static void on_expired(void *arg, const struct lr_result *r)
{
    struct expired_log *d = arg;
    d->calls++;
    d->last = r->err;
    d->slot0_st = d->s->cr[0].st;
}

/* A connection lost at ERL 2 whose only task is past its command timeout: the task fails (it
 * is not reassigned), but the target keeps it for the lost connection (§7.1.4), so the slot
 * is still cleaned up: Logout reason 2 for its CID on the other connection (§11.14). The
 * slot's recovery is set up before the task's callback runs. */
static void test_erl2_expired_tasks_still_cleaned(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(2);
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    static uint8_t rbuf[4096];
    struct expired_log d = {.s = s, .slot0_st = CR_NONE};
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 0, 8, 512, rbuf, on_expired, &d), 0);
    take_all(c0);
    for (uint32_t i = 0; i < s->ntasks; i++)
        if (s->tasks[i].state == ITS_ACTIVE)
            s->tasks[i].deadline_ms = 0; /* its command timeout has passed */
    ini_conn_close(c0, "test: connection cut");
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_CONN_LOST);
    assert_int_not_equal(d.slot0_st, CR_NONE);
    assert_int_equal(lr_session_inflight(s), 0);
    assert_cleanup_logout(c1, c0, 2);
    take_all(c1);
    /* answered: nothing to reassign, the slot is done with */
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_CLOGOUT_ITT + 0, 5, 2, 66);
    put_be16(rsp + BHS_TIME2RETAIN, 20);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    ini_orphan_tick(s, reactor_now_ms());
    assert_int_equal(txq_len(c1), 0);
    assert_int_equal(d.calls, 1);
    lr_session_destroy(s);
}

/* A task the target no longer has fails alone; one whose CmdSN the target had not
 * acknowledged was discarded by the logout (§11.14) or never arrived: on "task does not
 * exist" its command is retried on the surviving connection, same ITT and CmdSN (§7.2.1). */
static void test_erl2_refused_and_retried(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(2);
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    static uint8_t buf[3][4096];
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    struct rec_log d[3] = {{0}};
    uint32_t itt[3];
    for (int i = 0; i < 3; i++) {
        lr_session_next_conn(s, 0);
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, buf[i], on_rec, &d[i]), 0);
        itt[i] = get_be32(txq_at(c0, (unsigned)i)->hdr + BHS_ITT);
    }
    take_all(c0);
    ini_conn_close(c0, "test: connection cut");
    take_all(c1); /* the Logout */
    uint8_t rsp[ISCSI_BHS_LEN];
    /* CmdSN 1 and 2 acknowledged, 3 not */
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_CLOGOUT_ITT + 0, 5, 3, 66);
    put_be16(rsp + BHS_TIME2RETAIN, 20);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    /* every one is asked for, the target knowing best what it kept */
    assert_int_equal(txq_len(c1), 3);
    for (int i = 0; i < 3; i++)
        assert_reassign(s, find_pdu(c1, ISCSI_OP_TMF_REQ, BHS_RTT, itt[i]), itt[i], 0, 4);
    take_all(c1);
    /* task 0 (CmdSN 1, acknowledged): the target no longer has it: it fails alone */
    rsp_hdr(rsp, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, tmf_itt(s, itt[0]), 6, 3, 66);
    rsp[BHS_RESPONSE] = ISCSI_TMF_RSP_NO_TASK;
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_int_equal(d[0].calls, 1);
    assert_int_equal(d[0].last, LR_ERR_CONN_LOST);
    assert_int_equal(d[1].calls + d[2].calls, 0);
    assert_int_equal(c1->state, ICS_FFP);
    assert_int_equal(txq_len(c1), 0);
    /* task 2 (CmdSN 3, not acknowledged): discarded: its command again, same ITT and CmdSN */
    rsp_hdr(rsp, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, tmf_itt(s, itt[2]), 7, 3, 66);
    rsp[BHS_RESPONSE] = ISCSI_TMF_RSP_NO_TASK;
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_int_equal(d[2].calls, 0);
    assert_int_equal(txq_len(c1), 1);
    const struct wire_pdu *retry = txq_at(c1, 0);
    assert_int_equal(retry->hdr[0], ISCSI_OP_SCSI_CMD);
    assert_int_equal(get_be32(retry->hdr + BHS_ITT), itt[2]);
    assert_int_equal(get_be32(retry->hdr + BHS_CMDSN), 3);
    assert_int_equal(retry->hdr[BHS_CDB], 0x28);
    assert_int_equal(s->cmdsn, 4); /* no new CmdSN */
    take_all(c1);
    /* task 1: reassigned; then both answered */
    rsp_hdr(rsp, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, tmf_itt(s, itt[1]), 8, 3, 66);
    rsp[BHS_RESPONSE] = ISCSI_TMF_RSP_COMPLETE;
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    for (int i = 1; i < 3; i++) {
        size_t n = data_in(pdu, itt[i], 0, 0, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS,
                           (uint32_t)(8 + i), 0);
        assert_int_equal(ini_conn_feed(c1, pdu, (uint32_t)n), 0);
        assert_int_equal(d[i].calls, 1);
        assert_int_equal(d[i].last, LR_OK);
        assert_true(d[i].recovered);
    }
    assert_int_equal(lr_session_inflight(s), 0);
    lr_session_destroy(s);
}

/* With no connection left the tasks wait (and new commands queue) until Time2Retain after
 * Time2Wait; then they fail with LR_ERR_CONN_LOST, the queued ones with LR_ERR_NO_CONN. */
static void test_erl2_time2retain_expiry(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(1);
    s->params.default_time2retain = 2;
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[2][4096];
    struct rec_log d = {0}, q = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_rec, &d), 0);
    take_all(c);
    ini_session_update_window(s, 2, 65);
    uint64_t t0 = reactor_now_ms();
    ini_conn_close(c, "test: connection cut");
    assert_int_equal(d.calls, 0);
    assert_true(ini_orphan_recovering(s));
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_rec, &q), 0); /* queued */
    ini_orphan_advance(s, t0 + 1000);
    assert_int_equal(d.calls + q.calls, 0);
    /* Time2Retain runs from the loss (t0 or a little later on a loaded machine) */
    uint64_t retain = s->cr[0].retain_until;
    assert_true(retain >= t0 + 2000 && retain <= reactor_now_ms() + 2000);
    ini_orphan_advance(s, retain);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_CONN_LOST);
    assert_int_equal(q.calls, 1);
    assert_int_equal(q.last, LR_ERR_NO_CONN);
    assert_int_equal(lr_session_inflight(s), 0);
    lr_session_destroy(s);
}

/* Async event 2 at ERL 2 (§11.9.1): the named connection is dropped by us at once, and its
 * tasks recover with Parameter2 as Time2Wait: no Logout before it has passed. */
static void test_erl2_async_drop_notice(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(2);
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    static uint8_t buf[4096];
    struct rec_log d = {0};
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_rec, &d), 0);
    take_all(c0);
    ini_session_update_window(s, 2, 65);
    uint8_t am[ISCSI_BHS_LEN];
    rsp_hdr(am, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 5, 2, 65);
    am[BHS_ASYNC_EVENT] = 2;
    put_be16(am + BHS_ASYNC_PARAM1, c0->cid);
    put_be16(am + BHS_ASYNC_PARAM2, 1);
    put_be16(am + BHS_ASYNC_PARAM3, 10);
    uint64_t t0 = reactor_now_ms();
    assert_int_equal(ini_conn_feed(c1, am, sizeof(am)), 0);
    assert_int_equal(c0->state, ICS_DEAD);
    assert_int_equal(c1->state, ICS_FFP);
    assert_int_equal(d.calls, 0);
    assert_int_equal(txq_len(c1), 0); /* Time2Wait 1 s first */
    /* the wait runs from when the event was handled, at t0 or a little later on a loaded
     * machine: the logout goes once that deadline is reached, not a millisecond before */
    uint64_t due = s->cr[0].wait_until;
    assert_true(due >= t0 + 1000 && due <= reactor_now_ms() + 1000);
    ini_orphan_advance(s, due - 1);
    assert_int_equal(txq_len(c1), 0);
    ini_orphan_advance(s, due);
    assert_int_equal(txq_len(c1), 1);
    const uint8_t *h = txq_at(c1, 0)->hdr;
    assert_int_equal(h[1], ISCSI_FLAG_FINAL | ISCSI_LOGOUT_REMOVE_FOR_RECOVERY);
    assert_int_equal(get_be16(h + BHS_CID), c0->cid);
    assert_int_equal(s->cr[0].retain_until, s->cr[0].wait_until + 10000);
    lr_session_destroy(s);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_ABORTED);
}

/* Async event 3 at ERL 2 (§11.9.1): every connection of the session is dropped by us at once;
 * with none left each slot's cleanup is a login with its CID (reinstatement), and the tasks
 * wait, kept for Parameter3 (Time2Retain) after Parameter2 (Time2Wait). */
static void test_erl2_async_session_drop(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(2);
    static uint8_t buf[2][4096];
    struct rec_log d = {0};
    for (int i = 0; i < 2; i++) {
        lr_session_next_conn(s, i);
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, buf[i], on_rec, &d), 0);
        take_all(s->conns[i]);
    }
    ini_session_update_window(s, 3, 66);
    uint8_t am[ISCSI_BHS_LEN];
    rsp_hdr(am, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 5, 3, 66);
    am[BHS_ASYNC_EVENT] = 3;
    put_be16(am + BHS_ASYNC_PARAM2, 0);
    put_be16(am + BHS_ASYNC_PARAM3, 7);
    uint64_t t0 = reactor_now_ms();
    assert_int_equal(ini_conn_feed(s->conns[1], am, sizeof(am)), -1);
    uint64_t t1 = reactor_now_ms();
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s->conns[i]->state, ICS_DEAD);
        assert_int_equal(s->cr[i].st, CR_RELOGIN);
        /* kept 7 s after the drop (Time2Wait 0); the two drops may fall in different
         * milliseconds, and a slot's wait may be restarted by the other's drop */
        assert_true(s->cr[i].retain_until >= t0 + 7000);
        assert_true(s->cr[i].retain_until <= t1 + 7000);
    }
    assert_int_equal(d.calls, 0);
    assert_int_equal(lr_session_inflight(s), 2);
    assert_true(ini_orphan_recovering(s));
    lr_session_destroy(s);
    assert_int_equal(d.calls, 2);
}

/* "Task still allegiant" (§11.6.1): the target had not let go of the old connection; the
 * task is not failed: the CID is logged out again and the task reassigned again. */
static void test_erl2_still_allegiant_asks_again(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(2);
    struct ini_conn *c0 = s->conns[0], *c1 = s->conns[1];
    static uint8_t buf[4096];
    struct rec_log d = {0};
    lr_session_next_conn(s, 0);
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_rec, &d), 0);
    uint32_t itt = get_be32(txq_at(c0, 0)->hdr + BHS_ITT);
    take_all(c0);
    ini_session_update_window(s, 2, 65);
    ini_conn_close(c0, "test: connection cut");
    take_all(c1);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_CLOGOUT_ITT + 0, 5, 2, 65);
    put_be16(rsp + BHS_TIME2RETAIN, 20);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_reassign(s, txq_at(c1, 0), itt, 0, 2);
    take_all(c1);
    rsp_hdr(rsp, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, tmf_itt(s, itt), 6, 2, 65);
    rsp[BHS_RESPONSE] = ISCSI_TMF_RSP_TASK_ALLEGIANT;
    uint64_t t0 = reactor_now_ms();
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 0);
    assert_int_equal(c1->outstanding, 0);
    assert_int_equal(txq_len(c1), 0);
    /* asked again INI_ERL2_ALLEGIANT_MS after the answer was handled (t0 or a little later) */
    assert_true(s->cr[0].wait_until >= t0 + 50);
    ini_orphan_advance(s, s->cr[0].wait_until);
    assert_int_equal(txq_len(c1), 1); /* the Logout again */
    const uint8_t *h = txq_at(c1, 0)->hdr;
    assert_int_equal(h[1], ISCSI_FLAG_FINAL | ISCSI_LOGOUT_REMOVE_FOR_RECOVERY);
    assert_int_equal(get_be16(h + BHS_CID), c0->cid);
    take_all(c1);
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_CLOGOUT_ITT + 0, 7, 2, 65);
    put_be16(rsp + BHS_TIME2RETAIN, 20);
    assert_int_equal(ini_conn_feed(c1, rsp, sizeof(rsp)), 0);
    assert_int_equal(txq_len(c1), 1);
    assert_reassign(s, txq_at(c1, 0), itt, 0, 2);
    lr_session_destroy(s);
}

/* With no connection left the slot logs in again: non-leading, the session's TSIH and ISID and
 * the lost connection's CID, so that the target logs the old one out implicitly (§6.3.4);
 * then its tasks are reassigned on the new connection. */
static void test_erl2_reinstatement_login(void **state)
{
    (void)state;
    struct lr_session *s = erl2_session(1);
    s->tsih = 0x1234;
    struct ini_conn *c0 = s->conns[0];
    static uint8_t buf[4096];
    struct rec_log d = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_rec, &d), 0);
    uint32_t itt = get_be32(txq_at(c0, 0)->hdr + BHS_ITT);
    take_all(c0);
    ini_session_update_window(s, 2, 65);
    ini_conn_close(c0, "test: connection cut");
    assert_int_equal(s->cr[0].st, CR_RELOGIN);
    /* what ini_session_reconnect does, on a detached connection */
    struct ini_conn *c = ini_conn_new(s, 0, c0->cid);
    c->retired = c0;
    c->reconnect = true;
    s->conns[0] = c;
    c->login_active = true;
    c->state = ICS_LOGIN;
    ini_session_conn_connected(c);
    assert_int_equal(txq_len(c), 1);
    const uint8_t *h = txq_at(c, 0)->hdr;
    assert_int_equal(h[0] & ISCSI_OPCODE_MASK, ISCSI_OP_LOGIN_REQ);
    assert_int_equal(get_be16(h + BHS_TSIH), 0x1234);
    assert_int_equal(get_be16(h + BHS_CID), c0->cid);
    assert_memory_equal(h + BHS_ISID, s->isid, 6);
    assert_int_equal(get_be32(h + BHS_EXPSTATSN), 5); /* the lost connection's (§11.12) */
    take_all(c);
    /* security, then operational stage, then full feature phase */
    uint8_t pdu[ISCSI_BHS_LEN + 256];
    struct iscsi_bhs *rsp = (struct iscsi_bhs *)pdu;
    static const char sec[] = "AuthMethod=None";
    login_rsp(rsp, ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_SECURITY << 2) | ISCSI_STAGE_OPERATIONAL,
              INI_LOGIN_ITT + 0, 0x1234, 0);
    put_be24(pdu + BHS_DATA_SEG_LEN, sizeof(sec));
    memset(pdu + ISCSI_BHS_LEN, 0, 256);
    memcpy(pdu + ISCSI_BHS_LEN, sec, sizeof(sec));
    assert_int_equal(ini_conn_feed(c, pdu, ISCSI_BHS_LEN + 16), 0);
    assert_int_equal(txq_len(c), 1);
    take_all(c);
    static const char op[] = "HeaderDigest=None\0DataDigest=None\0MaxRecvDataSegmentLength=8192";
    login_rsp(rsp, ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_OPERATIONAL << 2) | ISCSI_STAGE_FULL_FEATURE,
              INI_LOGIN_ITT + 0, 0x1234, 0);
    bhs_put32(rsp, BHS_EXPCMDSN, 2);
    bhs_put32(rsp, BHS_MAXCMDSN, 65);
    put_be24(pdu + BHS_DATA_SEG_LEN, sizeof(op));
    memset(pdu + ISCSI_BHS_LEN, 0, 256);
    memcpy(pdu + ISCSI_BHS_LEN, op, sizeof(op));
    assert_int_equal(ini_conn_feed(c, pdu, ISCSI_BHS_LEN + ((sizeof(op) + 3) & ~3u)), 0);
    assert_int_equal(c->state, ICS_FFP);
    assert_int_equal(c->w.erl, 2);
    /* the task is reassigned on it */
    assert_int_equal(txq_len(c), 1);
    assert_reassign(s, txq_at(c, 0), itt, 0, 2);
    assert_int_equal(get_be32(txq_at(c, 0)->hdr + BHS_EXPSTATSN), 8); /* login StatSN 7 + 1 */
    assert_int_equal(d.calls, 0);
    lr_session_destroy(s);
    assert_int_equal(d.calls, 1);
}

/* ---- ErrorRecoveryLevel 1 (snack.c) ---- */

/* A session whose connection negotiated ERL 1, its next StatSN expstatsn. */
static struct lr_session *erl1_session(uint32_t expstatsn)
{
    struct lr_session *s = fake_session(1, 1, 64);
    struct ini_conn *c = s->conns[0];
    s->params.erl = 1;
    c->w.erl = 1;
    c->expstatsn = expstatsn;
    ini_snack_start(c);
    return s;
}

static void assert_snack(const struct wire_pdu *p, uint8_t type, uint32_t itt, uint32_t beg,
                         uint32_t run, uint32_t expstatsn)
{
    assert_int_equal(p->hdr[0], ISCSI_OP_SNACK);
    assert_int_equal(p->hdr[1], ISCSI_FLAG_FINAL | type);
    assert_int_equal(get_be32(p->hdr + BHS_ITT), itt);
    assert_int_equal(get_be32(p->hdr + BHS_TTT), ISCSI_RSVD_TAG);
    assert_int_equal(get_be32(p->hdr + BHS_EXPSTATSN), expstatsn);
    assert_int_equal(get_be32(p->hdr + 40), beg); /* BegRun */
    assert_int_equal(get_be32(p->hdr + 44), run); /* RunLength */
    assert_int_equal(p->dlen, 0);
}

/* A PDU of header + data (a multiple of 4) with its data digest appended, good or bad. */
static size_t with_ddigest(uint8_t *out, const uint8_t *pdu, size_t n, bool bad)
{
    memcpy(out, pdu, n);
    if (n == ISCSI_BHS_LEN)
        return n;
    put_le32(out + n, crc32c(pdu + ISCSI_BHS_LEN, n - ISCSI_BHS_LEN) ^ (bad ? 1u : 0u));
    return n + 4;
}

/* §7.9: a DataSN gap is answered by a Data SNACK for the missing run; the status that arrives
 * meanwhile waits, unacknowledged (ExpStatSN stays), until the retransmission fills the hole;
 * then the task completes with the right data. */
static void test_erl1_data_in_gap_snack(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[12288];
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 24, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    take_all(c);
    size_t n = data_in(pdu, itt, 0, 0, 4096, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(txq_len(c), 0);
    /* DataSN 1 lost: the last one arrives with the status */
    n = data_in(pdu, itt, 2, 8192, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 5, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(txq_len(c), 1);
    assert_snack(txq_at(c, 0), 0, itt, 1, 1, 5);
    assert_int_equal(d.calls, 0);
    assert_int_equal(c->expstatsn, 5); /* not acknowledged while data is missing */
    /* the retransmission of DataSN 1 completes the task */
    n = data_in(pdu, itt, 1, 4096, 4096, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(c->expstatsn, 6);
    assert_int_equal(buf[0], 0x40);
    assert_int_equal(buf[4096], 0x41);
    assert_int_equal(buf[8191], 0x41);
    assert_int_equal(buf[8192], 0x42);
    assert_int_equal(c->state, ICS_FFP);
    lr_session_destroy(s);
}

/* A status whose StatSN shows responses lost, while the recovery PDUs queued already fill
 * INI_RESEND_BACKLOG_MAX: the Status SNACK is refused and the connection fails, which ends
 * the task (LR_ERR_CONN_LOST). Its status is not taken after that: the task completes once. */
static void test_erl1_status_after_conn_failed(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[4096];
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    take_all(c);
    c->resend_unsent = INI_RESEND_BACKLOG_MAX; /* what the target asked for and did not read */
    /* all the data and the status, StatSN 9: 5..8 never came */
    size_t n = data_in(pdu, itt, 0, 0, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 9, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), -1);
    assert_int_equal(c->state, ICS_DEAD);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_CONN_LOST);
    assert_int_equal(lr_session_inflight(s), 0);
    lr_session_destroy(s);
}

/* A Logout Response whose StatSN shows responses lost, while the Status SNACK for them cannot
 * be queued (INI_RESEND_BACKLOG_MAX full): the connection fails, but the target answered the
 * Logout, so lr_session_logout completes with LR_OK, not LR_ERR_CONN_LOST. */
static void test_erl1_logout_answered_snack_refused(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    struct done_log lo = {0};
    assert_int_equal(lr_session_logout(s, on_done, &lo), 0);
    assert_int_equal(txq_len(c), 1);
    assert_int_equal(txq_at(c, 0)->hdr[0], ISCSI_OP_LOGOUT_REQ | ISCSI_BHS_IMMEDIATE);
    take_all(c);
    c->resend_unsent = INI_RESEND_BACKLOG_MAX; /* what the target asked for and did not read */
    /* the answer, StatSN 7: 5 and 6 never came */
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, INI_LOGOUT_ITT, 7, 1, 64);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), -1);
    assert_int_equal(c->state, ICS_DEAD);
    assert_int_equal(lo.calls, 1);
    assert_int_equal(lo.last, LR_OK);
    lr_session_destroy(s);
}

/* §7.8: a Data-In with a bad data digest is missing itself (Data SNACK for it); a SCSI
 * Response whose ExpDataSN is past the last DataSN received shows the tail lost (§11.4.8). */
static void test_erl1_data_digest_and_expdatasn(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    wire_set_digests(&c->w, false, true);
    static uint8_t buf[12288];
    static uint8_t pdu[ISCSI_BHS_LEN + 4096], wire_bytes[ISCSI_BHS_LEN + 4096 + 4];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 24, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    take_all(c);
    size_t n = data_in(pdu, itt, 0, 0, 4096, 0, 0, 0);
    n = with_ddigest(wire_bytes, pdu, n, false);
    assert_int_equal(ini_conn_feed(c, wire_bytes, (uint32_t)n), 0);
    n = data_in(pdu, itt, 1, 4096, 4096, 0, 0, 0);
    n = with_ddigest(wire_bytes, pdu, n, true);
    assert_int_equal(ini_conn_feed(c, wire_bytes, (uint32_t)n), 0);
    assert_int_equal(txq_len(c), 1);
    assert_snack(txq_at(c, 0), 0, itt, 1, 1, 5);
    /* DataSN 2 never arrives; the SCSI Response says three were sent */
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt, 5, 2, 64);
    put_be32(rsp + BHS_EXPDATASN, 3);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(txq_len(c), 2);
    assert_snack(txq_at(c, 1), 0, itt, 2, 1, 5);
    assert_int_equal(d.calls, 0);
    assert_int_equal(c->expstatsn, 5);
    /* the retransmissions, in any order */
    n = data_in(pdu, itt, 2, 8192, 4096, 0, 0, 0);
    n = with_ddigest(wire_bytes, pdu, n, false);
    assert_int_equal(ini_conn_feed(c, wire_bytes, (uint32_t)n), 0);
    assert_int_equal(d.calls, 0);
    n = data_in(pdu, itt, 1, 4096, 4096, 0, 0, 0);
    n = with_ddigest(wire_bytes, pdu, n, false);
    assert_int_equal(ini_conn_feed(c, wire_bytes, (uint32_t)n), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(buf[4096], 0x41);
    assert_int_equal(buf[12287], 0x42);
    assert_int_equal(c->expstatsn, 6);
    lr_session_destroy(s);
}

/* §7.9: a StatSN gap is a lost response: Status SNACK for the run, ExpStatSN stays at the
 * first missing one until the retransmissions arrive. A response with a bad data digest is
 * discarded and asked for again (§7.8). */
static void test_erl1_statsn_gap_snack(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    wire_set_digests(&c->w, false, true);
    static uint8_t buf[2][512];
    struct done_log d = {0};
    assert_int_equal(lr_write(s, 0, 1, 512, buf[0], on_done, &d), 0);
    assert_int_equal(lr_write(s, 1, 1, 512, buf[1], on_done, &d), 0);
    uint32_t itt_a = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    uint32_t itt_b = get_be32(txq_at(c, 1)->hdr + BHS_ITT);
    take_all(c);
    /* B's response (StatSN 7) arrives; 5 (A's) and 6 (a Reject, say) were lost */
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt_b, 7, 3, 64);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 1); /* B is complete: its status needs no data */
    assert_int_equal(txq_len(c), 1);
    assert_snack(txq_at(c, 0), 1, ISCSI_RSVD_TAG, 5, 2, 5);
    assert_int_equal(c->expstatsn, 5);
    /* A's response comes back with sense data and a bad digest: discarded, asked again */
    uint8_t sense_rsp[ISCSI_BHS_LEN + 20], wire_bytes[ISCSI_BHS_LEN + 20 + 4];
    rsp_hdr(sense_rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt_a, 5, 3, 64);
    sense_rsp[BHS_STATUS] = 0x02;
    put_be24(sense_rsp + BHS_DATA_SEG_LEN, 20);
    memset(sense_rsp + ISCSI_BHS_LEN, 0, 20);
    put_be16(sense_rsp + ISCSI_BHS_LEN, 18);
    sense_rsp[ISCSI_BHS_LEN + 2] = 0x70;
    sense_rsp[ISCSI_BHS_LEN + 4] = 0x06;
    size_t n = with_ddigest(wire_bytes, sense_rsp, sizeof(sense_rsp), true);
    assert_int_equal(ini_conn_feed(c, wire_bytes, (uint32_t)n), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(txq_len(c), 2);
    assert_snack(txq_at(c, 1), 1, ISCSI_RSVD_TAG, 5, 1, 5);
    n = with_ddigest(wire_bytes, sense_rsp, sizeof(sense_rsp), false);
    assert_int_equal(ini_conn_feed(c, wire_bytes, (uint32_t)n), 0);
    assert_int_equal(d.calls, 2);
    assert_int_equal(d.last, LR_SCSI_STATUS);
    assert_int_equal(d.sense_key, 0x06);
    assert_int_equal(c->expstatsn, 6);
    /* StatSN 6 retransmitted (a Reject of a NOP-Out): ExpStatSN moves past B's too */
    uint8_t rej[2 * ISCSI_BHS_LEN], rej_wire[2 * ISCSI_BHS_LEN + 4];
    rsp_hdr(rej, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 6, 3, 64);
    rej[BHS_REJECT_REASON] = ISCSI_REJECT_PROTOCOL_ERROR;
    put_be24(rej + BHS_DATA_SEG_LEN, ISCSI_BHS_LEN);
    memset(rej + ISCSI_BHS_LEN, 0, ISCSI_BHS_LEN);
    rej[ISCSI_BHS_LEN] = ISCSI_OP_NOP_OUT | ISCSI_BHS_IMMEDIATE;
    n = with_ddigest(rej_wire, rej, sizeof(rej), false);
    assert_int_equal(ini_conn_feed(c, rej_wire, (uint32_t)n), 0);
    assert_int_equal(c->expstatsn, 8);
    assert_int_equal(c->state, ICS_FFP);
    lr_session_destroy(s);
}

/* §7.8/§7.2.1: a Reject (reason 0x02) of a SCSI Command whose immediate data was damaged is
 * answered by the same command again: same ITT, CmdSN, CDB, immediate data; the task goes on.
 * A Reject 0x02 of a Data-Out fails nothing (the target sends a recovery R2T). */
static void test_erl1_reject_digest_retries_command(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[65536];
    struct done_log d = {0};
    assert_int_equal(lr_write(s, 0, 128, 512, buf, on_done, &d), 0);
    uint8_t cmd[ISCSI_BHS_LEN];
    memcpy(cmd, txq_at(c, 0)->hdr, ISCSI_BHS_LEN);
    take_all(c);
    uint8_t rej[2 * ISCSI_BHS_LEN];
    rsp_hdr(rej, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 5, 1, 64);
    rej[BHS_REJECT_REASON] = ISCSI_REJECT_DIGEST_ERROR;
    put_be24(rej + BHS_DATA_SEG_LEN, ISCSI_BHS_LEN);
    memcpy(rej + ISCSI_BHS_LEN, cmd, ISCSI_BHS_LEN);
    assert_int_equal(ini_conn_feed(c, rej, sizeof(rej)), 0);
    assert_int_equal(d.calls, 0);
    assert_int_equal(txq_len(c), 1);
    const struct wire_pdu *p = txq_at(c, 0);
    assert_memory_equal(p->hdr, cmd, BHS_EXPSTATSN); /* opcode .. CmdSN unchanged */
    assert_memory_equal(p->hdr + BHS_CDB, cmd + BHS_CDB, 16);
    assert_int_equal(get_be32(p->hdr + BHS_EXPSTATSN), 6);
    assert_int_equal(p->dlen, 8192);
    assert_ptr_equal(p->data[0].iov_base, buf);
    assert_int_equal(c->retries, 1);
    assert_int_equal(c->expstatsn, 6);
    take_all(c);
    /* a Reject 0x02 of a Data-Out: nothing to do but wait for the recovery R2T */
    memset(rej + ISCSI_BHS_LEN, 0, ISCSI_BHS_LEN);
    rej[ISCSI_BHS_LEN] = ISCSI_OP_DATA_OUT;
    put_be32(rej + ISCSI_BHS_LEN + BHS_ITT, get_be32(cmd + BHS_ITT));
    put_be32(rej + BHS_STATSN, 6);
    assert_int_equal(ini_conn_feed(c, rej, sizeof(rej)), 0);
    assert_int_equal(d.calls, 0);
    assert_int_equal(txq_len(c), 0);
    assert_int_equal(c->state, ICS_FFP);
    lr_session_destroy(s);
}

/* R2Ts at ERL 1: an R2TSN gap asks for the missing R2T (Data/R2T SNACK, §7.9); an R2T for a
 * range already sent (a recovery R2T, §7.8, numbered before the next expected) is answered
 * with the data again under its new TTT. */
static void test_erl1_recovery_r2t(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    s->params.max_burst = 16384;
    static uint8_t buf[65536];
    struct done_log d = {0};
    assert_int_equal(lr_write(s, 0, 128, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    take_all(c);
    uint8_t r2t[ISCSI_BHS_LEN];
    rsp_hdr(r2t, ISCSI_OP_R2T, ISCSI_FLAG_FINAL, itt, 5, 2, 64);
    put_be32(r2t + BHS_TTT, 0x10);
    put_be32(r2t + BHS_R2TSN, 0);
    put_be32(r2t + BHS_BUFFER_OFFSET, 8192);
    put_be32(r2t + BHS_DESIRED_LEN, 16384);
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c), 2);
    take_all(c);
    /* R2TSN 1 lost: R2TSN 2 arrives */
    put_be32(r2t + BHS_TTT, 0x12);
    put_be32(r2t + BHS_R2TSN, 2);
    put_be32(r2t + BHS_BUFFER_OFFSET, 40960);
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c), 3);
    assert_snack(txq_at(c, 0), 0, itt, 1, 1, 5);
    assert_int_equal(get_be32(txq_at(c, 1)->hdr + BHS_TTT), 0x12);
    take_all(c);
    /* a recovery R2T for the first range (8 KiB of it), new TTT, numbered before */
    put_be32(r2t + BHS_TTT, 0x20);
    put_be32(r2t + BHS_R2TSN, 0);
    put_be32(r2t + BHS_BUFFER_OFFSET, 16384);
    put_be32(r2t + BHS_DESIRED_LEN, 8192);
    assert_int_equal(ini_conn_feed(c, r2t, sizeof(r2t)), 0);
    assert_int_equal(txq_len(c), 1);
    const struct wire_pdu *p = txq_at(c, 0);
    assert_int_equal(p->hdr[0], ISCSI_OP_DATA_OUT);
    assert_int_equal(p->hdr[1], ISCSI_FLAG_FINAL);
    assert_int_equal(get_be32(p->hdr + BHS_TTT), 0x20);
    assert_int_equal(get_be32(p->hdr + BHS_DATASN), 0);
    assert_int_equal(get_be32(p->hdr + BHS_BUFFER_OFFSET), 16384);
    assert_ptr_equal(p->data[0].iov_base, buf + 16384);
    assert_int_equal(d.calls, 0);
    assert_int_equal(c->state, ICS_FFP);
    lr_session_destroy(s);
}

/* Nothing after the lost PDU to show a gap: the recovery timer pings after a quiet period.
 * The answer's ExpCmdSN still at a sent command's CmdSN means the target never got it: the
 * command is retried (§7.2.1). Its StatSN past ExpStatSN shows a lost last response: Status
 * SNACK. At ERL 0 the timer does nothing. */
static void test_erl1_quiet_ping_retry_and_status_snack(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[512];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 1, 512, buf, on_done, &d), 0);
    uint8_t cmd[ISCSI_BHS_LEN];
    memcpy(cmd, txq_at(c, 0)->hdr, ISCSI_BHS_LEN);
    take_all(c);
    uint64_t now = reactor_now_ms();
    ini_snack_tick(c, now); /* not quiet long enough yet */
    assert_int_equal(txq_len(c), 0);
    ini_snack_tick(c, now + 1000);
    assert_int_equal(txq_len(c), 1);
    const struct wire_pdu *p = txq_at(c, 0);
    assert_int_equal(p->hdr[0], ISCSI_OP_NOP_OUT | ISCSI_BHS_IMMEDIATE);
    assert_int_equal(get_be32(p->hdr + BHS_ITT), INI_PING_ITT);
    assert_int_equal(get_be32(p->hdr + BHS_TTT), ISCSI_RSVD_TAG);
    assert_int_equal(get_be32(p->hdr + BHS_CMDSN), 2);
    take_all(c);
    /* the answer: ExpCmdSN 1, the read's CmdSN: retried */
    uint8_t pong[ISCSI_BHS_LEN];
    rsp_hdr(pong, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, INI_PING_ITT, 5, 1, 64);
    put_be32(pong + BHS_TTT, ISCSI_RSVD_TAG);
    assert_int_equal(ini_conn_feed(c, pong, sizeof(pong)), 0);
    assert_int_equal(c->expstatsn, 6);
    assert_int_equal(txq_len(c), 1);
    assert_memory_equal(txq_at(c, 0)->hdr, cmd, BHS_EXPSTATSN);
    assert_int_equal(c->retries, 1);
    take_all(c);
    /* later the status is lost: the next round's answer shows StatSN 6 missing */
    ini_snack_tick(c, now + 2000);
    assert_int_equal(txq_len(c), 1);
    take_all(c);
    rsp_hdr(pong, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, INI_PING_ITT, 7, 2, 65);
    put_be32(pong + BHS_TTT, ISCSI_RSVD_TAG);
    assert_int_equal(ini_conn_feed(c, pong, sizeof(pong)), 0);
    assert_int_equal(txq_len(c), 1);
    assert_snack(txq_at(c, 0), 1, ISCSI_RSVD_TAG, 6, 1, 6);
    assert_int_equal(c->retries, 1); /* ExpCmdSN moved: no retry */
    take_all(c);
    /* the retransmitted status completes the read; ExpStatSN past the pong's */
    uint8_t din[ISCSI_BHS_LEN + 512];
    size_t n = data_in(din, get_be32(cmd + BHS_ITT), 0, 0, 512,
                       ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 6, 0);
    assert_int_equal(ini_conn_feed(c, din, (uint32_t)n), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(c->expstatsn, 8);
    /* nothing outstanding: no more rounds */
    ini_snack_tick(c, now + 3000);
    assert_int_equal(txq_len(c), 0);
    lr_session_destroy(s);
    /* ERL 0: no timer */
    s = fake_session(1, 1, 64);
    c = s->conns[0];
    assert_int_equal(lr_read(s, 0, 1, 512, buf, on_done, &d), 0);
    take_all(c);
    ini_snack_tick(c, reactor_now_ms() + 10000);
    assert_int_equal(txq_len(c), 0);
    lr_session_destroy(s);
}

/* A response asked for and not come (its retransmission lost too) is asked for again while
 * other traffic flows: nothing else would show it, and the target keeps what it may have to
 * send again only for so long. */
static void test_erl1_resnack_while_busy(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[3][512];
    struct done_log d = {0};
    uint32_t itt[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lr_write(s, (uint64_t)i, 1, 512, buf[i], on_done, &d), 0);
        itt[i] = get_be32(txq_at(c, (unsigned)i)->hdr + BHS_ITT);
    }
    take_all(c);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt[1], 6, 3, 64); /* 5 lost */
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(txq_len(c), 1);
    assert_snack(txq_at(c, 0), 1, ISCSI_RSVD_TAG, 5, 1, 5);
    take_all(c);
    uint64_t now = reactor_now_ms();
    ini_snack_tick(c, now + 1000); /* a round: the SNACK again, and a ping */
    assert_int_equal(txq_len(c), 2);
    assert_snack(txq_at(c, 0), 1, ISCSI_RSVD_TAG, 5, 1, 5);
    take_all(c);
    /* traffic goes on (the connection is not quiet), StatSN 5 still missing: asked again */
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt[2], 7, 4, 64);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(txq_len(c), 0);
    c->last_progress_ms = now + 1005; /* the ticks' clock is made up: traffic came then */
    ini_snack_tick(c, now + 1010);    /* too soon */
    assert_int_equal(txq_len(c), 0);
    c->last_progress_ms = now + 1035; /* and then: never quiet */
    ini_snack_tick(c, now + 1040);
    assert_true(txq_len(c) >= 1);
    assert_snack(txq_at(c, 0), 1, ISCSI_RSVD_TAG, 5, 1, 5);
    take_all(c);
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt[0], 5, 4, 64);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 3);
    assert_int_equal(c->expstatsn, 8);
    ini_snack_tick(c, now + 2000); /* nothing pending, nothing outstanding */
    assert_int_equal(txq_len(c), 0);
    lr_session_destroy(s);
}

/* A Data SNACK the target refuses (Reject, §7.8 a) ends the task with an error once its
 * status is in, rather than waiting for data that will not come. */
static void test_erl1_snack_rejected(void **state)
{
    (void)state;
    struct lr_session *s = erl1_session(5);
    struct ini_conn *c = s->conns[0];
    static uint8_t buf[8192];
    static uint8_t pdu[ISCSI_BHS_LEN + 4096];
    struct done_log d = {0};
    assert_int_equal(lr_read(s, 0, 16, 512, buf, on_done, &d), 0);
    uint32_t itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    take_all(c);
    size_t n = data_in(pdu, itt, 1, 4096, 4096, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, 5, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(txq_len(c), 1);
    uint8_t rej[2 * ISCSI_BHS_LEN];
    rsp_hdr(rej, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 6, 2, 64);
    rej[BHS_REJECT_REASON] = ISCSI_REJECT_SNACK_REJECT;
    put_be24(rej + BHS_DATA_SEG_LEN, ISCSI_BHS_LEN);
    memcpy(rej + ISCSI_BHS_LEN, txq_at(c, 0)->hdr, ISCSI_BHS_LEN);
    assert_int_equal(ini_conn_feed(c, rej, sizeof(rej)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.last, LR_ERR_PROTOCOL);
    assert_int_equal(c->expstatsn, 7);
    assert_int_equal(c->state, ICS_FFP);
    /* refused before the status came (the target counts Data-In as sent with its status):
     * asked again when the status arrives, and the retransmission completes the task */
    take_all(c);
    assert_int_equal(lr_read(s, 0, 16, 512, buf, on_done, &d), 0);
    itt = get_be32(txq_at(c, 0)->hdr + BHS_ITT);
    take_all(c);
    n = data_in(pdu, itt, 1, 4096, 4096, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(txq_len(c), 1);
    rsp_hdr(rej, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, 7, 3, 64);
    rej[BHS_REJECT_REASON] = ISCSI_REJECT_PROTOCOL_ERROR;
    put_be24(rej + BHS_DATA_SEG_LEN, ISCSI_BHS_LEN);
    memcpy(rej + ISCSI_BHS_LEN, txq_at(c, 0)->hdr, ISCSI_BHS_LEN);
    take_all(c);
    assert_int_equal(ini_conn_feed(c, rej, sizeof(rej)), 0);
    assert_int_equal(d.calls, 1);
    uint8_t rsp[ISCSI_BHS_LEN];
    rsp_hdr(rsp, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt, 8, 3, 64);
    put_be32(rsp + BHS_EXPDATASN, 2);
    assert_int_equal(ini_conn_feed(c, rsp, sizeof(rsp)), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(txq_len(c), 1);
    assert_snack(txq_at(c, 0), 0, itt, 0, 1, 8);
    n = data_in(pdu, itt, 0, 0, 4096, 0, 0, 0);
    assert_int_equal(ini_conn_feed(c, pdu, (uint32_t)n), 0);
    assert_int_equal(d.calls, 2);
    assert_int_equal(d.last, LR_OK);
    assert_int_equal(c->expstatsn, 9);
    lr_session_destroy(s);
}

static void test_url(void **state)
{
    (void)state;
    struct lr_url u;
    assert_int_equal(lr_url_parse("iscsi://127.0.0.1:3299/iqn.2026-11.org.peer:tgt/1", &u), 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 3299);
    assert_string_equal(u.target, "iqn.2026-11.org.peer:tgt");
    assert_int_equal(u.lun, 1);
    assert_int_equal(lr_url_parse("iscsi://[::1]/iqn.x:y/0", &u), 0);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 3260);
    assert_int_equal(lr_url_parse("iscsi://h/iqn", &u), -1);
    assert_int_equal(lr_url_parse("http://h/iqn.x/0", &u), -1);
    assert_int_equal(lr_url_parse("iscsi://h:0/iqn.x/0", &u), -1);
}

int main(void)
{
    R = reactor_create(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_sigbus_handler), /* first: see there */
        cmocka_unit_test(test_login_leading_full),
        cmocka_unit_test(test_login_refused),
        cmocka_unit_test(test_login_continuation_and_non_leading),
        cmocka_unit_test(test_mcs_cmdsn_window),
        cmocka_unit_test(test_check_condition_sense),
        cmocka_unit_test(test_write_r2t_data_out),
        cmocka_unit_test(test_conn_loss_keeps_session),
        cmocka_unit_test(test_digests_and_nop),
        cmocka_unit_test(test_stale_response_ignored),
        cmocka_unit_test(test_itt_not_reused_soon),
        cmocka_unit_test(test_erl_option),
        cmocka_unit_test(test_faults_applied),
        cmocka_unit_test(test_write_unsolicited_and_r2t_sequences),
        cmocka_unit_test(test_data_in_datasn_gap),
        cmocka_unit_test(test_data_in_digest_error),
        cmocka_unit_test(test_residuals_reported),
        cmocka_unit_test(test_nop_in_not_a_ping),
        cmocka_unit_test(test_read_good_needs_its_data),
        cmocka_unit_test(test_residuals_impossible),
        cmocka_unit_test(test_ping_flood_bounded),
        cmocka_unit_test(test_r2t_again_refused),
        cmocka_unit_test(test_reject_handling),
        cmocka_unit_test(test_async_message),
        cmocka_unit_test(test_async_logout_request_drains),
        cmocka_unit_test(test_async_logout_request_all_connections),
        cmocka_unit_test(test_logout_carrier_lost),
        cmocka_unit_test(test_logout_no_memory),
        cmocka_unit_test(test_login_no_memory),
        cmocka_unit_test(test_erl2_logout_reassign_resume),
        cmocka_unit_test(test_erl2_expired_tasks_still_cleaned),
        cmocka_unit_test(test_erl2_refused_and_retried),
        cmocka_unit_test(test_erl2_time2retain_expiry),
        cmocka_unit_test(test_erl2_async_drop_notice),
        cmocka_unit_test(test_erl2_reinstatement_login),
        cmocka_unit_test(test_erl2_still_allegiant_asks_again),
        cmocka_unit_test(test_erl2_async_session_drop),
        cmocka_unit_test(test_erl1_data_in_gap_snack),
        cmocka_unit_test(test_erl1_status_after_conn_failed),
        cmocka_unit_test(test_erl1_logout_answered_snack_refused),
        cmocka_unit_test(test_erl1_data_digest_and_expdatasn),
        cmocka_unit_test(test_erl1_statsn_gap_snack),
        cmocka_unit_test(test_erl1_reject_digest_retries_command),
        cmocka_unit_test(test_erl1_recovery_r2t),
        cmocka_unit_test(test_erl1_quiet_ping_retry_and_status_snack),
        cmocka_unit_test(test_erl1_resnack_while_busy),
        cmocka_unit_test(test_erl1_snack_rejected),
        cmocka_unit_test(test_url),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    reactor_destroy(R);
    return rc;
}
