// SPDX-License-Identifier: MIT
/*
 * rdmap_qp_rx.c - the receive side of the RDMAP queue pair.
 *
 * Octets land in the staging buffer, many FPDUs per read, and are
 * parsed there: each FPDU's DDP and RDMAP headers are checked before its
 * payload is copied to the target (registered memory or the posted
 * receive buffer). A payload of DIRECT_MIN octets or more is instead
 * received straight into the target once its header is checked, and the
 * MPA decoder runs its CRC over what was placed.
 */
#include "rdmap_qp_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ */
/* Receive states                                                     */
/* ------------------------------------------------------------------ */

static const char *const rx_state_names[RX__COUNT] = {
	[RX_HDR] = "HDR",
	[RX_PAYLOAD] = "PAYLOAD",
	[RX_DISCARD] = "DISCARD",
};

const char *qp_rx_state_name(enum rx_state s)
{
	if ((unsigned int)s >= RX__COUNT || !rx_state_names[s])
		return "?";
	return rx_state_names[s];
}

/* ------------------------------------------------------------------ */
/* Placement of large messages, past the cache                        */
/* ------------------------------------------------------------------ */

/*
 * Tagged payload copied out of the stage from RX_NT_AFTER octets into its
 * message on goes to the MR with non-temporal stores (x86-64): a large
 * WRITE or Read Response lands in memory that is rarely in the cache (an
 * RDMA target; the benchmark's rotate through 32 MiB), and an ordinary
 * store there first reads each line in and stalls the stores behind it
 * (the header checks of the next FPDU) until it has. Streaming stores
 * write whole lines without reading them; the partial lines at either
 * end of a payload are copied as before. The first RX_NT_AFTER octets of
 * every message are copied as before too, so a small message, which its
 * reader may look at next, stays in the cache. docs/performance-log.md, "FPDUs
 * that fit one segment: placing past the cache".
 *
 * Only how the octets are stored changes, not which ones or when: the
 * copy is the one rx_st_payload makes after the FPDU's header (and, with
 * CRC, the FPDU's CRC) was checked, into the one iovec dest_tagged gave.
 * Streaming stores are weakly ordered, so rx_nt_fence() (SFENCE) orders
 * them before anything that tells another thread the octets are there: a
 * message's end (a Read Response's completion, a later Send's), a fault
 * (flushed completions), dropping an MR reference, and the end of every
 * rdmap_qp_rx_done() call (after which the engine counts the octets as
 * arrived, and a program watching memory may read them).
 */
#define RX_NT_AFTER (64 * 1024)
#define RX_LINE     64

#if defined(__x86_64__)
__attribute__((target("avx512f")))
static void nt_lines_avx512(uint8_t *d, const uint8_t *s, size_t lines)
{
	for (; lines; lines--, d += RX_LINE, s += RX_LINE)
		_mm512_stream_si512((void *)d, _mm512_loadu_si512(s));
}

static void nt_lines_sse2(uint8_t *d, const uint8_t *s, size_t lines)
{
	for (; lines; lines--, d += RX_LINE, s += RX_LINE) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
}

/* memcpy(d, s, n), the whole lines of d with streaming stores. */
static void rx_copy_nt(struct rdmap_qp *qp, uint8_t *d, const uint8_t *s,
		       size_t n)
{
	size_t head = (size_t)(-(uintptr_t)d) & (RX_LINE - 1), lines;

	if (n < head + RX_LINE) {
		memcpy(d, s, n);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	lines = n / RX_LINE;
	if (__builtin_cpu_supports("avx512f"))
		nt_lines_avx512(d, s, lines);
	else
		nt_lines_sse2(d, s, lines);
	d += lines * RX_LINE;
	s += lines * RX_LINE;
	memcpy(d, s, n % RX_LINE);
	qp->rx_nt = true;
}

static void rx_nt_fence(struct rdmap_qp *qp)
{
	if (qp->rx_nt) {
		_mm_sfence();
		qp->rx_nt = false;
	}
}
#else
static void rx_copy_nt(struct rdmap_qp *qp, uint8_t *d, const uint8_t *s,
		       size_t n)
{
	(void)qp;
	memcpy(d, s, n);
}

static void rx_nt_fence(struct rdmap_qp *qp)
{
	(void)qp;
}
#endif

/* Queue a Terminate for fault f, quoting the current header; every later
 * octet of the stream is dropped. Returns the next state, RX_DISCARD. */
static enum rx_state rx_fault(struct rdmap_qp *qp, struct rdmap_fault f)
{
	rx_nt_fence(qp);
	qp_fault(qp, f, qp->hdr, qp->hdr_have, (uint16_t)qp->ulpdu_len);
	qp->rx_state = RX_DISCARD;
	return RX_DISCARD;
}

static enum rdmap_error prot_error(enum rdmap_mr_check c)
{
	switch (c) {
	case RDMAP_MR_INVALID:
		return RDMAP_ERR_PROT_INVALID_STAG;
	case RDMAP_MR_WRONG_PD:
		return RDMAP_ERR_PROT_STAG_NOT_ASSOC;
	case RDMAP_MR_RIGHTS:
		return RDMAP_ERR_PROT_ACCESS;
	case RDMAP_MR_WRAP:
		return RDMAP_ERR_PROT_TO_WRAP;
	default:
		return RDMAP_ERR_PROT_BASE_BOUNDS;
	}
}

/* ------------------------------------------------------------------ */
/* Per opcode: start (header checked), destination, end of the FPDU   */
/* ------------------------------------------------------------------ */

/* The MR named by stag with a reference for the current FPDU: the one
 * kept from the previous FPDU if it is that STag's and still published
 * (no atomic read-modify-write per segment), else a new lookup. */
static struct rdmap_mr *rx_tagged_mr(struct rdmap_qp *qp, uint32_t stag)
{
	struct rdmap_mr *k = qp->mr_keep;

	if (k && k->stag == stag &&
	    (atomic_load_explicit(&k->slot->word, memory_order_relaxed) &
	     RDMAP_SLOT_LIVE)) {
		qp->tmr_kept = true;
		return k;
	}
	qp->tmr_kept = false;
	return rdmap_stag_get(qp->cfg.stags, stag);
}

/* The FPDU that placed into qp->tmr ended: its reference becomes the
 * kept one (rx_tagged_mr()). */
static void rx_tagged_end(struct rdmap_qp *qp)
{
	struct rdmap_mr *mr = qp->tmr;

	qp->tmr = NULL;
	if (qp->tmr_kept) {
		qp->tmr_kept = false;
		return;
	}
	if (!mr)
		return;
	rx_nt_fence(qp);
	rdmap_mr_put(qp->mr_keep);
	qp->mr_keep = mr;
}

/* End of an rdmap_qp_rx_done() call: an FPDU still placing into the kept
 * MR takes its reference over; else it is dropped. */
static void rx_keep_drop(struct rdmap_qp *qp)
{
	rx_nt_fence(qp);
	if (!qp->mr_keep)
		return;
	if (qp->tmr_kept)
		qp->tmr_kept = false;
	else
		rdmap_mr_put(qp->mr_keep);
	qp->mr_keep = NULL;
}

/* Tagged placement (RFC 5041 5.2) into an MR that grants acc. */
static enum rx_state rx_tagged(struct rdmap_qp *qp, uint32_t plen,
			       uint32_t acc)
{
	const struct ddp_hdr *d = &qp->h.ddp;
	struct ddp_tagged_buf b = { 0 };
	struct rdmap_mr *mr = NULL;
	enum ddp_error de;

	qp->tptr = NULL;
	if (plen == 0)
		return RX_PAYLOAD;     /* RFC 5041 5.2: not checked at all */
	mr = rx_tagged_mr(qp, d->t.stag);
	if (mr) {
		b.valid = atomic_load(&mr->valid);
		b.same_stream = mr->pd == qp->cfg.pd;
		b.base_to = mr->iova;
		b.len = mr->length;
	}
	if (ddp_check_tagged(d, plen, &b, &de)) {
		if (!qp->tmr_kept)
			rdmap_mr_put(mr);
		qp->tmr_kept = false;
		return rx_fault(qp, rdmap_fault_ddp(de));
	}
	if ((mr->access & acc) != acc) {
		if (!qp->tmr_kept)
			rdmap_mr_put(mr);
		qp->tmr_kept = false;
		return rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS));
	}
	qp->tmr = mr;
	qp->tptr = rdmap_mr_ptr(mr, d->t.to);
	return RX_PAYLOAD;
}

/*
 * The QP-level right (verbs qp_access_flags) for what the peer asks:
 * RDMAP_ACC_REMOTE_WRITE for a WRITE, RDMAP_ACC_REMOTE_READ for a Read
 * Request. Checked before the MR, and so before anything is placed or
 * read. RFC 5040 section 7 names the refusal: RDMAP remote protection
 * error "Access rights violation" (0x0102), the code an MR without the
 * right gets too. Only messages that move octets are checked: a
 * zero-length WRITE or Read (the RFC 6581 RTRs, wisp's nudges) touches
 * no memory, and RFC 5041 5.2 leaves such a tagged segment unchecked.
 */
static bool rx_qp_allows(const struct rdmap_qp *qp, uint32_t acc)
{
	return (atomic_load_explicit(&qp->access, memory_order_relaxed) &
		acc) == acc;
}

/* RDMA Write: into any MR of ours with remote write access, on a QP
 * that allows remote writes. */
static enum rx_state rx_write(struct rdmap_qp *qp, uint32_t plen)
{
	if (plen && !rx_qp_allows(qp, RDMAP_ACC_REMOTE_WRITE))
		return rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS));
	return rx_tagged(qp, plen, RDMAP_ACC_REMOTE_WRITE);
}

/*
 * RDMA Read Response: into the sink of our oldest outstanding Read, and
 * only there. RFC 5040 sections 4.5 and 5.2 (paraphrased): the Data
 * Source answers a Read Request with one RDMA Read Response message,
 * placed with the Request's Data Sink STag at its Data Sink Tagged
 * Offset, of the RDMA Read Message Size octets asked for. So each
 * segment names that STag at sink TO + the octets already arrived, no
 * segment goes past the size, and the segment with L set ends exactly
 * at it. Checked before anything is placed: a segment that breaks a rule
 * places nothing.
 *
 * RFC 5041 section 5.2: "Only the DDP Control and RsvdULP Fields MUST be
 * valid for a zero-length Tagged DDP Segment. The STag and TO fields
 * MUST NOT be checked for a zero-length Tagged DDP Message." Empty
 * segments (the answer to a zero-length Read, e.g. the RFC 6581 RTR)
 * therefore have only their length checked.
 *
 * The codes: no RFC 5040 section 7 code names "not the Read asked
 * for", but the Read Request advertised exactly one tagged buffer,
 * [sink TO, sink TO + size) under the sink STag, and the RFC 5041
 * section 7 tagged buffer errors describe a segment that misses it: an
 * STag that is not the advertised one is "Invalid STag" (DDP 1/0x00),
 * a TO or length outside it, or an end short of it, is "Base or bounds
 * violation" (DDP 1/0x01). Linux siw, the reference peer, uses the
 * same two codes for the same checks.
 */
static enum rx_state rx_read_resp(struct rdmap_qp *qp, uint32_t plen)
{
	const struct ord_entry *o = &qp->ord[qp->ord_head & qp->ord_mask];
	const struct ddp_hdr *d = &qp->h.ddp;

	/* A Read Response must answer our oldest Read (RFC 5040 5.3:
	 * responses come back in request order). */
	if (qp->ord_head == qp->ord_tail)
		return rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE));
	if (plen && d->t.stag != o->sink_stag)
		return rx_fault(qp, rdmap_fault_ddp(DDP_ERR_T_INVALID_STAG));
	/* o->got <= o->size holds: every accepted segment fitted. */
	if ((plen && d->t.to != o->sink_to + o->got) ||
	    plen > o->size - o->got ||
	    (d->last && o->got + plen != o->size))
		return rx_fault(qp, rdmap_fault_ddp(DDP_ERR_T_BASE_BOUNDS));
	return rx_tagged(qp, plen, RDMAP_ACC_LOCAL_WRITE);
}

/* The iovecs of tagged payload [poff, poff + len): one, in the MR. */
static int dest_tagged(struct rdmap_qp *qp, uint32_t poff, size_t len,
		       struct iovec *out)
{
	out[0].iov_base = qp->tptr + poff;
	out[0].iov_len = len;
	return 1;
}

static void end_write(struct rdmap_qp *qp, uint32_t plen)
{
	(void)plen;
	rx_tagged_end(qp);
}

static void end_read_resp(struct rdmap_qp *qp, uint32_t plen)
{
	struct ord_entry *o = &qp->ord[qp->ord_head & qp->ord_mask];

	rx_tagged_end(qp);
	o->got += plen;
	if (!qp->h.ddp.last)
		return;
	if (o->wr_idx >= 0) {
		struct sq_meta *m = &qp->meta[(uint32_t)o->wr_idx &
					      (qp->sq.size - 1)];
		if (--m->reads_out == 0 &&
		    !(qp->cur.active && qp->cur.idx == (uint32_t)o->wr_idx))
			m->done = true;
	}
	qp->ord_head++;
	atomic_store_explicit(&qp->ord_out, qp->ord_tail - qp->ord_head,
			      memory_order_relaxed);
	qp_sq_advance(qp);
}

/* Untagged Send into the posted receive buffer (RFC 5041 5.3). */
static enum rx_state rx_send(struct rdmap_qp *qp, uint32_t plen)
{
	struct ddp_untagged_ctx ctx = {
		.nqueues = RDMAP_QN__COUNT,
		.expected_msn = qp->rx_msn[RDMAP_QN_SEND],
		.msn_window = 1,
	};
	enum rdmap_wc_status st = RDMAP_WC_SUCCESS;
	enum ddp_error de;

	if (!qp->have_recv && qp->h.ddp.u.msn == ctx.expected_msn)
		qp_take_recv(qp, &st);
	if (st != RDMAP_WC_SUCCESS) {
		qp_complete_recv(qp, st, 0, false, false, 0);
		return rx_fault(qp,
			rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC));
	}
	ctx.buffer_posted = qp->have_recv;
	ctx.buffer_len = qp->have_recv ? qp->recv.length : 0;
	if (ddp_check_untagged(&qp->h.ddp, plen, &ctx, &de)) {
		/* The message does not fit the receive it was being placed
		 * into: that receive reports it as verbs do (a responder's
		 * local length error), the rest are flushed. */
		if (qp->have_recv && (de == DDP_ERR_U_TOO_LONG ||
				      de == DDP_ERR_U_INVALID_MO))
			qp_complete_recv(qp, RDMAP_WC_LOC_LEN_ERR, 0, false,
					 false, 0);
		return rx_fault(qp, rdmap_fault_ddp(de));
	}
	return RX_PAYLOAD;
}

/* The iovecs of untagged payload [poff, poff + len): the posted receive
 * buffer at message offset MO + poff. */
static int dest_untagged(struct rdmap_qp *qp, uint32_t poff, size_t len,
			 struct iovec *out)
{
	return qp_slice(qp->rsge, qp->nrsge, qp->h.ddp.u.mo + (uint64_t)poff,
			len, out);
}

static void end_send(struct rdmap_qp *qp, uint32_t plen)
{
	const struct rdmap_op_info *info = rdmap_op(qp->h.opcode);
	const struct ddp_hdr *d = &qp->h.ddp;

	qp->recv_bytes += plen;
	if (!d->last)
		return;
	qp->rx_msn[RDMAP_QN_SEND]++;
	if (info->inval_stag) {
		/* RFC 5040 5.4: invalidate once the message is placed; an
		 * STag that cannot be invalidated is a remote protection
		 * error. */
		if (!rdmap_stag_remote_invalidate(qp->cfg.stags,
						  qp->h.inval_stag,
						  qp->cfg.pd)) {
			qp_complete_recv(qp, RDMAP_WC_REM_INV_REQ_ERR, 0,
					 false, false, 0);
			rx_fault(qp, rdmap_fault_rdmap(
				RDMAP_ERR_PROT_CANT_INVALIDATE));
			return;
		}
	}
	qp_complete_recv(qp, RDMAP_WC_SUCCESS, (uint32_t)(d->u.mo + plen),
			 info->solicited, info->inval_stag, qp->h.inval_stag);
}

/* RFC 5040 4.4 / 5.3: a Read Request, answered by the engine alone. */
static enum rx_state rx_read_req(struct rdmap_qp *qp, uint32_t plen)
{
	const struct rdmap_read_req *rr = &qp->h.rreq;
	struct ddp_untagged_ctx ctx = {
		.nqueues = RDMAP_QN__COUNT,
		.expected_msn = qp->rx_msn[RDMAP_QN_READ_REQ],
		.msn_window = 1,
		.buffer_posted = qp->ird_tail - qp->ird_head < qp->ird_size,
		.buffer_len = RDMAP_READ_REQ_LEN,
	};
	struct ird_entry *e;
	struct rdmap_mr *mr = NULL;
	enum ddp_error de;

	/* The IRD queue is the Read Request queue's buffer pool: a request
	 * beyond IRD finds no buffer (RFC 5041 7.2 code 2). */
	if (ddp_check_untagged(&qp->h.ddp, plen, &ctx, &de))
		return rx_fault(qp, rdmap_fault_ddp(de));
	if (plen)
		return rx_fault(qp,
				rdmap_fault_rdmap(RDMAP_ERR_OP_UNSPECIFIED));
	if (rr->size && !rx_qp_allows(qp, RDMAP_ACC_REMOTE_READ))
		return rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS));
	if (rr->size) {
		enum rdmap_mr_check c;

		mr = rdmap_stag_get(qp->cfg.stags, rr->src_stag);
		c = mr ? rdmap_mr_check(mr, qp->cfg.pd, RDMAP_ACC_REMOTE_READ,
					rr->src_to, rr->size)
		       : RDMAP_MR_INVALID;
		if (c != RDMAP_MR_OK) {
			rdmap_mr_put(mr);
			return rx_fault(qp, rdmap_fault_rdmap(prot_error(c)));
		}
	}
	e = &qp->ird[qp->ird_tail & qp->ird_mask];
	*e = (struct ird_entry){ .rr = *rr, .src = mr };
	qp->ird_tail++;
	return RX_PAYLOAD;
}

static void end_read_req(struct rdmap_qp *qp, uint32_t plen)
{
	(void)plen;
	qp->rx_msn[RDMAP_QN_READ_REQ]++;
}

/* A Terminate: its message body is collected in term_buf. */
static enum rx_state rx_term(struct rdmap_qp *qp, uint32_t plen)
{
	(void)plen;
	qp->term_have = 0;
	return RX_PAYLOAD;
}

/* Keep what fits of the Terminate body; the rest is not needed. */
static void place_term(struct rdmap_qp *qp, uint32_t poff,
		       const uint8_t *data, size_t len)
{
	if (poff >= sizeof(qp->term_buf))
		return;
	if (len > sizeof(qp->term_buf) - poff)
		len = sizeof(qp->term_buf) - poff;
	memcpy(qp->term_buf + poff, data, len);
	qp->term_have = poff + (uint32_t)len;
}

/* The peer's Terminate: its code explains the failure even when the
 * headers it quotes are malformed (rdmap_term_parse() keeps the code
 * then); only a body too short to hold the code has none. */
static void end_term(struct rdmap_qp *qp, uint32_t plen)
{
	struct rdmap_terminate t;
	int term = RDMAP_TERM_NONE;
	int ret;

	(void)plen;
	qp->rx_msn[RDMAP_QN_TERMINATE]++;
	ret = rdmap_term_parse(qp->term_buf, qp->term_have, &t);
	if (ret >= 0 || (ret == -EPROTO && qp->term_have >= RDMAP_TERM_CTRL_LEN))
		term = t.term;
	qp_stat_term(qp, false, term);
	qp_peer_terminated(qp, term);
}

/*
 * What each opcode does on receive (RFC 5040 section 4), one row per
 * value of the 4-bit opcode field; the header lengths come from the wire
 * table, rdmap_op(). An empty row (reserved opcodes, RFC 7306's until
 * they are implemented) is an unexpected opcode.
 *   start  the header passed rdmap_hdr_parse(): check it against the
 *          QP's state, find the payload's destination. Returns
 *          RX_PAYLOAD, or RX_DISCARD after a fault.
 *   dest   the payload goes to application memory: the iovecs for
 *          payload [poff, poff + len), at most RDMAP_MAX_SGE. Such
 *          payload may be received straight into place.
 *   place  the payload is kept by the QP itself (Terminate body).
 *   end    the FPDU ended with good framing and CRC; plen payload
 *          octets. May fault.
 * Neither dest nor place: the opcode carries no payload (start checked).
 */
struct rx_op {
	enum rx_state (*start)(struct rdmap_qp *qp, uint32_t plen);
	int (*dest)(struct rdmap_qp *qp, uint32_t poff, size_t len,
		    struct iovec *out);
	void (*place)(struct rdmap_qp *qp, uint32_t poff, const uint8_t *data,
		      size_t len);
	void (*end)(struct rdmap_qp *qp, uint32_t plen);
};

#define RX_SEND_ROW { .start = rx_send, .dest = dest_untagged, .end = end_send }

static const struct rx_op rx_ops[RDMAP_OP__COUNT] = {
	[RDMAP_OP_WRITE] = {
		.start = rx_write, .dest = dest_tagged, .end = end_write,
	},
	[RDMAP_OP_READ_REQ] = { .start = rx_read_req, .end = end_read_req },
	[RDMAP_OP_READ_RESP] = {
		.start = rx_read_resp, .dest = dest_tagged,
		.end = end_read_resp,
	},
	[RDMAP_OP_SEND] = RX_SEND_ROW,
	[RDMAP_OP_SEND_INV] = RX_SEND_ROW,
	[RDMAP_OP_SEND_SE] = RX_SEND_ROW,
	[RDMAP_OP_SEND_SE_INV] = RX_SEND_ROW,
	[RDMAP_OP_TERMINATE] = {
		.start = rx_term, .place = place_term, .end = end_term,
	},
};

_Static_assert(sizeof(rx_ops) / sizeof(rx_ops[0]) == RDMAP_CTRL_OP_MASK + 1,
	       "RFC 5040 4.1: one row per value of the 4-bit opcode field");

/* ------------------------------------------------------------------ */
/* The receive machine                                                */
/* ------------------------------------------------------------------ */

/* ULPDU octets handed up by the MPA decoder: off is their offset in the
 * ULPDU. placed: they were received straight into their destination
 * (rdmap_qp_rx_want() chose it), so they need no copy. */
struct rx_in {
	uint32_t off;
	const uint8_t *data;
	size_t len;
	bool placed;
};

static void rx_consume(struct rx_in *in, size_t n)
{
	in->off += (uint32_t)n;
	in->data += n;
	in->len -= n;
}

/*
 * Octets of DDP + RDMAP header the ULPDU whose first have octets are in
 * hdr needs: the DDP header by its T bit, plus the opcode's own header
 * (rdmap_op()->hdr_len, the Read Request's 28 octets) when the opcode
 * belongs to that buffer model. Anything else (reserved opcode, T bit
 * not the opcode's) needs only the DDP header, which is enough for
 * rdmap_hdr_parse() to name the fault.
 */
static uint32_t rx_hdr_need(const uint8_t *hdr, uint32_t have)
{
	const struct rdmap_op_info *info;
	bool tagged;

	if (have < 2)
		return 2;
	tagged = hdr[0] & DDP_CTRL_T;
	info = rdmap_op(hdr[1] & RDMAP_CTRL_OP_MASK);
	return (uint32_t)ddp_hdr_len(tagged) +
	       (info->name && info->tagged == tagged ? info->hdr_len : 0);
}

/* The header is complete, its qp->hdr_have octets at hdr (qp->hdr, or
 * where they arrived): check it and hand it to its opcode's row. */
static enum rx_state rx_header(struct rdmap_qp *qp, const uint8_t *hdr)
{
	struct rdmap_fault f;
	int hl = rdmap_hdr_parse(hdr, qp->hdr_have, &qp->h, &f);
	const struct rx_op *op;

	if (hl < 0)
		return rx_fault(qp, f);
	op = &rx_ops[qp->h.opcode & RDMAP_CTRL_OP_MASK];
	if (!op->start)
		return rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE));
	return op->start(qp, qp->ulpdu_len - (uint32_t)hl);
}

/* RX_HDR: collect header octets; check the header as soon as it is
 * complete. Returns RX_HDR when the input runs out first: needing more
 * octets is the normal case for a header cut by recv(). */
static enum rx_state rx_st_hdr(struct rdmap_qp *qp, struct rx_in *in)
{
	/* The whole header in the input (the usual case): one copy. */
	if (qp->hdr_have == 0 && in->len >= 2) {
		uint32_t need = rx_hdr_need(in->data, 2);

		if (need <= qp->ulpdu_len && need <= in->len) {
			const uint8_t *hdr = in->data;

			/* qp->hdr keeps it for a Terminate; the parse
			 * reads it where it arrived, as reading back the
			 * copy just written would wait for those stores
			 * (once per FPDU: with one-segment FPDUs it
			 * shows; docs/performance-log.md). */
			memcpy(qp->hdr, hdr, need);
			qp->hdr_have = need;
			rx_consume(in, need);
			return rx_header(qp, hdr);
		}
	}
	for (;;) {
		uint32_t need = rx_hdr_need(qp->hdr, qp->hdr_have);
		size_t take;

		if (qp->hdr_have >= 2 && qp->hdr_have == need)
			return rx_header(qp, qp->hdr);
		if (!in->len)
			return RX_HDR;
		if (need > qp->ulpdu_len) {
			/* The ULPDU ends before its own header does: name
			 * what the partial header says, else too short.
			 * (Had the ULPDU ended with the octets already
			 * taken, the FPDU's end says too short, once MPA
			 * has checked its CRC.) */
			struct rdmap_fault f =
				rdmap_fault_ddp(DDP_ERR_SEG_TOO_SHORT);

			rdmap_hdr_parse(qp->hdr, qp->hdr_have, &qp->h, &f);
			return rx_fault(qp, f);
		}
		take = need - qp->hdr_have;
		if (take > in->len)
			take = in->len;
		memcpy(qp->hdr + qp->hdr_have, in->data, take);
		qp->hdr_have += (uint32_t)take;
		rx_consume(in, take);
	}
}

/*
 * The payload of a tagged FPDU that does not end its message was copied
 * out of the stage: ask for the MR's lines after it, for writing, as
 * long as it was. A WRITE or Read Response cut into one-segment FPDUs
 * goes on there, and the next FPDU's CRC and header checks then overlap
 * the fetch of the memory its payload will be copied into, which
 * otherwise stalls that copy (an RDMA target is rarely in the cache).
 * A hint only: nothing is placed before that FPDU's header is checked,
 * and it stays inside the MR this FPDU was checked against.
 */
#define RX_PREFETCH_MIN  512
#define RX_PREFETCH_MAX  DIRECT_MIN

/* How many octets of the MR after this FPDU's plen payload octets to
 * ask for, and where they start (*at). (The prefetches stay in the caller:
 * GCC 12 at -O1 and above dropped the call of a function whose only
 * effect they were.) */
static size_t rx_prefetch_len(const struct rdmap_qp *qp, uint32_t plen,
			      const uint8_t **at)
{
	const struct rdmap_mr *mr = qp->tmr;
	size_t n, left;

	if (!mr || qp->h.ddp.last || plen < RX_PREFETCH_MIN)
		return 0;
#if defined(__x86_64__)
	/* The next FPDU's payload is streamed there (rx_copy_nt): lines
	 * fetched now would only be thrown out again. */
	if (qp->rx_msg_off + plen >= RX_NT_AFTER)
		return 0;
#endif
	/* ddp_check_tagged() held tptr + plen to the MR's end. */
	*at = qp->tptr + plen;
	left = (size_t)(mr->addr + mr->length - *at);
	n = plen < RX_PREFETCH_MAX ? plen : RX_PREFETCH_MAX;
	return n < left ? n : left;
}

/* RX_PAYLOAD: payload octets to the opcode's destination. */
static enum rx_state rx_st_payload(struct rdmap_qp *qp, struct rx_in *in)
{
	const struct rx_op *op = &rx_ops[qp->h.opcode & RDMAP_CTRL_OP_MASK];
	uint32_t poff = in->off - qp->hdr_have;
	const uint8_t *data = in->data;
	struct iovec dst[RDMAP_MAX_SGE];

	if (op->dest && !in->placed) {
		int n = op->dest(qp, poff, in->len, dst);

		if (op->dest == dest_tagged &&
		    qp->rx_msg_off + poff >= RX_NT_AFTER) {
			/* n is 1: one run in the MR (dest_tagged). */
			rx_copy_nt(qp, dst[0].iov_base, data, dst[0].iov_len);
		} else {
			for (int i = 0; i < n; i++) {
				memcpy(dst[i].iov_base, data, dst[i].iov_len);
				data += dst[i].iov_len;
			}
		}
		if (poff + in->len == qp->ulpdu_len - qp->hdr_have) {
			const uint8_t *at = NULL;
			size_t pf = rx_prefetch_len(qp, poff + (uint32_t)in->len,
						    &at);

			for (size_t k = 0; k < pf; k += RX_LINE)
				__builtin_prefetch(at + k, 1, 3);
		}
	} else if (op->place) {
		op->place(qp, poff, in->data, in->len);
	}
	rx_consume(in, in->len);
	return RX_PAYLOAD;
}

/* ULPDU octets from the MPA decoder: run the state machine over them.
 * Each state's handler consumes what it can and returns the next state;
 * running out of input in any state just waits for more. */
static void rx_data(struct rdmap_qp *qp, struct rx_in *in)
{
	while (in->len) {
		switch (qp->rx_state) {
		case RX_HDR:
			qp->rx_state = rx_st_hdr(qp, in);
			break;
		case RX_PAYLOAD:
			qp->rx_state = rx_st_payload(qp, in);
			break;
		case RX_DISCARD:
			return;
		default:
			rx_fault(qp, rdmap_fault_rdmap(
				RDMAP_ERR_LOCAL_CATASTROPHIC));
			return;
		}
	}
}

/* The current FPDU ended: MPA checked its length, pad and CRC. */
static void rx_fpdu_end(struct rdmap_qp *qp)
{
	/* Large enough that the next FPDU's payload, if it is as large,
	 * goes straight into place: read only its header first. Smaller
	 * FPDUs are read many per system call into the stage. A message
	 * cut into large FPDUs often ends in a short one (a 64 KiB WRITE:
	 * 64,754 octets and 782), and the next message then starts large
	 * again: one short FPDU after a large one keeps the header-first
	 * read, or the next large payload would come through the stage
	 * and be copied from there. */
	bool big = qp->ulpdu_len >= 2 * DIRECT_MIN;

	qp->last_big = big || qp->prev_big;
	qp->prev_big = big;
	qp->rx_short = false;
	if (!qp->rx_any) {
		qp->rx_any = true;
		qp->tx_hold = false;   /* the RTR arrived (RFC 6581 3) */
	}
	switch (qp->rx_state) {
	case RX_HDR:
		rx_fault(qp, rdmap_fault_ddp(DDP_ERR_SEG_TOO_SHORT));
		break;
	case RX_PAYLOAD:
		qp->rx_open = !qp->h.ddp.last;
		if (qp->h.ddp.last) {
			/* The message is placed: its octets before what
			 * follows (a completion, rx_nt_fence()). */
			rx_nt_fence(qp);
			qp->rx_msg_off = 0;
		} else {
			qp->rx_msg_off += qp->ulpdu_len - qp->hdr_have;
		}
		qp_stat_fpdu(qp, false, &qp->h, qp->ulpdu_len - qp->hdr_have);
		rx_ops[qp->h.opcode & RDMAP_CTRL_OP_MASK].end(
			qp, qp->ulpdu_len - qp->hdr_have);
		break;
	case RX_DISCARD:
		break;
	default:
		rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC));
		break;
	}
	qp->hdr_have = 0;
	qp->rx_state = qp_state(qp) == RDMAP_QP_RTS ? RX_HDR : RX_DISCARD;
}

/*
 * The commonest FPDU of a small-message exchange, a whole one-segment
 * Send into a receive of one SGE, in one pass (issue 13: a small Send's
 * cost between recv() and its completion): the header decoded once
 * (ddp_untagged_last_peek), the receive's one MR looked up and checked,
 * the payload copied, the completion made, and of the general path's
 * bookkeeping only what a whole message leaves behind (rx_fpdu_end's,
 * end_send's). No header copy for a Terminate, no qp->h, no RQ entry
 * copied into qp->recv: nothing here can fault, so nothing needs them.
 *
 * Taken only when every check the general path makes passes: DDP
 * version 1, untagged, L set; RDMAP version 1, opcode Send or Send with
 * Solicited Event (no Invalidate); QN 0, the expected MSN, MO 0 (RFC
 * 5041 7.1); no message in progress; the QP's own RQ (no SRQ) not empty;
 * its oldest receive one SGE of nonzero length that the payload fits,
 * whose lkey names a valid MR of the QP's PD with local write access
 * covering it (qp_take_recv's checks). Anything else returns false
 * before any state changes: the caller goes on with rx_send_whole and
 * the general path, which name every fault (and the receive's error).
 *
 * The MR reference is held from the lookup until the copy is done, as
 * qp_take_recv's is until the receive completes: rdmap_stag_remove()
 * waits for it, so the memory stays until the copy ends.
 */
/* rdmap_mr_check(mr, pd, RDMAP_ACC_LOCAL_WRITE, sg->addr, sg->length) ==
 * RDMAP_MR_OK, or a stricter test (no wrap of sg's end either): true
 * only if the SGE lies whole in a valid MR of pd with local write
 * access. The general path names the fault when it is false. */
static inline bool rx_sge_fits(const struct rdmap_mr *mr, const void *pd,
			       const struct rdmap_sge *sg)
{
	uint64_t off = sg->addr - mr->iova;

	return atomic_load_explicit(&mr->valid, memory_order_acquire) &&
	       mr->pd == pd && (mr->access & RDMAP_ACC_LOCAL_WRITE) &&
	       sg->addr >= mr->iova && off <= mr->length &&
	       sg->length <= mr->length - off &&
	       sg->addr + sg->length >= sg->addr;
}

/* The one-pass paths' checks of a whole Send's header d (DDP L set,
 * checked by the caller): RDMAP version 1, Send or Send with Solicited
 * Event, QN 0, MO 0 and the expected MSN (RFC 5041 7.1), and a receive
 * posted on the QP's RQ. Returns that receive (its ring index in *head),
 * or NULL: the general path then names the fault. */
static const struct rdmap_recv_wr *rx_send_expected(struct rdmap_qp *qp,
						    const struct ddp_hdr *d,
						    uint32_t *head)
{
	uint8_t op = d->ulp_ctrl & RDMAP_CTRL_OP_MASK;

	if ((d->ulp_ctrl & RDMAP_CTRL_RV_MASK) !=
		    RDMAP_VERSION << RDMAP_CTRL_RV_SHIFT ||
	    (op != RDMAP_OP_SEND && op != RDMAP_OP_SEND_SE) ||
	    d->u.qn != RDMAP_QN_SEND || d->u.mo != 0 ||
	    d->u.msn != qp->rx_msn[RDMAP_QN_SEND])
		return NULL;
	*head = atomic_load_explicit(&qp->rq.head, memory_order_relaxed);
	if (*head == atomic_load_explicit(&qp->rq.tail, memory_order_acquire))
		return NULL;
	return rdmap_ring_slot(&qp->rq, *head);
}

/* rx_fpdu_end's bookkeeping for a small FPDU of opcode op, plen payload
 * octets, that ends its message (rx_send_small, rx_write_small). */
static inline void rx_small_end(struct rdmap_qp *qp, uint8_t op,
				uint32_t plen)
{
	struct rdmap_qp_stats *st = qp->st;

	qp->last_big = qp->prev_big;
	qp->prev_big = false;
	qp->rx_short = false;
	if (!qp->rx_any) {
		qp->rx_any = true;
		qp->tx_hold = false;   /* the RTR arrived (RFC 6581 3) */
	}
	rx_nt_fence(qp);
	qp->rx_msg_off = 0;
	RDMAP_STAT_ADD(st->rx_fpdus, 1);
	RDMAP_STAT_ADD(st->rx_octets[op & (RDMAP_STATS_OPS - 1)], plen);
	RDMAP_STAT_ADD(st->rx_msgs[op & (RDMAP_STATS_OPS - 1)], 1);
}

static bool rx_send_small(struct rdmap_qp *qp, const uint8_t *u,
			  uint32_t ulen)
{
	const struct rdmap_recv_wr *r;
	struct rdmap_mr *mr;
	struct ddp_hdr d;
	uint32_t plen = ulen - DDP_UNTAGGED_HDR_LEN, head;
	uint64_t wr_id;
	uint8_t op, *dst;

	if (ulen < DDP_UNTAGGED_HDR_LEN || ulen >= 2 * DIRECT_MIN ||
	    qp->have_recv || qp->cfg.use_srq ||
	    !ddp_untagged_last_peek(u, &d))
		return false;
	op = d.ulp_ctrl & RDMAP_CTRL_OP_MASK;
	r = rx_send_expected(qp, &d, &head);
	if (!r || r->num_sge != 1 || r->sge[0].length == 0 ||
	    plen > r->sge[0].length)
		return false;
	mr = rdmap_stag_get(qp->cfg.stags, r->sge[0].lkey);
	if (!mr)
		return false;
	if (!rx_sge_fits(mr, qp->cfg.pd, &r->sge[0])) {
		rdmap_mr_put(mr);
		return false;
	}
	/* Taken: the slot is read before it is given back. */
	wr_id = r->wr_id;
	dst = rdmap_mr_ptr(mr, r->sge[0].addr);
	atomic_store_explicit(&qp->rq.head, head + 1, memory_order_release);
	memcpy(dst, u + DDP_UNTAGGED_HDR_LEN, plen);
	rdmap_mr_put(mr);
	qp->rx_open = false;
	rx_small_end(qp, op, plen);
	/* end_send's. */
	qp->rx_msn[RDMAP_QN_SEND]++;
	qp->cfg.ops->complete(qp->cfg.ops_arg, &(struct rdmap_cqe){
		.wr_id = wr_id,
		.status = RDMAP_WC_SUCCESS,
		.opcode = RDMAP_WC_RECV,
		.recv = true,
		.solicited = op == RDMAP_OP_SEND_SE,
		.byte_len = plen,
	});
	if (qp_state(qp) != RDMAP_QP_RTS)
		qp->rx_state = RX_DISCARD;
	return true;
}

/*
 * A whole Send of one segment, CRC already checked (rx_whole): placed and
 * completed straight from the header octets, without the state machine,
 * the header copy and generic parse, the opcode table's start and dest
 * (issue 13: a small Send's cost between recvmsg and its completion).
 * Only a Send that those would take without a fault: untagged, L set,
 * DDP and RDMAP versions 1, opcode Send or Send with Solicited Event, QN
 * 0, the expected MSN, MO 0, no message in progress, a receive posted
 * on the QP's own RQ that the payload fits (RFC 5041 7.1's checks, which
 * ddp_check_untagged() makes on the general path). Anything else returns
 * false before any state changes and takes the general path, which
 * names its fault. The end is the general one (rx_fpdu_end, end_send).
 */
static bool rx_send_whole(struct rdmap_qp *qp, const uint8_t *u,
			  uint32_t ulen)
{
	const struct rdmap_recv_wr *r;
	enum rdmap_wc_status st;
	struct iovec dst[RDMAP_MAX_SGE];
	struct ddp_hdr d;
	enum ddp_error de;
	uint32_t plen = ulen - DDP_UNTAGGED_HDR_LEN, head;
	const uint8_t *data = u + DDP_UNTAGGED_HDR_LEN;
	uint8_t op;
	int n;

	if (ulen < DDP_UNTAGGED_HDR_LEN || (u[0] & DDP_CTRL_T) ||
	    qp->have_recv || qp->cfg.use_srq)
		return false;
	if (ddp_hdr_parse(u, ulen, &d, &de) != DDP_UNTAGGED_HDR_LEN)
		return false;
	op = d.ulp_ctrl & RDMAP_CTRL_OP_MASK;
	if (!d.last)
		return false;
	r = rx_send_expected(qp, &d, &head);
	if (!r || plen > r->length)
		return false;
	/* What rx_st_hdr and rdmap_hdr_parse leave: the header a
	 * Terminate quotes, and its fields. */
	memcpy(qp->hdr, u, DDP_UNTAGGED_HDR_LEN);
	qp->hdr_have = DDP_UNTAGGED_HDR_LEN;
	qp->h = (struct rdmap_hdr){ .ddp = d, .rv = RDMAP_VERSION,
				    .opcode = op };
	qp_take_recv(qp, &st);
	if (st != RDMAP_WC_SUCCESS) {
		/* As rx_send: a receive naming a bad MR. */
		qp_complete_recv(qp, st, 0, false, false, 0);
		rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC));
		return true;
	}
	n = qp_slice(qp->rsge, qp->nrsge, 0, plen, dst);
	for (int i = 0; i < n; i++) {
		memcpy(dst[i].iov_base, data, dst[i].iov_len);
		data += dst[i].iov_len;
	}
	qp->rx_state = RX_PAYLOAD;
	rx_fpdu_end(qp);
	return true;
}

/*
 * The tagged twin of rx_send_small: a whole one-segment RDMA Write with
 * payload, into an MR that allows it, in one pass (the header decoded
 * once, ddp_tagged_last_peek; the MR found as rx_tagged_mr finds it,
 * the kept one without an atomic; the payload copied; the FPDU's end as
 * rx_fpdu_end and end_write leave it). Taken only when every check the
 * general path makes passes (RFC 5041 7.1, RFC 5040 section 7, in the
 * order rx_write and rx_tagged make them): DDP version 1, T and L set;
 * RDMAP version 1, opcode RDMA Write; no message in progress; at least
 * one payload octet (an empty Write is not checked at all: the general
 * path); the QP grants remote write; the STag names a valid MR of the
 * QP's PD with remote write access that holds [TO, TO + length)
 * without wrapping. Anything else returns false before any state
 * changes (the MR reference given back): the general path names the
 * fault.
 */
static bool rx_write_small(struct rdmap_qp *qp, const uint8_t *u,
			   uint32_t ulen)
{
	struct rdmap_mr *mr;
	struct ddp_hdr d;
	uint32_t plen = ulen - DDP_TAGGED_HDR_LEN;
	uint64_t off;

	if (ulen <= DDP_TAGGED_HDR_LEN || ulen >= 2 * DIRECT_MIN ||
	    qp->rx_open || !ddp_tagged_last_peek(u, &d) ||
	    (d.ulp_ctrl & RDMAP_CTRL_OP_MASK) != RDMAP_OP_WRITE ||
	    (d.ulp_ctrl & ~RDMAP_CTRL_OP_MASK) !=
		    RDMAP_VERSION << RDMAP_CTRL_RV_SHIFT ||
	    !rx_qp_allows(qp, RDMAP_ACC_REMOTE_WRITE))
		return false;
	mr = rx_tagged_mr(qp, d.t.stag);
	if (!mr)
		return false;
	off = d.t.to - mr->iova;
	if (!atomic_load(&mr->valid) || mr->pd != qp->cfg.pd ||
	    !(mr->access & RDMAP_ACC_REMOTE_WRITE) || d.t.to < mr->iova ||
	    off > mr->length || plen > mr->length - off ||
	    d.t.to + plen < d.t.to) {
		if (!qp->tmr_kept)
			rdmap_mr_put(mr);
		qp->tmr_kept = false;
		return false;
	}
	memcpy(rdmap_mr_ptr(mr, d.t.to), u + DDP_TAGGED_HDR_LEN, plen);
	rx_small_end(qp, RDMAP_OP_WRITE, plen);
	/* end_write's. */
	qp->tmr = mr;
	rx_tagged_end(qp);
	if (qp_state(qp) != RDMAP_QP_RTS)
		qp->rx_state = RX_DISCARD;
	return true;
}

/* rx_whole's general case: the ULPDU through the receive machine and
 * the FPDU's end, as a DATA event of the whole ULPDU and the FPDU event
 * would take it. */
static void rx_whole_general(struct rdmap_qp *qp, const uint8_t *u,
			     uint32_t ulen)
{
	struct rx_in d = { .off = 0, .data = u, .len = ulen };

	rx_data(qp, &d);
	/* A fault in the ULPDU: rx_feed would not have gone on to the
	 * FPDU's end. */
	if (qp->rx_state == RX_DISCARD && qp_state(qp) != RDMAP_QP_RTS)
		return;
	rx_fpdu_end(qp);
}

/* An FPDU the MPA decoder took whole (mpa_rx_whole): its ULPDU u[0..ulen).
 * The one-pass paths only for a message's last segment of DDP version
 * 1 (the segments of a large message, L clear, go straight on). */
static void rx_whole(struct rdmap_qp *qp, const uint8_t *u, uint32_t ulen)
{
	uint8_t c = ulen ? u[0] & (DDP_CTRL_T | DDP_CTRL_L |
				   DDP_CTRL_DV_MASK) : 0;

	qp->ulpdu_len = ulen;
	if (c == (DDP_CTRL_L | DDP_VERSION)) {
		if (rx_send_small(qp, u, ulen) || rx_send_whole(qp, u, ulen))
			return;
	} else if (c == (DDP_CTRL_T | DDP_CTRL_L | DDP_VERSION)) {
		if (rx_write_small(qp, u, ulen))
			return;
	}
	rx_whole_general(qp, u, ulen);
}

/* Run the MPA decoder over in[0..len): octets in the staging buffer, or
 * (placed) payload octets received at their destination. */
static void rx_feed(struct rdmap_qp *qp, const uint8_t *in, size_t len,
		    bool placed)
{
	while (len) {
		struct mpa_rx_event ev = { .type = MPA_RX_EV_NONE };
		long used = 0;

		if (qp->rx_state == RX_DISCARD &&
		    qp_state(qp) != RDMAP_QP_RTS)
			return;
		/* An FPDU whole in the stage, at the start of a ULPDU: in
		 * one step (the usual case for small messages). */
		if (!placed && qp->rx_state == RX_HDR && qp->hdr_have == 0)
			used = mpa_rx_whole(&qp->mrx, in, len, &ev);
		if (used > 0) {
			in += used;
			len -= (size_t)used;
			rx_whole(qp, ev.data, ev.ulpdu_len);
			continue;
		}
		if (!used)
			used = mpa_rx_feed(&qp->mrx, in, len, &ev);
		if (used < 0) {
			enum mpa_error e = mpa_rx_error(&qp->mrx);

			if (e == MPA_ERR_CRC)
				RDMAP_STAT_ADD(qp->st->crc_errors, 1);

			rx_nt_fence(qp);
			qp_fault(qp, rdmap_fault_llp(e, mpa_error_term(e)),
				 NULL, 0, 0);
			qp->rx_state = RX_DISCARD;
			return;
		}
		in += used;
		len -= (size_t)used;
		if (ev.type == MPA_RX_EV_DATA) {
			struct rx_in d = {
				.off = ev.ulpdu_off, .data = ev.data,
				.len = ev.len, .placed = placed,
			};

			qp->ulpdu_len = ev.ulpdu_len;
			rx_data(qp, &d);
		} else if (ev.type == MPA_RX_EV_FPDU) {
			qp->ulpdu_len = ev.ulpdu_len;
			rx_fpdu_end(qp);
		}
	}
}

/* Switch to the large stage (see TX_SMALL_FPDUS), between reads only:
 * the stage is empty then. Without memory the small one keeps working. */
static void stage_grow(struct rdmap_qp *qp)
{
	uint8_t *st = qp_big_alloc(STAGE_SIZE);

	qp->rx_grow = false;
	if (!st)
		return;
	qp->stage = st;
	qp->stage_cap = STAGE_SIZE;
}

/* rdmap_qp_rx_want's direct read: the payload run [.., contig) straight
 * into place. Out of line: a small message's reads and every empty poll
 * take the staged path, which then saves and restores fewer registers
 * (issue 13). */
__attribute__((noinline))
static int rx_want_direct(struct rdmap_qp *qp, const struct rx_op *op,
			  size_t contig, struct iovec *iov, int cap)
{
	uint32_t poff = (uint32_t)mpa_rx_ulpdu_done(&qp->mrx) - qp->hdr_have;
	int n;

	qp->ndir = op->dest(qp, poff, contig, qp->dir);
	if (qp->ndir > cap)
		qp->ndir = cap;
	memcpy(iov, qp->dir, (size_t)qp->ndir * sizeof(*iov));
	qp->dir_len = 0;
	for (int i = 0; i < qp->ndir; i++)
		qp->dir_len += qp->dir[i].iov_len;
	qp->rx_direct = true;
	n = qp->ndir;
	/* What follows the run (its trailer, a short FPDU that ends
	 * the message, the next header) goes to the stage in the
	 * same call, instead of a read of its own after this one:
	 * on loopback a 64 KiB WRITE then takes one recvmsg. */
	if (n < cap && qp->dir_len == contig) {
		qp->st_head = qp->st_tail = 0;
		iov[n].iov_base = qp->stage;
		iov[n].iov_len = qp->stage_cap < RX_TAIL ?
				 qp->stage_cap : RX_TAIL;
		n++;
	}
	return n;
}

/* rx_want's read into the stage (not straight into place): at its
 * tail, or after a large FPDU only as much as the next header needs. */
static inline int rx_want_stage(struct rdmap_qp *qp, struct iovec *iov)
{
	if (qp->st_head == qp->st_tail) {
		qp->st_head = qp->st_tail = 0;
		if (qp->rx_grow)
			stage_grow(qp);
	}
	iov[0].iov_base = qp->stage + qp->st_tail;
	iov[0].iov_len = qp->stage_cap - qp->st_tail;
	if (qp->last_big && qp->st_head == qp->st_tail &&
	    iov[0].iov_len > SMALL_READ) {
		/* After a large FPDU: its successor's header, so that a large
		 * payload goes straight into place. After a direct read that
		 * stopped inside this payload with less than DIRECT_MIN left,
		 * the rest of it too: its trailer and the next header then
		 * come in the same read, instead of the rest in SMALL_READ
		 * pieces. (Only then: a short FPDU after a large one is
		 * still read SMALL_READ at a time when the direct read that
		 * ended the large one brought nothing after it; usually
		 * that read's stage part brings the short FPDU whole.) */
		size_t want = SMALL_READ;

		if (qp->rx_short && qp->rx_state == RX_PAYLOAD)
			want += mpa_rx_contig(&qp->mrx);
		if (iov[0].iov_len > want)
			iov[0].iov_len = want;
	} else {
		qp->st_offer = iov[0].iov_len;
	}
	return 1;
}

int rdmap_qp_rx_want(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	qp->rx_direct = false;
	qp->st_offer = 0;
	if (qp_state(qp) != RDMAP_QP_RTS || qp->rx_state == RX_DISCARD) {
		/* Dropped octets: read into the (empty) stage and ignored. */
		qp->st_head = qp->st_tail = 0;
		iov[0].iov_base = qp->stage;
		iov[0].iov_len = qp->stage_cap;
		return 1;
	}
	/* The contiguous payload left is asked for only inside a payload:
	 * between FPDUs, as an empty poll finds the QP, it is not used. */
	if (qp->st_head == qp->st_tail && qp->rx_state == RX_PAYLOAD) {
		const struct rx_op *op =
			&rx_ops[qp->h.opcode & RDMAP_CTRL_OP_MASK];
		size_t contig = mpa_rx_contig(&qp->mrx);

		if (op->dest && contig >= DIRECT_MIN)
			return rx_want_direct(qp, op, contig, iov, cap);
	}
	return rx_want_stage(qp, iov);
}

/* Between FPDUs, or inside a header (RX_HDR), a read goes to the stage
 * (rdmap_qp_rx_want takes the direct read only in RX_PAYLOAD); so it
 * does in the other cases, but those are rare and stay under the lock.
 * (rdmap_qp_revoke, under the lock on any thread, does not write
 * rx_state: it fails the QP, which the state says.) */
int rdmap_qp_rx_want_staged(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	(void)cap;
	if (qp->rx_state != RX_HDR ||
	    atomic_load_explicit(&qp->state, memory_order_acquire) !=
	    RDMAP_QP_RTS)
		return 0;
	qp->rx_direct = false;
	qp->st_offer = 0;
	return rx_want_stage(qp, iov);
}

/* Close (gracefully) once the QP failed; say whether there is something
 * to send. */
static int rx_close(const struct rdmap_qp *qp)
{
	int ret = rdmap_qp_tx_pending(qp) ? RDMAP_RX_SEND : 0;

	/* A graceful close still sends the batch and the Terminate, but
	 * its deadline bounds how long a peer that stopped reading holds
	 * them (and the WRs they belong to). */
	if (qp_state(qp) == RDMAP_QP_ERROR)
		ret |= RDMAP_RX_CLOSE;
	return ret;
}

int rdmap_qp_rx_done(struct rdmap_qp *qp, size_t n)
{
	bool placed = false;
	int ret;

	if (qp_state(qp) != RDMAP_QP_RTS)
		return rx_close(qp);
	if (qp->rx_direct) {
		for (int i = 0; i < qp->ndir && n; i++) {
			size_t len = qp->dir[i].iov_len < n ? qp->dir[i].iov_len
							    : n;

			rx_feed(qp, qp->dir[i].iov_base, len, true);
			n -= len;
		}
		qp->rx_direct = false;
		/* Stopped inside the run; else what came after it is in
		 * the stage (rdmap_qp_rx_want). */
		placed = !n;
		if (n && rdmap_qp_state(qp) == RDMAP_QP_RTS) {
			qp->st_tail = n;
			rx_feed(qp, qp->stage, n, false);
			qp->st_head = qp->st_tail;
		}
	} else {
		/* A read that filled the whole small stage left more in the
		 * socket: a stream, worth the large stage. */
		if (qp->stage == qp->stage_small && qp->st_offer &&
		    n == qp->st_offer)
			qp->rx_grow = true;
		qp->st_tail += n;
		rx_feed(qp, qp->stage + qp->st_head, qp->st_tail - qp->st_head,
			false);
		qp->st_head = qp->st_tail;
	}
	ret = rx_close(qp);
	/* A direct read that stopped inside the run: a staged read of the
	 * rest follows (rdmap_qp_rx_want) unless DIRECT_MIN or more is
	 * left. rx_fpdu_end clears it. */
	if (placed && qp_state(qp) == RDMAP_QP_RTS &&
	    qp->rx_state == RX_PAYLOAD)
		qp->rx_short = true;
	/* Mid-message: a thread that received for a program watching
	 * memory must not leave the rest unread (glue.h GLUE_RX_PARTIAL). */
	if (qp_state(qp) == RDMAP_QP_RTS &&
	    (qp->rx_open || qp->rx_state != RX_HDR || qp->hdr_have ||
	     !mpa_rx_between(&qp->mrx)))
		ret |= RDMAP_RX_PARTIAL;
	/* rdmap_qp_revoke() runs only between calls: nothing kept then. */
	rx_keep_drop(qp);
	return ret;
}
