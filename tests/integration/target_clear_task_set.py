#!/usr/bin/env python3
"""CLEAR TASK SET and ABORT TASK SET between two initiators (SAM-5 §7.1, §7.4; control mode
page TAS 0).

usage: target_clear_task_set.py PATH/TO/linerate-target

For each of --threads 1 and 2, two sessions A and B (two I_T nexuses: same initiator name,
two ISIDs) through hostile.py's raw initiator, InitialR2T=Yes and ImmediateData=No, so that a
WRITE stays in the task set once it has its R2T:
  1. A's WRITE waits for its Data-Out; B sends ABORT TASK SET on LUN 0 (answered 0): it touches
     B's own tasks only, so neither A nor B gets a unit attention (TEST UNIT READY is GOOD on
     both);
  2. B sends CLEAR TASK SET on LUN 0 (answered 0): A's WRITE is aborted (never answered), A's
     next command on LUN 0 gets UNIT ATTENTION 2Fh/00h COMMANDS CLEARED BY ANOTHER INITIATOR,
     once; B, the requester, gets none.
No timing: every step waits for the answer of the one before. Exit 0 when every check holds,
1 with the reason. Python 3 standard library only."""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import TestFailure, check, sense_kaa  # noqa: E402
from metrics_tmf import start_write, tmf  # noqa: E402  (a WRITE waiting for Data-Out, a TMF)

TMF_ABORT_TASK_SET, TMF_CLEAR_TASK_SET = 2, 4
TUR = bytes(6)


def tur(s, who):
    """(status, (key, asc, ascq) or None) of a TEST UNIT READY on LUN 0."""
    st, sense, _ = s.scsi(TUR)
    check(st in (0, 2), "%s: TEST UNIT READY status 0x%02x" % (who, st))
    return st, sense_kaa(sense) if st == 2 else None


def expect_good(s, who):
    st, kaa = tur(s, who)
    check(st == 0, "%s: TEST UNIT READY got CHECK CONDITION %s, expected GOOD" %
          (who, kaa and "%x/%02xh/%02xh" % kaa))


def run(binary, threads):
    d = hostile.Daemon(binary, threads=threads, lun="ram:16M", log_level="info",
                       prefix="clear-task-set-")
    try:
        want = {"InitialR2T": "Yes", "ImmediateData": "No"}
        a = hostile.Session(d.port, want=want).login()
        b = hostile.Session(d.port, want=want).login()
        for s in (a, b):
            st, _, _ = s.scsi_retry_ua(TUR)  # the power-on UA out of the way
            check(st == 0, "TEST UNIT READY after login: status 0x%02x" % st)

        start_write(a, 0)
        check(tmf(b, TMF_ABORT_TASK_SET) == 0, "ABORT TASK SET: not Function complete")
        expect_good(b, "B after its own ABORT TASK SET")
        expect_good(a, "A after B's ABORT TASK SET (its WRITE is not B's)")

        check(tmf(b, TMF_CLEAR_TASK_SET) == 0, "CLEAR TASK SET: not Function complete")
        expect_good(b, "B, the CLEAR TASK SET requester")
        st, kaa = tur(a, "A after B's CLEAR TASK SET")  # its WRITE's answer would fail here
        check(st == 2 and kaa == (6, 0x2F, 0x00),
              "A after B's CLEAR TASK SET: status 0x%02x sense %s, expected UNIT ATTENTION "
              "2Fh/00h COMMANDS CLEARED BY ANOTHER INITIATOR" % (st, kaa))
        expect_good(a, "A after its UA")
        a.logout()
        b.logout()
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(15)
        except subprocess.TimeoutExpired:
            raise TestFailure("daemon did not exit within 15 s of SIGTERM")
        check(rc == 0, "daemon exited %d on SIGTERM" % rc)
    except (TestFailure, hostile.Closed, OSError) as e:
        raise TestFailure("--threads %d: %s\n%s" % (threads, e, d.log_tail()))
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


if __name__ == "__main__":
    sys.exit(hostile.main_per_reactors(run, __doc__))
