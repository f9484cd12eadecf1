/* Copies of the last responses of a connection that took a StatSN and answer no task (Reject,
 * NOP-In, Async Message, TMF, Text, Logout), for a Status SNACK at ERL >= 1 (snack.c, RFC 7143
 * §11.16): SCSI Responses and Data-In are rebuilt from their retained task instead. The ring
 * knows PDUs, not connections: the connection keeps one and feeds it what it sends. */
#include <stdlib.h>

#include "iscsi/rsp_ring.h"
#include "util/iov.h"

static bool keeps_response(const struct iscsi_bhs *h)
{
    switch (bhs_opcode(h)) {
    case ISCSI_OP_NOP_IN: /* an answer to a NOP-Out; a ping (ITT reserved) takes no StatSN */
        return bhs_get32(h, BHS_ITT) != ISCSI_RSVD_TAG;
    case ISCSI_OP_REJECT:
    case ISCSI_OP_ASYNC_MSG: /* numbered too (§11.9) */
    case ISCSI_OP_TMF_RSP:
    case ISCSI_OP_TEXT_RSP:
    case ISCSI_OP_LOGOUT_RSP:
        return true;
    default:
        return false; /* SCSI Response and Data-In: rebuilt from the retained task */
    }
}

void rsp_ring_keep(struct rsp_ring *r, const struct iscsi_bhs *h, const struct iovec *data,
                   int datacnt, uint32_t dlen)
{
    if (r->resending || !keeps_response(h))
        return;
    if (!r->slot) {
        r->slot = calloc(ISCSI_RSP_RING, sizeof(*r->slot));
        if (!r->slot)
            return; /* kept nothing: a SNACK for it is rejected, as for one overwritten */
    }
    struct rsp_copy *k = &r->slot[r->next++ % ISCSI_RSP_RING];
    free(k->data);
    *k = (struct rsp_copy){.statsn = bhs_get32(h, BHS_STATSN), .bhs = *h};
    if (dlen) {
        k->data = malloc(dlen);
        if (!k->data)
            return;
        iov_copy_out(data, datacnt, k->data, dlen);
        k->dlen = dlen;
    }
    k->used = true;
}

void rsp_ring_free(struct rsp_ring *r)
{
    if (!r->slot)
        return;
    for (unsigned i = 0; i < ISCSI_RSP_RING; i++)
        free(r->slot[i].data);
    free(r->slot);
    r->slot = NULL;
}
