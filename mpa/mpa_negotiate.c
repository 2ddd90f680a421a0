/* SPDX-License-Identifier: MIT */
/*
 * mpa_negotiate.c - the decisions of the MPA startup phase (RFC 5044
 * section 7.1.2) with the enhanced connection setup of RFC 6581 section 9:
 * which Request the Initiator sends, how the Responder answers it, and
 * what the Initiator makes of the Reply. Pure functions over struct
 * mpa_rr and byte buffers; the frames themselves are built and parsed by
 * mpa_setup.c.
 *
 * Choices where the RFCs leave room, with Linux siw (drivers/infiniband/
 * sw/siw/siw_cm.c) as the reference peer:
 *  - Rev 2 Requests always carry the IRD/ORD words (S set), as siw does;
 *    the Responder answers in the Request's revision.
 *  - IRD and ORD are limited to MPA_NEGO_IRD_ORD_LIMIT (siw's 128); a
 *    peer asking for more is clamped, never refused, on the Responder side.
 *  - After a rev 1 or non-enhanced rev 2 Request nothing is exchanged and
 *    the caller's IRD/ORD stand (RFC 6581 10: "let the ULP deal with ORD
 *    and IRD"); a connection manager that, like the kernel's with siw,
 *    proposes the peer's advertised values then ends up with 0 and 0.
 *  - Peer-to-peer: the Responder prefers the READ RTR and accepts the
 *    WRITE RTR; the SEND RTR is only offered or accepted when asked for,
 *    because it needs a receive posted by the peer's ULP (siw does not
 *    support it either).
 *  - wisp's large-FPDU extension (mpa.h, docs/wire-formats.md) rides at
 *    the end of the private data. The Initiator offers it when the ULP's
 *    data leaves room; the Responder answers with its own only to a
 *    Request that had one, and never in a Reject. A received extension
 *    is always taken out of the private data before the ULP sees it,
 *    whether or not this side uses it; what does not parse as one is
 *    the ULP's data.
 */
#include <errno.h>
#include <string.h>

#include "mpa.h"

#define MPA_RTR_ALL     (MPA_RTR_SEND | MPA_RTR_WRITE | MPA_RTR_READ)
#define MPA_RTR_DEFAULT (MPA_RTR_WRITE | MPA_RTR_READ)

static uint16_t clamp_limit(uint16_t v)
{
	return v > MPA_NEGO_IRD_ORD_LIMIT ? MPA_NEGO_IRD_ORD_LIMIT : v;
}

static uint16_t min16(uint16_t a, uint16_t b)
{
	return a < b ? a : b;
}

static uint16_t max16(uint16_t a, uint16_t b)
{
	return a > b ? a : b;
}

/* The extension offered with ULP private data of pdata_len octets, or 0
 * if there is no room for it (MPA_EXT_ULP_PD_MAX). */
static uint16_t ext_offer(uint16_t want, uint16_t pdata_len)
{
	return pdata_len + MPA_EXT_LEN <= MPA_EXT_ULP_PD_MAX ? want : 0;
}

/* Move a received extension out of rr's private data into
 * rr->ext_max_ulpdu (0 if there is none). */
static void ext_take(struct mpa_rr *rr)
{
	uint16_t max = 0, n;

	rr->ext_max_ulpdu = 0;
	n = mpa_ext_find(rr->pdata, rr->pdata_len, &max);
	if (!n)
		return;
	rr->pdata_len -= n;
	if (!rr->pdata_len)
		rr->pdata = NULL;
	rr->ext_max_ulpdu = max;
}

/* One RTR out of set: the preferred one if present, else READ, WRITE,
 * SEND in that order. 0 if set is empty. */
static uint8_t rtr_choose(uint8_t set, uint8_t prefer)
{
	static const uint8_t order[] = {
		MPA_RTR_READ, MPA_RTR_WRITE, MPA_RTR_SEND,
	};

	if (prefer && (set & prefer) == prefer &&
	    (prefer == MPA_RTR_READ || prefer == MPA_RTR_WRITE ||
	     prefer == MPA_RTR_SEND))
		return prefer;
	for (size_t i = 0; i < sizeof(order); i++)
		if (set & order[i])
			return order[i];
	return 0;
}

int mpa_nego_request(const struct mpa_prefs *prefs, struct mpa_rr *req)
{
	uint8_t rev, offered;
	int len;

	if (!prefs || !req)
		return -EINVAL;
	rev = prefs->rev ? prefs->rev : 2;
	if (rev != 1 && rev != 2)
		return -EINVAL;
	if (prefs->markers)
		return -EOPNOTSUPP;
	/* RFC 6581 6: "To use any enhanced connection establishment
	 * feature, this MUST be set to two or higher." */
	if (prefs->p2p && rev != 2)
		return -EINVAL;
	offered = prefs->rtr ? prefs->rtr : MPA_RTR_DEFAULT;
	if (offered & ~MPA_RTR_ALL)
		return -EINVAL;
	if (prefs->pdata_len && !prefs->pdata)
		return -EINVAL;

	memset(req, 0, sizeof(*req));
	req->type = MPA_REQUEST;
	req->rev = rev;
	req->crc = prefs->crc;
	/* The words go with every rev 2 Request: IRD/ORD negotiation is an
	 * enhanced feature we always want (RFC 6581 10: "The initiator MUST
	 * NOT use the enhanced RDMA connection establishment formats ...
	 * when no enhanced functionality is desired"). For rev 1 ird/ord
	 * are kept here for mpa_nego_reply() but not sent. */
	req->enhanced = rev == 2;
	req->ird = clamp_limit(prefs->ird);
	req->ord = clamp_limit(prefs->ord);
	if (prefs->p2p) {
		/* RFC 6581 9.2: "The initiator MUST set each Control Flag B,
		 * C, and D to 1 for each of the options it supports, if
		 * Control Flag A is set to 1." */
		req->p2p = true;
		req->rtr = offered;
		/* A READ RTR is an RDMA Read Request: it needs one ORD
		 * credit (siw raises ORD 0 to 1 in peer-to-peer mode). */
		if ((offered & MPA_RTR_READ) && !req->ord)
			req->ord = 1;
	}
	req->pdata = prefs->pdata_len ? prefs->pdata : NULL;
	req->pdata_len = prefs->pdata_len;
	req->ext_max_ulpdu = ext_offer(prefs->ext_max_ulpdu, prefs->pdata_len);

	len = mpa_rr_len(req);
	return len < 0 ? len : 0;
}

/* The Reply to req (accept or, with reject set by the caller, reject). */
static int build_reply(const struct mpa_rr *req, const struct mpa_prefs *local,
		       struct mpa_rr *reply, struct mpa_params *params)
{
	uint16_t ird, ord;
	int len;

	if (!req || !local || !reply || !params)
		return -EINVAL;
	if (req->type != MPA_REQUEST || (req->rev != 1 && req->rev != 2))
		return -EINVAL;
	if (local->markers)
		return -EOPNOTSUPP;
	if ((local->rtr & ~MPA_RTR_ALL) || (local->pdata_len && !local->pdata))
		return -EINVAL;

	memset(reply, 0, sizeof(*reply));
	memset(params, 0, sizeof(*params));
	reply->type = MPA_REPLY;
	/* siw answers in the Request's revision; RFC 6581 6: "A host
	 * accepting MPA connections MUST continue to accept MPA Requests
	 * with version one, even if it supports version two." */
	reply->rev = req->rev;
	/* RFC 5044 7.1.1: "When this bit is '1' in either the MPA Request
	 * Frame or MPA Reply Frame, CRCs MUST be generated and checked by
	 * both endpoints." Echoing the Initiator's C says so explicitly. */
	reply->crc = req->crc || local->crc;
	/* RFC 6581 10: "If the responder receives an enhanced MPA message,
	 * it MUST respond with an enhanced MPA message" and an unenhanced
	 * one to an unenhanced Request. */
	reply->enhanced = req->enhanced;

	ird = clamp_limit(local->ird);
	ord = clamp_limit(local->ord);
	if (req->enhanced) {
		uint16_t ird_word, ord_word;

		params->peer_ird = req->ird;
		params->peer_ord = req->ord;
		/* RFC 6581 9.1: "The responder MUST set its ORD at most to
		 * the initiator IRD." 0x3fff means the ULP negotiates: the
		 * local value stays and 0x3fff goes back. */
		if (req->ird == MPA_IRD_ORD_MAX) {
			ord_word = MPA_IRD_ORD_MAX;
		} else {
			ord = min16(ord, req->ird);
			ord_word = ord;
		}
		/* "Responder IRD ... is greater than or equal to the
		 * initiator ORD for successful negotiations": raise it, up
		 * to the limit (siw's relaxed negotiation does the same). */
		if (req->ord == MPA_IRD_ORD_MAX) {
			ird_word = MPA_IRD_ORD_MAX;
		} else {
			ird = max16(ird, clamp_limit(req->ord));
			ird_word = ird;
		}
		if (req->p2p) {
			uint8_t supported = local->rtr ? local->rtr :
					    MPA_RTR_DEFAULT;
			uint8_t common = req->rtr & supported;
			uint8_t pick = local->rtr_prefer ? local->rtr_prefer :
				       MPA_RTR_READ;

			/* RFC 6581 9.2: "If Control Flag A is 1 in the MPA
			 * Request message, then the responder MUST set
			 * Control Flag A to 1"; one option is named, and
			 * when none of the Initiator's is supported "the
			 * responder MUST set at least one RTR indication
			 * type option it supports." */
			reply->p2p = true;
			reply->rtr = rtr_choose(common ? common : supported,
						pick);
			/* RFC 6581 9.1: "if the initiator ORD is 0 ... and
			 * the responder supports use of a zero-length RDMA
			 * Read RTR indication, then the responder IRD can be
			 * set to 1." */
			if (reply->rtr == MPA_RTR_READ && !ird) {
				ird = 1;
				if (ird_word != MPA_IRD_ORD_MAX)
					ird_word = 1;
			}
			params->p2p = true;
			params->rtr = reply->rtr;
		}
		reply->ird = ird_word;
		reply->ord = ord_word;
	}

	reply->pdata = local->pdata_len ? local->pdata : NULL;
	reply->pdata_len = local->pdata_len;
	/* Large FPDUs each way only between two wisp peers: the Request
	 * said what the Initiator accepts, and this side sends up to that
	 * whether or not its Reply has room to say what it accepts. */
	if (req->ext_max_ulpdu && local->ext_max_ulpdu) {
		params->peer_max_ulpdu = req->ext_max_ulpdu;
		reply->ext_max_ulpdu = ext_offer(local->ext_max_ulpdu,
						 local->pdata_len);
	}
	len = mpa_rr_len(reply);
	if (len < 0)
		return len;

	params->rev = reply->rev;
	params->crc = reply->crc;
	params->enhanced = reply->enhanced;
	params->ird = ird;
	params->ord = ord;
	params->peer_pdata = req->pdata_len ? req->pdata : NULL;
	params->peer_pdata_len = req->pdata_len;
	return 0;
}

int mpa_nego_check_request(const uint8_t *buf, size_t len,
			   const struct mpa_prefs *local, struct mpa_rr *req,
			   struct mpa_rr *reject, enum mpa_error *err)
{
	struct mpa_prefs quiet;
	int ret;

	if (!buf || !local || !req || !reject || !err)
		return -EINVAL;
	*err = MPA_ERR_NONE;
	ret = mpa_rr_parse(buf, len, MPA_REQUEST, req, err);
	if (ret == -EPROTO && *err == MPA_ERR_ENHANCED) {
		/* S set, fewer than four octets of private data. RFC 6581 6:
		 * "Private Data MUST begin with enhanced RDMA connection
		 * establishment data". siw answers such a Request with a
		 * Reject Reply rather than a silent close; so do we, in the
		 * same revision, without IRD/ORD words it could not parse. */
		memset(reject, 0, sizeof(*reject));
		reject->type = MPA_REPLY;
		reject->rev = buf[MPA_RR_OFF_REV];
		reject->reject = true;
		reject->crc = (buf[MPA_RR_OFF_FLAGS] & MPA_FLAG_CRC) || local->crc;
		return -ECONNREFUSED;
	}
	if (ret < 0)
		return ret;
	ext_take(req);

	if (req->markers) {
		struct mpa_params unused;
		int r;

		/* RFC 5044 7.1.1: M in a Request means "Markers are
		 * REQUIRED in FPDUs sent from the Responder". wisp cannot
		 * send markers yet, so the Request is refused with R set, as
		 * siw does, and without the ULP seeing it. */
		quiet = *local;
		quiet.pdata = NULL;
		quiet.pdata_len = 0;
		quiet.markers = false;
		quiet.ext_max_ulpdu = 0;
		r = build_reply(req, &quiet, reject, &unused);
		if (r)
			return r;
		reject->reject = true;
		*err = MPA_ERR_LOCAL_CATASTROPHIC;
		return -ECONNREFUSED;
	}
	return ret;
}

int mpa_nego_accept(const struct mpa_rr *req, const struct mpa_prefs *local,
		    struct mpa_rr *reply, struct mpa_params *params)
{
	return build_reply(req, local, reply, params);
}

int mpa_nego_reject(const struct mpa_rr *req, const struct mpa_prefs *local,
		    struct mpa_rr *reply)
{
	struct mpa_params unused;
	int ret;

	ret = build_reply(req, local, reply, &unused);
	if (ret)
		return ret;
	/* RFC 6581 9.1 lets the Reject carry the Responder's IRD/ORD ("specify
	 * the required ORD in the MPA Reject Frame responder ORD"); they are
	 * the values an accept would have sent. No extension: there will be
	 * no FPDUs. */
	reply->reject = true;
	reply->ext_max_ulpdu = 0;
	return 0;
}

static int nego_fail(enum mpa_error *err, enum mpa_error what)
{
	*err = what;
	return -EPROTO;
}

int mpa_nego_reply(const struct mpa_rr *req, const struct mpa_prefs *local,
		   const uint8_t *buf, size_t len, struct mpa_params *params,
		   enum mpa_error *err)
{
	struct mpa_rr rep;
	uint16_t ird, ord;
	int ret;

	if (!req || !local || !buf || !params || !err)
		return -EINVAL;
	if (req->type != MPA_REQUEST)
		return -EINVAL;
	*err = MPA_ERR_NONE;
	memset(params, 0, sizeof(*params));

	ret = mpa_rr_parse(buf, len, MPA_REPLY, &rep, err);
	if (ret == -EPROTO && *err == MPA_ERR_ENHANCED &&
	    (buf[MPA_RR_OFF_FLAGS] & MPA_FLAG_REJECT)) {
		/* siw rejects a Request it cannot take (markers, CRC policy)
		 * by echoing the Request's flags with R added: S can then be
		 * set with no IRD/ORD words. A rejection is still a
		 * rejection; what follows the header is private data. */
		uint16_t pd_len = mpa_rr_pd_len(buf);

		*err = MPA_ERR_NONE;
		params->rev = buf[MPA_RR_OFF_REV];
		params->peer_pdata = pd_len ? buf + MPA_RR_HDR_LEN : NULL;
		params->peer_pdata_len = pd_len;
		return -ECONNREFUSED;
	}
	if (ret < 0)
		return ret;
	ext_take(&rep);

	params->rev = rep.rev;
	params->peer_pdata = rep.pdata;
	params->peer_pdata_len = rep.pdata_len;
	if (rep.enhanced) {
		params->peer_ird = rep.ird;
		params->peer_ord = rep.ord;
	}
	/* RFC 5044 7.1.2 rule 3: with R set "the implementation MUST exit
	 * MPA"; RFC 6581 9.1: the Responder's IRD and ORD are passed to the
	 * ULP "for both MPA Accept and Reject messages". */
	if (rep.reject)
		return -ECONNREFUSED;

	/* RFC 5044 7.1.1: M in a Reply means "Markers are REQUIRED in FPDUs
	 * sent from the Initiator", which wisp cannot do: a local failure
	 * with no code of its own (RFC 6581 9.3: code 5). */
	if (rep.markers)
		return nego_fail(err, MPA_ERR_LOCAL_CATASTROPHIC);
	/* RFC 5044 7.1.1 Rev: "If the MPA receiver cannot interoperate with
	 * the received version, then it MUST close the connection". The
	 * Responder answers in the revision of the Request. */
	if (rep.rev != req->rev)
		return nego_fail(err, MPA_ERR_BAD_REV);
	/* RFC 6581 10: "an enhanced responder is REQUIRED to respond with an
	 * enhanced RDMA connection establishment response, whereas an
	 * unenhanced responder ... closes the TCP connection". */
	if (req->enhanced && !rep.enhanced)
		return nego_fail(err, MPA_ERR_ENHANCED);

	params->crc = req->crc || rep.crc;
	params->enhanced = req->enhanced;
	ird = req->ird;
	ord = req->ord;
	if (req->enhanced) {
		/* RFC 6581 9.1: "the initiator MUST set its IRD at least to
		 * the responder ORD and its ORD at most to the responder
		 * IRD. If the initiator does not have sufficient resources
		 * for the required IRD, it MUST send a TERM message ...
		 * Error Code 6." 0x3fff leaves the local value unchanged. */
		if (rep.ird != MPA_IRD_ORD_MAX)
			ord = min16(ord, rep.ird);
		if (rep.ord != MPA_IRD_ORD_MAX) {
			if (rep.ord > MPA_NEGO_IRD_ORD_LIMIT)
				return nego_fail(err, MPA_ERR_INSUFFICIENT_IRD);
			ird = max16(ird, rep.ord);
		}
		/* A Reply without A to a peer-to-peer Request is taken as
		 * the client-server model: nothing to send first. */
		if (req->p2p && rep.p2p) {
			uint8_t common = rep.rtr & req->rtr;
			uint8_t pick;

			/* A READ RTR needs an ORD credit at the Initiator. */
			if (!ord)
				common &= (uint8_t)~MPA_RTR_READ;
			pick = rtr_choose(common, local->rtr_prefer ?
					  local->rtr_prefer : MPA_RTR_READ);
			/* RFC 6581 9.2: "If the initiator is not able to
			 * generate any of the responder-supported RTR
			 * indications, then it MUST send a TERM message ...
			 * Error Code 7." */
			if (!pick)
				return nego_fail(err, MPA_ERR_NO_MATCHING_RTR);
			params->p2p = true;
			params->rtr = pick;
		}
	}
	params->ird = ird;
	params->ord = ord;
	/* Large FPDUs only if the Request offered the extension and the
	 * Reply answered it; a Reply's extension to a Request without one
	 * is taken out of the private data and otherwise ignored. */
	if (req->ext_max_ulpdu && rep.ext_max_ulpdu)
		params->peer_max_ulpdu = rep.ext_max_ulpdu;
	return ret;
}
