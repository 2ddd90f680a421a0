// SPDX-License-Identifier: MIT
/*
 * test_glue_ready.c - the engine's ready list and its adoption of new
 * sockets (glue_engine.c "The ready list", adopt()).
 *
 * glue_conn_add does not wait for the engine: the connection is queued
 * and the engine takes it over on its next pass. So a caller may kick it
 * at once, many may be added in a burst, and a socket the backend
 * refuses ends through ended() with the backend's errno instead of a
 * NULL from glue_conn_add. Every connection of a burst must still be
 * served: each receives what its peer sent and sends its own greeting,
 * with only the connections that have work visited.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_pair.h"

#define NCONN 300
#define GREETING "hello, peer"

struct rc {
	struct glue_conn *c;
	int peer;
	char rx[64];
	size_t got;               /* engine thread */
	size_t sent;              /* engine thread */
	atomic_int rx_seen;       /* got, published */
	atomic_bool ended;
	atomic_int reason;
};

static int rc_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct rc *r = arg;

	(void)cap;
	iov[0].iov_base = r->rx + r->got;
	iov[0].iov_len = sizeof(r->rx) - r->got;
	return 1;
}

static int rc_rx_done(void *arg, size_t n)
{
	struct rc *r = arg;

	r->got += n;
	atomic_store(&r->rx_seen, (int)r->got);
	return 0;
}

static int rc_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct rc *r = arg;

	(void)cap;
	if (r->sent == sizeof(GREETING))
		return 0;
	iov[0].iov_base = (char *)GREETING + r->sent;
	iov[0].iov_len = sizeof(GREETING) - r->sent;
	return 1;
}

static int rc_tx_done(void *arg, size_t n)
{
	struct rc *r = arg;

	r->sent += n;
	return 0;
}

static void rc_ended(void *arg, int reason)
{
	struct rc *r = arg;

	atomic_store(&r->reason, reason);
	atomic_store(&r->ended, true);
}

static const struct glue_conn_ops rc_ops = {
	.ended = rc_ended,
	.rx_done = rc_rx_done,
	.rx_want = rc_rx_want,
	.tx_done = rc_tx_done,
	.tx_fill = rc_tx_fill,
};

/* Read what the engine sent to peer fd (blocking, bounded by a receive
 * timeout). */
static size_t read_greeting(int fd, char *buf, size_t len)
{
	struct timeval tv = { .tv_sec = 10 };
	size_t got = 0;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (got < len) {
		ssize_t n = recv(fd, buf + got, len - got, 0);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	return got;
}

/* NCONN sockets added in one burst, each kicked at once; the peers of
 * half of them send before the add, the others after. */
static void burst(enum glue_kind kind)
{
	static struct rc rcs[NCONN];
	struct glue_engine *e = engine_or_skip(kind);
	int64_t end;
	int i;

	memset(rcs, 0, sizeof(rcs));
	for (i = 0; i < NCONN; i++) {
		int sv[2];

		cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0,
			     "socketpair %d: %s", i, strerror(errno));
		rcs[i].peer = sv[1];
		if (i % 2)
			cr_assert_eq(send(sv[1], GREETING, sizeof(GREETING), 0),
				     (ssize_t)sizeof(GREETING));
		rcs[i].c = glue_conn_add(e, sv[0], &rc_ops, &rcs[i]);
		cr_assert_not_null(rcs[i].c, "glue_conn_add %d: %s", i,
				   strerror(errno));
		glue_conn_kick(rcs[i].c);
	}
	for (i = 0; i < NCONN; i += 2)
		cr_assert_eq(send(rcs[i].peer, GREETING, sizeof(GREETING), 0),
			     (ssize_t)sizeof(GREETING));
	for (i = 0; i < NCONN; i++) {
		char buf[sizeof(GREETING)];

		cr_assert_eq(read_greeting(rcs[i].peer, buf, sizeof(buf)),
			     sizeof(GREETING), "connection %d sent nothing", i);
		cr_assert_str_eq(buf, GREETING);
	}
	end = ms_now() + 10000;
	for (i = 0; i < NCONN; i++) {
		while (atomic_load(&rcs[i].rx_seen) < (int)sizeof(GREETING) &&
		       ms_now() < end)
			usleep(1000);
		cr_assert_eq(atomic_load(&rcs[i].rx_seen), (int)sizeof(GREETING),
			     "connection %d received %d octets", i,
			     atomic_load(&rcs[i].rx_seen));
		cr_assert_str_eq(rcs[i].rx, GREETING);
	}
	/* The peers close: every connection ends, orderly. */
	for (i = 0; i < NCONN; i++)
		close(rcs[i].peer);
	end = ms_now() + 10000;
	for (i = 0; i < NCONN; i++) {
		while (!atomic_load(&rcs[i].ended) && ms_now() < end)
			usleep(1000);
		cr_assert(atomic_load(&rcs[i].ended), "connection %d did not "
			  "end", i);
		cr_assert_eq(atomic_load(&rcs[i].reason), 0);
		/* Kicks stay safe until the free, and do nothing now. */
		glue_conn_kick(rcs[i].c);
		glue_conn_close_soon(rcs[i].c);
		glue_conn_free(rcs[i].c);
	}
	glue_engine_destroy(e);
}

Test(glue_ready, burst_of_connections_all_served_uring, .timeout = 60)
{
	burst(GLUE_URING);
}

Test(glue_ready, burst_of_connections_all_served_epoll, .timeout = 60)
{
	burst(GLUE_EPOLL);
}

/*
 * epoll refuses a regular file (EPERM). glue_conn_add has already
 * returned when the engine finds out: the connection ends with that
 * errno, as a stream that broke does, and the descriptor is closed.
 */
Test(glue_ready, refused_socket_ends_with_the_errno, .timeout = 30)
{
	char path[] = "/tmp/wisp-glue-ready-XXXXXX";
	struct glue_engine *e = engine_or_skip(GLUE_EPOLL);
	struct rc r = { 0 };
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
	unlink(path);
	r.c = glue_conn_add(e, fd, &rc_ops, &r);
	cr_assert_not_null(r.c, "glue_conn_add: %s", strerror(errno));
	cr_assert(wait_flag(&r.ended, 10000), "the connection did not end");
	cr_assert_eq(atomic_load(&r.reason), EPERM, "reason %d",
		     atomic_load(&r.reason));
	cr_assert(fcntl(fd, F_GETFD) < 0 && errno == EBADF,
		  "the descriptor is still open");
	glue_conn_free(r.c);
	glue_engine_destroy(e);
}

/* A connection closed by its owner right after the add, before the
 * engine took it over, ends once. */
static void close_before_adopted(enum glue_kind kind)
{
	struct glue_engine *e = engine_or_skip(kind);
	struct rc r = { 0 };
	int sv[2];

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	r.c = glue_conn_add(e, sv[0], &rc_ops, &r);
	cr_assert_not_null(r.c);
	glue_conn_close_soon(r.c);
	glue_engine_call(e, close_now_cmd, r.c);
	cr_assert(wait_flag(&r.ended, 10000), "the connection did not end");
	cr_assert_eq(atomic_load(&r.reason), 0);
	glue_conn_free(r.c);
	glue_engine_destroy(e);
	close(sv[1]);
}

Test(glue_ready, close_before_adopted_uring, .timeout = 30)
{
	close_before_adopted(GLUE_URING);
}

Test(glue_ready, close_before_adopted_epoll, .timeout = 30)
{
	close_before_adopted(GLUE_EPOLL);
}
