/* ERL 2 (orphan.c): tasks kept across the loss of their connection (RFC 7143 §7.2.2), one group
 * per lost connection in its session, until TASK REASSIGN moves them or Time2Retain ends them. */
#ifndef LR_ISCSI_ORPHAN_H
#define LR_ISCSI_ORPHAN_H

#include <stdbool.h>
#include <stdint.h>

struct iscsi_conn;
struct iscsi_server;
struct iscsi_session;
struct iscsi_task;
struct reactor;

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
                  *out only for fields c's thread alone reads (abort_on_arrival); on
                  c->arriving until then (so runs on c's thread) */
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
/* ABORT TASK SET, CLEAR TASK SET, resets, PREEMPT AND ABORT: the orphans on lu (NULL: every
 * LU), by the LU they hold whatever number each session's host knows it by now (host LUN
 * maps), of the sessions match() takes end as their live tasks do. Returns how many. */
unsigned orphans_abort(struct iscsi_server *srv, orphans_match match, const void *arg,
                       struct scsi_lun *lu, uint32_t before_cmdsn);
/* The store completed an ORPHAN_BUSY task (on the dead connection's reactor). */
enum orphan_fate orphans_store_done(struct iscsi_task *t);

bool orphans_fill(struct iscsi_conn *c, struct iscsi_orphans *g);
/* ERL 2, ABORT TASK on c took orphan t (CLAIM_NOW): it joins c and is aborted there, a status
 * issued and not acknowledged issued again first (RFC 7143 §11.5.1). */
int cmd_task_adopt_abort(struct iscsi_conn *c, struct iscsi_task *t);
/* ERL 2, TASK REASSIGN on c took t (CLAIM_NOW, its Task Management Response queued): t joins
 * c and resumes (RFC 7143 §7.2.2): a read's Data-In again from exp_datasn with the status, a
 * status lost again with a new StatSN of c, a write's missing data solicited by R2Ts with new
 * TTTs and R2TSNs going on from the task's, a command never answered answered. */
int cmd_task_adopt(struct iscsi_conn *c, struct iscsi_task *t, uint32_t exp_datasn);

#endif
