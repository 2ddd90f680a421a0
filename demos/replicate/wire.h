/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl: what goes on the wire, and its conversions.
 *
 * Every field of every message and of the connect private data is in
 * network byte order (big-endian), written and read at fixed offsets by
 * the functions below: a program never sends a struct as it lies in its
 * memory, so two hosts of different byte order (or different struct
 * padding) interoperate. The layouts are in docs/replication.md ("Wire
 * format"). The connect request and reply start with a magic and a
 * protocol version; a peer that differs in either is turned away with a
 * message that says which.
 *
 * This file needs nothing but <stdint.h>, so that the unit test
 * (tests/unit/test_repl_wire.c) can check the bytes without a device.
 */
#ifndef WISP_REPL_WIRE_H
#define WISP_REPL_WIRE_H

#include <stdint.h>

#define REPL_MAGIC	0x5752504cu	/* "WRPL" on the wire */
/* What protocol 1 (host byte order, until 2026-11) put where the magic
 * is, read as big-endian: "REPL" from a little-endian host, its bytes
 * reversed from a big-endian one. */
#define REPL_MAGIC_V1_LE 0x5245504cu
#define REPL_MAGIC_V1_BE 0x4c504552u
#define REPL_VERSION	2

#define REPL_PATH_MAX	384
#define REPL_RUNS	24	/* chunk runs per NEED message */

#define REPL_MSG_LEN	488	/* a message on the wire */
#define REPL_REQ_LEN	40	/* connect request private data */
#define REPL_REQ_LEN_MIN 32	/* ... as the first protocol 2 senders sent it,
				 * without the destination key */
#define REPL_REP_LEN	40	/* accept / reject private data */

enum msg_type {
	M_OPEN = 1,	/* S->R: a file: size, mtime, path */
	M_NEED,		/* R->S: runs of chunks to send */
	M_NEED_END,	/* R->S: end of the NEED list (status SKIP: have it) */
	M_DATA,		/* S->R: chunk in slot (write) / in this message (send) */
	M_OFFER,	/* S->R: chunk in my buffer at addr/rkey (read) */
	M_CREDIT,	/* R->S: slot free again (status BAD: resend chunk) */
	M_DONE,		/* S->R: every needed chunk has been credited */
	M_VERIFY,	/* R->S: all chunks check; whole-file XXH3-128 */
	M_COMMIT,	/* S->R: hashes agree, publish it */
	M_ABORT,	/* S->R: hashes differ, keep it partial */
	M_COMMITTED,	/* R->S: renamed into place */
	M_ERROR,	/* R->S: cannot go on (text: what and why) */
	M_PING,
	M_PONG,
	M_BYE,		/* S->R: job done */
};

/* OPEN's status: the source is a disk image (a block device), which has
 * no mtime to tell its versions apart. */
#define OPEN_IMAGE	1u
/* ERROR's status (otherwise an errno): a newer run of the same job, for
 * the same destination, has taken the receiver over. */
#define ERR_TAKEN_OVER	0x10000u

struct run {
	uint64_t first, count;
};

/* A message, in host order (the wire form is REPL_MSG_LEN bytes). */
struct msg {
	uint32_t type;
	uint32_t slot;
	uint32_t status;
	uint32_t rkey;
	uint64_t file_id;
	uint64_t chunk;
	uint64_t offset;
	uint64_t len;
	uint64_t hash;		/* XXH3-64 of the chunk; low half of 128 */
	uint64_t hash_hi;
	uint64_t addr;
	uint64_t size;
	uint64_t mtime_ns;
	uint32_t fmode;
	uint32_t nruns;
	uint64_t stamp;		/* PING/PONG: sender's clock */
	union {
		char path[REPL_PATH_MAX];
		struct run runs[REPL_RUNS];
		char text[REPL_PATH_MAX];
	} u;
};

/* Connect request private data (sender to receiver). */
struct conn_req {
	uint32_t magic;
	uint16_t version;
	uint16_t stream;
	uint16_t nstreams;
	uint16_t mode;
	uint32_t chunk;
	uint32_t window;
	uint64_t nonce;
	uint64_t dest;		/* XXH3-64 of the destination path; 0: none */
};

/* Accept (or reject) private data (receiver to sender). */
struct conn_rep {
	uint32_t magic;
	uint16_t version;
	uint16_t reason;	/* REJ_*, 0 on accept */
	uint32_t status;	/* errno with REJ_RESOURCES */
	uint32_t rkey;
	uint64_t addr;		/* slot array (write mode) */
	uint32_t slot_first;
	uint32_t slot_count;
	uint32_t chunk;
};

enum {
	REJ_NONE = 0,
	REJ_BUSY = 1,		/* serving another job */
	REJ_VERSION = 2,	/* another protocol version or byte order */
	REJ_BAD_REQUEST = 3,	/* values out of range */
	REJ_RESOURCES = 4,	/* could not set up (status: errno) */
};

/* What decoding the magic and version found. */
enum wire_check {
	WIRE_OK = 0,
	WIRE_SHORT,		/* too few bytes */
	WIRE_NOT_REPL,		/* no magic: not a wisp-repl peer */
	WIRE_V1,		/* protocol 1 (host byte order) */
	WIRE_VERSION,		/* our magic, another version */
};

void msg_encode(const struct msg *m, unsigned char *w);
void msg_decode(const unsigned char *w, struct msg *m);
void req_encode(const struct conn_req *r, unsigned char *w);
enum wire_check req_decode(const void *w, unsigned len, struct conn_req *r);
void rep_encode(const struct conn_rep *r, unsigned char *w);
enum wire_check rep_decode(const void *w, unsigned len, struct conn_rep *r);
const char *wire_check_str(enum wire_check c);

#endif
