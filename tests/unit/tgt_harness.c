/* The target-side harness (tgt_harness.h). The only file of the tests that knows the
 * connection's internals: the detached connection seam of src/iscsi/conn.c (feed bytes, take
 * the bytes it would have written), conn_close() and the connection reference. The server and
 * the node are built the way the daemon builds them (target_build, iscsi_server_init). */
#include "bs/bs.h"
#include "tgt_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "iscsi/cmd.h"
#include "iscsi/conn.h"
#include "iscsi/dataout.h"
#include "iscsi/dispatch.h"
#include "iscsi/login.h"
#include "iscsi/response.h"
#include "iscsi/session_conns.h"
#include "reactor/reactor.h"
#include "util/crc32c.h"
#include "daemon/config.h"

#define TGT_TURNS_MAX 10000 /* a reactor that never goes idle is a bug in the test or code */
#define TGT_CONNS_MAX 4

/* What belongs to one connection of the session (the current one lives in struct tgt). */
struct tgt_side {
    struct iscsi_conn *conn;
    uint32_t exp_statsn;
    bool ddigest, hold_expstatsn;
    uint8_t *rx;
    size_t rx_len, rx_cap;
};

struct tgt {
    struct reactor *r;
    struct target_config cfg;
    struct target_built built;
    struct iscsi_server srv;
    struct iscsi_conn *conn; /* a reference held until tgt_free() */
    uint32_t cmdsn, exp_statsn, next_itt;
    uint32_t login_exp, login_max, target_mrdsl;
    uint16_t tsih;
    bool ddigest;        /* DataDigest=CRC32C negotiated */
    bool hold_expstatsn; /* tgt_recv() leaves exp_statsn alone */
    bool hold_tx;        /* the answers stay queued in the connection (tgt_hold_tx) */
    /* what the connection wrote and tgt_recv() has not parsed yet */
    uint8_t *rx;
    size_t rx_len, rx_cap;
    uint8_t *last;  /* the data segment of the PDU tgt_recv() returned last */
    size_t tx_room; /* the largest PDU the target may send, and some */
    /* the bytes tgt_feed() hands the connection from the reactor's turn */
    struct reactor_deferred feed_hook;
    const uint8_t *feed_buf;
    size_t feed_len, feed_used;
    /* every connection of the session; sides[cur] is stale while cur is the current one */
    struct tgt_side sides[TGT_CONNS_MAX];
    int nsides, cur;
    struct tgt_opts opts;
};

void tgt_opts_default(struct tgt_opts *o)
{
    *o = (struct tgt_opts){.immediate_data = true,
                           .initial_r2t = false,
                           .first_burst = 8192,
                           .max_burst = 16384,
                           .mrdsl = 4096,
                           .max_outstanding_r2t = 2,
                           .lun_mib = 4,
                           .cmdsn = 1,
                           .time2wait = -1,
                           .time2retain = -1};
}

/* ---- driving the connection ---- */

static void run_until_idle(struct tgt *t)
{
    int turns = 0;
    while (reactor_poll(t->r) > 0)
        assert_true(++turns < TGT_TURNS_MAX);
}

/* Everything the connection queued moves to t->rx, as the socket would take it. The room
 * offered each time holds the largest PDU the target may send (a transmit engine may take
 * whole PDUs only). */
static void collect_tx(struct tgt *t)
{
    if (t->hold_tx)
        return;
    for (;;) {
        while (t->rx_cap - t->rx_len < t->tx_room) {
            t->rx_cap = t->rx_cap ? t->rx_cap * 2 : 262144;
            t->rx = realloc(t->rx, t->rx_cap);
            assert_non_null(t->rx);
        }
        size_t n = iscsi_conn_take_tx(t->conn, t->rx + t->rx_len, t->rx_cap - t->rx_len);
        t->rx_len += n;
        run_until_idle(t); /* sent callbacks may free tasks, resume reading, close */
        if (n == 0)
            break;
    }
}

/* Runs inside a reactor turn, as the socket's event handler would. */
static void feed_run(void *arg)
{
    struct tgt *t = arg;
    t->feed_used +=
        iscsi_conn_feed(t->conn, t->feed_buf + t->feed_used, t->feed_len - t->feed_used);
}

size_t tgt_feed(struct tgt *t, const void *bytes, size_t len)
{
    t->feed_buf = bytes;
    t->feed_len = len;
    t->feed_used = 0;
    /* A connection that paused reading (replies not taken) resumes once they are taken. */
    for (int rounds = 0; rounds < 64 && t->feed_used < len && !iscsi_conn_is_closed(t->conn);
         rounds++) {
        reactor_defer(t->r, &t->feed_hook, feed_run, t);
        run_until_idle(t);
        collect_tx(t);
    }
    collect_tx(t);
    return t->feed_used;
}

/* The bytes of a request as the current connection would get them (malloc'd). */
static uint8_t *pdu_bytes(const struct tgt *t, const struct tgt_pdu *p, size_t *lenp)
{
    uint32_t padded = ISCSI_PAD(p->dlen);
    uint32_t digest = t->ddigest && p->dlen ? ISCSI_DIGEST_LEN : 0;
    size_t len = ISCSI_BHS_LEN + padded + digest;
    uint8_t *buf = calloc(1, len);
    assert_non_null(buf);
    memcpy(buf, p->bhs.b, ISCSI_BHS_LEN);
    put_be24(buf + BHS_DATA_SEG_LEN, p->dlen);
    put_be32(buf + BHS_EXPSTATSN, t->exp_statsn);
    if (p->dlen)
        memcpy(buf + ISCSI_BHS_LEN, p->data, p->dlen);
    if (digest) { /* over data and pad, as it goes on the wire (RFC 7143 §13.1) */
        uint32_t crc = crc32c(buf + ISCSI_BHS_LEN, padded);
        if (p->bad_digest)
            crc ^= 0x1;
        memcpy(buf + ISCSI_BHS_LEN + padded, &crc, ISCSI_DIGEST_LEN);
    }
    *lenp = len;
    return buf;
}

void tgt_send(struct tgt *t, const struct tgt_pdu *p)
{
    size_t len;
    uint8_t *buf = pdu_bytes(t, p, &len);
    tgt_feed(t, buf, len);
    free(buf);
}

void tgt_send_together(struct tgt *t, const struct tgt_pdu *const *p, unsigned n)
{
    uint8_t *all = NULL;
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t len;
        uint8_t *buf = pdu_bytes(t, p[i], &len);
        all = realloc(all, total + len);
        assert_non_null(all);
        memcpy(all + total, buf, len);
        total += len;
        free(buf);
    }
    assert_int_equal(tgt_feed(t, all, total), total);
    free(all);
}

/* ---- answers ---- */

/* Bytes of the first whole PDU in t->rx (digests are off), or 0 if it is not all there. */
static size_t rx_pdu_len(const struct tgt *t)
{
    if (t->rx_len < ISCSI_BHS_LEN)
        return 0;
    uint32_t dlen = get_be24(t->rx + BHS_DATA_SEG_LEN);
    size_t len = ISCSI_BHS_LEN + t->rx[BHS_TOTAL_AHS_LEN] * 4u + ISCSI_PAD(dlen) +
                 (t->ddigest && dlen ? ISCSI_DIGEST_LEN : 0);
    return t->rx_len >= len ? len : 0;
}

unsigned tgt_pending(struct tgt *t)
{
    collect_tx(t);
    unsigned n = 0;
    size_t off = 0;
    while (t->rx_len - off >= ISCSI_BHS_LEN) {
        const uint8_t *h = t->rx + off;
        uint32_t dlen = get_be24(h + BHS_DATA_SEG_LEN);
        size_t len = ISCSI_BHS_LEN + h[BHS_TOTAL_AHS_LEN] * 4u + ISCSI_PAD(dlen) +
                     (t->ddigest && dlen ? ISCSI_DIGEST_LEN : 0);
        if (t->rx_len - off < len)
            break;
        off += len;
        n++;
    }
    return n;
}

static void parse_sense(struct tgt_rsp *r)
{
    if (r->dlen < 2)
        return;
    uint32_t slen = get_be16(r->data);
    const uint8_t *s = r->data + 2;
    if (slen < 4 || slen + 2 > r->dlen)
        return;
    r->has_sense = true;
    if ((s[0] & 0x7f) >= 0x72) { /* descriptor format (SPC-4 §4.5.2) */
        r->sense_key = s[1] & 0x0f;
        r->asc = s[2];
        r->ascq = s[3];
    } else if (slen >= 14) { /* fixed format (SPC-4 §4.5.3) */
        r->sense_key = s[2] & 0x0f;
        r->asc = s[12];
        r->ascq = s[13];
    }
}

bool tgt_recv(struct tgt *t, struct tgt_rsp *r)
{
    collect_tx(t);
    memset(r, 0, sizeof(*r));
    size_t len = rx_pdu_len(t);
    if (!len)
        return false;
    memcpy(r->bhs.b, t->rx, ISCSI_BHS_LEN);
    const struct iscsi_bhs *h = &r->bhs;
    r->opcode = bhs_opcode(h);
    r->flags = h->b[1];
    r->itt = bhs_get32(h, BHS_ITT);
    r->ttt = bhs_get32(h, BHS_TTT);
    r->statsn = bhs_get32(h, BHS_STATSN);
    r->expcmdsn = bhs_get32(h, BHS_EXPCMDSN);
    r->maxcmdsn = bhs_get32(h, BHS_MAXCMDSN);
    r->datasn = bhs_get32(h, BHS_DATASN);
    r->offset = bhs_get32(h, BHS_BUFFER_OFFSET);
    r->desired_len = bhs_get32(h, BHS_DESIRED_LEN);
    r->residual = bhs_get32(h, BHS_RESIDUAL);
    r->response = h->b[BHS_RESPONSE];
    r->status = h->b[BHS_STATUS];
    r->reason = h->b[BHS_REJECT_REASON];
    r->dlen = bhs_dlength(h);
    free(t->last);
    t->last = malloc(r->dlen ? r->dlen : 1);
    assert_non_null(t->last);
    memcpy(t->last, t->rx + ISCSI_BHS_LEN + h->b[BHS_TOTAL_AHS_LEN] * 4u, r->dlen);
    r->data = t->last;
    if (t->ddigest && r->dlen) { /* the target's data digest must be right */
        const uint8_t *seg = t->rx + ISCSI_BHS_LEN + h->b[BHS_TOTAL_AHS_LEN] * 4u;
        uint32_t crc = crc32c(seg, ISCSI_PAD(r->dlen)), got;
        memcpy(&got, seg + ISCSI_PAD(r->dlen), ISCSI_DIGEST_LEN);
        assert_int_equal(got, crc);
    }
    memmove(t->rx, t->rx + len, t->rx_len - len);
    t->rx_len -= len;
    /* A response that carries a StatSN advances the initiator's ExpStatSN (§4.2.2.2); NOP-In
     * pings (ITT reserved), R2T and Data-In without status do not. */
    bool has_statsn = r->opcode == ISCSI_OP_SCSI_RSP || r->opcode == ISCSI_OP_TMF_RSP ||
                      r->opcode == ISCSI_OP_LOGOUT_RSP || r->opcode == ISCSI_OP_TEXT_RSP ||
                      r->opcode == ISCSI_OP_REJECT || r->opcode == ISCSI_OP_LOGIN_RSP ||
                      (r->opcode == ISCSI_OP_NOP_IN && r->itt != ISCSI_RSVD_TAG) ||
                      (r->opcode == ISCSI_OP_DATA_IN && (r->flags & ISCSI_DATAIN_STATUS));
    if (has_statsn && !t->hold_expstatsn && !sn_lt(r->statsn, t->exp_statsn))
        t->exp_statsn = r->statsn + 1;
    if (r->opcode == ISCSI_OP_SCSI_RSP)
        parse_sense(r);
    return true;
}

void tgt_timer_after(struct tgt *t, unsigned ms)
{
    int rc = dataout_check_stalled(t->conn, reactor_now_ms() + ms);
    conn_fail(t->conn, rc);
    run_until_idle(t);
    collect_tx(t);
}

void tgt_hold_tx(struct tgt *t, bool hold)
{
    t->hold_tx = hold;
    collect_tx(t);
}

int tgt_unpin_stalled(struct tgt *t)
{
    int rc = rsp_unpin_stalled(t->conn);
    run_until_idle(t);
    return rc;
}

void tgt_hold_expstatsn(struct tgt *t, bool hold)
{
    t->hold_expstatsn = hold;
}

void tgt_set_expstatsn(struct tgt *t, uint32_t expstatsn)
{
    t->exp_statsn = expstatsn;
}

uint32_t tgt_expstatsn(const struct tgt *t)
{
    return t->exp_statsn;
}

bool tgt_closed(const struct tgt *t)
{
    return iscsi_conn_is_closed(t->conn);
}

/* ---- requests ---- */

static void pdu_init(struct tgt_pdu *p, enum iscsi_opcode op, uint8_t flags, uint32_t itt)
{
    memset(p, 0, sizeof(*p));
    bhs_init(&p->bhs, op, flags);
    bhs_put32(&p->bhs, BHS_ITT, itt);
}

void tgt_pdu_scsi_cmd(struct tgt_pdu *p, uint32_t itt, uint32_t cmdsn, const uint8_t cdb[16],
                      uint32_t edtl, uint8_t flags, const void *imm, uint32_t imm_len)
{
    pdu_init(p, ISCSI_OP_SCSI_CMD, flags, itt);
    bhs_put32(&p->bhs, BHS_EDTL, edtl);
    bhs_put32(&p->bhs, BHS_CMDSN, cmdsn);
    memcpy(p->bhs.b + BHS_CDB, cdb, 16);
    p->data = imm;
    p->dlen = imm_len;
}

void tgt_pdu_set_immediate(struct tgt_pdu *p)
{
    p->bhs.b[0] |= ISCSI_BHS_IMMEDIATE;
}

void tgt_cdb_rw10(uint8_t cdb[16], uint8_t op, uint32_t lba, uint16_t blocks)
{
    memset(cdb, 0, 16);
    cdb[0] = op;
    put_be32(cdb + 2, lba);
    put_be16(cdb + 7, blocks);
}

void tgt_pdu_data_out(struct tgt_pdu *p, uint32_t itt, uint32_t ttt, uint32_t datasn,
                      uint32_t offset, const void *data, uint32_t len, bool final)
{
    pdu_init(p, ISCSI_OP_DATA_OUT, final ? ISCSI_FLAG_FINAL : 0, itt);
    bhs_put32(&p->bhs, BHS_TTT, ttt);
    bhs_put32(&p->bhs, BHS_DATASN, datasn);
    bhs_put32(&p->bhs, BHS_BUFFER_OFFSET, offset);
    p->data = data;
    p->dlen = len;
}

void tgt_pdu_nop_out(struct tgt_pdu *p, uint32_t itt, uint32_t ttt, uint32_t cmdsn, bool immediate,
                     const void *data, uint32_t len)
{
    pdu_init(p, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL, itt);
    if (immediate)
        tgt_pdu_set_immediate(p);
    bhs_put32(&p->bhs, BHS_TTT, ttt);
    bhs_put32(&p->bhs, BHS_CMDSN, cmdsn);
    p->data = data;
    p->dlen = len;
}

void tgt_pdu_tmf(struct tgt_pdu *p, uint8_t function, uint32_t itt, uint32_t rtt, uint32_t refcmdsn,
                 uint32_t cmdsn, bool immediate)
{
    pdu_init(p, ISCSI_OP_TMF_REQ, (uint8_t)(ISCSI_FLAG_FINAL | function), itt);
    if (immediate)
        tgt_pdu_set_immediate(p);
    bhs_put32(&p->bhs, BHS_RTT, rtt);
    bhs_put32(&p->bhs, BHS_CMDSN, cmdsn);
    bhs_put32(&p->bhs, BHS_REFCMDSN, refcmdsn);
}

void tgt_pdu_logout(struct tgt_pdu *p, uint8_t reason, uint32_t itt, uint16_t cid, uint32_t cmdsn,
                    bool immediate)
{
    pdu_init(p, ISCSI_OP_LOGOUT_REQ, (uint8_t)(ISCSI_FLAG_FINAL | reason), itt);
    if (immediate)
        tgt_pdu_set_immediate(p);
    put_be16(p->bhs.b + BHS_CID, cid);
    bhs_put32(&p->bhs, BHS_CMDSN, cmdsn);
}

void tgt_pdu_text(struct tgt_pdu *p, uint32_t itt, uint32_t cmdsn, const char *text, uint32_t len)
{
    pdu_init(p, ISCSI_OP_TEXT_REQ, ISCSI_FLAG_FINAL, itt);
    bhs_put32(&p->bhs, BHS_TTT, ISCSI_RSVD_TAG);
    bhs_put32(&p->bhs, BHS_CMDSN, cmdsn);
    p->data = text;
    p->dlen = len;
}

void tgt_pdu_snack(struct tgt_pdu *p, uint8_t type, uint32_t itt, uint32_t ttt, uint32_t begrun,
                   uint32_t runlength)
{
    pdu_init(p, ISCSI_OP_SNACK, (uint8_t)(ISCSI_FLAG_FINAL | type), itt);
    bhs_put32(&p->bhs, BHS_TTT, ttt);
    bhs_put32(&p->bhs, 40, begrun);
    bhs_put32(&p->bhs, 44, runlength);
}

void tgt_pdu_login(struct tgt_pdu *p, uint32_t itt, uint32_t cmdsn, const char *text, uint32_t len)
{
    pdu_init(p, ISCSI_OP_LOGIN_REQ,
             ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_OPERATIONAL << 2) | ISCSI_STAGE_FULL_FEATURE, itt);
    tgt_pdu_set_immediate(p);
    static const uint8_t isid[6] = {0x80, 0x12, 0x34, 0x56, 0x00, 0x01};
    memcpy(p->bhs.b + BHS_ISID, isid, 6);
    put_be16(p->bhs.b + BHS_CID, 1);
    bhs_put32(&p->bhs, BHS_CMDSN, cmdsn);
    p->data = text;
    p->dlen = len;
}

/* ---- setup ---- */

static void build_target(struct tgt *t, const struct tgt_opts *o)
{
    char err[512] = "", spec[256];
    target_config_init(&t->cfg);
    t->cfg.state_dir[0] = '\0'; /* no APTPL file under /var/lib in a unit test */
    struct target_node_conf *n = target_config_add_node(&t->cfg, TGT_TARGET_NAME, "harness");
    assert_non_null(n);
    struct target_lun_conf lun = {0};
    if (o->lun_spec)
        snprintf(spec, sizeof(spec), "%s", o->lun_spec);
    else
        snprintf(spec, sizeof(spec), "ram:%uM", o->lun_mib);
    assert_int_equal(target_parse_lun_spec(spec, &lun, err, sizeof(err)), 0);
    lun.lun = 0;
    snprintf(lun.origin, sizeof(lun.origin), "harness");
    assert_int_equal(target_node_add_lun(n, &lun, err, sizeof(err)), 0);
    if (o->host_limits) {
        struct target_host_conf *h =
            o->host_group
                ? target_host_open(n, true, "harness", "harness", 1, err, sizeof(err))
                : target_host_open(n, false, TGT_INITIATOR_NAME, "harness", 1, err, sizeof(err));
        assert_non_null(h);
        if (o->host_group) {
            assert_int_equal(target_host_add_initiator(h, TGT_INITIATOR_NAME, 1, err, sizeof(err)),
                             0);
            assert_int_equal(target_host_add_initiator(h, TGT_INITIATOR2_NAME, 1, err, sizeof(err)),
                             0);
        }
        assert_int_equal(target_host_map_line(h, "0 0", 1, err, sizeof(err)), 0);
        if (o->host_limits[0] &&
            target_lun_limits_parse(&h->limits, o->host_limits, err, sizeof(err)) < 0)
            fail_msg("host limits: %s", err);
    }
    if (target_build(&t->cfg, &t->built, err, sizeof(err)) < 0)
        fail_msg("target_build: %s", err);
    assert_int_equal(iscsi_server_init(&t->srv), 0);
    if (o->max_tx_backlog)
        t->srv.limits.max_tx_backlog = o->max_tx_backlog;
    if (o->erl) {
        /* the config refuses a level above ISCSI_ERL_IMPLEMENTED; the test sets it itself */
        iscsi_target_erl_max = o->erl;
        t->built.nodes[0]->params.erl = o->erl;
    }
    if (o->time2wait >= 0)
        t->built.nodes[0]->params.default_time2wait = (uint32_t)o->time2wait;
    if (o->time2retain >= 0)
        t->built.nodes[0]->params.default_time2retain = (uint32_t)o->time2retain;
    iscsi_server_set_nodes(&t->srv, t->built.nodes, t->built.n);
    if (iscsi_server_set_reactors(&t->srv, &t->r, 1) < 0)
        abort();
}

/* The value of key in a key=value\0 text, or NULL. */
static const char *text_value(const uint8_t *data, uint32_t len, const char *key)
{
    size_t kl = strlen(key);
    for (uint32_t off = 0; off < len;) {
        const char *kv = (const char *)data + off;
        size_t n = strnlen(kv, len - off);
        if (n > kl && memcmp(kv, key, kl) == 0 && kv[kl] == '=')
            return kv + kl + 1;
        off += (uint32_t)n + 1;
    }
    return NULL;
}

static void login(struct tgt *t, const struct tgt_opts *o)
{
    char text[1024];
    int n = snprintf(text, sizeof(text),
                     "InitiatorName=%s%cTargetName=%s%cSessionType=Normal%c"
                     "HeaderDigest=None%cDataDigest=%s%cErrorRecoveryLevel=%u%c"
                     "ImmediateData=%s%cInitialR2T=%s%cFirstBurstLength=%u%c"
                     "MaxBurstLength=%u%cMaxRecvDataSegmentLength=%u%cMaxOutstandingR2T=%u",
                     TGT_INITIATOR_NAME, 0, TGT_TARGET_NAME, 0, 0, 0,
                     o->data_digest ? "CRC32C" : "None", 0, o->erl, 0,
                     o->immediate_data ? "Yes" : "No", 0, o->initial_r2t ? "Yes" : "No", 0,
                     o->first_burst, 0, o->max_burst, 0, o->mrdsl, 0, o->max_outstanding_r2t);
    assert_true(n > 0 && (size_t)n < sizeof(text));
    if (o->max_connections)
        n += 1 + snprintf(text + n + 1, sizeof(text) - (size_t)n - 1, "MaxConnections=%u",
                          o->max_connections);
    if (o->time2wait >= 0) /* KT_MAX: the larger offer wins, ours equals the target's */
        n += 1 + snprintf(text + n + 1, sizeof(text) - (size_t)n - 1, "DefaultTime2Wait=%d",
                          o->time2wait);
    if (o->time2retain >= 0)
        n += 1 + snprintf(text + n + 1, sizeof(text) - (size_t)n - 1, "DefaultTime2Retain=%d",
                          o->time2retain);
    assert_true((size_t)n < sizeof(text));
    struct tgt_pdu p;
    tgt_pdu_login(&p, 0x1000, o->cmdsn, text, (uint32_t)n + 1);
    tgt_send(t, &p);
    struct tgt_rsp r;
    assert_true(tgt_recv(t, &r));
    assert_int_equal(r.opcode, ISCSI_OP_LOGIN_RSP);
    assert_int_equal(r.bhs.b[BHS_STATUS_CLASS], 0);
    assert_int_equal(r.bhs.b[BHS_STATUS_DETAIL], 0);
    assert_int_equal(r.flags & ISCSI_LOGIN_TRANSIT, ISCSI_LOGIN_TRANSIT);
    assert_int_equal(ISCSI_LOGIN_NSG(r.flags), ISCSI_STAGE_FULL_FEATURE);
    assert_int_equal(r.itt, 0x1000);
    t->tsih = get_be16(r.bhs.b + BHS_TSIH);
    assert_int_not_equal(t->tsih, 0);
    t->login_exp = r.expcmdsn;
    t->login_max = r.maxcmdsn;
    const char *v = text_value(r.data, r.dlen, "MaxRecvDataSegmentLength");
    assert_non_null(v);
    t->target_mrdsl = (uint32_t)strtoul(v, NULL, 10);
    v = text_value(r.data, r.dlen, "ErrorRecoveryLevel");
    assert_non_null(v);
    assert_int_equal(strtoul(v, NULL, 10), o->erl);
    v = text_value(r.data, r.dlen, "DataDigest");
    assert_non_null(v);
    assert_string_equal(v, o->data_digest ? "CRC32C" : "None");
    t->ddigest = o->data_digest; /* from the first PDU after the final Login Response */
    assert_false(tgt_recv(t, &r));
    assert_false(tgt_closed(t));
}

struct tgt *tgt_login(const struct tgt_opts *o)
{
    struct tgt *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    t->r = reactor_create(0);
    assert_non_null(t->r);
    build_target(t, o);
    t->conn = iscsi_conn_new_detached(&t->srv, t->r);
    assert_non_null(t->conn);
    conn_get(t->conn); /* ours: the connection stays readable after it closes */
    t->nsides = 1;
    t->cur = 0;
    t->opts = *o;
    t->cmdsn = o->cmdsn;
    t->next_itt = 1;
    /* Data-In up to the initiator's MRDSL; text, sense and login answers below 64 KiB. */
    t->tx_room = ISCSI_BHS_LEN + 2 * ISCSI_DIGEST_LEN + ISCSI_PAD(o->mrdsl) + 65536;
    login(t, o);
    /* The new nexus has a POWER ON unit attention pending (SPC-4 §6.6): the first command
     * takes it, so that tests start from a quiet LUN. */
    uint8_t cdb[16] = {0};
    struct tgt_pdu p;
    tgt_pdu_scsi_cmd(&p, tgt_new_itt(t), tgt_next_cmdsn(t), cdb, 0, ISCSI_FLAG_FINAL, NULL, 0);
    tgt_send(t, &p);
    struct tgt_rsp r;
    assert_true(tgt_recv(t, &r));
    assert_int_equal(r.opcode, ISCSI_OP_SCSI_RSP);
    assert_int_equal(r.status, 0x02);
    assert_int_equal(r.sense_key, 0x06);
    assert_int_equal(r.asc, 0x29);
    assert_false(tgt_recv(t, &r));
    return t;
}

void tgt_free(struct tgt *t)
{
    /* As the daemon stops: nothing is kept for reassignment any more (ERL 2), and what was
     * kept ends now. */
    atomic_store(&t->srv.shutting_down, true);
    iscsi_server_close_reactor_conns(&t->srv, t->r);
    run_until_idle(t);
    tgt_use(t, 0);
    for (int i = 0; i < t->nsides; i++) {
        struct tgt_side *sd = i == t->cur ? NULL : &t->sides[i];
        struct iscsi_conn *c = sd ? sd->conn : t->conn;
        if (!iscsi_conn_is_closed(c))
            conn_close(c, NULL);
        conn_put(c);
        if (sd)
            free(sd->rx);
    }
    run_until_idle(t);
    iscsi_server_destroy(&t->srv);
    target_built_free(&t->built);
    target_config_free(&t->cfg);
    /* the next test's reactor may get this one's address: the stores' per-thread state goes */
    bs_file_thread_reset();
    bs_delay_thread_reset();
    reactor_destroy(t->r);
    iscsi_target_erl_max = ISCSI_ERL_IMPLEMENTED;
    free(t->rx);
    free(t->last);
    free(t);
}

uint32_t tgt_next_cmdsn(struct tgt *t)
{
    return t->cmdsn++;
}

uint32_t tgt_peek_cmdsn(const struct tgt *t)
{
    return t->cmdsn;
}

uint32_t tgt_new_itt(struct tgt *t)
{
    return t->next_itt++;
}

uint32_t tgt_login_expcmdsn(const struct tgt *t)
{
    return t->login_exp;
}

uint32_t tgt_login_maxcmdsn(const struct tgt *t)
{
    return t->login_max;
}

uint32_t tgt_target_mrdsl(const struct tgt *t)
{
    return t->target_mrdsl;
}

uint16_t tgt_tsih(const struct tgt *t)
{
    return t->tsih;
}

/* ---- more connections (MC/S, ERL 2 recovery) ---- */

static void side_save(struct tgt *t, struct tgt_side *sd)
{
    *sd = (struct tgt_side){.conn = t->conn,
                            .exp_statsn = t->exp_statsn,
                            .ddigest = t->ddigest,
                            .hold_expstatsn = t->hold_expstatsn,
                            .rx = t->rx,
                            .rx_len = t->rx_len,
                            .rx_cap = t->rx_cap};
}

static void side_load(struct tgt *t, const struct tgt_side *sd)
{
    t->conn = sd->conn;
    t->exp_statsn = sd->exp_statsn;
    t->ddigest = sd->ddigest;
    t->hold_expstatsn = sd->hold_expstatsn;
    t->rx = sd->rx;
    t->rx_len = sd->rx_len;
    t->rx_cap = sd->rx_cap;
}

void tgt_set_join_mrdsl(struct tgt *t, uint32_t mrdsl)
{
    t->opts.mrdsl = mrdsl;
}

void tgt_use(struct tgt *t, int idx)
{
    assert_true(idx >= 0 && idx < t->nsides);
    if (idx == t->cur)
        return;
    side_save(t, &t->sides[t->cur]);
    side_load(t, &t->sides[idx]);
    t->cur = idx;
}

int tgt_current(const struct tgt *t)
{
    return t->cur;
}

/* A new connection, made the current one: its index. */
static int side_new(struct tgt *t)
{
    assert_true(t->nsides < TGT_CONNS_MAX);
    side_save(t, &t->sides[t->cur]);
    int idx = t->nsides++;
    struct tgt_side sd = {0};
    sd.conn = iscsi_conn_new_detached(&t->srv, t->r);
    assert_non_null(sd.conn);
    conn_get(sd.conn);
    side_load(t, &sd);
    t->cur = idx;
    return idx;
}

int tgt_login_conn(struct tgt *t, uint16_t cid, uint16_t *status)
{
    int idx = side_new(t);
    /* a connection joining the session: no leading-only keys (RFC 7143 §13) */
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "InitiatorName=%s%cTargetName=%s%c"
                     "HeaderDigest=None%cDataDigest=%s%cMaxRecvDataSegmentLength=%u",
                     TGT_INITIATOR_NAME, 0, TGT_TARGET_NAME, 0, 0,
                     t->opts.data_digest ? "CRC32C" : "None", 0, t->opts.mrdsl);
    assert_true(n > 0 && (size_t)n < sizeof(text));
    struct tgt_pdu p;
    tgt_pdu_login(&p, 0x2000 + (uint32_t)idx, t->cmdsn, text, (uint32_t)n + 1);
    put_be16(p.bhs.b + BHS_TSIH, t->tsih);
    put_be16(p.bhs.b + BHS_CID, cid);
    tgt_send(t, &p);
    struct tgt_rsp r;
    assert_true(tgt_recv(t, &r));
    assert_int_equal(r.opcode, ISCSI_OP_LOGIN_RSP);
    uint16_t st = (uint16_t)(r.bhs.b[BHS_STATUS_CLASS] << 8 | r.bhs.b[BHS_STATUS_DETAIL]);
    if (status)
        *status = st;
    else
        assert_int_equal(st, 0);
    if (st == 0) {
        assert_int_equal(ISCSI_LOGIN_NSG(r.flags), ISCSI_STAGE_FULL_FEATURE);
        assert_int_equal(get_be16(r.bhs.b + BHS_TSIH), t->tsih);
        t->ddigest = t->opts.data_digest;
    }
    return idx;
}

int tgt_login_session(struct tgt *t, const char *initiator_name, uint32_t cmdsn)
{
    int idx = side_new(t);
    /* a leading login (TSIH 0): every other key at its RFC 7143 default */
    char text[512];
    int n = snprintf(text, sizeof(text), "InitiatorName=%s%cTargetName=%s%cSessionType=Normal",
                     initiator_name, 0, TGT_TARGET_NAME, 0);
    assert_true(n > 0 && (size_t)n < sizeof(text));
    struct tgt_pdu p;
    tgt_pdu_login(&p, 0x3000 + (uint32_t)idx, cmdsn, text, (uint32_t)n + 1);
    tgt_send(t, &p);
    struct tgt_rsp r;
    assert_true(tgt_recv(t, &r));
    assert_int_equal(r.opcode, ISCSI_OP_LOGIN_RSP);
    assert_int_equal(r.bhs.b[BHS_STATUS_CLASS], 0);
    assert_int_equal(ISCSI_LOGIN_NSG(r.flags), ISCSI_STAGE_FULL_FEATURE);
    assert_int_not_equal(get_be16(r.bhs.b + BHS_TSIH), t->tsih);
    t->ddigest = false;
    return idx;
}

void tgt_kill(struct tgt *t)
{
    conn_close(t->conn, "test: connection lost");
    run_until_idle(t);
}

/* tgt_kill_acked: what session_close_conn_by_cid is asked at the hook's point */
static struct {
    bool armed, published;
    uint32_t exp_statsn;
} kill_ack;

static void kill_ack_hook(struct iscsi_conn *c, bool published)
{
    if (!kill_ack.armed || published != kill_ack.published)
        return;
    kill_ack.armed = false;
    session_close_conn_by_cid(c->session, c->cid, false, &kill_ack.exp_statsn, NULL);
}

void tgt_kill_acked(struct tgt *t, bool published, uint32_t exp_statsn)
{
    kill_ack.armed = true;
    kill_ack.published = published;
    kill_ack.exp_statsn = exp_statsn;
    cmd_teardown_test_hook = kill_ack_hook;
    tgt_kill(t);
    cmd_teardown_test_hook = NULL;
    assert_false(kill_ack.armed);
}

void tgt_wait_ms(struct tgt *t, unsigned ms)
{
    uint64_t until = reactor_now_ms() + ms;
    while (reactor_now_ms() < until) {
        run_until_idle(t);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    run_until_idle(t);
    collect_tx(t);
}

void tgt_async_drop(struct tgt *t)
{
    assert_int_equal(conn_send_async_drop(t->conn), 0);
    collect_tx(t);
}

struct turn {
    struct iscsi_conn *a, *b;
    uint8_t *abuf, *bbuf;
    size_t alen, blen;
};

static void turn_run(void *arg)
{
    struct turn *tu = arg;
    assert_int_equal(iscsi_conn_feed(tu->a, tu->abuf, tu->alen), tu->alen);
    conn_close(tu->a, "test: connection lost");
    assert_int_equal(iscsi_conn_feed(tu->b, tu->bbuf, tu->blen), tu->blen);
}

void tgt_send_kill_send(struct tgt *t, const struct tgt_pdu *first, int other,
                        const struct tgt_pdu *second)
{
    struct turn tu = {.a = t->conn};
    tu.abuf = pdu_bytes(t, first, &tu.alen);
    tgt_use(t, other);
    tu.b = t->conn;
    tu.bbuf = pdu_bytes(t, second, &tu.blen);
    reactor_defer(t->r, &t->feed_hook, turn_run, &tu);
    run_until_idle(t);
    collect_tx(t);
    free(tu.abuf);
    free(tu.bbuf);
}

struct scsi_target *tgt_scsi_target(struct tgt *t)
{
    return t->built.nodes[0]->scsi;
}

struct iscsi_node *tgt_node(struct tgt *t)
{
    return t->built.nodes[0];
}
