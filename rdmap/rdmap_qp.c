// SPDX-License-Identifier: MIT
/*
 * rdmap_qp.c - the RDMAP queue pair over one MPA stream (RFC 5040
 * sections 5 and 6, RFC 5041 section 5), without I/O.
 *
 * Transmit: work requests become DDP segments no larger than MULPDU, each
 * framed by mpa_fpdu_frame() into an iovec list that points at the
 * caller's buffers. Up to TX_BATCH FPDUs go to the kernel in one gathered
 * send; a WR completes once its last octet has been handed over (Reads:
 * once the last Read Response arrived), in SQ order (RFC 5040 5.5).
 *
 * Receive: octets land in a small staging buffer until an FPDU's DDP and
 * RDMAP headers are known and checked; the rest of the payload is then
 * received straight into the target (registered memory or the posted
 * receive buffer) and the MPA decoder runs its CRC over what was placed.
 */
#include "rdmap_qp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TX_BATCH        64        /* FPDUs per gathered send */
#define TX_BATCH_BYTES  (1u << 20)
#define TX_IOV_MAX      1024
#define HDR_MAX         (DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN)
#define STAGE_SIZE      (64 * 1024)
#define SMALL_READ      64        /* staging read after a large FPDU */
#define DIRECT_MIN      1024      /* payload worth a recv of its own */
#define RTR_STAG        0x100     /* any non-zero STag: never checked */

/* ------------------------------------------------------------------ */
/* Rings                                                              */
/* ------------------------------------------------------------------ */

int rdmap_ring_init(struct rdmap_ring *r, uint32_t min_entries,
		    uint32_t slot_size)
{
	uint32_t size = 1;

	while (size < min_entries)
		size <<= 1;
	r->slots = calloc(size, slot_size);
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
	free(r->slots);
	r->slots = NULL;
}

/* ------------------------------------------------------------------ */
/* State                                                              */
/* ------------------------------------------------------------------ */

/* Engine-side state of each SQ slot. */
struct sq_meta {
	bool done;                /* may complete (success or error) */
	uint8_t status;           /* enum rdmap_wc_status */
	uint16_t reads_out;       /* Read Requests sent, not yet answered */
	uint32_t vendor_err;
};

/* One FPDU of the transmit batch. */
struct tx_fpdu {
	uint8_t hdr[HDR_MAX];
	struct mpa_fpdu_scratch scr;
	size_t end;               /* batch offset just past this FPDU */
	int64_t wr_idx;           /* SQ index whose last FPDU this is, or -1 */
	struct rdmap_mr *put;     /* reference to drop once sent */
	bool close;               /* a Terminate: close the stream after it */
	uint8_t body[RDMAP_TERM_MAX_LEN]; /* a Terminate's message body */
};

/* The work request being segmented. */
struct tx_cur {
	bool active;
	uint32_t idx;
	const struct rdmap_send_wr *wr;
	struct iovec src[RDMAP_MAX_SGE];  /* host addresses of the SGEs */
	struct rdmap_mr *mr[RDMAP_MAX_SGE];
	int nsrc;
	struct ddp_seg_iter it;
	uint8_t next_read;        /* READ: next SGE to request */
	uint64_t read_off;        /* READ: remote offset of that SGE */
};

/* A Read Request accepted from the peer (IRD queue). */
struct ird_entry {
	struct rdmap_read_req rr;
	struct rdmap_mr *src;     /* NULL for a zero-length Read */
	uint64_t sent;            /* octets of the response framed */
};

/* A Read Request we sent (ORD queue). */
struct ord_entry {
	int64_t wr_idx;           /* -1: the RTR */
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;
	uint64_t got;
};

enum rx_target {
	RX_T_NONE,
	RX_T_TAGGED,
	RX_T_UNTAGGED,
	RX_T_TERM,
	RX_T_READ_REQ,            /* no payload */
	RX_T_DISCARD,
};

struct rdmap_qp {
	struct rdmap_qp_cfg cfg;
	struct rdmap_stream_cfg s;
	_Atomic int state;        /* enum rdmap_qp_state */

	struct rdmap_ring sq, rq;
	struct sq_meta *meta;
	uint32_t sq_txpos;        /* next SQ index to start */

	/* ---- transmit ---- */
	struct mpa_tx mtx;
	uint32_t tx_msn[RDMAP_QN__COUNT];
	struct tx_cur cur;
	struct ird_entry *ird;    /* ring of ird_size */
	uint32_t ird_size, ird_head, ird_tail;
	struct ord_entry *ord;
	uint32_t ord_size, ord_head, ord_tail;
	uint32_t ord_limit;
	bool rtr_pending;         /* initiator: RTR still to send */
	bool tx_hold;             /* responder: RTR not yet received */
	bool nudge_pending;       /* a zero-length Write is to go out */
	uint8_t nudges;           /* sent so far */
	int64_t nudge_at;         /* 0: not yet timed */
	bool term_pending;        /* a Terminate is to go out */
	bool term_sent;
	struct rdmap_terminate term;

	struct tx_fpdu *fp;
	int nfp, fp_done;
	struct iovec iov[TX_IOV_MAX];
	int niov, iov_cur;
	size_t iov_off;           /* octets of iov[iov_cur] already sent */
	size_t b_total, b_sent;

	/* ---- receive ---- */
	struct mpa_rx mrx;
	uint8_t *stage;
	size_t st_head, st_tail;
	bool last_big;            /* the previous ULPDU was large */
	bool rx_direct;           /* the last rx_want was a direct placement */
	struct iovec dir[RDMAP_MAX_SGE];
	int ndir;
	uint8_t discard[4096];
	uint32_t rx_msn[RDMAP_QN__COUNT];
	bool rx_any;              /* at least one FPDU received */

	/* the current ULPDU */
	uint8_t hdr[HDR_MAX];
	uint32_t hdr_have;
	bool hdr_ok;
	struct rdmap_hdr h;
	uint32_t ulpdu_len;
	enum rx_target target;
	uint8_t *tptr;            /* tagged: host address of payload octet 0 */
	struct rdmap_mr *tmr;

	/* the receive buffer of the Send being placed */
	bool have_recv;
	struct rdmap_recv_wr recv;
	struct iovec rsge[RDMAP_MAX_SGE];
	struct rdmap_mr *rmr[RDMAP_MAX_SGE];
	int nrsge;
	uint64_t recv_bytes;      /* message octets placed so far */

	uint8_t term_buf[RDMAP_TERM_MAX_LEN];
	uint32_t term_have;
};

static void enter_error(struct rdmap_qp *qp, uint16_t term,
			enum rdmap_wc_status first_status);

/* ------------------------------------------------------------------ */
/* Life cycle                                                         */
/* ------------------------------------------------------------------ */

struct rdmap_qp *rdmap_qp_create(const struct rdmap_qp_cfg *cfg)
{
	struct rdmap_qp *qp;

	if (!cfg || !cfg->ops || !cfg->ops->complete || !cfg->stags ||
	    (cfg->use_srq && !cfg->ops->srq_pop)) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		goto err;
	qp->cfg = *cfg;
	atomic_init(&qp->state, RDMAP_QP_IDLE);
	if (rdmap_ring_init(&qp->sq, cfg->sq_size ? cfg->sq_size : 1,
			    sizeof(struct rdmap_send_wr)))
		goto err_free;
	if (rdmap_ring_init(&qp->rq, cfg->rq_size ? cfg->rq_size : 1,
			    sizeof(struct rdmap_recv_wr)))
		goto err_sq;
	qp->meta = calloc(qp->sq.size, sizeof(*qp->meta));
	qp->fp = calloc(TX_BATCH, sizeof(*qp->fp));
	qp->stage = malloc(STAGE_SIZE);
	if (!qp->meta || !qp->fp || !qp->stage)
		goto err_bufs;
	return qp;

err_bufs:
	free(qp->stage);
	free(qp->fp);
	free(qp->meta);
	rdmap_ring_fini(&qp->rq);
err_sq:
	rdmap_ring_fini(&qp->sq);
err_free:
	free(qp);
err:
	errno = ENOMEM;
	return NULL;
}

static void put_refs(struct rdmap_mr **mr, int n)
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
		rdmap_mr_put(qp->fp[i].put);
		qp->fp[i].put = NULL;
	}
	qp->nfp = qp->fp_done = 0;
	qp->niov = qp->iov_cur = 0;
	qp->b_total = qp->b_sent = qp->iov_off = 0;
	if (qp->cur.active)
		put_refs(qp->cur.mr, qp->cur.nsrc);
	qp->cur.active = false;
	while (qp->ird && qp->ird_head != qp->ird_tail) {
		rdmap_mr_put(qp->ird[qp->ird_head % qp->ird_size].src);
		qp->ird_head++;
	}
	if (qp->have_recv)
		put_refs(qp->rmr, qp->nrsge);
	rdmap_mr_put(qp->tmr);
	qp->tmr = NULL;
}

void rdmap_qp_destroy(struct rdmap_qp *qp)
{
	if (!qp)
		return;
	release_all(qp);
	free(qp->ird);
	free(qp->ord);
	free(qp->stage);
	free(qp->fp);
	free(qp->meta);
	rdmap_ring_fini(&qp->rq);
	rdmap_ring_fini(&qp->sq);
	free(qp);
}

struct rdmap_ring *rdmap_qp_sq(struct rdmap_qp *qp)
{
	return &qp->sq;
}

struct rdmap_ring *rdmap_qp_rq(struct rdmap_qp *qp)
{
	return &qp->rq;
}

enum rdmap_qp_state rdmap_qp_state(const struct rdmap_qp *qp)
{
	return (enum rdmap_qp_state)atomic_load(&qp->state);
}

int rdmap_qp_start(struct rdmap_qp *qp, const struct rdmap_stream_cfg *s)
{
	uint32_t ulpdu_max;

	if (!qp || !s || rdmap_qp_state(qp) != RDMAP_QP_IDLE ||
	    s->mulpdu < MPA_MULPDU_MIN || s->mulpdu > MPA_ULPDU_SEND_MAX)
		return -EINVAL;
	qp->s = *s;
	/* IRD/ORD 0 means the exchange did not negotiate them (MPA rev 1,
	 * or rev 2 without the enhanced words): allow one Read in flight
	 * each way rather than none, as RDMAP has no way to refuse. */
	qp->ird_size = s->ird ? s->ird : 1;
	qp->ord_size = s->ord ? s->ord : 1;
	qp->ord_limit = qp->ord_size;
	qp->ird = calloc(qp->ird_size, sizeof(*qp->ird));
	qp->ord = calloc(qp->ord_size, sizeof(*qp->ord));
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
	qp->tx_hold = s->rtr == RDMAP_RTR_EXPECT;
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
static void sq_advance(struct rdmap_qp *qp)
{
	uint32_t head = atomic_load_explicit(&qp->sq.head,
					     memory_order_relaxed);

	while (head != qp->sq_txpos) {
		struct sq_meta *m = &qp->meta[head & (qp->sq.size - 1)];
		const struct rdmap_send_wr *wr =
			rdmap_ring_slot(&qp->sq, head);

		if (!m->done)
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
		if (report)
			qp->cfg.ops->complete(qp->cfg.ops_arg, &c);
	}
}

static void complete_recv(struct rdmap_qp *qp, enum rdmap_wc_status st,
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

	put_refs(qp->rmr, qp->nrsge);
	qp->have_recv = false;
	qp->cfg.ops->complete(qp->cfg.ops_arg, &c);
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

		/* Finished WRs waiting behind an unfinished one keep their
		 * success; WRs never started have no meta yet. */
		if (i - head < started && m->done &&
		    m->status == RDMAP_WC_SUCCESS)
			continue;
		m->done = true;
		m->status = first ? (uint8_t)first_status :
				    RDMAP_WC_WR_FLUSH_ERR;
		m->vendor_err = first ? vendor_err : 0;
		first = false;
	}
	qp->sq_txpos = tail;
	sq_advance(qp);
}

void rdmap_qp_flush_idle(struct rdmap_qp *qp)
{
	if (rdmap_qp_state(qp) != RDMAP_QP_ERROR)
		return;
	flush_sq(qp, RDMAP_WC_WR_FLUSH_ERR, 0);
	flush_rq(qp);
}

/*
 * RFC 5040 section 5.6 (Error Management): after a Terminate, "the
 * RDMAP Stream is closed" and outstanding work completes in error; the
 * verbs form of that is the ERROR state with every WR flushed.
 */
static void enter_error(struct rdmap_qp *qp, uint16_t term,
			enum rdmap_wc_status first_status)
{
	int prev;

	/* Under the post lock, so that a WR posted meanwhile is either
	 * flushed here or sees ERROR and is flushed by its poster. */
	if (qp->cfg.post_lock)
		pthread_mutex_lock(qp->cfg.post_lock);
	prev = atomic_exchange(&qp->state, RDMAP_QP_ERROR);
	if (prev == RDMAP_QP_ERROR)
		goto out;
	if (qp->cur.active) {
		put_refs(qp->cur.mr, qp->cur.nsrc);
		qp->cur.active = false;
	}
	flush_sq(qp, first_status, term);
	if (qp->have_recv)
		complete_recv(qp, RDMAP_WC_WR_FLUSH_ERR, 0, false, false, 0);
	flush_rq(qp);
out:
	if (qp->cfg.post_lock)
		pthread_mutex_unlock(qp->cfg.post_lock);
	if (prev != RDMAP_QP_ERROR && qp->cfg.ops->fatal)
		qp->cfg.ops->fatal(qp->cfg.ops_arg, term);
}

/* A fault found here: queue a Terminate describing it (RFC 5040 5.6:
 * "the RDMAP layer MUST ... send a Terminate") and enter ERROR. */
static void fault(struct rdmap_qp *qp, struct rdmap_fault f,
		  const uint8_t *seg, size_t seg_avail, uint16_t seg_len)
{
	if (qp->term_pending || qp->term_sent ||
	    rdmap_qp_state(qp) == RDMAP_QP_ERROR) {
		enter_error(qp, f.term, RDMAP_WC_WR_FLUSH_ERR);
		return;
	}
	rdmap_term_from_fault(&qp->term, &f, seg, seg_avail, seg_len);
	qp->term_pending = true;
	enter_error(qp, f.term, f.layer == RDMAP_LAYER_LLP ?
		    RDMAP_WC_FATAL_ERR : RDMAP_WC_LOC_QP_OP_ERR);
}

void rdmap_qp_stream_ended(struct rdmap_qp *qp, int reason)
{
	(void)reason;
	enter_error(qp, 0, RDMAP_WC_WR_FLUSH_ERR);
	release_all(qp);
}

/* ------------------------------------------------------------------ */
/* Transmit                                                           */
/* ------------------------------------------------------------------ */

bool rdmap_qp_tx_pending(const struct rdmap_qp *qp)
{
	if (qp->b_sent < qp->b_total || qp->term_pending)
		return true;
	if (rdmap_qp_state(qp) != RDMAP_QP_RTS)
		return false;
	if (qp->rtr_pending || qp->nudge_pending)
		return true;
	if (qp->tx_hold)
		return false;
	return qp->ird_head != qp->ird_tail || qp->cur.active ||
	       qp->sq_txpos != atomic_load_explicit(&qp->sq.tail,
						     memory_order_acquire);
}

/* Room for one more FPDU with up to npay payload iovecs? */
static bool batch_room(const struct rdmap_qp *qp, int npay)
{
	return qp->nfp < TX_BATCH && qp->b_total < TX_BATCH_BYTES &&
	       qp->niov + npay + 3 + 2 * 2 <= TX_IOV_MAX;
}

/* Frame one ULPDU: header h (with payload pay[0..npay)) into the batch. */
static int batch_add(struct rdmap_qp *qp, const struct rdmap_hdr *h,
		     const struct iovec *pay, int npay, int64_t wr_idx,
		     struct rdmap_mr *put, bool close)
{
	struct tx_fpdu *f = &qp->fp[qp->nfp];
	struct iovec ul[RDMAP_MAX_SGE + 2];
	int hl, n, i;
	size_t bytes = 0;

	hl = rdmap_hdr_build(h, f->hdr, sizeof(f->hdr));
	if (hl < 0)
		return hl;
	ul[0].iov_base = f->hdr;
	ul[0].iov_len = (size_t)hl;
	for (i = 0; i < npay; i++)
		ul[i + 1] = pay[i];
	n = mpa_fpdu_frame(&qp->mtx, ul, npay + 1, &f->scr,
			   qp->iov + qp->niov, TX_IOV_MAX - qp->niov);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++)
		bytes += qp->iov[qp->niov + i].iov_len;
	qp->niov += n;
	qp->b_total += bytes;
	f->end = qp->b_total;
	f->wr_idx = wr_idx;
	f->put = put;
	f->close = close;
	qp->nfp++;
	return 0;
}

/* Payload iovecs for [off, off + len) of a scatter list. */
static int slice(const struct iovec *src, int nsrc, uint64_t off,
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
	ret = batch_add(qp, &h, &pay, 1, -1, NULL, true);
	if (ret)
		return ret;
	qp->term_pending = false;
	qp->term_sent = true;
	return 1;
}

/* A zero-length RDMA Write: the WRITE RTR, and the nudge after an RTR. */
static int tx_zero_write(struct rdmap_qp *qp)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_WRITE };

	h.ddp.last = true;
	h.ddp.tagged = true;
	h.ddp.t.stag = RTR_STAG;
	return batch_add(qp, &h, NULL, 0, -1, NULL, false);
}

/* The RFC 6581 RTR: a zero-length WRITE or READ as the first FPDU. */
static int tx_rtr(struct rdmap_qp *qp)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_REQ };
	struct ord_entry *o;

	qp->rtr_pending = false;
	if (qp->s.rtr == RDMAP_RTR_SEND_WRITE)
		return tx_zero_write(qp);
	o = &qp->ord[qp->ord_tail % qp->ord_size];
	h.ddp.last = true;
	h.ddp.u.msn = qp->tx_msn[RDMAP_QN_READ_REQ]++;
	h.rreq.sink_stag = RTR_STAG;
	h.rreq.src_stag = RTR_STAG;
	*o = (struct ord_entry){ .wr_idx = -1, .sink_stag = RTR_STAG };
	qp->ord_tail++;
	return batch_add(qp, &h, NULL, 0, -1, NULL, false);
}

int64_t rdmap_qp_tick(struct rdmap_qp *qp, int64_t now_ms, bool *send)
{
	bool initiator = qp->s.rtr == RDMAP_RTR_SEND_WRITE ||
			 qp->s.rtr == RDMAP_RTR_SEND_READ;

	*send = false;
	/* nothing to wait for, the answer came, or given up */
	if (!initiator || qp->rx_any || qp->nudges >= RDMAP_NUDGE_MAX ||
	    rdmap_qp_state(qp) != RDMAP_QP_RTS)
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
	struct ird_entry *e = &qp->ird[qp->ird_head % qp->ird_size];
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
	ret = batch_add(qp, &h, &pay, len ? 1 : 0, -1,
			last ? e->src : NULL, false);
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
			put_refs(c->mr, c->nsrc);
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
		sq_advance(qp);
		enter_error(qp, rdmap_error_term(RDMAP_ERR_LOCAL_CATASTROPHIC),
			    RDMAP_WC_WR_FLUSH_ERR);
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
		put_refs(c->mr, c->nsrc);
		c->active = false;
		m->done = true;
		m->status = RDMAP_WC_LOC_LEN_ERR;
		sq_advance(qp);
		enter_error(qp, rdmap_error_term(RDMAP_ERR_LOCAL_CATASTROPHIC),
			    RDMAP_WC_WR_FLUSH_ERR);
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
		ret = batch_add(qp, &h, NULL, 0, -1, NULL, false);
		if (ret)
			return ret;
		o = &qp->ord[qp->ord_tail % qp->ord_size];
		*o = (struct ord_entry){
			.wr_idx = c->idx, .sink_stag = s->lkey,
			.sink_to = s->addr, .size = s->length,
		};
		qp->ord_tail++;
		qp->meta[c->idx & (qp->sq.size - 1)].reads_out++;
		c->read_off += s->length;
		c->next_read++;
		if (last || wr->num_sge == 0) {
			put_refs(c->mr, c->nsrc);
			c->active = false;
		}
		return 1;
	}

	if (!batch_room(qp, RDMAP_MAX_SGE))
		return 0;
	if (ddp_seg_next(&c->it, &h.ddp, &off, &len) <= 0)
		return -EINVAL;
	npay = slice(c->src, c->nsrc, off, len, pay);
	if (wr->opcode == RDMAP_WR_WRITE) {
		h.opcode = RDMAP_OP_WRITE;
	} else {
		h.opcode = send_opcode(wr);
		h.inval_stag = wr->inv_stag;
	}
	ret = batch_add(qp, &h, pay, npay, h.ddp.last ? (int64_t)c->idx : -1,
			NULL, false);
	if (ret)
		return ret;
	if (h.ddp.last) {
		/* The references only guard the translation: the verbs
		 * contract forbids deregistering memory that an outstanding
		 * WR names. */
		put_refs(c->mr, c->nsrc);
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

int rdmap_qp_tx_fill(struct rdmap_qp *qp, struct iovec *iov, int cap)
{
	int ret = 0;

	if (qp->b_sent < qp->b_total)
		return tx_view(qp, iov, cap);
	qp->nfp = qp->fp_done = 0;
	qp->niov = qp->iov_cur = 0;
	qp->iov_off = qp->b_total = qp->b_sent = 0;

	if (qp->term_pending) {
		ret = tx_terminate(qp);
		goto out;
	}
	if (rdmap_qp_state(qp) != RDMAP_QP_RTS)
		goto out;
	if (qp->rtr_pending) {
		ret = tx_rtr(qp);
		if (ret < 0)
			goto out;
	}
	if (qp->nudge_pending) {
		qp->nudge_pending = false;
		ret = tx_zero_write(qp);
		if (ret < 0)
			goto out;
	}
	if (qp->tx_hold)
		goto out;
	for (;;) {
		if (qp->ird_head != qp->ird_tail) {
			/* Read Responses go first: the peer's Reads are
			 * older than anything we start now. */
			ret = tx_read_resp(qp);
		} else if (qp->cur.active || tx_start(qp)) {
			ret = tx_segment(qp);
		} else {
			ret = 0;
		}
		if (ret <= 0 || rdmap_qp_state(qp) != RDMAP_QP_RTS)
			break;
	}
out:
	if (ret < 0)
		fault(qp, rdmap_fault_rdmap(RDMAP_ERR_LOCAL_CATASTROPHIC),
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

		rdmap_mr_put(f->put);
		f->put = NULL;
		if (f->wr_idx >= 0 && rdmap_qp_state(qp) != RDMAP_QP_ERROR)
			wr_sent(qp, (uint32_t)f->wr_idx);
		if (f->close)
			close = 1;
	}
	if (rdmap_qp_state(qp) != RDMAP_QP_ERROR)
		sq_advance(qp);
	return close;
}

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
	fault(qp, f, qp->hdr, qp->hdr_have, (uint16_t)qp->ulpdu_len);
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
		complete_recv(qp, st, 0, false, false, 0);
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
		n = slice(qp->rsge, qp->nrsge, qp->h.ddp.u.mo + (uint64_t)poff,
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
		enter_error(qp, term, RDMAP_WC_FATAL_ERR);
	else if (rdmap_term_etype(term) == 1)   /* remote protection */
		enter_error(qp, term, RDMAP_WC_REM_ACCESS_ERR);
	else                                    /* remote operation */
		enter_error(qp, term, RDMAP_WC_REM_OP_ERR);
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
			sq_advance(qp);
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
				complete_recv(qp, RDMAP_WC_REM_INV_REQ_ERR, 0,
					      false, false, 0);
				rx_fault(qp, rdmap_fault_rdmap(
					RDMAP_ERR_PROT_CANT_INVALIDATE));
				break;
			}
		}
		complete_recv(qp, RDMAP_WC_SUCCESS,
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

			fault(qp, rdmap_fault_llp(e, mpa_error_term(e)),
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
			qp->ndir = slice(qp->rsge, qp->nrsge,
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
