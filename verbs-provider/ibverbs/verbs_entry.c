/* SPDX-License-Identifier: MIT */
/*
 * verbs_entry.c - the exported MR, CQ, SRQ and QP verbs.
 *
 * Thin: each calls its wisp_* implementation (verbs_mr.c, verbs_cq.c,
 * verbs_qp.c), which sets up the whole object, since the inline verbs of
 * verbs.h (ibv_create_cq_ex, ibv_create_qp_ex, ibv_create_srq_ex, the
 * post and poll calls) reach those implementations without passing here.
 * What rdma-core 44's own wrappers add on the way is kept: the optional
 * access flags, the checks of ibv_rereg_mr, the fields they fill in.
 */
#include "verbs_abi.h"
#include "wisp_verbs.h"

#include <errno.h>

/* verbs.h turns these into inline dispatchers; define the real ones. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* ---- memory regions ---------------------------------------------------- */

/*
 * The one MR constructor. rdma-core drops the optional access flags
 * (IBV_ACCESS_OPTIONAL_RANGE: relaxed ordering and the like) that the
 * provider cannot honour, since they are hints that must never make
 * registration fail; wisp honours none.
 */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	struct ibv_mr *mr;

	mr = wisp_reg_mr(pd, addr, length, iova,
			 access & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE);
	if (!mr)
		return NULL;
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	return mr;
}

struct ibv_mr *wisp_reg_mr_1_1(struct ibv_pd *pd, void *addr, size_t length,
			       int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr,
				(unsigned int)access);
}
WISP_SYMVER(wisp_reg_mr_1_1, "ibv_reg_mr@@IBVERBS_1.1");

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

/*
 * The checks are rdma-core's, and so are the results: 0, or one of the
 * negative IBV_REREG_MR_ERR_* codes with errno set.
 */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
		 size_t length, int access)
{
	int err;

	if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	err = wisp_rereg_mr(mr, flags, pd, addr, length, access);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = length;
	}
	return 0;
}

int wisp_dereg_mr_1_1(struct ibv_mr *mr)
{
	return wisp_dereg_mr(mr);
}
WISP_SYMVER(wisp_dereg_mr_1_1, "ibv_dereg_mr@@IBVERBS_1.1");

/* ---- completion channels and CQs --------------------------------------- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	return wisp_create_comp_channel(context);
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	return wisp_destroy_comp_channel(channel);
}

struct ibv_cq *wisp_create_cq_1_1(struct ibv_context *context, int cqe,
				  void *cq_context,
				  struct ibv_comp_channel *channel,
				  int comp_vector)
{
	return wisp_create_cq(context, cqe, cq_context, channel, comp_vector);
}
WISP_SYMVER(wisp_create_cq_1_1, "ibv_create_cq@@IBVERBS_1.1");

int wisp_resize_cq_1_1(struct ibv_cq *cq, int cqe)
{
	return wisp_resize_cq(cq, cqe);
}
WISP_SYMVER(wisp_resize_cq_1_1, "ibv_resize_cq@@IBVERBS_1.1");

int wisp_destroy_cq_1_1(struct ibv_cq *cq)
{
	return wisp_destroy_cq(cq);
}
WISP_SYMVER(wisp_destroy_cq_1_1, "ibv_destroy_cq@@IBVERBS_1.1");

int wisp_get_cq_event_1_1(struct ibv_comp_channel *channel,
			  struct ibv_cq **cq, void **cq_context)
{
	return wisp_get_cq_event(channel, cq, cq_context);
}
WISP_SYMVER(wisp_get_cq_event_1_1, "ibv_get_cq_event@@IBVERBS_1.1");

void wisp_ack_cq_events_1_1(struct ibv_cq *cq, unsigned int nevents)
{
	wisp_ack_cq_events(cq, nevents);
}
WISP_SYMVER(wisp_ack_cq_events_1_1, "ibv_ack_cq_events@@IBVERBS_1.1");

/* ---- shared receive queues --------------------------------------------- */

struct ibv_srq *wisp_create_srq_1_1(struct ibv_pd *pd,
				    struct ibv_srq_init_attr *srq_init_attr)
{
	struct ibv_srq *srq = wisp_create_srq(pd, srq_init_attr);

	if (!srq)
		return NULL;
	srq->context = pd->context;
	srq->srq_context = srq_init_attr->srq_context;
	srq->pd = pd;
	return srq;
}
WISP_SYMVER(wisp_create_srq_1_1, "ibv_create_srq@@IBVERBS_1.1");

int wisp_modify_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
			int srq_attr_mask)
{
	return wisp_modify_srq(srq, srq_attr, srq_attr_mask);
}
WISP_SYMVER(wisp_modify_srq_1_1, "ibv_modify_srq@@IBVERBS_1.1");

int wisp_query_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	return wisp_query_srq(srq, srq_attr);
}
WISP_SYMVER(wisp_query_srq_1_1, "ibv_query_srq@@IBVERBS_1.1");

int wisp_destroy_srq_1_1(struct ibv_srq *srq)
{
	return wisp_destroy_srq(srq);
}
WISP_SYMVER(wisp_destroy_srq_1_1, "ibv_destroy_srq@@IBVERBS_1.1");

/* ---- queue pairs ------------------------------------------------------- */

struct ibv_qp *wisp_create_qp_1_1(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *qp_init_attr)
{
	return wisp_create_qp(pd, qp_init_attr);
}
WISP_SYMVER(wisp_create_qp_1_1, "ibv_create_qp@@IBVERBS_1.1");

/*
 * rdma-core keeps qp->state in step with what was queried or set. Here
 * the core itself keeps qp->state, atomically (wisp_qp_set_state), and
 * the engine thread moves it to ERROR when the stream ends: writing it
 * again from here would race with that, and could put back a state the
 * engine had just left (RTS over ERROR), or the INIT an application asks
 * for while the connection manager keeps the QP in RTS (rping -q).
 */
int wisp_query_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	return wisp_query_qp(qp, attr, attr_mask, init_attr);
}
WISP_SYMVER(wisp_query_qp_1_1, "ibv_query_qp@@IBVERBS_1.1");

int wisp_modify_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		       int attr_mask)
{
	return wisp_modify_qp(qp, attr, attr_mask);
}
WISP_SYMVER(wisp_modify_qp_1_1, "ibv_modify_qp@@IBVERBS_1.1");

int wisp_destroy_qp_1_1(struct ibv_qp *qp)
{
	return wisp_destroy_qp(qp);
}
WISP_SYMVER(wisp_destroy_qp_1_1, "ibv_destroy_qp@@IBVERBS_1.1");

/* The new-style post API of a QP created with send_ops_flags, if the data
 * path provides one (see wisp_verbs.h). */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (wisp_qp_to_qp_ex)
		return wisp_qp_to_qp_ex(qp);
	errno = EOPNOTSUPP;
	return NULL;
}

/*
 * 0: no promise that a message's data is visible in order before its
 * completion, the answer of rdma-core's default op, and the honest one
 * while the engine may place segments from another thread.
 */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
			       uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}
