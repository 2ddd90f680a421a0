#!/usr/bin/env python3
"""rtr-relay: put wisp's peer-to-peer RTR into siw's blind window, every time.

siw 6.1 (docs/interop.md, finding 1) leaves an FPDU that lands just after
its MPA Reply unread until more data arrives. wisp's own RTR goes out a
few hundred microseconds after the Reply, which on an idle host rarely
lands in that window, so a test of wisp alone seldom shows what wisp does
when it happens. This relay makes it happen: it sits between wisp (the
initiator, connecting to --listen) and siw (reached at --to), forwards the
MPA Request and, the instant siw's Reply arrives with the READ RTR and no
CRC, sends siw the zero-length RDMA Read Request that wisp is about to
send (the same message: untagged, queue 1, MSN 1, size 0), then hands
wisp the Reply, drops wisp's own identical RTR, and from then on relays
both streams untouched.

siw then often has the RTR unread. Without wisp's nudge (a zero-length
RDMA Write after 50 ms without an answer) the connection hangs; with it,
siw reads both and answers. Each connection prints
  RTRRELAY k=<k> early=<0|1> answer_ms=<t|-> nudges=<n>
(nudges: zero-length RDMA Writes wisp sent before siw's first FPDU), and
the last line is
  RTRRELAY RESULT n=<N> early=<e> direct=<a> nudged=<b> none=<c>

  rtr-relay.py --to PORT [-n N] [--timeout-s S]
The relay listens on a free 127.0.0.1 port and prints "RTRRELAY port=P".
"""
import argparse
import select
import socket
import struct
import sys
import time

from mpa_wire import (F_CRC, F_ENHANCED, F_MARKERS, F_REJECT, KEY_REP,
                      KEY_REQ, P2P_A, RTR_READ, fpdu_rest_len, recv_exact,
                      zero_read_request)

# wisp's RTR names STag 0x100 (rdmap_qp.c RTR_STAG): the relay's stand-in
# must be the same message, octet for octet
WISP_RTR_STAG = 0x100


def read_frame(s, key, deadline):
    """An MPA Request or Reply frame (header + private data), or None."""
    hdr = recv_exact(s, 20, deadline)
    if hdr is None or hdr[:16] != key:
        return None
    (pdlen,) = struct.unpack(">H", hdr[18:20])
    pd = recv_exact(s, pdlen, deadline) if pdlen else b""
    return None if pd is None else hdr + pd


def early_rtr_wanted(reply):
    """Peer-to-peer with the READ RTR, no CRC, no markers, not rejected."""
    flags = reply[16]
    if flags & (F_MARKERS | F_CRC | F_REJECT) or not flags & F_ENHANCED:
        return False
    if len(reply) < 24:
        return False
    ird, ord_ = struct.unpack(">HH", reply[20:24])
    return bool(ird & P2P_A) and bool(ord_ & RTR_READ)


class FpduScanner:
    """Splits a CRC-less, marker-less FPDU stream; yields (ddp, rdmap, len)."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        out = []
        while len(self.buf) >= 2:
            (ulen,) = struct.unpack(">H", self.buf[:2])
            total = 2 + fpdu_rest_len(ulen)
            if len(self.buf) < total or ulen < 2:
                break
            out.append((self.buf[2], self.buf[3], ulen))
            self.buf = self.buf[total:]
        return out


def is_zero_write(f):
    ddp, rdmap, ulen = f
    return ddp & 0x80 and rdmap & 0x0F == 0 and ulen == 14


def fin_close(x):
    """Close with a FIN, never a reset: read what the peer still sends."""
    try:
        x.shutdown(socket.SHUT_WR)
        recv_exact(x, 1 << 20, time.monotonic() + 1)
    except OSError:
        pass
    x.close()


def one(lsock, to_port, timeout_s):
    deadline = time.monotonic() + timeout_s
    lsock.settimeout(timeout_s)
    w, _ = lsock.accept()          # wisp
    s = socket.create_connection(("127.0.0.1", to_port), timeout=10)  # siw
    for x in (w, s):
        x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = read_frame(w, KEY_REQ, deadline)
    if req is None:
        fin_close(w); fin_close(s)
        return "error: no MPA Request from wisp", 0, None, 0
    s.sendall(req)
    rep = read_frame(s, KEY_REP, deadline)
    if rep is None:
        fin_close(w); fin_close(s)
        return "error: no MPA Reply from siw", 0, None, 0
    early = early_rtr_wanted(rep)
    if early:
        s.sendall(zero_read_request(WISP_RTR_STAG))
    t0 = time.monotonic()
    w.sendall(rep)
    if early:
        # wisp's own RTR: the same zero-length Read Request; drop it
        h = recv_exact(w, 2, deadline)
        if h is None:
            fin_close(w); fin_close(s)
            return "error: no RTR from wisp", 1, None, 0
        (ulen,) = struct.unpack(">H", h)
        rest = recv_exact(w, fpdu_rest_len(ulen), deadline)
        if rest is None or ulen != 46 or rest[0] != 0x41 or rest[1] != 0x41 \
                or struct.unpack(">I", rest[30:34])[0] != 0:
            fin_close(w); fin_close(s)
            return "error: wisp's first FPDU is not a zero-length Read Request", 1, None, 0
    scan = FpduScanner()
    nudges = 0
    answer_ms = None
    # reading: both until each has closed; writing: until a send fails.
    # Whatever happens, siw's side is read to its end and closed with a
    # FIN: a reset while its RTR is unread is siw's iw_cm BUG (finding 1)
    reading = {w: True, s: True}
    writable = {w: True, s: True}
    while any(reading.values()) and time.monotonic() < deadline:
        rl = [x for x in (w, s) if reading[x]]
        r, _, _ = select.select(rl, [], [], max(0, deadline - time.monotonic()))
        for x in r:
            y = s if x is w else w
            try:
                data = x.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                reading[x] = False
                if writable[y]:
                    try:
                        y.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    writable[y] = False
                continue
            if x is s and answer_ms is None:
                answer_ms = int((time.monotonic() - t0) * 1000)
            if x is w and answer_ms is None:
                nudges += sum(1 for f in scan.feed(data) if is_zero_write(f))
            if writable[y]:
                try:
                    y.sendall(data)
                except OSError:
                    writable[y] = False
    fin_close(w)
    fin_close(s)
    return "ok", int(early), answer_ms, nudges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--to", type=int, required=True)
    ap.add_argument("-n", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=30)
    a = ap.parse_args()
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    print("RTRRELAY port=%d" % lsock.getsockname()[1], flush=True)
    count = {"early": 0, "direct": 0, "nudged": 0, "none": 0}
    bad = 0
    for k in range(1, a.n + 1):
        try:
            what, early, answer_ms, nudges = one(lsock, a.to, a.timeout_s)
        except OSError as e:
            what, early, answer_ms, nudges = "error: %s" % e, 0, None, 0
        if what != "ok":
            bad += 1
            print("RTRRELAY k=%d %s" % (k, what), flush=True)
            continue
        count["early"] += early
        if answer_ms is None:
            count["none"] += 1
        elif nudges:
            count["nudged"] += 1
        else:
            count["direct"] += 1
        print("RTRRELAY k=%d early=%d answer_ms=%s nudges=%d"
              % (k, early, "-" if answer_ms is None else answer_ms, nudges),
              flush=True)
    print("RTRRELAY RESULT n=%d early=%d direct=%d nudged=%d none=%d"
          % (a.n, count["early"], count["direct"], count["nudged"],
             count["none"] + bad), flush=True)
    return 0 if bad == 0 and count["none"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
