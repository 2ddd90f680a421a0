/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tcp-glue suites that post octets as ibv_post_send does
 * (test_glue_cork, test_glue_send): a connection whose tx_fill gives
 * what the test has queued and not yet seen sent, one iovec per chunk
 * (or one for all of it), and whose receive side only drains into a
 * small buffer. The test thread queues by adding to queued; tx_done
 * (under the connection's tx_lock) counts what went.
 */
#ifndef WISP_GLUE_QUEUE_H
#define WISP_GLUE_QUEUE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "glue.h"
#include "glue_hold.h"

struct glue_queue {
	uint8_t *buf;             /* what is sent: octet i at buf[i] */
	size_t chunk;             /* one iovec per chunk of buf ... */
	bool one;                 /* ... or one iovec for all queued */
	atomic_size_t queued;     /* octets queued (test thread) */
	size_t sent;              /* octets tx_done reported */
	uint8_t rx[64];           /* what arrives, drained */
	atomic_bool ended;        /* the connection's ended callback ran */
	bool idle_hint;           /* tx_done says GLUE_TX_IDLE when all went */
	atomic_int fills;         /* tx_fill calls */
};

static inline int gq_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct glue_queue *q = arg;

	(void)cap;
	iov[0].iov_base = q->rx;
	iov[0].iov_len = sizeof(q->rx);
	return 1;
}

static inline int gq_rx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

/* What was queued and not yet sent. */
static inline int gq_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct glue_queue *q = arg;
	size_t end = atomic_load(&q->queued), off = q->sent;
	int n = 0;

	atomic_fetch_add(&q->fills, 1);
	while (off < end && n < cap) {
		size_t next = q->one ? end : (off / q->chunk + 1) * q->chunk;

		if (next > end)
			next = end;
		iov[n].iov_base = q->buf + off;
		iov[n].iov_len = next - off;
		off = next;
		n++;
	}
	return n;
}

static inline int gq_tx_done(void *arg, size_t n)
{
	struct glue_queue *q = arg;

	q->sent += n;
	return q->idle_hint && q->sent == atomic_load(&q->queued) ?
	       GLUE_TX_IDLE : 0;
}

static inline void gq_ended(void *arg, int reason)
{
	struct glue_queue *q = arg;

	(void)reason;
	atomic_store(&q->ended, true);
}

/* The callbacks; the connection's argument is the struct glue_queue. */
__attribute__((unused))
static const struct glue_conn_ops glue_queue_ops = {
	.rx_want = gq_rx_want,
	.rx_done = gq_rx_done,
	.tx_fill = gq_tx_fill,
	.tx_done = gq_tx_done,
	.ended = gq_ended,
};

/* Empty, over buf[0..len) filled with pattern(i), in chunks of chunk. */
static inline void glue_queue_init(struct glue_queue *q, uint8_t *buf,
				   size_t len, size_t chunk,
				   uint8_t (*pattern)(size_t))
{
	memset(q, 0, sizeof(*q));
	q->buf = buf;
	q->chunk = chunk;
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(i);
	atomic_init(&q->queued, 0);
	atomic_init(&q->ended, false);
	atomic_init(&q->fills, 0);
}

/* Read from peer into rx[got..want) (deadline 10 s), then check every
 * octet of rx[0..want) against pattern. */
static inline void glue_read_pattern(int peer, uint8_t *rx, size_t got,
				     size_t want, uint8_t (*pattern)(size_t))
{
	int64_t end = ms_now() + 10000;

	while (got < want && ms_now() < end) {
		ssize_t r = recv(peer, rx + got, want - got, MSG_DONTWAIT);

		cr_assert(r > 0 || (r < 0 && errno == EAGAIN),
			  "recv: %zd (%s) after %zu octets", r,
			  strerror(errno), got);
		if (r > 0)
			got += (size_t)r;
		else
			usleep(100);
	}
	cr_assert_eq(got, want, "%zu of %zu octets arrived within 10 s",
		     got, want);
	for (size_t i = 0; i < want; i++)
		cr_assert_eq(rx[i], pattern(i), "octet %zu differs", i);
}

/* Read every octet queued at peer (deadline 10 s) and check each
 * against pattern; returns how long it took, in microseconds. */
static inline int64_t glue_queue_read_all(struct glue_queue *q, int peer,
					  uint8_t (*pattern)(size_t))
{
	size_t want = atomic_load(&q->queued);
	uint8_t *rx = malloc(want ? want : 1);
	int64_t start = us_now();

	cr_assert_not_null(rx);
	glue_read_pattern(peer, rx, 0, want, pattern);
	free(rx);
	return us_now() - start;
}

#endif
