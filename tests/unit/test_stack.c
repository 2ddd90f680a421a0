/* SPDX-License-Identifier: MIT */
/*
 * Self-talk across the three codecs: two endpoints in one process run the
 * MPA exchange, then move SEND, RDMA WRITE and RDMA READ messages as real
 * FPDU streams (segmented by DDP, framed by MPA, fed back in odd-sized
 * chunks), over the whole configuration matrix:
 *     MPA rev 1 / 2  x  CRC on / off  x  markers on / off.
 * Tamper cases end in a Terminate whose codes and copied headers the
 * other side decodes.
 */
#include <errno.h>

#include "mpa.h"
#include "rdmap.h"
#include "test_util.h"

#define EMSS     1460
#define STREAM   (4u << 20)

struct config {
	int rev;
	bool crc;
	bool markers;
};

/* One direction of a connection: sender framing and receiver decoding. */
struct link {
	struct mpa_tx tx;
	struct mpa_rx rx;
	uint8_t *wire;
	size_t len;
	uint32_t mulpdu;
};

static void link_init(struct link *l, bool crc, bool markers)
{
	l->wire = malloc(STREAM);
	cr_assert_not_null(l->wire);
	l->len = 0;
	l->mulpdu = mpa_mulpdu(EMSS, markers);
	mpa_tx_init(&l->tx, crc, markers);
	mpa_rx_init(&l->rx, crc, markers, (uint16_t)l->mulpdu);
}

/* Send one DDP message: header template + payload, segmented. */
static void send_message(struct link *l, const struct rdmap_hdr *tmpl,
			 const uint8_t *payload, uint64_t len)
{
	struct ddp_seg_iter it;
	struct ddp_hdr seg;
	uint64_t off;
	uint32_t n;
	size_t hlen = rdmap_hdr_len(tmpl->opcode);
	size_t extra = hlen - ddp_hdr_len(tmpl->ddp.tagged);

	cr_assert_eq(ddp_seg_init(&it, &tmpl->ddp, len,
				  (uint32_t)(l->mulpdu - extra)), 0);
	while (ddp_seg_next(&it, &seg, &off, &n) > 0) {
		struct rdmap_hdr h = *tmpl;
		uint8_t ulpdu[MPA_ULPDU_MAX];
		int hl, w;

		h.ddp = seg;
		hl = rdmap_hdr_build(&h, ulpdu, sizeof(ulpdu));
		cr_assert_eq(hl, (int)hlen);
		if (n)
			memcpy(ulpdu + hl, payload + off, n);
		w = mpa_fpdu_encode(&l->tx, ulpdu, (size_t)hl + n,
				    l->wire + l->len, STREAM - l->len);
		cr_assert_gt(w, 0);
		l->len += (size_t)w;
	}
}

/* What the receiving endpoint owns. */
struct endpoint {
	uint8_t *recv_buf;        /* posted receive for QN 0 */
	uint64_t recv_len;
	uint32_t next_msn[RDMAP_QN__COUNT];
	uint8_t *mr;              /* one tagged buffer */
	uint32_t mr_stag;
	uint64_t mr_base;
	uint64_t mr_len;
	uint64_t sends_done;
	uint64_t send_bytes;
	struct rdmap_read_req last_rreq;
	int rreqs;
	struct rdmap_terminate term;
	bool got_term;
};

/* Place one ULPDU. Returns 0, or -EPROTO with *fault set. */
static int place(struct endpoint *ep, const uint8_t *ulpdu, size_t len,
		 struct rdmap_fault *fault)
{
	struct rdmap_hdr h;
	enum ddp_error derr;
	int hl = rdmap_hdr_parse(ulpdu, len, &h, fault);
	uint32_t pay;

	if (hl < 0)
		return hl;
	pay = (uint32_t)(len - (size_t)hl);
	if (h.ddp.tagged) {
		struct ddp_tagged_buf tb = {
			.valid = h.ddp.t.stag == ep->mr_stag,
			.same_stream = true,
			.base_to = ep->mr_base, .len = ep->mr_len,
		};

		if (ddp_check_tagged(&h.ddp, pay, &tb, &derr)) {
			*fault = rdmap_fault_ddp(derr);
			return -EPROTO;
		}
		memcpy(ep->mr + (h.ddp.t.to - ep->mr_base), ulpdu + hl, pay);
		return 0;
	}

	struct ddp_untagged_ctx uc = {
		.nqueues = RDMAP_QN__COUNT,
		.expected_msn = ep->next_msn[h.ddp.u.qn < 3 ? h.ddp.u.qn : 0],
		.msn_window = 1,
		.buffer_posted = true,
		.buffer_len = h.ddp.u.qn == RDMAP_QN_SEND ? ep->recv_len
							   : RDMAP_TERM_MAX_LEN,
	};
	if (ddp_check_untagged(&h.ddp, pay, &uc, &derr)) {
		*fault = rdmap_fault_ddp(derr);
		return -EPROTO;
	}
	switch (h.ddp.u.qn) {
	case RDMAP_QN_SEND:
		memcpy(ep->recv_buf + h.ddp.u.mo, ulpdu + hl, pay);
		ep->send_bytes += pay;
		break;
	case RDMAP_QN_READ_REQ:
		ep->last_rreq = h.rreq;
		ep->rreqs++;
		break;
	case RDMAP_QN_TERMINATE:
		cr_assert_geq(rdmap_term_parse(ulpdu + hl, pay, &ep->term), 0);
		ep->got_term = true;
		break;
	default:
		cr_assert_fail("QN %u passed the checks", h.ddp.u.qn);
	}
	if (h.ddp.last) {
		ep->next_msn[h.ddp.u.qn]++;
		if (h.ddp.u.qn == RDMAP_QN_SEND)
			ep->sends_done++;
	}
	return 0;
}

/*
 * Feed the link's wire to ep in chunks of varying size; stop at the
 * first fault. Returns 0 or -EPROTO (fault set; faulting ULPDU copied to
 * bad/bad_len if given).
 */
static int deliver(struct link *l, struct endpoint *ep, uint32_t seed,
		   struct rdmap_fault *fault, uint8_t *bad, size_t *bad_len)
{
	uint8_t *ulpdu = malloc(MPA_ULPDU_MAX);
	size_t off = 0;
	uint32_t x = seed | 1;
	int ret = 0;

	cr_assert_not_null(ulpdu);
	while (off < l->len && !ret) {
		size_t n, ulen;
		bool done;
		long r;

		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		n = 1 + x % 3000;
		if (n > l->len - off)
			n = l->len - off;
		r = mpa_rx_collect(&l->rx, l->wire + off, n, ulpdu,
				   MPA_ULPDU_MAX, &ulen, &done);
		if (r < 0) {
			*fault = rdmap_fault_llp(l->rx.error,
						 mpa_error_term(l->rx.error));
			ret = -EPROTO;
			break;
		}
		off += (size_t)r;
		if (done) {
			ret = place(ep, ulpdu, ulen, fault);
			if (ret && bad) {
				memcpy(bad, ulpdu, ulen);
				*bad_len = ulen;
			}
		}
	}
	free(ulpdu);
	return ret;
}

static void endpoint_init(struct endpoint *ep, uint64_t recv_len,
			  uint64_t mr_len)
{
	memset(ep, 0, sizeof(*ep));
	ep->recv_buf = calloc(1, recv_len + 1);
	ep->recv_len = recv_len;
	ep->mr = calloc(1, mr_len + 1);
	ep->mr_len = mr_len;
	ep->mr_stag = 0x0abcde42;
	ep->mr_base = 0x7f0000001000ull;
	for (int q = 0; q < RDMAP_QN__COUNT; q++)
		ep->next_msn[q] = 1;
	cr_assert(ep->recv_buf && ep->mr);
}

static void endpoint_free(struct endpoint *ep)
{
	free(ep->recv_buf);
	free(ep->mr);
}

/* MPA exchange for cfg; returns what both sides agreed. */
static void negotiate(const struct config *cfg, bool *crc, bool *markers)
{
	uint8_t frame[MPA_RR_HDR_LEN + MPA_PD_MAX];
	struct mpa_rr req = {
		.type = MPA_REQUEST, .rev = (uint8_t)cfg->rev,
		.crc = cfg->crc, .markers = cfg->markers,
		.pdata = (const uint8_t *)"wisp", .pdata_len = 4,
	}, got, rep;
	enum mpa_error err;
	int n;

	if (cfg->rev == 2) {
		req.enhanced = true;
		req.p2p = true;
		req.ird = 128;
		req.ord = 16;
		req.rtr = MPA_RTR_WRITE | MPA_RTR_READ;
	}
	n = mpa_rr_build(&req, frame, sizeof(frame));
	cr_assert_gt(n, 0);
	cr_assert_eq(mpa_rr_parse(frame, (size_t)n, MPA_REQUEST, &got, &err), n);
	cr_assert_arr_eq(got.pdata, "wisp", 4);

	/* Responder: echo the revision and C, answer M, clamp IRD/ORD. */
	rep = (struct mpa_rr){
		.type = MPA_REPLY, .rev = got.rev, .crc = got.crc,
		.markers = got.markers, .enhanced = got.enhanced,
		.p2p = got.p2p, .ird = got.ord, .ord = got.ird > 64 ? 64 : got.ird,
		.rtr = got.rtr & MPA_RTR_READ,
	};
	n = mpa_rr_build(&rep, frame, sizeof(frame));
	cr_assert_gt(n, 0);
	cr_assert_eq(mpa_rr_parse(frame, (size_t)n, MPA_REPLY, &got, &err), n);
	cr_assert_eq(got.rev, cfg->rev);
	if (cfg->rev == 2) {
		cr_assert_eq(got.rtr, MPA_RTR_READ);
		cr_assert_eq(got.ird, 16);
		cr_assert_eq(got.ord, 64);
	}
	*crc = req.crc || got.crc;
	*markers = got.markers;
}

static const struct config matrix[] = {
	{ 1, false, false }, { 1, false, true }, { 1, true, false },
	{ 1, true, true },   { 2, false, false }, { 2, false, true },
	{ 2, true, false },  { 2, true, true },
};

#define FOR_ALL_CONFIGS(cfg) \
	for (const struct config *cfg = matrix; \
	     cfg < matrix + sizeof(matrix) / sizeof(matrix[0]); cfg++)

Test(stack, send_write_read_across_matrix)
{
	static const uint64_t sizes[] = { 0, 1, 1423, 1424, 1425, 1435, 1436,
					  1437, 5000, 65536, 1 << 20 };
	uint8_t *src = malloc(1 << 20);

	cr_assert_not_null(src);
	fill_pattern(src, 1 << 20, 4242);
	FOR_ALL_CONFIGS(cfg) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			uint64_t len = sizes[s];
			struct link l;
			struct endpoint ep;
			struct rdmap_fault fault;
			bool crc, markers;

			negotiate(cfg, &crc, &markers);
			link_init(&l, crc, markers);
			endpoint_init(&ep, len, len);

			struct rdmap_hdr send = { .opcode = RDMAP_OP_SEND };
			struct rdmap_hdr write = {
				.opcode = RDMAP_OP_WRITE,
				.ddp = { .tagged = true, .t = {
					.stag = ep.mr_stag, .to = ep.mr_base } },
			};
			struct rdmap_hdr rreq = {
				.opcode = RDMAP_OP_READ_REQ,
				.rreq = { .sink_stag = 1, .sink_to = 2,
					  .size = (uint32_t)len, .src_stag = 3,
					  .src_to = 4 },
			};

			send.ddp.u.msn = 1;
			rreq.ddp.u.msn = 1;
			rreq.ddp.u.qn = RDMAP_QN_READ_REQ;
			send_message(&l, &send, src, len);
			send_message(&l, &write, src, len);
			send_message(&l, &rreq, NULL, 0);
			cr_assert_eq(deliver(&l, &ep, (uint32_t)(s + 1), &fault,
					     NULL, NULL), 0,
				     "rev %d crc %d markers %d len %lu: term %04x",
				     cfg->rev, cfg->crc, cfg->markers,
				     (unsigned long)len, fault.term);
			cr_assert_eq(ep.sends_done, 1);
			cr_assert_eq(ep.send_bytes, len);
			cr_assert_arr_eq(ep.recv_buf, src, len);
			cr_assert_arr_eq(ep.mr, src, len);
			cr_assert_eq(ep.rreqs, 1);
			cr_assert_eq(ep.last_rreq.size, (uint32_t)len);
			cr_assert_eq(ep.last_rreq.src_to, 4);
			endpoint_free(&ep);
			free(l.wire);
		}
	}
	free(src);
	cr_log_info("%zu configurations x %zu sizes: SEND, WRITE and READ "
		    "Request placed and compared",
		    sizeof(matrix) / sizeof(matrix[0]),
		    sizeof(sizes) / sizeof(sizes[0]));
}

/* Send one message, then a Terminate for the fault back the other way. */
static void terminate_round_trip(const struct config *cfg,
				 const struct rdmap_fault *fault,
				 const uint8_t *seg, size_t seg_len,
				 struct rdmap_terminate *got)
{
	struct link back;
	struct endpoint peer;
	struct rdmap_terminate t;
	struct rdmap_fault f2;
	uint8_t body[RDMAP_TERM_MAX_LEN];
	struct rdmap_hdr th = { .opcode = RDMAP_OP_TERMINATE };
	bool crc, markers;
	int n;

	negotiate(cfg, &crc, &markers);
	rdmap_term_from_fault(&t, fault, seg, seg_len, (uint16_t)seg_len);
	n = rdmap_term_build(&t, body, sizeof(body));
	cr_assert_gt(n, 0);
	link_init(&back, crc, markers);
	endpoint_init(&peer, 0, 0);
	th.ddp.u.qn = RDMAP_QN_TERMINATE;
	th.ddp.u.msn = 1;
	send_message(&back, &th, body, (uint64_t)n);
	cr_assert_eq(deliver(&back, &peer, 9, &f2, NULL, NULL), 0);
	cr_assert(peer.got_term);
	*got = peer.term;
	endpoint_free(&peer);
	free(back.wire);
}

Test(stack, msn_off_by_one_ends_in_ddp_terminate)
{
	FOR_ALL_CONFIGS(cfg) {
		for (int delta = -1; delta <= 1; delta += 2) {
			struct link l;
			struct endpoint ep;
			struct rdmap_fault fault;
			struct rdmap_terminate got;
			uint8_t bad[MPA_ULPDU_MAX];
			size_t bad_len = 0;
			bool crc, markers;
			struct rdmap_hdr send = { .opcode = RDMAP_OP_SEND };

			negotiate(cfg, &crc, &markers);
			link_init(&l, crc, markers);
			endpoint_init(&ep, 100, 0);
			send.ddp.u.msn = (uint32_t)(1 + delta);
			send_message(&l, &send, (const uint8_t *)"hello", 5);
			cr_assert_eq(deliver(&l, &ep, 3, &fault, bad, &bad_len),
				     -EPROTO);
			cr_assert_eq(fault.layer, RDMAP_LAYER_DDP);
			cr_assert_eq(fault.code, DDP_ERR_U_MSN_RANGE);
			cr_assert_eq(fault.term, 0x1203);

			terminate_round_trip(cfg, &fault, bad, bad_len, &got);
			cr_assert_eq(got.term, 0x1203);
			cr_assert(got.has_ddp_hdr);
			cr_assert_eq(got.ddp_hdr_len, DDP_UNTAGGED_HDR_LEN);
			cr_assert_arr_eq(got.ddp_hdr, bad, DDP_UNTAGGED_HDR_LEN);
			endpoint_free(&ep);
			free(l.wire);
		}
	}
}

Test(stack, write_out_of_bounds_ends_in_tagged_terminate)
{
	FOR_ALL_CONFIGS(cfg) {
		struct link l;
		struct endpoint ep;
		struct rdmap_fault fault;
		struct rdmap_terminate got;
		uint8_t bad[MPA_ULPDU_MAX], data[64] = { 0 };
		size_t bad_len = 0;
		bool crc, markers;

		negotiate(cfg, &crc, &markers);
		link_init(&l, crc, markers);
		endpoint_init(&ep, 0, 32);
		struct rdmap_hdr w = {
			.opcode = RDMAP_OP_WRITE,
			.ddp = { .tagged = true,
				 .t = { .stag = ep.mr_stag, .to = ep.mr_base + 1 } },
		};
		/* 32 octets at base + 1 overrun a 32-octet buffer by one. */
		send_message(&l, &w, data, 32);
		cr_assert_eq(deliver(&l, &ep, 5, &fault, bad, &bad_len), -EPROTO);
		cr_assert_eq(fault.code, DDP_ERR_T_BASE_BOUNDS);
		cr_assert_eq(fault.term, 0x1101);
		terminate_round_trip(cfg, &fault, bad, bad_len, &got);
		cr_assert_eq(got.term, 0x1101);
		cr_assert(got.has_ddp_hdr);
		cr_assert_eq(got.ddp_hdr_len, DDP_TAGGED_HDR_LEN);
		cr_assert_arr_eq(got.ddp_hdr, bad, DDP_TAGGED_HDR_LEN);
		endpoint_free(&ep);
		free(l.wire);
	}
}

Test(stack, corrupted_wire_ends_in_llp_terminate_without_headers)
{
	FOR_ALL_CONFIGS(cfg) {
		struct link l;
		struct endpoint ep;
		struct rdmap_fault fault;
		struct rdmap_terminate got;
		bool crc, markers;
		struct rdmap_hdr send = { .opcode = RDMAP_OP_SEND };

		if (!cfg->crc)
			continue;
		negotiate(cfg, &crc, &markers);
		link_init(&l, crc, markers);
		endpoint_init(&ep, 100, 0);
		send.ddp.u.msn = 1;
		send_message(&l, &send, (const uint8_t *)"hello, world", 12);
		l.wire[l.len - 9] ^= 0x10;          /* a payload octet */
		cr_assert_eq(deliver(&l, &ep, 7, &fault, NULL, NULL), -EPROTO);
		cr_assert_eq(fault.layer, RDMAP_LAYER_LLP);
		cr_assert_eq(fault.code, MPA_ERR_CRC);
		cr_assert_eq(ep.sends_done, 0, "nothing delivered");
		terminate_round_trip(cfg, &fault, NULL, 0, &got);
		cr_assert_eq(got.term, 0x2002);
		cr_assert(!got.has_ddp_hdr && !got.has_rdma_hdr);
		endpoint_free(&ep);
		free(l.wire);
	}
}
