/* SPDX-License-Identifier: MIT */
/*
 * glue.h - the progress engine: one thread that moves octets between TCP
 * sockets and the protocol above, with io_uring or, where io_uring is
 * refused, epoll.
 *
 * The engine knows nothing of MPA, DDP or RDMAP. For each connection it
 * asks its owner where to receive (rx_want) and what to send (tx_fill),
 * and reports what the kernel did (rx_done, tx_done). All four callbacks,
 * and ended, run on the engine thread.
 *
 * Configuration: WISP_ENGINE=uring|epoll forces a backend; unset, io_uring
 * is used when the kernel allows it and epoll otherwise.
 * WISP_BUSY_POLL_US bounds how long the engine spins on its sockets after
 * traffic before it blocks (glue_engine.c "Busy polling").
 * WISP_SEND_ZC turns on zero-copy sends for large gathered sends
 * (glue_engine.c "Zero-copy sends"). WISP_SEND_CORK sets how a burst of
 * small posts is sent (glue_engine.c "Corking bursts"). WISP_POST_POLL
 * bounds how long a posting thread waits for a ping-pong's answer
 * (glue_engine.c "Waiting for the answer").
 */
#ifndef WISP_GLUE_H
#define WISP_GLUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct glue_engine;
struct glue_conn;

/* Largest iovec counts the engine passes to the callbacks. The receive
 * callbacks may run on a polling thread too (glue_conn_recv_now), the
 * transmit ones on a posting thread (glue_conn_send_now); the engine
 * serialises each side. A connection offers tx_fill GLUE_TX_IOV_SMALL
 * iovecs until a fill uses them all, GLUE_TX_IOV from then on, and the
 * small count again once it has been quiet for GLUE_IDLE_MS. */
#define GLUE_RX_IOV        8
#define GLUE_TX_IOV        1024
#define GLUE_TX_IOV_SMALL  16

/* How long a connection stays quiet (nothing sent or received) before
 * the engine gives back its large buffers and asks its owner to (idle):
 * between one and two of these after the last octet. */
#define GLUE_IDLE_MS       1000

struct glue_conn_ops {
	/* Where the next octets go: fill iov[0..cap), return the count (>= 1). */
	int (*rx_want)(void *arg, struct iovec *iov, int cap);
	/* n octets arrived there; n is 0 when the receive brought nothing
	 * (EAGAIN, EINTR, the end of the stream, an error). Each rx_want is
	 * followed by exactly one rx_done on the same thread once the
	 * kernel has stopped writing to those iovecs, so the owner may keep
	 * its destination locked from one to the other. Return a set of
	 * GLUE_RX_* (0 when n is 0). */
	int (*rx_done)(void *arg, size_t n);
	/* What to send now: fill iov[0..cap), return the count, 0 for none. */
	int (*tx_fill)(void *arg, struct iovec *iov, int cap);
	/* n octets of it were sent. Return a set of GLUE_TX_* (0: nothing
	 * to say). */
	int (*tx_done)(void *arg, size_t n);
	/* The stream is over and its socket closed: reason 0 for an orderly
	 * end (either side closed), else a positive errno. Last call. */
	void (*ended)(void *arg, int reason);
	/* Optional, on the engine thread: time passed (now_ms: the
	 * CLOCK_MONOTONIC milliseconds). Return when to be called next (same
	 * clock), or -1 for never again; set *send if tx_fill has something
	 * because of it. First called when the engine adopts the socket. */
	int64_t (*timer)(void *arg, int64_t now_ms, bool *send);
	/* Optional, on the engine thread, while no receive and no send is
	 * under way on the connection: nothing moved for GLUE_IDLE_MS.
	 * Give back memory that traffic can take again. Return true if
	 * some is still held (asked again after the next quiet spell),
	 * false if none is. */
	bool (*idle)(void *arg);
};

/* What rx_done asks for, and what it says of what arrived. */
#define GLUE_RX_CLOSE 0x1   /* close the stream gracefully */
#define GLUE_RX_SEND  0x2   /* tx_fill has something now */
/* A message is partly received: more of it is due. A thread that waits
 * for a post's answer (WISP_POST_POLL) does not leave the stream with a
 * message half read. */
#define GLUE_RX_PARTIAL 0x4
/* What arrived completed work that the application learns of through a
 * completion (a receive, a READ): it polls or sleeps for it, so such an
 * answer is not one that a posting thread waits for. */
#define GLUE_RX_COMPLETED 0x8

/* What tx_done returns, or-ed. GLUE_TX_IDLE is a hint: tx_fill would
 * give nothing right after this tx_done (the owner's state as it was
 * under the same lock), so a sender that has just sent need not ask it
 * again; without it the sender asks. */
#define GLUE_TX_CLOSE 0x1   /* close the stream gracefully once sent */
#define GLUE_TX_IDLE  0x2   /* nothing more to send now */

enum glue_kind {
	GLUE_AUTO,
	GLUE_URING,
	GLUE_EPOLL,
};

/*
 * Start an engine thread. kind GLUE_AUTO honours WISP_ENGINE. Returns
 * NULL with errno set: EINVAL for a bad WISP_ENGINE (a message names the
 * accepted values), or what io_uring / epoll setup reported.
 */
struct glue_engine *glue_engine_create(enum glue_kind kind);

/* Stop the thread and free the engine. Every connection must be gone. */
void glue_engine_destroy(struct glue_engine *e);

/*
 * WISP_BUSY_POLL_US: auto (the default), or 0 .. GLUE_BUSY_POLL_MAX_US
 * microseconds. auto is GLUE_BUSY_POLL_AUTO_US on a host with at least
 * GLUE_BUSY_POLL_AUTO_CPUS online CPUs, else 0: with fewer, the engine's
 * spinning competes with the application's own (docs/configuration.md).
 */
#define GLUE_BUSY_POLL_AUTO_US    50u
#define GLUE_BUSY_POLL_AUTO_CPUS  4
#define GLUE_BUSY_POLL_MAX_US     10000u

/*
 * Parse a WISP_BUSY_POLL_US value: "auto", or decimal digits only (no
 * sign, space or suffix) up to GLUE_BUSY_POLL_MAX_US. ncpus is the
 * number of online CPUs that auto goes by. Returns 0 and sets *us, or
 * -EINVAL (NULL, empty or anything else).
 */
int glue_busy_poll_parse(const char *s, long ncpus, unsigned *us);

/*
 * WISP_SEND_ZC: off (the default), on (GLUE_SEND_ZC_ON_BYTES), or a
 * number of octets from GLUE_SEND_ZC_MIN_BYTES to GLUE_SEND_ZC_MAX_BYTES.
 * A gathered send of at least that many octets on a plaintext
 * connection goes out zero-copy (io_uring IORING_OP_SENDMSG_ZC, epoll
 * sendmsg with MSG_ZEROCOPY) where the kernel offers it, and its octets
 * count as sent (tx_done) only once the kernel's notification says it
 * no longer reads the pages (glue_engine.c "Zero-copy sends").
 */
#define GLUE_SEND_ZC_ON_BYTES   65536u
#define GLUE_SEND_ZC_MIN_BYTES  4096u
#define GLUE_SEND_ZC_MAX_BYTES  (1u << 30)

/*
 * Parse a WISP_SEND_ZC value: "off", "on", or decimal digits only (no
 * sign, space or suffix) from GLUE_SEND_ZC_MIN_BYTES to
 * GLUE_SEND_ZC_MAX_BYTES. Returns 0 and sets *min (0 for off), or
 * -EINVAL (NULL, empty or anything else).
 */
int glue_send_zc_parse(const char *s, size_t *min);

/*
 * WISP_SEND_CORK: on (the default: GLUE_SEND_CORK_ON_US), off, or 1 ..
 * GLUE_SEND_CORK_MAX_US microseconds. A post on a plaintext connection
 * (glue_conn_send_post) that comes within that long of the end of the
 * connection's last post, the third or later in such a row of posts of
 * at most half the socket's MSS (and 16 KiB) each, is part of a burst:
 * it is held, not sent, while fewer than GLUE_HOLD_POSTS posts and
 * GLUE_HOLD_BYTES octets are held; the post that reaches either sends
 * them all in one sendmsg with MSG_MORE, so that the kernel sends full
 * segments only and holds the tail. What is held, here or in the
 * kernel, goes with a later send without MSG_MORE, or a push
 * (glue_engine.c "Corking bursts").
 */
#define GLUE_SEND_CORK_ON_US   2u
#define GLUE_SEND_CORK_MAX_US  1000u
#define GLUE_HOLD_POSTS        8
#define GLUE_HOLD_BYTES        32768u

/*
 * Parse a WISP_SEND_CORK value: "on", "off", or decimal digits only (no
 * sign, space or suffix) from 1 to GLUE_SEND_CORK_MAX_US. Returns 0 and
 * sets *us (0 for off), or -EINVAL (NULL, empty or anything else).
 */
int glue_send_cork_parse(const char *s, unsigned *us);

/*
 * WISP_POST_POLL: on (the default: GLUE_POST_POLL_ON_US), off, or 1 ..
 * GLUE_POST_POLL_MAX_US microseconds. The longest a thread that has just
 * posted on a plaintext connection with a ping-pong pattern (its recent
 * lone posts were each answered by octets that completed nothing, within
 * this bound) waits for the answer, receiving on the connection itself,
 * before glue_conn_send_post returns (glue_engine.c "Waiting for the
 * answer"). The wait itself is twice the measured answer time, at most
 * this.
 */
#define GLUE_POST_POLL_ON_US   100u
#define GLUE_POST_POLL_MAX_US  10000u

/*
 * Parse a WISP_POST_POLL value: "on", "off", or decimal digits only (no
 * sign, space or suffix) from 1 to GLUE_POST_POLL_MAX_US. Returns 0 and
 * sets *us (0 for off), or -EINVAL (NULL, empty or anything else).
 */
int glue_post_poll_parse(const char *s, unsigned *us);

/*
 * The ping-pong detector behind WISP_POST_POLL, one per connection. Its
 * clock is the caller's (nanoseconds, monotonic), so that its rules can
 * be tested without time. Posts and receives may come from different
 * threads at once: every field is atomic, and a race costs at worst one
 * wait more or less, never a wrong octet.
 *
 * A post is "lone" when its send carried everything queued and left
 * nothing behind. A lone post that finds the one before still
 * unanswered, a post that is not lone, an answer that completed work
 * (GLUE_RX_COMPLETED), one that came later than max_ns after its post,
 * and a wait that ran out all end the streak; GLUE_ANSWER_STREAK lone
 * posts answered in a row start it.
 */
#define GLUE_ANSWER_STREAK  4
#define GLUE_ANSWER_MIN_NS  5000      /* the shortest wait */

struct glue_answer {
	_Atomic int64_t post_ns;  /* the unanswered lone post's end; 0: none */
	_Atomic int64_t srtt_ns;  /* answer time, smoothed (1/8) */
	_Atomic int streak;       /* lone posts answered in a row */
	int64_t max_ns;           /* the bound; 0: off */
};

void glue_answer_init(struct glue_answer *a, int64_t max_ns);
/* A post's send ended at now (> 0). Returns how long to wait for its
 * answer (ns), 0 for not at all. */
int64_t glue_answer_post(struct glue_answer *a, int64_t now, bool lone);
/* Is a lone post waiting for its answer? (A cheap look before
 * glue_answer_rx, which wants the time.) */
bool glue_answer_waiting(const struct glue_answer *a);
/* Octets arrived at now; flags: rx_done's (GLUE_RX_COMPLETED). An
 * answer that completed work only ends the streak: now is not read then,
 * so a caller may pass 0 and spare the clock. */
void glue_answer_rx(struct glue_answer *a, int64_t now, int flags);
/* A wait for the answer ran out before it came. */
void glue_answer_miss(struct glue_answer *a);

/*
 * WISP_POLL_WAIT_US: on (the default: GLUE_POLL_WAIT_ON_US), off, or 1 ..
 * GLUE_POLL_WAIT_MAX_US microseconds: how long a thread that polls for
 * completions and finds none may wait for room in full sockets when
 * sends blocked on that room are all that its completions wait for
 * (glue_conns_wait_tx_at; glue_engine.c "Waiting for room").
 */
#define GLUE_POLL_WAIT_ON_US   1000u
#define GLUE_POLL_WAIT_MAX_US  10000u

/*
 * Parse a WISP_POLL_WAIT_US value: "on", "off", or decimal digits only
 * (no sign, space or suffix) from 1 to GLUE_POLL_WAIT_MAX_US. Returns 0
 * and sets *us (0 for off), or -EINVAL (NULL, empty or anything else).
 */
int glue_poll_wait_parse(const char *s, unsigned *us);

/* The most connections one glue_conns_wait_tx_at call waits on. */
#define GLUE_WAIT_MAX 8

/*
 * From a thread that polls for completions and found none, when every
 * completion it can get next waits for c[0..n) (n <= GLUE_WAIT_MAX):
 * each c[i] is a plaintext connection whose unsent octets complete the
 * caller's WRs once the kernel takes them; rx[i] says whether the caller
 * also receives on c[i] itself (glue_conn_recv_now). The caller takes
 * the connections' sends over from the engine while it keeps calling
 * this (within GLUE_APP_POLL_MS; glue_conn_release hands them back). If
 * the last send on each c[i] found its socket full and something still
 * waits to be sent, wait up to WISP_POLL_WAIT_US for room in any of them
 * (or octets to read on one with rx[i]), then send (receive) on the
 * calling thread. Otherwise return at once. Returns true if octets moved.
 * now_ms: the caller's glue_poll_clock_ms() reading of this poll, as
 * for glue_conn_recv_at (one clock reading per poll).
 */
bool glue_conns_wait_tx_at(struct glue_conn *const *c, const bool *rx, int n,
			   int64_t now_ms);

/*
 * From a thread that polls for completions, found some, and calls
 * glue_conns_wait_tx_at on c whenever it finds none: it still does, so the
 * engine keeps leaving c's queued sends to it; what a post left over
 * while the socket has room is sent now. Nothing on a TLS connection, or
 * with WISP_POLL_WAIT_US off.
 */
void glue_conn_tx_polled(struct glue_conn *c);

/* The socket's MSS (TCP_MAXSEG), or 0 if it cannot be read. */
int glue_sock_mss(int fd);

/* What the engine's busy polling did (relaxed reads, any thread). */
struct glue_engine_stats {
	uint64_t bp_windows;   /* spins started after traffic */
	uint64_t bp_spins;     /* passes over the sockets while spinning */
	uint64_t bp_hits;      /* windows that found octets or completions */
	uint64_t bp_misses;    /* windows that ran out: the engine slept */
	uint64_t bp_busy;      /* windows cut short: another thread wanted
				* the CPU */
	uint64_t bp_grown;     /* a wake-up soon after blocking widened the
				* window again */
	unsigned bp_max_us;    /* the setting */
	unsigned bp_budget_us; /* the window now */
	/* Zero-copy sends (WISP_SEND_ZC). */
	size_t zc_min;         /* the setting; 0: off */
	bool zc_avail;         /* the backend can send zero-copy */
	uint64_t zc_sends;     /* sends that went zero-copy */
	uint64_t zc_copied;    /* of those, the kernel said it copied */
	uint64_t zc_fallback;  /* refused (ENOBUFS), sent by copy */
};

void glue_engine_get_stats(const struct glue_engine *e,
			   struct glue_engine_stats *st);

/* "io_uring" or "epoll". */
const char *glue_engine_name(const struct glue_engine *e);

/* Run fn(arg) on the engine thread and wait for it (directly if called
 * from the engine thread). */
void glue_engine_call(struct glue_engine *e, void (*fn)(void *), void *arg);

/* True on the engine thread of e. */
bool glue_on_engine(const struct glue_engine *e);

/* The clock of the stamps a polling thread leaves for the engine
 * (glue_engine.c, "The polling thread's clock"): CLOCK_MONOTONIC in
 * milliseconds, as read by one of the last GLUE_STAMP_REUSE + 1 calls
 * on this thread, none of them later than the coarse clock's next
 * step. */
#define GLUE_STAMP_REUSE 8
int64_t glue_poll_clock_ms(void);

/* Adopt the connected socket fd (made non-blocking, TCP_NODELAY set).
 * Does not wait for the engine: it takes c over on its next pass, and if
 * it cannot (its backend refuses the socket, no memory), c ends as a
 * broken stream does, with ended(errno). c may be kicked, sent and
 * received on at once. Returns NULL with errno set; fd is closed either
 * way on failure. */
struct glue_conn *glue_conn_add(struct glue_engine *e, int fd,
				const struct glue_conn_ops *ops, void *arg);

/* glue_conn_adopt's flags: what the caller has made sure of on fd, so
 * that adopting it asks nothing of the socket (issue 13: the connection
 * manager's sockets are non-blocking from socket() or accept4() on and
 * have TCP_NODELAY from their bind or their listener). */
#define GLUE_CONN_NONBLOCK 0x1u   /* fd is O_NONBLOCK: no F_GETFL */
#define GLUE_CONN_NODELAY  0x2u   /* fd has TCP_NODELAY: not set again */

/* glue_conn_add, told by flags what fd has already. */
struct glue_conn *glue_conn_adopt(struct glue_engine *e, int fd,
				  const struct glue_conn_ops *ops, void *arg,
				  unsigned int flags);

/* From any thread: the owner has something to send; the engine will call
 * tx_fill soon. Cheap when the engine is awake (no system call). */
void glue_conn_kick(struct glue_conn *c);

/*
 * From any thread: send what tx_fill has right now on the calling thread
 * (non-blocking), if the engine is not sending on c; whatever cannot go
 * at once is left to the engine. Saves the engine wake-up on an idle
 * connection, which is most of a small message's latency. Returns true
 * if octets were sent. The owner's tx_fill / tx_done must tolerate being
 * called from this thread (they are serialised with the engine's).
 */
bool glue_conn_send_now(struct glue_conn *c);

/*
 * glue_conn_send_now, from a thread that has just posted WRs of len
 * payload octets on c (a READ's count none): the posts are counted, and
 * a burst of small ones is held and sent in groups with MSG_MORE
 * (WISP_SEND_CORK); true then for a held post too, which needs nothing
 * from the engine. What that holds back goes out with the next send
 * without it, when the poller finds nothing (glue_conn_recv_now,
 * glue_conn_send_poll), when it arms its CQ (glue_conn_release), and in
 * any case within about 2 ms (the engine looks every millisecond).
 * On a connection in a ping-pong (WISP_POST_POLL) it then receives on c
 * until the answer is in, or for at most twice the measured answer
 * time, so that a program watching memory for it finds it there without
 * a wake-up of the engine; no lock is held while it waits.
 */
bool glue_conn_send_post(struct glue_conn *c, size_t len);

/*
 * From any thread: receive and process what the socket holds right now
 * (non-blocking), unless another thread is at it. A thread that polls
 * for completions calls this instead of waiting for the engine to wake
 * up. Returns true if octets were processed.
 */
bool glue_conn_recv_now(struct glue_conn *c);

/* glue_conn_recv_now with now_ms, a glue_poll_clock_ms() reading the
 * caller took on this thread for this poll: a poll that receives on
 * several connections, and then waits for room
 * (glue_conns_wait_tx_at), reads the clock once (issue 13: an empty
 * poll's cost). */
bool glue_conn_recv_at(struct glue_conn *c, int64_t now_ms);

/*
 * From a thread that polls for completions and found some (so it did not
 * call glue_conn_recv_now): it is still polling c. On a TLS connection
 * the engine then keeps leaving c's sends to it (glue_engine.c "TLS");
 * nothing on a plaintext one.
 */
void glue_conn_polled(struct glue_conn *c);

/*
 * From a thread that polls for completions, found none, and does not
 * receive on c (its CQ gets nothing from what arrives on c): on a TLS
 * connection it sends what waits, as glue_conn_recv_now would, and the
 * engine keeps leaving c's sends to it; the engine keeps receiving.
 * Nothing on a plaintext one.
 */
void glue_conn_send_poll(struct glue_conn *c);

/*
 * From any thread: the thread that polled c is about to sleep (it armed a
 * completion channel): the engine takes the socket back at once instead
 * of after GLUE_APP_POLL_MS, and a tail held by a corked burst goes out.
 */
void glue_conn_release(struct glue_conn *c);

/*
 * Engine thread only. Close gracefully (half-close once everything queued
 * is sent, then read until the peer closes or a short deadline passes) or
 * abortively. ended() follows on the engine thread.
 */
void glue_conn_close(struct glue_conn *c, int reason, bool graceful);

/*
 * From any thread: ask the engine to start a graceful close of c, as
 * glue_conn_close(c, 0, true) does on the engine thread. Safe until
 * glue_conn_free(c).
 */
void glue_conn_close_soon(struct glue_conn *c);

/*
 * Free c once its ended() has run. Until then, and until this call,
 * glue_conn_kick() on c stays safe from any thread; owners that may kick
 * concurrently with ended() rely on that.
 */
void glue_conn_free(struct glue_conn *c);

#endif /* WISP_GLUE_H */
