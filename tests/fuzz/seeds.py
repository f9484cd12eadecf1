#!/usr/bin/env python3
"""Write seed inputs for the libFuzzer harnesses in tests/fuzz into DIR/<harness>/.

fuzz_pdu: first byte = mode (0 raw login phase, 1 after a normal login, 2 after a discovery
login, see fuzz_pdu.c), then iSCSI PDUs."""
import os
import struct
import sys

LUN0 = bytes(8)


def pdu(op, flags, itt=0, lun=LUN0, f20=0, cmdsn=0, expstatsn=0, rest=b"", data=b"",
        immediate=False, ahs=b""):
    """A BHS (fields 20..47 as f20, cmdsn, expstatsn, rest[16]) plus padded data."""
    b0 = op | (0x40 if immediate else 0)
    dlen = len(data)
    hdr = struct.pack(">BBBBB", b0, flags, 0, 0, len(ahs) // 4) + dlen.to_bytes(3, "big")
    hdr += lun + struct.pack(">IIII", itt, f20, cmdsn, expstatsn) + rest.ljust(16, b"\0")[:16]
    assert len(hdr) == 48
    return hdr + ahs + data + bytes((-dlen) % 4)


def scsi(itt, cmdsn, cdb, edtl, read=False, write=False, data=b"", final=True, lun=LUN0):
    flags = (0x80 if final else 0) | (0x40 if read else 0) | (0x20 if write else 0) | 0x01
    return pdu(0x01, flags, itt, lun, edtl, cmdsn, 0, cdb.ljust(16, b"\0"), data)


def data_out(itt, ttt, datasn, off, data, final=True):
    return pdu(0x05, 0x80 if final else 0, itt, LUN0, ttt, 0, 0,
               struct.pack(">III", 0, datasn, off), data)


def text(itt, cmdsn, kv, ttt=0xFFFFFFFF, flags=0x80):
    body = b"".join(k.encode() + b"=" + v.encode() + b"\0" for k, v in kv)
    return pdu(0x04, flags, itt, LUN0, ttt, cmdsn, 0, b"", body)


def login(kv, csg=0, nsg=1, transit=True, tsih=0, itt=0, cmdsn=0):
    flags = (0x80 if transit else 0) | (csg << 2) | nsg
    body = b"".join(k.encode() + b"=" + v.encode() + b"\0" for k, v in kv)
    rest = bytes(16)
    isid = bytes([0x80, 0x12, 0x34, 0x56, 0x00, 0x02])
    hdr_lun = isid + struct.pack(">H", tsih)
    return pdu(0x03, flags, itt, hdr_lun, 0, cmdsn, 0, rest, body, immediate=True)


def cdb10(op, lba, blocks):
    return struct.pack(">BBIBHB", op, 0, lba, 0, blocks, 0)


def main():
    out = sys.argv[1]
    seeds = {"fuzz_pdu": {}}
    p = seeds["fuzz_pdu"]
    tur = bytes(6)
    inq = bytes([0x12, 0, 0, 0, 96, 0])
    p["tur"] = b"\x01" + scsi(1, 0, tur, 0)
    p["inquiry"] = b"\x01" + scsi(1, 0, inq, 96, read=True)
    p["read10"] = b"\x01" + scsi(2, 0, cdb10(0x28, 0, 8), 4096, read=True)
    p["write10_imm"] = b"\x01" + scsi(3, 0, cdb10(0x2A, 1, 1), 512, write=True, data=b"A" * 512)
    # Write of 16 blocks: 1 KiB immediate, unsolicited Data-Out up to FirstBurst, then R2T'd.
    p["write10_unsol"] = (b"\x01" + scsi(4, 0, cdb10(0x2A, 0, 16), 8192, write=True,
                                        data=b"B" * 1024, final=False)
                          + data_out(4, 0xFFFFFFFF, 0, 1024, b"C" * 1024, final=True)
                          + data_out(4, 1, 0, 2048, b"D" * 6144, final=True))
    p["many"] = (b"\x01" + scsi(1, 0, tur, 0) + scsi(2, 1, cdb10(0x28, 0, 1), 512, read=True)
                 + pdu(0x00, 0x80, 5, LUN0, 0xFFFFFFFF, 2, 0, b"", b"ping")
                 + pdu(0x02, 0x81, 6, LUN0, 2, 3, 0, struct.pack(">II", 0, 0))
                 + text(7, 4, [("SendTargets", "All")])
                 + pdu(0x06, 0x80, 8, LUN0, 0, 5))
    p["ooo_cmdsn"] = (b"\x01" + scsi(1, 1, tur, 0) + scsi(2, 0, tur, 0)
                      + scsi(3, 2, cdb10(0x2A, 0, 2), 1024, write=True, data=b"x" * 512,
                             final=False))
    p["discovery"] = b"\x02" + text(1, 0, [("SendTargets", "All")])
    p["snack"] = b"\x01" + pdu(0x10, 0x80, 1)
    p["login_sec"] = b"\x00" + login([("InitiatorName", "iqn.2026-11.org.linerate:seed"),
                                      ("TargetName", "iqn.2026-11.org.linerate:fuzz"),
                                      ("SessionType", "Normal"), ("AuthMethod", "None")])
    p["login_2step"] = (p["login_sec"]
                        + login([("HeaderDigest", "None"), ("MaxRecvDataSegmentLength", "8192")],
                                csg=1, nsg=3))
    # CHAP (mutual) with FUZZ_CHAP_TARGET: AuthMethod, CHAP_A, then an answer (wrong: the
    # challenge is random) with the initiator's own challenge, in hex and in base64
    chap = [("InitiatorName", "iqn.2026-11.org.linerate:seed"),
            ("TargetName", "iqn.2026-11.org.linerate:fuzz-chap"),
            ("SessionType", "Normal"), ("AuthMethod", "CHAP,None")]
    p["chap_a"] = (b"\x00" + login(chap)
                   + login([("CHAP_A", "8,7,5")], transit=False))
    p["chap_answer_hex"] = (p["chap_a"]
                            + login([("CHAP_N", "alice"), ("CHAP_R", "0x" + "ab" * 32),
                                     ("CHAP_I", "7"), ("CHAP_C", "0x" + "5a" * 24)]))
    p["chap_answer_b64"] = (p["chap_a"]
                            + login([("CHAP_N", "alice"), ("CHAP_R", "0b" + "q" * 43 + "="),
                                     ("CHAP_I", "0x07"), ("CHAP_C", "0b" + "WlpaWlpa" * 4)]))
    for harness, files in seeds.items():
        d = os.path.join(out, harness)
        os.makedirs(d, exist_ok=True)
        for name, blob in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(blob)


if __name__ == "__main__":
    main()
