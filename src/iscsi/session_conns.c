/* A session's connections (RFC 7143 §6.3): a connection's session made at login, connections
 * joining and leaving (MC/S), and closing them by CID, by Logout, by reinstatement (§6.3.5) or
 * for a server-wide reason. Above the connection and the orphans; the session itself and its
 * CmdSN window are session.c's. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/orphan.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "reactor/reactor.h"
#include "util/log.h"

struct iscsi_session *session_create(struct iscsi_conn *c, const struct iscsi_params *p)
{
    char addr[sizeof(((struct iscsi_session *)0)->addr)];
    conn_peer_addr(c, addr, sizeof(addr));
    return session_new(c->srv, c->discovery ? NULL : c->node, c->discovery, c->login_isid,
                       c->neg.initiator_name, addr, p, c->login_cmdsn);
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
            /* closed_by_logout first, terminate_tasks after it with release: a reader that
             * sees terminate_tasks (acquire, conn.c conn_end_how) sees closed_by_logout too,
             * and never takes this Logout's close for a reset (C11 §5.1.2.4 synchronizes-with).
             * The other order left a window where it did. */
            atomic_store_explicit(&c->closed_by_logout, true, memory_order_relaxed);
            atomic_store_explicit(&c->terminate_tasks, true, memory_order_release);
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

void sessions_for_each(struct iscsi_server *srv, void (*fn)(struct iscsi_session *s, void *arg),
                       void *arg)
{
    pthread_mutex_lock(&srv->sessions_lock);
    for (unsigned i = 1; i < srv->sessions_cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s)
            continue;
        pthread_mutex_lock(&s->lock);
        fn(s, arg);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
}

struct close_where {
    bool (*match)(const struct iscsi_session *s, const struct iscsi_conn *c, const void *arg);
    const void *arg;
    const char *why;
};

static void close_conns_matching(struct iscsi_session *s, void *arg)
{
    const struct close_where *w = arg;
    for (struct list_node *n = s->conns.next; n != &s->conns; n = n->next) {
        struct iscsi_conn *c = list_entry(n, struct iscsi_conn, session_node);
        if (!w->match(s, c, w->arg))
            continue;
        /* a cold reset, a preempted nexus, shutdown: its tasks end with it (ERL 2) */
        atomic_store(&c->terminate_tasks, true);
        conn_close_async(c, w->why);
    }
}

void session_close_conns_where(struct iscsi_server *srv,
                               bool (*match)(const struct iscsi_session *s,
                                             const struct iscsi_conn *c, const void *arg),
                               const void *arg, const char *why)
{
    struct close_where w = {match, arg, why};
    sessions_for_each(srv, close_conns_matching, &w);
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
