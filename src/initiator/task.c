/* SCSI tasks on the wire (RFC 7143 §11.2-§11.8): the SCSI Command PDU with immediate data and
 * unsolicited Data-Out up to FirstBurstLength, Data-Out answering R2Ts, Data-In placement, the
 * status of a Data-In or SCSI Response as the caller sees it, and the TASK REASSIGN of an ERL 2
 * orphan. What arrives is dispatched by rx.c. */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/table.h"
#include "initiator/task.h"
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
        assert(t->conn == c);
        ini_task_pdu_mark(t, p, n, again);
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
    ini_task_pdu_mark(t, p, imm, false); /* t->cmd_sent once it is in the socket */
    t->solicited_end = imm + unsol;
    ini_conn_send(c, p, imm ? t->buf : NULL, imm);
    if (unsol)
        return ini_task_data_out(c, t, ISCSI_RSVD_TAG, imm, unsol, false);
    return INI_OK;
}

int ini_task_send(struct ini_conn *c, struct ini_task *t)
{
    /* PDUs of an earlier sending are still queued only on this same connection (a retry) */
    assert(!t->queued || t->conn == c);
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

static void result_init(struct lr_result *r, enum lr_err e, const char *what)
{
    memset(r, 0, offsetof(struct lr_result, sense));
    r->residual_kind = LR_RESIDUAL_NONE; /* past sense, which is not cleared */
    r->err = e;
    r->what = what;
}

void ini_task_fail(struct ini_conn *c, struct ini_task *t, const char *what)
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

/* Status from a Data-In with S or a SCSI Response (RFC 7143 §11.4, §11.7.4), at ERL 0. */
void ini_task_status(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
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

/* ERL 2 (orphan.c): the TASK REASSIGN of t, an orphan, on c (RFC 7143 §11.5.1, §7.2.2). */
int ini_task_send_reassign(struct ini_conn *c, struct ini_task *t)
{
    struct lr_session *s = c->s;
    t->reassign = false;
    t->reassigning = true;
    t->conn = c;
    c->outstanding++;
    t->deadline_ms = reactor_now_ms() + s->o.cmd_timeout_ms;
    /* §11.5 ExpDataSN: for a read, where the Data-In resume; what came before is ours (the
     * first hole, if Data-In were missing). Data PDUs of the old allegiance we did not count
     * are to be discarded, and the target sends from there. For a write 0: the target asks
     * with R2Ts for whatever it lacks. */
    uint32_t expdatasn = 0;
    if (t->dir == LR_DIR_READ)
        expdatasn = t->nmiss ? t->miss_beg[0] : t->exp_datasn;
    t->exp_datasn = expdatasn;
    t->nmiss = 0;
    t->status_held = t->snack_refused = t->miss_overflow = t->snack_early = false;
    t->r2tsn_resync = true;
    if (c->w.erl >= 1 && c->outstanding == 1)
        ini_snack_progress(c, reactor_now_ms());
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    /* §11.5: immediate (a numbered TMF would wait behind the CmdSN holes the loss left), so
     * CmdSN is the session's next and is not taken; RefCmdSN is reserved for this function. */
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_TMF_REQ, ISCSI_FLAG_FINAL | ISCSI_TMF_TASK_REASSIGN);
    h->b[0] |= ISCSI_BHS_IMMEDIATE;
    ini_fill_lun(h->b + BHS_LUN, s->o.lun);
    bhs_put32(h, BHS_ITT, INI_TMF_ITT + ini_task_idx(s, t));
    bhs_put32(h, BHS_RTT, t->itt);
    bhs_put32(h, BHS_CMDSN, s->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    bhs_put32(h, BHS_TMF_EXPDATASN, expdatasn);
    LOG_DEBUG("initiator: connection %u: TASK REASSIGN %08x (CmdSN %u, ExpDataSN %u)", c->idx,
              t->itt, t->cmdsn, expdatasn);
    ini_conn_send(c, p, NULL, 0);
    return INI_OK;
}
