/* The one declarative table of iSCSI login/text keys (RFC 7143 §13, RFC 7144 §13) and the
 * negotiation engine around it (RFC 7143 §6.2): answering the peer's offers, checking the
 * answers to ours, recording declarations, and the RFC defaults. Target and initiator share it. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "iscsi/keys.h"
#include "util/log.h"

enum key_id {
    KEY_HEADER_DIGEST,
    KEY_DATA_DIGEST,
    KEY_MAX_CONNECTIONS,
    KEY_SEND_TARGETS,
    KEY_TARGET_NAME,
    KEY_INITIATOR_NAME,
    KEY_TARGET_ALIAS,
    KEY_INITIATOR_ALIAS,
    KEY_TARGET_ADDRESS,
    KEY_TPGT,
    KEY_INITIAL_R2T,
    KEY_IMMEDIATE_DATA,
    KEY_MRDSL,
    KEY_MAX_BURST,
    KEY_FIRST_BURST,
    KEY_TIME2WAIT,
    KEY_TIME2RETAIN,
    KEY_MAX_OUTSTANDING_R2T,
    KEY_DATA_PDU_IN_ORDER,
    KEY_DATA_SEQUENCE_IN_ORDER,
    KEY_ERL,
    KEY_SESSION_TYPE,
    KEY_AUTH_METHOD,
    KEY_OF_MARKER,
    KEY_IF_MARKER,
    KEY_OF_MARK_INT,
    KEY_IF_MARK_INT,
    KEY_TASK_REPORTING,
    KEY_PROTOCOL_LEVEL,
    KEY_RDMA_EXTENSIONS,
    KEY_CHAP_A,
    KEY_CHAP_I,
    KEY_CHAP_C,
    KEY_CHAP_N,
    KEY_CHAP_R,
    KEY_COUNT
};
_Static_assert(KEY_COUNT <= ISCSI_KEY_COUNT_MAX, "one bookkeeping bit per key");

enum key_type {
    KT_AND,      /* Boolean, result = offer AND ours (§6.2.2) */
    KT_OR,       /* Boolean, result = offer OR ours */
    KT_MIN,      /* numerical, result = the smaller value */
    KT_MAX,      /* numerical, result = the larger value */
    KT_DECL_NUM, /* numerical declaration: recorded, never answered */
    KT_DECL_STR, /* string declaration: recorded, never answered */
    KT_LIST,     /* list of values: the acceptor picks the first it supports (§6.2.1) */
    KT_OBSOLETE, /* marker keys, obsoleted by RFC 7143 §13.26: answered Reject */
    KT_AUTH,     /* CHAP_* (§12.1.3): passed to the authentication hook */
};

/* Who may send the key ("Senders:" in §13) */
#define S_I 0x1
#define S_T 0x2
/* When ("Use:"): security stage, operational stage, full feature phase (Text) */
#define P_SEC 0x1
#define P_OP 0x2
#define P_FFP 0x4
#define P_LOGIN (P_SEC | P_OP)
#define P_ALL (P_SEC | P_OP | P_FFP)
/* Flags */
#define F_LO 0x01       /* "Use: LO": leading connection only */
#define F_IRR_DISC 0x02 /* "Irrelevant when: SessionType=Discovery" */
#define F_OFFER 0x04    /* the initiator proposes it in the operational stage */
#define F_REPEAT 0x08   /* may appear more than once (TargetAddress, §13.8) */
#define F_CONN 0x10     /* "Scope: CO" (the others are session-wide) */

#define NO_FIELD ((size_t)-1)
#define FIELD(f) offsetof(struct iscsi_params, f)

struct key_def {
    const char *name;
    uint8_t type;    /* enum key_type */
    uint8_t senders; /* S_* */
    uint8_t phases;  /* P_* */
    uint8_t flags;   /* F_* */
    uint32_t min, max, def;
    size_t field; /* in struct iscsi_params (bool for Booleans and digests, else uint32_t) */
};

#define NUM_MAX ISCSI_MRDSL_MAX /* 2^24-1, the upper bound of every length key */

static const struct key_def keys[KEY_COUNT] = {
    /* §13.1: lists of CRC32C/None, connection scope, default None */
    [KEY_HEADER_DIGEST] = {"HeaderDigest", KT_LIST, S_I | S_T, P_OP, F_OFFER | F_CONN, 0, 1, 0,
                           FIELD(header_digest)},
    [KEY_DATA_DIGEST] = {"DataDigest", KT_LIST, S_I | S_T, P_OP, F_OFFER | F_CONN, 0, 1, 0,
                         FIELD(data_digest)},
    /* §13.2 */
    [KEY_MAX_CONNECTIONS] = {"MaxConnections", KT_MIN, S_I | S_T, P_OP, F_LO | F_IRR_DISC | F_OFFER,
                             1, 65535, 1, FIELD(max_connections)},
    /* §13.3: Text request only; the discovery code answers it */
    [KEY_SEND_TARGETS] = {"SendTargets", KT_DECL_STR, S_I, P_FFP, 0, 0, 0, 0, NO_FIELD},
    /* §13.4: initiator at login; target only inside a SendTargets answer */
    [KEY_TARGET_NAME] = {"TargetName", KT_DECL_STR, S_I | S_T, P_ALL, 0, 0, 0, 0, NO_FIELD},
    [KEY_INITIATOR_NAME] = {"InitiatorName", KT_DECL_STR, S_I, P_LOGIN, 0, 0, 0, 0, NO_FIELD},
    [KEY_TARGET_ALIAS] = {"TargetAlias", KT_DECL_STR, S_T, P_ALL, 0, 0, 0, 0, NO_FIELD},
    [KEY_INITIATOR_ALIAS] = {"InitiatorAlias", KT_DECL_STR, S_I, P_ALL, 0, 0, 0, 0, NO_FIELD},
    [KEY_TARGET_ADDRESS] = {"TargetAddress", KT_DECL_STR, S_T, P_ALL, F_REPEAT, 0, 0, 0, NO_FIELD},
    [KEY_TPGT] = {"TargetPortalGroupTag", KT_DECL_NUM, S_T, P_LOGIN, 0, 0, 65535, 0, NO_FIELD},
    /* §13.10 - §13.20: the session-wide operational keys */
    [KEY_INITIAL_R2T] = {"InitialR2T", KT_OR, S_I | S_T, P_OP, F_LO | F_IRR_DISC | F_OFFER, 0, 1, 1,
                         FIELD(initial_r2t)},
    [KEY_IMMEDIATE_DATA] = {"ImmediateData", KT_AND, S_I | S_T, P_OP, F_LO | F_IRR_DISC | F_OFFER,
                            0, 1, 1, FIELD(immediate_data)},
    /* §13.12: declarative; the peer's value is our send limit */
    [KEY_MRDSL] = {"MaxRecvDataSegmentLength", KT_DECL_NUM, S_I | S_T, P_OP | P_FFP, F_CONN,
                   ISCSI_MRDSL_MIN, NUM_MAX, 8192, FIELD(peer_max_recv_dsl)},
    [KEY_MAX_BURST] = {"MaxBurstLength", KT_MIN, S_I | S_T, P_OP, F_LO | F_IRR_DISC | F_OFFER, 512,
                       NUM_MAX, 262144, FIELD(max_burst)},
    /* §13.14: also irrelevant when InitialR2T=Yes and ImmediateData=No; we answer it anyway */
    [KEY_FIRST_BURST] = {"FirstBurstLength", KT_MIN, S_I | S_T, P_OP, F_LO | F_IRR_DISC | F_OFFER,
                         512, NUM_MAX, 65536, FIELD(first_burst)},
    [KEY_TIME2WAIT] = {"DefaultTime2Wait", KT_MAX, S_I | S_T, P_OP, F_LO | F_OFFER, 0, 3600, 2,
                       FIELD(default_time2wait)},
    [KEY_TIME2RETAIN] = {"DefaultTime2Retain", KT_MIN, S_I | S_T, P_OP, F_LO | F_OFFER, 0, 3600, 20,
                         FIELD(default_time2retain)},
    [KEY_MAX_OUTSTANDING_R2T] = {"MaxOutstandingR2T", KT_MIN, S_I | S_T, P_OP,
                                 F_LO | F_IRR_DISC | F_OFFER, 1, 65535, 1,
                                 FIELD(max_outstanding_r2t)},
    [KEY_DATA_PDU_IN_ORDER] = {"DataPDUInOrder", KT_OR, S_I | S_T, P_OP,
                               F_LO | F_IRR_DISC | F_OFFER, 0, 1, 1, FIELD(data_pdu_in_order)},
    [KEY_DATA_SEQUENCE_IN_ORDER] = {"DataSequenceInOrder", KT_OR, S_I | S_T, P_OP,
                                    F_LO | F_IRR_DISC | F_OFFER, 0, 1, 1,
                                    FIELD(data_sequence_in_order)},
    [KEY_ERL] = {"ErrorRecoveryLevel", KT_MIN, S_I | S_T, P_OP, F_LO | F_OFFER, 0, 2, 0,
                 FIELD(erl)},
    /* §13.21: declared by the initiator in its first Login Request */
    [KEY_SESSION_TYPE] = {"SessionType", KT_DECL_STR, S_I, P_LOGIN, F_LO, 0, 0, 0, NO_FIELD},
    /* §12.1: security stage only */
    [KEY_AUTH_METHOD] = {"AuthMethod", KT_LIST, S_I | S_T, P_SEC, 0, 0, 0, 0, NO_FIELD},
    /* §13.26: obsolete; "Reject" (SHOULD for the markers, MUST for the intervals) */
    [KEY_OF_MARKER] = {"OFMarker", KT_OBSOLETE, S_I | S_T, P_OP, F_CONN, 0, 0, 0, NO_FIELD},
    [KEY_IF_MARKER] = {"IFMarker", KT_OBSOLETE, S_I | S_T, P_OP, F_CONN, 0, 0, 0, NO_FIELD},
    [KEY_OF_MARK_INT] = {"OFMarkInt", KT_OBSOLETE, S_I | S_T, P_OP, F_CONN, 0, 0, 0, NO_FIELD},
    [KEY_IF_MARK_INT] = {"IFMarkInt", KT_OBSOLETE, S_I | S_T, P_OP, F_CONN, 0, 0, 0, NO_FIELD},
    /* RFC 7144 §13.2: we implement RFC3720 task reporting only */
    [KEY_TASK_REPORTING] = {"TaskReporting", KT_LIST, S_I | S_T, P_OP, F_LO | F_IRR_DISC, 0, 0, 0,
                            NO_FIELD},
    /* RFC 7144 §13.1: Minimum; we are an RFC 7143 implementation, level 1 (the default) */
    [KEY_PROTOCOL_LEVEL] = {"iSCSIProtocolLevel", KT_MIN, S_I | S_T, P_OP, F_LO, 0, 31, 1,
                            NO_FIELD},
    /* RFC 7145 §6.3.1 (iSER): AND, default No; we are TCP only, so always No */
    [KEY_RDMA_EXTENSIONS] = {"RDMAExtensions", KT_AND, S_I | S_T, P_OP, F_LO, 0, 1, 0, NO_FIELD},
    /* §12.1.3: CHAP exchange, handled by the auth hook */
    [KEY_CHAP_A] = {"CHAP_A", KT_AUTH, S_I | S_T, P_SEC, 0, 0, 0, 0, NO_FIELD},
    [KEY_CHAP_I] = {"CHAP_I", KT_AUTH, S_I | S_T, P_SEC, 0, 0, 0, 0, NO_FIELD},
    [KEY_CHAP_C] = {"CHAP_C", KT_AUTH, S_I | S_T, P_SEC, 0, 0, 0, 0, NO_FIELD},
    [KEY_CHAP_N] = {"CHAP_N", KT_AUTH, S_I | S_T, P_SEC, 0, 0, 0, 0, NO_FIELD},
    [KEY_CHAP_R] = {"CHAP_R", KT_AUTH, S_I | S_T, P_SEC, 0, 0, 0, 0, NO_FIELD},
};

void iscsi_params_default(struct iscsi_params *p)
{
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < KEY_COUNT; i++) {
        const struct key_def *k = &keys[i];
        if (k->field == NO_FIELD)
            continue;
        if (k->type == KT_AND || k->type == KT_OR || k->type == KT_LIST)
            *(bool *)((char *)p + k->field) = k->def != 0;
        else
            *(uint32_t *)((char *)p + k->field) = k->def;
    }
    p->max_recv_dsl = keys[KEY_MRDSL].def; /* ours: the same RFC default until declared */
}

/* ---- field access and value parsing ---- */

static bool key_is_bool(const struct key_def *k)
{
    return k->type == KT_AND || k->type == KT_OR || k->type == KT_LIST;
}

/* A key without a field (iSCSIProtocolLevel, RDMAExtensions) behaves as its default. */
static uint32_t pget(const struct iscsi_params *p, const struct key_def *k)
{
    if (k->field == NO_FIELD)
        return k->def;
    const char *f = (const char *)p + k->field;
    return key_is_bool(k) ? *(const bool *)f : *(const uint32_t *)f;
}

static void pset(struct iscsi_params *p, const struct key_def *k, uint32_t v)
{
    if (k->field == NO_FIELD)
        return;
    char *f = (char *)p + k->field;
    if (key_is_bool(k))
        *(bool *)f = v != 0;
    else
        *(uint32_t *)f = v;
}

static uint32_t clamp(uint32_t v, uint32_t lo, uint32_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* §6.1: numerical values are decimal constants or hex constants ("0x"/"0X" and digits).
 * Everything we negotiate fits 32 bits; a bigger number is simply out of range. */
int iscsi_parse_number(const char *s, size_t n, uint32_t *out)
{
    uint64_t v = 0;
    unsigned base = 10;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        n -= 2;
    }
    if (!n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v * base + d;
        if (v > UINT32_MAX)
            return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int parse_num(const char *s, uint32_t *out)
{
    return iscsi_parse_number(s, strlen(s), out);
}

/* §6.1: boolean-value is exactly "Yes" or "No" (case-sensitive). */
static int parse_bool(const char *s)
{
    if (!strcmp(s, "Yes"))
        return 1;
    if (!strcmp(s, "No"))
        return 0;
    return -1;
}

/* §6.2: "None", "Reject", "Irrelevant", "NotUnderstood" are reserved; the last three are
 * answers only, never proposals. */
static bool is_answer_constant(const char *v)
{
    return !strcmp(v, "Reject") || !strcmp(v, "Irrelevant") || !strcmp(v, "NotUnderstood");
}

/* §4.2.7: "iqn.", "eui." or "naa." names, at most 223 bytes, no whitespace or controls.
 * (Full stringprep validation is not done; names are compared by the caller.) */
/* Well-formed UTF-8 (RFC 3629): no stray continuation bytes, overlong forms, surrogates or
 * code points above U+10FFFF. */
static bool valid_utf8(const unsigned char *s)
{
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    while (*s) {
        unsigned c = *s;
        int n;
        uint32_t cp;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80) /* also stops at the terminating NUL */
                return false;
            cp = cp << 6 | (s[i] & 0x3fu);
        }
        if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

/* RFC 7143 §4.2.7.2: iSCSI names are UTF-8 strings of displayable characters. */
static bool valid_iscsi_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 5 || n > ISCSI_NAME_MAX)
        return false;
    if (strncasecmp(s, "iqn.", 4) && strncasecmp(s, "eui.", 4) && strncasecmp(s, "naa.", 4))
        return false;
    if (!valid_utf8((const unsigned char *)s))
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f)
            return false;
    return true;
}

static const struct key_def *key_find(const char *name, enum key_id *id)
{
    for (int i = 0; i < KEY_COUNT; i++)
        if (!strcmp(keys[i].name, name)) {
            *id = (enum key_id)i;
            return &keys[i];
        }
    return NULL;
}

static uint8_t stage_bit(enum iscsi_stage stage)
{
    switch (stage) {
    case ISCSI_STAGE_SECURITY:
        return P_SEC;
    case ISCSI_STAGE_OPERATIONAL:
        return P_OP;
    case ISCSI_STAGE_FULL_FEATURE:
        return P_FFP;
    }
    return 0;
}

/* A refused key on a warn line. The value is the peer's: quoted (log_quote, control
 * characters never reach the log) and cut to about 64 bytes. */
static void log_refused(const char *key, const char *value, const char *why)
{
    char q[72];
    /* CHAP values stay out of logs: a response with its challenge allows offline guessing */
    if (!strncmp(key, "CHAP_", 5))
        value = "...";
    LOG_WARN("negotiation: %s=%s: %s", key, log_quote(q, sizeof(q), value), why);
}

static enum iscsi_login_status fail(const char *key, const char *value, const char *why)
{
    log_refused(key, value, why);
    return ISCSI_LOGIN_INITIATOR_ERROR;
}

/* ---- lists (§6.2.1) ---- */

/* Can this side use `v` for list key `id`? Digests: None always, CRC32C when local says so.
 * AuthMethod (target): None unless authentication is required, CHAP only when it is. */
static bool list_supports(const struct iscsi_neg *n, enum key_id id, const char *v)
{
    switch (id) {
    case KEY_HEADER_DIGEST:
    case KEY_DATA_DIGEST:
        if (!strcmp(v, "None"))
            return true;
        return !strcmp(v, "CRC32C") && pget(&n->local, &keys[id]);
    case KEY_AUTH_METHOD:
        if (!strcmp(v, "None"))
            return !n->auth_required;
        return !strcmp(v, "CHAP") && n->auth_required;
    case KEY_TASK_REPORTING:
        return !strcmp(v, "RFC3720");
    default:
        return false;
    }
}

/* Record an agreed list value. */
static void list_record(struct iscsi_neg *n, enum key_id id, const char *v)
{
    if (id == KEY_HEADER_DIGEST || id == KEY_DATA_DIGEST)
        pset(&n->result, &keys[id], !strcmp(v, "CRC32C"));
    else if (id == KEY_AUTH_METHOD) {
        n->auth_none_agreed = !strcmp(v, "None");
        n->auth_chap_agreed = !strcmp(v, "CHAP");
    }
}

/* Answer a list offer with the first value of the originator's list we support; values we
 * do not understand are ignored, and each value is at most 255 bytes (§6.1). */
static enum iscsi_login_status answer_list(struct iscsi_neg *n, enum key_id id, const char *key,
                                           const char *value, struct iscsi_text *out)
{
    char item[ISCSI_VALUE_MAX + 1];
    const char *p = value;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len <= ISCSI_VALUE_MAX) {
            memcpy(item, p, len);
            item[len] = '\0';
            if (list_supports(n, id, item)) {
                list_record(n, id, item);
                iscsi_text_add(out, key, item);
                return ISCSI_LOGIN_OK;
            }
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    iscsi_text_add(out, key, "Reject");
    if (id == KEY_AUTH_METHOD) {
        log_refused(key, value, "no acceptable method");
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    return ISCSI_LOGIN_OK;
}

/* ---- answers to our own offers (§6.2) ---- */

/* After "Reject" the key keeps its current value (§6.2); fail if that value breaks our limits. */
static bool current_acceptable(const struct iscsi_neg *n, const struct key_def *k)
{
    uint32_t cur = pget(&n->result, k), ours = pget(&n->local, k);
    switch (k->type) {
    case KT_MIN:
        return cur <= ours;
    case KT_MAX:
        return cur >= ours;
    case KT_AND:
        return !cur || ours;
    case KT_OR:
        return cur || !ours;
    case KT_LIST:
        return !cur || ours;
    default:
        return true;
    }
}

static enum iscsi_login_status handle_answer(struct iscsi_neg *n, enum key_id id, const char *key,
                                             const char *value)
{
    const struct key_def *k = &keys[id];
    uint64_t bit = 1ull << id;
    n->offered &= ~bit;
    n->done |= bit;

    if (id == KEY_AUTH_METHOD) { /* the initiator's offer, added by the login code */
        if ((!strcmp(value, "None") && !n->auth_required) || !strcmp(value, "CHAP")) {
            list_record(n, id, value);
            return ISCSI_LOGIN_OK;
        }
        log_refused(key, value, "not acceptable");
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    /* §6.2: every RFC 7143 key MUST be understood */
    if (!strcmp(value, "NotUnderstood"))
        return fail(key, value, "standard key not understood by the peer");
    if (!strcmp(value, "Irrelevant"))
        return ISCSI_LOGIN_OK;
    if (!strcmp(value, "Reject"))
        return current_acceptable(n, k) ? ISCSI_LOGIN_OK
                                        : fail(key, value, "default value not acceptable");

    uint32_t ours = pget(&n->local, k), v;
    int b;
    switch (k->type) {
    case KT_AND:
    case KT_OR:
        /* §6.2.2: AND can only lower a Yes, OR can only raise a No */
        if ((b = parse_bool(value)) < 0 || (k->type == KT_AND && b && !ours) ||
            (k->type == KT_OR && !b && ours))
            return fail(key, value, "illegal Boolean answer");
        pset(&n->result, k, (uint32_t)b);
        return ISCSI_LOGIN_OK;
    case KT_MIN:
    case KT_MAX: {
        uint32_t offered = clamp(ours, k->min, k->max);
        if (parse_num(value, &v) < 0 || v < k->min || v > k->max ||
            (k->type == KT_MIN && v > offered) || (k->type == KT_MAX && v < offered))
            return fail(key, value, "illegal numerical answer");
        pset(&n->result, k, v);
        return ISCSI_LOGIN_OK;
    }
    case KT_LIST:
        /* §6.2.1: the answer must be one value out of our list */
        if (!list_supports(n, id, value))
            return fail(key, value, "answer not in our list");
        list_record(n, id, value);
        return ISCSI_LOGIN_OK;
    default:
        return fail(key, value, "unexpected answer");
    }
}

/* ---- the peer's offers and declarations ---- */

static enum iscsi_login_status handle_decl_str(struct iscsi_neg *n, enum key_id id,
                                               enum iscsi_stage stage, const char *key,
                                               const char *value, struct iscsi_text *out)
{
    switch (id) {
    case KEY_INITIATOR_NAME:
        if (!valid_iscsi_name(value))
            return fail(key, value, "not a valid iSCSI name");
        strcpy(n->initiator_name, value);
        break;
    case KEY_TARGET_NAME:
        if (!valid_iscsi_name(value))
            return fail(key, value, "not a valid iSCSI name");
        if (stage != ISCSI_STAGE_FULL_FEATURE) /* in FFP: one entry of a SendTargets list */
            strcpy(n->target_name, value);
        break;
    case KEY_INITIATOR_ALIAS:
        strcpy(n->initiator_alias, value);
        break;
    case KEY_TARGET_ALIAS:
        strcpy(n->target_alias, value);
        break;
    case KEY_TARGET_ADDRESS: /* redirection and SendTargets lists: parsed by their users */
        break;
    case KEY_SESSION_TYPE: {
        enum iscsi_session_type t;
        if (!strcmp(value, "Normal"))
            t = ISCSI_SESSION_NORMAL;
        else if (!strcmp(value, "Discovery"))
            t = ISCSI_SESSION_DISCOVERY;
        else {
            log_refused(key, value, "unsupported");
            return ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED;
        }
        /* §13.21: the first Login Request decides the type (Normal when it does not say),
         * and what a normal session may do was chosen by it: no turning into a discovery
         * session (SendTargets=All) in the operational stage. */
        if (n->session_type_fixed &&
            t != (n->session_type == ISCSI_SESSION_NONE ? ISCSI_SESSION_NORMAL : n->session_type))
            return fail(key, value, "differs from the session type of the first Login Request");
        n->session_type = t;
        break;
    }
    case KEY_SEND_TARGETS: /* §13.3: All (discovery sessions only), a target name, or empty */
        if (strlen(value) > ISCSI_NAME_MAX ||
            (!strcmp(value, "All") && n->session_type != ISCSI_SESSION_DISCOVERY)) {
            iscsi_text_add(out, key, "Reject");
            break;
        }
        strcpy(n->send_targets, value);
        n->send_targets_seen = true;
        break;
    default:
        break;
    }
    return ISCSI_LOGIN_OK;
}

static enum iscsi_login_status handle_offer(struct iscsi_neg *n, enum key_id id,
                                            enum iscsi_stage stage, const char *key,
                                            const char *value, struct iscsi_text *out)
{
    const struct key_def *k = &keys[id];
    uint64_t bit = 1ull << id;
    uint32_t v, ours = pget(&n->local, k);
    int b;

    if (k->type == KT_AUTH) {
        /* CHAP itself is future work: the hook does it (§12.1.3) */
        if (!n->auth_chap_agreed)
            return fail(key, value, "CHAP key without AuthMethod=CHAP");
        if (!n->auth_key) {
            LOG_WARN("negotiation: %s: CHAP agreed but no authenticator", key);
            return ISCSI_LOGIN_AUTH_FAILED;
        }
        return n->auth_key(n->auth_ctx, key, value, out);
    }
    if (is_answer_constant(value))
        return fail(key, value, "answer constant used as an offer");
    n->done |= bit;
    if ((k->flags & F_IRR_DISC) && n->session_type == ISCSI_SESSION_DISCOVERY)
        return iscsi_text_add(out, key, "Irrelevant"), ISCSI_LOGIN_OK;
    if (k->type != KT_LIST && strlen(value) > ISCSI_VALUE_MAX) {
        if (k->type == KT_DECL_NUM || k->type == KT_DECL_STR)
            return fail(key, "", "value longer than 255 bytes");
        return iscsi_text_add(out, key, "Reject"), ISCSI_LOGIN_OK;
    }

    switch (k->type) {
    case KT_AND:
    case KT_OR:
        if ((b = parse_bool(value)) < 0)
            break;
        b = k->type == KT_AND ? (b && ours) : (b || ours);
        pset(&n->result, k, (uint32_t)b);
        return iscsi_text_add(out, key, b ? "Yes" : "No"), ISCSI_LOGIN_OK;
    case KT_MIN:
    case KT_MAX:
        /* §6.2.2: a value not admissible MAY be answered with Reject; we always do, so the
         * key keeps its default and the originator decides whether it can live with that */
        if (parse_num(value, &v) < 0 || v < k->min || v > k->max)
            break;
        ours = clamp(ours, k->min, k->max);
        v = k->type == KT_MIN ? (v < ours ? v : ours) : (v > ours ? v : ours);
        /* §13.14: FirstBurstLength MUST NOT exceed MaxBurstLength. The answer is what will be
         * enforced, so it is clamped here (MaxBurstLength of the same text is settled first,
         * see iscsi_neg_handle), not only in iscsi_neg_result. */
        if (id == KEY_FIRST_BURST && v > n->result.max_burst)
            v = n->result.max_burst;
        if (id == KEY_MAX_BURST && (n->done & (1ull << KEY_FIRST_BURST)) &&
            v < n->result.first_burst)
            return fail(key, value, "below the FirstBurstLength already agreed (§13.14)");
        pset(&n->result, k, v);
        return iscsi_text_addf(out, key, "%u", v), ISCSI_LOGIN_OK;
    case KT_DECL_NUM:
        /* a declaration cannot be answered; an impossible one fails the login */
        if (parse_num(value, &v) < 0 || v < k->min || v > k->max)
            return fail(key, value, "declared value out of range");
        if (id == KEY_TPGT) {
            n->tpgt = (uint16_t)v;
            n->tpgt_seen = true;
        } else
            pset(&n->result, k, v); /* MaxRecvDataSegmentLength -> peer_max_recv_dsl */
        return ISCSI_LOGIN_OK;
    case KT_DECL_STR:
        return handle_decl_str(n, id, stage, key, value, out);
    case KT_LIST:
        return answer_list(n, id, key, value, out);
    case KT_OBSOLETE:
        break;
    }
    iscsi_text_add(out, key, "Reject");
    return ISCSI_LOGIN_OK;
}

/* Is this the value already declared for InitiatorName, TargetName or SessionType? */
static bool same_declaration(const struct iscsi_neg *n, enum key_id id, bool ffp, const char *v)
{
    switch (id) {
    case KEY_INITIATOR_NAME:
        return !strcmp(n->initiator_name, v);
    case KEY_TARGET_NAME:
        return !ffp && !strcmp(n->target_name, v);
    case KEY_SESSION_TYPE:
        return (!strcmp(v, "Normal") && n->session_type == ISCSI_SESSION_NORMAL) ||
               (!strcmp(v, "Discovery") && n->session_type == ISCSI_SESSION_DISCOVERY);
    default:
        return false;
    }
}

/* One received pair: the checks every key gets (§6.2, §13 "Use"/"Senders"), then either
 * the answer to our offer or the peer's offer/declaration. */
static enum iscsi_login_status handle_pair(struct iscsi_neg *n, enum iscsi_stage stage,
                                           const char *key, const char *value,
                                           struct iscsi_text *out)
{
    enum key_id id;
    const struct key_def *k = key_find(key, &id);
    if (!k) {
        /* §6.2: unknown keys (X-, X#, misspelt) are answered NotUnderstood; an "answer" to a
         * key we never sent is dropped rather than answered, which could loop */
        if (!is_answer_constant(value))
            iscsi_text_add(out, key, "NotUnderstood");
        return ISCSI_LOGIN_OK;
    }
    uint64_t bit = 1ull << id;
    bool from_target = n->side == ISCSI_SIDE_INITIATOR;
    bool ffp = stage == ISCSI_STAGE_FULL_FEATURE;
    bool target_list = from_target && ffp && id == KEY_TARGET_NAME; /* SendTargets answer */

    /* §6.2: declaring or negotiating a key more than once is a protocol error */
    if ((n->received & bit) && !(k->flags & F_REPEAT) && !target_list) {
        /* ...but §6.2 only says "should not": libiscsi with CHAP credentials, answered
         * AuthMethod=None, declares its names again in the operational stage. The same
         * declaration in a later request is harmless; anything else is still refused. */
        if ((n->received_before & bit) && same_declaration(n, id, ffp, value))
            return ISCSI_LOGIN_OK;
        return fail(key, value, "key sent twice");
    }
    n->received |= bit;
    if (!(k->senders & (from_target ? S_T : S_I)) || (from_target && id == KEY_TARGET_NAME && !ffp))
        return fail(key, value,
                    from_target ? "key the target may not send" : "key the initiator may not send");
    /* §6.3: operational keys only in the operational stage, security keys only in the
     * security stage, and only "ALL"/"FFPO" keys in a full feature Text negotiation */
    if (!(k->phases & stage_bit(stage)))
        return fail(key, value, "key not allowed in this stage");
    if ((k->flags & F_LO) && !n->leading)
        return fail(key, value, "leading-only key on a non-leading connection");

    /* once we have proposed a negotiated key, whatever comes back for it is the answer */
    bool ours = (n->sent & bit) && k->type != KT_DECL_NUM && k->type != KT_DECL_STR;
    if (ours || (id == KEY_AUTH_METHOD && from_target))
        return handle_answer(n, id, key, value);
    return handle_offer(n, id, stage, key, value, out);
}

/* Our MaxRecvDataSegmentLength declaration, once per negotiation (§13.12). */
static void declare_mrdsl(struct iscsi_neg *n, struct iscsi_text *out)
{
    uint64_t bit = 1ull << KEY_MRDSL;
    if (n->sent & bit)
        return;
    uint32_t v = clamp(n->local.max_recv_dsl, ISCSI_MRDSL_MIN, ISCSI_MRDSL_MAX);
    if (iscsi_text_addf(out, keys[KEY_MRDSL].name, "%u", v) < 0)
        return;
    n->sent |= bit;
    n->result.max_recv_dsl = v;
}

/* ---- public API ---- */

void iscsi_neg_init(struct iscsi_neg *n, enum iscsi_side side, const struct iscsi_params *local)
{
    memset(n, 0, sizeof(*n));
    n->side = side;
    if (local)
        n->local = *local;
    else
        iscsi_params_default(&n->local);
    iscsi_params_default(&n->result);
    n->leading = true;
    n->session_type = ISCSI_SESSION_NONE;
}

void iscsi_neg_restart(struct iscsi_neg *n)
{
    n->received = n->offered = n->done = n->sent = 0;
    n->send_targets[0] = '\0';
    n->send_targets_seen = false;
}

int iscsi_neg_offer(struct iscsi_neg *n, enum iscsi_stage stage, struct iscsi_text *out)
{
    if (stage != ISCSI_STAGE_OPERATIONAL)
        return out->overflow ? -1 : 0;
    for (int i = 0; n->side == ISCSI_SIDE_INITIATOR && i < KEY_COUNT; i++) {
        const struct key_def *k = &keys[i];
        uint64_t bit = 1ull << i;
        if (!(k->flags & F_OFFER) || ((n->sent | n->received | n->done) & bit))
            continue;
        if ((k->flags & F_LO) && !n->leading)
            continue; /* a non-leading connection negotiates connection-scope keys only */
        if ((k->flags & F_IRR_DISC) && n->session_type == ISCSI_SESSION_DISCOVERY)
            continue;
        uint32_t ours = pget(&n->local, k);
        int rc;
        if (k->type == KT_LIST)
            rc = iscsi_text_add(out, k->name, ours ? "CRC32C,None" : "None");
        else if (k->type == KT_AND || k->type == KT_OR)
            rc = iscsi_text_add(out, k->name, ours ? "Yes" : "No");
        else
            rc = iscsi_text_addf(out, k->name, "%u", clamp(ours, k->min, k->max));
        if (rc < 0)
            return -1;
        n->sent |= bit;
        /* §6.2.2: AND with No and OR with Yes decide the result; the answer is optional */
        if ((k->type == KT_AND && !ours) || (k->type == KT_OR && ours)) {
            pset(&n->result, k, ours);
            n->done |= bit;
        } else
            n->offered |= bit;
    }
    declare_mrdsl(n, out);
    return out->overflow ? -1 : 0;
}

enum iscsi_login_status iscsi_neg_handle(struct iscsi_neg *n, enum iscsi_stage stage,
                                         const char *text, uint32_t len, struct iscsi_text *out)
{
    struct iscsi_text_iter it;
    const char *key, *value;
    int r;
    n->received_before = n->received; /* what earlier texts declared (same_declaration) */

    /* SessionType decides which keys are Irrelevant, whatever its position in the text */
    if (n->side == ISCSI_SIDE_TARGET && n->session_type == ISCSI_SESSION_NONE &&
        !n->session_type_fixed) {
        iscsi_text_iter_init(&it, text, len);
        while ((r = iscsi_text_next(&it, &key, &value)) == 1)
            if (!strcmp(key, "SessionType")) {
                if (!strcmp(value, "Discovery"))
                    n->session_type = ISCSI_SESSION_DISCOVERY;
                break;
            }
    }
    /* Two passes: FirstBurstLength last, so that its answer is clamped to the MaxBurstLength
     * agreed in the same text whatever their order (§13.14). */
    for (int pass = 0; pass < 2; pass++) {
        iscsi_text_iter_init(&it, text, len);
        while ((r = iscsi_text_next(&it, &key, &value)) == 1) {
            if ((strcmp(key, keys[KEY_FIRST_BURST].name) == 0) != (pass == 1))
                continue;
            enum iscsi_login_status st = handle_pair(n, stage, key, value, out);
            if (st != ISCSI_LOGIN_OK)
                return st;
        }
        if (r < 0) {
            LOG_WARN("negotiation: malformed key=value text");
            return ISCSI_LOGIN_INITIATOR_ERROR;
        }
    }
    if (n->side == ISCSI_SIDE_TARGET)
        n->session_type_fixed = true;
    if (n->side == ISCSI_SIDE_TARGET && stage == ISCSI_STAGE_OPERATIONAL)
        declare_mrdsl(n, out);
    if (out->overflow) {
        LOG_WARN("negotiation: answers exceed %u bytes", ISCSI_TEXT_MAX);
        return ISCSI_LOGIN_INITIATOR_ERROR;
    }
    return ISCSI_LOGIN_OK;
}

bool iscsi_neg_settled(const struct iscsi_neg *n)
{
    return n->offered == 0;
}

void iscsi_neg_result(const struct iscsi_neg *n, struct iscsi_params *out)
{
    *out = n->result;
    /* §13.14: FirstBurstLength MUST NOT exceed MaxBurstLength */
    if (out->first_burst > out->max_burst)
        out->first_burst = out->max_burst;
}
