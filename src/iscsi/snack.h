/* ERL >= 1 retransmission (snack.c): SNACK Requests and the copies of responses they need. */
#ifndef LR_ISCSI_SNACK_H
#define LR_ISCSI_SNACK_H

#include <stdint.h>
#include <sys/uio.h>

#include "iscsi/pdu.h"

struct iscsi_conn;

int snack_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);

#endif
