"""mpa_wire: the few MPA / DDP / RDMAP octets the interop probes write by
hand (rtr-probe.py, rtr-relay.py). CRC is never negotiated by them, so an
FPDU carries a zero CRC word (RFC 5044 4.4: present, not checked)."""
import socket
import struct
import time

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
F_MARKERS, F_CRC, F_REJECT, F_ENHANCED = 0x80, 0x40, 0x20, 0x10
P2P_A = 0x8000      # A in the IRD word: peer-to-peer
RTR_WRITE = 0x8000  # C in the ORD word
RTR_READ = 0x4000   # D in the ORD word


def recv_exact(s, n, deadline):
    """n octets from s before deadline (time.monotonic()), or None."""
    b = b""
    while len(b) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            c = s.recv(n - len(b))
        except socket.timeout:
            return None
        if not c:
            return None
        b += c
    return b


def fpdu(ulpdu):
    """MPA FPDU without CRC: length, ULPDU, pad to 4, a zero CRC word."""
    body = struct.pack(">H", len(ulpdu)) + ulpdu
    body += b"\0" * (-len(body) % 4)
    return body + b"\0\0\0\0"


def fpdu_rest_len(ulpdu_len):
    """Octets of an FPDU after its 2-octet length field."""
    return ulpdu_len + (-(2 + ulpdu_len) % 4) + 4


def zero_write(stag=1):
    """DDP tagged, last (0xC1); RDMAP RDMA Write (0x40); STag, TO 0."""
    return fpdu(struct.pack(">BBIQ", 0xC1, 0x40, stag, 0))


def zero_read_request(stag=1):
    """DDP untagged, last (0x41); RDMAP Read Request (0x41); reserved,
    QN 1, MSN 1, MO 0; sink STag / TO, size 0, source STag / TO."""
    hdr = struct.pack(">BBIIII", 0x41, 0x41, 0, 1, 1, 0)
    return fpdu(hdr + struct.pack(">IQIIQ", stag, 0, 0, stag, 0))
