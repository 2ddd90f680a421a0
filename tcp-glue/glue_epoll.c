// SPDX-License-Identifier: MIT
/*
 * glue_epoll.c - the epoll backend, for kernels or sandboxes that refuse
 * io_uring: non-blocking recvmsg / sendmsg tried at once, and retried on
 * edge-triggered readiness when the kernel said EAGAIN.
 */
#include "glue_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

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

	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, c->fd, &ev))
		return -errno;
	c->ep_want = 0;
	return 0;
}

static void ep_conn_del(struct glue_engine *e, struct glue_conn *c)
{
	struct epoll_priv *p = e->be_priv;

	epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

static void try_tx(struct epoll_priv *p, struct glue_conn *c)
{
	ssize_t n = sendmsg(c->fd, &c->tx_msg, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0 && errno == EAGAIN) {
		glue_stat_tx_eagain(c);
		c->ep_want |= EPOLLOUT;
		ep_mod(p, c);
		return;
	}
	glue_tx_result(c, n < 0 ? -errno : n);
}

static void ep_arm_rx(struct glue_engine *e, struct glue_conn *c)
{
	c->ep_want |= EPOLLIN;
	ep_mod(e->be_priv, c);
}

static void ep_start_tx(struct glue_engine *e, struct glue_conn *c)
{
	try_tx(e->be_priv, c);
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
				try_tx(p, c);
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
};
