// SPDX-License-Identifier: MIT
/*
 * rdmap_qp_stats.c - the queue pair's counters (rdmap_qp_stats.h).
 *
 * Every function here runs where the event happens, with the core held
 * by its caller (the owner's core lock), except qp_stat_flushed: a
 * posting thread flushes a QP that has no stream under its post lock
 * only. Nothing here makes a system call or takes a lock.
 */
#include "rdmap_qp_internal.h"

const struct rdmap_qp_stats *rdmap_qp_stats(const struct rdmap_qp *qp)
{
	return qp->st;
}

void qp_stat_fpdu(struct rdmap_qp *qp, bool tx, const struct rdmap_hdr *h,
		  uint32_t plen)
{
	struct rdmap_qp_stats *st = qp->st;
	unsigned int op = h->opcode & (RDMAP_STATS_OPS - 1);
	/* A Read Request carries no payload: count what it asks for. */
	uint64_t octets = op == RDMAP_OP_READ_REQ ? h->rreq.size : plen;

	if (tx) {
		RDMAP_STAT_ADD(st->tx_fpdus, 1);
		RDMAP_STAT_ADD(st->tx_octets[op], octets);
		if (h->ddp.last)
			RDMAP_STAT_ADD(st->tx_msgs[op], 1);
		return;
	}
	RDMAP_STAT_ADD(st->rx_fpdus, 1);
	RDMAP_STAT_ADD(st->rx_octets[op], octets);
	if (h->ddp.last)
		RDMAP_STAT_ADD(st->rx_msgs[op], 1);
}

void qp_stat_term(struct rdmap_qp *qp, bool tx, uint16_t term)
{
	struct rdmap_qp_stats *st = qp->st;
	unsigned int kind = rdmap_stats_term_kind(term);

	if (tx) {
		RDMAP_STAT_ADD(st->term_tx, 1);
		RDMAP_STAT_SET(st->term_tx_last, term);
		RDMAP_STAT_ADD(st->term_tx_kind[kind], 1);
		return;
	}
	RDMAP_STAT_ADD(st->term_rx, 1);
	RDMAP_STAT_SET(st->term_rx_last, term);
	RDMAP_STAT_ADD(st->term_rx_kind[kind], 1);
}

void qp_stat_flushed(struct rdmap_qp *qp, uint64_t n)
{
	atomic_fetch_add_explicit(&qp->st->flushed, n, memory_order_relaxed);
}
