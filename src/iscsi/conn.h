/* Target-side iSCSI internals: connections, sessions and tasks, and the functions the
 * files of this layer call on each other. conn.c is the target's side of the wire engine
 * (iscsi/wire.h moves the bytes) and dispatches PDUs, login.c runs the login phase, session.c owns
 * sessions and the CmdSN window, cmd.c the SCSI command / R2T / Data-Out / Data-In flow, tmf.c task
 * management, discovery.c Text. */
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
#define ISCSI_CMD_WINDOW                                                                           \
    128u /* commands a session may have in flight (MaxCmdSN - ExpCmdSN + 1)                        \
          */
/* ERL >= 1: missing ranges of a write's Data-Out one task may have waiting for recovery R2Ts
 * (DataPDUInOrder=Yes keeps them few); one more ends the command as ERL 0 would. */
#define ISCSI_MAX_HOLES 8u
/* ERL >= 1: a write whose Data-Out stops arriving for this long with sequences still open
 * (their final PDU lost) has the missing ranges solicited again by recovery R2Ts (§7.9). */
#define ISCSI_DATA_OUT_STALL_MS 500u
/* ... and after this many such rounds with not one Data-Out for the command, it ends with CHECK
 * CONDITION (its connection stays). */
#define ISCSI_DATA_OUT_STALL_ROUNDS 4u
#define ISCSI_GAP_GRACE_MS 2000u
/* Bytes of command buffers (stores that are not RAM) one connection may hold at once. */
#define ISCSI_CONN_BUF_BUDGET (64u << 20) /* MaxOutstandingR2T we accept at most */

struct iscsi_conn;
struct iscsi_session;
struct iscsi_auth;

/* ---------- transmit ---------- */

/* A PDU to send is the wire engine's (iscsi/wire.h): header, data from wherever it lives,
 * `sent` once the bytes are on the socket (or the connection died). */
_Static_assert(WIRE_DATA_IOV_MAX == SCSI_TASK_IOV_MAX, "Data-In is sent from a task's iovecs");

/* ---------- the CmdSN window ---------- */

/* A command waiting in its session's CmdSN queue for its turn (RFC 7143 §4.2.2.1): ExpCmdSN
 * reaching `cmdsn` unlinks it and calls `release`, with the session lock held. */
struct cmdsn_wait {
    struct list_node node;
    uint32_t cmdsn;
    void (*release)(struct cmdsn_wait *w);
};

/* What the window says about an arriving command (session_cmdsn_check). */
enum cmdsn_verdict {
    CMDSN_RUN = 1,       /* its turn (or immediate): run it now */
    CMDSN_QUEUED = 0,    /* ahead of ExpCmdSN: queued until its turn, then released */
    CMDSN_OUTSIDE = -1,  /* outside [ExpCmdSN, MaxCmdSN], or a duplicate of a queued one */
    CMDSN_RECEIVED = -2, /* that CmdSN was taken already (an ABORT TASK took it, §11.5.1 b) */
};

/* ---------- tasks ---------- */

enum iscsi_task_state {
    TASK_QUEUED,   /* waiting for its CmdSN turn (MC/S or immediate ordering) */
    TASK_DATA_OUT, /* receiving write data (immediate/unsolicited/solicited) */
    TASK_EXEC,     /* in the SCSI core / backing store */
    TASK_SENDING,  /* response queued */
    TASK_RETAINED, /* ERL >= 1: answered, kept until ExpStatSN acknowledges its StatSN */
};

/* One solicited Data-Out sequence (an R2T and the PDUs that answer it). */
struct r2t_seq {
    uint32_t ttt;
    uint32_t offset, len;
    uint32_t got;    /* bytes received so far, in order (DataPDUInOrder=Yes) */
    uint32_t datasn; /* next expected DataSN within the sequence (§11.7.2) */
    uint32_t r2tsn;  /* of the R2T that opened it: a Data/R2T SNACK names it (§11.16) */
    uint32_t statsn; /* the StatSN field it carried, for an exact replica */
    bool used;
};

/* ERL 2 (RFC 7143 §7.2.2): a task whose connection failed or was logged out for recovery
 * outlives it in its session's orphan set (session.c) until TASK REASSIGN moves it to another
 * connection or Time2Retain ends it. */
enum task_orphan {
    ORPHAN_NO,   /* on a connection */
    ORPHAN_IDLE, /* waiting in the orphan set, touched only under its session's lock */
    ORPHAN_BUSY, /* in the orphan set while the store has it: its completion decides */
};

/* ERL >= 1: a range of write data lost on the way (§7.8, §7.9), to be solicited again. */
struct data_hole {
    uint32_t off, len;
};

/* Task lifetime: `refs` counts its holders, and task_put() dropping the last one is the only
 * place a task is freed (unhashed, its buffer charge released, back to the connection's free
 * list). The holders:
 *   - the protocol side, from the SCSI Command until the response is queued, the task is
 *     aborted, or its connection is torn down (or the command is dropped by the CmdSN rules);
 *   - the receive engine while a data segment is being placed into its buffers (pdu_in.task);
 *   - the SCSI core / store from scsi_task_exec() until its completion;
 *   - every queued PDU whose data or completion points at it (Data-In, SCSI Response). */
struct iscsi_task {
    struct scsi_task scsi;
    struct iscsi_conn *conn;
    struct iscsi_bhs req; /* the SCSI Command header as received */
    uint32_t itt;
    uint32_t cmdsn;
    uint32_t edtl;
    bool immediate;
    bool refused;    /* setup refused: swallow data-out, then answer */
    bool aborted;    /* a TMF aborted it: never answer */
    bool seq_failed; /* a Data-Out sequence error: swallow the rest, then CHECK CONDITION */
    bool in_hash;
    bool cmdsn_pending; /* ERL >= 1, immediate data under a data digest: the CmdSN is looked
                           at once the digest is known good (§7.3), not in flight till then */
    enum iscsi_task_state state;
    /* The portal shard whose in-flight gauge counts it (util/iostats.h: iostats_queue), from
     * its acceptance into the CmdSN window until it is answered, freed, or orphaned (ERL 2):
     * always on the connection's reactor that entered it; NULL once it left. */
    struct iostats_shard *st_queue;
    /* write bookkeeping */
    uint32_t data_expected; /* bytes of data-out this task will receive in total */
    uint32_t data_received;
    /* immediate data placed by the command PDU still coming in: counted in data_received
     * only once that PDU ends; if the connection dies first (ERL 2), solicited again */
    uint32_t imm_pending;
    uint64_t arrival_ns;      /* when the command PDU came, for the latency histograms */
    uint32_t unsol_remaining; /* unsolicited bytes still due (sent without R2T) */
    uint32_t r2t_offset;      /* next offset to solicit */
    uint32_t r2t_outstanding; /* R2Ts sent and not yet fully answered */
    uint32_t r2tsn;
    struct r2t_seq r2t[ISCSI_MAX_R2T];
    uint32_t unsol_datasn;   /* next DataSN of the unsolicited sequence */
    uint32_t unsol_next_off; /* next buffer offset of the unsolicited sequence */
    uint32_t datasn_in;      /* Data-In DataSN */
    /* ERL >= 1 (RFC 7143 §7.1): what a retransmission needs. The status's StatSN, and the
     * Data-In segmentation used at send time (PDU size, burst, bytes), from which DataSN k's
     * offset and length follow, so a Data SNACK re-sends exact replicas (§11.16). */
    uint32_t statsn;
    uint32_t din_pdu_len, din_burst, din_total;
    /* ERL 2: Data-In from DataSN din_recut_sn on were cut anew into PDUs of din_recut_pdu
     * bytes from offset din_recut_off (a TASK REASSIGN to a connection taking smaller PDUs,
     * §11.5.1); 0: one cut throughout. A Data SNACK replays whichever cut a DataSN had. */
    uint32_t din_recut_sn, din_recut_off, din_recut_pdu;
    struct data_hole holes[ISCSI_MAX_HOLES]; /* write data to solicit again */
    unsigned nholes;
    uint64_t data_out_ms;           /* last Data-Out progress (the stall check) */
    unsigned stall_rounds;          /* re-solicits since then (ISCSI_DATA_OUT_STALL_ROUNDS) */
    struct list_node retained_node; /* conn->retained, in StatSN order */
    unsigned refs;                  /* see above; on the connection's thread only */
    uint64_t buf_charge;            /* bytes of data memory it holds: in conn->buf_bytes (while on a
                                     * connection) and in srv->task_mem (until freed) */
    struct iscsi_task *hash_next;
    struct list_node node;     /* conn->tasks (conn->task_free once freed) */
    struct list_node r2t_node; /* conn->r2t_waiting */
    struct cmdsn_wait wait;    /* session->pending, then conn->released (MC/S order) */
    /* ERL 2, while orphaned (the session's lock guards these; see enum task_orphan). `node`
     * then links it into its orphan group instead of conn->tasks, and conn is NULL (or, while
     * ORPHAN_BUSY, the dead connection the store completes on). */
    enum task_orphan orphan;
    uint16_t orphan_cid;               /* the connection it was allegiant to */
    bool orphan_released;              /* its CmdSN turn came while it had no connection */
    bool orphan_expired;               /* Time2Retain ended while the store had it */
    struct iscsi_session *orphan_sess; /* a session reference, while orphaned */
    struct iscsi_conn *claim;          /* TASK REASSIGN took it while ORPHAN_BUSY (a ref) */
    struct reactor_msg move_msg;       /* ... and the completion hands it over by this */
    bool abort_on_arrival;             /* ... and ABORT TASK took it meanwhile */
};

/* What the connections of one reactor share, touched only on its thread (reactor_self()): with
 * hundreds of connections, a pool of their own is cold by the time each reuses it (issue 14:
 * zeroing a recycled task cost 4 x at 256 sessions what it did at 8), while a pool every
 * connection of the thread draws on stays in cache. */
#define ISCSI_REACTOR_TASKS_MAX 256u /* free tasks kept per reactor; more go to their conn */
struct iscsi_reactor_local {
    struct list_node task_free; /* most recently freed first */
    unsigned ntask_free;
};

/* The shared pools of c's reactor when called on its thread, else NULL. */
struct iscsi_reactor_local *conn_reactor_local(struct iscsi_conn *c);

/* ---------- connections ---------- */

enum conn_phase {
    CONN_LOGIN,
    CONN_FFP,
    CONN_LOGGED_OUT, /* logout answered: close once flushed */
    CONN_CLOSING,
};

struct iscsi_conn {
    struct iscsi_server *srv;
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
    struct list_node task_free;
    unsigned ntasks;
    uint64_t buf_bytes; /* command buffers held by this connection's tasks */
    struct list_node
        r2t_waiting; /* tasks with more data to solicit than MaxOutstandingR2T allows */
    /* MC/S ordering: tasks whose CmdSN turn came while they waited (session->lock guards the
     * list and the flag); run on this connection's reactor by conn_run_released(). */
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
     * NOP-In, TMF, Text, Logout), for a Status SNACK (snack.c); allocated on first use. */
    struct rsp_copy *rsp_ring;
    unsigned rsp_ring_next;
    bool rsp_resending;

    /* --inject (the server's, handed over at accept): kill-connection runs on inject_timer,
     * digest-error and drop-pdu are for the transmit path */
    struct inject_spec inject;
    struct reactor_timer inject_timer;

    /* liveness */
    struct reactor_timer timer;
    uint64_t last_rx_ms;
    uint64_t last_rx_ns; /* when the read that brought the last PDU header returned */
    bool nop_outstanding;
    uint64_t nop_sent_ms;
    uint32_t nop_ttt;

    /* Set while cmd_exec() hands a task to the SCSI core: a completion that runs inside that
     * call leaves its status here instead of closing the connection under the caller. */
    int *exec_status;

    struct reactor_deferred free_hook; /* the last reference dropped on the owner's thread */
    struct reactor_msg free_msg;       /* ... or on another one */
    bool dead;
    bool logged_out; /* closed after a Logout, not dropped */
    /* ERL 2: how its tasks end when it closes. A Logout "close the connection" (of this one or
     * from another connection) terminates them (RFC 7143 §11.14.5 a);
     * "remove the connection for recovery", a failure, a reinstatement keep them for
     * reassignment (§7.2.2). */
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

/* ---------- sessions ---------- */

struct iscsi_session {
    struct iscsi_server *srv;
    struct iscsi_node *node; /* NULL: discovery */
    uint8_t isid[6];
    uint16_t tsih;
    char initiator_name[ISCSI_NAME_MAX + 1];
    char chap_user[CHAP_NAME_MAX + 1]; /* the CHAP name its leading login proved; "" none */
    struct scsi_nexus *nexus;
    struct iscsi_params params;
    bool discovery;
    char addr[64];         /* the initiator's address, no port (discovery sessions per address) */
    uint64_t created_ms;   /* reactor_now_ms() at login, for linerate-ctl's age */
    struct iostats *stats; /* the metrics: per reactor shards, read by iscsi_server_list_sessions */
    atomic_bool reset_refusal_logged; /* a refused target reset was logged (once a session) */

    pthread_mutex_t lock; /* everything below */
    struct list_node conns;
    unsigned nconns;
    uint32_t exp_cmdsn;
    uint32_t max_cmdsn;
    uint32_t in_flight;       /* commands received and not yet answered */
    struct list_node pending; /* commands that arrived ahead of ExpCmdSN (MC/S) */
    /* CmdSNs ahead of ExpCmdSN that count as received with no task waiting on them: a command
     * ABORT TASK took before it arrived (RFC 7143 §11.5.1 b), a queued command aborted, a
     * non-SCSI request that came ahead of a gap. ExpCmdSN steps over them and a command
     * arriving with one is dropped. Bit sn % ISCSI_CMD_WINDOW: they all lie in
     * [ExpCmdSN, MaxCmdSN], so the window bounds them and nothing is allocated. */
    uint64_t taken[ISCSI_CMD_WINDOW / 64];
    /* Atomic so that session_get() needs no lock: it is called with s->lock held
     * (orphans_add_locked), while session_close_conns_where() takes sessions_lock and then
     * s->lock; taking sessions_lock there would order the two locks both ways. Lookups and the
     * last put stay under sessions_lock, so a session is never found with no reference. */
    atomic_int refs;
    /* Set under s->lock by the reactor whose last connection goes (session_remove_conn) or
     * by a reinstatement; read under sessions_lock alone by session_lookup() (the control
     * thread, logins on other reactors): atomic, since those share no lock. A lookup that
     * reads false a moment before it turns true finds a session it holds a reference to. */
    atomic_bool closing;
    /* A connection of this session died: CmdSNs it carried may never arrive, and none of them
     * is past lost_upto (the MaxCmdSN granted when it died; the latest such death). */
    bool lost_conn;
    uint32_t lost_upto;
    bool logged_out; /* a Logout ends it: its end is no I_T nexus loss to report */
    bool loss_done;  /* its end was seen (last connection gone, or reinstated): UA raised once */
    /* ERL 2: the tasks of connections that died or were logged out for recovery, one group per
     * connection (struct iscsi_orphans, session.c), until reassigned or Time2Retain passes.
     * While any remain the session outlives its last connection. */
    struct list_node orphan_groups;
    uint64_t stalled_since_ms; /* commands queued behind a gap since then (0: none) */
    uint32_t stalled_exp;      /* ExpCmdSN then: the gap holds only while it has not moved */
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

/* The PDU dispatcher: the receive engine's two calls per received PDU. Both take the
 * connection's PDU (struct iscsi_pdu_in), run the handler for its opcode and phase, and return
 * its status (enum iscsi_status); a negative status has closed the connection (here, the one
 * place a handler's verdict closes it) and the engine must stop.
 *   conn_pdu_header: the BHS is in (and checked: digest, length). The handler may place the
 *     data segment (p->dst/dstcnt, or p->discard) and leave its verdict in p->reject_reason /
 *     p->task; with neither dst nor discard set, the engine receives the data into its buffer.
 *   conn_pdu_done: the data segment is in (p->data points at it when it went to the engine's
 *     buffer). Runs the end-of-PDU handler with the header phase's verdict, then releases
 *     p->task's reference. */
int conn_pdu_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int conn_pdu_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
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
/* A response that carries only a Response byte, the request's ITT and the sequence numbers
 * (TMF, Logout). ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_response(struct iscsi_conn *c, enum iscsi_opcode op, const struct iscsi_bhs *req,
                       uint8_t response);
/* Queue a PDU with a copy of `data` (text, sense, reject): header must be filled except the
 * data segment length, which is set here. ISCSI_OK, or ISCSI_ERR_NOMEM with p released (its
 * `sent` called with ok = false). */
int conn_send_copy(struct iscsi_conn *c, struct wire_pdu *p, const void *data, uint32_t len);
void conn_close(struct iscsi_conn *c, const char *why);
/* A NOP-In ping (TTT set, no StatSN consumed, §11.19) whose answer the liveness timer waits
 * for; its ExpStatSN also releases retained tasks. ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_nop_ping(struct iscsi_conn *c);
/* RFC 7143 §11.17. ISCSI_OK or ISCSI_ERR_NOMEM. */
int conn_send_reject(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason);
/* Fill StatSN (and advance it if `advance`), ExpCmdSN and MaxCmdSN of a response header. */
void conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance);
void conn_task_hash_add(struct iscsi_conn *c, struct iscsi_task *t);
void conn_task_hash_del(struct iscsi_conn *c, struct iscsi_task *t);
struct iscsi_task *conn_task_find(struct iscsi_conn *c, uint32_t itt);
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
/* A connection in login phase with no descriptor and no timer (no login deadline, no NOP-In
 * pings): the caller closes it with conn_close(). NULL when memory ran out. */
struct iscsi_conn *iscsi_conn_new_detached(struct iscsi_server *srv, struct reactor *r);
/* Receive `len` bytes as if read from the socket; returns how many were taken (fewer when the
 * connection closed, or paused reading because its replies are not being taken). */
size_t iscsi_conn_feed(struct iscsi_conn *c, const void *bytes, size_t len);
/* Take up to `cap` bytes of the transmit queue as the socket would (PDUs may be split across
 * calls), running the sent callbacks of the PDUs taken whole; closes a logged-out connection
 * once its last answer is taken. Returns the byte count. */
size_t iscsi_conn_take_tx(struct iscsi_conn *c, void *buf, size_t cap);
bool iscsi_conn_is_closed(const struct iscsi_conn *c);
/* The highest ErrorRecoveryLevel the target offers (login.c): ISCSI_ERL_IMPLEMENTED. Unit
 * tests of the recovery paths raise it before logging in; nothing else touches it. */
extern unsigned iscsi_target_erl_max;

/* server.c: connections not yet logged in (max-pending-logins and its per-address share).
 * add returns false, counting nothing, when a limit is reached. */
bool iscsi_server_pending_add(struct iscsi_server *srv, const uint8_t *addr, uint8_t len,
                              const char *peer);
void iscsi_server_pending_del(struct iscsi_server *srv, const uint8_t *addr, uint8_t len);
/* The server-wide limiter for lines about connections that never logged in. */
bool iscsi_server_log_allow(struct iscsi_server *srv, unsigned *suppressed);

/* login.c */
int login_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
void login_conn_cleanup(struct iscsi_conn *c);
/* The peer's address without the port: what the CHAP back-off and the discovery sessions per
 * address count by. */
void conn_peer_addr(const struct iscsi_conn *c, char *out, size_t len);

/* session.c */
struct iscsi_session *session_create(struct iscsi_conn *c, const struct iscsi_params *p);
struct iscsi_session *session_lookup(struct iscsi_server *srv, uint16_t tsih);
/* Detach a connection; the last one out frees the session. */
void session_remove_conn(struct iscsi_session *s, struct iscsi_conn *c);
void session_add_conn(struct iscsi_session *s, struct iscsi_conn *c);
/* Close every connection of any session with this initiator name + ISID + node (§6.3.5). Each
 * one closed counts in closed (NULL: none) until its close has aborted its commands. */
void session_reinstate(struct iscsi_server *srv, const char *initiator, const uint8_t isid[6],
                       struct iscsi_node *node, struct iscsi_conn *except,
                       struct scsi_join *closed);
/* A new connection c takes over from connections being closed for it (session reinstatement,
 * RFC 7143 §6.3.5; connection reinstatement below ERL 2, §6.3.4): it reads nothing more until
 * they have closed and the commands their close aborted have left the store, so that the
 * initiator's retry of a write can never be overwritten by the write it replaces (SAM-5
 * §6.3.4: the tasks of a lost I_T nexus are aborted); for a leading login also when nothing
 * closes for it, as a connection lost just before may have left aborted writes in the store.
 * begin: the join the closes count in (NULL: out of memory, nobody waits); end: after they
 * were asked to close. */
struct scsi_join *session_takeover_begin(struct iscsi_conn *c);
void session_takeover_end(struct scsi_join *closed);
void session_put(struct iscsi_session *s);
/* CmdSN cmdsn counts as received with no command to run: a non-SCSI, non-immediate request
 * (NOP-Out, Text, TMF, Logout) used it up, or an ABORT TASK named a task no connection has
 * with RefCmdSN inside the window (RFC 7143 §11.5.1 b). ExpCmdSN steps over it, and a command
 * arriving later with it is dropped unanswered. Nothing if it was received meanwhile. */
void session_consume_cmdsn(struct iscsi_session *s, uint32_t cmdsn);
/* Whether a connection with this CID is in the session now (no pointer: the connection lives
 * on its own reactor, which may free it the moment the lock is dropped). */
bool session_has_conn(struct iscsi_session *s, uint16_t cid);
/* Ask the connections to close, each on its own reactor. */
void session_close_other_conns(struct iscsi_session *s, struct iscsi_conn *keep);
/* Close (by message to its reactor) every connection c of every live session s for which
 * match(s, c, arg) holds; the session table and each session are locked meanwhile. */
void session_close_conns_where(struct iscsi_server *srv,
                               bool (*match)(const struct iscsi_session *s,
                                             const struct iscsi_conn *c, const void *arg),
                               const void *arg, const char *why);
/* Close the connection with that CID (by message to its reactor). terminate: its tasks end
 * with it (a Logout "close the connection", §11.14.5 a); else at ERL 2 they are kept for
 * reassignment (a reinstatement or a Logout "remove the connection for recovery", §6.3.4).
 * exp_statsn (NULL: none): the Logout's ExpStatSN for that connection (§11.14.4); the answers
 * below it were received and their tasks are not kept. */
/* At ERL 2 the acknowledgement goes to the last connection with the CID: stored there for its
 * teardown if that has not published its orphan group yet, else (and for a CID gone) taken
 * from the group at once (orphans_ack_statsn). Returns the answered orphans that ended so. */
/* Unit tests only (NULL otherwise): called as a connection's teardown begins (published
 * false) and once its orphan group is published (true), on its reactor, with no lock held: what
 * another thread may do in between (a Logout or a restart naming it) done at that very point. */
extern void (*cmd_teardown_test_hook)(struct iscsi_conn *c, bool published);
unsigned session_close_conn_by_cid(struct iscsi_session *s, uint16_t cid, bool terminate,
                                   const uint32_t *exp_statsn, struct scsi_join *closed);
void session_get(struct iscsi_session *s);
/* With s->lock: the session has no connection and no orphan group left and nobody ended it
 * yet: it ends now (closing set); *loss tells whether its end is an I_T nexus loss. */
bool session_unused_locked(struct iscsi_session *s, bool *loss);
/* The end of a session session_unused_locked() chose: the nexus loss UA, out of the table. */
void session_end(struct iscsi_session *s, bool loss);
/* With the session lock held: a queued command whose connection was removed for recovery
 * before its turn came is discarded (RFC 7143 §11.14: requests not acknowledged via ExpCmdSN)
 * and its CmdSN stays not received, so the initiator's retry of it is taken. Done under the
 * same lock hold that decides which tasks become orphans: released a moment later by another
 * connection's command, it would count as acknowledged and be lost. */
void session_cmdsn_discard_locked(struct iscsi_session *s, struct cmdsn_wait *w);
/* The CmdSN window (RFC 7143 §4.2.2.1) works on (session, CmdSN) alone, without a connection
 * (tests/unit/test_cmdsn.c drives it directly). session_cmdsn_init: the window starts at
 * ExpCmdSN = exp (the leading Login's CmdSN, §11.12.7).
 * session_cmdsn_check: a command arrives. Immediate ones run at once; CMDSN_QUEUED links `w`
 * (its cmdsn and release set by the caller) into the queue until ExpCmdSN reaches it. RUN and
 * QUEUED count the command in flight until session_cmd_done() or session_cmdsn_cancel(). */
void session_cmdsn_init(struct iscsi_session *s, uint32_t exp);
enum cmdsn_verdict session_cmdsn_check(struct iscsi_session *s, uint32_t cmdsn, bool immediate,
                                       struct cmdsn_wait *w);
void session_cmd_done(struct iscsi_session *s);
/* A queued or released command goes away (aborted, connection gone) before it ran: it no
 * longer counts in flight, and its CmdSN stays received (taken). */
void session_cmdsn_cancel(struct iscsi_session *s, struct cmdsn_wait *w);
/* The release of a task's cmdsn_wait: onto its connection's released list, with one kick. */
void session_release_task(struct cmdsn_wait *w);
/* A connection of s died: the CmdSNs the window granted so far may never all arrive. */
void session_note_lost_conn(struct iscsi_session *s);
/* Called once a second per connection: after a connection loss, a CmdSN gap that has held
 * commands back for ISCSI_GAP_GRACE_MS is given up and the window moves on, up to the MaxCmdSN
 * granted when the connection died. */
void session_check_gap(struct iscsi_session *s, uint64_t now_ms);
/* The negotiated DefaultTime2Wait, bounded by the target's own (what it keeps orphans for). */
uint32_t session_time2wait(const struct iscsi_session *s);
/* The ExpCmdSN / MaxCmdSN pair for a response. */
void session_window(struct iscsi_session *s, uint32_t *exp, uint32_t *max);

/* orphan.c: ERL 2, tasks kept across the loss of their connection (RFC 7143 §7.2.2). */
struct iscsi_orphans;
/* A group for the tasks of c, which is closing (on c's reactor, c->session set); NULL when
 * memory ran out (the tasks then end as at ERL < 2). */
struct iscsi_orphans *orphans_new(struct iscsi_conn *c);
/* With the session lock held: t (detached from its connection, orphan state set) joins g. */
void orphans_add_locked(struct iscsi_orphans *g, struct iscsi_task *t);
/* The group of c, filled, becomes visible to TASK REASSIGN; it expires after Time2Wait +
 * Time2Retain seconds. An acknowledgement stored in c by a Logout or a restart
 * (logout_acked) ends the answered tasks it covers, read under the session lock with the
 * publication, so one stored at any time before it is seen. */
void orphans_publish(struct iscsi_orphans *g, struct iscsi_conn *c, uint32_t time2wait,
                     uint32_t time2retain);
/* With s->lock: a connection with this CID joins the session: every group and connection with
 * the CID so far is an earlier one's (superseded). */
void orphans_supersede_locked(struct iscsi_session *s, uint16_t cid);
/* A group that got no task: freed. */
void orphans_discard(struct iscsi_orphans *g);
/* With s->lock: every group of s (on reactor `only`, or all for NULL) expires now, by a message
 * to its reactor (session reinstatement, shutdown). */
void orphans_expire_all_locked(struct iscsi_session *s, const struct reactor *only);
/* Whether a connection with this CID left tasks (or left recently: its group lives). */
bool orphans_cid_known(struct iscsi_session *s, uint16_t cid);
/* Whether an orphan of s has that ITT. */
bool orphans_has_itt(struct iscsi_session *s, uint32_t itt);
/* A Logout for the gone connection cid acknowledged every StatSN below exp_statsn (its
 * ExpStatSN, RFC 7143 §11.14.4): the answered orphans it covers, of the group of the last
 * connection with that CID (none if that one left no group), end now. Their number. */
unsigned orphans_ack_statsn(struct iscsi_session *s, uint16_t cid, uint32_t exp_statsn);
enum orphan_claim {
    CLAIM_NONE,  /* no orphan with that ITT */
    CLAIM_NOW,   /* *out is c's now (conn set, not yet on c's lists): cmd_task_adopt() it */
    CLAIM_LATER, /* the store has it: its completion hands it to c (a reference held);
                  *out only for fields c's thread alone reads (abort_on_arrival) */
};
/* TASK REASSIGN on c takes the newest orphan with that ITT; *cid: the connection it was on. */
enum orphan_claim orphans_claim(struct iscsi_session *s, uint32_t itt, struct iscsi_conn *c,
                                struct iscsi_task **out, uint16_t *cid);
enum orphan_fate {
    FATE_STAY, /* back in its group, completed, to be answered when reassigned */
    FATE_MOVE, /* claimed meanwhile: hand it to t->claim */
    FATE_FREE, /* expired meanwhile: free it */
};
/* Which sessions a task-set function reaches: < 0 not this one; else whether only tasks
 * issued before the TMF (CmdSN below before_cmdsn) are concerned. */
typedef int (*orphans_match)(const struct iscsi_session *s, const void *arg);
/* ABORT TASK SET, CLEAR TASK SET, resets, PREEMPT AND ABORT: the orphans on LUN lun (UINT64_MAX:
 * every LUN) of the sessions match() takes end as their live tasks do. Returns how many. */
unsigned orphans_abort(struct iscsi_server *srv, orphans_match match, const void *arg, uint64_t lun,
                       uint32_t before_cmdsn);
/* The store completed an ORPHAN_BUSY task (on the dead connection's reactor). */
enum orphan_fate orphans_store_done(struct iscsi_task *t);

/* cmd.c: the SCSI Command and Data-Out handlers (header phase, end of PDU). */
int cmd_handle_scsi_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_scsi_data_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_data_out_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_data_out_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
void task_get(struct iscsi_task *t);
/* Drop a reference; the last one frees the task (see struct iscsi_task). */
void task_put(struct iscsi_task *t);
/* Run the tasks the session released to this connection (its reactor's thread). */
void conn_run_released(void *arg);
/* Abort: never answer; the protocol side drops its reference (the store's and queued PDUs'
 * keep the task until they let go). */
void cmd_task_abort(struct iscsi_task *t);
/* Count an event of t (util/iostats.h) on its LUN, c's session and c's portal; on c's reactor. */
void cmd_count_event(struct iscsi_conn *c, struct iscsi_task *t, enum iostats_event ev);
void cmd_conn_teardown(struct iscsi_conn *c);
/* ERL 2, TASK REASSIGN on c took t (CLAIM_NOW, its Task Management Response queued): t joins
 * c and resumes (RFC 7143 §7.2.2): a read's Data-In again from exp_datasn with the status, a
 * status lost again with a new StatSN of c, a write's missing data solicited by R2Ts with new
 * TTTs and R2TSNs going on from the task's, a command never answered answered. */
int cmd_task_adopt(struct iscsi_conn *c, struct iscsi_task *t, uint32_t exp_datasn);
/* ERL 2, ABORT TASK on c took orphan t (CLAIM_NOW): it joins c and is aborted there, a status
 * issued and not acknowledged issued again first (RFC 7143 §11.5.1). */
int cmd_task_adopt_abort(struct iscsi_conn *c, struct iscsi_task *t);
/* The ErrorRecoveryLevel in force on the connection (0 until the session exists). */
static inline unsigned conn_erl(const struct iscsi_conn *c)
{
    return c->session ? c->session->params.erl : 0;
}
/* ERL >= 1: the initiator acknowledged every StatSN below exp_statsn: release the retained
 * tasks it covers (§4.2.2.2). */
void cmd_ack_statsn(struct iscsi_conn *c, uint32_t exp_statsn);
/* ERL >= 1, once a second: re-solicit the Data-Out of writes whose sequences stalled. */
int cmd_check_stalled(struct iscsi_conn *c, uint64_t now_ms);
/* ERL 0, once a second: ISCSI_ERR_DATA_OUT_TIMEOUT when a write's Data-Out has not come for
 * data-out-timeout seconds (its connection is then closed, freeing its tasks). */
int cmd_check_data_out_timeout(struct iscsi_conn *c, uint64_t now_ms);

/* taskmem.c: the daemon-wide budget of task data memory (limits.max_task_buffers). charge
 * takes n bytes if they fit (false: nothing taken); uncharge gives them back; refused counts
 * and logs (rate limited) a command turned away for it. */
bool taskmem_charge(struct iscsi_server *srv, uint64_t n);
void taskmem_uncharge(struct iscsi_server *srv, uint64_t n);
void taskmem_refused(struct iscsi_server *srv, const char *peer, uint64_t n);
/* A task of this connection by ITT among every state (the hash holds only those taking
 * Data-Out): the newest one not aborted, or NULL. For SNACK and command retries, which are
 * rare; a linear walk. */
struct iscsi_task *cmd_task_lookup(struct iscsi_conn *c, uint32_t itt);
/* ERL >= 1 retransmissions (snack.c): Data-In PDUs [beg, beg+n) of a read (n = 0: to the
 * end), with the original DataSN, offset, flags and, on the last, status and StatSN; the
 * status of an answered task again, exactly as it went out; an R2T by R2TSN. */
int cmd_resend_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t beg, uint32_t n);
int cmd_resend_status(struct iscsi_conn *c, struct iscsi_task *t);
int cmd_resend_r2t(struct iscsi_conn *c, struct iscsi_task *t, uint32_t r2tsn);
int cmd_resend_resegmented(struct iscsi_conn *c, struct iscsi_task *t, uint32_t snack_tag);
/* The Data-In DataSN count of an answered read (0 for any other task). */
uint32_t cmd_data_in_count(const struct iscsi_task *t);

/* snack.c: the SNACK Request handler (RFC 7143 §11.16). */
int snack_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
/* ERL >= 1: a response about to be queued; one that used a StatSN and answers no task is
 * copied for a Status SNACK (the last ISCSI_RSP_RING of them). */
void snack_keep_response(struct iscsi_conn *c, const struct iscsi_bhs *h, const struct iovec *data,
                         int datacnt, uint32_t dlen);
void snack_conn_cleanup(struct iscsi_conn *c);

/* tmf.c */
int tmf_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
void iscsi_abort_nexus_tasks(struct scsi_target *t, struct scsi_nexus *n, struct scsi_lun *lu,
                             struct scsi_join *join);

/* discovery.c */
int text_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
/* Append SendTargets results for `which` ("All" or a name) visible to this initiator. */
void discovery_send_targets(struct iscsi_conn *c, const char *which, struct iscsi_text *out);

#endif
