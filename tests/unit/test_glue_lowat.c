// SPDX-License-Identifier: MIT
/*
 * test_glue_lowat.c - the rest of a placed payload (glue_engine.c): when
 * a read straight into place stopped short (rx_done said
 * GLUE_RX_PLACED), the engine raises the socket's SO_RCVLOWAT to the
 * rest before it waits, so that it wakes once for all of it; the mark
 * goes back to 1 once the run is in, and a polling thread that takes
 * part of the rest while the wait is armed lowers it, so that the wait
 * never asks for more than the stream will bring (else the stream would
 * stall with the rest queued and nobody woken).
 *
 * The owner here is a stand-in for the QP: one run of RUN octets read
 * into place, then a small staging buffer.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "glue.h"

#define RUN   60000               /* the placed run */
#define FIRST 8000                /* what comes before the engine waits */
#define POLL  10000               /* what the polling thread takes */

struct lw {
	uint8_t run[RUN];
	uint8_t stage[64];
	_Atomic size_t placed;    /* octets of run received */
	_Atomic size_t staged;    /* octets received past the run */
	atomic_bool ended;
};

static int lw_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct lw *t = arg;
	size_t p = atomic_load(&t->placed);

	(void)cap;
	if (p < RUN) {
		iov[0].iov_base = t->run + p;
		iov[0].iov_len = RUN - p;
	} else {
		iov[0].iov_base = t->stage;
		iov[0].iov_len = sizeof(t->stage);
	}
	return 1;
}

static int lw_rx_done(void *arg, size_t n)
{
	struct lw *t = arg;
	size_t p = atomic_load(&t->placed);

	if (p >= RUN) {
		atomic_fetch_add(&t->staged, n);
		return 0;
	}
	atomic_store(&t->placed, p + n);
	return GLUE_RX_PLACED;
}

static int lw_tx_fill(void *arg, struct iovec *iov, int cap)
{
	(void)arg;
	(void)iov;
	(void)cap;
	return 0;
}

static int lw_tx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

static void lw_ended(void *arg, int reason)
{
	struct lw *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops lw_ops = {
	.rx_want = lw_rx_want,
	.rx_done = lw_rx_done,
	.tx_fill = lw_tx_fill,
	.tx_done = lw_tx_done,
	.ended = lw_ended,
};

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connected TCP pair over 127.0.0.1. */
static void tcp_pair(int *a, int *b)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(l, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	cr_assert_eq(listen(l, 1), 0);
	cr_assert_eq(getsockname(l, (struct sockaddr *)&sin, &len), 0);
	*b = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(*b, 0);
	cr_assert_eq(connect(*b, (struct sockaddr *)&sin, sizeof(sin)), 0);
	*a = accept(l, NULL, NULL);
	cr_assert_geq(*a, 0);
	close(l);
}

static int lowat(int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	cr_assert_eq(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
	return v;
}

/* Wait (bounded: the test fails, it does not hang) until fd's mark is
 * want; returns the last value seen. */
static int wait_lowat(int fd, int want)
{
	int v = lowat(fd);

	for (int64_t end = ms_now() + 10000; v != want && ms_now() < end;
	     v = lowat(fd))
		usleep(1000);
	return v;
}

static size_t wait_placed(struct lw *t, size_t want)
{
	for (int64_t end = ms_now() + 10000;
	     atomic_load(&t->placed) < want && ms_now() < end;)
		usleep(1000);
	return atomic_load(&t->placed);
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = send(fd, p, n, 0);

		cr_assert_gt(r, 0, "send: %s", strerror(errno));
		p += r;
		n -= (size_t)r;
	}
}

static void run_case(enum glue_kind kind, bool poller)
{
	static uint8_t src[RUN];
	struct lw *t = calloc(1, sizeof(*t));
	struct glue_engine *e;
	struct glue_conn *c;
	size_t sent = FIRST;
	int fd, peer, v;

	cr_assert_not_null(t);
	for (size_t i = 0; i < RUN; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	e = glue_engine_create(kind);
	if (!e && kind == GLUE_URING)
		cr_skip_test("io_uring refused here: %s", strerror(errno));
	cr_assert_not_null(e);
	tcp_pair(&fd, &peer);
	c = glue_conn_add(e, fd, &lw_ops, t);
	cr_assert_not_null(c);

	/* A first piece: read into place, short, so the engine waits for
	 * the rest of the run. */
	send_all(peer, src, FIRST);
	cr_assert_eq(wait_placed(t, FIRST), FIRST);
	v = wait_lowat(fd, RUN - FIRST);
	cr_assert_eq(v, RUN - FIRST, "SO_RCVLOWAT %d, want the rest, %d",
		     v, RUN - FIRST);

	if (poller) {
		/* Less than the mark arrives, and a polling thread takes
		 * it: the mark must come down to what is left. */
		int q = 0;

		send_all(peer, src + sent, POLL);
		sent += POLL;
		for (int64_t end = ms_now() + 10000;
		     q < POLL && ms_now() < end; usleep(1000))
			cr_assert_eq(ioctl(fd, FIONREAD, &q), 0);
		cr_assert_eq(q, POLL, "queued %d of %d", q, POLL);
		cr_assert(glue_conn_recv_now(c));
		cr_assert_eq(atomic_load(&t->placed), sent);
		v = lowat(fd);
		cr_assert_eq(v, RUN - (int)sent, "SO_RCVLOWAT %d after the "
			     "polling thread, want %d", v, RUN - (int)sent);
		glue_conn_release(c);
	}

	/* The rest: all of it arrives, the mark goes back to 1. */
	send_all(peer, src + sent, RUN - sent);
	cr_assert_eq(wait_placed(t, RUN), RUN, "the rest of the run did "
		     "not arrive (a wait that asks for more than will come)");
	cr_assert_eq(memcmp(t->run, src, RUN), 0);
	v = wait_lowat(fd, 1);
	cr_assert_eq(v, 1, "SO_RCVLOWAT %d once the run is in", v);

	/* Something small after it still wakes the engine. */
	send_all(peer, src, 10);
	for (int64_t end = ms_now() + 10000;
	     atomic_load(&t->staged) < 10 && ms_now() < end;)
		usleep(1000);
	cr_assert_eq(atomic_load(&t->staged), 10);

	close(peer);
	for (int64_t end = ms_now() + 10000;
	     !atomic_load(&t->ended) && ms_now() < end;)
		usleep(1000);
	cr_assert(atomic_load(&t->ended));
	glue_conn_free(c);
	glue_engine_destroy(e);
	free(t);
}

Test(glue_lowat, rest_of_run_uring, .timeout = 60)
{
	run_case(GLUE_URING, false);
}

Test(glue_lowat, rest_of_run_epoll, .timeout = 60)
{
	run_case(GLUE_EPOLL, false);
}

Test(glue_lowat, poller_lowers_mark_uring, .timeout = 60)
{
	run_case(GLUE_URING, true);
}

Test(glue_lowat, poller_lowers_mark_epoll, .timeout = 60)
{
	run_case(GLUE_EPOLL, true);
}
