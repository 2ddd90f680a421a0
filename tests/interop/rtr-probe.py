#!/usr/bin/env python3
"""rtr-probe: a hand-made MPA initiator that measures how a responder (siw)
takes the peer-to-peer RTR (RFC 6581 9.2) depending on when it is sent.

It speaks just enough iWARP over a plain TCP socket: an MPA rev 2 Request
with the peer-to-peer bit and one RTR type, the Reply, then the zero-length
RTR (RDMA Read Request or RDMA Write, RFC 5040 4.4 / 4.2), optionally a
"nudge" (a second zero-length RDMA Write, a no-op for the data sink) when
no sign of life came back, and waits for the responder to show it entered
RDMA mode:
  - READ RTR: its zero-length RDMA Read Response;
  - WRITE RTR: the first message of the responder's application (run the
    guest's `cmprobe -s -S`, which sends one SEND once ESTABLISHED).

  rtr-probe.py --port P [--host H] [-n N] [--rtr read|write]
               [--delay-ms D] [--nudge-ms X] [--wait-ms W] [--rst]

Each connection prints one line
  RTRPROBE k=<k> rtr=<t> delay=<D> result=<direct|nudged|none> ms=<t>
and the last line is
  RTRPROBE RESULT n=<N> direct=<a> nudged=<b> none=<c>
A connection is closed with a FIN once done (a FIN makes siw read an RTR
still queued); --rst closes one that saw nothing with a reset instead,
which leaves siw's iw_cm id in CONN_RECV: on siw 6.1 that is the kernel
BUG at iwcm.c:969 (cm_close_handler), so only use it to show that.
"""
import argparse
import socket
import struct
import sys
import time

from mpa_wire import (KEY_REP, KEY_REQ, P2P_A, RTR_READ, RTR_WRITE,
                      fpdu_rest_len, recv_exact, zero_read_request,
                      zero_write)

MPA_S = 0x10


def mpa_request(rtr):
    ird = P2P_A | 1
    ord_ = (RTR_READ if rtr == "read" else RTR_WRITE) | 1
    pdata = struct.pack(">HH", ird, ord_) + b"rtr-probe\0"
    return KEY_REQ + struct.pack(">BBH", MPA_S, 2, len(pdata)) + pdata


def read_opcode(s, deadline):
    """Next FPDU's RDMAP opcode, or None on timeout / end of stream."""
    h = recv_exact(s, 2, deadline)
    if h is None:
        return None
    (ulen,) = struct.unpack(">H", h)
    rest = recv_exact(s, fpdu_rest_len(ulen), deadline)
    if rest is None or ulen < 2:
        return None
    return rest[1] & 0x0F


def one(host, port, rtr, delay_ms, nudge_ms, wait_ms, rst=False):
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(mpa_request(rtr))
    deadline = time.monotonic() + 10
    hdr = recv_exact(s, 20, deadline)
    if hdr is None or hdr[:16] != KEY_REP:
        s.close()
        return "no-reply", 0
    (pdlen,) = struct.unpack(">H", hdr[18:20])
    if hdr[16] & 0x20:
        s.close()
        return "rejected", 0
    recv_exact(s, pdlen, deadline)
    if delay_ms:
        time.sleep(delay_ms / 1000)
    t0 = time.monotonic()
    s.sendall(zero_read_request() if rtr == "read" else zero_write())
    # READ: the Read Response (2) and the application's Send (3); WRITE: the Send
    want = {2, 3} if rtr == "read" else {3}
    result = "none"
    nudged = False
    end = t0 + wait_ms / 1000
    while True:
        step = end
        if nudge_ms and not nudged:
            step = min(end, t0 + nudge_ms / 1000)
        op = read_opcode(s, step)
        if op is not None:
            want.discard(op)
            if not want:
                result = "nudged" if nudged else "direct"
                break
            continue
        if time.monotonic() >= end:
            break
        if nudge_ms and not nudged:
            s.sendall(zero_write())
            nudged = True
            continue
        break
    ms = int((time.monotonic() - t0) * 1000)
    if rst and result == "none":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        return result, ms
    s.shutdown(socket.SHUT_WR)
    recv_exact(s, 1 << 20, time.monotonic() + 1)  # drain until the peer closes
    s.close()
    return result, ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--rtr", choices=["read", "write"], default="read")
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--nudge-ms", type=float, default=0)
    ap.add_argument("--wait-ms", type=float, default=2000)
    ap.add_argument("--rst", action="store_true")
    a = ap.parse_args()
    count = {"direct": 0, "nudged": 0, "none": 0}
    for k in range(1, a.n + 1):
        r, ms = one(a.host, a.port, a.rtr, a.delay_ms, a.nudge_ms, a.wait_ms, a.rst)
        count[r] = count.get(r, 0) + 1
        print(f"RTRPROBE k={k} rtr={a.rtr} delay={a.delay_ms} result={r} ms={ms}",
              flush=True)
        time.sleep(0.05)
    print("RTRPROBE RESULT n=%d direct=%d nudged=%d none=%d"
          % (a.n, count["direct"], count["nudged"], count["none"]), flush=True)
    return 0 if count["none"] == 0 and count["direct"] + count["nudged"] == a.n else 1


if __name__ == "__main__":
    sys.exit(main())
