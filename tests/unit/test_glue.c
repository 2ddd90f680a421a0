// SPDX-License-Identifier: MIT
/*
 * test_glue.c - the engine's closing against threads that receive
 * directly, the statistics' count of those receives, and what such a
 * receive is (no cancellation point; the caller's clock reading).
 *
 * glue_conn_recv_now() checks the connection's state under rx_lock and
 * then calls rx_want and recvmsg on the socket, in a loop. The engine,
 * finishing a connection whose graceful close ran out of time, must not
 * close the descriptor while such a thread is between its check and its
 * recvmsg: the number could by then name another file, whose octets the
 * thread would take and feed to the protocol.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue.h"
#include "glue_internal.h"
#include "glue_pair.h"
#include "glue_stats.h"

struct fdt {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool in_want, release;
	size_t got;               /* octets the polling thread received */
	atomic_bool ended;
	uint8_t rx[256];
	struct glue_conn *c;
	struct glue_engine *e;
};

/* The polling thread's first rx_want blocks, after the state check,
 * until the test lets it go; the engine's are plain. */
static int fdt_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct fdt *t = arg;

	(void)cap;
	iov[0].iov_base = t->rx;
	iov[0].iov_len = sizeof(t->rx);
	if (glue_on_engine(t->e))
		return 1;
	pthread_mutex_lock(&t->lock);
	if (!t->release) {
		t->in_want = true;
		pthread_cond_broadcast(&t->cond);
		while (!t->release)
			pthread_cond_wait(&t->cond, &t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return 1;
}

static int fdt_rx_done(void *arg, size_t n)
{
	struct fdt *t = arg;

	if (!glue_on_engine(t->e))
		t->got += n;
	return 0;
}

static int fdt_tx_fill(void *arg, struct iovec *iov, int cap)
{
	(void)arg;
	(void)iov;
	(void)cap;
	return 0;
}

static int fdt_tx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

static void fdt_ended(void *arg, int reason)
{
	struct fdt *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops fdt_ops = {
	.rx_want = fdt_rx_want,
	.rx_done = fdt_rx_done,
	.tx_fill = fdt_tx_fill,
	.tx_done = fdt_tx_done,
	.ended = fdt_ended,
};

static void *poller_main(void *arg)
{
	struct fdt *t = arg;

	/* The engine may hold rx_lock for a moment: try until in. */
	while (!glue_conn_recv_now(t->c)) {
		bool in;

		pthread_mutex_lock(&t->lock);
		in = t->in_want || t->release;
		pthread_mutex_unlock(&t->lock);
		if (in)
			break;
		usleep(1000);
	}
	return NULL;
}

static void close_under_poller(enum glue_kind kind)
{
	static const char stolen[] = "another file's octets";
	struct fdt t = { 0 };
	int sv[2], other[2], fd;
	struct glue_engine *e;
	bool closed = false;
	pthread_t th;

	pthread_mutex_init(&t.lock, NULL);
	pthread_cond_init(&t.cond, NULL);
	atomic_init(&t.ended, false);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, other), 0);
	cr_assert_eq(send(other[1], stolen, sizeof(stolen), 0),
		     (ssize_t)sizeof(stolen));
	e = engine_or_skip(kind);
	t.e = e;
	fd = sv[0];
	t.c = glue_conn_add(e, fd, &fdt_ops, &t);
	cr_assert_not_null(t.c);

	/* A polling thread passes the state check and stops in rx_want. */
	cr_assert_eq(pthread_create(&th, NULL, poller_main, &t), 0);
	pthread_mutex_lock(&t.lock);
	while (!t.in_want)
		pthread_cond_wait(&t.cond, &t.lock);
	pthread_mutex_unlock(&t.lock);

	/* A graceful close; the peer never closes its side, so the close
	 * deadline (2 s) aborts the connection and the engine finishes it. */
	glue_engine_call(e, close_cmd, t.c);
	for (int64_t end = ms_now() + 3000; ms_now() < end && !closed;
	     usleep(1000))
		closed = fcntl(fd, F_GETFD) < 0 && errno == EBADF;
	if (closed) {
		/* The number is free while the poller still holds it: another
		 * file takes it, as one may in any program. */
		cr_assert_eq(dup2(other[0], fd), fd);
	}

	pthread_mutex_lock(&t.lock);
	t.release = true;
	pthread_cond_broadcast(&t.cond);
	pthread_mutex_unlock(&t.lock);
	pthread_join(th, NULL);

	cr_assert_eq(t.got, 0, "the poller received %zu octets of another "
		     "file", t.got);
	cr_assert(!closed, "the descriptor was closed under the poller");
	cr_assert(wait_flag(&t.ended, 5000), "the connection ended");
	glue_conn_free(t.c);
	glue_engine_destroy(e);
	if (closed)
		close(fd);
	close(sv[1]);
	close(other[0]);
	close(other[1]);
}

Test(glue, close_waits_for_a_direct_receiver_uring, .timeout = 30)
{
	close_under_poller(GLUE_URING);
}

Test(glue, close_waits_for_a_direct_receiver_epoll, .timeout = 30)
{
	close_under_poller(GLUE_EPOLL);
}

/*
 * The receive statistics name who received (glue_stats.h): rx_recvs
 * counts every recvmsg that brought octets, rx_direct those of a thread
 * polling its CQ (glue_conn_recv_now), never the engine's. The owner
 * below tells the two apart by glue_on_engine() in its rx_done; the
 * counters must agree with it, receive for receive.
 */
struct who {
	uint8_t rx[64];
	atomic_uint engine_recvs, poller_recvs;
	atomic_size_t octets;
	atomic_bool ended;
	struct glue_engine *e;
};

static int who_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct who *w = arg;

	(void)cap;
	iov[0].iov_base = w->rx;
	iov[0].iov_len = sizeof(w->rx);
	return 1;
}

static int who_rx_done(void *arg, size_t n)
{
	struct who *w = arg;

	if (!n)
		return 0;
	atomic_fetch_add(glue_on_engine(w->e) ? &w->engine_recvs
					      : &w->poller_recvs, 1);
	atomic_fetch_add(&w->octets, n);
	return 0;
}

static void who_ended(void *arg, int reason)
{
	struct who *w = arg;

	(void)reason;
	atomic_store(&w->ended, true);
}

static const struct glue_conn_ops who_ops = {
	.rx_want = who_rx_want,
	.rx_done = who_rx_done,
	.tx_fill = fdt_tx_fill,
	.tx_done = fdt_tx_done,
	.ended = who_ended,
};

/* A who connection on an engine of kind over sv[0]; sv[1] is the
 * peer's end. */
static struct glue_conn *who_open(struct who *w, enum glue_kind kind,
				  int sv[2])
{
	struct glue_conn *c;

	atomic_init(&w->engine_recvs, 0);
	atomic_init(&w->poller_recvs, 0);
	atomic_init(&w->octets, 0);
	atomic_init(&w->ended, false);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	w->e = engine_or_skip(kind);
	c = glue_conn_add(w->e, sv[0], &who_ops, w);
	cr_assert_not_null(c);
	return c;
}

/* Close the peer's end, polling (the engine may leave the socket to a
 * thread that polls) until the connection has ended; free it all. */
static void who_close(struct who *w, struct glue_conn *c, int peer)
{
	close(peer);
	for (int64_t end = ms_now() + 10000;
	     ms_now() < end && !atomic_load(&w->ended);) {
		glue_conn_recv_now(c);
		usleep(1000);
	}
	cr_assert(atomic_load(&w->ended), "the connection did not end");
	glue_conn_free(c);
	glue_engine_destroy(w->e);
}

static void rx_direct_counts_the_poller(enum glue_kind kind)
{
	struct who w = { 0 };
	const struct glue_conn_stats *st;
	struct glue_conn *c;
	size_t sent = 0;
	int sv[2];

	c = who_open(&w, kind, sv);

	/* Nobody polls: the engine receives, twice (so that its count and
	 * the poller's, which stops at one, differ). */
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(send(sv[1], "e", 1, 0), 1);
		sent++;
		for (int64_t end = ms_now() + 5000;
		     ms_now() < end && atomic_load(&w.octets) < sent;)
			usleep(1000);
		cr_assert_eq(atomic_load(&w.octets), sent);
	}
	cr_assert_eq(atomic_load(&w.engine_recvs), 2);

	/* A polling thread (this one) receives, until it has done so once;
	 * the engine may still take an octet now and then. */
	for (int i = 0; i < 1000 && !atomic_load(&w.poller_recvs); i++) {
		cr_assert_eq(send(sv[1], "p", 1, 0), 1);
		sent++;
		for (int64_t end = ms_now() + 5000;
		     ms_now() < end && atomic_load(&w.octets) < sent;)
			if (!glue_conn_recv_now(c))
				usleep(100);
	}
	cr_assert_eq(atomic_load(&w.octets), sent);
	cr_assert_eq(atomic_load(&w.poller_recvs), 1);

	/* The engine counts after its rx_done returns: wait for its last
	 * count to land. */
	st = glue_conn_stats(c);
	for (int64_t end = ms_now() + 5000;
	     ms_now() < end && atomic_load(&st->rx_recvs) <
	     atomic_load(&w.engine_recvs) + atomic_load(&w.poller_recvs);)
		usleep(1000);
	cr_assert_eq(atomic_load(&st->rx_recvs),
		     atomic_load(&w.engine_recvs) +
		     atomic_load(&w.poller_recvs));
	cr_assert_eq(atomic_load(&st->rx_direct),
		     atomic_load(&w.poller_recvs),
		     "rx_direct %llu, receives on the polling thread %u",
		     (unsigned long long)atomic_load(&st->rx_direct),
		     atomic_load(&w.poller_recvs));
	cr_assert_eq(atomic_load(&st->rx_octets), sent);

	who_close(&w, c, sv[1]);
}

Test(glue, rx_direct_counts_the_poller_uring, .timeout = 60)
{
	rx_direct_counts_the_poller(GLUE_URING);
}

Test(glue, rx_direct_counts_the_poller_epoll, .timeout = 60)
{
	rx_direct_counts_the_poller(GLUE_EPOLL);
}

/*
 * A polling thread's receive is recv(2) when the owner gives one iovec
 * and recvmsg(2) when it gives several (glue_engine.c, conn_recv): the
 * octets must land where the iovecs say either way, in order, up to the
 * end of the stream. The owner below gives one iovec and three in turn
 * and copies out what each receive brought.
 */
#define IOV_MSG 7                 /* octets per message */
#define IOV_MSGS 60

struct iovt {
	uint8_t buf[3][4];        /* three small iovecs: 12 octets */
	uint8_t one[32];
	int nwant;                /* iovecs the last rx_want gave */
	unsigned calls;           /* rx_want calls, to alternate */
	uint8_t got[IOV_MSG * IOV_MSGS];
	atomic_size_t octets;
	unsigned recvs[2];        /* receives that brought octets: 1, 3 */
	atomic_bool ended;
};

static int iovt_rx_want(void *arg, struct iovec *iov, int cap)
{
	struct iovt *t = arg;

	cr_assert_geq(cap, 3);
	if (t->calls++ % 2 == 0) {
		iov[0].iov_base = t->one;
		iov[0].iov_len = sizeof(t->one);
		t->nwant = 1;
		return 1;
	}
	for (int i = 0; i < 3; i++) {
		iov[i].iov_base = t->buf[i];
		iov[i].iov_len = sizeof(t->buf[i]);
	}
	t->nwant = 3;
	return 3;
}

/* rx_lock is held from rx_want to rx_done: the fields are ours. */
static int iovt_rx_done(void *arg, size_t n)
{
	struct iovt *t = arg;
	size_t at = atomic_load(&t->octets);

	if (!n)
		return 0;
	cr_assert_leq(at + n, sizeof(t->got), "more octets than were sent");
	if (t->nwant == 1) {
		memcpy(t->got + at, t->one, n);
	} else {
		for (size_t i = 0; i < n; i++)
			t->got[at + i] = t->buf[i / 4][i % 4];
	}
	t->recvs[t->nwant == 1 ? 0 : 1]++;
	atomic_store(&t->octets, at + n);
	return 0;
}

static void iovt_ended(void *arg, int reason)
{
	struct iovt *t = arg;

	(void)reason;
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops iovt_ops = {
	.rx_want = iovt_rx_want,
	.rx_done = iovt_rx_done,
	.tx_fill = fdt_tx_fill,
	.tx_done = fdt_tx_done,
	.ended = iovt_ended,
};

static void poller_fills_one_and_many_iovecs(enum glue_kind kind)
{
	struct iovt t = { 0 };
	uint8_t sent[sizeof(t.got)];
	struct glue_engine *e;
	struct glue_conn *c;
	int sv[2];

	atomic_init(&t.octets, 0);
	atomic_init(&t.ended, false);
	for (size_t i = 0; i < sizeof(sent); i++)
		sent[i] = (uint8_t)(i * 7 + 1);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	e = glue_engine_create(kind);
	if (!e && kind == GLUE_URING)
		cr_skip_test("io_uring refused here: %s", strerror(errno));
	cr_assert_not_null(e);
	c = glue_conn_add(e, sv[0], &iovt_ops, &t);
	cr_assert_not_null(c);

	/* One message at a time, this thread polling until it is in (the
	 * engine may take one now and then: the same owner, the same
	 * iovecs). */
	for (int m = 0; m < IOV_MSGS; m++) {
		size_t want = (size_t)(m + 1) * IOV_MSG;

		cr_assert_eq(send(sv[1], sent + m * IOV_MSG, IOV_MSG, 0),
			     IOV_MSG);
		for (int64_t end = ms_now() + 5000;
		     ms_now() < end && atomic_load(&t.octets) < want;)
			if (!glue_conn_recv_now(c))
				usleep(50);
		cr_assert_eq(atomic_load(&t.octets), want);
	}
	cr_assert_arr_eq(t.got, sent, sizeof(sent));
	cr_assert_gt(t.recvs[0], 0, "no receive into one iovec");
	cr_assert_gt(t.recvs[1], 0, "no receive into three iovecs");
	/* Nothing more: an empty poll brings nothing. */
	cr_assert_not(glue_conn_recv_now(c));

	/* The end of the stream, met by either receive. */
	close(sv[1]);
	for (int64_t end = ms_now() + 10000;
	     ms_now() < end && !atomic_load(&t.ended);) {
		glue_conn_recv_now(c);
		usleep(1000);
	}
	cr_assert(atomic_load(&t.ended), "the connection did not end");
	glue_conn_free(c);
	glue_engine_destroy(e);
}

Test(glue, poller_fills_one_and_many_iovecs_uring, .timeout = 60)
{
	poller_fills_one_and_many_iovecs(GLUE_URING);
}

Test(glue, poller_fills_one_and_many_iovecs_epoll, .timeout = 60)
{
	poller_fills_one_and_many_iovecs(GLUE_EPOLL);
}

/*
 * The polling thread's clock (glue_poll_clock_ms) reuses a reading for
 * at most GLUE_STAMP_REUSE more calls: the engine must never see a
 * thread that keeps polling as one that stopped. After a pause, within
 * GLUE_STAMP_REUSE + 1 calls the clock reads at least what
 * CLOCK_MONOTONIC read before them (whether or not the coarse clock
 * moved meanwhile), and never more than it reads after them.
 */
Test(glue, poll_clock_reuses_a_reading_a_bounded_number_of_times)
{
	for (int round = 0; round < 20; round++) {
		int64_t before, after, s = 0;

		glue_poll_clock_ms();
		usleep(1500);
		before = ms_now();
		for (int i = 0; i <= GLUE_STAMP_REUSE; i++)
			s = glue_poll_clock_ms();
		after = ms_now();
		cr_assert_geq(s, before, "round %d: %lld, before %lld", round,
			      (long long)s, (long long)before);
		cr_assert_leq(s, after, "round %d: %lld, after %lld", round,
			      (long long)s, (long long)after);
	}
}

/*
 * A poller's receive is no cancellation point: ibv_poll_cq is none, and
 * the receive runs holding rx_lock and the owner's lock (rx_want ..
 * rx_done), which a cancel acted on inside it would leave held. A
 * thread with a cancel pending (deferred, the default) polls an empty
 * socket: each poll reaches the receive (counted in rx_empty) and
 * returns; the cancel is acted on at the thread's next cancellation
 * point. Then the connection still receives.
 */
#define CANCEL_POLLS 20

struct cancel_poller {
	struct glue_conn *c;
	atomic_int returned;
};

static void *cancel_poller_main(void *arg)
{
	struct cancel_poller *p = arg;

	pthread_cancel(pthread_self());
	for (int i = 0; i < CANCEL_POLLS; i++) {
		glue_conn_recv_now(p->c);
		atomic_fetch_add(&p->returned, 1);
	}
	pthread_testcancel();
	return NULL;
}

static void poll_is_no_cancellation_point(enum glue_kind kind)
{
	struct cancel_poller p;
	struct who w = { 0 };
	const struct glue_conn_stats *st;
	uint64_t empty;
	pthread_t th;
	void *res;
	int sv[2];

	atomic_init(&p.returned, 0);
	p.c = who_open(&w, kind, sv);
	st = glue_conn_stats(p.c);
	empty = atomic_load(&st->rx_empty);

	cr_assert_eq(pthread_create(&th, NULL, cancel_poller_main, &p), 0);
	cr_assert_eq(pthread_join(th, &res), 0);
	cr_assert_eq(res, PTHREAD_CANCELED);
	cr_assert_eq(atomic_load(&p.returned), CANCEL_POLLS,
		     "the poller was cancelled inside its poll %d",
		     atomic_load(&p.returned) + 1);
	/* Its polls did receive (the engine may have held the socket for
	 * a few of them). */
	cr_assert_gt(atomic_load(&st->rx_empty), empty,
		     "no poll reached the socket");

	/* Nothing was left held: a poll on this thread receives. */
	cr_assert_eq(send(sv[1], "x", 1, 0), 1);
	for (int64_t end = ms_now() + 5000;
	     ms_now() < end && atomic_load(&w.octets) < 1;)
		if (!glue_conn_recv_now(p.c))
			usleep(100);
	cr_assert_eq(atomic_load(&w.octets), 1);

	who_close(&w, p.c, sv[1]);
}

Test(glue, poll_is_no_cancellation_point_uring, .timeout = 60)
{
	poll_is_no_cancellation_point(GLUE_URING);
}

Test(glue, poll_is_no_cancellation_point_epoll, .timeout = 60)
{
	poll_is_no_cancellation_point(GLUE_EPOLL);
}

/*
 * A poll reads the clock once and passes the reading down
 * (glue_conn_recv_at, glue_conns_wait_tx_at): the stamps it leaves for
 * the engine are that reading, not another. Checked in the connection
 * itself, as the engine reads them; a reading in the past (a poll that
 * took long) stays the stamp.
 */
static void poll_stamps_the_callers_reading(enum glue_kind kind)
{
	struct who w = { 0 };
	struct glue_conn *c;
	int64_t t0;
	bool rx = true;
	int sv[2];

	c = who_open(&w, kind, sv);
	t0 = glue_poll_clock_ms() - 1000;

	for (int i = 0; i < 3; i++) {
		cr_assert_not(glue_conn_recv_at(c, t0 + i));
		cr_assert_eq(atomic_load(&c->app_rx_ms), t0 + i);
		/* Nothing waits to be sent: no send, no wait; the stamp
		 * still says this thread polls (WISP_POLL_WAIT_US on). */
		cr_assert_not(glue_conns_wait_tx_at(&c, &rx, 1, t0 + i));
		cr_assert_eq(atomic_load(&c->app_tx_ms), t0 + i);
	}

	who_close(&w, c, sv[1]);
}

Test(glue, poll_stamps_the_callers_reading_uring, .timeout = 60)
{
	poll_stamps_the_callers_reading(GLUE_URING);
}

Test(glue, poll_stamps_the_callers_reading_epoll, .timeout = 60)
{
	poll_stamps_the_callers_reading(GLUE_EPOLL);
}
