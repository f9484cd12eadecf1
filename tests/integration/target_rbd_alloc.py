#!/usr/bin/env python3
"""GET LBA STATUS and the thin provisioning report of an rbd: LUN against what the cluster
says about the image, for target_rbd_alloc.sh, through hostile.py's raw initiator.

usage: target_rbd_alloc.py PORT TARGET-IQN POOL/IMAGE
LUN 0 is an rbd: LUN of POOL/IMAGE, 512-byte blocks, never written, of 16 or more objects.
  1. VPD B0h's OPTIMAL UNMAP GRANULARITY is the image's object size (`rbd info`), UGAVALID
     set; READ CAPACITY(16) says LBPME and LBPRZ; VPD B2h says LBPU, LBPWS, LBPRZ, thin.
  2. Nothing written: GET LBA STATUS says the whole LUN is deallocated, `rbd diff` lists
     nothing.
  3. WRITE(10)s of known extents (4 KiB in object 0, 4 KiB inside object 1, 1 MiB across the
     boundary of objects 3 and 4, the last block of the LUN), then SYNCHRONIZE CACHE (librbd
     may acknowledge a write before the OSD has it): the mapped ranges of GET LBA STATUS over
     the whole LUN (asked again from where a reply ends) are exactly the objects written
     (0, 1, 3, 4, last), the same set of whole-object extents as
     `rbd diff --whole-object --format json`, and their sum is `rbd du`'s used size. A GET LBA
     STATUS starting inside object 4 starts its first descriptor there, mapped to the end of
     object 4.
  4. UNMAP of object 1 whole and of the last object whole: both say deallocated there (rbd
     diff no longer lists them, GET LBA STATUS agrees), and they read zeros.
  5. UNMAP of the written 512 KiB at the end of object 3 (part of an object): it reads zeros,
     and object 3 stays allocated in both (librbd zeroes a partial range).
  6. WRITE SAME(16) with the UNMAP bit over object 0 whole: deallocated in both.
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, sense_kaa, cdb_rw10)

GOOD = 0x00
BS = 512


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def tool(*args):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("%s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def merge(extents):
    """Sorted (start, end) byte ranges with touching ones joined."""
    out = []
    for s, e in sorted(extents):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def show(runs):
    return ", ".join("%d-%d MiB" % (s >> 20, e >> 20) if not (s | e) & 0xFFFFF
                     else "%d+%d" % (s, e - s) for s, e in runs) or "nothing"


class Lun:
    def __init__(self, s, image):
        self.s, self.image = s, image

    def cmd(self, what, cdb, **kw):
        st, sense, data = self.s.scsi(cdb, timeout=60, **kw)
        if st != GOOD:
            fail("%s: status 0x%02x sense %s" % (what, st, hostile.sense_kaa(sense)))
        return data

    def write(self, off, data):
        self.cmd("WRITE(10) at %d" % off, hostile.cdb_rw10(0x2A, off // BS, len(data) // BS),
                 write_data=data)

    def read(self, off, n):
        return self.cmd("READ(10) at %d" % off, hostile.cdb_rw10(0x28, off // BS, n // BS),
                        read_len=n)

    def sync(self):
        self.cmd("SYNCHRONIZE CACHE(10)", bytes([0x35] + [0] * 9))

    def unmap(self, off, n):
        desc = struct.pack(">QII", off // BS, n // BS, 0)
        param = struct.pack(">HH4x", 6 + len(desc), len(desc)) + desc
        self.cmd("UNMAP %d+%d" % (off, n), struct.pack(">BB4xBHB", 0x42, 0, 0, len(param), 0),
                 write_data=param)

    def write_same_unmap(self, off, n):
        cdb = struct.pack(">BBQIBB", 0x93, 0x08, off // BS, n // BS, 0, 0)  # UNMAP bit
        self.cmd("WRITE SAME(16) UNMAP %d+%d" % (off, n), cdb, write_data=bytes(BS))

    def lba_status(self, lba):
        """The descriptors of one GET LBA STATUS from lba: (start, end, mapped) in bytes."""
        cdb = struct.pack(">BBQIBB", 0x9E, 0x12, lba, 8 + 16 * 64, 0, 0)
        d = self.cmd("GET LBA STATUS at LBA %d" % lba, cdb, read_len=8 + 16 * 64)
        n = (struct.unpack(">I", d[:4])[0] - 4) // 16
        out = []
        for i in range(n):
            start, count, status = struct.unpack(">QIB", d[8 + 16 * i:8 + 16 * i + 13])
            if status & 0x0F not in (0, 1):
                fail("GET LBA STATUS: provisioning status %d (anchored?)" % (status & 0x0F))
            out.append((start * BS, (start + count) * BS, status & 0x0F == 0))
        return out

    def mapped(self, size):
        """Mapped byte ranges over the whole LUN, asking again where a reply ends; checks the
        descriptors tile the LUN with no gap or overlap."""
        runs, pos = [], 0
        while pos < size:
            descs = self.lba_status(pos // BS)
            if not descs or descs[0][0] != pos:
                fail("GET LBA STATUS at %d: first descriptor %s" % (pos, descs[:1]))
            for s, e, m in descs:
                if s != pos or e <= s:
                    fail("GET LBA STATUS: descriptor %d-%d after %d" % (s, e, pos))
                if m:
                    runs.append((s, e))
                pos = e
        if pos != size:
            fail("GET LBA STATUS runs to %d, the LUN has %d bytes" % (pos, size))
        return merge(runs)

    def cluster(self):
        """Allocated whole-object extents `rbd diff --whole-object` lists, merged."""
        d = json.loads(tool("rbd", "diff", "--whole-object", self.image, "--format", "json"))
        return merge((x["offset"], x["offset"] + x["length"]) for x in d
                     if x.get("exists") in ("true", True))

    def used(self):
        d = json.loads(tool("rbd", "du", self.image, "--format", "json"))
        return d["images"][0]["used_size"]


def main():
    port, hostile.TARGET, image = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    info = json.loads(tool("rbd", "info", image, "--format", "json"))
    obj, size = info["object_size"], info["size"]
    if size < 16 * obj:
        fail("the image has fewer than 16 objects")
    last = size // obj - 1
    s = hostile.Session(port, name="iqn.2026-12.org.linerate:rbd-alloc").login()
    st, sense, _ = s.scsi_retry_ua(b"\x00" * 6)
    if st != GOOD:
        fail("TEST UNIT READY: status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    lun = Lun(s, image)

    # 1. the thin provisioning report
    b0 = lun.cmd("INQUIRY VPD B0h", bytes([0x12, 1, 0xB0, 0, 64, 0]), read_len=64)
    gran = struct.unpack(">I", b0[28:32])[0]
    print("object size %d; OPTIMAL UNMAP GRANULARITY %d blocks, UGAVALID %d" %
          (obj, gran, b0[32] >> 7))
    if gran * BS != obj or not b0[32] & 0x80:
        fail("OPTIMAL UNMAP GRANULARITY %d blocks (UGAVALID %d), not the object's %d" %
             (gran, b0[32] >> 7, obj // BS))
    rc = lun.cmd("READ CAPACITY(16)", struct.pack(">BBQIBB", 0x9E, 0x10, 0, 32, 0, 0),
                 read_len=32)
    if (rc[14] & 0xC0) != 0xC0:
        fail("READ CAPACITY(16): LBPME/LBPRZ byte 0x%02x" % rc[14])
    b2 = lun.cmd("INQUIRY VPD B2h", bytes([0x12, 1, 0xB2, 0, 8, 0]), read_len=8)
    if b2[5] & 0xE4 != 0xE4 or b2[6] & 0x07 != 2:
        fail("VPD B2h: flags 0x%02x, provisioning type %d" % (b2[5], b2[6] & 7))

    def agree(what, want):
        lun.sync()
        ours, theirs = lun.mapped(size), lun.cluster()
        used = lun.used()
        print("%s: GET LBA STATUS mapped %s; rbd diff %s; rbd du used %d" %
              (what, show(ours), show(theirs), used))
        if ours != theirs:
            fail("%s: GET LBA STATUS says %s, rbd diff --whole-object %s" %
                 (what, show(ours), show(theirs)))
        want = merge((o * obj, (o + 1) * obj) for o in want)
        if ours != want:
            fail("%s: mapped %s, expected the objects written: %s" % (what, show(ours),
                                                                     show(want)))
        if used != sum(e - s for s, e in ours):
            fail("%s: rbd du says %d bytes used, GET LBA STATUS maps %d" %
                 (what, used, sum(e - s for s, e in ours)))

    # 2. nothing written
    agree("new image", [])

    # 3. known extents
    def stamp(tag, n):
        return (tag.encode() + b" ").ljust(n, b"\xc3")
    lun.write(0, stamp("obj0", 4096))
    lun.write(obj + 12 * 1024, stamp("obj1", 4096))
    lun.write(4 * obj - 512 * 1024, stamp("obj3-4", 1 << 20))
    lun.write(size - BS, stamp("last", BS))
    agree("written", [0, 1, 3, 4, last])
    mid = 4 * obj + 64 * 1024
    d = lun.lba_status(mid // BS)
    if d[0] != (mid, 5 * obj, True):
        fail("GET LBA STATUS inside object 4: first descriptor %s, expected %s" %
             (d[0], (mid, 5 * obj, True)))

    # 4. whole objects unmapped
    lun.unmap(obj, obj)
    lun.unmap(last * obj, obj)
    agree("objects 1 and %d unmapped" % last, [0, 3, 4])
    if lun.read(obj + 12 * 1024, 4096) != bytes(4096) or lun.read(size - BS, BS) != bytes(BS):
        fail("an unmapped object does not read zeros")

    # 5. part of an object: zeroed, still allocated
    lun.unmap(4 * obj - 512 * 1024, 512 * 1024)
    if lun.read(4 * obj - 512 * 1024, 512 * 1024) != bytes(512 * 1024):
        fail("a partly unmapped object does not read zeros there")
    agree("end of object 3 unmapped (part of it)", [0, 3, 4])

    # 6. WRITE SAME with UNMAP over a whole object
    lun.write_same_unmap(0, obj)
    agree("object 0 unmapped by WRITE SAME", [3, 4])
    s.logout()


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
