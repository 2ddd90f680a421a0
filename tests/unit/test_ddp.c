/* SPDX-License-Identifier: MIT */
/*
 * DDP (RFC 5041): header codec, error encodings, receiver placement checks
 * and segmentation. Safety cases first, then known-answer bytes written
 * from the RFC 5041 section 4 figures, round trips, tamper cases and
 * segmentation.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "test_util.h"

static const uint8_t tagged_hdr[DDP_TAGGED_HDR_LEN] = {
	0xc1,                   /* T=1 L=1 Rsvd=0 DV=1 */
	0x40,                   /* RsvdULP: RDMAP RV=1, opcode 0 (Write) */
	0x12, 0x34, 0x56, 0x78, /* STag */
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* TO */
};

static const uint8_t untagged_hdr[DDP_UNTAGGED_HDR_LEN] = {
	0x01,                   /* T=0 L=0 Rsvd=0 DV=1 */
	0x43,                   /* RsvdULP: RDMAP RV=1, opcode 3 (Send) */
	0x00, 0x00, 0x00, 0x00, /* RsvdULP[8:39] */
	0x00, 0x00, 0x00, 0x00, /* QN 0 */
	0x00, 0x00, 0x00, 0x07, /* MSN 7 */
	0x00, 0x00, 0x05, 0xc8, /* MO 1480 */
};

static int parse_exact(const uint8_t *bytes, size_t len, struct ddp_hdr *h,
		       enum ddp_error *err)
{
	uint8_t *p = exact_copy(bytes, len);
	int r = ddp_hdr_parse(p, len, h, err);

	free(p);
	return r;
}

/* ---- safety ---------------------------------------------------------- */

Test(ddp, null_arguments)
{
	struct ddp_hdr h = { .tagged = true };
	struct ddp_untagged_ctx uc = { .nqueues = 1, .msn_window = 1 };
	struct ddp_tagged_buf tb = { .valid = true };
	struct ddp_seg_iter it;
	enum ddp_error err;
	uint8_t buf[32] = { 0 };
	uint64_t off;
	uint32_t len;

	cr_assert_eq(ddp_hdr_build(NULL, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(ddp_hdr_build(&h, NULL, sizeof(buf)), -EINVAL);
	cr_assert_eq(ddp_hdr_parse(NULL, 14, &h, &err), -EINVAL);
	cr_assert_eq(ddp_hdr_parse(tagged_hdr, 14, NULL, &err), -EINVAL);
	cr_assert_eq(ddp_hdr_parse(tagged_hdr, 14, &h, NULL), -EINVAL);
	cr_assert_eq(ddp_check_tagged(NULL, 1, &tb, &err), -EINVAL);
	cr_assert_eq(ddp_check_tagged(&h, 1, NULL, &err), -EINVAL);
	cr_assert_eq(ddp_check_tagged(&h, 1, &tb, NULL), -EINVAL);
	h.tagged = false;
	cr_assert_eq(ddp_check_untagged(NULL, 1, &uc, &err), -EINVAL);
	cr_assert_eq(ddp_check_untagged(&h, 1, NULL, &err), -EINVAL);
	cr_assert_eq(ddp_check_untagged(&h, 1, &uc, NULL), -EINVAL);
	cr_assert_eq(ddp_seg_init(NULL, &h, 1, 100), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, NULL, 1, 100), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &h, 1, 100), 0);
	cr_assert_eq(ddp_seg_next(NULL, &h, &off, &len), -EINVAL);
	cr_assert_eq(ddp_seg_next(&it, NULL, &off, &len), -EINVAL);
	cr_assert_eq(ddp_seg_next(&it, &h, NULL, &len), -EINVAL);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, NULL), -EINVAL);
}

Test(ddp, check_rejects_wrong_buffer_model)
{
	struct ddp_hdr t = { .tagged = true }, u = { .tagged = false };
	struct ddp_untagged_ctx uc = { .nqueues = 1, .msn_window = 1,
				       .buffer_posted = true, .buffer_len = 8 };
	struct ddp_tagged_buf tb = { .valid = true, .same_stream = true,
				     .len = 8 };
	enum ddp_error err;

	cr_assert_eq(ddp_check_untagged(&t, 1, &uc, &err), -EINVAL);
	cr_assert_eq(ddp_check_tagged(&u, 1, &tb, &err), -EINVAL);
}

Test(ddp, every_short_tagged_prefix_asks_for_more)
{
	for (size_t len = 0; len < DDP_TAGGED_HDR_LEN; len++) {
		struct ddp_hdr h;
		enum ddp_error err = DDP_ERR_T_TO_WRAP;

		cr_assert_eq(parse_exact(tagged_hdr, len, &h, &err), -EAGAIN,
			     "prefix of %zu octets", len);
		cr_assert_eq(err, DDP_ERR_NONE);
	}
}

Test(ddp, every_short_untagged_prefix_asks_for_more)
{
	for (size_t len = 0; len < DDP_UNTAGGED_HDR_LEN; len++) {
		struct ddp_hdr h;
		enum ddp_error err = DDP_ERR_T_TO_WRAP;

		cr_assert_eq(parse_exact(untagged_hdr, len, &h, &err), -EAGAIN,
			     "prefix of %zu octets", len);
		cr_assert_eq(err, DDP_ERR_NONE);
	}
}

Test(ddp, build_short_buffer_writes_nothing)
{
	struct ddp_hdr t = { .tagged = true }, u = { .tagged = false };
	uint8_t buf[DDP_UNTAGGED_HDR_LEN];

	for (size_t cap = 0; cap < DDP_UNTAGGED_HDR_LEN; cap++) {
		memset(buf, 0xaa, sizeof(buf));
		cr_assert_eq(ddp_hdr_build(&u, buf, cap), -ENOSPC);
		if (cap < DDP_TAGGED_HDR_LEN)
			cr_assert_eq(ddp_hdr_build(&t, buf, cap), -ENOSPC);
		for (size_t i = 0; i < sizeof(buf); i++)
			cr_assert_eq(buf[i], 0xaa, "cap %zu octet %zu", cap, i);
	}
}

/* ---- known answers ---------------------------------------------------- */

Test(ddp, header_lengths_match_rfc)
{
	cr_assert_eq(ddp_hdr_len(true), 14);
	cr_assert_eq(ddp_hdr_len(false), 18);
}

Test(ddp, tagged_write_header_bytes)
{
	struct ddp_hdr h = {
		.tagged = true, .last = true, .ulp_ctrl = 0x40,
		.t = { .stag = 0x12345678, .to = 0x0102030405060708ull },
	};
	struct ddp_hdr got;
	enum ddp_error err;
	uint8_t buf[DDP_TAGGED_HDR_LEN];

	cr_assert_eq(ddp_hdr_build(&h, buf, sizeof(buf)), 14);
	cr_assert_arr_eq(buf, tagged_hdr, sizeof(tagged_hdr));

	cr_assert_eq(parse_exact(tagged_hdr, sizeof(tagged_hdr), &got, &err),
		     14);
	cr_assert(got.tagged);
	cr_assert(got.last);
	cr_assert_eq(got.dv, 1);
	cr_assert_eq(got.ulp_ctrl, 0x40);
	cr_assert_eq(got.t.stag, 0x12345678u);
	cr_assert_eq(got.t.to, 0x0102030405060708ull);
}

Test(ddp, untagged_send_header_bytes)
{
	struct ddp_hdr h = {
		.tagged = false, .last = false, .ulp_ctrl = 0x43,
		.u = { .ulp_word = 0, .qn = 0, .msn = 7, .mo = 1480 },
	};
	struct ddp_hdr got;
	enum ddp_error err;
	uint8_t buf[DDP_UNTAGGED_HDR_LEN];

	cr_assert_eq(ddp_hdr_build(&h, buf, sizeof(buf)), 18);
	cr_assert_arr_eq(buf, untagged_hdr, sizeof(untagged_hdr));

	cr_assert_eq(parse_exact(untagged_hdr, sizeof(untagged_hdr), &got,
				 &err), 18);
	cr_assert_not(got.tagged);
	cr_assert_not(got.last);
	cr_assert_eq(got.ulp_ctrl, 0x43);
	cr_assert_eq(got.u.ulp_word, 0);
	cr_assert_eq(got.u.qn, 0);
	cr_assert_eq(got.u.msn, 7);
	cr_assert_eq(got.u.mo, 1480);
}

Test(ddp, untagged_ulp_word_carried_opaquely)
{
	/* Send with Invalidate: RDMAP puts the STag in RsvdULP[8:39]. */
	static const uint8_t want[] = {
		0x41, 0x44,
		0xde, 0xad, 0xbe, 0xef,         /* RsvdULP[8:39] */
		0x00, 0x00, 0x00, 0x00,         /* QN 0 */
		0x00, 0x00, 0x00, 0x01,         /* MSN 1 */
		0x00, 0x00, 0x00, 0x00,         /* MO 0 */
	};
	struct ddp_hdr h = {
		.last = true, .ulp_ctrl = 0x44,
		.u = { .ulp_word = 0xdeadbeef, .qn = 0, .msn = 1, .mo = 0 },
	};
	struct ddp_hdr got;
	enum ddp_error err;
	uint8_t buf[sizeof(want)];

	cr_assert_eq(ddp_hdr_build(&h, buf, sizeof(buf)), 18);
	cr_assert_arr_eq(buf, want, sizeof(want));
	cr_assert_eq(parse_exact(want, sizeof(want), &got, &err), 18);
	cr_assert_eq(got.u.ulp_word, 0xdeadbeefu);
	cr_assert_eq(got.u.msn, 1);
}

Test(ddp, read_response_header_bytes)
{
	static const uint8_t rr[] = {
		0xc1, 0x42, 0x12, 0x34, 0x56, 0x78,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
	};
	struct ddp_hdr got;
	enum ddp_error err;

	cr_assert_eq(parse_exact(rr, sizeof(rr), &got, &err), 14);
	cr_assert(got.tagged);
	cr_assert(got.last);
	cr_assert_eq(got.ulp_ctrl, 0x42);
	cr_assert_eq(got.t.stag, 0x12345678u);
	cr_assert_eq(got.t.to, 0xabcdu);
}

Test(ddp, parse_ignores_trailing_payload)
{
	uint8_t seg[DDP_TAGGED_HDR_LEN + 5];
	struct ddp_hdr got;
	enum ddp_error err;

	memcpy(seg, tagged_hdr, sizeof(tagged_hdr));
	memset(seg + sizeof(tagged_hdr), 0xee, 5);
	cr_assert_eq(parse_exact(seg, sizeof(seg), &got, &err), 14);
	cr_assert_eq(got.t.to, 0x0102030405060708ull);
}

Test(ddp, build_sends_zero_reserved_and_dv_1)
{
	for (int t = 0; t < 2; t++) {
		for (int l = 0; l < 2; l++) {
			struct ddp_hdr h = { .tagged = t, .last = l, .dv = 3 };
			uint8_t buf[DDP_UNTAGGED_HDR_LEN];

			cr_assert_gt(ddp_hdr_build(&h, buf, sizeof(buf)), 0);
			cr_assert_eq(buf[0] & DDP_CTRL_RSVD_MASK, 0);
			cr_assert_eq(buf[0] & DDP_CTRL_DV_MASK, DDP_VERSION);
			cr_assert_eq(!!(buf[0] & DDP_CTRL_T), t);
			cr_assert_eq(!!(buf[0] & DDP_CTRL_L), l);
		}
	}
}

Test(ddp, parse_ignores_reserved_bits)
{
	/* RFC 5041 4.1: Rsvd is not checked on receipt. */
	uint8_t t[sizeof(tagged_hdr)], u[sizeof(untagged_hdr)];
	struct ddp_hdr a, b;
	enum ddp_error err = DDP_ERR_NONE;

	memcpy(t, tagged_hdr, sizeof(t));
	t[0] |= DDP_CTRL_RSVD_MASK;
	cr_assert_eq(parse_exact(t, sizeof(t), &a, &err), 14);
	cr_assert_eq(err, DDP_ERR_NONE);
	cr_assert_eq(parse_exact(tagged_hdr, sizeof(t), &b, &err), 14);
	cr_assert_eq(a.t.stag, b.t.stag);
	cr_assert_eq(a.t.to, b.t.to);
	cr_assert_eq(a.last, b.last);

	memcpy(u, untagged_hdr, sizeof(u));
	u[0] |= 0x04;           /* a single reserved bit */
	cr_assert_eq(parse_exact(u, sizeof(u), &a, &err), 18);
	cr_assert_eq(a.u.mo, 1480);
}

Test(ddp, error_terminate_codes_match_rfc)
{
	static const struct { enum ddp_error e; uint16_t term; } v[] = {
		{ DDP_ERR_LOCAL_CATASTROPHIC, 0x1000 },
		{ DDP_ERR_T_INVALID_STAG,     0x1100 },
		{ DDP_ERR_T_BASE_BOUNDS,      0x1101 },
		{ DDP_ERR_T_STAG_NOT_ASSOC,   0x1102 },
		{ DDP_ERR_T_TO_WRAP,          0x1103 },
		{ DDP_ERR_T_VERSION,          0x1104 },
		{ DDP_ERR_U_INVALID_QN,       0x1201 },
		{ DDP_ERR_U_MSN_NO_BUFFER,    0x1202 },
		{ DDP_ERR_U_MSN_RANGE,        0x1203 },
		{ DDP_ERR_U_INVALID_MO,       0x1204 },
		{ DDP_ERR_U_TOO_LONG,         0x1205 },
		{ DDP_ERR_U_VERSION,          0x1206 },
		{ DDP_ERR_SEG_TOO_SHORT,      0x1000 },
	};

	cr_assert_eq(sizeof(v) / sizeof(v[0]), DDP_ERR__COUNT - 1);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		cr_assert_eq(ddp_error_term(v[i].e), v[i].term,
			     "%s", ddp_error_str(v[i].e));
	cr_assert_eq(ddp_error_term(DDP_ERR_NONE), 0);
}

Test(ddp, error_names_never_null)
{
	for (int e = 0; e < DDP_ERR__COUNT; e++) {
		cr_assert_not_null(ddp_error_str((enum ddp_error)e));
		cr_assert_gt(strlen(ddp_error_str((enum ddp_error)e)), 0);
	}
	cr_assert_str_eq(ddp_error_str(DDP_ERR__COUNT), "unknown DDP error");
	cr_assert_eq(ddp_error_term(DDP_ERR__COUNT), 0x1000);
	cr_assert_eq(ddp_error_term((enum ddp_error)-1), 0x1000);
}

/* ---- round trips ------------------------------------------------------ */

Test(ddp, round_trip_extremes)
{
	static const struct ddp_hdr v[] = {
		{ .tagged = true, .last = false, .ulp_ctrl = 0xff,
		  .t = { .stag = 0, .to = 0 } },
		{ .tagged = true, .last = true, .ulp_ctrl = 0x00,
		  .t = { .stag = UINT32_MAX, .to = UINT64_MAX } },
		{ .tagged = false, .last = true, .ulp_ctrl = 0x47,
		  .u = { .ulp_word = UINT32_MAX, .qn = UINT32_MAX,
			 .msn = UINT32_MAX, .mo = UINT32_MAX } },
		{ .tagged = false, .last = false, .ulp_ctrl = 0x41,
		  .u = { .ulp_word = 0, .qn = 1, .msn = 0x80000000u,
			 .mo = 0x00ff00ffu } },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint8_t buf[DDP_UNTAGGED_HDR_LEN];
		struct ddp_hdr got;
		enum ddp_error err;
		int n = ddp_hdr_build(&v[i], buf, sizeof(buf));

		cr_assert_eq(n, (int)ddp_hdr_len(v[i].tagged));
		cr_assert_eq(parse_exact(buf, (size_t)n, &got, &err), n);
		cr_assert_eq(got.tagged, v[i].tagged);
		cr_assert_eq(got.last, v[i].last);
		cr_assert_eq(got.dv, DDP_VERSION);
		cr_assert_eq(got.ulp_ctrl, v[i].ulp_ctrl);
		if (v[i].tagged) {
			cr_assert_eq(got.t.stag, v[i].t.stag);
			cr_assert_eq(got.t.to, v[i].t.to);
		} else {
			cr_assert_eq(got.u.ulp_word, v[i].u.ulp_word);
			cr_assert_eq(got.u.qn, v[i].u.qn);
			cr_assert_eq(got.u.msn, v[i].u.msn);
			cr_assert_eq(got.u.mo, v[i].u.mo);
		}
	}
}

/* ---- tamper: version ------------------------------------------------ */

Test(ddp, wrong_dv_is_tagged_version_error)
{
	static const uint8_t bad_dv[] = { 0, 2, 3 };

	for (size_t i = 0; i < sizeof(bad_dv); i++) {
		uint8_t seg[sizeof(tagged_hdr)];
		struct ddp_hdr h;
		enum ddp_error err = DDP_ERR_NONE;

		memcpy(seg, tagged_hdr, sizeof(seg));
		seg[0] = (uint8_t)((seg[0] & ~DDP_CTRL_DV_MASK) | bad_dv[i]);
		cr_assert_eq(parse_exact(seg, sizeof(seg), &h, &err), -EPROTO,
			     "DV %u", bad_dv[i]);
		cr_assert_eq(err, DDP_ERR_T_VERSION, "DV %u", bad_dv[i]);
		cr_assert_eq(h.dv, bad_dv[i]);
		cr_assert_eq(ddp_error_term(err), 0x1104);
	}
}

Test(ddp, wrong_dv_is_untagged_version_error)
{
	static const uint8_t bad_dv[] = { 0, 2, 3 };

	for (size_t i = 0; i < sizeof(bad_dv); i++) {
		uint8_t seg[sizeof(untagged_hdr)];
		struct ddp_hdr h;
		enum ddp_error err = DDP_ERR_NONE;

		memcpy(seg, untagged_hdr, sizeof(seg));
		seg[0] = (uint8_t)((seg[0] & ~DDP_CTRL_DV_MASK) | bad_dv[i]);
		cr_assert_eq(parse_exact(seg, sizeof(seg), &h, &err), -EPROTO,
			     "DV %u", bad_dv[i]);
		cr_assert_eq(err, DDP_ERR_U_VERSION, "DV %u", bad_dv[i]);
		cr_assert_eq(ddp_error_term(err), 0x1206);
	}
}

/* ---- tamper: untagged placement ------------------------------------ */

static struct ddp_untagged_ctx ctx_msn(uint32_t expected, uint32_t window)
{
	struct ddp_untagged_ctx c = {
		.nqueues = 3, .expected_msn = expected, .msn_window = window,
		.buffer_posted = true, .buffer_len = 100,
	};
	return c;
}

static enum ddp_error check_u(uint32_t qn, uint32_t msn, uint32_t mo,
			      uint32_t len, const struct ddp_untagged_ctx *c)
{
	struct ddp_hdr h = { .tagged = false,
			     .u = { .qn = qn, .msn = msn, .mo = mo } };
	enum ddp_error err = DDP_ERR__COUNT;
	int r = ddp_check_untagged(&h, len, c, &err);

	/* 0 and DDP_ERR_NONE, or -EPROTO and a named fault: never a mix. */
	cr_assert_eq(r == 0, err == DDP_ERR_NONE);
	if (r != 0)
		cr_assert_eq(r, -EPROTO);
	return err;
}

Test(ddp, untagged_valid_segment_accepted)
{
	struct ddp_untagged_ctx c = ctx_msn(1, 1);

	cr_assert_eq(check_u(0, 1, 0, 100, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(2, 1, 99, 1, &c), DDP_ERR_NONE);
}

Test(ddp, untagged_invalid_qn)
{
	struct ddp_untagged_ctx c = ctx_msn(1, 1);

	cr_assert_eq(check_u(3, 1, 0, 1, &c), DDP_ERR_U_INVALID_QN);
	cr_assert_eq(check_u(UINT32_MAX, 1, 0, 1, &c), DDP_ERR_U_INVALID_QN);
}

Test(ddp, untagged_msn_off_by_one_is_range_error)
{
	struct ddp_untagged_ctx c = ctx_msn(5, 1);

	cr_assert_eq(check_u(0, 5, 0, 1, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(0, 6, 0, 1, &c), DDP_ERR_U_MSN_RANGE);
	cr_assert_eq(check_u(0, 4, 0, 1, &c), DDP_ERR_U_MSN_RANGE);
}

Test(ddp, untagged_expected_msn_without_buffer)
{
	struct ddp_untagged_ctx c = ctx_msn(5, 1);

	c.buffer_posted = false;
	cr_assert_eq(check_u(0, 5, 0, 1, &c), DDP_ERR_U_MSN_NO_BUFFER);
	/* Out of range stays a range error even without a buffer. */
	cr_assert_eq(check_u(0, 6, 0, 1, &c), DDP_ERR_U_MSN_RANGE);
}

Test(ddp, untagged_msn_window_and_wrap)
{
	struct ddp_untagged_ctx c = ctx_msn(5, 4);

	cr_assert_eq(check_u(0, 8, 0, 1, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(0, 9, 0, 1, &c), DDP_ERR_U_MSN_RANGE);

	/* RFC 5041 4.3: the MSN wraps from 0xFFFFFFFF to 0. */
	c = ctx_msn(UINT32_MAX, 2);
	cr_assert_eq(check_u(0, UINT32_MAX, 0, 1, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(0, 0, 0, 1, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(0, 1, 0, 1, &c), DDP_ERR_U_MSN_RANGE);
	cr_assert_eq(check_u(0, UINT32_MAX - 1, 0, 1, &c),
		     DDP_ERR_U_MSN_RANGE);
}

Test(ddp, untagged_mo_and_length_bounds)
{
	struct ddp_untagged_ctx c = ctx_msn(1, 1);   /* 100-octet buffer */

	cr_assert_eq(check_u(0, 1, 50, 50, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(0, 1, 50, 51, &c), DDP_ERR_U_TOO_LONG);
	cr_assert_eq(check_u(0, 1, 0, 101, &c), DDP_ERR_U_TOO_LONG);
	cr_assert_eq(check_u(0, 1, 99, UINT32_MAX, &c), DDP_ERR_U_TOO_LONG);
	/* MO itself outside the buffer is the distinct "Invalid MO". */
	cr_assert_eq(check_u(0, 1, 100, 1, &c), DDP_ERR_U_INVALID_MO);
	cr_assert_eq(check_u(0, 1, UINT32_MAX, 1, &c), DDP_ERR_U_INVALID_MO);
}

Test(ddp, untagged_mo_plus_length_does_not_overflow)
{
	struct ddp_untagged_ctx c = ctx_msn(1, 1);

	c.buffer_len = (1ull << 33) - 2;     /* == UINT32_MAX + UINT32_MAX */
	cr_assert_eq(check_u(0, 1, UINT32_MAX, UINT32_MAX, &c), DDP_ERR_NONE);
	c.buffer_len--;
	cr_assert_eq(check_u(0, 1, UINT32_MAX, UINT32_MAX, &c),
		     DDP_ERR_U_TOO_LONG);
}

Test(ddp, untagged_zero_length_segment)
{
	struct ddp_untagged_ctx c = ctx_msn(1, 1);

	c.buffer_len = 0;       /* a zero-length receive buffer */
	cr_assert_eq(check_u(0, 1, 0, 0, &c), DDP_ERR_NONE);
	cr_assert_eq(check_u(0, 1, 1, 0, &c), DDP_ERR_U_INVALID_MO);
	/* QN and MSN still matter: an empty message consumes a buffer. */
	cr_assert_eq(check_u(0, 2, 0, 0, &c), DDP_ERR_U_MSN_RANGE);
	c.buffer_posted = false;
	cr_assert_eq(check_u(0, 1, 0, 0, &c), DDP_ERR_U_MSN_NO_BUFFER);
}

/* ---- tamper: tagged placement -------------------------------------- */

static const struct ddp_tagged_buf mr = {
	.valid = true, .same_stream = true, .base_to = 0x1000, .len = 0x100,
};

static enum ddp_error check_t(uint64_t to, uint32_t len,
			      const struct ddp_tagged_buf *b)
{
	struct ddp_hdr h = { .tagged = true, .t = { .stag = 0x100, .to = to } };
	enum ddp_error err = DDP_ERR__COUNT;
	int r = ddp_check_tagged(&h, len, b, &err);

	cr_assert_eq(r == 0, err == DDP_ERR_NONE);
	if (r != 0)
		cr_assert_eq(r, -EPROTO);
	return err;
}

Test(ddp, tagged_exactly_fitting_accepted)
{
	cr_assert_eq(check_t(0x1000, 0x100, &mr), DDP_ERR_NONE);
	cr_assert_eq(check_t(0x10ff, 1, &mr), DDP_ERR_NONE);
	cr_assert_eq(check_t(0x1000, 1, &mr), DDP_ERR_NONE);
}

Test(ddp, tagged_base_and_bounds)
{
	cr_assert_eq(check_t(0x0fff, 2, &mr), DDP_ERR_T_BASE_BOUNDS);
	cr_assert_eq(check_t(0x0fff, 1, &mr), DDP_ERR_T_BASE_BOUNDS);
	cr_assert_eq(check_t(0x10ff, 2, &mr), DDP_ERR_T_BASE_BOUNDS);
	cr_assert_eq(check_t(0x1100, 1, &mr), DDP_ERR_T_BASE_BOUNDS);
	cr_assert_eq(check_t(0x1000, 0x101, &mr), DDP_ERR_T_BASE_BOUNDS);
	cr_assert_eq(check_t(0, 1, &mr), DDP_ERR_T_BASE_BOUNDS);
}

Test(ddp, tagged_to_wrap)
{
	struct ddp_tagged_buf top = mr;

	/* RFC 5041 7.1: "A 64-bit unsigned sum of the DDP Segment payload
	 * length and the TO does not wrap": TO + len == 2^64 already wraps,
	 * so the octet at 2^64 - 1 can never be written. */
	top.base_to = UINT64_MAX - 0xff;     /* buffer ends at 2^64 - 1 */
	cr_assert_eq(check_t(UINT64_MAX - 1, 1, &top), DDP_ERR_NONE);
	cr_assert_eq(check_t(UINT64_MAX - 0xff, 0xff, &top), DDP_ERR_NONE);
	cr_assert_eq(check_t(UINT64_MAX, 1, &top), DDP_ERR_T_TO_WRAP);
	cr_assert_eq(check_t(UINT64_MAX - 0xff, 0x100, &top),
		     DDP_ERR_T_TO_WRAP);
	cr_assert_eq(check_t(UINT64_MAX, 2, &mr), DDP_ERR_T_TO_WRAP);
}

Test(ddp, tagged_whole_address_space_buffer)
{
	struct ddp_tagged_buf all = { .valid = true, .same_stream = true,
				      .base_to = 0, .len = UINT64_MAX };

	cr_assert_eq(check_t(0, UINT32_MAX, &all), DDP_ERR_NONE);
	cr_assert_eq(check_t(UINT64_MAX - 9, 9, &all), DDP_ERR_NONE);
	/* Ends at 2^64: the TO + length sum wraps before bounds matter. */
	cr_assert_eq(check_t(UINT64_MAX - 9, 10, &all), DDP_ERR_T_TO_WRAP);
}

Test(ddp, tagged_invalid_stag)
{
	struct ddp_tagged_buf b = mr;

	b.valid = false;
	cr_assert_eq(check_t(0x1000, 1, &b), DDP_ERR_T_INVALID_STAG);
	b.same_stream = false;      /* invalid is reported first */
	cr_assert_eq(check_t(0x1000, 1, &b), DDP_ERR_T_INVALID_STAG);
}

Test(ddp, tagged_stag_not_associated)
{
	struct ddp_tagged_buf b = mr;

	b.same_stream = false;
	cr_assert_eq(check_t(0x1000, 1, &b), DDP_ERR_T_STAG_NOT_ASSOC);
	/* Checked before bounds: the buffer is not ours to describe. */
	cr_assert_eq(check_t(0, 1, &b), DDP_ERR_T_STAG_NOT_ASSOC);
}

Test(ddp, tagged_zero_length_not_checked)
{
	/* RFC 5041 5.2: STag and TO "MUST NOT be checked" when empty. */
	struct ddp_tagged_buf b = { .valid = false };

	cr_assert_eq(check_t(UINT64_MAX, 0, &b), DDP_ERR_NONE);
	cr_assert_eq(check_t(0, 0, &mr), DDP_ERR_NONE);
}

/* ---- the shared range check (DDP placement and RDMAP alike) --------- */

/*
 * Edge cases of ddp_tagged_range(): TOs near 2^64, lengths near 2^32 and
 * 2^64, buffers that end exactly at the top of the TO space (where
 * base_to + buf_len would wrap if it were formed), empty buffers and
 * empty ranges.
 */
Test(ddp, tagged_range_table)
{
	static const uint64_t M = UINT64_MAX;
	static const uint64_t G = UINT32_MAX;   /* 2^32 - 1 */
	static const struct {
		uint64_t base, blen, to, len;
		enum ddp_error want;
	} rows[] = {
		/* inside, exactly fitting, one octet at either end */
		{ 0x1000, 0x100, 0x1000, 0x100, DDP_ERR_NONE },
		{ 0x1000, 0x100, 0x10ff, 1, DDP_ERR_NONE },
		{ 0x1000, 0x100, 0x1000, 1, DDP_ERR_NONE },
		/* one octet out on either side */
		{ 0x1000, 0x100, 0x0fff, 1, DDP_ERR_T_BASE_BOUNDS },
		{ 0x1000, 0x100, 0x0fff, 2, DDP_ERR_T_BASE_BOUNDS },
		{ 0x1000, 0x100, 0x1100, 1, DDP_ERR_T_BASE_BOUNDS },
		{ 0x1000, 0x100, 0x10ff, 2, DDP_ERR_T_BASE_BOUNDS },
		{ 0x1000, 0x100, 0x1000, 0x101, DDP_ERR_T_BASE_BOUNDS },
		/* far past the end: to - base larger than the buffer */
		{ 0x1000, 0x100, M - 0x100, 1, DDP_ERR_T_BASE_BOUNDS },
		/* empty range: nothing to check, wherever it points */
		{ 0x1000, 0x100, 0, 0, DDP_ERR_NONE },
		{ 0x1000, 0x100, M, 0, DDP_ERR_NONE },
		{ 0, 0, M, 0, DDP_ERR_NONE },
		/* empty buffer holds no octet */
		{ 0x1000, 0, 0x1000, 1, DDP_ERR_T_BASE_BOUNDS },
		{ M, 0, M - 1, 1, DDP_ERR_T_BASE_BOUNDS },
		/* buffer ending at 2^64 - 1: base + blen would be 2^64 */
		{ M - 0xff, 0x100, M - 0xff, 0xff, DDP_ERR_NONE },
		{ M - 0xff, 0x100, M - 1, 1, DDP_ERR_NONE },
		/* TO + len == 2^64 wraps (RFC 5041 7.1), even inside it */
		{ M - 0xff, 0x100, M, 1, DDP_ERR_T_TO_WRAP },
		{ M - 0xff, 0x100, M - 0xff, 0x100, DDP_ERR_T_TO_WRAP },
		/* a buffer whose base + blen is far above 2^64 */
		{ M - 0xff, M, M - 0x10, 0x10, DDP_ERR_NONE },
		{ M - 0xff, M, M - 0x100, 1, DDP_ERR_T_BASE_BOUNDS },
		/* lengths near 2^32 */
		{ 0, G, 0, G, DDP_ERR_NONE },
		{ 0, G, 1, G, DDP_ERR_T_BASE_BOUNDS },
		{ 0, G, 0, G + 1, DDP_ERR_T_BASE_BOUNDS },
		{ 1, G + 1, 1, G + 1, DDP_ERR_NONE },
		{ M - G, G, M - G, G, DDP_ERR_NONE },
		{ M - G, G + 1, M - G, G + 1, DDP_ERR_T_TO_WRAP },
		{ M - G + 1, G, M - G + 1, G, DDP_ERR_T_TO_WRAP },
		/* lengths near 2^64 */
		{ 0, M, 0, M, DDP_ERR_NONE },
		{ 0, M, 1, M, DDP_ERR_T_TO_WRAP },
		{ 1, M, 1, M - 1, DDP_ERR_NONE },
		{ 1, M - 1, 0, M - 1, DDP_ERR_T_BASE_BOUNDS },
		{ 0, M - 1, 0, M, DDP_ERR_T_BASE_BOUNDS },
		/* TO below the base, even with a length that would reach it */
		{ 0x1000, 0x100, 0, 0x1001, DDP_ERR_T_BASE_BOUNDS },
		{ M, 1, 0, M, DDP_ERR_T_BASE_BOUNDS },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		enum ddp_error got = ddp_tagged_range(rows[i].base, rows[i].blen,
						      rows[i].to, rows[i].len);

		cr_assert_eq(got, rows[i].want,
			     "row %zu: base %#llx len %#llx, [%#llx +%#llx): "
			     "got %s, want %s", i,
			     (unsigned long long)rows[i].base,
			     (unsigned long long)rows[i].blen,
			     (unsigned long long)rows[i].to,
			     (unsigned long long)rows[i].len,
			     ddp_error_str(got), ddp_error_str(rows[i].want));
	}
	cr_log_info("%zu range rows", sizeof(rows) / sizeof(rows[0]));
}

/* ddp_check_tagged() applies exactly that range check to every segment. */
Test(ddp, tagged_check_uses_range)
{
	static const uint64_t tos[] = { 0, 0x0fff, 0x1000, 0x10ff, 0x1100,
					UINT64_MAX - 1, UINT64_MAX };
	static const uint32_t lens[] = { 1, 2, 0x100, 0x101, UINT32_MAX };

	for (size_t i = 0; i < sizeof(tos) / sizeof(tos[0]); i++)
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++)
			cr_assert_eq(check_t(tos[i], lens[j], &mr),
				     ddp_tagged_range(mr.base_to, mr.len,
						      tos[i], lens[j]),
				     "TO %#llx len %u",
				     (unsigned long long)tos[i], lens[j]);
}

/* ---- segmentation -------------------------------------------------- */

struct seg_stats {
	uint64_t count;
	uint64_t covered;
};

/*
 * Cut a message and check every segment: header copied from the template,
 * TO/MO following the payload offset, L on the last segment only, payload
 * spans tiling [0, msg_len) in order, each no larger than max_payload and
 * all but the last exactly max_payload.
 */
static struct seg_stats run_seg(const struct ddp_hdr *tmpl, uint64_t msg_len,
				uint32_t mulpdu)
{
	uint32_t max = mulpdu - (uint32_t)ddp_hdr_len(tmpl->tagged);
	struct seg_stats s = { 0 };
	struct ddp_seg_iter it;
	struct ddp_hdr h;
	uint64_t off;
	uint32_t len;
	int r;

	cr_assert_eq(ddp_seg_init(&it, tmpl, msg_len, mulpdu), 0);
	while ((r = ddp_seg_next(&it, &h, &off, &len)) == 1) {
		bool last = off + len == msg_len;

		cr_assert_eq(off, s.covered, "segment %lu starts at %lu",
			     (unsigned long)s.count, (unsigned long)off);
		cr_assert_leq(len, max);
		cr_assert_eq(h.last, last, "L on segment %lu",
			     (unsigned long)s.count);
		if (!last)
			cr_assert_eq(len, max);
		cr_assert_eq(h.tagged, tmpl->tagged);
		cr_assert_eq(h.ulp_ctrl, tmpl->ulp_ctrl);
		if (tmpl->tagged) {
			cr_assert_eq(h.t.stag, tmpl->t.stag);
			cr_assert_eq(h.t.to, tmpl->t.to + off);
		} else {
			cr_assert_eq(h.u.ulp_word, tmpl->u.ulp_word);
			cr_assert_eq(h.u.qn, tmpl->u.qn);
			cr_assert_eq(h.u.msn, tmpl->u.msn);
			cr_assert_eq(h.u.mo, (uint32_t)off);
			cr_assert_eq((uint64_t)h.u.mo, off);
		}
		s.covered += len;
		s.count++;
		cr_assert_leq(s.count, msg_len + 1, "runaway iterator");
	}
	cr_assert_eq(r, 0);
	cr_assert_eq(s.covered, msg_len);
	cr_assert_eq(s.count, ddp_seg_count(msg_len, max));
	/* Done stays done. */
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 0);
	return s;
}

static void seg_sizes(bool tagged)
{
	const uint32_t mulpdu = 1500;
	const uint64_t max = mulpdu - ddp_hdr_len(tagged);
	struct ddp_hdr tmpl = { .tagged = tagged, .last = true,
				.ulp_ctrl = tagged ? 0x40 : 0x43 };
	static const struct { uint64_t mul; int64_t add; uint64_t segs; } v[] = {
		{ 0, 0, 1 },            /* 0 octets */
		{ 0, 1, 1 },            /* 1 */
		{ 1, -1, 1 },           /* max - 1 */
		{ 1, 0, 1 },            /* max */
		{ 1, 1, 2 },            /* max + 1 */
		{ 10, 7, 11 },          /* 10 * max + 7 */
	};

	if (tagged) {
		tmpl.t.stag = 0xabcdef01;
		tmpl.t.to = 0x7fff0000;
	} else {
		tmpl.u.ulp_word = 0;
		tmpl.u.qn = 0;
		tmpl.u.msn = 42;
		tmpl.u.mo = 0xdead;   /* overwritten per segment */
	}
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint64_t len = (uint64_t)((int64_t)(v[i].mul * max) + v[i].add);
		struct seg_stats s = run_seg(&tmpl, len, mulpdu);

		cr_assert_eq(s.count, v[i].segs, "%lu octets",
			     (unsigned long)len);
	}
}

Test(ddp, segmentation_tagged_sizes)
{
	seg_sizes(true);
}

Test(ddp, segmentation_untagged_sizes)
{
	seg_sizes(false);
}

Test(ddp, segmentation_rfc_examples)
{
	/* RFC 5041 5.2: 2048 octets, MULPDU 1500. */
	struct ddp_hdr u = { .tagged = false, .u = { .msn = 1 } };
	struct ddp_hdr t = { .tagged = true, .t = { .stag = 1, .to = 16384 } };
	struct ddp_seg_iter it;
	struct ddp_hdr h;
	uint64_t off;
	uint32_t len;

	cr_assert_eq(ddp_seg_init(&it, &u, 2048, 1500), 0);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 1);
	cr_assert_eq(h.u.mo, 0);
	cr_assert_eq(len, 1482);
	cr_assert_not(h.last);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 1);
	cr_assert_eq(h.u.mo, 1482);
	cr_assert_eq(len, 566);
	cr_assert(h.last);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 0);

	cr_assert_eq(ddp_seg_init(&it, &t, 2048, 1500), 0);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 1);
	cr_assert_eq(h.t.to, 16384);
	cr_assert_eq(len, 1486);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 1);
	cr_assert_eq(h.t.to, 17870);
	cr_assert_eq(len, 562);
	cr_assert(h.last);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 0);
}

Test(ddp, segmentation_zero_length_is_one_last_segment)
{
	struct ddp_hdr t = { .tagged = true, .t = { .stag = 9, .to = 77 } };
	struct ddp_seg_iter it;
	struct ddp_hdr h;
	uint64_t off = 1;
	uint32_t len = 1;

	cr_assert_eq(ddp_seg_init(&it, &t, 0, 100), 0);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 1);
	cr_assert(h.last);
	cr_assert_eq(off, 0);
	cr_assert_eq(len, 0);
	cr_assert_eq(h.t.to, 77);
	cr_assert_eq(ddp_seg_next(&it, &h, &off, &len), 0);
}

Test(ddp, segmentation_smallest_mulpdu)
{
	struct ddp_hdr u = { .tagged = false };
	struct ddp_hdr t = { .tagged = true };

	/* One payload octet per segment. */
	cr_assert_eq(run_seg(&u, 5, DDP_UNTAGGED_HDR_LEN + 1).count, 5);
	cr_assert_eq(run_seg(&t, 5, DDP_TAGGED_HDR_LEN + 1).count, 5);
}

Test(ddp, segmentation_longest_untagged_message)
{
	struct ddp_hdr u = { .tagged = false, .u = { .qn = 0, .msn = 3 } };
	struct seg_stats s = run_seg(&u, UINT32_MAX, 65535);

	cr_assert_eq(s.covered, UINT32_MAX);
}

Test(ddp, segmentation_init_rejects)
{
	struct ddp_hdr u = { .tagged = false }, t = { .tagged = true };
	struct ddp_seg_iter it;

	/* No room for payload. */
	cr_assert_eq(ddp_seg_init(&it, &u, 1, DDP_UNTAGGED_HDR_LEN), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &u, 1, DDP_UNTAGGED_HDR_LEN - 1),
		     -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &u, 0, 0), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &t, 1, DDP_TAGGED_HDR_LEN), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &t, 1, DDP_TAGGED_HDR_LEN + 1), 0);
	/* RFC 5041 5.2: a ULP message is shorter than 2^32 octets. */
	cr_assert_eq(ddp_seg_init(&it, &u, 1ull << 32, 1500), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &t, 1ull << 32, 1500), -EINVAL);
	cr_assert_eq(ddp_seg_init(&it, &u, UINT32_MAX, 1500), 0);
	/* A tagged message's TO + length may not wrap 64 bits. */
	t.t.to = UINT64_MAX - 9;
	cr_assert_eq(ddp_seg_init(&it, &t, 9, 1500), 0);
	cr_assert_eq(ddp_seg_init(&it, &t, 10, 1500), -EINVAL);
}

Test(ddp, segment_count)
{
	cr_assert_eq(ddp_seg_count(0, 100), 1);
	cr_assert_eq(ddp_seg_count(0, 0), 1);
	cr_assert_eq(ddp_seg_count(1, 100), 1);
	cr_assert_eq(ddp_seg_count(100, 100), 1);
	cr_assert_eq(ddp_seg_count(101, 100), 2);
	cr_assert_eq(ddp_seg_count(1007, 100), 11);
	cr_assert_eq(ddp_seg_count(UINT64_MAX, 1), UINT64_MAX);
	cr_assert_eq(ddp_seg_count(5, 0), 0);
}

/*
 * The peeks of a last segment (ddp_untagged_last_peek,
 * ddp_tagged_last_peek), over every control octet (T, L, the reserved
 * bits, DV): each says yes exactly for a last segment of its kind of DDP
 * version 1, and then fills the header as ddp_hdr_parse does; else it
 * leaves the header alone.
 */
static void check_last_peek(bool tagged)
{
	_Static_assert(DDP_TAGGED_HDR_LEN <= DDP_UNTAGGED_HDR_LEN,
		       "b holds either header");
	uint8_t b[DDP_UNTAGGED_HDR_LEN];
	size_t len = tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;

	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)((tagged ? 0x1d : 0x11) * i + (tagged ? 3 : 7));
	for (unsigned int ctrl = 0; ctrl < 256; ctrl++) {
		struct ddp_hdr p, q;
		enum ddp_error e;
		bool want = !!(ctrl & DDP_CTRL_T) == tagged &&
			    (ctrl & DDP_CTRL_L) &&
			    (ctrl & DDP_CTRL_DV_MASK) == DDP_VERSION;
		bool got;

		b[0] = (uint8_t)ctrl;
		memset(&p, 0xa5, sizeof(p));
		got = tagged ? ddp_tagged_last_peek(b, &p) :
			       ddp_untagged_last_peek(b, &p);
		cr_assert_eq(got, want, "%#x", ctrl);
		if (!want) {
			memset(&q, 0xa5, sizeof(q));
			cr_assert_eq(memcmp(&p, &q, sizeof(p)), 0,
				     "%#x: untouched", ctrl);
			continue;
		}
		cr_assert_eq(ddp_hdr_parse(b, len, &q, &e), (int)len);
		cr_assert_eq(p.tagged, q.tagged);
		cr_assert_eq(p.last, q.last);
		cr_assert_eq(p.dv, q.dv);
		cr_assert_eq(p.ulp_ctrl, q.ulp_ctrl);
		if (tagged) {
			cr_assert_eq(p.t.stag, q.t.stag);
			cr_assert_eq(p.t.to, q.t.to);
		} else {
			cr_assert_eq(p.u.ulp_word, q.u.ulp_word);
			cr_assert_eq(p.u.qn, q.u.qn);
			cr_assert_eq(p.u.msn, q.u.msn);
			cr_assert_eq(p.u.mo, q.u.mo);
		}
	}
}

Test(ddp, untagged_last_peek_matches_parse)
{
	check_last_peek(false);
}

Test(ddp, tagged_last_peek_matches_parse)
{
	check_last_peek(true);
}
