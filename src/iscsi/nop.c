/* NOP-Out on the target (RFC 7143 §11.18): the answer to our ping, or the initiator's ping,
 * answered with a NOP-In that echoes its data. */
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/nop.h"
#include "iscsi/session.h"

int nop_out_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint32_t itt = bhs_get32(req, BHS_ITT);
    uint32_t ttt = bhs_get32(req, BHS_TTT);
    if (!bhs_immediate(req) && c->session)
        session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
    if (ttt != ISCSI_RSVD_TAG) {
        /* The answer to our ping (RFC 7143 §11.18). */
        if (c->nop_outstanding && ttt == c->nop_ttt)
            c->nop_outstanding = false;
        return ISCSI_OK;
    }
    if (itt == ISCSI_RSVD_TAG)
        return ISCSI_OK; /* a ping that asks for no answer */
    struct wire_pdu *rsp = conn_pdu_new(c, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL);
    if (!rsp)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)rsp->hdr;
    memcpy(h->b + BHS_LUN, req->b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, itt);
    bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true);
    return conn_send_copy(c, rsp, p->data, p->dlen); /* ping data echoed back */
}
