/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the incremental FPDU decoder (mpa_rx_feed).
 *
 * Input: octet 0 is the configuration: bit 0 CRC, bit 1 markers,
 * bits 2-7 a chunking seed; octets 1-2 the largest ULPDU accepted. The
 * rest is fed to the decoder in chunks of pseudo-random size, each in a
 * heap buffer of exactly that size.
 *
 * Checks: no read past any chunk (ASan), progress on every call, DATA
 * events that tile each ULPDU in order and within its length, lengths
 * within the configured limit, and consumption that adds up. Then the
 * same bytes, taken as one ULPDU, must survive encode + decode.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mpa.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_decode(const uint8_t *data, size_t size, bool crc,
			 bool markers, uint16_t max_ulpdu, uint32_t seed)
{
	struct mpa_rx rx;
	size_t off = 0;
	uint32_t x = seed * 2654435761u + 1;
	uint32_t expect_off = 0;

	mpa_rx_init(&rx, crc, markers, max_ulpdu);
	while (off < size) {
		size_t n, used = 0;
		uint8_t *chunk;

		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		n = 1 + x % 600;
		if (n > size - off)
			n = size - off;
		chunk = malloc(n);
		if (!chunk)
			abort();
		memcpy(chunk, data + off, n);
		while (used < n) {
			struct mpa_rx_event ev;
			long r = mpa_rx_feed(&rx, chunk + used, n - used, &ev);

			if (r < 0) {
				if (rx.state != MPA_RX_FAILED ||
				    rx.error == MPA_ERR_NONE)
					abort();
				free(chunk);
				return;
			}
			if (r == 0 || (size_t)r > n - used)
				abort();
			if (ev.type == MPA_RX_EV_DATA) {
				if (ev.ulpdu_len > max_ulpdu || ev.len == 0 ||
				    ev.ulpdu_off != expect_off ||
				    ev.ulpdu_off + ev.len > ev.ulpdu_len ||
				    ev.data < chunk + used ||
				    ev.data + ev.len > chunk + used + (size_t)r)
					abort();
				expect_off += (uint32_t)ev.len;
			} else if (ev.type == MPA_RX_EV_FPDU) {
				if (expect_off != ev.ulpdu_len)
					abort();
				expect_off = 0;
			}
			used += (size_t)r;
		}
		free(chunk);
		off += n;
	}
	if (rx.stream_off != size)
		abort();
}

static void check_round_trip(const uint8_t *data, size_t size, bool crc,
			     bool markers)
{
	static uint8_t wire[MPA_ULPDU_SEND_MAX + 1024];
	static uint8_t back[MPA_ULPDU_MAX];
	struct mpa_tx tx;
	struct mpa_rx rx;
	size_t ulen = 0;
	bool done = false;
	int n;
	long r;

	if (size > MPA_ULPDU_SEND_MAX)
		size = MPA_ULPDU_SEND_MAX;
	mpa_tx_init(&tx, crc, markers);
	n = mpa_fpdu_encode(&tx, data, size, wire, sizeof(wire));
	if (n < 0 || (size_t)n != mpa_fpdu_wire_len(&(struct mpa_tx){
			.crc = crc, .markers = markers }, (uint32_t)size))
		abort();
	mpa_rx_init(&rx, crc, markers, MPA_ULPDU_MAX);
	r = mpa_rx_collect(&rx, wire, (size_t)n, back, sizeof(back), &ulen,
			   &done);
	if (r != n || !done || ulen != size || memcmp(back, data, size))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool crc, markers;
	uint16_t max_ulpdu;

	if (size < 3)
		return 0;
	crc = data[0] & 1;
	markers = data[0] & 2;
	max_ulpdu = (uint16_t)(data[1] << 8 | data[2]);
	check_decode(data + 3, size - 3, crc, markers, max_ulpdu, data[0] >> 2);
	check_round_trip(data + 3, size - 3, crc, markers);
	return 0;
}
