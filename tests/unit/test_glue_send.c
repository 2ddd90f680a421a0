// SPDX-License-Identifier: MIT
/*
 * test_glue_send.c - the system call of a direct send (glue_engine.c
 * conn_send_plain): what tx_fill gives as one iovec goes with send(2),
 * more than one with sendmsg(2), with the same flags (MSG_DONTWAIT,
 * MSG_NOSIGNAL, and MSG_MORE when a burst corks), and a partial send
 * leaves the rest to the engine with nothing lost or reordered. A lone
 * post after a quiet spell reads no clock before its send (cork_burst
 * knows the gap has passed from the thread's last reading); one that
 * follows another at once does, to decide whether the burst corks.
 * When tx_done says nothing is left (GLUE_TX_IDLE), the sender does not
 * ask tx_fill again after its send, and the engine's sends do not take
 * the hint for a close.
 *
 * The test program defines send(), sendmsg() and clock_gettime() itself, so that the
 * engine's calls (linked statically) reach these first: they note the
 * calls made on the connection's socket and then make the system call.
 * The peer is a plain TCP socket of the test; the engine is held
 * (glue_hold.h) while a case looks at the calls of the test's thread.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "glue_pair.h"
#include "glue_queue.h"

/* ---- the calls on the watched socket ---- */

#define MAX_CALLS 4096

struct call {
	bool msg;                 /* sendmsg (else send) */
	int niov;
	int flags;
	size_t len;               /* octets offered */
	long ret;
};

static atomic_int watch_fd = -1;
static struct call calls[MAX_CALLS];
static atomic_int ncalls;

static void note(bool msg, int niov, int flags, size_t len, long ret)
{
	int i = atomic_fetch_add(&ncalls, 1);

	if (i < MAX_CALLS)
		calls[i] = (struct call){ msg, niov, flags, len, ret };
}

/* The test thread's clock readings ('C') and sends on the watched
 * socket ('S'), in order, while recording. */
static atomic_bool rec_on;
static pthread_t rec_thread;
static char ev[256];
static atomic_int nev;

static void note_ev(char e)
{
	int i;

	if (!atomic_load(&rec_on) || !pthread_equal(pthread_self(), rec_thread))
		return;
	i = atomic_fetch_add(&nev, 1);
	if (i < (int)sizeof(ev) - 1)
		ev[i] = e;
}

/* The thread whose calls are recorded: set before the engine's thread
 * starts (st_start), never while it runs. */
static void rec_thread_set(void)
{
	rec_thread = pthread_self();
}

static void rec_start(void)
{
	memset(ev, 0, sizeof(ev));
	atomic_store(&nev, 0);
	atomic_store(&rec_on, true);
}

static void rec_stop(void)
{
	atomic_store(&rec_on, false);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int r = (int)syscall(SYS_clock_gettime, id, ts);

	note_ev('C');
	return r;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	long r = syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);

	if (fd == atomic_load(&watch_fd)) {
		note(false, 1, flags, len, r);
		note_ev('S');
	}
	return r;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	long r = syscall(SYS_sendmsg, fd, msg, flags);

	if (fd == atomic_load(&watch_fd)) {
		size_t len = 0;

		for (size_t i = 0; i < msg->msg_iovlen; i++)
			len += msg->msg_iov[i].iov_len;
		note(true, (int)msg->msg_iovlen, flags, len, r);
	}
	return r;
}

/* ---- a connection whose tx_fill gives what the test queued ---- */

#define CHUNK 100
#define TOTAL (4u << 20)

struct st {
	struct glue_engine *e;
	struct glue_conn *c;
	int fd, peer;
	struct glue_queue q;      /* what the test queued, and what went */
	struct engine_hold hold;
};

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 29 + (i >> 9));
}

/* An engine of kind with WISP_SEND_CORK=cork, one connection, held. */
static void st_start(struct st *t, enum glue_kind kind, const char *cork)
{
	uint8_t *buf = malloc(TOTAL);

	cr_assert_not_null(buf);
	memset(t, 0, sizeof(*t));
	glue_queue_init(&t->q, buf, TOTAL, CHUNK, pattern);
	atomic_store(&ncalls, 0);
	rec_thread_set();
	cr_assert_eq(setenv("WISP_SEND_CORK", cork, 1), 0);
	t->e = engine_or_skip(kind);
	unsetenv("WISP_SEND_CORK");
	tcp_pair(&t->fd, &t->peer, NULL);
	t->c = glue_conn_add(t->e, t->fd, &glue_queue_ops, &t->q);
	cr_assert_not_null(t->c);
	engine_hold(&t->hold, t->e);
	atomic_store(&watch_fd, t->fd);
}

static void st_finish(struct st *t)
{
	atomic_store(&watch_fd, -1);
	close(t->peer);
	cr_assert(wait_flag(&t->q.ended, 10000), "the connection did not end");
	glue_conn_free(t->c);
	glue_engine_destroy(t->e);
	free(t->q.buf);
}

/* Every octet queued, at the peer, checked. */
static void st_read_all(struct st *t)
{
	glue_queue_read_all(&t->q, t->peer, pattern);
}

/* Read at the peer until upto octets in all have arrived since the
 * start (deadline 10 s), and check them. */
static void st_read_some(struct st *t, size_t upto)
{
	static uint8_t rx[16 * CHUNK];
	static size_t got;

	cr_assert_leq(upto, sizeof(rx));
	if (upto <= CHUNK)
		got = 0;          /* a new connection */
	glue_read_pattern(t->peer, rx, got, upto, pattern);
	got = upto;
}

static const int base_flags = MSG_DONTWAIT | MSG_NOSIGNAL;

/* Lone posts, each one iovec: send(2) each, never sendmsg(2). */
static void one_iov(enum glue_kind kind)
{
	struct st t;

	st_start(&t, kind, "off");
	for (int i = 0; i < 8; i++) {
		atomic_fetch_add(&t.q.queued, CHUNK);
		cr_assert(glue_conn_send_post(t.c, CHUNK),
			  "post %d sent nothing", i);
		cr_assert_eq(t.q.sent, atomic_load(&t.q.queued));
	}
	cr_assert_eq(atomic_load(&ncalls), 8);
	for (int i = 0; i < 8; i++) {
		cr_assert(!calls[i].msg, "call %d was a sendmsg", i);
		cr_assert_eq(calls[i].len, CHUNK);
		cr_assert_eq(calls[i].ret, CHUNK);
		cr_assert_eq(calls[i].flags, base_flags, "call %d: flags %#x",
			     i, calls[i].flags);
	}
	st_read_all(&t);
	engine_let_go(&t.hold);
	st_finish(&t);
}

Test(glue_send, one_iovec_goes_with_send_epoll, .timeout = 60)
{
	one_iov(GLUE_EPOLL);
}

Test(glue_send, one_iovec_goes_with_send_uring, .timeout = 60)
{
	one_iov(GLUE_URING);
}

/* Three chunks queued before one send: one sendmsg(2) of three iovecs. */
Test(glue_send, several_iovecs_go_with_sendmsg, .timeout = 60)
{
	struct st t;

	st_start(&t, GLUE_EPOLL, "off");
	atomic_fetch_add(&t.q.queued, 3 * CHUNK);
	cr_assert(glue_conn_send_now(t.c));
	cr_assert_eq(atomic_load(&ncalls), 1);
	cr_assert(calls[0].msg, "three iovecs went with send");
	cr_assert_eq(calls[0].niov, 3);
	cr_assert_eq(calls[0].len, 3 * CHUNK);
	cr_assert_eq(calls[0].ret, 3 * CHUNK);
	cr_assert_eq(calls[0].flags, base_flags);
	/* and one more, alone: send again */
	atomic_fetch_add(&t.q.queued, CHUNK);
	cr_assert(glue_conn_send_now(t.c));
	cr_assert_eq(atomic_load(&ncalls), 2);
	cr_assert(!calls[1].msg);
	st_read_all(&t);
	engine_let_go(&t.hold);
	st_finish(&t);
}

/* A burst of one-iovec posts is held and sent in groups: each group of
 * GLUE_HOLD_POSTS posts goes in one sendmsg(2) with MSG_MORE, counted
 * once as corked; what is held at the end goes with the empty poll's
 * push, without MSG_MORE. A preemption longer than the burst's gap
 * (1 ms here) only starts a new burst: the assertions hold for any
 * split of the posts into bursts. */
Test(glue_send, held_burst_goes_in_few_sends, .timeout = 60)
{
	struct st t;
	int more = 0, grouped = 0, n;
	size_t octets = 0;
	bool held, tail;

	st_start(&t, GLUE_EPOLL, "1000");
	for (int i = 0; i < 64; i++) {
		atomic_fetch_add(&t.q.queued, CHUNK);
		cr_assert(glue_conn_send_post(t.c, CHUNK));
	}
	n = atomic_load(&ncalls);
	cr_assert_lt(n, 64, "every post was sent by itself");
	cr_assert_eq(CONN_ST(t.c, tx_held) + (uint64_t)n, 64,
		     "%d sends and %llu held posts for 64 posts", n,
		     (unsigned long long)CONN_ST(t.c, tx_held));
	for (int i = 0; i < n; i++) {
		int chunks = (int)(calls[i].len / CHUNK);

		cr_assert_eq(calls[i].ret, (long)calls[i].len);
		cr_assert_eq(calls[i].flags & ~MSG_MORE, base_flags);
		cr_assert_leq(chunks, GLUE_HOLD_POSTS);
		if (calls[i].flags & MSG_MORE) {
			more++;
			grouped += chunks == GLUE_HOLD_POSTS;
		}
		octets += calls[i].len;
	}
	cr_assert_gt(grouped, 0, "no group of %d posts", GLUE_HOLD_POSTS);
	cr_assert_eq((uint64_t)more, CONN_ST(t.c, tx_corked));
	held = octets < 64 * CHUNK;
	tail = held || (calls[n - 1].flags & MSG_MORE);
	glue_conn_send_poll(t.c);  /* sends what is held, and the tail */
	cr_assert_eq(atomic_load(&ncalls), n + held);
	if (held) {
		cr_assert_eq(calls[n].len, 64 * CHUNK - octets);
		cr_assert_eq(calls[n].flags, base_flags);
	}
	cr_assert_eq(CONN_ST(t.c, tx_pushes), tail);
	st_read_all(&t);
	engine_let_go(&t.hold);
	st_finish(&t);
}

/* A one-iovec send larger than the socket takes: send(2) takes part,
 * the rest is the engine's once it runs, in order. */
static void partial(enum glue_kind kind)
{
	struct st t;
	int n;

	st_start(&t, kind, "off");
	t.q.one = true;
	atomic_fetch_add(&t.q.queued, TOTAL);
	glue_conn_send_post(t.c, TOTAL);
	n = atomic_load(&ncalls);
	cr_assert_geq(n, 1);
	cr_assert(!calls[0].msg);
	cr_assert_eq(calls[0].len, TOTAL);
	cr_assert(calls[0].ret < (long)TOTAL,
		  "the socket took all %u octets at once", TOTAL);
	cr_assert(t.q.sent < TOTAL);
	engine_let_go(&t.hold);
	st_read_all(&t);
	st_finish(&t);
}

Test(glue_send, partial_send_rest_to_engine_epoll, .timeout = 60)
{
	partial(GLUE_EPOLL);
}

Test(glue_send, partial_send_rest_to_engine_uring, .timeout = 60)
{
	partial(GLUE_URING);
}

/* A lone post after a quiet spell in which the thread read the clock
 * (an empty poll, glue_conn_recv_now, as a ping-pong's wait for the
 * answer makes): its send is the first thing it does, no clock reading
 * before it; and it does not cork. */
Test(glue_send, lone_post_reads_no_clock_before_send, .timeout = 60)
{
	struct st t;

	st_start(&t, GLUE_EPOLL, "1000");
	for (int i = 0; i < 4; i++) {
		const char *s;

		atomic_fetch_add(&t.q.queued, CHUNK);
		cr_assert(glue_conn_send_post(t.c, CHUNK));
		usleep(20000);            /* 20 gaps of 1 ms */
		glue_conn_recv_now(t.c);  /* reads the clock, finds nothing */
		rec_start();
		atomic_fetch_add(&t.q.queued, CHUNK);
		cr_assert(glue_conn_send_post(t.c, CHUNK));
		rec_stop();
		s = strchr(ev, 'S');
		cr_assert_not_null(s, "round %d: no send recorded (\"%s\")",
				   i, ev);
		cr_assert_eq(s, ev, "round %d: the clock was read before the "
			     "send (\"%s\")", i, ev);
	}
	for (int i = 0; i < atomic_load(&ncalls); i++)
		cr_assert_eq(calls[i].flags, base_flags, "call %d corked", i);
	st_read_all(&t);
	engine_let_go(&t.hold);
	st_finish(&t);
}

/* A post right after another one: the clock is read before its send
 * (the burst rule needs the time since the one before), and the burst
 * is held from its GLUE_CORK_STREAK-th post after the first on. */
Test(glue_send, post_after_post_reads_clock, .timeout = 60)
{
	const char *s;
	struct st t;

	st_start(&t, GLUE_EPOLL, "1000");
	atomic_fetch_add(&t.q.queued, CHUNK);
	cr_assert(glue_conn_send_post(t.c, CHUNK));
	rec_start();
	atomic_fetch_add(&t.q.queued, CHUNK);
	cr_assert(glue_conn_send_post(t.c, CHUNK));
	rec_stop();
	s = strchr(ev, 'S');
	cr_assert_not_null(s, "no send recorded (\"%s\")", ev);
	cr_assert_neq(s, ev, "no clock read before the send (\"%s\")", ev);
	cr_assert_eq(s[-1], 'C');
	for (int i = 0; i < 2; i++) {
		atomic_fetch_add(&t.q.queued, CHUNK);
		cr_assert(glue_conn_send_post(t.c, CHUNK));
	}
	cr_assert_eq(atomic_load(&ncalls), 3,
		     "the fourth post of a burst was not held");
	cr_assert_eq(calls[2].flags, base_flags);
	cr_assert_eq(CONN_ST(t.c, tx_held), 1);
	glue_conn_send_poll(t.c);
	cr_assert_eq(atomic_load(&ncalls), 4);
	cr_assert_eq(calls[3].len, CHUNK);
	cr_assert_eq(calls[3].flags, base_flags);
	st_read_all(&t);
	engine_let_go(&t.hold);
	st_finish(&t);
}

/* Lone posts, each sent whole: with GLUE_TX_IDLE from tx_done, one
 * tx_fill per post (none after the send); without it, the sender asks
 * once more after each send. Every octet arrives either way. */
static void idle_hint(bool hint)
{
	struct st t;

	st_start(&t, GLUE_EPOLL, "off");
	t.q.idle_hint = hint;
	/* The engine's first look (before it was held) may have asked. */
	atomic_store(&t.q.fills, 0);
	for (int i = 0; i < 8; i++) {
		atomic_fetch_add(&t.q.queued, CHUNK);
		cr_assert(glue_conn_send_post(t.c, CHUNK),
			  "post %d sent nothing", i);
		cr_assert_eq(t.q.sent, atomic_load(&t.q.queued));
	}
	cr_assert_eq(atomic_load(&ncalls), 8);
	cr_assert_eq(atomic_load(&t.q.fills), hint ? 8 : 16,
		     "%d tx_fill calls for 8 posts (hint %d)",
		     atomic_load(&t.q.fills), hint);
	st_read_all(&t);
	engine_let_go(&t.hold);
	st_finish(&t);
}

Test(glue_send, idle_hint_skips_fill_after_send, .timeout = 60)
{
	idle_hint(true);
}

Test(glue_send, no_idle_hint_asks_after_send, .timeout = 60)
{
	idle_hint(false);
}

/* The engine's own sends (kicked, not posted) with GLUE_TX_IDLE from
 * tx_done: the hint is no close; the connection keeps sending. */
static void idle_hint_engine(enum glue_kind kind)
{
	struct st t;

	st_start(&t, kind, "off");
	t.q.idle_hint = true;
	engine_let_go(&t.hold);
	for (int i = 0; i < 4; i++) {
		atomic_fetch_add(&t.q.queued, CHUNK);
		glue_conn_kick(t.c);
		st_read_some(&t, (size_t)(i + 1) * CHUNK);
		cr_assert(!atomic_load(&t.q.ended),
			  "the connection ended after send %d", i);
	}
	st_finish(&t);
}

Test(glue_send, idle_hint_is_no_close_epoll, .timeout = 60)
{
	idle_hint_engine(GLUE_EPOLL);
}

Test(glue_send, idle_hint_is_no_close_uring, .timeout = 60)
{
	idle_hint_engine(GLUE_URING);
}
