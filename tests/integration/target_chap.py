#!/usr/bin/env python3
"""CHAP on linerate-target through a raw initiator (hostile.py's PDU helpers), for what no
stock initiator sends: RFC 7143 §12.1.3 exchanges written out key by key.

usage: target_chap.py PATH/TO/linerate-target

Starts the daemon with a secrets file and two targets: "oneway" (chap-user alice, MD5 and
SHA-256 allowed) and "mutual" (chap-user bob, answering as tgt-bob). Checks, each on a fresh
connection:
  good one-way logins with MD5 and SHA-256 (the strongest offered algorithm is chosen), a
  base64 CHAP_R, good mutual logins (the target's CHAP_R checked with hashlib);
  0201h and a closed connection for: wrong secret, wrong user, AuthMethod=None, a first
  request in the operational stage, a transit before CHAP_R, malformed CHAP_R, CHAP_I out
  of range, an oversized CHAP_C, CHAP keys before CHAP_A, a missing mutual challenge, our
  own challenge reflected, a replayed initiator challenge;
  the back-off: a failure after a success is answered after ~1 s, the next one after ~2 s.
The daemon must stay up, keep serving good logins, never log a secret, and exit 0 on SIGTERM.
Python 3 standard library only."""

import base64
import hashlib
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import Conn, login_pdu, login_status, parse_kv, OP_LOGIN_RSP  # noqa: E402

ONEWAY = "iqn.2026-11.org.linerate:chap-oneway"
MUTUAL = "iqn.2026-11.org.linerate:chap-mutual"
INITIATOR = "iqn.2026-11.org.linerate:chap-raw"
SECRETS = {"alice": "alice-secret-0123", "bob": "bob-secret-456789",
           "tgt-bob": "target-secret-bob-1"}
HASH = {5: "md5", 7: "sha256", 8: "sha3_256"}
FAILURES = []


def check(cond, what):
    if not cond:
        raise hostile.TestFailure(what)


def chap_r(alg, ident, secret, challenge):
    return hashlib.new(HASH[alg], bytes([ident]) + secret.encode() + challenge).digest()


def decode(v):
    if v[:2] in ("0x", "0X"):
        h = v[2:]
        return bytes.fromhex(("0" + h) if len(h) % 2 else h)
    return base64.b64decode(v[2:])


class Login:
    """One connection's login, step by step."""

    def __init__(self, port, target):
        self.c = Conn(port)
        self.target = target
        self.isid = bytes([0x80, 0, 0x43, 0x48, 0x41, os.getpid() & 0xFF])
        self.expstatsn = 0

    def send(self, pairs, csg=0, nsg=1, transit=True):
        h, d = login_pdu(pairs, csg=csg, nsg=nsg, transit=transit, isid=self.isid, itt=7,
                         cmdsn=1, expstatsn=self.expstatsn)
        self.c.send_pdu(h, d)
        rh, rd = self.c.recv_pdu(timeout=15)
        check(rh[0] & 0x3F == OP_LOGIN_RSP, "no Login Response")
        self.expstatsn = struct.unpack(">I", rh[24:28])[0] + 1
        return rh, parse_kv(rd)

    def first(self, auth="CHAP,None", transit=True):
        return self.send([("InitiatorName", INITIATOR), ("SessionType", "Normal"),
                          ("TargetName", self.target), ("AuthMethod", auth)], transit=transit)

    def challenge(self, algs="5"):
        rh, k = self.first()
        check(login_status(rh) == 0, "AuthMethod=CHAP refused: 0x%04x" % login_status(rh))
        check(k.get("AuthMethod") == "CHAP", "target did not pick CHAP: %s" % k)
        check(not rh[1] & 0x80, "target transits before CHAP")
        rh, k = self.send([("CHAP_A", algs)], transit=False)
        check(login_status(rh) == 0, "CHAP_A refused: 0x%04x" % login_status(rh))
        for key in ("CHAP_A", "CHAP_I", "CHAP_C"):
            check(key in k, "no %s in %s" % (key, k))
        self.alg, self.ident, self.chal = int(k["CHAP_A"]), int(k["CHAP_I"]), decode(k["CHAP_C"])
        check(len(self.chal) >= 16, "challenge of %d bytes" % len(self.chal))
        return self

    def answer(self, user, secret, extra=(), encode="hex"):
        r = chap_r(self.alg, self.ident, secret, self.chal)
        v = "0x" + r.hex() if encode == "hex" else "0b" + base64.b64encode(r).decode()
        return self.send([("CHAP_N", user), ("CHAP_R", v)] + list(extra))

    def finish(self):
        rh, k = self.send([("HeaderDigest", "None"), ("DataDigest", "None"),
                           ("MaxRecvDataSegmentLength", "65536")], csg=1, nsg=3)
        check(login_status(rh) == 0, "operational stage refused: 0x%04x" % login_status(rh))
        check(rh[1] & 0x80 and rh[1] & 3 == 3, "no transit to full feature phase")
        check(struct.unpack(">H", rh[14:16])[0] != 0, "no TSIH")
        self.c.close()


def expect_refused(rh_k, label):
    rh, k = rh_k
    check(login_status(rh) == 0x0201, "%s: status 0x%04x, want 0x0201" % (label,
                                                                         login_status(rh)))
    return rh


def good_oneway(port, algs="5", want_alg=5, encode="hex"):
    lg = Login(port, ONEWAY).challenge(algs)
    check(lg.alg == want_alg, "CHAP_A=%s chose %d, want %d" % (algs, lg.alg, want_alg))
    rh, k = lg.answer("alice", SECRETS["alice"], encode=encode)
    check(login_status(rh) == 0, "good one-way answer refused: 0x%04x" % login_status(rh))
    check(rh[1] & 0x80 and rh[1] & 3 == 1, "no transit to the operational stage")
    check("CHAP_R" not in k, "unasked mutual answer")
    lg.finish()


def good_mutual(port, algs="7,5", ichal=None):
    lg = Login(port, MUTUAL).challenge(algs)
    ichal = ichal or os.urandom(24)
    rh, k = lg.answer("bob", SECRETS["bob"], [("CHAP_I", "9"), ("CHAP_C", "0x" + ichal.hex())])
    check(login_status(rh) == 0, "good mutual answer refused: 0x%04x" % login_status(rh))
    check(k.get("CHAP_N") == "tgt-bob", "target answered as %s" % k.get("CHAP_N"))
    want = chap_r(lg.alg, 9, SECRETS["tgt-bob"], ichal)
    check(decode(k.get("CHAP_R", "0x")) == want, "target's CHAP_R is wrong")
    lg.finish()


def refused(port, target, steps, label):
    """steps(Login) returns the response that must be 0201h; then the connection closes."""
    lg = Login(port, target)
    try:
        expect_refused(steps(lg), label)
        check(lg.c.wait_closed(5), "%s: connection not closed after 0201h" % label)
    finally:
        lg.c.close()


def bad_cases(port):
    def reflect(lg):
        lg.challenge("5")
        return lg.answer("bob", SECRETS["bob"], [("CHAP_I", str(lg.ident)),
                                                 ("CHAP_C", "0x" + lg.chal.hex())])

    fixed = os.urandom(20)

    def replay(lg):
        lg.challenge("5")
        return lg.answer("bob", SECRETS["bob"], [("CHAP_I", "3"), ("CHAP_C", "0x" + fixed.hex())])

    cases = [
        ("wrong secret", ONEWAY,
         lambda lg: lg.challenge("5").answer("alice", "not-alices-secret")),
        ("wrong user", ONEWAY, lambda lg: lg.challenge("5").answer("mallory", SECRETS["alice"])),
        ("AuthMethod=None", ONEWAY, lambda lg: lg.first("None")),
        ("first request in the operational stage", ONEWAY,
         lambda lg: lg.send([("InitiatorName", INITIATOR), ("TargetName", ONEWAY),
                             ("SessionType", "Normal")], csg=1, nsg=3)),
        ("transit before CHAP_R", ONEWAY,
         lambda lg: (lg.challenge("5"), lg.send([]))[1]),
        ("malformed CHAP_R", ONEWAY,
         lambda lg: (lg.challenge("5"), lg.send([("CHAP_N", "alice"), ("CHAP_R", "0xzz")]))[1]),
        ("CHAP_R of the wrong length", ONEWAY,
         lambda lg: (lg.challenge("5"), lg.send([("CHAP_N", "alice"),
                                                 ("CHAP_R", "0x" + "00" * 17)]))[1]),
        ("CHAP_I out of range", MUTUAL,
         lambda lg: lg.challenge("5").answer("bob", SECRETS["bob"],
                                             [("CHAP_I", "256"), ("CHAP_C", "0x0102")])),
        ("oversized CHAP_C", MUTUAL,
         lambda lg: lg.challenge("5").answer("bob", SECRETS["bob"],
                                             [("CHAP_I", "1"), ("CHAP_C", "0x" + "ab" * 2000)])),
        ("CHAP_N before CHAP_A", ONEWAY,
         lambda lg: (lg.first(), lg.send([("CHAP_N", "alice")], transit=False))[1]),
        ("no algorithm in common", ONEWAY,
         lambda lg: (lg.first(), lg.send([("CHAP_A", "8")], transit=False))[1]),
        ("missing mutual challenge", MUTUAL,
         lambda lg: lg.challenge("5").answer("bob", SECRETS["bob"])),
        ("reflected challenge", MUTUAL, reflect),
    ]
    for label, target, steps in cases:
        try:
            refused(port, target, steps, label)
            good_oneway(port)  # a success resets the back-off
        except (hostile.TestFailure, OSError, hostile.Closed) as e:
            FAILURES.append("%s: %s" % (label, e))
    # replay: the first use of a challenge passes, a second use is refused
    try:
        good_mutual(port, "5", fixed)
        refused(port, MUTUAL, replay, "replayed initiator challenge")
        good_oneway(port)
    except (hostile.TestFailure, OSError, hostile.Closed) as e:
        FAILURES.append("replay: %s" % e)


def backoff(port):
    """After a success, failures are answered after ~1 s, then ~2 s."""
    good_oneway(port)
    times = []
    for _ in range(2):
        lg = Login(port, ONEWAY).challenge("5")
        t0 = time.monotonic()
        expect_refused(lg.answer("alice", "wrong-wrong-wrong"), "back-off")
        times.append(time.monotonic() - t0)
        lg.c.close()
    check(0.8 < times[0] < 1.8 and 1.8 < times[1] < 3.2,
          "failure answers after %.2f s and %.2f s, want ~1 and ~2" % tuple(times))
    # the reactor kept serving meanwhile: a good login right away works
    good_oneway(port)


def main():
    binary = sys.argv[1]
    work = tempfile.mkdtemp(prefix="linerate-chap-")
    sec = os.path.join(work, "chap-secrets")
    with open(sec, "w") as f:
        f.write("# raw CHAP test\n")
        for n, s in SECRETS.items():
            f.write("%s %s\n" % (n, s))
    os.chmod(sec, 0o600)
    conf = os.path.join(work, "chap.conf")
    log_path = os.path.join(work, "target.log")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with open(conf, "w") as f:
        f.write("""threads = 2
portal = 127.0.0.1:%d
chap-secrets = %s
log-level = info
[target %s]
lun = ram:8M
chap-user = alice
chap-algorithms = sha256,md5
[target %s]
lun = ram:8M
chap-user = bob
chap-mutual-user = tgt-bob
""" % (port, sec, ONEWAY, MUTUAL))
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "--config", conf], stdout=subprocess.DEVNULL, stderr=log)
    rc = 1
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                check(proc.poll() is None and time.monotonic() < deadline,
                      "daemon did not start")
                time.sleep(0.05)
        steps = [
            ("one-way MD5", lambda: good_oneway(port, "5", 5)),
            ("one-way: strongest allowed of 8,7,5 is SHA-256", lambda: good_oneway(port, "8,7,5", 7)),
            ("one-way base64 CHAP_R", lambda: good_oneway(port, "7", 7, "base64")),
            ("mutual SHA3-256", lambda: good_mutual(port, "8,7,5")),
            ("mutual MD5", lambda: good_mutual(port, "5")),
            ("refusals", lambda: bad_cases(port)),
            ("back-off", lambda: backoff(port)),
        ]
        for label, fn in steps:
            try:
                fn()
                print("target_chap: %s: ok" % label, flush=True)
            except (hostile.TestFailure, OSError, hostile.Closed) as e:
                FAILURES.append("%s: %s" % (label, e))
            check(proc.poll() is None, "daemon died during %s" % label)
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(timeout=30) == 0, "daemon exit code %s" % proc.returncode)
        log.close()
        text = open(log_path, errors="replace").read()
        for s in SECRETS.values():
            check(s not in text, "a secret is in the daemon's log")
        check(text.count("status 0x0201") >= 14, "refusals not logged at warn")
        rc = 0 if not FAILURES else 1
    except hostile.TestFailure as e:
        FAILURES.append(str(e))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if FAILURES:
        print("target_chap: FAILED:\n  " + "\n  ".join(FAILURES))
        print(open(log_path, errors="replace").read()[-4000:])
        return 1
    print("target_chap: PASS")
    return rc


if __name__ == "__main__":
    sys.exit(main())
