/* Logout on the target (logout.c): the Logout Request (RFC 7143 §11.14). */
#ifndef LR_ISCSI_LOGOUT_H
#define LR_ISCSI_LOGOUT_H

#include "iscsi/pdu.h"

struct iscsi_conn;

int logout_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);

#endif
