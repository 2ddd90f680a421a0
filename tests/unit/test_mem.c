// SPDX-License-Identifier: MIT
/*
 * test_mem.c - mem/wisp_mem: zeroed, aligned, distinct memory of the
 * asked size; freed slots reused and cleared (the pooled builds); a free
 * with the wrong length caught (the ASan builds, which hand objects to
 * calloc); full-size chunks from 2 MiB arenas advised for huge pages
 * (the pooled builds), the first made ahead for a listener; many
 * threads at once.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_threads.h"
#include "wisp_mem.h"

/* Every size a class boundary is near, and some far from any. */
static const size_t sizes[] = {
	0, 1, 15, 63, 64, 65, 127, 128, 500, 1023, 1024, 1025, 1280, 1281,
	2047, 2048, 4095, 4096, 4097, 8176, 8192, 8193, 16383, 16384,
	16385, 100000,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

Test(mem, zeroed_aligned_and_writable_for_every_size)
{
	for (size_t i = 0; i < NSIZES; i++) {
		size_t n = sizes[i] ? sizes[i] : 1;
		unsigned char *p = wisp_mem_zalloc(sizes[i]);

		cr_assert_not_null(p, "size %zu", sizes[i]);
		cr_assert_eq((uintptr_t)p % 64, 0, "size %zu at %p", sizes[i],
			     (void *)p);
		cr_assert(all_zero(p, n), "size %zu not zeroed", sizes[i]);
		memset(p, 0xa5, n);
		wisp_mem_free(p, sizes[i]);
	}
}

/* Live objects of one class never overlap, and each keeps its octets
 * while the others are written. */
Test(mem, live_objects_are_distinct)
{
	enum { N = 300 };   /* more than one chunk of the 1,280 class */
	unsigned char *p[N];

	for (int i = 0; i < N; i++) {
		p[i] = wisp_mem_zalloc(1100);
		cr_assert_not_null(p[i]);
		memset(p[i], i & 0xff, 1100);
	}
	for (int i = 0; i < N; i++)
		for (size_t k = 0; k < 1100; k++)
			cr_assert_eq(p[i][k], i & 0xff, "object %d octet %zu",
				     i, k);
	for (int i = 0; i < N; i++)
		wisp_mem_free(p[i], 1100);
}

/* A slot freed dirty comes back zero, also to an owner that asks for a
 * longer length in the same class. */
Test(mem, a_reused_slot_is_cleared)
{
	unsigned char *a, *b;

	a = wisp_mem_zalloc(1000);
	cr_assert_not_null(a);
	memset(a, 0xff, 1000);
	wisp_mem_free(a, 1000);
	b = wisp_mem_zalloc(1024);
	cr_assert_not_null(b);
	cr_assert(all_zero(b, 1024));
	if (wisp_mem_pooled())
		cr_expect_eq(a, b, "the freed slot is the next one handed out");
	wisp_mem_free(b, 1024);
}

#define ARENA (2u << 20)

/* A mapping of /proc/self/smaps: its bounds, resident octets, and
 * whether it carries the huge-page advice (VmFlags "hg"). */
struct vma {
	uintptr_t lo, hi;
	size_t rss;
	bool hg;
};

#define MAX_VMAS 4096

/* The process's mappings into v (at most MAX_VMAS); how many. */
static int smaps_read(struct vma *v)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int n = -1;

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		size_t kb;

		/* A header line; "AnonHugePages:" also starts as hex. */
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			cr_assert_lt(n + 1, MAX_VMAS);
			v[++n] = (struct vma){ .lo = lo, .hi = hi };
		} else if (n >= 0 && sscanf(line, "Rss: %zu kB", &kb) == 1) {
			v[n].rss = kb * 1024;
		} else if (n >= 0 && !strncmp(line, "VmFlags:", 8)) {
			v[n].hg = strstr(line, " hg") != NULL;
		}
	}
	fclose(f);
	return n + 1;
}

static struct vma vmas[MAX_VMAS];

/* The mapping that holds address a. */
static struct vma vma_of(uintptr_t a)
{
	int n = smaps_read(vmas);

	for (int i = 0; i < n; i++)
		if (a >= vmas[i].lo && a < vmas[i].hi)
			return vmas[i];
	cr_assert_fail("%#lx is in no mapping", (unsigned long)a);
	return (struct vma){ 0 };
}

/* The arena tests need the pool (not the ASan builds' malloc) and a
 * kernel whose mappings can carry the huge-page advice. */
static void skip_without_arenas(void)
{
	if (!wisp_mem_pooled())
		cr_skip_test("the ASan build allocates with malloc");
	if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK))
		cr_skip_test("this kernel has no transparent huge pages, so "
			     "no mapping carries their advice");
}

/* A class's first chunks are small pages of their own (a program with a
 * few connections keeps little); its full-size chunks come from an arena
 * of 2 MiB, aligned to 2 MiB, advised for a huge page and in memory. */
Test(mem, full_size_chunks_come_from_huge_page_arenas)
{
	enum { N = 40 };   /* 4 + 8 + 16 slots of 3 KiB, then 64 KiB chunks */
	unsigned char *p[N], vec[ARENA / 4096];
	struct vma first, full;
	uintptr_t base;

	skip_without_arenas();
	for (int i = 0; i < N; i++) {
		p[i] = wisp_mem_zalloc(3000);
		cr_assert_not_null(p[i]);
	}
	first = vma_of((uintptr_t)p[0]);
	cr_assert_not(first.hg, "the first chunk of a class is advised for "
		      "huge pages");
	full = vma_of((uintptr_t)p[N - 1]);
	cr_assert(full.hg, "a full-size chunk is not in a huge-page arena");
	cr_assert_eq(full.lo % ARENA, 0, "arena mapping starts at %#lx",
		     (unsigned long)full.lo);
	cr_assert_eq(full.hi % ARENA, 0, "arena mapping ends at %#lx",
		     (unsigned long)full.hi);
	base = (uintptr_t)p[N - 1] & ~(uintptr_t)(ARENA - 1);
	cr_assert_eq(mincore((void *)base, ARENA, vec), 0);
	for (size_t i = 0; i < sizeof(vec); i++)
		cr_assert(vec[i] & 1, "page %zu of the arena not resident", i);
	for (int i = 0; i < N; i++)
		wisp_mem_free(p[i], 3000);
}

/* Octets of mappings advised for huge pages, and of those in memory;
 * the start of the first such arena that does not hold a. */
static void hg_bytes(size_t *mapped, size_t *resident, uintptr_t a,
		     uintptr_t *other)
{
	int n = smaps_read(vmas);

	*mapped = *resident = 0;
	*other = 0;
	for (int i = 0; i < n; i++) {
		const struct vma *v = &vmas[i];

		if (!v->hg)
			continue;
		*mapped += v->hi - v->lo;
		*resident += v->rss;
		/* The arena beside a's, if the two merged into one
		 * mapping, or a mapping of its own. */
		if (*other)
			continue;
		if (a < v->lo || a >= v->hi)
			*other = v->lo;
		else if (v->hi - v->lo >= 2 * ARENA)
			*other = (a & ~(uintptr_t)(ARENA - 1)) == v->lo ?
				 v->lo + ARENA : v->lo;
	}
}

/* Threads of this process named wisp-mem. */
static int mem_threads(void)
{
	return proc_threads("wisp-mem").named;
}

/* An arena put in use has the next one made ahead, populated, by a
 * thread that then ends; the next arena the pool needs is that one (no
 * third is mapped). Bounded: 10 s for a populate of 2 MiB. */
Test(mem, the_next_arena_is_made_ahead_by_a_thread_that_ends)
{
	enum { N = 40 };
	unsigned char *p[N], *q[700];
	size_t mapped = 0, resident = 0;
	uintptr_t spare = 0;
	bool beyond = false;
	int i;

	skip_without_arenas();
	for (i = 0; i < N; i++) {
		p[i] = wisp_mem_zalloc(3000);   /* into the first arena */
		cr_assert_not_null(p[i]);
	}
	for (i = 0; i < 1000; i++) {
		hg_bytes(&mapped, &resident, (uintptr_t)p[N - 1], &spare);
		if (resident >= 2 * ARENA && !mem_threads())
			break;
		usleep(10000);
	}
	cr_assert_eq(mapped, 2 * ARENA, "%zu octets in arenas, want two",
		     mapped);
	cr_assert_eq(resident, 2 * ARENA, "%zu octets of arenas resident",
		     resident);
	cr_assert_eq(mem_threads(), 0, "the arena's thread did not end");
	cr_assert_neq(spare, 0);
	/* 700 slots of 3 KiB: more than the first arena holds; the first
	 * beyond it is in the spare. */
	for (i = 0; i < 700; i++) {
		uintptr_t at;

		q[i] = wisp_mem_zalloc(3000);
		cr_assert_not_null(q[i]);
		at = (uintptr_t)q[i] & ~(uintptr_t)(ARENA - 1);
		if (at != ((uintptr_t)p[N - 1] & ~(uintptr_t)(ARENA - 1)) &&
		    !beyond) {
			beyond = true;
			cr_assert_eq(at, spare, "a slot beyond the first arena "
				     "at %p, not in the spare at %#lx",
				     (void *)q[i], (unsigned long)spare);
		}
	}
	cr_assert(beyond, "700 slots of 3 KiB all in the first arena");
	for (i = 0; i < 700; i++)
		wisp_mem_free(q[i], 3000);
	for (i = 0; i < N; i++)
		wisp_mem_free(p[i], 3000);
}

/* A listener's hint: the first arena is made ahead, before any class
 * needs it, and is the one the first full-size chunk then lies in. */
Test(mem, expecting_many_has_the_first_arena_made_ahead)
{
	enum { N = 40 };
	unsigned char *p[N];
	size_t mapped = 0, resident = 0;
	uintptr_t spare = 0;
	int i;

	skip_without_arenas();
	hg_bytes(&mapped, &resident, 0, &spare);
	cr_assert_eq(mapped, 0, "an arena before any was asked for");
	wisp_mem_expect_many();
	for (i = 0; i < 1000; i++) {
		hg_bytes(&mapped, &resident, 0, &spare);
		if (resident >= ARENA && !mem_threads())
			break;
		usleep(10000);
	}
	cr_assert_eq(mapped, ARENA, "%zu octets in arenas, want one", mapped);
	cr_assert_eq(resident, ARENA, "%zu octets of it resident", resident);
	cr_assert_eq(mem_threads(), 0, "the arena's thread did not end");
	for (i = 0; i < N; i++) {
		p[i] = wisp_mem_zalloc(3000);
		cr_assert_not_null(p[i]);
	}
	cr_assert_eq((uintptr_t)p[N - 1] & ~(uintptr_t)(ARENA - 1), spare,
		     "the first full-size chunk at %p, not in the arena made "
		     "ahead at %#lx", (void *)p[N - 1], (unsigned long)spare);
	for (i = 0; i < N; i++)
		wisp_mem_free(p[i], 3000);
}

/* Threads that all need a new arena at about the same time: one is made
 * at a time (the others wait for it), each slot goes to one thread, and
 * the pool ends with the arenas it filled and one spare. 4 x 500 slots
 * of 3 KiB: 28 in the class's first chunks, 1,972 in full-size chunks of
 * 21, 32 chunks to an arena: three arenas, and the spare. */
static void *hold_many(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	unsigned char **held = calloc(500, sizeof(*held));

	if (!held)
		return (void *)1;
	for (int i = 0; i < 500; i++) {
		held[i] = wisp_mem_zalloc(3000);
		if (!held[i] || !all_zero(held[i], 3000))
			return (void *)1;
		memset(held[i], (int)id, 3000);
	}
	for (int i = 0; i < 500; i++) {
		for (size_t k = 0; k < 3000; k++)
			if (held[i][k] != (unsigned char)id)
				return (void *)1;
	}
	return held;
}

Test(mem, threads_needing_arenas_at_once_share_the_ones_made)
{
	unsigned char **held[4];
	size_t mapped = 0, resident = 0;
	uintptr_t other;
	pthread_t t[4];
	void *ret;

	skip_without_arenas();
	for (uintptr_t i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, hold_many,
					    (void *)(i + 1)), 0);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(pthread_join(t[i], &ret), 0);
		cr_assert(ret != NULL && ret != (void *)1,
			  "thread %d saw a shared or dirty slot", i);
		held[i] = ret;
	}
	/* Until the spare is made and its thread gone: that thread may not
	 * have named itself yet when the last thread joins (a new thread
	 * bears its creator's name until then), so no wisp-mem thread is
	 * not yet the end. */
	for (int i = 0; i < 1000; i++) {
		hg_bytes(&mapped, &resident, 0, &other);
		if (mapped >= 4 * ARENA && !mem_threads())
			break;
		usleep(10000);
	}
	cr_assert_eq(mem_threads(), 0, "an arena's thread did not end");
	cr_assert_eq(mapped, 4 * ARENA, "%zu octets in arenas, want four "
		     "(three filled, one spare)", mapped);
	for (int i = 0; i < 4; i++) {
		for (int k = 0; k < 500; k++)
			wisp_mem_free(held[i][k], 3000);
		free(held[i]);
	}
}

/* Two classes whose full-size chunks (64 and 72 KiB) share arenas, over
 * several of them and the short tails where a chunk does not fit: every
 * object is zero when handed out and keeps its own octets. */
Test(mem, arenas_hand_out_distinct_slots_across_their_ends)
{
	enum { N = 1500 };
	static unsigned char *p[N];

	for (int i = 0; i < N; i++) {
		size_t len = i % 3 ? 3000 : 9000;

		p[i] = wisp_mem_zalloc(len);
		cr_assert_not_null(p[i]);
		cr_assert(all_zero(p[i], len), "object %d not zeroed", i);
		memset(p[i], i & 0xff, len);
	}
	for (int i = 0; i < N; i++) {
		size_t len = i % 3 ? 3000 : 9000;

		for (size_t k = 0; k < len; k++)
			cr_assert_eq(p[i][k], i & 0xff, "object %d octet %zu",
				     i, k);
	}
	for (int i = 0; i < N; i++)
		wisp_mem_free(p[i], i % 3 ? 3000 : 9000);
}

/* A slot of a fresh chunk is in memory before anyone touches it: the
 * chunk was populated as it was mapped (no page fault at its first use,
 * which is the point of the pool). */
Test(mem, fresh_slots_are_populated)
{
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char vec[8];
	unsigned char *p;
	uintptr_t base;

	if (!wisp_mem_pooled())
		cr_skip_test("the ASan build allocates with malloc");
	/* A class no other test here uses: its first chunk is new. */
	p = wisp_mem_zalloc(12000);
	cr_assert_not_null(p);
	base = (uintptr_t)p & ~(uintptr_t)(pg - 1);
	cr_assert_eq(mincore((void *)base, 3 * (size_t)pg, vec), 0);
	for (int i = 0; i < 3; i++)
		cr_assert(vec[i] & 1, "page %d of a fresh slot not resident",
			  i);
	wisp_mem_free(p, 12000);
}

Test(mem, calloc_checks_the_product)
{
	errno = 0;
	cr_assert_null(wisp_mem_calloc(SIZE_MAX / 2, 3));
	cr_assert_eq(errno, ENOMEM);
	void *p = wisp_mem_calloc(7, 48);

	cr_assert_not_null(p);
	cr_assert(all_zero(p, 7 * 48));
	wisp_mem_free_array(p, 7, 48);
	wisp_mem_free(NULL, 64);          /* a no-op, as free(NULL) */
}

static void wrong_length_free(void)
{
	void *p = wisp_mem_zalloc(200);

	wisp_mem_free(p, 300);
}

/* Only the ASan builds can tell: the pool keeps no length. */
Test(mem, a_free_with_another_length_aborts)
{
	pid_t pid;
	int st;

	if (wisp_mem_pooled())
		cr_skip_test("pooled build: lengths are not recorded; the "
			     "ASan build runs this check");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		wrong_length_free();
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
		  "status %#x", st);
}

/* Threads taking and giving back slots of the same classes at once: no
 * slot is handed to two of them (each writes its own pattern and finds
 * it intact), and every slot comes zeroed. */
static void *churn(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	unsigned char *held[16] = { 0 };
	size_t len[16];

	for (int round = 0; round < 2000; round++) {
		int k = round % 16;

		if (held[k]) {
			for (size_t i = 0; i < len[k]; i++)
				if (held[k][i] != (unsigned char)id)
					return (void *)1;
			wisp_mem_free(held[k], len[k]);
		}
		len[k] = 64 + (size_t)((round * 37 + id * 11) % 3000);
		held[k] = wisp_mem_zalloc(len[k]);
		if (!held[k] || !all_zero(held[k], len[k]))
			return (void *)1;
		memset(held[k], (int)id, len[k]);
	}
	for (int k = 0; k < 16; k++)
		wisp_mem_free(held[k], len[k]);
	return NULL;
}

Test(mem, threads_never_share_a_slot)
{
	pthread_t t[4];
	void *ret;

	for (uintptr_t i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, churn,
					    (void *)(i + 1)), 0);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(pthread_join(t[i], &ret), 0);
		cr_assert_null(ret, "thread %d saw a shared or dirty slot", i);
	}
}
