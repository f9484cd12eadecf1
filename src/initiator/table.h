/* The session's task table (table.c); taking a slot is inline in ini.h. */
#ifndef LR_INITIATOR_TABLE_H
#define LR_INITIATOR_TABLE_H

#include "initiator/ini.h"

/* ini_table_init: ntasks slots, all free (-1: no memory). */
int ini_table_init(struct lr_session *s, uint32_t ntasks);
void ini_table_free(struct lr_session *s);
/* The active task an ITT names, or NULL. */
struct ini_task *ini_task_lookup(struct lr_session *s, uint32_t itt);
/* t's slot in s->tasks: the low itt_idx_bits of its ITT. */
uint32_t ini_task_idx(const struct lr_session *s, const struct ini_task *t);
/* t ends with *res: what of it is still queued to send is let go of (ini_task_detach), its
 * slot is free again, then its callback runs. */
void ini_task_complete(struct lr_session *s, struct ini_task *t, struct lr_result *res);
/* p, t's SCSI Command or a Data-Out of it with dlen bytes of data, about to be queued on
 * t->conn: counted in t->queued until it leaves the queue (a command written whole sets
 * t->cmd_sent); resend: data sent before, its bytes counted in the connection's resend_unsent
 * until then. */
void ini_task_pdu_mark(struct ini_task *t, struct wire_pdu *p, uint32_t dlen, bool resend);
/* t leaves t->conn (it completes, or becomes an orphan again) with PDUs of it still queued
 * there: its Data-Out are dropped, a command (or a PDU partly written) goes out from a copy,
 * and none of them refers to t any more. On t->conn's thread. */
void ini_task_detach(struct lr_session *s, struct ini_task *t);

#endif
