/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tcp-glue suites: a monotonic clock in microseconds and
 * in milliseconds, and the engine thread held in a command
 * (glue_engine_call) until let go, so that it can neither send nor
 * receive while a test drives a connection from its own thread.
 */
#ifndef WISP_GLUE_HOLD_H
#define WISP_GLUE_HOLD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "glue.h"

static inline int64_t us_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t ms_now(void)
{
	return us_now() / 1000;
}

struct engine_hold {
	struct glue_engine *e;
	pthread_t thread;
	atomic_bool held, release;
};

/* Runs on the engine thread: stays until released (30 s at most). */
static inline void engine_hold_fn(void *arg)
{
	struct engine_hold *h = arg;

	atomic_store(&h->held, true);
	for (int64_t end = ms_now() + 30000;
	     !atomic_load(&h->release) && ms_now() < end;)
		usleep(200);
}

static inline void *engine_hold_main(void *arg)
{
	struct engine_hold *h = arg;

	glue_engine_call(h->e, engine_hold_fn, h);
	return NULL;
}

/* Returns once e's thread is in the command. */
static inline void engine_hold(struct engine_hold *h, struct glue_engine *e)
{
	h->e = e;
	atomic_init(&h->held, false);
	atomic_init(&h->release, false);
	cr_assert_eq(pthread_create(&h->thread, NULL, engine_hold_main, h), 0);
	for (int64_t end = ms_now() + 10000;
	     !atomic_load(&h->held) && ms_now() < end;)
		usleep(200);
	cr_assert(atomic_load(&h->held), "the engine did not take the command");
}

static inline void engine_let_go(struct engine_hold *h)
{
	atomic_store(&h->release, true);
	cr_assert_eq(pthread_join(h->thread, NULL), 0);
}

#endif
