// SPDX-License-Identifier: MIT
/*
 * test_zc.c - zero-copy sends (WISP_SEND_ZC) between two wisp QPs over
 * loopback: what a WR's completion and ibv_dereg_mr promise stays true
 * when the kernel sends from the MR's pages instead of a copy. Run once
 * per engine (CMakeLists.txt). The raw-peer cases, where the peer holds
 * the octets back, are in test_teardown.c (zc_*).
 */
#include "dp_util.h"

#define ZC_MARK 0xee

/* One engine for both QPs (it receives while it sends), or one each. */
static const struct dp_opts zc_shared = { .share_ctx = true };
static const struct dp_opts zc_apart = { 0 };

/* Zero-copy for every send of 4 KiB or more, before the engine starts. */
static void zc_setup(struct dp_pair *p, const struct dp_opts *o)
{
	cr_assert_eq(setenv("WISP_SEND_ZC", "4096", 1), 0);
	dp_setup(p, o);
}

static uint64_t zc_sends(struct ibv_context *ctx)
{
	uint64_t sends = 0, copied = 0;

	cr_assert_eq(wisp_context_zc_stats(ctx, &sends, &copied), 0);
	return sends;
}

static uint8_t pat(size_t i)
{
	return (uint8_t)((i * 13 + (i >> 11)) & 0x7f);   /* never ZC_MARK */
}

/*
 * Several large WRITEs; the application overwrites each source buffer
 * the moment its WRITE completes (both QPs on one engine, which also
 * receives: the target's socket is often behind). A SEND after them
 * (ordered behind the WRITEs) says when the target has everything: it
 * must hold what the sources held before the overwrite.
 */
/* An 8-octet signaled SEND from buf (in mr) on a's QP, received by b:
 * both completions must succeed (b has a receive posted). */
static void send8_and_wait(struct dp_pair *p, void *buf, struct ibv_mr *mr)
{
	struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
	struct ibv_send_wr sw = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	cr_assert_eq(ibv_post_send(p->a.qp, &sw, &bad), 0);
	cr_assert_eq(dp_wait1(p->a.scq).status, IBV_WC_SUCCESS);
	cr_assert_eq(dp_wait1(p->b.rcq).status, IBV_WC_SUCCESS);
}

Test(zc, write_reuse_after_completion, .timeout = 120)
{
	const size_t part = 2u << 20, nparts = 4, len = part * nparts;
	struct ibv_send_wr wr[4], *bad;
	struct ibv_recv_wr rw = { 0 }, *rbad;
	struct ibv_sge sge[4], rsge;
	struct ibv_mr *ms, *md, *mm;
	uint8_t *src, *dst, *msg;
	struct dp_pair p;
	struct ibv_wc wc;
	size_t bad_at = SIZE_MAX;

	zc_setup(&p, &zc_shared);
	ms = dp_mr(p.a.pd, len, 0, &src);
	md = dp_mr(p.b.pd, len, DP_ALL_ACCESS, &dst);
	mm = dp_mr(p.b.pd, 64, IBV_ACCESS_LOCAL_WRITE, &msg);
	for (size_t i = 0; i < len; i++)
		src[i] = pat(i);
	memset(dst, 0, len);
	rsge = (struct ibv_sge){ (uintptr_t)msg, 64, mm->lkey };
	rw.sg_list = &rsge;
	rw.num_sge = 1;
	cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &rbad), 0);
	for (size_t k = 0; k < nparts; k++) {
		sge[k] = (struct ibv_sge){ (uintptr_t)(src + k * part),
					   (uint32_t)part, ms->lkey };
		wr[k] = (struct ibv_send_wr){
			.wr_id = k, .sg_list = &sge[k], .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.next = k + 1 < nparts ? &wr[k + 1] : NULL,
		};
		wr[k].wr.rdma.remote_addr = (uintptr_t)(dst + k * part);
		wr[k].wr.rdma.rkey = md->rkey;
	}
	cr_assert_eq(ibv_post_send(p.a.qp, &wr[0], &bad), 0);
	for (size_t k = 0; k < nparts; k++) {
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "%s",
			     ibv_wc_status_str(wc.status));
		cr_assert_eq(wc.wr_id, k, "in order");
		memset(src + k * part, ZC_MARK, part);
	}
	send8_and_wait(&p, src, ms);
	for (size_t i = 0; i < len && bad_at == SIZE_MAX; i++)
		if (dst[i] != pat(i))
			bad_at = i;
	cr_assert_eq(bad_at, SIZE_MAX, "the target differs at %zu (0x%02x): "
		     "a send read the source after its completion", bad_at,
		     bad_at < len ? dst[bad_at] : 0);
	cr_assert_gt(zc_sends(p.a.ctx), 0, "the WRITEs went zero-copy");
	cr_assert_eq(ibv_dereg_mr(ms), 0);
	cr_assert_eq(ibv_dereg_mr(md), 0);
	cr_assert_eq(ibv_dereg_mr(mm), 0);
	free(src);
	free(dst);
	free(msg);
	dp_teardown(&p, &zc_shared);
}

/*
 * a READs b's MR; once the READ completes, b deregisters and frees the
 * source, and registers a new one for the next READ. b's Read Response
 * went zero-copy and holds the MR until a's acknowledgement arrives,
 * which may come after a's completion (a delayed ACK, or b's engine is
 * behind a's): the deregistration waits for it (WISP_ZC_DEREG_GRACE_MS)
 * rather than abort the stream, so the QPs keep working. One engine
 * each. (b is the MPA responder: without an RTR it sends only after a's
 * first FPDU, so a starts.)
 */
Test(zc, read_then_dereg_source, .timeout = 120)
{
	const size_t len = 32768;
	const int rounds = 20;
	struct ibv_send_wr rd = { 0 }, *bad;
	struct ibv_recv_wr rw = { 0 }, *rbad;
	struct ibv_sge rsge, msge;
	struct ibv_mr *msink, *mm;
	uint8_t *sink, *msg;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	struct dp_pair p;

	zc_setup(&p, &zc_apart);
	msink = dp_mr(p.a.pd, len, IBV_ACCESS_LOCAL_WRITE, &sink);
	mm = dp_mr(p.b.pd, 64, IBV_ACCESS_LOCAL_WRITE, &msg);
	for (int round = 0; round < rounds; round++) {
		struct ibv_wc wc;
		struct ibv_mr *msrc;
		uint8_t *src;
		size_t bad_at = SIZE_MAX;

		msrc = dp_mr(p.b.pd, len, DP_ALL_ACCESS, &src);
		for (size_t i = 0; i < len; i++)
			src[i] = pat(i + (size_t)round);
		memset(sink, 0, len);
		rsge = (struct ibv_sge){ (uintptr_t)sink, (uint32_t)len,
					 msink->lkey };
		rd.sg_list = &rsge;
		rd.num_sge = 1;
		rd.opcode = IBV_WR_RDMA_READ;
		rd.send_flags = IBV_SEND_SIGNALED;
		rd.wr.rdma.remote_addr = (uintptr_t)src;
		rd.wr.rdma.rkey = msrc->rkey;
		cr_assert_eq(ibv_post_send(p.a.qp, &rd, &bad), 0);
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "READ %d: %s", round,
			     ibv_wc_status_str(wc.status));
		/* The source goes away at once. */
		cr_assert_eq(ibv_dereg_mr(msrc), 0);
		memset(src, ZC_MARK, len);
		free(src);
		for (size_t i = 0; i < len && bad_at == SIZE_MAX; i++)
			if (sink[i] != pat(i + (size_t)round))
				bad_at = i;
		cr_assert_eq(bad_at, SIZE_MAX, "READ %d differs at %zu", round,
			     bad_at);
	}
	cr_assert_gt(zc_sends(p.b.ctx), 0, "the Read Responses went "
		     "zero-copy");

	/* The stream is intact: a SEND from a still arrives. */
	msge = (struct ibv_sge){ (uintptr_t)msg, 64, mm->lkey };
	rw.sg_list = &msge;
	rw.num_sge = 1;
	cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &rbad), 0);
	send8_and_wait(&p, sink, msink);
	cr_assert_eq(ibv_query_qp(p.b.qp, &qa, IBV_QP_STATE, &qia), 0);
	cr_assert_eq(qa.qp_state, IBV_QPS_RTS, "ibv_dereg_mr did not abort "
		     "the stream");
	cr_assert_eq(ibv_dereg_mr(msink), 0);
	cr_assert_eq(ibv_dereg_mr(mm), 0);
	free(sink);
	free(msg);
	dp_teardown(&p, &zc_apart);
}
