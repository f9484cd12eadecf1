/* SCSI commands on a connection (cmd.c): the SCSI Command and Data-Out handlers, R2Ts, Data-In
 * and responses, the end of a connection's tasks, and what SNACK and TMF ask of a task. */
#ifndef LR_ISCSI_CMD_H
#define LR_ISCSI_CMD_H

#include <stdbool.h>
#include <stdint.h>

#include "iscsi/pdu.h"
#include "util/iostats.h"

struct iscsi_conn;
struct iscsi_task;

/* cmd.c: the SCSI Command and Data-Out handlers (header phase, end of PDU). */
int cmd_handle_scsi_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_scsi_data_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_data_out_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_data_out_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
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
/* ERL >= 1: the initiator acknowledged every StatSN below exp_statsn: release the retained
 * tasks it covers (§4.2.2.2). */
void cmd_ack_statsn(struct iscsi_conn *c, uint32_t exp_statsn);
/* ERL >= 1, once a second: re-solicit the Data-Out of writes whose sequences stalled. */
int cmd_check_stalled(struct iscsi_conn *c, uint64_t now_ms);
/* ERL 0, once a second: ISCSI_ERR_DATA_OUT_TIMEOUT when a write's Data-Out has not come for
 * data-out-timeout seconds (its connection is then closed, freeing its tasks). */
int cmd_check_data_out_timeout(struct iscsi_conn *c, uint64_t now_ms);
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

/* Unit tests only (NULL otherwise): called as a connection's teardown begins (published
 * false) and once its orphan group is published (true), on its reactor, with no lock held: what
 * another thread may do in between (a Logout or a restart naming it) done at that very point. */
extern void (*cmd_teardown_test_hook)(struct iscsi_conn *c, bool published);

#endif
