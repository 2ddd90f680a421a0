/* SPDX-License-Identifier: MIT */
/*
 * glue_internal.h - shared by the engine core and its two backends.
 */
#ifndef WISP_GLUE_INTERNAL_H
#define WISP_GLUE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "glue.h"

#define GLUE_CLOSE_DEADLINE_MS 2000

struct glue_conn {
	struct glue_engine *e;
	struct glue_conn *next, *prev;
	int fd;
	const struct glue_conn_ops *ops;
	void *arg;

	atomic_bool kicked;
	bool rx_busy, tx_busy;    /* an operation is in flight / waiting */
	atomic_bool tx_more;      /* tx_fill may have more right away */
	/* Transmit side: taken by the engine around tx_fill / tx_done and
	 * by a posting thread that sends directly (glue_conn_send_now).
	 * Recursive: epoll completes a send inside start_tx. */
	pthread_mutex_t tx_lock;
	bool rx_eof;
	bool closing;             /* graceful close under way */
	bool shut_wr;
	bool aborting;            /* socket shut down, waiting for ops */
	bool gone;                /* ended() has run */
	int reason;
	int64_t deadline_ms;

	/* epoll backend: readiness seen but not consumed */
	bool rx_ready, tx_ready;

	struct msghdr rx_msg, tx_msg;
	struct iovec rx_iov[GLUE_RX_IOV];
	struct iovec tx_iov[GLUE_TX_IOV];

};

struct glue_backend {
	const char *name;
	int (*init)(struct glue_engine *e);
	void (*fini)(struct glue_engine *e);
	int (*conn_add)(struct glue_engine *e, struct glue_conn *c);
	void (*conn_del)(struct glue_engine *e, struct glue_conn *c);
	/* Start the receive / send described by c->rx_msg / c->tx_msg. The
	 * result reaches glue_rx_result() / glue_tx_result(), possibly
	 * before this returns. */
	void (*start_rx)(struct glue_engine *e, struct glue_conn *c);
	void (*start_tx)(struct glue_engine *e, struct glue_conn *c);
	/* Block for events up to timeout_ms (-1: no limit) and dispatch
	 * them; the wake eventfd ends the wait. */
	void (*wait)(struct glue_engine *e, int timeout_ms);
};

struct glue_cmd {
	struct glue_cmd *next;
	void (*fn)(void *);
	void *arg;
	bool done;
};

struct glue_engine {
	const struct glue_backend *be;
	void *be_priv;
	pthread_t thread;
	int wake_fd;              /* eventfd */
	atomic_bool sleeping;
	atomic_bool pending;
	atomic_bool stop;
	struct glue_conn *conns;

	pthread_mutex_t cmd_lock;
	pthread_cond_t cmd_cond;
	struct glue_cmd *cmd_head, *cmd_tail;
};

extern const struct glue_backend glue_uring_backend;
extern const struct glue_backend glue_epoll_backend;

/* Results, from the backends: octets (>= 0) or -errno. */
void glue_rx_result(struct glue_conn *c, long res);
void glue_tx_result(struct glue_conn *c, long res);

/* Drain the wake eventfd (epoll backend; io_uring reads it itself). */
void glue_wake_drain(struct glue_engine *e);

#endif /* WISP_GLUE_INTERNAL_H */
