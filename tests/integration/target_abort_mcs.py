#!/usr/bin/env python3
"""ABORT TASK across the connections of one MC/S session (RFC 7143 §11.5.1).

usage: target_abort_mcs.py PATH/TO/linerate-target

The task named by ABORT TASK is identified by its ITT within the session: an initiator may send
the TMF on another connection than the one carrying the command. For each of --threads 1 (both
connections on one reactor) and --threads 2 (on two reactors), with a raw initiator (hostile.py's)
and a session of two connections (the second logs in with the ISID and TSIH of the first and a
new CID), InitialR2T=Yes and ImmediateData=No:
  1. a WRITE on connection 1 gets its R2T and half of the burst (the task is in the middle of
     Data-Out); ABORT TASK for its ITT on connection 2 must answer 0 (Function complete), not 1
     (Task does not exist); the rest of the burst, sent anyway, is dropped, and the WRITE is
     never answered on either connection;
  2. the same with the TMF on the task's own connection (the local path);
  3. ABORT TASK for a command issued but not arrived yet (§11.5.1 b: RefCmdSN inside the
     window and below the TMF's own CmdSN, which for an immediate TMF is the next command's):
     it answers 0 (Function complete) and that CmdSN counts as received, so
     the command, arriving afterwards with that CmdSN and ITT, is dropped silently (no R2T, no
     SCSI Response within 1 s) and the window moves past it: with RefCmdSN = ExpCmdSN and the
     command on the TMF's connection or the other one; with RefCmdSN one ahead of ExpCmdSN
     (a command queued behind it on the other connection runs once the hole before it fills);
     and with a non-immediate TMF whose own CmdSN follows RefCmdSN; and a command queued
     behind a hole (CID 1), aborted from CID 0, still counts as received: once the hole fills
     the commands after it run;
  4. ABORT TASK for an ITT no connection has: RefCmdSN of a command already done answers 1 (Task
     does not exist), so does RefCmdSN equal to the immediate TMF's own CmdSN (not issued yet:
     nothing is taken, issue 11), RefCmdSN issued and not yet received answers 0 (Function
     complete) (§11.5.1 b/c);
  5. the session still works: WRITE + READ back on both connections, TEST UNIT READY;
  6. CID 0 dies holding CmdSN N: N+1, waiting on CID 1, runs once the hole has held ~2 s; logout;
     the daemon exits 0 on SIGTERM.
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, Conn, bhs, login_pdu)
from hostile import (OP_DATA_OUT, OP_R2T, OP_SCSI, OP_SCSI_RSP, OP_TMF, OP_TMF_RSP,  # noqa: E402
                     TestFailure, bhs, check, cdb_rw10)

DEADLINE = time.monotonic() + 100  # meson timeout is 120 s
BLOCK = 512
WRITE_BLOCKS = 64  # 32 KiB: one R2T of MaxBurstLength
TMF_ABORT_TASK = 1
RSP_COMPLETE, RSP_NO_TASK = 0, 1
ISID = bytes([0x80, 0x00, 0x00, 0x00, 0xab, 0x01])


def left():
    t = DEADLINE - time.monotonic()
    check(t > 0, "out of time")
    return t


class Daemon(hostile.Daemon):
    def __init__(self, binary, threads):
        super().__init__(binary, threads=threads, lun="ram:16M", log_level="info",
                         prefix="abort-mcs-target-")

    def tail(self, n=30):
        return self.log_tail(n)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class McsSession:
    """Two connections of one session. Each is a hostile.Session (its own StatSN); the CmdSN
    and the ITTs are the session's, kept in step here."""

    def __init__(self, port):
        want = {"MaxConnections": "2", "InitialR2T": "Yes", "ImmediateData": "No",
                "MaxBurstLength": "262144", "FirstBurstLength": "65536"}
        self.c1 = hostile.Session(port, isid=ISID, want=want).login()
        self.c2 = self.join(port, cid=1)
        self.itt = 0x1000
        self.cmdsn = self.c1.cmdsn
        self.answered = []  # (connection, ITT) of every SCSI Response seen

    def join(self, port, cid, old_expstatsn=0):
        """A second connection: same ISID, the first login's TSIH, a new CID (§5.3.2); or a
        restart of a CID, whose first Login Request carries old_expstatsn (§11.12)."""
        c1 = self.c1
        s = hostile.Session(port, isid=ISID)
        s.c = hostile.Conn(port)
        sec = [("InitiatorName", c1.name), ("TargetName", hostile.TARGET), ("AuthMethod", "None")]
        h, d = hostile.login_pdu(sec, csg=0, nsg=1, isid=ISID, tsih=c1.tsih, cid=cid,
                                 itt=0x900 + cid, cmdsn=c1.cmdsn, expstatsn=old_expstatsn)
        s.c.send_pdu(h, d)
        rh, _ = s.c.recv_pdu()
        check(rh[0] & 0x3F == hostile.OP_LOGIN_RSP and hostile.login_status(rh) == 0,
              "second connection: security stage status 0x%04x" % hostile.login_status(rh))
        ops = [("HeaderDigest", "None"), ("DataDigest", "None"),
               ("MaxRecvDataSegmentLength", "65536")]
        h, d = hostile.login_pdu(ops, csg=1, nsg=3, isid=ISID, tsih=c1.tsih, cid=cid,
                                 itt=0x901 + cid, cmdsn=c1.cmdsn,
                                 expstatsn=struct.unpack(">I", rh[24:28])[0] + 1)
        s.c.send_pdu(h, d)
        rh, rd = s.c.recv_pdu()
        check(rh[0] & 0x3F == hostile.OP_LOGIN_RSP and hostile.login_status(rh) == 0,
              "second connection: operational stage status 0x%04x (MaxConnections=%s)" %
              (hostile.login_status(rh), hostile.parse_kv(rd).get("MaxConnections")))
        check(rh[1] & 0x80 and rh[1] & 3 == 3, "second connection: no full feature phase")
        check(struct.unpack(">H", rh[14:16])[0] == c1.tsih, "second connection: another TSIH")
        s.expstatsn = struct.unpack(">I", rh[24:28])[0] + 1
        s.tsih = c1.tsih
        s.target_mrdsl = int(hostile.parse_kv(rd).get("MaxRecvDataSegmentLength", "8192"))
        s.immediate = False
        s.first_burst = c1.first_burst
        s.max_burst = c1.max_burst
        return s

    def next_itt(self):
        self.itt += 1
        return self.itt

    def scsi(self, conn, cdb, **kw):
        """A whole command on one connection, through hostile.Session.scsi."""
        conn.itt = self.next_itt() - 1  # Session.scsi takes next_itt() itself
        conn.cmdsn = self.cmdsn
        res = conn.scsi(cdb, **kw)
        self.cmdsn = conn.cmdsn
        return res

    def recv(self, conn, timeout):
        """Next PDU on conn; a SCSI Response is remembered (aborted tasks must have none)."""
        h, d = conn.recv(timeout)
        if h[0] & 0x3F == OP_SCSI_RSP:
            self.answered.append((conn, struct.unpack(">I", h[16:20])[0]))
        return h, d

    def start_write(self, conn, lba):
        """WRITE(10) without immediate data: returns (ITT, CmdSN, TTT, R2T length) once the
        R2T is in; the task then waits for Data-Out."""
        itt, cmdsn = self.next_itt(), self.cmdsn
        wlen = WRITE_BLOCKS * BLOCK
        conn.c.send_pdu(bhs(OP_SCSI, 0xA1, hostile.lun_field(0), itt, wlen, cmdsn,
                            conn.expstatsn, cdb_rw10(0x2A, lba, WRITE_BLOCKS)))
        self.cmdsn += 1
        rh, _ = self.recv(conn, min(5, left()))
        check(rh[0] & 0x3F == OP_R2T and struct.unpack(">I", rh[16:20])[0] == itt,
              "WRITE without immediate data: op 0x%02x instead of an R2T" % rh[0])
        ttt = struct.unpack(">I", rh[20:24])[0]
        off, want = struct.unpack(">II", rh[40:48])
        check(off == 0 and want == wlen, "R2T for offset %d length %d" % (off, want))
        return itt, cmdsn, ttt, want

    def data_out(self, conn, itt, ttt, datasn, off, data, final):
        conn.c.send_pdu(bhs(OP_DATA_OUT, 0x80 if final else 0, hostile.lun_field(0), itt, ttt,
                            0, conn.expstatsn, struct.pack(">III", 0, datasn, off), data=data),
                        data)

    def abort_task(self, conn, rtt, refcmdsn, cmdsn=None):
        """ABORT TASK, immediate unless given its own CmdSN (which the caller accounts for);
        returns the TMF Response code."""
        itt = self.next_itt()
        conn.c.send_pdu(bhs(OP_TMF, 0x80 | TMF_ABORT_TASK, hostile.lun_field(0), itt, rtt,
                            self.cmdsn if cmdsn is None else cmdsn, conn.expstatsn,
                            struct.pack(">II", refcmdsn, 0), immediate=cmdsn is None))
        while True:
            rh, _ = self.recv(conn, min(5, left()))
            op = rh[0] & 0x3F
            if op == OP_TMF_RSP:
                check(struct.unpack(">I", rh[16:20])[0] == itt, "TMF Response for another ITT")
                return rh[2]
            check(op == OP_SCSI_RSP, "waiting for the TMF Response: op 0x%02x" % op)

    def send_cmd(self, conn, itt, cmdsn, cdb, wlen=0):
        """A SCSI Command PDU alone, without waiting: TEST UNIT READY, or a WRITE of wlen bytes
        without immediate data (it gets an R2T once it runs)."""
        flags = 0x80 | (0x20 if wlen else 0) | 0x01  # F, W, SIMPLE
        conn.c.send_pdu(bhs(OP_SCSI, flags, hostile.lun_field(0), itt, wlen, cmdsn,
                            conn.expstatsn, cdb.ljust(16, b"\0")))

    def expect_good(self, conn, itt, what):
        """The next PDU on conn is the GOOD SCSI Response of itt."""
        try:
            rh, _ = self.recv(conn, min(5, left()))
        except socket.timeout:
            raise TestFailure("%s: no SCSI Response for ITT 0x%x within 5 s" % (what, itt))
        got = struct.unpack(">I", rh[16:20])[0]
        check(rh[0] & 0x3F == OP_SCSI_RSP and got == itt and rh[3] == 0,
              "%s: op 0x%02x ITT 0x%x status 0x%02x, expected GOOD for ITT 0x%x" %
              (what, rh[0] & 0x3F, got, rh[3], itt))

    def quiet(self, conn, seconds):
        """Nothing may arrive on conn for a while (an aborted task is never answered)."""
        try:
            rh, _ = self.recv(conn, seconds)
        except socket.timeout:
            return
        raise TestFailure("unexpected PDU op 0x%02x ITT 0x%08x" %
                          (rh[0], struct.unpack(">I", rh[16:20])[0]))


def abort_mid_data_out(m, task_conn, tmf_conn, lba, what):
    """A WRITE on task_conn in the middle of its Data-Out, aborted from tmf_conn."""
    itt, cmdsn, ttt, want = m.start_write(task_conn, lba)
    data = bytes([0xEE]) * want
    half = want // 2
    m.data_out(task_conn, itt, ttt, 0, 0, data[:half], False)
    rsp = m.abort_task(tmf_conn, itt, cmdsn)
    check(rsp == RSP_COMPLETE, "%s: ABORT TASK answered %d (%s), expected 0 (Function complete)"
          % (what, rsp, {1: "Task does not exist"}.get(rsp, "?")))
    # The rest of the burst was already on its way: the target must drop it quietly.
    m.data_out(task_conn, itt, ttt, 1, half, data[half:], True)
    m.quiet(task_conn, min(1.0, left()))
    m.quiet(tmf_conn, min(0.3, left()))
    check(all(i != itt for _, i in m.answered), "%s: the aborted WRITE was answered" % what)
    print("ok: %s: ABORT TASK ITT 0x%x -> %d (Function complete), WRITE never answered, late "
          "Data-Out dropped" % (what, itt, rsp), flush=True)


def abort_before_command(m, tmf_conn, cmd_conn, what):
    """§11.5.1 b: the initiator has issued command X with CmdSN N (still on its way), then
    ABORT TASK (immediate, so carrying CmdSN N+1, the next one) for X with RefCmdSN = ExpCmdSN
    N arrives first: RefCmdSN is in the window and below the TMF's CmdSN, so Function
    complete, CmdSN N counts as received, and the command is dropped when it comes (a WRITE:
    neither R2T nor SCSI Response) and CmdSN N+1 runs."""
    n, x = m.cmdsn, m.next_itt()
    m.cmdsn = n + 1  # X was issued with CmdSN N before the TMF
    rsp = m.abort_task(tmf_conn, x, n)
    check(rsp == RSP_COMPLETE, "%s: ABORT TASK of CmdSN %d not yet received answered %d, "
          "expected 0 (Function complete)" % (what, n, rsp))
    m.send_cmd(cmd_conn, x, n, cdb_rw10(0x2A, 400, 8), wlen=8 * BLOCK)
    m.cmdsn = n + 1
    m.quiet(cmd_conn, min(1.0, left()))
    if tmf_conn is not cmd_conn:
        m.quiet(tmf_conn, min(0.2, left()))
    st, _, _ = m.scsi(cmd_conn, bytes(6), timeout=min(5, left()))
    check(st == 0, "%s: TEST UNIT READY with CmdSN %d after the dropped one: status 0x%02x" %
          (what, n + 1, st))
    print("ok: %s: ABORT TASK ITT 0x%x RefCmdSN %d -> 0, the WRITE arriving afterwards with "
          "CmdSN %d dropped (no R2T, no response in 1 s), CmdSN %d answered" %
          (what, x, n, n, n + 1), flush=True)


def abort_ahead_of_window(m, what):
    """§11.5.1 b with RefCmdSN one ahead of ExpCmdSN N: the initiator has issued N and N+1
    (Y), then ABORT TASK (immediate, CmdSN N+2) for Y with RefCmdSN N+1 on CID 0; a TEST UNIT
    READY with CmdSN N+2 on CID 1 waits for N; N (CID 0) runs and N+2 follows, the aborted N+1
    being taken as received; Y arriving late with CmdSN N+1 is dropped."""
    n, y = m.cmdsn, m.next_itt()
    m.cmdsn = n + 2  # N and N+1 were issued before the TMF
    rsp = m.abort_task(m.c1, y, n + 1)
    check(rsp == RSP_COMPLETE, "%s: ABORT TASK of CmdSN %d not yet received answered %d, "
          "expected 0 (Function complete)" % (what, n + 1, rsp))
    z2 = m.next_itt()
    m.send_cmd(m.c2, z2, n + 2, bytes(6))
    m.quiet(m.c2, min(0.2, left()))  # CmdSN N has not come: it waits
    z0 = m.next_itt()
    m.send_cmd(m.c1, z0, n, bytes(6))
    m.expect_good(m.c1, z0, "%s: CmdSN %d" % (what, n))
    m.expect_good(m.c2, z2, "%s: CmdSN %d, behind the aborted %d" % (what, n + 2, n + 1))
    m.send_cmd(m.c2, y, n + 1, cdb_rw10(0x2A, 400, 8), wlen=8 * BLOCK)
    m.cmdsn = n + 3
    m.quiet(m.c2, min(1.0, left()))
    m.quiet(m.c1, min(0.2, left()))
    print("ok: %s: ABORT TASK ITT 0x%x RefCmdSN %d (ExpCmdSN %d) -> 0, CmdSN %d then %d "
          "answered, the late WRITE with CmdSN %d dropped" % (what, y, n + 1, n, n, n + 2, n + 1),
          flush=True)


def abort_non_immediate(m, what):
    """§11.5.1 b with a non-immediate TMF: ABORT TASK with CmdSN N+1 on CID 1 for X, RefCmdSN
    N; the command X (CmdSN N) arriving afterwards on CID 0 is dropped and both CmdSNs are
    used up: CmdSN N+2 runs."""
    n, x = m.cmdsn, m.next_itt()
    rsp = m.abort_task(m.c2, x, n, cmdsn=n + 1)
    check(rsp == RSP_COMPLETE, "%s: non-immediate ABORT TASK of CmdSN %d not yet received "
          "answered %d, expected 0 (Function complete)" % (what, n, rsp))
    m.send_cmd(m.c1, x, n, cdb_rw10(0x2A, 400, 8), wlen=8 * BLOCK)
    m.cmdsn = n + 2
    m.quiet(m.c1, min(1.0, left()))
    st, _, _ = m.scsi(m.c1, bytes(6), timeout=min(5, left()))
    check(st == 0, "%s: TEST UNIT READY with CmdSN %d after the TMF's: status 0x%02x" %
          (what, n + 2, st))
    print("ok: %s: non-immediate ABORT TASK (CmdSN %d) ITT 0x%x RefCmdSN %d -> 0, the WRITE "
          "arriving afterwards dropped, CmdSN %d answered" % (what, n + 1, x, n, n + 2),
          flush=True)


def abort_queued(m, what):
    """A TEST UNIT READY with CmdSN N+1 on CID 1 waits for N; ABORT TASK for it on CID 0 answers
    Function complete; N then N+2 (CID 0) run: the aborted command's CmdSN left no hole."""
    n, y = m.cmdsn, m.next_itt()
    m.send_cmd(m.c2, y, n + 1, bytes(6))
    m.quiet(m.c2, min(0.2, left()))  # CmdSN N has not come: it waits
    rsp = m.abort_task(m.c1, y, n + 1)
    check(rsp == RSP_COMPLETE, "%s: ABORT TASK of a queued command answered %d, expected 0 "
          "(Function complete)" % (what, rsp))
    z0, z2 = m.next_itt(), m.next_itt()
    m.send_cmd(m.c1, z0, n, bytes(6))
    m.send_cmd(m.c1, z2, n + 2, bytes(6))
    m.expect_good(m.c1, z0, "%s: CmdSN %d" % (what, n))
    m.expect_good(m.c1, z2, "%s: CmdSN %d, behind the aborted %d" % (what, n + 2, n + 1))
    m.cmdsn = n + 3
    m.quiet(m.c2, min(0.3, left()))
    print("ok: %s: queued command CmdSN %d ITT 0x%x aborted from the other connection -> 0, "
          "never answered, CmdSN %d then %d answered" % (what, n + 1, y, n, n + 2), flush=True)


def hole_given_up(m, what):
    """ERL 0 after a connection died: CmdSN N never comes (it left with CID 0), N+1 waits on
    CID 1; once the gap has held for the grace period (2 s) with ExpCmdSN not moving, the
    target takes N as lost and runs N+1."""
    n, x = m.cmdsn, m.next_itt()
    m.send_cmd(m.c2, x, n + 1, bytes(6))
    m.quiet(m.c2, min(0.5, left()))  # held back behind the hole while CID 0 lives
    m.c1.c.close()  # CID 0 dies without a logout
    t0 = time.monotonic()
    try:
        rh, _ = m.recv(m.c2, min(8, left()))
    except socket.timeout:
        raise TestFailure("%s: CmdSN %d still held 8 s after the connection died" % (what, n + 1))
    got = struct.unpack(">I", rh[16:20])[0]
    check(rh[0] & 0x3F == OP_SCSI_RSP and got == x and rh[3] == 0,
          "%s: op 0x%02x ITT 0x%x status 0x%02x, expected GOOD for ITT 0x%x" %
          (what, rh[0] & 0x3F, got, rh[3], x))
    m.cmdsn = n + 2
    print("ok: %s: CmdSN %d, held behind the hole of CmdSN %d, ran %.1f s after CID 0 died" %
          (what, n + 1, n, time.monotonic() - t0), flush=True)


def io_check(m, conn, lba, what):
    data = bytes((lba + i) & 0xFF for i in range(8 * BLOCK))
    st, _, _ = m.scsi(conn, cdb_rw10(0x2A, lba, 8), write_data=data)
    check(st == 0, "%s: WRITE status 0x%02x" % (what, st))
    st, _, back = m.scsi(conn, cdb_rw10(0x28, lba, 8), read_len=len(data))
    check(st == 0 and back == data, "%s: READ back status 0x%02x, data %s" %
          (what, st, "equal" if back == data else "differs"))
    st, _, _ = m.scsi(conn, bytes(6))
    check(st == 0, "%s: TEST UNIT READY status 0x%02x" % (what, st))


def run(binary, threads):
    d = Daemon(binary, threads)
    try:
        m = McsSession(d.port)
        st, _, _ = m.c1.scsi_retry_ua(bytes(6))  # the new I_T nexus's UNIT ATTENTION
        m.cmdsn = m.c1.cmdsn
        check(st == 0, "first TEST UNIT READY status 0x%02x" % st)
        tag = "threads=%d" % threads
        abort_mid_data_out(m, m.c1, m.c2, 100, tag + ", task on CID 0, TMF on CID 1")
        abort_mid_data_out(m, m.c2, m.c1, 200, tag + ", task on CID 1, TMF on CID 0")
        abort_mid_data_out(m, m.c1, m.c1, 300, tag + ", task and TMF on CID 0")
        abort_before_command(m, m.c1, m.c1, tag + ", TMF and command on CID 0")
        abort_before_command(m, m.c2, m.c1, tag + ", TMF on CID 1, command on CID 0")
        abort_ahead_of_window(m, tag)
        abort_non_immediate(m, tag)
        abort_queued(m, tag)
        rsp = m.abort_task(m.c2, 0x7777777, m.cmdsn - 1)
        check(rsp == RSP_NO_TASK, "ABORT TASK of a finished command (RefCmdSN %d) answered %d, "
              "expected 1 (Task does not exist)" % (m.cmdsn - 1, rsp))
        # An immediate TMF carries the CmdSN of the next command: RefCmdSN equal to it names a
        # command not yet issued, so §11.5.1 b does not apply (RefCmdSN must be below the TMF's
        # CmdSN): Task does not exist, and that CmdSN stays free for the next command.
        rsp = m.abort_task(m.c2, 0x7777778, m.cmdsn)
        check(rsp == RSP_NO_TASK, "ABORT TASK with RefCmdSN = its own CmdSN answered %d, "
              "expected 1 (Task does not exist)" % rsp)
        m.cmdsn += 1  # the initiator issued CmdSN n, lost on its way; the TMF carries n+1
        rsp = m.abort_task(m.c2, 0x7777779, m.cmdsn - 1)
        check(rsp == RSP_COMPLETE, "ABORT TASK with RefCmdSN not yet received answered %d, "
              "expected 0 (Function complete)" % rsp)
        print("ok: %s: unknown ITT -> 1 (RefCmdSN done), 1 (RefCmdSN = the TMF's CmdSN), "
              "0 (RefCmdSN issued, not yet received)" % tag, flush=True)
        io_check(m, m.c1, 1000, tag + ", CID 0 afterwards")
        io_check(m, m.c2, 2000, tag + ", CID 1 afterwards")
        check(all(i < 0x7777777 for _, i in m.answered), "a nonexistent task was answered")
        print("ok: %s: WRITE/READ/TEST UNIT READY on both connections afterwards" % tag,
              flush=True)
        hole_given_up(m, tag)
        m.c2.cmdsn = m.cmdsn
        m.c2.logout()
        d.stop()
        print("ok: %s: logout, SIGTERM -> exit 0" % tag, flush=True)
    except (TestFailure, OSError, hostile.Closed) as e:
        d.kill()
        raise TestFailure("%s\n--- daemon log:\n%s" % (e, d.tail()))
    finally:
        d.kill()
    os.unlink(d.log.name)


if __name__ == "__main__":
    sys.exit(hostile.main_per_reactors(run, __doc__))
