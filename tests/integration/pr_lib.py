"""Persistent reservation helpers over hostile.py's raw initiator, shared by target_aptpl.py
and target_rbd_pr.py. Python 3 standard library only."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD, CHECK_CONDITION, RESERVATION_CONFLICT = 0x00, 0x02, 0x18
WRITE_EXCLUSIVE, EXCLUSIVE_ACCESS = 1, 3
# a cluster round trip (rbd LUNs) may take a while under load
TIMEOUT = 30


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def session(port, name, isid=None):
    s = hostile.Session(port, name=name, isid=isid).login()
    # a new I_T nexus starts with a power-on unit attention: take it
    st, sense, _ = s.scsi_retry_ua(b"\x00" * 6)
    if st != GOOD:
        fail("%s: TEST UNIT READY status 0x%02x sense %s" % (name, st, hostile.sense_kaa(sense)))
    return s


def prout(s, sa, key=0, sa_key=0, type_=0, aptpl=False):
    """PERSISTENT RESERVE OUT service action SA: (status, sense)."""
    param = struct.pack(">QQ4xB3x", key, sa_key, 0x01 if aptpl else 0)
    cdb = struct.pack(">BBBxxIB", 0x5F, sa, type_, len(param), 0)
    st, sense, _ = s.scsi(cdb, write_data=param, timeout=TIMEOUT)
    return st, sense


def prin(s, sa, alloc=1024):
    """PERSISTENT RESERVE IN service action SA: its data, or FAIL."""
    cdb = struct.pack(">BBxxxxxHB", 0x5E, sa, alloc, 0)
    st, sense, data = s.scsi(cdb, read_len=alloc, timeout=TIMEOUT)
    if st != GOOD:
        fail("PERSISTENT RESERVE IN sa %d: status 0x%02x sense %s" %
             (sa, st, hostile.sense_kaa(sense)))
    return data


def read_keys(s):
    """(PRGENERATION, the registered keys sorted)."""
    d = prin(s, 0x00)
    gen, n = struct.unpack(">II", d[0:8])
    return gen, sorted(struct.unpack(">Q", d[8 + 8 * i:16 + 8 * i])[0] for i in range(n // 8))


def read_full_status(s):
    """[(key, relative target port identifier)] of every registrant, in the reply's order."""
    d = prin(s, 0x03, 4096)
    end, off, regs = 8 + struct.unpack(">I", d[4:8])[0], 8, []
    while off < end:
        key, rtp, tid_len = struct.unpack(">Q10xHI", d[off:off + 24])
        regs.append((key, rtp))
        off += 24 + tid_len
    return regs


def read_reservation(s):
    """(key, type) or None."""
    d = prin(s, 0x01)
    if struct.unpack(">I", d[4:8])[0] == 0:
        return None
    return struct.unpack(">Q", d[8:16])[0], d[21] & 0x0F


def io(s, op, lba=100):
    """READ(10) (0x28) or WRITE(10) (0x2A) of one block: (status, sense)."""
    data = bytes([0x5A]) * 512 if op == 0x2A else None
    st, sense, _ = s.scsi(hostile.cdb_rw10(op, lba, 1), read_len=0 if data else 512,
                          write_data=data)
    return st, sense
