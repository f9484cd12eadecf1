/* An initiator session: created and destroyed, its connections' lifecycle (leading login,
 * then non-leading logins of the other MC/S connections with the session's TSIH, RFC 7143
 * §6.3, §4.3.2), connection loss, the tick that drives timeouts and recovery, and the logout
 * entry point. Task scheduling lives in sched.c, the Logout itself in logout.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "initiator/abort.h"
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/login.h"
#include "initiator/logout.h"
#include "initiator/orphan.h"
#include "initiator/relogin.h"
#include "initiator/rx.h"
#include "initiator/sched.h"
#include "initiator/session.h"
#include "initiator/snack.h"
#include "initiator/table.h"
#include "util/log.h"

#define INI_TICK_MS 200
/* At ERL >= 1 the tick also drives the recovery timer (snack.c): finer grained. */
#define INI_TICK_ERL_MS 10

static const struct lr_result res_ok = {.err = LR_OK};

static void session_tick(void *arg);

/* What a connection's events come to (conn.c calls these through s->conn_ops). */
static const struct ini_conn_ops session_conn_ops = {
    .connected = ini_session_conn_connected,
    .login_rx = ini_session_login_rx,
    .ffp_rx = ini_rx_ffp,
    .down = ini_session_conn_down,
};

unsigned lr_erl_max(void)
{
    return INI_ERL_IMPLEMENTED;
}

/* The caller's options with every unset one at its default, and the bounds applied. */
static void opts_defaults(struct lr_session_opts *o)
{
    if (!o->port)
        o->port = 3260;
    if (!o->connections)
        o->connections = 1;
    if (o->connections > LR_MAX_CONNECTIONS)
        o->connections = LR_MAX_CONNECTIONS;
    if (!o->max_recv_dsl)
        o->max_recv_dsl = 262144;
    if (!o->max_burst)
        o->max_burst = 262144;
    if (!o->first_burst)
        o->first_burst = 65536;
    if (!o->cmd_timeout_ms)
        o->cmd_timeout_ms = 30000;
    if (!o->login_timeout_ms)
        o->login_timeout_ms = 10000;
    if (!o->logout_timeout_ms)
        o->logout_timeout_ms = 5000;
    if (!o->max_tasks)
        o->max_tasks = 1024;
    if (o->max_tasks > 32768)
        o->max_tasks = 32768;
}

/* The CHAP credentials of o, checked and copied into cr (the caller's strings may go; ours are
 * wiped in session_free). -1, cr wiped: they do not fit or do not parse. */
static int chap_copy(struct chap_creds *cr, const struct lr_session_opts *o)
{
    if (!o->chap_user || !o->chap_user[0])
        return 0;
    size_t ul = strlen(o->chap_user), sl = o->chap_secret ? strlen(o->chap_secret) : 0;
    size_t mul = o->chap_mutual_user ? strlen(o->chap_mutual_user) : 0;
    size_t msl = o->chap_mutual_secret ? strlen(o->chap_mutual_secret) : 0;
    char err[128];
    if (ul > CHAP_NAME_MAX || sl == 0 || sl > CHAP_SECRET_MAX || mul > CHAP_NAME_MAX ||
        msl > CHAP_SECRET_MAX || (mul && !msl) ||
        (o->chap_algorithms &&
         chap_algs_parse(o->chap_algorithms, &cr->algs, err, sizeof(err)) < 0)) {
        chap_wipe(cr, sizeof(*cr));
        return -1;
    }
    memcpy(cr->user, o->chap_user, ul + 1);
    memcpy(cr->secret, o->chap_secret, sl);
    cr->secret_len = sl;
    if (mul) {
        memcpy(cr->mutual_user, o->chap_mutual_user, mul + 1);
        memcpy(cr->mutual_secret, o->chap_mutual_secret, msl);
        cr->mutual_secret_len = msl;
    }
    return 0;
}

/* What the session asks for in its logins (s->local), from the options. */
static void local_params(struct lr_session *s, const struct lr_session_opts *o)
{
    iscsi_params_default(&s->local);
    s->local.header_digest = o->header_digest;
    s->local.data_digest = o->data_digest;
    s->local.max_connections = s->o.connections;
    s->local.initial_r2t = o->initial_r2t;
    s->local.immediate_data = !o->no_immediate_data;
    s->local.max_recv_dsl = s->o.max_recv_dsl;
    s->local.max_burst = s->o.max_burst;
    s->local.first_burst = s->o.first_burst;
    s->local.erl = o->error_recovery_level;
    /* ERL 2: DefaultTime2Wait is how long a lost connection's tasks wait before the logout that
     * frees them for reassignment (RFC 7143 §13.15, result the larger of both offers). We need
     * no wait; a target that does answers more. Lower levels keep the default offer. */
    if (o->error_recovery_level >= 2)
        s->local.default_time2wait = 0;
}

/* ISID (RFC 7143 §11.12.5): type 0x80 "random" with a per-session qualifier, so that several
 * sessions of one initiator name are distinct I_T nexuses. */
static void isid_new(struct lr_session *s)
{
    static const uint8_t zero[6];
    if (memcmp(s->o.isid, zero, sizeof(zero)) != 0) {
        memcpy(s->isid, s->o.isid, sizeof(s->isid)); /* the caller's: a reinstatement */
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint32_t q = (uint32_t)ts.tv_nsec ^ (uint32_t)getpid() ^ (uint32_t)(uintptr_t)s;
    s->isid[0] = 0x80;
    s->isid[1] = (uint8_t)(q >> 24);
    s->isid[2] = (uint8_t)(q >> 16);
    s->isid[3] = (uint8_t)(q >> 8);
    s->isid[4] = (uint8_t)q;
    s->isid[5] = 0x01;
}

struct lr_session *lr_session_create(struct reactor *r, const struct lr_session_opts *o)
{
    if (o->error_recovery_level > INI_ERL_IMPLEMENTED) {
        errno = ENOTSUP;
        return NULL;
    }

    struct lr_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->r = r;
    s->o = *o;
    s->conn_ops = &session_conn_ops;
    snprintf(s->initiator_name, sizeof(s->initiator_name), "%s",
             o->initiator_name ? o->initiator_name : "iqn.2026-01.org.linerate:bench");
    snprintf(s->target_name, sizeof(s->target_name), "%s", o->target_name ? o->target_name : "");
    snprintf(s->host, sizeof(s->host), "%s", o->host ? o->host : "127.0.0.1");
    s->discovery = !o->target_name;
    opts_defaults(&s->o);
    if (chap_copy(&s->chap, o) < 0) {
        free(s);
        return NULL;
    }
    /* the caller's pointers are not kept */
    s->o.chap_user = s->o.chap_secret = s->o.chap_mutual_user = s->o.chap_mutual_secret = NULL;
    s->o.chap_algorithms = NULL;

    local_params(s, o);
    for (unsigned i = 0; i < LR_MAX_CONNECTIONS; i++)
        s->cr[i].logout_on = -1;
    iscsi_params_default(&s->params);
    isid_new(s);
    s->cmdsn = 1;
    s->expcmdsn = 1;
    s->maxcmdsn = 1;

    if (ini_table_init(s, s->o.max_tasks) < 0) {
        chap_wipe(&s->chap, sizeof(s->chap));
        free(s);
        return NULL;
    }
    s->next_conn = -1;
    list_init(&s->waitq);
    list_init(&s->resendq);
    list_init(&s->aborts);
    for (unsigned i = 0; i < s->o.connections; i++)
        if (s->o.conn_reactors[i] && s->o.conn_reactors[i] != r)
            s->mt = true;
    ini_lock_init(s);
    reactor_timer_start(r, &s->tick, INI_TICK_MS, session_tick, s);
    return s;
}

/* After login: each connection goes to its reactor (run on the session's reactor after the
 * events of the turn, so that no event of this turn is left for a connection that moved). */
static void session_spread(void *arg)
{
    struct lr_session *s = arg;
    ini_lock(s);
    /* a logout or destroy that came first in this turn keeps every connection here */
    for (unsigned i = 0; i < s->nconns && !s->logging_out && !s->destroyed; i++) {
        struct ini_conn *c = s->conns[i];
        struct reactor *to = s->o.conn_reactors[i];
        if (to && to != c->r && c->state == ICS_FFP)
            ini_conn_move(c, to);
    }
    ini_unlock(s);
}

static void conn_gathered(void *arg)
{
    struct lr_session *s = ((struct ini_conn *)arg)->s;
    ini_lock(s);
    bool last = --s->gathering == 0;
    void (*then)(struct lr_session *) = last ? s->gather_then : NULL;
    ini_unlock(s);
    if (then)
        then(s);
}

static void conn_move_home(void *arg)
{
    struct ini_conn *c = arg;
    struct lr_session *s = c->s;
    ini_lock(s);
    if (c->r != s->r)
        ini_conn_move(c, s->r);
    ini_unlock(s);
    reactor_post(s->r, &c->gathered_msg, conn_gathered, c);
}

static void conn_move_home_msg(void *arg)
{
    struct ini_conn *c = arg;
    /* after this turn's events: one of them may still be for this connection */
    reactor_defer(c->r, &c->move_d, conn_move_home, c);
}

/* Before logout and destroy: every connection back on the session's reactor, then then(s) runs
 * there. Unless all are home with no message of ours under way (then at once), each
 * connection's thread gets a message, home or not, and answers on the session's reactor:
 * reactor messages are FIFO, so every message queued for this session before (a hand-over, a
 * fail request) has run by then. Nothing blocks (a reactor thread waiting for another could
 * wait for itself: sessions share threads). */
static void session_gather(struct lr_session *s, void (*then)(struct lr_session *))
{
    unsigned sent = 0;
    ini_lock(s);
    bool again = s->gathering != 0;
    s->gather_then = then; /* a destroy during a logout's gather takes over */
    bool needed = s->msgs != 0;
    for (unsigned i = 0; i < s->nconns; i++)
        needed |= s->conns[i]->r != s->r;
    for (unsigned i = 0; needed && !again && i < s->nconns; i++) {
        struct ini_conn *c = s->conns[i];
        /* not pending: the last gather's messages have all run (gathering is back to 0) */
        if (reactor_post(c->r, &c->move_msg, conn_move_home_msg, c))
            sent++;
    }
    if (!again)
        s->gathering = sent;
    ini_unlock(s);
    if (!again && !sent)
        then(s);
}

static void session_free(struct lr_session *s)
{
    ini_lock(s); /* callbacks of aborted tasks run with it, as all callbacks do */
    s->destroyed = true;
    for (unsigned i = 0; i < s->nconns; i++)
        ini_conn_close(s->conns[i], "session destroyed");
    struct lr_result r = {.err = LR_ERR_ABORTED, .what = "session destroyed"};
    struct list_node *n;
    while ((n = list_pop(&s->resendq)) != NULL || (n = list_pop(&s->waitq)) != NULL) {
        struct ini_task *t = list_entry(n, struct ini_task, node);
        t->conn = NULL;
        ini_task_complete(s, t, &r);
    }
    for (uint32_t i = 0; i < s->ntasks; i++) /* ERL 2: waiting to be reassigned */
        if (s->tasks[i].state == ITS_ORPHAN)
            ini_task_complete(s, &s->tasks[i], &r);
    ini_abort_fail_all(s, LR_ERR_ABORTED, "session destroyed");
    ini_unlock(s);
    for (unsigned i = 0; i < s->nconns; i++) {
        for (struct ini_conn *c = s->conns[i], *next; c; c = next) {
            next = c->retired; /* earlier connections of the slot (ERL 2 reconnects) */
            reactor_undefer(&c->w.flush_hook);
            reactor_undefer(&c->move_d);
            reactor_undefer(&c->spread_d);
            reactor_undefer(&c->free_d);
            ini_conn_free(c);
        }
    }
    reactor_undefer(&s->spread_d);
    reactor_timer_stop(s->r, &s->tick);
    reactor_timer_stop(s->r, &s->logout_timer);
    chap_wipe(&s->chap, sizeof(s->chap));
    ini_table_free(s);
    ini_lock_destroy(s);
    free(s);
}

/* With connections on other threads still, the freeing (and the callbacks of aborted tasks)
 * happens once they are back, on the session's reactor. */
void lr_session_destroy(struct lr_session *s)
{
    if (!s)
        return;
    ini_lock(s);
    s->logging_out = true; /* no new command meanwhile */
    ini_unlock(s);
    session_gather(s, session_free);
}

void lr_session_get_info(const struct lr_session *cs, struct lr_session_info *info)
{
    struct lr_session *s = (struct lr_session *)cs; /* the lock is not part of the state */
    ini_lock(s);
    memset(info, 0, sizeof(*info));
    info->connections_asked = s->o.connections;
    info->connections_granted = s->granted;
    info->connections_up = ini_conns_up(s);
    const struct ini_conn *c0 = s->nconns ? s->conns[0] : NULL;
    info->header_digest = c0 && c0->w.hdigest;
    info->data_digest = c0 && c0->w.ddigest;
    info->immediate_data = s->params.immediate_data;
    info->initial_r2t = s->params.initial_r2t;
    info->max_burst = s->params.max_burst;
    info->first_burst = s->params.first_burst;
    info->peer_max_recv_dsl = c0 ? c0->peer_mrdsl : 0;
    info->max_recv_dsl = s->params.max_recv_dsl;
    info->max_outstanding_r2t = s->params.max_outstanding_r2t;
    info->tsih = s->tsih;
    info->cmdsn = s->cmdsn;
    info->expcmdsn = s->expcmdsn;
    info->maxcmdsn = s->maxcmdsn;
    info->erl = s->params.erl;
    info->time2wait = s->params.default_time2wait;
    info->time2retain = s->params.default_time2retain;
    info->recovering = ini_orphan_recovering(s) || ini_relogin_pending(s);
    ini_unlock(s);
}

bool lr_session_conn_recovering(const struct lr_session *cs, int i)
{
    struct lr_session *s = (struct lr_session *)cs;
    ini_lock(s);
    bool r = ini_relogin_pending(s);
    if (!r && i >= 0 && (unsigned)i < s->nconns && ini_orphan_recovering(s))
        r = s->cr[i].st != CR_NONE || (s->cr[i].up_once && s->conns[i]->state != ICS_FFP);
    ini_unlock(s);
    return r;
}

uint16_t lr_session_conn_port(const struct lr_session *cs, unsigned i)
{
    struct lr_session *s = (struct lr_session *)cs;
    ini_lock(s);
    uint16_t port = i < s->nconns && s->conns[i]->state != ICS_DEAD ? s->conns[i]->local_port : 0;
    ini_unlock(s);
    return port;
}

void lr_session_conn_kill(struct lr_session *s, unsigned i)
{
    /* As if the network dropped it: the peer sees a reset/FIN, we see the loss on next read.
     * (The socket is closed only under the lock, so the descriptor is still this one.) */
    ini_lock(s);
    if (i < s->nconns && s->conns[i]->w.fd >= 0)
        shutdown(s->conns[i]->w.fd, SHUT_RDWR);
    ini_unlock(s);
}

int lr_session_conn_logout_recovery(struct lr_session *s, unsigned i)
{
    ini_lock(s);
    int rc = ini_orphan_remove(s, i);
    ini_unlock(s);
    return rc;
}

void lr_session_conn_rx_hold(struct lr_session *s, unsigned i, bool on)
{
    ini_lock(s);
    if (i < s->nconns && s->conns[i]->w.fd >= 0)
        wire_rx_hold(&s->conns[i]->w, on);
    ini_unlock(s);
}

void lr_session_conn_tx_hold(struct lr_session *s, unsigned i, bool on)
{
    ini_lock(s);
    if (i < s->nconns && s->conns[i]->w.fd >= 0 && s->conns[i]->state != ICS_CONNECTING)
        wire_tx_hold(&s->conns[i]->w, on);
    ini_unlock(s);
}

int lr_session_set_faults(struct lr_session *s, const struct lr_faults *f)
{
    if (!(f->digest_error >= 0 && f->digest_error < 1 && f->drop_pdu >= 0 && f->drop_pdu < 1)) {
        errno = EINVAL;
        return -1;
    }
    ini_lock(s);
    s->faults = *f;
    /* connections that exist already (normally none: set before login) take them too */
    for (unsigned i = 0; i < s->nconns; i++)
        ini_conn_set_faults(s->conns[i]);
    ini_unlock(s);
    return 0;
}

void lr_session_fault_counts(const struct lr_session *cs, struct lr_fault_counts *out)
{
    struct lr_session *s = (struct lr_session *)cs; /* the lock is not part of the state */
    ini_lock(s);
    /* every connection the session ever had stays in conns[] (dead ones too) until it is
     * freed with the session, so their engines' counters add up to the session's */
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < s->nconns; i++)
        for (const struct ini_conn *c = s->conns[i]; c; c = c->retired) {
            out->digests_corrupted += c->w.stats.injected_digest_errors;
            out->pdus_dropped += c->w.stats.injected_drops;
        }
    ini_unlock(s);
}

/* ---- login ---- */

static void login_finish(struct lr_session *s)
{
    if (!s->login_done)
        return;
    lr_done_fn done = s->login_done;
    s->login_done = NULL;
    struct lr_result r = s->login_res;
    if (r.err == LR_OK) {
        s->logged_in = true;
        if (s->mt)
            reactor_defer(s->r, &s->spread_d, session_spread, s);
    }
    done(s->login_arg, &r);
}

static int send_login_pdu(struct ini_conn *c, const struct iscsi_bhs *req)
{
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    memcpy(p->hdr, req->b, ISCSI_BHS_LEN);
    uint32_t len = c->login.tx.len;
    void *copy = NULL;
    if (len) {
        copy = malloc(len);
        if (!copy)
            return INI_ERR_NOMEM;
        memcpy(copy, c->login.tx.data, len);
    }
    p->owned = copy;
    ini_conn_send(c, p, copy, len);
    return INI_OK;
}

int ini_session_conn_connected(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    bool leading = c->leading;
    ini_login_init(&c->login, &s->local, leading, s->discovery, s->initiator_name, s->target_name,
                   s->isid, leading ? 0 : s->tsih, c->cid, INI_LOGIN_ITT + c->idx, s->cmdsn);
    c->login.chap = &s->chap;
    /* ERL 2, a lost connection's CID logging in again: the first Login Request carries that
     * connection's ExpStatSN (RFC 7143 §11.12), so the target keeps none of its answers we
     * had, whose ITTs may name new commands by now. */
    if (c->reconnect && !leading && s->params.erl >= 2)
        c->login.expstatsn = s->cr[c->idx].expstatsn;
    c->login_active = true;
    struct iscsi_bhs req;
    if (ini_login_start(&c->login, &req) < 0)
        return INI_ERR_LOGIN;
    return send_login_pdu(c, &req);
}

static void conn_spread_one(void *arg)
{
    struct ini_conn *c = arg;
    struct lr_session *s = c->s;
    ini_lock(s);
    struct reactor *to = s->o.conn_reactors[c->idx];
    if (!s->logging_out && !s->destroyed && c->state == ICS_FFP && to && to != c->r)
        ini_conn_move(c, to);
    ini_unlock(s);
}

static int conn_logged_in(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    struct iscsi_params p;
    iscsi_neg_result(&c->login.neg, &p);
    reactor_timer_stop(s->r, &c->login_timer);
    /* Connection-scope results (RFC 7143 §13.1, §13.12); session-scope ones come from the
     * leading login only. */
    wire_set_digests(&c->w, p.header_digest, p.data_digest);
    wire_set_limits(&c->w, s->local.max_recv_dsl, 0);
    c->w.erl = (uint8_t)(c->leading ? p.erl : s->params.erl); /* session-wide (§13.20) */
    c->peer_mrdsl = p.peer_max_recv_dsl ? p.peer_max_recv_dsl : 8192;
    c->expstatsn = c->login.expstatsn;
    ini_snack_start(c);
    c->state = ICS_FFP;
    ini_login_free(&c->login);
    c->login_active = false;
    s->cr[c->idx].up_once = true;
    if (c->leading) {
        s->params = p;
        if (p.erl) /* the tick drives the recovery timer from now on: at its finer pace */
            reactor_timer_start(s->r, &s->tick, INI_TICK_ERL_MS, session_tick, s);
        s->tsih = c->login.tsih;
        s->expcmdsn = c->login.exp_cmdsn;
        s->maxcmdsn = c->login.max_cmdsn;
        s->granted = p.max_connections ? p.max_connections : 1;
        if (c->reconnect && s->logging_out) {
            /* lr_session_logout came while this login was under way: nothing to log out */
            return INI_END_LOGGED_OUT;
        }
        if (c->reconnect) {
            /* a new session after the target logged the old one out (relogin.c) */
            ini_relogin_done(c);
            if (s->mt)
                reactor_defer(s->r, &c->spread_d, conn_spread_one, c);
            ini_session_kick(s);
            return INI_OK;
        }
        unsigned want = s->o.connections;
        unsigned n = want < s->granted ? want : s->granted;
        if (want > 1 && n < want)
            LOG_WARN("initiator: target granted MaxConnections=%u of %u asked: using %u "
                     "connection%s",
                     s->granted, want, n, n == 1 ? "" : "s");
        for (unsigned i = 1; i < n; i++) {
            s->nlogins_pending++;
            if (!ini_conn_add(s)) {
                /* Not connected: its loss counted the login off already. Not even allocated
                 * (no memory): no login of it will end, so it is counted off here. */
                if (s->nconns == i)
                    s->nlogins_pending--;
                break;
            }
        }
        if (s->nlogins_pending == 0)
            login_finish(s);
        return INI_OK;
    }
    ini_session_update_window(s, c->login.exp_cmdsn, c->login.max_cmdsn);
    if (c->reconnect && (s->params.erl < 2 || s->asked_out[c->idx])) {
        ini_relogin_done(c);
        if (s->mt)
            reactor_defer(s->r, &c->spread_d, conn_spread_one, c);
    } else if (c->reconnect) {
        ini_orphan_login_done(c);
        /* to its thread, as session_spread did for the first ones */
        if (s->mt)
            reactor_defer(s->r, &c->spread_d, conn_spread_one, c);
    } else if (s->nlogins_pending && --s->nlogins_pending == 0) {
        login_finish(s);
    }
    ini_session_kick(s);
    return INI_OK;
}

int ini_session_login_rx(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen)
{
    struct iscsi_bhs req;
    enum ini_login_step st =
        ini_login_rx(&c->login, (const struct iscsi_bhs *)hdr, data, dlen, &req);
    switch (st) {
    case ILSTEP_SEND:
        return send_login_pdu(c, &req);
    case ILSTEP_DONE:
        return conn_logged_in(c);
    case ILSTEP_FAILED:
        break;
    }
    return INI_ERR_LOGIN;
}

/* A connection failed during login: the leading one fails the whole login; a later one only
 * shrinks the session. */
static void conn_login_lost(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    uint16_t status = c->login.status;
    reactor_timer_stop(s->r, &c->login_timer);
    ini_login_free(&c->login);
    c->login_active = false;
    if (s->destroyed)
        return;
    if (c->reconnect) {
        LOG_WARN("initiator: connection %u (cid %u) reconnect failed: %s%s%s", c->idx, c->cid,
                 c->fail_why, c->fail_errno ? ": " : "",
                 c->fail_errno ? strerror(c->fail_errno) : "");
        if (c->leading || s->params.erl < 2)
            ini_relogin_failed(c);
        else
            ini_orphan_login_failed(c);
        return;
    }
    if (c->leading) {
        if (c->fail_errno)
            LOG_WARN("initiator: %s:%u: %s: %s", s->host, s->o.port, c->fail_why,
                     strerror(c->fail_errno));
        struct lr_result r = {
            .err = status ? LR_ERR_LOGIN : LR_ERR_IO, .login_status = status, .what = c->fail_why};
        if (c->fail_why && strstr(c->fail_why, "timed out"))
            r.err = LR_ERR_TIMEOUT;
        s->login_res = r;
        login_finish(s);
        return;
    }
    if (status)
        LOG_WARN("initiator: connection %u login refused: status %u/%u (%s)", c->idx, status >> 8,
                 status & 0xff, c->fail_why);
    else
        LOG_WARN("initiator: connection %u login failed: %s%s%s", c->idx, c->fail_why,
                 c->fail_errno ? ": " : "", c->fail_errno ? strerror(c->fail_errno) : "");
    if (s->nlogins_pending && --s->nlogins_pending == 0)
        login_finish(s);
}

/* ---- connection loss (RFC 7143 §7.1.2 at ERL 0: tasks of the connection fail) ---- */

void ini_session_conn_down(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (c->login_active) {
        conn_login_lost(c);
        return;
    }
    ini_abort_conn_down(c); /* TMFs unanswered: sent again once their task is somewhere */
    if (!s->destroyed && !s->logging_out)
        LOG_WARN("initiator: connection %u (cid %u, port %u) lost: %s%s%s", c->idx, c->cid,
                 c->local_port, c->fail_why, c->fail_errno ? ": " : "",
                 c->fail_errno ? strerror(c->fail_errno) : "");
    /* Tasks handed over to it and not yet sent are its unsent commands, handled below. */
    struct list_node *n;
    /* ERL 2 (RFC 7143 §7.1.4): the target keeps the tasks of a lost connection for
     * reassignment, unless we logged the connection out ourselves ("close the connection"
     * terminates them, §11.14). */
    bool recover = s->params.erl >= 2 && c->w.erl >= 2 && s->logged_in && !s->destroyed &&
                   !s->logging_out && !c->logged_out;
    while ((n = list_pop(&c->inbox)) != NULL) {
        struct ini_task *t = list_entry(n, struct ini_task, node);
        if (t->reassign) {
            /* its TASK REASSIGN never left: it waits for another connection (orphan.c) */
            c->outstanding--;
            t->reassign = false;
            t->state = ITS_ORPHAN;
            t->conn = NULL;
            /* placed again with this slot's (the first slot's placing may be over) */
            t->orphan_slot = (uint8_t)c->idx;
            continue;
        }
        t->state = ITS_ACTIVE;
        t->conn = c;
        t->cmd_sent = false;
    }
    c->inbox_kicked = false;
    /* Asked to log out by the target (Async event 1): the slot or the session logs in again
     * (relogin.c). Said before the tasks complete, so that a callback's new command waits. */
    ini_relogin_conn_lost(c);
    uint64_t now = reactor_now_ms();
    unsigned expired = 0; /* ERL 2: tasks the target may hold that fail here, past deadline */
    for (uint32_t i = 0; i < s->ntasks; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state != ITS_ACTIVE || t->conn != c)
            continue;
        /* A task past its command timeout (the timeout may be what closed the connection) is
         * not kept for reassignment: a target that never answers it would have it reassigned,
         * with a fresh timeout, until Time2Retain. It fails below, its outcome unknown. */
        if (recover && (t->cmd_sent || t->reassigning) && t->deadline_ms > now) {
            c->outstanding--;
            t->state = ITS_ORPHAN;
            t->conn = NULL;
            t->orphan_slot = (uint8_t)c->idx;
            t->reassigning = false;
            continue;
        }
        if (!t->cmd_sent && !s->destroyed && !s->logging_out) {
            /* The command never fully left: the target cannot have it, so its CmdSN would be
             * a hole in the session's sequence. Send it again on another connection. */
            c->outstanding--;
            t->conn = NULL;
            t->state = ITS_WAITING;
            list_add_tail(&s->resendq, &t->node);
            continue;
        }
        expired += recover;
    }
    /* The slot's recovery is set up before any user callback runs (a callback may issue
     * commands, or log out): the tasks past their deadline still count there, as the target
     * keeps them for the lost connection until its cleanup Logout (§7.1.4, §11.14). */
    if (recover)
        ini_orphan_conn_down(c, expired);
    for (uint32_t i = 0; i < s->ntasks; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state != ITS_ACTIVE || t->conn != c)
            continue;
        struct lr_result r = {.err = LR_ERR_CONN_LOST, .what = c->fail_why};
        if (s->destroyed)
            r.err = LR_ERR_ABORTED;
        else if (c->fail_why && strstr(c->fail_why, "timeout"))
            r.err = LR_ERR_TIMEOUT;
        ini_task_complete(s, t, &r);
    }
    if (s->logging_out)
        ini_logout_conn_lost(c); /* may end the others, and the logout, from inside */
    if (s->logging_out && ini_conns_up(s) == 0 && s->logout_done) {
        lr_done_fn done = s->logout_done;
        s->logout_done = NULL;
        /* our Logout went out and was never answered: the user learns the session may still
         * be open on the target (§11.14.1: it ends there after Time2Retain at most) */
        struct lr_result r = res_ok;
        if (s->logout_req_sent && !s->logout_answered) {
            r.err = s->logout_timed_out ? LR_ERR_TIMEOUT : LR_ERR_CONN_LOST;
            r.what = s->logout_lost_why && !s->logout_timed_out ? s->logout_lost_why : c->fail_why;
        }
        done(s->logout_arg, &r);
        return;
    }
    if (!s->destroyed)
        ini_session_kick(s);
}

/* On a timeout, say where the session's CmdSN sequence stands: which of our tasks holds the
 * CmdSN the target expects next, and whether its command left our socket. A stalled window
 * with that command sent points at the target; one still queued here points at us. */
static void log_window(struct lr_session *s)
{
    for (uint32_t i = 0; i < s->ntasks; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state == ITS_FREE || !t->has_cmdsn || t->cmdsn != s->expcmdsn)
            continue;
        unsigned q = t->conn ? wire_tx_count(&t->conn->w) : 0;
        LOG_WARN("initiator: target ExpCmdSN %u MaxCmdSN %u, next CmdSN %u: CmdSN %u is task "
                 "%08x on connection %d, command %s (%u PDUs queued there)",
                 s->expcmdsn, s->maxcmdsn, s->cmdsn, t->cmdsn, t->itt,
                 t->conn ? (int)t->conn->idx : -1, t->cmd_sent ? "sent" : "NOT sent", q);
        return;
    }
    LOG_WARN("initiator: target ExpCmdSN %u MaxCmdSN %u, next CmdSN %u: no task of ours holds "
             "CmdSN %u",
             s->expcmdsn, s->maxcmdsn, s->cmdsn, s->expcmdsn);
}

static void session_tick(void *arg)
{
    struct lr_session *s = arg;
    ini_lock(s);
    uint64_t now = reactor_now_ms();
    /* While connections come back for logout or destroy, none is told to fail from here: the
     * message could reach its old thread after the move (the logout has its own timer). */
    for (uint32_t i = 0; i < s->ntasks && !s->gathering; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state == ITS_FREE || t->deadline_ms > now)
            continue;
        if (t->state == ITS_ACTIVE && t->conn && t->conn->fail_req) {
            continue; /* its connection was asked to fail (on its thread): once is enough */
        } else if (t->state == ITS_ACTIVE && t->conn) {
            /* ERL 0 has no task-level recovery worth the name: drop the connection, which
             * fails its tasks and keeps late answers from touching the caller's buffers. */
            LOG_WARN("initiator: task %08x (CmdSN %u, opcode 0x%02x, %u bytes, %u read in) "
                     "timed out on connection %u",
                     t->itt, t->cmdsn, t->cdb[0], t->len, t->data_in, t->conn->idx);
            log_window(s);
            ini_conn_close_any(t->conn, "command timeout");
        } else if (t->state == ITS_WAITING && !t->has_cmdsn) {
            list_del(&t->node);
            struct lr_result r = {.err = LR_ERR_TIMEOUT,
                                  .what = ini_conns_any_up(s) ? "no CmdSN window"
                                                              : "no connection to send it on"};
            ini_task_complete(s, t, &r);
        }
    }
    /* ERL >= 1: connections with no progress get a recovery round (snack.c) */
    for (unsigned i = 0; i < s->nconns && !s->gathering && !s->logging_out && !s->destroyed; i++)
        ini_snack_tick(s->conns[i], now);
    /* Logouts asked for (Async event 1) and ERL 2 connection recovery (orphan.c) */
    if (!s->gathering && !s->logging_out && !s->destroyed)
        ini_orphan_tick(s, now);
    /* logins after a logout the target asked for (relogin.c) */
    if (!s->gathering && !s->logging_out && !s->destroyed)
        ini_relogin_tick(s, now);
    /* lr_task_abort's: pending ones sent or settled (abort.c) */
    if (!s->gathering && !s->destroyed)
        ini_abort_tick(s, now);
    if (!s->destroyed)
        reactor_timer_start(s->r, &s->tick, s->params.erl ? INI_TICK_ERL_MS : INI_TICK_MS,
                            session_tick, s);
    ini_unlock(s);
}

/* ---- login / logout entry points ---- */

int lr_session_login(struct lr_session *s, lr_done_fn done, void *arg)
{
    if (s->nconns)
        return -1;
    s->login_done = done;
    s->login_arg = arg;
    s->login_res = res_ok;
    /* a failure to connect is reported through done(); no memory for the connection, here */
    if (!ini_conn_add(s) && s->nconns == 0) {
        s->login_done = NULL;
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

int lr_session_logout(struct lr_session *s, lr_done_fn done, void *arg)
{
    ini_lock(s);
    s->logout_done = done;
    s->logout_arg = arg;
    if (s->mt) {
        /* The logout runs once every connection is back on this thread, as in a one-thread
         * session; meanwhile no new command is taken. */
        s->logging_out = true;
        ini_unlock(s);
        session_gather(s, ini_logout_gathered);
        return 0;
    }
    int rc = ini_logout_start(s);
    if (rc < 0)
        s->logout_done = NULL; /* the caller has its answer: done() is not called later */
    ini_unlock(s);
    return rc;
}
