/* SCSI commands over iSCSI on the target (RFC 7143 §11.3-§11.8): immediate and unsolicited
 * data up to FirstBurstLength, R2T bounded by MaxOutstandingR2T and MaxBurstLength, Data-Out
 * placed straight into the task's buffer, Data-In sent from the task's buffer (memory no other
 * command writes, so a data digest covers what is sent) with the status in the final PDU
 * (phase collapse), residuals, and task
 * lifetime across aborts and dropped connections. */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "util/iov.h"
#include "util/log.h"

/* Immediate commands bypass the CmdSN window (RFC 7143 §4.2.2.1), so they are bounded here:
 * past this many tasks on the connection one is rejected with reason 0x06, "Immediate Command
 * Reject - too many immediate commands" (§11.17.1). Non-immediate commands are bounded by the
 * window the target grants (MaxCmdSN); one inside it is always taken (outside it, it is
 * silently ignored, §4.2.2.1), and tasks whose answers wait to be sent are bounded by
 * max-tx-backlog, past which the connection stops reading. */
#define CONN_TASKS_MAX 1024u

/* ---------------- task pool ---------------- */

/* A freed task: the reactor's (warm, most recent first) before the connection's own. */
static struct iscsi_task *task_alloc(struct iscsi_conn *c)
{
    struct iscsi_reactor_local *l = conn_reactor_local(c);
    struct list_node *n = l ? list_pop(&l->task_free) : NULL;
    if (n)
        l->ntask_free--;
    else
        n = list_pop(&c->task_free);
    struct iscsi_task *t = n ? list_entry(n, struct iscsi_task, node) : malloc(sizeof(*t));
    if (!t)
        return NULL;
    memset(t, 0, sizeof(*t)); /* also what scsi_task_init() does for the embedded task */
    t->conn = c;
    t->refs = 1; /* the protocol side's */
    list_init(&t->r2t_node);
    list_init(&t->retained_node);
    list_init(&t->wait.node);
    t->wait.release = session_release_task;
    list_add_tail(&c->tasks, &t->node);
    c->ntasks++;
    return t;
}

void task_get(struct iscsi_task *t)
{
    assert(t->refs > 0);
    t->refs++;
}

/* The task stops counting in its portal's queue depth (struct iscsi_task.st_queue): on the
 * reactor that counted it, as every caller runs on the task's connection's thread. */
static void task_queue_leave(struct iscsi_task *t)
{
    iostats_queue(t->st_queue, -1);
    t->st_queue = NULL;
}

/* The one place a task is freed: when its last holder lets go (see struct iscsi_task). */
void task_put(struct iscsi_task *t)
{
    assert(t->refs > 0);
    if (--t->refs > 0)
        return;
    struct iscsi_conn *c = t->conn;
    if (!c) {
        /* ERL 2: an orphan never reassigned (orphan.c), on no connection's lists: its buffer
         * charge left with it, and it holds a session reference of its own. */
        assert(t->orphan == ORPHAN_NO || t->orphan == ORPHAN_IDLE);
        assert(list_empty(&t->wait.node) && list_empty(&t->retained_node));
        struct iscsi_session *s = t->orphan_sess;
        scsi_task_release(&t->scsi);
        taskmem_uncharge(s->srv, t->buf_charge); /* the orphan's memory, till now */
        free(t);
        session_put(s);
        return;
    }
    /* ended unanswered (aborted, dropped, its connection gone): out of the queue depth */
    task_queue_leave(t);
    assert(list_empty(&t->wait.node));     /* no longer waiting for its CmdSN turn */
    assert(list_empty(&t->retained_node)); /* the retained list holds a reference */
    assert(c->w.in.task != t);             /* the receive engine holds a reference while placing */
    conn_task_hash_del(c, t);
    list_del(&t->r2t_node);
    assert(c->buf_bytes >= t->buf_charge);
    c->buf_bytes -= t->buf_charge;
    scsi_task_release(&t->scsi);
    taskmem_uncharge(c->srv, t->buf_charge);
    t->buf_charge = 0;
    list_del(&t->node);
    c->ntasks--;
    struct iscsi_reactor_local *l = conn_reactor_local(c);
    if (l && l->ntask_free < ISCSI_REACTOR_TASKS_MAX) {
        list_add(&l->task_free, &t->node);
        l->ntask_free++;
    } else {
        list_add_tail(&c->task_free, &t->node);
    }
}

/* The newest task with that ITT other than `except`, not aborted. */
static struct iscsi_task *task_lookup_except(struct iscsi_conn *c, uint32_t itt,
                                             const struct iscsi_task *except)
{
    for (struct list_node *n = c->tasks.prev; n != &c->tasks; n = n->prev) {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        if (t != except && t->itt == itt && !t->aborted)
            return t;
    }
    return NULL;
}

/* ---------------- responses ---------------- */

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
static uint32_t task_edtl(const struct iscsi_task *t)
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
static void fill_sn_again(struct iscsi_conn *c, struct iscsi_bhs *h, uint32_t statsn)
{
    conn_fill_sn(c, h, false);
    bhs_put32(h, BHS_STATSN, statsn);
}

/* How a status goes out: the first time; a retransmission of the one sent (same StatSN, the
 * command counted done already, §11.16); after TASK REASSIGN, on a new connection with a new
 * StatSN of its own (the command counted done already, RFC 7143 §7.2.2). */
enum rsp_mode {
    RSP_FIRST,
    RSP_AGAIN,
    RSP_REASSIGN,
};

/* The status fields of a response: StatSN, ExpCmdSN, MaxCmdSN as `mode` says. */
static void fill_status_sn(struct iscsi_conn *c, struct iscsi_task *t, struct iscsi_bhs *h,
                           enum rsp_mode mode)
{
    if (mode == RSP_AGAIN) {
        fill_sn_again(c, h, t->statsn);
        return;
    }
    if (mode == RSP_FIRST)
        session_cmd_done(c->session);
    t->statsn = c->statsn;
    conn_fill_sn(c, h, true);
}

/* The SCSI Response of a task (see enum rsp_mode), with snack_tag set for an R-Data SNACK
 * (§11.16.3). */
static int scsi_response(struct iscsi_conn *c, struct iscsi_task *t, enum rsp_mode mode,
                         uint32_t snack_tag)
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
        set_residual(h, &flags, task_wanted(t), task_edtl(t), ISCSI_RSP_OVERFLOW,
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

static int send_scsi_response(struct iscsi_conn *c, struct iscsi_task *t)
{
    return scsi_response(c, t, RSP_FIRST, 0);
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

/* Data-In PDU k of a read as it was last sent: from send_data_in()'s cut, or for DataSNs from
 * din_recut_sn on from the cut a reassignment made anew (resend_data_in_from). */
static void data_in_seg(const struct iscsi_task *t, uint32_t k, uint32_t *off, uint32_t *len,
                        bool *final)
{
    if (t->din_recut_pdu && k >= t->din_recut_sn)
        cut_seg(t->din_recut_off, t->din_recut_pdu, t->din_burst, t->din_total, k - t->din_recut_sn,
                off, len, final);
    else
        cut_seg(0, t->din_pdu_len, t->din_burst, t->din_total, k, off, len, final);
}

uint32_t cmd_data_in_count(const struct iscsi_task *t)
{
    if (!t->din_total)
        return 0;
    if (t->din_recut_pdu)
        return t->din_recut_sn +
               cut_count(t->din_recut_off, t->din_recut_pdu, t->din_burst, t->din_total);
    return cut_count(0, t->din_pdu_len, t->din_burst, t->din_total);
}

enum data_in_mode {
    DIN_FIRST,     /* the original transmission */
    DIN_AGAIN,     /* an exact replica (Data SNACK, §11.16) */
    DIN_NO_STATUS, /* resegmented (R-Data SNACK): a SCSI Response follows with the status */
    DIN_REASSIGN,  /* after TASK REASSIGN: the status with a new StatSN (RSP_REASSIGN) */
};

/* Queue Data-In DataSN `datasn`: [off, off+len) of the task's data, F if `final`, and on the
 * last PDU the status (phase collapse, §11.7.4). */
static int queue_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t datasn, uint32_t off,
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
    task_get(t);
    p->sent = task_pdu_sent;
    p->arg = t;
    conn_send(c, p);
    return ISCSI_OK;
}

/* Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength, F at the end of each
 * MaxBurstLength sequence, the last one carrying the status (§11.7.4). The segmentation is
 * recorded on the task: at ERL >= 1 a Data SNACK re-creates any PDU from its DataSN. */
static int send_data_in(struct iscsi_conn *c, struct iscsi_task *t)
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
        int rc = queue_data_in(c, t, t->datasn_in++, off, len, final, DIN_FIRST);
        if (rc < 0)
            return rc;
        off += len;
    }
    return ISCSI_OK;
}

int cmd_resend_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t beg, uint32_t n)
{
    uint32_t count = cmd_data_in_count(t);
    uint32_t end = n ? beg + n : count;
    assert(beg < end && end <= count); /* snack.c checked the run */
    for (uint32_t k = beg; k < end; k++) {
        uint32_t off, len;
        bool final;
        data_in_seg(t, k, &off, &len, &final);
        int rc = queue_data_in(c, t, k, off, len, final, DIN_AGAIN);
        if (rc < 0)
            return rc;
    }
    return ISCSI_OK;
}

int cmd_resend_status(struct iscsi_conn *c, struct iscsi_task *t)
{
    assert(t->state == TASK_RETAINED);
    /* A status that went out in the last Data-In (phase collapse) is that PDU again: the
     * numbered response to replicate exactly (§11.16). */
    uint32_t count = cmd_data_in_count(t);
    if (count)
        return cmd_resend_data_in(c, t, count - 1, 1);
    return scsi_response(c, t, RSP_AGAIN, 0);
}

/* R-Data SNACK (§11.16.3): every Data-In again, cut to the initiator's current
 * MaxRecvDataSegmentLength and numbered from 0, then a SCSI Response with the SNACK Tag and
 * the original StatSN. */
int cmd_resend_resegmented(struct iscsi_conn *c, struct iscsi_task *t, uint32_t snack_tag)
{
    assert(t->state == TASK_RETAINED);
    if (t->din_total) {
        t->din_pdu_len = c->max_send_dsl;
        t->din_recut_pdu = 0; /* one cut again, numbered from 0 */
        uint32_t count = cmd_data_in_count(t);
        for (uint32_t k = 0; k < count; k++) {
            uint32_t off, len;
            bool final;
            data_in_seg(t, k, &off, &len, &final);
            int rc = queue_data_in(c, t, k, off, len, final, DIN_NO_STATUS);
            if (rc < 0)
                return rc;
        }
        t->datasn_in = count;
    }
    return scsi_response(c, t, RSP_AGAIN, snack_tag);
}

/* A retained task is kept no longer (its StatSN acknowledged, or too many kept): off the
 * retained list, whose reference goes. Its answer's PDUs may still be queued (an initiator can
 * acknowledge a StatSN before it has been sent), and they keep the task on the connection's
 * list until they are written: it is then answered and done, TASK_SENDING again, so that
 * neither a TMF (cmd_task_abort), a SNACK nor the ERL 2 orphaning takes it for a retained
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
static void retained_bound(struct iscsi_conn *c)
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

void cmd_ack_statsn(struct iscsi_conn *c, uint32_t exp_statsn)
{
    while (!list_empty(&c->retained)) {
        struct iscsi_task *t = list_entry(c->retained.next, struct iscsi_task, retained_node);
        if (!sn_lt(t->statsn, exp_statsn))
            break;
        retained_drop(c, t);
    }
}

/* ---------------- metrics ---------------- */

/* Medium reads and writes by opcode (SBC-3): the metrics' read/write classes; everything else,
 * INQUIRY to COMPARE AND WRITE, is "other". */
static enum iostats_op cmd_op(const uint8_t *cdb)
{
    switch (cdb[0]) {
    case 0x08:
    case 0x28:
    case 0xa8:
    case 0x88: /* READ (6), (10), (12), (16) */
        return IOSTATS_READ;
    case 0x0a:
    case 0x2a:
    case 0xaa:
    case 0x8a: /* WRITE (6), (10), (12), (16) */
        return IOSTATS_WRITE;
    default:
        return IOSTATS_OTHER;
    }
}

/* A command answered: one count each in this reactor's shard of its LUN's, session's and
 * portal's counters (util/iostats.h: reactor-local stores, no lock, no atomic RMW). Bytes are
 * those the command moved: the Data-In sent, or the data-out the store took (GOOD only). */
static void cmd_count(struct iscsi_conn *c, struct iscsi_task *t)
{
    if (!IOSTATS_ENABLED) { /* -Dmetrics=false: not even the clock reading */
        task_queue_leave(t);
        return;
    }
    const struct scsi_task *st = &t->scsi;
    struct iostats_sample s = {.op = cmd_op(st->cdb), .err_slot = -1};
    s.lat_ns = iostats_now_ns() - t->arrival_ns;
    s.bucket = iostats_lat_bucket(s.lat_ns);
    if (st->status == SCSI_STATUS_GOOD) {
        if (!t->refused && st->dir == SCSI_DIR_READ) {
            uint32_t edtl = task_edtl(t);
            s.bytes = st->data_len < edtl ? st->data_len : edtl;
        } else if (!t->refused && st->dir == SCSI_DIR_WRITE) {
            s.bytes = t->data_expected;
        }
    } else {
        s.err_slot = iostats_err_slot(st->status, st->sense, st->sense_len);
    }
    iostats_cmd(iostats_shard(scsi_task_lun_stats(st), c->rid), &s);
    iostats_cmd(c->st_session, &s);
    iostats_cmd(c->st_portal, &s);
    task_queue_leave(t);
}

/* An event of task t (an R2T sent, an abort) on its LUN, session and portal. */
void cmd_count_event(struct iscsi_conn *c, struct iscsi_task *t, enum iostats_event ev)
{
    if (!IOSTATS_ENABLED)
        return;
    iostats_event(iostats_shard(scsi_task_lun_stats(&t->scsi), c->rid), ev);
    iostats_event(c->st_session, ev);
    iostats_event(c->st_portal, ev);
}

/* A data digest error in task t's data (immediate or Data-Out, ERL >= 1): its LUN's count. The
 * engine counted it for the session and the portal already (wire.c); a header digest error,
 * or data of a PDU with no task, names no LUN. */
static void cmd_count_lun_digest_error(struct iscsi_conn *c, struct iscsi_task *t)
{
    iostats_event(iostats_shard(scsi_task_lun_stats(&t->scsi), c->rid), IOSTATS_DIGEST_ERROR);
}

/* Answer the command; the protocol side is then done with it and drops its reference (the
 * queued PDUs, and the store until its completion returns, keep the task). */
static int cmd_respond(struct iscsi_conn *c, struct iscsi_task *t)
{
    int rc;
    assert(!t->aborted && t->state != TASK_SENDING);
    cmd_count(c, t);
    t->state = TASK_SENDING;
    if (t->scsi.dir == SCSI_DIR_READ && t->scsi.status == SCSI_STATUS_GOOD && t->scsi.data_len &&
        task_edtl(t) && !t->refused)
        rc = send_data_in(c, t);
    else
        rc = send_scsi_response(c, t);
    if (rc == ISCSI_OK && conn_erl(c) >= 1) {
        /* RFC 7143 §7.1, §11.16: kept until ExpStatSN acknowledges its StatSN, for a SNACK or
         * a command retry; the protocol side's reference becomes the retained list's. Sent in
         * StatSN order, so appending keeps the list sorted. */
        t->state = TASK_RETAINED;
        list_add_tail(&c->retained, &t->retained_node);
        c->nretained++;
        retained_bound(c);
        return rc;
    }
    task_put(t);
    return rc;
}

/* ---------------- execution ---------------- */

/* The SCSI core's completion: at once, inside scsi_task_exec() (cmd_exec then returns its
 * status), or later from the store, when the connection may have closed or a TMF aborted the
 * task meanwhile. */
static void cmd_orphan_store_done(struct iscsi_task *t);

static void cmd_scsi_done(struct scsi_task *st)
{
    struct iscsi_task *t = st->transport_priv;
    struct iscsi_conn *c = t->conn;
    int rc = ISCSI_OK;
    if (t->orphan == ORPHAN_BUSY) {
        /* ERL 2: its connection is gone (c lives on by the store's reference to it); the
         * orphan group keeps the task, now answered by whoever reassigns it */
        task_put(t); /* the SCSI core's */
        cmd_orphan_store_done(t);
        conn_put(c);
        return;
    }
    if (c->dead) {
        /* closed while the store had it: conn_close() detached the session, nothing to
         * count or answer */
    } else if (t->aborted) {
        session_cmd_done(c->session); /* it counted in flight until the store let go */
    } else {
        rc = cmd_respond(c, t);
    }
    task_put(t); /* the SCSI core's */
    if (c->exec_status)
        *c->exec_status = rc;
    else
        conn_fail(c, rc);
    conn_put(c);
}

static int cmd_exec(struct iscsi_conn *c, struct iscsi_task *t)
{
    t->state = TASK_EXEC;
    conn_task_hash_del(c, t); /* no more Data-Out for it; the ITT may be reused after status */
    if (t->refused)
        return cmd_respond(c, t);
    conn_get(c);
    task_get(t); /* the SCSI core's, until cmd_scsi_done() */
    t->scsi.done = cmd_scsi_done;
    /* A completion inside this call leaves its status here: the caller (a handler, or the
     * released-task run) returns it, and the connection is not closed under it. */
    int rc = ISCSI_OK, *outer = c->exec_status;
    c->exec_status = &rc;
    scsi_task_exec(&t->scsi);
    c->exec_status = outer;
    return rc;
}

/* Run once all data is in and the command's CmdSN turn has come. */
static int cmd_maybe_exec(struct iscsi_conn *c, struct iscsi_task *t)
{
    /* A task waiting for its CmdSN turn stays TASK_QUEUED until conn_run_released() (on this
     * thread) takes it, even if its last Data-Out arrives first. */
    if (t->state == TASK_QUEUED || t->data_received < t->data_expected)
        return ISCSI_OK;
    /* a command that takes none of its data-out answers once the unsolicited burst is in */
    if ((t->refused || !t->data_expected) && t->unsol_remaining)
        return ISCSI_OK;
    return cmd_exec(c, t);
}

/* The session moved these tasks from its CmdSN queue to c->released (MC/S: they arrived ahead
 * of a command on another connection). Runs on c's reactor, the only thread that touches the
 * tasks' state. */
void conn_run_released(void *arg)
{
    struct iscsi_conn *c = arg;
    struct list_node ready;
    list_init(&ready);
    /* A kick (deferred call or message) may arrive after the connection closed: its teardown
     * took the released tasks back already. */
    if (!c->dead && c->session) {
        pthread_mutex_lock(&c->session->lock);
        c->release_kicked = false;
        if (!list_empty(&c->released)) {
            ready.next = c->released.next;
            ready.prev = c->released.prev;
            ready.next->prev = &ready;
            ready.prev->next = &ready;
            list_init(&c->released);
        }
        pthread_mutex_unlock(&c->session->lock);
    }
    struct list_node *n;
    int rc = ISCSI_OK;
    while (rc == ISCSI_OK && (n = list_pop(&ready)) != NULL) {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, wait.node);
        assert(t->state == TASK_QUEUED && !t->aborted); /* an abort takes it off the list */
        t->state = TASK_DATA_OUT;
        rc = cmd_maybe_exec(c, t);
    }
    /* What is left after a failure goes back to c->released for the teardown: released,
     * their CmdSNs acknowledged, so kept for reassignment at ERL 2 (orphan_conn_tasks). */
    if (!list_empty(&ready)) {
        pthread_mutex_lock(&c->session->lock);
        while ((n = list_pop(&ready)) != NULL)
            list_add_tail(&c->released, n);
        pthread_mutex_unlock(&c->session->lock);
    }
    conn_fail(c, rc);
    conn_put(c);
}

/* ---------------- R2T ---------------- */

static struct r2t_seq *r2t_slot_free(struct iscsi_task *t)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++)
        if (!t->r2t[i].used)
            return &t->r2t[i];
    return NULL;
}

static struct r2t_seq *r2t_slot_find(struct iscsi_task *t, uint32_t ttt)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++)
        if (t->r2t[i].used && t->r2t[i].ttt == ttt)
            return &t->r2t[i];
    return NULL;
}

/* Queue the R2T of an open sequence (again: the same R2TSN, TTT, offset, length and StatSN
 * field, current ExpCmdSN/MaxCmdSN, §11.16). */
static int queue_r2t(struct iscsi_conn *c, struct iscsi_task *t, const struct r2t_seq *seq)
{
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_R2T, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    memcpy(h->b + BHS_LUN, t->req.b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, t->itt);
    bhs_put32(h, BHS_TTT, seq->ttt);
    fill_sn_again(c, h, seq->statsn);
    bhs_put32(h, BHS_R2TSN, seq->r2tsn);
    bhs_put32(h, BHS_BUFFER_OFFSET, seq->offset);
    bhs_put32(h, BHS_DESIRED_LEN, seq->len);
    conn_send(c, p);
    cmd_count_event(c, t, IOSTATS_R2T);
    return ISCSI_OK;
}

/* Solicit what is still missing, at most MaxOutstandingR2T sequences at a time, each at most
 * MaxBurstLength (§11.8). Each R2T gets its own TTT so Data-Out PDUs name their sequence.
 * At ERL >= 1 the holes lost Data-Out left go first: a recovery R2T each (§7.8, §7.9), with a
 * new TTT and the next R2TSN. */
static int send_r2ts(struct iscsi_conn *c, struct iscsi_task *t)
{
    uint32_t max_out = c->session->params.max_outstanding_r2t;
    uint32_t burst = c->session->params.max_burst;
    if (!max_out)
        max_out = 1;
    if (max_out > ISCSI_MAX_R2T)
        max_out = ISCSI_MAX_R2T;
    while ((t->nholes || t->r2t_offset < t->data_expected) && t->r2t_outstanding < max_out) {
        struct r2t_seq *seq = r2t_slot_free(t);
        if (!seq)
            return ISCSI_OK;
        uint32_t off, len;
        if (t->nholes) {
            struct data_hole *hole = &t->holes[0];
            off = hole->off;
            len = hole->len < burst ? hole->len : burst;
            hole->off += len;
            hole->len -= len;
            if (!hole->len)
                memmove(&t->holes[0], &t->holes[1], --t->nholes * sizeof(t->holes[0]));
        } else {
            off = t->r2t_offset;
            len = t->data_expected - off;
            if (len > burst)
                len = burst;
            t->r2t_offset += len;
        }
        uint32_t ttt = c->next_ttt++;
        if (ttt == ISCSI_RSVD_TAG)
            ttt = c->next_ttt++;
        *seq = (struct r2t_seq){.ttt = ttt,
                                .offset = off,
                                .len = len,
                                .r2tsn = t->r2tsn++,
                                .statsn = c->statsn,
                                .used = true};
        int rc = queue_r2t(c, t, seq);
        if (rc < 0)
            return rc;
        t->r2t_outstanding++;
    }
    return ISCSI_OK;
}

int cmd_resend_r2t(struct iscsi_conn *c, struct iscsi_task *t, uint32_t r2tsn)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++)
        if (t->r2t[i].used && t->r2t[i].r2tsn == r2tsn)
            return queue_r2t(c, t, &t->r2t[i]);
    return ISCSI_ERR_PROTOCOL; /* snack.c checked it is open */
}

/* ---------------- SCSI Command PDU ---------------- */

/* Point the receive engine at [off, off+len) of the task's data buffers. */
static void rx_into_task(struct iscsi_pdu_in *p, struct iscsi_task *t, uint32_t off, uint32_t len)
{
    const struct scsi_task *st = &t->scsi;
    p->dstcnt = iov_slice(st->iov, st->iovcnt, off, len, p->dst, SCSI_TASK_IOV_MAX);
    if (p->dstcnt == 0)
        p->discard = true;
}

/* Immediate data the negotiation did not allow (ImmediateData=No, or more than
 * FirstBurstLength, RFC 7143 §13.11/§13.14) is a protocol error. */
static bool immediate_data_illegal(const struct iscsi_conn *c, uint32_t dlen)
{
    const struct iscsi_params *p = &c->session->params;
    return dlen && (!p->immediate_data || dlen > p->first_burst);
}

/* Whether a SCSI Command PDU may become a task: 0 if so, else the Reject reason
 * (§11.17.1), the checks in this order. *drop: a command whose ITT is in use by one with the
 * same CmdSN (a retry of it) is dropped without a Reject. */
static uint8_t scsi_cmd_refusal(struct iscsi_conn *c, const struct iscsi_pdu_in *p, bool *drop)
{
    const struct iscsi_bhs *req = &p->bhs;
    *drop = false;
    if (!c->session || c->discovery)
        return ISCSI_REJECT_PROTOCOL_ERROR;
    if (bhs_ahs_bytes(req))
        return ISCSI_REJECT_CMD_NOT_SUPPORTED; /* no extended CDBs, no bidirectional commands */
    if (immediate_data_illegal(c, p->dlen))
        return ISCSI_REJECT_PROTOCOL_ERROR;
    uint32_t itt = bhs_get32(req, BHS_ITT);
    if (itt == ISCSI_RSVD_TAG)
        return ISCSI_REJECT_INVALID_PDU_FIELD;
    if (bhs_immediate(req) && c->ntasks >= CONN_TASKS_MAX)
        return ISCSI_REJECT_IMMEDIATE_CMD_REJECT;
    struct iscsi_task *dup = conn_task_find(c, itt);
    if (dup && dup->cmdsn != bhs_get32(req, BHS_CMDSN))
        return ISCSI_REJECT_TASK_IN_PROGRESS;
    *drop = dup != NULL;
    return 0;
}

/* ERL >= 1: a command arriving again with the ITT and CmdSN of one received before (a command
 * retry, §6.2.1, §7.2) is not run twice. One still in progress is ignored, its status will
 * come; one answered and not yet acknowledged gets its answer again, exactly as sent (the
 * Data-In and the status with the original StatSN). Otherwise (acknowledged, or unknown) it is
 * ignored as any command outside the window is (§4.2.2.1). */
static int cmd_retry(struct iscsi_conn *c, const struct iscsi_task *fresh)
{
    if (conn_erl(c) == 0)
        return ISCSI_OK;
    struct iscsi_task *old = task_lookup_except(c, fresh->itt, fresh);
    if (!old || old->cmdsn != fresh->cmdsn || old->state != TASK_RETAINED)
        return ISCSI_OK;
    CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: CmdSN %u ITT 0x%08x retried: its answer sent again",
                     c->peer, old->cmdsn, old->itt);
    if (cmd_data_in_count(old))
        return cmd_resend_data_in(c, old, 0, 0);
    return scsi_response(c, old, RSP_AGAIN, 0);
}

/* ERL >= 1: an immediate command takes no CmdSN of its own (§4.2.2.1), so the window cannot
 * tell its retry from a new command. One whose ITT and CmdSN name an immediate task that ran
 * and is not acknowledged (this PDU's ExpStatSN has released those the initiator has) is the
 * retry of it. A linear walk, for immediate commands only, which are rare. */
static bool cmd_immediate_retry(struct iscsi_conn *c, const struct iscsi_task *fresh)
{
    if (conn_erl(c) == 0)
        return false;
    const struct iscsi_task *old = task_lookup_except(c, fresh->itt, fresh);
    return old && old->immediate && old->cmdsn == fresh->cmdsn && old->state >= TASK_EXEC;
}

/* A command that does not run (outside the window, a duplicate, its digest bad): the
 * protocol side lets go. */
static void cmd_drop_new(struct iscsi_conn *c, struct iscsi_task *t)
{
    conn_task_hash_del(c, t);
    task_put(t);
}

/* scsi_task.admit: every byte of data memory a command will hold (its buffer, a compare copy,
 * a fill pattern: scsi_task.mem) is charged before the SCSI core allocates it, to the connection
 * (ISCSI_CONN_BUF_BUDGET, so one peer cannot take the whole budget) and to the daemon
 * (max-task-buffers). Past either the command is answered, never allocated: TASK SET FULL when
 * this I_T nexus has other commands, BUSY when it has none (SAM-5 §5.3.1); either makes an
 * initiator retry later (Linux requeues both). The connection's first command always passes
 * its own budget (a single command is at most SCSI_MAX_XFER_BYTES plus its copy). */
static bool cmd_admit_memory(struct scsi_task *st, size_t bytes, enum scsi_refusal *why)
{
    struct iscsi_task *t = st->transport_priv;
    struct iscsi_conn *c = t->conn;
    *why = c->ntasks > 1 ? SCSI_REFUSE_TASK_SET_FULL : SCSI_REFUSE_BUSY;
    if (c->buf_bytes && c->buf_bytes + bytes > ISCSI_CONN_BUF_BUDGET)
        return false;
    if (!taskmem_charge(c->srv, bytes)) {
        taskmem_refused(c->srv, c->peer, bytes);
        return false;
    }
    t->buf_charge = bytes;
    c->buf_bytes += bytes;
    return true;
}

/* Header phase: the verdict (p->reject_reason, or the new task in p->task) and where the
 * immediate data goes. Refused or dropped commands swallow their data and are answered, if at
 * all, once the PDU is complete (cmd_handle_scsi_data_done). */
int cmd_handle_scsi_header(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    bool drop;
    p->reject_reason = scsi_cmd_refusal(c, p, &drop);
    if (p->reject_reason || drop) {
        p->discard = true;
        return ISCSI_OK;
    }
    struct iscsi_task *t = task_alloc(c);
    if (!t) {
        p->discard = true; /* no task: dropped, as a command outside the window would be */
        return ISCSI_OK;
    }
    uint32_t itt = bhs_get32(req, BHS_ITT);
    uint8_t flags = req->b[1];
    t->req = *req;
    t->itt = itt;
    t->cmdsn = bhs_get32(req, BHS_CMDSN);
    t->edtl = bhs_get32(req, BHS_EDTL);
    t->immediate = bhs_immediate(req);
    t->state = TASK_DATA_OUT;
    t->data_out_ms = c->last_rx_ms;
    t->arrival_ns = c->last_rx_ns; /* read as its header completed: no clock reading here */

    struct scsi_task *st = &t->scsi;
    memcpy(st->cdb, req->b + BHS_CDB, SCSI_CDB_MAX);
    st->lun = scsi_lun_from_wire(req->b + BHS_LUN);
    st->target = c->session->node->scsi;
    st->nexus = c->session->nexus;
    st->edtl = t->edtl;
    st->edtl_read = flags & ISCSI_CMD_READ;
    st->edtl_write = flags & ISCSI_CMD_WRITE;
    st->transport_priv = t;
    st->admit = cmd_admit_memory;

    enum cmdsn_verdict order;
    if (t->immediate && cmd_immediate_retry(c, t)) {
        order = CMDSN_OUTSIDE; /* answered (or ignored) as a retry below */
    } else if (conn_erl(c) >= 1 && c->ddigest && p->dlen) {
        /* ERL >= 1: immediate data whose digest turns out bad makes the whole command
         * rejected and its CmdSN not received (§7.3, §7.8): the initiator retries it with the
         * same CmdSN. So the window takes it only at the end of the PDU; here only a CmdSN
         * plainly outside it is turned away, before its data is placed anywhere. */
        uint32_t exp, max;
        session_window(c->session, &exp, &max);
        if (!t->immediate && (sn_lt(t->cmdsn, exp) || sn_lt(max, t->cmdsn))) {
            order = CMDSN_OUTSIDE;
        } else {
            order = CMDSN_RUN;
            t->cmdsn_pending = true;
        }
    } else {
        order = session_cmdsn_check(c->session, t->cmdsn, t->immediate, &t->wait);
    }
    if (order == CMDSN_RECEIVED)
        CONN_LOG_LIMITED(
            c, LOG_LVL_INFO,
            "%s: CmdSN %u ITT 0x%08x: that CmdSN was already received (aborted before it "
            "came, or a duplicate): dropped",
            c->peer, t->cmdsn, t->itt);
    if (order < 0) {
        /* Outside the window or a duplicate: silently ignored (§4.2.2.1). */
        LOG_DEBUG("%s: CmdSN %u outside the window, command ignored", c->peer, t->cmdsn);
        p->discard = true;
        int rc = cmd_retry(c, t);
        task_put(t);
        return rc;
    }
    /* received (the window took it, queued it behind a gap, or will once a data digest is
     * checked): in the portal's queue depth */
    t->st_queue = c->st_portal;
    iostats_queue(t->st_queue, 1);
    conn_task_hash_add(c, t);
    task_get(t); /* the receive engine's, until the end of this PDU */
    p->task = t;

    if (scsi_task_setup(st) < 0)
        t->refused = true; /* by the SCSI rules, or by cmd_admit_memory: nothing allocated */
    uint32_t dlen = p->dlen;
    if (st->edtl_write) {
        const struct iscsi_params *sp = &c->session->params;
        /* We take at most what both the CDB and EDTL allow, and only for a command that
         * writes: data sent with any other (a READ flagged W, say) must not land in its
         * buffer.
         * Unsolicited data beyond that is received and dropped, and none is solicited. */
        uint32_t xfer = t->refused || st->dir != SCSI_DIR_WRITE ? 0 : st->xfer_len;
        t->data_expected = xfer < t->edtl ? xfer : t->edtl;
        uint32_t unsol = dlen;
        if (!sp->initial_r2t && !(flags & ISCSI_FLAG_FINAL)) {
            uint32_t fb = sp->first_burst < t->edtl ? sp->first_burst : t->edtl;
            unsol = fb > dlen ? fb : dlen;
        }
        t->unsol_remaining = unsol - dlen; /* still to come in unsolicited Data-Out */
        t->unsol_next_off = dlen;
        /* R2Ts solicit what the unsolicited data will not cover. */
        t->r2t_offset = unsol < t->data_expected ? unsol : t->data_expected;
        if (dlen && t->data_expected) {
            t->imm_pending = dlen < t->data_expected ? dlen : t->data_expected;
            rx_into_task(p, t, 0, t->imm_pending);
        } else if (dlen) {
            p->discard = true;
        }
    } else if (dlen) {
        p->discard = true; /* data with a command that sends none: dropped */
    }
    if (order == CMDSN_QUEUED)
        t->state = TASK_QUEUED; /* released on this thread, after this handler returns */
    return ISCSI_OK;
}

/* End of the PDU: a refused command gets the Reject the header phase chose; a task counts its
 * immediate data, solicits the rest and runs once it may. */
int cmd_handle_scsi_data_done(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    struct iscsi_task *t = p->task;
    if (!t) {
        if (p->data_digest_bad) /* ERL >= 1: as below; the retry gets the real verdict */
            return conn_send_reject(c, req, ISCSI_REJECT_DIGEST_ERROR);
        if (!p->reject_reason)
            return ISCSI_OK; /* silently ignored by the CmdSN rules */
        /* A rejected non-immediate command still used its CmdSN on the initiator's side: the
         * window moves past it, or every later command would wait for it forever. */
        if (c->session && !bhs_immediate(req))
            session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
        return conn_send_reject(c, req, p->reject_reason);
    }
    if (t->aborted)
        return ISCSI_OK; /* a TMF took it while its data came in */
    if (t->cmdsn_pending) {
        t->cmdsn_pending = false;
        if (p->data_digest_bad) {
            /* RFC 7143 §7.8: a bad data digest on a command PDU (its immediate data) is
             * answered with Reject 0x02 and the command discarded; §7.3: its CmdSN is not
             * received, the initiator retries it with the same CmdSN and ITT. */
            cmd_count_lun_digest_error(c, t);
            cmd_drop_new(c, t);
            return conn_send_reject(c, req, ISCSI_REJECT_DIGEST_ERROR);
        }
        enum cmdsn_verdict order =
            session_cmdsn_check(c->session, t->cmdsn, t->immediate, &t->wait);
        if (order < 0) {
            int rc = cmd_retry(c, t);
            cmd_drop_new(c, t);
            return rc;
        }
        if (order == CMDSN_QUEUED)
            t->state = TASK_QUEUED; /* released on this thread, after this handler returns */
    }
    if (t->scsi.edtl_write) {
        uint32_t got = p->dlen < t->data_expected ? p->dlen : t->data_expected;
        t->data_received += got;
        t->imm_pending = 0;
    }
    if (!t->refused && t->data_expected > t->r2t_offset) {
        int rc = send_r2ts(c, t);
        if (rc < 0)
            return rc;
    }
    return cmd_maybe_exec(c, t);
}

/* ---------------- Data-Out ---------------- */

/* A Data-Out that does not continue its sequence (DataSN or offset) means a PDU was lost, and
 * at ERL 0 nothing is retransmitted. RFC 7143 §7.8 lets the target end the command instead of
 * the connection: swallow the rest of the task's data, then answer CHECK CONDITION, ABORTED
 * COMMAND, PROTOCOL SERVICE CRC ERROR (a sequence error implies a digest error, §7.9). */
static void data_out_sequence_failed(struct iscsi_conn *c, struct iscsi_task *t, const char *why,
                                     uint32_t ttt, uint32_t datasn, uint32_t off, uint32_t len)
{
    CONN_LOG_LIMITED(
        c, LOG_LVL_WARN,
        "%s: ITT 0x%08x: %s (TTT 0x%08x DataSN %u offset %u length %u); the command ends "
        "with CHECK CONDITION",
        c->peer, t->itt, why, ttt, datasn, off, len);
    t->seq_failed = true;
    t->r2t_offset = t->data_expected; /* solicit nothing more */
}

/* ERL >= 1: [off, off+len) of the write was lost on the way (a Data-Out dropped for its header
 * digest, rejected for its data digest, or never sent): solicit it again with a recovery R2T
 * (§7.8, §7.9). False when the task has no room for another hole. */
static bool hole_add(struct iscsi_task *t, uint32_t off, uint32_t len)
{
    if (off >= t->data_expected)
        return true; /* beyond what we take: nothing to ask for again */
    if (len > t->data_expected - off)
        len = t->data_expected - off;
    if (!len)
        return true;
    if (t->nholes == ISCSI_MAX_HOLES)
        return false;
    t->holes[t->nholes++] = (struct data_hole){.off = off, .len = len};
    return true;
}

/* ERL >= 1: a Data-Out continues its sequence past PDUs that never came (DataSN and offset both
 * ahead, still inside the sequence): the skipped range is a hole and this PDU is taken at its
 * offset (§7.9: a sequence error implies a digest error, recovered like one). */
static bool data_out_gap(uint32_t exp_datasn, uint32_t exp_off, uint32_t datasn, uint32_t off,
                         uint32_t end)
{
    return sn_lt(exp_datasn, datasn) && off > exp_off && off < end;
}

/* After a sequence error, once every outstanding R2T and the unsolicited burst are closed by
 * their F bit, the command is answered. */
static void data_out_maybe_terminate(struct iscsi_task *t)
{
    if (!t->seq_failed || t->refused || t->r2t_outstanding || t->unsol_remaining)
        return;
    t->refused = true;
    scsi_task_refuse(&t->scsi, SCSI_REFUSE_PROTOCOL_CRC_ERROR);
    t->data_expected = t->data_received;
}

/* Data-Out header checks (§11.7): the PDU must continue its sequence exactly — right TTT,
 * next DataSN, next offset (DataPDUInOrder=Yes), within the burst. A TTT we never gave or a
 * PDU longer than its burst is a protocol error that closes the connection; a DataSN or offset
 * out of sequence ends just the command (above). */
int cmd_handle_data_out_header(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *h = &p->bhs;
    struct iscsi_task *t = conn_task_find(c, bhs_get32(h, BHS_ITT));
    if (!t) {
        p->discard = true; /* for a task that already ended (aborted): dropped */
        return ISCSI_OK;
    }
    /* Only tasks still taking data are hashed: cmd_exec() and aborts unhash them. */
    assert((t->state == TASK_DATA_OUT || t->state == TASK_QUEUED) && !t->aborted);
    uint32_t ttt = bhs_get32(h, BHS_TTT);
    uint32_t off = bhs_get32(h, BHS_BUFFER_OFFSET);
    uint32_t datasn = bhs_get32(h, BHS_DATASN);
    uint32_t len = p->dlen;
    const char *err = NULL, *seq_err = NULL;
    bool erl1 = conn_erl(c) >= 1;
    t->data_out_ms = c->last_rx_ms; /* progress: the stall check and data-out-timeout */
    if (erl1)
        t->stall_rounds = 0;
    if (ttt == ISCSI_RSVD_TAG) {
        if (erl1 && !t->seq_failed &&
            data_out_gap(t->unsol_datasn, t->unsol_next_off, datasn, off,
                         t->unsol_next_off + t->unsol_remaining)) {
            uint32_t gap = off - t->unsol_next_off;
            if (!hole_add(t, t->unsol_next_off, gap))
                data_out_sequence_failed(c, t, "too many Data-Out PDUs lost", ttt, datasn, off,
                                         len);
            t->unsol_remaining -= gap;
            t->unsol_next_off = off;
            t->unsol_datasn = datasn;
        }
        if (len > t->unsol_remaining && !t->seq_failed)
            err = "unsolicited Data-Out beyond FirstBurstLength";
        else if (datasn != t->unsol_datasn)
            seq_err = "unsolicited Data-Out DataSN out of sequence";
        else if (off != t->unsol_next_off)
            seq_err = "unsolicited Data-Out buffer offset out of order";
    } else {
        struct r2t_seq *seq = r2t_slot_find(t, ttt);
        if (!seq && erl1 && sn_lt(ttt, c->next_ttt)) {
            /* A sequence the stall check gave up on (its range solicited again under a new
             * TTT): what still comes for it is late, and dropped. */
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: ITT 0x%08x: late Data-Out for closed TTT 0x%08x dropped", c->peer,
                             t->itt, ttt);
            p->discard = true;
            return ISCSI_OK;
        }
        if (seq && erl1 && sn_lt(datasn, seq->datasn) && off < seq->offset + seq->got) {
            /* A PDU of the sequence again (the R2T was re-sent and answered twice): what it
             * carries is here already, and dropped. */
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: ITT 0x%08x: Data-Out DataSN %u for TTT 0x%08x again: dropped",
                             c->peer, t->itt, datasn, ttt);
            p->discard = true;
            return ISCSI_OK;
        }
        if (seq && erl1 && !t->seq_failed &&
            data_out_gap(seq->datasn, seq->offset + seq->got, datasn, off,
                         seq->offset + seq->len)) {
            uint32_t gap = off - (seq->offset + seq->got);
            if (!hole_add(t, seq->offset + seq->got, gap))
                data_out_sequence_failed(c, t, "too many Data-Out PDUs lost", ttt, datasn, off,
                                         len);
            seq->got += gap;
            seq->datasn = datasn;
        }
        if (!seq)
            err = "Data-Out with an unknown Target Transfer Tag";
        else if (datasn != seq->datasn)
            seq_err = "Data-Out DataSN out of sequence";
        else if (off != seq->offset + seq->got)
            seq_err = "Data-Out buffer offset out of order";
        else if (len > seq->len - seq->got && !t->seq_failed)
            err = "Data-Out longer than the R2T asked for";
    }
    if (err) {
        LOG_WARN("%s: ITT 0x%08x: %s (TTT 0x%08x DataSN %u offset %u length %u)", c->peer, t->itt,
                 err, ttt, datasn, off, len);
        return ISCSI_ERR_DATA_OUT;
    }
    if (seq_err && !t->seq_failed)
        data_out_sequence_failed(c, t, seq_err, ttt, datasn, off, len);
    task_get(t); /* the receive engine's, until the end of this PDU */
    p->task = t;
    if (t->seq_failed || t->refused || off >= t->data_expected) {
        p->discard = true;
        return ISCSI_OK;
    }
    uint32_t take = len;
    if (take > t->data_expected - off)
        take = t->data_expected - off;
    rx_into_task(p, t, off, take);
    return ISCSI_OK;
}

int cmd_handle_data_out_done(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *h = &p->bhs;
    struct iscsi_task *t = p->task;
    if (!t || t->aborted)
        return ISCSI_OK; /* dropped, or a TMF took its task while the data came in */
    uint32_t ttt = bhs_get32(h, BHS_TTT);
    uint32_t off = bhs_get32(h, BHS_BUFFER_OFFSET);
    uint32_t len = p->dlen;
    bool final = h->b[1] & ISCSI_FLAG_FINAL;
    if (p->data_digest_bad) {
        /* ERL >= 1 only (ERL 0 closes the connection in the engine): RFC 7143 §7.8, a data PDU
         * with a bad data digest is rejected with reason 0x02 and its payload discarded (what
         * direct placement wrote is overwritten by the recovery); the range is solicited again
         * by a recovery R2T. The PDU still moves its sequence on. */
        cmd_count_lun_digest_error(c, t);
        int rc = conn_send_reject(c, h, ISCSI_REJECT_DIGEST_ERROR);
        if (rc < 0)
            return rc;
        if (!t->seq_failed && !t->refused && !hole_add(t, off, len))
            data_out_sequence_failed(c, t, "too many Data-Out PDUs lost", ttt,
                                     bhs_get32(h, BHS_DATASN), off, len);
    } else if (!t->seq_failed && off < t->data_expected) {
        uint32_t take = len;
        if (take > t->data_expected - off)
            take = t->data_expected - off;
        t->data_received += take;
    }
    if (ttt == ISCSI_RSVD_TAG) {
        t->unsol_datasn++;
        t->unsol_next_off += len;
        t->unsol_remaining = len >= t->unsol_remaining ? 0 : t->unsol_remaining - len;
        if (final)
            t->unsol_remaining = 0; /* the initiator ended the unsolicited burst early */
    } else {
        struct r2t_seq *seq = r2t_slot_find(t, ttt);
        assert(seq); /* the header phase found it, and only this PDU's end frees it */
        seq->got = len >= seq->len - seq->got ? seq->len : seq->got + len;
        seq->datasn++;
        if (final || seq->got == seq->len) {
            if (seq->got != seq->len && !t->seq_failed) {
                LOG_WARN("%s: ITT 0x%08x: R2T sequence ended after %u of %u bytes", c->peer, t->itt,
                         seq->got, seq->len);
                return ISCSI_ERR_DATA_OUT_SEQ;
            }
            seq->used = false;
            t->r2t_outstanding--;
            if (!t->refused && !t->seq_failed) {
                int rc = send_r2ts(c, t);
                if (rc < 0)
                    return rc;
            }
        }
    }
    if (t->nholes && !t->refused && !t->seq_failed) {
        /* ERL >= 1: a recovery R2T per hole, as soon as MaxOutstandingR2T lets one go */
        int rc = send_r2ts(c, t);
        if (rc < 0)
            return rc;
    }
    data_out_maybe_terminate(t);
    return cmd_maybe_exec(c, t);
}

/* ERL >= 1: a write whose Data-Out stopped (the final PDU of a sequence, or an R2T, lost on the
 * way) would wait for ever: after ISCSI_DATA_OUT_STALL_MS without progress, what is missing of
 * each open sequence becomes a hole, the sequence is closed, and recovery R2Ts solicit the
 * holes under new TTTs (§7.9). An initiator that answers none of ISCSI_DATA_OUT_STALL_ROUNDS
 * such rounds is not recovering this command: rather than wait for ever (or drop a connection
 * that carries other commands), the command alone ends with CHECK CONDITION, ABORTED COMMAND,
 * 47h/05h, the termination §7.8 b and §7.9 give the target for data it does not recover; what
 * still comes for it is dropped (its task is gone). */
int cmd_check_stalled(struct iscsi_conn *c, uint64_t now_ms)
{
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        if (t->aborted || t->refused || t->seq_failed ||
            (t->state != TASK_DATA_OUT && t->state != TASK_QUEUED))
            continue;
        if (!t->r2t_outstanding && !t->unsol_remaining)
            continue;
        if (wire_rx_current(&c->w) && wire_rx_current(&c->w)->task == t)
            continue; /* a Data-Out for it is arriving right now: not stalled */
        if (now_ms - t->data_out_ms < ISCSI_DATA_OUT_STALL_MS)
            continue;
        t->data_out_ms = now_ms;
        bool give_up = ++t->stall_rounds > ISCSI_DATA_OUT_STALL_ROUNDS;
        bool room = true;
        for (unsigned i = 0; i < ISCSI_MAX_R2T; i++) {
            struct r2t_seq *seq = &t->r2t[i];
            if (!seq->used)
                continue;
            room = room && hole_add(t, seq->offset + seq->got, seq->len - seq->got);
            seq->used = false;
            t->r2t_outstanding--;
        }
        if (t->unsol_remaining) {
            room = room && hole_add(t, t->unsol_next_off, t->unsol_remaining);
            t->unsol_remaining = 0;
        }
        if (!give_up)
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: ITT 0x%08x: Data-Out stalled; soliciting the missing data again",
                             c->peer, t->itt);
        int rc;
        if (!room || give_up) {
            data_out_sequence_failed(
                c, t, give_up ? "no Data-Out for the recovery R2Ts" : "too many Data-Out PDUs lost",
                ISCSI_RSVD_TAG, 0, 0, 0);
            data_out_maybe_terminate(t);
            rc = cmd_maybe_exec(c, t);
        } else {
            rc = send_r2ts(c, t);
        }
        if (rc < 0)
            return rc;
    }
    return ISCSI_OK;
}

/* ERL 0: a write whose solicited or unsolicited Data-Out stops coming holds its buffers for as
 * long as the initiator likes (answering NOP-In pings keeps the connection), and ERL 0 has no
 * way to ask for the data again (recovery R2Ts are ERL 1, RFC 7143 §7.1.2, §7.8): after
 * data-out-timeout seconds without a Data-Out for it, the connection is closed, which is the
 * recovery ERL 0 has (§7.1.5: connection failure, the session's tasks end with it) and frees
 * every buffer it held. */
int cmd_check_data_out_timeout(struct iscsi_conn *c, uint64_t now_ms)
{
    uint64_t limit_ms = (uint64_t)c->srv->limits.data_out_timeout_s * 1000;
    if (!limit_ms)
        return ISCSI_OK;
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        if (t->aborted || t->refused || (t->state != TASK_DATA_OUT && t->state != TASK_QUEUED))
            continue;
        if (!t->r2t_outstanding && !t->unsol_remaining)
            continue;
        /* A Data-Out arriving right now counts too: its header moved data_out_ms, and a payload
         * that takes this long (a peer sending a header and then nothing) is no progress. */
        if (now_ms - t->data_out_ms < limit_ms)
            continue;
        log_msg(LOG_LVL_WARN,
                "%s: ITT 0x%08x: no Data-Out for %u s (data-out-timeout), %" PRIu64
                " bytes of buffers held on this connection: closing it (ERL 0)",
                c->peer, t->itt, c->srv->limits.data_out_timeout_s, c->buf_bytes);
        return ISCSI_ERR_DATA_OUT_TIMEOUT;
    }
    return ISCSI_OK;
}

struct iscsi_task *cmd_task_lookup(struct iscsi_conn *c, uint32_t itt)
{
    return task_lookup_except(c, itt, NULL);
}

/* ---------------- abort and teardown ---------------- */

/* Never answer it. The protocol side lets go of the task here; the store (until its completion
 * returns) and queued PDUs keep it until they let go too. */
void cmd_task_abort(struct iscsi_task *t)
{
    struct iscsi_conn *c = t->conn;
    assert(!t->aborted);
    t->aborted = true;
    if (t->state == TASK_SENDING)
        return; /* already answered: the protocol side let go when it queued the answer */
    if (t->state == TASK_RETAINED) {
        /* answered and kept for retransmission: no longer (the retained list's reference) */
        list_del(&t->retained_node);
        c->nretained--;
        task_put(t);
        return;
    }
    if (t->state == TASK_QUEUED) {
        assert(c->session);
        session_cmdsn_cancel(c->session, &t->wait);
    } else if (t->state == TASK_DATA_OUT && c->session && !t->cmdsn_pending) {
        session_cmd_done(c->session);
    } else if (t->state == TASK_EXEC) {
        /* it counts in flight until the store lets go (cmd_scsi_done); the store gets none
         * of its work it does not have yet, and the TMF's answer waits for the rest */
        scsi_task_abort(&t->scsi);
    }
    conn_task_hash_del(c, t);
    if (c->w.in.task == t)
        c->w.in.discard = true; /* the rest of the data segment being received: dropped */
    task_put(t);                /* the protocol side's */
}

/* ERL 2: whether the tasks of c, closing now, are kept for reassignment (RFC 7143 §7.2.2)
 * rather than terminated (§11.14.5): not when the daemon shuts down, a Logout said "close the
 * connection", or Time2Retain is 0 (nothing is kept, §11.15.2); the session ending with it
 * (closed, reinstated, logged out) is looked at under its lock. */
static bool conn_keeps_tasks(const struct iscsi_conn *c)
{
    const struct iscsi_session *s = c->session;
    if (!s || conn_erl(c) < 2 || !s->params.default_time2retain ||
        atomic_load(&c->srv->shutting_down) || atomic_load(&c->terminate_tasks))
        return false;
    return !c->logged_out || c->recovery_logout;
}

/* ERL 2: the tasks of c become orphans of g, with the session's lock held throughout. Kept:
 * every task the CmdSN window acknowledged (run, running, answered and not acknowledged,
 * taking Data-Out, or released and not yet run). Those still queued for their CmdSN turn
 * leave the CmdSN queue here, under the same lock (§11.14: not acknowledged via ExpCmdSN, so
 * discarded; the caller frees them): left there, a command on another connection could
 * release one a moment later, acknowledging a command nobody will run. Left to the caller as
 * well: aborted ones and a command whose immediate data never came under a data digest (its
 * CmdSN not received). Returns false, keeping nothing, when the session is ending anyway. */
static bool orphan_conn_tasks(struct iscsi_conn *c, struct iscsi_orphans *g)
{
    struct iscsi_session *s = c->session;
    pthread_mutex_lock(&s->lock);
    if (s->closing || s->logged_out) {
        pthread_mutex_unlock(&s->lock);
        return false;
    }
    struct list_node *n, *tmp;
    while ((n = list_pop(&c->released)) != NULL)
        list_entry(n, struct iscsi_task, wait.node)->orphan_released = true;
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        if (t->state == TASK_QUEUED && !t->orphan_released && !t->aborted) {
            session_cmdsn_discard_locked(s, &t->wait);
            continue;
        }
        if (t->aborted || t->state == TASK_SENDING || t->cmdsn_pending)
            continue;
        list_del(&t->node);
        c->ntasks--;
        conn_task_hash_del(c, t);
        list_del(&t->r2t_node);
        assert(c->buf_bytes >= t->buf_charge);
        c->buf_bytes -= t->buf_charge; /* the charge goes with the task */
        if (t->state == TASK_RETAINED) {
            list_del(&t->retained_node); /* its reference becomes the group's */
            c->nretained--;
        }
        task_queue_leave(t); /* whoever reassigns it is another connection, maybe portal */
        if (t->state == TASK_EXEC) {
            t->orphan = ORPHAN_BUSY; /* completes on c, which the store's reference keeps */
        } else {
            t->orphan = ORPHAN_IDLE;
            t->conn = NULL;
        }
        orphans_add_locked(g, t);
    }
    pthread_mutex_unlock(&s->lock);
    return true;
}

/* A queued command of a connection removed for recovery, out of the CmdSN queue already
 * (orphan_conn_tasks): dropped unanswered with its CmdSN not received, so that the
 * initiator's retry of it runs. */
static void cmd_task_discard(struct iscsi_task *t)
{
    struct iscsi_conn *c = t->conn;
    assert(t->state == TASK_QUEUED && !t->aborted);
    t->aborted = true;
    conn_task_hash_del(c, t);
    task_put(t);
}

/* RFC 7143 §11.14.5: tasks still allegiant to a connection that (a) was logged out,
 * explicitly or implicitly, with "close the connection", or (b) failed with nothing keeping
 * them for reassignment (below ERL 2, or Time2Retain 0) are terminated, and when the session
 * goes on each affected LUN reports 47h/7Fh SOME COMMANDS CLEARED BY ISCSI PROTOCOL EVENT to
 * the next command of the nexus. Not for connections a reset, a preempted nexus or shutdown
 * closes: those report their own event, or nothing is left to tell. */
static bool conn_end_clears_tasks(const struct iscsi_conn *c)
{
    struct iscsi_session *s = c->session;
    bool by_logout = atomic_load(&c->closed_by_logout);
    if (!s || !s->nexus || atomic_load(&c->srv->shutting_down) ||
        (atomic_load(&c->terminate_tasks) && !by_logout) || (c->logged_out && c->recovery_logout))
        return false;
    by_logout = by_logout || c->logged_out;
    pthread_mutex_lock(&s->lock);
    /* a Logout that ends the session set logged_out; a failed connection (case b) leaves the
     * session to the others, c still counting among them here */
    bool on = !s->closing && !s->logged_out && (by_logout || s->nconns > 1);
    pthread_mutex_unlock(&s->lock);
    return on;
}

void (*cmd_teardown_test_hook)(struct iscsi_conn *c, bool published);

void cmd_conn_teardown(struct iscsi_conn *c)
{
    struct list_node *n, *tmp;
    bool kept = false;
    if (cmd_teardown_test_hook)
        cmd_teardown_test_hook(c, false);
    /* Removed for recovery by a Logout on another connection, or restarted: the answers its
     * ExpStatSN acknowledges were received, and are not kept. Read as the group is published,
     * under the session lock the Logout stores it with (orphans_publish): read here, before,
     * one stored in between was lost. Without a group nothing is kept anyway. */
    if (conn_keeps_tasks(c)) {
        struct iscsi_orphans *g = orphans_new(c);
        kept = g && orphan_conn_tasks(c, g);
        if (kept)
            orphans_publish(g, c, session_time2wait(c->session),
                            c->session->params.default_time2retain);
        else if (g)
            orphans_discard(g);
        if (kept && cmd_teardown_test_hook)
            cmd_teardown_test_hook(c, true);
    }
    /* Retained answers: nothing can ask for them any more (ERL 1 has no connection
     * recovery). */
    while ((n = list_pop(&c->retained)) != NULL) {
        c->nretained--;
        task_put(list_entry(n, struct iscsi_task, retained_node));
    }
    snack_conn_cleanup(c);
    bool report = conn_end_clears_tasks(c);
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        /* Answered or aborted ones: the protocol side let go already, and the rest of their
         * holders (queued PDUs, dropped by conn_close(); the store) let go on their own. */
        if (kept && t->state == TASK_QUEUED && !t->aborted) {
            cmd_task_discard(t);
        } else if (!t->aborted && t->state != TASK_SENDING && t->state != TASK_RETAINED) {
            /* one whose immediate data was still under its digest check never had its
             * CmdSN received (§7.3): the initiator retries it, nothing was cleared */
            if (report && !t->cmdsn_pending)
                scsi_nexus_tasks_terminated(c->session->nexus, t->scsi.lun);
            cmd_task_abort(t);
        }
    }
}

/* ---------------- ERL 2: reassignment ---------------- */

/* A read answered on the dead connection, its status not acknowledged: Data-In from DataSN k0
 * on (the initiator acknowledged those before, §11.5.1 ExpDataSN), the last one with the
 * status and a new StatSN of c. Cut as the first time unless c takes smaller PDUs (its
 * MaxRecvDataSegmentLength): then the rest is cut anew, DataSN going on from k0 (§11.5.1: the
 * number of PDUs may change with the reassignment). */
static int resend_data_in_from(struct iscsi_conn *c, struct iscsi_task *t, uint32_t k0)
{
    uint32_t count = cmd_data_in_count(t);
    uint32_t off, len;
    bool final;
    data_in_seg(t, k0, &off, &len, &final);
    /* the PDU size of the cut DataSN k0 on belongs to (a cut made anew is only ever smaller) */
    uint32_t cur = t->din_recut_pdu && k0 >= t->din_recut_sn ? t->din_recut_pdu : t->din_pdu_len;
    if (cur <= c->max_send_dsl) {
        for (uint32_t k = k0; k < count; k++) {
            data_in_seg(t, k, &off, &len, &final);
            int rc = queue_data_in(c, t, k, off, len, final, DIN_REASSIGN);
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
    count = cmd_data_in_count(t);
    for (uint32_t k = k0; k < count; k++) {
        data_in_seg(t, k, &off, &len, &final);
        int rc = queue_data_in(c, t, k, off, len, final, DIN_REASSIGN);
        if (rc < 0)
            return rc;
    }
    t->datasn_in = count;
    return ISCSI_OK;
}

/* An answered task whose status the initiator did not acknowledge on the dead connection
 * (§7.2.2: "sending (or resending) the status"): a read's Data-In from ExpDataSN, any other's
 * SCSI Response, with a new StatSN of c; then retained on c until acknowledged there. */
static int reassign_answered(struct iscsi_conn *c, struct iscsi_task *t, uint32_t exp_datasn)
{
    uint32_t count = cmd_data_in_count(t);
    int rc;
    /* §11.5.1: ExpDataSN is 0 or at most the last DataSN sent + 1; any other value is
     * ignored (0: the acknowledgement reference unchanged, which is 0 here: this target never
     * asks for DataACK). */
    if (exp_datasn > count)
        exp_datasn = 0;
    if (count && exp_datasn < count)
        rc = resend_data_in_from(c, t, exp_datasn);
    else
        rc = scsi_response(c, t, RSP_REASSIGN, 0);
    if (rc < 0) {
        task_put(t);
        return rc;
    }
    list_add_tail(&c->retained, &t->retained_node); /* the newest StatSN: order kept */
    c->nretained++;
    retained_bound(c);
    return ISCSI_OK;
}

/* A write (or a command waiting for its data) whose Data-Out was under way on the dead
 * connection: what its open R2T sequences and its unsolicited burst had not brought is
 * solicited again on c, by R2Ts with c's TTTs and R2TSNs going on from the task's (the
 * initiator does not send unsolicited data again after a reassignment). */
static int reassign_data_out(struct iscsi_conn *c, struct iscsi_task *t)
{
    if (t->orphan_released) {
        t->orphan_released = false;
        t->state = TASK_DATA_OUT; /* its CmdSN turn came while it was an orphan */
    }
    bool room = true;
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++) {
        struct r2t_seq *seq = &t->r2t[i];
        if (!seq->used)
            continue;
        room = room && hole_add(t, seq->offset + seq->got, seq->len - seq->got);
        seq->used = false;
    }
    t->r2t_outstanding = 0;
    /* the connection died inside the command PDU: its immediate data never came whole
     * (its CmdSN was taken from the header, §7.2.2 still owes the command its data) */
    if (t->imm_pending) {
        room = room && hole_add(t, 0, t->imm_pending);
        t->imm_pending = 0;
    }
    if (t->unsol_remaining) {
        room = room && hole_add(t, t->unsol_next_off, t->unsol_remaining);
        t->unsol_remaining = 0;
    }
    if (!room && !t->seq_failed && !t->refused)
        data_out_sequence_failed(c, t,
                                 "too many Data-Out ranges to solicit again after "
                                 "TASK REASSIGN",
                                 ISCSI_RSVD_TAG, 0, 0, 0);
    t->data_out_ms = reactor_now_ms();
    t->stall_rounds = 0; /* a new connection: its own rounds */
    conn_task_hash_add(c, t);
    if (!t->refused && !t->seq_failed && (t->nholes || t->r2t_offset < t->data_expected)) {
        int rc = send_r2ts(c, t);
        if (rc < 0)
            return rc;
    }
    data_out_maybe_terminate(t);
    return cmd_maybe_exec(c, t);
}

/* An orphan joins c's lists (on c's thread). */
static void orphan_attach(struct iscsi_conn *c, struct iscsi_task *t)
{
    assert(t->conn == c && t->orphan == ORPHAN_NO && !t->aborted);
    struct iscsi_session *s = t->orphan_sess;
    t->orphan_sess = NULL;
    list_add_tail(&c->tasks, &t->node);
    c->ntasks++;
    c->buf_bytes += t->buf_charge;
    session_put(s); /* the orphan's; c holds the session */
}

int cmd_task_adopt_abort(struct iscsi_conn *c, struct iscsi_task *t)
{
    orphan_attach(c, t);
    if (t->state == TASK_RETAINED) {
        /* answered: its status again (retained on c until acknowledged), then the TMF
         * Response; nothing left to abort */
        int rc = scsi_response(c, t, RSP_REASSIGN, 0);
        if (rc < 0) {
            task_put(t);
            return rc;
        }
        list_add_tail(&c->retained, &t->retained_node);
        c->nretained++;
        return ISCSI_OK;
    }
    if (t->state == TASK_EXEC) {
        /* completed while orphaned, never answered: it counted in flight until now */
        t->aborted = true;
        session_cmd_done(c->session);
        task_put(t);
        return ISCSI_OK;
    }
    if (t->orphan_released) {
        t->orphan_released = false;
        t->state = TASK_DATA_OUT;
    }
    cmd_task_abort(t);
    return ISCSI_OK;
}

int cmd_task_adopt(struct iscsi_conn *c, struct iscsi_task *t, uint32_t exp_datasn)
{
    orphan_attach(c, t);
    CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: ITT 0x%08x reassigned from CID %u to CID %u", c->peer,
                     t->itt, t->orphan_cid, c->cid);
    switch (t->state) {
    case TASK_RETAINED:
        return reassign_answered(c, t, exp_datasn);
    case TASK_EXEC: /* completed while it had no connection, never answered */
        return cmd_respond(c, t);
    case TASK_QUEUED:
    case TASK_DATA_OUT:
        return reassign_data_out(c, t);
    case TASK_SENDING:
        break;
    }
    assert(!"an answered task is never an orphan");
    return ISCSI_ERR_PROTOCOL;
}

/* On the new connection's reactor: a task claimed while the store had it arrives (its status
 * not sent yet). If that connection went away meanwhile the command ends unanswered. */
static void cmd_orphan_arrive(void *arg)
{
    struct iscsi_task *t = arg;
    struct iscsi_conn *c = t->claim;
    t->claim = NULL;
    if (c->dead || c->phase != CONN_FFP || !c->session || t->abort_on_arrival) {
        if (!t->abort_on_arrival)
            LOG_INFO("ITT 0x%08x: its new connection (CID %u) closed before it completed: "
                     "terminated",
                     t->itt, c->cid);
        session_cmd_done(t->orphan_sess); /* it counted in flight */
        t->conn = NULL;
        task_put(t);
    } else {
        t->conn = c;
        conn_fail(c, cmd_task_adopt(c, t, 0));
    }
    conn_put(c); /* the claim's */
}

/* The store let go of an orphan (on the dead connection's reactor, the SCSI core's reference
 * dropped): it stays in its group, goes to the connection that claimed it meanwhile, or ends
 * if Time2Retain passed. */
static void cmd_orphan_store_done(struct iscsi_task *t)
{
    switch (orphans_store_done(t)) {
    case FATE_STAY:
        break; /* the group's now: not touched here any more */
    case FATE_MOVE:
        reactor_post(t->claim->reactor, &t->move_msg, cmd_orphan_arrive, t);
        break;
    case FATE_FREE:
        t->conn = NULL;
        task_put(t); /* the group's: the last */
        break;
    }
}
