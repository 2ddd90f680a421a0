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
 * The headers that follow the Terminate Control word, as the Hdrct bits
 * hdrct (RDMAP_TERM_HDRCT_*) describe them, into t. Returns 0, or
 * -EPROTO if the octets are fewer or more than hdrct describes.
 */
static int term_body(struct wisp_cur *c, unsigned int hdrct,
		     struct rdmap_terminate *t)
{
	uint16_t seg_len;
	uint8_t ctl0;

	if (hdrct & (RDMAP_TERM_HDRCT_M | RDMAP_TERM_HDRCT_D)) {
		if (!wisp_cur_be16(c, &seg_len))
			return -EPROTO;
		if (hdrct & RDMAP_TERM_HDRCT_M) {
			t->has_seg_len = true;
			t->seg_len = seg_len;
		}
	}
	if (hdrct & RDMAP_TERM_HDRCT_D) {
		size_t hlen;

		/* The quoted header's own T bit says how long it is. */
		if (!wisp_cur_peek_u8(c, &ctl0))
			return -EPROTO;
		hlen = ddp_hdr_len((ctl0 & DDP_CTRL_T) != 0);
		if (!wisp_cur_bytes(c, t->ddp_hdr, hlen))
			return -EPROTO;
		t->has_ddp_hdr = true;
		t->ddp_hdr_len = (uint8_t)hlen;
	}
	if (hdrct & RDMAP_TERM_HDRCT_R) {
		/*
		 * Linux siw means R for every RDMAP remote protection error
		 * but appends only the DDP header unless the faulting
		 * message was a Read Request (siw_send_terminate()). Accept
		 * exactly that shape (R, nothing left, quoted header not a
		 * Read Request) as "no RDMA header"; anything else short is
		 * malformed. (On little-endian hosts siw's R is not where
		 * RFC 5040 puts it: see siw_layout() below.)
		 */
		if (c->left == 0 && t->has_ddp_hdr &&
		    !term_ddp_hdr_is_read_req(t->ddp_hdr, t->ddp_hdr_len))
			return 0;
		if (!wisp_cur_bytes(c, t->rdma_hdr, RDMAP_READ_REQ_LEN))
			return -EPROTO;
		t->has_rdma_hdr = true;
		t->rdma_hdr_len = RDMAP_READ_REQ_LEN;
	}
	return c->left == 0 ? 0 : -EPROTO;
}

/*
 * Linux siw writes the Terminate Control word through a C bitfield
 * struct (iwarp.h, struct iwarp_terminate). On a little-endian host
 * (x86, arm64) the compiler lays it out from the least significant bit
 * of a little-endian word, so on the wire, read as RFC 5040 reads it:
 *   octet 0  EType in the high nibble, Layer in the low one (swapped);
 *   octet 1  the error code, where it belongs;
 *   octet 2  M in bit 0, D in bit 1, R in bit 2: all in what RFC 5040
 *            calls Reserved (control word bits 0x100, 0x200, 0x400),
 *            while the Hdrct bits (0xe000) read 000;
 *   octet 3  zero.
 * The headers then follow as siw's own bits say. A sender that follows
 * the RFC leaves Reserved zero, so Hdrct 000 with only those Reserved
 * bits set, and a body of exactly the length they describe, is siw's
 * layout and nothing else. (A siw Terminate without headers, Hdrct and
 * those bits all zero, cannot be told apart from an RFC one: it is read
 * as sent.)
 */
#define SIW_TERM_M        0x0100u
#define SIW_TERM_D        0x0200u
#define SIW_TERM_R        0x0400u
#define TERM_RESERVED     0x1fffu

static bool siw_layout(uint32_t ctrl)
{
	uint32_t siw = SIW_TERM_M | SIW_TERM_D | SIW_TERM_R;

	return ((ctrl >> TERM_HDRCT_SHIFT) & TERM_HDRCT_MASK) == 0 &&
	       (ctrl & TERM_RESERVED & ~siw) == 0 && (ctrl & siw) != 0;
}

static unsigned int siw_hdrct(uint32_t ctrl)
{
	return (ctrl & SIW_TERM_M ? RDMAP_TERM_HDRCT_M : 0) |
	       (ctrl & SIW_TERM_D ? RDMAP_TERM_HDRCT_D : 0) |
	       (ctrl & SIW_TERM_R ? RDMAP_TERM_HDRCT_R : 0);
}

/* The code siw meant: its octet 0 with the nibbles swapped back. */
static uint16_t siw_term(uint32_t ctrl)
{
	unsigned int o0 = (ctrl >> 24) & 0xff;

	return (uint16_t)((o0 & 0xf) << 12 | (o0 >> 4) << 8 |
			  ((ctrl >> 16) & 0xff));
}

/*
 * Decode a Terminate body of exactly len octets into t. Returns len,
 * with t filled: as RFC 5040 4.8 lays it out, or, when the octets are
 * recognisably Linux siw's little-endian layout (siw_layout()), as siw
 * meant them, with t->siw_layout set. Returns -EPROTO if len is short of
 * the Terminate Control word (t untouched), or if the headers are not
 * what the Hdrct bits describe in either layout: then t holds the code
 * as sent and no header, since the code alone still explains why the
 * peer gave up. -EINVAL on NULL. The reserved bits are not checked
 * otherwise. Never reads past buf + len.
 */
int rdmap_term_parse(const uint8_t *buf, size_t len,
		     struct rdmap_terminate *t)
{
	struct wisp_cur c = wisp_cur_init(buf, len);
	struct rdmap_terminate tmp = { 0 };
	struct wisp_cur body;
	uint32_t ctrl;

	if (!buf || !t)
		return -EINVAL;
	if (!wisp_cur_be32(&c, &ctrl))
		return -EPROTO;
	body = c;
	tmp.term = (uint16_t)(ctrl >> TERM_CODE_SHIFT);
	if (term_body(&c, (ctrl >> TERM_HDRCT_SHIFT) & TERM_HDRCT_MASK,
		      &tmp) == 0) {
		*t = tmp;
		return (int)len;
	}
	if (siw_layout(ctrl)) {
		tmp = (struct rdmap_terminate){ .term = siw_term(ctrl),
						.siw_layout = true };
		if (term_body(&body, siw_hdrct(ctrl), &tmp) == 0) {
			*t = tmp;
			return (int)len;
		}
	}
	*t = (struct rdmap_terminate){
		.term = (uint16_t)(ctrl >> TERM_CODE_SHIFT),
	};
	return -EPROTO;
}
