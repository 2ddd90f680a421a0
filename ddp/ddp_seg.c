/* SPDX-License-Identifier: MIT */
/*
 * ddp_seg.c - segmentation of one DDP message into DDP segments no larger
 * than MULPDU (RFC 5041 section 5.2).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "ddp.h"

/* RFC 5041 section 5.2: "The ULP Message Length MUST be less than 2^32." */
#define DDP_MSG_LEN_MAX UINT32_MAX

/*
 * Prepare it to cut a message of msg_len octets described by tmpl.
 * Returns 0; -EINVAL on NULL, if mulpdu leaves no payload room after the
 * header, if msg_len is 2^32 or more, or if a tagged message would run
 * past TO 2^64 - 1 (the receiver would answer with "TO wrap").
 */
int ddp_seg_init(struct ddp_seg_iter *it, const struct ddp_hdr *tmpl,
		 uint64_t msg_len, uint32_t mulpdu)
{
	size_t hlen;

	if (!it || !tmpl)
		return -EINVAL;
	hlen = ddp_hdr_len(tmpl->tagged);
	if (mulpdu <= hlen)
		return -EINVAL;
	/* RFC 5041 section 5.2: "The ULP Message Length MUST be less than
	 * 2^32."  For untagged messages this is also what keeps every MO
	 * inside its 32 bits. */
	if (msg_len > DDP_MSG_LEN_MAX)
		return -EINVAL;
	/* Every segment must pass the receiver's TO wrap check: TO plus
	 * length may not wrap the 64-bit sum (RFC 5041 7.1). */
	if (tmpl->tagged && tmpl->t.to > UINT64_MAX - msg_len)
		return -EINVAL;

	it->tmpl = *tmpl;
	it->tmpl.last = false;
	it->msg_len = msg_len;
	it->done = 0;
	it->max_payload = mulpdu - (uint32_t)hlen;
	it->finished = false;
	return 0;
}

/*
 * Produce the next segment: *hdr is the template with TO advanced (tagged)
 * or MO set (untagged) and L set on the last segment; the payload is
 * message octets [*payload_off, *payload_off + *payload_len).
 * Returns 1, 0 once the message is done, -EINVAL on NULL.
 */
int ddp_seg_next(struct ddp_seg_iter *it, struct ddp_hdr *hdr,
		 uint64_t *payload_off, uint32_t *payload_len)
{
	uint64_t left;
	uint32_t n;

	if (!it || !hdr || !payload_off || !payload_len)
		return -EINVAL;
	if (it->finished)
		return 0;

	left = it->msg_len - it->done;
	n = left > it->max_payload ? it->max_payload : (uint32_t)left;

	*hdr = it->tmpl;
	/*
	 * RFC 5041 section 5.2: for tagged segments "the TO MUST be set to
	 * the byte offset from the first byte in the associated ULP Message
	 * to the first byte of the ULP Payload contained in the DDP Segment
	 * plus the TO assigned to the first byte"; for untagged ones "the MO
	 * MUST be set to the byte offset from the first byte in the
	 * associated ULP Message".  ddp_seg_init() ruled out both overflows.
	 */
	if (hdr->tagged)
		hdr->t.to = it->tmpl.t.to + it->done;
	else
		hdr->u.mo = (uint32_t)it->done;

	*payload_off = it->done;
	*payload_len = n;
	it->done += n;
	/* Section 4.1: L is one on the last segment of a message and zero
	 * on every other.  Section 5.2: a zero-length message "MUST consume
	 * exactly one DDP Segment", so that one segment gets L. */
	if (it->done == it->msg_len) {
		hdr->last = true;
		it->finished = true;
	}
	return 1;
}

/*
 * Segments a message of msg_len octets takes with max_payload octets per
 * segment: at least 1 (a zero-length message is one segment).  A
 * max_payload of 0 cannot carry anything; then 0 is returned for a
 * non-empty message.
 */
uint64_t ddp_seg_count(uint64_t msg_len, uint32_t max_payload)
{
	if (msg_len == 0)
		return 1;
	if (max_payload == 0)
		return 0;
	return (msg_len - 1) / max_payload + 1;
}
