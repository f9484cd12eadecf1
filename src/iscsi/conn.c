/* A target connection: accept, its side of the wire engine (iscsi/wire.h: the header phase
 * chooses where payloads go, complete PDUs are dispatched, the engine's failures close the
 * connection here), the transmit helpers the handlers use, NOP-In liveness pings, and
 * teardown. */
#include <assert.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iscsi/cmd.h"
#include "iscsi/conn.h"
#include "iscsi/discovery.h"
#include "iscsi/login.h"
#include "iscsi/orphan.h"
#include "iscsi/pending.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "iscsi/snack.h"
#include "iscsi/task.h"
#include "iscsi/tmf.h"
#include "util/crc32c.h"
#include "util/iov.h"
#include "util/log.h"

/* 12 of a batch of QD 32: 6 and 16 did less well (bench/results/early-flush-20261203.md). */
#define TARGET_EARLY_FLUSH_PDUS 12u

#define RX_LARGE (32u * 1024u) /* payloads this big: read headers alone, payloads direct */

static const struct wire_ops conn_wire_ops;
static void conn_pending_done(struct iscsi_conn *c);
static void conn_timer_fire(void *arg);

/* ---------------- lifetime ---------------- */

struct iscsi_reactor_local *conn_reactor_local(struct iscsi_conn *c)
{
    struct iscsi_server *srv = c->srv;
    if (!srv->local || reactor_self() != c->reactor)
        return NULL;
    assert(c->rid >= 0 && (unsigned)c->rid < srv->nreactors);
    return &srv->local[c->rid];
}

void conn_get(struct iscsi_conn *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void conn_free(void *arg)
{
    struct iscsi_conn *c = arg;
    struct list_node *n;
    while ((n = list_pop(&c->task_free)) != NULL)
        free(list_entry(n, struct iscsi_task, node));
    wire_free(&c->w);
    iscsi_text_free(&c->login_in);
    iscsi_text_free(&c->login_out);
    atomic_fetch_sub(&c->srv->nconns, 1);
    reactor_load_add(c->reactor, -1);
    free(c);
}

void conn_put(struct iscsi_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    /* The free always runs on the owner's thread: the rest of c is that thread's alone. */
    if (reactor_self() == c->reactor)
        reactor_defer(c->reactor, &c->free_hook, conn_free, c);
    else
        reactor_post(c->reactor, &c->free_msg, conn_free, c);
}

/* A connection's fields before it has a socket: login phase, login-sized buffers, empty
 * queues, counted in the server and the reactor's load. NULL when memory ran out. */
static struct iscsi_conn *conn_alloc(struct iscsi_server *srv, struct reactor *r,
                                     const struct iscsi_portal_addr *portal)
{
    /* The engine allocates its receive buffer when the first bytes arrive, at the login size,
     * and its data buffer on the first segment that needs it; both grow in full feature
     * phase: hundreds of idle or half-open connections cost a few KiB each, not 512 KiB. */
    struct iscsi_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->srv = srv;
    c->reactor = r;
    c->portal = portal;
    c->rid = reactor_id(r);
    c->st_portal = portal ? iostats_shard(portal->stats, c->rid) : NULL;
    c->refs = 1;
    c->phase = CONN_LOGIN;
    c->max_recv_dsl = WIRE_LOGIN_DSL;
    c->max_send_dsl = WIRE_LOGIN_DSL;
    c->next_ttt = 1;
    c->inject = srv->inject;
    wire_init(&c->w, &conn_wire_ops, c, c->peer);
    c->w.digest_count[1] = c->st_portal;
    wire_set_limits(&c->w, WIRE_LOGIN_DSL, ISCSI_RXBUF_LOGIN_SIZE);
    c->w.max_backlog = srv->limits.max_tx_backlog;
    /* Answers go back in pieces of TARGET_EARLY_FLUSH_PDUS while the reactor waits for its
     * initiators (wire.h). Against one session of 4 KiB reads at QD 32 this gave 1.54 x the
     * IOPS at 0.70 x the target CPU per KB; with eight sessions the reactor is rarely idle and
     * nothing changes (bench/results/early-flush-20261203.md). Closing the connection from
     * within the parse (a Logout Response drained) is safe: conn_put frees at the end of the
     * turn. */
    c->w.tx_early_pdus = TARGET_EARLY_FLUSH_PDUS;
    /* --inject digest-error/drop-pdu on what this connection sends. Only what an ERL 1
     * initiator repairs may be dropped: Data-In (a DataSN gap, or an ExpDataSN in the status
     * above what arrived: Data SNACK) and SCSI Response (a StatSN gap, or a NOP-In answer
     * showing one: Status SNACK), RFC 7143 §7.8, §7.9. Digests are corrupted on any PDU with
     * data once DataDigest is negotiated. At ERL 0 they end in what ERL 0 does. */
    static atomic_uint_fast64_t inject_seq;
    struct wire_faults wf = {
        .digest_error = c->inject.digest_error,
        .drop_pdu = c->inject.drop_pdu,
        .drop_ops = 1ull << ISCSI_OP_DATA_IN | 1ull << ISCSI_OP_SCSI_RSP,
        .seed = 0x2545f4914f6cdd1dull * (atomic_fetch_add(&inject_seq, 1) + 1),
    };
    wire_set_faults(&c->w, &wf);
    c->w.r = r; /* deferred work (receive resume) runs there even without a socket */
    list_init(&c->tasks);
    list_init(&c->retained);
    list_init(&c->task_free);
    list_init(&c->released);
    list_init(&c->session_node);
    iscsi_text_init(&c->login_in);
    iscsi_text_init(&c->login_out);
    atomic_fetch_add(&srv->nconns, 1);
    reactor_load_add(r, 1);
    c->last_rx_ms = reactor_now_ms();
    c->accept_ms = c->last_rx_ms;
    return c;
}

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
    struct iscsi_conn *c = conn_alloc(srv, r, portal);
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

/* The connection is no longer one waiting to log in (logged in, or closing). */
static void conn_pending_done(struct iscsi_conn *c)
{
    if (!c->pending_counted)
        return;
    c->pending_counted = false;
    iscsi_server_pending_del(c->srv, c->peer_addr, c->peer_addr_len);
}

void conn_close(struct iscsi_conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    c->logged_out = c->phase == CONN_LOGGED_OUT && !c->async_drop;
    c->phase = CONN_CLOSING;
    if (why) { /* not after a logout: the connection is lost (docs/logging.md) */
        char ini[2 * ISCSI_NAME_MAX + 3], reason[256];
        struct iscsi_session *s = c->session;
        CONN_LOG_LOGIN(
            c, LOG_LVL_INFO, "event=conn-closed peer=%s%s%s%s%s tsih=%u cid=%u reason=%s", c->peer,
            s ? " initiator=" : "", s ? log_quote(ini, sizeof(ini), s->initiator_name) : "",
            s && s->node ? " target=" : "", s && s->node ? s->node->name : "", s ? s->tsih : 0,
            c->cid, log_quote(reason, sizeof(reason), why));
    }
    conn_pending_done(c);
    unsigned sup = log_limit_take_suppressed(&c->log_rl);
    if (sup)
        LOG_INFO("%s: %u more lines not logged", c->peer, sup);
    reactor_timer_stop(c->reactor, &c->timer);
    reactor_timer_stop(c->reactor, &c->inject_timer);
    /* Closes the socket and drops everything queued: the PDUs' owners learn they were not
     * sent. */
    wire_close(&c->w);
    if (c->w.in.task) { /* closed in the middle of a PDU placed into a task */
        struct iscsi_task *t = c->w.in.task;
        c->w.in.task = NULL;
        task_put(t);
    }
    cmd_conn_teardown(c);
    login_conn_cleanup(c);
    if (c->session)
        session_remove_conn(c->session, c);
    conn_put(c);
}

int conn_fail(struct iscsi_conn *c, int status)
{
    if (status < 0)
        conn_close(c, iscsi_status_str(status));
    return status;
}

static void conn_close_msg_run(void *arg)
{
    struct iscsi_conn *c = arg;
    conn_close(c, atomic_load(&c->close_why));
    conn_put(c);
}

void conn_close_async(struct iscsi_conn *c, const char *why)
{
    assert(why);
    const char *none = NULL;
    if (!atomic_compare_exchange_strong(&c->close_why, &none, why))
        return;  /* already asked: that message closes it */
    conn_get(c); /* the message's, dropped once it has run */
    bool queued = reactor_post(c->reactor, &c->close_msg, conn_close_msg_run, c);
    assert(queued); /* close_why is set once, so close_msg is posted once */
    (void)queued;
}

void conn_peer_addr(const struct iscsi_conn *c, char *out, size_t len)
{
    snprintf(out, len, "%s", c->peer);
    char *colon = strrchr(out, ':');
    if (colon && colon != out)
        *colon = '\0';
}

/* ---------------- transmit ---------------- */

struct wire_pdu *conn_tx_alloc(struct iscsi_conn *c)
{
    return wire_pdu_get(&c->w);
}

struct wire_pdu *conn_pdu_new(struct iscsi_conn *c, enum iscsi_opcode op, uint8_t flags)
{
    struct wire_pdu *p = conn_tx_alloc(c);
    if (!p)
        return NULL;
    bhs_init((struct iscsi_bhs *)p->hdr, op, flags);
    return p;
}

int conn_send_response(struct iscsi_conn *c, enum iscsi_opcode op, const struct iscsi_bhs *req,
                       uint8_t response)
{
    struct wire_pdu *p = conn_pdu_new(c, op, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_RESPONSE] = response;
    bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
    conn_fill_sn(c, h, true);
    conn_send(c, p);
    return ISCSI_OK;
}

void conn_send(struct iscsi_conn *c, struct wire_pdu *p)
{
    /* Handlers run on live connections only, and the asynchronous senders (store completions,
     * TMF answers, timers) check first. */
    assert(!c->dead);
    if (conn_erl(c) >= 1)
        snack_keep_response(c, (const struct iscsi_bhs *)p->hdr, p->data, p->datacnt, p->dlen);
    wire_send(&c->w, p);
}

int conn_send_copy(struct iscsi_conn *c, struct wire_pdu *p, const void *data, uint32_t len)
{
    if (len) {
        p->owned = malloc(len);
        if (!p->owned) {
            if (p->sent)
                p->sent(p, false);
            wire_pdu_put(&c->w, p);
            return ISCSI_ERR_NOMEM;
        }
        memcpy(p->owned, data, len);
        p->data[0].iov_base = p->owned;
        p->data[0].iov_len = len;
        p->datacnt = 1;
    }
    p->dlen = len;
    conn_send(c, p);
    return ISCSI_OK;
}

/* ---------------- sequence numbers and common answers ---------------- */

void conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance)
{
    bhs_put32(h, BHS_STATSN, c->statsn);
    if (advance)
        c->statsn++;
    uint32_t exp, max;
    if (c->session) {
        session_window(c->session, &exp, &max);
    } else {
        exp = c->login_cmdsn;
        max = exp;
    }
    bhs_put32(h, BHS_EXPCMDSN, exp);
    bhs_put32(h, BHS_MAXCMDSN, max);
}

/* RFC 7143 §11.17: a Reject carries the offending header as its data. */
int conn_send_reject(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason)
{
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_REJECT_REASON] = reason;
    bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true);
    /* One line per rejected PDU would let a peer write the log at wire speed. */
    CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: reject %s (reason 0x%02x)", c->peer,
                     iscsi_opcode_name(bhs_opcode(bad)), reason);
    return conn_send_copy(c, p, bad->b, ISCSI_BHS_LEN);
}

/* ---------------- task lookup ---------------- */

static unsigned task_hash(uint32_t itt)
{
    return (itt ^ (itt >> 8) ^ (itt >> 16)) & (ISCSI_TASK_HASH_SIZE - 1);
}

void conn_task_hash_add(struct iscsi_conn *c, struct iscsi_task *t)
{
    unsigned b = task_hash(t->itt);
    t->hash_next = c->task_hash[b];
    c->task_hash[b] = t;
    t->in_hash = true;
}

void conn_task_hash_del(struct iscsi_conn *c, struct iscsi_task *t)
{
    if (!t->in_hash)
        return;
    struct iscsi_task **pp = &c->task_hash[task_hash(t->itt)];
    while (*pp && *pp != t)
        pp = &(*pp)->hash_next;
    if (*pp)
        *pp = t->hash_next;
    t->in_hash = false;
}

struct iscsi_task *conn_task_find(struct iscsi_conn *c, uint32_t itt)
{
    for (struct iscsi_task *t = c->task_hash[task_hash(itt)]; t; t = t->hash_next)
        if (t->itt == itt)
            return t;
    return NULL;
}

/* ---------------- the engine's view of this connection ---------------- */

void conn_on_event(void *arg, uint32_t events)
{
    struct iscsi_conn *c = arg;
    if (c->dead)
        return;
    conn_get(c);
    wire_event(&c->w, events);
    conn_put(c);
}

/* ---------------- PDU dispatch ---------------- */

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
            cmd_ack_statsn(c, c->exp_statsn);
    }
    switch (op) {
    case ISCSI_OP_SCSI_CMD:
        return cmd_handle_scsi_header(c, p);
    case ISCSI_OP_DATA_OUT:
        return cmd_handle_data_out_header(c, p);
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
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_RESPONSE] = response;
    bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
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
        return cmd_handle_data_out_done(c, p);
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

static const struct wire_ops conn_wire_ops = {
    .hdr = conn_wire_hdr,
    .pdu = conn_wire_pdu,
    .fail = conn_wire_fail,
    .drained = conn_wire_drained,
};

/* ---------------- liveness ---------------- */

int conn_send_nop_ping(struct iscsi_conn *c)
{
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
    c->nop_ttt = c->next_ttt++;
    if (c->nop_ttt == ISCSI_RSVD_TAG)
        c->nop_ttt = c->next_ttt++;
    bhs_put32(h, BHS_TTT, c->nop_ttt);
    conn_fill_sn(c, h, false); /* a ping does not consume a StatSN (§11.19) */
    c->nop_outstanding = true;
    c->nop_sent_ms = reactor_now_ms();
    conn_send(c, p);
    return ISCSI_OK;
}

/* --inject kill-connection: how often a connection looks at the server's deadline. A quarter
 * of the period keeps the cuts close to it; 5 ms at least, so that a tiny period cannot turn
 * into a busy loop, and 250 ms at most. */
static uint64_t inject_tick_ms(const struct iscsi_conn *c)
{
    uint64_t t = (uint64_t)(c->inject.kill_conn_s * 1000) / 4;
    return t < 5 ? 5 : t > 250 ? 250 : t;
}

int conn_send_async_drop(struct iscsi_conn *c)
{
    struct iscsi_session *s = c->session;
    assert(s && conn_erl(c) >= 2);
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true); /* a status PDU: it takes a StatSN (§11.9) */
    h->b[BHS_ASYNC_EVENT] = ISCSI_ASYNC_DROP_CONNECTION;
    put_be16(h->b + BHS_ASYNC_PARAM1, c->cid);
    put_be16(h->b + BHS_ASYNC_PARAM2, (uint16_t)session_time2wait(s));
    put_be16(h->b + BHS_ASYNC_PARAM3, (uint16_t)s->params.default_time2retain);
    conn_send(c, p);
    /* nothing more is read or answered; the connection closes once the message is out */
    c->async_drop = true;
    c->phase = CONN_LOGGED_OUT;
    return ISCSI_OK;
}

static void conn_inject_fire(void *arg)
{
    struct iscsi_conn *c = arg;
    if (c->dead)
        return;
    if (c->async_drop) { /* the Async Message is not out yet: cut now */
        conn_close(c, "--inject kill-connection (Async Message not taken)");
        return;
    }
    struct iscsi_server *srv = c->srv;
    uint64_t now = reactor_now_ms();
    uint64_t due = atomic_load(&srv->inject_next_cut_ms);
    /* One cut per period server-wide: whoever moves the deadline on is the one cut. */
    if (now >= due &&
        atomic_compare_exchange_strong(&srv->inject_next_cut_ms, &due,
                                       now + (uint64_t)(c->inject.kill_conn_s * 1000))) {
        char why[96];
        unsigned cut = atomic_fetch_add(&srv->inject_cuts, 1) + 1;
        /* ERL 2: every other cut, the first one included, is announced first (Async Message
         * event 2, RFC 7143 §11.9.1), so that both the announced and the silent loss are
         * exercised; a run that ends after two cuts has seen each kind once. */
        if (conn_erl(c) >= 2 && cut % 2 == 1 && conn_send_async_drop(c) == ISCSI_OK) {
            LOG_INFO("%s: --inject kill-connection=%g (cut %u): Async Message \"will drop "
                     "CID %u\" sent",
                     c->peer, c->inject.kill_conn_s, cut, c->cid);
            reactor_timer_start(c->reactor, &c->inject_timer, 1000, conn_inject_fire, c);
            return;
        }
        snprintf(why, sizeof(why), "--inject kill-connection=%g (cut %u)", c->inject.kill_conn_s,
                 cut);
        conn_close(c, why);
        return;
    }
    reactor_timer_start(c->reactor, &c->inject_timer, inject_tick_ms(c), conn_inject_fire, c);
}

void conn_inject_start(struct iscsi_conn *c)
{
    if (!(c->inject.kill_conn_s > 0))
        return;
    /* The first connection to log in starts the clock: the first cut comes a period later. */
    uint64_t unarmed = 0;
    atomic_compare_exchange_strong(&c->srv->inject_next_cut_ms, &unarmed,
                                   reactor_now_ms() + (uint64_t)(c->inject.kill_conn_s * 1000));
    reactor_timer_start(c->reactor, &c->inject_timer, inject_tick_ms(c), conn_inject_fire, c);
}

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
        int rc = conn_erl(c) >= 1 ? cmd_check_stalled(c, now) : cmd_check_data_out_timeout(c, now);
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

/* ---------------- test seams ---------------- */

struct iscsi_conn *iscsi_conn_new_detached(struct iscsi_server *srv, struct reactor *r)
{
    struct iscsi_conn *c = conn_alloc(srv, r, NULL);
    if (c)
        snprintf(c->peer, sizeof(c->peer), "detached");
    return c;
}

size_t iscsi_conn_feed(struct iscsi_conn *c, const void *bytes, size_t len)
{
    conn_get(c);
    size_t used = wire_feed(&c->w, bytes, len);
    conn_put(c);
    return used;
}

size_t iscsi_conn_take_tx(struct iscsi_conn *c, void *buf, size_t cap)
{
    /* the engine's drained op closes a logged-out connection once its last answer is taken */
    return wire_take_tx(&c->w, buf, cap);
}

bool iscsi_conn_is_closed(const struct iscsi_conn *c)
{
    return c->dead;
}
