/* SPDX-License-Identifier: MIT */
/*
 * verbs_qpx.c - the extended post API of rdma-core (struct ibv_qp_ex,
 * ibv_wr_start ... ibv_wr_complete) for a QP created by ibv_create_qp_ex
 * with send_ops_flags.
 *
 * Between ibv_wr_start and ibv_wr_complete the WRs are built here, each
 * as an ordinary struct ibv_send_wr with its own SGEs and inline copy;
 * ibv_wr_complete hands the whole chain to the same checks and SQ ring
 * as ibv_post_send, all or nothing. A fault found while building (too
 * many SGEs, too much inline data, a setter without an operation) is
 * kept and returned by ibv_wr_complete, and nothing of the batch is
 * posted, as rdma-core's providers do.
 *
 * The operations are those of an iWARP RC QP (RFC 5040): Send, Send with
 * Invalidate, RDMA Write, RDMA Read. Immediate data and atomics (RFC
 * 7306), TSO, UD and XRC addressing are refused at creation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_internal.h"

/* One WR being built, with what its sg_list points to. */
struct qpx_wr {
	struct ibv_send_wr wr;
	struct ibv_sge sge[WISP_MAX_SGE];
	uint8_t inl[WISP_MAX_INLINE];
};

struct wisp_qpx {
	/* Held from ibv_wr_start to ibv_wr_complete / ibv_wr_abort: one
	 * batch at a time per QP, as rdma-core asks of the caller. */
	pthread_mutex_t lock;
	struct qpx_wr *wrs;
	uint32_t n, cap;
	int err;                  /* the first fault of this batch */
};

static inline struct wisp_qp *qpx_to_wqp(struct ibv_qp_ex *x)
{
	return container_of(x, struct wisp_qp, base.qpx);
}

static void qpx_start(struct ibv_qp_ex *x)
{
	struct wisp_qpx *b = qpx_to_wqp(x)->x;

	pthread_mutex_lock(&b->lock);
	b->n = 0;
	b->err = 0;
}

/* A new WR of opcode from x->wr_id / x->wr_flags; NULL (fault kept) if
 * the batch is already longer than the SQ. */
static struct ibv_send_wr *qpx_new(struct ibv_qp_ex *x,
				   enum ibv_wr_opcode opcode)
{
	struct wisp_qp *qp = qpx_to_wqp(x);
	struct wisp_qpx *b = qp->x;
	struct qpx_wr *w;

	if (b->err)
		return NULL;
	if (b->n >= qp->cap.max_send_wr) {
		b->err = ENOMEM;
		return NULL;
	}
	if (b->n == b->cap) {
		uint32_t cap = b->cap ? b->cap * 2 : 8;
		struct qpx_wr *wrs;

		if (cap > qp->cap.max_send_wr)
			cap = qp->cap.max_send_wr;
		wrs = realloc(b->wrs, cap * sizeof(*wrs));
		if (!wrs) {
			b->err = ENOMEM;
			return NULL;
		}
		b->wrs = wrs;
		b->cap = cap;
	}
	w = &b->wrs[b->n++];
	memset(&w->wr, 0, sizeof(w->wr));
	w->wr.wr_id = x->wr_id;
	w->wr.send_flags = x->wr_flags;
	w->wr.opcode = opcode;
	return &w->wr;
}

/* The WR the setters apply to: the last one built. */
static struct qpx_wr *qpx_cur(struct ibv_qp_ex *x)
{
	struct wisp_qpx *b = qpx_to_wqp(x)->x;

	if (b->err)
		return NULL;
	if (!b->n) {
		b->err = EINVAL;  /* a setter before any operation */
		return NULL;
	}
	return &b->wrs[b->n - 1];
}

static void qpx_fault(struct ibv_qp_ex *x, int err)
{
	struct wisp_qpx *b = qpx_to_wqp(x)->x;

	if (!b->err)
		b->err = err;
}

static void qpx_send(struct ibv_qp_ex *x)
{
	qpx_new(x, IBV_WR_SEND);
}

static void qpx_send_inv(struct ibv_qp_ex *x, uint32_t invalidate_rkey)
{
	struct ibv_send_wr *wr = qpx_new(x, IBV_WR_SEND_WITH_INV);

	if (wr)
		wr->invalidate_rkey = invalidate_rkey;
}

static void qpx_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op,
		     uint32_t rkey, uint64_t remote_addr)
{
	struct ibv_send_wr *wr = qpx_new(x, op);

	if (wr) {
		wr->wr.rdma.rkey = rkey;
		wr->wr.rdma.remote_addr = remote_addr;
	}
}

static void qpx_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	qpx_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void qpx_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	qpx_rdma(x, IBV_WR_RDMA_READ, rkey, addr);
}

static void qpx_sge_list(struct ibv_qp_ex *x, size_t num,
			 const struct ibv_sge *list)
{
	struct qpx_wr *w = qpx_cur(x);

	if (!w)
		return;
	if (num > WISP_MAX_SGE) {
		qpx_fault(x, EINVAL);
		return;
	}
	if (num)
		memcpy(w->sge, list, num * sizeof(*list));
	w->wr.num_sge = (int)num;
	w->wr.send_flags &= ~(unsigned int)IBV_SEND_INLINE;
}

static void qpx_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr,
		    uint32_t length)
{
	const struct ibv_sge sge = {
		.addr = addr, .length = length, .lkey = lkey,
	};

	qpx_sge_list(x, 1, &sge);
}

/* Inline data is copied now: the caller's buffers are free on return
 * (rdma-core's man page for ibv_wr_set_inline_data). */
static void qpx_inline_list(struct ibv_qp_ex *x, size_t num,
			    const struct ibv_data_buf *bufs)
{
	struct qpx_wr *w = qpx_cur(x);
	size_t off = 0;

	if (!w)
		return;
	for (size_t i = 0; i < num; i++) {
		if (bufs[i].length > WISP_MAX_INLINE - off) {
			qpx_fault(x, EINVAL);
			return;
		}
		if (bufs[i].length)
			memcpy(w->inl + off, bufs[i].addr, bufs[i].length);
		off += bufs[i].length;
	}
	w->sge[0] = (struct ibv_sge){
		.addr = (uintptr_t)w->inl, .length = (uint32_t)off,
	};
	w->wr.num_sge = 1;
	w->wr.send_flags |= IBV_SEND_INLINE;
}

static void qpx_inline(struct ibv_qp_ex *x, void *addr, size_t length)
{
	const struct ibv_data_buf buf = { .addr = addr, .length = length };

	qpx_inline_list(x, 1, &buf);
}

static void qpx_abort(struct ibv_qp_ex *x)
{
	struct wisp_qpx *b = qpx_to_wqp(x)->x;

	b->n = 0;
	pthread_mutex_unlock(&b->lock);
}

static int qpx_complete(struct ibv_qp_ex *x)
{
	struct wisp_qp *qp = qpx_to_wqp(x);
	struct wisp_qpx *b = qp->x;
	int ret = b->err;

	if (!ret && b->n) {
		/* Link the chain now: realloc may have moved the WRs. */
		for (uint32_t i = 0; i < b->n; i++) {
			struct qpx_wr *w = &b->wrs[i];

			w->wr.sg_list = w->sge;
			w->wr.next = i + 1 < b->n ? &b->wrs[i + 1].wr : NULL;
		}
		ret = wisp_qp_post_whole(&qp->base.qp, &b->wrs[0].wr);
	}
	b->n = 0;
	pthread_mutex_unlock(&b->lock);
	return ret;
}

int wisp_qpx_init(struct wisp_qp *qp)
{
	struct ibv_qp_ex *x = &qp->base.qpx;
	struct wisp_qpx *b = calloc(1, sizeof(*b));

	if (!b)
		return ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	qp->x = b;
	x->wr_send = qpx_send;
	x->wr_send_inv = qpx_send_inv;
	x->wr_rdma_write = qpx_write;
	x->wr_rdma_read = qpx_read;
	x->wr_set_sge = qpx_sge;
	x->wr_set_sge_list = qpx_sge_list;
	x->wr_set_inline_data = qpx_inline;
	x->wr_set_inline_data_list = qpx_inline_list;
	x->wr_start = qpx_start;
	x->wr_complete = qpx_complete;
	x->wr_abort = qpx_abort;
	return 0;
}

void wisp_qpx_fini(struct wisp_qp *qp)
{
	if (!qp->x)
		return;
	pthread_mutex_destroy(&qp->x->lock);
	free(qp->x->wrs);
	free(qp->x);
	qp->x = NULL;
}

struct ibv_qp_ex *wisp_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	struct wisp_qp *qp;

	if (!ibqp)
		return NULL;
	qp = to_wqp(ibqp);
	return qp->x ? &qp->base.qpx : NULL;
}
