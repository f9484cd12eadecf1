/* Task scheduling: the CmdSN window, connections chosen, inboxes (sched.c). */
#ifndef LR_INITIATOR_SCHED_H
#define LR_INITIATOR_SCHED_H

#include "initiator/ini.h"

/* Hand task t (CmdSN assigned) to connection c: sent now on c's thread, else through
 * c's inbox. */
void ini_conn_submit(struct ini_conn *c, struct ini_task *t);
/* Send what the inbox holds (on c's thread, with the lock). */
void ini_conn_drain_inbox(struct ini_conn *c);
/* Re-register the connection's socket on r (on the thread that owns it now, with the lock),
 * after sending what this thread still owes it. */
void ini_conn_move(struct ini_conn *c, struct reactor *r);
/* ExpCmdSN/MaxCmdSN from any response (RFC 7143 §4.2.2.1 rules). */
void ini_session_update_window(struct lr_session *s, uint32_t exp, uint32_t max);
void ini_session_kick(struct lr_session *s);
/* Fail every task waiting for the window or a connection (resendq, waitq). */
void ini_session_fail_waiting(struct lr_session *s, enum lr_err e, const char *what);

#endif
