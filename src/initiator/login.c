/* The initiator's side of the login phase (RFC 7143 §6, §11.12, §11.13) as a state machine with
 * no I/O: it builds Login Requests and digests Login Responses, handing every text to the shared
 * negotiation engine (iscsi/keys.h). conn.c and session.c move the bytes. */
#include <stdio.h>
#include <string.h>

#include "initiator/ini.h"

void ini_login_init(struct ini_login *l, const struct iscsi_params *local, bool leading,
                    bool discovery, const char *initiator_name, const char *target_name,
                    const uint8_t isid[6], uint16_t tsih, uint16_t cid, uint32_t itt,
                    uint32_t cmdsn)
{
    memset(l, 0, sizeof(*l));
    l->state = ILS_SECURITY;
    iscsi_neg_init(&l->neg, ISCSI_SIDE_INITIATOR, local);
    l->neg.leading = leading;
    l->neg.session_type = discovery ? ISCSI_SESSION_DISCOVERY : ISCSI_SESSION_NORMAL;
    iscsi_text_init(&l->rx);
    iscsi_text_init(&l->tx);
    l->leading = leading;
    l->discovery = discovery;
    snprintf(l->initiator_name, sizeof(l->initiator_name), "%s", initiator_name);
    snprintf(l->target_name, sizeof(l->target_name), "%s", target_name ? target_name : "");
    memcpy(l->isid, isid, 6);
    l->tsih = tsih;
    l->cid = cid;
    l->itt = itt;
    l->cmdsn = cmdsn;
}

void ini_login_free(struct ini_login *l)
{
    iscsi_text_free(&l->rx);
    iscsi_text_free(&l->tx);
}

static void login_fail(struct ini_login *l, uint16_t status, const char *why)
{
    l->state = ILS_FAILED;
    l->status = status;
    l->why = why;
}

/* RFC 7143 §11.12: Login Requests are always immediate; CmdSN is not advanced by them. */
static void login_build(struct ini_login *l, struct iscsi_bhs *req, bool transit,
                        enum iscsi_stage csg, enum iscsi_stage nsg)
{
    uint8_t flags = (uint8_t)((unsigned)csg << 2);
    if (transit)
        flags |= (uint8_t)(ISCSI_LOGIN_TRANSIT | (unsigned)nsg);
    bhs_init(req, ISCSI_OP_LOGIN_REQ, flags);
    req->b[0] |= ISCSI_BHS_IMMEDIATE;
    req->b[BHS_VERSION_MAX] = 0;
    req->b[BHS_VERSION_MIN] = 0;
    memcpy(req->b + BHS_ISID, l->isid, 6);
    put_be16(req->b + BHS_TSIH, l->tsih);
    bhs_put32(req, BHS_ITT, l->itt);
    put_be16(req->b + BHS_CID, l->cid);
    bhs_put32(req, BHS_CMDSN, l->cmdsn);
    bhs_put32(req, BHS_EXPSTATSN, l->expstatsn);
    bhs_set_dlength(req, l->tx.len);
}

/* Security stage: the names and AuthMethod=None (RFC 7143 §13.4, §13.5, §12.1); InitiatorName
 * and TargetName go in the first request of every connection, SessionType only on the leading
 * one (it is a leading-only key, §13.21). Operational proposals follow in the next stage. */
int ini_login_start(struct ini_login *l, struct iscsi_bhs *req)
{
    iscsi_text_reset(&l->tx);
    iscsi_text_add(&l->tx, "InitiatorName", l->initiator_name);
    if (l->leading)
        iscsi_text_add(&l->tx, "SessionType", l->discovery ? "Discovery" : "Normal");
    if (!l->discovery)
        iscsi_text_add(&l->tx, "TargetName", l->target_name);
    iscsi_text_add(&l->tx, "AuthMethod", "None");
    if (iscsi_neg_offer(&l->neg, ISCSI_STAGE_SECURITY, &l->tx) < 0 || l->tx.overflow) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "login text overflow");
        return -1;
    }
    l->state = ILS_SECURITY;
    login_build(l, req, true, ISCSI_STAGE_SECURITY, ISCSI_STAGE_OPERATIONAL);
    return 0;
}

enum ini_login_step ini_login_rx(struct ini_login *l, const struct iscsi_bhs *rsp,
                                 const uint8_t *data, uint32_t len, struct iscsi_bhs *req)
{
    if (l->state == ILS_DONE || l->state == ILS_FAILED)
        return l->state == ILS_DONE ? ILSTEP_DONE : ILSTEP_FAILED;
    if (bhs_opcode(rsp) != ISCSI_OP_LOGIN_RSP) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "unexpected PDU during login");
        return ILSTEP_FAILED;
    }
    uint8_t flags = rsp->b[BHS_FLAGS];
    uint16_t status = (uint16_t)(rsp->b[BHS_STATUS_CLASS] << 8 | rsp->b[BHS_STATUS_DETAIL]);
    /* StatSN is valid once the target answers (§11.13.4); ExpStatSN follows it. */
    l->expstatsn = bhs_get32(rsp, BHS_STATSN) + 1;
    l->exp_cmdsn = bhs_get32(rsp, BHS_EXPCMDSN);
    l->max_cmdsn = bhs_get32(rsp, BHS_MAXCMDSN);
    if (status != ISCSI_LOGIN_OK) {
        login_fail(l, status, "login refused by the target");
        return ILSTEP_FAILED;
    }
    if (rsp->b[BHS_VERSION_MIN] != 0) {
        login_fail(l, ISCSI_LOGIN_UNSUPPORTED_VERSION, "unsupported version");
        return ILSTEP_FAILED;
    }
    if (bhs_get32(rsp, BHS_ITT) != l->itt) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "login response with a wrong ITT");
        return ILSTEP_FAILED;
    }
    if (++l->rounds > INI_LOGIN_MAX_ROUNDS) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "login does not converge");
        return ILSTEP_FAILED;
    }
    enum iscsi_stage csg =
        l->state == ILS_SECURITY ? ISCSI_STAGE_SECURITY : ISCSI_STAGE_OPERATIONAL;
    if (ISCSI_LOGIN_CSG(flags) != (unsigned)csg) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "login response for another stage");
        return ILSTEP_FAILED;
    }
    if (len && iscsi_text_append(&l->rx, data, len) < 0) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "login text too long");
        return ILSTEP_FAILED;
    }
    iscsi_text_reset(&l->tx);
    /* §11.13.2: C bit - more text follows; acknowledge with an empty request (§6.2.1). */
    if (flags & ISCSI_FLAG_CONTINUE) {
        login_build(l, req, false, csg, csg);
        return ILSTEP_SEND;
    }
    enum iscsi_login_status st = iscsi_neg_handle(&l->neg, csg, l->rx.data, l->rx.len, &l->tx);
    iscsi_text_reset(&l->rx);
    if (st != ISCSI_LOGIN_OK) {
        login_fail(l, (uint16_t)st, "target's login keys not acceptable");
        return ILSTEP_FAILED;
    }
    if (flags & ISCSI_LOGIN_TRANSIT) {
        unsigned nsg = ISCSI_LOGIN_NSG(flags);
        if (nsg == ISCSI_STAGE_FULL_FEATURE) {
            l->tsih = get_be16(rsp->b + BHS_TSIH);
            if (l->tsih == 0) {
                login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "final login response without TSIH");
                return ILSTEP_FAILED;
            }
            l->state = ILS_DONE;
            return ILSTEP_DONE;
        }
        if (nsg != ISCSI_STAGE_OPERATIONAL || csg != ISCSI_STAGE_SECURITY) {
            login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "bad next stage in login response");
            return ILSTEP_FAILED;
        }
        l->state = ILS_OPERATIONAL;
        csg = ISCSI_STAGE_OPERATIONAL;
    }
    /* Answer the target, add whatever we still want to settle, and ask to move on. */
    if (iscsi_neg_offer(&l->neg, csg, &l->tx) < 0 || l->tx.overflow) {
        login_fail(l, ISCSI_LOGIN_INITIATOR_ERROR, "login text overflow");
        return ILSTEP_FAILED;
    }
    enum iscsi_stage nsg =
        csg == ISCSI_STAGE_SECURITY ? ISCSI_STAGE_OPERATIONAL : ISCSI_STAGE_FULL_FEATURE;
    login_build(l, req, true, csg, nsg);
    return ILSTEP_SEND;
}
