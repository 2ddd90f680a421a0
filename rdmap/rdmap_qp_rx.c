// SPDX-License-Identifier: MIT
/*
 * rdmap_qp_rx.c - the receive side of the RDMAP queue pair.
 *
 * Octets land in a small staging buffer until an FPDU's DDP and RDMAP
 * headers are known and checked; the rest of the payload is then
 * received straight into the target (registered memory or the posted
 * receive buffer) and the MPA decoder runs its CRC over what was placed.
 */
#include "rdmap_qp_internal.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Receive                                                            */
/* ------------------------------------------------------------------ */

static uint32_t hdr_len_for(const uint8_t *hdr, uint32_t have)
{
	uint32_t len;

	if (have < 2)
		return 2;
	len = (hdr[0] & DDP_CTRL_T) ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
	if (!(hdr[0] & DDP_CTRL_T) &&
	    (hdr[1] & RDMAP_CTRL_OP_MASK) == RDMAP_OP_READ_REQ)
		len += RDMAP_READ_REQ_LEN;
	return len;
}

static void rx_fault(struct rdmap_qp *qp, struct rdmap_fault f)
{
	qp_fault(qp, f, qp->hdr, qp->hdr_have, (uint16_t)qp->ulpdu_len);
	qp->target = RX_T_DISCARD;
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

/* Tagged placement: a WRITE, or a Read Response into our sink. */
static void rx_tagged(struct rdmap_qp *qp, uint32_t plen)
{
	const struct ddp_hdr *d = &qp->h.ddp;
	uint32_t acc = qp->h.opcode == RDMAP_OP_WRITE ? RDMAP_ACC_REMOTE_WRITE
						       : RDMAP_ACC_LOCAL_WRITE;
	struct ddp_tagged_buf b = { 0 };
	struct rdmap_mr *mr = NULL;
	enum ddp_error de;

	if (qp->h.opcode == RDMAP_OP_READ_RESP) {
		struct ord_entry *o = &qp->ord[qp->ord_head % qp->ord_size];

		/* A Read Response must answer our oldest Read (RFC 5040
		 * 5.3: responses come back in request order). */
		if (qp->ord_head == qp->ord_tail ||
		    (plen && d->t.stag != o->sink_stag)) {
			rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE));
			return;
		}
	}
	qp->target = RX_T_TAGGED;
	qp->tptr = NULL;
	if (plen == 0)
		return;         /* RFC 5041 5.2: not checked at all */
	mr = rdmap_stag_get(qp->cfg.stags, d->t.stag);
	if (mr) {
		b.valid = atomic_load(&mr->valid);
		b.same_stream = mr->pd == qp->cfg.pd;
		b.base_to = mr->iova;
		b.len = mr->length;
	}
	if (ddp_check_tagged(d, plen, &b, &de)) {
		rdmap_mr_put(mr);
		rx_fault(qp, rdmap_fault_ddp(de));
		return;
	}
	if ((mr->access & acc) != acc) {
		rdmap_mr_put(mr);
		rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_PROT_ACCESS));
		return;
	}
	qp->tmr = mr;
	qp->tptr = rdmap_mr_ptr(mr, d->t.to);
}

/* Take the receive buffer for a new Send message and translate it. */
static bool rx_take_recv(struct rdmap_qp *qp, enum rdmap_wc_status *st)
{
	struct rdmap_recv_wr *r = &qp->recv;

	*st = RDMAP_WC_SUCCESS;
	if (qp->cfg.use_srq) {
		if (!qp->cfg.ops->srq_pop(qp->cfg.ops_arg, r))
			return false;
	} else {
		uint32_t head = atomic_load_explicit(&qp->rq.head,
						     memory_order_relaxed);

		if (head == atomic_load_explicit(&qp->rq.tail,
						 memory_order_acquire))
			return false;
		*r = *(struct rdmap_recv_wr *)rdmap_ring_slot(&qp->rq, head);
		atomic_store_explicit(&qp->rq.head, head + 1,
				      memory_order_release);
	}
	qp->have_recv = true;
	qp->nrsge = 0;
	qp->recv_bytes = 0;
	for (int i = 0; i < r->num_sge; i++) {
		const struct rdmap_sge *s = &r->sge[i];
		struct rdmap_mr *mr;

		if (s->length == 0)
			continue;
		mr = rdmap_stag_get(qp->cfg.stags, s->lkey);
		if (!mr || rdmap_mr_check(mr, qp->cfg.pd, RDMAP_ACC_LOCAL_WRITE,
					  s->addr, s->length) != RDMAP_MR_OK) {
			rdmap_mr_put(mr);
			*st = RDMAP_WC_LOC_PROT_ERR;
			return true;
		}
		qp->rmr[qp->nrsge] = mr;
		qp->rsge[qp->nrsge].iov_base = rdmap_mr_ptr(mr, s->addr);
		qp->rsge[qp->nrsge].iov_len = s->length;
		qp->nrsge++;
	}
	return true;
}

/* Untagged Send into the posted receive buffer (RFC 5041 5.3). */
static void rx_send(struct rdmap_qp *qp, uint32_t plen)
{
	struct ddp_untagged_ctx ctx = {
		.nqueues = RDMAP_QN__COUNT,
		.expected_msn = qp->rx_msn[RDMAP_QN_SEND],
		.msn_window = 1,
	};
	enum rdmap_wc_status st = RDMAP_WC_SUCCESS;
	enum ddp_error de;

	if (!qp->have_recv && qp->h.ddp.u.msn == ctx.expected_msn)
		rx_take_recv(qp, &st);
	if (st != RDMAP_WC_SUCCESS) {
		qp_complete_recv(qp, st, 0, false, false, 0);
		rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC));
		return;
	}
	ctx.buffer_posted = qp->have_recv;
	ctx.buffer_len = qp->have_recv ? qp->recv.length : 0;
	if (ddp_check_untagged(&qp->h.ddp, plen, &ctx, &de)) {
		rx_fault(qp, rdmap_fault_ddp(de));
		return;
	}
	qp->target = RX_T_UNTAGGED;
}

/* RFC 5040 4.4 / 5.3: a Read Request, answered by the engine alone. */
static void rx_read_req(struct rdmap_qp *qp, uint32_t plen)
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
	if (ddp_check_untagged(&qp->h.ddp, plen, &ctx, &de)) {
		rx_fault(qp, rdmap_fault_ddp(de));
		return;
	}
	if (plen) {
		rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_OP_UNSPECIFIED));
		return;
	}
	if (rr->size) {
		enum rdmap_mr_check c;

		mr = rdmap_stag_get(qp->cfg.stags, rr->src_stag);
		c = mr ? rdmap_mr_check(mr, qp->cfg.pd, RDMAP_ACC_REMOTE_READ,
					rr->src_to, rr->size)
		       : RDMAP_MR_INVALID;
		if (c != RDMAP_MR_OK) {
			rdmap_mr_put(mr);
			rx_fault(qp, rdmap_fault_rdmap(prot_error(c)));
			return;
		}
	}
	e = &qp->ird[qp->ird_tail % qp->ird_size];
	*e = (struct ird_entry){ .rr = *rr, .src = mr };
	qp->ird_tail++;
	qp->target = RX_T_READ_REQ;
}

/* The DDP + RDMAP header of the current ULPDU is complete: check it and
 * find where its payload goes. */
static void rx_header(struct rdmap_qp *qp)
{
	struct rdmap_fault f;
	int hl = rdmap_hdr_parse(qp->hdr, qp->hdr_have, &qp->h, &f);
	uint32_t plen;

	if (hl < 0) {
		rx_fault(qp, f);
		return;
	}
	qp->hdr_ok = true;
	plen = qp->ulpdu_len - (uint32_t)hl;
	switch (qp->h.opcode) {
	case RDMAP_OP_WRITE:
	case RDMAP_OP_READ_RESP:
		rx_tagged(qp, plen);
		break;
	case RDMAP_OP_SEND:
	case RDMAP_OP_SEND_SE:
	case RDMAP_OP_SEND_INV:
	case RDMAP_OP_SEND_SE_INV:
		rx_send(qp, plen);
		break;
	case RDMAP_OP_READ_REQ:
		rx_read_req(qp, plen);
		break;
	case RDMAP_OP_TERMINATE:
		qp->target = RX_T_TERM;
		qp->term_have = 0;
		break;
	default:
		rx_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE));
		break;
	}
}

/* Copy (or, when it is already there, just account) payload octets at
 * payload offset poff. */
static void rx_place(struct rdmap_qp *qp, uint32_t poff, const uint8_t *data,
		     size_t len)
{
	struct iovec dst[RDMAP_MAX_SGE];
	int n;

	switch (qp->target) {
	case RX_T_TAGGED:
		if (qp->tptr + poff != data)
			memcpy(qp->tptr + poff, data, len);
		break;
	case RX_T_UNTAGGED:
		n = qp_slice(qp->rsge, qp->nrsge, qp->h.ddp.u.mo + (uint64_t)poff,
			  len, dst);
		for (int i = 0; i < n; i++) {
			if (dst[i].iov_base != data)
				memcpy(dst[i].iov_base, data, dst[i].iov_len);
			data += dst[i].iov_len;
		}
		break;
	case RX_T_TERM:
		if (qp->term_have + poff >= sizeof(qp->term_buf))
			break;
		if (len > sizeof(qp->term_buf) - poff)
			len = sizeof(qp->term_buf) - poff;
		memcpy(qp->term_buf + poff, data, len);
		qp->term_have = poff + (uint32_t)len;
		break;
	default:
		break;
	}
}

/* ULPDU octets at ulpdu offset off: header first, then payload. */
static void rx_data(struct rdmap_qp *qp, uint32_t off, const uint8_t *data,
		    size_t len)
{
	while (len && !qp->hdr_ok) {
		uint32_t need = hdr_len_for(qp->hdr, qp->hdr_have);
		uint32_t take;

		if (qp->target == RX_T_DISCARD)
			return;
		if (need > qp->ulpdu_len) {
			/* The ULPDU ends before its own header does: name
			 * what the partial header says, else too short. */
			struct rdmap_fault f =
				rdmap_fault_ddp(DDP_ERR_SEG_TOO_SHORT);

			rdmap_hdr_parse(qp->hdr, qp->hdr_have, &qp->h, &f);
			rx_fault(qp, f);
			return;
		}
		take = need - qp->hdr_have;
		if (take > len)
			take = (uint32_t)len;
		memcpy(qp->hdr + qp->hdr_have, data, take);
		qp->hdr_have += take;
		data += take;
		len -= take;
		off += take;
		if (qp->hdr_have >= 2 &&
		    qp->hdr_have == hdr_len_for(qp->hdr, qp->hdr_have))
			rx_header(qp);
	}
	if (len && qp->hdr_ok)
		rx_place(qp, off - qp->hdr_have, data, len);
}

static void rx_terminate(struct rdmap_qp *qp)
{
	struct rdmap_terminate t;
	uint16_t term = 0;

	if (rdmap_term_parse(qp->term_buf, qp->term_have, &t) >= 0)
		term = t.term;
	/* The peer's Terminate explains the oldest unfinished WR: a remote
	 * protection error there is IBV_WC_REM_ACCESS_ERR (RFC 5040 7.1). */
	qp->term_sent = true;     /* never answer a Terminate with one */
	if (rdmap_term_layer(term) == RDMAP_LAYER_LLP ||
	    rdmap_term_etype(term) == 0)
		qp_enter_error(qp, term, RDMAP_WC_FATAL_ERR);
	else if (rdmap_term_etype(term) == 1)   /* remote protection */
		qp_enter_error(qp, term, RDMAP_WC_REM_ACCESS_ERR);
	else                                    /* remote operation */
		qp_enter_error(qp, term, RDMAP_WC_REM_OP_ERR);
}

static void invalidate(struct rdmap_qp *qp, uint32_t stag, bool *ok)
{
	struct rdmap_mr *mr = rdmap_stag_get(qp->cfg.stags, stag);

	*ok = mr && mr->pd == qp->cfg.pd;
	if (*ok)
		atomic_store(&mr->valid, false);
	rdmap_mr_put(mr);
}

/* The current FPDU ended with good framing and CRC. */
static void rx_fpdu_end(struct rdmap_qp *qp)
{
	const struct ddp_hdr *d = &qp->h.ddp;
	bool inv_ok = true;

	qp->last_big = qp->ulpdu_len >= 2048;
	if (!qp->rx_any) {
		qp->rx_any = true;
		qp->tx_hold = false;   /* the RTR arrived (RFC 6581 3) */
	}
	if (!qp->hdr_ok) {
		if (qp->target != RX_T_DISCARD)
			rx_fault(qp, rdmap_fault_ddp(DDP_ERR_SEG_TOO_SHORT));
		goto next;
	}
	switch (qp->target) {
	case RX_T_TAGGED:
		rdmap_mr_put(qp->tmr);
		qp->tmr = NULL;
		if (qp->h.opcode == RDMAP_OP_READ_RESP) {
			struct ord_entry *o =
				&qp->ord[qp->ord_head % qp->ord_size];

			o->got += qp->ulpdu_len - qp->hdr_have;
			if (!d->last)
				break;
			if (o->wr_idx >= 0) {
				struct sq_meta *m = &qp->meta[(uint32_t)o->wr_idx &
							      (qp->sq.size - 1)];
				if (--m->reads_out == 0 &&
				    !(qp->cur.active &&
				      qp->cur.idx == (uint32_t)o->wr_idx))
					m->done = true;
			}
			qp->ord_head++;
			qp_sq_advance(qp);
		}
		break;
	case RX_T_UNTAGGED:
		qp->recv_bytes += qp->ulpdu_len - qp->hdr_have;
		if (!d->last)
			break;
		qp->rx_msn[RDMAP_QN_SEND]++;
		if (rdmap_op(qp->h.opcode)->inval_stag) {
			/* RFC 5040 5.4: invalidate once the message is
			 * placed; an STag that cannot be invalidated is a
			 * remote protection error. */
			invalidate(qp, qp->h.inval_stag, &inv_ok);
			if (!inv_ok) {
				qp_complete_recv(qp, RDMAP_WC_REM_INV_REQ_ERR, 0,
					      false, false, 0);
				rx_fault(qp, rdmap_fault_rdmap(
					RDMAP_ERR_PROT_CANT_INVALIDATE));
				break;
			}
		}
		qp_complete_recv(qp, RDMAP_WC_SUCCESS,
			      (uint32_t)(d->u.mo + qp->ulpdu_len - qp->hdr_have),
			      rdmap_op(qp->h.opcode)->solicited,
			      rdmap_op(qp->h.opcode)->inval_stag,
			      qp->h.inval_stag);
		break;
	case RX_T_READ_REQ:
		qp->rx_msn[RDMAP_QN_READ_REQ]++;
		break;
	case RX_T_TERM:
		qp->rx_msn[RDMAP_QN_TERMINATE]++;
		rx_terminate(qp);
		break;
	default:
		break;
	}
next:
	qp->hdr_have = 0;
	qp->hdr_ok = false;
	qp->target = rdmap_qp_state(qp) == RDMAP_QP_RTS ? RX_T_NONE
							 : RX_T_DISCARD;
}

/* Run the MPA decoder over in[0..len) (staging or placed octets). */
static void rx_feed(struct rdmap_qp *qp, const uint8_t *in, size_t len)
{
	while (len) {
		struct mpa_rx_event ev;
		long used;

		if (qp->target == RX_T_DISCARD &&
		    rdmap_qp_state(qp) != RDMAP_QP_RTS)
			return;
		used = mpa_rx_feed(&qp->mrx, in, len, &ev);
		if (used < 0) {
			enum mpa_error e = qp->mrx.error;

			qp_fault(qp, rdmap_fault_llp(e, mpa_error_term(e)),
			      NULL, 0, 0);
			qp->target = RX_T_DISCARD;
			return;
		}
		in += used;
		len -= (size_t)used;
		if (ev.type == MPA_RX_EV_DATA) {
			qp->ulpdu_len = ev.ulpdu_len;
			rx_data(qp, ev.ulpdu_off, ev.data, ev.len);
		} else if (ev.type == MPA_RX_EV_FPDU) {
			qp->ulpdu_len = ev.ulpdu_len;
			rx_fpdu_end(qp);
		}
	}
}

int rdmap_qp_rx_want(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	size_t contig;

	qp->rx_direct = false;
	if (rdmap_qp_state(qp) != RDMAP_QP_RTS || qp->target == RX_T_DISCARD) {
		iov[0].iov_base = qp->discard;
		iov[0].iov_len = sizeof(qp->discard);
		return 1;
	}
	contig = mpa_rx_contig(&qp->mrx);
	if (qp->st_head == qp->st_tail && qp->hdr_ok && contig >= DIRECT_MIN &&
	    (qp->target == RX_T_TAGGED || qp->target == RX_T_UNTAGGED)) {
		uint32_t poff = qp->mrx.ulpdu_done - qp->hdr_have;

		if (qp->target == RX_T_TAGGED) {
			iov[0].iov_base = qp->tptr + poff;
			iov[0].iov_len = contig;
			qp->ndir = 1;
		} else {
			qp->ndir = qp_slice(qp->rsge, qp->nrsge,
					 qp->h.ddp.u.mo + (uint64_t)poff,
					 contig, qp->dir);
			if (qp->ndir > cap)
				qp->ndir = cap;
			memcpy(iov, qp->dir, (size_t)qp->ndir * sizeof(*iov));
		}
		memcpy(qp->dir, iov, (size_t)qp->ndir * sizeof(*iov));
		qp->rx_direct = true;
		return qp->ndir;
	}
	if (qp->st_head == qp->st_tail)
		qp->st_head = qp->st_tail = 0;
	iov[0].iov_base = qp->stage + qp->st_tail;
	iov[0].iov_len = STAGE_SIZE - qp->st_tail;
	if (qp->last_big && qp->st_head == qp->st_tail &&
	    iov[0].iov_len > SMALL_READ)
		iov[0].iov_len = SMALL_READ;
	return 1;
}

/* Close now if the QP failed and has no Terminate left to send; say
 * whether there is something to send. */
static int rx_close(const struct rdmap_qp *qp)
{
	int ret = rdmap_qp_tx_pending(qp) ? RDMAP_RX_SEND : 0;

	if (rdmap_qp_state(qp) == RDMAP_QP_ERROR && !qp->term_pending &&
	    qp->b_sent == qp->b_total)
		ret |= RDMAP_RX_CLOSE;
	return ret;
}

int rdmap_qp_rx_done(struct rdmap_qp *qp, size_t n)
{
	if (rdmap_qp_state(qp) != RDMAP_QP_RTS)
		return rx_close(qp);
	if (qp->rx_direct) {
		for (int i = 0; i < qp->ndir && n; i++) {
			size_t len = qp->dir[i].iov_len < n ? qp->dir[i].iov_len
							    : n;

			rx_feed(qp, qp->dir[i].iov_base, len);
			n -= len;
		}
		qp->rx_direct = false;
	} else {
		qp->st_tail += n;
		rx_feed(qp, qp->stage + qp->st_head, qp->st_tail - qp->st_head);
		qp->st_head = qp->st_tail;
	}
	return rx_close(qp);
}
