/* SPDX-License-Identifier: MIT */
/*
 * wisp_connrate - rdma_cm connection rate over wisp on 127.0.0.1, next to
 * raw TCP doing the same round trip in the same run (docs/benchmarks.md,
 * "Connection rate").
 *
 *   wisp_connrate [-n N] [--repeat R] [--pace RATE] [--phases]
 *
 * A child process listens (rdma_listen backlog 0: the default) and
 * accepts every request, with an RC QP; it destroys the QP and the id
 * when the connection ends. The parent creates N ids, resolves them and
 * creates their QPs, then opens the N connections and waits for every
 * ESTABLISHED, in one of two modes, which the output names:
 *
 *   burst (the default): rdma_connect for all N in one loop, at once.
 *   paced (--pace RATE): one rdma_connect every 1/RATE s, the events
 *          read in between, so that at most a few connections are under
 *          way at a time.
 *
 * Reported: connections per second from the first rdma_connect to the
 * last ESTABLISHED, the median, 99th percentile and slowest single
 * connection (its rdma_connect to its ESTABLISHED), and the most threads
 * the client process had meanwhile (looked at most once a millisecond).
 * The baseline: N non-blocking TCP connects to a TCP listener in the same
 * child, each sending a 24-octet request and reading a 24-octet answer
 * (the size of an MPA Request / Reply without private data), over epoll,
 * started on the same schedule.
 *
 * --phases adds where each rdma_cm connection's time went, from
 * CLOCK_MONOTONIC stamps taken in both processes (the child reports its
 * own, matched to the parent's connections by port): the rdma_connect
 * call to the listener's application holding CONNECT_REQUEST, the
 * listener's rdma_create_qp and rdma_accept calls, and the rdma_accept
 * call to the client's ESTABLISHED; how long the loop of rdma_connect
 * calls took; and the CPU time and context switches of each process
 * (getrusage, all its threads) per connection over the burst.
 *
 * Bounded: N <= 4096, RATE <= 100000, and an alarm ends the run after
 * 120 s.
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define MAX_CONNS 4096
#define MAX_RATE 100000
#define FRAME 24

static int nconn = 1000;
static int pace;             /* connections per second; 0: burst */
static bool phases;
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

/* The most threads seen, looked at no more than once a millisecond: the
 * look reads /proc, and once per event it cost the burst itself. */
static void threads_sample(int *most, double *last, bool force)
{
	double now = now_us();
	int n;

	if (!force && now - *last < 1000)
		return;
	*last = now;
	n = threads_now();
	if (n > *most)
		*most = n;
}

/* The start of connection i on the schedule (t0 + i / RATE). */
static double due_at(double t0, int i)
{
	return pace ? t0 + i * (1e6 / pace) : t0;
}

/* A timespec for ppoll / epoll_pwait2 until t (µs), NULL if t is -1. */
static struct timespec *until(double t, struct timespec *ts)
{
	double left;

	if (t < 0)
		return NULL;
	left = t - now_us();
	if (left < 0)
		left = 0;
	ts->tv_sec = (time_t)(left / 1e6);
	ts->tv_nsec = (long)((left - ts->tv_sec * 1e6) * 1e3);
	return ts;
}

static void full_write(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write");
		p += n;
		len -= (size_t)n;
	}
}

static bool full_read(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
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

/* What the listener's application did with one request, and when. */
struct srec {
	double t_req;              /* rdma_get_cm_event gave CONNECT_REQUEST */
	double t_qp;               /* rdma_create_qp returned */
	double t_acc;              /* rdma_accept returned */
	uint16_t port;             /* the client's port, network order */
};

static struct srec srecs[MAX_CONNS];
static uint32_t nsrec;

/* CPU time (µs) and context switches of this process so far. */
struct usage {
	double cpu_us, csw;
};

static struct usage usage_now(void)
{
	struct rusage ru;
	struct usage u = { 0 };

	if (getrusage(RUSAGE_SELF, &ru))
		return u;
	u.cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
		   ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
	u.csw = (double)(ru.ru_nvcsw + ru.ru_nivcsw);
	return u;
}

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

/* One event of the listener's channel. */
static void server_event(struct rdma_cm_event *e)
{
	struct rdma_cm_id *id = e->id;
	enum rdma_cm_event_type type = e->event;
	struct ibv_qp_init_attr qa;
	struct srec *s = nsrec < MAX_CONNS ? &srecs[nsrec] : NULL;
	double t = now_us();

	rdma_ack_cm_event(e);
	if (type == RDMA_CM_EVENT_DISCONNECTED) {
		/* Keep the child's QPs and descriptors bounded over
		 * repeats. */
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
		return;
	}
	if (type != RDMA_CM_EVENT_CONNECT_REQUEST)
		return;
	qp_attr(&qa);
	if (with_qp && rdma_create_qp(id, NULL, &qa)) {
		perror("server rdma_create_qp");
		return;
	}
	if (s) {
		s->t_req = t;
		s->t_qp = now_us();
		s->port = rdma_get_dst_port(id);
	}
	if (rdma_accept(id, NULL)) {
		perror("server accept");
		return;
	}
	if (s) {
		s->t_acc = now_us();
		nsrec++;
	}
}

static void server(int out, int in)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_cm_id *lid = NULL;
	struct rdma_cm_event *e;
	socklen_t alen = sizeof(a);
	uint16_t ports[2];
	struct usage mark = { 0 }, now;
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
	full_write(out, ports, sizeof(ports));
	/* Serve until the parent closes its end of the pipe; an 's' from it
	 * marks the start of a run (answered with one octet), a 'p' asks
	 * for the stamps of the requests since the last one and the usage
	 * since the 's'. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	for (;;) {
		struct pollfd p[2] = { { .fd = ch->fd, .events = POLLIN },
				       { .fd = in, .events = POLLIN } };
		char cmd;

		if (poll(p, 2, -1) < 0)
			die("poll");
		while (!rdma_get_cm_event(ch, &e))
			server_event(e);
		if (!p[1].revents)
			continue;
		if (read(in, &cmd, 1) != 1)
			_exit(0);
		if (cmd == 's') {
			mark = usage_now();
			nsrec = 0;
			full_write(out, "s", 1);
			continue;
		}
		now = usage_now();
		now.cpu_us -= mark.cpu_us;
		now.csw -= mark.csw;
		full_write(out, &now, sizeof(now));
		full_write(out, &nsrec, sizeof(nsrec));
		full_write(out, srecs, nsrec * sizeof(srecs[0]));
		nsrec = 0;
	}
}

/* ---- the parent -------------------------------------------------------- */

struct result {
	double rate, p50_ms, p99_ms, max_ms;
	int ok, threads;
};

/* Where the rdma_cm connections' time went (--phases), ms. */
struct phase_set {
	int n;                      /* connections matched with the child */
	double loop_ms;             /* the loop of rdma_connect calls */
	double t0, t1;              /* the timed window, CLOCK_MONOTONIC µs */
	struct usage client, server; /* over the window */
	double to_req[MAX_CONNS], create_qp[MAX_CONNS], accept[MAX_CONNS],
	       to_est[MAX_CONNS];
	int late;                   /* CONNECT_REQUESTs behind a later connect */
	int slowest;                /* the slowest one's place in connect order */
	double slowest_req;         /* its rdma_connect -> CONNECT_REQUEST, ms */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The q-quantile of the sorted v[0..n-1] (nearest rank). */
static double quantile(const double *v, int n, double q)
{
	int k;

	if (!n)
		return 0;
	k = (int)(q * n + 0.999999) - 1;
	if (k < 0)
		k = 0;
	if (k >= n)
		k = n - 1;
	return v[k];
}

static void finish(struct result *r, double *lat, int ok, double t0,
		   double t1)
{
	qsort(lat, (size_t)ok, sizeof(*lat), cmp_double);
	r->ok = ok;
	r->rate = t1 > t0 ? ok / ((t1 - t0) / 1e6) : 0;
	r->p50_ms = quantile(lat, ok, 0.5) / 1e3;
	r->p99_ms = quantile(lat, ok, 0.99) / 1e3;
	r->max_ms = ok ? lat[ok - 1] / 1e3 : 0;
}

/* The child's stamps of this run, matched to the parent's connections. */
static void collect_phases(int to_child, int from_child,
			   const uint16_t *port_of, const double *start,
			   const double *est, struct phase_set *ph)
{
	static int idx[65536];
	uint32_t n;

	full_write(to_child, "p", 1);
	if (!full_read(from_child, &ph->server, sizeof(ph->server)) ||
	    !full_read(from_child, &n, sizeof(n)) || n > MAX_CONNS ||
	    !full_read(from_child, srecs, n * sizeof(srecs[0])))
		die("the child's stamps");
	for (int i = 0; i < 65536; i++)
		idx[i] = -1;
	for (int i = 0; i < nconn; i++)
		idx[port_of[i]] = i;
	ph->n = 0;
	ph->late = 0;
	ph->slowest = -1;
	for (uint32_t k = 0, most = 0; k < n; k++) {
		const struct srec *s = &srecs[k];
		int i = idx[s->port];

		if (i < 0 || est[i] <= 0)
			continue;
		/* The server's events come in its order: one behind a
		 * connection started later was overtaken. */
		if (ph->n && i < (int)most)
			ph->late++;
		if (!ph->n || i > (int)most)
			most = (uint32_t)i;
		if (ph->slowest < 0 ||
		    est[i] - start[i] > est[ph->slowest] - start[ph->slowest]) {
			ph->slowest = i;
			ph->slowest_req = (s->t_req - start[i]) / 1e3;
		}
		ph->to_req[ph->n] = (s->t_req - start[i]) / 1e3;
		ph->create_qp[ph->n] = (s->t_qp - s->t_req) / 1e3;
		ph->accept[ph->n] = (s->t_acc - s->t_qp) / 1e3;
		ph->to_est[ph->n] = (est[i] - s->t_qp) / 1e3;
		ph->n++;
	}
}

static void run_rdma(uint16_t port, struct result *r, struct phase_set *ph,
		     int to_child, int from_child)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = port };
	static struct rdma_cm_id *ids[MAX_CONNS];
	static double start[MAX_CONNS], est[MAX_CONNS], lat[MAX_CONNS];
	static uint16_t port_of[MAX_CONNS];
	struct rdma_cm_event *e;
	int resolved = 0, done = 0, fails = 0, ok = 0, next = 0;
	double t0, t1, last_look = 0;

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
	/* Addresses and routes first, and the QPs: then the connects. */
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
	for (int i = 0; i < nconn; i++)
		est[i] = 0;
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	r->threads = 0;
	threads_sample(&r->threads, &last_look, true);
	{
		char ack;

		full_write(to_child, "s", 1);
		if (!full_read(from_child, &ack, 1))
			die("the child's mark");
	}
	ph->client = usage_now();
	t0 = now_us();
	t1 = t0;
	ph->loop_ms = 0;
	while (done < nconn) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		struct timespec ts;

		/* Whatever the schedule says is due: all at once in a
		 * burst. */
		if (next < nconn) {
			double now = now_us();

			while (next < nconn && now >= due_at(t0, next)) {
				struct rdma_conn_param cp = {
					.retry_count = 7
				};

				start[next] = now;
				if (rdma_connect(ids[next], &cp))
					die("rdma_connect");
				next++;
				now = now_us();
			}
			if (next == nconn)
				ph->loop_ms = (now - t0) / 1e3;
		}
		while (!rdma_get_cm_event(ch, &e)) {
			int i = (int)(intptr_t)e->id->context;

			if (e->event == RDMA_CM_EVENT_ESTABLISHED) {
				t1 = now_us();
				est[i] = t1;
				lat[ok++] = t1 - start[i];
				done++;
			} else if (e->event != RDMA_CM_EVENT_DISCONNECTED) {
				if (fails++ < 5)
					fprintf(stderr, "connect %d: %s %d\n",
						i, rdma_event_str(e->event),
						e->status);
				done++;
			}
			rdma_ack_cm_event(e);
		}
		if (errno != EAGAIN)
			die("rdma_get_cm_event");
		threads_sample(&r->threads, &last_look, false);
		if (done >= nconn)
			break;
		if (ppoll(&p, 1, until(next < nconn ? due_at(t0, next) : -1,
				       &ts), NULL) < 0 && errno != EINTR)
			die("ppoll");
	}
	{
		struct usage u = usage_now();

		ph->client.cpu_us = u.cpu_us - ph->client.cpu_us;
		ph->client.csw = u.csw - ph->client.csw;
	}
	threads_sample(&r->threads, &last_look, true);
	finish(r, lat, ok, t0, t1);
	ph->t0 = t0;
	ph->t1 = t1;
	/* Read once connected: with every local port held (TIME_WAIT from
	 * runs just before), the connect takes it, not rdma_resolve_addr. */
	for (int i = 0; i < nconn; i++)
		port_of[i] = rdma_get_src_port(ids[i]);
	collect_phases(to_child, from_child, port_of, start, est, ph);
	for (int i = 0; i < nconn; i++) {
		if (with_qp)
			rdma_destroy_qp(ids[i]);
		rdma_destroy_id(ids[i]);
	}
	rdma_destroy_event_channel(ch);
}

/* Start TCP connection i of the baseline. */
static void tcp_start(int ep, int *fds, int *got, double *start, int i,
		      const struct sockaddr_in *dst)
{
	struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = (uint32_t)i };
	int one = 1;

	fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fds[i] < 0)
		die("socket");
	setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	start[i] = now_us();
	if (connect(fds[i], (const struct sockaddr *)dst, sizeof(*dst)) &&
	    errno != EINPROGRESS)
		die("connect");
	got[i] = -1;
	epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
}

static void run_tcp(uint16_t port, struct result *r)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = port };
	static int fds[MAX_CONNS], got[MAX_CONNS];
	static double start[MAX_CONNS], lat[MAX_CONNS];
	struct epoll_event evs[64];
	int ep = epoll_create1(0), done = 0, ok = 0, next = 0;
	double t0, t1;

	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ep < 0)
		die("epoll_create1");
	t0 = now_us();
	t1 = t0;
	while (done < nconn) {
		struct timespec ts;
		int n;

		while (next < nconn && now_us() >= due_at(t0, next)) {
			tcp_start(ep, fds, got, start, next, &dst);
			next++;
		}
		if (next < nconn) {
			n = epoll_pwait2(ep, evs, 64,
					 until(due_at(t0, next), &ts), NULL);
		} else {
			n = epoll_wait(ep, evs, 64, 10000);
			if (n == 0)
				die("tcp baseline stalled");
		}
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		for (int k = 0; k < n; k++) {
			int i = (int)evs[k].data.u32;
			char buf[FRAME] = { 0 };
			ssize_t m;

			if (got[i] < 0) {
				struct epoll_event ev = { .events = EPOLLIN,
							  .data.u32 = (uint32_t)i };

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
			m = recv(fds[i], buf, (size_t)(FRAME - got[i]), 0);
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
	printf("%-9s %6d/%-6d %10.0f %9.2f %9.2f %9.2f", what, r->ok, nconn,
	       r->rate, r->p50_ms, r->p99_ms, r->max_ms);
	if (r->threads > 0)
		printf(" %8d", r->threads);
	printf("\n");
}

static void print_one_phase(const char *what, double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	printf("  %-36s %8.2f %8.2f %8.2f\n", what, quantile(v, n, 0.5),
	       quantile(v, n, 0.99), n ? v[n - 1] : 0);
}

static void print_phases(struct phase_set *ph)
{
	printf("  phases of %d rdma_cm connections (ms)     p50      p99"
	       "      max\n", ph->n);
	print_one_phase("rdma_connect -> CONNECT_REQUEST", ph->to_req, ph->n);
	print_one_phase("server rdma_create_qp", ph->create_qp, ph->n);
	print_one_phase("server rdma_accept", ph->accept, ph->n);
	print_one_phase("rdma_accept call -> ESTABLISHED", ph->to_est,
			ph->n);
	printf("  %-36s %8.2f\n", "the loop of rdma_connect calls",
	       ph->loop_ms);
	printf("  %-36s %8d\n", "CONNECT_REQUESTs overtaken", ph->late);
	if (ph->slowest >= 0)
		printf("  %-36s %8d %8.2f\n",
		       "slowest: # in connect order, ->REQ ms", ph->slowest,
		       ph->slowest_req);
	printf("  %-36s %8.1f %8.1f\n", "CPU us / connection: client, server",
	       ph->client.cpu_us / nconn, ph->server.cpu_us / nconn);
	printf("  %-36s %8.2f %8.2f\n", "context switches / conn: client, server",
	       ph->client.csw / nconn, ph->server.csw / nconn);
	/* For perf report --time (perf record -k CLOCK_MONOTONIC). */
	printf("  window (CLOCK_MONOTONIC s)         %.6f,%.6f\n",
	       ph->t0 / 1e6, ph->t1 / 1e6);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "conns", required_argument, NULL, 'n' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "pace", required_argument, NULL, 'p' },
		{ "phases", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static struct phase_set ph;
	int to_child[2], from_child[2], repeat = 1, c;
	uint16_t ports[2];
	pid_t pid;

	while ((c = getopt_long(argc, argv, "n:r:p:Ph", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			nconn = atoi(optarg);
			break;
		case 'r':
			repeat = atoi(optarg);
			break;
		case 'p':
			pace = atoi(optarg);
			if (pace <= 0)
				pace = -1;
			break;
		case 'P':
			phases = true;
			break;
		default:
			printf("usage: %s [-n N (1..%d)] [--repeat R (1..10)] "
			       "[--pace RATE (1..%d per second; default: "
			       "all at once)] [--phases]\n",
			       argv[0], MAX_CONNS, MAX_RATE);
			return c == 'h' ? 0 : 2;
		}
	}
	if (nconn < 1 || nconn > MAX_CONNS || repeat < 1 || repeat > 10 ||
	    pace < 0 || pace > MAX_RATE) {
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
	if (!full_read(from_child[0], ports, sizeof(ports))) {
		fprintf(stderr, "server did not start\n");
		return 1;
	}
	if (pace)
		printf("mode: paced, %d connections on 127.0.0.1 opened at a "
		       "steady %d per second, each with an RC QP\n", nconn,
		       pace);
	else
		printf("mode: burst, %d simultaneous connections on "
		       "127.0.0.1, each with an RC QP\n", nconn);
	printf("%-9s %13s %10s %9s %9s %9s %8s\n", "", "connected", "conn/s",
	       "p50 ms", "p99 ms", "max ms", "threads");
	/* Alternate, so that a change of load hits both alike. */
	for (int k = 0; k < repeat; k++) {
		struct result r = { 0 }, t = { 0 };

		run_rdma(ports[0], &r, &ph, to_child[1], from_child[0]);
		run_tcp(ports[1], &t);
		print("rdma_cm", &r);
		if (phases)
			print_phases(&ph);
		print("raw TCP", &t);
		fflush(stdout);
	}
	close(to_child[1]);
	waitpid(pid, NULL, 0);
	return 0;
}
