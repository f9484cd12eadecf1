/* iSCSI sessions on the target: creation with a unique TSIH, the session table, the end of a
 * session (its connections are session_conns.c's), and the session-wide CmdSN window: commands are
 * handed to SCSI in CmdSN order whatever connection they arrive on (§4.2.2.1), and MaxCmdSN grants
 * at most ISCSI_CMD_WINDOW commands in flight. That orders delivery only: each then runs as a
 * SIMPLE task (a WRITE once its Data-Out is in) and may complete before older ones. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/scsi_port.h"
#include "iscsi/session.h"
#include "reactor/reactor.h"
#include "util/log.h"

static void session_free(struct iscsi_session *s)
{
    if (s->nexus)
        scsi_nexus_put(s->nexus);
    iscsi_host_limit_put(s->limit);
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
 * and none taken, since callers hold s->lock (see refs in session.h). */
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

void session_table_count(struct iscsi_server *srv, struct iscsi_session *s, int delta)
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

struct iscsi_session *session_new(struct iscsi_server *srv, struct iscsi_node *node, bool discovery,
                                  const uint8_t isid[6], const char *initiator, const char *addr,
                                  const struct iscsi_params *p, uint32_t cmdsn)
{
    struct iscsi_session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->srv = srv;
    s->node = node;
    s->discovery = discovery;
    memcpy(s->isid, isid, 6);
    snprintf(s->initiator_name, sizeof(s->initiator_name), "%s", initiator);
    snprintf(s->addr, sizeof(s->addr), "%s", addr);
    s->params = *p;
    s->created_ms = reactor_now_ms();
    s->stats = iostats_new(); /* NULL (out of memory): the session just is not counted */
    pthread_mutex_init(&s->lock, NULL);
    list_init(&s->conns);
    list_init(&s->orphan_groups);
    /* The login request's CmdSN is the CmdSN of the first command (§11.12.7). */
    session_cmdsn_init(s, cmdsn);
    atomic_init(&s->refs, 1);
    if (s->node) {
        s->nexus = scsi_nexus_get(s->node->scsi, &iscsi_scsi_transport, s->initiator_name, s->isid);
        if (!s->nexus) {
            session_free(s);
            return NULL;
        }
        s->limit = iscsi_node_host_limit(s->node, s->initiator_name);
    }
    pthread_mutex_lock(&srv->sessions_lock);
    int rc = session_table_insert(srv, s);
    pthread_mutex_unlock(&srv->sessions_lock);
    if (rc < 0) {
        session_free(s);
        return NULL;
    }
    return s;
}

/* With s->lock: whether the session's end, seen now, is an I_T nexus loss to report (SAM-5
 * §6.3.4): it ends without a Logout (connection lost or timed out, closed by the target, or
 * reinstated) and was not seen ending before. */
bool session_loss_due_locked(struct iscsi_session *s)
{
    bool due = s->nexus && !s->logged_out && !s->loss_done;
    s->loss_done = true;
    return due;
}

/* The session ends: out of the session table (if a reinstatement has not taken it out already),
 * and the table's reference dropped. */
void session_table_remove(struct iscsi_session *s)
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
void session_lost_conn_locked(struct iscsi_session *s)
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

static void session_window_locked(struct iscsi_session *s, uint32_t *exp, uint32_t *max)
{
    session_update_max(s);
    *exp = s->exp_cmdsn;
    *max = s->max_cmdsn;
}

void session_window(struct iscsi_session *s, uint32_t *exp, uint32_t *max)
{
    pthread_mutex_lock(&s->lock);
    session_window_locked(s, exp, max);
    pthread_mutex_unlock(&s->lock);
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

/* A command's status goes out: it leaves the window, and the status carries the window as it
 * is then (ExpCmdSN, MaxCmdSN: RFC 7143 §4.2.2.1). One hold of the lock for both, not two: every
 * command's status takes it, and it was a third of the session lock's traffic per READ. */
void session_cmd_done_window(struct iscsi_session *s, uint32_t *exp, uint32_t *max)
{
    pthread_mutex_lock(&s->lock);
    if (s->in_flight)
        s->in_flight--;
    session_window_locked(s, exp, max);
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
