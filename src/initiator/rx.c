/* The full feature phase receive path (RFC 7143 §11): each PDU the target sends goes to its
 * handler, whose status comes back to conn.c's dispatch. Here as well: ERL 0's own handling
 * of Data-In, SCSI Response and R2T (ERL >= 1: snack.c), answers to the target's NOP-In pings
 * (§11.18-§11.19), Rejects (§11.17) and responses for tasks we no longer have. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "initiator/abort.h"
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/logout.h"
#include "initiator/orphan.h"
#include "initiator/rx.h"
#include "initiator/sched.h"
#include "initiator/snack.h"
#include "initiator/table.h"
#include "initiator/task.h"
#include "util/log.h"

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
        ini_task_status(c, t, hdr, NULL, 0);
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
    ini_task_status(c, t, hdr, data, dlen);
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
        ini_task_fail(c, t, "R2T outside the task's data");
        return INI_ERR_BAD_R2T;
    }
    if (c->w.erl >= 1)
        return ini_snack_r2t(c, t, hdr);
    /* Below ERL 1 no R2T asks for data again (§7.8 recovery R2Ts need ERL 1): one that does
     * would make us queue the same data without end */
    if (c->s->params.data_sequence_in_order && off < t->solicited_end) {
        ini_task_fail(c, t, "R2T for data already sent or solicited");
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
        ini_task_fail(c, t, "command rejected by the target");
    return INI_OK;
}

/* The PDU to its handler, once its StatSN is recorded (ini_rx_ffp). */
static int rx_dispatch(struct ini_conn *c, enum iscsi_opcode op, const uint8_t *hdr,
                       const uint8_t *data, uint32_t dlen, bool data_digest_ok)
{
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
    case ISCSI_OP_TEXT_RSP: /* a discovery session's SendTargets (discovery.c) */
        if (!c->s->text_rsp)
            return INI_ERR_TEXT_RSP;
        return c->s->text_rsp(c, hdr, data_digest_ok ? data : NULL, data_digest_ok ? dlen : 0);
    case ISCSI_OP_LOGOUT_RSP:
        if (get_be32(hdr + BHS_ITT) != INI_LOGOUT_ITT)
            return ini_orphan_logout_rsp(c, hdr); /* one connection's (orphan.c) */
        return ini_logout_rsp(c, hdr);
    case ISCSI_OP_REJECT:
        return rx_reject(c, hdr, data, dlen);
    case ISCSI_OP_ASYNC_MSG:
        return ini_orphan_async(c, hdr); /* §11.9.1 (orphan.c) */
    case ISCSI_OP_TMF_RSP:
        if (ini_abort_itt(get_be32(hdr + BHS_ITT))) { /* lr_task_abort's (abort.c) */
            struct ini_task *again;
            int rc = ini_abort_rsp(c, hdr, &again);
            if (again)
                ini_orphan_again(c, again);
            return rc;
        }
        return ini_orphan_tmf_rsp(c, hdr); /* TASK REASSIGN (ERL 2) */
    default:
        return INI_ERR_UNEXPECTED_PDU;
    }
}

int ini_rx_ffp(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
               bool data_digest_ok)
{
    enum iscsi_opcode op = (enum iscsi_opcode)(hdr[0] & ISCSI_OPCODE_MASK);
    int snack_rc = INI_OK;
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
                /* Recorded as received even when the SNACK for a gap before it cannot be
                 * queued (no memory, INI_RESEND_BACKLOG_MAX): the connection then fails, but
                 * this PDU arrived whole and is handled first -- a Logout Response still ends
                 * the logout as answered, not as a lost connection. */
                snack_rc = ini_snack_statsn(c, get_be32(hdr + BHS_STATSN), false);
            }
        } else if (pdu_has_statsn(op, hdr)) {
            uint32_t statsn = get_be32(hdr + BHS_STATSN);
            if (sn_le(c->expstatsn, statsn))
                c->expstatsn = statsn + 1;
        }
    }
    int rc = rx_dispatch(c, op, hdr, data, dlen, data_digest_ok);
    return rc < 0 ? rc : snack_rc; /* the PDU's own ending, if it has one, says more */
}
