#!/usr/bin/env python3
"""What a host reads of a LUN's identity, through hostile.py's raw initiator, for
target_identity.sh.

usage: target_identity.py PORT TARGET-IQN LUN
Prints one line: the standard INQUIRY's vendor, product and revision fields as they are on the
wire (with their padding), the unit serial number (VPD 80h), the LU's NAA designator and its T10
vendor ID designator (VPD 83h) and the medium rotation rate (VPD B1h):
  vendor='LINERATE' product='RAMDISK         ' revision='0001' serial='...' naa=3... t10='...'
  rotation=1
Exit 0 with the line, 1 with the reason if a page is malformed or a command fails.
Python 3 standard library only."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def inquiry(s, lun, evpd, page, alloc=1024):
    cdb = bytes([0x12, evpd, page]) + struct.pack(">H", alloc) + b"\0"
    st, sense, data = s.scsi_retry_ua(cdb, read_len=alloc, lun=lun)
    if st != 0:
        fail("INQUIRY evpd %d page 0x%02x: status 0x%02x sense %s" %
             (evpd, page, st, hostile.sense_kaa(sense)))
    if evpd:
        if len(data) < 4 or data[1] != page:
            fail("VPD page 0x%02x: header %r" % (page, data[:4]))
        n = struct.unpack(">H", data[2:4])[0]
        if len(data) < 4 + n:
            fail("VPD page 0x%02x: %d bytes, page length says %d" % (page, len(data), 4 + n))
        return data[4:4 + n]
    return data


def lu_designators(page):
    """The designation descriptors of association 00b (the LU), by type (SPC-4 §7.8.6.1)."""
    out = {}
    p = 0
    while p + 4 <= len(page):
        code_set, b1, n = page[p] & 0x0F, page[p + 1], page[p + 3]
        if (b1 >> 4) & 3 == 0:
            out[b1 & 0x0F] = (code_set, bytes(page[p + 4:p + 4 + n]))
        p += 4 + n
    if p != len(page):
        fail("VPD 83h: descriptors overrun the page")
    return out


def main():
    if len(sys.argv) != 4:
        fail(__doc__)
    port, hostile.TARGET, lun = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:identity").login()
    std = inquiry(s, lun, 0, 0, 96)
    if len(std) < 36:
        fail("standard INQUIRY: %d bytes" % len(std))
    serial = inquiry(s, lun, 1, 0x80)
    ids = lu_designators(inquiry(s, lun, 1, 0x83))
    if 3 not in ids or ids[3][0] != 1:
        fail("VPD 83h: no binary NAA designator for the LU: %r" % ids)
    if 1 not in ids or ids[1][0] != 2:
        fail("VPD 83h: no ASCII T10 vendor ID designator for the LU: %r" % ids)
    b1 = inquiry(s, lun, 1, 0xB1)
    s.logout()
    txt = lambda b: b.decode("ascii")  # noqa: E731
    print("vendor='%s' product='%s' revision='%s' serial='%s' naa=%s t10='%s' rotation=%d" %
          (txt(std[8:16]), txt(std[16:32]), txt(std[32:36]), txt(serial), ids[3][1].hex(),
           txt(ids[1][1]), struct.unpack(">H", b1[0:2])[0]))


if __name__ == "__main__":
    main()
