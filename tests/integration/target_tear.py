#!/usr/bin/env python3
"""READs racing WRITEs never return a block half written, and Data-In digests cover the bytes sent.

usage: target_tear.py PATH/TO/linerate-target

The daemon runs with --threads 2 and three LUNs: 0 RAM, 1 a buffered file, 2 an O_DIRECT file.
For each LUN, at once and over the same small LBA range, sessions of their own (so connections
land on both reactors) hammer it: writers WRITE(10) random 4 KiB-aligned pieces of the range,
every 512-byte block self-checking (its LBA and the write's generation, then a pattern derived
from both), readers READ(10) random pieces and check every block: it must be the whole block of
one generation, at its own LBA. Two readers of each LUN negotiate DataDigest=CRC32C and check
the digest of every Data-In PDU against the bytes it carries: one sends each READ with a WRITE
of the same blocks right behind it in one pipeline (the WRITE lands while the READ's Data-In
waits to go out), the other reads through a small receive window (its Data-In goes out in
pieces over many loop turns). The RAM LUN sends every READ of 4 KiB or more from its memory in
place (send-min=4k), the buffered file LUN every READ of 8 KiB or more whose pages are in the
page cache from its mapping (send-min=8k; 4 KiB ones read into a buffer), so these check that a
WRITE waits for the sends. Every block READ is also
ordered against the WRITEs as this initiator saw them (one clock for all sessions): it must not
show a WRITE sent after that READ's status came in, nor one that another WRITE of the block had
wholly overwritten before the READ was sent. A LUN whose VPD B0h advertises a
MAXIMUM ATOMIC TRANSFER LENGTH also gets a WRITE ATOMIC(16) writer over a range of its own, whose
readers must see one generation across the whole READ; a file LUN must advertise none (a
buffered or device write is not all or nothing across a power loss). After the traffic, a
reader of the RAM LUN, then of the file LUN, stops reading with megabytes of in-place Data-In
queued: another session's WRITE to the same blocks must still complete (within a generous 10 s:
the target copies a stalled connection's queued Data-In away after a second; without that it
waited 45 s), and the reader's data, once it reads again, must be whole, the data before the
WRITE (the READs ran first), under good digests. A reader that logs out with its READs' Data-In
queued and stops reading must not hold a WRITE either, and is closed nop-timeout after its
Logout (a daemon of its own, nop-timeout 2 s). On the file LUN an
8 MiB READ whose reader stalls after its first Data-In header, with a WRITE of the same blocks
sent behind it, must return every block as before that WRITE under good digests (stall_check),
the same with a WRITE SAME and an UNMAP of its last 2048 blocks (stall_writers_check), and
READs at LBAs off the page, of 1-40 blocks, digests on and off, some with pages dropped from
the page cache, must return what was written (inplace_reads_check); last, the file truncated
under a stalled 8 MiB READ sent from its mapping must not stop the daemon (shrink_check).
Bounded in count and time (about 10 s of traffic, 30-40 s in all), no tight timing; the daemon
must exit 0 on
SIGTERM.
Exit 0 when every check holds, 1 with the counts otherwise. Python 3 standard library only."""

import fcntl
import os
import random
import socket
import struct
import sys
import tempfile
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: Session, Conn, Daemon)
from hostile import (OP_DATA_IN, OP_LOGOUT, OP_SCSI, OP_SCSI_RSP, TestFailure,  # noqa: E402
                     bhs, check, cdb_rw10, lun_field)

BLOCK = 512
HOT = 256  # LBAs [0, 256): plain WRITE vs READ
ATOMIC_LBA, ATOMIC_BLOCKS = 512, 64  # [512, 576): WRITE ATOMIC vs READ
PIECE = 8  # 4 KiB: every transfer is a multiple, aligned (the O_DIRECT LUN likes it)
TRAFFIC_S = 10.0
MAX_OPS = 5000  # batches per thread
DEPTH = 8  # commands in flight per session: the target works on them together
HISTORY = 16  # completed WRITEs remembered per LBA for the order check
MIX_GEN = 1 << 40  # generations of the READ-then-WRITE pipelines (apart from the writers')
WRITERS, READERS = 2, 3  # readers 0 and 2 check data digests, reader 2 reads slowly
# The stalled reader (stall_check): one READ of this many blocks (8 MiB, the target's largest),
# more than the target's socket (up to tcp_wmem's 4 MiB) and the reader's take, so a few MiB
# of its Data-In wait in the target's queue while the reader stalls.
MAP_STALL_LBA, MAP_STALL_BLOCKS = 16384, 16384
SLOW_RCVBUF = 8192  # the slow reader's socket: the target's Data-In waits in its queue
STALL_LBA, STALL_BLOCKS = 4096, 4096  # 2 MiB from 2 MiB: the stalled reader's range
STALL_RCVBUF = 256 << 10  # its socket's receive buffer, set before connecting (window scale)
STALL_WRITE_S = 10.0  # a WRITE beside it completes within this (the target waits ~1-2 s)
LOGOUT_NOP_S = 2  # nop-timeout of the logged-out reader's daemon: it is closed after this

# ---------------------------------------------------------------- CRC32C (RFC 7143 §12.1)


def _crc_table16():
    t8 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t8.append(c)
    # two bytes per step: the reflected CRC of the 16-bit value i
    return [(t8[i & 0xFF] >> 8) ^ t8[(t8[i & 0xFF] ^ (i >> 8)) & 0xFF] for i in range(65536)]


CRC16 = _crc_table16()


def crc32c(data):
    """CRC32C of data (its length a multiple of 2: iSCSI pads data segments to 4)."""
    crc = 0xFFFFFFFF
    t = CRC16
    for w in memoryview(data).cast("H"):  # little-endian host (x86, arm64)
        crc = t[(crc ^ w) & 0xFFFF] ^ (crc >> 16)
    return crc ^ 0xFFFFFFFF


class DigestConn(hostile.Conn):
    """hostile.Conn with DataDigest=CRC32C once `ddigest` is set (after login); counts the
    Data-In PDUs whose digest does not match their bytes instead of failing at once."""

    ddigest = False
    pdus = 0
    bad = 0

    def send_pdu(self, hdr, data=b""):
        padded = hostile.pad(data)
        if self.ddigest and data:
            padded += struct.pack("<I", crc32c(padded))
        self.sock.sendall(hdr + padded)

    def recv_pdu(self, timeout=None):
        if not self.ddigest:
            return super().recv_pdu(timeout)
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        h = self._recv_exact(48, deadline)
        ahs = h[4] * 4
        dlen = int.from_bytes(h[5:8], "big")
        seg = dlen + ((-dlen) % 4)
        rest = self._recv_exact(ahs + seg + (4 if dlen else 0), deadline) if ahs + dlen else b""
        if dlen:
            self.pdus += 1
            padded = rest[ahs:ahs + seg]
            if struct.unpack("<I", rest[ahs + seg:])[0] != crc32c(padded):
                self.bad += 1
        return h, rest[ahs:ahs + dlen]


class DigestSession(hostile.Session):
    conn_class = DigestConn


class StallConn(DigestConn):
    """DigestConn whose receive buffer is STALL_RCVBUF from the SYN on: the window scale is
    fixed at connect, so a buffer set later could not open the window wide again. The digest
    catches queued Data-In whose pages changed under it."""

    def __init__(self, port, timeout=5.0, src=None):
        self.port, self.timeout = port, timeout
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALL_RCVBUF)
        self.sock.settimeout(timeout)
        self.sock.bind((src or "127.0.0.1", 0))
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pre = b""  # bytes a trickling read took off the socket, not parsed yet

    def _recv_exact(self, n, deadline):
        head, self.pre = self.pre[:n], self.pre[n:]
        return head + super()._recv_exact(n - len(head), deadline)

    def trickle(self, stop, size, pause):
        """Read size bytes every pause seconds into pre until stop is set: a slow reader."""
        while not stop.wait(pause):
            self.sock.settimeout(pause)
            try:
                self.pre += self.sock.recv(size)
            except socket.timeout:
                pass


class StallSession(hostile.Session):
    conn_class = StallConn


# ---------------------------------------------------------------- self-checking blocks

_cache = {}


def block(lba, gen):
    b = _cache.get((lba, gen))
    if b is None:
        fill = (lba * 0x9E3779B97F4A7C15 ^ (gen + 1) * 0xC2B2AE3D27D4EB4F) & (2**64 - 1)
        b = struct.pack(">QQ", lba, gen) + struct.pack(">Q", fill) * ((BLOCK - 16) // 8)
        if len(_cache) < 50000:
            _cache[(lba, gen)] = b
    return b


def blocks(lba, n, gen):
    return b"".join(block(lba + i, gen) for i in range(n))


def block_gen(data, i, lba):
    """The generation of block i of data (at lba), or None when it is not a whole block."""
    b = data[i * BLOCK:(i + 1) * BLOCK]
    got_lba, gen = struct.unpack(">QQ", b[:16])
    if got_lba != lba or b != block(lba, gen):
        return None
    return gen


def torn_blocks(data, lba, n):
    """How many of the n blocks of data (from lba) are not whole blocks of one generation."""
    gens = [struct.unpack_from(">Q", data, j * BLOCK + 8)[0] for j in range(n)]
    if data == b"".join(block(lba + j, g) for j, g in enumerate(gens)):
        return 0
    return sum(block_gen(data, j, lba + j) is None for j in range(n))


def cdb_write_atomic16(lba, n):
    return struct.pack(">BBQHHBB", 0x9C, 0, lba, 0, n, 0, 0)


def cdb_inquiry_vpd(page, alloc):
    return struct.pack(">BBBHB", 0x12, 1, page, alloc, 0)


def pipeline(s, lun, cmds):
    """Send every (cdb, read_len, write_data) of cmds at once, each write whole as immediate
    data, then collect the answers: [(status, data-in, when the status was read)] in order."""
    return collect(s, *send_all(s, lun, cmds))


def send_all(s, lun, cmds):
    order, pend = [], {}
    for cdb, rlen, wdata in cmds:
        itt = s.next_itt()
        wlen = len(wdata) if wdata else 0
        check(wlen <= min(s.first_burst, s.target_mrdsl), "write beyond immediate data")
        flags = 0x80 | (0x40 if rlen else 0) | (0x20 if wlen else 0) | 0x01
        h = bhs(OP_SCSI, flags, lun_field(lun), itt, rlen or wlen, s.cmdsn, s.expstatsn,
                cdb.ljust(16, b"\0"), data=wdata or b"")
        s.cmdsn += 1
        s.c.send_pdu(h, wdata or b"")
        order.append(itt)
        pend[itt] = [None, bytearray(rlen), None]
    return order, pend


def collect(s, order, pend):
    """The answers to send_all's commands (target NOP-In pings answered on the way)."""
    left = len(order)
    while left:
        rh, rd = s.recv(10.0)
        op = rh[0] & 0x3F
        itt = struct.unpack(">I", rh[16:20])[0]
        check(itt in pend and pend[itt][0] is None, "answer for ITT 0x%x, op 0x%x" % (itt, op))
        if op == OP_DATA_IN:
            off = struct.unpack(">I", rh[40:44])[0]
            buf = pend[itt][1]
            check(off + len(rd) <= len(buf), "Data-In beyond EDTL")
            buf[off:off + len(rd)] = rd
            if not rh[1] & 0x01:
                continue
        else:
            check(op == OP_SCSI_RSP, "unexpected PDU 0x%02x" % op)
        pend[itt][0] = rh[3]
        pend[itt][2] = time.monotonic()
        left -= 1
    return [(pend[i][0], bytes(pend[i][1]), pend[i][2]) for i in order]


# ---------------------------------------------------------------- the stalled reader


def stall_check(load, second=None):
    """A READ (8 MiB, digests on) whose reader takes the first Data-In header and then stops
    reading, so most of its data waits in the target's queue; only then a WRITE of the same
    blocks from another session (or `second`: a name, a CDB and its data, that changes some of
    those blocks). The READ ran before the WRITE was sent (its Data-In had
    begun), so every block it returns is the one written before, whole, under good digests,
    however long the WRITE waits (a READ sent from the LUN's pages in place holds them until
    they are in the socket); the WRITE completes once the reader reads on. Returns the
    failures as lines."""
    lba, n = MAP_STALL_LBA, MAP_STALL_BLOCKS
    what, cdb, wdata = second or ("WRITE", cdb_rw10(0x2A, lba, n), blocks(lba, n, 2))
    w = load.session()
    r = load.session(digest=True)
    st, _, _ = w.scsi(cdb_rw10(0x2A, lba, n), write_data=blocks(lba, n, 1), lun=load.lun,
                      timeout=30.0)
    check(st == 0, "%s: stall check: first WRITE status %d" % (load.name, st))
    itt = r.next_itt()
    r.c.send_pdu(bhs(OP_SCSI, 0xC1, lun_field(load.lun), itt, n * BLOCK, r.cmdsn, r.expstatsn,
                     cdb_rw10(0x28, lba, n).ljust(16, b"\0")))
    r.cmdsn += 1
    deadline = time.monotonic() + 60
    h = r.c._recv_exact(48, deadline)  # the READ has run: its Data-In have begun
    wrote = {}

    def write():
        try:
            wrote["status"] = w.scsi(cdb, write_data=wdata, lun=load.lun, timeout=60.0)[0]
        except Exception as e:  # noqa: BLE001  (reported below)
            wrote["error"] = repr(e)

    th = threading.Thread(target=write, daemon=True)
    th.start()
    time.sleep(0.5)  # the WRITE reaches the target while the reader stalls (not asserted on)
    data, bad, status = bytearray(n * BLOCK), 0, None
    while True:
        check(h[0] & 0x3F == OP_DATA_IN, "%s: stall check: op 0x%02x" % (load.name, h[0]))
        dlen = int.from_bytes(h[5:8], "big")
        seg = dlen + ((-dlen) % 4)
        rest = r.c._recv_exact(seg + 4, deadline)
        if struct.unpack("<I", rest[seg:])[0] != crc32c(rest[:seg]):
            bad += 1
        off = struct.unpack(">I", h[40:44])[0]
        data[off:off + dlen] = rest[:dlen]
        if h[1] & 0x01:
            status = h[3]
            r.expstatsn = struct.unpack(">I", h[24:28])[0] + 1
            break
        h = r.c._recv_exact(48, deadline)
    th.join(60)
    fails = []
    gens = [block_gen(data, j, lba + j) for j in range(n)]
    newer = sum(g == 2 for g in gens)
    torn = sum(g is None for g in gens)
    print("%s: stall check: READ of %d blocks: status %s, %d torn, %d show the later WRITE, "
          "%d Data-In with a wrong digest; the %s: %s" % (
              load.name, n, status, torn, newer, bad, what,
              wrote.get("status", wrote.get("error"))))
    if status != 0 or torn or newer or bad:
        fails.append("%s: stalled READ changed under its queued Data-In by a %s (status %s, "
                     "%d torn, %d blocks of the later WRITE, %d bad digests)" % (
                         load.name, what, status, torn, newer, bad))
    if th.is_alive() or wrote.get("status") != 0:
        fails.append("%s: the %s behind the stalled READ: %s" % (
            load.name, what, "still waiting" if th.is_alive() else wrote))
    return fails


def stall_writers_check(load):
    """stall_check with a WRITE SAME(16) (SBC-4 §5.50), then an UNMAP (§5.45), of the last
    2048 blocks of the stalled READ's range (still in the target's queue) in place of the
    WRITE: they write the file as a WRITE does, so they wait for the READ's sends as it does
    (a changed block reads as torn: WRITE SAME's block names another LBA, UNMAP's are zero)."""
    lba, n = MAP_STALL_LBA + MAP_STALL_BLOCKS - 2048, 2048
    ws = struct.pack(">BBQIBB", 0x93, 0, lba, n, 0, 0)
    unmap = struct.pack(">BBxxxxxHB", 0x42, 0, 24, 0)
    desc = struct.pack(">HHxxxx", 22, 16) + struct.pack(">QIxxxx", lba, n)
    return (stall_check(load, ("WRITE SAME", ws, block(lba, 3)))
            + stall_check(load, ("UNMAP", unmap, desc)))


def shrink_check(load, path, other):
    """The file behind a file LUN truncated to nothing while a stalled READ's Data-In, sent
    from the file's mapping, wait in the target's queue (digests off): the target's copy of
    them away (after a second) finds the pages gone. The daemon must live on: a WRITE of the
    same blocks from another session completes (it waits for the stalled READ to let go) and
    a new session of another LUN reads. Last, as the LUN's data is gone after it."""
    lba, n = MAP_STALL_LBA, MAP_STALL_BLOCKS
    w = load.session()
    st, _, _ = w.scsi(cdb_rw10(0x2A, lba, n), write_data=blocks(lba, n, 1), lun=load.lun,
                      timeout=30.0)
    check(st == 0, "%s: shrink check: first WRITE status %d" % (load.name, st))
    r = load.session(stall=True)
    load.sessions.remove(r)  # its connection may end: no logout
    itt = r.next_itt()
    r.c.send_pdu(bhs(OP_SCSI, 0xC1, lun_field(load.lun), itt, n * BLOCK, r.cmdsn, r.expstatsn,
                     cdb_rw10(0x28, lba, n).ljust(16, b"\0")))
    r.cmdsn += 1
    h = r.c._recv_exact(48, time.monotonic() + 60)  # the READ has run: its Data-In have begun
    check(h[0] & 0x3F == OP_DATA_IN, "%s: shrink check: op 0x%02x" % (load.name, h[0]))
    # Truncate once the target's socket is full (no byte more in ours for 0.1 s), so that the
    # pages are next touched by the copy away, not by a send still going on (which fails only
    # the connection: the test then passes without that copy).
    queued, still = -1, 0
    for _ in range(100):
        got = struct.unpack("i", fcntl.ioctl(r.c.sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        still = still + 1 if got == queued else 0
        queued = got
        if still == 2:
            break
        time.sleep(0.05)
    os.truncate(path, 0)
    fails = []
    try:
        st, _, _ = w.scsi(cdb_rw10(0x2A, lba, 8), write_data=blocks(lba, 8, 3), lun=load.lun,
                          timeout=60.0)
        if st != 0:
            fails.append("%s: WRITE after the file shrank: status %d" % (load.name, st))
        s = other.session()
        st, _, data = s.scsi(cdb_rw10(0x28, 0, 8), read_len=8 * BLOCK, lun=other.lun)
        if st != 0 or len(data) != 8 * BLOCK:
            fails.append("%s: READ of another LUN after the file shrank: status %d" % (
                other.name, st))
    except (hostile.Closed, OSError) as e:
        fails.append("%s: the target after the file behind it shrank under a stalled READ: "
                     "%r" % (load.name, e))
    r.c.sock.close()
    print("%s: shrink check: %s" % (load.name, "; ".join(fails) or "the target carried on"))
    return fails


def cachestat_missing(path):
    """Why the kernel cannot say which pages of path are cached (cachestat(2), Linux 6.5; the
    file LUN then copies every send-min READ), or None when it can. x86_64 and arm64 only: the
    system call number is 451 on both."""
    import ctypes
    import platform
    if platform.machine() not in ("x86_64", "aarch64"):
        return "cachestat not probed on %s" % platform.machine()
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        rng = (ctypes.c_uint64 * 2)(0, 4096)
        out = (ctypes.c_uint64 * 5)()
        if libc.syscall(451, fd, rng, out, 0) == 0:
            return None
        return "cachestat(2): %s" % os.strerror(ctypes.get_errno())
    finally:
        os.close(fd)


def inplace_reads_check(load, path):
    """READs of the blocks stall_check left (generation 2), at LBAs off the page and sizes
    from 1 to 40 blocks (across the file LUN's send-min of 16 blocks), with and without data
    digests, some with part of their pages dropped from the page cache first (those read
    into a buffer, the rest sent from the mapping): every block must be the one written."""
    lba0, span = MAP_STALL_LBA, 256
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        sessions = [(load.session(), False), (load.session(digest=True), True)]
        rnd = random.Random(32)
        wrong, reads = 0, 0
        for k in range(120):
            n = rnd.randint(1, 40)
            lba = lba0 + rnd.randrange(span - n)
            if k % 4 == 0:  # part of the range out of the page cache
                os.posix_fadvise(fd, (lba + n // 2) * BLOCK, 4096, os.POSIX_FADV_DONTNEED)
            s, _ = sessions[k % 2]
            st, _, data = s.scsi(cdb_rw10(0x28, lba, n), read_len=n * BLOCK, lun=load.lun)
            reads += 1
            if st != 0 or data != blocks(lba, n, 2):
                wrong += 1
    finally:
        os.close(fd)
    dbad = sessions[1][0].c.bad
    print("%s: %d READs at unaligned LBAs and sizes across send-min: %d wrong, %d Data-In "
          "with a wrong digest" % (load.name, reads, wrong, dbad))
    if wrong or dbad:
        return ["%s: %d of %d READs returned other bytes than written, %d bad digests" % (
            load.name, wrong, reads, dbad)]
    return []


# ---------------------------------------------------------------- the traffic


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.reads = self.writes = self.atomic_reads = 0
        self.torn = self.mixed = self.future = self.stale = self.checked = 0
        self.errors = []
        # The order of commands as this initiator saw it (one clock for every session): a
        # WRITE's generation -> [sent, status read] (sent is taken before the command goes
        # out, status read after its status came in, so both err on the safe side), and per
        # LBA the last WRITEs whose status came in, [(status read, sent)].
        self.gen_time = {0: [float("-inf"), float("-inf")]}
        self.done = [[] for _ in range(HOT)]

    def starting(self, pieces):
        """WRITEs of (lba, n, gen) about to be sent: when, as far as the order check knows."""
        sent = time.monotonic()
        with self.lock:
            for _, _, gen in pieces:
                self.gen_time[gen] = [sent, None]
        return sent

    def wrote(self, pieces, sent, answers):
        with self.lock:
            for (lba, n, gen), (_, _, t) in zip(pieces, answers):
                self.gen_time[gen][1] = t
                for b in range(lba, lba + n):
                    h = self.done[b]
                    h.append((t, sent))
                    if len(h) > HISTORY:
                        del h[0]

    def order(self, lba, gens, sent, status):
        """Blocks of a READ (sent at `sent`, its status read at `status`) that show a WRITE
        started after that status arrived (future), and blocks that show a WRITE another WRITE
        of the block overwrote wholly before the READ was sent (stale: the READ had to see at
        least the newer one). Dropped history only weakens the check, never fails it."""
        future = stale = 0
        with self.lock:
            for j, g in enumerate(gens):
                if g is None:
                    continue
                t = self.gen_time.get(g)
                if t is None or t[0] > status:
                    future += 1
                    continue
                if t[1] is None:  # its status not in yet: any later WRITE overlaps it
                    continue
                for done, started in self.done[lba + j]:
                    if started > t[1] and done < sent:
                        stale += 1
                        break
            self.future += future
            self.stale += stale
            self.checked += len(gens)

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


class Load:
    """The traffic against one LUN."""

    def __init__(self, port, lun, name, ip):
        self.port, self.lun, self.name, self.ip = port, lun, name, ip
        self.tally = Tally()
        self.sessions = []
        self.digests = []
        self.atomic = False

    def session(self, digest=False, slow=False, stall=False):
        cls = DigestSession if digest else StallSession if stall else hostile.Session
        want = {"DataDigest": "CRC32C"} if digest or stall else {}
        s = cls(self.port, want=want, src="127.0.%d.%d" % (self.ip, len(self.sessions) + 1))
        s.login()
        if digest or stall:
            check(s.keys.get("DataDigest") == "CRC32C",
                  "%s: DataDigest not negotiated (%r)" % (self.name, s.keys.get("DataDigest")))
            s.c.ddigest = True
            self.digests.append(s.c)
        if slow:
            # a small receive window: the target sends this session's Data-In in pieces, over
            # many loop turns, while the writers go on (a READ sent in place must not change
            # under its queued PDUs, nor a block between two pieces of one)
            s.c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
        st, _, _ = s.scsi_retry_ua(bytes(6), lun=self.lun)  # TEST UNIT READY: the power-on UA
        check(st == 0, "%s: TEST UNIT READY status %d" % (self.name, st))
        self.sessions.append(s)
        return s

    def prepare(self):
        s = self.session()
        st, _, _ = s.scsi(cdb_rw10(0x2A, 0, HOT), write_data=blocks(0, HOT, 0), lun=self.lun)
        check(st == 0, "%s: initial WRITE status %d" % (self.name, st))
        st, _, vpd = s.scsi(cdb_inquiry_vpd(0xB0, 64), read_len=64, lun=self.lun)
        check(st == 0 and len(vpd) >= 48, "%s: VPD B0h not read" % self.name)
        max_atomic = struct.unpack(">I", vpd[44:48])[0]
        self.max_atomic = max_atomic
        self.atomic = max_atomic >= ATOMIC_BLOCKS
        if self.atomic:
            st, _, _ = s.scsi(cdb_write_atomic16(ATOMIC_LBA, ATOMIC_BLOCKS),
                              write_data=blocks(ATOMIC_LBA, ATOMIC_BLOCKS, 0), lun=self.lun)
            check(st == 0, "%s: initial WRITE ATOMIC status %d" % (self.name, st))

    def threads(self, stop):
        work = []
        for w in range(WRITERS):
            work.append((self.writer, self.session(), w))
        for r in range(READERS):
            work.append((self.reader, self.session(digest=(r != 1), slow=(r == 2)), r))
        if self.atomic:
            work.append((self.atomic_writer, self.session(), WRITERS))
            work.append((self.atomic_reader, self.session(), 0))
        return [threading.Thread(target=self.run, args=(fn, s, i, stop), daemon=True)
                for fn, s, i in work]

    def run(self, fn, s, i, stop):
        rnd = random.Random(i * 7919 + self.lun)
        try:
            for k in range(MAX_OPS):
                if stop.is_set():
                    break
                fn(s, i, k, rnd)
        except Exception as e:  # noqa: BLE001  (reported with the counts)
            self.tally.add(errors=["%s: %s: %r" % (self.name, fn.__name__, e)])
            stop.set()

    @staticmethod
    def piece(rnd, first, count, most):
        n = PIECE * rnd.randint(1, most // PIECE)
        return first + PIECE * rnd.randrange((count - n) // PIECE + 1), n

    def writer(self, s, i, k, rnd):
        cmds, pieces = [], []
        for j in range(DEPTH):
            lba, n = self.piece(rnd, 0, HOT, HOT // 2)
            gen = ((k * DEPTH + j) + 1) * (WRITERS + 1) + i  # unique per write, never 0
            cmds.append((cdb_rw10(0x2A, lba, n), 0, blocks(lba, n, gen)))
            pieces.append((lba, n, gen))
        sent = self.tally.starting(pieces)
        answers = pipeline(s, self.lun, cmds)
        for st, _, _ in answers:
            check(st == 0, "WRITE status %d" % st)
        self.tally.wrote(pieces, sent, answers)
        self.tally.add(writes=DEPTH)
        # back to back: READ what was just written, on the same connection; it must show
        # these WRITEs or newer ones, whole
        self.read_check(s, [(lba, n) for lba, n, _ in pieces[:2]])

    def reader(self, s, i, k, rnd):
        # a digest reader's pieces are small: its CRC32C in Python is the slow part
        most = HOT if i == 1 else 4 * PIECE if i == 0 else 8 * PIECE
        pieces = [self.piece(rnd, 0, HOT, most) for _ in range(DEPTH)]
        if i == 0:
            self.read_then_write(s, k, pieces[:DEPTH // 2])
        else:
            self.read_check(s, pieces)

    def read_then_write(self, s, k, pieces):
        """Each READ followed at once by a WRITE of the same blocks, in one pipeline: the
        target takes both from one receive, so the WRITE lands while the READ's Data-In still
        waits to be sent. The READ may show either generation (the WRITE started before its
        status), but whole, and its data digest must match what it carries."""
        cmds, wrote = [], []
        for j, (lba, n) in enumerate(pieces):
            gen = MIX_GEN + k * DEPTH + j
            cmds.append((cdb_rw10(0x28, lba, n), n * BLOCK, None))
            cmds.append((cdb_rw10(0x2A, lba, n), 0, blocks(lba, n, gen)))
            wrote.append((lba, n, gen))
        sent = self.tally.starting(wrote)
        answers = pipeline(s, self.lun, cmds)
        torn = 0
        for (lba, n), (st, data, status) in zip(pieces, answers[0::2]):
            check(st == 0, "READ status %d" % st)
            torn += torn_blocks(data, lba, n)
            self.tally.order(lba, [block_gen(data, j, lba + j) for j in range(n)], sent,
                             status)
        for st, _, _ in answers[1::2]:
            check(st == 0, "WRITE status %d" % st)
        self.tally.wrote(wrote, sent, answers[1::2])
        self.tally.add(reads=len(pieces), writes=len(pieces), torn=torn)

    def read_check(self, s, pieces):
        cmds = [(cdb_rw10(0x28, lba, n), n * BLOCK, None) for lba, n in pieces]
        torn = 0
        sent = time.monotonic()
        for (lba, n), (st, data, status) in zip(pieces, pipeline(s, self.lun, cmds)):
            check(st == 0, "READ status %d" % st)
            torn += torn_blocks(data, lba, n)
            self.tally.order(lba, [block_gen(data, j, lba + j) for j in range(n)], sent,
                             status)
        self.tally.add(reads=len(pieces), torn=torn)

    def atomic_writer(self, s, i, k, rnd):
        gen = (k + 1) * (WRITERS + 1) + i
        st, _, _ = s.scsi(cdb_write_atomic16(ATOMIC_LBA, ATOMIC_BLOCKS),
                          write_data=blocks(ATOMIC_LBA, ATOMIC_BLOCKS, gen), lun=self.lun)
        check(st == 0, "WRITE ATOMIC status %d" % st)
        self.tally.add(writes=1)

    def atomic_reader(self, s, i, k, rnd):
        st, _, data = s.scsi(cdb_rw10(0x28, ATOMIC_LBA, ATOMIC_BLOCKS),
                             read_len=ATOMIC_BLOCKS * BLOCK, lun=self.lun)
        check(st == 0, "READ status %d" % st)
        gens = [block_gen(data, j, ATOMIC_LBA + j) for j in range(ATOMIC_BLOCKS)]
        self.tally.add(atomic_reads=1, torn=gens.count(None), mixed=int(len(set(gens)) > 1))

    def stalled_reader(self, w, gen, trickle):
        """A reader that stops reading (or reads a trickle: 4 KiB every 20 ms) holds no other
        session's WRITE for long. It sends 2 MiB READs of one range, more than its socket and
        the target's together can hold (the send buffer may grow to tcp_wmem's maximum): the
        rest of their Data-In waits in the target's queue, sent from the RAM LUN in place,
        pinning its pages. A WRITE of generation gen into the range from session w must
        complete within STALL_WRITE_S (the target copies the queued Data-In of a connection
        whose socket did not take a second's backlog in a second away; before that fix it
        waited until the reader was dropped, 45 s, or had read it all). Then the reader reads
        everything, with DataDigest: every block whole, at its LBA, the earlier step's 8 blocks
        its generation, all the others 0, the WRITE's too (the READs were answered before it
        was sent: their queued Data-In must not change, and every digest must match)."""
        r = self.session(stall=True)
        try:
            with open("/proc/sys/net/ipv4/tcp_wmem") as f:
                wmem = int(f.read().split()[2])
        except (OSError, ValueError, IndexError):
            wmem = 4 << 20
        size = STALL_BLOCKS * BLOCK
        count = (wmem + 4 * STALL_RCVBUF) // size + 3  # at least 2 READs' worth left queued
        reads = send_all(r, self.lun, [(cdb_rw10(0x28, STALL_LBA, STALL_BLOCKS), size, None)]
                         * count)
        stop = threading.Event()
        reader = threading.Thread(target=r.c.trickle, args=(stop, 4096, 0.02), daemon=True)
        if trickle:
            reader.start()
        time.sleep(0.5)  # the target answers them; the sockets fill
        began = time.monotonic()
        first = 8 * gen  # the WRITE's 8 blocks: [8, 16) in step 1, [16, 24) in step 2
        try:
            st, _, _ = w.scsi(cdb_rw10(0x2A, STALL_LBA + first, 8),
                              write_data=blocks(STALL_LBA + first, 8, gen), lun=self.lun,
                              timeout=STALL_WRITE_S)
        except (TestFailure, hostile.Closed, OSError) as e:
            raise TestFailure("%s: a WRITE beside a %s reader not done in %.0f s (%s)"
                              % (self.name, "trickling" if trickle else "stalled",
                                 STALL_WRITE_S, e))
        waited = time.monotonic() - began
        stop.set()
        if trickle:
            reader.join()
        check(st == 0, "%s: WRITE beside a stalled reader: status %d" % (self.name, st))
        bad = 0
        for st, data, _ in collect(r, *reads):
            check(st == 0, "%s: stalled READ status %d" % (self.name, st))
            for j in range(STALL_BLOCKS):
                g = block_gen(data, j, STALL_LBA + j)
                bad += g != (j // 8 if j < first else 0)
        print("%s: %s reader: %d READs of 2 MiB, a WRITE beside it done in %.1f s, "
              "%d wrong blocks" % (self.name, "trickling" if trickle else "stalled", count,
                                   waited, bad))
        self.tally.add(reads=count, writes=1, torn=bad)

    def stalled_readers(self):
        """The range at generation 0, then a reader that stops, then one that trickles."""
        w = self.session()
        for lba in range(STALL_LBA, STALL_LBA + STALL_BLOCKS, 128):
            st, _, _ = w.scsi(cdb_rw10(0x2A, lba, 128), write_data=blocks(lba, 128, 0),
                              lun=self.lun)
            check(st == 0, "%s: WRITE status %d" % (self.name, st))
        self.stalled_reader(w, 1, False)
        self.stalled_reader(w, 2, True)

    def logged_out_reader(self, w):
        """A reader that sends READs of the range, logs out at once and stops reading: the
        connection ends only once its queue is on the wire, so its Data-In, sent from the RAM
        LUN in place, would pin the pages for ever. A WRITE from session w into the range must
        complete within STALL_WRITE_S, and the target must close the connection nop-timeout
        (LOGOUT_NOP_S) after the Logout, logging why. What the reader then reads is whole,
        with matching digests, the data before the WRITE, and short of all the READs'."""
        r = self.session(stall=True)
        size = STALL_BLOCKS * BLOCK
        count = (8 << 20) // size + 4  # beyond the socket buffers (tcp_wmem's default max: 4M)
        send_all(r, self.lun, [(cdb_rw10(0x28, STALL_LBA, STALL_BLOCKS), size, None)] * count)
        time.sleep(0.5)  # the target answers them; the sockets fill
        r.c.send_pdu(bhs(OP_LOGOUT, 0x80, b"\0" * 8, r.next_itt(), 0, r.cmdsn, r.expstatsn,
                         immediate=True))
        began = time.monotonic()
        try:
            st, _, _ = w.scsi(cdb_rw10(0x2A, STALL_LBA, 8), write_data=blocks(STALL_LBA, 8, 1),
                              lun=self.lun, timeout=STALL_WRITE_S)
        except (TestFailure, hostile.Closed, OSError) as e:
            raise TestFailure("%s: a WRITE beside a logged-out reader not done in %.0f s (%s)"
                              % (self.name, STALL_WRITE_S, e))
        check(st == 0, "%s: WRITE beside a logged-out reader: status %d" % (self.name, st))
        waited = time.monotonic() - began
        return r, count * size, waited

    def report(self):
        t = self.tally
        pdus = sum(d.pdus for d in self.digests)
        dbad = sum(d.bad for d in self.digests)
        return ("%s: %d READs (%d torn blocks; of %d blocks ordered, %d show a WRITE sent "
                "after the READ's status, %d an overwritten one), %d WRITEs, %d atomic READs "
                "(%d mixing two WRITE ATOMICs), Data-In with DataDigest %d (%d bad), max "
                "atomic %d blocks" %
                (self.name, t.reads, t.torn, t.checked, t.future, t.stale, t.writes,
                 t.atomic_reads, t.mixed, pdus, dbad, self.max_atomic))

    def failures(self):
        t = self.tally
        bad = list(t.errors)
        if t.torn:
            bad.append("%s: %d torn blocks" % (self.name, t.torn))
        if t.future:
            bad.append("%s: %d blocks READ show a WRITE sent after that READ's status came in"
                       % (self.name, t.future))
        if t.stale:
            bad.append("%s: %d blocks READ show a WRITE that another one had overwritten "
                       "before the READ was sent" % (self.name, t.stale))
        if t.mixed:
            bad.append("%s: %d READs saw a WRITE ATOMIC half applied" % (self.name, t.mixed))
        dbad = sum(d.bad for d in self.digests)
        if dbad:
            bad.append("%s: %d Data-In PDUs with a wrong data digest" % (self.name, dbad))
        if self.lun != 0 and self.max_atomic:
            bad.append("%s: advertises WRITE ATOMIC of %d blocks, not atomic across a power "
                       "loss" % (self.name, self.max_atomic))
        if not t.reads or not t.writes:
            bad.append("%s: no traffic" % self.name)
        return bad


def logged_out_reader(binary):
    """Load.logged_out_reader on a daemon of its own, whose nop-timeout is short."""
    d = hostile.Daemon(binary, threads=2, log_level="info", prefix="tear-logout-",
                       lun="ram:16M", config=["nop-timeout = %d" % LOGOUT_NOP_S])
    try:
        ld = Load(d.port, 0, "ram,logged-out", 4)
        w = ld.session()
        for lba in range(STALL_LBA, STALL_LBA + STALL_BLOCKS, 128):
            st, _, _ = w.scsi(cdb_rw10(0x2A, lba, 128), write_data=blocks(lba, 128, 0))
            check(st == 0, "%s: WRITE status %d" % (ld.name, st))
        r, total, waited = ld.logged_out_reader(w)
        why = "logged out, queue not read within nop-timeout"
        deadline = time.monotonic() + LOGOUT_NOP_S + 5
        while why not in d.log_tail(1000) and time.monotonic() < deadline:
            time.sleep(0.2)
        check(why in d.log_tail(1000), "the logged-out reader not closed %d s after its "
              "nop-timeout:\n%s" % (LOGOUT_NOP_S + 5, d.log_tail(10)))
        got = bad = 0
        while True:
            try:
                h, data = r.c.recv_pdu(5.0)
            except hostile.Closed:
                break
            check(h[0] & 0x3F == OP_DATA_IN, "logged-out reader: PDU 0x%02x" % h[0])
            first = struct.unpack(">I", h[40:44])[0] // BLOCK
            bad += sum(block_gen(data, i, STALL_LBA + first + i) != 0
                       for i in range(len(data) // BLOCK))
            got += len(data)
        check(not bad and not r.c.bad, "logged-out reader: %d blocks not the data before the "
              "WRITE, %d bad data digests" % (bad, r.c.bad))
        check(got < total, "logged-out reader: read all %d bytes of its READs" % total)
        print("ram: logged-out reader: a WRITE beside it done in %.1f s, closed after "
              "nop-timeout with %d of %d bytes read, %d Data-In digests checked"
              % (waited, got, total, r.c.pdus))
        w.logout()
        d.stop()
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tear-")
    files = [os.path.join(tmp, n) for n in ("buffered.img", "direct.img")]
    d = hostile.Daemon(binary, threads=2, log_level="warn", prefix="tear-target-",
                       lun=["ram:16M,send-min=4k", "file:%s,size=16M,send-min=8k" % files[0],
                            "file:%s,size=16M,direct" % files[1]])
    loads = []
    try:
        loads = [Load(d.port, 0, "ram", 1), Load(d.port, 1, "file", 2),
                 Load(d.port, 2, "file,direct", 3)]
        for ld in loads:
            ld.prepare()
        why = cachestat_missing(files[0])
        if why:  # every step below still runs, on READs the file LUN copies
            print("skip: the file LUN's in-place steps run copied, not from its mapping (%s)"
                  % why)
        stop = threading.Event()
        threads = [t for ld in loads for t in ld.threads(stop)]
        for t in threads:
            t.start()
        stop.wait(TRAFFIC_S)
        stop.set()
        for t in threads:
            t.join(30)
            check(not t.is_alive(), "a traffic thread is stuck")
        loads[0].stalled_readers()  # the RAM LUN, which sends READs in place
        loads[1].stalled_readers()  # the file LUN, which sends them from its mapping
        logged_out_reader(binary)
        for ld in loads:
            print(ld.report())
        stalled = stall_writers_check(loads[1])  # the file LUN whose READs go out in place
        stalled += stall_check(loads[1])
        if not stalled:
            stalled = inplace_reads_check(loads[1], files[0])
        if not stalled:
            stalled = shrink_check(loads[1], files[0], loads[0])
        for ld in loads:
            for s in ld.sessions:
                s.logout()
        d.stop()
        bad = [f for ld in loads for f in ld.failures()] + stalled
        if bad:
            raise TestFailure("; ".join(bad))
    except (TestFailure, hostile.Closed, OSError) as e:
        print("FAIL: %s" % e)
        if d.alive():
            d.proc.kill()
            d.proc.wait()
        print(d.log_tail(20))
        return 1
    finally:
        for f in files:
            try:
                os.unlink(f)
            except OSError:
                pass
        os.rmdir(tmp)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
