/* SPDX-License-Identifier: MIT */
/*
 * The extended post API (struct ibv_qp_ex, ibv_wr_*) and the extended CQ
 * (ibv_start_poll / ibv_next_poll / ibv_wc_read_*) over two QPs connected
 * on TCP loopback: every operation wisp offers through it (Send, Send
 * with Invalidate, RDMA Write, RDMA Read), SGE lists and inline data,
 * several WRs in one ibv_wr_start / ibv_wr_complete batch, ibv_wr_abort,
 * and the operations an iWARP RC QP cannot offer refused at creation.
 */
#include "dp_util.h"

#define QPX_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | \
		 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ)

static struct dp_pair p;
static const struct dp_opts opts = { .send_ops = QPX_OPS };

static void setup(void)
{
	dp_setup(&p, &opts);
}

static void teardown(void)
{
	dp_teardown(&p, &opts);
}

TestSuite(qpx, .init = setup, .fini = teardown, .timeout = 60);

static void post_recv(struct dp_side *s, struct ibv_mr *mr, void *buf,
		      uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	cr_assert_eq(ibv_post_recv(s->qp, &wr, &bad), 0);
}

static struct ibv_qp_ex *qpx_of(struct dp_side *s)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(s->qp);

	cr_assert_not_null(x, "ibv_qp_to_qp_ex: %s", strerror(errno));
	cr_assert_eq(&x->qp_base, s->qp);
	return x;
}

Test(qpx, send_sge_and_sge_list)
{
	struct ibv_qp_ex *x = qpx_of(&p.a);
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr = dp_mr(p.a.pd, 256, DP_ALL_ACCESS, &sbuf);
	struct ibv_mr *rmr = dp_mr(p.b.pd, 512, DP_ALL_ACCESS, &rbuf);
	struct ibv_sge list[2] = {
		{ .addr = (uintptr_t)sbuf + 100, .length = 50,
		  .lkey = smr->lkey },
		{ .addr = (uintptr_t)sbuf, .length = 20, .lkey = smr->lkey },
	};
	struct ibv_wc wc[2];

	for (int i = 0; i < 256; i++)
		sbuf[i] = (uint8_t)i;
	post_recv(&p.b, rmr, rbuf, 256, 1);
	post_recv(&p.b, rmr, rbuf + 256, 256, 2);

	ibv_wr_start(x);
	x->wr_id = 11;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, smr->lkey, (uintptr_t)sbuf, 100);
	x->wr_id = 12;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, list);
	cr_assert_eq(ibv_wr_complete(x), 0);

	cr_assert_eq(dp_poll(p.a.scq, wc, 2), 2);
	cr_expect_eq(wc[0].wr_id, 11);
	cr_expect_eq(wc[1].wr_id, 12);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(wc[i].status, IBV_WC_SUCCESS);
		cr_expect_eq(wc[i].opcode, IBV_WC_SEND);
	}
	cr_assert_eq(dp_poll(p.b.rcq, wc, 2), 2);
	cr_expect_eq(wc[0].byte_len, 100);
	cr_expect_eq(wc[1].byte_len, 70);
	cr_expect_eq(memcmp(rbuf, sbuf, 100), 0);
	cr_expect_eq(memcmp(rbuf + 256, sbuf + 100, 50), 0);
	cr_expect_eq(memcmp(rbuf + 306, sbuf, 20), 0);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	free(sbuf);
	free(rbuf);
}

Test(qpx, write_then_read_back)
{
	struct ibv_qp_ex *x = qpx_of(&p.a);
	uint8_t *lbuf, *rbuf;
	struct ibv_mr *lmr = dp_mr(p.a.pd, 4096, DP_ALL_ACCESS, &lbuf);
	struct ibv_mr *rmr = dp_mr(p.b.pd, 4096, DP_ALL_ACCESS, &rbuf);
	struct ibv_wc wc;

	memset(lbuf, 0xa5, 2048);
	memset(lbuf + 2048, 0, 2048);
	memset(rbuf, 0, 4096);
	ibv_wr_start(x);
	x->wr_id = 21;
	x->wr_flags = 0;          /* unsignaled: no completion */
	ibv_wr_rdma_write(x, rmr->rkey, (uintptr_t)rbuf + 1000);
	ibv_wr_set_sge(x, lmr->lkey, (uintptr_t)lbuf, 2048);
	x->wr_id = 22;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, rmr->rkey, (uintptr_t)rbuf + 1000);
	ibv_wr_set_sge(x, lmr->lkey, (uintptr_t)lbuf + 2048, 2048);
	cr_assert_eq(ibv_wr_complete(x), 0);

	wc = dp_wait1(p.a.scq);
	cr_expect_eq(wc.wr_id, 22, "the unsignaled Write has no completion");
	cr_expect_eq(wc.status, IBV_WC_SUCCESS);
	cr_expect_eq(wc.opcode, IBV_WC_RDMA_READ);
	cr_expect_eq(memcmp(rbuf + 1000, lbuf, 2048), 0);
	cr_expect_eq(memcmp(lbuf + 2048, lbuf, 2048), 0,
		     "the Read saw the Write before it");
	ibv_dereg_mr(lmr);
	ibv_dereg_mr(rmr);
	free(lbuf);
	free(rbuf);
}

Test(qpx, inline_data_and_list)
{
	struct ibv_qp_ex *x = qpx_of(&p.a);
	char msg[] = "inline over wisp";
	struct ibv_data_buf bufs[2] = {
		{ .addr = msg, .length = 6 },
		{ .addr = msg + 7, .length = 4 },
	};
	uint8_t *rbuf;
	struct ibv_mr *rmr = dp_mr(p.b.pd, 256, DP_ALL_ACCESS, &rbuf);
	struct ibv_wc wc[2];

	post_recv(&p.b, rmr, rbuf, 128, 1);
	post_recv(&p.b, rmr, rbuf + 128, 128, 2);
	ibv_wr_start(x);
	x->wr_id = 31;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, msg, sizeof(msg));
	x->wr_id = 32;
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 2, bufs);
	/* Inline data is copied when set: the buffer is free at once. */
	memset(msg, 'x', sizeof(msg));
	cr_assert_eq(ibv_wr_complete(x), 0);

	cr_assert_eq(dp_poll(p.a.scq, wc, 2), 2);
	cr_expect_eq(wc[0].status, IBV_WC_SUCCESS);
	cr_expect_eq(wc[1].status, IBV_WC_SUCCESS);
	cr_assert_eq(dp_poll(p.b.rcq, wc, 2), 2);
	cr_expect_eq(wc[0].byte_len, sizeof("inline over wisp"));
	cr_expect_str_eq((char *)rbuf, "inline over wisp");
	cr_expect_eq(wc[1].byte_len, 10);
	cr_expect_eq(memcmp(rbuf + 128, "inlineover", 10), 0);
	ibv_dereg_mr(rmr);
	free(rbuf);
}

Test(qpx, send_with_invalidate)
{
	struct ibv_qp_ex *x = qpx_of(&p.a);
	uint8_t *sbuf, *rbuf, *ibuf;
	struct ibv_mr *smr = dp_mr(p.a.pd, 64, DP_ALL_ACCESS, &sbuf);
	struct ibv_mr *rmr = dp_mr(p.b.pd, 64, DP_ALL_ACCESS, &rbuf);
	struct ibv_mr *imr = dp_mr(p.b.pd, 64, DP_ALL_ACCESS, &ibuf);
	struct ibv_wc wc;

	memset(sbuf, 7, 64);
	post_recv(&p.b, rmr, rbuf, 64, 5);
	ibv_wr_start(x);
	x->wr_id = 41;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(x, imr->rkey);
	ibv_wr_set_sge(x, smr->lkey, (uintptr_t)sbuf, 64);
	cr_assert_eq(ibv_wr_complete(x), 0);
	wc = dp_wait1(p.a.scq);
	cr_expect_eq(wc.wr_id, 41);
	/* It went out as a Send with Invalidate of imr's STag: an MR of
	 * ibv_reg_mr may not be invalidated by the peer (rdmap_qp_rx.c's
	 * invalidate()), so b refuses it with the Terminate for exactly
	 * that, 0x0109, and its receive completes with REM_INV_REQ_ERR. */
	if (wc.status != IBV_WC_SUCCESS) {
		cr_expect_eq(wc.status, IBV_WC_REM_ACCESS_ERR, "sender: %s",
			     ibv_wc_status_str(wc.status));
		cr_expect_eq(wc.vendor_err, 0x0109, "Terminate 0x%04x",
			     wc.vendor_err);
	}
	wc = dp_wait1(p.b.rcq);
	cr_expect_eq(wc.wr_id, 5);
	cr_expect_eq(wc.status, IBV_WC_REM_INV_REQ_ERR, "receiver: %s",
		     ibv_wc_status_str(wc.status));
	cr_expect(!(wc.wc_flags & IBV_WC_WITH_INV));
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_dereg_mr(imr);
	free(sbuf);
	free(rbuf);
	free(ibuf);
}

Test(qpx, abort_posts_nothing)
{
	struct ibv_qp_ex *x = qpx_of(&p.a);
	uint8_t *sbuf;
	struct ibv_mr *smr = dp_mr(p.a.pd, 64, DP_ALL_ACCESS, &sbuf);
	struct ibv_wc wc;

	ibv_wr_start(x);
	x->wr_id = 51;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, smr->lkey, (uintptr_t)sbuf, 64);
	ibv_wr_abort(x);
	/* Nothing went out: no completion, and the QP still works. */
	cr_expect_eq(ibv_poll_cq(p.a.scq, 1, &wc), 0);
	ibv_wr_start(x);
	x->wr_id = 52;
	ibv_wr_rdma_write(x, smr->rkey, (uintptr_t)sbuf);
	ibv_wr_set_sge(x, smr->lkey, (uintptr_t)sbuf, 0);
	cr_assert_eq(ibv_wr_complete(x), 0);
	wc = dp_wait1(p.a.scq);
	cr_expect_eq(wc.wr_id, 52);
	cr_expect_eq(wc.status, IBV_WC_SUCCESS);
	ibv_dereg_mr(smr);
	free(sbuf);
}

Test(qpx, bad_batch_fails_whole)
{
	struct ibv_qp_ex *x = qpx_of(&p.a);
	struct ibv_sge list[6 + 1];
	uint8_t *sbuf;
	struct ibv_mr *smr = dp_mr(p.a.pd, 64, DP_ALL_ACCESS, &sbuf);
	char big[1024] = { 0 };
	struct ibv_wc wc;

	for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
		list[i] = (struct ibv_sge){ .addr = (uintptr_t)sbuf,
					    .length = 1, .lkey = smr->lkey };
	ibv_wr_start(x);
	x->wr_id = 61;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, smr->rkey, (uintptr_t)sbuf);
	ibv_wr_set_sge(x, smr->lkey, (uintptr_t)sbuf, 1);
	x->wr_id = 62;
	ibv_wr_rdma_write(x, smr->rkey, (uintptr_t)sbuf);
	ibv_wr_set_sge_list(x, sizeof(list) / sizeof(list[0]), list);
	cr_expect_eq(ibv_wr_complete(x), EINVAL, "more SGEs than max_send_sge");
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, big, sizeof(big));
	cr_expect_eq(ibv_wr_complete(x), EINVAL, "more than max_inline_data");
	cr_expect_eq(ibv_poll_cq(p.a.scq, 1, &wc), 0, "nothing was posted");
	ibv_dereg_mr(smr);
	free(sbuf);
}

/* The extended CQ: created with ibv_create_cq_ex, polled with the
 * start / next / end protocol and read with ibv_wc_read_*. */
Test(qpx, qp_ex_without_send_ops_is_null)
{
	struct ibv_cq *cq = ibv_create_cq(p.a.ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(p.a.pd, &ia);

	cr_assert_not_null(qp);
	cr_expect_null(ibv_qp_to_qp_ex(qp));
	cr_expect_eq(ibv_destroy_qp(qp), 0);
	cr_expect_eq(ibv_destroy_cq(cq), 0);
}

Test(qpx, unsupported_send_ops_refused)
{
	const uint64_t no[] = {
		IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
		IBV_QP_EX_WITH_SEND_WITH_IMM,
		IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
		IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
		IBV_QP_EX_WITH_TSO,
	};

	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		struct ibv_qp_init_attr_ex ix = {
			.send_cq = p.a.scq, .recv_cq = p.a.rcq,
			.qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD |
				     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = p.a.pd,
			.send_ops_flags = IBV_QP_EX_WITH_SEND | no[i],
		};

		errno = 0;
		cr_expect_null(ibv_create_qp_ex(p.a.ctx, &ix));
		cr_expect_eq(errno, EOPNOTSUPP, "send op 0x%llx",
			     (unsigned long long)no[i]);
	}
}

Test(qpx, extended_cq_polling)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM,
	};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(p.b.ctx, &ca);
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	struct ibv_recv_wr wr[3] = {
		{ .wr_id = 1, .next = &wr[1] }, { .wr_id = 2, .next = &wr[2] },
		{ .wr_id = 3 },
	}, *bad;
	struct ibv_qp *qp;
	uint64_t seen = 0;
	int n = 0, ret;

	cr_assert_not_null(cqx, "create_cq_ex: %s", strerror(errno));
	cr_expect_eq(ibv_start_poll(cqx, &pa), ENOENT, "empty");
	ia.send_cq = ibv_cq_ex_to_cq(cqx);
	ia.recv_cq = ia.send_cq;
	qp = ibv_create_qp(p.b.pd, &ia);
	cr_assert_not_null(qp);
	cr_assert_eq(ibv_modify_qp(qp, &qa, IBV_QP_STATE), 0);
	cr_assert_eq(ibv_post_recv(qp, wr, &bad), 0);
	for (ret = ibv_start_poll(cqx, &pa); ret == 0;
	     ret = ibv_next_poll(cqx)) {
		cr_expect_eq(cqx->status, IBV_WC_WR_FLUSH_ERR);
		cr_expect_eq(ibv_wc_read_qp_num(cqx), qp->qp_num);
		seen = seen * 10 + cqx->wr_id;
		n++;
	}
	cr_expect_eq(ret, ENOENT);
	if (n)
		ibv_end_poll(cqx);
	cr_expect_eq(n, 3);
	cr_expect_eq(seen, 123);
	cr_expect_eq(ibv_destroy_qp(qp), 0);
	cr_expect_eq(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

/* rping -q walks its QP through INIT, RTR and RTS after the connection
 * moved it to RTS: the moves change nothing, and the QP still posts. The
 * WRITE goes to an MR of the peer's: one of a's own context is unknown
 * to b, whose Terminate (DDP 0x1100) could then fail the WR before its
 * completion was reported. */
Test(qpx, init_on_connected_qp_keeps_rts)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	uint8_t *buf, *rbuf;
	struct ibv_mr *mr = dp_mr(p.a.pd, 64, DP_ALL_ACCESS, &buf);
	struct ibv_mr *rmr = dp_mr(p.b.pd, 64, DP_ALL_ACCESS, &rbuf);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64,
			       .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 71, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)rbuf,
			     .rkey = rmr->rkey },
	}, *bad;
	struct ibv_wc wc;

	cr_assert_eq(ibv_modify_qp(p.a.qp, &a,
				   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), 0);
	cr_expect_eq(p.a.qp->state, IBV_QPS_RTS);
	cr_assert_eq(ibv_query_qp(p.a.qp, &q, IBV_QP_STATE, &qi), 0);
	cr_expect_eq(q.qp_state, IBV_QPS_RTS);
	cr_assert_eq(ibv_post_send(p.a.qp, &wr, &bad), 0);
	wc = dp_wait1(p.a.scq);
	cr_expect_eq(wc.wr_id, 71);
	cr_expect_eq(wc.status, IBV_WC_SUCCESS);
	ibv_dereg_mr(rmr);
	free(rbuf);
	ibv_dereg_mr(mr);
	free(buf);
}
