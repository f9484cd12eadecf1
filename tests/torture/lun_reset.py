#!/usr/bin/env python3
"""LOGICAL UNIT RESET of LUN 0 from a second I_T nexus, for the torture run (torture.c): log in
as another initiator, send the TMF (immediate, RFC 7143 §11.5.1 function 5), log out. Every
task of the torture's session on the LUN is aborted by it (SAM-5 §7.7), its orphans at ERL 2
too; the torture session meets the reset's unit attention, and its commands the target aborted
time out. linerate's initiator library sends no task management of its own but TASK
REASSIGN, so the reset comes from here (hostile.py's raw initiator).

usage: lun_reset.py PORT TARGET_IQN
Exit 0 when the answer was "function complete", 1 otherwise (the reason on stderr)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hostile  # noqa: E402
from metrics_tmf import tmf  # noqa: E402

TMF_LOGICAL_UNIT_RESET = 5

if __name__ == "__main__":
    hostile.TARGET = sys.argv[2]
    try:
        s = hostile.Session(int(sys.argv[1]), name="iqn.2026-12.org.linerate:torture-reset")
        s.login()
        rsp = tmf(s, TMF_LOGICAL_UNIT_RESET)
        s.logout()
    except (hostile.TestFailure, OSError, hostile.Closed) as e:
        print("lun_reset.py: %s" % e, file=sys.stderr)
        sys.exit(1)
    if rsp != 0:
        print("lun_reset.py: LOGICAL UNIT RESET answered %d" % rsp, file=sys.stderr)
        sys.exit(1)
