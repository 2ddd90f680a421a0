// SPDX-License-Identifier: MIT
/*
 * glue_engine.c - the engine thread: commands, kicks, the pump that keeps
 * one receive and one send in flight per connection, and closing.
 */
#include "glue_internal.h"
#include "glue_tls.h"
#include "wisp_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * ThreadSanitizer does not model a TCP socket as synchronisation: what
 * one end wrote before sending, the other end may read after receiving,
 * but TSan sees two unordered threads. The data-path suites join both
 * ends of a loopback connection in one process and check the target's
 * memory after a completion at the initiator (a WRITE placed by one
 * engine, read back by the test after the READ that followed it
 * completed on the other), which TSan would report. So, in TSan builds
 * only, both ends of a connection share one sync address, derived from
 * the pair of ports (the same from either side): a release before each
 * send, an acquire after each receive. Nothing else is ordered by it.
 */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define __SANITIZE_THREAD__ 1 /* clang's spelling of gcc's */
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TSAN_LINKS 65536u
static char tsan_links[TSAN_LINKS];

static void *tsan_link(int fd)
{
	struct sockaddr_storage a, b;
	socklen_t la = sizeof(a), lb = sizeof(b);
	unsigned pa = 0, pb = 0;

	if (getsockname(fd, (struct sockaddr *)&a, &la) == 0 &&
	    getpeername(fd, (struct sockaddr *)&b, &lb) == 0) {
		/* sin_port and sin6_port sit at the same offset. */
		pa = ntohs(((struct sockaddr_in *)&a)->sin_port);
		pb = ntohs(((struct sockaddr_in *)&b)->sin_port);
	}
	return &tsan_links[(pa < pb ? pa * 31u + pb : pb * 31u + pa) %
			   TSAN_LINKS];
}
#define TSAN_SENT(c) __tsan_release((c)->tsan_sync)
#define TSAN_RECEIVED(c) __tsan_acquire((c)->tsan_sync)
#else
#define tsan_link(fd) NULL
#define TSAN_SENT(c) ((void)0)
#define TSAN_RECEIVED(c) ((void)0)
#endif

static _Thread_local const struct glue_engine *tls_engine;

/* ------------------------------------------------------------------ */
/* Logging and the connection state                                  */
/* ------------------------------------------------------------------ */

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_debug;

/* WISP_LOG as librdmacm reads it; the engine has only debug lines. */
static void log_init(void)
{
	const char *v = getenv("WISP_LOG");

	log_debug = v && !strcmp(v, "debug");
}

static void glue_debug(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void glue_debug(const char *fmt, ...)
{
	char line[256];
	va_list ap;

	pthread_once(&log_once, log_init);
	if (!log_debug)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "wisp glue debug: %s\n", line);
}

static const char *const conn_state_names[] = {
	[GLUE_CONN_OPEN] = "open",
	[GLUE_CONN_CLOSING] = "closing",
	[GLUE_CONN_SHUT_WR] = "shut-wr",
	[GLUE_CONN_ABORTING] = "aborting",
	[GLUE_CONN_GONE] = "gone",
};
_Static_assert(sizeof(conn_state_names) / sizeof(conn_state_names[0]) ==
	       GLUE_CONN__COUNT, "a name for every connection state");

static enum glue_conn_state conn_state(const struct glue_conn *c)
{
	return atomic_load(&c->state);
}

/* Aborting or gone: no more I/O on the socket from any thread. */
static bool conn_stopped(const struct glue_conn *c)
{
	return conn_state(c) >= GLUE_CONN_ABORTING;
}

/* The one place the state changes (engine thread). */
static void conn_set_state(struct glue_conn *c, enum glue_conn_state s)
{
	enum glue_conn_state old = conn_state(c);

	atomic_store(&c->state, s);
	glue_debug("conn %p fd %d: %s -> %s (reason %d)", (void *)c, c->fd,
		   conn_state_names[old], conn_state_names[s], c->reason);
}

/* The calling thread's latest reading of CLOCK_MONOTONIC (now_ms,
 * now_ns), in nanoseconds: a time that has passed, known without a
 * clock_gettime (about 40 ns on a VM; cork_burst). 0: none yet. */
static _Thread_local int64_t clock_seen_ns;

/* CLOCK_MONOTONIC in nanoseconds, not kept in clock_seen_ns. */
static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ns(void)
{
	clock_seen_ns = mono_ns();
	return clock_seen_ns;
}

static int64_t now_ms(void)
{
	return now_ns() / 1000000;
}

bool glue_on_engine(const struct glue_engine *e)
{
	return tls_engine == e;
}

const char *glue_engine_name(const struct glue_engine *e)
{
	return e->be->name;
}

static void wake(struct glue_engine *e)
{
	uint64_t one = 1;

	atomic_store(&e->pending, true);
	/* One write per sleep: the first waker takes the flag, and those
	 * that come before the engine is back (a socket added, then kicked
	 * at once: issue 13) find it taken. The engine sets it again
	 * before it looks at pending and the ready list, and sleeps. */
	if (atomic_exchange(&e->sleeping, false) &&
	    write(e->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, the engine wakes anyway */
	}
}

void glue_wake_drain(struct glue_engine *e)
{
	uint64_t v;

	while (read(e->wake_fd, &v, sizeof(v)) > 0)
		;
}

/* ------------------------------------------------------------------ */
/* The ready list                                                     */
/* ------------------------------------------------------------------ */

/*
 * The engine visits only the connections that have something to do: a
 * pass over every connection on each wake-up made a burst of N connects
 * cost O(N^2) (issue 13, docs/benchmarks.md "Connection rate"). Whatever
 * gives a connection work (a kick, a close request, a completion, a
 * timer or deadline that fell due, a newly added socket) pushes it on
 * e->ready, a lock-free stack that any thread pushes on and the engine
 * takes whole at the start of a pass. c->queued keeps a connection on it
 * once: whoever sets it links c in; the engine clears it before the
 * visit, so a request made during the visit queues c again. The flags
 * that say what to do (kicked, tx_more, ...) are set before the push and
 * read after the clear, so none is missed.
 *
 * A connection leaves for good when it is finished: the engine sets
 * queued itself, for ever, so that kicks that still come (they are
 * allowed until glue_conn_free) never link it in again. If queued was
 * already set, a push is on its way or done, and the engine finishes c
 * when it comes round (ready_claim).
 */
static bool ready_push(struct glue_conn *c)
{
	struct glue_engine *e = c->e;
	struct glue_conn *head;

	if (atomic_exchange(&c->queued, true))
		return false;     /* on the list, or about to be */
	head = atomic_load(&e->ready);
	do
		c->rnext = head;
	while (!atomic_compare_exchange_weak(&e->ready, &head, c));
	return true;
}

/* Queue c and, from another thread, make sure the engine looks. On the
 * engine thread the list is looked at before it sleeps. */
static void ready_kick(struct glue_conn *c)
{
	if (ready_push(c) && !glue_on_engine(c->e))
		wake(c->e);
}

/* The engine is about to finish c: true if it may (c is on no list and
 * never will be again). */
static bool ready_claim(struct glue_conn *c)
{
	return !atomic_exchange(&c->queued, true);
}

static bool send_locked(struct glue_conn *c, bool post, size_t len);
static bool send_direct(struct glue_conn *c, bool post, size_t len);

/* ------------------------------------------------------------------ */
/* Corking bursts                                                     */
/* ------------------------------------------------------------------ */

/*
 * wisp's sockets have TCP_NODELAY: an FPDU is a whole message, and a
 * ping-pong must not wait for an acknowledgement. But a posting thread
 * that sends each of a burst of small WRs itself (glue_conn_send_post)
 * then makes one TCP segment per WR, each a transmit, a receive softirq
 * and a wake-up of the peer's engine, where a TCP program with Nagle's
 * algorithm sends few large segments (docs/performance-log.md "WRITE 4 KiB:
 * where the time goes"). So once a post is the GLUE_CORK_STREAK-th in a
 * row of small posts made within WISP_SEND_CORK of the end of the one
 * before (post_burst), it is held: its WR stays in the owner's queue,
 * unsent, and the post returns (post_hold). The post that would hold
 * GLUE_HOLD_POSTS posts or GLUE_HOLD_BYTES octets sends them all in one
 * fill and one sendmsg, on the posting thread, with MSG_MORE: the
 * kernel adds them to the socket's last partial segment and transmits
 * full segments only. One system call per group, not per WR: the
 * posting thread's sendmsg per 4 KiB WRITE was what limited the stream
 * (a CPU, most of it in the kernel). Small: at most half the socket's
 * MSS (and GLUE_CORK_MAX_BYTES), so that at least two fit in a
 * segment: on loopback (MSS 64 KiB) 4 KiB WRITEs are held, over a 1500-octet
 * MTU they are not (corking them there made WRITE 4 KiB over veth several
 * times slower; docs/performance-log.md). A lone post, a ping-pong's, and
 * sends from elsewhere (a polling thread's Read Responses, the engine's)
 * never hold or cork. TLS connections never do (a record per send).
 *
 * Linux holds such a tail until a send without MSG_MORE, an
 * acknowledgement while other data is in flight, a TCP_NODELAY
 * setsockopt (which pushes what is pending), or its probe timer (200 ms
 * and more). So whoever waits pushes it, with the setsockopt, or sends
 * the posts held, without MSG_MORE (which pushes the tail too), and only
 * when something may be held (c->corked):
 *
 * - the posting thread's next send without MSG_MORE sends it too;
 * - a poller that finds its CQ empty (glue_conn_recv_now,
 *   glue_conn_send_poll) and one that arms its CQ to sleep
 *   (glue_conn_release) push it (cork_push);
 * - the engine, as a backstop for a program that posts a burst and then
 *   neither polls nor posts: the posting thread lists c on e->cork_new
 *   the first time it holds or corks since the engine last looked, and
 *   the engine, while anything is listed, looks every GLUE_CORK_TICK_MS
 *   and pushes what is still held, or sends the posts held with its own
 *   send (cork_tick). A listing wakes the engine
 *   only when no look is due (cork_ticking), so a stream of bursts
 *   costs it one wake-up per tick, not one per burst.
 *
 * Any fill takes what was held (conn_tx_fill clears hold_n): the posts
 * held are the owner's queued WRs, and whoever sends next sends them;
 * the engine takes them whenever it looks at c's sends (pump_tx), so a
 * graceful close sends them before its FIN.
 *
 * corked and cork_listed are written under tx_lock only (the posting
 * thread sets them around its sendmsg; a pusher clears corked, the
 * engine cork_listed, under the lock), so a push and a corked send never
 * interleave: the push either sees the flag of a send before it, or the
 * send comes after it and sets the flag again. A pusher that finds the
 * lock taken leaves the tail to the lock's holder or to the engine's
 * next look (c stays listed). Closing loses nothing: shutdown() and
 * close() send what the socket holds.
 */

/* A WISP_* setting that is "off" (0), "on" (on) or a decimal number
 * in [lo, hi]: 0 and *v set, or -EINVAL. */
static int parse_switch_num(const char *s, unsigned long on,
			    unsigned long lo, unsigned long hi,
			    unsigned long *v)
{
	unsigned long n = 0;

	if (!s || !*s)
		return -EINVAL;
	if (!strcmp(s, "off") || !strcmp(s, "on")) {
		*v = s[1] == 'n' ? on : 0;
		return 0;
	}
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		n = n * 10 + (unsigned long)(*p - '0');
		if (n > hi)
			return -EINVAL;
	}
	if (n < lo)
		return -EINVAL;
	*v = n;
	return 0;
}

/* A setting in microseconds: "off" (0), "on" (on_us) or 1 .. max_us. */
static int parse_us(const char *s, unsigned on_us, unsigned max_us,
		    unsigned *us)
{
	unsigned long v;
	int r = parse_switch_num(s, on_us, 1, max_us, &v);

	if (!r)
		*us = (unsigned)v;
	return r;
}

/* Such a setting from the environment (unset: on); a bad value is
 * reported on stderr, naming the variable, and gives -EINVAL. */
static int us_setting(const char *name, unsigned on_us, unsigned max_us,
		      unsigned *us)
{
	const char *env = getenv(name);

	if (!parse_us(env ? env : "on", on_us, max_us, us))
		return 0;
	fprintf(stderr, "wisp: %s=\"%s\" is not valid; accepted values: on, "
		"off, 1 .. %u (microseconds)\n", name, env, max_us);
	return -EINVAL;
}

int glue_send_cork_parse(const char *s, unsigned *us)
{
	return parse_us(s, GLUE_SEND_CORK_ON_US, GLUE_SEND_CORK_MAX_US, us);
}

int glue_poll_wait_parse(const char *s, unsigned *us)
{
	return parse_us(s, GLUE_POLL_WAIT_ON_US, GLUE_POLL_WAIT_MAX_US, us);
}

int glue_sock_mss(int fd)
{
	int mss = 0;
	socklen_t len = sizeof(mss);

	if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) || mss < 0)
		return 0;
	return mss;
}

/* The most a corked send may carry on c: half its MSS, read from the
 * socket the first time a post could cork (tx_lock held). */
static size_t cork_max(struct glue_conn *c)
{
	if (!c->cork_limit) {
		c->cork_limit = (size_t)glue_sock_mss(c->fd) / 2;
		if (c->cork_limit > GLUE_CORK_MAX_BYTES)
			c->cork_limit = GLUE_CORK_MAX_BYTES;
		if (!c->cork_limit)
			c->cork_limit = 1;    /* asked once: never corks */
	}
	return c->cork_limit;
}

/* Is this post, of len octets, part of a burst: to be held or to go
 * with MSG_MORE? (tx_lock held) */
static bool post_burst(struct glue_conn *c, size_t len)
{
	if (!c->cork_ok)
		return false;
	/* Past the gap already when this thread last read the clock (a
	 * ping-pong's poll for the answer does): a lone post, known without
	 * reading the clock again before its send. Else the clock says. */
	if (clock_seen_ns - c->cork_last_ns > c->e->cork_gap_ns ||
	    now_ns() - c->cork_last_ns > c->e->cork_gap_ns ||
	    len > cork_max(c)) {
		c->cork_streak = 0;
		return false;
	}
	return ++c->cork_streak >= GLUE_CORK_STREAK;
}

/* May this burst's post of len octets wait for the next (tx_lock held)? */
static bool post_hold(struct glue_conn *c, size_t len)
{
	if (c->hold_n + 1 >= GLUE_HOLD_POSTS ||
	    c->hold_bytes + len >= GLUE_HOLD_BYTES)
		return false;
	c->hold_n++;
	c->hold_bytes += len;
	return true;
}

/* The engine has a look due at the listed connections, or will see c
 * before it sleeps: otherwise wake it (tx_lock held; c's send corked). */
static void cork_list_add(struct glue_conn *c)
{
	struct glue_engine *e = c->e;
	struct glue_conn *head;

	if (atomic_exchange(&c->cork_listed, true))
		return;
	head = atomic_load(&e->cork_new);
	do
		c->cnext = head;
	while (!atomic_compare_exchange_weak(&e->cork_new, &head, c));
	/* After the push: the engine clears cork_ticking before it looks
	 * at cork_new, so either it sees c or this sees the flag clear. */
	if (!atomic_load(&e->cork_ticking))
		wake(e);
}

/* Something is held back on c now, in its socket or its queue (tx_lock
 * held): say so to the pushers and list c for the engine's look. */
static void cork_mark(struct glue_conn *c)
{
	if (!atomic_load_explicit(&c->corked, memory_order_relaxed))
		atomic_store(&c->corked, true);
	cork_list_add(c);
}

/* After a direct send of c (tx_lock held): with MSG_MORE (more), a
 * tail may be held now; without, the send pushed whatever was. */
static void cork_sent(struct glue_conn *c, bool more, ssize_t n)
{
	if (!c->cork_ok)
		return;
	if (n > 0 && more) {
		glue_stat_tx_corked(c);
		cork_mark(c);
	} else if (n > 0 && atomic_load_explicit(&c->corked,
						 memory_order_relaxed)) {
		atomic_store(&c->corked, false);
	}
}

/* Push what c's socket holds back, if anything (tx_lock held). */
static void cork_push_locked(struct glue_conn *c, bool engine)
{
	int one = 1;

	if (!atomic_exchange(&c->corked, false) || c->fd < 0 ||
	    conn_state(c) == GLUE_CONN_GONE)
		return;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	glue_stat_tx_push(c, engine);
}

/* A thread waits for completions: push what c holds back, unless
 * another thread has the transmit side (then it, or the engine's next
 * look, does). One atomic load when nothing is held. */
static void cork_push(struct glue_conn *c)
{
	if (!atomic_load(&c->corked) || pthread_mutex_trylock(&c->tx_lock))
		return;
	if (c->hold_n) {
		/* Posts held: sent now, without MSG_MORE, which pushes a
		 * held tail too. */
		glue_stat_tx_push(c, false);
		send_locked(c, false, 0);
		return;
	}
	cork_push_locked(c, false);
	glue_tx_unlock(c);
}

/* Engine thread: take what posting threads listed meanwhile. */
static void cork_take_new(struct glue_engine *e)
{
	struct glue_conn *c, *next;

	for (c = atomic_exchange(&e->cork_new, NULL); c; c = next) {
		next = c->cnext;
		c->cnext = e->cork_list;
		e->cork_list = c;
	}
}

/* Engine thread, c going away (both its locks held): off the lists. */
static void cork_forget(struct glue_engine *e, struct glue_conn *c)
{
	struct glue_conn **p;

	if (!atomic_load(&c->cork_listed))
		return;
	cork_take_new(e);
	for (p = &e->cork_list; *p; p = &(*p)->cnext) {
		if (*p == c) {
			*p = c->cnext;
			break;
		}
	}
	atomic_store(&c->cork_listed, false);
}

/* Engine thread: push every listed tail; those whose lock was taken
 * stay listed for the next look. */
static void cork_push_listed(struct glue_engine *e)
{
	struct glue_conn *c, *next, *keep = NULL;

	cork_take_new(e);
	for (c = e->cork_list; c; c = next) {
		next = c->cnext;
		if (pthread_mutex_trylock(&c->tx_lock)) {
			c->cnext = keep;
			keep = c;
			continue;
		}
		/* Unlisted before the look at corked: a send that corks
		 * after it lists c again. */
		atomic_store(&c->cork_listed, false);
		if (c->hold_n) {
			/* Posts held: the engine's own send takes them. */
			glue_stat_tx_push(c, true);
			atomic_store(&c->tx_more, true);
			glue_tx_unlock(c);
			ready_push(c);
			continue;
		}
		cork_push_locked(c, true);
		glue_tx_unlock(c);
	}
	e->cork_list = keep;
}

/* Engine thread, each pass: the backstop's look when due, and the wait
 * bound until the next one (timeout: the bound so far, -1 none). */
static int cork_tick(struct glue_engine *e, int timeout)
{
	int64_t now, left;

	if (e->cork_at && now_ms() >= e->cork_at) {
		cork_push_listed(e);
		e->cork_at = 0;
	}
	if (!e->cork_list && !atomic_load(&e->cork_new)) {
		/* Nothing to watch: say so, then look once more, so that a
		 * listing from now on wakes the engine (cork_list_add). */
		atomic_store(&e->cork_ticking, false);
		if (!atomic_load(&e->cork_new))
			return timeout;
	}
	atomic_store(&e->cork_ticking, true);
	now = now_ms();
	if (!e->cork_at)
		e->cork_at = now + GLUE_CORK_TICK_MS;
	left = e->cork_at - now;
	if (left < 1)
		left = 1;
	return timeout >= 0 && timeout < left ? timeout : (int)left;
}

/* ------------------------------------------------------------------ */
/* Waiting for the answer                                             */
/* ------------------------------------------------------------------ */

/*
 * A program that waits for a WRITE by watching memory (ib_write_lat,
 * many RDMA servers) calls nothing while it waits, so only the engine
 * can receive the WRITE, and a sleeping engine is woken for every one:
 * on 2 CPUs that wake-up is about half of the ping-pong's round trip
 * (docs/performance-log.md, "The memory-polling floor"). But such a program
 * is a ping-pong: it posts its WRITE, then waits for the peer's. So the
 * thread that posted, and is about to wait anyway, receives the answer
 * itself before ibv_post_send returns, as an empty ibv_poll_cq does
 * (rx_drain as a poller, no lock held between looks, the engine kept
 * off the socket meanwhile: post_rx_ms counts as a poller's app_rx_ms).
 * The WRITE is then in its MR when the program looks, and no thread was
 * woken for it.
 *
 * Only where that pattern shows (struct glue_answer, glue.h): the last
 * GLUE_ANSWER_STREAK lone posts were each answered by octets that
 * completed nothing (a WRITE: GLUE_RX_COMPLETED clear; a SEND or a Read
 * Response completes work that the program polls or sleeps for, and an
 * empty poll receives it already) within WISP_POST_POLL of the post.
 * A stream of posts, a post the engine sends, a post before the last
 * one's answer, or a wait that runs out ends it. The wait lasts twice
 * the smoothed answer time (at least GLUE_ANSWER_MIN_NS, at most
 * WISP_POST_POLL) and ends as soon as the answer is in whole; with a
 * message half read (GLUE_RX_PARTIAL) the thread goes on receiving
 * within that time. A wait that ends without the whole answer hands the
 * socket back to the engine at once (rx_more and a kick, as
 * glue_conn_release does), and so does a post that does not wait; one
 * that ends with it keeps the engine off for GLUE_APP_POLL_MS more, as
 * after a poller's look, since the next post waits again; the engine
 * looks again within GLUE_APP_POLL_MAX_MS of that if none comes (an
 * unasked WRITE after the last answer may wait that long). Between
 * looks the thread yields the CPU
 * (sched_yield: back at once when no other thread wants it).
 *
 * The cost is the posting thread's time: ibv_post_send returns after
 * the answer instead of at once, up to twice the answer time. A program
 * that does other work between its post and its look at memory loses
 * that much of it (WISP_POST_POLL=off). TLS connections never wait
 * (their receive side is another path).
 */

int glue_post_poll_parse(const char *s, unsigned *us)
{
	return parse_us(s, GLUE_POST_POLL_ON_US, GLUE_POST_POLL_MAX_US, us);
}

void glue_answer_init(struct glue_answer *a, int64_t max_ns)
{
	atomic_init(&a->post_ns, 0);
	atomic_init(&a->srtt_ns, 0);
	atomic_init(&a->streak, 0);
	a->max_ns = max_ns;
}

int64_t glue_answer_post(struct glue_answer *a, int64_t now, bool lone)
{
	int64_t w;

	if (!a->max_ns)
		return 0;
	if (!lone) {
		/* Stores only when they change something: in a stream every
		 * post comes here. */
		if (atomic_load_explicit(&a->post_ns, memory_order_relaxed))
			atomic_store(&a->post_ns, 0);
		if (atomic_load_explicit(&a->streak, memory_order_relaxed))
			atomic_store(&a->streak, 0);
		return 0;
	}
	if (atomic_exchange(&a->post_ns, now)) {
		/* The one before is still unanswered: a stream. */
		if (atomic_load_explicit(&a->streak, memory_order_relaxed))
			atomic_store(&a->streak, 0);
		return 0;
	}
	if (atomic_load(&a->streak) < GLUE_ANSWER_STREAK)
		return 0;
	w = 2 * atomic_load_explicit(&a->srtt_ns, memory_order_relaxed);
	if (w < GLUE_ANSWER_MIN_NS)
		w = GLUE_ANSWER_MIN_NS;
	return w < a->max_ns ? w : a->max_ns;
}

bool glue_answer_waiting(const struct glue_answer *a)
{
	return atomic_load_explicit(&a->post_ns, memory_order_relaxed) != 0;
}

void glue_answer_rx(struct glue_answer *a, int64_t now, int flags)
{
	int64_t post = atomic_exchange(&a->post_ns, 0), rtt, srtt;
	int n;

	if (!post)
		return;
	if (flags & GLUE_RX_COMPLETED) {
		/* Every answer of a SEND ping-pong comes here: a store only
		 * when it changes something, as in glue_answer_post. */
		if (atomic_load_explicit(&a->streak, memory_order_relaxed))
			atomic_store(&a->streak, 0);
		return;
	}
	rtt = now - post;
	if (rtt < 0 || rtt > a->max_ns) {
		atomic_store(&a->streak, 0);
		return;
	}
	/* One writer at a time: receives are serialised by rx_lock. */
	srtt = atomic_load_explicit(&a->srtt_ns, memory_order_relaxed);
	srtt = srtt ? srtt + (rtt - srtt) / 8 : rtt;
	atomic_store_explicit(&a->srtt_ns, srtt, memory_order_relaxed);
	n = atomic_load(&a->streak);
	if (n < GLUE_ANSWER_STREAK)
		atomic_store(&a->streak, n + 1);
}

void glue_answer_miss(struct glue_answer *a)
{
	/* The post stays unanswered: a late answer still tells the time
	 * (a longer wait once the streak is back). */
	atomic_store(&a->streak, 0);
}

/*
 * The polling thread's clock. The stamps a polling thread leaves
 * (app_rx_ms, app_tx_ms) tell the engine it polled within
 * GLUE_APP_POLL_MS; an empty poll leaves two (glue_conn_recv_at, then
 * glue_conns_wait_tx_at, both with the one reading the poll took), and
 * a fine clock read (CLOCK_MONOTONIC through the vDSO: 36 ns on the test
 * VM, against an empty poll's 410-460 ns) was a sixth of it. So a
 * thread reads the fine clock once and reuses
 * the reading for up to GLUE_STAMP_REUSE more stamps, as long as
 * CLOCK_MONOTONIC_COARSE (6 ns there: no TSC read) has not moved. A
 * thread that polls all the time then leaves stamps a few microseconds
 * old at most; one that polls seldom, at most a coarse step old (a tick,
 * 4 ms here; up to 5.9 ms measured, the kernel updating it late), which the
 * engine may read as no polling: it then takes the socket back, as for
 * any thread that does not poll. Never newer than the truth, so the
 * engine never stays off longer than it would have.
 */
static _Thread_local int64_t poll_clock_ms;     /* the last fine reading */
static _Thread_local int64_t poll_clock_coarse; /* the coarse clock then */
static _Thread_local unsigned poll_clock_left;  /* reuses left */

int64_t glue_poll_clock_ms(void)
{
	struct timespec ts;
	int64_t coarse;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	coarse = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	if (poll_clock_left && coarse == poll_clock_coarse) {
		poll_clock_left--;
		return poll_clock_ms;
	}
	poll_clock_coarse = coarse;
	poll_clock_left = GLUE_STAMP_REUSE;
	poll_clock_ms = now_ms();
	return poll_clock_ms;
}

static bool within_poll_ms(const _Atomic int64_t *at)
{
	return now_ms() - atomic_load_explicit(at, memory_order_relaxed) <
	       GLUE_APP_POLL_MS;
}

/* A thread received on c itself within GLUE_APP_POLL_MS
 * (glue_conn_recv_now, or a posting thread waiting for its answer; 0
 * after glue_conn_release). */
static bool app_polls(const struct glue_conn *c)
{
	return within_poll_ms(&c->app_rx_ms) || within_poll_ms(&c->post_rx_ms);
}

/* A polling thread sends for c: TLS, one sent for it within
 * GLUE_APP_POLL_MS; plaintext, a thread that waits for room on c when
 * its CQ is empty polled within GLUE_APP_POLL_MS (glue_conns_wait_tx_at,
 * glue_conn_tx_polled; "Waiting for room"; not with zero-copy sends,
 * which are the engine's). */
static bool app_sends(const struct glue_conn *c)
{
	if (!c->tls_on && (!c->e->poll_wait_ns || c->e->zc_min))
		return false;
	return within_poll_ms(&c->app_tx_ms);
}

/* The engine left sending on c to the thread that polls it, which
 * still does: waking the engine would only make it look and leave. */
static bool tx_left_to_poller(const struct glue_conn *c)
{
	return atomic_load(&c->tx_deferred) && app_sends(c);
}

void glue_conn_polled(struct glue_conn *c)
{
	if (c->tls_on && !conn_stopped(c))
		atomic_store_explicit(&c->app_tx_ms, glue_poll_clock_ms(),
				      memory_order_relaxed);
}

void glue_conn_tx_polled(struct glue_conn *c)
{
	if (c->tls_on || !c->e->poll_wait_ns || conn_stopped(c))
		return;
	atomic_store_explicit(&c->app_tx_ms, glue_poll_clock_ms(),
			      memory_order_relaxed);
	/* Left over from a post (the engine leaves it to this thread) and
	 * room for it, as far as we know: send it now. */
	if (atomic_load(&c->tx_more) && !atomic_load(&c->tx_full))
		send_direct(c, false, 0);
}

void glue_conn_send_poll(struct glue_conn *c)
{
	cork_push(c);
	if (!c->tls_on || conn_stopped(c))
		return;
	atomic_store_explicit(&c->app_tx_ms, glue_poll_clock_ms(),
			      memory_order_relaxed);
	if (atomic_load(&c->tx_more))
		glue_conn_send_now(c);
}

void glue_conn_kick(struct glue_conn *c)
{
	if (atomic_exchange(&c->kicked, true))
		return;           /* already kicked, the engine will look */
	if (tx_left_to_poller(c)) {
		/* The poller sends, and it goes by tx_more (a kick alone
		 * would leave the WR to an engine that keeps deferring to
		 * that poller); the engine looks soon anyway. */
		atomic_store(&c->tx_more, true);
		atomic_store(&c->kicked, false);
		return;
	}
	ready_kick(c);
}

/* ------------------------------------------------------------------ */
/* Commands                                                           */
/* ------------------------------------------------------------------ */

void glue_engine_call(struct glue_engine *e, void (*fn)(void *), void *arg)
{
	struct glue_cmd cmd = { .fn = fn, .arg = arg };

	if (glue_on_engine(e)) {
		fn(arg);
		return;
	}
	/* cmd lives on this stack until the engine marks it done below. */
	pthread_mutex_lock(&e->cmd_lock);
	if (e->cmd_tail)
		e->cmd_tail->next = &cmd;
	else
		e->cmd_head = &cmd; // cppcheck-suppress autoVariables
	e->cmd_tail = &cmd; // cppcheck-suppress autoVariables
	wake(e);
	while (!cmd.done)
		pthread_cond_wait(&e->cmd_cond, &e->cmd_lock);
	pthread_mutex_unlock(&e->cmd_lock);
}

static void run_commands(struct glue_engine *e)
{
	struct glue_cmd *cmd;

	pthread_mutex_lock(&e->cmd_lock);
	while ((cmd = e->cmd_head)) {
		e->cmd_head = cmd->next;
		if (!e->cmd_head)
			e->cmd_tail = NULL;
		pthread_mutex_unlock(&e->cmd_lock);
		cmd->fn(cmd->arg);
		pthread_mutex_lock(&e->cmd_lock);
		cmd->done = true;
	}
	pthread_cond_broadcast(&e->cmd_cond);
	pthread_mutex_unlock(&e->cmd_lock);
}

/* ------------------------------------------------------------------ */
/* Closing                                                            */
/* ------------------------------------------------------------------ */

/* Shut the socket down so that operations in flight complete. */
static void conn_abort(struct glue_conn *c, int reason)
{
	if (conn_stopped(c))
		return;
	if (!c->reason)
		c->reason = reason;
	conn_set_state(c, GLUE_CONN_ABORTING);
	shutdown(c->fd, SHUT_RDWR);
}

/* Once nothing is in flight: unlink, close, and tell the owner last: it
 * may free c as soon as ended() has run. */
static void conn_finish(struct glue_engine *e, struct glue_conn *c)
{
	if (e->bp_hot == c)
		e->bp_hot = NULL;
	c->rx_lazy = false;
	if (c->prev)
		c->prev->next = c->next;
	else
		e->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	e->be->conn_del(e, c);
	/* Close under both locks: a posting thread in glue_conn_send_now()
	 * or a polling one in glue_conn_recv_now() that checked the state
	 * before it changed is still using the descriptor, and a closed
	 * number may already name another file. Once it has let go, it
	 * finds the connection gone. */
	pthread_mutex_lock(&c->tx_lock);
	wisp_lock_take(&c->rx_lock);
	cork_forget(e, c);
	conn_set_state(c, GLUE_CONN_GONE);
	if (c->fd >= 0)           /* -1: conn_zc_abort_close closed it */
		close(c->fd);
	c->fd = -1;
	glue_tls_free(c->tls);
	c->tls = NULL;
	wisp_lock_give(&c->rx_lock);
	pthread_mutex_unlock(&c->tx_lock);
	c->ops->ended(c->arg, c->reason);
}

/* An open connection starts its graceful close (engine thread). */
static void conn_start_close(struct glue_conn *c)
{
	if (conn_state(c) != GLUE_CONN_OPEN)
		return;
	c->deadline_ms = now_ms() + GLUE_CLOSE_DEADLINE_MS;
	conn_set_state(c, GLUE_CONN_CLOSING);
}

void glue_conn_close(struct glue_conn *c, int reason, bool graceful)
{
	if (conn_stopped(c))
		return;
	if (!c->reason)
		c->reason = reason;
	if (!graceful)
		conn_abort(c, reason);
	else
		conn_start_close(c);
	ready_push(c);            /* engine thread: it looks before sleeping */
}

void glue_conn_close_soon(struct glue_conn *c)
{
	/* pump_rx() takes the request on the engine's next pass; tx_more
	 * makes pump_tx() ask tx_fill once more before it half-closes, so
	 * that what the owner still has queued goes out first. */
	atomic_store(&c->tx_more, true);
	atomic_store(&c->close_req, true);
	atomic_store(&c->rx_more, true);
	ready_kick(c);
}

void glue_conn_free(struct glue_conn *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->tx_lock);
	if (c->tx_iov != c->tx_iov_small)
		munmap(c->tx_iov, GLUE_TX_IOV * sizeof(struct iovec));
	wisp_mem_free(c, sizeof(*c));
}

/* ------------------------------------------------------------------ */
/* Idle connections                                                   */
/* ------------------------------------------------------------------ */

/*
 * A thousand connected but quiet connections should cost little memory,
 * a stream should never allocate per message. So a connection (and its
 * owner) takes large buffers when traffic asks for them, keeps them while
 * anything moves, and gives them back once nothing has for GLUE_IDLE_MS:
 * every octet sent or received marks the connection active; while any
 * connection may hold a large buffer, the engine looks at them all every
 * GLUE_IDLE_MS, clears the mark of those that moved and trims those that
 * did not. Nothing is looked at, and the engine never wakes for this,
 * while every connection is quiet and small; a mark made on another
 * thread while the engine sleeps is acted on when it next wakes.
 */

/* Something moved on c (engine or a polling / posting thread). */
static void conn_mark_active(struct glue_conn *c)
{
	if (atomic_load_explicit(&c->active, memory_order_relaxed))
		return;
	atomic_store_explicit(&c->active, true, memory_order_relaxed);
	atomic_store_explicit(&c->e->trim_wanted, true, memory_order_release);
}

/* tx_fill into c->tx_iov (tx_lock held, no send in flight). A fill that
 * uses every small iovec may have more: take the large array and fill
 * again (tx_fill gives the same octets until tx_done says otherwise). */
static int conn_tx_fill(struct glue_conn *c)
{
	int n = c->ops->tx_fill(c->arg, c->tx_iov, c->tx_iov_cap);

	c->hold_n = 0;            /* what was held is in this fill */
	c->hold_bytes = 0;
	if (n > 0)
		conn_mark_active(c);
	if (n == c->tx_iov_cap && c->tx_iov == c->tx_iov_small) {
		void *big = mmap(NULL, GLUE_TX_IOV * sizeof(struct iovec),
				 PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (big != MAP_FAILED) {
			c->tx_iov = big;
			c->tx_iov_cap = GLUE_TX_IOV;
			n = c->ops->tx_fill(c->arg, c->tx_iov, c->tx_iov_cap);
		}
	}
	return n;
}

/* c has been quiet: give back its large iovec array and let the owner
 * trim. Returns true if a large buffer may still be held. Engine. */
static bool conn_trim(struct glue_conn *c)
{
	bool held = true;

	if (conn_state(c) != GLUE_CONN_OPEN)
		return false;
	/* A side in use is not idle: look again next time. */
	if (!wisp_lock_try(&c->rx_lock))
		return true;
	if (pthread_mutex_trylock(&c->tx_lock))
		goto out_rx;
	/* A send in flight, or a TLS record that must be offered again
	 * with the same octets once the socket has room. */
	if (c->tx_busy || c->tx_wait)
		goto out_tx;
	if (c->tx_iov != c->tx_iov_small) {
		munmap(c->tx_iov, GLUE_TX_IOV * sizeof(struct iovec));
		c->tx_iov = c->tx_iov_small;
		c->tx_iov_cap = GLUE_TX_IOV_SMALL;
	}
	held = c->ops->idle ? c->ops->idle(c->arg) : false;
out_tx:
	pthread_mutex_unlock(&c->tx_lock);
out_rx:
	wisp_lock_give(&c->rx_lock);
	return held;
}

/* Trim the connections quiet since the last look; returns when to look
 * next (0: no need until one becomes active). Engine. */
static int64_t trim_sweep(struct glue_engine *e, int64_t now)
{
	bool again = false;

	atomic_store(&e->trim_wanted, false);
	for (struct glue_conn *c = e->conns; c; c = c->next) {
		if (atomic_exchange_explicit(&c->active, false,
					     memory_order_acquire))
			c->held = true;
		else if (c->held)
			c->held = conn_trim(c);
		again |= c->held;
	}
	return again ? now + GLUE_IDLE_MS : 0;
}

/* The wait timeout, given pump_all's, with the next idle look in it. */
static int trim_timeout(struct glue_engine *e, int timeout)
{
	int64_t now, wait;

	if (!e->trim_at && !atomic_load_explicit(&e->trim_wanted,
						 memory_order_acquire))
		return timeout;
	now = now_ms();
	if (!e->trim_at)
		e->trim_at = now + GLUE_IDLE_MS;
	else if (now >= e->trim_at)
		e->trim_at = trim_sweep(e, now);
	if (!e->trim_at)
		return timeout;
	wait = e->trim_at - now > 0 ? e->trim_at - now : 1;
	return timeout >= 0 && timeout < wait ? timeout : (int)wait;
}

/* ------------------------------------------------------------------ */
/* Busy polling                                                       */
/* ------------------------------------------------------------------ */

/*
 * A program that waits for a WRITE by spinning on the last octet of its
 * buffer (ib_write_lat, many RDMA servers) never enters wisp while it
 * waits: only the engine can place the octets, and an engine blocked in
 * io_uring or epoll pays a wake-up per message. So after it moved octets
 * the engine keeps looking for up to bp_budget_ns before it blocks: each
 * pass dispatches the events the backend already has (io_uring: a look
 * at the shared completion ring, no system call unless requests wait to
 * be submitted; epoll: epoll_wait with no timeout), among them the
 * readiness of the sockets it waits on, then yields the CPU (sched_yield:
 * at once back if no other thread wants this CPU). A socket that an
 * application thread polls itself is not waited on (GLUE_APP_POLL_MS),
 * so it is not spun on either.
 *
 * The window adapts. A window that runs out halves the next one; one
 * that finds something doubles it back towards bp_max_ns; an engine that
 * blocked and was woken for octets within bp_max_ns widens it to twice
 * that gap. Passes that come back late (the yield let another thread run
 * for more than BP_BUSY_NS) mean the host has no CPU to spare, and there
 * a spinning engine is worse than a sleeping one: a runnable thread that
 * yielded waits for its turn, a woken one is scheduled at once. So the
 * engine closes the window and stays off busy polling for bp_hold_ns,
 * which doubles (up to BP_HOLD_MAX_NS) while the host stays busy. One
 * late pass alone says little where every thread yields (an interrupt,
 * another process's slice: on 2 vCPUs with two memory-polling threads
 * that yield, tens in a second of 20,000 windows), so the engine keeps a
 * score of recent passes, each late one adding BP_LATE_ONE and each pass
 * taking an eighth away, and holds off when a late pass finds the score
 * at BP_LATE_HOLD or above (with 128, a second late pass within six
 * passes of the first; with 0, the default, any late pass). Beside threads that spin without yielding (perftest), or
 * other processes that want the CPUs, late passes come together; the
 * score only decays while the engine spins, so after a hold the first
 * late pass holds off again.
 *
 * While it spins, the engine reads the socket that last brought octets
 * itself (bp_hot_recv) and leaves its readiness wait unarmed (rx_lazy):
 * an armed io_uring poll would complete for the same octets, through
 * task work, and cost a recvmsg that finds nothing and a new poll per
 * message; epoll a re-arm (epoll_ctl) per message. It arms the wait
 * once it stops spinning (bp_arm_lazy); arming reports octets already
 * there.
 *
 * Idle costs nothing: a window opens only after the engine moved octets
 * and ends at most bp_budget_ns later.
 */
#define BP_BUSY_NS      50000           /* a pass this slow: descheduled */
#define BP_MIN_NS       1000            /* a shorter window is none */
#define BP_HOLD_MIN_NS  10000000        /* 10 ms */
#define BP_HOLD_MAX_NS  1000000000      /* 1 s */
#define BP_LATE_ONE     256             /* a late pass adds this */
/* 0: any late pass holds off, as before the score (docs/performance-log.md,
 * "The memory-polling floor": a threshold of 128 helped on a quiet host
 * and slowed the epoll engine 2x at load 2-3; the safe rule is kept
 * until a host with free CPUs measures it). */
#define BP_LATE_HOLD    0               /* a late pass at this: busy */

int glue_busy_poll_parse(const char *s, long ncpus, unsigned *us)
{
	unsigned long v = 0;

	if (!s || !*s)
		return -EINVAL;
	if (!strcmp(s, "auto")) {
		*us = ncpus >= GLUE_BUSY_POLL_AUTO_CPUS ?
		      GLUE_BUSY_POLL_AUTO_US : 0;
		return 0;
	}
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*p - '0');
		if (v > GLUE_BUSY_POLL_MAX_US)
			return -EINVAL;
	}
	*us = (unsigned)v;
	return 0;
}

/* The CPUs this process may run on (a cpuset or taskset may allow fewer
 * than the host has). */
static long usable_cpus(void)
{
	cpu_set_t set;

	if (!sched_getaffinity(0, sizeof(set), &set))
		return CPU_COUNT(&set);
	return sysconf(_SC_NPROCESSORS_ONLN);
}

static int busy_poll_setting(unsigned *us)
{
	const char *env = getenv("WISP_BUSY_POLL_US");

	if (!glue_busy_poll_parse(env ? env : "auto", usable_cpus(), us))
		return 0;
	fprintf(stderr, "wisp: WISP_BUSY_POLL_US=\"%s\" is not valid; accepted "
		"values: auto, 0 .. %u (microseconds)\n", env,
		GLUE_BUSY_POLL_MAX_US);
	return -EINVAL;
}

#define BP_INC(e, f) atomic_fetch_add_explicit(&(e)->bp_st.f, 1, \
					       memory_order_relaxed)

void glue_engine_get_stats(const struct glue_engine *e,
			   struct glue_engine_stats *st)
{
	struct glue_engine *m = (struct glue_engine *)e;

#define BP_GET(f) atomic_load_explicit(&m->bp_st.f, memory_order_relaxed)
	st->bp_windows = BP_GET(windows);
	st->bp_spins = BP_GET(spins);
	st->bp_hits = BP_GET(hits);
	st->bp_misses = BP_GET(misses);
	st->bp_busy = BP_GET(busy);
	st->bp_grown = BP_GET(grown);
#undef BP_GET
	st->zc_min = e->zc_min;
	st->zc_avail = e->zc_avail;
	st->zc_sends = atomic_load_explicit(&m->zc_st.sends,
					    memory_order_relaxed);
	st->zc_copied = atomic_load_explicit(&m->zc_st.copied,
					     memory_order_relaxed);
	st->zc_fallback = atomic_load_explicit(&m->zc_st.fallback,
					       memory_order_relaxed);
	st->bp_max_us = (unsigned)(e->bp_max_ns / 1000);
	st->bp_budget_us = (unsigned)(atomic_load_explicit(&m->bp_budget_pub,
					memory_order_relaxed) / 1000);
}

static void bp_set_budget(struct glue_engine *e, int64_t ns)
{
	if (ns > e->bp_max_ns)
		ns = e->bp_max_ns;
	e->bp_budget_ns = ns;
	atomic_store_explicit(&e->bp_budget_pub, ns, memory_order_relaxed);
}

/* The engine moved octets (engine thread). */
static void bp_active(struct glue_engine *e)
{
	int64_t t;

	if (!e->bp_max_ns)
		return;
	t = now_ns();
	e->bp_active_ns = t;
	if (e->bp_woke_after_ns < 0)
		return;
	/* It blocked and octets came soon after: a window that long would
	 * have caught them. */
	if (t >= e->bp_hold_until_ns &&
	    e->bp_woke_after_ns * 2 > e->bp_budget_ns) {
		bp_set_budget(e, e->bp_woke_after_ns * 2);
		BP_INC(e, grown);
	}
	e->bp_woke_after_ns = -1;
}

/* The engine blocks (before) and is back (after), around be->wait. */
static void bp_block(struct glue_engine *e, bool before)
{
	int64_t t;

	if (!e->bp_max_ns)
		return;
	t = now_ns();
	if (before) {
		e->bp_slept_ns = t;
		return;
	}
	e->bp_woke_after_ns = t - e->bp_slept_ns < e->bp_max_ns ?
			      t - e->bp_slept_ns : -1;
}

static bool bp_hot_recv(struct glue_engine *e);

/* A pass of the busy poll ended, late or not: true if the host is busy
 * (a late pass found the score of recent passes at BP_LATE_HOLD). */
static bool bp_late(struct glue_engine *e, bool late)
{
	bool busy = late && e->bp_late_score >= BP_LATE_HOLD;

	e->bp_late_score -= e->bp_late_score / 8;
	if (late)
		e->bp_late_score += BP_LATE_ONE;
	return busy;
}

/* Arm the readiness wait of a connection whose socket the busy poll
 * read itself (rx_lazy): once the engine stops spinning, or when another
 * connection becomes the hot one. Engine thread. */
static void bp_arm_lazy(struct glue_engine *e, struct glue_conn *c)
{
	if (!c || !c->rx_lazy)
		return;
	c->rx_lazy = false;
	if (conn_stopped(c) || c->rx_op)
		return;
	e->be->arm_rx(e, c);
}

/* c brought octets: the busy poll reads it first from now on. */
static void bp_set_hot(struct glue_engine *e, struct glue_conn *c)
{
	if (e->bp_hot != c)
		bp_arm_lazy(e, e->bp_hot);
	e->bp_hot = c;
}

/* Leave c's readiness wait unarmed and read it in the busy poll? Only
 * the hot connection, only while busy polling is on, and not through
 * TLS (bp_hot_recv does not read it). */
static bool bp_lazy_ok(const struct glue_engine *e,
		       const struct glue_conn *c)
{
	return e->bp_max_ns && e->bp_hot == c && !c->tls &&
	       conn_state(c) == GLUE_CONN_OPEN;
}

/*
 * Spin while the window lasts. Returns true when something turned up (the
 * engine makes another pass), false when it should block.
 */
static bool busy_poll(struct glue_engine *e)
{
	int64_t start, end, prev;
	bool hit = false;

	if (!e->bp_max_ns || e->bp_budget_ns < BP_MIN_NS)
		return false;
	start = now_ns();
	end = e->bp_active_ns + e->bp_budget_ns;
	if (start >= end || start < e->bp_hold_until_ns)
		return false;
	BP_INC(e, windows);
	for (prev = start;;) {
		int64_t now;

		BP_INC(e, spins);
		if (atomic_exchange(&e->pending, false) ||
		    atomic_load(&e->ready))
			hit = true;
		/* A socket that became readable completes its poll (io_uring)
		 * or shows in epoll_wait: glue_rx_ready() counts the hit. */
		e->bp_spinning = true;
		if (bp_hot_recv(e) || e->be->peek(e) > 0)
			hit = true;
		e->bp_spinning = false;
		if (hit)
			break;
		sched_yield();
		now = now_ns();
		if (bp_late(e, now - prev > BP_BUSY_NS)) {
			/* Someone else had this CPU: spinning only delays
			 * us behind them. */
			BP_INC(e, busy);
			e->bp_hold_until_ns = now + e->bp_hold_ns;
			e->bp_hold_ns = e->bp_hold_ns * 2 > BP_HOLD_MAX_NS ?
					BP_HOLD_MAX_NS : e->bp_hold_ns * 2;
			bp_set_budget(e, e->bp_budget_ns / 4);
			return false;
		}
		prev = now;
		if (now >= end) {
			BP_INC(e, misses);
			bp_set_budget(e, e->bp_budget_ns / 2);
			return false;
		}
	}
	BP_INC(e, hits);
	e->bp_hold_ns = BP_HOLD_MIN_NS;
	bp_set_budget(e, e->bp_budget_ns * 2);
	return true;
}

/* ------------------------------------------------------------------ */
/* Zero-copy sends                                                    */
/* ------------------------------------------------------------------ */

/*
 * The octets tx_fill hands over point into the application's memory (an
 * MR) and into the owner's per-FPDU headers and trailers. A plain send
 * copies them into socket buffers before it returns, so tx_done may say
 * "sent" at once and the owner completes the WR, drops its MR
 * references and reuses the header area. A zero-copy send (WISP_SEND_ZC)
 * pins the pages instead, and the kernel reads them until every segment
 * made from them has been acknowledged (or copied, on a local path); it
 * says so later, in a notification: a second CQE with IORING_CQE_F_NOTIF
 * (io_uring), a SO_EE_ORIGIN_ZEROCOPY message on the socket's error
 * queue (epoll). So such a send's result is held back: tx_busy stays set
 * and tx_done comes only with the notification. Everything the owner
 * keeps until tx_done (the WR's completion, the MR references that
 * ibv_dereg_mr waits for, the headers, pad and CRC of the batch) then
 * lasts until the kernel has let go of the pages, without the owner
 * knowing sends can be zero-copy. The price is one batch in flight per
 * connection: the next one starts after the acknowledgement, not after
 * the copy (docs/configuration.md).
 *
 * An aborted connection may never see that acknowledgement (the peer is
 * gone, or stopped reading): the engine then closes the socket at once
 * with SO_LINGER 0, which resets the stream and frees the queued
 * segments, so the notification comes (io_uring) or can no longer come
 * (epoll: the error queue went with the socket) and the connection
 * finishes; ibv_dereg_mr and QP destruction never wait for a peer.
 */

int glue_send_zc_parse(const char *s, size_t *min)
{
	unsigned long v;
	int r = parse_switch_num(s, GLUE_SEND_ZC_ON_BYTES,
				 GLUE_SEND_ZC_MIN_BYTES,
				 GLUE_SEND_ZC_MAX_BYTES, &v);

	if (!r)
		*min = v;
	return r;
}

static int send_zc_setting(size_t *min)
{
	const char *env = getenv("WISP_SEND_ZC");

	if (!glue_send_zc_parse(env ? env : "off", min))
		return 0;
	fprintf(stderr, "wisp: WISP_SEND_ZC=\"%s\" is not valid; accepted "
		"values: off, on, %u .. %u (octets)\n", env,
		GLUE_SEND_ZC_MIN_BYTES, GLUE_SEND_ZC_MAX_BYTES);
	return -EINVAL;
}

/* Should the send of c->tx_iov[0..n) go zero-copy? (tx_lock held) */
static bool conn_zc_wanted(const struct glue_conn *c, int n)
{
	size_t total = 0;

	if (!c->zc_ok || c->tls)
		return false;
	for (int i = 0; i < n && total < c->e->zc_min; i++)
		total += c->tx_iov[i].iov_len;
	return total >= c->e->zc_min;
}

/* An aborting c waits for a zero-copy notification: reset the stream
 * and close the socket now (engine thread). As conn_finish, under both
 * locks, for the threads that checked the state before it changed. */
static void conn_zc_abort_close(struct glue_engine *e, struct glue_conn *c)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	e->be->conn_del(e, c);
	pthread_mutex_lock(&c->tx_lock);
	wisp_lock_take(&c->rx_lock);
	setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(c->fd);
	c->fd = -1;
	wisp_lock_give(&c->rx_lock);
	pthread_mutex_unlock(&c->tx_lock);
	glue_debug("conn %p: closed with a zero-copy send in flight",
		   (void *)c);
	e->be->zc_closed(e, c);
}

void glue_zc_notified(struct glue_conn *c, bool copied)
{
	if (copied)
		atomic_fetch_add_explicit(&c->e->zc_st.copied, 1,
					  memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Results and the pump                                               */
/* ------------------------------------------------------------------ */

void glue_conn_release(struct glue_conn *c)
{
	bool sent;

	cork_push(c);
	/* Plaintext: the engine left c's sends to the poller only while
	 * something waited to be sent ("Waiting for room"); with nothing
	 * queued there is nothing to take back, and no wake-up. */
	sent = atomic_exchange(&c->app_tx_ms, 0) != 0 &&
	       (c->tls_on || atomic_load(&c->tx_more));
	sent |= atomic_exchange(&c->post_rx_ms, 0) != 0;
	if (!atomic_exchange(&c->app_rx_ms, 0) && !sent)
		return;           /* the engine was not staying off it */
	atomic_store(&c->rx_more, true);
	ready_kick(c);
}

void glue_rx_ready(struct glue_conn *c)
{
	if (c->e->bp_spinning)
		glue_stat_busy_hit(c);
	c->rx_op = false;
	c->rx_armed = false;
	ready_push(c);
}

/* ------------------------------------------------------------------ */
/* TLS                                                                */
/* ------------------------------------------------------------------ */

/*
 * With a TLS session (glue_tls.h) the engine keeps its pump and only the
 * two socket calls change: a receive is SSL_read into the very iovecs
 * rx_want gave (the MR: OpenSSL has checked the record's tag before it
 * copies a plaintext octet there), and a send is up to
 * GLUE_TLS_TX_RECORDS records made from tx_fill's iovecs, sent from user
 * space by the session's BIO (non-blocking) rather than by an io_uring
 * sendmsg; when the socket is full the backend waits for writability
 * (arm_tx) and the record OpenSSL holds is retried. A receive that stops
 * at EAGAIN has left nothing decrypted inside OpenSSL (SSL_read only
 * says WANT_READ once its plaintext is drained), so waiting for
 * readability never strands an FPDU.
 *
 * A thread that polls a TLS connection (glue_conn_recv_now, or
 * glue_conn_polled while its CQ has completions, or glue_conn_send_poll
 * when its CQ gets nothing from what arrives) also sends for it: its
 * posts encrypt and send at once (glue_conn_send_now) and its empty
 * polls retry what did not fit. While it polls, the engine leaves the
 * sending side of the session to it (pump_tx: tx_deferred, app_tx_ms),
 * as the raw OpenSSL writer owns its session, instead of taking turns on
 * the session's lock with it and waking up for every record; it leaves
 * the receiving side too only while that thread receives (pump_rx,
 * app_rx_ms), so a thread that reaps send completions alone never keeps
 * the engine off what arrives. The engine looks again every
 * GLUE_APP_POLL_MS and takes over once the thread stops polling or arms
 * its CQ (glue_conn_release).
 */

/*
 * As recvmsg(2) into c->rx_iov[0..n), but returning -errno on failure
 * (errno itself is left alone). One iovec (a small message into the
 * stage, every empty poll): recv(2), which spares the kernel the msghdr
 * copy and the iovec import (issue 13: a small message's hop).
 *
 * Both as syscall(2) does them, not glibc's recv() and recvmsg(): those are
 * cancellation points, and switch the thread's cancellation type on and
 * off around the system call (about 50 instructions of an empty poll).
 * A thread polling its CQ gets here from ibv_poll_cq, which is no
 * cancellation point (rdma-core's providers make no system call
 * there), holding rx_lock and the QP's core lock (rx_want .. rx_done):
 * a deferred cancel acted on in here would leave both held for good.
 * The call never blocks (MSG_DONTWAIT), so a pending cancel is acted on
 * at the application's next cancellation point instead.
 */
#if defined(__x86_64__)
/* syscall(2) made in place, as liburing makes its own: no call into
 * glibc, no errno; the kernel's result as it is (-errno on failure). */
static inline long sys_call6(long nr, long a1, long a2, long a3, long a4,
			     long a5, long a6)
{
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10),
			   "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#else
static inline long sys_call6(long nr, long a1, long a2, long a3, long a4,
			     long a5, long a6)
{
	long r = syscall(nr, a1, a2, a3, a4, a5, a6);

	return r < 0 ? -errno : r;
}
#endif

static long conn_recv(struct glue_conn *c, int n)
{
	if (c->tls)
		return glue_tls_readv(c->tls, c->rx_iov, n);
	if (n == 1)
		return sys_call6(SYS_recvfrom, c->fd,
				 (long)c->rx_iov[0].iov_base,
				 (long)c->rx_iov[0].iov_len, MSG_DONTWAIT, 0, 0);
	c->rx_msg.msg_iov = c->rx_iov;
	c->rx_msg.msg_iovlen = (size_t)n;
	return sys_call6(SYS_recvmsg, c->fd, (long)&c->rx_msg, MSG_DONTWAIT, 0,
			 0, 0);
}

/* As sendmsg(2) of c->tx_iov[0..n), through TLS (tx_lock held). */
static ssize_t conn_tls_send(struct glue_conn *c, int n)
{
	long r = glue_tls_tx(c->tls, c->tx_iov, n);

	if (r >= 0)
		return r;
	errno = (int)-r;
	return -1;
}

/* The engine's TLS send of what tx_fill gave (tx_lock held): the result
 * reaches glue_tx_result now, or after writability. */
static void conn_tls_start_tx(struct glue_engine *e, struct glue_conn *c,
			      int n)
{
	ssize_t r = conn_tls_send(c, n);

	c->tx_busy = true;
	if (r < 0 && errno == EAGAIN) {
		e->be->arm_tx(e, c);
		return;
	}
	glue_tx_result(c, r < 0 ? -errno : r);
}

/*
 * Receive until the socket runs dry or max receives; rx_lock held.
 * Returns 1 at EAGAIN (a polling thread through TLS: also once OpenSSL
 * holds nothing more after a read), 0 at the limit, -1 at the end of
 * the stream (c->rx_end says how it ended). poller: an application
 * thread polling its CQ (glue_conn_recv_now); otherwise the engine.
 */
static int rx_drain(struct glue_conn *c, int max, bool *got, bool poller)
{
	for (int i = 0; i < max; i++) {
		int n = c->ops->rx_want(c->arg, c->rx_iov, GLUE_RX_IOV);
		size_t asked = 0;
		long r;
		int done;

		for (int j = 0; j < n; j++)
			asked += c->rx_iov[j].iov_len;
		r = conn_recv(c, n);
		if (r > 0) {
			TSAN_RECEIVED(c);
			conn_mark_active(c);
		}
		/* Always, so that the owner knows the copy is over. */
		done = c->ops->rx_done(c->arg, r > 0 ? (size_t)r : 0);
		/* Counted once the owner has them: what the statistics say
		 * arrived is placed (a reader that waits for the counters
		 * to meet the peer's may then read the memory). The engine
		 * drains for itself, a polling thread for its CQ: who is
		 * at it is known without a look at the thread's TLS. */
		glue_stat_rx(c, r, !poller);
		if (r > 0) {
			c->rx_partial = done & GLUE_RX_PARTIAL;
			/* The time only for an answer that completed
			 * nothing: a SEND's answer spares the clock read. */
			if (glue_answer_waiting(&c->ans))
				glue_answer_rx(&c->ans,
					       done & GLUE_RX_COMPLETED ? 0 :
					       now_ns(), done);
			*got = true;
			if (done & GLUE_RX_CLOSE)
				atomic_store(&c->close_req, true);
			/* What arrived calls for sending (Read Responses,
			 * ORD credit, a Terminate). */
			if (done & GLUE_RX_SEND)
				atomic_store(&c->tx_more, true);
			/* A polling thread through TLS: once OpenSSL holds
			 * nothing more, what arrived is placed and the CQ has
			 * its completion; the read that would only find the
			 * socket empty waits for the next poll. Anything
			 * still in the socket is in the socket (readiness
			 * still tells the engine), not in OpenSSL. */
			if (poller && c->tls && !glue_tls_rx_buffered(c->tls))
				return 1;
			/* Less than asked for: TCP had no more queued, and
			 * another recvmsg would only say EAGAIN, a system
			 * call on every small message's path. Both backends
			 * wait for readiness level-triggered, so what comes
			 * meanwhile is not missed. Not through TLS, whose
			 * read stops at a record's end. */
			if (!c->tls && (size_t)r < asked)
				return 1;
			continue;
		}
		if (r == -EAGAIN)
			return 1;
		if (r == -EINTR)
			continue;
		/* 0: the peer closed its side; nothing more will come. */
		atomic_store(&c->rx_end, r == 0 ? -1 : (int)-r);
		return -1;
	}
	return 0;
}

/* Leave a polling thread's stamp (app_rx_ms, app_tx_ms): a store only
 * when it changes something, as a thread that polls all the time stamps
 * the same millisecond many times and the engine reads these lines. */
static void stamp_poll(_Atomic int64_t *at, int64_t now)
{
	if (atomic_load_explicit(at, memory_order_relaxed) != now)
		atomic_store_explicit(at, now, memory_order_relaxed);
}

bool glue_conn_recv_now(struct glue_conn *c)
{
	return glue_conn_recv_at(c, glue_poll_clock_ms());
}

bool glue_conn_recv_at(struct glue_conn *c, int64_t now_ms)
{
	bool got = false;
	int r;

	cork_push(c);
	if (conn_stopped(c))
		return false;
	stamp_poll(&c->app_rx_ms, now_ms);
	if (c->tls_on)
		stamp_poll(&c->app_tx_ms, now_ms);
	if (!wisp_lock_try(&c->rx_lock))
		return false;
	if (conn_stopped(c)) {
		wisp_lock_give(&c->rx_lock);
		return false;
	}
	/* Through TLS, while sends wait: look without the session's lock
	 * first (a MSG_PEEK costs less than an empty SSL_read; rx_lock
	 * keeps c->tls and the socket from being finished under us) and,
	 * if nothing is there to read, encrypt and send them here (the
	 * engine leaves them to this thread: "TLS" above). With nothing to
	 * send, as a ping-pong waits, the look would only add a system
	 * call. */
	if (c->tls && atomic_load(&c->tx_more) && glue_tls_rx_idle(c->tls)) {
		wisp_lock_give(&c->rx_lock);
		glue_conn_send_now(c);
		return false;
	}
	r = rx_drain(c, 8, &got, true);
	wisp_lock_give(&c->rx_lock);
	if (r <= 0 || atomic_load(&c->close_req)) {
		/* An end, a close or more to read: the engine's business. */
		atomic_store(&c->rx_more, true);
		ready_kick(c);
	}
	/* Answers to what arrived (Read Responses) go out from here too;
	 * if another thread holds the transmit side, the engine sends
	 * them (send_now clears tx_more when it has sent everything). */
	if (got && atomic_load(&c->tx_more)) {
		glue_conn_send_now(c);
		if (atomic_load(&c->tx_more))
			ready_kick(c);
	}
	return got;
}

void glue_tx_result(struct glue_conn *c, long res)
{
	int close;

	pthread_mutex_lock(&c->tx_lock);
	c->tx_busy = false;
	c->tx_zc = false;
	glue_stat_tx_result(c, res);
	/* Read before tx_offered is: it is the engine's send's ("Waiting
	 * for room"). */
	if (!c->tls)
		atomic_store(&c->tx_full, res == -EAGAIN ||
			     (res > 0 && (size_t)res < c->tx_offered));
	if (conn_stopped(c))
		goto out;
	if (res < 0) {
		if (res == -EAGAIN || res == -EINTR)
			atomic_store(&c->tx_more, true);
		else
			conn_abort(c, (int)-res);
		goto out;
	}
	atomic_store(&c->tx_more, true);
	close = c->ops->tx_done(c->arg, (size_t)res) & GLUE_TX_CLOSE;
	if (close)
		conn_start_close(c);
out:
	pthread_mutex_unlock(&c->tx_lock);
	ready_push(c);            /* engine thread */
}

void glue_tx_unlock(struct glue_conn *c)
{
	pthread_mutex_unlock(&c->tx_lock);
	/* pump_tx sets tx_handoff, then tries the lock once more: either
	 * it gets the lock, or this exchange (a full barrier, as the
	 * unlock is) sees the flag. */
	if (atomic_exchange(&c->tx_handoff, false))
		ready_kick(c);    /* the engine left: it looks again now */
}

/* The engine stays off c's socket for a posting thread that waited for
 * an answer (post_rx_ms): hand it back now, as glue_conn_release does,
 * so that what comes next is not left unread. */
static void answer_release(struct glue_conn *c)
{
	if (!atomic_load_explicit(&c->post_rx_ms, memory_order_relaxed) ||
	    !atomic_exchange(&c->post_rx_ms, 0))
		return;
	atomic_store(&c->rx_more, true);
	ready_kick(c);
}

/*
 * The posting thread waits for the answer to its post, which ended at
 * post, until post + wait ("Waiting for the answer" above). No lock is
 * held between looks; each look is rx_drain as a poller, under rx_lock.
 */
static void answer_wait(struct glue_conn *c, int64_t post, int64_t wait)
{
	int64_t end = post + wait;
	bool hit = false, mine = false;

	for (;;) {
		atomic_store_explicit(&c->post_rx_ms, now_ms(),
				      memory_order_relaxed);
		/* Taken by another thread (the engine, woken by a readiness
		 * wait armed before), or another post came. */
		if (!mine && atomic_load(&c->ans.post_ns) != post)
			break;
		if (wisp_lock_try(&c->rx_lock)) {
			bool got = false, partial;
			int r;

			if (conn_stopped(c)) {
				wisp_lock_give(&c->rx_lock);
				break;
			}
			r = rx_drain(c, 8, &got, true);
			partial = c->rx_partial;
			wisp_lock_give(&c->rx_lock);
			if (r <= 0 || atomic_load(&c->close_req))
				break;    /* an end, a close or more: the engine's */
			/* What arrived may call for sending (a Read Response,
			 * a Terminate), as after glue_conn_recv_now. */
			if (got && atomic_load(&c->tx_more)) {
				glue_conn_send_now(c);
				if (atomic_load(&c->tx_more))
					ready_kick(c);
			}
			mine |= got;
			if (mine && !partial) {
				hit = true;
				break;
			}
		}
		if (now_ns() >= end)
			break;
		sched_yield();
	}
	glue_stat_post_wait(c, hit);
	if (hit)
		return;           /* the next post waits again */
	if (!mine && atomic_load(&c->ans.post_ns) == post)
		glue_answer_miss(&c->ans);
	/* Whatever is left (the answer, the rest of a message, an end) is
	 * the engine's again, now. */
	answer_release(c);
}

/* sendmsg(2) of c->tx_iov[0..n) with flags, plaintext (tx_lock held).
 * One iovec, as a small message's flat FPDU is (rdmap_qp_tx.c
 * tx_flat_wr), goes with send(2): the same octets and flags, without the
 * kernel's copy of the msghdr and import of the iovec array, about
 * 0.06 us of a SEND 8 B hop (docs/performance-log.md). */
static ssize_t conn_send_plain(struct glue_conn *c, int n, int flags)
{
	if (n == 1)
		return send(c->fd, c->tx_iov[0].iov_base, c->tx_iov[0].iov_len,
			    flags);
	return sendmsg(c->fd, &c->tx_msg, flags);
}

/* A direct send on the calling thread (glue_conn_send_now), tx_lock
 * held; it lets go of it. post: the thread has just posted len octets,
 * and a burst of posts is held or corks; it may then wait for the
 * answer (answer_wait). Returns true if the post needs nothing more from
 * the engine: sent, or held. */
static bool send_locked(struct glue_conn *c, bool post, size_t len)
{
	ssize_t n;
	size_t offered = 0;
	int niov, err, close = 0, done = 0;
	int64_t post_end = 0, wait = 0, sent_ns = 0;
	bool sent = false, more = false, cork = false;

	if (c->tx_busy || conn_state(c) != GLUE_CONN_OPEN)
		goto out;
	/* A post while the socket is full and a polling thread waits for
	 * room to send ("Waiting for room"): that thread sends it once
	 * there is room; a sendmsg now would only say EAGAIN. */
	if (post && !c->tls && atomic_load(&c->tx_full) &&
	    tx_left_to_poller(c)) {
		more = true;
		goto out;
	}
	if (post) {
		cork = post_burst(c, len);
		if (cork && post_hold(c, len)) {
			/* Held: the next post's send, or a push, takes it. */
			c->cork_last_ns = mono_ns();
			glue_stat_tx_held(c);
			cork_mark(c);
			sent = true;
			goto out;
		}
	}
	/* What tx_fill has is taken now; more is set again below if any
	 * is left. Only a true is cleared: a locked exchange (~8 ns) on the
	 * way to every post's send otherwise. Skipping the store of a false
	 * loses no true that another thread set (a false read here is one
	 * that precedes such a store), and no one relies on this store for
	 * ordering: a thread that posts or receives meanwhile and finds
	 * tx_lock held kicks (glue_conn_kick, the GLUE_RX_SEND path). */
	if (atomic_load_explicit(&c->tx_more, memory_order_relaxed))
		atomic_store(&c->tx_more, false);
	niov = conn_tx_fill(c);
	if (niov <= 0)
		goto out;
	if (conn_zc_wanted(c, niov)) {
		/* Large enough to go zero-copy: the engine's to send, and
		 * to hold until the kernel's notification. */
		more = true;
		goto out;
	}
	c->tx_msg.msg_iov = c->tx_iov;
	c->tx_msg.msg_iovlen = (size_t)niov;
	TSAN_SENT(c);
	if (c->tls) {
		n = conn_tls_send(c, niov);
		err = errno;
	} else {
		n = conn_send_plain(c, niov, MSG_DONTWAIT | MSG_NOSIGNAL |
				    (cork ? MSG_MORE : 0));
		err = errno;
		for (int i = 0; n >= 0 && i < niov; i++)
			offered += c->tx_iov[i].iov_len;
		atomic_store(&c->tx_full, n < 0 ? err == EAGAIN :
			     (size_t)n < offered);
		cork_sent(c, cork, n);
		/* Not kept in clock_seen_ns (a thread variable, looked up
		 * by __tls_get_addr in a shared library): as cork_last_ns
		 * too, it could never tell the next post's post_burst that
		 * the gap has passed. */
		if (post && c->cork_ok)
			c->cork_last_ns = sent_ns = mono_ns();
	}
	glue_stat_tx_direct(c, niov, n, err);
	if (n > 0) {
		done = c->ops->tx_done(c->arg, (size_t)n);
		close = done & GLUE_TX_CLOSE;
		sent = true;
	}
	/* Anything left (partial send, EAGAIN, an error to report, a close
	 * to start) is the engine's: it looks again after the kick. Its
	 * send, without MSG_MORE, pushes a corked tail. tx_done may have
	 * said already that there is nothing (GLUE_TX_IDLE): then no
	 * second fill (a lock and the owner's checks); what another thread
	 * adds meanwhile it kicks for, as it does while this one holds
	 * tx_lock. */
	if (close)
		atomic_store(&c->close_req, true);
	more = n < 0 || close ||
	       (!(done & GLUE_TX_IDLE) &&
		c->ops->tx_fill(c->arg, c->tx_iov, 1) > 0);
	/* A lone post: it went whole, nothing queued behind it. Its end is
	 * the reading taken for the cork rule just after the send, if any:
	 * one clock read per post, not two. */
	if (post && c->ans.max_ns && sent && !more && !cork) {
		post_end = sent_ns ? sent_ns : now_ns();
		wait = glue_answer_post(&c->ans, post_end, true);
	}
out:
	if (post && !post_end)
		glue_answer_post(&c->ans, 0, false);
	glue_tx_unlock(c);
	if (more) {
		atomic_store(&c->tx_more, true);
		if (!tx_left_to_poller(c))
			ready_kick(c);
	}
	/* Never on the engine thread (a post from one of its callbacks):
	 * it would spin instead of serving every other connection. */
	if (wait && !glue_on_engine(c->e))
		answer_wait(c, post_end, wait);
	else if (post)
		answer_release(c);  /* no wait: nobody else receives */
	return sent;
}

static bool send_direct(struct glue_conn *c, bool post, size_t len)
{
	/* Busy: the engine is at it and will see the kick. */
	if (pthread_mutex_trylock(&c->tx_lock)) {
		if (post) {
			glue_answer_post(&c->ans, 0, false);
			answer_release(c);
		}
		return false;
	}
	return send_locked(c, post, len);
}

bool glue_conn_send_now(struct glue_conn *c)
{
	return send_direct(c, false, 0);
}

bool glue_conn_send_post(struct glue_conn *c, size_t len)
{
	return send_direct(c, true, len);
}

/* ------------------------------------------------------------------ */
/* Waiting for room                                                   */
/* ------------------------------------------------------------------ */

/*
 * A stream of large posts fills the socket: the posting thread's
 * sendmsg says EAGAIN or takes part (c->tx_full), and what is left used
 * to be the engine's, whose send then waited in the kernel for room
 * while the thread that posted spun on its empty CQ for the completions
 * that only that send could bring. Three threads ran for one stream
 * where a TCP program has two (its sender sleeps in send() until there
 * is room), and on a busy host the spinning one took the CPU from the
 * receiver and from everything else (docs/performance-log.md, "A busy host:
 * who runs").
 *
 * So an ibv_poll_cq that finds its CQ empty when every completion it can
 * get next waits on sends blocked by full sockets calls
 * glue_conns_wait_tx_at, which waits in ppoll() for room (POLLOUT: the
 * kernel reports it once a third of the send buffer is free, as it wakes
 * a blocked send()) and then sends on the calling thread, as TCP's
 * sender does. The wait is bounded by WISP_POLL_WAIT_US (1 ms by
 * default): ibv_poll_cq stays a call that returns, only not at once
 * while nothing it could return can come sooner; a program that cannot
 * have even that sets it to off. The caller (verbs_cq.c) asks for it only
 * when all the CQ's streams are plaintext sends that complete there and
 * nothing else completes there (see wisp_poll_cq).
 *
 * Meanwhile the engine leaves c's sends to that thread, as it leaves a
 * TLS session's sends to its poller (app_sends: such a thread polled c's
 * CQ within GLUE_APP_POLL_MS, stamped by every one of its polls, empty
 * (here) or not (glue_conn_tx_polled); pump_tx: only while something is
 * queued). A post that finds the socket full queues its WR without a
 * sendmsg and without waking the engine; what a post left over while
 * the socket had room goes out on the poller's next poll (either
 * function sends it at once, without a wait). The engine looks again
 * after 2, 4, then every 8 ms and sends itself once the thread stops
 * polling, or at once when it arms its CQ (glue_conn_release). The wait
 * holds each c's tx_lock, so no one else sends on c and the engine
 * cannot close its socket meanwhile; an abort shuts the socket down
 * first, which ends the wait at once.
 */
/* glue_conns_wait_tx_at once something waits to be sent on one of cs:
 * send it, or wait for room. Apart, so that the common case, nothing
 * waiting, sets up none of its frame (issue 13: an empty poll's cost). */
static __attribute__((noinline)) bool
conns_tx_waiting(struct glue_conn *const *cs, const bool *rx, int n,
		 int64_t wait_ns)
{
	struct pollfd pfd[GLUE_WAIT_MAX];
	struct timespec ts;
	int held = 0, r;
	bool moved = false;

	/* What waits on a socket with room goes now, without a wait. */
	for (int i = 0; i < n; i++)
		if (atomic_load(&cs[i]->tx_more) &&
		    !atomic_load(&cs[i]->tx_full) && !conn_stopped(cs[i]))
			moved |= send_direct(cs[i], false, 0);
	if (moved)
		return true;
	for (int i = 0; i < n; i++)
		if (!atomic_load(&cs[i]->tx_full) ||
		    !atomic_load(&cs[i]->tx_more) || conn_stopped(cs[i]))
			return false;
	for (; held < n; held++) {
		struct glue_conn *c = cs[held];

		if (pthread_mutex_trylock(&c->tx_lock))
			break;
		if (c->tx_busy || conn_state(c) != GLUE_CONN_OPEN ||
		    !atomic_load(&c->tx_full)) {
			glue_tx_unlock(c);
			break;
		}
		pfd[held].fd = c->fd;
		pfd[held].events = (short)(POLLOUT | (rx && rx[held] ?
						      POLLIN : 0));
		pfd[held].revents = 0;
	}
	if (held < n) {
		while (held--)
			glue_tx_unlock(cs[held]);
		return false;
	}
	ts.tv_sec = (time_t)(wait_ns / 1000000000);
	ts.tv_nsec = (long)(wait_ns % 1000000000);
	r = ppoll(pfd, (nfds_t)n, &ts, NULL);
	for (int i = 0; i < n; i++) {
		glue_stat_tx_poll_wait(cs[i], r > 0 && pfd[i].revents);
		glue_tx_unlock(cs[i]);
	}
	if (r <= 0)
		return false;
	for (int i = 0; i < n; i++) {
		short ev = pfd[i].revents;

		/* An error or hang-up: the send reports it (the engine
		 * takes over from there: tx_full is clear after it). */
		if (ev & (POLLOUT | POLLERR | POLLHUP))
			moved |= send_direct(cs[i], false, 0);
		if ((ev & (POLLIN | POLLERR | POLLHUP)) && rx && rx[i])
			moved |= glue_conn_recv_now(cs[i]);
	}
	return moved;
}

bool glue_conns_wait_tx_at(struct glue_conn *const *cs, const bool *rx,
			   int n, int64_t now_ms)
{
	int64_t wait_ns;
	bool more = false;

	if (n <= 0 || n > GLUE_WAIT_MAX)
		return false;
	wait_ns = cs[0]->e->poll_wait_ns;
	if (!wait_ns)
		return false;
	for (int i = 0; i < n; i++)
		if (cs[i]->tls_on)
			return false;
	/* From now on this thread sends for them while their sockets are
	 * full (app_sends). */
	for (int i = 0; i < n; i++) {
		stamp_poll(&cs[i]->app_tx_ms, now_ms);
		more |= atomic_load(&cs[i]->tx_more);
	}
	/* Nothing waits to be sent (a ping-pong's every poll): neither a
	 * send nor a wait. */
	if (!more)
		return false;
	return conns_tx_waiting(cs, rx, n, wait_ns);
}

static void pump_rx(struct glue_engine *e, struct glue_conn *c)
{
	bool got = false;
	int r, end;

	if (atomic_exchange(&c->close_req, false))
		conn_start_close(c);
	if (conn_stopped(c))
		return;
	/* A polling thread may have met the end of the stream: act on it
	 * whoever saw it, even while that thread keeps polling. */
	end = atomic_load(&c->rx_end);
	if (end)
		goto ended;
	if (c->rx_armed && !atomic_exchange(&c->rx_more, false))
		return;
	if (app_polls(c)) {
		/* A thread polls this connection itself: leave the socket
		 * to it rather than wake up for every message, and look
		 * again to take it back once the polling stopped. Each look
		 * is a wake-up of the engine, which on a small host takes
		 * the CPU from that very thread: while the polling goes on,
		 * look half as often each time, up to GLUE_APP_POLL_MAX_MS,
		 * which bounds how long octets can wait in a socket nobody
		 * polls any more. */
		c->recheck_at = now_ms() + c->recheck_ms;
		c->recheck_ms = c->recheck_ms * 2 > GLUE_APP_POLL_MAX_MS ?
				GLUE_APP_POLL_MAX_MS : c->recheck_ms * 2;
		return;
	}
	c->recheck_ms = GLUE_APP_POLL_MS;
	if (c->rx_fresh) {
		/* A socket just adopted: wait for readiness at once rather
		 * than try a recvmsg first, which on a fresh connection
		 * nearly always finds nothing (one system call per
		 * connection; issue 13). Arming reports octets already
		 * there (io_uring's poll and epoll both look when armed).
		 * A TLS session may hold decrypted octets: it is drained. */
		c->rx_fresh = false;
		if (!c->tls) {
			r = 1;
			goto arm;
		}
	}
	if (!wisp_lock_try(&c->rx_lock)) {
		/* A polling thread is draining the socket: it reads until
		 * EAGAIN, so waiting for readiness again loses nothing. */
		r = 1;
		goto arm;
	}
	r = rx_drain(c, 16, &got, false);
	wisp_lock_give(&c->rx_lock);
	if (got) {
		bp_active(e);
		bp_set_hot(e, c);
	}
	if (atomic_exchange(&c->close_req, false))
		conn_start_close(c);
	end = atomic_load(&c->rx_end);
	if (r < 0 || end) {
ended:
		/* -1: the peer closed its side, an orderly end. */
		conn_abort(c, end == -1 ? 0 : end);
		return;
	}
	if (r == 0) {
		ready_push(c);    /* more to read: come back */
		return;
	}
arm:
	c->rx_armed = true;
	if (c->rx_op || c->rx_lazy)
		return;
	if (bp_lazy_ok(e, c)) {
		/* The busy poll reads it; armed once it stops spinning. */
		c->rx_lazy = true;
		return;
	}
	e->be->arm_rx(e, c);
}

/*
 * Busy polling, on the connection that last brought octets: read its
 * socket directly, as a thread polling its CQ does (glue_conn_recv_now),
 * instead of waiting for the backend to report readiness. With io_uring
 * that report is a completion posted by task work, which needs the
 * engine in the kernel (an interrupt from the CPU that received the
 * octets, or its next system call); with epoll one epoll_wait per look.
 * A recvmsg that finds nothing costs one system call and leaves the
 * readiness wait armed. Returns true if it moved octets or met the end
 * of the stream: c is queued for its pump. Engine thread; not through
 * TLS, nor on a socket that an application thread polls.
 */
static bool bp_hot_recv(struct glue_engine *e)
{
	struct glue_conn *c = e->bp_hot;
	bool got = false;
	int r;

	if (!c)
		return false;
	/* Closing (it is read until the peer's end) or going: no longer
	 * read here, so it waits for readiness again. */
	if (conn_state(c) != GLUE_CONN_OPEN)
		bp_arm_lazy(e, c);
	if (c->tls || !c->rx_armed || atomic_load(&c->rx_more) ||
	    conn_state(c) != GLUE_CONN_OPEN || app_polls(c))
		return false;
	if (!wisp_lock_try(&c->rx_lock))
		return false;
	r = rx_drain(c, 16, &got, false);
	wisp_lock_give(&c->rx_lock);
	if (r > 0 && !got)
		return false;
	if (got) {
		glue_stat_busy_hit(c);
		bp_active(e);
	}
	/* Its pump does the rest: what arrived may call for sending or
	 * closing; more to read or an end is pump_rx's (rx_more). The
	 * readiness wait stays armed: it reports the next octets. */
	if (r <= 0)
		atomic_store(&c->rx_more, true);
	ready_push(c);
	return true;
}

static void pump_tx(struct glue_engine *e, struct glue_conn *c)
{
	if (conn_state(c) == GLUE_CONN_OPEN && app_sends(c) &&
	    (c->tls || atomic_load(&c->tx_more) ||
	     atomic_load(&c->kicked))) {
		/* A thread polls c: it encrypts and sends from its polls
		 * (glue_conn_recv_now), as it reads; or, on a plaintext
		 * connection whose socket is full, it waits for room and
		 * sends itself ("Waiting for room"). Leave the sending to
		 * it rather than take turns on the lock (and the socket),
		 * and look again soon in case it stops. Plaintext: only
		 * when there is something to send, so that a connection
		 * whose poller has nothing queued costs no rechecks. The
		 * poller goes by tx_more, not by kicked: a kick left set here
		 * would also turn every later kick away (glue_conn_kick) and
		 * strand a WR that no post sent (the stall). */
		if (atomic_exchange(&c->kicked, false))
			atomic_store(&c->tx_more, true);
		atomic_store(&c->tx_deferred, true);
		c->recheck_at = now_ms() + GLUE_APP_POLL_MS;
		return;
	}
	atomic_store(&c->tx_deferred, false);
	/* Nothing asked for and nothing to close: leave tx_lock alone. A
	 * posting thread that finds it taken cannot send at once and hands
	 * its WR to the engine (a kick, a wake-up, a later send). */
	if (conn_state(c) == GLUE_CONN_OPEN && !atomic_load(&c->tx_more) &&
	    !atomic_load(&c->kicked))
		return;
	if (pthread_mutex_trylock(&c->tx_lock)) {
		/* A posting thread is sending (glue_conn_send_now): it takes
		 * whatever tx_fill has, and once it lets go of the lock it
		 * queues c again (glue_tx_unlock). Waiting on the lock put
		 * the engine to sleep on a futex and made that thread wake
		 * it, for one message in three of a WRITE ping-pong on the
		 * epoll engine (docs/performance-log.md). */
		atomic_store(&c->tx_handoff, true);
		if (pthread_mutex_trylock(&c->tx_lock))
			return;
		atomic_store(&c->tx_handoff, false);
	}
	/* Posts held (a burst's): this send takes them, and a graceful
	 * close sends them before it half-closes. */
	if (c->hold_n)
		atomic_store(&c->tx_more, true);
	for (int i = 0; i < 16 && !c->tx_busy && !conn_stopped(c); i++) {
		int n;

		if (!atomic_exchange(&c->tx_more, false) &&
		    !atomic_exchange(&c->kicked, false))
			break;
		atomic_store(&c->kicked, false);
		n = conn_tx_fill(c);
		if (n <= 0)
			break;
		if (c->tls) {
			TSAN_SENT(c);
			bp_active(e);
			conn_tls_start_tx(e, c, n);
			continue;
		}
		c->tx_msg.msg_iov = c->tx_iov;
		c->tx_msg.msg_iovlen = (size_t)n;
		c->tx_busy = true;
		c->tx_zc = conn_zc_wanted(c, n);
		glue_stat_tx_start(c);
		TSAN_SENT(c);
		bp_active(e);
		e->be->start_tx(e, c);
	}
	/* A graceful close half-closes once everything queued is out. */
	if (conn_state(c) == GLUE_CONN_CLOSING && !c->tx_busy) {
		/* RFC 8446 6.1: close_notify before the write side closes,
		 * or the peer must take the end for a truncation. */
		if (c->tls)
			glue_tls_close_notify(c->tls);
		conn_set_state(c, GLUE_CONN_SHUT_WR);
		shutdown(c->fd, SHUT_WR);
	}
	pthread_mutex_unlock(&c->tx_lock);
}

/* The owner's timer, if it has one, when due. */
static void conn_timer(struct glue_conn *c, int64_t now)
{
	bool send = false;

	c->timer_at = c->ops->timer ? c->ops->timer(c->arg, now, &send) : -1;
	if (send)
		atomic_store(&c->tx_more, true);
}

/* ------------------------------------------------------------------ */
/* The deadline heap                                                  */
/* ------------------------------------------------------------------ */

/*
 * When each connection next needs a visit without anything else asking
 * for it: its owner's timer, its close deadline, or the recheck of a
 * socket that an application thread polls (GLUE_APP_POLL_MS). A binary
 * min-heap on due, so that a pass looks only at what is due. Its array
 * has room for every adopted connection (reserved in adopt()), so
 * heap_set never allocates.
 */
static void heap_place(struct glue_engine *e, int i, struct glue_conn *c)
{
	e->heap[i] = c;
	c->heap_idx = i;
}

static void heap_up(struct glue_engine *e, int i)
{
	struct glue_conn *c = e->heap[i];

	while (i > 0) {
		int up = (i - 1) / 2;

		if (e->heap[up]->due <= c->due)
			break;
		heap_place(e, i, e->heap[up]);
		i = up;
	}
	heap_place(e, i, c);
}

static void heap_down(struct glue_engine *e, int i)
{
	struct glue_conn *c = e->heap[i];

	for (;;) {
		int m = 2 * i + 1;

		if (m >= e->heap_n)
			break;
		if (m + 1 < e->heap_n && e->heap[m + 1]->due < e->heap[m]->due)
			m++;
		if (e->heap[m]->due >= c->due)
			break;
		heap_place(e, i, e->heap[m]);
		i = m;
	}
	heap_place(e, i, c);
}

static void heap_del(struct glue_engine *e, struct glue_conn *c)
{
	int i = c->heap_idx;
	struct glue_conn *last;

	if (i < 0)
		return;
	c->heap_idx = -1;
	last = e->heap[--e->heap_n];
	if (last == c)
		return;
	heap_place(e, i, last);
	heap_up(e, i);
	heap_down(e, last->heap_idx);
}

/* c is due at due (-1: never). */
static void heap_set(struct glue_engine *e, struct glue_conn *c, int64_t due)
{
	int64_t old = c->due;

	if (due < 0) {
		heap_del(e, c);
		return;
	}
	c->due = due;
	if (c->heap_idx < 0) {
		heap_place(e, e->heap_n++, c);
		heap_up(e, c->heap_idx);
	} else if (due < old) {
		heap_up(e, c->heap_idx);
	} else {
		heap_down(e, c->heap_idx);
	}
}

/* After a visit: when c is due next, from its state. */
static void conn_set_due(struct glue_engine *e, struct glue_conn *c)
{
	enum glue_conn_state s = conn_state(c);
	int64_t due = -1;

	if (s == GLUE_CONN_OPEN && c->timer_at >= 0)
		due = c->timer_at;
	if ((s == GLUE_CONN_CLOSING || s == GLUE_CONN_SHUT_WR) &&
	    (due < 0 || c->deadline_ms < due))
		due = c->deadline_ms;
	if (c->recheck_at && (due < 0 || c->recheck_at < due))
		due = c->recheck_at;
	heap_set(e, c, due);
}

/* ------------------------------------------------------------------ */
/* Visits                                                             */
/* ------------------------------------------------------------------ */

/*
 * The engine takes over a connection that glue_conn_add queued: the
 * caller did not wait for this (one wake-up of the engine and one back
 * per connection made a burst of connects wait on the engine twice per
 * connection; issue 13). A failure here ends the connection as any
 * broken stream ends: ended() with the errno.
 */
static void adopt(struct glue_engine *e, struct glue_conn *c)
{
	int ret = 0;

	c->adopted = true;
	c->next = e->conns;
	if (e->conns)
		e->conns->prev = c;
	e->conns = c;
	e->nconns++;
	if (e->heap_cap < e->nconns) {
		int cap = e->heap_cap ? e->heap_cap * 2 : 64;
		struct glue_conn **h = realloc(e->heap, (size_t)cap *
					       sizeof(*h));

		if (h) {
			e->heap = h;
			e->heap_cap = cap;
		} else {
			ret = -ENOMEM;
		}
	}
	if (!ret) {
		/* Under tx_lock: conn_add sets c->zc_ok, which a posting
		 * thread's glue_conn_send_now reads under it. */
		pthread_mutex_lock(&c->tx_lock);
		ret = e->be->conn_add(e, c);
		pthread_mutex_unlock(&c->tx_lock);
	}
	if (ret)
		conn_abort(c, -ret);
}

/* One connection's turn: what it was queued for, and whatever is due. */
static void visit(struct glue_engine *e, struct glue_conn *c, int64_t now)
{
	if (!c->adopted)
		adopt(e, c);
	c->recheck_at = 0;
	if (c->timer_at >= 0 && conn_state(c) == GLUE_CONN_OPEN &&
	    now >= c->timer_at)
		conn_timer(c, now);
	if (conn_state(c) != GLUE_CONN_GONE) {
		pump_tx(e, c);
		pump_rx(e, c);
		pump_tx(e, c);
		/* The pump stops after a bounded number of operations that
		 * completed at once (epoll): come back before sleeping, as
		 * edge-triggered readiness will not. */
		if (!conn_stopped(c) && atomic_load(&c->tx_more) &&
		    !c->tx_busy && !atomic_load(&c->tx_deferred) &&
		    !atomic_load(&c->tx_handoff))
			ready_push(c);
	}
	if ((conn_state(c) == GLUE_CONN_CLOSING ||
	     conn_state(c) == GLUE_CONN_SHUT_WR) && now >= c->deadline_ms)
		conn_abort(c, 0);
	if (conn_state(c) == GLUE_CONN_ABORTING && c->tx_busy && c->tx_zc &&
	    c->fd >= 0)
		conn_zc_abort_close(e, c);
	if (conn_state(c) == GLUE_CONN_ABORTING && !c->rx_op && !c->tx_busy) {
		/* Queued again meanwhile: finish it when it comes round. */
		if (!ready_claim(c))
			return;
		heap_del(e, c);
		e->nconns--;
		conn_finish(e, c);   /* c may be freed from here on */
		return;
	}
	conn_set_due(e, c);
}

/* One pass over the connections that are ready or due. Returns the wait
 * timeout to use. */
static int pump_all(struct glue_engine *e)
{
	struct glue_conn *c, *next, *list = NULL;
	int64_t now = now_ms(), left;

	/* What fell due joins the ready ones; the visit sets the next. */
	while (e->heap_n && e->heap[0]->due <= now) {
		c = e->heap[0];
		heap_del(e, c);
		ready_push(c);
	}
	/* Oldest first: the stack holds the newest on top. */
	for (c = atomic_exchange(&e->ready, NULL); c; c = next) {
		next = c->rnext;
		c->rnext = list;
		list = c;
	}
	for (c = list; c; c = next) {
		next = c->rnext;
		atomic_store(&c->queued, false);
		visit(e, c, now);
	}
	if (!e->heap_n)
		return -1;
	left = e->heap[0]->due - now_ms();
	if (left <= 0)
		return 1;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static void *engine_main(void *arg)
{
	struct glue_engine *e = arg;

	tls_engine = e;
	while (!atomic_load(&e->stop) || e->conns || atomic_load(&e->ready)) {
		int timeout;

		run_commands(e);
		timeout = cork_tick(e, trim_timeout(e, pump_all(e)));
		if (busy_poll(e))
			continue;
		/* Not spinning: what the busy poll read itself waits for
		 * readiness again, whether the engine blocks now or makes
		 * another pass first. */
		bp_arm_lazy(e, e->bp_hot);
		atomic_store(&e->sleeping, true);
		if (atomic_exchange(&e->pending, false) ||
		    atomic_load(&e->ready)) {
			atomic_store(&e->sleeping, false);
			continue;
		}
		if (atomic_load(&e->stop) && !e->conns)
			break;
		bp_block(e, true);
		e->be->wait(e, timeout);
		bp_block(e, false);
		atomic_store(&e->sleeping, false);
	}
	run_commands(e);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Engines and connections                                            */
/* ------------------------------------------------------------------ */

static int pick_kind(enum glue_kind *kind)
{
	const char *env = getenv("WISP_ENGINE");

	if (*kind != GLUE_AUTO || !env || !*env || !strcmp(env, "auto"))
		return 0;
	if (!strcmp(env, "uring") || !strcmp(env, "io_uring")) {
		*kind = GLUE_URING;
		return 0;
	}
	if (!strcmp(env, "epoll")) {
		*kind = GLUE_EPOLL;
		return 0;
	}
	fprintf(stderr, "wisp: WISP_ENGINE=%s: expected uring, epoll or auto\n",
		env);
	return -EINVAL;
}

struct glue_engine *glue_engine_create(enum glue_kind kind)
{
	struct glue_engine *e;
	unsigned bp_us, cork_us = 0, pp_us = 0, wait_us = 0;
	size_t zc_min = 0;
	int ret;

	ret = pick_kind(&kind);
	if (!ret)
		ret = busy_poll_setting(&bp_us);
	if (!ret)
		ret = send_zc_setting(&zc_min);
	if (!ret)
		ret = us_setting("WISP_SEND_CORK", GLUE_SEND_CORK_ON_US,
				 GLUE_SEND_CORK_MAX_US, &cork_us);
	if (!ret)
		ret = us_setting("WISP_POST_POLL", GLUE_POST_POLL_ON_US,
				 GLUE_POST_POLL_MAX_US, &pp_us);
	if (!ret)
		ret = us_setting("WISP_POLL_WAIT_US", GLUE_POLL_WAIT_ON_US,
				 GLUE_POLL_WAIT_MAX_US, &wait_us);
	if (ret)
		goto err;
	ret = -ENOMEM;
	e = calloc(1, sizeof(*e));
	if (!e)
		goto err;
	e->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->wake_fd < 0) {
		ret = -errno;
		goto err_free;
	}
	pthread_mutex_init(&e->cmd_lock, NULL);
	pthread_cond_init(&e->cmd_cond, NULL);
	e->bp_max_ns = (int64_t)bp_us * 1000;
	bp_set_budget(e, e->bp_max_ns);
	e->bp_hold_ns = BP_HOLD_MIN_NS;
	e->bp_woke_after_ns = -1;
	e->zc_min = zc_min;
	e->cork_gap_ns = (int64_t)cork_us * 1000;
	e->post_poll_ns = (int64_t)pp_us * 1000;
	e->poll_wait_ns = (int64_t)wait_us * 1000;
	e->be = kind == GLUE_EPOLL ? &glue_epoll_backend : &glue_uring_backend;
	ret = e->be->init(e);
	if (ret && kind == GLUE_AUTO) {
		/* io_uring refused (seccomp, io_uring_disabled, old kernel):
		 * epoll does the same job with more system calls. */
		e->be = &glue_epoll_backend;
		ret = e->be->init(e);
	}
	if (ret)
		goto err_fd;
	ret = -pthread_create(&e->thread, NULL, engine_main, e);
	if (ret)
		goto err_be;
	pthread_setname_np(e->thread, "wisp-engine");
	return e;

err_be:
	e->be->fini(e);
err_fd:
	close(e->wake_fd);
	pthread_cond_destroy(&e->cmd_cond);
	pthread_mutex_destroy(&e->cmd_lock);
err_free:
	free(e);
err:
	errno = -ret;
	return NULL;
}

void glue_engine_destroy(struct glue_engine *e)
{
	if (!e)
		return;
	atomic_store(&e->stop, true);
	wake(e);
	{
		uint64_t one = 1;

		if (write(e->wake_fd, &one, sizeof(one)) < 0) {
			/* saturated: it wakes anyway */
		}
	}
	pthread_join(e->thread, NULL);
	if (e->bp_max_ns) {
		struct glue_engine_stats st;

		glue_engine_get_stats(e, &st);
		glue_debug("engine %p busy poll %u us: windows %llu spins %llu "
			   "hits %llu misses %llu busy %llu grown %llu, "
			   "window %u us", (void *)e, st.bp_max_us,
			   (unsigned long long)st.bp_windows,
			   (unsigned long long)st.bp_spins,
			   (unsigned long long)st.bp_hits,
			   (unsigned long long)st.bp_misses,
			   (unsigned long long)st.bp_busy,
			   (unsigned long long)st.bp_grown, st.bp_budget_us);
	}
	if (e->zc_min)
		glue_debug("engine %p zero-copy from %zu octets (%s): sends %llu "
			   "copied %llu fallback %llu", (void *)e, e->zc_min,
			   e->zc_avail ? "available" : "not available",
			   (unsigned long long)atomic_load(&e->zc_st.sends),
			   (unsigned long long)atomic_load(&e->zc_st.copied),
			   (unsigned long long)atomic_load(&e->zc_st.fallback));
	e->be->fini(e);
	close(e->wake_fd);
	pthread_cond_destroy(&e->cmd_cond);
	pthread_mutex_destroy(&e->cmd_lock);
	free(e->heap);
	free(e);
}

struct glue_conn *glue_conn_add(struct glue_engine *e, int fd,
				const struct glue_conn_ops *ops, void *arg)
{
	return glue_conn_adopt(e, fd, ops, arg, 0);
}

struct glue_conn *glue_conn_adopt(struct glue_engine *e, int fd,
				  const struct glue_conn_ops *ops, void *arg,
				  unsigned int flags)
{
	struct glue_conn *c;
	int one = 1, fl, ret;

	c = wisp_mem_zalloc(sizeof(*c));
	if (!c) {
		glue_tls_drop(fd);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	fl = flags & GLUE_CONN_NONBLOCK ? O_NONBLOCK : fcntl(fd, F_GETFL);
	if (fl < 0 ||
	    (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
		ret = -errno;
		goto err;
	}
	/* FPDUs are whole messages: never hold one back for coalescing. */
	if (!(flags & GLUE_CONN_NODELAY))
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->e = e;
	c->fd = fd;
	c->tsan_sync = tsan_link(fd);
	/* The handshake ran before (glue_tls.h): the session is c's now. */
	c->tls = glue_tls_take(fd);
	c->tls_on = c->tls != NULL;
	c->ops = ops;
	c->arg = arg;
	c->heap_idx = -1;
	c->recheck_ms = GLUE_APP_POLL_MS;
	c->rx_fresh = true;
	atomic_init(&c->queued, false);
	c->tx_iov = c->tx_iov_small;
	c->tx_iov_cap = GLUE_TX_IOV_SMALL;
	atomic_init(&c->active, false);
	atomic_init(&c->kicked, false);
	/* The engine asks tx_fill at once, and calls the timer. */
	atomic_init(&c->tx_more, true);
	atomic_init(&c->tx_handoff, false);
	atomic_init(&c->tx_full, false);
	atomic_init(&c->rx_more, false);
	atomic_init(&c->close_req, false);
	atomic_init(&c->rx_end, 0);
	atomic_init(&c->state, GLUE_CONN_OPEN);
	atomic_init(&c->app_rx_ms, 0);
	atomic_init(&c->app_tx_ms, 0);
	atomic_init(&c->tx_deferred, false);
	atomic_init(&c->st, &c->own_st);
	c->cork_ok = e->cork_gap_ns > 0 && !c->tls_on;
	glue_answer_init(&c->ans, c->tls_on ? 0 : e->post_poll_ns);
	atomic_init(&c->post_rx_ms, 0);
	atomic_init(&c->corked, false);
	atomic_init(&c->cork_listed, false);
	wisp_lock_init(&c->rx_lock);
	{
		pthread_mutexattr_t ma;

		pthread_mutexattr_init(&ma);
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
		pthread_mutex_init(&c->tx_lock, &ma);
		pthread_mutexattr_destroy(&ma);
	}
	/* The engine adopts c on its next pass (adopt()); the caller
	 * goes on meanwhile. */
	ready_kick(c);
	return c;
err:
	glue_tls_drop(fd);
	close(fd);
	wisp_mem_free(c, sizeof(*c));
	errno = -ret;
	return NULL;
}
