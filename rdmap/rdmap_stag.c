// SPDX-License-Identifier: MIT
/*
 * rdmap_stag.c - the STag table (see rdmap_stag.h for the layout of an
 * STag, the random placement and the lookup/deregistration scheme).
 */
#include "rdmap_stag.h"

#include "ddp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* 64 slots (1 KiB) per chunk: random placement touches one per MR. */
#define CHUNK_SHIFT 6
#define CHUNK_SIZE  (1u << CHUNK_SHIFT)
#define CHUNK_MASK  (CHUNK_SIZE - 1)

#define SLOT_BITS_MIN  CHUNK_SHIFT
#define QUARANTINE_MAX 4096u
/* Random draws before a free slot is searched for linearly. */
#define DRAWS_MAX      64

static uint32_t nslots(const struct rdmap_stag_table *t)
{
	return 1u << t->slot_bits;
}

int rdmap_stag_table_init(struct rdmap_stag_table *t, uint32_t max_entries)
{
	uint32_t bits = SLOT_BITS_MIN;
	int ret;

	memset(t, 0, sizeof(*t));
	if (max_entries == 0 || max_entries >= (1u << RDMAP_STAG_INDEX_BITS))
		max_entries = (1u << RDMAP_STAG_INDEX_BITS) - 1;
	/* At least twice the MRs: a random draw finds a free slot with
	 * probability 1/4 or better even with the quarantine full. */
	while (bits < RDMAP_STAG_INDEX_BITS &&
	       (1ull << bits) < 2ull * max_entries)
		bits++;
	t->slot_bits = bits;
	t->max_live = max_entries;
	t->quar_cap = nslots(t) / 4 < QUARANTINE_MAX ? nslots(t) / 4
						     : QUARANTINE_MAX;
	t->chunk = calloc(nslots(t) >> CHUNK_SHIFT, sizeof(*t->chunk));
	t->quar = calloc(t->quar_cap, sizeof(*t->quar));
	if (!t->chunk || !t->quar) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = -pthread_mutex_init(&t->lock, NULL);
	if (ret)
		goto err_free;
	ret = -pthread_cond_init(&t->unref, NULL);
	if (ret) {
		pthread_mutex_destroy(&t->lock);
		goto err_free;
	}
	return 0;

err_free:
	free(t->quar);
	free((void *)t->chunk);
	t->chunk = NULL;
	t->quar = NULL;
	return ret;
}

void rdmap_stag_table_fini(struct rdmap_stag_table *t)
{
	if (!t->chunk)
		return;
	for (uint32_t i = 0; i < nslots(t) >> CHUNK_SHIFT; i++)
		free(atomic_load_explicit(&t->chunk[i], memory_order_relaxed));
	free((void *)t->chunk);
	free(t->quar);
	t->chunk = NULL;
	pthread_cond_destroy(&t->unref);
	pthread_mutex_destroy(&t->lock);
}

/* The slot numbered n (< 2^k), or NULL if its chunk was never allocated.
 * Chunks are published with release and freed only by table_fini. */
static struct rdmap_stag_slot *slot_at(struct rdmap_stag_table *t, uint32_t n)
{
	struct rdmap_stag_slot *c =
		atomic_load_explicit(&t->chunk[n >> CHUNK_SHIFT],
				     memory_order_acquire);

	return c ? &c[n & CHUNK_MASK] : NULL;
}

/*
 * 32 random bits from the kernel's CSPRNG. Without getrandom (a kernel
 * older than 3.17, or a seccomp filter) a clock-seeded xorshift keeps
 * STags unique-looking but guessable; there is no better source then.
 */
static uint32_t random_u32(void)
{
	static _Atomic uint64_t weak;
	struct timespec ts;
	uint32_t v;
	uint64_t x;

	if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v))
		return v;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	x = atomic_load(&weak) ^ (uint64_t)ts.tv_nsec << 20 ^
	    (uint64_t)ts.tv_sec ^ 0x9e3779b97f4a7c15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	atomic_store(&weak, x);
	return (uint32_t)(x >> 16);
}

/* Free: neither live, nor referenced, nor quarantined. Under the lock. */
static bool slot_free(struct rdmap_stag_table *t, uint32_t n)
{
	struct rdmap_stag_slot *s = slot_at(t, n);

	return n != 0 &&
	       (!s || atomic_load_explicit(&s->word, memory_order_relaxed) == 0);
}

/*
 * A free slot number: the lowest one for a fixed_key table; else drawn
 * at random, with a linear search from a random start as a fallback that
 * practically never runs (at least a quarter of the slots are free).
 * 0 if none is free. Under the lock.
 */
static uint32_t pick_slot(struct rdmap_stag_table *t)
{
	uint32_t mask = nslots(t) - 1;
	uint32_t start = 1;

	if (!t->fixed_key) {
		for (int i = 0; i < DRAWS_MAX; i++) {
			uint32_t n = random_u32() & mask;

			if (slot_free(t, n))
				return n;
		}
		start = random_u32() & mask;
	}
	for (uint32_t i = 0; i <= mask; i++) {
		uint32_t n = (start + i) & mask;

		if (slot_free(t, n))
			return n;
	}
	return 0;
}

/* Allocate the chunk of slot n if needed. Under the lock. */
static struct rdmap_stag_slot *slot_make(struct rdmap_stag_table *t,
					 uint32_t n)
{
	struct rdmap_stag_slot *c;

	if (slot_at(t, n))
		return slot_at(t, n);
	c = calloc(CHUNK_SIZE, sizeof(*c));
	if (!c)
		return NULL;
	atomic_store_explicit(&t->chunk[n >> CHUNK_SHIFT], c,
			      memory_order_release);
	return &c[n & CHUNK_MASK];
}

int rdmap_stag_insert(struct rdmap_stag_table *t, struct rdmap_mr *mr)
{
	uint32_t index_mask = (1u << RDMAP_STAG_INDEX_BITS) - 1;
	struct rdmap_stag_slot *s;
	uint32_t n, index;
	uint8_t key;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (t->nlive >= t->max_live) {
		ret = -ENOSPC;
		goto out;
	}
	n = pick_slot(t);
	if (!n) {
		ret = -ENOSPC;
		goto out;
	}
	s = slot_make(t, n);
	if (!s) {
		ret = -ENOMEM;
		goto out;
	}
	if (t->fixed_key) {
		index = n;
		key = t->fixed_key;
	} else {
		uint32_t r = random_u32();

		/* The index bits above the slot and the whole key: random. */
		index = ((r >> RDMAP_STAG_KEY_BITS) & index_mask &
			 ~(nslots(t) - 1)) | n;
		key = (uint8_t)r;
	}
	mr->stag = index << RDMAP_STAG_KEY_BITS | key;
	mr->slot = s;
	mr->table = t;
	atomic_init(&mr->valid, true);
	/* The MR is complete before the word that lets lookups in. */
	atomic_store_explicit(&s->mr, mr, memory_order_relaxed);
	atomic_store_explicit(&s->word,
			      (uint64_t)mr->stag << 32 | RDMAP_SLOT_LIVE,
			      memory_order_release);
	t->nlive++;
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* Put slot n in quarantine, releasing the oldest one if it is full. The
 * slot's word still carries its STag (not LIVE), so it is not free.
 * Under the lock. */
static void quarantine(struct rdmap_stag_table *t, uint32_t n)
{
	uint32_t tail;

	if (t->quar_len == t->quar_cap) {
		uint32_t old = t->quar[t->quar_head];

		atomic_store_explicit(&slot_at(t, old)->word, 0,
				      memory_order_relaxed);
		t->quar_head = (t->quar_head + 1) % t->quar_cap;
		t->quar_len--;
	}
	tail = (t->quar_head + t->quar_len) % t->quar_cap;
	t->quar[tail] = n;
	t->quar_len++;
}

bool rdmap_stag_unpublish(struct rdmap_stag_table *t, struct rdmap_mr *mr)
{
	uint64_t w;

	(void)t;
	atomic_store(&mr->valid, false);
	/* With LIVE clear no lookup can take a new reference (its
	 * compare-and-swap expects LIVE); the ones already taken stay
	 * counted in the word. */
	w = atomic_fetch_and_explicit(&mr->slot->word, ~RDMAP_SLOT_LIVE,
				      memory_order_acq_rel);
	return (w & RDMAP_SLOT_REFS) != 0;
}

void rdmap_stag_unref_wake(struct rdmap_stag_table *t)
{
	/* Under the lock: remove() checks the count under it before it
	 * sleeps, so this wake-up cannot fall between its check and its
	 * sleep. */
	pthread_mutex_lock(&t->lock);
	pthread_cond_broadcast(&t->unref);
	pthread_mutex_unlock(&t->lock);
}

bool rdmap_stag_wait_unref(struct rdmap_stag_table *t,
			   const struct rdmap_mr *mr, int timeout_ms)
{
	struct rdmap_stag_slot *s = mr->slot;
	struct timespec end;
	bool held;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += timeout_ms / 1000;
	end.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&t->lock);
	/* As remove(): the count is checked under the lock that the last
	 * put broadcasts under. */
	while ((held = atomic_load_explicit(&s->word, memory_order_acquire) &
		       RDMAP_SLOT_REFS) &&
	       pthread_cond_clockwait(&t->unref, &t->lock, CLOCK_MONOTONIC,
				      &end) != ETIMEDOUT)
		;
	held = atomic_load_explicit(&s->word, memory_order_acquire) &
	       RDMAP_SLOT_REFS;
	pthread_mutex_unlock(&t->lock);
	return !held;
}

void rdmap_stag_remove(struct rdmap_stag_table *t, struct rdmap_mr *mr)
{
	struct rdmap_stag_slot *s = mr->slot;
	uint32_t n = (mr->stag >> RDMAP_STAG_KEY_BITS) & (nslots(t) - 1);

	rdmap_stag_unpublish(t, mr);
	pthread_mutex_lock(&t->lock);
	/* Each put is a release, so every placement into the MR happens
	 * before this loop ends; the last put of an unpublished MR
	 * broadcasts (rdmap_mr_put). */
	while (atomic_load_explicit(&s->word, memory_order_acquire) &
	       RDMAP_SLOT_REFS)
		pthread_cond_wait(&t->unref, &t->lock);
	atomic_store_explicit(&s->mr, NULL, memory_order_relaxed);
	quarantine(t, n);
	t->nlive--;
	pthread_mutex_unlock(&t->lock);
}

struct rdmap_mr *rdmap_stag_get(struct rdmap_stag_table *t, uint32_t stag)
{
	uint32_t n = (stag >> RDMAP_STAG_KEY_BITS) & (nslots(t) - 1);
	struct rdmap_stag_slot *s = slot_at(t, n);
	uint64_t w;

	if (!s)
		return NULL;
	/* Reference-while-live: the slot outlives any MR, so reading and
	 * CASing its word is always safe; the CAS succeeds only if the slot
	 * still publishes this very STag, and once it has, remove() waits
	 * for us before the MR can be freed. Slot 0's word stays 0, so STag
	 * 0 (or any STag of slot 0) never matches. */
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
