// SPDX-License-Identifier: MIT
/*
 * test_glue_idle.c - a connection's buffers follow its traffic.
 *
 * tx_fill is offered GLUE_TX_IOV_SMALL iovecs until a fill uses all of
 * them, then GLUE_TX_IOV (the same octets filled again, none lost or sent
 * twice); once nothing has moved for GLUE_IDLE_MS the engine gives the
 * large array back (the next fill is offered the small count) and calls
 * the owner's idle op, again after each quiet spell while the owner says
 * it still holds something, and never once it says it holds nothing.
 * Waits are bounded (10 s); nothing is timed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_pair.h"

#define PIECES 200              /* iovecs in the first message */
#define PIECE  16

struct owner {
	atomic_bool ended;
	uint8_t msg[PIECES * PIECE];
	size_t len, sent;         /* the message queued, octets sent */
	uint8_t rx[64];
	_Atomic int cap_first, cap_max, cap_last;
	atomic_int idle_calls;
	atomic_bool idle_held;    /* what idle answers */
	pthread_mutex_t lock;
};

static int o_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct owner *o = arg;

	(void)cap;
	iov[0].iov_base = o->rx;
	iov[0].iov_len = sizeof(o->rx);
	return 1;
}

static int o_rx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

/* The rest of the message, one iovec per PIECE octets. */
static int o_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct owner *o = arg;
	int n = 0;

	pthread_mutex_lock(&o->lock);
	if (cap > 1 && o->sent < o->len) {
		if (!atomic_load(&o->cap_first))
			atomic_store(&o->cap_first, cap);
		if (cap > atomic_load(&o->cap_max))
			atomic_store(&o->cap_max, cap);
		atomic_store(&o->cap_last, cap);
	}
	for (size_t off = o->sent; off < o->len && n < cap; n++) {
		size_t k = o->len - off < PIECE ? o->len - off : PIECE;

		iov[n].iov_base = o->msg + off;
		iov[n].iov_len = k;
		off += k;
	}
	pthread_mutex_unlock(&o->lock);
	return n;
}

static int o_tx_done(void *arg, size_t n)
{
	struct owner *o = arg;

	pthread_mutex_lock(&o->lock);
	o->sent += n;
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static void o_ended(void *arg, int reason)
{
	struct owner *o = arg;

	(void)reason;
	atomic_store(&o->ended, true);
}

static bool o_idle(void *arg)
{
	struct owner *o = arg;

	atomic_fetch_add(&o->idle_calls, 1);
	return atomic_load(&o->idle_held);
}

static const struct glue_conn_ops o_ops = {
	.ended = o_ended,
	.idle = o_idle,
	.rx_done = o_rx_done,
	.rx_want = o_rx_want,
	.tx_done = o_tx_done,
	.tx_fill = o_tx_fill,
};

/* Queue len octets of pattern seed and read them whole at fd. */
static void send_and_check(struct owner *o, struct glue_conn *c, int fd,
			   size_t len, uint8_t seed)
{
	uint8_t got[sizeof(o->msg)];
	size_t have = 0;

	pthread_mutex_lock(&o->lock);
	for (size_t i = 0; i < len; i++)
		o->msg[i] = (uint8_t)(seed + i * 7);
	o->len = len;
	o->sent = 0;
	pthread_mutex_unlock(&o->lock);
	glue_conn_kick(c);
	for (int64_t end = ms_now() + 10000; have < len && ms_now() < end;) {
		ssize_t r = recv(fd, got + have, len - have, MSG_DONTWAIT);

		if (r > 0)
			have += (size_t)r;
		else
			usleep(1000);
	}
	cr_assert_eq(have, len, "%zu of %zu octets arrived", have, len);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(got[i], (uint8_t)(seed + i * 7), "octet %zu", i);
}

static void wait_idle_calls(struct owner *o, int want)
{
	for (int64_t end = ms_now() + 10000;
	     atomic_load(&o->idle_calls) < want && ms_now() < end;)
		usleep(5000);
	cr_assert_geq(atomic_load(&o->idle_calls), want,
		      "idle called %d times, want %d",
		      atomic_load(&o->idle_calls), want);
}

static void idle_cycle(enum glue_kind kind)
{
	struct owner *o = calloc(1, sizeof(*o));
	struct glue_engine *e;
	struct glue_conn *c;
	int sv[2], calls;

	cr_assert_not_null(o);
	pthread_mutex_init(&o->lock, NULL);
	atomic_store(&o->idle_held, true);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	e = engine_or_skip(kind);
	c = glue_conn_add(e, sv[0], &o_ops, o);
	cr_assert_not_null(c);
	cr_assert_eq(atomic_load(&o->idle_calls), 0);

	/* 200 iovecs: the small array first, then the large one. */
	send_and_check(o, c, sv[1], sizeof(o->msg), 1);
	cr_assert_eq(atomic_load(&o->cap_first), GLUE_TX_IOV_SMALL);
	cr_assert_eq(atomic_load(&o->cap_max), GLUE_TX_IOV);

	/* Quiet: the owner is asked, and asked again while it holds. */
	wait_idle_calls(o, 2);
	atomic_store(&o->idle_held, false);
	calls = atomic_load(&o->idle_calls);
	wait_idle_calls(o, calls + 1);

	/* The large array went back: a small message is offered the small
	 * count again. */
	atomic_store(&o->cap_last, 0);
	send_and_check(o, c, sv[1], 100, 9);
	cr_assert_eq(atomic_load(&o->cap_last), GLUE_TX_IOV_SMALL);

	glue_engine_call(e, close_now_cmd, c);
	cr_assert(wait_flag(&o->ended, 10000));
	glue_conn_free(c);
	glue_engine_destroy(e);
	close(sv[1]);
	pthread_mutex_destroy(&o->lock);
	free(o);
}

Test(glue_idle, buffers_follow_traffic_uring, .timeout = 60)
{
	idle_cycle(GLUE_URING);
}

Test(glue_idle, buffers_follow_traffic_epoll, .timeout = 60)
{
	idle_cycle(GLUE_EPOLL);
}
