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

static int ep_conn_add(struct glue_engine *e, struct glue_conn *c)
{
	struct epoll_priv *p = e->be_priv;
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
		.data.ptr = c,
	};

	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, c->fd, &ev))
		return -errno;
	/* Edge-triggered: assume ready until the kernel says EAGAIN. */
	c->rx_ready = c->tx_ready = true;
	return 0;
}

static void ep_conn_del(struct glue_engine *e, struct glue_conn *c)
{
	struct epoll_priv *p = e->be_priv;

	epoll_ctl(p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

static void try_rx(struct glue_conn *c)
{
	ssize_t n = recvmsg(c->fd, &c->rx_msg, MSG_DONTWAIT);

	if (n < 0 && errno == EAGAIN) {
		c->rx_ready = false;      /* stays busy until EPOLLIN */
		return;
	}
	glue_rx_result(c, n < 0 ? -errno : n);
}

static void try_tx(struct glue_conn *c)
{
	ssize_t n = sendmsg(c->fd, &c->tx_msg, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0 && errno == EAGAIN) {
		c->tx_ready = false;
		return;
	}
	glue_tx_result(c, n < 0 ? -errno : n);
}

static void ep_start_rx(struct glue_engine *e, struct glue_conn *c)
{
	(void)e;
	if (c->rx_ready)
		try_rx(c);
}

static void ep_start_tx(struct glue_engine *e, struct glue_conn *c)
{
	(void)e;
	if (c->tx_ready)
		try_tx(c);
}

static void ep_wait(struct glue_engine *e, int timeout_ms)
{
	struct epoll_priv *p = e->be_priv;
	struct epoll_event evs[64];
	int n = epoll_wait(p->epfd, evs, 64, timeout_ms);

	for (int i = 0; i < n; i++) {
		struct glue_conn *c = evs[i].data.ptr;

		if (!c) {
			glue_wake_drain(e);
			continue;
		}
		if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
			c->rx_ready = true;
			if (c->rx_busy)
				try_rx(c);
		}
		if (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
			c->tx_ready = true;
			if (c->tx_busy)
				try_tx(c);
		}
	}
}

const struct glue_backend glue_epoll_backend = {
	.name = "epoll",
	.init = ep_init,
	.fini = ep_fini,
	.conn_add = ep_conn_add,
	.conn_del = ep_conn_del,
	.start_rx = ep_start_rx,
	.start_tx = ep_start_tx,
	.wait = ep_wait,
};
