/* SPDX-License-Identifier: MIT */
/*
 * mpa.h - Marker PDU Aligned framing (RFC 5044), with the enhanced
 * connection setup of RFC 6581.
 *
 * Pure codecs over byte buffers: no I/O, no allocation, no globals.
 *
 *  - Connection setup: build and parse the MPA Request and Reply frames.
 *  - Transmit: frame one ULPDU as an FPDU (length, markers, pad, CRC) into
 *    an iovec list that points at the caller's payload (no payload copy).
 *  - Receive: an incremental decoder that accepts the TCP byte stream in any
 *    chunking and hands out ULPDU bytes, FPDU boundaries and named errors.
 *
 * Errors: functions return 0 (or a length) on success and -errno on misuse.
 * A protocol violation returns -EPROTO and names the fault as an enum
 * mpa_error; mpa_error_term() gives its RFC 5040 Terminate encoding.
 */
#ifndef WISP_MPA_H
#define WISP_MPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

/* ------------------------------------------------------------------ */
/* Constants                                                          */
/* ------------------------------------------------------------------ */

#define MPA_KEY_LEN         16
#define MPA_RR_HDR_LEN      20   /* key + flags + rev + PD_Length */
#define MPA_PD_MAX          512  /* RFC 5044 7.1: PD_Length <= 512 */
#define MPA_IRD_ORD_LEN     4    /* RFC 6581 IRD and ORD words */
#define MPA_IRD_ORD_MAX     0x3fff

/*
 * Octet offsets in the Request / Reply frame, named after the fields of
 * RFC 5044 section 7.1 and of the RFC 6581 (section 9) enhanced
 * connection data that opens the private data when S is set.
 * Both frames have the same layout; only the key differs.
 */
#define MPA_RR_OFF_KEY      0    /* 16 octets "MPA ID Req/Rep Frame" */
#define MPA_RR_OFF_FLAGS    16   /* M C R S Res */
#define MPA_RR_OFF_REV      17
#define MPA_RR_OFF_PD_LEN   18   /* 16-bit PD_Length */
#define MPA_RR_OFF_PD       20   /* private data, PD_Length octets */
/* Within the private data, when S is set: */
#define MPA_PD_OFF_IRD      0    /* A B and 14-bit IRD */
#define MPA_PD_OFF_ORD      2    /* C D and 14-bit ORD */

#define MPA_LEN_FIELD       2    /* ULPDU_Length */
#define MPA_CRC_LEN         4
#define MPA_MARKER_LEN      4
#define MPA_MARKER_SPACING  512
#define MPA_ULPDU_MAX       0xffff  /* what ULPDU_Length can say */
#define MPA_ULPDU_SEND_MAX  64768   /* RFC 5044 3: largest ULPDU sent */
#define MPA_MULPDU_MIN      128  /* RFC 5044 4.5 */

/*
 * Flags octet of the Request/Reply frame (octet 16). M in a Request asks
 * for markers in the Responder's FPDUs, in a Reply for markers in the
 * Initiator's; C set by either side means CRCs both ways (RFC 5044 7.1.1).
 * Reserved bits are sent as zero and not checked on reception.
 */
#define MPA_FLAG_MARKERS    0x80 /* M */
#define MPA_FLAG_CRC        0x40 /* C */
#define MPA_FLAG_REJECT     0x20 /* R, Reply only */
#define MPA_FLAG_ENHANCED   0x10 /* S: RFC 6581 enhanced data present */
#define MPA_FLAG_RES_MASK   0x0f /* reserved */

/* RFC 6581 IRD word: peer-to-peer flag (A) and zero-length SEND RTR (B). */
#define MPA_IRD_P2P         0x8000
#define MPA_IRD_SEND_RTR    0x4000
/* RFC 6581 ORD word: zero-length WRITE RTR (C) and READ RTR (D). */
#define MPA_ORD_WRITE_RTR   0x8000
#define MPA_ORD_READ_RTR    0x4000

/* RTR indications, as a set of bits in struct mpa_rr.rtr. */
enum mpa_rtr {
	MPA_RTR_SEND  = 1 << 0,
	MPA_RTR_WRITE = 1 << 1,
	MPA_RTR_READ  = 1 << 2,
};

/* ------------------------------------------------------------------ */
/* Errors                                                             */
/* ------------------------------------------------------------------ */

/*
 * Every protocol fault MPA can detect. The Terminate layer is LLP (2),
 * error type MPA (0); the code is RFC 5044 section 8 / RFC 6581 section 9.
 */
enum mpa_error {
	MPA_ERR_NONE = 0,
	MPA_ERR_STREAM_LOST,      /* 0x01 TCP connection closed or lost */
	MPA_ERR_CRC,              /* 0x02 CRC did not match */
	MPA_ERR_MARKER,           /* 0x03 marker's FPDUPTR points wrong */
	MPA_ERR_ULPDU_LEN,        /* 0x03 ULPDU_Length out of range */
	MPA_ERR_BAD_KEY,          /* 0x04 not an MPA Request/Reply key */
	MPA_ERR_BAD_REV,          /* 0x04 revision not 1 or 2 */
	MPA_ERR_PD_LEN,           /* 0x04 PD_Length above 512 */
	MPA_ERR_ENHANCED,         /* 0x04 S bit set but no IRD/ORD words */
	MPA_ERR_LOCAL_CATASTROPHIC, /* 0x05 */
	MPA_ERR_INSUFFICIENT_IRD, /* 0x06 */
	MPA_ERR_NO_MATCHING_RTR,  /* 0x07 */
	MPA_ERR__COUNT
};

/* Terminate layer / error type / code packed as in the Terminate control
 * field: layer << 12 | etype << 8 | code. */
uint16_t mpa_error_term(enum mpa_error err);
/* A short human-readable name, never NULL. */
const char *mpa_error_str(enum mpa_error err);

/* ------------------------------------------------------------------ */
/* CRC32c                                                             */
/* ------------------------------------------------------------------ */

/*
 * CRC32c (Castagnoli, RFC 3720 section 12.1) with ISA-L. Incremental:
 * start with MPA_CRC_INIT, feed with mpa_crc_update(), finish with
 * mpa_crc_final() which returns the CRC value (e.g. 0xe3069283 for
 * "123456789"). Buffers of up to MPA_CRC_SMALL octets take the CPU's
 * CRC32c instruction inline where it has one (x86-64 SSE4.2), larger
 * ones ISA-L; the result is the same.
 */
#define MPA_CRC_INIT 0xffffffffu
#define MPA_CRC_SMALL 64
uint32_t mpa_crc_update(uint32_t state, const void *buf, size_t len);
uint32_t mpa_crc_final(uint32_t state);
uint32_t mpa_crc32c(const void *buf, size_t len);

/*
 * The CRC field's octets on the wire: least significant byte first, as in
 * RFC 3720's test vectors and as Linux siw sends it (docs/wire-formats.md).
 */
void mpa_crc_put(uint8_t out[MPA_CRC_LEN], uint32_t crc);
uint32_t mpa_crc_get(const uint8_t in[MPA_CRC_LEN]);

/* ------------------------------------------------------------------ */
/* Connection setup: MPA Request / Reply                              */
/* ------------------------------------------------------------------ */

enum mpa_frame_type { MPA_REQUEST, MPA_REPLY };

/*
 * A Request or Reply frame. For rev 2 with .enhanced set, the IRD/ORD
 * words are carried first in the private data and counted in PD_Length;
 * .pdata / .pdata_len is the ULP's private data after them.
 */
struct mpa_rr {
	enum mpa_frame_type type;
	uint8_t rev;              /* 1 or 2 */
	bool markers;             /* M */
	bool crc;                 /* C */
	bool reject;              /* R (Reply only) */
	bool enhanced;            /* RFC 6581: IRD/ORD words present */
	bool p2p;                 /* RFC 6581 peer-to-peer flag */
	uint16_t ird;             /* 0 .. MPA_IRD_ORD_MAX */
	uint16_t ord;             /* 0 .. MPA_IRD_ORD_MAX */
	uint8_t rtr;              /* set of enum mpa_rtr; needs p2p */
	const uint8_t *pdata;     /* parse: points into the input buffer */
	uint16_t pdata_len;
	/* wisp's large-FPDU extension (below): build appends it after
	 * pdata when nonzero. mpa_rr_parse() leaves a received one inside
	 * pdata and this 0; mpa_nego_check_request() and mpa_nego_reply()
	 * take it out of pdata into this field. */
	uint16_t ext_max_ulpdu;
};

/* Octets of the encoded frame, or -EINVAL / -EMSGSIZE if it cannot be
 * encoded (bad revision, enhanced with rev 1, private data with the
 * extension too long). */
int mpa_rr_len(const struct mpa_rr *rr);

/* The PD_Length field of a received Request/Reply header (hdr holds at
 * least MPA_RR_HDR_LEN octets): the frame is MPA_RR_HDR_LEN + that long.
 * Not range-checked: compare it with MPA_PD_MAX, or parse the frame. */
uint16_t mpa_rr_pd_len(const uint8_t *hdr);

/*
 * Encode rr into buf. Returns the frame length, -EINVAL for an invalid rr,
 * -EMSGSIZE if the private data exceeds MPA_PD_MAX, -ENOSPC if cap is short.
 */
int mpa_rr_build(const struct mpa_rr *rr, uint8_t *buf, size_t cap);

/*
 * Parse one frame of the given type from the start of buf.
 * Returns the frame length (> 0) with *rr filled (pdata points into buf),
 * -EAGAIN if buf holds only part of a frame (call again with more),
 * -EPROTO with *err set for a malformed frame, -EINVAL on NULL arguments.
 * Never reads past buf + len.
 */
int mpa_rr_parse(const uint8_t *buf, size_t len, enum mpa_frame_type type,
		 struct mpa_rr *rr, enum mpa_error *err);

/* ------------------------------------------------------------------ */
/* wisp's large-FPDU extension                                        */
/* ------------------------------------------------------------------ */

/*
 * Not an RFC: an extension wisp peers carry at the END of the private
 * data of the Request and the Reply, after the ULP's own (docs/
 * wire-formats.md draws it, docs/interop.md argues the place). It names
 * the largest ULPDU_Length its sender accepts; two wisp peers that both
 * sent it frame FPDUs up to that size instead of one TCP segment's. A
 * third party hands it to its application as trailing private data.
 *
 * Version 1 is 16 octets. It is found from the end of the private data:
 * the last 8 octets are the magic, the 2 before them its length, so a
 * later version can grow at the front and still be found and skipped.
 *
 *   0: Max_ULPDU (16)   2: reserved (16)   4: Version (8)   5: reserved (8)
 *   6: Ext_Length (16)  8: magic "WISP-EXT" (8 octets)
 */
#define MPA_EXT_LEN            16   /* version 1, as sent */
#define MPA_EXT_VERSION        1
#define MPA_EXT_MAGIC_LEN      8
#define MPA_EXT_OFF_MAX_ULPDU  0    /* from the extension's first octet */
#define MPA_EXT_OFF_VERSION    4
#define MPA_EXT_OFF_LEN        6
#define MPA_EXT_OFF_MAGIC      8
/*
 * The extension is only sent when the ULP's private data and it together
 * fit in 255 octets: rdma_cm's private_data_len is 8 bits (struct
 * rdma_conn_param, struct rdma_cm_event), so a third party's connection
 * manager can hand all of it to its application.
 */
#define MPA_EXT_ULP_PD_MAX     255

extern const uint8_t mpa_ext_magic[MPA_EXT_MAGIC_LEN];

/* Write the version 1 extension for max_ulpdu into out[0..MPA_EXT_LEN). */
void mpa_ext_put(uint8_t out[MPA_EXT_LEN], uint16_t max_ulpdu);

/*
 * If pdata[0..len) ends with a well-formed extension (magic, a length
 * from MPA_EXT_LEN to len, a version of 1 or more), return its length
 * and set *max_ulpdu from it; else return 0 and leave *max_ulpdu alone.
 * Anything else, a truncated or garbled extension included, is not one:
 * it stays the ULP's private data, as a third party would deliver it.
 * Never reads outside pdata[0..len).
 */
uint16_t mpa_ext_find(const uint8_t *pdata, uint16_t len,
		      uint16_t *max_ulpdu);

/* ------------------------------------------------------------------ */
/* Sizes                                                              */
/* ------------------------------------------------------------------ */

/*
 * RFC 5044 section 4.5: MULPDU from the effective MSS (EMSS):
 *   no markers:  EMSS - (6 + EMSS mod 4)
 *   markers:     EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)
 * never below MPA_MULPDU_MIN (128) and never above MPA_ULPDU_SEND_MAX.
 */
uint32_t mpa_mulpdu(uint32_t emss, bool markers);

/* Pad octets after a ULPDU of ulpdu_len octets (0..3). */
static inline uint32_t mpa_pad_len(uint32_t ulpdu_len)
{
	return (4u - ((MPA_LEN_FIELD + ulpdu_len) & 3u)) & 3u;
}

/* ------------------------------------------------------------------ */
/* Transmit: FPDU framing                                             */
/* ------------------------------------------------------------------ */

/* Per-direction transmit state. */
struct mpa_tx {
	bool crc;
	bool markers;
	uint64_t stream_off;      /* FPDU-stream octets sent so far */
};

void mpa_tx_init(struct mpa_tx *tx, bool crc, bool markers);

/* Largest number of markers one FPDU can contain. */
#define MPA_MAX_MARKERS_PER_FPDU \
	((MPA_LEN_FIELD + MPA_ULPDU_MAX + 3 + MPA_CRC_LEN) / \
	 (MPA_MARKER_SPACING - MPA_MARKER_LEN) + 2)

/* Largest FPDU (wire octets) that mpa_fpdu_frame() lays out whole in its
 * scratch when markers are off. */
#define MPA_FPDU_FLAT_MAX 256

/*
 * Framing octets that mpa_fpdu_frame() writes; live until the send is done.
 * len is the last member and the struct has no padding (byte arrays
 * only), so a caller that keeps the first octets of its ULPDU right after
 * the scratch (a DDP header) gets length field and header as one iovec:
 * mpa_fpdu_frame() merges iovecs that are adjacent in memory. Pad and CRC
 * likewise go out as one.
 */
struct mpa_fpdu_scratch {
	uint8_t trailer[3 + MPA_CRC_LEN];       /* pad + CRC */
	union {
		uint8_t markers[MPA_MAX_MARKERS_PER_FPDU][MPA_MARKER_LEN];
		uint8_t flat[MPA_FPDU_FLAT_MAX]; /* a whole small FPDU */
	};
	uint8_t len[MPA_LEN_FIELD];
};

_Static_assert(MPA_FPDU_FLAT_MAX <= MPA_MAX_MARKERS_PER_FPDU * MPA_MARKER_LEN,
	       "the flat FPDU shares the markers' room, unused without them");
_Static_assert(offsetof(struct mpa_fpdu_scratch, len) ==
		       offsetof(struct mpa_fpdu_scratch, markers) +
			       sizeof(((struct mpa_fpdu_scratch *)0)->markers),
	       "the length field follows the markers' room in memory");
_Static_assert(MPA_MAX_MARKERS_PER_FPDU * MPA_MARKER_LEN >=
		       MPA_FPDU_FLAT_MAX + 3 + MPA_CRC_LEN,
	       "room for a joined trailer past the largest flat FPDU");

/*
 * Frame one ULPDU (given as ulpdu[0..n)) as an FPDU. On success writes up
 * to out_cap iovecs to out (length field, ULPDU pieces split around markers,
 * markers, pad + CRC) and returns their count; the iovecs point at the
 * caller's ULPDU buffers and at scr, and pieces that follow each other in
 * memory share one iovec (see struct mpa_fpdu_scratch). Without markers,
 * an FPDU of at most MPA_FPDU_FLAT_MAX octets is instead copied whole
 * into scr (the ULPDU is read now) and comes out as one iovec. Advances
 * tx->stream_off.
 * Returns -EMSGSIZE if the ULPDU is longer than MPA_ULPDU_SEND_MAX,
 * -ENOSPC if out_cap is too small (tx is then unchanged).
 */
int mpa_fpdu_frame(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		   struct mpa_fpdu_scratch *scr, struct iovec *out,
		   int out_cap);

/*
 * Two FPDUs framed one after the other into the same gathered send
 * (issue 13: the kernel walks each iovec, and a one-segment FPDU has
 * three: length field + header, payload, pad + CRC). prev is the last
 * iovec of the earlier FPDU, framed by mpa_fpdu_frame() with scratch
 * prev_scr; first is the first iovec of the later one, framed with scr.
 * If prev is exactly the earlier FPDU's pad + CRC and first begins at
 * scr's length field, without markers, the pad + CRC octets are copied
 * to just before scr->len (the markers' room, unused without markers
 * and beyond any flat FPDU) and *first is widened back over them:
 * the caller then drops prev, and the two FPDUs' framing octets go out
 * as one iovec. Which octets go on the wire, and in what order, is
 * unchanged. Returns true if joined, false (nothing changed) if not.
 * The earlier FPDU's CRC must be final (it is, once framed).
 */
static inline bool mpa_fpdu_join(const struct mpa_tx *tx,
				 const struct mpa_fpdu_scratch *prev_scr,
				 const struct iovec *prev,
				 struct mpa_fpdu_scratch *scr,
				 struct iovec *first)
{
	uint8_t *at;
	size_t t = prev->iov_len;

	if (tx->markers || prev->iov_base != (const void *)prev_scr->trailer ||
	    t < MPA_CRC_LEN || t > sizeof(prev_scr->trailer) ||
	    first->iov_base != (void *)scr->len)
		return false;
	at = (uint8_t *)scr->markers + sizeof(scr->markers) - t;
	memcpy(at, prev_scr->trailer, t);
	first->iov_base = at;
	first->iov_len += t;
	return true;
}

/*
 * Framing a small ULPDU in place, without gathering it from pieces
 * first: mpa_fpdu_flat_ulpdu() returns where in scr->flat the ULPDU of
 * an FPDU of ulpdu_len octets goes, or NULL unless that FPDU is laid
 * out flat (no markers, at most MPA_FPDU_FLAT_MAX octets on the wire).
 * The caller writes the ULPDU's ulpdu_len octets there, then
 * mpa_fpdu_flat_finish() writes the length field, pad and CRC, sets
 * *out to the whole FPDU (one iovec) and advances tx->stream_off. The
 * octets on the wire are those mpa_fpdu_frame() lays out for the same
 * ULPDU.
 */
static inline uint8_t *mpa_fpdu_flat_ulpdu(const struct mpa_tx *tx,
					    struct mpa_fpdu_scratch *scr,
					    size_t ulpdu_len)
{
	if (tx->markers || MPA_LEN_FIELD + ulpdu_len +
				   mpa_pad_len((uint32_t)ulpdu_len) +
				   MPA_CRC_LEN > MPA_FPDU_FLAT_MAX)
		return NULL;
	return scr->flat + MPA_LEN_FIELD;
}

void mpa_fpdu_flat_finish(struct mpa_tx *tx, struct mpa_fpdu_scratch *scr,
			  size_t ulpdu_len, struct iovec *out);

/*
 * Frame a ULPDU (ulpdu[0..n)) whole into buf, without markers: length
 * field, the ULPDU's octets copied in, pad and CRC, the CRC computed in
 * one pass over the copy. For a sender that lays many small FPDUs one
 * after the other in a buffer of its own, so that the kernel gets one
 * iovec for all of them instead of two or three for each (issue 13: at
 * MTU 1500 the kernel's walk of small iovecs costs more than the copy,
 * docs/performance-log.md "FPDUs that fit one segment: one copy, one
 * iovec"). The octets are those mpa_fpdu_frame() sends for the same
 * ULPDU. Advances tx->stream_off. Returns the FPDU's wire length,
 * -EINVAL with markers, -EMSGSIZE if the ULPDU is longer than
 * MPA_ULPDU_SEND_MAX, -ENOSPC if it does not fit cap (tx unchanged).
 */
int mpa_fpdu_copy(struct mpa_tx *tx, const struct iovec *ulpdu, int n,
		  uint8_t *buf, size_t cap);

/* Octets the next FPDU for a ULPDU of ulpdu_len octets takes on the wire. */
size_t mpa_fpdu_wire_len(const struct mpa_tx *tx, uint32_t ulpdu_len);

/*
 * Convenience: frame a contiguous ULPDU into buf. Returns the FPDU's wire
 * length, or -EMSGSIZE / -ENOSPC as above.
 */
int mpa_fpdu_encode(struct mpa_tx *tx, const void *ulpdu, size_t len,
		    uint8_t *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* Receive: incremental FPDU decoder                                  */
/* ------------------------------------------------------------------ */

enum mpa_rx_state {
	MPA_RX_LEN,       /* reading ULPDU_Length */
	MPA_RX_ULPDU,     /* handing out ULPDU octets */
	MPA_RX_PAD,       /* pad octets */
	MPA_RX_CRC,       /* CRC octets */
	MPA_RX_TRAILER,   /* pad and CRC, already checked: skipped */
	MPA_RX_FAILED,    /* a fault was reported; stays here */
};

struct mpa_rx {
	bool crc;
	bool markers;
	uint16_t max_ulpdu;       /* longest ULPDU accepted */
	enum mpa_rx_state state;
	enum mpa_error error;     /* set when state is MPA_RX_FAILED */
	uint64_t stream_off;      /* FPDU-stream offset of the next octet */
	uint64_t len_pos;         /* stream offset of this FPDU's ULPDU_Length */
	uint32_t crc_state;
	uint16_t ulpdu_len;
	uint16_t ulpdu_done;      /* ULPDU octets handed out so far */
	uint8_t part_done;        /* octets of len/pad/CRC/marker collected */
	uint8_t marker_done;      /* 0..4 octets of a marker in progress */
	uint8_t hold[MPA_MARKER_LEN];
	uint8_t marker[MPA_MARKER_LEN];
};

/*
 * max_ulpdu: the largest ULPDU_Length accepted (MULPDU of the local side,
 * or MPA_ULPDU_MAX to accept anything framing allows).
 */
void mpa_rx_init(struct mpa_rx *rx, bool crc, bool markers,
		 uint16_t max_ulpdu);

enum mpa_rx_event_type {
	MPA_RX_EV_NONE,   /* all input consumed, nothing to report */
	MPA_RX_EV_DATA,   /* ULPDU octets: data / len at ulpdu_off */
	MPA_RX_EV_FPDU,   /* an FPDU ended and passed all checks */
};

struct mpa_rx_event {
	enum mpa_rx_event_type type;
	uint16_t ulpdu_len;       /* DATA, FPDU: length of the current ULPDU */
	uint16_t ulpdu_off;       /* DATA: offset of data within the ULPDU */
	const uint8_t *data;      /* DATA: points into the input */
	size_t len;               /* DATA: octets at data */
};

/*
 * Feed stream octets in[0..len). Consumes framing octets (length, markers,
 * pad, CRC) and stops at the first event: a run of ULPDU octets (DATA),
 * the end of a good FPDU (FPDU), or a fault (-EPROTO, rx->error set, rx
 * stays failed). Returns the number of input octets consumed (which may be
 * less than len: call again with the rest), or -EPROTO.
 *
 * DATA runs never cross a marker, so they are contiguous ULPDU octets;
 * the CRC has already been updated over them. An FPDU event follows the
 * last DATA run of a ULPDU once pad and CRC are checked (a zero-length
 * ULPDU yields only the FPDU event). Without markers, an FPDU that lies
 * whole in the input from its length field on is checked (length, CRC)
 * before anything of it is handed out: one DATA run of the whole ULPDU,
 * then the FPDU event.
 */
long mpa_rx_feed(struct mpa_rx *rx, const uint8_t *in, size_t len,
		 struct mpa_rx_event *ev);

/*
 * A whole FPDU at once: if the decoder stands at an FPDU's first octet,
 * without markers, and in[0..len) holds that whole FPDU, check it (length,
 * CRC) and consume all of it, pad and CRC included; ev is then an FPDU
 * event whose data / len are the whole ULPDU (len == ulpdu_len, 0 for an
 * empty one), and the decoder stands at the next FPDU. Returns the octets
 * consumed; 0 if the FPDU is not whole in the input, or the decoder is
 * elsewhere, or markers are on (mpa_rx_feed() then takes it); -EPROTO on
 * a fault (as mpa_rx_feed() would report it, nothing handed out), or
 * -EINVAL on NULL. The same checks as mpa_rx_feed()'s, in one call
 * instead of a DATA and an FPDU event.
 */
long mpa_rx_whole(struct mpa_rx *rx, const uint8_t *in, size_t len,
		  struct mpa_rx_event *ev);

/*
 * In MPA_RX_ULPDU state: how many ULPDU octets follow contiguously in the
 * stream before the next marker or the end of the ULPDU. A receiver can
 * recv() that many octets straight into their destination and then pass
 * them to mpa_rx_feed() at that address (zero-copy placement). 0 in any
 * other state.
 */
size_t mpa_rx_contig(const struct mpa_rx *rx);

/* ULPDU octets of the current FPDU that mpa_rx_feed() has handed out so
 * far (the offset of the next ULPDU octet); 0 for a NULL rx. */
size_t mpa_rx_ulpdu_done(const struct mpa_rx *rx);

/* True between FPDUs: no octet of an FPDU (nor of a marker) is held
 * or half read; false for a NULL rx. */
bool mpa_rx_between(const struct mpa_rx *rx);

/* Why the decoder failed (the fault of the -EPROTO mpa_rx_feed()
 * returned), or MPA_ERR_NONE while it has not failed or for a NULL rx. */
enum mpa_error mpa_rx_error(const struct mpa_rx *rx);

/*
 * Convenience over mpa_rx_feed(): assemble the current ULPDU into
 * buf[0..cap). Returns the octets consumed; when an FPDU completed within
 * them, *complete is true, *ulpdu_len is its length and buf holds the
 * ULPDU. Call again with the unconsumed rest. -EPROTO on a fault
 * (rx->error), -ENOBUFS if the ULPDU does not fit in cap.
 */
long mpa_rx_collect(struct mpa_rx *rx, const uint8_t *in, size_t len,
		    uint8_t *buf, size_t cap, size_t *ulpdu_len,
		    bool *complete);

/* ------------------------------------------------------------------ */
/* Negotiation                                                        */
/* ------------------------------------------------------------------ */

/*
 * The decisions of the MPA startup phase (RFC 5044 7.1.2, RFC 6581 9),
 * as pure functions: what the Initiator puts in its Request, what the
 * Responder answers, what the Initiator makes of the Reply. No I/O.
 *
 * Roles: the Initiator sends the Request (rdma_connect side), the
 * Responder answers it (rdma_accept / rdma_reject side).
 */

/* Per-connection IRD / ORD limit, as Linux siw (SIW_MAX_IRD_QP/ORD_QP). */
#define MPA_NEGO_IRD_ORD_LIMIT  128

/* Local preferences for one connection. */
struct mpa_prefs {
	uint8_t rev;              /* Initiator: 1 or 2 (0 means 2). The
				   * Responder answers in the Request's. */
	bool crc;                 /* set C: ask for CRC32c both ways */
	bool markers;             /* must be false: markers not implemented */
	bool p2p;                 /* Initiator, rev 2: ask for peer-to-peer */
	uint8_t rtr;              /* Initiator: RTRs offered; Responder: RTRs
				   * it accepts (enum mpa_rtr set; 0 means
				   * WRITE | READ) */
	uint8_t rtr_prefer;       /* the preferred one of them (0: READ) */
	uint16_t ird;             /* wanted local IRD (clamped to the limit) */
	uint16_t ord;             /* wanted local ORD (clamped to the limit) */
	const uint8_t *pdata;     /* ULP private data */
	uint16_t pdata_len;
	uint16_t ext_max_ulpdu;   /* the largest ULPDU this side accepts,
				   * offered in wisp's extension; 0: none
				   * (WISP_BIG_FPDU=off) */
};

/* The outcome of a successful exchange, for the local end. */
struct mpa_params {
	uint8_t rev;              /* revision in use (the Request's) */
	bool crc;                 /* CRC32c in every FPDU, both directions */
	bool enhanced;            /* IRD/ORD were exchanged (RFC 6581) */
	bool p2p;                 /* peer-to-peer: an RTR comes first */
	uint8_t rtr;              /* the RTR (one enum mpa_rtr) or 0 */
	uint16_t ird;             /* local IRD to configure */
	uint16_t ord;             /* local ORD to configure */
	uint16_t peer_ird;        /* IRD / ORD as the peer sent them (RFC */
	uint16_t peer_ord;        /* 6581 9.1: passed to the ULP); 0 if none */
	const uint8_t *peer_pdata; /* the peer's ULP private data, without
				    * wisp's extension */
	uint16_t peer_pdata_len;
	uint16_t peer_max_ulpdu;  /* both sides sent wisp's extension (the
				   * Responder: the Request had it and local
				   * offers one): the largest ULPDU the peer
				   * accepts. 0: FPDUs fit one TCP segment */
};

/*
 * Initiator: the Request for prefs into *req (type MPA_REQUEST). Rev 2
 * always carries the RFC 6581 IRD/ORD words; with p2p it offers
 * prefs->rtr. req->pdata points at prefs->pdata. prefs->ext_max_ulpdu
 * is offered in wisp's extension if the private data leaves room
 * (MPA_EXT_ULP_PD_MAX); else req->ext_max_ulpdu is 0.
 * Returns 0, -EINVAL for invalid prefs (rev, p2p with rev 1),
 * -EOPNOTSUPP if markers are asked for, -EMSGSIZE if the private data
 * does not fit (512 octets, IRD/ORD words included).
 */
int mpa_nego_request(const struct mpa_prefs *prefs, struct mpa_rr *req);

/*
 * Responder, first step: examine a received Request frame buf[0..len).
 * Returns the frame length (> 0) with *req parsed (req->pdata points into
 * buf; a wisp extension at its end is taken out into req->ext_max_ulpdu)
 * when the ULP may now accept or reject it;
 * -EAGAIN if buf holds only part of a frame;
 * -ECONNREFUSED with *err set when MPA itself refuses a well-formed
 *   Request (markers asked for, or S set without the IRD/ORD words): send
 *   *reject (R set, built with local), then close;
 * -EPROTO with *err set for a malformed frame (key, revision, PD_Length):
 *   close at once without a Reply (RFC 5044 7.1.2 rule 2);
 * -EINVAL on NULL arguments.
 */
int mpa_nego_check_request(const uint8_t *buf, size_t len,
			   const struct mpa_prefs *local, struct mpa_rr *req,
			   struct mpa_rr *reject, enum mpa_error *err);

/*
 * Responder, accept: the Reply to a Request that passed
 * mpa_nego_check_request() and the resulting parameters. reply->pdata
 * points at local->pdata, params->peer_pdata at req->pdata. If req has
 * wisp's extension and local->ext_max_ulpdu is set, params->peer_max_ulpdu
 * is the Request's and the Reply carries local's extension (if local's
 * private data leaves room; a Reject never does).
 * Returns 0, -EINVAL for invalid arguments, -EOPNOTSUPP if local asks for
 * markers, -EMSGSIZE if local private data does not fit.
 */
int mpa_nego_accept(const struct mpa_rr *req, const struct mpa_prefs *local,
		    struct mpa_rr *reply, struct mpa_params *params);

/*
 * Responder, reject: the Reply with R set, carrying local->pdata (RFC 5044
 * 7.1.2 rule 2: "return an MPA Reply Frame with the Rejected Connection
 * bit set"). Returns 0, -EINVAL or -EMSGSIZE as mpa_nego_accept().
 */
int mpa_nego_reject(const struct mpa_rr *req, const struct mpa_prefs *local,
		    struct mpa_rr *reply);

/*
 * Initiator: process the Reply frame buf[0..len) to the Request req that
 * was sent with prefs local.
 * Returns the frame length (> 0) with *params filled when the connection
 *   may enter full operation (params->peer_max_ulpdu set only if req
 *   offered wisp's extension and the Reply carried one; a Reply's
 *   extension is never part of params->peer_pdata);
 * -ECONNREFUSED when the Responder rejected it: params->peer_pdata,
 *   peer_ird, peer_ord hold what the Reply carried;
 * -EPROTO with *err set when it must be closed: a malformed Reply
 *   (MPA_ERR_BAD_KEY, _BAD_REV also for a revision other than the
 *   Request's, _PD_LEN, _ENHANCED also for missing IRD/ORD words after an
 *   enhanced Request), markers demanded (MPA_ERR_LOCAL_CATASTROPHIC), an
 *   IRD above the limit demanded (MPA_ERR_INSUFFICIENT_IRD) or no RTR in
 *   common (MPA_ERR_NO_MATCHING_RTR); the last two call for a Terminate
 *   (RFC 6581 9.1, 9.2);
 * -EAGAIN if buf holds only part of a frame; -EINVAL on NULL arguments.
 */
int mpa_nego_reply(const struct mpa_rr *req, const struct mpa_prefs *local,
		   const uint8_t *buf, size_t len, struct mpa_params *params,
		   enum mpa_error *err);

#endif /* WISP_MPA_H */
