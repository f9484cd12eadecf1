#!/usr/bin/env python3
"""Hostile-input integration test for linerate-target (issue 2, "Bad input").

usage: hostile.py PATH/TO/linerate-target

Starts the daemon on a free loopback port with a RAM LUN, logs one GOOD session in with a
small raw-socket iSCSI initiator and keeps using it (WRITE/READ 10 with immediate data and R2T,
TEST UNIT READY, data compared) between hostile actions, which are bounded in count and time:
  a) malformed PDUs         b) garbage login keys      c) garbage CDBs on the good session
  d) idle / half-open floods e) abrupt closes (RST) mid-login, mid-Data-Out, mid-Data-In
  f) I_T nexus loss: a session lost (RST) or reinstated leaves I_T NEXUS LOSS OCCURRED for its
     initiator port's next command, a Logout nothing
The daemon must answer with protocol answers (Reject, login status, CHECK CONDITION) or close
only the offending connection, never crash, keep its RSS bounded, and exit 0 on SIGTERM.
Python 3 standard library only."""

import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

TARGET = "iqn.2026-11.org.linerate:hostile"
INITIATOR = "iqn.2026-11.org.linerate:hostile-good"
LUN_BYTES = 64 << 20
BLOCK = 512
RSS_SLACK_KB = 200 * 1024
TEST_DEADLINE = time.monotonic() + 280  # meson timeout is 300 s

OP_NOP_OUT, OP_SCSI, OP_TMF, OP_LOGIN, OP_TEXT, OP_DATA_OUT, OP_LOGOUT, OP_SNACK = (
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x10)
OP_NOP_IN, OP_SCSI_RSP, OP_TMF_RSP, OP_LOGIN_RSP, OP_TEXT_RSP, OP_DATA_IN = (
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25)
OP_LOGOUT_RSP, OP_R2T, OP_ASYNC, OP_REJECT = 0x26, 0x31, 0x32, 0x3F
RSVD = 0xFFFFFFFF

FAILURES = []


class TestFailure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise TestFailure(what)


def budget_left():
    return TEST_DEADLINE - time.monotonic()


# ---------------------------------------------------------------- PDUs


def kv(pairs):
    out = b""
    for k, v in pairs:
        k = k.encode() if isinstance(k, str) else k
        v = v.encode() if isinstance(v, str) else v
        out += k + b"=" + v + b"\0"
    return out


def parse_kv(data):
    res = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            res[k.decode(errors="replace")] = v.decode(errors="replace")
    return res


def bhs(op, flags=0, lun=b"\0" * 8, itt=0, f20=0, f24=0, f28=0, rest=b"", dlen=None, data=b"",
        immediate=False, ahs_words=0):
    """48-byte BHS. Bytes 8-15 `lun` (or ISID+TSIH), 16 ITT, 20/24/28 words, 32-47 `rest`."""
    if dlen is None:
        dlen = len(data)
    h = bytes([op | (0x40 if immediate else 0), flags & 0xFF, 0, 0, ahs_words & 0xFF])
    h += (dlen & 0xFFFFFF).to_bytes(3, "big") + lun[:8].ljust(8, b"\0")
    h += struct.pack(">IIII", itt & RSVD, f20 & RSVD, f24 & RSVD, f28 & RSVD)
    h += rest[:16].ljust(16, b"\0")
    return h


def pad(data):
    return data + b"\0" * ((-len(data)) % 4)


def lun_field(lun):
    if lun < 256:
        return bytes([0, lun]) + b"\0" * 6
    return bytes([0x40 | (lun >> 8), lun & 0xFF]) + b"\0" * 6


class Closed(Exception):
    pass


class Conn:
    """A raw iSCSI connection (no digests)."""

    def __init__(self, port, timeout=5.0, src=None):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(src, 0) if src else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout

    def send(self, raw):
        self.sock.sendall(raw)

    def send_pdu(self, hdr, data=b""):
        self.sock.sendall(hdr + pad(data))

    def _recv_exact(self, n, deadline):
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                raise Closed("reset")
            if not chunk:
                raise Closed("closed")
            buf += chunk
        return buf

    def recv_pdu(self, timeout=None):
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        h = self._recv_exact(48, deadline)
        ahs = h[4] * 4
        dlen = int.from_bytes(h[5:8], "big")
        rest = self._recv_exact(ahs + dlen + ((-dlen) % 4), deadline) if ahs + dlen else b""
        return h, rest[ahs:ahs + dlen]

    def outcome(self, timeout=2.0):
        """'closed', 'timeout' or the first PDU received."""
        try:
            return self.recv_pdu(timeout)
        except Closed:
            return "closed"
        except socket.timeout:
            return "timeout"
        except OSError:
            return "closed"

    def wait_closed(self, timeout=3.0):
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.recv_pdu(deadline - time.monotonic())
        except Closed:
            return True
        except socket.timeout:
            return False
        except OSError:
            return True
        return False

    def reset(self):
        """Abortive close: RST instead of FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def login_pdu(pairs_or_bytes, csg=1, nsg=3, transit=True, cont=False, isid=None, tsih=0, itt=0,
              cmdsn=0, expstatsn=0, cid=0, vmax=0, vmin=0):
    data = pairs_or_bytes if isinstance(pairs_or_bytes, bytes) else kv(pairs_or_bytes)
    flags = (0x80 if transit else 0) | (0x40 if cont else 0) | (csg << 2) | nsg
    isid = isid or bytes([0x80, 0x00, 0x12, 0x34, 0x00, random.randrange(256)])
    h = bhs(OP_LOGIN, flags, isid + struct.pack(">H", tsih), itt, cid << 16, cmdsn, expstatsn,
            data=data, immediate=True)
    h = h[:2] + bytes([vmax, vmin]) + h[4:]
    return h, data


def login_status(h):
    return (h[36] << 8) | h[37]


# ---------------------------------------------------------------- the good initiator


class Session:
    """A minimal initiator for one normal session: login, SCSI commands with immediate data,
    R2T and Data-In, NOP answers."""

    count = 0
    conn_class = Conn  # a test may give its sessions a Conn that also does digests

    def __init__(self, port, name=INITIATOR, isid=None, want=None, src=None):
        self.port = port
        self.src = src  # source address (any 127.x.y.z): the target limits logins per address
        self.name = name
        # Each session its own ISID, from a qualifier no raw login PDU uses (those take
        # 80 00 12 34 00 xx): a successful login with the same name and ISID would reinstate
        # the session (RFC 7143 6.3.5) and close it under the test.
        Session.count += 1
        self.isid = isid or bytes([0x80, 0x00, 0x12, 0x35]) + struct.pack(">H", Session.count)
        self.itt = 0x100
        self.cmdsn = 1
        self.expstatsn = 0
        self.want = want or {}
        self.c = None

    def next_itt(self):
        self.itt = (self.itt + 1) & 0x7FFFFFFF
        return self.itt

    def login(self):
        self.c = self.conn_class(self.port, src=self.src)
        sec = [("InitiatorName", self.name), ("TargetName", TARGET), ("SessionType", "Normal"),
               ("AuthMethod", "None")]
        h, d = login_pdu(sec, csg=0, nsg=1, isid=self.isid, itt=self.next_itt(),
                         cmdsn=self.cmdsn)
        self.c.send_pdu(h, d)
        rh, rd = self.c.recv_pdu()
        check(rh[0] & 0x3F == OP_LOGIN_RSP, "good login: no Login Response")
        check(login_status(rh) == 0, "good login: security stage status 0x%04x" % login_status(rh))
        self.expstatsn = struct.unpack(">I", rh[24:28])[0] + 1
        ops = {"HeaderDigest": "None", "DataDigest": "None", "ImmediateData": "Yes",
               "InitialR2T": "Yes", "MaxRecvDataSegmentLength": "65536",
               "MaxBurstLength": "262144", "FirstBurstLength": "65536",
               "MaxOutstandingR2T": "1", "ErrorRecoveryLevel": "0"}
        ops.update(self.want)
        h, d = login_pdu(list(ops.items()), csg=1, nsg=3, isid=self.isid, itt=self.next_itt(),
                         cmdsn=self.cmdsn, expstatsn=self.expstatsn)
        self.c.send_pdu(h, d)
        rh, rd = self.c.recv_pdu()
        check(rh[0] & 0x3F == OP_LOGIN_RSP and login_status(rh) == 0,
              "good login: operational stage refused (0x%04x)" % login_status(rh))
        check(rh[1] & 0x80 and rh[1] & 3 == 3, "good login: no transit to full feature phase")
        keys = parse_kv(rd)
        self.keys = keys
        self.expstatsn = struct.unpack(">I", rh[24:28])[0] + 1
        self.tsih = struct.unpack(">H", rh[14:16])[0]
        self.target_mrdsl = int(keys.get("MaxRecvDataSegmentLength", "8192"))
        self.immediate = keys.get("ImmediateData", "Yes") == "Yes"
        self.first_burst = int(keys.get("FirstBurstLength", ops["FirstBurstLength"]))
        self.max_burst = int(keys.get("MaxBurstLength", ops["MaxBurstLength"]))
        return self

    def _sn(self, h):
        statsn = struct.unpack(">I", h[24:28])[0]
        if h[0] & 0x3F in (OP_SCSI_RSP, OP_TMF_RSP, OP_TEXT_RSP, OP_LOGOUT_RSP, OP_REJECT) or (
                h[0] & 0x3F == OP_DATA_IN and h[1] & 0x01) or (
                h[0] & 0x3F == OP_NOP_IN and struct.unpack(">I", h[16:20])[0] != RSVD):
            self.expstatsn = statsn + 1

    def recv(self, timeout=10.0):
        """Next PDU for us; target NOP-In pings are answered on the way."""
        while True:
            h, d = self.c.recv_pdu(timeout)
            op = h[0] & 0x3F
            self._sn(h)
            if op == OP_NOP_IN and struct.unpack(">I", h[16:20])[0] == RSVD:
                ttt = struct.unpack(">I", h[20:24])[0]
                if ttt != RSVD:
                    self.c.send_pdu(bhs(OP_NOP_OUT, 0x80, h[8:16], RSVD, ttt, self.cmdsn,
                                        self.expstatsn, immediate=True))
                continue
            if op == OP_ASYNC:
                continue
            return h, d

    def scsi(self, cdb, read_len=0, write_data=None, lun=0, timeout=10.0):
        """Returns (status, sense bytes, data-in bytes)."""
        itt = self.next_itt()
        wlen = len(write_data) if write_data is not None else 0
        flags = 0x80 | (0x40 if read_len else 0) | (0x20 if wlen else 0) | 0x01
        imm = b""
        if wlen and self.immediate:
            imm = write_data[:min(self.first_burst, self.target_mrdsl, wlen)]
        edtl = read_len or wlen
        h = bhs(OP_SCSI, flags, lun_field(lun), itt, edtl, self.cmdsn, self.expstatsn,
                cdb.ljust(16, b"\0"), data=imm)
        self.cmdsn += 1
        self.c.send_pdu(h, imm)
        data_in = bytearray(read_len)
        got = 0
        while True:
            rh, rd = self.recv(timeout)
            op = rh[0] & 0x3F
            check(struct.unpack(">I", rh[16:20])[0] == itt or op == OP_REJECT,
                  "response for ITT 0x%x, expected 0x%x" % (struct.unpack(">I", rh[16:20])[0], itt))
            if op == OP_R2T:
                ttt = struct.unpack(">I", rh[20:24])[0]
                off, want = struct.unpack(">II", rh[40:48])
                check(off + want <= wlen, "R2T beyond the write (off %d len %d)" % (off, want))
                sn = 0
                pos = off
                while pos < off + want:
                    n = min(self.target_mrdsl, off + want - pos)
                    last = pos + n == off + want
                    self.c.send_pdu(bhs(OP_DATA_OUT, 0x80 if last else 0, lun_field(lun), itt,
                                        ttt, 0, self.expstatsn, struct.pack(">III", 0, sn, pos),
                                        data=write_data[pos:pos + n]),
                                    write_data[pos:pos + n])
                    pos += n
                    sn += 1
            elif op == OP_DATA_IN:
                off = struct.unpack(">I", rh[40:44])[0]
                check(off + len(rd) <= read_len, "Data-In beyond EDTL")
                data_in[off:off + len(rd)] = rd
                got += len(rd)
                if rh[1] & 0x01:
                    return rh[3], b"", bytes(data_in[:got])
            elif op == OP_SCSI_RSP:
                check(rh[2] == 0, "SCSI Response: response 0x%02x" % rh[2])
                sense = b""
                if rd:
                    sl = struct.unpack(">H", rd[:2])[0]
                    sense = rd[2:2 + sl]
                return rh[3], sense, bytes(data_in[:got])
            elif op == OP_REJECT:
                raise TestFailure("good session: command rejected, reason 0x%02x" % rh[2])
            else:
                raise TestFailure("good session: unexpected %s" % hex(op))

    def scsi_retry_ua(self, cdb, **kw):
        for _ in range(4):
            st, sense, data = self.scsi(cdb, **kw)
            if st == 2 and len(sense) > 2 and sense[2] & 0x0F == 6:
                continue  # UNIT ATTENTION (power on, reset): retry
            return st, sense, data
        return st, sense, data

    def nop(self, timeout=5.0):
        itt = self.next_itt()
        self.c.send_pdu(bhs(OP_NOP_OUT, 0x80, b"\0" * 8, itt, RSVD, self.cmdsn, self.expstatsn,
                            data=b"ping"), b"ping")
        self.cmdsn += 1
        rh, rd = self.recv(timeout)
        check(rh[0] & 0x3F == OP_NOP_IN and struct.unpack(">I", rh[16:20])[0] == itt,
              "NOP-Out not answered")
        check(rd == b"ping", "NOP-In does not echo the ping data")

    def logout(self):
        itt = self.next_itt()
        self.c.send_pdu(bhs(OP_LOGOUT, 0x80, b"\0" * 8, itt, 0, self.cmdsn, self.expstatsn,
                            immediate=True))
        rh, _ = self.recv(5)
        check(rh[0] & 0x3F == OP_LOGOUT_RSP and rh[2] == 0, "logout refused")
        self.c.close()


def stop_process(pid, timeout=10.0):
    """SIGSTOP pid and return once every one of its threads is stopped. The signal only asks:
    a thread busy on a CPU stops when it next enters the kernel, so on a loaded machine a
    request sent right after kill() could still be served (a stalled-cluster test then sees
    GOOD). /proc/PID/task/*/stat state T (stopped) or t (traced) on every thread says done."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    # the state follows the command name, which is in parentheses
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:  # a thread that ended meanwhile
                pass
        if states and all(st in ("T", "t") for st in states):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("process %d not stopped after %.0f s: thread states %s" %
                               (pid, timeout, "".join(states)))
        time.sleep(0.01)


def end_process(proc, timeout):
    """SIGTERM to the subprocess.Popen PROC, still running, then SIGKILL if it has not exited
    within TIMEOUT seconds; returns once it is reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port():
    """A loopback TCP port free now (another process may take it before it is used)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cdb_rw10(op, lba, blocks):
    return struct.pack(">BBIBHB", op, 0, lba, 0, blocks, 0)


def sense_kaa(sense):
    """(key, asc, ascq) of fixed or descriptor sense."""
    if len(sense) < 3:
        return None
    if sense[0] & 0x7F in (0x72, 0x73):
        return sense[1] & 0x0F, sense[2], sense[3]
    if len(sense) < 14:
        return None
    return sense[2] & 0x0F, sense[12], sense[13]


# ---------------------------------------------------------------- the daemon


def main_per_reactors(run, doc):
    """The main() of a test that runs run(binary, threads) with one reactor and with two
    (usage: SCRIPT PATH/TO/linerate-target): 0 when both pass, 1 with the reason, 2 on bad
    usage."""
    if len(sys.argv) != 2:
        print(doc, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    try:
        for threads in (1, 2):
            run(binary, threads)
    except TestFailure as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    print("PASS")
    return 0


class Daemon:
    """linerate-target on a free loopback port (other tests reuse it with their own LUN,
    threads and log level)."""

    def __init__(self, binary, threads=2, lun="ram:%d" % LUN_BYTES, log_level="warn",
                 prefix="hostile-target-", config=None, extra=()):
        """lun: a --lun SPEC, or a list of them (LUN 0, 1, ... in order). config: global
        config-file lines ("login-timeout = 2"); the daemon is then started with --config and a
        file holding them, the portal and the target. extra: more arguments (--inject)."""
        luns = [lun] if isinstance(lun, str) else list(lun)
        self.binary = binary
        self.log = tempfile.NamedTemporaryFile(prefix=prefix, suffix=".log", delete=False)
        self.conf = None
        for attempt in range(5):
            self.port = free_port()
            args = [binary, "--listen", "127.0.0.1:%d" % self.port, "--target-name", TARGET]
            for spec in luns:
                args += ["--lun", spec]
            if config is not None:
                self.conf = tempfile.NamedTemporaryFile("w", prefix=prefix, suffix=".conf",
                                                        delete=False)
                self.conf.write("\n".join(list(config) + [
                    "portal = 127.0.0.1:%d" % self.port, "[target %s]" % TARGET] +
                    ["lun = %s" % spec for spec in luns]) + "\n")
                self.conf.close()
                args = [binary, "--config", self.conf.name]
            self.proc = subprocess.Popen(
                args + ["--threads", str(threads), "--log-level", log_level] + list(extra),
                stdout=subprocess.DEVNULL, stderr=self.log)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        raise TestFailure("daemon did not start listening")

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGTERM: the daemon must exit 0 within 15 s."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure("daemon did not exit within 15 s of SIGTERM")
        check(rc == 0, "daemon exited %d on SIGTERM" % rc)

    def rss_kb(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return -1

    def log_tail(self, n=40):
        try:
            with open(self.log.name, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


# ---------------------------------------------------------------- test driver


class Hostile:
    def __init__(self, binary):
        self.d = Daemon(binary)
        self.port = self.d.port
        self.rss0 = self.d.rss_kb()
        self.rss_max = self.rss0
        self.good = Session(self.port).login()
        self.lat = []
        self.nblocks = LUN_BYTES // BLOCK
        st, sense, _ = self.good.scsi_retry_ua(bytes(6))
        check(st == 0, "good session: first TEST UNIT READY failed")
        self.summary = []
        self.rng = random.Random(int(os.environ.get("HOSTILE_SEED", "7203")))

    # The good session must keep working: WRITE 10 (immediate + R2T), READ 10 back, TUR.
    def good_io(self, what=""):
        check(self.d.alive(), "daemon died (%s)\n%s" % (what, self.d.log_tail()))
        rss = self.d.rss_kb()
        self.rss_max = max(self.rss_max, rss)
        check(rss - self.rss0 < RSS_SLACK_KB,
              "daemon RSS grew from %d to %d kB (%s)" % (self.rss0, rss, what))
        t0 = time.monotonic()
        blocks = self.rng.choice([1, 8, 200, 256])
        lba = self.rng.randrange(0, self.nblocks - blocks)
        data = self.rng.randbytes(blocks * BLOCK)
        st, sense, _ = self.good.scsi(cdb_rw10(0x2A, lba, blocks), write_data=data)
        check(st == 0, "good session: WRITE 10 status 0x%02x sense %s after %s" %
              (st, sense.hex(), what))
        st, sense, back = self.good.scsi(cdb_rw10(0x28, lba, blocks), read_len=len(data))
        check(st == 0 and back == data, "good session: READ 10 mismatch after %s" % what)
        st, sense, _ = self.good.scsi(bytes(6))
        check(st == 0, "good session: TEST UNIT READY failed after %s" % what)
        dt = time.monotonic() - t0
        self.lat.append(dt)
        return dt

    def report(self, name, detail):
        line = "hostile: %-26s %s" % (name, detail)
        print(line, flush=True)
        self.summary.append(line)

    def ffp_session(self, **kw):
        """A throwaway logged-in session used for hostile FFP traffic."""
        s = Session(self.port, name="iqn.2026-11.org.linerate:hostile-%d" %
                    self.rng.randrange(1 << 30), **kw).login()
        st, _, _ = s.scsi_retry_ua(bytes(6))  # a new I_T nexus starts with a UNIT ATTENTION
        check(st == 0, "throwaway session: TEST UNIT READY failed")
        return s

    # ------------------------------------------------------------ (a) malformed PDUs

    def cat_malformed(self):
        counts = {"answered": 0, "closed": 0, "ignored": 0}
        checks = 0

        def tally(o):
            if o == "closed":
                counts["closed"] += 1
            elif o == "timeout":
                counts["ignored"] += 1
            else:
                counts["answered"] += 1

        # Random BHS bytes (and some random bytes after them) on fresh connections.
        for i in range(60):
            c = Conn(self.port)
            raw = self.rng.randbytes(48) + self.rng.randbytes(self.rng.randrange(0, 200))
            try:
                c.send(raw)
            except OSError:
                pass
            tally(c.outcome(0.3))
            c.reset()
            if i % 10 == 9:
                self.good_io("random BHS")

        # Every opcode with garbage fields before login: only a Login Request is answered.
        for op in range(64):
            c = Conn(self.port)
            h = bytearray(self.rng.randbytes(48))
            h[0] = op | (h[0] & 0x40)
            h[4] = 0
            h[5:8] = b"\0\0\0"
            c.send(bytes(h))
            o = c.outcome(2.0)
            if op == OP_LOGIN:
                check(o not in ("timeout",) and (o == "closed" or o[0][0] & 0x3F == OP_LOGIN_RSP),
                      "garbage Login Request: neither answered nor closed")
            else:
                check(o == "closed", "opcode 0x%02x before login: connection not closed (%r)" %
                      (op, o if isinstance(o, str) else o[0][:4].hex()))
            tally(o)
            c.close()
            checks += 1
        self.good_io("every opcode before login")

        # Every opcode with garbage fields in full feature phase (no data segment).
        s = self.ffp_session()
        for op in range(64):
            if op in (OP_LOGOUT,):
                continue
            h = bytearray(self.rng.randbytes(48))
            h[0] = op | 0x40
            h[4] = 0
            h[5:8] = b"\0\0\0"
            if op == OP_TMF and h[1] & 0x7F in (5, 6, 7):
                h[1] = (h[1] & 0x80) | 3  # no resets: they would (rightly) UA the good session
            try:
                s.c.send(bytes(h))
            except OSError:
                s = self.ffp_session()
                continue
            o = s.c.outcome(0.3)
            tally(o)
            if o == "closed":
                s = self.ffp_session()
        s.c.close()
        self.good_io("every opcode in FFP")

        # Data segment length 16 MB: refused before anything is allocated, in every phase.
        rss_before = self.d.rss_kb()
        for phase in ("login", "ffp-scsi", "ffp-nop", "ffp-text", "ffp-dataout"):
            if phase == "login":
                c = Conn(self.port)
                h, _ = login_pdu([("InitiatorName", INITIATOR)])
                h = h[:5] + b"\xff\xff\xff" + h[8:]
            else:
                s = self.ffp_session()
                c = s.c
                op = {"ffp-scsi": OP_SCSI, "ffp-nop": OP_NOP_OUT, "ffp-text": OP_TEXT,
                      "ffp-dataout": OP_DATA_OUT}[phase]
                h = bhs(op, 0xA1 if op == OP_SCSI else 0x80, b"\0" * 8, 7,
                        0xFFFFFF if op == OP_SCSI else RSVD, s.cmdsn, s.expstatsn,
                        cdb_rw10(0x2A, 0, 32768) if op == OP_SCSI else b"", dlen=0xFFFFFF)
            c.send(h)
            # Keep streaming (up to 16 MB) while the target lets us: it must close instead.
            chunk = b"\xAB" * 65536
            sent = 0
            c.sock.settimeout(2.0)
            try:
                while sent < (16 << 20):
                    c.sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            check(c.wait_closed(3.0), "16 MB data segment (%s): connection not closed" % phase)
            c.close()
            tally("closed")
            checks += 1
        rss_after = self.d.rss_kb()
        check(rss_after - rss_before < 64 * 1024,
              "RSS grew by %d kB after 16 MB data segments" % (rss_after - rss_before))
        self.good_io("16 MB data segments")

        # AHS length garbage: TotalAHSLength 255 words on a SCSI command (refused, the AHS is
        # skipped) and on a Login Request; and an AHS that never arrives.
        s = self.ffp_session()
        h = bhs(OP_SCSI, 0xC1, b"\0" * 8, 0x77, 512, s.cmdsn, s.expstatsn, bytes([0x28]) +
                bytes(15), ahs_words=255)
        s.c.send(h + self.rng.randbytes(255 * 4))
        o = s.c.outcome(2.0)
        check(o != "timeout", "SCSI command with a 1020-byte AHS: no answer")
        if o != "closed":
            check(o[0][0] & 0x3F == OP_REJECT, "SCSI command with AHS: answered with 0x%02x" %
                  o[0][0])
            s.cmdsn += 1
            s.nop()
        tally(o)
        s.c.close()
        c = Conn(self.port)
        h, d = login_pdu([("InitiatorName", INITIATOR), ("TargetName", TARGET)])
        h = h[:4] + b"\xff" + h[5:]
        c.send(h + self.rng.randbytes(1020) + pad(d))
        tally(c.outcome(2.0))
        c.close()
        c = Conn(self.port)
        c.send(h + b"\0" * 100)  # AHS promised, mostly missing, then close
        c.close()
        checks += 3
        self.good_io("AHS garbage")

        # Truncated PDUs, then close (FIN) or reset (RST).
        for cut in (1, 20, 47, 48, 60):
            for rst in (False, True):
                c = Conn(self.port)
                h, d = login_pdu([("InitiatorName", INITIATOR), ("TargetName", TARGET)] +
                                 [("X-pad%d" % i, "v" * 50) for i in range(5)])
                c.send((h + pad(d))[:cut])
                c.reset() if rst else c.close()
                checks += 1
        s = self.ffp_session()
        s.c.send(bhs(OP_SCSI, 0xA1, b"\0" * 8, 5, 4096, s.cmdsn, s.expstatsn,
                     cdb_rw10(0x2A, 0, 8), dlen=4096) + b"x" * 1000)
        s.c.reset()
        self.good_io("truncated PDUs")

        # SCSI command in a discovery session: Reject (protocol error), session goes on.
        c = Conn(self.port)
        h, d = login_pdu([("InitiatorName", INITIATOR), ("SessionType", "Discovery"),
                          ("AuthMethod", "None")], csg=0, nsg=1)
        c.send_pdu(h, d)
        rh, _ = c.recv_pdu()
        check(login_status(rh) == 0, "discovery login refused")
        statsn = struct.unpack(">I", rh[24:28])[0]
        h, d = login_pdu([("HeaderDigest", "None")], csg=1, nsg=3, isid=h[8:14],
                         expstatsn=statsn + 1)
        c.send_pdu(h, d)
        rh, _ = c.recv_pdu()
        check(login_status(rh) == 0 and rh[1] & 3 == 3, "discovery login: no FFP")
        c.send_pdu(bhs(OP_SCSI, 0xC1, b"\0" * 8, 9, 96, 0, 0, bytes([0x12, 0, 0, 0, 96, 0])))
        rh, _ = c.recv_pdu()
        check(rh[0] & 0x3F == OP_REJECT and rh[2] == 0x04,
              "SCSI command in a discovery session: got op 0x%02x reason 0x%02x" % (rh[0], rh[2]))
        c.send_pdu(bhs(OP_TMF, 0x81, b"\0" * 8, 10, 9, 0, 0), b"")
        rh, _ = c.recv_pdu()
        check(rh[0] & 0x3F == OP_REJECT, "TMF in a discovery session not rejected")
        c.send_pdu(bhs(OP_TEXT, 0x80, b"\0" * 8, 11, RSVD, 0, 0, data=kv([("SendTargets",
                                                                           "All")])),
                   kv([("SendTargets", "All")]))
        rh, rd = c.recv_pdu()
        check(rh[0] & 0x3F == OP_TEXT_RSP and TARGET.encode() in rd,
              "discovery session unusable after the Reject")
        c.close()
        checks += 3
        self.good_io("SCSI in discovery")

        # Data-Out with unknown ITT, unknown TTT and offsets beyond the buffer; out-of-window
        # CmdSN; duplicate ITT; unknown opcodes; SNACK. All on one throwaway session, which
        # must still work afterwards.
        s = self.ffp_session()
        s.c.send_pdu(bhs(OP_DATA_OUT, 0x80, b"\0" * 8, 0xDEAD, 0xBEEF, 0, s.expstatsn,
                         struct.pack(">III", 0, 0, 0), data=b"z" * 512), b"z" * 512)
        s.nop()
        # A write waiting for R2T data, then one bad Data-Out (wrong TTT, offsets beyond the
        # buffer or out of order, wrong DataSN, more than the R2T asked for). ERL 0 allows
        # dropping the PDU (then the good data completes the write), ending the command with
        # CHECK CONDITION once its data is in (RFC 7143 §7.8), or closing the connection.
        blocks = 16
        do_res = {"closed": 0, "dropped": 0, "rejected": 0, "terminated": 0}

        def start_write(sess, wd):
            itt = sess.next_itt()
            sess.c.send_pdu(bhs(OP_SCSI, 0xA1, b"\0" * 8, itt, len(wd), sess.cmdsn,
                                sess.expstatsn, cdb_rw10(0x2A, 1000, blocks)))  # no imm. data
            sess.cmdsn += 1
            rh, _ = sess.recv()
            check(rh[0] & 0x3F == OP_R2T, "write without immediate data: no R2T")
            return itt, struct.unpack(">I", rh[20:24])[0]

        def finish_write(sess, itt, ttt, wd, what):
            """Returns "dropped" (the bad PDU was ignored, the write completed) or "terminated"
            (RFC 7143 §7.8: the command ended with CHECK CONDITION, ABORTED COMMAND)."""
            sess.c.send_pdu(bhs(OP_DATA_OUT, 0x80, b"\0" * 8, itt, ttt, 0, sess.expstatsn,
                                struct.pack(">III", 0, 0, 0), data=wd), wd)
            rh, rd = sess.recv()
            check(rh[0] & 0x3F == OP_SCSI_RSP and struct.unpack(">I", rh[16:20])[0] == itt,
                  "write after %s: no status (op 0x%02x)" % (what, rh[0]))
            if rh[3] == 2:
                sense = rd[2:2 + struct.unpack(">H", rd[0:2])[0]] if len(rd) >= 2 else b""
                check(sense_kaa(sense)[0] == 0x0B,
                      "write after %s: CHECK CONDITION %s, not ABORTED COMMAND" %
                      (what, sense_kaa(sense)))
                return "terminated"
            check(rh[3] == 0, "write after %s: status 0x%02x" % (what, rh[3]))
            st, _, back = sess.scsi(cdb_rw10(0x28, 1000, blocks), read_len=len(wd))
            check(st == 0 and back == wd, "write after %s: data corrupted" % what)
            return "dropped"

        wlen = blocks * BLOCK
        bad = [("offset 1 GiB", 0, 1 << 30, 0, 512), ("offset = EDTL", 0, wlen, 0, 512),
               ("offset crossing the end", 0, wlen - 100, 0, 512),
               ("unknown TTT", 0x5555, 0, 0, 512), ("offset 0xfffffe00", 0, 0xFFFFFE00, 0, 1024),
               ("DataSN 77", 0, 0, 77, 512), ("longer than the R2T", 0, 0, 0, wlen + 512),
               ("unsolicited beyond FirstBurst", None, 0, 0, 512)]
        for what, tttx, off, dsn, n in bad:
            s = self.ffp_session(want={"InitialR2T": "Yes"})
            wd = self.rng.randbytes(wlen)
            itt, ttt = start_write(s, wd)
            payload = self.rng.randbytes(n)
            s.c.send_pdu(bhs(OP_DATA_OUT, 0, b"\0" * 8, itt,
                             RSVD if tttx is None else ttt ^ tttx, 0, s.expstatsn,
                             struct.pack(">III", 0, dsn, off), data=payload), payload)
            o = s.c.outcome(0.5)
            if o == "closed":
                do_res["closed"] += 1
            elif o == "timeout":
                do_res[finish_write(s, itt, ttt, wd, what)] += 1
            else:
                check(o[0][0] & 0x3F == OP_REJECT, "bad Data-Out (%s): answered with 0x%02x" %
                      (what, o[0][0]))
                do_res["rejected"] += 1
            s.c.close()
            checks += 1
        self.good_io("bad Data-Outs")
        # Duplicate ITT while a write is outstanding: Reject (task in progress) or ignored,
        # never a closed connection; then the write completes.
        s = self.ffp_session()
        wd = self.rng.randbytes(wlen)
        itt, ttt = start_write(s, wd)
        # (immediate: whether a rejected command uses up its CmdSN does not matter then)
        s.c.send_pdu(bhs(OP_SCSI, 0x81, b"\0" * 8, itt, 0, s.cmdsn, s.expstatsn, bytes(6),
                         immediate=True))
        o = s.c.outcome(1.0)
        dup_answer = "ignored"
        if o not in ("timeout", "closed"):
            check(o[0][0] & 0x3F in (OP_REJECT, OP_SCSI_RSP),
                  "duplicate ITT: unexpected opcode 0x%02x" % o[0][0])
            dup_answer = "reject 0x%02x" % o[0][2] if o[0][0] & 0x3F == OP_REJECT else "status"
        check(o != "closed", "duplicate ITT closed the connection")
        finish_write(s, itt, ttt, wd, "a duplicate ITT")
        # Commands out of CmdSN order within the window: a write (CmdSN n+1, unsolicited data
        # still to come) waits for CmdSN n; its last Data-Out arrives in the same burst, and
        # sometimes an ABORT TASK SET too. Each command is answered at most once, and the
        # connection stays usable.
        s2 = self.ffp_session(want={"InitialR2T": "No"})
        for rnd in range(6):
            c0 = s2.cmdsn
            ia, ib = s2.next_itt(), s2.next_itt()
            burst = (bhs(OP_SCSI, 0x21, b"\0" * 8, ia, 1024, c0 + 1, s2.expstatsn,
                         cdb_rw10(0x2A, 2000, 2), data=b"a" * 512) + b"a" * 512 +
                     bhs(OP_SCSI, 0x81, b"\0" * 8, ib, 0, c0, s2.expstatsn, bytes(6)))
            abort = rnd % 3 == 2
            if abort:
                burst += bhs(OP_TMF, 0x82, b"\0" * 8, s2.next_itt(), RSVD, c0 + 2, s2.expstatsn,
                             immediate=True)
            burst += bhs(OP_DATA_OUT, 0x80, b"\0" * 8, ia, RSVD, 0, s2.expstatsn,
                         struct.pack(">III", 0, 0, 512), data=b"c" * 512) + b"c" * 512
            s2.c.send(burst)
            s2.cmdsn = c0 + 2
            seen = {}
            while True:
                try:
                    rh, _ = s2.recv(0.7)
                except socket.timeout:
                    break
                check(rh[0] & 0x3F in (OP_SCSI_RSP, OP_TMF_RSP),
                      "reordered CmdSN: unexpected opcode 0x%02x" % rh[0])
                itt_r = struct.unpack(">I", rh[16:20])[0]
                seen[itt_r] = seen.get(itt_r, 0) + 1
            check(all(v == 1 for v in seen.values()),
                  "reordered CmdSN: a command was answered twice %r" % seen)
            check(seen.get(ib) == 1, "reordered CmdSN: CmdSN n not answered")
            check(abort or seen.get(ia) == 1, "reordered CmdSN: the queued write not answered")
            st, _, _ = s2.scsi(bytes(6))
            check(st == 0, "reordered CmdSN: session unusable afterwards")
        s2.logout()
        checks += 6
        # Out-of-window CmdSN (far ahead and behind): silently ignored (RFC 7143 4.2.2.1).
        for sn in (s.cmdsn + 100000, s.cmdsn - 50, s.cmdsn + 0x80000000):
            s.c.send_pdu(bhs(OP_SCSI, 0x81, b"\0" * 8, s.next_itt(), 0, sn, s.expstatsn,
                             bytes(6)))
        o = s.c.outcome(1.0)
        check(o == "timeout", "out-of-window CmdSN was answered or closed (%r)" %
              (o if isinstance(o, str) else hex(o[0][0])))
        st, _, _ = s.scsi(bytes(6))
        check(st == 0, "command after out-of-window ones failed")
        # Unknown opcodes and SNACK in FFP: Reject.
        rejects = []
        for op in (0x07, 0x0F, 0x1C, 0x3E, OP_SNACK):
            s.c.send_pdu(bhs(op, 0x80, b"\0" * 8, s.next_itt(), 0, s.cmdsn, s.expstatsn,
                             immediate=True))
            rh, _ = s.recv(3)
            check(rh[0] & 0x3F == OP_REJECT, "opcode 0x%02x: no Reject (got 0x%02x)" %
                  (op, rh[0]))
            rejects.append(rh[2])
        check(all(r in (0x04, 0x05) for r in rejects), "reject reasons %r" % rejects)
        # A Login Request in full feature phase: Reject.
        h, d = login_pdu([("InitiatorName", INITIATOR)])
        s.c.send_pdu(h, d)
        rh, _ = s.recv(3)
        check(rh[0] & 0x3F == OP_REJECT, "Login Request in FFP not rejected")
        s.nop()
        s.logout()
        checks += 16
        self.good_io("Data-Out/CmdSN/ITT/SNACK")
        self.report("a) malformed PDUs", "%d targeted checks ok; %d random/garbage PDUs: "
                    "%d answered, %d closed, %d ignored; bad Data-Out: %s; duplicate ITT: %s; "
                    "rss %d->%d kB" %
                    (checks, sum(counts.values()), counts["answered"], counts["closed"],
                     counts["ignored"], " ".join("%s %d" % x for x in do_res.items()),
                     dup_answer, self.rss0, self.d.rss_kb()))

    # ------------------------------------------------------------ (b) garbage login keys

    def login_expect(self, label, pdus, want_class, want_detail=None, results=None, also=()):
        """Send the login PDUs (C-bit continuations answered), expect a final status."""
        c = Conn(self.port)
        try:
            rh = None
            for i, (h, d) in enumerate(pdus):
                c.send_pdu(h, d)
                o = c.outcome(3.0)
                check(not isinstance(o, str),
                      "login '%s': %s instead of a Login Response" % (label, o))
                rh, rd = o
                check(rh[0] & 0x3F == OP_LOGIN_RSP,
                      "login '%s': opcode 0x%02x instead of a Login Response" % (label, rh[0]))
                if login_status(rh) != 0:
                    break
            st = login_status(rh)
            ok = (st >> 8) == want_class and (want_detail is None or (st & 0xFF) == want_detail)
            ok = ok or st in also
            check(ok, "login '%s': status 0x%04x, expected class %d detail %s" %
                  (label, st, want_class, "any" if want_detail is None else
                   "0x%02x" % want_detail))
            if st:
                check(c.wait_closed(3.0), "login '%s': connection not closed after refusal" %
                      label)
            if results is not None:
                results.append((label, st))
            return rh, rd
        finally:
            c.close()

    def cat_login(self):
        res = []
        ini = ("InitiatorName", INITIATOR)
        tgt = ("TargetName", TARGET)
        normal = [ini, tgt, ("SessionType", "Normal")]

        def one(pairs, **kw):
            return [login_pdu(pairs, **kw)]

        def chunks(data, csg=0, nsg=1, size=4096):
            """One text spread over C-bit continuation PDUs."""
            isid = bytes([0x80, 0, 0x12, 0x34, 0, 0x77])
            parts = [data[i:i + size] for i in range(0, len(data), size)]
            out = []
            for i, p in enumerate(parts):
                last = i == len(parts) - 1
                out.append(login_pdu(p, csg=csg, nsg=nsg, transit=last, cont=not last,
                                     isid=isid))
            return out

        self.login_expect("no '='", one(b"InitiatorName=" + INITIATOR.encode() +
                                        b"\0TargetName" + b"\0"), 2, 0x00, results=res)
        self.login_expect("empty key", one(b"=foo\0" + kv(normal)), 2, 0x00, results=res)
        self.login_expect("missing NUL", one(kv(normal) + b"AuthMethod=None"), 2, 0x00,
                          results=res)
        self.login_expect("10k key (C-bit PDUs)",
                          chunks(kv(normal) + b"K" * 10000 + b"=v\0"), 2, 0x00, results=res)
        self.login_expect("10k value of InitiatorName",
                          chunks(b"InitiatorName=" + b"v" * 10000 + b"\0" + kv([tgt])), 2,
                          None, results=res)
        self.login_expect("10k value of unknown key",
                          chunks(kv(normal) + b"X-org.linerate.junk=" + b"v" * 10000 + b"\0"),
                          2, 0x00, results=res)
        self.login_expect("64k+ of text (C-bit PDUs)",
                          chunks(kv(normal) + b"".join(b"X-k%d=%s\0" % (i, b"y" * 200)
                                                       for i in range(400))), 2, None,
                          results=res, also=(0x0302,))  # our 64 KiB text cap: out of resources
        self.login_expect("non-UTF8 InitiatorName",
                          one([("InitiatorName", b"iqn.2026-11.\xff\xfe\xc3\x28"), tgt]), 2,
                          None, results=res)
        self.login_expect("non-UTF8 TargetName",
                          one([ini, ("TargetName", b"iqn.2026-11.\xc3\x28\xa0\xa1")]), 2, None,
                          results=res)
        self.login_expect("duplicated InitiatorName", one(normal + [ini]), 2, 0x00,
                          results=res)
        self.login_expect("duplicated MaxBurstLength",
                          one(normal + [("MaxBurstLength", "8192"),
                                        ("MaxBurstLength", "8192")]), 2, 0x00, results=res)
        self.login_expect("bad stage CSG=2", one(normal, csg=2, nsg=3), 2, 0x00, results=res)
        self.login_expect("bad transit NSG<CSG", one(normal, csg=1, nsg=0), 2, 0x00,
                          results=res)
        self.login_expect("T and C both set", one(normal, cont=True), 2, 0x00, results=res)
        self.login_expect("first PDU in FFP stage", one(normal, csg=3, nsg=3), 2, 0x00,
                          results=res)
        self.login_expect("bad version (min 5)", one(normal, vmax=7, vmin=5), 2, 0x05,
                          results=res)
        self.login_expect("unknown target",
                          one([ini, ("TargetName", "iqn.2026-11.org.linerate:nope")]), 2, 0x03,
                          results=res)
        self.login_expect("missing InitiatorName", one([tgt, ("SessionType", "Normal")]), 2,
                          0x07, results=res)
        self.login_expect("missing TargetName", one([ini, ("SessionType", "Normal")]), 2, 0x07,
                          results=res)
        self.login_expect("unknown session type", one([ini, tgt, ("SessionType", "Bogus")]), 2,
                          None, results=res)
        # SessionType is leading-only (RFC 7143 13.21): not sent with a TSIH.
        self.login_expect("TSIH of no session", one([ini, tgt], tsih=0x7777), 2, 0x0A,
                          results=res)
        self.login_expect("operational key in security stage",
                          one(normal + [("MaxBurstLength", "8192")], csg=0, nsg=1), 2, 0x00,
                          results=res)
        self.login_expect("out-of-range MaxRecvDataSegmentLength",
                          one(normal + [("MaxRecvDataSegmentLength", "17")]), 2, 0x00,
                          results=res)
        # Second PDU of a login changing the ISID: initiator error.
        first = login_pdu(normal + [("AuthMethod", "None")], csg=0, nsg=0, transit=False,
                          isid=bytes([0x80, 0, 1, 2, 3, 4]))
        second = login_pdu([("HeaderDigest", "None")], csg=0, nsg=1,
                           isid=bytes([0x80, 0, 9, 9, 9, 9]))
        self.login_expect("ISID changed mid-login", [first, second], 2, 0x00, results=res)
        self.good_io("garbage login keys")
        # Unknown keys are legal (RFC 7143 6.2): answered NotUnderstood, the login goes on.
        rh, rd = self.login_expect("unknown keys",
                                   one(normal + [("X-org.linerate.unknown", "1"),
                                                 ("FooBar", "baz")]), 0, 0x00)
        ans = parse_kv(rd)
        check(ans.get("FooBar") == "NotUnderstood", "unknown key FooBar answered %r" %
              ans.get("FooBar"))
        res.append(("unknown keys -> NotUnderstood", 0))
        # A syntactically invalid value of a negotiated key: answered Reject (RFC 7143 6.2.2),
        # the key keeps its default and the login goes on.
        rh, rd = self.login_expect("garbage numeric value",
                                   one(normal + [("MaxBurstLength", "12ab")]), 0, 0x00)
        check(parse_kv(rd).get("MaxBurstLength") == "Reject",
              "MaxBurstLength=12ab answered %r" % parse_kv(rd).get("MaxBurstLength"))
        self.good_io("login keys")
        self.report("b) garbage login keys", "%d bad logins refused with the expected "
                    "status (details: %s), unknown keys answered NotUnderstood, a garbage number "
                    "Reject" % (len(res) - 1, " ".join(sorted({"%04x" % st for _, st in res if st}))))

    # ------------------------------------------------------------ (c) garbage CDBs

    def cat_cdb(self):
        g = self.good
        cases = [
            ("unknown opcode 0xff", bytes([0xFF]) + bytes(9), 0, (5, 0x20, 0x00)),
            ("unknown opcode 0x02", bytes([0x02]) + bytes(5), 0, (5, 0x20, 0x00)),
            ("unknown opcode 0xc5 (vendor)", bytes([0xC5]) + bytes(11), 0, (5, 0x20, 0x00)),
            ("INQUIRY EVPD=0 with a page", bytes([0x12, 0, 0x80, 0, 96, 0]), 96,
             (5, 0x24, 0x00)),
            ("INQUIRY unknown VPD page", bytes([0x12, 1, 0xEE, 0, 96, 0]), 96,
             (5, 0x24, 0x00)),
            ("READ CAPACITY 16 bad SA", bytes([0x9E, 0x1F]) + bytes(8) + bytes([0, 0, 0, 32]) +
             bytes(2), 32, (5, 0x24, 0x00)),
            ("REPORT LUNS alloc 4", bytes([0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0]), 4,
             (5, 0x24, 0x00)),
            ("READ 10 LBA = capacity", cdb_rw10(0x28, self.nblocks, 1), 512, (5, 0x21, 0x00)),
            ("READ 10 crossing the end", cdb_rw10(0x28, self.nblocks - 1, 2), 1024,
             (5, 0x21, 0x00)),
            ("READ 10 LBA 0xffffffff", cdb_rw10(0x28, 0xFFFFFFFF, 1), 512, (5, 0x21, 0x00)),
            ("READ 16 LBA 2^63", bytes([0x88, 0]) + struct.pack(">QIBB", 1 << 63, 1, 0, 0),
             512, (5, 0x21, 0x00)),
            ("READ 10 huge length", cdb_rw10(0x28, 0, 0xFFFF), 0xFFFF * 512, None),
            ("MODE SENSE bad page", bytes([0x1A, 0, 0x2E, 0, 192, 0]), 192, (5, 0x24, 0x00)),
        ]
        results = []
        for label, cdb, rlen, want in cases:
            st, sense, _ = g.scsi_retry_ua(cdb, read_len=rlen)
            kaa = sense_kaa(sense)
            if want is None:  # refused or served; either is fine, never a crash
                check(st in (0, 2), "%s: status 0x%02x" % (label, st))
                if st == 2:
                    check(kaa and kaa[0] == 5, "%s: sense %r" % (label, kaa))
            else:
                check(st == 2, "%s: status 0x%02x, expected CHECK CONDITION" % (label, st))
                check(kaa == want, "%s: sense %s, expected %s" % (
                    label, kaa and "%x/%02x/%02x" % kaa, "%x/%02x/%02x" % want))
            results.append(label)
        # WRITE beyond the end, with immediate data (data must be swallowed, status sent).
        st, sense, _ = g.scsi(cdb_rw10(0x2A, self.nblocks - 4, 8), write_data=bytes(4096))
        check(st == 2 and sense_kaa(sense) == (5, 0x21, 0x00),
              "WRITE 10 beyond the end: status 0x%02x sense %r" % (st, sense_kaa(sense)))
        # LUNs that do not exist.
        for lun in (1, 7, 255, 300):
            st, sense, _ = g.scsi(bytes(6), lun=lun)
            check(st == 2 and sense_kaa(sense) == (5, 0x25, 0x00),
                  "TUR on LUN %d: status 0x%02x sense %r" % (lun, st, sense_kaa(sense)))
            st, sense, _ = g.scsi(cdb_rw10(0x2A, 0, 1), write_data=bytes(512), lun=lun)
            check(st == 2 and sense_kaa(sense) == (5, 0x25, 0x00),
                  "WRITE on LUN %d: status 0x%02x sense %r" % (lun, st, sense_kaa(sense)))
        # Random CDBs (never with a write direction): any status, never a dead connection.
        statuses = {}
        for i in range(150):
            cdb = bytearray(self.rng.randbytes(16))
            if i % 2:  # a real opcode that only reads, with random fields
                cdb[0] = self.rng.choice([0x00, 0x03, 0x12, 0x1A, 0x5A, 0x25, 0x28, 0x88, 0xA8,
                                          0x9E, 0xA0, 0xA3, 0x35, 0x91, 0x2F, 0x8F, 0x5E])
                cdb[{0: 5, 1: 9, 2: 9, 4: 15, 5: 11}[cdb[0] >> 5]] = 0  # CONTROL byte
                if i % 4 == 1:
                    cdb[1] = 0  # flags/reserved bits: otherwise nearly always 24h/00h
                    cdb[2:6] = b"\0\0" + cdb[4:6]  # small LBAs / page codes
            if cdb[0] in (0x04, 0x2A, 0x0A, 0xAA, 0x8A, 0x2E, 0x8E, 0xAE, 0x41, 0x93, 0x15,
                          0x55, 0x3B, 0x1D, 0x42, 0x89, 0x3F, 0x07, 0x36):
                cdb[0] = 0xC0  # skip write-like commands: they would corrupt the LUN
            st, sense, _ = g.scsi(bytes(cdb), read_len=self.rng.choice([0, 512, 4096]))
            statuses[st] = statuses.get(st, 0) + 1
            if i % 50 == 49:
                self.good_io("random CDBs")
        self.good_io("garbage CDBs")
        self.report("c) garbage CDBs", "%d targeted CDBs + 9 out-of-range/no-LUN ok; 150 random: "
                    "status %s" % (len(results), ", ".join("0x%02x x%d" % kv_ for kv_ in
                                                          sorted(statuses.items()))))

    # ------------------------------------------------------------ (d) idle floods

    def cat_floods(self):
        socks = []
        half = []
        opened_idle = 0
        try:
            for i in range(300):
                try:
                    socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=5))
                    opened_idle += 1
                except OSError:
                    break
            h, d = login_pdu([("InitiatorName", INITIATOR), ("TargetName", TARGET)])
            for i in range(100):
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    s.sendall(h[:24])
                    half.append(s)
                except OSError:
                    break
            lat = []
            t_end = time.monotonic() + 10
            n = 0
            while n < 40 and time.monotonic() < t_end:
                lat.append(self.good_io("idle flood"))
                n += 1
            # A new session can log in while the flood is there: from another address, since
            # the flood's own (127.0.0.1) is at max-pending-logins-per-address.
            s2 = self.ffp_session(src="127.0.0.2")
            st, _, _ = s2.scsi_retry_ua(bytes(6))
            check(st == 0, "new session during the flood: TUR failed")
            s2.logout()
        finally:
            for s in socks + half:
                s.close()
        lat.sort()
        med = lat[len(lat) // 2]
        worst = lat[-1]
        check(worst < 2.0, "good I/O took %.3f s during the idle flood" % worst)
        self.good_io("after idle flood")
        self.report("d) idle floods", "%d idle + %d half-BHS connections; good I/O x%d: "
                    "median %.1f ms, max %.1f ms" % (opened_idle, len(half), len(lat),
                                                    med * 1000, worst * 1000))

    # ------------------------------------------------------------ (e) abrupt closes

    def cat_abrupt(self):
        n = {"mid-login": 0, "mid-Data-Out": 0, "mid-Data-In": 0, "mid-R2T wait": 0}
        big = 8 << 20
        for i in range(8):
            # mid-login: first PDU answered, then RST; and RST before the answer.
            c = Conn(self.port)
            h, d = login_pdu([("InitiatorName", INITIATOR), ("TargetName", TARGET),
                              ("AuthMethod", "None")], csg=0, nsg=0, transit=False)
            c.send_pdu(h, d)
            if i % 2:
                c.outcome(1.0)
            c.reset()
            n["mid-login"] += 1
            # mid-Data-Out of a large write: R2T answered partially, then RST.
            s = self.ffp_session(want={"MaxBurstLength": "16777215",
                                       "FirstBurstLength": "65536"})
            itt = s.next_itt()
            s.c.send_pdu(bhs(OP_SCSI, 0xA1, b"\0" * 8, itt, big, s.cmdsn, s.expstatsn,
                             cdb_rw10(0x2A, 0, big // BLOCK)))
            rh, _ = s.recv()
            check(rh[0] & 0x3F == OP_R2T, "large write: no R2T")
            ttt = struct.unpack(">I", rh[20:24])[0]
            sent = 0
            for k in range(1 + i % 4):
                payload = self.rng.randbytes(s.target_mrdsl)
                s.c.send_pdu(bhs(OP_DATA_OUT, 0, b"\0" * 8, itt, ttt, 0, s.expstatsn,
                                 struct.pack(">III", 0, k, sent), data=payload), payload)
                sent += len(payload)
            # and half of one more PDU
            s.c.send(bhs(OP_DATA_OUT, 0, b"\0" * 8, itt, ttt, 0, s.expstatsn,
                         struct.pack(">III", 0, 9, sent), dlen=s.target_mrdsl) + b"x" * 1000)
            s.c.reset()
            n["mid-Data-Out"] += 1
            # a write waiting for its R2T answer, never sent
            s = self.ffp_session()
            s.c.send_pdu(bhs(OP_SCSI, 0xA1, b"\0" * 8, s.next_itt(), 4096, s.cmdsn,
                             s.expstatsn, cdb_rw10(0x2A, 0, 8)))
            s.c.outcome(0.5)
            s.c.reset()
            n["mid-R2T wait"] += 1
            # mid-Data-In of a large read: a few KB read, then RST.
            s = self.ffp_session()
            s.c.send_pdu(bhs(OP_SCSI, 0xC1, b"\0" * 8, s.next_itt(), big, s.cmdsn, s.expstatsn,
                             cdb_rw10(0x28, 0, big // BLOCK)))
            try:
                s.c.sock.recv(4096 * (1 + i))
            except OSError:
                pass
            s.c.reset()
            n["mid-Data-In"] += 1
            self.good_io("abrupt closes")
        # A NEW login still works, and the good session too.
        s = self.ffp_session()
        st, _, _ = s.scsi_retry_ua(bytes(6))
        check(st == 0, "new session after abrupt closes: TUR failed")
        data = self.rng.randbytes(1 << 20)
        st, _, _ = s.scsi(cdb_rw10(0x2A, 4096, len(data) // BLOCK), write_data=data)
        check(st == 0, "new session after abrupt closes: 1 MiB WRITE failed")
        st, _, back = s.scsi(cdb_rw10(0x28, 4096, len(data) // BLOCK), read_len=len(data))
        check(st == 0 and back == data, "new session after abrupt closes: READ mismatch")
        s.logout()
        self.good_io("after abrupt closes")
        self.report("e) abrupt closes", "RST %s; new login + 1 MiB write/read ok" %
                    ", ".join("%s x%d" % x for x in n.items()))

    # ------------------------------------------------------------ (f) I_T nexus loss

    def cat_nexus_loss(self):
        # SAM-5 §6.3.4: a session that ends without a Logout is an I_T nexus loss, reported
        # as UNIT ATTENTION 29h/07h to the next command of that initiator port (same name and
        # ISID), once, and to no one else; a Logout is not.
        isid = bytes([0x80, 0x00, 0x4E, 0x58, 0x00, 0x01])

        def expect_loss(s, what):
            st, sense, _ = s.scsi(bytes(6))
            check(st == 2 and sense_kaa(sense) == (6, 0x29, 0x07),
                  "%s: TUR status 0x%02x sense %r, want UNIT ATTENTION 29h/07h" %
                  (what, st, sense_kaa(sense)))
            st, sense, _ = s.scsi(bytes(6))
            check(st == 0, "%s: 29h/07h reported twice (%r)" % (what, sense_kaa(sense)))

        s = Session(self.port, isid=isid).login()
        st, _, _ = s.scsi_retry_ua(bytes(6))  # the new nexus's power-on UA
        check(st == 0, "nexus loss: first TUR failed")
        s.c.reset()  # connection lost
        s = Session(self.port, isid=isid).login()
        expect_loss(s, "login after RST")
        s2 = Session(self.port, isid=isid).login()  # reinstates s (RFC 7143 §6.3.5)
        expect_loss(s2, "session reinstatement")
        s.c.close()
        st, sense, _ = self.good.scsi(bytes(6))
        check(st == 0, "nexus loss of another port reached the good session (%r)" %
              (sense_kaa(sense),))
        s2.logout()
        s3 = Session(self.port, isid=isid).login()
        st, sense, _ = s3.scsi(bytes(6))
        check(st == 0, "login after a Logout: TUR status 0x%02x sense %r, want GOOD" %
              (st, sense_kaa(sense)))
        s3.logout()
        self.good_io("nexus loss")
        self.report("f) I_T nexus loss", "29h/07h once after RST and after reinstatement, "
                    "none after Logout")

    def finish(self):
        self.good.logout()
        check(self.d.alive(), "daemon died before SIGTERM\n" + self.d.log_tail())
        self.d.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.d.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.d.proc.kill()
            self.d.proc.wait()
            raise TestFailure("daemon did not exit within 15 s of SIGTERM")
        check(rc == 0, "daemon exited %d on SIGTERM\n%s" % (rc, self.d.log_tail()))
        self.report("daemon", "alive throughout (max RSS %d kB, start %d kB), SIGTERM -> exit 0"
                    % (self.rss_max, self.rss0))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    if not os.access(binary, os.X_OK):
        print("hostile: %s is not executable" % binary, file=sys.stderr)
        return 2
    try:
        t = Hostile(binary)
    except (TestFailure, OSError) as e:
        print("hostile: FAIL: cannot set up: %s" % e)
        return 1
    failed = []
    cats = [("a", t.cat_malformed), ("b", t.cat_login), ("c", t.cat_cdb), ("d", t.cat_floods),
            ("e", t.cat_abrupt), ("f", t.cat_nexus_loss)]
    only = os.environ.get("HOSTILE_ONLY")
    for key, fn in cats:
        if only and key not in only:
            continue
        if budget_left() < 20:
            failed.append("%s: skipped, out of time" % key)
            continue
        try:
            fn()
        except (TestFailure, OSError, Closed) as e:
            msg = "%s: %s: %s" % (key, type(e).__name__, e)
            traceback.print_exc(file=sys.stdout)
            print("hostile: FAIL " + msg, flush=True)
            failed.append(msg)
            if not t.d.alive():
                break
            try:  # keep going with a fresh good session if ours was the casualty
                t.good.c.close()
                t.good = Session(t.port).login()
                t.good.scsi_retry_ua(bytes(6))
            except (TestFailure, OSError, Closed) as e2:
                failed.append("relogin after %s failed: %s" % (key, e2))
                break
    try:
        t.finish()
    except (TestFailure, OSError, Closed) as e:
        failed.append("finish: %s" % e)
    finally:
        if t.d.alive():
            t.d.proc.kill()
            t.d.proc.wait()
    if failed:
        print("hostile: FAILED:\n  " + "\n  ".join(failed))
        print("hostile: daemon log %s, tail:\n%s" % (t.d.log.name, t.d.log_tail(30)))
        return 1
    os.unlink(t.d.log.name)
    print("hostile: all categories passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
