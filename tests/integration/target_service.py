#!/usr/bin/env python3
"""linerate-target as a service (issue 15, "Service integration"), without systemd running:

  a) the NOTIFY_SOCKET protocol (sd_notify(3)) as systemd's Type=notify sees it: a datagram
     listener gets READY=1 with a STATUS= line once the daemon listens and its control socket
     answers (both are checked right after READY), RELOADING=1 with MONOTONIC_USEC= then
     READY=1 around each reload (linerate-ctl reload, SIGHUP, a refused file), then STOPPING=1
     on SIGTERM, and the daemon exits 0; with a path socket and with an abstract one ("@name");
  b) the event lines (docs/logging.md): login, logout, conn-closed, session-end, lun-added,
     lun-removed, each one line of key=value fields that a tokenizer consumes whole;
  c) stderr as journald's stream (JOURNAL_STREAM = its device:inode): "<6>" priority prefixes
     instead of time stamps; --syslog: no line on stderr, and (in a private mount namespace
     with a datagram socket as /dev/log) event=login/logout arrive there as syslog messages
     of facility daemon from the daemon's pid; `log = bogus` refused with FILE:LINE.

Usage: target_service.py LINERATE-TARGET LINERATE-CTL [CONFIG]
With CONFIG (the packaged /etc/linerate/linerate.conf) the daemon serves that file, its
portals moved to a free port and a private control socket added; the package test runs this
on the binaries and config extracted from the .deb.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (raw initiator: Session)
from hostile import free_port  # noqa: E402

TOKEN = re.compile(r'([a-z][a-z0-9-]*)=("(?:[^"\\]|\\.)*"|[^\s"]+)(?:\s+|$)')


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def parse_event(line):
    """The fields of an event line ("... event=NAME k=v ..."), or None. Fails when the line
    is not key=value all the way."""
    i = line.find("event=")
    if i < 0:
        return None
    rest, fields, pos = line[i:].rstrip("\n"), {}, 0
    while pos < len(rest):
        m = TOKEN.match(rest, pos)
        check(m is not None, "event line not key=value from %r: %s" % (rest[pos:], line))
        v = m.group(2)
        if v.startswith('"'):
            v = re.sub(r'\\(.)', r'\1', v[1:-1])
        check(m.group(1) not in fields, "key %s twice: %s" % (m.group(1), line))
        fields[m.group(1)] = v
        pos = m.end()
    return fields


class Service:
    """The daemon started as systemd would start a Type=notify service."""

    def __init__(self, target, ctl, work, config_src=None, abstract=False, journal=False,
                 extra=(), wrap=()):
        self.ctl = ctl
        self.work = work
        self.port = free_port()
        self.sock_path = os.path.join(work, "ctl.sock")
        self.target_name = "iqn.2026-11.org.linerate:service"
        conf = self.conf = os.path.join(work, "service.conf")
        if config_src:
            lines = open(config_src).read().splitlines()
            names = [l.split()[1].rstrip("]") for l in lines if l.startswith("[target ")]
            check(names, "%s has no [target] section" % config_src)
            self.target_name = names[0]
            out = ["ctl-socket = %s" % self.sock_path]
            for l in lines:
                if re.match(r"\s*portal\s*=", l):
                    l = "portal = 127.0.0.1:%d" % self.port
                out.append(l)
            text = "\n".join(out) + "\n"
        else:
            text = ("ctl-socket = %s\nportal = 127.0.0.1:%d\n[target %s]\nlun = ram:64M\n"
                    % (self.sock_path, self.port, self.target_name))
        with open(conf, "w") as f:
            f.write(text)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "linerate-test-notify-%d-%d" % (os.getpid(), self.port)
            self.notify.bind("\0" + name)
            notify_env = "@" + name
        else:
            notify_env = os.path.join(work, "notify.sock")
            self.notify.bind(notify_env)
        self.notify.settimeout(0.2)
        self.log_path = os.path.join(work, "target.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ, NOTIFY_SOCKET=notify_env)
        env.pop("JOURNAL_STREAM", None)
        if journal:
            st = os.fstat(self.log.fileno())
            env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
        self.proc = subprocess.Popen(list(wrap) + [target, "--config", conf, "--threads", "2"]
                                     + list(extra),
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.messages = []

    def wait_message(self, key, timeout=15):
        """The first datagram with KEY=..., as a dict of its lines."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.notify.recv(4096).decode()
            except socket.timeout:
                check(self.proc.poll() is None or key == "STOPPING",
                      "daemon exited %s before %s; log:\n%s" % (self.proc.poll(), key,
                                                                self.log_text()))
                continue
            msg = dict(l.split("=", 1) for l in data.split("\n") if "=" in l)
            self.messages.append(msg)
            if key in msg:
                return msg
        raise Failure("no %s= datagram in %d s (got %r); log:\n%s"
                      % (key, timeout, self.messages, self.log_text()))

    def ctl_run(self, *args):
        r = subprocess.run([self.ctl, "--socket", self.sock_path] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        check(r.returncode == 0, "linerate-ctl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                                  r.stdout))
        return r.stdout

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def events(self):
        return [e for e in (parse_event(l) for l in self.log_text().splitlines()) if e]

    def wait_event(self, name, timeout=10, **want):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events():
                if e["event"] == name and all(e.get(k) == v for k, v in want.items()):
                    return e
            time.sleep(0.05)
        raise Failure("no event=%s %r in the log:\n%s" % (name, want, self.log_text()))

    def stop(self):
        """SIGTERM: STOPPING=1, then exit 0."""
        self.proc.send_signal(signal.SIGTERM)
        msg = self.wait_message("STOPPING")
        check(msg["STOPPING"] == "1", "STOPPING=%s" % msg["STOPPING"])
        rc = self.proc.wait(timeout=30)
        check(rc == 0, "daemon exited %d on SIGTERM; log:\n%s" % (rc, self.log_text()))
        self.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.notify.close()
        self.log.close()


def ready_checks(s):
    msg = s.wait_message("READY")
    check(msg["READY"] == "1", "READY=%s" % msg["READY"])
    status = msg.get("STATUS", "")
    check(re.match(r"serving \d+ targets?, \d+ LUNs? on 1 portal$", status),
          "READY without the expected STATUS: %r" % status)
    # READY promises both: the portal accepts and the control socket answers, at once.
    socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
    out = s.ctl_run("show", "targets")
    check(s.target_name in out, "show targets does not list %s: %s" % (s.target_name, out))
    print("ok: READY=1, STATUS=%r; portal and control socket answer" % status)


def reload_checks(s):
    """A reload (linerate-ctl reload, SIGHUP, a refused file) between RELOADING=1 with
    MONOTONIC_USEC= (sd_notify(3), systemd 253) and READY=1."""
    good = open(s.conf).read()

    def bracket(how, trigger):
        before = time.monotonic_ns() // 1000
        trigger()
        msg = s.wait_message("RELOADING")
        after = time.monotonic_ns() // 1000
        check(msg["RELOADING"] == "1", "%s: RELOADING=%s" % (how, msg["RELOADING"]))
        usec = msg.get("MONOTONIC_USEC", "")
        check(usec.isdigit() and before <= int(usec) <= after,
              "%s: MONOTONIC_USEC=%r not between %d and %d" % (how, usec, before, after))
        ready = s.wait_message("READY")
        check(ready["READY"] == "1" and "RELOADING" not in ready,
              "%s: after RELOADING=1: %r" % (how, ready))
        return ready.get("STATUS", "")

    st = bracket("reload", lambda: s.ctl_run("reload"))
    check(st.startswith("serving ") and "reloaded" in st, "reload: STATUS=%r" % st)
    st = bracket("SIGHUP", lambda: s.proc.send_signal(signal.SIGHUP))
    check("reloaded" in st, "SIGHUP: STATUS=%r" % st)
    with open(s.conf, "a") as f:
        f.write("no such key = 1\n")

    def refused():
        r = subprocess.run([s.ctl, "--socket", s.sock_path, "reload"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        check(r.returncode == 1, "a bad file reloaded: %s" % r.stdout)

    st = bracket("refused reload", refused)
    check("reload refused" in st, "refused reload: STATUS=%r" % st)
    with open(s.conf, "w") as f:
        f.write(good)
    print("ok: reload, SIGHUP and a refused reload between RELOADING=1 (MONOTONIC_USEC) and "
          "READY=1")


def event_checks(s):
    hostile.TARGET = s.target_name
    ini = "iqn.2026-11.org.linerate:service-test"
    a = hostile.Session(s.port, name=ini).login()
    e = s.wait_event("login", initiator=ini)
    for k, v in (("target", s.target_name), ("type", "normal"), ("erl", "0"), ("auth", "none"),
                 ("header-digest", "none"), ("data-digest", "none")):
        check(e.get(k) == v, "event=login %s=%r, expected %r: %r" % (k, e.get(k), v, e))
    for k in ("peer", "tsih", "cid", "mrdsl"):
        check(k in e, "event=login without %s: %r" % (k, e))
    tsih = e["tsih"]
    a.logout()
    e = s.wait_event("logout", tsih=tsih)
    check(e.get("reason") == "close-session" and e.get("initiator") == ini,
          "event=logout: %r" % e)
    s.wait_event("session-end", tsih=tsih, initiator=ini, target=s.target_name)
    # A connection that goes away without a logout: conn-closed with a quoted reason.
    b = hostile.Session(s.port, name=ini + "-lost").login()
    tsih_b = s.wait_event("login", initiator=ini + "-lost")["tsih"]
    b.c.reset()
    e = s.wait_event("conn-closed", tsih=tsih_b)
    check(e.get("reason") and e.get("initiator") == ini + "-lost", "event=conn-closed: %r" % e)
    s.wait_event("session-end", tsih=tsih_b)
    out = s.ctl_run("--json", "add", "lun", s.target_name, "ram:1M")
    lun = re.search(r'"lun": *(\d+)', out)
    check(lun, "add lun answer without lun: %s" % out)
    s.wait_event("lun-added", target=s.target_name, lun=lun.group(1), spec="ram:1M", ro="no")
    s.ctl_run("remove", "lun", s.target_name, lun.group(1))
    e = s.wait_event("lun-removed", target=s.target_name, lun=lun.group(1))
    check(e.get("commands-left") == "0", "event=lun-removed: %r" % e)
    print("ok: event lines login, logout, conn-closed, session-end, lun-added, lun-removed")


# Run in a private mount namespace (unshare -m, propagation private) with DIR bound over /dev:
# DIR holds the test's syslog socket as "log" and bind mounts of the harmless device nodes,
# so the daemon's syslog(3) reaches the test and nothing outside the namespace changes.
PRIVATE_DEV = """set -e
dev=$1
shift
for n in null zero full random urandom; do
    [ -e /dev/$n ] || continue
    : >"$dev/$n"
    mount --bind "/dev/$n" "$dev/$n"
done
ln -s /proc/self/fd "$dev/fd"
mount --bind "$dev" /dev
exec "$@"
"""


def syslog_checks(target, ctl, work):
    """--syslog: the event lines go to syslog(3), i.e. datagrams on /dev/log (RFC 3164 form:
    "<PRI>TIMESTAMP linerate-target[PID]: MSG", facility daemon), and none to stderr."""
    if shutil.which("unshare") is None:
        print("skip: no unshare(1) (util-linux): the syslog messages themselves are not checked")
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if probe.returncode != 0:
        print("skip: no private mount namespace here (unshare -m: %s): the syslog messages "
              "themselves are not checked" % probe.stderr.strip())
        return False
    dev = os.path.join(work, "dev")
    os.mkdir(dev)
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(os.path.join(dev, "log"))
    log.settimeout(0.2)
    got = []

    def wait_line(pid, pred, what, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = log.recv(4096).decode(errors="replace").rstrip("\n\0")
            except socket.timeout:
                continue
            got.append(msg)
            m = re.match(r"<(\d+)>(.*?) linerate-target\[(\d+)\]: (.*)$", msg)
            check(m, "syslog datagram not in the <PRI>... linerate-target[PID]: form: %r" % msg)
            check(int(m.group(3)) == pid, "syslog from pid %s, the daemon is %d: %r"
                  % (m.group(3), pid, msg))
            check(int(m.group(1)) >> 3 == 3, "syslog facility is not daemon: %r" % msg)
            if pred(int(m.group(1)) & 7, m.group(4)):
                return m.group(4)
        raise Failure("no syslog message with %s in %d s; got:\n%s" % (what, timeout,
                                                                       "\n".join(got)))

    wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c", PRIVATE_DEV, "sh", dev]
    s = Service(target, ctl, work, None, extra=["--syslog"], wrap=wrap)
    try:
        ready_checks(s)
        hostile.TARGET = s.target_name
        ini = "iqn.2026-11.org.linerate:service-syslog"
        a = hostile.Session(s.port, name=ini).login()
        line = wait_line(s.proc.pid, lambda pri, text: "event=login" in text and ini in text,
                         "event=login initiator=%s" % ini)
        e = parse_event(line)
        check(e and e.get("initiator") == ini and e.get("target") == s.target_name,
              "syslog event=login: %r" % line)
        check(any(l.endswith(line) and l.startswith("<30>") for l in got),
              "event=login is not at priority info (<30>): %r" % got)
        a.logout()
        wait_line(s.proc.pid, lambda pri, text: "event=logout" in text, "event=logout")
        s.stop()
        check("event=" not in s.log_text() and "INFO" not in s.log_text(),
              "--syslog: lines still on stderr:\n%s" % s.log_text())
    finally:
        s.close()
        log.close()
    print("ok: --syslog: event=login and event=logout arrive on /dev/log as "
          "<30>... linerate-target[%d]: (private mount namespace), nothing on stderr"
          % s.proc.pid)
    return True


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    target, ctl = sys.argv[1], sys.argv[2]
    config = sys.argv[3] if len(sys.argv) == 4 else None
    with tempfile.TemporaryDirectory(prefix="lr-service-") as work:
        s = Service(target, ctl, work, config)
        try:
            ready_checks(s)
            reload_checks(s)
            event_checks(s)
            s.stop()
        finally:
            s.close()
        print("ok: STOPPING=1 on SIGTERM, exit 0 (path NOTIFY_SOCKET)")
        os.unlink(os.path.join(work, "notify.sock"))

        s = Service(target, ctl, work, config, abstract=True, journal=True)
        try:
            ready_checks(s)
            s.stop()
            lines = [l for l in s.log_text().splitlines() if l]
            check(lines and all(re.match(r"<[3467]>", l) for l in lines),
                  "with JOURNAL_STREAM every line starts with <N>:\n%s" % "\n".join(lines))
            check(any(l.startswith("<6>") for l in lines), "no info line <6>")
        finally:
            s.close()
        print("ok: abstract NOTIFY_SOCKET; JOURNAL_STREAM gives <N> priority prefixes")

        if config is None:
            if not syslog_checks(target, ctl, work):
                s = Service(target, ctl, work, None, extra=["--syslog"])
                try:
                    ready_checks(s)
                    s.stop()
                    check("event=" not in s.log_text() and "INFO" not in s.log_text(),
                          "--syslog: lines still on stderr:\n%s" % s.log_text())
                finally:
                    s.close()
                print("ok: --syslog writes nothing to stderr")
            bad = os.path.join(work, "bad.conf")
            with open(bad, "w") as f:
                f.write("# x\nlog = journal\nportal = 127.0.0.1:%d\n[target %s]\nlun = ram:1M\n"
                        % (free_port(), "iqn.2026-11.org.linerate:bad"))
            r = subprocess.run([target, "--config", bad, "--ctl-socket", "none"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               timeout=30)
            check(r.returncode == 2 and "%s:2:" % bad in r.stderr and "log" in r.stderr,
                  "log = journal: exit %d, %s" % (r.returncode, r.stderr))
            print("ok: log = journal refused: %s" % r.stderr.strip())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
