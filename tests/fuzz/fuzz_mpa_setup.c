/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the MPA Request/Reply parser (mpa_rr_parse).
 *
 * Input: octet 0 picks the frame type (bit 0); the rest is the stream.
 * Checks: the parser never reads past its input (ASan), answers with one
 * of its documented results, and a frame it accepts survives a build and
 * a second parse unchanged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mpa.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum mpa_frame_type type;
	uint8_t out[MPA_RR_HDR_LEN + MPA_PD_MAX];
	struct mpa_rr rr, again;
	enum mpa_error err;
	int len, len2;

	if (size < 1)
		return 0;
	type = (data[0] & 1) ? MPA_REPLY : MPA_REQUEST;
	data++;
	size--;

	len = mpa_rr_parse(data, size, type, &rr, &err);
	if (len == -EAGAIN || len == -EPROTO) {
		if (len == -EPROTO && (err == MPA_ERR_NONE || err >= MPA_ERR__COUNT))
			abort();
		return 0;
	}
	if (len < MPA_RR_HDR_LEN || (size_t)len > size)
		abort();

	/* Accepted: rebuild and parse again; every field must agree. */
	len2 = mpa_rr_build(&rr, out, sizeof(out));
	if (len2 != len)
		abort();
	if (mpa_rr_parse(out, (size_t)len2, type, &again, &err) != len2)
		abort();
	if (again.rev != rr.rev || again.markers != rr.markers ||
	    again.crc != rr.crc || again.reject != rr.reject ||
	    again.enhanced != rr.enhanced || again.p2p != rr.p2p ||
	    again.ird != rr.ird || again.ord != rr.ord ||
	    again.rtr != rr.rtr || again.pdata_len != rr.pdata_len)
		abort();
	if (rr.pdata_len && memcmp(again.pdata, rr.pdata, rr.pdata_len))
		abort();
	return 0;
}
