#!/usr/bin/env python3
"""A WRITE still queued on a connection the initiator dropped must not land later over newer
data (found by the partition harness, tests/ha/).

usage: initiator_stale_write.py PATH/TO/linerate-target PATH/TO/stale_write

Two gateways of one target on one shared file LUN (every gateway active/optimized, the
default). stale_write (lr_mpath) has two paths: A through a relay, and B. The relay passes
login and commands until the first WRITE, then stops reading from the initiator's socket (a
cut link: its small receive buffer leaves most of the WRITE in the initiator's send queue).
The WRITE times out, lr_mpath drops that connection and issues the WRITE again through B,
then stale_write writes a newer generation. Only then does the relay read on (the link is
back) and deliver to A whatever the initiator's socket still sends. Block 0, read back, must
hold the newer generation. Before the fix, close(2) left the queue to the kernel, which
delivered the old WRITE: A wrote it over the newer data. Then path A logs in again through
the relay: gateway A must see the same ISID as at first (linerate-ctl show sessions), a
reinstatement of the lost session (RFC 7143 §6.3.5) rather than a new I_T nexus beside it.
Python 3 standard library only."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
import relay_lib  # noqa: E402
from hostile import free_port  # noqa: E402

TARGET = "iqn.2026-12.org.linerate:stale"


class Gateway:
    def __init__(self, binary, work, name, lun):
        d = os.path.join(work, name)
        self.sock = os.path.join(d, "ctl.sock")
        self.ctl = os.path.join(os.path.dirname(os.path.abspath(binary)), "linerate-ctl")
        os.makedirs(os.path.join(d, "st"))
        for _ in range(20):
            self.port = free_port()
            conf = os.path.join(d, "gw.conf")
            with open(conf, "w") as f:
                f.write("ctl-socket = %s/ctl.sock\nstate-dir = %s/st\nlog-level = warn\n"
                        "threads = 1\n[target %s]\nportal = 127.0.0.1:%d\nlun 0 = file:%s\n"
                        % (d, d, TARGET, self.port, lun))
            self.log = open(os.path.join(d, "log"), "w+")
            self.proc = subprocess.Popen([binary, "--config", conf], stdout=self.log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), 1).close()
                    return
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError("gateway %s did not start" % name)

    def isids(self):
        """The ISIDs of the sessions of this gateway (linerate-ctl show sessions)."""
        for _ in range(100):
            r = subprocess.run([self.ctl, "--socket", self.sock, "--json", "show", "sessions"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                got = sorted(str(x.get("isid")) for x in json.loads(r.stdout or "[]"))
                if got:
                    return got
            time.sleep(0.1)
        return None

    def stop(self):
        hostile.end_process(self.proc, 10)


class HoldRelay(relay_lib.Relay):
    """Relay to a gateway. The first connection carrying a WRITE (10)/(16) stops being read
    after that command's header, until release(); then it forwards whatever the initiator
    still sends, until EOF or reset (done is set). Later connections pass everything."""

    def __init__(self, dst):
        self.held = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()
        self.answered = threading.Event()
        self.late = 0  # bytes the initiator delivered after release
        # a small receive buffer, so the held WRITE stays in the initiator's send queue, as
        # with a cut link
        super().__init__(dst, rcvbuf=1024)

    def pumps(self, c, t):
        self.start(self.down, t, c)
        self.start(self.up, c, t)

    def down(self, t, c):
        try:
            while True:
                b = t.recv(65536)
                if not b:
                    break
                if self.go.is_set():
                    self.answered.set()  # A answered what the held connection delivered
                c.sendall(b)
        except OSError:
            pass

    def up(self, c, t):
        mine = False
        try:
            while True:
                bhs = relay_lib.recv_exact(c, 48)
                if bhs[0] & 0x3F == 0x01 and bhs[32] in (0x2A, 0x8A) and not self.held.is_set():
                    mine = True
                    self.held.set()
                    self.go.wait(120)
                    t.sendall(bhs)
                    while True:  # the link is back: what the initiator still sends
                        b = c.recv(65536)
                        if not b:
                            break
                        self.late += len(b)
                        t.sendall(b)
                    if self.late >= relay_lib.pdu_rest_len(bhs):
                        self.answered.wait(30)  # the whole WRITE came: A runs it first
                    break
                t.sendall(bhs + relay_lib.recv_exact(c, relay_lib.pdu_rest_len(bhs)))
        except OSError:
            pass
        relay_lib.close_all((c, t))
        if mine:
            self.done.set()


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, client = sys.argv[1:3]
    work = tempfile.mkdtemp(prefix="lt-stale-")
    lun = os.path.join(work, "lun.img")
    with open(lun, "wb") as f:
        f.truncate(16 << 20)
    a = Gateway(binary, work, "a", lun)
    b = Gateway(binary, work, "b", lun)
    relay = HoldRelay(a.port)
    cl = subprocess.Popen([client, "--target", TARGET, "--host", "127.0.0.1:%d,127.0.0.1:%d"
                           % (relay.port, b.port), "--cmd-timeout-ms", "2000"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = []
    try:
        newer = None
        isid_first = None
        for line in cl.stdout:
            out.append(line)
            if line.startswith("ready"):
                isid_first = a.isids()
            if line.startswith("newer "):
                newer = int(line.split()[1])
                break
        if newer is None or not relay.held.is_set():
            print("FAIL: stale_write stopped before the newer write:\n" + "".join(out))
            return 1
        relay.go.set()
        if not relay.done.wait(60):
            print("FAIL: the held connection did not end within 60 s")
            return 1
        cl.stdin.write("read\n")
        cl.stdin.flush()
        isid_again = None
        for line in cl.stdout:
            out.append(line)
            if line.startswith("relogged"):
                isid_again = a.isids()
                cl.stdin.write("end\n")
                cl.stdin.flush()
        out += cl.stdout.readlines()
        cl.wait(60)
        got = [int(ln.split()[2]) for ln in out if ln.startswith("read gen ")]
        print("".join(out), end="")
        print("relay: %d bytes delivered to A after the link came back" % relay.late)
        if cl.returncode != 0 or not got:
            print("FAIL: stale_write exit %s" % cl.returncode)
            return 1
        if got[0] != newer:
            print("FAIL: block 0 holds gen %d, not the newer gen %d: the WRITE of the dropped "
                  "connection landed late" % (got[0], newer))
            return 1
        # RFC 7143 §6.3.5: path A's login again reinstates its lost session (same ISID), so
        # gateway A ends the old one and its tasks before it answers; a new ISID would be a
        # new I_T nexus, the old session's WRITE free to run after the new one's
        print("gateway A saw ISID %s at first, %s after path A logged in again"
              % (isid_first, isid_again))
        if not isid_first or len(isid_first) != 1 or isid_again != isid_first:
            print("FAIL: path A logged in again as another I_T nexus, not a reinstatement")
            return 1
        print("PASS")
        return 0
    finally:
        if cl.poll() is None:
            cl.kill()
            cl.wait()
        relay.close()
        for g in (a, b):
            g.stop()


if __name__ == "__main__":
    sys.exit(main())
