/* SPDX-License-Identifier: MIT */
/*
 * rdmap_qp_stats.h - what a queue pair counts: messages and octets per
 * RDMAP opcode each way, FPDUs, CRC errors, Terminates with their codes,
 * flushes and RTR nudges.
 *
 * Counting costs no system call and no lock: each field is written by
 * whichever thread holds the QP's core (the owner serialises the engine
 * and the direct send / receive shortcuts with one lock), so an increment
 * is a relaxed load and store, and a reader on any thread, or in another
 * process through shared memory, reads each field with a relaxed load.
 * The one count that a thread without the core may write (a flush by a
 * posting thread on a QP that has no stream) uses an atomic add.
 *
 * The layout is a flat array of 64-bit counters named by the X-macro
 * list below, so a reader (wisp-stat) can name every field without
 * knowing the struct; append new counters at the end only.
 */
#ifndef WISP_RDMAP_QP_STATS_H
#define WISP_RDMAP_QP_STATS_H

#include <stdatomic.h>
#include <stdint.h>

/* Terminate codes are counted by (layer, error type): layers RDMAP, DDP
 * and LLP (RFC 5040 section 7.1), error types 0..3; anything else goes
 * to the last slot. */
#define RDMAP_STATS_TERM_KINDS   13
#define RDMAP_STATS_TERM_OTHER   12

/* The opcode-indexed arrays cover the 4-bit opcode field. */
#define RDMAP_STATS_OPS          16

struct rdmap_qp_stats {
	/* Indexed by enum rdmap_opcode. Messages count segments with the
	 * DDP L bit; octets are payload octets, except for a Read Request,
	 * whose octets are the size it asks for. Sent: counted as the
	 * segment is framed for the socket. Received: once its FPDU ended
	 * with good framing and CRC (a faulty one is not counted). */
	_Atomic uint64_t tx_msgs[RDMAP_STATS_OPS];
	_Atomic uint64_t tx_octets[RDMAP_STATS_OPS];
	_Atomic uint64_t rx_msgs[RDMAP_STATS_OPS];
	_Atomic uint64_t rx_octets[RDMAP_STATS_OPS];
	_Atomic uint64_t tx_fpdus;
	_Atomic uint64_t rx_fpdus;
	_Atomic uint64_t crc_errors;      /* FPDUs whose CRC32c was wrong */
	_Atomic uint64_t faults;          /* protocol faults found here */
	_Atomic uint64_t term_tx;         /* Terminates framed for sending */
	_Atomic uint64_t term_rx;         /* Terminates received */
	_Atomic uint64_t term_tx_last;    /* last code sent (layer/etype/code) */
	_Atomic uint64_t term_rx_last;    /* last code received */
	_Atomic uint64_t term_tx_kind[RDMAP_STATS_TERM_KINDS];
	_Atomic uint64_t term_rx_kind[RDMAP_STATS_TERM_KINDS];
	_Atomic uint64_t flushed;         /* WRs completed with FLUSH_ERR */
	_Atomic uint64_t rtr_sent;        /* RFC 6581 RTRs sent */
	_Atomic uint64_t rtr_nudges;      /* zero-length Writes after an RTR */
};

/* Add n to a counter that only the holder of the core writes. */
#define RDMAP_STAT_ADD(field, n)                                           \
	atomic_store_explicit(&(field),                                    \
		atomic_load_explicit(&(field), memory_order_relaxed) + (n), \
		memory_order_relaxed)

#define RDMAP_STAT_SET(field, v) \
	atomic_store_explicit(&(field), (v), memory_order_relaxed)

/* The slot of term_*_kind for a Terminate code. */
static inline unsigned int rdmap_stats_term_kind(uint16_t term)
{
	unsigned int layer = term >> 12, etype = (term >> 8) & 0xf;

	if (layer > 2 || etype > 3)
		return RDMAP_STATS_TERM_OTHER;
	return layer * 4 + etype;
}

#endif /* WISP_RDMAP_QP_STATS_H */
