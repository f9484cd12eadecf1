/* libFuzzer harness for a whole iSCSI exchange with the target (src/iscsi: login, full feature
 * phase, SCSI commands with immediate, unsolicited and solicited data, Text, NOP, TMFs, SNACK,
 * Logout, and the SCSI core behind them) as a sequence of PDUs on one connection, at
 * ErrorRecoveryLevel 0 or 2. It shares fuzz_pdu.c's rig (fuzz_target.h: one reactor, a
 * socketpair per connection, the target's own connection code from iscsi_conn_accept, the peer
 * written and drained until the connection is gone; a connection that does not go away is a
 * hang) and its PDU building (fuzz_pdu_build.h), but gives the fuzzer
 * structure, so that its mutations land in full feature phase rather than in the framing:
 *
 * byte 0: bit 0: ErrorRecoveryLevel=2 offered (else 0); bit 1: ImmediateData=No and
 *         InitialR2T=Yes (else Yes/No). A valid Login Request for a normal session with these
 *         goes first, straight to full feature phase.
 * then records, each: op (1 byte: the BHS opcode with its immediate bit; bit 7 set = send the
 *         BHS exactly as given, no fix-ups), flags (1 byte, BHS byte 1), data length (2 bytes,
 *         big endian; at most what is left of the input), BHS bytes 8..47 (40 bytes: LUN or
 *         ISID/TSIH, ITT, the opcode-specific fields), then the data segment.
 *         DataSegmentLength is always the data's length and TotalAHSLength 0 (no AHS: a wrong
 *         length only loses the framing, which fuzz_pdu covers). Unless bit 7, for the PDUs that
 * carry one CmdSN is the session's next (advanced by each non-immediate command), so commands run
 * instead of falling outside the window. The padding to 4 bytes is added. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bs/bs.h"
#include "iscsi/conn.h"
#include "iscsi/node.h"
#include "reactor/reactor.h"
#include "scsi/scsi.h"
#include "util/log.h"

#include "fuzz_pdu_build.h"
#include "fuzz_target.h"

#define MAX_INPUT (1u << 20)
#define MAX_CONNS 4   /* connections one after the other per input */
#define CONN_END 0x3e /* a record op (no such opcode): this connection ends, the next logs in */

/* A Login Request that goes straight from the operational stage to full feature phase. */
struct login_args {
    unsigned opts;
    uint16_t tsih, cid; /* tsih 0: a new session (leading login) */
    uint32_t cmdsn;
};

static size_t make_login(uint8_t *out, size_t cap, bool discovery, const struct login_args *la)
{
    unsigned opts = la->opts;
    /* a connection joining a session sends no session-wide (leading-only) keys */
    const char *joining[] = {
        "InitiatorName=" FUZZ_INITIATOR,
        "TargetName=" FUZZ_TARGET,
        "HeaderDigest=None",
        "DataDigest=None",
        "MaxRecvDataSegmentLength=65536",
    };
    const char *leading[] = {
        "InitiatorName=" FUZZ_INITIATOR,
        discovery ? "SessionType=Discovery" : "SessionType=Normal",
        discovery ? NULL : "TargetName=" FUZZ_TARGET,
        "HeaderDigest=None",
        "DataDigest=None",
        opts & 2 ? "ImmediateData=No" : "ImmediateData=Yes",
        opts & 2 ? "InitialR2T=Yes" : "InitialR2T=No",
        "MaxRecvDataSegmentLength=65536",
        "MaxBurstLength=262144",
        "FirstBurstLength=65536",
        "MaxOutstandingR2T=2",
        opts & 1 ? "ErrorRecoveryLevel=2" : "ErrorRecoveryLevel=0",
        "DefaultTime2Wait=0",
        "DefaultTime2Retain=1",
    };
    const char **keys = la->tsih ? joining : leading;
    size_t nkeys =
        la->tsih ? sizeof(joining) / sizeof(joining[0]) : sizeof(leading) / sizeof(leading[0]);
    /* an ITT no record is likely to use */
    const struct fpb_login l = {
        .itt = 0x10000001, .tsih = la->tsih, .cid = la->cid, .cmdsn = la->cmdsn};
    return fpb_login(out, cap, keys, nkeys, &l);
}

/* The PDUs of the records, fixed up, after the login: the wire. */
static size_t build_wire(const uint8_t *data, size_t size, uint8_t *wire, size_t off, size_t *used,
                         uint32_t *cmdsnp, uint8_t *marker)
{
    uint32_t cmdsn = *cmdsnp; /* the login's CmdSN: an immediate login does not advance it */
    size_t p = 0;
    *marker = 0;
    while (p + 4 + 40 <= size) {
        uint8_t op = data[p], flags = data[p + 1];
        if (op == CONN_END) {
            *marker = flags | 0x80;
            p += 2;
            break;
        }
        size_t dlen = (size_t)data[p + 2] << 8 | data[p + 3];
        const uint8_t *rest = data + p + 4;
        p += 44;
        if (dlen > size - p)
            dlen = size - p;
        uint8_t *b = wire + off;
        memset(b, 0, ISCSI_BHS_LEN);
        b[0] = op & 0x7f;
        b[1] = flags;
        memcpy(b + 8, rest, 40);
        size_t padded = fpb_frame(b, dlen);
        uint8_t opcode = op & 0x3f;
        bool has_cmdsn = opcode == ISCSI_OP_NOP_OUT || opcode == ISCSI_OP_SCSI_CMD ||
                         opcode == ISCSI_OP_TMF_REQ || opcode == ISCSI_OP_TEXT_REQ ||
                         opcode == ISCSI_OP_LOGOUT_REQ;
        if (!(op & 0x80) && has_cmdsn) {
            put_be32(b + BHS_CMDSN, cmdsn);
            if (!(op & ISCSI_BHS_IMMEDIATE))
                cmdsn++;
        }
        memcpy(b + ISCSI_BHS_LEN, data + p, dlen);
        memset(b + ISCSI_BHS_LEN + dlen, 0, padded - dlen);
        p += dlen;
        off += ISCSI_BHS_LEN + padded;
    }
    *used = p;
    *cmdsnp = cmdsn;
    return off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_setup_once("fuzz_session", 2); /* offered; the login prefix chooses 0 or 2 */
    if (size < 1 || size > MAX_INPUT)
        return 0;
    struct login_args la = {.opts = data[0]};
    data++;
    size--;
    /* each record grows by at most its padding and 4 bytes of BHS over its 44 */
    uint8_t *wire = malloc(ISCSI_BHS_LEN + 1024 + 2 * size + 64);
    if (!wire)
        return 0;
    for (unsigned conn = 0; conn < MAX_CONNS; conn++) {
        size_t ll = make_login(wire, ISCSI_BHS_LEN + 1024, false, &la);
        size_t used = 0;
        uint8_t marker = 0;
        size_t len = build_wire(data, size, wire, ll, &used, &la.cmdsn, &marker);
        uint8_t rsp[ISCSI_BHS_LEN];
        tg_run_conn(wire, len, rsp);
        data += used;
        size -= used;
        if (!marker)
            break;
        /* The next connection: into the same session (the TSIH this login got, when it
         * succeeded) with CID 0 (reinstating the one just lost) or 1 (a new one, from which
         * the lost one's tasks can be reassigned); a new session if the login failed. */
        bool in = (rsp[0] & 0x3f) == ISCSI_OP_LOGIN_RSP && rsp[36] == 0;
        uint16_t tsih = (uint16_t)(rsp[14] << 8 | rsp[15]);
        la.tsih = in ? tsih : 0;
        la.cid = marker & 1;
        if (!la.tsih)
            la.cmdsn = 0;
    }
    free(wire);
    return 0;
}
