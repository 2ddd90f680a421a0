/* SPDX-License-Identifier: MIT */
/*
 * mpa_fpdu.c - FPDU framing (RFC 5044 section 4) for transmit, and the
 * incremental receive decoder.
 *
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *  |          ULPDU_Length         |                               |
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
 *  ~                 ULPDU (DDP segment)                           ~
 *  |                               |        PAD (0-3 octets)       |
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *  |                             CRC                               |
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *
 * With markers, a 4-octet marker (16 reserved bits, 16-bit FPDUPTR) sits
 * at every 512th octet of the FPDU stream, counted from the first octet
 * after the MPA Request/Reply. FPDUPTR is the distance back from the
 * marker to the ULPDU_Length field of the FPDU it falls in (RFC 5044 4.2).
 * A marker that falls exactly between two FPDUs carries 0 and belongs to
 * the next one: it is covered by that FPDU's CRC (4.3, 4.4), while that
 * FPDU's later markers still point at its ULPDU_Length field, 4 octets
 * after the leading marker. ULPDU_Length counts neither markers nor pad;
 * the CRC covers everything of the FPDU before it, markers included.
 */
#include <errno.h>
#include <string.h>

#include "mpa.h"
#include "wisp_wire.h"

static inline uint32_t to_marker(uint64_t stream_off)
{
	return MPA_MARKER_SPACING - (uint32_t)(stream_off % MPA_MARKER_SPACING);
}

void mpa_tx_init(struct mpa_tx *tx, bool crc, bool markers)
{
	memset(tx, 0, sizeof(*tx));
	tx->crc = crc;
	tx->markers = markers;
}

size_t mpa_fpdu_wire_len(const struct mpa_tx *tx, uint32_t ulpdu_len)
{
	size_t left = MPA_LEN_FIELD + ulpdu_len + mpa_pad_len(ulpdu_len) +
		      MPA_CRC_LEN;
	size_t wire = left;
	uint64_t pos = tx->stream_off;

	if (!tx->markers)
		return wire;
	while (left > 0) {
		size_t step;

		if (pos % MPA_MARKER_SPACING == 0) {
			wire += MPA_MARKER_LEN;
			pos += MPA_MARKER_LEN;
		}
		step = to_marker(pos);
		if (step > left)
			step = left;
		pos += step;
		left -= step;
	}
	return wire;
}

/* Output under construction: iovecs, their count, the stream position. */
struct fpdu_out {
	struct iovec *iov;
	int cnt;
	int cap;
	uint64_t pos;
	uint64_t len_pos;         /* stream offset of ULPDU_Length */
	bool markers;
	struct mpa_fpdu_scratch *scr;
	int nmarkers;
};

static inline int out_push(struct fpdu_out *o, const void *base,
			   size_t len)
{
	struct iovec *last = o->cnt ? &o->iov[o->cnt - 1] : NULL;

	/* Adjacent in memory (length field and the caller's header, pad and
	 * CRC): one iovec fewer for the kernel to walk, per FPDU. */
	if (last && (const uint8_t *)last->iov_base + last->iov_len == base) {
		last->iov_len += len;
		o->pos += len;
		return 0;
	}
	if (o->cnt == o->cap)
		return -ENOSPC;
	o->iov[o->cnt].iov_base = (void *)base;
	o->iov[o->cnt].iov_len = len;
	o->cnt++;
	o->pos += len;
	return 0;
}

/* Insert a marker if the stream is at a marker position. */
static int out_marker(struct fpdu_out *o)
{
	uint8_t *m;
	uint64_t ptr;

	if (!o->markers || o->pos % MPA_MARKER_SPACING)
		return 0;
	if (o->nmarkers == MPA_MAX_MARKERS_PER_FPDU)
		return -ENOSPC;
	m = o->scr->markers[o->nmarkers++];
	/* Before the length field is out this is the leading marker, which
	 * "has an FPDUPTR value of 0x0000" (RFC 5044 4.3). */
	ptr = o->pos - o->len_pos;
	m[0] = 0;
	m[1] = 0;
	wisp_put_be16(m + 2, (uint16_t)ptr);
	return out_push(o, m, MPA_MARKER_LEN);
}

/* Emit len octets at base, inserting markers where the stream needs them. */
static int out_data(struct fpdu_out *o, const uint8_t *base, size_t len)
{
	while (len > 0) {
		size_t step;
		int ret;

		ret = out_marker(o);
		if (ret)
			return ret;
		step = o->markers ? to_marker(o->pos) : len;
		if (step > len)
			step = len;
		ret = out_push(o, base, step);
		if (ret)
			return ret;
		base += step;
		len -= step;
	}
	return 0;
}

/* CRC32c over the octets of iov[0..n), in order. */
static uint32_t crc_of(const struct iovec *iov, int n)
{
	uint32_t st = MPA_CRC_INIT;

	for (int i = 0; i < n; i++)
		st = mpa_crc_update(st, iov[i].iov_base, iov[i].iov_len);
	return mpa_crc_final(st);
}

/*
 * mpa_fpdu_frame() without markers: length field, ULPDU pieces, pad +
 * CRC, adjacent pieces merged; the caller checked the arguments and the
 * ULPDU's length. Returns the iovec count or -ENOSPC.
 */
static int frame_plain(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		       uint32_t ulpdu_len, struct mpa_fpdu_scratch *scr,
		       struct iovec *out, int out_cap)
{
	struct fpdu_out o = {
		.iov = out, .cap = out_cap, .pos = tx->stream_off, .scr = scr,
	};
	uint32_t pad = mpa_pad_len(ulpdu_len);
	uint8_t *crc_field = scr->trailer + pad;
	int i, ret;

	wisp_put_be16(scr->len, (uint16_t)ulpdu_len);
	memset(scr->trailer, 0, pad);
	ret = out_push(&o, scr->len, MPA_LEN_FIELD);
	for (i = 0; !ret && i < n; i++)
		if (ulpdu[i].iov_len)
			ret = out_push(&o, ulpdu[i].iov_base, ulpdu[i].iov_len);
	if (!ret && pad)
		ret = out_push(&o, scr->trailer, pad);
	if (ret)
		return ret;
	/* RFC 5044 4.4: the CRC covers the FPDU from ULPDU_Length to the
	 * end of PAD; without CRC the field is zero. */
	if (tx->crc)
		mpa_crc_put(crc_field, crc_of(out, o.cnt));
	else
		memset(crc_field, 0, MPA_CRC_LEN);
	ret = out_push(&o, crc_field, MPA_CRC_LEN);
	if (ret)
		return ret;
	tx->stream_off = o.pos;
	return o.cnt;
}

/* Length field, pad and CRC around the ULPDU already at fpdu +
 * MPA_LEN_FIELD, no markers. Returns the FPDU's wire length. */
static size_t flat_close(struct mpa_tx *tx, uint8_t *fpdu, size_t ulpdu_len)
{
	uint8_t *p = fpdu + MPA_LEN_FIELD + ulpdu_len;
	uint32_t pad = mpa_pad_len((uint32_t)ulpdu_len);
	size_t body = MPA_LEN_FIELD + ulpdu_len + pad;

	wisp_put_be16(fpdu, (uint16_t)ulpdu_len);
	/* RFC 5044 4.4: pad octets are zero, and the CRC covers the FPDU
	 * from ULPDU_Length to the end of PAD. */
	for (uint32_t i = 0; i < pad; i++)
		*p++ = 0;
	mpa_crc_put(p, tx->crc ? mpa_crc32c(fpdu, body) : 0);
	tx->stream_off += body + MPA_CRC_LEN;
	return body + MPA_CRC_LEN;
}

/* The ULPDU's pieces copied to fpdu + MPA_LEN_FIELD, then closed. The
 * caller has checked that the FPDU fits. Returns its wire length. */
static size_t flat_put(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		       size_t ulpdu_len, uint8_t *fpdu)
{
	uint8_t *p = fpdu + MPA_LEN_FIELD;

	for (int i = 0; i < n; i++) {
		if (ulpdu[i].iov_len)
			memcpy(p, ulpdu[i].iov_base, ulpdu[i].iov_len);
		p += ulpdu[i].iov_len;
	}
	return flat_close(tx, fpdu, ulpdu_len);
}

void mpa_fpdu_flat_finish(struct mpa_tx *tx, struct mpa_fpdu_scratch *scr,
			  size_t ulpdu_len, struct iovec *out)
{
	out->iov_base = scr->flat;
	out->iov_len = flat_close(tx, scr->flat, ulpdu_len);
}

int mpa_fpdu_copy(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		  uint8_t *buf, size_t cap)
{
	size_t ulpdu_len = 0;

	if (!tx || !buf || n < 0 || (n > 0 && !ulpdu) || tx->markers)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		ulpdu_len += ulpdu[i].iov_len;
	/* RFC 5044 3: at most 64768 octets of ULPDU from the sender. */
	if (ulpdu_len > MPA_ULPDU_SEND_MAX)
		return -EMSGSIZE;
	if (mpa_fpdu_wire_len(tx, (uint32_t)ulpdu_len) > cap)
		return -ENOSPC;
	return (int)flat_put(tx, ulpdu, n, ulpdu_len, buf);
}

/*
 * A small FPDU without markers, laid out whole in scr->flat: one iovec
 * for the kernel and one CRC pass over contiguous octets, where the
 * gathered layout takes three of each (issue 13: the per-message cost
 * of an 8-octet SEND). The caller has checked that it fits.
 */
static int frame_flat(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		      size_t ulpdu_len, struct mpa_fpdu_scratch *scr,
		      struct iovec *out)
{
	out->iov_base = scr->flat;
	out->iov_len = flat_put(tx, ulpdu, n, ulpdu_len, scr->flat);
	return 1;
}

int mpa_fpdu_frame(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		   struct mpa_fpdu_scratch *scr, struct iovec *out, int out_cap)
{
	struct fpdu_out o;
	uint8_t *crc_field;
	size_t ulpdu_len = 0;
	uint32_t pad;
	int i, ret;

	if (!tx || !scr || !out || n < 0 || (n > 0 && !ulpdu))
		return -EINVAL;
	o = (struct fpdu_out){
		.iov = out, .cap = out_cap, .pos = tx->stream_off,
		.len_pos = tx->stream_off, .markers = tx->markers, .scr = scr,
	};
	for (i = 0; i < n; i++) {
		ulpdu_len += ulpdu[i].iov_len;
		/* RFC 5044 3: "The sending DDP MUST NOT post a ULPDU
		 * larger than 64768 octets to MPA." */
		if (ulpdu_len > MPA_ULPDU_SEND_MAX)
			return -EMSGSIZE;
	}
	pad = mpa_pad_len((uint32_t)ulpdu_len);
	if (!tx->markers) {
		if (out_cap >= 1 && MPA_LEN_FIELD + ulpdu_len + pad +
					    MPA_CRC_LEN <= MPA_FPDU_FLAT_MAX)
			return frame_flat(tx, ulpdu, n, ulpdu_len, scr, out);
		return frame_plain(tx, ulpdu, n, (uint32_t)ulpdu_len, scr, out,
				   out_cap);
	}
	wisp_put_be16(scr->len, (uint16_t)ulpdu_len);
	memset(scr->trailer, 0, sizeof(scr->trailer));
	crc_field = scr->trailer + pad;

	ret = out_marker(&o);
	if (ret)
		return ret;
	o.len_pos = o.pos;
	ret = out_data(&o, scr->len, MPA_LEN_FIELD);
	for (i = 0; !ret && i < n; i++)
		ret = out_data(&o, ulpdu[i].iov_base, ulpdu[i].iov_len);
	if (!ret && pad)
		ret = out_data(&o, scr->trailer, pad);
	if (ret)
		return ret;

	/* RFC 5044 4.4: the CRC covers the FPDU from ULPDU_Length (or the
	 * marker just before it) to the end of PAD, markers included. A marker may still be due just before
	 * the CRC field, so the CRC is computed once the rest is laid out. */
	ret = out_marker(&o);
	if (ret)
		return ret;
	if (tx->crc)
		mpa_crc_put(crc_field, crc_of(out, o.cnt));
	ret = out_data(&o, crc_field, MPA_CRC_LEN);
	if (ret)
		return ret;
	tx->stream_off = o.pos;
	return o.cnt;
}

int mpa_fpdu_encode(struct mpa_tx *tx, const void *ulpdu, size_t len,
		    uint8_t *buf, size_t cap)
{
	struct iovec out[MPA_MAX_MARKERS_PER_FPDU * 2 + 4];
	struct mpa_fpdu_scratch scr;
	struct iovec in = { .iov_base = (void *)ulpdu, .iov_len = len };
	uint64_t saved;
	size_t wire = 0;
	int cnt, i;

	if (!tx || !buf || (len && !ulpdu))
		return -EINVAL;
	if (len > MPA_ULPDU_SEND_MAX)
		return -EMSGSIZE;
	if (mpa_fpdu_wire_len(tx, (uint32_t)len) > cap)
		return -ENOSPC;
	saved = tx->stream_off;
	cnt = mpa_fpdu_frame(tx, &in, 1, &scr, out,
			     (int)(sizeof(out) / sizeof(out[0])));
	if (cnt < 0) {
		tx->stream_off = saved;
		return cnt;
	}
	for (i = 0; i < cnt; i++) {
		memcpy(buf + wire, out[i].iov_base, out[i].iov_len);
		wire += out[i].iov_len;
	}
	return (int)wire;
}

/* ------------------------------------------------------------------ */
/* Receive                                                            */
/* ------------------------------------------------------------------ */

void mpa_rx_init(struct mpa_rx *rx, bool crc, bool markers,
		 uint16_t max_ulpdu)
{
	memset(rx, 0, sizeof(*rx));
	rx->crc = crc;
	rx->markers = markers;
	rx->max_ulpdu = max_ulpdu;
	rx->state = MPA_RX_LEN;
	rx->crc_state = MPA_CRC_INIT;
}

static long rx_fail(struct mpa_rx *rx, enum mpa_error err)
{
	rx->state = MPA_RX_FAILED;
	rx->error = err;
	return -EPROTO;
}

static void rx_crc(struct mpa_rx *rx, const uint8_t *p, size_t n)
{
	if (rx->crc)
		rx->crc_state = mpa_crc_update(rx->crc_state, p, n);
}

/* Next FPDU begins at the current stream offset. */
static void rx_next_fpdu(struct mpa_rx *rx)
{
	rx->state = MPA_RX_LEN;
	rx->len_pos = rx->stream_off;
	rx->crc_state = MPA_CRC_INIT;
	rx->ulpdu_len = 0;
	rx->ulpdu_done = 0;
	rx->part_done = 0;
}

/* State after the ULPDU octets: pad if any, else the CRC. */
static enum mpa_rx_state rx_after_ulpdu(const struct mpa_rx *rx)
{
	return mpa_pad_len(rx->ulpdu_len) ? MPA_RX_PAD : MPA_RX_CRC;
}

/* Is a marker (or the rest of one) next in the stream? */
static bool rx_marker_due(const struct mpa_rx *rx)
{
	return rx->markers &&
	       (rx->marker_done || rx->stream_off % MPA_MARKER_SPACING == 0);
}

/*
 * The FPDUPTR a marker at stream offset at must carry: 0 for the marker
 * that leads an FPDU (nothing of it read yet), else the distance back to
 * this FPDU's ULPDU_Length field.
 */
static uint64_t rx_marker_expect(const struct mpa_rx *rx, uint64_t at)
{
	if (rx->state == MPA_RX_LEN && rx->part_done == 0)
		return 0;
	return at - rx->len_pos;
}

/* Collect marker octets; validate the marker once whole. */
static long rx_marker(struct mpa_rx *rx, const uint8_t *in, size_t len)
{
	size_t n = MPA_MARKER_LEN - rx->marker_done;
	uint64_t at;
	uint16_t ptr;

	if (n > len)
		n = len;
	memcpy(rx->marker + rx->marker_done, in, n);
	rx_crc(rx, in, n);
	rx->marker_done = (uint8_t)(rx->marker_done + n);
	rx->stream_off += n;
	if (rx->marker_done < MPA_MARKER_LEN)
		return (long)n;

	rx->marker_done = 0;
	at = rx->stream_off - MPA_MARKER_LEN;
	/* RFC 5044 4.2: "The least significant two bits MUST always be set
	 * to zero at the transmitter, and the receivers MUST always treat
	 * these as zero for calculations." The reserved half is "ignored on
	 * receive (except for CRC calculation)". */
	ptr = (uint16_t)(wisp_get_be16(rx->marker + 2) & ~3u);
	/* RFC 5044 4.3: all markers of an FPDU "MUST all point to the same
	 * point in the TCP stream: the first octet of the ULPDU Length field
	 * for the FPDU". A mismatch is error code 3 of section 8: "received
	 * MPA Marker ... and ULPDU Length fields do not agree on the start of
	 * an FPDU". */
	if (ptr != rx_marker_expect(rx, at))
		return rx_fail(rx, MPA_ERR_MARKER);
	return (long)n;
}

/* Collect up to want octets of a fixed-size part into rx->hold. */
static size_t rx_part(struct mpa_rx *rx, const uint8_t *in, size_t len,
		      size_t want, size_t limit)
{
	size_t n = want - rx->part_done;

	if (n > len)
		n = len;
	if (n > limit)
		n = limit;
	memcpy(rx->hold + rx->part_done, in, n);
	rx->part_done = (uint8_t)(rx->part_done + n);
	rx->stream_off += n;
	return n;
}

size_t mpa_rx_contig(const struct mpa_rx *rx)
{
	size_t n;

	if (!rx || rx->state != MPA_RX_ULPDU || rx_marker_due(rx))
		return 0;
	n = (size_t)(rx->ulpdu_len - rx->ulpdu_done);
	if (rx->markers && n > to_marker(rx->stream_off))
		n = to_marker(rx->stream_off);
	return n;
}

size_t mpa_rx_ulpdu_done(const struct mpa_rx *rx)
{
	return rx ? rx->ulpdu_done : 0;
}

bool mpa_rx_between(const struct mpa_rx *rx)
{
	return rx && rx->state == MPA_RX_LEN && rx->part_done == 0 &&
	       rx->marker_done == 0;
}

enum mpa_error mpa_rx_error(const struct mpa_rx *rx)
{
	if (!rx || rx->state != MPA_RX_FAILED)
		return MPA_ERR_NONE;
	return rx->error;
}

/*
 * An FPDU that begins at in and lies whole in in[0..len), without
 * markers: length checked, CRC over length field, ULPDU and pad in one
 * pass, the whole ULPDU handed out as one DATA run; its pad and CRC are
 * then skipped (MPA_RX_TRAILER). Returns the octets used, 0 if the FPDU
 * is not whole in the input (the octet-wise machine takes it), or
 * -EPROTO.
 */
/*
 * The checks of an FPDU that begins at in and lies whole in in[0..len),
 * without markers: its ULPDU length (*ulen) and the octets up to the
 * CRC field (*body). Returns 1 if whole and good, 0 if not whole in the
 * input, or -EPROTO (rx failed).
 */
static int rx_whole_check(struct mpa_rx *rx, const uint8_t *in, size_t len,
			  uint16_t *ulen, size_t *body)
{
	if (len < MPA_LEN_FIELD)
		return 0;
	*ulen = wisp_get_be16(in);
	if (*ulen > rx->max_ulpdu)
		return (int)rx_fail(rx, MPA_ERR_ULPDU_LEN);
	*body = MPA_LEN_FIELD + *ulen + mpa_pad_len(*ulen);
	if (len < *body + MPA_CRC_LEN)
		return 0;
	/* RFC 5044 4.4: on a mismatch "the receiver MUST treat the FPDU as
	 * an invalid FPDU" (section 8 error 2): nothing of it is handed
	 * out. */
	if (rx->crc && mpa_crc_get(in + *body) != mpa_crc32c(in, *body))
		return (int)rx_fail(rx, MPA_ERR_CRC);
	return 1;
}

static long rx_whole(struct mpa_rx *rx, const uint8_t *in, size_t len,
		     struct mpa_rx_event *ev)
{
	uint16_t ulen = 0;
	size_t body = 0;
	int r = rx_whole_check(rx, in, len, &ulen, &body);

	if (r <= 0)
		return r;
	rx->len_pos = rx->stream_off;
	rx->ulpdu_len = ulen;
	rx->ulpdu_done = ulen;
	rx->part_done = 0;
	rx->state = MPA_RX_TRAILER;
	if (ulen == 0) {
		/* Nothing to hand out: the trailer goes with it. */
		rx->stream_off += body + MPA_CRC_LEN;
		ev->type = MPA_RX_EV_FPDU;
		ev->ulpdu_len = 0;
		rx_next_fpdu(rx);
		return (long)(body + MPA_CRC_LEN);
	}
	rx->stream_off += MPA_LEN_FIELD + ulen;
	ev->type = MPA_RX_EV_DATA;
	ev->ulpdu_len = ulen;
	ev->ulpdu_off = 0;
	ev->data = in + MPA_LEN_FIELD;
	ev->len = ulen;
	return (long)(MPA_LEN_FIELD + ulen);
}

long mpa_rx_whole(struct mpa_rx *rx, const uint8_t *in, size_t len,
		  struct mpa_rx_event *ev)
{
	uint16_t ulen = 0;
	size_t body = 0;
	int r;

	if (!rx || !ev || (len && !in))
		return -EINVAL;
	ev->type = MPA_RX_EV_NONE;
	if (rx->state == MPA_RX_FAILED)
		return -EPROTO;
	if (rx->state != MPA_RX_LEN || rx->part_done || rx->markers)
		return 0;
	r = rx_whole_check(rx, in, len, &ulen, &body);
	if (r <= 0)
		return r;
	rx->stream_off += body + MPA_CRC_LEN;
	rx_next_fpdu(rx);
	ev->type = MPA_RX_EV_FPDU;
	ev->ulpdu_len = ulen;
	ev->ulpdu_off = 0;
	ev->data = in + MPA_LEN_FIELD;
	ev->len = ulen;
	return (long)(body + MPA_CRC_LEN);
}

long mpa_rx_feed(struct mpa_rx *rx, const uint8_t *in, size_t len,
		 struct mpa_rx_event *ev)
{
	size_t used = 0;

	if (!rx || !ev || (len && !in))
		return -EINVAL;
	ev->type = MPA_RX_EV_NONE;
	if (rx->state == MPA_RX_FAILED)
		return -EPROTO;
	if (rx->state == MPA_RX_LEN && rx->part_done == 0 && !rx->markers) {
		long r = rx_whole(rx, in, len, ev);

		if (r)
			return r;
	}

	while (used < len) {
		const uint8_t *p = in + used;
		size_t avail = len - used;
		size_t limit = rx->markers ? to_marker(rx->stream_off) : avail;
		size_t n;

		if (rx_marker_due(rx)) {
			long r = rx_marker(rx, p, avail);

			if (r < 0)
				return r;
			used += (size_t)r;
			continue;
		}

		switch (rx->state) {
		case MPA_RX_LEN:
			if (rx->part_done == 0)
				rx->len_pos = rx->stream_off;
			n = rx_part(rx, p, avail, MPA_LEN_FIELD, limit);
			rx_crc(rx, p, n);
			used += n;
			if (rx->part_done < MPA_LEN_FIELD)
				break;
			rx->part_done = 0;
			rx->ulpdu_len = wisp_get_be16(rx->hold);
			if (rx->ulpdu_len > rx->max_ulpdu)
				return rx_fail(rx, MPA_ERR_ULPDU_LEN);
			rx->state = rx->ulpdu_len ? MPA_RX_ULPDU
						  : rx_after_ulpdu(rx);
			break;

		case MPA_RX_ULPDU:
			n = (size_t)(rx->ulpdu_len - rx->ulpdu_done);
			if (n > avail)
				n = avail;
			if (n > limit)
				n = limit;
			rx_crc(rx, p, n);
			ev->type = MPA_RX_EV_DATA;
			ev->ulpdu_len = rx->ulpdu_len;
			ev->ulpdu_off = rx->ulpdu_done;
			ev->data = p;
			ev->len = n;
			rx->ulpdu_done = (uint16_t)(rx->ulpdu_done + n);
			rx->stream_off += n;
			if (rx->ulpdu_done == rx->ulpdu_len)
				rx->state = rx_after_ulpdu(rx);
			return (long)(used + n);

		case MPA_RX_PAD:
			/* RFC 5044 4.1: pad is "ignored by the receiver
			 * (except for CRC checking)". */
			n = rx_part(rx, p, avail, mpa_pad_len(rx->ulpdu_len),
				    limit);
			rx_crc(rx, p, n);
			used += n;
			if (rx->part_done < mpa_pad_len(rx->ulpdu_len))
				break;
			rx->part_done = 0;
			rx->state = MPA_RX_CRC;
			break;

		case MPA_RX_CRC:
			n = rx_part(rx, p, avail, MPA_CRC_LEN, limit);
			used += n;
			if (rx->part_done < MPA_CRC_LEN)
				break;
			/* RFC 5044 4.4: on a mismatch "the receiver MUST
			 * treat the FPDU as an invalid FPDU"; section 8 error
			 * 2. Nothing more is delivered on this half
			 * connection (the decoder stays failed). */
			if (rx->crc && mpa_crc_get(rx->hold) !=
					       mpa_crc_final(rx->crc_state))
				return rx_fail(rx, MPA_ERR_CRC);
			ev->type = MPA_RX_EV_FPDU;
			ev->ulpdu_len = rx->ulpdu_len;
			rx_next_fpdu(rx);
			return (long)used;

		case MPA_RX_TRAILER:
			/* rx_whole() checked them: only count them off. */
			n = mpa_pad_len(rx->ulpdu_len) + MPA_CRC_LEN -
			    rx->part_done;
			if (n > avail)
				n = avail;
			rx->part_done = (uint8_t)(rx->part_done + n);
			rx->stream_off += n;
			used += n;
			if (rx->part_done < mpa_pad_len(rx->ulpdu_len) +
						    MPA_CRC_LEN)
				break;
			ev->type = MPA_RX_EV_FPDU;
			ev->ulpdu_len = rx->ulpdu_len;
			rx_next_fpdu(rx);
			return (long)used;

		default:
			return rx_fail(rx, MPA_ERR_LOCAL_CATASTROPHIC);
		}
	}
	return (long)used;
}

long mpa_rx_collect(struct mpa_rx *rx, const uint8_t *in, size_t len,
		    uint8_t *buf, size_t cap, size_t *ulpdu_len,
		    bool *complete)
{
	size_t used = 0;

	if (!rx || !buf || !ulpdu_len || !complete || (len && !in))
		return -EINVAL;
	*ulpdu_len = 0;
	*complete = false;
	while (used < len) {
		struct mpa_rx_event ev;
		long r = mpa_rx_feed(rx, in + used, len - used, &ev);

		if (r < 0)
			return r;
		used += (size_t)r;
		if (ev.type == MPA_RX_EV_DATA) {
			if ((size_t)ev.ulpdu_off + ev.len > cap)
				return -ENOBUFS;
			memcpy(buf + ev.ulpdu_off, ev.data, ev.len);
		} else if (ev.type == MPA_RX_EV_FPDU) {
			*ulpdu_len = ev.ulpdu_len;
			*complete = true;
			return (long)used;
		}
	}
	return (long)used;
}
