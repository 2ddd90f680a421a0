/* SPDX-License-Identifier: MIT */
/*
 * MPA negotiation (RFC 5044 7.1.2, RFC 6581 9): the Initiator's Request,
 * the Responder's decision, the Initiator's reading of the Reply. Exact
 * bytes for a Request and Replies, then the matrix rev 1/2 x CRC on
 * either side x peer-to-peer with WRITE/READ RTR, then the refusals.
 */
#include <errno.h>

#include "mpa.h"
#include "mpa_rr_util.h"
#include "test_util.h"

#define KEY_REQ 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', \
		'F', 'r', 'a', 'm', 'e'
#define KEY_REP 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', \
		'F', 'r', 'a', 'm', 'e'

/* The whole exchange: Initiator prefs ini, Responder prefs rsp. Returns
 * the Initiator's mpa_nego_reply() result, fills both sides' params. */
static int exchange(const struct mpa_prefs *ini, const struct mpa_prefs *rsp,
		    struct mpa_params *pi, struct mpa_params *pr)
{
	struct mpa_frames f;
	struct mpa_rr got;

	return accepted_exchange(ini, rsp, &got, pi, pr, &f);
}

/* rr builds to exactly want[0..len). */
static void expect_frame(const struct mpa_rr *rr, const uint8_t *want,
			 size_t len)
{
	uint8_t buf[FRAME_MAX];

	cr_assert_eq(build(rr, buf), len);
	cr_assert_arr_eq(buf, want, len);
}

/* The Request q[0..qlen) is refused by a Responder with prefs rsp with a
 * Reject Reply of exactly want[0..wlen); returns the reason. */
static enum mpa_error expect_refused(const uint8_t *q, size_t qlen,
				     const struct mpa_prefs *rsp,
				     const uint8_t *want, size_t wlen)
{
	struct mpa_rr req, reject;
	enum mpa_error err;

	cr_assert_eq(mpa_nego_check_request(q, qlen, rsp, &req, &reject,
					    &err),
		     -ECONNREFUSED);
	expect_frame(&reject, want, wlen);
	return err;
}

/* ---- safety ---------------------------------------------------------- */

Test(mpa_negotiate, null_arguments)
{
	struct mpa_prefs p = { .rev = 2 };
	struct mpa_rr rr, rj;
	struct mpa_params par;
	enum mpa_error err;
	uint8_t buf[32] = { 0 };

	cr_assert_eq(mpa_nego_request(NULL, &rr), -EINVAL);
	cr_assert_eq(mpa_nego_request(&p, NULL), -EINVAL);
	cr_assert_eq(mpa_nego_check_request(NULL, 0, &p, &rr, &rj, &err),
		     -EINVAL);
	cr_assert_eq(mpa_nego_check_request(buf, 20, NULL, &rr, &rj, &err),
		     -EINVAL);
	cr_assert_eq(mpa_nego_accept(NULL, &p, &rr, &par), -EINVAL);
	cr_assert_eq(mpa_nego_reject(&rr, NULL, &rj), -EINVAL);
	cr_assert_eq(mpa_nego_reply(NULL, &p, buf, 20, &par, &err), -EINVAL);
	cr_assert_eq(mpa_nego_reply(&rr, &p, NULL, 20, &par, &err), -EINVAL);
}

Test(mpa_negotiate, request_prefs_checked)
{
	uint8_t pd[MPA_PD_MAX];
	struct mpa_rr rr;

	fill_pattern(pd, sizeof(pd), 1);

	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 3 }, &rr),
		     -EINVAL);
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 1,
		     .p2p = true }, &rr), -EINVAL);
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 2,
		     .markers = true }, &rr), -EOPNOTSUPP);
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 2,
		     .p2p = true, .rtr = 0x80 }, &rr), -EINVAL);
	/* 512 octets in all: rev 1 takes 512 of ULP data, rev 2 only 508. */
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 1,
		     .pdata = pd, .pdata_len = 512 }, &rr), 0);
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 2,
		     .pdata = pd, .pdata_len = 509 }, &rr), -EMSGSIZE);
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .rev = 2,
		     .pdata = pd, .pdata_len = 508 }, &rr), 0);
	/* rev 0 means 2, with the enhanced words. */
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ 0 }, &rr), 0);
	cr_assert(rr.rev == 2 && rr.enhanced && !rr.p2p);
}

/* ---- known answers ---------------------------------------------------- */

Test(mpa_negotiate, request_bytes_rev2_p2p)
{
	/* Rev 2, S set, peer-to-peer offering WRITE and READ RTR (the
	 * default), IRD 1 ORD 1 as rping asks, private data "rp". */
	static const uint8_t want[] = {
		KEY_REQ,
		0x10,           /* M=0 C=0 R=0 S=1 */
		0x02,           /* Rev 2 */
		0x00, 0x06,     /* PD_Length: 4 + 2 */
		0x80, 0x01,     /* A=1 B=0 IRD=1 */
		0xc0, 0x01,     /* C=1 D=1 ORD=1 */
		'r', 'p',
	};
	struct mpa_prefs ini = {
		.rev = 2, .p2p = true, .ird = 1, .ord = 1,
		.pdata = (const uint8_t *)"rp", .pdata_len = 2,
	};
	struct mpa_rr req;

	cr_assert_eq(mpa_nego_request(&ini, &req), 0);
	expect_frame(&req, want, sizeof(want));
}

Test(mpa_negotiate, request_bytes_rev1_crc)
{
	static const uint8_t want[] = {
		KEY_REQ, 0x40, 0x01, 0x00, 0x01, 'x',
	};
	struct mpa_prefs ini = {
		.rev = 1, .crc = true, .ird = 16, .ord = 16,
		.pdata = (const uint8_t *)"x", .pdata_len = 1,
	};
	struct mpa_rr req;

	cr_assert_eq(mpa_nego_request(&ini, &req), 0);
	expect_frame(&req, want, sizeof(want));
}

Test(mpa_negotiate, reply_bytes_rev2_p2p_read)
{
	/* The Request above answered by a Responder that wants CRC, IRD 4,
	 * ORD 2: C set, ORD cut to the Initiator's IRD 1, IRD 4 kept, READ
	 * RTR chosen out of WRITE and READ. */
	static const uint8_t req_bytes[] = {
		KEY_REQ, 0x10, 0x02, 0x00, 0x06,
		0x80, 0x01, 0xc0, 0x01, 'r', 'p',
	};
	static const uint8_t want[] = {
		KEY_REP,
		0x50,           /* C=1 S=1 */
		0x02,
		0x00, 0x06,
		0x80, 0x04,     /* A=1 IRD=4 */
		0x40, 0x01,     /* D=1 (READ RTR) ORD=1 */
		'o', 'k',
	};
	struct mpa_prefs rsp = {
		.crc = true, .ird = 4, .ord = 2,
		.pdata = (const uint8_t *)"ok", .pdata_len = 2,
	};
	uint8_t *q = exact_copy(req_bytes, sizeof(req_bytes));
	struct mpa_rr req, reply, reject;
	struct mpa_params pr;
	enum mpa_error err;

	cr_assert_eq(mpa_nego_check_request(q, sizeof(req_bytes), &rsp, &req,
					    &reject, &err),
		     (int)sizeof(req_bytes));
	cr_assert_eq(req.pdata_len, 2);
	cr_assert_eq(mpa_nego_accept(&req, &rsp, &reply, &pr), 0);
	expect_frame(&reply, want, sizeof(want));
	cr_assert(pr.crc && pr.enhanced && pr.p2p);
	cr_assert_eq(pr.rtr, MPA_RTR_READ);
	cr_assert_eq(pr.ird, 4);
	cr_assert_eq(pr.ord, 1);
	cr_assert_eq(pr.peer_ird, 1);
	cr_assert_eq(pr.peer_ord, 1);
	cr_assert_eq(pr.peer_pdata, q + 24);
	free(q);
}

Test(mpa_negotiate, reject_bytes_markers)
{
	/* M asked for in a rev 1 Request with C: refused with R, C echoed,
	 * M clear, no private data; the ULP never sees it. */
	static const uint8_t req_bytes[] = {
		KEY_REQ, 0xc0, 0x01, 0x00, 0x02, 'h', 'i',
	};
	static const uint8_t want[] = {
		KEY_REP, 0x60, 0x01, 0x00, 0x00,
	};
	struct mpa_prefs rsp = {
		.pdata = (const uint8_t *)"never", .pdata_len = 5,
	};

	cr_assert_eq(expect_refused(req_bytes, sizeof(req_bytes), &rsp, want,
				    sizeof(want)),
		     MPA_ERR_LOCAL_CATASTROPHIC);
}

Test(mpa_negotiate, reject_bytes_markers_enhanced)
{
	/* The same refusal of a rev 2 enhanced Request still carries the
	 * IRD/ORD words (RFC 6581 10 and 9.1). */
	static const uint8_t req_bytes[] = {
		KEY_REQ, 0x90, 0x02, 0x00, 0x04, 0x00, 0x08, 0x00, 0x08,
	};
	static const uint8_t want[] = {
		KEY_REP, 0x30, 0x02, 0x00, 0x04, 0x00, 0x08, 0x00, 0x02,
	};
	struct mpa_prefs rsp = { .ird = 2, .ord = 2 };

	expect_refused(req_bytes, sizeof(req_bytes), &rsp, want, sizeof(want));
}

Test(mpa_negotiate, reject_bytes_enhanced_without_ird_ord)
{
	/* S set with only two octets of private data: siw refuses it with a
	 * Reject Reply; so does wisp, without words it could not parse. */
	static const uint8_t req_bytes[] = {
		KEY_REQ, 0x50, 0x02, 0x00, 0x02, 'a', 'b',
	};
	static const uint8_t want[] = {
		KEY_REP, 0x60, 0x02, 0x00, 0x00,
	};
	struct mpa_prefs rsp = { 0 };

	cr_assert_eq(expect_refused(req_bytes, sizeof(req_bytes), &rsp, want,
				    sizeof(want)),
		     MPA_ERR_ENHANCED);
}

Test(mpa_negotiate, malformed_request_closes_without_reply)
{
	static const struct {
		uint8_t frame[24];
		size_t len;
		enum mpa_error err;
	} v[] = {
		{ { KEY_REP, 0x00, 0x01, 0x00, 0x00 }, 20, MPA_ERR_BAD_KEY },
		{ { KEY_REQ, 0x00, 0x03, 0x00, 0x00 }, 20, MPA_ERR_BAD_REV },
		{ { KEY_REQ, 0x00, 0x00, 0x00, 0x00 }, 20, MPA_ERR_BAD_REV },
		{ { KEY_REQ, 0x00, 0x01, 0x02, 0x01 }, 20, MPA_ERR_PD_LEN },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct mpa_prefs rsp = { 0 };
		struct mpa_rr req, reject;
		enum mpa_error err;

		cr_assert_eq(mpa_nego_check_request(v[i].frame, v[i].len, &rsp,
						    &req, &reject, &err),
			     -EPROTO, "vector %zu", i);
		cr_assert_eq(err, v[i].err, "vector %zu", i);
	}
	cr_log_info("%zu malformed Requests closed",
		    sizeof(v) / sizeof(v[0]));
}

Test(mpa_negotiate, partial_frames_ask_for_more)
{
	static const uint8_t req_bytes[] = {
		KEY_REQ, 0x10, 0x02, 0x00, 0x06,
		0x80, 0x01, 0xc0, 0x01, 'r', 'p',
	};
	struct mpa_prefs p = { 0 };

	for (size_t len = 0; len < sizeof(req_bytes); len++) {
		uint8_t *b = exact_copy(req_bytes, len);
		struct mpa_rr req, reject;
		enum mpa_error err;

		cr_assert_eq(mpa_nego_check_request(b, len, &p, &req, &reject,
						    &err),
			     -EAGAIN, "prefix %zu", len);
		free(b);
	}
}

/* ---- the matrix -------------------------------------------------------- */

Test(mpa_negotiate, matrix_rev_crc_p2p_rtr)
{
	static const uint8_t rtr_sets[] = {
		MPA_RTR_WRITE, MPA_RTR_READ, MPA_RTR_WRITE | MPA_RTR_READ,
	};
	int checked = 0;

	for (int rev = 1; rev <= 2; rev++)
	for (int crc = 0; crc < 4; crc++)
	for (int p2p = 0; p2p < (rev == 2 ? 2 : 1); p2p++)
	for (size_t o = 0; o < sizeof(rtr_sets); o++)
	for (size_t s = 0; s < sizeof(rtr_sets); s++) {
		struct mpa_prefs ini = {
			.rev = (uint8_t)rev, .crc = crc & 1, .p2p = p2p,
			.rtr = rtr_sets[o], .ird = 3, .ord = 5,
			.pdata = (const uint8_t *)"ini", .pdata_len = 3,
		};
		struct mpa_prefs rsp = {
			.crc = crc & 2, .rtr = rtr_sets[s], .ird = 7, .ord = 9,
			.pdata = (const uint8_t *)"rsp", .pdata_len = 3,
		};
		uint8_t common = rtr_sets[o] & rtr_sets[s];
		struct mpa_params pi, pr;
		int ret = exchange(&ini, &rsp, &pi, &pr);

		if (p2p && !common) {
			/* The Responder names one it supports; the
			 * Initiator cannot generate it: Terminate code 7. */
			cr_assert_eq(ret, -EPROTO);
			checked++;
			continue;
		}
		cr_assert_gt(ret, 0, "rev %d crc %d p2p %d o %zu s %zu", rev,
			     crc, p2p, o, s);
		/* Same revision, CRC if either side asked. */
		cr_assert_eq(pi.rev, rev);
		cr_assert_eq(pr.rev, rev);
		cr_assert_eq(pi.crc, crc != 0);
		cr_assert_eq(pr.crc, crc != 0);
		cr_assert_eq(pi.enhanced, rev == 2);
		cr_assert_eq(pr.enhanced, rev == 2);
		/* Both sides agree on the RTR; READ preferred. */
		cr_assert_eq(pi.p2p, (bool)p2p);
		cr_assert_eq(pr.p2p, (bool)p2p);
		cr_assert_eq(pi.rtr, pr.rtr);
		if (p2p)
			cr_assert_eq(pi.rtr, (common & MPA_RTR_READ) ?
				     MPA_RTR_READ : MPA_RTR_WRITE);
		else
			cr_assert_eq(pi.rtr, 0);
		if (rev == 2) {
			/* RFC 6581 9.1 relations. */
			cr_assert_leq(pi.ord, pr.ird);
			cr_assert_leq(pr.ord, pi.ird);
			cr_assert_eq(pr.ord, 3);
			cr_assert_eq(pr.ird, 7);
			cr_assert_eq(pi.ord, 5);
			cr_assert_eq(pi.ird, 3);
			cr_assert_eq(pi.peer_ird, 7);
			cr_assert_eq(pi.peer_ord, 3);
		} else {
			/* Nothing exchanged: the local values stand. */
			cr_assert_eq(pi.ird, 3);
			cr_assert_eq(pi.ord, 5);
			cr_assert_eq(pr.ird, 7);
			cr_assert_eq(pr.ord, 9);
			cr_assert_eq(pi.peer_ird, 0);
			cr_assert_eq(pr.peer_ord, 0);
		}
		cr_assert_eq(pi.peer_pdata_len, 3);
		cr_assert_arr_eq(pi.peer_pdata, "rsp", 3);
		cr_assert_eq(pr.peer_pdata_len, 3);
		cr_assert_arr_eq(pr.peer_pdata, "ini", 3);
		checked++;
	}
	cr_log_info("%d exchanges across rev x CRC x p2p x RTR sets", checked);
	cr_assert_eq(checked, 4 * 9 + 4 * 2 * 9);
}

Test(mpa_negotiate, ird_ord_clamped_to_128)
{
	/* A peer asking for 200/300 gets the limit, never a refusal. */
	struct mpa_rr req = {
		.type = MPA_REQUEST, .rev = 2, .enhanced = true,
		.ird = 200, .ord = 300,
	};
	struct mpa_prefs rsp = { .ird = 500, .ord = 1000 };
	struct mpa_rr reply;
	struct mpa_params pr;

	cr_assert_eq(mpa_nego_accept(&req, &rsp, &reply, &pr), 0);
	cr_assert_eq(pr.ird, 128);
	cr_assert_eq(pr.ord, 128);
	cr_assert_eq(reply.ird, 128);
	cr_assert_eq(reply.ord, 128);
	cr_assert_eq(pr.peer_ird, 200);
	cr_assert_eq(pr.peer_ord, 300);

	/* Local wishes are clamped in the Request too. */
	cr_assert_eq(mpa_nego_request(&(struct mpa_prefs){ .ird = 999,
		     .ord = 129 }, &req), 0);
	cr_assert_eq(req.ird, 128);
	cr_assert_eq(req.ord, 128);
}

Test(mpa_negotiate, ird_ord_all_ones_not_negotiated)
{
	/* RFC 6581 9.1: 0x3fff leaves the local value and is echoed. */
	struct mpa_rr req = {
		.type = MPA_REQUEST, .rev = 2, .enhanced = true,
		.ird = MPA_IRD_ORD_MAX, .ord = MPA_IRD_ORD_MAX,
	};
	struct mpa_prefs rsp = { .ird = 6, .ord = 4 };
	struct mpa_rr reply;
	struct mpa_params pr;

	cr_assert_eq(mpa_nego_accept(&req, &rsp, &reply, &pr), 0);
	cr_assert_eq(reply.ird, MPA_IRD_ORD_MAX);
	cr_assert_eq(reply.ord, MPA_IRD_ORD_MAX);
	cr_assert_eq(pr.ird, 6);
	cr_assert_eq(pr.ord, 4);
}

Test(mpa_negotiate, read_rtr_raises_zero_ird_and_ord)
{
	/* Initiator ORD 0 with a READ RTR offered goes out as ORD 1; a
	 * Responder with IRD 0 choosing READ answers IRD 1. */
	struct mpa_prefs ini = { .p2p = true, .rtr = MPA_RTR_READ };
	struct mpa_prefs rsp = { 0 };
	struct mpa_params pi, pr;
	struct mpa_rr req;

	cr_assert_eq(mpa_nego_request(&ini, &req), 0);
	cr_assert_eq(req.ord, 1);
	cr_assert_gt(exchange(&ini, &rsp, &pi, &pr), 0);
	cr_assert_eq(pr.rtr, MPA_RTR_READ);
	cr_assert_eq(pr.ird, 1);
	cr_assert_eq(pi.ord, 1);
	cr_assert_eq(pi.rtr, MPA_RTR_READ);
}

Test(mpa_negotiate, responder_preference_write)
{
	struct mpa_prefs ini = { .p2p = true, .ird = 1, .ord = 1 };
	struct mpa_prefs rsp = { .rtr_prefer = MPA_RTR_WRITE, .ird = 1 };
	struct mpa_params pi, pr;

	cr_assert_gt(exchange(&ini, &rsp, &pi, &pr), 0);
	cr_assert_eq(pr.rtr, MPA_RTR_WRITE);
	cr_assert_eq(pi.rtr, MPA_RTR_WRITE);
}

/* ---- the Initiator's reading of odd Replies --------------------------- */

/* The Request ini produces, and its bytes handed to fn as a Reply. */
static int reply_to(const struct mpa_prefs *ini, const uint8_t *rep,
		    size_t len, struct mpa_params *p, enum mpa_error *err)
{
	struct mpa_rr req;
	uint8_t *b = exact_copy(rep, len);
	int ret;

	cr_assert_eq(mpa_nego_request(ini, &req), 0);
	ret = mpa_nego_reply(&req, ini, b, len, p, err);
	free(b);
	return ret;
}

Test(mpa_negotiate, reply_reject_carries_private_data)
{
	static const uint8_t rep[] = {
		KEY_REP, 0x30, 0x02, 0x00, 0x07,
		0x00, 0x02, 0x00, 0x01, 'n', 'o', '!',
	};
	struct mpa_prefs ini = { .ird = 1, .ord = 1 };
	struct mpa_params p;
	enum mpa_error err;
	uint8_t *b = exact_copy(rep, sizeof(rep));
	struct mpa_rr req;

	cr_assert_eq(mpa_nego_request(&ini, &req), 0);
	cr_assert_eq(mpa_nego_reply(&req, &ini, b, sizeof(rep), &p, &err),
		     -ECONNREFUSED);
	cr_assert_eq(err, MPA_ERR_NONE);
	cr_assert_eq(p.peer_pdata_len, 3);
	cr_assert_eq(p.peer_pdata, b + 24);
	cr_assert_eq(p.peer_ird, 2);
	cr_assert_eq(p.peer_ord, 1);
	free(b);
}

Test(mpa_negotiate, reply_reject_siw_style_s_without_words)
{
	/* siw echoes the Request's S with R added and no words. */
	static const uint8_t rep[] = { KEY_REP, 0x30, 0x02, 0x00, 0x00 };
	struct mpa_prefs ini = { 0 };
	struct mpa_params p;
	enum mpa_error err;

	cr_assert_eq(reply_to(&ini, rep, sizeof(rep), &p, &err),
		     -ECONNREFUSED);
	cr_assert_eq(p.peer_pdata_len, 0);
	cr_assert_null(p.peer_pdata);
}

Test(mpa_negotiate, reply_faults)
{
	static const struct {
		const char *what;
		uint8_t frame[28];
		size_t len;
		bool p2p;
		enum mpa_error err;
	} v[] = {
		{ "request key in reply", { KEY_REQ, 0x10, 0x02, 0x00, 0x04,
		  0, 1, 0, 1 }, 24, false, MPA_ERR_BAD_KEY },
		{ "other revision", { KEY_REP, 0x00, 0x01, 0x00, 0x00 }, 20,
		  false, MPA_ERR_BAD_REV },
		{ "no words after enhanced request", { KEY_REP, 0x00, 0x02,
		  0x00, 0x00 }, 20, false, MPA_ERR_ENHANCED },
		{ "S without words", { KEY_REP, 0x10, 0x02, 0x00, 0x02, 'a',
		  'b' }, 22, false, MPA_ERR_ENHANCED },
		{ "markers demanded", { KEY_REP, 0x90, 0x02, 0x00, 0x04,
		  0, 1, 0, 1 }, 24, false, MPA_ERR_LOCAL_CATASTROPHIC },
		{ "IRD above limit demanded", { KEY_REP, 0x10, 0x02, 0x00,
		  0x04, 0x00, 0x01, 0x00, 0xc8 }, 24, false,
		  MPA_ERR_INSUFFICIENT_IRD },
		{ "SEND RTR only", { KEY_REP, 0x10, 0x02, 0x00, 0x04,
		  0xc0, 0x01, 0x00, 0x01 }, 24, true,
		  MPA_ERR_NO_MATCHING_RTR },
		{ "PD_Length 513", { KEY_REP, 0x10, 0x02, 0x02, 0x01 }, 20,
		  false, MPA_ERR_PD_LEN },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct mpa_prefs ini = { .p2p = v[i].p2p, .ird = 1, .ord = 1 };
		struct mpa_params p;
		enum mpa_error err;

		cr_assert_eq(reply_to(&ini, v[i].frame, v[i].len, &p, &err),
			     -EPROTO, "%s", v[i].what);
		cr_assert_eq(err, v[i].err, "%s: %s", v[i].what,
			     mpa_error_str(err));
	}
	cr_log_info("%zu faulty Replies named", sizeof(v) / sizeof(v[0]));
}

Test(mpa_negotiate, reply_without_p2p_means_no_rtr)
{
	/* Peer-to-peer asked for, the Reply lacks A: client-server. */
	static const uint8_t rep[] = {
		KEY_REP, 0x10, 0x02, 0x00, 0x04, 0x00, 0x04, 0x00, 0x01,
	};
	struct mpa_prefs ini = { .p2p = true, .ird = 1, .ord = 2 };
	struct mpa_params p;
	enum mpa_error err;

	cr_assert_eq(reply_to(&ini, rep, sizeof(rep), &p, &err),
		     (int)sizeof(rep));
	cr_assert(!p.p2p);
	cr_assert_eq(p.rtr, 0);
	cr_assert_eq(p.ord, 2);
	cr_assert_eq(p.ird, 1);
}

Test(mpa_negotiate, reply_crc_from_either_side)
{
	/* C only in the Reply still means CRC both ways (RFC 5044 7.1.1). */
	static const uint8_t rep[] = {
		KEY_REP, 0x50, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01,
	};
	struct mpa_prefs ini = { .ird = 1, .ord = 1 };
	struct mpa_params p;
	enum mpa_error err;

	cr_assert_eq(reply_to(&ini, rep, sizeof(rep), &p, &err),
		     (int)sizeof(rep));
	cr_assert(p.crc);
}

Test(mpa_negotiate, reply_read_rtr_needs_ord)
{
	/* Responder IRD 0 cuts ORD to 0: a READ RTR is impossible, the
	 * WRITE RTR is taken if the Reply names it too. */
	static const uint8_t both[] = {
		KEY_REP, 0x10, 0x02, 0x00, 0x04, 0x80, 0x00, 0xc0, 0x00,
	};
	static const uint8_t read_only[] = {
		KEY_REP, 0x10, 0x02, 0x00, 0x04, 0x80, 0x00, 0x40, 0x00,
	};
	struct mpa_prefs ini = { .p2p = true, .ird = 1, .ord = 1 };
	struct mpa_params p;
	enum mpa_error err;

	cr_assert_eq(reply_to(&ini, both, sizeof(both), &p, &err),
		     (int)sizeof(both));
	cr_assert_eq(p.rtr, MPA_RTR_WRITE);
	cr_assert_eq(p.ord, 0);
	cr_assert_eq(reply_to(&ini, read_only, sizeof(read_only), &p, &err),
		     -EPROTO);
	cr_assert_eq(err, MPA_ERR_NO_MATCHING_RTR);
}

Test(mpa_negotiate, ulp_reject_round_trip)
{
	struct mpa_prefs ini = { .p2p = true, .ird = 1, .ord = 1 };
	struct mpa_prefs rsp = {
		.ird = 1, .ord = 1,
		.pdata = (const uint8_t *)"busy", .pdata_len = 4,
	};
	struct mpa_frames f;
	struct mpa_params p;
	struct mpa_rr reply;

	rejected_exchange(&ini, &rsp, &reply, &p, &f);
	cr_assert(reply.reject);
	cr_assert_eq(f.p[16], MPA_FLAG_REJECT | MPA_FLAG_ENHANCED);
	cr_assert_eq(p.peer_pdata_len, 4);
	cr_assert_arr_eq(p.peer_pdata, "busy", 4);
}
