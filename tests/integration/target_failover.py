#!/usr/bin/env python3
"""Automatic failover between two rbd gateways (alua-mode = failover), over real sockets and a
real Ceph cluster (CEPH_CONF from the environment; target_failover.sh starts it).

usage: target_failover.py PATH/TO/linerate-target PATH/TO/linerate-ctl POOL/IMAGE [ROUNDS]

Gateways A (alua-group 1, configured active/optimized) and B (group 2, standby) export LUN 0 =
rbd:POOL/IMAGE with failover-heartbeat 500ms and failover-timeout 3s. A raw initiator
(hostile.py's) checks:
  1. both gateways agree (RTPG) that group 1 is active/optimized and 2 standby; a write
     through B is refused NOT READY 04h/0Bh (standby);
  2. kill -9: a writer stamps blocks with FUA through A; A is killed with SIGKILL; B is polled
     with WRITE (FUA) until one is GOOD: B must take over within timeout + 20 s, the UNIT
     ATTENTION 2Ah/06h must be seen on B's nexus, RTPG through B says {1: standby, 2: AO},
     every write A acknowledged reads back through B, `ceph osd blocklist ls` holds the
     address A published, and B's log says lost heartbeat, fence, takeover in that order;
  3. failback on the operator's word: A restarted (a new Ceph client) comes up standby (the
     cluster says group 2); `linerate-ctl set alua IQN active/optimized` on A gives it the
     role back: RTPG through both says {1: AO, 2: standby};
  4. a hung gateway: A is stopped with SIGSTOP while commands are queued to it: FUA writes to
     block Z and to distinct blocks beside it, and a plain write followed by SYNCHRONIZE
     CACHE; B fences it and takes over, writes block Z; A is continued with SIGCONT: none of
     its queued commands (the SYNCHRONIZE CACHE included) or new writes is GOOD, block Z
     through B holds B's data and no other block holds A's (none of A's writes reached the
     image: librbd's cache, which answers a write when sent, is off), and A's log says it was
     blocklisted; RTPG through A then says its group standby, and `linerate-ctl set alua
     active/optimized` on A fails, saying it was fenced.
  5. the gateway configured active/optimized down at start: on a second image, only C's peer D
     (group 2, configured standby) runs; with no "ao" object one failover-timeout after its
     start, D, the lowest group beating, creates it and serves (RTPG through D {1: standby,
     2: AO}, a write GOOD, its log says why); C (group 1, configured active/optimized) started
     then comes up standby: the role is D's, and a write through C is refused 04h/0Bh.
Rounds (ROUNDS, default 1) repeat step 2-3 to measure the pause: kill to first good write
through B, printed per round with the median and the worst.
Exit 0 when every check holds, 1 with the reason. Python 3 standard library only."""

import os
import json
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
import target_alua  # noqa: E402
from hostile import TestFailure, check, free_port, sense_kaa  # noqa: E402

TARGET = "iqn.2026-11.org.linerate:failover"
hostile.TARGET = TARGET
BLOCK = 512
TIMEOUT_S = 3.0
# takeover within the dead time, plus a heartbeat, the fence and the lock break (about 1-3 s
# measured), plus scheduling on a busy 2-core machine: generous, yet well under the 30 s that
# librbd alone takes to break a lost gateway's lock (what happens without the fence)
TAKEOVER_MAX_S = TIMEOUT_S + 12.0
AO, STANDBY = 0, 2


class Gateway(target_alua.Gateway):
    """target_alua's gateway, in failover mode, with a control socket, LUN 0 only."""

    def __init__(self, binary, work, name, group, peer, state, lun0):
        self.sock = os.path.join(work, "gw-%s.sock" % name)
        self.logpath = os.path.join(work, "gw-%s.log" % name)
        super().__init__(binary, work, name, group, peer, lun0, None, None, state)

    def conf_lines(self):
        return ["ctl-socket = %s" % self.sock,
                "state-dir = %s" % os.path.join(self.work, "st-" + self.name),
                "log-level = info", "threads = 2",
                "[target %s]" % TARGET, "portal = 127.0.0.1:%d" % self.port,
                "alua-group = %d" % self.group, "alua-peer = %s" % self.peer,
                "alua-state = %s" % self.state, "alua-mode = failover",
                "failover-heartbeat = 500ms", "failover-timeout = %ds" % TIMEOUT_S,
                "lun 0 = %s" % self.lun0]

    def text(self):
        self.log.flush()
        with open(self.logpath, errors="replace") as f:
            return f.read()

    def tail(self, n=30):
        return "".join(self.text().splitlines(True)[-n:])

    def client_addr(self):
        """The address the last start's failover thread published."""
        addr = None
        for line in self.text().splitlines():
            if "failover: group %d, heartbeat" % self.group in line:
                addr = line.rsplit(" ", 1)[1]
        check(addr, "gateway %s: no failover start line in its log:\n%s" % (self.name, self.tail()))
        return addr

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a test that failed mid-hang
        super().stop()


def session(port, name):
    return hostile.Session(port, name="iqn.2026-11.org.linerate:fo-" + name).login()


def stamp(who, lba, n):
    return ("%s lba %d #%d " % (who, lba, n)).encode().ljust(BLOCK, b".")


def wr_fua(lba):
    return bytes([0x2A, 0x08]) + struct.pack(">IxHx", lba, 1)


def rtpg_groups(s):
    st, sense, data = s.scsi_retry_ua(struct.pack(">BBIIBB", 0xA3, 0x0A, 0, 1024, 0, 0),
                                      read_len=1024)
    check(st == 0, "RTPG: status 0x%02x sense %s" % (st, sense_kaa(sense)))
    out, off, end = {}, 4, 4 + struct.unpack(">I", data[:4])[0]
    while off < end:
        out[struct.unpack(">H", data[off + 2:off + 4])[0]] = data[off] & 0x0F
        off += 8 + 4 * data[off + 7]
    return out


def wait_rtpg(s, want, what, limit=TAKEOVER_MAX_S):
    deadline = time.monotonic() + limit
    while True:
        g = rtpg_groups(s)
        if g == want:
            return
        if time.monotonic() > deadline:
            raise TestFailure("%s: RTPG says %s, want %s" % (what, g, want))
        time.sleep(0.1)


def read_block(s, lba):
    st, sense, data = s.scsi_retry_ua(hostile.cdb_rw10(0x28, lba, 1), read_len=BLOCK)
    check(st == 0, "READ lba %d: status 0x%02x sense %s" % (lba, st, sense_kaa(sense)))
    return data


def write_until_good(s, lba, data, t0):
    """WRITE (FUA) through s until GOOD: (seconds since t0, whether 2Ah/06h was seen)."""
    saw_ua = False
    while True:
        st, sense, _ = s.scsi(wr_fua(lba), write_data=data, timeout=60)
        k = sense_kaa(sense) or (0, 0, 0)
        if st == 0:
            took = time.monotonic() - t0
            check(took <= TAKEOVER_MAX_S, "the first good write through the survivor came "
                  "%.1f s after the loss, over %.0f s" % (took, TAKEOVER_MAX_S))
            return took, saw_ua
        if k == (6, 0x2A, 0x06):
            saw_ua = True
        elif k != (2, 0x04, 0x0B) and k[0] != 6:
            raise TestFailure("WRITE through the survivor: status 0x%02x sense %s" % (st, k))
        if time.monotonic() - t0 > TAKEOVER_MAX_S:
            raise TestFailure("the survivor did not take over within %.0f s (last sense %s)" %
                              (TAKEOVER_MAX_S, k))
        time.sleep(0.05)


def blocklist():
    # a 16.2 client may ask before it has the monmap and get EPERM ("problem getting command
    # descriptions from mon"), as scripts/ceph-mini's cephc says: asked again, as it does
    for _ in range(6):
        r = subprocess.run(["ceph", "osd", "blocklist", "ls"], capture_output=True, text=True,
                           timeout=60)
        if r.returncode == 0:
            break
        time.sleep(0.3)
    return r.stdout + r.stderr


CTL = None


def show_alua(gw):
    """LUN 0's "alua" object of linerate-ctl --json show luns on gateway gw."""
    r = subprocess.run([CTL, "--socket", gw.sock, "--json", "show", "luns"], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, "linerate-ctl show luns: %s %s" % (r.stdout, r.stderr))
    res = json.loads(r.stdout)
    luns = res.get("luns", res.get("result")) if isinstance(res, dict) else res
    return luns[0]["alua"]


def kill_round(a, b, sb, rnd):
    """Step 2: a writer through A, A killed -9; B takes over. Returns the pause."""
    sa = session(a.port, "a%d" % rnd)
    acked, stop = [], threading.Event()
    base = 1000 + (rnd % 10) * 10000  # within the 64 MiB image; the stamp names the round

    def writer():
        n = 0
        try:
            while not stop.is_set() and n < 10000:  # until the kill
                lba = base + n
                st, _, _ = sa.scsi(wr_fua(lba), write_data=stamp("A", lba, rnd), timeout=5)
                if st == 0:
                    acked.append(lba)
                n += 1
        except (hostile.Closed, OSError, TestFailure, socket.timeout):
            pass  # the gateway died under it
    th = threading.Thread(target=writer)
    th.start()
    time.sleep(0.5)
    addr = a.client_addr()
    t0 = time.monotonic()
    a.proc.kill()
    a.proc.wait()
    stop.set()
    th.join(30)
    check(acked, "no write acknowledged through A before the kill")
    pause, saw_ua = write_until_good(sb, 10 + rnd, stamp("B", 10 + rnd, rnd), t0)
    check(saw_ua, "no UNIT ATTENTION 2Ah/06h on B's nexus at the takeover")
    check(rtpg_groups(sb) == {1: STANDBY, 2: AO}, "after the kill: RTPG through B %s" %
          rtpg_groups(sb))
    for lba in acked:
        check(read_block(sb, lba) == stamp("A", lba, rnd),
              "lba %d acknowledged through A does not read back through B" % lba)
    bl = blocklist()
    check(addr.split("/")[0].split(":", 1)[-1] in bl and addr.rsplit("/", 1)[1] in bl,
          "the blocklist does not hold A's address %s:\n%s" % (addr, bl))
    log = b.text()
    check("fencing group 1: ceph osd blocklist add %s" % addr in log,
          "B did not fence A's client %s:\n%s" % (addr, b.tail()))
    i1 = log.rfind("lost the heartbeat of group 1")
    i2 = log.rfind("fencing group 1")
    i3 = log.rfind("takes over from group 1")
    check(0 <= i1 < i2 < i3, "B's log lacks lost heartbeat < fence < takeover:\n%s" % b.tail())
    if rnd == 0:
        show = show_alua(b)
        check(show.get("mode") == "failover" and show.get("failover", {}).get("ao") == 2 and
              show["failover"].get("failovers") == 1 and
              show["failover"].get("last_failover_from") == 1,
              "linerate-ctl show luns on B: %s" % show)
    print("round %d: kill -9 of A: %d writes acknowledged through A read back through B; "
          "B AO after %.2f s (2Ah/06h seen); A's %s blocklisted" % (rnd, len(acked), pause, addr))
    return pause


def failback(binary_ctl, a, b, sb):
    """Step 3: A restarted comes up standby; the operator gives it the role back."""
    a.start()
    sa = session(a.port, "a-back")
    wait_rtpg(sa, {1: STANDBY, 2: AO}, "A restarted")
    t0 = time.monotonic()
    r = subprocess.run([binary_ctl, "--socket", a.sock, "set", "alua", TARGET,
                        "active/optimized"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "linerate-ctl set alua on A: %s %s" % (r.stdout, r.stderr))
    wait_rtpg(sa, {1: AO, 2: STANDBY}, "failback, through A")
    # B serves until its next tick reads the change (or its lease ends): A waits one
    # failover-timeout after writing "ao", which it does after the command reached it
    waited = time.monotonic() - t0
    check(waited >= TIMEOUT_S, "failback: A active/optimized %.2f s after set alua, before "
          "one failover-timeout (%d s)" % (waited, TIMEOUT_S))
    wait_rtpg(sb, {1: AO, 2: STANDBY}, "failback, through B")
    st, sense, _ = sa.scsi_retry_ua(wr_fua(5), write_data=stamp("A", 5, 0))
    check(st == 0, "write through A after the failback: sense %s" % (sense_kaa(sense),))
    return sa


def hung_round(a, b, sa, sb):
    """Step 4: A stopped (hung) with writes queued, fenced, continued: none lands."""
    z = 77
    addr = a.client_addr()
    # every thread of A stopped: one still running could serve the commands queued next
    hostile.stop_process(a.proc.pid, 30)
    t0 = time.monotonic()
    # queued in the socket of a process that does not run: A reads them after SIGCONT
    itts = []

    def queue(cdb, data):
        itt = sa.next_itt()
        flags = 0x80 | (0x20 if data else 0) | 0x01
        h = hostile.bhs(hostile.OP_SCSI, flags, hostile.lun_field(0), itt, len(data), sa.cmdsn,
                        sa.expstatsn, cdb.ljust(16, b"\0"), data=data)
        sa.cmdsn += 1
        sa.c.send_pdu(h, data)
        itts.append(itt)

    # FUA writes, block Z and distinct blocks: each one's own answer must carry the fence
    stale = [z, z, z + 1, z + 2, z + 3]
    for i, lba in enumerate(stale):
        queue(wr_fua(lba), stamp("A-stale", lba, i))
    # a plain write and then SYNCHRONIZE CACHE(10): the flush must not be GOOD either
    stale.append(z + 4)
    queue(hostile.cdb_rw10(0x2A, z + 4, 1), stamp("A-stale", z + 4, 9))
    queue(bytes([0x35]) + bytes(9), b"")
    pause, _ = write_until_good(sb, z, stamp("B", z, 0), t0)
    check(addr.rsplit("/", 1)[1] in blocklist(), "hung A's address %s is not blocklisted" % addr)
    # by B's fence, not only by librbd's own lock break (which blocklists the holder too)
    check("fencing group 1: ceph osd blocklist add %s" % addr in b.text(),
          "B did not fence hung A's client %s:\n%s" % (addr, b.tail()))
    a.proc.send_signal(signal.SIGCONT)
    good = 0
    answered = 0
    deadline = time.monotonic() + 60
    while answered < len(itts) and time.monotonic() < deadline:
        try:
            rh, rd = sa.recv(timeout=max(1.0, deadline - time.monotonic()))
        except (hostile.Closed, OSError, socket.timeout):
            break
        if rh[0] & 0x3F == hostile.OP_SCSI_RSP:
            answered += 1
            good += rh[3] == 0
    check(good == 0, "%d of A's queued commands were GOOD after it was fenced" % good)
    check(read_block(sb, z) == stamp("B", z, 0), "block %d: A's stale write reached the image" % z)
    for lba in stale[2:]:
        check(not read_block(sb, lba).startswith(b"A-stale"),
              "block %d: A's stale write reached the image" % lba)
    # a new write through A after it woke: refused too
    try:
        st, sense, _ = sa.scsi_retry_ua(wr_fua(z), write_data=stamp("A-late", z, 0), timeout=30)
        check(st != 0, "a write through fenced A was GOOD")
    except (hostile.Closed, OSError, socket.timeout):
        pass
    check(read_block(sb, z) == stamp("B", z, 0), "block %d: fenced A's write reached the image" % z)
    deadline = time.monotonic() + 15
    while "was blocklisted by the cluster: standby" not in a.text():
        check(time.monotonic() < deadline, "A's log does not say it was fenced:\n%s" % a.tail())
        time.sleep(0.2)
    sa2 = session(a.port, "a-fenced")
    g = rtpg_groups(sa2)
    check(g.get(1) == STANDBY, "fenced A reports its group %s, want standby" % g.get(1))
    # the operator's failback on a fenced gateway cannot work: it says so, not success
    r = subprocess.run([CTL, "--socket", a.sock, "set", "alua", TARGET, "active/optimized"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "fenced" in r.stdout + r.stderr,
          "set alua active/optimized on fenced A: rc %d %s %s" % (r.returncode, r.stdout,
                                                                  r.stderr))
    print("hung A (SIGSTOP): fenced and replaced after %.2f s; after SIGCONT its %d queued "
          "commands answered, none GOOD; block %d holds B's data; A reports standby and "
          "refuses set alua" %
          (pause, answered, z))


def standby_refuses(s, who, lba):
    """A write through the standby gateway who is refused NOT READY 04h/0Bh."""
    st, sense, _ = s.scsi_retry_ua(wr_fua(lba), write_data=stamp(who, lba, 0))
    check(st == 2 and sense_kaa(sense) == (2, 0x04, 0x0B),
          "write through standby %s: status 0x%02x sense %s" % (who, st, sense_kaa(sense)))


def stop_clean(*gws):
    """Stop the gateways; none of their logs may hold a sanitizer report."""
    for g in gws:
        g.stop()
        bad = [ln for ln in g.text().splitlines() if "Sanitizer" in ln or "runtime error" in ln]
        check(not bad, "gateway %s: %s" % (g.name, bad[:3]))


def no_ao_round(binary, work, image):
    """Step 5: the configured active/optimized gateway never started; the other serves."""
    noao = image + "-noao"
    r = subprocess.run(["rbd", "create", "--size", "16M", noao], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0, "rbd create %s: %s" % (noao, r.stderr))
    lun = "rbd:%s,timeout=10" % noao
    c = d = None
    try:
        d = Gateway(binary, work, "d", 2, "1:active/optimized", "standby", lun)
        t0 = time.monotonic()
        sd = session(d.port, "d")
        wait_rtpg(sd, {1: STANDBY, 2: AO}, "D alone, its configured active/optimized peer down")
        took = time.monotonic() - t0
        # D waits one failover-timeout for its configured active/optimized peer before it
        # takes the role (0.5 s: D's clock starts before ours, at its own start)
        check(took >= TIMEOUT_S - 0.5, "D active/optimized %.2f s after its start, before one "
              "failover-timeout (%.0f s)" % (took, TIMEOUT_S))
        check("no gateway configured active/optimized came up" in d.text(),
              "D's log does not say why it took the role:\n%s" % d.tail())
        st, sense, _ = sd.scsi_retry_ua(wr_fua(3), write_data=stamp("D", 3, 0))
        check(st == 0, "write through D after it took the role: sense %s" % (sense_kaa(sense),))
        c = Gateway(binary, work, "c", 1, "2:standby", "active/optimized", lun)
        sc = session(c.port, "c")
        wait_rtpg(sc, {1: STANDBY, 2: AO}, "C started after D took the role", 20)
        standby_refuses(sc, "C", 4)
        check(rtpg_groups(sd) == {1: STANDBY, 2: AO}, "D after C started: RTPG %s" %
              rtpg_groups(sd))
        print("configured active/optimized gateway down at start: D AO %.2f s after its start "
              "(failover-timeout %.0f s); C started later comes up standby" % (took, TIMEOUT_S))
        stop_clean(c, d)
    except TestFailure:
        for g in (c, d):
            if g:
                print("--- gateway %s log tail:\n%s" % (g.name, g.tail(40)))
        raise
    finally:
        for g in (c, d):
            if g:
                g.stop()


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    global CTL
    binary, ctl, image = sys.argv[1:4]
    CTL = ctl
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    # the shell's work directory (removed by it), else our own
    work = tempfile.mkdtemp(prefix="lt-failover-", dir=os.environ.get("LT_FO_WORK"))
    lun = "rbd:%s,timeout=10" % image
    a = b = None
    try:
        a = Gateway(binary, work, "a", 1, "2:standby", "active/optimized", lun)
        b = Gateway(binary, work, "b", 2, "1:active/optimized", "standby", lun)
        sb = session(b.port, "b")
        wait_rtpg(sb, {1: AO, 2: STANDBY}, "at start, through B", 20)
        standby_refuses(sb, "B", 1)
        print("start: group 1 AO, group 2 standby on both; standby B refuses writes")
        pauses = []
        sa = None
        for rnd in range(rounds):
            pauses.append(kill_round(a, b, sb, rnd))
            sa = failback(ctl, a, b, sb)
        print("failback on the operator's word: A restarted standby, AO again after set alua "
              "and one failover-timeout")
        hung_round(a, b, sa, sb)
        pauses.sort()
        print("pause kill -> first good write through B over %d round%s: median %.2f s, "
              "worst %.2f s (failover-timeout %.0f s)" %
              (len(pauses), "" if len(pauses) == 1 else "s", pauses[len(pauses) // 2],
               pauses[-1], TIMEOUT_S))
        stop_clean(a, b)
        no_ao_round(binary, work, image)
        print("PASS")
        return 0
    except TestFailure as e:
        print("FAIL: %s" % e)
        for g in (a, b):
            if g:
                print("--- gateway %s log tail:\n%s" % (g.name, g.tail(40)))
        return 1
    finally:
        for g in (a, b):
            if g:
                g.stop()


if __name__ == "__main__":
    sys.exit(main())
