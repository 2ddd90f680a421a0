/* SPDX-License-Identifier: MIT */
/*
 * mpa_crc.c - CRC32c for MPA FPDUs (RFC 5044 section 4.4, using the
 * polynomial and conventions of RFC 3720 section 12.1), and the names and
 * Terminate codes of MPA's faults.
 *
 * ISA-L's crc32_iscsi() runs the reflected CRC32c register without the
 * final inversion, so it chains across buffers; mpa_crc_final() applies
 * the inversion once at the end.
 *
 * A small FPDU (a SEND 8 B is 28 octets before its CRC) goes through the
 * CPU's CRC32c instruction inline instead (x86-64 with SSE4.2): the same
 * register and conventions, without ISA-L's dispatch and set-up, which
 * between two system calls (i-cache cold) cost about 20 ns of a small
 * message's hop (issue 13). Larger buffers stay with ISA-L's folding.
 */
#include <isa-l/crc.h>
#include <stdatomic.h>
#include <string.h>

#include "mpa.h"
#include "wisp_wire.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define MPA_CRC_HW 1
#endif

#ifdef MPA_CRC_HW
__attribute__((target("sse4.2")))
static uint32_t crc_small_hw(uint32_t state, const unsigned char *p,
			     size_t len)
{
	uint64_t c = state;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
	}
	state = (uint32_t)c;
	if (len >= 4) {
		uint32_t v;

		memcpy(&v, p, 4);
		state = _mm_crc32_u32(state, v);
		p += 4;
		len -= 4;
	}
	while (len--)
		state = _mm_crc32_u8(state, *p++);
	return state;
}

/* 1: the CPU has the instruction, 2: not, 0: not asked yet. */
static _Atomic int crc_hw_known;

static bool crc_hw(void)
{
	int k = atomic_load_explicit(&crc_hw_known, memory_order_relaxed);

	if (!k) {
		__builtin_cpu_init();
		k = __builtin_cpu_supports("sse4.2") ? 1 : 2;
		atomic_store_explicit(&crc_hw_known, k, memory_order_relaxed);
	}
	return k == 1;
}
#endif

uint32_t mpa_crc_update(uint32_t state, const void *buf, size_t len)
{
	const unsigned char *p = buf;

#ifdef MPA_CRC_HW
	if (len <= MPA_CRC_SMALL && crc_hw())
		return crc_small_hw(state, p, len);
#endif
	/* crc32_iscsi() takes an int length: feed huge buffers in slices. */
	while (len > 0) {
		int n = len > (1u << 30) ? (1 << 30) : (int)len;

		state = crc32_iscsi((unsigned char *)p, n, state);
		p += n;
		len -= (size_t)n;
	}
	return state;
}

uint32_t mpa_crc_final(uint32_t state)
{
	return ~state;
}

uint32_t mpa_crc32c(const void *buf, size_t len)
{
#ifdef MPA_CRC_HW
	/* A small FPDU's CRC (issue 13) without the calls in between. */
	if (len <= MPA_CRC_SMALL && crc_hw())
		return ~crc_small_hw(MPA_CRC_INIT, buf, len);
#endif
	return mpa_crc_final(mpa_crc_update(MPA_CRC_INIT, buf, len));
}

/*
 * RFC 3720 B.4 prints the CRC of 32 zero octets as "aa 36 91 8a": the value
 * 0x8a9136aa with its least significant octet first. MPA takes its CRC from
 * iSCSI, and Linux siw puts the octets on the wire in that same order.
 */
void mpa_crc_put(uint8_t out[MPA_CRC_LEN], uint32_t crc)
{
	wisp_put_le32(out, crc);
}

uint32_t mpa_crc_get(const uint8_t in[MPA_CRC_LEN])
{
	return wisp_get_le32(in);
}

/* Terminate layer LLP (2), error type MPA (0). */
#define MPA_TERM(code) ((uint16_t)(2u << 12 | 0u << 8 | (code)))

static const struct {
	const char *name;
	uint16_t term;
} mpa_errors[MPA_ERR__COUNT] = {
	[MPA_ERR_NONE]               = { "no error",                     0 },
	[MPA_ERR_STREAM_LOST]        = { "TCP stream lost",              MPA_TERM(0x01) },
	[MPA_ERR_CRC]                = { "MPA CRC error",                MPA_TERM(0x02) },
	[MPA_ERR_MARKER]             = { "MPA marker points wrong",      MPA_TERM(0x03) },
	[MPA_ERR_ULPDU_LEN]          = { "MPA ULPDU length out of range", MPA_TERM(0x03) },
	[MPA_ERR_BAD_KEY]            = { "MPA frame key invalid",        MPA_TERM(0x04) },
	[MPA_ERR_BAD_REV]            = { "MPA revision unsupported",     MPA_TERM(0x04) },
	[MPA_ERR_PD_LEN]             = { "MPA private data too long",    MPA_TERM(0x04) },
	[MPA_ERR_ENHANCED]           = { "MPA enhanced data missing",    MPA_TERM(0x04) },
	[MPA_ERR_LOCAL_CATASTROPHIC] = { "MPA local catastrophic",       MPA_TERM(0x05) },
	[MPA_ERR_INSUFFICIENT_IRD]   = { "MPA insufficient IRD",         MPA_TERM(0x06) },
	[MPA_ERR_NO_MATCHING_RTR]    = { "MPA no matching RTR model",    MPA_TERM(0x07) },
};

uint16_t mpa_error_term(enum mpa_error err)
{
	if ((unsigned int)err >= MPA_ERR__COUNT)
		return MPA_TERM(0x05);
	return mpa_errors[err].term;
}

const char *mpa_error_str(enum mpa_error err)
{
	if ((unsigned int)err >= MPA_ERR__COUNT)
		return "MPA unknown error";
	return mpa_errors[err].name;
}
