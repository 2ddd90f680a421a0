// SPDX-License-Identifier: MIT
/*
 * test_glue_wait.c - waiting for room (WISP_POLL_WAIT_US, glue_engine.c
 * "Waiting for room"): a thread that polls for completions and finds
 * none while its stream's sends wait on a full socket waits, bounded,
 * for room and sends itself, as a TCP sender blocked in send() does.
 *
 * Deterministic: the engine is held in a command (it can neither send
 * nor receive) wherever the assertions say who sent, the peer reads
 * nothing while a wait must find no room, and the assertions are about
 * the connection's counters and the octets that arrived, never about how
 * long anything took (the deadlines only end a broken run). The
 * setting's parsing is in test_glue_us.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_pair.h"
#include "glue_stats.h"

#define TOTAL (4u << 20)          /* octets the stream carries */
#define BUF   (64 * 1024)         /* both socket buffers */

struct wt {
	struct glue_engine *e;
	struct glue_conn *c;
	int peer;
	uint8_t *buf;
	atomic_size_t queued;     /* octets posted (test thread) */
	size_t sent;              /* octets tx_done reported */
	uint8_t rx[64];
	atomic_size_t got;        /* octets received from the peer */
	atomic_bool ended;
	size_t checked;           /* octets the peer read and checked */
	struct engine_hold hold;
};


static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + (i >> 9));
}

static int wt_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct wt *t = arg;

	(void)cap;
	iov[0].iov_base = t->rx;
	iov[0].iov_len = sizeof(t->rx);
	return 1;
}

static int wt_rx_done(void *arg, size_t n)
{
	struct wt *t = arg;

	atomic_fetch_add(&t->got, n);
	return 0;
}

static int wt_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct wt *t = arg;
	size_t end = atomic_load(&t->queued);

	if (t->sent >= end || cap < 1)
		return 0;
	iov[0].iov_base = t->buf + t->sent;
	iov[0].iov_len = end - t->sent;
	return 1;
}

static int wt_tx_done(void *arg, size_t n)
{
	struct wt *t = arg;

	t->sent += n;
	return 0;
}

static void wt_ended(void *arg, int reason)
{
	struct wt *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops wt_ops = {
	.rx_want = wt_rx_want,
	.rx_done = wt_rx_done,
	.tx_fill = wt_tx_fill,
	.tx_done = wt_tx_done,
	.ended = wt_ended,
};

static void wt_start(struct wt *t, enum glue_kind kind, const char *setting)
{
	int fd;

	memset(t, 0, sizeof(*t));
	t->buf = malloc(TOTAL);
	cr_assert_not_null(t->buf);
	for (size_t i = 0; i < TOTAL; i++)
		t->buf[i] = pattern(i);
	atomic_init(&t->queued, 0);
	atomic_init(&t->got, 0);
	atomic_init(&t->ended, false);
	if (setting)
		cr_assert_eq(setenv("WISP_POLL_WAIT_US", setting, 1), 0);
	t->e = engine_or_skip(kind);
	unsetenv("WISP_POLL_WAIT_US");
	/* Small buffers at both ends. */
	tcp_pair(&fd, &t->peer,
		 &(struct tcp_pair_opts){ .sndbuf = BUF, .rcvbuf = BUF });
	t->c = glue_conn_add(t->e, fd, &wt_ops, t);
	cr_assert_not_null(t->c);
}

static void wt_finish(struct wt *t)
{
	close(t->peer);
	cr_assert(wait_flag(&t->ended, 10000), "the connection did not end");
	glue_conn_free(t->c);
	glue_engine_destroy(t->e);
	free(t->buf);
}

#define ST(t, f) CONN_ST((t)->c, f)

/* Keep the engine thread in a command (glue_hold.h), once it adopted
 * the socket (its first visit also asks tx_fill once, which has
 * nothing yet). */
static void wt_hold(struct wt *t)
{
	usleep(20000);
	engine_hold(&t->hold, t->e);
}

/* Read what the peer has (without waiting) and check it. */
static void peer_drain(struct wt *t)
{
	static uint8_t rx[BUF];
	ssize_t r;

	while ((r = recv(t->peer, rx, sizeof(rx), MSG_DONTWAIT)) > 0) {
		for (ssize_t i = 0; i < r; i++)
			cr_assert_eq(rx[i], pattern(t->checked + (size_t)i),
				     "octet %zu differs", t->checked + (size_t)i);
		t->checked += (size_t)r;
	}
	cr_assert(r < 0 && errno == EAGAIN, "recv: %zd (%s)", r,
		  strerror(errno));
}

/* Post the whole stream and send until the socket is full (the posting
 * thread's send takes part of it, and a second says EAGAIN). */
static void fill(struct wt *t)
{
	atomic_store(&t->queued, TOTAL);
	for (int i = 0; i < 16 && !ST(t, tx_eagain); i++)
		glue_conn_send_post(t->c, TOTAL);
	cr_assert_geq(ST(t, tx_eagain), 1, "the socket never filled");
	cr_assert_lt(t->sent, TOTAL);
}

/* glue_conns_wait_tx_at on t's connection alone; rx: the caller also
 * receives on it. */
static bool wt_wait(struct wt *t, bool rx)
{
	return glue_conns_wait_tx_at(&t->c, &rx, 1, glue_poll_clock_ms());
}

/* What most cases start from: an engine with WISP_POLL_WAIT_US=setting,
 * held, and the stream posted until the socket is full. */
static void wt_start_full(struct wt *t, enum glue_kind kind,
			  const char *setting)
{
	wt_start(t, kind, setting);
	wt_hold(t);
	fill(t);
}

/* The peer reads, checking, until want octets arrived (within 20 s). */
static void peer_read(struct wt *t, size_t want)
{
	for (int64_t end = ms_now() + 20000;
	     t->checked < want && ms_now() < end;) {
		peer_drain(t);
		usleep(500);
	}
	cr_assert_eq(t->checked, want, "%zu of %zu octets arrived",
		     t->checked, want);
}

/* ---- the wait ---- */

/*
 * With the engine held: a wait on a full socket whose peer reads nothing
 * ends without sending; once the peer reads, the waiting thread sends
 * the whole stream itself (the engine sent nothing), every octet in
 * order.
 */
static void poller_sends(enum glue_kind kind)
{
	struct wt t;
	size_t before;

	wt_start_full(&t, kind, "1000");
	before = t.sent;
	cr_assert(!wt_wait(&t, false),
		      "nothing can move while the peer reads nothing");
	cr_assert_eq(t.sent, before);
	cr_assert_eq(ST(&t, tx_poll_waits), 1);
	cr_assert_eq(ST(&t, tx_poll_woken), 0);
	for (int64_t end = ms_now() + 20000;
	     t.checked < TOTAL && ms_now() < end;) {
		peer_drain(&t);
		wt_wait(&t, false);
	}
	cr_assert_eq(t.checked, TOTAL, "%zu of %u octets arrived", t.checked,
		     TOTAL);
	cr_assert_eq(ST(&t, tx_sends), 0, "the engine sent");
	cr_assert_geq(ST(&t, tx_poll_woken), 1);
	engine_let_go(&t.hold);
	wt_finish(&t);
}

Test(glue_wait, poller_waits_and_sends_uring, .timeout = 60)
{
	poller_sends(GLUE_URING);
}

Test(glue_wait, poller_waits_and_sends_epoll, .timeout = 60)
{
	poller_sends(GLUE_EPOLL);
}

/* WISP_POLL_WAIT_US=off: the same full socket, no wait, no send. */
Test(glue_wait, off_never_waits, .timeout = 60)
{
	struct wt t;
	size_t before;

	wt_start_full(&t, GLUE_EPOLL, "off");
	before = t.sent;
	peer_drain(&t);
	cr_assert(!wt_wait(&t, false));
	cr_assert_eq(t.sent, before);
	cr_assert_eq(ST(&t, tx_poll_waits), 0);
	engine_let_go(&t.hold);
	/* The engine sends the rest. */
	peer_read(&t, TOTAL);
	wt_finish(&t);
}

/* A stream the caller also receives on: octets to read end the wait,
 * and the waiting thread receives them. */
Test(glue_wait, octets_to_read_end_the_wait, .timeout = 60)
{
	static const char msg[10] = "0123456789";
	struct wt t;

	wt_start_full(&t, GLUE_EPOLL, "10000");
	cr_assert_eq(send(t.peer, msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
	for (int64_t end = ms_now() + 10000;
	     atomic_load(&t.got) < sizeof(msg) && ms_now() < end;)
		wt_wait(&t, true);
	cr_assert_eq(atomic_load(&t.got), sizeof(msg));
	cr_assert_geq(ST(&t, tx_poll_woken), 1);
	cr_assert_eq(ST(&t, tx_sends), 0);
	engine_let_go(&t.hold);
	peer_read(&t, TOTAL);
	wt_finish(&t);
}

/*
 * A poller that waited and then stops (arms its CQ: glue_conn_release):
 * the engine sends the rest of the stream, with nobody polling.
 */
static void engine_takes_back(enum glue_kind kind)
{
	struct wt t;

	wt_start_full(&t, kind, "on");
	wt_wait(&t, false);
	cr_assert_eq(ST(&t, tx_poll_waits), 1);
	glue_conn_release(t.c);
	engine_let_go(&t.hold);
	peer_read(&t, TOTAL);
	cr_assert_geq(ST(&t, tx_sends), 1, "the engine sent the rest");
	cr_assert_eq(ST(&t, tx_poll_waits), 1);
	wt_finish(&t);
}

Test(glue_wait, engine_takes_back_after_release_uring, .timeout = 60)
{
	engine_takes_back(GLUE_URING);
}

Test(glue_wait, engine_takes_back_after_release_epoll, .timeout = 60)
{
	engine_takes_back(GLUE_EPOLL);
}

/*
 * A WR that only a kick announced (a post whose own send found the
 * transmit side taken: glue_conn_send_post false, then glue_conn_kick),
 * while a thread polls the CQ and so has the sends (app_sends): the
 * engine leaves it to that thread, which goes by tx_more. The engine
 * once kept the kick set instead: the poller saw nothing queued, every
 * later kick was turned away as "already kicked", and the WR stayed
 * unsent until the poller paused for GLUE_APP_POLL_MS (never, for a
 * program that busy-polls: the bandwidth run's "no completion for
 * 10000 ms").
 *
 * The engine is held while the WR is queued and kicked, and let go right
 * after a poll, so that the pass it resumes visits c while the poll is
 * fresh; a command queued after that (noop_cmd) returns once that pass is
 * over. The poll after it must then have sent the WR, or the engine must
 * have (had its visit come GLUE_APP_POLL_MS late all the same, on a
 * loaded host, it sends itself): either way it is sent by then, and who
 * sent it is not asserted.
 */
static void kicked_wr_goes(enum glue_kind kind)
{
	struct wt t;

	wt_start(&t, kind, "on");
	wt_hold(&t);
	atomic_store(&t.queued, 4096);
	glue_conn_kick(t.c);
	glue_conn_tx_polled(t.c);
	engine_let_go(&t.hold);
	glue_engine_call(t.e, noop_cmd, NULL);
	glue_conn_tx_polled(t.c);
	cr_assert_geq(ST(&t, tx_direct) + ST(&t, tx_sends), 1,
		      "nobody sent the kicked WR: stranded");
	peer_read(&t, 4096);
	wt_finish(&t);
}

Test(glue_wait, kicked_wr_goes_out_from_the_poller_uring, .timeout = 60)
{
	kicked_wr_goes(GLUE_URING);
}

Test(glue_wait, kicked_wr_goes_out_from_the_poller_epoll, .timeout = 60)
{
	kicked_wr_goes(GLUE_EPOLL);
}
