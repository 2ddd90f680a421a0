/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl: messages and connect private data to and from their wire
 * form, every field big-endian at a fixed offset (wire.h,
 * docs/replication.md "Wire format").
 */
#include <string.h>
#include "wire.h"

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* The union at 104: NEED carries runs, every other type text. */
#define U_OFF	104

void msg_encode(const struct msg *m, unsigned char *w)
{
	put32(w + 0, m->type);
	put32(w + 4, m->slot);
	put32(w + 8, m->status);
	put32(w + 12, m->rkey);
	put64(w + 16, m->file_id);
	put64(w + 24, m->chunk);
	put64(w + 32, m->offset);
	put64(w + 40, m->len);
	put64(w + 48, m->hash);
	put64(w + 56, m->hash_hi);
	put64(w + 64, m->addr);
	put64(w + 72, m->size);
	put64(w + 80, m->mtime_ns);
	put32(w + 88, m->fmode);
	put32(w + 92, m->nruns);
	put64(w + 96, m->stamp);
	if (m->type == M_NEED) {
		for (int i = 0; i < REPL_RUNS; i++) {
			put64(w + U_OFF + 16 * i, m->u.runs[i].first);
			put64(w + U_OFF + 16 * i + 8, m->u.runs[i].count);
		}
	} else {
		memcpy(w + U_OFF, m->u.path, REPL_PATH_MAX);
	}
}

void msg_decode(const unsigned char *w, struct msg *m)
{
	m->type = get32(w + 0);
	m->slot = get32(w + 4);
	m->status = get32(w + 8);
	m->rkey = get32(w + 12);
	m->file_id = get64(w + 16);
	m->chunk = get64(w + 24);
	m->offset = get64(w + 32);
	m->len = get64(w + 40);
	m->hash = get64(w + 48);
	m->hash_hi = get64(w + 56);
	m->addr = get64(w + 64);
	m->size = get64(w + 72);
	m->mtime_ns = get64(w + 80);
	m->fmode = get32(w + 88);
	m->nruns = get32(w + 92);
	m->stamp = get64(w + 96);
	if (m->type == M_NEED) {
		for (int i = 0; i < REPL_RUNS; i++) {
			m->u.runs[i].first = get64(w + U_OFF + 16 * i);
			m->u.runs[i].count = get64(w + U_OFF + 16 * i + 8);
		}
	} else {
		memcpy(m->u.path, w + U_OFF, REPL_PATH_MAX);
		/* text is a C string whatever the peer sent */
		m->u.path[REPL_PATH_MAX - 1] = 0;
	}
}

void req_encode(const struct conn_req *r, unsigned char *w)
{
	memset(w, 0, REPL_REQ_LEN);
	put32(w + 0, r->magic);
	put16(w + 4, r->version);
	put16(w + 6, r->stream);
	put16(w + 8, r->nstreams);
	put16(w + 10, r->mode);
	put32(w + 12, r->chunk);
	put32(w + 16, r->window);
	/* 20..23: zero */
	put64(w + 24, r->nonce);
	put64(w + 32, r->dest);
}

/* The magic and the version first, so that a peer of another protocol
 * or byte order is named as such; then at least min octets. */
static enum wire_check check_head(const unsigned char *w, unsigned len,
				  unsigned min, uint16_t *version)
{
	uint32_t magic;

	if (len < 4)
		return WIRE_SHORT;
	magic = get32(w);
	if (magic == REPL_MAGIC_V1_LE || magic == REPL_MAGIC_V1_BE)
		return WIRE_V1;
	if (magic != REPL_MAGIC)
		return WIRE_NOT_REPL;
	if (len < 6)
		return WIRE_SHORT;
	*version = get16(w + 4);
	if (*version != REPL_VERSION)
		return WIRE_VERSION;
	return len < min ? WIRE_SHORT : WIRE_OK;
}

enum wire_check req_decode(const void *wv, unsigned len, struct conn_req *r)
{
	const unsigned char *w = wv;
	enum wire_check c;

	memset(r, 0, sizeof(*r));
	c = check_head(w, len, REPL_REQ_LEN_MIN, &r->version);
	if (c != WIRE_OK)
		return c;
	r->magic = get32(w + 0);
	r->stream = get16(w + 6);
	r->nstreams = get16(w + 8);
	r->mode = get16(w + 10);
	r->chunk = get32(w + 12);
	r->window = get32(w + 16);
	r->nonce = get64(w + 24);
	/* a sender without the key: its job is never taken over */
	r->dest = len >= REPL_REQ_LEN ? get64(w + 32) : 0;
	return WIRE_OK;
}

void rep_encode(const struct conn_rep *r, unsigned char *w)
{
	memset(w, 0, REPL_REP_LEN);
	put32(w + 0, r->magic);
	put16(w + 4, r->version);
	put16(w + 6, r->reason);
	put32(w + 8, r->status);
	put32(w + 12, r->rkey);
	put64(w + 16, r->addr);
	put32(w + 24, r->slot_first);
	put32(w + 28, r->slot_count);
	put32(w + 32, r->chunk);
	/* 36..39: zero */
}

enum wire_check rep_decode(const void *wv, unsigned len, struct conn_rep *r)
{
	const unsigned char *w = wv;
	enum wire_check c;

	memset(r, 0, sizeof(*r));
	c = check_head(w, len, REPL_REP_LEN, &r->version);
	if (c != WIRE_OK)
		return c;
	r->magic = get32(w + 0);
	r->reason = get16(w + 6);
	r->status = get32(w + 8);
	r->rkey = get32(w + 12);
	r->addr = get64(w + 16);
	r->slot_first = get32(w + 24);
	r->slot_count = get32(w + 28);
	r->chunk = get32(w + 32);
	return WIRE_OK;
}

const char *wire_check_str(enum wire_check c)
{
	switch (c) {
	case WIRE_OK:
		return "ok";
	case WIRE_SHORT:
		return "private data too short";
	case WIRE_NOT_REPL:
		return "not wisp-repl (no magic)";
	case WIRE_V1:
		return "wisp-repl protocol 1 (host byte order; this is protocol 2, network byte order): install the same wisp-repl on both hosts";
	case WIRE_VERSION:
		return "another wisp-repl protocol version: install the same wisp-repl on both hosts";
	}
	return "?";
}
