"""A TCP relay in front of one gateway, for the tests that hold or cut one path of lr_mpath
in the middle of a command: shared by initiator_stale_write.py and target_ats.py. A subclass
says what happens to each relayed connection (pumps()); this module accepts, connects and
reads whole PDUs. Python 3 standard library only."""

import socket
import threading


def recv_exact(s, n):
    """N bytes from socket S, or OSError when the peer closes first."""
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise OSError("closed")
        b += chunk
    return b


def pdu_rest_len(bhs):
    """The bytes that follow a 48-byte BHS: the AHS (TotalAHSLength in 4-byte words) and the
    data segment padded to 4 bytes (RFC 7143 §11.2.1); digests are off in these tests."""
    return bhs[4] * 4 + (int.from_bytes(bhs[5:8], "big") + 3) // 4 * 4


def read_pdu(s):
    """(BHS, the whole PDU) read from socket S."""
    bhs = recv_exact(s, 48)
    return bhs, bhs + recv_exact(s, pdu_rest_len(bhs))


def close_all(socks):
    """Shut down and close each socket: the peers see the connection end at once."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class Relay:
    """Listens on a free loopback port (self.port); joins each accepted connection to a new
    one to 127.0.0.1:DST and hands both to self.pumps(initiator_side, gateway_side).
    RCVBUF, when given, is set on the listening socket before listen(2): the accepted
    sockets inherit it. Subclasses set their own state before calling this constructor:
    the accepting thread starts here."""

    def __init__(self, dst, rcvbuf=None):
        self.dst = dst
        self.lsock = socket.socket()
        if rcvbuf is not None:
            self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            t = socket.create_connection(("127.0.0.1", self.dst))
            self.pumps(c, t)

    def pumps(self, c, t):
        raise NotImplementedError

    @staticmethod
    def start(fn, *args):
        threading.Thread(target=fn, args=args, daemon=True).start()

    def close(self):
        self.lsock.close()
