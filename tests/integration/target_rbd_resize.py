#!/usr/bin/env python3
"""An rbd: LUN whose image is resized behind the gateway's back, for target_rbd.sh, through
hostile.py's raw initiator.

usage: target_rbd_resize.py PORT TARGET-IQN POOL/IMAGE
LUN 0 is an rbd: LUN of POOL/IMAGE (64 MiB when this starts).
  1. Two sessions (two I_T nexuses) log in; TEST UNIT READY on each until GOOD (power-on UA
     taken), then once more: GOOD, nothing pending.
  2. `rbd resize --size 96M POOL/IMAGE`: the cluster's tool, not the gateway, changes the image.
  3. Each session: TEST UNIT READY until it is not GOOD (librbd's update watch tells the gateway
     within a moment; at most 20 s): CHECK CONDITION, UNIT ATTENTION, CAPACITY DATA HAS CHANGED
     (06h/2Ah/09h), then GOOD (reported once); READ CAPACITY(16) says 96 MiB.
  4. The new end is there: WRITE(10) and READ(10) of the last block of the 96 MiB.
  5. `rbd resize --allow-shrink --size 80M`: the UA again on each session, READ CAPACITY(16) says
     80 MiB, and a READ(10) of the block past it is LOGICAL BLOCK ADDRESS OUT OF RANGE.
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD, CHECK_CONDITION = 0x00, 0x02
CAPACITY_CHANGED = (0x06, 0x2A, 0x09)
LBA_OUT_OF_RANGE = (0x05, 0x21, 0x00)
TUR = b"\x00" * 6
RC16 = bytes([0x9E, 0x10]) + b"\x00" * 8 + struct.pack(">I", 32) + b"\x00\x00"


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def rbd(*args):
    r = subprocess.run(["rbd"] + list(args), capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("rbd %s: %s" % (" ".join(args), r.stderr.strip()))


def capacity(s):
    st, sense, data = s.scsi(RC16, read_len=32)
    if st != GOOD:
        fail("READ CAPACITY(16): status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    last, bsz = struct.unpack(">QI", data[:12])
    return (last + 1) * bsz


def await_capacity_ua(s, what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        st, sense, _ = s.scsi(TUR)
        if st != GOOD:
            kaa = hostile.sense_kaa(sense)
            if st != CHECK_CONDITION or kaa != CAPACITY_CHANGED:
                fail("%s: TEST UNIT READY status 0x%02x sense %s, expected CAPACITY DATA HAS "
                     "CHANGED" % (what, st, kaa))
            print("%s: CAPACITY DATA HAS CHANGED after %.2f s" % (what, time.monotonic() - t0))
            st, sense, _ = s.scsi(TUR)
            if st != GOOD:
                fail("%s: a second unit attention: sense %s" % (what, hostile.sense_kaa(sense)))
            return
        time.sleep(0.05)
    fail("%s: no CAPACITY DATA HAS CHANGED within 20 s of the resize" % what)


def main():
    port, hostile.TARGET, image = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    sessions = [hostile.Session(port, name="iqn.2026-11.org.linerate:rbd-resize-%d" % i).login()
                for i in (1, 2)]
    for i, s in enumerate(sessions):
        st, sense, _ = s.scsi_retry_ua(TUR)
        if st != GOOD:
            fail("session %d: TEST UNIT READY status 0x%02x sense %s" %
                 (i + 1, st, hostile.sense_kaa(sense)))
        if capacity(s) != 64 << 20:
            fail("session %d: the LUN does not start at 64 MiB" % (i + 1))

    rbd("resize", "--size", "96M", image)
    for i, s in enumerate(sessions):
        await_capacity_ua(s, "session %d, grown to 96 MiB" % (i + 1))
        got = capacity(s)
        if got != 96 << 20:
            fail("session %d: READ CAPACITY(16) says %d bytes after the grow" % (i + 1, got))
    s = sessions[0]
    last = (96 << 20) // 512 - 1
    block = b"rbd-resize".ljust(512, b"\x3c")
    st, sense, _ = s.scsi(hostile.cdb_rw10(0x2A, last, 1), write_data=block)
    if st != GOOD:
        fail("WRITE(10) of the new last block: status 0x%02x sense %s" %
             (st, hostile.sense_kaa(sense)))
    st, sense, data = s.scsi(hostile.cdb_rw10(0x28, last, 1), read_len=512)
    if st != GOOD or data != block:
        fail("READ(10) of the new last block: status 0x%02x sense %s" %
             (st, hostile.sense_kaa(sense)))

    rbd("resize", "--allow-shrink", "--size", "80M", image)
    for i, s in enumerate(sessions):
        await_capacity_ua(s, "session %d, shrunk to 80 MiB" % (i + 1))
        got = capacity(s)
        if got != 80 << 20:
            fail("session %d: READ CAPACITY(16) says %d bytes after the shrink" % (i + 1, got))
    st, sense, _ = sessions[0].scsi(hostile.cdb_rw10(0x28, (80 << 20) // 512, 1), read_len=512)
    if st != CHECK_CONDITION or hostile.sense_kaa(sense) != LBA_OUT_OF_RANGE:
        fail("READ(10) past the shrunk end: status 0x%02x sense %s" %
             (st, hostile.sense_kaa(sense)))
    for s in sessions:
        s.logout()
    print("rbd resize noticed: 64 -> 96 -> 80 MiB, the UA on both nexuses each time")


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
