/* SPDX-License-Identifier: MIT */
/*
 * rdmap.h - Remote Direct Memory Access Protocol (RFC 5040) wire formats.
 *
 * Pure codecs on top of ddp.h: the RDMAP control octet (RV, opcode) that
 * rides in DDP's reserved-for-ULP octet, the opcode table, the RDMA Read
 * Request header and the Terminate message. RFC 7306 opcodes (8..11) have
 * reserved slots in the table and are rejected until implemented.
 *
 * Errors: 0 (or a length) on success, -errno on misuse, -EPROTO with a
 * struct rdmap_fault naming the layer, error type and code of the fault.
 */
#ifndef WISP_RDMAP_H
#define WISP_RDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp.h"

#define RDMAP_VERSION          1

/* RDMAP control octet (DDP octet 1): RV(2) | Rsvd(2) | Opcode(4). */
#define RDMAP_CTRL_RV_SHIFT    6
#define RDMAP_CTRL_RV_MASK     0xc0
#define RDMAP_CTRL_RSVD_MASK   0x30
#define RDMAP_CTRL_OP_MASK     0x0f

enum rdmap_opcode {
	RDMAP_OP_WRITE          = 0x0,
	RDMAP_OP_READ_REQ       = 0x1,
	RDMAP_OP_READ_RESP      = 0x2,
	RDMAP_OP_SEND           = 0x3,
	RDMAP_OP_SEND_INV       = 0x4,
	RDMAP_OP_SEND_SE        = 0x5,
	RDMAP_OP_SEND_SE_INV    = 0x6,
	RDMAP_OP_TERMINATE      = 0x7,
	/* 0x8 .. 0xb: RFC 7306 (Immediate Data, Atomics), not yet enabled. */
	RDMAP_OP__COUNT         = 16,
};

/* Untagged queue numbers (RFC 5040 section 5). */
enum rdmap_qn {
	RDMAP_QN_SEND      = 0,
	RDMAP_QN_READ_REQ  = 1,
	RDMAP_QN_TERMINATE = 2,
	RDMAP_QN__COUNT    = 3,
};

#define RDMAP_READ_REQ_LEN     28   /* sink STag, sink TO, size, src STag, src TO */

/* One row of the opcode table. */
struct rdmap_op_info {
	const char *name;         /* NULL: opcode not supported */
	bool tagged;              /* carried in the tagged model */
	uint8_t qn;               /* untagged: the queue it uses */
	uint8_t hdr_len;          /* RDMAP header after the DDP header */
	bool inval_stag;          /* ulp_word carries an STag to invalidate */
	bool solicited;           /* Solicited Event */
	bool request;             /* initiator -> target: Write, Read Request,
				   * the Sends (not Read Response, Terminate) */
};

/* Row for opcode op (0..15); ->name is NULL for unsupported opcodes.
 * Never NULL: op > 15 gets an all-zero row too. */
const struct rdmap_op_info *rdmap_op(unsigned int op);

/* ------------------------------------------------------------------ */
/* Errors                                                             */
/* ------------------------------------------------------------------ */

enum rdmap_layer {
	RDMAP_LAYER_RDMAP = 0,
	RDMAP_LAYER_DDP   = 1,
	RDMAP_LAYER_LLP   = 2,
};

/* Faults of RFC 5040 section 7 (Terminate layer RDMAP). */
enum rdmap_error {
	RDMAP_ERR_NONE = 0,
	RDMAP_ERR_LOCAL_CATASTROPHIC,    /* etype 0, code 0x00 */
	RDMAP_ERR_PROT_INVALID_STAG,     /* etype 1, code 0x00 */
	RDMAP_ERR_PROT_BASE_BOUNDS,      /* etype 1, code 0x01 */
	RDMAP_ERR_PROT_ACCESS,           /* etype 1, code 0x02 */
	RDMAP_ERR_PROT_STAG_NOT_ASSOC,   /* etype 1, code 0x03 */
	RDMAP_ERR_PROT_TO_WRAP,          /* etype 1, code 0x04 */
	RDMAP_ERR_PROT_CANT_INVALIDATE,  /* etype 1, code 0x09 */
	RDMAP_ERR_PROT_UNSPECIFIED,      /* etype 1, code 0xff */
	RDMAP_ERR_OP_VERSION,            /* etype 2, code 0x05 */
	RDMAP_ERR_OP_OPCODE,             /* etype 2, code 0x06 */
	RDMAP_ERR_OP_CATASTROPHIC_STREAM,/* etype 2, code 0x07 */
	RDMAP_ERR_OP_CATASTROPHIC_GLOBAL,/* etype 2, code 0x08 */
	RDMAP_ERR_OP_CANT_INVALIDATE,    /* etype 2, code 0x09 */
	RDMAP_ERR_OP_UNSPECIFIED,        /* etype 2, code 0xff */
	RDMAP_ERR__COUNT
};

/* layer 0 << 12 | etype << 8 | code. RDMAP_ERR_NONE and values outside
 * the enum give the local catastrophic encoding 0x0000. */
uint16_t rdmap_error_term(enum rdmap_error err);
/* A short human-readable name, never NULL. */
const char *rdmap_error_str(enum rdmap_error err);

/*
 * A fault found while handling an FPDU, whatever layer found it.
 * .code is an enum rdmap_error (layer RDMAP), enum ddp_error (layer DDP)
 * or the enum mpa_error value (layer LLP); .term is the Terminate
 * encoding layer << 12 | etype << 8 | code.
 */
struct rdmap_fault {
	enum rdmap_layer layer;
	int code;
	uint16_t term;
};

/* layer RDMAP, code err, term rdmap_error_term(err) (e.g. 0x0102 access). */
struct rdmap_fault rdmap_fault_rdmap(enum rdmap_error err);
/* layer DDP, code err, term ddp_error_term(err) (e.g. 0x1101 bounds). */
struct rdmap_fault rdmap_fault_ddp(enum ddp_error err);
/* An LLP (MPA) fault; term as given by mpa_error_term(). */
struct rdmap_fault rdmap_fault_llp(int mpa_error, uint16_t term);

/* ------------------------------------------------------------------ */
/* Headers                                                            */
/* ------------------------------------------------------------------ */

struct rdmap_read_req {
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;            /* RDMA Read Message Size */
	uint32_t src_stag;
	uint64_t src_to;
};

/* A whole RDMAP header: DDP header, opcode and opcode-specific part. */
struct rdmap_hdr {
	struct ddp_hdr ddp;
	uint8_t rv;               /* on build: ignored, RDMAP_VERSION is sent */
	uint8_t opcode;           /* enum rdmap_opcode */
	struct rdmap_read_req rreq; /* RDMAP_OP_READ_REQ only */
	uint32_t inval_stag;      /* SEND_INV / SEND_SE_INV only */
};

/* Octets of DDP + RDMAP header for opcode op, or 0 if op is unsupported. */
size_t rdmap_hdr_len(unsigned int op);

/*
 * Encode h (DDP header with RDMAP control, and the Read Request header for
 * READ_REQ). Fills in the T bit, QN and the invalidate STag word from the
 * opcode table (ddp.tagged, ddp.u.qn, ddp.u.ulp_word and ddp.ulp_ctrl in h
 * are ignored; ulp_word is inval_stag for the *_INV Sends, else 0).
 * Returns the length, -ENOSPC (nothing written), or -EINVAL for NULL or
 * an unsupported opcode.
 */
int rdmap_hdr_build(const struct rdmap_hdr *h, uint8_t *buf, size_t cap);

/*
 * Decode and validate the DDP + RDMAP header at the start of one ULPDU of
 * len octets: DDP version, RDMAP version, opcode known, T bit and QN as
 * the opcode requires, the whole header present. Returns the header
 * length; -EPROTO with *fault set for a malformed header; -EINVAL on NULL.
 * Faults: DDP DDP_ERR_SEG_TOO_SHORT if the DDP header is cut short, the
 * DDP version errors, RDMAP_ERR_OP_VERSION, RDMAP_ERR_OP_OPCODE (opcode
 * 8..15, or T bit not the opcode's), DDP_ERR_U_INVALID_QN (untagged
 * opcode on another queue), RDMAP_ERR_OP_CATASTROPHIC_STREAM if the Read
 * Request header is cut short. The RDMAP reserved bits are not checked.
 * h->inval_stag is set for the *_INV Sends only, h->rreq for READ_REQ
 * only (zero otherwise). Never reads past buf + len.
 */
int rdmap_hdr_parse(const uint8_t *buf, size_t len, struct rdmap_hdr *h,
		    struct rdmap_fault *fault);

/* Encode the 28-octet Read Request header. Returns 28, -ENOSPC, -EINVAL
 * on NULL. */
int rdmap_read_req_build(const struct rdmap_read_req *r, uint8_t *buf,
			 size_t cap);
/* Decode it. Returns 28, -EAGAIN if len < 28, -EINVAL on NULL. Never
 * reads past buf + len. */
int rdmap_read_req_parse(const uint8_t *buf, size_t len,
			 struct rdmap_read_req *r);

/* ------------------------------------------------------------------ */
/* Terminate (RFC 5040 section 4.8)                                   */
/* ------------------------------------------------------------------ */

#define RDMAP_TERM_CTRL_LEN    4
#define RDMAP_TERM_HDRCT_M     0x4  /* DDP Segment Length valid */
#define RDMAP_TERM_HDRCT_D     0x2  /* terminated DDP header included */
#define RDMAP_TERM_HDRCT_R     0x1  /* terminated RDMA header included */

/* Longest Terminate payload: control + segment length + DDP + RDMA headers. */
#define RDMAP_TERM_MAX_LEN \
	(RDMAP_TERM_CTRL_LEN + 2 + DDP_UNTAGGED_HDR_LEN + RDMAP_READ_REQ_LEN)

struct rdmap_terminate {
	uint16_t term;            /* layer << 12 | etype << 8 | code */
	bool has_seg_len;         /* M */
	uint16_t seg_len;         /* DDP Segment Length of the faulting FPDU */
	bool has_ddp_hdr;         /* D */
	uint8_t ddp_hdr[DDP_UNTAGGED_HDR_LEN];
	uint8_t ddp_hdr_len;      /* 14 or 18 */
	bool has_rdma_hdr;        /* R */
	uint8_t rdma_hdr[RDMAP_READ_REQ_LEN];
	uint8_t rdma_hdr_len;
	bool siw_layout;          /* parsed: sent in Linux siw's little-endian
				   * bitfield layout (rdmap_term.c) */
};

/*
 * Fill t for a fault found in the segment whose ULPDU starts at seg
 * (seg_avail octets of it available, seg_len its MPA ULPDU length): copies
 * as much of the faulting DDP and RDMA headers as RFC 5040 section 4.8
 * asks for the fault's layer. seg may be NULL (no header to copy).
 * DDP and RDMAP faults other than local catastrophic ones: M + D (seg_len
 * and the 14/18-octet DDP header, by its T bit) when seg_avail covers that
 * header, and R (the 28-octet Read Request header) for an RDMAP remote
 * protection error on an untagged Read Request whose header seg_avail
 * covers (RFC 5040 figure 10). LLP faults and local catastrophic errors
 * copy nothing. t->term = fault->term.
 */
void rdmap_term_from_fault(struct rdmap_terminate *t,
			   const struct rdmap_fault *fault,
			   const uint8_t *seg, size_t seg_avail,
			   uint16_t seg_len);

/* Encode the Terminate message body (after the DDP header): control,
 * then segment length if M or D, DDP header if D, RDMA header if R.
 * Returns its length, -ENOSPC, -EINVAL on NULL or if ddp_hdr_len does not
 * match the quoted header's T bit or rdma_hdr_len is not 28. */
int rdmap_term_build(const struct rdmap_terminate *t, uint8_t *buf,
		     size_t cap);

/* Decode a Terminate message body of exactly len octets. Returns len;
 * -EPROTO for a malformed one (shorter than Hdrct promises, or trailing
 * octets, e.g. a quoted DDP header whose length is not its T bit's):
 * then, if len >= 4, t still holds the code as sent and no header;
 * -EINVAL on NULL. Recognises Linux siw's little-endian layout (Layer
 * and EType swapped, M/D/R in reserved bits) and reads it as siw meant
 * it, setting siw_layout. Accepts siw's "R set, only a non-Read-Request
 * DDP header quoted" as has_rdma_hdr == false. Never reads past
 * buf + len. */
int rdmap_term_parse(const uint8_t *buf, size_t len,
		     struct rdmap_terminate *t);

static inline unsigned int rdmap_term_layer(uint16_t term)
{
	return term >> 12;
}

static inline unsigned int rdmap_term_etype(uint16_t term)
{
	return (term >> 8) & 0xf;
}

static inline unsigned int rdmap_term_code(uint16_t term)
{
	return term & 0xff;
}

#endif /* WISP_RDMAP_H */
