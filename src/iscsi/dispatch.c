/* The top of the target's connection: the PDU dispatch the wire engine calls (each opcode to
 * its handler: cmd.c, login.c, tmf.c, snack.c, discovery.c; NOP-Out and Logout here), the
 * once-a-second checks, and the making of a connection with what its end runs (struct
 * conn_ops). conn.c below knows none of the handlers. */
#include <assert.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iscsi/cmd.h"
#include "iscsi/conn.h"
#include "iscsi/dataout.h"
#include "iscsi/discovery.h"
#include "iscsi/dispatch.h"
#include "iscsi/login.h"
#include "iscsi/orphan.h"
#include "iscsi/pending.h"
#include "iscsi/response.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "iscsi/snack.h"
#include "iscsi/task.h"
#include "iscsi/tmf.h"
#include "util/log.h"

#define RX_LARGE (32u * 1024u) /* payloads this big: read headers alone, payloads direct */

static bool opcode_allowed_in_login(enum iscsi_opcode op)
{
    return op == ISCSI_OP_LOGIN_REQ;
}

/* A Logout naming a connection other than the one it came on: its ExpStatSN is that
 * connection's (RFC 7143 §11.14.4), StatSNs being numbered per connection. */
static bool logout_for_other_conn(const struct iscsi_conn *c, const struct iscsi_bhs *h)
{
    return bhs_opcode(h) == ISCSI_OP_LOGOUT_REQ && (h->b[1] & 0x7f) != ISCSI_LOGOUT_CLOSE_SESSION &&
           get_be16(h->b + BHS_CID) != c->cid;
}

static int pdu_header_dispatch(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    enum iscsi_opcode op = bhs_opcode(&p->bhs);
    if (c->phase == CONN_LOGIN) {
        if (!opcode_allowed_in_login(op)) {
            LOG_WARN("%s: %s before login completed", c->peer, iscsi_opcode_name(op));
            return ISCSI_ERR_NOT_IN_LOGIN;
        }
        return ISCSI_OK;
    }
    if (op != ISCSI_OP_LOGIN_REQ && (op != ISCSI_OP_SNACK || conn_erl(c) >= 1) &&
        !logout_for_other_conn(c, &p->bhs)) {
        c->exp_statsn = bhs_get32(&p->bhs, BHS_EXPSTATSN);
        /* ERL >= 1: what the initiator acknowledged needs keeping no longer (§4.2.2.2) */
        if (!list_empty(&c->retained))
            rsp_ack_statsn(c, c->exp_statsn);
    }
    switch (op) {
    case ISCSI_OP_SCSI_CMD:
        return cmd_handle_scsi_header(c, p);
    case ISCSI_OP_DATA_OUT:
        return dataout_handle_header(c, p);
    default:
        return ISCSI_OK;
    }
}

int conn_pdu_header(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    return conn_fail(c, pdu_header_dispatch(c, p));
}

static int nop_out_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint32_t itt = bhs_get32(req, BHS_ITT);
    uint32_t ttt = bhs_get32(req, BHS_TTT);
    if (!bhs_immediate(req) && c->session)
        session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
    if (ttt != ISCSI_RSVD_TAG) {
        /* The answer to our ping (RFC 7143 §11.18). */
        if (c->nop_outstanding && ttt == c->nop_ttt)
            c->nop_outstanding = false;
        return ISCSI_OK;
    }
    if (itt == ISCSI_RSVD_TAG)
        return ISCSI_OK; /* a ping that asks for no answer */
    struct wire_pdu *rsp = conn_pdu_new(c, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL);
    if (!rsp)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)rsp->hdr;
    memcpy(h->b + BHS_LUN, req->b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, itt);
    bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true);
    return conn_send_copy(c, rsp, p->data, p->dlen); /* ping data echoed back */
}

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

static int logout_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
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

static int pdu_done_dispatch(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    enum iscsi_opcode op = bhs_opcode(&p->bhs);
    if (c->phase == CONN_LOGIN) {
        int rc = login_handle(c, p);
        if (c->phase != CONN_LOGIN)
            conn_pending_done(c); /* logged in, or refused and closing */
        if (rc == ISCSI_OK && c->phase == CONN_FFP) {
            /* Digests start with the first PDU after the final Login Response, which is
             * queued already (§13.1); the limit we declared holds from now on (§13.12). */
            wire_set_digests(&c->w, c->hdigest, c->ddigest);
            wire_set_limits(&c->w, c->max_recv_dsl, ISCSI_RXBUF_SIZE);
            c->w.rx_large_min = RX_LARGE;
            c->w.erl = c->session ? (uint8_t)c->session->params.erl : 0; /* §13.20 */
        }
        return rc;
    }
    if (c->phase != CONN_FFP)
        return ISCSI_OK; /* logged out: ignore whatever else arrives */
    if (c->discovery && op != ISCSI_OP_TEXT_REQ && op != ISCSI_OP_LOGOUT_REQ &&
        op != ISCSI_OP_NOP_OUT) {
        /* RFC 7143 §4.3: a discovery session carries Text, NOP and Logout only. */
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    if (p->data_digest_bad && op != ISCSI_OP_SCSI_CMD && op != ISCSI_OP_DATA_OUT) {
        /* ERL >= 1 (ERL 0 closes): a request whose data digest is bad is rejected with reason
         * 0x02 and discarded, its CmdSN not received (RFC 7143 §7.3, §7.8); the initiator
         * sends it again. SCSI Command and Data-Out recover in their handlers. */
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_DIGEST_ERROR);
    }
    switch (op) {
    case ISCSI_OP_SCSI_CMD:
        return cmd_handle_scsi_data_done(c, p);
    case ISCSI_OP_DATA_OUT:
        return dataout_handle_done(c, p);
    case ISCSI_OP_NOP_OUT:
        return nop_out_handle(c, p);
    case ISCSI_OP_TEXT_REQ:
        return text_handle(c, p);
    case ISCSI_OP_TMF_REQ:
        return tmf_handle(c, p);
    case ISCSI_OP_LOGOUT_REQ:
        return logout_handle(c, p);
    case ISCSI_OP_LOGIN_REQ:
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_PROTOCOL_ERROR);
    case ISCSI_OP_SNACK:
        /* ERL 0: no SNACK support (RFC 7143 §11.16: only ERL > 0 must support it) */
        if (conn_erl(c) == 0)
            return conn_send_reject(c, &p->bhs, ISCSI_REJECT_CMD_NOT_SUPPORTED);
        return snack_handle(c, p);
    default:
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_CMD_NOT_SUPPORTED);
    }
}

int conn_pdu_done(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    int rc = pdu_done_dispatch(c, p);
    if (p->task) {
        struct iscsi_task *t = p->task;
        p->task = NULL;
        task_put(t); /* the receive engine's: the data segment is in */
    }
    return conn_fail(c, rc);
}

/* The engine's ops: the dispatcher above closes the connection for a handler's negative
 * status (conn_fail), so the engine only has to stop; its own failures close it here. */
static int conn_wire_hdr(void *ctx, struct iscsi_pdu_in *p)
{
    struct iscsi_conn *c = ctx;
    /* The engine's clock reading for the read that brought this header serves both the
     * liveness check and a command's latency (its arrival, iscsi_task.arrival_ns): the same
     * CLOCK_MONOTONIC as reactor_now_ms, taken once per read rather than once per PDU. */
    c->last_rx_ns = c->w.rx_ns;
    c->last_rx_ms = c->last_rx_ns / 1000000;
    assert(!p->task); /* released at the end of the previous PDU */
    return conn_pdu_header(c, p) < 0 ? WIRE_E_OWNER : WIRE_OK;
}

static int conn_wire_pdu(void *ctx, struct iscsi_pdu_in *p)
{
    struct iscsi_conn *c = ctx;
    /* The engine delivers a bad data digest at ERL >= 1 only (at ERL 0 it stops, §7.8): the
     * handlers reject the PDU and recover. */
    assert(!p->data_digest_bad || conn_erl(c) >= 1);
    return conn_pdu_done(c, p) < 0 ? WIRE_E_OWNER : WIRE_OK;
}

/* The one place an engine failure closes the connection. */
static void conn_wire_fail(void *ctx, int status)
{
    struct iscsi_conn *c = ctx;
    const char *why = wire_status_str(status);
    if (status == WIRE_E_PEER_CLOSED && c->phase == CONN_LOGGED_OUT)
        conn_close(c, NULL); /* the initiator closing after its Logout: nothing to say */
    else
        conn_close(c, why ? why : "protocol error");
}

/* A Logout Response (RFC 7143 §11.15), or an Async Message that announced the drop, is on the
 * wire: the connection ends. */
static void conn_wire_drained(void *ctx)
{
    struct iscsi_conn *c = ctx;
    if (c->phase == CONN_LOGGED_OUT)
        conn_close(c, c->async_drop ? "dropped after Async Message event 2" : NULL);
}

/* A connection's end, after its tasks and its login state: it leaves its session. */
static void conn_end_session(struct iscsi_conn *c)
{
    if (c->session)
        session_remove_conn(c->session, c);
}

/* The target's connections: the engine's callbacks above, and what their end undoes, in
 * order: the tasks (kept as orphans at ERL 2, else ended), the login's leftovers, the place
 * in the session (the last one out may end it). */
static const struct conn_ops target_conn_ops = {
    .wire =
        {
            .hdr = conn_wire_hdr,
            .pdu = conn_wire_pdu,
            .fail = conn_wire_fail,
            .drained = conn_wire_drained,
        },
    .end = {cmd_conn_teardown, login_conn_cleanup, conn_end_session},
    .free = task_pool_conn_free,
};

/* ---------------- liveness ---------------- */

/* Once a second: the login deadline, the CmdSN gap check, NOP-In liveness. A negative status
 * closes the connection. */
static int conn_timer_check(struct iscsi_conn *c)
{
    uint64_t now = reactor_now_ms();
    struct iscsi_server *srv = c->srv;
    if (c->phase == CONN_LOGIN) {
        /* A deadline from accept, not an idle timer: a peer that keeps sending Login Requests
         * (or one byte a second) must not hold a pending-login slot for ever. */
        if (now - c->accept_ms >= (uint64_t)srv->login_timeout_s * 1000)
            return ISCSI_ERR_LOGIN_TIMEOUT;
    } else if (c->phase == CONN_FFP) {
        /* A discovery session lives for its Text requests: answering NOP-In pings does not
         * keep it (it would hold a slot of max-discovery-sessions for ever). */
        unsigned idle_s = srv->limits.discovery_idle_timeout_s;
        if (c->discovery && idle_s && now - c->last_text_ms >= (uint64_t)idle_s * 1000)
            return ISCSI_ERR_DISCOVERY_IDLE;
        if (c->session)
            session_check_gap(c->session, now);
        int rc = conn_erl(c) >= 1 ? dataout_check_stalled(c, now) : dataout_check_timeout(c, now);
        if (rc < 0)
            return rc;
        bool pings = srv->nop_interval_s != 0;
        if (pings && c->nop_outstanding) {
            if (now - c->nop_sent_ms > (uint64_t)srv->nop_timeout_s * 1000)
                return ISCSI_ERR_NOP_TIMEOUT;
        } else if (pings && now - c->last_rx_ms > (uint64_t)srv->nop_interval_s * 1000) {
            return conn_send_nop_ping(c);
        }
    }
    return ISCSI_OK;
}

static void conn_timer_fire(void *arg)
{
    struct iscsi_conn *c = arg;
    assert(!c->dead); /* conn_close() stops the timer */
    if (conn_fail(c, conn_timer_check(c)) == ISCSI_OK)
        reactor_timer_start(c->reactor, &c->timer, 1000, conn_timer_fire, c);
}

/* ---------------- a new connection ---------------- */

void iscsi_conn_accept(struct iscsi_server *srv, struct reactor *r, int fd,
                       const struct iscsi_portal_addr *portal)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[48] = "?", peer[64];
    unsigned port = 0;
    uint8_t addr[16];
    uint8_t addr_len = 0;
    memset(&ss, 0, sizeof(ss));
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
            port = ntohs(sin->sin_port);
            memcpy(addr, &sin->sin_addr, 4);
            addr_len = 4;
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
            port = ntohs(sin6->sin6_port);
            memcpy(addr, &sin6->sin6_addr, 16);
            addr_len = 16;
        }
    }
    snprintf(peer, sizeof(peer), ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
    /* The pending-login limits are checked before anything is allocated for the connection:
     * past them it is closed at once, costing a descriptor for a moment and nothing else. */
    if (!iscsi_server_pending_add(srv, addr, addr_len, peer)) {
        close(fd);
        return;
    }
    struct iscsi_conn *c = conn_new(srv, r, portal, &target_conn_ops);
    if (!c) {
        LOG_ERR("out of memory accepting a connection");
        iscsi_server_pending_del(srv, addr, addr_len);
        close(fd);
        return;
    }
    memcpy(c->peer_addr, addr, addr_len);
    c->peer_addr_len = addr_len;
    c->pending_counted = true;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (wire_attach(&c->w, r, fd, conn_on_event, c) < 0) {
        LOG_ERR("%s: cannot watch socket", c->peer);
        close(fd);
        c->w.fd = -1;
        conn_pending_done(c);
        conn_put(c);
        return;
    }
    reactor_timer_start(r, &c->timer, 1000, conn_timer_fire, c);
    LOG_DEBUG("%s: connected on portal %s", c->peer, portal ? portal->text : "?");
}

struct iscsi_conn *iscsi_conn_new_detached(struct iscsi_server *srv, struct reactor *r)
{
    struct iscsi_conn *c = conn_new(srv, r, NULL, &target_conn_ops);
    if (c)
        snprintf(c->peer, sizeof(c->peer), "detached");
    return c;
}
