/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl's wire form (demos/replicate/wire.c): every field big-endian
 * at its fixed offset, whatever the host's byte order, so that hosts of
 * either order interoperate; and the magic and version checks that turn
 * a mismatched peer away by name. Known answers written out byte by byte.
 */
#include <stddef.h>
#include <stdio.h>
#include "wire.h"
#include "test_util.h"

Test(repl_wire, message_known_bytes)
{
	struct msg m = {
		.type = M_DATA, .slot = 0x01020304, .status = 0x05060708,
		.rkey = 0x090a0b0c, .file_id = 0x1112131415161718ull,
		.chunk = 0x2122232425262728ull, .offset = 0x3132333435363738ull,
		.len = 0x4142434445464748ull, .hash = 0x5152535455565758ull,
		.hash_hi = 0x6162636465666768ull, .addr = 0x7172737475767778ull,
		.size = 0x8182838485868788ull, .mtime_ns = 0x9192939495969798ull,
		.fmode = 0xa1a2a3a4, .nruns = 0xb1b2b3b4,
		.stamp = 0xc1c2c3c4c5c6c7c8ull,
	};
	static const uint8_t head[104] = {
		0, 0, 0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
		0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,
		0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
		0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58,
		0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
		0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78,
		0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88,
		0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98,
		0xa1, 0xa2, 0xa3, 0xa4, 0xb1, 0xb2, 0xb3, 0xb4,
		0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8,
	};
	uint8_t w[REPL_MSG_LEN];
	struct msg back;

	cr_assert_eq(M_DATA, 4);
	snprintf(m.u.path, sizeof(m.u.path), "a/b c");
	memset(w, 0xee, sizeof(w));
	msg_encode(&m, w);
	cr_assert_arr_eq(w, head, sizeof(head));
	cr_assert_arr_eq(w + 104, "a/b c\0", 6);
	cr_assert_eq(w[REPL_MSG_LEN - 1], 0);
	uint8_t *copy = exact_copy(w, sizeof(w));
	msg_decode(copy, &back);
	free(copy);
	cr_assert_eq(memcmp(&back, &m, offsetof(struct msg, u)), 0);
	cr_assert_str_eq(back.u.path, "a/b c");
}

Test(repl_wire, need_runs_big_endian)
{
	struct msg m = { .type = M_NEED, .nruns = 2 }, back;
	uint8_t w[REPL_MSG_LEN];
	static const uint8_t runs[32] = {
		0, 0, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x03,
		0, 0, 0, 0x01, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0x01,
	};

	m.u.runs[0] = (struct run){ 0x102, 3 };
	m.u.runs[1] = (struct run){ 0x100000000ull, 0xff00000000000001ull };
	msg_encode(&m, w);
	cr_assert_arr_eq(w + 104, runs, sizeof(runs));
	msg_decode(w, &back);
	cr_assert_eq(back.nruns, 2);
	cr_assert_eq(back.u.runs[1].first, 0x100000000ull);
	cr_assert_eq(back.u.runs[1].count, 0xff00000000000001ull);
}

/* A peer's text is a C string even if it filled the whole field. */
Test(repl_wire, text_terminated)
{
	uint8_t w[REPL_MSG_LEN];
	struct msg m;

	memset(w, 'x', sizeof(w));
	memset(w, 0, 4);
	w[3] = M_ERROR;
	msg_decode(w, &m);
	cr_assert_eq(strlen(m.u.text), REPL_PATH_MAX - 1);
}

Test(repl_wire, request_known_bytes)
{
	struct conn_req r = {
		.magic = REPL_MAGIC, .version = REPL_VERSION, .stream = 3,
		.nstreams = 4, .mode = 2, .chunk = 0x100000, .window = 64,
		.nonce = 0x0102030405060708ull, .dest = 0x1112131415161718ull,
	}, back;
	static const uint8_t want[REPL_REQ_LEN] = {
		'W', 'R', 'P', 'L', 0, 2, 0, 3, 0, 4, 0, 2, 0, 0x10, 0, 0,
		0, 0, 0, 64, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
	};
	uint8_t w[REPL_REQ_LEN];

	req_encode(&r, w);
	cr_assert_arr_eq(w, want, sizeof(want));
	uint8_t *copy = exact_copy(w, sizeof(w));
	cr_assert_eq(req_decode(copy, sizeof(w), &back), WIRE_OK);
	free(copy);
	cr_assert_eq(back.stream, 3);
	cr_assert_eq(back.nstreams, 4);
	cr_assert_eq(back.mode, 2);
	cr_assert_eq(back.chunk, 0x100000);
	cr_assert_eq(back.window, 64);
	cr_assert_eq(back.nonce, 0x0102030405060708ull);
	cr_assert_eq(back.dest, 0x1112131415161718ull);
	/* a sender from before the destination key: 32 octets, no key */
	cr_assert_eq(req_decode(w, REPL_REQ_LEN_MIN, &back), WIRE_OK);
	cr_assert_eq(back.nonce, 0x0102030405060708ull);
	cr_assert_eq(back.dest, 0);
	cr_assert_eq(req_decode(w, REPL_REQ_LEN_MIN - 1, &back), WIRE_SHORT);
}

Test(repl_wire, reply_known_bytes)
{
	struct conn_rep r = {
		.magic = REPL_MAGIC, .version = REPL_VERSION, .reason = REJ_BUSY,
		.status = 16, .rkey = 0xdeadbeef, .addr = 0x00007f0011223344ull,
		.slot_first = 8, .slot_count = 24, .chunk = 262144,
	}, back;
	static const uint8_t want[REPL_REP_LEN] = {
		'W', 'R', 'P', 'L', 0, 2, 0, 1, 0, 0, 0, 16,
		0xde, 0xad, 0xbe, 0xef, 0, 0, 0x7f, 0, 0x11, 0x22, 0x33, 0x44,
		0, 0, 0, 8, 0, 0, 0, 24, 0, 4, 0, 0, 0, 0, 0, 0,
	};
	uint8_t w[REPL_REP_LEN];

	rep_encode(&r, w);
	cr_assert_arr_eq(w, want, sizeof(want));
	cr_assert_eq(rep_decode(w, sizeof(w), &back), WIRE_OK);
	cr_assert_eq(back.reason, REJ_BUSY);
	cr_assert_eq(back.status, 16);
	cr_assert_eq(back.rkey, 0xdeadbeef);
	cr_assert_eq(back.addr, 0x00007f0011223344ull);
	cr_assert_eq(back.slot_first, 8);
	cr_assert_eq(back.slot_count, 24);
	cr_assert_eq(back.chunk, 262144);
}

/* Protocol 1 sent its structs in host order: "REPL" from a
 * little-endian host, "LPER" from a big-endian one. Both are named. */
Test(repl_wire, mismatched_peers_named)
{
	uint8_t v1_le[32] = { 'R', 'E', 'P', 'L', 1, 0 };
	uint8_t v1_be[32] = { 'L', 'P', 'E', 'R', 0, 1 };
	uint8_t v9[REPL_REQ_LEN] = { 'W', 'R', 'P', 'L', 0, 9 };
	uint8_t other[REPL_REQ_LEN] = { 'G', 'E', 'T', ' ' };
	struct conn_req r;
	struct conn_rep p;

	cr_assert_eq(req_decode(v1_le, sizeof(v1_le), &r), WIRE_V1);
	cr_assert_eq(req_decode(v1_be, sizeof(v1_be), &r), WIRE_V1);
	cr_assert_eq(rep_decode(v1_le, sizeof(v1_le), &p), WIRE_V1);
	cr_assert_eq(req_decode(v9, sizeof(v9), &r), WIRE_VERSION);
	cr_assert_eq(r.version, 9);
	cr_assert_eq(rep_decode(v9, 6, &p), WIRE_VERSION);
	cr_assert_eq(req_decode(other, sizeof(other), &r), WIRE_NOT_REPL);
	cr_assert_eq(req_decode(other, 3, &r), WIRE_SHORT);
	cr_assert_eq(req_decode(NULL, 0, &r), WIRE_SHORT);
	cr_assert_neq(strstr(wire_check_str(WIRE_V1), "byte order"), NULL);
}
