/* SPDX-License-Identifier: MIT */
/*
 * The STag table (rdmap/rdmap_stag.h): the range and rights checks of an
 * MR, registration and lookup.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp.h"
#include "rdmap_stag.h"
#include "test_util.h"

#define PD ((const void *)0x1)

static struct rdmap_mr mr_at(uint64_t iova, uint64_t length)
{
	struct rdmap_mr m = {
		.addr = NULL, .iova = iova, .length = length,
		.access = RDMAP_ACC_LOCAL_WRITE | RDMAP_ACC_REMOTE_WRITE |
			  RDMAP_ACC_REMOTE_READ,
		.pd = PD,
	};

	atomic_init(&m.valid, true);
	return m;
}

/* ---- rdmap_mr_check ------------------------------------------------ */

Test(stag, mr_check_order)
{
	struct rdmap_mr m = mr_at(0x1000, 0x100);

	cr_assert_eq(rdmap_mr_check(&m, PD, RDMAP_ACC_REMOTE_READ, 0x1000,
				    0x100), RDMAP_MR_OK);
	cr_assert_eq(rdmap_mr_check(&m, PD, 0, 0x1100, 1), RDMAP_MR_BOUNDS);
	cr_assert_eq(rdmap_mr_check(&m, PD, 0, UINT64_MAX, 1), RDMAP_MR_WRAP);
	/* rights, PD and validity come before the range */
	m.access = RDMAP_ACC_LOCAL_WRITE;
	cr_assert_eq(rdmap_mr_check(&m, PD, RDMAP_ACC_REMOTE_READ, UINT64_MAX,
				    1), RDMAP_MR_RIGHTS);
	cr_assert_eq(rdmap_mr_check(&m, (void *)2, 0, 0, 0), RDMAP_MR_WRONG_PD);
	atomic_store(&m.valid, false);
	cr_assert_eq(rdmap_mr_check(&m, PD, 0, 0, 0), RDMAP_MR_INVALID);
}

/*
 * RDMAP checks local SGEs and Read Request sources with the range check
 * DDP applies to placement (ddp_tagged_range): the two agree on every
 * edge, including an MR that ends at TO 2^64 - 1, where iova + length
 * itself wraps to 0.
 */
Test(stag, mr_check_is_the_ddp_range_check)
{
	static const uint64_t M = UINT64_MAX;
	static const struct { uint64_t iova, length; } mrs[] = {
		{ 0x1000, 0x100 }, { M - 0xff, 0x100 }, { 0, M },
		{ M - 0xffff, 0x10000 }, { 1, UINT32_MAX },
	};
	static const uint64_t tos[] = { 0, 1, 0xfff, 0x1000, 0x10ff, 0x1100,
					M - 0x100, M - 0xff, M - 1, M };
	static const uint64_t lens[] = { 0, 1, 2, 0xff, 0x100, 0x101,
					 UINT32_MAX, M };
	unsigned int n = 0;

	for (size_t a = 0; a < sizeof(mrs) / sizeof(mrs[0]); a++) {
		struct rdmap_mr m = mr_at(mrs[a].iova, mrs[a].length);

		for (size_t b = 0; b < sizeof(tos) / sizeof(tos[0]); b++) {
			for (size_t c = 0; c < sizeof(lens) / sizeof(lens[0]); c++) {
				enum ddp_error d = ddp_tagged_range(
					m.iova, m.length, tos[b], lens[c]);
				enum rdmap_mr_check want =
					d == DDP_ERR_NONE ? RDMAP_MR_OK :
					d == DDP_ERR_T_TO_WRAP ? RDMAP_MR_WRAP :
					RDMAP_MR_BOUNDS;

				cr_assert_eq(rdmap_mr_check(&m, PD, 0, tos[b],
							    lens[c]), want,
					     "MR [%#llx +%#llx) TO %#llx len %#llx",
					     (unsigned long long)m.iova,
					     (unsigned long long)m.length,
					     (unsigned long long)tos[b],
					     (unsigned long long)lens[c]);
				n++;
			}
		}
	}
	/* The case the old arithmetic got wrong: the last octets of an MR
	 * at the top of the TO space. */
	struct rdmap_mr top = mr_at(M - 0xff, 0x100);

	cr_assert_eq(rdmap_mr_check(&top, PD, 0, M - 0x10, 0x10), RDMAP_MR_OK);
	cr_log_info("%u (MR, TO, length) cases agree with ddp_tagged_range", n);
}

/* ---- lookups racing registration and deregistration ----------------- */

#define RACE_READERS  3
#define RACE_CYCLES   200000
#define RACE_SECONDS  3

struct race {
	struct rdmap_stag_table t;
	_Atomic uint32_t stag;       /* STag of the MR being churned */
	atomic_bool stop;
	atomic_ulong hits;
	atomic_ulong bad;            /* a lookup returned a wrong MR */
};

/* Look the churned STag up again and again; whatever comes back must be
 * the MR that STag names, still valid memory while referenced. */
static void *race_reader(void *arg)
{
	struct race *r = arg;

	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		uint32_t stag = atomic_load_explicit(&r->stag,
						     memory_order_relaxed);
		struct rdmap_mr *m = rdmap_stag_get(&r->t, stag);

		if (!m)
			continue;
		if (m->stag != stag || m->length != 4096)
			atomic_fetch_add(&r->bad, 1);
		atomic_fetch_add_explicit(&r->hits, 1, memory_order_relaxed);
		rdmap_mr_put(m);
	}
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * RACE_READERS threads look up the STag of an MR that the main thread
 * registers, deregisters and frees (free() right after
 * rdmap_stag_remove() returns, as ibv_dereg_mr does), bounded by
 * RACE_CYCLES and RACE_SECONDS. Under AddressSanitizer any touch of a
 * freed MR by a lookup is a heap-use-after-free report.
 */
Test(stag, lookup_races_dereg, .timeout = 60)
{
	struct race *r = calloc(1, sizeof(*r));
	pthread_t th[RACE_READERS];
	double end = now_s() + RACE_SECONDS;
	unsigned long cycles = 0;

	cr_assert_not_null(r);
	cr_assert_eq(rdmap_stag_table_init(&r->t, 64), 0);
	for (int i = 0; i < RACE_READERS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, race_reader, r), 0);
	while (cycles < RACE_CYCLES && now_s() < end) {
		struct rdmap_mr *m = calloc(1, sizeof(*m));

		cr_assert_not_null(m);
		*m = mr_at(0x1000, 4096);
		cr_assert_eq(rdmap_stag_insert(&r->t, m), 0);
		atomic_store_explicit(&r->stag, m->stag, memory_order_relaxed);
		for (int spin = 0; spin < 1024; spin++)
			__asm__ volatile("" ::: "memory");
		rdmap_stag_remove(&r->t, m);
		free(m);
		cycles++;
	}
	atomic_store(&r->stop, true);
	for (int i = 0; i < RACE_READERS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&r->bad), 0);
	cr_log_info("%lu register/deregister cycles, %lu successful lookups",
		    cycles, atomic_load(&r->hits));
	rdmap_stag_table_fini(&r->t);
	free(r);
}

/* ---- how hard STags are to guess ------------------------------------ */

/* As many MRs as an ibv_context allows (WISP_MAX_MR in verbs-provider). */
#define GUESS_TABLE   (1u << 20)
#define GUESS_LIVE    1024u
/* The floor: a blind attacker needs at least this many guesses per hit,
 * i.e. GUESS_FLOOR * GUESS_LIVE to hit one given MR. An ideal 32-bit
 * STag gives 2^32 / GUESS_LIVE = 2^22 per hit; the floor leaves a
 * factor 16 for chance. */
#define GUESS_FLOOR   (1u << 18)

static uint64_t xs64(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct guess_ctx {
	struct rdmap_stag_table t;
	struct rdmap_mr mr[GUESS_LIVE];
};

static struct guess_ctx *guess_setup(void)
{
	struct guess_ctx *g = calloc(1, sizeof(*g));

	cr_assert_not_null(g);
	cr_assert_eq(rdmap_stag_table_init(&g->t, GUESS_TABLE), 0);
	for (uint32_t i = 0; i < GUESS_LIVE; i++) {
		g->mr[i] = mr_at(0x1000, 4096);
		cr_assert_eq(rdmap_stag_insert(&g->t, &g->mr[i]), 0);
	}
	return g;
}

static void guess_teardown(struct guess_ctx *g)
{
	for (uint32_t i = 0; i < GUESS_LIVE; i++)
		rdmap_stag_remove(&g->t, &g->mr[i]);
	rdmap_stag_table_fini(&g->t);
	free(g);
}

/* One guess: does stag name a live MR? */
static bool guess_hits(struct rdmap_stag_table *t, uint32_t stag)
{
	struct rdmap_mr *m = rdmap_stag_get(t, stag);

	rdmap_mr_put(m);
	return m != NULL;
}

/* Guesses per hit, a lower bound when nothing was hit. */
static double per_hit(uint64_t guesses, uint64_t hits)
{
	return (double)guesses / (double)(hits ? hits : 1);
}

/*
 * A blind attacker with GUESS_LIVE MRs registered: one who guesses
 * uniformly at random over the 32-bit STag space, and one who knows how
 * a table fills (indexes from 1 up) and tries every key of the first
 * 2^15 indexes. Each needs at least GUESS_FLOOR guesses per hit.
 */
Test(stag, blind_guesses_floor, .timeout = 120)
{
	struct guess_ctx *g = guess_setup();
	const uint64_t n = 1u << 23;
	uint64_t seed = 0x2545f4914f6cdd1dull;
	uint64_t hits_u = 0, hits_d = 0;
	double e_u, e_d;

	for (uint64_t i = 0; i < n; i++)
		hits_u += guess_hits(&g->t, (uint32_t)xs64(&seed));
	for (uint64_t i = 0; i < n; i++)
		hits_d += guess_hits(&g->t, (uint32_t)(i + 256));
	e_u = per_hit(n, hits_u);
	e_d = per_hit(n, hits_d);
	cr_log_info("%u live MRs: uniform attacker %llu hits in %llu guesses "
		    "(%.3g guesses per hit, %.3g to hit one given MR); "
		    "dense-index attacker %llu hits (%.3g per hit)",
		    GUESS_LIVE, (unsigned long long)hits_u,
		    (unsigned long long)n, e_u, e_u * GUESS_LIVE,
		    (unsigned long long)hits_d, e_d);
	cr_assert_geq(e_u, GUESS_FLOOR, "uniform: %.3g guesses per hit", e_u);
	cr_assert_geq(e_d, GUESS_FLOOR, "dense: %.3g guesses per hit", e_d);
	guess_teardown(g);
}

/*
 * An attacker who saw an STag of an MR before it was deregistered and
 * registered again (the same buffer, e.g. a ULP's recycled pool) tries
 * every key at the old STag's index. With prompt index reuse that found
 * the new STag in 128 guesses on average; it must now take at least
 * GUESS_FLOOR guesses per hit.
 */
Test(stag, old_stag_guesses_floor, .timeout = 120)
{
	struct guess_ctx *g = guess_setup();
	const uint32_t trials = 1u << 14;
	struct rdmap_mr x = mr_at(0x1000, 4096);
	uint64_t hits = 0, same_index = 0;
	double e;

	for (uint32_t i = 0; i < trials; i++) {
		uint32_t old, idx;

		cr_assert_eq(rdmap_stag_insert(&g->t, &x), 0);
		old = x.stag;
		rdmap_stag_remove(&g->t, &x);
		cr_assert_eq(rdmap_stag_insert(&g->t, &x), 0);
		idx = old >> RDMAP_STAG_KEY_BITS;
		same_index += (x.stag >> RDMAP_STAG_KEY_BITS) == idx;
		for (uint32_t key = 0; key < 256; key++) {
			struct rdmap_mr *m = rdmap_stag_get(&g->t,
				idx << RDMAP_STAG_KEY_BITS | key);

			hits += m == &x;
			rdmap_mr_put(m);
		}
		rdmap_stag_remove(&g->t, &x);
	}
	e = per_hit((uint64_t)trials * 256, hits);
	cr_log_info("old STag seen: %llu of %u re-registrations at the same "
		    "index, %llu hits, %.3g guesses per hit",
		    (unsigned long long)same_index, trials,
		    (unsigned long long)hits, e);
	cr_assert_geq(e, GUESS_FLOOR, "%.3g guesses per hit", e);
	guess_teardown(g);
}

/*
 * The whole 32 bits are drawn: the top octet of the live STags (index
 * bits a dense table leaves at zero) takes most of its 256 values.
 */
Test(stag, stags_use_the_full_space)
{
	struct guess_ctx *g = guess_setup();
	bool seen[256] = { false };
	unsigned int distinct = 0;

	for (uint32_t i = 0; i < GUESS_LIVE; i++) {
		uint8_t top = (uint8_t)(g->mr[i].stag >> 24);

		distinct += !seen[top];
		seen[top] = true;
	}
	cr_log_info("%u distinct top octets among %u STags", distinct,
		    GUESS_LIVE);
	/* Uniform: about 256 * (1 - e^-4) = 251 expected. */
	cr_assert_geq(distinct, 200);
	guess_teardown(g);
}

/*
 * A freed index is not handed out again soon: in a small table (64
 * entries) an index comes back no sooner than 16 deregistrations later.
 */
Test(stag, freed_index_quarantined)
{
	enum { HIST = 16, ROUNDS = 20000 };
	struct rdmap_stag_table t;
	struct rdmap_mr m = mr_at(0x1000, 4096);
	uint32_t hist[HIST] = { 0 };
	unsigned int early = 0;

	cr_assert_eq(rdmap_stag_table_init(&t, 64), 0);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		bool reused = false;
		uint32_t idx;

		cr_assert_eq(rdmap_stag_insert(&t, &m), 0);
		idx = m.stag >> RDMAP_STAG_KEY_BITS;
		for (int h = 0; h < HIST; h++)
			reused |= hist[h] == idx;
		early += reused;
		hist[r % HIST] = idx;
		rdmap_stag_remove(&t, &m);
	}
	cr_log_info("%u of %u registrations reused an index freed in the last "
		    "%d", early, ROUNDS, HIST);
	cr_assert_eq(early, 0);
	rdmap_stag_table_fini(&t);
}
