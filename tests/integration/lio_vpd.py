#!/usr/bin/env python3
"""VPD 80h and 83h of a LUN imported from LIO (vpd-style=lio), byte for byte, for lio_import.sh.

The expected pages are built here from the rule docs/migrate.md "Disk identity" states (read
from the kernel's drivers/target/target_core_spc.c, spc_emulate_evpd_80 and _83), independently
of linerate's C code; the rule is first checked against the udev properties a host published for
a LIO disk (sg3_utils' 55-scsi-sg3_id.rules, which export each designator of VPD 83h).

usage:
  lio_vpd.py raw PORT TARGET LUN WWN PRODUCT GROUP
      read both pages with hostile.py's raw initiator and compare them with the rule, byte for
      byte (GROUP: the target port group the designator carries)
  lio_vpd.py inq FILE80 FILE83 TARGET WWN PRODUCT
      compare what libiscsi's iscsi-inq printed for the two pages with the rule
Exit 0, or 1 with the first difference. Python 3 standard library only."""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def naa(wwn):
    """NAA 6h, company id 001405h, the serial's first 25 hex digits (lio_naa.py)."""
    digits = [c.lower() for c in wwn if c in "0123456789abcdefABCDEF"][:25]
    return bytes.fromhex(("6001405" + "".join(digits)).ljust(32, "0"))


def desc(proto_code, piv_assoc_type, body):
    return bytes([proto_code, piv_assoc_type, 0, len(body)]) + body


def name_string(s):
    """A SCSI name string: UTF-8, NUL-terminated, NUL-padded to a multiple of 4."""
    b = s.encode() + b"\0"
    return b + b"\0" * (-len(b) % 4)


def page80(wwn):
    """The unit serial and a NUL, the NUL counted in the page length."""
    body = wwn.encode() + b"\0"
    return bytes([0, 0x80]) + struct.pack(">H", len(body)) + body


def page83(wwn, product, target, tpgt, group):
    """In LIO's order: NAA; T10 vendor ID "LIO-ORG " + PRODUCT:SERIAL + NUL; relative target
    port; target port group; logical unit group 0; the target port's name; the target's."""
    iscsi = 0x5 << 4
    body = desc(0x01, 0x03, naa(wwn))
    body += desc(0x02, 0x01, b"LIO-ORG " + ("%s:%s" % (product, wwn)).encode() + b"\0")
    body += desc(iscsi | 1, 0x94, struct.pack(">HH", 0, tpgt))
    body += desc(iscsi | 1, 0x95, struct.pack(">HH", 0, group))
    body += desc(0x01, 0x06, struct.pack(">HH", 0, 0))
    body += desc(iscsi | 3, 0x98, name_string("%s,t,0x%04x" % (target, tpgt)))
    body += desc(iscsi | 3, 0xA8, name_string(target))
    return bytes([0, 0x83]) + struct.pack(">H", len(body)) + body


def designators(page):
    """(code set, association, type, designator) of each descriptor, in order."""
    out, p, end = [], 4, 4 + struct.unpack(">H", page[2:4])[0]
    while p + 4 <= end:
        n = page[p + 3]
        out.append((page[p] & 0xF, (page[p + 1] >> 4) & 3, page[p + 1] & 0xF,
                    bytes(page[p + 4:p + 4 + n])))
        p += 4 + n
    if p != end:
        fail("VPD 83h: descriptors overrun the page")
    return out


def udev_export(p80, p83):
    """The properties sg_vpd --export gives udev for these pages (55-scsi-sg3_id.rules)."""
    names = {(0, 3): "SCSI_IDENT_LUN_NAA_REGEXT", (0, 1): "SCSI_IDENT_LUN_T10",
             (1, 4): "SCSI_IDENT_PORT_RELATIVE", (1, 5): "SCSI_IDENT_PORT_TARGET_PORT_GROUP",
             (0, 6): "SCSI_IDENT_LUN_LOGICAL_UNIT_GROUP", (1, 8): "SCSI_IDENT_PORT_NAME",
             (2, 8): "SCSI_IDENT_TARGET_NAME"}
    out = {"SCSI_IDENT_SERIAL": p80[4:].rstrip(b"\0").decode()}
    for code_set, assoc, kind, d in designators(p83):
        if kind == 3:
            v = d.hex()
        elif kind == 4:
            v = "%d" % struct.unpack(">H", d[2:4])
        elif kind in (5, 6):
            v = "0x%x" % struct.unpack(">H", d[2:4])
        else:
            v = d.rstrip(b"\0").decode().replace(" ", "_")
        out[names[(assoc, kind)]] = v
    return out


# `udevadm info` of an OpenStack Cinder volume that LIO exports (IBLOCK, TPG tag 1, the LUN in
# default_tg_pt_gp): the designators as sg3_utils decoded them on the host
# (docs/migrate.md "Disk identity" names the source).
CINDER_WWN = "5b9485a9-d431-4afc-92a5-e3b1222dbae9"
CINDER_IQN = "iqn.2010-10.org.openstack:volume-dc770907-5aec-4d8f-922d-060051f342cf"
CINDER_UDEV = {
    "SCSI_IDENT_SERIAL": CINDER_WWN,
    "SCSI_IDENT_LUN_NAA_REGEXT": "60014055b9485a9d4314afc92a5e3b12",
    "SCSI_IDENT_LUN_T10": "LIO-ORG_IBLOCK:" + CINDER_WWN,
    "SCSI_IDENT_PORT_RELATIVE": "1",
    "SCSI_IDENT_PORT_TARGET_PORT_GROUP": "0x0",
    "SCSI_IDENT_LUN_LOGICAL_UNIT_GROUP": "0x0",
    "SCSI_IDENT_PORT_NAME": CINDER_IQN + ",t,0x0001",
    "SCSI_IDENT_TARGET_NAME": CINDER_IQN,
}


def check_published():
    got = udev_export(page80(CINDER_WWN), page83(CINDER_WWN, "IBLOCK", CINDER_IQN, 1, 0))
    if got != CINDER_UDEV:
        fail("the rule gives %r for the published LIO disk, the host saw %r" % (got, CINDER_UDEV))


def raw(port, target, lun, wwn, product, group):
    hostile.TARGET = target
    s = hostile.Session(port, name="iqn.2026-11.org.linerate:lio-vpd").login()
    pages = {}
    for code in (0x80, 0x83):
        cdb = bytes([0x12, 1, code]) + struct.pack(">H", 1024) + b"\0"
        st, sense, data = s.scsi_retry_ua(cdb, read_len=1024, lun=lun)
        if st != 0:
            fail("INQUIRY VPD %02xh: status 0x%02x sense %s" % (code, st, hostile.sense_kaa(sense)))
        pages[code] = data
    s.logout()
    want = {0x80: page80(wwn), 0x83: page83(wwn, product, target, 1, group)}
    for code in (0x80, 0x83):
        if pages[code] != want[code]:
            fail("VPD %02xh of %s LUN %d:\n got  %s\n want %s" %
                 (code, target, lun, pages[code].hex(), want[code].hex()))


def inq(file80, file83, target, wwn, product):
    """iscsi-inq prints the serial between brackets and, for each designator, its code set,
    association, type and its bytes as text between brackets (libiscsi lists the descriptors
    last first)."""
    t80 = open(file80, "rb").read()
    if t80 != b"Unit Serial Number:[" + wwn.encode() + b"]\n":
        fail("iscsi-inq VPD 80h: %r" % t80)
    got = []
    for block in open(file83, "rb").read().split(b"DEVICE DESIGNATOR #")[1:]:
        f = {}
        for key in (b"Code Set:(", b"Association:(", b"Designator Type:("):
            at = block.find(key)
            f[key] = int(block[at + len(key):block.index(b")", at)]) if at >= 0 else None
        d = block[block.index(b"Designator:[") + 12:]
        got.append((f[b"Code Set:("], f[b"Association:("], f[b"Designator Type:("],
                    d[:d.rindex(b"]")]))
    want = [(c, a, k, d.split(b"\0")[0]) for c, a, k, d in
            designators(page83(wwn, product, target, 1, 0))]
    if got != want[::-1]:
        fail("iscsi-inq VPD 83h:\n got  %r\n want %r" % (got, want[::-1]))


def main():
    check_published()
    a = sys.argv[1:]
    if len(a) == 7 and a[0] == "raw":
        raw(int(a[1]), a[2], int(a[3]), a[4], a[5], int(a[6]))
    elif len(a) == 6 and a[0] == "inq":
        inq(*a[1:])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
