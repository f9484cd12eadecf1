#!/usr/bin/env python3
"""Write seed inputs for the libFuzzer harnesses in tests/fuzz into DIR/<harness>/.

fuzz_pdu: first byte = mode (0 raw login phase, 1 after a normal login, 2 after a discovery
login, see fuzz_pdu.c), then iSCSI PDUs.
fuzz_keys: first byte = options, then a login text (0xff splits it into two requests).
fuzz_chap: first byte = options (bit 0 mutual, bits 1-3 algorithms, bit 4 keys straight to the
hook, bit 5 AuthMethod agreed late, bit 6 an address per connection), then connections separated by 0xfe, each login requests' texts separated by 0xff; the
harness pins the target's CHAP_I/CHAP_C to CHAP_ID/CHAP_CHALLENGE below, so the responses here
are the right ones (see fuzz_chap.c)."""
import base64
import hashlib
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


def kvtext(kv):
    return b"".join(k.encode() + b"=" + v.encode() + b"\0" for k, v in kv)


# fuzz_chap.c's credentials and pinned challenge
CHAP_USER = "alice"
CHAP_SECRET = b"alice-secret-16b"
CHAP_MUTUAL_USER = "iqn.2026-11.org.linerate:fuzz"
CHAP_MUTUAL_SECRET = b"target-secret-16"
CHAP_ID = 0x2A
CHAP_CHALLENGE = bytes((i * 37 + 11) & 0xFF for i in range(32))
CHAP_HASH = {5: hashlib.md5, 7: hashlib.sha256, 8: hashlib.sha3_256}


def chap_response(alg, ident, secret, challenge):
    """RFC 1994: H(identifier || secret || challenge)."""
    return CHAP_HASH[alg](bytes([ident]) + secret + challenge).digest()


def hexval(b, upper=False):
    return ("0X" + b.hex().upper()) if upper else ("0x" + b.hex())


def b64val(b, pad=True):
    v = base64.b64encode(b).decode()
    return "0b" + (v if pad else v.rstrip("="))


def chap_seeds():
    """fuzz_chap inputs: whole exchanges, good and bad."""
    first = [("InitiatorName", "iqn.2026-11.org.linerate:seed"),
             ("TargetName", "iqn.2026-11.org.linerate:fuzz"),
             ("SessionType", "Normal"), ("AuthMethod", "CHAP,None")]

    def conn(*reqs):
        return b"\xff".join(kvtext(r) for r in reqs)

    def inp(opt, *conns):
        return bytes([opt]) + b"\xfe".join(conns)

    def good(alg, enc=hexval, offer=None):
        rsp = chap_response(alg, CHAP_ID, CHAP_SECRET, CHAP_CHALLENGE)
        return [first, [("CHAP_A", offer or str(alg))],
                [("CHAP_N", CHAP_USER), ("CHAP_R", enc(rsp))]]

    def mutual(alg, chal, ident=7, enc=hexval):
        reqs = good(alg, enc)
        reqs[2] += [("CHAP_I", str(ident)), ("CHAP_C", enc(chal))]
        return reqs

    c = {}
    names = {5: "md5", 7: "sha256", 8: "sha3"}
    for alg, name in names.items():
        c["oneway_" + name] = inp(0, conn(*good(alg)))
        c["oneway_%s_b64" % name] = inp(0, conn(*good(alg, b64val)))
        c["mutual_" + name] = inp(1, conn(*mutual(alg, bytes(range(100, 132)))))
    c["oneway_b64_nopad"] = inp(0, conn(*good(7, lambda b: b64val(b, False))))
    c["oneway_hex_upper"] = inp(0, conn(*good(5, lambda b: hexval(b, True))))
    c["oneway_offer_list"] = inp(0, conn(*good(8, offer="0x8,7,5,99")))
    # only MD5 allowed (bits 1-3 = CHAP_ALGS_MD5): "8,7,5" picks MD5
    c["oneway_md5_only"] = inp(2, conn(*good(5, offer="8,7,5")))
    c["mutual_b64_16"] = inp(1, conn(*mutual(7, b"\x5a" * 16, ident=0, enc=b64val)))
    c["mutual_hex_id"] = inp(1, conn(*mutual(8, bytes(range(64)), ident=255)))
    # AuthMethod and CHAP_A in one request (libiscsi does so)
    r = good(7)
    c["oneway_one_request"] = inp(0, conn(first + r[1], r[2]))
    # a replayed initiator challenge on a second connection (the guard refuses it)
    m = conn(*mutual(7, b"\x11" * 24))
    c["mutual_replay"] = inp(1, m, m)
    # the initiator reflects our own challenge
    c["mutual_reflect"] = inp(1, conn(*mutual(7, CHAP_CHALLENGE, ident=CHAP_ID)))
    # failures
    bad = good(7)
    bad[2] = [("CHAP_N", CHAP_USER), ("CHAP_R", "0x" + "00" * 32)]
    c["wrong_response"] = inp(0, conn(*bad))
    bad = good(7)
    bad[2][0] = ("CHAP_N", "mallory")
    c["wrong_user"] = inp(0, conn(*bad))
    c["no_mutual"] = inp(1, conn(*good(7)))
    c["unasked_mutual"] = inp(0, conn(*mutual(7, b"\x22" * 32)))
    c["alg_reject"] = inp(2, conn(first, [("CHAP_A", "7,8")]))
    c["alg_malformed"] = inp(0, conn(first, [("CHAP_A", "5,,x7")]))
    c["r_odd_hex"] = inp(0, conn(first, [("CHAP_A", "5")],
                                 [("CHAP_N", CHAP_USER), ("CHAP_R", "0x" + "a" * 31)]))
    c["r_bad_b64"] = inp(0, conn(first, [("CHAP_A", "5")],
                                 [("CHAP_N", CHAP_USER), ("CHAP_R", "0bA===")]))
    c["c_oversized"] = inp(1, conn(*mutual(5, b"\x33" * 1025)))
    c["i_too_big"] = inp(1, conn(*mutual(5, b"\x44" * 16, ident=256)))
    c["n_too_long"] = inp(0, conn(first, [("CHAP_A", "5")],
                                  [("CHAP_N", "n" * 256), ("CHAP_R", "0x00")]))
    c["nr_before_a"] = inp(0, conn(first, [("CHAP_N", CHAP_USER), ("CHAP_R", "0x00")]))
    c["a_twice"] = inp(0, conn(first, [("CHAP_A", "5")], [("CHAP_A", "5")]))
    c["empty_request"] = inp(0, conn(first, []))
    c["key_after_done"] = inp(0, conn(*(good(5) + [[("CHAP_A", "5")]])))
    c["chap_without_method"] = inp(0, conn([("CHAP_A", "5")]))
    # straight to the hook (bit 4): any key name reaches it
    c["direct"] = inp(0x10, conn([("CHAP_A", "7")], [("CHAP_N", CHAP_USER), (
        "CHAP_R", hexval(chap_response(7, CHAP_ID, CHAP_SECRET, CHAP_CHALLENGE)))]))
    c["direct_unknown"] = inp(0x10, conn([("CHAP_X", "1")]))
    c["direct_after_done"] = inp(0x10, conn([("CHAP_A", "5")], [("CHAP_N", CHAP_USER), (
        "CHAP_R", hexval(chap_response(5, CHAP_ID, CHAP_SECRET, CHAP_CHALLENGE)))],
        [("CHAP_A", "5")]))
    # bit 5: CHAP keys before AuthMethod=CHAP was agreed
    c["direct_before_method"] = inp(0x30, conn([("CHAP_A", "5")]))
    # failures from one address, then a success there, then one failure (bit 6 clear), and
    # the same from an address per connection (bit 6 set)
    w = conn(*bad)
    g = conn(*good(5))
    c["guard_one_addr"] = inp(0, w, w, w, g, w)
    c["guard_addr_each"] = inp(0x40, w, w, g, w)
    return c


def keys_seeds():
    """fuzz_keys inputs: a security-stage text, 0xff, an operational-stage text."""
    sec = kvtext([("InitiatorName", "iqn.2026-11.org.linerate:seed"),
                  ("TargetName", "iqn.2026-11.org.linerate:fuzz"),
                  ("SessionType", "Normal"), ("AuthMethod", "None")])
    op = kvtext([("HeaderDigest", "CRC32C,None"), ("DataDigest", "None"),
                 ("MaxConnections", "4"), ("InitialR2T", "No"), ("ImmediateData", "Yes"),
                 ("MaxRecvDataSegmentLength", "262144"), ("MaxBurstLength", "1048576"),
                 ("FirstBurstLength", "65536"), ("DefaultTime2Wait", "2"),
                 ("DefaultTime2Retain", "20"), ("MaxOutstandingR2T", "1"),
                 ("DataPDUInOrder", "Yes"), ("DataSequenceInOrder", "Yes"),
                 ("ErrorRecoveryLevel", "0"), ("X-com.example.foo", "bar")])
    return {
        "login": b"\x00" + sec + b"\xff" + op,
        "login_digests": b"\x03" + sec + b"\xff" + op,
        "discovery": b"\x40" + kvtext([("InitiatorName", "iqn.2026-11.org.linerate:seed"),
                                        ("SessionType", "Discovery")]) + b"\xff" + op,
        "chap_required": b"\x30" + sec.replace(b"=None", b"=CHAP,None")
        + kvtext([("CHAP_A", "5")]),
        "answers": b"\x80" + kvtext([("HeaderDigest", "None"), ("MaxBurstLength", "Reject"),
                                      ("InitialR2T", "Irrelevant"),
                                      ("TargetPortalGroupTag", "1")]),
        "sendtargets": b"\x08" + kvtext([("SendTargets", "All"),
                                          ("MaxRecvDataSegmentLength", "8192")]),
    }


def cdb10(op, lba, blocks):
    return struct.pack(">BBIBHB", op, 0, lba, 0, blocks, 0)


def config_seeds():
    """fuzz_config: the example configs shipped, and one with every kind of key."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name, rel in (("example", "../../examples/linerate.conf"),
                      ("dist", "../../dist/linerate.conf"),
                      ("three_hosts", "../../examples/three-hosts.conf")):
        path = os.path.join(here, rel)
        if os.path.exists(path):
            with open(path, "rb") as f:
                out[name] = f.read()
    out["all_keys"] = b"""threads = 2
poll-us = 0
log-level = warn
nop-interval = 5
nop-timeout = 10
login-timeout = 3
max-sessions = 16
max-tx-backlog = 1M
metrics = 127.0.0.1:9100
ctl-socket = none
error-recovery-level = 2
default-time2wait = 0
default-time2retain = 5
alua-group = 2
alua-state = standby
alua-peer = 3:active/optimized
chap-algorithms = sha256,md5
[target iqn.2026-11.org.linerate:a]
alias = "a disk"
portal = [::1]:3261
portal = 127.0.0.1
lun = ram:4M,bs=4096,pbs=4k,removable
lun 7 = null:1G,ro,alua=an,alua-peer=3:sb
lun 9 = ram:1M,sanitize-rate=0
allow = iqn.1993-08.org.debian:01:x
header-digest = crc32c
data-digest = none
immediate-data = no
initial-r2t = yes
max-connections = 4
target-warm-reset = no
target-cold-reset = yes
[target iqn.2026-11.org.linerate:b]
lun = ram:1M
"""
    out["hosts"] = b"""portal = 127.0.0.1
[target iqn.2026-11.org.linerate:c]
lun = ram:1M
lun 5 = ram:1M
allow = iqn.2026-11.org.linerate:h1
allow = iqn.2026-11.org.linerate:h2
allow = iqn.2026-11.org.linerate:h3
allow = iqn.2026-11.org.linerate:h4
[host iqn.2026-11.org.linerate:h1]
map = 0 5
map = 16383 0,ro
[group cluster.1]
initiator = iqn.2026-11.org.linerate:h2
initiator = iqn.2026-11.org.linerate:h3
map = 1 5,ro
[host iqn.2026-11.org.linerate:h4]
"""
    return out


def ctl_line(method, params=None, rid=1):
    import json
    req = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        req["params"] = params
    return json.dumps(req).encode() + b"\n"


def ctl_seeds():
    """fuzz_ctl: request lines of every method (the daemon's target is the default one)."""
    t = "iqn.2026-11.org.linerate:default"
    n = "iqn.2026-11.org.linerate:fuzz-added"
    out = {}
    for m in ("version", "show_targets", "show_luns", "show_portals", "stats",
              "show_sessions", "show_connections", "show_hosts", "reload"):
        out[m] = ctl_line(m)
    out["show_hosts_target"] = ctl_line("show_hosts", {"target": t})
    out["luns"] = (ctl_line("add_lun", {"target": t, "lun": 3, "spec": "ram:2M"})
                   + ctl_line("set_lun", {"target": t, "lun": 3, "read_only": True}, 2)
                   + ctl_line("resize_lun", {"target": t, "lun": 3, "size": "4M"}, 3)
                   + ctl_line("show_luns", None, 4)
                   + ctl_line("remove_lun", {"target": t, "lun": 3, "timeout": 1}, 5))
    out["target"] = (ctl_line("add_target", {"name": n, "portals": ["127.0.0.1:3262"],
                                             "luns": ["ram:1M", "null:1G,ro"],
                                             "allow": ["iqn.1993-08.org.debian:01:x"]})
                     + ctl_line("add_allow", {"target": n, "initiator": "iqn.2000-01.x:y"}, 2)
                     + ctl_line("remove_allow", {"target": n, "initiator": "iqn.2000-01.x:y"}, 3)
                     + ctl_line("add_portal", {"target": n, "portal": "127.0.0.1:3263"}, 4)
                     + ctl_line("remove_portal", {"target": n, "portal": "127.0.0.1:3263"}, 5)
                     + ctl_line("remove_target", {"name": n, "force": True, "timeout": 1}, 6))
    h = "iqn.2026-11.org.linerate:fuzz-host"
    out["hosts"] = (ctl_line("add_host", {"target": t, "entry": h})
                    + ctl_line("map_lun", {"target": t, "entry": h, "host_lun": 5, "lun": 0,
                                           "read_only": True}, 2)
                    + ctl_line("add_group", {"target": t, "entry": "g1",
                                             "initiators": ["iqn.2000-01.x:a"]}, 3)
                    + ctl_line("add_initiator", {"target": t, "entry": "g1",
                                                 "initiator": "iqn.2000-01.x:b"}, 4)
                    + ctl_line("remove_initiator", {"target": t, "entry": "g1",
                                                    "initiator": "iqn.2000-01.x:a"}, 5)
                    + ctl_line("set_host_chap", {"target": t, "entry": h, "user": ""}, 6)
                    + ctl_line("unmap_lun", {"target": t, "entry": h, "host_lun": 5}, 7)
                    + ctl_line("remove_host", {"target": t, "entry": "g1", "force": True,
                                               "timeout": 1}, 8))
    out["sessions"] = (ctl_line("logout_session", {"target": t, "tsih": 1})
                       + ctl_line("drop_connection", {"target": t, "tsih": 1, "cid": 0}, "x"))
    out["log"] = ctl_line("set_log_level", {"level": "warn"}, None)
    out["bad"] = (b'{"jsonrpc":"2.0","id":1,"method":"nope"}\r\n'
                  b'{"jsonrpc":"1.0","method":"version"}\n[1,2]\n{"a":1,"a":2}\n'
                  b'{"jsonrpc":"2.0","id":[],"method":"version"}\n'
                  b'{"jsonrpc":"2.0","id":2,"method":"version","params":[]}\n\n{')
    return out


def http_seeds():
    """fuzz_http: a scrape, and requests each refusal answers."""
    return {
        "get": b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
        "get_query": b"GET /metrics?x=1 HTTP/1.0\n\n",
        "post": b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        "notfound": b"GET / HTTP/1.1\r\n\r\n",
        "bad": b"GET /metrics\r\n\r\n",
        "partial": b"GET /metr",
    }


def srec(cdb, edtl=0, read=False, write=False, data=b"", k=0):
    """fuzz_scsi: one command record (see fuzz_scsi.c)."""
    cdb = bytes(cdb).ljust(16, b"\0")
    return (bytes([k & 0xF0 | (k & 8)]) + cdb + struct.pack(">H", edtl)
            + bytes([(1 if read else 0) | (2 if write else 0)]) + (data if write else b""))


def scsi_seeds():
    """fuzz_scsi: the commands the target implements, with their parameter lists."""
    def c10(op, lba, n, b1=0):
        return bytes([op, b1]) + struct.pack(">IBH", lba, 0, n) + b"\0"

    def c16(op, lba, n, b1=0):
        return bytes([op, b1]) + struct.pack(">QIB", lba, n, 0) + b"\0"

    def pr_out(sa, key, sakey, typ=0, flags=0, extra=b""):
        cdb = bytes([0x5F, sa, typ, 0, 0]) + struct.pack(">I", 24 + len(extra)) + b"\0"
        data = struct.pack(">QQ", key, sakey) + bytes(4) + bytes([flags, 0, 0, 0]) + extra
        return srec(cdb, len(data), write=True, data=data)

    def pr_in(sa):
        return srec(bytes([0x5E, sa, 0, 0, 0, 0, 0, 0x10, 0, 0]), 4096, read=True)

    inq = lambda evpd, page, n=255: srec(bytes([0x12, evpd, page, 0, n, 0]), n, read=True)
    out = {}
    out["basic"] = (b"\0" + srec([0]) + inq(0, 0) + inq(1, 0) + inq(1, 0x80) + inq(1, 0x83)
                    + inq(1, 0xB0) + inq(1, 0xB1) + inq(1, 0xB2) + inq(1, 0x86)
                    + srec(bytes([0x25]) + bytes(9), 8, read=True)
                    + srec(bytes([0x9E, 0x10]) + bytes(8) + struct.pack(">I", 32) + b"\0\0", 32,
                           read=True)
                    + srec(bytes([0xA0, 0, 0, 0, 0, 0]) + struct.pack(">I", 256) + b"\0\0", 256,
                           read=True)
                    + srec(bytes([0x03, 0, 0, 0, 252, 0]), 252, read=True))
    out["rw"] = (b"\0" + srec(c10(0x2A, 0, 2), 1024, write=True, data=b"A" * 1024)
                 + srec(c10(0x28, 0, 2), 1024, read=True)
                 + srec(bytes([0x0A, 0, 0, 4, 1, 0]), 512, write=True, data=b"B" * 512)
                 + srec(bytes([0x08, 0, 0, 4, 1, 0]), 512, read=True)
                 + srec(c16(0x8A, 8, 1, 0x08), 512, write=True, data=b"C" * 512)
                 + srec(c16(0x88, 8, 1), 512, read=True)
                 + srec(c10(0x2E, 16, 1), 512, write=True, data=b"D" * 512)
                 + srec(c10(0x2F, 16, 1, 0x02), 512, write=True, data=b"D" * 512)
                 + srec(c10(0x35, 0, 0)) + srec(c16(0x91, 0, 0)))
    out["write_same"] = (b"\0" + srec(c10(0x41, 0, 8), 512, write=True, data=b"E" * 512)
                         + srec(c16(0x93, 32, 64, 0x08), 512, write=True, data=bytes(512))
                         + srec(c16(0x93, 100, 0, 0x01), 512, write=True, data=bytes(512))
                         + srec(bytes([0x9E, 0x12]) + struct.pack(">Q", 0)
                                + struct.pack(">I", 64) + b"\0\0", 64, read=True))
    unmap = struct.pack(">HH4x", 22, 16) + struct.pack(">QI4x", 0, 8) 
    out["unmap"] = (b"\0" + srec(bytes([0x42, 0, 0, 0, 0, 0, 0, 0, len(unmap), 0]), len(unmap),
                                 write=True, data=unmap))
    caw = bytes(512) + b"F" * 512
    out["caw"] = (b"\0" + srec(bytes([0x89, 0]) + struct.pack(">Q", 4) + bytes(3) + b"\x01\0\0",
                               1024, write=True, data=caw)
                  + srec(bytes([0x89, 0]) + struct.pack(">Q", 4) + bytes(3) + b"\x01\0\0",
                         1024, write=True, data=caw))
    caching = bytes([0, 0, 0, 0]) + bytes([0x08, 0x12, 0x04]) + bytes(17)
    out["mode"] = (b"\0" + srec(bytes([0x1A, 0, 0x3F, 0, 255, 0]), 255, read=True)
                   + srec(bytes([0x5A, 0, 0x3F, 0, 0, 0, 0, 0x10, 0, 0]), 4096, read=True)
                   + srec(bytes([0x15, 0x10, 0, 0, len(caching), 0]), len(caching), write=True,
                          data=caching)
                   + srec(bytes([0x1A, 0, 0x08, 0, 255, 0]), 255, read=True)
                   + srec(bytes([0x4D, 0, 0x40, 0, 0, 0, 0, 0x10, 0, 0]), 4096, read=True)
                   + srec(bytes([0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0]), 4096, read=True)
                   + srec(bytes([0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0]), 4096, read=True))
    out["pr"] = (b"\0" + pr_out(0, 0, 0xAA) + pr_out(1, 0xAA, 0, typ=5) + pr_in(0) + pr_in(1)
                 + pr_in(2) + pr_in(3)
                 + bytes([0x10]) + srec([0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0], 512, write=True,
                                        data=bytes(512))[1:]
                 + pr_out(2, 0xAA, 0, typ=5) + pr_out(3, 0xAA, 0) + pr_out(0, 0, 0xBB, flags=1))
    out["pr_aptpl"] = (b"\x04" + pr_out(0, 0, 0xAA, flags=1) + pr_out(1, 0xAA, 0, typ=1)
                       + pr_out(6, 0, 0xCC, flags=4) + pr_out(4, 0xAA, 0xCC, typ=1)
                       + pr_out(5, 0xAA, 0xCC, typ=1) + pr_in(3))
    out["reserve"] = (b"\0" + srec([0x16, 0, 0, 0, 0, 0]) + bytes([0x10]) + srec([0])[1:]
                      + srec([0x17, 0, 0, 0, 0, 0]) + bytes([0x06]))
    out["removable"] = (b"\x02" + srec([0x1E, 0, 0, 0, 1, 0]) + srec([0x1B, 0, 0, 0, 2, 0])
                        + srec([0x1E, 0, 0, 0, 0, 0]) + srec([0x1B, 0, 0, 0, 2, 0])
                        + srec([0x1B, 0, 0, 0, 3, 0]) + srec([0]))
    # SANITIZE OVERWRITE (one pass, pattern of 4 bytes), BLOCK ERASE, EXIT FAILURE MODE
    ow = bytes([1, 0]) + struct.pack(">H", 4) + b"\xde\xad\xbe\xef"
    out["sanitize"] = (b"\0" + srec(bytes([0x48, 0x01, 0, 0, 0, 0, 0, 0, len(ow), 0]), len(ow),
                                    write=True, data=ow)
                       + srec([0]) + srec(bytes([0x48, 0x82]) + bytes(8)) + srec([0])
                       + srec(bytes([0x48, 0x1F]) + bytes(8)))
    # EXTENDED COPY (LID1): two identification descriptors (LUN 0 and LUN 1 by their NAA
    # designators are unknown here: the target answers what it finds), one block->block segment
    tdesc = bytes([0xE4, 0, 0, 0]) + bytes([1, 3, 0, 8]) + bytes(8) + bytes(16)
    seg = bytes([0x02, 0, 0, 0x18, 0, 0, 0, 1]) + struct.pack(">HxxQQ", 4, 0, 64)[:16]
    seg = bytes([0x02, 0]) + struct.pack(">HHH", 0x18, 0, 1) + bytes(2) + struct.pack(
        ">HQQ", 4, 0, 64)[:14]
    plist = (bytes([0, 0]) + struct.pack(">H", 2 * len(tdesc)) + bytes(4)
             + struct.pack(">I", len(seg)) + bytes(4) + tdesc + tdesc + seg)
    out["xcopy"] = (b"\0" + inq(1, 0x83) + inq(1, 0x8F)
                    + srec(bytes([0x83, 0]) + bytes(8) + struct.pack(">I", len(plist)) + b"\0\0",
                           len(plist), write=True, data=plist)
                    + srec(bytes([0x84, 0x03]) + bytes(8) + struct.pack(">I", 256) + b"\0\0",
                           256, read=True)
                    + srec(bytes([0x84, 0x00]) + bytes(8) + struct.pack(">I", 256) + b"\0\0",
                           256, read=True))
    out["tmf"] = (b"\0" + srec(c10(0x2A, 0, 64), 32768, write=True, data=b"G" * 32768, k=8)
                  + bytes([4]) + bytes([5]) + bytes([0x16]) + bytes([7]) + srec([0]))
    return out


def session_seeds():
    """fuzz_session: first byte = options (bit 0 ERL 2, bit 1 InitialR2T=Yes), then records:
    op, flags, data length (2), BHS bytes 8..47 (40), data (see fuzz_session.c)."""
    def rec(op, flags, rest, data=b""):
        rest = rest.ljust(40, b"\0")[:40]
        return bytes([op, flags]) + struct.pack(">H", len(data)) + rest + data

    def cmd(itt, cdb, edtl, read=False, write=False, data=b"", final=True, imm=False):
        flags = (0x80 if final else 0) | (0x40 if read else 0) | (0x20 if write else 0) | 1
        rest = LUN0 + struct.pack(">III", itt, edtl, 0) + bytes(4) + cdb.ljust(16, b"\0")
        return rec(0x01 | (0x40 if imm else 0), flags, rest, data)

    def dout(itt, ttt, datasn, off, data, final=True):
        rest = LUN0 + struct.pack(">II", itt, ttt) + bytes(8) + struct.pack(">III", 0, datasn, off)
        return rec(0x05, 0x80 if final else 0, rest, data)

    def tmf(fn, itt, ref_itt=0xFFFFFFFF, refcmdsn=0):
        rest = LUN0 + struct.pack(">II", itt, ref_itt) + bytes(8) + struct.pack(">II", refcmdsn, 0)
        return rec(0x02 | 0x40, 0x80 | fn, rest)

    def nop(itt, data=b""):
        return rec(0x00, 0x80, LUN0 + struct.pack(">II", itt, 0xFFFFFFFF), data)

    def snack(typ, itt, ttt=0xFFFFFFFF, begrun=0, runlen=0):
        rest = LUN0 + struct.pack(">II", itt, ttt) + bytes(16) + struct.pack(">II", begrun, runlen)
        return rec(0x10, 0x80 | typ, rest)

    def txt(itt, body):
        return rec(0x04, 0x80, LUN0 + struct.pack(">II", itt, 0xFFFFFFFF), body)

    def logout(itt, reason=0, cid=0):
        return rec(0x06, 0x80 | reason, bytes(8) + struct.pack(">IHH", itt, cid, 0))

    tur = bytes(6)
    inq = bytes([0x12, 0, 0, 0, 96, 0])
    w8 = bytes([0x2A, 0, 0, 0, 0, 0, 0, 0, 8, 0])
    r8 = bytes([0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0])
    out = {}
    for erl in (0, 2):
        o = bytes([erl >> 1])
        out["basic_erl%d" % erl] = (o + cmd(1, tur, 0) + cmd(2, inq, 96, read=True)
                                    + cmd(3, w8, 4096, write=True, data=b"A" * 1024, final=False)
                                    + dout(3, 0xFFFFFFFF, 0, 1024, b"B" * 3072)
                                    + cmd(4, r8, 4096, read=True) + nop(5, b"ping")
                                    + txt(6, kvtext([("SendTargets", "All")])) + logout(7))
        out["r2t_erl%d" % erl] = (bytes([(erl >> 1) | 2])
                                  + cmd(1, w8, 4096, write=True)
                                  + dout(1, 0, 0, 0, b"C" * 4096)
                                  + dout(1, 1, 0, 0, b"D" * 4096) + cmd(2, r8, 4096, read=True)
                                  + logout(3))
        out["tmf_erl%d" % erl] = (o + cmd(1, w8, 4096, write=True, data=b"E" * 512, final=False)
                                  + tmf(1, 2, 1) + tmf(5, 3) + tmf(6, 4) + tmf(2, 5)
                                  + tmf(4, 6) + tmf(14, 7, 1) + cmd(8, tur, 0) + logout(9))
        out["snack_erl%d" % erl] = (o + cmd(1, r8, 4096, read=True) + snack(0, 1, begrun=0)
                                    + snack(1, 0, begrun=0) + snack(2, 1)
                                    + snack(3, 1, 0, 0, 0) + logout(2, reason=1)
                                    + logout(3, reason=2))
    # ERL 2: a write left half done on connection 0, which is lost; connection 1 joins the
    # session, reassigns the task and logs connection 0 out for recovery; then a reinstatement
    # of CID 0 and the end of the session
    lost = cmd(1, w8, 4096, write=True, data=b"H" * 512, final=False)
    out["reassign_erl2"] = (b"\x01" + cmd(9, tur, 0) + lost + b"\x3e\x01"
                            + tmf(14, 2, 1) + dout(1, 0xFFFFFFFF, 0, 512, b"I" * 512)
                            + logout(3, reason=2, cid=0) + cmd(4, r8, 4096, read=True)
                            + b"\x3e\x00" + cmd(5, tur, 0) + logout(6))
    out["reinstate_erl0"] = (b"\x00" + lost + b"\x3e\x00" + cmd(2, tur, 0) + logout(3))
    return out


def main():
    out = sys.argv[1]
    seeds = {"fuzz_pdu": {}, "fuzz_chap": chap_seeds(), "fuzz_keys": keys_seeds(),
             "fuzz_config": config_seeds(), "fuzz_ctl": ctl_seeds(), "fuzz_http": http_seeds(),
             "fuzz_scsi": scsi_seeds(), "fuzz_session": session_seeds()}
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
