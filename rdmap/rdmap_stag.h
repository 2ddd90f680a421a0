/* SPDX-License-Identifier: MIT */
/*
 * rdmap_stag.h - the STag table: which memory a remote peer (or a local
 * work request) may name, and how.
 *
 * An STag is 32 bits on the wire, written here as a 24-bit index and an
 * 8-bit key, the split of the RDMA verbs, where the key is the part a
 * consumer may own (memory windows). wisp has no memory windows, so no
 * consumer owns a key: every bit an STag can carry is drawn at random,
 * which is what makes an STag hard to guess (see the security
 * considerations of RFC 5040 and RFC 5042):
 *
 *  - The table has 2^k slots, a power of two at least twice the number
 *    of MRs it may hold (k = 21 for the 2^20 MRs of an ibv_context, at
 *    most 24). The low k bits of the index pick the slot, and the slot is
 *    drawn at random (getrandom) among the free ones; the upper 24 - k
 *    index bits and the 8 key bits are drawn at random too and must match
 *    on lookup. So every STag a registration can get is about equally
 *    likely: a blind guess hits one of N live MRs with a probability of
 *    about N / 2^32, and seeing an old STag of a buffer says nothing of
 *    the STag it gets when registered again.
 *  - A freed slot is quarantined: it returns to use only after the next
 *    min(2^k / 4, 4096) deregistrations (FIFO), so a stale STag never
 *    lands on a fresh MR soon, even by chance.
 *  - Slot 0 is never used, so STag 0 never names memory.
 *
 * A table with fixed_key set (tests and fuzzing only) hands out the
 * lowest free slot with the upper index bits zero and that key, so that
 * seeds can name STags (index 1, 2, ... as long as nothing was freed).
 *
 * Concurrency: registration and deregistration run on application
 * threads, lookups on engine threads. Lookups are lock-free and safe by
 * construction against a concurrent deregistration that frees the MR:
 *
 *  - The table's slots are type-stable: a slot's memory lives as long as
 *    the table, whatever happens to the MR it names.
 *  - A slot holds one 64-bit word: the STag it is published under, a
 *    LIVE bit and the count of references taken on the MR.
 *  - A lookup reads only the slot, then takes a reference with one
 *    compare-and-swap that succeeds only while the word still carries the
 *    same STag with LIVE set. Only then does it read the MR pointer and
 *    touch the MR; it never dereferences an MR it holds no reference on.
 *  - rdmap_stag_unpublish() clears LIVE (no new reference can be taken
 *    from then on); rdmap_stag_remove() then sleeps on a condition
 *    variable until the count drops to zero (the put that drops the last
 *    reference of an unpublished MR wakes it) and only then releases the
 *    slot; the caller may free the MR as soon as it returns.
 *  - Nothing here makes the holders hurry: a reference must never be
 *    held for as long as a peer decides (a stalled FPDU, a send stuck in
 *    a closed window). The owner of the references (the verbs layer)
 *    revokes them between unpublish and remove: rdmap_qp_revoke() drops
 *    what a QP holds on the receive side and says when a send must be
 *    aborted first (docs/architecture.md, "Teardown and memory
 *    lifetime").
 *
 * So memory is never placed into after ibv_dereg_mr() returns, and a
 * lookup never reads freed memory.
 */
#ifndef WISP_RDMAP_STAG_H
#define WISP_RDMAP_STAG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Access rights; the same values as IBV_ACCESS_* (verbs-provider checks). */
#define RDMAP_ACC_LOCAL_WRITE   0x1
#define RDMAP_ACC_REMOTE_WRITE  0x2
#define RDMAP_ACC_REMOTE_READ   0x4

#define RDMAP_STAG_INDEX_BITS   24
#define RDMAP_STAG_KEY_BITS     8

/*
 * One table slot (see the header comment). word = STag << 32 |
 * RDMAP_SLOT_LIVE | references: 0 when the slot is free, the STag alone
 * while it is quarantined.
 */
#define RDMAP_SLOT_LIVE         0x80000000ull
#define RDMAP_SLOT_REFS         0x7fffffffull
struct rdmap_stag_slot {
	_Atomic uint64_t word;
	struct rdmap_mr *_Atomic mr;
};

struct rdmap_mr {
	uint32_t stag;            /* set by rdmap_stag_insert() */
	uint8_t *addr;            /* host address of the first octet */
	uint64_t iova;            /* the address (TO) peers use for it */
	uint64_t length;
	uint32_t access;          /* RDMAP_ACC_* */
	const void *pd;           /* protection domain identity */
	bool remote_inv;          /* a peer's Send with Invalidate may
				   * invalidate it: type 2 memory windows
				   * and fast-registered MRs only, never an
				   * ibv_reg_mr MR (rdmap_stag.c) */
	atomic_bool valid;        /* cleared by invalidation */
	struct rdmap_stag_slot *slot; /* where its references are counted */
	struct rdmap_stag_table *table; /* whom the last put wakes */
};

struct rdmap_stag_table {
	pthread_mutex_t lock;     /* registration side only */
	pthread_cond_t unref;     /* an unpublished MR lost its last ref */
	_Atomic(struct rdmap_stag_slot *) *chunk; /* 2^slot_bits slots */
	uint32_t slot_bits;       /* k: slot = index mod 2^k */
	uint32_t nlive, max_live;
	uint32_t *quar;           /* FIFO of freed slots, quar_cap long */
	uint32_t quar_cap, quar_len, quar_head;
	uint8_t fixed_key;        /* tests and fuzzing only: not 0 = use it */
};

/* Room for max_entries MRs (0 or more than 2^24 - 1 mean 2^24 - 1).
 * Returns 0, -ENOMEM, or a pthread error as -errno. */
int rdmap_stag_table_init(struct rdmap_stag_table *t, uint32_t max_entries);
/* Frees the table; no MR may be registered in it any more. */
void rdmap_stag_table_fini(struct rdmap_stag_table *t);

/* Give mr a fresh random STag and publish it, valid. Returns 0, -ENOMEM
 * or -ENOSPC (max_entries MRs are registered). Takes the table lock and
 * a getrandom() call or a few. */
int rdmap_stag_insert(struct rdmap_stag_table *t, struct rdmap_mr *mr);

/* Stop new references to mr (it is invalid and its STag names nothing
 * from now on). Returns true if references taken before are still held.
 * Idempotent. */
bool rdmap_stag_unpublish(struct rdmap_stag_table *t, struct rdmap_mr *mr);

/* Unpublish mr and sleep (never spin) until every reference taken on it
 * has been put; the caller may free mr once this returns. How long that
 * is depends only on the holders: see rdmap_stag_unpublish(). */
void rdmap_stag_remove(struct rdmap_stag_table *t, struct rdmap_mr *mr);

/* Sleep (never spin) until every reference taken on the unpublished mr
 * has been put, or timeout_ms passed. Returns true if none is held. For
 * holders that let go soon without being asked (a zero-copy send waiting
 * for the peer's acknowledgement), before revoking what is left. */
bool rdmap_stag_wait_unref(struct rdmap_stag_table *t,
			   const struct rdmap_mr *mr, int timeout_ms);

/* The put that drops the last reference of an unpublished MR: wake
 * rdmap_stag_remove(). Called by rdmap_mr_put() only. */
void rdmap_stag_unref_wake(struct rdmap_stag_table *t);

/* The MR named by stag with a reference taken, or NULL if no live MR has
 * exactly that STag. Valid or not: the caller checks. O(1), lock-free;
 * safe against a concurrent rdmap_stag_remove(). */
struct rdmap_mr *rdmap_stag_get(struct rdmap_stag_table *t, uint32_t stag);

/* A peer's Send with Invalidate names stag on a QP of PD pd: if the rule
 * allows (the exact STag, of pd, remote_inv set), mark it invalid and
 * return true; else change nothing and return false. */
bool rdmap_stag_remote_invalidate(struct rdmap_stag_table *t, uint32_t stag,
				  const void *pd);

/* Drop a reference taken by rdmap_stag_get(); NULL is ignored. */
static inline void rdmap_mr_put(struct rdmap_mr *mr)
{
	struct rdmap_stag_table *t;
	uint64_t old;

	if (!mr)
		return;
	/* Read before the put: once the count is 0, mr may be freed. */
	t = mr->table;
	old = atomic_fetch_sub_explicit(&mr->slot->word, 1,
					memory_order_release);
	if (!(old & RDMAP_SLOT_LIVE) && (old & RDMAP_SLOT_REFS) == 1)
		rdmap_stag_unref_wake(t);
}

/* Check access to [to, to + len) of mr for pd with rights acc. Returns
 * 0, or which check failed: 1 invalid (invalidated), 2 wrong PD, 3 rights,
 * 4 TO wrap, 5 out of bounds. Zero-length ranges need only 1..3. The
 * range part (4, 5) is ddp_tagged_range(), the check DDP applies to
 * tagged placement, so local SGEs, Read Request sources and placement
 * agree on every edge. */
enum rdmap_mr_check {
	RDMAP_MR_OK = 0,
	RDMAP_MR_INVALID,
	RDMAP_MR_WRONG_PD,
	RDMAP_MR_RIGHTS,
	RDMAP_MR_WRAP,
	RDMAP_MR_BOUNDS,
};
enum rdmap_mr_check rdmap_mr_check(const struct rdmap_mr *mr, const void *pd,
				   uint32_t acc, uint64_t to, uint64_t len);

/* Host address of TO to inside mr (after a successful check). */
static inline uint8_t *rdmap_mr_ptr(const struct rdmap_mr *mr, uint64_t to)
{
	return mr->addr + (to - mr->iova);
}

#endif /* WISP_RDMAP_STAG_H */
