/* ErrorRecoveryLevel 2 on the target: the tasks of a connection that failed, was logged out
 * "for recovery" or was reinstated outlive it (RFC 7143 §7.2.2, §11.14.1 reason 2, §6.3.4) in
 * an orphan group of their session, until TASK REASSIGN moves each to another connection
 * (tmf.c; the resuming is at the end of this file) or Time2Wait + Time2Retain pass and they end
 * (§11.14.5 c, §11.15.2). One group per connection: its timer runs on the dead connection's
 * reactor, and everything in it is touched under the session's lock only. */
#include <assert.h>
#include <stdlib.h>

#include "iscsi/conn.h"
#include "iscsi/dataout.h"
#include "iscsi/exec.h"
#include "iscsi/orphan.h"
#include "iscsi/response.h"
#include "iscsi/session.h"
#include "iscsi/task.h"
#include "reactor/reactor.h"
#include "util/log.h"

struct iscsi_orphans {
    struct iscsi_session *s; /* a reference */
    uint16_t cid;
    unsigned ntasks;        /* orphaned at the start, for the log */
    struct list_node tasks; /* the tasks still waiting, by their node (s->lock) */
    struct list_node node;  /* s->orphan_groups (s->lock) */
    struct reactor *r;      /* the dead connection's: the timer and the expiry run there */
    struct reactor_timer timer;
    struct reactor_msg expire_msg;
    bool expire_posted; /* (s->lock) the expiry comes by expire_msg, not by the timer */
    /* (s->lock) a later connection with this CID joined the session: a Logout or a login
     * naming the CID speaks of that one (StatSN counts per connection, §4.2.2.2), never of
     * this group's, whose unacknowledged answers stay for TASK REASSIGN */
    bool superseded;
};

struct iscsi_orphans *orphans_new(struct iscsi_conn *c)
{
    assert(c->session);
    struct iscsi_orphans *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->s = c->session;
    session_get(g->s);
    g->cid = c->cid;
    g->r = c->reactor;
    list_init(&g->tasks);
    list_init(&g->node);
    return g;
}

void orphans_add_locked(struct iscsi_orphans *g, struct iscsi_task *t)
{
    list_add_tail(&g->tasks, &t->node);
    t->orphan_cid = g->cid;
    t->orphan_sess = g->s;
    session_get(g->s); /* the task's own: it may leave the group before it ends */
    g->ntasks++;
}

/* With the session lock held: a task ends unreassigned; what it counted in the CmdSN window
 * is given back (an answered one counted nothing any more). */
static void orphan_uncount_locked(struct iscsi_session *s, const struct iscsi_task *t)
{
    if (t->aborted || task_answered(t))
        return;
    if (t->cmdsn_pending)
        return; /* never entered the window */
    if (s->in_flight)
        s->in_flight--;
}

/* The LUNs of the unanswered tasks a group ended, for the unit attention (§11.14.5). */
#define CLEARED_LUNS_MAX 16
struct cleared_luns {
    uint64_t lun[CLEARED_LUNS_MAX];
    unsigned n;
    bool overflow; /* more LUNs than that: every LUN of the target gets it */
};

static void cleared_add(struct cleared_luns *cl, const struct iscsi_task *t)
{
    if (task_answered(t) || t->aborted)
        return; /* answered: the initiator has its status, nothing was cleared */
    for (unsigned i = 0; i < cl->n; i++)
        if (cl->lun[i] == t->scsi.lun)
            return;
    if (cl->n == CLEARED_LUNS_MAX)
        cl->overflow = true;
    else
        cl->lun[cl->n++] = t->scsi.lun;
}

/* RFC 7143 §11.14.5 c: tasks of a connection logged out for recovery (or lost, §11.14.5 b)
 * that no TASK REASSIGN took within Time2Wait + Time2Retain are terminated, and the next
 * command of the nexus on each of their LUNs gets unit attention 47h/7Fh SOME COMMANDS
 * CLEARED BY ISCSI PROTOCOL EVENT -- when the session goes on: with it, the nexus ends. */
static void cleared_report(struct iscsi_session *s, const struct cleared_luns *cl)
{
    if (cl->overflow) {
        uint32_t nluns = __atomic_load_n(&s->node->scsi->nluns, __ATOMIC_ACQUIRE);
        for (uint64_t lun = 0; lun < nluns; lun++)
            scsi_nexus_tasks_terminated(s->nexus, lun);
        return;
    }
    for (unsigned i = 0; i < cl->n; i++)
        scsi_nexus_tasks_terminated(s->nexus, cl->lun[i]);
}

/* The group ends: tasks still in it are terminated (§11.14.5 c) and freed, those the store
 * still has are marked to be freed by their completion. The session ends with it if it has no
 * connection and no other group left. `by_msg`: the expiry asked for by expire_msg; the timer
 * leaves a group to that message once it is posted. On g->r. */
static void orphans_expire(struct iscsi_orphans *g, bool by_msg)
{
    struct iscsi_session *s = g->s;
    struct list_node dead;
    list_init(&dead);
    unsigned n = 0;
    struct cleared_luns cl = {.n = 0};
    pthread_mutex_lock(&s->lock);
    if (!by_msg && g->expire_posted) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    list_del(&g->node);
    struct list_node *ln;
    while ((ln = list_pop(&g->tasks)) != NULL) {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        n++;
        cleared_add(&cl, t);
        if (t->orphan == ORPHAN_BUSY) {
            t->orphan_expired = true; /* cmd_orphan_store_done() frees it */
            continue;
        }
        orphan_uncount_locked(s, t);
        list_add_tail(&dead, &t->node);
    }
    bool loss, end = session_unused_locked(s, &loss);
    pthread_mutex_unlock(&s->lock);
    while ((ln = list_pop(&dead)) != NULL) {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        assert(t->refs == 1 && !t->conn); /* the group's, and nobody else's */
        task_put(t);
    }
    if (n)
        LOG_INFO("session TSIH %u of %s: %u task(s) of CID %u %s: terminated", s->tsih,
                 s->initiator_name, n, g->cid,
                 by_msg ? "ended with the session or the daemon"
                        : "not reassigned within Time2Wait + Time2Retain");
    if (end)
        session_end(s, loss);
    else if (!by_msg)
        cleared_report(s, &cl); /* by_msg: the session or the daemon is ending */
    session_put(s);
    free(g);
}

static void orphans_timer_fire(void *arg)
{
    orphans_expire(arg, false);
}

static void orphans_expire_msg(void *arg)
{
    struct iscsi_orphans *g = arg;
    reactor_timer_stop(g->r, &g->timer);
    orphans_expire(g, true);
}

/* With s->lock: the answered tasks of g an ExpStatSN covers move to done (freed by the caller
 * once the lock is let go: freeing a task takes other locks). Their number. */
static unsigned group_ack_locked(struct iscsi_orphans *g, uint32_t exp_statsn,
                                 struct list_node *done)
{
    unsigned n = 0;
    struct list_node *ln, *tmp;
    list_for_each_safe(ln, tmp, &g->tasks)
    {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        /* answered (never ORPHAN_BUSY then) and its StatSN acknowledged */
        if (t->state != TASK_RETAINED || !sn_lt(t->statsn, exp_statsn))
            continue;
        list_del(&t->node);
        list_add_tail(done, &t->node);
        n++;
    }
    return n;
}

static void free_acked(struct list_node *done)
{
    struct list_node *ln;
    while ((ln = list_pop(done)) != NULL) {
        struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
        assert(t->refs == 1 && !t->conn); /* the group's, and nobody else's */
        task_put(t);
    }
}

void orphans_publish(struct iscsi_orphans *g, struct iscsi_conn *c, uint32_t time2wait,
                     uint32_t time2retain)
{
    struct iscsi_session *s = g->s;
    struct list_node done;
    list_init(&done);
    unsigned acked = 0;
    /* Tasks taken over by another connection meanwhile leave the group; an empty group is
     * kept anyway (its Time2Retain is what a Logout for its CID reports) until it expires.
     * The acknowledgement of a Logout or restart for c is read here, under the lock that
     * session_close_conn_by_cid stores it with: stored before, it ends its answers now;
     * after, that function finds orphans_published and ends them in the group itself. */
    pthread_mutex_lock(&s->lock);
    c->orphans_published = true;
    g->superseded = c->superseded;
    list_add_tail(&s->orphan_groups, &g->node);
    if (atomic_load(&c->logout_acked))
        acked = group_ack_locked(g, atomic_load(&c->logout_exp_statsn), &done);
    pthread_mutex_unlock(&s->lock);
    free_acked(&done);
    if (acked)
        LOG_INFO("session TSIH %u of %s: CID %u: %u answered task(s) acknowledged by a Logout "
                 "or login (ExpStatSN %u): not kept for reassignment",
                 s->tsih, s->initiator_name, g->cid, acked, atomic_load(&c->logout_exp_statsn));
    LOG_INFO("session TSIH %u of %s: CID %u (%s) gone at ErrorRecoveryLevel 2: %u task(s) kept "
             "for reassignment for %u + %u s",
             s->tsih, s->initiator_name, g->cid, c->peer, g->ntasks, time2wait, time2retain);
    reactor_timer_start(g->r, &g->timer, 1000ull * (time2wait + time2retain), orphans_timer_fire,
                        g);
}

void orphans_discard(struct iscsi_orphans *g)
{
    assert(list_empty(&g->tasks));
    session_put(g->s);
    free(g);
}

void orphans_expire_all_locked(struct iscsi_session *s, const struct reactor *only)
{
    for (struct list_node *ln = s->orphan_groups.next; ln != &s->orphan_groups; ln = ln->next) {
        struct iscsi_orphans *g = list_entry(ln, struct iscsi_orphans, node);
        if ((only && g->r != only) || g->expire_posted)
            continue;
        g->expire_posted = true;
        reactor_post(g->r, &g->expire_msg, orphans_expire_msg, g);
    }
}

void orphans_supersede_locked(struct iscsi_session *s, uint16_t cid)
{
    for (struct list_node *ln = s->orphan_groups.next; ln != &s->orphan_groups; ln = ln->next) {
        struct iscsi_orphans *g = list_entry(ln, struct iscsi_orphans, node);
        if (g->cid == cid)
            g->superseded = true;
    }
    for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next) {
        struct iscsi_conn *c = list_entry(ln, struct iscsi_conn, session_node);
        if (c->cid == cid)
            c->superseded = true;
    }
}

bool orphans_cid_known(struct iscsi_session *s, uint16_t cid)
{
    bool known = false;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *ln = s->orphan_groups.next; ln != &s->orphan_groups; ln = ln->next)
        known = known || list_entry(ln, struct iscsi_orphans, node)->cid == cid;
    pthread_mutex_unlock(&s->lock);
    return known;
}

bool orphans_has_itt(struct iscsi_session *s, uint32_t itt)
{
    bool found = false;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *gn = s->orphan_groups.next; gn != &s->orphan_groups && !found;
         gn = gn->next) {
        struct iscsi_orphans *g = list_entry(gn, struct iscsi_orphans, node);
        for (struct list_node *ln = g->tasks.next; ln != &g->tasks && !found; ln = ln->next)
            found = list_entry(ln, struct iscsi_task, node)->itt == itt;
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

unsigned orphans_ack_statsn(struct iscsi_session *s, uint16_t cid, uint32_t exp_statsn)
{
    struct list_node done;
    list_init(&done);
    unsigned n = 0;
    pthread_mutex_lock(&s->lock);
    /* The group of the last connection with that CID only: the Logout (or login) names that
     * one. A group of an earlier one is superseded, whatever the order the groups were
     * published in (a reinstated connection publishes when its close runs, maybe after its
     * successor failed), and StatSN counts per connection (RFC 7143 §4.2.2.2): this ExpStatSN
     * says nothing of what the initiator got there, and its unacknowledged answers must stay
     * for TASK REASSIGN. If the last connection left no group (a Logout "close the
     * connection" ended it), nothing here is its. */
    for (struct list_node *gn = s->orphan_groups.prev; gn != &s->orphan_groups; gn = gn->prev) {
        struct iscsi_orphans *g = list_entry(gn, struct iscsi_orphans, node);
        if (g->cid != cid || g->superseded)
            continue;
        n = group_ack_locked(g, exp_statsn, &done);
        break;
    }
    pthread_mutex_unlock(&s->lock);
    free_acked(&done);
    return n;
}

enum orphan_claim orphans_claim(struct iscsi_session *s, uint32_t itt, struct iscsi_conn *c,
                                struct iscsi_task **out, uint16_t *cid)
{
    enum orphan_claim r = CLAIM_NONE;
    pthread_mutex_lock(&s->lock);
    /* The newest orphan with that ITT: groups and their tasks are added at the tail. An ITT is
     * unique only while its task exists for the initiator (RFC 7143 §11.2.1.8). Of two orphans
     * with one ITT, the older is one whose status the initiator received, without
     * acknowledging it before its connection went, and whose ITT it then gave to a new
     * command. Claiming the older one would answer the new command with the old status. */
    for (struct list_node *gn = s->orphan_groups.prev; gn != &s->orphan_groups && !r;
         gn = gn->prev) {
        struct iscsi_orphans *g = list_entry(gn, struct iscsi_orphans, node);
        for (struct list_node *ln = g->tasks.prev; ln != &g->tasks; ln = ln->prev) {
            struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
            if (t->itt != itt)
                continue;
            list_del(&t->node);
            *cid = g->cid;
            if (t->orphan == ORPHAN_BUSY) {
                /* the store still has it: its completion hands it to c */
                conn_get(c);
                t->claim = c;
                list_add_tail(&c->arriving, &t->node); /* c's own thread: see orphans_claim */
                *out = t; /* for c's thread only: the completion posts it there */
                r = CLAIM_LATER;
            } else {
                t->orphan = ORPHAN_NO;
                t->conn = c;
                *out = t;
                r = CLAIM_NOW;
            }
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

enum orphan_fate orphans_store_done(struct iscsi_task *t)
{
    struct iscsi_session *s = t->orphan_sess;
    enum orphan_fate f;
    pthread_mutex_lock(&s->lock);
    assert(t->orphan == ORPHAN_BUSY);
    if (t->claim) {
        t->orphan = ORPHAN_NO;
        f = FATE_MOVE;
    } else if (t->orphan_expired) {
        t->orphan = ORPHAN_NO;
        /* it counted in flight until the store let go */
        if (s->in_flight)
            s->in_flight--;
        f = FATE_FREE;
    } else {
        /* still in its group, answered by whoever reassigns it: from now on the group's */
        t->orphan = ORPHAN_IDLE;
        t->conn = NULL;
        f = FATE_STAY;
    }
    pthread_mutex_unlock(&s->lock);
    return f;
}

unsigned orphans_abort(struct iscsi_server *srv, orphans_match match, const void *arg,
                       struct scsi_lun *lu, uint32_t before_cmdsn)
{
    struct list_node dead;
    list_init(&dead);
    unsigned n = 0;
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        int use_cmdsn = s ? match(s, arg) : -1;
        if (use_cmdsn < 0)
            continue;
        /* for a task that holds no LU (refused at setup): the number this host knows lu by */
        uint64_t hl =
            lu && s->nexus ? scsi_nexus_host_lun(s->nexus, scsi_lun_id(lu), NULL) : UINT64_MAX;
        pthread_mutex_lock(&s->lock);
        for (struct list_node *gn = s->orphan_groups.next; gn != &s->orphan_groups; gn = gn->next) {
            struct iscsi_orphans *g = list_entry(gn, struct iscsi_orphans, node);
            struct list_node *ln, *tmp;
            list_for_each_safe(ln, tmp, &g->tasks)
            {
                struct iscsi_task *t = list_entry(ln, struct iscsi_task, node);
                if (lu && (t->scsi.lu ? t->scsi.lu != lu : t->scsi.lun != hl))
                    continue;
                if (use_cmdsn && !t->immediate && !sn_lt(t->cmdsn, before_cmdsn))
                    continue;
                list_del(&t->node);
                n++;
                if (t->orphan == ORPHAN_BUSY) {
                    t->orphan_expired = true;  /* its completion frees it */
                    scsi_task_abort(&t->scsi); /* and the TMF's answer waits for that */
                    continue;
                }
                orphan_uncount_locked(s, t);
                list_add_tail(&dead, &t->node);
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
    struct list_node *ln;
    while ((ln = list_pop(&dead)) != NULL)
        task_put(list_entry(ln, struct iscsi_task, node)); /* the group's, the last */
    return n;
}

/* ---------------- ERL 2: a lost connection's tasks, and their reassignment ---------------- */

static void orphan_store_completed(struct iscsi_task *t);

/* ERL 2: the tasks of c become orphans of g, with the session's lock held throughout. Kept:
 * every task the CmdSN window acknowledged (run, running, answered and not acknowledged,
 * taking Data-Out, or released and not yet run). Those still queued for their CmdSN turn
 * leave the CmdSN queue here, under the same lock (§11.14: not acknowledged via ExpCmdSN, so
 * discarded; the caller frees them): left there, a command on another connection could
 * release one a moment later, acknowledging a command nobody will run. Left to the caller as
 * well: aborted ones and a command whose immediate data never came under a data digest (its
 * CmdSN not received). Returns false, keeping nothing, when the session is ending anyway. */
bool orphans_fill(struct iscsi_conn *c, struct iscsi_orphans *g)
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
        task_hash_del(c, t);
        assert(c->buf_bytes >= t->buf_charge);
        c->buf_bytes -= t->buf_charge; /* the charge goes with the task */
        if (t->state == TASK_RETAINED) {
            list_del(&t->retained_node); /* its reference becomes the group's */
            c->nretained--;
        }
        task_queue_leave(t); /* whoever reassigns it is another connection, maybe portal */
        if (t->state == TASK_EXEC) {
            t->orphan = ORPHAN_BUSY; /* completes on c, which the store's reference keeps */
            t->orphan_done = orphan_store_completed;
        } else {
            t->orphan = ORPHAN_IDLE;
            t->conn = NULL;
        }
        orphans_add_locked(g, t);
    }
    pthread_mutex_unlock(&s->lock);
    return true;
}

/* An answered task whose status the initiator did not acknowledge on the dead connection
 * (§7.2.2: "sending (or resending) the status"): a read's Data-In from ExpDataSN, any other's
 * SCSI Response, with a new StatSN of c; then retained on c until acknowledged there. */
static int reassign_answered(struct iscsi_conn *c, struct iscsi_task *t, uint32_t exp_datasn)
{
    uint32_t count = rsp_data_in_count(t);
    int rc;
    /* §11.5.1: ExpDataSN is 0 or at most the last DataSN sent + 1; any other value is
     * ignored (0: the acknowledgement reference unchanged, which is 0 here: this target never
     * asks for DataACK). */
    if (exp_datasn > count)
        exp_datasn = 0;
    if (count && exp_datasn < count)
        rc = rsp_resend_data_in_from(c, t, exp_datasn);
    else
        rc = rsp_status(c, t, RSP_REASSIGN, 0);
    if (rc < 0) {
        task_put(t);
        return rc;
    }
    list_add_tail(&c->retained, &t->retained_node); /* the newest StatSN: order kept */
    c->nretained++;
    rsp_retained_bound(c);
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
    bool room = dataout_r2ts_to_holes(t);
    /* an R2T whose queueing failed as the connection died was never counted */
    t->r2t_outstanding = 0;
    /* the connection died inside the command PDU: its immediate data never came whole
     * (its CmdSN was taken from the header, §7.2.2 still owes the command its data) */
    if (t->imm_pending) {
        room = room && dataout_hole_add(t, 0, t->imm_pending);
        t->imm_pending = 0;
    }
    if (t->unsol_remaining) {
        room = room && dataout_hole_add(t, t->unsol_next_off, t->unsol_remaining);
        t->unsol_remaining = 0;
    }
    if (!room && !t->seq_failed && !t->refused)
        dataout_sequence_failed(c, t,
                                "too many Data-Out ranges to solicit again after "
                                "TASK REASSIGN",
                                ISCSI_RSVD_TAG, 0, 0, 0);
    t->data_out_ms = reactor_now_ms();
    t->stall_rounds = 0; /* a new connection: its own rounds */
    task_hash_add(c, t);
    if (!t->refused && !t->seq_failed && (t->nholes || t->r2t_offset < t->data_expected)) {
        int rc = dataout_send_r2ts(c, t);
        if (rc < 0)
            return rc;
    }
    dataout_maybe_terminate(t);
    return exec_maybe_run(c, t);
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
        int rc = rsp_status(c, t, RSP_REASSIGN, 0);
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
    exec_task_abort(t);
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
        return exec_respond(c, t);
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
    list_del(&t->node); /* off c->arriving */
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
static void orphan_store_completed(struct iscsi_task *t)
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
