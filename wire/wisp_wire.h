/* SPDX-License-Identifier: MIT */
/*
 * wisp_wire.h - fixed-width integer fields on the wire, for the codecs of
 * mpa/, ddp/ and rdmap/ (the folder below all three; it includes nothing
 * of theirs).
 *
 * What belongs here: header-only helpers that read and write wire fields
 * and nothing else, with no knowledge of any protocol: big-endian
 * (network order) 16/32/64-bit loads and stores, the one little-endian
 * field MPA has (its CRC, RFC 5044 4.4), and a bounded read cursor. What
 * does not: protocol constants, offsets or checks; those stay in the
 * layer whose RFC defines them.
 *
 * Fields are assembled octet by octet with shifts, so a field may sit at
 * any alignment in the caller's buffer and host byte order never matters
 * (no casts into a buffer, no bitfields). The plain get/put helpers do no
 * bounds checking: the caller has checked the length first. The cursor
 * does: every read checks what is left and fails cleanly, consuming
 * nothing, when the input runs short.
 */
#ifndef WISP_WIRE_H
#define WISP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* Unchecked loads and stores (the caller checked the length)         */
/* ------------------------------------------------------------------ */

static inline uint16_t wisp_get_be16(const uint8_t *p)
{
	return (uint16_t)((unsigned int)p[0] << 8 | p[1]);
}

static inline uint32_t wisp_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t wisp_get_be64(const uint8_t *p)
{
	return (uint64_t)wisp_get_be32(p) << 32 | wisp_get_be32(p + 4);
}

static inline void wisp_put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void wisp_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void wisp_put_be64(uint8_t *p, uint64_t v)
{
	wisp_put_be32(p, (uint32_t)(v >> 32));
	wisp_put_be32(p + 4, (uint32_t)v);
}

/* Least significant octet first: only MPA's CRC field is sent this way. */
static inline uint32_t wisp_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 |
	       (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void wisp_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------ */
/* Bounded read cursor                                                */
/* ------------------------------------------------------------------ */

/*
 * A view of len octets at p. Each read returns true and advances, or
 * returns false and leaves the cursor (and *v) unchanged when fewer
 * octets are left than the field needs.
 */
struct wisp_cur {
	const uint8_t *p;
	size_t left;
};

static inline struct wisp_cur wisp_cur_init(const uint8_t *p, size_t len)
{
	struct wisp_cur c = { .p = p, .left = len };

	return c;
}

/* The next octet without consuming it. */
static inline bool wisp_cur_peek_u8(const struct wisp_cur *c, uint8_t *v)
{
	if (c->left < 1)
		return false;
	*v = c->p[0];
	return true;
}

static inline bool wisp_cur_u8(struct wisp_cur *c, uint8_t *v)
{
	if (!wisp_cur_peek_u8(c, v))
		return false;
	c->p++;
	c->left--;
	return true;
}

static inline bool wisp_cur_be16(struct wisp_cur *c, uint16_t *v)
{
	if (c->left < 2)
		return false;
	*v = wisp_get_be16(c->p);
	c->p += 2;
	c->left -= 2;
	return true;
}

static inline bool wisp_cur_be32(struct wisp_cur *c, uint32_t *v)
{
	if (c->left < 4)
		return false;
	*v = wisp_get_be32(c->p);
	c->p += 4;
	c->left -= 4;
	return true;
}

static inline bool wisp_cur_be64(struct wisp_cur *c, uint64_t *v)
{
	if (c->left < 8)
		return false;
	*v = wisp_get_be64(c->p);
	c->p += 8;
	c->left -= 8;
	return true;
}

/* Copy n octets out to dst (octet by octet: the input may be shared with
 * a receive path and change under us; dst is a private copy). */
static inline bool wisp_cur_bytes(struct wisp_cur *c, uint8_t *dst, size_t n)
{
	size_t i;

	if (c->left < n)
		return false;
	for (i = 0; i < n; i++)
		dst[i] = c->p[i];
	c->p += n;
	c->left -= n;
	return true;
}

#endif /* WISP_WIRE_H */
