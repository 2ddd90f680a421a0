/* SPDX-License-Identifier: MIT */
/*
 * mpa_setup.c - MPA Request and Reply frames (RFC 5044 section 7.1) with
 * the enhanced connection setup data of RFC 6581 section 9.
 *
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *  |      Key (16 octets): "MPA ID Req Frame" / "MPA ID Rep Frame" |
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *  |M|C|R|S| Res   |     Rev       |          PD_Length            |
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *  |A|B|           IRD             |C|D|           ORD             |  rev 2, S set
 *  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *  |                 private data (PD_Length octets in all)        |
 */
#include <errno.h>
#include <string.h>

#include "mpa.h"
#include "wisp_wire.h"

/* The offsets of mpa.h against the frame sizes of the RFCs. */
_Static_assert(MPA_RR_OFF_KEY + MPA_KEY_LEN == MPA_RR_OFF_FLAGS,
	       "RFC 5044 7.1: the flags octet follows the 16-octet key");
_Static_assert(MPA_RR_OFF_FLAGS + 1 == MPA_RR_OFF_REV &&
	       MPA_RR_OFF_REV + 1 == MPA_RR_OFF_PD_LEN,
	       "RFC 5044 7.1: flags, Rev and PD_Length share one word");
_Static_assert(MPA_RR_OFF_PD_LEN + 2 == MPA_RR_OFF_PD &&
	       MPA_RR_OFF_PD == MPA_RR_HDR_LEN && MPA_RR_HDR_LEN == 20,
	       "RFC 5044 7.1: private data follows a 20-octet header");
_Static_assert(MPA_PD_OFF_IRD + 2 == MPA_PD_OFF_ORD &&
	       MPA_PD_OFF_ORD + 2 == MPA_IRD_ORD_LEN && MPA_IRD_ORD_LEN == 4,
	       "RFC 6581 9: the IRD and ORD words are 16 bits each");
_Static_assert(sizeof("MPA ID Req Frame") - 1 == MPA_KEY_LEN &&
	       sizeof("MPA ID Rep Frame") - 1 == MPA_KEY_LEN,
	       "RFC 5044 7.1: the keys are 16 octets, no terminator sent");

static const char mpa_key_req[MPA_KEY_LEN] = "MPA ID Req Frame";
static const char mpa_key_rep[MPA_KEY_LEN] = "MPA ID Rep Frame";

static const char *mpa_key(enum mpa_frame_type type)
{
	return type == MPA_REQUEST ? mpa_key_req : mpa_key_rep;
}

static int mpa_rr_check(const struct mpa_rr *rr)
{
	if (rr->rev != 1 && rr->rev != 2)
		return -EINVAL;
	/* RFC 6581 section 9: the enhanced format exists only in rev 2. */
	if (rr->enhanced && rr->rev != 2)
		return -EINVAL;
	if (rr->reject && rr->type != MPA_REPLY)
		return -EINVAL;
	if (rr->ird > MPA_IRD_ORD_MAX || rr->ord > MPA_IRD_ORD_MAX)
		return -EINVAL;
	/* RFC 6581 9.2: "If Control Flag A is set to 0, then Control Flags
	 * B, C, and D MUST also be set to 0." */
	if (rr->rtr & ~(MPA_RTR_SEND | MPA_RTR_WRITE | MPA_RTR_READ))
		return -EINVAL;
	if (rr->rtr && !rr->p2p)
		return -EINVAL;
	if (rr->pdata_len && !rr->pdata)
		return -EINVAL;
	if ((size_t)rr->pdata_len + (rr->enhanced ? MPA_IRD_ORD_LEN : 0) +
	    (rr->ext_max_ulpdu ? MPA_EXT_LEN : 0) > MPA_PD_MAX)
		return -EMSGSIZE;
	return 0;
}

int mpa_rr_len(const struct mpa_rr *rr)
{
	int ret;

	if (!rr)
		return -EINVAL;
	ret = mpa_rr_check(rr);
	if (ret)
		return ret;
	return MPA_RR_HDR_LEN + (rr->enhanced ? MPA_IRD_ORD_LEN : 0) +
	       rr->pdata_len + (rr->ext_max_ulpdu ? MPA_EXT_LEN : 0);
}

int mpa_rr_build(const struct mpa_rr *rr, uint8_t *buf, size_t cap)
{
	uint16_t pd_len;
	uint8_t flags = 0;
	uint8_t *p;
	int len;

	if (!buf)
		return -EINVAL;
	len = mpa_rr_len(rr);
	if (len < 0)
		return len;
	if (cap < (size_t)len)
		return -ENOSPC;

	flags |= rr->markers ? MPA_FLAG_MARKERS : 0;
	flags |= rr->crc ? MPA_FLAG_CRC : 0;
	flags |= rr->reject ? MPA_FLAG_REJECT : 0;
	flags |= rr->enhanced ? MPA_FLAG_ENHANCED : 0;
	pd_len = (uint16_t)(len - MPA_RR_HDR_LEN);

	memcpy(buf + MPA_RR_OFF_KEY, mpa_key(rr->type), MPA_KEY_LEN);
	buf[MPA_RR_OFF_FLAGS] = flags;
	buf[MPA_RR_OFF_REV] = rr->rev;
	wisp_put_be16(buf + MPA_RR_OFF_PD_LEN, pd_len);
	p = buf + MPA_RR_OFF_PD;

	if (rr->enhanced) {
		uint16_t ird = rr->ird, ord = rr->ord;

		ird |= rr->p2p ? MPA_IRD_P2P : 0;
		ird |= (rr->rtr & MPA_RTR_SEND) ? MPA_IRD_SEND_RTR : 0;
		ord |= (rr->rtr & MPA_RTR_WRITE) ? MPA_ORD_WRITE_RTR : 0;
		ord |= (rr->rtr & MPA_RTR_READ) ? MPA_ORD_READ_RTR : 0;
		wisp_put_be16(p + MPA_PD_OFF_IRD, ird);
		wisp_put_be16(p + MPA_PD_OFF_ORD, ord);
		p += MPA_IRD_ORD_LEN;
	}
	if (rr->pdata_len)
		memcpy(p, rr->pdata, rr->pdata_len);
	/* Last, so that a peer that does not know it finds the ULP's data
	 * where it was sent (docs/interop.md). */
	if (rr->ext_max_ulpdu)
		mpa_ext_put(p + rr->pdata_len, rr->ext_max_ulpdu);
	return len;
}

static int mpa_fail(enum mpa_error *err, enum mpa_error what)
{
	if (err)
		*err = what;
	return -EPROTO;
}

int mpa_rr_parse(const uint8_t *buf, size_t len, enum mpa_frame_type type,
		 struct mpa_rr *rr, enum mpa_error *err)
{
	uint16_t pd_len;
	uint8_t flags;

	if (!buf || !rr || !err)
		return -EINVAL;
	*err = MPA_ERR_NONE;
	/* The key is checked as soon as it is here: a peer that does not
	 * speak MPA is refused without waiting for more octets. */
	if (memcmp(buf + MPA_RR_OFF_KEY, mpa_key(type),
		   len < MPA_KEY_LEN ? len : MPA_KEY_LEN))
		return mpa_fail(err, MPA_ERR_BAD_KEY);
	if (len < MPA_RR_HDR_LEN)
		return -EAGAIN;

	flags = buf[MPA_RR_OFF_FLAGS];
	pd_len = mpa_rr_pd_len(buf);
	memset(rr, 0, sizeof(*rr));
	rr->type = type;
	rr->rev = buf[MPA_RR_OFF_REV];

	/* RFC 5044 7.1: "Rev: This field contains the revision of MPA.
	 * For this version of the specification, senders MUST set this field
	 * to one." RFC 6581 defines revision 2; nothing else is spoken. */
	if (rr->rev != 1 && rr->rev != 2)
		return mpa_fail(err, MPA_ERR_BAD_REV);
	/* RFC 5044 7.1: "The maximum value of PD_Length is 512 octets." */
	if (pd_len > MPA_PD_MAX)
		return mpa_fail(err, MPA_ERR_PD_LEN);
	if (len < (size_t)MPA_RR_OFF_PD + pd_len)
		return -EAGAIN;

	rr->markers = flags & MPA_FLAG_MARKERS;
	rr->crc = flags & MPA_FLAG_CRC;
	/* RFC 5044 7.1.1: R "is set to zero, and not checked on reception
	 * in the MPA Request Frame"; Res "MUST be set to zero when sending,
	 * and not checked on reception". Linux siw sets a Res bit (0x08 of
	 * this octet) for an experiment of its own; it is ignored here. */
	rr->reject = type == MPA_REPLY && (flags & MPA_FLAG_REJECT);
	rr->enhanced = rr->rev == 2 && (flags & MPA_FLAG_ENHANCED);
	rr->pdata = buf + MPA_RR_OFF_PD;
	rr->pdata_len = pd_len;

	if (rr->enhanced) {
		uint16_t ird, ord;

		/* RFC 6581 6: "if the 'S' flag is set, Private Data MUST
		 * begin with enhanced RDMA connection establishment data";
		 * a frame too short for it cannot be understood (Linux siw
		 * rejects it too). */
		if (pd_len < MPA_IRD_ORD_LEN)
			return mpa_fail(err, MPA_ERR_ENHANCED);
		ird = wisp_get_be16(rr->pdata + MPA_PD_OFF_IRD);
		ord = wisp_get_be16(rr->pdata + MPA_PD_OFF_ORD);
		rr->ird = ird & MPA_IRD_ORD_MAX;
		rr->ord = ord & MPA_IRD_ORD_MAX;
		rr->p2p = ird & MPA_IRD_P2P;
		/* RFC 6581 9.2: "On reception, if Control Flag A is set to
		 * 0, then Control Flags B, C, and D MUST be ignored." */
		if (rr->p2p) {
			rr->rtr |= (ird & MPA_IRD_SEND_RTR) ? MPA_RTR_SEND : 0;
			rr->rtr |= (ord & MPA_ORD_WRITE_RTR) ? MPA_RTR_WRITE : 0;
			rr->rtr |= (ord & MPA_ORD_READ_RTR) ? MPA_RTR_READ : 0;
		}
		rr->pdata += MPA_IRD_ORD_LEN;
		rr->pdata_len -= MPA_IRD_ORD_LEN;
	}
	if (!rr->pdata_len)
		rr->pdata = NULL;
	return MPA_RR_HDR_LEN + pd_len;
}

/* ---- wisp's large-FPDU extension ----------------------------------- */

_Static_assert(MPA_EXT_OFF_MAGIC + MPA_EXT_MAGIC_LEN == MPA_EXT_LEN &&
	       MPA_EXT_OFF_LEN + 2 == MPA_EXT_OFF_MAGIC,
	       "the extension ends with its length and magic");
_Static_assert(MPA_EXT_ULP_PD_MAX + MPA_IRD_ORD_LEN <= MPA_PD_MAX,
	       "an extension within its budget always fits PD_Length");

const uint8_t mpa_ext_magic[MPA_EXT_MAGIC_LEN] = {
	'W', 'I', 'S', 'P', '-', 'E', 'X', 'T',
};

void mpa_ext_put(uint8_t out[MPA_EXT_LEN], uint16_t max_ulpdu)
{
	memset(out, 0, MPA_EXT_LEN);
	wisp_put_be16(out + MPA_EXT_OFF_MAX_ULPDU, max_ulpdu);
	out[MPA_EXT_OFF_VERSION] = MPA_EXT_VERSION;
	wisp_put_be16(out + MPA_EXT_OFF_LEN, MPA_EXT_LEN);
	memcpy(out + MPA_EXT_OFF_MAGIC, mpa_ext_magic, MPA_EXT_MAGIC_LEN);
}

uint16_t mpa_ext_find(const uint8_t *pdata, uint16_t len,
		      uint16_t *max_ulpdu)
{
	const uint8_t *tail;
	uint16_t ext_len;

	if (!pdata || !max_ulpdu || len < MPA_EXT_LEN)
		return 0;
	/* The fixed part of every version: length and magic, last. */
	tail = pdata + len - (MPA_EXT_LEN - MPA_EXT_OFF_LEN);
	if (memcmp(tail + 2, mpa_ext_magic, MPA_EXT_MAGIC_LEN))
		return 0;
	ext_len = wisp_get_be16(tail);
	if (ext_len < MPA_EXT_LEN || ext_len > len)
		return 0;
	/* A later version keeps version 1's fields where they are, counted
	 * from the extension's first octet, and adds its own between them
	 * and the tail: what version 1 needs is always readable. */
	tail = pdata + len - ext_len;
	if (tail[MPA_EXT_OFF_VERSION] < MPA_EXT_VERSION)
		return 0;
	*max_ulpdu = wisp_get_be16(tail + MPA_EXT_OFF_MAX_ULPDU);
	return ext_len;
}

uint32_t mpa_mulpdu(uint32_t emss, bool markers)
{
	uint32_t overhead = MPA_LEN_FIELD + MPA_CRC_LEN + emss % 4;
	uint32_t mulpdu;

	/* RFC 5044 4.5: "MULPDU = EMSS - (6 + 4 * Ceiling(EMSS / 512) +
	 * EMSS mod 4)" with markers, "MULPDU = EMSS - (6 + EMSS mod 4)"
	 * without. */
	if (markers)
		overhead += MPA_MARKER_LEN *
			    ((emss + MPA_MARKER_SPACING - 1) / MPA_MARKER_SPACING);
	mulpdu = emss > overhead ? emss - overhead : 0;
	/* "MPA on TCP sender MUST NOT shrink the MULPDU below 128 octets":
	 * on a tiny EMSS an FPDU spans several TCP segments instead. */
	if (mulpdu < MPA_MULPDU_MIN)
		mulpdu = MPA_MULPDU_MIN;
	return mulpdu > MPA_ULPDU_SEND_MAX ? MPA_ULPDU_SEND_MAX : mulpdu;
}

uint16_t mpa_rr_pd_len(const uint8_t *hdr)
{
	return wisp_get_be16(hdr + MPA_RR_OFF_PD_LEN);
}
