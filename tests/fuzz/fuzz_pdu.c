/* libFuzzer harness for the target's PDU receive path (src/iscsi/conn.c and everything it
 * dispatches to: login, SCSI command / R2T / Data-Out, TMF, Text, NOP, Logout, Reject).
 *
 * Each input goes to a new connection of the target of fuzz_target.h (two nodes, one of them
 * with mutual CHAP, one reactor), followed by a write shutdown, until the connection is gone
 * (one that does not go away is a hang and aborts). Everything the target sends is dropped.
 *
 * The first input byte chooses what precedes the rest of the input on the wire:
 *   bits 0-1 = 0: nothing (raw bytes into the login phase)
 *            = 1, 3: a valid single-PDU Login Request to the node (normal session, skips the
 *              security stage, ImmediateData=Yes, InitialR2T=No), so the rest reaches FFP
 *            = 2: a valid Login Request for a discovery session. */
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

/* A Login Request that goes straight from the operational stage to full feature phase. */
static size_t make_login(uint8_t *out, size_t cap, bool discovery)
{
    const char *keys[] = {
        "InitiatorName=" FUZZ_INITIATOR,
        discovery ? "SessionType=Discovery" : "SessionType=Normal",
        discovery ? NULL : "TargetName=" FUZZ_TARGET,
        "HeaderDigest=None",
        "DataDigest=None",
        "ImmediateData=Yes",
        "InitialR2T=No",
        "MaxRecvDataSegmentLength=65536",
        "MaxBurstLength=262144",
        "FirstBurstLength=65536",
        "MaxOutstandingR2T=2",
        "ErrorRecoveryLevel=0",
    };
    const struct fpb_login l = {.itt = 1}; /* CID 0, CmdSN 0, a new session */
    return fpb_login(out, cap, keys, sizeof(keys) / sizeof(keys[0]), &l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_setup_once("fuzz_pdu", 0);
    if (size < 1 || size > MAX_INPUT)
        return 0;
    unsigned mode = data[0] & 3;
    data++;
    size--;

    uint8_t login[ISCSI_BHS_LEN + 1024];
    size_t ll = mode == 0 ? 0 : make_login(login, sizeof(login), mode == 2);
    uint8_t *wire = malloc(ll + size + 1);
    if (!wire)
        return 0;
    memcpy(wire, login, ll);
    if (size)
        memcpy(wire + ll, data, size);

    uint8_t rsp[ISCSI_BHS_LEN];
    tg_run_conn(wire, ll + size, rsp);
    free(wire);
    return 0;
}
