/* Logout (RFC 7143 §11.14-§11.15): the Logout Request of a connection or of the session, the
 * session's own logout (lr_session_logout, on the session's reactor once its connections are
 * home) and its answer, which ends every connection of the session. The logout of one
 * connection, for ERL 2 recovery or asked for by the target, is orphan.c's. */
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/logout.h"
#include "util/log.h"

static const struct lr_result res_ok = {.err = LR_OK};

static struct ini_conn *first_up(struct lr_session *s)
{
    for (unsigned i = 0; i < s->nconns; i++)
        if (s->conns[i]->state == ICS_FFP)
            return s->conns[i];
    return NULL;
}

static void logout_timeout(void *arg)
{
    struct lr_session *s = arg;
    ini_lock(s);
    s->logout_timed_out = true;
    for (unsigned i = 0; i < s->nconns; i++)
        ini_conn_close(s->conns[i], "logout timed out");
    ini_unlock(s);
}

int ini_logout_start(struct lr_session *s)
{
    struct ini_conn *c = first_up(s);
    s->logging_out = true;
    if (!s->logout_done)
        return 0; /* every connection died while coming back: done() has run already */
    if (!c) {
        lr_done_fn done = s->logout_done;
        s->logout_done = NULL;
        done(s->logout_arg, &res_ok);
        return 0;
    }
    /* RFC 7143 §11.14: close the session */
    if (ini_logout_send(c, ISCSI_LOGOUT_CLOSE_SESSION, c->cid, INI_LOGOUT_ITT, c->expstatsn) < 0)
        return -1; /* lr_session_logout's */
    s->logout_req_sent = true;
    s->logout_conn = c;
    reactor_timer_stop(s->r, &s->logout_timer);
    reactor_timer_start(s->r, &s->logout_timer, s->o.logout_timeout_ms, logout_timeout, s);
    return 0;
}

void ini_logout_conn_lost(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (!s->logging_out || !s->logout_req_sent || s->logout_answered || s->logout_timed_out ||
        c != s->logout_conn || s->logout_lost_why)
        return;
    /* §11.14: the answer to the Logout comes on the connection that carried it, and that one
     * is gone: nothing will answer. The others close now (the session's end at the target is
     * left to Time2Retain, §11.14.1) and the logout ends as lost, not as timed out. */
    reactor_timer_stop(s->r, &s->logout_timer);
    s->logout_lost_why = c->fail_why ? c->fail_why : "connection lost";
    for (unsigned i = 0; i < s->nconns; i++)
        if (s->conns[i] != c)
            ini_conn_close_any(s->conns[i], "the connection carrying the Logout was lost");
}

int ini_logout_send(struct ini_conn *c, uint8_t reason, uint16_t cid, uint32_t itt,
                    uint32_t expstatsn)
{
    /* §11.14: sent immediate, so CmdSN is not advanced (and a CmdSN hole left by a lost
     * connection, which this logout may be about, does not hold it up). The CID is the
     * connection to close (reserved when closing the session: ours, then), ExpStatSN the last
     * one of that connection (§11.14.4). */
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_LOGOUT_REQ, (uint8_t)(ISCSI_FLAG_FINAL | reason));
    h->b[0] |= ISCSI_BHS_IMMEDIATE;
    bhs_put32(h, BHS_ITT, itt);
    put_be16(h->b + BHS_CID, cid);
    bhs_put32(h, BHS_CMDSN, c->s->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, expstatsn);
    ini_conn_send(c, p, NULL, 0);
    return INI_OK;
}

void ini_logout_gathered(struct lr_session *s)
{
    ini_lock(s);
    if (ini_logout_start(s) < 0)
        for (unsigned i = 0; i < s->nconns; i++)
            ini_conn_close(s->conns[i], "out of memory for the logout"); /* done() from there */
    ini_unlock(s);
}

int ini_logout_rsp(struct ini_conn *c, const uint8_t *hdr)
{
    struct lr_session *s = c->s;
    if (hdr[BHS_RESPONSE] != 0)
        LOG_WARN("initiator: logout response %u", hdr[BHS_RESPONSE]);
    reactor_timer_stop(s->r, &s->logout_timer);
    /* The session is gone on the target: every connection closes, and nothing of it is
     * recovered (§11.14: its tasks are terminated). Our own logout, or the one the target
     * asked for (orphan.c; then the session logs in anew, relogin.c): what was still running
     * fails with that said. */
    bool asked = !s->logging_out && c->logout_sent;
    int end = asked ? INI_END_ASKED_OUT : INI_END_LOGGED_OUT;
    s->logout_answered = s->logout_answered || !asked;
    for (unsigned i = 0; i < s->nconns; i++) {
        /* the others on their own threads (all are home for our own logout); this one through
         * the status returned */
        s->conns[i]->logged_out = true;
        if (s->conns[i] != c)
            ini_conn_close_any(s->conns[i], ini_status_str(end));
    }
    return end;
}
