// SPDX-License-Identifier: MIT
/*
 * test_qp_mss.c - WRITEs cut into FPDUs that fit one TCP segment
 * (MULPDU 1442, MTU 1500: what a third-party peer gets, and wisp with
 * WISP_BIG_FPDU=off), without I/O. This is the stream whose per-FPDU
 * costs were cut: the sender copies each FPDU whole into the large
 * batch's copy buffer (one iovec per gathered send; above TX_COPY_MULPDU
 * it frames by reference, checked here too); the receiver parses each
 * header where it arrived in
 * the stage and prefetches the MR after each staged tagged payload; the
 * sender prefetches each next segment's source (CRC on or off) across
 * SGEs; past the first 64 KiB of a message (RX_NT_AFTER) the receiver
 * copies whole lines with streaming stores. Checked here: every octet
 * lands where it belongs and nowhere else (guard zones around the target
 * MR, the last WRITE, longer than 64 KiB, ending at the MR's very end),
 * whatever pieces the stream arrives in; a flipped payload octet fails
 * the CRC and a forged STag fails the header check, each before any
 * octet of that FPDU is placed, in the first 64 KiB of a WRITE and
 * after them.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "mpa.h"
#include "rdmap_qp.h"
#include "rdmap_qp_stats.h"
#include "rdmap_stag.h"

#define MS_MULPDU    1442u          /* 1448 - 2 (length) - 4 (CRC) */
#define MS_EMSS      1448u
/* A MULPDU above rdmap_qp_internal.h's TX_COPY_MULPDU (2048): FPDUs
 * framed by reference into the caller's buffers, not copied. */
#define MS_MULPDU_REF 4000u
#define MS_EMSS_REF   4006u
#define MS_GUARD     4096u
#define MS_DST       180000u        /* the target MR */
#define MS_SRC       140000u
#define MS_WIRE      (1u << 18)
#define MS_POISON    0xee
#define MS_NWR       4
#define MS_NT_AFTER  65536u         /* rdmap_qp_rx.c RX_NT_AFTER */

/* Each WRITE gathers three SGEs of odd lengths from scattered places. */
struct ms_wr {
	uint32_t off[3], len[3];
	uint32_t to;                /* offset in the target MR */
};

static const struct ms_wr ms_wrs[MS_NWR] = {
	{ { 5, 20011, 9000 }, { 1000, 5001, 3333 }, 0 },
	{ { 40001, 101, 33333 }, { 7777, 2897, 1 }, 9400 },
	{ { 50000, 3, 61111 }, { 8191, 13000, 8000 }, 30000 },
	/* Longer than MS_NT_AFTER; ends exactly at the end of the target
	 * MR. */
	{ { 17, 70001, 40000 }, { 40000, 41111, 30001 },
	  MS_DST - 111112 },
};

static uint8_t ms_src[MS_SRC];
static uint8_t ms_dst_mem[MS_GUARD + MS_DST + MS_GUARD];
static uint8_t ms_expect[MS_DST];
static uint8_t ms_wire[MS_WIRE];
#define ms_dst (ms_dst_mem + MS_GUARD)

static int ms_ncqe;

static void ms_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	cr_assert_eq(c->status, RDMAP_WC_SUCCESS);
	ms_ncqe++;
}

static const struct rdmap_qp_ops ms_ops = { .complete = ms_complete };

struct ms {
	struct rdmap_stag_table t;
	struct rdmap_mr smr, dmr;
	struct rdmap_qp *tx, *rx;
	uint32_t mulpdu;
	size_t wire_len;
	size_t fpdu_at[256];        /* where each FPDU starts on the wire */
	int nfpdu;
	size_t fill_end[64];        /* where each tx_fill's octets end */
	int fill_niov[64];          /* and how many iovecs it gave */
	int nfill;
};

static void ms_init_at(struct ms *m, bool crc, uint32_t mulpdu,
		       uint32_t emss)
{
	struct rdmap_qp_cfg cfg = { .pd = (void *)1, .stags = &m->t,
				    .ops = &ms_ops, .sq_size = 8, .rq_size = 4,
				    .access = RDMAP_ACC_REMOTE_WRITE };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .crc = crc,
				      .mulpdu = mulpdu, .emss = emss };

	memset(m, 0, sizeof(*m));
	m->mulpdu = mulpdu;
	ms_ncqe = 0;
	for (size_t i = 0; i < sizeof(ms_src); i++)
		ms_src[i] = (uint8_t)(i * 151 + (i >> 9) + 1);
	memset(ms_dst_mem, MS_POISON, sizeof(ms_dst_mem));
	memset(ms_expect, MS_POISON, sizeof(ms_expect));
	for (int w = 0; w < MS_NWR; w++) {
		uint32_t at = ms_wrs[w].to;

		for (int k = 0; k < 3; k++) {
			memcpy(ms_expect + at, ms_src + ms_wrs[w].off[k],
			       ms_wrs[w].len[k]);
			at += ms_wrs[w].len[k];
		}
	}
	m->smr = (struct rdmap_mr){ .addr = ms_src, .iova = 0x10000,
				    .length = sizeof(ms_src), .pd = (void *)1 };
	m->dmr = (struct rdmap_mr){ .addr = ms_dst, .iova = 0x7000000,
				    .length = MS_DST, .pd = (void *)1,
				    .access = RDMAP_ACC_REMOTE_WRITE };
	cr_assert_eq(rdmap_stag_table_init(&m->t, 16), 0);
	cr_assert_eq(rdmap_stag_insert(&m->t, &m->smr), 0);
	cr_assert_eq(rdmap_stag_insert(&m->t, &m->dmr), 0);
	atomic_store(&m->smr.valid, true);
	atomic_store(&m->dmr.valid, true);
	m->tx = rdmap_qp_create(&cfg);
	m->rx = rdmap_qp_create(&cfg);
	cr_assert(m->tx && m->rx);
	cr_assert_eq(rdmap_qp_start(m->tx, &s), 0);
	cr_assert_eq(rdmap_qp_start(m->rx, &s), 0);
}

static void ms_init(struct ms *m, bool crc)
{
	ms_init_at(m, crc, MS_MULPDU, MS_EMSS);
}

static void ms_fini(struct ms *m)
{
	rdmap_qp_destroy(m->tx);
	rdmap_qp_destroy(m->rx);
	rdmap_stag_table_fini(&m->t);
}

/* Post the WRITEs, gather the stream, note where each FPDU starts. */
static void ms_send(struct ms *m)
{
	static struct iovec iov[1024];
	size_t at = 0;

	for (uint32_t i = 0; i < MS_NWR; i++) {
		struct rdmap_send_wr *w = rdmap_ring_slot(rdmap_qp_sq(m->tx), i);
		uint32_t total = 0;

		memset(w, 0, sizeof(*w));
		w->wr_id = i;
		w->opcode = RDMAP_WR_WRITE;
		w->num_sge = 3;
		for (int k = 0; k < 3; k++) {
			w->sge[k] = (struct rdmap_sge){
				m->smr.iova + ms_wrs[i].off[k],
				ms_wrs[i].len[k], m->smr.stag };
			total += ms_wrs[i].len[k];
		}
		w->length = total;
		w->rkey = m->dmr.stag;
		w->remote_addr = m->dmr.iova + ms_wrs[i].to;
	}
	atomic_store(&rdmap_qp_sq(m->tx)->tail, MS_NWR);
	for (int n; (n = rdmap_qp_tx_fill(m->tx, iov, 1024)) > 0;) {
		size_t bytes = 0;

		for (int i = 0; i < n; i++) {
			cr_assert_leq(m->wire_len + iov[i].iov_len,
				      sizeof(ms_wire));
			memcpy(ms_wire + m->wire_len, iov[i].iov_base,
			       iov[i].iov_len);
			m->wire_len += iov[i].iov_len;
			bytes += iov[i].iov_len;
		}
		cr_assert_lt(m->nfill, 64);
		m->fill_end[m->nfill] = m->wire_len;
		m->fill_niov[m->nfill++] = n;
		rdmap_qp_tx_done(m->tx, bytes);
	}
	while (at < m->wire_len) {
		uint16_t ul = (uint16_t)(ms_wire[at] << 8 | ms_wire[at + 1]);

		cr_assert_leq(ul, m->mulpdu, "an FPDU fits one segment");
		cr_assert_lt(m->nfpdu, 256);
		m->fpdu_at[m->nfpdu++] = at;
		at += MPA_LEN_FIELD + ul + mpa_pad_len(ul) + MPA_CRC_LEN;
	}
	cr_assert_eq(at, m->wire_len);
	cr_assert_eq(ms_ncqe, 0, "unsignaled WRITEs complete nothing");
	cr_assert_gt(m->nfpdu, 3 * MS_NWR, "many one-segment FPDUs");
}

/* Feed the stream in pieces of the sizes in pieces[] (cycled): each read
 * takes what the QP asks for, up to what has arrived. */
static void ms_receive(struct ms *m, const size_t *pieces, size_t npieces)
{
	size_t arrived = 0, off = 0;
	size_t pi = 0;

	while (off < m->wire_len && rdmap_qp_state(m->rx) == RDMAP_QP_RTS) {
		struct iovec iov[8];
		int n = rdmap_qp_rx_want(m->rx, iov, 8);
		size_t got = 0;

		cr_assert_gt(n, 0);
		if (arrived == off)
			arrived += pieces[pi++ % npieces];
		if (arrived > m->wire_len)
			arrived = m->wire_len;
		for (int i = 0; i < n && off < arrived; i++) {
			size_t k = arrived - off < iov[i].iov_len ?
				   arrived - off : iov[i].iov_len;

			memcpy(iov[i].iov_base, ms_wire + off, k);
			off += k;
			got += k;
			if (k < iov[i].iov_len)
				break;
		}
		rdmap_qp_rx_done(m->rx, got);
	}
}

static void ms_guards_untouched(void)
{
	for (size_t i = 0; i < MS_GUARD; i++) {
		cr_assert_eq(ms_dst_mem[i], MS_POISON, "guard before, %zu", i);
		cr_assert_eq(ms_dst[MS_DST + i], MS_POISON,
			     "guard after, %zu", i);
	}
}

/* Odd pieces: single octets, a segment less or more one, several
 * segments and a bit, a whole 64 KiB read; headers and CRCs cut
 * anywhere. */
static const size_t ms_odd[] = { 1, 1447, 7, 1449, 2896 + 3, 65536, 2, 13,
				 4345, 500, 1448, 31 };
static const size_t ms_whole[] = { MS_WIRE };

static void ms_roundtrip(bool crc, const size_t *pieces, size_t npieces)
{
	struct ms m;

	ms_init(&m, crc);
	ms_send(&m);
	ms_receive(&m, pieces, npieces);
	cr_assert_eq(rdmap_qp_state(m.rx), RDMAP_QP_RTS);
	cr_assert_eq(atomic_load(&rdmap_qp_stats(m.rx)->rx_fpdus),
		     (uint64_t)m.nfpdu);
	for (size_t i = 0; i < MS_DST; i++)
		cr_assert_eq(ms_dst[i], ms_expect[i],
			     "octet %zu of the target: %#x, not %#x", i,
			     ms_dst[i], ms_expect[i]);
	ms_guards_untouched();
	ms_fini(&m);
}

Test(qp_mss, odd_pieces_place_every_octet_crc_on)
{
	ms_roundtrip(true, ms_odd, sizeof(ms_odd) / sizeof(ms_odd[0]));
}

Test(qp_mss, odd_pieces_place_every_octet_crc_off)
{
	ms_roundtrip(false, ms_odd, sizeof(ms_odd) / sizeof(ms_odd[0]));
}

Test(qp_mss, whole_stream_in_one_read_crc_on)
{
	ms_roundtrip(true, ms_whole, 1);
}

/*
 * The stream as RFC 5041 and RFC 5044 lay it out, built here without the
 * QP: each WRITE cut into tagged segments of at most MULPDU - 14
 * payload octets (DDP control 0x81, or 0xc1 on the last; RDMAP control
 * 0x40: RV 01, opcode RDMA Write; STag; TO), each framed on its own by
 * mpa_fpdu_encode(). Returns its length; pieces[k]: how many SGEs the
 * payload of FPDU k is gathered from.
 */
static size_t ms_expected_stream(const struct ms *m, bool crc, uint8_t *out,
				 size_t cap, int *pieces)
{
	static uint8_t ulpdu[MS_MULPDU_REF];
	struct mpa_tx tx;
	size_t len = 0;
	int nf = 0;

	mpa_tx_init(&tx, crc, false);
	for (int w = 0; w < MS_NWR; w++) {
		uint32_t total = 0, done = 0;

		for (int k = 0; k < 3; k++)
			total += ms_wrs[w].len[k];
		while (done < total) {
			uint32_t seg = total - done < m->mulpdu - 14 ?
				       total - done : m->mulpdu - 14;
			uint64_t to = m->dmr.iova + ms_wrs[w].to + done;
			int k;

			ulpdu[0] = done + seg == total ? 0xc1 : 0x81;
			ulpdu[1] = 0x40;
			for (k = 0; k < 4; k++)
				ulpdu[2 + k] = (uint8_t)(m->dmr.stag >>
							 (24 - 8 * k));
			for (k = 0; k < 8; k++)
				ulpdu[6 + k] = (uint8_t)(to >> (56 - 8 * k));
			memcpy(ulpdu + 14, ms_expect + ms_wrs[w].to + done,
			       seg);
			cr_assert_lt(nf, 256);
			/* SGEs that [done, done + seg) overlaps */
			pieces[nf] = 0;
			for (uint32_t at = 0, j = 0; j < 3; j++) {
				if (at < done + seg &&
				    at + ms_wrs[w].len[j] > done)
					pieces[nf]++;
				at += ms_wrs[w].len[j];
			}
			nf++;
			k = mpa_fpdu_encode(&tx, ulpdu, 14 + seg, out + len,
					    cap - len);
			cr_assert_gt(k, 0);
			len += (size_t)k;
			done += seg;
		}
	}
	return len;
}

/* The octets on the wire are the RFC's, whatever iovecs carry them.
 * Framed by reference (MULPDU above the copy threshold), a fill of n
 * gathered FPDUs hands the kernel one iovec per payload piece (one per
 * SGE an FPDU's payload comes from) and n + 1 for the framing (each pad
 * + CRC shares one with the next FPDU's length field and header): 2n + 1
 * where each payload is one piece. Copied (MULPDU 1442, MTU 1500), each
 * fill is one iovec, whatever the pieces. */
static void ms_wire_is_the_rfcs(bool crc, uint32_t mulpdu, uint32_t emss)
{
	static uint8_t want[MS_WIRE];
	bool copied = mulpdu == MS_MULPDU;
	int pieces[256];
	struct ms m;
	size_t len, from = 0;
	int k = 0;

	ms_init_at(&m, crc, mulpdu, emss);
	ms_send(&m);
	len = ms_expected_stream(&m, crc, want, sizeof(want), pieces);
	cr_assert_eq(m.wire_len, len);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(ms_wire[i], want[i],
			     "wire octet %zu: %#x, not %#x", i, ms_wire[i],
			     want[i]);
	for (int f = 0; f < m.nfill; f++) {
		int nf = 0, npay = 0;

		for (; k < m.nfpdu && m.fpdu_at[k] < m.fill_end[f]; k++) {
			nf++;
			npay += pieces[k];
		}
		cr_assert_gt(nf, 1);
		cr_assert_eq(m.fpdu_at[k - nf], from,
			     "fill %d starts with an FPDU", f);
		cr_assert_eq(m.fill_niov[f], copied ? 1 : npay + nf + 1,
			     "fill %d: %d iovecs for %d FPDUs of %d pieces", f,
			     m.fill_niov[f], nf, npay);
		from = m.fill_end[f];
	}
	cr_assert_eq(k, m.nfpdu);
	ms_fini(&m);
}

Test(qp_mss, wire_octets_are_the_rfcs_copied_in_one_iovec_crc_on)
{
	ms_wire_is_the_rfcs(true, MS_MULPDU, MS_EMSS);
}

Test(qp_mss, wire_octets_are_the_rfcs_copied_in_one_iovec_crc_off)
{
	ms_wire_is_the_rfcs(false, MS_MULPDU, MS_EMSS);
}

Test(qp_mss, wire_octets_are_the_rfcs_by_reference_crc_on)
{
	ms_wire_is_the_rfcs(true, MS_MULPDU_REF, MS_EMSS_REF);
}

Test(qp_mss, wire_octets_are_the_rfcs_by_reference_crc_off)
{
	ms_wire_is_the_rfcs(false, MS_MULPDU_REF, MS_EMSS_REF);
}

static size_t ms_to_of(const struct ms *m, int k)
{
	const uint8_t *h = ms_wire + m->fpdu_at[k] + MPA_LEN_FIELD;
	uint64_t to = 0;

	for (int i = 0; i < 8; i++)
		to = to << 8 | h[6 + i];
	return (size_t)(to - m->dmr.iova);
}

/* A fault in FPDU k: the QP leaves RTS and nothing outside the target
 * MR is touched (what is placed inside it: ms_check_cut()). */
static void ms_fault_run(struct ms *m, const size_t *pieces, size_t npieces)
{
	ms_receive(m, pieces, npieces);
	cr_assert_neq(rdmap_qp_state(m->rx), RDMAP_QP_RTS);
	ms_guards_untouched();
}

/* Octets of the target from FPDU k's TO to the end of its WRITE were
 * not placed; everything before k in that WRITE was. */
static void ms_check_cut(const struct ms *m, int k, int wr)
{
	size_t cut = ms_to_of(m, k);
	size_t end = ms_wrs[wr].to;

	for (int j = 0; j < 3; j++)
		end += ms_wrs[wr].len[j];
	for (size_t i = ms_wrs[wr].to; i < cut; i++)
		cr_assert_eq(ms_dst[i], ms_expect[i], "placed before: %zu", i);
	for (size_t i = cut; i < end; i++)
		cr_assert_eq(ms_dst[i], MS_POISON,
			     "octet %zu of the faulty FPDU or after placed", i);
}

/* The index of the first FPDU of WRITE wr that starts more than off
 * octets into it. */
static int ms_fpdu_past(const struct ms *m, int wr, size_t off)
{
	for (int k = 0; k < m->nfpdu; k++)
		if (ms_to_of(m, k) > ms_wrs[wr].to + off)
			return k;
	cr_assert_fail("no FPDU %zu octets into WRITE %d", off, wr);
	return -1;
}

/* The FPDU index of the middle of WRITE 1. */
static int ms_mid_of_wr1(const struct ms *m)
{
	return ms_fpdu_past(m, 1, 4000);
}

/* An FPDU of the last WRITE past its first MS_NT_AFTER octets: its
 * payload would be streamed (not the first such FPDU, so that the
 * octets before it in the message were streamed too). */
static int ms_nt_fpdu(const struct ms *m)
{
	return ms_fpdu_past(m, MS_NWR - 1, MS_NT_AFTER + 3 * MS_MULPDU);
}

Test(qp_mss, flipped_payload_octet_fails_crc_before_placing)
{
	static const size_t *const piece_sets[] = { ms_odd, ms_whole };
	static const size_t piece_n[] = { sizeof(ms_odd) / sizeof(ms_odd[0]),
					  1 };

	/* In WRITE 1, and in the last WRITE past MS_NT_AFTER. */
	for (int p = 0; p < 4; p++) {
		struct ms m;
		int k, wr = p < 2 ? 1 : MS_NWR - 1;

		ms_init(&m, true);
		ms_send(&m);
		k = wr == 1 ? ms_mid_of_wr1(&m) : ms_nt_fpdu(&m);
		/* An octet of payload in the middle of FPDU k. */
		ms_wire[m.fpdu_at[k] + MPA_LEN_FIELD + 14 + 700] ^= 0x10;
		ms_fault_run(&m, piece_sets[p % 2], piece_n[p % 2]);
		cr_assert_eq(atomic_load(&rdmap_qp_stats(m.rx)->crc_errors), 1);
		ms_check_cut(&m, k, wr);
		ms_fini(&m);
	}
}

/* Without CRC a forged STag reaches the header check, which must refuse
 * it before any octet of the FPDU is placed (the STag of FPDU k-1 was
 * good and is kept by the receiver: the check may not lean on it). */
Test(qp_mss, forged_stag_refused_before_placing)
{
	/* In WRITE 1, and in the last WRITE past MS_NT_AFTER. */
	for (int p = 0; p < 2; p++) {
		struct ms m;
		int k, wr = p ? MS_NWR - 1 : 1;

		ms_init(&m, false);
		ms_send(&m);
		k = p ? ms_nt_fpdu(&m) : ms_mid_of_wr1(&m);
		ms_wire[m.fpdu_at[k] + MPA_LEN_FIELD + 2 + 3] ^= 0x01;
		ms_fault_run(&m, ms_odd, sizeof(ms_odd) / sizeof(ms_odd[0]));
		cr_assert_eq(atomic_load(&rdmap_qp_stats(m.rx)->crc_errors),
			     0);
		ms_check_cut(&m, k, wr);
		ms_fini(&m);
	}
}

/* A TO moved past the MR's end in the last WRITE's last FPDU: a bounds
 * fault, nothing placed, nothing outside the MR touched. */
Test(qp_mss, to_past_the_mr_end_refused)
{
	struct ms m;
	int k;
	uint8_t *at;
	uint64_t to;

	ms_init(&m, false);
	ms_send(&m);
	k = m.nfpdu - 1;
	to = m.dmr.iova + ms_to_of(&m, k) + 64;
	at = ms_wire + m.fpdu_at[k] + MPA_LEN_FIELD + 6;
	for (int i = 7; i >= 0; i--, to >>= 8)
		at[i] = (uint8_t)to;
	ms_fault_run(&m, ms_odd, sizeof(ms_odd) / sizeof(ms_odd[0]));
	for (size_t i = ms_to_of(&m, k) - 64; i < MS_DST; i++)
		cr_assert_eq(ms_dst[i], MS_POISON, "octet %zu placed", i);
	ms_fini(&m);
}
