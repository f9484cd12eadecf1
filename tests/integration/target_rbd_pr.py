#!/usr/bin/env python3
"""Persistent reservations across two gateways of one rbd image, for target_rbd_pr.sh, through
hostile.py's raw initiator.

usage: target_rbd_pr.py PORT_A PORT_B TARGET-IQN
Two linerate daemons export the same image under the same target name, gateway A on PORT_A and
gateway B on PORT_B. Initiator X uses A, initiators Y and Z use B:
  1. X and Y register (REGISTER); READ KEYS through either gateway lists both keys, with the
     same PRGENERATION.
  2. X reserves Write Exclusive through A; READ RESERVATION through B names X's key. Y's and
     Z's WRITE(10) through B are RESERVATION CONFLICT, their READ(10) GOOD; X's WRITE GOOD.
  3. X releases through A: Y's WRITE through B is GOOD.
  4. X reserves Exclusive Access through A: Y's READ through B is RESERVATION CONFLICT. Y
     PREEMPTs X's key through B (Write Exclusive): X's next command through A reports UNIT
     ATTENTION / REGISTRATIONS PREEMPTED, then X's WRITE is RESERVATION CONFLICT, READ KEYS
     through A lists only Y's key.
  5. CLEAR through B: READ KEYS through A is empty; writes from everyone are GOOD.
  6. SPC-2 RESERVE(6) by X through A: Y's READ through B is RESERVATION CONFLICT; RELEASE(6)
     by X: Y's READ is GOOD.
  7. Races: eight initiators, four on each gateway, REGISTER at once; READ KEYS lists all
     eight (the compare-and-swap lost no update); CLEAR.
  8. One initiator port (the same name and ISID) through A (target port 1) and B (target
     port 2) is two I_T nexuses: REGISTER through A, then REGISTER (key 0, the same SARK)
     through B is GOOD; READ FULL STATUS lists both, with relative target ports 1 and 2;
     Write Exclusive through A: the WRITE through B is RESERVATION CONFLICT; UNREGISTER through
     A leaves B's registration; CLEAR.
  9. Cost: the mean latency of REGISTER AND IGNORE EXISTING KEY (a cluster round trip) and of
     READ(10) while a reservation is held (none), printed for the record.
Exit 0 when every check holds, 1 with the reason otherwise. Python 3 standard library only."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: sense_kaa)
from pr_lib import (CHECK_CONDITION, EXCLUSIVE_ACCESS, GOOD, RESERVATION_CONFLICT,  # noqa: E402
                    WRITE_EXCLUSIVE, fail, io, prout, read_full_status, read_keys,
                    read_reservation, session)

REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, REGISTER_IGNORE = 0, 1, 2, 3, 4, 6
KEY_X, KEY_Y, KEY_W = 0x1111111111111111, 0x2222222222222222, 0x3333333333333333


def prout_ok(s, what, *a, **kw):
    st, sense = prout(s, *a, **kw)
    if st != GOOD:
        fail("%s: status 0x%02x sense %s" % (what, st, hostile.sense_kaa(sense)))


def expect_io(s, who, op, want):
    st, sense = io(s, op)
    name = "WRITE(10)" if op == 0x2A else "READ(10)"
    if st != want:
        fail("%s's %s: status 0x%02x sense %s, expected 0x%02x" %
             (who, name, st, hostile.sense_kaa(sense), want))


def main():
    port_a, port_b, hostile.TARGET = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    x = session(port_a, "iqn.2026-12.org.linerate:pr-x")
    y = session(port_b, "iqn.2026-12.org.linerate:pr-y")
    z = session(port_b, "iqn.2026-12.org.linerate:pr-z")
    xb = session(port_b, "iqn.2026-12.org.linerate:pr-reader")  # reads state through B

    print("1. registrations through A and B are seen through both")
    prout_ok(x, "X REGISTER through A", REGISTER, 0, KEY_X)
    prout_ok(y, "Y REGISTER through B", REGISTER, 0, KEY_Y)
    ga, ka = read_keys(x)
    gb, kb = read_keys(xb)
    if ka != sorted([KEY_X, KEY_Y]) or kb != ka or ga != gb:
        fail("READ KEYS: through A gen %d %s, through B gen %d %s" %
             (ga, [hex(k) for k in ka], gb, [hex(k) for k in kb]))

    print("2. Write Exclusive through A holds on B")
    prout_ok(x, "X RESERVE WE through A", RESERVE, KEY_X, 0, WRITE_EXCLUSIVE)
    r = read_reservation(xb)
    if r != (KEY_X, WRITE_EXCLUSIVE):
        fail("READ RESERVATION through B: %s" % (r,))
    expect_io(y, "Y (B, registered)", 0x2A, RESERVATION_CONFLICT)
    expect_io(z, "Z (B, unregistered)", 0x2A, RESERVATION_CONFLICT)
    expect_io(y, "Y (B)", 0x28, GOOD)
    expect_io(x, "X (A, holder)", 0x2A, GOOD)

    print("3. RELEASE through A: B's writes pass")
    prout_ok(x, "X RELEASE through A", RELEASE, KEY_X, 0, WRITE_EXCLUSIVE)
    expect_io(y, "Y (B)", 0x2A, GOOD)
    expect_io(z, "Z (B)", 0x2A, GOOD)

    print("4. Exclusive Access through A, PREEMPT through B")
    prout_ok(x, "X RESERVE EA through A", RESERVE, KEY_X, 0, EXCLUSIVE_ACCESS)
    expect_io(y, "Y (B)", 0x28, RESERVATION_CONFLICT)
    prout_ok(y, "Y PREEMPT X through B", PREEMPT, KEY_Y, KEY_X, WRITE_EXCLUSIVE)
    st, sense, _ = x.scsi(b"\x00" * 6)
    if st != CHECK_CONDITION or hostile.sense_kaa(sense) != (0x06, 0x2A, 0x05):
        fail("X through A after the preempt: status 0x%02x sense %s, expected UNIT ATTENTION "
             "2Ah/05h REGISTRATIONS PREEMPTED" % (st, hostile.sense_kaa(sense)))
    expect_io(x, "X (A, preempted)", 0x2A, RESERVATION_CONFLICT)
    _, ka = read_keys(x)
    if ka != [KEY_Y]:
        fail("READ KEYS through A after the preempt: %s" % [hex(k) for k in ka])
    r = read_reservation(x)
    if r != (KEY_Y, WRITE_EXCLUSIVE):
        fail("READ RESERVATION through A after the preempt: %s" % (r,))

    print("5. CLEAR through B")
    prout_ok(y, "Y CLEAR through B", CLEAR, KEY_Y)
    _, ka = read_keys(x)
    if ka:
        fail("READ KEYS through A after CLEAR: %s" % [hex(k) for k in ka])
    expect_io(x, "X (A)", 0x2A, GOOD)
    expect_io(z, "Z (B)", 0x2A, GOOD)

    print("6. SPC-2 RESERVE(6) through A holds on B")
    st, sense, _ = x.scsi(bytes([0x16, 0, 0, 0, 0, 0]))
    if st != GOOD:
        fail("X RESERVE(6) through A: status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    expect_io(y, "Y (B)", 0x28, RESERVATION_CONFLICT)
    expect_io(x, "X (A, holder)", 0x2A, GOOD)
    st, sense, _ = x.scsi(bytes([0x17, 0, 0, 0, 0, 0]))
    if st != GOOD:
        fail("X RELEASE(6) through A: status 0x%02x sense %s" % (st, hostile.sense_kaa(sense)))
    expect_io(y, "Y (B)", 0x28, GOOD)

    print("7. eight REGISTERs at once through both gateways")
    many = [session(port_a if i % 2 else port_b, "iqn.2026-12.org.linerate:pr-race%d" % i)
            for i in range(8)]
    keys = [0x7000000000000000 + i for i in range(8)]
    errors = []

    def reg(s, k):
        try:
            st, sense = prout(s, REGISTER, 0, k)
            if st != GOOD:
                errors.append("REGISTER %x: status 0x%02x sense %s" %
                              (k, st, hostile.sense_kaa(sense)))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append("REGISTER %x: %s" % (k, e))

    th = [threading.Thread(target=reg, args=(s, k)) for s, k in zip(many, keys)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if errors:
        fail("; ".join(errors))
    _, ka = read_keys(x)
    _, kb = read_keys(xb)
    if ka != sorted(keys) or kb != ka:
        fail("after the concurrent REGISTERs: through A %s, through B %s" %
             ([hex(k) for k in ka], [hex(k) for k in kb]))
    prout_ok(many[0], "CLEAR", CLEAR, keys[0])

    print("8. one initiator port through both gateways: two I_T nexuses")
    isid = bytes([0x80, 0x00, 0x12, 0x36, 0x00, 0x01])
    wa = session(port_a, "iqn.2026-12.org.linerate:pr-w", isid)
    wb = session(port_b, "iqn.2026-12.org.linerate:pr-w", isid)
    prout_ok(wa, "W REGISTER through A", REGISTER, 0, KEY_W)
    prout_ok(wb, "W REGISTER (key 0) through B", REGISTER, 0, KEY_W)
    regs = read_full_status(wb)
    if sorted(regs) != [(KEY_W, 1), (KEY_W, 2)]:
        fail("READ FULL STATUS through B: %s" % [(hex(k), p) for k, p in regs])
    prout_ok(wa, "W RESERVE WE through A", RESERVE, KEY_W, 0, WRITE_EXCLUSIVE)
    expect_io(wa, "W (A, holder)", 0x2A, GOOD)
    expect_io(wb, "W (B, registered, not the holder)", 0x2A, RESERVATION_CONFLICT)
    prout_ok(wa, "W UNREGISTER through A", REGISTER, KEY_W, 0)
    regs = read_full_status(wa)
    if regs != [(KEY_W, 2)]:
        fail("READ FULL STATUS after UNREGISTER through A: %s" % [(hex(k), p) for k, p in regs])
    prout_ok(wb, "W CLEAR through B", CLEAR, KEY_W)

    print("9. cost")
    n = 20
    t0 = time.monotonic()
    for i in range(n):
        prout_ok(x, "X REGISTER AND IGNORE", REGISTER_IGNORE, 0, KEY_X + i + 1)
    prout_lat = (time.monotonic() - t0) / n
    prout_ok(x, "X RESERVE WE", RESERVE, KEY_X + n, 0, WRITE_EXCLUSIVE)
    t0 = time.monotonic()
    for i in range(200):
        expect_io(y, "Y (B)", 0x28, GOOD)
    read_resv = (time.monotonic() - t0) / 200
    prout_ok(x, "X CLEAR", CLEAR, KEY_X + n)
    t0 = time.monotonic()
    for i in range(200):
        expect_io(y, "Y (B)", 0x28, GOOD)
    read_free = (time.monotonic() - t0) / 200
    print("cost: PERSISTENT RESERVE OUT %.2f ms; READ(10) through the other gateway %.3f ms "
          "with a reservation held, %.3f ms without" %
          (prout_lat * 1e3, read_resv * 1e3, read_free * 1e3))
    for s in [x, y, z, xb, wa, wb] + many:
        s.logout()


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
