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

#include "iscsi/conn.h"
#include "util/iov.h"
#include "util/log.h"

/* 12 of a batch of QD 32: 6 and 16 did less well (bench/results/early-flush-20261203.md). */
#define TARGET_EARLY_FLUSH_PDUS 12u

/* ---------------- lifetime ---------------- */

void conn_get(struct iscsi_conn *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void conn_free(void *arg)
{
    struct iscsi_conn *c = arg;
    if (c->ops->free)
        c->ops->free(c);
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

struct iscsi_conn *conn_new(struct iscsi_server *srv, struct reactor *r,
                            const struct iscsi_portal_addr *portal, const struct conn_ops *ops)
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
    c->ops = ops;
    wire_init(&c->w, &ops->wire, c, c->peer);
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
    list_init(&c->arriving);
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

void conn_pending_done(struct iscsi_conn *c)
{
    if (!c->pending_counted)
        return;
    c->pending_counted = false;
    iscsi_server_pending_del(c->srv, c->peer_addr, c->peer_addr_len);
}

/* What conn_close() decides once (enum conn_end), from its own Logout (logged_out,
 * recovery_logout) and what other threads asked (terminate_tasks, closed_by_logout, the
 * server shutting down). */
static enum conn_end conn_end_how(const struct iscsi_conn *c)
{
    /* terminate_tasks first, with acquire: session_close_conn_by_cid stores closed_by_logout
     * before its release store of terminate_tasks, so a Logout's close seen here is seen
     * named (never CONN_END_TERMINATED by a torn read of the pair). */
    bool terminate = atomic_load_explicit(&c->terminate_tasks, memory_order_acquire);
    bool named = atomic_load_explicit(&c->closed_by_logout, memory_order_relaxed);
    if (atomic_load(&c->srv->shutting_down) || (terminate && !named) ||
        (terminate && c->logged_out && c->recovery_logout))
        return CONN_END_TERMINATED;
    if (terminate)
        return CONN_END_NAMED;
    if (c->logged_out)
        return c->recovery_logout ? CONN_END_RECOVERY : CONN_END_LOGOUT;
    return CONN_END_LOST;
}

void conn_close(struct iscsi_conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    c->logged_out = c->phase == CONN_LOGGED_OUT && !c->async_drop;
    c->end = conn_end_how(c);
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
    /* The layers above let go of it, in the order they gave (struct conn_ops). */
    for (unsigned i = 0; i < CONN_END_HOOKS; i++)
        if (c->ops->end[i])
            c->ops->end[i](c);
    rsp_ring_free(&c->rsp_ring); /* nothing is sent any more */
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

struct wire_pdu *conn_response_new(struct iscsi_conn *c, enum iscsi_opcode op,
                                   const struct iscsi_bhs *req, uint8_t response)
{
    struct wire_pdu *p = conn_pdu_new(c, op, ISCSI_FLAG_FINAL);
    if (!p)
        return NULL;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_RESPONSE] = response;
    bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
    return p;
}

int conn_send_response(struct iscsi_conn *c, enum iscsi_opcode op, const struct iscsi_bhs *req,
                       uint8_t response)
{
    struct wire_pdu *p = conn_response_new(c, op, req, response);
    if (!p)
        return ISCSI_ERR_NOMEM;
    conn_fill_sn(c, (struct iscsi_bhs *)p->hdr, true);
    conn_send(c, p);
    return ISCSI_OK;
}

void conn_send(struct iscsi_conn *c, struct wire_pdu *p)
{
    /* Handlers run on live connections only, and the asynchronous senders (store completions,
     * TMF answers, timers) check first. */
    assert(!c->dead);
    if (conn_erl(c) >= 1)
        rsp_ring_keep(&c->rsp_ring, (const struct iscsi_bhs *)p->hdr, p->data, p->datacnt, p->dlen);
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

void conn_put_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance, uint32_t exp,
                 uint32_t max)
{
    bhs_put32(h, BHS_STATSN, c->statsn);
    if (advance)
        c->statsn++;
    bhs_put32(h, BHS_EXPCMDSN, exp);
    bhs_put32(h, BHS_MAXCMDSN, max);
}

void conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance)
{
    uint32_t exp, max;
    if (c->session) {
        session_window(c->session, &exp, &max);
    } else {
        exp = c->login_cmdsn;
        max = exp;
    }
    conn_put_sn(c, h, advance, exp, max);
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

/* ---------------- test seams (tgt_harness.c) ---------------- */

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
