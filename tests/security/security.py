#!/usr/bin/env python3
"""Attacks on linerate-target and the limits that hold under them (issue 11).

usage: security.py PATH/TO/linerate-target CATEGORY

Each category starts its own daemon on a free loopback port (hostile.py's Daemon, with a config
file for the limits under test), keeps a legitimate session logged in and doing I/O (WRITE +
READ back + compare, hostile.py's raw initiator) while the attack runs, and checks that the
attack is refused or throttled as docs/limits.md says, that the daemon's RSS (/proc/PID/status)
and descriptor count (/proc/PID/fd) stay bounded, and that the daemon exits 0 on SIGTERM.
Attackers use other loopback source addresses (127.0.x.y) than the legitimate initiator where
the per-address limits matter.

  backlog   a discovery session sends 64 KiB NOP-Out pings and never reads, for a minute
            (max-tx-backlog: the daemon stops reading it, RSS stays bounded, the legitimate
            session keeps its latency); a flood of PDUs it rejects, never read (RSS bounded, a few log lines)
  login     login-timeout is a deadline from accept: an idle connection, a one-byte-a-second
            login and an empty continued Login Request every 0.25 s are all cut at 2 s; 300
            refused logins leave a few log lines; max-pending-logins-per-address and
            max-pending-logins refuse connections past them
  protocol  FirstBurstLength answered clamped to MaxBurstLength (an immediate write of the
            answered first burst is accepted); immediate ABORT TASK with RefCmdSN = its own
            CmdSN is "task does not exist" and takes nothing; a READ flagged W and not R gets
            no Data-In and its data-out goes nowhere; 1300 non-immediate READs sent without
            reading are all answered
  sessions  max-sessions-per-target refuses one session too many with 0x0302, and
            max-discovery-sessions-per-address the 5th discovery session from one address
            (discovery sessions have their own budget); a session offering
            MaxConnections=16 takes 8 connections, the 9th is refused with 0x0206; 200 concurrent
            sessions, each logged out and in again 25 times (5000 logins): descriptors back to
            baseline, RSS back near it
  peers     key values with CR, LF and "<N>" are logged escaped, never as a line of their own;
            a normal login declaring SessionType=Discovery in the operational stage is refused
            with 0x0200
  discovery discovery sessions do not count in max-sessions: 4 held from one address leave
            normal logins their room; max-discovery-sessions(-per-address) refuse with 0x0302;
            discovery-idle-timeout closes a discovery session that answers NOP-In pings but
            sends no Text request, and keeps one that does
  guess     a CHAP guesser that abandons every connection not answered within 0.3 s learns
            nothing: after 3 wrong guesses the right secret is not answered sooner than a wrong
            one (the address's back-off applies before a response is checked); every
            abandoned attempt is logged as an authentication failure
  conns     4000 idle connections from 80 addresses held, 800 of them with half a BHS: each
            costs < 48 KiB of RSS; with a hard descriptor limit of 256, accept() failing with
            EMFILE pauses accepting (no busy loop), logged once, and a login works afterwards
  copy      two RAM LUNs; initiator A holds Exclusive Access on LUN 1: B's EXTENDED COPY sent
            to LUN 0 naming LUN 1 by its NAA, out of it and into it, is refused with COPY
            ABORTED, COPY TARGET DEVICE NOT REACHABLE and moves nothing
  reservations  an initiator registered with APTPL and holding Write Exclusive sends REGISTER
            AND MOVE with a TransportID whose name carries line breaks (a forged holder and
            registration of the saved state): refused 5/26h/00h, the state unchanged, the
            state file 0600 without that text; restarted with the same --state-dir the daemon
            comes up and the reservation is what the initiators were told
  resets    by default initiator A's TARGET COLD RESET is answered function rejected, logged
            once, and B's session and I/O carry on without a unit attention; with
            --target-cold-reset yes it is done and B's connection is closed
  metrics   the Prometheus endpoint: from one address, connections past the per-address bound
            get 503 at once, silent ones are cut within about a second (4 s allowed), and
            20 slow connections from 127.0.0.3 do not keep a scrape from 127.0.0.2 from being
            answered
  hosts     300 sessions of distinct initiators on one target (more than its former 256 I_T
            nexus slots): all log in; the last one meets the first one's Write Exclusive
            reservation and gets 2Ah/05h when the first preempts it; on a removable LUN
            added then, the last one's PREVENT holds the medium against the first's eject
  buffers   VERIFY BYTCHK=3 is charged its copy of the range (one connection's 64 MiB takes
            fewer than nine over 8 MiB); max-task-buffers: a peer's writes without data fill
            it, its next write gets TASK SET FULL, another session's BUSY; data-out-timeout
            closes the peer and frees the memory, a slow writer making progress is not cut;
            ERL 2 orphans stay charged for the target's Time2Wait + Time2Retain only

Counts are scaled for 2 shared CPUs under ASan (the whole suite runs in about a minute there).
Exit 0 when every check holds. Python 3 standard library only."""

import os
import random
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
import hostile  # noqa: E402
import pr_lib  # noqa: E402
import target_chap  # noqa: E402
from hostile import (OP_LOGIN_RSP, OP_NOP_IN, OP_NOP_OUT, OP_DATA_IN, OP_DATA_OUT, OP_R2T,  # noqa: E402
                     OP_REJECT, OP_SCSI, OP_SCSI_RSP, OP_SNACK, OP_TEXT, OP_TEXT_RSP, OP_TMF,
                     OP_TMF_RSP,
                     RSVD, TARGET, Closed, Conn, Daemon, Session, TestFailure, bhs, cdb_rw10, check,
                     free_port, kv, login_pdu,
                     login_status, lun_field, parse_kv)

BLOCK = 512
MIB = 1 << 20
KIB = 1 << 10
IO_SPAN = 1 << 20  # where the legitimate session writes and reads


def is_asan(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_text(d):
    with open(d.log.name, errors="replace") as f:
        return f.read()


class Bench:
    """One category's daemon, its legitimate session, and the bookkeeping of the checks."""

    def __init__(self, binary, name, config, log_level="warn", threads=2, extra=()):
        self.binary = binary
        self.asan = is_asan(binary)
        self.name = name
        self.d = Daemon(binary, threads=threads, lun="ram:%d" % (64 * MIB),
                        log_level=log_level, prefix="security-%s-" % name, config=config,
                        extra=extra)
        self.pid = self.d.proc.pid
        self.rng = random.Random(1107)
        self.lat = []
        try:
            self.good = Session(self.d.port, src="127.0.0.1").login()
            st, _, _ = self.good.scsi_retry_ua(bytes(6))
            check(st == 0, "legitimate session: first TEST UNIT READY status 0x%02x" % st)
            for lba in range(0, IO_SPAN // BLOCK, 256):
                st, _, _ = self.good.scsi(cdb_rw10(0x2A, lba, 256), write_data=bytes(128 * KIB))
                check(st == 0, "legitimate session: initial WRITE status 0x%02x" % st)
            self.io()
        except BaseException:
            self.kill()
            raise
        self.lat = []
        self.rss0 = rss_kb(self.pid)
        self.fd0 = nfds(self.pid)

    def say(self, what):
        print("security %s: %s" % (self.name, what), flush=True)

    def io(self, blocks=None):
        """WRITE + READ back + compare on the legitimate session; returns the seconds taken."""
        check(self.d.alive(), "daemon died\n" + self.d.log_tail())
        t0 = time.monotonic()
        blocks = blocks or self.rng.choice([1, 8, 128])
        # within the first MiB of the RAM LUN, written once at start: the LUN's own memory
        # must not count as growth
        lba = self.rng.randrange(0, IO_SPAN // BLOCK - blocks)
        data = self.rng.randbytes(blocks * BLOCK)
        st, sense, _ = self.good.scsi(cdb_rw10(0x2A, lba, blocks), write_data=data)
        check(st == 0, "legitimate WRITE status 0x%02x sense %s" % (st, sense.hex()))
        st, _, back = self.good.scsi(cdb_rw10(0x28, lba, blocks), read_len=len(data))
        check(st == 0 and back == data, "legitimate READ back differs (status 0x%02x)" % st)
        dt = time.monotonic() - t0
        self.lat.append(dt)
        return dt

    def rss_grew_kb(self):
        return rss_kb(self.pid) - self.rss0

    def finish(self):
        self.io()
        self.good.logout()
        check(self.d.alive(), "daemon died\n" + self.d.log_tail())
        self.d.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.d.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.d.proc.kill()
            self.d.proc.wait()
            raise TestFailure("daemon did not exit within 20 s of SIGTERM")
        check(rc == 0, "daemon exited %d on SIGTERM\n%s" % (rc, self.d.log_tail()))
        lat = sorted(self.lat) or [0]
        self.say("legitimate I/O x%d during the attacks: median %.1f ms, max %.1f ms; "
                 "SIGTERM -> exit 0" % (len(self.lat), lat[len(lat) // 2] * 1e3, lat[-1] * 1e3))
        for f in (self.d.log.name, self.d.conf.name if self.d.conf else None):
            if f:
                os.unlink(f)

    def kill(self):
        if self.d.alive():
            self.d.proc.kill()
            self.d.proc.wait()


def discovery_login(port, src, name="iqn.2026-11.org.evil:intruder"):
    """A discovery session, as any initiator may open one (no allow-list applies)."""
    c = Conn(port, src=src)
    h, d = login_pdu([("InitiatorName", name), ("SessionType", "Discovery"),
                      ("AuthMethod", "None")], csg=0, nsg=1, itt=1, cmdsn=1)
    c.send_pdu(h, d)
    rh, _ = c.recv_pdu()
    check(login_status(rh) == 0, "discovery login: security stage 0x%04x" % login_status(rh))
    h, d = login_pdu([("HeaderDigest", "None"), ("DataDigest", "None"),
                      ("MaxRecvDataSegmentLength", "65536")], csg=1, nsg=3, itt=2, cmdsn=1,
                     expstatsn=struct.unpack(">I", rh[24:28])[0] + 1, isid=h[8:14])
    c.send_pdu(h, d)
    rh, rd = c.recv_pdu()
    check(login_status(rh) == 0 and rh[1] & 3 == 3,
          "discovery login refused (0x%04x)" % login_status(rh))
    return c, int(parse_kv(rd).get("MaxRecvDataSegmentLength", "8192"))


def send_unread(sock, chunks, limit_bytes, stall_s, deadline):
    """Send chunk after chunk without ever reading, until limit_bytes are out, the peer stops
    taking them for stall_s, or the deadline. Returns the bytes sent."""
    sock.setblocking(False)
    sent = 0
    last_progress = time.monotonic()
    pending = b""
    i = 0
    while sent < limit_bytes and time.monotonic() < deadline:
        if not pending:
            pending = chunks[i % len(chunks)]
            i += 1
        try:
            n = sock.send(pending)
        except BlockingIOError:
            if time.monotonic() - last_progress > stall_s:
                break
            time.sleep(0.005)
            continue
        except OSError:
            break
        pending = pending[n:]
        sent += n
        last_progress = time.monotonic()
    return sent


# ---------------------------------------------------------------- backlog (defect 1)


def cat_backlog(binary):
    b = Bench(binary, "backlog", ["max-tx-backlog = 4M"], log_level="info")
    try:
        rss_bound = (160 if b.asan else 48) * KIB  # kB: 4 MiB backlog + buffers, not 256 MiB
        # 1. NOP-Out pings with 64 KiB of data each on a discovery session that never reads.
        atk, mrdsl = discovery_login(b.d.port, "127.0.3.1")
        ping = bytes(range(256)) * 256
        pdus = []
        for i in range(16):
            pdus.append(bhs(OP_NOP_OUT, 0x80, b"\0" * 8, 0x1000 + i, RSVD, 2, 0, data=ping,
                            immediate=True) + ping)
        result = {}
        flood_start = time.monotonic()
        t = threading.Thread(target=lambda: result.setdefault(
            "sent", send_unread(atk.sock, pdus, 256 * MIB, 3.0, time.monotonic() + 25)))
        t.start()
        worst_rss = 0
        while t.is_alive():
            b.io()
            worst_rss = max(worst_rss, b.rss_grew_kb())
        t.join()
        # ... and stays there, connected and never reading, for a minute in all, while the
        # legitimate session keeps doing I/O (the daemon may drop it once its NOP-In pings go
        # unanswered for nop-timeout: throttled either way)
        while time.monotonic() < flood_start + 60:
            b.io()
            worst_rss = max(worst_rss, b.rss_grew_kb())
            time.sleep(0.05)
        worst_rss = max(worst_rss, b.rss_grew_kb())
        sent = result.get("sent", 0)
        check(sent < 128 * MIB, "the daemon read %d MiB of pings that were never answered: "
              "it should have stopped reading at max-tx-backlog" % (sent // MIB))
        check(worst_rss < rss_bound, "RSS grew by %d kB under the NOP flood (bound %d kB)"
              % (worst_rss, rss_bound))
        b.say("NOP-Out flood, never read, for %.0f s: the daemon took %.1f MiB and stopped "
              "reading; RSS +%d kB at most (bound %d kB); legitimate I/O went on" %
              (time.monotonic() - flood_start, sent / MIB, worst_rss, rss_bound))
        # 2. PDUs the target rejects (SNACK: Reject 0x05), never read.
        rej, _ = discovery_login(b.d.port, "127.0.3.2", name="iqn.2026-11.org.evil:rejects")
        snack = bhs(OP_SNACK, 0x80, b"\0" * 8, RSVD, RSVD, 0, 0)
        burst = snack * 1000
        result = {}
        t = threading.Thread(target=lambda: result.setdefault(
            "sent", send_unread(rej.sock, [burst], 200000 * 48, 3.0, time.monotonic() + 25)))
        t.start()
        while t.is_alive():
            b.io()
            worst_rss = max(worst_rss, b.rss_grew_kb())
        t.join()
        worst_rss = max(worst_rss, b.rss_grew_kb())
        check(worst_rss < rss_bound, "RSS grew by %d kB under the reject flood" % worst_rss)
        rejects = log_text(b.d).count("reject SNACK")
        check(rejects <= 40, "%d log lines for rejected SNACKs: the lines must be rate-limited"
              % rejects)
        b.say("SNACK flood (%d PDUs sent, never read): %d reject lines logged, RSS +%d kB at "
              "most" % (result.get("sent", 0) // 48, rejects, worst_rss))
        atk.reset()
        rej.reset()
        time.sleep(0.3)
        b.io()
        b.finish()
    finally:
        b.kill()


# ---------------------------------------------------------------- login (defect 2, pending)


def time_to_close(c, action, limit_s):
    """Run action(c) every 0.25 s (or nothing) until the daemon closes c; seconds taken."""
    t0 = time.monotonic()
    c.sock.settimeout(0.25)
    while time.monotonic() - t0 < limit_s:
        try:
            if action:
                action(c)
            chunk = c.sock.recv(65536)
            if not chunk:
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - t0
    return None


def still_open(c, wait=0.3):
    c.sock.settimeout(wait)
    try:
        return c.sock.recv(1) != b""
    except socket.timeout:
        return True
    except OSError:
        return False


def cat_login(binary):
    b = Bench(binary, "login", ["login-timeout = 2"])
    try:
        cut = 2 + 1.0 + (1.5 if b.asan else 0.5)  # the deadline, the 1 s timer, slack
        # 1. idle: no byte at all
        c = Conn(b.d.port, src="127.0.4.1")
        dt = time_to_close(c, None, 8)
        check(dt is not None and dt < cut, "an idle connection was not closed at the login "
              "deadline (after %s s)" % dt)
        c.close()
        # 2. a login one byte every 0.25 s
        h, d = login_pdu([("InitiatorName", "iqn.2026-11.org.evil:slow"),
                          ("TargetName", TARGET)], csg=0, nsg=1, cont=True)
        raw = iter(h + d)
        c = Conn(b.d.port, src="127.0.4.2")

        def one_byte(c):
            c.sock.send(bytes([next(raw, 0)]))
        dt2 = time_to_close(c, one_byte, 8)
        check(dt2 is not None and dt2 < cut, "a one-byte-a-second login was not cut at the "
              "deadline (after %s s)" % dt2)
        c.close()
        # 3. a continued Login Request, then an empty one (C bit) every 0.25 s: each is a
        # complete PDU the target answers; the old idle timer never fired
        c = Conn(b.d.port, src="127.0.4.3")
        h, d = login_pdu([("InitiatorName", "iqn.2026-11.org.evil:chatty")], csg=0, nsg=1,
                         transit=False, cont=True, itt=7)
        c.send_pdu(h, d)
        empty, _ = login_pdu(b"", csg=0, nsg=1, transit=False, cont=True, itt=7,
                             isid=h[8:14])
        dt3 = time_to_close(c, lambda c: c.sock.send(empty), 8)
        check(dt3 is not None and dt3 < cut, "a connection sending an empty continued Login "
              "Request every 0.25 s stayed in the login phase (%s s)" % dt3)
        c.close()
        b.say("login-timeout 2 s is a deadline from accept: idle cut after %.1f s, one byte "
              "every 0.25 s after %.1f s, an empty Login Request every 0.25 s after %.1f s" %
              (dt, dt2, dt3))
        b.io()
        # 4. 300 connections whose login is refused (no such target): one log line each would
        # let any peer write the log at its connection rate
        for i in range(300):
            c = Conn(b.d.port, src="127.0.4.%d" % (10 + i % 200))
            h, d = login_pdu([("InitiatorName", "iqn.2026-11.org.evil:nosuch"),
                              ("TargetName", "iqn.2026-11.org.evil:nosuch")], csg=0, nsg=1)
            c.send_pdu(h, d)
            rh, _ = c.recv_pdu()
            check(login_status(rh) == 0x0203, "login to no target: status 0x%04x" %
                  login_status(rh))
            c.close()
        refused = log_text(b.d).count("login refused")
        check(refused <= 2 * 10, "%d 'login refused' lines for 300 refused logins: they must "
              "be rate-limited" % refused)
        b.say("300 logins refused (no such target): %d 'login refused' lines logged" % refused)
        b.finish()
    finally:
        b.kill()
    # the pending-login limits, with a login deadline long enough to hold connections
    per_addr, total = 16, 64
    b = Bench(binary, "pending", ["login-timeout = 30", "max-pending-logins-per-address = %d"
                                  % per_addr, "max-pending-logins = %d" % total])
    held = []
    try:
        # 4. pending logins per address: 16 held, the 17th..20th closed at once
        for i in range(per_addr):
            held.append(Conn(b.d.port, src="127.0.5.1"))
        time.sleep(0.2)
        refused = 0
        for i in range(4):
            c = Conn(b.d.port, src="127.0.5.1")
            if not still_open(c, 1.0):
                refused += 1
            c.close()
        check(all(still_open(c, 0.05) for c in held), "a connection within "
              "max-pending-logins-per-address was closed")
        check(refused == 4, "only %d of 4 connections past max-pending-logins-per-address "
              "(%d) were refused" % (refused, per_addr))
        # 5. in total: other addresses fill it up to 64, then even a new address is refused
        addr = 2
        while len(held) < total:
            for i in range(min(per_addr, total - len(held))):
                held.append(Conn(b.d.port, src="127.0.5.%d" % addr))
            addr += 1
        time.sleep(0.2)
        c = Conn(b.d.port, src="127.0.6.1")
        over_total = not still_open(c, 1.0)
        c.close()
        check(over_total, "a connection past max-pending-logins (%d) was not refused" % total)
        check(all(still_open(c, 0.05) for c in held), "a connection within max-pending-logins "
              "was closed")
        fds = nfds(b.pid)
        check(fds <= b.fd0 + total + 8, "the daemon holds %d descriptors (%d at start, limit "
              "%d pending)" % (fds, b.fd0, total))
        lat = b.io()
        check(lat < 2.0, "legitimate I/O took %.2f s while the pending logins were full" % lat)
        for c in held:
            c.close()
        held = []
        # the slots come back as the connections go
        deadline = time.monotonic() + 5
        while True:
            try:
                s2 = Session(b.d.port, name="iqn.2026-11.org.linerate:later",
                             src="127.0.5.1").login()
                break
            except (TestFailure, Closed, OSError):
                check(time.monotonic() < deadline, "no login possible after the pending "
                      "connections closed")
                time.sleep(0.2)
        s2.logout()
        b.say("max-pending-logins-per-address %d: 4 of 4 more from one address refused at "
              "once; max-pending-logins %d: a new address refused; %d descriptors (start %d); "
              "logins work again once they close" % (per_addr, total, fds, b.fd0))
        b.finish()
    finally:
        for c in held:
            c.close()
        b.kill()


# ---------------------------------------------------------------- protocol (defects 3-5)


def tmf(s, fn, rtt=0xFFFFFFFF, refcmdsn=0):
    """Immediate task management function fn on session s; its CmdSN is the next command's.
    Response code."""
    itt = s.next_itt()
    s.c.send_pdu(bhs(OP_TMF, 0x80 | fn, lun_field(0), itt, rtt, s.cmdsn, s.expstatsn,
                     struct.pack(">II", refcmdsn, 0), immediate=True))
    rh, _ = s.recv(5)
    check(rh[0] & 0x3F == OP_TMF_RSP, "TMF %d: op 0x%02x instead of a TMF Response"
          % (fn, rh[0]))
    return rh[2]


def tmf_abort(s, rtt, refcmdsn):
    """Immediate ABORT TASK on session s. Response code."""
    return tmf(s, 1, rtt, refcmdsn)


def proto_first_burst(b):
    """Defect 3: FirstBurstLength above MaxBurstLength; the answer is what is enforced."""
    for mb, fb in ((16384, 65536), (65536, 262144)):
        s = Session(b.d.port, name="iqn.2026-11.org.linerate:burst-%d" % mb,
                    want={"MaxBurstLength": str(mb), "FirstBurstLength": str(fb),
                          "MaxRecvDataSegmentLength": "262144"}).login()
        check(s.first_burst <= s.max_burst, "FirstBurstLength answered %d above "
              "MaxBurstLength %d" % (s.first_burst, s.max_burst))
        check(s.first_burst == mb, "FirstBurstLength answered %d, expected %d"
              % (s.first_burst, mb))
        s.scsi_retry_ua(bytes(6))
        data = b.rng.randbytes(64 * KIB)
        st, sense, _ = s.scsi(cdb_rw10(0x2A, 1000, 128), write_data=data)
        check(st == 0, "64 KiB write with %d bytes of immediate data: status 0x%02x" %
              (min(s.first_burst, 65536), st))
        st, _, back = s.scsi(cdb_rw10(0x28, 1000, 128), read_len=len(data))
        check(st == 0 and back == data, "64 KiB read back differs")
        s.logout()
    b.say("FirstBurstLength 65536 / MaxBurstLength 16384 answered 16384 (a 16 KiB immediate "
          "+ R2T write is GOOD); 262144 / 65536 answered 65536 (a 64 KiB immediate write is "
          "GOOD)")


def proto_abort(b):
    """Defect 4: immediate ABORT TASK for an unknown ITT, RefCmdSN = its own CmdSN (§11.5.1 c)."""
    s = Session(b.d.port, name="iqn.2026-11.org.linerate:abort").login()
    s.scsi_retry_ua(bytes(6))
    n = s.cmdsn
    rsp = tmf_abort(s, 0x5555555, n)
    check(rsp == 1, "immediate ABORT TASK with RefCmdSN = its CmdSN answered %d, expected "
          "1 (Task does not exist)" % rsp)
    try:
        st, _, _ = s.scsi(bytes(6), timeout=3)
    except socket.timeout:
        raise TestFailure("the command with CmdSN %d, issued after ABORT TASK named it, "
                          "was dropped unanswered" % n)
    check(st == 0, "TEST UNIT READY after the ABORT TASK: status 0x%02x" % st)
    # ... and RefCmdSN issued but not received (below the TMF's CmdSN) is still taken
    s.cmdsn += 1  # CmdSN n+1 "lost" on its way
    rsp = tmf_abort(s, 0x5555556, s.cmdsn - 1)
    check(rsp == 0, "ABORT TASK with RefCmdSN issued and not received answered %d" % rsp)
    st, _, _ = s.scsi(bytes(6), timeout=3)
    check(st == 0, "TEST UNIT READY after the taken CmdSN: status 0x%02x" % st)
    b.say("immediate ABORT TASK, RefCmdSN = its CmdSN -> 1 (Task does not exist), the "
          "command with that CmdSN answered; RefCmdSN below it -> 0, the window moved on")
    s.logout()


def proto_read_w(b):
    """Defect 5: a READ flagged W and not R, with immediate data. Neither direction the bits
    name is the command's (RFC 7143 §11.3.5): the initiator expects no input, so it gets no
    Data-In (GOOD, residual overflow of all the READ produced: libiscsi's Read10Invalid wants
    GOOD), and its data-out is dropped. It must not land anywhere: a direct READ's buffers are
    the LUN's own memory, or the zero buffer every never-written block is sent from."""
    s = Session(b.d.port, name="iqn.2026-11.org.linerate:readw").login()
    s.scsi_retry_ua(bytes(6))
    check(s.immediate, "the session did not get ImmediateData=Yes")
    lba = 3000  # never written by this suite
    junk = bytes([0xA5]) * (8 * BLOCK)
    itt = s.next_itt()
    s.c.send_pdu(bhs(OP_SCSI, 0x80 | 0x20 | 0x01, lun_field(0), itt, 8 * BLOCK, s.cmdsn,
                     s.expstatsn, cdb_rw10(0x28, lba, 8).ljust(16, b"\0"), data=junk), junk)
    s.cmdsn += 1
    rh, rd = s.recv(5)
    check(rh[0] & 0x3F == OP_SCSI_RSP,
          "READ with W set and R clear answered op 0x%02x, expected a SCSI Response without "
          "Data-In" % (rh[0] & 0x3F))
    check(struct.unpack(">I", rh[16:20])[0] == itt, "the SCSI Response is for another ITT")
    residual = struct.unpack(">I", rh[44:48])[0]
    check(rh[3] == 0 and rh[1] & 0x04 and residual == 8 * BLOCK,
          "READ with W set and R clear: status 0x%02x flags 0x%02x residual %d, expected GOOD "
          "with an overflow of %d" % (rh[3], rh[1], residual, 8 * BLOCK))
    st, _, back = s.scsi(cdb_rw10(0x28, lba, 8), read_len=8 * BLOCK)
    check(st == 0 and back == bytes(8 * BLOCK), "the READ's data-out reached the blocks it read")
    st, _, back = s.scsi(cdb_rw10(0x28, lba + 4096, 256), read_len=256 * BLOCK)
    check(st == 0 and back == bytes(256 * BLOCK),
          "the READ's data-out reached the zero buffer: never-written blocks read non-zero")
    b.say("READ(10) with W set, R clear and 4 KiB of immediate data -> GOOD, no Data-In, "
          "residual overflow 4096; the data went nowhere (the blocks and never-written ones "
          "still read zeros)")
    s.logout()


def proto_read_burst(b):
    """Defect 5: 1300 non-immediate READs of 64 KiB sent without reading: the window the
    target grants keeps moving as it queues answers, so every one is inside it and answered
    (the per-connection task cap, 1024, is for immediate commands: Reject 0x06)."""
    s = Session(b.d.port, name="iqn.2026-11.org.linerate:burst").login()
    s.scsi_retry_ua(bytes(6))
    count = 1300
    first_itt = 0x200000
    pdus = []
    for i in range(count):
        pdus.append(bhs(OP_SCSI, 0x80 | 0x40 | 0x01, lun_field(0), first_itt + i, 64 * KIB,
                        s.cmdsn + i, s.expstatsn, cdb_rw10(0x28, 0, 128).ljust(16, b"\0")))
    s.cmdsn += count
    blob = b"".join(pdus)
    sender = threading.Thread(target=lambda: s.c.sock.sendall(blob))
    s.c.sock.settimeout(30)
    sender.start()
    time.sleep(1.0)  # let the answers pile up unread
    done = rejects = 0
    while done + rejects < count:
        rh, rd = s.recv(10)
        op = rh[0] & 0x3F
        if op == OP_REJECT:
            rejects += 1
        elif op == OP_SCSI_RSP or (op == OP_DATA_IN and rh[1] & 0x01):
            done += 1
    sender.join()
    check(rejects == 0, "%d of %d non-immediate READs inside the window were rejected"
          % (rejects, count))
    st, _, _ = s.scsi(bytes(6), timeout=5)
    check(st == 0, "TEST UNIT READY after the READ burst: status 0x%02x" % st)
    s.logout()
    b.say("%d non-immediate 64 KiB READs sent unread: all answered, none rejected" % count)


def cat_protocol(binary):
    parts = [("first-burst", proto_first_burst), ("abort", proto_abort),
             ("read-w", proto_read_w), ("read-burst", proto_read_burst)]
    only = os.environ.get("SECURITY_ONLY", "").split(",")
    b = Bench(binary, "protocol", [])
    try:
        for name, fn in parts:
            if only == [""] or name in only:
                fn(b)
                b.io()
        b.finish()
    finally:
        b.kill()


# ---------------------------------------------------------------- sessions


def join_session(port, s, cid):
    """Log a new connection (CID cid) into session s (its ISID and TSIH); (conn, status)."""
    c = Conn(port, src="127.0.0.1")
    # SessionType is a leading-only key (§13.21): not sent on a connection that joins
    h, d = login_pdu([("InitiatorName", s.name), ("TargetName", TARGET),
                      ("AuthMethod", "None")], csg=0, nsg=1, isid=s.isid, tsih=s.tsih, cid=cid, itt=0x7000 + cid, cmdsn=s.cmdsn)
    c.send_pdu(h, d)
    rh, _ = c.recv_pdu()
    if login_status(rh):
        return c, login_status(rh)
    h, d = login_pdu([("HeaderDigest", "None"), ("DataDigest", "None"),
                      ("MaxRecvDataSegmentLength", "65536")], csg=1, nsg=3, isid=s.isid,
                     tsih=s.tsih, cid=cid, itt=0x7000 + cid, cmdsn=s.cmdsn,
                     expstatsn=struct.unpack(">I", rh[24:28])[0] + 1)
    c.send_pdu(h, d)
    rh, _ = c.recv_pdu()
    return c, login_status(rh)


def cat_sessions(binary):
    nsess, rounds = 200, 25  # 5000 logins and logouts, as issue 11 asks
    b = Bench(binary, "sessions", ["max-sessions = %d" % (nsess + 10),
                                   "max-sessions-per-target = %d" % (nsess + 2)])
    sessions = []
    try:
        def new(i, r):
            s = Session(b.d.port, name="iqn.2026-11.org.linerate:many-%d" % i,
                        isid=bytes([0x80, 0, r & 0xFF, 0, i >> 8, i & 0xFF]),
                        src="127.0.7.%d" % (1 + i % 200))
            return s.login()
        for i in range(nsess):
            sessions.append(new(i, 0))
        # the per-target limit: the good session and 200 more are 201; one more fits, the
        # next is refused with Out of resources
        extra = new(900, 0)
        try:
            new(901, 0)
            raise TestFailure("a session past max-sessions-per-target was accepted")
        except TestFailure as e:
            check("0x0302" in str(e) or "operational stage refused" in str(e),
                  "the session past the limit: %s" % e)
        extra.logout()
        time.sleep(0.3)  # the logged-out session leaves the table once its answer is sent
        # discovery sessions have their own budget, not max-sessions: from one address
        # max-discovery-sessions-per-address (4 by default) fit beside the 201 normal ones
        discs = []
        try:
            while len(discs) < 20:
                discs.append(discovery_login(b.d.port, "127.0.7.250")[0])
        except TestFailure as e:
            check("0x0302" in str(e), "discovery session past its limit: %s" % e)
        check(len(discs) == 4, "%d discovery sessions from one address fitted beside %d "
              "normal ones (expected 4, max-discovery-sessions-per-address)" %
              (len(discs), nsess + 1))
        for c in discs:
            c.close()
        b.say("max-sessions-per-target %d: the session past it refused with 0x0302; "
              "%d discovery sessions from one address fitted beside %d normal ones, the next "
              "refused with 0x0302" % (nsess + 2, len(discs), nsess + 1))
        for s in sessions:
            s.scsi_retry_ua(bytes(6))
        for s in sessions:
            s.logout()
        sessions = []
        time.sleep(0.5)
        # connections per session: MaxConnections offered 16, answered 8; the 9th is refused
        mcs = Session(b.d.port, name="iqn.2026-11.org.linerate:mcs",
                      want={"MaxConnections": "16"}).login()
        joined = []
        status = 0
        for cid in range(1, 9):
            c, status = join_session(b.d.port, mcs, cid)
            if status:
                c.close()
                break
            joined.append(c)
        check(len(joined) == 7 and status == 0x0206, "%d connections joined a session of "
              "MaxConnections 8 before a refusal 0x%04x (expected 7 and 0x0206)" %
              (len(joined), status))
        for c in joined:
            c.close()
        mcs.logout()
        b.say("MaxConnections offered 16 (the target's limit is 8): 7 more connections joined, "
              "the 9th was refused with 0x0206 (too many connections)")
        time.sleep(0.5)
        fd_warm, rss_warm = nfds(b.pid), rss_kb(b.pid)
        t0 = time.monotonic()
        sessions = [new(i, 1) for i in range(nsess)]
        logins = nsess
        for r in range(2, rounds + 1):
            for i in range(nsess):
                sessions[i].logout()
                sessions[i] = new(i, r)
                logins += 1
            b.io()
        for s in sessions:
            st, _, _ = s.scsi_retry_ua(bytes(6))
            check(st == 0, "TEST UNIT READY on a cycled session: 0x%02x" % st)
        fd_held = nfds(b.pid)
        for s in sessions:
            s.logout()
        sessions = []
        time.sleep(0.5)
        fd_end, rss_end = nfds(b.pid), rss_kb(b.pid)
        check(fd_end <= fd_warm + 1, "descriptors: %d after the cycles, %d before" %
              (fd_end, fd_warm))
        slack = (48 if b.asan else 8) * KIB
        check(rss_end - rss_warm < slack, "RSS %d kB after %d logins, %d kB before (slack %d)"
              % (rss_end, logins, rss_warm, slack))
        b.say("%d concurrent sessions, %d logins/logouts in %.1f s: descriptors %d held, "
              "%d -> %d after; RSS %d -> %d kB" % (nsess, logins, time.monotonic() - t0,
                                                   fd_held, fd_warm, fd_end, rss_warm, rss_end))
        b.finish()
    finally:
        for s in sessions:
            s.c.close()
        b.kill()


def cat_hosts(binary):
    """More initiator ports than the 256 I_T nexus slots a target had (issue 29 item 8): every
    one logs in, and a reservation and the unit attention its preemption raises reach the
    last of them, and only it."""
    nsess = 300
    work = tempfile.mkdtemp(prefix="security-hosts-")
    sock = os.path.join(work, "ctl.sock")
    b = Bench(binary, "hosts", ["max-sessions = %d" % (nsess + 10),
                                "max-sessions-per-target = %d" % (nsess + 5),
                                "ctl-socket = %s" % sock])
    sessions = []
    try:
        t0 = time.monotonic()
        for i in range(nsess):
            s = Session(b.d.port, name="iqn.2026-11.org.linerate:host-%d" % i,
                        isid=bytes([0x80, 0, 0x29, 0, i >> 8, i & 0xFF]),
                        src="127.0.8.%d" % (1 + i % 200))
            sessions.append(s.login())
            st, _, _ = s.scsi_retry_ua(bytes(6))  # the new nexus's power-on UA
            check(st == 0, "session %d: TEST UNIT READY status 0x%02x" % (i, st))
        t_login = time.monotonic() - t0
        first, mid, last = sessions[0], sessions[nsess // 2], sessions[-1]
        check(prout(last, 0, 0, 0, 0, 0xB) == 0, "REGISTER from the last session")
        check(prout(first, 0, 0, 0, 0, 0xA) == 0, "REGISTER from the first session")
        check(prout(first, 0, 1, 1, 0xA) == 0, "RESERVE Write Exclusive from the first")
        lba = IO_SPAN // BLOCK  # past the legitimate session's span
        st, _, _ = last.scsi(cdb_rw10(0x2A, lba, 1), write_data=bytes(BLOCK))
        check(st == 0x18, "WRITE from the last session (%d nexuses) under another's Write "
              "Exclusive: status 0x%02x, expected RESERVATION CONFLICT" % (nsess + 1, st))
        # PREEMPT removes the last session's registration: 2Ah/05h REGISTRATIONS PREEMPTED
        # for it (SPC-4 §5.13.11.2.4), nothing for a nexus that was not registered
        check(prout(first, 0, 4, 1, 0xA, 0xB) == 0, "PREEMPT of the last session's key")
        st, sense, _ = last.scsi(bytes(6))
        check(st == 2 and hostile.sense_kaa(sense) == (6, 0x2A, 0x05),
              "the last session's next command after its registration was preempted: status "
              "0x%02x sense %s, expected UNIT ATTENTION 2Ah/05h" % (st, sense.hex()))
        st, sense, _ = mid.scsi(bytes(6))
        check(st == 0, "an unregistered session's TEST UNIT READY: 0x%02x %s" %
              (st, sense.hex()))
        check(prout(first, 0, 3, 0, 0xA) == 0, "CLEAR from the first session")
        st, _, _ = last.scsi(cdb_rw10(0x2A, lba, 1), write_data=bytes(BLOCK))
        check(st == 0, "WRITE from the last session once the reservation is cleared: 0x%02x"
              % st)
        # a removable LUN added now, with more than 256 nexuses there: each meets it with a
        # power-on UA, and the last one's PREVENT ALLOW MEDIUM REMOVAL holds its medium
        # against the first one's eject (SPC-4 §6.13)
        r = subprocess.run([os.path.join(os.path.dirname(binary), "linerate-ctl"), "--socket",
                            sock, "add", "lun", hostile.TARGET, "ram:8M,removable", "--lun", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        check(r.returncode == 0, "linerate-ctl add lun: exit %d %s" % (r.returncode, r.stdout))
        st, sense, _ = last.scsi(bytes(6), lun=1)
        check(st == 2 and hostile.sense_kaa(sense)[:2] == (6, 0x29),
              "the last session's first command to the added LUN: status 0x%02x sense %s, "
              "expected UNIT ATTENTION 29h" % (st, sense.hex()))
        eject = bytes([0x1B, 0, 0, 0, 0x02, 0])  # START STOP UNIT LOEJ=1 START=0
        st, _, _ = last.scsi_retry_ua(bytes([0x1E, 0, 0, 0, 1, 0]), lun=1)
        check(st == 0, "PREVENT from the last session: 0x%02x" % st)
        st, sense, _ = first.scsi_retry_ua(eject, lun=1)
        check(st == 2 and hostile.sense_kaa(sense) == (5, 0x53, 0x02),
              "eject from the first session while the last one prevents removal: status "
              "0x%02x sense %s, expected 5/53h/02h" % (st, sense.hex()))
        st, _, _ = last.scsi(bytes([0x1E, 0, 0, 0, 0, 0]), lun=1)
        check(st == 0, "ALLOW from the last session: 0x%02x" % st)
        st, sense, _ = first.scsi(eject, lun=1)
        check(st == 0, "eject once allowed: 0x%02x %s" % (st, sense.hex()))
        for s in sessions:
            s.logout()
        sessions = []
        b.say("%d sessions of distinct initiators on one target (%d nexuses with the "
              "legitimate one), logged in in %.1f s; the last one met the first one's "
              "reservation, got 2Ah/05h when preempted, a middle one nothing; on a LUN "
              "added then, its PREVENT held the medium against the first one's eject" %
              (nsess, nsess + 1, t_login))
        b.good.scsi_retry_ua(bytes(6))  # the added LUN's 3Fh/0Eh REPORTED LUNS DATA CHANGED
        b.finish()
    finally:
        for s in sessions:
            s.c.close()
        b.kill()
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- what a peer sends


def login_answer(port, src, first, second=None):
    """A login whose first request (security stage) holds `first` and, when it is accepted,
    an operational request holding `second` that asks for full feature phase. Returns the
    Conn, the last status and the last answer's keys."""
    c = Conn(port, src=src)
    h, d = login_pdu(first, csg=0, nsg=1, itt=1, cmdsn=1)
    c.send_pdu(h, d)
    rh, rd = c.recv_pdu()
    if login_status(rh) or second is None:
        return c, login_status(rh), parse_kv(rd)
    h, d = login_pdu(second, csg=1, nsg=3, itt=2, cmdsn=1, isid=h[8:14],
                     expstatsn=struct.unpack(">I", rh[24:28])[0] + 1)
    c.send_pdu(h, d)
    rh, rd = c.recv_pdu()
    return c, login_status(rh), parse_kv(rd)


def send_targets_all(c):
    """SendTargets=All on a logged-in connection: the answer's text."""
    data = kv([("SendTargets", "All")])
    c.send_pdu(bhs(OP_TEXT, 0x80, b"\0" * 8, 3, RSVD, 1, 0, data=data), data)
    rh, rd = c.recv_pdu()
    return rh, rd


def cat_peers(binary):
    b = Bench(binary, "peers", [])
    ini = "iqn.2026-11.org.evil:forger"
    try:
        # 1. control characters in key values never make a log line of their own
        forged = [("SessionType", "x\n<2>FORGED-A line"), ("AuthMethod", "Bad\r\n<3>FORGED-B"),
                  ("MaxRecvDataSegmentLength", "1\n<2>FORGED-C")]
        want = {"SessionType": 0x0209, "AuthMethod": 0x0201}
        for key, value in forged[:2]:
            c, st, _ = login_answer(b.d.port, "127.0.8.1", [("InitiatorName", ini),
                                                             ("TargetName", TARGET), (key, value)])
            c.close()
            check(st == want[key], "%s=%r: login status 0x%04x (expected 0x%04x)" %
                  (key, value, st, want[key]))
        c, st, _ = login_answer(b.d.port, "127.0.8.1", [("InitiatorName", ini),
                                                         ("TargetName", TARGET),
                                                         ("AuthMethod", "None")], [forged[2]])
        c.close()
        check(st == 0x0200, "%s=%r: login status 0x%04x" % (forged[2] + (st,)))
        time.sleep(0.3)
        text = log_text(b.d)
        for key, value in forged:
            tag = value.split("<")[1]
            check(tag in text, "the refusal of %s=%r was not logged" % (key, value))
            for line in text.splitlines():
                check(not line.startswith("<") and not line.startswith(tag),
                      "a log line forged by %s=%r: %r" % (key, value, line))
        check(len([ch for ch in text if ch == "\r"]) == 0, "a carriage return in the log")
        b.say("SessionType, AuthMethod and MaxRecvDataSegmentLength values holding CR, LF and "
              "\"<N>\" refused (0x0209, 0x0201, 0x0200) and logged escaped, each on its own line")
        # 2. SessionType is fixed by the first request: a normal session (no SessionType,
        # or SessionType=Normal, at first) declaring Discovery later is refused
        ops = [("HeaderDigest", "None"), ("DataDigest", "None"), ("SessionType", "Discovery")]
        for first_type in ([], [("SessionType", "Normal")]):
            c, st, _ = login_answer(b.d.port, "127.0.8.2",
                                    [("InitiatorName", ini), ("TargetName", TARGET)] +
                                    first_type + [("AuthMethod", "None")], ops)
            listed = ""
            if st == 0:
                rh, rd = send_targets_all(c)
                listed = ": SendTargets=All then answered %r" % rd[:120]
            c.close()
            check(st == 0x0200, "a normal login%s declaring SessionType=Discovery in the "
                  "operational stage: status 0x%04x (expected 0x0200)%s" %
                  (" with SessionType=Normal" if first_type else "", st, listed))
        # a discovery session is still a discovery session, saying so twice is fine
        c, st, _ = login_answer(b.d.port, "127.0.8.3", [("InitiatorName", ini),
                                                         ("SessionType", "Discovery"),
                                                         ("AuthMethod", "None")], ops)
        check(st == 0, "a discovery login repeating SessionType=Discovery: 0x%04x" % st)
        rh, rd = send_targets_all(c)
        check(rh[0] & 0x3F == OP_TEXT_RSP and TARGET.encode() in rd,
              "SendTargets=All in a discovery session: %r" % rd[:120])
        c.close()
        b.say("SessionType=Discovery in the operational stage of a normal login refused with "
              "0x0200 (initiator error); a discovery login repeating it still lists targets")
        b.finish()
    finally:
        b.kill()


# ---------------------------------------------------------------- discovery sessions


def hold_until_closed(c, limit_s, text_every=None):
    """Keep a logged-in discovery connection as a squatter would: answer every NOP-In ping,
    and with text_every send SendTargets=All that often. Returns the seconds until the
    target closed it, or None if it was still open after limit_s."""
    t0 = time.monotonic()
    next_text = t0 if text_every else None
    itt = 0x40
    while time.monotonic() - t0 < limit_s:
        if next_text is not None and time.monotonic() >= next_text:
            itt += 1
            data = kv([("SendTargets", "All")])
            try:
                c.send_pdu(bhs(OP_TEXT, 0x80, b"\0" * 8, itt, RSVD, 1, 0, data=data,
                               immediate=True), data)
            except OSError:
                return time.monotonic() - t0
            next_text += text_every
        try:
            rh, _ = c.recv_pdu(0.2)
        except socket.timeout:
            continue
        except (Closed, OSError):
            return time.monotonic() - t0
        ttt = struct.unpack(">I", rh[20:24])[0]
        if rh[0] & 0x3F == OP_NOP_IN and ttt != RSVD:
            statsn = struct.unpack(">I", rh[24:28])[0]
            try:
                c.send_pdu(bhs(OP_NOP_OUT, 0x80, rh[8:16], RSVD, ttt, 1, statsn + 1,
                               immediate=True))
            except OSError:
                return time.monotonic() - t0
    return None


def discovery_refused(port, src):
    try:
        c, _ = discovery_login(port, src)
    except TestFailure as e:
        return str(e)
    c.close()
    return None


def with_held(b, body):
    """Run body(b, held) on a Bench, closing the connections it put in held, then finish."""
    held = []
    try:
        body(b, held)
        while held:
            held.pop().close()
        b.finish()
    finally:
        for c in held:
            c.close()
        b.kill()


def discovery_room(b, held):
    """Discovery sessions do not take the room of normal ones (max-sessions counts normal
    sessions only) and have their own per-address budget (default 4)."""
    held += [discovery_login(b.d.port, "127.0.9.1")[0] for _ in range(4)]
    normal = [Session(b.d.port, name="iqn.2026-11.org.linerate:after-discovery-%d" % i,
                      src="127.0.9.9").login() for i in range(2)]
    why = discovery_refused(b.d.port, "127.0.9.1")
    check(why and "0x0302" in why, "a 5th discovery session from one address: %s" %
          (why or "accepted"))
    held.append(discovery_login(b.d.port, "127.0.9.2")[0])
    b.say("4 anonymous discovery sessions from one address held: 2 normal sessions still "
          "logged in under max-sessions 3; the 5th discovery session from that address "
          "refused with 0x0302, another address still served")
    for s in normal:
        s.logout()


def discovery_idle(b, held):
    """The total budget, and the idle timeout of discovery sessions answering NOP-In pings."""
    held += [discovery_login(b.d.port, "127.0.9.3")[0] for _ in range(2)]
    why = discovery_refused(b.d.port, "127.0.9.3")
    check(why and "0x0302" in why, "a 3rd discovery session from one address under "
          "max-discovery-sessions-per-address 2: %s" % (why or "accepted"))
    active = discovery_login(b.d.port, "127.0.9.4")[0]
    held.append(active)
    why = discovery_refused(b.d.port, "127.0.9.5")
    check(why and "0x0302" in why, "a 4th discovery session under max-discovery-sessions "
          "3: %s" % (why or "accepted"))
    # one session asks SendTargets every 0.5 s for 4 s: kept; the idle ones, answering
    # every NOP-In ping, are closed
    dt = hold_until_closed(active, 4, text_every=0.5)
    check(dt is None, "a discovery session sending Text requests was closed after %.1f s"
          % (dt or 0))
    for c in held[:2]:
        dt = hold_until_closed(c, 10)
        check(dt is not None, "an idle discovery session (answering NOP-In) was still open "
              "past discovery-idle-timeout 2 s")
    dt = hold_until_closed(active, 10)
    check(dt is not None, "a discovery session idle after its Text requests was not closed")
    while held:
        held.pop().close()
    time.sleep(0.3)
    held += [discovery_login(b.d.port, "127.0.9.3")[0] for _ in range(2)]
    check("discovery session idle" in log_text(b.d), "the idle close was not logged:\n" +
          b.d.log_tail())
    b.say("max-discovery-sessions 3 and -per-address 2 refuse with 0x0302; with "
          "discovery-idle-timeout 2 s, sessions answering NOP-In but sending no Text "
          "request are closed, one sending SendTargets every 0.5 s is kept; their slots "
          "serve new discovery sessions")


def cat_discovery(binary):
    with_held(Bench(binary, "discovery", ["max-sessions = 3"]), discovery_room)
    with_held(Bench(binary, "discovery-idle", ["max-discovery-sessions = 3",
                                               "max-discovery-sessions-per-address = 2",
                                               "discovery-idle-timeout = 2",
                                               "nop-interval = 1"], log_level="info"),
              discovery_idle)


# ---------------------------------------------------------------- CHAP guessing


class DiscoveryChap(target_chap.Login):
    """A discovery login with CHAP from a given source address (target_chap's steps)."""

    def __init__(self, port, src):
        self.c = Conn(port, src=src)
        self.target = None
        self.isid = bytes([0x80, 0, 0x47, 0x55, 0x45, random.randrange(256)])
        self.expstatsn = 0

    def first(self, auth="CHAP", transit=True):
        return self.send([("InitiatorName", "iqn.2026-11.org.evil:guesser"),
                          ("SessionType", "Discovery"), ("AuthMethod", auth)], transit=transit)

    def guess(self, secret, patience):
        """Send CHAP_N/CHAP_R and wait `patience` s for the answer: its status, or None."""
        r = target_chap.chap_r(self.alg, self.ident, secret, self.chal)
        h, d = login_pdu([("CHAP_N", GUESS_USER), ("CHAP_R", "0x" + r.hex())], csg=0, nsg=1,
                         isid=self.isid, itt=7, cmdsn=1, expstatsn=self.expstatsn)
        self.c.send_pdu(h, d)
        out = self.c.outcome(patience)
        return None if out in ("timeout", "closed") else login_status(out[0])


GUESS_USER, GUESS_SECRET = "alice", "alice-secret-0123"


def cat_guess(binary):
    work = tempfile.mkdtemp(prefix="security-guess-")
    sec = os.path.join(work, "chap-secrets")
    with open(sec, "w") as f:
        f.write("%s %s\n" % (GUESS_USER, GUESS_SECRET))
    os.chmod(sec, 0o600)
    b = Bench(binary, "guess", ["chap-secrets = %s" % sec, "discovery-chap-user = %s" %
                                GUESS_USER])
    try:
        # a guesser that gives up on any answer slower than 0.3 s (a wrong guess, before):
        # 3 wrong guesses, then the right secret
        wrong = 3
        for i in range(wrong):
            lg = DiscoveryChap(b.d.port, "127.0.11.1").challenge()
            st = lg.guess("wrong-secret-%02d" % i, 0.3)
            lg.c.close()
            check(st in (None, 0x0201), "wrong guess %d answered 0x%04x" % (i, st or 0))
        lg = DiscoveryChap(b.d.port, "127.0.11.1").challenge()
        st = lg.guess(GUESS_SECRET, 0.3)
        check(st is None, "after %d abandoned wrong guesses from one address the right secret "
              "was answered (0x%04x) before that address's back-off delay: the answer time "
              "tells a guesser right from wrong" % (wrong, st or 0))
        lg.c.close()
        time.sleep(0.5)
        text = log_text(b.d)
        abandoned = text.count("the connection closed before the answer")
        check(abandoned == wrong + 1, "%d abandoned CHAP attempts logged as authentication "
              "failures, expected %d:\n%s" % (abandoned, wrong + 1, b.d.log_tail()))
        # another address is not slowed: the right secret logs in at once
        lg = DiscoveryChap(b.d.port, "127.0.11.2").challenge()
        rh, _ = lg.answer(GUESS_USER, GUESS_SECRET)
        check(login_status(rh) == 0, "the right secret from another address: 0x%04x" %
              login_status(rh))
        lg.c.close()
        b.say("%d wrong CHAP guesses abandoned after 0.3 s each, then the right secret: not "
              "answered within 0.3 s either (it waits for the address's turn); %d abandoned "
              "attempts logged as authentication failures; another address logs in at once"
              % (wrong, abandoned))
        b.finish()
    finally:
        b.kill()
        for f in os.listdir(work):
            os.unlink(os.path.join(work, f))
        os.rmdir(work)


# ---------------------------------------------------------------- many connections, EMFILE


def cat_conns(binary):
    nconn, naddr, nhalf = 4000, 80, 800
    b = Bench(binary, "conns", ["login-timeout = 60", "max-pending-logins = %d" % (nconn + 100),
                                "max-pending-logins-per-address = %d" % (nconn // naddr)])
    socks = []
    try:
        for i in range(nconn):
            s = socket.create_connection(("127.0.0.1", b.d.port), timeout=5,
                                         source_address=("127.0.8.%d" % (1 + i % naddr), 0))
            socks.append(s)
        half = bhs(0x03, 0x87, b"\0" * 8, 0, 0, 0, 0, data=kv([("InitiatorName", "x")]))[:24]
        for s in socks[:nhalf]:
            s.sendall(half)
        deadline = time.monotonic() + 10
        while nfds(b.pid) < b.fd0 + nconn and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        fds = nfds(b.pid)
        check(fds >= b.fd0 + nconn, "only %d of %d idle connections held" % (fds - b.fd0, nconn))
        lat = max(b.io() for _ in range(10))
        per_conn = b.rss_grew_kb() * KIB // nconn
        bound = 96 * KIB if b.asan else 48 * KIB
        check(per_conn < bound, "each idle connection costs %d bytes of RSS (bound %d)" %
              (per_conn, bound))
        check(lat < 2.0, "legitimate I/O took %.2f s among the idle connections" % lat)
        b.say("%d idle connections from %d addresses held (%d with half a BHS): %d descriptors, "
              "%d bytes of RSS each; legitimate I/O max %.1f ms" %
              (nconn, naddr, nhalf, fds, per_conn, lat * 1e3))
        for s in socks:
            s.close()
        socks = []
        b.finish()
    finally:
        for s in socks:
            s.close()
        b.kill()
    # The daemon raises its soft descriptor limit to the hard one: started with a soft limit
    # of 1024, it must run with the hard one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        b = Bench(binary, "emfile", ["max-pending-logins = 4000",
                                     "max-pending-logins-per-address = 4000"], threads=1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        got = resource.prlimit(b.pid, resource.RLIMIT_NOFILE)
        check(got[0] == got[1] == hard, "the daemon runs with descriptor limits %s, started "
              "with soft 1024, hard %d" % (got, hard))
        # EMFILE: lower the daemon's limits to 256 (both), then exceed them
        resource.prlimit(b.pid, resource.RLIMIT_NOFILE, (256, 256))
        for i in range(400):
            socks.append(socket.create_connection(("127.0.0.1", b.d.port), timeout=5,
                                                  source_address=("127.0.9.1", 0)))
        time.sleep(0.5)
        cpu0 = cpu_s(b.pid)
        time.sleep(2.0)
        busy = cpu_s(b.pid) - cpu0
        check(busy < 0.5, "the daemon used %.2f s of CPU in 2 s out of descriptors: a busy "
              "loop" % busy)
        check(b.d.alive(), "the daemon died out of descriptors\n" + b.d.log_tail())
        lines = log_text(b.d).count("pausing accepts")
        check(lines == 1, "%d 'pausing accepts' lines for one episode" % lines)
        fds = nfds(b.pid)
        for s in socks:
            s.close()
        socks = []
        deadline = time.monotonic() + 10
        while True:
            try:
                s2 = Session(b.d.port, name="iqn.2026-11.org.linerate:after-emfile").login()
                break
            except (TestFailure, Closed, OSError):
                check(time.monotonic() < deadline, "no login possible after the EMFILE episode")
                time.sleep(0.2)
        st, _, _ = s2.scsi_retry_ua(bytes(6))
        check(st == 0, "TEST UNIT READY after the EMFILE episode: 0x%02x" % st)
        s2.logout()
        b.say("started with soft limit 1024: runs with %d; limit lowered to 256, 400 "
              "connections: %d descriptors, %.2f s of CPU in "
              "2 s, one 'pausing accepts' line; a login works once they close" % (got[0], fds, busy))
        b.finish()
    finally:
        for s in socks:
            s.close()
        b.kill()


# ---------------------------------------------------------------- copy


def prout(s, lun, sa, rtype, key, sark=0):
    """PERSISTENT RESERVE OUT on session s; the status."""
    cdb = struct.pack(">BBBxxIx", 0x5F, sa, rtype, 24)
    st, _, _ = s.scsi(cdb, write_data=struct.pack(">QQ8x", key, sark), lun=lun)
    return st


def lun_naa(s, lun):
    """The 8-byte NAA logical unit designator INQUIRY VPD page 83h reports for lun."""
    st, _, d = s.scsi(struct.pack(">BBBHB", 0x12, 1, 0x83, 512, 0), read_len=512, lun=lun)
    check(st == 0, "INQUIRY VPD 83h of LUN %d: status 0x%02x" % (lun, st))
    pos = 4
    while pos + 4 <= min(len(d), 4 + struct.unpack(">H", d[2:4])[0]):
        code, piv, n = d[pos] & 0x0F, d[pos + 1], d[pos + 3]
        if code == 1 and (piv >> 4) & 3 == 0 and piv & 0x0F == 3 and n == 8:
            return d[pos + 4:pos + 12]
        pos += 4 + n
    raise TestFailure("LUN %d reports no NAA designator" % lun)


def xcopy_list(naa, src, dst, blocks, src_lba, dst_lba):
    """An EXTENDED COPY (LID1) parameter list: identification CSCD descriptors (E4h) for the
    NAA designators in naa, one block to block segment from CSCD src to CSCD dst."""
    cscd = b"".join(b"\xe4\x00\x00\x00\x01\x03\x00\x08" + n + bytes(12) +
                    struct.pack(">I", BLOCK) for n in naa)
    seg = struct.pack(">BBHHHxxHQQ", 0x02, 0, 24, src, dst, blocks, src_lba, dst_lba)
    return struct.pack(">BBHxxxxII", 0, 3 << 3, len(cscd), len(seg), 0) + cscd + seg


def cat_copy(binary):
    """EXTENDED COPY names other LUNs by designator: initiator A holds EXCLUSIVE ACCESS on
    LUN 1; B's copies sent to LUN 0, out of LUN 1 and into it, are refused (COPY ABORTED,
    COPY TARGET DEVICE NOT REACHABLE) as B's READ and WRITE there are, and nothing moves."""
    d = Daemon(binary, lun="ram:%d" % (8 * MIB), prefix="security-copy-",
               extra=["--lun", "ram:%d" % (8 * MIB)])
    try:
        a = Session(d.port, name="iqn.2026-11.org.linerate:copy-owner").login()
        b = Session(d.port, name="iqn.2026-11.org.linerate:copy-other").login()
        for s in (a, b):
            for lun in (0, 1):
                st, _, _ = s.scsi_retry_ua(bytes(6), lun=lun)
                check(st == 0, "TEST UNIT READY LUN %d: status 0x%02x" % (lun, st))
        secret, mine = bytes([0xA1]) * (8 * BLOCK), bytes([0xB0]) * (8 * BLOCK)
        st, _, _ = a.scsi(cdb_rw10(0x2A, 0, 8), write_data=secret, lun=1)
        check(st == 0, "A's WRITE to LUN 1: status 0x%02x" % st)
        st, _, _ = b.scsi(cdb_rw10(0x2A, 0, 8), write_data=mine, lun=0)
        check(st == 0, "B's WRITE to LUN 0: status 0x%02x" % st)
        naa = [lun_naa(b, 0), lun_naa(b, 1)]
        check(prout(a, 1, 0x00, 0, 0, 0xA1) == 0, "A's REGISTER on LUN 1 failed")
        check(prout(a, 1, 0x01, 3, 0xA1) == 0, "A's RESERVE (Exclusive Access) failed")
        st, _, _ = b.scsi(cdb_rw10(0x28, 0, 8), read_len=8 * BLOCK, lun=1)
        check(st == 0x18, "B's READ of LUN 1: status 0x%02x, expected 0x18" % st)
        st, _, _ = b.scsi(cdb_rw10(0x2A, 0, 8), write_data=mine, lun=1)
        check(st == 0x18, "B's WRITE to LUN 1: status 0x%02x, expected 0x18" % st)
        for what, src, dst, dst_lba in (("LUN 1 -> LUN 0", 1, 0, 8),
                                        ("LUN 0 -> LUN 1", 0, 1, 0)):
            plist = xcopy_list(naa, src, dst, 8, 0, dst_lba)
            cdb = struct.pack(">BB8xIxx", 0x83, 0, len(plist))
            st, sense, _ = b.scsi(cdb, write_data=plist, lun=0)
            check(st == 2 and hostile.sense_kaa(sense) == (0x0A, 0x0D, 0x02),
                  "B's EXTENDED COPY %s sent to LUN 0: status 0x%02x sense %s, expected "
                  "COPY ABORTED, COPY TARGET DEVICE NOT REACHABLE" % (what, st, sense.hex()))
        st, _, back = b.scsi(cdb_rw10(0x28, 8, 8), read_len=8 * BLOCK, lun=0)
        check(st == 0 and back == bytes(8 * BLOCK), "A's data reached LUN 0 through the copy")
        st, _, back = a.scsi(cdb_rw10(0x28, 0, 8), read_len=8 * BLOCK, lun=1)
        check(st == 0 and back == secret, "B's copy overwrote A's blocks on LUN 1")
        print("security copy: A holds Exclusive Access on LUN 1; B's READ and WRITE there "
              "-> RESERVATION CONFLICT; B's EXTENDED COPY via LUN 0 naming LUN 1 by NAA, "
              "both ways -> COPY ABORTED 0Dh/02h, nothing moved", flush=True)
        check(prout(a, 1, 0x03, 0, 0xA1) == 0, "A's CLEAR failed")
        a.logout()
        b.logout()
        check(d.alive(), "daemon died\n" + d.log_tail())
        d.proc.send_signal(signal.SIGTERM)
        check(d.proc.wait(20) == 0, "daemon did not exit 0 on SIGTERM")
        os.unlink(d.log.name)
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()


def cat_reservations(binary):
    """REGISTER AND MOVE cannot write an initiator's text into the saved reservation state."""
    work = tempfile.mkdtemp(prefix="security-reservations-")
    state = os.path.join(work, "state")
    lun = "file:%s,size=16M" % os.path.join(work, "lun.img")
    ini_a, ini_b = "iqn.2026-11.org.linerate:pr-a", "iqn.2026-11.org.linerate:pr-b"
    isid_a, isid_b = bytes([0x80, 0, 0, 0, 0x0a, 1]), bytes([0x80, 0, 0, 0, 0x0b, 1])
    key = 0xA1A2A3A4A5A6A7A8

    def start():
        return Daemon(binary, threads=1, lun=lun, prefix="security-reservations-",
                      extra=("--state-dir", state))

    def stop(d):
        d.proc.send_signal(signal.SIGTERM)
        rc = d.proc.wait(20)
        check(rc == 0, "daemon exited %d on SIGTERM\n%s" % (rc, d.log_tail()))

    def expect_state(s, who):
        keys, resv = pr_lib.read_keys(s)[1], pr_lib.read_reservation(s)
        check(keys == [key] and resv == (key, pr_lib.WRITE_EXCLUSIVE),
              "%s: READ KEYS %s, READ RESERVATION %s: expected A's key holding Write "
              "Exclusive" % (who, [hex(k) for k in keys], resv))

    d = start()
    try:
        a = pr_lib.session(d.port, ini_a, isid_a)
        st, _ = pr_lib.prout(a, 0x00, sa_key=key, aptpl=True)
        check(st == 0, "A: REGISTER with APTPL status 0x%02x" % st)
        st, _ = pr_lib.prout(a, 0x01, key=key, type_=pr_lib.WRITE_EXCLUSIVE)
        check(st == 0, "A: RESERVE status 0x%02x" % st)
        full = pr_lib.prin(a, 0x03)
        relport = struct.unpack(">H", full[8 + 18:8 + 20])[0]
        # a TransportID that ends as a port name should, with lines before it that would make
        # a forged holder and registration of the saved state
        name = (b"iqn.2026-11.org.linerate:x\nreservation 3 -\nreg 00000000000000ff "
                b"iqn.2026-11.org.evil:y,i,0x000000000001")
        text = name + bytes(4 - len(name) % 4)
        tid = bytes([0x45, 0]) + struct.pack(">H", len(text)) + text
        param = struct.pack(">QQxBHI", key, 0xFF, 0x01, relport, len(tid)) + tid
        cdb = struct.pack(">BBBxxIB", 0x5F, 0x07, pr_lib.WRITE_EXCLUSIVE, len(param), 0)
        st, sense, _ = a.scsi(cdb, write_data=param)
        kaa = hostile.sense_kaa(sense)
        check(st == 0x02 and kaa == (0x5, 0x26, 0x00),
              "REGISTER AND MOVE to a TransportID with line breaks: status 0x%02x sense %s, "
              "expected CHECK CONDITION 5/26h/00h" % (st, kaa))
        check(len(sense) >= 18 and sense[15] & 0xC0 == 0x80 and
              struct.unpack(">H", sense[16:18])[0] >= 24,
              "the field pointer does not name the TransportID: sense %s" % sense.hex())
        print("security reservations: REGISTER AND MOVE with a newline-laden TransportID -> "
              "CHECK CONDITION 5/26h/00h, field pointer byte %d" %
              struct.unpack(">H", sense[16:18])[0], flush=True)
        expect_state(a, "A, after the refusal")
        a.logout()
        files = [os.path.join(state, f) for f in os.listdir(state)]
        check(len(files) == 1, "state directory holds %s" % files)
        mode = os.stat(files[0]).st_mode & 0o7777
        check(mode == 0o600, "state file mode %o, expected 600" % mode)
        with open(files[0], "rb") as f:
            saved = f.read()
        check(b"evil" not in saved and b"reservation 3" not in saved,
              "the state file holds the initiator's text:\n%r" % saved)
    finally:
        if d.alive():
            stop(d)
    os.unlink(d.log.name)
    d = start()  # raises TestFailure when the daemon does not come up
    try:
        check(d.alive(), "daemon did not start with the saved state\n" + d.log_tail())
        b = pr_lib.session(d.port, ini_b, isid_b)
        expect_state(b, "B, after the restart")
        st, _ = pr_lib.io(b, 0x2A)
        check(st == pr_lib.RESERVATION_CONFLICT, "B: WRITE status 0x%02x, expected conflict" % st)
        a = pr_lib.session(d.port, ini_a, isid_a)
        st, _ = pr_lib.io(a, 0x2A)
        check(st == 0, "A: WRITE status 0x%02x after the restart" % st)
        a.logout()
        b.logout()
        print("security reservations: restart with the same --state-dir: A holds Write "
              "Exclusive, B's WRITE conflicts; state file mode 600", flush=True)
    finally:
        if d.alive():
            stop(d)
    os.unlink(d.log.name)
    shutil.rmtree(work)


# ---------------------------------------------------------------- resets

TMF_TARGET_WARM_RESET, TMF_TARGET_COLD_RESET = 6, 7


def reset_pair(d):
    """Initiators A and B logged in to d, both through their unit attentions."""
    pair = []
    for who in ("reset-a", "reset-b"):
        s = Session(d.port, name="iqn.2026-11.org.linerate:" + who).login()
        st, _, _ = s.scsi_retry_ua(bytes(6))
        check(st == 0, "%s: TEST UNIT READY status 0x%02x" % (who, st))
        pair.append(s)
    return pair


def write_read(s, lba, fill):
    data = bytes([fill]) * (8 * BLOCK)
    st, _, _ = s.scsi(cdb_rw10(0x2A, lba, 8), write_data=data)
    check(st == 0, "WRITE status 0x%02x" % st)
    st, _, back = s.scsi(cdb_rw10(0x28, lba, 8), read_len=len(data))
    check(st == 0 and back == data, "READ back differs (status 0x%02x)" % st)


def stop_daemon(d):
    check(d.alive(), "daemon died\n" + d.log_tail())
    d.proc.send_signal(signal.SIGTERM)
    check(d.proc.wait(20) == 0, "daemon did not exit 0 on SIGTERM")


def cat_resets(binary):
    """A target reset reaches every initiator of the target. By default initiator A's TARGET
    COLD RESET is answered 255 (function rejected), logged once for the session, and B's
    session and I/O carry on untouched (no unit attention); with --target-cold-reset yes it is
    done: B's connection is closed."""
    d = Daemon(binary, lun="ram:%d" % (8 * MIB), prefix="security-resets-")
    try:
        a, b = reset_pair(d)
        write_read(b, 0, 0xB1)
        for _ in range(3):
            rsp = tmf(a, TMF_TARGET_COLD_RESET)
            check(rsp == 255, "default config: A's TARGET COLD RESET answered %d, expected 255 "
                  "(function rejected)" % rsp)
        for s, who in ((b, "B"), (a, "A")):
            st, sense, _ = s.scsi(bytes(6), timeout=5)
            check(st == 0, "%s's TEST UNIT READY after the refused resets: status 0x%02x "
                  "sense %s (a unit attention: the reset was done)" % (who, st, sense.hex()))
        write_read(b, 8, 0xB2)
        write_read(a, 16, 0xA1)
        n = log_text(d).count("TARGET COLD RESET from")
        check(n == 1, "the refused resets were logged %d times, expected once" % n)
        a.logout()
        b.logout()
        stop_daemon(d)
        os.unlink(d.log.name)
        print("security resets: default config: A's TARGET COLD RESET x3 -> 255 (function "
              "rejected), logged once; B's session and I/O unaffected, no unit attention",
              flush=True)
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()
    d = Daemon(binary, lun="ram:%d" % (8 * MIB), prefix="security-resets-",
               extra=["--target-cold-reset", "yes"])
    try:
        a, b = reset_pair(d)
        rsp = tmf(a, TMF_TARGET_COLD_RESET)
        check(rsp == 0, "--target-cold-reset yes: A's TARGET COLD RESET answered %d" % rsp)
        dropped = False
        try:
            b.scsi(bytes(6), timeout=5)
        except (Closed, OSError):
            dropped = True
        check(dropped, "--target-cold-reset yes: B's connection still answers after A's "
              "TARGET COLD RESET")
        s = Session(d.port, name="iqn.2026-11.org.linerate:reset-c").login()
        st, _, _ = s.scsi_retry_ua(bytes(6))
        check(st == 0, "a login after the cold reset: TEST UNIT READY status 0x%02x" % st)
        s.logout()
        stop_daemon(d)
        os.unlink(d.log.name)
        print("security resets: --target-cold-reset yes: A's TARGET COLD RESET -> 0, B's "
              "connection closed, a new login works", flush=True)
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()


# ---------------------------------------------------------------- metrics

METRICS_PER_ADDR = 4  # metrics.c: clients at once from one source address


def metrics_conn(port, src, timeout=5.0):
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s):
    """What s receives until the peer closes (or resets, or the timeout)."""
    chunks = []
    try:
        for chunk in iter(lambda: s.recv(65536), b""):
            chunks.append(chunk)
    except (ConnectionResetError, socket.timeout):
        pass
    return b"".join(chunks)


def scrape(port, src):
    """GET /metrics from src: (HTTP status or None, body, seconds)."""
    t0 = time.monotonic()
    s = metrics_conn(port, src)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        r = read_all(s)
    finally:
        s.close()
    st = int(r.split(b" ", 2)[1]) if r.startswith(b"HTTP/1.1 ") else None
    return st, r, time.monotonic() - t0


def slow_attacker(port, src, stop, counts):
    """20 connections from src, each sending a byte of a request head every 0.25 s and opened
    again when the target closes it: far more than the per-address bound, held as long as
    the target lets them."""
    socks = []
    while not stop.is_set():
        while len(socks) < 20:
            try:
                socks.append(metrics_conn(port, src, timeout=1.0))
                socks[-1].setblocking(False)
                counts["opened"] += 1
            except OSError:
                break
        for s in list(socks):
            # What the target sent comes first: a refused connection holds its 503 and then
            # the end of the stream. Writing to it before reading would draw a reset that
            # can discard the 503 unread (how often depends on timing: ASan's slower target).
            try:
                r = s.recv(64, socket.MSG_DONTWAIT)
                if r.startswith(b"HTTP/1.1 503"):
                    counts["refused"] += 1
                s.close()  # answered, or closed by the target (r == b"")
                socks.remove(s)
                continue
            except BlockingIOError:
                pass  # nothing yet: still held
            except OSError:
                s.close()
                socks.remove(s)
                continue
            try:
                s.send(b"G")
            except OSError:
                s.close()
                socks.remove(s)
        stop.wait(0.25)
    for s in socks:
        s.close()


def cat_metrics(binary):
    """The metrics endpoint under slow clients from one address: connections past the
    per-address bound are answered 503 and closed at once, one that sends nothing (or a byte
    at a time) is closed within about a second, and a scrape from another address is answered
    meanwhile."""
    mport = free_port()
    d = Daemon(binary, lun="ram:%d" % (8 * MIB), prefix="security-metrics-",
               extra=["--metrics", "127.0.0.1:%d" % mport])
    try:
        st, body, dt = scrape(mport, "127.0.0.2")
        check(st == 200 and b"linerate_" in body, "first scrape: status %s" % st)
        # silent connections from one address: the first ones are held, the rest refused
        held = [metrics_conn(mport, "127.0.0.3") for _ in range(METRICS_PER_ADDR)]
        t_held = time.monotonic()
        time.sleep(0.2)
        for i in range(8):
            s = metrics_conn(mport, "127.0.0.3")
            r = read_all(s)
            s.close()
            check(r.startswith(b"HTTP/1.1 503 "), "connection %d from 127.0.0.3 beyond the "
                  "%d held: %r, expected 503 and closed at once"
                  % (METRICS_PER_ADDR + 1 + i, METRICS_PER_ADDR, r[:40]))
        st, body, dt = scrape(mport, "127.0.0.2")
        check(st == 200, "scrape from 127.0.0.2 with 127.0.0.3 at its bound: status %s" % st)
        for i, s in enumerate(held):
            r = read_all(s)
            s.close()
            took = time.monotonic() - t_held
            check(r == b"" and took < 4, "silent connection %d: %r after %.1f s, expected "
                  "closed with nothing sent within 4 s" % (i, r[:40], took))
        print("security metrics: 127.0.0.3 holds %d silent connections, %d more -> 503 at "
              "once; the silent ones closed within %.1f s" % (METRICS_PER_ADDR, 8, took),
              flush=True)
        # (one byte a second: target_metrics.sh)
        # 20 slow connections from one address, reopened as they are cut: scrapes from another
        # address are answered all along
        stop, counts = threading.Event(), {"opened": 0, "refused": 0}
        t = threading.Thread(target=slow_attacker, args=(mport, "127.0.0.3", stop, counts))
        t.start()
        worst = 0.0
        try:
            time.sleep(0.5)
            for i in range(6):
                st, body, dt = scrape(mport, "127.0.0.2")
                check(st == 200 and b"linerate_" in body, "scrape %d from 127.0.0.2 during "
                      "the slow clients from 127.0.0.3: status %s after %.1f s" % (i, st, dt))
                check(dt < 3, "scrape %d took %.1f s" % (i, dt))
                worst = max(worst, dt)
                time.sleep(0.5)
        finally:
            stop.set()
            t.join()
        check(counts["refused"] > 0, "no connection of the slow clients was refused 503")
        check(d.alive(), "daemon died\n" + d.log_tail())
        print("security metrics: 127.0.0.3 opened %d slow connections (%d refused 503 at "
              "once); 6 scrapes from 127.0.0.2 all 200, slowest %.0f ms"
              % (counts["opened"], counts["refused"], worst * 1e3),
              flush=True)
        stop_daemon(d)
        os.unlink(d.log.name)
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()


# ---------------------------------------------------------------- buffers

def metric(mport, name):
    """The value of an unlabelled series of the daemon's Prometheus endpoint."""
    st, body, _ = scrape(mport, "127.0.0.1")
    check(st == 200, "metrics scrape: status %s" % st)
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise TestFailure("no %s in the metrics" % name)


def wait_metric(mport, name, want, limit_s):
    """Polls the series until it equals want: the seconds that took (fails past limit_s)."""
    t0 = time.monotonic()
    while True:
        v = metric(mport, name)
        if v == want:
            return time.monotonic() - t0
        check(time.monotonic() - t0 < limit_s, "%s still %d after %.0f s, expected %d"
              % (name, v, limit_s, want))
        time.sleep(0.1)


def start_write(s, cdb, edtl):
    """Sends a command that writes edtl bytes, with no data (InitialR2T=Yes), and reads its
    answer: None for an R2T (the target took the command and waits for the data, which never
    comes), else the SCSI status it was refused with."""
    itt = s.next_itt()
    s.c.send_pdu(bhs(OP_SCSI, 0x80 | 0x20 | 0x01, lun_field(0), itt, edtl, s.cmdsn,
                     s.expstatsn, cdb.ljust(16, b"\0")))
    s.cmdsn += 1
    rh, _ = s.recv(10)
    op = rh[0] & 0x3F
    check(struct.unpack(">I", rh[16:20])[0] == itt, "answer for another ITT")
    if op == OP_R2T:
        return None
    check(op == OP_SCSI_RSP, "write answered op 0x%02x, expected R2T or SCSI Response" % op)
    return rh[3]


def wait_closed(s, limit_s):
    """Reads (answering NOP-In pings, so only the target's own rule can close it) until the
    target closes the connection: the seconds that took."""
    t0 = time.monotonic()
    try:
        while True:
            left = limit_s - (time.monotonic() - t0)
            check(left > 0, "connection still open after %.0f s" % limit_s)
            try:
                s.recv(min(left, 1.0))
            except socket.timeout:
                pass
    except (Closed, ConnectionResetError):
        return time.monotonic() - t0


WRITE_8M = 8 * MIB // BLOCK  # blocks of the largest write the target takes (8 MiB)
BUSY, TASK_SET_FULL = 0x08, 0x28


def buffers_cap_timeout(b, mport):
    """A peer starts three 8 MiB writes and never sends their data: they hold all of
    max-task-buffers (24M); its fourth write is answered TASK SET FULL and another session's
    write BUSY (SAM-5 §5.3.1), nothing allocated past the cap; after data-out-timeout (3 s) the
    hoarder's connection is closed and the memory is back."""
    x = Session(b.d.port, name="iqn.2026-11.org.evil:hoarder", src="127.0.0.5").login()
    x.scsi_retry_ua(bytes(6))
    t_first = time.monotonic()
    for i in range(3):
        st = start_write(x, cdb_rw10(0x2A, i * WRITE_8M, WRITE_8M), 8 * MIB)
        check(st is None, "hoarder's write %d refused with status %s below the cap"
              % (i + 1, st))
    held = metric(mport, "linerate_task_buffer_bytes")
    check(held == 24 * MIB, "3 writes of 8 MiB waiting for data: %d bytes charged, expected "
          "%d" % (held, 24 * MIB))
    st = start_write(x, cdb_rw10(0x2A, 3 * WRITE_8M, WRITE_8M), 8 * MIB)
    check(st == TASK_SET_FULL, "hoarder's 4th write past max-task-buffers: status %s, "
          "expected TASK SET FULL" % st)
    y = Session(b.d.port, name="iqn.2026-11.org.linerate:neighbour", src="127.0.0.6").login()
    y.scsi_retry_ua(bytes(6))
    st, _, _ = y.scsi(cdb_rw10(0x2A, 4096, 8), write_data=bytes(8 * BLOCK))
    check(st == BUSY, "another session's write with the budget full: status 0x%02x, expected "
          "BUSY" % st)
    st, _, _ = y.scsi(bytes(6))
    check(st == 0, "another session's TEST UNIT READY with the budget full: 0x%02x" % st)
    check(metric(mport, "linerate_task_buffer_bytes") <= 24 * MIB, "charged past the cap")
    wait_closed(x, 30)
    after = time.monotonic() - t_first
    check(after >= 2.5, "the hoarder was closed %.1f s after its first write, before "
          "data-out-timeout (3 s)" % after)
    freed = wait_metric(mport, "linerate_task_buffer_bytes", 0, 10)
    data = b.rng.randbytes(8 * BLOCK)
    st, _, _ = y.scsi(cdb_rw10(0x2A, 4096, 8), write_data=data)
    check(st == 0, "another session's write once the hoarder is gone: status 0x%02x" % st)
    st, _, back = y.scsi(cdb_rw10(0x28, 4096, 8), read_len=len(data))
    check(st == 0 and back == data, "another session's read back differs")
    y.logout()
    log = log_text(b.d)
    check("no Data-Out for 3 s (data-out-timeout)" in log, "no log line for the Data-Out "
          "timeout\n" + b.d.log_tail())
    refused = log.count("refused: tasks hold")
    check(1 <= refused <= 5, "%d log lines for 2 refused commands" % refused)
    b.say("3 writes of 8 MiB without data hold 24 MiB = max-task-buffers; the 4th -> TASK SET "
          "FULL, another session's write -> BUSY (TEST UNIT READY GOOD); the hoarder closed "
          "%.1f s after its first write (data-out-timeout 3), memory back to 0 within %.1f s, "
          "the other session's write GOOD" % (after, freed))


def buffers_slow_writer(b):
    """A slow initiator is not a stalled one: a 2 MiB write whose eight 256 KiB bursts each
    come 0.6 s after their R2T (about 5 s in all, longer than data-out-timeout, 3 s) is
    written: the timeout counts from the last Data-Out, not from the command."""
    s = Session(b.d.port, name="iqn.2026-11.org.linerate:slow", src="127.0.0.8").login()
    s.scsi_retry_ua(bytes(6))
    data = b.rng.randbytes(2 * MIB)
    itt = s.next_itt()
    lba = 8192
    s.c.send_pdu(bhs(OP_SCSI, 0x80 | 0x20 | 0x01, lun_field(0), itt, len(data), s.cmdsn,
                     s.expstatsn, cdb_rw10(0x2A, lba, len(data) // BLOCK).ljust(16, b"\0")))
    s.cmdsn += 1
    t0 = time.monotonic()
    bursts = 0
    while True:
        rh, _ = s.recv(10)
        op = rh[0] & 0x3F
        if op != OP_R2T:
            break
        ttt = struct.unpack(">I", rh[20:24])[0]
        off, want = struct.unpack(">II", rh[40:48])
        time.sleep(0.6)
        for sn, pos in enumerate(range(off, off + want, 65536)):
            n = min(65536, off + want - pos)
            chunk = data[pos:pos + n]
            s.c.send_pdu(bhs(OP_DATA_OUT, 0x80 if pos + n == off + want else 0, lun_field(0),
                             itt, ttt, 0, s.expstatsn, struct.pack(">III", 0, sn, pos),
                             data=chunk), chunk)
        bursts += 1
    took = time.monotonic() - t0
    check(op == OP_SCSI_RSP and rh[3] == 0, "the slow write: op 0x%02x status 0x%02x, expected "
          "GOOD" % (op, rh[3]))
    check(took > 3.5, "the slow write took only %.1f s: it did not outlast the timeout" % took)
    st, _, back = s.scsi(cdb_rw10(0x28, lba, len(data) // BLOCK), read_len=len(data))
    check(st == 0 and back == data, "the slow write reads back different")
    s.logout()
    b.say("a 2 MiB write in %d bursts each 0.6 s after its R2T (%.1f s in all, data-out-timeout "
          "3 s) -> GOOD, read back equal" % (bursts, took))


def buffers_orphans(b, mport):
    """ERL 2: an initiator asks DefaultTime2Wait and DefaultTime2Retain 3600; Time2Retain is
    answered the configured 3 (its result is the smaller, RFC 7143 §13.16), and the write its
    lost connection orphaned is kept, charged, for the target's own Time2Wait (1) + 3 s, not
    the 3600 + 3 s the Maximum rule of Time2Wait (§13.15) would give."""
    e = Session(b.d.port, name="iqn.2026-11.org.evil:retainer", src="127.0.0.7",
                want={"ErrorRecoveryLevel": "2", "DefaultTime2Wait": "3600",
                      "DefaultTime2Retain": "3600"}).login()
    check(e.keys.get("ErrorRecoveryLevel") == "2", "ErrorRecoveryLevel answered %s"
          % e.keys.get("ErrorRecoveryLevel"))
    check(e.keys.get("DefaultTime2Retain") == "3", "DefaultTime2Retain=3600 asked: answered "
          "%s, expected the configured 3" % e.keys.get("DefaultTime2Retain"))
    t2w = e.keys.get("DefaultTime2Wait")
    e.scsi_retry_ua(bytes(6))
    st = start_write(e, cdb_rw10(0x2A, 0, WRITE_8M), 8 * MIB)
    check(st is None, "the ERL 2 write refused with status %s" % st)
    check(metric(mport, "linerate_task_buffer_bytes") == 8 * MIB, "the write not charged")
    e.c.sock.close()  # the connection fails: the write is kept for TASK REASSIGN
    t0 = time.monotonic()
    time.sleep(0.5)
    check(metric(mport, "linerate_task_buffer_bytes") == 8 * MIB,
          "the orphaned write is not charged while it is kept")
    wait_metric(mport, "linerate_task_buffer_bytes", 0, 20)
    kept = time.monotonic() - t0
    check("kept for reassignment for 1 + 3 s" in log_text(b.d),
          "no log line saying the orphan is kept for 1 + 3 s\n" + b.d.log_tail())
    b.say("ERL 2, DefaultTime2Wait/Time2Retain 3600 asked: answered %s / 3; the orphaned 8 MiB "
          "write stayed charged and was freed %.1f s after its connection died (1 + 3 s)"
          % (t2w, kept))


def buffers_verify(binary):
    """VERIFY(16) BYTCHK=3 sends one block and compares it with each block of the range: the
    target holds the range read from the medium too. Charged at that size, one connection's
    buffer budget (64 MiB) takes fewer than nine over 8 MiB ranges; the excess is answered TASK
    SET FULL. (Charged one block, as before, all nine were taken: 72 MiB and more held.)"""
    d = Daemon(binary, lun="ram:%d" % (64 * MIB), prefix="security-verify-")
    try:
        s = Session(d.port, name="iqn.2026-11.org.evil:verifier").login()
        s.scsi_retry_ua(bytes(6))
        cdb = bytes([0x8F, 0x06]) + struct.pack(">QI", 0, WRITE_8M) + bytes(2)  # BYTCHK=11b
        answers = [start_write(s, cdb, BLOCK) for _ in range(9)]
        taken = answers.count(None)
        check(taken <= 8 and all(a in (None, TASK_SET_FULL) for a in answers),
              "9 VERIFY BYTCHK=3 of 8 MiB each on one connection: %d taken, answers %s; "
              "expected at most 8 (64 MiB) and TASK SET FULL" % (taken, answers))
        check(d.alive(), "daemon died")
        s.c.sock.close()
        t = Session(d.port, name="iqn.2026-11.org.linerate:after").login()
        t.scsi_retry_ua(bytes(6))
        st, _, _ = t.scsi(cdb, write_data=bytes(BLOCK))
        check(st == 0, "a VERIFY BYTCHK=3 of zeros over never-written blocks: 0x%02x" % st)
        t.logout()
        print("security buffers: 9 VERIFY(16) BYTCHK=3 over 8 MiB each on one connection: %d "
              "taken, the rest TASK SET FULL (charged range + block, not one block)" % taken,
              flush=True)
        stop_daemon(d)
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()


def cat_buffers(binary):
    buffers_verify(binary)
    mport = free_port()
    b = Bench(binary, "buffers", ["max-task-buffers = 24M", "data-out-timeout = 3",
                                  "error-recovery-level = 2", "default-time2wait = 1",
                                  "default-time2retain = 3"],
              log_level="info", extra=["--metrics", "127.0.0.1:%d" % mport])
    try:
        check(metric(mport, "linerate_task_buffer_limit_bytes") == 24 * MIB,
              "max-task-buffers not in the metrics")
        buffers_cap_timeout(b, mport)
        buffers_slow_writer(b)
        b.io()
        buffers_orphans(b, mport)
        b.finish()
    finally:
        b.kill()


CATEGORIES = {"backlog": cat_backlog, "login": cat_login, "protocol": cat_protocol,
              "sessions": cat_sessions, "conns": cat_conns, "copy": cat_copy,
              "reservations": cat_reservations, "peers": cat_peers,
              "discovery": cat_discovery, "guess": cat_guess, "resets": cat_resets,
              "metrics": cat_metrics, "buffers": cat_buffers, "hosts": cat_hosts}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CATEGORIES:
        print(__doc__, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # thousands of test sockets
    # ASan's quarantine keeps freed memory resident (256 MiB by default), which would hide
    # what the limits bound: keep it small for the daemons started here.
    if "ASAN_OPTIONS" in os.environ or is_asan(binary):
        opts = os.environ.get("ASAN_OPTIONS", "")
        os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "quarantine_size_mb=16"
    try:
        CATEGORIES[sys.argv[2]](binary)
    except (TestFailure, Closed, OSError) as e:
        print("security %s: FAIL: %s: %s" % (sys.argv[2], type(e).__name__, e), flush=True)
        return 1
    print("security %s: all checks passed" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
