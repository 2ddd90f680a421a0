/* SPDX-License-Identifier: MIT */
/*
 * rdmap_qp.h - the RDMAP queue pair: RFC 5040 semantics over one MPA
 * stream, without I/O.
 *
 * The QP turns posted work requests into FPDUs and received FPDUs into
 * placement and completions. It never touches a socket: the engine in
 * tcp-glue/ asks it where to receive the next octets (rdmap_qp_rx_want),
 * tells it how many arrived (rdmap_qp_rx_done), asks it what to send
 * (rdmap_qp_tx_fill) and tells it how much was sent (rdmap_qp_tx_done).
 * Payload is received straight into registered memory or a posted
 * receive buffer and sent straight from the caller's buffers: the only
 * copies are the kernel's.
 *
 * Threads: the rings (SQ, RQ) are filled by application threads under
 * the caller's post lock and drained by the engine thread; everything
 * else is the engine thread's. Completions leave through ops->complete.
 */
#ifndef WISP_RDMAP_QP_H
#define WISP_RDMAP_QP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mpa.h"
#include "rdmap.h"
#include "rdmap_qp_stats.h"
#include "rdmap_stag.h"
#include "wisp_lock.h"

#define RDMAP_MAX_SGE        6
#define RDMAP_MAX_INLINE     80

enum rdmap_wr_opcode {
	RDMAP_WR_WRITE,
	RDMAP_WR_READ,
	RDMAP_WR_SEND,
	RDMAP_WR_SEND_INV,
	RDMAP_WR__COUNT
};

#define RDMAP_WR_SIGNALED    0x1
#define RDMAP_WR_SOLICITED   0x2
#define RDMAP_WR_INLINE      0x4
#define RDMAP_WR_FENCE       0x8

struct rdmap_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct rdmap_send_wr {
	uint64_t wr_id;
	uint8_t opcode;           /* enum rdmap_wr_opcode */
	uint8_t flags;            /* RDMAP_WR_* */
	uint8_t num_sge;
	uint32_t inv_stag;        /* SEND_INV */
	uint32_t rkey;            /* WRITE, READ */
	uint64_t remote_addr;
	uint64_t length;          /* sum of the SGE lengths */
	struct rdmap_sge sge[RDMAP_MAX_SGE];
	uint8_t inline_data[RDMAP_MAX_INLINE];
};

struct rdmap_recv_wr {
	uint64_t wr_id;
	uint8_t num_sge;
	uint64_t length;
	struct rdmap_sge sge[RDMAP_MAX_SGE];
};

/* Completion status; verbs-provider maps them onto enum ibv_wc_status. */
enum rdmap_wc_status {
	RDMAP_WC_SUCCESS,
	RDMAP_WC_LOC_LEN_ERR,
	RDMAP_WC_LOC_QP_OP_ERR,
	RDMAP_WC_LOC_PROT_ERR,
	RDMAP_WC_WR_FLUSH_ERR,
	RDMAP_WC_REM_INV_REQ_ERR,
	RDMAP_WC_REM_ACCESS_ERR,
	RDMAP_WC_REM_OP_ERR,
	RDMAP_WC_FATAL_ERR,
	RDMAP_WC_GENERAL_ERR,
};

enum rdmap_wc_opcode {
	RDMAP_WC_SEND,
	RDMAP_WC_RDMA_WRITE,
	RDMAP_WC_RDMA_READ,
	RDMAP_WC_RECV,
};

struct rdmap_cqe {
	uint64_t wr_id;
	uint8_t status;           /* enum rdmap_wc_status */
	uint8_t opcode;           /* enum rdmap_wc_opcode */
	bool recv;                /* from the receive side (RQ/SRQ) */
	bool solicited;           /* a Send with Solicited Event arrived */
	bool with_inv;            /* Send with Invalidate: inv_stag valid */
	uint32_t byte_len;
	uint32_t inv_stag;
	uint32_t vendor_err;      /* Terminate code, when one explains it */
};

/* A single-producer / single-consumer ring of fixed-size slots. */
struct rdmap_ring {
	void *slots;
	uint32_t size;            /* power of two */
	uint32_t slot_size;
	_Atomic uint32_t head;    /* consumer */
	_Atomic uint32_t tail;    /* producer */
};

int rdmap_ring_init(struct rdmap_ring *r, uint32_t min_entries,
		    uint32_t slot_size);
void rdmap_ring_fini(struct rdmap_ring *r);
static inline void *rdmap_ring_slot(const struct rdmap_ring *r, uint32_t i)
{
	return (char *)r->slots + (size_t)(i & (r->size - 1)) * r->slot_size;
}

/* The payload octets a posted WR sends from this end: its data, or none
 * for a READ, whose data comes from the peer (it sends a small request). */
static inline uint64_t rdmap_send_wr_out(const struct rdmap_send_wr *w)
{
	return w->opcode == RDMAP_WR_READ ? 0 : w->length;
}

/* How the QP reports what it did. Called on the engine thread. */
struct rdmap_qp_ops {
	/* A completion for the send (recv == false) or receive queue. */
	void (*complete)(void *arg, const struct rdmap_cqe *cqe);
	/* SRQ QPs: take the next posted receive, false if none. */
	bool (*srq_pop)(void *arg, struct rdmap_recv_wr *out);
	/* The QP entered ERROR (fatal: a Terminate was sent or received or
	 * the stream broke); term is the Terminate's code (layer << 12 |
	 * etype << 8 | code, 0x0000 being RDMAP's local catastrophic error,
	 * a real code) or RDMAP_TERM_NONE when no Terminate was sent or
	 * received. */
	void (*fatal)(void *arg, int term);
};

/* ops->fatal's term when the QP failed without a Terminate. */
#define RDMAP_TERM_NONE (-1)

enum rdmap_qp_state {
	RDMAP_QP_IDLE,            /* no stream yet */
	RDMAP_QP_RTS,             /* moving data */
	RDMAP_QP_CLOSING,         /* orderly close: draining what was sent */
	RDMAP_QP_ERROR,           /* flushed; nothing more moves */
};

struct rdmap_qp_cfg {
	const void *pd;
	struct rdmap_stag_table *stags;
	const struct rdmap_qp_ops *ops;
	void *ops_arg;
	bool use_srq;
	uint32_t sq_size, rq_size;    /* entries, >= 1 */
	/* The application's post lock, taken when the QP enters ERROR so
	 * that flushing and posting never race; may be NULL. */
	struct wisp_lock *post_lock;
	/* Where the QP counts (rdmap_qp_stats.h), e.g. a slot the owner
	 * publishes; NULL: in the QP itself. Must outlive the QP. */
	struct rdmap_qp_stats *stats;
	/* What the peer may do through this QP: RDMAP_ACC_REMOTE_WRITE
	 * (place RDMA Writes), RDMAP_ACC_REMOTE_READ (have Read Requests
	 * answered); other bits are ignored. The verbs qp_access_flags; the
	 * MR named must grant the right as well. Changed later with
	 * rdmap_qp_set_access(). */
	uint32_t access;
};

struct rdmap_stream_cfg {
	bool crc;
	uint16_t ird, ord;
	uint32_t mulpdu;          /* largest ULPDU to send */
	/* The path's effective MSS (0: not known). A gathered send carries
	 * at most as many octets as TX_BATCH_SEGS (128) such segments, and
	 * never more than 1 MiB: FPDUs larger than the MSS (mulpdu above
	 * it) then go out in sends no larger than those of FPDUs that fit
	 * one segment (docs/performance-log.md, "Large FPDUs at MTU 1500"). */
	uint32_t emss;
	/* This end is the MPA Responder: it sends nothing until the first
	 * FPDU has arrived (RFC 5044 7.1.2, whatever the RTR). */
	bool responder;
	enum rdmap_rtr { RDMAP_RTR_NONE, RDMAP_RTR_SEND_WRITE,
			 RDMAP_RTR_SEND_READ, RDMAP_RTR_EXPECT } rtr;
};

struct rdmap_qp;              /* opaque: rdmap_qp_internal.h */

/* Returns a QP in IDLE, or NULL (errno set). */
struct rdmap_qp *rdmap_qp_create(const struct rdmap_qp_cfg *cfg);
void rdmap_qp_destroy(struct rdmap_qp *qp);

/* The rings, filled by the application side (under its post lock). */
struct rdmap_ring *rdmap_qp_sq(struct rdmap_qp *qp);
struct rdmap_ring *rdmap_qp_rq(struct rdmap_qp *qp);
/* Any thread, without the QP's lock (a hint: it may change at once):
 * are Read Requests out that wait for their responses? */
bool rdmap_qp_reads_out(const struct rdmap_qp *qp);

/* Start moving data over a fresh stream. Returns 0 or -EINVAL. */
int rdmap_qp_start(struct rdmap_qp *qp, const struct rdmap_stream_cfg *s);

enum rdmap_qp_state rdmap_qp_state(const struct rdmap_qp *qp);

/* The QP's counters (cfg->stats, or its own); never NULL. Read each field
 * with a relaxed atomic load, from any thread. */
const struct rdmap_qp_stats *rdmap_qp_stats(const struct rdmap_qp *qp);

/*
 * Change what the peer may do through the QP (rdmap_qp_cfg.access), at
 * any time and from any thread: segments whose header is checked from
 * then on see the new rights (a WRITE already being placed finishes).
 */
void rdmap_qp_set_access(struct rdmap_qp *qp, uint32_t access);

/*
 * Engine side. rx_want fills up to cap (>= RDMAP_MAX_SGE + 1) iovecs
 * where the next received octets go and returns their number (>= 1).
 * rx_done reports n > 0 octets received there; it returns a set of
 * RDMAP_RX_CLOSE (the stream should now be closed: the QP failed with
 * nothing left to send, e.g. the peer's Terminate arrived) and
 * RDMAP_RX_SEND (tx_fill has something to send now), and
 * RDMAP_RX_PARTIAL while a message is partly received (octets of an
 * FPDU, or FPDUs of a message whose last segment has not come): more
 * of it is due.
 * tx_fill returns up to cap (>= 64) iovecs to send now, 0 if nothing;
 * tx_done reports n octets of them sent and returns 0, or 1 when the
 * stream should be closed once nothing is in flight.
 */
#define RDMAP_RX_CLOSE 0x1
#define RDMAP_RX_SEND  0x2
#define RDMAP_RX_PARTIAL 0x4
int rdmap_qp_rx_want(struct rdmap_qp *qp, struct iovec *iov, int cap);
/*
 * rx_want for a receive into the stage only, which its caller may make
 * without the lock that otherwise covers the core (the owner's core
 * lock) from rx_want to rx_done: the iovec it gives is the QP's staging
 * buffer, never application memory. Returns 0 when that is not the case
 * (the QP is not in RTS, or is inside an FPDU's payload, where a read
 * may go straight into place): the caller then takes its lock and calls
 * rdmap_qp_rx_want. Else as rdmap_qp_rx_want.
 *
 * What the caller must guarantee: receives on the QP are serialised
 * (one thread between this call and rx_done, and what one receive
 * writes visible to the next, as glue's rx_lock makes them), and so is
 * rdmap_qp_trim (it frees the large stage). Nothing else writes what
 * this reads: the stage and its offsets, the receive state and the MPA
 * decoder are written by rx_want / rx_done / trim only, and the QP's
 * state is atomic. Any other thread may meanwhile fail the QP (a flush,
 * rdmap_qp_revoke); rx_done, under the lock, then finds it failed and
 * drops the octets, which went to the stage.
 */
int rdmap_qp_rx_want_staged(struct rdmap_qp *qp, struct iovec *iov, int cap);
int rdmap_qp_rx_done(struct rdmap_qp *qp, size_t n);
int rdmap_qp_tx_fill(struct rdmap_qp *qp, struct iovec *iov, int cap);
int rdmap_qp_tx_done(struct rdmap_qp *qp, size_t n);

/* True if tx_fill may have something: posted WRs, responses, Terminate. */
bool rdmap_qp_tx_pending(const struct rdmap_qp *qp);

/*
 * The passing of time; now_ms is any monotonic clock in milliseconds.
 * Returns when the QP next wants this call (same clock), or -1 for never
 * again; *send is set when tx_fill has something because of it.
 *
 * Its one use: an RFC 6581 initiator whose RTR has no answer. A responder
 * may leave the RTR unread when it lands just after its MPA Reply (Linux
 * siw 6.1 does, docs/interop.md finding 1) and reads it only when more
 * data arrives. Until the first FPDU comes back, the QP sends a
 * zero-length RDMA Write (a valid WRITE RTR, RFC 6581 9.2; its STag is not
 * checked, RFC 5041 5.2) RDMAP_NUDGE_FIRST_MS after the first call, then
 * after twice as long each time, RDMAP_NUDGE_MAX times in all.
 */
#define RDMAP_NUDGE_FIRST_MS 50
#define RDMAP_NUDGE_MAX      6
int64_t rdmap_qp_tick(struct rdmap_qp *qp, int64_t now_ms, bool *send);

/*
 * The connection has been quiet: give back the large transmit batch and
 * receive stage a stream made the QP take, if nothing is in them (every
 * octet of the batch sent, no read into the stage under way: call it
 * between an rx_done and the next rx_want, and with no send in flight).
 * The QP goes on with its small ones and takes the large ones again when
 * traffic needs them. Returns true if a large buffer is still held
 * (ask again later), false if none is. Core held, as for tx_fill.
 */
bool rdmap_qp_trim(struct rdmap_qp *qp);

/*
 * The stream is gone (reason 0: orderly, else an errno) or the
 * application moved the QP to ERROR: enter ERROR and flush every
 * outstanding work request. Idempotent.
 */
void rdmap_qp_stream_ended(struct rdmap_qp *qp, int reason);

/*
 * The application closes the stream gracefully: enter ERROR and flush
 * every WR, except that the WRs with octets in the part of the transmit
 * batch the engine has not sent yet (and every later one) complete only
 * once tx_done has reported those octets or rdmap_qp_stream_ended() ran:
 * the kernel may read their memory until then. Idempotent.
 */
void rdmap_qp_shutdown(struct rdmap_qp *qp);

/*
 * mr was unpublished (rdmap_stag_unpublish) and still has references:
 * drop those of the receive side at once (a placement in flight is
 * diverted: its FPDU's remaining octets are discarded and the QP queues
 * a Terminate and enters ERROR) and say what the owner must do. Returns
 * a set of RDMAP_REVOKE_SEND (tx_fill has a Terminate) and
 * RDMAP_REVOKE_ABORT (the transmit side holds mr: a send may read it,
 * so the stream must be aborted; rdmap_qp_stream_ended() then drops the
 * references). Under the lock that serialises the QP; never between
 * rx_want and rx_done.
 */
#define RDMAP_REVOKE_SEND  0x1
#define RDMAP_REVOKE_ABORT 0x2
int rdmap_qp_revoke(struct rdmap_qp *qp, const struct rdmap_mr *mr);

/*
 * Flush what was posted while the QP had no engine (ERROR with no
 * stream, or never started): every queued WR completes with FLUSH_ERR.
 * Called by the application side with its post lock held.
 */
void rdmap_qp_flush_idle(struct rdmap_qp *qp);

/*
 * RFC 6581 9.1 and 9.2: an Initiator that cannot meet the Responder's ORD
 * or generate any RTR it names "MUST send a TERM message" (layer LLP, code
 * MPA_ERR_INSUFFICIENT_IRD or MPA_ERR_NO_MATCHING_RTR) before it closes,
 * as the first FPDU of the stream: untagged, queue 2, MSN 1, no header
 * quoted. Encodes that FPDU into buf (CRC as negotiated). Returns its
 * length or -errno.
 */
#define RDMAP_STARTUP_TERM_MAX \
	(MPA_LEN_FIELD + DDP_UNTAGGED_HDR_LEN + RDMAP_TERM_MAX_LEN + 3 + \
	 MPA_CRC_LEN)
int rdmap_startup_terminate(enum mpa_error err, bool crc, uint8_t *buf,
			    size_t cap);

#endif /* WISP_RDMAP_QP_H */
