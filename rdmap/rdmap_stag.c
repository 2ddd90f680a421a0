// SPDX-License-Identifier: MIT
/*
 * rdmap_stag.c - the STag table (see rdmap_stag.h).
 */
#include "rdmap_stag.h"

#include "ddp.h"

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
		free(atomic_load_explicit(&t->chunk[i], memory_order_relaxed));
	free(t->free_idx);
	pthread_mutex_destroy(&t->lock);
}

/* The slot of index, or NULL if its chunk was never allocated. Chunks
 * are published with release and freed only by table_fini. */
static struct rdmap_stag_slot *slot(struct rdmap_stag_table *t,
				    uint32_t index)
{
	struct rdmap_stag_slot *c =
		atomic_load_explicit(&t->chunk[index >> CHUNK_SHIFT],
				     memory_order_acquire);

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
	struct rdmap_stag_slot *s;
	uint32_t index;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (t->nfree) {
		index = t->free_idx[--t->nfree];
	} else if (t->next_index <= t->max_index) {
		index = t->next_index;
		if (!slot(t, index)) {
			struct rdmap_stag_slot *c =
				calloc(CHUNK_SIZE, sizeof(*c));

			if (!c) {
				ret = -ENOMEM;
				goto out;
			}
			atomic_store_explicit(&t->chunk[index >> CHUNK_SHIFT],
					      c, memory_order_release);
		}
		t->next_index++;
	} else {
		ret = -ENOSPC;
		goto out;
	}
	s = slot(t, index);
	mr->stag = index << RDMAP_STAG_KEY_BITS |
		   (t->fixed_key ? t->fixed_key : random_key());
	mr->slot = s;
	atomic_init(&mr->valid, true);
	/* The MR is complete before the word that lets lookups in. */
	atomic_store_explicit(&s->mr, mr, memory_order_relaxed);
	atomic_store_explicit(&s->word,
			      (uint64_t)mr->stag << 32 | RDMAP_SLOT_LIVE,
			      memory_order_release);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void rdmap_stag_remove(struct rdmap_stag_table *t, struct rdmap_mr *mr)
{
	uint32_t index = mr->stag >> RDMAP_STAG_KEY_BITS;
	struct rdmap_stag_slot *s = mr->slot;
	uint32_t *fi;

	atomic_store(&mr->valid, false);
	/* Unpublish: with LIVE clear no lookup can take a new reference
	 * (its compare-and-swap expects LIVE); the ones already taken stay
	 * counted in the word. */
	atomic_fetch_and_explicit(&s->word, ~RDMAP_SLOT_LIVE,
				  memory_order_acq_rel);
	/* Wait for them: each put is a release, so every placement into the
	 * MR happens before this loop ends. */
	while (atomic_load_explicit(&s->word, memory_order_acquire) &
	       RDMAP_SLOT_REFS)
		sched_yield();
	atomic_store_explicit(&s->mr, NULL, memory_order_relaxed);

	pthread_mutex_lock(&t->lock);
	atomic_store_explicit(&s->word, 0, memory_order_relaxed);
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
	struct rdmap_stag_slot *s;
	uint64_t w;

	if (index == 0 || index > t->max_index)
		return NULL;
	s = slot(t, index);
	if (!s)
		return NULL;
	/* Reference-while-live: the slot outlives any MR, so reading and
	 * CASing its word is always safe; the CAS succeeds only if the slot
	 * still publishes this very STag, and once it has, remove() waits
	 * for us before the MR can be freed. */
	w = atomic_load_explicit(&s->word, memory_order_acquire);
	do {
		if ((uint32_t)(w >> 32) != stag || !(w & RDMAP_SLOT_LIVE) ||
		    (w & RDMAP_SLOT_REFS) == RDMAP_SLOT_REFS)
			return NULL;
	} while (!atomic_compare_exchange_weak_explicit(&s->word, &w, w + 1,
							memory_order_acquire,
							memory_order_acquire));
	return atomic_load_explicit(&s->mr, memory_order_relaxed);
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
	/* The same range check DDP applies to tagged placement. */
	switch (ddp_tagged_range(mr->iova, mr->length, to, len)) {
	case DDP_ERR_NONE:
		return RDMAP_MR_OK;
	case DDP_ERR_T_TO_WRAP:
		return RDMAP_MR_WRAP;
	default:
		return RDMAP_MR_BOUNDS;
	}
}
