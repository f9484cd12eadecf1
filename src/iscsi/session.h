/* Sessions (session.c): the I_T nexus of one initiator port and target, its connections, and
 * the CmdSN window its commands are ordered by (RFC 7143 §4.2.2.1). */
#ifndef LR_ISCSI_SESSION_H
#define LR_ISCSI_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/node.h"
#include "scsi/scsi.h"
#include "util/list.h"

/* Commands a session may have in flight (MaxCmdSN - ExpCmdSN + 1). */
#define ISCSI_CMD_WINDOW 128u
/* After a connection loss, how long a CmdSN gap may hold commands back (session_check_gap). */
#define ISCSI_GAP_GRACE_MS 2000u

struct iscsi_conn;
struct iscsi_server;
struct reactor;

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

struct iscsi_session {
    struct iscsi_server *srv;
    struct iscsi_node *node; /* NULL: discovery */
    uint8_t isid[6];
    uint16_t tsih;
    char initiator_name[ISCSI_NAME_MAX + 1];
    char chap_user[CHAP_NAME_MAX + 1]; /* the CHAP name its leading login proved; "" none */
    struct scsi_nexus *nexus;
    /* its initiator entry's caps at login (a reference; NULL: no entry), charged by each
     * command; kept to the session's end whatever a reload does to the entry */
    struct iscsi_host_limit *limit;
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

/* A session for the login of `initiator` (port isid) at addr: in the session table with a new
 * TSIH, its CmdSN window starting at cmdsn (the leading Login's, §11.12.7), one reference
 * held; NULL when memory ran out or the table is full. node: NULL for discovery. */
struct iscsi_session *session_new(struct iscsi_server *srv, struct iscsi_node *node, bool discovery,
                                  const uint8_t isid[6], const char *initiator, const char *addr,
                                  const struct iscsi_params *p, uint32_t cmdsn);
struct iscsi_session *session_lookup(struct iscsi_server *srv, uint16_t tsih);
void session_put(struct iscsi_session *s);
/* CmdSN cmdsn counts as received with no command to run: a non-SCSI, non-immediate request
 * (NOP-Out, Text, TMF, Logout) used it up, or an ABORT TASK named a task no connection has
 * with RefCmdSN inside the window (RFC 7143 §11.5.1 b). ExpCmdSN steps over it, and a command
 * arriving later with it is dropped unanswered. Nothing if it was received meanwhile. */
void session_consume_cmdsn(struct iscsi_session *s, uint32_t cmdsn);
void session_get(struct iscsi_session *s);
/* With s->lock: the session has no connection and no orphan group left and nobody ended it
 * yet: it ends now (closing set); *loss tells whether its end is an I_T nexus loss. */
bool session_unused_locked(struct iscsi_session *s, bool *loss);
/* The end of a session session_unused_locked() chose: the nexus loss UA, out of the table. */
void session_end(struct iscsi_session *s, bool loss);
/* For session_conns.c, which adds and removes connections. With s->lock: whether its end,
 * seen now, is an I_T nexus loss to report (once); a connection died (session_check_gap).
 * With sessions_lock: the table counts s in or out. The session leaves the table (its
 * reference dropped). */
bool session_loss_due_locked(struct iscsi_session *s);
void session_lost_conn_locked(struct iscsi_session *s);
void session_table_count(struct iscsi_server *srv, struct iscsi_session *s, int delta);
void session_table_remove(struct iscsi_session *s);
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
/* session_cmd_done, then session_window, under one hold of the session's lock. */
void session_cmd_done_window(struct iscsi_session *s, uint32_t *exp, uint32_t *max);
/* A queued or released command goes away (aborted, connection gone) before it ran: it no
 * longer counts in flight, and its CmdSN stays received (taken). */
void session_cmdsn_cancel(struct iscsi_session *s, struct cmdsn_wait *w);
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

#endif
