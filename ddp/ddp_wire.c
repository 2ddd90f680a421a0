/* SPDX-License-Identifier: MIT */
/*
 * ddp_wire.c - DDP (RFC 5041) segment headers, error names and the
 * receiver's placement checks.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ddp.h"
#include "ddp_internal.h"

/* RFC 5040 section 7: the DDP layer's number in the Terminate control. */
#define DDP_TERM_LAYER 1u

enum {
	DDP_ETYPE_CATASTROPHIC = 0,
	DDP_ETYPE_TAGGED       = 1,
	DDP_ETYPE_UNTAGGED     = 2,
};

struct ddp_error_row {
	uint8_t etype;
	uint8_t code;
	const char *name;
};

/* RFC 5041 section 7.2 "DDP Error Numbers", indexed by enum ddp_error. */
static const struct ddp_error_row ddp_errors[] = {
	[DDP_ERR_NONE]               = { 0, 0x00, "no error" },
	[DDP_ERR_LOCAL_CATASTROPHIC] = { DDP_ETYPE_CATASTROPHIC, 0x00,
					 "local catastrophic" },
	[DDP_ERR_T_INVALID_STAG]     = { DDP_ETYPE_TAGGED, 0x00,
					 "invalid STag" },
	[DDP_ERR_T_BASE_BOUNDS]      = { DDP_ETYPE_TAGGED, 0x01,
					 "base or bounds violation" },
	[DDP_ERR_T_STAG_NOT_ASSOC]   = { DDP_ETYPE_TAGGED, 0x02,
					 "STag not associated with DDP stream" },
	[DDP_ERR_T_TO_WRAP]          = { DDP_ETYPE_TAGGED, 0x03, "TO wrap" },
	[DDP_ERR_T_VERSION]          = { DDP_ETYPE_TAGGED, 0x04,
					 "invalid DDP version (tagged)" },
	[DDP_ERR_U_INVALID_QN]       = { DDP_ETYPE_UNTAGGED, 0x01,
					 "invalid QN" },
	[DDP_ERR_U_MSN_NO_BUFFER]    = { DDP_ETYPE_UNTAGGED, 0x02,
					 "invalid MSN - no buffer available" },
	[DDP_ERR_U_MSN_RANGE]        = { DDP_ETYPE_UNTAGGED, 0x03,
					 "invalid MSN - MSN range is not valid" },
	[DDP_ERR_U_INVALID_MO]       = { DDP_ETYPE_UNTAGGED, 0x04,
					 "invalid MO" },
	[DDP_ERR_U_TOO_LONG]         = { DDP_ETYPE_UNTAGGED, 0x05,
					 "DDP message too long for available buffer" },
	[DDP_ERR_U_VERSION]          = { DDP_ETYPE_UNTAGGED, 0x06,
					 "invalid DDP version (untagged)" },
	/* No code of its own in RFC 5041: a segment too short to hold its
	 * header is reported as a local catastrophic error. */
	[DDP_ERR_SEG_TOO_SHORT]      = { DDP_ETYPE_CATASTROPHIC, 0x00,
					 "segment shorter than its header" },
};

_Static_assert(sizeof(ddp_errors) / sizeof(ddp_errors[0]) == DDP_ERR__COUNT,
	       "one row per enum ddp_error");

/*
 * Terminate encoding of err. DDP_ERR_NONE gives 0; a value outside the
 * enum is reported as a DDP local catastrophic error, the only honest
 * name for "something we cannot describe went wrong".
 */
uint16_t ddp_error_term(enum ddp_error err)
{
	const struct ddp_error_row *row;

	if (err == DDP_ERR_NONE)
		return 0;
	if ((unsigned int)err >= DDP_ERR__COUNT)
		err = DDP_ERR_LOCAL_CATASTROPHIC;
	row = &ddp_errors[err];
	return (uint16_t)(DDP_TERM_LAYER << 12 | (unsigned int)row->etype << 8 |
			  row->code);
}

/* Human-readable name of err; never NULL. */
const char *ddp_error_str(enum ddp_error err)
{
	if ((unsigned int)err >= DDP_ERR__COUNT)
		return "unknown DDP error";
	return ddp_errors[err].name;
}

/*
 * Encode h at buf: 14 octets (tagged) or 18 (untagged). Returns the length,
 * -EINVAL on NULL, -ENOSPC if cap is short (nothing written then).
 */
int ddp_hdr_build(const struct ddp_hdr *h, uint8_t *buf, size_t cap)
{
	size_t len;
	uint8_t ctrl;

	if (!h || !buf)
		return -EINVAL;
	len = ddp_hdr_len(h->tagged);
	if (cap < len)
		return -ENOSPC;

	/*
	 * RFC 5041 section 4.1: Rsvd "MUST be set to zero" on transmit, and
	 * DV "MUST be set to one (01b)" for this version of the protocol.
	 */
	ctrl = DDP_VERSION & DDP_CTRL_DV_MASK;
	if (h->tagged)
		ctrl |= DDP_CTRL_T;
	if (h->last)
		ctrl |= DDP_CTRL_L;
	buf[DDP_OFF_CTRL] = ctrl;
	buf[DDP_OFF_ULP_CTRL] = h->ulp_ctrl;

	if (h->tagged) {
		wisp_put_be32(buf + DDP_OFF_STAG, h->t.stag);
		wisp_put_be64(buf + DDP_OFF_TO, h->t.to);
	} else {
		wisp_put_be32(buf + DDP_OFF_ULP_WORD, h->u.ulp_word);
		wisp_put_be32(buf + DDP_OFF_QN, h->u.qn);
		wisp_put_be32(buf + DDP_OFF_MSN, h->u.msn);
		wisp_put_be32(buf + DDP_OFF_MO, h->u.mo);
	}
	return (int)len;
}

/*
 * Decode the DDP header at buf (len octets available). Returns 14 or 18,
 * -EAGAIN if fewer octets than the header the T bit announces, -EPROTO
 * with *err = the tagged/untagged version error if DV != 1 (*h is filled
 * in anyway so that a Terminate can quote it), -EINVAL on NULL.
 * Never reads past buf + len.
 */
int ddp_hdr_parse(const uint8_t *buf, size_t len, struct ddp_hdr *h,
		  enum ddp_error *err)
{
	uint8_t hdr[DDP_UNTAGGED_HDR_LEN];
	size_t hlen;
	bool tagged;

	if (!buf || !h || !err)
		return -EINVAL;
	*err = DDP_ERR_NONE;
	if (len < 1)
		return -EAGAIN;

	tagged = (buf[DDP_OFF_CTRL] & DDP_CTRL_T) != 0;
	hlen = ddp_hdr_len(tagged);
	if (len < hlen)
		return -EAGAIN;
	/* Work on a private copy: the caller's buffer may change under us
	 * (shared with the receive path) and may be misaligned. A copy of
	 * constant size, one per buffer model: the compiler keeps it in
	 * registers, where an octet-wise copy loop left it in memory to be
	 * read back in wider loads across its own stores, where perf put
	 * most of the parse's samples (one parse per FPDU received). */
	if (tagged)
		memcpy(hdr, buf, DDP_TAGGED_HDR_LEN);
	else
		memcpy(hdr, buf, DDP_UNTAGGED_HDR_LEN);

	ddp_hdr_fields(hdr, h);

	/*
	 * RFC 5041 section 4.1: the Rsvd bits are set to zero by the sender
	 * and not checked by the receiver, so DDP_CTRL_RSVD_MASK is ignored
	 * here on purpose (a later DDP version may give them a meaning).
	 *
	 * DV: "This field MUST be set to one (01b) to indicate the version
	 * of the specification described in this document."  Anything else
	 * is the tagged or untagged "Invalid DDP version" error (section 7.2).
	 */
	if (h->dv != DDP_VERSION) {
		*err = h->tagged ? DDP_ERR_T_VERSION : DDP_ERR_U_VERSION;
		return -EPROTO;
	}
	return (int)hlen;
}

/*
 * Checks for an untagged segment, in the order of RFC 5041 section 7.1.
 * Returns 0, or -EPROTO with *err set; -EINVAL on NULL or a tagged h.
 */
int ddp_check_untagged(const struct ddp_hdr *h, uint32_t payload_len,
		       const struct ddp_untagged_ctx *ctx, enum ddp_error *err)
{
	uint32_t ahead;

	if (!h || !ctx || !err || h->tagged)
		return -EINVAL;
	*err = DDP_ERR_NONE;

	/* RFC 5041 section 7.1: "The QN is valid for this stream." */
	if (h->u.qn >= ctx->nqueues) {
		*err = DDP_ERR_U_INVALID_QN;
		return -EPROTO;
	}

	/*
	 * "The MSN falls in the range of legal MSNs for the queue defined by
	 * the QN. The range is defined as the MSN value of the first
	 * available buffer for the QN to the MSN value of the last available
	 * buffer for the QN."  MSNs wrap modulo 2^32 (section 4.3), so the
	 * distance ahead of expected_msn is taken in uint32_t arithmetic.
	 */
	ahead = h->u.msn - ctx->expected_msn;
	if (ahead >= ctx->msn_window) {
		*err = DDP_ERR_U_MSN_RANGE;
		return -EPROTO;
	}

	/* "The QN and MSN have an associated buffer that allows Placement
	 * of the payload." */
	if (!ctx->buffer_posted) {
		*err = DDP_ERR_U_MSN_NO_BUFFER;
		return -EPROTO;
	}

	/*
	 * "The MO falls in the range of legal offsets associated with the
	 * Untagged Buffer", else "Invalid MO"; an MO inside the buffer whose
	 * payload runs past its end is "DDP Message too long for available
	 * buffer".  Section 7.1 asks these checks only of non-zero length
	 * segments; an empty one places nothing, so it is only held to the
	 * weaker MO <= buffer_len (which every sane sender meets: MO 0).
	 */
	if (payload_len == 0) {
		if (h->u.mo > ctx->buffer_len) {
			*err = DDP_ERR_U_INVALID_MO;
			return -EPROTO;
		}
		return 0;
	}
	if (h->u.mo >= ctx->buffer_len) {
		*err = DDP_ERR_U_INVALID_MO;
		return -EPROTO;
	}
	if (payload_len > ctx->buffer_len - h->u.mo) {
		*err = DDP_ERR_U_TOO_LONG;
		return -EPROTO;
	}
	return 0;
}

/*
 * Checks for a tagged segment, in the order of RFC 5041 section 7.1.
 * Returns 0, or -EPROTO with *err set; -EINVAL on NULL or an untagged h.
 */
int ddp_check_tagged(const struct ddp_hdr *h, uint32_t payload_len,
		     const struct ddp_tagged_buf *buf, enum ddp_error *err)
{
	if (!h || !buf || !err || !h->tagged)
		return -EINVAL;
	*err = DDP_ERR_NONE;

	/*
	 * RFC 5041 section 5.2: "Only the DDP Control and RsvdULP Fields
	 * MUST be valid for a zero-length Tagged DDP Segment. The STag and TO
	 * fields MUST NOT be checked for a zero-length Tagged DDP Message."
	 */
	if (payload_len == 0)
		return 0;

	/* Section 7.1: "The STag is valid for this stream." */
	if (!buf->valid) {
		*err = DDP_ERR_T_INVALID_STAG;
		return -EPROTO;
	}
	/* Section 8.2: an STag used on a stream (or PD) it is not associated
	 * with "MUST NOT" be placed and is reported as a distinct error. */
	if (!buf->same_stream) {
		*err = DDP_ERR_T_STAG_NOT_ASSOC;
		return -EPROTO;
	}
	/* Section 7.1: "The TO falls in the range of legal offsets
	 * registered for the STag", TO + length does not wrap, and so the
	 * whole segment lies inside the buffer. */
	*err = ddp_tagged_range(buf->base_to, buf->len, h->t.to, payload_len);
	return *err == DDP_ERR_NONE ? 0 : -EPROTO;
}

/*
 * The one range check of a tagged buffer, for DDP placement and for
 * RDMAP's local and Read Request checks alike. Never forms a sum that can
 * wrap (base_to + buf_len may exceed 2^64 - 1 for a buffer that ends at
 * the top of the TO space).
 */
enum ddp_error ddp_tagged_range(uint64_t base_to, uint64_t buf_len,
				uint64_t to, uint64_t len)
{
	uint64_t off;

	if (len == 0)
		return DDP_ERR_NONE;
	/* RFC 5041 7.1: "A 64-bit unsigned sum of the DDP Segment payload
	 * length and the TO does not wrap." TO + len == 2^64 wraps too. */
	if (to > UINT64_MAX - len)
		return DDP_ERR_T_TO_WRAP;
	/* Compare by distance from the base: off + len <= buf_len, written
	 * so that neither side can wrap. */
	if (to < base_to)
		return DDP_ERR_T_BASE_BOUNDS;
	off = to - base_to;
	if (off > buf_len || len > buf_len - off)
		return DDP_ERR_T_BASE_BOUNDS;
	return DDP_ERR_NONE;
}
