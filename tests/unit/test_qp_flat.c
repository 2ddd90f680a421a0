// SPDX-License-Identifier: MIT
/*
 * test_qp_flat.c - a small WRITE or Send whose FPDU MPA lays out flat is
 * built in place by the transmit side (tx_flat_wr in rdmap_qp_tx.c): its
 * octets must be those of the general encoders (rdmap_hdr_build +
 * mpa_fpdu_encode), the receiving QP must parse and place them, and it
 * must complete in SQ order behind WRs queued before it, with its MSN
 * in sequence.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "mpa.h"
#include "rdmap_qp.h"
#include "qp_recv.h"

#define PD        ((const void *)1)
#define MULPDU    1024u
#define NCQE      16
/* The longest payload whose FPDU is still flat: 2 + header + payload +
 * pad + 4 <= MPA_FPDU_FLAT_MAX. */
#define FLAT_SEND ((MPA_FPDU_FLAT_MAX - 6) - DDP_UNTAGGED_HDR_LEN)
#define FLAT_WRITE ((MPA_FPDU_FLAT_MAX - 6) - DDP_TAGGED_HDR_LEN)

/* Length field, header, payload, no pad, CRC. */
#define SEND8_WIRE  (2 + 18 + 8 + 4)
#define SEND24_WIRE (2 + 18 + 24 + 4)

struct side {
	struct rdmap_qp *qp;
	struct rdmap_cqe cqe[NCQE];
	int ncqe;
};

static struct rdmap_stag_table g_t;
static struct side g_tx, g_rx;
static uint8_t g_src[16384], g_dst[16384];
static struct rdmap_mr g_smr, g_dmr;

static void on_complete(void *arg, const struct rdmap_cqe *c)
{
	struct side *s = arg;

	cr_assert_lt(s->ncqe, NCQE);
	s->cqe[s->ncqe++] = *c;
}

static int g_term = -1;

static void on_fatal(void *arg, int term)
{
	(void)arg;
	g_term = term;
}

static const struct rdmap_qp_ops ops = { .complete = on_complete,
					 .fatal = on_fatal };

static struct rdmap_qp *side_qp(struct side *s, bool crc, uint32_t sq)
{
	struct rdmap_qp_cfg cfg = { .pd = PD, .stags = &g_t, .ops = &ops,
				    .ops_arg = s, .sq_size = sq, .rq_size = 8,
				    .access = RDMAP_ACC_REMOTE_WRITE };
	struct rdmap_stream_cfg st = { .ird = 4, .ord = 4, .mulpdu = MULPDU,
				       .crc = crc };

	memset(s, 0, sizeof(*s));
	s->qp = rdmap_qp_create(&cfg);
	cr_assert_not_null(s->qp);
	cr_assert_eq(rdmap_qp_start(s->qp, &st), 0);
	return s->qp;
}

static void setup(bool crc, uint32_t sq)
{
	for (size_t i = 0; i < sizeof(g_src); i++)
		g_src[i] = (uint8_t)(i * 13 + 5);
	memset(g_dst, 0xee, sizeof(g_dst));
	cr_assert_eq(rdmap_stag_table_init(&g_t, 16), 0);
	g_smr = (struct rdmap_mr){ .addr = g_src, .iova = 0x10000,
				   .length = sizeof(g_src), .pd = PD };
	g_dmr = (struct rdmap_mr){ .addr = g_dst, .iova = 0x80000,
				   .length = sizeof(g_dst), .pd = PD,
				   .access = RDMAP_ACC_LOCAL_WRITE |
					     RDMAP_ACC_REMOTE_WRITE };
	cr_assert_eq(rdmap_stag_insert(&g_t, &g_smr), 0);
	cr_assert_eq(rdmap_stag_insert(&g_t, &g_dmr), 0);
	atomic_store(&g_smr.valid, true);
	atomic_store(&g_dmr.valid, true);
	side_qp(&g_tx, crc, sq);
	side_qp(&g_rx, crc, sq);
}

static void teardown(void)
{
	rdmap_qp_destroy(g_tx.qp);
	rdmap_qp_destroy(g_rx.qp);
	rdmap_stag_remove(&g_t, &g_smr);
	rdmap_stag_remove(&g_t, &g_dmr);
	rdmap_stag_table_fini(&g_t);
}

/* A receive of 512 octets into the destination MR at off. */
static void post_recv(uint64_t wr_id, size_t off)
{
	struct rdmap_ring *rq = rdmap_qp_rq(g_rx.qp);
	uint32_t tail = atomic_load(&rq->tail);
	struct rdmap_recv_wr *r = rdmap_ring_slot(rq, tail);

	memset(r, 0, sizeof(*r));
	r->wr_id = wr_id;
	r->num_sge = 1;
	r->sge[0] = (struct rdmap_sge){ g_dmr.iova + off, 512, g_dmr.stag };
	r->length = 512;
	atomic_store(&rq->tail, tail + 1);
}

/* Post a WR: len octets of the source MR from src_off, inline or as
 * two SGEs (the second empty when len < 2). */
static void post(uint64_t wr_id, uint8_t opcode, uint8_t flags,
		 size_t src_off, uint32_t len)
{
	struct rdmap_ring *sq = rdmap_qp_sq(g_tx.qp);
	uint32_t tail = atomic_load(&sq->tail);
	struct rdmap_send_wr *w = rdmap_ring_slot(sq, tail);
	uint32_t a = len / 2;

	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->opcode = opcode;
	w->flags = RDMAP_WR_SIGNALED | flags;
	w->length = len;
	if (flags & RDMAP_WR_INLINE) {
		cr_assert_leq(len, RDMAP_MAX_INLINE);
		memcpy(w->inline_data, g_src + src_off, len);
	} else {
		w->num_sge = 2;
		w->sge[0] = (struct rdmap_sge){ g_smr.iova + src_off, a,
						g_smr.stag };
		w->sge[1] = (struct rdmap_sge){ g_smr.iova + src_off + a,
						len - a, g_smr.stag };
	}
	w->rkey = g_dmr.stag;
	w->remote_addr = g_dmr.iova + 0x2000 + src_off;
	w->inv_stag = 0x5a5a5a00;
	atomic_store(&sq->tail, tail + 1);
}

/* One tx_fill; its octets appended to wire at *len. Returns the
 * iovec count. */
static int fill(uint8_t *wire, size_t cap, size_t *len, int *niov)
{
	struct iovec iov[64];
	int n = rdmap_qp_tx_fill(g_tx.qp, iov, 64);

	for (int i = 0; i < n; i++) {
		cr_assert_leq(*len + iov[i].iov_len, cap);
		memcpy(wire + *len, iov[i].iov_base, iov[i].iov_len);
		*len += iov[i].iov_len;
	}
	if (niov)
		*niov = n;
	return n;
}

/* Everything the sender has, sent at once. */
static size_t drain(uint8_t *wire, size_t cap)
{
	size_t len = 0;

	for (;;) {
		size_t before = len;

		if (fill(wire, cap, &len, NULL) <= 0)
			return len;
		rdmap_qp_tx_done(g_tx.qp, len - before);
	}
}

/* Feed octets to qp as the engine would. */
static void feed_qp(struct rdmap_qp *qp, const uint8_t *b, size_t len)
{
	while (len) {
		struct iovec iov[RDMAP_MAX_SGE + 1];
		int n = rdmap_qp_rx_want(qp, iov, RDMAP_MAX_SGE + 1);
		size_t k = iov[0].iov_len < len ? iov[0].iov_len : len;

		cr_assert_geq(n, 1);
		memcpy(iov[0].iov_base, b, k);
		rdmap_qp_rx_done(qp, k);
		b += k;
		len -= k;
	}
	cr_assert_eq(rdmap_qp_state(qp), RDMAP_QP_RTS,
		     "the receiver failed: Terminate %#x", g_term);
}

/* Feed octets to the receiver. */
static void feed(const uint8_t *b, size_t len)
{
	feed_qp(g_rx.qp, b, len);
}

/* The FPDU the general encoders make for one message of one segment. */
static size_t expected(bool crc, uint8_t opcode, uint8_t flags,
		       size_t src_off, uint32_t len, uint32_t msn,
		       uint8_t *out, size_t cap)
{
	struct rdmap_hdr h = { 0 };
	uint8_t ulpdu[64 + 512];
	struct mpa_tx tx;
	int hl, n;

	h.ddp.last = true;
	if (opcode == RDMAP_WR_WRITE) {
		h.opcode = RDMAP_OP_WRITE;
		h.ddp.tagged = true;
		h.ddp.t.stag = g_dmr.stag;
		h.ddp.t.to = g_dmr.iova + 0x2000 + src_off;
	} else {
		bool se = flags & RDMAP_WR_SOLICITED;

		if (opcode == RDMAP_WR_SEND_INV) {
			h.opcode = se ? RDMAP_OP_SEND_SE_INV
				      : RDMAP_OP_SEND_INV;
			h.inval_stag = 0x5a5a5a00;
		} else {
			h.opcode = se ? RDMAP_OP_SEND_SE : RDMAP_OP_SEND;
		}
		h.ddp.u.msn = msn;
	}
	hl = rdmap_hdr_build(&h, ulpdu, 64);
	cr_assert_gt(hl, 0);
	cr_assert_leq(len, 512);
	memcpy(ulpdu + hl, g_src + src_off, len);
	mpa_tx_init(&tx, crc, false);
	n = mpa_fpdu_encode(&tx, ulpdu, (size_t)hl + len, out, cap);
	cr_assert_gt(n, 0);
	return (size_t)n;
}

static const uint32_t lens[] = { 0, 1, 3, 4, 8, 9, 63, 200, FLAT_WRITE,
				 FLAT_SEND, FLAT_SEND + 1, FLAT_WRITE + 1,
				 300 };

/*
 * Every opcode the flat path takes, CRC on and off, inline and from
 * SGEs, at lengths around the flat limit: one WR on an idle QP gives
 * the octets of the general encoders in one iovec exactly when flat,
 * completes, and a WRITE or Send is placed and completed by the
 * receiving QP (which checks the CRC).
 */
Test(qp_flat, one_wr_on_an_idle_qp_is_framed_as_the_encoders_do)
{
	static const struct { uint8_t op, flags; } ops_tab[] = {
		{ RDMAP_WR_SEND, 0 },
		{ RDMAP_WR_SEND, RDMAP_WR_SOLICITED },
		{ RDMAP_WR_SEND_INV, 0 },
		{ RDMAP_WR_SEND_INV, RDMAP_WR_SOLICITED },
		{ RDMAP_WR_WRITE, 0 },
	};
	int checked = 0, flat = 0;

	for (int crc = 0; crc < 2; crc++)
	for (size_t o = 0; o < sizeof(ops_tab) / sizeof(ops_tab[0]); o++)
	for (int inl = 0; inl < 2; inl++)
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		uint8_t op = ops_tab[o].op;
		uint8_t fl = ops_tab[o].flags | (inl ? RDMAP_WR_INLINE : 0);
		uint32_t len = lens[l];
		size_t off = 16 * l + 3, wl, el;
		uint8_t wire[1024], exp[1024];
		bool is_flat;
		int niov;

		if (inl && len > RDMAP_MAX_INLINE)
			continue;
		setup(crc, 4);
		/* Two messages, so that the second has MSN 2. */
		for (uint32_t m = 0; m < 2; m++) {
			if (op != RDMAP_WR_WRITE)
				post_recv(40 + m, 512 * m);
			post(m, op, fl, off, len);
			wl = 0;
			cr_assert_gt(fill(wire, sizeof(wire), &wl, &niov), 0);
			rdmap_qp_tx_done(g_tx.qp, wl);
			cr_assert_eq(drain(wire + wl, sizeof(wire) - wl), 0);
			el = expected(crc, op, fl, off, len, m + 1, exp,
				      sizeof(exp));
			cr_assert_eq(wl, el, "crc %d op %u flags %#x len %u: "
				     "%zu octets, not %zu", crc, op, fl, len,
				     wl, el);
			cr_assert_eq(memcmp(wire, exp, el), 0,
				     "crc %d op %u flags %#x len %u msg %u: "
				     "octets differ", crc, op, fl, len, m);
			is_flat = el <= MPA_FPDU_FLAT_MAX;
			if (is_flat)
				cr_assert_eq(niov, 1, "a flat FPDU is one iovec");
			flat += is_flat;
			cr_assert_eq(g_tx.ncqe, (int)m + 1);
			cr_assert_eq(g_tx.cqe[m].wr_id, m);
			cr_assert_eq(g_tx.cqe[m].status, RDMAP_WC_SUCCESS);
			if (op == RDMAP_WR_SEND_INV)
				continue;   /* no STag to invalidate here */
			feed(wire, wl);
			if (op == RDMAP_WR_WRITE) {
				cr_assert_eq(memcmp(g_dst + 0x2000 + off,
						    g_src + off, len), 0);
				continue;
			}
			cr_assert_eq(g_rx.ncqe, (int)m + 1);
			cr_assert(g_rx.cqe[m].recv);
			cr_assert_eq(g_rx.cqe[m].wr_id, 40 + m);
			cr_assert_eq(g_rx.cqe[m].status, RDMAP_WC_SUCCESS);
			cr_assert_eq(g_rx.cqe[m].byte_len, len);
			cr_assert_eq(g_rx.cqe[m].solicited,
				     !!(fl & RDMAP_WR_SOLICITED));
			cr_assert_eq(memcmp(g_dst + 512 * m, g_src + off, len),
				     0, "len %u: the Send's payload", len);
		}
		teardown();
		checked++;
	}
	cr_log_info("%d WR kinds, %d flat FPDUs, all as the encoders make "
		    "them", checked, flat);
	cr_assert_gt(flat, 0);
}

/*
 * Small Sends posted behind a WRITE of several FPDUs that is only half
 * sent: they are framed in a later batch, keep their MSNs in order, and
 * complete after the WRITE, each only once its octets are sent; the
 * receiver gets the WRITE's octets and both Sends' payloads.
 */
Test(qp_flat, small_sends_behind_a_queued_write_complete_in_order)
{
	uint8_t wire[16384];
	size_t len = 0, sent = 0;
	int niov;

	for (int crc = 0; crc < 2; crc++) {
		len = sent = 0;
		setup(crc, 8);
		post_recv(50, 0);
		post_recv(51, 512);
		post(0, RDMAP_WR_WRITE, 0, 0, 6000);
		cr_assert_gt(fill(wire, sizeof(wire), &len, &niov), 0);
		cr_assert_gt(len, (size_t)6000, "the whole WRITE, in "
			     "several FPDUs");
		/* Half of the WRITE is in the kernel; the Sends are posted
		 * now, one inline, one from SGEs. */
		rdmap_qp_tx_done(g_tx.qp, len / 2);
		sent = len / 2;
		post(1, RDMAP_WR_SEND, RDMAP_WR_INLINE, 7000, 8);
		post(2, RDMAP_WR_SEND, 0, 7100, 24);
		cr_assert_eq(g_tx.ncqe, 0, "nothing completes before the "
			     "WRITE's last octet");
		/* The rest of the WRITE's batch (its octets are in wire
		 * already): nothing else. */
		{
			uint8_t rest[16384];
			size_t rl = 0;

			cr_assert_gt(fill(rest, sizeof(rest), &rl, NULL), 0);
			cr_assert_eq(rl, len - sent);
			cr_assert_eq(memcmp(rest, wire + sent, rl), 0);
		}
		rdmap_qp_tx_done(g_tx.qp, len - sent);
		sent = len;
		cr_assert_eq(g_tx.ncqe, 1);
		cr_assert_eq(g_tx.cqe[0].wr_id, 0);
		/* Both Sends in the next batch, one flat FPDU each; half
		 * of it sent completes at most the first. */
		cr_assert_eq(fill(wire, sizeof(wire), &len, &niov), 2);
		cr_assert_eq(len - sent, (size_t)SEND8_WIRE + SEND24_WIRE);
		rdmap_qp_tx_done(g_tx.qp, SEND8_WIRE);
		cr_assert_eq(g_tx.ncqe, 2);
		cr_assert_eq(g_tx.cqe[1].wr_id, 1);
		rdmap_qp_tx_done(g_tx.qp, SEND24_WIRE);
		cr_assert_eq(g_tx.ncqe, 3);
		cr_assert_eq(g_tx.cqe[2].wr_id, 2);
		for (int i = 0; i < 3; i++)
			cr_assert_eq(g_tx.cqe[i].status, RDMAP_WC_SUCCESS);
		/* MSN 1 and 2 (octets 12..15 of the untagged header). */
		{
			const uint8_t *s1 = wire + sent + 2;
			const uint8_t *s2 = s1 + SEND8_WIRE;

			cr_assert_eq(s1[13], 1, "first Send's MSN");
			cr_assert_eq(s2[13], 2, "second Send's MSN");
		}
		feed(wire, len);
		cr_assert_eq(memcmp(g_dst + 0x2000, g_src, 6000), 0);
		cr_assert_eq(g_rx.ncqe, 2);
		cr_assert_eq(g_rx.cqe[0].wr_id, 50);
		cr_assert_eq(g_rx.cqe[0].byte_len, 8);
		cr_assert_eq(g_rx.cqe[1].wr_id, 51);
		cr_assert_eq(g_rx.cqe[1].byte_len, 24);
		cr_assert_eq(memcmp(g_dst, g_src + 7000, 8), 0);
		cr_assert_eq(memcmp(g_dst + 512, g_src + 7100, 24), 0);
		teardown();
	}
}

/*
 * A small Send naming a bad lkey is left to the general path: it
 * completes with a local protection error, takes no MSN, and the QP
 * enters ERROR; nothing of it goes out.
 */
Test(qp_flat, a_bad_lkey_is_the_general_paths_error)
{
	struct rdmap_ring *sq;
	struct rdmap_send_wr *w;
	uint8_t wire[1024];

	setup(true, 4);
	post(0, RDMAP_WR_SEND, 0, 0, 8);
	sq = rdmap_qp_sq(g_tx.qp);
	w = rdmap_ring_slot(sq, 0);
	w->sge[1].lkey ^= 0x55;
	cr_assert_eq(drain(wire, sizeof(wire)), 0, "nothing sent");
	cr_assert_eq(g_tx.ncqe, 1);
	cr_assert_eq(g_tx.cqe[0].wr_id, 0);
	cr_assert_eq(g_tx.cqe[0].status, RDMAP_WC_LOC_PROT_ERR);
	cr_assert_eq(rdmap_qp_state(g_tx.qp), RDMAP_QP_ERROR);
	cr_assert_eq(atomic_load(&g_smr.slot->word) & RDMAP_SLOT_REFS, 0,
		     "no reference left behind");
	teardown();
}

/*
 * Round the SQ ring several times: each small Send, framed into a slot
 * that held an earlier (completed) WR, completes only once its last
 * octet is reported sent, never on what the slot said before.
 */
Test(qp_flat, a_reused_sq_slot_completes_only_when_sent)
{
	uint8_t wire[256];

	setup(true, 2);
	for (uint32_t m = 0; m < 7; m++) {
		size_t len = 0;

		post(m, RDMAP_WR_SEND, m & 1 ? RDMAP_WR_INLINE : 0, 8 * m, 8);
		cr_assert_eq(fill(wire, sizeof(wire), &len, NULL), 1);
		cr_assert_eq(len, (size_t)SEND8_WIRE);
		cr_assert_eq(g_tx.ncqe, (int)m, "Send %u: completed unsent", m);
		rdmap_qp_tx_done(g_tx.qp, len - 1);
		cr_assert_eq(g_tx.ncqe, (int)m, "Send %u: completed with one "
			     "octet unsent", m);
		rdmap_qp_tx_done(g_tx.qp, 1);
		cr_assert_eq(g_tx.ncqe, (int)m + 1);
		cr_assert_eq(g_tx.cqe[m].wr_id, m);
		cr_assert_eq(g_tx.cqe[m].status, RDMAP_WC_SUCCESS);
	}
	teardown();
}

/* ---- a lone WR on an idle QP (tx_lone) ---- */

/* The RDMAP opcode of the FPDU at w (after its length field). */
static unsigned fpdu_op(const uint8_t *w)
{
	return w[2 + 1] & 0x0f;
}

/*
 * The lone WR's fill: one Send alone in the SQ of an idle QP is framed
 * flat, as the general path frames it (qp_flat above), and completes;
 * with several queued the same fill takes them all (one gathered send,
 * not one per WR), in SQ order with MSNs in sequence; a WR posted while
 * a lone FPDU is only partly sent waits until the rest has gone.
 */
Test(qp_flat, a_lone_wr_alone_and_queued_wrs_together)
{
	uint8_t wire[1024], rest[64];
	size_t len = 0, rl = 0;
	int niov;

	setup(true, 8);
	post(0, RDMAP_WR_SEND, RDMAP_WR_INLINE, 0, 8);
	cr_assert_eq(fill(wire, sizeof(wire), &len, &niov), 1);
	cr_assert_eq(len, (size_t)SEND8_WIRE);
	rdmap_qp_tx_done(g_tx.qp, len);
	cr_assert_eq(g_tx.ncqe, 1);
	cr_assert_eq(g_tx.cqe[0].wr_id, 0);

	/* Three queued: one fill, three FPDUs, MSN 2, 3, 4. */
	post(1, RDMAP_WR_SEND, RDMAP_WR_INLINE, 8, 8);
	post(2, RDMAP_WR_SEND, 0, 16, 8);
	post(3, RDMAP_WR_SEND, RDMAP_WR_INLINE, 24, 8);
	len = 0;
	cr_assert_eq(fill(wire, sizeof(wire), &len, &niov), 3,
		     "queued WRs go out together");
	cr_assert_eq(len, 3u * SEND8_WIRE);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(wire[SEND8_WIRE * i + 2 + 13], 2 + i, "MSN");
	cr_assert_eq(g_tx.ncqe, 1, "nothing completes before it is sent");
	rdmap_qp_tx_done(g_tx.qp, len);
	cr_assert_eq(g_tx.ncqe, 4);
	for (int i = 1; i < 4; i++)
		cr_assert_eq(g_tx.cqe[i].wr_id, (uint64_t)i);

	/* A lone Send sent but its last octet: a Send posted now is not
	 * framed until that octet has gone. */
	post(4, RDMAP_WR_SEND, RDMAP_WR_INLINE, 32, 8);
	len = 0;
	cr_assert_eq(fill(wire, sizeof(wire), &len, NULL), 1);
	rdmap_qp_tx_done(g_tx.qp, len - 1);
	post(5, RDMAP_WR_SEND, RDMAP_WR_INLINE, 40, 8);
	cr_assert_eq(fill(rest, sizeof(rest), &rl, NULL), 1);
	cr_assert_eq(rl, 1, "only the unsent octet");
	cr_assert_eq(rest[0], wire[len - 1]);
	cr_assert_eq(g_tx.ncqe, 4, "completed with an octet unsent");
	rdmap_qp_tx_done(g_tx.qp, 1);
	cr_assert_eq(g_tx.ncqe, 5);
	cr_assert_eq(g_tx.cqe[4].wr_id, 4);
	len = 0;
	cr_assert_eq(fill(wire, sizeof(wire), &len, NULL), 1);
	cr_assert_eq(len, (size_t)SEND8_WIRE);
	cr_assert_eq(wire[2 + 13], 6, "MSN");
	rdmap_qp_tx_done(g_tx.qp, len);
	cr_assert_eq(g_tx.ncqe, 6);
	cr_assert_eq(g_tx.cqe[5].wr_id, 5);
	teardown();
}

/*
 * A lone Send while the peer's Read waits for its response: the Read
 * Response goes first (RFC 5040 5.5: the peer's Read is older), then
 * the Send, in the same fill.
 */
Test(qp_flat, a_read_response_goes_before_a_lone_send)
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_READ_REQ };
	uint8_t ulpdu[64], req[128], wire[1024];
	struct mpa_tx tx;
	size_t len = 0;
	int hl, n;

	setup(true, 4);
	rdmap_qp_set_access(g_tx.qp, RDMAP_ACC_REMOTE_WRITE |
				     RDMAP_ACC_REMOTE_READ);
	g_dmr.access |= RDMAP_ACC_REMOTE_READ;
	h.ddp.last = true;
	h.ddp.u.msn = 1;
	h.rreq.sink_stag = 0x4242;
	h.rreq.sink_to = 0x9000;
	h.rreq.size = 16;
	h.rreq.src_stag = g_dmr.stag;
	h.rreq.src_to = g_dmr.iova;
	hl = rdmap_hdr_build(&h, ulpdu, sizeof(ulpdu));
	cr_assert_gt(hl, 0);
	mpa_tx_init(&tx, true, false);
	n = mpa_fpdu_encode(&tx, ulpdu, (size_t)hl, req, sizeof(req));
	cr_assert_gt(n, 0);
	feed_qp(g_tx.qp, req, (size_t)n);

	post(0, RDMAP_WR_SEND, RDMAP_WR_INLINE, 0, 8);
	cr_assert_eq(fill(wire, sizeof(wire), &len, NULL), 2);
	cr_assert_eq(fpdu_op(wire), RDMAP_OP_READ_RESP);
	cr_assert_gt(len, (size_t)SEND8_WIRE);
	cr_assert_eq(fpdu_op(wire + len - SEND8_WIRE), RDMAP_OP_SEND,
		     "the Send comes after the Read Response");
	rdmap_qp_tx_done(g_tx.qp, len);
	cr_assert_eq(g_tx.ncqe, 1);
	cr_assert_eq(g_tx.cqe[0].wr_id, 0);
	teardown();
}

/*
 * A QP out of RTS sends no lone WR: after a local error (a bad lkey)
 * the QP is in ERROR and a Send posted then is not framed.
 */
Test(qp_flat, no_lone_wr_out_of_rts)
{
	struct rdmap_send_wr *w;
	uint8_t wire[1024];

	setup(true, 4);
	post(0, RDMAP_WR_SEND, 0, 0, 8);
	w = rdmap_ring_slot(rdmap_qp_sq(g_tx.qp), 0);
	w->sge[1].lkey ^= 0x55;
	cr_assert_eq(drain(wire, sizeof(wire)), 0);
	cr_assert_eq(rdmap_qp_state(g_tx.qp), RDMAP_QP_ERROR);
	post(1, RDMAP_WR_SEND, RDMAP_WR_INLINE, 0, 8);
	cr_assert_eq(drain(wire, sizeof(wire)), 0, "nothing sent in ERROR");
	teardown();
}

/* ---- the receive side: a whole Send in the stage (rx_send_whole) ---- */

/* An FPDU (CRC on) of header h, hdr_len octets long, then len octets of
 * the source from src_off; tamper (if set) edits the ULPDU before the
 * CRC is made. */
static size_t hdr_fpdu(uint8_t *out, size_t cap, const struct rdmap_hdr *h,
		       int hdr_len, size_t src_off, uint32_t len,
		       void (*tamper)(uint8_t *ulpdu))
{
	uint8_t ulpdu[64 + 512];
	struct mpa_tx tx;
	int hl, n;

	cr_assert_leq((size_t)hdr_len + len, sizeof(ulpdu));
	hl = rdmap_hdr_build(h, ulpdu, 64);
	cr_assert_eq(hl, hdr_len);
	memcpy(ulpdu + hl, g_src + src_off, len);
	if (tamper)
		tamper(ulpdu);
	mpa_tx_init(&tx, true, false);
	n = mpa_fpdu_encode(&tx, ulpdu, (size_t)hl + len, out, cap);
	cr_assert_gt(n, 0);
	return (size_t)n;
}

/* A Send FPDU (CRC on) of len octets of the source from src_off, with
 * MSN msn; tamper as hdr_fpdu's. */
static size_t send_fpdu(uint8_t *out, size_t cap, uint8_t opcode,
			uint32_t msn, size_t src_off, uint32_t len,
			void (*tamper)(uint8_t *ulpdu))
{
	struct rdmap_hdr h = { .opcode = opcode };

	h.ddp.last = true;
	h.ddp.u.msn = msn;
	return hdr_fpdu(out, cap, &h, DDP_UNTAGGED_HDR_LEN, src_off, len,
			tamper);
}

/* Feed everything in one read (the stage holds it all). */
static void feed_one_read(const uint8_t *b, size_t len)
{
	struct iovec iov[RDMAP_MAX_SGE + 1];
	int n = rdmap_qp_rx_want(g_rx.qp, iov, RDMAP_MAX_SGE + 1);

	cr_assert_geq(n, 1);
	cr_assert_geq(iov[0].iov_len, len);
	memcpy(iov[0].iov_base, b, len);
	rdmap_qp_rx_done(g_rx.qp, len);
}

/*
 * Five messages in one read: Sends (plain and with SE, empty and not)
 * around a WRITE: each Send lands in its own receive, in order, with its
 * length and SE flag, the WRITE is placed, and nothing faults.
 */
Test(qp_rx_whole, sends_in_one_read_complete_in_order)
{
	static const struct { uint8_t op; uint32_t len; } m[] = {
		{ RDMAP_OP_SEND, 8 }, { RDMAP_OP_SEND_SE, 0 },
		{ RDMAP_OP_WRITE, 40 }, { RDMAP_OP_SEND, 200 },
		{ RDMAP_OP_SEND_SE, 13 },
	};
	uint8_t wire[4096];
	size_t len = 0;
	uint32_t msn = 1;
	int nrecv = 0;

	setup(true, 4);
	for (int i = 0; i < 5; i++)
		post_recv(60 + (uint64_t)i, 512 * (size_t)i);
	g_term = -1;
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		if (m[i].op == RDMAP_OP_WRITE) {
			struct rdmap_hdr h = { .opcode = RDMAP_OP_WRITE };
			uint8_t ulpdu[64 + 64];
			struct mpa_tx tx;
			int hl, n;

			h.ddp.tagged = true;
			h.ddp.last = true;
			h.ddp.t.stag = g_dmr.stag;
			h.ddp.t.to = g_dmr.iova + 0x3000;
			hl = rdmap_hdr_build(&h, ulpdu, 64);
			memcpy(ulpdu + hl, g_src + 100, m[i].len);
			mpa_tx_init(&tx, true, false);
			n = mpa_fpdu_encode(&tx, ulpdu, (size_t)hl + m[i].len,
					    wire + len, sizeof(wire) - len);
			cr_assert_gt(n, 0);
			len += (size_t)n;
			continue;
		}
		len += send_fpdu(wire + len, sizeof(wire) - len, m[i].op,
				 msn++, 16 * i, m[i].len, NULL);
	}
	feed_one_read(wire, len);
	cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_RTS, "term %#x",
		     g_term);
	cr_assert_eq(g_rx.ncqe, 4);
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		const struct rdmap_cqe *c = &g_rx.cqe[nrecv];

		if (m[i].op == RDMAP_OP_WRITE)
			continue;
		cr_assert_eq(c->wr_id, 60 + (uint64_t)nrecv);
		cr_assert_eq(c->status, RDMAP_WC_SUCCESS);
		cr_assert_eq(c->byte_len, m[i].len);
		cr_assert_eq(c->solicited, m[i].op == RDMAP_OP_SEND_SE);
		cr_assert_eq(memcmp(g_dst + 512 * (size_t)nrecv, g_src + 16 * i,
				    m[i].len), 0, "message %zu", i);
		nrecv++;
	}
	cr_assert_eq(memcmp(g_dst + 0x3000, g_src + 100, 40), 0);
	/* The next Send must carry MSN 5: one with 4 again is refused. */
	len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND, 4, 0, 8, NULL);
	feed_one_read(wire, len);
	cr_assert_eq(g_term, 0x1203, "MSN out of range: %#x", g_term);
	teardown();
}

static void rv_zero(uint8_t *u) { u[1] &= 0x3f; }
static void qn_one(uint8_t *u) { u[9] = 1; }
static void mo_four(uint8_t *u) { u[17] = 4; }
static void not_last(uint8_t *u) { u[0] &= (uint8_t)~0x40; }
static void dv_two(uint8_t *u) { u[0] = (uint8_t)((u[0] & ~3) | 2); }

/*
 * Sends that the general path must refuse are still refused, with the
 * Terminate RFC 5040 / 5041 name, when they arrive whole: wrong MSN,
 * no receive posted, longer than the receive (which completes with a
 * length error), RDMAP or DDP version, QN, a first segment (L clear:
 * the message has not ended, no completion), a bad CRC; a last segment
 * at MO 4 is placed at 4 and completes with 12 octets.
 */
Test(qp_rx_whole, faults_are_named_as_on_the_general_path)
{
	static const struct {
		const char *what;
		uint32_t msn, len;
		bool posted;
		void (*tamper)(uint8_t *);
		int term;       /* -1: none, the QP stays up */
		int recv_status; /* -1: no receive completion */
	} c[] = {
		{ "MSN 2 first", 2, 8, true, NULL, 0x1203, -1 },
		{ "no receive", 1, 8, false, NULL, 0x1202, -1 },
		{ "too long", 1, 513, true, NULL, 0x1205,
		  RDMAP_WC_LOC_LEN_ERR },
		{ "RV 0", 1, 8, true, rv_zero, 0x0205, -1 },
		{ "DV 2", 1, 8, true, dv_two, 0x1206, -1 },
		{ "QN 1", 1, 8, true, qn_one, 0x1201, -1 },
		/* A last segment at MO 4: placed at 4, 12 octets long. */
		{ "MO 4", 1, 8, true, mo_four, -1, RDMAP_WC_SUCCESS },
		{ "L clear", 1, 8, true, not_last, -1, -1 },
	};
	uint8_t wire[1024];

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		size_t len;

		setup(true, 4);
		g_term = -1;
		if (c[i].posted)
			post_recv(70, 0);
		len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND, c[i].msn,
				0, c[i].len, c[i].tamper);
		feed_one_read(wire, len);
		cr_assert_eq(g_term, c[i].term, "%s: Terminate %#x, not %#x",
			     c[i].what, g_term, c[i].term);
		if (c[i].term >= 0)
			cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_ERROR,
				     "%s", c[i].what);
		else
			cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_RTS,
				     "%s", c[i].what);
		if (c[i].recv_status >= 0) {
			cr_assert_geq(g_rx.ncqe, 1, "%s", c[i].what);
			cr_assert_eq(g_rx.cqe[0].wr_id, 70);
			cr_assert_eq(g_rx.cqe[0].status, c[i].recv_status,
				     "%s: status %u", c[i].what,
				     g_rx.cqe[0].status);
			if (c[i].tamper == mo_four) {
				cr_assert_eq(g_rx.cqe[0].byte_len, 12);
				cr_assert_eq(memcmp(g_dst + 4, g_src, 8), 0);
			}
		} else {
			for (int k = 0; k < g_rx.ncqe; k++)
				cr_assert_neq(g_rx.cqe[k].status,
					      RDMAP_WC_SUCCESS,
					      "%s: a receive completed",
					      c[i].what);
		}
		teardown();
	}

	/* A bad CRC: the MPA Terminate, nothing placed or completed. */
	setup(true, 4);
	g_term = -1;
	post_recv(70, 0);
	{
		size_t len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND, 1,
				       0, 8, NULL);

		wire[len - 1] ^= 1;
		feed_one_read(wire, len);
	}
	cr_assert_eq(g_term, mpa_error_term(MPA_ERR_CRC));
	cr_assert_eq(g_dst[0], 0xee, "nothing placed");
	for (int k = 0; k < g_rx.ncqe; k++)
		cr_assert_neq(g_rx.cqe[k].status, RDMAP_WC_SUCCESS);
	teardown();
}

/* ---- a whole Send into a one-SGE receive (rx_send_small) ---- */

/* A receive of the SGEs sg[0..n) (length: their sum). */
static void post_recv_sges(uint64_t wr_id, const struct rdmap_sge *sg, int n)
{
	struct rdmap_ring *rq = rdmap_qp_rq(g_rx.qp);

	qp_rq_post_at(g_rx.qp, atomic_load(&rq->tail), wr_id, sg, n);
}

/*
 * Sends each alone in a read, as a ping-pong gets them: the completion
 * (wr_id, RECV, length, SE, no Invalidate), the octets, the RQ slot
 * given back, the MSN that the next Send must carry, what rx_done
 * returns (nothing partial) and the statistics (FPDUs, messages and
 * octets per opcode), as the general path keeps them.
 */
Test(qp_rx_small, sends_complete_count_and_advance)
{
	static const struct { uint8_t op; uint32_t len; } m[] = {
		{ RDMAP_OP_SEND, 8 }, { RDMAP_OP_SEND_SE, 0 },
		{ RDMAP_OP_SEND, 512 }, { RDMAP_OP_SEND_SE, 13 },
	};
	const struct rdmap_qp_stats *st;
	struct rdmap_ring *rq;
	uint8_t wire[1024];

	setup(true, 4);
	rq = rdmap_qp_rq(g_rx.qp);
	st = rdmap_qp_stats(g_rx.qp);
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		struct iovec iov[RDMAP_MAX_SGE + 1];
		size_t len;
		int n, ret;

		post_recv(80 + i, 512 * i);
		len = send_fpdu(wire, sizeof(wire), m[i].op, 1 + (uint32_t)i,
				32 * i, m[i].len, NULL);
		n = rdmap_qp_rx_want(g_rx.qp, iov, RDMAP_MAX_SGE + 1);
		cr_assert_eq(n, 1);
		memcpy(iov[0].iov_base, wire, len);
		ret = rdmap_qp_rx_done(g_rx.qp, len);
		cr_assert_eq(ret & RDMAP_RX_PARTIAL, 0, "Send %zu", i);
		cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_RTS,
			     "Send %zu: Terminate %#x", i, g_term);
		cr_assert_eq(g_rx.ncqe, (int)i + 1);
		cr_assert_eq(g_rx.cqe[i].wr_id, 80 + i);
		cr_assert_eq(g_rx.cqe[i].status, RDMAP_WC_SUCCESS);
		cr_assert_eq(g_rx.cqe[i].opcode, RDMAP_WC_RECV);
		cr_assert(g_rx.cqe[i].recv);
		cr_assert_not(g_rx.cqe[i].with_inv);
		cr_assert_eq(g_rx.cqe[i].byte_len, m[i].len);
		cr_assert_eq(g_rx.cqe[i].solicited,
			     m[i].op == RDMAP_OP_SEND_SE);
		cr_assert_eq(memcmp(g_dst + 512 * i, g_src + 32 * i, m[i].len),
			     0, "Send %zu placed", i);
		cr_assert_eq(atomic_load(&rq->head), (uint32_t)i + 1,
			     "slot given back");
	}
	/* After its payload, the next receive's area is untouched. */
	cr_assert_eq(g_dst[512 * 3 + 13], 0xee);
	cr_assert_eq(atomic_load(&st->rx_fpdus), 4);
	cr_assert_eq(atomic_load(&st->rx_msgs[RDMAP_OP_SEND]), 2);
	cr_assert_eq(atomic_load(&st->rx_msgs[RDMAP_OP_SEND_SE]), 2);
	cr_assert_eq(atomic_load(&st->rx_octets[RDMAP_OP_SEND]), 8 + 512);
	cr_assert_eq(atomic_load(&st->rx_octets[RDMAP_OP_SEND_SE]), 13);
	/* MSN 5 is next: with no receive posted it is "no buffer" (MSN in
	 * range), where MSN 4 again would be out of range. */
	{
		size_t len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND, 5,
				       0, 8, NULL);

		g_term = -1;
		feed_one_read(wire, len);
		cr_assert_eq(g_term, 0x1202, "Terminate %#x", g_term);
	}
	teardown();
}

static void inv_on(uint8_t *u)
{
	/* Send with Invalidate of STag 0x5a5a5a00. */
	u[1] = (uint8_t)((u[1] & ~0x0f) | RDMAP_OP_SEND_INV);
	u[2] = 0x5a;
	u[3] = 0x5a;
	u[4] = 0x5a;
	u[5] = 0x00;
}

/*
 * Receives that the one-pass path leaves to the general one, and what
 * the general one makes of them: two SGEs (the octets split across
 * them), an empty SGE before the one that takes the octets, an SGE past
 * its MR's end, an lkey that names no MR, an MR that is invalid, of
 * another PD or without local write access (each a local protection
 * error and a local catastrophic Terminate), and a Send with Invalidate
 * (refused: wisp's MRs cannot be invalidated remotely).
 */
Test(qp_rx_small, receives_it_does_not_take_complete_as_before)
{
	enum { OK, PROT, INV };
	static const struct {
		const char *what;
		int kind;
	} c[] = {
		{ "two SGEs", OK }, { "empty SGE first", OK },
		{ "SGE past the MR", PROT }, { "no such lkey", PROT },
		{ "MR invalid", PROT }, { "MR of another PD", PROT },
		{ "MR without local write", PROT },
		{ "Send with Invalidate", INV },
	};
	uint8_t wire[1024];

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct rdmap_sge sg[2];
		size_t len;
		int nsg = 1;

		setup(true, 4);
		sg[0] = (struct rdmap_sge){ g_dmr.iova + 100, 5, g_dmr.stag };
		sg[1] = (struct rdmap_sge){ g_dmr.iova + 300, 507, g_dmr.stag };
		switch (i) {
		case 0:
			nsg = 2;
			break;
		case 1:
			sg[0].length = 0;
			nsg = 2;
			break;
		case 2:
			sg[0] = (struct rdmap_sge){ g_dmr.iova + sizeof(g_dst) - 4,
						    8, g_dmr.stag };
			break;
		case 3:
			sg[0].lkey ^= 0xff;
			sg[0].length = 64;
			break;
		case 4:
			atomic_store(&g_dmr.valid, false);
			sg[0].length = 64;
			break;
		case 5:
			g_dmr.pd = (const void *)2;
			sg[0].length = 64;
			break;
		case 6:
			g_dmr.access = RDMAP_ACC_REMOTE_WRITE;
			sg[0].length = 64;
			break;
		default:
			sg[0].length = 64;
			break;
		}
		post_recv_sges(90, sg, nsg);
		g_term = -1;
		len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND, 1, 40, 8,
				c[i].kind == INV ? inv_on : NULL);
		feed_one_read(wire, len);
		cr_assert_eq(g_rx.ncqe, 1, "%s", c[i].what);
		cr_assert_eq(g_rx.cqe[0].wr_id, 90, "%s", c[i].what);
		if (c[i].kind == OK) {
			cr_assert_eq(g_rx.cqe[0].status, RDMAP_WC_SUCCESS,
				     "%s", c[i].what);
			cr_assert_eq(g_rx.cqe[0].byte_len, 8);
			cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_RTS,
				     "%s", c[i].what);
			if (i == 0) {
				cr_assert_eq(memcmp(g_dst + 100, g_src + 40, 5),
					     0);
				cr_assert_eq(memcmp(g_dst + 300, g_src + 45, 3),
					     0);
				cr_assert_eq(g_dst[105], 0xee);
			} else {
				cr_assert_eq(memcmp(g_dst + 300, g_src + 40, 8),
					     0);
				cr_assert_eq(g_dst[100], 0xee);
			}
		} else {
			cr_assert_eq(g_rx.cqe[0].status,
				     c[i].kind == PROT ?
				     RDMAP_WC_LOC_PROT_ERR :
				     RDMAP_WC_REM_INV_REQ_ERR,
				     "%s: status %u", c[i].what,
				     g_rx.cqe[0].status);
			cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_ERROR,
				     "%s", c[i].what);
			cr_assert_eq(g_term, c[i].kind == PROT ? 0x0000 : 0x0109,
				     "%s: Terminate %#x", c[i].what, g_term);
		}
		/* Restore what the case changed before the MR goes. */
		atomic_store(&g_dmr.valid, true);
		g_dmr.pd = PD;
		teardown();
	}
}

static bool g_srq_has;
static struct rdmap_recv_wr g_srq_wr;

static bool srq_pop(void *arg, struct rdmap_recv_wr *out)
{
	(void)arg;
	if (!g_srq_has)
		return false;
	*out = g_srq_wr;
	g_srq_has = false;
	return true;
}

/* A QP on an SRQ: the general path takes the receive from it. */
Test(qp_rx_small, srq_receive_takes_the_general_path)
{
	static const struct rdmap_qp_ops srq_ops = {
		.complete = on_complete, .fatal = on_fatal, .srq_pop = srq_pop,
	};
	struct rdmap_qp_cfg cfg = { .pd = PD, .stags = &g_t, .ops = &srq_ops,
				    .ops_arg = &g_rx, .sq_size = 4,
				    .rq_size = 8, .use_srq = true };
	struct rdmap_stream_cfg sc = { .ird = 4, .ord = 4, .mulpdu = MULPDU,
				       .crc = true };
	uint8_t wire[1024];
	size_t len;

	setup(true, 4);
	rdmap_qp_destroy(g_rx.qp);
	memset(&g_rx, 0, sizeof(g_rx));
	g_rx.qp = rdmap_qp_create(&cfg);
	cr_assert_not_null(g_rx.qp);
	cr_assert_eq(rdmap_qp_start(g_rx.qp, &sc), 0);
	g_srq_wr = (struct rdmap_recv_wr){
		.wr_id = 99, .num_sge = 1, .length = 64,
		.sge = { { g_dmr.iova + 64, 64, g_dmr.stag } },
	};
	g_srq_has = true;
	len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND_SE, 1, 8, 8, NULL);
	feed_one_read(wire, len);
	cr_assert_not(g_srq_has, "taken from the SRQ");
	cr_assert_eq(g_rx.ncqe, 1);
	cr_assert_eq(g_rx.cqe[0].wr_id, 99);
	cr_assert_eq(g_rx.cqe[0].status, RDMAP_WC_SUCCESS);
	cr_assert(g_rx.cqe[0].solicited);
	cr_assert_eq(memcmp(g_dst + 64, g_src + 8, 8), 0);
	teardown();
}

/*
 * rdmap_qp_rx_want_staged: between FPDUs, the stage, as rdmap_qp_rx_want
 * gives it; inside an FPDU's payload (a Send whose header came alone)
 * and once the QP failed, 0 (the caller locks and asks rx_want).
 */
Test(qp_rx_small, staged_want_only_between_fpdus_in_rts)
{
	struct iovec a[RDMAP_MAX_SGE + 1], b[RDMAP_MAX_SGE + 1];
	uint8_t wire[1024];
	size_t len;

	setup(true, 4);
	post_recv(5, 0);
	cr_assert_eq(rdmap_qp_rx_want_staged(g_rx.qp, a, RDMAP_MAX_SGE + 1),
		     1);
	cr_assert_eq(rdmap_qp_rx_want(g_rx.qp, b, RDMAP_MAX_SGE + 1), 1);
	cr_assert_eq(a[0].iov_base, b[0].iov_base);
	cr_assert_eq(a[0].iov_len, b[0].iov_len);
	/* The length field and header of a Send, its payload not yet. */
	len = send_fpdu(wire, sizeof(wire), RDMAP_OP_SEND, 1, 0, 200, NULL);
	memcpy(b[0].iov_base, wire, 2 + DDP_UNTAGGED_HDR_LEN);
	rdmap_qp_rx_done(g_rx.qp, 2 + DDP_UNTAGGED_HDR_LEN);
	cr_assert_eq(rdmap_qp_rx_want_staged(g_rx.qp, a, RDMAP_MAX_SGE + 1),
		     0, "inside a payload");
	/* The rest: the Send completes, and the stage is offered again. */
	feed(wire + 2 + DDP_UNTAGGED_HDR_LEN, len - 2 - DDP_UNTAGGED_HDR_LEN);
	cr_assert_eq(g_rx.ncqe, 1);
	cr_assert_eq(g_rx.cqe[0].status, RDMAP_WC_SUCCESS);
	cr_assert_eq(rdmap_qp_rx_want_staged(g_rx.qp, a, RDMAP_MAX_SGE + 1),
		     1);
	rdmap_qp_shutdown(g_rx.qp);
	cr_assert_eq(rdmap_qp_rx_want_staged(g_rx.qp, a, RDMAP_MAX_SGE + 1),
		     0, "failed QP");
	teardown();
}

/* A WRITE FPDU (CRC on) of len octets of the source from src_off to
 * TO to under stag, L as given; tamper edits the ULPDU first. */
static size_t write_fpdu(uint8_t *out, size_t cap, uint32_t stag,
			 uint64_t to, bool last, size_t src_off, uint32_t len,
			 void (*tamper)(uint8_t *ulpdu))
{
	struct rdmap_hdr h = { .opcode = RDMAP_OP_WRITE };

	h.ddp.tagged = true;
	h.ddp.last = last;
	h.ddp.t.stag = stag;
	h.ddp.t.to = to;
	return hdr_fpdu(out, cap, &h, DDP_TAGGED_HDR_LEN, src_off, len,
			tamper);
}

/*
 * Small WRITEs, each whole in a read (the one-pass rx_write_small) and
 * several in one read (the kept MR reference): placed, counted as the
 * general path counts them, nothing completed, the QP up; then the MR
 * can still be removed (no reference left behind: rdmap_stag_remove
 * would wait forever).
 */
Test(qp_rx_small, writes_place_and_count)
{
	static const struct { uint64_t off; uint32_t len; } w[] = {
		{ 0x100, 8 }, { 0x200, 40 }, { 0x3fff - 0x3000, 1 },
		{ 0x300, 512 },
	};
	const struct rdmap_qp_stats *st;
	uint8_t wire[4096];
	size_t len = 0;
	uint64_t octets = 0;

	setup(true, 4);
	st = rdmap_qp_stats(g_rx.qp);
	for (size_t i = 0; i < 2; i++) {
		len = write_fpdu(wire, sizeof(wire), g_dmr.stag,
				 g_dmr.iova + w[i].off, true, 64 * i, w[i].len,
				 NULL);
		feed_one_read(wire, len);
		octets += w[i].len;
	}
	len = 0;
	for (size_t i = 2; i < 4; i++) {
		len += write_fpdu(wire + len, sizeof(wire) - len, g_dmr.stag,
				  g_dmr.iova + w[i].off, true, 64 * i,
				  w[i].len, NULL);
		octets += w[i].len;
	}
	feed_one_read(wire, len);
	cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_RTS, "Terminate %#x",
		     g_term);
	cr_assert_eq(g_rx.ncqe, 0);
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(memcmp(g_dst + w[i].off, g_src + 64 * i, w[i].len),
			     0, "WRITE %zu placed", i);
	cr_assert_eq(g_dst[0x100 + 8], 0xee);
	cr_assert_eq(g_dst[0xff], 0xee);
	cr_assert_eq(atomic_load(&st->rx_fpdus), 4);
	cr_assert_eq(atomic_load(&st->rx_msgs[RDMAP_OP_WRITE]), 4);
	cr_assert_eq(atomic_load(&st->rx_octets[RDMAP_OP_WRITE]), octets);
	teardown();
}

static void write_rsvd(uint8_t *u) { u[1] |= 0x30; }
static void write_dv2(uint8_t *u) { u[0] = (uint8_t)((u[0] & ~3) | 2); }

/*
 * WRITEs that the one-pass path leaves to the general one: refused
 * with the Terminate RFC 5041 / 5040 name it (past the MR, wrong key,
 * another PD, an MR or a QP without remote write, DDP version 2),
 * nothing placed; or placed by it (a segment with L clear and the last
 * one after it, the RDMAP reserved bits set, an empty WRITE).
 */
Test(qp_rx_small, writes_it_does_not_take)
{
	enum { PLACED = -1 };
	static const struct {
		const char *what;
		int term;
	} c[] = {
		{ "past the MR", 0x1101 }, { "wrong key", 0x1100 },
		{ "another PD", 0x1102 }, { "MR without remote write", 0x0102 },
		{ "QP without remote write", 0x0102 }, { "DV 2", 0x1104 },
		{ "L clear, then the last", PLACED },
		{ "reserved bits", PLACED }, { "empty", PLACED },
	};
	uint8_t wire[2048];

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint32_t stag;
		uint64_t to;
		size_t len;

		setup(true, 4);
		stag = g_dmr.stag;
		to = g_dmr.iova + 0x400;
		g_term = -1;
		switch (i) {
		case 0:
			to = g_dmr.iova + sizeof(g_dst) - 4;
			break;
		case 1:
			stag ^= 0x1;
			break;
		case 2:
			g_dmr.pd = (const void *)2;
			break;
		case 3:
			g_dmr.access = RDMAP_ACC_LOCAL_WRITE;
			break;
		case 4:
			rdmap_qp_set_access(g_rx.qp, 0);
			break;
		default:
			break;
		}
		if (i == 6) {
			len = write_fpdu(wire, sizeof(wire), stag, to, false, 0,
					 8, NULL);
			len += write_fpdu(wire + len, sizeof(wire) - len, stag,
					  to + 8, true, 8, 8, NULL);
		} else {
			len = write_fpdu(wire, sizeof(wire), stag, to, true, 0,
					 i == 8 ? 0 : 16,
					 i == 5 ? write_dv2 :
					 i == 7 ? write_rsvd : NULL);
		}
		feed_one_read(wire, len);
		cr_assert_eq(g_term, c[i].term, "%s: Terminate %#x, not %#x",
			     c[i].what, g_term, c[i].term);
		if (c[i].term == PLACED) {
			cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_RTS,
				     "%s", c[i].what);
			if (i != 8)
				cr_assert_eq(memcmp(g_dst + 0x400, g_src, 16),
					     0, "%s: placed", c[i].what);
			else
				cr_assert_eq(g_dst[0x400], 0xee);
		} else {
			cr_assert_eq(rdmap_qp_state(g_rx.qp), RDMAP_QP_ERROR,
				     "%s", c[i].what);
			for (size_t k = 0; k < sizeof(g_dst); k++)
				cr_assert_eq(g_dst[k], 0xee,
					     "%s: octet %zu placed", c[i].what,
					     k);
		}
		g_dmr.pd = PD;
		teardown();
	}
}
