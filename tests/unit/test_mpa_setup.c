/* SPDX-License-Identifier: MIT */
/*
 * MPA Request / Reply frames (RFC 5044 7.1, RFC 6581 9): known-answer
 * bytes written from the RFC figures, round trips, limits and tampering.
 */
#include <errno.h>

#include "mpa.h"
#include "test_util.h"

#define KEY_REQ 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', \
		'F', 'r', 'a', 'm', 'e'
#define KEY_REP 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', \
		'F', 'r', 'a', 'm', 'e'

/* ---- safety ---------------------------------------------------------- */

Test(mpa_setup, null_arguments)
{
	struct mpa_rr rr = { .rev = 1 };
	enum mpa_error err;
	uint8_t buf[64];

	cr_assert_eq(mpa_rr_parse(NULL, 20, MPA_REQUEST, &rr, &err), -EINVAL);
	cr_assert_eq(mpa_rr_parse(buf, 20, MPA_REQUEST, NULL, &err), -EINVAL);
	cr_assert_eq(mpa_rr_parse(buf, 20, MPA_REQUEST, &rr, NULL), -EINVAL);
	cr_assert_eq(mpa_rr_build(NULL, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(mpa_rr_build(&rr, NULL, sizeof(buf)), -EINVAL);
	cr_assert_eq(mpa_rr_len(NULL), -EINVAL);
}

Test(mpa_setup, every_short_prefix_asks_for_more)
{
	static const uint8_t frame[] = {
		KEY_REQ, 0x40, 0x02, 0x00, 0x08,
		0x80, 0x10, 0x40, 0x20, 'a', 'b', 'c', 'd',
	};

	for (size_t len = 0; len < sizeof(frame); len++) {
		uint8_t *p = exact_copy(frame, len);
		struct mpa_rr rr;
		enum mpa_error err = MPA_ERR_CRC;

		cr_assert_eq(mpa_rr_parse(p, len, MPA_REQUEST, &rr, &err),
			     -EAGAIN, "prefix of %zu octets", len);
		cr_assert_eq(err, MPA_ERR_NONE);
		free(p);
	}
}

/* ---- known answers ---------------------------------------------------- */

Test(mpa_setup, rev1_request_bytes)
{
	static const uint8_t want[] = {
		KEY_REQ,
		0x40,           /* M=0 C=1 R=0 Res=0 */
		0x01,           /* Rev 1 */
		0x00, 0x03,     /* PD_Length 3 */
		'h', 'i', '!',
	};
	struct mpa_rr rr = {
		.type = MPA_REQUEST, .rev = 1, .crc = true,
		.pdata = (const uint8_t *)"hi!", .pdata_len = 3,
	};
	uint8_t buf[64];

	cr_assert_eq(mpa_rr_len(&rr), (int)sizeof(want));
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), (int)sizeof(want));
	cr_assert_arr_eq(buf, want, sizeof(want));
}

Test(mpa_setup, rev2_enhanced_request_bytes)
{
	/* Rev 2, S set, peer-to-peer with WRITE and READ RTR offered,
	 * IRD 16 and ORD 8, two octets of ULP private data. PD_Length
	 * counts the IRD/ORD words (RFC 6581 section 6). */
	static const uint8_t want[] = {
		KEY_REQ,
		0x50,           /* C=1, S=1 */
		0x02,
		0x00, 0x06,
		0x80, 0x10,     /* A=1 B=0 IRD=16 */
		0xc0, 0x08,     /* C=1 D=1 ORD=8 */
		0xbe, 0xef,
	};
	struct mpa_rr rr = {
		.type = MPA_REQUEST, .rev = 2, .crc = true, .enhanced = true,
		.p2p = true, .ird = 16, .ord = 8,
		.rtr = MPA_RTR_WRITE | MPA_RTR_READ,
		.pdata = (const uint8_t *)"\xbe\xef", .pdata_len = 2,
	};
	uint8_t buf[64];
	struct mpa_rr got;
	enum mpa_error err;

	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), (int)sizeof(want));
	cr_assert_arr_eq(buf, want, sizeof(want));

	cr_assert_eq(mpa_rr_parse(want, sizeof(want), MPA_REQUEST, &got, &err),
		     (int)sizeof(want));
	cr_assert(got.enhanced && got.p2p && got.crc && !got.markers);
	cr_assert_eq(got.rev, 2);
	cr_assert_eq(got.ird, 16);
	cr_assert_eq(got.ord, 8);
	cr_assert_eq(got.rtr, MPA_RTR_WRITE | MPA_RTR_READ);
	cr_assert_eq(got.pdata_len, 2);
	cr_assert_eq(got.pdata, want + 24);
}

Test(mpa_setup, rev2_reply_send_rtr_and_reject)
{
	/* A Reply with R set, S set, IRD 0x3fff with A and B, ORD 1. */
	static const uint8_t want[] = {
		KEY_REP, 0x30, 0x02, 0x00, 0x04,
		0xff, 0xff,     /* A=1 B=1 IRD=0x3fff */
		0x00, 0x01,     /* ORD 1, no WRITE/READ RTR */
	};
	struct mpa_rr rr = {
		.type = MPA_REPLY, .rev = 2, .reject = true, .enhanced = true,
		.p2p = true, .ird = MPA_IRD_ORD_MAX, .ord = 1,
		.rtr = MPA_RTR_SEND,
	};
	uint8_t buf[64];
	struct mpa_rr got;
	enum mpa_error err;

	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), (int)sizeof(want));
	cr_assert_arr_eq(buf, want, sizeof(want));
	cr_assert_eq(mpa_rr_parse(want, sizeof(want), MPA_REPLY, &got, &err),
		     (int)sizeof(want));
	cr_assert(got.reject && got.enhanced && got.p2p);
	cr_assert_eq(got.rtr, MPA_RTR_SEND);
	cr_assert_eq(got.ird, MPA_IRD_ORD_MAX);
	cr_assert_eq(got.ord, 1);
	cr_assert_eq(got.pdata_len, 0);
	cr_assert_null(got.pdata);
}

Test(mpa_setup, rev2_without_enhanced_bit_is_plain_private_data)
{
	/* Without S the first four octets are ULP private data, not IRD/ORD. */
	static const uint8_t frame[] = {
		KEY_REP, 0x00, 0x02, 0x00, 0x04, 0x80, 0x10, 0xc0, 0x08,
	};
	struct mpa_rr got;
	enum mpa_error err;

	cr_assert_eq(mpa_rr_parse(frame, sizeof(frame), MPA_REPLY, &got, &err),
		     (int)sizeof(frame));
	cr_assert(!got.enhanced && !got.p2p);
	cr_assert_eq(got.ird, 0);
	cr_assert_eq(got.pdata_len, 4);
	cr_assert_eq(got.pdata, frame + 20);
}

Test(mpa_setup, markers_flag_round_trip)
{
	struct mpa_rr rr = { .type = MPA_REQUEST, .rev = 1, .markers = true };
	uint8_t buf[32];
	struct mpa_rr got;
	enum mpa_error err;

	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), 20);
	cr_assert_eq(buf[16], 0x80);
	cr_assert_eq(mpa_rr_parse(buf, 20, MPA_REQUEST, &got, &err), 20);
	cr_assert(got.markers && !got.crc && !got.reject);
}

/* ---- round trips across revisions and flags --------------------------- */

Test(mpa_setup, round_trip_matrix)
{
	uint8_t pd[MPA_PD_MAX];
	int checked = 0;

	fill_pattern(pd, sizeof(pd), 3);
	for (int type = MPA_REQUEST; type <= MPA_REPLY; type++)
	for (int rev = 1; rev <= 2; rev++)
	for (int flags = 0; flags < 32; flags++) {
		bool enhanced = flags & 8;
		uint16_t pdl = enhanced ? MPA_PD_MAX - MPA_IRD_ORD_LEN : 77;
		struct mpa_rr rr = {
			.type = type, .rev = rev, .markers = flags & 1,
			.crc = flags & 2, .reject = (flags & 4) && type == MPA_REPLY,
			.enhanced = enhanced, .p2p = flags & 16,
			.ird = 5, .ord = 0x3ff0, .rtr = (flags & 16) ? 7 : 0,
			.pdata = pd, .pdata_len = pdl,
		};
		uint8_t buf[MPA_RR_HDR_LEN + MPA_PD_MAX];
		struct mpa_rr got;
		enum mpa_error err;
		int len = mpa_rr_build(&rr, buf, sizeof(buf));

		if (enhanced && rev == 1) {
			cr_assert_eq(len, -EINVAL);
			continue;
		}
		cr_assert_gt(len, 0);
		cr_assert_eq(mpa_rr_parse(buf, (size_t)len, type, &got, &err), len);
		cr_assert_eq(got.rev, rev);
		cr_assert_eq(got.markers, rr.markers);
		cr_assert_eq(got.crc, rr.crc);
		cr_assert_eq(got.reject, rr.reject);
		cr_assert_eq(got.enhanced, enhanced);
		if (enhanced) {
			cr_assert_eq(got.p2p, rr.p2p);
			cr_assert_eq(got.ird, 5);
			cr_assert_eq(got.ord, 0x3ff0);
			cr_assert_eq(got.rtr, rr.rtr);
		}
		cr_assert_eq(got.pdata_len, pdl);
		cr_assert_arr_eq(got.pdata, pd, pdl);
		checked++;
	}
	cr_log_info("%d MPA frames round-tripped", checked);
	cr_assert_eq(checked, 2 * 2 * 32 - 2 * 16);
}

/* ---- limits ------------------------------------------------------------ */

Test(mpa_setup, private_data_limits)
{
	uint8_t pd[MPA_PD_MAX + 1] = { 0 };
	uint8_t buf[MPA_RR_HDR_LEN + MPA_PD_MAX + 8];
	struct mpa_rr rr = { .type = MPA_REQUEST, .rev = 2, .pdata = pd };

	rr.pdata_len = MPA_PD_MAX;
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), 20 + MPA_PD_MAX);
	rr.pdata_len = MPA_PD_MAX + 1;
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EMSGSIZE);
	/* With IRD/ORD words, 4 octets fewer are left for the ULP. */
	rr.enhanced = true;
	rr.pdata_len = MPA_PD_MAX - 4;
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), 20 + MPA_PD_MAX);
	rr.pdata_len = MPA_PD_MAX - 3;
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EMSGSIZE);
	/* Buffer one short. */
	rr.pdata_len = 10;
	cr_assert_eq(mpa_rr_build(&rr, buf, 20 + 4 + 9), -ENOSPC);
}

Test(mpa_setup, build_rejects_invalid_frames)
{
	uint8_t buf[64];
	struct mpa_rr rr = { .type = MPA_REQUEST, .rev = 3 };

	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EINVAL);
	rr.rev = 0;
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EINVAL);
	rr = (struct mpa_rr){ .type = MPA_REQUEST, .rev = 1, .reject = true };
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EINVAL);
	rr = (struct mpa_rr){ .type = MPA_REQUEST, .rev = 2, .enhanced = true,
			      .ird = MPA_IRD_ORD_MAX + 1 };
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EINVAL);
	rr = (struct mpa_rr){ .type = MPA_REQUEST, .rev = 2, .pdata_len = 4 };
	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EINVAL);
}

/* ---- tampering ----------------------------------------------------------- */

static enum mpa_error parse_err(const uint8_t *frame, size_t len,
				enum mpa_frame_type type)
{
	uint8_t *p = exact_copy(frame, len);
	struct mpa_rr rr;
	enum mpa_error err = MPA_ERR_NONE;
	int ret = mpa_rr_parse(p, len, type, &rr, &err);

	free(p);
	cr_assert_eq(ret, -EPROTO, "expected a protocol error, got %d", ret);
	return err;
}

Test(mpa_setup, wrong_key_is_named_early)
{
	uint8_t frame[] = { KEY_REQ, 0x00, 0x01, 0x00, 0x00 };

	/* A Reply key where a Request is expected. */
	cr_assert_eq(parse_err(frame, sizeof(frame), MPA_REPLY), MPA_ERR_BAD_KEY);
	/* Any single flipped bit in the key. */
	for (int bit = 0; bit < MPA_KEY_LEN * 8; bit++) {
		frame[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		cr_assert_eq(parse_err(frame, sizeof(frame), MPA_REQUEST),
			     MPA_ERR_BAD_KEY, "bit %d", bit);
		frame[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	/* Wrong key is reported before the frame is complete (HTTP peer). */
	cr_assert_eq(parse_err((const uint8_t *)"GET / HTTP/1.1", 5, MPA_REQUEST),
		     MPA_ERR_BAD_KEY);
}

Test(mpa_setup, unknown_revisions)
{
	uint8_t frame[] = { KEY_REQ, 0x00, 0x00, 0x00, 0x00 };
	static const uint8_t bad[] = { 0, 3, 4, 0x7f, 0xff };

	for (size_t i = 0; i < sizeof(bad); i++) {
		frame[17] = bad[i];
		cr_assert_eq(parse_err(frame, sizeof(frame), MPA_REQUEST),
			     MPA_ERR_BAD_REV, "rev %u", bad[i]);
	}
}

Test(mpa_setup, private_data_length_above_512)
{
	uint8_t frame[] = { KEY_REQ, 0x00, 0x01, 0x02, 0x01 };  /* 513 */

	cr_assert_eq(parse_err(frame, sizeof(frame), MPA_REQUEST), MPA_ERR_PD_LEN);
	frame[18] = 0xff;
	frame[19] = 0xff;
	cr_assert_eq(parse_err(frame, sizeof(frame), MPA_REQUEST), MPA_ERR_PD_LEN);
}

Test(mpa_setup, enhanced_bit_without_ird_ord)
{
	/* RFC 6581: with S set, private data MUST begin with IRD/ORD.
	 * Linux siw rejects such a request; so does wisp. */
	for (uint8_t pdl = 0; pdl < 4; pdl++) {
		uint8_t frame[] = { KEY_REQ, 0x10, 0x02, 0x00, pdl, 1, 2, 3 };

		cr_assert_eq(parse_err(frame, 20u + pdl, MPA_REQUEST),
			     MPA_ERR_ENHANCED, "PD_Length %u", pdl);
	}
}

Test(mpa_setup, reserved_bits_and_request_r_bit_are_ignored)
{
	/* RFC 5044 7.1.1: Res "MUST be set to zero when sending, and not
	 * checked on reception"; R in a Request is "not checked". And a
	 * rev 1 frame's S position is reserved too. */
	uint8_t frame[] = { KEY_REQ, 0x2f, 0x01, 0x00, 0x00 };
	struct mpa_rr rr;
	enum mpa_error err;

	cr_assert_eq(mpa_rr_parse(frame, sizeof(frame), MPA_REQUEST, &rr, &err), 20);
	cr_assert(!rr.reject && !rr.enhanced && !rr.markers && !rr.crc);
	frame[16] = 0x1f;
	cr_assert_eq(mpa_rr_parse(frame, sizeof(frame), MPA_REQUEST, &rr, &err), 20);
	cr_assert(!rr.enhanced);
}

Test(mpa_setup, mulpdu_from_emss)
{
	/* RFC 5044 4.5 by hand: 1460 - (6 + 0) and
	 * 1460 - (6 + 4 * 3 + 0); 1448 % 4 == 0; 9000 with markers:
	 * 9000 - (6 + 4 * 18 + 0). */
	cr_assert_eq(mpa_mulpdu(1460, false), 1454);
	cr_assert_eq(mpa_mulpdu(1460, true), 1442);
	cr_assert_eq(mpa_mulpdu(1461, false), 1454);   /* 1461 - (6 + 1) */
	cr_assert_eq(mpa_mulpdu(9000, true), 8922);
	cr_assert_eq(mpa_mulpdu(65483, false), 65483 - 6 - 3 > 64768 ?
		     64768 : 65483 - 9);
	/* Never below 128 (RFC 5044 4.5). */
	cr_assert_eq(mpa_mulpdu(100, false), 128);
	cr_assert_eq(mpa_mulpdu(0, true), 128);
}

Test(mpa_setup, rtr_flags_need_peer_to_peer)
{
	/* RFC 6581 9.2: B, C, D are sent only with A, ignored without it. */
	static const uint8_t frame[] = {
		KEY_REP, 0x10, 0x02, 0x00, 0x04, 0x40, 0x01, 0xc0, 0x02,
	};
	struct mpa_rr rr = { .type = MPA_REPLY, .rev = 2, .enhanced = true,
			     .rtr = MPA_RTR_READ };
	uint8_t buf[64];
	enum mpa_error err;

	cr_assert_eq(mpa_rr_build(&rr, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(mpa_rr_parse(frame, sizeof(frame), MPA_REPLY, &rr, &err),
		     (int)sizeof(frame));
	cr_assert(!rr.p2p);
	cr_assert_eq(rr.rtr, 0);
	cr_assert_eq(rr.ird, 1);
	cr_assert_eq(rr.ord, 2);
}
