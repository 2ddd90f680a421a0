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

/*
 * The access rights an iWARP STag carries (RFC 5040 section 6: local
 * write, remote write, remote read); the MR keeps only these, as siw does
 * with whatever it is given.
 */
#define ACCESS_IWARP (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		      IBV_ACCESS_REMOTE_READ)
/*
 * Flags Linux's uverbs passes down to every provider and that siw accepts
 * and drops: remote atomic access (an MR may ask for it on a device whose
 * atomic_cap is NONE; no atomic can then arrive, so nothing needs the
 * right), MW binding, zero-based and huge-page hints, and the optional
 * range (relaxed ordering and later hints a device may ignore).
 */
#define ACCESS_ACCEPTED (IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | \
			 IBV_ACCESS_ZERO_BASED | IBV_ACCESS_HUGETLB | \
			 IBV_ACCESS_OPTIONAL_RANGE)
/* Defined by verbs, known to uverbs, but a capability wisp0 does not
 * report: on-demand paging, and the two RDMA FLUSH placement types
 * (bits 8 and 9, IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT in newer headers). */
#define ACCESS_UNSUPPORTED (IBV_ACCESS_ON_DEMAND | (1u << 8) | (1u << 9))

/* The errno uverbs and the provider give for access, or 0. */
static int access_check(unsigned int access)
{
	if (access & ~(ACCESS_IWARP | ACCESS_ACCEPTED | ACCESS_UNSUPPORTED))
		return EINVAL;
	/* IB spec 10.6.3.1, checked by uverbs for every provider: remote
	 * write or remote atomic access needs local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	if (access & ACCESS_UNSUPPORTED)
		return EOPNOTSUPP;
	return 0;
}

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

	if (!pd || length == 0) {
		errno = EINVAL;
		return NULL;
	}
	ret = access_check(access);
	if (ret) {
		errno = ret;
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
	mr->m.access = access & ACCESS_IWARP;
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
	int grace;

	if (!ibmr)
		return EINVAL;
	mr = container_of(ibmr, struct wisp_mr, base);
	t = to_wctx(ibmr->context)->stags;
	/* No new reference from now on. The ones held are never left to a
	 * peer: the QPs drop them (a placement in flight is diverted, a
	 * send that may read the MR is aborted) and remove() sleeps only
	 * until the engine has done so. With zero-copy sends, a send the
	 * kernel has taken holds the MR until the peer acknowledges it,
	 * which is usually soon: wait a little (WISP_ZC_DEREG_GRACE_MS)
	 * for whatever references there are before revoking the rest. */
	grace = wisp_context_zc_grace_ms(to_wctx(ibmr->context));
	if (rdmap_stag_unpublish(t, &mr->m) &&
	    !(grace && rdmap_stag_wait_unref(t, &mr->m, grace)))
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
