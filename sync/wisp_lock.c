// SPDX-License-Identifier: MIT
/*
 * wisp_lock.c - the contended paths of wisp_lock.h: spin a little, then
 * sleep on the lock's word with FUTEX_WAIT until a give wakes us.
 */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wisp_lock.h"

/* Spins before sleeping: the holders of these locks keep them for
 * a few hundred instructions, except across a receive's copy (the core
 * lock, verbs_stream.c), where sleeping is right. */
enum { SPINS = 64 };

static void futex(struct wisp_lock *l, int op, uint32_t val)
{
	/* EAGAIN (the word changed before we slept) and EINTR both mean
	 * look again, which the callers do. */
	syscall(SYS_futex, &l->state, op | FUTEX_PRIVATE_FLAG, val,
		NULL, NULL, 0);
}

void wisp_lock_wait(struct wisp_lock *l)
{
	for (int i = 0; i < SPINS; i++) {
		if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
		    wisp_lock_try(l))
			return;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	/* Mark it 2 as we look: whoever gives it next wakes a sleeper.
	 * Taking it this way leaves 2 behind, which costs the next give
	 * one needless wake at most. */
	while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire))
		futex(l, FUTEX_WAIT, 2);
}

void wisp_lock_wake(struct wisp_lock *l)
{
	futex(l, FUTEX_WAKE, 1);
}
