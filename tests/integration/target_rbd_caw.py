#!/usr/bin/env python3
"""COMPARE AND WRITE on rbd: LUNs, for target_rbd.sh, through hostile.py's raw initiator.

usage: target_rbd_caw.py PORT TARGET-IQN
LUN 0 is a 512-byte-block rbd: LUN, LUN 2 a 4 KiB-block one (LUN 1 is read-only). librbd 16
compares and writes atomically within one 512-byte sector only, and what the gateway emulates
under its own range lock is not atomic against another gateway, so:
  1. LUN 0, one block at LBA 40 (as read): GOOD, and the new data reads back (the cluster's
     rbd_aio_compare_and_write); with the old data as the compare: MISCOMPARE (0Eh/1Dh/00h).
  2. LUN 0, two blocks: ILLEGAL REQUEST / INVALID FIELD IN CDB (05h/24h/00h), data unchanged.
  3. LUN 2, one 4 KiB block: ILLEGAL REQUEST / INVALID FIELD IN CDB.
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD, CHECK_CONDITION = 0x00, 0x02
INVALID_FIELD_IN_CDB = (0x05, 0x24, 0x00)
MISCOMPARE = (0x0E, 0x1D, 0x00)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def cdb_caw(lba, blocks):
    return struct.pack(">BBQ3xBBB", 0x89, 0, lba, blocks, 0, 0)


def read(s, lun, lba, blocks, bsz):
    st, sense, data = s.scsi_retry_ua(hostile.cdb_rw10(0x28, lba, blocks), read_len=blocks * bsz,
                                      lun=lun)
    if st != GOOD:
        fail("READ(10) LUN %d: status 0x%02x sense %s" % (lun, st, hostile.sense_kaa(sense)))
    return data


def expect(what, got, want):
    st, sense, _ = got
    kaa = hostile.sense_kaa(sense)
    print("%s: status 0x%02x sense %s" % (what, st, kaa))
    if want is None and st != GOOD:
        fail("%s: status 0x%02x sense %s, expected GOOD" % (what, st, kaa))
    if want is not None and (st != CHECK_CONDITION or kaa != want):
        fail("%s: status 0x%02x sense %s, expected CHECK CONDITION %02Xh/%02Xh/%02Xh" %
             ((what, st, kaa) + want))


def main():
    port, hostile.TARGET = int(sys.argv[1]), sys.argv[2]
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:rbd-caw").login()
    old = read(s, 0, 40, 1, 512)
    new = b"rbd-caw".ljust(512, b"\x5c")
    expect("COMPARE AND WRITE, 1 block", s.scsi(cdb_caw(40, 1), write_data=old + new), None)
    if read(s, 0, 40, 1, 512) != new:
        fail("COMPARE AND WRITE was GOOD but the block does not read back")
    expect("COMPARE AND WRITE, 1 block, stale compare",
           s.scsi(cdb_caw(40, 1), write_data=old + old), MISCOMPARE)
    two = read(s, 0, 40, 2, 512)
    expect("COMPARE AND WRITE, 2 blocks", s.scsi(cdb_caw(40, 2), write_data=two + two[::-1]),
           INVALID_FIELD_IN_CDB)
    if read(s, 0, 40, 2, 512) != two:
        fail("a refused COMPARE AND WRITE changed the data")
    old4k = read(s, 2, 5, 1, 4096)
    expect("COMPARE AND WRITE, one 4 KiB block",
           s.scsi(cdb_caw(5, 1), write_data=old4k + b"\x77" * 4096, lun=2), INVALID_FIELD_IN_CDB)
    s.logout()


if __name__ == "__main__":
    main()
