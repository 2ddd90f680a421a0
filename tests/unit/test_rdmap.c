/* SPDX-License-Identifier: MIT */
/*
 * RDMAP (RFC 5040): opcode table, DDP + RDMAP header codec, Read Request,
 * fault encodings and the Terminate message. Safety cases first, then
 * known-answer bytes written from the RFC 5040 section 4 figures, round
 * trips and tamper cases.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap.h"
#include "test_util.h"

/* Read Request on QN 1, MSN 1, MO 0, L set, then the 28-octet header. */
static const uint8_t read_req[] = {
	0x41,                   /* T=0 L=1 DV=1 */
	0x41,                   /* RV=1 opcode 1 */
	0x00, 0x00, 0x00, 0x00, /* RsvdULP */
	0x00, 0x00, 0x00, 0x01, /* QN 1 */
	0x00, 0x00, 0x00, 0x01, /* MSN 1 */
	0x00, 0x00, 0x00, 0x00, /* MO 0 */
	0x0a, 0x0b, 0x0c, 0x0d, /* Data Sink STag */
	0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, /* Data Sink TO */
	0x00, 0x01, 0x00, 0x00, /* RDMA Read Message Size 65536 */
	0x01, 0x02, 0x03, 0x04, /* Data Source STag */
	0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* Data Source TO */
};

static const uint8_t read_resp[] = {
	0xc1, 0x42, 0x12, 0x34, 0x56, 0x78,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
};

static int parse_exact(const uint8_t *bytes, size_t len, struct rdmap_hdr *h,
		       struct rdmap_fault *f)
{
	uint8_t *p = exact_copy(bytes, len);
	int r = rdmap_hdr_parse(p, len, h, f);

	free(p);
	return r;
}

static int term_parse_exact(const uint8_t *bytes, size_t len,
			    struct rdmap_terminate *t)
{
	uint8_t *p = exact_copy(bytes, len);
	int r = rdmap_term_parse(p, len, t);

	free(p);
	return r;
}

/* Build a minimal valid header for op into buf; returns its length. */
static size_t build_op(unsigned int op, uint8_t *buf, size_t cap)
{
	struct rdmap_hdr h = { .opcode = (uint8_t)op, .ddp = { .last = true } };
	int n;

	if (!rdmap_op(op)->tagged)
		h.ddp.u.msn = 1;
	n = rdmap_hdr_build(&h, buf, cap);
	cr_assert_gt(n, 0, "opcode %u", op);
	return (size_t)n;
}

/* ---- safety ---------------------------------------------------------- */

Test(rdmap, null_arguments)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_SEND };
	struct rdmap_read_req r = { 0 };
	struct rdmap_terminate t = { 0 };
	struct rdmap_fault f = rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE);
	uint8_t buf[64] = { 0 };

	cr_assert_eq(rdmap_hdr_build(NULL, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(rdmap_hdr_build(&h, NULL, sizeof(buf)), -EINVAL);
	cr_assert_eq(rdmap_hdr_parse(NULL, 18, &h, &f), -EINVAL);
	cr_assert_eq(rdmap_hdr_parse(buf, 18, NULL, &f), -EINVAL);
	cr_assert_eq(rdmap_hdr_parse(buf, 18, &h, NULL), -EINVAL);
	cr_assert_eq(rdmap_read_req_build(NULL, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(rdmap_read_req_build(&r, NULL, sizeof(buf)), -EINVAL);
	cr_assert_eq(rdmap_read_req_parse(NULL, 28, &r), -EINVAL);
	cr_assert_eq(rdmap_read_req_parse(buf, 28, NULL), -EINVAL);
	cr_assert_eq(rdmap_term_build(NULL, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(rdmap_term_build(&t, NULL, sizeof(buf)), -EINVAL);
	cr_assert_eq(rdmap_term_parse(NULL, 4, &t), -EINVAL);
	cr_assert_eq(rdmap_term_parse(buf, 4, NULL), -EINVAL);

	/* from_fault with NULL t / fault must simply return. */
	rdmap_term_from_fault(NULL, &f, buf, sizeof(buf), 10);
	t.term = 0x7777;
	rdmap_term_from_fault(&t, NULL, buf, sizeof(buf), 10);
	cr_assert_eq(t.term, 0x7777);
}

Test(rdmap, every_short_prefix_is_a_protocol_error)
{
	for (unsigned int op = 0; op < 8; op++) {
		uint8_t full[64];
		size_t n = build_op(op, full, sizeof(full));
		size_t ddp_len = ddp_hdr_len(rdmap_op(op)->tagged);

		cr_assert_eq(n, rdmap_hdr_len(op));
		for (size_t len = 0; len < n; len++) {
			struct rdmap_hdr h;
			struct rdmap_fault f = { .layer = 7 };

			cr_assert_eq(parse_exact(full, len, &h, &f), -EPROTO,
				     "opcode %u, %zu octets", op, len);
			if (len < ddp_len) {
				cr_assert_eq(f.layer, RDMAP_LAYER_DDP);
				cr_assert_eq(f.code, DDP_ERR_SEG_TOO_SHORT);
				cr_assert_eq(f.term, 0x1000);
			} else {
				/* Only the Read Request has an RDMAP part. */
				cr_assert_eq(op, RDMAP_OP_READ_REQ);
				cr_assert_eq(f.layer, RDMAP_LAYER_RDMAP);
				cr_assert_eq(f.code,
					     RDMAP_ERR_OP_CATASTROPHIC_STREAM);
				cr_assert_eq(f.term, 0x0207);
			}
		}
	}
}

Test(rdmap, read_req_short_prefix_asks_for_more)
{
	for (size_t len = 0; len < RDMAP_READ_REQ_LEN; len++) {
		struct rdmap_read_req r;
		uint8_t *p = exact_copy(read_req + 18, len);

		cr_assert_eq(rdmap_read_req_parse(p, len, &r), -EAGAIN,
			     "%zu octets", len);
		free(p);
	}
}

Test(rdmap, terminate_every_short_prefix_rejected)
{
	/* Control (M D R) + length + Read Request DDP header + its RDMA
	 * header: every strict prefix promises more than it holds. */
	uint8_t body[RDMAP_TERM_MAX_LEN] = { 0x01, 0x02, 0xe0, 0x00, 0x00, 46 };

	memcpy(body + 6, read_req, sizeof(read_req));
	for (size_t len = 0; len < sizeof(body); len++) {
		struct rdmap_terminate t;

		cr_assert_eq(term_parse_exact(body, len, &t), -EPROTO,
			     "%zu octets", len);
	}
	{
		struct rdmap_terminate t;

		cr_assert_eq(term_parse_exact(body, sizeof(body), &t),
			     (int)sizeof(body));
	}
}

Test(rdmap, build_short_buffer)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_REQ };
	struct rdmap_terminate t = {
		.term = 0x0102, .has_seg_len = true, .seg_len = 46,
		.has_ddp_hdr = true, .ddp_hdr_len = 18,
		.has_rdma_hdr = true, .rdma_hdr_len = 28,
	};
	uint8_t buf[RDMAP_TERM_MAX_LEN];

	memcpy(t.ddp_hdr, read_req, 18);
	for (size_t cap = 0; cap < 46; cap++) {
		memset(buf, 0xaa, sizeof(buf));
		cr_assert_eq(rdmap_hdr_build(&h, buf, cap), -ENOSPC, "%zu", cap);
		for (size_t i = 0; i < sizeof(buf); i++)
			cr_assert_eq(buf[i], 0xaa, "cap %zu octet %zu", cap, i);
	}
	for (size_t cap = 0; cap < RDMAP_TERM_MAX_LEN; cap++)
		cr_assert_eq(rdmap_term_build(&t, buf, cap), -ENOSPC, "%zu",
			     cap);
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)),
		     RDMAP_TERM_MAX_LEN);
	cr_assert_eq(rdmap_read_req_build(&h.rreq, buf, 27), -ENOSPC);
}

/* ---- opcode table ------------------------------------------------------ */

Test(rdmap, opcode_table_matches_rfc)
{
	static const struct {
		bool tagged; uint8_t qn; bool inval, se, request;
		size_t hdr_len;
	} want[8] = {
		[RDMAP_OP_WRITE]       = { true,  0, false, false, true,  14 },
		[RDMAP_OP_READ_REQ]    = { false, 1, false, false, true,  46 },
		[RDMAP_OP_READ_RESP]   = { true,  0, false, false, false, 14 },
		[RDMAP_OP_SEND]        = { false, 0, false, false, true,  18 },
		[RDMAP_OP_SEND_INV]    = { false, 0, true,  false, true,  18 },
		[RDMAP_OP_SEND_SE]     = { false, 0, false, true,  true,  18 },
		[RDMAP_OP_SEND_SE_INV] = { false, 0, true,  true,  true,  18 },
		[RDMAP_OP_TERMINATE]   = { false, 2, false, false, false, 18 },
	};

	for (unsigned int op = 0; op < 8; op++) {
		const struct rdmap_op_info *r = rdmap_op(op);

		cr_assert_not_null(r->name, "opcode %u", op);
		cr_assert_eq(r->tagged, want[op].tagged, "opcode %u", op);
		if (!r->tagged)
			cr_assert_eq(r->qn, want[op].qn, "opcode %u", op);
		cr_assert_eq(r->inval_stag, want[op].inval, "opcode %u", op);
		cr_assert_eq(r->solicited, want[op].se, "opcode %u", op);
		cr_assert_eq(r->request, want[op].request, "opcode %u", op);
		cr_assert_eq(r->hdr_len,
			     op == RDMAP_OP_READ_REQ ? RDMAP_READ_REQ_LEN : 0);
		cr_assert_eq(rdmap_hdr_len(op), want[op].hdr_len,
			     "opcode %u", op);
	}
}

Test(rdmap, reserved_opcodes_unsupported)
{
	for (unsigned int op = 8; op < 16; op++) {
		cr_assert_not_null(rdmap_op(op));
		cr_assert_null(rdmap_op(op)->name, "opcode %u", op);
		cr_assert_eq(rdmap_hdr_len(op), 0, "opcode %u", op);
	}
	cr_assert_not_null(rdmap_op(16));
	cr_assert_null(rdmap_op(16)->name);
	cr_assert_null(rdmap_op(~0u)->name);
	cr_assert_eq(rdmap_hdr_len(~0u), 0);
}

/* ---- fault encodings -------------------------------------------------- */

Test(rdmap, rdmap_error_terminate_codes_match_rfc)
{
	static const struct { enum rdmap_error e; uint16_t term; } v[] = {
		{ RDMAP_ERR_LOCAL_CATASTROPHIC,    0x0000 },
		{ RDMAP_ERR_PROT_INVALID_STAG,     0x0100 },
		{ RDMAP_ERR_PROT_BASE_BOUNDS,      0x0101 },
		{ RDMAP_ERR_PROT_ACCESS,           0x0102 },
		{ RDMAP_ERR_PROT_STAG_NOT_ASSOC,   0x0103 },
		{ RDMAP_ERR_PROT_TO_WRAP,          0x0104 },
		{ RDMAP_ERR_PROT_CANT_INVALIDATE,  0x0109 },
		{ RDMAP_ERR_PROT_UNSPECIFIED,      0x01ff },
		{ RDMAP_ERR_OP_VERSION,            0x0205 },
		{ RDMAP_ERR_OP_OPCODE,             0x0206 },
		{ RDMAP_ERR_OP_CATASTROPHIC_STREAM, 0x0207 },
		{ RDMAP_ERR_OP_CATASTROPHIC_GLOBAL, 0x0208 },
		{ RDMAP_ERR_OP_CANT_INVALIDATE,    0x0209 },
		{ RDMAP_ERR_OP_UNSPECIFIED,        0x02ff },
	};

	cr_assert_eq(sizeof(v) / sizeof(v[0]), RDMAP_ERR__COUNT - 1);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct rdmap_fault f = rdmap_fault_rdmap(v[i].e);

		cr_assert_eq(rdmap_error_term(v[i].e), v[i].term, "%s",
			     rdmap_error_str(v[i].e));
		cr_assert_eq(f.layer, RDMAP_LAYER_RDMAP);
		cr_assert_eq(f.code, (int)v[i].e);
		cr_assert_eq(f.term, v[i].term);
	}
	for (int e = 0; e < RDMAP_ERR__COUNT; e++)
		cr_assert_not_null(rdmap_error_str((enum rdmap_error)e));
	cr_assert_str_eq(rdmap_error_str(RDMAP_ERR__COUNT),
			 "unknown RDMAP error");
}

Test(rdmap, fault_constructors_encode_layer)
{
	struct rdmap_fault d = rdmap_fault_ddp(DDP_ERR_T_BASE_BOUNDS);
	struct rdmap_fault a = rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS);
	struct rdmap_fault o = rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE);
	struct rdmap_fault l = rdmap_fault_llp(2, 0x2002);

	cr_assert_eq(d.layer, RDMAP_LAYER_DDP);
	cr_assert_eq(d.code, DDP_ERR_T_BASE_BOUNDS);
	cr_assert_eq(d.term, 0x1101);
	cr_assert_eq(a.term, 0x0102);
	cr_assert_eq(o.term, 0x0206);
	cr_assert_eq(l.layer, RDMAP_LAYER_LLP);
	cr_assert_eq(l.code, 2);
	cr_assert_eq(l.term, 0x2002);
	cr_assert_eq(rdmap_term_layer(d.term), 1);
	cr_assert_eq(rdmap_term_etype(d.term), 1);
	cr_assert_eq(rdmap_term_code(d.term), 1);
	cr_assert_eq(rdmap_term_layer(l.term), 2);
	cr_assert_eq(rdmap_fault_ddp(DDP_ERR_U_INVALID_QN).term, 0x1201);
}

/* ---- known answers ---------------------------------------------------- */

/* h builds to exactly want[0..len), hl octets, and want parses back
 * (from a buffer of exactly len octets) into got, hl octets used. */
static void known_answer(const struct rdmap_hdr *h, const uint8_t *want,
			 size_t len, int hl, struct rdmap_hdr *got)
{
	struct rdmap_fault f;
	uint8_t *buf = malloc(len);

	cr_assert_not_null(buf);
	cr_assert_eq(rdmap_hdr_build(h, buf, len), hl);
	cr_assert_arr_eq(buf, want, len);
	free(buf);
	cr_assert_eq(parse_exact(want, len, got, &f), hl);
}

Test(rdmap, write_header_bytes)
{
	static const uint8_t want[] = {
		0xc1, 0x40,                     /* T L DV=1 | RV=1 op 0 */
		0x11, 0x22, 0x33, 0x44,         /* STag */
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, /* TO 2^32 */
	};
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_WRITE,
		.ddp = { .last = true,
			 .t = { .stag = 0x11223344, .to = 1ull << 32 } },
	};
	struct rdmap_hdr got;

	known_answer(&h, want, sizeof(want), 14, &got);
	cr_assert_eq(got.opcode, RDMAP_OP_WRITE);
	cr_assert_eq(got.rv, 1);
	cr_assert(got.ddp.tagged);
	cr_assert_eq(got.ddp.t.stag, 0x11223344u);
	cr_assert_eq(got.ddp.t.to, 1ull << 32);
}

Test(rdmap, read_response_header_bytes)
{
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_READ_RESP,
		.ddp = { .last = true, .t = { .stag = 0x12345678, .to = 0xabcd } },
	};
	struct rdmap_hdr got;

	known_answer(&h, read_resp, sizeof(read_resp), 14, &got);
	cr_assert_eq(got.opcode, RDMAP_OP_READ_RESP);
	cr_assert_eq(got.rv, 1);
	cr_assert(got.ddp.tagged);
	cr_assert(got.ddp.last);
	cr_assert_eq(got.ddp.t.stag, 0x12345678u);
	cr_assert_eq(got.ddp.t.to, 0xabcdu);
}

Test(rdmap, send_header_bytes)
{
	static const uint8_t want[] = {
		0x01, 0x43,                     /* not last | Send */
		0x00, 0x00, 0x00, 0x00,         /* reserved */
		0x00, 0x00, 0x00, 0x00,         /* QN 0 */
		0x00, 0x00, 0x01, 0x00,         /* MSN 256 */
		0x00, 0x00, 0x10, 0x00,         /* MO 4096 */
	};
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_SEND,
		.ddp = { .u = { .msn = 256, .mo = 4096 } },
	};
	struct rdmap_hdr got;

	known_answer(&h, want, sizeof(want), 18, &got);
	cr_assert_eq(got.opcode, RDMAP_OP_SEND);
	cr_assert_not(got.ddp.last);
	cr_assert_eq(got.ddp.u.qn, 0);
	cr_assert_eq(got.ddp.u.msn, 256);
	cr_assert_eq(got.ddp.u.mo, 4096);
	cr_assert_eq(got.inval_stag, 0);
}

Test(rdmap, send_with_invalidate_header_bytes)
{
	static const uint8_t want[] = {
		0x41, 0x44,                     /* last | Send with Invalidate */
		0xca, 0xfe, 0xf0, 0x0d,         /* Invalidate STag */
		0x00, 0x00, 0x00, 0x00,         /* QN 0 */
		0x00, 0x00, 0x00, 0x02,         /* MSN 2 */
		0x00, 0x00, 0x00, 0x00,         /* MO 0 */
	};
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_SEND_INV, .inval_stag = 0xcafef00d,
		.ddp = { .last = true, .u = { .msn = 2 } },
	};
	struct rdmap_hdr got;

	known_answer(&h, want, sizeof(want), 18, &got);
	cr_assert_eq(got.opcode, RDMAP_OP_SEND_INV);
	cr_assert_eq(got.inval_stag, 0xcafef00du);
	cr_assert_eq(got.ddp.u.msn, 2);
}

Test(rdmap, read_request_header_bytes)
{
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_READ_REQ,
		.ddp = { .last = true, .u = { .msn = 1 } },
		.rreq = {
			.sink_stag = 0x0a0b0c0d,
			.sink_to = 0x1122334455667788ull,
			.size = 65536,
			.src_stag = 0x01020304,
			.src_to = 0x8877665544332211ull,
		},
	};
	struct rdmap_hdr got;

	cr_assert_eq(sizeof(read_req), 46);
	known_answer(&h, read_req, sizeof(read_req), 46, &got);
	cr_assert_eq(got.opcode, RDMAP_OP_READ_REQ);
	cr_assert_eq(got.ddp.u.qn, RDMAP_QN_READ_REQ);
	cr_assert_eq(got.rreq.sink_stag, 0x0a0b0c0du);
	cr_assert_eq(got.rreq.sink_to, 0x1122334455667788ull);
	cr_assert_eq(got.rreq.size, 65536u);
	cr_assert_eq(got.rreq.src_stag, 0x01020304u);
	cr_assert_eq(got.rreq.src_to, 0x8877665544332211ull);
}

Test(rdmap, terminate_header_bytes)
{
	static const uint8_t want[] = {
		0x41, 0x47,                     /* last | Terminate */
		0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x02,         /* QN 2 */
		0x00, 0x00, 0x00, 0x01,         /* MSN 1 */
		0x00, 0x00, 0x00, 0x00,         /* MO 0 */
	};
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_TERMINATE,
		.ddp = { .last = true, .u = { .msn = 1 } },
	};
	struct rdmap_hdr got;

	known_answer(&h, want, sizeof(want), 18, &got);
	cr_assert_eq(got.opcode, RDMAP_OP_TERMINATE);
}

Test(rdmap, terminate_body_for_read_request_fault)
{
	/* RDMAP access violation on the Read Request above, M D R set. */
	static const uint8_t want[] = {
		0x01, 0x02,     /* layer 0, etype 1, code 0x02 */
		0xe0, 0x00,     /* Hdrct M D R, reserved 0 */
		0x00, 0x2e,     /* DDP Segment Length 46 */
		/* terminated DDP header */
		0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
		/* terminated RDMA header */
		0x0a, 0x0b, 0x0c, 0x0d,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
		0x00, 0x01, 0x00, 0x00,
		0x01, 0x02, 0x03, 0x04,
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
	};
	struct rdmap_fault f = rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS);
	struct rdmap_terminate t, got;
	uint8_t buf[RDMAP_TERM_MAX_LEN];

	cr_assert_eq(sizeof(want), RDMAP_TERM_MAX_LEN);
	rdmap_term_from_fault(&t, &f, read_req, sizeof(read_req), 46);
	cr_assert(t.has_seg_len && t.has_ddp_hdr && t.has_rdma_hdr);
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)), 52);
	cr_assert_arr_eq(buf, want, sizeof(want));

	cr_assert_eq(term_parse_exact(want, sizeof(want), &got), 52);
	cr_assert_eq(got.term, 0x0102);
	cr_assert(got.has_seg_len);
	cr_assert_eq(got.seg_len, 46);
	cr_assert(got.has_ddp_hdr);
	cr_assert_eq(got.ddp_hdr_len, 18);
	cr_assert_arr_eq(got.ddp_hdr, read_req, 18);
	cr_assert(got.has_rdma_hdr);
	cr_assert_eq(got.rdma_hdr_len, 28);
	cr_assert_arr_eq(got.rdma_hdr, read_req + 18, 28);
}

Test(rdmap, terminate_body_for_tagged_bounds_fault)
{
	/* DDP base/bounds on the Read Response: M D, 14-octet header. */
	static const uint8_t want[] = {
		0x11, 0x01, 0xc0, 0x00,         /* 0x1101, Hdrct M D */
		0x00, 0x40,                     /* DDP Segment Length 64 */
		0xc1, 0x42, 0x12, 0x34, 0x56, 0x78,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
	};
	struct rdmap_fault f = rdmap_fault_ddp(DDP_ERR_T_BASE_BOUNDS);
	uint8_t seg[64];
	struct rdmap_terminate t, got;
	uint8_t buf[RDMAP_TERM_MAX_LEN];

	memset(seg, 0x5a, sizeof(seg));
	memcpy(seg, read_resp, sizeof(read_resp));
	rdmap_term_from_fault(&t, &f, seg, sizeof(seg), 64);
	cr_assert(t.has_seg_len && t.has_ddp_hdr);
	cr_assert_not(t.has_rdma_hdr);
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)), 20);
	cr_assert_arr_eq(buf, want, sizeof(want));
	cr_assert_eq(term_parse_exact(want, sizeof(want), &got), 20);
	cr_assert_eq(got.term, 0x1101);
	cr_assert_eq(got.ddp_hdr_len, 14);
	cr_assert_not(got.has_rdma_hdr);
}

Test(rdmap, terminate_body_without_headers)
{
	struct rdmap_fault f = rdmap_fault_llp(2, 0x2002);  /* MPA CRC */
	struct rdmap_terminate t, got;
	uint8_t buf[RDMAP_TERM_MAX_LEN];

	rdmap_term_from_fault(&t, &f, read_req, sizeof(read_req), 46);
	cr_assert_eq(t.term, 0x2002);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)), 4);
	cr_assert_eq(buf[0], 0x20);
	cr_assert_eq(buf[1], 0x02);
	cr_assert_eq(buf[2], 0x00);
	cr_assert_eq(buf[3], 0x00);
	cr_assert_eq(term_parse_exact(buf, 4, &got), 4);
	cr_assert_eq(got.term, 0x2002);
	cr_assert_not(got.has_seg_len || got.has_ddp_hdr || got.has_rdma_hdr);
}

/* ---- round trips ------------------------------------------------------ */

Test(rdmap, round_trip_every_opcode)
{
	for (unsigned int op = 0; op < 8; op++) {
		struct rdmap_hdr h = {
			.opcode = (uint8_t)op,
			.inval_stag = 0x55aa55aa,
			.rreq = { 1, 2, 3, 4, 5 },
		};
		struct rdmap_hdr got;
		struct rdmap_fault f;
		uint8_t buf[64];
		int n;

		h.ddp.last = op & 1;
		if (rdmap_op(op)->tagged) {
			h.ddp.t.stag = 0x80000000u | op;
			h.ddp.t.to = UINT64_MAX - op;
		} else {
			h.ddp.u.msn = UINT32_MAX - op;
			h.ddp.u.mo = op * 1000;
		}
		n = rdmap_hdr_build(&h, buf, sizeof(buf));
		cr_assert_eq(n, (int)rdmap_hdr_len(op), "opcode %u", op);
		cr_assert_eq(parse_exact(buf, (size_t)n, &got, &f), n,
			     "opcode %u", op);
		cr_assert_eq(got.opcode, op);
		cr_assert_eq(got.rv, RDMAP_VERSION);
		cr_assert_eq(got.ddp.tagged, rdmap_op(op)->tagged);
		cr_assert_eq(got.ddp.last, h.ddp.last);
		if (got.ddp.tagged) {
			cr_assert_eq(got.ddp.t.stag, h.ddp.t.stag);
			cr_assert_eq(got.ddp.t.to, h.ddp.t.to);
		} else {
			cr_assert_eq(got.ddp.u.qn, rdmap_op(op)->qn);
			cr_assert_eq(got.ddp.u.msn, h.ddp.u.msn);
			cr_assert_eq(got.ddp.u.mo, h.ddp.u.mo);
		}
		cr_assert_eq(got.inval_stag,
			     rdmap_op(op)->inval_stag ? 0x55aa55aau : 0);
		if (op == RDMAP_OP_READ_REQ) {
			cr_assert_eq(got.rreq.sink_stag, 1);
			cr_assert_eq(got.rreq.sink_to, 2);
			cr_assert_eq(got.rreq.size, 3);
			cr_assert_eq(got.rreq.src_stag, 4);
			cr_assert_eq(got.rreq.src_to, 5);
		} else {
			cr_assert_eq(got.rreq.size, 0);
		}
	}
}

Test(rdmap, build_takes_model_and_queue_from_table)
{
	/* A caller's stray T bit, QN or ulp_word must not reach the wire. */
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_SEND, .rv = 3, .inval_stag = 0x12345678,
		.ddp = { .tagged = true, .ulp_ctrl = 0xff,
			 .u = { .ulp_word = 0xffffffff, .qn = 9, .msn = 1 } },
	};
	uint8_t buf[64];

	cr_assert_eq(rdmap_hdr_build(&h, buf, sizeof(buf)), 18);
	cr_assert_eq(buf[0] & DDP_CTRL_T, 0);
	cr_assert_eq(buf[1], 0x43);             /* RV 1, reserved 0, Send */
	cr_assert_eq(buf[2] | buf[3] | buf[4] | buf[5], 0);
	cr_assert_eq(buf[9], RDMAP_QN_SEND);
	cr_assert_eq(buf[6] | buf[7] | buf[8], 0);
}

Test(rdmap, build_rejects_unsupported_opcode)
{
	uint8_t buf[64];

	for (unsigned int op = 8; op < 256; op++) {
		struct rdmap_hdr h = { .opcode = (uint8_t)op };

		cr_assert_eq(rdmap_hdr_build(&h, buf, sizeof(buf)), -EINVAL,
			     "opcode %u", op);
	}
}

Test(rdmap, terminate_round_trip_variants)
{
	for (unsigned int hd = 0; hd < 8; hd++) {
		struct rdmap_terminate t = { .term = 0x1205 }, got;
		uint8_t buf[RDMAP_TERM_MAX_LEN];
		int n;

		t.has_seg_len = hd & 4;
		t.seg_len = t.has_seg_len ? 1234 : 0;
		t.has_ddp_hdr = hd & 2;
		if (t.has_ddp_hdr) {
			memcpy(t.ddp_hdr, read_req, 18);
			t.ddp_hdr_len = 18;
		}
		t.has_rdma_hdr = hd & 1;
		if (t.has_rdma_hdr) {
			memcpy(t.rdma_hdr, read_req + 18, 28);
			t.rdma_hdr_len = 28;
		}
		n = rdmap_term_build(&t, buf, sizeof(buf));
		cr_assert_gt(n, 0, "hdrct %u", hd);
		cr_assert_eq((buf[2] >> 5) & 7, hd);
		cr_assert_eq(term_parse_exact(buf, (size_t)n, &got), n,
			     "hdrct %u", hd);
		cr_assert_eq(got.term, 0x1205);
		cr_assert_eq(got.has_seg_len, t.has_seg_len);
		cr_assert_eq(got.seg_len, t.seg_len);
		cr_assert_eq(got.has_ddp_hdr, t.has_ddp_hdr);
		cr_assert_eq(got.has_rdma_hdr, t.has_rdma_hdr);
		if (t.has_ddp_hdr)
			cr_assert_arr_eq(got.ddp_hdr, t.ddp_hdr, 18);
		if (t.has_rdma_hdr)
			cr_assert_arr_eq(got.rdma_hdr, t.rdma_hdr, 28);
	}
}

/* ---- tamper ----------------------------------------------------------- */

static void expect_fault(const uint8_t *bytes, size_t len,
			 enum rdmap_layer layer, int code, uint16_t term)
{
	struct rdmap_hdr h;
	struct rdmap_fault f = { .layer = 7, .code = -1, .term = 0xffff };

	cr_assert_eq(parse_exact(bytes, len, &h, &f), -EPROTO);
	cr_assert_eq(f.layer, layer);
	cr_assert_eq(f.code, code);
	cr_assert_eq(f.term, term);
}

Test(rdmap, wrong_rv_is_version_error)
{
	for (unsigned int rv = 0; rv < 4; rv++) {
		uint8_t seg[sizeof(read_resp)];

		if (rv == RDMAP_VERSION)
			continue;
		memcpy(seg, read_resp, sizeof(seg));
		seg[1] = (uint8_t)(rv << 6 | RDMAP_OP_READ_RESP);
		expect_fault(seg, sizeof(seg), RDMAP_LAYER_RDMAP,
			     RDMAP_ERR_OP_VERSION, 0x0205);
	}
}

Test(rdmap, wrong_dv_is_ddp_version_error)
{
	uint8_t t[sizeof(read_resp)], u[sizeof(read_req)];

	memcpy(t, read_resp, sizeof(t));
	t[0] = 0xc2;
	expect_fault(t, sizeof(t), RDMAP_LAYER_DDP, DDP_ERR_T_VERSION, 0x1104);
	memcpy(u, read_req, sizeof(u));
	u[0] = 0x40;
	expect_fault(u, sizeof(u), RDMAP_LAYER_DDP, DDP_ERR_U_VERSION, 0x1206);
}

Test(rdmap, reserved_bits_ignored_on_receive)
{
	/* RDMAP Rsvd (0x30) and DDP Rsvd (0x3c) are zero on send and not
	 * checked on receive. */
	uint8_t seg[sizeof(read_resp)];
	struct rdmap_hdr h;
	struct rdmap_fault f;

	memcpy(seg, read_resp, sizeof(seg));
	seg[0] |= DDP_CTRL_RSVD_MASK;
	seg[1] |= RDMAP_CTRL_RSVD_MASK;
	cr_assert_eq(seg[1], 0x72);
	cr_assert_eq(parse_exact(seg, sizeof(seg), &h, &f), 14);
	cr_assert_eq(h.opcode, RDMAP_OP_READ_RESP);
	cr_assert_eq(h.rv, 1);
	cr_assert_eq(h.ddp.t.to, 0xabcd);
}

Test(rdmap, send_reserved_word_ignored_on_receive)
{
	/* Plain Send with a non-zero RsvdULP word: no Invalidate STag. */
	uint8_t seg[18] = { 0x41, 0x43, 0xff, 0xff, 0xff, 0xff,
			    0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0 };
	struct rdmap_hdr h;
	struct rdmap_fault f;

	cr_assert_eq(parse_exact(seg, sizeof(seg), &h, &f), 18);
	cr_assert_eq(h.inval_stag, 0);
	cr_assert_eq(h.ddp.u.ulp_word, 0xffffffffu);
}

Test(rdmap, unsupported_opcodes_rejected)
{
	for (unsigned int op = 8; op < 16; op++) {
		uint8_t t[sizeof(read_resp)], u[sizeof(read_req)];

		memcpy(t, read_resp, sizeof(t));
		t[1] = (uint8_t)(0x40 | op);
		expect_fault(t, sizeof(t), RDMAP_LAYER_RDMAP,
			     RDMAP_ERR_OP_OPCODE, 0x0206);
		memcpy(u, read_req, sizeof(u));
		u[1] = (uint8_t)(0x40 | op);
		expect_fault(u, sizeof(u), RDMAP_LAYER_RDMAP,
			     RDMAP_ERR_OP_OPCODE, 0x0206);
	}
}

Test(rdmap, t_bit_must_match_opcode)
{
	uint8_t tagged[64], untagged[64];

	/* Every untagged opcode inside a tagged header... */
	for (unsigned int op = 0; op < 8; op++) {
		if (rdmap_op(op)->tagged)
			continue;
		memcpy(tagged, read_resp, sizeof(read_resp));
		tagged[1] = (uint8_t)(0x40 | op);
		/* long enough that only the T bit can be wrong */
		memset(tagged + sizeof(read_resp), 0, 50);
		expect_fault(tagged, 64, RDMAP_LAYER_RDMAP,
			     RDMAP_ERR_OP_OPCODE, 0x0206);
	}
	/* ...and every tagged opcode inside an untagged one. */
	memcpy(untagged, read_req, sizeof(read_req));
	untagged[1] = 0x40 | RDMAP_OP_WRITE;
	expect_fault(untagged, sizeof(read_req), RDMAP_LAYER_RDMAP,
		     RDMAP_ERR_OP_OPCODE, 0x0206);
	untagged[1] = 0x40 | RDMAP_OP_READ_RESP;
	expect_fault(untagged, sizeof(read_req), RDMAP_LAYER_RDMAP,
		     RDMAP_ERR_OP_OPCODE, 0x0206);
}

Test(rdmap, untagged_opcode_on_wrong_queue)
{
	static const struct { uint8_t op; uint8_t qn; } v[] = {
		{ RDMAP_OP_SEND, 1 }, { RDMAP_OP_SEND, 2 }, { RDMAP_OP_SEND, 3 },
		{ RDMAP_OP_SEND_INV, 1 }, { RDMAP_OP_SEND_SE, 2 },
		{ RDMAP_OP_SEND_SE_INV, 255 },
		{ RDMAP_OP_READ_REQ, 0 }, { RDMAP_OP_READ_REQ, 2 },
		{ RDMAP_OP_TERMINATE, 0 }, { RDMAP_OP_TERMINATE, 1 },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint8_t seg[sizeof(read_req)];

		memcpy(seg, read_req, sizeof(seg));
		seg[1] = (uint8_t)(0x40 | v[i].op);
		seg[9] = v[i].qn;
		expect_fault(seg, sizeof(seg), RDMAP_LAYER_DDP,
			     DDP_ERR_U_INVALID_QN, 0x1201);
	}
}

Test(rdmap, terminate_from_fault_copies_by_layer)
{
	struct rdmap_fault ddp = rdmap_fault_ddp(DDP_ERR_U_MSN_RANGE);
	struct rdmap_fault llp = rdmap_fault_llp(3, 0x2003);
	struct rdmap_terminate t;
	uint8_t send[18];

	build_op(RDMAP_OP_SEND, send, sizeof(send));

	/* DDP fault on a Send: M D, 18-octet header, no R. */
	rdmap_term_from_fault(&t, &ddp, send, sizeof(send), 18);
	cr_assert_eq(t.term, 0x1203);
	cr_assert(t.has_seg_len && t.has_ddp_hdr);
	cr_assert_eq(t.seg_len, 18);
	cr_assert_eq(t.ddp_hdr_len, 18);
	cr_assert_arr_eq(t.ddp_hdr, send, 18);
	cr_assert_not(t.has_rdma_hdr);

	/* LLP fault: nothing copied even with a whole segment at hand. */
	rdmap_term_from_fault(&t, &llp, read_req, sizeof(read_req), 46);
	cr_assert_eq(t.term, 0x2003);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);

	/* No segment: only the code. */
	rdmap_term_from_fault(&t, &ddp, NULL, 0, 0);
	cr_assert_eq(t.term, 0x1203);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);

	/* Segment shorter than the DDP header its T bit announces. */
	rdmap_term_from_fault(&t, &ddp, read_resp, 13, 13);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);
	rdmap_term_from_fault(&t, &ddp, read_req, 17, 17);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);

	/* Read Request cut inside its RDMA header: M D but no R. */
	rdmap_term_from_fault(&t, &ddp, read_req, sizeof(read_req) - 1, 46);
	cr_assert(t.has_seg_len && t.has_ddp_hdr);
	cr_assert_not(t.has_rdma_hdr);
}

Test(rdmap, terminate_ddp_header_length_must_match_t_bit)
{
	/* D set, tagged T bit, but 18 octets quoted: 4 octets too many. */
	uint8_t tagged18[4 + 2 + 18] = { 0x11, 0x01, 0xc0, 0x00, 0x00, 0x20 };
	/* D set, untagged T bit, but only 14 octets quoted. */
	uint8_t untagged14[4 + 2 + 14] = { 0x12, 0x03, 0xc0, 0x00, 0x00, 0x20 };
	struct rdmap_terminate t;

	memcpy(tagged18 + 6, read_resp, 14);
	cr_assert_eq(term_parse_exact(tagged18, sizeof(tagged18), &t), -EPROTO);
	cr_assert_eq(term_parse_exact(tagged18, 20, &t), 20);

	memcpy(untagged14 + 6, read_req, 14);
	cr_assert_eq(term_parse_exact(untagged14, sizeof(untagged14), &t),
		     -EPROTO);
}

Test(rdmap, terminate_trailing_octets_rejected)
{
	uint8_t body[5] = { 0x00, 0x00, 0x00, 0x00, 0x00 };
	struct rdmap_terminate t;

	cr_assert_eq(term_parse_exact(body, 4, &t), 4);
	cr_assert_eq(term_parse_exact(body, 5, &t), -EPROTO);
}

Test(rdmap, terminate_reserved_bits_ignored)
{
	uint8_t body[4] = { 0x02, 0x06, 0x1f, 0xff };  /* Hdrct 0, Rsvd all 1 */
	struct rdmap_terminate t;

	cr_assert_eq(term_parse_exact(body, 4, &t), 4);
	cr_assert_eq(t.term, 0x0206);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);
}

Test(rdmap, terminate_siw_r_without_rdma_header)
{
	/* siw means M D R for a protection error on a Send but appends only
	 * the Send's DDP header: accepted as "no RDMA header". (Here the
	 * bits are where RFC 5040 puts them; how an x86 siw really sends
	 * them is the terminate_siw_layout_* cases.) */
	uint8_t body[4 + 2 + 18] = { 0x01, 0x02, 0xe0, 0x00, 0x00, 0x12 };
	struct rdmap_terminate t;
	uint8_t rr[4 + 2 + 18] = { 0x01, 0x02, 0xe0, 0x00, 0x00, 0x2e };

	build_op(RDMAP_OP_SEND, body + 6, 18);
	cr_assert_eq(term_parse_exact(body, sizeof(body), &t), 24);
	cr_assert(t.has_ddp_hdr);
	cr_assert_not(t.has_rdma_hdr);

	/* The same shape for a Read Request is missing its RDMA header. */
	memcpy(rr + 6, read_req, 18);
	cr_assert_eq(term_parse_exact(rr, sizeof(rr), &t), -EPROTO);
}

Test(rdmap, terminate_build_rejects_inconsistent_lengths)
{
	struct rdmap_terminate t = { .term = 0x1101, .has_ddp_hdr = true };
	uint8_t buf[RDMAP_TERM_MAX_LEN];

	memcpy(t.ddp_hdr, read_resp, 14);       /* tagged */
	t.ddp_hdr_len = 18;
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)), -EINVAL);
	t.ddp_hdr_len = 14;
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)), 20);
	t.has_rdma_hdr = true;
	t.rdma_hdr_len = 10;
	cr_assert_eq(rdmap_term_build(&t, buf, sizeof(buf)), -EINVAL);
}

Test(rdmap, terminate_headers_follow_rfc5040_figure10)
{
	/* A Read Request segment: untagged, QN 1, 28-octet header. */
	struct rdmap_hdr rr = {
		.opcode = RDMAP_OP_READ_REQ,
		.ddp = { .last = true, .u = { .msn = 1 } },
		.rreq = { .sink_stag = 1, .sink_to = 2, .size = 3,
			  .src_stag = 4, .src_to = 5 },
	};
	uint8_t seg[64];
	struct rdmap_terminate t;
	struct rdmap_fault f;
	int n = rdmap_hdr_build(&rr, seg, sizeof(seg));

	cr_assert_eq(n, 18 + 28);
	/* Remote protection error on a Read Request: DDP and RDMA headers. */
	f = rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS);
	rdmap_term_from_fault(&t, &f, seg, (size_t)n, (uint16_t)n);
	cr_assert(t.has_seg_len && t.has_ddp_hdr && t.has_rdma_hdr);
	cr_assert_arr_eq(t.rdma_hdr, seg + 18, 28);
	/* Remote operation error: DDP header only. */
	f = rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE);
	rdmap_term_from_fault(&t, &f, seg, (size_t)n, (uint16_t)n);
	cr_assert(t.has_ddp_hdr && !t.has_rdma_hdr);
	/* DDP layer error: DDP header only. */
	f = rdmap_fault_ddp(DDP_ERR_U_MSN_RANGE);
	rdmap_term_from_fault(&t, &f, seg, (size_t)n, (uint16_t)n);
	cr_assert(t.has_ddp_hdr && !t.has_rdma_hdr);
	/* Local catastrophic, either layer: "The DDP Header is not present". */
	f = rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC);
	rdmap_term_from_fault(&t, &f, seg, (size_t)n, (uint16_t)n);
	cr_assert(!t.has_seg_len && !t.has_ddp_hdr && !t.has_rdma_hdr);
	f = rdmap_fault_ddp(DDP_ERR_LOCAL_CATASTROPHIC);
	rdmap_term_from_fault(&t, &f, seg, (size_t)n, (uint16_t)n);
	cr_assert(!t.has_seg_len && !t.has_ddp_hdr && !t.has_rdma_hdr);
	cr_assert_eq(t.term, 0x1000);
}

/* ---- Linux siw's Terminate layout ------------------------------------ */

/*
 * The Terminate Control word exactly as Linux siw (iwarp.h, struct
 * iwarp_terminate, a C bitfield) puts it on the wire from a
 * little-endian host: octet 0 = EType << 4 | Layer (the RFC has Layer in
 * the high nibble), octet 1 = the code, octet 2 = M | D << 1 | R << 2
 * (the RFC's Reserved bits; its Hdrct bits stay 000), octet 3 = 0. The
 * headers follow as in siw_send_terminate(): for M, the DDP Segment
 * Length (siw overwrites the quoted MPA length with it), then the header
 * of the faulting message as received.
 */
static size_t siw_term(uint8_t layer, uint8_t etype, uint8_t code, bool m,
		       bool d, bool r, const uint8_t *hdr, size_t hlen,
		       uint16_t seg_len, uint8_t *out)
{
	out[0] = (uint8_t)(etype << 4 | layer);
	out[1] = code;
	out[2] = (uint8_t)((m ? 1 : 0) | (d ? 2 : 0) | (r ? 4 : 0));
	out[3] = 0;
	if (!m && !d && !r)
		return 4;
	out[4] = (uint8_t)(seg_len >> 8);
	out[5] = (uint8_t)seg_len;
	memcpy(out + 6, hdr, hlen);
	return 6 + hlen;
}

Test(rdmap, terminate_siw_layout_read_request_protection)
{
	/* A Read Request whose source STag siw refused while building the
	 * Read Response: RDMAP (0), remote protection (1), access rights
	 * (2); M D R, the Read Request's DDP and RDMA headers (46). */
	uint8_t b[RDMAP_TERM_MAX_LEN];
	size_t n = siw_term(0, 1, 2, true, true, true, read_req,
			    sizeof(read_req), 0, b);
	struct rdmap_terminate t;

	cr_assert_eq(n, RDMAP_TERM_MAX_LEN);
	/* As RFC 5040 reads it: code 0x1002, Hdrct 000, 48 octets too many */
	cr_assert_eq(b[0] >> 4, 1, "Layer reads DDP");
	cr_assert_eq(term_parse_exact(b, n, &t), (int)n);
	cr_assert(t.siw_layout);
	cr_assert_eq(t.term, 0x0102, "term %#06x", t.term);
	cr_assert(t.has_seg_len && t.has_ddp_hdr && t.has_rdma_hdr);
	cr_assert_eq(t.ddp_hdr_len, DDP_UNTAGGED_HDR_LEN);
	cr_assert_arr_eq(t.ddp_hdr, read_req, DDP_UNTAGGED_HDR_LEN);
	cr_assert_arr_eq(t.rdma_hdr, read_req + 18, RDMAP_READ_REQ_LEN);
}

Test(rdmap, terminate_siw_layout_ddp_errors)
{
	uint8_t b[RDMAP_TERM_MAX_LEN], send[18];
	struct rdmap_terminate t;
	size_t n;

	/* DDP (1) tagged (1) base or bounds (1) on a WRITE: M D, 14. */
	n = siw_term(1, 1, 1, true, true, false, read_resp, 14, 100, b);
	cr_assert_eq(term_parse_exact(b, n, &t), (int)n);
	cr_assert(t.siw_layout);
	cr_assert_eq(t.term, 0x1101);
	cr_assert_eq(t.seg_len, 100);
	cr_assert_eq(t.ddp_hdr_len, DDP_TAGGED_HDR_LEN);
	cr_assert_not(t.has_rdma_hdr);

	/* DDP (1) untagged (2) no buffer (2) on a Send: octet 0 is 0x21,
	 * which RFC 5040 reads as LLP (2) type 1. */
	build_op(RDMAP_OP_SEND, send, sizeof(send));
	n = siw_term(1, 2, 2, true, true, false, send, 18, 64, b);
	cr_assert_eq(b[0], 0x21);
	cr_assert_eq(term_parse_exact(b, n, &t), (int)n);
	cr_assert(t.siw_layout);
	cr_assert_eq(t.term, 0x1202, "term %#06x", t.term);
	cr_assert_eq(t.ddp_hdr_len, DDP_UNTAGGED_HDR_LEN);
}

Test(rdmap, terminate_siw_layout_send_inv_r_without_rdma_header)
{
	/* "STag cannot be invalidated" (0x0109) on a Send with Invalidate:
	 * siw sets M D R and appends only the 18-octet DDP header. */
	uint8_t b[RDMAP_TERM_MAX_LEN], hdr[18];
	struct rdmap_terminate t;
	size_t n;

	build_op(RDMAP_OP_SEND_INV, hdr, sizeof(hdr));
	n = siw_term(0, 1, 9, true, true, true, hdr, 18, 16, b);
	cr_assert_eq(term_parse_exact(b, n, &t), (int)n);
	cr_assert(t.siw_layout);
	cr_assert_eq(t.term, 0x0109);
	cr_assert(t.has_ddp_hdr);
	cr_assert_not(t.has_rdma_hdr);
}

Test(rdmap, terminate_siw_layout_without_headers_reads_as_sent)
{
	/* No header: nothing tells siw's layout from the RFC's, so the code
	 * is taken as it reads. RDMAP catastrophic, unspecified: the same
	 * either way. LLP (2) type 0 CRC (2): reads RDMAP (0) type 2. */
	uint8_t b[4];
	struct rdmap_terminate t;

	cr_assert_eq(siw_term(0, 0, 0xff, false, false, false, NULL, 0, 0, b),
		     4);
	cr_assert_eq(term_parse_exact(b, 4, &t), 4);
	cr_assert_eq(t.term, 0x00ff);
	cr_assert_not(t.siw_layout);
	siw_term(2, 0, 2, false, false, false, NULL, 0, 0, b);
	cr_assert_eq(term_parse_exact(b, 4, &t), 4);
	cr_assert_eq(t.term, 0x0202);
	cr_assert_not(t.siw_layout);
}

Test(rdmap, terminate_malformed_keeps_the_code)
{
	/* Hdrct says D, the body is 3 octets short; and a siw-looking
	 * control word whose body fits neither layout: -EPROTO, but the
	 * code as sent is kept (no header). */
	uint8_t rfc[4 + 2 + 15] = { 0x11, 0x01, 0x40, 0x00, 0x00, 0x10 };
	uint8_t siw[4 + 2 + 10] = { 0x10, 0x02, 0x03, 0x00, 0x00, 0x10 };
	struct rdmap_terminate t = { .term = 0x7777, .has_ddp_hdr = true };

	memcpy(rfc + 6, read_req, 15);
	cr_assert_eq(term_parse_exact(rfc, sizeof(rfc), &t), -EPROTO);
	cr_assert_eq(t.term, 0x1101);
	cr_assert_not(t.has_seg_len || t.has_ddp_hdr || t.has_rdma_hdr);
	cr_assert_eq(term_parse_exact(siw, sizeof(siw), &t), -EPROTO);
	cr_assert_eq(t.term, 0x1002, "the code as sent");
	cr_assert_not(t.siw_layout);
	/* Too short for the control word: nothing to keep. */
	t.term = 0x7777;
	cr_assert_eq(term_parse_exact(rfc, 3, &t), -EPROTO);
	cr_assert_eq(t.term, 0x7777);
}
