/* Task management on the target (RFC 7143 §11.5/§11.6), mapped onto SAM-5 task management at
 * this boundary: ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, TARGET WARM and
 * COLD RESET. Aborted tasks are never answered; a task still in the store is released when the
 * store lets go of its buffers. */
#include <string.h>

#include "iscsi/conn.h"
#include "util/log.h"

static void tmf_respond(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t response)
{
    struct tx_pdu *p = conn_tx_alloc(c);
    if (!p) {
        conn_close(c, "out of memory");
        return;
    }
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL);
    h->b[BHS_RESPONSE] = response;
    bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
    conn_fill_sn(c, h, true);
    conn_send(c, p);
}

/* Abort every task of this connection matching the LUN (all LUNs if lun == UINT64_MAX). With
 * MC/S the other connections of the session are asked too, on their own reactors. */
static unsigned abort_conn_tasks(struct iscsi_conn *c, uint64_t lun, uint32_t before_cmdsn,
                                 bool use_cmdsn)
{
    unsigned n = 0;
    struct list_node *ln, *tmp;
    list_for_each_safe(ln, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        if (lun != UINT64_MAX && t->scsi.lun != lun)
            continue;
        /* §4.2.3.? : only tasks issued before the TMF itself (CmdSN lower than its CmdSN) */
        if (use_cmdsn && !t->immediate && !sn_lt(t->cmdsn, before_cmdsn))
            continue;
        if (t->aborted)
            continue;
        cmd_task_abort(t);
        n++;
    }
    return n;
}

void tmf_handle(struct iscsi_conn *c)
{
    struct iscsi_bhs *req = &c->rx_bhs;
    uint8_t fn = req->b[BHS_TMF_FUNCTION] & 0x7f;
    uint32_t cmdsn = bhs_get32(req, BHS_CMDSN);
    bool immediate = bhs_immediate(req);
    if (!(req->b[1] & ISCSI_FLAG_FINAL)) {
        conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
        return;
    }
    struct iscsi_session *s = c->session;
    uint32_t win_exp, win_max; /* the window as it was when the TMF arrived */
    session_window(s, &win_exp, &win_max);
    if (!immediate)
        session_consume_cmdsn(s, cmdsn);
    struct scsi_target *tgt = s->node->scsi;
    uint64_t lun = scsi_lun_from_wire(req->b + BHS_LUN);
    struct scsi_lun *lu = scsi_target_lun(tgt, lun);

    switch (fn) {
    case ISCSI_TMF_ABORT_TASK: {
        uint32_t rtt = bhs_get32(req, BHS_RTT);
        struct iscsi_task *t = NULL;
        for (struct list_node *ln = c->tasks.next; ln != &c->tasks; ln = ln->next) {
            struct iscsi_task *x = list_entry(ln, struct iscsi_task, node);
            if (x->itt == rtt && !x->aborted && x->state != TASK_SENDING) {
                t = x;
                break;
            }
        }
        if (!t) {
            /* §11.6.1: a task we never saw whose RefCmdSN is still inside the window (and
             * before this TMF) is considered received and aborted: "function complete". A
             * task that already completed is outside the window: "task does not exist". */
            uint32_t ref = bhs_get32(req, BHS_REFCMDSN);
            bool in_window = sn_le(win_exp, ref) && sn_le(ref, win_max) &&
                             (immediate || sn_lt(ref, cmdsn));
            tmf_respond(c, req, in_window ? ISCSI_TMF_RSP_COMPLETE : ISCSI_TMF_RSP_NO_TASK);
            return;
        }
        if (t->scsi.lun != lun) {
            tmf_respond(c, req, ISCSI_TMF_RSP_NO_TASK);
            return;
        }
        LOG_INFO("%s: ABORT TASK ITT 0x%08x", c->peer, rtt);
        cmd_task_abort(t);
        tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
        return;
    }
    case ISCSI_TMF_ABORT_TASK_SET:
    case ISCSI_TMF_CLEAR_TASK_SET: {
        if (!lu) {
            tmf_respond(c, req, ISCSI_TMF_RSP_NO_LUN);
            return;
        }
        unsigned n = abort_conn_tasks(c, lun, cmdsn, true);
        LOG_INFO("%s: %s on LUN %llu: %u task(s) aborted", c->peer,
                 fn == ISCSI_TMF_ABORT_TASK_SET ? "ABORT TASK SET" : "CLEAR TASK SET",
                 (unsigned long long)lun, n);
        if (fn == ISCSI_TMF_CLEAR_TASK_SET)
            scsi_lun_tasks_cleared(lu, s->nexus);
        tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
        return;
    }
    case ISCSI_TMF_LOGICAL_UNIT_RESET:
        if (!lu) {
            tmf_respond(c, req, ISCSI_TMF_RSP_NO_LUN);
            return;
        }
        abort_conn_tasks(c, lun, 0, false);
        scsi_lun_reset(lu, s->nexus);
        LOG_INFO("%s: LOGICAL UNIT RESET on LUN %llu", c->peer, (unsigned long long)lun);
        tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
        return;
    case ISCSI_TMF_TARGET_WARM_RESET:
    case ISCSI_TMF_TARGET_COLD_RESET:
        abort_conn_tasks(c, UINT64_MAX, 0, false);
        scsi_target_reset(tgt, s->nexus, fn == ISCSI_TMF_TARGET_COLD_RESET);
        LOG_INFO("%s: TARGET %s RESET", c->peer, fn == ISCSI_TMF_TARGET_COLD_RESET ? "COLD" : "WARM");
        tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
        if (fn == ISCSI_TMF_TARGET_COLD_RESET) {
            /* §11.5.1: a cold reset also closes the session's connections (after the answer). */
            c->phase = CONN_LOGGED_OUT;
            session_close_other_conns(s, c);
        }
        return;
    case ISCSI_TMF_CLEAR_ACA:
    case ISCSI_TMF_TASK_REASSIGN:
    default:
        tmf_respond(c, req, fn == ISCSI_TMF_TASK_REASSIGN ? ISCSI_TMF_RSP_NO_REASSIGN
                                                          : ISCSI_TMF_RSP_NOT_SUPPORTED);
        return;
    }
}
