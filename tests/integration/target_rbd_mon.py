#!/usr/bin/env python3
"""The Ceph monitor lost and back under an rbd: LUN doing I/O, for target_rbd_mon.sh, through
hostile.py's raw initiator.

usage: target_rbd_mon.py PORT TARGET-IQN CEPH-MINI CEPH-DIR TIMEOUT CLIENT-ADDR CTL CTL-SOCKET
LUN 0 is an rbd: LUN opened with timeout=TIMEOUT on CEPH-DIR's one-mon, one-OSD cluster;
CLIENT-ADDR is the gateway's Ceph client address (from its log); CTL and CTL-SOCKET are
linerate-ctl and the daemon's control socket.

Two sessions write stamped 4 KiB blocks over their own 32 slots and read each back, without
pause, for the whole run. Every command must end within TIMEOUT + 10 s (no hang) in GOOD, or
in CHECK CONDITION with ABORTED COMMAND / TIMEOUT ON LOGICAL UNIT (0Bh/3Eh/02h) or a UNIT
ATTENTION, which an initiator retries: the worker retries the same command then, and every
read must return the block last written there (nothing lost, nothing torn).
  1. The mon SIGSTOPped (silent, its connections open) for TIMEOUT + 2 s, then SIGKILLed and
     kept down for TIMEOUT + 2 s more (`ceph-mini stop-mon`): librbd needs the OSD, not the
     mon, for I/O, so both sessions keep completing writes and reads (GOOD) all along. A LUN
     added meanwhile (linerate-ctl add lun) fails after about TIMEOUT s with "no monitor
     answered within TIMEOUT s", and the daemon keeps serving LUN 0.
  2. The mon started again from the same directory and port (`ceph-mini start-mon`): the
     gateway's client finds it by itself (CLIENT-ADDR in `ceph tell mon.a sessions` within
     60 s), no restart; the LUN added now opens.
  3. The whole cluster silent (mon and OSD SIGSTOPped) for TIMEOUT + 3 s: commands end in the
     retryable TIMEOUT ON LOGICAL UNIT, none hangs; after SIGCONT both sessions complete I/O
     again within 60 s.
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD, CHECK_CONDITION = 0x00, 0x02
TIMEOUT_ON_LU = (0x0B, 0x3E, 0x02)
UNIT_ATTENTION = 0x06
BLOCKS = 8  # 4 KiB
SLOTS = 32


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


class Worker(threading.Thread):
    """One session: write a stamped block to a slot, read it back, next slot; every outcome
    counted under the phase it ended in."""

    def __init__(self, n, port, tmo, phase):
        super().__init__(daemon=True)
        self.n, self.tmo, self.phase = n, tmo, phase
        self.s = hostile.Session(port, name="iqn.2026-12.org.linerate:rbd-mon-%d" % n)
        self.base = 4096 + n * SLOTS * BLOCKS
        self.stop = False
        self.error = None
        self.good = {}  # phase -> GOOD commands
        self.retry = {}  # phase -> retryable answers
        self.longest = 0.0
        self.seq = 0

    def cmd(self, cdb, **kw):
        """The command until it is GOOD, each try bounded; None once told to stop."""
        while True:
            t0 = time.monotonic()
            st, sense, data = self.s.scsi(cdb, timeout=self.tmo + 10, **kw)
            took = time.monotonic() - t0
            self.longest = max(self.longest, took)
            ph = self.phase[0]
            if st == GOOD:
                self.good[ph] = self.good.get(ph, 0) + 1
                return data
            kaa = hostile.sense_kaa(sense)
            if st != CHECK_CONDITION or (kaa != TIMEOUT_ON_LU and
                                         (kaa is None or kaa[0] != UNIT_ATTENTION)):
                raise hostile.TestFailure("session %d, opcode 0x%02x in phase '%s': status "
                                          "0x%02x sense %s after %.1f s, not GOOD or retryable"
                                          % (self.n, cdb[0], ph, st, kaa, took))
            self.retry[ph] = self.retry.get(ph, 0) + 1
            if self.stop:
                return None
            time.sleep(0.2)

    def run(self):
        try:
            self.s.login()
            while not self.stop:
                slot = self.seq % SLOTS
                lba = self.base + slot * BLOCKS
                self.seq += 1
                block = (b"rbd-mon %d %d " % (self.n, self.seq)).ljust(BLOCKS * 512, b"\x5a")
                if self.cmd(hostile.cdb_rw10(0x2A, lba, BLOCKS), write_data=block) is None:
                    break
                data = self.cmd(hostile.cdb_rw10(0x28, lba, BLOCKS), read_len=len(block))
                if data is not None and data != block:
                    raise hostile.TestFailure("session %d: LBA %d reads %r, not the block "
                                              "written (%r)" % (self.n, lba, data[:24],
                                                                block[:24]))
            self.s.logout()
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            self.error = "%s: %s" % (type(e).__name__, e)


def run(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def main():
    port, hostile.TARGET = int(sys.argv[1]), sys.argv[2]
    ceph_mini, cdir, tmo = sys.argv[3], sys.argv[4], float(sys.argv[5])
    client, ctl, sock = sys.argv[6], sys.argv[7], sys.argv[8]
    conf = os.path.join(cdir, "ceph.conf")
    with open(os.path.join(cdir, "run", "osd.0.pid")) as f:
        osd = int(f.read())

    def mon_pid():
        with open(os.path.join(cdir, "run", "mon.a.pid")) as f:
            return int(f.read())

    phase = ["before"]
    workers = [Worker(n, port, tmo, phase) for n in (0, 1)]
    for w in workers:
        w.start()

    def settle(name, seconds):
        """Let the workers run in phase name for that long; fail at once on a bad answer."""
        phase[0] = name
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for w in workers:
                if w.error:
                    fail(w.error)
                if not w.is_alive():
                    fail("session %d stopped" % w.n)
            time.sleep(0.2)

    def progress(name, since):
        """Both sessions completed GOOD commands in phase name."""
        for w in workers:
            g = w.good.get(name, 0) - since.get(w.n, 0)
            if g < 2:
                fail("session %d: %d GOOD commands while %s" % (w.n, g, name))

    def counts():
        return {w.n: w.good.get(phase[0], 0) for w in workers}

    settle("before", 2)
    progress("before", {})

    pid = mon_pid()
    hostile.stop_process(pid)
    try:
        settle("mon stopped", tmo + 2)
    finally:
        os.kill(pid, signal.SIGCONT)
    progress("mon stopped", {})
    r = run([ceph_mini, "stop-mon", cdir])
    if r.returncode != 0:
        fail("ceph-mini stop-mon: " + r.stderr.strip())
    phase[0] = "mon down"
    t0 = time.monotonic()
    r = run([ctl, "--socket", sock, "add", "lun", hostile.TARGET,
             "rbd:rbd/mon-added,size=8M,timeout=%d" % tmo], timeout=tmo + 60)
    took = time.monotonic() - t0
    print("linerate-ctl add lun with the mon down: exit %d after %.1f s: %s" %
          (r.returncode, took, (r.stdout + r.stderr).strip()))
    if r.returncode == 0 or "no monitor answered within %d s" % tmo not in r.stderr + r.stdout:
        fail("a LUN added with the mon down: exit %d, %s" % (r.returncode, r.stderr.strip()))
    if took > tmo + 15:
        fail("adding a LUN with the mon down took %.1f s, past timeout=%d" % (took, tmo))
    settle("mon down", max(0.0, tmo + 2 - took))
    progress("mon down", {})

    r = run([ceph_mini, "start-mon", cdir])
    if r.returncode != 0:
        fail("ceph-mini start-mon: " + r.stderr.strip())
    phase[0] = "mon back"
    t0 = time.monotonic()
    nonce = client.rsplit("/", 1)[-1]
    while True:
        r = run(["ceph", "-c", conf, "--connect-timeout", "10", "tell", "mon.a", "sessions"])
        # JSON: each session's address with its nonce, the number after the "/" of CLIENT-ADDR
        if r.returncode == 0 and re.search(r'"nonce": %s\b' % nonce, r.stdout):
            break
        if time.monotonic() - t0 > 60:
            fail("the gateway's Ceph client %s is not among the mon's sessions 60 s after the "
                 "mon came back" % client)
        settle("mon back", 1)
    print("the gateway's Ceph client is back in the mon's sessions %.1f s after its restart" %
          (time.monotonic() - t0))
    r = run([ctl, "--socket", sock, "add", "lun", hostile.TARGET,
             "rbd:rbd/mon-added,size=8M,timeout=%d" % tmo], timeout=tmo + 60)
    if r.returncode != 0:
        fail("linerate-ctl add lun with the mon back: " + (r.stdout + r.stderr).strip())
    settle("mon back", 2)
    progress("mon back", {})

    mon = mon_pid()
    hostile.stop_process(mon)
    hostile.stop_process(osd)
    try:
        settle("cluster stopped", tmo + 3)
    finally:
        os.kill(osd, signal.SIGCONT)
        os.kill(mon, signal.SIGCONT)
    for w in workers:
        if not w.retry.get("cluster stopped"):
            fail("session %d: no TIMEOUT ON LOGICAL UNIT while the cluster was stopped" % w.n)
    phase[0] = "cluster back"
    t0 = time.monotonic()
    while True:
        settle("cluster back", 0.5)
        if all(w.good.get("cluster back", 0) >= 2 for w in workers):
            break
        if time.monotonic() - t0 > 60:
            fail("no GOOD I/O within 60 s of SIGCONT: %s" % {w.n: w.good for w in workers})
    print("I/O GOOD again %.1f s after SIGCONT" % (time.monotonic() - t0))
    settle("cluster back", 2)

    for w in workers:
        w.stop = True
    for w in workers:
        w.join(tmo + 30)
        if w.is_alive():
            fail("session %d did not finish" % w.n)
        if w.error:
            fail(w.error)
    for w in workers:
        print("session %d: GOOD %s; retryable %s; longest command %.1f s" %
              (w.n, w.good, w.retry, w.longest))
        if w.longest > tmo + 10:
            fail("session %d: a command took %.1f s" % (w.n, w.longest))


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
