/* SPDX-License-Identifier: MIT */
/*
 * wisp_rdmacm.h - options of wisp's librdmacm.so.1 for programs that know
 * they run over wisp: rdma_set_option(id, WISP_OPTION_LEVEL, name, &val,
 * sizeof(int)). They override the WISP_* environment variables
 * (docs/configuration.md) for that id and the ids a listener spawns, and
 * take effect at the next rdma_connect / connection request.
 *
 * Over rdma-core's librdmacm the level is unknown and the call fails with
 * ENOSYS, so a program can probe for wisp this way.
 */
#ifndef WISP_RDMACM_H
#define WISP_RDMACM_H

/* "wisp" in ASCII: far from RDMA_OPTION_ID (0) and RDMA_OPTION_IB (1). */
#define WISP_OPTION_LEVEL 0x77697370

enum wisp_option {
	WISP_OPT_MPA_REV = 1,        /* int: 1 or 2 (RFC 5044 / RFC 6581) */
	WISP_OPT_CRC = 2,            /* int: 0 or 1, ask for MPA CRC32c */
	WISP_OPT_P2P = 3,            /* int: 0 or 1, rev 2 peer-to-peer */
	WISP_OPT_RTR = 4,            /* int: WISP_RTR_PREFER_* */
	WISP_OPT_MPA_TIMEOUT_MS = 5, /* int: 1 .. 3600000, connect + MPA */
};

/* Values of WISP_OPT_RTR: the zero-length RTR preferred when both
 * peers support both (RFC 6581 9.2). */
#define WISP_RTR_PREFER_READ   1
#define WISP_RTR_PREFER_WRITE  2

#endif /* WISP_RDMACM_H */
