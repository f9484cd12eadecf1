#!/usr/bin/env python3
"""VPD 80h and 83h of a LUN with vpd-style=tcmu, byte for byte, for target_identity.sh.

The expected pages are built here from the rule docs/migrate.md "Disk identity" states for a
disk tcmu-runner served (read from tcmu-runner's api.c, tcmu_emulate_evpd_inquiry), independently
of linerate's C code. No published dump of a tcmu-runner disk's VPD 83h was found to check the
rule against; the NAA is checked by lio_vpd.py against a published LIO disk (tcmu-runner derives
it from the serial the same way).

usage:
  tcmu_vpd.py PORT TARGET LUN VENDOR WWN NAA CONFIG
      read both pages with hostile.py's raw initiator and compare them with the rule, byte for
      byte (NAA: the designator's 32 hex digits; CONFIG: the handler's config string)
Exit 0, or 1 with the first difference. Python 3 standard library only."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator)
from lio_vpd import desc, fail, name_string, page80  # noqa: E402  (the same rule for 80h)


def page83(vendor, wwn, naa_hex, config, target, tpgt):
    """tcmu-runner's order: T10 vendor ID (the vendor padded to 8, the bare serial, a NUL, all
    counted); NAA; vendor specific (code set ASCII, association LU, type 0) with the config
    string and its NUL; with ALUA groups (linerate always has them) the relative target port,
    the target port group (no logical unit group, unlike LIO), the target port's SCSI name and
    the target's, iSCSI protocol and PIV set."""
    iscsi = 0x5 << 4
    body = desc(0x02, 0x01, vendor.ljust(8).encode() + wwn.encode() + b"\0")
    body += desc(0x01, 0x03, bytes.fromhex(naa_hex))
    body += desc(0x02, 0x00, config.encode() + b"\0")
    body += desc(iscsi | 1, 0x94, struct.pack(">HH", 0, tpgt))
    body += desc(iscsi | 1, 0x95, struct.pack(">HH", 0, tpgt))
    body += desc(iscsi | 3, 0x98, name_string("%s,t,0x%04x" % (target, tpgt)))
    body += desc(iscsi | 3, 0xA8, name_string(target))
    return bytes([0, 0x83]) + struct.pack(">H", len(body)) + body


def vpd(session, lun, code):
    """One VPD page of LUN as the target sends it (allocation length 1024)."""
    cdb = bytes([0x12, 1, code]) + struct.pack(">H", 1024) + b"\0"
    st, sense, data = session.scsi_retry_ua(cdb, read_len=1024, lun=lun)
    if st != 0:
        fail("INQUIRY VPD %02xh: status 0x%02x sense %s" % (code, st, hostile.sense_kaa(sense)))
    return data


def main():
    a = sys.argv[1:]
    if len(a) != 7:
        fail(__doc__)
    port, target, lun, vendor, wwn, naa_hex, config = int(a[0]), a[1], int(a[2]), *a[3:]
    hostile.TARGET = target
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:tcmu-vpd").login()
    pages = [(0x80, vpd(s, lun, 0x80), page80(wwn)),
             (0x83, vpd(s, lun, 0x83), page83(vendor, wwn, naa_hex, config, target, 1))]
    s.logout()
    for code, got, want in pages:
        if got != want:
            fail("VPD %02xh of %s LUN %d:\n got  %s\n want %s" % (code, target, lun, got.hex(),
                                                                 want.hex()))


if __name__ == "__main__":
    main()
