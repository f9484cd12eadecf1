/* Task management on the target (RFC 7143 §11.5/§11.6), mapped onto SAM-5 task management at
 * this boundary: ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, TARGET WARM and
 * COLD RESET. Aborted tasks are never answered; a task still in the store is released when the
 * store lets go of its buffers. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "util/log.h"

static void tmf_respond(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t response)
{
    conn_send_response(c, ISCSI_OP_TMF_RSP, req, response);
}

/* Abort every task of this connection matching the LUN (all LUNs if lun == UINT64_MAX), and
 * with use_cmdsn only those issued before the TMF (RFC 7143 §4.2.3.4: CmdSN lower than the
 * TMF's). */
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
        if (use_cmdsn && !t->immediate && !sn_lt(t->cmdsn, before_cmdsn))
            continue;
        if (t->aborted)
            continue;
        cmd_task_abort(t);
        n++;
    }
    return n;
}

/* Tasks on other connections live on other reactors: each connection aborts its own, by
 * message. */
struct abort_msg {
    struct iscsi_conn *c;
    uint64_t lun;
    uint32_t before_cmdsn;
    bool use_cmdsn;
};

static void abort_msg_run(void *arg)
{
    struct abort_msg *m = arg;
    if (!m->c->dead)
        abort_conn_tasks(m->c, m->lun, m->before_cmdsn, m->use_cmdsn);
    conn_put(m->c);
    free(m);
}

static void abort_conn_tasks_async(struct iscsi_conn *c, uint64_t lun, uint32_t before_cmdsn,
                                   bool use_cmdsn)
{
    struct abort_msg *m = malloc(sizeof(*m));
    if (!m)
        return;
    *m = (struct abort_msg){c, lun, before_cmdsn, use_cmdsn};
    conn_get(c);
    if (reactor_send(c->reactor, abort_msg_run, m) < 0) {
        conn_put(c);
        free(m);
    }
}

/* Abort matching tasks on every other connection: of this session only (ABORT TASK SET, the
 * I_T nexus's tasks), or of every session of the target (CLEAR TASK SET, resets: the task set
 * is shared by all nexuses, SAM-5 §8.3). */
static void abort_other_conns(struct iscsi_conn *self, bool whole_target, uint64_t lun,
                              uint32_t before_cmdsn, bool use_cmdsn)
{
    struct iscsi_session *own = self->session;
    struct iscsi_server *srv = self->srv;
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s || (s != own && (!whole_target || s->node != own->node)))
            continue;
        pthread_mutex_lock(&s->lock);
        for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
            struct iscsi_conn *c = list_entry(n, struct iscsi_conn, session_node);
            if (c != self)
                abort_conn_tasks_async(c, lun, before_cmdsn, s == own && use_cmdsn);
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
}

/* ---------------- ABORT TASK ---------------- */

/* The live task of this connection with that ITT: one already answered (its response queued)
 * or already aborted is not there to abort. Runs on c's reactor only. */
static struct iscsi_task *conn_abortable_task(struct iscsi_conn *c, uint32_t itt)
{
    for (struct list_node *ln = c->tasks.next; ln != &c->tasks; ln = ln->next) {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        if (t->itt == itt && !t->aborted && t->state != TASK_SENDING)
            return t;
    }
    return NULL;
}

/* Abort the task ABORT TASK named, if the TMF's LUN is the task's; the TMF Response code.
 * Runs on the task's reactor. */
static uint8_t abort_named_task(struct iscsi_task *t, uint64_t lun, uint16_t tmf_cid)
{
    struct iscsi_conn *c = t->conn;
    if (t->scsi.lun != lun)
        return ISCSI_TMF_RSP_NO_TASK;
    if (tmf_cid == c->cid)
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: ABORT TASK ITT 0x%08x", c->peer, t->itt);
    else
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: ABORT TASK ITT 0x%08x (TMF on CID %u)", c->peer,
                         t->itt, tmf_cid);
    cmd_task_abort(t);
    return ISCSI_TMF_RSP_COMPLETE;
}

/* The task ABORT TASK names is identified by its ITT within the session, whatever connection
 * carries it (RFC 7143 §11.5.1): an MC/S initiator may send the TMF on another connection than
 * the task's. A task not on the TMF's own connection is looked for on every other connection
 * of the session, each on its own reactor by message (its task list is its thread's alone),
 * and the last of them to finish hands the answer back to the TMF's connection: the TMF
 * Response leaves only once the task is aborted, or known to be on no connection. */
struct abort_task_req {
    struct iscsi_conn *c; /* the TMF's connection (a reference held until the answer) */
    struct iscsi_bhs req; /* the TMF Request */
    uint64_t lun;
    uint32_t rtt;
    uint8_t if_absent;     /* §11.5.1 b/c, from the CmdSN window when the TMF arrived */
    bool unreachable;      /* a connection could not be asked (out of memory) */
    atomic_uint legs;      /* connections still looking, + 1 while the messages go out */
    atomic_bool aborted;   /* a connection had the task and aborted it */
    atomic_bool wrong_lun; /* a connection had the ITT, on another LUN than the TMF's */
};

struct abort_task_leg {
    struct abort_task_req *r;
    struct iscsi_conn *c; /* the connection looked at (a reference held) */
};

/* On the TMF's connection's reactor, once every connection has looked. */
static void abort_task_answer(void *arg)
{
    struct abort_task_req *r = arg;
    struct iscsi_conn *c = r->c;
    uint8_t rsp = r->if_absent;
    if (atomic_load(&r->aborted))
        rsp = ISCSI_TMF_RSP_COMPLETE;
    else if (atomic_load(&r->wrong_lun))
        rsp = ISCSI_TMF_RSP_NO_TASK;
    else if (r->unreachable)
        rsp = ISCSI_TMF_RSP_REJECTED; /* the task may live on where we could not look */
    if (!c->dead && c->phase == CONN_FFP)
        tmf_respond(c, &r->req, rsp);
    conn_put(c);
    free(r);
}

static void abort_task_leg_done(struct abort_task_req *r)
{
    if (atomic_fetch_sub(&r->legs, 1) != 1)
        return;
    if (reactor_self() == r->c->reactor) {
        abort_task_answer(r);
    } else if (reactor_send(r->c->reactor, abort_task_answer, r) < 0) {
        /* Out of memory: the TMF goes unanswered (the initiator's TMF timeout escalates). The
         * reference cannot be dropped here, on the wrong thread: the connection leaks. */
        LOG_ERR("%s: ABORT TASK ITT 0x%08x: out of memory, no TMF Response", r->c->peer, r->rtt);
        free(r);
    }
}

/* On the reactor of one other connection of the session. */
static void abort_task_leg_run(void *arg)
{
    struct abort_task_leg *l = arg;
    struct abort_task_req *r = l->r;
    struct iscsi_task *t = l->c->dead ? NULL : conn_abortable_task(l->c, r->rtt);
    if (t) {
        if (abort_named_task(t, r->lun, r->c->cid) == ISCSI_TMF_RSP_COMPLETE)
            atomic_store(&r->aborted, true);
        else
            atomic_store(&r->wrong_lun, true);
    }
    conn_put(l->c);
    free(l);
    abort_task_leg_done(r);
}

static void abort_task_other_conns(struct iscsi_conn *self, const struct iscsi_bhs *req,
                                   uint32_t rtt, uint64_t lun, uint8_t if_absent)
{
    struct iscsi_session *s = self->session;
    struct abort_task_req *r = malloc(sizeof(*r));
    if (!r) {
        tmf_respond(self, req, ISCSI_TMF_RSP_REJECTED);
        return;
    }
    r->c = self;
    r->req = *req;
    r->lun = lun;
    r->rtt = rtt;
    r->if_absent = if_absent;
    r->unreachable = false;
    atomic_init(&r->legs, 1);
    atomic_init(&r->aborted, false);
    atomic_init(&r->wrong_lun, false);
    conn_get(self);
    pthread_mutex_lock(&s->lock);
    for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
        struct iscsi_conn *o = list_entry(n, struct iscsi_conn, session_node);
        if (o == self)
            continue;
        struct abort_task_leg *l = malloc(sizeof(*l));
        if (!l) {
            r->unreachable = true;
            continue;
        }
        *l = (struct abort_task_leg){r, o};
        conn_get(o);
        atomic_fetch_add(&r->legs, 1);
        if (reactor_send(o->reactor, abort_task_leg_run, l) < 0) {
            atomic_fetch_sub(&r->legs, 1);
            atomic_fetch_sub(&o->refs, 1); /* o is still in the session: not the last one */
            free(l);
            r->unreachable = true;
        }
    }
    pthread_mutex_unlock(&s->lock);
    abort_task_leg_done(r); /* answers right here when there was nobody else to ask */
}

/* TARGET COLD RESET (RFC 7143 §11.5.1) closes all of the target's TCP connections to all
 * initiators: every connection of a session of the asking connection's node but that one,
 * which closes itself once its answer is out. */
static bool other_conn_of_node(const struct iscsi_session *s, const struct iscsi_conn *c,
                               const void *arg)
{
    const struct iscsi_conn *self = arg;
    return c != self && s->node == self->session->node;
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
        struct iscsi_task *t = conn_abortable_task(c, rtt);
        if (t) { /* the common case, answered at once: the task is on this connection */
            tmf_respond(c, req, abort_named_task(t, lun, c->cid));
            return;
        }
        /* §11.5.1 b: a task no connection has whose RefCmdSN is inside the window and less
         * than the CmdSN of the TMF itself is considered received and aborted: "function
         * complete". Otherwise (c) "task does not exist" and nothing is taken: a task that
         * already completed is below the window, and one whose RefCmdSN is not below the
         * TMF's CmdSN was not issued before it. That holds for an immediate TMF too, whose
         * CmdSN is the one the next command will carry: RefCmdSN = CmdSN names a command the
         * initiator has not sent, and taking it would drop that command unanswered. */
        uint32_t ref = bhs_get32(req, BHS_REFCMDSN);
        bool in_window = sn_le(win_exp, ref) && sn_le(ref, win_max) && sn_lt(ref, cmdsn);
        /* Considered received: the command may still be on its way (on another connection,
         * or just behind this TMF). Its CmdSN is taken now, before the other connections
         * look, so it is dropped whenever it comes and the window moves past it. Had it come
         * meanwhile, nothing is taken (it is queued, or ExpCmdSN is past it) and the search
         * below finds and aborts it (a queued task aborted keeps its CmdSN taken). */
        if (in_window)
            session_consume_cmdsn(s, ref);
        abort_task_other_conns(c, req, rtt, lun,
                               in_window ? ISCSI_TMF_RSP_COMPLETE : ISCSI_TMF_RSP_NO_TASK);
        return;
    }
    case ISCSI_TMF_ABORT_TASK_SET:
    case ISCSI_TMF_CLEAR_TASK_SET: {
        if (!lu) {
            tmf_respond(c, req, ISCSI_TMF_RSP_NO_LUN);
            return;
        }
        unsigned n = abort_conn_tasks(c, lun, cmdsn, true);
        abort_other_conns(c, fn == ISCSI_TMF_CLEAR_TASK_SET, lun, cmdsn, true);
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: %s on LUN %llu: %u task(s) aborted", c->peer,
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
        abort_other_conns(c, true, lun, 0, false);
        scsi_lun_reset(lu, s->nexus);
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: LOGICAL UNIT RESET on LUN %llu", c->peer,
                         (unsigned long long)lun);
        tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
        return;
    case ISCSI_TMF_TARGET_WARM_RESET:
    case ISCSI_TMF_TARGET_COLD_RESET:
        abort_conn_tasks(c, UINT64_MAX, 0, false);
        abort_other_conns(c, true, UINT64_MAX, 0, false);
        scsi_target_reset(tgt, s->nexus, fn == ISCSI_TMF_TARGET_COLD_RESET);
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: TARGET %s RESET", c->peer,
                         fn == ISCSI_TMF_TARGET_COLD_RESET ? "COLD" : "WARM");
        tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
        if (fn == ISCSI_TMF_TARGET_COLD_RESET) {
            /* §11.5.1: a cold reset closes every connection to every initiator; this one
             * after its answer. */
            c->phase = CONN_LOGGED_OUT;
            session_close_conns_where(c->srv, other_conn_of_node, c, "target cold reset");
        }
        return;
    case ISCSI_TMF_CLEAR_ACA:
    case ISCSI_TMF_TASK_REASSIGN:
    default:
        tmf_respond(c, req,
                    fn == ISCSI_TMF_TASK_REASSIGN ? ISCSI_TMF_RSP_NO_REASSIGN
                                                  : ISCSI_TMF_RSP_NOT_SUPPORTED);
        return;
    }
}

/* PREEMPT AND ABORT (SPC-4 §5.13.11.2.5): the SCSI core asks for the tasks of a preempted
 * nexus on one LUN to be aborted, as ABORT TASK SET would, on every connection of every
 * session of that nexus. */
void iscsi_abort_nexus_tasks(struct scsi_target *t, struct scsi_nexus *n, struct scsi_lun *lu)
{
    struct iscsi_server *srv = t->transport_ctx;
    uint64_t lun = scsi_lun_id(lu);
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s || s->nexus != n)
            continue;
        pthread_mutex_lock(&s->lock);
        for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next) {
            struct iscsi_conn *c = list_entry(ln, struct iscsi_conn, session_node);
            abort_conn_tasks_async(c, lun, 0, false);
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
}
