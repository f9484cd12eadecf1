/* Answers to SCSI commands (response.c): the SCSI Response and Data-In of a task, cut into PDUs
 * the way they can be cut again for a SNACK, and the answered tasks kept until ExpStatSN
 * acknowledges them (ERL >= 1). */
#ifndef LR_ISCSI_RESPONSE_H
#define LR_ISCSI_RESPONSE_H

#include <stdbool.h>
#include <stdint.h>

struct cmdsn_wait;
struct iscsi_conn;
struct iscsi_pdu_in;
struct iscsi_task;
struct iscsi_bhs;

/* How a status goes out: the first time; a retransmission of the one sent (same StatSN, the
 * command counted done already, §11.16); after TASK REASSIGN, on a new connection with a new
 * StatSN of its own (the command counted done already, RFC 7143 §7.2.2). */
enum rsp_mode {
    RSP_FIRST,
    RSP_AGAIN,
    RSP_REASSIGN,
};

enum data_in_mode {
    DIN_FIRST,     /* the original transmission */
    DIN_AGAIN,     /* an exact replica (Data SNACK, §11.16) */
    DIN_NO_STATUS, /* resegmented (R-Data SNACK): a SCSI Response follows with the status */
    DIN_REASSIGN,  /* after TASK REASSIGN: the status with a new StatSN (RSP_REASSIGN) */
};

uint32_t rsp_edtl(const struct iscsi_task *t);
void rsp_fill_sn_again(struct iscsi_conn *c, struct iscsi_bhs *h, uint32_t statsn);
int rsp_status(struct iscsi_conn *c, struct iscsi_task *t, enum rsp_mode mode, uint32_t snack_tag);
int rsp_send_status(struct iscsi_conn *c, struct iscsi_task *t);
void rsp_data_in_seg(const struct iscsi_task *t, uint32_t k, uint32_t *off, uint32_t *len,
                     bool *final);
/* The Data-In DataSN count of an answered read (0 for any other task). */
uint32_t rsp_data_in_count(const struct iscsi_task *t);
int rsp_queue_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t datasn, uint32_t off,
                      uint32_t len, bool final, enum data_in_mode mode);
int rsp_send_data_in(struct iscsi_conn *c, struct iscsi_task *t);
/* Data-In PDUs [beg, end) of t cut as data_in_seg says, in `mode`. */
int rsp_queue_data_in_run(struct iscsi_conn *c, struct iscsi_task *t, uint32_t beg, uint32_t end,
                          enum data_in_mode mode);
/* ERL >= 1 retransmissions (snack.c): Data-In PDUs [beg, beg+n) of a read (n = 0: to the
 * end), with the original DataSN, offset, flags and, on the last, status and StatSN; the
 * status of an answered task again, exactly as it went out; an R2T by R2TSN. */
int rsp_resend_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t beg, uint32_t n);
int rsp_resend_status(struct iscsi_conn *c, struct iscsi_task *t);
void rsp_retained_bound(struct iscsi_conn *c);
/* The socket did not take in a tick what was queued at its start: the queued Data-In of READs
 * sent from a RAM LUN in place take copies of their own and the LUN's pages are let go, so a
 * reader that stopped (or crawls) holds other initiators' WRITEs for a second or two, not
 * until it is dropped (docs/performance.md, "RAM LUN reads without the copy"). ISCSI_OK or
 * ISCSI_ERR_NOMEM. */
int rsp_unpin_stalled(struct iscsi_conn *c);
/* ERL >= 1: the initiator acknowledged every StatSN below exp_statsn: release the retained
 * tasks it covers (§4.2.2.2). */
void rsp_ack_statsn(struct iscsi_conn *c, uint32_t exp_statsn);
int rsp_resend_data_in_from(struct iscsi_conn *c, struct iscsi_task *t, uint32_t k0);

#endif
