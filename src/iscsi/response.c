/* Answers to SCSI commands on the target: the SCSI Response (sense, residuals) and Data-In
 * with the status in the last PDU (phase collapse, RFC 7143 §11.7.4), cut so that a Data SNACK
 * can rebuild any PDU (§11.16), and the answered tasks retained until ExpStatSN acknowledges
 * them (ERL >= 1, §4.2.2.2). */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/response.h"
#include "iscsi/session.h"
#include "iscsi/task.h"
#include "util/iov.h"
#include "util/log.h"

/* Each queued PDU that answers a task holds a reference, so the data it points at (the task's
 * buffers) stays until it is on the wire or dropped. */
static void task_pdu_sent(struct wire_pdu *p, bool ok)
{
    (void)ok;
    task_put(p->arg);
}

static void set_residual(struct iscsi_bhs *h, uint8_t *flags, uint32_t wanted, uint32_t edtl,
                         uint8_t over, uint8_t under)
{
    if (wanted > edtl) {
        *flags |= over;
        bhs_put32(h, BHS_RESIDUAL, wanted - edtl);
    } else if (wanted < edtl) {
        *flags |= under;
        bhs_put32(h, BHS_RESIDUAL, edtl - wanted);
    }
}

/* The Expected Data Transfer Length that applies to the command's direction: EDTL counts the
 * bytes of the direction(s) the R and W bits name (RFC 7143 §11.3.5), so a command that reads
 * from an initiator that did not set R expects none (it gets no Data-In: residual overflow of
 * all it produced), and likewise a write without W. */
uint32_t rsp_edtl(const struct iscsi_task *t)
{
    if (t->scsi.dir == SCSI_DIR_READ && !t->scsi.edtl_read)
        return 0;
    if (t->scsi.dir == SCSI_DIR_WRITE && !t->scsi.edtl_write)
        return 0;
    return t->edtl;
}

/* The bytes a command wanted to move, for the residual (§11.4.5): what the CDB asked for on a
 * write, what the device produced on a read. */
static uint32_t task_wanted(const struct iscsi_task *t)
{
    if (t->scsi.dir == SCSI_DIR_READ)
        return t->scsi.data_len;
    if (t->scsi.dir == SCSI_DIR_WRITE)
        return t->scsi.xfer_len;
    return 0;
}

/* The sequence numbers of a PDU sent again (§11.16): the StatSN it went out with, the current
 * ExpCmdSN and MaxCmdSN. */
void rsp_fill_sn_again(struct iscsi_conn *c, struct iscsi_bhs *h, uint32_t statsn)
{
    conn_fill_sn(c, h, false);
    bhs_put32(h, BHS_STATSN, statsn);
}

/* The status fields of a response: StatSN, ExpCmdSN, MaxCmdSN as `mode` says. */
static void fill_status_sn(struct iscsi_conn *c, struct iscsi_task *t, struct iscsi_bhs *h,
                           enum rsp_mode mode)
{
    if (mode == RSP_AGAIN) {
        rsp_fill_sn_again(c, h, t->statsn);
        return;
    }
    t->statsn = c->statsn;
    if (mode == RSP_FIRST) {
        uint32_t exp, max;
        session_cmd_done_window(c->session, &exp, &max);
        conn_put_sn(c, h, true, exp, max);
        return;
    }
    conn_fill_sn(c, h, true);
}

/* The SCSI Response of a task (see enum rsp_mode), with snack_tag set for an R-Data SNACK
 * (§11.16.3). */
int rsp_status(struct iscsi_conn *c, struct iscsi_task *t, enum rsp_mode mode, uint32_t snack_tag)
{
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_SCSI_RSP, 0);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    uint8_t flags = ISCSI_FLAG_FINAL;
    h->b[BHS_RESPONSE] = 0; /* command completed at target */
    h->b[BHS_STATUS] = t->scsi.status;
    bhs_put32(h, BHS_ITT, t->itt);
    if (!t->refused || t->scsi.dir != SCSI_DIR_NONE)
        set_residual(h, &flags, task_wanted(t), rsp_edtl(t), ISCSI_RSP_OVERFLOW,
                     ISCSI_RSP_UNDERFLOW);
    else if (t->edtl) /* refused before any transfer: nothing of EDTL moved */
        set_residual(h, &flags, 0, t->edtl, ISCSI_RSP_OVERFLOW, ISCSI_RSP_UNDERFLOW);
    h->b[1] = flags;
    bhs_put32(h, BHS_EXPDATASN, t->scsi.dir == SCSI_DIR_READ ? t->datasn_in : t->r2tsn);
    if (mode == RSP_AGAIN)
        bhs_put32(h, BHS_TTT, snack_tag); /* the SNACK Tag field of a SCSI Response */
    fill_status_sn(c, t, h, mode);
    task_get(t);
    p->sent = task_pdu_sent;
    p->arg = t;
    if (t->scsi.status == SCSI_STATUS_CHECK_CONDITION && t->scsi.sense_len) {
        /* §11.4.7: SenseLength (2 bytes) then the sense data */
        uint8_t buf[2 + SCSI_SENSE_MAX];
        put_be16(buf, t->scsi.sense_len);
        memcpy(buf + 2, t->scsi.sense, t->scsi.sense_len);
        return conn_send_copy(c, p, buf, 2u + t->scsi.sense_len);
    }
    conn_send(c, p);
    return ISCSI_OK;
}

int rsp_send_status(struct iscsi_conn *c, struct iscsi_task *t)
{
    return rsp_status(c, t, RSP_FIRST, 0);
}

/* Point a PDU's data at [off, off+len) of the task's buffers. */
static void pdu_map_task_data(struct wire_pdu *p, const struct scsi_task *st, uint32_t off,
                              uint32_t len)
{
    p->datacnt = iov_slice(st->iov, st->iovcnt, off, len, p->data, SCSI_TASK_IOV_MAX);
    p->dlen = len;
}

/* PDU j of a cut of [base, total) into PDUs of at most `pdu` bytes that also end at every
 * multiple of `burst` (MaxBurstLength sequences, F on the last of each): its offset, length and
 * F. base is 0 for the first transmission, a PDU's offset for a cut made anew (recut below). */
static void cut_seg(uint32_t base, uint32_t pdu, uint32_t burst, uint32_t total, uint32_t j,
                    uint32_t *off, uint32_t *len, bool *final)
{
    uint32_t bend = (base / burst + 1) * burst; /* the end of base's burst */
    if (bend > total)
        bend = total;
    uint32_t first = (bend - base + pdu - 1) / pdu; /* PDUs of base's (partial) burst */
    uint32_t bstart = base, blen = bend - base;
    if (j >= first) {
        uint32_t ppb = (burst + pdu - 1) / pdu; /* PDUs per whole burst */
        j -= first;
        bstart = bend + j / ppb * burst;
        blen = total - bstart < burst ? total - bstart : burst;
        j %= ppb;
    }
    *off = bstart + j * pdu;
    *len = blen - j * pdu < pdu ? blen - j * pdu : pdu;
    *final = j * pdu + *len == blen;
}

static uint32_t cut_count(uint32_t base, uint32_t pdu, uint32_t burst, uint32_t total)
{
    if (base >= total)
        return 0;
    uint32_t bend = (base / burst + 1) * burst;
    if (bend > total)
        bend = total;
    uint32_t ppb = (burst + pdu - 1) / pdu;
    uint32_t rest = total - bend;
    return (bend - base + pdu - 1) / pdu + rest / burst * ppb + (rest % burst + pdu - 1) / pdu;
}

/* Data-In PDU k of a read as it was last sent: from rsp_send_data_in()'s cut, or for DataSNs from
 * din_recut_sn on from the cut a reassignment made anew (rsp_resend_data_in_from). */
void rsp_data_in_seg(const struct iscsi_task *t, uint32_t k, uint32_t *off, uint32_t *len,
                     bool *final)
{
    if (t->din_recut_pdu && k >= t->din_recut_sn)
        cut_seg(t->din_recut_off, t->din_recut_pdu, t->din_burst, t->din_total, k - t->din_recut_sn,
                off, len, final);
    else
        cut_seg(0, t->din_pdu_len, t->din_burst, t->din_total, k, off, len, final);
}

uint32_t rsp_data_in_count(const struct iscsi_task *t)
{
    if (!t->din_total)
        return 0;
    if (t->din_recut_pdu)
        return t->din_recut_sn +
               cut_count(t->din_recut_off, t->din_recut_pdu, t->din_burst, t->din_total);
    return cut_count(0, t->din_pdu_len, t->din_burst, t->din_total);
}

/* Queue Data-In DataSN `datasn`: [off, off+len) of the task's data, F if `final`, and on the
 * last PDU the status (phase collapse, §11.7.4). */
int rsp_queue_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t datasn, uint32_t off,
                      uint32_t len, bool final, enum data_in_mode mode)
{
    struct scsi_task *st = &t->scsi;
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_DATA_IN, 0);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bool last = off + len == t->din_total;
    uint8_t flags = final || last ? ISCSI_FLAG_FINAL : 0;
    memcpy(h->b + BHS_LUN, t->req.b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, t->itt);
    bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
    bhs_put32(h, BHS_DATASN, datasn);
    bhs_put32(h, BHS_BUFFER_OFFSET, off);
    if (last && mode != DIN_NO_STATUS) {
        flags |= ISCSI_DATAIN_STATUS;
        h->b[BHS_STATUS] = st->status;
        set_residual(h, &flags, st->data_len, t->edtl, ISCSI_DATAIN_OVERFLOW,
                     ISCSI_DATAIN_UNDERFLOW);
        fill_status_sn(c, t, h,
                       mode == DIN_AGAIN      ? RSP_AGAIN
                       : mode == DIN_REASSIGN ? RSP_REASSIGN
                                              : RSP_FIRST);
    } else {
        uint32_t exp, max;
        session_window(c->session, &exp, &max);
        bhs_put32(h, BHS_EXPCMDSN, exp);
        bhs_put32(h, BHS_MAXCMDSN, max);
    }
    h->b[1] = flags;
    pdu_map_task_data(p, st, off, len);
    p->may_fault = scsi_task_pin_can_fault(st); /* a file LUN's mapping: guarded reads */
    task_get(t);
    p->sent = task_pdu_sent;
    p->arg = t;
    conn_send(c, p);
    return ISCSI_OK;
}

/* Queued PDUs of READs sent in place (their task still pins the pages). A Data-In's bytes go
 * to the task's own buffer at the PDU's Buffer Offset (every READ has one: scsi_task_buffer),
 * which the PDU keeps alive with its task reference (task_pdu_sent): the stalled reader holds
 * one copy of its data, not one per PDU beside the task's unused buffer. */
static enum wire_forget pinned_pdu(struct wire_pdu *p, void *arg, void **into)
{
    (void)arg;
    if (p->sent != task_pdu_sent || p->owned)
        return WIRE_FORGET_NOT;
    struct iscsi_task *t = p->arg;
    if (!scsi_task_pinned(&t->scsi))
        return WIRE_FORGET_NOT;
    uint8_t *buf = scsi_task_buffer(&t->scsi);
    if (buf && (p->hdr[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_DATA_IN) {
        uint32_t off = bhs_get32((const struct iscsi_bhs *)p->hdr, BHS_BUFFER_OFFSET);
        assert((uint64_t)off + p->dlen <= t->scsi.xfer_len); /* rsp_send_data_in's cut */
        *into = buf + off;
    }
    return WIRE_FORGET_COPY;
}

int rsp_unpin_stalled(struct iscsi_conn *c)
{
    if (wire_forget(&c->w, pinned_pdu, NULL) < 0)
        return ISCSI_ERR_NOMEM; /* the engine closed: the queue and its pins are gone */
    /* Every queued Data-In now sends from its own copy (the same bytes: the digests computed
     * at queue time hold). All of a READ's Data-In is queued at once (rsp_send_data_in) and
     * ERL 0 resends none (keeps_data READs copy), so nothing reads the pages any more. */
    for (struct list_node *n = c->w.txq.next; n != &c->w.txq; n = n->next) {
        struct wire_pdu *p = list_entry(n, struct wire_pdu, node);
        if (p->sent == task_pdu_sent)
            scsi_task_unpin(&((struct iscsi_task *)p->arg)->scsi);
    }
    return ISCSI_OK;
}

/* Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength, F at the end of each
 * MaxBurstLength sequence, the last one carrying the status (§11.7.4). The segmentation is
 * recorded on the task: at ERL >= 1 a Data SNACK re-creates any PDU from its DataSN. */
int rsp_send_data_in(struct iscsi_conn *c, struct iscsi_task *t)
{
    struct scsi_task *st = &t->scsi;
    uint32_t total = st->data_len < t->edtl ? st->data_len : t->edtl;
    uint32_t burst = c->session->params.max_burst ? c->session->params.max_burst : 262144;
    t->din_total = total;
    t->din_pdu_len = c->max_send_dsl;
    t->din_burst = burst;
    uint32_t off = 0, in_burst = 0;
    while (off < total) {
        uint32_t len = total - off;
        if (len > c->max_send_dsl)
            len = c->max_send_dsl;
        if (len > burst - in_burst)
            len = burst - in_burst;
        in_burst += len;
        bool final = in_burst == burst;
        if (final)
            in_burst = 0;
        int rc = rsp_queue_data_in(c, t, t->datasn_in++, off, len, final, DIN_FIRST);
        if (rc < 0)
            return rc;
        off += len;
    }
    return ISCSI_OK;
}

int rsp_queue_data_in_run(struct iscsi_conn *c, struct iscsi_task *t, uint32_t beg, uint32_t end,
                          enum data_in_mode mode)
{
    for (uint32_t k = beg; k < end; k++) {
        uint32_t off, len;
        bool final;
        rsp_data_in_seg(t, k, &off, &len, &final);
        int rc = rsp_queue_data_in(c, t, k, off, len, final, mode);
        if (rc < 0)
            return rc;
    }
    return ISCSI_OK;
}

int rsp_resend_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t beg, uint32_t n)
{
    uint32_t count = rsp_data_in_count(t);
    uint32_t end = n ? beg + n : count;
    assert(beg < end && end <= count); /* snack.c checked the run */
    return rsp_queue_data_in_run(c, t, beg, end, DIN_AGAIN);
}

int rsp_resend_status(struct iscsi_conn *c, struct iscsi_task *t)
{
    assert(t->state == TASK_RETAINED);
    /* A status that went out in the last Data-In (phase collapse) is that PDU again: the
     * numbered response to replicate exactly (§11.16). */
    uint32_t count = rsp_data_in_count(t);
    if (count)
        return rsp_resend_data_in(c, t, count - 1, 1);
    return rsp_status(c, t, RSP_AGAIN, 0);
}

/* A retained task is kept no longer (its StatSN acknowledged, or too many kept): off the
 * retained list, whose reference goes. Its answer's PDUs may still be queued (an initiator can
 * acknowledge a StatSN before it has been sent), and they keep the task on the connection's
 * list until they are written: it is then answered and done, TASK_SENDING again, so that
 * neither a TMF (exec_task_abort), a SNACK nor the ERL 2 orphaning takes it for a retained
 * task and lets go of the retained list's reference a second time. */
static void retained_drop(struct iscsi_conn *c, struct iscsi_task *t)
{
    assert(t->state == TASK_RETAINED);
    list_del(&t->retained_node);
    c->nretained--;
    t->state = TASK_SENDING;
    task_put(t); /* the retained list's */
}

/* ERL >= 1: past this many retained tasks the initiator is pinged so that its answer's
 * ExpStatSN releases them; past twice as many the oldest are let go (a SNACK for them is then
 * refused): an initiator that never acknowledges cannot make the target hold more. The bound
 * is max-tx-backlog, each retained task counted as a queued reply. Reading is not paused for
 * it, as for the transmit backlog: the ExpStatSN that releases them must still be read. */
void rsp_retained_bound(struct iscsi_conn *c)
{
    uint64_t max = c->srv->limits.max_tx_backlog;
    unsigned limit = max ? (unsigned)(max / WIRE_PDU_CHARGE) : CONN_TASKS_MAX;
    if (limit < 16)
        limit = 16;
    if (c->nretained > limit && !c->nop_outstanding)
        conn_send_nop_ping(c);
    while (c->nretained > 2 * limit) {
        struct iscsi_task *t = list_entry(c->retained.next, struct iscsi_task, retained_node);
        CONN_LOG_LIMITED(c, LOG_LVL_WARN,
                         "%s: StatSN %u not acknowledged (ExpStatSN %u): ITT 0x%08x no longer "
                         "kept for retransmission",
                         c->peer, t->statsn, c->exp_statsn, t->itt);
        c->retain_floor = t->statsn + 1;
        c->retain_dropped = true;
        retained_drop(c, t);
    }
}

void rsp_ack_statsn(struct iscsi_conn *c, uint32_t exp_statsn)
{
    while (!list_empty(&c->retained)) {
        struct iscsi_task *t = list_entry(c->retained.next, struct iscsi_task, retained_node);
        if (!sn_lt(t->statsn, exp_statsn))
            break;
        retained_drop(c, t);
    }
}

/* A read answered on the dead connection, its status not acknowledged: Data-In from DataSN k0
 * on (the initiator acknowledged those before, §11.5.1 ExpDataSN), the last one with the
 * status and a new StatSN of c. Cut as the first time unless c takes smaller PDUs (its
 * MaxRecvDataSegmentLength): then the rest is cut anew, DataSN going on from k0 (§11.5.1: the
 * number of PDUs may change with the reassignment). */
int rsp_resend_data_in_from(struct iscsi_conn *c, struct iscsi_task *t, uint32_t k0)
{
    uint32_t count = rsp_data_in_count(t);
    uint32_t off, len;
    bool final;
    rsp_data_in_seg(t, k0, &off, &len, &final);
    /* the PDU size of the cut DataSN k0 on belongs to (a cut made anew is only ever smaller) */
    uint32_t cur = t->din_recut_pdu && k0 >= t->din_recut_sn ? t->din_recut_pdu : t->din_pdu_len;
    if (cur <= c->max_send_dsl) {
        for (uint32_t k = k0; k < count; k++) {
            rsp_data_in_seg(t, k, &off, &len, &final);
            int rc = rsp_queue_data_in(c, t, k, off, len, final, DIN_REASSIGN);
            if (rc < 0)
                return rc;
        }
        return ISCSI_OK;
    }
    /* DataSN k0 on cut anew from PDU k0's offset; what came before keeps its cut, so that a
     * Data SNACK for any DataSN, before or after k0, gets that PDU as it was last sent. */
    uint32_t pdu = c->max_send_dsl;
    if (t->din_recut_pdu && k0 > t->din_recut_sn) {
        /* one cut made anew is recorded, not two: this one starts where that one did (the
         * initiator takes the PDUs it had again, over the same bytes) */
        k0 = t->din_recut_sn;
        off = t->din_recut_off;
    }
    if (k0 == 0) {
        t->din_pdu_len = pdu;
        t->din_recut_pdu = 0;
    } else {
        t->din_recut_sn = k0;
        t->din_recut_off = off;
        t->din_recut_pdu = pdu;
    }
    count = rsp_data_in_count(t);
    for (uint32_t k = k0; k < count; k++) {
        rsp_data_in_seg(t, k, &off, &len, &final);
        int rc = rsp_queue_data_in(c, t, k, off, len, final, DIN_REASSIGN);
        if (rc < 0)
            return rc;
    }
    t->datasn_in = count;
    return ISCSI_OK;
}
