/* PDU codec helpers shared by target and initiator (RFC 7143 §11): opcode names and handler
 * status reasons for log lines; the BHS accessors themselves are inline in pdu.h. */
#include "iscsi/pdu.h"

static const char *const status_reason[ISCSI_STATUS_COUNT] = {
    [0] = "ok",
    [-ISCSI_ERR_PROTOCOL] = "protocol error (ERL 0)",
    [-ISCSI_ERR_NOMEM] = "out of memory",
    [-ISCSI_ERR_NOT_IN_LOGIN] = "PDU not allowed during login",
    [-ISCSI_ERR_OVERSIZED] = "oversized data segment (protocol error)",
    [-ISCSI_ERR_HDIGEST] = "header digest error (ERL 0)",
    [-ISCSI_ERR_DDIGEST] = "data digest error (ERL 0)",
    [-ISCSI_ERR_DATA_OUT] = "Data-Out protocol error (ERL 0)",
    [-ISCSI_ERR_DATA_OUT_SEQ] = "Data-Out sequence error (ERL 0)",
    [-ISCSI_ERR_LOGIN_TIMEOUT] = "login timed out",
    [-ISCSI_ERR_NOP_TIMEOUT] = "no answer to NOP-In ping",
    [-ISCSI_ERR_DISCOVERY_IDLE] = "discovery session idle",
    [-ISCSI_ERR_DATA_OUT_TIMEOUT] = "Data-Out timed out (ERL 0)",
    [-ISCSI_ERR_LOGOUT_UNREAD] = "logged out, queue not read within nop-timeout",
};

const char *iscsi_status_str(int status)
{
    if (status > 0 || status <= -ISCSI_STATUS_COUNT)
        return "?";
    return status_reason[-status];
}

const char *iscsi_opcode_name(enum iscsi_opcode op)
{
    switch (op) {
    case ISCSI_OP_NOP_OUT:
        return "NOP-Out";
    case ISCSI_OP_SCSI_CMD:
        return "SCSI-Command";
    case ISCSI_OP_TMF_REQ:
        return "TMF-Request";
    case ISCSI_OP_LOGIN_REQ:
        return "Login-Request";
    case ISCSI_OP_TEXT_REQ:
        return "Text-Request";
    case ISCSI_OP_DATA_OUT:
        return "Data-Out";
    case ISCSI_OP_LOGOUT_REQ:
        return "Logout-Request";
    case ISCSI_OP_SNACK:
        return "SNACK";
    case ISCSI_OP_NOP_IN:
        return "NOP-In";
    case ISCSI_OP_SCSI_RSP:
        return "SCSI-Response";
    case ISCSI_OP_TMF_RSP:
        return "TMF-Response";
    case ISCSI_OP_LOGIN_RSP:
        return "Login-Response";
    case ISCSI_OP_TEXT_RSP:
        return "Text-Response";
    case ISCSI_OP_DATA_IN:
        return "Data-In";
    case ISCSI_OP_LOGOUT_RSP:
        return "Logout-Response";
    case ISCSI_OP_R2T:
        return "R2T";
    case ISCSI_OP_ASYNC_MSG:
        return "Async-Message";
    case ISCSI_OP_REJECT:
        return "Reject";
    }
    return "Unknown";
}
