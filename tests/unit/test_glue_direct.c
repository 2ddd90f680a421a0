// SPDX-License-Identifier: MIT
/*
 * test_glue_direct.c - who sends a stream (glue_engine.c "Who sends"):
 * the posting thread sends what it posts, fill after fill, while the
 * socket takes it; the engine takes over only once the socket is full,
 * waits for room without being woken by the posts made meanwhile, sends
 * everything in order when room comes, and then leaves the stream to
 * the posting thread again. On both engines.
 *
 * The owner is a byte stream of fixed-size messages with a known
 * pattern: the test "posts" by moving the end of what tx_fill may offer,
 * and the peer, a plain TCP socket of the test, checks every octet in
 * order. Who sent is read from the connection's counters (tx_direct: a
 * posting thread's sendmsg; tx_sends: the engine's) and from the
 * engine's (kicks: connections other threads queued for it; wakes: its
 * eventfd written). Nothing here depends on timing: the socket fills
 * because the peer does not read, and it never fills while the peer
 * reads each message before the next is posted.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "glue.h"
#include "glue_stats.h"

#define DT_TOTAL   (8u << 20)     /* the stream's octets, at most */
#define DT_SMALL   64u            /* message sizes */
#define DT_LARGE   4096u
#define DT_BUF     8192           /* both socket buffers, when small */

struct dt {
	struct glue_engine *e;
	struct glue_conn *c;
	int snd;                  /* c's socket, for its queue sizes */
	uint8_t *buf;             /* the stream: pattern(i) at i */
	size_t msg;               /* octets per message */
	int per_fill;             /* messages per tx_fill, at most */
	atomic_size_t posted;     /* what tx_fill may offer: [sent, posted) */
	atomic_size_t sent;       /* reported by tx_done */
	atomic_int engine_fills;
	atomic_bool ended;
};

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 13 + (i >> 10));
}

static int dt_rx_want(void *arg, struct iovec *iov, int cap)
{
	static uint8_t sink[64];

	(void)arg;
	(void)cap;
	iov[0].iov_base = sink;
	iov[0].iov_len = sizeof(sink);
	return 1;
}

static int dt_rx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

/* One iovec per message (the first may be a message's rest), up to
 * per_fill messages. */
static int dt_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct dt *t = arg;
	size_t off = atomic_load(&t->sent);
	size_t end = atomic_load(&t->posted);
	int n = 0;

	if (glue_on_engine(t->e))
		atomic_fetch_add(&t->engine_fills, 1);
	while (off < end && n < cap && n < t->per_fill) {
		size_t next = (off / t->msg + 1) * t->msg;

		iov[n].iov_base = t->buf + off;
		iov[n].iov_len = next - off;
		off = next;
		n++;
	}
	return n;
}

static int dt_tx_done(void *arg, size_t n)
{
	struct dt *t = arg;

	atomic_fetch_add(&t->sent, n);
	return 0;
}

static void dt_ended(void *arg, int reason)
{
	struct dt *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops dt_ops = {
	.rx_want = dt_rx_want,
	.rx_done = dt_rx_done,
	.tx_fill = dt_tx_fill,
	.tx_done = dt_tx_done,
	.ended = dt_ended,
};

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A loopback TCP pair: *snd for the engine, *rcv the peer's. small:
 * both buffers DT_BUF (set before the handshake, so that the window
 * follows), so that a peer that does not read fills the socket soon. */
static void tcp_pair(int *snd, int *rcv, bool small)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct timeval tv = { .tv_sec = 10 };
	socklen_t len = sizeof(sin);
	int sz = DT_BUF;
	int lfd;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(lfd >= 0);
	if (small)
		cr_assert_eq(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &sz,
					sizeof(sz)), 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	cr_assert_eq(listen(lfd, 1), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sin, &len), 0);
	*snd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(*snd >= 0);
	if (small)
		cr_assert_eq(setsockopt(*snd, SOL_SOCKET, SO_SNDBUF, &sz,
					sizeof(sz)), 0);
	cr_assert_eq(connect(*snd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	*rcv = accept(lfd, NULL, NULL);
	cr_assert(*rcv >= 0);
	/* A read that waits this long has failed: no test hangs. */
	cr_assert_eq(setsockopt(*rcv, SOL_SOCKET, SO_RCVTIMEO, &tv,
				sizeof(tv)), 0);
	close(lfd);
}

static void noop_cmd(void *arg)
{
	(void)arg;
}

/* Two commands in turn: the engine has finished the pass it was in and
 * made one more, so whatever it was asked before is done. */
static void engine_settle(struct dt *t)
{
	glue_engine_call(t->e, noop_cmd, NULL);
	glue_engine_call(t->e, noop_cmd, NULL);
}

static void dt_start(struct dt *t, enum glue_kind kind, size_t msg,
		     int per_fill, bool small, int *peer)
{
	int snd;

	memset(t, 0, sizeof(*t));
	t->msg = msg;
	t->per_fill = per_fill;
	t->buf = malloc(DT_TOTAL);
	cr_assert_not_null(t->buf);
	for (size_t i = 0; i < DT_TOTAL; i++)
		t->buf[i] = pattern(i);
	atomic_init(&t->posted, 0);
	atomic_init(&t->sent, 0);
	atomic_init(&t->engine_fills, 0);
	atomic_init(&t->ended, false);
	setenv("WISP_BUSY_POLL_US", "0", 1);
	t->e = glue_engine_create(kind);
	if (!t->e && kind == GLUE_URING)
		cr_skip_test("io_uring refused here: %s", strerror(errno));
	cr_assert_not_null(t->e);
	tcp_pair(&snd, peer, small);
	t->snd = snd;
	t->c = glue_conn_add(t->e, snd, &dt_ops, t);
	cr_assert_not_null(t->c);
	/* A new connection's engine asks tx_fill at once (nothing yet). */
	for (int64_t end = ms_now() + 10000;
	     !atomic_load(&t->engine_fills); usleep(200))
		cr_assert_lt(ms_now(), end, "the engine never filled");
	engine_settle(t);
}

static void close_cmd(void *arg)
{
	glue_conn_close(arg, 0, false);
}

static void dt_finish(struct dt *t, int peer)
{
	glue_engine_call(t->e, close_cmd, t->c);
	for (int64_t end = ms_now() + 10000; !atomic_load(&t->ended);
	     usleep(200))
		cr_assert_lt(ms_now(), end, "the connection never ended");
	close(peer);
	glue_conn_free(t->c);
	glue_engine_destroy(t->e);
	free(t->buf);
}

/* Post n messages at once (the owner queues them; nothing is sent). */
static void post(struct dt *t, int n)
{
	size_t p = atomic_load(&t->posted) + (size_t)n * t->msg;

	cr_assert_leq(p, DT_TOTAL);
	atomic_store(&t->posted, p);
}

/* The peer reads the stream from *at up to the end posted and checks
 * every octet. */
static void peer_read(struct dt *t, int peer, size_t *at)
{
	static uint8_t rx[65536];
	size_t end = atomic_load(&t->posted);

	while (*at < end) {
		size_t want = end - *at < sizeof(rx) ? end - *at : sizeof(rx);
		ssize_t r = recv(peer, rx, want, 0);

		cr_assert_gt(r, 0, "the peer got %zu of %zu octets (%s)", *at,
			     end, r < 0 ? strerror(errno) : "end of stream");
		for (ssize_t i = 0; i < r; i++)
			cr_assert_eq(rx[i], pattern(*at + (size_t)i),
				     "octet %zu out of order", *at + (size_t)i);
		*at += (size_t)r;
	}
}

static uint64_t ctr(const _Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

/* A post of several messages, each a fill of its own: the posting
 * thread sends them all, the engine none. (A posting thread that sent
 * one fill and kicked the engine for the rest made the engine send them.) */
static void poster_sends_every_fill(enum glue_kind kind)
{
	const struct glue_conn_stats *st;
	struct glue_engine_stats es0, es1;
	uint64_t sends, direct;
	struct dt t;
	size_t at = 0;
	int peer;

	dt_start(&t, kind, DT_SMALL, 1, false, &peer);
	st = glue_conn_stats(t.c);
	sends = ctr(&st->tx_sends);
	direct = ctr(&st->tx_direct);
	glue_engine_get_stats(t.e, &es0);

	post(&t, 8);
	cr_assert(glue_conn_send_now(t.c), "nothing was sent");
	peer_read(&t, peer, &at);

	cr_assert_eq(ctr(&st->tx_short) + ctr(&st->tx_eagain), 0,
		     "512 octets did not fit a fresh socket");
	cr_assert_eq(ctr(&st->tx_direct) - direct, 8,
		     "the posting thread sent %llu of 8 fills",
		     (unsigned long long)(ctr(&st->tx_direct) - direct));
	cr_assert_eq(ctr(&st->tx_sends) - sends, 0,
		     "the engine sent %llu times",
		     (unsigned long long)(ctr(&st->tx_sends) - sends));
	glue_engine_get_stats(t.e, &es1);
	cr_assert_eq(es1.kicks - es0.kicks, 0, "the engine was kicked");
	dt_finish(&t, peer);
}

Test(glue_direct, poster_sends_every_fill_epoll, .timeout = 60)
{
	poster_sends_every_fill(GLUE_EPOLL);
}

Test(glue_direct, poster_sends_every_fill_uring, .timeout = 60)
{
	poster_sends_every_fill(GLUE_URING);
}

/* Every octet c's socket holds is unsent: none waits for an
 * acknowledgement, so no room can come until the peer reads. */
static bool nothing_in_flight(const struct dt *t)
{
	int q = 0, nsd = 0;

	cr_assert_eq(ioctl(t->snd, SIOCOUTQ, &q), 0);
	cr_assert_eq(ioctl(t->snd, SIOCOUTQNSD, &nsd), 0);
	return q == nsd;
}

/* The peer does not read: post until the socket is full and the engine
 * waits for room, which it then must do until the peer reads. */
static void fill_until_engine_waits(struct dt *t)
{
	const struct glue_conn_stats *st = glue_conn_stats(t->c);

	for (int round = 0; round < 100; round++) {
		uint64_t refused = ctr(&st->tx_short) + ctr(&st->tx_eagain);

		/* Until a posting thread's send is refused or cut short:
		 * it leaves the rest to the engine. */
		while (ctr(&st->tx_short) + ctr(&st->tx_eagain) == refused) {
			post(t, 1);
			if (!glue_conn_send_now(t->c))
				glue_conn_kick(t->c);
		}
		/* A late acknowledgement may still make room (and the
		 * engine send into it): wait until none can come. */
		for (int64_t end = ms_now() + 10000; !nothing_in_flight(t);
		     usleep(1000))
			cr_assert_lt(ms_now(), end, "octets never acknowledged");
		engine_settle(t);
		/* Octets posted and not sent: the engine holds them, and
		 * with no room it can only be waiting. All sent: room came
		 * after all; fill again. */
		if (atomic_load(&t->sent) < atomic_load(&t->posted))
			return;
	}
	cr_assert(false, "the engine never waited for room");
}

/*
 * The peer stops reading until the socket is full and the engine waits
 * for room: posts made then are left to the engine without a kick or a
 * wake-up (send_now says the engine has them). Once the peer reads, the
 * engine sends everything in order; then, with the peer reading each
 * message before the next is posted, the posting thread sends each one
 * and the engine none.
 */
static void engine_waits_then_hands_back(enum glue_kind kind)
{
	const struct glue_conn_stats *st;
	struct glue_engine_stats es0, es1;
	uint64_t sends, direct;
	struct dt t;
	size_t at = 0;
	int peer;

	dt_start(&t, kind, DT_LARGE, 1 << 20, true, &peer);
	st = glue_conn_stats(t.c);
	fill_until_engine_waits(&t);

	/* Posts while the engine waits: no kick, no wake-up, no sendmsg. */
	direct = ctr(&st->tx_direct);
	sends = ctr(&st->tx_sends);
	glue_engine_get_stats(t.e, &es0);
	for (int i = 0; i < 16; i++) {
		bool left;

		post(&t, 1);
		left = glue_conn_send_now(t.c);
		if (!left)
			glue_conn_kick(t.c);   /* as ibv_post_send does */
		cr_assert(left, "post %d: send_now could not leave its WR", i);
	}
	glue_engine_get_stats(t.e, &es1);
	cr_assert_eq(es1.kicks - es0.kicks, 0,
		     "posts kicked the waiting engine %llu times",
		     (unsigned long long)(es1.kicks - es0.kicks));
	cr_assert_eq(es1.wakes - es0.wakes, 0, "posts woke the engine");
	cr_assert_eq(ctr(&st->tx_direct), direct,
		     "a posting thread sent into the full socket");
	cr_assert_eq(ctr(&st->tx_sends), sends,
		     "the engine sent before there was room");

	/* Room: the engine sends everything, in order. */
	peer_read(&t, peer, &at);
	for (int64_t end = ms_now() + 10000;
	     atomic_load(&t.sent) != atomic_load(&t.posted); usleep(200))
		cr_assert_lt(ms_now(), end, "tx_done never caught up");
	cr_assert_gt(ctr(&st->tx_sends), sends, "the engine did not send");
	engine_settle(&t);

	/* And the stream is the posting thread's again. */
	direct = ctr(&st->tx_direct);
	sends = ctr(&st->tx_sends);
	glue_engine_get_stats(t.e, &es0);
	for (int i = 0; i < 8; i++) {
		post(&t, 1);
		cr_assert(glue_conn_send_now(t.c), "post %d: nothing sent", i);
		peer_read(&t, peer, &at);
	}
	glue_engine_get_stats(t.e, &es1);
	cr_assert_eq(ctr(&st->tx_direct) - direct, 8,
		     "the posting thread sent %llu of 8 messages",
		     (unsigned long long)(ctr(&st->tx_direct) - direct));
	cr_assert_eq(ctr(&st->tx_sends), sends,
		     "the engine sent %llu times after handing back",
		     (unsigned long long)(ctr(&st->tx_sends) - sends));
	cr_assert_eq(es1.kicks - es0.kicks, 0, "the engine was kicked");
	dt_finish(&t, peer);
}

Test(glue_direct, engine_waits_then_hands_back_epoll, .timeout = 120)
{
	engine_waits_then_hands_back(GLUE_EPOLL);
}

Test(glue_direct, engine_waits_then_hands_back_uring, .timeout = 120)
{
	engine_waits_then_hands_back(GLUE_URING);
}
