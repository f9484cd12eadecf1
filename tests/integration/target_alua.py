#!/usr/bin/env python3
"""Two gateways of one target, implicit ALUA and gateway loss, over real sockets.

usage: target_alua.py PATH/TO/linerate-target [--rbd POOL/IMAGE] [--lun2 SPEC]
                     [--keep-running FILE]

Two linerate daemons, A (alua-group 1) and B (alua-group 2), export the same target name on
their own ports; each is told of the other group. LUN 0 is the shared store (a file both open,
or with --rbd an RBD image, CEPH_CONF from the environment): active/optimized on A,
active/non-optimized on B. LUN 1 is a second shared file, standby on B. A raw initiator
(hostile.py's) checks through both:
  1. standard INQUIRY TPGS=01b; VPD 0x83: the same NAA on both, relative target port and
     target port group 1 on A and 2 on B, target port names ...,t,0x0001 / ...,t,0x0002;
  2. REPORT TARGET PORT GROUPS, length-only and extended header: identical bytes from A and B,
     groups 1 (AO) and 2 (AN) for LUN 0, group 2 standby for LUN 1;
  3. on B, LUN 1: TEST UNIT READY and READ(10) are NOT READY 04h/0Bh, INQUIRY, REPORT LUNS,
     RTPG and REQUEST SENSE are GOOD; on A, LUN 1 reads;
  4. a block written (FUA) through A reads back through B and the reverse;
  5. gateway loss: a writer thread writes distinct stamped blocks with FUA through A while the
     main thread kills A with SIGKILL; every write A acknowledged (GOOD) before it died reads
     back through B, and B goes on writing and reading.
Exit 0 when every check holds, 1 with the reason. Python 3 standard library only.

For the multi-gateway shell test (target_multigw.sh) --keep-running FILE skips the checks and
the kill: it starts the two daemons, writes "PID_A PORT_A PID_B PORT_B" to FILE and waits for
SIGTERM, then stops both. LUN 2 is then a third shared store (--lun2 SPEC, default a file),
active on both, so that two linerate-bench --verify runs, one per gateway, write disjoint
stores."""

import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import TestFailure, check, free_port, sense_kaa  # noqa: E402

TARGET = "iqn.2026-11.org.linerate:alua"
hostile.TARGET = TARGET
FILE_BYTES = 16 << 20
BLOCK = 512
# how long a command through the survivor may wait after the other gateway died (RBD: the
# exclusive lock of the dead gateway is broken after the cluster's watch timeout, 30 s)
STALL_S = 90.0


class Gateway:
    """One linerate-target daemon: a config file of its own, its own port."""

    def __init__(self, binary, work, name, group, peer, lun0, lun1, lun1_opts, state=None,
                 lun2=None):
        self.name, self.binary, self.work, self.group, self.peer = name, binary, work, group, peer
        self.lun0, self.lun1, self.lun1_opts, self.state, self.lun2 = (lun0, lun1, lun1_opts,
                                                                       state, lun2)
        self.start()

    def conf_lines(self):
        lines = ["ctl-socket = none", "state-dir = %s" % os.path.join(self.work, "st-" + self.name),
                 "log-level = info", "threads = 2",
                 "[target %s]" % TARGET, "portal = 127.0.0.1:%d" % self.port,
                 "alua-group = %d" % self.group, "alua-peer = %s" % self.peer]
        if self.state:
            lines.append("alua-state = %s" % self.state)
        lines += ["lun 0 = %s" % self.lun0, "lun 1 = %s,%s" % (self.lun1, self.lun1_opts)]
        if self.lun2:
            lines.append("lun 2 = %s" % self.lun2)
        return lines

    def start(self):
        """Start the daemon on a free port (a restart appends to the same log)."""
        self.log = open(os.path.join(self.work, "gw-%s.log" % self.name), "a+")
        for _ in range(5):
            self.port = free_port()
            conf = os.path.join(self.work, "gw-%s.conf" % self.name)
            with open(conf, "w") as f:
                f.write("\n".join(self.conf_lines()) + "\n")
            self.proc = subprocess.Popen([self.binary, "--config", conf],
                                         stdout=subprocess.DEVNULL, stderr=self.log)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        raise TestFailure("gateway %s did not start listening:\n%s" % (self.name, self.tail()))

    def tail(self, n=30):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def stop(self):
        hostile.end_process(self.proc, 30)


def session(port, name):
    return hostile.Session(port, name="iqn.2026-11.org.linerate:alua-" + name).login()


def cmd(s, cdb, lun=0, read_len=0, write_data=None, timeout=10.0):
    return s.scsi_retry_ua(bytes(cdb), lun=lun, read_len=read_len, write_data=write_data,
                           timeout=timeout)


def good(s, cdb, what, lun=0, read_len=0, write_data=None):
    st, sense, data = cmd(s, cdb, lun, read_len, write_data)
    check(st == 0, "%s: status 0x%02x sense %s" % (what, st, sense_kaa(sense)))
    return data


def inquiry(s, lun=0, page=None):
    cdb = [0x12, 0, 0, 0, 255, 0] if page is None else [0x12, 1, page, 0, 255, 0]
    return good(s, cdb, "INQUIRY page %s LUN %d" % (page, lun), lun, read_len=255)


def designator(vpd, assoc_type):
    off, end = 4, 4 + struct.unpack(">H", vpd[2:4])[0]
    while off < end:
        if vpd[off + 1] & 0x3F == assoc_type:
            return vpd[off:off + 4 + vpd[off + 3]]
        off += 4 + vpd[off + 3]
    return None


def rtpg(s, lun, extended):
    cdb = struct.pack(">BBIIBB", 0xA3, 0x2A if extended else 0x0A, 0, 1024, 0, 0)
    return good(s, cdb, "REPORT TARGET PORT GROUPS LUN %d" % lun, lun, read_len=1024)


def rtpg_groups(data, extended):
    """{group: state} from RTPG parameter data."""
    hdr = 8 if extended else 4
    end = hdr + struct.unpack(">I", data[:4])[0]
    check(len(data) == end, "RTPG: RETURN DATA LENGTH %d, got %d bytes" % (end - hdr, len(data)))
    out, off = {}, hdr
    while off < end:
        state, group, nports = data[off] & 0x0F, struct.unpack(">H", data[off + 2:off + 4])[0], \
            data[off + 7]
        ports = [struct.unpack(">H", data[off + 8 + 4 * i + 2:off + 8 + 4 * i + 4])[0]
                 for i in range(nports)]
        check(ports == [group], "RTPG: group %d has ports %s" % (group, ports))
        out[group] = state
        off += 8 + 4 * nports
    return out


def check_identity(sa, sb):
    for s, gw in ((sa, 1), (sb, 2)):
        d = inquiry(s)
        check(d[5] & 0x30 == 0x10, "gateway %d: INQUIRY TPGS %d, want 01b" % (gw, d[5] >> 4 & 3))
    va, vb = inquiry(sa, page=0x83), inquiry(sb, page=0x83)
    check(designator(va, 0x03) == designator(vb, 0x03) and designator(va, 0x03),
          "the two gateways report different LU designators (NAA)")
    for v, gw in ((va, 1), (vb, 2)):
        rel, tpg = designator(v, 0x14), designator(v, 0x15)
        check(rel and struct.unpack(">H", rel[6:8])[0] == gw,
              "gateway %d: relative target port %s" % (gw, rel))
        check(tpg and struct.unpack(">H", tpg[6:8])[0] == gw,
              "gateway %d: target port group %s" % (gw, tpg))
        port = designator(v, 0x18)
        want = ("%s,t,0x%04x" % (TARGET, gw)).encode()
        check(port and port[4:4 + len(want)] == want, "gateway %d: target port name %s" % (gw, port))
    print("identity: TPGS=01b, same NAA, ports/groups 1 and 2")


def check_rtpg(sa, sb):
    for ext in (False, True):
        a0, b0 = rtpg(sa, 0, ext), rtpg(sb, 0, ext)
        check(a0 == b0, "RTPG (extended=%s) differs between gateways:\n%s\n%s" % (ext, a0.hex(),
                                                                              b0.hex()))
        if ext:
            check(a0[4] & 0x70 == 0x10, "RTPG extended: FORMAT TYPE %d" % (a0[4] >> 4 & 7))
        g = rtpg_groups(a0, ext)
        check(g == {1: 0, 2: 1}, "RTPG LUN 0 groups %s, want {1: AO, 2: AN}" % g)
        a1, b1 = rtpg(sa, 1, ext), rtpg(sb, 1, ext)
        check(a1 == b1, "RTPG LUN 1 differs between gateways")
        g = rtpg_groups(a1, ext)
        check(g == {1: 0, 2: 2}, "RTPG LUN 1 groups %s, want {1: AO, 2: standby}" % g)
    print("RTPG: both formats, same bytes from both gateways")


def check_standby(sa, sb):
    for cdb, what in (([0, 0, 0, 0, 0, 0], "TEST UNIT READY"),
                      (hostile.cdb_rw10(0x28, 0, 1), "READ(10)")):
        st, sense, _ = cmd(sb, cdb, lun=1, read_len=BLOCK if cdb[0] == 0x28 else 0)
        check(st == 2 and sense_kaa(sense) == (2, 0x04, 0x0B),
              "standby %s: status 0x%02x sense %s, want NOT READY 04h/0Bh" % (what, st,
                                                                          sense_kaa(sense)))
    inquiry(sb, lun=1)
    good(sb, struct.pack(">BBBxxxIxx", 0xA0, 0, 0, 256), "standby REPORT LUNS", 1, read_len=256)
    good(sb, [0x03, 0, 0, 0, 18, 0], "standby REQUEST SENSE", 1, read_len=18)
    rtpg(sb, 1, False)
    # READ CAPACITY answered in standby (LIO does too): Linux reads the capacity only at
    # scan, and a standby path it saw as 0 blocks stays unusable after a failover
    cap = good(sb, [0x25] + [0] * 9, "standby READ CAPACITY(10)", 1, read_len=8)
    check(struct.unpack(">II", cap[:8]) == (FILE_BYTES // BLOCK - 1, BLOCK),
          "standby READ CAPACITY(10) says %s" % (struct.unpack(">II", cap[:8]),))
    cap = good(sb, [0x9e, 0x10] + [0] * 8 + [0, 0, 0, 32, 0, 0], "standby READ CAPACITY(16)", 1,
               read_len=32)
    check(struct.unpack(">QI", cap[:12]) == (FILE_BYTES // BLOCK - 1, BLOCK),
          "standby READ CAPACITY(16) says %s" % (struct.unpack(">QI", cap[:12]),))
    good(sa, hostile.cdb_rw10(0x28, 0, 1), "READ(10) of LUN 1 on the active gateway", 1,
         read_len=BLOCK)
    print("standby: TUR/READ refused 04h/0Bh, INQUIRY/REPORT LUNS/REQUEST SENSE/RTPG/READ "
          "CAPACITY answered")


def write_fua(s, lba, data, timeout=10.0):
    cdb = bytearray(hostile.cdb_rw10(0x2A, lba, len(data) // BLOCK))
    cdb[1] = 0x08  # FUA: acknowledged means in the store
    return cmd(s, cdb, write_data=data, timeout=timeout)


def read(s, lba, blocks=1, timeout=10.0):
    cdb = hostile.cdb_rw10(0x28, lba, blocks)
    st, sense, data = cmd(s, cdb, read_len=blocks * BLOCK, timeout=timeout)
    check(st == 0, "READ(10) LBA %d: status 0x%02x sense %s" % (lba, st, sense_kaa(sense)))
    return data


def stamp(tag, lba, seq):
    head = ("%s lba %d seq %d " % (tag, lba, seq)).encode()
    return (head * (BLOCK // len(head) + 1))[:BLOCK]


def check_cross_path(sa, sb):
    st, sense, _ = write_fua(sa, 100, stamp("A", 100, 0))
    check(st == 0, "write through A: 0x%02x %s" % (st, sense_kaa(sense)))
    check(read(sb, 100) == stamp("A", 100, 0), "a block written through A reads wrong through B")
    st, sense, _ = write_fua(sb, 101, stamp("B", 101, 0))
    check(st == 0, "write through B: 0x%02x %s" % (st, sense_kaa(sense)))
    check(read(sa, 101) == stamp("B", 101, 0), "a block written through B reads wrong through A")
    print("cross path: written through one gateway, read through the other")


# Gateway loss writes each LBA of [LOSS_FIRST, LOSS_FIRST + LOSS_SPAN) at most once: the write
# in flight when A dies is not acknowledged and may or may not have reached the store (SAM-5
# §5.3.2: a command without a status has an undefined effect), so it must not land on an LBA
# an earlier write was acknowledged for. The kill comes after LOSS_KILL_AT acknowledgements,
# far below the span, whatever the machine's speed.
LOSS_FIRST = 1000
LOSS_SPAN = 20000
LOSS_KILL_AT = 1000
AFTER_FIRST = LOSS_FIRST + LOSS_SPAN + 1000  # B's own writes after the loss


def check_gateway_loss(gw_a, sa, sb):
    acked = {}
    stop = threading.Event()
    errors = []

    def writer():
        seq = 0
        try:
            while not stop.is_set() and seq < LOSS_SPAN:
                lba = LOSS_FIRST + seq
                data = stamp("loss", lba, seq)
                st, _, _ = write_fua(sa, lba, data)
                if st == 0:
                    acked[lba] = data
                seq += 1
        except (TestFailure, OSError, hostile.Closed) as e:
            errors.append(e)  # the gateway died under this command: not acknowledged

    t = threading.Thread(target=writer)
    t.start()
    deadline = time.monotonic() + STALL_S
    while len(acked) < LOSS_KILL_AT and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    check(len(acked) >= LOSS_KILL_AT, "%d writes acknowledged through A in %.0f s, want %d" %
          (len(acked), STALL_S, LOSS_KILL_AT))
    gw_a.proc.send_signal(signal.SIGKILL)
    gw_a.proc.wait()
    n_at_kill = len(acked)
    t.join(30)
    stop.set()
    check(not t.is_alive(), "the writer to the killed gateway did not notice")
    check(errors, "writes through a killed gateway kept succeeding")
    t0 = time.monotonic()
    for lba, data in sorted(acked.items()):
        check(read(sb, lba, timeout=STALL_S) == data,
              "LBA %d acknowledged through A reads wrong through B" % lba)
    t_read = time.monotonic() - t0
    # the survivor serves on: new writes and reads. On RBD the first write waits until the
    # cluster lets B take the image's exclusive lock from the dead A (its watch times out,
    # osd_client_watch_timeout, then B breaks the lock and blocklists A): the initiator sees
    # a slow command, not an error.
    t0 = time.monotonic()
    for i in range(64):
        lba = AFTER_FIRST + i
        st, sense, _ = write_fua(sb, lba, stamp("after", lba, i), timeout=STALL_S)
        check(st == 0, "write through B after A died: 0x%02x %s" % (st, sense_kaa(sense)))
    for i in range(64):
        check(read(sb, AFTER_FIRST + i) == stamp("after", AFTER_FIRST + i, i),
              "B after A died: bad read")
    t_write = time.monotonic() - t0
    print("gateway loss: %d acknowledged writes through A (%d at the kill) all read back through"
          " B (%.1f s); B writes on (first 64 writes %.1f s)" % (len(acked), n_at_kill, t_read,
                                                                t_write))


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    binary, rbd, keep, lun2 = args[0], None, None, None
    i = 1
    while i < len(args):
        if args[i] == "--rbd":
            rbd = args[i + 1]
        elif args[i] == "--keep-running":
            keep = args[i + 1]
        elif args[i] == "--lun2":
            lun2 = args[i + 1]
        else:
            print("unknown argument %s" % args[i], file=sys.stderr)
            return 2
        i += 2
    work = tempfile.mkdtemp(prefix="linerate-alua-")
    # file: LUNs shared by two daemons on one host: for testing only (one page cache makes
    # them coherent; there is no cross-host coherence)
    f0, f1, f2 = (os.path.join(work, "lun%d.img" % i) for i in range(3))
    for p in (f0, f1, f2):
        with open(p, "wb") as f:
            f.truncate(FILE_BYTES)
    lun0 = "rbd:%s" % rbd if rbd else "file:%s" % f0
    if keep and not lun2:
        lun2 = "file:%s" % f2
    if not keep:
        lun2 = None
    gws = []
    try:
        gws.append(Gateway(binary, work, "A", 1, "2:active/non-optimized", lun0, "file:" + f1,
                           "alua-peer=2:standby", lun2=lun2))
        gws.append(Gateway(binary, work, "B", 2, "1:active/optimized", lun0, "file:" + f1,
                           "alua=standby", state="active/non-optimized", lun2=lun2))
        if keep:
            with open(keep + ".tmp", "w") as f:
                f.write("%d %d %d %d\n" % (gws[0].proc.pid, gws[0].port, gws[1].proc.pid,
                                           gws[1].port))
            os.rename(keep + ".tmp", keep)
            stopped = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            while not stopped.wait(0.5):
                pass
            return 0
        sa, sb = session(gws[0].port, "a"), session(gws[1].port, "b")
        check_identity(sa, sb)
        check_rtpg(sa, sb)
        check_standby(sa, sb)
        check_cross_path(sa, sb)
        check_gateway_loss(gws[0], sa, sb)
        sb.logout()
        gws[1].stop()
        check(gws[1].proc.returncode == 0, "gateway B exited %d on SIGTERM" %
              gws[1].proc.returncode)
        print("PASS")
        return 0
    except (TestFailure, OSError, hostile.Closed) as e:
        print("FAIL: %s" % e, file=sys.stderr)
        for g in gws:
            print("--- gateway %s log:\n%s" % (g.name, g.tail()), file=sys.stderr)
        return 1
    finally:
        for g in gws:
            if keep:
                g.stop()  # SIGTERM: the stores are flushed and closed cleanly
            if g.proc.poll() is None:
                g.proc.kill()
                g.proc.wait()
        subprocess.call(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
