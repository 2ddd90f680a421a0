// SPDX-License-Identifier: MIT
/*
 * glue_uring.c - the io_uring backend: one recvmsg and one sendmsg in
 * flight per connection, and a read on the wake eventfd, all reaped from
 * a single completion queue.
 */
#include "glue_internal.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>

#define RING_ENTRIES 256

/* user_data: the connection pointer with the operation in its low bits
 * (connections come from calloc: at least 8-byte aligned); 0 is the
 * wake read. */
enum {
	OP_WAKE = 0, OP_RX = 1, OP_TX = 2, OP_TXPOLL = 3, OP_TXZC = 4,
	OP_MASK = 7
};
_Static_assert(_Alignof(max_align_t) > OP_MASK, "room for the op bits");

/* Newer than liburing 2.3's header (Linux 6.2 uapi): ask the notification
 * CQE to say whether the kernel copied after all. */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

struct uring_priv {
	struct io_uring ring;
	uint64_t wake_buf;
	bool wake_armed;
	/* IORING_OP_SENDMSG_ZC is there (probed); the ioprio flags its
	 * SQEs carry (REPORT_USAGE until a kernel refuses it). */
	bool zc;
	uint16_t zc_flags;
};

/* Does the kernel know IORING_OP_SENDMSG_ZC (Linux 6.1)? */
static bool probe_sendmsg_zc(struct io_uring *ring)
{
	struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
	bool ok;

	if (!probe)
		return false;
	ok = io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC);
	io_uring_free_probe(probe);
	return ok;
}

static struct io_uring_sqe *get_sqe(struct uring_priv *p)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);

	if (!sqe) {
		/* Full: hand what is queued to the kernel and retry. */
		io_uring_submit(&p->ring);
		sqe = io_uring_get_sqe(&p->ring);
	}
	return sqe;
}

static void arm_wake(struct glue_engine *e, struct uring_priv *p)
{
	struct io_uring_sqe *sqe;

	if (p->wake_armed)
		return;
	sqe = get_sqe(p);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, e->wake_fd, &p->wake_buf, sizeof(p->wake_buf),
			   0);
	io_uring_sqe_set_data64(sqe, OP_WAKE);
	p->wake_armed = true;
}

static int uring_init(struct glue_engine *e)
{
	struct uring_priv *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	/* Only the engine thread submits to and reaps its ring, so a
	 * completion need not interrupt it with an IPI while it runs (a
	 * busy-polling engine reads the socket itself meanwhile); one
	 * asleep in io_uring_enter is still woken. Kernels before 5.19
	 * refuse the flag: then without it. */
	ret = io_uring_queue_init(RING_ENTRIES, &p->ring,
				  IORING_SETUP_COOP_TASKRUN);
	if (ret == -EINVAL)
		ret = io_uring_queue_init(RING_ENTRIES, &p->ring, 0);
	if (ret) {
		free(p);
		return ret;
	}
	if (e->zc_min) {
		p->zc = probe_sendmsg_zc(&p->ring);
		p->zc_flags = IORING_SEND_ZC_REPORT_USAGE;
		e->zc_avail = p->zc;
	}
	e->be_priv = p;
	return 0;
}

static void uring_fini(struct glue_engine *e)
{
	struct uring_priv *p = e->be_priv;

	io_uring_queue_exit(&p->ring);
	free(p);
	e->be_priv = NULL;
}

static int uring_conn_add(struct glue_engine *e, struct glue_conn *c)
{
	struct uring_priv *p = e->be_priv;

	/* SENDMSG_ZC needs no socket option; TLS sends from user space. */
	c->zc_ok = p->zc && !c->tls;
	return 0;
}

static void uring_conn_del(struct glue_engine *e, struct glue_conn *c)
{
	(void)e;
	(void)c;
}

static void uring_arm_rx(struct glue_engine *e, struct glue_conn *c)
{
	struct uring_priv *p = e->be_priv;
	struct io_uring_sqe *sqe = get_sqe(p);

	if (!sqe) {
		c->rx_armed = false;      /* try again at the next pass */
		return;
	}
	/* Readiness, then non-blocking recvmsg into the target: the engine
	 * and a polling application thread can then both receive. */
	io_uring_prep_poll_add(sqe, c->fd, POLLIN | POLLRDHUP);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_RX);
	c->rx_op = true;
}

static void uring_start_tx(struct glue_engine *e, struct glue_conn *c)
{
	struct uring_priv *p = e->be_priv;
	struct io_uring_sqe *sqe = get_sqe(p);

	if (!sqe) {
		glue_tx_result(c, -EAGAIN);
		return;
	}
	/* MSG_NOSIGNAL: a peer that vanished is an EPIPE result, not a
	 * SIGPIPE that kills the application. */
	if (c->tx_zc) {
		/* Two CQEs: the send's result (with IORING_CQE_F_MORE),
		 * then the notification once the pages are free. */
		io_uring_prep_sendmsg_zc(sqe, c->fd, &c->tx_msg, MSG_NOSIGNAL);
		sqe->ioprio |= p->zc_flags;
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_TXZC);
		atomic_fetch_add_explicit(&e->zc_st.sends, 1,
					  memory_order_relaxed);
		return;
	}
	io_uring_prep_sendmsg(sqe, c->fd, &c->tx_msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_TX);
}

/* A CQE of a zero-copy send. The result is c's once the notification
 * came, or at once when none will (no IORING_CQE_F_MORE). */
static void zc_cqe(struct uring_priv *p, struct glue_conn *c,
		   const struct io_uring_cqe *cqe)
{
	if (cqe->flags & IORING_CQE_F_NOTIF) {
		glue_zc_notified(c, (uint32_t)cqe->res &
				    IORING_NOTIF_USAGE_ZC_COPIED);
		glue_tx_result(c, c->zc_res);
		return;
	}
	if (cqe->flags & IORING_CQE_F_MORE) {
		c->zc_res = cqe->res;
		return;
	}
	if (cqe->res == -EINVAL && p->zc_flags) {
		/* A kernel before 6.2: no usage report. Send again
		 * without asking for it. */
		p->zc_flags = 0;
		glue_tx_result(c, -EAGAIN);
		return;
	}
	glue_tx_result(c, cqe->res);
}

/* The engine closed c's socket; the notification still comes (the
 * reset freed the segments), so keep waiting for it. */
static void uring_zc_closed(struct glue_engine *e, struct glue_conn *c)
{
	(void)e;
	(void)c;
}

static void uring_arm_tx(struct glue_engine *e, struct glue_conn *c)
{
	struct uring_priv *p = e->be_priv;
	struct io_uring_sqe *sqe = get_sqe(p);

	if (!sqe) {
		glue_tx_result(c, -EAGAIN);
		return;
	}
	/* TLS sends from user space (glue_tls_tx): only the readiness is
	 * the ring's. */
	io_uring_prep_poll_add(sqe, c->fd, POLLOUT);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_TXPOLL);
}

static void dispatch(struct glue_engine *e, struct uring_priv *p,
		     struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	struct glue_conn *c = (struct glue_conn *)(uintptr_t)(ud & ~(uint64_t)OP_MASK);

	switch (ud & OP_MASK) {
	case OP_WAKE:
		p->wake_armed = false;
		break;
	case OP_RX:
		glue_rx_ready(c);
		break;
	case OP_TX:
		glue_tx_result(c, cqe->res);
		break;
	case OP_TXPOLL:
		glue_tx_result(c, -EAGAIN);
		break;
	case OP_TXZC:
		zc_cqe(p, c, cqe);
		break;
	default:
		break;
	}
	(void)e;
}

static void uring_wait(struct glue_engine *e, int timeout_ms)
{
	struct uring_priv *p = e->be_priv;
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts;
	unsigned int head, n = 0;
	int ret;

	arm_wake(e, p);
	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
	}
	ret = io_uring_submit_and_wait_timeout(&p->ring, &cqe, 1,
					       timeout_ms >= 0 ? &ts : NULL,
					       NULL);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return;
	io_uring_for_each_cqe(&p->ring, head, cqe) {
		dispatch(e, p, cqe);
		n++;
	}
	io_uring_cq_advance(&p->ring, n);
}

/* Busy polling: the completion ring is shared memory, so looking at it
 * costs no system call; only requests queued since the last submit take
 * one. */
static int uring_peek(struct glue_engine *e)
{
	struct uring_priv *p = e->be_priv;
	struct io_uring_cqe *cqe;
	unsigned int head, n = 0;

	arm_wake(e, p);
	if (io_uring_sq_ready(&p->ring))
		io_uring_submit(&p->ring);
	io_uring_for_each_cqe(&p->ring, head, cqe) {
		dispatch(e, p, cqe);
		n++;
	}
	io_uring_cq_advance(&p->ring, n);
	return (int)n;
}

const struct glue_backend glue_uring_backend = {
	.name = "io_uring",
	.init = uring_init,
	.fini = uring_fini,
	.conn_add = uring_conn_add,
	.conn_del = uring_conn_del,
	.arm_rx = uring_arm_rx,
	.start_tx = uring_start_tx,
	.arm_tx = uring_arm_tx,
	.wait = uring_wait,
	.peek = uring_peek,
	.zc_closed = uring_zc_closed,
};
