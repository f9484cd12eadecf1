#!/usr/bin/env python3
"""An OSD that stops answering, for target_rbd_stall.sh, through hostile.py's raw initiator.

usage: target_rbd_stall.py PORT TARGET-IQN OSD-PID TIMEOUT-SECONDS [RAM-LUN]
The LUN (LUN 0) is an rbd: LUN opened with timeout=TIMEOUT-SECONDS on a one-OSD cluster.
  1. WRITE(10) a stamped block at LBA 8 and read it back: GOOD.
  2. SIGSTOP the OSD. READ(10) of LBA 8 ends, within TIMEOUT + 10 s and not before
     TIMEOUT - 1 s, in CHECK CONDITION with ABORTED COMMAND / TIMEOUT ON LOGICAL UNIT
     (0Bh/3Eh/02h): a retryable answer, not a hang. With RAM-LUN (a ram: LUN of the same
     target on a daemon with one reactor), while that READ waits for the cluster, another
     session WRITEs and READs the RAM LUN over and over for 2 s: each command GOOD within
     1 s (generous for a loaded machine: it shows that no reactor waits for the cluster, it
     is not a latency figure), the data read back, and the rbd READ still pending afterwards.
     A WRITE(10) then is either that too or GOOD (if librbd's write-around cache acknowledged
     it early); after a GOOD one the SYNCHRONIZE CACHE must not be GOOD (the data is not
     stable): it times out the same way. The session stays usable (NOP-Out answered).
  3. SIGCONT the OSD. The same READ(10) is GOOD again with the stamped data (the initiator's
     retry succeeds).
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import signal
import struct
import sys
import threading
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


def ram_while_pending(r, lun, pending):
    """WRITE and READ the RAM LUN through session r for 2 s while `pending` (a thread waiting
    for an rbd command) runs: each command GOOD within 1 s, the data back."""
    t_end = time.monotonic() + 2.0
    n, worst = 0, 0.0
    while n == 0 or time.monotonic() < t_end:
        lba = 64 + n % 1024
        block = (b"ram %d " % n).ljust(512, bytes([n & 0xFF]))
        for name, cdb, kw in (("WRITE(10)", hostile.cdb_rw10(0x2A, lba, 1),
                               {"write_data": block}),
                              ("READ(10)", hostile.cdb_rw10(0x28, lba, 1), {"read_len": 512})):
            t0 = time.monotonic()
            st, sense, data = r.scsi(cdb, lun=lun, timeout=10, **kw)
            took = time.monotonic() - t0
            worst = max(worst, took)
            if st != GOOD:
                fail("%s of the RAM LUN with the OSD stopped: status 0x%02x sense %s" %
                     (name, st, hostile.sense_kaa(sense)))
            if took > 1.0:
                fail("%s of the RAM LUN took %.2f s while an rbd command waited for the "
                     "stopped OSD: the reactor was blocked" % (name, took))
            if kw.get("read_len") and data != block:
                fail("READ(10) of the RAM LUN with the OSD stopped: other data")
        n += 1
    if not pending.is_alive():
        fail("the rbd READ ended before the RAM LUN's commands did: they did not overlap")
    print("RAM LUN on the same reactor with the OSD stopped: %d WRITE+READ pairs GOOD, the "
          "slowest command %.3f s, the rbd READ still waiting" % (n, worst))


def main():
    port, hostile.TARGET = int(sys.argv[1]), sys.argv[2]
    osd, tmo = int(sys.argv[3]), float(sys.argv[4])
    ram = int(sys.argv[5]) if len(sys.argv) > 5 else None
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

    r = None  # the RAM LUN's session
    if ram is not None:
        r = hostile.Session(port, name="iqn.2026-11.org.linerate:rbd-stall-ram").login()
        st, sense, _ = r.scsi_retry_ua(b"\x00" * 6, lun=ram)
        if st != GOOD:
            fail("TEST UNIT READY of the RAM LUN: status 0x%02x sense %s" %
                 (st, hostile.sense_kaa(sense)))

    hostile.stop_process(osd)
    try:
        t0 = time.monotonic()
        got = {}

        def rbd_read():
            try:
                got["r"] = s.scsi(hostile.cdb_rw10(0x28, 8, 1), read_len=512, timeout=tmo + 10)
            except Exception as e:  # reported by the main thread
                got["e"] = e
            got["took"] = time.monotonic() - t0

        th = threading.Thread(target=rbd_read, daemon=True)
        th.start()
        if r is not None:
            time.sleep(0.5)  # the READ is in librbd, waiting for the stopped OSD
            ram_while_pending(r, ram, th)
            r.logout()
        th.join(tmo + 15)
        if th.is_alive() or "e" in got:
            fail("READ(10) with the OSD stopped: %s" % got.get("e", "no answer"))
        st, sense, _ = got["r"]
        expect_timeout("READ(10)", st, sense, got["took"], tmo)
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
