/* iSCSI sessions on the target: creation with a unique TSIH, the session table, reinstatement
 * by ISID (RFC 7143 §6.3.5), connections joining and leaving (MC/S), and the session-wide
 * CmdSN window: commands are handed to SCSI in CmdSN order whatever connection they arrive
 * on (§4.2.2.1), and MaxCmdSN grants at most ISCSI_CMD_WINDOW commands in flight. That orders
 * delivery only: each then runs as a SIMPLE task (a WRITE once its Data-Out is in) and may
 * complete before older ones. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/scsi_port.h"
#include "reactor/reactor.h"
#include "util/log.h"

static void session_free(struct iscsi_session *s)
{
    if (s->nexus)
        scsi_nexus_put(s->nexus);
    pthread_mutex_destroy(&s->lock);
    iostats_free(s->stats);
    free(s);
}

void session_put(struct iscsi_session *s)
{
    struct iscsi_server *srv = s->srv;
    pthread_mutex_lock(&srv->sessions_lock);
    bool last = atomic_fetch_sub(&s->refs, 1) == 1;
    pthread_mutex_unlock(&srv->sessions_lock);
    if (last)
        session_free(s);
}

/* The caller holds a reference already, so refs cannot reach 0 meanwhile: no lock needed,
 * and none taken, since callers hold s->lock (see refs in conn.h). */
void session_get(struct iscsi_session *s)
{
    atomic_fetch_add(&s->refs, 1);
}

struct iscsi_session *session_lookup(struct iscsi_server *srv, uint16_t tsih)
{
    struct iscsi_session *s = NULL;
    pthread_mutex_lock(&srv->sessions_lock);
    if (tsih < srv->sessions_cap && srv->sessions[tsih] && !srv->sessions[tsih]->closing) {
        s = srv->sessions[tsih];
        atomic_fetch_add(&s->refs, 1);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
    return s;
}

/* Discovery sessions from s's address. Called with sessions_lock held; there are at most
 * max-discovery-sessions of them, but they are found by a walk of the table. */
static unsigned discovery_sessions_from(struct iscsi_server *srv, const struct iscsi_session *s)
{
    unsigned n = 0, left = srv->ndiscovery;
    for (unsigned i = 1; i < srv->sessions_cap && left; i++) {
        const struct iscsi_session *o = srv->sessions[i];
        if (!o || !o->discovery)
            continue;
        left--;
        n += strcmp(o->addr, s->addr) == 0;
    }
    return n;
}

/* max-sessions and max-sessions-per-target for normal sessions, max-discovery-sessions and
 * max-discovery-sessions-per-address for discovery ones (docs/limits.md): a login past them
 * is refused with 0x0302 Out of resources (RFC 7143 §11.13.5). Called with sessions_lock
 * held. */
static bool session_limit_reached(struct iscsi_server *srv, const struct iscsi_session *s)
{
    const struct iscsi_limits *l = &srv->limits;
    const char *which = NULL;
    if (s->discovery) {
        if (l->max_discovery_sessions && srv->ndiscovery >= l->max_discovery_sessions)
            which = "max-discovery-sessions";
        else if (l->max_discovery_sessions_per_addr &&
                 discovery_sessions_from(srv, s) >= l->max_discovery_sessions_per_addr)
            which = "max-discovery-sessions-per-address";
    } else if (l->max_sessions && srv->nsessions - srv->ndiscovery >= l->max_sessions)
        which = "max-sessions";
    else if (s->node && l->max_sessions_per_target &&
             s->node->nsessions >= l->max_sessions_per_target)
        which = "max-sessions-per-target";
    if (!which)
        return false;
    unsigned sup;
    if (log_limit_allow(&srv->session_log, reactor_now_ms(), &sup)) {
        if (sup)
            LOG_WARN("%u more sessions refused (not logged)", sup);
        LOG_WARN("session of %s refused: %s reached (%u sessions)", s->initiator_name, which,
                 srv->nsessions);
    }
    return true;
}

static void session_table_count(struct iscsi_server *srv, struct iscsi_session *s, int delta)
{
    srv->nsessions += (unsigned)delta;
    if (s->discovery)
        srv->ndiscovery += (unsigned)delta;
    if (s->node)
        s->node->nsessions += (unsigned)delta;
}

/* A free TSIH; 0 is reserved (§11.12.6). Called with sessions_lock held. */
static int session_table_insert(struct iscsi_server *srv, struct iscsi_session *s)
{
    if (session_limit_reached(srv, s))
        return -1;
    for (unsigned tries = 0; tries < 65535; tries++) {
        uint16_t tsih = srv->next_tsih++;
        if (tsih == 0)
            continue;
        if (tsih >= srv->sessions_cap) {
            unsigned cap = srv->sessions_cap ? srv->sessions_cap * 2 : 64;
            while (cap <= tsih)
                cap *= 2;
            if (cap > 65536)
                cap = 65536;
            struct iscsi_session **t = realloc(srv->sessions, cap * sizeof(*t));
            if (!t)
                return -1;
            memset(t + srv->sessions_cap, 0, (cap - srv->sessions_cap) * sizeof(*t));
            srv->sessions = t;
            srv->sessions_cap = cap;
        }
        if (!srv->sessions[tsih]) {
            srv->sessions[tsih] = s;
            s->tsih = tsih;
            session_table_count(srv, s, 1);
            return 0;
        }
    }
    return -1;
}

struct iscsi_session *session_create(struct iscsi_conn *c, const struct iscsi_params *p)
{
    struct iscsi_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->srv = c->srv;
    s->node = c->discovery ? NULL : c->node;
    s->discovery = c->discovery;
    memcpy(s->isid, c->login_isid, 6);
    memcpy(s->initiator_name, c->neg.initiator_name, sizeof(s->initiator_name));
    conn_peer_addr(c, s->addr, sizeof(s->addr));
    s->params = *p;
    s->created_ms = reactor_now_ms();
    s->stats = iostats_new(); /* NULL (out of memory): the session just is not counted */
    pthread_mutex_init(&s->lock, NULL);
    list_init(&s->conns);
    list_init(&s->orphan_groups);
    /* The login request's CmdSN is the CmdSN of the first command (§11.12.7). */
    session_cmdsn_init(s, c->login_cmdsn);
    atomic_init(&s->refs, 1);
    if (s->node) {
        s->nexus = scsi_nexus_get(s->node->scsi, &iscsi_scsi_transport, s->initiator_name, s->isid);
        if (!s->nexus) {
            session_free(s);
            return NULL;
        }
    }
    pthread_mutex_lock(&c->srv->sessions_lock);
    int rc = session_table_insert(c->srv, s);
    pthread_mutex_unlock(&c->srv->sessions_lock);
    if (rc < 0) {
        session_free(s);
        return NULL;
    }
    return s;
}

void session_add_conn(struct iscsi_session *s, struct iscsi_conn *c)
{
    pthread_mutex_lock(&s->srv->sessions_lock);
    atomic_fetch_add(&s->refs, 1); /* each connection holds the session */
    pthread_mutex_unlock(&s->srv->sessions_lock);
    pthread_mutex_lock(&s->lock);
    orphans_supersede_locked(s, c->cid); /* this one is the CID's last connection now */
    list_add_tail(&s->conns, &c->session_node);
    s->nconns++;
    pthread_mutex_unlock(&s->lock);
    c->session = s;
    c->st_session = iostats_shard(s->stats, c->rid);
    c->w.digest_count[0] = c->st_session;
}

/* With s->lock: whether the session's end, seen now, is an I_T nexus loss to report (SAM-5
 * §6.3.4): it ends without a Logout (connection lost or timed out, closed by the target, or
 * reinstated) and was not seen ending before. */
static bool session_loss_due_locked(struct iscsi_session *s)
{
    bool due = s->nexus && !s->logged_out && !s->loss_done;
    s->loss_done = true;
    return due;
}

/* The session ends: out of the session table (if a reinstatement has not taken it out already),
 * and the table's reference dropped. */
static void session_table_remove(struct iscsi_session *s)
{
    struct iscsi_server *srv = s->srv;
    pthread_mutex_lock(&srv->sessions_lock);
    bool in_table = s->tsih < srv->sessions_cap && srv->sessions[s->tsih] == s;
    if (in_table) {
        srv->sessions[s->tsih] = NULL;
        session_table_count(srv, s, -1);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
    char ini[2 * ISCSI_NAME_MAX + 3];
    LOG_INFO("event=session-end initiator=%s%s%s tsih=%u",
             log_quote(ini, sizeof(ini), s->initiator_name), s->node ? " target=" : "",
             s->node ? s->node->name : "", s->tsih);
    if (in_table)
        session_put(s); /* the table's reference */
}

bool session_unused_locked(struct iscsi_session *s, bool *loss)
{
    *loss = false;
    if (s->nconns || !list_empty(&s->orphan_groups) || s->closing)
        return false;
    s->closing = true;
    *loss = session_loss_due_locked(s);
    return true;
}

void session_end(struct iscsi_session *s, bool loss)
{
    if (loss)
        scsi_nexus_loss_ua(s->nexus);
    session_table_remove(s);
}

/* A connection died (not logged out): the commands it carried and we never received can only
 * be ones the initiator could number by then, i.e. up to the MaxCmdSN granted so far (it never
 * shrinks, and CmdSNs past it are refused). Holes past that are not this death's. */
static void session_lost_conn_locked(struct iscsi_session *s)
{
    if (!s->lost_conn || sn_lt(s->lost_upto, s->max_cmdsn))
        s->lost_upto = s->max_cmdsn;
    s->lost_conn = true;
}

void session_note_lost_conn(struct iscsi_session *s)
{
    pthread_mutex_lock(&s->lock);
    session_lost_conn_locked(s);
    pthread_mutex_unlock(&s->lock);
}

void session_remove_conn(struct iscsi_session *s, struct iscsi_conn *c)
{
    pthread_mutex_lock(&s->lock);
    list_del(&c->session_node);
    struct scsi_join *closed = c->close_join;
    c->close_join = NULL;
    bool last = --s->nconns == 0, loss = false;
    if (last && !list_empty(&s->orphan_groups)) {
        /* ERL 2: tasks wait for reassignment; a login with this TSIH may still come (RFC 7143
         * §6.3.4, §7.2.2). The session ends when the last group expires (orphans_expire). */
        last = false;
        session_lost_conn_locked(s);
    } else if (last) {
        s->closing = true;
        loss = session_loss_due_locked(s);
    } else if (!c->logged_out) {
        session_lost_conn_locked(s); /* it died rather than logged out: session_check_gap() */
    }
    pthread_mutex_unlock(&s->lock);
    if (closed)
        scsi_join_done(closed); /* its teardown has aborted its commands */
    c->session = NULL;
    c->st_session = NULL; /* the session may go with the reference below */
    c->w.digest_count[0] = NULL;
    if (loss)
        scsi_nexus_loss_ua(s->nexus);
    if (last)
        session_table_remove(s);
    session_put(s); /* the connection's reference */
}

bool session_has_conn(struct iscsi_session *s, uint16_t cid)
{
    bool found = false;
    if (!s)
        return false;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *n = s->conns.next; n != &s->conns && !found; n = n->next)
        found = list_entry(n, struct iscsi_conn, session_node)->cid == cid;
    pthread_mutex_unlock(&s->lock);
    return found;
}

void session_close_other_conns(struct iscsi_session *s, struct iscsi_conn *keep)
{
    pthread_mutex_lock(&s->lock);
    for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
        struct iscsi_conn *c = list_entry(n, struct iscsi_conn, session_node);
        if (c != keep)
            conn_close_async(c, "session logged out");
    }
    pthread_mutex_unlock(&s->lock);
}

/* With s->lock: c, in the session, is asked to close; closed (if any) waits for it. */
static void close_counted_locked(struct iscsi_conn *c, struct scsi_join *closed, const char *why)
{
    if (closed && !c->close_join) {
        c->close_join = closed;
        scsi_join_add(closed); /* ended by session_remove_conn, after its teardown */
    }
    conn_close_async(c, why);
}

unsigned session_close_conn_by_cid(struct iscsi_session *s, uint16_t cid, bool terminate,
                                   const uint32_t *exp_statsn, struct scsi_join *closed)
{
    bool reached = false;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
        struct iscsi_conn *c = list_entry(n, struct iscsi_conn, session_node);
        if (c->cid != cid)
            continue;
        if (terminate) { /* read by its reactor once the close message runs */
            atomic_store(&c->terminate_tasks, true);
            atomic_store(&c->closed_by_logout, true);
        }
        /* The ExpStatSN is the last connection's with the CID (§11.14.4, §11.12), not a
         * reinstated one's still closing. Its teardown reads it when it publishes its group
         * (orphans_publish, under this lock); once that is done it would be read by nobody,
         * and the group takes it below. */
        if (exp_statsn && !c->superseded && !c->orphans_published) {
            atomic_store(&c->logout_exp_statsn, *exp_statsn);
            atomic_store(&c->logout_acked, true);
            reached = true;
        }
        close_counted_locked(c, closed,
                             terminate ? "connection logged out by another connection"
                                       : "connection reinstated or removed for recovery");
    }
    pthread_mutex_unlock(&s->lock);
    return exp_statsn && !reached ? orphans_ack_statsn(s, cid, *exp_statsn) : 0;
}

void session_close_conns_where(struct iscsi_server *srv,
                               bool (*match)(const struct iscsi_session *s,
                                             const struct iscsi_conn *c, const void *arg),
                               const void *arg, const char *why)
{
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s)
            continue;
        pthread_mutex_lock(&s->lock);
        for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
            struct iscsi_conn *c = list_entry(n, struct iscsi_conn, session_node);
            if (!match(s, c, arg))
                continue;
            /* a cold reset, a preempted nexus, shutdown: its tasks end with it (ERL 2) */
            atomic_store(&c->terminate_tasks, true);
            conn_close_async(c, why);
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
}

/* §6.3.5: a leading login with the ISID of a live session of the same initiator and target
 * ends that session (its tasks are aborted); the I_T nexus and its reservations survive, and
 * the nexus gets its I_T NEXUS LOSS OCCURRED UA now, before the new session's first command
 * (SAM-5 §6.3.4), not whenever the old connections finish closing. */
void session_reinstate(struct iscsi_server *srv, const char *initiator, const uint8_t isid[6],
                       struct iscsi_node *node, struct iscsi_conn *except, struct scsi_join *closed)
{
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s || s->node != node || memcmp(s->isid, isid, 6) != 0 ||
            strcmp(s->initiator_name, initiator) != 0)
            continue;
        char ini[2 * ISCSI_NAME_MAX + 3];
        LOG_INFO("event=session-reinstated initiator=%s target=%s tsih=%u",
                 log_quote(ini, sizeof(ini), initiator), node->name, s->tsih);
        srv->sessions[i] = NULL; /* the new session must not find it */
        session_table_count(srv, s, -1);
        pthread_mutex_lock(&s->lock);
        s->closing = true;
        if (session_loss_due_locked(s))
            scsi_nexus_loss_ua(s->nexus); /* takes the target lock, which nests in these */
        for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
            struct iscsi_conn *c = list_entry(n, struct iscsi_conn, session_node);
            if (c != except)
                close_counted_locked(c, closed, "session reinstatement");
        }
        /* ERL 2: tasks kept for reassignment end with the session (§11.14.5 d) */
        orphans_expire_all_locked(s, NULL);
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_sub(&s->refs,
                         1); /* the table's reference; the connections still hold theirs */
    }
    pthread_mutex_unlock(&srv->sessions_lock);
}

/* ---------------- a connection taking over ---------------- */

struct takeover {
    struct scsi_join closed; /* first: the join is the object */
    struct iscsi_conn *c;    /* the connection taking over (a reference) */
    struct scsi_target_wait tw;
    struct reactor_msg msg;
};

static void takeover_done(void *arg)
{
    struct takeover *h = arg;
    struct iscsi_conn *c = h->c;
    wire_rx_hold(&c->w, false);
    conn_put(c);
    free(h);
}

/* On c's reactor, every connection closed: the wait for the store. */
static void takeover_quiesce(void *arg)
{
    struct takeover *h = arg;
    struct iscsi_node *node = h->c->node;
    h->tw.fn = takeover_done;
    h->tw.arg = h;
    if (h->c->dead || !node || !scsi_target_quiesce(node->scsi, &h->tw))
        takeover_done(h);
}

static void takeover_closed(struct scsi_join *j)
{
    struct takeover *h = (struct takeover *)j;
    reactor_post(h->c->reactor, &h->msg, takeover_quiesce, h);
}

struct scsi_join *session_takeover_begin(struct iscsi_conn *c)
{
    struct takeover *h = calloc(1, sizeof(*h));
    if (!h) {
        LOG_WARN("%s: out of memory: the connections it replaces are not waited for", c->peer);
        return NULL;
    }
    atomic_init(&h->closed.n, 1);
    h->closed.fn = takeover_closed;
    conn_get(c);
    h->c = c;
    return &h->closed;
}

void session_takeover_end(struct scsi_join *closed)
{
    if (!closed)
        return;
    struct takeover *h = (struct takeover *)closed;
    /* Even when nothing closes for it: a connection lost a moment ago (reset, not reinstated)
     * may have left its aborted writes in the store, and the initiator logs in again to retry
     * them. */
    wire_rx_hold(&h->c->w, true);
    scsi_join_done(closed);
}

/* ---------------- CmdSN window ---------------- */

/* Taken CmdSNs (see struct iscsi_session) live in [ExpCmdSN, MaxCmdSN], at most
 * ISCSI_CMD_WINDOW apart, so sn % ISCSI_CMD_WINDOW names each one alone; a power of two keeps
 * that true across the 2^32 wrap. */
_Static_assert(ISCSI_CMD_WINDOW % 64 == 0 && (ISCSI_CMD_WINDOW & (ISCSI_CMD_WINDOW - 1)) == 0,
               "taken CmdSN bitmap");

static bool any_taken(const struct iscsi_session *s)
{
    uint64_t any = 0;
    for (unsigned i = 0; i < ISCSI_CMD_WINDOW / 64; i++)
        any |= s->taken[i];
    return any != 0;
}

static bool sn_is_taken(const struct iscsi_session *s, uint32_t sn)
{
    unsigned b = sn % ISCSI_CMD_WINDOW;
    return s->taken[b / 64] >> (b % 64) & 1;
}

static void sn_untake(struct iscsi_session *s, uint32_t sn)
{
    unsigned b = sn % ISCSI_CMD_WINDOW;
    s->taken[b / 64] &= ~(UINT64_C(1) << (b % 64));
}

static struct cmdsn_wait *pending_find(struct iscsi_session *s, uint32_t sn)
{
    for (struct list_node *n = s->pending.next; n != &s->pending; n = n->next) {
        struct cmdsn_wait *w = list_entry(n, struct cmdsn_wait, node);
        if (w->cmdsn == sn)
            return w;
    }
    return NULL;
}

void session_cmdsn_init(struct iscsi_session *s, uint32_t exp)
{
    list_init(&s->pending);
    s->exp_cmdsn = exp;
    s->max_cmdsn = exp + ISCSI_CMD_WINDOW - 1;
    s->in_flight = 0;
    memset(s->taken, 0, sizeof(s->taken));
    s->stalled_since_ms = 0;
}

static void session_update_max(struct iscsi_session *s)
{
    uint32_t want = s->exp_cmdsn + ISCSI_CMD_WINDOW - 1 - s->in_flight;
    if (sn_lt(s->max_cmdsn, want))
        s->max_cmdsn = want; /* never shrink what was granted */
}

void session_window(struct iscsi_session *s, uint32_t *exp, uint32_t *max)
{
    pthread_mutex_lock(&s->lock);
    session_update_max(s);
    *exp = s->exp_cmdsn;
    *max = s->max_cmdsn;
    pthread_mutex_unlock(&s->lock);
}

/* With the session lock held: a queued task's turn came. It moves to its connection's released
 * list (the same node, the same lock), and the connection gets one kick (a deferred call on its
 * own reactor, or one message to another) however many commands a burst releases. */
void session_release_task(struct cmdsn_wait *w)
{
    struct iscsi_task *t = list_entry(w, struct iscsi_task, wait);
    struct iscsi_conn *c = t->conn;
    list_add_tail(&c->released, &w->node);
    if (!c->release_kicked) {
        c->release_kicked = true;
        conn_get(c); /* dropped by conn_run_released() */
        if (reactor_self() == c->reactor)
            reactor_defer(c->reactor, &c->release_hook, conn_run_released, c);
        else
            reactor_post(c->reactor, &c->release_msg, conn_run_released, c);
    }
}

/* With the lock held: every queued command whose turn has come is released, in CmdSN order,
 * and ExpCmdSN steps over taken CmdSNs. */
static void session_drain_locked(struct iscsi_session *s)
{
    while (!list_empty(&s->pending) || any_taken(s)) {
        if (sn_is_taken(s, s->exp_cmdsn)) {
            sn_untake(s, s->exp_cmdsn);
            s->exp_cmdsn++;
            continue;
        }
        struct cmdsn_wait *w = pending_find(s, s->exp_cmdsn);
        if (!w)
            return;
        list_del(&w->node);
        s->exp_cmdsn++;
        w->release(w);
    }
}

/* With the lock held: CmdSN sn counts as received although no command will run with it. At
 * ExpCmdSN the window moves on at once; ahead of it the CmdSN is marked taken for
 * session_drain_locked() to step over. Nothing for a CmdSN outside the window (already passed,
 * or never granted) or one already received (a queued command has it, or it is taken). */
static void session_take_locked(struct iscsi_session *s, uint32_t sn)
{
    if (sn_lt(sn, s->exp_cmdsn) || sn_lt(s->max_cmdsn, sn))
        return;
    if (sn == s->exp_cmdsn) {
        s->exp_cmdsn++;
        session_drain_locked(s);
        return;
    }
    if (sn_is_taken(s, sn) || pending_find(s, sn))
        return;
    unsigned b = sn % ISCSI_CMD_WINDOW;
    s->taken[b / 64] |= UINT64_C(1) << (b % 64);
}

enum cmdsn_verdict session_cmdsn_check(struct iscsi_session *s, uint32_t cmdsn, bool immediate,
                                       struct cmdsn_wait *w)
{
    pthread_mutex_lock(&s->lock);
    if (immediate) {
        s->in_flight++;
        pthread_mutex_unlock(&s->lock);
        return CMDSN_RUN;
    }
    if (sn_lt(cmdsn, s->exp_cmdsn) || sn_lt(s->max_cmdsn, cmdsn)) {
        pthread_mutex_unlock(&s->lock);
        return CMDSN_OUTSIDE;
    }
    if (sn_is_taken(s, cmdsn)) {
        /* Already received: most likely the very command an ABORT TASK took before it came
         * (RFC 7143 §11.5.1 b), which must not run nor be answered; else a duplicate. */
        pthread_mutex_unlock(&s->lock);
        return CMDSN_RECEIVED;
    }
    s->in_flight++;
    if (cmdsn == s->exp_cmdsn) {
        s->exp_cmdsn++;
        session_drain_locked(s);
        pthread_mutex_unlock(&s->lock);
        return CMDSN_RUN;
    }
    /* Ahead of a gap (another connection's command is still on its way): wait. */
    if (pending_find(s, cmdsn)) { /* a duplicate within the window: ignore it (§4.2.2.1) */
        s->in_flight--;
        pthread_mutex_unlock(&s->lock);
        return CMDSN_OUTSIDE;
    }
    w->cmdsn = cmdsn;
    list_add_tail(&s->pending, &w->node);
    pthread_mutex_unlock(&s->lock);
    return CMDSN_QUEUED;
}

/* Remove a queued command (from the CmdSN queue or its connection's released list: the same
 * node, the same lock) whose connection is going away or that was aborted. One still waiting
 * for its turn was received all the same: its CmdSN stays taken, or the hole it left would hold
 * back every later command. */
void session_cmdsn_cancel(struct iscsi_session *s, struct cmdsn_wait *w)
{
    pthread_mutex_lock(&s->lock);
    list_del(&w->node);
    assert(s->in_flight > 0);
    s->in_flight--;
    /* Only non-immediate commands queue. Nothing for a released one: below ExpCmdSN. */
    session_take_locked(s, w->cmdsn);
    pthread_mutex_unlock(&s->lock);
}

void session_cmdsn_discard_locked(struct iscsi_session *s, struct cmdsn_wait *w)
{
    list_del(&w->node);
    assert(s->in_flight > 0);
    s->in_flight--;
}

/* At ExpCmdSN the window moves on; ahead of a gap (MC/S: an earlier command still on another
 * connection) the CmdSN is taken, so the window steps over it once the gap fills. */
void session_consume_cmdsn(struct iscsi_session *s, uint32_t cmdsn)
{
    pthread_mutex_lock(&s->lock);
    session_take_locked(s, cmdsn);
    pthread_mutex_unlock(&s->lock);
}

void session_cmd_done(struct iscsi_session *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->in_flight)
        s->in_flight--;
    pthread_mutex_unlock(&s->lock);
}

/* Below ERL 2 there is no connection recovery (RFC 7143 §7.1.5, §7.2.2: only ERL 2 moves a
 * task to another connection): commands that were on a connection when it died and never
 * reached us leave holes in the CmdSN sequence, and the commands behind a hole would wait
 * forever on the surviving connections. Once a connection of the session has died, a hole that
 * has held commands back for a grace period is taken as lost: ExpCmdSN jumps to the oldest
 * waiting command -- but never past lost_upto, the MaxCmdSN granted when a connection died:
 * a later CmdSN cannot have been on it. A hole past that is a command of a live connection,
 * which at ERL 1 the initiator retries on that connection (§7.2.1, a PDU dropped for its
 * header digest) and at ERL 0 never goes missing without its connection; skipping it would
 * drop the retry as outside the window. Once ExpCmdSN passes lost_upto the death is done
 * with. A gap holds only while ExpCmdSN stays where it was: with MC/S some command is nearly
 * always waiting for another connection's (each for microseconds), and such a queue that
 * never empties is traffic, not a hole. */
/* The Time2Wait the target honours. DefaultTime2Wait's result is the larger of both offers
 * (RFC 7143 §13.15, "Maximum"), so an initiator may make it 3600 s whatever the target says,
 * and the target would keep the orphaned tasks of a failed connection (and their buffers) for
 * Time2Wait + Time2Retain (§6.3.4, §11.15.2). It keeps them no longer than it is configured to
 * wait (its own default-time2wait): an initiator that waits longer finds them gone and TASK
 * REASSIGN answers "task does not exist" (§11.6.1), after which it retries the command.
 * Time2Retain needs no such bound: its result is the smaller offer (§13.16). The same value
 * is what the target reports in a Logout Response and an Async Message. */
uint32_t session_time2wait(const struct iscsi_session *s)
{
    uint32_t t2w = s->params.default_time2wait;
    if (s->node && t2w > s->node->params.default_time2wait)
        t2w = s->node->params.default_time2wait;
    return t2w;
}

/* At ERL 2 a command lost with its connection is retried by the initiator once it has
 * recovered (RFC 7143 §7.2: TASK REASSIGN answers "task does not exist" for it), which may take
 * Time2Wait and then up to Time2Retain: the hole is held that long before it is given up. */
static uint64_t session_gap_grace_ms(const struct iscsi_session *s)
{
    if (s->params.erl < 2)
        return ISCSI_GAP_GRACE_MS;
    uint64_t ms = 1000ull * (session_time2wait(s) + s->params.default_time2retain);
    return ms > ISCSI_GAP_GRACE_MS ? ms : ISCSI_GAP_GRACE_MS;
}

void session_check_gap(struct iscsi_session *s, uint64_t now_ms)
{
    pthread_mutex_lock(&s->lock);
    if (s->lost_conn && sn_lt(s->lost_upto, s->exp_cmdsn))
        s->lost_conn = false; /* every CmdSN the dead connection could carry is accounted for */
    if (!s->lost_conn || list_empty(&s->pending)) {
        s->stalled_since_ms = 0;
    } else if (!s->stalled_since_ms || s->stalled_exp != s->exp_cmdsn) {
        s->stalled_since_ms = now_ms;
        s->stalled_exp = s->exp_cmdsn;
    } else if (now_ms - s->stalled_since_ms >= session_gap_grace_ms(s)) {
        uint32_t oldest = list_entry(s->pending.next, struct cmdsn_wait, node)->cmdsn;
        for (struct list_node *n = s->pending.next; n != &s->pending; n = n->next) {
            uint32_t sn = list_entry(n, struct cmdsn_wait, node)->cmdsn;
            if (sn_lt(sn, oldest))
                oldest = sn;
        }
        /* A CmdSN taken inside the hole counts as received: only the ones before it are lost
         * (and ExpCmdSN must not jump over a taken bit, which would stay set behind it). */
        if (sn_lt(s->lost_upto + 1, oldest))
            oldest = s->lost_upto + 1; /* CmdSNs past it were never on the dead connection */
        for (uint32_t sn = s->exp_cmdsn; any_taken(s) && sn_lt(sn, oldest); sn++) {
            if (sn_is_taken(s, sn)) {
                oldest = sn;
                break;
            }
        }
        LOG_WARN("session TSIH %u of %s: CmdSN %u..%u lost with a dropped connection; "
                 "going on from %u",
                 s->tsih, s->initiator_name, s->exp_cmdsn, oldest - 1, oldest);
        s->exp_cmdsn = oldest;
        s->stalled_since_ms = 0;
        session_drain_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
}
