/* ErrorRecoveryLevel 2 on the initiator: connection recovery (RFC 7143 §7.1.4, §7.2.2), and
 * the logout of one connection the target asks for (Async Message, §11.9.1, every level).
 *
 * When a connection of an ERL 2 session is lost, the tasks whose command reached the socket
 * are not failed: they become orphans of the connection's slot (its CID; session.c). Then,
 * per slot (struct ini_cr):
 * - Time2Wait (DefaultTime2Wait, or Parameter2 of an Async event 2/3) passes first: §13.15
 *   forbids a logout, a reassignment or a login for the CID before.
 * - Cleanup at the target (§11.14): a Logout "remove the connection for recovery" (reason 2)
 *   for the CID, immediate, on another connection in full feature phase, ExpStatSN the lost
 *   connection's last; or, with no connection up, a login with the session's TSIH and the same
 *   CID, which logs the old one out implicitly (connection reinstatement, §6.3.4). The target
 *   discards the commands of that connection it had not acknowledged through ExpCmdSN
 *   (§11.14), and keeps the others for reassignment.
 * - Each orphan then gets a TASK REASSIGN (§11.5.1, function 8, immediate, RTT = the task's
 *   ITT, LUN the task's, ExpDataSN = the first DataSN not received for a read, 0 for a write;
 *   the task keeps its CmdSN, the TMF carries the session's next one without taking it) on
 *   the least loaded live connection. From the moment the TMF is queued the task belongs to
 *   that connection: Data-In from ExpDataSN, R2Ts answered from the task's buffer, the
 *   status. "Function complete" needs nothing more. "Task does not exist" for a CmdSN the
 *   target has not acknowledged (ExpCmdSN of that answer not past it): the cleanup discarded
 *   it or it never arrived (§11.14), so its command is retried, same ITT, CmdSN, CDB and
 *   data, on that connection (§7.2.1: allowed once the original is logged out) and the CmdSN
 *   hole closes. "Task still allegiant" (the target's close of the old connection not done
 *   yet) asks again shortly. Any other answer fails the task alone (LR_ERR_CONN_LOST).
 * - Orphans still waiting Time2Retain after Time2Wait (§13.16, or the Logout Response's own
 *   values, §11.15) fail with LR_ERR_CONN_LOST.
 * - The slot is logged in again (same CID, non-leading, TSIH) once its cleanup is done, to
 *   keep the connection count; failed logins are tried again, backing off.
 * The session keeps taking commands while it recovers with no connection up (they wait), and
 * fails them once nothing can come back. The machine runs from the session tick (its reactor,
 * every 10 ms at ERL >= 1) and right after a loss; the PDUs for a connection go out on its
 * own thread (a message, as recovery rounds do). */

#include <assert.h>
#include <errno.h>

#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/logout.h"
#include "initiator/orphan.h"
#include "initiator/sched.h"
#include "initiator/table.h"
#include "initiator/task.h"
#include "util/log.h"

/* "Task still allegiant": asked again after this long. */
#define INI_ERL2_ALLEGIANT_MS 50
/* Reconnect attempts back off from this, doubling, up to 32 times it. */
#define INI_ERL2_RELOGIN_MS 50

static uint64_t secs_ms(uint32_t s)
{
    return (uint64_t)s * 1000;
}

static bool conn_usable(const struct ini_conn *c)
{
    return c->state == ICS_FFP && !c->draining && !c->logout_sent;
}

/* The least loaded connection that can carry new work, other than slot not. */
static struct ini_conn *live_conn(struct lr_session *s, int not )
{
    struct ini_conn *best = NULL;
    for (unsigned i = 0; i < s->nconns; i++) {
        struct ini_conn *c = s->conns[i];
        if ((int)i == not || !conn_usable(c))
            continue;
        if (!best || c->outstanding < best->outstanding)
            best = c;
    }
    return best;
}

static unsigned orphans_of(const struct lr_session *s, unsigned slot)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < s->ntasks; i++)
        n += s->tasks[i].state == ITS_ORPHAN && s->tasks[i].orphan_slot == slot;
    return n;
}

static void fail_orphans(struct lr_session *s, unsigned slot, const char *why)
{
    for (uint32_t i = 0; i < s->ntasks; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state != ITS_ORPHAN || t->orphan_slot != slot)
            continue;
        struct lr_result r = {.err = LR_ERR_CONN_LOST, .what = why};
        ini_task_complete(s, t, &r);
    }
    s->cr[slot].retain_until = 0;
}

/* ---- PDUs on a connection's own thread ---- */

static int send_logout(struct ini_conn *c, uint8_t reason, unsigned slot, uint32_t expstatsn)
{
    struct lr_session *s = c->s;
    uint32_t itt = reason == ISCSI_LOGOUT_CLOSE_SESSION ? INI_LOGOUT_ITT : INI_CLOGOUT_ITT + slot;
    LOG_INFO("initiator: connection %u: Logout reason %u for cid %u (ExpStatSN %u)", c->idx, reason,
             s->conns[slot]->cid, expstatsn);
    return ini_logout_send(c, reason, s->conns[slot]->cid, itt, expstatsn);
}

/* What recovery wants sent on c: Logouts it carries for lost connections, its own Logout once
 * drained after an Async event 1. */
static int erl2_run(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (c->state != ICS_FFP)
        return INI_OK;
    for (unsigned i = 0; i < s->nconns; i++) {
        struct ini_cr *cr = &s->cr[i];
        if (cr->st == CR_LOGOUT && cr->logout_on == (int)c->idx && !cr->logout_queued) {
            cr->logout_queued = true;
            int rc = send_logout(c, ISCSI_LOGOUT_REMOVE_FOR_RECOVERY, i, cr->expstatsn);
            if (rc < 0)
                return rc;
        }
    }
    if (c->recovery_out && !c->logout_sent) {
        /* lr_session_conn_logout_recovery: §11.14.1 reason 2 on the connection itself, with
         * its tasks still running: the target closes it after the answer and keeps them for
         * reassignment (ini_orphan_logout_rsp). Unanswered: dropped (ini_orphan_tick), and
         * recovered as any lost connection. */
        c->logout_sent = true;
        c->logout_deadline_ms = reactor_now_ms() + s->o.logout_timeout_ms;
        return send_logout(c, ISCSI_LOGOUT_REMOVE_FOR_RECOVERY, c->idx, c->expstatsn);
    }
    if (!c->draining || c->logout_sent)
        return INI_OK;
    if (c->outstanding && reactor_now_ms() < c->drain_deadline_ms)
        return INI_OK;
    /* §11.9.1: "close the connection", or "close the session" for the last one. What is still
     * running on it then is terminated by the target (§11.14) and fails; the connection or the
     * session logs in again afterwards (relogin.c), and commands that wait go out there. No
     * new command goes out meanwhile: the connection drains, and none other is usable. An
     * unanswered Logout ends the connection (ini_orphan_tick). */
    if (s->closing_session)
        return INI_OK; /* another connection's Logout closes the session, this one with it */
    c->logout_sent = true;
    /* unanswered for logout_timeout_ms: the connection is dropped (ini_orphan_tick) */
    c->logout_deadline_ms = reactor_now_ms() + s->o.logout_timeout_ms;
    if (live_conn(s, (int)c->idx))
        return send_logout(c, ISCSI_LOGOUT_CLOSE_CONNECTION, c->idx, c->expstatsn);
    s->closing_session = true;
    return send_logout(c, ISCSI_LOGOUT_CLOSE_SESSION, c->idx, c->expstatsn);
}

static void erl2_msg(void *arg)
{
    struct ini_conn *c = arg;
    struct lr_session *s = c->s;
    ini_lock(s);
    s->msgs--;
    c->erl2_req = false;
    if (c->r == reactor_self()) /* else it moved: the next tick asks its new thread */
        ini_conn_fail(c, erl2_run(c));
    ini_unlock(s);
}

static void erl2_kick(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (!s->mt || c->r == reactor_self()) {
        ini_conn_fail(c, erl2_run(c));
        return;
    }
    if (c->erl2_req)
        return;
    c->erl2_req = true;
    /* one message per side of the last move (ini.h, inbox_msg) */
    if (reactor_post(c->r, &c->erl2_msg[c->moves & 1], erl2_msg, c))
        s->msgs++;
}

int ini_orphan_remove(struct lr_session *s, unsigned i)
{
    if (i >= s->nconns || s->params.erl < 2 || !s->logged_in || s->logging_out || s->destroyed ||
        s->closing_session) {
        errno = EINVAL;
        return -1;
    }
    struct ini_conn *c = s->conns[i];
    if (!conn_usable(c) || c->w.erl < 2 || c->recovery_out) {
        errno = EAGAIN; /* not in full feature phase, or logging out already */
        return -1;
    }
    LOG_INFO("initiator: connection %u (cid %u): Logout for recovery with %u task%s on it", c->idx,
             c->cid, c->outstanding, c->outstanding == 1 ? "" : "s");
    c->recovery_out = true;
    erl2_kick(c);
    return 0;
}

void ini_orphan_again(struct ini_conn *c, struct ini_task *t)
{
    /* §11.6.1: the target has not let go of the old connection yet (its close is under way
     * there). Asked again shortly; if that connection's CID is not in use by a new connection
     * of ours, after logging it out again. Time2Retain bounds the asking. */
    struct lr_session *s = c->s;
    unsigned slot = t->orphan_slot;
    struct ini_cr *cr = &s->cr[slot];
    uint64_t now = reactor_now_ms();
    assert(t->conn == c && c->outstanding > 0);
    /* Data-Out for R2Ts a target sent before this answer must not go out from the buffer of a
     * task c no longer has (it may complete, and the caller free it, while they wait) */
    ini_task_detach(s, t);
    c->outstanding--;
    t->state = ITS_ORPHAN;
    t->conn = NULL;
    t->reassigning = false;
    if (!cr->retain_until)
        cr->retain_until = now + secs_ms(s->params.default_time2retain);
    if (cr->st == CR_NONE || cr->st == CR_CLEAN) {
        bool cid_free = s->conns[slot]->state == ICS_DEAD && !s->conns[slot]->login_active;
        cr->st = cid_free ? CR_WAIT : CR_CLEAN;
        cr->wait_until = now + INI_ERL2_ALLEGIANT_MS;
    }
}

int ini_orphan_tmf_rsp(struct ini_conn *c, const uint8_t *hdr)
{
    struct lr_session *s = c->s;
    uint32_t k = get_be32(hdr + BHS_ITT) - INI_TMF_ITT;
    struct ini_task *t = k < s->ntasks ? &s->tasks[k] : NULL;
    if (!t || t->state != ITS_ACTIVE || t->conn != c || !t->reassigning) {
        c->stale_pdus++;
        LOG_WARN("initiator: connection %u: TMF response %08x for no reassignment of ours", c->idx,
                 get_be32(hdr + BHS_ITT));
        return INI_OK;
    }
    t->reassigning = false;
    uint8_t rsp = hdr[BHS_RESPONSE];
    if (rsp == ISCSI_TMF_RSP_COMPLETE)
        return INI_OK; /* §11.6.1: the data and the status follow on this connection */
    if (rsp == ISCSI_TMF_RSP_NO_TASK && sn_le(c->s->expcmdsn, t->cmdsn)) {
        /* never executed (its CmdSN still expected): §7.2.1 retry, the original connection
         * being logged out */
        LOG_INFO("initiator: connection %u: task %08x unknown to the target, CmdSN %u not "
                 "acknowledged: command retried",
                 c->idx, t->itt, t->cmdsn);
        c->outstanding--;
        c->retries++;
        return ini_task_send(c, t);
    }
    if (rsp == ISCSI_TMF_RSP_TASK_ALLEGIANT) {
        LOG_INFO("initiator: connection %u: task %08x still allegiant to cid %u: asked again",
                 c->idx, t->itt, s->conns[t->orphan_slot]->cid);
        ini_orphan_again(c, t);
        return INI_OK;
    }
    LOG_WARN("initiator: connection %u: TASK REASSIGN of %08x refused (response %u)", c->idx,
             t->itt, rsp);
    struct lr_result r = {.err = LR_ERR_CONN_LOST,
                          .what = rsp == ISCSI_TMF_RSP_NO_TASK
                                      ? "connection lost; the target no longer has the task"
                                      : "connection lost; task reassignment refused"};
    ini_task_complete(s, t, &r);
    return INI_OK;
}

/* ---- the state machine, per slot ---- */

void ini_orphan_conn_down(struct ini_conn *c, unsigned expired)
{
    struct lr_session *s = c->s;
    struct ini_cr *cr = &s->cr[c->idx];
    uint64_t now = reactor_now_ms();
    uint32_t t2w = s->params.default_time2wait, t2r = s->params.default_time2retain;
    if (cr->async_set) { /* §11.9.1: the target said how long, for this drop */
        t2w = cr->async_t2w;
        t2r = cr->async_t2r;
        cr->async_set = false;
    }
    /* Logged out for recovery (§11.15): the target has let go of the connection, so no
     * cleanup Logout is owed; its orphans wait only for the answer's Time2Wait */
    bool removed = cr->removed;
    if (removed) {
        t2w = cr->removed_t2w;
        t2r = cr->removed_t2r;
        cr->removed = false;
    }
    cr->wait_until = now + secs_ms(t2w);
    cr->expstatsn = c->expstatsn;
    cr->logout_on = -1;
    cr->logout_queued = false;
    cr->next_login_ms = cr->wait_until;
    cr->failed_logins = 0;
    unsigned n = orphans_of(s, c->idx);
    if (n && t2r == 0) {
        /* §11.9.1, §13.16: nothing is kept for us */
        fail_orphans(s, c->idx, "connection lost; the target keeps no task (Time2Retain 0)");
        n = 0;
    }
    cr->must_clean = expired && t2r && !removed;
    cr->retain_until = n || cr->must_clean ? cr->wait_until + secs_ms(t2r) : 0;
    cr->st = n || cr->must_clean ? (removed ? CR_CLEAN : CR_WAIT) : CR_NONE;
    LOG_INFO("initiator: connection %u (cid %u) lost at ERL 2: %u task%s to recover, "
             "Time2Wait %u s, Time2Retain %u s",
             c->idx, c->cid, n, n == 1 ? "" : "s", t2w, t2r);
    ini_orphan_advance(s, now);
}

/* Orphans of slot, once the target let go of the lost connection: each gets a TASK REASSIGN.
 * Even one whose CmdSN the target had not acknowledged: the cleanup should have discarded it
 * (§11.14), but only the target knows whether it did yet (its close of the connection may run
 * after its answer); retried only on "task does not exist". */
static void place_orphans(struct lr_session *s, unsigned slot)
{
    for (uint32_t i = 0; i < s->ntasks; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state != ITS_ORPHAN || t->orphan_slot != slot)
            continue;
        struct ini_conn *c = live_conn(s, -1);
        if (!c)
            break; /* no connection yet: the next round */
        t->recovered = true;
        t->reassign = true;
        ini_conn_submit(c, t);
    }
}

static void advance_once(struct lr_session *s, uint64_t now)
{
    bool home = !s->mt || reactor_self() == s->r;
    if (ini_conns_up(s))
        s->erl2_giveup_ms = 0;
    else if (!s->erl2_giveup_ms)
        s->erl2_giveup_ms =
            now + secs_ms(s->params.default_time2wait) + secs_ms(s->params.default_time2retain);
    for (unsigned i = 0; i < s->nconns; i++) {
        struct ini_cr *cr = &s->cr[i];
        struct ini_conn *c = s->conns[i];
        if (cr->retain_until && now >= cr->retain_until) {
            LOG_WARN("initiator: cid %u: Time2Retain passed with %u task%s not reassigned", c->cid,
                     orphans_of(s, i), orphans_of(s, i) == 1 ? "" : "s");
            fail_orphans(s, i, "connection lost; not recovered within Time2Retain");
            cr->must_clean = false; /* the target has let go of them too (§13.16) */
            if (cr->st != CR_RELOGIN)
                cr->st = CR_NONE;
        }
        switch (cr->st) {
        case CR_NONE:
            break;
        case CR_WAIT: {
            if (now < cr->wait_until)
                break;
            if (!orphans_of(s, i) && !cr->must_clean) {
                cr->st = CR_NONE; /* nothing to free: the reconnect's login cleans up */
                break;
            }
            struct ini_conn *l = live_conn(s, (int)i);
            if (l) {
                cr->st = CR_LOGOUT;
                cr->logout_on = (int)l->idx;
                cr->logout_queued = false;
                cr->logout_sent_ms = now;
                erl2_kick(l);
            } else {
                cr->st = CR_RELOGIN;
            }
            break;
        }
        case CR_LOGOUT: {
            struct ini_conn *l = s->conns[cr->logout_on];
            if (l->state != ICS_FFP || now - cr->logout_sent_ms >= s->o.logout_timeout_ms) {
                /* lost with its carrier, or unanswered: again, or by a login */
                cr->st = CR_WAIT;
                cr->wait_until = now;
                cr->logout_on = -1;
                s->advance_again = true;
            } else if (!cr->logout_queued) {
                erl2_kick(l); /* a kick that reached its old thread after a move */
            }
            break;
        }
        case CR_RELOGIN:
            break;
        case CR_CLEAN:
            if (now < cr->wait_until)
                break; /* the Logout Response's Time2Wait (§11.15) */
            place_orphans(s, i);
            if (!orphans_of(s, i)) {
                cr->st = CR_NONE;
                cr->retain_until = 0;
            }
            break;
        }
        /* The slot logs in again once its cleanup is settled (not while a Logout for its CID
         * is under way: that one would log the new connection out). */
        if (home && cr->up_once && c->state == ICS_DEAD && !c->login_active &&
            (cr->st == CR_NONE || cr->st == CR_RELOGIN || cr->st == CR_CLEAN) &&
            now >= cr->next_login_ms && now >= cr->wait_until &&
            (!s->erl2_giveup_ms || now < s->erl2_giveup_ms)) {
            LOG_INFO("initiator: connection %u (cid %u): logging in again", i, c->cid);
            cr->next_login_ms = now + ((uint64_t)INI_ERL2_RELOGIN_MS
                                       << (cr->failed_logins < 5 ? cr->failed_logins : 5));
            ini_conn_reconnect(s, i, false);
        }
    }
}

void ini_orphan_advance(struct lr_session *s, uint64_t now)
{
    if (s->params.erl < 2 || !s->logged_in || s->logging_out || s->destroyed)
        return;
    if (s->advancing) { /* called again from inside (a connection failing on a send) */
        s->advance_again = true;
        return;
    }
    s->advancing = true;
    do {
        s->advance_again = false;
        advance_once(s, now);
    } while (s->advance_again && !s->logging_out && !s->destroyed);
    s->advancing = false;
    /* nothing will come back */
    if (!ini_conns_any_up(s) && !ini_orphans_recovering_at(s, now) && !ini_relogin_pending(s))
        ini_session_fail_waiting(s, LR_ERR_NO_CONN, "no connection left in the session");
}

void ini_orphan_tick(struct lr_session *s, uint64_t now)
{
    for (unsigned i = 0; i < s->nconns; i++) {
        struct ini_conn *c = s->conns[i];
        if (c->state == ICS_FFP && c->draining && !c->logout_sent &&
            (c->outstanding == 0 || now >= c->drain_deadline_ms))
            erl2_kick(c);
        else if (c->state == ICS_FFP && c->logout_sent && now >= c->logout_deadline_ms)
            ini_conn_close_any(c, c->recovery_out ? "no answer to the Logout for recovery"
                                                  : "no answer to the Logout the target asked for");
        else if (c->state == ICS_FFP && c->recovery_out && !c->logout_sent)
            erl2_kick(c); /* a kick that reached its old thread after a move */
    }
    ini_orphan_advance(s, now);
}

void ini_orphan_login_done(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    struct ini_cr *cr = &s->cr[c->idx];
    cr->failed_logins = 0;
    LOG_INFO("initiator: connection %u (cid %u) logged in again", c->idx, c->cid);
    cr->must_clean = false; /* §6.3.4: the login with the same CID logged the old one out */
    if (cr->st == CR_RELOGIN) {
        /* §6.3.4: the login with the same CID logged the old connection out */
        cr->st = CR_CLEAN;
        cr->wait_until = 0;
    }
    ini_orphan_advance(s, reactor_now_ms());
}

void ini_orphan_login_failed(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    struct ini_cr *cr = &s->cr[c->idx];
    cr->failed_logins++;
    if (c->login.status == ISCSI_LOGIN_SESSION_DOES_NOT_EXIST) {
        /* §11.13.5: the target ended the session; nothing of it comes back */
        LOG_WARN("initiator: the target no longer has the session: recovery given up");
        s->erl2_giveup_ms = reactor_now_ms();
        for (unsigned i = 0; i < s->nconns; i++) {
            fail_orphans(s, i, "connection lost; the target ended the session");
            s->cr[i].st = CR_NONE;
            s->cr[i].up_once = false;
        }
        ini_session_kick(s);
        return;
    }
    if (cr->st == CR_RELOGIN) {
        cr->st = CR_WAIT; /* another connection may have come up to carry a Logout */
        cr->wait_until = 0;
    }
}

int ini_orphan_logout_rsp(struct ini_conn *c, const uint8_t *hdr)
{
    struct lr_session *s = c->s;
    uint32_t slot = get_be32(hdr + BHS_ITT) - INI_CLOGOUT_ITT;
    uint8_t rsp = hdr[BHS_RESPONSE];
    uint16_t t2w = get_be16(hdr + BHS_TIME2WAIT), t2r = get_be16(hdr + BHS_TIME2RETAIN);
    uint64_t now = reactor_now_ms();
    if (slot >= s->nconns) {
        c->stale_pdus++;
        return INI_OK;
    }
    if (slot == c->idx && c->logout_sent && c->recovery_out) {
        /* our "remove the connection for recovery" of c itself (§11.15): 0, the target let
         * go of it and keeps its tasks (reassigned after the answer's Time2Wait, within its
         * Time2Retain: ini_orphan_conn_down); otherwise the connection goes on as it was */
        c->recovery_out = false;
        if (rsp != 0) {
            LOG_WARN("initiator: connection %u: Logout for recovery answered %u: it goes on",
                     c->idx, rsp);
            c->logout_sent = false;
            return INI_OK;
        }
        s->cr[slot].removed = true;
        s->cr[slot].removed_t2w = t2w;
        s->cr[slot].removed_t2r = t2r;
        return INI_END_RECOVERY_OUT;
    }
    if (slot == c->idx && c->logout_sent) {
        /* our "close the connection" after an Async event 1: §11.15, it closes both ends */
        c->logged_out = rsp == 0;
        s->cr[slot].wait_until = now; /* nothing of it to recover; log in again at once */
        s->cr[slot].next_login_ms = now;
        return INI_END_CONN_LOGGED_OUT;
    }
    struct ini_cr *cr = &s->cr[slot];
    if (cr->st != CR_LOGOUT || cr->logout_on != (int)c->idx) {
        c->stale_pdus++;
        return INI_OK; /* given up on already (timed out, carrier changed) */
    }
    cr->logout_on = -1;
    cr->must_clean = false; /* answered: the target's cleanup is done or will not be */
    switch (rsp) {
    case 0:
        /* §11.15: Time2Wait before reassigning, Time2Retain after it; 0: nothing kept */
        LOG_INFO("initiator: cid %u removed for recovery (Time2Wait %u, Time2Retain %u)",
                 s->conns[slot]->cid, t2w, t2r);
        cr->st = CR_CLEAN;
        cr->wait_until = now + secs_ms(t2w);
        if (t2r == 0) {
            fail_orphans(s, slot, "connection lost; the target kept no task (Time2Retain 0)");
            cr->st = CR_NONE;
        } else {
            cr->retain_until = cr->wait_until + secs_ms(t2r);
        }
        break;
    case 2: /* connection recovery not supported */
        LOG_WARN("initiator: the target does not support connection recovery");
        fail_orphans(s, slot, "connection lost; the target does not recover connections");
        cr->st = CR_NONE;
        break;
    default: /* 1: CID not found, 3: cleanup failed: a login with the CID does it (§6.3.4) */
        LOG_WARN("initiator: Logout for cid %u answered %u: cleanup by login", s->conns[slot]->cid,
                 rsp);
        cr->st = CR_RELOGIN;
        cr->wait_until = now + (rsp == 3 ? secs_ms(t2w) : 0);
        cr->next_login_ms = cr->wait_until;
        break;
    }
    ini_orphan_advance(s, now);
    return INI_OK;
}

/* ---- Async Message (§11.9.1) ---- */

int ini_orphan_async(struct ini_conn *c, const uint8_t *hdr)
{
    struct lr_session *s = c->s;
    uint8_t ev = hdr[BHS_ASYNC_EVENT];
    uint16_t p1 = get_be16(hdr + BHS_ASYNC_PARAM1), p2 = get_be16(hdr + BHS_ASYNC_PARAM2),
             p3 = get_be16(hdr + BHS_ASYNC_PARAM3);
    LOG_WARN("initiator: connection %u: async event %u (parameters %u %u %u)", c->idx, ev, p1, p2,
             p3);
    bool erl2 = s->params.erl >= 2 && c->w.erl >= 2;
    int rc = INI_OK;
    switch (ev) {
    case 1:
        /* The target asks for this connection's logout, within Parameter3 seconds, with
         * "close the connection" or "close the session": no new command goes on it, and the
         * Logout leaves once its tasks are done or the time is nearly up (erl2_run). */
        if (!c->draining) {
            c->draining = true;
            uint64_t grace = secs_ms(p3);
            c->drain_deadline_ms = reactor_now_ms() + (grace > 500 ? grace - 500 : grace / 2);
        }
        return erl2_run(c);
    case 2:
        /* Parameter1's connection will be dropped: at ERL 2 we drop it now and recover with
         * the times given (Parameter2 = Time2Wait, Parameter3 = Time2Retain). This one ends
         * through the status returned, the others here. */
        if (!erl2)
            return INI_ERR_ASYNC_DROP;
        for (unsigned i = 0; i < s->nconns; i++) {
            struct ini_conn *x = s->conns[i];
            if (x->cid != p1 || x->state != ICS_FFP)
                continue;
            s->cr[i].async_set = true;
            s->cr[i].async_t2w = p2;
            s->cr[i].async_t2r = p3;
            if (x == c)
                rc = INI_END_ASYNC_DROP_CONN;
            else
                ini_conn_close_any(x, ini_status_str(INI_END_ASYNC_DROP_CONN));
        }
        return rc;
    case 3:
        /* every connection of the session will be dropped */
        if (!erl2)
            return INI_OK;
        for (unsigned i = 0; i < s->nconns; i++) {
            struct ini_conn *x = s->conns[i];
            if (x->state != ICS_FFP)
                continue;
            s->cr[i].async_set = true;
            s->cr[i].async_t2w = p2;
            s->cr[i].async_t2r = p3;
            if (x == c)
                rc = INI_END_ASYNC_DROP_ALL;
            else
                ini_conn_close_any(x, ini_status_str(INI_END_ASYNC_DROP_ALL));
        }
        return rc;
    default: /* 0 SCSI event, 4 renegotiation, 255 vendor: nothing we act on */
        return INI_OK;
    }
}
