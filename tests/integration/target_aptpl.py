#!/usr/bin/env python3
"""Persistent reservation steps for target_aptpl.sh, through hostile.py's raw initiator.

usage: target_aptpl.py PORT TARGET-IQN STEP
  reserve APTPL    initiator A registers key KEY_A with APTPL=0|1 and RESERVEs Write Exclusive
  check-kept       after a restart: READ KEYS lists KEY_A, READ RESERVATION says A holds Write
                   Exclusive; initiator B's WRITE(10) is RESERVATION CONFLICT, its READ(10) and
                   A's WRITE(10) are GOOD
  check-forgotten  after a restart: no key, no reservation; B's WRITE(10) is GOOD
  refused          after `reserve 1`, with the state file out of reach: B's REGISTER with
                   APTPL=1 and A's RELEASE fail HARDWARE ERROR 44h/00h and change nothing
                   (READ KEYS: KEY_A alone; READ RESERVATION: A, Write Exclusive)
Initiator A always logs in with the same ISID: registrations belong to the I_T nexus
(initiator name + ISID). Exit 0 when every check holds, 1 with the reason otherwise.
Python 3 standard library only."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (the raw initiator: sense_kaa)
from pr_lib import (GOOD, RESERVATION_CONFLICT, WRITE_EXCLUSIVE, fail, io, prout,  # noqa: E402
                    read_reservation, session)
import pr_lib  # noqa: E402

INIT_A = "iqn.2026-11.org.linerate:aptpl-a"
INIT_B = "iqn.2026-11.org.linerate:aptpl-b"
ISID_A = bytes([0x80, 0x00, 0x00, 0x00, 0x0a, 0x01])
ISID_B = bytes([0x80, 0x00, 0x00, 0x00, 0x0b, 0x01])
KEY_A = 0xA1A2A3A4A5A6A7A8
KEY_B = 0xB1B2B3B4B5B6B7B8


def expect(what, st, sense, want):
    if st != want:
        fail("%s: status 0x%02x (sense %s), expected 0x%02x" %
             (what, st, hostile.sense_kaa(sense), want))
    print("ok: %s -> status 0x%02x" % (what, st))


def refused(what, result):
    """A PERSISTENT RESERVE OUT the state file could not keep: HARDWARE ERROR, 44h/00h."""
    st, sense = result
    if st != 0x02 or hostile.sense_kaa(sense) != (0x4, 0x44, 0x00):
        fail("%s with the state file out of reach: status 0x%02x sense %s, expected CHECK "
             "CONDITION 4/44h/00h" % (what, st, hostile.sense_kaa(sense)))
    print("ok: %s -> CHECK CONDITION 4/44h/00h" % what)


def read_keys(s):
    """The registered keys (their PRGENERATION is not what these steps check)."""
    return pr_lib.read_keys(s)[1]


def main():
    if len(sys.argv) < 4:
        fail(__doc__)
    port, hostile.TARGET, step = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    a = session(port, INIT_A, ISID_A)
    if step == "reserve":
        aptpl = sys.argv[4] == "1"
        st, sense = prout(a, 0x00, sa_key=KEY_A, aptpl=aptpl)
        expect("A: REGISTER key 0x%x APTPL=%d" % (KEY_A, aptpl), st, sense, GOOD)
        st, sense = prout(a, 0x01, key=KEY_A, type_=WRITE_EXCLUSIVE)
        expect("A: RESERVE Write Exclusive", st, sense, GOOD)
        if read_keys(a) != [KEY_A] or read_reservation(a) != (KEY_A, WRITE_EXCLUSIVE):
            fail("after RESERVE: keys %s reservation %s" % (read_keys(a), read_reservation(a)))
        a.logout()
        return
    b = session(port, INIT_B, ISID_B)
    if step == "refused":
        refused("B: REGISTER key 0x%x APTPL=1" % KEY_B, prout(b, 0x00, sa_key=KEY_B, aptpl=True))
        refused("A: RELEASE", prout(a, 0x02, key=KEY_A, type_=WRITE_EXCLUSIVE))
    keys, resv = read_keys(b), read_reservation(b)
    print("READ KEYS %s, READ RESERVATION %s" %
          ([hex(k) for k in keys], resv and (hex(resv[0]), resv[1])))
    if step in ("check-kept", "refused"):
        if keys != [KEY_A]:
            fail("after the restart READ KEYS lists %s, expected [0x%x]" % (keys, KEY_A))
        if resv != (KEY_A, WRITE_EXCLUSIVE):
            fail("after the restart READ RESERVATION says %s, expected (0x%x, %d)" %
                 (resv, KEY_A, WRITE_EXCLUSIVE))
        st, sense = io(b, 0x2A)
        expect("B: WRITE(10) under A's Write Exclusive", st, sense, RESERVATION_CONFLICT)
        st, sense = io(b, 0x28)
        expect("B: READ(10) under A's Write Exclusive", st, sense, GOOD)
        st, sense = io(a, 0x2A)
        expect("A (holder): WRITE(10)", st, sense, GOOD)
    elif step == "check-forgotten":
        if keys or resv:
            fail("without APTPL the restart kept keys %s reservation %s" % (keys, resv))
        st, sense = io(b, 0x2A)
        expect("B: WRITE(10) with nothing reserved", st, sense, GOOD)
    else:
        fail("unknown step " + step)
    b.logout()
    a.logout()


if __name__ == "__main__":
    try:
        main()
    except hostile.TestFailure as e:
        fail(str(e))
