#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A TCP relay that resets one connection in the middle of its data.

    rst-relay.py LISTEN_PORT TARGET_PORT RESET_INDEX RESET_AFTER [ADDR]

Accepts on ADDR:LISTEN_PORT (default 127.0.0.1), connects each accepted
connection to ADDR:TARGET_PORT and copies bytes both ways. The
RESET_INDEX-th connection (from 1) is cut once RESET_AFTER octets went
through it: both sockets get SO_LINGER {on, 0} and are closed, so each
end receives a TCP RST (not a FIN). Prints "listening" once it listens
and "reset" when it reset. Every other connection is relayed faithfully
until either end closes. Runs until killed.
"""
import selectors
import socket
import struct
import sys
import threading


def rst_close(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def relay(a, b, reset_after):
    """Copy a <-> b; reset both after reset_after octets (None: never)."""
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    moved = 0
    try:
        while True:
            for key, _ in sel.select():
                src, dst = key.fileobj, key.data
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    # An orderly end: pass the half-close on, finish
                    # when both directions ended.
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    sel.unregister(src)
                    if not sel.get_map():
                        a.close()
                        b.close()
                        return
                    continue
                dst.sendall(data)
                moved += len(data)
                if reset_after is not None and moved >= reset_after:
                    rst_close(a)
                    rst_close(b)
                    print("reset after %d octets" % moved, flush=True)
                    return
    except OSError:
        a.close()
        b.close()


def main():
    lport, tport, index, after = (int(x) for x in sys.argv[1:5])
    addr = sys.argv[5] if len(sys.argv) > 5 else "127.0.0.1"
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, lport))
    ls.listen(64)
    print("listening", flush=True)
    n = 0
    while True:
        a, _ = ls.accept()
        n += 1
        try:
            b = socket.create_connection((addr, tport))
        except OSError:
            rst_close(a)
            continue
        for s in (a, b):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = threading.Thread(target=relay, daemon=True,
                             args=(a, b, after if n == index else None))
        t.start()


if __name__ == "__main__":
    main()
