/* SPDX-License-Identifier: MIT */
/*
 * rdmap_internal.h - what the RDMAP codec sources share; not part of the
 * public interface (rdmap.h).
 *
 * Fields are read through the bounded cursor of wisp_wire.h (every read
 * checks what is left and fails cleanly instead of running past the end)
 * and written with its octet-by-octet big-endian stores, at the offsets
 * named here.
 */
#ifndef WISP_RDMAP_INTERNAL_H
#define WISP_RDMAP_INTERNAL_H

#include "rdmap.h"
#include "wisp_wire.h"

/* Offsets inside the Read Request header (RFC 5040 section 4.4). */
enum {
	RDMAP_RREQ_OFF_SINK_STAG = 0,
	RDMAP_RREQ_OFF_SINK_TO   = 4,
	RDMAP_RREQ_OFF_SIZE      = 12,
	RDMAP_RREQ_OFF_SRC_STAG  = 16,
	RDMAP_RREQ_OFF_SRC_TO    = 20,
};

_Static_assert(RDMAP_RREQ_OFF_SRC_TO + 8 == RDMAP_READ_REQ_LEN &&
	       RDMAP_READ_REQ_LEN == 28,
	       "RFC 5040 4.4: the Read Request header is 28 octets");

#endif /* WISP_RDMAP_INTERNAL_H */
