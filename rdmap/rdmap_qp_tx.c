// SPDX-License-Identifier: MIT
/*
 * rdmap_qp_tx.c - the transmit side of the RDMAP queue pair.
 *
 * Work requests become DDP segments no larger than MULPDU, each framed by
 * mpa_fpdu_frame() into an iovec list that points at the caller's
 * buffers. Up to TX_BATCH FPDUs (TX_SMALL_FPDUS until the QP has needed
 * more) go to the kernel in one gathered send; a
 * WR completes once its last octet has been handed over (Reads: once the
 * last Read Response arrived), in SQ order (RFC 5040 5.5). Read
 * Responses, the RFC 6581 RTR and its nudges, and Terminates go out here
 * too.
 */
#include "rdmap_qp_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Transmit                                                           */
/* ------------------------------------------------------------------ */

bool rdmap_qp_tx_pending(const struct rdmap_qp *qp)
{
	if (qp->b_sent < qp->b_total || qp->term_pending)
		return true;
	if (qp_state(qp) != RDMAP_QP_RTS)
		return false;
	if (qp->rtr_pending || qp->nudge_pending)
		return true;
	if (qp->tx_hold)
		return false;
	return qp->ird_head != qp->ird_tail || qp->cur.active ||
	       qp->sq_txpos != atomic_load_explicit(&qp->sq.tail,
						     memory_order_acquire);
}

/* Room for one more FPDU with up to npay payload iovecs? A small batch
 * that is full asks for the large one (tx_grow). */
static bool batch_room(struct rdmap_qp *qp, int npay)
{
	if (qp->nfp < qp->fp_cap && qp->b_total < qp->b_max &&
	    qp->niov + npay + 3 + 2 * 2 <= qp->iov_cap)
		return true;
	if (!qp->fp_big)
		qp->tx_grow = true;
	return false;
}

/* Switch to the large batch (between batches only: nothing in flight
 * points into the small one). Its iovecs follow its FPDUs in the same
 * allocation. Returns false if there is no memory: the small batch
 * keeps working. */
static bool batch_grow(struct rdmap_qp *qp)
{
	/* The copy buffer holds a full batch of the largest FPDUs. */
	size_t copy = !qp->mtx.markers && qp->s.mulpdu <= TX_COPY_MULPDU ?
		      TX_BATCH * mpa_fpdu_wire_len(&qp->mtx, qp->s.mulpdu) : 0;
	struct tx_fpdu *fp = qp_big_alloc(TX_BIG_BYTES + copy);

	qp->tx_grow = false;
	if (!fp)
		return false;
	qp->tx_buf = copy ? (uint8_t *)fp + TX_BIG_BYTES : NULL;
	qp->tx_buf_cap = copy;
	qp->tx_buf_used = 0;
	qp->fp_big = qp->fp = fp;
	qp->fp_cap = TX_BATCH;
	qp->iov = (struct iovec *)(fp + TX_BATCH);
	qp->iov_cap = TX_IOV_MAX;
	return true;
}

/*
 * One-segment FPDUs (issue 13, MTU 1500): framed by reference, each
 * costs the kernel two iovecs to walk in the gathered send (payload;
 * pad + CRC joined with the next length field and header), and that
 * walk costs more than copying the octets: a plain TCP sender over the
 * veth pair spent 0.44-0.56 CPU s/GiB sending 64 KiB as 1,428-octet
 * pieces between small ones, 0.34-0.42 sending it in one piece, and
 * 0.35-0.45 copying the same pieces into one buffer first (at 4 KiB
 * pieces the three are equal; docs/performance-log.md "FPDUs that fit
 * one segment: one copy, one iovec"). So on such a path the large batch
 * has a copy buffer, and each FPDU is framed whole into it right after
 * the one before (mpa_fpdu_copy: the CRC is computed over the copy, in
 * the cache): the batch goes out as one iovec. The MR references are
 * kept as for framing by reference. Returns the FPDU's wire length, 0
 * if it does not fit (the caller frames it by reference), <0 on error.
 */
static int batch_copy(struct rdmap_qp *qp, const struct iovec *ul, int n)
{
	uint8_t *at = qp->tx_buf + qp->tx_buf_used;
	struct iovec *last = qp->niov ? &qp->iov[qp->niov - 1] : NULL;
	int len = mpa_fpdu_copy(&qp->mtx, ul, n, at,
				qp->tx_buf_cap - qp->tx_buf_used);

	if (len == -ENOSPC)
		return 0;
	if (len < 0)
		return len;
	qp->tx_buf_used += (size_t)len;
	if (last && (uint8_t *)last->iov_base + last->iov_len == at)
		last->iov_len += (size_t)len;
	else
		qp->iov[qp->niov++] = (struct iovec){
			.iov_base = at, .iov_len = (size_t)len,
		};
	return len;
}

/* The FPDU framed by reference: iovecs at the ULPDU's pieces and at f's
 * scratch. Returns its wire length or <0. */
static int batch_frame(struct rdmap_qp *qp, struct tx_fpdu *f,
		       const struct iovec *ul, int nul)
{
	int n = mpa_fpdu_frame(&qp->mtx, ul, nul, &f->scr,
			       qp->iov + qp->niov, qp->iov_cap - qp->niov);
	size_t bytes = 0;

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++)
		bytes += qp->iov[qp->niov + i].iov_len;
	/* The previous FPDU's pad + CRC and this one's length field and
	 * header as one iovec: two per one-segment FPDU instead of three
	 * for the kernel to walk (mpa_fpdu_join). */
	if (qp->nfp && mpa_fpdu_join(&qp->mtx, &qp->fp[qp->nfp - 1].scr,
				     &qp->iov[qp->niov - 1], &f->scr,
				     &qp->iov[qp->niov])) {
		for (int i = 0; i < n; i++)
			qp->iov[qp->niov - 1 + i] = qp->iov[qp->niov + i];
		n--;
	}
	qp->niov += n;
	return (int)bytes;
}

/* Frame one ULPDU: header h (with payload pay[0..npay)) into the batch. */
static int batch_add(struct rdmap_qp *qp, const struct rdmap_hdr *h,
		     const struct iovec *pay, int npay, int64_t wr_idx,
		     int64_t wr_of, struct rdmap_mr *const *put, int nput,
		     bool close)
{
	struct tx_fpdu *f = &qp->fp[qp->nfp];
	struct iovec ul[RDMAP_MAX_SGE + 2];
	int hl, n, i;
	size_t plen = 0;

	hl = rdmap_hdr_build(h, f->hdr, sizeof(f->hdr));
	if (hl < 0)
		return hl;
	ul[0].iov_base = f->hdr;
	ul[0].iov_len = (size_t)hl;
	for (i = 0; i < npay; i++) {
		ul[i + 1] = pay[i];
		plen += pay[i].iov_len;
	}
	n = qp->tx_buf ? batch_copy(qp, ul, npay + 1) : 0;
	if (n == 0)
		n = batch_frame(qp, f, ul, npay + 1);
	if (n < 0)
		return n;
	qp->b_total += (size_t)n;
	f->end = qp->b_total;
	f->wr_idx = wr_idx;
	f->wr_of = wr_of;
	for (i = 0; i < nput; i++)
		f->put[i] = put[i];
	f->nput = (uint8_t)nput;
	f->close = close;
	qp->nfp++;
	qp_stat_fpdu(qp, true, h, (uint32_t)plen);
	return 0;
}

/* Terminate: DDP untagged, QN 2, L set (RFC 5040 section 4.8). */
static int tx_terminate(struct rdmap_qp *qp)
{
	uint8_t body[RDMAP_TERM_MAX_LEN];
	struct rdmap_hdr h = { .opcode = RDMAP_OP_TERMINATE };
	struct tx_fpdu *f = &qp->fp[qp->nfp];
	struct iovec pay;
	int len, ret;

	if (!batch_room(qp, 1))
		return 0;
	len = rdmap_term_build(&qp->term, body, sizeof(body));
	if (len < 0)
		return len;
	h.ddp.last = true;
	h.ddp.u.msn = qp->tx_msn[RDMAP_QN_TERMINATE]++;
	memcpy(f->body, body, (size_t)len);
	pay.iov_base = f->body;
	pay.iov_len = (size_t)len;
	ret = batch_add(qp, &h, &pay, 1, -1, -1, NULL, 0, true);
	if (ret)
		return ret;
	qp->term_pending = false;
	qp->term_sent = true;
	qp_stat_term(qp, true, qp->term.term);
	return 1;
}

/* A zero-length RDMA Write: the WRITE RTR, and the nudge after an RTR. */
static int tx_zero_write(struct rdmap_qp *qp)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_WRITE };

	h.ddp.last = true;
	h.ddp.tagged = true;
	h.ddp.t.stag = RTR_STAG;
	return batch_add(qp, &h, NULL, 0, -1, -1, NULL, 0, false);
}

/* The RFC 6581 RTR: a zero-length WRITE or READ as the first FPDU. */
static int tx_rtr(struct rdmap_qp *qp)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_REQ };
	struct ord_entry *o;

	qp->rtr_pending = false;
	RDMAP_STAT_ADD(qp->st->rtr_sent, 1);
	if (qp->s.rtr == RDMAP_RTR_SEND_WRITE)
		return tx_zero_write(qp);
	o = &qp->ord[qp->ord_tail & qp->ord_mask];
	h.ddp.last = true;
	h.ddp.u.msn = qp->tx_msn[RDMAP_QN_READ_REQ]++;
	h.rreq.sink_stag = RTR_STAG;
	h.rreq.src_stag = RTR_STAG;
	*o = (struct ord_entry){ .wr_idx = -1, .sink_stag = RTR_STAG };
	qp->ord_tail++;
	atomic_store_explicit(&qp->ord_out, qp->ord_tail - qp->ord_head,
			      memory_order_relaxed);
	return batch_add(qp, &h, NULL, 0, -1, -1, NULL, 0, false);
}

int64_t rdmap_qp_tick(struct rdmap_qp *qp, int64_t now_ms, bool *send)
{
	bool initiator = qp->s.rtr == RDMAP_RTR_SEND_WRITE ||
			 qp->s.rtr == RDMAP_RTR_SEND_READ;

	*send = false;
	/* nothing to wait for, the answer came, or given up */
	if (!initiator || qp->rx_any || qp->nudges >= RDMAP_NUDGE_MAX ||
	    qp_state(qp) != RDMAP_QP_RTS)
		return -1;
	if (!qp->nudge_at) {
		qp->nudge_at = now_ms + RDMAP_NUDGE_FIRST_MS;
		return qp->nudge_at;
	}
	if (now_ms < qp->nudge_at)
		return qp->nudge_at;
	if (!qp->rtr_pending && !qp->nudge_pending) {
		qp->nudge_pending = true;
		qp->nudges++;
		*send = true;
	}
	qp->nudge_at = now_ms + ((int64_t)RDMAP_NUDGE_FIRST_MS << qp->nudges);
	return qp->nudge_at;
}

/* Next segment of the oldest Read Response. Returns 1 if one was added,
 * 0 if no room or nothing to do. */
static int tx_read_resp(struct rdmap_qp *qp)
{
	struct ird_entry *e = &qp->ird[qp->ird_head & qp->ird_mask];
	uint32_t max = qp->s.mulpdu - DDP_TAGGED_HDR_LEN;
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_RESP };
	struct iovec pay;
	uint64_t left = e->rr.size - e->sent;
	uint32_t len = left > max ? max : (uint32_t)left;
	bool last = len == left;
	int ret;

	if (!batch_room(qp, 1))
		return 0;
	h.ddp.tagged = true;
	h.ddp.last = last;
	h.ddp.t.stag = e->rr.sink_stag;
	h.ddp.t.to = e->rr.sink_to + e->sent;
	pay.iov_base = e->src ? rdmap_mr_ptr(e->src, e->rr.src_to + e->sent)
			      : NULL;
	pay.iov_len = len;
	/* The last segment's FPDU keeps the source MR referenced until it
	 * is sent, which covers the earlier ones. */
	ret = batch_add(qp, &h, &pay, len ? 1 : 0, -1, -1, &e->src,
			last ? 1 : 0, false);
	if (ret)
		return ret;
	e->sent += len;
	if (last)
		qp->ird_head++;
	return 1;
}

/* Check and translate the local SGEs of the WR about to start. Returns
 * 0, or a completion status for a bad one. */
static int tx_prepare(struct rdmap_qp *qp, const struct rdmap_send_wr *wr)
{
	struct tx_cur *c = &qp->cur;
	uint32_t acc = wr->opcode == RDMAP_WR_READ ? RDMAP_ACC_LOCAL_WRITE : 0;

	c->nsrc = 0;
	if (wr->flags & RDMAP_WR_INLINE) {
		c->src[0].iov_base = (void *)wr->inline_data;
		c->src[0].iov_len = wr->length;
		c->mr[0] = NULL;
		c->nsrc = wr->length ? 1 : 0;
		return 0;
	}
	for (int i = 0; i < wr->num_sge; i++) {
		const struct rdmap_sge *s = &wr->sge[i];
		struct rdmap_mr *mr;

		if (s->length == 0)
			continue;
		mr = rdmap_stag_get(qp->cfg.stags, s->lkey);
		if (!mr || rdmap_mr_check(mr, qp->cfg.pd, acc, s->addr,
					  s->length) != RDMAP_MR_OK) {
			rdmap_mr_put(mr);
			qp_put_refs(c->mr, c->nsrc);
			return RDMAP_WC_LOC_PROT_ERR;
		}
		c->mr[c->nsrc] = mr;
		c->src[c->nsrc].iov_base = rdmap_mr_ptr(mr, s->addr);
		c->src[c->nsrc].iov_len = s->length;
		c->nsrc++;
	}
	return 0;
}

/* Mark SQ index idx as handed over in full. */
static void wr_sent(struct rdmap_qp *qp, uint32_t idx)
{
	struct sq_meta *m = &qp->meta[idx & (qp->sq.size - 1)];
	const struct rdmap_send_wr *wr = rdmap_ring_slot(&qp->sq, idx);

	if (wr->opcode != RDMAP_WR_READ)
		m->done = true;
}

/* Start the next WR of the SQ if it may start. Returns 1 if one is
 * active, 0 if the SQ is empty or must wait. */
static int tx_start(struct rdmap_qp *qp)
{
	struct tx_cur *c = &qp->cur;
	uint32_t tail = atomic_load_explicit(&qp->sq.tail,
					     memory_order_acquire);
	const struct rdmap_send_wr *wr;
	struct sq_meta *m;
	struct ddp_hdr t = { 0 };
	int st;

	if (qp->sq_txpos == tail)
		return 0;
	wr = rdmap_ring_slot(&qp->sq, qp->sq_txpos);
	m = &qp->meta[qp->sq_txpos & (qp->sq.size - 1)];
	/* IBV_SEND_FENCE: wait for every earlier Read to complete. */
	if ((wr->flags & RDMAP_WR_FENCE) && qp->ord_head != qp->ord_tail)
		return 0;
	*m = (struct sq_meta){ 0 };
	st = tx_prepare(qp, wr);
	if (st) {
		/* A local protection error completes the WR in error and,
		 * as for any error completion, moves the QP to ERROR. */
		m->done = true;
		m->status = (uint8_t)st;
		qp->sq_txpos++;
		qp_sq_advance(qp);
		/* A local error: no Terminate is sent. */
		qp_enter_error(qp, RDMAP_TERM_NONE, RDMAP_WC_WR_FLUSH_ERR);
		return 0;
	}
	c->active = true;
	c->idx = qp->sq_txpos++;
	c->wr = wr;
	c->next_read = 0;
	c->read_off = 0;
	if (wr->opcode == RDMAP_WR_READ)
		return 1;
	t.tagged = wr->opcode == RDMAP_WR_WRITE;
	if (t.tagged) {
		t.t.stag = wr->rkey;
		t.t.to = wr->remote_addr;
	} else {
		t.u.qn = RDMAP_QN_SEND;
		t.u.msn = qp->tx_msn[RDMAP_QN_SEND]++;
	}
	if (ddp_seg_init(&c->it, &t, wr->length, qp->s.mulpdu)) {
		qp_put_refs(c->mr, c->nsrc);
		c->active = false;
		m->done = true;
		m->status = RDMAP_WC_LOC_LEN_ERR;
		qp_sq_advance(qp);
		/* A local error: no Terminate is sent. */
		qp_enter_error(qp, RDMAP_TERM_NONE, RDMAP_WC_WR_FLUSH_ERR);
		return 0;
	}
	return 1;
}

static uint8_t send_opcode(const struct rdmap_send_wr *wr)
{
	bool se = wr->flags & RDMAP_WR_SOLICITED;

	if (wr->opcode == RDMAP_WR_SEND_INV)
		return se ? RDMAP_OP_SEND_SE_INV : RDMAP_OP_SEND_INV;
	return se ? RDMAP_OP_SEND_SE : RDMAP_OP_SEND;
}

/*
 * At one-segment FPDUs the first read of each payload stalls on memory
 * the application filled a while ago: with CRC on, mpa_fpdu_frame()'s
 * CRC pass; without, the kernel's copy in the sendmsg that takes the
 * batch, which otherwise meets each 1.4 KiB payload cold, one after
 * the other. Ask for the next segment's source (the message's octets
 * [next, next + len), inside its SGEs) while this one is framed: the
 * fetches overlap the framing, and by the send the batch's payloads
 * are in the cache (wisp_fpdu_bench --tcp --no-crc: 226 -> 161 ns of
 * the sending thread per FPDU, docs/performance-log.md "One-segment
 * FPDUs: the sending thread"). A hint: it reads nothing itself.
 */
#define TX_PREFETCH_MIN  512
#define TX_PREFETCH_MAX  8192     /* a large FPDU's CRC pass is a stream
				   * the hardware prefetcher follows */
#define TX_CACHE_LINE    64

static void tx_prefetch_next(const struct tx_cur *c,
			     const struct rdmap_send_wr *wr, uint64_t next,
			     uint32_t len)
{
	struct iovec nx[RDMAP_MAX_SGE];
	int n;

	if (len < TX_PREFETCH_MIN || next >= wr->length)
		return;
	if (len > TX_PREFETCH_MAX)
		len = TX_PREFETCH_MAX;
	if (len > wr->length - next)
		len = (uint32_t)(wr->length - next);
	n = qp_slice(c->src, c->nsrc, next, len, nx);
	for (int i = 0; i < n; i++)
		for (size_t k = 0; k < nx[i].iov_len; k += TX_CACHE_LINE)
			__builtin_prefetch((const uint8_t *)nx[i].iov_base + k,
					   0, 3);
}

/*
 * The WR at the head of the SQ as one FPDU built in place (issue 13: a
 * small message's cost between post and sendmsg). A WRITE or Send whose
 * message is one DDP segment and whose FPDU is laid out flat by MPA
 * (mpa_fpdu_flat_ulpdu) has its DDP/RDMAP header written and its payload
 * copied straight into the FPDU's scratch, then MPA adds length, pad
 * and CRC: no segment iterator, no ULPDU iovecs, no framing of pieces.
 * The octets are those tx_start() + tx_segment() produce for the same WR
 * (tests/unit/test_qp.c, "flat_wr"), and the FPDU completes the WR
 * through the same batch bookkeeping, so ordering and MR references are
 * as theirs. Returns 1 if the WR went into the batch, 0 if it is not
 * one of these (READ, a fence to wait on, too large, markers, a bad SGE,
 * no room): the general path then takes it, and reports its errors.
 */
static int tx_flat_wr(struct rdmap_qp *qp)
{
	uint32_t tail = atomic_load_explicit(&qp->sq.tail,
					     memory_order_acquire);
	const struct rdmap_send_wr *wr;
	struct rdmap_mr *mr[RDMAP_MAX_SGE];
	struct tx_fpdu *f;
	struct rdmap_hdr h = { 0 };
	size_t hl, ulen;
	uint8_t *u, *p;
	uint32_t idx;
	int nmr = 0;

	if (qp->sq_txpos == tail)
		return 0;
	wr = rdmap_ring_slot(&qp->sq, qp->sq_txpos);
	if (wr->opcode == RDMAP_WR_READ || (wr->flags & RDMAP_WR_FENCE))
		return 0;
	h.ddp.tagged = wr->opcode == RDMAP_WR_WRITE;
	hl = ddp_hdr_len(h.ddp.tagged);
	ulen = hl + wr->length;
	/* One segment (RFC 5041 5.2: at most MULPDU), and a TO that does
	 * not wrap (ddp_seg_init's checks; the general path fails it). */
	if (ulen > qp->s.mulpdu ||
	    (h.ddp.tagged && wr->remote_addr > UINT64_MAX - wr->length))
		return 0;
	if (qp->nfp >= qp->fp_cap || qp->b_total >= qp->b_max ||
	    qp->niov + 1 > qp->iov_cap)
		return 0;
	f = &qp->fp[qp->nfp];
	u = mpa_fpdu_flat_ulpdu(&qp->mtx, &f->scr, ulen);
	if (!u)
		return 0;
	p = u + hl;
	if (wr->flags & RDMAP_WR_INLINE) {
		memcpy(p, wr->inline_data, wr->length);
	} else {
		for (int i = 0; i < wr->num_sge; i++) {
			const struct rdmap_sge *s = &wr->sge[i];
			struct rdmap_mr *m;

			if (s->length == 0)
				continue;
			m = rdmap_stag_get(qp->cfg.stags, s->lkey);
			if (!m || rdmap_mr_check(m, qp->cfg.pd, 0, s->addr,
						 s->length) != RDMAP_MR_OK) {
				rdmap_mr_put(m);
				qp_put_refs(mr, nmr);
				return 0;
			}
			mr[nmr++] = m;
			memcpy(p, rdmap_mr_ptr(m, s->addr), s->length);
			p += s->length;
		}
	}
	/* The header, as rdmap_hdr_build() writes it for this opcode. */
	h.ddp.last = true;
	if (h.ddp.tagged) {
		h.opcode = RDMAP_OP_WRITE;
		h.ddp.t.stag = wr->rkey;
		h.ddp.t.to = wr->remote_addr;
	} else {
		h.opcode = send_opcode(wr);
		h.ddp.u.qn = RDMAP_QN_SEND;
		h.ddp.u.msn = qp->tx_msn[RDMAP_QN_SEND]++;
		/* The *_INV Sends (send_opcode), as rdmap_op() says. */
		if (wr->opcode == RDMAP_WR_SEND_INV)
			h.ddp.u.ulp_word = h.inval_stag = wr->inv_stag;
	}
	/* RFC 5040 4.1: RV is 01b; the reserved bits are zero. */
	h.ddp.ulp_ctrl = (uint8_t)(RDMAP_VERSION << RDMAP_CTRL_RV_SHIFT |
				   h.opcode);
	ddp_hdr_build(&h.ddp, u, hl);
	mpa_fpdu_flat_finish(&qp->mtx, &f->scr, ulen, qp->iov + qp->niov);
	idx = qp->sq_txpos++;
	qp->meta[idx & (qp->sq.size - 1)] = (struct sq_meta){ 0 };
	qp->b_total += qp->iov[qp->niov].iov_len;
	qp->niov++;
	f->end = qp->b_total;
	f->wr_idx = idx;
	f->wr_of = idx;
	for (int i = 0; i < nmr; i++)
		f->put[i] = mr[i];
	f->nput = (uint8_t)nmr;
	f->close = false;
	qp->nfp++;
	qp_stat_fpdu(qp, true, &h, (uint32_t)wr->length);
	return 1;
}

/* Add segments of the active WR. Returns 1 while progress is made, 0
 * when blocked (no room, no ORD credit), <0 on error. */
static int tx_segment(struct rdmap_qp *qp)
{
	struct tx_cur *c = &qp->cur;
	const struct rdmap_send_wr *wr = c->wr;
	struct rdmap_hdr h = { 0 };
	struct iovec pay[RDMAP_MAX_SGE];
	uint64_t off;
	uint32_t len;
	int npay, ret;

	if (wr->opcode == RDMAP_WR_READ) {
		/* One Read Request per sink SGE (RFC 5040 4.4 names one
		 * sink STag per request). ORD bounds them: an extra Read
		 * waits here for a response, it does not fail. */
		const struct rdmap_sge *s = &wr->sge[c->next_read];
		struct ord_entry *o;
		bool last = c->next_read + 1 >= wr->num_sge;

		if (qp->ord_tail - qp->ord_head >= qp->ord_limit ||
		    !batch_room(qp, 0))
			return 0;
		h.opcode = RDMAP_OP_READ_REQ;
		h.ddp.last = true;
		h.ddp.u.msn = qp->tx_msn[RDMAP_QN_READ_REQ]++;
		h.rreq.sink_stag = s->lkey;
		h.rreq.sink_to = s->addr;
		h.rreq.size = s->length;
		h.rreq.src_stag = wr->rkey;
		h.rreq.src_to = wr->remote_addr + c->read_off;
		ret = batch_add(qp, &h, NULL, 0, -1, -1, NULL, 0, false);
		if (ret)
			return ret;
		o = &qp->ord[qp->ord_tail & qp->ord_mask];
		*o = (struct ord_entry){
			.wr_idx = c->idx, .sink_stag = s->lkey,
			.sink_to = s->addr, .size = s->length,
		};
		qp->ord_tail++;
		atomic_store_explicit(&qp->ord_out, qp->ord_tail - qp->ord_head,
				      memory_order_relaxed);
		qp->meta[c->idx & (qp->sq.size - 1)].reads_out++;
		c->read_off += s->length;
		c->next_read++;
		if (last || wr->num_sge == 0) {
			qp_put_refs(c->mr, c->nsrc);
			c->active = false;
		}
		return 1;
	}

	if (!batch_room(qp, RDMAP_MAX_SGE))
		return 0;
	if (ddp_seg_next(&c->it, &h.ddp, &off, &len) <= 0)
		return -EINVAL;
	npay = qp_slice(c->src, c->nsrc, off, len, pay);
	if (!h.ddp.last)
		tx_prefetch_next(c, wr, off + len, len);
	if (wr->opcode == RDMAP_WR_WRITE) {
		h.opcode = RDMAP_OP_WRITE;
	} else {
		h.opcode = send_opcode(wr);
		h.inval_stag = wr->inv_stag;
	}
	/* The last FPDU takes over the references: the MRs stay referenced
	 * until every octet of the message has been sent, so that
	 * ibv_dereg_mr of memory a send may still read aborts the stream
	 * rather than return while the kernel reads it. */
	ret = batch_add(qp, &h, pay, npay, h.ddp.last ? (int64_t)c->idx : -1,
			(int64_t)c->idx, c->mr, h.ddp.last ? c->nsrc : 0,
			false);
	if (ret)
		return ret;
	if (h.ddp.last) {
		memset(c->mr, 0, sizeof(c->mr));
		c->active = false;
	}
	return 1;
}

static int tx_view(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	int n = 0;

	for (int i = qp->iov_cur; i < qp->niov && n < cap; i++, n++) {
		iov[n] = qp->iov[i];
		if (i == qp->iov_cur) {
			iov[n].iov_base = (uint8_t *)iov[n].iov_base +
					  qp->iov_off;
			iov[n].iov_len -= qp->iov_off;
		}
	}
	return n;
}

/* Build a new batch: the Terminate, the RTR or nudge, Read Responses and
 * WRs. Returns <0 on a local failure. */
static void batch_reset(struct rdmap_qp *qp)
{
	qp->tx_buf_used = 0;
	qp->nfp = qp->fp_done = 0;
	qp->niov = qp->iov_cur = 0;
	qp->iov_off = qp->b_total = qp->b_sent = 0;
}

static int tx_build(struct rdmap_qp *qp)
{
	int ret;

	batch_reset(qp);
	if (qp->term_pending)
		return tx_terminate(qp);
	if (qp_state(qp) != RDMAP_QP_RTS)
		return 0;
	if (qp->rtr_pending) {
		ret = tx_rtr(qp);
		if (ret < 0)
			return ret;
	}
	if (qp->nudge_pending) {
		qp->nudge_pending = false;
		RDMAP_STAT_ADD(qp->st->rtr_nudges, 1);
		ret = tx_zero_write(qp);
		if (ret < 0)
			return ret;
	}
	if (qp->tx_hold)
		return 0;
	for (;;) {
		if (qp->ird_head != qp->ird_tail) {
			/* Read Responses go first: the peer's Reads are
			 * older than anything we start now. */
			ret = tx_read_resp(qp);
		} else if (!qp->cur.active && tx_flat_wr(qp)) {
			ret = 1;
		} else if (qp->cur.active || tx_start(qp)) {
			ret = tx_segment(qp);
		} else {
			ret = 0;
		}
		if (ret <= 0 || qp_state(qp) != RDMAP_QP_RTS)
			return ret;
	}
}

/* Would the work at hand overflow the small batch? A message that takes
 * more FPDUs than it holds, a queue of several WRs, a long Read
 * Response: then the large batch is taken before building, so that a
 * message goes out in one gathered send from its first batch on. */
static bool tx_wants_big(const struct rdmap_qp *qp)
{
	uint64_t small = (uint64_t)(TX_SMALL_FPDUS - 1) *
			 (qp->s.mulpdu - DDP_TAGGED_HDR_LEN);
	uint32_t tail = atomic_load_explicit(&qp->sq.tail,
					     memory_order_acquire);
	const struct rdmap_send_wr *wr;

	if (qp->tx_grow || qp->cur.active)
		return true;
	if (qp->ird_head != qp->ird_tail) {
		const struct ird_entry *e = &qp->ird[qp->ird_head & qp->ird_mask];

		if (e->rr.size - e->sent > small ||
		    qp->ird_tail - qp->ird_head >= TX_SMALL_FPDUS)
			return true;
	}
	if (tail == qp->sq_txpos)
		return false;
	if (tail - qp->sq_txpos >= TX_SMALL_FPDUS)
		return true;
	wr = rdmap_ring_slot(&qp->sq, qp->sq_txpos);
	/* A READ sends one small request per sink SGE. */
	return wr->opcode != RDMAP_WR_READ && wr->length > small;
}

/*
 * Is the WR at the head of the SQ all there is to send, on a QP with
 * nothing else to do (no Terminate, RTR, nudge, Read Response, WR under
 * way, hold or wish for the large batch)? Then tx_build() would frame it
 * alone, and tx_lone() frames it without tx_build()'s other steps (issue
 * 13: the lone post of a ping-pong, the most common fill of all).
 */
static bool tx_is_lone(const struct rdmap_qp *qp)
{
	return qp_state(qp) == RDMAP_QP_RTS && !qp->term_pending &&
	       !qp->rtr_pending && !qp->nudge_pending && !qp->tx_hold &&
	       !qp->tx_grow && !qp->cur.active &&
	       qp->ird_head == qp->ird_tail &&
	       atomic_load_explicit(&qp->sq.tail, memory_order_acquire) -
	       qp->sq_txpos == 1;
}

/* That lone WR as one flat FPDU in a new batch, if tx_flat_wr() takes
 * it; else nothing is changed but the (empty) batch, and the general
 * path builds it. Returns the iovec count, 0 if not taken. */
static int tx_lone(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	if (cap < 1 || !tx_is_lone(qp))
		return 0;
	batch_reset(qp);
	if (!tx_flat_wr(qp))
		return 0;
	iov[0] = qp->iov[0];
	return 1;
}

int rdmap_qp_tx_fill(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	int ret;

	if (qp->b_sent < qp->b_total)
		return tx_view(qp, iov, cap);
	ret = tx_lone(qp, iov, cap);
	if (ret)
		return ret;
	/* Nothing to send, as after nearly every send of a ping-pong (the
	 * sender asks once more): no batch to set up. */
	if (!rdmap_qp_tx_pending(qp))
		return 0;
	if (!qp->fp_big && qp_state(qp) == RDMAP_QP_RTS &&
	    tx_wants_big(qp))
		batch_grow(qp);
	ret = tx_build(qp);
	/* Not even one FPDU fitted the small batch (many SGEs, markers):
	 * build again in the large one, or fail. */
	if (ret >= 0 && qp->b_total == 0 && qp->tx_grow)
		ret = batch_grow(qp) ? tx_build(qp) : -ENOMEM;
	if (ret < 0)
		qp_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC),
		      NULL, 0, 0);
	if (qp->b_total == 0 && qp->term_pending)
		tx_terminate(qp);
	return qp->b_total ? tx_view(qp, iov, cap) : 0;
}

int rdmap_qp_tx_done(struct rdmap_qp *qp, size_t n)
{
	int close = 0;

	qp->b_sent += n;
	while (n && qp->iov_cur < qp->niov) {
		size_t left = qp->iov[qp->iov_cur].iov_len - qp->iov_off;

		if (n < left) {
			qp->iov_off += n;
			break;
		}
		n -= left;
		qp->iov_cur++;
		qp->iov_off = 0;
	}
	while (qp->fp_done < qp->nfp && qp->fp[qp->fp_done].end <= qp->b_sent) {
		struct tx_fpdu *f = &qp->fp[qp->fp_done++];

		qp_put_refs(f->put, f->nput);
		f->nput = 0;
		if (f->wr_idx >= 0 && qp_state(qp) != RDMAP_QP_ERROR)
			wr_sent(qp, (uint32_t)f->wr_idx);
		if (f->close)
			close = 1;
	}
	if (qp_state(qp) != RDMAP_QP_ERROR) {
		qp_sq_advance(qp);
		return close;
	}
	/* Flushed WRs held back because of these octets may go now. */
	if (qp->cfg.post_lock)
		wisp_lock_take(qp->cfg.post_lock);
	qp_sq_release(qp);
	if (qp->cfg.post_lock)
		wisp_lock_give(qp->cfg.post_lock);
	return close;
}

int rdmap_startup_terminate(enum mpa_error err, bool crc, uint8_t *buf,
			    size_t cap)
{
	struct rdmap_fault f = rdmap_fault_llp(err, mpa_error_term(err));
	struct rdmap_hdr h = {
		.ddp = { .last = true, .u = { .msn = 1 } },
		.opcode = RDMAP_OP_TERMINATE,
	};
	uint8_t ulpdu[DDP_UNTAGGED_HDR_LEN + RDMAP_TERM_MAX_LEN];
	struct rdmap_terminate t;
	struct mpa_tx tx;
	int hlen, blen;

	rdmap_term_from_fault(&t, &f, NULL, 0, 0);
	hlen = rdmap_hdr_build(&h, ulpdu, sizeof(ulpdu));
	if (hlen < 0)
		return hlen;
	blen = rdmap_term_build(&t, ulpdu + hlen, sizeof(ulpdu) - (size_t)hlen);
	if (blen < 0)
		return blen;
	mpa_tx_init(&tx, crc, false);
	return mpa_fpdu_encode(&tx, ulpdu, (size_t)(hlen + blen), buf, cap);
}
