// SPDX-License-Identifier: MIT
/*
 * glue_stats.c - the engine's per-connection counters (glue_stats.h).
 *
 * Called with the side's lock held (tx_lock, rx_lock), so increments are
 * relaxed loads and stores (tx_eagain, counted by the epoll backend
 * outside tx_lock, and the busy-polling hits, counted by the engine
 * without rx_lock, take an atomic add). The only clock read is the engine's, once per
 * submitted send (clock_gettime through the vDSO: no system call).
 */
#include "glue_internal.h"

#include <errno.h>
#include <stddef.h>
#include <time.h>

#define ADD(field, n)                                                      \
	atomic_store_explicit(&(field),                                    \
		atomic_load_explicit(&(field), memory_order_relaxed) + (n), \
		memory_order_relaxed)

static struct glue_conn_stats *stats(const struct glue_conn *c)
{
	return atomic_load_explicit(&((struct glue_conn *)c)->st,
				    memory_order_acquire);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Move what from counted into to; both sides' locks held. */
static void fold(struct glue_conn_stats *to, struct glue_conn_stats *from)
{
	_Atomic uint64_t *d = (_Atomic uint64_t *)to;
	_Atomic uint64_t *s = (_Atomic uint64_t *)from;
	const size_t max = offsetof(struct glue_conn_stats, tx_wait_max_ns) /
			   sizeof(uint64_t);

	for (size_t i = 0; i < sizeof(*to) / sizeof(uint64_t); i++) {
		uint64_t v = atomic_exchange(&s[i], 0);

		if (i != max)
			atomic_fetch_add(&d[i], v);
		else if (v > atomic_load(&d[i]))
			atomic_store(&d[i], v);
	}
}

void glue_conn_set_stats(struct glue_conn *c, struct glue_conn_stats *st)
{
	struct glue_conn_stats *to = st ? st : &c->own_st;
	struct glue_conn_stats *from;

	/* Under both sides' locks, so that no count lands in the old place
	 * after its counts moved: the engine may have sent and received
	 * already (an RTR goes out as soon as the connection is added). */
	pthread_mutex_lock(&c->tx_lock);
	wisp_lock_take(&c->rx_lock);
	from = stats(c);
	if (from != to) {
		fold(to, from);
		atomic_store_explicit(&c->st, to, memory_order_release);
	}
	wisp_lock_give(&c->rx_lock);
	glue_tx_unlock(c);
}

const struct glue_conn_stats *glue_conn_stats(const struct glue_conn *c)
{
	return stats(c);
}

static size_t iov_bytes(const struct iovec *iov, size_t n)
{
	size_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += iov[i].iov_len;
	return sum;
}

void glue_stat_tx_start(struct glue_conn *c)
{
	ADD(stats(c)->tx_sends, 1);
	c->tx_offered = iov_bytes(c->tx_msg.msg_iov, c->tx_msg.msg_iovlen);
	c->tx_start_ns = now_ns();
}

void glue_stat_tx_result(struct glue_conn *c, long res)
{
	struct glue_conn_stats *st = stats(c);
	int64_t waited;

	if (!c->tx_start_ns)
		return;
	waited = now_ns() - c->tx_start_ns;
	c->tx_start_ns = 0;
	if (waited > 0) {
		ADD(st->tx_wait_ns, (uint64_t)waited);
		if ((uint64_t)waited >
		    atomic_load_explicit(&st->tx_wait_max_ns,
					 memory_order_relaxed))
			atomic_store_explicit(&st->tx_wait_max_ns,
					      (uint64_t)waited,
					      memory_order_relaxed);
	}
	if (res == -EAGAIN)
		atomic_fetch_add_explicit(&st->tx_eagain, 1,
					  memory_order_relaxed);
	if (res <= 0)
		return;
	ADD(st->tx_octets, (uint64_t)res);
	if ((size_t)res < c->tx_offered)
		ADD(st->tx_short, 1);
}

void glue_stat_tx_direct(struct glue_conn *c, int niov, long n, int err)
{
	struct glue_conn_stats *st = stats(c);

	ADD(st->tx_direct, 1);
	if (n < 0) {
		if (err == EAGAIN)
			atomic_fetch_add_explicit(&st->tx_eagain, 1,
						  memory_order_relaxed);
		return;
	}
	ADD(st->tx_octets, (uint64_t)n);
	if ((size_t)n < iov_bytes(c->tx_iov, (size_t)niov))
		ADD(st->tx_short, 1);
}

void glue_stat_tx_eagain(struct glue_conn *c)
{
	atomic_fetch_add_explicit(&stats(c)->tx_eagain, 1,
				  memory_order_relaxed);
}

void glue_stat_rx(struct glue_conn *c, long r, bool engine)
{
	struct glue_conn_stats *st = stats(c);

	if (r <= 0) {
		if (r == -EAGAIN)
			ADD(st->rx_empty, 1);
		return;
	}
	ADD(st->rx_recvs, 1);
	ADD(st->rx_octets, (uint64_t)r);
	if (!engine)
		ADD(st->rx_direct, 1);
}

void glue_stat_busy_hit(struct glue_conn *c)
{
	atomic_fetch_add_explicit(&stats(c)->rx_busy_hits, 1,
				  memory_order_relaxed);
}

void glue_stat_post_wait(struct glue_conn *c, bool hit)
{
	struct glue_conn_stats *st = stats(c);

	/* Outside either lock: the posting thread waits with none. */
	atomic_fetch_add_explicit(&st->rx_post_waits, 1, memory_order_relaxed);
	if (hit)
		atomic_fetch_add_explicit(&st->rx_post_hits, 1,
					  memory_order_relaxed);
}

void glue_stat_tx_corked(struct glue_conn *c)
{
	ADD(stats(c)->tx_corked, 1);
}

void glue_stat_tx_held(struct glue_conn *c)
{
	ADD(stats(c)->tx_held, 1);
}

void glue_stat_tx_push(struct glue_conn *c, bool engine)
{
	struct glue_conn_stats *st = stats(c);

	ADD(st->tx_pushes, 1);
	if (engine)
		ADD(st->tx_push_engine, 1);
}

void glue_stat_tx_poll_wait(struct glue_conn *c, bool woken)
{
	struct glue_conn_stats *st = stats(c);

	ADD(st->tx_poll_waits, 1);
	if (woken)
		ADD(st->tx_poll_woken, 1);
}
