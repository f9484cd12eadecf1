/* The opcode table: one row per command (and service action) with its CDB layout, usage mask,
 * flags, reservation class and handlers, and the lookup setup uses. Adding a command is adding
 * a row here plus its parse/exec functions. */
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
    C_READ_CAPACITY16, C_GET_LBA_STATUS, C_REPORT_LUNS, C_RTPG, C_RSOC, C_STPG,
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
#define PROUT(s, nm) EMSAP(PRC_PR, 0x5f, s, nm, 10, SB | LS, pr_parse_out, pr_exec_out,                 \
                           F(0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff))

#define RD (CMD_MEDIUM | CMD_XFER | CMD_DIRECT)
#define WR (CMD_MEDIUM | CMD_XFER | CMD_DIRECT | CMD_WRITES)
#define ANY_LUN (CMD_UA_OK | CMD_NOLUN_OK | CMD_STANDBY_OK)
/* allowed in the standby ALUA state (SPC-4 §5.16.2.4.5) */
#define SB CMD_STANDBY_OK
#define LS CMD_LU_STATE
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
    [C_MODE_SELECT6] = EMP(PRC_WRITE, 0x15, "MODE SELECT(6)", 6, SB | LS, mode_parse_select,
                           mode_exec_select, F(0x15, 0x11, 0, 0, 0xff)),
    [C_RESERVE6] = EMP(PRC_SPC2, 0x16, "RESERVE(6)", 6, LS, pr_parse_spc2, pr_exec_reserve,
                       F(0x16, 0, 0, 0, 0)),
    [C_RELEASE6] = EMP(PRC_SPC2, 0x17, "RELEASE(6)", 6, 0, pr_parse_spc2, pr_exec_release,
                       F(0x17, 0, 0, 0, 0)),
    [C_MODE_SENSE6] = EM(0x1a, "MODE SENSE(6)", 6, SB, mode_parse_sense, mode_exec_sense,
                         F(0x1a, 0x08, 0xff, 0xff, 0xff)),
    [C_START_STOP] = EMP(PRC_CDB, 0x1b, "START STOP UNIT", 6, 0, sbc_parse_start_stop,
                         sbc_exec_start_stop, F(0x1b, 0x01, 0, 0x0f, 0xf7)),
    [C_PREVENT_ALLOW] = EMP(PRC_CDB, 0x1e, "PREVENT ALLOW MEDIUM REMOVAL", 6, LS, spc_parse_none,
                            sbc_exec_prevent_allow, F(0x1e, 0, 0, 0, 0x03)),
    /* SB: SPC-4 §5.16.2.4.5 lets standby answer other commands too (LIO answers these): Linux's
     * sd reads the capacity once, at scan, and keeps a standby path refused there at 0 blocks
     * after a failover makes it active (dm-multipath then fails every I/O on it) */
    [C_READ_CAPACITY10] = EMP(PRC_ALLOW, 0x25, "READ CAPACITY(10)", 10, NM | SB, sbc_parse_readcap10,
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
    [C_MODE_SELECT10] = EMP(PRC_WRITE, 0x55, "MODE SELECT(10)", 10, SB | LS, mode_parse_select,
                            mode_exec_select, F(0x55, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff)),
    [C_RESERVE10] = EMP(PRC_SPC2, 0x56, "RESERVE(10)", 10, LS, pr_parse_spc2, pr_exec_reserve,
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
                      /* it writes the destination LUN: a write under reservations. Not
                       * CMD_MEDIUM: the caps do not count it (docs/qos.md says why) */
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
    [C_WRITE_ATOMIC16] = RW(0x9c, "WRITE ATOMIC(16)", 16, WX | CMD_OPTIONAL, 2, 8, 12, 2, sbc_parse_write_atomic,
                            sbc_exec_write_atomic, 30, F(0x9c, 0xf8, FF8, 0, 0, 0xff, 0xff, 0x1f)),
    [C_READ_CAPACITY16] = EMSAP(PRC_ALLOW, 0x9e, 0x10, "READ CAPACITY(16)", 16, NM | SB,
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
    /* MAINTENANCE OUT (SPC-4 §6.36): explicit ALUA targets only (CMD_OPTIONAL) */
    [C_STPG] = EMSAP(PRC_WRITE, 0xa4, 0x0a, "SET TARGET PORT GROUPS", 12, SB | CMD_OPTIONAL | LS,
                     alua_parse_stpg, alua_exec_stpg, F(0xa4, 0x1f, 0, 0, 0, 0, FF4, 0, 0)),
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
    if (!lu || !(c->flags & CMD_OPTIONAL))
        return true;
    if (c->exec == alua_exec_stpg)
        return lu->target->alua_explicit;
    return c->exec != sbc_exec_write_atomic || sbc_atomic_max_bytes(lu);
}
