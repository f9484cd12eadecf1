#!/usr/bin/env python3
"""A gateway the Ceph cluster blocklists, for target_rbd.sh, through hostile.py's raw initiator.

usage: target_rbd_fence.py PORT TARGET-IQN CLIENT-ADDRESS
LUN 0 is an rbd: LUN; CLIENT-ADDRESS is the gateway's Ceph client address from its log.
  1. WRITE(10) and READ(10) of LBA 8: GOOD.
  2. `ceph osd blocklist add CLIENT-ADDRESS` (the fence an operator or a failover tool sets).
  3. READ(10) and WRITE(10), three times each: CHECK CONDITION, NOT READY / LOGICAL UNIT NOT
     READY, MANUAL INTERVENTION REQUIRED (02h/04h/03h), the first within the store's timeout,
     the later ones at once (the store gave the LUN up). The session stays up (NOP-Out).
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD, CHECK_CONDITION = 0x00, 0x02
MANUAL_INTERVENTION = (0x02, 0x04, 0x03)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    port, hostile.TARGET, addr = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:rbd-fence").login()
    st, sense, _ = s.scsi_retry_ua(b"\x00" * 6)
    if st != GOOD:
        fail("TEST UNIT READY status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    block = b"rbd-fence".ljust(512, b"\x5a")
    for name, cdb, kw in (("WRITE(10)", hostile.cdb_rw10(0x2A, 8, 1), {"write_data": block}),
                          ("READ(10)", hostile.cdb_rw10(0x28, 8, 1), {"read_len": 512})):
        st, sense, _ = s.scsi(cdb, **kw)
        if st != GOOD:
            fail("%s before the fence: status 0x%02x sense %s" % (name, st, hostile.sense_kaa(sense)))
    for _ in range(5):
        r = subprocess.run(["ceph", "osd", "blocklist", "add", addr], capture_output=True,
                           text=True, timeout=60)
        # a 16.2 CLI may ask before it has the monmap and be refused (scripts/ceph-mini's cephc)
        if r.returncode == 0 or "problem getting command descriptions" not in r.stderr:
            break
        time.sleep(0.5)
    if r.returncode != 0:
        fail("ceph osd blocklist add %s: %s" % (addr, r.stderr.strip()))
    print(r.stderr.strip())
    for i in range(3):
        for name, cdb, kw in (("READ(10)", hostile.cdb_rw10(0x28, 8, 1), {"read_len": 512}),
                              ("WRITE(10)", hostile.cdb_rw10(0x2A, 9, 1), {"write_data": block})):
            t0 = time.monotonic()
            st, sense, _ = s.scsi(cdb, timeout=60, **kw)
            took = time.monotonic() - t0
            kaa = hostile.sense_kaa(sense)
            print("%s %d after the fence: status 0x%02x sense %s after %.2f s" %
                  (name, i + 1, st, kaa, took))
            if st != CHECK_CONDITION or kaa != MANUAL_INTERVENTION:
                fail("%s after the fence: status 0x%02x sense %s, expected CHECK CONDITION "
                     "02h/04h/03h" % (name, st, kaa))
            if i > 0 and took > 1.0:
                fail("%s on a LUN given up took %.2f s: it should fail at once" % (name, took))
        s.nop()
    s.logout()


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
