/* SCSI tasks on the wire (RFC 7143 §11.2-§11.8, §11.18-§11.19): the SCSI Command PDU with
 * immediate data and unsolicited Data-Out up to FirstBurstLength, Data-Out answering R2Ts,
 * Data-In placement and phase-collapsed status, SCSI Response with sense, NOP-In pings,
 * Reject and Async messages in full feature phase. */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "initiator/ini.h"
#include "util/log.h"

#define SCSI_STATUS_GOOD 0x00
#define SCSI_STATUS_CHECK_CONDITION 0x02
#define ISCSI_ATTR_SIMPLE 0x01

void ini_fill_lun(uint8_t *p, uint64_t lun)
{
    /* SAM-5 single level LUN: peripheral (< 256) or flat (< 16384) addressing. */
    memset(p, 0, 8);
    if (lun < 256) {
        p[1] = (uint8_t)lun;
    } else {
        p[0] = (uint8_t)(0x40 | ((lun >> 8) & 0x3f));
        p[1] = (uint8_t)lun;
    }
}

/* A recovery PDU left the queue (sent, or dropped with the connection). */
static void resend_sent(struct wire_pdu *p, bool ok)
{
    (void)ok;
    struct ini_conn *c = p->arg;
    uint64_t n = sizeof(struct wire_pdu) + (uint64_t)p->dlen;
    assert(c->resend_unsent >= n);
    c->resend_unsent -= n;
}

void ini_resend_account(struct ini_conn *c, struct wire_pdu *p, uint64_t n)
{
    p->sent = resend_sent;
    p->arg = c;
    c->resend_unsent += n;
}

int ini_task_data_out(struct ini_conn *c, struct ini_task *t, uint32_t ttt, uint32_t off,
                      uint32_t len, bool again)
{
    /* RFC 7143 §11.7: one sequence of Data-Out PDUs, each at most the target's
     * MaxRecvDataSegmentLength; DataSN restarts at 0 per sequence; F on the last. */
    uint32_t datasn = 0;
    uint32_t end = off + len;
    while (off < end) {
        uint32_t n = end - off < c->peer_mrdsl ? end - off : c->peer_mrdsl;
        struct wire_pdu *p = ini_conn_pdu(c);
        if (!p)
            return INI_ERR_NOMEM;
        struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
        bhs_init(h, ISCSI_OP_DATA_OUT, off + n == end ? ISCSI_FLAG_FINAL : 0);
        ini_fill_lun(h->b + BHS_LUN, c->s->o.lun);
        bhs_put32(h, BHS_ITT, t->itt);
        bhs_put32(h, BHS_TTT, ttt);
        bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
        bhs_put32(h, BHS_DATASN, datasn++);
        bhs_put32(h, BHS_BUFFER_OFFSET, off);
        if (again)
            ini_resend_account(c, p, sizeof(struct wire_pdu) + (uint64_t)n);
        ini_conn_send(c, p, t->buf + off, n);
        off += n;
    }
    return INI_OK;
}

/* The SCSI Command PDU of t with its immediate data, and its unsolicited Data-Out. */
static int send_cmd(struct ini_conn *c, struct ini_task *t)
{
    struct lr_session *s = c->s;
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    t->cmd_sent = false;
    uint32_t imm = 0, unsol = 0;
    if (t->dir == LR_DIR_WRITE) {
        /* RFC 7143 §13.13-§13.14: with ImmediateData=Yes the command carries data up to
         * FirstBurstLength (and the target's MRDSL); with InitialR2T=No Data-Out PDUs follow
         * unsolicited until FirstBurstLength; the rest waits for R2Ts. */
        uint32_t fb = s->params.first_burst < t->len ? s->params.first_burst : t->len;
        if (s->params.immediate_data)
            imm = fb < c->peer_mrdsl ? fb : c->peer_mrdsl;
        if (!s->params.initial_r2t)
            unsol = fb - imm;
    }
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    uint8_t flags = ISCSI_ATTR_SIMPLE;
    if (!unsol)
        flags |= ISCSI_FLAG_FINAL;
    if (t->dir == LR_DIR_READ)
        flags |= ISCSI_CMD_READ;
    else if (t->dir == LR_DIR_WRITE)
        flags |= ISCSI_CMD_WRITE;
    bhs_init(h, ISCSI_OP_SCSI_CMD, flags);
    ini_fill_lun(h->b + BHS_LUN, s->o.lun);
    bhs_put32(h, BHS_ITT, t->itt);
    bhs_put32(h, BHS_EDTL, t->dir == LR_DIR_NONE ? 0 : t->len);
    bhs_put32(h, BHS_CMDSN, t->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    memcpy(h->b + BHS_CDB, t->cdb, t->cdb_len);
    ini_conn_mark_cmd(p, t);
    t->solicited_end = imm + unsol;
    ini_conn_send(c, p, imm ? t->buf : NULL, imm);
    if (unsol)
        return ini_task_data_out(c, t, ISCSI_RSVD_TAG, imm, unsol, false);
    return INI_OK;
}

int ini_task_send(struct ini_conn *c, struct ini_task *t)
{
    if (c->w.erl >= 1 && c->outstanding == 0)
        ini_snack_progress(c, reactor_now_ms()); /* the quiet period starts now */
    t->conn = c;
    t->exp_datasn = 0;
    t->data_in = 0;
    t->data_bad = NULL;
    t->nmiss = 0;
    t->status_held = t->snack_refused = t->miss_overflow = t->snack_early = false;
    t->exp_r2tsn = 0;
    t->retry_ms = 0;
    t->reassign = t->reassigning = t->r2tsn_resync = false;
    c->outstanding++;
    return send_cmd(c, t);
}

/* RFC 7143 §7.2.1: the retry carries the original ITT, flags, LUN, CDB and CmdSN, on the
 * connection of the original; the immediate data goes with it again (it is "implicitly
 * recovered" by the retry), and so does the unsolicited data. */
int ini_task_resend_cmd(struct ini_conn *c, struct ini_task *t)
{
    assert(t->conn == c && t->has_cmdsn);
    c->retries++;
    t->retry_ms = reactor_now_ms();
    return send_cmd(c, t);
}

uint8_t *ini_task_rx_dest(struct ini_conn *c, const uint8_t *hdr, uint32_t dlen)
{
    if ((hdr[0] & ISCSI_OPCODE_MASK) != ISCSI_OP_DATA_IN)
        return NULL;
    struct ini_task *t = ini_task_lookup(c->s, get_be32(hdr + BHS_ITT));
    if (!t || t->conn != c || t->dir != LR_DIR_READ)
        return NULL;
    uint32_t off = get_be32(hdr + BHS_BUFFER_OFFSET);
    if (off > t->len || dlen > t->len - off)
        return NULL; /* checked again (and refused) when the PDU is handled */
    return t->buf + off;
}

static void result_init(struct lr_result *r, enum lr_err e, const char *what)
{
    memset(r, 0, offsetof(struct lr_result, sense));
    r->residual_kind = LR_RESIDUAL_NONE; /* past sense, which is not cleared */
    r->err = e;
    r->what = what;
}

static void task_fail(struct ini_conn *c, struct ini_task *t, const char *what)
{
    struct lr_result r;
    result_init(&r, LR_ERR_PROTOCOL, what);
    ini_task_complete(c->s, t, &r);
}

void ini_task_result(struct ini_task *t, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                     struct lr_result *r)
{
    result_init(r, LR_OK, NULL);
    r->scsi_status = hdr[BHS_STATUS];
    uint8_t flags = hdr[BHS_FLAGS];
    /* U and O are the same bits in a SCSI Response and a Data-In with status (§11.4.5,
     * §11.7.5). Both at once, or an underflow of more than was asked for, says nothing a
     * caller could use: the command failed. An overflow may exceed the transfer (the CDB
     * asked for more than EDTL by any amount, §11.4.5.1). */
    if ((flags & ISCSI_RSP_UNDERFLOW) && (flags & ISCSI_RSP_OVERFLOW)) {
        result_init(r, LR_ERR_PROTOCOL, "status with both residual underflow and overflow");
        return;
    }
    if (flags & (ISCSI_RSP_UNDERFLOW | ISCSI_RSP_OVERFLOW)) {
        r->residual = get_be32(hdr + BHS_RESIDUAL);
        r->residual_kind =
            flags & ISCSI_RSP_UNDERFLOW ? LR_RESIDUAL_UNDERFLOW : LR_RESIDUAL_OVERFLOW;
        if (r->residual_kind == LR_RESIDUAL_UNDERFLOW && r->residual > t->len) {
            result_init(r, LR_ERR_PROTOCOL, "residual underflow larger than the transfer");
            return;
        }
    }
    if ((hdr[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_SCSI_RSP) {
        r->response = hdr[BHS_RESPONSE];
        if (r->response != 0) {
            result_init(r, LR_ERR_PROTOCOL, "target failure (iSCSI response code)");
            r->response = hdr[BHS_RESPONSE];
            return;
        }
        /* §11.4.7: the data segment holds SenseLength (2 bytes) and the sense data. */
        if (dlen >= 2) {
            uint32_t sl = get_be16(data);
            if (sl > dlen - 2)
                sl = dlen - 2;
            if (sl > LR_SENSE_MAX)
                sl = LR_SENSE_MAX;
            memcpy(r->sense, data + 2, sl);
            r->sense_len = sl;
        }
    }
    if (t->data_bad) {
        result_init(r, LR_ERR_PROTOCOL, t->data_bad);
    } else if (r->scsi_status != SCSI_STATUS_GOOD) {
        r->err = LR_SCSI_STATUS;
        r->what = r->scsi_status == SCSI_STATUS_CHECK_CONDITION ? "CHECK CONDITION" : "SCSI status";
    }
}

/* Status from a Data-In with S or a SCSI Response (RFC 7143 §11.4, §11.7.4). */
static void task_status(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                        const uint8_t *data, uint32_t dlen)
{
    struct lr_result r;
    ini_task_result(t, hdr, data, dlen, &r);
    if (r.err == LR_OK && t->dir == LR_DIR_READ) {
        /* GOOD says the data is there: every byte of the transfer but the underflow came in
         * Data-In (in order, each once: rx_data_in), or the buffer holds what the caller had
         * in it before, not what the medium holds */
        uint32_t want = t->len - (r.residual_kind == LR_RESIDUAL_UNDERFLOW ? r.residual : 0);
        if (t->data_in != want)
            result_init(&r, LR_ERR_PROTOCOL,
                        t->data_in < want ? "GOOD status without all of the Data-In"
                                          : "more Data-In than the transfer minus its residual");
    }
    ini_task_complete(c->s, t, &r);
}

/* A response for a task we do not have (already completed, or never ours): a target bug, or
 * a late answer. Dropping the connection would fail every other task on it and leave CmdSN
 * holes for the other connections, so it is counted, reported and ignored. */
static void stale_pdu(struct ini_conn *c, const char *what, const uint8_t *hdr)
{
    c->stale_pdus++;
    if (c->stale_pdus <= 5 || (c->stale_pdus & (c->stale_pdus - 1)) == 0)
        LOG_WARN("initiator: connection %u: %s for unknown task %08x (StatSN %u), ignored "
                 "(%llu so far)",
                 c->idx, what, get_be32(hdr + BHS_ITT), get_be32(hdr + BHS_STATSN),
                 (unsigned long long)c->stale_pdus);
}

int ini_task_place_data_in(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                           const uint8_t *data, uint32_t dlen, bool copy)
{
    (void)c;
    uint32_t off = get_be32(hdr + BHS_BUFFER_OFFSET);
    if (t->dir != LR_DIR_READ || off > t->len || dlen > t->len - off)
        return INI_ERR_DATA_IN_RANGE;
    if (copy && data != t->buf + off) /* not placed directly by the engine */
        memcpy(t->buf + off, data, dlen);
    return INI_OK;
}

static int rx_data_in(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                      bool dd_ok)
{
    struct ini_task *t = ini_task_lookup(c->s, get_be32(hdr + BHS_ITT));
    if (!t || t->conn != c) {
        stale_pdu(c, "Data-In", hdr);
        if (c->w.erl >= 1 && (hdr[BHS_FLAGS] & ISCSI_DATAIN_STATUS))
            return ini_snack_statsn(c, get_be32(hdr + BHS_STATSN), false);
        return INI_OK;
    }
    if (c->w.erl >= 1)
        return ini_snack_data_in(c, t, hdr, data, dlen, dd_ok);
    uint8_t flags = hdr[BHS_FLAGS];
    if (dlen) {
        int rc = ini_task_place_data_in(c, t, hdr, data, dlen, true);
        if (rc < 0)
            return rc;
        /* At ERL 0 any of these fails the task (RFC 7143 §7.1); the first one names it */
        if (get_be32(hdr + BHS_DATASN) != t->exp_datasn && !t->data_bad)
            t->data_bad = "Data-In DataSN out of sequence (a PDU lost or sent twice)";
        if (c->s->params.data_pdu_in_order && get_be32(hdr + BHS_BUFFER_OFFSET) != t->data_in &&
            !t->data_bad)
            t->data_bad = "Data-In buffer offset out of order (DataPDUInOrder=Yes)";
        if (!dd_ok && !t->data_bad)
            t->data_bad = "data digest error on Data-In";
        t->exp_datasn++;
        t->data_in += dlen;
    }
    if (flags & ISCSI_DATAIN_STATUS) {
        /* Phase collapse (§11.7.4): this PDU carries StatSN and status. */
        uint32_t statsn = get_be32(hdr + BHS_STATSN);
        if (sn_le(c->expstatsn, statsn))
            c->expstatsn = statsn + 1;
        task_status(c, t, hdr, NULL, 0);
    }
    return INI_OK;
}

static int rx_scsi_rsp(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                       bool dd_ok)
{
    struct ini_task *t = ini_task_lookup(c->s, get_be32(hdr + BHS_ITT));
    if (!t || t->conn != c) {
        stale_pdu(c, "SCSI Response", hdr);
        if (c->w.erl >= 1 && dd_ok)
            return ini_snack_statsn(c, get_be32(hdr + BHS_STATSN), false);
        if (c->w.erl >= 1) /* its StatSN, if still missing, asked for again */
            return ini_snack_statsn_lost(c, get_be32(hdr + BHS_STATSN));
        return INI_OK;
    }
    if (c->w.erl >= 1)
        return ini_snack_scsi_rsp(c, t, hdr, data, dlen, dd_ok);
    if (!dd_ok && !t->data_bad)
        t->data_bad = "data digest error on the SCSI Response";
    task_status(c, t, hdr, data, dlen);
    return INI_OK;
}

static int rx_r2t(struct ini_conn *c, const uint8_t *hdr)
{
    struct ini_task *t = ini_task_lookup(c->s, get_be32(hdr + BHS_ITT));
    if (!t || t->conn != c) {
        /* The task may have completed with an error already; nothing to send. */
        LOG_DEBUG("initiator: R2T for an unknown task %08x", get_be32(hdr + BHS_ITT));
        return INI_OK;
    }
    uint32_t off = get_be32(hdr + BHS_BUFFER_OFFSET);
    uint32_t len = get_be32(hdr + BHS_DESIRED_LEN);
    /* RFC 7143 §11.8: the DesiredDataTransferLength is at most MaxBurstLength and the range
     * lies within the expected transfer; anything else is a protocol error. */
    if (t->dir != LR_DIR_WRITE || len == 0 || off > t->len || len > t->len - off ||
        len > c->s->params.max_burst) {
        task_fail(c, t, "R2T outside the task's data");
        return INI_ERR_BAD_R2T;
    }
    if (c->w.erl >= 1)
        return ini_snack_r2t(c, t, hdr);
    /* Below ERL 1 no R2T asks for data again (§7.8 recovery R2Ts need ERL 1): one that does
     * would make us queue the same data without end */
    if (c->s->params.data_sequence_in_order && off < t->solicited_end) {
        task_fail(c, t, "R2T for data already sent or solicited");
        return INI_ERR_R2T_AGAIN;
    }
    if (off + len > t->solicited_end)
        t->solicited_end = off + len;
    return ini_task_data_out(c, t, get_be32(hdr + BHS_TTT), off, len, false);
}

/* A ping answer left the queue (sent, or dropped with the connection). */
static void ping_sent(struct wire_pdu *p, bool ok)
{
    (void)ok;
    struct ini_conn *c = p->arg;
    assert(c->ping_unsent >= p->dlen);
    c->ping_unsent -= p->dlen;
}

static int rx_nop_in(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen)
{
    uint32_t ttt = get_be32(hdr + BHS_TTT);
    if (ttt == ISCSI_RSVD_TAG)
        return INI_OK; /* answer to a NOP-Out of ours, or a no-reply notice */
    if (c->ping_unsent + (uint64_t)dlen > INI_PING_BACKLOG_MAX) {
        /* every ping is answered with its data (§11.18): a target that sends them and does
         * not read the answers would make the queue grow without end */
        LOG_WARN("initiator: connection %u: %u bytes of ping answers unsent: the target pings "
                 "faster than it reads",
                 c->idx, c->ping_unsent);
        return INI_ERR_PING_FLOOD;
    }
    /* RFC 7143 §11.18/§11.19: the target pings; answer with a NOP-Out echoing TTT and LUN and
     * the ping data, ITT reserved, immediate (CmdSN not advanced). */
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_OK; /* the target pings again */
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL);
    h->b[0] |= ISCSI_BHS_IMMEDIATE;
    memcpy(h->b + BHS_LUN, hdr + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
    bhs_put32(h, BHS_TTT, ttt);
    bhs_put32(h, BHS_CMDSN, c->s->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    void *copy = NULL;
    if (dlen) {
        copy = malloc(dlen);
        if (!copy)
            dlen = 0;
        else
            memcpy(copy, data, dlen);
    }
    p->owned = copy;
    p->sent = ping_sent;
    p->arg = c;
    c->ping_unsent += dlen;
    ini_conn_send(c, p, copy, dlen);
    return INI_OK;
}

static bool pdu_has_statsn(enum iscsi_opcode op, const uint8_t *hdr)
{
    switch (op) {
    case ISCSI_OP_SCSI_RSP:
    case ISCSI_OP_TMF_RSP:
    case ISCSI_OP_TEXT_RSP:
    case ISCSI_OP_LOGOUT_RSP:
    case ISCSI_OP_REJECT:
    case ISCSI_OP_ASYNC_MSG:
        return true;
    case ISCSI_OP_NOP_IN:
        return get_be32(hdr + BHS_ITT) != ISCSI_RSVD_TAG;
    default:
        return false; /* Data-In handles its own; R2T does not advance StatSN */
    }
}

/* §11.17: the data segment is the header of the rejected PDU. */
static int rx_reject(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen)
{
    struct ini_task *t = NULL;
    if (dlen >= ISCSI_BHS_LEN && (data[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_SCSI_CMD)
        t = ini_task_lookup(c->s, get_be32(data + BHS_ITT));
    c->rejects++;
    if (c->w.erl >= 1) {
        bool handled = false;
        int rc = ini_snack_reject(c, hdr, data, dlen, &handled);
        if (rc < 0 || handled)
            return rc;
    }
    if (c->rejects <= 5 || (c->rejects & (c->rejects - 1)) == 0)
        LOG_WARN("initiator: connection %u: target rejected a PDU (reason 0x%02x, opcode "
                 "0x%02x; %llu so far)",
                 c->idx, hdr[BHS_REJECT_REASON], dlen ? data[0] & ISCSI_OPCODE_MASK : 0,
                 (unsigned long long)c->rejects);
    if (t && t->conn == c)
        task_fail(c, t, "command rejected by the target");
    return INI_OK;
}

int ini_rx_ffp(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
               bool data_digest_ok)
{
    enum iscsi_opcode op = (enum iscsi_opcode)(hdr[0] & ISCSI_OPCODE_MASK);
    if (op != ISCSI_OP_LOGIN_RSP) {
        ini_session_update_window(c->s, get_be32(hdr + BHS_EXPCMDSN), get_be32(hdr + BHS_MAXCMDSN));
        if (c->w.erl >= 1) {
            /* §7.9: a StatSN gap is a lost response, asked for again (snack.c). A SCSI
             * Response's StatSN waits for its task's data, so its handler records it; any
             * other response with a bad data digest is discarded and asked for again (§7.8). */
            if (op != ISCSI_OP_NOP_IN) /* pings and their answers are no task's progress */
                ini_snack_progress(c, reactor_now_ms());
            if (pdu_has_statsn(op, hdr) && op != ISCSI_OP_SCSI_RSP) {
                if (!data_digest_ok)
                    return ini_snack_statsn_lost(c, get_be32(hdr + BHS_STATSN));
                int rc = ini_snack_statsn(c, get_be32(hdr + BHS_STATSN), false);
                if (rc < 0)
                    return rc;
            }
        } else if (pdu_has_statsn(op, hdr)) {
            uint32_t statsn = get_be32(hdr + BHS_STATSN);
            if (sn_le(c->expstatsn, statsn))
                c->expstatsn = statsn + 1;
        }
    }
    switch (op) {
    case ISCSI_OP_DATA_IN:
        return rx_data_in(c, hdr, data, dlen, data_digest_ok);
    case ISCSI_OP_SCSI_RSP:
        return rx_scsi_rsp(c, hdr, data, dlen, data_digest_ok);
    case ISCSI_OP_R2T:
        return rx_r2t(c, hdr);
    case ISCSI_OP_NOP_IN:
        if (!data_digest_ok)
            return INI_OK; /* §7.8: a digest error on a NOP-In is simply dropped */
        if (c->w.erl >= 1 && get_be32(hdr + BHS_ITT) == INI_PING_ITT + c->idx)
            return ini_snack_pong(c, hdr);
        return rx_nop_in(c, hdr, data, dlen);
    case ISCSI_OP_TEXT_RSP:
        return ini_session_text_rsp(c, hdr, data_digest_ok ? data : NULL,
                                    data_digest_ok ? dlen : 0);
    case ISCSI_OP_LOGOUT_RSP:
        return ini_session_logout_rsp(c, hdr);
    case ISCSI_OP_REJECT:
        return rx_reject(c, hdr, data, dlen);
    case ISCSI_OP_ASYNC_MSG:
        return ini_orphan_async(c, hdr); /* §11.9.1 (orphan.c) */
    case ISCSI_OP_TMF_RSP:
        return ini_orphan_tmf_rsp(c, hdr); /* we send TMF only to reassign tasks (ERL 2) */
    default:
        return INI_ERR_UNEXPECTED_PDU;
    }
}
