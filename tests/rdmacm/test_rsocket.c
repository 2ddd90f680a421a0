/* SPDX-License-Identifier: MIT */
/*
 * test_rsocket.c - rsockets over wisp in one process: what rstream, rcopy
 * and riostream do not exercise (MSG_PEEK, MSG_WAITALL, half-close and
 * end of stream, rpoll / rselect, a refused and a non-blocking rconnect,
 * vectors, options).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <string.h>
#include <sys/uio.h>

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A listener on an ephemeral port; its address in *a. */
static int listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(l, 0, "rsocket: %s", strerror(errno));
	*a = loopback(0);
	cr_assert_eq(rbind(l, (struct sockaddr *)a, sizeof(*a)), 0);
	cr_assert_eq(rlisten(l, 4), 0);
	cr_assert_eq(rgetsockname(l, (struct sockaddr *)a, &len), 0);
	cr_assert_neq(a->sin_port, 0);
	return l;
}

struct conn_arg {
	struct sockaddr_in a;
	int fd;
};

static void *connect_thread(void *p)
{
	struct conn_arg *c = p;

	c->fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c->fd >= 0 && rconnect(c->fd, (struct sockaddr *)&c->a,
				   sizeof(c->a))) {
		rclose(c->fd);
		c->fd = -1;
	}
	return NULL;
}

/* A connected pair: *srv accepted, *cli connected. */
static void pair(int *srv, int *cli)
{
	struct conn_arg c;
	pthread_t t;
	int l = listener(&c.a);

	cr_assert_eq(pthread_create(&t, NULL, connect_thread, &c), 0);
	*srv = raccept(l, NULL, NULL);
	pthread_join(t, NULL);
	cr_assert_geq(*srv, 0, "raccept: %s", strerror(errno));
	cr_assert_geq(c.fd, 0, "rconnect failed");
	*cli = c.fd;
	rclose(l);
}

static void send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = rsend(fd, p, len, 0);

		cr_assert_gt(n, 0, "rsend: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

Test(rsocket, peek_waitall_and_end_of_stream)
{
	char buf[64] = { 0 };
	int s, c;

	pair(&s, &c);
	send_all(c, "hello, world", 12);
	cr_assert_eq(rrecv(s, buf, 5, MSG_PEEK | MSG_WAITALL), 5);
	cr_assert_eq(memcmp(buf, "hello", 5), 0);
	cr_assert_eq(rrecv(s, buf, 12, MSG_WAITALL), 12, "peek consumed");
	cr_assert_eq(memcmp(buf, "hello, world", 12), 0);

	/* Half-close: the server reads the end, can still send. */
	cr_assert_eq(rshutdown(c, SHUT_WR), 0);
	cr_assert_eq(rrecv(s, buf, sizeof(buf), 0), 0, "end of stream");
	send_all(s, "bye", 3);
	cr_assert_eq(rrecv(c, buf, 3, MSG_WAITALL), 3);
	cr_assert_eq(memcmp(buf, "bye", 3), 0);
	cr_assert_eq(rclose(s), 0);
	cr_assert_eq(rrecv(c, buf, sizeof(buf), 0), 0);
	cr_assert_eq(rclose(c), 0);
}

Test(rsocket, vectors_and_large_transfer)
{
	static char big[3 << 20], back[3 << 20];
	char a[3] = "abc", b[5] = "defgh", got[8];
	struct iovec out[2] = { { a, 3 }, { b, 5 } };
	struct iovec in[2] = { { got, 2 }, { got + 2, 6 } };
	int s, c;

	pair(&s, &c);
	cr_assert_eq(rwritev(c, out, 2), 8);
	/* One gathered write is one message: one read takes it whole. */
	cr_assert_eq(rreadv(s, in, 2), 8);
	cr_assert_eq(memcmp(got, "abcdefgh", 8), 0);

	/* More than the send and receive buffers: credits and both
	 * halves of the receive buffer go round many times. One thread:
	 * each chunk fits what the receiver has handed out (a half of
	 * its 128 KiB buffer) so that rsend need not wait for it. */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + (i >> 12));
	for (size_t off = 0; off < sizeof(big);) {
		size_t chunk = sizeof(big) - off < 30000 ? sizeof(big) - off
							 : 30000;
		ssize_t n;

		send_all(c, big + off, chunk);
		n = rrecv(s, back + off, chunk, MSG_WAITALL);
		cr_assert_eq(n, (ssize_t)chunk, "rrecv: %s", strerror(errno));
		off += chunk;
	}
	cr_assert_eq(memcmp(big, back, sizeof(big)), 0);
	rclose(c);
	rclose(s);
}

Test(rsocket, poll_select_and_nonblocking)
{
	struct pollfd p[2];
	fd_set rd;
	struct timeval tv = { 0, 0 };
	char buf[16];
	int s, c;

	pair(&s, &c);
	cr_assert_eq(rfcntl(s, F_SETFL, O_NONBLOCK), 0);
	cr_assert_eq(rfcntl(s, F_GETFL) & O_NONBLOCK, O_NONBLOCK);
	cr_assert_eq(rrecv(s, buf, sizeof(buf), 0), -1);
	cr_assert(errno == EAGAIN || errno == EWOULDBLOCK);
	p[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = c, .events = POLLOUT };
	cr_assert_eq(rpoll(p, 2, 0), 1, "only the client can send");
	cr_assert_eq(p[0].revents, 0);
	cr_assert_eq(p[1].revents & POLLOUT, POLLOUT);
	send_all(c, "x", 1);
	p[1].events = 0;
	cr_assert_eq(rpoll(p, 2, 5000), 1);
	cr_assert_eq(p[0].revents & POLLIN, POLLIN);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	cr_assert_eq(rselect(s + 1, &rd, NULL, NULL, &tv), 1);
	cr_assert(FD_ISSET(s, &rd));
	cr_assert_eq(rrecv(s, buf, sizeof(buf), 0), 1);

	/* The peer leaves: end of stream, then POLLHUP. */
	rclose(c);
	p[0].events = POLLIN;
	cr_assert_eq(rpoll(p, 1, 5000), 1);
	cr_assert_eq(rrecv(s, buf, sizeof(buf), 0), 0);
	cr_assert_eq(rpoll(p, 1, 0), 1);
	cr_assert_eq(p[0].revents & POLLHUP, POLLHUP);
	rclose(s);
}

Test(rsocket, nonblocking_connect_and_refused)
{
	struct sockaddr_in a;
	struct pollfd p;
	socklen_t len = sizeof(int);
	int l = listener(&a), c, s, err = -1;

	c = rsocket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(rfcntl(c, F_SETFL, O_NONBLOCK), 0);
	if (rconnect(c, (struct sockaddr *)&a, sizeof(a))) {
		cr_assert_eq(errno, EINPROGRESS);
		/* raccept answers the request; the reply completes the
		 * client's rconnect, which rpoll then reports. */
		s = raccept(l, NULL, NULL);
		cr_assert_geq(s, 0, "raccept: %s", strerror(errno));
		p = (struct pollfd){ .fd = c, .events = POLLOUT };
		cr_assert_eq(rpoll(&p, 1, 10000), 1);
		cr_assert_eq(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
		cr_assert_eq(err, 0);
	} else {
		s = raccept(l, NULL, NULL);
	}
	send_all(c, "ok", 2);
	{
		char b[2];

		cr_assert_eq(rrecv(s, b, 2, MSG_WAITALL), 2);
	}
	rclose(c);
	rclose(s);
	rclose(l);

	/* Nobody listens there any more. */
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(rconnect(c, (struct sockaddr *)&a, sizeof(a)), -1);
	cr_assert_eq(errno, ECONNREFUSED, "%s", strerror(errno));
	rclose(c);
}

Test(rsocket, options_and_errors)
{
	int fd = rsocket(AF_INET, SOCK_STREAM, 0), v = 1 << 16;
	socklen_t len = sizeof(v);

	cr_assert_eq(rsocket(AF_INET, SOCK_DGRAM, 0), -1);
	cr_assert_eq(errno, ENOTSUP);
	cr_assert_eq(rsend(12345, "x", 1, 0), -1);
	cr_assert_eq(errno, EBADF);
	cr_assert_eq(rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)), 0);
	cr_assert_eq(rgetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len), 0);
	cr_assert_eq(v, 1 << 17, "twice what was asked, as Linux");
	v = 1;
	cr_assert_eq(rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)), 0);
	v = 0;
	cr_assert_eq(rgetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	cr_assert_eq(v, 1);
	v = 100;
	cr_assert_eq(rsetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, &v, sizeof(v)), 0);
	cr_assert_eq(rgetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, &v, &len), 0);
	cr_assert_eq(v, 100);
	cr_assert_eq(rsetsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)), 0);
	cr_assert_eq(rclose(fd), 0);
}
