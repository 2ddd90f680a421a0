// SPDX-License-Identifier: MIT
/*
 * test_errors.c - the error paths that need real sockets and the verbs
 * API: a Terminate crossing TCP and surfacing as a verbs completion,
 * IBV_EVENT_QP_FATAL and flushes through ibv_poll_cq, a verbs-level bad
 * lkey, refused opcodes and QP types, the connection killed under a
 * transfer, modify to ERROR. Every protocol fault itself (which
 * Terminate, which completion, which memory untouched) is the self-talk
 * suite's (tests/unit/test_qp_selftalk.c, over all MPA modes and
 * chunkings). Run under ASan as well: no hang, no leak.
 */
#include "dp_util.h"
#include "../unit/test_util.h"

static const struct dp_opts defaults = {
	.prefs = { .mpa_rev = 2, .crc = true, .ird = 16, .ord = 16 },
};

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	cr_assert_eq(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

/* Wait until qp reports ERROR (the peer's side learns asynchronously). */
static void wait_error(struct ibv_qp *qp)
{
	int64_t end = dp_now_ms() + DP_TIMEOUT_MS;

	while (state_of(qp) != IBV_QPS_ERR && dp_now_ms() < end)
		usleep(1000);
	cr_assert_eq(state_of(qp), IBV_QPS_ERR, "QP %u in ERROR", qp->qp_num);
}

/* The next async event of ctx is type for this QP. */
static void expect_async(struct ibv_context *ctx, enum ibv_event_type type,
			 struct ibv_qp *qp)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	cr_assert_eq(poll(&pfd, 1, DP_TIMEOUT_MS), 1, "an async event");
	cr_assert_eq(ibv_get_async_event(ctx, &ev), 0);
	cr_assert_eq(ev.event_type, type, "event %s",
		     ibv_event_type_str(ev.event_type));
	cr_assert_eq(ev.element.qp, qp);
	ibv_ack_async_event(&ev);
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf,
		      uint32_t len, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 },
			   *bad;

	cr_assert_eq(ibv_post_recv(qp, &w, &bad), 0);
}

static void post_rdma(struct ibv_qp *qp, enum ibv_wr_opcode op,
		      struct ibv_mr *lmr, uint8_t *lbuf, uint32_t len,
		      uint64_t raddr, uint32_t rkey, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)lbuf, len, lmr->lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;

	w.wr.rdma.remote_addr = raddr;
	w.wr.rdma.rkey = rkey;
	cr_assert_eq(ibv_post_send(qp, &w, &bad), 0);
}

/*
 * The common shape: a bad remote access from a, a READ behind it that is
 * still waiting when the Terminate arrives (so it carries the remote
 * error), a receive posted on each side that must be flushed.
 */
static void remote_fault(struct dp_pair *p, enum ibv_wr_opcode op,
			 uint64_t raddr, uint32_t rkey, uint32_t len,
			 uint32_t term, const char *what)
{
	uint8_t *la, *lb, *ra, *rb;
	struct ibv_mr *mla = dp_mr(p->a.pd, 1 << 16, DP_ALL_ACCESS, &la);
	struct ibv_mr *mra = dp_mr(p->a.pd, 256, IBV_ACCESS_LOCAL_WRITE, &ra);
	struct ibv_mr *mrb = dp_mr(p->b.pd, 256, IBV_ACCESS_LOCAL_WRITE, &rb);
	struct ibv_mr *mlb = dp_mr(p->b.pd, 4096, DP_ALL_ACCESS, &lb);
	struct ibv_wc wc;

	post_recv(p->a.qp, mra, ra, 256, 100);
	post_recv(p->b.qp, mrb, rb, 256, 200);
	/* One post: both WRs are queued before the engine sees either, so
	 * the Terminate always finds the READ outstanding. */
	{
		struct ibv_sge s1 = { (uintptr_t)la, len, mla->lkey };
		struct ibv_sge s2 = { (uintptr_t)la, 16, mla->lkey };
		struct ibv_send_wr w2 = { .wr_id = 2, .sg_list = &s2,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr w1 = { .wr_id = 1, .sg_list = &s1,
					  .num_sge = 1, .opcode = op,
					  .send_flags = IBV_SEND_SIGNALED,
					  .next = &w2 }, *bad;

		w1.wr.rdma.remote_addr = raddr;
		w1.wr.rdma.rkey = rkey;
		w2.wr.rdma.remote_addr = (uintptr_t)lb;
		w2.wr.rdma.rkey = mlb->rkey;
		cr_assert_eq(ibv_post_send(p->a.qp, &w1, &bad), 0);
	}

	/* The first WR to carry an error carries the peer's verdict: the
	 * bad WR itself, or (a WRITE completes once handed to TCP, as with
	 * siw) the READ behind it. Whatever follows is flushed. */
	wc = dp_wait1(p->a.scq);
	cr_assert_eq(wc.wr_id, 1);
	if (op == IBV_WR_RDMA_WRITE && wc.status == IBV_WC_SUCCESS) {
		wc = dp_wait1(p->a.scq);
		cr_assert_eq(wc.wr_id, 2);
	}
	cr_assert_eq(wc.status, IBV_WC_REM_ACCESS_ERR, "%s: got %s", what,
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(wc.vendor_err, term, "%s: vendor_err %#06x is the "
		     "Terminate code %#06x", what, wc.vendor_err, term);
	cr_log_info("%s: WR %llu got %s, Terminate code 0x%04x", what,
		    (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
		    wc.vendor_err);
	if (wc.wr_id == 1) {
		wc = dp_wait1(p->a.scq);
		cr_assert_eq(wc.wr_id, 2);
		cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
		cr_assert_eq(wc.vendor_err, 0);
	}
	wc = dp_wait1(p->a.rcq);
	cr_assert_eq(wc.wr_id, 100);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(wc.vendor_err, 0);
	wc = dp_wait1(p->b.rcq);
	cr_assert_eq(wc.wr_id, 200);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(wc.vendor_err, 0);
	wait_error(p->a.qp);
	wait_error(p->b.qp);
	expect_async(p->b.ctx, IBV_EVENT_QP_FATAL, p->b.qp);
	expect_async(p->a.ctx, IBV_EVENT_QP_FATAL, p->a.qp);
	/* Posting now completes at once, flushed. */
	post_rdma(p->a.qp, IBV_WR_RDMA_WRITE, mla, la, 8, (uintptr_t)lb,
		  mlb->rkey, 3);
	wc = dp_wait1(p->a.scq);
	cr_assert_eq(wc.wr_id, 3);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(wc.vendor_err, 0);
	ibv_dereg_mr(mla);
	ibv_dereg_mr(mra);
	ibv_dereg_mr(mrb);
	ibv_dereg_mr(mlb);
	free(la);
	free(ra);
	free(rb);
	free(lb);
}

/*
 * One remote fault end to end: a WRITE past the end of an MR over TCP.
 * The Terminate (RFC 5041 section 7, DDP tagged "Base or bounds violation",
 * 0x1101) reaches the requester's verbs completion as vendor_err, both
 * QPs raise IBV_EVENT_QP_FATAL and flush, and no octet moved. Every other
 * fault, and this one in every MPA mode, is in test_qp_selftalk.
 */
Test(errors, remote_fault_through_verbs, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *buf;
	struct ibv_mr *mr;

	dp_setup(&p, &defaults);
	buf = calloc(1, 8192);
	mr = ibv_reg_mr(p.b.pd, buf + 4096, 1024, DP_ALL_ACCESS);
	cr_assert_not_null(mr);
	remote_fault(&p, IBV_WR_RDMA_WRITE, (uintptr_t)buf + 4096 + 1000,
		     mr->rkey, 100, 0x1101, "WRITE past the end of the MR");
	for (int i = 0; i < 8192; i++)
		cr_assert_eq(buf[i], 0, "octet %d untouched", i);
	ibv_dereg_mr(mr);
	free(buf);
	dp_teardown(&p, &defaults);
}

/*
 * SEND with Invalidate naming an MR made by ibv_reg_mr: refused. Only
 * type 2 memory windows and fast-registered MRs may be invalidated by a
 * peer (ibv_alloc_mw(3); rdmap_stag.c says why), and wisp has neither.
 * The receiver answers with the Terminate "STag cannot be invalidated"
 * (RDMAP remote protection 0x0109), its receive completes with
 * IBV_WC_REM_INV_REQ_ERR, and both QPs fail. A READ of the same MR
 * behind the SEND is still waiting when the Terminate arrives, so it
 * carries the verdict unless the SEND itself does.
 */
Test(errors, send_with_invalidate, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *tgt, *rbuf, *sbuf, *la;
	struct ibv_mr *mt, *mrb, *msb, *mla;
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	mt = dp_mr(p.b.pd, 4096, DP_ALL_ACCESS, &tgt);
	mrb = dp_mr(p.b.pd, 64, IBV_ACCESS_LOCAL_WRITE, &rbuf);
	msb = dp_mr(p.a.pd, 64, 0, &sbuf);
	mla = dp_mr(p.a.pd, 64, IBV_ACCESS_LOCAL_WRITE, &la);
	memset(tgt, 0, 4096);
	post_recv(p.b.qp, mrb, rbuf, 64, 5);
	{
		struct ibv_sge s1 = { (uintptr_t)sbuf, 16, msb->lkey };
		struct ibv_sge s2 = { (uintptr_t)la, 16, mla->lkey };
		struct ibv_send_wr w2 = { .wr_id = 7, .sg_list = &s2,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr w1 = { .wr_id = 6, .sg_list = &s1,
					  .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_INV,
					  .send_flags = IBV_SEND_SIGNALED,
					  .invalidate_rkey = mt->rkey,
					  .next = &w2 }, *bad;

		w2.wr.rdma.remote_addr = (uintptr_t)tgt;
		w2.wr.rdma.rkey = mt->rkey;
		cr_assert_eq(ibv_post_send(p.a.qp, &w1, &bad), 0);
	}
	wc = dp_wait1(p.b.rcq);
	cr_assert_eq(wc.wr_id, 5);
	cr_assert_eq(wc.status, IBV_WC_REM_INV_REQ_ERR, "receive got %s",
		     ibv_wc_status_str(wc.status));
	cr_assert(!(wc.wc_flags & IBV_WC_WITH_INV));
	wc = dp_wait1(p.a.scq);
	cr_assert_eq(wc.wr_id, 6);
	if (wc.status == IBV_WC_SUCCESS) {
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.wr_id, 7);
	}
	cr_assert_eq(wc.status, IBV_WC_REM_ACCESS_ERR, "WR %llu got %s",
		     (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(wc.vendor_err, 0x0109, "Terminate 0x%04x",
		     wc.vendor_err);
	if (wc.wr_id == 6) {
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.wr_id, 7);
		cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	}
	cr_log_info("SEND_WITH_INV of an ibv_reg_mr MR: receiver %s, "
		    "Terminate 0x%04x", ibv_wc_status_str(IBV_WC_REM_INV_REQ_ERR),
		    wc.vendor_err);
	wait_error(p.a.qp);
	wait_error(p.b.qp);
	expect_async(p.b.ctx, IBV_EVENT_QP_FATAL, p.b.qp);
	expect_async(p.a.ctx, IBV_EVENT_QP_FATAL, p.a.qp);
	for (int i = 0; i < 4096; i++)
		cr_assert_eq(tgt[i], 0);
	ibv_dereg_mr(mt);
	ibv_dereg_mr(mrb);
	ibv_dereg_mr(msb);
	ibv_dereg_mr(mla);
	free(tgt);
	free(rbuf);
	free(sbuf);
	free(la);
	dp_teardown(&p, &defaults);
}

/* A SEND with no receive posted: DDP "no buffer" Terminate. */
Test(errors, send_without_recv, .timeout = 60)
{
	struct dp_pair p;
	uint8_t msg[8] = { 0 };
	struct ibv_sge s = { (uintptr_t)msg, 8, 0 };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED |
					       IBV_SEND_INLINE }, *bad;

	dp_setup(&p, &defaults);
	cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0);
	/* Completed once handed to TCP, unless the peer's Terminate came
	 * back first: then it carries the remote operation error. */
	{
		struct ibv_wc wc = dp_wait1(p.a.scq);

		cr_assert(wc.status == IBV_WC_SUCCESS ||
			  wc.status == IBV_WC_REM_OP_ERR, "got %s",
			  ibv_wc_status_str(wc.status));
	}
	wait_error(p.b.qp);
	wait_error(p.a.qp);
	expect_async(p.b.ctx, IBV_EVENT_QP_FATAL, p.b.qp);
	dp_teardown(&p, &defaults);
}

/* Local errors: a bad lkey completes with LOC_PROT_ERR. */
Test(errors, local_protection, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	mr = dp_mr(p.a.pd, 4096, 0, &buf);
	{
		struct ibv_sge s = { (uintptr_t)buf, 4096, mr->lkey ^ 0x2 };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s,
					 .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;

		cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0);
	}
	wc = dp_wait1(p.a.scq);
	cr_assert_eq(wc.wr_id, 1);
	cr_assert_eq(wc.status, IBV_WC_LOC_PROT_ERR, "got %s",
		     ibv_wc_status_str(wc.status));
	/* found before anything was sent: no Terminate explains it */
	cr_assert_eq(wc.vendor_err, 0);
	wait_error(p.a.qp);
	ibv_dereg_mr(mr);
	free(buf);
	dp_teardown(&p, &defaults);
}

/* What the verbs refuse at post time. */
Test(errors, post_checks, .timeout = 60)
{
	struct dp_pair p;
	uint8_t msg[8];
	struct ibv_sge s = { (uintptr_t)msg, 8, 0 };
	struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_INLINE }, *bad;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp *qp;

	dp_setup(&p, &defaults);
	cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), EOPNOTSUPP);
	w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), EOPNOTSUPP);
	/* A QP that is not in RTS takes no sends. */
	ia.send_cq = p.a.scq;
	ia.recv_cq = p.a.rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	qp = ibv_create_qp(p.a.pd, &ia);
	cr_assert_not_null(qp);
	w.opcode = IBV_WR_SEND;
	cr_assert_eq(ibv_post_send(qp, &w, &bad), EINVAL);
	cr_assert_eq(ibv_destroy_qp(qp), 0);
	ia.qp_type = IBV_QPT_UD;
	cr_assert_null(ibv_create_qp(p.a.pd, &ia));
	cr_assert_eq(errno, EOPNOTSUPP);
	dp_teardown(&p, &defaults);
}

/* The connection dies under a large transfer: everything completes,
 * nothing hangs, both QPs end in ERROR. */
static void kill_mid(enum ibv_wr_opcode op)
{
	struct dp_pair p;
	const size_t len = 64u << 20;
	uint8_t *l, *r, *ra, *rb;
	struct ibv_mr *ml, *mr, *mra, *mrb;
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	ml = dp_mr(p.a.pd, len, DP_ALL_ACCESS, &l);
	mr = dp_mr(p.b.pd, len, DP_ALL_ACCESS, &r);
	mra = dp_mr(p.a.pd, 64, IBV_ACCESS_LOCAL_WRITE, &ra);
	mrb = dp_mr(p.b.pd, 64, IBV_ACCESS_LOCAL_WRITE, &rb);
	post_recv(p.a.qp, mra, ra, 64, 10);
	post_recv(p.b.qp, mrb, rb, 64, 20);
	for (int i = 0; i < 4; i++)
		post_rdma(p.a.qp, op, ml, l, (uint32_t)len, (uintptr_t)r,
			  mr->rkey, (uint64_t)i);
	usleep(2000);
	shutdown(p.a.fd_dup, SHUT_RDWR);
	/* How many finished before the cut depends on timing; the shape
	 * does not: in order, successes first, then flushes, and no
	 * Terminate code, since none was exchanged. */
	{
		bool flushing = false;

		for (int i = 0; i < 4; i++) {
			wc = dp_wait1(p.a.scq);
			cr_assert_eq(wc.wr_id, (uint64_t)i, "in order");
			if (wc.status == IBV_WC_WR_FLUSH_ERR)
				flushing = true;
			cr_assert_eq(wc.status, flushing ? IBV_WC_WR_FLUSH_ERR
							 : IBV_WC_SUCCESS,
				     "WR %d: %s", i,
				     ibv_wc_status_str(wc.status));
			cr_assert_eq(wc.vendor_err, 0);
		}
	}
	wc = dp_wait1(p.a.rcq);
	cr_assert_eq(wc.wr_id, 10);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(wc.vendor_err, 0);
	wc = dp_wait1(p.b.rcq);
	cr_assert_eq(wc.wr_id, 20);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(wc.vendor_err, 0);
	wait_error(p.a.qp);
	wait_error(p.b.qp);
	cr_log_info("connection killed under 4 x 64 MiB %s: all flushed",
		    op == IBV_WR_RDMA_READ ? "READ" : "WRITE");
	ibv_dereg_mr(ml);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(mra);
	ibv_dereg_mr(mrb);
	free(l);
	free(r);
	free(ra);
	free(rb);
	dp_teardown(&p, &defaults);
}

Test(errors, kill_mid_write, .timeout = 60)
{
	kill_mid(IBV_WR_RDMA_WRITE);
}

Test(errors, kill_mid_read, .timeout = 60)
{
	kill_mid(IBV_WR_RDMA_READ);
}

/* Moving a QP to ERROR flushes it and the peer sees the stream end. */
Test(errors, modify_to_error, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *ra, *rb;
	struct ibv_mr *mra, *mrb;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	dp_setup(&p, &defaults);
	mra = dp_mr(p.a.pd, 64, IBV_ACCESS_LOCAL_WRITE, &ra);
	mrb = dp_mr(p.b.pd, 64, IBV_ACCESS_LOCAL_WRITE, &rb);
	post_recv(p.a.qp, mra, ra, 64, 1);
	post_recv(p.b.qp, mrb, rb, 64, 2);
	cr_assert_eq(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE), 0);
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = dp_wait1(i ? p.b.rcq : p.a.rcq);

		cr_assert_eq(wc.wr_id, (uint64_t)i + 1);
		cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
		cr_assert_eq(wc.vendor_err, 0, "no Terminate explains it");
	}
	wait_error(p.b.qp);
	ibv_dereg_mr(mra);
	ibv_dereg_mr(mrb);
	free(ra);
	free(rb);
	dp_teardown(&p, &defaults);
}

/* The peer's application is polling its CQ (so it, not the engine, reads
 * the socket) when the stream ends: the end must still flush its QP. */
Test(errors, close_while_peer_polls, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *rb;
	struct ibv_mr *mrb;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	mrb = dp_mr(p.b.pd, 64, IBV_ACCESS_LOCAL_WRITE, &rb);
	post_recv(p.b.qp, mrb, rb, 64, 2);
	/* An empty poll hands b's socket to this thread for a while. */
	cr_assert_eq(ibv_poll_cq(p.b.rcq, 1, &wc), 0);
	cr_assert_eq(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE), 0);
	wc = dp_wait1(p.b.rcq);
	cr_assert_eq(wc.wr_id, 2);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(wc.vendor_err, 0);
	wait_error(p.b.qp);
	cr_log_info("stream ended under a polling peer: its receive flushed");
	ibv_dereg_mr(mrb);
	free(rb);
	dp_teardown(&p, &defaults);
}

/*
 * QP access flags are enforced: b's QP (connected, RTS) drops
 * IBV_ACCESS_REMOTE_WRITE with ibv_modify_qp(IBV_QP_ACCESS_FLAGS), as
 * verbs allow in RTS. A WRITE into an MR that itself grants remote write
 * is then refused with the Terminate "Access rights violation" (RDMAP
 * remote protection, 0x0102), nothing is placed, both QPs fail.
 */
Test(errors, qp_without_remote_write, .timeout = 60)
{
	struct ibv_qp_attr a = { .qp_access_flags = IBV_ACCESS_REMOTE_READ };
	struct ibv_qp_init_attr ia;
	struct dp_pair p;
	uint8_t *buf;
	struct ibv_mr *mr;

	dp_setup(&p, &defaults);
	cr_assert_eq(ibv_modify_qp(p.b.qp, &a, IBV_QP_ACCESS_FLAGS), 0);
	memset(&a, 0, sizeof(a));
	cr_assert_eq(ibv_query_qp(p.b.qp, &a, IBV_QP_ACCESS_FLAGS, &ia), 0);
	cr_assert_eq(a.qp_access_flags, IBV_ACCESS_REMOTE_READ);
	/* Not in a transition that takes it (IBTA: to ERR takes nothing). */
	a.qp_state = IBV_QPS_ERR;
	cr_assert_eq(ibv_modify_qp(p.b.qp, &a,
				   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), EINVAL);
	buf = calloc(1, 4096);
	mr = ibv_reg_mr(p.b.pd, buf, 4096, DP_ALL_ACCESS);
	cr_assert_not_null(mr);
	remote_fault(&p, IBV_WR_RDMA_WRITE, (uintptr_t)buf + 100, mr->rkey,
		     100, 0x0102, "WRITE to a QP without REMOTE_WRITE");
	for (int i = 0; i < 4096; i++)
		cr_assert_eq(buf[i], 0, "octet %d untouched", i);
	ibv_dereg_mr(mr);
	free(buf);
	dp_teardown(&p, &defaults);
}

/*
 * A Terminate with code 0x0000 (RDMAP local catastrophic error, a real
 * code) raises IBV_EVENT_QP_FATAL like any other. b's posted receive
 * names an MR deregistered since: the Send that needs it fails b with
 * that Terminate (its receive completes LOC_PROT_ERR); a READ queued
 * behind a's Send carries the verdict (FATAL_ERR, vendor_err 0).
 */
Test(errors, terminate_code_zero_is_fatal, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *la, *rb;
	struct ibv_mr *mla, *mrb;
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	mla = dp_mr(p.a.pd, 4096, DP_ALL_ACCESS, &la);
	mrb = dp_mr(p.b.pd, 256, IBV_ACCESS_LOCAL_WRITE, &rb);
	post_recv(p.b.qp, mrb, rb, 256, 200);
	cr_assert_eq(ibv_dereg_mr(mrb), 0);
	{
		struct ibv_sge s1 = { (uintptr_t)la, 64, mla->lkey };
		struct ibv_sge s2 = { (uintptr_t)la + 1024, 16, mla->lkey };
		struct ibv_send_wr w2 = { .wr_id = 2, .sg_list = &s2,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr w1 = { .wr_id = 1, .sg_list = &s1,
					  .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED,
					  .next = &w2 }, *bad;

		w2.wr.rdma.remote_addr = (uintptr_t)la + 2048;
		w2.wr.rdma.rkey = mla->rkey;     /* any: never answered */
		cr_assert_eq(ibv_post_send(p.a.qp, &w1, &bad), 0);
	}
	wc = dp_wait1(p.b.rcq);
	cr_assert_eq(wc.wr_id, 200);
	cr_assert_eq(wc.status, IBV_WC_LOC_PROT_ERR, "got %s",
		     ibv_wc_status_str(wc.status));
	wc = dp_wait1(p.a.scq);
	if (wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS)
		wc = dp_wait1(p.a.scq);
	cr_assert_eq(wc.status, IBV_WC_FATAL_ERR, "got %s",
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(wc.vendor_err, 0);
	wait_error(p.a.qp);
	wait_error(p.b.qp);
	expect_async(p.b.ctx, IBV_EVENT_QP_FATAL, p.b.qp);
	expect_async(p.a.ctx, IBV_EVENT_QP_FATAL, p.a.qp);
	ibv_dereg_mr(mla);
	free(la);
	free(rb);
	dp_teardown(&p, &defaults);
}
