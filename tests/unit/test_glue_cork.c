// SPDX-License-Identifier: MIT
/*
 * test_glue_cork.c - corked bursts (WISP_SEND_CORK, glue_engine.c
 * "Corking bursts"): a burst of small posts (glue_conn_send_post) goes
 * with MSG_MORE, and the tail that the kernel then holds always reaches
 * the peer: pushed by the engine's backstop when nobody polls, by a
 * poller that finds nothing (glue_conn_recv_now, glue_conn_send_poll) or
 * arms its CQ (glue_conn_release) while the engine cannot run. Sends
 * that are not posts never cork, nor does anything with the setting off.
 * The setting's parsing is in test_glue_us.c, with the other two
 * settings in microseconds.
 *
 * The test posts POSTS chunks of CHUNK octets from one thread, one
 * glue_conn_send_post each, as ibv_post_send does; the peer is a plain
 * TCP socket of the test, read only after the burst. The burst rule's
 * gap is set to GLUE_SEND_CORK_MAX_US, so that posts in a loop count as
 * a burst even in a sanitizer build. What each case asserts are the
 * connection's counters (sock_tx_corked, sock_tx_pushes,
 * sock_tx_push_engine) and that every octet arrives, in order, within a
 * generous deadline; how soon it arrived is only logged.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_pair.h"
#include "glue_queue.h"
#include "glue_stats.h"

#define POSTS 64
#define MAX_POSTS (4 * POSTS)
#define HOLD_TRIES 64             /* posts to end a burst held */
#define CHUNK 100
#define TOTAL ((MAX_POSTS + HOLD_TRIES) * CHUNK)

struct ct {
	struct glue_engine *e;
	struct glue_conn *c;
	int peer;
	uint8_t buf[TOTAL];
	struct glue_queue q;      /* what was posted, and what went */
	/* The engine held in a command (engine_hold). */
	struct engine_hold hold;
};

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 13 + (i >> 8));
}

/* An engine with WISP_SEND_CORK=setting and one connection to t->peer
 * (its MSS clamped to mss unless 0). */
static void ct_start_mss(struct ct *t, enum glue_kind kind,
			 const char *setting, int mss)
{
	int fd;

	memset(t, 0, sizeof(*t));
	glue_queue_init(&t->q, t->buf, TOTAL, CHUNK, pattern);
	cr_assert_eq(setenv("WISP_SEND_CORK", setting, 1), 0);
	t->e = engine_or_skip(kind);
	unsetenv("WISP_SEND_CORK");
	tcp_pair(&fd, &t->peer, &(struct tcp_pair_opts){ .mss = mss });
	t->c = glue_conn_add(t->e, fd, &glue_queue_ops, &t->q);
	cr_assert_not_null(t->c);
}

static void ct_start(struct ct *t, enum glue_kind kind, const char *setting)
{
	ct_start_mss(t, kind, setting, 0);
}

static void ct_finish(struct ct *t)
{
	close(t->peer);
	cr_assert(wait_flag(&t->q.ended, 10000), "the connection did not end");
	glue_conn_free(t->c);
	glue_engine_destroy(t->e);
}

#define ST(t, f) CONN_ST((t)->c, f)

/* Post chunks, one send each, as ibv_post_send does (post) or as the
 * other callers of glue_conn_send_now do: POSTS of them, and if a cork
 * is expected, more (up to MAX_POSTS) until the last one corked, in
 * case a preemption broke the burst just before its end or the engine
 * was sending meanwhile (posts then leave their WRs to it); a pause
 * before each further round lets the engine finish. Returns how many. */
static int ct_burst(struct ct *t, bool post, bool expect_cork)
{
	bool corked = false;
	int i;

	for (i = 0; i < MAX_POSTS && (i < POSTS || (expect_cork && !corked));
	     i++) {
		uint64_t before;

		if (i && i % POSTS == 0)
			usleep(20000);
		before = ST(t, tx_corked);

		atomic_fetch_add(&t->q.queued, CHUNK);
		if (!(post ? glue_conn_send_post(t->c, CHUNK) :
		      glue_conn_send_now(t->c)))
			glue_conn_kick(t->c);
		corked = ST(t, tx_corked) > before;
	}
	if (expect_cork)
		cr_assert(corked, "none of the last posts of %d corked", i);
	return i;
}

/* After a burst: more posts until one is held (GLUE_HOLD_POSTS), not
 * sent, so that the burst ends with posts held in the queue rather than
 * a tail held by the kernel. */
static void ct_hold_tail(struct ct *t)
{
	for (int i = 0; i < HOLD_TRIES; i++) {
		uint64_t before = ST(t, tx_held);

		atomic_fetch_add(&t->q.queued, CHUNK);
		if (!glue_conn_send_post(t->c, CHUNK))
			glue_conn_kick(t->c);
		if (ST(t, tx_held) > before)
			return;
	}
	cr_assert(false, "none of %d posts after the burst was held",
		  HOLD_TRIES);
}

/* Every octet posted, at the peer, checked; how long it took (us). */
static int64_t ct_read_all(struct ct *t)
{
	return glue_queue_read_all(&t->q, t->peer, pattern);
}

/* Nobody polls after the burst: the engine pushes the tail, or sends
 * the posts held (held). */
static void backstop(enum glue_kind kind, bool held)
{
	struct ct t;
	int64_t us;
	int posts;

	ct_start(&t, kind, "1000");
	posts = ct_burst(&t, true, true);
	if (held)
		ct_hold_tail(&t);
	us = ct_read_all(&t);
	for (int64_t end = ms_now() + 10000;
	     ms_now() < end && !ST(&t, tx_push_engine);)
		usleep(1000);
	cr_assert_geq(ST(&t, tx_push_engine), 1,
		      "the engine never pushed the held tail");
	cr_assert_eq(ST(&t, tx_pushes), ST(&t, tx_push_engine),
		     "a push by another thread, though none polled");
	cr_log_info("%s: %llu of %d posts corked, all octets at the peer "
		    "%lld us after the last", glue_engine_name(t.e),
		    (unsigned long long)ST(&t, tx_corked), posts,
		    (long long)us);
	ct_finish(&t);
}

Test(glue_cork, engine_pushes_tail_uring, .timeout = 60)
{
	backstop(GLUE_URING, false);
}

Test(glue_cork, engine_pushes_tail_epoll, .timeout = 60)
{
	backstop(GLUE_EPOLL, false);
}

Test(glue_cork, engine_sends_held_posts_uring, .timeout = 60)
{
	backstop(GLUE_URING, true);
}

Test(glue_cork, engine_sends_held_posts_epoll, .timeout = 60)
{
	backstop(GLUE_EPOLL, true);
}

/* The engine is held: the poller's call is what pushes the tail, or
 * sends the posts held (held); nothing else could send them. */
static void poller_pushes(void (*wait_call)(struct glue_conn *), bool held)
{
	struct ct t;

	ct_start(&t, GLUE_EPOLL, "1000");
	engine_hold(&t.hold, t.e);
	ct_burst(&t, true, true);
	if (held)
		ct_hold_tail(&t);
	cr_assert_eq(ST(&t, tx_pushes), 0);
	wait_call(t.c);
	cr_assert_eq(ST(&t, tx_pushes), 1, "the call pushed nothing");
	cr_assert_eq(ST(&t, tx_push_engine), 0);
	/* A second call finds nothing held: no system call. */
	wait_call(t.c);
	cr_assert_eq(ST(&t, tx_pushes), 1);
	ct_read_all(&t);
	engine_let_go(&t.hold);
	ct_finish(&t);
}

static void call_recv_now(struct glue_conn *c)
{
	glue_conn_recv_now(c);
}

Test(glue_cork, req_notify_pushes_tail, .timeout = 60)
{
	poller_pushes(glue_conn_release, false);
}

Test(glue_cork, req_notify_sends_held_posts, .timeout = 60)
{
	poller_pushes(glue_conn_release, true);
}

Test(glue_cork, empty_poll_pushes_tail, .timeout = 60)
{
	poller_pushes(glue_conn_send_poll, false);
}

Test(glue_cork, empty_poll_sends_held_posts, .timeout = 60)
{
	poller_pushes(glue_conn_send_poll, true);
}

Test(glue_cork, empty_receiving_poll_pushes_tail, .timeout = 60)
{
	poller_pushes(call_recv_now, false);
}

Test(glue_cork, empty_receiving_poll_sends_held_posts, .timeout = 60)
{
	poller_pushes(call_recv_now, true);
}

/* A graceful close right after a burst that ends with posts held: they
 * reach the peer before the end. */
Test(glue_cork, graceful_close_sends_held_posts, .timeout = 60)
{
	struct ct t;

	ct_start(&t, GLUE_EPOLL, "1000");
	engine_hold(&t.hold, t.e);
	ct_burst(&t, true, true);
	ct_hold_tail(&t);
	glue_conn_close(t.c, 0, true);
	engine_let_go(&t.hold);
	ct_read_all(&t);
	ct_finish(&t);
}

/* No cork without posts, with the setting off, or for sends of more
 * than half the MSS; the octets arrive with the engine held, sent by
 * each call itself. */
static void never_corks(const char *setting, bool post, int mss)
{
	struct ct t;

	ct_start_mss(&t, GLUE_EPOLL, setting, mss);
	engine_hold(&t.hold, t.e);
	ct_burst(&t, post, false);
	cr_assert_eq(ST(&t, tx_direct), POSTS);
	cr_assert_eq(ST(&t, tx_corked), 0);
	ct_read_all(&t);
	cr_assert_eq(ST(&t, tx_pushes), 0);
	engine_let_go(&t.hold);
	ct_finish(&t);
}

Test(glue_cork, sends_that_are_not_posts_never_cork, .timeout = 60)
{
	never_corks("1000", false, 0);
}

Test(glue_cork, off_never_corks, .timeout = 60)
{
	never_corks("off", true, 0);
}

/* An MSS of 150: a post of CHUNK (100) octets is more than half of it. */
Test(glue_cork, sends_over_half_the_mss_never_cork, .timeout = 60)
{
	never_corks("1000", true, 150);
}
