#!/usr/bin/env python3
"""The initiator side of target_ctl.sh's unit attention check: one session, kept open through
hostile.py's raw initiator while the shell adds a LUN and resizes one with linerate-ctl, sees the
unit attentions a real initiator relies on (SPC-4 5.14, RFC 7143 does not carry them otherwise).

usage: ctl_ua.py PORT TARGET DIR LUN1_BYTES_BEFORE LUN1_BYTES_AFTER

  1. Logs in; TEST UNIT READY on LUNs 0 and 1 until GOOD (the power-on unit attention goes).
     Writes DIR/add.ready and waits for DIR/add.go (the shell adds a LUN meanwhile).
  2. TEST UNIT READY on LUN 0: CHECK CONDITION, UNIT ATTENTION 3Fh/0Eh REPORTED LUNS DATA HAS
     CHANGED; the next one is GOOD. LUN 1 is cleared the same way and READ CAPACITY(16) says
     LUN1_BYTES_BEFORE. Writes DIR/resize.ready, waits for DIR/resize.go (the shell resizes
     LUN 1).
  3. TEST UNIT READY on LUN 1: CHECK CONDITION, UNIT ATTENTION 2Ah/09h CAPACITY DATA HAS
     CHANGED; READ CAPACITY(16) then says LUN1_BYTES_AFTER.
  4. Logs out.
Exit 0 when every step went as described, 1 with the reason."""

import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import TestFailure, check, sense_kaa  # noqa: E402

TUR = bytes(6)
RC16 = struct.pack(">BBQIBB", 0x9E, 0x10, 0, 32, 0, 0)


def stage(d, name):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        json.dump({}, f)
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name + ".ready"))
    go = os.path.join(d, name + ".go")
    deadline = time.monotonic() + 120
    while not os.path.exists(go):
        check(time.monotonic() < deadline, "%s: no go from the shell within 120 s" % name)
        time.sleep(0.05)


def good(s, lun):
    st, sense, _ = s.scsi_retry_ua(TUR, lun=lun)
    check(st == 0, "TEST UNIT READY on LUN %d: status 0x%02x sense %s" %
          (lun, st, sense_kaa(sense)))


def expect_ua(s, lun, asc, ascq, what):
    st, sense, _ = s.scsi(TUR, lun=lun)
    check(st == 2, "LUN %d after %s: status 0x%02x, not CHECK CONDITION" % (lun, what, st))
    got = sense_kaa(sense)
    check(got == (6, asc, ascq), "LUN %d after %s: sense %s, want (6, 0x%02x, 0x%02x)" %
          (lun, what, got and tuple(hex(x) for x in got), asc, ascq))
    st, sense, _ = s.scsi(TUR, lun=lun)
    check(st == 0, "LUN %d: the unit attention of %s came back (status 0x%02x, sense %s)" %
          (lun, what, st, sense_kaa(sense)))


def capacity(s, lun):
    st, sense, data = s.scsi(RC16, read_len=32, lun=lun)
    check(st == 0 and len(data) >= 12, "READ CAPACITY(16) on LUN %d: status 0x%02x sense %s" %
          (lun, st, sense_kaa(sense)))
    last, bl = struct.unpack(">QI", data[:12])
    return (last + 1) * bl


def main():
    port, target, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    before, after = int(sys.argv[4]), int(sys.argv[5])
    hostile.TARGET = target
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:ctl-ua").login()
    good(s, 0)
    good(s, 1)
    stage(d, "add")
    expect_ua(s, 0, 0x3F, 0x0E, "add lun")
    good(s, 1)
    got = capacity(s, 1)
    check(got == before, "LUN 1 before the resize: %d bytes, want %d" % (got, before))
    stage(d, "resize")
    expect_ua(s, 1, 0x2A, 0x09, "resize lun")
    got = capacity(s, 1)
    check(got == after, "LUN 1 after the resize: %d bytes, want %d" % (got, after))
    s.logout()
    print("unit attentions seen: REPORTED LUNS DATA HAS CHANGED, CAPACITY DATA HAS CHANGED")


if __name__ == "__main__":
    try:
        main()
    except (TestFailure, hostile.Closed, OSError) as e:
        print("FAIL: %s" % e)
        sys.exit(1)
