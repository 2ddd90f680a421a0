// SPDX-License-Identifier: MIT
/*
 * glue_epoll.c - the epoll backend, for kernels or sandboxes that refuse
 * io_uring: non-blocking recvmsg / sendmsg tried at once, and retried on
 * edge-triggered readiness when the kernel said EAGAIN.
 */
#include "glue_internal.h"

#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* EPOLLERR in c->ep_want: a MSG_ZEROCOPY notification is awaited on the
 * error queue. The kernel reports EPOLLERR whatever is asked for; having
 * it in ep_want keeps the one-shot interest armed while nothing else is
 * waited for. */
#define EP_ZC EPOLLERR

struct epoll_priv {
	int epfd;
};

static int ep_init(struct glue_engine *e)
{
	struct epoll_priv *p = calloc(1, sizeof(*p));
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	if (!p)
		return -ENOMEM;
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (p->epfd < 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, e->wake_fd, &ev)) {
		int ret = -errno;

		if (p->epfd >= 0)
			close(p->epfd);
		free(p);
		return ret;
	}
	/* MSG_ZEROCOPY is per socket (SO_ZEROCOPY, ep_conn_add). */
	e->zc_avail = e->zc_min != 0;
	e->be_priv = p;
	return 0;
}

static void ep_fini(struct glue_engine *e)
{
	struct epoll_priv *p = e->be_priv;

	close(p->epfd);
	free(p);
	e->be_priv = NULL;
}

/* One-shot, level-triggered interest in what c waits for: the engine
 * hears about a socket only when it asked to, so a connection that an
 * application thread polls itself costs the engine no wake-ups. */
static void ep_mod(struct epoll_priv *p, struct glue_conn *c)
{
	struct epoll_event ev = {
		.events = c->ep_want | EPOLLONESHOT | EPOLLRDHUP,
		.data.ptr = c,
	};

	epoll_ctl(p->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static int ep_conn_add(struct glue_engine *e, struct glue_conn *c)
{
	struct epoll_priv *p = e->be_priv;
	struct epoll_event ev = {
		.events = EPOLLONESHOT,
		.data.ptr = c,
	};
	int one = 1;

	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, c->fd, &ev))
		return -errno;
	c->ep_want = 0;
	/* Without SO_ZEROCOPY the kernel ignores MSG_ZEROCOPY (and an old
	 * one refuses the option): then this socket always copies. */
	c->zc_ok = e->zc_min && !c->tls &&
		   !setsockopt(c->fd, SOL_SOCKET, SO_ZEROCOPY, &one,
			       sizeof(one));
	return 0;
}

static void ep_conn_del(struct glue_engine *e, struct glue_conn *c)
{
	struct epoll_priv *p = e->be_priv;

	epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

static void try_tx(struct glue_engine *e, struct epoll_priv *p,
		   struct glue_conn *c)
{
	int fl = MSG_DONTWAIT | MSG_NOSIGNAL;
	ssize_t n;

	if (c->tx_zc)
		fl |= MSG_ZEROCOPY;
	n = sendmsg(c->fd, &c->tx_msg, fl);
	if (n < 0 && errno == ENOBUFS && c->tx_zc) {
		/* Over the socket's optmem_max for pinned-page notices:
		 * this send copies. */
		atomic_fetch_add_explicit(&e->zc_st.fallback, 1,
					  memory_order_relaxed);
		c->tx_zc = false;
		n = sendmsg(c->fd, &c->tx_msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	if (n < 0 && errno == EAGAIN) {
		glue_stat_tx_eagain(c);
		c->ep_want |= EPOLLOUT;
		ep_mod(p, c);
		return;
	}
	if (n > 0 && c->tx_zc) {
		/* Each MSG_ZEROCOPY sendmsg that took octets has the next
		 * number; its notification (a range of them) comes on the
		 * error queue. */
		atomic_fetch_add_explicit(&e->zc_st.sends, 1,
					  memory_order_relaxed);
		c->zc_id = c->zc_next++;
		c->zc_res = n;
		c->ep_want |= EP_ZC;
		ep_mod(p, c);
		return;
	}
	glue_tx_result(c, n < 0 ? -errno : n);
}

/* Read c's error queue. Returns 1 if the awaited notification was among
 * what it held, 0 if not, -1 if it held nothing at all. */
static int zc_drain(struct glue_conn *c)
{
	int found = -1;

	for (;;) {
		union {
			char buf[CMSG_SPACE(sizeof(struct sock_extended_err))];
			struct cmsghdr align;
		} ctl;
		struct msghdr msg = {
			.msg_control = ctl.buf,
			.msg_controllen = sizeof(ctl.buf),
		};
		struct cmsghdr *cm;

		if (recvmsg(c->fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return found;
		if (found < 0)
			found = 0;
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			struct sock_extended_err ee;

			if (!((cm->cmsg_level == SOL_IP &&
			       cm->cmsg_type == IP_RECVERR) ||
			      (cm->cmsg_level == SOL_IPV6 &&
			       cm->cmsg_type == IPV6_RECVERR)))
				continue;
			memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
			if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			/* [ee_info, ee_data], numbers that wrap. */
			if (c->zc_id - ee.ee_info > ee.ee_data - ee.ee_info)
				continue;
			glue_zc_notified(c, ee.ee_code &
					    SO_EE_CODE_ZEROCOPY_COPIED);
			found = 1;
		}
	}
}

/* EPOLLERR while a notification is awaited: take it if it came. Returns
 * false if the error queue was empty (a real socket error). */
static bool zc_event(struct glue_conn *c)
{
	int r = zc_drain(c);

	if (r > 0) {
		c->ep_want &= ~(uint32_t)EP_ZC;
		glue_tx_result(c, c->zc_res);
	}
	return r >= 0;
}

/* The engine closed c's socket: no notification can come now, and the
 * reset freed the segments that held the pages. */
static void ep_zc_closed(struct glue_engine *e, struct glue_conn *c)
{
	(void)e;
	c->ep_want &= ~(uint32_t)EP_ZC;
	glue_tx_result(c, c->zc_res);
}

static void ep_arm_rx(struct glue_engine *e, struct glue_conn *c)
{
	c->ep_want |= EPOLLIN;
	ep_mod(e->be_priv, c);
}

static void ep_start_tx(struct glue_engine *e, struct glue_conn *c)
{
	try_tx(e, e->be_priv, c);
}

static void ep_arm_tx(struct glue_engine *e, struct glue_conn *c)
{
	c->ep_want |= EPOLLOUT;
	ep_mod(e->be_priv, c);
}

static int ep_poll(struct glue_engine *e, int timeout_ms)
{
	struct epoll_priv *p = e->be_priv;
	struct epoll_event evs[64];
	int n = epoll_wait(p->epfd, evs, 64, timeout_ms);

	for (int i = 0; i < n; i++) {
		struct glue_conn *c = evs[i].data.ptr;
		uint32_t ev = evs[i].events;

		if (!c) {
			glue_wake_drain(e);
			continue;
		}
		/* A zero-copy notification is not an error: the events
		 * waited for stay armed unless a hang-up came too. */
		if ((c->ep_want & EP_ZC) && (ev & EPOLLERR) && zc_event(c) &&
		    !(ev & EPOLLHUP))
			ev &= ~(uint32_t)EPOLLERR;
		/* One-shot: nothing is armed any more. */
		if (ev & (EPOLLHUP | EPOLLERR))
			ev |= c->ep_want;
		if ((c->ep_want & EPOLLIN) &&
		    (ev & (EPOLLIN | EPOLLRDHUP))) {
			c->ep_want &= ~(uint32_t)EPOLLIN;
			glue_rx_ready(c);
		}
		if ((c->ep_want & EPOLLOUT) && (ev & EPOLLOUT)) {
			c->ep_want &= ~(uint32_t)EPOLLOUT;
			if (c->tx_busy && c->tls)
				glue_tx_result(c, -EAGAIN);   /* TLS retries */
			else if (c->tx_busy)
				try_tx(e, p, c);
		}
		if (c->ep_want)
			ep_mod(p, c);
	}
	return n > 0 ? n : 0;
}

static void ep_wait(struct glue_engine *e, int timeout_ms)
{
	ep_poll(e, timeout_ms);
}

static int ep_peek(struct glue_engine *e)
{
	return ep_poll(e, 0);
}

const struct glue_backend glue_epoll_backend = {
	.name = "epoll",
	.init = ep_init,
	.fini = ep_fini,
	.conn_add = ep_conn_add,
	.conn_del = ep_conn_del,
	.arm_rx = ep_arm_rx,
	.start_tx = ep_start_tx,
	.arm_tx = ep_arm_tx,
	.wait = ep_wait,
	.peek = ep_peek,
	.zc_closed = ep_zc_closed,
};
