/* What the iSCSI layer serves: target nodes (name, alias, SCSI device, portals, initiator
 * allow-list, preferred session parameters) and the server that holds them together with the
 * reactors and the session table. Built by src/daemon from the command line or a config file;
 * read-only once the daemon serves. */
#ifndef LR_ISCSI_NODE_H
#define LR_ISCSI_NODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "scsi/scsi.h"
#include "util/inject.h"
#include "util/iostats.h"
#include "util/log.h"

struct reactor;
struct iscsi_reactor_local;
struct iscsi_session;
struct auth_guard;

/* A portal as SendTargets reports it: "127.0.0.1:3260" or "[::1]:3260", with its group tag. */
struct iscsi_portal_addr {
    char text[80];
    uint16_t tpgt;
    /* The portal's I/O counters: set on a listener's copy (the daemon's), NULL elsewhere. */
    struct iostats *stats;
};

/* What one peer may make the daemon hold (docs/limits.md). Checked where the thing is created:
 * at accept, at session creation, when a reply is queued; never per byte. 0 means no limit. */
struct iscsi_limits {
    /* Memory a connection's unsent replies may hold (copies, plus WIRE_PDU_CHARGE per PDU)
     * before the target stops reading its requests; reading resumes below half of it. */
    uint64_t max_tx_backlog;
    unsigned max_pending_logins;          /* connections not yet logged in, in total */
    unsigned max_pending_logins_per_addr; /* ... from one source address */
    unsigned max_sessions;                /* normal sessions in total */
    unsigned max_sessions_per_target;     /* normal sessions of one target */
    /* Discovery sessions have a budget of their own, apart from max-sessions: anyone may open
     * one (no CHAP by default), and they must not take the room of normal sessions. */
    unsigned max_discovery_sessions;          /* in total */
    unsigned max_discovery_sessions_per_addr; /* from one source address */
    unsigned discovery_idle_timeout_s;        /* closed after this long without a Text request */
    /* Data memory all tasks together may hold (their buffers, compare copies, fill patterns,
     * orphans kept at ERL 2): past it a command gets TASK SET FULL or BUSY (taskmem.c). */
    uint64_t max_task_buffers;
    /* A write whose Data-Out stops for this long: at ERL 0 its connection is closed (the only
     * recovery ERL 0 has, RFC 7143 §7.1.2); ERL >= 1 recovers sooner (dataout_check_stalled). */
    unsigned data_out_timeout_s;
};

#define ISCSI_DEFAULT_MAX_TX_BACKLOG (4ull << 20)
#define ISCSI_DEFAULT_MAX_PENDING_LOGINS 1024u
#define ISCSI_DEFAULT_MAX_PENDING_LOGINS_PER_ADDR 64u
#define ISCSI_DEFAULT_MAX_SESSIONS 4096u
/* as many as a target has I_T nexus slots: past that a login could not get one anyway */
#define ISCSI_DEFAULT_MAX_SESSIONS_PER_TARGET SCSI_NEXUS_MAX
#define ISCSI_DEFAULT_MAX_DISCOVERY_SESSIONS 64u
#define ISCSI_DEFAULT_MAX_DISCOVERY_SESSIONS_PER_ADDR 4u
#define ISCSI_DEFAULT_DISCOVERY_IDLE_TIMEOUT_S 60u
#define ISCSI_DEFAULT_MAX_TASK_BUFFERS (1ull << 30)
#define ISCSI_DEFAULT_DATA_OUT_TIMEOUT_S 30u

struct iscsi_pending_addr;

/* What a session of this target really does at most, whatever it is offered: the data
 * segment it takes, its connections and its outstanding R2Ts. The config refuses more. */
#define ISCSI_TARGET_MRDSL_MAX (256u * 1024u)
#define ISCSI_MAX_CONNECTIONS 8u
#define ISCSI_MAX_R2T 8u

/* An initiator entry of a node (the configuration's [host] and [group] members): a name that
 * may log in and, when chap.user is set, the CHAP credentials it logs in with, over the
 * node's own. What it sees of the LUNs is the SCSI target's host map (scsi.h). */
struct iscsi_node_host {
    char name[ISCSI_NAME_MAX + 1];
    struct chap_creds chap;
    struct iscsi_host_limit *limit; /* the entry's caps (one reference per member), or NULL */
};

struct iscsi_node;
/* An entry's IOPS and bytes/s caps, shared by its initiators' sessions (host_limit.c). */
struct iscsi_host_limit {
    struct rate_limit limit;
    atomic_uint refs; /* the node's entries that name it, and the sessions that charge it */
};
struct iscsi_host_limit *iscsi_host_limit_new(const struct rate_limit_conf *c);
void iscsi_host_limit_get(struct iscsi_host_limit *l);
void iscsi_host_limit_put(struct iscsi_host_limit *l); /* NULL: nothing */
/* The limiter of initiator's entry, with a reference for the caller; NULL if it has none. */
struct iscsi_host_limit *iscsi_node_host_limit(struct iscsi_node *node, const char *initiator);
/* The same without a reference, for the one writer of the entries (the daemon's control
 * thread), which needs no lock to read them. */
struct iscsi_host_limit *iscsi_node_host_limit_peek(const struct iscsi_node *node,
                                                    const char *initiator);

struct iscsi_node {
    char name[ISCSI_NAME_MAX + 1];
    char alias[ISCSI_VALUE_MAX + 1]; /* "" for none */
    struct scsi_target *scsi;
    /* Portals and allow list change at run time (linerate-ctl add/remove portal, allow):
     * access_lock guards both arrays and their counts. Readers are logins and SendTargets,
     * never a PDU of a session; the one writer is the daemon's control thread, which may read
     * them without the lock. (A zeroed lock is a valid one: nodes built without
     * iscsi_node_init_access, as the fuzzer's, work.) */
    pthread_mutex_t access_lock;
    struct iscsi_portal_addr *portals; /* where this node is reachable */
    unsigned nportals;
    char (*allow)[ISCSI_NAME_MAX + 1]; /* initiator names allowed; none listed = everyone */
    unsigned nallow;
    /* Initiator entries: with any, an initiator must have one to log in (and pass the allow
     * list too, if there is one). Names under access_lock like allow; each entry's chap is
     * read under the server's chap_lock, as the node's chap is. */
    struct iscsi_node_host *hosts;
    unsigned nhosts;
    struct chap_creds chap;     /* chap.user empty: no CHAP for this target */
    struct iscsi_params params; /* this node's limits/preferences for negotiation */
    /* TARGET WARM / COLD RESET from an initiator: done (true) or answered "function rejected":
     * either reaches every initiator of the target, not only the one asking */
    bool warm_reset, cold_reset;
    uint16_t tpgt;
    unsigned nsessions; /* live normal sessions (the server's sessions_lock) */
};

/* Nodes one server can serve at once (slots of iscsi_server.nodes). */
#define ISCSI_NODES_MAX 4096u

struct iscsi_server {
    /* The nodes served: ISCSI_NODES_MAX slots allocated at init, so that a node added at run
     * time (linerate-ctl) never moves the array under a reactor reading it; a removed node's
     * slot is NULL. Slots and the bound nnodes are stored with release by the one writer (the
     * daemon's start, then its control thread) and read with acquire (iscsi_server_node). */
    struct iscsi_node **nodes;
    unsigned nnodes;
    struct reactor **reactors;
    unsigned nreactors;
    /* What each reactor's connections share (iscsi/task.h), indexed by reactor id; NULL: nothing
     * shared (every connection keeps its own pools). */
    struct iscsi_reactor_local *local;
    /* Session table, shared by all reactors (logins and logouts only, never per PDU). */
    pthread_mutex_t sessions_lock;
    struct iscsi_session **sessions; /* indexed by TSIH, 0 unused */
    unsigned sessions_cap;
    uint16_t next_tsih;
    atomic_bool shutting_down;
    atomic_int nconns;
    /* CHAP for discovery sessions (user empty: none) and the guard against guessing.
     * chap_lock guards discovery_chap and every node's chap: a reload replaces them (the
     * control thread, the one writer, may read them without it) while logins copy them. */
    pthread_mutex_t chap_lock;
    struct chap_creds discovery_chap;
    /* discovery-chap-match = no: SendTargets lists a CHAP target to every discovery session,
     * as LIO does, not only to one that authenticated as the initiator's own CHAP user (false,
     * the default; discovery.c) */
    bool discovery_chap_any;
    struct auth_guard *auth_guard;
    /* Seconds of silence before the target pings an idle connection with NOP-In, and before it
     * drops a connection whose ping went unanswered. */
    unsigned nop_interval_s;
    unsigned nop_timeout_s;
    /* Seconds a connection may take to complete login before it is dropped. */
    unsigned login_timeout_s;
    struct iscsi_limits limits;
    unsigned nsessions;           /* sessions in the table (sessions_lock) */
    unsigned ndiscovery;          /* ... of them discovery sessions */
    struct log_limit session_log; /* sessions refused at max-sessions (sessions_lock) */
    /* Connections not yet logged in, in total and per source address (a small hash of
     * counters, touched at accept and when login ends: never per PDU). */
    pthread_mutex_t pending_lock;
    unsigned npending;
    struct iscsi_pending_addr **pending_hash;
    struct log_limit refuse_log; /* refused connections (pending_lock) */
    struct log_limit login_log;  /* connections that never logged in (pending_lock) */
    /* Task data memory held now, daemon-wide (limits.max_task_buffers; taskmem.c), and the
     * commands refused for it. */
    _Atomic uint64_t task_mem;
    _Atomic uint64_t task_mem_refused;
    pthread_mutex_t task_mem_log_lock;
    struct log_limit task_mem_log; /* (task_mem_log_lock) */
    /* --inject, a testing aid: handed to every connection at accept. kill-connection cuts one
     * logged-in connection of a normal session every kill_conn_s seconds, server-wide: the
     * first connection to find inject_next_cut_ms passed moves it on and closes itself. */
    struct inject_spec inject;
    _Atomic uint64_t inject_next_cut_ms; /* 0: not armed yet (no connection logged in) */
    atomic_uint inject_cuts;             /* connections cut so far */
};

int iscsi_server_init(struct iscsi_server *srv);
void iscsi_server_destroy(struct iscsi_server *srv);
/* The reactors connections run on (reactor_id(r[i]) == i), before they run. 0 or -ENOMEM. */
int iscsi_server_set_reactors(struct iscsi_server *srv, struct reactor **r, unsigned n);
/* Serve these nodes (copied into the server's slots; the nodes themselves are the caller's and
 * outlive the server). Each node's SCSI target gets the server as its transport: PREEMPT AND
 * ABORT reaches the preempted nexus's iSCSI tasks through it. Before the reactors run. */
void iscsi_server_set_nodes(struct iscsi_server *srv, struct iscsi_node **nodes, unsigned n);
/* Serve one more node, at run time too (the first free slot). 0 or -ENOSPC. */
int iscsi_server_add_node(struct iscsi_server *srv, struct iscsi_node *node);
/* Stop serving a node: new logins and SendTargets no longer find it. Its sessions go on (the
 * caller ends them) and the node must outlive them. */
void iscsi_server_remove_node(struct iscsi_server *srv, struct iscsi_node *node);
/* Slot i (< iscsi_server_node_bound) of the node table: a node or NULL. */
unsigned iscsi_server_node_bound(struct iscsi_server *srv);
struct iscsi_node *iscsi_server_node(struct iscsi_server *srv, unsigned i);
struct iscsi_node *iscsi_server_find_node(struct iscsi_server *srv, const char *name);
/* Whether initiator_name may log in: the allow list (if any) and the entries (if any) both
 * admit it. */
bool iscsi_node_allows(struct iscsi_node *node, const char *initiator_name);
/* The CHAP credentials initiator_name logs in to the node with: its entry's when that names a
 * CHAP user, else the node's (user "" for none). Under the server's chap_lock. */
const struct chap_creds *iscsi_node_chap_for(const struct iscsi_node *node,
                                             const char *initiator_name);
/* Whether a login through the portal `text` ("127.0.0.1:3260") may reach the node. */
bool iscsi_node_has_portal(struct iscsi_node *node, const char *text);
/* The node's portals and allow list at run time (one writer at a time; the arrays are
 * replaced under access_lock). 0, -EEXIST (add: there already; names compare without case),
 * -ENOENT (remove: not there) or -ENOMEM. */
void iscsi_node_init_access(struct iscsi_node *node);
int iscsi_node_add_portal(struct iscsi_node *node, const char *text, uint16_t tpgt);
int iscsi_node_remove_portal(struct iscsi_node *node, const char *text);
int iscsi_node_add_allow(struct iscsi_node *node, const char *initiator_name);
int iscsi_node_remove_allow(struct iscsi_node *node, const char *initiator_name);

/* The default limits (ISCSI_DEFAULT_*). */
void iscsi_limits_default(struct iscsi_limits *l);

/* Take over an accepted, non-blocking socket. Must be called on reactor r's thread. */
void iscsi_conn_accept(struct iscsi_server *srv, struct reactor *r, int fd,
                       const struct iscsi_portal_addr *portal);

/* --- admin.c: what linerate-ctl sees of sessions and does to them (any thread but a
 * reactor's; the session table lock is held only while copying) --- */

#define ISCSI_ADMIN_CONNS_MAX 8 /* connections reported per session */

struct iscsi_conn_info {
    uint16_t cid;
    char peer[64];   /* "10.0.0.2:53211" */
    char portal[80]; /* the portal it connected to */
    int reactor;     /* id of the reactor thread serving it */
    bool header_digest, data_digest;
    uint32_t max_recv_dsl; /* what the target receives at most */
    uint32_t max_send_dsl; /* what the initiator receives at most */
};

struct iscsi_session_info {
    uint16_t tsih;
    uint8_t isid[6];
    char initiator[ISCSI_NAME_MAX + 1];
    char target[ISCSI_NAME_MAX + 1];   /* "" for a discovery session */
    char chap_user[CHAP_NAME_MAX + 1]; /* "" without CHAP */
    bool discovery;
    struct iscsi_params params; /* negotiated */
    uint32_t in_flight;         /* commands received and not yet answered */
    uint64_t age_ms;
    struct iostats_values stats; /* merged at the copy (util/iostats.h) */
    unsigned nconns;
    struct iscsi_conn_info conns[ISCSI_ADMIN_CONNS_MAX];
};

/* A copy of every live session, in TSIH order: *out is malloc'd (free it), *n its length.
 * 0, or -ENOMEM. */
int iscsi_server_list_sessions(struct iscsi_server *srv, struct iscsi_session_info **out,
                               unsigned *n);
/* Whether a session with this TSIH is live (not ending). */
bool iscsi_server_session_alive(struct iscsi_server *srv, uint16_t tsih);
/* Ask the initiator to log the session out: an Async Message "target requests Logout"
 * (AsyncEvent 1, RFC 7143 §11.9.1) on every connection, Parameter3 = time2wait_s, the
 * seconds it has to do so. Returns the number of connections asked, or -ENOENT. */
int iscsi_server_request_logout(struct iscsi_server *srv, uint16_t tsih, unsigned time2wait_s);
/* Close every connection of a session (the initiator sees its connections drop, an ERL 0
 * session ends; RFC 7143 §6.3). 0, or -ENOENT. */
int iscsi_server_close_session(struct iscsi_server *srv, uint16_t tsih, const char *why);
/* Close one connection of a session. 0, -ENOENT (no session) or -ESRCH (no such CID). */
int iscsi_server_close_conn(struct iscsi_server *srv, uint16_t tsih, uint16_t cid, const char *why);

/* SIGTERM path: called once on each reactor's thread (via a message) to fail in-flight
 * commands cleanly and close every connection it owns. */
void iscsi_server_close_reactor_conns(struct iscsi_server *srv, struct reactor *r);

#endif
