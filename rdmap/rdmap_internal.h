/* SPDX-License-Identifier: MIT */
/*
 * rdmap_internal.h - helpers shared by the RDMAP sources; not part of the
 * public interface (rdmap.h).
 *
 * A bounded cursor over a received buffer: every read checks what is left
 * and fails cleanly instead of running past the end. Fields are assembled
 * octet by octet (big-endian, any alignment).
 */
#ifndef WISP_RDMAP_INTERNAL_H
#define WISP_RDMAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdmap_cur {
	const uint8_t *p;
	size_t left;
};

static inline bool rdmap_cur_u8(struct rdmap_cur *c, uint8_t *v)
{
	if (c->left < 1)
		return false;
	*v = c->p[0];
	c->p++;
	c->left--;
	return true;
}

static inline bool rdmap_cur_be16(struct rdmap_cur *c, uint16_t *v)
{
	if (c->left < 2)
		return false;
	*v = (uint16_t)(c->p[0] << 8 | c->p[1]);
	c->p += 2;
	c->left -= 2;
	return true;
}

static inline bool rdmap_cur_be32(struct rdmap_cur *c, uint32_t *v)
{
	if (c->left < 4)
		return false;
	*v = (uint32_t)c->p[0] << 24 | (uint32_t)c->p[1] << 16 |
	     (uint32_t)c->p[2] << 8 | (uint32_t)c->p[3];
	c->p += 4;
	c->left -= 4;
	return true;
}

static inline bool rdmap_cur_be64(struct rdmap_cur *c, uint64_t *v)
{
	uint32_t hi, lo;

	if (c->left < 8)
		return false;
	rdmap_cur_be32(c, &hi);
	rdmap_cur_be32(c, &lo);
	*v = (uint64_t)hi << 32 | lo;
	return true;
}

static inline bool rdmap_cur_bytes(struct rdmap_cur *c, uint8_t *dst,
				   size_t n)
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

static inline void rdmap_put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void rdmap_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void rdmap_put_be64(uint8_t *p, uint64_t v)
{
	rdmap_put_be32(p, (uint32_t)(v >> 32));
	rdmap_put_be32(p + 4, (uint32_t)v);
}

#endif /* WISP_RDMAP_INTERNAL_H */
