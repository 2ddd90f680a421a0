// SPDX-License-Identifier: MIT
/*
 * test_qp.c - the RDMAP queue pair core without I/O: completion order
 * against the SQ ring.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "rdmap_qp.h"

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

Test(qp, send_slot_free_before_completion)
{
	struct rdmap_stag_table t;
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &t, .ops = &ops,
				    .sq_size = 4, .rq_size = 4 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_ring *sq;
	struct iovec iov[64];

	cr_assert_eq(rdmap_stag_table_init(&t, 16), 0);
	g_qp = rdmap_qp_create(&cfg);
	cr_assert_not_null(g_qp);
	cr_assert_eq(rdmap_qp_start(g_qp, &s), 0);
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
