/* ErrorRecoveryLevel 2: connection recovery (orphan.c, RFC 7143 §7.1.4, §7.2.2, §6.3.4,
 * §11.5.1, §11.9.1, §11.14-§11.15). */
#ifndef LR_INITIATOR_ORPHAN_H
#define LR_INITIATOR_ORPHAN_H

#include "initiator/ini.h"

/* The connection went down at ERL 2: its sent tasks have become orphans of its slot; expired
 * more it had sent fail, past their deadline, but the target may hold them too: the slot is
 * cleaned up (Logout reason 2) even with no orphan. */
void ini_orphan_conn_down(struct ini_conn *c, unsigned expired);
/* The session tick (its reactor, with the lock): logouts asked by the target, and at ERL 2 the
 * recovery state machine. ini_orphan_advance: the machine alone (from any thread: what must
 * run on the session's reactor, reconnecting, waits for the tick there). */
void ini_orphan_tick(struct lr_session *s, uint64_t now);
void ini_orphan_advance(struct lr_session *s, uint64_t now);
/* A reconnect login of slot c->idx reached full feature phase, or failed. */
void ini_orphan_login_done(struct ini_conn *c);
void ini_orphan_login_failed(struct ini_conn *c);
/* Responses: TMF (TASK REASSIGN), Logout of one connection (ITT INI_CLOGOUT_ITT + slot). */
int ini_orphan_tmf_rsp(struct ini_conn *c, const uint8_t *hdr);
/* t, reassigned to c (TASK REASSIGN, or ABORT TASK instead of it), is still allegiant to its
 * lost connection at the target, or the target would not move it: an orphan again, its
 * reassignment asked again shortly (within Time2Retain). */
void ini_orphan_again(struct ini_conn *c, struct ini_task *t);
/* lr_session_conn_logout_recovery: connection i, live, logs itself out "remove the connection
 * for recovery" (§11.14.1 reason 2); 0, or -1 with errno EINVAL (not an ERL 2 session in full
 * feature phase) or EAGAIN (that connection is not up, or is logging out). */
int ini_orphan_remove(struct lr_session *s, unsigned i);
int ini_orphan_logout_rsp(struct ini_conn *c, const uint8_t *hdr);
/* Async Message (§11.9.1) */
int ini_orphan_async(struct ini_conn *c, const uint8_t *hdr);

#endif
