/* SPDX-License-Identifier: MIT */
/*
 * ddp_internal.h - helpers shared by the DDP sources; not part of the
 * public interface (ddp.h).
 *
 * Wire fields are read and written octet by octet, so a field may sit at
 * any alignment in the caller's buffer and host byte order never matters.
 * Callers check the length before calling any of these.
 */
#ifndef WISP_DDP_INTERNAL_H
#define WISP_DDP_INTERNAL_H

#include <stdint.h>

#include "ddp.h"

static inline uint32_t ddp_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t ddp_get_be64(const uint8_t *p)
{
	return (uint64_t)ddp_get_be32(p) << 32 | ddp_get_be32(p + 4);
}

static inline void ddp_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void ddp_put_be64(uint8_t *p, uint64_t v)
{
	ddp_put_be32(p, (uint32_t)(v >> 32));
	ddp_put_be32(p + 4, (uint32_t)v);
}

/* Offsets inside the DDP headers (RFC 5041 sections 4.2 and 4.3). */
enum {
	DDP_OFF_CTRL     = 0,
	DDP_OFF_ULP_CTRL = 1,
	DDP_OFF_STAG     = 2,   /* tagged */
	DDP_OFF_TO       = 6,   /* tagged */
	DDP_OFF_ULP_WORD = 2,   /* untagged */
	DDP_OFF_QN       = 6,   /* untagged */
	DDP_OFF_MSN      = 10,  /* untagged */
	DDP_OFF_MO       = 14,  /* untagged */
};

_Static_assert(DDP_OFF_TO + 8 == DDP_TAGGED_HDR_LEN,
	       "RFC 5041 4.2: tagged header is 14 octets");
_Static_assert(DDP_OFF_MO + 4 == DDP_UNTAGGED_HDR_LEN,
	       "RFC 5041 4.3: untagged header is 18 octets");

#endif /* WISP_DDP_INTERNAL_H */
