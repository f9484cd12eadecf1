/* The initiator's login state machine (login.c): builds Login Requests, digests Login
 * Responses; no sockets. */
#ifndef LR_INITIATOR_LOGIN_H
#define LR_INITIATOR_LOGIN_H

#include <stdbool.h>
#include <stdint.h>

#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "iscsi/pdu.h"

enum ini_login_state { ILS_SECURITY, ILS_OPERATIONAL, ILS_DONE, ILS_FAILED };
enum ini_login_step { ILSTEP_SEND, ILSTEP_DONE, ILSTEP_FAILED };

#define INI_LOGIN_MAX_ROUNDS 16

struct ini_login {
    enum ini_login_state state;
    struct iscsi_neg neg;
    struct iscsi_text rx; /* target text, accumulated over continuation PDUs (C bit) */
    struct iscsi_text tx; /* text of the next request */
    bool leading, discovery;
    char initiator_name[ISCSI_NAME_MAX + 1];
    char target_name[ISCSI_NAME_MAX + 1];
    uint8_t isid[6];
    uint16_t tsih, cid;
    uint32_t itt, cmdsn, expstatsn;
    uint32_t exp_cmdsn, max_cmdsn; /* from the last response */
    unsigned rounds;
    uint16_t status; /* login status class << 8 | detail on failure */
    const char *why;
    /* CHAP (RFC 7143 §12.1.3), when chap && chap->user[0]: set by the caller after init */
    const struct chap_creds *chap;
    enum { ICH_START, ICH_A_SENT, ICH_R_SENT, ICH_DONE } chap_state;
    int chap_alg;
    bool got_a, got_i, got_c, got_n, got_r, chap_bad;
    char t_a[ISCSI_VALUE_MAX + 1];
    uint8_t t_id;
    uint8_t t_chal[CHAP_CHALLENGE_MAX];
    int t_chal_len;
    char t_n[CHAP_NAME_MAX + 1];
    uint8_t t_r[CHAP_DIGEST_MAX];
    int t_r_len;
    uint8_t want_r[CHAP_DIGEST_MAX]; /* what the target must answer our challenge with */
    int want_r_len;
};

void ini_login_init(struct ini_login *l, const struct iscsi_params *local, bool leading,
                    bool discovery, const char *initiator_name, const char *target_name,
                    const uint8_t isid[6], uint16_t tsih, uint16_t cid, uint32_t itt,
                    uint32_t cmdsn);
void ini_login_free(struct ini_login *l);
/* First Login Request of the connection: header into req, text in l->tx. */
int ini_login_start(struct ini_login *l, struct iscsi_bhs *req);
/* A Login Response arrived (header and its data segment). ILSTEP_SEND: req and l->tx hold the
 * next request. ILSTEP_DONE: full feature phase (l->tsih set). ILSTEP_FAILED: l->status and
 * l->why say why. */
enum ini_login_step ini_login_rx(struct ini_login *l, const struct iscsi_bhs *rsp,
                                 const uint8_t *data, uint32_t len, struct iscsi_bhs *req);

#endif
