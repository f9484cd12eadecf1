/* SCSI commands on a connection (cmd.c): the SCSI Command PDU, a command's retry, and the end of
 * a connection's tasks. Running them is exec.c's, their data dataout.c's, answers response.c's. */
#ifndef LR_ISCSI_CMD_H
#define LR_ISCSI_CMD_H

#include <stdbool.h>
#include <stdint.h>

#include "iscsi/pdu.h"
#include "util/iostats.h"

struct iscsi_conn;
struct iscsi_task;

/* The SCSI Command handler (header phase, end of PDU). */
int cmd_handle_scsi_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int cmd_handle_scsi_data_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
/* A task of this connection by ITT among every state (the hash holds only those taking
 * Data-Out): the newest one not aborted, or NULL. For SNACK and command retries, which are
 * rare; a linear walk. */
struct iscsi_task *cmd_task_lookup(struct iscsi_conn *c, uint32_t itt);
void cmd_conn_teardown(struct iscsi_conn *c);

/* Unit tests only (NULL otherwise): called as a connection's teardown begins (published
 * false) and once its orphan group is published (true), on its reactor, with no lock held: what
 * another thread may do in between (a Logout or a restart naming it) done at that very point. */
extern void (*cmd_teardown_test_hook)(struct iscsi_conn *c, bool published);

#endif
