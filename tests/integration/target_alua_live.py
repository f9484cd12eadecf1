#!/usr/bin/env python3
"""ALUA states changed live (issue 30 item 1), over real sockets and the real control socket.

usage: target_alua_live.py PATH/TO/linerate-target   (linerate-ctl beside it)

One linerate daemon, alua-group 1 with peer group 2 active/non-optimized, RAM LUNs 0 and 1.
A raw initiator (hostile.py's) holds a session while linerate-ctl and a reload change states:
  1. `set alua T standby`: the next command on each LUN gets UNIT ATTENTION 2Ah/06h once, then
     REPORT TARGET PORT GROUPS says group 1 standby, TEST UNIT READY and READ(10) are NOT
     READY 04h/0Bh, INQUIRY is GOOD; a session that logs in after the change reads the same
     state and is never told 2Ah/06h;
  2. `set alua T active/optimized --lun 1`: only LUN 1 changes (its UA, RTPG, READ GOOD);
  3. `set alua T standby --group 2`: RTPG reports the peer group standby, after the UA;
  4. the same state again changes nothing (no UA); an unknown group or state is refused;
  5. `show luns --json` reports the states, `save` writes them, a reload of the file with
     alua-state active/optimized brings LUN 0 back (UA, RTPG) and says so in "applied";
     libiscsi (iscsi-readcapacity16) is refused NOT READY 04h/0Bh in standby and reads the
     capacity once the reload made the LUN active again;
  6. alua-explicit: INQUIRY TPGS=11b; SET TARGET PORT GROUPS from one session puts LUN 1 in
     standby: that session is not told, the other gets 2Ah/06h, RTPG and show luns agree.
  8. alua-mode = failover (a second daemon, RAM LUN, so no failover thread): a reload of other
     states does not apply them (no UA, RTPG unchanged) and says so in "applied".
Exit 0 when every check holds, 1 with the reason. Python 3 standard library only."""

import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import check  # noqa: E402
import live_lib  # noqa: E402
from live_lib import TUR, Ctl, Daemon, drain_uas, raw  # noqa: E402

TARGET = "iqn.2026-11.org.linerate:alua-live"
hostile.TARGET = TARGET
AO, AN, SB = 0, 1, 2
UA_ALUA = (6, 0x2A, 0x06)
STANDBY = (2, 0x04, 0x0B)


def rtpg(s, lun):
    """{group: state} from REPORT TARGET PORT GROUPS (a command standby allows)."""
    cdb = struct.pack(">BBIIBB", 0xA3, 0x0A, 0, 1024, 0, 0)
    st, kaa, data = raw(s, cdb, lun, read_len=1024)
    check(st == 0, "RTPG LUN %d: status 0x%02x sense %s" % (lun, st, kaa))
    end = 4 + struct.unpack(">I", data[:4])[0]
    out, off = {}, 4
    while off < end:
        out[struct.unpack(">H", data[off + 2:off + 4])[0]] = data[off] & 0x0F
        off += 8 + 4 * data[off + 7]
    return out


def expect_ua_once(s, lun, what):
    """The next command gets 2Ah/06h, the one after it does not."""
    st, kaa, _ = raw(s, TUR, lun)
    check(st == 2 and kaa == UA_ALUA,
          "%s: LUN %d's next command: status 0x%02x sense %s, want UA 2Ah/06h" % (
              what, lun, st, kaa))
    st, kaa, _ = raw(s, TUR, lun)
    check(not (st == 2 and kaa[0] == 6), "%s: LUN %d: a second UA %s" % (what, lun, kaa))


def expect_no_ua(s, lun, what):
    st, kaa, _ = raw(s, TUR, lun)
    check(not (st == 2 and kaa[0] == 6), "%s: LUN %d: UA %s, want none" % (what, lun, kaa))


def expect_standby(s, lun, what):
    for cdb, name, rl in ((TUR, "TEST UNIT READY", 0),
                          (hostile.cdb_rw10(0x28, 0, 1), "READ(10)", 512)):
        st, kaa, _ = raw(s, cdb, lun, read_len=rl)
        check(st == 2 and kaa == STANDBY, "%s: LUN %d %s: status 0x%02x sense %s, want NOT "
              "READY 04h/0Bh" % (what, lun, name, st, kaa))
    st, kaa, _ = raw(s, [0x12, 0, 0, 0, 96, 0], lun, read_len=96)
    check(st == 0, "%s: LUN %d INQUIRY in standby: status 0x%02x %s" % (what, lun, st, kaa))


def expect_reads(s, lun, what):
    st, kaa, _ = raw(s, hostile.cdb_rw10(0x28, 0, 1), lun, read_len=512)
    check(st == 0, "%s: LUN %d READ(10): status 0x%02x sense %s" % (what, lun, st, kaa))


def libiscsi_capacity(port, lun):
    """libiscsi's iscsi-readcapacity16 (its login sends TEST UNIT READY): (exit, output), or None
    without libiscsi-bin."""
    if not shutil.which("iscsi-readcapacity16"):
        return None
    p = subprocess.run(["iscsi-readcapacity16", "-i", "iqn.2026-11.org.linerate:alua-live-libiscsi",
                        "iscsi://127.0.0.1:%d/%s/%d" % (port, TARGET, lun)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def edit_conf(conf, old, new):
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text.replace(old, new))


def session(port, name):
    return hostile.Session(port, name="iqn.2026-11.org.linerate:alua-live-" + name).login()


def run(binary, work):
    ctl = Ctl(os.path.join(os.path.dirname(os.path.abspath(binary)), "linerate-ctl"),
              os.path.join(work, "ctl.sock"))
    conf = os.path.join(work, "alua.conf")
    port = hostile.free_port()
    lines = ["ctl-socket = %s" % ctl.sock, "state-dir = %s" % os.path.join(work, "st"),
             "log-level = info", "threads = 2", "[target %s]" % TARGET,
             "portal = 127.0.0.1:%d" % port, "alua-group = 1",
             "alua-peer = 2:active/non-optimized", "alua-explicit = yes", "lun 0 = ram:4M", "lun 1 = ram:4M"]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    d = Daemon(binary, conf, ctl.sock, os.path.join(work, "daemon.log"))

    def body():
        ctl.run("version")
        steps(ctl, conf, port)
    d.around(body)
    failover_reload(binary, work)


def failover_reload(binary, work):
    """8. alua-mode = failover: the states are the cluster's; a reload does not set them (on a
    RAM LUN no failover runs, so what a reload would change stays visible in RTPG)."""
    ctl = Ctl(os.path.join(os.path.dirname(os.path.abspath(binary)), "linerate-ctl"),
              os.path.join(work, "ctl-fo.sock"))
    conf = os.path.join(work, "fo.conf")
    port = hostile.free_port()
    lines = ["ctl-socket = %s" % ctl.sock, "state-dir = %s" % os.path.join(work, "st-fo"),
             "log-level = info", "[target %s]" % TARGET, "portal = 127.0.0.1:%d" % port,
             "alua-mode = failover", "alua-group = 1", "alua-peer = 2:standby", "lun 0 = ram:4M"]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    d = Daemon(binary, conf, ctl.sock, os.path.join(work, "daemon-fo.log"))

    def body():
        s = session(port, "fo")
        drain_uas(s, 0)
        check(rtpg(s, 0) == {1: AO, 2: SB}, "failover target at start: RTPG %s" % rtpg(s, 0))
        edit_conf(conf, "alua-peer = 2:standby", "alua-peer = 2:active/optimized")
        r = ctl.json("reload")
        check(any("not applied: alua-mode = failover" in a for a in r["applied"]),
              "reload of a failover target's states: %s" % r)
        expect_no_ua(s, 0, "reload of a failover target")
        check(rtpg(s, 0) == {1: AO, 2: SB}, "failover target after reload: RTPG %s" % rtpg(s, 0))
        print("alua-mode = failover: a reload leaves the states to the cluster")
    d.around(body)


def steps(ctl, conf, port):
    s = session(port, "one")
    for lun in (0, 1):
        drain_uas(s, lun)
        check(rtpg(s, lun) == {1: AO, 2: AN}, "LUN %d at start: RTPG %s" % (lun, rtpg(s, lun)))

    # 1. the whole target to standby
    ctl.run("set", "alua", TARGET, "standby")
    for lun in (0, 1):
        expect_ua_once(s, lun, "set alua standby")
        g = rtpg(s, lun)
        check(g == {1: SB, 2: AN}, "after set alua standby: LUN %d RTPG %s" % (lun, g))
        expect_standby(s, lun, "set alua standby")
    late = session(port, "late")
    for lun in (0, 1):
        uas = drain_uas(late, lun)
        check(UA_ALUA not in uas, "a session that logged in after the change got 2Ah/06h")
        check(rtpg(late, lun) == {1: SB, 2: AN}, "late session: LUN %d RTPG %s" % (
            lun, rtpg(late, lun)))
        expect_standby(late, lun, "late session")
    r = libiscsi_capacity(port, 0)
    check(r is None or (r[0] != 0 and "0x040b" in r[1]),
          "libiscsi through a standby port: %s, want a login refused NOT READY 04h/0Bh" % (r,))
    if r:
        print("libiscsi's login through the standby port: refused NOT READY 04h/0Bh")
    print("target to standby: 2Ah/06h once per LUN, RTPG and NOT READY 04h/0Bh at once; a new "
          "session sees standby without the UA")

    # 2. one LUN back to active/optimized
    ctl.run("set", "alua", TARGET, "active/optimized", "--lun", "1")
    expect_no_ua(s, 0, "set alua --lun 1")
    expect_ua_once(s, 1, "set alua --lun 1")
    check(rtpg(s, 1) == {1: AO, 2: AN} and rtpg(s, 0) == {1: SB, 2: AN},
          "after --lun 1: RTPG %s / %s" % (rtpg(s, 0), rtpg(s, 1)))
    expect_reads(s, 1, "LUN 1 active again")
    expect_standby(s, 0, "LUN 0 still standby")
    expect_ua_once(late, 1, "set alua --lun 1 (second session)")
    print("one LUN to active/optimized: its UA and state only")

    # 3. the peer group's state
    ctl.run("set", "alua", TARGET, "standby", "--group", "2")
    for lun, own in ((0, SB), (1, AO)):
        expect_ua_once(s, lun, "set alua --group 2")
        check(rtpg(s, lun) == {1: own, 2: SB}, "after --group 2: LUN %d RTPG %s" % (
            lun, rtpg(s, lun)))

    # 4. the same state again: nothing changes; refusals
    ctl.run("set", "alua", TARGET, "standby", "--group", "2")
    expect_no_ua(s, 1, "the same state again")
    for args in (("standby", "--group", "7"), ("sideways",), ("standby", "--lun", "9")):
        p = ctl.run("set", "alua", TARGET, *args, ok=False)
        check(p.returncode != 0, "set alua %s accepted: %s" % (" ".join(args), p.stdout))
    expect_no_ua(s, 0, "refused requests")
    print("peer group: UA and RTPG; the same state again and bad requests change nothing")

    # 5. show, save, reload
    luns = {l["lun"]: l["alua"] for l in ctl.json("show", "luns")}
    check(luns[0]["state"] == "standby" and luns[1]["state"] == "active/optimized" and
          {g["group"]: g["state"] for g in luns[0]["groups"]} ==
          {1: "standby", 2: "standby"}, "show luns --json: %s" % luns)
    ctl.run("save")
    with open(conf) as f:
        text = f.read()
    for want in ("alua-state = standby", "alua-peer = 2:standby", ",alua=active/optimized"):
        check(want in text, "save did not write '%s':\n%s" % (want, text))
    with open(conf, "w") as f:
        f.write(text.replace("alua-state = standby", "alua-state = active/optimized"))
    r = ctl.json("reload")
    check(any("ALUA" in a for a in r["applied"]) and not r["needs_restart"],
          "reload of the states: %s" % r)
    expect_ua_once(s, 0, "reload")
    expect_no_ua(s, 1, "reload (LUN 1 was active/optimized already)")
    check(rtpg(s, 0) == {1: AO, 2: SB}, "after reload: RTPG %s" % rtpg(s, 0))
    expect_reads(s, 0, "after reload")
    r = libiscsi_capacity(port, 0)
    check(r is None or (r[0] == 0 and "4194304" in r[1]),
          "libiscsi after the reload: %s, want the capacity" % (r,))
    if r:
        print("libiscsi after the reload: logs in, reads the capacity")
    print("show luns, save and reload: the states written, read back and applied live")

    # 6. explicit ALUA: SET TARGET PORT GROUPS from the late session
    st, kaa, inq = raw(late, [0x12, 0, 0, 0, 96, 0], 1, read_len=96)
    check(st == 0 and inq[5] & 0x30 == 0x30, "alua-explicit: INQUIRY TPGS %d, want 11b" % (
        inq[5] >> 4 & 3))
    drain_uas(late, 1)
    stpg = struct.pack(">BBIIBB", 0xA4, 0x0A, 0, 8, 0, 0)
    st, kaa, _ = raw(late, stpg, 1, write_data=struct.pack(">IBBH", 0, SB, 0, 1))
    check(st == 0, "SET TARGET PORT GROUPS: status 0x%02x sense %s" % (st, kaa))
    expect_standby(late, 1, "the session that sent SET TARGET PORT GROUPS")
    expect_ua_once(s, 1, "SET TARGET PORT GROUPS (the other session)")
    check(rtpg(s, 1) == {1: SB, 2: SB}, "after STPG: RTPG %s" % rtpg(s, 1))
    luns = {l["lun"]: l["alua"] for l in ctl.json("show", "luns")}
    check(luns[1]["state"] == "standby", "show luns after STPG: %s" % luns[1])
    print("explicit ALUA: TPGS=11b, SET TARGET PORT GROUPS tells every other nexus")

    # 7. the initiator's state lasts until the operator changes that group's state: a change of
    # another group, of another LUN, or a reload of other states leaves LUN 1's group 1 standby
    ctl.run("set", "alua", TARGET, "active/non-optimized", "--group", "2", "--lun", "0")
    expect_ua_once(s, 0, "set alua --group 2 --lun 0")
    expect_no_ua(s, 1, "set alua --group 2 --lun 0 (LUN 1 not named)")
    check(rtpg(s, 1) == {1: SB, 2: SB}, "LUN 1 after --group 2 --lun 0: RTPG %s" % rtpg(s, 1))
    check(rtpg(s, 0) == {1: AO, 2: AN}, "LUN 0 after --group 2 --lun 0: RTPG %s" % rtpg(s, 0))
    edit_conf(conf, "alua-peer = 2:standby", "alua-peer = 2:active/non-optimized")
    r = ctl.json("reload")
    check(any("ALUA" in a for a in r["applied"]), "reload of the peer state: %s" % r)
    expect_ua_once(s, 1, "reload of group 2")
    check(rtpg(s, 1) == {1: SB, 2: AN}, "LUN 1 after the reload of group 2: RTPG %s" % rtpg(s, 1))
    expect_standby(s, 1, "LUN 1 after other groups' changes")
    print("other groups' and LUNs' changes leave a state SET TARGET PORT GROUPS made")


if __name__ == "__main__":
    sys.exit(live_lib.main(run, __doc__, "lt-alua-live-"))
