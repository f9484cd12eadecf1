/* Logout on the target (RFC 7143 §11.14, §11.15): closing the session, this connection or
 * another one of the session, or removing a connection for recovery at ERL 2. */
#include <pthread.h>
#include <stdio.h>

#include "iscsi/conn.h"
#include "iscsi/logout.h"
#include "iscsi/orphan.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "scsi/scsi.h"
#include "util/log.h"

/* The Logout Response (RFC 7143 §11.15). Time2Wait and Time2Retain are given for a removal for
 * recovery at ERL 2 (§11.15.1, §11.15.2): how long the initiator waits before reassigning the
 * connection's tasks, and for how long after that the target keeps them. Otherwise they stay 0:
 * nothing to wait for or to retain. `gone`: the connection had already ended and its tasks wait
 * as orphans, so there is nothing left to clean up and the reassignment may start at once. */
static int logout_respond(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t response,
                          bool recovery, bool gone)
{
    struct wire_pdu *p = conn_response_new(c, ISCSI_OP_LOGOUT_RSP, req, response);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    if (recovery) {
        put_be16(h->b + BHS_TIME2WAIT, gone ? 0 : (uint16_t)session_time2wait(c->session));
        put_be16(h->b + BHS_TIME2RETAIN, (uint16_t)c->session->params.default_time2retain);
    }
    conn_fill_sn(c, h, true);
    conn_send(c, p);
    return ISCSI_OK;
}

int logout_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint8_t reason = req->b[1] & 0x7f;
    uint8_t response = 0;
    if (!bhs_immediate(req) && c->session)
        session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
    /* The connection logged out: this one (self), another of the session (other, named by
     * its CID), or one that is gone. Another is never touched here: it lives on another
     * reactor, which may free it at any moment; session_close_conn_by_cid() finds it again
     * under the session lock. */
    bool self = true, other = false;
    bool recovery = false;
    if (reason == ISCSI_LOGOUT_CLOSE_CONNECTION) {
        uint16_t cid = get_be16(req->b + BHS_CID);
        if (cid != c->cid) {
            self = false;
            other = session_has_conn(c->session, cid);
            if (!other)
                response = 1; /* CID not found */
        }
    } else if (reason == ISCSI_LOGOUT_REMOVE_FOR_RECOVERY) {
        if (conn_erl(c) < 2) {
            response = 2; /* connection recovery is not supported (ERL < 2) */
        } else {
            /* §11.14.1 reason 2: the connection is closed and its tasks kept for a new
             * allegiance. One that is gone already (failed, its tasks orphaned) is only
             * logically closed (§11.14): its group answers for it. */
            recovery = true;
            uint16_t cid = get_be16(req->b + BHS_CID);
            if (cid != c->cid) {
                self = false;
                other = session_has_conn(c->session, cid);
                if (!other && !orphans_cid_known(c->session, cid))
                    response = 1; /* CID not found */
            }
        }
    } else if (reason != ISCSI_LOGOUT_CLOSE_SESSION) {
        return conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    /* A logout that ends the session ends its I_T nexus before the answer goes out: the
     * initiator may act on another session the moment it has the Logout Response. */
    struct iscsi_session *s = c->session;
    if (response == 0 && s && s->nexus && !recovery) {
        pthread_mutex_lock(&s->lock);
        bool ends_session = reason == ISCSI_LOGOUT_CLOSE_SESSION || (self && s->nconns == 1);
        if (ends_session)
            s->logged_out = true;
        pthread_mutex_unlock(&s->lock);
        if (ends_session)
            scsi_nexus_logout(s->nexus);
    }
    int rc = logout_respond(c, req, response, recovery && response == 0, !self && !other);
    if (rc < 0 || response != 0)
        return rc;
    {
        char ini[2 * ISCSI_NAME_MAX + 3];
        struct iscsi_session *ls = c->session;
        /* logout-cid: the connection logged out, when it is not this one (§11.14.3) */
        char lcid[24] = "";
        if (reason != ISCSI_LOGOUT_CLOSE_SESSION)
            snprintf(lcid, sizeof(lcid), " logout-cid=%u", get_be16(req->b + BHS_CID));
        LOG_INFO("event=logout peer=%s initiator=%s%s%s tsih=%u cid=%u reason=%s%s", c->peer,
                 log_quote(ini, sizeof(ini), ls ? ls->initiator_name : ""),
                 ls && ls->node ? " target=" : "", ls && ls->node ? ls->node->name : "",
                 ls ? ls->tsih : 0, c->cid,
                 reason == ISCSI_LOGOUT_CLOSE_SESSION ? "close-session"
                 : recovery                           ? "recovery"
                                                      : "close-connection",
                 lcid);
    }
    /* For recovery, the answers the initiator had on the named connection (ExpStatSN,
     * §11.14.4) are not kept: a TASK REASSIGN could otherwise claim one of them by an ITT the
     * initiator has since given to a new command. */
    uint32_t acked = bhs_get32(req, BHS_EXPSTATSN);
    if (reason == ISCSI_LOGOUT_CLOSE_SESSION && c->session)
        session_close_other_conns(c->session, c);
    else if (other || (recovery && !self)) {
        /* a connection still up (or gone meanwhile: then, as for one gone before, its group) */
        unsigned n = session_close_conn_by_cid(c->session, get_be16(req->b + BHS_CID), !recovery,
                                               recovery ? &acked : NULL, NULL);
        if (n)
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: CID %u: %u answered task(s) acknowledged by the Logout "
                             "(ExpStatSN %u): not kept for reassignment",
                             c->peer, get_be16(req->b + BHS_CID), n, acked);
    }
    if (self || reason == ISCSI_LOGOUT_CLOSE_SESSION) {
        c->phase = CONN_LOGGED_OUT; /* closes once the response is on the wire */
        c->recovery_logout = recovery;
    }
    return ISCSI_OK;
}
