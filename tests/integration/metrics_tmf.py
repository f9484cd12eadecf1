#!/usr/bin/env python3
"""The initiator side of target_metrics.sh's task management check: one session through
hostile.py's raw initiator (InitialR2T=Yes, ImmediateData=No, so a WRITE waits for its Data-Out
once it has its R2T) that moves the abort, reset and queue-depth metrics by known amounts.

usage: metrics_tmf.py PORT TARGET DIR

  1. WRITE A on LUN 0 gets its R2T; ABORT TASK for it answers 0 (Function complete): one
     abort on LUN 0 (RFC 7143 §11.5.1).
  2. WRITEs B and C on LUN 0 get their R2Ts and wait for Data-Out: two commands in flight on
     LUN 0, the session and the portal. Writes DIR/busy.ready (the session's TSIH and ISID as
     JSON) and waits for DIR/busy.go while the shell scrapes.
  3. LOGICAL UNIT RESET on LUN 0 (aborting B and C: two more aborts, one reset) and TARGET WARM
     RESET (one more reset, of the session, the portal and each LUN), both answered 0; TEST UNIT READY
     on LUN 0 through the unit attention. Writes DIR/reset.ready, waits for DIR/reset.go.
  4. Logs out.
LUN 1 sees no abort and one reset (the target's). Exit 0 when every step went as described, 1 with the reason."""

import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import (OP_R2T, OP_SCSI, OP_SCSI_RSP, OP_TMF, OP_TMF_RSP, TestFailure,  # noqa: E402
                     bhs, check, cdb_rw10)

TMF_ABORT_TASK, TMF_LU_RESET, TMF_TARGET_WARM_RESET = 1, 5, 6
BLOCKS = 64  # 32 KiB of 512-byte blocks: one R2T


def start_write(s, lba):
    """WRITE(10) on LUN 0 without immediate data; returns its ITT once the R2T is in."""
    itt = s.next_itt()
    s.c.send_pdu(bhs(OP_SCSI, 0xA1, hostile.lun_field(0), itt, BLOCKS * 512, s.cmdsn,
                     s.expstatsn, cdb_rw10(0x2A, lba, BLOCKS)))
    s.cmdsn += 1
    h, _ = s.recv(5)
    check(h[0] & 0x3F == OP_R2T and struct.unpack(">I", h[16:20])[0] == itt,
          "WRITE at LBA %d: op 0x%02x instead of its R2T" % (lba, h[0]))
    return itt


def tmf(s, fn, lun=0, rtt=0xFFFFFFFF, refcmdsn=0):
    """An immediate TMF; returns its Response code. No SCSI Response may come meanwhile (the
    aborted WRITEs are never answered, RFC 7143 §11.5.1)."""
    itt = s.next_itt()
    s.c.send_pdu(bhs(OP_TMF, 0x80 | fn, hostile.lun_field(lun), itt, rtt, s.cmdsn, s.expstatsn,
                     struct.pack(">II", refcmdsn, 0), immediate=True))
    h, _ = s.recv(5)
    check(h[0] & 0x3F == OP_TMF_RSP, "TMF %d: op 0x%02x instead of its response" % (fn, h[0]))
    check(struct.unpack(">I", h[16:20])[0] == itt, "TMF Response for another ITT")
    return h[2]


def stage(d, name, info):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        json.dump(info, f)
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name + ".ready"))
    go = os.path.join(d, name + ".go")
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        check(time.monotonic() < deadline, "%s: no go from the shell within 60 s" % name)
        time.sleep(0.05)


def main():
    port, target, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    hostile.TARGET = target
    s = hostile.Session(port, want={"ImmediateData": "No", "InitialR2T": "Yes"}).login()
    # the power-on unit attention out of the way, and a command answered on each LUN
    st, _, _ = s.scsi_retry_ua(bytes(6))
    check(st == 0, "TEST UNIT READY on LUN 0: status 0x%02x" % st)
    st, _, _ = s.scsi_retry_ua(bytes(6), lun=1)
    check(st == 0, "TEST UNIT READY on LUN 1: status 0x%02x" % st)

    a = start_write(s, 0)
    rsp = tmf(s, TMF_ABORT_TASK, rtt=a, refcmdsn=s.cmdsn - 1)
    check(rsp == 0, "ABORT TASK of a WRITE in Data-Out: response %d, not 0" % rsp)

    start_write(s, 100)
    start_write(s, 200)
    info = {"tsih": s.tsih, "isid": "0x" + s.isid.hex()}
    stage(d, "busy", info)

    rsp = tmf(s, TMF_LU_RESET)
    check(rsp == 0, "LOGICAL UNIT RESET: response %d, not 0" % rsp)
    rsp = tmf(s, TMF_TARGET_WARM_RESET)
    check(rsp == 0, "TARGET WARM RESET: response %d, not 0" % rsp)
    st, _, _ = s.scsi_retry_ua(bytes(6))
    check(st == 0, "TEST UNIT READY after the resets: status 0x%02x" % st)
    stage(d, "reset", info)
    s.logout()
    print("metrics_tmf: 3 aborts, 2 resets sent, session %d logged out" % s.tsih)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (TestFailure, OSError, hostile.Closed) as e:
        print("metrics_tmf: FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
