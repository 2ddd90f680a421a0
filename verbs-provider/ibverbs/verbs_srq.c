// SPDX-License-Identifier: MIT
/*
 * verbs_srq.c - shared receive queues: a ring of posted receives under a
 * lock, which the QPs using the SRQ pop from the engine thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs_internal.h"

bool wisp_srq_pop(struct wisp_srq *srq, struct rdmap_recv_wr *out)
{
	bool got = false, limit = false;

	pthread_mutex_lock(&srq->lock);
	if (srq->head != srq->tail) {
		*out = srq->ring[srq->head++ & (srq->size - 1)];
		got = true;
		/* IBTA 10.2.9.4: the limit event fires once, when the queue
		 * drops below the armed limit. */
		if (srq->limit && srq->tail - srq->head < srq->limit) {
			srq->limit = 0;
			limit = true;
		}
	}
	pthread_mutex_unlock(&srq->lock);
	if (limit) {
		struct ibv_async_event ev = {
			.element.srq = &srq->base,
			.event_type = IBV_EVENT_SRQ_LIMIT_REACHED,
		};
		wisp_async_event_push(srq->base.context, &ev);
	}
	return got;
}

static struct ibv_srq *create_srq(struct ibv_pd *pd, struct ibv_srq_attr *a,
				  void *srq_context)
{
	struct wisp_srq *srq;
	uint32_t size = 1;

	if (!pd || !a || a->max_wr == 0 || a->max_wr > WISP_MAX_SRQ_WR ||
	    a->max_sge > WISP_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	while (size < a->max_wr)
		size <<= 1;
	srq = calloc(1, sizeof(*srq));
	if (srq)
		srq->ring = calloc(size, sizeof(*srq->ring));
	if (!srq || !srq->ring) {
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&srq->lock, NULL);
	srq->size = size;
	srq->max_wr = a->max_wr;
	srq->max_sge = a->max_sge ? a->max_sge : 1;
	srq->limit = a->srq_limit;
	srq->base.context = pd->context;
	srq->base.pd = pd;
	srq->base.srq_context = srq_context;
	pthread_mutex_init(&srq->base.mutex, NULL);
	pthread_cond_init(&srq->base.cond, NULL);
	a->max_sge = srq->max_sge;
	wisp_pd_get(pd);
	return &srq->base;
}

struct ibv_srq *wisp_create_srq(struct ibv_pd *pd,
				struct ibv_srq_init_attr *attr)
{
	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	return create_srq(pd, &attr->attr, attr->srq_context);
}

struct ibv_srq *wisp_create_srq_ex(struct ibv_context *ctx,
				   struct ibv_srq_init_attr_ex *attr)
{
	(void)ctx;
	if (!attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
	    attr->srq_type != IBV_SRQT_BASIC) {
		errno = EOPNOTSUPP;   /* XRC and tag matching */
		return NULL;
	}
	return create_srq(attr->pd, &attr->attr, attr->srq_context);
}

int wisp_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
		    int mask)
{
	struct wisp_srq *srq;

	if (!ibsrq || !attr)
		return EINVAL;
	srq = to_wsrq(ibsrq);
	if (mask & IBV_SRQ_MAX_WR)
		return EOPNOTSUPP;    /* resizing is not offered */
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->max_wr)
			return EINVAL;
		pthread_mutex_lock(&srq->lock);
		srq->limit = attr->srq_limit;
		pthread_mutex_unlock(&srq->lock);
	}
	return 0;
}

int wisp_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct wisp_srq *srq;

	if (!ibsrq || !attr)
		return EINVAL;
	srq = to_wsrq(ibsrq);
	pthread_mutex_lock(&srq->lock);
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&srq->lock);
	return 0;
}

int wisp_destroy_srq(struct ibv_srq *ibsrq)
{
	struct wisp_srq *srq;

	if (!ibsrq)
		return EINVAL;
	srq = to_wsrq(ibsrq);
	/* QPs still pop from it: rdma-core's kernel path refuses, as for
	 * a CQ in use. */
	if (atomic_load(&srq->users))
		return EBUSY;
	wisp_pd_put(ibsrq->pd);
	pthread_mutex_destroy(&srq->lock);
	pthread_cond_destroy(&ibsrq->cond);
	pthread_mutex_destroy(&ibsrq->mutex);
	free(srq->ring);
	free(srq);
	return 0;
}

int wisp_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr)
{
	struct wisp_srq *srq = to_wsrq(ibsrq);
	int ret = 0;

	pthread_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		if (srq->tail - srq->head >= srq->max_wr) {
			ret = ENOMEM;
			break;
		}
		ret = wisp_conv_recv(wr, &srq->ring[srq->tail & (srq->size - 1)],
				srq->max_sge);
		if (ret)
			break;
		srq->tail++;
	}
	pthread_mutex_unlock(&srq->lock);
	if (ret)
		*bad_wr = wr;
	return ret;
}
