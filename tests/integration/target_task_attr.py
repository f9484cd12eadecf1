#!/usr/bin/env python3
"""Task attributes as the target documents them: every command runs as a SIMPLE task, whatever
attribute its SCSI Command PDU carries (Extended INQUIRY Data VPD page: SIMPSUP 1, HEADSUP and
ORDSUP 0; SPC-4 §7.8.7). CmdSN order decides when a command is delivered, not when it runs.

usage: target_task_attr.py PATH/TO/linerate-target

One session through hostile.py's raw initiator, InitialR2T=Yes and ImmediateData=No, so a WRITE
runs only once its Data-Out is in:
  1. VPD 86h claims SIMPLE only;
  2. an ORDERED WRITE of blocks 0-63 gets its R2T and is held there (no Data-Out yet); READs of
     the same blocks sent after it, with the ORDERED, HEAD OF QUEUE and SIMPLE attributes, are
     all answered GOOD with the old data while the WRITE waits (an ORDERED task would hold them
     back until it completed; a SIMPLE one does not);
  3. the WRITE's Data-Out goes, it is answered GOOD, and a READ after its status sees the new
     data: what an initiator that needs the order gets by waiting for the status.
No timing: every step waits for the answer it checks. Exit 0 when every check holds, 1 with the
reason. Python 3 standard library only."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import (OP_DATA_IN, OP_DATA_OUT, OP_R2T, OP_SCSI, OP_SCSI_RSP,  # noqa: E402
                     TestFailure, bhs, check, cdb_rw10)

ATTR_SIMPLE, ATTR_ORDERED, ATTR_HEAD_OF_QUEUE = 1, 2, 3
BLOCKS = 64
OLD, NEW = b"\x11" * (BLOCKS * 512), b"\x22" * (BLOCKS * 512)


def command(s, cdb, attr, read_len=0, write_len=0):
    """Send a SCSI Command PDU with task attribute attr; returns its ITT."""
    itt = s.next_itt()
    flags = 0x80 | (0x40 if read_len else 0) | (0x20 if write_len else 0) | attr
    s.c.send_pdu(bhs(OP_SCSI, flags, hostile.lun_field(0), itt, read_len or write_len, s.cmdsn,
                     s.expstatsn, cdb.ljust(16, b"\0")))
    s.cmdsn += 1
    return itt


def read_blocks(s, attr):
    """A READ(10) of blocks 0-63 with attribute attr, answered before anything else comes."""
    itt = command(s, cdb_rw10(0x28, 0, BLOCKS), attr, read_len=len(OLD))
    data = bytearray()
    while True:
        h, d = s.recv(5)
        op = h[0] & 0x3F
        check(struct.unpack(">I", h[16:20])[0] == itt,
              "READ (attribute %d): op 0x%02x for another ITT first" % (attr, op))
        if op == OP_DATA_IN:
            data += d
            if h[1] & 0x01:
                check(h[3] == 0, "READ (attribute %d): status 0x%02x" % (attr, h[3]))
                return bytes(data)
        else:
            check(op == OP_SCSI_RSP and h[3] == 0,
                  "READ (attribute %d): op 0x%02x status 0x%02x" % (attr, op, h[3]))
            return bytes(data)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = hostile.Daemon(os.path.abspath(sys.argv[1]), threads=2, lun="ram:16M",
                       prefix="task-attr-")
    try:
        s = hostile.Session(d.port, want={"InitialR2T": "Yes", "ImmediateData": "No"}).login()
        st, _, _ = s.scsi_retry_ua(bytes(6))
        check(st == 0, "TEST UNIT READY: status 0x%02x" % st)
        st, _, vpd = s.scsi(bytes([0x12, 1, 0x86, 0, 64, 0]), read_len=64)
        check(st == 0 and len(vpd) >= 6 and vpd[5] & 0x07 == 0x01,
              "VPD 86h: status 0x%02x, byte 5 %s: SIMPSUP alone expected" %
              (st, vpd[5:6].hex()))
        st, _, _ = s.scsi(cdb_rw10(0x2A, 0, BLOCKS), write_data=OLD)
        check(st == 0, "WRITE of the old data: status 0x%02x" % st)

        witt = command(s, cdb_rw10(0x2A, 0, BLOCKS), ATTR_ORDERED, write_len=len(NEW))
        h, _ = s.recv(5)
        check(h[0] & 0x3F == OP_R2T and struct.unpack(">I", h[16:20])[0] == witt,
              "ORDERED WRITE: op 0x%02x instead of its R2T" % h[0])
        ttt = struct.unpack(">I", h[20:24])[0]
        for attr in (ATTR_ORDERED, ATTR_HEAD_OF_QUEUE, ATTR_SIMPLE):
            check(read_blocks(s, attr) == OLD,
                  "READ (attribute %d) behind the waiting WRITE: not the old data" % attr)

        pos = 0
        while pos < len(NEW):
            n = min(s.target_mrdsl, len(NEW) - pos)
            last = pos + n == len(NEW)
            s.c.send_pdu(bhs(OP_DATA_OUT, 0x80 if last else 0, hostile.lun_field(0), witt, ttt,
                             0, s.expstatsn, struct.pack(">III", 0, pos // s.target_mrdsl, pos),
                             data=NEW[pos:pos + n]), NEW[pos:pos + n])
            pos += n
        h, _ = s.recv(5)
        check(h[0] & 0x3F == OP_SCSI_RSP and struct.unpack(">I", h[16:20])[0] == witt and
              h[3] == 0, "ORDERED WRITE: op 0x%02x status 0x%02x" % (h[0], h[3]))
        check(read_blocks(s, ATTR_SIMPLE) == NEW, "READ after the WRITE's status: old data")
        s.logout()
    except (TestFailure, hostile.Closed, OSError) as e:
        print("FAIL: %s\n%s" % (e, d.log_tail()), flush=True)
        return 1
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
