/* The login phase (login.c, RFC 7143 §6, §11.12). */
#ifndef LR_ISCSI_LOGIN_H
#define LR_ISCSI_LOGIN_H

#include <stddef.h>

#include "iscsi/pdu.h"

struct iscsi_conn;

int login_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
void login_conn_cleanup(struct iscsi_conn *c);
/* The highest ErrorRecoveryLevel the target offers (login.c): ISCSI_ERL_IMPLEMENTED. Unit
 * tests of the recovery paths raise it before logging in; nothing else touches it. */
extern unsigned iscsi_target_erl_max;

#endif
