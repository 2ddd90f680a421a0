// SPDX-License-Identifier: MIT
/*
 * test_qp_bigfpdu.c - FPDUs larger than the path's segment (wisp's
 * large-FPDU extension over a link of 1448-octet segments), without I/O:
 * how many octets the sender hands over per gathered send, and a receiver
 * fed by a "socket" that delivers the stream in odd-sized pieces, so that
 * direct reads into the MR stop short, the rest of a payload comes in a
 * staged read with the next FPDU's start, and every octet must still be
 * placed once, with the CRC on or off, and a corrupt CRC caught.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "mpa.h"
#include "rdmap_qp.h"
#include "rdmap_qp_stats.h"
#include "rdmap_stag.h"

#define BF_EMSS      1448u
#define BF_SMALL     64u            /* SMALL_READ */
#define BF_DIRECT    8192u          /* DIRECT_MIN */
#define BF_NWR       3
#define BF_WIRE      (2u << 20)

/* Three WRITEs whose FPDUs are large, then a small tail FPDU each. */
static const uint32_t bf_len[BF_NWR] = { 1u << 20, 200001, 70001 };
static const uint64_t bf_at[BF_NWR] = { 0, 1u << 20, (1u << 20) + 200001 };
#define BF_TOTAL ((1u << 20) + 200001 + 70001)

static uint8_t bf_src[BF_TOTAL], bf_dst[BF_TOTAL], bf_wire[BF_WIRE];
static int bf_ncqe;

static void bf_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	cr_assert_eq(c->status, RDMAP_WC_SUCCESS);
	bf_ncqe++;
}

static const struct rdmap_qp_ops bf_ops = { .complete = bf_complete };

struct bf {
	struct rdmap_stag_table t;
	struct rdmap_mr smr, dmr;
	struct rdmap_qp *tx, *rx;
};

static void bf_init(struct bf *b, bool crc, uint32_t emss)
{
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &b->t,
				    .ops = &bf_ops, .sq_size = 8, .rq_size = 4,
				    .access = RDMAP_ACC_REMOTE_WRITE };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .crc = crc,
				      .mulpdu = MPA_ULPDU_SEND_MAX,
				      .emss = emss };

	memset(b, 0, sizeof(*b));
	bf_ncqe = 0;
	for (size_t i = 0; i < sizeof(bf_src); i++)
		bf_src[i] = (uint8_t)(i * 131 + (i >> 11) + 5);
	memset(bf_dst, 0, sizeof(bf_dst));
	b->smr = (struct rdmap_mr){ .addr = bf_src, .iova = 0x10000,
				    .length = sizeof(bf_src), .pd = (void *)1 };
	b->dmr = (struct rdmap_mr){ .addr = bf_dst, .iova = 0x4000000,
				    .length = sizeof(bf_dst), .pd = (void *)1,
				    .access = RDMAP_ACC_REMOTE_WRITE };
	cr_assert_eq(rdmap_stag_table_init(&b->t, 16), 0);
	cr_assert_eq(rdmap_stag_insert(&b->t, &b->smr), 0);
	cr_assert_eq(rdmap_stag_insert(&b->t, &b->dmr), 0);
	atomic_store(&b->smr.valid, true);
	atomic_store(&b->dmr.valid, true);
	b->tx = rdmap_qp_create(&cfg);
	b->rx = rdmap_qp_create(&cfg);
	cr_assert(b->tx && b->rx);
	cr_assert_eq(rdmap_qp_start(b->tx, &s), 0);
	cr_assert_eq(rdmap_qp_start(b->rx, &s), 0);
}

static void bf_fini(struct bf *b)
{
	rdmap_qp_destroy(b->tx);
	rdmap_qp_destroy(b->rx);
	rdmap_stag_table_fini(&b->t);
}

/* Post the WRITEs and gather everything the sender hands over into
 * bf_wire; *max_send: the largest gathered send. Returns its length. */
static size_t bf_send(struct bf *b, size_t *max_send)
{
	static struct iovec iov[1024];
	size_t len = 0;

	for (uint32_t i = 0; i < BF_NWR; i++) {
		struct rdmap_send_wr *w = rdmap_ring_slot(rdmap_qp_sq(b->tx), i);

		memset(w, 0, sizeof(*w));
		w->wr_id = i;
		w->opcode = RDMAP_WR_WRITE;
		w->flags = RDMAP_WR_SIGNALED;
		w->num_sge = 1;
		w->sge[0] = (struct rdmap_sge){ b->smr.iova + bf_at[i],
						bf_len[i], b->smr.stag };
		w->length = bf_len[i];
		w->rkey = b->dmr.stag;
		w->remote_addr = b->dmr.iova + bf_at[i];
	}
	atomic_store(&rdmap_qp_sq(b->tx)->tail, BF_NWR);
	*max_send = 0;
	for (int n; (n = rdmap_qp_tx_fill(b->tx, iov, 1024)) > 0;) {
		size_t bytes = 0;

		for (int i = 0; i < n; i++) {
			cr_assert_leq(len + iov[i].iov_len, sizeof(bf_wire));
			memcpy(bf_wire + len, iov[i].iov_base, iov[i].iov_len);
			len += iov[i].iov_len;
			bytes += iov[i].iov_len;
		}
		if (bytes > *max_send)
			*max_send = bytes;
		rdmap_qp_tx_done(b->tx, bytes);
	}
	cr_assert_eq(bf_ncqe, BF_NWR, "every WRITE completed at the sender");
	bf_ncqe = 0;
	return len;
}

static bool in_dst(const void *p)
{
	return (const uint8_t *)p >= bf_dst &&
	       (const uint8_t *)p < bf_dst + sizeof(bf_dst);
}

/* Odd pieces, as TCP queues them: GSO packets, single segments, a few
 * octets, one octet. */
/* The wire's octets from *off up to arrived (what TCP has queued) into
 * the iovecs a rdmap_qp_rx_want asked for; returns how many, and adds
 * those that went to the stage rather than into place to *staged. */
static size_t bf_copy_in(const struct iovec *iov, int n, size_t *off,
			 size_t arrived, size_t *staged)
{
	size_t got = 0;

	for (int i = 0; i < n && *off < arrived; i++) {
		size_t k = arrived - *off < iov[i].iov_len ?
			   arrived - *off : iov[i].iov_len;

		memcpy(iov[i].iov_base, bf_wire + *off, k);
		*off += k;
		got += k;
		if (!in_dst(iov[i].iov_base))
			*staged += k;
	}
	return got;
}

static const size_t bf_piece[] = { 65160, 1448, 1, 2896, 383, 7, 9001,
				   65160, 65160, 64, 65, 1447, 4344, 31 };

/*
 * Feed the stream to the receiver: each recv "arrives" the next piece,
 * then takes what the QP asks for up to what has arrived (a recvmsg
 * brings what TCP has queued). Checks the rule of the staged read after
 * a direct read that stopped short with less than DIRECT_MIN of its run
 * left: it asks for that rest plus SMALL_READ (the trailer and the next
 * header), not SMALL_READ alone. Returns the number of reads.
 */
static int bf_receive(struct bf *b, size_t len, int *rests)
{
	struct iovec iov[8];
	size_t arrived = 0, off = 0, short_rest = 0;
	int reads = 0, pi = 0;

	*rests = 0;
	while (off < len && rdmap_qp_state(b->rx) == RDMAP_QP_RTS) {
		int n = rdmap_qp_rx_want(b->rx, iov, 8);
		size_t asked = 0, asked_dir = 0, got, staged = 0;
		bool direct;

		cr_assert_gt(n, 0);
		direct = in_dst(iov[0].iov_base);
		for (int i = 0; i < n; i++) {
			asked += iov[i].iov_len;
			if (in_dst(iov[i].iov_base))
				asked_dir += iov[i].iov_len;
		}
		if (short_rest && !direct) {
			cr_assert_eq(asked, short_rest + BF_SMALL,
				     "after a short direct read with %zu left: "
				     "a staged read of %zu", short_rest, asked);
			(*rests)++;
		}
		arrived += bf_piece[pi++ % (sizeof(bf_piece) /
					    sizeof(bf_piece[0]))];
		if (arrived > len)
			arrived = len;
		got = bf_copy_in(iov, n, &off, arrived, &staged);
		/* The rest of a run after a direct read that stopped short
		 * (a direct read may also offer the stage after the run). */
		short_rest = direct && got && got < asked_dir &&
			     asked_dir - got < BF_DIRECT ? asked_dir - got : 0;
		rdmap_qp_rx_done(b->rx, got);
		reads++;
	}
	return reads;
}

static void bf_roundtrip(bool crc)
{
	struct bf b;
	size_t max_send, len;
	int reads, rests;

	bf_init(&b, crc, BF_EMSS);
	len = bf_send(&b, &max_send);
	reads = bf_receive(&b, len, &rests);
	cr_assert_eq(rdmap_qp_state(b.rx), RDMAP_QP_RTS);
	cr_assert_eq(bf_ncqe, 0, "WRITEs complete nothing at the target");
	cr_assert_eq(memcmp(bf_dst, bf_src, sizeof(bf_src)), 0,
		     "every octet placed where it belongs");
	cr_assert_eq(rdmap_qp_stats(b.rx)->crc_errors, 0);
	cr_assert_gt(rests, 0, "some direct reads stopped short");
	cr_log_info("CRC %s: %zu octets, %d reads, %d staged rests", crc ?
		    "on" : "off", len, reads, rests);
	bf_fini(&b);
}

Test(qp_bigfpdu, odd_pieces_place_every_octet_crc_on)
{
	bf_roundtrip(true);
}

Test(qp_bigfpdu, odd_pieces_place_every_octet_crc_off)
{
	bf_roundtrip(false);
}

/* One flipped octet in the middle of a large payload (received straight
 * into the MR) fails the CRC: the QP leaves RTS and counts it. */
Test(qp_bigfpdu, corrupt_crc_in_a_placed_payload_is_caught)
{
	struct bf b;
	size_t max_send, len;
	int rests;

	bf_init(&b, true, BF_EMSS);
	len = bf_send(&b, &max_send);
	/* Inside the second FPDU's payload: past the first FPDU (about
	 * 64 KiB) and its successor's headers. */
	bf_wire[MPA_ULPDU_SEND_MAX + 30000] ^= 0x40;
	bf_receive(&b, len, &rests);
	cr_assert_neq(rdmap_qp_state(b.rx), RDMAP_QP_RTS);
	cr_assert_eq(rdmap_qp_stats(b.rx)->crc_errors, 1);
	/* The first FPDU was placed before the bad one arrived. */
	cr_assert_eq(memcmp(bf_dst, bf_src, 60000), 0);
	bf_fini(&b);
}

/*
 * With a path MSS of 1448 a gathered send carries about as many octets
 * as 128 such segments (plus at most one more FPDU), not 1 MiB; without
 * a known MSS, or with loopback's, the large batch still takes up to
 * 1 MiB.
 */
Test(qp_bigfpdu, gathered_send_bounded_by_the_path_segment)
{
	struct bf b;
	size_t max_send, len;

	bf_init(&b, false, BF_EMSS);
	len = bf_send(&b, &max_send);
	cr_assert_gt(len, BF_TOTAL);
	cr_assert_leq(max_send, 128 * BF_EMSS + MPA_ULPDU_SEND_MAX + 8,
		      "largest send %zu", max_send);
	cr_assert_geq(max_send, 128 * BF_EMSS, "largest send %zu", max_send);
	bf_fini(&b);

	bf_init(&b, false, 65483);
	len = bf_send(&b, &max_send);
	cr_assert_gt(len, BF_TOTAL);
	cr_assert_gt(max_send, 512u << 10, "largest send %zu", max_send);
	cr_assert_leq(max_send, (1u << 20) + MPA_ULPDU_SEND_MAX + 8);
	bf_fini(&b);

	bf_init(&b, false, 0);
	bf_send(&b, &max_send);
	cr_assert_gt(max_send, 512u << 10, "largest send %zu", max_send);
	bf_fini(&b);
}

/*
 * Loopback: the path's MSS is about 64 KiB, so a 64 KiB WRITE is one
 * large FPDU (MPA_ULPDU_SEND_MAX) and a short one with the last 782
 * octets. Every large payload after the first must go straight into the
 * MR: the short tail FPDU must not make the next WRITE's payload come
 * through the stage (a second copy), and what follows a payload (its
 * trailer, the short FPDU, the next header) comes in the same recvmsg
 * as the payload. Two "sockets": each WRITE arrives whole (one sendmsg)
 * and the receiver reads until the socket is empty before the next one
 * comes, as an engine that keeps up does; or the whole stream is there
 * at once, as for an engine that fell behind. *staged: octets read
 * into the stage. Returns the number of reads.
 */
#define LB_EMSS   65483u
#define LB_NWR    8u
#define LB_LEN    65536u

static int lb_run(bool one_by_one, size_t *staged)
{
	struct iovec iov[8];
	struct bf b;
	size_t len = 0, per, arrived = 0, off = 0;
	int reads = 0;

	bf_init(&b, false, LB_EMSS);
	for (uint32_t i = 0; i < LB_NWR; i++) {
		struct rdmap_send_wr *w = rdmap_ring_slot(rdmap_qp_sq(b.tx),
							  i);

		memset(w, 0, sizeof(*w));
		w->wr_id = i;
		w->opcode = RDMAP_WR_WRITE;
		w->num_sge = 1;
		w->sge[0] = (struct rdmap_sge){ b.smr.iova + i * LB_LEN,
						LB_LEN, b.smr.stag };
		w->length = LB_LEN;
		w->rkey = b.dmr.stag;
		w->remote_addr = b.dmr.iova + i * LB_LEN;
	}
	atomic_store(&rdmap_qp_sq(b.tx)->tail, LB_NWR);
	for (int n; (n = rdmap_qp_tx_fill(b.tx, iov, 8)) > 0;) {
		size_t bytes = 0;

		for (int i = 0; i < n; i++) {
			memcpy(bf_wire + len, iov[i].iov_base, iov[i].iov_len);
			len += iov[i].iov_len;
			bytes += iov[i].iov_len;
		}
		rdmap_qp_tx_done(b.tx, bytes);
	}
	cr_assert_eq(len % LB_NWR, 0);
	per = len / LB_NWR;
	cr_assert_gt(per, LB_LEN, "two FPDUs per WRITE: %zu octets", per);
	*staged = 0;
	while (off < len && rdmap_qp_state(b.rx) == RDMAP_QP_RTS) {
		int n = rdmap_qp_rx_want(b.rx, iov, 8);
		size_t got;

		cr_assert_gt(n, 0);
		if (off == arrived)       /* the socket was empty */
			arrived = one_by_one ? arrived + per : len;
		got = bf_copy_in(iov, n, &off, arrived, staged);
		rdmap_qp_rx_done(b.rx, got);
		reads++;
	}
	cr_assert_eq(rdmap_qp_state(b.rx), RDMAP_QP_RTS);
	cr_assert_eq(memcmp(bf_dst, bf_src, LB_NWR * LB_LEN), 0,
		     "every octet placed where it belongs");
	bf_fini(&b);
	cr_log_info("%u WRITEs of 64 KiB, %s: %d reads, %zu octets staged",
		    LB_NWR, one_by_one ? "one by one" : "all there", reads,
		    *staged);
	return reads;
}

Test(qp_bigfpdu, loopback_64k_writes_placed_directly)
{
	size_t staged;
	int reads;

	/* A header read and a payload read per WRITE; the stage takes
	 * headers, trailers and the short FPDUs, never a payload. */
	reads = lb_run(true, &staged);
	cr_assert_leq(reads, 2 * LB_NWR, "%d reads", reads);
	cr_assert_leq(staged, LB_NWR * 2048, "%zu octets staged", staged);
	/* All there: one read per WRITE, after the first read. */
	reads = lb_run(false, &staged);
	cr_assert_leq(reads, LB_NWR + 2, "%d reads", reads);
	cr_assert_leq(staged, LB_NWR * 2048, "%zu octets staged", staged);
}
