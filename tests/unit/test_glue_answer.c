// SPDX-License-Identifier: MIT
/*
 * test_glue_answer.c - a posting thread waits for its ping-pong's answer
 * (WISP_POST_POLL, glue_engine.c "Waiting for the answer"). The
 * setting's parsing is in test_glue_us.c.
 *
 * The detector (struct glue_answer) is driven with a clock of the
 * test's: it turns on after GLUE_ANSWER_STREAK lone posts answered in
 * time, stays off for a stream of posts, for answers that complete work
 * and for late ones, turns off again after a wait that ran out, and its
 * wait follows the answer time up to the bound.
 *
 * Then a connection of a real engine, fed through a socket pair by an
 * echo thread: a post's answer is in the owner's buffer when
 * glue_conn_send_post returns, received by the posting thread (the
 * connection's counters say who received: sock_rx_post_hits, and not the
 * engine), and nothing waits where the pattern is absent. Whether a
 * given round trip comes within the wait depends on the machine, so
 * those cases repeat rounds until one shows it, bounded by a generous
 * deadline; nothing is asserted about speed.
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
#include "glue_stats.h"

#define US 1000ll            /* ns */
#define MAX_NS (100 * US)

/* ---- the detector, on the test's clock ---- */

/* n lone posts at *t, each answered rtt later by octets with flags;
 * returns the wait the last post was given. */
static int64_t ping_pong(struct glue_answer *a, int64_t *t, int n,
			 int64_t rtt, int flags)
{
	int64_t w = 0;

	for (int i = 0; i < n; i++) {
		w = glue_answer_post(a, *t, true);
		*t += rtt;
		cr_assert(glue_answer_waiting(a));
		glue_answer_rx(a, *t, flags);
		cr_assert(!glue_answer_waiting(a));
		*t += 1 * US;   /* the program's turn */
	}
	return w;
}

Test(glue_answer, turns_on_after_a_ping_pong)
{
	struct glue_answer a;
	int64_t t = 1000 * US;

	glue_answer_init(&a, MAX_NS);
	cr_assert_eq(ping_pong(&a, &t, GLUE_ANSWER_STREAK, 10 * US, 0), 0,
		     "no wait before the streak is complete");
	/* The next lone post waits twice the answer time. */
	cr_assert_eq(glue_answer_post(&a, t, true), 20 * US);
	glue_answer_rx(&a, t + 10 * US, 0);
}

Test(glue_answer, stays_off_for_a_stream_and_a_burst)
{
	struct glue_answer a;
	int64_t t = 1000 * US;

	glue_answer_init(&a, MAX_NS);
	/* A stream: posts, each before the last one's answer, now and then
	 * something back (an acknowledgement of a kind). */
	for (int i = 0; i < 1000; i++) {
		cr_assert_eq(glue_answer_post(&a, t, true), 0,
			     "post %d of a stream waited", i);
		t += 1 * US;
		if (i % 16 == 15)
			glue_answer_rx(&a, t, 0);
	}
	/* On, then a burst of two posts: the second finds the first
	 * unanswered, and the streak starts over. */
	ping_pong(&a, &t, GLUE_ANSWER_STREAK, 10 * US, 0);
	cr_assert_gt(glue_answer_post(&a, t, true), 0);
	cr_assert_eq(glue_answer_post(&a, t + 1 * US, true), 0);
	/* The second one's answer is the first of a new streak. */
	t += 20 * US;
	glue_answer_rx(&a, t, 0);
	cr_assert_eq(ping_pong(&a, &t, GLUE_ANSWER_STREAK - 1, 10 * US, 0),
		     0, "waited before a new streak was complete");
	cr_assert_gt(glue_answer_post(&a, t, true), 0);
	/* Posts that are not lone (the engine sent them, or more was
	 * queued behind) end it too. */
	glue_answer_rx(&a, t + 10 * US, 0);
	t += 20 * US;
	glue_answer_post(&a, t, false);
	cr_assert(!glue_answer_waiting(&a));
	cr_assert_eq(glue_answer_post(&a, t + 1 * US, true), 0);
}

Test(glue_answer, stays_off_for_answers_that_complete_work)
{
	struct glue_answer a;
	int64_t t = 1000 * US;

	/* A SEND ping-pong: each answer completes a receive. */
	glue_answer_init(&a, MAX_NS);
	ping_pong(&a, &t, 100, 10 * US, GLUE_RX_COMPLETED);
	cr_assert_eq(glue_answer_post(&a, t, true), 0);
	/* One such answer in a WRITE ping-pong ends the streak. */
	glue_answer_rx(&a, t + 10 * US, 0);
	t += 20 * US;
	ping_pong(&a, &t, GLUE_ANSWER_STREAK, 10 * US, 0);
	ping_pong(&a, &t, 1, 10 * US, GLUE_RX_COMPLETED);
	cr_assert_eq(glue_answer_post(&a, t, true), 0);
}

/* The receive path passes no time with an answer that completed work
 * (glue_engine.c, rx_drain: a SEND ping-pong's every answer then spares
 * a clock read): such an answer ends the streak and clears the post
 * whatever the time says, and leaves the answer time as it was. */
Test(glue_answer, answers_that_complete_work_need_no_time)
{
	static const int64_t at[] = { 0, 5 * US };   /* none; a plausible one */

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		struct glue_answer a;
		int64_t t = 1000 * US, srtt, post;

		glue_answer_init(&a, MAX_NS);
		ping_pong(&a, &t, GLUE_ANSWER_STREAK, 10 * US, 0);
		srtt = atomic_load(&a.srtt_ns);
		cr_assert_eq(glue_answer_post(&a, t, true), 20 * US);
		post = t;
		glue_answer_rx(&a, at[i] ? post + at[i] : 0,
			       GLUE_RX_COMPLETED);
		cr_assert(!glue_answer_waiting(&a));
		cr_assert_eq(atomic_load(&a.streak), 0);
		cr_assert_eq(atomic_load(&a.srtt_ns), srtt);
		/* Off again until a new streak. */
		t += 20 * US;
		cr_assert_eq(ping_pong(&a, &t, GLUE_ANSWER_STREAK, 10 * US, 0),
			     0);
		cr_assert_gt(glue_answer_post(&a, t, true), 0);
	}
}

Test(glue_answer, stays_off_for_late_answers)
{
	struct glue_answer a;
	int64_t t = 1000 * US;

	glue_answer_init(&a, MAX_NS);
	ping_pong(&a, &t, 100, MAX_NS + 1, 0);
	cr_assert_eq(glue_answer_post(&a, t, true), 0);
}

Test(glue_answer, turns_off_after_a_wait_runs_out)
{
	struct glue_answer a;
	int64_t t = 1000 * US;

	glue_answer_init(&a, MAX_NS);
	ping_pong(&a, &t, GLUE_ANSWER_STREAK, 10 * US, 0);
	cr_assert_gt(glue_answer_post(&a, t, true), 0);
	glue_answer_miss(&a);
	/* The late answer still counts as one of a new streak. */
	t += 50 * US;
	glue_answer_rx(&a, t, 0);
	cr_assert_eq(ping_pong(&a, &t, GLUE_ANSWER_STREAK - 1, 10 * US, 0),
		     0, "waited again before a new streak was complete");
	cr_assert_gt(glue_answer_post(&a, t, true), 0);
}

Test(glue_answer, wait_follows_the_answer_time_within_bounds)
{
	struct glue_answer a;
	int64_t t = 1000 * US, w;

	glue_answer_init(&a, MAX_NS);
	ping_pong(&a, &t, GLUE_ANSWER_STREAK, 1 * US, 0);
	cr_assert_eq(glue_answer_post(&a, t, true), GLUE_ANSWER_MIN_NS,
		     "a very short answer time still waits the least");
	glue_answer_rx(&a, t + 1 * US, 0);
	t += 2 * US;
	/* Slower answers: the smoothed time moves up by an eighth of the
	 * difference per answer; the wait is twice it, never above the
	 * bound. */
	w = ping_pong(&a, &t, 64, 80 * US, 0);
	cr_assert_leq(w, MAX_NS);
	cr_assert_eq(glue_answer_post(&a, t, true), MAX_NS);
}

Test(glue_answer, off_never_waits)
{
	struct glue_answer a;
	int64_t t = 1000 * US;

	glue_answer_init(&a, 0);
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(glue_answer_post(&a, t, true), 0);
		cr_assert(!glue_answer_waiting(&a));
		glue_answer_rx(&a, t + 10 * US, 0);
		t += 20 * US;
	}
}

/* ---- a connection of a real engine ---- */

#define MSG 8

struct at {
	struct glue_engine *e;
	struct glue_conn *c;
	int peer;
	/* Transmit: one message of MSG octets when pending (tx side). */
	uint8_t tx[MSG];
	atomic_bool pending;
	size_t tx_off;
	/* Receive: octets placed, and what rx_done says of them. */
	uint8_t rx[256];
	atomic_size_t got;
	atomic_int rx_flags;      /* returned for every receive */
	atomic_size_t partial_below; /* GLUE_RX_PARTIAL while got is below */
	atomic_bool ended;
	/* The echo thread. */
	pthread_t echo;
	atomic_bool stop;
	atomic_bool echo_on;      /* answer what arrives */
	atomic_int split;         /* answer in two parts, the second when
				   * released */
	atomic_bool second;       /* release the second part */
};

static int at_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct at *t = arg;

	(void)cap;
	iov[0].iov_base = t->rx;
	iov[0].iov_len = sizeof(t->rx);
	return 1;
}

static int at_rx_done(void *arg, size_t n)
{
	struct at *t = arg;
	size_t got;

	if (!n)
		return 0;
	got = atomic_fetch_add(&t->got, n) + n;
	return atomic_load(&t->rx_flags) |
	       (got < atomic_load(&t->partial_below) ? GLUE_RX_PARTIAL : 0);
}

static int at_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct at *t = arg;

	(void)cap;
	if (!atomic_load(&t->pending))
		return 0;
	iov[0].iov_base = t->tx + t->tx_off;
	iov[0].iov_len = MSG - t->tx_off;
	return 1;
}

static int at_tx_done(void *arg, size_t n)
{
	struct at *t = arg;

	t->tx_off += n;
	if (t->tx_off == MSG) {
		t->tx_off = 0;
		atomic_store(&t->pending, false);
	}
	return 0;
}

static void at_ended(void *arg, int reason)
{
	struct at *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops at_ops = {
	.rx_want = at_rx_want,
	.rx_done = at_rx_done,
	.tx_fill = at_tx_fill,
	.tx_done = at_tx_done,
	.ended = at_ended,
};

/* The peer: reads each message and, while echo_on, answers it at once
 * with MSG octets (split: 4 now, 4 once the test releases them). */
static void *echo_main(void *arg)
{
	struct at *t = arg;
	uint8_t b[MSG * 8];

	while (!atomic_load(&t->stop)) {
		ssize_t n = recv(t->peer, b, sizeof(b), MSG_DONTWAIT);

		if (n == 0)
			break;
		if (n < 0) {
			sched_yield();
			continue;
		}
		if (!atomic_load(&t->echo_on))
			continue;
		/* A failed send leaves the answer missing: the test's
		 * bounded wait for it reports that. */
		if (!atomic_load(&t->split)) {
			if (send(t->peer, b, MSG, 0) != MSG)
				break;
			continue;
		}
		if (send(t->peer, b, MSG / 2, 0) != MSG / 2)
			break;
		while (!atomic_load(&t->second) && !atomic_load(&t->stop))
			sched_yield();
		atomic_store(&t->second, false);
		if (send(t->peer, b, MSG / 2, 0) != MSG / 2)
			break;
	}
	return NULL;
}

static void at_up(struct at *t, enum glue_kind kind, const char *setting)
{
	int sv[2];

	memset(t, 0, sizeof(*t));
	atomic_init(&t->pending, false);
	atomic_init(&t->got, 0);
	atomic_init(&t->rx_flags, 0);
	atomic_init(&t->partial_below, 0);
	atomic_init(&t->ended, false);
	atomic_init(&t->stop, false);
	atomic_init(&t->echo_on, true);
	atomic_init(&t->split, 0);
	atomic_init(&t->second, false);
	setenv("WISP_POST_POLL", setting, 1);
	setenv("WISP_BUSY_POLL_US", "0", 1);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	t->e = engine_or_skip(kind);
	unsetenv("WISP_POST_POLL");
	unsetenv("WISP_BUSY_POLL_US");
	t->c = glue_conn_add(t->e, sv[0], &at_ops, t);
	cr_assert_not_null(t->c);
	t->peer = sv[1];
	cr_assert_eq(pthread_create(&t->echo, NULL, echo_main, t), 0);
}

static void at_down(struct at *t)
{
	atomic_store(&t->stop, true);
	pthread_join(t->echo, NULL);
	glue_engine_call(t->e, close_cmd, t->c);
	close(t->peer);
	cr_assert(wait_flag(&t->ended, 10000), "the connection never ended");
	glue_conn_free(t->c);
	glue_engine_destroy(t->e);
}

/* Wait (bounded) until `got` reaches want, whoever receives. */
static void at_wait_got(struct at *t, size_t want)
{
	int64_t end = ms_now() + 10000;

	while (atomic_load(&t->got) < want) {
		cr_assert_lt(ms_now(), end, "the answer never arrived: %zu of "
			     "%zu octets", atomic_load(&t->got), want);
		sched_yield();
	}
}

/* Post one message as ibv_post_send does; true if its whole answer
 * (MSG octets more than before) was placed when the post returned. */
static bool at_post(struct at *t)
{
	size_t want = atomic_load(&t->got) + MSG;

	atomic_store(&t->pending, true);
	if (!glue_conn_send_post(t->c, MSG))
		glue_conn_kick(t->c);
	return atomic_load(&t->got) >= want;
}

#define ST(t, f) CONN_ST((t)->c, f)

/* Receives the engine made: all, less those of polling and posting
 * threads. */
static uint64_t engine_recvs(const struct at *t)
{
	return ST(t, rx_recvs) - ST(t, rx_direct);
}

/*
 * A ping-pong: the posting thread receives the answer itself, which is
 * placed when glue_conn_send_post returns, and the engine did not
 * receive it. A round trip that the machine makes slower than the wait
 * is a miss and the round is repeated; a broken feature never hits.
 */
static void answer_placed_by_poster(enum glue_kind kind)
{
	struct at t;
	long rounds = 0;
	bool seen = false;

	/* The largest bound: a wait of twice the answer time, up to 10 ms,
	 * so that hits come even on a loaded machine. */
	at_up(&t, kind, "10000");
	for (int64_t end = ms_now() + 40000; ms_now() < end && !seen;
	     rounds++) {
		uint64_t hits = ST(&t, rx_post_hits);
		uint64_t eng = engine_recvs(&t);
		size_t want = atomic_load(&t.got) + MSG;
		bool placed = at_post(&t);

		if (placed && ST(&t, rx_post_hits) == hits + 1 &&
		    engine_recvs(&t) == eng)
			seen = true;
		at_wait_got(&t, want);
	}
	cr_assert(seen, "%ld round trips, none whose answer the posting "
		  "thread placed before the post returned (waits %llu, hits "
		  "%llu)", rounds, (unsigned long long)ST(&t, rx_post_waits),
		  (unsigned long long)ST(&t, rx_post_hits));
	cr_assert_geq(ST(&t, rx_post_waits), ST(&t, rx_post_hits));
	cr_assert_geq(ST(&t, rx_direct), ST(&t, rx_post_hits),
		      "the poster's receives count as direct ones");
	at_down(&t);
}

Test(glue_answer, answer_placed_by_the_poster_uring, .timeout = 60)
{
	answer_placed_by_poster(GLUE_URING);
}

Test(glue_answer, answer_placed_by_the_poster_epoll, .timeout = 60)
{
	answer_placed_by_poster(GLUE_EPOLL);
}

/* Round trips whose answers complete work (a SEND ping-pong), with no
 * answer at all (a stream), or with the setting off: no post ever
 * waits, whatever the timing. Every answer still arrives. */
static void never_waits(const char *setting, int flags, bool echo)
{
	struct at t;

	at_up(&t, GLUE_EPOLL, setting);
	atomic_store(&t.rx_flags, flags);
	atomic_store(&t.echo_on, echo);
	for (int i = 0; i < 200; i++) {
		size_t want = atomic_load(&t.got) + MSG;

		at_post(&t);
		if (echo)
			at_wait_got(&t, want);
	}
	cr_assert_eq(ST(&t, rx_post_waits), 0);
	cr_assert_eq(ST(&t, rx_post_hits), 0);
	at_down(&t);
}

Test(glue_answer, no_wait_for_answers_that_complete_work, .timeout = 60)
{
	never_waits("10000", GLUE_RX_COMPLETED, true);
}

Test(glue_answer, no_wait_in_a_stream, .timeout = 60)
{
	never_waits("10000", 0, false);
}

Test(glue_answer, no_wait_when_off, .timeout = 60)
{
	never_waits("off", 0, true);
}

/*
 * An answer that comes in two parts, the second only after the post
 * returned: the poster's wait receives the first part (GLUE_RX_PARTIAL
 * from the owner), does not count a hit, hands the socket back, and the
 * engine receives the rest.
 */
Test(glue_answer, half_an_answer_is_no_hit, .timeout = 60)
{
	struct at t;
	long rounds = 0;
	bool seen = false;

	at_up(&t, GLUE_EPOLL, "10000");
	for (int64_t end = ms_now() + 40000; ms_now() < end && !seen;
	     rounds++) {
		uint64_t hits = ST(&t, rx_post_hits);
		uint64_t waits = ST(&t, rx_post_waits);
		size_t want = atomic_load(&t.got) + MSG;

		/* Whole answers build the streak; then a split one. */
		bool split = rounds % 8 == 7;

		atomic_store(&t.partial_below, split ? want : 0);
		atomic_store(&t.split, split);
		at_post(&t);
		if (split) {
			/* The first half was placed by the poster (a wait
			 * that ran its course took it, or the engine did). */
			if (ST(&t, rx_post_waits) == waits + 1 &&
			    atomic_load(&t.got) == want - MSG / 2) {
				cr_assert_eq(ST(&t, rx_post_hits), hits,
					     "half an answer counted as a hit");
				seen = true;
			}
			atomic_store(&t.second, true);
		}
		at_wait_got(&t, want);
		atomic_store(&t.split, 0);
	}
	cr_assert(seen, "%ld rounds, no split answer met a waiting poster",
		  rounds);
	at_down(&t);
}
