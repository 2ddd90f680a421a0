/* SPDX-License-Identifier: MIT */
/*
 * glue_stats.h - what the engine counts per connection: sends and
 * receives, by the engine or by an application thread's shortcut, and
 * how long sends waited for the socket.
 *
 * Each field is written under the side's lock (tx_lock for tx_*, rx_lock
 * for rx_*), so an increment is a relaxed load and store: no system call,
 * no lock of its own. Readers use relaxed loads from any thread, or from
 * another process through shared memory. Append new counters at the end.
 */
#ifndef WISP_GLUE_STATS_H
#define WISP_GLUE_STATS_H

#include <stdatomic.h>
#include <stdint.h>

struct glue_conn;

struct glue_conn_stats {
	_Atomic uint64_t tx_sends;     /* sends the engine submitted */
	_Atomic uint64_t tx_direct;    /* sendmsg on a posting thread */
	_Atomic uint64_t tx_octets;    /* octets the kernel took */
	_Atomic uint64_t tx_short;     /* sends the kernel took in part */
	_Atomic uint64_t tx_eagain;    /* sends refused: socket buffer full */
	_Atomic uint64_t tx_wait_ns;   /* engine: submit to result, summed */
	_Atomic uint64_t tx_wait_max_ns; /* the longest of those */
	_Atomic uint64_t rx_recvs;     /* recvmsg calls that brought octets */
	_Atomic uint64_t rx_direct;    /* of those, on a polling thread */
	_Atomic uint64_t rx_octets;
	_Atomic uint64_t rx_empty;     /* recvmsg calls that found nothing */
	_Atomic uint64_t rx_busy_hits; /* readable, found by the engine
					* while busy polling (no wake-up) */
	/* Corked bursts (WISP_SEND_CORK, glue_engine.c "Corking bursts"),
	 * under tx_lock. */
	_Atomic uint64_t tx_corked;    /* posting thread sends with MSG_MORE */
	_Atomic uint64_t tx_held;      /* posts held for the next send */
	_Atomic uint64_t tx_pushes;    /* what a burst held back pushed:
					* a tail (TCP_NODELAY set again)
					* or held posts (sent), by any
					* thread */
	_Atomic uint64_t tx_push_engine; /* of those, by the engine's
					  * backstop */
	/* Waiting for the answer (WISP_POST_POLL, glue_engine.c). */
	_Atomic uint64_t rx_post_waits; /* a posting thread waited */
	_Atomic uint64_t rx_post_hits;  /* it received the whole answer */
	/* Waiting for room (WISP_POLL_WAIT_US, glue_engine.c "Waiting for
	 * room"), under tx_lock. */
	_Atomic uint64_t tx_poll_waits; /* a polling thread waited for room */
	_Atomic uint64_t tx_poll_woken; /* of those, room (or octets to
					 * read) came before the time ran out */
};

/*
 * Count c's events into st from now on (NULL: back to c's own counters);
 * what was counted so far moves there too. st must stay valid until
 * glue_conn_free(c). Any thread but the engine's (it takes both sides'
 * locks). The struct is all _Atomic uint64_t counters.
 */
void glue_conn_set_stats(struct glue_conn *c, struct glue_conn_stats *st);

/* The counters in use for c; never NULL. */
const struct glue_conn_stats *glue_conn_stats(const struct glue_conn *c);

#endif /* WISP_GLUE_STATS_H */
