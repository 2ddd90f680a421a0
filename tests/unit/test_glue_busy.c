// SPDX-License-Identifier: MIT
/*
 * test_glue_busy.c - the engine's busy polling (WISP_BUSY_POLL_US): how
 * the setting is read, that the engine spins (and finds octets while it
 * spins) after traffic, and that an idle engine does not spin at all.
 *
 * Nothing here measures speed: the assertions are about what the engine
 * did (its counters and the connection's), and about CPU time that an
 * idle engine must not use, whatever the load of the machine.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_pair.h"
#include "glue_stats.h"

/* ---- the setting ---- */

Test(glue_busy, parse_accepts_auto_and_bounded_decimals)
{
	unsigned us = 12345;

	cr_assert_eq(glue_busy_poll_parse("auto", 2, &us), 0);
	cr_assert_eq(us, 0, "auto spins not on a host with 2 CPUs");
	cr_assert_eq(glue_busy_poll_parse("auto", GLUE_BUSY_POLL_AUTO_CPUS,
					  &us), 0);
	cr_assert_eq(us, GLUE_BUSY_POLL_AUTO_US);
	cr_assert_eq(glue_busy_poll_parse("0", 64, &us), 0);
	cr_assert_eq(us, 0);
	cr_assert_eq(glue_busy_poll_parse("50", 1, &us), 0);
	cr_assert_eq(us, 50);
	cr_assert_eq(glue_busy_poll_parse("10000", 1, &us), 0);
	cr_assert_eq(us, GLUE_BUSY_POLL_MAX_US);
}

Test(glue_busy, parse_refuses_everything_else)
{
	static const char *const bad[] = {
		"", "10001", "-1", "+5", " 5", "5 ", "5us", "0x10", "1e3",
		"AUTO", "auto ", "99999999999999999999999", "on", "1.5",
	};
	unsigned us = 777;

	cr_assert_eq(glue_busy_poll_parse(NULL, 4, &us), -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(glue_busy_poll_parse(bad[i], 4, &us), -EINVAL,
			     "\"%s\" was accepted", bad[i]);
	cr_assert_eq(us, 777, "a refused value left *us alone");
}

Test(glue_busy, bad_environment_value_fails_the_engine)
{
	struct glue_engine *e;

	setenv("WISP_BUSY_POLL_US", "fast", 1);
	e = glue_engine_create(GLUE_EPOLL);
	cr_assert_null(e);
	cr_assert_eq(errno, EINVAL);
	setenv("WISP_BUSY_POLL_US", "", 1);
	cr_assert_null(glue_engine_create(GLUE_EPOLL));
	cr_assert_eq(errno, EINVAL);
}

/* ---- an engine with one connection fed from the test ---- */

struct bt {
	uint8_t rx[64];
	atomic_size_t got;
	atomic_bool ended;
};

static int bt_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct bt *t = arg;

	(void)cap;
	iov[0].iov_base = t->rx;
	iov[0].iov_len = sizeof(t->rx);
	return 1;
}

static int bt_rx_done(void *arg, size_t n)
{
	struct bt *t = arg;

	atomic_fetch_add(&t->got, n);
	return 0;
}

static int bt_tx_fill(void *arg, struct iovec *iov, int cap)
{
	(void)arg;
	(void)iov;
	(void)cap;
	return 0;
}

static int bt_tx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

static void bt_ended(void *arg, int reason)
{
	struct bt *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops bt_ops = {
	.rx_want = bt_rx_want,
	.rx_done = bt_rx_done,
	.tx_fill = bt_tx_fill,
	.tx_done = bt_tx_done,
	.ended = bt_ended,
};

static int64_t cpu_ms(void)
{
	struct rusage ru;

	cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

struct rig {
	struct bt t;
	struct glue_engine *e;
	struct glue_conn *c;
	int peer;
};

static void rig_up(struct rig *r, enum glue_kind kind, const char *us)
{
	int sv[2];

	memset(r, 0, sizeof(*r));
	atomic_init(&r->t.got, 0);
	atomic_init(&r->t.ended, false);
	setenv("WISP_BUSY_POLL_US", us, 1);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	r->e = engine_or_skip(kind);
	r->c = glue_conn_add(r->e, sv[0], &bt_ops, &r->t);
	cr_assert_not_null(r->c);
	r->peer = sv[1];
}

/* One octet from the peer; back once the engine has handed it over. */
static void rig_ping(struct rig *r)
{
	size_t want = atomic_load(&r->t.got) + 1;
	int64_t end = ms_now() + 10000;

	cr_assert_eq(send(r->peer, "x", 1, 0), 1);
	while (atomic_load(&r->t.got) < want) {
		cr_assert_lt(ms_now(), end, "the engine never received");
		sched_yield();
	}
}

static void rig_down(struct rig *r)
{
	glue_engine_call(r->e, close_cmd, r->c);
	close(r->peer);
	cr_assert(wait_flag(&r->t.ended, 10000), "the connection never ended");
	glue_conn_free(r->c);
	glue_engine_destroy(r->e);
}

/*
 * After traffic the engine opens a window and spins (the engine's and
 * the connection's counters move), and octets that come while it spins
 * are found by it: a hit. Pings follow each other as fast as the test
 * sees them received, so with a 10 ms window one lands inside a window
 * soon, usually at the first ping; only a broken engine, or a machine
 * so busy that the engine never spins in 40 s, reaches the bound.
 */
static void spins_and_hits(enum glue_kind kind)
{
	struct glue_engine_stats st;
	const struct glue_conn_stats *cs;
	struct rig r;
	long pings = 0;
	uint64_t conn_hits;

	rig_up(&r, kind, "10000");
	glue_engine_get_stats(r.e, &st);
	cr_assert_eq(st.bp_max_us, 10000);
	/* Bounded by time, not by a figure: a busy machine makes the
	 * engine stay off spinning for up to a second at a time. */
	for (int64_t end = ms_now() + 40000; ms_now() < end; pings++) {
		rig_ping(&r);
		glue_engine_get_stats(r.e, &st);
		if (st.bp_hits && st.bp_windows && st.bp_spins &&
		    atomic_load(&glue_conn_stats(r.c)->rx_busy_hits))
			break;
	}
	cs = glue_conn_stats(r.c);
	cr_assert_gt(st.bp_windows, 0, "no window opened after traffic");
	cr_assert_gt(st.bp_spins, 0);
	cr_assert_gt(st.bp_hits, 0, "%ld pings, none found while spinning",
		     pings);
	/* The engine counts a window's hit once the window ends, after
	 * the connection's: each of the connection's hits shows in the
	 * engine's count once that window is over. */
	conn_hits = atomic_load(&cs->rx_busy_hits);
	cr_assert_gt(conn_hits, 0);
	for (int64_t end = ms_now() + 10000;
	     st.bp_hits < conn_hits && ms_now() < end; usleep(1000))
		glue_engine_get_stats(r.e, &st);
	cr_assert_leq(conn_hits, st.bp_hits);
	rig_down(&r);
}

Test(glue_busy, spins_after_traffic_and_hits_uring, .timeout = 60)
{
	spins_and_hits(GLUE_URING);
}

Test(glue_busy, spins_after_traffic_and_hits_epoll, .timeout = 60)
{
	spins_and_hits(GLUE_EPOLL);
}

/*
 * Idle costs nothing. A window ends at most WISP_BUSY_POLL_US (10 ms
 * here) after the last octets moved; from then on, with no traffic, the
 * engine makes no pass at all (its spin counter stays put) and the
 * process uses next to no CPU. A second after the traffic, one more
 * second is watched. An engine that kept spinning would show in the
 * counter even on a machine too busy to give it much CPU.
 */
static void idle_does_not_spin(enum glue_kind kind)
{
	struct glue_engine_stats a, b;
	int64_t cpu;
	struct rig r;

	rig_up(&r, kind, "10000");
	for (int i = 0; i < 100; i++)
		rig_ping(&r);
	sleep(1);
	glue_engine_get_stats(r.e, &a);
	cr_assert_gt(a.bp_windows, 0, "the traffic opened windows");
	cpu = cpu_ms();
	sleep(1);
	cpu = cpu_ms() - cpu;
	glue_engine_get_stats(r.e, &b);
	cr_assert_eq(b.bp_spins, a.bp_spins, "the idle engine spun %llu "
		     "passes", (unsigned long long)(b.bp_spins - a.bp_spins));
	cr_assert_eq(b.bp_windows, a.bp_windows);
	cr_assert_lt(cpu, 50, "an idle second cost %lld ms of CPU",
		     (long long)cpu);
	rig_down(&r);
}

Test(glue_busy, idle_engine_does_not_spin_uring, .timeout = 60)
{
	idle_does_not_spin(GLUE_URING);
}

Test(glue_busy, idle_engine_does_not_spin_epoll, .timeout = 60)
{
	idle_does_not_spin(GLUE_EPOLL);
}

/*
 * While it spins, the engine reads the socket that brought octets itself
 * and leaves its readiness wait unarmed; once the window is over it must
 * wait for readiness again, or octets that come after a pause are never
 * received. A 1 ms window, a burst of pings, a pause of 20 ms (the engine
 * blocks), one more ping: rig_ping fails if it is not received within
 * 10 s. Some rounds, so that some bursts end with the engine spinning
 * on a socket it has not armed.
 */
static void waits_again_after_window(enum glue_kind kind)
{
	struct glue_engine_stats st;
	struct rig r;

	rig_up(&r, kind, "1000");
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 20; i++)
			rig_ping(&r);
		usleep(20000);
		rig_ping(&r);
	}
	glue_engine_get_stats(r.e, &st);
	cr_assert_gt(st.bp_windows, 0, "the traffic opened windows");
	cr_assert_eq(atomic_load(&r.t.got), 20 * 21);
	rig_down(&r);
}

Test(glue_busy, waits_for_readiness_after_a_window_uring, .timeout = 60)
{
	waits_again_after_window(GLUE_URING);
}

Test(glue_busy, waits_for_readiness_after_a_window_epoll, .timeout = 60)
{
	waits_again_after_window(GLUE_EPOLL);
}

/* WISP_BUSY_POLL_US=0: never a window, whatever the traffic. */
Test(glue_busy, zero_never_spins, .timeout = 60)
{
	struct glue_engine_stats st;
	struct rig r;

	rig_up(&r, GLUE_EPOLL, "0");
	for (int i = 0; i < 200; i++)
		rig_ping(&r);
	glue_engine_get_stats(r.e, &st);
	cr_assert_eq(st.bp_max_us, 0);
	cr_assert_eq(st.bp_windows, 0);
	cr_assert_eq(st.bp_spins, 0);
	cr_assert_eq(atomic_load(&glue_conn_stats(r.c)->rx_busy_hits), 0);
	rig_down(&r);
}
