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

#endif /* WISP_DDP_INTERNAL_H */
