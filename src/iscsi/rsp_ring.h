/* The ring of responses kept for a Status SNACK (rsp_ring.c). */
#ifndef LR_ISCSI_RSP_RING_H
#define LR_ISCSI_RSP_RING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "iscsi/pdu.h"

/* Responses kept besides the tasks: few are in flight at once (a TMF, a NOP-In, a Reject). A
 * Status SNACK for one overwritten meanwhile is rejected (snack_status). */
#define ISCSI_RSP_RING 16u

struct rsp_copy {
    uint32_t statsn;
    bool used;
    struct iscsi_bhs bhs;
    uint8_t *data;
    uint32_t dlen;
};

/* One per connection, allocated on first use. `resending`: a copy is being sent again (it is in
 * the ring already). */
struct rsp_ring {
    struct rsp_copy *slot;
    unsigned next;
    bool resending;
};

/* A response about to be queued; one that used a StatSN and answers no task is copied (the
 * last ISCSI_RSP_RING of them). */
void rsp_ring_keep(struct rsp_ring *r, const struct iscsi_bhs *h, const struct iovec *data,
                   int datacnt, uint32_t dlen);
/* Everything kept goes (the connection ends). */
void rsp_ring_free(struct rsp_ring *r);

#endif
