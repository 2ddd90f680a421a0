/* SPDX-License-Identifier: MIT */
/*
 * wisp's libibverbs.so.1, the objects of the data path without a
 * connection: completion channels shared by several CQs, and the
 * lifetime rules between SRQs and the QPs that use them. A QP moved to
 * ERROR completes every receive posted to it at once, with
 * IBV_WC_WR_FLUSH_ERR, on the posting thread: that makes completions,
 * and so channel events, happen exactly when a test asks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <infiniband/verbs.h>

#include "verbs_open.h"

static struct ibv_pd *pd;

static void open_wisp0(void)
{
	wisp0_open();
	pd = ibv_alloc_pd(ctx);
	cr_assert_not_null(pd);
}

static void close_wisp0(void)
{
	if (pd)
		cr_expect_eq(ibv_dealloc_pd(pd), 0);
	pd = NULL;
	wisp0_close();
}

TestSuite(verbs_objects, .init = open_wisp0, .fini = close_wisp0);

/* An RC QP on cq (both queues), or on srq, moved to ERROR. */
static struct ibv_qp *error_qp(struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	cr_assert_not_null(qp, "create_qp: %s", strerror(errno));
	cr_assert_eq(ibv_modify_qp(qp, &qa, IBV_QP_STATE), 0);
	return qp;
}

/* Arm cq and make one completion on it (a flushed receive of qp). */
static void fire(struct ibv_cq *cq, struct ibv_qp *qp, uint64_t wr_id)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id }, *bad;

	cr_assert_eq(ibv_req_notify_cq(cq, 0), 0);
	cr_assert_eq(ibv_post_recv(qp, &wr, &bad), 0);
}

/*
 * A CQ that fires again before its event was read ("arm, poll again,
 * carry on without reading the event") gives one event per firing, and
 * the events of the other CQs on the channel are neither lost nor
 * repeated. Before the fix the CQ was linked a second time on the
 * channel's list, which cut off the CQs behind it or looped.
 */
Test(verbs_objects, channel_cq_fires_again_before_read, .timeout = 20)
{
	enum { NCQ = 3 };
	static const int order[] = { 0, 1, 0, 2, 0, 0, 1 };
	const int nev = (int)(sizeof(order) / sizeof(order[0]));
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq[NCQ];
	struct ibv_qp *qp[NCQ];
	int want[NCQ] = { 0 }, got[NCQ] = { 0 };
	int fl;

	cr_assert_not_null(ch);
	for (int i = 0; i < NCQ; i++) {
		cq[i] = ibv_create_cq(ctx, 16, (void *)(uintptr_t)(i + 1), ch,
				      0);
		cr_assert_not_null(cq[i]);
		qp[i] = error_qp(cq[i], NULL);
	}
	for (int k = 0; k < nev; k++) {
		fire(cq[order[k]], qp[order[k]], (uint64_t)k);
		want[order[k]]++;
	}

	fl = fcntl(ch->fd, F_GETFL);
	cr_assert_eq(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	for (int k = 0; k < nev; k++) {
		struct ibv_cq *ev_cq = NULL;
		void *ev_ctx = NULL;
		int i;

		cr_assert_eq(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0,
			     "event %d of %d: %s", k + 1, nev, strerror(errno));
		for (i = 0; i < NCQ && cq[i] != ev_cq; i++)
			;
		cr_assert_lt(i, NCQ, "event %d names one of the CQs", k + 1);
		cr_assert_eq(ev_ctx, (void *)(uintptr_t)(i + 1));
		got[i]++;
	}
	for (int i = 0; i < NCQ; i++)
		cr_assert_eq(got[i], want[i], "CQ %d: %d events, %d fired", i,
			     got[i], want[i]);
	{
		struct ibv_cq *ev_cq;
		void *ev_ctx;

		errno = 0;
		cr_assert_eq(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1,
			     "no event beyond those fired");
		cr_assert_eq(errno, EAGAIN);
	}

	for (int i = 0; i < NCQ; i++) {
		struct ibv_wc wc[8];

		cr_assert_eq(ibv_poll_cq(cq[i], 8, wc), want[i]);
		ibv_ack_cq_events(cq[i], (unsigned int)got[i]);
		cr_assert_eq(ibv_destroy_qp(qp[i]), 0);
		cr_assert_eq(ibv_destroy_cq(cq[i]), 0);
	}
	cr_assert_eq(ibv_destroy_comp_channel(ch), 0);
}

/* Destroying a CQ drops its unread events, and only its own. */
Test(verbs_objects, channel_destroy_cq_drops_its_events, .timeout = 20)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *a, *b, *ev_cq;
	struct ibv_qp *qa, *qb;
	struct ibv_wc wc[4];
	void *ev_ctx;
	int fl;

	cr_assert_not_null(ch);
	a = ibv_create_cq(ctx, 16, NULL, ch, 0);
	b = ibv_create_cq(ctx, 16, NULL, ch, 0);
	cr_assert(a && b);
	qa = error_qp(a, NULL);
	qb = error_qp(b, NULL);
	fire(a, qa, 1);
	fire(b, qb, 2);
	fire(a, qa, 3);
	cr_assert_eq(ibv_destroy_qp(qa), 0);
	cr_assert_eq(ibv_poll_cq(a, 4, wc), 2);
	cr_assert_eq(ibv_destroy_cq(a), 0);

	fl = fcntl(ch->fd, F_GETFL);
	cr_assert_eq(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	cr_assert_eq(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
	cr_assert_eq(ev_cq, b, "b's event is left, a's are gone");
	errno = 0;
	cr_assert_eq(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
	cr_assert_eq(errno, EAGAIN);
	ibv_ack_cq_events(b, 1);
	cr_assert_eq(ibv_poll_cq(b, 4, wc), 1);
	cr_assert_eq(ibv_destroy_qp(qb), 0);
	cr_assert_eq(ibv_destroy_cq(b), 0);
	cr_assert_eq(ibv_destroy_comp_channel(ch), 0);
}

/*
 * ibv_destroy_srq of an SRQ that a QP still uses fails with EBUSY, as
 * rdma-core's kernel path does (and wisp already did for CQs); before the
 * fix it freed the SRQ under the QP.
 */
Test(verbs_objects, destroy_srq_in_use_is_busy)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq *srq;
	struct ibv_qp *q1, *q2;

	cr_assert_not_null(cq);
	srq = ibv_create_srq(pd, &sa);
	cr_assert_not_null(srq, "create_srq: %s", strerror(errno));
	q1 = error_qp(cq, srq);
	q2 = error_qp(cq, srq);
	cr_assert_eq(ibv_destroy_srq(srq), EBUSY, "two QPs use it");
	cr_assert_eq(ibv_destroy_qp(q1), 0);
	cr_assert_eq(ibv_destroy_srq(srq), EBUSY, "one QP uses it");
	cr_assert_eq(ibv_destroy_qp(q2), 0);
	cr_assert_eq(ibv_destroy_srq(srq), 0, "no QP uses it any more");
	cr_assert_eq(ibv_destroy_cq(cq), 0);
}

/*
 * Access flags that programs pass without checking the device first
 * (perftest and qperf ask for remote atomic access on every MR, newer
 * programs for relaxed ordering, MW binding, huge pages). Linux's uverbs
 * layer lets all of these through to the provider, and siw keeps only
 * the three iWARP rights of what it is given: registration succeeds.
 */
Test(verbs_objects, reg_mr_common_access_flags)
{
	static char buf[8192];
	const unsigned int lw = IBV_ACCESS_LOCAL_WRITE;
	const unsigned int ok[] = {
		0,
		IBV_ACCESS_REMOTE_READ,
		lw | IBV_ACCESS_REMOTE_ATOMIC,
		lw | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_ATOMIC,
		lw | IBV_ACCESS_MW_BIND,
		lw | IBV_ACCESS_ZERO_BASED,
		lw | IBV_ACCESS_HUGETLB,
		lw | IBV_ACCESS_RELAXED_ORDERING,
		lw | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING |
			IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND,
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ok[i]);

		cr_assert_not_null(mr, "access 0x%x: %s", ok[i],
				   strerror(errno));
		cr_expect_eq(mr->lkey, mr->rkey);
		cr_expect_eq(ibv_dereg_mr(mr), 0);
	}
}

/*
 * What uverbs refuses before any provider sees it: remote write or remote
 * atomic access without local write (EINVAL), on-demand paging on a
 * device that does not report it (EOPNOTSUPP), and bits no verbs version
 * defines (EINVAL).
 */
Test(verbs_objects, reg_mr_refused_access_flags)
{
	static char buf[4096];
	const struct {
		unsigned int access;
		int err;
	} bad[] = {
		{ IBV_ACCESS_REMOTE_WRITE, EINVAL },
		{ IBV_ACCESS_REMOTE_ATOMIC, EINVAL },
		{ IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ, EINVAL },
		{ IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, EOPNOTSUPP },
		{ IBV_ACCESS_LOCAL_WRITE | (1u << 12), EINVAL },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		cr_expect_null(ibv_reg_mr(pd, buf, sizeof(buf), bad[i].access),
			       "access 0x%x registered", bad[i].access);
		cr_expect_eq(errno, bad[i].err, "access 0x%x: errno %d",
			     bad[i].access, errno);
	}
}

/* The IBTA RESET -> INIT transition with the attributes every program
 * passes (pkey index, port, access): ibv_query_qp then says INIT, with
 * the access flags that were set, and a second INIT -> INIT is fine. */
Test(verbs_objects, query_qp_after_init)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
	};
	const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			 IBV_QP_ACCESS_FLAGS;
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	struct ibv_qp *qp;

	cr_assert_not_null(cq);
	qp = ibv_create_qp(pd, &ia);
	cr_assert_not_null(qp, "create_qp: %s", strerror(errno));
	/* siw reports its idle QP as INIT from creation on; so does
	 * wisp, and rdma-core's tests expect it of an RNIC. */
	cr_assert_eq(ibv_query_qp(qp, &q, IBV_QP_STATE, &qi), 0);
	cr_expect_eq(q.qp_state, IBV_QPS_INIT);
	cr_assert_eq(ibv_modify_qp(qp, &a, mask), 0);
	cr_assert_eq(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS,
				  &qi), 0);
	cr_expect_eq(q.qp_state, IBV_QPS_INIT);
	cr_expect_eq(q.qp_access_flags, a.qp_access_flags);
	cr_expect_eq(qp->state, IBV_QPS_INIT);
	cr_assert_eq(ibv_modify_qp(qp, &a, mask), 0);
	cr_assert_eq(ibv_query_qp(qp, &q, IBV_QP_STATE, &qi), 0);
	cr_expect_eq(q.qp_state, IBV_QPS_INIT);
	a.qp_state = IBV_QPS_RESET;
	cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	cr_assert_eq(ibv_query_qp(qp, &q, IBV_QP_STATE, &qi), 0);
	cr_expect_eq(q.qp_state, IBV_QPS_INIT, "RESET is idle, as siw's");
	cr_expect_eq(ibv_destroy_qp(qp), 0);
	cr_expect_eq(ibv_destroy_cq(cq), 0);
}

/* IB-style programs (rdma-core's Python tests, ibv_rc_pingpong) walk an
 * unconnected QP to RTR and RTS by hand. An iWARP QP reaches RTS only
 * with its connection: siw refuses RTS without a socket with EINVAL, and
 * so does wisp, instead of accepting WRs that never complete. */
Test(verbs_objects, rts_without_connection_refused)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	struct ibv_qp *qp;

	cr_assert_not_null(cq);
	qp = ibv_create_qp(pd, &ia);
	cr_assert_not_null(qp);
	cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTR;
	cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	cr_expect_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	cr_assert_eq(ibv_query_qp(qp, &q, IBV_QP_STATE, &qi), 0);
	cr_expect_eq(q.qp_state, IBV_QPS_RTR);
	cr_expect_eq(ibv_destroy_qp(qp), 0);
	cr_expect_eq(ibv_destroy_cq(cq), 0);
}

/* A completion vector the device does not have: EINVAL from both
 * ibv_create_cq and ibv_create_cq_ex (rdma-core's test_cqex). */
Test(verbs_objects, cq_ex_bad_vector_is_einval)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 8, .comp_vector = (uint32_t)ctx->num_comp_vectors + 1,
	};

	errno = 0;
	cr_expect_null(ibv_create_cq_ex(ctx, &ca));
	cr_expect_eq(errno, EINVAL);
	errno = 0;
	cr_expect_null(ibv_create_cq(ctx, 8, NULL, NULL,
				     ctx->num_comp_vectors + 1));
	cr_expect_eq(errno, EINVAL);
}
