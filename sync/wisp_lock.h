/* SPDX-License-Identifier: MIT */
/*
 * wisp_lock.h - the mutex of the locks every message takes: a QP's post
 * and core locks, a connection's receive lock, a CQ's two ends.
 *
 * A SEND of 8 octets takes five of them (the post lock to post it and to
 * post the next receive, the core lock to fill, finish and receive it)
 * and tries a sixth (the receive lock) on every poll (issue 13). As
 * pthread mutexes, each lock and unlock is a call through the PLT into
 * libc's generic mutex, which looks at the mutex's type before its one
 * atomic operation: about 57 instructions a pair, in code that every
 * system call on this VM pushes out of the cache
 * (docs/performance-log.md). Here the uncontended path is the atomic
 * operation alone, inline; only a contended lock calls out, to sleep on
 * a futex or to wake a sleeper.
 *
 * The protocol is the three-state futex mutex of Drepper's "Futexes Are
 * Tricky": 0 free, 1 taken, 2 taken and someone may sleep on it. Not
 * recursive, not robust, no owner kept; a lock taken twice by one thread
 * deadlocks, as a PTHREAD_MUTEX_NORMAL one does. No condition variable
 * waits on one: the locks that need one stay pthread mutexes.
 *
 *   wisp_lock_init(l)   as PTHREAD_MUTEX_INITIALIZER; nothing to destroy.
 *   wisp_lock_take(l)   lock; acquire ordering.
 *   wisp_lock_try(l)    lock if free: true when taken.
 *   wisp_lock_give(l)   unlock; release ordering.
 */
#ifndef WISP_LOCK_H
#define WISP_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct wisp_lock {
	_Atomic uint32_t state;
};

#define WISP_LOCK_INIT { 0 }

/* The contended paths, out of line (wisp_lock.c). */
void wisp_lock_wait(struct wisp_lock *l);
void wisp_lock_wake(struct wisp_lock *l);

static inline void wisp_lock_init(struct wisp_lock *l)
{
	atomic_init(&l->state, 0);
}

static inline bool wisp_lock_try(struct wisp_lock *l)
{
	uint32_t free_ = 0;

	return atomic_compare_exchange_strong_explicit(&l->state, &free_, 1,
						       memory_order_acquire,
						       memory_order_relaxed);
}

static inline void wisp_lock_take(struct wisp_lock *l)
{
	if (__builtin_expect(!wisp_lock_try(l), 0))
		wisp_lock_wait(l);
}

static inline void wisp_lock_give(struct wisp_lock *l)
{
	/* 2: a thread may sleep on it (or did and was woken and went on
	 * waiting); wake one. */
	if (__builtin_expect(atomic_exchange_explicit(&l->state, 0,
						      memory_order_release) == 2, 0))
		wisp_lock_wake(l);
}

#endif
