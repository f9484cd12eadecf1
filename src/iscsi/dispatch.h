/* The target's PDU dispatch (dispatch.c): above every handler and the connection. */
#ifndef LR_ISCSI_DISPATCH_H
#define LR_ISCSI_DISPATCH_H

#include "iscsi/pdu.h"

struct iscsi_conn;
struct iscsi_server;
struct reactor;

/* The PDU dispatcher: the receive engine's two calls per received PDU. Both take the
 * connection's PDU (struct iscsi_pdu_in), run the handler for its opcode and phase, and return
 * its status (enum iscsi_status); a negative status has closed the connection (here, the one
 * place a handler's verdict closes it) and the engine must stop.
 *   conn_pdu_header: the BHS is in (and checked: digest, length). The handler may place the
 *     data segment (p->dst/dstcnt, or p->discard) and leave its verdict in p->reject_reason /
 *     p->task; with neither dst nor discard set, the engine receives the data into its buffer.
 *   conn_pdu_done: the data segment is in (p->data points at it when it went to the engine's
 *     buffer). Runs the end-of-PDU handler with the header phase's verdict, then releases
 *     p->task's reference. */
int conn_pdu_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int conn_pdu_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);

/* Test seam (tests/unit/tgt_harness.c, with iscsi_conn_feed and iscsi_conn_take_tx of
 * conn.h). */
/* A connection in login phase with no descriptor and no timer (no login deadline, no NOP-In
 * pings): the caller closes it with conn_close(). NULL when memory ran out. */
struct iscsi_conn *iscsi_conn_new_detached(struct iscsi_server *srv, struct reactor *r);

#endif
