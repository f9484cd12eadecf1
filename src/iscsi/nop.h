/* NOP-Out on the target (nop.c), RFC 7143 §11.18. */
#ifndef LR_ISCSI_NOP_H
#define LR_ISCSI_NOP_H

#include "iscsi/pdu.h"

struct iscsi_conn;

int nop_out_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);

#endif
