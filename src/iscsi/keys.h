/* Login and Text key negotiation (RFC 7143 §6, §13), shared by target and initiator.
 * One declarative table (keys.c) gives every key its type, range, default, who may send it,
 * in which phase, and how the two sides' values combine; this header is the engine around it.
 *
 * Use (either side): iscsi_neg_init() with this side's limits; the initiator calls
 * iscsi_neg_offer() to start; each received text goes through iscsi_neg_handle(), which
 * records the peer's declarations and answers the peer's offers into `out` (the target side
 * also appends its own MaxRecvDataSegmentLength declaration in the operational stage, once,
 * as iscsi_neg_offer() does). When the login
 * completes, iscsi_neg_result() gives the operational parameters both sides now use. */
#ifndef LR_ISCSI_KEYS_H
#define LR_ISCSI_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/pdu.h"
#include "iscsi/text.h"

#define ISCSI_VALUE_MAX 255 /* simple values; lists and TargetAddress fit too */
#define ISCSI_NAME_MAX 223  /* iSCSI names (RFC 7143 §4.2.7) */

/* An RFC 7143 §6.1 numerical value of n bytes (decimal, or "0x" hex) that fits 32 bits: 0 and
 * *out, or -1. */
int iscsi_parse_number(const char *s, size_t n, uint32_t *out);

/* Negotiated operational parameters of a session/connection (RFC 7143 §13 defaults when a key
 * is not negotiated). */
struct iscsi_params {
    bool header_digest; /* CRC32C */
    bool data_digest;
    uint32_t max_connections;
    bool initial_r2t;
    bool immediate_data;
    uint32_t max_recv_dsl; /* what THIS side can receive (declared by us) */
    uint32_t
        peer_max_recv_dsl; /* what the peer can receive (declared by the peer): our send limit */
    uint32_t max_burst;
    uint32_t first_burst;
    uint32_t default_time2wait;
    uint32_t default_time2retain;
    uint32_t max_outstanding_r2t;
    bool data_pdu_in_order;
    bool data_sequence_in_order;
    uint32_t erl;
};

/* The RFC 7143 defaults. */
void iscsi_params_default(struct iscsi_params *p);

/* The highest ErrorRecoveryLevel (RFC 7143 §7, §13.20) this build performs, target and
 * initiator alike. Neither end ever offers more than this: a level is negotiated as the
 * minimum of both offers, and once agreed the peer relies on it (a header digest error
 * silently dropped at ERL 1 is only recovered if this end retransmits on SNACK). The
 * configuration refuses a higher level rather than quietly lowering it. */
#define ISCSI_ERL_IMPLEMENTED 2u

enum iscsi_side { ISCSI_SIDE_TARGET, ISCSI_SIDE_INITIATOR };
enum iscsi_session_type { ISCSI_SESSION_NONE, ISCSI_SESSION_NORMAL, ISCSI_SESSION_DISCOVERY };

#define ISCSI_KEY_COUNT_MAX 64

/* Authentication hook (CHAP is future work): once AuthMethod=CHAP is agreed, every CHAP_*
 * key received in the security stage is passed here; it may append answers (CHAP_A, CHAP_I,
 * CHAP_C, CHAP_N, CHAP_R) to `out` and returns a login status (ISCSI_LOGIN_AUTH_FAILED ...). */
typedef enum iscsi_login_status (*iscsi_auth_key_fn)(void *ctx, const char *key, const char *value,
                                                     struct iscsi_text *out);

struct iscsi_neg {
    enum iscsi_side side;
    /* This side's preferences and limits: for numeric keys the value we offer / the most we
     * accept; for booleans what we want; digests: whether CRC32C is acceptable / wanted. */
    struct iscsi_params local;
    /* Values in force, updated as keys complete; starts at the RFC defaults. */
    struct iscsi_params result;
    bool leading; /* first connection of the session (LO keys allowed) */
    bool ffp;     /* Text negotiation in full feature phase */
    enum iscsi_session_type session_type;
    /* Target: the first text has been handled, which decided the session type (declared, or
     * Normal by default, §13.21); a later SessionType may only repeat it. */
    bool session_type_fixed;
    /* Declarations seen (empty string if not) */
    char initiator_name[ISCSI_NAME_MAX + 1];
    char target_name[ISCSI_NAME_MAX + 1];
    char initiator_alias[ISCSI_VALUE_MAX + 1];
    char target_alias[ISCSI_VALUE_MAX + 1];
    char send_targets[ISCSI_NAME_MAX + 1]; /* SendTargets value (Text): "All", a name, or "" */
    bool send_targets_seen;
    bool auth_none_agreed;      /* AuthMethod negotiated to None */
    bool auth_chap_agreed;      /* AuthMethod negotiated to CHAP (for later) */
    bool auth_required;         /* refuse AuthMethod=None (either side: CHAP wanted) */
    iscsi_auth_key_fn auth_key; /* CHAP_* keys go here; NULL: CHAP cannot complete */
    void *auth_ctx;
    bool tpgt_seen; /* initiator: TargetPortalGroupTag received */
    uint16_t tpgt;
    /* Bookkeeping, one bit per table row */
    uint64_t received; /* keys the peer sent in this negotiation */
    uint64_t offered;  /* keys we offered and are awaiting an answer for */
    uint64_t done;     /* keys whose value is settled */
    uint64_t sent;     /* keys we have sent (offers and declarations) */
    /* `received` as it was before the text being handled (repeated declarations) */
    uint64_t received_before;
};

/* Starts with result = RFC defaults, leading = true, session_type = NONE (treated as Normal). */
void iscsi_neg_init(struct iscsi_neg *n, enum iscsi_side side, const struct iscsi_params *local);

/* Begin a new Text negotiation in full feature phase (RFC 7143 §6.2: keys that may be
 * renegotiated, e.g. MaxRecvDataSegmentLength): forgets which keys were exchanged, keeps
 * the results and declarations. */
void iscsi_neg_restart(struct iscsi_neg *n);

/* Append this side's own offers/declarations for `stage` that are not yet settled: the
 * initiator's operational proposals, and either side's MaxRecvDataSegmentLength declaration.
 * Returns 0 or -1 if `out` overflowed. */
int iscsi_neg_offer(struct iscsi_neg *n, enum iscsi_stage stage, struct iscsi_text *out);

/* Process a complete text from the peer. Answers (including NotUnderstood, Irrelevant and
 * Reject) go into `out`. Returns ISCSI_LOGIN_OK, or a login status to fail the login with:
 * ISCSI_LOGIN_INITIATOR_ERROR for a malformed text, a key sent twice, a key the peer may not
 * send, a key not allowed in this stage (operational keys in the security stage, AuthMethod
 * after it, LO keys on a non-leading connection) or an illegal answer to our offer;
 * ISCSI_LOGIN_AUTH_FAILED when no offered AuthMethod is acceptable (AuthMethod=Reject is in
 * `out`); ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED for an unknown SessionType value (and
 * ISCSI_LOGIN_INITIATOR_ERROR for one that differs from the type the first text set); or what the
 * auth_key hook returned. In full feature phase the caller maps non-OK to a Reject. */
enum iscsi_login_status iscsi_neg_handle(struct iscsi_neg *n, enum iscsi_stage stage,
                                         const char *text, uint32_t len, struct iscsi_text *out);

/* True when no offer of ours is still awaiting an answer (the side may transit). */
bool iscsi_neg_settled(const struct iscsi_neg *n);

/* Final operational parameters (result with FirstBurstLength clamped to MaxBurstLength). */
void iscsi_neg_result(const struct iscsi_neg *n, struct iscsi_params *out);

#endif
