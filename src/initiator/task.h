/* A SCSI task's PDUs on the wire (task.c). */
#ifndef LR_INITIATOR_TASK_H
#define LR_INITIATOR_TASK_H

#include "initiator/ini.h"

/* SAM-5 single level LUN into the 8 bytes at p. */
void ini_fill_lun(uint8_t *p, uint64_t lun);
/* Build and queue the command PDU (+ immediate and unsolicited data) on c. */
int ini_task_send(struct ini_conn *c, struct ini_task *t);
/* Check a Data-In's window against task t's buffer (INI_ERR_DATA_IN_RANGE if it lies outside)
 * and, if copy, copy a payload the engine did not place there directly. */
int ini_task_place_data_in(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                           const uint8_t *data, uint32_t dlen, bool copy);
/* The command PDU of t (with its immediate and unsolicited data) again, unchanged: a retry
 * (RFC 7143 §7.2.1). */
int ini_task_resend_cmd(struct ini_conn *c, struct ini_task *t);
/* The status of a Data-In with S or of a SCSI Response into *r (§11.4, §11.7.4). */
void ini_task_result(struct ini_task *t, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                     struct lr_result *r);
/* Data-Out PDUs answering an R2T (or unsolicited, ttt reserved), from the task's buffer;
 * again: data sent before, counted in c->resend_unsent until it leaves. */
int ini_task_data_out(struct ini_conn *c, struct ini_task *t, uint32_t ttt, uint32_t off,
                      uint32_t len, bool again);
/* A recovery PDU of n bytes (header included) about to be queued: counted until it leaves. */
void ini_resend_account(struct ini_conn *c, struct wire_pdu *p, uint64_t n);
/* ERL 0: t completes with the status of a Data-In with S or of a SCSI Response. */
void ini_task_status(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                     const uint8_t *data, uint32_t dlen);
/* t fails with a protocol error (what: why). */
void ini_task_fail(struct ini_conn *c, struct ini_task *t, const char *what);
/* ERL 2: the TASK REASSIGN of t (an orphan) on c, which t belongs to from now on. */
int ini_task_send_reassign(struct ini_conn *c, struct ini_task *t);

#endif
