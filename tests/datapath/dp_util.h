/* SPDX-License-Identifier: MIT */
/*
 * dp_util.h - two RC QPs connected over TCP loopback through wisp's
 * libibverbs, for the data-path suites. Everything goes through the
 * public verbs API; only the connection step uses wisp_qp_connect_fd()
 * (rdma_cm comes with librdmacm).
 */
#ifndef WISP_DP_UTIL_H
#define WISP_DP_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <infiniband/verbs.h>

#include "mpa.h"
#include "wisp_private.h"

#define DP_TIMEOUT_MS 20000

/* One side: its context, PD, CQs and QP. */
struct dp_side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_srq *srq;
	int fd_dup;               /* a dup of the socket, to break it */
};

struct dp_pair {
	struct dp_side a, b;      /* a is the initiator */
	uint32_t mulpdu;          /* what both sides derived from the MSS */
};

struct dp_opts {
	uint32_t sq, rq, cqe;
	uint8_t ord, ird;         /* 0: 16 */
	struct wisp_mpa_prefs prefs;
	bool share_ctx;           /* b uses a's context */
	struct ibv_srq *srq_b;    /* b's QP uses this SRQ */
	struct ibv_pd *pd_b;      /* and this PD */
	uint64_t send_ops;        /* !0: ibv_create_qp_ex with these */
	int mss;                  /* !0: TCP_MAXSEG on both sockets, as
				   * over a link of a smaller MTU */
	bool one_cq;              /* each QP's sends and receives complete
				   * in one CQ (scq == rcq) */
};

static inline struct ibv_context *dp_open(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx;

	cr_assert(list && n == 1, "one wisp device");
	ctx = ibv_open_device(list[0]);
	cr_assert_not_null(ctx, "open wisp0");
	ibv_free_device_list(list);
	return ctx;
}

static inline void dp_side_init(struct dp_side *s, struct ibv_context *ctx,
				const struct dp_opts *o, struct ibv_pd *pd,
				struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr qa = { 0 };
	uint32_t cqe = o->cqe ? o->cqe : 4096;

	s->ctx = ctx;
	s->pd = pd ? pd : ibv_alloc_pd(ctx);
	cr_assert_not_null(s->pd);
	s->ch = ibv_create_comp_channel(ctx);
	cr_assert_not_null(s->ch);
	s->scq = ibv_create_cq(ctx, (int)cqe, NULL, s->ch, 0);
	s->rcq = o->one_cq ? s->scq : ibv_create_cq(ctx, (int)cqe, NULL, s->ch,
						    0);
	cr_assert(s->scq && s->rcq);
	ia.send_cq = s->scq;
	ia.recv_cq = s->rcq;
	ia.srq = srq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = o->sq ? o->sq : 512;
	ia.cap.max_recv_wr = o->rq ? o->rq : 512;
	ia.cap.max_send_sge = 6;
	ia.cap.max_recv_sge = 6;
	ia.cap.max_inline_data = 64;
	if (o->send_ops) {
		struct ibv_qp_init_attr_ex ix = {
			.send_cq = ia.send_cq, .recv_cq = ia.recv_cq,
			.srq = ia.srq, .cap = ia.cap, .qp_type = ia.qp_type,
			.comp_mask = IBV_QP_INIT_ATTR_PD |
				     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = s->pd, .send_ops_flags = o->send_ops,
		};

		s->qp = ibv_create_qp_ex(ctx, &ix);
	} else {
		s->qp = ibv_create_qp(s->pd, &ia);
	}
	cr_assert_not_null(s->qp, "create_qp: %s", strerror(errno));
	s->srq = srq;
	qa.qp_state = IBV_QPS_INIT;
	qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	cr_assert_eq(ibv_modify_qp(s->qp, &qa,
				   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), 0);
	qa.max_rd_atomic = o->ord ? o->ord : 16;
	qa.max_dest_rd_atomic = o->ird ? o->ird : 16;
	cr_assert_eq(ibv_modify_qp(s->qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC |
				   IBV_QP_MAX_DEST_RD_ATOMIC), 0);
	s->fd_dup = -1;
}

struct dp_accept {
	struct dp_side *s;
	int fd;
	struct wisp_mpa_prefs prefs;
	int ret;
};

static inline void *dp_accept_main(void *arg)
{
	struct dp_accept *a = arg;

	a->ret = wisp_qp_connect_fd(a->s->qp, a->fd, false, &a->prefs,
				    DP_TIMEOUT_MS);
	return NULL;
}

/* Connect a (initiator) and b (responder) over 127.0.0.1. */
static inline void dp_connect(struct dp_pair *p, const struct dp_opts *o)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	struct dp_accept acc = { .s = &p->b };
	pthread_t th;
	int lfd, cfd, sfd, mss = 0;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(lfd >= 0);
	if (o->mss)
		cr_assert_eq(setsockopt(lfd, IPPROTO_TCP, TCP_MAXSEG, &o->mss,
					sizeof(o->mss)), 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	cr_assert_eq(listen(lfd, 1), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sin, &len), 0);
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (o->mss)
		cr_assert_eq(setsockopt(cfd, IPPROTO_TCP, TCP_MAXSEG, &o->mss,
					sizeof(o->mss)), 0);
	cr_assert_eq(connect(cfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	sfd = accept(lfd, NULL, NULL);
	cr_assert(sfd >= 0);
	close(lfd);
	len = sizeof(mss);
	cr_assert_eq(getsockopt(cfd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len), 0);
	p->mulpdu = mpa_mulpdu((uint32_t)mss, false);
	p->a.fd_dup = dup(cfd);
	p->b.fd_dup = dup(sfd);

	acc.fd = sfd;
	acc.prefs = o->prefs;
	cr_assert_eq(pthread_create(&th, NULL, dp_accept_main, &acc), 0);
	cr_assert_eq(wisp_qp_connect_fd(p->a.qp, cfd, true, &o->prefs,
					DP_TIMEOUT_MS), 0, "initiator connect");
	pthread_join(th, NULL);
	cr_assert_eq(acc.ret, 0, "responder connect: %s", strerror(acc.ret));
}

static inline void dp_setup(struct dp_pair *p, const struct dp_opts *o)
{
	struct ibv_context *ca = dp_open();
	struct ibv_context *cb = o->share_ctx ? ca : dp_open();

	memset(p, 0, sizeof(*p));
	dp_side_init(&p->a, ca, o, NULL, NULL);
	dp_side_init(&p->b, cb, o, o->pd_b, o->srq_b);
	dp_connect(p, o);
}

static inline void dp_side_fini(struct dp_side *s, bool keep_pd, bool close_ctx)
{
	cr_assert_eq(ibv_destroy_qp(s->qp), 0);
	cr_assert_eq(ibv_destroy_cq(s->scq), 0);
	if (s->rcq != s->scq)
		cr_assert_eq(ibv_destroy_cq(s->rcq), 0);
	cr_assert_eq(ibv_destroy_comp_channel(s->ch), 0);
	if (!keep_pd)
		cr_assert_eq(ibv_dealloc_pd(s->pd), 0);
	if (s->fd_dup >= 0)
		close(s->fd_dup);
	if (close_ctx)
		cr_assert_eq(ibv_close_device(s->ctx), 0);
}

static inline void dp_teardown(struct dp_pair *p, const struct dp_opts *o)
{
	dp_side_fini(&p->a, false, !o->share_ctx);
	dp_side_fini(&p->b, o->pd_b != NULL, true);
}

static inline int64_t dp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Poll cq until n completions arrived (or DP_TIMEOUT_MS). */
static inline int dp_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int64_t end = dp_now_ms() + DP_TIMEOUT_MS;
	int got = 0;

	while (got < n && dp_now_ms() < end) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		cr_assert(r >= 0, "poll_cq: %d", r);
		got += r;
		if (!r)
			sched_yield();
	}
	return got;
}

static inline struct ibv_wc dp_wait1(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	cr_assert_eq(dp_poll(cq, &wc, 1), 1, "a completion within %d ms",
		     DP_TIMEOUT_MS);
	return wc;
}

static inline struct ibv_mr *dp_mr(struct ibv_pd *pd, size_t len, int access,
				   uint8_t **buf)
{
	struct ibv_mr *mr;

	*buf = malloc(len ? len : 1);
	cr_assert_not_null(*buf);
	mr = ibv_reg_mr(pd, *buf, len ? len : 1, access);
	cr_assert_not_null(mr, "reg_mr: %s", strerror(errno));
	return mr;
}

#define DP_ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		       IBV_ACCESS_REMOTE_READ)

#endif /* WISP_DP_UTIL_H */
