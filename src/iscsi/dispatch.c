/* The top of the target's connection: the PDU dispatch the wire engine calls (each opcode to
 * its handler: cmd.c, dataout.c, login.c, tmf.c, snack.c, discovery.c, nop.c, logout.c), the
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
#include "iscsi/logout.h"
#include "iscsi/nop.h"
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

/* The socket is full and has not taken in a whole tick what was queued at its start (the queue
 * is FIFO): a reader that stopped, or reads too slowly to clear a second's backlog in a second.
 * A fast reader that keeps the socket full clears it, and is left alone. Called once a tick. */
static bool conn_tx_stalled(struct iscsi_conn *c)
{
    bool stalled = c->w.want_write && c->w.stats.tx_bytes - c->tick_tx_bytes < c->tick_txq_data;
    c->tick_tx_bytes = c->w.stats.tx_bytes;
    c->tick_txq_data = c->w.txq_data;
    return stalled;
}

/* Once a second: the login deadline, the CmdSN gap check, NOP-In liveness, the stall copy, a
 * logged-out connection's deadline. A negative status closes the connection. */
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
        if (conn_tx_stalled(c) && rsp_unpin_stalled(c) < 0)
            return ISCSI_ERR_NOMEM;
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
    } else if (c->phase == CONN_LOGGED_OUT) {
        /* The connection closes once its queue is on the wire (conn_wire_drained): a peer
         * that stops reading after its Logout (or a TARGET COLD RESET answer, §11.5.1) would
         * keep it, and the RAM pages its queued Data-In pins, for ever. The queue is copied
         * away as in full feature phase, and the connection gets nop-timeout to drain. */
        if (!c->logged_out_ms)
            c->logged_out_ms = now;
        if (now - c->logged_out_ms >= (uint64_t)srv->nop_timeout_s * 1000)
            return ISCSI_ERR_LOGOUT_UNREAD;
        if (conn_tx_stalled(c) && rsp_unpin_stalled(c) < 0)
            return ISCSI_ERR_NOMEM;
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
