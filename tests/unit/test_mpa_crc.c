/* SPDX-License-Identifier: MIT */
/*
 * CRC32c known answers: RFC 3720 appendix B.4, the RFC 5044 section 4.4
 * example FPDU, and the Read Response measured against Linux siw.
 */
#include "mpa.h"
#include "test_util.h"

#define FF8 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff

struct crc_vector {
	const char *name;
	uint8_t data[48];
	size_t len;
	uint8_t wire[4];   /* CRC octets as RFC 3720 prints them */
};

static const struct crc_vector rfc3720_b4[] = {
	{ "32 octets of zero", { 0 }, 32, { 0xaa, 0x36, 0x91, 0x8a } },
	{ "32 octets of 0xff",
	  { FF8, FF8, FF8, FF8 }, 32, { 0x43, 0xab, 0xa8, 0x62 } },
	{ "32 incrementing octets",
	  { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
	    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31 },
	  32, { 0x4e, 0x79, 0xdd, 0x46 } },
	{ "32 decrementing octets",
	  { 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
	    15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 },
	  32, { 0x5c, 0xdb, 0x3f, 0x11 } },
	{ "iSCSI Read (10) command PDU",
	  { 0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
	    0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
	    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 },
	  48, { 0x56, 0x3a, 0x96, 0xd9 } },
};

Test(mpa_crc, null_and_empty)
{
	/* CRC32c of nothing is 0 (init and final inversion cancel). */
	cr_assert_eq(mpa_crc32c(NULL, 0), 0);
	cr_assert_eq(mpa_crc_update(MPA_CRC_INIT, NULL, 0), MPA_CRC_INIT);
}

Test(mpa_crc, check_value)
{
	/* The catalogue "check" value of CRC-32C. */
	cr_assert_eq(mpa_crc32c("123456789", 9), 0xe3069283u);
}

Test(mpa_crc, rfc3720_appendix_b4)
{
	for (size_t i = 0; i < sizeof(rfc3720_b4) / sizeof(rfc3720_b4[0]); i++) {
		const struct crc_vector *v = &rfc3720_b4[i];
		uint8_t wire[4];

		mpa_crc_put(wire, mpa_crc32c(v->data, v->len));
		cr_assert_arr_eq(wire, v->wire, 4, "vector '%s'", v->name);
		cr_assert_eq(mpa_crc_get(v->wire), mpa_crc32c(v->data, v->len),
			     "vector '%s'", v->name);
	}
	cr_log_info("checked %zu RFC 3720 B.4 CRC32c vectors",
		    sizeof(rfc3720_b4) / sizeof(rfc3720_b4[0]));
}

Test(mpa_crc, incremental_equals_one_shot)
{
	uint8_t buf[1000];

	fill_pattern(buf, sizeof(buf), 7);
	for (size_t cut = 0; cut <= sizeof(buf); cut += 37) {
		uint32_t st = mpa_crc_update(MPA_CRC_INIT, buf, cut);

		st = mpa_crc_update(st, buf + cut, sizeof(buf) - cut);
		cr_assert_eq(mpa_crc_final(st), mpa_crc32c(buf, sizeof(buf)),
			     "split at %zu", cut);
	}
}

/* CRC32c bit by bit (reflected polynomial 0x82f63b78), the register
 * without the final inversion, as mpa_crc_update() keeps it. */
static uint32_t crc_bitwise(uint32_t st, const uint8_t *p, size_t n)
{
	while (n--) {
		st ^= *p++;
		for (int k = 0; k < 8; k++)
			st = st & 1 ? (st >> 1) ^ 0x82f63b78u : st >> 1;
	}
	return st;
}

/* Small buffers take the CPU's instruction, larger ones ISA-L
 * (MPA_CRC_SMALL): both must give the bitwise register for every length
 * around the switch, every alignment, and chained across the two. */
Test(mpa_crc, small_and_large_paths_agree_bit_for_bit)
{
	uint8_t buf[3 * MPA_CRC_SMALL + 16];

	fill_pattern(buf, sizeof(buf), 11);
	for (size_t off = 0; off < 8; off++) {
		for (size_t len = 0; off + len <= sizeof(buf); len++) {
			uint32_t want = crc_bitwise(MPA_CRC_INIT, buf + off,
						    len);
			uint32_t st;

			cr_assert_eq(mpa_crc_update(MPA_CRC_INIT, buf + off,
						    len), want,
				     "offset %zu, %zu octets", off, len);
			/* A small piece, then the rest (any size). */
			st = mpa_crc_update(MPA_CRC_INIT, buf + off,
					    len < 5 ? len : 5);
			st = mpa_crc_update(st, buf + off + (len < 5 ? len : 5),
					    len - (len < 5 ? len : 5));
			cr_assert_eq(st, want, "offset %zu, %zu octets in two",
				     off, len);
		}
	}
}

Test(mpa_crc, siw_read_response_byte_order)
{
	/* Measured against Linux siw with CRC negotiated: a Read Response
	 * FPDU whose first 16 octets are these ends in 43 00 96 a6. */
	static const uint8_t fpdu[16] = {
		0x00, 0x0e, 0xc1, 0x42, 0x12, 0x34, 0x56, 0x78,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
	};
	static const uint8_t want[4] = { 0x43, 0x00, 0x96, 0xa6 };
	uint8_t wire[4];

	mpa_crc_put(wire, mpa_crc32c(fpdu, sizeof(fpdu)));
	cr_assert_arr_eq(wire, want, 4);
	/* The value itself, read the way RFC 3720 prints it. */
	cr_assert_eq(mpa_crc32c(fpdu, sizeof(fpdu)), 0xa6960043u);
}

Test(mpa_crc, error_table)
{
	cr_assert_eq(mpa_error_term(MPA_ERR_CRC), 0x2002);
	cr_assert_eq(mpa_error_term(MPA_ERR_MARKER), 0x2003);
	cr_assert_eq(mpa_error_term(MPA_ERR_BAD_KEY), 0x2004);
	cr_assert_eq(mpa_error_term(MPA_ERR_INSUFFICIENT_IRD), 0x2006);
	cr_assert_eq(mpa_error_term(MPA_ERR_NO_MATCHING_RTR), 0x2007);
	for (int e = 1; e < MPA_ERR__COUNT; e++) {
		cr_assert_eq(mpa_error_term(e) >> 12, 2, "error %d layer", e);
		cr_assert_str_neq(mpa_error_str(e), "MPA unknown error");
	}
	cr_assert_str_eq(mpa_error_str(MPA_ERR__COUNT), "MPA unknown error");
}
