/* SPDX-License-Identifier: MIT */
/*
 * rdmap_qp_internal.h - what the three parts of the RDMAP queue pair
 * share: the QP structure and the helpers one part offers the others.
 * Not part of the public interface (rdmap_qp.h); stays in rdmap/.
 *
 *   rdmap_qp.c     rings, life cycle, completions, taking a posted
 *                  receive, flush, error entry (ours or the peer's)
 *   rdmap_qp_tx.c  transmit: batching, framing, WR segmentation, Read
 *                  Responses, RTR / nudge / tick, Terminate out
 *   rdmap_qp_rx.c  receive: headers, placement, Read Requests in,
 *                  Terminate in
 */
#ifndef WISP_RDMAP_QP_INTERNAL_H
#define WISP_RDMAP_QP_INTERNAL_H

#include "rdmap_qp.h"
#include <stddef.h>

/*
 * Transmit batch and receive staging come in two sizes. A QP starts with
 * the small ones (pool objects beside the QP core), which carry an idle
 * or lightly used connection (the RTR, a few SENDs, Read Requests). A
 * batch that a small size cut short, or a staging read that filled the
 * small buffer, makes the QP switch to the large ones (one mapping each,
 * reused for as long as traffic flows): a thousand idle QPs then cost no
 * more than their structs, while a stream moves many FPDUs per system
 * call. Once the
 * connection has been quiet for a while its owner calls rdmap_qp_trim(),
 * which unmaps them (so their pages go back to the system at once, not
 * to a malloc arena) and the small ones carry on until traffic asks for
 * the large ones again.
 */
#define TX_BATCH        128       /* FPDUs per gathered send (large) */
#define TX_BATCH_BYTES  (1u << 20)
#define TX_BATCH_SEGS   128       /* ... and at most this many of the path's
				   * segments (rdmap_stream_cfg.emss) */
#define TX_IOV_MAX      1024      /* iovecs per gathered send (large) */
#define TX_COPY_MULPDU  2048      /* FPDUs up to this MULPDU are copied
				   * into the large batch's copy buffer */
#define TX_SMALL_FPDUS  4         /* the same, small */
#define TX_SMALL_IOV    64
#define HDR_MAX         (DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN)
#define STAGE_SIZE      (64 * 1024)
#define STAGE_SMALL     2048
#define SMALL_READ      64        /* staging read after a large FPDU */
#define RX_TAIL         1024      /* stage octets after a direct read */
#define DIRECT_MIN      8192      /* payload worth a recv of its own */
#define RTR_STAG        0x100     /* any non-zero STag: never checked */

/* Engine-side state of each SQ slot. */
struct sq_meta {
	bool done;                /* may complete (success or error) */
	uint8_t status;           /* enum rdmap_wc_status */
	uint16_t reads_out;       /* Read Requests sent, not yet answered */
	uint32_t vendor_err;
};

/* One FPDU of the transmit batch. hdr follows scr, whose last member
 * is the MPA length field: length and DDP/RDMAP header go to the kernel
 * as one iovec (mpa_fpdu_frame() merges adjacent pieces). */
struct tx_fpdu {
	struct mpa_fpdu_scratch scr;
	uint8_t hdr[HDR_MAX];
	size_t end;               /* batch offset just past this FPDU */
	int64_t wr_idx;           /* SQ index whose last FPDU this is, or -1 */
	int64_t wr_of;            /* SQ index whose payload it carries, or -1 */
	/* References on the MRs its payload (and that of the earlier FPDUs
	 * of the same message) is read from, dropped once it is sent: an MR
	 * is not released while a send may still read it. */
	struct rdmap_mr *put[RDMAP_MAX_SGE];
	uint8_t nput;
	bool close;               /* a Terminate: close the stream after it */
	uint8_t body[RDMAP_TERM_MAX_LEN]; /* a Terminate's message body */
};

_Static_assert(offsetof(struct tx_fpdu, hdr) ==
		       offsetof(struct tx_fpdu, scr) +
			       offsetof(struct mpa_fpdu_scratch, len) +
			       MPA_LEN_FIELD,
	       "the DDP header follows the MPA length field in memory");

/* The small transmit batch: its FPDUs and the iovecs that frame them. */
struct tx_small {
	struct tx_fpdu fp[TX_SMALL_FPDUS];
	struct iovec iov[TX_SMALL_IOV];
};

/* The work request being segmented. */
struct tx_cur {
	bool active;
	uint32_t idx;
	const struct rdmap_send_wr *wr;
	struct iovec src[RDMAP_MAX_SGE];  /* host addresses of the SGEs */
	struct rdmap_mr *mr[RDMAP_MAX_SGE];
	int nsrc;
	struct ddp_seg_iter it;
	uint8_t next_read;        /* READ: next SGE to request */
	uint64_t read_off;        /* READ: remote offset of that SGE */
};

/* A Read Request accepted from the peer (IRD queue). */
struct ird_entry {
	struct rdmap_read_req rr;
	struct rdmap_mr *src;     /* NULL for a zero-length Read */
	uint64_t sent;            /* octets of the response framed */
};

/* A Read Request we sent (ORD queue). */
struct ord_entry {
	int64_t wr_idx;           /* -1: the RTR */
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;
	uint64_t got;
};

/*
 * Where the receive side is within the current ULPDU. The MPA decoder
 * below handles length, markers, pad and CRC; these states cover the
 * ULPDU itself. HDR is 0, the state of a fresh QP.
 */
enum rx_state {
	RX_HDR,                   /* collecting the DDP + RDMAP header */
	RX_PAYLOAD,               /* header checked: payload goes where the
				   * opcode's row (rdmap_qp_rx.c) says */
	RX_DISCARD,               /* a fault was found: octets are dropped */
	RX__COUNT
};

struct rdmap_qp {
	struct rdmap_qp_cfg cfg;
	struct rdmap_stream_cfg s;
	_Atomic int state;        /* enum rdmap_qp_state */
	_Atomic uint32_t access;  /* RDMAP_ACC_REMOTE_*: cfg.access, then
				   * rdmap_qp_set_access() */

	struct rdmap_ring sq, rq;
	struct sq_meta *meta;
	uint32_t sq_txpos;        /* next SQ index to start */
	/* In ERROR: WRs from sq_hold_idx on are not completed yet, because
	 * octets of theirs are in the unsent part of the transmit batch
	 * (the kernel may still read them). Written under post_lock. */
	bool sq_hold;
	uint32_t sq_hold_idx;

	/* ---- transmit ---- */
	struct mpa_tx mtx;
	uint32_t tx_msn[RDMAP_QN__COUNT];
	struct tx_cur cur;
	/* Rings indexed by free-running counters: head and tail wrap at
	 * 2^32, so a ring has a power of two of slots (mask + 1 >= size)
	 * and its index is counter & mask; size is how many may be in it. */
	struct ird_entry *ird;
	uint32_t ird_size, ird_mask, ird_head, ird_tail;
	struct ord_entry *ord;
	uint32_t ord_size, ord_mask, ord_head, ord_tail;
	uint32_t ord_limit;
	/* ord_tail - ord_head, for rdmap_qp_reads_out() on any thread. */
	_Atomic uint32_t ord_out;
	bool rtr_pending;         /* initiator: RTR still to send */
	bool tx_hold;             /* responder: RTR not yet received */
	bool nudge_pending;       /* a zero-length Write is to go out */
	uint8_t nudges;           /* sent so far */
	int64_t nudge_at;         /* 0: not yet timed */
	bool term_pending;        /* a Terminate is to go out */
	bool term_sent;
	struct rdmap_terminate term;

	struct tx_fpdu *fp;       /* tx_small->fp or the large batch */
	struct iovec *iov;        /* tx_small->iov or the large batch's */
	int fp_cap, iov_cap;
	uint32_t b_max;           /* octets per gathered send at most */
	bool tx_grow;             /* a small batch was cut short */
	struct tx_fpdu *fp_big;   /* the large batch (one allocation with
				   * its iovecs and copy buffer: TX_BIG_BYTES
				   * + tx_buf_cap octets), or NULL */
	/* The large batch's copy buffer, on a path of small FPDUs (MULPDU
	 * at most TX_COPY_MULPDU, no markers), else NULL: each FPDU is
	 * framed whole into it, right after the one before, so the kernel
	 * gets the batch as one iovec (batch_copy in rdmap_qp_tx.c). */
	uint8_t *tx_buf;
	size_t tx_buf_cap, tx_buf_used;
	int nfp, fp_done;
	int niov, iov_cur;
	size_t iov_off;           /* octets of iov[iov_cur] already sent */
	size_t b_total, b_sent;

	/* ---- receive ---- */
	struct mpa_rx mrx;
	uint8_t *stage;           /* stage_small or the large stage */
	size_t stage_cap;
	size_t st_head, st_tail;
	size_t st_offer;          /* octets the last staging read offered */
	bool rx_grow;             /* a staging read filled the small stage */
	bool last_big;            /* one of the last two ULPDUs was large */
	bool prev_big;            /* the last ULPDU was large */
	bool rx_direct;           /* the last rx_want was a direct placement */
	bool rx_short;            /* a direct read stopped inside this payload */
	struct iovec dir[RDMAP_MAX_SGE];
	int ndir;
	size_t dir_len;           /* octets dir[] takes; then the stage */
	uint32_t rx_msn[RDMAP_QN__COUNT];
	bool rx_any;              /* at least one FPDU received */
	bool rx_open;             /* the last FPDU did not end its message
				   * (DDP L clear) */

	/* the current ULPDU */
	uint8_t hdr[HDR_MAX];
	enum rx_state rx_state;
	uint32_t hdr_have;
	struct rdmap_hdr h;
	uint32_t ulpdu_len;
	uint8_t *tptr;            /* tagged: host address of payload octet 0 */
	struct rdmap_mr *tmr;
	bool tmr_kept;            /* tmr is mr_keep's reference, not its own */
	/* The MR of the last tagged FPDU, its reference kept for the next
	 * FPDU (the segments of a message name the same STag) until the end
	 * of the rdmap_qp_rx_done() call: NULL between calls. */
	struct rdmap_mr *mr_keep;

	/* the receive buffer of the Send being placed */
	bool have_recv;
	struct rdmap_recv_wr recv;
	struct iovec rsge[RDMAP_MAX_SGE];
	struct rdmap_mr *rmr[RDMAP_MAX_SGE];
	int nrsge;
	uint64_t recv_bytes;      /* message octets placed so far */

	uint8_t term_buf[RDMAP_TERM_MAX_LEN];
	uint32_t term_have;

	/* ---- the small batch and stage (see TX_SMALL_FPDUS), each an
	 * object of its own: a page holds what a QP uses, not the room
	 * it may use (rdmap_qp_create) ---- */
	struct tx_small *tx_small;
	uint8_t *stage_small;     /* STAGE_SMALL octets */

	/* ---- counters (rdmap_qp_stats.c) ---- */
	/* cfg.stats, or without it the QP's own (from wisp_mem, freed
	 * with the QP) */
	struct rdmap_qp_stats *st;

	/* ---- receive, placement past the cache (rdmap_qp_rx.c,
	 * RX_NT_AFTER); last, so that the fields above keep their
	 * places in the cache lines ---- */
	uint64_t rx_msg_off;      /* payload octets of the message in
				   * progress before the current FPDU */
	bool rx_nt;               /* streaming stores not yet fenced */
};

/* ---- rdmap_qp.c: shared helpers ---- */

/* rdmap_qp_state() inside rdmap/: the same load, without a call on the
 * per-FPDU paths that ask it several times each. */
static inline enum rdmap_qp_state qp_state(const struct rdmap_qp *qp)
{
	return (enum rdmap_qp_state)atomic_load(&qp->state);
}

/* The large transmit batch (its FPDUs, then its iovecs) in octets. */
#define TX_BIG_BYTES (TX_BATCH * sizeof(struct tx_fpdu) + \
		      TX_IOV_MAX * sizeof(struct iovec))

/* A large buffer of len octets, zeroed, in a mapping of its own (NULL
 * without memory); and giving it back. */
void *qp_big_alloc(size_t len);
void qp_big_free(void *p, size_t len);

/* Drop the n references of mr[] and clear the slots. */
void qp_put_refs(struct rdmap_mr **mr, int n);

/* Complete finished WRs from the head of the SQ, in SQ order, stopping
 * at the hold (sq_hold). */
void qp_sq_advance(struct rdmap_qp *qp);

/* In ERROR, with the QP's lock and post_lock held: recompute the hold
 * from the unsent part of the batch and complete what it no longer
 * holds. */
void qp_sq_release(struct rdmap_qp *qp);

/* Complete the receive being placed (qp->recv) with status st; drops its
 * MR references and clears have_recv. */
void qp_complete_recv(struct rdmap_qp *qp, enum rdmap_wc_status st,
		      uint32_t len, bool solicited, bool inv,
		      uint32_t inv_stag);

/* Take the posted receive (own RQ or SRQ) for a new Send message into
 * qp->recv and translate its SGEs. Returns false if none is posted; true
 * with *st SUCCESS, or LOC_PROT_ERR for an SGE that fails its MR check
 * (the receive is then taken, have_recv set, its SGEs untranslated). */
bool qp_take_recv(struct rdmap_qp *qp, enum rdmap_wc_status *st);

/* Enter ERROR (once): flush every WR, the oldest unfinished SQ WR with
 * first_status (and term as vendor_err unless RDMAP_TERM_NONE), and
 * report term (a Terminate code or RDMAP_TERM_NONE) through ops->fatal.
 * Idempotent. */
void qp_enter_error(struct rdmap_qp *qp, int term,
		    enum rdmap_wc_status first_status);

/* A fault found locally: queue a Terminate for it (unless one was sent
 * or received already), quoting up to seg_avail octets of the faulting
 * segment seg (ULPDU length seg_len; seg may be NULL), and enter ERROR. */
void qp_fault(struct rdmap_qp *qp, struct rdmap_fault f,
	      const uint8_t *seg, size_t seg_avail, uint16_t seg_len);

/* The peer's Terminate with code term arrived (RDMAP_TERM_NONE if it
 * carried no readable code): enter ERROR, the oldest unfinished WR
 * failing as the code says, and never answer with a Terminate of our
 * own. */
void qp_peer_terminated(struct rdmap_qp *qp, int term);

/* The iovecs covering [off, off + len) of the scatter list src[0..nsrc);
 * writes at most nsrc of them to out and returns their number. */
int qp_slice(const struct iovec *src, int nsrc, uint64_t off,
	     uint64_t len, struct iovec *out);

/* ---- rdmap_qp_rx.c ---- */

/* The name of receive state s for debug logs ("HDR", ...); never NULL. */
const char *qp_rx_state_name(enum rx_state s);

/* ---- rdmap_qp_stats.c ---- */

/* Count one FPDU of opcode op sent (tx) or received: plen payload
 * octets, last: the DDP L bit. Core held. */
void qp_stat_fpdu(struct rdmap_qp *qp, bool tx, const struct rdmap_hdr *h,
		  uint32_t plen);

/* Count a Terminate with code term sent (tx) or received. Core held. */
void qp_stat_term(struct rdmap_qp *qp, bool tx, uint16_t term);

/* Count n WRs completed with FLUSH_ERR; any thread. */
void qp_stat_flushed(struct rdmap_qp *qp, uint64_t n);

#endif /* WISP_RDMAP_QP_INTERNAL_H */
