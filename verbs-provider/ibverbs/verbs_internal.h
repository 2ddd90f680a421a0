/* SPDX-License-Identifier: MIT */
/*
 * verbs_internal.h - the data-path objects of wisp's libibverbs.so.1 and
 * the calls between their files (internal to the library).
 *
 * The files depend on each other in one direction only:
 *
 *   verbs_context.c   the context: its engine, STag table, async events
 *   verbs_mr.c        MRs            -> context
 *   verbs_cq.c        CQs, channels  -> context
 *   verbs_srq.c       SRQs           -> context
 *   verbs_qp.c        QPs            -> context, CQ, SRQ
 *   verbs_stream.c    a QP's stream  -> context, CQ, QP
 *   verbs_qpx.c       ibv_qp_ex      -> QP
 *
 * A CQ knows the TCP connections whose completions it collects (so that
 * an empty poll can receive on them), never the QPs behind them.
 */
#ifndef WISP_VERBS_INTERNAL_H
#define WISP_VERBS_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rdmap_qp.h"
#include "wisp_verbs.h"
#include "../wisp_private.h"

struct glue_conn;

/* ---- verbs_cq.c -------------------------------------------------- */

enum { CQ_DISARMED, CQ_ARMED_SOLICITED, CQ_ARMED_ANY };

struct wisp_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	} base;
	struct ibv_wc *ring;
	uint32_t size;            /* power of two */
	_Atomic uint32_t head, tail;
	struct wisp_lock prod_lock, cons_lock;
	atomic_int armed;
	atomic_bool overrun;
	atomic_int users;         /* QPs using it */
	/* Channel events raised and not yet read, under the channel's
	 * lock: while there are any, the CQ is on the channel's list,
	 * once, however many. */
	uint32_t ev_pending;
	struct wisp_cq *ev_next;
	struct ibv_wc cur;        /* the extended CQ's current entry */
	/* The streams completing here, which a poller may receive on
	 * itself. The array has room for one per user, so adding never
	 * fails. conns_lock serialises those who change the list (and
	 * wisp_req_notify_cq); conns_busy: someone uses it, a poller (taken
	 * inline, never waited for: with another at it, the poller skips)
	 * or a holder of conns_lock, who sets conns_wanted first so that
	 * pollers leave it (verbs_cq.c, "The list of streams"). */
	pthread_mutex_t conns_lock;
	atomic_bool conns_busy, conns_wanted;
	struct wisp_cq_stream *conns;
	atomic_int nconns;
	int conns_cap;
};

/*
 * A stream on a CQ's list, with the QP core whose send completions come
 * there: NULL when the CQ is the QP's receive CQ, whose completions come
 * from what arrives. A send CQ gets a completion from what arrives only
 * while Read Requests wait for their responses (rdmap_qp_reads_out), so
 * only then does a poller that finds it empty receive, and keep the
 * engine off the socket (glue_conn_recv_now). A thread that reaps send
 * completions and then waits for WRITEs by watching memory leaves the
 * stream to the engine.
 */
struct wisp_cq_stream {
	struct glue_conn *conn;
	const struct rdmap_qp *sends;
};

static inline struct wisp_cq *to_wcq(struct ibv_cq *cq)
{
	return container_of(cq, struct wisp_cq, base.cq);
}

/* A QP starts using cq: count it and make room for its stream. Returns
 * 0 or ENOMEM. */
int wisp_cq_get(struct wisp_cq *cq);
/* The QP no longer uses cq (its stream is off the list). */
void wisp_cq_put(struct wisp_cq *cq);

/* Put c on cq's list of streams (room was made by wisp_cq_get); sends as
 * struct wisp_cq_stream says. */
void wisp_cq_add_conn(struct wisp_cq *cq, struct glue_conn *c,
		      const struct rdmap_qp *sends);
/* Take c off it; returns once no poller is receiving on c. */
void wisp_cq_del_conn(struct wisp_cq *cq, const struct glue_conn *c);

/* Append a completion (any thread); raise the channel event if armed.
 * A thread inside ibv_poll_cq of cq that finds cq's ring empty hands it
 * straight to its caller instead (verbs_cq.c, "A poller's own
 * completions"). */
void wisp_cq_push(struct wisp_cq *cq, const struct ibv_wc *wc, bool solicited);

/* ---- verbs_srq.c ------------------------------------------------- */

struct wisp_srq {
	struct ibv_srq base;
	pthread_mutex_t lock;
	struct rdmap_recv_wr *ring;
	uint32_t size, head, tail;
	uint32_t max_wr, max_sge, limit;
	atomic_int users;         /* QPs using it */
};

static inline struct wisp_srq *to_wsrq(struct ibv_srq *srq)
{
	return container_of(srq, struct wisp_srq, base);
}

/* Take the next posted receive into out (engine thread, under the
 * QP's core lock); false if none. Raises the limit event. */
bool wisp_srq_pop(struct wisp_srq *srq, struct rdmap_recv_wr *out);

/* ---- verbs_qp.c -------------------------------------------------- */

/* The TCP stream of a QP, once attached (verbs_stream.c). */
struct wisp_stream {
	struct glue_engine *engine;
	struct glue_conn *conn;
	pthread_mutex_t end_lock;
	pthread_cond_t end_cond;
	bool ended;               /* the engine's ended() has run */
	int end_reason;
	wisp_stream_end_fn end_fn;
	void *end_arg;
};

struct wisp_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx;
	} base;
	struct rdmap_qp *core;
	struct wisp_lock post_lock;
	/* Serialises the core between the engine thread, a posting thread
	 * that sends directly (glue_conn_send_now) and a polling thread
	 * that receives directly (glue_conn_recv_now). */
	struct wisp_lock core_lock;
	/* rx_want left core_lock held for its rx_done (verbs_stream.c).
	 * Only the thread receiving on the stream uses it, and receives are
	 * serialised by the engine (glue's rx_lock). */
	bool rx_held;
	/* Completions the core made for this QP (core_complete), read by
	 * s_rx_done before and after rdmap_qp_rx_done to learn whether what
	 * arrived completed work. Relaxed load and store, no read-modify-
	 * write: almost every completion is made under core_lock; a flush
	 * on a posting thread (post_lock only) that loses a count costs at
	 * worst one wait too many (glue.h GLUE_RX_COMPLETED is a hint). */
	_Atomic uint32_t ncqe;
	struct wisp_cq *scq, *rcq;
	struct wisp_srq *srq;
	struct wisp_qp *qps_next;     /* process-wide list */
	struct ibv_qp_cap cap;
	bool sq_sig_all;
	uint8_t ord, ird;         /* max_rd_atomic, max_dest_rd_atomic */
	int access_flags;
	struct wisp_stream stream;
	struct wisp_stats_qp *stats;  /* published counters (verbs_stats.h) */
	struct wisp_qpx *x;       /* the ibv_wr_* batch, if send_ops_flags */
};

static inline struct wisp_qp *to_wqp(struct ibv_qp *qp)
{
	return container_of(qp, struct wisp_qp, base.qp);
}

static inline enum ibv_qp_state wisp_qp_state(const struct wisp_qp *qp)
{
	return (enum ibv_qp_state)__atomic_load_n(&qp->base.qp.state,
						  __ATOMIC_ACQUIRE);
}

static inline void wisp_qp_set_state(struct wisp_qp *qp, enum ibv_qp_state s)
{
	__atomic_store_n(&qp->base.qp.state, s, __ATOMIC_RELEASE);
}

/* Enter ERROR and flush every WR, serialised with the data path. */
void wisp_qp_core_end(struct wisp_qp *qp, int reason);

/* ibv_dereg_mr: mr was unpublished with references still held; make
 * every QP of ctx drop them without waiting for a peer (rdmap_qp_revoke)
 * and return once the engine has started to. */
void wisp_qps_revoke_mr(struct ibv_context *ctx, const struct rdmap_mr *mr);

/* Close the stream on the engine thread unless it is already over:
 * graceful flushes locally at once and lets the peer learn from the
 * FIN; otherwise the socket is shut down. No-op without a stream. */
void wisp_qp_stream_close(struct wisp_qp *qp, int reason, bool graceful);

/* Post the chain wr to qp's SQ, all of it or (on error) none of it.
 * Returns 0 or a positive errno as ibv_post_send. */
int wisp_qp_post_whole(struct ibv_qp *qp, struct ibv_send_wr *wr);

/* ---- verbs_qpx.c ------------------------------------------------- */

/* The send operations ibv_create_qp_ex accepts in send_ops_flags. */
#define WISP_QPX_SEND_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | \
			   IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ)

/* Give qp the extended post API (qp->base.qpx's function pointers and
 * qp->x). Returns 0 or ENOMEM. */
int wisp_qpx_init(struct wisp_qp *qp);
/* Free what wisp_qpx_init allocated (no-op without it). */
void wisp_qpx_fini(struct wisp_qp *qp);

/* ---- shared by verbs_qp.c and verbs_srq.c ------------------------ */

/* A receive WR into the ring format; EINVAL if it has too many SGEs. */
static inline int wisp_conv_recv(const struct ibv_recv_wr *wr,
				 struct rdmap_recv_wr *r, uint32_t max_sge)
{
	uint64_t len = 0;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge)
		return EINVAL;
	r->wr_id = wr->wr_id;
	r->num_sge = (uint8_t)wr->num_sge;
	for (int i = 0; i < wr->num_sge; i++) {
		r->sge[i].addr = wr->sg_list[i].addr;
		r->sge[i].length = wr->sg_list[i].length;
		r->sge[i].lkey = wr->sg_list[i].lkey;
		len += wr->sg_list[i].length;
	}
	r->length = len;
	return 0;
}

#endif /* WISP_VERBS_INTERNAL_H */
