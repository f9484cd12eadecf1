/* Write data (dataout.c): R2Ts, the Data-Out PDUs that answer them, holes to solicit again at
 * ERL >= 1 (RFC 7143 §7.8, §7.9), and writes whose Data-Out stalls. */
#ifndef LR_ISCSI_DATAOUT_H
#define LR_ISCSI_DATAOUT_H

#include <stdbool.h>
#include <stdint.h>
#include "iscsi/pdu.h"

struct cmdsn_wait;
struct iscsi_conn;
struct iscsi_pdu_in;
struct iscsi_task;
struct iscsi_bhs;

int dataout_send_r2ts(struct iscsi_conn *c, struct iscsi_task *t);
int dataout_resend_r2t(struct iscsi_conn *c, struct iscsi_task *t, uint32_t r2tsn);
void dataout_rx_into_task(struct iscsi_pdu_in *p, struct iscsi_task *t, uint32_t off, uint32_t len);
void dataout_sequence_failed(struct iscsi_conn *c, struct iscsi_task *t, const char *why,
                             uint32_t ttt, uint32_t datasn, uint32_t off, uint32_t len);
bool dataout_hole_add(struct iscsi_task *t, uint32_t off, uint32_t len);
/* Every open R2T sequence's missing part becomes a hole (to be solicited again by recovery
 * R2Ts) and the sequences end. False when the hole list is full (the rest are dropped). */
bool dataout_r2ts_to_holes(struct iscsi_task *t);
void dataout_maybe_terminate(struct iscsi_task *t);
int dataout_handle_header(struct iscsi_conn *c, struct iscsi_pdu_in *p);
int dataout_handle_done(struct iscsi_conn *c, struct iscsi_pdu_in *p);
/* ERL >= 1, once a second: re-solicit the Data-Out of writes whose sequences stalled. */
int dataout_check_stalled(struct iscsi_conn *c, uint64_t now_ms);
/* ERL 0, once a second: ISCSI_ERR_DATA_OUT_TIMEOUT when a write's Data-Out has not come for
 * data-out-timeout seconds (its connection is then closed, freeing its tasks). */
int dataout_check_timeout(struct iscsi_conn *c, uint64_t now_ms);

#endif
