#!/usr/bin/env python3
"""Initiator entries changed live (issue 29 item 4), with real initiators and the real control
socket.

usage: target_hosts_live.py PATH/TO/linerate-target   (linerate-ctl beside it)

One daemon, target T with RAM LUNs 0, 1 and 2 and one entry, [host A] map = 0 0:
  1. `add host T B`: B (libiscsi's iscsi-ls -i B), refused before, logs in and sees no LUN;
     `map lun T B 0 1`: B sees LUN 0, and it is the target's LUN 1 (qemu-io with
     initiator-name= B writes through its LUN 0, A reads it once A maps LUN 1 too);
  2. with a raw session (hostile.py's) of A and of B open and their UAs drained, `map lun T B
     1 2 --ro`: B's next command gets REPORTED LUNS DATA HAS CHANGED (3Fh/0Eh) once, its REPORT
     LUNS lists 0 and 1, a WRITE to its LUN 1 fails DATA PROTECT; A is told nothing;
  3. `unmap lun T B 1`: the same 3Fh/0Eh for B alone, REPORT LUNS back to LUN 0;
  4. `set chap T B userb`: B's next login without CHAP is refused, with userb's secret it logs
     in; `set chap T B none` drops it again; show hosts --json says so each time;
  5. `remove host T B`, as `remove allow` does: B's session carries on (counted in the answer),
     B cannot log in again; added again and removed with --force, B's session is logged out;
     the target's last entry cannot be removed;
  6. a group added live (`add group`, `add initiator`, `remove initiator`, its maps): a
     reload would drop it and is refused; A's entry gets a map and a CHAP user; then `save`:
     no difference left, the file's comments kept; the daemon restarted on the saved file shows the same
     `show hosts --json`.
Exit 0 when every check holds, 1 with the reason. Python 3 standard library only (and
libiscsi-bin, qemu-utils)."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import TestFailure, check  # noqa: E402
from live_lib import Ctl, Daemon, drain_uas, raw  # noqa: E402

P = "iqn.2026-11.org.linerate"
TARGET = P + ":hosts-live"
hostile.TARGET = TARGET
A, B, C, D = P + ":live-a", P + ":live-b", P + ":live-c", P + ":live-d"
UA_LUNS = (6, 0x3F, 0x0E)
TUR = bytes(6)
SECRET_B = "secret-of-user-b-1"


def tool(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def ls_luns(port, name, creds=""):
    """The LUNs iscsi-ls -s reports to initiator `name`, or None when its login fails."""
    rc, out = tool("iscsi-ls", "-s", "-i", name, "iscsi://%s127.0.0.1:%d" % (creds, port))
    if rc != 0 or "Target:" not in out:
        return None
    return [int(l.split(":")[1].split()[0]) for l in out.splitlines()
            if l.strip().startswith("Lun:")]


def logs_in(port, name, creds=""):
    """Whether initiator `name` logs in to the target (libiscsi's iscsi-inq on its LUN 0: a
    CHAP target is not listed to a discovery session without discovery CHAP)."""
    rc, out = tool("iscsi-inq", "-i", name, "iscsi://%s127.0.0.1:%d/%s/0" % (creds, port, TARGET))
    return rc == 0 and "LINERATE" in out


def report_luns(s):
    cdb = struct.pack(">BBB3xIxB", 0xA0, 0, 0, 4096, 0)
    st, kaa, data = raw(s, cdb, 0, read_len=4096)
    check(st == 0, "REPORT LUNS: status 0x%02x sense %s" % (st, kaa))
    n = struct.unpack(">I", data[:4])[0] // 8
    return [struct.unpack(">H", data[8 + 8 * i:10 + 8 * i])[0] & 0x3FFF for i in range(n)]


def expect_luns_changed(s, who, what):
    # (TEST UNIT READY: REPORT LUNS would clear this UA without reporting it, SPC-4 5.17.2)
    st, kaa, _ = raw(s, TUR, 0)
    check(st == 2 and kaa == UA_LUNS, "%s: %s's next command: status 0x%02x sense %s, want "
          "UA 3Fh/0Eh" % (what, who, st, kaa))
    st, kaa, _ = raw(s, TUR, 0)
    check(not (st == 2 and kaa and kaa[0] == 6), "%s: %s: a second UA %s" % (what, who, kaa))


def expect_no_ua(s, who, what):
    st, kaa, _ = raw(s, TUR, 0)
    check(not (st == 2 and kaa and kaa[0] == 6), "%s: %s was told %s, want nothing" % (
        what, who, kaa))


def hosts(ctl):
    return {h["name"]: h for h in ctl.json("show", "hosts", TARGET)}


def run(binary, work):
    ctl = Ctl(os.path.join(os.path.dirname(os.path.abspath(binary)), "linerate-ctl"),
              os.path.join(work, "ctl.sock"))
    sec = os.path.join(work, "chap-secrets")
    with open(sec, "w") as f:
        f.write("userb %s\n" % SECRET_B)
    os.chmod(sec, 0o600)
    port = hostile.free_port()
    conf = os.path.join(work, "hosts.conf")
    with open(conf, "w") as f:
        f.write("\n".join([
            "ctl-socket = %s" % ctl.sock, "state-dir = %s" % os.path.join(work, "st"),
            "chap-secrets = %s" % sec, "log-level = info", "threads = 2",
            "", "# the target", "[target %s]" % TARGET, "portal = 127.0.0.1:%d" % port,
            "lun 0 = ram:4M", "lun 1 = ram:4M", "lun 2 = ram:4M",
            "", "# host A: its boot disk", "[host %s]" % A, "map = 0 0  # A's boot disk", ""]))
    d = Daemon(binary, conf, ctl.sock, os.path.join(work, "daemon.log"))
    d.around(lambda: steps(ctl, d, conf, port))


def steps(ctl, d, conf, port):
    # 1. a host added live logs in and sees its map
    check(ls_luns(port, B) is None, "B logged in before it had an entry")
    ctl.run("add", "host", TARGET, B)
    got = ls_luns(port, B)
    check(got == [], "B with an empty entry sees %s, want no LUN" % got)
    ctl.run("map", "lun", TARGET, B, "0", "1")
    got = ls_luns(port, B)
    check(got == [0], "B after map lun 0 1 sees %s, want [0]" % got)
    check(ls_luns(port, A) == [0], "A's map changed: %s" % ls_luns(port, A))
    h = "127.0.0.1:%d" % port

    def qio(name, lun, cmd, ro=False):
        opts = "driver=iscsi,transport=tcp,portal=%s,target=%s,lun=%d,initiator-name=%s" % (
            h, TARGET, lun, name)
        rc, out = tool("qemu-io", *(["-r"] if ro else []), "--image-opts", opts, "-c", cmd)
        check(rc == 0 and "error" not in out.lower() and "fail" not in out.lower(),
              "qemu-io as %s LUN %d '%s': %s" % (name, lun, cmd, out))
    if shutil.which("qemu-io"):
        qio(B, 0, "write -P 0xb1 0 64k")
        ctl.run("map", "lun", TARGET, A, "5", "1")
        qio(A, 5, "read -P 0xb1 0 64k", ro=True)
        ctl.run("unmap", "lun", TARGET, A, "5")
        print("B's LUN 0 is the target's LUN 1: qemu-io as A reads what B wrote")
    print("add host + map lun: B logs in and REPORT LUNS lists its map")

    # 2. a map change tells that host only
    sa = hostile.Session(port, name=A).login()
    sb = hostile.Session(port, name=B).login()
    drain_uas(sa, 0)
    drain_uas(sb, 0)
    ctl.run("map", "lun", TARGET, B, "1", "2", "--ro")
    expect_luns_changed(sb, "B", "map lun B 1 2 --ro")
    expect_no_ua(sa, "A", "map lun B 1 2 --ro")
    check(report_luns(sb) == [0, 1], "B's REPORT LUNS after the map: %s" % report_luns(sb))
    check(report_luns(sa) == [0], "A's REPORT LUNS after B's map: %s" % report_luns(sa))
    drain_uas(sb, 1)  # (the LU's own: power on, for a nexus that never addressed it)
    st, kaa, _ = raw(sb, hostile.cdb_rw10(0x2A, 0, 1), 1, write_data=bytes(512))
    check(st == 2 and kaa[0] == 7, "WRITE to B's read-only LUN 1: status 0x%02x %s, want DATA "
          "PROTECT" % (st, kaa))
    got = hosts(ctl)[B]["maps"]
    check(got == [{"host_lun": 0, "lun": 1, "read_only": False},
                  {"host_lun": 1, "lun": 2, "read_only": True}], "show hosts: B's maps %s" % got)
    print("map lun --ro: 3Fh/0Eh for B only, its REPORT LUNS 0 1, the mapping write-protected")

    # 3. unmap
    ctl.run("unmap", "lun", TARGET, B, "1")
    expect_luns_changed(sb, "B", "unmap lun B 1")
    expect_no_ua(sa, "A", "unmap lun B 1")
    check(report_luns(sb) == [0], "B's REPORT LUNS after unmap: %s" % report_luns(sb))
    check(ctl.run("unmap", "lun", TARGET, B, "7", ok=False).returncode != 0,
          "unmap of a host LUN B does not have was not refused")
    check(ctl.run("map", "lun", TARGET, B, "3", "9", ok=False).returncode != 0,
          "a map to a LUN the target lacks was not refused")
    check(ctl.run("map", "lun", TARGET, B, "3", "1", ok=False).returncode != 0,
          "LUN 1 under a second number for B was not refused")
    print("unmap lun: 3Fh/0Eh for B only, REPORT LUNS back to 0; bad maps refused")

    # 4. CHAP user per entry
    ctl.run("set", "chap", TARGET, B, "userb")
    check(hosts(ctl)[B]["chap_user"] == "userb", "show hosts: %s" % hosts(ctl)[B])
    check(not logs_in(port, B), "B logged in without CHAP after set chap")
    check(logs_in(port, B, "userb%%%s@" % SECRET_B), "B with userb's secret does not log in")
    check(not logs_in(port, B, "userb%wrong-secret-1@"), "B logged in with a wrong secret")
    check(ls_luns(port, A) == [0], "A (no CHAP user) no longer logs in")
    check(ctl.run("set", "chap", TARGET, B, "nobody", ok=False).returncode != 0,
          "a CHAP user without a secret in chap-secrets was accepted")
    ctl.run("set", "chap", TARGET, B, "none")
    check(hosts(ctl)[B]["chap_user"] == "", "show hosts after set chap none: %s" % hosts(ctl)[B])
    check(ls_luns(port, B) == [0], "B without CHAP after set chap none")
    print("set chap: B logs in with its own CHAP user only; none drops it")

    # 5. remove, as remove allow: sessions carry on without --force
    r = ctl.json("remove", "host", TARGET, B)
    # (at least B's raw session: a libiscsi one that just logged out may still be ending)
    check(r["sessions"] >= 1 and not r["sessions_ended"], "remove host B: %s" % r)
    sb.nop()
    check(ls_luns(port, B) is None, "B logged in after its entry was removed")
    ctl.run("add", "host", TARGET, B)
    ctl.run("map", "lun", TARGET, B, "0", "1")
    r = ctl.json("remove", "host", TARGET, B, "--force", "--timeout", "2")
    check(r["sessions"] >= 1 and r["sessions_ended"], "remove host B --force: %s" % r)
    check(sb.c.wait_closed(timeout=15), "B's session still open after remove host --force")
    check(ctl.run("remove", "host", TARGET, A, ok=False).returncode != 0,
          "the last entry was removed")
    print("remove host: B's session carries on without --force, is logged out with it; the "
          "last entry stays")

    # 6. a group live, save, restart
    ctl.run("add", "group", TARGET, "cluster", C)
    ctl.run("add", "initiator", TARGET, "cluster", D)
    p = ctl.run("add", "initiator", TARGET, "cluster", A, ok=False)
    check(p.returncode != 0 and "in host entry" in p.stderr, "A in two entries: %s" % p.stderr)
    ctl.run("add", "initiator", TARGET, "cluster", B)
    ctl.run("remove", "initiator", TARGET, "cluster", B)
    ctl.run("map", "lun", TARGET, "cluster", "0", "2", "--ro")
    ctl.run("map", "lun", TARGET, "cluster", "1", "1")
    ctl.run("map", "lun", TARGET, A, "1", "2")
    ctl.run("set", "chap", TARGET, "cluster", "userb")
    ctl.run("set", "chap", TARGET, A, "userb")
    check(logs_in(port, D, "userb%%%s@" % SECRET_B), "group member D does not log in")
    check(not logs_in(port, B), "B, out of the group, logs in")
    before = ctl.json("show", "hosts")
    p = ctl.run("reload", ok=False)
    check(p.returncode != 0 and "host entry %s" % C in p.stderr,
          "a reload would drop the group added live: %s%s" % (p.stdout, p.stderr))
    r = ctl.json("save")
    check(r["differences"] == [], "save left differences: %s" % r["differences"])
    text = open(conf).read()
    check("# host A: its boot disk" in text and "map = 0 0  # A's boot disk" in text,
          "save lost A's comments:\n" + text)
    sa.c.close()
    d.stop()
    d.start()
    after = ctl.json("show", "hosts")
    check(after == before, "after save and restart:\n%s\nbefore:\n%s" % (after, before))
    check(logs_in(port, A, "userb%%%s@" % SECRET_B) and not logs_in(port, A),
          "A after the restart does not log in with its CHAP user only")
    print("save + restart: the same show hosts --json (%d entries)" % len(after))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if not shutil.which("iscsi-ls"):
        print("SKIP: no iscsi-ls (libiscsi-bin)")
        return 77
    with tempfile.TemporaryDirectory(prefix="lt-hosts-live-") as work:
        try:
            run(sys.argv[1], work)
        except TestFailure as e:
            print("FAIL: %s" % e)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
