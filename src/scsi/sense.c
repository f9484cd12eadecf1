/* Sense data: the one table from sense reason to sense key / ASC / ASCQ, and the one encoder of
 * fixed-format sense (SPC-4 §4.5.3). Descriptor format is not offered (REQUEST SENSE DESC=1
 * and the control page D_SENSE stay 0). */
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

/* SPC-4 §4.5.6 sense keys */
enum {
    KEY_NO_SENSE = 0x0,
    KEY_NOT_READY = 0x2,
    KEY_MEDIUM_ERROR = 0x3,
    KEY_HARDWARE_ERROR = 0x4,
    KEY_ILLEGAL_REQUEST = 0x5,
    KEY_UNIT_ATTENTION = 0x6,
    KEY_DATA_PROTECT = 0x7,
    KEY_COPY_ABORTED = 0xa,
    KEY_ABORTED_COMMAND = 0xb,
    KEY_MISCOMPARE = 0xe,
};

static const struct {
    uint8_t key, asc, ascq;
} sense_table[SR__COUNT] = {
    [SR_OK] = {KEY_NO_SENSE, 0x00, 0x00},
    [SR_NO_SENSE] = {KEY_NO_SENSE, 0x00, 0x00},
    [SR_INVALID_OPCODE] = {KEY_ILLEGAL_REQUEST, 0x20, 0x00},
    [SR_INVALID_FIELD_IN_CDB] = {KEY_ILLEGAL_REQUEST, 0x24, 0x00},
    [SR_LBA_OUT_OF_RANGE] = {KEY_ILLEGAL_REQUEST, 0x21, 0x00},
    [SR_LUN_NOT_SUPPORTED] = {KEY_ILLEGAL_REQUEST, 0x25, 0x00},
    [SR_INVALID_FIELD_IN_PARAM] = {KEY_ILLEGAL_REQUEST, 0x26, 0x00},
    [SR_INVALID_FIELD_IN_IU] = {KEY_ILLEGAL_REQUEST, 0x0e, 0x03},
    [SR_PARAM_LIST_LENGTH] = {KEY_ILLEGAL_REQUEST, 0x1a, 0x00},
    [SR_SAVING_NOT_SUPPORTED] = {KEY_ILLEGAL_REQUEST, 0x39, 0x00},
    [SR_WRITE_PROTECTED] = {KEY_DATA_PROTECT, 0x27, 0x00},
    [SR_MISCOMPARE] = {KEY_MISCOMPARE, 0x1d, 0x00},
    [SR_READ_ERROR] = {KEY_MEDIUM_ERROR, 0x11, 0x00},
    [SR_WRITE_ERROR] = {KEY_MEDIUM_ERROR, 0x0c, 0x00},
    [SR_SPACE_ALLOC_FAILED] = {KEY_DATA_PROTECT, 0x27, 0x07},
    [SR_INTERNAL_FAILURE] = {KEY_HARDWARE_ERROR, 0x44, 0x00},
    [SR_INSUFFICIENT_RESOURCES] = {KEY_ABORTED_COMMAND, 0x55, 0x03},
    [SR_UA_POWER_ON_RESET] = {KEY_UNIT_ATTENTION, 0x29, 0x00},
    [SR_UA_POWER_ON] = {KEY_UNIT_ATTENTION, 0x29, 0x01},
    [SR_UA_BUS_DEVICE_RESET] = {KEY_UNIT_ATTENTION, 0x29, 0x03},
    [SR_UA_NEXUS_LOSS] = {KEY_UNIT_ATTENTION, 0x29, 0x07},
    [SR_UA_MODE_CHANGED] = {KEY_UNIT_ATTENTION, 0x2a, 0x01},
    [SR_UA_CAPACITY_CHANGED] = {KEY_UNIT_ATTENTION, 0x2a, 0x09},
    [SR_UA_COMMANDS_CLEARED] = {KEY_UNIT_ATTENTION, 0x2f, 0x00},
    [SR_UA_ISCSI_CLEARED] = {KEY_UNIT_ATTENTION, 0x47, 0x7f},
    [SR_UA_LUNS_CHANGED] = {KEY_UNIT_ATTENTION, 0x3f, 0x0e},
    [SR_SW_WRITE_PROTECTED] = {KEY_DATA_PROTECT, 0x27, 0x02},
    [SR_SANITIZE_IN_PROGRESS] = {KEY_NOT_READY, 0x04, 0x1b},
    [SR_SANITIZE_FAILED] = {KEY_MEDIUM_ERROR, 0x31, 0x03},
    [SR_MEDIUM_NOT_PRESENT] = {KEY_NOT_READY, 0x3a, 0x00},
    [SR_REMOVAL_PREVENTED] = {KEY_ILLEGAL_REQUEST, 0x53, 0x02},
    [SR_INVALID_RELEASE_OF_PR] = {KEY_ILLEGAL_REQUEST, 0x26, 0x04},
    [SR_UA_RESV_PREEMPTED] = {KEY_UNIT_ATTENTION, 0x2a, 0x03},
    [SR_UA_RESV_RELEASED] = {KEY_UNIT_ATTENTION, 0x2a, 0x04},
    [SR_UA_REG_PREEMPTED] = {KEY_UNIT_ATTENTION, 0x2a, 0x05},
    [SR_UA_ALUA_CHANGED] = {KEY_UNIT_ATTENTION, 0x2a, 0x06},
    [SR_OPERATION_IN_PROGRESS] = {KEY_ILLEGAL_REQUEST, 0x00, 0x16},
    [SR_TOO_MANY_CSCD] = {KEY_ILLEGAL_REQUEST, 0x26, 0x06},
    [SR_UNSUPPORTED_CSCD_TYPE] = {KEY_ILLEGAL_REQUEST, 0x26, 0x07},
    [SR_TOO_MANY_SEGMENTS] = {KEY_ILLEGAL_REQUEST, 0x26, 0x08},
    [SR_UNSUPPORTED_SEG_TYPE] = {KEY_ILLEGAL_REQUEST, 0x26, 0x09},
    [SR_INLINE_DATA_EXCEEDED] = {KEY_ILLEGAL_REQUEST, 0x26, 0x0b},
    [SR_COPY_TARGET_FAILURE] = {KEY_COPY_ABORTED, 0x0d, 0x01},
    [SR_COPY_UNREACHABLE] = {KEY_COPY_ABORTED, 0x0d, 0x02},
    [SR_PROTOCOL_CRC_ERROR] = {KEY_ABORTED_COMMAND, 0x47, 0x05},
    [SR_LU_TIMEOUT] = {KEY_ABORTED_COMMAND, 0x3e, 0x02},
    [SR_NOT_READY_MANUAL] = {KEY_NOT_READY, 0x04, 0x03},
    [SR_ALUA_STANDBY] = {KEY_NOT_READY, 0x04, 0x0b},
};

static uint8_t sense_encode(uint8_t *buf, uint8_t key, uint8_t asc, uint8_t ascq, scsi_sr sks,
                            bool has_info, uint32_t info)
{
    memset(buf, 0, 18);
    buf[0] = 0x70 | (has_info ? 0x80 : 0); /* current error, fixed format; VALID */
    buf[2] = key & 0x0f;
    if (has_info)
        put_be32(buf + 3, info);
    buf[7] = 10; /* additional sense length: bytes 8..17 */
    buf[12] = asc;
    buf[13] = ascq;
    if (sks & SR_SKSV) {
        /* SPC-4 §4.5.2.4.2 field pointer: SKSV, C/D, BPV, bit pointer, then the byte */
        buf[15] =
            0x80 | ((sks & SR_CD) ? 0x40 : 0) | ((sks & SR_BPV) ? 0x08 : 0) | ((sks >> 11) & 0x7);
        put_be16(buf + 16, (uint16_t)(sks >> 16));
    }
    return 18;
}

uint8_t scsi_sense_build(uint8_t *buf, scsi_sr sr, bool has_info, uint32_t info)
{
    enum scsi_reason r = SR_REASON(sr);
    if (r >= SR__COUNT)
        r = SR_INTERNAL_FAILURE;
    return sense_encode(buf, sense_table[r].key, sense_table[r].asc, sense_table[r].ascq, sr,
                        has_info, info);
}

static void set_reason(struct scsi_task *t, scsi_sr sr, bool has_info, uint32_t info)
{
    if (SR_REASON(sr) == SR_OK) {
        t->status = SCSI_STATUS_GOOD;
        t->sense_len = 0;
        return;
    }
    if (SR_REASON(sr) == SR_RESERVATION_CONFLICT || SR_REASON(sr) == SR_TASK_SET_FULL ||
        SR_REASON(sr) == SR_BUSY) {
        /* a status of its own, without sense */
        t->status = SR_REASON(sr) == SR_TASK_SET_FULL ? SCSI_STATUS_TASK_SET_FULL
                    : SR_REASON(sr) == SR_BUSY        ? SCSI_STATUS_BUSY
                                                      : SCSI_STATUS_RESERVATION_CONFLICT;
        t->sense_len = 0;
        t->data_len = 0;
        return;
    }
    t->status = SCSI_STATUS_CHECK_CONDITION;
    t->sense_len = scsi_sense_build(t->sense, sr, has_info, info);
    t->data_len = 0;
}

void scsi_task_set_reason(struct scsi_task *t, scsi_sr sr)
{
    set_reason(t, sr, false, 0);
}

void scsi_task_set_reason_info(struct scsi_task *t, scsi_sr sr, uint32_t info)
{
    set_reason(t, sr, true, info);
}
