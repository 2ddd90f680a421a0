// SPDX-License-Identifier: MIT
/*
 * verbs_stream.c - a QP's TCP stream as the engine sees it: the four
 * glue_conn_ops callbacks that move octets between the socket and the
 * QP's core, the end of the stream, and the private calls of
 * wisp_private.h that attach a connected socket to a QP, watch its end
 * and disconnect it. The QP's own file (verbs_qp.c) closes and frees the
 * stream; nothing there calls in here.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_stats.h"
#include "rdmap_qp.h"
#include "verbs_internal.h"
#include "verbs_stats.h"

/* ------------------------------------------------------------------ */
/* The stream, seen from the engine                                   */
/* ------------------------------------------------------------------ */

/*
 * The core stays locked from rx_want to rx_done, across the recv
 * between them (glue.h promises the pair, on one thread), when the
 * iovecs may point into a posted receive buffer or a tagged MR: while
 * the kernel copies into them, no other thread may complete that
 * receive (a flush: a send failing on a posting thread, a disconnect on
 * the engine) or drop the MR references that keep ibv_dereg_mr
 * waiting, or the application could reuse memory the kernel is still
 * writing. Every path that does takes the core lock, so none can run
 * inside the copy. The price: a tx_fill on another thread waits for one
 * recv.
 *
 * A receive into the QP's own stage (between FPDUs: every small
 * message's read and every empty poll) takes no lock until octets have
 * arrived (rdmap_qp_rx_want_staged says when, and why that is safe):
 * the kernel writes only into the stage, which only the receiving
 * thread and rdmap_qp_trim (under the same rx_lock of the engine's)
 * touch, and whatever another thread does to the QP meanwhile (a
 * flush, a revoke: both fail it) rx_done sees under the lock. An empty
 * poll then costs no lock at all (issue 13).
 */
static int s_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct wisp_qp *qp = arg;
	int n = rdmap_qp_rx_want_staged(qp->core, iov, cap);

	qp->rx_held = !n;
	if (n)
		return n;
	wisp_lock_take(&qp->core_lock);
	return rdmap_qp_rx_want(qp->core, iov, cap);
}

/* s_rx_done with octets, the core locked. Out of line: an empty poll's
 * s_rx_done then saves and restores no registers. */
__attribute__((noinline))
static int rx_done_locked(struct wisp_qp *qp, size_t n)
{
	/* Say whether it completed work: a posting thread waits for
	 * answers that complete nothing (glue.h GLUE_RX_COMPLETED).
	 * Counted per QP (core_complete): no look at the CQs nor at this
	 * thread's hand-off to its ibv_poll_cq (a TLS lookup). */
	uint32_t ncqe = atomic_load_explicit(&qp->ncqe, memory_order_relaxed);
	int ret = rdmap_qp_rx_done(qp->core, n);

	if (atomic_load_explicit(&qp->ncqe, memory_order_relaxed) != ncqe)
		ret |= GLUE_RX_COMPLETED;
	wisp_lock_give(&qp->core_lock);
	return ret;
}

static int s_rx_done(void *arg, size_t n)
{
	struct wisp_qp *qp = arg;

	if (!qp->rx_held) {
		/* A staged receive that brought nothing: nothing changed. */
		if (!n)
			return 0;
		wisp_lock_take(&qp->core_lock);
	} else if (!n) {
		wisp_lock_give(&qp->core_lock);
		return 0;
	}
	return rx_done_locked(qp, n);
}

static int s_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct wisp_qp *qp = arg;
	int ret;

	wisp_lock_take(&qp->core_lock);
	ret = rdmap_qp_tx_fill(qp->core, iov, cap);
	wisp_lock_give(&qp->core_lock);
	return ret;
}

static int s_tx_done(void *arg, size_t n)
{
	struct wisp_qp *qp = arg;
	int ret;

	wisp_lock_take(&qp->core_lock);
	ret = rdmap_qp_tx_done(qp->core, n) ? GLUE_TX_CLOSE : 0;
	/* Under the same lock: rdmap_qp_tx_fill gives nothing without it
	 * (the sender then skips asking). */
	if (!rdmap_qp_tx_pending(qp->core))
		ret |= GLUE_TX_IDLE;
	wisp_lock_give(&qp->core_lock);
	return ret;
}

static int64_t s_timer(void *arg, int64_t now_ms, bool *send)
{
	struct wisp_qp *qp = arg;
	int64_t next;

	wisp_lock_take(&qp->core_lock);
	next = rdmap_qp_tick(qp->core, now_ms, send);
	wisp_lock_give(&qp->core_lock);
	return next;
}

static bool s_idle(void *arg)
{
	struct wisp_qp *qp = arg;
	bool held;

	wisp_lock_take(&qp->core_lock);
	held = rdmap_qp_trim(qp->core);
	wisp_lock_give(&qp->core_lock);
	return held;
}

static void s_ended(void *arg, int reason)
{
	struct wisp_qp *qp = arg;
	struct wisp_stream *s = &qp->stream;
	wisp_stream_end_fn fn;
	void *fn_arg;

	/* RFC 5040 5.6 / verbs: losing the stream is fatal to the QP;
	 * every outstanding WR is flushed. */
	wisp_qp_core_end(qp, reason);
	wisp_qp_set_state(qp, IBV_QPS_ERR);
	wisp_stats_qp_ended(qp->stats, reason);
	pthread_mutex_lock(&s->end_lock);
	s->ended = true;
	s->end_reason = reason;
	fn = s->end_fn;
	fn_arg = s->end_arg;
	pthread_cond_broadcast(&s->end_cond);
	pthread_mutex_unlock(&s->end_lock);
	if (fn)
		fn(&qp->base.qp, reason, fn_arg);
}

_Static_assert(RDMAP_RX_CLOSE == GLUE_RX_CLOSE && RDMAP_RX_SEND == GLUE_RX_SEND &&
	       RDMAP_RX_PARTIAL == GLUE_RX_PARTIAL &&
	       !(GLUE_RX_COMPLETED & (RDMAP_RX_CLOSE | RDMAP_RX_SEND |
				      RDMAP_RX_PARTIAL)),
	       "rx_done flags pass through unchanged");

static const struct glue_conn_ops stream_ops = {
	.ended = s_ended,
	.idle = s_idle,
	.rx_done = s_rx_done,
	.rx_want = s_rx_want,
	.timer = s_timer,
	.tx_done = s_tx_done,
	.tx_fill = s_tx_fill,
};

/* ------------------------------------------------------------------ */
/* wisp_private.h                                                     */
/* ------------------------------------------------------------------ */

/* The QP's start for the RTR an MPA exchange negotiated (RFC 6581 9.2,
 * 9.3): the initiator sends it, the responder waits for the peer's first
 * FPDU. 0 or a positive errno. */
static int stream_rtr(const struct wisp_stream_params *p, enum rdmap_rtr *out)
{
	if (!p->p2p) {
		*out = RDMAP_RTR_NONE;
		return 0;
	}
	if (!p->initiator) {
		*out = RDMAP_RTR_EXPECT;
		return 0;
	}
	switch (p->rtr) {
	case MPA_RTR_WRITE:
		*out = RDMAP_RTR_SEND_WRITE;
		return 0;
	case MPA_RTR_READ:
		*out = RDMAP_RTR_SEND_READ;
		return 0;
	case MPA_RTR_SEND:
		/* A zero-length SEND needs a receive the peer's ULP posted
		 * before it knows it is connected: never offered. */
		return EOPNOTSUPP;
	default:
		return EINVAL;
	}
}

/* The core's view of the negotiated stream; MULPDU from the socket.
 * 0 or a positive errno. */
static int stream_cfg(const struct wisp_qp *qp, int fd,
		      const struct wisp_stream_params *p,
		      struct rdmap_stream_cfg *s)
{
	int mss = glue_sock_mss(fd);

	/* FPDUs no larger than the MSS (RFC 5044 section 6.1: MULPDU from
	 * EMSS) so that every FPDU can travel in one TCP segment. With a
	 * peer that takes larger ones (below) the MSS still bounds how many
	 * octets go out per gathered send (rdmap_stream_cfg.emss). */
	if (mss < 536)
		mss = 1460;
	s->emss = (uint32_t)mss;
	s->mulpdu = mpa_mulpdu((uint32_t)mss, false);
	/* Between two wisp peers that negotiated it (wisp's extension,
	 * docs/wire-formats.md) an FPDU may span many segments: fewer
	 * headers, CRCs and placements per octet. Never above what the peer
	 * accepts nor what MPA sends (RFC 5044 section 3). */
	if (p->peer_max_ulpdu > s->mulpdu)
		s->mulpdu = p->peer_max_ulpdu < MPA_ULPDU_SEND_MAX ?
			    p->peer_max_ulpdu : MPA_ULPDU_SEND_MAX;
	s->crc = p->crc;
	/* Not negotiated (rev 1, or rev 2 without the enhanced words):
	 * fall back to the QP's own attributes. */
	s->ird = p->ird ? p->ird : qp->ird;
	s->ord = p->ord ? p->ord : qp->ord;
	/* RFC 5044 7.1.2: the Responder sends nothing before the
	 * Initiator's first FPDU, with or without an RTR (rdmap_qp_start). */
	s->responder = !p->initiator;
	return stream_rtr(p, &s->rtr);
}

int wisp_qp_attach_stream(struct ibv_qp *ibqp, int fd,
			  const struct wisp_stream_params *p)
{
	struct rdmap_stream_cfg s = { 0 };
	struct glue_conn *c;
	struct wisp_qp *qp;
	enum ibv_qp_state st;
	int ret;

	if (!ibqp || !p || fd < 0 || (p->mpa_rev != 1 && p->mpa_rev != 2)) {
		ret = EINVAL;
		goto err_close;
	}
	if (p->markers) {
		ret = EOPNOTSUPP;
		goto err_close;
	}
	qp = to_wqp(ibqp);
	st = wisp_qp_state(qp);
	if (st != IBV_QPS_INIT && st != IBV_QPS_RTR && st != IBV_QPS_RTS) {
		ret = EINVAL;
		goto err_close;
	}
	if (qp->stream.conn) {
		ret = EBUSY;
		goto err_close;
	}
	qp->stream.engine = wisp_context_engine(to_wctx(ibqp->context));
	if (!qp->stream.engine) {
		ret = errno;
		goto err_close;
	}
	ret = stream_cfg(qp, fd, p, &s);
	if (ret)
		goto err_close;
	wisp_lock_take(&qp->post_lock);
	ret = -rdmap_qp_start(qp->core, &s);
	if (!ret)
		wisp_qp_set_state(qp, IBV_QPS_RTS);
	wisp_lock_give(&qp->post_lock);
	if (ret)
		goto err_close;
	qp->stream.ended = false;
	wisp_stats_qp_attached(qp->stats, ibqp->qp_num, fd, p, s.mulpdu);
	c = glue_conn_adopt(qp->stream.engine, fd, &stream_ops, qp,
			    p->sock_ready ? GLUE_CONN_NONBLOCK |
					    GLUE_CONN_NODELAY : 0);
	if (!c) {
		ret = errno;
		wisp_qp_core_end(qp, ret);
		wisp_qp_set_state(qp, IBV_QPS_ERR);
		return ret;
	}
	/* Under the core lock: the engine may already be receiving on c,
	 * and core_fatal (called with that lock) reads stream.conn to start
	 * the close. A QP that failed before c was known closes now. */
	wisp_lock_take(&qp->core_lock);
	qp->stream.conn = c;
	if (rdmap_qp_state(qp->core) == RDMAP_QP_ERROR)
		glue_conn_close_soon(c);
	wisp_lock_give(&qp->core_lock);
	glue_conn_set_stats(c, wisp_stats_qp_sock(qp->stats));
	/* From now on a thread polling an empty CQ of the QP may receive
	 * on the stream itself. */
	wisp_cq_add_conn(qp->scq, c, qp->rcq == qp->scq ? NULL : qp->core);
	if (qp->rcq != qp->scq)
		wisp_cq_add_conn(qp->rcq, c, NULL);
	/* WRs posted between start and now were not kicked. */
	glue_conn_kick(c);
	return 0;

err_close:
	close(fd);
	return ret;
}

int wisp_qp_set_stream_end_cb(struct ibv_qp *ibqp, wisp_stream_end_fn fn,
			      void *arg)
{
	struct wisp_stream *s;

	if (!ibqp)
		return EINVAL;
	s = &to_wqp(ibqp)->stream;
	pthread_mutex_lock(&s->end_lock);
	s->end_fn = fn;
	s->end_arg = arg;
	pthread_mutex_unlock(&s->end_lock);
	return 0;
}

int wisp_qp_disconnect(struct ibv_qp *ibqp)
{
	struct wisp_qp *qp;

	if (!ibqp)
		return EINVAL;
	qp = to_wqp(ibqp);
	if (!qp->stream.conn) {
		wisp_qp_core_end(qp, 0);
		wisp_qp_set_state(qp, IBV_QPS_ERR);
		return 0;
	}
	wisp_qp_stream_close(qp, 0, true);
	return 0;
}
