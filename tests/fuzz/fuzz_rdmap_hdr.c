/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the DDP + RDMAP header parser (rdmap_hdr_parse), the
 * Terminate parser, and the DDP placement checks.
 *
 * Input: octet 0 is the configuration (bit 0: also parse the rest of the
 * ULPDU as a Terminate body), octets 1-24 describe the receiver's view
 * (tagged buffer base / length, untagged queue state); the rest is one
 * ULPDU as MPA would hand it up.
 *
 * Checks: no read past the input (ASan); a header that parses survives
 * build + parse; a fault carries a layer and Terminate code that agree; a
 * segment the placement checks accept lies inside its buffer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void check_placement(const struct rdmap_hdr *h, uint32_t payload,
			    const uint8_t *view)
{
	enum ddp_error err = DDP_ERR_NONE;

	if (h->ddp.tagged) {
		struct ddp_tagged_buf tb = {
			.valid = view[0] & 1, .same_stream = view[0] & 2,
			.base_to = get64(view + 1), .len = get64(view + 9) >> 16,
		};
		int r = ddp_check_tagged(&h->ddp, payload, &tb, &err);

		if (r != 0 && (r != -EPROTO || err == DDP_ERR_NONE))
			abort();
		/* Accepted: [TO, TO + payload) lies inside the buffer.
		 * RFC 5041 5.2: a zero-length segment's STag and TO are not
		 * checked, so only a non-empty one must fit. */
		if (r == 0 && payload > 0 &&
		    (!tb.valid || !tb.same_stream ||
		     h->ddp.t.to < tb.base_to ||
		     h->ddp.t.to - tb.base_to > tb.len ||
		     payload > tb.len - (h->ddp.t.to - tb.base_to)))
			abort();
	} else {
		struct ddp_untagged_ctx uc = {
			.nqueues = view[0] & 7,
			.expected_msn = (uint32_t)get64(view + 1),
			.msn_window = 1 + (view[9] & 3),
			.buffer_posted = view[10] & 1,
			.buffer_len = get64(view + 11) >> 40,
		};
		int r = ddp_check_untagged(&h->ddp, payload, &uc, &err);

		if (r == 0) {
			if (h->ddp.u.qn >= uc.nqueues || !uc.buffer_posted ||
			    (uint64_t)h->ddp.u.mo + payload > uc.buffer_len)
				abort();
		} else if (r != -EPROTO || err == DDP_ERR_NONE) {
			abort();
		}
	}
}

static void check_terminate(const uint8_t *body, size_t len)
{
	struct rdmap_terminate t, again;
	uint8_t out[RDMAP_TERM_MAX_LEN];
	int n;

	if (rdmap_term_parse(body, len, &t) < 0)
		return;
	n = rdmap_term_build(&t, out, sizeof(out));
	if (n < 0 || rdmap_term_parse(out, (size_t)n, &again) < 0)
		abort();
	if (again.term != t.term || again.has_seg_len != t.has_seg_len ||
	    again.has_ddp_hdr != t.has_ddp_hdr ||
	    again.has_rdma_hdr != t.has_rdma_hdr)
		abort();
	if (t.has_ddp_hdr && (again.ddp_hdr_len != t.ddp_hdr_len ||
			      memcmp(again.ddp_hdr, t.ddp_hdr, t.ddp_hdr_len)))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *view, *ulpdu;
	struct rdmap_hdr h, again;
	struct rdmap_fault fault;
	uint8_t out[64];
	size_t len;
	int n, m;

	if (size < 25)
		return 0;
	view = data + 1;
	ulpdu = data + 25;
	len = size - 25;

	n = rdmap_hdr_parse(ulpdu, len, &h, &fault);
	if (n == -EPROTO) {
		if (fault.layer > RDMAP_LAYER_LLP ||
		    rdmap_term_layer(fault.term) != (unsigned int)fault.layer)
			abort();
		return 0;
	}
	if (n < 0)
		return 0;
	if ((size_t)n > len || (size_t)n != rdmap_hdr_len(h.opcode))
		abort();

	m = rdmap_hdr_build(&h, out, sizeof(out));
	if (m != n || rdmap_hdr_parse(out, (size_t)m, &again, &fault) != n)
		abort();
	if (again.opcode != h.opcode || again.ddp.tagged != h.ddp.tagged ||
	    again.ddp.last != h.ddp.last)
		abort();

	check_placement(&h, (uint32_t)(len - (size_t)n), view);
	if ((data[0] & 1) && h.opcode == RDMAP_OP_TERMINATE)
		check_terminate(ulpdu + n, len - (size_t)n);
	return 0;
}
