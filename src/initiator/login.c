/* The initiator's side of the login phase (RFC 7143 §6, §11.12, §11.13) as a state machine with
 * no I/O: it builds Login Requests and digests Login Responses, handing every text to the shared
 * negotiation engine (iscsi/keys.h), and runs CHAP in the security stage when it has
 * credentials (§12.1.3, one-way or mutual). conn.c and session.c move the bytes. */
#include <stdio.h>
#include <string.h>

#include "initiator/login.h"

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
    chap_wipe(l->t_chal, sizeof(l->t_chal));
    chap_wipe(l->t_r, sizeof(l->t_r));
    chap_wipe(l->want_r, sizeof(l->want_r));
}

static bool chap_on(const struct ini_login *l)
{
    return l->chap && l->chap->user[0];
}

/* ---- CHAP, the initiator's side (RFC 7143 §12.1.3) ---- */

static enum iscsi_login_status chap_key(void *ctx, const char *key, const char *value,
                                        struct iscsi_text *out)
{
    struct ini_login *l = ctx;
    (void)out;
    bool ok = true;
    if (!strcmp(key, "CHAP_A")) {
        ok = strlen(value) <= ISCSI_VALUE_MAX;
        if (ok)
            strcpy(l->t_a, value);
        l->got_a = true;
    } else if (!strcmp(key, "CHAP_I")) {
        ok = chap_parse_id(value, &l->t_id) == 0;
        l->got_i = true;
    } else if (!strcmp(key, "CHAP_C")) {
        l->t_chal_len = chap_decode(value, l->t_chal, sizeof(l->t_chal));
        ok = l->t_chal_len > 0;
        l->got_c = true;
    } else if (!strcmp(key, "CHAP_N")) {
        ok = strlen(value) <= CHAP_NAME_MAX;
        if (ok)
            strcpy(l->t_n, value);
        l->got_n = true;
    } else if (!strcmp(key, "CHAP_R")) {
        l->t_r_len = chap_decode(value, l->t_r, sizeof(l->t_r));
        ok = l->t_r_len > 0;
        l->got_r = true;
    }
    if (!ok)
        l->chap_bad = true;
    return ok ? ISCSI_LOGIN_OK : ISCSI_LOGIN_AUTH_FAILED;
}

static void add_hex(struct iscsi_text *t, const char *key, const uint8_t *b, size_t n)
{
    char hex[2 * CHAP_CHALLENGE_LEN + 3];
    chap_encode_hex(b, n, hex, sizeof(hex));
    iscsi_text_add(t, key, hex);
    chap_wipe(hex, sizeof(hex));
}

/* The target's challenge is in: answer it, and challenge the target for mutual CHAP. */
static const char *chap_answer(struct ini_login *l)
{
    const struct chap_creds *cr = l->chap;
    if (!l->got_a || !l->got_i || !l->got_c)
        return "the target did not send CHAP_A, CHAP_I and CHAP_C";
    l->chap_alg = chap_pick_alg(l->t_a, cr->algs);
    if (l->chap_alg < 0 || strchr(l->t_a, ','))
        return "the target chose a CHAP algorithm we did not offer";
    uint8_t r[CHAP_DIGEST_MAX];
    int rl = chap_response(l->chap_alg, l->t_id, cr->secret, cr->secret_len, l->t_chal,
                           (size_t)l->t_chal_len, r);
    if (rl < 0)
        return "CHAP digest failed";
    iscsi_text_add(&l->tx, "CHAP_N", cr->user);
    add_hex(&l->tx, "CHAP_R", r, (size_t)rl);
    chap_wipe(r, sizeof(r));
    if (cr->mutual_user[0]) {
        uint8_t id, chal[CHAP_CHALLENGE_LEN];
        do {
            if (chap_random(&id, 1) < 0 || chap_random(chal, sizeof(chal)) < 0)
                return "no random bytes for a challenge";
            /* never hand the target its own challenge back (reflection, §12.1.3) */
        } while ((size_t)l->t_chal_len == sizeof(chal) &&
                 chap_equal(chal, l->t_chal, sizeof(chal)));
        iscsi_text_addf(&l->tx, "CHAP_I", "%u", id);
        add_hex(&l->tx, "CHAP_C", chal, sizeof(chal));
        l->want_r_len = chap_response(l->chap_alg, id, cr->mutual_secret, cr->mutual_secret_len,
                                      chal, sizeof(chal), l->want_r);
        chap_wipe(chal, sizeof(chal));
        if (l->want_r_len < 0)
            return "CHAP digest failed";
    }
    return NULL;
}

/* The target's proof for mutual CHAP. */
static const char *chap_check_target(struct ini_login *l)
{
    const struct chap_creds *cr = l->chap;
    if (!cr->mutual_user[0])
        return l->got_n || l->got_r ? "the target sent CHAP_N/CHAP_R we did not ask for" : NULL;
    if (!l->got_n || !l->got_r)
        return "the target did not answer our CHAP challenge (mutual CHAP)";
    if (strcmp(l->t_n, cr->mutual_user) != 0)
        return "the target answered as another CHAP user";
    if (l->t_r_len != l->want_r_len || !chap_equal(l->t_r, l->want_r, (size_t)l->want_r_len))
        return "the target's CHAP_R is wrong (wrong mutual secret)";
    return NULL;
}

/* One security-stage response went through the engine: advance CHAP. l->tx gets our next
 * keys; *transit says whether we may ask to leave the stage. Returns NULL or why it failed. */
static const char *chap_step(struct ini_login *l, bool target_transit, bool *transit)
{
    const char *why = NULL;
    bool any = l->got_a || l->got_i || l->got_c || l->got_n || l->got_r;
    *transit = true;
    if (l->chap_bad)
        why = "malformed CHAP key from the target";
    else if (!l->neg.auth_chap_agreed) {
        /* the target chose AuthMethod=None (one-way CHAP offered "CHAP,None"); with mutual
         * CHAP the engine already refused that (auth_required) */
        if (any)
            why = "CHAP keys without AuthMethod=CHAP";
    } else {
        switch (l->chap_state) {
        case ICH_START: {
            if (any) {
                why = "CHAP keys before our CHAP_A";
                break;
            }
            /* our algorithms, strongest first */
            char list[32] = "";
            unsigned algs = l->chap->algs ? l->chap->algs : CHAP_ALGS_ALL;
            if (algs & CHAP_ALGS_SHA3_256)
                strcat(list, ",8");
            if (algs & CHAP_ALGS_SHA256)
                strcat(list, ",7");
            if (algs & CHAP_ALGS_MD5)
                strcat(list, ",5");
            iscsi_text_add(&l->tx, "CHAP_A", list + 1);
            l->chap_state = ICH_A_SENT;
            *transit = false;
            break;
        }
        case ICH_A_SENT:
            why = chap_answer(l);
            l->chap_state = ICH_R_SENT;
            break;
        case ICH_R_SENT:
            why = chap_check_target(l);
            l->chap_state = ICH_DONE;
            break;
        case ICH_DONE:
            if (any)
                why = "CHAP keys after authentication";
            break;
        }
        if (!why && target_transit && l->chap_state != ICH_DONE)
            why = "the target left the security stage before CHAP completed";
    }
    l->got_a = l->got_i = l->got_c = l->got_n = l->got_r = false;
    return why;
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
    if (chap_on(l)) {
        /* With mutual CHAP the target must prove itself, so None is not offered at all;
         * one-way CHAP accepts a target that wants no authentication. */
        bool mutual = l->chap->mutual_user[0];
        iscsi_text_add(&l->tx, "AuthMethod", mutual ? "CHAP" : "CHAP,None");
        l->neg.auth_required = mutual;
        l->neg.auth_key = chap_key;
        l->neg.auth_ctx = l;
    } else {
        iscsi_text_add(&l->tx, "AuthMethod", "None");
    }
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
        login_fail(l, (uint16_t)st,
                   st == ISCSI_LOGIN_AUTH_FAILED ? "CHAP: the target's security keys are not "
                                                   "acceptable"
                                                 : "target's login keys not acceptable");
        return ILSTEP_FAILED;
    }
    if (csg == ISCSI_STAGE_SECURITY && chap_on(l)) {
        bool transit;
        const char *why = chap_step(l, flags & ISCSI_LOGIN_TRANSIT, &transit);
        if (why) {
            login_fail(l, ISCSI_LOGIN_AUTH_FAILED, why);
            return ILSTEP_FAILED;
        }
        if (!(flags & ISCSI_LOGIN_TRANSIT)) {
            login_build(l, req, transit, ISCSI_STAGE_SECURITY, ISCSI_STAGE_OPERATIONAL);
            return ILSTEP_SEND;
        }
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
