// SPDX-License-Identifier: MIT
/*
 * wisp_mem.c - populated, pooled memory for connection state
 * (wisp_mem.h says why).
 *
 * Size classes: multiples of 64 octets up to 1 KiB, of 256 up to 4 KiB,
 * of 1 KiB up to 16 KiB; 40 in all, at most a quarter of a slot wasted.
 * Each class carves its slots from chunks of its own: the first holds
 * four slots, each next one twice as many, up to 64 KiB (or eight slots,
 * when that is more), so that a program with one connection keeps little.
 * Those first chunks are mapped one by one. A chunk of the full size
 * means a program with hundreds of connections, and comes from a shared
 * arena of 2 MiB, aligned to 2 MiB and advised for a transparent huge
 * page (MADV_HUGEPAGE), which all classes carve in turn: a connection's
 * objects then share a few page-table entries instead of one per 4 KiB,
 * and on a VM whose hypervisor charges each 4 KiB page at its first
 * touch from user space and again at the kernel's first copy into it
 * (docs/performance-log.md, "Huge pages for the pool") a burst of
 * connections pays that once per 2 MiB. Where the kernel has no
 * transparent huge pages, or they are off, the arena is 2 MiB of small
 * pages and costs what the chunks did. The next arena is populated
 * ahead by a short-lived thread (arena_ask_ahead). A chunk is populated
 * once, when it is mapped (MADV_POPULATE_WRITE); a freed slot is cleared
 * and pushed on its class's free list, so a slot is always zero when
 * handed out.
 *
 * The ASan builds (and the fuzz build) give every object to calloc
 * instead, with its length in a header in front, so that the leak
 * checker and the use-after-free checks see each object, and a free
 * with the wrong length aborts.
 */
#include "wisp_mem.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MEM_DIRECT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEM_DIRECT 1
#endif
#endif

#ifdef MEM_DIRECT

/* 64 octets, so that the objects keep the alignment the pool gives. */
struct direct_hdr {
	size_t len;
	char pad[64 - sizeof(size_t)];
};

bool wisp_mem_pooled(void)
{
	return false;
}

void *wisp_mem_zalloc(size_t len)
{
	struct direct_hdr *h;

	if (len > SIZE_MAX - sizeof(*h)) {
		errno = ENOMEM;
		return NULL;
	}
	/* len 0 is taken as 1, as by the pool; h->len stays as asked. */
	if (posix_memalign((void **)&h, 64, sizeof(*h) + (len ? len : 1))) {
		errno = ENOMEM;
		return NULL;
	}
	memset(h, 0, sizeof(*h) + (len ? len : 1));
	h->len = len;
	return h + 1;
}

void wisp_mem_expect_many(void)
{
}

void wisp_mem_free(void *p, size_t len)
{
	struct direct_hdr *h;

	if (!p)
		return;
	h = (struct direct_hdr *)p - 1;
	if (h->len != len) {
		fprintf(stderr, "wisp_mem_free: %p allocated with %zu octets, "
			"freed with %zu\n", p, h->len, len);
		abort();
	}
	free(h);
}

#else /* the pool */

#define CLASSES 40
#define CHUNK_CAP (64u * 1024)
#define ARENA_LEN (2u << 20)

struct mem_class {
	void *free_list;        /* a free slot's first word: the next */
	char *next, *end;       /* never-used slots of the newest chunk */
	size_t chunk_len;       /* of the next chunk */
};

/* Everything under lock. */
struct mem_pool {
	pthread_mutex_t lock;
	struct mem_class cls[CLASSES];
	char *arena_next, *arena_end;   /* what is left of the newest arena */
	char *arena_spare;              /* the next one, made ahead */
	/* The process whose thread is making an arena (the helper, or an
	 * allocator that found no spare), or 0; the others wait for it on
	 * arena_made rather than make a second one. */
	pid_t maker;
	pthread_cond_t arena_made;
};

/*
 * One pool per process. mem/ is a static library linked into both
 * libibverbs.so.1 and librdmacm.so.1 (and into tests), so each has its
 * own copy of this file, and two pools would each keep their own arenas
 * and spare. libibverbs.so.1 exports its pool as wisp_mem_pool
 * (WISP_PRIVATE_1); every copy uses that one when it is there (dlsym),
 * its own otherwise, as tcp-glue's TLS registry does. A slot allocated
 * by one copy may be freed by another: the code and the layout are the
 * same build's.
 */
extern struct mem_pool wisp_mem_pool;
struct mem_pool wisp_mem_pool = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.arena_made = PTHREAD_COND_INITIALIZER,
};

static struct mem_pool *pool_shared;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_init(void)
{
	pool_shared = dlsym(RTLD_DEFAULT, "wisp_mem_pool");
	if (!pool_shared)
		pool_shared = &wisp_mem_pool;
}

static struct mem_pool *pool(void)
{
	pthread_once(&pool_once, pool_init);
	return pool_shared;
}

bool wisp_mem_pooled(void)
{
	return true;
}

static unsigned class_of(size_t len)
{
	if (len <= 1024)
		return (unsigned)((len + 63) / 64) - 1;
	if (len <= 4096)
		return 15 + (unsigned)((len - 1024 + 255) / 256);
	return 27 + (unsigned)((len - 4096 + 1023) / 1024);
}

static size_t slot_len(unsigned c)
{
	if (c < 16)
		return 64 * ((size_t)c + 1);
	if (c < 28)
		return 1024 + 256 * ((size_t)c - 15);
	return 4096 + 1024 * ((size_t)c - 27);
}

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) & ~(pg - 1);
}

/* len octets of fresh memory, mapped and populated, or NULL. Best effort:
 * without MADV_POPULATE_WRITE (a kernel before 5.14) the pages fault in
 * as they are first touched, as from malloc. */
static char *map_populated(size_t len)
{
	char *c = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (c == MAP_FAILED)
		return NULL;
	(void)madvise(c, len, MADV_POPULATE_WRITE);
	return c;
}

/* A new arena, aligned to its length so that it can be one huge page,
 * populated; NULL if out of memory. No lock needed. */
static char *arena_map(void)
{
	char *m = mmap(NULL, 2 * ARENA_LEN, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (m == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)m + ARENA_LEN - 1) &
		     ~(uintptr_t)(ARENA_LEN - 1));
	if (a > m)
		(void)munmap(m, (size_t)(a - m));
	(void)munmap(a + ARENA_LEN, (size_t)(m + ARENA_LEN - a));
	/* Advice before the populate, which then takes the huge page at
	 * once; EINVAL without transparent huge pages, and the arena is
	 * small pages. */
	(void)madvise(a, ARENA_LEN, MADV_HUGEPAGE);
	(void)madvise(a, ARENA_LEN, MADV_POPULATE_WRITE);
	return a;
}

/*
 * Arenas are made without the lock: a populate takes 0.1 ms on memory
 * the machine used before and 4-10 ms on this project's VM for memory
 * it never touched, and every allocation of the process takes the lock.
 * Each arena put in use asks for the next, which a short-lived thread
 * (wisp-mem) maps, leaves as the spare, and ends, so that the populate
 * happens neither in a connection's setup nor under the lock, and an
 * idle program keeps no thread for it. An allocator that finds the
 * arena spent and no spare waits for the arena being made, or makes one
 * itself when none is (the first arena, a helper that could not start,
 * a child after fork, whose maker is in the parent).
 */

/* Called with the lock held: the maker is done; the arena it made (or
 * NULL) becomes the spare, unless there is one. */
static void arena_maker_done(struct mem_pool *m, char *a)
{
	m->maker = 0;
	pthread_cond_broadcast(&m->arena_made);
	if (a && !m->arena_spare) {
		m->arena_spare = a;
		a = NULL;
	}
	if (a)
		(void)munmap(a, ARENA_LEN);
}

static void *arena_helper(void *arg)
{
	struct mem_pool *m = arg;
	char *a;

	pthread_setname_np(pthread_self(), "wisp-mem");
	a = arena_map();
	pthread_mutex_lock(&m->lock);
	arena_maker_done(m, a);
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

static bool arena_maker_alive(const struct mem_pool *m)
{
	return m->maker == getpid();
}

/* Called with the lock held: have a spare arena made, unless there is
 * one or it is being made. */
static void arena_ask_ahead(struct mem_pool *m)
{
	pthread_attr_t attr;
	pthread_t t;

	if (m->arena_spare || arena_maker_alive(m) ||
	    pthread_attr_init(&attr))
		return;
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (!pthread_create(&t, &attr, arena_helper, m))
		m->maker = getpid();
	pthread_attr_destroy(&attr);
}

/* Called with the lock held, which it gives up while it waits or maps:
 * an arena in use with room for a slot of slot octets; false if out of
 * memory. */
static bool arena_room(struct mem_pool *m, size_t slot)
{
	char *a;

	while ((size_t)(m->arena_end - m->arena_next) < slot) {
		if (m->arena_spare) {
			a = m->arena_spare;
			m->arena_spare = NULL;
		} else if (arena_maker_alive(m)) {
			pthread_cond_wait(&m->arena_made, &m->lock);
			continue;
		} else {
			m->maker = getpid();
			pthread_mutex_unlock(&m->lock);
			a = arena_map();
			pthread_mutex_lock(&m->lock);
			/* Nobody else put an arena in meanwhile: they
			 * waited for this one. */
			arena_maker_done(m, NULL);
			if (!a)
				return false;
		}
		m->arena_next = a;
		m->arena_end = a + ARENA_LEN;
		arena_ask_ahead(m);
	}
	return true;
}

/* Called with the lock held, which it may give up meanwhile: the
 * class's next chunk, mapped and populated, unless another thread gave
 * the class one meanwhile; negative if out of memory. */
static int class_grow(struct mem_pool *m, struct mem_class *k, size_t slot)
{
	size_t cap = page_round(8 * slot);
	size_t len;
	char *c;

	if (cap < CHUNK_CAP)
		cap = CHUNK_CAP;
	if (!k->chunk_len)
		k->chunk_len = page_round(4 * slot);
	len = k->chunk_len;
	if (len < cap) {
		c = map_populated(len);
		if (!c)
			return -ENOMEM;
		k->chunk_len = len * 2 < cap ? len * 2 : cap;
	} else {
		/* A full-size chunk, from the arena; the rest of an arena
		 * too short for it is this chunk, when it holds a slot
		 * (cap <= 128 KiB: a few per arena at most go unused). */
		if (!arena_room(m, slot))
			return -ENOMEM;
		if (k->next != k->end)
			return 0;
		c = m->arena_next;
		if (len > (size_t)(m->arena_end - m->arena_next))
			len = (size_t)(m->arena_end - m->arena_next);
		m->arena_next += len;
	}
	k->next = c;
	k->end = c + len / slot * slot;
	return 0;
}

void wisp_mem_expect_many(void)
{
	struct mem_pool *m = pool();

	pthread_mutex_lock(&m->lock);
	if (!m->arena_next)
		arena_ask_ahead(m);
	pthread_mutex_unlock(&m->lock);
}

/* Above the classes: from malloc, with the pool's alignment. */
static void *big_zalloc(size_t len)
{
	void *p;

	if (posix_memalign(&p, 64, len)) {
		errno = ENOMEM;
		return NULL;
	}
	return memset(p, 0, len);
}

void *wisp_mem_zalloc(size_t len)
{
	struct mem_pool *m;
	struct mem_class *k;
	void *p = NULL;
	unsigned c;
	size_t slot;

	if (len > WISP_MEM_POOLED_MAX)
		return big_zalloc(len);
	c = class_of(len ? len : 1);
	m = pool();
	k = &m->cls[c];
	slot = slot_len(c);
	pthread_mutex_lock(&m->lock);
	while (!p) {
		if (k->free_list) {
			p = k->free_list;
			k->free_list = *(void **)p;
			*(void **)p = NULL; /* the rest cleared by wisp_mem_free */
		} else if (k->next != k->end) {
			p = k->next;
			k->next += slot;
		} else if (class_grow(m, k, slot)) {
			break;
		}
	}
	pthread_mutex_unlock(&m->lock);
	if (!p)
		errno = ENOMEM;
	return p;
}

void wisp_mem_free(void *p, size_t len)
{
	struct mem_pool *m;
	struct mem_class *k;
	unsigned c;

	if (!p)
		return;
	if (len > WISP_MEM_POOLED_MAX) {
		free(p);
		return;
	}
	c = class_of(len ? len : 1);
	m = pool();
	k = &m->cls[c];
	/* The whole slot: a slot is all zero while free, whatever length
	 * its earlier owners asked for. */
	memset(p, 0, slot_len(c));
	pthread_mutex_lock(&m->lock);
	*(void **)p = k->free_list;
	k->free_list = p;
	pthread_mutex_unlock(&m->lock);
}

#endif

void *wisp_mem_calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	return wisp_mem_zalloc(n * size);
}

void wisp_mem_free_array(void *p, size_t n, size_t size)
{
	wisp_mem_free(p, n * size);
}
