/* SPDX-License-Identifier: MIT */
/*
 * wisp's large-FPDU extension in MPA private data (mpa.h, docs/
 * wire-formats.md): exact bytes, the Request and the Reply with and
 * without it, the ULP's private data exactly as sent on both sides with
 * it present, no room left by the ULP's data, and truncated or garbled
 * extensions, which are the ULP's private data.
 */
#include <errno.h>

#include "mpa.h"
#include "mpa_rr_util.h"
#include "test_util.h"

static const uint8_t ext_bytes[MPA_EXT_LEN] = {
	0xff, 0xff,             /* Max_ULPDU 65535 */
	0x00, 0x00,             /* reserved */
	0x01,                   /* Version 1 */
	0x00,                   /* reserved */
	0x00, 0x10,             /* Ext_Length 16 */
	'W', 'I', 'S', 'P', '-', 'E', 'X', 'T',
};

/* One side's configuration: rev 2 client-server, private data pd. */
static struct mpa_prefs prefs(const uint8_t *pd, uint16_t len, bool ext)
{
	struct mpa_prefs p = {
		.rev = 2, .ird = 4, .ord = 4, .pdata = len ? pd : NULL,
		.pdata_len = len, .ext_max_ulpdu = ext ? MPA_ULPDU_MAX : 0,
	};

	return p;
}

/*
 * The whole exchange through built frames. *req_ext / *rep_ext: whether
 * each frame carried the extension (read from the wire octets); the
 * Responder's view of the Request in *got. Returns mpa_nego_reply().
 */
static int exchange(const struct mpa_prefs *ini, const struct mpa_prefs *rsp,
		    struct mpa_rr *got, struct mpa_params *pi,
		    struct mpa_params *pr, bool *req_ext, bool *rep_ext)
{
	static struct mpa_frames f;     /* pi and got point into it */
	int ret = accepted_exchange(ini, rsp, got, pi, pr, &f);

	*req_ext = f.qlen >= MPA_EXT_LEN &&
		   !memcmp(f.q + f.qlen - MPA_EXT_LEN, ext_bytes, MPA_EXT_LEN);
	*rep_ext = f.plen >= MPA_EXT_LEN &&
		   !memcmp(f.p + f.plen - MPA_EXT_LEN, ext_bytes, MPA_EXT_LEN);
	return ret;
}

/* ---- the codec -------------------------------------------------------- */

Test(mpa_ext, put_bytes)
{
	uint8_t out[MPA_EXT_LEN];

	mpa_ext_put(out, MPA_ULPDU_MAX);
	cr_assert_arr_eq(out, ext_bytes, sizeof(out));
}

Test(mpa_ext, request_bytes)
{
	/* Rev 2, S, IRD 4 ORD 4, ULP data "ab", then the extension. */
	static const uint8_t head[] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ',
		'F', 'r', 'a', 'm', 'e',
		0x10, 0x02, 0x00, 4 + 2 + MPA_EXT_LEN,
		0x00, 0x04, 0x00, 0x04, 'a', 'b',
	};
	struct mpa_prefs p = prefs((const uint8_t *)"ab", 2, true);
	uint8_t buf[FRAME_MAX];
	struct mpa_rr req;

	cr_assert_eq(mpa_nego_request(&p, &req), 0);
	cr_assert_eq(req.ext_max_ulpdu, MPA_ULPDU_MAX);
	cr_assert_eq(build(&req, buf), sizeof(head) + MPA_EXT_LEN);
	cr_assert_arr_eq(buf, head, sizeof(head));
	cr_assert_arr_eq(buf + sizeof(head), ext_bytes, MPA_EXT_LEN);
}

Test(mpa_ext, find_exact_and_versions)
{
	uint8_t pd[40];
	uint16_t max = 7;

	/* ULP data then a version 1 extension. */
	fill_pattern(pd, sizeof(pd), 3);
	mpa_ext_put(pd + 10, 1454);
	cr_assert_eq(mpa_ext_find(pd, 10 + MPA_EXT_LEN, &max), MPA_EXT_LEN);
	cr_assert_eq(max, 1454);
	/* Only the extension. */
	cr_assert_eq(mpa_ext_find(pd + 10, MPA_EXT_LEN, &max), MPA_EXT_LEN);
	/* A later, longer version: found by its length, v1 fields read at
	 * the front, whatever it added before the tail skipped. */
	memset(pd, 0xee, sizeof(pd));
	pd[4] = 0x00;
	pd[5] = 0x80;           /* Max_ULPDU 128 at the extension's front */
	pd[8] = 3;              /* Version 3; 10..17 its own fields */
	pd[18] = 0x00;
	pd[19] = 24;            /* Ext_Length: 4 ULP octets, then 24 */
	memcpy(pd + 20, mpa_ext_magic, MPA_EXT_MAGIC_LEN);
	cr_assert_eq(mpa_ext_find(pd, 28, &max), 24);
	cr_assert_eq(max, 128);
}

Test(mpa_ext, find_rejects_garbled_and_truncated)
{
	uint8_t pd[64], *b;
	uint16_t max = 7;

	mpa_ext_put(pd, 4096);
	/* Every proper prefix (truncated at the end) and every proper
	 * suffix (its front lost) is not an extension. */
	for (uint16_t n = 0; n < MPA_EXT_LEN; n++) {
		b = exact_copy(pd, n);
		cr_assert_eq(mpa_ext_find(b, n, &max), 0, "prefix %u", n);
		free(b);
		b = exact_copy(pd + MPA_EXT_LEN - n, n);
		cr_assert_eq(mpa_ext_find(b, n, &max), 0, "suffix %u", n);
		free(b);
	}
	/* Any flipped bit of the magic, length or version. */
	for (int i = MPA_EXT_OFF_VERSION; i < MPA_EXT_LEN; i++) {
		if (i == MPA_EXT_OFF_VERSION + 1)
			continue;       /* reserved octet: ignored */
		for (int bit = 0; bit < 8; bit++) {
			uint8_t ext[MPA_EXT_LEN];
			uint16_t n;

			mpa_ext_put(ext, 4096);
			ext[i] ^= (uint8_t)(1 << bit);
			n = mpa_ext_find(ext, MPA_EXT_LEN, &max);
			/* A larger version is still an extension. */
			if (i == MPA_EXT_OFF_VERSION && ext[i] > 1)
				cr_assert_eq(n, MPA_EXT_LEN);
			else
				cr_assert_eq(n, 0, "octet %d bit %d", i, bit);
		}
	}
	/* A length longer than the private data. */
	mpa_ext_put(pd, 4096);
	pd[MPA_EXT_OFF_LEN + 1] = MPA_EXT_LEN + 1;
	max = 7;
	cr_assert_eq(mpa_ext_find(pd, MPA_EXT_LEN, &max), 0);
	cr_assert_eq(max, 7, "left alone when not found");
	cr_assert_eq(mpa_ext_find(NULL, 16, &max), 0);
	cr_assert_eq(mpa_ext_find(pd, 16, NULL), 0);
}

Test(mpa_ext, frame_too_long_with_extension)
{
	static uint8_t pd[MPA_PD_MAX];
	struct mpa_rr rr = {
		.type = MPA_REQUEST, .rev = 2, .enhanced = true, .pdata = pd,
		.pdata_len = MPA_PD_MAX - MPA_IRD_ORD_LEN - MPA_EXT_LEN + 1,
		.ext_max_ulpdu = 1,
	};

	cr_assert_eq(mpa_rr_len(&rr), -EMSGSIZE);
	rr.pdata_len--;
	cr_assert_eq(mpa_rr_len(&rr), MPA_RR_HDR_LEN + MPA_PD_MAX);
}

/* ---- the exchange ----------------------------------------------------- */

Test(mpa_ext, both_wisp_both_ways)
{
	static const uint8_t qd[] = "request data", pd[] = "reply";
	struct mpa_prefs ini = prefs(qd, sizeof(qd), true);
	struct mpa_prefs rsp = prefs(pd, sizeof(pd), true);
	struct mpa_params pi, pr;
	struct mpa_rr got;
	bool qe, pe;

	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(qe && pe, "both frames carry the extension");
	cr_assert_eq(pi.peer_max_ulpdu, MPA_ULPDU_MAX);
	cr_assert_eq(pr.peer_max_ulpdu, MPA_ULPDU_MAX);
	/* The ULP's private data exactly as sent, on both sides. */
	cr_assert_eq(got.pdata_len, sizeof(qd));
	cr_assert_arr_eq(got.pdata, qd, sizeof(qd));
	cr_assert_eq(pr.peer_pdata_len, sizeof(qd));
	cr_assert_arr_eq(pr.peer_pdata, qd, sizeof(qd));
	cr_assert_eq(pi.peer_pdata_len, sizeof(pd));
	cr_assert_arr_eq(pi.peer_pdata, pd, sizeof(pd));
}

Test(mpa_ext, no_ulp_private_data)
{
	struct mpa_prefs ini = prefs(NULL, 0, true), rsp = prefs(NULL, 0, true);
	struct mpa_params pi, pr;
	struct mpa_rr got;
	bool qe, pe;

	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(qe && pe);
	cr_assert_eq(got.pdata_len, 0);
	cr_assert_null(got.pdata);
	cr_assert_eq(pi.peer_pdata_len, 0);
	cr_assert_null(pi.peer_pdata);
	cr_assert_eq(pr.peer_pdata_len, 0);
	cr_assert_eq(pi.peer_max_ulpdu, MPA_ULPDU_MAX);
	cr_assert_eq(pr.peer_max_ulpdu, MPA_ULPDU_MAX);
}

Test(mpa_ext, request_without_extension_gets_reply_without)
{
	/* The Initiator is a third party (or WISP_BIG_FPDU=off): the wisp
	 * Responder answers as any MPA peer and sends small FPDUs. */
	struct mpa_prefs ini = prefs((const uint8_t *)"x", 1, false);
	struct mpa_prefs rsp = prefs((const uint8_t *)"y", 1, true);
	struct mpa_params pi, pr;
	struct mpa_rr got;
	bool qe, pe;

	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(!qe && !pe);
	cr_assert_eq(got.ext_max_ulpdu, 0);
	cr_assert_eq(pi.peer_max_ulpdu, 0);
	cr_assert_eq(pr.peer_max_ulpdu, 0);
	cr_assert_eq(pi.peer_pdata_len, 1);
	cr_assert_eq(pr.peer_pdata_len, 1);
}

Test(mpa_ext, responder_off_strips_and_answers_without)
{
	/* A wisp Responder with WISP_BIG_FPDU=off: the Request's extension
	 * never reaches its ULP, and no one sends large FPDUs. */
	static const uint8_t qd[] = { 1, 2, 3 };
	struct mpa_prefs ini = prefs(qd, sizeof(qd), true);
	struct mpa_prefs rsp = prefs(NULL, 0, false);
	struct mpa_params pi, pr;
	struct mpa_rr got;
	bool qe, pe;

	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(qe && !pe);
	cr_assert_eq(got.pdata_len, sizeof(qd));
	cr_assert_arr_eq(got.pdata, qd, sizeof(qd));
	cr_assert_eq(pi.peer_max_ulpdu, 0);
	cr_assert_eq(pr.peer_max_ulpdu, 0);
}

Test(mpa_ext, reply_without_extension_means_small_fpdus)
{
	/* A third-party Responder (siw) ignores the extension; its Reply
	 * has none, so the Initiator keeps to one segment. */
	static const uint8_t rep[] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ',
		'F', 'r', 'a', 'm', 'e',
		0x10, 0x02, 0x00, 0x06, 0x00, 0x04, 0x00, 0x04, 'o', 'k',
	};
	struct mpa_prefs ini = prefs((const uint8_t *)"hi", 2, true);
	struct mpa_params p;
	enum mpa_error err;
	struct mpa_rr req;
	uint8_t *b = exact_copy(rep, sizeof(rep));

	cr_assert_eq(mpa_nego_request(&ini, &req), 0);
	cr_assert_eq(mpa_nego_reply(&req, &ini, b, sizeof(rep), &p, &err),
		     (int)sizeof(rep));
	cr_assert_eq(p.peer_max_ulpdu, 0);
	cr_assert_eq(p.peer_pdata_len, 2);
	free(b);
}

Test(mpa_ext, unsolicited_reply_extension_stripped_not_used)
{
	/* A Reply with an extension to a Request without one: not used,
	 * and still not the ULP's data. */
	uint8_t rep[FRAME_MAX];
	struct mpa_prefs ini = prefs(NULL, 0, false);
	struct mpa_rr req, r = {
		.type = MPA_REPLY, .rev = 2, .enhanced = true, .ird = 4,
		.ord = 4, .pdata = (const uint8_t *)"ok", .pdata_len = 2,
		.ext_max_ulpdu = 9000,
	};
	struct mpa_params p;
	enum mpa_error err;
	size_t len;

	cr_assert_eq(mpa_nego_request(&ini, &req), 0);
	cr_assert_eq(req.ext_max_ulpdu, 0);
	len = build(&r, rep);
	cr_assert_eq(mpa_nego_reply(&req, &ini, rep, len, &p, &err),
		     (int)len);
	cr_assert_eq(p.peer_max_ulpdu, 0);
	cr_assert_eq(p.peer_pdata_len, 2);
	cr_assert_arr_eq(p.peer_pdata, "ok", 2);
}

Test(mpa_ext, no_room_no_extension)
{
	/* The ULP's data leaves no room within MPA_EXT_ULP_PD_MAX: no
	 * extension; one octet less and it goes. */
	static uint8_t pd[MPA_EXT_ULP_PD_MAX];
	uint16_t fit = MPA_EXT_ULP_PD_MAX - MPA_EXT_LEN;
	struct mpa_prefs ini, rsp;
	struct mpa_params pi, pr;
	struct mpa_rr got;
	bool qe, pe;

	fill_pattern(pd, sizeof(pd), 5);
	ini = prefs(pd, fit + 1, true);
	rsp = prefs(pd, fit, true);
	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(!qe && !pe, "no room in the Request: no extension at all");
	cr_assert_eq(pi.peer_max_ulpdu, 0);
	cr_assert_eq(pr.peer_max_ulpdu, 0);
	cr_assert_eq(got.pdata_len, fit + 1);
	cr_assert_arr_eq(got.pdata, pd, fit + 1);

	ini = prefs(pd, fit, true);
	rsp = prefs(pd, fit + 1, true);
	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(qe && !pe, "room in the Request only");
	/* The Initiator accepts large FPDUs and said so: the Responder
	 * sends them; the Initiator was not told and does not. */
	cr_assert_eq(pr.peer_max_ulpdu, MPA_ULPDU_MAX);
	cr_assert_eq(pi.peer_max_ulpdu, 0);
	cr_assert_eq(got.pdata_len, fit);
	cr_assert_arr_eq(got.pdata, pd, fit);
	cr_assert_eq(pi.peer_pdata_len, fit + 1);
	cr_assert_arr_eq(pi.peer_pdata, pd, fit + 1);

	/* The ULP's own limit (512 with the IRD/ORD words) still holds. */
	{
		static uint8_t big[MPA_PD_MAX];
		struct mpa_rr req;

		ini = prefs(big, MPA_PD_MAX - MPA_IRD_ORD_LEN, true);
		cr_assert_eq(mpa_nego_request(&ini, &req), 0);
		cr_assert_eq(req.ext_max_ulpdu, 0);
		ini.pdata_len++;
		cr_assert_eq(mpa_nego_request(&ini, &req), -EMSGSIZE);
	}
}

Test(mpa_ext, reject_has_no_extension)
{
	struct mpa_prefs ini = prefs(NULL, 0, true);
	struct mpa_prefs rsp = prefs((const uint8_t *)"no", 2, true);
	struct mpa_frames f;
	struct mpa_params p;
	struct mpa_rr rej;

	rejected_exchange(&ini, &rsp, &rej, &p, &f);
	cr_assert_eq(rej.ext_max_ulpdu, 0);
	cr_assert_eq(f.plen, MPA_RR_HDR_LEN + MPA_IRD_ORD_LEN + 2);
	cr_assert_eq(p.peer_pdata_len, 2);
	cr_assert_eq(p.peer_max_ulpdu, 0);
}

Test(mpa_ext, garbled_extension_is_ulp_data)
{
	/* A Request whose trailing octets look almost like an extension:
	 * the Responder's ULP gets all of them, as a third party's would,
	 * and the connection goes on with small FPDUs. */
	uint8_t pd[3 + MPA_EXT_LEN], qbuf[FRAME_MAX];
	struct mpa_rr req = {
		.type = MPA_REQUEST, .rev = 2, .enhanced = true, .ird = 1,
		.ord = 1, .pdata = pd, .pdata_len = sizeof(pd),
	};
	struct mpa_prefs rsp = prefs(NULL, 0, true);
	struct mpa_rr got, reply, reject;
	struct mpa_params pr;
	enum mpa_error err;
	size_t qlen;

	pd[0] = 'a';
	pd[1] = 'b';
	pd[2] = 'c';
	mpa_ext_put(pd + 3, 9000);
	pd[sizeof(pd) - 1] ^= 0x20;     /* "WISP-EXt" */
	qlen = build(&req, qbuf);
	cr_assert_eq(mpa_nego_check_request(qbuf, qlen, &rsp, &got, &reject,
					    &err), (int)qlen);
	cr_assert_eq(got.ext_max_ulpdu, 0);
	cr_assert_eq(got.pdata_len, sizeof(pd));
	cr_assert_arr_eq(got.pdata, pd, sizeof(pd));
	cr_assert_eq(mpa_nego_accept(&got, &rsp, &reply, &pr), 0);
	cr_assert_eq(reply.ext_max_ulpdu, 0);
	cr_assert_eq(pr.peer_max_ulpdu, 0);
	cr_assert_eq(pr.peer_pdata_len, sizeof(pd));
}

Test(mpa_ext, rev1_carries_it_too)
{
	struct mpa_prefs ini = prefs((const uint8_t *)"r1", 2, true);
	struct mpa_prefs rsp = prefs(NULL, 0, true);
	struct mpa_params pi, pr;
	struct mpa_rr got;
	bool qe, pe;

	ini.rev = 1;
	cr_assert_gt(exchange(&ini, &rsp, &got, &pi, &pr, &qe, &pe), 0);
	cr_assert(qe && pe);
	cr_assert_eq(pi.rev, 1);
	cr_assert_eq(got.pdata_len, 2);
	cr_assert_eq(pi.peer_max_ulpdu, MPA_ULPDU_MAX);
	cr_assert_eq(pr.peer_max_ulpdu, MPA_ULPDU_MAX);
}
