/* SCSI commands over iSCSI on the target (RFC 7143 §11.3-§11.8): immediate and unsolicited
 * data up to FirstBurstLength, R2T bounded by MaxOutstandingR2T and MaxBurstLength, Data-Out
 * placed straight into the task's buffer (for a RAM LUN: the LUN's memory), Data-In sent from
 * where the data lives with the status in the final PDU (phase collapse), residuals, and task
 * lifetime across aborts and dropped connections. */
#include <assert.h>
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

static struct iscsi_task *task_alloc(struct iscsi_conn *c)
{
    struct list_node *n = list_pop(&c->task_free);
    struct iscsi_task *t = n ? list_entry(n, struct iscsi_task, node) : malloc(sizeof(*t));
    if (!t)
        return NULL;
    memset(t, 0, sizeof(*t)); /* also what scsi_task_init() does for the embedded task */
    t->conn = c;
    t->refs = 1; /* the protocol side's */
    list_init(&t->r2t_node);
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

/* The one place a task is freed: when its last holder lets go (see struct iscsi_task). */
void task_put(struct iscsi_task *t)
{
    assert(t->refs > 0);
    if (--t->refs > 0)
        return;
    struct iscsi_conn *c = t->conn;
    assert(list_empty(&t->wait.node)); /* no longer waiting for its CmdSN turn */
    assert(c->w.in.task != t);         /* the receive engine holds a reference while placing */
    conn_task_hash_del(c, t);
    list_del(&t->r2t_node);
    assert(c->buf_bytes >= t->buf_charge);
    c->buf_bytes -= t->buf_charge;
    t->buf_charge = 0;
    scsi_task_release(&t->scsi);
    list_del(&t->node);
    c->ntasks--;
    list_add_tail(&c->task_free, &t->node);
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

static int send_scsi_response(struct iscsi_conn *c, struct iscsi_task *t)
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
    session_cmd_done(c->session);
    conn_fill_sn(c, h, true);
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

/* Point a PDU's data at [off, off+len) of the task's buffers. */
static void pdu_map_task_data(struct wire_pdu *p, const struct scsi_task *st, uint32_t off,
                              uint32_t len)
{
    p->datacnt = iov_slice(st->iov, st->iovcnt, off, len, p->data, SCSI_TASK_IOV_MAX);
    p->dlen = len;
}

/* Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength, F at the end of each
 * MaxBurstLength sequence, the last one carrying the status (§11.7.4). */
static int send_data_in(struct iscsi_conn *c, struct iscsi_task *t)
{
    struct scsi_task *st = &t->scsi;
    uint32_t total = st->data_len < t->edtl ? st->data_len : t->edtl;
    uint32_t burst = c->session->params.max_burst ? c->session->params.max_burst : 262144;
    uint32_t off = 0, in_burst = 0;
    while (off < total) {
        uint32_t len = total - off;
        if (len > c->max_send_dsl)
            len = c->max_send_dsl;
        if (len > burst - in_burst)
            len = burst - in_burst;
        struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_DATA_IN, 0);
        if (!p)
            return ISCSI_ERR_NOMEM;
        struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
        bool last = off + len == total;
        in_burst += len;
        uint8_t flags = 0;
        if (last || in_burst == burst) {
            flags |= ISCSI_FLAG_FINAL;
            in_burst = 0;
        }
        memcpy(h->b + BHS_LUN, t->req.b + BHS_LUN, 8);
        bhs_put32(h, BHS_ITT, t->itt);
        bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
        bhs_put32(h, BHS_DATASN, t->datasn_in++);
        bhs_put32(h, BHS_BUFFER_OFFSET, off);
        if (last) {
            flags |= ISCSI_DATAIN_STATUS;
            h->b[BHS_STATUS] = st->status;
            set_residual(h, &flags, st->data_len, t->edtl, ISCSI_DATAIN_OVERFLOW,
                         ISCSI_DATAIN_UNDERFLOW);
            session_cmd_done(c->session);
            conn_fill_sn(c, h, true);
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
        off += len;
    }
    return ISCSI_OK;
}

/* Answer the command; the protocol side is then done with it and drops its reference (the
 * queued PDUs, and the store until its completion returns, keep the task). */
static int cmd_respond(struct iscsi_conn *c, struct iscsi_task *t)
{
    int rc;
    assert(!t->aborted && t->state != TASK_SENDING);
    t->state = TASK_SENDING;
    if (t->scsi.dir == SCSI_DIR_READ && t->scsi.status == SCSI_STATUS_GOOD && t->scsi.data_len &&
        task_edtl(t) && !t->refused)
        rc = send_data_in(c, t);
    else
        rc = send_scsi_response(c, t);
    task_put(t);
    return rc;
}

/* ---------------- execution ---------------- */

/* The SCSI core's completion: at once, inside scsi_task_exec() (cmd_exec then returns its
 * status), or later from the store, when the connection may have closed or a TMF aborted the
 * task meanwhile. */
static void cmd_scsi_done(struct scsi_task *st)
{
    struct iscsi_task *t = st->transport_priv;
    struct iscsi_conn *c = t->conn;
    int rc = ISCSI_OK;
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
    /* what is left on `ready` after a failure is the teardown's: it takes the nodes back */
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

/* Solicit what is still missing, at most MaxOutstandingR2T sequences at a time, each at most
 * MaxBurstLength (§11.8). Each R2T gets its own TTT so Data-Out PDUs name their sequence. */
static int send_r2ts(struct iscsi_conn *c, struct iscsi_task *t)
{
    uint32_t max_out = c->session->params.max_outstanding_r2t;
    uint32_t burst = c->session->params.max_burst;
    if (!max_out)
        max_out = 1;
    if (max_out > ISCSI_MAX_R2T)
        max_out = ISCSI_MAX_R2T;
    while (t->r2t_offset < t->data_expected && t->r2t_outstanding < max_out) {
        struct r2t_seq *seq = r2t_slot_free(t);
        if (!seq)
            return ISCSI_OK;
        uint32_t len = t->data_expected - t->r2t_offset;
        if (len > burst)
            len = burst;
        struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_R2T, ISCSI_FLAG_FINAL);
        if (!p)
            return ISCSI_ERR_NOMEM;
        uint32_t ttt = c->next_ttt++;
        if (ttt == ISCSI_RSVD_TAG)
            ttt = c->next_ttt++;
        *seq = (struct r2t_seq){.ttt = ttt, .offset = t->r2t_offset, .len = len, .used = true};
        struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
        memcpy(h->b + BHS_LUN, t->req.b + BHS_LUN, 8);
        bhs_put32(h, BHS_ITT, t->itt);
        bhs_put32(h, BHS_TTT, ttt);
        conn_fill_sn(c, h, false);
        bhs_put32(h, BHS_R2TSN, t->r2tsn++);
        bhs_put32(h, BHS_BUFFER_OFFSET, t->r2t_offset);
        bhs_put32(h, BHS_DESIRED_LEN, len);
        conn_send(c, p);
        t->r2t_offset += len;
        t->r2t_outstanding++;
    }
    return ISCSI_OK;
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

    struct scsi_task *st = &t->scsi;
    memcpy(st->cdb, req->b + BHS_CDB, SCSI_CDB_MAX);
    st->lun = scsi_lun_from_wire(req->b + BHS_LUN);
    st->target = c->session->node->scsi;
    st->nexus = c->session->nexus;
    st->edtl = t->edtl;
    st->edtl_read = flags & ISCSI_CMD_READ;
    st->edtl_write = flags & ISCSI_CMD_WRITE;
    st->tag = itt;
    st->transport_priv = t;

    enum cmdsn_verdict order = session_cmdsn_check(c->session, t->cmdsn, t->immediate, &t->wait);
    if (order == CMDSN_RECEIVED)
        CONN_LOG_LIMITED(
            c, LOG_LVL_INFO,
            "%s: CmdSN %u ITT 0x%08x: that CmdSN was already received (aborted before it "
            "came, or a duplicate): dropped",
            c->peer, t->cmdsn, t->itt);
    if (order < 0) {
        /* Outside the window or a duplicate: silently ignored (§4.2.2.1). */
        LOG_DEBUG("%s: CmdSN %u outside the window, command ignored", c->peer, t->cmdsn);
        task_put(t);
        p->discard = true;
        return ISCSI_OK;
    }
    conn_task_hash_add(c, t);
    task_get(t); /* the receive engine's, until the end of this PDU */
    p->task = t;

    if (scsi_task_setup(st) < 0) {
        t->refused = true;
    } else if (st->buffered) {
        /* A store without memory mapping needs a buffer per command: bound what one connection
         * holds, answering TASK SET FULL beyond it (SAM-5 §5.3.1) so the initiator backs off. */
        if (c->buf_bytes && c->buf_bytes + st->xfer_len > ISCSI_CONN_BUF_BUDGET) {
            scsi_task_refuse(st, SCSI_REFUSE_TASK_SET_FULL);
            t->refused = true;
        } else {
            t->buf_charge = st->xfer_len;
            c->buf_bytes += st->xfer_len;
        }
    }
    uint32_t dlen = p->dlen;
    if (st->edtl_write) {
        const struct iscsi_params *sp = &c->session->params;
        /* We take at most what both the CDB and EDTL allow, and only for a command that
         * writes: data sent with any other (a READ flagged W, say) must not land in its
         * buffers, which for a RAM LUN are the LUN's memory or the shared zero buffer.
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
        if (dlen && t->data_expected)
            rx_into_task(p, t, 0, dlen < t->data_expected ? dlen : t->data_expected);
        else if (dlen)
            p->discard = true;
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
    if (t->scsi.edtl_write) {
        uint32_t got = p->dlen < t->data_expected ? p->dlen : t->data_expected;
        t->data_received += got;
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
    if (ttt == ISCSI_RSVD_TAG) {
        if (len > t->unsol_remaining && !t->seq_failed)
            err = "unsolicited Data-Out beyond FirstBurstLength";
        else if (datasn != t->unsol_datasn)
            seq_err = "unsolicited Data-Out DataSN out of sequence";
        else if (off != t->unsol_next_off)
            seq_err = "unsolicited Data-Out buffer offset out of order";
    } else {
        struct r2t_seq *seq = r2t_slot_find(t, ttt);
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
    if (!t->seq_failed && off < t->data_expected) {
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
    data_out_maybe_terminate(t);
    return cmd_maybe_exec(c, t);
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
    if (t->state == TASK_QUEUED) {
        assert(c->session);
        session_cmdsn_cancel(c->session, &t->wait);
    } else if (t->state == TASK_DATA_OUT && c->session) {
        session_cmd_done(c->session);
    } /* TASK_EXEC: it counts in flight until the store lets go (cmd_scsi_done) */
    conn_task_hash_del(c, t);
    if (c->w.in.task == t)
        c->w.in.discard = true; /* the rest of the data segment being received: dropped */
    task_put(t);                /* the protocol side's */
}

void cmd_conn_teardown(struct iscsi_conn *c)
{
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        /* Answered or aborted ones: the protocol side let go already, and the rest of their
         * holders (queued PDUs, dropped by conn_close(); the store) let go on their own. */
        if (!t->aborted && t->state != TASK_SENDING)
            cmd_task_abort(t);
    }
}
