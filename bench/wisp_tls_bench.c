// SPDX-License-Identifier: MIT
/*
 * wisp_tls_bench - TLS 1.3 under MPA (docs/tls.md) on 127.0.0.1, in one
 * process, all with TLS_AES_128_GCM_SHA256 and an external PSK:
 *
 *   raw-tls    an OpenSSL TLS socket pair moving 64 KiB SSL_writes (the
 *              same sessions, BIO and cipher wisp uses): the ceiling;
 *   wisp       RDMA WRITE 64 KiB, 16 outstanding, plaintext MPA;
 *   wisp-tls   the same inside TLS;
 *
 * each with GiB/s and CPU seconds per GiB (user + system of the whole
 * process, both ends), then SEND 8 B ping-pong latency (median and p99
 * round trip) with and without TLS.
 *
 *   wisp_tls_bench [--mib N] [--iters N] [--rounds N]
 *                  [--only raw|plain|tls|lat]
 *
 * --rounds runs every part N times in turn (raw, plain, tls, latency,
 * then again) and prints the medians, and each round's ratios: on a
 * shared machine a ratio of runs made moments apart is the steadier
 * figure. --only runs one part alone (the others print as 0), for a
 * profiler; a list (--only raw,tls) runs those.
 *
 * Not part of the test run: it measures, it does not check (the suites
 * do). Results go to stdout as a table.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "glue_tls.h"
#include "wisp_private.h"

#define MSG (64 * 1024)
#define WINDOW 16

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
						     noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "wisp_tls_bench: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void tcp_pair(int *cli, int *srv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(l, 1) || getsockname(l, (struct sockaddr *)&sin, &len))
		die("listen: %s", strerror(errno));
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	if (*cli < 0 || connect(*cli, (struct sockaddr *)&sin, sizeof(sin)))
		die("connect: %s", strerror(errno));
	*srv = accept(l, NULL, NULL);
	if (*srv < 0)
		die("accept: %s", strerror(errno));
	close(l);
	setsockopt(*cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- TLS sessions ------------------------------------------------------ */

static char psk_path[64];
static struct glue_tls_config tls_cfg = {
	.mode = GLUE_TLS_REQUIRED, .psk_identity = "wisp-bench",
};

static void psk_make(void)
{
	FILE *f;
	int fd;

	snprintf(psk_path, sizeof(psk_path), "/tmp/wisp-bench-psk.XXXXXX");
	fd = mkstemp(psk_path);
	f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f)
		die("mkstemp: %s", strerror(errno));
	srand((unsigned)time(NULL));
	for (int i = 0; i < 32; i++)
		fprintf(f, "%02x", rand() & 0xff);
	fputc('\n', f);
	fclose(f);
	tls_cfg.psk_file = psk_path;
}

struct hs {
	struct glue_tls *t;
	int ret;
};

static void *hs_main(void *arg)
{
	struct hs *h = arg;

	h->ret = glue_tls_handshake(h->t, 5000);
	return NULL;
}

/* Handshake on both ends (the server in a thread); sessions returned. */
static void tls_wrap(int cfd, int sfd, struct glue_tls **ct,
		     struct glue_tls **st)
{
	char why[256];
	struct glue_tls_ctx *cx = glue_tls_ctx_get(&tls_cfg, false, why,
						   sizeof(why));
	struct glue_tls_ctx *sx = glue_tls_ctx_get(&tls_cfg, true, why,
						   sizeof(why));
	struct hs h;
	pthread_t th;
	int ret;

	if (!cx || !sx)
		die("TLS context: %s", why);
	*ct = glue_tls_new(cx, cfd, "127.0.0.1");
	*st = glue_tls_new(sx, sfd, NULL);
	if (!*ct || !*st)
		die("glue_tls_new failed");
	h.t = *st;
	if (pthread_create(&th, NULL, hs_main, &h))
		die("pthread_create");
	ret = glue_tls_handshake(*ct, 5000);
	pthread_join(th, NULL);
	if (ret || h.ret)
		die("TLS handshake: %s / %s", glue_tls_fail_str(glue_tls_failure(
			*ct)), glue_tls_fail_str(glue_tls_failure(*st)));
}

/* ---- raw OpenSSL pair ---------------------------------------------------- */

struct raw_rd {
	struct glue_tls *t;
	int fd;
	uint64_t total;
};

static void wait_fd(int fd, short ev)
{
	struct pollfd p = { .fd = fd, .events = ev };

	poll(&p, 1, 1000);
}

static void *raw_reader(void *arg)
{
	struct raw_rd *r = arg;
	uint8_t *buf = malloc(MSG);
	uint64_t got = 0;

	while (got < r->total) {
		long n = glue_tls_read(r->t, buf, MSG);

		if (n == -EAGAIN) {
			wait_fd(r->fd, glue_tls_events(r->t));
			continue;
		}
		if (n <= 0)
			die("raw TLS read: %ld", n);
		got += (uint64_t)n;
	}
	free(buf);
	return NULL;
}

static void raw_tls(uint64_t total, double *gibs, double *cpu_per_gib)
{
	struct glue_tls *ct, *st;
	struct raw_rd rd;
	uint8_t *buf = calloc(1, MSG);
	pthread_t th;
	double t0, c0;
	int cfd, sfd;

	tcp_pair(&cfd, &sfd);
	tls_wrap(cfd, sfd, &ct, &st);
	rd = (struct raw_rd){ .t = st, .fd = sfd, .total = total };
	t0 = now_s();
	c0 = cpu_s();
	if (pthread_create(&th, NULL, raw_reader, &rd))
		die("pthread_create");
	for (uint64_t sent = 0; sent < total;) {
		size_t off = 0;

		while (off < MSG) {
			long n = glue_tls_write(ct, buf + off, MSG - off);

			if (n == -EAGAIN) {
				wait_fd(cfd, glue_tls_events(ct));
				continue;
			}
			if (n <= 0)
				die("raw TLS write: %ld", n);
			off += (size_t)n;
		}
		sent += MSG;
	}
	pthread_join(th, NULL);
	*gibs = (double)total / (1 << 30) / (now_s() - t0);
	*cpu_per_gib = (cpu_s() - c0) / ((double)total / (1 << 30));
	glue_tls_free(ct);
	glue_tls_free(st);
	close(cfd);
	close(sfd);
	free(buf);
}

/* ---- wisp ------------------------------------------------------------------ */

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint8_t *buf, *ctl;
	struct ibv_mr *mr, *ctl_mr;
};

static void side_init(struct side *s, struct ibv_device *dev)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2 * WINDOW + 4, .max_recv_wr = 64,
			 .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 8 },
	};
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

	s->ctx = ibv_open_device(dev);
	s->pd = s->ctx ? ibv_alloc_pd(s->ctx) : NULL;
	if (!s->pd)
		die("ibv_open_device / ibv_alloc_pd: %s", strerror(errno));
	s->scq = ibv_create_cq(s->ctx, 4096, NULL, NULL, 0);
	s->rcq = ibv_create_cq(s->ctx, 4096, NULL, NULL, 0);
	ia.send_cq = s->scq;
	ia.recv_cq = s->rcq;
	s->qp = s->scq && s->rcq ? ibv_create_qp(s->pd, &ia) : NULL;
	if (!s->qp || ibv_modify_qp(s->qp, &qa, IBV_QP_STATE |
				    IBV_QP_ACCESS_FLAGS))
		die("QP setup: %s", strerror(errno));
	s->buf = calloc(WINDOW, MSG);
	s->ctl = calloc(64, 8);
	s->mr = ibv_reg_mr(s->pd, s->buf, (size_t)WINDOW * MSG,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	s->ctl_mr = ibv_reg_mr(s->pd, s->ctl, 64 * 8, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr || !s->ctl_mr)
		die("ibv_reg_mr: %s", strerror(errno));
}

static void side_fini(struct side *s)
{
	ibv_destroy_qp(s->qp);
	ibv_dereg_mr(s->mr);
	ibv_dereg_mr(s->ctl_mr);
	ibv_destroy_cq(s->scq);
	ibv_destroy_cq(s->rcq);
	ibv_dealloc_pd(s->pd);
	ibv_close_device(s->ctx);
	free(s->buf);
	free(s->ctl);
}

static void post_recv(struct side *s, uint32_t slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->ctl + 8 * slot),
			       .length = 8, .lkey = s->ctl_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	if (ibv_post_recv(s->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send8(struct side *s)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->ctl + 8 * 63),
			       .length = 8, .lkey = s->ctl_mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE |
						IBV_SEND_SIGNALED }, *bad;

	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send (SEND)");
}

static void wait_cq(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	while (!(n = ibv_poll_cq(cq, 1, &wc)))
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS)
		die("completion: %s", n < 0 ? "poll failed" :
		    ibv_wc_status_str(wc.status));
}

struct pair {
	struct side a, b;
};

struct acc {
	struct ibv_qp *qp;
	int fd;
	struct wisp_mpa_prefs prefs;
	int ret;
};

static void *acc_main(void *arg)
{
	struct acc *a = arg;

	a->ret = wisp_qp_connect_fd(a->qp, a->fd, false, &a->prefs, 5000);
	return NULL;
}

static void pair_setup(struct pair *p, bool tls)
{
	struct wisp_mpa_prefs prefs = { .mpa_rev = 2, .p2p = true,
					.ird = 4, .ord = 4 };
	struct acc acc = { .prefs = prefs };
	struct ibv_device **list;
	pthread_t th;
	int n = 0, cfd, ret;

	list = ibv_get_device_list(&n);
	if (!list || n < 1 || strncmp(ibv_get_device_name(list[0]), "wisp", 4))
		die("wisp's libibverbs.so.1 is not the one loaded");
	side_init(&p->a, list[0]);
	side_init(&p->b, list[0]);
	ibv_free_device_list(list);
	for (uint32_t i = 0; i < 32; i++) {
		post_recv(&p->a, i);
		post_recv(&p->b, i);
	}
	tcp_pair(&cfd, &acc.fd);
	if (tls) {
		struct glue_tls *ct, *st;

		/* Attached to their sockets, the sessions carry the MPA
		 * exchange and then the engine's stream (glue_tls.h). */
		tls_wrap(cfd, acc.fd, &ct, &st);
		if (glue_tls_attach(cfd, ct) || glue_tls_attach(acc.fd, st))
			die("glue_tls_attach");
	}
	acc.qp = p->b.qp;
	if (pthread_create(&th, NULL, acc_main, &acc))
		die("pthread_create");
	ret = wisp_qp_connect_fd(p->a.qp, cfd, true, &prefs, 5000);
	pthread_join(th, NULL);
	if (ret || acc.ret)
		die("connect: %s / %s", strerror(ret), strerror(acc.ret));
}

static void wisp_write(bool tls, uint64_t total, double *gibs,
		       double *cpu_per_gib)
{
	struct pair p;
	uint64_t posted = 0, done = 0;
	double t0, c0;

	pair_setup(&p, tls);
	t0 = now_s();
	c0 = cpu_s();
	while (done < total / MSG) {
		while (posted < total / MSG && posted - done < WINDOW) {
			uint32_t slot = (uint32_t)(posted % WINDOW);
			struct ibv_sge sge = {
				.addr = (uintptr_t)(p.a.buf + (size_t)slot * MSG),
				.length = MSG, .lkey = p.a.mr->lkey,
			};
			struct ibv_send_wr wr = {
				.sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = {
					.remote_addr = (uintptr_t)(p.b.buf +
						(size_t)slot * MSG),
					.rkey = p.b.mr->rkey,
				},
			}, *bad;

			if (ibv_post_send(p.a.qp, &wr, &bad))
				die("ibv_post_send (WRITE)");
			posted++;
		}
		wait_cq(p.a.scq);
		done++;
	}
	/* Everything placed: a SEND behind the WRITEs arrives last. */
	post_send8(&p.a);
	wait_cq(p.a.scq);
	wait_cq(p.b.rcq);
	*gibs = (double)total / (1 << 30) / (now_s() - t0);
	*cpu_per_gib = (cpu_s() - c0) / ((double)total / (1 << 30));
	side_fini(&p.b);
	side_fini(&p.a);
}

struct echo {
	struct side *s;
	int iters;
};

static void *echo_main(void *arg)
{
	struct echo *e = arg;

	for (int i = 0; i < e->iters; i++) {
		wait_cq(e->s->rcq);
		post_recv(e->s, (uint32_t)(i % 32));
		post_send8(e->s);
		wait_cq(e->s->scq);
	}
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void wisp_lat(bool tls, int iters, double *med_us, double *p99_us)
{
	double *rtt = malloc(sizeof(double) * (size_t)iters);
	struct echo e;
	struct pair p;
	pthread_t th;

	pair_setup(&p, tls);
	e = (struct echo){ .s = &p.b, .iters = iters };
	if (pthread_create(&th, NULL, echo_main, &e))
		die("pthread_create");
	for (int i = 0; i < iters; i++) {
		double t0 = now_s();

		post_send8(&p.a);
		wait_cq(p.a.scq);
		wait_cq(p.a.rcq);
		post_recv(&p.a, (uint32_t)(i % 32));
		rtt[i] = (now_s() - t0) * 1e6;
	}
	pthread_join(th, NULL);
	qsort(rtt, (size_t)iters, sizeof(double), cmp_d);
	*med_us = rtt[iters / 2];
	*p99_us = rtt[iters * 99 / 100];
	free(rtt);
	side_fini(&p.b);
	side_fini(&p.a);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MAX_ROUNDS 15

int main(int argc, char **argv)
{
	uint64_t mib = 1024;
	int iters = 20000, rounds = 1;
	/* [part][round]: raw, plain, tls; latency plain, tls */
	double g[3][MAX_ROUNDS] = { { 0 } }, c[3][MAX_ROUNDS] = { { 0 } };
	double wr[MAX_ROUNDS] = { 0 }, lr[MAX_ROUNDS] = { 0 };
	double m[2][MAX_ROUNDS] = { { 0 } }, p99[2][MAX_ROUNDS] = { { 0 } };
	const char *only = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else
			die("usage: wisp_tls_bench [--mib N] [--iters N] "
			    "[--rounds N] [--only raw|plain|tls|lat]");
	}
	if (mib < 1 || iters < 100 || rounds < 1 || rounds > MAX_ROUNDS)
		die("--mib >= 1, --iters >= 100, --rounds 1..%d", MAX_ROUNDS);
	psk_make();
	if (only && !strstr(only, "raw") && !strstr(only, "plain") &&
	    !strstr(only, "tls") && !strstr(only, "lat"))
		die("--only: expected raw, plain, tls or lat, or a list");
#define PART(name) (!only || strstr(only, name))
	/* Each round runs every part asked for once, in turn, so that a ratio
	 * compares runs made moments apart; the table gives medians. */
	for (int r = 0; r < rounds; r++) {
		if (PART("raw"))
			raw_tls(mib << 20, &g[0][r], &c[0][r]);
		if (PART("plain"))
			wisp_write(false, mib << 20, &g[1][r], &c[1][r]);
		if (PART("tls"))
			wisp_write(true, mib << 20, &g[2][r], &c[2][r]);
		if (PART("lat")) {
			wisp_lat(false, iters, &m[0][r], &p99[0][r]);
			wisp_lat(true, iters, &m[1][r], &p99[1][r]);
		}
		wr[r] = g[0][r] > 0 ? g[2][r] / g[0][r] : 0;
		lr[r] = m[0][r] > 0 ? m[1][r] / m[0][r] : 0;
		if (rounds > 1)
			printf("round %d: WRITE TLS / raw TLS %.2f, SEND 8 B "
			       "TLS / plaintext %.2f\n", r + 1, wr[r], lr[r]);
	}
#undef PART
	unlink(psk_path);

	printf("wisp_tls_bench: %" PRIu64 " MiB of 64 KiB writes, %d ping-pongs, "
	       "TLS_AES_128_GCM_SHA256, 127.0.0.1, median of %d round%s\n",
	       mib, iters, rounds, rounds > 1 ? "s" : "");
	printf("%-34s %10s %14s\n", "WRITE 64 KiB", "GiB/s", "CPU s / GiB");
	printf("%-34s %10.2f %14.2f\n", "raw OpenSSL TLS socket pair",
	       median(g[0], rounds), median(c[0], rounds));
	printf("%-34s %10.2f %14.2f\n", "wisp, plaintext",
	       median(g[1], rounds), median(c[1], rounds));
	printf("%-34s %10.2f %14.2f\n", "wisp, TLS", median(g[2], rounds),
	       median(c[2], rounds));
	printf("%-34s %10.2f\n", "wisp TLS / raw TLS", median(wr, rounds));
	printf("%-34s %10s %14s\n", "SEND 8 B round trip", "median us",
	       "p99 us");
	printf("%-34s %10.1f %14.1f\n", "wisp, plaintext", median(m[0], rounds),
	       median(p99[0], rounds));
	printf("%-34s %10.1f %14.1f\n", "wisp, TLS", median(m[1], rounds),
	       median(p99[1], rounds));
	printf("%-34s %10.2f\n", "TLS / plaintext (median)",
	       median(lr, rounds));
	return 0;
}
