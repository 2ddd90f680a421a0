/* SPDX-License-Identifier: MIT */
/*
 * cm_qp.c - QPs and SRQs made through rdma_cm, as rdma-core makes them:
 * on the id's PD (the library's default PD unless one is given), with
 * CQs and completion channels made for the id when the caller gives none
 * (rdma_verbs.h's rdma_get_send_comp / rdma_get_recv_comp use those), and
 * moved to INIT. The connection later moves the QP to RTS when it hands
 * it the stream.
 */
#include <errno.h>
#include <string.h>

#include "cm_internal.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

/* What the kernel's iWARP CM puts in the INIT transition of a connected
 * QP: remote read and write allowed at the QP level (MRs still decide). */
static void init_attr(struct ibv_qp_attr *a, int *mask)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_INIT;
	a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ;
	a->port_num = 1;
	a->pkey_index = 0;
	*mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT |
		IBV_QP_PKEY_INDEX;
}

int wcm_qp_init(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int mask;

	(void)id;
	init_attr(&a, &mask);
	return -ibv_modify_qp(qp, &a, mask);
}

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq == id->recv_cq)
			id->send_cq = NULL;
		id->recv_cq = NULL;
	}
	if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
		id->send_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		id->recv_cq_channel = NULL;
	}
	if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq_channel = NULL;
	}
}

/* A CQ with its own completion channel for each missing side. */
static int create_cqs(struct rdma_cm_id *id, uint32_t send_size,
		      uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id,
					    id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id,
					    id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	destroy_cqs(id);
	return -1;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp *qp;
	bool made_cqs;
	int ret;

	if (!id || !attr || id->qp)
		return fail(-EINVAL);
	if (!id->verbs) {
		/* No device yet: bind or resolve the id first. */
		return fail(-EINVAL);
	}
	if (attr->qp_type != IBV_QPT_RC) {
		wcm_log(WCM_LOG_WARN, "rdma_create_qp: only RC QPs (iWARP)");
		return fail(-EOPNOTSUPP);
	}
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (attr->pd->context != id->verbs) {
		return fail(-EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return fail(-EINVAL);

	made_cqs = (!attr->send_cq && !id->send_cq) ||
		   (!attr->recv_cq && !id->recv_cq);
	if (create_cqs(id, attr->send_cq || id->send_cq ? 0 :
			   attr->cap.max_send_wr,
		       attr->recv_cq || id->recv_cq ? 0 :
			   attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;

	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp)
		goto err_cqs;
	ret = wcm_qp_init(id, qp);
	if (ret) {
		ibv_destroy_qp(qp);
		errno = -ret;
		goto err_cqs;
	}
	pthread_mutex_lock(&wcm.lock);
	id->pd = qp->pd;
	id->qp = qp;
	pthread_mutex_unlock(&wcm.lock);
	return 0;

err_cqs:
	ret = errno;
	if (made_cqs)
		destroy_cqs(id);
	errno = ret;
	return -1;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	if (!id || !qp_init_attr)
		return fail(-EINVAL);
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &ex);
	/* The caller sees the capabilities the QP got and the CQs used. */
	memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct ibv_qp *qp;

	if (!id || !id->qp)
		return;
	pthread_mutex_lock(&wcm.lock);
	/* An active id's connect thread hands the socket to the QP in
	 * ATTACHING, without the lock for a few milliseconds: wait for
	 * that, as the kernel's CM holds a reference on the QP while it
	 * connects. Before ATTACHING the thread takes the QP afresh. */
	while (to_wid(id)->state == WCM_ATTACHING)
		pthread_cond_wait(&wcm.cond, &wcm.lock);
	qp = id->qp;
	id->qp = NULL;
	pthread_mutex_unlock(&wcm.lock);

	/* The stream-end callback stays: a QP destroyed while connected
	 * ends its stream, and the id then gets DISCONNECTED as with the
	 * kernel's CM. Its argument outlives the QP and the id (struct
	 * wcm_conn), so a callback still on its way is harmless. */
	ibv_destroy_qp(qp);
	/* The CQs rdma_create_qp made for the id (rdma-core: the same). */
	destroy_cqs(id);
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
		      int *qp_attr_mask)
{
	struct wcm_id *w;

	if (!id || !qp_attr || !qp_attr_mask || !id->verbs)
		return fail(-EINVAL);
	w = to_wid(id);
	switch (qp_attr->qp_state) {
	case IBV_QPS_INIT:
		init_attr(qp_attr, qp_attr_mask);
		return 0;
	case IBV_QPS_RTR:
	case IBV_QPS_RTS:
		/* The kernel's iWARP CM answers RTR and RTS with an empty
		 * mask (iwcm_init_qp_rts_attr): the connection moves the
		 * QP to RTS, a program's own ibv_modify_qp must not (an
		 * unconnected QP refuses RTS, as siw's does; rping -q asks
		 * before rdma_accept). wisp adds the read depths the
		 * connection was set up with, never the state. */
		pthread_mutex_lock(&wcm.lock);
		if (qp_attr->qp_state == IBV_QPS_RTR) {
			qp_attr->max_dest_rd_atomic = (uint8_t)w->ird;
			*qp_attr_mask = IBV_QP_MAX_DEST_RD_ATOMIC;
		} else {
			qp_attr->max_rd_atomic = (uint8_t)w->ord;
			*qp_attr_mask = IBV_QP_MAX_QP_RD_ATOMIC;
		}
		pthread_mutex_unlock(&wcm.lock);
		return 0;
	default:
		return fail(-EINVAL);
	}
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs || id->srq)
		return fail(-EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	id->pd = attr->pd;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
		    struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs || id->srq)
		return fail(-EINVAL);
	if (!pd)
		pd = id->pd;
	srq = ibv_create_srq(pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	id->pd = pd;
	return 0;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
}
