#!/usr/bin/env python3
"""The NAA designator LIO answers in VPD 83h for a storage object's wwn, computed from the rule
docs/migrate.md states (independently of linerate-ctl's C code): NAA 6h, IEEE company id
001405h, then the first 25 hex digits of the unit serial, other characters skipped, zeros when
the serial runs out. Checked first against two designators hosts published for LIO disks
(docs/migrate.md "Disk identity" names the sources). Usage: lio_naa.py WWN..."""
import sys

PUBLISHED = {
    # udev properties of a LIO disk, rook/rook pkg/daemon/ceph/osd test data
    "d27e5d89-8829-468b-90ce-4ef8c02f07fe": "6001405d27e5d898829468b90ce4ef8c",
    # udev properties of an OpenStack Cinder LIO (IBLOCK) volume, docs/migrate.md
    "5b9485a9-d431-4afc-92a5-e3b1222dbae9": "60014055b9485a9d4314afc92a5e3b12",
}


def naa(wwn):
    digits = [ch.lower() for ch in wwn if ch in "0123456789abcdefABCDEF"][:25]
    return ("6001405" + "".join(digits)).ljust(32, "0")


for w, want in PUBLISHED.items():
    if naa(w) != want:
        sys.exit("rule gives %s for %s, LIO gave %s" % (naa(w), w, want))
for w in sys.argv[1:]:
    print(naa(w))
