/* SPDX-License-Identifier: MIT */
/*
 * verbs_connect.c - wisp_qp_connect_fd(): the whole MPA startup phase on
 * an already connected socket (RFC 5044 7.1.2, RFC 6581 9), then the
 * socket goes to the QP. For tests and the benchmark, which connect two
 * QPs without rdma_cm. The steps are common/wisp_startup.c's, which
 * librdmacm runs split around the application's rdma_accept /
 * rdma_reject.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../wisp_private.h"
#include "common/wisp_startup.h"

static int to_mpa_prefs(const struct wisp_mpa_prefs *in,
			struct mpa_prefs *out)
{
	int big = wisp_startup_big_fpdu(getenv("WISP_BIG_FPDU"));

	if (big < 0)
		return big;
	memset(out, 0, sizeof(*out));
	out->ext_max_ulpdu = (uint16_t)big;
	out->rev = in->mpa_rev ? in->mpa_rev : 2;
	out->crc = in->crc;
	out->p2p = in->p2p;
	/* Offer (Initiator) or accept (Responder) both zero-length RTRs;
	 * the preference only orders them (RFC 6581 9.2). */
	out->rtr = MPA_RTR_WRITE | MPA_RTR_READ;
	out->rtr_prefer = in->read_rtr ? MPA_RTR_READ : MPA_RTR_WRITE;
	out->ird = in->ird;
	out->ord = in->ord;
	return 0;
}

/* Initiator: Request out, Reply in. Returns 0 or a negative errno. */
static int run_initiator(int fd, const struct mpa_prefs *mp, int64_t dl,
			 struct mpa_params *params)
{
	struct wisp_startup_init x;
	enum mpa_error err;
	int ret;

	ret = wisp_startup_send_request(fd, mp, dl, &x);
	if (ret)
		return ret;
	return wisp_startup_read_reply(fd, mp, dl, &x, params, &err);
}

/* Responder: Request in, Reply (accept, or MPA's own reject) out. */
static int run_responder(int fd, const struct mpa_prefs *mp, int64_t dl,
			 struct mpa_params *params)
{
	uint8_t frame[GLUE_MPA_FRAME_MAX];
	struct wisp_startup_reply r;
	enum mpa_error err;
	struct mpa_rr req;
	int ret;

	ret = wisp_startup_read_request(fd, mp, dl, frame, &req, &err);
	if (ret < 0)
		return ret;
	ret = wisp_startup_build_reply(&req, mp, false, &r);
	if (ret)
		return ret;
	*params = r.params;
	return wisp_startup_send_reply(fd, &r, dl);
}

int wisp_qp_connect_fd(struct ibv_qp *qp, int fd, bool active,
		       const struct wisp_mpa_prefs *prefs, int timeout_ms)
{
	int64_t dl = wisp_startup_deadline(timeout_ms);
	struct wisp_stream_params sp;
	struct mpa_params params;
	struct mpa_prefs mp;
	int ret;

	if (fd < 0)
		return EINVAL;
	if (!qp || !prefs) {
		close(fd);
		return EINVAL;
	}
	ret = wisp_startup_nodelay(fd);
	if (ret)
		goto err_close;

	ret = to_mpa_prefs(prefs, &mp);
	if (ret)
		goto err_close;
	if (active) {
		ret = run_initiator(fd, &mp, dl, &params);
		/* siw reads nothing just after its Reply (glue_mpa.h). */
		if (!ret)
			glue_mpa_initiator_hold(GLUE_MPA_INITIATOR_HOLD_MS);
	} else {
		ret = run_responder(fd, &mp, dl, &params);
	}
	if (!ret)
		ret = wisp_startup_stream(&params, active, &sp);
	if (ret)
		goto err_close;
	/* The socket is the QP's from here on, whatever the outcome. */
	return wisp_qp_attach_stream(qp, fd, &sp);

err_close:
	close(fd);
	return -ret;
}
