/* ABORT TASK asked by the caller (lr_task_abort; RFC 7143 §11.5.1, §11.6.1, §4.2.3.3).
 *
 * Each abort is a record on the session's list until it is settled; its done() runs once.
 * - A task with its command on a connection in full feature phase: the TMF goes out at once
 *   on that connection (immediate, RTT = the task's ITT, RefCmdSN = its CmdSN, the session's
 *   next CmdSN not taken), behind the command in the same byte stream. The task keeps
 *   answering R2Ts until the answer: the target decides what it stops.
 * - "Function complete" or "task does not exist": after it the target sends nothing more for
 *   the task and runs none of it (§4.2.3.3: data of an aborted task is discarded), so a task
 *   still unanswered completes then with LR_ERR_TASK_ABORTED, before the abort's done(). A
 *   task whose status came first (it is ahead of the TMF response on the connection)
 *   completed with it: that status stands.
 * - A task waiting for the CmdSN window (no CmdSN yet) never reaches the target: the tick
 *   completes it aborted, and the abort "function complete" without a TMF.
 * - A task with a CmdSN not yet on a connection (a retry waiting for one): the abort waits;
 *   once the task is on a connection again the tick sends it. An ERL 2 orphan: once the
 *   target let go of its lost connection, the ABORT TASK goes where its TASK REASSIGN would
 *   have, on a live connection, instead of it (§11.5.1: the target moves the task there and
 *   aborts it; a status it had sent is sent again first). A connection lost with the TMF
 *   unanswered: the same, the TMF is sent again.
 * - The task ended otherwise first (its status, a failure, Time2Retain): the abort completes
 *   with LR_ERR_CONN_LOST if its TMF never got an answer because of a lost connection, with the
 *   response if it got one, LR_ERR_TIMEOUT if none came within the command timeout. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "initiator/abort.h"
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/table.h"
#include "initiator/task.h"
#include "util/log.h"

struct ini_abort {
    struct list_node node;
    uint32_t itt;          /* the TMF's */
    uint32_t rtt;          /* the task's */
    struct ini_conn *conn; /* the TMF went out there, unanswered; NULL: not sent */
    bool sent_once;
    bool orphan; /* the TMF went out instead of the task's TASK REASSIGN (ERL 2) */
    uint64_t deadline_ms;
    lr_done_fn done;
    void *arg;
};

/* The live task an ITT names, in whatever state, or NULL. */
static struct ini_task *task_of(struct lr_session *s, uint32_t rtt)
{
    uint32_t idx = rtt & ini_itt_idx_mask(s);
    if (idx >= s->ntasks)
        return NULL;
    struct ini_task *t = &s->tasks[idx];
    return t->state != ITS_FREE && t->itt == rtt ? t : NULL;
}

static void settle(struct lr_session *s, struct ini_abort *a, enum lr_err e, uint8_t response,
                   const char *what)
{
    list_del(&a->node);
    struct lr_result r = {.err = e, .response = response, .what = what, .conn = -1};
    lr_done_fn done = a->done;
    void *arg = a->arg;
    free(a);
    if (done)
        done(arg, &r);
    (void)s;
}

static void task_aborted(struct lr_session *s, struct ini_task *t, const char *what)
{
    struct lr_result r = {.err = LR_ERR_TASK_ABORTED, .what = what};
    ini_task_complete(s, t, &r);
}

static int abort_send(struct ini_conn *c, struct ini_abort *a, struct ini_task *t)
{
    struct lr_session *s = c->s;
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_TMF_REQ, ISCSI_FLAG_FINAL | ISCSI_TMF_ABORT_TASK);
    /* §11.5: immediate, so it does not wait behind commands the window holds back; CmdSN is
     * the next one, not taken, and RefCmdSN (below it) names the task's: a command still on
     * its way is taken as received and aborted (§11.5.1 b). */
    h->b[0] |= ISCSI_BHS_IMMEDIATE;
    ini_fill_lun(h->b + BHS_LUN, s->o.lun);
    bhs_put32(h, BHS_ITT, a->itt);
    bhs_put32(h, BHS_RTT, t->itt);
    bhs_put32(h, BHS_CMDSN, s->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    bhs_put32(h, BHS_REFCMDSN, t->cmdsn);
    a->conn = c;
    a->orphan = false;
    a->sent_once = true;
    a->deadline_ms = reactor_now_ms() + s->o.cmd_timeout_ms;
    LOG_DEBUG("initiator: connection %u: ABORT TASK %08x (CmdSN %u)", c->idx, t->itt, t->cmdsn);
    ini_conn_send(c, p, NULL, 0);
    return INI_OK;
}

/* Whether t's command is on a connection the TMF can follow it on, from this thread. */
static bool sendable(const struct lr_session *s, const struct ini_task *t)
{
    return t->state == ITS_ACTIVE && t->has_cmdsn && t->conn && t->conn->state == ICS_FFP &&
           !t->conn->logout_sent && t->conn->r == s->r;
}

int lr_task_abort(struct lr_session *s, uint32_t tag, lr_done_fn done, void *arg)
{
    ini_lock(s);
    int rc = -1;
    struct ini_task *t = task_of(s, tag);
    if (s->mt) {
        errno = ENOTSUP;
        goto out;
    }
    if (!t || s->destroyed) {
        errno = ESRCH;
        goto out;
    }
    for (struct list_node *n = s->aborts.next; n != &s->aborts; n = n->next)
        if (list_entry(n, struct ini_abort, node)->rtt == tag) {
            errno = EALREADY;
            goto out;
        }
    struct ini_abort *a = calloc(1, sizeof(*a));
    if (!a)
        goto out;
    a->itt = INI_ABORT_ITT | s->abort_seq++;
    a->rtt = tag;
    a->done = done;
    a->arg = arg;
    list_add_tail(&s->aborts, &a->node);
    rc = 0;
    if (sendable(s, t))
        ini_conn_fail(t->conn, abort_send(t->conn, a, t));
out:
    ini_unlock(s);
    return rc;
}

static struct ini_abort *pending_of(struct lr_session *s, uint32_t rtt)
{
    for (struct list_node *n = s->aborts.next; n != &s->aborts; n = n->next) {
        struct ini_abort *a = list_entry(n, struct ini_abort, node);
        if (a->rtt == rtt && !a->conn)
            return a;
    }
    return NULL;
}

bool ini_abort_wanted(struct lr_session *s, const struct ini_task *t)
{
    return pending_of(s, t->itt) != NULL;
}

int ini_abort_send_orphan(struct ini_conn *c, struct ini_task *t)
{
    struct ini_abort *a = pending_of(c->s, t->itt);
    assert(a && t->reassign);
    t->reassign = false;
    t->reassigning = false;
    t->conn = c;
    c->outstanding++;
    t->deadline_ms = reactor_now_ms() + c->s->o.cmd_timeout_ms;
    LOG_INFO("initiator: connection %u: ABORT TASK of %08x, an orphan, instead of its TASK "
             "REASSIGN",
             c->idx, t->itt);
    int rc = abort_send(c, a, t);
    a->orphan = true;
    return rc;
}

int ini_abort_rsp(struct ini_conn *c, const uint8_t *hdr, struct ini_task **again)
{
    *again = NULL;
    struct lr_session *s = c->s;
    uint32_t itt = get_be32(hdr + BHS_ITT);
    struct ini_abort *a = NULL;
    for (struct list_node *n = s->aborts.next; n != &s->aborts; n = n->next) {
        struct ini_abort *x = list_entry(n, struct ini_abort, node);
        if (x->itt == itt && x->conn == c) {
            a = x;
            break;
        }
    }
    if (!a) {
        c->stale_pdus++;
        return INI_OK;
    }
    uint8_t rsp = hdr[BHS_RESPONSE];
    struct ini_task *t = task_of(s, a->rtt);
    if (rsp == ISCSI_TMF_RSP_COMPLETE || rsp == ISCSI_TMF_RSP_NO_TASK) {
        /* §11.6.1: nothing more of the task comes; unanswered, it ends here */
        if (t && t->state == ITS_ACTIVE && t->conn == c) {
            /* Data-Out answering an R2T that came before this answer may still be queued,
             * pointing into the buffer the caller gets back now: dropped as it completes
             * (ini_task_detach; the target discards it anyway, §4.2.3.3). */
            task_aborted(s, t, "aborted (ABORT TASK answered)");
        }
        settle(s, a, LR_OK, rsp,
               rsp == ISCSI_TMF_RSP_COMPLETE ? "function complete" : "task does not exist");
        return INI_OK;
    }
    LOG_WARN("initiator: connection %u: ABORT TASK of %08x answered %u", c->idx, a->rtt, rsp);
    if (a->orphan && t && t->state == ITS_ACTIVE && t->conn == c &&
        (rsp == ISCSI_TMF_RSP_TASK_ALLEGIANT || rsp == ISCSI_TMF_RSP_NO_REASSIGN)) {
        /* §11.6.1: the target did not move the orphan here, so it is not c's: an orphan again
         * (the caller's ini_orphan_again), reassigned later. Still allegiant: the abort stays
         * pending and goes out again in place of that TASK REASSIGN; no reassignment: the
         * TASK REASSIGN itself gets the target's word on the task. */
        *again = t;
        if (rsp == ISCSI_TMF_RSP_TASK_ALLEGIANT) {
            a->conn = NULL;
            return INI_OK;
        }
    }
    settle(s, a, LR_OK, rsp, "ABORT TASK not performed");
    return INI_OK;
}

void ini_abort_conn_down(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    for (struct list_node *n = s->aborts.next; n != &s->aborts; n = n->next) {
        struct ini_abort *a = list_entry(n, struct ini_abort, node);
        if (a->conn == c)
            a->conn = NULL;
    }
}

void ini_abort_tick(struct lr_session *s, uint64_t now)
{
    struct list_node *n = s->aborts.next;
    while (n != &s->aborts) {
        struct ini_abort *a = list_entry(n, struct ini_abort, node);
        n = n->next;
        struct ini_task *t = task_of(s, a->rtt);
        if (a->conn) {
            if (now >= a->deadline_ms)
                settle(s, a, LR_ERR_TIMEOUT, 0, "no answer to ABORT TASK");
        } else if (!t) {
            settle(s, a, LR_ERR_CONN_LOST, 0,
                   a->sent_once ? "connection lost before ABORT TASK was answered"
                                : "the task ended before ABORT TASK could be sent");
        } else if (t->state == ITS_WAITING && !t->has_cmdsn) {
            list_del(&t->node); /* never sent: it ends here */
            t->conn = NULL;
            task_aborted(s, t, "aborted before it was sent");
            settle(s, a, LR_OK, ISCSI_TMF_RSP_COMPLETE, "function complete");
        } else if (sendable(s, t)) {
            ini_conn_fail(t->conn, abort_send(t->conn, a, t));
        }
    }
}

void ini_abort_fail_all(struct lr_session *s, enum lr_err e, const char *what)
{
    struct list_node *n;
    while ((n = s->aborts.next) != &s->aborts)
        settle(s, list_entry(n, struct ini_abort, node), e, 0, what);
}
