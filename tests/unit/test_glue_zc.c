// SPDX-License-Identifier: MIT
/*
 * test_glue_zc.c - zero-copy sends (WISP_SEND_ZC): tx_done, which lets
 * the owner reuse the memory it handed to tx_fill, comes only once the
 * kernel has let go of the pages, on both engines; an abort with a
 * zero-copy send in flight ends the connection without waiting for a
 * peer that does not read; the setting's strict parsing.
 *
 * The peer is a plain TCP socket of the test with a small receive
 * buffer, left unread for a while: most of what the engine sends then
 * waits in the sender's socket, still pointing at the owner's pages. An
 * owner that overwrites what tx_done reported (as an application reuses
 * a buffer once its WR completed) must not change what the peer reads:
 * with tx_done after the send's first result instead of after the
 * notification, the peer reads the overwritten octets.
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

#define ZC_TOTAL  (4u << 20)      /* octets the owner sends */
#define ZC_CHUNK  (256u << 10)    /* per iovec */
#define ZC_RCVBUF 16384           /* the peer's receive buffer */

struct zt {
	uint8_t *buf;             /* what tx_fill offers, overwritten
				   * once tx_done reports it */
	size_t sent;              /* reported by tx_done (engine) */
	atomic_size_t done;       /* the same, for the test thread */
	atomic_bool ended;
	atomic_int reason;
};

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + (i >> 12));
}

static int zt_rx_want(void *arg, struct iovec *iov, int cap)
{
	static uint8_t sink[64];

	(void)arg;
	(void)cap;
	iov[0].iov_base = sink;
	iov[0].iov_len = sizeof(sink);
	return 1;
}

static int zt_rx_done(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return 0;
}

static int zt_tx_fill(void *arg, struct iovec *iov, int cap)
{
	struct zt *t = arg;
	size_t off = t->sent;
	int n = 0;

	while (off < ZC_TOTAL && n < cap) {
		size_t end = (off / ZC_CHUNK + 1) * ZC_CHUNK;

		iov[n].iov_base = t->buf + off;
		iov[n].iov_len = end - off;
		off = end;
		n++;
	}
	return n;
}

/* The owner's memory is its own again: reuse it at once. */
static int zt_tx_done(void *arg, size_t n)
{
	struct zt *t = arg;

	memset(t->buf + t->sent, 0xee, n);
	t->sent += n;
	atomic_store(&t->done, t->sent);
	return 0;
}

static void zt_ended(void *arg, int reason)
{
	struct zt *t = arg;

	atomic_store(&t->reason, reason);
	atomic_store(&t->ended, true);
}

static const struct glue_conn_ops zt_ops = {
	.rx_want = zt_rx_want,
	.rx_done = zt_rx_done,
	.tx_fill = zt_tx_fill,
	.tx_done = zt_tx_done,
	.ended = zt_ended,
};

/* The peer's receive buffer is small, set before the handshake so that
 * the window follows it. */
static const struct tcp_pair_opts zc_pair = { .rcvbuf = ZC_RCVBUF };

static struct glue_engine *zc_engine(enum glue_kind kind)
{
	struct glue_engine_stats st;
	struct glue_engine *e;

	cr_assert_eq(setenv("WISP_SEND_ZC", "on", 1), 0);
	e = engine_or_skip(kind);
	unsetenv("WISP_SEND_ZC");
	glue_engine_get_stats(e, &st);
	cr_assert_eq(st.zc_min, GLUE_SEND_ZC_ON_BYTES);
	if (!st.zc_avail) {
		glue_engine_destroy(e);
		cr_skip_test("%s: this kernel has no zero-copy send",
			     kind == GLUE_URING ? "io_uring" : "epoll");
	}
	return e;
}

static void zt_init(struct zt *t)
{
	memset(t, 0, sizeof(*t));
	t->buf = malloc(ZC_TOTAL);
	cr_assert_not_null(t->buf);
	for (size_t i = 0; i < ZC_TOTAL; i++)
		t->buf[i] = pattern(i);
	atomic_init(&t->done, 0);
	atomic_init(&t->ended, false);
	atomic_init(&t->reason, 0);
}

/* Wait until the engine has a zero-copy send out (bounded). */
static void wait_zc_send(struct glue_engine *e)
{
	struct glue_engine_stats st;

	glue_engine_get_stats(e, &st);
	for (int64_t end = ms_now() + 10000; ms_now() < end && !st.zc_sends;
	     usleep(1000))
		glue_engine_get_stats(e, &st);
	cr_assert(st.zc_sends > 0, "no zero-copy send within 10 s");
}

/* t's connection on e to the peer *rcv, once a zero-copy send is out. */
static struct glue_conn *zt_start(struct zt *t, struct glue_engine *e,
				  int *rcv)
{
	struct glue_conn *c;
	int snd;

	zt_init(t);
	tcp_pair(&snd, rcv, &zc_pair);
	c = glue_conn_add(e, snd, &zt_ops, t);
	cr_assert_not_null(c);
	wait_zc_send(e);
	return c;
}

static void reuse_after_done(enum glue_kind kind)
{
	struct glue_engine_stats st;
	struct glue_engine *e = zc_engine(kind);
	struct zt t;
	struct glue_conn *c;
	size_t got = 0, bad = 0, first_bad = 0;
	static uint8_t rx[65536];
	int rcv;

	c = zt_start(&t, e, &rcv);
	/* The peer does not read for a while: the sender's socket holds
	 * most of the send, unacknowledged. tx_done now would be wrong;
	 * if it comes anyway, the overwrite shows below. */
	for (int64_t end = ms_now() + 300;
	     ms_now() < end && !atomic_load(&t.done);)
		usleep(1000);
	while (got < ZC_TOTAL) {
		ssize_t r = recv(rcv, rx, sizeof(rx), 0);

		cr_assert(r > 0, "recv: %zd (%s) after %zu octets", r,
			  strerror(errno), got);
		for (ssize_t i = 0; i < r; i++) {
			if (rx[i] != pattern(got + (size_t)i) && !bad++)
				first_bad = got + (size_t)i;
		}
		got += (size_t)r;
	}
	cr_assert_eq(bad, 0, "%zu octets differ from what was sent, the "
		     "first at %zu: the kernel read them after tx_done",
		     bad, first_bad);
	for (int64_t end = ms_now() + 10000;
	     ms_now() < end && atomic_load(&t.done) < ZC_TOTAL;)
		usleep(1000);
	cr_assert_eq(atomic_load(&t.done), ZC_TOTAL, "tx_done reported all");
	glue_engine_get_stats(e, &st);
	cr_assert(st.zc_sends > 0);
	cr_log_info("%s: %llu zero-copy sends, %llu copied by the kernel, "
		    "%llu fell back", glue_engine_name(e),
		    (unsigned long long)st.zc_sends,
		    (unsigned long long)st.zc_copied,
		    (unsigned long long)st.zc_fallback);

	close(rcv);
	cr_assert(wait_flag(&t.ended, 10000));
	glue_conn_free(c);
	glue_engine_destroy(e);
	free(t.buf);
}

Test(glue_zc, reuse_after_tx_done_uring, .timeout = 60)
{
	reuse_after_done(GLUE_URING);
}

Test(glue_zc, reuse_after_tx_done_epoll, .timeout = 60)
{
	reuse_after_done(GLUE_EPOLL);
}

static void abort_cmd(void *arg)
{
	glue_conn_close(arg, ECONNABORTED, false);
}

/*
 * The peer never reads: the notification of the send in flight would
 * wait for it for ever. An abort must still end the connection (what
 * ibv_dereg_mr and ibv_destroy_qp wait for), and the owner may then
 * free the memory (ASan: nothing in user space reads it any more).
 */
static void abort_in_flight(enum glue_kind kind)
{
	struct glue_engine *e = zc_engine(kind);
	struct zt t;
	struct glue_conn *c;
	int rcv;

	c = zt_start(&t, e, &rcv);
	cr_assert_lt(atomic_load(&t.done), ZC_TOTAL);
	glue_engine_call(e, abort_cmd, c);
	cr_assert(wait_flag(&t.ended, 10000), "the aborted connection ended");
	cr_assert_eq(atomic_load(&t.reason), ECONNABORTED);
	/* Nothing more was reported sent after the abort: the WRs of a
	 * real owner are flushed, not completed. */
	cr_assert_lt(atomic_load(&t.done), ZC_TOTAL);
	glue_conn_free(c);
	free(t.buf);
	glue_engine_destroy(e);
	close(rcv);
}

Test(glue_zc, abort_with_send_in_flight_uring, .timeout = 60)
{
	abort_in_flight(GLUE_URING);
}

Test(glue_zc, abort_with_send_in_flight_epoll, .timeout = 60)
{
	abort_in_flight(GLUE_EPOLL);
}

Test(glue_zc, parse)
{
	size_t min = 1;

	cr_assert_eq(glue_send_zc_parse("off", &min), 0);
	cr_assert_eq(min, 0);
	cr_assert_eq(glue_send_zc_parse("on", &min), 0);
	cr_assert_eq(min, GLUE_SEND_ZC_ON_BYTES);
	cr_assert_eq(glue_send_zc_parse("4096", &min), 0);
	cr_assert_eq(min, 4096);
	cr_assert_eq(glue_send_zc_parse("1073741824", &min), 0);
	cr_assert_eq(min, GLUE_SEND_ZC_MAX_BYTES);
	min = 7;
	cr_assert_eq(glue_send_zc_parse(NULL, &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("0", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("4095", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("1073741825", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("99999999999999999999999", &min),
		     -EINVAL);
	cr_assert_eq(glue_send_zc_parse("ON", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("65536 ", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("+65536", &min), -EINVAL);
	cr_assert_eq(glue_send_zc_parse("64k", &min), -EINVAL);
	cr_assert_eq(min, 7, "a refused value changes nothing");
}

Test(glue_zc, bad_setting_refuses_the_engine)
{
	struct glue_engine *e;

	cr_assert_eq(setenv("WISP_SEND_ZC", "yes", 1), 0);
	e = glue_engine_create(GLUE_EPOLL);
	unsetenv("WISP_SEND_ZC");
	cr_assert_null(e);
	cr_assert_eq(errno, EINVAL);
}
