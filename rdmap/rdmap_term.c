/* SPDX-License-Identifier: MIT */
/*
 * rdmap_term.c - the Terminate message body (RFC 5040 section 4.8):
 *
 *   Terminate Control  32 bits: Layer(4) EType(4) Error Code(8)
 *                               Hdrct(3: M D R) Reserved(13)
 *   DDP Segment Length 16 bits  present if M or D
 *   Terminated DDP Header       14 or 18 octets (by its T bit), if D
 *   Terminated RDMA Header      28 octets (a Read Request), if R
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp.h"
#include "rdmap.h"
#include "rdmap_internal.h"

#define TERM_CODE_SHIFT   16      /* layer|etype|code in the top 16 bits */
#define TERM_HDRCT_SHIFT  13      /* then M, D, R */
#define TERM_HDRCT_MASK   0x7u
#define TERM_SEG_LEN_LEN  2

_Static_assert(RDMAP_TERM_CTRL_LEN == 4, "Terminate Control is 32 bits");
_Static_assert(TERM_HDRCT_SHIFT + 3 == TERM_CODE_SHIFT,
	       "Hdrct follows the error code, Reserved takes the low 13 bits");

static bool term_ddp_hdr_is_read_req(const uint8_t *ddp, size_t len)
{
	return len >= 2 && !(ddp[0] & DDP_CTRL_T) &&
	       (ddp[1] & RDMAP_CTRL_OP_MASK) == RDMAP_OP_READ_REQ;
}

/*
 * Fill t for fault in the segment at seg. Nothing is copied for an LLP
 * fault (an MPA error means the ULPDU framing itself is suspect), for a
 * local catastrophic error, when seg is NULL, or when fewer octets are
 * available than the DDP header its T bit announces. Otherwise M and D are
 * set with seg_len and the DDP header, and R too for an RDMAP remote
 * protection error on an untagged Read Request whose 28-octet header is
 * available (RFC 5040 figure 10). t == NULL or fault == NULL does nothing.
 */
void rdmap_term_from_fault(struct rdmap_terminate *t,
			   const struct rdmap_fault *fault,
			   const uint8_t *seg, size_t seg_avail,
			   uint16_t seg_len)
{
	size_t hlen, i;

	if (!t || !fault)
		return;
	*t = (struct rdmap_terminate){ .term = fault->term };

	switch (fault->layer) {
	case RDMAP_LAYER_RDMAP:
	case RDMAP_LAYER_DDP:
		break;
	case RDMAP_LAYER_LLP:
		return;
	default:
		/* Unknown layer: report the code, quote nothing. */
		return;
	}
	/* RFC 5040 4.8: "The DDP Header is not present if the Terminate
	 * Error Type is a Local Catastrophic Error" (figure 10: no header
	 * at all, in either layer). */
	if (rdmap_term_etype(fault->term) == 0)
		return;
	if (!seg || seg_avail < 1)
		return;
	hlen = ddp_hdr_len((seg[0] & DDP_CTRL_T) != 0);
	if (seg_avail < hlen)
		return;

	/* RFC 5040 section 4.8: M says the DDP Segment Length is valid, D
	 * that the terminated DDP header follows it. */
	t->has_seg_len = true;
	t->seg_len = seg_len;
	t->has_ddp_hdr = true;
	t->ddp_hdr_len = (uint8_t)hlen;
	for (i = 0; i < hlen; i++)
		t->ddp_hdr[i] = seg[i];

	/* R: RFC 5040 figure 10 includes the RDMA header only for a Remote
	 * Protection Error, and section 4.8 only "if the terminate is
	 * associated with an RDMA Read Request Message". */
	if (fault->layer != RDMAP_LAYER_RDMAP ||
	    rdmap_term_etype(fault->term) != 1 ||
	    !term_ddp_hdr_is_read_req(seg, hlen) ||
	    seg_avail - hlen < RDMAP_READ_REQ_LEN)
		return;
	t->has_rdma_hdr = true;
	t->rdma_hdr_len = RDMAP_READ_REQ_LEN;
	for (i = 0; i < RDMAP_READ_REQ_LEN; i++)
		t->rdma_hdr[i] = seg[hlen + i];
}

/*
 * Encode t's Terminate body. Returns its length, -EINVAL on NULL or an
 * inconsistent t (a DDP header whose length is not the one its T bit
 * gives, an RDMA header that is not 28 octets), -ENOSPC if cap is short.
 * Reserved bits are sent as zero; the segment length is sent as zero if
 * only D is set.
 */
int rdmap_term_build(const struct rdmap_terminate *t, uint8_t *buf,
		     size_t cap)
{
	uint32_t ctrl;
	unsigned int hdrct = 0;
	size_t need = RDMAP_TERM_CTRL_LEN;
	size_t off, i;

	if (!t || !buf)
		return -EINVAL;
	if (t->has_ddp_hdr &&
	    t->ddp_hdr_len != ddp_hdr_len((t->ddp_hdr[0] & DDP_CTRL_T) != 0))
		return -EINVAL;
	if (t->has_rdma_hdr && t->rdma_hdr_len != RDMAP_READ_REQ_LEN)
		return -EINVAL;

	if (t->has_seg_len)
		hdrct |= RDMAP_TERM_HDRCT_M;
	if (t->has_ddp_hdr)
		hdrct |= RDMAP_TERM_HDRCT_D;
	if (t->has_rdma_hdr)
		hdrct |= RDMAP_TERM_HDRCT_R;
	if (hdrct & (RDMAP_TERM_HDRCT_M | RDMAP_TERM_HDRCT_D))
		need += TERM_SEG_LEN_LEN;
	if (t->has_ddp_hdr)
		need += t->ddp_hdr_len;
	if (t->has_rdma_hdr)
		need += RDMAP_READ_REQ_LEN;
	if (cap < need)
		return -ENOSPC;

	ctrl = (uint32_t)t->term << TERM_CODE_SHIFT |
	       (uint32_t)hdrct << TERM_HDRCT_SHIFT;
	wisp_put_be32(buf, ctrl);
	off = RDMAP_TERM_CTRL_LEN;
	if (hdrct & (RDMAP_TERM_HDRCT_M | RDMAP_TERM_HDRCT_D)) {
		wisp_put_be16(buf + off, t->has_seg_len ? t->seg_len : 0);
		off += TERM_SEG_LEN_LEN;
	}
	if (t->has_ddp_hdr) {
		for (i = 0; i < t->ddp_hdr_len; i++)
			buf[off + i] = t->ddp_hdr[i];
		off += t->ddp_hdr_len;
	}
	if (t->has_rdma_hdr) {
		for (i = 0; i < RDMAP_READ_REQ_LEN; i++)
			buf[off + i] = t->rdma_hdr[i];
		off += RDMAP_READ_REQ_LEN;
	}
	return (int)off;
}

/*
 * Decode a Terminate body of exactly len octets into t. Returns len;
 * -EINVAL on NULL; -EPROTO if the body is shorter than its Hdrct bits
 * promise or longer than what they describe (which is also how a quoted
 * DDP header of the wrong length for its T bit shows). The reserved bits
 * are not checked. Never reads past buf + len.
 */
int rdmap_term_parse(const uint8_t *buf, size_t len,
		     struct rdmap_terminate *t)
{
	struct wisp_cur c = wisp_cur_init(buf, len);
	struct rdmap_terminate tmp = { 0 };
	unsigned int hdrct;
	uint32_t ctrl;
	uint16_t seg_len;
	uint8_t ctl0;
	size_t hlen;

	if (!buf || !t)
		return -EINVAL;
	if (!wisp_cur_be32(&c, &ctrl))
		return -EPROTO;
	tmp.term = (uint16_t)(ctrl >> TERM_CODE_SHIFT);
	hdrct = (ctrl >> TERM_HDRCT_SHIFT) & TERM_HDRCT_MASK;

	if (hdrct & (RDMAP_TERM_HDRCT_M | RDMAP_TERM_HDRCT_D)) {
		if (!wisp_cur_be16(&c, &seg_len))
			return -EPROTO;
		if (hdrct & RDMAP_TERM_HDRCT_M) {
			tmp.has_seg_len = true;
			tmp.seg_len = seg_len;
		}
	}
	if (hdrct & RDMAP_TERM_HDRCT_D) {
		/* The quoted header's own T bit says how long it is. */
		if (!wisp_cur_peek_u8(&c, &ctl0))
			return -EPROTO;
		hlen = ddp_hdr_len((ctl0 & DDP_CTRL_T) != 0);
		if (!wisp_cur_bytes(&c, tmp.ddp_hdr, hlen))
			return -EPROTO;
		tmp.has_ddp_hdr = true;
		tmp.ddp_hdr_len = (uint8_t)hlen;
	}
	if (hdrct & RDMAP_TERM_HDRCT_R) {
		/*
		 * Linux siw sets R for every RDMAP remote protection error
		 * but appends only the DDP header unless the faulting
		 * message was a Read Request. Accept exactly that shape
		 * (R, nothing left, quoted header not a Read Request) as
		 * "no RDMA header"; anything else short is malformed.
		 */
		if (c.left == 0 && tmp.has_ddp_hdr &&
		    !term_ddp_hdr_is_read_req(tmp.ddp_hdr, tmp.ddp_hdr_len))
			goto done;
		if (!wisp_cur_bytes(&c, tmp.rdma_hdr, RDMAP_READ_REQ_LEN))
			return -EPROTO;
		tmp.has_rdma_hdr = true;
		tmp.rdma_hdr_len = RDMAP_READ_REQ_LEN;
	}
done:
	if (c.left != 0)
		return -EPROTO;
	*t = tmp;
	return (int)len;
}
