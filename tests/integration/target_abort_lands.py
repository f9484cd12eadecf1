#!/usr/bin/env python3
"""No aborted write lands after its abort was answered (SAM-5 §7.1, SPC-4 §5.13.11.2.5).

usage: target_abort_lands.py PATH/TO/linerate-target [LUN-SPEC...]

A task management function that answers "function complete", and a PREEMPT AND ABORT that
answers GOOD, promise that none of the commands they aborted changes the medium afterwards:
the initiator (Linux after a command timeout, a cluster fencing a node) writes the same blocks
again at once and counts on that write to stay.

The daemon runs with --threads 2 (connections spread over both reactors) and
--inject store-delay, which makes its file LUNs hold a request for a time in proportion to its
size, as a slow disk holds a large write while a small one passes. The LUNs: a buffered file,
an O_DIRECT file and a RAM disk, or those given (target_rbd_abort.sh gives an rbd image). For each LUN and each of ABORT TASK (from the writer), ABORT
TASK SET (from the writer), CLEAR TASK SET, LOGICAL UNIT RESET and PREEMPT AND ABORT (each from a
second initiator), and for the writer's connection reset (RST) followed at once by a login with
the same ISID (session reinstatement) or a little later (the target saw it go), while 256 KiB
writes of an old pattern from two sessions of the first initiator are in the store (on a RAM
LUN, which stores data as it arrives: while their second half is still to come, and it is sent
after the answer, to be dropped):
  1. the function answers "function complete" (GOOD for PREEMPT AND ABORT; the login succeeds);
  2. a 4 KiB FUA write of a new pattern over the same blocks then gets GOOD;
  3. read back well after every aborted write would have landed (twice the store delay of the
     largest), the blocks hold the new pattern, and no aborted write was ever answered;
  4. on a file LUN, after a task management function or PREEMPT AND ABORT, the LUN's file
     read directly at the answer and again then holds the same
     in every block of the aborted writes but the retry's (step 3 alone cannot see a late
     landing: the target's range lock holds the retry and the READ behind the aborted write).
Then the daemon exits 0 on SIGTERM. Bounded: about 35 s. Python 3 standard library only."""

import os
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import (OP_DATA_OUT, OP_REJECT, OP_SCSI, OP_SCSI_RSP, OP_TMF, OP_TMF_RSP,  # noqa: E402
                     RSVD,
                     TestFailure, bhs, check, lun_field)

DEADLINE = time.monotonic() + 150  # meson timeout is 180 s
BLOCK = 512
VICTIM = 256 * 1024  # bytes per aborted write
NEW = 4096
LBA = 64             # where the aborted writes of a round go
NEW_LBA = LBA + VICTIM // BLOCK * 3 // 4  # the retry: in the half of them sent late
DELAY_MS_PER_MIB = 1600  # a 256 KiB write waits 400 ms in the store, 4 KiB ~6 ms
SETTLE = 2 * DELAY_MS_PER_MIB * VICTIM / (1 << 20) / 1000.0 + 0.3

TMF_ABORT_TASK, TMF_ABORT_TASK_SET, TMF_CLEAR_TASK_SET, TMF_LUN_RESET = 1, 2, 4, 5
RSP_COMPLETE = 0
INITIATOR_A = "iqn.2026-11.org.linerate:abort-lands-a"
INITIATOR_B = "iqn.2026-11.org.linerate:abort-lands-b"
WANT = {"InitialR2T": "No", "ImmediateData": "Yes", "FirstBurstLength": str(VICTIM),
        "MaxBurstLength": str(VICTIM), "MaxRecvDataSegmentLength": "262144"}


def left():
    t = DEADLINE - time.monotonic()
    check(t > 0, "out of time")
    return t


def cdb_write10(lba, blocks, fua):
    return struct.pack(">BBIBHB", 0x2A, 0x08 if fua else 0, lba, 0, blocks, 0)


def cdb_read10(lba, blocks):
    return struct.pack(">BBIBHB", 0x28, 0, lba, 0, blocks, 0)


def pattern(tag, n):
    unit = (tag.encode() * BLOCK)[:BLOCK]
    return unit * (n // BLOCK)


class Session(hostile.Session):
    """hostile.Session plus commands sent without waiting for their answer."""

    def __init__(self, port, name):
        super().__init__(port, name=name, want=dict(WANT))
        self.pending = set()  # ITTs sent and not answered: aborted ones must stay so
        self.held = []  # (lun, ITT, data, bytes sent) of the writes sent without waiting

    def write_nowait(self, lun, lba, data, hold=0):
        """A WRITE whose data is all unsolicited (immediate, then Data-Out with the reserved
        TTT), so the target has it without an R2T; the last `hold` bytes are kept back for
        send_held(). Returns its ITT."""
        check(len(data) <= self.first_burst, "FirstBurstLength %d too small" % self.first_burst)
        itt = self.next_itt()
        sent = len(data) - hold
        imm = data[:min(self.target_mrdsl, sent)]
        final = 0x80 if len(imm) == len(data) else 0  # F: no unsolicited Data-Out follows
        h = bhs(OP_SCSI, final | 0x20 | 0x01, lun_field(lun), itt, len(data), self.cmdsn,
                self.expstatsn, cdb_write10(lba, len(data) // BLOCK, True).ljust(16, b"\0"),
                data=imm)
        self.cmdsn += 1
        self.c.send_pdu(h, imm)
        pos, sn = len(imm), 0
        self.held.append((lun, itt, data, sent))
        while pos < sent:
            n = min(self.target_mrdsl, sent - pos)
            last = pos + n == len(data)
            self.c.send_pdu(bhs(OP_DATA_OUT, 0x80 if last else 0, lun_field(lun), itt, RSVD, 0,
                                self.expstatsn, struct.pack(">III", 0, sn, pos),
                                data=data[pos:pos + n]), data[pos:pos + n])
            pos += n
            sn += 1
        self.pending.add(itt)
        return itt

    def send_held(self):
        """The rest of every write's data, sent after its abort: the target drops it."""
        for lun, itt, data, pos in self.held:
            if pos < len(data):
                self.c.send_pdu(bhs(OP_DATA_OUT, 0x80, lun_field(lun), itt, RSVD, 0,
                                    self.expstatsn, struct.pack(">III", 0, 1, pos),
                                    data=data[pos:]), data[pos:])
        self.held = []

    def tmf(self, fn, lun, rtt=RSVD, refcmdsn=0, timeout=None):
        """A TMF (immediate); returns its response code once it comes. Nothing else may be
        answered meanwhile: the commands it ends are never answered."""
        itt = self.next_itt()
        h = bhs(OP_TMF, 0x80 | fn, lun_field(lun), itt, rtt, self.cmdsn, self.expstatsn,
                struct.pack(">II", refcmdsn, 0), immediate=True)
        self.c.send_pdu(h)
        rh, _ = self.recv(timeout or min(left(), 30))
        op = rh[0] & 0x3F
        got_itt = struct.unpack(">I", rh[16:20])[0]
        check(op != OP_SCSI_RSP or got_itt not in self.pending,
              "an aborted write (ITT 0x%x) was answered" % got_itt)
        check(op == OP_TMF_RSP and got_itt == itt,
              "expected the TMF Response, got opcode 0x%02x ITT 0x%x" % (op, got_itt))
        return rh[2]

    def quiet(self, seconds):
        """Nothing may come for the aborted writes: wait, answering NOPs only."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                rh, _ = self.recv(max(0.05, end - time.monotonic()))
            except (TimeoutError, OSError, hostile.Closed):
                return
            except TestFailure:
                return
            got = struct.unpack(">I", rh[16:20])[0]
            check(got not in self.pending or rh[0] & 0x3F == OP_REJECT,
                  "an aborted write (ITT 0x%x) was answered" % got)
            # a Reject of the late Data-Out of an aborted write is an answer the standard allows

    def cmd(self, cdb, lun, **kw):
        """A command answered GOOD, after unit attentions (a reset, a cleared task set, a
        preemption report theirs first)."""
        for _ in range(6):
            st, sense, data = self.scsi(cdb, lun=lun, timeout=min(left(), 30), **kw)
            if st == 2 and sense and sense[2] & 0x0F == 6:
                continue
            check(st == 0, "%s on LUN %d: status 0x%02x sense %s" % (
                cdb[:1].hex(), lun, st, sense.hex()))
            return data
        raise TestFailure("unit attentions did not end")


def prout(sess, lun, sa, key, sark, typ=0):
    params = struct.pack(">QQ", key, sark) + b"\0" * 8
    cdb = struct.pack(">BBBxxxxHx", 0x5F, sa, typ, len(params)) + b"\0"
    sess.cmd(cdb[:10], lun, write_data=params)


class Daemon(hostile.Daemon):
    def __init__(self, binary, luns):
        extra = ["--inject", "store-delay=%d" % DELAY_MS_PER_MIB, "--ctl-socket", "none"]
        super().__init__(binary, threads=2, lun=luns, log_level="info", prefix="abort-lands-",
                         extra=extra)


def file_blocks(path):
    """The aborted writes' blocks as the LUN's file holds them now (None: not a file LUN)."""
    if not path:
        return None
    with open(path, "rb") as f:
        f.seek(LBA * BLOCK)
        return f.read(VICTIM)


def one_round(port, lun, kind, lun_name, round_no, ram, path):
    a1 = Session(port, INITIATOR_A).login()
    a2 = Session(port, INITIATOR_A).login()  # another ISID: another nexus, maybe reactor
    b = Session(port, INITIATOR_B).login()
    for s in (a1, a2, b):
        s.cmd(b"\0" * 6, lun)  # TEST UNIT READY: the power-on UA out of the way
    old, new = pattern("old%d" % round_no, VICTIM), pattern("NEW%d" % round_no, NEW)
    if kind == "preempt-and-abort":
        prout(a1, lun, 0, 0, 0xA1)  # REGISTER
        prout(a2, lun, 0, 0, 0xA1)
        prout(b, lun, 0, 0, 0xB1)
        prout(a1, lun, 1, 0xA1, 0, typ=5)  # RESERVE, WRITE EXCLUSIVE REGISTRANTS ONLY
    # A RAM LUN stores a write as its data arrives, in microseconds: the writes abort while
    # their second half is still on its way, and that half, sent after the answer, must be
    # dropped. A file LUN has them whole, held in the store.
    hold = VICTIM // 2 if ram else 0
    victims_isid = a1.isid
    victims = [a1.write_nowait(lun, LBA, old, hold)]
    if kind not in ("abort-task", "reinstate", "reset"):
        victims.append(a1.write_nowait(lun, LBA, old, hold))
        if kind != "abort-task-set":
            victims.append(a2.write_nowait(lun, LBA, old, hold))
    time.sleep(0.05)  # the writes reach the store (the delay holds them far longer)
    what = "%s on %s" % (kind, lun_name)
    if kind == "abort-task":
        rsp = a1.tmf(TMF_ABORT_TASK, lun, rtt=victims[0], refcmdsn=a1.cmdsn - 1)
    elif kind == "abort-task-set":
        rsp = a1.tmf(TMF_ABORT_TASK_SET, lun)
    elif kind == "clear-task-set":
        rsp = b.tmf(TMF_CLEAR_TASK_SET, lun)
    elif kind == "lun-reset":
        rsp = b.tmf(TMF_LUN_RESET, lun)
    elif kind in ("reinstate", "reset"):
        # the connection is lost (RST) with the writes in the store; the initiator logs in
        # again with the same ISID, at once (reinstating the session if the target has not
        # seen it go yet) or after the target has closed it
        a1.c.reset()
        if kind == "reset":
            time.sleep(0.1)
        a1 = Session(port, INITIATOR_A)
        a1.isid = victims_isid
        a1.login()
        rsp = RSP_COMPLETE
    else:
        params = struct.pack(">QQ", 0xB1, 0xA1) + b"\0" * 8
        cdb = struct.pack(">BBBxxxxHx", 0x5F, 5, 5, len(params))  # PREEMPT AND ABORT
        st, sense, _ = b.scsi(cdb, lun=lun, write_data=params, timeout=min(left(), 30))
        rsp = RSP_COMPLETE if st == 0 else 0x100 | st
    check(rsp == RSP_COMPLETE, "%s: answered 0x%x, not function complete" % (what, rsp))
    # A READ through the target cannot see an aborted write land late: the range lock holds
    # it (and the retry below) until that write has left the store. The LUN's file can: what
    # it holds at the answer must stay, but for the retry's own blocks. (A lost connection has
    # no answer that promises this: its writes may land until the next command over them.)
    at_answer = file_blocks(path if kind not in ("reinstate", "reset") else None)
    a1.send_held()
    a2.send_held()
    # the initiator's retry, at once: a small FUA write over the same blocks
    writer = a1 if kind in ("abort-task", "abort-task-set", "reinstate", "reset") else b
    writer.cmd(cdb_write10(NEW_LBA, NEW // BLOCK, True), lun, write_data=new)
    a1.quiet(SETTLE)
    a2.quiet(0.1)
    later = file_blocks(path)
    if at_answer is not None:
        lo, hi = (NEW_LBA - LBA) * BLOCK, (NEW_LBA - LBA) * BLOCK + NEW
        moved = [i // BLOCK for i in range(0, VICTIM, BLOCK)
                 if not lo <= i < hi and at_answer[i:i + BLOCK] != later[i:i + BLOCK]]
        check(not moved, "%s: an aborted write landed after the answer: %d blocks of the LUN's "
              "file changed after it, the first at LBA %d" % (what, len(moved),
                                                               LBA + moved[0] if moved else 0))
    got = writer.cmd(cdb_read10(NEW_LBA, NEW // BLOCK), lun, read_len=NEW)
    bad = [i // BLOCK for i in range(0, NEW, BLOCK) if got[i:i + BLOCK] != new[i:i + BLOCK]]
    check(not bad, "%s: an aborted write landed after the answer (of the %d blocks at LBA %d, "
          "%d hold other data, the first %r...)" % (what, NEW // BLOCK, NEW_LBA, len(bad),
                                                    got[bad[0] * BLOCK:bad[0] * BLOCK + 8]
                                                    if bad else b""))
    if kind == "preempt-and-abort":
        prout(b, lun, 3, 0xB1, 0)  # CLEAR: nothing left for the next round
    for s in (a1, a2, b):
        s.c.close()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tmp = tempfile.mkdtemp(prefix="abort-lands-")
    luns = [("buffered file", "file:%s/buffered.img,size=16M" % tmp, False),
            ("direct file", "file:%s/direct.img,size=16M,direct" % tmp, False),
            ("RAM", "ram:16M", True)]
    if len(sys.argv) > 2:
        luns = [(spec.split(",")[0], spec, spec.startswith("ram:")) for spec in sys.argv[2:]]
    # the file of a file LUN, read directly at each answer (file_blocks)
    paths = [spec[5:].split(",")[0] if spec.startswith("file:") else None
             for _, spec, _ in luns]
    d = Daemon(sys.argv[1], [spec for _, spec, _ in luns])
    kinds = ["abort-task", "abort-task-set", "clear-task-set", "lun-reset", "preempt-and-abort",
             "reinstate", "reset"]
    try:
        n = 0
        for lun, (name, _, ram) in enumerate(luns):
            for kind in kinds:
                n += 1
                one_round(d.port, lun, kind, name, n, ram, paths[lun])
                print("ok: %s on the %s LUN" % (kind, name))
        d.stop()
    except (TestFailure, OSError, hostile.Closed) as e:
        print("FAIL: %s" % e)
        print("--- daemon log (tail) ---\n" + d.log_tail(30))
        if d.proc.poll() is None:
            d.proc.kill()
        return 1
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    print("PASS: %d rounds, no aborted write landed after its answer" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
