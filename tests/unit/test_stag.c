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
