/* SPDX-License-Identifier: MIT */
/*
 * glue_internal.h - shared by the engine core and its two backends.
 */
#ifndef WISP_GLUE_INTERNAL_H
#define WISP_GLUE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "glue.h"
#include "glue_stats.h"
#include "wisp_lock.h"

#define GLUE_CLOSE_DEADLINE_MS 2000
/* How long after a thread last polled a connection itself the engine
 * stays off its socket. While threads keep polling, the engine looks
 * again after GLUE_APP_POLL_MS, then twice as long each time up to
 * GLUE_APP_POLL_MAX_MS (glue_engine.c, pump_rx). */
#define GLUE_APP_POLL_MS 2
#define GLUE_APP_POLL_MAX_MS 8
/* Corking bursts (glue_engine.c "Corking bursts"): a post's send goes
 * with MSG_MORE once it is the GLUE_CORK_STREAK-th in a row of at most
 * half the MSS and GLUE_CORK_MAX_BYTES each, each within WISP_SEND_CORK
 * of the last one's end; the engine pushes a tail still held every
 * GLUE_CORK_TICK_MS. */
#define GLUE_CORK_STREAK 3
#define GLUE_CORK_MAX_BYTES 16384
#define GLUE_CORK_TICK_MS 1

/*
 * The life of a connection. It only moves down this list, on the engine
 * thread, through conn_set_state() (glue_engine.c), which logs each move
 * when WISP_LOG=debug. Other threads read it to stay off a connection
 * that is going away.
 */
enum glue_conn_state {
	GLUE_CONN_OPEN,           /* octets move both ways */
	GLUE_CONN_CLOSING,        /* graceful close: sending what is queued */
	GLUE_CONN_SHUT_WR,        /* half-closed: reading until the peer
				   * closes or the close deadline passes */
	GLUE_CONN_ABORTING,       /* socket shut down: waiting for the
				   * operations in flight; no direct I/O */
	GLUE_CONN_GONE,           /* closed; ended() has run */
	GLUE_CONN__COUNT
};

struct glue_conn {
	struct glue_engine *e;
	struct glue_conn *next, *prev;    /* every adopted one (engine) */
	/* The ready list (glue_engine.c "The ready list"): rnext links c
	 * into e->ready while queued is set. */
	struct glue_conn *rnext;
	atomic_bool queued;
	bool adopted;             /* the backend knows c (engine thread) */
	bool rx_fresh;            /* not received on yet (engine thread) */
	/* The deadline heap (engine thread): c's place, -1 if not in it,
	 * and when it is due (its timer, close deadline or recheck). */
	int heap_idx;
	int64_t due;
	int64_t recheck_at;       /* look again then (0: no need) */
	int recheck_ms;           /* the next look's delay while polled */
	int fd;
	const struct glue_conn_ops *ops;
	void *arg;

	_Atomic(enum glue_conn_state) state;
	/* Operations in flight, whatever the state (engine thread). */
	bool tx_busy;             /* a send is in flight / waiting */
	bool rx_armed;            /* waiting for readability */
	bool rx_op;               /* io_uring: a poll op references c */
	/* Busy polling: the engine reads c's socket itself on every pass
	 * (bp_hot_recv) and has not armed the readiness wait; it arms it
	 * once it stops spinning (glue_engine.c, bp_arm_lazy). rx_armed is
	 * set meanwhile. Engine thread. */
	bool rx_lazy;
	/* Requests from other threads, taken by the engine. */
	atomic_bool kicked;
	atomic_bool rx_more;      /* another thread asks for a drain */
	atomic_bool close_req;    /* the owner asked for a graceful close */
	atomic_int rx_end;        /* 0, -1 end of stream, or an errno */
	_Atomic int64_t app_rx_ms; /* last glue_conn_recv_now() call */
	/* Waiting for the answer (glue_engine.c): the ping-pong detector,
	 * the last time a posting thread received while it waited (the
	 * engine stays off the socket as from a poller's app_rx_ms), and
	 * whether the last receive left a message half read (rx_lock). */
	struct glue_answer ans;
	_Atomic int64_t post_rx_ms;
	bool rx_partial;
	/* TLS: last time a polling thread sent for c (glue_conn_recv_now,
	 * glue_conn_polled, glue_conn_send_poll): the engine leaves c's
	 * sends to it meanwhile (glue_engine.c "TLS"). Plaintext: last
	 * time a thread that waits for room on c when its CQ is empty
	 * polled (glue_conns_wait_tx_at, glue_conn_tx_polled): the engine
	 * leaves c's queued sends to it meanwhile (glue_engine.c "Waiting
	 * for room"). */
	_Atomic int64_t app_tx_ms;
	/* Receive side: the engine and polling threads drain the socket
	 * under it (glue_conn_recv_now). */
	struct wisp_lock rx_lock;
	atomic_bool tx_more;      /* tx_fill may have more right away */
	/* The last send on c found its socket full: EAGAIN, or the kernel
	 * took only part (written under tx_lock; glue_engine.c "Waiting
	 * for room"). */
	atomic_bool tx_full;
	/* The engine found tx_lock taken by another thread and left:
	 * that thread queues c again when it lets go (glue_tx_unlock). */
	atomic_bool tx_handoff;
	/* Transmit side: taken by the engine around tx_fill / tx_done and
	 * by a posting thread that sends directly (glue_conn_send_now).
	 * Recursive: epoll completes a send inside start_tx. */
	pthread_mutex_t tx_lock;
	int reason;
	int64_t deadline_ms;
	int64_t timer_at;         /* ops->timer: 0 at once, -1 never */

	/* TLS session (glue_tls.h), taken over from the fd registry at
	 * glue_conn_add; NULL for plaintext. Its receive side is used
	 * under rx_lock, its transmit side under tx_lock (OpenSSL's SSL
	 * object keeps the two directions' record state apart, and the
	 * engine never reads and writes it from two threads at once:
	 * see glue_engine.c "TLS"). */
	struct glue_tls *tls;
	bool tls_on;              /* tls was set at glue_conn_add: fixed,
				   * read by any thread */
	bool tx_wait;             /* TLS: waiting for writability */
	/* TLS: the engine leaves sending to the thread that polls c
	 * (glue_engine.c "TLS"); it looks again within GLUE_APP_POLL_MS. */
	atomic_bool tx_deferred;

	/* epoll backend: the events armed (one-shot) */
	uint32_t ep_want;

	/* ThreadSanitizer builds: the sync address this TCP connection's
	 * two ends share (glue_engine.c, tsan_link). */
	void *tsan_sync;

	struct msghdr rx_msg, tx_msg;
	struct iovec rx_iov[GLUE_RX_IOV];
	/* tx_fill's iovecs: tx_iov_small, or GLUE_TX_IOV of them mapped
	 * once a fill used every small one (tx_lock). */
	struct iovec *tx_iov;
	int tx_iov_cap;
	struct iovec tx_iov_small[GLUE_TX_IOV_SMALL];
	/* Idle trimming (glue_engine.c "Idle connections"): something
	 * moved since the engine last looked (any thread), and whether a
	 * large buffer may still be held here or by the owner (engine). */
	atomic_bool active;
	bool held;

	/* Counters (glue_stats.c): st points at own_st or the owner's. */
	_Atomic(struct glue_conn_stats *) st;
	struct glue_conn_stats own_st;
	size_t tx_offered;        /* octets of the send in flight */
	int64_t tx_start_ns;      /* when the engine submitted it */

	/* Zero-copy sends (glue_engine.c "Zero-copy sends"), under
	 * tx_lock. zc_ok: the backend took SO_ZEROCOPY / has SENDMSG_ZC
	 * for this socket (fixed once adopted). tx_zc: the send in flight
	 * is zero-copy; tx_busy stays set until its notification. */
	bool zc_ok;
	bool tx_zc;
	long zc_res;              /* its result, held until then */
	uint32_t zc_id;           /* epoll: its notification's number */
	uint32_t zc_next;         /* epoll: the next MSG_ZEROCOPY's */

	/* Corking bursts (glue_engine.c "Corking bursts"). cork_ok: the
	 * setting is on and c is plaintext (fixed at glue_conn_add). The
	 * streak and the last post's end are the posting thread's, under
	 * tx_lock. corked: a tail may be held in the socket; cork_listed:
	 * c is on the engine's cork list (cnext links it). Both are
	 * written under tx_lock only; corked is read without it, as a
	 * hint, by the threads that push. */
	bool cork_ok;
	size_t cork_limit;        /* cork_max(): 0 until asked */
	int cork_streak;
	int64_t cork_last_ns;
	atomic_bool corked;
	atomic_bool cork_listed;
	int hold_n;               /* posts held, not yet filled */
	size_t hold_bytes;        /* their octets */
	struct glue_conn *cnext;
};

/* ---- glue_stats.c: counting, under the side's lock ---- */

/* The engine is about to submit c->tx_msg. */
void glue_stat_tx_start(struct glue_conn *c);
/* The engine's send ended with res (octets or -errno). */
void glue_stat_tx_result(struct glue_conn *c, long res);
/* A posting thread's sendmsg of niov iovecs returned n (errno err). */
void glue_stat_tx_direct(struct glue_conn *c, int niov, long n, int err);
/* The epoll backend found the socket full and waits for room. */
void glue_stat_tx_eagain(struct glue_conn *c);
/* A recvmsg returned r (octets, 0 at the end, or -errno); engine: on
 * the engine thread. */
void glue_stat_rx(struct glue_conn *c, long r, bool engine);
/* The busy-polling engine found c readable. */
void glue_stat_busy_hit(struct glue_conn *c);
/* A posting thread waited for its post's answer; hit: it received all
 * of it. */
void glue_stat_post_wait(struct glue_conn *c, bool hit);
/* A posting thread sent with MSG_MORE; a held tail was pushed (engine:
 * by the engine's backstop). */
void glue_stat_tx_corked(struct glue_conn *c);
void glue_stat_tx_held(struct glue_conn *c);
void glue_stat_tx_push(struct glue_conn *c, bool engine);
/* A polling thread waited for room on c (tx_lock held); woken: room or
 * octets came before the time ran out. */
void glue_stat_tx_poll_wait(struct glue_conn *c, bool woken);

struct glue_backend {
	const char *name;
	int (*init)(struct glue_engine *e);
	void (*fini)(struct glue_engine *e);
	int (*conn_add)(struct glue_engine *e, struct glue_conn *c);
	void (*conn_del)(struct glue_engine *e, struct glue_conn *c);
	/* Wait for c to become readable: glue_rx_ready() follows. */
	void (*arm_rx)(struct glue_engine *e, struct glue_conn *c);
	/* Start the send described by c->tx_msg. The result reaches
	 * glue_tx_result(), possibly before this returns. */
	void (*start_tx)(struct glue_engine *e, struct glue_conn *c);
	/* TLS: wait for c to become writable; glue_tx_result(c, -EAGAIN)
	 * follows (c->tx_busy is set meanwhile). */
	void (*arm_tx)(struct glue_engine *e, struct glue_conn *c);
	/* Block for events up to timeout_ms (-1: no limit) and dispatch
	 * them; the wake eventfd ends the wait. */
	void (*wait)(struct glue_engine *e, int timeout_ms);
	/* Busy polling: hand queued requests to the kernel and dispatch
	 * the events already there, without blocking. Returns how many. */
	int (*peek)(struct glue_engine *e);
	/* Zero-copy: the engine closed the socket of an aborting c whose
	 * zero-copy send waits for its notification (c->fd is -1 now, and
	 * conn_del has run). The backend reports the send's result once
	 * no notification can come any more. */
	void (*zc_closed)(struct glue_engine *e, struct glue_conn *c);
};

struct glue_cmd {
	struct glue_cmd *next;
	void (*fn)(void *);
	void *arg;
	bool done;
};

struct glue_engine {
	const struct glue_backend *be;
	void *be_priv;
	pthread_t thread;
	int wake_fd;              /* eventfd */
	atomic_bool sleeping;
	atomic_bool pending;
	atomic_bool stop;
	struct glue_conn *conns;
	/* Connections with something to do, pushed from any thread (a
	 * lock-free stack that the engine takes whole). */
	_Atomic(struct glue_conn *) ready;
	/* Adopted connections by when they are due: a binary min-heap
	 * with room for every adopted connection (engine thread). */
	struct glue_conn **heap;
	int heap_n, heap_cap, nconns;
	/* Idle trimming: a connection became active (any thread), and
	 * when the engine looks at them all next (0: no look due). */
	atomic_bool trim_wanted;
	int64_t trim_at;

	/* Busy polling (glue_engine.c "Busy polling"), engine thread. */
	int64_t bp_max_ns;        /* WISP_BUSY_POLL_US; 0: never spin */
	int64_t bp_budget_ns;     /* the window now, adapted */
	int64_t bp_active_ns;     /* the engine last moved octets */
	_Atomic int64_t bp_budget_pub; /* bp_budget_ns, for the stats */
	int64_t bp_slept_ns;      /* it last blocked */
	int64_t bp_woke_after_ns; /* and woke that soon after (-1: late) */
	int64_t bp_hold_ns;       /* the next stay off after a busy host */
	int64_t bp_hold_until_ns; /* no spinning before this */
	int bp_late_score;        /* late passes, recent ones weighing most */
	bool bp_spinning;         /* be->peek runs in a busy poll */
	/* The connection the engine last received octets on: a busy poll
	 * reads its socket itself (glue_engine.c, bp_hot_recv). */
	struct glue_conn *bp_hot;
	struct {
		_Atomic uint64_t windows, spins, hits, misses, busy, grown;
	} bp_st;

	/* Zero-copy sends: WISP_SEND_ZC (0: off); whether the backend
	 * offers them (set by its init); counters (glue_engine_stats). */
	size_t zc_min;
	bool zc_avail;
	struct {
		_Atomic uint64_t sends, copied, fallback;
	} zc_st;

	/* Corking bursts (glue_engine.c "Corking bursts"): WISP_SEND_CORK
	 * (0: off); connections that posting threads listed since the
	 * engine last took them (a lock-free stack), those the engine took
	 * and still watches, when it looks next (0: no look due; engine
	 * thread), and whether that look is due (a posting thread that
	 * lists a connection wakes the engine only when it is not). */
	int64_t cork_gap_ns;
	/* WISP_POST_POLL in ns (0: off). */
	int64_t post_poll_ns;
	_Atomic(struct glue_conn *) cork_new;
	struct glue_conn *cork_list;
	int64_t cork_at;
	atomic_bool cork_ticking;

	/* Waiting for room (glue_engine.c): WISP_POLL_WAIT_US in ns (0:
	 * off). */
	int64_t poll_wait_ns;

	pthread_mutex_t cmd_lock;
	pthread_cond_t cmd_cond;
	struct glue_cmd *cmd_head, *cmd_tail;
};

extern const struct glue_backend glue_uring_backend;
extern const struct glue_backend glue_epoll_backend;

/* From the backends: c may be readable; a send's result (octets or
 * -errno). */
void glue_rx_ready(struct glue_conn *c);
void glue_tx_result(struct glue_conn *c, long res);

/* Zero-copy: a notification for c's send came; copied: the kernel said
 * it copied the octets after all. Counts it; the backend then reports
 * the held result through glue_tx_result. */
void glue_zc_notified(struct glue_conn *c, bool copied);

/* Let go of c->tx_lock taken outside the engine's pump (a posting
 * thread, the statistics): if the engine found it taken meanwhile and
 * left (tx_handoff), queue c so that it looks again. */
void glue_tx_unlock(struct glue_conn *c);

/* Drain the wake eventfd (epoll backend; io_uring reads it itself). */
void glue_wake_drain(struct glue_engine *e);

#endif /* WISP_GLUE_INTERNAL_H */
