/* Running a SCSI command (exec.c): handing a task to the SCSI core in CmdSN order, its
 * completion and answer, the metrics it counts, and its abort. */
#ifndef LR_ISCSI_EXEC_H
#define LR_ISCSI_EXEC_H

#include <stdint.h>
#include "util/iostats.h"

struct cmdsn_wait;
struct iscsi_conn;
struct iscsi_pdu_in;
struct iscsi_task;
struct iscsi_bhs;

/* Count an event of t (util/iostats.h) on its LUN, c's session and c's portal; on c's reactor. */
void exec_count_event(struct iscsi_conn *c, struct iscsi_task *t, enum iostats_event ev);
void exec_count_lun_digest_error(struct iscsi_conn *c, struct iscsi_task *t);
int exec_respond(struct iscsi_conn *c, struct iscsi_task *t);
int exec_maybe_run(struct iscsi_conn *c, struct iscsi_task *t);
void exec_release_turn(struct cmdsn_wait *w);
/* Abort: never answer; the protocol side drops its reference (the store's and queued PDUs'
 * keep the task until they let go). */
void exec_task_abort(struct iscsi_task *t);
/* Run the tasks the session released to this connection (its reactor's thread). */
void exec_run_released(void *arg);

#endif
