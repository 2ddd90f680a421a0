/* SPDX-License-Identifier: MIT */
/*
 * verbs_internal.h - the data-path objects shared by verbs_cq.c and
 * verbs_qp.c (internal to wisp's libibverbs.so.1).
 */
#ifndef WISP_VERBS_INTERNAL_H
#define WISP_VERBS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "wisp_verbs.h"

enum { CQ_DISARMED, CQ_ARMED_SOLICITED, CQ_ARMED_ANY };

struct wisp_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	} base;
	struct ibv_wc *ring;
	uint32_t size;            /* power of two */
	_Atomic uint32_t head, tail;
	pthread_mutex_t prod_lock, cons_lock;
	atomic_int armed;
	atomic_bool overrun;
	atomic_int users;         /* QPs using it */
	struct wisp_cq *ev_next;  /* on its channel's event list */
	uint32_t events_reported;
	struct ibv_wc cur;        /* the extended CQ's current entry */
	/* QPs completing here, which a poller may progress itself. */
	pthread_mutex_t qps_lock;
	struct wisp_qp **qps;
	int nqps, qps_cap;
};

struct wisp_qp;

/* Receive what qp's socket holds now, on the calling thread
 * (verbs_qp.c). Called by ibv_poll_cq on an empty CQ. */
void wisp_qp_progress(struct wisp_qp *qp);

/* The CQ's poller goes to sleep: give qp's socket back to the engine. */
void wisp_qp_release(struct wisp_qp *qp);

/* Add / remove qp on cq's list (verbs_cq.c). */
int wisp_cq_add_qp(struct wisp_cq *cq, struct wisp_qp *qp);
void wisp_cq_del_qp(struct wisp_cq *cq, const struct wisp_qp *qp);
void wisp_cq_lock_qps(struct wisp_cq *cq);
void wisp_cq_unlock_qps(struct wisp_cq *cq);

static inline struct wisp_cq *to_wcq(struct ibv_cq *cq)
{
	return container_of(cq, struct wisp_cq, base.cq);
}

/* Append a completion (any thread); raise the channel event if armed. */
void wisp_cq_push(struct wisp_cq *cq, const struct ibv_wc *wc, bool solicited);

#endif /* WISP_VERBS_INTERNAL_H */
