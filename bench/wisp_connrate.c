/* SPDX-License-Identifier: MIT */
/*
 * wisp_connrate - rdma_cm connection rate over wisp on 127.0.0.1, next to
 * raw TCP doing the same round trip in the same run (docs/benchmarks.md,
 * "Connection rate").
 *
 *   wisp_connrate [-n N] [--repeat R]
 *
 * A child process listens (rdma_listen backlog 0: the default) and
 * accepts every request, with an RC QP. The parent creates N
 * ids, resolves them and creates their QPs, then calls rdma_connect for
 * all N at once and waits for every ESTABLISHED. Reported: connections
 * per second from the first rdma_connect to the last ESTABLISHED, the
 * median and slowest single connection (rdma_connect to its
 * ESTABLISHED), and the most threads the client process had meanwhile.
 * The baseline: N non-blocking TCP connects to a TCP listener in the same
 * child, each sending a 24-octet request and reading a 24-octet answer
 * (the size of an MPA Request / Reply without private data), all at once
 * over epoll.
 *
 * Bounded: N <= 4096, and an alarm ends the run after 120 s.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define MAX_CONNS 4096
#define FRAME 24

static int nconn = 1000;
/* Every connection gets an RC QP, as rdma_cm programs do. */
static const bool with_qp = true;

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int threads_now(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void qp_attr(struct ibv_qp_init_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_type = IBV_QPT_RC;
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
}

/* ---- the child: rdma_cm and TCP listeners ------------------------------ */

static void *tcp_server(void *arg)
{
	int lfd = *(int *)arg, ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd }, evs[64];

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev))
		die("epoll");
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1);

		for (int i = 0; i < n; i++) {
			char buf[FRAME];
			int fd = evs[i].data.fd;

			if (fd == lfd) {
				int c;

				while ((c = accept4(lfd, NULL, NULL,
						    SOCK_NONBLOCK)) >= 0) {
					int one = 1;

					setsockopt(c, IPPROTO_TCP, TCP_NODELAY,
						   &one, sizeof(one));
					ev.events = EPOLLIN;
					ev.data.fd = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				}
				continue;
			}
			if (recv(fd, buf, sizeof(buf), MSG_WAITALL) == FRAME &&
			    send(fd, buf, FRAME, MSG_NOSIGNAL) == FRAME)
				continue;
			close(fd);
		}
	}
	return NULL;
}

static void server(int out, int in)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_cm_id *lid = NULL;
	struct rdma_cm_event *e;
	socklen_t alen = sizeof(a);
	uint16_t ports[2];
	pthread_t t;
	int lfd;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&a) ||
	    rdma_listen(lid, 0))
		die("server rdma_listen");
	ports[0] = rdma_get_src_port(lid);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(lfd, 4096) ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen))
		die("server listen");
	ports[1] = a.sin_port;
	if (pthread_create(&t, NULL, tcp_server, &lfd))
		die("pthread_create");
	if (write(out, ports, sizeof(ports)) != sizeof(ports))
		die("write");
	/* Serve until the parent closes its end of the pipe. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	for (;;) {
		struct pollfd p[2] = { { .fd = ch->fd, .events = POLLIN },
				       { .fd = in, .events = POLLIN } };

		if (poll(p, 2, -1) < 0)
			die("poll");
		if (p[1].revents)
			_exit(0);
		while (!rdma_get_cm_event(ch, &e)) {
			struct rdma_cm_id *id = e->id;
			enum rdma_cm_event_type type = e->event;
			struct ibv_qp_init_attr qa;

			rdma_ack_cm_event(e);
			if (type != RDMA_CM_EVENT_CONNECT_REQUEST)
				continue;
			qp_attr(&qa);
			if ((with_qp && rdma_create_qp(id, NULL, &qa)) ||
			    rdma_accept(id, NULL))
				perror("server accept");
		}
	}
}

/* ---- the parent -------------------------------------------------------- */

struct result {
	double rate, median_ms, max_ms;
	int ok, threads;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void finish(struct result *r, double *lat, int ok, double t0,
		   double t1)
{
	qsort(lat, (size_t)ok, sizeof(*lat), cmp_double);
	r->ok = ok;
	r->rate = ok / ((t1 - t0) / 1e6);
	r->median_ms = ok ? lat[ok / 2] / 1e3 : 0;
	r->max_ms = ok ? lat[ok - 1] / 1e3 : 0;
}

static void run_rdma(uint16_t port, struct result *r)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = port };
	static struct rdma_cm_id *ids[MAX_CONNS];
	static double start[MAX_CONNS], lat[MAX_CONNS];
	struct rdma_cm_event *e;
	int resolved = 0, done = 0, fails = 0, ok = 0;
	double t0, t1;

	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ch)
		die("rdma_create_event_channel");
	for (int i = 0; i < nconn; i++) {
		if (rdma_create_id(ch, &ids[i], (void *)(intptr_t)i,
				   RDMA_PS_TCP) ||
		    rdma_resolve_addr(ids[i], NULL, (struct sockaddr *)&dst,
				      2000))
			die("rdma_resolve_addr");
	}
	/* Addresses and routes first, and the QPs: then the burst. */
	while (resolved < nconn) {
		struct rdma_cm_id *id;
		enum rdma_cm_event_type type;

		if (rdma_get_cm_event(ch, &e))
			die("rdma_get_cm_event");
		id = e->id;
		type = e->event;
		rdma_ack_cm_event(e);
		if (type == RDMA_CM_EVENT_ADDR_RESOLVED) {
			if (rdma_resolve_route(id, 2000))
				die("rdma_resolve_route");
		} else if (type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
			struct ibv_qp_init_attr qa;

			qp_attr(&qa);
			if (with_qp && rdma_create_qp(id, NULL, &qa))
				die("rdma_create_qp");
			resolved++;
		} else {
			fprintf(stderr, "resolve: %s\n", rdma_event_str(type));
			exit(1);
		}
	}
	r->threads = threads_now();
	t0 = now_us();
	for (int i = 0; i < nconn; i++) {
		struct rdma_conn_param cp = { .retry_count = 7 };

		start[i] = now_us();
		if (rdma_connect(ids[i], &cp))
			die("rdma_connect");
	}
	{
		int th = threads_now();

		if (th > r->threads)
			r->threads = th;
	}
	t1 = t0;
	while (done < nconn) {
		int i, th;

		if (rdma_get_cm_event(ch, &e))
			die("rdma_get_cm_event");
		i = (int)(intptr_t)e->id->context;
		if (e->event == RDMA_CM_EVENT_ESTABLISHED) {
			t1 = now_us();
			lat[ok++] = t1 - start[i];
			done++;
		} else if (e->event != RDMA_CM_EVENT_DISCONNECTED) {
			if (fails++ < 5)
				fprintf(stderr, "connect %d: %s %d\n", i,
					rdma_event_str(e->event), e->status);
			done++;
		}
		rdma_ack_cm_event(e);
		th = threads_now();
		if (th > r->threads)
			r->threads = th;
	}
	finish(r, lat, ok, t0, t1);
	for (int i = 0; i < nconn; i++) {
		if (with_qp)
			rdma_destroy_qp(ids[i]);
		rdma_destroy_id(ids[i]);
	}
	rdma_destroy_event_channel(ch);
}

static void run_tcp(uint16_t port, struct result *r)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = port };
	static int fds[MAX_CONNS], got[MAX_CONNS];
	static double start[MAX_CONNS], lat[MAX_CONNS];
	struct epoll_event evs[64];
	int ep = epoll_create1(0), done = 0, ok = 0;
	double t0, t1;

	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ep < 0)
		die("epoll_create1");
	t0 = now_us();
	for (int i = 0; i < nconn; i++) {
		struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = i };
		int one = 1;

		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (fds[i] < 0)
			die("socket");
		setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one,
			   sizeof(one));
		start[i] = now_us();
		if (connect(fds[i], (struct sockaddr *)&dst, sizeof(dst)) &&
		    errno != EINPROGRESS)
			die("connect");
		got[i] = -1;
		epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
	}
	t1 = t0;
	while (done < nconn) {
		int n = epoll_wait(ep, evs, 64, 10000);

		if (n <= 0)
			die("tcp baseline stalled");
		for (int k = 0; k < n; k++) {
			int i = (int)evs[k].data.u32;
			char buf[FRAME] = { 0 };
			ssize_t m;

			if (got[i] < 0) {
				struct epoll_event ev = { .events = EPOLLIN,
							  .data.u32 = i };

				if (send(fds[i], buf, FRAME, MSG_NOSIGNAL) !=
				    FRAME) {
					done++;
					epoll_ctl(ep, EPOLL_CTL_DEL, fds[i],
						  NULL);
					continue;
				}
				got[i] = 0;
				epoll_ctl(ep, EPOLL_CTL_MOD, fds[i], &ev);
				continue;
			}
			m = recv(fds[i], buf, FRAME - got[i], 0);
			if (m > 0)
				got[i] += (int)m;
			if (m > 0 && got[i] < FRAME)
				continue;
			if (got[i] == FRAME) {
				t1 = now_us();
				lat[ok++] = t1 - start[i];
			}
			done++;
			epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], NULL);
		}
	}
	finish(r, lat, ok, t0, t1);
	for (int i = 0; i < nconn; i++)
		close(fds[i]);
	close(ep);
}

static void print(const char *what, const struct result *r)
{
	printf("%-9s %6d/%-6d %10.0f %10.2f %10.2f", what, r->ok, nconn,
	       r->rate, r->median_ms, r->max_ms);
	if (r->threads > 0)
		printf(" %8d", r->threads);
	printf("\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conns", required_argument, NULL, 'n' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int to_child[2], from_child[2], repeat = 1, c;
	uint16_t ports[2];
	pid_t pid;

	while ((c = getopt_long(argc, argv, "n:r:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			nconn = atoi(optarg);
			break;
		case 'r':
			repeat = atoi(optarg);
			break;
		default:
			printf("usage: %s [-n N (1..%d)] [--repeat R (1..10)]\n",
			       argv[0], MAX_CONNS);
			return c == 'h' ? 0 : 2;
		}
	}
	if (nconn < 1 || nconn > MAX_CONNS || repeat < 1 || repeat > 10) {
		fprintf(stderr, "out of range\n");
		return 2;
	}
	alarm(120);
	if (pipe(to_child) || pipe(from_child))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid) {
		alarm(150);
		close(to_child[1]);
		close(from_child[0]);
		server(from_child[1], to_child[0]);
	}
	close(to_child[0]);
	close(from_child[1]);
	if (read(from_child[0], ports, sizeof(ports)) != sizeof(ports)) {
		fprintf(stderr, "server did not start\n");
		return 1;
	}
	printf("%d simultaneous connections on 127.0.0.1, each with an RC "
	       "QP\n", nconn);
	printf("%-9s %13s %10s %10s %10s %8s\n", "", "connected", "conn/s",
	       "median ms", "max ms", "threads");
	/* Alternate, so that a change of load hits both alike. */
	for (int k = 0; k < repeat; k++) {
		struct result r = { 0 }, t = { 0 };

		run_rdma(ports[0], &r);
		run_tcp(ports[1], &t);
		print("rdma_cm", &r);
		print("raw TCP", &t);
	}
	close(to_child[1]);
	waitpid(pid, NULL, 0);
	return 0;
}
