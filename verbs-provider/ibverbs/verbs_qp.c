// SPDX-License-Identifier: MIT
/*
 * verbs_qp.c - RC queue pairs over rdmap_qp: create, modify, query,
 * destroy, posting, and the lifetime of the TCP stream attached to a QP
 * (closing it, waiting for its end, freeing it). The engine's view of
 * the stream and the calls that attach it are verbs_stream.c's.
 *
 * Posting: a WR is checked and written straight into the SQ or RQ ring
 * under the QP's post lock, then the engine is kicked (no system call
 * when it is awake). Completions come back through rdmap_qp_ops into the
 * CQ rings. A QP in ERROR completes what is posted at once with
 * IBV_WC_WR_FLUSH_ERR.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "glue.h"
#include "rdmap_qp.h"
#include "verbs_internal.h"
#include "verbs_stats.h"
#include "wisp_mem.h"

static atomic_uint next_qpn = 1;

/* Every QP of the process, for wisp_qp_lookup(). */
static pthread_mutex_t qps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wisp_qp *qps_head;

/* ------------------------------------------------------------------ */
/* Completions from the core                                          */
/* ------------------------------------------------------------------ */

static const enum ibv_wc_status wc_status[] = {
	[RDMAP_WC_SUCCESS] = IBV_WC_SUCCESS,
	[RDMAP_WC_LOC_LEN_ERR] = IBV_WC_LOC_LEN_ERR,
	[RDMAP_WC_LOC_QP_OP_ERR] = IBV_WC_LOC_QP_OP_ERR,
	[RDMAP_WC_LOC_PROT_ERR] = IBV_WC_LOC_PROT_ERR,
	[RDMAP_WC_WR_FLUSH_ERR] = IBV_WC_WR_FLUSH_ERR,
	[RDMAP_WC_REM_INV_REQ_ERR] = IBV_WC_REM_INV_REQ_ERR,
	[RDMAP_WC_REM_ACCESS_ERR] = IBV_WC_REM_ACCESS_ERR,
	[RDMAP_WC_REM_OP_ERR] = IBV_WC_REM_OP_ERR,
	[RDMAP_WC_FATAL_ERR] = IBV_WC_FATAL_ERR,
	[RDMAP_WC_GENERAL_ERR] = IBV_WC_GENERAL_ERR,
};

static const enum ibv_wc_opcode wc_opcode[] = {
	[RDMAP_WC_SEND] = IBV_WC_SEND,
	[RDMAP_WC_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
	[RDMAP_WC_RDMA_READ] = IBV_WC_RDMA_READ,
	[RDMAP_WC_RECV] = IBV_WC_RECV,
};

static void core_complete(void *arg, const struct rdmap_cqe *c)
{
	struct wisp_qp *qp = arg;
	struct ibv_wc wc = {
		.wr_id = c->wr_id,
		.status = wc_status[c->status],
		.opcode = wc_opcode[c->opcode],
		.vendor_err = c->vendor_err,
		.byte_len = c->byte_len,
		.qp_num = qp->base.qp.qp_num,
		.src_qp = qp->base.qp.qp_num,
	};

	if (c->with_inv) {
		wc.wc_flags |= IBV_WC_WITH_INV;
		wc.invalidated_rkey = c->inv_stag;
	}
	atomic_store_explicit(&qp->ncqe,
			      atomic_load_explicit(&qp->ncqe,
						   memory_order_relaxed) + 1,
			      memory_order_relaxed);
	wisp_cq_push(c->recv ? qp->rcq : qp->scq, &wc, c->solicited);
}

static bool core_srq_pop(void *arg, struct rdmap_recv_wr *out)
{
	return wisp_srq_pop(((struct wisp_qp *)arg)->srq, out);
}

/* A QP that failed with a Terminate, sent or received, raises
 * IBV_EVENT_QP_FATAL; one whose stream merely ended does not. Code 0x0000
 * (RDMAP local catastrophic error) is a Terminate like any other. */
static void core_fatal(void *arg, int term)
{
	struct wisp_qp *qp = arg;

	wisp_qp_set_state(qp, IBV_QPS_ERR);
	/* Whatever failed it, the stream closes gracefully now: what was
	 * handed to the engine (and the Terminate) still goes out, and the
	 * close deadline bounds how long a peer that stopped reading holds
	 * the WRs that wait for it. Called with the core locked, while the
	 * stream (if any) is alive. */
	if (qp->stream.conn)
		glue_conn_close_soon(qp->stream.conn);
	if (term != RDMAP_TERM_NONE) {
		struct ibv_async_event ev = {
			.element.qp = &qp->base.qp,
			.event_type = IBV_EVENT_QP_FATAL,
		};
		wisp_async_event_push(qp->base.qp.context, &ev);
	}
}

static const struct rdmap_qp_ops core_ops = {
	.complete = core_complete,
	.srq_pop = core_srq_pop,
	.fatal = core_fatal,
};

/* ------------------------------------------------------------------ */
/* The lifetime of the stream (the engine's side is verbs_stream.c)   */
/* ------------------------------------------------------------------ */

void wisp_qp_core_end(struct wisp_qp *qp, int reason)
{
	wisp_lock_take(&qp->core_lock);
	rdmap_qp_stream_ended(qp->core, reason);
	wisp_lock_give(&qp->core_lock);
}

/* Engine thread: close the stream unless it is already over. */
struct close_args {
	struct wisp_qp *qp;
	int reason;
	bool graceful;
};

static void close_cmd(void *arg)
{
	struct close_args *a = arg;
	struct wisp_qp *qp = a->qp;
	bool ended;

	pthread_mutex_lock(&qp->stream.end_lock);
	ended = qp->stream.ended;
	pthread_mutex_unlock(&qp->stream.end_lock);
	if (ended)
		return;
	if (a->graceful) {
		/* Flush locally now; the peer learns from the FIN. What the
		 * engine was handed to send still goes (or the close deadline
		 * aborts it): its WRs complete only after that. */
		wisp_lock_take(&qp->core_lock);
		rdmap_qp_shutdown(qp->core);
		wisp_lock_give(&qp->core_lock);
		wisp_qp_set_state(qp, IBV_QPS_ERR);
	}
	glue_conn_close(qp->stream.conn, a->reason, a->graceful);
	glue_conn_kick(qp->stream.conn);
}

void wisp_qp_stream_close(struct wisp_qp *qp, int reason, bool graceful)
{
	struct close_args a = { qp, reason, graceful };

	if (qp->stream.conn)
		glue_engine_call(qp->stream.engine, close_cmd, &a);
}

static void stream_wait_end(struct wisp_qp *qp)
{
	if (!qp->stream.conn)
		return;
	pthread_mutex_lock(&qp->stream.end_lock);
	while (!qp->stream.ended)
		pthread_cond_wait(&qp->stream.end_cond, &qp->stream.end_lock);
	pthread_mutex_unlock(&qp->stream.end_lock);
}

/* Close and free the stream, off the CQs' lists first. */
static void detach_conn(struct wisp_qp *qp)
{
	struct glue_conn *c = qp->stream.conn;

	if (!c)
		return;
	wisp_qp_stream_close(qp, ECONNABORTED, false);
	stream_wait_end(qp);
	wisp_cq_del_conn(qp->scq, c);
	if (qp->rcq != qp->scq)
		wisp_cq_del_conn(qp->rcq, c);
	wisp_lock_take(&qp->core_lock);   /* core_fatal reads it */
	qp->stream.conn = NULL;
	wisp_lock_give(&qp->core_lock);
	glue_conn_free(c);
}

/* ---- ibv_dereg_mr of an MR that QPs still reference ---- */

struct revoke_args {
	struct ibv_context *ctx;
	const struct rdmap_mr *mr;
};

/* Engine thread: every QP of the context drops what it holds on mr (the
 * receive side at once, the transmit side by aborting its stream). The
 * engine serialises this with ended(), so a QP whose core still holds a
 * reference has a live connection. */
static void revoke_cmd(void *arg)
{
	struct revoke_args *a = arg;
	struct wisp_qp *qp;

	pthread_mutex_lock(&qps_lock);
	for (qp = qps_head; qp; qp = qp->qps_next) {
		int r;

		if (qp->base.qp.context != a->ctx || !qp->stream.conn)
			continue;
		wisp_lock_take(&qp->core_lock);
		r = rdmap_qp_revoke(qp->core, a->mr);
		wisp_lock_give(&qp->core_lock);
		if (r & RDMAP_REVOKE_ABORT)
			glue_conn_close(qp->stream.conn, ECONNABORTED, false);
		if (r)
			glue_conn_kick(qp->stream.conn);
	}
	pthread_mutex_unlock(&qps_lock);
}

void wisp_qps_revoke_mr(struct ibv_context *ctx, const struct rdmap_mr *mr)
{
	struct revoke_args a = { ctx, mr };
	struct glue_engine *e = NULL;
	struct wisp_qp *qp;

	pthread_mutex_lock(&qps_lock);
	for (qp = qps_head; qp && !e; qp = qp->qps_next)
		if (qp->base.qp.context == ctx)
			e = qp->stream.engine;
	pthread_mutex_unlock(&qps_lock);
	/* References are only taken by QPs with a stream, and every stream
	 * of a context runs on its one engine. */
	if (e)
		glue_engine_call(e, revoke_cmd, &a);
}

struct ibv_qp *wisp_qp_lookup(uint32_t qp_num)
{
	struct wisp_qp *qp;

	pthread_mutex_lock(&qps_lock);
	for (qp = qps_head; qp; qp = qp->qps_next)
		if (qp->base.qp.qp_num == qp_num)
			break;
	pthread_mutex_unlock(&qps_lock);
	return qp ? &qp->base.qp : NULL;
}

/* ------------------------------------------------------------------ */
/* Create / modify / query / destroy                                  */
/* ------------------------------------------------------------------ */

static int check_cap(struct ibv_qp_cap *cap, bool srq)
{
	if (cap->max_send_wr > WISP_MAX_QP_WR ||
	    (!srq && cap->max_recv_wr > WISP_MAX_QP_WR) ||
	    cap->max_send_sge > WISP_MAX_SGE ||
	    (!srq && cap->max_recv_sge > WISP_MAX_SGE) ||
	    cap->max_inline_data > WISP_MAX_INLINE)
		return EINVAL;
	/* Report what we give: the ring sizes and limits. */
	if (!cap->max_send_wr)
		cap->max_send_wr = 1;
	if (srq) {
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	} else if (!cap->max_recv_wr) {
		cap->max_recv_wr = 1;
	}
	cap->max_send_sge = WISP_MAX_SGE;
	if (!srq)
		cap->max_recv_sge = WISP_MAX_SGE;
	cap->max_inline_data = WISP_MAX_INLINE;
	return 0;
}

static struct ibv_qp *create_qp(struct ibv_context *ctx, struct ibv_pd *pd,
				struct ibv_qp_init_attr *attr)
{
	struct rdmap_qp_cfg cfg = { 0 };
	struct wisp_qp *qp;
	int ret = EINVAL;

	if (!pd || !attr || !attr->send_cq || !attr->recv_cq)
		goto err;
	if (attr->qp_type != IBV_QPT_RC) {
		ret = EOPNOTSUPP;     /* iWARP is RC only */
		goto err;
	}
	ret = check_cap(&attr->cap, attr->srq != NULL);
	if (ret)
		goto err;
	ret = ENOMEM;
	qp = wisp_mem_zalloc(sizeof(*qp));
	if (!qp)
		goto err;
	wisp_lock_init(&qp->post_lock);
	wisp_lock_init(&qp->core_lock);
	pthread_mutex_init(&qp->stream.end_lock, NULL);
	pthread_cond_init(&qp->stream.end_cond, NULL);
	cfg.pd = pd;
	cfg.stags = wisp_context_stags(to_wctx(ctx));
	cfg.ops = &core_ops;
	cfg.ops_arg = qp;
	cfg.use_srq = attr->srq != NULL;
	cfg.sq_size = attr->cap.max_send_wr;
	cfg.rq_size = attr->cap.max_recv_wr;
	cfg.post_lock = &qp->post_lock;
	cfg.access = 0;           /* none until modify_qp grants it */
	if (!cfg.stags)
		goto err_free;
	qp->stats = wisp_stats_qp_open(ctx);
	cfg.stats = wisp_stats_qp_core(qp->stats);
	qp->core = rdmap_qp_create(&cfg);
	if (!qp->core)
		goto err_free;
	qp->cap = attr->cap;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->scq = to_wcq(attr->send_cq);
	qp->rcq = to_wcq(attr->recv_cq);
	qp->srq = attr->srq ? to_wsrq(attr->srq) : NULL;
	qp->ord = 16;
	qp->ird = 16;
	if (wisp_cq_get(qp->scq))
		goto err_core;
	if (wisp_cq_get(qp->rcq)) {
		wisp_cq_put(qp->scq);
		goto err_core;
	}
	if (qp->srq)
		atomic_fetch_add(&qp->srq->users, 1);
	qp->base.qp.context = ctx;
	qp->base.qp.qp_context = attr->qp_context;
	qp->base.qp.pd = pd;
	qp->base.qp.send_cq = attr->send_cq;
	qp->base.qp.recv_cq = attr->recv_cq;
	qp->base.qp.srq = attr->srq;
	qp->base.qp.qp_type = IBV_QPT_RC;
	qp->base.qp.qp_num = atomic_fetch_add(&next_qpn, 1) & 0xffffff;
	qp->base.qp.handle = qp->base.qp.qp_num;
	pthread_mutex_init(&qp->base.qp.mutex, NULL);
	pthread_cond_init(&qp->base.qp.cond, NULL);
	wisp_qp_set_state(qp, IBV_QPS_RESET);
	wisp_pd_get(pd);
	pthread_mutex_lock(&qps_lock);
	qp->qps_next = qps_head;
	qps_head = qp;
	pthread_mutex_unlock(&qps_lock);
	return &qp->base.qp;

err_core:
	rdmap_qp_destroy(qp->core);
err_free:
	wisp_stats_qp_close(ctx, qp->stats, NULL);
	pthread_cond_destroy(&qp->stream.end_cond);
	pthread_mutex_destroy(&qp->stream.end_lock);
	wisp_mem_free(qp, sizeof(*qp));
err:
	errno = ret;
	return NULL;
}

struct ibv_qp *wisp_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	return create_qp(pd->context, pd, attr);
}

struct ibv_qp *wisp_create_qp_ex(struct ibv_context *ctx,
				 struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;

	if (!attr || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) {
		errno = EINVAL;
		return NULL;
	}
	/* The new post API for the operations of an iWARP RC QP; no
	 * creation flags; XRC, RSS, TSO and the rest are not offered. */
	if ((attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD |
					   IBV_QP_INIT_ATTR_CREATE_FLAGS |
					   IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     attr->create_flags) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	     (attr->send_ops_flags & ~(uint64_t)WISP_QPX_SEND_OPS))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	a = (struct ibv_qp_init_attr){
		.qp_context = attr->qp_context,
		.send_cq = attr->send_cq,
		.recv_cq = attr->recv_cq,
		.srq = attr->srq,
		.cap = attr->cap,
		.qp_type = attr->qp_type,
		.sq_sig_all = attr->sq_sig_all,
	};
	qp = create_qp(ctx, attr->pd, &a);
	if (!qp)
		return NULL;
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		int ret = wisp_qpx_init(to_wqp(qp));

		if (ret) {
			wisp_destroy_qp(qp);
			errno = ret;
			return NULL;
		}
	}
	attr->cap = a.cap;
	return qp;
}

/* IBTA 10.3.1 state transitions, as far as an iWARP RC QP has them. */
static bool transition_ok(enum ibv_qp_state from, enum ibv_qp_state to)
{
	if (to == IBV_QPS_RESET || to == IBV_QPS_ERR)
		return true;
	switch (from) {
	case IBV_QPS_RESET:
		return to == IBV_QPS_INIT;
	case IBV_QPS_INIT:
		return to == IBV_QPS_INIT || to == IBV_QPS_RTR;
	case IBV_QPS_RTR:
		return to == IBV_QPS_RTS;
	case IBV_QPS_RTS:
		return to == IBV_QPS_RTS || to == IBV_QPS_SQD;
	default:
		return false;
	}
}

_Static_assert(IBV_ACCESS_REMOTE_WRITE == RDMAP_ACC_REMOTE_WRITE &&
	       IBV_ACCESS_REMOTE_READ == RDMAP_ACC_REMOTE_READ,
	       "qp_access_flags map onto the core's rights bit for bit");

/* The core's view of qp_access_flags: the two rights a peer may use. */
static uint32_t core_access(int flags)
{
	return (uint32_t)flags &
	       (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

/*
 * Where IBV_QP_ACCESS_FLAGS may be given: the IBTA transitions list it
 * (optional or required) for RESET->INIT, INIT->INIT, INIT->RTR,
 * RTR->RTS and RTS->RTS, and for no transition to RESET, ERR or SQD.
 * IB providers refuse it elsewhere with EINVAL through the kernel's
 * ib_modify_qp_is_ok(); siw takes it anywhere. wisp follows the table.
 */
static bool access_ok(enum ibv_qp_state from, enum ibv_qp_state to)
{
	switch (to) {
	case IBV_QPS_INIT:
		return from == IBV_QPS_RESET || from == IBV_QPS_INIT;
	case IBV_QPS_RTR:
		return from == IBV_QPS_INIT;
	case IBV_QPS_RTS:
		return from == IBV_QPS_RTR || from == IBV_QPS_RTS;
	default:
		return false;
	}
}

/* Back to RESET: a fresh core (empty rings, MSNs restarted). */
static int reset_core(struct wisp_qp *qp)
{
	struct rdmap_qp_cfg cfg = {
		.pd = qp->base.qp.pd,
		.stags = to_wctx(qp->base.qp.context)->stags,
		.ops = &core_ops,
		.ops_arg = qp,
		.use_srq = qp->srq != NULL,
		.sq_size = qp->cap.max_send_wr,
		.rq_size = qp->cap.max_recv_wr,
		.post_lock = &qp->post_lock,
		.stats = wisp_stats_qp_core(qp->stats),
		.access = core_access(qp->access_flags),
	};
	struct rdmap_qp *core;

	detach_conn(qp);
	core = rdmap_qp_create(&cfg);
	if (!core)
		return ENOMEM;
	/* The core lock too: ibv_dereg_mr's revocation reads qp->core. */
	wisp_lock_take(&qp->core_lock);
	wisp_lock_take(&qp->post_lock);
	rdmap_qp_destroy(qp->core);
	qp->core = core;
	wisp_lock_give(&qp->post_lock);
	wisp_lock_give(&qp->core_lock);
	return 0;
}

int wisp_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		   int mask)
{
	struct wisp_qp *qp;
	enum ibv_qp_state cur, to;
	int ret;

	if (!ibqp || !attr)
		return EINVAL;
	qp = to_wqp(ibqp);
	cur = wisp_qp_state(qp);
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
		return EINVAL;
	to = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	/* iWARP: once the connection manager has moved the QP to RTS with
	 * its stream, it owns the state; an application that walks its own
	 * QP through INIT/RTR/RTS afterwards (rping -q) changes nothing, as
	 * with siw. */
	if (qp->stream.conn && cur == IBV_QPS_RTS &&
	    (to == IBV_QPS_INIT || to == IBV_QPS_RTR || to == IBV_QPS_RTS))
		to = cur;
	if ((mask & IBV_QP_STATE) && to != cur && !transition_ok(cur, to))
		return EINVAL;
	if ((mask & IBV_QP_ACCESS_FLAGS) && !access_ok(cur, to))
		return EINVAL;
	/* An iWARP QP enters RTS with its connection (rdma_cm, or
	 * wisp_qp_connect_fd): RTS without a stream is refused, as siw
	 * refuses it without a socket ("no socket", EINVAL), rather than
	 * left to take WRs that could never go anywhere. */
	if ((mask & IBV_QP_STATE) && to == IBV_QPS_RTS && !qp->stream.conn)
		return EINVAL;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC) {
		if (attr->max_rd_atomic > WISP_MAX_ORD)
			return EINVAL;
		qp->ord = attr->max_rd_atomic;
	}
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
		if (attr->max_dest_rd_atomic > WISP_MAX_IRD)
			return EINVAL;
		qp->ird = attr->max_dest_rd_atomic;
	}
	if (mask & IBV_QP_ACCESS_FLAGS) {
		/* Enforced on receive from the next segment on (RTS->RTS
		 * included): a WRITE or Read Request the QP does not allow
		 * is refused with a Terminate, RDMAP 0x0102. */
		qp->access_flags = attr->qp_access_flags;
		wisp_lock_take(&qp->post_lock);
		rdmap_qp_set_access(qp->core, core_access(qp->access_flags));
		wisp_lock_give(&qp->post_lock);
	}
	if (!(mask & IBV_QP_STATE) || to == cur)
		return 0;

	switch (to) {
	case IBV_QPS_RESET:
		ret = reset_core(qp);
		if (ret)
			return ret;
		break;
	case IBV_QPS_ERR:
		if (qp->stream.conn) {
			wisp_qp_stream_close(qp, ECONNABORTED, false);
		} else {
			wisp_qp_core_end(qp, 0);
			wisp_lock_take(&qp->post_lock);
			rdmap_qp_flush_idle(qp->core);
			wisp_lock_give(&qp->post_lock);
		}
		break;
	case IBV_QPS_SQD:
		return EOPNOTSUPP;
	default:
		break;
	}
	wisp_qp_set_state(qp, to);
	return 0;
}

int wisp_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
		  struct ibv_qp_init_attr *init)
{
	struct wisp_qp *qp;

	(void)mask;               /* everything is cheap: fill it all */
	if (!ibqp || !attr || !init)
		return EINVAL;
	qp = to_wqp(ibqp);
	memset(attr, 0, sizeof(*attr));
	/* An iWARP QP has no RESET apart from its idle state, which siw
	 * reports as INIT from creation on (and after a move to RESET);
	 * rdma-core's tests expect INIT of a new QP on an RNIC. */
	attr->qp_state = wisp_qp_state(qp);
	if (attr->qp_state == IBV_QPS_RESET)
		attr->qp_state = IBV_QPS_INIT;
	attr->cur_qp_state = attr->qp_state;
	attr->path_mtu = IBV_MTU_1024;
	attr->qp_access_flags = qp->access_flags;
	attr->cap = qp->cap;
	attr->max_rd_atomic = qp->ord;
	attr->max_dest_rd_atomic = qp->ird;
	attr->port_num = 1;
	memset(init, 0, sizeof(*init));
	init->qp_context = ibqp->qp_context;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->qp_type = IBV_QPT_RC;
	init->sq_sig_all = qp->sq_sig_all;
	return 0;
}

int wisp_destroy_qp(struct ibv_qp *ibqp)
{
	struct wisp_qp *qp;

	if (!ibqp)
		return EINVAL;
	qp = to_wqp(ibqp);
	pthread_mutex_lock(&qps_lock);
	for (struct wisp_qp **pp = &qps_head; *pp; pp = &(*pp)->qps_next) {
		if (*pp == qp) {
			*pp = qp->qps_next;
			break;
		}
	}
	pthread_mutex_unlock(&qps_lock);
	detach_conn(qp);
	wisp_stats_qp_close(ibqp->context, qp->stats, rdmap_qp_stats(qp->core));
	rdmap_qp_destroy(qp->core);
	wisp_qpx_fini(qp);
	wisp_pd_put(ibqp->pd);
	wisp_cq_put(qp->scq);
	wisp_cq_put(qp->rcq);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->users, 1);
	pthread_cond_destroy(&qp->stream.end_cond);
	pthread_mutex_destroy(&qp->stream.end_lock);
	pthread_cond_destroy(&ibqp->cond);
	pthread_mutex_destroy(&ibqp->mutex);
	wisp_mem_free(qp, sizeof(*qp));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Posting                                                            */
/* ------------------------------------------------------------------ */

static int conv_send(struct wisp_qp *qp, const struct ibv_send_wr *wr,
		     struct rdmap_send_wr *w)
{
	uint64_t len = 0;

	switch (wr->opcode) {
	case IBV_WR_SEND:
		w->opcode = RDMAP_WR_SEND;
		break;
	case IBV_WR_SEND_WITH_INV:
		w->opcode = RDMAP_WR_SEND_INV;
		w->inv_stag = wr->invalidate_rkey;
		break;
	case IBV_WR_RDMA_WRITE:
		w->opcode = RDMAP_WR_WRITE;
		break;
	case IBV_WR_RDMA_READ:
		w->opcode = RDMAP_WR_READ;
		break;
	default:
		/* Immediate data and atomics are RFC 7306; not yet. */
		return EOPNOTSUPP;
	}
	if (wr->num_sge < 0 || wr->num_sge > WISP_MAX_SGE)
		return EINVAL;
	w->wr_id = wr->wr_id;
	w->flags = 0;
	if ((wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all)
		w->flags |= RDMAP_WR_SIGNALED;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		w->flags |= RDMAP_WR_SOLICITED;
	if (wr->send_flags & IBV_SEND_FENCE)
		w->flags |= RDMAP_WR_FENCE;
	w->rkey = wr->wr.rdma.rkey;
	w->remote_addr = wr->wr.rdma.remote_addr;
	w->num_sge = (uint8_t)wr->num_sge;
	memset(&w->sge[0], 0, sizeof(w->sge[0]));
	for (int i = 0; i < wr->num_sge; i++) {
		w->sge[i].addr = wr->sg_list[i].addr;
		w->sge[i].length = wr->sg_list[i].length;
		w->sge[i].lkey = wr->sg_list[i].lkey;
		len += wr->sg_list[i].length;
	}
	if (len >= (1ull << 32))
		return EINVAL;    /* RFC 5041 5.2: messages below 2^32 */
	w->length = len;
	if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ) {
		size_t off = 0;

		if (len > WISP_MAX_INLINE)
			return EINVAL;
		/* Inline: the data is copied now, the buffer may be reused
		 * as soon as ibv_post_send returns; no lkey is needed. */
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(w->inline_data + off,
			       (const void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		w->flags |= RDMAP_WR_INLINE;
	}
	return 0;
}

/* Post the chain wr; with whole, either every WR goes to the SQ or none
 * does (the tail is published once, after the last one converted). */
static int post_send_chain(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
			   struct ibv_send_wr **bad_wr, bool whole)
{
	struct wisp_qp *qp = to_wqp(ibqp);
	struct rdmap_ring *sq = rdmap_qp_sq(qp->core);
	enum ibv_qp_state st;
	uint32_t tail, head, first;
	size_t len = 0;
	int ret = 0;
	bool flush;

	wisp_lock_take(&qp->post_lock);
	st = wisp_qp_state(qp);
	flush = st == IBV_QPS_ERR;
	if (st != IBV_QPS_RTS && !flush) {
		ret = EINVAL;
		*bad_wr = wr;
		goto out;
	}
	tail = atomic_load_explicit(&sq->tail, memory_order_relaxed);
	first = tail;
	for (; wr; wr = wr->next) {
		struct rdmap_send_wr *w = rdmap_ring_slot(sq, tail);

		head = atomic_load_explicit(&sq->head, memory_order_acquire);
		if (tail - head >= qp->cap.max_send_wr) {
			ret = ENOMEM;
			break;
		}
		ret = conv_send(qp, wr, w);
		if (ret)
			break;
		len += rdmap_send_wr_out(w);
		tail++;
	}
	if (ret && whole)
		tail = first;     /* the slots written stay unpublished */
	atomic_store_explicit(&sq->tail, tail, memory_order_release);
	if (ret)
		*bad_wr = wr;
	if (flush || rdmap_qp_state(qp->core) == RDMAP_QP_ERROR)
		rdmap_qp_flush_idle(qp->core);
out:
	wisp_lock_give(&qp->post_lock);
	/* Send on this thread when the engine is not sending: one thread
	 * hand-off less per message (a burst of small posts corks:
	 * glue_conn_send_post). Otherwise the engine picks it up. */
	if (qp->stream.conn && !flush &&
	    !glue_conn_send_post(qp->stream.conn, len))
		glue_conn_kick(qp->stream.conn);
	return ret;
}

int wisp_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad_wr)
{
	return post_send_chain(ibqp, wr, bad_wr, false);
}

int wisp_qp_post_whole(struct ibv_qp *ibqp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return post_send_chain(ibqp, wr, &bad, true);
}

int wisp_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad_wr)
{
	struct wisp_qp *qp = to_wqp(ibqp);
	struct rdmap_ring *rq = rdmap_qp_rq(qp->core);
	enum ibv_qp_state st;
	uint32_t tail, head;
	int ret = 0;

	wisp_lock_take(&qp->post_lock);
	st = wisp_qp_state(qp);
	if (qp->srq || st == IBV_QPS_RESET) {
		ret = EINVAL;
		*bad_wr = wr;
		goto out;
	}
	tail = atomic_load_explicit(&rq->tail, memory_order_relaxed);
	for (; wr; wr = wr->next) {
		head = atomic_load_explicit(&rq->head, memory_order_acquire);
		if (tail - head >= qp->cap.max_recv_wr) {
			ret = ENOMEM;
			break;
		}
		ret = wisp_conv_recv(wr, rdmap_ring_slot(rq, tail),
				     WISP_MAX_SGE);
		if (ret)
			break;
		tail++;
	}
	atomic_store_explicit(&rq->tail, tail, memory_order_release);
	if (ret)
		*bad_wr = wr;
	if (st == IBV_QPS_ERR || rdmap_qp_state(qp->core) == RDMAP_QP_ERROR)
		rdmap_qp_flush_idle(qp->core);
out:
	wisp_lock_give(&qp->post_lock);
	return ret;
}
