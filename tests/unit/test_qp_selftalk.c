// SPDX-License-Identifier: MIT
/*
 * test_qp_selftalk.c - two RDMAP queue pair cores joined in memory.
 *
 * No sockets: what one core's rdmap_qp_tx_fill() offers is copied into a
 * byte pipe (and reported with rdmap_qp_tx_done(), in pieces as a short
 * send would), and the other core drains that pipe through
 * rdmap_qp_rx_want() / rdmap_qp_rx_done() in chunks of 1, 7 or 512
 * octets or as much as it asks for. Every body runs over the matrix
 *     CRC on / off  x  RTR none / WRITE RTR / READ RTR  x  4 chunkings
 * (liburing's FOR_ALL_TEST_CONFIGS; with an RTR side A is the RFC 6581
 * initiator, side B the responder that EXPECTs it).
 *
 * The traffic tests move SEND (with SE, with Invalidate), WRITE and READ,
 * segmented (MULPDU 128) or not, from and into several SGEs, zero-length
 * messages included, both ways at once, and compare every octet of every
 * buffer (guard zones around each one) and every completion field.
 *
 * The tamper table makes one side commit one protocol fault (a WR that
 * breaks a rule, a legitimate FPDU mutated between the cores, or a forged
 * FPDU) and checks the EXACT Terminate the other core sends, decoded from
 * its tx_fill output with the mpa/ddp/rdmap parsers, both QPs' state, the
 * fatal callbacks, every completion, and that no octet outside what was
 * legitimately placed changed.
 *
 * Written against the public headers only (rdmap_qp.h and below).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap_qp.h"
#include "qp_recv.h"
#include "test_util.h"

#define GUARD          64
#define GUARD_BYTE     0xa5
#define MAX_BUFS       24
#define MAX_CQE        64
#define MAX_WIRE       4096        /* FPDUs logged per direction */
#define HDR_LOG        (DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN)
#define PIPE_CAP       (1u << 20)
#define FRAME_CAP      (MPA_LEN_FIELD + MPA_ULPDU_MAX + 3 + MPA_CRC_LEN)
#define TX_CAP         64
#define SMALL_MULPDU   128         /* RFC 5044's minimum: segments a lot */
#define LARGE_MULPDU   8192        /* payloads large enough to be placed
				    * straight into their target */

enum { A = 0, B = 1 };

/* Protection domain identities (any distinct addresses). */
static const int pd_ids[3];
#define PD_A     ((const void *)&pd_ids[0])
#define PD_B     ((const void *)&pd_ids[1])
#define PD_OTHER ((const void *)&pd_ids[2])

/* ------------------------------------------------------------------ */
/* The configuration matrix                                           */
/* ------------------------------------------------------------------ */

enum rtr_mode { RTR_NONE, RTR_WRITE, RTR_READ, RTR__COUNT };

struct config {
	bool crc;
	enum rtr_mode rtr;
	size_t chunk;             /* octets per rx_done / tx_done; 0: all */
};

static const size_t chunk_sizes[] = { 1, 7, 512, 0 };
#define NCHUNK  (sizeof(chunk_sizes) / sizeof(chunk_sizes[0]))
#define NCONFIG ((int)(2 * RTR__COUNT * NCHUNK))

static struct config config_at(int i)
{
	return (struct config){
		.crc = i & 1,
		.rtr = (enum rtr_mode)((i >> 1) % RTR__COUNT),
		.chunk = chunk_sizes[(size_t)(i >> 1) / RTR__COUNT],
	};
}

static const char *config_str(const struct config *c)
{
	static const char *const rtr[] = { "none", "WRITE", "READ" };
	static char s[64];

	snprintf(s, sizeof(s), "[crc %s, rtr %s, chunk %zu]",
		 c->crc ? "on" : "off", rtr[c->rtr], c->chunk);
	return s;
}

/* Run body once per configuration (liburing's FOR_ALL_TEST_CONFIGS). */
#define FOR_ALL_TEST_CONFIGS(cfg) \
	for (int cfg##_i = 0; cfg##_i < NCONFIG; cfg##_i++) \
		for (struct config cfg##_v = config_at(cfg##_i), \
		     *cfg = &cfg##_v; cfg; cfg = NULL)

/* ------------------------------------------------------------------ */
/* Two cores and the pipes between them                               */
/* ------------------------------------------------------------------ */

/* A registered buffer between two guard zones, and what it must hold. */
struct buf {
	uint8_t *mem;             /* GUARD | len octets | GUARD */
	uint8_t *shadow;          /* the expected content of mem */
	size_t len;
	struct rdmap_mr mr;
};

/* One FPDU as the receiving core got it (after any tampering). */
struct wire_rec {
	uint16_t ulpdu_len;
	uint8_t hdr[HDR_LOG];     /* first octets of the ULPDU */
};

struct pair;

struct side {
	struct pair *p;
	int id;
	struct rdmap_stag_table t;
	struct rdmap_qp *qp;
	struct buf buf[MAX_BUFS];
	int nbuf;
	uint32_t sq_tail, rq_tail;

	struct rdmap_cqe scq[MAX_CQE], rcq[MAX_CQE];     /* got */
	int nscq, nrcq;
	struct rdmap_cqe xscq[MAX_CQE], xrcq[MAX_CQE];   /* expected */
	int nxscq, nxrcq;
	int nfatal;
	int fatal_term;           /* a Terminate code, or RDMAP_TERM_NONE */

	/* what tx_fill gives, cut into FPDUs */
	uint8_t *frame;
	size_t frame_have;
	struct mpa_rx obs;        /* an independent decoder of this output */
	uint8_t *ulpdu;           /* its scratch */
	int nterm;                /* Terminates sent */
	int after_term;           /* FPDUs sent after the first one */
	struct rdmap_hdr term_hdr;
	struct rdmap_terminate term;
	bool tx_close;            /* tx_done asked for the stream to close */

	/* the pipe to the peer */
	uint8_t *out;
	size_t out_len, out_rd;
	struct wire_rec wire[MAX_WIRE];
	int nwire;
	int rx_flags;             /* rx_done's results, OR-ed */
};

typedef void (*tamper_fn)(struct pair *p, int from, uint8_t *fpdu,
			  size_t wire_len);

struct pair {
	struct config cfg;
	struct side s[2];
	tamper_fn hook;           /* sees each FPDU a core sends */
	uint32_t hook_val;        /* what the hook writes */
	bool hooked;              /* the hook has struck */
	int bad_side, bad_idx;    /* the faulting FPDU: wire[bad_idx] of it */
	struct {                  /* ranges whose content is unspecified */
		struct buf *b;
		size_t off, n;
	} unspec[4];
	int nunspec;
};

static uint16_t be16(const uint8_t *b)
{
	return (uint16_t)(b[0] << 8 | b[1]);
}

static void put_be32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

static size_t fpdu_wire_len(uint16_t ulpdu_len)
{
	/* the CRC field is there with or without CRC (RFC 5044 4.1) */
	return MPA_LEN_FIELD + ulpdu_len + mpa_pad_len(ulpdu_len) +
	       MPA_CRC_LEN;
}

static void on_complete(void *arg, const struct rdmap_cqe *c)
{
	struct side *s = arg;

	if (c->recv) {
		cr_assert_lt(s->nrcq, MAX_CQE);
		s->rcq[s->nrcq++] = *c;
	} else {
		cr_assert_lt(s->nscq, MAX_CQE);
		s->scq[s->nscq++] = *c;
	}
}

static void on_fatal(void *arg, int term)
{
	struct side *s = arg;

	s->nfatal++;
	s->fatal_term = term;
}

static const struct rdmap_qp_ops ops = {
	.complete = on_complete,
	.fatal = on_fatal,
};

/* The bytes a core sent, one FPDU at a time: decode it as the sender
 * produced it, let the tamper hook at it, log it, pipe it. */
static void pipe_put(struct pair *p, int from, const uint8_t *f, size_t len)
{
	struct side *s = &p->s[from];
	struct wire_rec *w;
	uint16_t ul = be16(f);

	cr_assert_lt(s->nwire, MAX_WIRE);
	w = &s->wire[s->nwire++];
	memset(w, 0, sizeof(*w));
	w->ulpdu_len = ul;
	memcpy(w->hdr, f + MPA_LEN_FIELD, ul < HDR_LOG ? ul : HDR_LOG);
	cr_assert_leq(s->out_len + len, PIPE_CAP);
	memcpy(s->out + s->out_len, f, len);
	s->out_len += len;
}

static void fpdu_out(struct pair *p, int from, uint8_t *f, size_t len)
{
	struct side *s = &p->s[from];
	struct rdmap_fault fault;
	struct rdmap_hdr h;
	size_t ulen = 0;
	bool done = false;
	long used;
	int hl;

	used = mpa_rx_collect(&s->obs, f, len, s->ulpdu, MPA_ULPDU_MAX + 1,
			      &ulen, &done);
	cr_assert_eq(used, (long)len, "side %d sent an FPDU that does not "
		     "decode (%ld)", from, used);
	cr_assert(done);
	hl = rdmap_hdr_parse(s->ulpdu, ulen, &h, &fault);
	cr_assert_geq(hl, 0, "side %d sent a bad header (term %#x)", from,
		      fault.term);
	if (s->nterm)
		s->after_term++;
	if (h.opcode == RDMAP_OP_TERMINATE) {
		if (!s->nterm) {
			s->term_hdr = h;
			cr_assert_eq(rdmap_term_parse(s->ulpdu + hl,
						      ulen - (size_t)hl,
						      &s->term),
				     (int)(ulen - (size_t)hl),
				     "the Terminate body decodes");
		}
		s->nterm++;
	}
	if (p->hook)
		p->hook(p, from, f, len);
	pipe_put(p, from, f, len);
}

static void frame_add(struct pair *p, int from, const uint8_t *d, size_t n)
{
	struct side *s = &p->s[from];

	cr_assert_leq(s->frame_have + n, FRAME_CAP + PIPE_CAP);
	memcpy(s->frame + s->frame_have, d, n);
	s->frame_have += n;
	while (s->frame_have >= MPA_LEN_FIELD) {
		size_t w = fpdu_wire_len(be16(s->frame));

		if (s->frame_have < w)
			break;
		fpdu_out(p, from, s->frame, w);
		memmove(s->frame, s->frame + w, s->frame_have - w);
		s->frame_have -= w;
	}
}

/* Take what the core has to send; report it sent in pieces of chunk. */
static bool tx_side(struct pair *p, int i)
{
	struct side *s = &p->s[i];
	struct iovec iov[TX_CAP];
	bool any = false;
	int n, rounds = 0;

	while ((n = rdmap_qp_tx_fill(s->qp, iov, TX_CAP)) > 0) {
		size_t left = p->cfg.chunk ? p->cfg.chunk : SIZE_MAX, sent = 0;

		cr_assert_lt(++rounds, 1 << 22, "tx_fill never runs dry");
		for (int k = 0; k < n && left; k++) {
			size_t take = iov[k].iov_len < left ? iov[k].iov_len
							    : left;

			frame_add(p, i, iov[k].iov_base, take);
			sent += take;
			left -= take;
		}
		if (rdmap_qp_tx_done(s->qp, sent))
			s->tx_close = true;
		any = true;
	}
	cr_assert_eq(n, 0, "tx_fill failed: %d", n);
	return any;
}

/* Drain the peer's pipe into the core, chunk octets per rx_done. */
static bool rx_side(struct pair *p, int i)
{
	struct side *s = &p->s[i], *peer = &p->s[!i];
	bool any = false;

	while (peer->out_rd < peer->out_len) {
		struct iovec iov[RDMAP_MAX_SGE + 1];
		int n = rdmap_qp_rx_want(s->qp, iov, RDMAP_MAX_SGE + 1);
		size_t avail = peer->out_len - peer->out_rd, got = 0;
		size_t lim = p->cfg.chunk ? p->cfg.chunk : SIZE_MAX;

		cr_assert(n >= 1 && n <= RDMAP_MAX_SGE + 1, "rx_want: %d", n);
		/* as recvmsg() fills its iovecs: in order, the last one
		 * possibly in part */
		for (int k = 0; k < n && got < avail && got < lim; k++) {
			size_t take = iov[k].iov_len;

			if (take > avail - got)
				take = avail - got;
			if (take > lim - got)
				take = lim - got;
			memcpy(iov[k].iov_base, peer->out + peer->out_rd + got,
			       take);
			got += take;
			if (take < iov[k].iov_len)
				break;
		}
		cr_assert_gt(got, 0, "rx_want offered no room");
		peer->out_rd += got;
		s->rx_flags |= rdmap_qp_rx_done(s->qp, got);
		any = true;
	}
	return any;
}

/* Move octets both ways until neither core has anything to say. Each
 * round: both transmit, then both receive everything in flight. */
static void pump(struct pair *p)
{
	for (int round = 0; round < 10000; round++) {
		bool any = false;

		any |= tx_side(p, A);
		any |= tx_side(p, B);
		any |= rx_side(p, A);
		any |= rx_side(p, B);
		if (!any)
			return;
	}
	cr_assert_fail("the cores never fall silent");
}

static void side_init(struct pair *p, int id, const struct rdmap_stream_cfg *sc)
{
	struct side *s = &p->s[id];
	struct rdmap_qp_cfg qc = {
		.pd = id == A ? PD_A : PD_B, .ops = &ops, .ops_arg = s,
		.sq_size = 32, .rq_size = 16,
		.access = RDMAP_ACC_REMOTE_WRITE | RDMAP_ACC_REMOTE_READ,
	};

	s->p = p;
	s->id = id;
	cr_assert_eq(rdmap_stag_table_init(&s->t, 64), 0);
	qc.stags = &s->t;
	s->qp = rdmap_qp_create(&qc);
	cr_assert_not_null(s->qp);
	s->frame = malloc(FRAME_CAP + PIPE_CAP);
	s->ulpdu = malloc(MPA_ULPDU_MAX + 1);
	s->out = malloc(PIPE_CAP);
	cr_assert(s->frame && s->ulpdu && s->out);
	mpa_rx_init(&s->obs, p->cfg.crc, false, MPA_ULPDU_MAX);
	cr_assert_eq(rdmap_qp_start(s->qp, sc), 0);
}

/*
 * Two started cores; with an RTR the initiator's RTR and (READ RTR) the
 * responder's zero-length Read Response have crossed when this returns.
 */
static struct pair *pair_new(const struct config *cfg, uint32_t mulpdu,
			     uint16_t b_ird)
{
	static const int init_rtr[] = {
		[RTR_NONE] = RDMAP_RTR_NONE,
		[RTR_WRITE] = RDMAP_RTR_SEND_WRITE,
		[RTR_READ] = RDMAP_RTR_SEND_READ,
	};
	struct pair *p = calloc(1, sizeof(*p));
	struct rdmap_stream_cfg sa = { .crc = cfg->crc, .ird = 4, .ord = 4,
				       .mulpdu = mulpdu };
	struct rdmap_stream_cfg sb = sa;

	cr_assert_not_null(p);
	p->cfg = *cfg;
	sa.rtr = init_rtr[cfg->rtr];
	sb.rtr = cfg->rtr == RTR_NONE ? RDMAP_RTR_NONE : RDMAP_RTR_EXPECT;
	if (b_ird)
		sb.ird = b_ird;
	side_init(p, A, &sa);
	side_init(p, B, &sb);
	pump(p);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rdmap_qp_state(p->s[i].qp), RDMAP_QP_RTS);
		cr_assert_eq(p->s[i].nscq + p->s[i].nrcq + p->s[i].nfatal, 0);
	}
	/* RFC 6581 section 3: the RTR is the initiator's first FPDU */
	switch (cfg->rtr) {
	case RTR_NONE:
		cr_assert_eq(p->s[A].nwire + p->s[B].nwire, 0);
		break;
	case RTR_WRITE:       /* zero-length RDMA Write: T, L, DV 1; RV 1 */
		cr_assert_eq(p->s[A].nwire, 1);
		cr_assert_eq(p->s[A].wire[0].ulpdu_len, DDP_TAGGED_HDR_LEN);
		cr_assert_eq(p->s[A].wire[0].hdr[0], 0xc1);
		cr_assert_eq(p->s[A].wire[0].hdr[1], 0x40 | RDMAP_OP_WRITE);
		cr_assert_eq(p->s[B].nwire, 0);
		break;
	case RTR_READ:        /* zero-length Read Request and its answer */
		cr_assert_eq(p->s[A].nwire, 1);
		cr_assert_eq(p->s[A].wire[0].ulpdu_len,
			     DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN);
		cr_assert_eq(p->s[A].wire[0].hdr[1], 0x40 | RDMAP_OP_READ_REQ);
		cr_assert_eq(p->s[B].nwire, 1);
		cr_assert_eq(p->s[B].wire[0].ulpdu_len, DDP_TAGGED_HDR_LEN);
		cr_assert_eq(p->s[B].wire[0].hdr[1],
			     0x40 | RDMAP_OP_READ_RESP);
		break;
	default:
		cr_assert_fail("rtr mode");
	}
	return p;
}

/* Every buffer holds what it must, guard zones included. */
static void check_bufs(const struct pair *p)
{
	for (int i = 0; i < p->nunspec; i++)
		memcpy(p->unspec[i].b->shadow + GUARD + p->unspec[i].off,
		       p->unspec[i].b->mem + GUARD + p->unspec[i].off,
		       p->unspec[i].n);
	for (int i = 0; i < 2; i++) {
		const struct side *s = &p->s[i];

		for (int b = 0; b < s->nbuf; b++) {
			const struct buf *x = &s->buf[b];
			size_t n = x->len + 2 * GUARD;

			for (size_t k = 0; k < n; k++)
				if (x->mem[k] != x->shadow[k])
					cr_assert_fail("side %d buffer %d: "
						"octet %zd is %#x, not %#x "
						"%s", i, b,
						(ssize_t)k - GUARD, x->mem[k],
						x->shadow[k],
						config_str(&p->cfg));
		}
	}
}

/* The stream goes away (as the engine reports it); nothing may complete
 * twice. Then everything is torn down. */
static void pair_free(struct pair *p)
{
	int n[2][3];

	for (int i = 0; i < 2; i++) {
		n[i][0] = p->s[i].nscq;
		n[i][1] = p->s[i].nrcq;
		n[i][2] = p->s[i].nfatal;
	}
	for (int i = 0; i < 2; i++)
		rdmap_qp_stream_ended(p->s[i].qp, 0);
	for (int i = 0; i < 2; i++) {
		struct side *s = &p->s[i];

		cr_assert_eq(rdmap_qp_state(s->qp), RDMAP_QP_ERROR);
		cr_assert_eq(s->nscq, n[i][0], "no completion after the end");
		cr_assert_eq(s->nrcq, n[i][1], "no completion after the end");
		cr_assert_leq(s->nfatal - n[i][2], 1);
		rdmap_qp_destroy(s->qp);
		for (int b = 0; b < s->nbuf; b++) {
			/* waits for every reference: a leaked one hangs */
			rdmap_stag_remove(&s->t, &s->buf[b].mr);
			free(s->buf[b].mem);
			free(s->buf[b].shadow);
		}
		rdmap_stag_table_fini(&s->t);
		free(s->frame);
		free(s->ulpdu);
		free(s->out);
	}
	free(p);
}

static struct buf *mkbuf(struct pair *p, int side, size_t len, uint32_t acc,
			 const void *pd)
{
	struct side *s = &p->s[side];
	struct buf *b;

	cr_assert_lt(s->nbuf, MAX_BUFS);
	b = &s->buf[s->nbuf];
	b->len = len;
	b->mem = malloc(len + 2 * GUARD);
	b->shadow = malloc(len + 2 * GUARD);
	cr_assert(b->mem && b->shadow);
	memset(b->mem, GUARD_BYTE, len + 2 * GUARD);
	fill_pattern(b->mem + GUARD, len,
		     (uint32_t)(side * 1000 + s->nbuf * 17 + 1));
	memcpy(b->shadow, b->mem, len + 2 * GUARD);
	b->mr.addr = b->mem + GUARD;
	/* the TO peers name differs from the host address on purpose */
	b->mr.iova = 0x100000000ull * (uint64_t)(side + 1) +
		     0x100000ull * (uint64_t)s->nbuf + 0x40;
	b->mr.length = len;
	b->mr.access = acc;
	b->mr.pd = pd ? pd : (side == A ? PD_A : PD_B);
	cr_assert_eq(rdmap_stag_insert(&s->t, &b->mr), 0);
	s->nbuf++;
	return b;
}

#define ACC_ALL (RDMAP_ACC_LOCAL_WRITE | RDMAP_ACC_REMOTE_WRITE | \
		 RDMAP_ACC_REMOTE_READ)

static uint8_t *data_at(const struct buf *b, size_t off)
{
	return b->mem + GUARD + off;
}

/* n octets legitimately placed at off: the shadow follows. */
static void placed(struct buf *b, size_t off, const void *src, size_t n)
{
	cr_assert_leq(off + n, b->len);
	memcpy(b->shadow + GUARD + off, src, n);
}

/* Octets whose content will not be specified (a flushed receive
 * buffer): whatever is there then is accepted. Guards stay checked. */
static void unspecified(struct pair *p, struct buf *b, size_t off, size_t n)
{
	cr_assert_leq(off + n, b->len);
	cr_assert_lt(p->nunspec, 4);
	p->unspec[p->nunspec].b = b;
	p->unspec[p->nunspec].off = off;
	p->unspec[p->nunspec].n = n;
	p->nunspec++;
}

static struct rdmap_sge sge(const struct buf *b, size_t off, uint32_t len)
{
	return (struct rdmap_sge){ b->mr.iova + off, len, b->mr.stag };
}

static struct rdmap_send_wr *sq_slot(struct side *s)
{
	struct rdmap_ring *sq = rdmap_qp_sq(s->qp);
	struct rdmap_send_wr *w;

	cr_assert_lt(s->sq_tail - atomic_load(&sq->head), sq->size);
	w = rdmap_ring_slot(sq, s->sq_tail);
	memset(w, 0, sizeof(*w));
	w->flags = RDMAP_WR_SIGNALED;
	return w;
}

static void sq_post(struct side *s, struct rdmap_send_wr *w)
{
	if (!(w->flags & RDMAP_WR_INLINE)) {
		w->length = 0;
		for (int i = 0; i < w->num_sge; i++)
			w->length += w->sge[i].length;
	}
	s->sq_tail++;
	atomic_store_explicit(&rdmap_qp_sq(s->qp)->tail, s->sq_tail,
			      memory_order_release);
}

static void rq_post(struct side *s, uint64_t id, int n,
		    const struct rdmap_sge *sg)
{
	struct rdmap_ring *rq = rdmap_qp_rq(s->qp);

	cr_assert_lt(s->rq_tail - atomic_load(&rq->head), rq->size);
	qp_rq_post_at(s->qp, s->rq_tail++, id, sg, n);
}

/* ---- expected completions ---- */

static void want_sq(struct side *s, uint64_t id, enum rdmap_wc_status st,
		    enum rdmap_wc_opcode op, uint32_t len, uint16_t vendor)
{
	cr_assert_lt(s->nxscq, MAX_CQE);
	s->xscq[s->nxscq++] = (struct rdmap_cqe){
		.wr_id = id, .status = (uint8_t)st, .opcode = (uint8_t)op,
		.byte_len = len, .vendor_err = vendor,
	};
}

static void want_rq(struct side *s, uint64_t id, enum rdmap_wc_status st,
		    uint32_t len, bool se, bool inv, uint32_t inv_stag)
{
	cr_assert_lt(s->nxrcq, MAX_CQE);
	s->xrcq[s->nxrcq++] = (struct rdmap_cqe){
		.wr_id = id, .status = (uint8_t)st, .opcode = RDMAP_WC_RECV,
		.recv = true, .solicited = se, .with_inv = inv,
		.byte_len = len, .inv_stag = inv_stag,
	};
}

static void check_cq(const struct pair *p, int side, bool recv)
{
	const struct side *s = &p->s[side];
	const struct rdmap_cqe *got = recv ? s->rcq : s->scq;
	const struct rdmap_cqe *want = recv ? s->xrcq : s->xscq;
	int ngot = recv ? s->nrcq : s->nscq, nwant = recv ? s->nxrcq
							  : s->nxscq;
	const char *q = recv ? "RQ" : "SQ";

	for (int i = 0; i < ngot && i < nwant; i++) {
		const struct rdmap_cqe *g = &got[i], *w = &want[i];

		cr_assert_eq(g->wr_id, w->wr_id, "side %d %s cqe %d: wr_id "
			     "%#llx, want %#llx %s", side, q, i,
			     (unsigned long long)g->wr_id,
			     (unsigned long long)w->wr_id, config_str(&p->cfg));
		cr_assert_eq(g->status, w->status, "side %d %s wr %#llx: "
			     "status %u, want %u %s", side, q,
			     (unsigned long long)g->wr_id, g->status,
			     w->status, config_str(&p->cfg));
		cr_assert_eq(g->opcode, w->opcode, "side %d %s wr %#llx: "
			     "opcode %u, want %u", side, q,
			     (unsigned long long)g->wr_id, g->opcode,
			     w->opcode);
		cr_assert_eq(g->recv, w->recv);
		cr_assert_eq(g->vendor_err, w->vendor_err, "side %d %s wr "
			     "%#llx: vendor_err %#x, want %#x", side, q,
			     (unsigned long long)g->wr_id, g->vendor_err,
			     w->vendor_err);
		/* byte_len and the receive flags only mean something in a
		 * successful completion (as in verbs) */
		if (w->status != RDMAP_WC_SUCCESS)
			continue;
		cr_assert_eq(g->byte_len, w->byte_len, "side %d %s wr %#llx: "
			     "byte_len %u, want %u", side, q,
			     (unsigned long long)g->wr_id, g->byte_len,
			     w->byte_len);
		cr_assert_eq(g->solicited, w->solicited, "wr %#llx solicited",
			     (unsigned long long)g->wr_id);
		cr_assert_eq(g->with_inv, w->with_inv, "wr %#llx with_inv",
			     (unsigned long long)g->wr_id);
		if (w->with_inv)
			cr_assert_eq(g->inv_stag, w->inv_stag);
	}
	cr_assert_eq(ngot, nwant, "side %d %s: %d completions, want %d %s",
		     side, q, ngot, nwant, config_str(&p->cfg));
}

static void check_all_cqs(const struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		check_cq(p, i, false);
		check_cq(p, i, true);
	}
}

/* ------------------------------------------------------------------ */
/* Traffic                                                            */
/* ------------------------------------------------------------------ */

/* Gather n SGEs' octets (as the shadows say they are) into out. */
static size_t gather(const struct side *s, const struct rdmap_sge *sg, int n,
		     uint8_t *out)
{
	size_t len = 0;

	for (int i = 0; i < n; i++) {
		const struct buf *b = NULL;

		for (int k = 0; k < s->nbuf; k++)
			if (s->buf[k].mr.stag == sg[i].lkey)
				b = &s->buf[k];
		cr_assert_not_null(b);
		memcpy(out + len, b->shadow + GUARD + (sg[i].addr - b->mr.iova),
		       sg[i].length);
		len += sg[i].length;
	}
	return len;
}

/* Scatter msg over a receive's SGEs (all in buffer b) in the shadow. */
static void scatter(struct buf *b, const struct rdmap_sge *sg, int n,
		    const uint8_t *msg, size_t len)
{
	for (int i = 0; i < n && len; i++) {
		size_t take = sg[i].length < len ? sg[i].length : len;

		placed(b, sg[i].addr - b->mr.iova, msg, take);
		msg += take;
		len -= take;
	}
}

struct traffic {
	struct buf *src1, *src2, *src3, *sink;        /* on the sender */
	struct buf *dst, *rsrc, *recv, *inv1, *inv2;  /* on the receiver */
};

/* A Send of the SGEs sg[0..n) into a receive of the SGEs rs[0..nr). */
static void send_msg(struct pair *p, int from, struct traffic *t,
		     uint64_t id, uint8_t op, uint8_t flags, uint32_t inv,
		     const struct rdmap_sge *sg, int n,
		     const struct rdmap_sge *rs, int nr)
{
	struct side *s = &p->s[from], *r = &p->s[!from];
	struct rdmap_send_wr *w = sq_slot(s);
	static uint8_t msg[65536];
	size_t len;

	w->wr_id = id;
	w->opcode = op;
	w->flags |= flags;
	w->inv_stag = inv;
	w->num_sge = (uint8_t)n;
	if (n)
		memcpy(w->sge, sg, (size_t)n * sizeof(*sg));
	len = gather(s, sg, n, msg);
	sq_post(s, w);
	rq_post(r, id | 0x8000, nr, rs);
	scatter(t->recv, rs, nr, msg, len);
	want_sq(s, id, RDMAP_WC_SUCCESS, RDMAP_WC_SEND, (uint32_t)len, 0);
	want_rq(r, id | 0x8000, RDMAP_WC_SUCCESS, (uint32_t)len,
		flags & RDMAP_WR_SOLICITED, op == RDMAP_WR_SEND_INV, inv);
}

static void write_msg(struct pair *p, int from, struct traffic *t,
		      uint64_t id, uint8_t flags, size_t dst_off,
		      const struct rdmap_sge *sg, int n)
{
	struct side *s = &p->s[from];
	struct rdmap_send_wr *w = sq_slot(s);
	static uint8_t msg[65536];
	size_t len;

	w->wr_id = id;
	w->opcode = RDMAP_WR_WRITE;
	w->flags = flags;
	w->rkey = t->dst->mr.stag;
	w->remote_addr = t->dst->mr.iova + dst_off;
	w->num_sge = (uint8_t)n;
	if (n)
		memcpy(w->sge, sg, (size_t)n * sizeof(*sg));
	len = gather(s, sg, n, msg);
	sq_post(s, w);
	placed(t->dst, dst_off, msg, len);
	if (flags & RDMAP_WR_SIGNALED)
		want_sq(s, id, RDMAP_WC_SUCCESS, RDMAP_WC_RDMA_WRITE,
			(uint32_t)len, 0);
}

/* A READ of rsrc from src_off into the sink SGEs sg[0..n). */
static void read_msg(struct pair *p, int from, struct traffic *t,
		     uint64_t id, size_t src_off,
		     const struct rdmap_sge *sg, int n)
{
	struct side *s = &p->s[from];
	struct rdmap_send_wr *w = sq_slot(s);
	const uint8_t *src = t->rsrc->shadow + GUARD + src_off;
	size_t len = 0;

	w->wr_id = id;
	w->opcode = RDMAP_WR_READ;
	w->rkey = t->rsrc->mr.stag;
	w->remote_addr = t->rsrc->mr.iova + src_off;
	w->num_sge = (uint8_t)n;
	if (n)
		memcpy(w->sge, sg, (size_t)n * sizeof(*sg));
	sq_post(s, w);
	for (int i = 0; i < n; i++) {
		placed(t->sink, sg[i].addr - t->sink->mr.iova, src + len,
		       sg[i].length);
		len += sg[i].length;
	}
	want_sq(s, id, RDMAP_WC_SUCCESS, RDMAP_WC_RDMA_READ, (uint32_t)len,
		0);
}

/*
 * Post one side's script: every message kind, zero-length ones, several
 * SGEs each way, segmented and not, Send with Invalidate, a fenced Send,
 * an unsignaled Write, an inline Send.
 */
static void post_traffic(struct pair *p, int from, struct traffic *t)
{
	struct side *s = &p->s[from], *r = &p->s[!from];
	uint64_t id = (uint64_t)(from + 1) << 8;

	t->src1 = mkbuf(p, from, 4096, RDMAP_ACC_LOCAL_WRITE, NULL);
	t->src2 = mkbuf(p, from, 4096, 0, NULL);
	t->src3 = mkbuf(p, from, 12000, 0, NULL);
	t->sink = mkbuf(p, from, 9000, RDMAP_ACC_LOCAL_WRITE, NULL);
	t->dst = mkbuf(p, !from, 16384, RDMAP_ACC_LOCAL_WRITE |
		       RDMAP_ACC_REMOTE_WRITE, NULL);
	t->rsrc = mkbuf(p, !from, 8192, RDMAP_ACC_REMOTE_READ, NULL);
	t->recv = mkbuf(p, !from, 16384, RDMAP_ACC_LOCAL_WRITE, NULL);
	t->inv1 = mkbuf(p, !from, 64, ACC_ALL, NULL);
	t->inv2 = mkbuf(p, !from, 64, ACC_ALL, NULL);
	/* Stand-ins for what a peer may invalidate (a fast-registered MR,
	 * a type 2 window: rdmap_stag_remote_invalidate) */
	t->inv1->mr.remote_inv = true;
	t->inv2->mr.remote_inv = true;

	/* 1: zero-length Send */
	{
		struct rdmap_sge rs[] = { sge(t->recv, 0, 64) };

		send_msg(p, from, t, id + 1, RDMAP_WR_SEND, 0, 0, NULL, 0,
			 rs, 1);
	}
	/* 2: one octet with Solicited Event */
	{
		struct rdmap_sge sg[] = { sge(t->src1, 5, 1) };
		struct rdmap_sge rs[] = { sge(t->recv, 64, 64) };

		send_msg(p, from, t, id + 2, RDMAP_WR_SEND, RDMAP_WR_SOLICITED,
			 0, sg, 1, rs, 1);
	}
	/* 3: three SGEs gathered, scattered over three */
	{
		struct rdmap_sge sg[] = { sge(t->src1, 10, 100),
					  sge(t->src2, 7, 1000),
					  sge(t->src1, 3000, 33) };
		struct rdmap_sge rs[] = { sge(t->recv, 200, 500),
					  sge(t->recv, 1000, 500),
					  sge(t->recv, 2000, 1000) };

		send_msg(p, from, t, id + 3, RDMAP_WR_SEND, 0, 0, sg, 3, rs,
			 3);
	}
	/* 4, 5: Send with Invalidate, and with SE and Invalidate */
	{
		struct rdmap_sge sg[] = { sge(t->src2, 100, 50) };
		struct rdmap_sge rs[] = { sge(t->recv, 3000, 100) };
		struct rdmap_sge sg2[] = { sge(t->src1, 0, 7) };
		struct rdmap_sge rs2[] = { sge(t->recv, 3100, 100) };

		send_msg(p, from, t, id + 4, RDMAP_WR_SEND_INV, 0,
			 t->inv1->mr.stag, sg, 1, rs, 1);
		send_msg(p, from, t, id + 5, RDMAP_WR_SEND_INV,
			 RDMAP_WR_SOLICITED, t->inv2->mr.stag, sg2, 1, rs2, 1);
	}
	/* 6: zero-length Write (its STag and TO are not checked) */
	write_msg(p, from, t, id + 6, RDMAP_WR_SIGNALED, 16384, NULL, 0);
	/* 7: Write of three SGEs; 8: unsignaled, no completion */
	{
		struct rdmap_sge sg[] = { sge(t->src1, 0, 700),
					  sge(t->src2, 1000, 1300),
					  sge(t->src1, 4000, 96) };
		struct rdmap_sge sg2[] = { sge(t->src2, 0, 300) };

		write_msg(p, from, t, id + 7, RDMAP_WR_SIGNALED, 5, sg, 3);
		write_msg(p, from, t, id + 8, 0, 3000, sg2, 1);
	}
	/* 9: READ into two sink SGEs; 10: zero-length READ */
	{
		struct rdmap_sge sg[] = { sge(t->sink, 0, 1500),
					  sge(t->sink, 4000, 700) };
		struct rdmap_sge sg0[] = { sge(t->sink, 8000, 0) };

		read_msg(p, from, t, id + 9, 11, sg, 2);
		read_msg(p, from, t, id + 10, 0, sg0, 1);
	}
	/* 11: inline Send */
	{
		struct rdmap_send_wr *w = sq_slot(s);
		struct rdmap_sge rs[] = { sge(t->recv, 3200, 100) };

		w->wr_id = id + 11;
		w->opcode = RDMAP_WR_SEND;
		w->flags |= RDMAP_WR_INLINE;
		fill_pattern(w->inline_data, 20, (uint32_t)(id + 11));
		w->length = 20;
		sq_post(s, w);
		rq_post(r, id + 11 + 0x8000, 1, rs);
		placed(t->recv, 3200, w->inline_data, 20);
		want_sq(s, id + 11, RDMAP_WC_SUCCESS, RDMAP_WC_SEND, 20, 0);
		want_rq(r, id + 11 + 0x8000, RDMAP_WC_SUCCESS, 20, false,
			false, 0);
	}
	/* 12: a long Send into exactly its size; 13: a long Write */
	{
		struct rdmap_sge sg[] = { sge(t->src3, 0, 9000) };
		struct rdmap_sge rs[] = { sge(t->recv, 4000, 9000) };
		struct rdmap_sge sg2[] = { sge(t->src3, 0, 12000) };

		send_msg(p, from, t, id + 12, RDMAP_WR_SEND, 0, 0, sg, 1, rs,
			 1);
		write_msg(p, from, t, id + 13, RDMAP_WR_SIGNALED, 4096, sg2,
			  1);
	}
	/* 14: a fenced Send waits for the READs before it */
	{
		struct rdmap_sge sg[] = { sge(t->src1, 0, 4) };
		struct rdmap_sge rs[] = { sge(t->recv, 13000, 4) };

		send_msg(p, from, t, id + 14, RDMAP_WR_SEND, RDMAP_WR_FENCE, 0,
			 sg, 1, rs, 1);
	}
}

static void traffic_both_ways(uint32_t mulpdu)
{
	FOR_ALL_TEST_CONFIGS(cfg) {
		struct pair *p = pair_new(cfg, mulpdu, 0);
		struct traffic t[2];

		post_traffic(p, A, &t[A]);
		post_traffic(p, B, &t[B]);
		pump(p);
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(rdmap_qp_state(p->s[i].qp), RDMAP_QP_RTS,
				     "side %d %s", i, config_str(cfg));
			cr_assert_eq(p->s[i].nfatal, 0);
			cr_assert_eq(p->s[i].nterm, 0);
			/* RFC 5040 5.4: the named STags are invalid now,
			 * the others untouched */
			cr_assert(!atomic_load(&t[i].inv1->mr.valid));
			cr_assert(!atomic_load(&t[i].inv2->mr.valid));
			cr_assert(atomic_load(&t[i].dst->mr.valid));
		}
		check_all_cqs(p);
		check_bufs(p);
		pair_free(p);
	}
}

Test(selftalk, traffic_segmented, .timeout = 120)
{
	traffic_both_ways(SMALL_MULPDU);
	cr_log_info("%d configurations: 14 WRs each way (SEND, SE, INV, "
		    "SE+INV, inline, fenced, WRITE, unsignaled WRITE, READ, "
		    "zero-length ones) at MULPDU %d, octets and completions "
		    "compared", NCONFIG, SMALL_MULPDU);
}

Test(selftalk, traffic_direct_placement, .timeout = 120)
{
	traffic_both_ways(LARGE_MULPDU);
	cr_log_info("%d configurations: the same at MULPDU %d", NCONFIG,
		    LARGE_MULPDU);
}

/*
 * rdmap_qp_trim gives back the large batch and stage only when nothing
 * is in them: not while a batch is partly sent (the kernel may still read
 * it); afterwards the QP goes on with its small ones and takes the large
 * ones again, and every octet and completion of a second round is right.
 */
static void trim_side(struct pair *p, int i)
{
	struct side *s = &p->s[i];
	struct iovec iov[TX_CAP];
	int n = rdmap_qp_tx_fill(s->qp, iov, TX_CAP);

	/* Fourteen WRs queued: the large batch, sent in part (one octet). */
	cr_assert_gt(n, 0);
	frame_add(p, i, iov[0].iov_base, 1);
	cr_assert_eq(rdmap_qp_tx_done(s->qp, 1), 0);
	cr_assert(rdmap_qp_trim(s->qp),
		  "side %d: a batch sent in part was given back", i);
}

Test(selftalk, trim_between_rounds, .timeout = 120)
{
	FOR_ALL_TEST_CONFIGS(cfg) {
		struct pair *p = pair_new(cfg, SMALL_MULPDU, 0);
		struct traffic t[4];

		for (int round = 0; round < 2; round++) {
			post_traffic(p, A, &t[2 * round + A]);
			post_traffic(p, B, &t[2 * round + B]);
			trim_side(p, A);
			trim_side(p, B);
			pump(p);
			for (int i = 0; i < 2; i++) {
				cr_assert_eq(rdmap_qp_state(p->s[i].qp),
					     RDMAP_QP_RTS, "side %d %s", i,
					     config_str(cfg));
				cr_assert(!rdmap_qp_trim(p->s[i].qp),
					  "side %d round %d: a large buffer "
					  "kept %s", i, round,
					  config_str(cfg));
			}
		}
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(p->s[i].nfatal, 0);
			cr_assert_eq(p->s[i].nterm, 0);
		}
		check_all_cqs(p);
		check_bufs(p);
		pair_free(p);
	}
	cr_log_info("%d configurations: two rounds of 14 WRs each way, the "
		    "large buffers given back between them", NCONFIG);
}

/* ------------------------------------------------------------------ */
/* Tamper table                                                       */
/* ------------------------------------------------------------------ */

#define ULPDU(f)        ((f) + MPA_LEN_FIELD)
#define WIT_READ(side)  (0x51u + 0x100u * (unsigned)(side))
#define WIT_SEND(side)  (0x52u + 0x100u * (unsigned)(side))
#define RECV_ID(side)   (0xa0u + 0x10u * (unsigned)(side))

static uint32_t be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
	       (uint32_t)b[2] << 8 | b[3];
}

/* Recompute the CRC of an FPDU whose header was changed in flight, so
 * that the change, not the CRC, is what the receiver meets. */
static void fix_crc(const struct pair *p, uint8_t *f)
{
	size_t n = MPA_LEN_FIELD + be16(f) + mpa_pad_len(be16(f));

	if (p->cfg.crc)
		mpa_crc_put(f + n, mpa_crc32c(f, n));
}

/* A forged FPDU, put on the wire from side from, between two FPDUs. */
static void inject(struct pair *p, int from, const uint8_t *ulpdu, size_t len)
{
	static uint8_t f[FRAME_CAP];
	struct mpa_tx tx;
	int n;

	cr_assert_eq(p->s[from].frame_have, 0, "at an FPDU boundary");
	mpa_tx_init(&tx, p->cfg.crc, false);
	n = mpa_fpdu_encode(&tx, ulpdu, len, f, sizeof(f));
	cr_assert_gt(n, 0);
	pipe_put(p, from, f, (size_t)n);
}

/* The k-th FPDU side from sends from now on is the one that faults. */
static void mark_bad(struct pair *p, int from, int k)
{
	p->bad_side = from;
	p->bad_idx = p->s[from].nwire + k;
}

/* The hooks strike once: at the first FPDU with opcode op from side A
 * (from side B for Read Responses), with a payload if asked. */
static bool strike(struct pair *p, int from, const uint8_t *f, uint8_t op)
{
	int want_from = op == RDMAP_OP_READ_RESP ? B : A;

	if (p->hooked || from != want_from ||
	    (ULPDU(f)[1] & RDMAP_CTRL_OP_MASK) != op)
		return false;
	if (op == RDMAP_OP_READ_RESP && be16(f) <= DDP_TAGGED_HDR_LEN)
		return false;
	p->hooked = true;
	mark_bad(p, from, 0);
	return true;
}

/* MSN (untagged header octets 10..13) moved by hook_val. */
static void hook_msn(struct pair *p, int from, uint8_t *f, size_t len)
{
	(void)len;
	if (!strike(p, from, f, RDMAP_OP_SEND))
		return;
	put_be32(ULPDU(f) + 10, be32(ULPDU(f) + 10) + p->hook_val);
	fix_crc(p, f);
}

/* RDMAP opcode of a Send replaced by hook_val (RV kept). */
static void hook_opcode(struct pair *p, int from, uint8_t *f, size_t len)
{
	(void)len;
	if (!strike(p, from, f, RDMAP_OP_SEND))
		return;
	ULPDU(f)[1] = (uint8_t)((ULPDU(f)[1] & ~RDMAP_CTRL_OP_MASK) |
				p->hook_val);
	fix_crc(p, f);
}

/* DDP version 2 in a Send (hook_val RDMAP_OP_SEND) or a Write. */
static void hook_dv(struct pair *p, int from, uint8_t *f, size_t len)
{
	(void)len;
	if (!strike(p, from, f, (uint8_t)p->hook_val))
		return;
	ULPDU(f)[0] = (uint8_t)((ULPDU(f)[0] & ~DDP_CTRL_DV_MASK) | 2);
	fix_crc(p, f);
}

/* RDMAP version 2 in a Send. */
static void hook_rv(struct pair *p, int from, uint8_t *f, size_t len)
{
	(void)len;
	if (!strike(p, from, f, RDMAP_OP_SEND))
		return;
	ULPDU(f)[1] = (uint8_t)((ULPDU(f)[1] & ~RDMAP_CTRL_RV_MASK) |
				2 << RDMAP_CTRL_RV_SHIFT);
	fix_crc(p, f);
}

/* One payload bit of a Send flipped, CRC left alone. */
static void hook_flip(struct pair *p, int from, uint8_t *f, size_t len)
{
	(void)len;
	if (!strike(p, from, f, RDMAP_OP_SEND))
		return;
	ULPDU(f)[DDP_UNTAGGED_HDR_LEN + 3] ^= 0x10;
}

/* A Read Response's STag (tagged header octets 2..5) replaced. */
static void hook_resp_stag(struct pair *p, int from, uint8_t *f, size_t len)
{
	(void)len;
	if (!strike(p, from, f, RDMAP_OP_READ_RESP))
		return;
	put_be32(ULPDU(f) + 2, p->hook_val);
	fix_crc(p, f);
}

/*
 * What a core reports for its oldest unfinished WR when it enters ERROR
 * because of Terminate code term: having received it (the peer's
 * verdict: a remote protection error, RFC 5040 section 7, is an access
 * error, any other remote fault an operation error, a catastrophic or
 * LLP one fatal), or having detected the fault and sent it itself.
 */
static enum rdmap_wc_status peer_status(uint16_t term)
{
	if (rdmap_term_layer(term) == RDMAP_LAYER_LLP ||
	    rdmap_term_etype(term) == 0)
		return RDMAP_WC_FATAL_ERR;
	return rdmap_term_etype(term) == 1 ? RDMAP_WC_REM_ACCESS_ERR
					   : RDMAP_WC_REM_OP_ERR;
}

static enum rdmap_wc_status local_status(uint16_t term)
{
	return rdmap_term_layer(term) == RDMAP_LAYER_LLP ? RDMAP_WC_FATAL_ERR
							 : RDMAP_WC_LOC_QP_OP_ERR;
}

/*
 * Witness WRs of side: a 16-octet READ of the peer's memory and a fenced
 * inline Send behind it, both unfinished when the fault happens.
 */
static void witness(struct pair *p, int side)
{
	struct side *s = &p->s[side];
	struct buf *sink = mkbuf(p, side, 64, RDMAP_ACC_LOCAL_WRITE, NULL);
	struct buf *src = mkbuf(p, !side, 64, RDMAP_ACC_REMOTE_READ, NULL);
	struct rdmap_send_wr *w = sq_slot(s);

	w->wr_id = WIT_READ(side);
	w->opcode = RDMAP_WR_READ;
	w->rkey = src->mr.stag;
	w->remote_addr = src->mr.iova;
	w->num_sge = 1;
	w->sge[0] = sge(sink, 0, 16);
	sq_post(s, w);
	w = sq_slot(s);
	w->wr_id = WIT_SEND(side);
	w->opcode = RDMAP_WR_SEND;
	w->flags |= RDMAP_WR_INLINE | RDMAP_WR_FENCE;
	w->length = 4;
	sq_post(s, w);
}

/* The witness READ gets st (flushes carry no vendor_err), the Send
 * behind it is flushed. */
static void want_witness(struct pair *p, int side, enum rdmap_wc_status st,
			 uint16_t term)
{
	want_sq(&p->s[side], WIT_READ(side), st, RDMAP_WC_RDMA_READ, 16,
		st == RDMAP_WC_WR_FLUSH_ERR ? 0 : term);
	want_sq(&p->s[side], WIT_SEND(side), RDMAP_WC_WR_FLUSH_ERR,
		RDMAP_WC_SEND, 4, 0);
}

/* A receive on side into a fresh buffer; returns the buffer. */
static struct buf *post_recv(struct pair *p, int side, uint64_t id,
			     uint32_t len)
{
	struct buf *b = mkbuf(p, side, 256, RDMAP_ACC_LOCAL_WRITE, NULL);
	struct rdmap_sge s = sge(b, 0, len);

	rq_post(&p->s[side], id, 1, &s);
	return b;
}

static void want_recv_flush(struct pair *p, int side, uint64_t id)
{
	want_rq(&p->s[side], id, RDMAP_WC_WR_FLUSH_ERR, 0, false, false, 0);
}

static void a_rdma(struct pair *p, uint64_t id, uint8_t op, struct buf *loc,
		   uint32_t len, uint32_t rkey, uint64_t to)
{
	struct rdmap_send_wr *w = sq_slot(&p->s[A]);

	w->wr_id = id;
	w->opcode = op;
	w->rkey = rkey;
	w->remote_addr = to;
	w->num_sge = 1;
	w->sge[0] = sge(loc, 0, len);
	sq_post(&p->s[A], w);
}

/* An inline Send of len octets (pattern seeded by id); returns them. */
static const uint8_t *a_send_inline(struct pair *p, uint64_t id, uint8_t op,
				    uint32_t inv, uint32_t len)
{
	struct rdmap_send_wr *w = sq_slot(&p->s[A]);

	w->wr_id = id;
	w->opcode = op;
	w->flags |= RDMAP_WR_INLINE;
	w->inv_stag = inv;
	w->length = len;
	fill_pattern(w->inline_data, len, (uint32_t)id + 77);
	sq_post(&p->s[A], w);
	return w->inline_data;
}

struct row {
	const char *name;
	void (*setup)(struct pair *p, const struct row *r);
	int detector;             /* the core that sends the Terminate */
	uint16_t term;            /* layer << 12 | etype << 8 | code */
	bool rdma_hdr;            /* R: the Read Request header is quoted */
	bool crc_only;            /* needs CRC on */
	uint16_t b_ird;           /* B's IRD, 0 for 4 */
	uint32_t hook_val;
};

/*
 * The common shape of a faulty request from A: the offending WRs, then
 * A's witnesses (the READ is A's oldest unfinished WR unless the
 * offending WR is one itself) and B's (B's READ is its oldest).
 */
static void requester_fault_tail(struct pair *p, const struct row *r,
				 bool a_has_unfinished)
{
	witness(p, A);
	witness(p, B);
	want_witness(p, A, a_has_unfinished ? RDMAP_WC_WR_FLUSH_ERR
					    : peer_status(r->term), r->term);
	want_witness(p, B, local_status(r->term), r->term);
}

/* --- tagged placement: RDMA Write --- */

static void write_to(struct pair *p, const struct row *r, uint32_t acc,
		     const void *pd, uint32_t stag_xor)
{
	struct buf *src = mkbuf(p, A, 512, 0, NULL);
	struct buf *dst = mkbuf(p, B, 256, acc, pd);

	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	mark_bad(p, A, 0);
	a_rdma(p, 1, RDMAP_WR_WRITE, src, 64, dst->mr.stag ^ stag_xor,
	       dst->mr.iova);
	want_sq(&p->s[A], 1, RDMAP_WC_SUCCESS, RDMAP_WC_RDMA_WRITE, 64, 0);
	requester_fault_tail(p, r, false);
}

static void row_write_oob(struct pair *p, const struct row *r)
{
	struct buf *src = mkbuf(p, A, 512, 0, NULL);
	struct buf *dst = mkbuf(p, B, 256, ACC_ALL, NULL);

	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	/* 300 octets at TO base + 56 of a 256-octet MR, MULPDU 128: the
	 * first segment (114 octets) fits and is placed, the second runs
	 * past the end and faults */
	mark_bad(p, A, 1);
	a_rdma(p, 1, RDMAP_WR_WRITE, src, 300, dst->mr.stag,
	       dst->mr.iova + 56);
	placed(dst, 56, data_at(src, 0), SMALL_MULPDU - DDP_TAGGED_HDR_LEN);
	want_sq(&p->s[A], 1, RDMAP_WC_SUCCESS, RDMAP_WC_RDMA_WRITE, 300, 0);
	requester_fault_tail(p, r, false);
}

static void row_write_no_rights(struct pair *p, const struct row *r)
{
	write_to(p, r, RDMAP_ACC_LOCAL_WRITE | RDMAP_ACC_REMOTE_READ, NULL, 0);
}

static void row_write_other_pd(struct pair *p, const struct row *r)
{
	write_to(p, r, ACC_ALL, PD_OTHER, 0);
}

static void row_write_bad_key(struct pair *p, const struct row *r)
{
	/* right index, wrong 8-bit key */
	write_to(p, r, ACC_ALL, NULL, 0x01);
}

static void row_write_invalidated(struct pair *p, const struct row *r)
{
	struct buf *src = mkbuf(p, A, 512, 0, NULL);
	struct buf *dst = mkbuf(p, B, 256, ACC_ALL, NULL);
	struct buf *rb = post_recv(p, B, RECV_ID(B), 64);
	const uint8_t *msg;

	dst->mr.remote_inv = true;  /* as a fast-registered MR would be */
	post_recv(p, B, RECV_ID(B) + 1, 64);
	/* a Send with Invalidate kills dst's STag (RFC 5040 5.4), the
	 * Write behind it names that STag */
	msg = a_send_inline(p, 1, RDMAP_WR_SEND_INV, dst->mr.stag, 8);
	placed(rb, 0, msg, 8);
	mark_bad(p, A, 1);
	a_rdma(p, 2, RDMAP_WR_WRITE, src, 64, dst->mr.stag, dst->mr.iova);
	want_rq(&p->s[B], RECV_ID(B), RDMAP_WC_SUCCESS, 8, false, true,
		dst->mr.stag);
	want_recv_flush(p, B, RECV_ID(B) + 1);
	want_sq(&p->s[A], 1, RDMAP_WC_SUCCESS, RDMAP_WC_SEND, 8, 0);
	want_sq(&p->s[A], 2, RDMAP_WC_SUCCESS, RDMAP_WC_RDMA_WRITE, 64, 0);
	requester_fault_tail(p, r, false);
}

/* --- RDMA Read Requests --- */

static void read_from(struct pair *p, const struct row *r, uint32_t acc,
		      uint32_t stag_xor, uint64_t off)
{
	struct buf *sink = mkbuf(p, A, 256, RDMAP_ACC_LOCAL_WRITE, NULL);
	struct buf *src = mkbuf(p, B, 256, acc, NULL);

	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	mark_bad(p, A, 0);
	a_rdma(p, 1, RDMAP_WR_READ, sink, 64, src->mr.stag ^ stag_xor,
	       src->mr.iova + off);
	want_sq(&p->s[A], 1, peer_status(r->term), RDMAP_WC_RDMA_READ, 64,
		r->term);
	requester_fault_tail(p, r, true);
}

static void row_read_bad_key(struct pair *p, const struct row *r)
{
	read_from(p, r, ACC_ALL, 0x01, 0);
}

static void row_read_no_rights(struct pair *p, const struct row *r)
{
	read_from(p, r, RDMAP_ACC_LOCAL_WRITE | RDMAP_ACC_REMOTE_WRITE, 0, 0);
}

static void row_read_oob(struct pair *p, const struct row *r)
{
	/* 64 octets at offset 200 of 256 */
	read_from(p, r, ACC_ALL, 0, 200);
}

static void row_read_beyond_ird(struct pair *p, const struct row *r)
{
	struct buf *sink = mkbuf(p, A, 256, RDMAP_ACC_LOCAL_WRITE, NULL);
	struct buf *src = mkbuf(p, B, 256, ACC_ALL, NULL);

	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	/* B's IRD is 1, A's ORD 4: A's second Read Request finds B's
	 * Read Request queue full */
	mark_bad(p, A, 1);
	a_rdma(p, 1, RDMAP_WR_READ, sink, 16, src->mr.stag, src->mr.iova);
	a_rdma(p, 2, RDMAP_WR_READ, sink, 16, src->mr.stag, src->mr.iova);
	want_sq(&p->s[A], 1, peer_status(r->term), RDMAP_WC_RDMA_READ, 16,
		r->term);
	want_sq(&p->s[A], 2, RDMAP_WC_WR_FLUSH_ERR, RDMAP_WC_RDMA_READ, 16, 0);
	requester_fault_tail(p, r, true);
}

/* --- untagged: Sends --- */

/* An inline Send of 8 octets that a hook spoils on the way. B's receive
 * is not consumed (the fault comes before it is taken) unless
 * recv_taken: then it is flushed with octets of unspecified content. */
static void spoiled_send(struct pair *p, const struct row *r,
			 tamper_fn hook, bool recv_taken)
{
	struct buf *rb = post_recv(p, B, RECV_ID(B), 64);

	if (recv_taken)
		unspecified(p, rb, 0, 64);
	want_recv_flush(p, B, RECV_ID(B));
	p->hook = hook;
	p->hook_val = r->hook_val;
	a_send_inline(p, 1, RDMAP_WR_SEND, 0, 8);
	want_sq(&p->s[A], 1, RDMAP_WC_SUCCESS, RDMAP_WC_SEND, 8, 0);
	requester_fault_tail(p, r, false);
}

static void row_msn(struct pair *p, const struct row *r)
{
	spoiled_send(p, r, hook_msn, false);
}

static void row_opcode(struct pair *p, const struct row *r)
{
	spoiled_send(p, r, hook_opcode, false);
}

static void row_dv_untagged(struct pair *p, const struct row *r)
{
	spoiled_send(p, r, hook_dv, false);
}

static void row_rv(struct pair *p, const struct row *r)
{
	spoiled_send(p, r, hook_rv, false);
}

static void row_crc(struct pair *p, const struct row *r)
{
	spoiled_send(p, r, hook_flip, true);
}

static void row_dv_tagged(struct pair *p, const struct row *r)
{
	p->hook = hook_dv;
	p->hook_val = r->hook_val;
	write_to(p, r, ACC_ALL, NULL, 0);
}

static void row_send_no_recv(struct pair *p, const struct row *r)
{
	mark_bad(p, A, 0);
	a_send_inline(p, 1, RDMAP_WR_SEND, 0, 8);
	want_sq(&p->s[A], 1, RDMAP_WC_SUCCESS, RDMAP_WC_SEND, 8, 0);
	requester_fault_tail(p, r, false);
}

static void row_send_too_long(struct pair *p, const struct row *r)
{
	struct buf *src = mkbuf(p, A, 512, 0, NULL);
	struct buf *rb = post_recv(p, B, RECV_ID(B), 200);
	struct rdmap_send_wr *w = sq_slot(&p->s[A]);

	post_recv(p, B, RECV_ID(B) + 1, 256);
	/* 300 octets into a 200-octet receive, MULPDU 128: segment 1
	 * (110 octets at MO 0) fits and is placed, segment 2 (MO 110)
	 * does not */
	w->wr_id = 1;
	w->opcode = RDMAP_WR_SEND;
	w->num_sge = 1;
	w->sge[0] = sge(src, 0, 300);
	mark_bad(p, A, 1);
	sq_post(&p->s[A], w);
	placed(rb, 0, data_at(src, 0), SMALL_MULPDU - DDP_UNTAGGED_HDR_LEN);
	want_sq(&p->s[A], 1, RDMAP_WC_SUCCESS, RDMAP_WC_SEND, 300, 0);
	/* the receive the message was placed into is too short for it:
	 * verbs call that a local length error on the receive (what IB
	 * responders and siw report), not a flush */
	want_rq(&p->s[B], RECV_ID(B), RDMAP_WC_LOC_LEN_ERR, 0, false, false,
		0);
	want_recv_flush(p, B, RECV_ID(B) + 1);
	requester_fault_tail(p, r, false);
}

static void row_short_ulpdu(struct pair *p, const struct row *r)
{
	/* the first 10 octets of an untagged Send header (18 octets) as a
	 * whole ULPDU */
	static const uint8_t cut[10] = { 0x41, 0x43 };

	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	inject(p, A, cut, sizeof(cut));
	requester_fault_tail(p, r, false);
}

/* --- Read Responses (A detects) --- */

static void row_resp_unsolicited(struct pair *p, const struct row *r)
{
	struct buf *sink = mkbuf(p, A, 256, ACC_ALL, NULL);
	uint8_t u[DDP_TAGGED_HDR_LEN + 16];
	struct rdmap_hdr h = {
		.opcode = RDMAP_OP_READ_RESP,
		.ddp = { .tagged = true, .last = true,
			 .t = { .stag = sink->mr.stag, .to = sink->mr.iova } },
	};

	(void)r;
	/* A has no READ outstanding (the READ RTR was answered while the
	 * cores connected), so A gets no witness READ either */
	cr_assert_eq(rdmap_hdr_build(&h, u, sizeof(u)), DDP_TAGGED_HDR_LEN);
	fill_pattern(u + DDP_TAGGED_HDR_LEN, 16, 5);
	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	mark_bad(p, B, 0);
	inject(p, B, u, sizeof(u));
}

static void row_resp_stag(struct pair *p, const struct row *r)
{
	struct buf *sink = mkbuf(p, A, 256, ACC_ALL, NULL);
	struct buf *other = mkbuf(p, A, 256, ACC_ALL, NULL);
	struct buf *src = mkbuf(p, B, 256, ACC_ALL, NULL);

	post_recv(p, B, RECV_ID(B), 256);
	want_recv_flush(p, B, RECV_ID(B));
	/* B's answer names another of A's MRs, valid and writable: only
	 * the match against A's Read Request can catch it */
	p->hook = hook_resp_stag;
	p->hook_val = other->mr.stag;
	a_rdma(p, 1, RDMAP_WR_READ, sink, 64, src->mr.stag, src->mr.iova);
	want_sq(&p->s[A], 1, local_status(r->term), RDMAP_WC_RDMA_READ, 64,
		r->term);
}

#define ROW(n, fn, det, code, ...) \
	{ .name = n, .setup = fn, .detector = det, .term = code, __VA_ARGS__ }

/*
 * The table. Codes: RFC 5040 section 7 (layer 0, RDMAP: etype 1 remote
 * protection, 2 remote operation), RFC 5041 section 7 (layer 1, DDP:
 * etype 1 tagged buffer, 2 untagged buffer, 0 local catastrophic), RFC
 * 5044 section 8 (layer 2, LLP); the table of all of them is RFC 5040
 * section 4.8's.
 */
static const struct row rows[] = {
	/* RFC 5041 sec. 7, tagged buffer 0x01 "Base or bounds violation" */
	ROW("write_out_of_bounds", row_write_oob, B, 0x1101),
	/* RFC 5040 sec. 7, remote protection 0x02 "Access rights
	 * violation": DDP has no notion of rights, RDMAP checks them */
	ROW("write_without_remote_write", row_write_no_rights, B, 0x0102),
	/* RFC 5041 sec. 7, tagged buffer 0x02 "STag not associated with DDP
	 * Stream" (the stream's PD) */
	ROW("write_other_pd", row_write_other_pd, B, 0x1102),
	/* RFC 5041 sec. 7, tagged buffer 0x00 "Invalid STag" */
	ROW("write_invalid_stag", row_write_bad_key, B, 0x1100),
	/* RFC 5041 sec. 7, tagged buffer 0x00 "Invalid STag": invalidated
	 * by an earlier Send with Invalidate (RFC 5040 5.4) */
	ROW("write_invalidated_stag", row_write_invalidated, B, 0x1100),
	/* RFC 5040 sec. 7, remote protection 0x00 "Invalid STag"; RFC 5040
	 * 4.8: a remote protection error on a Read Request quotes it (R) */
	ROW("read_invalid_stag", row_read_bad_key, B, 0x0100,
	    .rdma_hdr = true),
	/* RFC 5040 sec. 7, remote protection 0x02 "Access rights
	 * violation" */
	ROW("read_without_remote_read", row_read_no_rights, B, 0x0102,
	    .rdma_hdr = true),
	/* RFC 5040 sec. 7, remote protection 0x01 "Base or bounds
	 * violation" */
	ROW("read_out_of_bounds", row_read_oob, B, 0x0101,
	    .rdma_hdr = true),
	/* RFC 5041 sec. 7, untagged buffer 0x02 "Invalid MSN - no buffer
	 * available": RDMA Read Requests travel on untagged queue 1 (RFC
	 * 5040 5) whose buffers are the IRD slots; one beyond IRD finds
	 * none. RFC 5040 names no RDMAP code of its own for it. */
	ROW("read_beyond_ird", row_read_beyond_ird, B, 0x1202, .b_ird = 1),
	/* RFC 5041 sec. 7, untagged buffer 0x03 "Invalid MSN - MSN range is
	 * not valid" (MSNs arrive in order over MPA/TCP) */
	ROW("msn_too_high", row_msn, B, 0x1203, .hook_val = 1),
	ROW("msn_too_low", row_msn, B, 0x1203, .hook_val = (uint32_t)-1),
	/* RFC 5040 sec. 7, remote operation 0x06 "Unexpected OpCode" */
	ROW("unknown_opcode", row_opcode, B, 0x0206, .hook_val = 0xf),
	/* RFC 5041 sec. 7, untagged buffer 0x06 "Invalid DDP version" */
	ROW("bad_ddp_version_untagged", row_dv_untagged, B, 0x1206,
	    .hook_val = RDMAP_OP_SEND),
	/* RFC 5041 sec. 7, tagged buffer 0x04 "Invalid DDP version" */
	ROW("bad_ddp_version_tagged", row_dv_tagged, B, 0x1104,
	    .hook_val = RDMAP_OP_WRITE),
	/* RFC 5040 sec. 7, remote operation 0x05 "Invalid RDMAP version" */
	ROW("bad_rdmap_version", row_rv, B, 0x0205),
	/* RFC 5044 sec. 8, LLP (MPA) 0x02 "CRC Error"; nothing quoted */
	ROW("crc_bit_flip", row_crc, B, 0x2002, .crc_only = true),
	/* RFC 5041 sec. 7, untagged buffer 0x02 "Invalid MSN - no buffer
	 * available" */
	ROW("send_without_receive", row_send_no_recv, B, 0x1202),
	/* RFC 5041 sec. 7, untagged buffer 0x05 "DDP Message too long for
	 * available buffer" */
	ROW("send_longer_than_receive", row_send_too_long, B, 0x1205),
	/* RFC 5041 sec. 7 has no code for a segment shorter than its own
	 * header: a DDP local catastrophic error (etype 0, code 0x00),
	 * and a local catastrophic Terminate quotes no header (RFC 5040
	 * 4.8) */
	ROW("ulpdu_shorter_than_header", row_short_ulpdu, B, 0x1000),
	/* RFC 5040 sec. 7, remote operation 0x06 "Unexpected OpCode": a
	 * Read Response with no RDMA Read Request outstanding */
	ROW("read_response_unsolicited", row_resp_unsolicited, A, 0x0206),
	/* RFC 5041 sec. 7, tagged buffer 0x00 "Invalid STag": a Read
	 * Response must land in the one tagged buffer the oldest Read
	 * Request advertised (RFC 5040 5.3: responses come back in request
	 * order); one naming another STag misses it, as siw also reports.
	 * TO and length mismatches (0x1101) are test_qp's. */
	ROW("read_response_wrong_stag", row_resp_stag, A, 0x1100),
};

#define NROWS ((int)(sizeof(rows) / sizeof(rows[0])))

static void check_terminate(const struct pair *p, const struct row *r)
{
	const struct side *d = &p->s[r->detector], *o = &p->s[!r->detector];
	const struct rdmap_terminate *t = &d->term;
	const char *c = config_str(&p->cfg);
	bool quoted = rdmap_term_layer(r->term) != RDMAP_LAYER_LLP &&
		      rdmap_term_etype(r->term) != 0;

	cr_assert_eq(rdmap_qp_state(d->qp), RDMAP_QP_ERROR, "%s %s", r->name,
		     c);
	cr_assert_eq(rdmap_qp_state(o->qp), RDMAP_QP_ERROR, "%s %s", r->name,
		     c);
	cr_assert_eq(d->nterm, 1, "%s: side %d sent %d Terminates %s",
		     r->name, r->detector, d->nterm, c);
	cr_assert_eq(d->after_term, 0, "%s: nothing after the Terminate",
		     r->name);
	cr_assert(d->tx_close, "%s: tx_done asks for the close", r->name);
	cr_assert_eq(o->nterm, 0, "%s: a Terminate answered with one",
		     r->name);
	cr_assert(o->rx_flags & RDMAP_RX_CLOSE, "%s: the receiver of the "
		  "Terminate asks for the close", r->name);
	cr_assert_eq(d->nfatal, 1);
	cr_assert_eq(o->nfatal, 1);
	cr_assert_eq(d->fatal_term, r->term, "%s: fatal(%#06x)", r->name,
		     d->fatal_term);
	cr_assert_eq(o->fatal_term, r->term, "%s: peer fatal(%#06x) %s",
		     r->name, o->fatal_term, c);
	/* RFC 5040 4.8: untagged, queue 2, the first message on it, L */
	cr_assert(!d->term_hdr.ddp.tagged && d->term_hdr.ddp.last);
	cr_assert_eq(d->term_hdr.ddp.u.qn, RDMAP_QN_TERMINATE);
	cr_assert_eq(d->term_hdr.ddp.u.msn, 1);
	cr_assert_eq(d->term_hdr.ddp.u.mo, 0);
	cr_assert_eq(t->term, r->term, "%s: Terminate %#06x (layer %u etype "
		     "%u code %#04x), want %#06x %s", r->name, t->term,
		     rdmap_term_layer(t->term), rdmap_term_etype(t->term),
		     rdmap_term_code(t->term), r->term, c);
	if (!quoted) {
		cr_assert(!t->has_seg_len && !t->has_ddp_hdr &&
			  !t->has_rdma_hdr, "%s: nothing quoted", r->name);
		return;
	}
	cr_assert_geq(p->bad_side, 0, "%s: the faulting FPDU is known",
		      r->name);
	{
		const struct wire_rec *w =
			&p->s[p->bad_side].wire[p->bad_idx];
		size_t hl = ddp_hdr_len(w->hdr[0] & DDP_CTRL_T);

		cr_assert_lt(p->bad_idx, p->s[p->bad_side].nwire);
		cr_assert(t->has_seg_len && t->has_ddp_hdr, "%s: M and D",
			  r->name);
		cr_assert_eq(t->seg_len, w->ulpdu_len, "%s: segment length "
			     "%u, want %u", r->name, t->seg_len, w->ulpdu_len);
		cr_assert_eq(t->ddp_hdr_len, hl);
		cr_assert_arr_eq(t->ddp_hdr, w->hdr, hl, "%s: the faulting "
				 "DDP header is quoted", r->name);
		cr_assert_eq(t->has_rdma_hdr, r->rdma_hdr, "%s: R", r->name);
		if (r->rdma_hdr)
			cr_assert_arr_eq(t->rdma_hdr, w->hdr + hl,
					 RDMAP_READ_REQ_LEN);
	}
}

static void run_row(const struct row *r)
{
	int ran = 0;

	FOR_ALL_TEST_CONFIGS(cfg) {
		struct pair *p;

		if (r->crc_only && !cfg->crc)
			continue;
		p = pair_new(cfg, SMALL_MULPDU, r->b_ird);
		p->bad_side = -1;
		post_recv(p, A, RECV_ID(A), 256);
		want_recv_flush(p, A, RECV_ID(A));
		r->setup(p, r);
		pump(p);
		check_terminate(p, r);
		check_all_cqs(p);
		check_bufs(p);
		pair_free(p);
		ran++;
	}
	cr_log_info("%-28s Terminate %#06x from %c, %d configurations",
		    r->name, r->term, r->detector == A ? 'A' : 'B', ran);
}

/* Criterion runs each parameter in a fresh process image (its addresses
 * differ), so the parameter is the row's index, not a pointer to it. */
ParameterizedTestParameters(selftalk, tamper)
{
	static int idx[NROWS];

	for (int i = 0; i < NROWS; i++)
		idx[i] = i;
	return cr_make_param_array(int, idx, NROWS);
}

ParameterizedTest(int *i, selftalk, tamper, .timeout = 120)
{
	const struct row *r = &rows[*i];

	run_row(r);
}
