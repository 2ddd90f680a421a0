/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the MPA negotiation (mpa/mpa_negotiate.c).
 *
 * Input: octet 0 chooses the local configuration (struct mpa_prefs):
 *   bit 0     revision 1 or 2 (rev 1 clears p2p)
 *   bit 1     CRC asked for
 *   bit 2     peer-to-peer
 *   bits 3-4  RTRs offered / accepted: default (WRITE|READ), WRITE, READ,
 *             SEND|WRITE|READ
 *   bit 5     prefer the WRITE RTR rather than the READ RTR
 *   bits 6-7  IRD and ORD: 0, 1, 16 or 200 (above the limit)
 * The rest is used three ways:
 *  1. as a Request, to the Responder (mpa_nego_check_request, then
 *     mpa_nego_accept and mpa_nego_reject on what it accepts);
 *  2. as a Reply, to an Initiator that sent the Request for the
 *     configuration (mpa_nego_reply);
 *  3. as private data (up to what fits) of a wisp-to-wisp exchange with
 *     that configuration on both sides, which must succeed and agree.
 * Each of the three runs twice: without and with wisp's large-FPDU
 * extension offered (WISP_BIG_FPDU off and on).
 * Checks: no read past the input (ASan), only documented results, every
 * frame built is one the parser accepts, IRD/ORD within the limit, one RTR
 * chosen out of those offered; the extension only used when both sides
 * sent it, only sent when it fits, never part of the ULP's private data.
 * Deterministic: no clock, no randomness.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mpa.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RTR_ALL (MPA_RTR_SEND | MPA_RTR_WRITE | MPA_RTR_READ)

static void check(int ok)
{
	if (!ok)
		abort();
}

static void prefs_of(uint8_t cfg, struct mpa_prefs *p)
{
	static const uint8_t rtrs[] = {
		0, MPA_RTR_WRITE, MPA_RTR_READ, RTR_ALL,
	};
	static const uint16_t depth[] = { 0, 1, 16, 200 };

	memset(p, 0, sizeof(*p));
	p->rev = (cfg & 1) ? 1 : 2;
	p->crc = (cfg & 2) != 0;
	p->p2p = (cfg & 4) && p->rev == 2;
	p->rtr = rtrs[(cfg >> 3) & 3];
	p->rtr_prefer = (cfg & 0x20) ? MPA_RTR_WRITE : MPA_RTR_READ;
	p->ird = depth[cfg >> 6];
	p->ord = depth[cfg >> 6];
}

static int one_bit(uint8_t v)
{
	return v && !(v & (v - 1));
}

static void check_depth(uint16_t v)
{
	check(v <= MPA_NEGO_IRD_ORD_LIMIT);
}

/* A frame the negotiation built must parse back as what it is. */
static void check_frame(const struct mpa_rr *rr)
{
	uint8_t out[MPA_RR_HDR_LEN + MPA_PD_MAX];
	struct mpa_rr back;
	enum mpa_error err;
	int len;

	len = mpa_rr_build(rr, out, sizeof(out));
	check(len >= MPA_RR_HDR_LEN);
	check(mpa_rr_parse(out, (size_t)len, rr->type, &back, &err) == len);
	if (rr->ext_max_ulpdu) {
		uint16_t max = 0;

		/* Last in the private data, within its budget, and all of
		 * the ULP's data before it. */
		check(mpa_ext_find(back.pdata, back.pdata_len, &max) ==
		      MPA_EXT_LEN && max == rr->ext_max_ulpdu);
		check(rr->pdata_len + MPA_EXT_LEN <= MPA_EXT_ULP_PD_MAX);
		back.pdata_len -= MPA_EXT_LEN;
		check(!rr->reject);
	}
	check(back.rev == rr->rev && back.crc == rr->crc &&
	      back.reject == rr->reject && back.enhanced == rr->enhanced &&
	      back.p2p == rr->p2p && back.pdata_len == rr->pdata_len);
	if (rr->enhanced)
		check(back.ird == rr->ird && back.ord == rr->ord &&
		      back.rtr == rr->rtr);
}

static void check_err(int ret, enum mpa_error err)
{
	if (ret == -EPROTO)
		check(err > MPA_ERR_NONE && err < MPA_ERR__COUNT);
}

/* 1. The input as a Request. */
static void as_request(const uint8_t *in, size_t len,
		       const struct mpa_prefs *local)
{
	struct mpa_rr req, reply;
	struct mpa_params params;
	enum mpa_error err;
	int ret;

	ret = mpa_nego_check_request(in, len, local, &req, &reply, &err);
	if (ret == -ECONNREFUSED) {
		/* MPA's own refusal: a Reply with R set. */
		check(reply.type == MPA_REPLY && reply.reject);
		check(err == MPA_ERR_ENHANCED ||
		      err == MPA_ERR_LOCAL_CATASTROPHIC);
		check_frame(&reply);
		return;
	}
	check_err(ret, err);
	if (ret < 0) {
		check(ret == -EAGAIN || ret == -EPROTO);
		return;
	}
	check(ret >= MPA_RR_HDR_LEN && (size_t)ret <= len && !req.markers);

	ret = mpa_nego_accept(&req, local, &reply, &params);
	check(ret == 0);
	check_frame(&reply);
	/* An extension answered only to one received, and only if offered;
	 * large FPDUs toward the Initiator only if it said it takes them. */
	check(!reply.ext_max_ulpdu ||
	      (req.ext_max_ulpdu && reply.ext_max_ulpdu == local->ext_max_ulpdu));
	check(params.peer_max_ulpdu == (local->ext_max_ulpdu ?
					req.ext_max_ulpdu : 0));
	check(params.peer_pdata_len == req.pdata_len);
	check(reply.rev == req.rev && !reply.reject);
	check(reply.crc == (req.crc || local->crc));
	check(reply.enhanced == req.enhanced);
	check(params.rev == req.rev && params.crc == reply.crc);
	check_depth(params.ird);
	check_depth(params.ord);
	/* RFC 6581 9.1: "The responder MUST set its ORD at most to the
	 * initiator IRD" (0x3fff: the ULP decides). */
	if (req.enhanced && req.ird != MPA_IRD_ORD_MAX)
		check(params.ord <= req.ird);
	if (req.enhanced && req.p2p) {
		/* RFC 6581 9.2: A echoed, exactly one RTR named. */
		check(reply.p2p && params.p2p && one_bit(reply.rtr));
		check(params.rtr == reply.rtr);
	} else {
		check(!reply.p2p && !params.p2p);
	}

	ret = mpa_nego_reject(&req, local, &reply);
	check(ret == 0 && reply.reject);
	check_frame(&reply);
}

/* 2. The input as the Reply to our Request. */
static void as_reply(const uint8_t *in, size_t len,
		     const struct mpa_prefs *local)
{
	struct mpa_params params;
	enum mpa_error err;
	struct mpa_rr req;
	int ret;

	check(mpa_nego_request(local, &req) == 0);
	check_frame(&req);
	ret = mpa_nego_reply(&req, local, in, len, &params, &err);
	check_err(ret, err);
	if (ret == -ECONNREFUSED || ret == -EAGAIN || ret == -EPROTO)
		return;
	check(ret >= MPA_RR_HDR_LEN && (size_t)ret <= len);
	check(params.rev == req.rev);
	check(!params.peer_max_ulpdu || req.ext_max_ulpdu);
	/* The ULP's data lies within the frame, before any extension. */
	check(!params.peer_pdata_len ||
	      (params.peer_pdata >= in + MPA_RR_HDR_LEN &&
	       params.peer_pdata + params.peer_pdata_len <= in + ret));
	check(!req.crc || params.crc);
	check_depth(params.ird);
	check_depth(params.ord);
	if (params.p2p) {
		/* One RTR, out of those offered; a READ RTR needs ORD. */
		check(req.p2p && one_bit(params.rtr) &&
		      (params.rtr & req.rtr));
		check(params.rtr != MPA_RTR_READ || params.ord > 0);
	}
}

/* 3. wisp to wisp with the same configuration: always agreed. */
static void self_talk(const uint8_t *pd, size_t len, struct mpa_prefs *p)
{
	uint8_t out[MPA_RR_HDR_LEN + MPA_PD_MAX];
	struct mpa_params ip, rp;
	struct mpa_rr req, parsed, reply;
	enum mpa_error err;
	uint16_t max = 0;
	size_t ulp;
	bool sent;
	int n, ret;

	p->pdata = len ? pd : NULL;
	p->pdata_len = (uint16_t)len;
	check(mpa_nego_request(p, &req) == 0);
	n = mpa_rr_build(&req, out, sizeof(out));
	check(n > 0);
	ret = mpa_nego_check_request(out, (size_t)n, p, &parsed, &reply, &err);
	check(ret == n);
	check(mpa_nego_accept(&parsed, p, &reply, &rp) == 0);
	n = mpa_rr_build(&reply, out, sizeof(out));
	check(n > 0);
	ret = mpa_nego_reply(&req, p, out, (size_t)n, &ip, &err);
	check(ret == n);
	check(ip.rev == rp.rev && ip.crc == rp.crc && ip.p2p == rp.p2p &&
	      ip.rtr == rp.rtr && ip.enhanced == rp.enhanced);
	check(ip.p2p == p->p2p);
	if (ip.enhanced) {
		/* RFC 6581 9.1: Initiator IRD >= Responder ORD, Initiator
		 * ORD <= Responder IRD. */
		check(ip.ird >= rp.ord && ip.ord <= rp.ird);
	}
	/* Large FPDUs both ways when offered and the private data leaves
	 * room for the extension; never otherwise. */
	sent = p->ext_max_ulpdu && len + MPA_EXT_LEN <= MPA_EXT_ULP_PD_MAX;
	/* The ULP's data as sent on both sides. Only data that itself ends
	 * in a well-formed extension, sent with no extension after it, is
	 * taken for one (docs/wire-formats.md). */
	ulp = len;
	if (!sent)
		ulp -= mpa_ext_find(len ? pd : NULL, (uint16_t)len, &max);
	check(rp.peer_max_ulpdu == (sent ? p->ext_max_ulpdu :
				    p->ext_max_ulpdu && ulp < len ? max : 0));
	check(ip.peer_max_ulpdu == (sent ? p->ext_max_ulpdu : 0));
	check(rp.peer_pdata_len == ulp && ip.peer_pdata_len == ulp);
	if (ulp)
		check(!memcmp(rp.peer_pdata, pd, ulp) &&
		      !memcmp(ip.peer_pdata, pd, ulp));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mpa_prefs prefs;
	size_t pd_max;

	if (size < 1)
		return 0;
	prefs_of(data[0], &prefs);
	data++;
	size--;

	/* Rev 2 Requests carry the four IRD/ORD octets in PD_Length. */
	pd_max = MPA_PD_MAX - (prefs.rev == 2 ? MPA_IRD_ORD_LEN : 0);
	for (int ext = 0; ext < 2; ext++) {
		prefs.pdata = NULL;
		prefs.pdata_len = 0;
		prefs.ext_max_ulpdu = ext ? MPA_ULPDU_MAX : 0;
		as_request(data, size, &prefs);
		as_reply(data, size, &prefs);
		self_talk(data, size < pd_max ? size : pd_max, &prefs);
	}
	return 0;
}
