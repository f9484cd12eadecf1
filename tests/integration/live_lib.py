"""Helpers shared by the tests that change a running daemon (target_alua_live.py,
target_hosts_live.py, target_hosts_reload.py): linerate-ctl, one SCSI command with no retry over
hostile.py's raw initiator, unit attentions drained, REPORT LUNS, the daemon started and
stopped, and the main() around a run in a scratch directory. Python 3 standard library only."""

import json
import os
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile import TestFailure, check, sense_kaa  # noqa: E402

TUR = bytes(6)


class Ctl:
    def __init__(self, binary, sock):
        self.binary, self.sock = binary, sock

    def run(self, *args, ok=True):
        p = subprocess.run([self.binary, "--socket", self.sock] + list(args),
                           capture_output=True, text=True, timeout=60)
        if ok:
            check(p.returncode == 0, "linerate-ctl %s: exit %d: %s%s" % (
                " ".join(args), p.returncode, p.stdout, p.stderr))
        return p

    def json(self, *args):
        return json.loads(self.run("--json", *args).stdout)


class Daemon:
    """linerate-target on config file CONF, its control socket SOCK, its stderr in LOG_PATH."""

    def __init__(self, binary, conf, sock, log_path):
        self.binary, self.conf, self.sock = binary, conf, sock
        self.log = open(log_path, "a+")
        self.proc = None

    def start(self):
        """Start it; ready once its control socket exists, or TestFailure."""
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.proc = subprocess.Popen([self.binary, "--config", self.conf],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        for _ in range(400):
            if os.path.exists(self.sock) or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        check(self.proc.poll() is None and os.path.exists(self.sock), "the daemon did not start")

    def stop(self):
        """SIGTERM: it must exit 0."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            rc = self.proc.wait(30)
            check(rc == 0, "the daemon exited %d on SIGTERM" % rc)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self):
        self.log.flush()
        self.log.seek(0)
        return "".join(self.log.readlines()[-30:])

    def around(self, body):
        """Start it, BODY(), stop it; on TestFailure the log's tail goes to stderr first."""
        try:
            self.start()
            body()
            self.stop()
        except TestFailure:
            sys.stderr.write(self.tail())
            raise
        finally:
            self.kill()


def raw(s, cdb, lun, read_len=0, write_data=None):
    """One command, no retry: (status, (key, asc, ascq) or None, data)."""
    st, sense, data = s.scsi(bytes(cdb), lun=lun, read_len=read_len, write_data=write_data)
    return st, sense_kaa(sense) if st == 2 else None, data


def drain_uas(s, lun):
    """TEST UNIT READY until no UA is pending: the UAs reported, in order."""
    seen = []
    for _ in range(16):
        st, kaa, _ = raw(s, TUR, lun)
        if not (st == 2 and kaa[0] == 6):
            return seen
        seen.append(kaa)
    raise TestFailure("LUN %d: UNIT ATTENTION after 16 TEST UNIT READYs: %s" % (lun, seen))


def report_luns(s):
    """REPORT LUNS (SPC-4 6.33) on LUN 0: the LUN numbers listed, or TestFailure."""
    cdb = struct.pack(">BBxxxxIxx", 0xA0, 0, 4096)
    st, kaa, data = raw(s, cdb, 0, read_len=4096)
    check(st == 0, "REPORT LUNS: status 0x%02x sense %s" % (st, kaa))
    n = struct.unpack(">I", data[:4])[0] // 8
    return [struct.unpack(">H", data[8 + 8 * i:10 + 8 * i])[0] & 0x3FFF for i in range(n)]


def main(run, doc, prefix, passed="ok"):
    """RUN(binary, work) in a scratch directory: exit 0 printing PASSED, 1 with the reason."""
    if len(sys.argv) != 2:
        sys.exit(doc)
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        try:
            run(sys.argv[1], work)
        except TestFailure as e:
            print("FAIL: %s" % e)
            return 1
    print(passed)
    return 0
