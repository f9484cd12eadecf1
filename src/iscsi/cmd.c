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

#include "iscsi/cmd.h"
#include "iscsi/conn.h"
#include "iscsi/dataout.h"
#include "iscsi/exec.h"
#include "iscsi/orphan.h"
#include "iscsi/response.h"
#include "iscsi/session.h"
#include "iscsi/task.h"
#include "iscsi/taskmem.h"
#include "util/iov.h"
#include "util/log.h"

/* ---------------- tasks by ITT ---------------- */

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

/* ---------------- SCSI Command PDU ---------------- */

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
    struct iscsi_task *dup = task_hash_find(c, itt);
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
    if (rsp_data_in_count(old))
        return rsp_resend_data_in(c, old, 0, 0);
    return rsp_status(c, old, RSP_AGAIN, 0);
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
    task_hash_del(c, t);
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
    t->wait.release = exec_release_turn;
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
    st->limit = c->session->limit ? &c->session->limit->limit : NULL;
    st->edtl = t->edtl;
    st->edtl_read = flags & ISCSI_CMD_READ;
    st->edtl_write = flags & ISCSI_CMD_WRITE;
    /* ERL >= 1 keeps an answered READ until ExpStatSN acknowledges it, to resend its data */
    st->keeps_data = conn_erl(c) >= 1;
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
    task_hash_add(c, t);
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
            dataout_rx_into_task(p, t, 0, t->imm_pending);
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
            exec_count_lun_digest_error(c, t);
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
        int rc = dataout_send_r2ts(c, t);
        if (rc < 0)
            return rc;
    }
    return exec_maybe_run(c, t);
}

struct iscsi_task *cmd_task_lookup(struct iscsi_conn *c, uint32_t itt)
{
    return task_lookup_except(c, itt, NULL);
}

/* ---------------- the end of a connection's tasks ---------------- */

/* ERL 2: whether the tasks of c, closing now, are kept for reassignment (RFC 7143 §7.2.2)
 * rather than terminated (§11.14.5): not when the daemon shuts down, a Logout said "close the
 * connection", or Time2Retain is 0 (nothing is kept, §11.15.2); the session ending with it
 * (closed, reinstated, logged out) is looked at under its lock. */
static bool conn_keeps_tasks(const struct iscsi_conn *c)
{
    const struct iscsi_session *s = c->session;
    if (!s || conn_erl(c) < 2 || !s->params.default_time2retain)
        return false;
    return c->end == CONN_END_LOST || c->end == CONN_END_RECOVERY;
}

/* A queued command of a connection removed for recovery, out of the CmdSN queue already
 * (orphans_fill): dropped unanswered with its CmdSN not received, so that the
 * initiator's retry of it runs. */
static void cmd_task_discard(struct iscsi_task *t)
{
    struct iscsi_conn *c = t->conn;
    assert(t->state == TASK_QUEUED && !t->aborted);
    t->aborted = true;
    task_hash_del(c, t);
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
    if (!s || !s->nexus || c->end == CONN_END_TERMINATED || c->end == CONN_END_RECOVERY)
        return false;
    bool by_logout = c->end != CONN_END_LOST; /* LOGOUT or NAMED */
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
    if (c->w.in.task) { /* closed in the middle of a PDU placed into a task */
        struct iscsi_task *t = c->w.in.task;
        c->w.in.task = NULL;
        task_put(t);
    }
    if (cmd_teardown_test_hook)
        cmd_teardown_test_hook(c, false);
    /* Removed for recovery by a Logout on another connection, or restarted: the answers its
     * ExpStatSN acknowledges were received, and are not kept. Read as the group is published,
     * under the session lock the Logout stores it with (orphans_publish): read here, before,
     * one stored in between was lost. Without a group nothing is kept anyway. */
    if (conn_keeps_tasks(c)) {
        struct iscsi_orphans *g = orphans_new(c);
        kept = g && orphans_fill(c, g);
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
    bool report = conn_end_clears_tasks(c);
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        /* Answered or aborted ones: the protocol side let go already, and the rest of their
         * holders (queued PDUs, dropped by conn_close(); the store) let go on their own. */
        if (kept && t->state == TASK_QUEUED && !t->aborted) {
            cmd_task_discard(t);
        } else if (!t->aborted && !task_answered(t)) {
            /* one whose immediate data was still under its digest check never had its
             * CmdSN received (§7.3): the initiator retries it, nothing was cleared */
            if (report && !t->cmdsn_pending)
                scsi_nexus_tasks_terminated(c->session->nexus, t->scsi.lun);
            exec_task_abort(t);
        }
    }
}
