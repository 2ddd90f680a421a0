/* SPDX-License-Identifier: MIT */
/*
 * rdmap_wire.c - RDMAP (RFC 5040) opcode table, error names, the DDP +
 * RDMAP header codec and the RDMA Read Request header.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp.h"
#include "rdmap.h"
#include "rdmap_internal.h"

/*
 * RFC 5040 section 4 (RDMA Message Definitions), one row per opcode.
 * Opcodes 0x8..0xf are reserved here: their rows stay zero, so ->name is
 * NULL and they are rejected as "Unexpected OpCode".  RFC 7306 will fill
 * 0x8..0xb.  "request" marks the messages an initiator sends to start an
 * operation at its peer (Write, Read Request, the Sends); a Read Response
 * answers one and a Terminate ends the stream.
 */
static const struct rdmap_op_info rdmap_ops[RDMAP_OP__COUNT] = {
	[RDMAP_OP_WRITE] = {
		.name = "RDMA Write", .tagged = true, .request = true,
	},
	[RDMAP_OP_READ_REQ] = {
		.name = "RDMA Read Request", .qn = RDMAP_QN_READ_REQ,
		.hdr_len = RDMAP_READ_REQ_LEN, .request = true,
	},
	[RDMAP_OP_READ_RESP] = {
		.name = "RDMA Read Response", .tagged = true,
	},
	[RDMAP_OP_SEND] = {
		.name = "Send", .qn = RDMAP_QN_SEND, .request = true,
	},
	[RDMAP_OP_SEND_INV] = {
		.name = "Send with Invalidate", .qn = RDMAP_QN_SEND,
		.inval_stag = true, .request = true,
	},
	[RDMAP_OP_SEND_SE] = {
		.name = "Send with Solicited Event", .qn = RDMAP_QN_SEND,
		.solicited = true, .request = true,
	},
	[RDMAP_OP_SEND_SE_INV] = {
		.name = "Send with Solicited Event and Invalidate",
		.qn = RDMAP_QN_SEND, .inval_stag = true, .solicited = true,
		.request = true,
	},
	[RDMAP_OP_TERMINATE] = {
		.name = "Terminate", .qn = RDMAP_QN_TERMINATE,
	},
};

_Static_assert(sizeof(rdmap_ops) / sizeof(rdmap_ops[0]) == 16,
	       "RFC 5040 4: the opcode field is 4 bits, 16 rows");
_Static_assert(RDMAP_CTRL_OP_MASK + 1 == RDMAP_OP__COUNT,
	       "opcode mask and table size agree");
_Static_assert(RDMAP_READ_REQ_LEN == 4 + 8 + 4 + 4 + 8,
	       "RFC 5040 4: Read Request header is 28 octets");
_Static_assert(RDMAP_TERM_MAX_LEN == 52,
	       "RFC 5040 4.8: control 4 + length 2 + DDP 18 + RDMA 28");

/* Returned for op > 15: a row that says "not supported", never NULL. */
static const struct rdmap_op_info rdmap_op_none = { .name = NULL };

/* Row for opcode op; ->name is NULL if op is reserved or out of range. */
const struct rdmap_op_info *rdmap_op(unsigned int op)
{
	if (op >= RDMAP_OP__COUNT)
		return &rdmap_op_none;
	return &rdmap_ops[op];
}

/* ------------------------------------------------------------------ */
/* Errors                                                             */
/* ------------------------------------------------------------------ */

enum {
	RDMAP_ETYPE_CATASTROPHIC = 0,
	RDMAP_ETYPE_PROTECTION   = 1,
	RDMAP_ETYPE_OPERATION    = 2,
};

struct rdmap_error_row {
	uint8_t etype;
	uint8_t code;
	const char *name;
};

/* RFC 5040 section 7 (RDMAP layer errors), indexed by enum rdmap_error. */
static const struct rdmap_error_row rdmap_errors[] = {
	[RDMAP_ERR_NONE]                   = { 0, 0x00, "no error" },
	[RDMAP_ERR_LOCAL_CATASTROPHIC]     = { RDMAP_ETYPE_CATASTROPHIC, 0x00,
					       "local catastrophic" },
	[RDMAP_ERR_PROT_INVALID_STAG]      = { RDMAP_ETYPE_PROTECTION, 0x00,
					       "invalid STag" },
	[RDMAP_ERR_PROT_BASE_BOUNDS]       = { RDMAP_ETYPE_PROTECTION, 0x01,
					       "base or bounds violation" },
	[RDMAP_ERR_PROT_ACCESS]            = { RDMAP_ETYPE_PROTECTION, 0x02,
					       "access rights violation" },
	[RDMAP_ERR_PROT_STAG_NOT_ASSOC]    = { RDMAP_ETYPE_PROTECTION, 0x03,
					       "STag not associated with RDMAP stream" },
	[RDMAP_ERR_PROT_TO_WRAP]           = { RDMAP_ETYPE_PROTECTION, 0x04,
					       "TO wrap" },
	[RDMAP_ERR_PROT_CANT_INVALIDATE]   = { RDMAP_ETYPE_PROTECTION, 0x09,
					       "STag cannot be invalidated" },
	[RDMAP_ERR_PROT_UNSPECIFIED]       = { RDMAP_ETYPE_PROTECTION, 0xff,
					       "unspecified protection error" },
	[RDMAP_ERR_OP_VERSION]             = { RDMAP_ETYPE_OPERATION, 0x05,
					       "invalid RDMAP version" },
	[RDMAP_ERR_OP_OPCODE]              = { RDMAP_ETYPE_OPERATION, 0x06,
					       "unexpected opcode" },
	[RDMAP_ERR_OP_CATASTROPHIC_STREAM] = { RDMAP_ETYPE_OPERATION, 0x07,
					       "catastrophic error, localized to RDMAP stream" },
	[RDMAP_ERR_OP_CATASTROPHIC_GLOBAL] = { RDMAP_ETYPE_OPERATION, 0x08,
					       "catastrophic error, global" },
	[RDMAP_ERR_OP_CANT_INVALIDATE]     = { RDMAP_ETYPE_OPERATION, 0x09,
					       "STag cannot be invalidated" },
	[RDMAP_ERR_OP_UNSPECIFIED]         = { RDMAP_ETYPE_OPERATION, 0xff,
					       "unspecified operation error" },
};

_Static_assert(sizeof(rdmap_errors) / sizeof(rdmap_errors[0]) ==
	       RDMAP_ERR__COUNT, "one row per enum rdmap_error");

/*
 * Terminate encoding of err (layer 0). RDMAP_ERR_NONE and values outside
 * the enum give the local catastrophic encoding, 0x0000: there is no
 * better name for a fault nobody described.
 */
uint16_t rdmap_error_term(enum rdmap_error err)
{
	const struct rdmap_error_row *row;

	if ((unsigned int)err >= RDMAP_ERR__COUNT)
		err = RDMAP_ERR_LOCAL_CATASTROPHIC;
	row = &rdmap_errors[err];
	/* The layer nibble is RDMAP_LAYER_RDMAP, i.e. zero. */
	_Static_assert(RDMAP_LAYER_RDMAP == 0, "RFC 5040 7: RDMAP is layer 0");
	return (uint16_t)((unsigned int)row->etype << 8 | row->code);
}

/* Human-readable name of err; never NULL. */
const char *rdmap_error_str(enum rdmap_error err)
{
	if ((unsigned int)err >= RDMAP_ERR__COUNT)
		return "unknown RDMAP error";
	return rdmap_errors[err].name;
}

/* A fault found by RDMAP itself. */
struct rdmap_fault rdmap_fault_rdmap(enum rdmap_error err)
{
	struct rdmap_fault f = {
		.layer = RDMAP_LAYER_RDMAP,
		.code = (int)err,
		.term = rdmap_error_term(err),
	};
	return f;
}

/* A fault found by DDP, reported under the DDP layer (1). */
struct rdmap_fault rdmap_fault_ddp(enum ddp_error err)
{
	struct rdmap_fault f = {
		.layer = RDMAP_LAYER_DDP,
		.code = (int)err,
		.term = ddp_error_term(err),
	};
	return f;
}

/* A fault found by the LLP (MPA); its encoding comes from mpa/ untouched
 * because RDMAP must not include the MPA header. */
struct rdmap_fault rdmap_fault_llp(int mpa_error, uint16_t term)
{
	struct rdmap_fault f = {
		.layer = RDMAP_LAYER_LLP,
		.code = mpa_error,
		.term = term,
	};
	return f;
}

/* ------------------------------------------------------------------ */
/* Read Request header (RFC 5040 section 4)                           */
/* ------------------------------------------------------------------ */

/* Encode r (28 octets). Returns 28, -EINVAL on NULL, -ENOSPC if short. */
int rdmap_read_req_build(const struct rdmap_read_req *r, uint8_t *buf,
			 size_t cap)
{
	if (!r || !buf)
		return -EINVAL;
	if (cap < RDMAP_READ_REQ_LEN)
		return -ENOSPC;
	wisp_put_be32(buf + RDMAP_RREQ_OFF_SINK_STAG, r->sink_stag);
	wisp_put_be64(buf + RDMAP_RREQ_OFF_SINK_TO, r->sink_to);
	wisp_put_be32(buf + RDMAP_RREQ_OFF_SIZE, r->size);
	wisp_put_be32(buf + RDMAP_RREQ_OFF_SRC_STAG, r->src_stag);
	wisp_put_be64(buf + RDMAP_RREQ_OFF_SRC_TO, r->src_to);
	return RDMAP_READ_REQ_LEN;
}

/* Decode a Read Request header. Returns 28, -EAGAIN if len < 28,
 * -EINVAL on NULL. Never reads past buf + len. */
int rdmap_read_req_parse(const uint8_t *buf, size_t len,
			 struct rdmap_read_req *r)
{
	struct wisp_cur c = wisp_cur_init(buf, len);
	struct rdmap_read_req tmp;

	if (!buf || !r)
		return -EINVAL;
	if (len < RDMAP_READ_REQ_LEN)
		return -EAGAIN;
	/* Lengths were checked above; the cursor cannot fail from here. */
	wisp_cur_be32(&c, &tmp.sink_stag);
	wisp_cur_be64(&c, &tmp.sink_to);
	wisp_cur_be32(&c, &tmp.size);
	wisp_cur_be32(&c, &tmp.src_stag);
	wisp_cur_be64(&c, &tmp.src_to);
	*r = tmp;
	return RDMAP_READ_REQ_LEN;
}

/* ------------------------------------------------------------------ */
/* DDP + RDMAP header                                                 */
/* ------------------------------------------------------------------ */

/* Length of DDP + RDMAP header for op, 0 if op is not supported. */
size_t rdmap_hdr_len(unsigned int op)
{
	const struct rdmap_op_info *info = rdmap_op(op);

	if (!info->name)
		return 0;
	return ddp_hdr_len(info->tagged) + info->hdr_len;
}

/*
 * Encode h. T, QN and the Invalidate STag word come from the opcode table;
 * RV is always RDMAP_VERSION and the reserved bits zero. Returns the
 * length, -EINVAL on NULL or an unsupported opcode, -ENOSPC if cap is
 * short (nothing written then).
 */
int rdmap_hdr_build(const struct rdmap_hdr *h, uint8_t *buf, size_t cap)
{
	const struct rdmap_op_info *info;
	struct ddp_hdr d;
	size_t need;
	int n;

	if (!h || !buf)
		return -EINVAL;
	info = rdmap_op(h->opcode);
	if (!info->name)
		return -EINVAL;
	need = rdmap_hdr_len(h->opcode);
	if (cap < need)
		return -ENOSPC;

	d = h->ddp;
	d.tagged = info->tagged;
	/* RFC 5040 4.1: RV is "01b for an RNIC that complies with this RDMA
	 * protocol specification"; the reserved bits "MUST be set to zero
	 * by sender". */
	d.ulp_ctrl = (uint8_t)(RDMAP_VERSION << RDMAP_CTRL_RV_SHIFT |
			       (h->opcode & RDMAP_CTRL_OP_MASK));
	if (!info->tagged) {
		d.u.qn = info->qn;
		/* The 32-bit RsvdULP word carries the Invalidate STag for
		 * the *_INV Sends and is reserved (zero) for the rest. */
		d.u.ulp_word = info->inval_stag ? h->inval_stag : 0;
	}
	n = ddp_hdr_build(&d, buf, cap);
	if (n < 0)
		return n;
	if (h->opcode == RDMAP_OP_READ_REQ) {
		int m = rdmap_read_req_build(&h->rreq, buf + n, cap - (size_t)n);
		if (m < 0)
			return m;
		n += m;
	}
	return n;
}

/*
 * Decode and validate one ULPDU's DDP + RDMAP header. The checks run in
 * the order the fields can be trusted: DDP length and version, RDMAP
 * version, opcode, T bit against the opcode, QN against the opcode, then
 * the opcode's own header. Returns the header length; -EPROTO with *fault
 * set; -EINVAL on NULL. Never reads past buf + len.
 */
int rdmap_hdr_parse(const uint8_t *buf, size_t len, struct rdmap_hdr *h,
		    struct rdmap_fault *fault)
{
	const struct rdmap_op_info *info;
	enum ddp_error derr;
	int n;

	if (!buf || !h || !fault)
		return -EINVAL;
	/* No fault yet; built in place, not by rdmap_fault_rdmap(): this
	 * runs once per FPDU received. */
	*fault = (struct rdmap_fault){ .layer = RDMAP_LAYER_RDMAP,
				       .code = RDMAP_ERR_NONE, .term = 0 };
	h->rreq = (struct rdmap_read_req){ 0 };
	h->inval_stag = 0;

	n = ddp_hdr_parse(buf, len, &h->ddp, &derr);
	if (n == -EAGAIN) {
		/* len is a whole ULPDU: "need more" means "too short". */
		*fault = rdmap_fault_ddp(DDP_ERR_SEG_TOO_SHORT);
		return -EPROTO;
	}
	if (n < 0) {
		*fault = rdmap_fault_ddp(derr);
		return -EPROTO;
	}

	h->rv = (h->ddp.ulp_ctrl & RDMAP_CTRL_RV_MASK) >> RDMAP_CTRL_RV_SHIFT;
	h->opcode = h->ddp.ulp_ctrl & RDMAP_CTRL_OP_MASK;

	/*
	 * RFC 5040 4.1: RV is 01b for this specification and 00b for the
	 * RDMA Consortium's; "Both version numbers are valid", but wisp (like
	 * Linux siw) speaks only 01b and answers anything else with "Invalid
	 * RDMAP version" (section 7).
	 *
	 * The two reserved bits are "set to zero by sender, ignored by the
	 * receiver" (RFC 5040 4.1).
	 */
	if (h->rv != RDMAP_VERSION) {
		*fault = rdmap_fault_rdmap(RDMAP_ERR_OP_VERSION);
		return -EPROTO;
	}

	info = rdmap_op(h->opcode);
	if (!info->name) {
		*fault = rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE);
		return -EPROTO;
	}
	/* Section 4: each opcode is carried in one buffer model only. */
	if (info->tagged != h->ddp.tagged) {
		*fault = rdmap_fault_rdmap(RDMAP_ERR_OP_OPCODE);
		return -EPROTO;
	}
	/* Section 5: Sends use QN 0, Read Requests QN 1, Terminates QN 2;
	 * any other queue is a DDP "Invalid QN". */
	if (!info->tagged && h->ddp.u.qn != info->qn) {
		*fault = rdmap_fault_ddp(DDP_ERR_U_INVALID_QN);
		return -EPROTO;
	}
	if (info->inval_stag)
		h->inval_stag = h->ddp.u.ulp_word;

	if (h->opcode != RDMAP_OP_READ_REQ)
		return n;
	if (rdmap_read_req_parse(buf + n, len - (size_t)n, &h->rreq) < 0) {
		/* No RFC 5040 code names a truncated RDMAP header; the
		 * stream cannot go on, so it is the stream-local
		 * catastrophic remote operation error. */
		*fault = rdmap_fault_rdmap(RDMAP_ERR_OP_CATASTROPHIC_STREAM);
		return -EPROTO;
	}
	return n + RDMAP_READ_REQ_LEN;
}
