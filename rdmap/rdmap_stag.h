/* SPDX-License-Identifier: MIT */
/*
 * rdmap_stag.h - the STag table: which memory a remote peer (or a local
 * work request) may name, and how.
 *
 * An STag is a 24-bit index into the table and an 8-bit key (RFC 5040
 * section 2.1: "STag ... key" and section 8.2 on guessing): the key is
 * drawn at random at each registration, so a stale or guessed STag of a
 * reused index fails the lookup. Index 0 is never used, so STag 0 never
 * names memory.
 *
 * Concurrency: registration and deregistration run on application
 * threads, lookups on engine threads. Lookups are lock-free; a lookup
 * takes a reference that the caller drops with rdmap_mr_put(), and
 * rdmap_stag_remove() waits until no reference is left, so memory is
 * never placed into after ibv_dereg_mr() returns.
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

struct rdmap_mr {
	uint32_t stag;            /* index << 8 | key */
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
	atomic_int refs;          /* lookups not yet put back */
};

struct rdmap_stag_table {
	pthread_mutex_t lock;     /* registration side only */
	_Atomic(struct rdmap_mr *) *chunk[1u << 12];
	uint32_t next_index;      /* first never-used index */
	uint32_t *free_idx;       /* stack of reusable indexes */
	uint32_t nfree, free_cap;
	uint32_t max_index;
	uint8_t fixed_key;        /* tests and fuzzing only: not 0 = use it */
};

/* Returns 0 or -ENOMEM. max_entries is capped at 2^24 - 1. */
int rdmap_stag_table_init(struct rdmap_stag_table *t, uint32_t max_entries);
void rdmap_stag_table_fini(struct rdmap_stag_table *t);

/* Give mr an STag (random key) and publish it, valid. Returns 0, -ENOMEM
 * or -ENOSPC (table full). */
int rdmap_stag_insert(struct rdmap_stag_table *t, struct rdmap_mr *mr);

/* Unpublish mr and wait for every reference taken on it to be put. */
void rdmap_stag_remove(struct rdmap_stag_table *t, struct rdmap_mr *mr);

/* The MR named by stag with a reference taken, or NULL if the index is
 * unused or the key does not match. Valid or not: the caller checks. */
struct rdmap_mr *rdmap_stag_get(struct rdmap_stag_table *t, uint32_t stag);

/* A peer's Send with Invalidate names stag on a QP of PD pd: if the rule
 * allows (the exact STag, of pd, remote_inv set), mark it invalid and
 * return true; else change nothing and return false. */
bool rdmap_stag_remote_invalidate(struct rdmap_stag_table *t, uint32_t stag,
				  const void *pd);

static inline void rdmap_mr_put(struct rdmap_mr *mr)
{
	if (mr)
		atomic_fetch_sub_explicit(&mr->refs, 1, memory_order_release);
}

/* Check access to [to, to + len) of mr for pd with rights acc. Returns
 * 0, or which check failed: 1 invalid (invalidated), 2 wrong PD, 3 rights,
 * 4 TO wrap, 5 out of bounds. Zero-length ranges need only 1..3. */
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
