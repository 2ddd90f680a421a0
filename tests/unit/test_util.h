/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the unit suites. */
#ifndef WISP_TEST_UTIL_H
#define WISP_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

/*
 * A heap copy of exactly len octets, so that a parser reading one octet
 * past its input trips AddressSanitizer in the sanitizer build.
 */
static inline uint8_t *exact_copy(const void *src, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	cr_assert_not_null(p);
	if (len)
		memcpy(p, src, len);
	return p;
}

/* Deterministic pseudo-random octets (xorshift32). */
static inline void fill_pattern(uint8_t *p, size_t len, uint32_t seed)
{
	uint32_t x = seed ? seed : 0x9e3779b9u;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

#endif
