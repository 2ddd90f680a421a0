// SPDX-License-Identifier: MIT
/*
 * rdmap_stag.c - the STag table (see rdmap_stag.h).
 */
#include "rdmap_stag.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define CHUNK_SHIFT 12
#define CHUNK_SIZE  (1u << CHUNK_SHIFT)
#define CHUNK_MASK  (CHUNK_SIZE - 1)

int rdmap_stag_table_init(struct rdmap_stag_table *t, uint32_t max_entries)
{
	memset(t, 0, sizeof(*t));
	if (max_entries == 0 || max_entries >= (1u << RDMAP_STAG_INDEX_BITS))
		max_entries = (1u << RDMAP_STAG_INDEX_BITS) - 1;
	t->max_index = max_entries;
	t->next_index = 1;        /* index 0 is never handed out */
	return -pthread_mutex_init(&t->lock, NULL);
}

void rdmap_stag_table_fini(struct rdmap_stag_table *t)
{
	for (size_t i = 0; i < sizeof(t->chunk) / sizeof(t->chunk[0]); i++)
		free((void *)t->chunk[i]);
	free(t->free_idx);
	pthread_mutex_destroy(&t->lock);
}

static _Atomic(struct rdmap_mr *) *slot(struct rdmap_stag_table *t,
					uint32_t index)
{
	_Atomic(struct rdmap_mr *) *c = t->chunk[index >> CHUNK_SHIFT];

	return c ? &c[index & CHUNK_MASK] : NULL;
}

/* Never 0: with key 0 excluded nothing changes for security (256 keys
 * become 255) but a zero STag then always means "none". */
static uint8_t random_key(void)
{
	uint8_t k = 0;

	while (k == 0) {
		if (getrandom(&k, 1, 0) != 1)
			k = (uint8_t)(rand() | 1);
	}
	return k;
}

int rdmap_stag_insert(struct rdmap_stag_table *t, struct rdmap_mr *mr)
{
	uint32_t index;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (t->nfree) {
		index = t->free_idx[--t->nfree];
	} else if (t->next_index <= t->max_index) {
		index = t->next_index;
		if (!t->chunk[index >> CHUNK_SHIFT]) {
			t->chunk[index >> CHUNK_SHIFT] =
				calloc(CHUNK_SIZE, sizeof(*t->chunk[0]));
			if (!t->chunk[index >> CHUNK_SHIFT]) {
				ret = -ENOMEM;
				goto out;
			}
		}
		t->next_index++;
	} else {
		ret = -ENOSPC;
		goto out;
	}
	mr->stag = index << RDMAP_STAG_KEY_BITS |
		   (t->fixed_key ? t->fixed_key : random_key());
	atomic_init(&mr->refs, 0);
	atomic_init(&mr->valid, true);
	atomic_store_explicit(slot(t, index), mr, memory_order_release);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void rdmap_stag_remove(struct rdmap_stag_table *t, struct rdmap_mr *mr)
{
	uint32_t index = mr->stag >> RDMAP_STAG_KEY_BITS;
	uint32_t *fi;

	atomic_store(&mr->valid, false);
	atomic_store(slot(t, index), NULL);
	/* A lookup that raced with us has either seen NULL or holds a
	 * reference that it drops once its placement is over. */
	while (atomic_load_explicit(&mr->refs, memory_order_acquire) > 0)
		sched_yield();

	pthread_mutex_lock(&t->lock);
	if (t->nfree == t->free_cap) {
		uint32_t cap = t->free_cap ? t->free_cap * 2 : 64;

		fi = realloc(t->free_idx, cap * sizeof(*fi));
		if (!fi)
			goto out;         /* the index is lost, nothing worse */
		t->free_idx = fi;
		t->free_cap = cap;
	}
	t->free_idx[t->nfree++] = index;
out:
	pthread_mutex_unlock(&t->lock);
}

struct rdmap_mr *rdmap_stag_get(struct rdmap_stag_table *t, uint32_t stag)
{
	uint32_t index = stag >> RDMAP_STAG_KEY_BITS;
	_Atomic(struct rdmap_mr *) *s;
	struct rdmap_mr *mr;

	if (index == 0 || index > t->max_index)
		return NULL;
	s = slot(t, index);
	if (!s)
		return NULL;
	mr = atomic_load_explicit(s, memory_order_acquire);
	if (!mr)
		return NULL;
	atomic_fetch_add_explicit(&mr->refs, 1, memory_order_acq_rel);
	/* Re-check after taking the reference: remove() unpublishes first
	 * and only then waits for references, so either we see NULL here
	 * or remove() waits for us. */
	if (atomic_load_explicit(s, memory_order_acquire) != mr ||
	    mr->stag != stag) {
		rdmap_mr_put(mr);
		return NULL;
	}
	return mr;
}

/*
 * Remote invalidation (Send with Invalidate, RFC 5040 5.4). RDMAP leaves
 * to the verbs what a peer may invalidate, and the verbs rule is narrow:
 * rdma-core's ibv_alloc_mw(3) names IBV_WR_SEND_WITH_INV among what ends
 * a type 2 memory window's binding, and the kernel's soft RoCE
 * (rxe_invalidate_mr) invalidates an MR only if it is a fast-register
 * one (IB_MR_TYPE_MEM_REG), its key matches exactly and no window is
 * bound to it; an MR made by ibv_reg_mr can never be invalidated. (Linux
 * siw is looser: any MR of the QP's PD.) wisp follows the verbs rule:
 * the STag must name, key included, memory of the QP's PD whose kind
 * allows it (rdmap_mr.remote_inv). wisp has neither memory windows nor
 * fast registration yet, so today every Send with Invalidate is refused
 * with "STag cannot be invalidated". An STag already invalid may be
 * invalidated again.
 */
bool rdmap_stag_remote_invalidate(struct rdmap_stag_table *t, uint32_t stag,
				  const void *pd)
{
	struct rdmap_mr *mr = rdmap_stag_get(t, stag);
	bool ok = mr && mr->pd == pd && mr->remote_inv;

	if (ok)
		atomic_store(&mr->valid, false);
	rdmap_mr_put(mr);
	return ok;
}

enum rdmap_mr_check rdmap_mr_check(const struct rdmap_mr *mr, const void *pd,
				   uint32_t acc, uint64_t to, uint64_t len)
{
	if (!atomic_load_explicit(&mr->valid, memory_order_acquire))
		return RDMAP_MR_INVALID;
	if (mr->pd != pd)
		return RDMAP_MR_WRONG_PD;
	if ((mr->access & acc) != acc)
		return RDMAP_MR_RIGHTS;
	if (len == 0)
		return RDMAP_MR_OK;
	if (to + len < to)
		return RDMAP_MR_WRAP;
	if (to < mr->iova || to + len > mr->iova + mr->length)
		return RDMAP_MR_BOUNDS;
	return RDMAP_MR_OK;
}
