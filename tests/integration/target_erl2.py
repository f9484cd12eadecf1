#!/usr/bin/env python3
"""ErrorRecoveryLevel 2 on the target, over real sockets (RFC 7143 §7.2.2, §11.5.1, §11.14,
§6.3.4).

usage: target_erl2.py PATH/TO/linerate-target

For each of --threads 1 and --threads 2 (the two connections of the session on one reactor or
on two), a daemon with error-recovery-level = 2 and a raw initiator (hostile.py's) logging in
at ErrorRecoveryLevel=2 with two connections (CID 0 and 1):
  1. a 256 KiB READ on CID 0 whose first two Data-In PDUs arrive; CID 0 is reset (RST); a
     Logout "remove the connection for recovery" for CID 0 on CID 1 answers 0 with Time2Wait 2
     and Time2Retain 20; TASK REASSIGN (immediate, ExpDataSN 2) on CID 1 answers 0 (function
     complete), then Data-In DataSN 2 and 3 come on CID 1 with the right data, the status in
     the last with the next StatSN of CID 1;
  2. a WRITE on CID 1 gets its R2T and half of the burst; a login with the session's TSIH and
     CID 1 reinstates that connection (the old one is closed by the target); TASK REASSIGN on
     the new one answers 0 and an R2T (R2TSN 1) asks for the other half, after which the WRITE
     is GOOD and the data reads back whole;
  3. TASK REASSIGN of an ITT nobody has answers 1 (task does not exist);
  4. a Logout's ExpStatSN speaks for the newest connection of its CID only: a TEST UNIT READY
     answered on CID 0 but never acknowledged, CID 0 reset, a new CID 0 (its StatSNs start
     over) that answers one command past that StatSN and is reset in turn, a Logout
     "remove for recovery" for CID 0 with that connection's ExpStatSN: TASK REASSIGN of the
     first TEST UNIT READY still answers 0 and its status comes again;
  5. TASK REASSIGN takes the newest task of an ITT: a TEST UNIT READY answered on CID 0 and
     never acknowledged, CID 0 reset, a new CID 0 on which a WRITE reuses that ITT (the
     initiator had the status) and gets its R2T, that CID 0 logged out for recovery while up
     and TASK REASSIGN of the ITT sent right behind: it answers 0 and the WRITE's recovery R2T
     follows, not the old status; the WRITE then completes GOOD. The same with ABORT TASK: 0,
     the old status does not come again, and the WRITE is gone (a TASK REASSIGN of the ITT
     then finds the older TEST UNIT READY, its status again, not the WRITE's R2T);
  6. ABORT TASK of an ITT that an old orphan and an answered task on a live CID 0 both have
     (the TEST UNIT READY of case 5's kind, then another with the same ITT, answered): 1 (task
     does not exist), and the orphan's status does not come again;
  7. a restart's Login ExpStatSN acknowledges the old connection's answers (§11.12): a TEST
     UNIT READY answered on CID 0, CID 0 restarted by a login whose ExpStatSN is past that
     answer, once while the old CID 0 is up (reinstatement) and once after its reset: TASK
     REASSIGN of the TEST UNIT READY answers 1 (task does not exist) both times;
  8. logout, SIGTERM: the daemon exits 0; its log has the orphan and reassignment lines.
Where a case needs a CID 0 the target has seen reset (cases 4, 6 and 7), it waits for the
target's log line that names that connection's port as gone, so the case takes the path it is
about every time (case 4 checks it: its Logout finds nothing to wait for, Time2Wait 0).
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
import target_abort_mcs as mcs  # noqa: E402  (McsSession, Daemon)
from hostile import (OP_DATA_IN, OP_LOGOUT, OP_LOGOUT_RSP, OP_R2T, OP_SCSI,  # noqa: E402
                     OP_SCSI_RSP, OP_TMF, OP_TMF_RSP, TestFailure, bhs, check, cdb_rw10)

TMF_TASK_REASSIGN = 8
READ_LEN = 256 * 1024  # four Data-In PDUs of 64 KiB (our MaxRecvDataSegmentLength)


class Erl2Session(mcs.McsSession):
    """Two connections of one session at ErrorRecoveryLevel 2."""

    def __init__(self, port):
        want = {"MaxConnections": "2", "InitialR2T": "Yes", "ImmediateData": "No",
                "MaxBurstLength": "262144", "FirstBurstLength": "65536",
                "ErrorRecoveryLevel": "2"}
        self.port = port
        self.c1 = hostile.Session(port, isid=mcs.ISID, want=want).login()
        self.c2 = self.join(port, cid=1)
        self.itt = 0x1000
        self.cmdsn = self.c1.cmdsn
        self.answered = []

    def reassign(self, conn, rtt, exp_datasn):
        """TASK REASSIGN, immediate (§11.5.1); returns the TMF Response header."""
        itt = self.next_itt()
        conn.c.send_pdu(bhs(OP_TMF, 0x80 | TMF_TASK_REASSIGN, hostile.lun_field(0), itt, rtt,
                            self.cmdsn, conn.expstatsn, struct.pack(">II", 0, exp_datasn),
                            immediate=True))
        rh, _ = conn.recv(5)
        check(rh[0] & 0x3F == OP_TMF_RSP and struct.unpack(">I", rh[16:20])[0] == itt,
              "TASK REASSIGN: op 0x%02x instead of its TMF Response" % (rh[0] & 0x3F))
        return rh

    def logout_cid0_for_recovery(self, conn, expstatsn):
        """Logout "remove the connection for recovery" (reason 2) for CID 0, sent on conn with
        that ExpStatSN (CID 0's, §11.14); returns the Logout Response header, checked to be 0."""
        conn.c.send_pdu(bhs(OP_LOGOUT, 0x80 | 2, b"\0" * 8, self.next_itt(), 0 << 16, self.cmdsn,
                            expstatsn, immediate=True))
        rh, _ = conn.recv(5)
        check(rh[0] & 0x3F == OP_LOGOUT_RSP and rh[2] == 0,
              "Logout reason 2 for CID 0: op 0x%02x response %d" % (rh[0] & 0x3F, rh[2]))
        return rh


def read_reassigned(m, d):
    lba = 0
    data = os.urandom(READ_LEN)
    m.scsi(m.c1, b"\0" * 6)  # takes the new nexus's POWER ON unit attention
    st, _, _ = m.scsi(m.c1, cdb_rw10(0x2A, lba, READ_LEN // 512), write_data=data)
    check(st == 0, "WRITE status 0x%02x" % st)
    itt = m.next_itt()
    m.c1.c.send_pdu(bhs(OP_SCSI, 0xC1, hostile.lun_field(0), itt, READ_LEN, m.cmdsn,
                        m.c1.expstatsn, cdb_rw10(0x28, lba, READ_LEN // 512)))
    m.cmdsn += 1
    for sn in range(2):  # raw: what arrives is not acknowledged
        rh, rd = m.c1.c.recv_pdu(5)
        check(rh[0] & 0x3F == OP_DATA_IN and struct.unpack(">I", rh[36:40])[0] == sn,
              "READ: op 0x%02x instead of Data-In DataSN %d" % (rh[0] & 0x3F, sn))
        check(rd == data[sn * 65536:(sn + 1) * 65536], "READ: DataSN %d data differ" % sn)
    m.c1.c.reset()
    c2 = m.c2
    rh = m.logout_cid0_for_recovery(c2, m.c1.expstatsn)
    t2w, t2r = struct.unpack(">HH", rh[40:44])
    # Time2Wait is DefaultTime2Wait (2) when this Logout closes CID 0, and 0 when the target saw
    # the reset first and the connection was already gone (nothing left to clean up, §11.15.2;
    # commit 6091c95): which of the two the target handles first is not ours to decide here.
    check(t2w in (0, 2) and t2r == 20,
          "Logout Response Time2Wait/Retain %d/%d, not 2/20 or 0/20" % (t2w, t2r))
    tmf = m.reassign(c2, itt, 2)
    check(tmf[2] == 0, "TASK REASSIGN of the READ: response %d, not 0" % tmf[2])
    tmf_statsn = struct.unpack(">I", tmf[24:28])[0]
    for sn in (2, 3):
        rh, rd = c2.recv(5)
        check(rh[0] & 0x3F == OP_DATA_IN and struct.unpack(">I", rh[16:20])[0] == itt,
              "after TASK REASSIGN: op 0x%02x instead of Data-In" % (rh[0] & 0x3F))
        got_sn, off = struct.unpack(">I", rh[36:40])[0], struct.unpack(">I", rh[40:44])[0]
        check(got_sn == sn and off == sn * 65536, "Data-In DataSN %d offset %d" % (got_sn, off))
        check(rd == data[off:off + 65536], "reassigned Data-In DataSN %d: data differ" % sn)
        if sn == 3:
            check(rh[1] & 0x01 and rh[3] == 0, "the last Data-In carries no GOOD status")
            statsn = struct.unpack(">I", rh[24:28])[0]
            check(statsn == tmf_statsn + 1,
                  "status StatSN %d, not CID 1's next (%d)" % (statsn, tmf_statsn + 1))
    st, _, _ = m.scsi(c2, b"\0" * 6)
    check(st == 0, "TEST UNIT READY after the reassignment: status 0x%02x" % st)


def write_reinstated(m, d):
    lba = 2048
    itt, cmdsn, ttt, want = m.start_write(m.c2, lba)
    data = os.urandom(want)
    half = want // 2
    m.data_out(m.c2, itt, ttt, 0, 0, data[:half], False)
    old = m.c2
    c3 = m.join(m.port, cid=1)  # reinstatement: same TSIH, same CID
    check(old.c.wait_closed(3), "the reinstated connection was not closed by the target")
    tmf = m.reassign(c3, itt, 0)
    check(tmf[2] == 0, "TASK REASSIGN of the WRITE: response %d, not 0" % tmf[2])
    rh, _ = c3.recv(5)
    check(rh[0] & 0x3F == OP_R2T and struct.unpack(">I", rh[16:20])[0] == itt,
          "after TASK REASSIGN: op 0x%02x instead of an R2T" % (rh[0] & 0x3F))
    r2tsn = struct.unpack(">I", rh[36:40])[0]
    off, length = struct.unpack(">II", rh[40:48])
    check((r2tsn, off, length) == (1, half, want - half),
          "recovery R2T: R2TSN %d offset %d length %d" % (r2tsn, off, length))
    m.data_out(c3, itt, struct.unpack(">I", rh[20:24])[0], 0, off, data[off:], True)
    m.expect_good(c3, itt, "the reassigned WRITE")
    st, _, back = m.scsi(c3, cdb_rw10(0x28, lba, want // 512), read_len=want)
    check(st == 0 and back == data, "the reassigned WRITE does not read back whole")
    tmf = m.reassign(c3, 0xDEAD, 0)
    check(tmf[2] == 1, "TASK REASSIGN of an unknown ITT: response %d, not 1" % tmf[2])
    return c3


def sn_lt(a, b):
    """Serial number arithmetic (RFC 1982), as StatSN compares."""
    return a != b and (b - a) & 0xFFFFFFFF < 0x80000000


def tur_unacked(m, conn, itt):
    """TEST UNIT READY with that ITT on conn, its SCSI Response read raw: its StatSN is never
    acknowledged. Returns the response header."""
    conn.c.send_pdu(bhs(OP_SCSI, 0x80, hostile.lun_field(0), itt, 0, m.cmdsn, conn.expstatsn,
                        b"\0" * 6))
    m.cmdsn += 1
    rh, _ = conn.c.recv_pdu(5)
    check(rh[0] & 0x3F == OP_SCSI_RSP and struct.unpack(">I", rh[16:20])[0] == itt,
          "TEST UNIT READY: op 0x%02x instead of its SCSI Response" % (rh[0] & 0x3F))
    return rh


def reset_and_wait_gone(m, conn):
    """Reset conn (a CID 0) and wait until the target has seen it: its teardown logged that
    this connection's tasks went to an orphan group. What comes next then meets a CID 0 that is
    gone (the path each case means to test), never one still up; a sleep only made that
    likely."""
    line = "CID 0 (127.0.0.1:%d) gone at ErrorRecoveryLevel 2" % conn.c.sock.getsockname()[1]
    conn.c.reset()
    deadline = time.monotonic() + 10
    while line not in open(m.daemon.log.name).read():
        check(time.monotonic() < deadline, "the target did not see CID 0's reset within 10 s")
        time.sleep(0.01)


def ack_newest_only(m, c3):
    itt = m.next_itt()
    ca = m.join(m.port, cid=0)
    lost = struct.unpack(">I", tur_unacked(m, ca, itt)[24:28])[0]
    ca.c.reset()
    cb = m.join(m.port, cid=0)  # CID 0 again, its StatSN from 1 (our ExpStatSN 0 at login)
    m.scsi(cb, b"\0" * 6)
    check(sn_lt(lost, cb.expstatsn), "the test's premise: the new CID 0's ExpStatSN %d is not "
          "past the unacknowledged StatSN %d" % (cb.expstatsn, lost))
    # gone before the Logout comes: its ExpStatSN goes to the orphan group of that CID 0
    reset_and_wait_gone(m, cb)
    rh = m.logout_cid0_for_recovery(c3, cb.expstatsn)
    check(struct.unpack(">H", rh[40:42])[0] == 0, "the Logout found CID 0 still up (Time2Wait "
          "%d): the case under test is a CID 0 gone" % struct.unpack(">H", rh[40:42])[0])
    tmf = m.reassign(c3, itt, 0)
    check(tmf[2] == 0, "TASK REASSIGN of the TEST UNIT READY the older CID 0 answered: "
          "response %d, not 0 (the Logout's ExpStatSN %d released it)" % (tmf[2], cb.expstatsn))
    rh, _ = c3.recv(5)
    check(rh[0] & 0x3F == OP_SCSI_RSP and struct.unpack(">I", rh[16:20])[0] == itt,
          "after TASK REASSIGN: op 0x%02x instead of the SCSI Response again" % (rh[0] & 0x3F))


def reused_itt_newest(m, c3, tmf_fn):
    itt = m.next_itt()
    ca = m.join(m.port, cid=0)
    tur_unacked(m, ca, itt)  # the initiator has the status, the target no acknowledgement
    ca.c.reset()
    cb = m.join(m.port, cid=0)
    lba, wlen = 4096, mcs.WRITE_BLOCKS * mcs.BLOCK
    write_cmdsn = m.cmdsn
    cb.c.send_pdu(bhs(OP_SCSI, 0xA1, hostile.lun_field(0), itt, wlen, m.cmdsn, cb.expstatsn,
                      cdb_rw10(0x2A, lba, mcs.WRITE_BLOCKS)))  # the same ITT, no immediate data
    m.cmdsn += 1
    rh, _ = cb.recv(5)
    check(rh[0] & 0x3F == OP_R2T and struct.unpack(">I", rh[16:20])[0] == itt,
          "WRITE with the reused ITT: op 0x%02x instead of an R2T" % (rh[0] & 0x3F))
    # CID 0 is up: the Logout closes it (on its own reactor, after the Logout Response), and
    # the TMF right behind must still find the WRITE, not the older orphan
    m.logout_cid0_for_recovery(c3, cb.expstatsn)
    if tmf_fn == "abort":
        rsp = m.abort_task(c3, itt, write_cmdsn)
        check(rsp == 0, "ABORT TASK of the reused ITT: response %d, not 0" % rsp)
        check((c3, itt) not in m.answered, "ABORT TASK of the reused ITT: the older TEST UNIT "
              "READY's status came again, for the WRITE that now has the ITT")
        # The WRITE is gone, not left an orphan: TASK REASSIGN takes the newest orphan with
        # the ITT, which is now the older TEST UNIT READY (its status comes again), not the
        # WRITE (whose recovery R2T would come)
        tmf = m.reassign(c3, itt, 0)
        check(tmf[2] == 0, "TASK REASSIGN after the ABORT TASK: response %d, not 0 (the older "
              "TEST UNIT READY's orphan)" % tmf[2])
        rh, _ = c3.recv(5)
        check(rh[0] & 0x3F == OP_SCSI_RSP and struct.unpack(">I", rh[16:20])[0] == itt,
              "TASK REASSIGN after the ABORT TASK: op 0x%02x instead of the TEST UNIT READY's "
              "status (0x%02x is the aborted WRITE's R2T)" % (rh[0] & 0x3F, OP_R2T))
        return
    tmf = m.reassign(c3, itt, 0)
    check(tmf[2] == 0, "TASK REASSIGN of the reused ITT: response %d, not 0" % tmf[2])
    rh, _ = c3.recv(5)
    check(rh[0] & 0x3F == OP_R2T and struct.unpack(">I", rh[16:20])[0] == itt,
          "TASK REASSIGN of the reused ITT: op 0x%02x instead of the WRITE's R2T (0x%02x is "
          "the older TEST UNIT READY's status)" % (rh[0] & 0x3F, OP_SCSI_RSP))
    off, length = struct.unpack(">II", rh[40:48])
    check((off, length) == (0, wlen), "recovery R2T: offset %d length %d" % (off, length))
    data = os.urandom(wlen)
    m.data_out(c3, itt, struct.unpack(">I", rh[20:24])[0], 0, 0, data, True)
    m.expect_good(c3, itt, "the WRITE reassigned by its reused ITT")
    st, _, back = m.scsi(c3, cdb_rw10(0x28, lba, wlen // 512), read_len=wlen)
    check(st == 0 and back == data, "the reassigned WRITE does not read back whole")


def abort_answered_newest(m, c3):
    itt = m.next_itt()
    ca = m.join(m.port, cid=0)
    tur_unacked(m, ca, itt)
    reset_and_wait_gone(m, ca)  # gone before the next login (not a reinstatement)
    cb = m.join(m.port, cid=0)
    tur_cmdsn = m.cmdsn
    tur_unacked(m, cb, itt)  # the ITT again, answered on a live connection
    rsp = m.abort_task(c3, itt, tur_cmdsn)
    check((c3, itt) not in m.answered, "ABORT TASK of an ITT a live connection has answered: the "
          "older orphan's status came again")
    check(rsp == 1, "ABORT TASK of an answered task: response %d, not 1" % rsp)
    reset_and_wait_gone(m, cb)
    m.logout_cid0_for_recovery(c3, 0)


def login_acks_old_answers(m, c3):
    for reset_first in (False, True):
        what = "after a reset" if reset_first else "reinstating"
        itt = m.next_itt()
        ca = m.join(m.port, cid=0)
        rh = tur_unacked(m, ca, itt)  # acknowledged only by the next login
        got = (struct.unpack(">I", rh[24:28])[0] + 1) & 0xFFFFFFFF
        if reset_first:
            reset_and_wait_gone(m, ca)  # gone before the login (not a reinstatement)
        cb = m.join(m.port, cid=0, old_expstatsn=got)
        if not reset_first:
            check(ca.c.wait_closed(3), "the reinstated connection was not closed by the target")
        tmf = m.reassign(cb, itt, 0)
        check(tmf[2] == 1, "%s: TASK REASSIGN of a TEST UNIT READY the login acknowledged: "
              "response %d, not 1 (task does not exist)" % (what, tmf[2]))
        if reset_first:
            reset_and_wait_gone(m, cb)
        else:
            cb.c.reset()
    m.logout_cid0_for_recovery(c3, 0)


def run(binary, threads):
    tag = "threads %d" % threads
    d = mcs.Daemon.__new__(mcs.Daemon)
    hostile.Daemon.__init__(d, binary, threads=threads, lun="ram:16M", log_level="info",
                            prefix="erl2-target-", config=["error-recovery-level = 2"])
    try:
        m = Erl2Session(d.port)
        m.daemon = d
        read_reassigned(m, d)
        print("ok: %s: READ reassigned after Logout reason 2" % tag, flush=True)
        c3 = write_reinstated(m, d)
        print("ok: %s: WRITE reassigned after reinstatement" % tag, flush=True)
        ack_newest_only(m, c3)
        print("ok: %s: a Logout's ExpStatSN leaves an older CID 0's answers" % tag, flush=True)
        for fn in ("reassign", "abort"):
            reused_itt_newest(m, c3, fn)
        print("ok: %s: TASK REASSIGN, ABORT TASK take the newest task of a reused ITT" % tag,
              flush=True)
        abort_answered_newest(m, c3)
        print("ok: %s: ABORT TASK leaves an orphan whose ITT a live task reuses" % tag,
              flush=True)
        login_acks_old_answers(m, c3)
        print("ok: %s: a restart's Login ExpStatSN acknowledges the old answers" % tag,
              flush=True)
        c3.cmdsn = m.cmdsn
        c3.logout()
        d.stop()
        log = open(d.log.name).read()
        check("kept for reassignment" in log, "no line about tasks kept for reassignment")
        check("reassigned from CID 0 to CID 1" in log, "no line about the READ reassigned")
        check("reassigned from CID 1 to CID 1" in log, "no line about the WRITE reassigned")
        print("ok: %s: logout, SIGTERM -> exit 0, log lines" % tag, flush=True)
    except (TestFailure, OSError, hostile.Closed) as e:
        d.kill()
        raise TestFailure("%s: %s\n--- daemon log:\n%s" % (tag, e, d.tail()))
    finally:
        d.kill()
    os.unlink(d.log.name)
    if d.conf:
        os.unlink(d.conf.name)


if __name__ == "__main__":
    sys.exit(hostile.main_per_reactors(run, __doc__))
