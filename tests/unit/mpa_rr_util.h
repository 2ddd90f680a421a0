/* SPDX-License-Identifier: MIT */
/*
 * Shared by the MPA negotiation suites (test_mpa_negotiate,
 * test_mpa_ext): building a Request/Reply frame, and the exchange of
 * built frames between an Initiator and a Responder, accepted or
 * rejected.
 */
#ifndef WISP_MPA_RR_UTIL_H
#define WISP_MPA_RR_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "mpa.h"

#define FRAME_MAX (MPA_RR_HDR_LEN + MPA_PD_MAX)

/* Build rr into buf (FRAME_MAX octets), return its length. */
static inline size_t build(const struct mpa_rr *rr, uint8_t *buf)
{
	int len = mpa_rr_build(rr, buf, FRAME_MAX);

	cr_assert_gt(len, 0, "mpa_rr_build: %d", len);
	return (size_t)len;
}

/* Both frames of one exchange, as they went on the wire. */
struct mpa_frames {
	uint8_t q[FRAME_MAX], p[FRAME_MAX];
	size_t qlen, plen;
};

/* The Initiator's Request (prefs ini) built into f->q, and read by the
 * Responder (prefs rsp) into *got, every octet taken. */
static inline void request_read(const struct mpa_prefs *ini,
				const struct mpa_prefs *rsp,
				struct mpa_rr *req, struct mpa_rr *got,
				struct mpa_frames *f)
{
	struct mpa_rr reject;
	enum mpa_error err;

	cr_assert_eq(mpa_nego_request(ini, req), 0);
	f->qlen = build(req, f->q);
	cr_assert_eq(mpa_nego_check_request(f->q, f->qlen, rsp, got, &reject,
					    &err), (int)f->qlen);
}

/* The whole exchange, accepted: the Responder's Reply built into f->p
 * and read by the Initiator. Returns mpa_nego_reply() (all of the Reply
 * taken when it succeeds), fills both sides' params. */
static inline int accepted_exchange(const struct mpa_prefs *ini,
				    const struct mpa_prefs *rsp,
				    struct mpa_rr *got, struct mpa_params *pi,
				    struct mpa_params *pr,
				    struct mpa_frames *f)
{
	struct mpa_rr req, reply;
	enum mpa_error err;
	int ret;

	request_read(ini, rsp, &req, got, f);
	cr_assert_eq(mpa_nego_accept(got, rsp, &reply, pr), 0);
	f->plen = build(&reply, f->p);
	ret = mpa_nego_reply(&req, ini, f->p, f->plen, pi, &err);
	if (ret > 0)
		cr_assert_eq(ret, (int)f->plen);
	return ret;
}

/* The whole exchange, the Responder's ULP refusing: its Reject built
 * into f->p (described in *rej) and read by the Initiator into *p,
 * which must report the refusal. */
static inline void rejected_exchange(const struct mpa_prefs *ini,
				     const struct mpa_prefs *rsp,
				     struct mpa_rr *rej, struct mpa_params *p,
				     struct mpa_frames *f)
{
	struct mpa_rr req, got;
	enum mpa_error err;

	request_read(ini, rsp, &req, &got, f);
	cr_assert_eq(mpa_nego_reject(&got, rsp, rej), 0);
	f->plen = build(rej, f->p);
	cr_assert_eq(mpa_nego_reply(&req, ini, f->p, f->plen, p, &err),
		     -ECONNREFUSED);
}

#endif
