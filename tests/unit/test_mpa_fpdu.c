/* SPDX-License-Identifier: MIT */
/*
 * FPDU framing and the incremental decoder: RFC 5044 figure 5 and 6 byte
 * for byte, the siw Read Response, pad rules, any chunking down to one
 * octet, zero-copy placement, and tampering.
 */
#include <errno.h>

#include "mpa.h"
#include "test_util.h"

#define MAXWIRE (MPA_ULPDU_SEND_MAX + 1024)

/* ---- helpers ------------------------------------------------------------ */

struct collected {
	size_t count;
	size_t lens[256];
	uint8_t *bufs[256];
};

static void collected_free(struct collected *c)
{
	for (size_t i = 0; i < c->count; i++)
		free(c->bufs[i]);
}

/*
 * Decode stream[0..len) fed in chunks of `chunk` octets (0: random sizes
 * from seed). Returns 0, or -EPROTO when the decoder reported a fault.
 */
static int decode_stream(struct mpa_rx *rx, const uint8_t *stream, size_t len,
			 size_t chunk, uint32_t seed, struct collected *out)
{
	uint8_t *cur = malloc(MPA_ULPDU_MAX);
	size_t off = 0;
	uint32_t x = seed | 1;

	cr_assert_not_null(cur);
	out->count = 0;
	while (off < len) {
		size_t n = chunk;

		if (!n) {
			x ^= x << 13; x ^= x >> 17; x ^= x << 5;
			n = 1 + x % 700;
		}
		if (n > len - off)
			n = len - off;
		/* Exactly-sized copy: reading past the chunk trips ASan. */
		uint8_t *piece = exact_copy(stream + off, n);
		size_t used = 0;

		while (used < n) {
			size_t ulen;
			bool done;
			long r = mpa_rx_collect(rx, piece + used, n - used, cur,
						MPA_ULPDU_MAX, &ulen, &done);

			if (r < 0) {
				free(piece);
				free(cur);
				return (int)r;
			}
			cr_assert_gt(r, 0, "decoder made no progress");
			used += (size_t)r;
			if (done) {
				cr_assert_lt(out->count, 256);
				out->lens[out->count] = ulen;
				out->bufs[out->count] = exact_copy(cur, ulen);
				out->count++;
			}
		}
		free(piece);
		off += n;
	}
	free(cur);
	return 0;
}

/* Append one FPDU for ulpdu to the stream. */
static size_t put_fpdu(struct mpa_tx *tx, uint8_t *stream, size_t at,
		       const uint8_t *ulpdu, size_t len)
{
	int n = mpa_fpdu_encode(tx, ulpdu, len, stream + at, MAXWIRE);

	cr_assert_gt(n, 0, "encode of %zu octets failed: %d", len, n);
	return at + (size_t)n;
}

/* The 42-octet ULPDU of RFC 5044 figures 5 and 6 (Send, L, QN 0). */
static void rfc5044_ulpdu(uint8_t ulpdu[42], uint8_t msn)
{
	memset(ulpdu, 0, 42);
	ulpdu[0] = 0x41;
	ulpdu[1] = 0x43;
	ulpdu[13] = msn;
}

/* ---- safety ------------------------------------------------------------- */

Test(mpa_fpdu, null_arguments)
{
	struct mpa_rx rx;
	struct mpa_rx_event ev;
	struct mpa_tx tx;
	uint8_t buf[64];

	mpa_rx_init(&rx, true, false, 1000);
	mpa_tx_init(&tx, true, false);
	cr_assert_eq(mpa_rx_feed(NULL, buf, 1, &ev), -EINVAL);
	cr_assert_eq(mpa_rx_feed(&rx, NULL, 1, &ev), -EINVAL);
	cr_assert_eq(mpa_rx_feed(&rx, buf, 1, NULL), -EINVAL);
	cr_assert_eq(mpa_rx_feed(&rx, NULL, 0, &ev), 0);
	cr_assert_eq(ev.type, MPA_RX_EV_NONE);
	cr_assert_eq(mpa_fpdu_encode(NULL, buf, 1, buf, 64), -EINVAL);
	cr_assert_eq(mpa_fpdu_encode(&tx, NULL, 1, buf, 64), -EINVAL);
	cr_assert_eq(mpa_fpdu_encode(&tx, buf, 1, NULL, 64), -EINVAL);
	cr_assert_eq(mpa_rx_contig(NULL), 0);
}

Test(mpa_fpdu, too_long_and_no_room)
{
	static uint8_t big[MPA_ULPDU_SEND_MAX + 1];
	uint8_t buf[64];
	struct mpa_tx tx;

	mpa_tx_init(&tx, false, false);
	cr_assert_eq(mpa_fpdu_encode(&tx, big, sizeof(big), buf, sizeof(buf)),
		     -EMSGSIZE);
	/* 10 octets need 2 + 10 + 0 + 4 = 16 on the wire. */
	cr_assert_eq(mpa_fpdu_encode(&tx, big, 10, buf, 15), -ENOSPC);
	cr_assert_eq(tx.stream_off, 0, "failed encode must not advance");
	cr_assert_eq(mpa_fpdu_encode(&tx, big, 10, buf, 16), 16);
	cr_assert_eq(tx.stream_off, 16);
}

Test(mpa_fpdu, frame_reports_short_iovec_array)
{
	uint8_t a[MPA_FPDU_FLAT_MAX + 100] = { 0 };
	struct iovec in = { a, sizeof(a) };
	struct iovec out[2];
	struct mpa_fpdu_scratch scr;
	struct mpa_tx tx;

	mpa_tx_init(&tx, true, false);
	/* Too large to go flat: len + data + CRC need three iovecs. */
	cr_assert_eq(mpa_fpdu_frame(&tx, &in, 1, &scr, out, 2), -ENOSPC);
	cr_assert_eq(tx.stream_off, 0);
}

/* The FPDU for data[0..len), built here octet by octet (RFC 5044 4):
 * ULPDU_Length big-endian, the ULPDU, zero pad to a multiple of 4, the
 * CRC32c of all that least significant octet first (0 without CRC). */
static size_t reference_fpdu(const uint8_t *data, size_t len, bool crc,
			     uint8_t *out)
{
	size_t n = 0;
	uint32_t c;

	out[n++] = (uint8_t)(len >> 8);
	out[n++] = (uint8_t)len;
	memcpy(out + n, data, len);
	n += len;
	while (n % 4)
		out[n++] = 0;
	c = crc ? mpa_crc32c(out, n) : 0;
	for (int i = 0; i < 4; i++)
		out[n++] = (uint8_t)(c >> (8 * i));
	return n;
}

Test(mpa_fpdu, small_fpdu_is_one_iovec_with_the_same_octets)
{
	static uint8_t data[MPA_FPDU_FLAT_MAX + 40];
	static uint8_t want[MPA_FPDU_FLAT_MAX + 64], got[MPA_FPDU_FLAT_MAX + 64];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 3);
	for (int crc = 0; crc < 2; crc++) {
		for (size_t len = 0; len < sizeof(data); len++) {
			/* Up to three pieces, as header + SGEs come. */
			size_t a = len / 3, b = len / 2;
			struct iovec in[3] = {
				{ data, a }, { data + a, b - a },
				{ data + b, len - b },
			};
			struct iovec out[8];
			struct mpa_fpdu_scratch scr;
			struct mpa_tx tx;
			size_t wlen = reference_fpdu(data, len, crc, want);
			size_t glen = 0;
			int n;

			mpa_tx_init(&tx, crc, false);
			tx.stream_off = 1000;
			n = mpa_fpdu_frame(&tx, in, 3, &scr, out, 8);
			cr_assert_gt(n, 0);
			cr_assert_eq(n == 1, wlen <= MPA_FPDU_FLAT_MAX,
				     "%zu octets: %d iovecs", len, n);
			for (int i = 0; i < n; i++) {
				memcpy(got + glen, out[i].iov_base,
				       out[i].iov_len);
				glen += out[i].iov_len;
			}
			cr_assert_eq(glen, wlen, "%zu octets", len);
			cr_assert_arr_eq(got, want, wlen, "%zu octets, crc %d",
					 len, crc);
			cr_assert_eq(tx.stream_off, 1000 + wlen);
		}
	}
}

/* mpa_fpdu_copy: the reference octets, written whole into the caller's
 * buffer and not one octet past them, for every pad and sizes up to a
 * one-segment FPDU at MTU 1500 and beyond, from up to three pieces; no
 * room, markers and too long are refused with the buffer and the stream
 * offset untouched. */
Test(mpa_fpdu, copy_frames_the_same_octets_into_the_buffer)
{
	static uint8_t data[MPA_ULPDU_SEND_MAX + 1];
	static uint8_t want[2100], got[2100 + 16];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13 + 5);
	for (int crc = 0; crc < 2; crc++) {
		for (size_t len = 0; len <= 2048; len += len < 40 ? 1 : 61) {
			size_t a = len / 3, b = len / 2;
			struct iovec in[3] = {
				{ data, a }, { data + a, b - a },
				{ data + b, len - b },
			};
			struct mpa_tx tx;
			size_t wlen = reference_fpdu(data, len, crc, want);

			mpa_tx_init(&tx, crc, false);
			tx.stream_off = 77;
			memset(got, 0xa5, sizeof(got));
			cr_assert_eq(mpa_fpdu_copy(&tx, in, 3, got, wlen - 1),
				     -ENOSPC, "%zu octets, one short", len);
			cr_assert_eq(tx.stream_off, 77);
			cr_assert_eq(got[0], 0xa5, "nothing written");
			cr_assert_eq(mpa_fpdu_copy(&tx, in, 3, got, wlen + 16),
				     (int)wlen, "%zu octets", len);
			cr_assert_arr_eq(got, want, wlen, "%zu octets, crc %d",
					 len, crc);
			for (size_t i = wlen; i < wlen + 16; i++)
				cr_assert_eq(got[i], 0xa5, "octet %zu past the "
					     "FPDU of %zu written", i, len);
			cr_assert_eq(tx.stream_off, 77 + wlen);
		}
	}
	{
		struct iovec in = { data, 8 }, big = { data, sizeof(data) };
		struct mpa_tx tx;

		mpa_tx_init(&tx, true, true);
		cr_assert_eq(mpa_fpdu_copy(&tx, &in, 1, got, sizeof(got)),
			     -EINVAL, "no copies with markers");
		mpa_tx_init(&tx, true, false);
		cr_assert_eq(mpa_fpdu_copy(&tx, &big, 1, data, sizeof(data)),
			     -EMSGSIZE);
		cr_assert_eq(mpa_fpdu_copy(NULL, &in, 1, got, sizeof(got)),
			     -EINVAL);
		cr_assert_eq(tx.stream_off, 0);
	}
}

Test(mpa_fpdu, flat_fpdu_is_a_copy_and_markers_never_go_flat)
{
	uint8_t data[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint8_t want[32];
	struct iovec in = { data, sizeof(data) };
	struct iovec out[8];
	struct mpa_fpdu_scratch scr;
	struct mpa_tx tx;
	size_t wlen = reference_fpdu(data, sizeof(data), true, want);

	mpa_tx_init(&tx, true, false);
	cr_assert_eq(mpa_fpdu_frame(&tx, &in, 1, &scr, out, 8), 1);
	/* The ULPDU was read when framed: changing it now changes nothing
	 * that goes out. */
	memset(data, 0xee, sizeof(data));
	cr_assert_eq(out[0].iov_len, wlen);
	cr_assert_arr_eq(out[0].iov_base, want, wlen);

	/* With markers the layout stays gathered (marker, length, data,
	 * CRC at least), whatever the size. */
	mpa_tx_init(&tx, true, true);
	cr_assert_geq(mpa_fpdu_frame(&tx, &in, 1, &scr, out, 8), 4);
}

/* ---- known answers ------------------------------------------------------ */

Test(mpa_fpdu, rfc5044_figure5_first_fpdu_with_marker)
{
	uint8_t want[52] = { 0 };
	uint8_t ulpdu[42], wire[64];
	struct mpa_tx tx;

	/* Figure 5: marker 00 00 00 00, length 00 2a, the ULPDU, CRC. */
	want[5] = 0x2a;
	want[6] = 0x41;
	want[7] = 0x43;
	want[19] = 0x01;
	want[48] = 0x52; want[49] = 0x23; want[50] = 0x99; want[51] = 0x83;

	rfc5044_ulpdu(ulpdu, 1);
	mpa_tx_init(&tx, true, true);
	cr_assert_eq(mpa_fpdu_wire_len(&tx, 42), 52);
	cr_assert_eq(mpa_fpdu_encode(&tx, ulpdu, 42, wire, sizeof(wire)), 52);
	cr_assert_arr_eq(wire, want, 52);
	cr_log_info("RFC 5044 figure 5 (leading marker, CRC 52 23 99 83) matched");
}

Test(mpa_fpdu, rfc5044_figure6_marker_inside_fpdu)
{
	/* Figure 6: the second FPDU of a stream whose first FPDU took 492
	 * octets (leading marker + 2 + 482 + 4). It starts at 0x1ec; the
	 * marker at 0x200 points 0x14 back. */
	static uint8_t stream[1024];
	uint8_t first[482], ulpdu[42], want[52] = { 0 };
	struct mpa_tx tx;
	size_t end;

	want[1] = 0x2a;
	want[2] = 0x41;
	want[3] = 0x43;
	want[15] = 0x02;                    /* MSN 2 */
	want[23] = 0x14;                    /* marker at 0x200: FPDUPTR */
	want[48] = 0x84; want[49] = 0x92; want[50] = 0x58; want[51] = 0x98;

	fill_pattern(first, sizeof(first), 11);
	rfc5044_ulpdu(ulpdu, 2);
	mpa_tx_init(&tx, true, true);
	end = put_fpdu(&tx, stream, 0, first, sizeof(first));
	cr_assert_eq(end, 0x1ec);
	end = put_fpdu(&tx, stream, end, ulpdu, sizeof(ulpdu));
	cr_assert_eq(end, 0x220);
	cr_assert_arr_eq(stream + 0x1ec, want, 52);
	cr_log_info("RFC 5044 figure 6 (marker at 0x200, CRC 84 92 58 98) matched");

	/* And the decoder takes both back, checking CRC and markers. */
	struct mpa_rx rx;
	struct collected got;

	mpa_rx_init(&rx, true, true, 1454);
	cr_assert_eq(decode_stream(&rx, stream, end, 1, 0, &got), 0);
	cr_assert_eq(got.count, 2);
	cr_assert_eq(got.lens[0], sizeof(first));
	cr_assert_arr_eq(got.bufs[0], first, sizeof(first));
	cr_assert_eq(got.lens[1], 42);
	cr_assert_arr_eq(got.bufs[1], ulpdu, 42);
	collected_free(&got);
}

Test(mpa_fpdu, siw_read_response_with_crc)
{
	static const uint8_t ulpdu[14] = {
		0xc1, 0x42, 0x12, 0x34, 0x56, 0x78,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
	};
	static const uint8_t want[20] = {
		0x00, 0x0e, 0xc1, 0x42, 0x12, 0x34, 0x56, 0x78,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
		0x43, 0x00, 0x96, 0xa6,
	};
	uint8_t wire[32];
	struct mpa_tx tx;

	mpa_tx_init(&tx, true, false);
	cr_assert_eq(mpa_fpdu_encode(&tx, ulpdu, sizeof(ulpdu), wire,
				     sizeof(wire)), 20);
	cr_assert_arr_eq(wire, want, 20);
	cr_log_info("siw Read Response FPDU (CRC 43 00 96 a6) matched");
}

Test(mpa_fpdu, without_crc_the_field_is_zero_and_unchecked)
{
	/* 5-octet ULPDU: 2 + 5 = 7, one pad octet, CRC field present. */
	static const uint8_t want[12] = {
		0x00, 0x05, 'h', 'e', 'l', 'l', 'o', 0x00, 0, 0, 0, 0,
	};
	uint8_t wire[16];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct collected got;

	mpa_tx_init(&tx, false, false);
	cr_assert_eq(mpa_fpdu_encode(&tx, "hello", 5, wire, sizeof(wire)), 12);
	cr_assert_arr_eq(wire, want, 12);

	/* RFC 5044 4.1: without CRC the field "may contain any value, and
	 * MUST NOT be checked"; pad is ignored on receive too. */
	wire[7] = 0x5a;
	wire[8] = 0xde; wire[9] = 0xad; wire[10] = 0xbe; wire[11] = 0xef;
	mpa_rx_init(&rx, false, false, 1000);
	cr_assert_eq(decode_stream(&rx, wire, 12, 1, 0, &got), 0);
	cr_assert_eq(got.count, 1);
	cr_assert_arr_eq(got.bufs[0], "hello", 5);
	collected_free(&got);
}

Test(mpa_fpdu, pad_makes_multiple_of_four)
{
	for (uint32_t len = 0; len < 64; len++) {
		struct mpa_tx tx;

		mpa_tx_init(&tx, true, false);
		cr_assert_eq((2 + len + mpa_pad_len(len)) % 4, 0);
		cr_assert_lt(mpa_pad_len(len), 4);
		cr_assert_eq(mpa_fpdu_wire_len(&tx, len),
			     2 + len + mpa_pad_len(len) + 4);
	}
	cr_assert_eq(mpa_pad_len(0), 2);
	cr_assert_eq(mpa_pad_len(2), 0);
	cr_assert_eq(mpa_pad_len(3), 3);
}

Test(mpa_fpdu, zero_length_ulpdu_is_one_fpdu_event)
{
	uint8_t wire[16];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct mpa_rx_event ev;

	mpa_tx_init(&tx, true, false);
	cr_assert_eq(mpa_fpdu_encode(&tx, NULL, 0, wire, sizeof(wire)), 8);
	mpa_rx_init(&rx, true, false, 100);
	cr_assert_eq(mpa_rx_feed(&rx, wire, 8, &ev), 8);
	cr_assert_eq(ev.type, MPA_RX_EV_FPDU);
	cr_assert_eq(ev.ulpdu_len, 0);
}

/* ---- markers -------------------------------------------------------------- */

Test(mpa_fpdu, markers_every_512_octets_point_home)
{
	static uint8_t stream[4 * MAXWIRE];
	uint8_t ulpdu[3000];
	size_t sizes[] = { 1, 506, 507, 508, 509, 1000, 3000, 0, 17 };
	size_t at = 0, starts[16];
	struct mpa_tx tx;
	size_t i = 0;

	fill_pattern(ulpdu, sizeof(ulpdu), 5);
	mpa_tx_init(&tx, false, true);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		starts[i] = at;
		at = put_fpdu(&tx, stream, at, ulpdu, sizes[i]);
		cr_assert_eq(at % 4, 0, "FPDUs keep 4-octet alignment");
	}
	starts[i] = at;
	/* Walk every marker: 0 if it leads an FPDU, else the distance back
	 * to the ULPDU_Length field of the FPDU containing it, which sits 4
	 * octets later when that FPDU itself began with a marker. */
	for (size_t m = 0; m < at; m += 512) {
		uint16_t ptr = (uint16_t)(stream[m + 2] << 8 | stream[m + 3]);
		size_t f = 0, len_field;

		cr_assert_eq(stream[m], 0);
		cr_assert_eq(stream[m + 1], 0);
		while (starts[f + 1] <= m)
			f++;
		len_field = starts[f] + (starts[f] % 512 == 0 ? 4 : 0);
		cr_assert_eq(ptr, m == starts[f] ? 0 : m - len_field,
			     "marker at %zu", m);
	}
}

Test(mpa_fpdu, marker_after_a_leading_marker_points_at_length_field)
{
	/* RFC 5044 4.2: FPDUPTR counts "from the beginning of the ULPDU
	 * Length field to the first octet of the entire Marker". The first
	 * FPDU starts with the 0x0000 marker, so its length field is at 4
	 * and the marker at 512 carries 508 (0x01fc). */
	uint8_t ulpdu[600], wire[700];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct collected got;
	int n;

	fill_pattern(ulpdu, sizeof(ulpdu), 21);
	mpa_tx_init(&tx, true, true);
	n = mpa_fpdu_encode(&tx, ulpdu, sizeof(ulpdu), wire, sizeof(wire));
	cr_assert_eq(n, 4 + 2 + 600 + 2 + 4 + 4);
	cr_assert_eq(wire[3], 0x00);
	cr_assert_eq(wire[512], 0x00);
	cr_assert_eq(wire[513], 0x00);
	cr_assert_eq(wire[514], 0x01);
	cr_assert_eq(wire[515], 0xfc);
	mpa_rx_init(&rx, true, true, MPA_ULPDU_MAX);
	cr_assert_eq(decode_stream(&rx, wire, (size_t)n, 1, 0, &got), 0);
	cr_assert_eq(got.count, 1);
	cr_assert_arr_eq(got.bufs[0], ulpdu, sizeof(ulpdu));
	collected_free(&got);
	/* A receiver that measured from the leading marker (512) must fail. */
	wire[515] = 0x00;
	wire[514] = 0x02;
	mpa_rx_init(&rx, false, true, MPA_ULPDU_MAX);
	cr_assert_eq(decode_stream(&rx, wire, (size_t)n, 7, 0, &got), -EPROTO);
	cr_assert_eq(rx.error, MPA_ERR_MARKER);
	collected_free(&got);
}

/* ---- round trips and chunking ---------------------------------------------- */

static size_t build_mixed_stream(struct mpa_tx *tx, uint8_t *stream,
				 uint8_t *ulpdus, const size_t *sizes, size_t n)
{
	size_t at = 0, off = 0;

	for (size_t i = 0; i < n; i++) {
		at = put_fpdu(tx, stream, at, ulpdus + off, sizes[i]);
		off += sizes[i];
	}
	return at;
}

Test(mpa_fpdu, round_trip_any_chunking_crc_x_markers)
{
	static const size_t sizes[] = {
		0, 1, 2, 3, 4, 5, 14, 18, 46, 507, 508, 509, 1024, 1453, 1454,
		4096, 9000, 64768, 7,
	};
	const size_t n = sizeof(sizes) / sizeof(sizes[0]);
	const size_t chunks[] = { 1, 2, 3, 5, 7, 64, 511, 512, 513, 4096, 0,
				  SIZE_MAX };
	size_t total = 0, runs = 0;
	uint8_t *ulpdus, *stream;

	for (size_t i = 0; i < n; i++)
		total += sizes[i];
	ulpdus = malloc(total);
	stream = malloc(total + n * 16 + total / 100 + 1024);
	cr_assert(ulpdus && stream);
	fill_pattern(ulpdus, total, 99);

	for (int cfg = 0; cfg < 4; cfg++) {
		bool crc = cfg & 1, markers = cfg & 2;
		struct mpa_tx tx;
		size_t len;

		mpa_tx_init(&tx, crc, markers);
		len = build_mixed_stream(&tx, stream, ulpdus, sizes, n);
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			struct mpa_rx rx;
			struct collected got;
			size_t off = 0;

			mpa_rx_init(&rx, crc, markers, MPA_ULPDU_MAX);
			cr_assert_eq(decode_stream(&rx, stream, len, chunks[c],
						   (uint32_t)(c + 1), &got), 0,
				     "crc=%d markers=%d chunk=%zu: %s", crc,
				     markers, chunks[c], mpa_error_str(rx.error));
			cr_assert_eq(got.count, n);
			for (size_t i = 0; i < n; i++) {
				cr_assert_eq(got.lens[i], sizes[i]);
				cr_assert_arr_eq(got.bufs[i], ulpdus + off,
						 sizes[i]);
				off += sizes[i];
			}
			cr_assert_eq(rx.stream_off, tx.stream_off);
			collected_free(&got);
			runs++;
		}
	}
	cr_log_info("%zu decode runs of %zu FPDUs each", runs, n);
	free(ulpdus);
	free(stream);
}

Test(mpa_fpdu, zero_copy_placement_with_contig)
{
	/* Receive framing through the decoder, but ULPDU octets straight
	 * into their destination, as the engine does with recv(). */
	static uint8_t stream[3 * MAXWIRE];
	uint8_t src[20000], dst[20000];
	struct mpa_tx tx;
	struct mpa_rx rx;
	size_t len, off = 0, placed = 0;
	int fpdus = 0;

	fill_pattern(src, sizeof(src), 1234);
	memset(dst, 0, sizeof(dst));
	mpa_tx_init(&tx, true, true);
	len = put_fpdu(&tx, stream, 0, src, 9000);
	len = put_fpdu(&tx, stream, len, src + 9000, 11000);
	mpa_rx_init(&rx, true, true, MPA_ULPDU_MAX);

	while (off < len) {
		struct mpa_rx_event ev;
		size_t want = mpa_rx_contig(&rx);
		long r;

		if (want) {
			/* "recv" straight into the destination. */
			memcpy(dst + placed, stream + off, want);
			r = mpa_rx_feed(&rx, dst + placed, want, &ev);
			cr_assert_eq(r, (long)want);
			cr_assert_eq(ev.type, MPA_RX_EV_DATA);
			cr_assert_eq(ev.data, dst + placed);
			placed += want;
			off += want;
			continue;
		}
		/* Framing octets: one at a time, as a worst case. */
		r = mpa_rx_feed(&rx, stream + off, 1, &ev);
		cr_assert_eq(r, 1);
		cr_assert_neq(ev.type, MPA_RX_EV_DATA);
		fpdus += ev.type == MPA_RX_EV_FPDU;
		off += 1;
	}
	cr_assert_eq(fpdus, 2);
	cr_assert_eq(placed, sizeof(src));
	cr_assert_arr_eq(dst, src, sizeof(src));
}

Test(mpa_fpdu, ulpdu_done_and_error_accessors)
{
	uint8_t ulpdu[20], wire[64];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct mpa_rx_event ev;
	int len;

	fill_pattern(ulpdu, sizeof(ulpdu), 5);
	mpa_tx_init(&tx, true, false);
	len = mpa_fpdu_encode(&tx, ulpdu, sizeof(ulpdu), wire, sizeof(wire));
	cr_assert_gt(len, 0);
	mpa_rx_init(&rx, true, false, MPA_ULPDU_MAX);
	cr_assert_eq(mpa_rx_ulpdu_done(&rx), 0);
	/* length field and the first 5 ULPDU octets */
	cr_assert_eq(mpa_rx_feed(&rx, wire, 2, &ev), 2);
	cr_assert_eq(mpa_rx_feed(&rx, wire + 2, 5, &ev), 5);
	cr_assert_eq(ev.type, MPA_RX_EV_DATA);
	cr_assert_eq(mpa_rx_ulpdu_done(&rx), 5);
	cr_assert_eq(mpa_rx_contig(&rx), sizeof(ulpdu) - 5);
	cr_assert_eq(mpa_rx_error(&rx), MPA_ERR_NONE);
	/* the rest with a CRC bit flipped */
	wire[len - 1] ^= 1;
	cr_assert_eq(mpa_rx_feed(&rx, wire + 7, (size_t)len - 7, &ev), 15);
	cr_assert_eq(mpa_rx_ulpdu_done(&rx), sizeof(ulpdu));
	cr_assert_eq(mpa_rx_feed(&rx, wire + 22, (size_t)len - 22, &ev),
		     -EPROTO);
	cr_assert_eq(mpa_rx_error(&rx), MPA_ERR_CRC);
	cr_assert_eq(mpa_rx_ulpdu_done(NULL), 0);
	cr_assert_eq(mpa_rx_error(NULL), MPA_ERR_NONE);
}

Test(mpa_fpdu, whole_fpdus_in_one_buffer_come_out_in_one_run_each)
{
	uint8_t ulpdu[37], wire[256];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct mpa_rx_event ev;
	size_t len = 0, at = 0;
	long r;

	fill_pattern(ulpdu, sizeof(ulpdu), 9);
	mpa_tx_init(&tx, true, false);
	len = put_fpdu(&tx, wire, len, ulpdu, sizeof(ulpdu));
	len = put_fpdu(&tx, wire, len, ulpdu, 8);
	mpa_rx_init(&rx, true, false, MPA_ULPDU_MAX);
	for (int k = 0; k < 2; k++) {
		size_t ulen = k ? 8 : sizeof(ulpdu);

		r = mpa_rx_feed(&rx, wire + at, len - at, &ev);
		cr_assert_eq(r, (long)(2 + ulen), "length field and ULPDU");
		cr_assert_eq(ev.type, MPA_RX_EV_DATA);
		cr_assert_eq(ev.ulpdu_off, 0);
		cr_assert_eq(ev.len, ulen, "the whole ULPDU in one run");
		cr_assert_arr_eq(ev.data, ulpdu, ulen);
		cr_assert_eq(mpa_rx_ulpdu_done(&rx), ulen);
		cr_assert_eq(mpa_rx_contig(&rx), 0);
		at += (size_t)r;
		/* Pad and CRC, cut in two: the FPDU event after the last. */
		r = mpa_rx_feed(&rx, wire + at, 1, &ev);
		cr_assert_eq(r, 1);
		cr_assert_eq(ev.type, MPA_RX_EV_NONE);
		at += 1;
		r = mpa_rx_feed(&rx, wire + at, len - at, &ev);
		cr_assert_eq(ev.type, MPA_RX_EV_FPDU);
		cr_assert_eq(ev.ulpdu_len, ulen);
		at += (size_t)r;
		cr_assert_eq(at % 4, 0, "FPDUs end on 4-octet boundaries");
	}
	cr_assert_eq(at, len);

	/* A bad CRC on an FPDU held whole: nothing of it is handed out. */
	wire[len - 1] ^= 0x10;
	mpa_rx_init(&rx, true, false, MPA_ULPDU_MAX);
	at = 0;
	for (;;) {
		r = mpa_rx_feed(&rx, wire + at, len - at, &ev);
		if (r < 0)
			break;
		cr_assert(ev.type != MPA_RX_EV_DATA || at < 44,
			  "no DATA from the FPDU with the bad CRC");
		at += (size_t)r;
	}
	cr_assert_eq(r, -EPROTO);
	cr_assert_eq(at, 44, "failed at the start of the second FPDU");
	cr_assert_eq(mpa_rx_error(&rx), MPA_ERR_CRC);
}

/* ---- tampering ----------------------------------------------------------- */

Test(mpa_fpdu, every_single_bit_flip_is_detected_with_crc)
{
	/* The FPDU under test is followed by enough further FPDUs that a
	 * corrupted length field still ends inside the stream. */
	static uint8_t stream[8 * MAXWIRE];
	uint8_t ulpdu[1454];
	const uint16_t mulpdu = 1454;
	size_t flips = 0;

	fill_pattern(ulpdu, sizeof(ulpdu), 77);
	for (int markers = 0; markers <= 1; markers++) {
		struct mpa_tx tx;
		size_t first_end, len;

		mpa_tx_init(&tx, true, markers);
		/* 700 octets starting at 0: with markers, one inside. */
		first_end = put_fpdu(&tx, stream, 0, ulpdu, 700);
		len = first_end;
		for (int k = 0; k < 4; k++)
			len = put_fpdu(&tx, stream, len, ulpdu, mulpdu);

		for (size_t bit = 0; bit < first_end * 8; bit++) {
			struct mpa_rx rx;
			struct collected got;
			int ret;

			stream[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			mpa_rx_init(&rx, true, markers, mulpdu);
			ret = decode_stream(&rx, stream, len, 0, (uint32_t)bit, &got);
			stream[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			cr_assert_eq(ret, -EPROTO, "markers=%d bit %zu undetected",
				     markers, bit);
			cr_assert_eq(got.count, 0,
				     "a corrupted FPDU was delivered (bit %zu)", bit);
			cr_assert(rx.error == MPA_ERR_CRC ||
				  rx.error == MPA_ERR_ULPDU_LEN ||
				  rx.error == MPA_ERR_MARKER,
				  "bit %zu: %s", bit, mpa_error_str(rx.error));
			collected_free(&got);
			flips++;
		}
	}
	cr_log_info("%zu single-bit flips detected", flips);
}

/* A header kept right after the scratch (as the QP's transmit batch
 * keeps its DDP header) shares the length field's iovec, and pad + CRC
 * share one: three iovecs for header, payload and trailer. */
Test(mpa_fpdu, adjacent_pieces_share_an_iovec)
{
	struct {
		struct mpa_fpdu_scratch scr;
		uint8_t hdr[14];
	} f;
	uint8_t pay[1001];
	struct iovec in[2] = { { f.hdr, sizeof(f.hdr) }, { pay, sizeof(pay) } };
	struct iovec out[8];
	uint8_t wire[1100], again[1100], enc[1100];
	size_t wl = 0;
	struct mpa_tx tx, tx2;
	int n;

	_Static_assert(offsetof(__typeof__(f), hdr) == sizeof(f.scr),
		       "no padding between scratch and header");
	fill_pattern(f.hdr, sizeof(f.hdr), 3);
	fill_pattern(pay, sizeof(pay), 4);
	mpa_tx_init(&tx, true, false);
	n = mpa_fpdu_frame(&tx, in, 2, &f.scr, out, 8);
	cr_assert_eq(n, 3);
	cr_assert_eq(out[0].iov_base, f.scr.len);
	cr_assert_eq(out[0].iov_len, MPA_LEN_FIELD + sizeof(f.hdr));
	cr_assert_eq(out[1].iov_base, pay);
	cr_assert_eq(out[2].iov_len, 3 + MPA_CRC_LEN);  /* 2 + 1015 + 3 pad */
	for (int i = 0; i < n; i++) {
		memcpy(wire + wl, out[i].iov_base, out[i].iov_len);
		wl += out[i].iov_len;
	}
	/* The same octets as framing one contiguous ULPDU. */
	memcpy(again, f.hdr, sizeof(f.hdr));
	memcpy(again + sizeof(f.hdr), pay, sizeof(pay));
	mpa_tx_init(&tx2, true, false);
	cr_assert_eq(mpa_fpdu_encode(&tx2, again, sizeof(f.hdr) + sizeof(pay),
				     enc, sizeof(enc)),
		     (int)wl);
	cr_assert_arr_eq(enc, wire, wl);
}

/* Two gathered FPDUs: the first one's pad + CRC joined to the second's
 * length field and header give the same octets in one iovec fewer; a
 * join is refused with markers, when the earlier iovec is not a whole
 * pad + CRC, or when the later one does not begin at its length field. */
Test(mpa_fpdu, join_gives_the_same_octets_in_one_iovec_fewer)
{
	struct {
		struct mpa_fpdu_scratch scr;
		uint8_t hdr[14];
	} f[2];
	uint8_t pay[2][1001], flat[2][1015], wire[2200], enc[2200];
	struct iovec in[2][2], out[32], keep;
	struct mpa_tx tx, tx2;
	size_t wl = 0, el = 0;
	int n0, n1, n;

	for (int k = 0; k < 2; k++) {
		fill_pattern(f[k].hdr, sizeof(f[k].hdr), (uint8_t)(5 + k));
		fill_pattern(pay[k], sizeof(pay[k]), (uint8_t)(7 + k));
		in[k][0] = (struct iovec){ f[k].hdr, sizeof(f[k].hdr) };
		in[k][1] = (struct iovec){ pay[k], sizeof(pay[k]) };
		memcpy(flat[k], f[k].hdr, sizeof(f[k].hdr));
		memcpy(flat[k] + sizeof(f[k].hdr), pay[k], sizeof(pay[k]));
	}
	mpa_tx_init(&tx, true, false);
	n0 = mpa_fpdu_frame(&tx, in[0], 2, &f[0].scr, out, 8);
	cr_assert_eq(n0, 3);
	n1 = mpa_fpdu_frame(&tx, in[1], 2, &f[1].scr, out + n0, 8 - n0);
	cr_assert_eq(n1, 3);
	/* Not the earlier FPDU's pad + CRC: its payload. */
	keep = out[n0];
	cr_assert(!mpa_fpdu_join(&tx, &f[0].scr, &out[1], &f[1].scr,
				 &out[n0]));
	/* Not the later FPDU's length field. */
	cr_assert(!mpa_fpdu_join(&tx, &f[0].scr, &out[2], &f[1].scr,
				 &out[n0 + 1]));
	cr_assert_eq(out[n0].iov_base, keep.iov_base);
	cr_assert_eq(out[n0].iov_len, keep.iov_len);
	cr_assert(mpa_fpdu_join(&tx, &f[0].scr, &out[2], &f[1].scr, &out[n0]));
	cr_assert_eq(out[n0].iov_len, 3 + MPA_CRC_LEN + keep.iov_len);
	n = 0;
	for (int i = 0; i < n0 + n1; i++) {
		if (i == 2)
			continue;   /* joined into the next */
		memcpy(wire + wl, out[i].iov_base, out[i].iov_len);
		wl += out[i].iov_len;
		n++;
	}
	cr_assert_eq(n, 5);
	mpa_tx_init(&tx2, true, false);
	for (int k = 0; k < 2; k++) {
		int e = mpa_fpdu_encode(&tx2, flat[k], sizeof(flat[k]),
					enc + el, sizeof(enc) - el);

		cr_assert_gt(e, 0);
		el += (size_t)e;
	}
	cr_assert_eq(wl, el);
	cr_assert_arr_eq(enc, wire, wl);

	/* With markers, never. */
	mpa_tx_init(&tx, true, true);
	n0 = mpa_fpdu_frame(&tx, in[0], 2, &f[0].scr, out, 32);
	cr_assert_gt(n0, 0);
	n1 = mpa_fpdu_frame(&tx, in[1], 2, &f[1].scr, out + n0, 32 - n0);
	cr_assert_gt(n1, 0);
	cr_assert(!mpa_fpdu_join(&tx, &f[0].scr, &out[n0 - 1], &f[1].scr,
				 &out[n0]));
}

/* An FPDU that arrives whole with a bad CRC hands out none of its
 * ULPDU (RFC 5044 4.4: an invalid FPDU), with or without earlier good
 * FPDUs in the same input. */
Test(mpa_fpdu, whole_fpdu_with_bad_crc_hands_out_nothing)
{
	uint8_t stream[3000], ulpdu[600];
	struct mpa_rx_event ev;
	struct mpa_tx tx;
	struct mpa_rx rx;
	size_t len, first;
	long r;

	fill_pattern(ulpdu, sizeof(ulpdu), 9);
	mpa_tx_init(&tx, true, false);
	first = put_fpdu(&tx, stream, 0, ulpdu, sizeof(ulpdu));
	len = put_fpdu(&tx, stream, first, ulpdu, 401);
	stream[len - 1] ^= 0x10;               /* the second one's CRC */
	mpa_rx_init(&rx, true, false, 1454);
	r = mpa_rx_feed(&rx, stream, len, &ev);
	cr_assert_eq(r, 2 + (long)sizeof(ulpdu));
	cr_assert_eq(ev.type, MPA_RX_EV_DATA);
	cr_assert_eq(ev.len, sizeof(ulpdu), "the whole ULPDU in one run");
	cr_assert_arr_eq(ev.data, ulpdu, sizeof(ulpdu));
	r = mpa_rx_feed(&rx, stream + r, len - (size_t)r, &ev);
	cr_assert_eq(r, (long)(first - 2 - sizeof(ulpdu)));
	cr_assert_eq(ev.type, MPA_RX_EV_FPDU);
	cr_assert_eq(mpa_rx_feed(&rx, stream + first, len - first, &ev),
		     -EPROTO);
	cr_assert_eq(ev.type, MPA_RX_EV_NONE);
	cr_assert_eq(mpa_rx_error(&rx), MPA_ERR_CRC);
}

Test(mpa_fpdu, ulpdu_length_above_limit)
{
	uint8_t wire[2000];
	uint8_t ulpdu[1455] = { 0 };
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct mpa_rx_event ev;

	mpa_tx_init(&tx, false, false);
	cr_assert_gt(mpa_fpdu_encode(&tx, ulpdu, sizeof(ulpdu), wire,
				     sizeof(wire)), 0);
	mpa_rx_init(&rx, false, false, 1454);
	cr_assert_eq(mpa_rx_feed(&rx, wire, sizeof(wire), &ev), -EPROTO);
	cr_assert_eq(rx.error, MPA_ERR_ULPDU_LEN);
	cr_assert_eq(mpa_error_term(rx.error), 0x2003);
	/* A failed decoder stays failed. */
	cr_assert_eq(mpa_rx_feed(&rx, wire, 4, &ev), -EPROTO);
}

Test(mpa_fpdu, marker_pointing_wrong_without_crc)
{
	static uint8_t stream[4096];
	uint8_t ulpdu[1000];
	struct mpa_tx tx;
	size_t len;

	fill_pattern(ulpdu, sizeof(ulpdu), 8);
	mpa_tx_init(&tx, false, true);
	len = put_fpdu(&tx, stream, 0, ulpdu, sizeof(ulpdu));
	len = put_fpdu(&tx, stream, len, ulpdu, sizeof(ulpdu));

	for (size_t m = 0; m < len; m += 512) {
		for (int bit = 2; bit < 16; bit++) {
			struct mpa_rx rx;
			struct collected got;
			size_t at = m + 2 + (size_t)(1 - bit / 8);

			stream[at] ^= (uint8_t)(1u << (bit % 8));
			mpa_rx_init(&rx, false, true, MPA_ULPDU_MAX);
			cr_assert_eq(decode_stream(&rx, stream, len, 0, 5, &got),
				     -EPROTO, "marker %zu bit %d", m, bit);
			cr_assert_eq(rx.error, MPA_ERR_MARKER);
			collected_free(&got);
			stream[at] ^= (uint8_t)(1u << (bit % 8));
		}
	}
}

Test(mpa_fpdu, marker_reserved_and_low_bits_are_ignored)
{
	/* RFC 5044 4.2: reserved "ignored on receive"; FPDUPTR's two low
	 * bits "treat as zero". Without CRC, such a stream decodes. */
	static uint8_t stream[4096];
	uint8_t ulpdu[1500];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct collected got;
	size_t len;

	fill_pattern(ulpdu, sizeof(ulpdu), 9);
	mpa_tx_init(&tx, false, true);
	len = put_fpdu(&tx, stream, 0, ulpdu, sizeof(ulpdu));
	for (size_t m = 0; m < len; m += 512) {
		stream[m] = 0xff;
		stream[m + 1] = 0x01;
		stream[m + 3] |= 0x03;
	}
	mpa_rx_init(&rx, false, true, MPA_ULPDU_MAX);
	cr_assert_eq(decode_stream(&rx, stream, len, 3, 0, &got), 0);
	cr_assert_eq(got.count, 1);
	cr_assert_arr_eq(got.bufs[0], ulpdu, sizeof(ulpdu));
	collected_free(&got);
}

/*
 * mpa_rx_whole: an FPDU whole in the input is taken in one call, pad and
 * CRC included, the decoder left at the next FPDU (so that mpa_rx_feed
 * goes on from there); not whole, mid-FPDU or with markers it takes
 * nothing; a bad CRC or length fails as mpa_rx_feed fails.
 */
Test(mpa_fpdu, rx_whole_takes_a_whole_fpdu_in_one_call)
{
	uint8_t ulpdu[37], wire[256];
	struct mpa_tx tx;
	struct mpa_rx rx;
	struct mpa_rx_event ev;
	size_t len = 0, at = 0;
	long r;

	fill_pattern(ulpdu, sizeof(ulpdu), 5);
	mpa_tx_init(&tx, true, false);
	len = put_fpdu(&tx, wire, len, ulpdu, sizeof(ulpdu));   /* 44 */
	len = put_fpdu(&tx, wire, len, ulpdu, 0);               /* 8 */
	len = put_fpdu(&tx, wire, len, ulpdu, 8);               /* 16 */
	cr_assert_eq(len, 68);
	mpa_rx_init(&rx, true, false, MPA_ULPDU_MAX);
	cr_assert_eq(mpa_rx_whole(&rx, wire, 43, &ev), 0, "one octet short");
	cr_assert_eq(ev.type, MPA_RX_EV_NONE);
	for (int k = 0; k < 2; k++) {
		size_t ulen = k ? 0 : sizeof(ulpdu), wl = k ? 8 : 44;

		r = mpa_rx_whole(&rx, wire + at, len - at, &ev);
		cr_assert_eq(r, (long)wl, "FPDU %d: %ld octets", k, r);
		cr_assert_eq(ev.type, MPA_RX_EV_FPDU);
		cr_assert_eq(ev.ulpdu_len, ulen);
		cr_assert_eq(ev.len, ulen);
		if (ulen)
			cr_assert_arr_eq(ev.data, ulpdu, ulen);
		at += (size_t)r;
	}
	/* The third through mpa_rx_feed, from where mpa_rx_whole left the
	 * decoder; cut so that mpa_rx_whole then finds it mid-FPDU. */
	r = mpa_rx_feed(&rx, wire + at, 1, &ev);
	cr_assert_eq(r, 1);
	at += 1;
	cr_assert_eq(mpa_rx_whole(&rx, wire + at, len - at, &ev), 0,
		     "mid-FPDU");
	r = mpa_rx_feed(&rx, wire + at, len - at, &ev);
	cr_assert_eq(ev.type, MPA_RX_EV_DATA);
	cr_assert_eq(ev.len, 8);
	at += (size_t)r;
	r = mpa_rx_feed(&rx, wire + at, len - at, &ev);
	cr_assert_eq(ev.type, MPA_RX_EV_FPDU, "CRC good: decoder in step");
	at += (size_t)r;
	cr_assert_eq(at, len);

	/* Markers: never. */
	mpa_rx_init(&rx, true, true, MPA_ULPDU_MAX);
	cr_assert_eq(mpa_rx_whole(&rx, wire, len, &ev), 0);

	/* A bad CRC, a length above the limit: failed, nothing out. */
	wire[43] ^= 0x01;
	mpa_rx_init(&rx, true, false, MPA_ULPDU_MAX);
	cr_assert_eq(mpa_rx_whole(&rx, wire, len, &ev), -EPROTO);
	cr_assert_eq(ev.type, MPA_RX_EV_NONE);
	cr_assert_eq(mpa_rx_error(&rx), MPA_ERR_CRC);
	wire[43] ^= 0x01;
	mpa_rx_init(&rx, true, false, 36);
	cr_assert_eq(mpa_rx_whole(&rx, wire, len, &ev), -EPROTO);
	cr_assert_eq(mpa_rx_error(&rx), MPA_ERR_ULPDU_LEN);
	/* Without CRC the field is not checked. */
	wire[43] ^= 0x01;
	mpa_rx_init(&rx, false, false, MPA_ULPDU_MAX);
	cr_assert_eq(mpa_rx_whole(&rx, wire, len, &ev), 44);
	cr_assert_eq(mpa_rx_whole(NULL, wire, len, &ev), -EINVAL);
}
