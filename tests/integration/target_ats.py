#!/usr/bin/env python3
"""ESXi's ATS heartbeat through a failover (issue 30 item 6), over two rbd gateways of one
target and a real Ceph cluster (CEPH_CONF from the environment; target_failover.sh runs it).

usage: target_ats.py PATH/TO/linerate-target PATH/TO/linerate-ctl PATH/TO/ats_heartbeat POOL/IMAGE
                     POOL/IMAGE2
(two images: a gateway killed keeps its image's exclusive lock until librbd breaks it, 30 s;
the gateways of each phase end with SIGKILL, so each mode has its own image)

ats_heartbeat emulates two ESXi hosts over lr_mpath, each with a path to both gateways (host 0
lists A first, host 1 B first), each running COMPARE AND WRITE on its own heartbeat slot every
INTERVAL (compare with what it last wrote, write the next generation). Every run must end with
no false miscompare, no failed heartbeat, and no gap between two good heartbeats of a host
longer than the run's failover window. Phases:
  1. all gateways active/optimized (the default mode): host 0's path to A goes through a proxy
     that, once armed, passes one COMPARE AND WRITE to A, swallows A's answer (A ran it) and
     cuts the connection: the path died after sending, so lr_mpath issues the CAW again on B,
     which compares against the data the first copy wrote: MISCOMPARE. That must not reach the
     host (lr_mpath reads the block back and finds its own data). Host 0 also writes over host
     1's slot once (--steal-at): host 1 must see exactly one miscompare, a real one. No kill in
     this mode: a gateway killed while it holds the image's exclusive lock stalls the other
     gateway's writes until librbd breaks the lock (its watch times out, ~30 s), past any ATS
     window; nothing fences it in this mode (docs/multipath.md), so ATS wants failover mode.
  2. alua-mode = failover, A active/optimized, B standby: A killed with SIGKILL; B fences it and
     takes over; the heartbeats resume within the failover window. A restarted comes up standby.
  3. the same gateways, A standby, B AO: failback on the operator's word (`linerate-ctl set
     alua` on A): the hosts follow the 2Ah/06h and 04h/0Bh to A with no path lost; then A hung
     (SIGSTOP, a partition of its process): its commands time out, B fences it and takes over,
     the heartbeats resume through B; SIGCONT.
LT_ATS_PHASES=ao runs phase 1 alone (target_failover.sh does so under ASan: phases 2 and 3 add
the gateways' failover, which target_failover.py already runs there, and cost 20 s more).
Prints each run's per-host summary (heartbeats, false/real miscompares, longest gap).
Exit 0 when every check holds, 1 with the reason. Python 3 standard library only."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
import relay_lib  # noqa: E402
import target_failover  # noqa: E402
from hostile import TestFailure, check  # noqa: E402

TARGET = "iqn.2026-11.org.linerate:ats"
target_failover.TARGET = TARGET
hostile.TARGET = TARGET
INTERVAL_MS = int(os.environ.get("LT_ATS_INTERVAL_MS", "1000"))
# a dead gateway's takeover: failover-timeout (3 s) plus heartbeat, fence and lock break
# (target_failover.py measures 1-3 s), plus scheduling on a busy 2-core machine
FAILOVER_WINDOW_S = target_failover.TAKEOVER_MAX_S + INTERVAL_MS / 1000.0
# All AO has no takeover, but every write through the other gateway moves the image's
# exclusive lock: under load (2 cores, load 18) one run had a 6 s gap. The same window.
# ESXi's own iSCSI command timeout is longer; shorter here to keep the test short, yet longer
# than a write through a gateway that just took the role (the lock moves: seconds)
CMD_TIMEOUT_MS = 8000


class Gateway(target_failover.Gateway):
    """target_failover's gateway; all_ao: the default mode (every gateway active/optimized)."""

    def __init__(self, *args, all_ao=False):
        self.all_ao = all_ao
        super().__init__(*args)

    def conf_lines(self):
        lines = super().conf_lines()
        if self.all_ao:
            lines = [ln for ln in lines if not ln.startswith(("alua-mode", "failover-",
                                                              "alua-state", "alua-peer"))]
        return lines

    def stop(self):
        """SIGKILL: a clean shutdown waits on the cluster for seconds, and the test is over
        with this gateway; what its sanitizers said while it ran is checked."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        bad = [ln for ln in self.text().splitlines() if "Sanitizer" in ln or "runtime error" in ln]
        check(not bad, "gateway %s: %s" % (self.name, bad[:3]))


class CawCutProxy(relay_lib.Relay):
    """A TCP relay in front of a gateway. Armed, it passes the next COMPARE AND WRITE, drops
    the gateway's SCSI Response to it and closes both sides: the command ran, its answer never
    came (digests off: lr_session's default)."""

    def __init__(self, port):
        self.armed = threading.Event()
        self.cut = threading.Event()
        super().__init__(port)

    def pumps(self, c, t):
        conn = {"c": c, "t": t, "itt": None}
        self.start(self.pump, conn, c, t, True)
        self.start(self.pump, conn, t, c, False)

    def pump(self, conn, src, dst, to_target):
        try:
            while True:
                bhs, pdu = relay_lib.read_pdu(src)
                op = bhs[0] & 0x3F
                if to_target and op == 0x01 and bhs[32] == 0x89 and self.armed.is_set() \
                        and conn["itt"] is None and not self.cut.is_set():
                    conn["itt"] = bhs[16:20]
                    self.armed.clear()
                if not to_target and op == 0x21 and bhs[16:20] == conn["itt"]:
                    self.cut.set()  # the CAW ran on the gateway; its answer is lost
                    break
                dst.sendall(pdu)
        except OSError:
            pass
        relay_lib.close_all((conn["c"], conn["t"]))


SUMMARY = re.compile(r"ats: host (\d+): heartbeats sent (\d+) good (\d+) errors (\d+) skipped "
                     r"(\d+); miscompares false (\d+) real (\d+); longest gap ([\d.]+) s; paths "
                     r"lost (\d+), commands issued again (\d+), CAW read back (\d+), own data "
                     r"found (\d+)")


PATHLINE = re.compile(r"ats: host (\d+): path \d+ [\d.]+:(\d+) .*: (\d+) commands")


class Emulator:
    """ats_heartbeat in the background, ended by a stop file once the driver saw what it
    waits for; wait() returns {host: dict of its summary}."""

    def __init__(self, binary, work, hosts, steal_at=0, lba=100):
        self.stop_file = os.path.join(work, "ats-stop-%d" % lba)
        if os.path.exists(self.stop_file):
            os.unlink(self.stop_file)
        args = [binary, "--target", TARGET, "--seconds", "90", "--interval-ms",
                str(INTERVAL_MS), "--lba", str(lba), "--cmd-timeout-ms", str(CMD_TIMEOUT_MS),
                "--stop-file", self.stop_file]
        for h in hosts:
            args += ["--host", ",".join("127.0.0.1:%d" % p for p in h)]
        if steal_at:
            args += ["--steal-at", str(steal_at)]
        # its log (lr_mpath's path changes) on stderr, to a file shown when a check fails
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.lines = []
        line = self.proc.stdout.readline()
        self.lines.append(line)
        if not line.startswith("ats: ready"):
            raise TestFailure("ats_heartbeat did not start: %s%s%s" %
                              (line, self.proc.stdout.read(), self.log()))
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def log(self):
        self.err.seek(0)
        return self.err.read()

    def mark(self):
        """A point in the output: wait_for counts lines after it."""
        with self.cond:
            return len(self.lines)

    def wait_for(self, pattern, what, since=0, count=1, limit=None):
        """Until count lines after since match the regular expression."""
        deadline = time.monotonic() + (limit or FAILOVER_WINDOW_S + 10)
        with self.cond:
            while sum(1 for ln in self.lines[since:] if re.search(pattern, ln)) < count:
                left = deadline - time.monotonic()
                if left <= 0 or not self.reader.is_alive():
                    raise TestFailure("%s: waited in vain for %d line(s) '%s':\n%s\n%s" %
                                      (what, count, pattern, "".join(self.lines), self.log()))
                self.cond.wait(min(left, 0.2))

    def beats(self, host, path, what, since=0, count=1):
        """count good heartbeats of host through its path index path (None: any)."""
        self.wait_for(r"ats: host %d: gen \d+ GOOD through path %s " %
                      (host, "\\d+" if path is None else path), what, since, count)

    def wait(self, what, window):
        open(self.stop_file, "w").close()
        self.proc.wait(timeout=120)
        self.reader.join(30)
        text = "".join(self.lines) + "--- ats_heartbeat's log:\n" + self.log()
        self.text = text
        with open(self.stop_file + ".out", "w") as f:  # kept for a look after a run
            f.write(text)
        check(self.proc.returncode == 0, "%s: ats_heartbeat exit %d:\n%s" %
              (what, self.proc.returncode, text))
        res = {}
        for m in SUMMARY.finditer(text):
            keys = ("sent", "good", "errors", "skipped", "false", "real", "gap", "lost",
                    "again", "checked", "landed")
            res[int(m.group(1))] = dict(zip(keys, [float(x) if "." in x else int(x)
                                                   for x in m.groups()[1:]]))
        check(len(res) == 2, "%s: no summary:\n%s" % (what, text))
        for m in PATHLINE.finditer(text):
            res[int(m.group(1))].setdefault("by_port", {})[int(m.group(2))] = int(m.group(3))
        for h, r in sorted(res.items()):
            print("%s: host %d: %d heartbeats sent, %d good, %d failed; miscompares: %d false, "
                  "%d real; longest gap %.2f s (window %.1f s); %d path(s) lost, %d CAW read "
                  "back after a miscompare, %d held its own data" %
                  (what, h, r["sent"], r["good"], r["errors"], r["false"], r["real"], r["gap"],
                   window, r["lost"], r["checked"], r["landed"]))
        for h, r in sorted(res.items()):
            check(r["false"] == 0, "%s: host %d saw %d false miscompare(s):\n%s" %
                  (what, h, r["false"], text))
            check(r["errors"] == 0, "%s: host %d: %d heartbeat(s) failed:\n%s" %
                  (what, h, r["errors"], text))
            check(r["gap"] <= window, "%s: host %d: no heartbeat for %.2f s, over %.1f s:\n%s" %
                  (what, h, r["gap"], window, text))
        return res


def phase_all_ao(emu_bin, binary, work, lun):
    a = Gateway(binary, work, "ao-a", 1, "2:active/optimized", "active/optimized", lun,
                all_ao=True)
    b = Gateway(binary, work, "ao-b", 2, "1:active/optimized", "active/optimized", lun,
                all_ao=True)
    proxy = CawCutProxy(a.port)
    what = "all AO"
    try:
        # host 0: A (through the proxy), B; host 1: B, A; both round robin (all AO)
        emu = Emulator(emu_bin, work, [[proxy.port, b.port], [b.port, a.port]], steal_at=2)
        emu.beats(0, None, what)
        proxy.armed.set()
        deadline = time.monotonic() + 4 * INTERVAL_MS / 1000.0 + 10
        while not proxy.cut.is_set():
            if time.monotonic() > deadline:
                raise TestFailure("all AO: no CAW went through the proxy to A:\n" + emu.log())
            time.sleep(0.05)
        cut = emu.mark()
        emu.beats(0, 1, what, cut, 2)  # on through B
        emu.wait_for(r"ats: host 1: MISCOMPARE .*: real", what)  # host 0 wrote over its slot
        res = emu.wait(what, FAILOVER_WINDOW_S)
        check(res[0]["landed"] >= 1, "all AO: host 0's CAW cut after A ran it was not read "
              "back and found landed: %s" % res[0])
        check(res[0]["real"] == 0 and res[1]["real"] == 1,
              "all AO: real miscompares %d and %d, want 0 and 1 (host 0 wrote over host 1's "
              "slot once)" % (res[0]["real"], res[1]["real"]))
        check(res[0]["lost"] >= 1, "all AO: host 0 lost no path")
    finally:
        proxy.close()
        for g in (a, b):
            g.stop()


def phase_failover(emu_bin, binary, ctl, work, lun):
    a = Gateway(binary, work, "fo-a", 1, "2:standby", "active/optimized", lun)
    b = Gateway(binary, work, "fo-b", 2, "1:active/optimized", "standby", lun)
    try:
        # 2. kill -9 of the AO gateway
        what = "failover, kill -9 of A"
        emu = Emulator(emu_bin, work, [[a.port, b.port], [b.port, a.port]], lba=200)
        emu.beats(0, 0, what)
        emu.beats(1, 1, what)
        a.proc.kill()
        a.proc.wait()
        kill = emu.mark()
        emu.beats(0, 1, what, kill, 2)
        emu.beats(1, 0, what, kill, 2)
        emu.wait(what, FAILOVER_WINDOW_S)
        # 3. A back (standby: the cluster says group 2), failback by the operator, then hung
        a.start()
        sa = target_failover.session(a.port, "ats-a")
        target_failover.wait_rtpg(sa, {1: target_failover.STANDBY, 2: target_failover.AO},
                                  "A restarted")
        what = "failback, then A hung (SIGSTOP)"
        emu = Emulator(emu_bin, work, [[a.port, b.port], [b.port, a.port]], lba=200)
        emu.beats(0, 1, what)
        emu.beats(1, 0, what)
        back = emu.mark()
        r = subprocess.run([ctl, "--socket", a.sock, "set", "alua", TARGET, "active/optimized"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "linerate-ctl set alua on A: %s %s" % (r.stdout, r.stderr))
        # the hosts follow: host 0's path 0 and host 1's path 1 are A
        emu.beats(0, 0, what, back)
        emu.beats(1, 1, what, back)
        a.proc.send_signal(signal.SIGSTOP)
        hung = emu.mark()
        emu.beats(0, 1, what, hung, 2)
        emu.beats(1, 0, what, hung, 2)
        res = emu.wait(what, FAILOVER_WINDOW_S)
        a.proc.send_signal(signal.SIGCONT)
        check(all(r["lost"] >= 1 for r in res.values()),
              "A hung: a host did not lose its path to A:\n%s" % emu.text)
    finally:
        for g in (a, b):
            g.stop()


def main():
    if len(sys.argv) < 6:
        print(__doc__)
        return 2
    binary, ctl, emu_bin, image, image2 = sys.argv[1:6]
    target_failover.CTL = ctl
    work = tempfile.mkdtemp(prefix="lt-ats-", dir=os.environ.get("LT_FO_WORK"))
    lun = "rbd:%s,timeout=10" % image
    try:
        t0 = time.monotonic()
        phase_all_ao(emu_bin, binary, work, lun)
        t1 = time.monotonic()
        if os.environ.get("LT_ATS_PHASES", "all") != "ao":
            phase_failover(emu_bin, binary, ctl, work, "rbd:%s,timeout=10" % image2)
        print("all AO %.1f s; failover, failback and hang %.1f s" %
              (t1 - t0, time.monotonic() - t1))
        print("PASS")
        return 0
    except TestFailure as e:
        print("FAIL: %s" % e)
        for name in ("ao-a", "ao-b", "fo-a", "fo-b"):
            p = os.path.join(work, "gw-%s.log" % name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    print("--- gateway %s log tail:\n%s" % (name, "".join(f.readlines()[-25:])))
        return 1


if __name__ == "__main__":
    sys.exit(main())
