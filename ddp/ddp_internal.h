/* SPDX-License-Identifier: MIT */
/*
 * ddp_internal.h - helpers shared by the DDP sources; not part of the
 * public interface (ddp.h).
 *
 * The header offsets of RFC 5041 section 4; the fields at them are read
 * and written with the octet-by-octet helpers of wisp_wire.h, so a header
 * may sit at any alignment. Callers check the length first.
 */
#ifndef WISP_DDP_INTERNAL_H
#define WISP_DDP_INTERNAL_H

#include <stdint.h>

#include "ddp.h"
#include "wisp_wire.h"

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
