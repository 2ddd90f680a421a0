// SPDX-License-Identifier: MIT
/*
 * rdmap_qp.c - the RDMAP queue pair over one MPA stream (RFC 5040
 * sections 5 and 6, RFC 5041 section 5), without I/O: its rings, life
 * cycle, completions, flushing and the entry into ERROR.
 *
 * The transmit side is rdmap_qp_tx.c, the receive side rdmap_qp_rx.c;
 * rdmap_qp_internal.h holds what they share.
 */
#include "rdmap_qp_internal.h"

#include "wisp_mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------ */
/* Rings                                                              */
/* ------------------------------------------------------------------ */

int rdmap_ring_init(struct rdmap_ring *r, uint32_t min_entries,
		    uint32_t slot_size)
{
	uint32_t size = 1;

	while (size < min_entries)
		size <<= 1;
	r->slots = wisp_mem_calloc(size, slot_size);
	if (!r->slots)
		return -ENOMEM;
	r->size = size;
	r->slot_size = slot_size;
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	return 0;
}

void rdmap_ring_fini(struct rdmap_ring *r)
{
	wisp_mem_free_array(r->slots, r->size, r->slot_size);
	r->slots = NULL;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                         */
/* ------------------------------------------------------------------ */

/* What rdmap_qp_create allocates beside the core (each may be NULL). */
static void qp_free_parts(struct rdmap_qp *qp)
{
	wisp_mem_free(qp->tx_small, sizeof(*qp->tx_small));
	wisp_mem_free(qp->stage_small, STAGE_SMALL);
	if (!qp->cfg.stats)
		wisp_mem_free(qp->st, sizeof(*qp->st));
}

/* The small batch, and the small stage, in use: at creation, and when
 * the large one goes back (between batches, between reads). */
static void use_small_batch(struct rdmap_qp *qp)
{
	qp->fp = qp->tx_small->fp;
	qp->fp_cap = TX_SMALL_FPDUS;
	qp->iov = qp->tx_small->iov;
	qp->iov_cap = TX_SMALL_IOV;
}

static void use_small_stage(struct rdmap_qp *qp)
{
	qp->stage = qp->stage_small;
	qp->stage_cap = STAGE_SMALL;
}

struct rdmap_qp *rdmap_qp_create(const struct rdmap_qp_cfg *cfg)
{
	struct rdmap_qp *qp;

	if (!cfg || !cfg->ops || !cfg->ops->complete || !cfg->stags ||
	    (cfg->use_srq && !cfg->ops->srq_pop)) {
		errno = EINVAL;
		return NULL;
	}
	/*
	 * From wisp_mem (wisp_mem.h): the core, and apart from it the small
	 * batch and stage and the QP's own counters. A page costs at its
	 * first touch, from user space and again from the kernel (a send
	 * or a receive), and a connection's setup touches only part of
	 * this: one FPDU each way (the RTR and, for a READ RTR, its
	 * answer) writes the first record of the batch and the head of
	 * the stage, and the counters are the statistics file's unless it
	 * is off. As separate objects, packed with those of other QPs, the
	 * parts a QP does not use stay untouched.
	 */
	qp = wisp_mem_zalloc(sizeof(*qp));
	if (!qp)
		goto err;
	qp->cfg = *cfg;
	qp->tx_small = wisp_mem_zalloc(sizeof(*qp->tx_small));
	qp->stage_small = wisp_mem_zalloc(STAGE_SMALL);
	qp->st = cfg->stats ? cfg->stats : wisp_mem_zalloc(sizeof(*qp->st));
	if (!qp->tx_small || !qp->stage_small || !qp->st)
		goto err_parts;
	atomic_init(&qp->state, RDMAP_QP_IDLE);
	atomic_init(&qp->access, cfg->access);
	if (rdmap_ring_init(&qp->sq, cfg->sq_size ? cfg->sq_size : 1,
			    sizeof(struct rdmap_send_wr)))
		goto err_parts;
	if (rdmap_ring_init(&qp->rq, cfg->rq_size ? cfg->rq_size : 1,
			    sizeof(struct rdmap_recv_wr)))
		goto err_sq;
	qp->meta = wisp_mem_calloc(qp->sq.size, sizeof(*qp->meta));
	if (!qp->meta)
		goto err_bufs;
	use_small_batch(qp);
	use_small_stage(qp);
	qp->b_max = TX_BATCH_BYTES;
	return qp;

err_bufs:
	rdmap_ring_fini(&qp->rq);
err_sq:
	rdmap_ring_fini(&qp->sq);
err_parts:
	qp_free_parts(qp);
	wisp_mem_free(qp, sizeof(*qp));
err:
	errno = ENOMEM;
	return NULL;
}

void *qp_big_alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void qp_big_free(void *p, size_t len)
{
	munmap(p, len);
}

bool rdmap_qp_trim(struct rdmap_qp *qp)
{
	/* The stage is empty between reads (rx_done parses all it got);
	 * the batch can go once every octet of it is sent, which also
	 * dropped its MR references (rdmap_qp_tx_done). */
	if (qp->stage != qp->stage_small && qp->st_head == qp->st_tail &&
	    !qp->rx_direct) {
		qp_big_free(qp->stage, STAGE_SIZE);
		use_small_stage(qp);
		qp->st_head = qp->st_tail = 0;
		qp->rx_grow = false;
	}
	if (qp->fp_big && qp->b_sent >= qp->b_total &&
	    qp->fp_done == qp->nfp) {
		qp_big_free(qp->fp_big, TX_BIG_BYTES + qp->tx_buf_cap);
		qp->fp_big = NULL;
		qp->tx_buf = NULL;
		qp->tx_buf_cap = qp->tx_buf_used = 0;
		use_small_batch(qp);
		qp->nfp = qp->fp_done = 0;
		qp->niov = qp->iov_cur = 0;
		qp->iov_off = qp->b_total = qp->b_sent = 0;
		qp->tx_grow = false;
	}
	return qp->stage != qp->stage_small || qp->fp_big;
}

void qp_put_refs(struct rdmap_mr **mr, int n)
{
	for (int i = 0; i < n; i++) {
		rdmap_mr_put(mr[i]);
		mr[i] = NULL;
	}
}

/* Drop every MR reference the engine side holds. */
static void release_all(struct rdmap_qp *qp)
{
	for (int i = qp->fp_done; i < qp->nfp; i++) {
		qp_put_refs(qp->fp[i].put, qp->fp[i].nput);
		qp->fp[i].nput = 0;
	}
	qp->nfp = qp->fp_done = 0;
	qp->niov = qp->iov_cur = 0;
	qp->b_total = qp->b_sent = qp->iov_off = 0;
	if (qp->cur.active)
		qp_put_refs(qp->cur.mr, qp->cur.nsrc);
	qp->cur.active = false;
	while (qp->ird && qp->ird_head != qp->ird_tail) {
		rdmap_mr_put(qp->ird[qp->ird_head & qp->ird_mask].src);
		qp->ird_head++;
	}
	if (qp->have_recv)
		qp_put_refs(qp->rmr, qp->nrsge);
	if (!qp->tmr_kept)
		rdmap_mr_put(qp->tmr);
	rdmap_mr_put(qp->mr_keep);
	qp->tmr = qp->mr_keep = NULL;
	qp->tmr_kept = false;
}

void rdmap_qp_destroy(struct rdmap_qp *qp)
{
	if (!qp)
		return;
	release_all(qp);
	wisp_mem_free_array(qp->ird, (size_t)qp->ird_mask + 1, sizeof(*qp->ird));
	wisp_mem_free_array(qp->ord, (size_t)qp->ord_mask + 1, sizeof(*qp->ord));
	if (qp->stage != qp->stage_small)
		qp_big_free(qp->stage, STAGE_SIZE);
	if (qp->fp_big)
		qp_big_free(qp->fp_big, TX_BIG_BYTES + qp->tx_buf_cap);
	wisp_mem_free_array(qp->meta, qp->sq.size, sizeof(*qp->meta));
	rdmap_ring_fini(&qp->rq);
	rdmap_ring_fini(&qp->sq);
	qp_free_parts(qp);
	wisp_mem_free(qp, sizeof(*qp));
}

struct rdmap_ring *rdmap_qp_sq(struct rdmap_qp *qp)
{
	return &qp->sq;
}

bool rdmap_qp_reads_out(const struct rdmap_qp *qp)
{
	return atomic_load_explicit(&qp->ord_out, memory_order_relaxed) != 0;
}

struct rdmap_ring *rdmap_qp_rq(struct rdmap_qp *qp)
{
	return &qp->rq;
}

enum rdmap_qp_state rdmap_qp_state(const struct rdmap_qp *qp)
{
	return qp_state(qp);
}

void rdmap_qp_set_access(struct rdmap_qp *qp, uint32_t access)
{
	atomic_store_explicit(&qp->access, access, memory_order_relaxed);
}

/* The mask of a ring of the least power of two of slots >= size (a
 * size up to 2^31: IRD and ORD are at most 65535 on the wire). */
static uint32_t ring_mask(uint32_t size)
{
	uint32_t slots = 1;

	while (slots < size)
		slots <<= 1;
	return slots - 1;
}

int rdmap_qp_start(struct rdmap_qp *qp, const struct rdmap_stream_cfg *s)
{
	uint32_t ulpdu_max;

	if (!qp || !s || qp_state(qp) != RDMAP_QP_IDLE ||
	    s->mulpdu < MPA_MULPDU_MIN || s->mulpdu > MPA_ULPDU_SEND_MAX)
		return -EINVAL;
	qp->s = *s;
	qp->b_max = s->emss && s->emss < TX_BATCH_BYTES / TX_BATCH_SEGS ?
		    s->emss * TX_BATCH_SEGS : TX_BATCH_BYTES;
	/* IRD/ORD 0 means the exchange did not negotiate them (MPA rev 1,
	 * or rev 2 without the enhanced words): allow one Read in flight
	 * each way rather than none, as RDMAP has no way to refuse. */
	qp->ird_size = s->ird ? s->ird : 1;
	qp->ord_size = s->ord ? s->ord : 1;
	qp->ord_limit = qp->ord_size;
	qp->ird_mask = ring_mask(qp->ird_size);
	qp->ord_mask = ring_mask(qp->ord_size);
	qp->ird = wisp_mem_calloc((size_t)qp->ird_mask + 1, sizeof(*qp->ird));
	qp->ord = wisp_mem_calloc((size_t)qp->ord_mask + 1, sizeof(*qp->ord));
	if (!qp->ird || !qp->ord)
		return -ENOMEM;
	mpa_tx_init(&qp->mtx, s->crc, false);
	/* Accept ULPDUs as long as MPA can describe: the peer's MULPDU is
	 * its own business (RFC 5044 section 6.1). */
	ulpdu_max = MPA_ULPDU_MAX;
	mpa_rx_init(&qp->mrx, s->crc, false, (uint16_t)ulpdu_max);
	/* RFC 5040 section 6.1: MSNs start at 1. */
	for (int i = 0; i < RDMAP_QN__COUNT; i++)
		qp->tx_msn[i] = qp->rx_msn[i] = 1;
	qp->rtr_pending = s->rtr == RDMAP_RTR_SEND_WRITE ||
			  s->rtr == RDMAP_RTR_SEND_READ;
	/*
	 * RFC 5044 section 7.1.2, rule 4: "MPA Responder mode
	 * implementations MUST receive and validate at least one FPDU
	 * before sending any FPDUs or markers." That holds in the
	 * client-server model too, not only when an RFC 6581 RTR is
	 * expected: a responder's first send (a Send the server posted
	 * right after ESTABLISHED) waits in the SQ until the initiator's
	 * first FPDU has arrived. Linux siw as initiator fails the connect
	 * when data follows its Reply's arrival too closely.
	 */
	qp->tx_hold = s->responder || s->rtr == RDMAP_RTR_EXPECT;
	atomic_store(&qp->state, RDMAP_QP_RTS);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Completions                                                        */
/* ------------------------------------------------------------------ */

static enum rdmap_wc_opcode wc_opcode(uint8_t op)
{
	switch (op) {
	case RDMAP_WR_WRITE:
		return RDMAP_WC_RDMA_WRITE;
	case RDMAP_WR_READ:
		return RDMAP_WC_RDMA_READ;
	default:
		return RDMAP_WC_SEND;
	}
}

/* Complete finished WRs from the head of the SQ, in order. */
void qp_sq_advance(struct rdmap_qp *qp)
{
	uint32_t head = atomic_load_explicit(&qp->sq.head,
					     memory_order_relaxed);

	while (head != qp->sq_txpos) {
		struct sq_meta *m = &qp->meta[head & (qp->sq.size - 1)];
		const struct rdmap_send_wr *wr =
			rdmap_ring_slot(&qp->sq, head);

		if (!m->done ||
		    (qp->sq_hold && (int32_t)(qp->sq_hold_idx - head) <= 0))
			break;
		bool report = (wr->flags & RDMAP_WR_SIGNALED) ||
			      m->status != RDMAP_WC_SUCCESS;
		struct rdmap_cqe c = {
			.wr_id = wr->wr_id,
			.status = m->status,
			.opcode = wc_opcode(wr->opcode),
			.byte_len = (uint32_t)wr->length,
			.vendor_err = m->vendor_err,
		};

		/* Free the slot before the completion is visible: a program
		 * that posts as soon as it polls a completion (perftest -D
		 * with tx_depth = max_send_wr) must find room for it. */
		head++;
		atomic_store_explicit(&qp->sq.head, head,
				      memory_order_release);
		if (c.status == RDMAP_WC_WR_FLUSH_ERR)
			qp_stat_flushed(qp, 1);
		if (report)
			qp->cfg.ops->complete(qp->cfg.ops_arg, &c);
	}
}

void qp_complete_recv(struct rdmap_qp *qp, enum rdmap_wc_status st,
			  uint32_t len, bool solicited, bool inv,
			  uint32_t inv_stag)
{
	struct rdmap_cqe c = {
		.wr_id = qp->recv.wr_id,
		.status = (uint8_t)st,
		.opcode = RDMAP_WC_RECV,
		.recv = true,
		.solicited = solicited,
		.with_inv = inv,
		.byte_len = len,
		.inv_stag = inv_stag,
	};

	qp_put_refs(qp->rmr, qp->nrsge);
	qp->have_recv = false;
	if (st == RDMAP_WC_WR_FLUSH_ERR)
		qp_stat_flushed(qp, 1);
	qp->cfg.ops->complete(qp->cfg.ops_arg, &c);
}

bool qp_take_recv(struct rdmap_qp *qp, enum rdmap_wc_status *st)
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

/*
 * The oldest WR with octets in the unsent part of the batch: the kernel
 * may still read its memory (an io_uring sendmsg waiting for window, a
 * partial send to be finished), so neither it nor any later WR may
 * complete, in ERROR as in RTS, until tx_done() reports those octets
 * sent or the stream has ended (rdmap_qp_stream_ended()). In RTS the
 * done flags already say so; in ERROR, flushing sets them, so the hold
 * says it. Computed under the QP's lock, written under post_lock too
 * (flush_idle reads it on a posting thread).
 */
static void sq_hold_update(struct rdmap_qp *qp)
{
	qp->sq_hold = false;
	for (int i = qp->fp_done; i < qp->nfp; i++) {
		if (qp->fp[i].wr_of >= 0) {
			qp->sq_hold = true;
			qp->sq_hold_idx = (uint32_t)qp->fp[i].wr_of;
			return;
		}
	}
}

void qp_sq_release(struct rdmap_qp *qp)
{
	sq_hold_update(qp);
	qp_sq_advance(qp);
}

/* Every posted receive of our own RQ completes with FLUSH_ERR. */
static void flush_rq(struct rdmap_qp *qp)
{
	uint32_t head = atomic_load(&qp->rq.head);
	uint32_t tail = atomic_load_explicit(&qp->rq.tail,
					     memory_order_acquire);

	for (; head != tail; head++) {
		const struct rdmap_recv_wr *r = rdmap_ring_slot(&qp->rq, head);
		struct rdmap_cqe c = {
			.wr_id = r->wr_id,
			.status = RDMAP_WC_WR_FLUSH_ERR,
			.opcode = RDMAP_WC_RECV,
			.recv = true,
		};

		qp_stat_flushed(qp, 1);
		qp->cfg.ops->complete(qp->cfg.ops_arg, &c);
		atomic_store_explicit(&qp->rq.head, head + 1,
				      memory_order_release);
	}
}

/* Every SQ WR not yet completed: the oldest unfinished one gets
 * first_status, the rest FLUSH_ERR. */
static void flush_sq(struct rdmap_qp *qp, enum rdmap_wc_status first_status,
		     uint32_t vendor_err)
{
	uint32_t head = atomic_load(&qp->sq.head);
	uint32_t tail = atomic_load_explicit(&qp->sq.tail,
					     memory_order_acquire);
	uint32_t started = qp->sq_txpos - head;
	bool first = true;

	for (uint32_t i = head; i != tail; i++) {
		struct sq_meta *m = &qp->meta[i & (qp->sq.size - 1)];

		/* Finished WRs keep their status: the success of one
		 * waiting behind an unfinished one, the error of one that
		 * failed locally, and every status a flush already gave to
		 * a WR the batch still holds (sq_hold), which a later flush
		 * (flush_idle) must not rewrite. WRs never started have no
		 * meta yet. */
		if (i - head < started && m->done)
			continue;
		m->done = true;
		m->status = first ? (uint8_t)first_status :
				    RDMAP_WC_WR_FLUSH_ERR;
		m->vendor_err = first ? vendor_err : 0;
		first = false;
	}
	qp->sq_txpos = tail;
	qp_sq_advance(qp);
}

void rdmap_qp_flush_idle(struct rdmap_qp *qp)
{
	if (qp_state(qp) != RDMAP_QP_ERROR)
		return;
	flush_sq(qp, RDMAP_WC_WR_FLUSH_ERR, 0);
	flush_rq(qp);
}

/*
 * RFC 5040 section 5.6 (Error Management): after a Terminate, "the
 * RDMAP Stream is closed" and outstanding work completes in error; the
 * verbs form of that is the ERROR state with every WR flushed.
 */
void qp_enter_error(struct rdmap_qp *qp, int term,
			enum rdmap_wc_status first_status)
{
	int prev;

	/* Under the post lock, so that a WR posted meanwhile is either
	 * flushed here or sees ERROR and is flushed by its poster. */
	if (qp->cfg.post_lock)
		wisp_lock_take(qp->cfg.post_lock);
	prev = atomic_exchange(&qp->state, RDMAP_QP_ERROR);
	if (prev == RDMAP_QP_ERROR)
		goto out;
	if (qp->cur.active) {
		struct tx_fpdu *f = qp->nfp > qp->fp_done ?
				    &qp->fp[qp->nfp - 1] : NULL;

		/* Segments of it wait in the batch: their FPDU keeps the
		 * references until it is sent (a message's earlier FPDUs
		 * carry none, so there is room). */
		if (f && f->wr_of == (int64_t)qp->cur.idx && !f->nput) {
			memcpy(f->put, qp->cur.mr,
			       (size_t)qp->cur.nsrc * sizeof(f->put[0]));
			f->nput = (uint8_t)qp->cur.nsrc;
			memset(qp->cur.mr, 0, sizeof(qp->cur.mr));
		} else {
			qp_put_refs(qp->cur.mr, qp->cur.nsrc);
		}
		qp->cur.active = false;
	}
	/* Here, with the QP's lock held, not in flush_sq: flush_idle runs on
	 * a posting thread, which must not read the batch. */
	sq_hold_update(qp);
	flush_sq(qp, first_status,
		 term == RDMAP_TERM_NONE ? 0 : (uint32_t)term);
	if (qp->have_recv)
		qp_complete_recv(qp, RDMAP_WC_WR_FLUSH_ERR, 0, false, false, 0);
	flush_rq(qp);
out:
	if (qp->cfg.post_lock)
		wisp_lock_give(qp->cfg.post_lock);
	if (prev != RDMAP_QP_ERROR && qp->cfg.ops->fatal)
		qp->cfg.ops->fatal(qp->cfg.ops_arg, term);
}

/* A fault found here: queue a Terminate describing it (RFC 5040 5.6:
 * "the RDMAP layer MUST ... send a Terminate") and enter ERROR. */
void qp_fault(struct rdmap_qp *qp, struct rdmap_fault f,
		  const uint8_t *seg, size_t seg_avail, uint16_t seg_len)
{
	if (qp->term_pending || qp->term_sent ||
	    qp_state(qp) == RDMAP_QP_ERROR) {
		qp_enter_error(qp, f.term, RDMAP_WC_WR_FLUSH_ERR);
		return;
	}
	rdmap_term_from_fault(&qp->term, &f, seg, seg_avail, seg_len);
	qp->term_pending = true;
	RDMAP_STAT_ADD(qp->st->faults, 1);
	qp_enter_error(qp, f.term, f.layer == RDMAP_LAYER_LLP ?
		    RDMAP_WC_FATAL_ERR : RDMAP_WC_LOC_QP_OP_ERR);
}

void qp_peer_terminated(struct rdmap_qp *qp, int term)
{
	/* The peer's Terminate explains the oldest unfinished WR: a remote
	 * protection error there is IBV_WC_REM_ACCESS_ERR (RFC 5040 7.1). */
	qp->term_sent = true;     /* never answer a Terminate with one */
	if (term == RDMAP_TERM_NONE ||
	    rdmap_term_layer((uint16_t)term) == RDMAP_LAYER_LLP ||
	    rdmap_term_etype((uint16_t)term) == 0)
		qp_enter_error(qp, term, RDMAP_WC_FATAL_ERR);
	else if (rdmap_term_etype((uint16_t)term) == 1) /* remote protection */
		qp_enter_error(qp, term, RDMAP_WC_REM_ACCESS_ERR);
	else                                    /* remote operation */
		qp_enter_error(qp, term, RDMAP_WC_REM_OP_ERR);
}

void rdmap_qp_stream_ended(struct rdmap_qp *qp, int reason)
{
	(void)reason;
	qp_enter_error(qp, RDMAP_TERM_NONE, RDMAP_WC_WR_FLUSH_ERR);
	/* Nothing can read the batch any more: let its WRs complete. */
	release_all(qp);
	if (qp->cfg.post_lock)
		wisp_lock_take(qp->cfg.post_lock);
	qp_sq_release(qp);
	if (qp->cfg.post_lock)
		wisp_lock_give(qp->cfg.post_lock);
}

void rdmap_qp_shutdown(struct rdmap_qp *qp)
{
	qp_enter_error(qp, RDMAP_TERM_NONE, RDMAP_WC_WR_FLUSH_ERR);
}

static bool holds(struct rdmap_mr *const *refs, int n,
		  const struct rdmap_mr *mr)
{
	for (int i = 0; i < n; i++)
		if (refs[i] == mr)
			return true;
	return false;
}

/* Does the transmit side hold a reference on mr: the WR being cut into
 * segments, an FPDU not yet sent, a Read Request not yet answered? */
static bool tx_holds(const struct rdmap_qp *qp, const struct rdmap_mr *mr)
{
	if (qp->cur.active && holds(qp->cur.mr, qp->cur.nsrc, mr))
		return true;
	for (int i = qp->fp_done; i < qp->nfp; i++)
		if (holds(qp->fp[i].put, qp->fp[i].nput, mr))
			return true;
	for (uint32_t i = qp->ird_head; qp->ird && i != qp->ird_tail; i++)
		if (qp->ird[i & qp->ird_mask].src == mr)
			return true;
	return false;
}

/*
 * Each fault here fails the QP (qp_fault: ERROR), after which the receive
 * side drops every octet (rdmap_qp_rx_want / rx_done look at the state
 * first); rx_state is left as it is: it belongs to the receiving thread,
 * which reads it without the lock (rdmap_qp_rx_want_staged).
 */
int rdmap_qp_revoke(struct rdmap_qp *qp, const struct rdmap_mr *mr)
{
	int ret = 0;

	/* An octet handed to the kernel cannot be called back: only the
	 * end of the stream stops a send that reads mr. */
	if (tx_holds(qp, mr))
		ret |= RDMAP_REVOKE_ABORT;
	if (qp->tmr == mr) {
		/* A tagged placement in flight (the peer stopped in the
		 * middle of the FPDU): the rest of the FPDU is discarded,
		 * and the peer learns that its STag names nothing any more,
		 * as it would had the FPDU arrived after deregistration
		 * (RFC 5041 7.2: tagged buffer error, Invalid STag). */
		rdmap_mr_put(qp->tmr);
		qp->tmr = NULL;
		qp->tptr = NULL;
		qp_fault(qp, rdmap_fault_ddp(DDP_ERR_T_INVALID_STAG), qp->hdr,
			 qp->hdr_have, (uint16_t)qp->ulpdu_len);
		ret |= RDMAP_REVOKE_SEND;
	}
	if (qp->have_recv && holds(qp->rmr, qp->nrsge, mr)) {
		/* The posted receive being filled lost its memory: a local
		 * protection error for it, a local error for the stream. */
		qp_complete_recv(qp, RDMAP_WC_LOC_PROT_ERR, 0, false, false,
				 0);
		qp_fault(qp, rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC),
			 NULL, 0, 0);
		ret |= RDMAP_REVOKE_SEND;
	}
	return ret;
}

/* Payload iovecs for [off, off + len) of a scatter list. */
int qp_slice(const struct iovec *src, int nsrc, uint64_t off,
		 uint64_t len, struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < nsrc && len; i++) {
		uint64_t take;

		if (off >= src[i].iov_len) {
			off -= src[i].iov_len;
			continue;
		}
		take = src[i].iov_len - off;
		if (take > len)
			take = len;
		if (take) {
			out[n].iov_base = (uint8_t *)src[i].iov_base + off;
			out[n].iov_len = (size_t)take;
			n++;
		}
		len -= take;
		off = 0;
	}
	return n;
}
