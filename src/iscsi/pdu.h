/* iSCSI PDU layout (RFC 7143 §11): the 48-byte Basic Header Segment, opcodes, flags and field
 * offsets, shared by the target and the initiator. Fields are read and written in place with
 * the big-endian helpers; there is no unpacked copy of a header on the data path. */
#ifndef LR_ISCSI_PDU_H
#define LR_ISCSI_PDU_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "util/bytes.h"

#define ISCSI_BHS_LEN 48
#define ISCSI_DIGEST_LEN 4
#define ISCSI_PAD(n) (((n) + 3u) & ~3u)
/* RFC 7143 §13.12: MaxRecvDataSegmentLength is 512 .. 2^24-1. */
#define ISCSI_MRDSL_MIN 512u
#define ISCSI_MRDSL_MAX 16777215u

enum iscsi_opcode {
    /* initiator -> target */
    ISCSI_OP_NOP_OUT = 0x00,
    ISCSI_OP_SCSI_CMD = 0x01,
    ISCSI_OP_TMF_REQ = 0x02,
    ISCSI_OP_LOGIN_REQ = 0x03,
    ISCSI_OP_TEXT_REQ = 0x04,
    ISCSI_OP_DATA_OUT = 0x05,
    ISCSI_OP_LOGOUT_REQ = 0x06,
    ISCSI_OP_SNACK = 0x10,
    /* target -> initiator */
    ISCSI_OP_NOP_IN = 0x20,
    ISCSI_OP_SCSI_RSP = 0x21,
    ISCSI_OP_TMF_RSP = 0x22,
    ISCSI_OP_LOGIN_RSP = 0x23,
    ISCSI_OP_TEXT_RSP = 0x24,
    ISCSI_OP_DATA_IN = 0x25,
    ISCSI_OP_LOGOUT_RSP = 0x26,
    ISCSI_OP_R2T = 0x31,
    ISCSI_OP_ASYNC_MSG = 0x32,
    ISCSI_OP_REJECT = 0x3f,
};

/* byte 0 */
#define ISCSI_BHS_IMMEDIATE 0x40
#define ISCSI_OPCODE_MASK 0x3f
/* byte 1 flags */
#define ISCSI_FLAG_FINAL 0x80
#define ISCSI_FLAG_CONTINUE 0x40 /* Login/Text C bit */
#define ISCSI_CMD_READ 0x40
#define ISCSI_CMD_WRITE 0x20
#define ISCSI_CMD_ATTR_MASK 0x07
#define ISCSI_DATAIN_ACK 0x40
#define ISCSI_DATAIN_OVERFLOW 0x04
#define ISCSI_DATAIN_UNDERFLOW 0x02
#define ISCSI_DATAIN_STATUS 0x01
#define ISCSI_RSP_BIDI_OVERFLOW 0x10
#define ISCSI_RSP_BIDI_UNDERFLOW 0x08
#define ISCSI_RSP_OVERFLOW 0x04
#define ISCSI_RSP_UNDERFLOW 0x02
#define ISCSI_LOGIN_TRANSIT 0x80
#define ISCSI_LOGIN_CSG(b1) (((b1) >> 2) & 3)
#define ISCSI_LOGIN_NSG(b1) ((b1)&3)

/* Login stages (RFC 7143 §11.12.3) */
enum iscsi_stage {
    ISCSI_STAGE_SECURITY = 0,
    ISCSI_STAGE_OPERATIONAL = 1,
    ISCSI_STAGE_FULL_FEATURE = 3,
};

/* Common field offsets */
#define BHS_OPCODE 0
#define BHS_FLAGS 1
#define BHS_TOTAL_AHS_LEN 4
#define BHS_DATA_SEG_LEN 5 /* 24 bits */
#define BHS_LUN 8
#define BHS_ITT 16
/* request-side */
#define BHS_EDTL 20 /* SCSI Command */
#define BHS_TTT 20  /* Data-Out, NOP-Out, Text, Data-In, R2T, NOP-In */
#define BHS_CMDSN 24
#define BHS_EXPSTATSN 28
#define BHS_CDB 32
#define BHS_DATASN 36
#define BHS_BUFFER_OFFSET 40
/* response-side */
#define BHS_STATSN 24
#define BHS_EXPCMDSN 28
#define BHS_MAXCMDSN 32
#define BHS_RESPONSE 2
#define BHS_STATUS 3
#define BHS_EXPDATASN 36
#define BHS_R2TSN 36
#define BHS_BIDI_RESIDUAL 40
#define BHS_RESIDUAL 44
#define BHS_DESIRED_LEN 44 /* R2T */
/* Login */
#define BHS_VERSION_MAX 2
#define BHS_VERSION_MIN 3 /* request; VERSION_ACTIVE in a response */
#define BHS_ISID 8        /* 6 bytes */
#define BHS_TSIH 14
#define BHS_CID 20
#define BHS_STATUS_CLASS 36
#define BHS_STATUS_DETAIL 37
/* Logout response */
#define BHS_TIME2WAIT 40
#define BHS_TIME2RETAIN 42
/* TMF */
#define BHS_TMF_FUNCTION 1
#define BHS_RTT 20
#define BHS_REFCMDSN 32
#define BHS_TMF_EXPDATASN 36
/* Reject */
#define BHS_REJECT_REASON 2
/* Async */
#define BHS_ASYNC_EVENT 36
#define BHS_ASYNC_VCODE 37
#define BHS_ASYNC_PARAM1 38
#define BHS_ASYNC_PARAM2 40
#define BHS_ASYNC_PARAM3 42

/* Async Message AsyncEvent codes (RFC 7143 §11.9.1). */
enum iscsi_async_event {
    ISCSI_ASYNC_SCSI_EVENT = 0,
    ISCSI_ASYNC_REQUEST_LOGOUT = 1,
    ISCSI_ASYNC_DROP_CONNECTION = 2, /* Parameter1 CID, Parameter2 Time2Wait, 3 Time2Retain */
    ISCSI_ASYNC_DROP_ALL_CONNECTIONS = 3,
    ISCSI_ASYNC_NEGOTIATE = 4,
    ISCSI_ASYNC_TASK_TERMINATION = 5,
    ISCSI_ASYNC_VENDOR = 255,
};

#define ISCSI_RSVD_TAG 0xffffffffu

/* Login status (RFC 7143 §11.13.5), as class << 8 | detail */
enum iscsi_login_status {
    ISCSI_LOGIN_OK = 0x0000,
    ISCSI_LOGIN_TARGET_MOVED_TEMP = 0x0101,
    ISCSI_LOGIN_TARGET_MOVED_PERM = 0x0102,
    ISCSI_LOGIN_INITIATOR_ERROR = 0x0200,
    ISCSI_LOGIN_AUTH_FAILED = 0x0201,
    ISCSI_LOGIN_AUTHZ_FAILED = 0x0202,
    ISCSI_LOGIN_NOT_FOUND = 0x0203,
    ISCSI_LOGIN_TARGET_REMOVED = 0x0204,
    ISCSI_LOGIN_UNSUPPORTED_VERSION = 0x0205,
    ISCSI_LOGIN_TOO_MANY_CONNECTIONS = 0x0206,
    ISCSI_LOGIN_MISSING_PARAMETER = 0x0207,
    ISCSI_LOGIN_CANT_INCLUDE_IN_SESSION = 0x0208,
    ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED = 0x0209,
    ISCSI_LOGIN_SESSION_DOES_NOT_EXIST = 0x020a,
    ISCSI_LOGIN_INVALID_DURING_LOGIN = 0x020b,
    ISCSI_LOGIN_TARGET_ERROR = 0x0300,
    ISCSI_LOGIN_SERVICE_UNAVAILABLE = 0x0301,
    ISCSI_LOGIN_OUT_OF_RESOURCES = 0x0302,
};

/* Reject reasons (RFC 7143 §11.17.1) */
enum iscsi_reject_reason {
    ISCSI_REJECT_DIGEST_ERROR = 0x02,
    ISCSI_REJECT_SNACK_REJECT = 0x03,
    ISCSI_REJECT_PROTOCOL_ERROR = 0x04,
    ISCSI_REJECT_CMD_NOT_SUPPORTED = 0x05,
    ISCSI_REJECT_IMMEDIATE_CMD_REJECT = 0x06,
    ISCSI_REJECT_TASK_IN_PROGRESS = 0x07,
    ISCSI_REJECT_INVALID_DATA_ACK = 0x08,
    ISCSI_REJECT_INVALID_PDU_FIELD = 0x09,
    ISCSI_REJECT_LONG_OP_REJECT = 0x0a,
    ISCSI_REJECT_DEPRECATED = 0x0b,
    ISCSI_REJECT_WAITING_FOR_LOGOUT = 0x0c,
};

/* Task management functions (RFC 7143 §11.5.1) and responses (§11.6.1) */
enum iscsi_tmf_function {
    ISCSI_TMF_ABORT_TASK = 1,
    ISCSI_TMF_ABORT_TASK_SET = 2,
    ISCSI_TMF_CLEAR_ACA = 3,
    ISCSI_TMF_CLEAR_TASK_SET = 4,
    ISCSI_TMF_LOGICAL_UNIT_RESET = 5,
    ISCSI_TMF_TARGET_WARM_RESET = 6,
    ISCSI_TMF_TARGET_COLD_RESET = 7,
    ISCSI_TMF_TASK_REASSIGN = 8,
};

enum iscsi_tmf_response {
    ISCSI_TMF_RSP_COMPLETE = 0,
    ISCSI_TMF_RSP_NO_TASK = 1,
    ISCSI_TMF_RSP_NO_LUN = 2,
    ISCSI_TMF_RSP_TASK_ALLEGIANT = 3,
    ISCSI_TMF_RSP_NO_REASSIGN = 4,
    ISCSI_TMF_RSP_NOT_SUPPORTED = 5,
    ISCSI_TMF_RSP_AUTH_FAILED = 6,
    ISCSI_TMF_RSP_REJECTED = 255,
};

enum iscsi_logout_reason {
    ISCSI_LOGOUT_CLOSE_SESSION = 0,
    ISCSI_LOGOUT_CLOSE_CONNECTION = 1,
    ISCSI_LOGOUT_REMOVE_FOR_RECOVERY = 2,
};

struct iscsi_bhs {
    uint8_t b[ISCSI_BHS_LEN];
};

static inline enum iscsi_opcode bhs_opcode(const struct iscsi_bhs *h)
{
    return (enum iscsi_opcode)(h->b[0] & ISCSI_OPCODE_MASK);
}

static inline bool bhs_immediate(const struct iscsi_bhs *h)
{
    return h->b[0] & ISCSI_BHS_IMMEDIATE;
}

static inline uint32_t bhs_dlength(const struct iscsi_bhs *h)
{
    return get_be24(h->b + BHS_DATA_SEG_LEN);
}

static inline void bhs_set_dlength(struct iscsi_bhs *h, uint32_t len)
{
    put_be24(h->b + BHS_DATA_SEG_LEN, len);
}

/* TotalAHSLength is in 4-byte words */
static inline uint32_t bhs_ahs_bytes(const struct iscsi_bhs *h)
{
    return (uint32_t)h->b[BHS_TOTAL_AHS_LEN] * 4u;
}

static inline uint32_t bhs_get32(const struct iscsi_bhs *h, unsigned off)
{
    return get_be32(h->b + off);
}

static inline void bhs_put32(struct iscsi_bhs *h, unsigned off, uint32_t v)
{
    put_be32(h->b + off, v);
}

static inline void bhs_init(struct iscsi_bhs *h, enum iscsi_opcode op, uint8_t flags)
{
    memset(h, 0, sizeof(*h));
    h->b[0] = (uint8_t)op;
    h->b[1] = flags;
}

/* Serial number arithmetic (RFC 1982, as RFC 7143 §4.2.2.1 requires for CmdSN/StatSN). */
static inline bool sn_lt(uint32_t a, uint32_t b)
{
    return a != b && (int32_t)(a - b) < 0;
}

static inline bool sn_le(uint32_t a, uint32_t b)
{
    return a == b || (int32_t)(a - b) < 0;
}

/* Most pieces a data segment may be placed into directly (a task's scatter list, 16 entries,
 * plus one spare for a slice that starts inside an entry). */
#define ISCSI_PDU_DST_MAX 17

/* A received PDU as the wire engine hands it to a side's handlers (RFC 7143 §11): the header,
 * where its data segment went, and what the header phase decided. Handlers take
 * (conn, struct iscsi_pdu_in *) and return a status; nothing about "the current PDU" is read
 * from connection fields.
 *
 * Header phase: the handler may set dst/dstcnt (place the data segment straight into a task's
 * memory), discard (swallow it), task and reject_reason. Otherwise the engine receives the data
 * segment into its own buffer and `data` points at it when the PDU handler runs. */
struct iscsi_pdu_in {
    struct iscsi_bhs bhs;
    uint32_t dlen;       /* DataSegmentLength */
    const uint8_t *data; /* the data segment in the engine's buffer (NULL: placed/discarded) */
    struct iovec dst[ISCSI_PDU_DST_MAX];
    int dstcnt;            /* > 0: the data segment goes to dst */
    bool dst_cold;         /* dst is not read again soon: util/stream_copy.h */
    bool discard;          /* the data segment goes to the bit bucket */
    bool data_digest_bad;  /* ERL >= 1: the data digest did not match (ERL 0 closes instead) */
    uint8_t reject_reason; /* the header phase's verdict: Reject with this reason (0: none) */
    void *task;            /* the side's task this PDU belongs to, found by the header phase */
};

/* What a PDU handler returns. ISCSI_OK: go on with the next PDU. Negative: the connection
 * cannot go on (at ERL 0 an error that is neither answered with a Reject nor with a SCSI status
 * ends the connection, RFC 7143 §7.1.5/§7.8); the side's dispatcher closes it, in that one
 * place, logging iscsi_status_str(). Handlers and the functions that queue PDUs only return
 * these; they never close the connection themselves. */
enum iscsi_status {
    ISCSI_OK = 0,
    ISCSI_ERR_PROTOCOL = -1,          /* a protocol error ERL 0 cannot recover from */
    ISCSI_ERR_NOMEM = -2,             /* a reply or a buffer could not be allocated */
    ISCSI_ERR_NOT_IN_LOGIN = -3,      /* a PDU other than Login before login completed (§6.1) */
    ISCSI_ERR_OVERSIZED = -4,         /* data segment beyond MaxRecvDataSegmentLength (§13.12) */
    ISCSI_ERR_HDIGEST = -5,           /* header digest mismatch (ERL 0: §7.8) */
    ISCSI_ERR_DDIGEST = -6,           /* data digest mismatch (ERL 0: §7.8) */
    ISCSI_ERR_DATA_OUT = -7,          /* Data-Out with a TTT we never gave, or beyond its burst */
    ISCSI_ERR_DATA_OUT_SEQ = -8,      /* an R2T sequence ended (F bit) short of its length */
    ISCSI_ERR_LOGIN_TIMEOUT = -9,     /* login not complete within login-timeout of accept */
    ISCSI_ERR_NOP_TIMEOUT = -10,      /* no answer to a NOP-In ping within nop-timeout */
    ISCSI_ERR_DISCOVERY_IDLE = -11,   /* a discovery session without a Text request for long */
    ISCSI_ERR_DATA_OUT_TIMEOUT = -12, /* ERL 0: a write's Data-Out stopped for data-out-timeout */
    ISCSI_ERR_LOGOUT_UNREAD = -13,    /* logged out, its queue not read within nop-timeout */
};
#define ISCSI_STATUS_COUNT 14 /* entries of the reason table (0 .. -13) */

/* The reason logged when a status closes a connection ("?" for an unknown value). */
const char *iscsi_status_str(int status);

const char *iscsi_opcode_name(enum iscsi_opcode op);

#endif
