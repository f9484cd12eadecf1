/* Logging in again after a logout the target asked for (Async Message event 1, RFC 7143
 * §11.9.1), at every ErrorRecoveryLevel. orphan.c drains the connection and logs it out within
 * Parameter3 seconds; what follows is here:
 * - a connection logged out alone ("close the connection", another one carrying on) logs in
 *   again with its CID and the session's TSIH (a new connection of the session, §6.3); at
 *   ERL 2 orphan.c's reconnects do this;
 * - a session logged out whole ("close the session", its last connection) logs in anew: a
 *   leading login with the same ISID and TSIH 0 (§6.1; the reinstatement of the session if the
 *   target still holds it, §6.3.5), then its other connections. The commands that never reached
 *   the target (waiting for the window or a connection, or cut off unsent) go out there with
 *   new CmdSNs: the old session's numbers ended with it.
 * Commands the target still had when the Logout left were terminated by it (§11.14) and have
 *   failed already (session.c): whether they ran is unknown, so none is sent again. The same
 *   happens when the target drops the connection instead of waiting for our Logout.
 * Bounded: a few login attempts, backing off, and a few rounds in a row in which no command
 * completed (a target that asks for a logout after every login); then the commands waiting
 * fail with LR_ERR_NO_CONN and the reason. */
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/relogin.h"
#include "initiator/sched.h"
#include "util/log.h"

/* Login attempts, the first at once, then backing off from INI_RELOGIN_MS, doubling. */
#define INI_RELOGIN_TRIES 5
#define INI_RELOGIN_MS 50
/* Session logouts asked for in a row with no command completed between them. */
#define INI_RELOGIN_ROUNDS 3

static void give_up(struct lr_session *s, const char *why)
{
    LOG_WARN("initiator: %s", why);
    s->reestablish = false;
    for (unsigned i = 0; i < s->nconns; i++)
        s->asked_out[i] = false;
    if (!ini_conns_any_up(s))
        ini_session_fail_waiting(s, LR_ERR_NO_CONN, why);
}

static bool usable(const struct ini_conn *c)
{
    return c->state == ICS_FFP && !c->draining && !c->logout_sent;
}

void ini_relogin_conn_lost(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (c->logout_sent) /* a session Logout gone with it: another connection may send its own */
        s->closing_session = false;
    if (!c->draining || s->destroyed || s->logging_out || !s->logged_in)
        return;
    for (unsigned i = 0; i < s->nconns; i++) {
        if (!usable(s->conns[i]))
            continue;
        /* the session goes on: this slot logs in again (at ERL 2, orphan.c's reconnect does) */
        if (s->params.erl < 2) {
            s->asked_out[c->idx] = true;
            s->cr[c->idx].failed_logins = 0;
            s->cr[c->idx].next_login_ms = reactor_now_ms();
        }
        return;
    }
    if (s->reestablish)
        return;
    if (++s->relogin_rounds > INI_RELOGIN_ROUNDS) {
        give_up(s, "the target asks for a logout after every login: not logging in again");
        return;
    }
    LOG_INFO("initiator: the session was logged out at the target's request: logging in again");
    s->reestablish = true;
    s->relogin_tries = 0;
    s->relogin_next_ms = reactor_now_ms();
}

/* The old session is gone: nothing of it is recovered or numbered any more. */
static void session_reset(struct lr_session *s)
{
    /* commands cut off unsent kept a CmdSN of the old session: renumbered, first in line */
    struct list_node *n;
    struct list_node keep;
    list_init(&keep);
    while ((n = list_pop(&s->resendq)) != NULL) {
        struct ini_task *t = list_entry(n, struct ini_task, node);
        t->has_cmdsn = false;
        list_add_tail(&keep, &t->node);
    }
    while ((n = list_pop(&s->waitq)) != NULL)
        list_add_tail(&keep, n);
    while ((n = list_pop(&keep)) != NULL)
        list_add_tail(&s->waitq, n);
    s->closing_session = false;
    for (unsigned i = 0; i < s->nconns; i++) {
        s->asked_out[i] = false;
        s->cr[i].st = CR_NONE;
        s->cr[i].up_once = false;
        s->cr[i].retain_until = 0;
    }
    s->erl2_giveup_ms = 0;
}

static void login_slot(struct lr_session *s, unsigned i, bool leading, uint64_t now)
{
    struct ini_cr *cr = &s->cr[i];
    unsigned k = cr->failed_logins < 5 ? cr->failed_logins : 5;
    cr->next_login_ms = now + ((uint64_t)INI_RELOGIN_MS << k);
    LOG_INFO("initiator: connection %u (cid %u): logging in again%s", i, s->conns[i]->cid,
             leading ? " (a new session)" : "");
    ini_conn_reconnect(s, i, leading); /* a failure comes back through ini_relogin_failed */
}

void ini_relogin_tick(struct lr_session *s, uint64_t now)
{
    if (!s->logged_in || s->logging_out || s->destroyed)
        return;
    if (s->reestablish) {
        for (unsigned i = 0; i < s->nconns; i++)
            if (s->conns[i]->state != ICS_DEAD || s->conns[i]->login_active)
                return; /* a Logout or a login still under way */
        if (now < s->relogin_next_ms)
            return;
        if (s->relogin_tries == 0)
            session_reset(s);
        s->cr[0].failed_logins = s->relogin_tries;
        login_slot(s, 0, true, now);
        s->relogin_next_ms = s->cr[0].next_login_ms;
        return;
    }
    if (s->params.erl >= 2)
        return;
    for (unsigned i = 0; i < s->nconns; i++) {
        struct ini_conn *c = s->conns[i];
        if (s->asked_out[i] && c->state == ICS_DEAD && !c->login_active &&
            now >= s->cr[i].next_login_ms && ini_conns_up(s))
            login_slot(s, i, false, now);
    }
}

void ini_relogin_done(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    s->cr[c->idx].failed_logins = 0;
    if (!c->leading) {
        s->asked_out[c->idx] = false;
        LOG_INFO("initiator: connection %u (cid %u) logged in again", c->idx, c->cid);
        return;
    }
    s->reestablish = false;
    s->relogin_tries = 0;
    unsigned waiting = 0;
    for (const struct list_node *n = s->waitq.next; n != &s->waitq; n = n->next)
        waiting++;
    LOG_INFO("initiator: logged in again (TSIH %u); commands waiting: %u", s->tsih, waiting);
    /* the other connections, as many as before and as granted */
    uint64_t now = reactor_now_ms();
    for (unsigned i = 0; i < s->nconns && i < s->granted; i++) {
        struct ini_conn *x = s->conns[i];
        if (x != c && x->state == ICS_DEAD && !x->login_active) {
            s->cr[i].failed_logins = 0;
            login_slot(s, i, false, now);
        }
    }
}

void ini_relogin_failed(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (c->leading) {
        if (++s->relogin_tries >= INI_RELOGIN_TRIES)
            give_up(s, "the target asked for a logout and the session could not log in again");
        return;
    }
    /* one connection of a session that goes on: tried again, a few times */
    if (++s->cr[c->idx].failed_logins >= INI_RELOGIN_TRIES)
        s->asked_out[c->idx] = false;
}
