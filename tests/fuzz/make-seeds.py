#!/usr/bin/env python3
"""Writes the seed corpora of wisp's fuzz targets into corpus/<target>/.

The seeds are written independently of wisp's C code (framing, markers and
CRC32c are re-implemented here from RFC 5044), so a seed that wisp's decoder
rejects points at a disagreement worth a look. Run from anywhere:
    python3 tests/fuzz/make-seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def fpdu_stream(ulpdus, crc, markers):
    """FPDUs for ulpdus, with markers every 512 octets of the stream."""
    out = bytearray()
    for u in ulpdus:
        start = len(out)
        pad = (4 - (2 + len(u)) % 4) % 4
        body = struct.pack(">H", len(u)) + u + bytes(pad)
        fpdu = bytearray()
        pos = start
        # A marker leading the FPDU carries 0; later ones point back at
        # the ULPDU_Length field (RFC 5044 4.2, 4.3).
        if markers and pos % 512 == 0:
            fpdu.extend(struct.pack(">HH", 0, 0))
            pos += 4
        len_pos = pos

        def emit(chunk):
            nonlocal pos
            for b in chunk:
                if markers and pos % 512 == 0:
                    fpdu.extend(struct.pack(">HH", 0, pos - len_pos))
                    pos += 4
                fpdu.append(b)
                pos += 1

        emit(body)
        if markers and pos % 512 == 0:
            fpdu.extend(struct.pack(">HH", 0, pos - len_pos))
            pos += 4
        value = crc32c(bytes(fpdu)) if crc else 0
        emit(struct.pack("<I", value))
        out.extend(fpdu)
    return bytes(out)


def mpa_frame(key, flags, rev, pdata, ird_ord=None):
    pd = b""
    if ird_ord is not None:
        pd = struct.pack(">HH", *ird_ord)
    pd += pdata
    return key + bytes([flags, rev]) + struct.pack(">H", len(pd)) + pd


def wisp_ext(max_ulpdu, version=1, extra=b""):
    """wisp's large-FPDU extension (docs/wire-formats.md): Max_ULPDU,
    reserved, Version, reserved, [later versions' fields], Ext_Length,
    the magic "WISP-EXT"."""
    head = struct.pack(">HHBB", max_ulpdu, 0, version, 0) + extra
    return head + struct.pack(">H", len(head) + 10) + b"WISP-EXT"


def tagged(op, last, stag, to):
    return bytes([0x80 | (0x40 if last else 0) | 1, 0x40 | op]) + \
        struct.pack(">IQ", stag, to)


def untagged(op, last, inv, qn, msn, mo):
    return bytes([(0x40 if last else 0) | 1, 0x40 | op]) + \
        struct.pack(">IIII", inv, qn, msn, mo)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    req, rep = b"MPA ID Req Frame", b"MPA ID Rep Frame"
    t = "fuzz_mpa_setup"
    write(t, "req-rev1", b"\x00" + mpa_frame(req, 0x00, 1, b""))
    write(t, "req-rev1-crc-pd", b"\x00" + mpa_frame(req, 0x40, 1, b"hello"))
    write(t, "req-rev2-p2p-rtr", b"\x00" +
          mpa_frame(req, 0x50, 2, b"ulp", (0x8000 | 16, 0xC000 | 16)))
    write(t, "rep-rev2-enh", b"\x01" +
          mpa_frame(rep, 0x10, 2, b"", (0x8000 | 128, 0x4000 | 128)))
    write(t, "rep-reject", b"\x01" + mpa_frame(rep, 0x20, 1, b"no thanks"))
    write(t, "req-markers-512pd", b"\x00" + mpa_frame(req, 0x80, 1, bytes(512)))
    write(t, "req-enh-short", b"\x00" + mpa_frame(req, 0x10, 2, b"\x01"))
    write(t, "bad-key", b"\x00" + b"GET / HTTP/1.1\r\n\r\n")

    # fuzz_mpa_negotiate: octet 0 is the local configuration (rev, CRC,
    # p2p, RTRs, preference, IRD/ORD; see the target); the rest a Request
    # or Reply, and private data of a wisp-to-wisp exchange.
    t = "fuzz_mpa_negotiate"
    write(t, "req-rev1-cfg1", b"\x01" + mpa_frame(req, 0x00, 1, b"abc"))
    write(t, "req-rev2-p2p-cfg86", b"\x86" +
          mpa_frame(req, 0x50, 2, b"ulp", (0x8000 | 16, 0xC000 | 16)))
    write(t, "req-rev2-send-only-cfg5c", b"\x5c" +
          mpa_frame(req, 0x10, 2, b"", (0xC000 | 1, 0)))
    write(t, "req-ird-3fff-cfgc4", b"\xc4" +
          mpa_frame(req, 0x10, 2, b"", (0x8000 | 0x3FFF, 0x4000 | 0x3FFF)))
    write(t, "req-markers-cfg0", b"\x00" + mpa_frame(req, 0x80, 2, b"",
                                                   (0, 0)))
    write(t, "req-enh-short-cfg2", b"\x02" + mpa_frame(req, 0x10, 2, b"\x01"))
    write(t, "rep-rev2-read-cfg84", b"\x84" +
          mpa_frame(rep, 0x10, 2, b"", (0x8000 | 16, 0x4000 | 16)))
    write(t, "rep-rev2-ord-high-cfg44", b"\x44" +
          mpa_frame(rep, 0x10, 2, b"", (0x8000 | 1, 0x8000 | 200)))
    write(t, "rep-reject-s-cfg4", b"\x04" + mpa_frame(rep, 0x30, 2, b"no"))
    write(t, "rep-rev1-cfg1", b"\x01" + mpa_frame(rep, 0x40, 1, b"ok"))
    write(t, "pdata-cfg2e", b"\x2e" + bytes(range(200)))
    # wisp's large-FPDU extension at the end of the private data: whole,
    # alone, a later version, truncated, garbled, in a Reply and a Reject,
    # and as the trailing private data of a wisp-to-wisp exchange.
    io = (0x8000 | 16, 0xC000 | 16)
    write(t, "req-ext-cfg86", b"\x86" +
          mpa_frame(req, 0x10, 2, b"ulp" + wisp_ext(65535), io))
    write(t, "req-ext-only-cfg0", b"\x00" +
          mpa_frame(req, 0x10, 2, wisp_ext(1454), (4, 4)))
    write(t, "req-ext-v2-cfg0", b"\x00" +
          mpa_frame(req, 0x10, 2, b"x" + wisp_ext(9000, 2, b"\xee" * 6),
                    (4, 4)))
    write(t, "req-ext-truncated-cfg0", b"\x00" +
          mpa_frame(req, 0x10, 2, b"ab" + wisp_ext(65535)[:-1], (4, 4)))
    write(t, "req-ext-badlen-cfg0", b"\x00" +
          mpa_frame(req, 0x10, 2, wisp_ext(65535)[:6] + b"\x01\x00" +
                    b"WISP-EXT", (4, 4)))
    write(t, "req-ext-v0-cfg1", b"\x01" +
          mpa_frame(req, 0x00, 1, b"r1" + wisp_ext(65535, 0)))
    write(t, "rep-ext-cfg84", b"\x84" +
          mpa_frame(rep, 0x10, 2, wisp_ext(65535), (0x8000 | 16, 0x4000 | 16)))
    write(t, "rep-ext-pd-cfg0", b"\x00" +
          mpa_frame(rep, 0x10, 2, b"ok" + wisp_ext(100), (4, 4)))
    write(t, "rep-reject-ext-cfg0", b"\x00" +
          mpa_frame(rep, 0x30, 2, b"no" + wisp_ext(65535), (4, 4)))
    write(t, "pdata-ext-cfg2e", b"\x2e" + b"app" + wisp_ext(65535))
    write(t, "pdata-ext-long-cfg2e", b"\x2e" + bytes(300) + wisp_ext(2048))

    t = "fuzz_mpa_fpdu"
    send = untagged(3, True, 0, 0, 1, 0) + bytes(24)
    rresp = tagged(2, True, 0x12345678, 0xABCD)
    big = bytes(range(256)) * 8
    for cfg, crc, markers in ((0, False, False), (1, True, False),
                              (2, False, True), (3, True, True)):
        stream = fpdu_stream([send, rresp, big[:1000], b"", big[:5]],
                             crc, markers)
        write(t, f"mixed-cfg{cfg}", bytes([cfg]) + b"\xff\xff" + stream)
    write(t, "limit-1454", bytes([1]) + struct.pack(">H", 1454) +
          fpdu_stream([big[:1454], big[:1455]], True, False))

    t = "fuzz_rdmap_hdr"
    view = bytes([3]) + struct.pack(">QQ", 0x1000, 1 << 32) + bytes(7)
    qview = bytes([3]) + struct.pack(">Q", 1) + bytes([1, 1]) + \
        struct.pack(">Q", 1 << 60) + bytes(2)
    write(t, "write", b"\x00" + view + tagged(0, True, 0x100, 0x1000) + b"x" * 64)
    write(t, "read-resp", b"\x00" + view + tagged(2, True, 0x12345678, 0xABCD))
    write(t, "send", b"\x00" + qview + untagged(3, True, 0, 0, 1, 0) + b"hi")
    write(t, "send-inv", b"\x00" + qview + untagged(4, True, 0x77, 0, 1, 0))
    write(t, "send-se", b"\x00" + qview + untagged(5, False, 0, 0, 1, 8) + b"z" * 9)
    write(t, "read-req", b"\x00" + qview + untagged(1, True, 0, 1, 1, 0) +
          struct.pack(">IQIIQ", 0x11, 0x2000, 4096, 0x22, 0x3000))
    term_ctrl = struct.pack(">I", (1 << 28) | (1 << 24) | (1 << 16) |
                            0x8000 | 0x4000)
    write(t, "terminate", b"\x01" + qview + untagged(7, True, 0, 2, 1, 0) +
          term_ctrl + struct.pack(">H", 14) + tagged(0, True, 5, 0))
    write(t, "bad-version", b"\x00" + view + bytes([0xC2, 0x80]) + bytes(12))

    # fuzz_qp_rx: whole streams into a QP with MRs 0x15a (TO 0x10000) and
    # 0x25a (TO 0x20000), 32 KiB each, and two receives posted.
    t = "fuzz_qp_rx"
    w = tagged(0, True, 0x15A, 0x10000 + 100) + bytes(range(200))
    snd = untagged(3, False, 0, 0, 1, 0) + b"a" * 900
    snd2 = untagged(3, True, 0, 0, 1, 900) + b"b" * 300
    rr = untagged(1, True, 0, 1, 1, 0) + \
        struct.pack(">IQIIQ", 0x99, 0x5000, 3000, 0x25A, 0x20000)
    inv = untagged(6, True, 0x15A, 0, 2, 0) + b"c" * 10
    term = untagged(7, True, 0, 2, 1, 0) + \
        struct.pack(">I", (1 << 28) | (1 << 24) | 0x8000 | 0x4000) + \
        struct.pack(">H", 14) + tagged(0, True, 5, 0)
    for crc in (0, 1):
        for cfg in (crc, crc | 2, crc | 4, crc | 8):
            write(t, f"mixed-cfg{cfg}", bytes([cfg]) +
                  fpdu_stream([w, snd, snd2, rr, inv], crc, False))
        write(t, f"terminate-crc{crc}", bytes([crc]) +
              fpdu_stream([w, term], crc, False))
        write(t, f"write-oob-crc{crc}", bytes([crc]) + fpdu_stream(
            [tagged(0, True, 0x15A, 0x10000 + 32700) + bytes(200)], crc,
            False))
        # Large payloads, read straight into the MR (DIRECT_MIN is
        # 8 KiB): a WRITE of 20,000 octets in one FPDU, a short one
        # that ends it, then a small SEND; in chunks of 512 (direct
        # reads that stop short) and of 1 MiB (whole, with the tail).
        big = tagged(0, False, 0x15A, 0x10000 + 8) + \
            bytes(i * 7 & 0xFF for i in range(20000))
        tail = tagged(0, True, 0x15A, 0x10000 + 20008) + b"t" * 600
        for cfg in (crc | 8, crc | 12):
            write(t, f"write-direct-cfg{cfg}", bytes([cfg]) +
                  fpdu_stream([big, tail, snd, big], crc, False))
        # A WRITE cut into segments that do not end it, as one-segment
        # FPDUs at MTU 1500 are (smaller, to fit MULPDU 1024): staged
        # tagged payloads followed by more of the same message, up to
        # the MR's end.
        segs = [tagged(0, k == 3, 0x15A,
                       0x10000 + 32 * 1024 - 4000 + 1000 * k) +
                bytes((k * 7 + i) & 0xFF for i in range(1000))
                for k in range(4)]
        for cfg in (crc, crc | 8):
            write(t, f"write-segments-cfg{cfg}", bytes([cfg]) +
                  fpdu_stream(segs, crc, False))
        # One WRITE longer than 64 KiB (RX_NT_AFTER: from there its
        # staged payload is streamed into the MR) in segments of 1,003
        # octets, the TO going back to the MR's start every 30 segments
        # (the MR is 32 KiB; only bounds are checked); once ending in
        # place, once with a segment past the MR's end after 64 KiB.
        def long_write(n, oob_at):
            out = []
            for k in range(n):
                to = 0x10000 + 1 + 1003 * (k % 30)
                if k == oob_at:
                    to = 0x10000 + 32 * 1024 - 500
                out.append(tagged(0, k == n - 1, 0x15A, to) +
                           bytes((k * 13 + i) & 0xFF for i in range(1003)))
            return out
        for cfg in (crc | 8, crc | 12):
            write(t, f"write-long-cfg{cfg}", bytes([cfg]) +
                  fpdu_stream(long_write(80, -1) + [snd], crc, False))
        write(t, f"write-long-oob-crc{crc}", bytes([crc | 12]) +
              fpdu_stream(long_write(80, 70), crc, False))
        # Small whole Sends, as a ping-pong receives them: into the
        # one-SGE receives (rx_send_small's one pass) or the three-SGE
        # ones (the general path), in chunks of 512 and 1 MiB; the
        # third finds no receive (a Terminate).
        small = [untagged(3, True, 0, 0, 1, 0) + b"s" * 8,
                 untagged(5, True, 0, 0, 2, 0) + b"e" * 13,
                 untagged(3, True, 0, 0, 3, 0) + b"n" * 8]
        for cfg in (crc | 8, crc | 10, crc | 12):
            write(t, f"send-small-cfg{cfg}", bytes([cfg]) +
                  fpdu_stream(small, crc, False))

    # fuzz_tls_open: scripts of operations (fuzz_tls_open.c says what
    # each octet means); the target seals the records itself with its
    # fixed keys, so each seed is a stream of valid sealed records.
    t = "fuzz_tls_open"

    def seal(ctype, data, pad=0):
        return struct.pack(">BBHH", 0, ctype, pad, len(data)) + data

    def appdata(n, fill):
        return struct.pack(">BHB", 1, n, fill)

    def keyupd(req):
        return bytes([2, req])

    for cfg, seq in ((0x00, 0), (0x01, 7), (0x2A, 255)):
        write(t, f"appdata-cfg{cfg:x}", bytes([cfg, seq]) +
              appdata(100, 1) + appdata(16384, 2) + appdata(1, 3) +
              seal(23, b"hello", 10))
        write(t, f"keyupdate-cfg{cfg:x}", bytes([cfg, seq]) +
              appdata(30, 4) + keyupd(0) + appdata(30, 5) + keyupd(1) +
              appdata(3000, 6) + seal(21, b"\x01\x00"))
    # Full records, more than the opener's buffer holds at once (it moves
    # the record it has part of to the front).
    write(t, "bulk", b"\x10\x00" +
          b"".join(appdata(16384, k) for k in range(6)) +
          seal(21, b"\x01\x00"))
    write(t, "alerts", b"\x04\x00" + seal(21, b"\x01\x5a") +
          appdata(10, 7) + seal(21, b"\x02\x28"))
    write(t, "padding-overflow", b"\x06\x03" + appdata(10, 8) +
          seal(23, b"x" * 20, 16365) + seal(23, b"y" * 20, 16366))
    write(t, "bad-inner", b"\x08\x00" + appdata(10, 9) + seal(0, b"", 5))
    write(t, "bad-keyupdate", b"\x0a\x00" + appdata(10, 9) +
          seal(22, b"\x18\x00\x00\x01\x02"))
    write(t, "flip-cut", b"\x0c\x00" + appdata(500, 1) + appdata(500, 2) +
          struct.pack(">BHB", 3, 600, 0x40) + appdata(20, 3) +
          struct.pack(">BH", 4, 1500))


if __name__ == "__main__":
    main()
