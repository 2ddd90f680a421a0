/* SPDX-License-Identifier: MIT */
/*
 * ddp.h - Direct Data Placement over reliable transports (RFC 5041).
 *
 * Pure codecs: the tagged and untagged segment headers, segmentation of a
 * message into DDP segments no larger than MULPDU, and validation of every
 * header field against the receiver's expectations, each fault named with
 * its RFC 5041 section 7 error type and code.
 *
 * DDP knows nothing of RDMAP: the "reserved for ULP" octets (octet 1 of
 * both headers and the 32-bit word of the untagged header) are carried
 * opaquely for the layer above.
 *
 * Errors: 0 (or a length) on success, -errno on misuse, -EPROTO with an
 * enum ddp_error for a protocol fault.
 */
#ifndef WISP_DDP_H
#define WISP_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wisp_wire.h"

#define DDP_VERSION           1
#define DDP_TAGGED_HDR_LEN    14  /* ctrl(1) ulp(1) STag(4) TO(8) */
#define DDP_UNTAGGED_HDR_LEN  18  /* ctrl(1) ulp(1) ulp(4) QN(4) MSN(4) MO(4) */

/* DDP control octet (octet 0 of every DDP header). */
#define DDP_CTRL_T            0x80  /* tagged buffer model */
#define DDP_CTRL_L            0x40  /* last segment of the message */
#define DDP_CTRL_RSVD_MASK    0x3c  /* reserved, zero on send */
#define DDP_CTRL_DV_MASK      0x03  /* DDP version */

/*
 * Faults of RFC 5041 section 7. Terminate layer DDP (1); error types:
 * 0 local catastrophic, 1 tagged buffer, 2 untagged buffer.
 */
enum ddp_error {
	DDP_ERR_NONE = 0,
	DDP_ERR_LOCAL_CATASTROPHIC,   /* etype 0, code 0x00 */
	DDP_ERR_T_INVALID_STAG,       /* etype 1, code 0x00 */
	DDP_ERR_T_BASE_BOUNDS,        /* etype 1, code 0x01 */
	DDP_ERR_T_STAG_NOT_ASSOC,     /* etype 1, code 0x02 */
	DDP_ERR_T_TO_WRAP,            /* etype 1, code 0x03 */
	DDP_ERR_T_VERSION,            /* etype 1, code 0x04 */
	DDP_ERR_U_INVALID_QN,         /* etype 2, code 0x01 */
	DDP_ERR_U_MSN_NO_BUFFER,      /* etype 2, code 0x02 */
	DDP_ERR_U_MSN_RANGE,          /* etype 2, code 0x03 */
	DDP_ERR_U_INVALID_MO,         /* etype 2, code 0x04 */
	DDP_ERR_U_TOO_LONG,           /* etype 2, code 0x05 */
	DDP_ERR_U_VERSION,            /* etype 2, code 0x06 */
	DDP_ERR_SEG_TOO_SHORT,        /* local catastrophic: shorter than its header */
	DDP_ERR__COUNT
};

/* layer << 12 | etype << 8 | code, as in the RDMAP Terminate control.
 * DDP_ERR_NONE gives 0; a value outside the enum gives the local
 * catastrophic encoding (0x1000). */
uint16_t ddp_error_term(enum ddp_error err);
/* A short human-readable name, never NULL. */
const char *ddp_error_str(enum ddp_error err);

/* One parsed or to-be-built DDP segment header. */
struct ddp_hdr {
	bool tagged;              /* T */
	bool last;                /* L */
	uint8_t dv;               /* on build: ignored, DDP_VERSION is sent */
	uint8_t ulp_ctrl;         /* octet 1: reserved for the ULP (RDMAP) */
	union {
		struct {
			uint32_t stag;
			uint64_t to;
		} t;
		struct {
			uint32_t ulp_word; /* octets 2..5: reserved for the ULP */
			uint32_t qn;
			uint32_t msn;
			uint32_t mo;
		} u;
	};
};

static inline size_t ddp_hdr_len(bool tagged)
{
	return tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
}

/*
 * Encode h at buf. Returns the header length, or -ENOSPC if cap is short,
 * -EINVAL on NULL. The reserved control bits are sent as zero and DV as
 * DDP_VERSION.
 */
int ddp_hdr_build(const struct ddp_hdr *h, uint8_t *buf, size_t cap);

/*
 * Decode the header at the start of a DDP segment of len octets.
 * Returns the header length (14 or 18) with *h filled; -EAGAIN if len is
 * shorter than the header the T bit announces; -EPROTO with *err set if
 * DV is not DDP_VERSION (the tagged or untagged version error, by T; *h
 * is still filled in so that a Terminate can quote it); -EINVAL on NULL
 * (err included). The reserved control bits are not checked (RFC 5041
 * section 4.1). Never reads past buf + len.
 */
int ddp_hdr_parse(const uint8_t *buf, size_t len, struct ddp_hdr *h,
		  enum ddp_error *err);

/* Offsets inside the DDP headers (RFC 5041 sections 4.2 and 4.3). */
enum {
	DDP_OFF_CTRL     = 0,
	DDP_OFF_ULP_CTRL = 1,
	DDP_OFF_STAG     = 2,   /* tagged */
	DDP_OFF_TO       = 6,   /* tagged */
	DDP_OFF_ULP_WORD = 2,   /* untagged */
	DDP_OFF_QN       = 6,   /* untagged */
	DDP_OFF_MSN      = 10,  /* untagged */
	DDP_OFF_MO       = 14,  /* untagged */
};

_Static_assert(DDP_OFF_TO + 8 == DDP_TAGGED_HDR_LEN,
	       "RFC 5041 4.2: tagged header is 14 octets");
_Static_assert(DDP_OFF_MO + 4 == DDP_UNTAGGED_HDR_LEN,
	       "RFC 5041 4.3: untagged header is 18 octets");

/*
 * A receiver's shortcut for the commonest headers: the header at b
 * (DDP_TAGGED_HDR_LEN or DDP_UNTAGGED_HDR_LEN octets readable) of a
 * message's last segment, DDP version 1 (T set or clear, L set, DV 1;
 * the reserved bits are not checked, RFC 5041 section 4.1). Then *h is
 * filled as ddp_hdr_parse() fills it and the result is true; for any
 * other header it is false with *h untouched, and the caller takes
 * ddp_hdr_parse(), which names the fault if there is one.
 */
/* The fields of the header at b (its control octet says which buffer
 * model) into *h, unchecked: ddp_hdr_parse() and ddp_last_peek(). */
static inline void ddp_hdr_fields(const uint8_t *b, struct ddp_hdr *h)
{
	h->tagged = (b[DDP_OFF_CTRL] & DDP_CTRL_T) != 0;
	h->last = (b[DDP_OFF_CTRL] & DDP_CTRL_L) != 0;
	h->dv = b[DDP_OFF_CTRL] & DDP_CTRL_DV_MASK;
	h->ulp_ctrl = b[DDP_OFF_ULP_CTRL];
	if (h->tagged) {
		h->t.stag = wisp_get_be32(b + DDP_OFF_STAG);
		h->t.to = wisp_get_be64(b + DDP_OFF_TO);
	} else {
		h->u.ulp_word = wisp_get_be32(b + DDP_OFF_ULP_WORD);
		h->u.qn = wisp_get_be32(b + DDP_OFF_QN);
		h->u.msn = wisp_get_be32(b + DDP_OFF_MSN);
		h->u.mo = wisp_get_be32(b + DDP_OFF_MO);
	}
}

static inline bool ddp_last_peek(const uint8_t *b, struct ddp_hdr *h,
				 bool tagged)
{
	if ((b[DDP_OFF_CTRL] & (DDP_CTRL_T | DDP_CTRL_L | DDP_CTRL_DV_MASK)) !=
	    ((tagged ? DDP_CTRL_T : 0) | DDP_CTRL_L | DDP_VERSION))
		return false;
	ddp_hdr_fields(b, h);
	return true;
}

static inline bool ddp_tagged_last_peek(const uint8_t *b, struct ddp_hdr *h)
{
	return ddp_last_peek(b, h, true);
}

static inline bool ddp_untagged_last_peek(const uint8_t *b,
					  struct ddp_hdr *h)
{
	return ddp_last_peek(b, h, false);
}

/* ------------------------------------------------------------------ */
/* Receive-side validation (RFC 5041 sections 5 and 7)                */
/* ------------------------------------------------------------------ */

/*
 * What the receiver knows about an untagged queue: the number of queues
 * (QN must be below it), the MSN it expects next for the queue, and the
 * buffer the segment will land in. Over an in-order LLP (MPA/TCP) a valid
 * segment always carries expected_msn; with msn_window > 1 the caller
 * describes the buffer posted for the segment's own MSN.
 */
struct ddp_untagged_ctx {
	uint32_t nqueues;
	uint32_t expected_msn;    /* next MSN for this QN */
	uint32_t msn_window;      /* how many MSNs ahead are valid (>= 1) */
	bool buffer_posted;       /* a buffer is available for the MSN */
	uint64_t buffer_len;      /* its length in octets */
};

/*
 * Check an untagged segment carrying payload_len octets against ctx, in
 * this order: QN >= nqueues -> DDP_ERR_U_INVALID_QN; (msn - expected_msn)
 * mod 2^32 >= msn_window -> DDP_ERR_U_MSN_RANGE; no buffer posted ->
 * DDP_ERR_U_MSN_NO_BUFFER; MO past the buffer -> DDP_ERR_U_INVALID_MO
 * (MO >= buffer_len for a non-empty payload, MO > buffer_len for an empty
 * one); MO + payload_len > buffer_len -> DDP_ERR_U_TOO_LONG. Returns 0
 * or -EPROTO with *err set; -EINVAL on NULL or a tagged h.
 */
int ddp_check_untagged(const struct ddp_hdr *h, uint32_t payload_len,
		       const struct ddp_untagged_ctx *ctx, enum ddp_error *err);

/*
 * A tagged buffer as the receiver's memory table describes it: the STag is
 * valid for this stream, its base tagged offset and length.
 */
struct ddp_tagged_buf {
	bool valid;               /* STag is registered and enabled */
	bool same_stream;         /* associated with this DDP stream (PD) */
	uint64_t base_to;         /* first valid TO */
	uint64_t len;             /* octets from base_to */
};

/*
 * Check a tagged segment of payload_len octets against buf, in this order:
 * invalid STag, STag not associated, TO wrap (the 64-bit sum TO + len
 * wraps, RFC 5041 7.1), base or bounds ([TO, TO + len) not inside
 * [base_to, base_to + len)). A zero-length segment is not checked at all
 * (RFC 5041 section 5.2: its STag and TO "MUST NOT be checked").
 * Returns 0 or -EPROTO with *err set; -EINVAL on NULL or an untagged h.
 */
int ddp_check_tagged(const struct ddp_hdr *h, uint32_t payload_len,
		     const struct ddp_tagged_buf *buf, enum ddp_error *err);

/*
 * Is the range [to, to + len) inside the tagged buffer that starts at
 * base_to and holds buf_len octets? The range check of ddp_check_tagged(),
 * also used by RDMAP for local SGEs and Read Request sources. Returns
 * DDP_ERR_NONE if so (always for len 0), DDP_ERR_T_TO_WRAP if the 64-bit
 * sum to + len wraps (to + len == 2^64 included, RFC 5041 7.1), else
 * DDP_ERR_T_BASE_BOUNDS if any octet lies outside the buffer (a buffer of
 * buf_len 0 holds none). Correct for every input: no intermediate sum can
 * wrap, e.g. for a buffer that ends at TO 2^64 - 1.
 */
enum ddp_error ddp_tagged_range(uint64_t base_to, uint64_t buf_len,
				uint64_t to, uint64_t len);

/* ------------------------------------------------------------------ */
/* Segmentation (RFC 5041 section 5)                                  */
/* ------------------------------------------------------------------ */

/*
 * Splits one DDP message of msg_len octets into segments whose ULPDU
 * (header + payload) is at most mulpdu octets. Usage:
 *
 *   struct ddp_seg_iter it;
 *   ddp_seg_init(&it, &hdr_template, msg_len, mulpdu);
 *   while (ddp_seg_next(&it, &hdr, &off, &len) > 0) ... send hdr + payload
 *
 * Each segment's header is the template with L set on the last segment,
 * TO advanced (tagged) or MO set (untagged). A zero-length message is one
 * segment with L set.
 */
struct ddp_seg_iter {
	struct ddp_hdr tmpl;
	uint64_t msg_len;
	uint64_t done;
	uint32_t max_payload;
	bool finished;
};

/* Returns 0, or -EINVAL on NULL, if mulpdu leaves no room for payload
 * after the header, if msg_len >= 2^32 (RFC 5041 section 5.2: "The ULP
 * Message Length MUST be less than 2^32", tagged or not), or if a tagged
 * message's TO + length would wrap 64 bits. */
int ddp_seg_init(struct ddp_seg_iter *it, const struct ddp_hdr *tmpl,
		 uint64_t msg_len, uint32_t mulpdu);

/* Returns 1 and the next segment, 0 when the message is done, -EINVAL
 * on NULL. */
int ddp_seg_next(struct ddp_seg_iter *it, struct ddp_hdr *hdr,
		 uint64_t *payload_off, uint32_t *payload_len);

/* Number of segments the message takes (>= 1); max_payload must be
 * non-zero (0 is returned for a non-empty message if it is 0). */
uint64_t ddp_seg_count(uint64_t msg_len, uint32_t max_payload);

#endif /* WISP_DDP_H */
