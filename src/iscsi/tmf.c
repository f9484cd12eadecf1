/* Task management on the target (RFC 7143 §11.5/§11.6), mapped onto SAM-5 task management at
 * this boundary: ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, TARGET WARM and
 * COLD RESET. Aborted tasks are never answered; a task still in the store is released when the
 * store lets go of its buffers.
 *
 * "Function complete" is a promise about the medium (SAM-5 §7.1): no command the function
 * aborted changes it afterwards. So the answer goes out only once every connection that may
 * carry such a command has aborted its own (the fan-out below) and then every aborted task of
 * the LUN (or target) has left the store (scsi_lun_quiesce): a write the store already had
 * finishes first, one it did not have is never given to it. */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/cmd.h"
#include "iscsi/conn.h"
#include "iscsi/exec.h"
#include "iscsi/orphan.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "iscsi/task.h"
#include "iscsi/tmf.h"
#include "util/log.h"

static int tmf_respond(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t response)
{
    return conn_send_response(c, ISCSI_OP_TMF_RSP, req, response);
}

/* ---------------- the answer, once the aborted tasks have left the store ---------------- */

struct tmf_quiet {
    struct iscsi_conn *c; /* a reference held */
    struct iscsi_bhs req;
    uint8_t rsp;
    bool cold; /* TARGET COLD RESET: the connection closes once the answer is out */
    struct scsi_wait w;
    struct scsi_target_wait tw;
};

static int quiet_respond(struct tmf_quiet *q)
{
    struct iscsi_conn *c = q->c;
    int rc = tmf_respond(c, &q->req, q->rsp);
    if (rc == ISCSI_OK && q->cold)
        c->phase = CONN_LOGGED_OUT; /* §11.5.1: this one closes too, after its answer */
    return rc;
}

/* On the TMF's connection's reactor, outside its handlers: a failure to queue the answer
 * closes the connection here. */
static void tmf_quiet_answer(void *arg)
{
    struct tmf_quiet *q = arg;
    struct iscsi_conn *c = q->c;
    int rc = ISCSI_OK;
    if (!c->dead && c->phase == CONN_FFP) /* it may have closed or logged out meanwhile */
        rc = quiet_respond(q);
    conn_fail(c, rc);
    conn_put(c);
    free(q);
}

/* Answer rsp to req once no aborted task of lu (whole_target: of any LUN of the target) is in
 * the store: right here when none is (the status of queuing the answer is returned), else
 * later, on c's reactor. lu is the LU the aborted tasks hold (held by the caller, or by them,
 * this loop turn), never looked up again by the host's number: the host's map may have
 * changed since (scsi_target_host_map). "Task does not exist" waits too, with no LU for the
 * whole target: the task may be one aborted before whose answer was lost with its connection
 * (its write still in the store, and no longer an orphan), asked for again by the initiator's
 * recovery (RFC 7143 §11.5.1; SAM-5: nothing aborted may change the medium after the answer;
 * torture seed 8002). Any other answer, or "function complete" with no LU (the task never
 * reached one), goes at once: nothing aborted is in the store. Out of memory closes the
 * connection: the initiator never hears "complete" too early. */
static int tmf_answer_quiet(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t rsp,
                            struct scsi_lun *lu, bool whole_target, bool cold)
{
    struct scsi_target *tgt = c->session->node->scsi;
    if (rsp == ISCSI_TMF_RSP_NO_TASK && !lu)
        whole_target = true; /* which LU such a task holds is not known here */
    if ((rsp != ISCSI_TMF_RSP_COMPLETE && rsp != ISCSI_TMF_RSP_NO_TASK) || (!whole_target && !lu))
        return tmf_respond(c, req, rsp);
    struct tmf_quiet *q = calloc(1, sizeof(*q));
    if (!q)
        return ISCSI_ERR_NOMEM;
    conn_get(c);
    *q = (struct tmf_quiet){.c = c, .req = *req, .rsp = rsp, .cold = cold};
    q->w.fn = q->tw.fn = tmf_quiet_answer;
    q->w.arg = q->tw.arg = q;
    if (!whole_target ? scsi_lun_quiesce(lu, &q->w) : scsi_target_quiesce(tgt, &q->tw)) {
        CONN_LOG_LIMITED(c, LOG_LVL_DEBUG,
                         "%s: task management ITT 0x%08x answers once the aborted commands "
                         "have left the store",
                         c->peer, bhs_get32(req, BHS_ITT));
        return ISCSI_OK;
    }
    int rc = quiet_respond(q);
    conn_put(c); /* never the last reference: the caller holds one */
    free(q);
    return rc;
}

/* Abort every task of this connection on lu (all LUNs if lu is NULL), and with use_cmdsn only
 * those issued before the TMF (RFC 7143 §4.2.3.4: CmdSN lower than the TMF's). A task is
 * matched by the LU it holds, not by its number: the host's map may have changed while it ran
 * (scsi_target_host_map), and it is still in lu's task set. One that holds none (refused at
 * setup: no LU had the number) is matched by the number its host knows lu by now. */
static unsigned abort_conn_tasks(struct iscsi_conn *c, struct scsi_lun *lu, uint32_t before_cmdsn,
                                 bool use_cmdsn)
{
    unsigned n = 0;
    uint64_t hl = lu ? scsi_nexus_host_lun(c->session->nexus, scsi_lun_id(lu), NULL) : 0;
    struct list_node *ln, *tmp;
    list_for_each_safe(ln, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        if (lu && (t->scsi.lu ? t->scsi.lu != lu : t->scsi.lun != hl))
            continue;
        if (use_cmdsn && !t->immediate && !sn_lt(t->cmdsn, before_cmdsn))
            continue;
        if (t->aborted)
            continue;
        exec_count_event(c, t, IOSTATS_ABORT);
        exec_task_abort(t);
        n++;
    }
    return n;
}

/* ---------------- ABORT TASK ---------------- */

/* The live task of this connection with that ITT: one already answered (its response queued)
 * or already aborted is not there to abort. Runs on c's reactor only. */
static struct iscsi_task *conn_abortable_task(struct iscsi_conn *c, uint32_t itt)
{
    for (struct list_node *ln = c->tasks.next; ln != &c->tasks; ln = ln->next) {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        if (t->itt == itt && !t->aborted && !task_answered(t))
            return t;
    }
    return NULL;
}

/* An orphan this connection claimed while the store had it, still on its way here (not
 * aborted yet): the session still holds it, and its write may still land. Runs on c's reactor
 * only. */
static struct iscsi_task *conn_arriving_task(struct iscsi_conn *c, uint32_t itt)
{
    for (struct list_node *ln = c->arriving.next; ln != &c->arriving; ln = ln->next) {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        if (t->itt == itt && !t->abort_on_arrival)
            return t;
    }
    return NULL;
}

/* ABORT TASK of such a task (RFC 7143 §11.5.1, SAM-5: the medium must not change after the
 * answer): it ends when it arrives, and the store is told; the answer is queued "quiet", so
 * it leaves only once the store let go of the task. Before, it was in no group and on no
 * list, and the answer "task does not exist" went out while its write was still to land
 * (docs/torture.md, seed 8002). Runs on c's reactor. */
static uint8_t abort_arriving_task(struct iscsi_conn *c, struct iscsi_task *t, uint64_t lun)
{
    if (t->scsi.lun != lun)
        return ISCSI_TMF_RSP_NO_TASK;
    CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                     "%s: ABORT TASK ITT 0x%08x, reassigned here while in the store", c->peer,
                     t->itt);
    t->abort_on_arrival = true; /* read on this thread, by cmd_orphan_arrive */
    scsi_task_abort(&t->scsi);
    return ISCSI_TMF_RSP_COMPLETE;
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
    exec_count_event(c, t, IOSTATS_ABORT);
    exec_task_abort(t);
    return ISCSI_TMF_RSP_COMPLETE;
}

/* ---------------- fan-out to the other connections ---------------- */

/* Tasks on other connections live on other reactors (a task list is its thread's alone): each
 * connection aborts its own, reached by a message. The messages are embedded in one fan-out
 * object, one leg per connection, allocated before anything is aborted: out of memory is then
 * answered FUNCTION REJECTED with nothing done, and once it exists every leg gets there. The
 * last leg to finish frees it, or for ABORT TASK hands the answer back to the TMF's
 * connection. */
struct abort_fanout;

struct abort_leg {
    struct abort_fanout *f;
    struct iscsi_conn *c; /* the connection looked at (a reference held) */
    bool use_cmdsn;
    struct reactor_msg msg;
};

/* TARGET COLD RESET (RFC 7143 §11.5.1) closes all of the target's TCP connections to all
 * initiators: every connection of a session of the asking connection's node but that one,
 * which closes itself once its answer is out. */
static bool other_conn_of_node(const struct iscsi_session *s, const struct iscsi_conn *c,
                               const void *arg)
{
    const struct iscsi_conn *self = arg;
    return c != self && s->node == self->session->node;
}

/* What a fan-out that aborts a task set does once every leg has: its TMF's answer. */
enum fanout_then {
    THEN_BY_ITT,     /* ABORT TASK or TASK REASSIGN (by_itt); nothing (no c) */
    THEN_SET,        /* ABORT TASK SET, CLEAR TASK SET */
    THEN_LUN_RESET,  /* LOGICAL UNIT RESET */
    THEN_WARM_RESET, /* TARGET WARM RESET */
    THEN_COLD_RESET, /* TARGET COLD RESET */
};

struct abort_fanout {
    uint64_t lun; /* ABORT TASK: the LUN as the TMF's initiator numbers it */
    /* The LU whose tasks are aborted (NULL: every LU of the target), held (scsi_lun_user_get)
     * until the fan-out is freed; for ABORT TASK, the LU of the task aborted, if it had one.
     * Each host may know it by another number, or none any more (host LUN maps). */
    struct scsi_lun *lu;
    uint32_t before_cmdsn;
    enum fanout_then then;
    struct scsi_join *join; /* no answer here (PREEMPT AND ABORT): ended once all legs ran */
    /* ABORT TASK: the task with ITT rtt, and the answer given on the TMF's connection */
    bool by_itt;
    uint32_t rtt;
    uint16_t tmf_cid;
    struct iscsi_conn *c;  /* the TMF's connection (a reference held), or NULL: no answer */
    struct iscsi_bhs req;  /* the TMF Request */
    uint8_t if_absent;     /* §11.5.1 b/c, from the CmdSN window when the TMF arrived */
    bool reassign;         /* TASK REASSIGN: only look for the task, abort nothing */
    bool then_orphan;      /* ABORT TASK: none of them had it, the orphan with the ITT is it */
    atomic_bool seen;      /* ... a connection had a task with the ITT, abortable or not */
    atomic_bool live;      /* ... a live connection has it (still allegiant) */
    atomic_bool aborted;   /* a connection had the task and aborted it */
    atomic_bool wrong_lun; /* a connection had the ITT, on another LUN than the TMF's */
    struct reactor_msg answer_msg;
    atomic_uint legs_left; /* legs still running, + 1 while they are posted */
    unsigned nlegs, cap;
    struct abort_leg leg[];
};

/* Which sessions a fan-out reaches: < 0 not this one; else use_cmdsn for its legs. */
typedef int (*fanout_match)(const struct iscsi_session *s, const void *arg);

/* A fan-out with one leg per connection, skip excepted, of every session match() takes; NULL
 * out of memory. The connections are counted, then the legs allocated and filled in a second
 * walk with the table held: a connection that joined a session in between (logging in during
 * the TMF, so carrying none of the tasks concerned) is left out. */
static struct abort_fanout *fanout_build(struct iscsi_server *srv, fanout_match match,
                                         const void *arg, const struct iscsi_conn *skip)
{
    unsigned n = 0;
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s || match(s, arg) < 0)
            continue;
        pthread_mutex_lock(&s->lock);
        for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next)
            n += list_entry(ln, struct iscsi_conn, session_node) != skip;
        pthread_mutex_unlock(&s->lock);
    }
    struct abort_fanout *f = calloc(1, sizeof(*f) + n * sizeof(f->leg[0]));
    for (unsigned i = 1; f && i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        int use_cmdsn = s ? match(s, arg) : -1;
        if (use_cmdsn < 0)
            continue;
        pthread_mutex_lock(&s->lock);
        for (struct list_node *ln = s->conns.next; ln != &s->conns && f->nlegs < n; ln = ln->next) {
            struct iscsi_conn *c = list_entry(ln, struct iscsi_conn, session_node);
            if (c == skip)
                continue;
            conn_get(c); /* c is in the session: alive */
            f->leg[f->nlegs++] = (struct abort_leg){.f = f, .c = c, .use_cmdsn = use_cmdsn};
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
    if (f)
        atomic_init(&f->legs_left, f->nlegs + 1);
    return f;
}

static void fanout_free(struct abort_fanout *f)
{
    if (f->lu)
        scsi_lun_user_put(f->lu);
    free(f);
}

/* On the TMF's connection's reactor, once every connection has looked: answer, free the
 * fan-out and drop its reference on the connection (never the last one: the caller holds
 * another). Returns the status of queuing the answer, for the caller to pass up or act on. */
static int reassign_answer(struct iscsi_conn *c, const struct iscsi_bhs *req, bool live);
static int abort_orphan(struct iscsi_conn *c, const struct iscsi_bhs *req, uint32_t rtt);
static int reset_respond(struct iscsi_conn *c, const struct iscsi_bhs *req, struct scsi_lun *lu);

/* A task set's fan-out is done: its reset, if it is one, then the answer once quiet. */
static int set_respond(struct abort_fanout *f)
{
    struct iscsi_conn *c = f->c;
    int rc = ISCSI_OK;
    if (c->dead || c->phase != CONN_FFP) {
        /* closed or logged out while the legs ran (its session, and so the nexus, may be gone
         * with it): nobody to answer, and a reset is not done; the tasks are aborted, and the
         * initiator, never told "complete", starts its recovery again */
    } else if (f->then == THEN_SET) {
        rc = tmf_answer_quiet(c, &f->req, ISCSI_TMF_RSP_COMPLETE, f->lu, false, false);
    } else if (f->then == THEN_COLD_RESET) {
        /* a cold reset ends every connection here at once: the other gateways are told, and
         * the answer does not wait for them */
        scsi_target_reset(c->session->node->scsi, c->session->nexus, true);
        session_close_conns_where(c->srv, other_conn_of_node, c, "target cold reset");
        rc = tmf_answer_quiet(c, &f->req, ISCSI_TMF_RSP_COMPLETE, NULL, true, true);
    } else {
        rc = reset_respond(c, &f->req, f->then == THEN_LUN_RESET ? f->lu : NULL);
    }
    fanout_free(f);
    conn_put(c);
    return rc;
}

static int abort_task_respond(struct abort_fanout *f)
{
    struct iscsi_conn *c = f->c;
    uint8_t rsp = f->if_absent;
    int rc = ISCSI_OK;
    if (f->then != THEN_BY_ITT)
        return set_respond(f);
    if (f->reassign) {
        if (!c->dead && c->phase == CONN_FFP)
            rc = reassign_answer(c, &f->req, atomic_load(&f->live));
        fanout_free(f);
        conn_put(c);
        return rc;
    }
    if (atomic_load(&f->aborted))
        rsp = ISCSI_TMF_RSP_COMPLETE;
    else if (atomic_load(&f->wrong_lun))
        rsp = ISCSI_TMF_RSP_NO_TASK;
    bool found = atomic_load(&f->aborted) || atomic_load(&f->wrong_lun) || atomic_load(&f->seen);
    /* the other connections answered asynchronously: this one may have closed or logged out */
    if (!c->dead && c->phase == CONN_FFP)
        rc = f->then_orphan && !found ? abort_orphan(c, &f->req, f->rtt)
                                      : tmf_answer_quiet(c, &f->req, rsp, f->lu, false, false);
    fanout_free(f);
    conn_put(c);
    return rc;
}

/* The answer by message, outside any handler of the connection: a failure to queue it closes
 * the connection here. */
static void abort_task_answer(void *arg)
{
    struct abort_fanout *f = arg;
    struct iscsi_conn *c = f->c;
    conn_get(c);
    conn_fail(c, abort_task_respond(f));
    conn_put(c);
}

/* A leg is done. The last one answers ABORT TASK: right here when on the TMF's connection's
 * reactor (the status of queuing the answer is returned), else by message. */
static int fanout_leg_done(struct abort_fanout *f)
{
    if (atomic_fetch_sub(&f->legs_left, 1) != 1)
        return ISCSI_OK;
    if (!f->c) {
        if (f->join)
            scsi_join_done(f->join); /* every task concerned is marked aborted */
        fanout_free(f);
        return ISCSI_OK;
    }
    if (reactor_self() == f->c->reactor)
        return abort_task_respond(f);
    reactor_post(f->c->reactor, &f->answer_msg, abort_task_answer, f);
    return ISCSI_OK;
}

/* On the reactor of the leg's connection. */
static void abort_leg_run(void *arg)
{
    struct abort_leg *l = arg;
    struct abort_fanout *f = l->f;
    if (l->c->dead) {
        /* its tasks went with it */
    } else if (f->reassign) {
        /* a connection logged out for recovery, or announced as dropped, is not allegiant any
         * more: its tasks become orphans when it closes */
        if (!l->c->recovery_logout && !l->c->async_drop && cmd_task_lookup(l->c, f->rtt))
            atomic_store(&f->live, true);
    } else if (!f->by_itt) {
        abort_conn_tasks(l->c, f->lu, f->before_cmdsn, l->use_cmdsn);
    } else {
        struct iscsi_task *t = conn_abortable_task(l->c, f->rtt);
        struct scsi_lun *task_lu = t ? t->scsi.lu : NULL;
        if (t && abort_named_task(t, f->lun, f->tmf_cid) == ISCSI_TMF_RSP_COMPLETE) {
            /* only one leg has the ITT; the answer waits on the LU the task holds (the last
             * leg's atomic_fetch_sub publishes f->lu to the answering thread) */
            if (task_lu) {
                scsi_lun_user_get(task_lu);
                f->lu = task_lu;
            }
            atomic_store(&f->aborted, true);
        } else if (t)
            atomic_store(&f->wrong_lun, true);
        else if ((t = conn_arriving_task(l->c, f->rtt)) != NULL) {
            if (abort_arriving_task(l->c, t, f->lun) == ISCSI_TMF_RSP_COMPLETE) {
                if (t->scsi.lu) { /* as above: the answer waits on the LU it holds */
                    scsi_lun_user_get(t->scsi.lu);
                    f->lu = t->scsi.lu;
                }
                atomic_store(&f->aborted, true);
            } else {
                atomic_store(&f->wrong_lun, true);
            }
        } else if (cmd_task_lookup(l->c, f->rtt))
            atomic_store(&f->seen, true); /* answered meanwhile: newer than any orphan */
    }
    conn_put(l->c);
    /* Answered here if the TMF's connection shares this reactor: outside its handlers, so a
     * failure to queue the answer closes it here. (Read before the leg is done: f and its
     * reference on the connection live until then.) */
    struct iscsi_conn *tmf_conn = f->c;
    bool here = tmf_conn && reactor_self() == tmf_conn->reactor;
    if (here)
        conn_get(tmf_conn);
    int rc = fanout_leg_done(f);
    if (here) {
        conn_fail(tmf_conn, rc);
        conn_put(tmf_conn);
    }
}

/* Returns the status of an ABORT TASK answered right here (nobody else to ask). */
static int fanout_send(struct abort_fanout *f)
{
    for (unsigned i = 0; i < f->nlegs; i++) {
        struct abort_leg *l = &f->leg[i];
        reactor_post(l->c->reactor, &l->msg, abort_leg_run, l);
    }
    return fanout_leg_done(f); /* finishes right here when there was nobody to ask */
}

struct scope {
    const struct iscsi_session *own;
    bool whole_target;
    bool use_cmdsn;
};

static int scope_match(const struct iscsi_session *s, const void *arg)
{
    const struct scope *sc = arg;
    if (s != sc->own && (!sc->whole_target || s->node != sc->own->node))
        return -1;
    return s == sc->own && sc->use_cmdsn;
}

/* The fan-out that aborts matching tasks on every other connection: of this session only
 * (ABORT TASK SET, the I_T nexus's tasks), or of every session of the target (CLEAR TASK SET,
 * resets: the task set is shared by all nexuses, SAM-5 §8.3); ERL 2 orphans of those sessions
 * are aborted here. Sent by the caller once it has aborted its own connection's, and answered
 * (then) once every leg has run. NULL (out of memory): nothing is done. */
static struct abort_fanout *set_fanout(struct iscsi_conn *self, const struct iscsi_bhs *req,
                                       enum fanout_then then, bool whole_target,
                                       struct scsi_lun *lu, uint32_t before_cmdsn, bool use_cmdsn)
{
    struct scope sc = {self->session, whole_target, use_cmdsn};
    struct abort_fanout *f = fanout_build(self->srv, scope_match, &sc, self);
    if (!f)
        return NULL;
    orphans_abort(self->srv, scope_match, &sc, lu, before_cmdsn);
    if (lu) /* until answered: a LUN unmapped or detached meanwhile is still the one reset */
        scsi_lun_user_get(lu);
    f->lu = lu;
    f->before_cmdsn = before_cmdsn;
    f->then = then;
    f->req = *req;
    conn_get(self);
    f->c = self;
    return f;
}

/* The task ABORT TASK names is identified by its ITT within the session, whatever connection
 * carries it (RFC 7143 §11.5.1): an MC/S initiator may send the TMF on another connection than
 * the task's. A task not on the TMF's own connection is looked for on every other connection
 * of the session, and the last of them to finish hands the answer back: the TMF Response
 * leaves only once the task is aborted, or known to be on no connection. */
static int abort_task_other_conns(struct iscsi_conn *self, const struct iscsi_bhs *req,
                                  uint32_t rtt, uint64_t lun, uint8_t if_absent, bool then_orphan)
{
    struct scope sc = {self->session, false, false};
    struct abort_fanout *f = fanout_build(self->srv, scope_match, &sc, self);
    if (!f)
        return tmf_respond(self, req, ISCSI_TMF_RSP_REJECTED);
    f->lun = lun;
    f->by_itt = true;
    f->rtt = rtt;
    f->tmf_cid = self->cid;
    f->req = *req;
    f->if_absent = if_absent;
    f->then_orphan = then_orphan;
    conn_get(self);
    f->c = self;
    return fanout_send(f);
}

/* ---------------- TASK REASSIGN (ERL 2) ---------------- */

/* ABORT TASK for an orphan, on another connection than its lost one (RFC 7143 §11.5.1): the
 * request gives the task a new allegiance and aborts it; a status issued and not acknowledged
 * is issued again before the Task Management Response. One the store still has is aborted
 * when it arrives. */
static int abort_orphan(struct iscsi_conn *c, const struct iscsi_bhs *req, uint32_t rtt)
{
    struct iscsi_task *t = NULL;
    uint16_t cid = 0;
    enum orphan_claim claim = orphans_claim(c->session, rtt, c, &t, &cid);
    if (claim != CLAIM_NONE)
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: ABORT TASK ITT 0x%08x, an orphan of CID %u", c->peer,
                         rtt, cid);
    /* the LU it holds; one it lets go of now is freed only after this loop turn */
    struct scsi_lun *lu = claim != CLAIM_NONE ? t->scsi.lu : NULL;
    int rc = ISCSI_OK;
    if (claim == CLAIM_NOW) {
        rc = cmd_task_adopt_abort(c, t);
    } else if (claim == CLAIM_LATER) {
        t->abort_on_arrival = true; /* read on this thread, by cmd_orphan_arrive */
        scsi_task_abort(&t->scsi);  /* in the store: the answer waits for it */
    }
    if (rc < 0)
        return rc;
    return tmf_answer_quiet(c, req,
                            claim == CLAIM_NONE ? ISCSI_TMF_RSP_NO_TASK : ISCSI_TMF_RSP_COMPLETE,
                            lu, false, false);
}

/* RFC 7143 §11.5.1, §7.2.2: the task named by RTT moves to this connection if it is an orphan
 * (its connection failed, was logged out for recovery or reinstated): "function complete",
 * and the task resumes here after the response. One a live connection still has is "task
 * still allegiant"; none at all, "task does not exist" (a command never received, or
 * discarded unacknowledged with its connection: the initiator retries it). */
static int reassign_answer(struct iscsi_conn *c, const struct iscsi_bhs *req, bool live)
{
    uint32_t rtt = bhs_get32(req, BHS_RTT);
    uint32_t exp_datasn = bhs_get32(req, BHS_TMF_EXPDATASN);
    struct iscsi_task *t = NULL;
    uint16_t cid = 0;
    enum orphan_claim claim = orphans_claim(c->session, rtt, c, &t, &cid);
    if (claim == CLAIM_NONE) {
        uint8_t rsp = live ? ISCSI_TMF_RSP_TASK_ALLEGIANT : ISCSI_TMF_RSP_NO_TASK;
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: TASK REASSIGN ITT 0x%08x: %s", c->peer, rtt,
                         live ? "task still allegiant" : "task does not exist");
        return tmf_respond(c, req, rsp);
    }
    /* §11.6: the new allegiance takes effect only after the response is issued */
    int rc = tmf_respond(c, req, ISCSI_TMF_RSP_COMPLETE);
    if (claim == CLAIM_LATER) {
        CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                         "%s: ITT 0x%08x reassigned from CID %u to CID %u (moves once the store "
                         "completes it)",
                         c->peer, rtt, cid, c->cid);
        return rc;
    }
    int rc2 = cmd_task_adopt(c, t, exp_datasn); /* even if the response failed: c owns it */
    return rc < 0 ? rc : rc2;
}

static int task_reassign(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
    uint32_t rtt = bhs_get32(req, BHS_RTT);
    if (cmd_task_lookup(c, rtt)) /* allegiant to this very connection */
        return tmf_respond(c, req, ISCSI_TMF_RSP_TASK_ALLEGIANT);
    /* Every other connection of the session is asked whether it still has the task, even when
     * an orphan has the ITT. Their answers come back after anything posted to them before (the
     * close of a reinstated connection, or of one a Logout removed for recovery): by then that
     * connection's tasks are orphans too, and the answer takes the newest. Claimed at once, an
     * older orphan with the ITT (a task whose status the initiator had) would be taken for the
     * newer task still on the closing connection, and answer it with the old status. */
    struct scope sc = {c->session, false, false};
    struct abort_fanout *f = fanout_build(c->srv, scope_match, &sc, c);
    if (!f)
        return tmf_respond(c, req, ISCSI_TMF_RSP_REJECTED);
    if (!f->nlegs) {
        fanout_free(f);
        return reassign_answer(c, req, false);
    }
    f->reassign = true;
    f->by_itt = true;
    f->rtt = rtt;
    f->req = *req;
    conn_get(c);
    f->c = c;
    return fanout_send(f);
}

/* ---------------- resets that other gateways must hear of first ---------------- */

/* A reset of a LUN that other gateways export too (an RBD image) is answered once they have
 * raised its unit attention for their own nexuses (the SCSI core tells them through the
 * cluster): the initiator, told "function complete", may at once send a command down another
 * path, and must meet the UA there (libiscsi's MultipathIO.Reset checks exactly that). */
struct tmf_later {
    struct iscsi_conn *c; /* a reference held */
    struct iscsi_bhs req;
    struct scsi_lun *lu; /* held until answered; NULL: the target's */
};

/* On the TMF's connection's reactor, outside its handlers: a failure to queue the answer
 * closes the connection here. */
static void tmf_later_answer(void *arg)
{
    struct tmf_later *w = arg;
    struct iscsi_conn *c = w->c;
    int rc = ISCSI_OK;
    if (!c->dead && c->phase == CONN_FFP) /* it may have closed or logged out meanwhile */
        rc = tmf_answer_quiet(c, &w->req, ISCSI_TMF_RSP_COMPLETE, w->lu, !w->lu, false);
    if (w->lu)
        scsi_lun_user_put(w->lu);
    conn_fail(c, rc);
    conn_put(c);
    free(w);
}

/* The reset of lu (NULL: TARGET WARM RESET), its tasks aborted already, and its answer once
 * the other gateways have it and the aborted tasks have left the store. lu is the one the TMF
 * named when it came, held by the caller: reset even if its host's map has changed since. */
static int reset_respond(struct iscsi_conn *c, const struct iscsi_bhs *req, struct scsi_lun *lu)
{
    struct scsi_nexus *n = c->session->nexus;
    struct scsi_target *tgt = c->session->node->scsi;
    struct tmf_later *w = calloc(1, sizeof(*w));
    if (!w) { /* the reset still holds here; the others are told without waiting */
        if (lu)
            scsi_lun_reset(lu, n);
        else
            scsi_target_reset(tgt, n, false);
        return tmf_answer_quiet(c, req, ISCSI_TMF_RSP_COMPLETE, lu, !lu, false);
    }
    conn_get(c);
    if (lu)
        scsi_lun_user_get(lu);
    *w = (struct tmf_later){.c = c, .req = *req, .lu = lu};
    bool later = lu ? scsi_lun_reset_wait(lu, n, tmf_later_answer, w)
                    : scsi_target_reset_wait(tgt, n, false, tmf_later_answer, w);
    if (later)
        return ISCSI_OK;
    conn_put(c); /* never the last reference: the caller holds one */
    if (lu)
        scsi_lun_user_put(lu); /* the caller still holds it */
    free(w);
    return tmf_answer_quiet(c, req, ISCSI_TMF_RSP_COMPLETE, lu, !lu, false);
}

/* Whether this target does a TARGET WARM / COLD RESET an initiator asks for (target-warm-reset,
 * target-cold-reset). Either reaches every initiator of the target: all their tasks aborted, a
 * unit attention on every LUN, and for a cold one all their connections closed (§11.5.1). So
 * one the target's configuration does not allow is answered "function rejected" (§11.6.1: the
 * function exists here and the initiator is allowed to ask; this target declines to do it),
 * with nothing aborted, and the initiator falls back to what only touches its own nexus (a
 * LOGICAL UNIT RESET of its LUNs, or a new session). Logged once a session. */
static bool target_reset_allowed(struct iscsi_conn *c, bool cold)
{
    struct iscsi_session *s = c->session;
    if (cold ? s->node->cold_reset : s->node->warm_reset)
        return true;
    if (!atomic_exchange(&s->reset_refusal_logged, true))
        LOG_WARN("%s: TARGET %s RESET from %s refused (target %s: target-%s-reset = no); "
                 "answered function rejected",
                 c->peer, cold ? "COLD" : "WARM", s->initiator_name, s->node->name,
                 cold ? "cold" : "warm");
    return false;
}

/* ABORT TASK (RFC 7143 §11.5.1): the task named by its ITT on this connection, else on the
 * session's other connections or, at ERL 2, among its orphans. win_exp/win_max: the CmdSN window
 * as it was when the TMF arrived. */
static int tmf_abort_task(struct iscsi_conn *c, const struct iscsi_bhs *req, uint64_t lun,
                          uint32_t cmdsn, uint32_t win_exp, uint32_t win_max)
{
    struct iscsi_session *s = c->session;
    uint32_t rtt = bhs_get32(req, BHS_RTT);
    struct iscsi_task *t = conn_abortable_task(c, rtt);
    if (t) { /* the common case: the task is on this connection */
        /* the LU it holds, whatever number its host knows that by now; one it lets go of
         * now is freed only after this loop turn */
        struct scsi_lun *lu = t->scsi.lu;
        return tmf_answer_quiet(c, req, abort_named_task(t, lun, c->cid), lu, false, false);
    }
    t = conn_arriving_task(c, rtt);
    if (t) { /* reassigned here, still in the store */
        struct scsi_lun *lu = t->scsi.lu;
        return tmf_answer_quiet(c, req, abort_arriving_task(c, t, lun), lu, false, false);
    }
    /* ERL 2, an orphan has the ITT: the other connections look first, and one that has a
     * task with the ITT aborts it. It is the newer: a connection closing behind the
     * request (reinstated, removed for recovery) may still hold it, while the orphan is
     * one whose status the initiator had before it gave the ITT to a new command. Only if
     * none has it, answered or not, is the orphan aborted (abort_orphan, from
     * abort_task_respond); one here, answered, is newer too. */
    bool orphans_too = conn_erl(c) >= 2 && !cmd_task_lookup(c, rtt);
    if (orphans_too && orphans_has_itt(s, rtt))
        return abort_task_other_conns(c, req, rtt, lun, ISCSI_TMF_RSP_NO_TASK, true);
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
    /* ERL 2, no orphan has the ITT yet: the orphans are still looked at when the answer
     * is given, once every other connection has looked. A connection closing behind a
     * Logout for recovery (or a reinstatement) posted before this TMF makes its tasks
     * orphans before its leg runs: decided here, at arrival, the task would be "not
     * there" and left an orphan until Time2Retain. Not when RefCmdSN is inside the
     * window: an orphan's command was acknowledged (its CmdSN is below ExpCmdSN), so the
     * one named is another, considered received and aborted (§11.5.1 b). */
    return abort_task_other_conns(c, req, rtt, lun,
                                  in_window ? ISCSI_TMF_RSP_COMPLETE : ISCSI_TMF_RSP_NO_TASK,
                                  orphans_too && !in_window);
}

/* TARGET WARM RESET, TARGET COLD RESET (RFC 7143 §11.5.1): every task of the target ends, and
 * each of its logical units is reset; a cold reset also drops every connection to it. */
static int tmf_target_reset(struct iscsi_conn *c, const struct iscsi_bhs *req, bool cold)
{
    struct scsi_target *tgt = c->session->node->scsi;
    if (!target_reset_allowed(c, cold))
        return tmf_respond(c, req, ISCSI_TMF_RSP_REJECTED);
    struct abort_fanout *f =
        set_fanout(c, req, cold ? THEN_COLD_RESET : THEN_WARM_RESET, true, NULL, 0, false);
    if (!f)
        return tmf_respond(c, req, ISCSI_TMF_RSP_REJECTED);
    abort_conn_tasks(c, NULL, 0, false);
    /* A target reset resets each of its logical units (RFC 7143 §11.5.1): one on each LUN
     * (not held; a LUN detached meanwhile is freed only after this turn) */
    for (uint64_t l = 0; l < __atomic_load_n(&tgt->nluns, __ATOMIC_ACQUIRE); l++) {
        struct scsi_lun *each = scsi_target_lun(tgt, l);
        if (each)
            iostats_event(iostats_shard(scsi_lun_stats(each), c->rid), IOSTATS_RESET);
    }
    iostats_event(c->st_session, IOSTATS_RESET);
    iostats_event(c->st_portal, IOSTATS_RESET);
    CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: TARGET %s RESET", c->peer, cold ? "COLD" : "WARM");
    return fanout_send(f); /* then reset_respond, or for a cold one set_respond */
}

int tmf_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint8_t fn = req->b[BHS_TMF_FUNCTION] & 0x7f;
    uint32_t cmdsn = bhs_get32(req, BHS_CMDSN);
    bool immediate = bhs_immediate(req);
    if (!(req->b[1] & ISCSI_FLAG_FINAL)) {
        return conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    struct iscsi_session *s = c->session;
    uint32_t win_exp, win_max; /* the window as it was when the TMF arrived */
    session_window(s, &win_exp, &win_max);
    if (!immediate)
        session_consume_cmdsn(s, cmdsn);
    uint64_t lun = scsi_lun_from_wire(req->b + BHS_LUN);
    struct scsi_lun *lu = scsi_nexus_lun(s->nexus, lun, NULL); /* by the host's number */

    switch (fn) {
    case ISCSI_TMF_ABORT_TASK:
        return tmf_abort_task(c, req, lun, cmdsn, win_exp, win_max);
    case ISCSI_TMF_ABORT_TASK_SET:
    case ISCSI_TMF_CLEAR_TASK_SET: {
        if (!lu) {
            return tmf_respond(c, req, ISCSI_TMF_RSP_NO_LUN);
        }
        struct abort_fanout *f =
            set_fanout(c, req, THEN_SET, fn == ISCSI_TMF_CLEAR_TASK_SET, lu, cmdsn, true);
        if (!f)
            return tmf_respond(c, req, ISCSI_TMF_RSP_REJECTED);
        unsigned n = abort_conn_tasks(c, lu, cmdsn, true);
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: %s on LUN %llu: %u task(s) aborted", c->peer,
                         fn == ISCSI_TMF_ABORT_TASK_SET ? "ABORT TASK SET" : "CLEAR TASK SET",
                         (unsigned long long)lun, n);
        if (fn == ISCSI_TMF_CLEAR_TASK_SET)
            scsi_lun_tasks_cleared(lu, s->nexus);
        return fanout_send(f);
    }
    case ISCSI_TMF_LOGICAL_UNIT_RESET:
        if (!lu) {
            return tmf_respond(c, req, ISCSI_TMF_RSP_NO_LUN);
        }
        struct abort_fanout *f = set_fanout(c, req, THEN_LUN_RESET, true, lu, 0, false);
        if (!f)
            return tmf_respond(c, req, ISCSI_TMF_RSP_REJECTED);
        abort_conn_tasks(c, lu, 0, false);
        /* the fan-out holds lu until the reset is answered */
        iostats_event(iostats_shard(scsi_lun_stats(lu), c->rid), IOSTATS_RESET);
        iostats_event(c->st_session, IOSTATS_RESET);
        iostats_event(c->st_portal, IOSTATS_RESET);
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: LOGICAL UNIT RESET on LUN %llu", c->peer,
                         (unsigned long long)lun);
        return fanout_send(f); /* then reset_respond */
    case ISCSI_TMF_TARGET_WARM_RESET:
    case ISCSI_TMF_TARGET_COLD_RESET:
        return tmf_target_reset(c, req, fn == ISCSI_TMF_TARGET_COLD_RESET);
    case ISCSI_TMF_TASK_REASSIGN:
        /* §7.2.2: below ERL 2 allegiance reassignment is not supported */
        if (conn_erl(c) < 2)
            return tmf_respond(c, req, ISCSI_TMF_RSP_NO_REASSIGN);
        return task_reassign(c, req);
    case ISCSI_TMF_CLEAR_ACA:
    default:
        return tmf_respond(c, req, ISCSI_TMF_RSP_NOT_SUPPORTED);
    }
}

/* PREEMPT AND ABORT (SPC-4 §5.13.11.2.5): the SCSI core asks for the tasks of a preempted
 * nexus on one LUN to be aborted, as ABORT TASK SET would, on every connection of every
 * session of that nexus. */
static int nexus_match(const struct iscsi_session *s, const void *arg)
{
    return s->nexus == arg ? 0 : -1;
}

static bool nexus_conn(const struct iscsi_session *s, const struct iscsi_conn *c, const void *arg)
{
    (void)c;
    return s->nexus == arg;
}

void iscsi_abort_nexus_tasks(struct scsi_target *t, struct scsi_nexus *n, struct scsi_lun *lu,
                             struct scsi_join *join)
{
    struct iscsi_server *srv = t->transport_ctx;
    /* by the LU its tasks hold: its host may know lu by another number now, or by none, and
     * its tasks there must end all the same */
    orphans_abort(srv, nexus_match, n, lu, 0); /* ERL 2: waiting for reassignment */
    struct abort_fanout *f = fanout_build(srv, nexus_match, n, NULL);
    if (!f) {
        /* The reservation is preempted already and the tasks must not run on: closing the
         * nexus's connections ends every task they carry (ERL 0, RFC 7143 §7.1.5). */
        LOG_WARN("PREEMPT AND ABORT: out of memory, closing the preempted nexus's connections");
        session_close_conns_where(srv, nexus_conn, n, "PREEMPT AND ABORT (out of memory)");
        return;
    }
    scsi_lun_user_get(lu); /* until the last leg has run */
    f->lu = lu;
    f->join = join;
    if (join)
        scsi_join_add(join); /* ended by the last leg */
    (void)fanout_send(f);    /* no answer to give */
}
