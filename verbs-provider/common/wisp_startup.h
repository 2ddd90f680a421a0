/* SPDX-License-Identifier: MIT */
/*
 * wisp_startup.h - the MPA startup phase (RFC 5044 7.1.2 with the RFC
 * 6581 enhanced connection setup) over a connected TCP socket: the
 * Initiator's Request and Reply, the Responder's Request and its answer,
 * the Terminate an Initiator sends when it must refuse a Reply, and the
 * stream parameters the QP then runs with.
 *
 * Where it lives and why: the steps are the same for wisp_qp_connect_fd
 * (libibverbs.so.1, tests and the benchmark) and for the connection
 * manager (librdmacm.so.1, split around rdma_accept / rdma_reject). They
 * need socket I/O (tcp-glue/glue_mpa.h), the negotiation codec (mpa/) and
 * the startup Terminate (rdmap/), so they belong to neither tcp-glue/
 * (which may not include rdmap headers) nor mpa/ (a pure codec). They are
 * compiled once as a static library under verbs-provider/ and linked into
 * both drop-ins, rather than exported from libibverbs.so.1 under
 * WISP_PRIVATE_1: the private ABI stays as small as it is, and both
 * libraries always carry the same copy of the code.
 *
 * Nothing here takes a lock or keeps state between calls; every wait is
 * bounded by an absolute deadline in glue_mpa_now_ms() milliseconds (-1:
 * none). Functions return 0 (or a length) or a negative errno, with
 * glue_mpa.h's meanings (-ETIMEDOUT, -ECONNRESET, -EPROTO with *err).
 */
#ifndef WISP_STARTUP_H
#define WISP_STARTUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "glue_mpa.h"
#include "mpa.h"
#include "wisp_private.h"

/* The deadline timeout_ms from now (-1 if timeout_ms < 0). */
int64_t wisp_startup_deadline(int timeout_ms);

/* Milliseconds left until deadline, for glue_mpa.h calls: -1 for no
 * deadline, 0 once it has passed. */
int wisp_startup_ms_left(int64_t deadline);

/*
 * Disable Nagle on fd: MPA frames and RTRs are small and must not wait
 * (siw sets TCP_NODELAY too). A socketpair (tests) is not TCP and is left
 * alone. Returns 0 or a negative errno.
 */
int wisp_startup_nodelay(int fd);

/* ---- Initiator -------------------------------------------------------- */

/* One Initiator's exchange: the Request sent and the Reply read. */
struct wisp_startup_init {
	struct mpa_rr req;         /* .pdata points at prefs->pdata */
	uint8_t frame[GLUE_MPA_FRAME_MAX]; /* the Reply, once read */
};

/*
 * RFC 5044 7.1.2 rule 1: send the Request for prefs (mpa_nego_request)
 * within deadline. prefs and its private data must stay valid until
 * wisp_startup_read_reply() returns. Returns 0, -EINVAL / -EOPNOTSUPP
 * for prefs the negotiation refuses, or a glue_mpa_write() error.
 */
int wisp_startup_send_request(int fd, const struct mpa_prefs *prefs,
			      int64_t deadline, struct wisp_startup_init *x);

/* The Request for prefs built into x->frame, not sent: its length, or
 * -EINVAL / -EOPNOTSUPP as above. wisp_startup_send_request() is this
 * and a glue_mpa_write() of the frame. */
int wisp_startup_build_request(const struct mpa_prefs *prefs,
			       struct wisp_startup_init *x);

/*
 * Read the Reply to x->req within deadline and decide (mpa_nego_reply).
 * Returns
 *   0 with *params filled: the connection may enter full operation;
 *   -ECONNREFUSED: the Responder rejected it; params->peer_pdata (inside
 *     x->frame), peer_ird and peer_ord hold what the Reply carried;
 *   -EPROTO with *err set: a Reply that must be refused. For
 *     MPA_ERR_INSUFFICIENT_IRD and MPA_ERR_NO_MATCHING_RTR the RFC 6581
 *     9.1 / 9.2 Terminate has been sent (best effort) before returning;
 *   another negative errno from glue_mpa_read() (*err set for -EPROTO).
 * The caller closes fd on any error.
 */
int wisp_startup_read_reply(int fd, const struct mpa_prefs *prefs,
			    int64_t deadline, struct wisp_startup_init *x,
			    struct mpa_params *params, enum mpa_error *err);

/*
 * The same for a Reply already read into x->frame[0..len) (with
 * glue_mpa_rd_step, by a caller that serves many sockets without
 * blocking): decide, and send the Terminate within deadline if needed.
 * Returns as wisp_startup_read_reply().
 */
int wisp_startup_take_reply(int fd, const struct mpa_prefs *prefs,
			    int64_t deadline, struct wisp_startup_init *x,
			    size_t len, struct mpa_params *params,
			    enum mpa_error *err);

/* ---- Responder -------------------------------------------------------- */

/*
 * The Request frame[0..len) as it arrived: check it (mpa_nego_check_request)
 * into *req, whose pdata points into frame. A Request MPA itself refuses
 * (markers asked for, S without IRD/ORD words) is answered here with a
 * Reply with R set, written within deadline, and -ECONNREFUSED is
 * returned with *err naming why. Returns 0, -ECONNREFUSED, -EPROTO with
 * *err (a malformed Request: RFC 5044 7.1.2 rule 2, close the socket) or
 * -EINVAL.
 */
int wisp_startup_take_request(int fd, const uint8_t *frame, size_t len,
			      const struct mpa_prefs *prefs, int64_t deadline,
			      struct mpa_rr *req, enum mpa_error *err);

/*
 * Read the Request into frame within deadline (RFC 5044 7.1.2 rule 8),
 * then as wisp_startup_take_request(). Returns the frame length (> 0) or
 * its errors, or glue_mpa_read()'s.
 */
int wisp_startup_read_request(int fd, const struct mpa_prefs *prefs,
			      int64_t deadline,
			      uint8_t frame[GLUE_MPA_FRAME_MAX],
			      struct mpa_rr *req, enum mpa_error *err);

/* The Responder's answer, built before it is sent so that a caller can
 * report a bad choice (e.g. private data too long) without losing the
 * connection. */
struct wisp_startup_reply {
	uint8_t frame[GLUE_MPA_FRAME_MAX];
	size_t len;
	struct mpa_params params;  /* accept: what the connection runs with */
};

/*
 * Build the Reply to req with the local prefs: an accept
 * (mpa_nego_accept) or, with reject set, a Reply with R set carrying
 * prefs->pdata (mpa_nego_reject; RFC 5044 7.1.2). Pure. Returns 0 or the
 * negotiation's -EINVAL / -EOPNOTSUPP / -EMSGSIZE.
 */
int wisp_startup_build_reply(const struct mpa_rr *req,
			     const struct mpa_prefs *prefs, bool reject,
			     struct wisp_startup_reply *r);

/* Write r's frame within deadline. Returns 0 or a glue_mpa_write() error. */
int wisp_startup_send_reply(int fd, const struct wisp_startup_reply *r,
			    int64_t deadline);

/* ---- Both ------------------------------------------------------------- */

/*
 * The stream parameters for wisp_qp_attach_stream() after a successful
 * exchange whose outcome is p, on the Initiator's side if initiator.
 * Returns 0 or -EINVAL. The RTR is checked by wisp_qp_attach_stream().
 */
int wisp_startup_stream(const struct mpa_params *p, bool initiator,
			struct wisp_stream_params *sp);

/*
 * WISP_BIG_FPDU (docs/configuration.md): value is the variable's value,
 * NULL if unset. Returns what this side offers in wisp's large-FPDU
 * extension (struct mpa_prefs.ext_max_ulpdu): MPA_ULPDU_MAX, every
 * ULPDU_Length the receive path takes, for "on" or unset; 0 for "off";
 * -EINVAL for anything else.
 */
int wisp_startup_big_fpdu(const char *value);

#endif /* WISP_STARTUP_H */
