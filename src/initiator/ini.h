/* Internals of the initiator shared by its files: the state (the login state machine, a
 * connection on the wire engine, a task, a session that spreads tasks over its connections
 * under one CmdSN window) and the predicates that only read it; each file's functions are in
 * its own header (conn.h for conn.c, ...). The files call one another from the top down only,
 * none back up, in this order (top first):
 *   discovery.c   SendTargets on a discovery session; URL parsing, error names
 *   session.c     the public session calls, connection logins and losses, the tick
 *   rx.c          each PDU of full feature phase to its handler; ERL 0's own handling
 *   orphan.c      ERL 2: a lost connection's tasks, reassigned (and Async Messages)
 *   relogin.c     logging in again after a logout the target asked for
 *   snack.c       ERL 1: SNACK, recovery R2T, Data-In holes, command retry
 *   sched.c       the CmdSN window, which connection a command goes on, the inboxes
 *   logout.c      Logout Requests and the session's logout
 *   abort.c       ABORT TASK asked by the caller (lr_task_abort)
 *   task.c        a task's PDUs: command, Data-Out, Data-In placement, status, reassign
 *   conn.c        one connection: connect, send, fail; it reaches the session through
 *                 s->conn_ops, never by name
 *   table.c, lock.c, login.c   the task table, the session lock, the login state machine */
#ifndef LR_INITIATOR_INI_H
#define LR_INITIATOR_INI_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "initiator/login.h"
#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "iscsi/pdu.h"
#include "iscsi/wire.h"
#include "linerate/initiator.h"
#include "linerate/initiator_test.h"
#include "reactor/reactor.h"
#include "util/list.h"

/* ---- the handler contract (the target's, iscsi/pdu.h enum iscsi_status) ---- */

/* What a handler of a PDU from the target returns, and every function that queues PDUs on a
 * connection. INI_OK: go on. Negative: the connection cannot go on; the caller fails it, in
 * one place (conn.c's dispatch, or ini_conn_fail on the paths outside it: timers, messages,
 * hand-overs), with the reason ini_status_str() names, which tasks failing with it report in
 * lr_result.what. Handlers never close their connection themselves; bad input from the target
 * ends that connection only. */
enum ini_status {
    INI_OK = 0,
    INI_ERR_NOMEM = -1,            /* a PDU could not be allocated */
    INI_ERR_LOGIN = -2,            /* the login failed: the login machine says why (login.why) */
    INI_ERR_UNEXPECTED_PDU = -3,   /* an opcode the target never sends in full feature phase */
    INI_ERR_TEXT_RSP = -4,         /* a Text Response to no Text Request of ours */
    INI_ERR_DATA_IN_RANGE = -5,    /* Data-In outside the task's buffer */
    INI_ERR_BAD_R2T = -6,          /* an R2T outside the task's data (§11.8) */
    INI_ERR_R2T_AGAIN = -7,        /* a recovery R2T below ErrorRecoveryLevel 1 */
    INI_ERR_PING_FLOOD = -8,       /* INI_PING_BACKLOG_MAX */
    INI_ERR_RESEND_FLOOD = -9,     /* INI_RESEND_BACKLOG_MAX */
    INI_ERR_ASYNC_DROP = -10,      /* Async event 2 below ERL 2 */
    INI_END_ASYNC_DROP_CONN = -11, /* Async event 2 at ERL 2: recovered */
    INI_END_ASYNC_DROP_ALL = -12,  /* Async event 3 at ERL 2: recovered */
    INI_END_LOGGED_OUT = -13,      /* our Logout of the session was answered */
    INI_END_ASKED_OUT = -14,       /* the Logout the target asked for closed the session */
    INI_END_CONN_LOGGED_OUT = -15, /* the Logout of this connection the target asked for */
    INI_END_RECOVERY_OUT = -16,    /* our Logout "remove for recovery" of it (ERL 2) answered */
};

/* ---- connections (conn.c) ---- */

struct ini_task;
struct lr_session;

/* StatSNs tracked from the first missing one (ERL >= 1; 8 KiB of bits, twice, per connection:
 * a lost response and its retransmission may take a few hundred thousand IOPS worth of
 * round trips); a jump past it is taken as is. A power of two. */
#define INI_STATSN_WINDOW 65536u
/* Missing DataSN runs a read task tracks (ERL >= 1); more fail the task as at ERL 0. */
#define INI_MISS_MAX 8

/* The ErrorRecoveryLevel the initiator performs (lr_erl_max). The target's own limit is
 * ISCSI_ERL_IMPLEMENTED (iscsi/keys.h): each end offers only what it does. */
#define INI_ERL_IMPLEMENTED 2u

enum ini_conn_state {
    ICS_IDLE,
    ICS_CONNECTING,
    ICS_LOGIN,
    ICS_FFP,
    ICS_LOGOUT,
    ICS_DEAD,
};

/* Ping data (NOP-In answers) a connection may hold unsent: far above any real target's pings
 * (a few bytes, every few seconds), far below what hurts. */
#define INI_PING_BACKLOG_MAX (1u << 20)
/* What recovery (ERL >= 1) may hold unsent for the target's asking: data asked for again (a
 * recovery R2T, or one below what was sent) and SNACKs, counted in bytes with a struct
 * wire_pdu for each PDU (what it costs us). A target asks for these without end if it likes; more
 * than this unsent means it does not read what it asked for. Far above what digest errors make a
 * real one ask again. */
#define INI_RESEND_BACKLOG_MAX (64u << 20)

struct ini_conn;

/* What a connection's events come to above conn.c (the session's, s->conn_ops): so conn.c,
 * which every file below the session calls, calls none of them by name. */
struct ini_conn_ops {
    int (*connected)(struct ini_conn *c); /* TCP connected: the first Login Request */
    int (*login_rx)(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen);
    int (*ffp_rx)(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                  bool data_digest_ok);
    void (*down)(struct ini_conn *c); /* the connection ended (ini_conn_close) */
};

struct ini_conn {
    struct lr_session *s;
    unsigned idx;
    uint16_t cid;
    /* The socket, receive machine and transmit queue (iscsi/wire.h). fd -1: detached (unit
     * tests feed bytes with wire_feed and inspect the queue). */
    struct wire w;
    enum ini_conn_state state;
    struct reactor *r; /* whose thread does this connection's I/O (session.c moves it) */
    /* Tasks handed over by another thread (they go out from this connection's thread) */
    struct list_node inbox;
    bool inbox_kicked;
    /* The kick, one per side of the last move: one still pending on the thread the connection
     * left (where it does nothing) must not swallow a kick meant for its new thread. Moves go
     * out and back (session_spread, session_gather), so a third side is never needed. */
    struct reactor_msg inbox_msg[2];
    unsigned moves;
    const char *fail_req; /* another thread asked this connection to fail */
    struct reactor_msg fail_msg;
    struct reactor_deferred move_d;
    struct reactor_msg move_msg, gathered_msg; /* session_gather(): there and back */
    uint16_t local_port;

    /* per-connection negotiated values (RFC 7143 §13: digests and MRDSL are per connection;
     * the digests themselves are w.hdigest / w.ddigest) */
    uint32_t peer_mrdsl;
    uint32_t expstatsn;
    uint32_t outstanding; /* tasks allegiant to this connection */

    uint64_t stale_pdus; /* responses for tasks we do not have */
    /* Bytes of ping data (NOP-In answers) queued and not yet sent: a target that pings
     * faster than it reads the answers is cut off at INI_PING_BACKLOG_MAX. */
    uint32_t ping_unsent;
    uint64_t resend_unsent; /* INI_RESEND_BACKLOG_MAX */
    uint64_t rejects;

    /* ErrorRecoveryLevel >= 1 (snack.c, RFC 7143 §7.8-§7.9): the StatSNs received beyond
     * expstatsn (bit k: expstatsn + k; held: received, but its task still misses data, so not
     * acknowledged yet, §7.9), one past the highest seen, and the quiet-period timer state. */
    uint64_t stat_got[INI_STATSN_WINDOW / 64];
    uint64_t stat_held[INI_STATSN_WINDOW / 64];
    uint32_t statsn_hi;
    uint64_t last_progress_ms; /* a PDU for one of our tasks arrived */
    uint64_t last_round_ms;    /* the last recovery round (ping, SNACKs again) */
    unsigned rounds;           /* recovery rounds since the last progress */
    uint64_t stuck_since_ms;   /* expstatsn has been stuck_at since, StatSNs missing */
    uint32_t stuck_at;
    bool rec_req;                  /* a recovery round was asked of this connection's thread */
    struct reactor_msg rec_msg[2]; /* that request, one per side of the last move */
    uint64_t snacks, retries;      /* SNACKs and command retries sent */

    /* ERL 2 and logout of one connection (orphan.c) */
    bool leading;   /* its login is the session's leading one (TSIH 0) */
    bool reconnect; /* a later login of a slot whose connection was lost (same CID, §6.3.4) */
    bool draining;  /* Async event 1: no new command; logged out once its tasks are done */
    bool logout_sent, logged_out; /* our Logout for this connection; its response said 0 */
    /* lr_session_conn_logout_recovery: its own Logout "remove the connection for recovery"
     * asked (sent once logout_sent); its tasks are reassigned elsewhere afterwards */
    bool recovery_out;
    uint64_t drain_deadline_ms;
    uint64_t logout_deadline_ms;    /* that Logout unanswered by then: the connection fails */
    bool erl2_req;                  /* connection recovery work asked of its thread */
    struct reactor_msg erl2_msg[2]; /* that request, one per side of the last move */
    struct reactor_deferred spread_d;
    struct ini_conn *retired; /* earlier connections of this slot, freed with the session */
    /* a retired connection's buffers, freed at the end of the loop turn that retired it (on
     * the session's reactor, which is where reconnects and the session's end run) */
    struct reactor_deferred free_d;

    struct ini_login login;
    bool login_active;
    struct reactor_timer login_timer;
    const char *fail_why;
    int fail_errno; /* errno of a socket failure, 0 otherwise */
};

/* ---- tasks (task.c) ---- */

/* ITS_ORPHAN (ERL 2): the command reached the target over a connection since lost; the task
 * waits, with no connection, to be reassigned (orphan.c). */
enum ini_task_state { ITS_FREE, ITS_WAITING, ITS_ACTIVE, ITS_ORPHAN };

struct ini_task {
    uint32_t itt; /* index | the slot's generation << itt_idx_bits (table.c) */
    enum ini_task_state state;
    struct ini_conn *conn;
    uint8_t cdb[16];
    uint8_t cdb_len;
    enum lr_dir dir;
    uint8_t *buf;
    uint32_t len;
    uint32_t cmdsn;
    bool has_cmdsn; /* CmdSN assigned (it must reach the target to keep the window going) */
    bool cmd_sent;  /* the SCSI Command PDU is entirely in the socket */
    /* Its command and Data-Out PDUs in t->conn's transmit queue (table.c): they point into
     * buf and at the task, so none may stay there once the task leaves the connection. */
    uint32_t queued;
    /* ERL 0: why the Data-In received cannot be trusted (the first reason seen; the task
     * fails with it), NULL while it can */
    const char *data_bad;
    uint32_t exp_datasn; /* one past the highest DataSN received */
    uint32_t data_in;    /* bytes received */
    /* ERL 0, a WRITE: where the data sent or solicited so far ends; an R2T below it asks for
     * data again, which only recovery (ERL >= 1) does */
    uint32_t solicited_end;
    /* ERL >= 1 (snack.c): Data-In DataSNs still missing (runs), the status that arrived
     * before them (completed once they have), the next R2TSN, a SNACK the target refused. */
    uint8_t nmiss;
    bool status_held, snack_refused, miss_overflow;
    bool snack_early; /* a Data SNACK refused before the status arrived: asked again then */
    uint32_t miss_beg[INI_MISS_MAX], miss_len[INI_MISS_MAX];
    uint32_t held_statsn;
    uint32_t exp_r2tsn;
    uint64_t retry_ms; /* last command retry */
    /* ERL 2 (orphan.c): the slot (= CID) of the connection it was allegiant to when that died;
     * in an inbox for a TASK REASSIGN (not the command); the TMF sent and not answered; the
     * next R2T sets the R2TSN expected (numbering after a reassignment is the target's);
     * reported as recovered (lr_result.recovered). */
    uint8_t orphan_slot;
    bool reassign, reassigning, r2tsn_resync, recovered;
    struct lr_result held;
    uint64_t deadline_ms;
    int want_conn; /* preferred connection index, -1 for any */
    lr_done_fn done;
    void *arg;
    struct list_node node; /* session wait queue */
};

/* ---- ErrorRecoveryLevel >= 1 (snack.c, RFC 7143 §7.1-§7.9, §11.16) ---- */

/* Any PDU from the target: the recovery timer's notion of progress. */
static inline void ini_snack_progress(struct ini_conn *c, uint64_t now)
{
    c->last_progress_ms = now;
    c->rounds = 0;
}
/* NOP-Out pings of the recovery timer: ITT INI_PING_ITT + connection index. */
#define INI_PING_ITT 0x80001000u

/* ---- ErrorRecoveryLevel 2: connection recovery (orphan.c, RFC 7143 §7.1.4, §7.2.2, §6.3.4,
 * §11.5.1, §11.9.1, §11.14-§11.15) ---- */

/* Where the cleanup of a lost connection's state at the target stands, per slot (= CID). */
enum ini_cr_state {
    CR_NONE,
    CR_WAIT,    /* Time2Wait running: no logout, reassignment or login for the CID yet */
    CR_LOGOUT,  /* Logout "remove the connection for recovery" sent on another connection */
    CR_RELOGIN, /* no other connection: a login with the same CID cleans up (reinstatement) */
    CR_CLEAN,   /* the target let go of the connection: its tasks are reassigned */
};

struct ini_cr {
    enum ini_cr_state st;
    uint64_t wait_until;   /* Time2Wait: nothing for this CID before */
    uint64_t retain_until; /* Time2Retain: its orphans fail after (0: none waiting) */
    uint32_t expstatsn;    /* the lost connection's: the Logout's ExpStatSN (§11.14) */
    bool must_clean;       /* the target may hold tasks of it that we failed: Logout even so */
    int logout_on;         /* slot carrying our Logout, -1 */
    bool logout_queued;
    uint64_t logout_sent_ms;
    bool async_set; /* Async event 2/3 gave Time2Wait/Time2Retain (§11.9.1) */
    uint32_t async_t2w, async_t2r;
    /* The connection's own Logout for recovery was answered 0 (§11.15): the target let go of
     * it already, and these are the answer's Time2Wait / Time2Retain */
    bool removed;
    uint32_t removed_t2w, removed_t2r;
    bool up_once;           /* the slot reached full feature phase once: restored when lost */
    uint64_t next_login_ms; /* next reconnect attempt */
    unsigned failed_logins;
};

/* ITTs of our own non-task requests (bit 31 set: never a task's) */
#define INI_LOGIN_ITT 0x80000000u   /* + slot: Login */
#define INI_LOGOUT_ITT 0x80000001u  /* Logout of the session */
#define INI_CLOGOUT_ITT 0x80000100u /* + slot: Logout of one connection */
#define INI_TMF_ITT 0x80010000u     /* + task index: TASK REASSIGN */
#define INI_ABORT_ITT 0x80020000u   /* + a 16-bit count: ABORT TASK (abort.c) */

/* ---- session (session.c) ---- */

struct lr_session {
    struct reactor *r;
    struct lr_session_opts o;
    char initiator_name[ISCSI_NAME_MAX + 1];
    char target_name[ISCSI_NAME_MAX + 1];
    char host[256];
    bool discovery;
    struct chap_creds chap;     /* CHAP credentials (user empty: none) */
    struct iscsi_params local;  /* what we ask for */
    struct iscsi_params params; /* what the leading login settled */
    uint8_t isid[6];
    uint16_t tsih;
    uint32_t cmdsn, expcmdsn, maxcmdsn;
    uint32_t granted;

    struct ini_conn *conns[LR_MAX_CONNECTIONS];
    unsigned nconns, nlogins_pending;
    unsigned rr;
    int next_conn;
    bool logged_in, logging_out, destroyed;
    /* our Logout of the session: sent, answered, given up (logout_timeout_ms) */
    bool logout_req_sent, logout_answered, logout_timed_out;
    /* ... the connection it went out on, its timer (the session's: that connection may be
     * lost first, logout.c), and why it was lost before the answer */
    struct ini_conn *logout_conn;
    struct reactor_timer logout_timer;
    const char *logout_lost_why;

    struct ini_task *tasks;
    uint32_t ntasks;
    unsigned itt_idx_bits; /* the low bits of an ITT that index tasks[] (table.c) */
    uint32_t *free_idx;
    uint32_t nfree;
    uint32_t inflight;
    struct list_node waitq;   /* tasks waiting for the CmdSN window or a connection */
    struct list_node resendq; /* tasks with a CmdSN whose command never left a dead connection */
    struct list_node aborts;  /* lr_task_abort's not yet settled (abort.c) */
    uint16_t abort_seq;
    struct reactor_timer tick;
    struct ini_conn *completing;          /* the connection whose task's callback is running */
    struct ini_cr cr[LR_MAX_CONNECTIONS]; /* ERL 2: per slot (= CID) */
    uint64_t erl2_giveup_ms; /* no connection up: nothing is tried after (0: some are up) */
    bool advancing, advance_again;
    /* Logged out at the target's request (relogin.c): the session to log in anew, or slots
     * to log in again (below ERL 2); login attempts and logouts in a row without a command
     * completed, both bounded. */
    bool reestablish;
    bool closing_session; /* a Logout "close the session" asked for is under way (orphan.c) */
    bool asked_out[LR_MAX_CONNECTIONS];
    unsigned relogin_tries, relogin_rounds;
    uint64_t relogin_next_ms;

    /* conn_reactors in use: the lock below and where connections live */
    bool mt;
    pthread_mutex_t mu; /* recursive */
    unsigned depth;     /* how deep the holder holds it (only the holder reads it) */
    struct reactor_deferred spread_d;
    unsigned gathering; /* connections still on their way back (session_gather) */
    unsigned msgs;      /* hand-over and fail messages sent and not yet run */
    void (*gather_then)(struct lr_session *s);

    lr_done_fn login_done, logout_done;
    void *login_arg, *logout_arg;
    struct lr_result login_res;

    /* lr_session_set_faults: applied by each connection's engine (ini_conn_set_faults), whose
     * counters lr_session_fault_counts sums */
    struct lr_faults faults;

    /* What becomes of a connection's events above conn.c (session.c sets it) */
    const struct ini_conn_ops *conn_ops;
    /* A discovery session's Text Responses (discovery.c sets it; NULL: none expected) */
    int (*text_rsp)(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen);
    void *text_arg;
};

/* ---- the task table's ITTs (table.c) ---- */

/* An ITT is a task slot's index in its low itt_idx_bits (as few as the slots need) and above
 * them, up to bit 30, the slot's generation: one more each time the slot takes a command. Bit
 * 31 stays clear: login, logout and TMF use tags above it.
 * An ITT must not come back while the target may still hold the task it named: at ERL 2 the
 * target keeps the tasks of a lost connection, answered ones included, for Time2Retain (20 s
 * by default), and a TASK REASSIGN finds them by ITT alone (RFC 7143 §11.5.1). A generation of
 * 15 bits shared by the session came round every 32768 commands, a fraction of a second, and
 * a reassignment then claimed a task of that name answered long before: its old status
 * completed the new command, which never ran, and the hole it left in the CmdSN sequence held
 * back every later command. A slot's own generation of 31 - itt_idx_bits bits comes round
 * after 2^21 commands of that slot at the default 1024 slots (2^25 for linerate-bench's QD +
 * 8), 2^16 at the most slots (32768). */
static inline uint32_t ini_itt_idx_mask(const struct lr_session *s)
{
    return (1u << s->itt_idx_bits) - 1;
}

/* The ITT slot idx takes next, from the one it had (0 for a slot never used). */
static inline uint32_t ini_itt_next(const struct lr_session *s, uint32_t idx, uint32_t prev)
{
    uint32_t gen_mask = 0x7fffffffu >> s->itt_idx_bits;
    uint32_t gen = ((prev >> s->itt_idx_bits) + 1) & gen_mask;
    return idx | gen << s->itt_idx_bits;
}

/* A free slot (the caller checked s->nfree) with its next ITT, zeroed otherwise. */
static inline struct ini_task *ini_task_take(struct lr_session *s)
{
    uint32_t idx = s->free_idx[--s->nfree];
    struct ini_task *t = &s->tasks[idx];
    uint32_t prev = t->itt;
    memset(t, 0, sizeof(*t));
    t->itt = ini_itt_next(s, idx, prev);
    return t;
}

/* ---- predicates over the state above (they read it, nothing more) ---- */

/* Whether any connection of s is in full feature phase; how many are. */
static inline bool ini_conns_any_up(const struct lr_session *s)
{
    for (unsigned i = 0; i < s->nconns; i++)
        if (s->conns[i]->state == ICS_FFP)
            return true;
    return false;
}

static inline unsigned ini_conns_up(const struct lr_session *s)
{
    unsigned n = 0;
    for (unsigned i = 0; i < s->nconns; i++)
        n += s->conns[i]->state == ICS_FFP;
    return n;
}

/* ERL 2 (orphan.c): a lost connection is being recovered, or a slot that was up may come
 * back, and the session has not given up on it by now. Commands are accepted meanwhile. */
static inline bool ini_orphans_recovering_at(const struct lr_session *s, uint64_t now)
{
    if (s->params.erl < 2 || !s->logged_in || s->logging_out || s->destroyed)
        return false;
    if (s->erl2_giveup_ms && now >= s->erl2_giveup_ms)
        return false;
    for (unsigned i = 0; i < s->nconns; i++)
        if (s->cr[i].st != CR_NONE || (s->cr[i].up_once && s->conns[i]->state != ICS_FFP))
            return true;
    return false;
}

static inline bool ini_orphan_recovering(const struct lr_session *s)
{
    return ini_orphans_recovering_at(s, reactor_now_ms());
}

/* relogin.c: the session logs in anew after a logout the target asked for. Commands are
 * accepted (they wait) meanwhile. */
static inline bool ini_relogin_pending(const struct lr_session *s)
{
    return s->reestablish && s->logged_in && !s->logging_out && !s->destroyed;
}

#endif
