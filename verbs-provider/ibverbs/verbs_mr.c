// SPDX-License-Identifier: MIT
/*
 * verbs_mr.c - memory registration: ibv_reg_mr and friends over the
 * STag table of rdmap/. An MR's lkey and rkey are the same STag, as
 * for every iWARP device (RFC 5040 names one STag per buffer).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmap_stag.h"
#include "verbs_internal.h"

struct wisp_mr {
	struct ibv_mr base;
	struct rdmap_mr m;
};

_Static_assert(RDMAP_ACC_LOCAL_WRITE == IBV_ACCESS_LOCAL_WRITE &&
	       RDMAP_ACC_REMOTE_WRITE == IBV_ACCESS_REMOTE_WRITE &&
	       RDMAP_ACC_REMOTE_READ == IBV_ACCESS_REMOTE_READ,
	       "RDMAP access bits are the verbs ones");

/* Flags we implement, and those rdma-core lets a provider ignore. */
#define ACCESS_SUPPORTED (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
			  IBV_ACCESS_REMOTE_READ)
#define ACCESS_IGNORED   (IBV_ACCESS_RELAXED_ORDERING | \
			  IBV_ACCESS_OPTIONAL_RANGE)

/* Is [addr, addr + len) mapped? A real device fails registration of
 * unmapped memory with EFAULT; so do we, rather than fault later on the
 * engine thread. */
static bool mapped(const void *addr, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page - 1);
	uintptr_t end = (uintptr_t)addr + len;

	if (end < (uintptr_t)addr)
		return false;
	return madvise((void *)start, end - start, MADV_NORMAL) == 0;
}

struct ibv_mr *wisp_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			   uint64_t iova, unsigned int access)
{
	struct rdmap_stag_table *t;
	struct wisp_mr *mr;
	int ret;

	if (!pd || length == 0 ||
	    (access & ~(ACCESS_SUPPORTED | ACCESS_IGNORED))) {
		errno = EINVAL;
		return NULL;
	}
	/* IB spec 10.6.3.1 (and every provider): remote write without
	 * local write is invalid. */
	if ((access & IBV_ACCESS_REMOTE_WRITE) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	if (!mapped(addr, length)) {
		errno = EFAULT;
		return NULL;
	}
	t = wisp_context_stags(to_wctx(pd->context));
	if (!t)
		return NULL;
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->m.addr = addr;
	mr->m.iova = iova;
	mr->m.length = length;
	mr->m.access = access & ACCESS_SUPPORTED;
	mr->m.pd = pd;
	ret = rdmap_stag_insert(t, &mr->m);
	if (ret) {
		free(mr);
		errno = -ret == ENOSPC ? ENOMEM : -ret;
		return NULL;
	}
	mr->base.context = pd->context;
	mr->base.pd = pd;
	mr->base.addr = addr;
	mr->base.length = length;
	mr->base.handle = mr->m.stag;
	mr->base.lkey = mr->m.stag;
	mr->base.rkey = mr->m.stag;
	wisp_pd_get(pd);
	return &mr->base;
}

int wisp_dereg_mr(struct ibv_mr *ibmr)
{
	struct rdmap_stag_table *t;
	struct wisp_mr *mr;

	if (!ibmr)
		return EINVAL;
	mr = container_of(ibmr, struct wisp_mr, base);
	t = to_wctx(ibmr->context)->stags;
	/* No new reference from now on. The ones held are never left to a
	 * peer: the QPs drop them (a placement in flight is diverted, a
	 * send that may read the MR is aborted) and remove() sleeps only
	 * until the engine has done so. */
	if (rdmap_stag_unpublish(t, &mr->m))
		wisp_qps_revoke_mr(ibmr->context, &mr->m);
	rdmap_stag_remove(t, &mr->m);
	wisp_pd_put(ibmr->pd);
	free(mr);
	return 0;
}

int wisp_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
		  void *addr, size_t length, int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)length;
	(void)access;
	return EOPNOTSUPP;
}
