#!/usr/bin/env python3
"""Host LUN maps changed under I/O (issue 29 item 3), over real sockets and the real control
socket.

usage: target_hosts_reload.py PATH/TO/linerate-target   (linerate-ctl beside it)

One linerate daemon, target iqn.2026-11.org.linerate:shared with RAM LUNs 0..3; host-a sees
LUN 0 as 0 and LUN 3 (the shared disk) as 1, host-b LUN 1 as 0 and LUN 3 as 5. A raw initiator
(hostile.py's) per host holds a session. First the two share the shared disk's persistent
reservation under their two numbers (registered through 1 and 5, host-a's WRITE EXCLUSIVE
keeps host-b's writes out, both read the same keys and holder, CLEAR frees it). Then another
host-a session runs WRITE(10)/READ(10) with a data check on both its LUNs without pause, in a
thread, and the admin edits the file and runs `linerate-ctl reload` three times:
  1. host-b also sees LUN 2 as 2;
  2. host-b loses its number 5 (the shared LUN);
  3. a new LUN 4, mapped for host-b only as 3 (the LUN added: SPC-4's REPORTED LUNS DATA HAS
     CHANGED goes to the hosts that see it, issue 29 item 3).
After each, host-b's next command gets UNIT ATTENTION 3Fh/0Eh once and REPORT LUNS lists its
new map; host-a's sessions are told nothing (no UNIT ATTENTION on any of its numbers, its REPORT
LUNS unchanged), and its I/O, which checks every status, carries on with no error.
Then the entries go, host-a's sessions logged out by it: host-b's entry (its session carries on
and sees no LUN), then the last one: without --force the reload leaves the entries as they run
(needs_restart says why) and host-b's session still sees no LUN (a target without entries would
show it every LUN, writable); with --force host-b's session is asked to log out (Async
Message, logout requested) before the maps go.
Exit 0 when every check holds, 1 with the reason. Python 3 standard library only."""

import json
import os
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import TestFailure, check  # noqa: E402
import live_lib  # noqa: E402
from live_lib import TUR, drain_uas, raw, report_luns  # noqa: E402

P = "iqn.2026-11.org.linerate:"
TARGET = P + "shared"
hostile.TARGET = TARGET
HOST_A, HOST_B = P + "host-a", P + "host-b"
UA_LUNS = (6, 0x3F, 0x0E)


class HostAIo(threading.Thread):
    """host-a's I/O: WRITE(10) then READ(10) of one block with a pattern of its own, LUN 0 and 1
    in turn, every status and every byte checked, until stopped."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.s = hostile.Session(port, name=HOST_A).login()
        for lun in (0, 1):
            drain_uas(self.s, lun)
        self.stop, self.done, self.error = threading.Event(), 0, None
        self.lock = threading.Lock()

    def count(self):
        with self.lock:
            return self.done

    def run(self):
        i = 0
        try:
            while not self.stop.is_set():
                lun, lba = i % 2, (i * 8) % 8192
                data = bytes([(i + lun) & 0xFF]) * hostile.BLOCK
                st, kaa, _ = raw(self.s, hostile.cdb_rw10(0x2A, lba, 1), lun, write_data=data)
                if st != 0:
                    raise TestFailure("host-a WRITE LUN %d: status 0x%02x %s" % (lun, st, kaa))
                st, kaa, back = raw(self.s, hostile.cdb_rw10(0x28, lba, 1), lun,
                                    read_len=hostile.BLOCK)
                if st != 0 or back != data:
                    raise TestFailure("host-a READ LUN %d: status 0x%02x %s, data %s" % (
                        lun, st, kaa, "ok" if back == data else "differs"))
                i += 1
                with self.lock:
                    self.done = i
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = "%s: %s" % (type(e).__name__, e)

    def wait_more(self, n, what):
        """Until n more I/Os than now are done (the I/O goes on across the change)."""
        want = self.count() + n
        for _ in range(600):
            if self.error or self.count() >= want:
                break
            self.stop.wait(0.05)
        check(self.error is None, "%s: %s" % (what, self.error))
        check(self.count() >= want, "%s: host-a's I/O stalled at %d" % (what, self.count()))


def write_conf(path, ctl_sock, work, port, b_map, extra_lun=False, hosts=(HOST_A, HOST_B)):
    lines = ["ctl-socket = %s" % ctl_sock, "state-dir = %s" % os.path.join(work, "st"),
             "log-level = info", "threads = 2", "[target %s]" % TARGET,
             "portal = 127.0.0.1:%d" % port] + ["lun %d = ram:4M" % i for i in range(4)]
    if extra_lun:
        lines.append("lun 4 = ram:4M")
    if HOST_A in hosts:
        lines += ["[host %s]" % HOST_A, "map = 0 0", "map = 1 3"]
    if HOST_B in hosts:
        lines += ["[host %s]" % HOST_B] + ["map = %d %d" % m for m in b_map]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def reload(ctl, conf, work, port, b_map, extra_lun=False):
    write_conf(conf, ctl[1], work, port, b_map, extra_lun)
    p = subprocess.run([ctl[0], "--socket", ctl[1], "reload"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, "linerate-ctl reload: exit %d: %s%s" % (
        p.returncode, p.stdout, p.stderr))


def prout(s, lun, sa, key=0, sa_key=0, type_=0):
    """PERSISTENT RESERVE OUT (SPC-4 §6.16) to lun: (status, sense key/ASC/ASCQ)."""
    param = struct.pack(">QQ8x", key, sa_key)
    st, kaa, _ = raw(s, struct.pack(">BBBxxIB", 0x5F, sa, type_, len(param), 0), lun,
                     write_data=param)
    return st, kaa


def prin(s, lun, sa):
    st, kaa, data = raw(s, struct.pack(">BBxxxxxHB", 0x5E, sa, 1024, 0), lun, read_len=1024)
    check(st == 0, "PERSISTENT RESERVE IN sa %d LUN %d: status 0x%02x %s" % (sa, lun, st, kaa))
    return data


def shared_reservation(a, b):
    """One logical unit, two numbers (host-a's 1, host-b's 5): one set of registrations and one
    reservation (issue 29 item 3)."""
    check(prout(a, 1, 0, sa_key=0xA)[0] == 0, "host-a REGISTER through 1")
    check(prout(b, 5, 0, sa_key=0xB)[0] == 0, "host-b REGISTER through 5")
    check(prout(a, 1, 1, key=0xA, type_=1)[0] == 0, "host-a RESERVE WRITE EXCLUSIVE through 1")
    for s, lun, who in ((a, 1, "host-a"), (b, 5, "host-b")):
        d = prin(s, lun, 0)
        keys = sorted(struct.unpack(">Q", d[8 + 8 * i:16 + 8 * i])[0]
                      for i in range(struct.unpack(">I", d[4:8])[0] // 8))
        check(keys == [0xA, 0xB], "%s READ KEYS through %d: %s" % (who, lun, keys))
        d = prin(s, lun, 1)
        check(struct.unpack(">I", d[4:8])[0] == 16 and struct.unpack(">Q", d[8:16])[0] == 0xA
              and d[21] & 0x0F == 1, "%s READ RESERVATION through %d: %s" % (who, lun, d[:24]))
    blk = bytes(hostile.BLOCK)
    st, kaa, _ = raw(b, hostile.cdb_rw10(0x2A, 0, 1), 5, write_data=blk)
    check(st == 0x18, "host-b WRITE through 5 under host-a's reservation: status 0x%02x %s, "
          "want RESERVATION CONFLICT" % (st, kaa))
    st, kaa, _ = raw(a, hostile.cdb_rw10(0x2A, 0, 1), 1, write_data=blk)
    check(st == 0, "host-a WRITE through 1, its reservation: status 0x%02x %s" % (st, kaa))
    check(prout(a, 1, 3, key=0xA)[0] == 0, "host-a CLEAR through 1")
    uas = drain_uas(b, 5)
    check(uas == [(6, 0x2A, 0x03)], "host-b after CLEAR: %s, want RESERVATIONS PREEMPTED" % uas)
    st, kaa, _ = raw(b, hostile.cdb_rw10(0x2A, 0, 1), 5, write_data=blk)
    check(st == 0, "host-b WRITE through 5 after CLEAR: status 0x%02x %s" % (st, kaa))
    print("the shared LUN as host-a's 1 and host-b's 5: one reservation, one set of keys")


def expect_told(b, luns, what):
    """host-b: 3Fh/0Eh once on its next command, then REPORT LUNS lists luns."""
    st, kaa, _ = raw(b, TUR, 0)
    check(st == 2 and kaa == UA_LUNS, "%s: host-b's next command: status 0x%02x sense %s, want "
          "UNIT ATTENTION 3Fh/0Eh" % (what, st, kaa))
    got = report_luns(b)
    check(got == luns, "%s: host-b's REPORT LUNS %s, want %s" % (what, got, luns))
    check(drain_uas(b, 0) == [], "%s: host-b told twice" % what)


def expect_untold(a, io, what):
    for lun in (0, 1):
        uas = drain_uas(a, lun)
        check(uas == [], "%s: host-a LUN %d got %s, want no UNIT ATTENTION" % (what, lun, uas))
    check(report_luns(a) == [0, 1], "%s: host-a's REPORT LUNS %s" % (what, report_luns(a)))
    check(io.error is None, "%s: %s" % (what, io.error))


def steps(ctl, conf, work, port):
    a = hostile.Session(port, name=HOST_A).login()
    b = hostile.Session(port, name=HOST_B).login()
    for s, lun in ((a, 0), (a, 1), (b, 0), (b, 5)):
        drain_uas(s, lun)
    check(report_luns(a) == [0, 1] and report_luns(b) == [0, 5], "maps at start")
    shared_reservation(a, b)
    io = HostAIo(port)
    io.start()
    try:
        io.wait_more(50, "before the changes")
        changes = (("host-b also maps LUN 2 as 2", [(0, 1), (5, 3), (2, 2)], False, [0, 2, 5]),
                   ("host-b unmaps its number 5", [(0, 1), (2, 2)], False, [0, 2]),
                   ("LUN 4 added, host-b's as 3", [(0, 1), (2, 2), (3, 4)], True, [0, 2, 3]))
        for what, b_map, extra, want in changes:
            reload(ctl, conf, work, port, b_map, extra)
            expect_told(b, want, what)
            expect_untold(a, io, what)
            io.wait_more(50, what)
            print("%s: host-b told 3Fh/0Eh once, REPORT LUNS %s; host-a told nothing, its I/O "
                  "at %d commands without error" % (what, want, 2 * io.count()))
    finally:
        io.stop.set()
        io.join(30)
    check(io.error is None, "host-a's I/O: %s" % io.error)
    expect_untold(io.s, io, "host-a's I/O session at the end")
    io.s.logout()
    a.logout()
    last_entry(ctl, conf, work, port, b)


def reload_json(ctl, *args):
    p = subprocess.run([ctl[0], "--socket", ctl[1], "--json", "reload"] + list(args),
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "linerate-ctl reload %s: exit %d: %s%s" % (
        " ".join(args), p.returncode, p.stdout, p.stderr))
    return json.loads(p.stdout)


def last_entry(ctl, conf, work, port, b):
    b_map = [(0, 1), (2, 2), (3, 4)]
    write_conf(conf, ctl[1], work, port, b_map, True, hosts=(HOST_A,))
    reload_json(ctl)
    drain_uas(b, 0)
    check(report_luns(b) == [], "host-b's removed entry: REPORT LUNS %s" % report_luns(b))
    write_conf(conf, ctl[1], work, port, b_map, True, hosts=())
    r = reload_json(ctl)
    drain_uas(b, 0)
    got = report_luns(b)
    check(got == [], "host-b after the last entry went without --force: REPORT LUNS %s" % got)
    check(any("without entries its 1 session would see every LUN" in x
              for x in r["needs_restart"]), "the last entry dropped without --force: %s" % r)
    # with --force: host-b is asked to log out (and does, as an initiator would)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=reload_json(ctl, "--force")))
    t.start()
    try:
        h, d = b.c.recv_pdu(20)
        check(h[0] & 0x3F == 0x32 and h[36] == 1,
              "host-b after reload --force: opcode 0x%02x AsyncEvent %d, not a logout request"
              % (h[0] & 0x3F, h[36]))
    finally:
        b.c.close()
        t.join(60)
    check(not out["r"]["needs_restart"], "reload --force: %s" % out["r"])
    print("last entry: kept without --force (host-b's session still sees no LUN), with --force "
          "host-b asked to log out first")


def run(binary, work):
    ctl = (os.path.join(os.path.dirname(os.path.abspath(binary)), "linerate-ctl"),
           os.path.join(work, "ctl.sock"))
    conf = os.path.join(work, "hosts.conf")
    port = hostile.free_port()
    write_conf(conf, ctl[1], work, port, [(0, 1), (5, 3)])
    d = live_lib.Daemon(binary, conf, ctl[1], os.path.join(work, "daemon.log"))
    d.around(lambda: steps(ctl, conf, work, port))


if __name__ == "__main__":
    sys.exit(live_lib.main(run, __doc__, "lr-hosts-reload-", passed="PASS"))
