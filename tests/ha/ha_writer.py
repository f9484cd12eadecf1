#!/usr/bin/env python3
"""The initiator of the partition harness (tests/ha/partition.sh, issue 30 item 4): one session
per gateway, one command at a time, every block stamped, and the checker of what it leaves.

  ha_writer.py run OUT TARGET ADDR1 ADDR2 [BLOCKS]
      Writes (WRITE(10) with FUA) block after block of LBA 0..BLOCKS-1 (default 256), round
      and round, each stamped with (path, sequence number, LBA); after every fourth write,
      reads back a block written before and checks it (a stale read: older than the newest
      acknowledged stamp of that block). Runs until OUT/stop exists, then reads every block
      back through the path in use (a stale read again if older) and exits.
      The path: the one that answered last. A command that fails on it (NOT READY: standby or
      in transition; no answer within 2 s; the connection lost) moves to the other path, the
      same block written again with a new stamp; UNIT ATTENTION is retried on the same path.
      OUT/log gets one line per event, appended as it happens (the harness and the check read
      it): "S t path lba seq" (sent), "A t path lba seq" (acknowledged GOOD), "R t path lba
      seq_read newest_acked" (read back), "X t path reason" (a path given up), "V ..." (the final
      read-back). OUT/status holds "acks N path P" for the harness's waits.
  ha_writer.py check OUT IMAGE MARKS
      IMAGE is the image read after the run (rbd export); MARKS the harness's cuts, lines
      "KIND CUT_T RESTORE_T". Prints acknowledged writes lost, stale reads, writes of a fenced
      gateway that reached the image after its successor's, and per kind of cut the pause (the
      longest time without an acknowledgement from the last one before the cut until 10 s after
      the restore, or the next cut), median and worst. Exit 1 if any of the three counts is not 0.

Times are CLOCK_REALTIME (time.time()), the clock `date +%s.%N` in the harness reads.
Python 3 standard library and tests/integration/hostile.py's initiator."""

import os
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hostile  # noqa: E402

BLOCK = 512
MAGIC = b"LRHA"
CMD_TIMEOUT_S = 2.0
GIVE_UP_S = 120.0  # no acknowledgement for this long: the run failed (no path came back)


class NetConn(hostile.Conn):
    """hostile's raw connection to ADDR:3260 instead of loopback."""

    def __init__(self, addr, timeout=CMD_TIMEOUT_S, src=None):
        self.port = 3260
        self.sock = socket.create_connection((addr, 3260), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout


class Session(hostile.Session):
    conn_class = NetConn


def stamp(path, lba, seq):
    return (MAGIC + struct.pack(">BIQ", path, lba, seq)).ljust(BLOCK, b"\0")


def unstamp(block):
    """(path, lba, seq) of a block, or None for one never written."""
    if block[:4] != MAGIC:
        return None
    return struct.unpack(">BIQ", block[4:17])


def cdb10(op, lba, fua=False):
    return bytes([op, 0x08 if fua else 0]) + struct.pack(">IxHx", lba, 1)


class PathDown(Exception):
    pass


class Writer:
    def __init__(self, out, target, addrs, blocks):
        hostile.TARGET = target
        self.out = out
        self.addrs = addrs
        self.blocks = blocks
        self.sess = [None] * len(addrs)
        self.path = 0
        self.seq = 0
        self.acks = 0
        self.newest = {}  # lba -> newest acknowledged seq
        self.sent = {}  # seq -> (path, lba), every write sent
        self.log = open(os.path.join(out, "log"), "a", buffering=1)
        self.last_ack = time.time()
        self.last_status = 0.0

    def event(self, *fields):
        self.log.write(" ".join(str(f) for f in fields) + "\n")

    def status(self, force=False):
        now = time.time()
        if force or now - self.last_status > 0.1:
            tmp = os.path.join(self.out, "status.tmp")
            with open(tmp, "w") as f:
                f.write("acks %d path %d\n" % (self.acks, self.path))
            os.replace(tmp, os.path.join(self.out, "status"))
            self.last_status = now

    def drop(self, p, why):
        self.event("X", "%.3f" % time.time(), p, why.replace(" ", "_"))
        s, self.sess[p] = self.sess[p], None
        if s and s.c:
            s.c.close()

    def session(self, p):
        if self.sess[p] is None:
            try:
                self.sess[p] = Session(self.addrs[p], name="iqn.2026-11.org.linerate:ha-writer").login()
            except (OSError, hostile.Closed, hostile.TestFailure) as e:
                self.sess[p] = None
                raise PathDown("login: %s" % e)
        return self.sess[p]

    def command(self, cdb, **kw):
        """GOOD's data through the current path, retrying UNIT ATTENTION; PathDown otherwise."""
        p = self.path
        s = self.session(p)
        for _ in range(8):
            try:
                st, sense, data = s.scsi(cdb, timeout=CMD_TIMEOUT_S, **kw)
            except (OSError, hostile.Closed, hostile.TestFailure) as e:
                self.drop(p, "%s" % (e or type(e).__name__))
                raise PathDown(str(e))
            if st == 0:
                return data
            key = sense[2] & 0x0F if len(sense) > 2 else -1
            if st == 2 and key == 6:
                continue  # UNIT ATTENTION: 2Ah/06h at a takeover, 29h after a restart
            asc = "%02x/%02x" % (sense[12], sense[13]) if len(sense) > 13 else "-"
            # NOT READY 04h/0Bh (standby), 04h/0Ah (in transition), or the store's error
            raise PathDown("status 0x%02x key %x asc %s" % (st, key, asc))
        raise PathDown("unit attention without end")

    def through_a_path(self, what):
        """what() on the current path; on PathDown the other, then back, until one answers."""
        while True:
            try:
                return what()
            except PathDown as e:
                self.event("X", "%.3f" % time.time(), self.path, str(e).replace(" ", "_"))
                if time.time() - self.last_ack > GIVE_UP_S:
                    raise SystemExit("ha_writer: no acknowledgement for %d s: %s" % (GIVE_UP_S, e))
                self.path = (self.path + 1) % len(self.addrs)
                time.sleep(0.05)

    def write(self, lba):
        def once():
            self.seq += 1
            seq = self.seq
            self.sent[seq] = (self.path, lba)
            self.event("S", "%.3f" % time.time(), self.path, lba, seq)
            self.command(cdb10(0x2A, lba, fua=True), write_data=stamp(self.path, lba, seq))
            self.event("A", "%.3f" % time.time(), self.path, lba, seq)
            return seq

        seq = self.through_a_path(once)
        self.newest[lba] = seq
        self.acks += 1
        self.last_ack = time.time()
        self.status()

    def read(self, lba, tag="R"):
        data = self.through_a_path(lambda: self.command(cdb10(0x28, lba), read_len=BLOCK))
        got = unstamp(data)
        self.event(tag, "%.3f" % time.time(), self.path, lba, got[2] if got else 0,
                   self.newest.get(lba, 0))

    def run(self):
        n = 0
        stop = os.path.join(self.out, "stop")
        while not os.path.exists(stop):
            lba = n % self.blocks
            self.write(lba)
            if n % 4 == 3:
                self.read((lba * 7 + n // self.blocks) % min(n + 1, self.blocks))
            n += 1
        for lba in range(min(n, self.blocks)):
            self.read(lba, "V")
        self.status(force=True)
        self.event("E", "%.3f" % time.time())


def check(out, image, marks):
    sent, acked, reads = {}, {}, []
    ack_times = []
    for line in open(os.path.join(out, "log")):
        f = line.split()
        if f[0] == "S":
            sent[int(f[4])] = (int(f[2]), int(f[3]))
        elif f[0] == "A":
            acked[int(f[4])] = (int(f[2]), int(f[3]))
            ack_times.append(float(f[1]))
        elif f[0] in "RV":
            reads.append((f[0], int(f[3]), int(f[4]), int(f[5])))
    newest = {}
    for seq, (p, lba) in acked.items():
        newest[lba] = max(newest.get(lba, 0), seq)
    lost = fenced = stale = bad = 0
    with open(image, "rb") as img:
        for lba, want in sorted(newest.items()):
            img.seek(lba * BLOCK)
            got = unstamp(img.read(BLOCK))
            if got is None:
                lost += 1
                print("LOST lba %d: zeros, newest acknowledged #%d" % (lba, want))
                continue
            p, glba, seq = got
            if glba != lba or sent.get(seq) != (p, lba):
                bad += 1
                print("BAD lba %d holds a stamp never sent there: %s" % (lba, got))
            elif seq < want:
                if seq not in acked and p != acked[want][0]:
                    fenced += 1
                    print("FENCED lba %d: #%d (unacknowledged, path %d) over #%d (path %d)"
                          % (lba, seq, p, want, acked[want][0]))
                else:
                    lost += 1
                    print("LOST lba %d: #%d on the image, #%d acknowledged" % (lba, seq, want))
    # a read is stale if older than the newest acknowledged stamp when it was read (the log's
    # own field), or a stamp that was never sent to that block
    for tag, lba, got, want in reads:
        if got < want or (got and sent.get(got, (None, None))[1] != lba):
            stale += 1
            print("STALE %s lba %d: read #%d, newest acknowledged #%d" % (tag, lba, got, want))
    finals = sum(1 for r in reads if r[0] == "V")
    print("writes acknowledged %d, blocks checked %d, reads checked %d (%d in the final pass)"
          % (len(acked), len(newest), len(reads), finals))
    print("acknowledged writes lost %d, stale reads %d, fenced writes on the image %d, "
          "foreign stamps %d" % (lost, stale, fenced, bad))
    ack_times.sort()
    pauses = {}
    cuts = [line.split()[:3] for line in open(marks) if line.strip()]
    cuts = [(kind, float(cut), float(restore)) for kind, cut, restore in cuts]
    for i, (kind, cut, restore) in enumerate(cuts):
        # from the last acknowledgement before the cut to the end of the writer's recovery:
        # the restore plus 10 s, or the next cut if sooner
        end = min(restore + 10, cuts[i + 1][1] if i + 1 < len(cuts) else restore + 10)
        before = [t for t in ack_times if t <= cut]
        t0 = before[-1] if before else cut
        window = [t0] + [t for t in ack_times if t0 < t <= end]
        gap = max((b - a for a, b in zip(window, window[1:])), default=end - t0)
        pauses.setdefault(kind, []).append(gap)
    for kind, ps in sorted(pauses.items()):
        print("%-8s cuts %3d  pause median %6.2f s  worst %6.2f s"
              % (kind, len(ps), statistics.median(ps), max(ps)))
    return 1 if lost or stale or fenced or bad else 0


def main():
    if len(sys.argv) >= 6 and sys.argv[1] == "run":
        blocks = int(sys.argv[6]) if len(sys.argv) > 6 else 256
        Writer(sys.argv[2], sys.argv[3], sys.argv[4:6], blocks).run()
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        return check(sys.argv[2], sys.argv[3], sys.argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
