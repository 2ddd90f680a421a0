// SPDX-License-Identifier: MIT
/*
 * test_qp.c - the RDMAP queue pair core without I/O: completion order
 * against the SQ ring.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "rdmap_qp.h"
#include "wisp_mem.h"

static struct rdmap_qp *g_qp;
static int g_ncqe;
static uint32_t g_head_seen[8];

/* At the moment a send completion becomes visible, the WR's SQ slot
 * must already be free: an application that posts as soon as it polls
 * the completion (perftest -D) would otherwise get ENOMEM. */
static void on_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	cr_assert(!c->recv);
	g_head_seen[g_ncqe++] = atomic_load(&rdmap_qp_sq(g_qp)->head);
}

static const struct rdmap_qp_ops ops = { .complete = on_complete };

/* A queue pair made from cfg and started with s. */
static struct rdmap_qp *qp_started(const struct rdmap_qp_cfg *cfg,
				   const struct rdmap_stream_cfg *s)
{
	struct rdmap_qp *qp = rdmap_qp_create(cfg);

	cr_assert_not_null(qp);
	cr_assert_eq(rdmap_qp_start(qp, s), 0);
	return qp;
}

Test(qp, send_slot_free_before_completion)
{
	struct rdmap_stag_table t;
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &t, .ops = &ops,
				    .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_ring *sq;
	struct iovec iov[64];

	cr_assert_eq(rdmap_stag_table_init(&t, 16), 0);
	g_qp = qp_started(&cfg, &s);
	sq = rdmap_qp_sq(g_qp);
	for (uint32_t i = 0; i < 3; i++) {
		struct rdmap_send_wr *w = rdmap_ring_slot(sq, i);

		memset(w, 0, sizeof(*w));
		w->wr_id = i;
		w->opcode = RDMAP_WR_WRITE;
		w->flags = RDMAP_WR_SIGNALED | RDMAP_WR_INLINE;
		w->rkey = 0x1234;
		w->length = 8;
	}
	atomic_store(&sq->tail, 3);
	for (;;) {
		int n = rdmap_qp_tx_fill(g_qp, iov, 64);
		size_t bytes = 0;

		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			bytes += iov[i].iov_len;
		rdmap_qp_tx_done(g_qp, bytes);
	}
	cr_assert_eq(g_ncqe, 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(g_head_seen[i], (uint32_t)i + 1,
			     "completion %d seen with SQ head %u", i,
			     g_head_seen[i]);
	cr_log_info("3 signaled WRITEs: each slot freed before its completion");
	rdmap_qp_destroy(g_qp);
	rdmap_stag_table_fini(&t);
}

/* ---- the RTR nudge (rdmap_qp_tick) ---- */

static struct rdmap_stag_table g_t;

static struct rdmap_qp *rtr_qp(int rtr)
{
	static const struct rdmap_qp_ops nop = { .complete = on_complete };
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &g_t,
				    .ops = &nop, .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_qp *qp;

	s.rtr = rtr;
	cr_assert_eq(rdmap_stag_table_init(&g_t, 16), 0);
	qp = qp_started(&cfg, &s);
	return qp;
}

static void rtr_qp_free(struct rdmap_qp *qp)
{
	rdmap_qp_destroy(qp);
	rdmap_stag_table_fini(&g_t);
}

/* Everything tx_fill has now, as one byte string; returns its length. */
static size_t drain(struct rdmap_qp *qp, uint8_t *out, size_t cap)
{
	struct iovec iov[64];
	size_t len = 0;
	int n;

	while ((n = rdmap_qp_tx_fill(qp, iov, 64)) > 0) {
		size_t bytes = 0;

		for (int i = 0; i < n; i++) {
			cr_assert_leq(len + iov[i].iov_len, cap);
			memcpy(out + len, iov[i].iov_base, iov[i].iov_len);
			len += iov[i].iov_len;
			bytes += iov[i].iov_len;
		}
		rdmap_qp_tx_done(qp, bytes);
	}
	return len;
}

/* One FPDU, CRC off: ULPDU_Length, the DDP and RDMAP control octets. */
static void expect_fpdu(const uint8_t *b, size_t len, unsigned ulpdu,
			uint8_t ddp_ctrl, uint8_t rdmap_ctrl)
{
	cr_assert_eq(len, (2 + ulpdu + 3) / 4 * 4 + 4, "FPDU of %zu octets",
		     len);
	cr_assert_eq(b[0] << 8 | b[1], ulpdu);
	cr_assert_eq(b[2], ddp_ctrl, "DDP control %#x", b[2]);
	cr_assert_eq(b[3], rdmap_ctrl, "RDMAP control %#x", b[3]);
}

/* Read Request: untagged, Last, DV 1 / RV 1, opcode 1; 18 + 28 octets.
 * RDMA Write: tagged, Last, DV 1 / RV 1, opcode 0; 14 octets. */
#define READ_REQ_FPDU  46, 0x41, 0x41
#define ZERO_WRITE     14, 0xc1, 0x40

/* A destroyed QP's memory is the next QP's (mem/wisp_mem.h, pooled builds):
 * handed back as a fresh QP, nothing of the last one left in it. */
Test(qp, memory_of_a_destroyed_qp_is_reused_fresh)
{
	struct rdmap_stag_table t;
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &t, .ops = &ops,
				    .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_qp *a, *b;

	cr_assert_eq(rdmap_stag_table_init(&t, 16), 0);
	a = g_qp = qp_started(&cfg, &s);
	for (uint32_t i = 0; i < 3; i++) {
		struct rdmap_send_wr *w = rdmap_ring_slot(rdmap_qp_sq(a), i);

		memset(w, 0, sizeof(*w));
		w->opcode = RDMAP_WR_SEND;
		w->flags = RDMAP_WR_SIGNALED | RDMAP_WR_INLINE;
		w->length = 8;
	}
	atomic_store(&rdmap_qp_sq(a)->tail, 3);
	rdmap_qp_stream_ended(a, 0);
	cr_assert_eq(rdmap_qp_state(a), RDMAP_QP_ERROR);
	cr_assert_eq(atomic_load(&rdmap_qp_sq(a)->head), 3, "flushed");
	cr_assert_eq(atomic_load(&rdmap_qp_stats(a)->flushed), 3);
	rdmap_qp_destroy(a);

	b = rdmap_qp_create(&cfg);
	if (wisp_mem_pooled())
		cr_assert_eq(b, a, "the last QP's memory is handed out first");
	cr_assert_eq(rdmap_qp_state(b), RDMAP_QP_IDLE);
	cr_assert_eq(atomic_load(&rdmap_qp_sq(b)->tail), 0);
	cr_assert_eq(atomic_load(&rdmap_qp_sq(b)->head), 0);
	cr_assert_not(rdmap_qp_reads_out(b));
	cr_assert_eq(atomic_load(&rdmap_qp_stats(b)->flushed), 0,
		     "the last QP's counters are not the next QP's");
	cr_assert_eq(rdmap_qp_start(b, &s), 0);
	cr_assert_eq(rdmap_qp_state(b), RDMAP_QP_RTS);
	rdmap_qp_destroy(b);
	rdmap_stag_table_fini(&t);
}

Test(qp, rtr_unanswered_is_nudged_with_backoff)
{
	struct rdmap_qp *qp = rtr_qp(RDMAP_RTR_SEND_READ);
	int64_t t = 1000, next, want = t + RDMAP_NUDGE_FIRST_MS;
	uint8_t b[256];
	bool send;
	size_t n;

	/* the first call only starts the clock */
	cr_assert_eq(rdmap_qp_tick(qp, t, &send), want);
	cr_assert(!send);
	n = drain(qp, b, sizeof(b));
	expect_fpdu(b, n, READ_REQ_FPDU);
	cr_assert_eq(rdmap_qp_tick(qp, want - 1, &send), want);
	cr_assert(!send);
	cr_assert_eq(drain(qp, b, sizeof(b)), 0);
	for (int i = 1; i <= RDMAP_NUDGE_MAX; i++) {
		t = want;
		next = rdmap_qp_tick(qp, t, &send);
		cr_assert(send, "nudge %d due at %lld", i, (long long)t);
		want = t + ((int64_t)RDMAP_NUDGE_FIRST_MS << i);
		cr_assert_eq(next, want, "nudge %d: next at %lld", i,
			     (long long)next);
		n = drain(qp, b, sizeof(b));
		expect_fpdu(b, n, ZERO_WRITE);
	}
	cr_assert_eq(rdmap_qp_tick(qp, want, &send), -1);
	cr_assert(!send);
	cr_assert_eq(drain(qp, b, sizeof(b)), 0);
	cr_log_info("READ RTR unanswered: %d zero-length Writes, %d ms apart "
		    "and doubling, then none", RDMAP_NUDGE_MAX,
		    RDMAP_NUDGE_FIRST_MS);
	rtr_qp_free(qp);
}

/* Feed octets to the receive side as the engine would. */
static int feed(struct rdmap_qp *qp, const uint8_t *b, size_t len)
{
	int flags = 0;

	while (len) {
		struct iovec iov[RDMAP_MAX_SGE + 1];
		int n = rdmap_qp_rx_want(qp, iov, RDMAP_MAX_SGE + 1);
		size_t k = iov[0].iov_len < len ? iov[0].iov_len : len;

		cr_assert_geq(n, 1);
		memcpy(iov[0].iov_base, b, k);
		flags |= rdmap_qp_rx_done(qp, k);
		b += k;
		len -= k;
	}
	return flags;
}

/* Frame ulpdu[0..len) as one FPDU (CRC off) and feed it. */
static void feed_ulpdu(struct rdmap_qp *qp, const uint8_t *ulpdu, size_t len)
{
	uint8_t fpdu[512];
	struct mpa_tx tx;
	int n;

	mpa_tx_init(&tx, false, false);
	n = mpa_fpdu_encode(&tx, ulpdu, len, fpdu, sizeof(fpdu));
	cr_assert_gt(n, 0);
	feed(qp, fpdu, (size_t)n);
}

Test(qp, rtr_answered_is_not_nudged)
{
	struct rdmap_qp *qp = rtr_qp(RDMAP_RTR_SEND_READ);
	/* the zero-length Read Response: tagged, Last, opcode 2, sink STag
	 * as sent (not checked at zero length), TO 0; CRC off */
	static const uint8_t resp[20] = { 0, 14, 0xc1, 0x42, 0, 0, 1, 0 };
	uint8_t b[256];
	bool send;

	cr_assert_gt(rdmap_qp_tick(qp, 1000, &send), 0);
	expect_fpdu(b, drain(qp, b, sizeof(b)), READ_REQ_FPDU);
	feed(qp, resp, sizeof(resp));
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	cr_assert_eq(rdmap_qp_tick(qp, 1000 + RDMAP_NUDGE_FIRST_MS, &send), -1);
	cr_assert(!send);
	cr_assert_eq(drain(qp, b, sizeof(b)), 0);
	rtr_qp_free(qp);
}

Test(qp, write_rtr_nudged_and_no_rtr_never)
{
	struct rdmap_qp *qp = rtr_qp(RDMAP_RTR_SEND_WRITE);
	uint8_t b[256];
	bool send;

	cr_assert_eq(rdmap_qp_tick(qp, 0, &send), RDMAP_NUDGE_FIRST_MS);
	expect_fpdu(b, drain(qp, b, sizeof(b)), ZERO_WRITE);
	rdmap_qp_tick(qp, RDMAP_NUDGE_FIRST_MS, &send);
	cr_assert(send);
	expect_fpdu(b, drain(qp, b, sizeof(b)), ZERO_WRITE);
	rtr_qp_free(qp);

	/* a responder, and a QP without peer-to-peer, have nothing to time */
	qp = rtr_qp(RDMAP_RTR_EXPECT);
	cr_assert_eq(rdmap_qp_tick(qp, 0, &send), -1);
	rtr_qp_free(qp);
	qp = rtr_qp(RDMAP_RTR_NONE);
	cr_assert_eq(rdmap_qp_tick(qp, 0, &send), -1);
	cr_assert(!send);
	rtr_qp_free(qp);
}

/* ---- Read Responses are held to the READ they answer ---- */

#define RR_PD       ((const void *)1)
#define RR_SINK     256       /* sink buffer: offset in MR 0 ... */
#define RR_LEN      64        /* ... and length of the READ */
#define RR_FILL     0xa5      /* what the MRs hold before any placement */

static uint8_t rr_mem[2][1024];
static struct rdmap_mr rr_mr[2];
static struct rdmap_cqe rr_cqe[4];
static int rr_ncqe;

static void rr_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	cr_assert_lt(rr_ncqe, 4);
	rr_cqe[rr_ncqe++] = *c;
}

/* Both MRs filled with RR_FILL and registered, local-write, MR 1 of
 * RR_PD; MR 0 also granted access0, of PD pd0, and remotely
 * invalidatable if remote_inv0. No completion seen yet. */
static void rr_mrs_init(uint32_t access0, const void *pd0, bool remote_inv0)
{
	memset(rr_mem, RR_FILL, sizeof(rr_mem));
	rr_ncqe = 0;
	cr_assert_eq(rdmap_stag_table_init(&g_t, 16), 0);
	for (int i = 0; i < 2; i++) {
		rr_mr[i] = (struct rdmap_mr){
			.addr = rr_mem[i], .iova = 0x10000 * (uint64_t)(i + 1),
			.length = sizeof(rr_mem[i]),
			.access = RDMAP_ACC_LOCAL_WRITE |
				  (i == 0 ? access0 : 0),
			.pd = i == 0 ? pd0 : RR_PD,
			.remote_inv = i == 0 && remote_inv0,
		};
		cr_assert_eq(rdmap_stag_insert(&g_t, &rr_mr[i]), 0);
	}
}

/* A receive of 64 octets into MR 1 posted (wr_id 9). */
static void rr_post_recv64(struct rdmap_qp *qp)
{
	struct rdmap_recv_wr *r = rdmap_ring_slot(rdmap_qp_rq(qp), 0);

	memset(r, 0, sizeof(*r));
	r->wr_id = 9;
	r->num_sge = 1;
	r->sge[0] = (struct rdmap_sge){ rr_mr[1].iova, 64, rr_mr[1].stag };
	r->length = 64;
	atomic_store(&rdmap_qp_rq(qp)->tail, 1);
}

/* A started QP (CRC off) with two local-write MRs, one READ of RR_LEN
 * octets into MR 0 at RR_SINK posted and its Read Request sent. */
static struct rdmap_qp *rr_qp(void)
{
	static const struct rdmap_qp_ops o = { .complete = rr_complete };
	struct rdmap_qp_cfg cfg = { .pd = RR_PD, .stags = &g_t, .ops = &o,
				    .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_send_wr *w;
	struct rdmap_qp *qp;
	uint8_t b[256];

	rr_mrs_init(0, RR_PD, false);
	qp = qp_started(&cfg, &s);
	w = rdmap_ring_slot(rdmap_qp_sq(qp), 0);
	memset(w, 0, sizeof(*w));
	w->wr_id = 7;
	w->opcode = RDMAP_WR_READ;
	w->flags = RDMAP_WR_SIGNALED;
	w->num_sge = 1;
	w->sge[0] = (struct rdmap_sge){ rr_mr[0].iova + RR_SINK, RR_LEN,
					rr_mr[0].stag };
	w->rkey = 0x777;
	w->remote_addr = 0x5000;
	w->length = RR_LEN;
	atomic_store(&rdmap_qp_sq(qp)->tail, 1);
	expect_fpdu(b, drain(qp, b, sizeof(b)), READ_REQ_FPDU);
	return qp;
}

static void rr_qp_free(struct rdmap_qp *qp)
{
	rdmap_qp_destroy(qp);
	for (int i = 0; i < 2; i++)
		rdmap_stag_remove(&g_t, &rr_mr[i]);
	rdmap_stag_table_fini(&g_t);
}

/* Feed one Read Response segment (CRC off): len octets of pattern at
 * STag stag, TO to. */
static void rr_segment(struct rdmap_qp *qp, uint32_t stag, uint64_t to,
		       uint32_t len, bool last)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_RESP };
	uint8_t ulpdu[DDP_TAGGED_HDR_LEN + 256];
	int hl;

	cr_assert_leq(len, 256);
	h.ddp.last = last;
	h.ddp.t.stag = stag;
	h.ddp.t.to = to;
	hl = rdmap_hdr_build(&h, ulpdu, sizeof(ulpdu));
	cr_assert_eq(hl, DDP_TAGGED_HDR_LEN);
	for (uint32_t i = 0; i < len; i++)
		ulpdu[hl + (int)i] = (uint8_t)(0x10 + i);
	feed_ulpdu(qp, ulpdu, (size_t)hl + len);
}

/* All the QP sent is exactly one FPDU, a Terminate; parsed into t. */
static void drain_terminate(struct rdmap_qp *qp, struct rdmap_terminate *t)
{
	uint8_t b[256];
	size_t n = drain(qp, b, sizeof(b));
	struct rdmap_fault f;
	struct rdmap_hdr h;
	unsigned int ulen;
	int hl;

	cr_assert_geq(n, 2, "no Terminate sent");
	ulen = (unsigned int)(b[0] << 8 | b[1]);
	cr_assert_eq(n, (2 + ulen + 3) / 4 * 4 + 4, "one FPDU, %zu octets", n);
	hl = rdmap_hdr_parse(b + 2, ulen, &h, &f);
	cr_assert_gt(hl, 0);
	cr_assert_eq(h.opcode, RDMAP_OP_TERMINATE);
	cr_assert_eq(rdmap_term_parse(b + 2 + hl, ulen - (unsigned int)hl, t),
		     (int)(ulen - (unsigned int)hl));
}

/* The QP answered with exactly one Terminate carrying term, quoting the
 * DDP header (ddp_len octets) of the faulting segment. */
static void expect_terminate(struct rdmap_qp *qp, uint16_t term,
			     uint8_t ddp_len)
{
	struct rdmap_terminate t;

	drain_terminate(qp, &t);
	cr_assert_eq(t.term, term, "Terminate %#06x, want %#06x", t.term, term);
	cr_assert(t.has_ddp_hdr);
	cr_assert_eq(t.ddp_hdr_len, ddp_len);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_ERROR);
}

static void rr_expect_terminate(struct rdmap_qp *qp, uint16_t term)
{
	expect_terminate(qp, term, DDP_TAGGED_HDR_LEN);
}

/* The READ completed once, with status st and vendor_err term. */
static void rr_expect_wc(enum rdmap_wc_status st, uint16_t term)
{
	cr_assert_eq(rr_ncqe, 1);
	cr_assert_eq(rr_cqe[0].wr_id, 7);
	cr_assert(!rr_cqe[0].recv);
	cr_assert_eq(rr_cqe[0].opcode, RDMAP_WC_RDMA_READ);
	cr_assert_eq(rr_cqe[0].status, st, "status %u", rr_cqe[0].status);
	cr_assert_eq(rr_cqe[0].vendor_err, term);
}

/* Both MRs hold RR_FILL everywhere but [RR_SINK, RR_SINK + placed) of
 * MR 0, which holds the pattern rr_segment sends. */
static void rr_expect_mem(uint32_t placed)
{
	for (int m = 0; m < 2; m++)
		for (size_t i = 0; i < sizeof(rr_mem[m]); i++) {
			bool in = m == 0 && i >= RR_SINK && i < RR_SINK + placed;

			if (!in)
				cr_assert_eq(rr_mem[m][i], RR_FILL,
					     "MR %d octet %zu written", m, i);
		}
}

Test(qp, read_response_in_two_segments_completes)
{
	struct rdmap_qp *qp = rr_qp();
	uint64_t to = rr_mr[0].iova + RR_SINK;

	rr_segment(qp, rr_mr[0].stag, to, 48, false);
	rr_segment(qp, rr_mr[0].stag, to + 48, 16, true);
	rr_expect_wc(RDMAP_WC_SUCCESS, 0);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	for (uint32_t i = 0; i < 48; i++)
		cr_assert_eq(rr_mem[0][RR_SINK + i], (uint8_t)(0x10 + i));
	for (uint32_t i = 0; i < 16; i++)
		cr_assert_eq(rr_mem[0][RR_SINK + 48 + i], (uint8_t)(0x10 + i));
	rr_qp_free(qp);
}

/* DDP tagged buffer errors (RFC 5041 section 7): Invalid STag, Base or
 * bounds violation. */
#define TERM_T_STAG   0x1100
#define TERM_T_BOUNDS 0x1101

Test(qp, read_response_at_another_to_is_refused)
{
	struct rdmap_qp *qp = rr_qp();

	/* 64 octets, but 8 past the sink TO: inside MR 0, not the READ's */
	rr_segment(qp, rr_mr[0].stag, rr_mr[0].iova + RR_SINK + 8, RR_LEN,
		   true);
	rr_expect_terminate(qp, TERM_T_BOUNDS);
	rr_expect_wc(RDMAP_WC_LOC_QP_OP_ERR, TERM_T_BOUNDS);
	rr_expect_mem(0);
	rr_qp_free(qp);
}

Test(qp, read_response_longer_than_the_read_is_refused)
{
	struct rdmap_qp *qp = rr_qp();
	uint64_t to = rr_mr[0].iova + RR_SINK;

	/* 48 legitimate octets, then 32 more where only 16 were asked */
	rr_segment(qp, rr_mr[0].stag, to, 48, false);
	rr_segment(qp, rr_mr[0].stag, to + 48, 32, false);
	rr_expect_terminate(qp, TERM_T_BOUNDS);
	rr_expect_wc(RDMAP_WC_LOC_QP_OP_ERR, TERM_T_BOUNDS);
	rr_expect_mem(48);
	rr_qp_free(qp);
}

Test(qp, read_response_shorter_than_the_read_is_refused)
{
	struct rdmap_qp *qp = rr_qp();

	/* L set on an empty segment: the READ would complete with no data */
	rr_segment(qp, rr_mr[0].stag, rr_mr[0].iova + RR_SINK, 0, true);
	rr_expect_terminate(qp, TERM_T_BOUNDS);
	rr_expect_wc(RDMAP_WC_LOC_QP_OP_ERR, TERM_T_BOUNDS);
	rr_expect_mem(0);
	rr_qp_free(qp);
}

Test(qp, read_response_empty_segments_are_checked_by_length_only)
{
	struct rdmap_qp *qp = rr_qp();
	uint64_t to = rr_mr[0].iova + RR_SINK;

	/* RFC 5041 5.2: a zero-length segment's STag and TO are not
	 * checked, so an empty one naming anything passes; the READ then
	 * completes with the segment that brings its 64 octets. */
	rr_segment(qp, 0x12345678, 0xdead, 0, false);
	rr_segment(qp, rr_mr[0].stag, to, RR_LEN, true);
	rr_expect_wc(RDMAP_WC_SUCCESS, 0);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	rr_expect_mem(RR_LEN);
	rr_qp_free(qp);
}

Test(qp, read_response_to_another_stag_is_refused)
{
	struct rdmap_qp *qp = rr_qp();

	/* MR 1 is ours and writable, but not the READ's sink */
	rr_segment(qp, rr_mr[1].stag, rr_mr[1].iova + RR_SINK, RR_LEN, true);
	rr_expect_terminate(qp, TERM_T_STAG);
	rr_expect_wc(RDMAP_WC_LOC_QP_OP_ERR, TERM_T_STAG);
	rr_expect_mem(0);
	rr_qp_free(qp);
}

/* ---- Send with Invalidate invalidates only what may be invalidated ---- */

#define INV_MSG       16
#define TERM_CANT_INV 0x0109  /* RDMAP remote protection error "STag
			       * cannot be invalidated" (RFC 5040 7) */

/* A started QP with MR 0 (remote-writable, of PD pd; remote_inv: of a
 * kind that may be invalidated remotely) and a receive of 64 octets into
 * MR 1 posted (wr_id 9). */
static struct rdmap_qp *inv_qp(const void *pd, bool remote_inv)
{
	static const struct rdmap_qp_ops o = { .complete = rr_complete };
	struct rdmap_qp_cfg cfg = { .pd = RR_PD, .stags = &g_t, .ops = &o,
				    .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_qp *qp;

	rr_mrs_init(RDMAP_ACC_REMOTE_WRITE, pd, remote_inv);
	qp = qp_started(&cfg, &s);
	rr_post_recv64(qp);
	return qp;
}

/* Feed a Send with Invalidate (CRC off) of INV_MSG octets naming stag. */
static void inv_send(struct rdmap_qp *qp, uint32_t stag)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_SEND_INV };
	uint8_t ulpdu[DDP_UNTAGGED_HDR_LEN + INV_MSG];
	int hl;

	h.ddp.last = true;
	h.ddp.u.msn = 1;
	h.inval_stag = stag;
	hl = rdmap_hdr_build(&h, ulpdu, sizeof(ulpdu));
	cr_assert_eq(hl, DDP_UNTAGGED_HDR_LEN);
	memset(ulpdu + hl, 0x3c, INV_MSG);
	feed_ulpdu(qp, ulpdu, sizeof(ulpdu));
}

/* The receive completed once: status st, invalidation reported or not. */
static void inv_expect_wc(enum rdmap_wc_status st, bool with_inv)
{
	cr_assert_eq(rr_ncqe, 1);
	cr_assert_eq(rr_cqe[0].wr_id, 9);
	cr_assert(rr_cqe[0].recv);
	cr_assert_eq(rr_cqe[0].status, st, "status %u", rr_cqe[0].status);
	cr_assert_eq(rr_cqe[0].with_inv, with_inv);
	if (with_inv)
		cr_assert_eq(rr_cqe[0].inv_stag, rr_mr[0].stag);
}

Test(qp, send_with_invalidate_refuses_an_ordinary_mr)
{
	struct rdmap_qp *qp = inv_qp(RR_PD, false);

	/* An MR as ibv_reg_mr makes it, of the QP's own PD */
	inv_send(qp, rr_mr[0].stag);
	expect_terminate(qp, TERM_CANT_INV, DDP_UNTAGGED_HDR_LEN);
	inv_expect_wc(RDMAP_WC_REM_INV_REQ_ERR, false);
	cr_assert(atomic_load(&rr_mr[0].valid), "the MR was invalidated");
	rr_qp_free(qp);
}

Test(qp, send_with_invalidate_invalidates_what_may_be)
{
	/* a kind that allows it (a type 2 window, a fast-registered MR) */
	struct rdmap_qp *qp = inv_qp(RR_PD, true);
	uint8_t b[64];

	inv_send(qp, rr_mr[0].stag);
	cr_assert_eq(drain(qp, b, sizeof(b)), 0, "no Terminate");
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	inv_expect_wc(RDMAP_WC_SUCCESS, true);
	cr_assert_eq(rr_cqe[0].byte_len, INV_MSG);
	cr_assert(!atomic_load(&rr_mr[0].valid), "the MR is still valid");
	rr_qp_free(qp);
}

Test(qp, send_with_invalidate_refuses_another_pd_or_key)
{
	struct rdmap_qp *qp = inv_qp((const void *)2, true);

	/* of a kind that allows it, but of another PD */
	inv_send(qp, rr_mr[0].stag);
	expect_terminate(qp, TERM_CANT_INV, DDP_UNTAGGED_HDR_LEN);
	inv_expect_wc(RDMAP_WC_REM_INV_REQ_ERR, false);
	cr_assert(atomic_load(&rr_mr[0].valid));
	rr_qp_free(qp);

	/* of our PD, but the key is not the MR's */
	qp = inv_qp(RR_PD, true);
	inv_send(qp, rr_mr[0].stag ^ 1);
	expect_terminate(qp, TERM_CANT_INV, DDP_UNTAGGED_HDR_LEN);
	inv_expect_wc(RDMAP_WC_REM_INV_REQ_ERR, false);
	cr_assert(atomic_load(&rr_mr[0].valid));
	rr_qp_free(qp);
}

/* ---- QP access flags (verbs qp_access_flags) ---- */

#define TERM_ACCESS   0x0102  /* RDMAP remote protection "Access rights
			       * violation" (RFC 5040 7) */
#define ACC_BOTH      (RDMAP_ACC_REMOTE_WRITE | RDMAP_ACC_REMOTE_READ)
#define HDR_MAX_TEST  (DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN)
#define RTR_STAG_TEST 0x100   /* zero-length messages: never checked */

static int acc_nfatal, acc_fatal_term;

static void acc_fatal(void *arg, int term)
{
	(void)arg;
	acc_nfatal++;
	acc_fatal_term = term;
}

/* A started QP granting qp_access (responder: the MPA Responder, client-
 * server model) with MR 0 granting every remote right and a receive of
 * 64 octets into MR 1 posted (wr_id 9). */
static struct rdmap_qp *acc_qp(uint32_t qp_access, bool responder)
{
	static const struct rdmap_qp_ops o = { .complete = rr_complete,
					       .fatal = acc_fatal };
	struct rdmap_qp_cfg cfg = { .pd = RR_PD, .stags = &g_t, .ops = &o,
				    .sq_size = 4, .rq_size = 4,
				    .access = qp_access };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024,
				      .responder = responder };
	struct rdmap_qp *qp;

	acc_nfatal = 0;
	acc_fatal_term = 0x7777;
	rr_mrs_init(ACC_BOTH, RR_PD, false);
	qp = qp_started(&cfg, &s);
	rr_post_recv64(qp);
	return qp;
}

/* Feed one FPDU (CRC off): header h, then len octets of 0x10, 0x11... */
static void feed_msg(struct rdmap_qp *qp, const struct rdmap_hdr *h,
		     uint32_t len)
{
	uint8_t ulpdu[HDR_MAX_TEST + 256];
	int hl;

	cr_assert_leq(len, 256);
	hl = rdmap_hdr_build(h, ulpdu, HDR_MAX_TEST);
	cr_assert_gt(hl, 0);
	for (uint32_t i = 0; i < len; i++)
		ulpdu[hl + (int)i] = (uint8_t)(0x10 + i);
	feed_ulpdu(qp, ulpdu, (size_t)hl + len);
}

static void feed_write(struct rdmap_qp *qp, uint64_t to, uint32_t len)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_WRITE };

	h.ddp.tagged = true;
	h.ddp.last = true;
	h.ddp.t.stag = len ? rr_mr[0].stag : RTR_STAG_TEST;
	h.ddp.t.to = to;
	feed_msg(qp, &h, len);
}

static void feed_read_req(struct rdmap_qp *qp, uint64_t src_to, uint32_t size)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_REQ };

	h.ddp.last = true;
	h.ddp.u.msn = 1;
	h.rreq.sink_stag = 0x4242;
	h.rreq.sink_to = 0x9000;
	h.rreq.size = size;
	h.rreq.src_stag = size ? rr_mr[0].stag : RTR_STAG_TEST;
	h.rreq.src_to = src_to;
	feed_msg(qp, &h, 0);
}

Test(qp, write_refused_without_remote_write_on_the_qp)
{
	/* The MR allows remote writes; the QP (qp_access_flags) does not. */
	struct rdmap_qp *qp = acc_qp(RDMAP_ACC_REMOTE_READ, false);

	feed_write(qp, rr_mr[0].iova + RR_SINK, 32);
	expect_terminate(qp, TERM_ACCESS, DDP_TAGGED_HDR_LEN);
	rr_expect_mem(0);
	cr_assert_eq(acc_nfatal, 1);
	cr_assert_eq(acc_fatal_term, TERM_ACCESS);
	rr_qp_free(qp);

	/* Granted, the same WRITE is placed. */
	qp = acc_qp(ACC_BOTH, false);
	feed_write(qp, rr_mr[0].iova + RR_SINK, 32);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	for (uint32_t i = 0; i < 32; i++)
		cr_assert_eq(rr_mem[0][RR_SINK + i], (uint8_t)(0x10 + i));
	rr_qp_free(qp);
}

Test(qp, read_request_refused_without_remote_read_on_the_qp)
{
	struct rdmap_qp *qp = acc_qp(RDMAP_ACC_REMOTE_WRITE, false);
	struct rdmap_terminate t;

	memset(rr_mem[0] + RR_SINK, 0x3c, 32);  /* what a Read would send */
	feed_read_req(qp, rr_mr[0].iova + RR_SINK, 32);
	/* One FPDU out, the Terminate: no Read Response, no octet read. */
	drain_terminate(qp, &t);
	cr_assert_eq(t.term, TERM_ACCESS, "Terminate %#06x", t.term);
	/* RFC 5040 figure 10: the Read Request's own header is quoted. */
	cr_assert(t.has_ddp_hdr && t.has_rdma_hdr);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_ERROR);
	cr_assert_eq(acc_fatal_term, TERM_ACCESS);
	rr_qp_free(qp);
}

/* A WRITE of three 100-octet segments to MR 0 at offset at, framed
 * back to back (CRC off) into out; returns the stream length. */
static size_t kept_write_stream(uint8_t *out, size_t cap, uint64_t at)
{
	size_t len = 0;

	for (int k = 0; k < 3; k++) {
		struct rdmap_hdr h = { .opcode = RDMAP_OP_WRITE };
		uint8_t ulpdu[HDR_MAX_TEST + 100];
		struct mpa_tx tx;
		int hl, n;

		h.ddp.tagged = true;
		h.ddp.last = k == 2;
		h.ddp.t.stag = rr_mr[0].stag;
		h.ddp.t.to = rr_mr[0].iova + at + 100 * (uint64_t)k;
		hl = rdmap_hdr_build(&h, ulpdu, HDR_MAX_TEST);
		cr_assert_gt(hl, 0);
		memset(ulpdu + hl, 0x20 + k, 100);
		mpa_tx_init(&tx, false, false);
		n = mpa_fpdu_encode(&tx, ulpdu, (size_t)hl + 100, out + len,
				    cap - len);
		cr_assert_gt(n, 0);
		len += (size_t)n;
	}
	return len;
}

/* The segments of a WRITE that arrive in one read share one reference
 * on their MR; it lasts no longer than that read: an FPDU cut by the
 * read keeps one, a finished one none, and a segment after the MR was
 * unpublished is refused (Invalid STag). */
Test(qp, mr_reference_kept_across_segments_only_within_a_read)
{
	struct rdmap_qp *qp = acc_qp(RDMAP_ACC_REMOTE_WRITE, false);
	uint8_t stream[512];
	size_t len = kept_write_stream(stream, sizeof(stream), 0);
	size_t cut = len - 50;

	/* Two whole segments and half of the third in one read. */
	feed(qp, stream, cut);
	cr_assert_eq(rr_mr[0].slot->word & RDMAP_SLOT_REFS, 1,
		     "only the cut FPDU holds a reference between reads");
	feed(qp, stream + cut, len - cut);
	cr_assert_eq(rr_mr[0].slot->word & RDMAP_SLOT_REFS, 0);
	for (int i = 0; i < 300; i++)
		cr_assert_eq(rr_mem[0][i], 0x20 + i / 100);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);

	/* Unpublished between reads: nothing kept, the next WRITE is
	 * refused and places nothing. */
	cr_assert(!rdmap_stag_unpublish(&g_t, &rr_mr[0]), "no references");
	len = kept_write_stream(stream, sizeof(stream), 300);
	feed(qp, stream, len);
	rr_expect_terminate(qp, TERM_T_STAG);
	for (int i = 300; i < 600; i++)
		cr_assert_eq(rr_mem[0][i], RR_FILL);
	rr_qp_free(qp);
}

Test(qp, zero_length_rtr_messages_need_no_qp_access)
{
	/* The RFC 6581 RTRs touch no memory: a QP that grants nothing
	 * takes a zero-length WRITE and answers a zero-length Read. */
	struct rdmap_qp *qp = acc_qp(0, false);
	uint8_t b[256];

	feed_write(qp, 0, 0);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	feed_read_req(qp, 0, 0);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	/* the zero-length Read Response: tagged, Last, opcode 2 */
	expect_fpdu(b, drain(qp, b, sizeof(b)), 14, 0xc1, 0x42);
	cr_assert_eq(acc_nfatal, 0);
	rr_qp_free(qp);
}

Test(qp, access_changed_after_start_applies_to_the_next_segment)
{
	struct rdmap_qp *qp = acc_qp(0, false);

	rdmap_qp_set_access(qp, RDMAP_ACC_REMOTE_WRITE);
	feed_write(qp, rr_mr[0].iova + RR_SINK, 16);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS);
	cr_assert_eq(rr_mem[0][RR_SINK], 0x10);
	rdmap_qp_set_access(qp, RDMAP_ACC_REMOTE_READ);
	feed_write(qp, rr_mr[0].iova + RR_SINK + 100, 16);
	expect_terminate(qp, TERM_ACCESS, DDP_TAGGED_HDR_LEN);
	cr_assert_eq(rr_mem[0][RR_SINK + 100], RR_FILL, "placed anyway");
	rr_qp_free(qp);
}

/* ---- RFC 5044 7.1.2: a Responder sends nothing before an FPDU ---- */

/* Post an inline SEND of 8 octets (wr_id 5) on qp. */
static void post_send8(struct rdmap_qp *qp)
{
	struct rdmap_send_wr *w = rdmap_ring_slot(rdmap_qp_sq(qp), 0);

	memset(w, 0, sizeof(*w));
	w->wr_id = 5;
	w->opcode = RDMAP_WR_SEND;
	w->flags = RDMAP_WR_SIGNALED | RDMAP_WR_INLINE;
	w->length = 8;
	memset(w->inline_data, 0x77, 8);
	atomic_store(&rdmap_qp_sq(qp)->tail, 1);
}

/* A Send (untagged, Last, opcode 3): 18 + 8 octets. */
#define SEND8_FPDU 26, 0x41, 0x43

Test(qp, client_server_responder_holds_its_first_send)
{
	struct rdmap_qp *qp = acc_qp(ACC_BOTH, true);
	struct rdmap_hdr h = { .opcode = RDMAP_OP_SEND };
	uint8_t b[256];

	/* The server posts first: nothing may leave before the client's
	 * first FPDU. */
	post_send8(qp);
	cr_assert_not(rdmap_qp_tx_pending(qp));
	cr_assert_eq(drain(qp, b, sizeof(b)), 0, "sent before any FPDU");
	/* The client's first message arrives: the held Send goes out. */
	h.ddp.last = true;
	h.ddp.u.msn = 1;
	feed_msg(qp, &h, 4);
	cr_assert(rdmap_qp_tx_pending(qp));
	expect_fpdu(b, drain(qp, b, sizeof(b)), SEND8_FPDU);
	cr_assert_eq(rr_ncqe, 2, "the receive and the SEND completed");
	rr_qp_free(qp);

	/* The initiator is not held. */
	qp = acc_qp(ACC_BOTH, false);
	post_send8(qp);
	expect_fpdu(b, drain(qp, b, sizeof(b)), SEND8_FPDU);
	rr_qp_free(qp);
}

/* ---- the peer's Terminate: code 0 is a code; siw's layout ---- */

/* Feed a Terminate whose body is body[0..len). */
static void feed_term(struct rdmap_qp *qp, const uint8_t *body, size_t len)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_TERMINATE };
	uint8_t ulpdu[DDP_UNTAGGED_HDR_LEN + RDMAP_TERM_MAX_LEN];
	int hl;

	h.ddp.last = true;
	h.ddp.u.msn = 1;
	hl = rdmap_hdr_build(&h, ulpdu, sizeof(ulpdu));
	cr_assert_eq(hl, DDP_UNTAGGED_HDR_LEN);
	memcpy(ulpdu + hl, body, len);
	feed_ulpdu(qp, ulpdu, (size_t)hl + len);
}

Test(qp, terminate_code_zero_is_a_terminate)
{
	/* RDMAP local catastrophic error, 0x0000, no header. */
	static const uint8_t body[4] = { 0 };
	struct rdmap_qp *qp = acc_qp(ACC_BOTH, false);

	feed_term(qp, body, sizeof(body));
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_ERROR);
	cr_assert_eq(acc_nfatal, 1);
	cr_assert_eq(acc_fatal_term, 0, "fatal(%d): the code", acc_fatal_term);
	rr_qp_free(qp);

	/* The stream merely ending is no Terminate. */
	qp = acc_qp(ACC_BOTH, false);
	rdmap_qp_stream_ended(qp, 0);
	cr_assert_eq(acc_nfatal, 1);
	cr_assert_eq(acc_fatal_term, RDMAP_TERM_NONE);
	rr_qp_free(qp);
}

Test(qp, siw_terminate_explains_the_read)
{
	/* What Linux siw (x86) sends when it refuses our Read Request's
	 * source: RDMAP remote protection, access rights, written through
	 * its little-endian bitfield: Layer and EType swapped in octet 0,
	 * M D R in octet 2's low bits, then the Read Request quoted. */
	struct rdmap_qp *qp = rr_qp();
	struct rdmap_hdr rq = { .opcode = RDMAP_OP_READ_REQ };
	uint8_t body[RDMAP_TERM_MAX_LEN] = { 0x10, 0x02, 0x07, 0x00, 0, 0 };

	rq.ddp.last = true;
	rq.ddp.u.qn = RDMAP_QN_READ_REQ;
	rq.ddp.u.msn = 1;
	rq.rreq.size = RR_LEN;
	cr_assert_eq(rdmap_hdr_build(&rq, body + 6, sizeof(body) - 6),
		     DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN);
	feed_term(qp, body, sizeof(body));
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_ERROR);
	rr_expect_wc(RDMAP_WC_REM_ACCESS_ERR, TERM_ACCESS);
	rr_qp_free(qp);
}

/* ---- teardown: a flushed WR waits for the batch that reads it ---- */

static struct rdmap_cqe td_cqe[4];
static int td_ncqe;

static void td_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	cr_assert_lt(td_ncqe, 4);
	td_cqe[td_ncqe++] = *c;
}

/* A started QP with a WRITE of 8000 octets from mr taken into the
 * transmit batch, of which only half was reported sent. */
static struct rdmap_qp *td_qp(struct rdmap_stag_table *t,
			      struct rdmap_mr *mr, uint8_t *mem, size_t len)
{
	static const struct rdmap_qp_ops o = { .complete = td_complete };
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = t, .ops = &o,
				    .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_send_wr *w;
	struct rdmap_qp *qp;
	struct iovec iov[64];
	size_t bytes = 0;
	int n;

	td_ncqe = 0;
	cr_assert_eq(rdmap_stag_table_init(t, 16), 0);
	*mr = (struct rdmap_mr){ .addr = mem, .iova = 0x1000, .length = len,
				 .pd = (void *)1 };
	cr_assert_eq(rdmap_stag_insert(t, mr), 0);
	qp = qp_started(&cfg, &s);
	w = rdmap_ring_slot(rdmap_qp_sq(qp), 0);
	memset(w, 0, sizeof(*w));
	w->wr_id = 9;
	w->opcode = RDMAP_WR_WRITE;
	w->flags = RDMAP_WR_SIGNALED;
	w->num_sge = 1;
	w->sge[0] = (struct rdmap_sge){ mr->iova, 8000, mr->stag };
	w->length = 8000;
	w->rkey = 0x1234;
	atomic_store(&rdmap_qp_sq(qp)->tail, 1);
	n = rdmap_qp_tx_fill(qp, iov, 64);
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++)
		bytes += iov[i].iov_len;
	cr_assert_gt(bytes, 8000);
	rdmap_qp_tx_done(qp, bytes / 2);
	cr_assert_eq(td_ncqe, 0, "half sent: not complete");
	return qp;
}

static uint64_t td_refs(const struct rdmap_mr *mr)
{
	return atomic_load(&mr->slot->word) & RDMAP_SLOT_REFS;
}

Test(qp, flushed_write_completes_once_its_batch_is_sent)
{
	static uint8_t mem[8192];
	struct rdmap_stag_table t;
	struct rdmap_mr mr;
	struct rdmap_qp *qp = td_qp(&t, &mr, mem, sizeof(mem));
	struct iovec iov[64];
	size_t bytes = 0;
	int n;

	/* The application disconnects: the rest of the batch may still be
	 * read by the kernel, so the WRITE must not complete yet. */
	rdmap_qp_shutdown(qp);
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_ERROR);
	cr_assert_eq(td_ncqe, 0, "completed while its octets were unsent");
	cr_assert_gt(td_refs(&mr), 0, "the batch keeps the MR referenced");
	/* The graceful close sends the rest; then it completes, flushed. */
	n = rdmap_qp_tx_fill(qp, iov, 64);
	cr_assert_gt(n, 0, "the rest of the batch still goes out");
	for (int i = 0; i < n; i++)
		bytes += iov[i].iov_len;
	rdmap_qp_tx_done(qp, bytes);
	cr_assert_eq(td_ncqe, 1);
	cr_assert_eq(td_cqe[0].wr_id, 9);
	cr_assert_eq(td_cqe[0].status, RDMAP_WC_WR_FLUSH_ERR);
	cr_assert_eq(td_refs(&mr), 0);
	rdmap_qp_destroy(qp);
	rdmap_stag_remove(&t, &mr);
	rdmap_stag_table_fini(&t);
}

Test(qp, dereg_of_memory_in_the_batch_aborts_the_stream)
{
	static uint8_t mem[8192];
	struct rdmap_stag_table t;
	struct rdmap_mr mr;
	struct rdmap_qp *qp = td_qp(&t, &mr, mem, sizeof(mem));

	cr_assert(rdmap_stag_unpublish(&t, &mr), "references are held");
	cr_assert_eq(rdmap_qp_revoke(qp, &mr) & RDMAP_REVOKE_ABORT,
		     RDMAP_REVOKE_ABORT, "a send may read it: abort");
	cr_assert_eq(td_ncqe, 0);
	/* The engine aborted the stream and reaped the send: now. */
	rdmap_qp_stream_ended(qp, ECONNABORTED);
	cr_assert_eq(td_ncqe, 1);
	cr_assert_eq(td_cqe[0].status, RDMAP_WC_WR_FLUSH_ERR);
	cr_assert_eq(td_refs(&mr), 0, "every reference dropped");
	rdmap_stag_remove(&t, &mr);
	rdmap_qp_destroy(qp);
	rdmap_stag_table_fini(&t);
}

/* ---- system calls per FPDU: batching on both sides ---- */

static int bt_ncqe;

static void bt_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	cr_assert_eq(c->status, RDMAP_WC_SUCCESS);
	bt_ncqe++;
}

#define BT_WRS   32
#define BT_SIZE  4096u
#define BT_WIRE  (BT_WRS * (BT_SIZE + 64))

/*
 * 32 WRITEs of 4 KiB, one FPDU each (MULPDU 8 KiB: FPDUs too small to be
 * received straight into place, as on a link with a larger MSS than
 * Ethernet's or with FPDUs a few KiB long). The sender must hand them
 * to the kernel in few gathered sends (here: tx_fill calls), and the
 * receiver must take many of them per read (rx_want / rx_done cycles,
 * each a recvmsg in the engine) and place every octet. The bounds are
 * loose (a quarter of one call per FPDU) but a QP that sends or reads
 * one FPDU, or one header, per system call fails them.
 */
Test(qp, many_small_fpdus_per_send_and_per_receive)
{
	static const struct rdmap_qp_ops o = { .complete = bt_complete };
	static uint8_t src[BT_SIZE], dst[BT_WRS * BT_SIZE], wire[BT_WIRE];
	struct rdmap_stag_table t;
	struct rdmap_mr smr = { .addr = src, .iova = 0x1000,
				.length = sizeof(src), .pd = (void *)1 };
	struct rdmap_mr dmr = { .addr = dst, .iova = 0x100000,
				.length = sizeof(dst), .pd = (void *)1,
				.access = RDMAP_ACC_REMOTE_WRITE };
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &t, .ops = &o,
				    .sq_size = BT_WRS, .rq_size = 4,
				    .access = RDMAP_ACC_REMOTE_WRITE };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 8192,
				      .crc = true };
	struct rdmap_qp *tx, *rx;
	struct iovec iov[1024];
	size_t len = 0, off = 0;
	int fills = 0, reads = 0;

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 3);
	cr_assert_eq(rdmap_stag_table_init(&t, 16), 0);
	cr_assert_eq(rdmap_stag_insert(&t, &smr), 0);
	cr_assert_eq(rdmap_stag_insert(&t, &dmr), 0);
	atomic_store(&dmr.valid, true);
	atomic_store(&smr.valid, true);
	tx = rdmap_qp_create(&cfg);
	rx = rdmap_qp_create(&cfg);
	cr_assert(tx && rx);
	cr_assert_eq(rdmap_qp_start(tx, &s), 0);
	cr_assert_eq(rdmap_qp_start(rx, &s), 0);
	for (uint32_t i = 0; i < BT_WRS; i++) {
		struct rdmap_send_wr *w = rdmap_ring_slot(rdmap_qp_sq(tx), i);

		memset(w, 0, sizeof(*w));
		w->wr_id = i;
		w->opcode = RDMAP_WR_WRITE;
		w->flags = RDMAP_WR_SIGNALED;
		w->num_sge = 1;
		w->sge[0] = (struct rdmap_sge){ smr.iova, BT_SIZE, smr.stag };
		w->length = BT_SIZE;
		w->rkey = dmr.stag;
		w->remote_addr = dmr.iova + (uint64_t)i * BT_SIZE;
	}
	atomic_store(&rdmap_qp_sq(tx)->tail, BT_WRS);
	for (int n; (n = rdmap_qp_tx_fill(tx, iov, 1024)) > 0; fills++) {
		size_t bytes = 0;

		for (int i = 0; i < n; i++) {
			cr_assert_leq(len + iov[i].iov_len, sizeof(wire));
			memcpy(wire + len, iov[i].iov_base, iov[i].iov_len);
			len += iov[i].iov_len;
			bytes += iov[i].iov_len;
		}
		rdmap_qp_tx_done(tx, bytes);
	}
	cr_assert_eq(bt_ncqe, BT_WRS, "every WRITE completed at the sender");
	cr_assert_leq(fills, BT_WRS / 4, "%d FPDUs took %d gathered sends",
		      BT_WRS, fills);
	while (off < len) {
		int n = rdmap_qp_rx_want(rx, iov, 8);
		size_t got = 0;

		cr_assert_gt(n, 0);
		for (int i = 0; i < n && off < len; i++) {
			size_t k = len - off < iov[i].iov_len ? len - off
							     : iov[i].iov_len;

			memcpy(iov[i].iov_base, wire + off, k);
			off += k;
			got += k;
		}
		rdmap_qp_rx_done(rx, got);
		reads++;
		cr_assert_eq(rdmap_qp_state(rx), RDMAP_QP_RTS);
	}
	cr_assert_leq(reads, BT_WRS / 4, "%d FPDUs took %d receives", BT_WRS,
		      reads);
	for (uint32_t i = 0; i < BT_WRS; i++)
		cr_assert_eq(memcmp(dst + (size_t)i * BT_SIZE, src, BT_SIZE), 0,
			     "WRITE %u placed", i);
	cr_log_info("%d FPDUs of 4 KiB: %d gathered sends, %d receives",
		    BT_WRS, fills, reads);
	rdmap_qp_destroy(tx);
	rdmap_qp_destroy(rx);
	rdmap_stag_table_fini(&t);
}
