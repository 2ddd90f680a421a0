/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tcp-glue suites, beside glue_hold.h (the clock and the
 * engine hold, included here): an engine or a skip, loopback TCP pairs
 * with the socket options a suite asks for, the commands that close a
 * connection on the engine thread, a bounded wait for a flag, and a
 * connection's counter.
 */
#ifndef WISP_GLUE_PAIR_H
#define WISP_GLUE_PAIR_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "glue.h"
#include "glue_hold.h"
#include "glue_stats.h"

/* An engine of that kind; the test is skipped where io_uring is
 * refused (a container, an old kernel), and fails where epoll is. */
static inline struct glue_engine *engine_or_skip(enum glue_kind kind)
{
	struct glue_engine *e = glue_engine_create(kind);

	if (!e && kind == GLUE_URING)
		cr_skip_test("io_uring refused here: %s", strerror(errno));
	cr_assert_not_null(e, "glue_engine_create: %s", strerror(errno));
	return e;
}

/* Socket options of a tcp_pair; 0 leaves the kernel's default. */
struct tcp_pair_opts {
	int mss;       /* TCP_MAXSEG of *a, the engine's end */
	int sndbuf;    /* SO_SNDBUF of *a */
	int rcvbuf;    /* SO_RCVBUF of *b, the test's peer (set on the
			* listener, so that the handshake offers it) */
};

/* A listening socket on 127.0.0.1, port chosen by the kernel, written
 * to *sin; its SO_RCVBUF is rcvbuf unless 0 (accepted sockets have it). */
static inline int loopback_listener(struct sockaddr_in *sin, int rcvbuf)
{
	socklen_t len = sizeof(*sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	if (rcvbuf)
		cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
					sizeof(rcvbuf)), 0);
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)sin, sizeof(*sin)), 0);
	cr_assert_eq(listen(fd, 4), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)sin, &len), 0);
	return fd;
}

/* A loopback TCP pair: *a for the engine, *b the test's peer; o may be
 * NULL (no options). */
static inline void tcp_pair(int *a, int *b, const struct tcp_pair_opts *o)
{
	static const struct tcp_pair_opts none;
	struct sockaddr_in sin;
	int lfd;

	if (!o)
		o = &none;
	lfd = loopback_listener(&sin, o->rcvbuf);
	*a = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(*a, 0);
	if (o->mss)
		cr_assert_eq(setsockopt(*a, IPPROTO_TCP, TCP_MAXSEG, &o->mss,
					sizeof(o->mss)), 0);
	if (o->sndbuf)
		cr_assert_eq(setsockopt(*a, SOL_SOCKET, SO_SNDBUF, &o->sndbuf,
					sizeof(o->sndbuf)), 0);
	cr_assert_eq(connect(*a, (struct sockaddr *)&sin, sizeof(sin)), 0);
	*b = accept(lfd, NULL, NULL);
	cr_assert_geq(*b, 0);
	close(lfd);
}

/* Commands for glue_engine_call: a graceful close, an immediate one, and
 * one that does nothing (it returns once the engine's pass is over). */
static inline void close_cmd(void *arg)
{
	glue_conn_close(arg, 0, true);
}

static inline void close_now_cmd(void *arg)
{
	glue_conn_close(arg, 0, false);
}

static inline void noop_cmd(void *arg)
{
	(void)arg;
}

/* Wait (at most ms) until *flag is set; says whether it was. */
static inline bool wait_flag(atomic_bool *flag, int64_t ms)
{
	for (int64_t end = ms_now() + ms; ms_now() < end; usleep(200))
		if (atomic_load(flag))
			return true;
	return atomic_load(flag);
}

/* One of connection c's counters (struct glue_conn_stats). */
#define CONN_ST(c, f) atomic_load(&glue_conn_stats(c)->f)

#endif
