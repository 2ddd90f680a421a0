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
	/* TLS 1.3 under MPA (docs/tls.md), as the WISP_TLS* variables. */
	WISP_OPT_TLS = 6,            /* int: WISP_TLS_OFF / _OPTIONAL /
				      * _REQUIRED */
	WISP_OPT_TLS_MUTUAL = 7,     /* int: 0 or 1 (listener) */
	WISP_OPT_TLS_KEY_UPDATE_KIB = 8, /* int: KeyUpdate every this many
					  * KiB sent, 0 never */
	/* Strings: val a NUL-terminated string, len strlen(val) + 1; a
	 * zero-length string unsets. */
	WISP_OPT_TLS_PSK_FILE = 9,
	WISP_OPT_TLS_PSK_IDENTITY = 10,
	WISP_OPT_TLS_CERT = 11,
	WISP_OPT_TLS_KEY = 12,
	WISP_OPT_TLS_CA = 13,
	WISP_OPT_TLS_VERIFY_NAME = 14,
};

/* Values of WISP_OPT_TLS. */
#define WISP_TLS_OFF       0
#define WISP_TLS_OPTIONAL  1
#define WISP_TLS_REQUIRED  2

/* Values of WISP_OPT_RTR: the zero-length RTR preferred when both
 * peers support both (RFC 6581 9.2). */
#define WISP_RTR_PREFER_READ   1
#define WISP_RTR_PREFER_WRITE  2

#endif /* WISP_RDMACM_H */
