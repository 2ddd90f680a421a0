// SPDX-License-Identifier: MIT
/*
 * test_glue_handoff.c - the engine never waits behind a posting thread
 * that holds a connection's transmit side (glue_engine.c, pump_tx and
 * glue_tx_unlock).
 *
 * A thread in glue_conn_send_now holds the connection's tx_lock while it
 * fills and sends. If the engine is asked to send on that connection
 * meanwhile, it leaves it (tx_handoff) instead of sleeping on the lock,
 * goes on with its other work, and the posting thread queues the
 * connection again when it lets go, so the request is still served.
 * Here the posting thread's tx_fill stops until the test lets it go:
 * an engine that waited on the lock could not run a command meanwhile.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_pair.h"

struct ho {
	struct glue_engine *e;
	struct glue_conn *c;
	int peer;
	uint8_t rx[64];
	atomic_int engine_fills;  /* tx_fill calls on the engine */
	atomic_bool poster_in;    /* the posting thread is in tx_fill */
	atomic_bool release;      /* and may leave it */
	atomic_bool cmd_done;
	atomic_bool ended;
};

static int ho_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct ho *h = arg;

	(void)cap;
	iov[0].iov_base = h->rx;
	iov[0].iov_len = sizeof(h->rx);
	return 1;
}

static int ho_rx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

/* Nothing to send, ever; the posting thread stays inside until the
 * test releases it. */
static int ho_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct ho *h = arg;

	(void)iov;
	(void)cap;
	if (glue_on_engine(h->e)) {
		atomic_fetch_add(&h->engine_fills, 1);
		return 0;
	}
	atomic_store(&h->poster_in, true);
	while (!atomic_load(&h->release))
		sched_yield();
	return 0;
}

static int ho_tx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

static void ho_ended(void *arg, int reason)
{
	struct ho *h = arg;

	(void)reason;
	atomic_store(&h->ended, true);
}

static const struct glue_conn_ops ho_ops = {
	.rx_want = ho_rx_want,
	.rx_done = ho_rx_done,
	.tx_fill = ho_tx_fill,
	.tx_done = ho_tx_done,
	.ended = ho_ended,
};

static void *poster_main(void *arg)
{
	struct ho *h = arg;

	glue_conn_send_now(h->c);
	return NULL;
}

/* Two commands in turn: the engine makes at least one pass over its
 * ready connections between them, so the kick made before the first is
 * acted on before the second can complete. */
static void *caller_main(void *arg)
{
	struct ho *h = arg;

	glue_engine_call(h->e, noop_cmd, NULL);
	glue_engine_call(h->e, noop_cmd, NULL);
	atomic_store(&h->cmd_done, true);
	return NULL;
}


static void engine_leaves_a_held_tx_side(enum glue_kind kind)
{
	struct ho h;
	pthread_t poster, caller;
	int sv[2], fills, during;
	bool done;

	memset(&h, 0, sizeof(h));
	setenv("WISP_BUSY_POLL_US", "0", 1);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	h.e = engine_or_skip(kind);
	h.c = glue_conn_add(h.e, sv[0], &ho_ops, &h);
	cr_assert_not_null(h.c);
	h.peer = sv[1];
	/* The engine's first fill (a new connection asks at once). */
	for (int64_t end = ms_now() + 10000;
	     !atomic_load(&h.engine_fills); usleep(200))
		cr_assert_lt(ms_now(), end, "the engine never filled");

	/* A posting thread takes the transmit side and stays in it. */
	cr_assert_eq(pthread_create(&poster, NULL, poster_main, &h), 0);
	cr_assert(wait_flag(&h.poster_in, 10000), "the poster never filled");
	fills = atomic_load(&h.engine_fills);

	/* The engine is asked to send on c, then to run commands. */
	glue_conn_kick(h.c);
	cr_assert_eq(pthread_create(&caller, NULL, caller_main, &h), 0);
	done = wait_flag(&h.cmd_done, 10000);
	during = atomic_load(&h.engine_fills);
	/* Let the poster go in any case, so that a failure ends cleanly. */
	atomic_store(&h.release, true);
	pthread_join(poster, NULL);
	pthread_join(caller, NULL);
	cr_assert(done, "the engine waited behind the posting thread");
	cr_assert_eq(during, fills,
		     "the engine filled while the poster held the side");

	/* The poster let go: the engine comes back for the kick. */
	for (int64_t end = ms_now() + 10000;
	     atomic_load(&h.engine_fills) == fills; usleep(200))
		cr_assert_lt(ms_now(), end, "the kick was lost");

	glue_engine_call(h.e, close_cmd, h.c);
	close(h.peer);
	cr_assert(wait_flag(&h.ended, 10000), "the connection never ended");
	glue_conn_free(h.c);
	glue_engine_destroy(h.e);
}

Test(glue_handoff, engine_leaves_a_held_tx_side_epoll, .timeout = 60)
{
	engine_leaves_a_held_tx_side(GLUE_EPOLL);
}

Test(glue_handoff, engine_leaves_a_held_tx_side_uring, .timeout = 60)
{
	engine_leaves_a_held_tx_side(GLUE_URING);
}
