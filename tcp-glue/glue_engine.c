// SPDX-License-Identifier: MIT
/*
 * glue_engine.c - the engine thread: commands, kicks, the pump that keeps
 * one receive and one send in flight per connection, and closing.
 */
#include "glue_internal.h"
#include "glue_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
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

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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
	if (atomic_load(&e->sleeping) &&
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

void glue_conn_kick(struct glue_conn *c)
{
	if (atomic_exchange(&c->kicked, true))
		return;           /* already kicked, the engine will look */
	wake(c->e);
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
	pthread_mutex_lock(&c->rx_lock);
	conn_set_state(c, GLUE_CONN_GONE);
	close(c->fd);
	c->fd = -1;
	glue_tls_free(c->tls);
	c->tls = NULL;
	pthread_mutex_unlock(&c->rx_lock);
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
	if (!graceful) {
		conn_abort(c, reason);
		return;
	}
	conn_start_close(c);
}

void glue_conn_close_soon(struct glue_conn *c)
{
	/* pump_rx() takes the request on the engine's next pass; tx_more
	 * makes pump_tx() ask tx_fill once more before it half-closes, so
	 * that what the owner still has queued goes out first. */
	atomic_store(&c->tx_more, true);
	atomic_store(&c->close_req, true);
	atomic_store(&c->rx_more, true);
	wake(c->e);
}

void glue_conn_free(struct glue_conn *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->tx_lock);
	pthread_mutex_destroy(&c->rx_lock);
	if (c->tx_iov != c->tx_iov_small)
		munmap(c->tx_iov, GLUE_TX_IOV * sizeof(struct iovec));
	free(c);
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
	if (pthread_mutex_trylock(&c->rx_lock))
		return true;
	if (pthread_mutex_trylock(&c->tx_lock))
		goto out_rx;
	if (c->tx_busy)
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
	pthread_mutex_unlock(&c->rx_lock);
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
 * that gap. A pass that came back late (the yield let another thread run
 * for more than BP_BUSY_NS) means the host has no CPU to spare, and there
 * a spinning engine is worse than a sleeping one: a runnable thread that
 * yielded waits for its turn, a woken one is scheduled at once. So the
 * engine closes the window and stays off busy polling for bp_hold_ns,
 * which doubles (up to BP_HOLD_MAX_NS) while the host stays busy.
 *
 * Idle costs nothing: a window opens only after the engine moved octets
 * and ends at most bp_budget_ns later.
 */
#define BP_BUSY_NS      50000           /* a pass this slow: descheduled */
#define BP_MIN_NS       1000            /* a shorter window is none */
#define BP_HOLD_MIN_NS  10000000        /* 10 ms */
#define BP_HOLD_MAX_NS  1000000000      /* 1 s */

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
		if (atomic_exchange(&e->pending, false))
			hit = true;
		/* A socket that became readable completes its poll (io_uring)
		 * or shows in epoll_wait: glue_rx_ready() counts the hit. */
		e->bp_spinning = true;
		if (e->be->peek(e) > 0)
			hit = true;
		e->bp_spinning = false;
		if (hit)
			break;
		sched_yield();
		now = now_ns();
		if (now - prev > BP_BUSY_NS) {
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
/* Results and the pump                                               */
/* ------------------------------------------------------------------ */

void glue_conn_release(struct glue_conn *c)
{
	if (!atomic_exchange(&c->app_rx_ms, 0))
		return;           /* the engine was not staying off it */
	atomic_store(&c->rx_more, true);
	wake(c->e);
}

void glue_rx_ready(struct glue_conn *c)
{
	if (c->e->bp_spinning)
		glue_stat_busy_hit(c);
	c->rx_op = false;
	c->rx_armed = false;
}

/* ------------------------------------------------------------------ */
/* TLS                                                                */
/* ------------------------------------------------------------------ */

/*
 * With a TLS session (glue_tls.h) the engine keeps its pump and only the
 * two socket calls change: a receive is SSL_read into the very iovecs
 * rx_want gave (the MR: OpenSSL has checked the record's tag before it
 * copies a plaintext octet there), and a send is one record gathered
 * from tx_fill's iovecs, sent from user space by the session's BIO
 * (non-blocking) rather than by an io_uring sendmsg; when the socket is
 * full the backend waits for writability (arm_tx) and the same record
 * is retried. A receive that stops at EAGAIN has left nothing decrypted
 * inside OpenSSL (SSL_read only says WANT_READ once its plaintext is
 * drained), so waiting for readability never strands an FPDU.
 */

/* As recvmsg(2) into c->rx_iov[0..n). */
static ssize_t conn_recv(struct glue_conn *c, int n)
{
	long r;

	if (!c->tls) {
		c->rx_msg.msg_iov = c->rx_iov;
		c->rx_msg.msg_iovlen = (size_t)n;
		return recvmsg(c->fd, &c->rx_msg, MSG_DONTWAIT);
	}
	r = glue_tls_readv(c->tls, c->rx_iov, n);
	if (r >= 0)
		return r;
	errno = (int)-r;
	return -1;
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
 * Returns 1 at EAGAIN, 0 at the limit, -1 at the end of the stream
 * (c->rx_end says how it ended).
 */
static int rx_drain(struct glue_conn *c, int max, bool *got)
{
	for (int i = 0; i < max; i++) {
		int n = c->ops->rx_want(c->arg, c->rx_iov, GLUE_RX_IOV);
		ssize_t r;
		int err, done;

		r = conn_recv(c, n);
		err = errno;
		glue_stat_rx(c, r, err, glue_on_engine(c->e));
		if (r > 0) {
			TSAN_RECEIVED(c);
			conn_mark_active(c);
		}
		/* Always, so that the owner knows the copy is over. */
		done = c->ops->rx_done(c->arg, r > 0 ? (size_t)r : 0);
		errno = err;
		if (r > 0) {
			*got = true;
			if (done & GLUE_RX_CLOSE)
				atomic_store(&c->close_req, true);
			/* What arrived calls for sending (Read Responses,
			 * ORD credit, a Terminate). */
			if (done & GLUE_RX_SEND)
				atomic_store(&c->tx_more, true);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return 1;
		/* 0: the peer closed its side; nothing more will come. */
		atomic_store(&c->rx_end, r == 0 ? -1 : errno);
		return -1;
	}
	return 0;
}

bool glue_conn_recv_now(struct glue_conn *c)
{
	bool got = false;
	int r;

	if (conn_stopped(c))
		return false;
	atomic_store_explicit(&c->app_rx_ms, now_ms(), memory_order_relaxed);
	if (pthread_mutex_trylock(&c->rx_lock))
		return false;
	if (conn_stopped(c)) {
		pthread_mutex_unlock(&c->rx_lock);
		return false;
	}
	/* Through TLS a read holds the session's lock, which the engine's
	 * SSL_write needs. While sends wait, look without that lock first
	 * (rx_lock keeps c->tls and the socket from being finished under
	 * us) and, if nothing is there to read, encrypt and send them here
	 * rather than spin beside the engine. With nothing to send, as a
	 * ping-pong waits, the look would only add a system call. */
	if (c->tls && atomic_load(&c->tx_more) && glue_tls_rx_idle(c->tls)) {
		pthread_mutex_unlock(&c->rx_lock);
		glue_conn_send_now(c);
		return false;
	}
	r = rx_drain(c, 8, &got);
	pthread_mutex_unlock(&c->rx_lock);
	if (r <= 0 || atomic_load(&c->close_req)) {
		/* An end, a close or more to read: the engine's business. */
		atomic_store(&c->rx_more, true);
		wake(c->e);
	}
	/* Answers to what arrived (Read Responses) go out from here too. */
	if (got && atomic_load(&c->tx_more))
		glue_conn_send_now(c);
	return got;
}

void glue_tx_result(struct glue_conn *c, long res)
{
	int close;

	pthread_mutex_lock(&c->tx_lock);
	c->tx_busy = false;
	glue_stat_tx_result(c, res);
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
	close = c->ops->tx_done(c->arg, (size_t)res);
	if (close)
		conn_start_close(c);
out:
	pthread_mutex_unlock(&c->tx_lock);
}

bool glue_conn_send_now(struct glue_conn *c)
{
	ssize_t n;
	int niov, close = 0;
	bool sent = false, more = false;

	/* Busy: the engine is at it and will see the kick. */
	if (pthread_mutex_trylock(&c->tx_lock))
		return false;
	if (c->tx_busy || conn_state(c) != GLUE_CONN_OPEN)
		goto out;
	niov = conn_tx_fill(c);
	if (niov <= 0)
		goto out;
	c->tx_msg.msg_iov = c->tx_iov;
	c->tx_msg.msg_iovlen = (size_t)niov;
	TSAN_SENT(c);
	if (c->tls)
		n = conn_tls_send(c, niov);
	else
		n = sendmsg(c->fd, &c->tx_msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	glue_stat_tx_direct(c, niov, n, errno);
	if (n > 0) {
		close = c->ops->tx_done(c->arg, (size_t)n);
		sent = true;
	}
	/* Anything left (partial send, EAGAIN, an error to report, a close
	 * to start) is the engine's: it looks again after the kick. */
	if (close)
		atomic_store(&c->close_req, true);
	more = n < 0 || close || c->ops->tx_fill(c->arg, c->tx_iov, 1) > 0;
out:
	pthread_mutex_unlock(&c->tx_lock);
	if (more) {
		atomic_store(&c->tx_more, true);
		wake(c->e);
	}
	return sent;
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
	if (now_ms() - atomic_load(&c->app_rx_ms) < GLUE_APP_POLL_MS) {
		/* A thread polls this connection itself: leave the socket
		 * to it rather than wake up for every message, and look
		 * again once it has been quiet for a while. */
		e->recheck = true;
		return;
	}
	if (pthread_mutex_trylock(&c->rx_lock)) {
		/* A polling thread is draining the socket: it reads until
		 * EAGAIN, so waiting for readiness again loses nothing. */
		r = 1;
		goto arm;
	}
	r = rx_drain(c, 16, &got);
	pthread_mutex_unlock(&c->rx_lock);
	if (got)
		bp_active(e);
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
		atomic_store(&e->pending, true);   /* more to read: come back */
		return;
	}
arm:
	c->rx_armed = true;
	if (!c->rx_op)
		e->be->arm_rx(e, c);
}

static void pump_tx(struct glue_engine *e, struct glue_conn *c)
{
	pthread_mutex_lock(&c->tx_lock);
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

/* One pass over every connection. Returns the wait timeout to use. */
static int pump_all(struct glue_engine *e)
{
	struct glue_conn *c, *next;
	int64_t now = 0, soonest = -1;

	e->recheck = false;
	for (c = e->conns; c; c = next) {
		next = c->next;
		if (c->timer_at >= 0 && conn_state(c) == GLUE_CONN_OPEN) {
			if (!now)
				now = now_ms();
			if (now >= c->timer_at)
				conn_timer(c, now);
			if (c->timer_at >= 0 &&
			    (soonest < 0 || c->timer_at < soonest))
				soonest = c->timer_at;
		}
		if (conn_state(c) != GLUE_CONN_GONE) {
			pump_tx(e, c);
			pump_rx(e, c);
			pump_tx(e, c);
			/* The pump stops after a bounded number of operations
			 * that completed at once (epoll): come back before
			 * sleeping, as edge-triggered readiness will not. */
			if (!conn_stopped(c) && atomic_load(&c->tx_more) &&
			    !c->tx_busy)
				atomic_store(&e->pending, true);
		}
		if (conn_state(c) == GLUE_CONN_CLOSING ||
		    conn_state(c) == GLUE_CONN_SHUT_WR) {
			if (!now)
				now = now_ms();
			if (now >= c->deadline_ms)
				conn_abort(c, 0);
			else if (soonest < 0 || c->deadline_ms < soonest)
				soonest = c->deadline_ms;
		}
		if (conn_state(c) == GLUE_CONN_ABORTING && !c->rx_op &&
		    !c->tx_busy)
			conn_finish(e, c);   /* c may be freed from here on */
	}
	if (e->recheck && (soonest < 0 || soonest - now > GLUE_APP_POLL_MS))
		return GLUE_APP_POLL_MS;
	if (soonest < 0)
		return -1;
	return (int)(soonest - now > 0 ? soonest - now : 1);
}

static void *engine_main(void *arg)
{
	struct glue_engine *e = arg;

	tls_engine = e;
	while (!atomic_load(&e->stop) || e->conns) {
		int timeout;

		run_commands(e);
		timeout = trim_timeout(e, pump_all(e));
		if (busy_poll(e))
			continue;
		atomic_store(&e->sleeping, true);
		if (atomic_exchange(&e->pending, false)) {
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
	unsigned bp_us;
	int ret;

	ret = pick_kind(&kind);
	if (!ret)
		ret = busy_poll_setting(&bp_us);
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
	e->be->fini(e);
	close(e->wake_fd);
	pthread_cond_destroy(&e->cmd_cond);
	pthread_mutex_destroy(&e->cmd_lock);
	free(e);
}

struct add_args {
	struct glue_engine *e;
	struct glue_conn *c;
	int ret;
};

static void add_cmd(void *arg)
{
	struct add_args *a = arg;

	a->ret = a->e->be->conn_add(a->e, a->c);
	if (a->ret)
		return;
	a->c->next = a->e->conns;
	if (a->e->conns)
		a->e->conns->prev = a->c;
	a->e->conns = a->c;
	atomic_store(&a->c->tx_more, true);
}

struct glue_conn *glue_conn_add(struct glue_engine *e, int fd,
				const struct glue_conn_ops *ops, void *arg)
{
	struct add_args a = { .e = e };
	struct glue_conn *c;
	int one = 1, fl;

	c = calloc(1, sizeof(*c));
	if (!c) {
		glue_tls_drop(fd);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		a.ret = -errno;
		goto err;
	}
	/* FPDUs are whole messages: never hold one back for coalescing. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->e = e;
	c->fd = fd;
	c->tsan_sync = tsan_link(fd);
	/* The handshake ran before (glue_tls.h): the session is c's now. */
	c->tls = glue_tls_take(fd);
	c->ops = ops;
	c->arg = arg;
	c->tx_iov = c->tx_iov_small;
	c->tx_iov_cap = GLUE_TX_IOV_SMALL;
	atomic_init(&c->active, false);
	atomic_init(&c->kicked, false);
	atomic_init(&c->tx_more, false);
	atomic_init(&c->rx_more, false);
	atomic_init(&c->close_req, false);
	atomic_init(&c->rx_end, 0);
	atomic_init(&c->state, GLUE_CONN_OPEN);
	atomic_init(&c->app_rx_ms, 0);
	atomic_init(&c->st, &c->own_st);
	pthread_mutex_init(&c->rx_lock, NULL);
	{
		pthread_mutexattr_t ma;

		pthread_mutexattr_init(&ma);
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
		pthread_mutex_init(&c->tx_lock, &ma);
		pthread_mutexattr_destroy(&ma);
	}
	a.c = c;
	glue_engine_call(e, add_cmd, &a);
	if (a.ret)
		goto err;
	return c;
err:
	glue_tls_free(c->tls);
	glue_tls_drop(fd);
	close(fd);
	free(c);
	errno = -a.ret;
	return NULL;
}
