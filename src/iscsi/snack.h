/* ERL >= 1 retransmission (snack.c): SNACK Requests and the copies of responses they need. */
#ifndef LR_ISCSI_SNACK_H
#define LR_ISCSI_SNACK_H

#include <stdint.h>
#include <sys/uio.h>

#include "iscsi/pdu.h"

struct iscsi_conn;

int snack_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
/* ERL >= 1: a response about to be queued; one that used a StatSN and answers no task is
 * copied for a Status SNACK (the last ISCSI_RSP_RING of them). */
void snack_keep_response(struct iscsi_conn *c, const struct iscsi_bhs *h, const struct iovec *data,
                         int datacnt, uint32_t dlen);
void snack_conn_cleanup(struct iscsi_conn *c);

#endif
