// SPDX-License-Identifier: MIT
/*
 * test_lock.c - sync/wisp_lock: a try fails while the lock is held and
 * takes it once free; a thread that finds it held sleeps until a give
 * wakes it; four threads incrementing one plain counter under it lose
 * no increment.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "wisp_lock.h"

static void *try_once(void *arg)
{
	return (void *)(uintptr_t)wisp_lock_try(arg);
}

static bool try_on_other_thread(struct wisp_lock *l)
{
	pthread_t t;
	void *ret;

	cr_assert_eq(pthread_create(&t, NULL, try_once, l), 0);
	cr_assert_eq(pthread_join(t, &ret), 0);
	return ret != NULL;
}

Test(lock, try_fails_while_held, .timeout = 30)
{
	struct wisp_lock l = WISP_LOCK_INIT;

	wisp_lock_take(&l);
	cr_assert_not(wisp_lock_try(&l), "taken twice");
	cr_assert_not(try_on_other_thread(&l), "taken by another thread");
	wisp_lock_give(&l);
	cr_assert(try_on_other_thread(&l), "free, yet not taken");
	/* That thread ended holding it: still held. */
	cr_assert_not(wisp_lock_try(&l));
}

struct waiter {
	struct wisp_lock *l;
	atomic_bool in;
};

static void *take_and_give(void *arg)
{
	struct waiter *w = arg;

	wisp_lock_take(w->l);
	atomic_store(&w->in, true);
	wisp_lock_give(w->l);
	return NULL;
}

Test(lock, a_waiter_sleeps_until_given, .timeout = 30)
{
	struct wisp_lock l = WISP_LOCK_INIT;
	struct waiter w = { .l = &l };
	struct timespec ms = { 0, 1000000 };
	pthread_t t;

	wisp_lock_take(&l);
	cr_assert_eq(pthread_create(&t, NULL, take_and_give, &w), 0);
	/* It spins a little, then marks the lock (2) and sleeps. */
	for (int i = 0; i < 5000 && atomic_load(&l.state) != 2; i++)
		nanosleep(&ms, NULL);
	cr_assert_eq(atomic_load(&l.state), 2, "no waiter marked");
	nanosleep(&ms, NULL);
	cr_assert_not(atomic_load(&w.in), "in while the lock was held");
	wisp_lock_give(&l);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert(atomic_load(&w.in));
	cr_assert_eq(atomic_load(&l.state), 0, "left held");
}

enum { THREADS = 4, ROUNDS = 200000 };

struct counter {
	struct wisp_lock l;
	uint64_t n;      /* plain: only the lock orders its updates */
};

static void *count(void *arg)
{
	struct counter *c = arg;

	for (int i = 0; i < ROUNDS; i++) {
		wisp_lock_take(&c->l);
		c->n++;
		wisp_lock_give(&c->l);
	}
	return NULL;
}

Test(lock, no_increment_lost_under_contention, .timeout = 60)
{
	static struct counter c = { .l = WISP_LOCK_INIT };
	pthread_t t[THREADS];

	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, count, &c), 0);
	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_join(t[i], NULL), 0);
	cr_assert_eq(c.n, (uint64_t)THREADS * ROUNDS);
	cr_assert_eq(atomic_load(&c.l.state), 0);
}
