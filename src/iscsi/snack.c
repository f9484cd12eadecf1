/* SNACK Request on the target (RFC 7143 §11.16), at ErrorRecoveryLevel >= 1: the initiator
 * asks for Data-In, R2T or status PDUs again, acknowledges Data-In (DataACK), or asks for a
 * read's data cut anew (R-Data). What is asked for is rebuilt from the task: answered tasks
 * stay retained until ExpStatSN acknowledges their status (response.c), Data-In is re-read from
 * where the data lives and cut the way it was the first time, an R2T comes from its open
 * sequence. A SNACK for anything not sent, or already acknowledged, is rejected with reason
 * Protocol Error (§11.16: MUST). At ERL 0 the dispatcher answers SNACK with "command not
 * supported" and never comes here. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/cmd.h"
#include "iscsi/conn.h"
#include "iscsi/dataout.h"
#include "iscsi/response.h"
#include "iscsi/rsp_ring.h"
#include "iscsi/snack.h"
#include "iscsi/task.h"
#include "util/iov.h"
#include "util/log.h"

#define SNACK_BEGRUN 40
#define SNACK_RUNLENGTH 44

enum snack_type {
    SNACK_DATA_R2T = 0,
    SNACK_STATUS = 1,
    SNACK_DATA_ACK = 2,
    SNACK_RDATA = 3,
};

/* A kept response again: the same header and data but for the current ExpCmdSN and MaxCmdSN
 * (§11.16). Queued through conn_send, which copies it into the ring once more (same StatSN). */
static int resend_copy(struct iscsi_conn *c, const struct rsp_copy *k)
{
    struct wire_pdu *p = conn_pdu_new(c, bhs_opcode(&k->bhs), 0);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    *h = k->bhs;
    conn_fill_sn(c, h, false);
    bhs_put32(h, BHS_STATSN, k->statsn);
    c->rsp_ring.resending = true; /* the ring has it already */
    int rc = conn_send_copy(c, p, k->data, k->dlen);
    c->rsp_ring.resending = false;
    return rc;
}

/* R-Data SNACK (§11.16.3): every Data-In again, cut to the initiator's current
 * MaxRecvDataSegmentLength and numbered from 0, then a SCSI Response with the SNACK Tag and
 * the original StatSN. */
static int resend_resegmented(struct iscsi_conn *c, struct iscsi_task *t, uint32_t snack_tag)
{
    assert(t->state == TASK_RETAINED);
    if (t->din_total) {
        t->din_pdu_len = c->max_send_dsl;
        t->din_recut_pdu = 0; /* one cut again, numbered from 0 */
        uint32_t count = rsp_data_in_count(t);
        int rc = rsp_queue_data_in_run(c, t, 0, count, DIN_NO_STATUS);
        if (rc < 0)
            return rc;
        t->datasn_in = count;
    }
    return rsp_status(c, t, RSP_AGAIN, snack_tag);
}

static int snack_reject(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t reason,
                        const char *why)
{
    CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: SNACK type %u ITT 0x%08x BegRun %u RunLength %u: %s",
                     c->peer, req->b[1] & 0x0f, bhs_get32(req, BHS_ITT),
                     bhs_get32(req, SNACK_BEGRUN), bhs_get32(req, SNACK_RUNLENGTH), why);
    return conn_send_reject(c, req, reason);
}

/* An answered task not yet acknowledged, by ITT (a task in progress, or one let go, is not). */
static struct iscsi_task *retained_task(struct iscsi_conn *c, uint32_t itt)
{
    struct iscsi_task *t = cmd_task_lookup(c, itt);
    return t && t->state == TASK_RETAINED ? t : NULL;
}

/* Data/R2T SNACK: BegRun/RunLength count DataSNs of a read's Data-In, or R2TSNs of a write's
 * R2Ts; 0/0 asks for every unacknowledged one (§11.16.6, §11.16.7). */
static int snack_data_r2t(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
    uint32_t itt = bhs_get32(req, BHS_ITT);
    uint32_t beg = bhs_get32(req, SNACK_BEGRUN);
    uint32_t run = bhs_get32(req, SNACK_RUNLENGTH);
    struct iscsi_task *t = cmd_task_lookup(c, itt);
    if (!t)
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "no such task (acknowledged?)");
    if (t->scsi.dir == SCSI_DIR_READ) {
        /* Data-In goes out only with the status (exec_respond): a read not yet answered has
         * sent none. */
        uint32_t count = t->state == TASK_RETAINED ? rsp_data_in_count(t) : 0;
        if (beg >= count || (run && (run > count - beg)))
            return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "Data-In not sent");
        return rsp_resend_data_in(c, t, beg, run);
    }
    if (t->scsi.dir == SCSI_DIR_WRITE && t->state != TASK_RETAINED) {
        /* R2TSN beg.. of the open sequences; an R2T whose sequence closed was answered (its
         * Data-Out acknowledges it) or superseded by a recovery R2T, and one never sent was
         * never sent: all refused. */
        uint32_t end = run ? beg + run : t->r2tsn;
        if (!sn_lt(beg, end) || sn_lt(t->r2tsn, end))
            return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "R2T not sent");
        bool all = !beg && !run; /* every unacknowledged one: none may be */
        unsigned sent = 0;
        for (unsigned i = 0; i < ISCSI_MAX_R2T; i++) {
            const struct r2t_seq *seq = &t->r2t[i];
            if (!seq->used || sn_lt(seq->r2tsn, beg) || !sn_lt(seq->r2tsn, end))
                continue;
            if (seq->got)
                continue; /* Data-Out came for it: the initiator has it */
            int rc = dataout_resend_r2t(c, t, seq->r2tsn);
            if (rc < 0)
                return rc;
            sent++;
        }
        if (!sent && !all)
            return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR,
                                "R2T already answered or not open");
        return ISCSI_OK;
    }
    return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "nothing of that task to re-send");
}

/* Status SNACK: the numbered responses StatSN BegRun.. (RunLength 0: up to the last sent)
 * again, as exact replicas (§11.16). StatSNs below ExpStatSN were acknowledged; at or past our
 * StatSN never sent. SCSI responses come from the retained tasks, the others (NOP-In, TMF,
 * Text, Logout, Reject, Async) from the copies of the last ISCSI_RSP_RING of them. A StatSN of
 * the run found in neither (a copy overwritten, or not made for want of memory) cannot be
 * sent: what can is, then the SNACK is rejected with reason Protocol Error (§11.17.1: the
 * reason for a SNACK the target does not serve, as for one asking what was never sent), so
 * the initiator stops waiting for that StatSN instead of asking for ever. */
static int snack_status(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
    uint32_t beg = bhs_get32(req, SNACK_BEGRUN);
    uint32_t run = bhs_get32(req, SNACK_RUNLENGTH);
    uint32_t end = run ? beg + run : c->statsn;
    if (sn_lt(beg, c->exp_statsn))
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "status acknowledged already");
    if (c->retain_dropped && sn_lt(beg, c->retain_floor))
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR,
                            "status no longer kept (never acknowledged)");
    if (!sn_lt(beg, end) || sn_lt(c->statsn, end))
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "status not sent");
    /* the kept responses in the run, in StatSN order, merged with the retained tasks' */
    const struct rsp_copy *kept[ISCSI_RSP_RING];
    unsigned nkept = 0;
    for (unsigned i = 0; c->rsp_ring.slot && i < ISCSI_RSP_RING; i++) {
        const struct rsp_copy *k = &c->rsp_ring.slot[i];
        if (!k->used || sn_lt(k->statsn, beg) || !sn_lt(k->statsn, end))
            continue;
        unsigned at = nkept++;
        while (at && sn_lt(k->statsn, kept[at - 1]->statsn)) {
            kept[at] = kept[at - 1];
            at--;
        }
        kept[at] = k;
    }
    unsigned ki = 0;
    uint32_t served = nkept; /* each StatSN is one response: the two sources never share one */
    for (struct list_node *n = c->retained.next; n != &c->retained; n = n->next) {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, retained_node);
        if (sn_lt(t->statsn, beg))
            continue;
        if (!sn_lt(t->statsn, end))
            break; /* the list is in StatSN order */
        for (; ki < nkept && sn_lt(kept[ki]->statsn, t->statsn); ki++) {
            int rc = resend_copy(c, kept[ki]);
            if (rc < 0)
                return rc;
        }
        int rc = rsp_resend_status(c, t);
        if (rc < 0)
            return rc;
        served++;
    }
    for (; ki < nkept; ki++) {
        int rc = resend_copy(c, kept[ki]);
        if (rc < 0)
            return rc;
    }
    if (served != end - beg)
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR,
                            "status no longer kept (older than the last 16 other responses)");
    return ISCSI_OK;
}

/* DataACK: acknowledges Data-In of a sequence whose last PDU had the A bit (§11.16). This
 * target never sets A (it keeps a read's data until the status is acknowledged), so no
 * DataACK is valid: reason "Invalid DataACK" (§11.17.1). */
static int snack_data_ack(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
    return snack_reject(c, req, ISCSI_REJECT_INVALID_DATA_ACK, "no Data-In asked for a DataACK");
}

/* R-Data SNACK (§11.16.3): a read's data again, cut to the current MaxRecvDataSegmentLength,
 * then a SCSI Response carrying the SNACK Tag. BegRun and RunLength must be 0. */
static int snack_rdata(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
    if (bhs_get32(req, SNACK_BEGRUN) || bhs_get32(req, SNACK_RUNLENGTH))
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "R-Data SNACK with a run");
    struct iscsi_task *t = retained_task(c, bhs_get32(req, BHS_ITT));
    if (!t || t->scsi.dir != SCSI_DIR_READ)
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "no answered read to re-send");
    return resend_resegmented(c, t, bhs_get32(req, BHS_TTT));
}

int snack_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    const struct iscsi_bhs *req = &p->bhs;
    assert(conn_erl(c) >= 1);
    switch (req->b[1] & 0x0f) {
    case SNACK_DATA_R2T:
        return snack_data_r2t(c, req);
    case SNACK_STATUS:
        return snack_status(c, req);
    case SNACK_DATA_ACK:
        return snack_data_ack(c, req);
    case SNACK_RDATA:
        return snack_rdata(c, req);
    default:
        return snack_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR, "unknown SNACK type");
    }
}
