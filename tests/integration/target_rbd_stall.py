#!/usr/bin/env python3
"""An OSD that stops answering, for target_rbd.sh, through hostile.py's raw initiator.

usage: target_rbd_stall.py PORT TARGET-IQN OSD-PID TIMEOUT-SECONDS
The LUN (LUN 0) is an rbd: LUN opened with timeout=TIMEOUT-SECONDS on a one-OSD cluster.
  1. WRITE(10) a stamped block at LBA 8 and read it back: GOOD.
  2. SIGSTOP the OSD. READ(10) of LBA 8 ends, within TIMEOUT + 10 s and not before
     TIMEOUT - 1 s, in CHECK CONDITION with ABORTED COMMAND / TIMEOUT ON LOGICAL UNIT
     (0Bh/3Eh/02h): a retryable answer, not a hang. A WRITE(10) then is either that too or
     GOOD (if librbd's write-around cache acknowledged it early); after a GOOD one the
     SYNCHRONIZE CACHE must not be GOOD (the data is not stable): it times out the same way. The session stays usable (NOP-Out answered).
  3. SIGCONT the OSD. The same READ(10) is GOOD again with the stamped data (the initiator's
     retry succeeds).
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD, CHECK_CONDITION = 0x00, 0x02
TIMEOUT_ON_LU = (0x0B, 0x3E, 0x02)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def expect_timeout(name, st, sense, took, tmo):
    kaa = hostile.sense_kaa(sense)
    print("%s with the OSD stopped: status 0x%02x sense %s after %.1f s" % (name, st, kaa, took))
    if st != CHECK_CONDITION or kaa != TIMEOUT_ON_LU:
        fail("%s with the OSD stopped: status 0x%02x sense %s, expected CHECK CONDITION "
             "0Bh/3Eh/02h" % (name, st, kaa))
    if took < tmo - 1:
        fail("%s failed after %.1f s, before the %.0f s timeout" % (name, took, tmo))


def main():
    port, hostile.TARGET = int(sys.argv[1]), sys.argv[2]
    osd, tmo = int(sys.argv[3]), float(sys.argv[4])
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:rbd-stall").login()
    st, sense, _ = s.scsi_retry_ua(b"\x00" * 6)
    if st != GOOD:
        fail("TEST UNIT READY status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    block = (b"rbd-stall " + struct.pack(">Q", int(time.time()))).ljust(512, b"\xa5")
    st, sense, _ = s.scsi(hostile.cdb_rw10(0x2A, 8, 1), write_data=block)
    if st != GOOD:
        fail("WRITE(10): status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    st, sense, data = s.scsi(hostile.cdb_rw10(0x28, 8, 1), read_len=512)
    if st != GOOD or data != block:
        fail("READ(10) before the stall: status 0x%02x, data %s" %
             (st, "equal" if data == block else "differs"))

    os.kill(osd, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        st, sense, _ = s.scsi(hostile.cdb_rw10(0x28, 8, 1), read_len=512, timeout=tmo + 10)
        expect_timeout("READ(10)", st, sense, time.monotonic() - t0, tmo)
        s.nop()
        # librbd may acknowledge a write before the OSD has it (its write-around cache); then
        # the flush that SYNCHRONIZE CACHE asks for must fail, as the data is not stable.
        t0 = time.monotonic()
        st, sense, _ = s.scsi(hostile.cdb_rw10(0x2A, 16, 1), write_data=block, timeout=tmo + 10)
        took = time.monotonic() - t0
        acked = st == GOOD
        if acked:
            print("WRITE(10) with the OSD stopped: GOOD after %.1f s (cached)" % took)
        else:
            expect_timeout("WRITE(10)", st, sense, took, tmo)
        t0 = time.monotonic()
        st, sense, _ = s.scsi(bytes([0x35] + [0] * 9), timeout=tmo + 10)
        took = time.monotonic() - t0
        if acked or st != GOOD:
            expect_timeout("SYNCHRONIZE CACHE(10)", st, sense, took, tmo)
        else:
            print("SYNCHRONIZE CACHE(10) with the OSD stopped: GOOD, nothing was cached")
        s.nop()
    finally:
        os.kill(osd, signal.SIGCONT)

    deadline = time.monotonic() + 60
    while True:  # the OSD catches up; an initiator would retry the same way
        st, sense, data = s.scsi(hostile.cdb_rw10(0x28, 8, 1), read_len=512, timeout=tmo + 10)
        if st == GOOD or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if st != GOOD or data != block:
        fail("READ(10) after SIGCONT: status 0x%02x sense %s, data %s" %
             (st, hostile.sense_kaa(sense), "equal" if data == block else "differs"))
    print("READ(10) after SIGCONT: GOOD, the stamped block")
    s.logout()


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
