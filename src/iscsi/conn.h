/* Target-side iSCSI connections (conn.c): the target's side of the wire engine (iscsi/wire.h
 * moves the bytes), a connection's lifetime, what it sends, and the PDU dispatch. */
#ifndef LR_ISCSI_CONN_H
#define LR_ISCSI_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "iscsi/keys.h"
#include "iscsi/node.h"
#include "iscsi/pdu.h"
#include "iscsi/pending.h"
#include "iscsi/rsp_ring.h"
#include "iscsi/session.h"
#include "iscsi/wire.h"
#include "reactor/reactor.h"
#include "scsi/scsi.h"
#include "util/list.h"

/* Our own limits (what we declare / accept at most); ISCSI_TARGET_MRDSL_MAX,
 * ISCSI_MAX_CONNECTIONS and ISCSI_MAX_R2T are in node.h, where the configuration sees them. */
#define ISCSI_RXBUF_SIZE (256u * 1024u)
/* Until login completes requests carry at most 8 KiB of data (RFC 7143 §13.12): a small
 * receive buffer keeps each pending connection cheap; it grows at full feature phase. */
#define ISCSI_RXBUF_LOGIN_SIZE (16u * 1024u)
#define ISCSI_TASK_HASH_SIZE 256u
/* Bytes of command buffers (stores that are not RAM) one connection may hold at once. */
#define ISCSI_CONN_BUF_BUDGET (64u << 20)

struct iscsi_conn;
struct iscsi_session;
struct iscsi_auth;

/* ---------- transmit ---------- */

/* A PDU to send is the wire engine's (iscsi/wire.h): header, data from wherever it lives,
 * `sent` once the bytes are on the socket (or the connection died). */
_Static_assert(WIRE_DATA_IOV_MAX == SCSI_TASK_IOV_MAX, "Data-In is sent from a task's iovecs");

/* ---------- connections ---------- */

enum conn_phase {
    CONN_LOGIN,
    CONN_FFP,
    CONN_LOGGED_OUT, /* logout answered: close once flushed */
    CONN_CLOSING,
};

/* How a connection ended, decided once as conn_close() begins (from what its own Logout and
 * other threads left in it: a Logout on another connection, a reset, shutdown) and read by
 * the end hooks: whether its tasks are kept for reassignment at ERL 2 (RFC 7143 §7.2.2), and
 * whether their end is reported to the nexus (§11.14.5).
 *
 *   CONN_END_NONE ── conn_close() ──┬──> LOST        failed, timed out, dropped, reinstated at
 *   (still open)                    │                ERL 2: tasks kept (ERL 2) or ended, reported
 *                                   ├──> LOGOUT      its own Logout "close the connection" or
 *                                   │                "close the session": ended, reported
 *                                   ├──> RECOVERY    its own Logout "remove for recovery": kept
 *                                   ├──> NAMED       closed by a Logout on another connection, or
 *                                   │                a reinstatement below ERL 2: ended, reported
 *                                   └──> TERMINATED  a reset, a preempted nexus, shutdown (or its
 *                                                    own recovery Logout crossed by one naming
 *                                                    it): ended, nothing reported
 */
enum conn_end {
    CONN_END_NONE,
    CONN_END_LOST,
    CONN_END_LOGOUT,
    CONN_END_RECOVERY,
    CONN_END_NAMED,
    CONN_END_TERMINATED,
};

/* Hooks run at a connection's end: its tasks, its login state, its place in the session. */
#define CONN_END_HOOKS 3u

/* What the layer above gives a connection when it makes one (dispatch.c): the wire engine's
 * callbacks (the PDU dispatch), and what conn_close() runs, in this order, once the socket is
 * closed, so that this file calls none of the modules above it. */
struct conn_ops {
    struct wire_ops wire;
    void (*end[CONN_END_HOOKS])(struct iscsi_conn *c);
    /* Run as the last reference goes, on its reactor, before c is freed (NULL: nothing). */
    void (*free)(struct iscsi_conn *c);
};

struct iscsi_conn {
    struct iscsi_server *srv;
    const struct conn_ops *ops;
    struct reactor *reactor;
    /* The socket, receive machine and transmit queue (iscsi/wire.h). */
    struct wire w;
    char peer[64];
    uint8_t peer_addr[16]; /* source address (IPv4 in the first 4 bytes) for the limits */
    uint8_t peer_addr_len; /* 4, 16, or 0 if unknown */
    bool pending_counted;  /* counted in the server's pending logins until login ends */
    uint64_t accept_ms;    /* the login deadline runs from here */
    const struct iscsi_portal_addr *portal;
    /* This reactor's shards of the session's and portal's counters (util/iostats.h), and the
     * reactor id that picks a LUN's; NULL when there are none. Reactor-local writes only. */
    int rid;
    struct iostats_shard *st_session, *st_portal;
    enum conn_phase phase;
    uint16_t cid;
    struct iscsi_session *session;
    struct list_node session_node;
    atomic_int refs; /* pending completions and cross-thread messages */
    /* conn_close_async: the first reason given wins, and it is posted once (never reset) */
    _Atomic(const char *) close_why;
    struct reactor_msg close_msg;

    /* login */
    struct iscsi_neg neg;
    struct iscsi_text login_in;  /* request text accumulated over C-bit PDUs */
    struct iscsi_text login_out; /* response text still to send over C-bit PDUs */
    uint32_t login_out_off;
    enum iscsi_stage login_stage; /* current stage */
    bool login_started;           /* first Login Request seen */
    bool login_first_done;        /* first request processed (identity checked, TPGT given) */
    uint8_t login_rsp_flags;      /* T/NSG of the response being sent in chunks */
    uint8_t login_isid[6];
    uint16_t login_tsih;
    uint32_t login_itt;
    uint32_t login_cmdsn;     /* of the last Login Request: ExpCmdSN until the session exists */
    uint32_t login_expstatsn; /* of the first: the old connection's, on a restart (§11.12) */
    struct iscsi_node *node;  /* target chosen at login (NULL for discovery) */
    bool discovery;
    uint64_t last_text_ms;   /* discovery: the last Text request (discovery-idle-timeout) */
    struct iscsi_auth *auth; /* CHAP exchange (iscsi/auth.h); NULL when not required */

    /* negotiated */
    bool hdigest, ddigest;
    uint32_t max_recv_dsl; /* ours */
    uint32_t max_send_dsl; /* the peer's */

    /* sequence numbers */
    uint32_t statsn;
    uint32_t exp_statsn; /* from the initiator */

    /* The PDU being received is the engine's, c->w.in: given to conn_pdu_header() once its
     * header is in and to conn_pdu_done() once its data segment is. Its `task`, when set,
     * holds a reference (released by conn_pdu_done() or by conn_close()). */
    struct log_limit log_rl; /* lines this peer can cause per PDU (rejects) */

    /* tasks */
    struct iscsi_task *task_hash[ISCSI_TASK_HASH_SIZE];
    struct list_node tasks; /* every task of this connection */
    /* ERL 2: orphans claimed here (TASK REASSIGN, ABORT TASK) while the store still had them,
     * on their way to this connection (orphans_claim CLAIM_LATER until cmd_orphan_arrive):
     * in no group and not in tasks, yet the session's, so ABORT TASK looks here too. This
     * connection's thread only. */
    struct list_node arriving;
    struct list_node task_free;
    unsigned ntasks;
    uint64_t buf_bytes; /* command buffers held by this connection's tasks */
    /* MC/S ordering: tasks whose CmdSN turn came while they waited (session->lock guards the
     * list and the flag); run on this connection's reactor by exec_run_released(). */
    struct list_node released;
    bool release_kicked;
    struct reactor_deferred release_hook; /* the kick from this connection's own reactor */
    struct reactor_msg release_msg;       /* the kick from another thread */
    uint32_t next_ttt;
    /* ERL >= 1: answered tasks whose StatSN the initiator has not acknowledged yet, in StatSN
     * order; each holds a task reference (the protocol side's, kept). Released from the head
     * as ExpStatSN advances (§4.2.2.2). */
    struct list_node retained;
    unsigned nretained;
    /* StatSNs below retain_floor were let go unacknowledged (the bound): a SNACK for one is
     * refused (valid once retain_dropped) */
    uint32_t retain_floor;
    bool retain_dropped;
    /* ERL >= 1: copies of the last responses that used a StatSN and are not a task's (Reject,
     * NOP-In, TMF, Text, Logout), for a Status SNACK (snack.c, rsp_ring.c). */
    struct rsp_ring rsp_ring;

    /* --inject (the server's, handed over at accept): kill-connection runs on inject_timer,
     * digest-error and drop-pdu are for the transmit path */
    struct inject_spec inject;
    struct reactor_timer inject_timer;

    /* liveness */
    struct reactor_timer timer;
    uint64_t last_rx_ms;
    uint64_t last_rx_ns;    /* when the read that brought the last PDU header returned */
    uint64_t tick_tx_bytes; /* w.stats.tx_bytes at the last tick (rsp_unpin_stalled) */
    uint64_t tick_txq_data; /* w.txq_data at the last tick */
    uint64_t logged_out_ms; /* the first tick that saw CONN_LOGGED_OUT (its close deadline) */
    bool nop_outstanding;
    uint64_t nop_sent_ms;
    uint32_t nop_ttt;

    /* Set while cmd_exec() hands a task to the SCSI core: a completion that runs inside that
     * call leaves its status here instead of closing the connection under the caller. */
    int *exec_status;

    struct reactor_deferred free_hook; /* the last reference dropped on the owner's thread */
    struct reactor_msg free_msg;       /* ... or on another one */
    bool dead;
    enum conn_end end; /* set once, as conn_close() begins */
    bool logged_out;   /* closed after a Logout of its own, not dropped */
    /* Set by other threads before they ask it to close, read once into `end`: its tasks end
     * with it (a Logout "close the connection" from another connection, RFC 7143 §11.14.5 a;
     * a reset, a preempted nexus, shutdown), rather than being kept for reassignment. */
    atomic_bool terminate_tasks;
    /* ... because a Logout "close the connection" (§11.14.1 reason 1) sent on another
     * connection, or a reinstatement below ERL 2 (§6.3.4: the same, implicitly), named it */
    atomic_bool closed_by_logout;
    /* ... and a Logout for it sent on another connection acknowledged the StatSNs below
     * logout_exp_statsn (its ExpStatSN field, §11.14.4): answered tasks it covers are done
     * with, not kept for reassignment. Set before the close message, read by its reactor. */
    atomic_bool logout_acked;
    /* A connection taking over waits for this one's close (session_takeover_begin); set and
     * taken under the session's lock */
    struct scsi_join *close_join;
    _Atomic uint32_t logout_exp_statsn;
    /* ERL 2 (s->lock): a newer connection with this CID joined the session (a reinstatement),
     * so a Logout or login naming the CID means that one, not this; and this one's orphan
     * group is published already, so an acknowledgement stored here now would never be read
     * (session_close_conn_by_cid then acknowledges in the group) */
    bool superseded, orphans_published;
    bool recovery_logout; /* logged out with reason 2: its tasks are kept */
    bool async_drop;      /* an Async Message "will drop" is queued: close once it is out */
};

/* A line a peer can cause at will, one per PDU (a reject, a TMF, a broken Data-Out sequence):
 * through the connection's limiter, on the connection's own thread. */
#define CONN_LOG_LIMITED(c, level, ...)                                                            \
    do {                                                                                           \
        unsigned sup_;                                                                             \
        if (log_limit_allow(&(c)->log_rl, reactor_now_ms(), &sup_)) {                              \
            if (sup_)                                                                              \
                log_msg(level, "%s: %u more lines not logged", (c)->peer, sup_);                   \
            log_msg(level, __VA_ARGS__);                                                           \
        }                                                                                          \
    } while (0)

/* A line about a connection still in login (its refusal, its close): connecting costs a peer
 * nothing, so these go through one server-wide limiter; lines about logged-in connections do
 * not. */
#define CONN_LOG_LOGIN(c, level, ...)                                                              \
    do {                                                                                           \
        unsigned sup_;                                                                             \
        if (!(c)->pending_counted) {                                                               \
            log_msg(level, __VA_ARGS__);                                                           \
        } else if (iscsi_server_log_allow((c)->srv, &sup_)) {                                      \
            if (sup_)                                                                              \
                log_msg(level, "%u more lines about connections not logged in not logged", sup_);  \
            log_msg(level, __VA_ARGS__);                                                           \
        }                                                                                          \
    } while (0)

/* conn.c */

/* A connection's fields before it has a socket: login phase, login-sized buffers, empty
 * queues, counted in the server and the reactor's load. NULL when memory ran out. */
struct iscsi_conn *conn_new(struct iscsi_server *srv, struct reactor *r,
                            const struct iscsi_portal_addr *portal, const struct conn_ops *ops);
/* The connection is no longer one waiting to log in (logged in, or closing). */
void conn_pending_done(struct iscsi_conn *c);

/* Close for a negative status (its reason from iscsi_status_str()); nothing for ISCSI_OK. For
 * the dispatcher and for asynchronous paths that queue PDUs outside it (store completions,
 * timers, cross-thread messages). Returns status. */
int conn_fail(struct iscsi_conn *c, int status);

/* ERL 2: Async Message event 2, "the target will drop this connection" (RFC 7143 §11.9.1:
 * Parameter1 the CID, Parameter2 Time2Wait, Parameter3 Time2Retain); the connection reads no
 * more and closes once it is out. ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_async_drop(struct iscsi_conn *c);
/* Entered full feature phase in a normal session: arm --inject kill-connection, if asked. */
void conn_inject_start(struct iscsi_conn *c);
void conn_send(struct iscsi_conn *c, struct wire_pdu *p);
struct wire_pdu *conn_tx_alloc(struct iscsi_conn *c);
/* A PDU with its BHS started (opcode, flags); NULL when memory ran out (the caller returns
 * ISCSI_ERR_NOMEM). */
struct wire_pdu *conn_pdu_new(struct iscsi_conn *c, enum iscsi_opcode op, uint8_t flags);
/* A response PDU with its Response byte and the request's ITT set, to be completed; NULL when
 * memory ran out. */
struct wire_pdu *conn_response_new(struct iscsi_conn *c, enum iscsi_opcode op,
                                   const struct iscsi_bhs *req, uint8_t response);
/* A response that carries only a Response byte, the request's ITT and the sequence numbers
 * (TMF, Logout). ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_response(struct iscsi_conn *c, enum iscsi_opcode op, const struct iscsi_bhs *req,
                       uint8_t response);
/* Queue a PDU with a copy of `data` (text, sense, reject): header must be filled except the
 * data segment length, which is set here. ISCSI_OK, or ISCSI_ERR_NOMEM with p released (its
 * `sent` called with ok = false). */
int conn_send_copy(struct iscsi_conn *c, struct wire_pdu *p, const void *data, uint32_t len);
/* The peer's address without the port: what the CHAP back-off and the discovery sessions per
 * address count by. */
void conn_peer_addr(const struct iscsi_conn *c, char *out, size_t len);
void conn_close(struct iscsi_conn *c, const char *why);
/* A NOP-In ping (TTT set, no StatSN consumed, §11.19) whose answer the liveness timer waits
 * for; its ExpStatSN also releases retained tasks. ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_nop_ping(struct iscsi_conn *c);
/* RFC 7143 §11.17. ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_reject(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason);
/* Fill StatSN (and advance it if `advance`), ExpCmdSN and MaxCmdSN of a response header. */
void conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance);
/* conn_fill_sn with the window (ExpCmdSN, MaxCmdSN) the caller already read. */
void conn_put_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance, uint32_t exp,
                 uint32_t max);
void conn_get(struct iscsi_conn *c);
/* From any thread: the connection is freed on its own reactor's thread. */
void conn_put(struct iscsi_conn *c);
void conn_on_event(void *arg, uint32_t events);
/* Close from any thread: hops to the connection's reactor (a message embedded in c, so it
 * cannot fail; a second request before the close is a no-op, the first reason stands). The
 * caller guarantees c is alive (typically: the session lock held with c in its list). */
void conn_close_async(struct iscsi_conn *c, const char *why);

/* Test seams (tests/unit/tgt_harness.c): a connection without a socket, driven by feeding it
 * bytes and taking what it would have written. Everything runs on the caller's thread; the
 * reactor r still runs the deferred work (completions, frees) when the caller runs it. */
/* Receive `len` bytes as if read from the socket; returns how many were taken (fewer when the
 * connection closed, or paused reading because its replies are not being taken). */
size_t iscsi_conn_feed(struct iscsi_conn *c, const void *bytes, size_t len);
/* Take up to `cap` bytes of the transmit queue as the socket would (PDUs may be split across
 * calls), running the sent callbacks of the PDUs taken whole; closes a logged-out connection
 * once its last answer is taken. Returns the byte count. */
size_t iscsi_conn_take_tx(struct iscsi_conn *c, void *buf, size_t cap);
bool iscsi_conn_is_closed(const struct iscsi_conn *c);

/* The ErrorRecoveryLevel in force on the connection (0 until the session exists). */
static inline unsigned conn_erl(const struct iscsi_conn *c)
{
    return c->session ? c->session->params.erl : 0;
}

#endif
