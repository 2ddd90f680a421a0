/* SPDX-License-Identifier: MIT */
/* Posting a receive straight into a QP core's RQ, for the suites that
 * drive rdmap_qp without the verbs layer. */
#ifndef WISP_TEST_QP_RECV_H
#define WISP_TEST_QP_RECV_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "rdmap_qp.h"

/* A receive of the SGEs sg[0..n) (length: their sum) into the RQ's slot
 * tail, then tail + 1 published; the caller has checked for room. */
static inline void qp_rq_post_at(struct rdmap_qp *qp, uint32_t tail,
				 uint64_t wr_id, const struct rdmap_sge *sg,
				 int n)
{
	struct rdmap_ring *rq = rdmap_qp_rq(qp);
	struct rdmap_recv_wr *r = rdmap_ring_slot(rq, tail);

	memset(r, 0, sizeof(*r));
	r->wr_id = wr_id;
	r->num_sge = (uint8_t)n;
	for (int i = 0; i < n; i++) {
		r->sge[i] = sg[i];
		r->length += sg[i].length;
	}
	atomic_store_explicit(&rq->tail, tail + 1, memory_order_release);
}

#endif
