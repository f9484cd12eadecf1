/* The opcode table and the life of a task: setup (refuse early, check ranges once, decide where
 * the data lives), exec (dispatch to the row's handler), release. Adding a command is adding a
 * row here plus its parse/exec functions. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"

/* clang-format off */
enum {
    C_TUR, C_REQUEST_SENSE, C_READ6, C_WRITE6, C_INQUIRY, C_MODE_SELECT6, C_RESERVE6, C_RELEASE6,
    C_MODE_SENSE6,
    C_START_STOP, C_PREVENT_ALLOW, C_READ_CAPACITY10, C_READ10, C_WRITE10, C_WRITE_VERIFY10,
    C_VERIFY10, C_PREFETCH10, C_SYNC_CACHE10, C_READ_DEFECT10, C_WRITE_SAME10, C_UNMAP,
    C_SANITIZE_OVERWRITE, C_SANITIZE_BLOCK_ERASE, C_SANITIZE_EXIT_FAILURE,
    C_MODE_SELECT10, C_RESERVE10, C_RELEASE10, C_MODE_SENSE10,
    C_PRIN_READ_KEYS, C_PRIN_READ_RESERVATION, C_PRIN_REPORT_CAPABILITIES, C_PRIN_READ_FULL_STATUS,
    C_PROUT_REGISTER, C_PROUT_RESERVE, C_PROUT_RELEASE, C_PROUT_CLEAR, C_PROUT_PREEMPT,
    C_PROUT_PREEMPT_ABORT, C_PROUT_REGISTER_IGNORE, C_PROUT_REGISTER_MOVE,
    C_XCOPY_LID1, C_RCR_COPY_STATUS, C_RCR_OP_PARAMS,
    C_RCR_FAILED_SEGMENT, C_READ16, C_CAW, C_WRITE16, C_ORWRITE16,
    C_WRITE_VERIFY16, C_VERIFY16, C_PREFETCH16, C_SYNC_CACHE16, C_WRITE_SAME16, C_WRITE_ATOMIC16,
    C_READ_CAPACITY16, C_GET_LBA_STATUS, C_REPORT_LUNS, C_RTPG, C_RSOC,
    C_READ12, C_WRITE12, C_WRITE_VERIFY12, C_VERIFY12, C_READ_DEFECT12, C__COUNT
};

#define F(...) {__VA_ARGS__}
#define FF4 0xff, 0xff, 0xff, 0xff
#define FF8 FF4, FF4

/* Rows in opcode order, so REPORT SUPPORTED OPERATION CODES lists them sorted. Usage masks are
 * the CDB USAGE DATA of SPC-4 §6.35.3 (byte 0 is the opcode; the control byte is reported 0:
 * NACA and LINK are not supported, vendor bits are ignored). */
#define RW(op, nm, len, fl, lo, ll, to, tl, pa, ex, tmo, ...)                                    \
    {.name = nm, .opcode = op, .cdb_len = len, .flags = fl, .lba_off = lo, .lba_len = ll,         \
     .tl_off = to, .tl_len = tl, .parse = pa, .exec = ex, .usage = __VA_ARGS__, .timeout_s = tmo}
#define EM(op, nm, len, fl, pa, ex, ...)                                                           \
    {.name = nm, .opcode = op, .cdb_len = len, .flags = fl, .parse = pa, .exec = ex,              \
     .usage = __VA_ARGS__, .timeout_s = 5}
#define EMSA(op, s, nm, len, fl, pa, ex, ...)                                                      \
    {.name = nm, .opcode = op, .sa = s, .cdb_len = len, .flags = (fl) | CMD_SA, .parse = pa,      \
     .exec = ex, .usage = __VA_ARGS__, .timeout_s = 5}

/* The same with a reservation class (PRC_*) for rows the flags do not classify right. */
#define RWP(prc, op, nm, len, fl, lo, ll, to, tl, pa, ex, tmo, ...)                              \
    {.name = nm, .opcode = op, .cdb_len = len, .flags = fl, .lba_off = lo, .lba_len = ll,         \
     .tl_off = to, .tl_len = tl, .parse = pa, .exec = ex, .usage = __VA_ARGS__, .timeout_s = tmo, \
     .pr = prc}
#define EMP(prc, op, nm, len, fl, pa, ex, ...)                                                     \
    {.name = nm, .opcode = op, .cdb_len = len, .flags = fl, .parse = pa, .exec = ex,              \
     .usage = __VA_ARGS__, .timeout_s = 5, .pr = prc}
#define EMSAP(prc, op, s, nm, len, fl, pa, ex, ...)                                                \
    {.name = nm, .opcode = op, .sa = s, .cdb_len = len, .flags = (fl) | CMD_SA, .parse = pa,      \
     .exec = ex, .usage = __VA_ARGS__, .timeout_s = 5, .pr = prc}
/* PERSISTENT RESERVE IN / OUT (SPC-4 §6.15, §6.16): one row per service action */
#define PRIN(s, nm) EMSAP(PRC_PR, 0x5e, s, nm, 10, SB, pr_parse_in, pr_exec_in,                   \
                          F(0x5e, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff))
#define PROUT(s, nm) EMSAP(PRC_PR, 0x5f, s, nm, 10, SB, pr_parse_out, pr_exec_out,                 \
                           F(0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff))

#define RD (CMD_MEDIUM | CMD_XFER | CMD_DIRECT)
#define WR (CMD_MEDIUM | CMD_XFER | CMD_DIRECT | CMD_WRITES)
#define ANY_LUN (CMD_UA_OK | CMD_NOLUN_OK | CMD_STANDBY_OK)
/* allowed in the standby ALUA state (SPC-4 §5.16.2.4.5) */
#define SB CMD_STANDBY_OK
/* no block range, but the medium must be loaded (removable LUNs) */
#define NM CMD_NEEDS_MEDIUM
/* thin provisioning and read-modify-write block commands (sbc_thin.c, sbc_caw.c, ...) */
#define WX (CMD_MEDIUM | CMD_WRITES)
#define SANITIZE(s) EMSA(0x48, s, "SANITIZE", 10, CMD_WRITES | NM, sbc_parse_sanitize,                  \
                         sbc_exec_sanitize, F(0x48, 0xbf, 0, 0, 0, 0, 0, 0xff, 0xff))

const struct scsi_cmd scsi_cmds[C__COUNT] = {
    [C_TUR] = EMP(PRC_ALLOW, 0x00, "TEST UNIT READY", 6, NM, spc_parse_none, spc_exec_tur,
                  F(0x00)),
    [C_REQUEST_SENSE] = EM(0x03, "REQUEST SENSE", 6, ANY_LUN, spc_parse_request_sense,
                           spc_exec_request_sense, F(0x03, 0x01, 0, 0, 0xff)),
    [C_READ6] = RW(0x08, "READ(6)", 6, RD, 1, 3, 4, 1, sbc_parse_rw, sbc_exec_read, 30,
                   F(0x08, 0x1f, 0xff, 0xff, 0xff)),
    [C_WRITE6] = RW(0x0a, "WRITE(6)", 6, WR, 1, 3, 4, 1, sbc_parse_rw, sbc_exec_write, 30,
                    F(0x0a, 0x1f, 0xff, 0xff, 0xff)),
    [C_INQUIRY] = EM(0x12, "INQUIRY", 6, ANY_LUN, spc_parse_inquiry, spc_exec_inquiry,
                     F(0x12, 0x01, 0xff, 0xff, 0xff)),
    [C_MODE_SELECT6] = EMP(PRC_WRITE, 0x15, "MODE SELECT(6)", 6, SB, mode_parse_select,
                           mode_exec_select, F(0x15, 0x11, 0, 0, 0xff)),
    [C_RESERVE6] = EMP(PRC_SPC2, 0x16, "RESERVE(6)", 6, 0, pr_parse_spc2, pr_exec_reserve,
                       F(0x16, 0, 0, 0, 0)),
    [C_RELEASE6] = EMP(PRC_SPC2, 0x17, "RELEASE(6)", 6, 0, pr_parse_spc2, pr_exec_release,
                       F(0x17, 0, 0, 0, 0)),
    [C_MODE_SENSE6] = EM(0x1a, "MODE SENSE(6)", 6, SB, mode_parse_sense, mode_exec_sense,
                         F(0x1a, 0x08, 0xff, 0xff, 0xff)),
    [C_START_STOP] = EMP(PRC_CDB, 0x1b, "START STOP UNIT", 6, 0, sbc_parse_start_stop,
                         sbc_exec_start_stop, F(0x1b, 0x01, 0, 0x0f, 0xf7)),
    [C_PREVENT_ALLOW] = EMP(PRC_CDB, 0x1e, "PREVENT ALLOW MEDIUM REMOVAL", 6, 0, spc_parse_none,
                            sbc_exec_prevent_allow, F(0x1e, 0, 0, 0, 0x03)),
    [C_READ_CAPACITY10] = EMP(PRC_ALLOW, 0x25, "READ CAPACITY(10)", 10, NM, sbc_parse_readcap10,
                              sbc_exec_readcap10, F(0x25, 0, FF4, 0, 0, 0x01)),
    [C_READ10] = RW(0x28, "READ(10)", 10, RD, 2, 4, 7, 2, sbc_parse_rw, sbc_exec_read, 30,
                    F(0x28, 0xfc, FF4, 0x1f, 0xff, 0xff)),
    [C_WRITE10] = RW(0x2a, "WRITE(10)", 10, WR, 2, 4, 7, 2, sbc_parse_rw, sbc_exec_write, 30,
                     F(0x2a, 0xf8, FF4, 0x1f, 0xff, 0xff)),
    [C_WRITE_VERIFY10] = RW(0x2e, "WRITE AND VERIFY(10)", 10, WR, 2, 4, 7, 2, sbc_parse_rw,
                            sbc_exec_write, 30, F(0x2e, 0xf2, FF4, 0x1f, 0xff, 0xff)),
    [C_VERIFY10] = RW(0x2f, "VERIFY(10)", 10, CMD_MEDIUM | CMD_SCRATCH, 2, 4, 7, 2, sbc_parse_verify,
                      sbc_exec_verify, 30, F(0x2f, 0xf6, FF4, 0x1f, 0xff, 0xff)),
    [C_PREFETCH10] = RW(0x34, "PRE-FETCH(10)", 10, CMD_MEDIUM, 2, 4, 7, 2, sbc_parse_prefetch,
                        spc_exec_good, 30, F(0x34, 0x02, FF4, 0x1f, 0xff, 0xff)),
    [C_SYNC_CACHE10] = RWP(PRC_WRITE, 0x35, "SYNCHRONIZE CACHE(10)", 10, CMD_MEDIUM, 2, 4, 7, 2,
                           sbc_parse_sync, sbc_exec_sync, 60,
                           F(0x35, 0x02, FF4, 0x1f, 0xff, 0xff)),
    [C_READ_DEFECT10] = EM(0x37, "READ DEFECT DATA(10)", 10, NM, sbc_parse_read_defect,
                           sbc_exec_read_defect, F(0x37, 0, 0x1f, 0, 0, 0, 0, 0xff, 0xff)),
    [C_WRITE_SAME10] = RW(0x41, "WRITE SAME(10)", 10, WX, 2, 4, 7, 2, sbc_parse_write_same,
                          sbc_exec_write_same, 60, F(0x41, 0xf8, FF4, 0x1f, 0xff, 0xff)),
    [C_UNMAP] = EM(0x42, "UNMAP", 10, CMD_WRITES | NM, sbc_parse_unmap, sbc_exec_unmap,
                   F(0x42, 0x01, 0, 0, 0, 0, 0x1f, 0xff, 0xff)),
    [C_SANITIZE_OVERWRITE] = SANITIZE(0x01),
    [C_SANITIZE_BLOCK_ERASE] = SANITIZE(0x02),
    [C_SANITIZE_EXIT_FAILURE] = SANITIZE(0x1f),
    [C_MODE_SELECT10] = EMP(PRC_WRITE, 0x55, "MODE SELECT(10)", 10, SB, mode_parse_select,
                            mode_exec_select, F(0x55, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff)),
    [C_RESERVE10] = EMP(PRC_SPC2, 0x56, "RESERVE(10)", 10, 0, pr_parse_spc2, pr_exec_reserve,
                        F(0x56, 0, 0, 0, 0, 0, 0, 0, 0)),
    [C_RELEASE10] = EMP(PRC_SPC2, 0x57, "RELEASE(10)", 10, 0, pr_parse_spc2, pr_exec_release,
                        F(0x57, 0, 0, 0, 0, 0, 0, 0, 0)),
    [C_MODE_SENSE10] = EM(0x5a, "MODE SENSE(10)", 10, SB, mode_parse_sense, mode_exec_sense,
                          F(0x5a, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff)),
    [C_PRIN_READ_KEYS] = PRIN(0x00, "PERSISTENT RESERVE IN/READ KEYS"),
    [C_PRIN_READ_RESERVATION] = PRIN(0x01, "PERSISTENT RESERVE IN/READ RESERVATION"),
    [C_PRIN_REPORT_CAPABILITIES] = PRIN(0x02, "PERSISTENT RESERVE IN/REPORT CAPABILITIES"),
    [C_PRIN_READ_FULL_STATUS] = PRIN(0x03, "PERSISTENT RESERVE IN/READ FULL STATUS"),
    [C_PROUT_REGISTER] = PROUT(0x00, "PERSISTENT RESERVE OUT/REGISTER"),
    [C_PROUT_RESERVE] = PROUT(0x01, "PERSISTENT RESERVE OUT/RESERVE"),
    [C_PROUT_RELEASE] = PROUT(0x02, "PERSISTENT RESERVE OUT/RELEASE"),
    [C_PROUT_CLEAR] = PROUT(0x03, "PERSISTENT RESERVE OUT/CLEAR"),
    [C_PROUT_PREEMPT] = PROUT(0x04, "PERSISTENT RESERVE OUT/PREEMPT"),
    [C_PROUT_PREEMPT_ABORT] = PROUT(0x05, "PERSISTENT RESERVE OUT/PREEMPT AND ABORT"),
    [C_PROUT_REGISTER_IGNORE] = PROUT(0x06, "PERSISTENT RESERVE OUT/REGISTER AND IGNORE"),
    [C_PROUT_REGISTER_MOVE] = PROUT(0x07, "PERSISTENT RESERVE OUT/REGISTER AND MOVE"),
    [C_XCOPY_LID1] = {.name = "EXTENDED COPY(LID1)", .opcode = 0x83, .sa = 0x00, .cdb_len = 16,
                      .flags = CMD_SA, .parse = xcopy_parse, .exec = xcopy_exec,
                      .usage = F(0x83, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, FF4, 0, 0), .timeout_s = 60,
                      /* it writes the destination LUN: a write under reservations */
                      .pr = PRC_WRITE},
    [C_RCR_COPY_STATUS] = EMSA(0x84, 0x00, "RECEIVE COPY RESULTS/COPY STATUS", 16, 0,
                               xcopy_parse_rcr, xcopy_exec_rcr,
                               F(0x84, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, FF4, 0, 0)),
    [C_RCR_OP_PARAMS] = EMSA(0x84, 0x03, "RECEIVE COPY RESULTS/OPERATING PARAMETERS", 16, 0,
                             xcopy_parse_rcr, xcopy_exec_rcr,
                             F(0x84, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, FF4, 0, 0)),
    [C_RCR_FAILED_SEGMENT] = EMSA(0x84, 0x04, "RECEIVE COPY RESULTS/FAILED SEGMENT DETAILS", 16,
                                  0, xcopy_parse_rcr, xcopy_exec_rcr,
                                  F(0x84, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, FF4, 0, 0)),
    [C_READ16] = RW(0x88, "READ(16)", 16, RD, 2, 8, 10, 4, sbc_parse_rw, sbc_exec_read, 30,
                    F(0x88, 0xfc, FF8, FF4, 0x1f)),
    [C_CAW] = RW(0x89, "COMPARE AND WRITE", 16, WX, 2, 8, 13, 1, sbc_parse_caw, sbc_exec_caw, 30,
                 F(0x89, 0xf8, FF8, 0, 0, 0, 0xff, 0x1f)),
    [C_WRITE16] = RW(0x8a, "WRITE(16)", 16, WR, 2, 8, 10, 4, sbc_parse_rw, sbc_exec_write, 30,
                     F(0x8a, 0xf8, FF8, FF4, 0x1f)),
    [C_ORWRITE16] = RW(0x8b, "ORWRITE(16)", 16, WX, 2, 8, 10, 4, sbc_parse_orwrite,
                       sbc_exec_orwrite, 30, F(0x8b, 0xf8, FF8, FF4, 0x1f)),
    [C_WRITE_VERIFY16] = RW(0x8e, "WRITE AND VERIFY(16)", 16, WR, 2, 8, 10, 4, sbc_parse_rw,
                            sbc_exec_write, 30, F(0x8e, 0xf2, FF8, FF4, 0x1f)),
    [C_VERIFY16] = RW(0x8f, "VERIFY(16)", 16, CMD_MEDIUM | CMD_SCRATCH, 2, 8, 10, 4, sbc_parse_verify,
                      sbc_exec_verify, 30, F(0x8f, 0xf6, FF8, FF4, 0x1f)),
    [C_PREFETCH16] = RW(0x90, "PRE-FETCH(16)", 16, CMD_MEDIUM, 2, 8, 10, 4, sbc_parse_prefetch,
                        spc_exec_good, 30, F(0x90, 0x02, FF8, FF4, 0x1f)),
    [C_SYNC_CACHE16] = RWP(PRC_WRITE, 0x91, "SYNCHRONIZE CACHE(16)", 16, CMD_MEDIUM, 2, 8, 10,
                           4, sbc_parse_sync, sbc_exec_sync, 60, F(0x91, 0x02, FF8, FF4, 0x1f)),
    [C_WRITE_SAME16] = RW(0x93, "WRITE SAME(16)", 16, WX, 2, 8, 10, 4, sbc_parse_write_same,
                          sbc_exec_write_same, 60, F(0x93, 0xf9, FF8, FF4, 0x1f)),
    [C_WRITE_ATOMIC16] = RW(0x9c, "WRITE ATOMIC(16)", 16, WX, 2, 8, 12, 2, sbc_parse_write_atomic,
                            sbc_exec_write_atomic, 30, F(0x9c, 0xf8, FF8, 0, 0, 0xff, 0xff, 0x1f)),
    [C_READ_CAPACITY16] = EMSAP(PRC_ALLOW, 0x9e, 0x10, "READ CAPACITY(16)", 16, NM,
                                sbc_parse_readcap16, sbc_exec_readcap16,
                                F(0x9e, 0x1f, FF8, FF4, 0x01)),
    [C_GET_LBA_STATUS] = EMSA(0x9e, 0x12, "GET LBA STATUS", 16, NM, sbc_parse_get_lba_status,
                              sbc_exec_get_lba_status, F(0x9e, 0x1f, FF8, FF4, 0, 0)),
    [C_REPORT_LUNS] = EM(0xa0, "REPORT LUNS", 12, ANY_LUN, spc_parse_report_luns,
                         spc_exec_report_luns, F(0xa0, 0, 0xff, 0, 0, 0, FF4)),
    /* MAINTENANCE IN: byte 1 bits 7:5 choose the parameter data format (SPC-4 §6.27) */
    [C_RTPG] = EMSAP(PRC_ANY, 0xa3, 0x0a, "REPORT TARGET PORT GROUPS", 12, SB, alua_parse_rtpg,
                     alua_exec_rtpg, F(0xa3, 0xff, 0, 0, 0, 0, FF4, 0, 0)),
    [C_RSOC] = EMSA(0xa3, 0x0c, "REPORT SUPPORTED OPERATION CODES", 12, 0, spc_parse_rsoc,
                    spc_exec_rsoc, F(0xa3, 0x1f, 0x87, 0xff, 0xff, 0xff, FF4)),
    [C_READ12] = RW(0xa8, "READ(12)", 12, RD, 2, 4, 6, 4, sbc_parse_rw, sbc_exec_read, 30,
                    F(0xa8, 0xfc, FF4, FF4, 0x1f)),
    [C_WRITE12] = RW(0xaa, "WRITE(12)", 12, WR, 2, 4, 6, 4, sbc_parse_rw, sbc_exec_write, 30,
                     F(0xaa, 0xf8, FF4, FF4, 0x1f)),
    [C_WRITE_VERIFY12] = RW(0xae, "WRITE AND VERIFY(12)", 12, WR, 2, 4, 6, 4, sbc_parse_rw,
                            sbc_exec_write, 30, F(0xae, 0xf2, FF4, FF4, 0x1f)),
    [C_VERIFY12] = RW(0xaf, "VERIFY(12)", 12, CMD_MEDIUM | CMD_SCRATCH, 2, 4, 6, 4, sbc_parse_verify,
                      sbc_exec_verify, 30, F(0xaf, 0xf6, FF4, FF4, 0x1f)),
    [C_READ_DEFECT12] = EM(0xb7, "READ DEFECT DATA(12)", 12, NM, sbc_parse_read_defect,
                           sbc_exec_read_defect, F(0xb7, 0x1f, FF4, FF4, 0, 0)),
};
/* clang-format on */
const size_t scsi_ncmds = C__COUNT;

/* opcode -> first row + 1 (0: unknown); rows sharing an opcode (service actions) are adjacent */
static uint8_t cmd_index[256];
static pthread_once_t cmd_index_once = PTHREAD_ONCE_INIT;

static void cmd_index_build(void)
{
    for (size_t i = C__COUNT; i-- > 0;)
        cmd_index[scsi_cmds[i].opcode] = (uint8_t)(i + 1);
}

const struct scsi_cmd *scsi_cmd_lookup(uint8_t opcode, uint8_t sa, bool *opcode_known)
{
    pthread_once(&cmd_index_once, cmd_index_build);
    unsigned i = cmd_index[opcode];
    *opcode_known = i != 0;
    if (!i)
        return NULL;
    const struct scsi_cmd *c = &scsi_cmds[i - 1];
    if (!(c->flags & CMD_SA))
        return c;
    for (; c < scsi_cmds + C__COUNT && c->opcode == opcode; c++)
        if (c->sa == sa)
            return c;
    return NULL;
}

bool scsi_cmd_offered(const struct scsi_lun *lu, const struct scsi_cmd *c)
{
    return !lu || c->exec != sbc_exec_write_atomic || sbc_atomic_max_bytes(lu);
}

void scsi_task_init(struct scsi_task *t)
{
    memset(t, 0, sizeof(*t));
}

/* Bits set outside the usage mask are reserved (or unsupported) fields: SPC-4 §4.3.2 says
 * a nonzero reserved field is INVALID FIELD IN CDB, pointing at the highest offending bit. */
static scsi_sr check_reserved(const uint8_t *cdb, const struct scsi_cmd *c)
{
    for (unsigned i = 1; i + 1 < c->cdb_len; i++) {
        uint8_t bad = cdb[i] & (uint8_t)~c->usage[i];
        if (bad)
            return SR_CDB_FIELD(i, 31 - __builtin_clz(bad));
    }
    /* control byte (SAM-5 §5.2): NACA=1 needs ACA, which is not offered; LINK is obsolete */
    uint8_t ctl = cdb[c->cdb_len - 1];
    if (ctl & 0x07)
        return SR_CDB_FIELD(c->cdb_len - 1, 31 - __builtin_clz(ctl & 0x07));
    return SR_OK;
}

/* Task buffers are kept for reuse per thread, by power-of-two size class from 4 KiB: a fresh
 * buffer of 128 KiB or more is a new mapping whose every page faults in when the data is
 * copied in, which cost a 256 KiB READ of a RAM LUN more than the copy itself. A buffer goes
 * back to the cache of the thread that releases the task (the one it runs on), up to
 * BUF_CACHE_BYTES per thread: to make room, buffers of other sizes are freed first (the load
 * changed), and a buffer of a size that alone fills the cache is freed. */
#define BUF_CLASSES 13 /* 4 KiB .. 16 MiB: a VERIFY's 8 MiB of data and 8 MiB of medium */
#define BUF_CACHE_BYTES (32u << 20)
#define BUF_NO_CLASS 0xff

struct buf_cache {
    void *head[BUF_CLASSES]; /* each buffer's first bytes point to the next */
    size_t bytes;
    bool registered; /* with buf_cache_key, so the thread's end frees the cache */
};
static _Thread_local struct buf_cache buf_cache;
static pthread_key_t buf_cache_key;
static pthread_once_t buf_cache_once = PTHREAD_ONCE_INIT;

/* Free cached buffers, largest first and none of class `keep`, until `room` more bytes fit. */
static void buf_cache_trim(struct buf_cache *bc, size_t room, unsigned keep)
{
    for (unsigned c = BUF_CLASSES; c-- > 0;)
        while (c != keep && bc->head[c] && bc->bytes + room > BUF_CACHE_BYTES) {
            void *p = bc->head[c];
            bc->head[c] = *(void **)p;
            bc->bytes -= (size_t)4096 << c;
            free(p);
        }
}

static void buf_cache_drain(void *arg)
{
    buf_cache_trim(arg, BUF_CACHE_BYTES + 1, BUF_CLASSES);
}

/* exit() runs no key destructor for the thread calling it: its cache is freed here */
static void buf_cache_drain_at_exit(void)
{
    buf_cache_drain(&buf_cache);
}

static void buf_cache_key_init(void)
{
    pthread_key_create(&buf_cache_key, buf_cache_drain);
    atexit(buf_cache_drain_at_exit);
}

static void *buf_get(size_t n, uint8_t *cls)
{
    unsigned c = 0;
    while (c < BUF_CLASSES && ((size_t)4096 << c) < n)
        c++;
    void *p = NULL;
    if (c == BUF_CLASSES) { /* larger than any class: not cached */
        *cls = BUF_NO_CLASS;
        return posix_memalign(&p, 4096, n) ? NULL : p;
    }
    *cls = (uint8_t)c;
    struct buf_cache *bc = &buf_cache;
    if (bc->head[c]) {
        p = bc->head[c];
        bc->head[c] = *(void **)p;
        bc->bytes -= (size_t)4096 << c;
        return p;
    }
    return posix_memalign(&p, 4096, (size_t)4096 << c) ? NULL : p;
}

static void buf_put(void *p, uint8_t cls)
{
    struct buf_cache *bc = &buf_cache;
    size_t n = (size_t)4096 << cls;
    if (p && cls != BUF_NO_CLASS && bc->bytes + n > BUF_CACHE_BYTES)
        buf_cache_trim(bc, n, cls);
    if (!p || cls == BUF_NO_CLASS || bc->bytes + n > BUF_CACHE_BYTES) {
        free(p);
        return;
    }
    if (!bc->registered) {
        pthread_once(&buf_cache_once, buf_cache_key_init);
        pthread_setspecific(buf_cache_key, bc);
        bc->registered = true;
    }
    *(void **)p = bc->head[cls];
    bc->head[cls] = p;
    bc->bytes += n;
}

/* page aligned: an O_DIRECT file store takes the buffer as it is */
static size_t buffer_request(uint32_t xfer_len, size_t extra)
{
    return (((size_t)xfer_len + 4095) & ~(size_t)4095) + ((extra + 4095) & ~(size_t)4095);
}

/* What buf_get really takes for that: its size class (the memory the task holds). */
static size_t buffer_bytes(uint32_t xfer_len, size_t extra)
{
    size_t n = buffer_request(xfer_len, extra);
    for (unsigned c = 0; c < BUF_CLASSES; c++)
        if (((size_t)4096 << c) >= n)
            return (size_t)4096 << c;
    return n;
}

static scsi_sr alloc_buffer(struct scsi_task *t, size_t extra)
{
    struct scsi_task_core *k = scsi_core(t);
    void *p = buf_get(buffer_request(t->xfer_len, extra), &k->buf_class);
    if (!p)
        return SR_INSUFFICIENT_RESOURCES;
    k->buf = p;
    t->buffered = true;
    t->iov[0].iov_base = p;
    t->iov[0].iov_len = t->xfer_len;
    t->iovcnt = 1;
    return SR_OK;
}

/* Data memory a command's execution allocates beside the buffer setup gives it: WRITE SAME's
 * and SANITIZE's fill pattern, the medium's copy COMPARE AND WRITE and ORWRITE read (a mapped
 * store is read in place), EXTENDED COPY's bounce buffer. Upper bounds: the transport charges
 * them up front, so nothing a command allocates later escapes its accounting. */
static size_t exec_memory(const struct scsi_cmd *c, const struct scsi_lun *lu, uint64_t range)
{
    if (c->exec == sbc_exec_write_same)
        return range < SCSI_FILL_CHUNK ? range : SCSI_FILL_CHUNK;
    if (c->exec == sbc_exec_sanitize)
        return SCSI_FILL_CHUNK;
    if ((c->exec == sbc_exec_caw || c->exec == sbc_exec_orwrite) && lu && !lu->mapped)
        return range;
    if (c->exec == xcopy_exec)
        return SCSI_COPY_CHUNK;
    return 0;
}

/* Asks the transport for room for n bytes of data memory before any is allocated. */
static scsi_sr admit_memory(struct scsi_task *t, size_t n)
{
    enum scsi_refusal why = SCSI_REFUSE_TASK_SET_FULL;
    if (!n || !t->admit)
        return SR_OK;
    if (!t->admit(t, n, &why))
        return why == SCSI_REFUSE_BUSY ? SR_BUSY : SR_TASK_SET_FULL;
    t->mem = n;
    return SR_OK;
}

scsi_sr scsi_lun_gates(const struct scsi_lun *lu, const struct scsi_cmd *c)
{
    /* this gateway's port group in standby for the LUN; NOT READY while a SANITIZE runs
     * (SBC-4 §4.11.3); removable LUN, medium ejected: NOT READY, MEDIUM NOT PRESENT */
    scsi_sr sr = alua_gate(lu, c);
    if (!sr)
        sr = sbc_sanitize_gate(lu, c);
    if (!sr)
        sr = sbc_medium_gate(lu, c);
    return sr;
}

scsi_sr scsi_lun_access(struct scsi_task *t, struct scsi_lun *lu, const struct scsi_cmd *c)
{
    scsi_sr sr = scsi_lun_gates(lu, c);
    unsigned resv = atomic_load_explicit(&lu->resv, memory_order_relaxed);
    if (!sr && resv)
        sr = pr_check(t, lu, c, resv);
    if (!sr && (c->flags & CMD_WRITES))
        sr = sbc_write_protect(lu);
    return sr;
}

int scsi_task_setup(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    struct scsi_lun *lu = t->target ? scsi_target_lun(t->target, t->lun) : NULL;
    t->lu = lu;
    /* Held until release, so a LUN removed at run time outlives the commands using it. */
    k->lu_held = lu != NULL;
    if (lu)
        scsi_lun_user_get(lu);
    t->dir = SCSI_DIR_NONE;
    t->xfer_len = 0;
    t->iovcnt = 0;
    t->data_len = 0;
    t->status = SCSI_STATUS_GOOD;
    t->sense_len = 0;
    t->buffered = false;
    t->mem = 0;
    k->buf = NULL;
    k->cmd = NULL;

    bool known;
    const struct scsi_cmd *c = scsi_cmd_lookup(t->cdb[0], t->cdb[1] & 0x1f, &known);
    scsi_sr sr;
    if (!t->target) {
        sr = SR_LUN_NOT_SUPPORTED;
        goto refuse;
    }
    if (!lu) {
        if (!c || !(c->flags & CMD_NOLUN_OK)) {
            sr = SR_LUN_NOT_SUPPORTED;
            goto refuse;
        }
    } else if (t->nexus && !(c && (c->flags & CMD_UA_OK)) &&
               atomic_load_explicit(&lu->ua[scsi_nexus_slot(t->nexus)], memory_order_relaxed)) {
        /* SAM-5 §5.14: a pending UA ends any command but INQUIRY, REPORT LUNS and REQUEST
         * SENSE, and is cleared by being reported. */
        sr = scsi_ua_take(lu, t->nexus);
        if (sr)
            goto refuse;
    }
    if (!c) {
        /* SPC-4 §4.3.3: unknown service action of a known opcode is a bad field */
        sr = known ? SR_CDB_FIELD(1, 4) : SR_INVALID_OPCODE;
        goto refuse;
    }
    if (!scsi_cmd_offered(lu, c)) {
        sr = SR_INVALID_OPCODE; /* not on this LUN's store (libiscsi then skips its tests) */
        goto refuse;
    }
    if (lu && (sr = scsi_lun_gates(lu, c)))
        goto refuse;
    sr = check_reserved(t->cdb, c);
    if (sr)
        goto refuse;
    /* Reservations (SPC-4 §5.13, SBC-3 §4.17): one relaxed load while nothing is reserved. */
    unsigned resv = lu ? atomic_load_explicit(&lu->resv, memory_order_relaxed) : 0;
    if (resv) {
        sr = pr_check(t, lu, c, resv);
        if (sr)
            goto refuse;
    }

    struct scsi_req r = {.dir = SCSI_DIR_NONE};
    sr = c->parse(t, c, &r);
    if (sr)
        goto refuse;

    size_t scratch = 0;
    if (c->flags & CMD_MEDIUM) {
        /* The one place every READ/WRITE/VERIFY/SYNC variant is bounded (SBC-3 §4.5). */
        if (r.xfer_len > SCSI_MAX_XFER_BYTES) {
            sr = SR_CDB_FIELD(c->tl_off, -1);
            goto refuse;
        }
        if (r.lba > lu->nblocks || r.nblocks > lu->nblocks - r.lba) {
            sr = SR_LBA_OUT_OF_RANGE;
            goto refuse;
        }
        if ((c->flags & CMD_WRITES) && (sr = sbc_write_protect(lu)))
            goto refuse; /* read-only LUN or software write protect (SWP) */
        k->io.offset = r.lba << lu->block_shift;
        k->io.length = r.nblocks << lu->block_shift;
        /* caching page WCE=0: every write is write-through (SBC-3 §6.4.5) */
        k->io.fua = r.fua || !atomic_load_explicit(&lu->wce, memory_order_relaxed);
        if ((c->flags & CMD_SCRATCH) && r.xfer_len)
            scratch = k->io.length; /* room to read the medium for the compare */
    } else if (r.xfer_len > SCSI_MAX_XFER_BYTES) {
        r.xfer_len = SCSI_MAX_XFER_BYTES; /* parse caps allocation lengths; belt and braces */
    }
    t->xfer_len = (uint32_t)r.xfer_len;
    t->dir = t->xfer_len ? r.dir : SCSI_DIR_NONE;
    uint32_t avail = t->edtl_write ? t->edtl : 0;
    if (t->dir == SCSI_DIR_WRITE && avail < t->xfer_len) {
        /* Data-out shortfall: EDTL (or no W bit) below what the CDB asks to send. FCP-4
         * §9.4.2, which initiators and libiscsi's iSCSIResiduals tests apply to iSCSI, allows
         * a) processing the command up to EDTL, b) CHECK CONDITION, ILLEGAL REQUEST, INVALID
         * FIELD IN COMMAND INFORMATION UNIT with nothing transferred, or c) ABORTED COMMAND.
         * The rule here, for every data-out command: a) when what arrives is itself a complete
         * command, i.e. a plain block write (WRITE, WRITE AND VERIFY) and EDTL a whole number of
         * blocks: those blocks are stored, GOOD (EDTL 0: none; LIO does the same; libiscsi
         * 1.19's Write*Residuals require GOOD and the first block written for 2 blocks with
         * EDTL 512); b) otherwise, nothing written: a torn block, part of a parameter list, of
         * COMPARE AND WRITE's compare data, of WRITE SAME's block or of an atomic write is no
         * command. In both, dir and xfer_len stay the CDB's so the transport reports the overflow
         * residual (RFC 7143 §11.4.5.1: xfer_len - EDTL); with b) it takes none of the data. EDTL
         * above the CDB's need (underflow) is served normally. */
        bool blocks = (c->flags & (CMD_DIRECT | CMD_WRITES)) == (CMD_DIRECT | CMD_WRITES);
        if (!blocks || (avail & (lu->block_size - 1))) {
            scsi_task_set_reason(t, SR_INVALID_FIELD_IN_IU);
            return -1;
        }
        k->io.length = avail; /* the rest of the range stays untouched */
    }
    /* Every transfer has a buffer of the task's own, RAM LUNs included: the data is copied
     * between it and the store under the store's or the range lock's exclusion, so a READ
     * never returns a block half written, and what the transport sends (and digests) is
     * memory nobody else writes. */
    size_t mem = exec_memory(c, lu, k->io.length);
    if (t->xfer_len)
        mem += buffer_bytes(t->xfer_len, scratch);
    sr = admit_memory(t, mem);
    if (sr)
        goto refuse;
    if (t->xfer_len) {
        sr = alloc_buffer(t, scratch);
        if (sr)
            goto refuse;
    }
    k->cmd = c;
    return 0;

refuse:
    scsi_task_set_reason(t, sr);
    t->dir = SCSI_DIR_NONE;
    t->xfer_len = 0;
    return -1;
}

void scsi_task_exec(struct scsi_task *t)
{
    const struct scsi_cmd *c = scsi_core(t)->cmd;
    scsi_task_enter(t);
    if (!c) { /* refused by setup or the transport: status and sense are already set */
        t->done(t);
        return;
    }
    c->exec(t, c);
}

void scsi_task_release(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    buf_put(k->buf, k->buf_class);
    k->buf = NULL;
    t->buffered = false;
    t->iovcnt = 0;
    k->cmd = NULL;
    if (k->lu_held) {
        k->lu_held = false;
        scsi_lun_user_put(t->lu);
    }
}

void scsi_task_refuse(struct scsi_task *t, enum scsi_refusal why)
{
    scsi_task_release(t);
    switch (why) {
    case SCSI_REFUSE_TASK_SET_FULL:
    case SCSI_REFUSE_BUSY:
        scsi_task_set_reason(t, why == SCSI_REFUSE_BUSY ? SR_BUSY : SR_TASK_SET_FULL);
        t->dir = SCSI_DIR_NONE;
        t->xfer_len = 0;
        return;
    case SCSI_REFUSE_PROTOCOL_CRC_ERROR:
        scsi_task_set_reason(t, SR_PROTOCOL_CRC_ERROR);
        return;
    }
    assert(!"unknown scsi_refusal");
}

void scsi_task_complete(struct scsi_task *t, scsi_sr sr)
{
    scsi_task_set_reason(t, sr);
    t->done(t);
}

void scsi_task_put_data(struct scsi_task *t, const void *src, uint32_t len)
{
    uint32_t n = len < t->xfer_len ? len : t->xfer_len;
    uint32_t off = 0;
    for (int i = 0; i < t->iovcnt && off < n; i++) {
        uint32_t k = (uint32_t)t->iov[i].iov_len;
        if (k > n - off)
            k = n - off;
        memcpy(t->iov[i].iov_base, (const uint8_t *)src + off, k);
        off += k;
    }
    t->data_len = n;
    scsi_task_complete(t, SR_OK);
}
