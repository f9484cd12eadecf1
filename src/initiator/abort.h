/* ABORT TASK (abort.c, RFC 7143 §11.5.1, §11.6). */
#ifndef LR_INITIATOR_ABORT_H
#define LR_INITIATOR_ABORT_H

#include "initiator/ini.h"

/* A Task Management Function Response whose ITT is one of our ABORT TASKs' (INI_ABORT_ITT). */
static inline bool ini_abort_itt(uint32_t itt)
{
    return (itt & 0xffff0000u) == INI_ABORT_ITT;
}
/* Its answer. *again: an ERL 2 orphan the target would not move to c (still allegiant, or no
 * reassignment), to be made an orphan again (ini_orphan_again), else NULL. */
int ini_abort_rsp(struct ini_conn *c, const uint8_t *hdr, struct ini_task **again);
/* An abort of t waits to be sent. */
bool ini_abort_wanted(struct lr_session *s, const struct ini_task *t);
/* ERL 2: the ABORT TASK of t, an orphan, on c instead of its TASK REASSIGN (§11.5.1: the
 * target gives the task the TMF's connection and aborts it); t belongs to c from now on. */
int ini_abort_send_orphan(struct ini_conn *c, struct ini_task *t);
/* c went down: its ABORT TASKs unanswered are to be sent again if their task lives on. */
void ini_abort_conn_down(struct ini_conn *c);
/* The session tick: pending aborts sent or settled, unanswered ones timed out. */
void ini_abort_tick(struct lr_session *s, uint64_t now);
/* The session ends: every abort not settled completes with e. */
void ini_abort_fail_all(struct lr_session *s, enum lr_err e, const char *what);

#endif
