#!/usr/bin/env python3
"""State on disk survives a kill -9 at any point: APTPL reservations and `linerate-ctl save`.

usage: target_crash_state.py PATH/TO/linerate-target PATH/TO/linerate-ctl [ROUNDS] [SEED]

Two parts, ROUNDS kills each (default 60; the seed is printed, and replays the same schedule
of operations and kill delays, though not the same interleaving):

  aptpl  A file LUN with --state-dir. Four initiators (I_T nexuses) change the persistent
         reservation state one PERSISTENT RESERVE OUT at a time, APTPL=1 throughout: REGISTER
         AND IGNORE EXISTING KEY with a new key, RESERVE (Write Exclusive) and RELEASE. The
         daemon is killed (SIGKILL) at a random moment of that stream, started again on the
         same state directory, and READ KEYS / READ RESERVATION must be the state after the
         last acknowledged change, or after the one in flight at the kill (it may have been
         saved and not answered yet): never a mix, never a state that refuses to load.
  save   A daemon started from a config file with a control socket: `linerate-ctl add lun`
         or `remove lun` then `linerate-ctl save`, over and over, killed at a random moment.
         The file must then load (the daemon starts from it) and hold the LUNs of the last
         acknowledged save, or of the save in flight: never a half-written file.

After each part no temporary file of the daemon's is left beside the state or the config file
(a crash between creating one and renaming it leaves one; the next start or save removes it).
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (Daemon, Session, TestFailure)
import pr_lib  # noqa: E402
from hostile import TestFailure, check  # noqa: E402

NEXUSES = [("iqn.2026-12.org.linerate:crash-%d" % i, bytes([0x80, 0, 0, 0, 0x0c, i]))
           for i in range(4)]
REGISTER_AND_IGNORE, RESERVE, RELEASE = 0x06, 0x01, 0x02
KILL_WITHIN_S = 0.25  # the kill lands this long after the stream starts, at most
MAX_LUNS = 12
PR_FILE = hostile.TARGET + "-lun0.pr"  # the LUN's file in --state-dir


def killer(proc, delay):
    """SIGKILL proc after delay seconds, from another thread (the stream goes on until then)."""
    t = threading.Timer(delay, lambda: proc.poll() is None and proc.send_signal(signal.SIGKILL))
    t.daemon = True
    t.start()
    return t


def dies(proc):
    """True once proc has exited (the kill's cut connections may be seen before its exit)."""
    try:
        proc.wait(5)
        return True
    except subprocess.TimeoutExpired:
        return False


def leftovers(directory, base):
    """Temporary files of the daemon's beside `base` (.BASE.XXXXXX, mkstemp's pattern)."""
    pat = re.compile(r"^\.%s\.[A-Za-z0-9]{6}$" % re.escape(base))
    return sorted(n for n in os.listdir(directory) if pat.match(n))


# ---------------------------------------------------------------- APTPL


class Model:
    """What the initiators were told: a key per nexus, the reservation holder (an index)."""

    def __init__(self):
        self.keys = {}
        self.holder = None

    def copy(self):
        m = Model()
        m.keys, m.holder = dict(self.keys), self.holder
        return m

    def seen(self):
        """(sorted keys, (holder's key, type) or None): what READ KEYS / RESERVATION show."""
        res = None if self.holder is None else (self.keys[self.holder], pr_lib.WRITE_EXCLUSIVE)
        return sorted(self.keys.values()), res


def next_op(rng, m):
    """One change to the state: (nexus index, service action, new key or 0)."""
    i = rng.randrange(len(NEXUSES))
    if i in m.keys and m.holder is None and rng.random() < 0.3:
        return i, RESERVE, 0
    if m.holder is not None and rng.random() < 0.3:
        return m.holder, RELEASE, 0
    return i, REGISTER_AND_IGNORE, rng.getrandbits(63) | 1


def apply_op(m, op):
    i, sa, key = op
    n = m.copy()
    if sa == REGISTER_AND_IGNORE:
        n.keys[i] = key
    elif sa == RESERVE:
        n.holder = i
    else:
        n.holder = None
    return n


def do_op(sessions, m, op):
    i, sa, key = op
    if sa == REGISTER_AND_IGNORE:
        return pr_lib.prout(sessions[i], sa, 0, key, aptpl=True)
    return pr_lib.prout(sessions[i], sa, m.keys[i], 0, pr_lib.WRITE_EXCLUSIVE, aptpl=True)


def part_aptpl(target, rounds, rng, work):
    state = os.path.join(work, "state")
    lun = "file:%s,size=16M" % os.path.join(work, "lun.img")
    acked = Model()
    kills_mid = 0  # rounds whose in-flight change was found saved though never answered
    in_save = 0  # kills that landed between the temporary file's creation and its rename
    inflight = None
    for rnd in range(rounds):
        d = hostile.Daemon(target, threads=1, lun=lun, prefix="crash-aptpl-",
                           extra=("--state-dir", state))
        try:
            sessions = [pr_lib.session(d.port, name, isid) for name, isid in NEXUSES]
            # not answered at the kill of the round before: either outcome is the truth now
            seen = (pr_lib.read_keys(sessions[0])[1], pr_lib.read_reservation(sessions[0]))
            if seen != acked.seen():
                if inflight is not None and seen == inflight.seen():
                    kills_mid += 1
                    acked = inflight
                else:
                    raise TestFailure(
                        "round %d: after kill -9 the state is keys %s reservation %s; the last "
                        "acknowledged was %s, the one in flight %s" %
                        (rnd, [hex(k) for k in seen[0]], seen[1], acked.seen(),
                         inflight.seen() if inflight else None))
            inflight = None
            timer = killer(d.proc, rng.uniform(0, KILL_WITHIN_S))
            try:
                while d.alive():
                    op = next_op(rng, acked)
                    inflight = apply_op(acked, op)
                    st, sense = do_op(sessions, acked, op)
                    check(st == pr_lib.GOOD, "round %d: PR OUT %s: status 0x%02x sense %s" %
                          (rnd, op, st, hostile.sense_kaa(sense)))
                    acked, inflight = inflight, None
            except Exception as e:  # noqa: BLE001 (whatever the cut connection raises)
                if not dies(d.proc):
                    raise TestFailure("round %d: the stream failed before the kill: %s" %
                                      (rnd, e))
            timer.cancel()
        finally:
            if d.alive():
                d.proc.kill()
            d.proc.wait()
        in_save += bool(leftovers(state, PR_FILE))
    # one more start: it must load what the last kill left, and tidy up
    d = hostile.Daemon(target, threads=1, lun=lun, prefix="crash-aptpl-",
                       extra=("--state-dir", state))
    s = pr_lib.session(d.port, *NEXUSES[0])
    seen = (pr_lib.read_keys(s)[1], pr_lib.read_reservation(s))
    check(seen in (acked.seen(), inflight.seen() if inflight else None),
          "after the last kill the state is %s, not %s" % (seen, acked.seen()))
    d.stop()
    left = []
    for root, _, _ in os.walk(state):
        for name in os.listdir(root):
            if name.startswith(".") and os.path.isfile(os.path.join(root, name)):
                left.append(os.path.join(root, name))
    check(not left, "temporary files left in the state directory: %s" % left)
    print("ok: aptpl: %d kills (%d inside a save); the state after each was the last "
          "acknowledged one, or the one in flight (%d times); no temporary file left" %
          (rounds, in_save, kills_mid))


# ---------------------------------------------------------------- save


def conf_luns(path):
    """The LUN specs of the file's target section, in order."""
    with open(path) as f:
        return [line.split("=", 1)[1].strip() for line in f
                if re.match(r"\s*lun(\s+\d+)?\s*=", line)]


def part_save(target, ctl, rounds, rng, work):
    conf = os.path.join(work, "linerate.conf")
    sock = os.path.join(work, "ctl.sock")
    port = hostile.free_port()
    with open(conf, "w") as f:
        f.write("# the crash test's daemon\nportal = 127.0.0.1:%d\nctl-socket = %s\n"
                "[target %s]\nlun = ram:1M\n" % (port, sock, hostile.TARGET))
    acked = conf_luns(conf)
    mid = 0
    in_save = 0  # kills that landed between the temporary file's creation and its rename
    inflight = None
    for rnd in range(rounds + 1):
        log = open(os.path.join(work, "save-daemon.log"), "ab")
        proc = subprocess.Popen([target, "--config", conf, "--threads", "1",
                                 "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=log)
        log.close()

        def run(*args, _proc=proc):
            return subprocess.run([ctl, "--socket", sock] + list(args), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=30)
        try:
            deadline = time.monotonic() + 15
            while True:
                check(proc.poll() is None, "round %d: the daemon did not start from the file "
                      "the last kill left (exit %s); the file:\n%s" %
                      (rnd, proc.returncode, open(conf).read()))
                if os.path.exists(sock) and run("show", "luns").returncode == 0:
                    break
                check(time.monotonic() < deadline, "round %d: no control socket" % rnd)
                time.sleep(0.05)
            now = conf_luns(conf)
            if now != acked:
                check(inflight is not None and now == inflight,
                      "round %d: after kill -9 the file holds LUNs %s; the last acknowledged "
                      "save had %s, the one in flight %s" % (rnd, now, acked, inflight))
                mid += 1
                acked = now
            inflight = None
            if rnd == rounds:  # one more start after the last kill: the next save tidies up
                r = run("save")
                check(r.returncode == 0, "save after the last kill: %s" % r.stdout)
                break
            timer = killer(proc, rng.uniform(0, KILL_WITHIN_S))
            luns = list(acked)
            while proc.poll() is None:
                if len(luns) > 1 and (len(luns) >= MAX_LUNS or rng.random() < 0.4):
                    r = run("remove", "lun", str(len(luns) - 1), "--timeout", "1")
                    change = luns[:-1]
                else:
                    size = "ram:%dM" % rng.randint(1, 4)
                    r = run("add", "lun", hostile.TARGET, size)
                    change = luns + [size]
                if r.returncode != 0:
                    check(dies(proc), "round %d: linerate-ctl: %s" % (rnd, r.stdout))
                    break
                luns = change
                inflight = luns
                r = run("save")
                if r.returncode != 0:
                    check(dies(proc), "round %d: save: %s" % (rnd, r.stdout))
                    break
                check(conf_luns(conf) == luns, "round %d: saved %s, the daemon runs %s" %
                      (rnd, conf_luns(conf), luns))
                acked, inflight = luns, None
            timer.cancel()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        in_save += bool(leftovers(work, "linerate.conf"))
        if os.path.exists(sock):
            os.unlink(sock)  # a killed daemon leaves its socket; the next one binds anew
    left = leftovers(work, "linerate.conf")
    check(not left, "temporary files left beside the config file: %s" % left)
    print("ok: save: %d kills (%d inside a save); the file loaded after each and held the last "
          "acknowledged save, or the one in flight (%d times); no temporary file left" %
          (rounds, in_save, mid))


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 1
    target, ctl = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else random.randrange(1 << 32)
    print("seed %d, %d rounds each" % (seed, rounds))
    work = tempfile.mkdtemp(prefix="crash-state-")
    try:
        part_aptpl(target, rounds, random.Random(seed), work)
        part_save(target, ctl, rounds, random.Random(seed + 1), work)
    except TestFailure as e:
        print("FAIL (seed %d): %s" % (seed, e), file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
