/* SPDX-License-Identifier: MIT */
/*
 * verbs_connect.c - wisp_qp_connect_fd(): the whole MPA startup phase on
 * an already connected socket (RFC 5044 7.1.2, RFC 6581 9), then the
 * socket goes to the QP. For tests and the benchmark, which connect two
 * QPs without rdma_cm; librdmacm runs the same steps split around the
 * application's rdma_accept / rdma_reject.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../wisp_private.h"
#include "glue_mpa.h"
#include "mpa.h"
#include "rdmap.h"
#include "rdmap_qp.h"

/* Milliseconds left until deadline (-1: none), never below 0. */
static int ms_left(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - glue_mpa_now_ms();
	if (left <= 0)
		return 0;
	return left > 0x7fffffff ? 0x7fffffff : (int)left;
}

static void to_mpa_prefs(const struct wisp_mpa_prefs *in,
			 struct mpa_prefs *out)
{
	memset(out, 0, sizeof(*out));
	out->rev = in->mpa_rev ? in->mpa_rev : 2;
	out->crc = in->crc;
	out->p2p = in->p2p;
	/* Offer (Initiator) or accept (Responder) both zero-length RTRs;
	 * the preference only orders them (RFC 6581 9.2). */
	out->rtr = MPA_RTR_WRITE | MPA_RTR_READ;
	out->rtr_prefer = in->read_rtr ? MPA_RTR_READ : MPA_RTR_WRITE;
	out->ird = in->ird;
	out->ord = in->ord;
}

static enum wisp_rtr rtr_of(const struct mpa_params *p, bool active)
{
	if (!p->p2p)
		return WISP_RTR_NONE;
	/* RFC 6581 9.3: the Initiator sends the first message of the
	 * negotiated RTR option; the Responder waits for it (RFC 5044 7.1.2
	 * rule 4: "MUST receive and validate at least one FPDU before
	 * sending any FPDUs"). */
	if (!active)
		return WISP_RTR_EXPECT;
	return p->rtr == MPA_RTR_READ ? WISP_RTR_SEND_READ :
	       WISP_RTR_SEND_WRITE;
}

/* The RFC 6581 Terminate of an Initiator that must refuse the Reply. */
static void send_terminate(int fd, enum mpa_error err, bool crc, int64_t dl)
{
	uint8_t fpdu[RDMAP_STARTUP_TERM_MAX];
	int len = rdmap_startup_terminate(err, crc, fpdu, sizeof(fpdu));

	if (len > 0)
		glue_mpa_write(fd, fpdu, (size_t)len, ms_left(dl));
}

/* Initiator: Request out, Reply in. Returns 0 or a negative errno. */
static int run_initiator(int fd, const struct mpa_prefs *mp, int64_t dl,
			 uint8_t *buf, struct mpa_params *params)
{
	struct mpa_rr req;
	enum mpa_error err;
	int ret, len;

	ret = mpa_nego_request(mp, &req);
	if (ret)
		return ret;
	len = mpa_rr_build(&req, buf, GLUE_MPA_FRAME_MAX);
	if (len < 0)
		return len;
	ret = glue_mpa_write(fd, buf, (size_t)len, ms_left(dl));
	if (ret)
		return ret;
	len = glue_mpa_read(fd, MPA_REPLY, buf, GLUE_MPA_FRAME_MAX,
			    ms_left(dl), &err);
	if (len < 0)
		return len;
	ret = mpa_nego_reply(&req, mp, buf, (size_t)len, params, &err);
	if (ret == -EPROTO && (err == MPA_ERR_INSUFFICIENT_IRD ||
			       err == MPA_ERR_NO_MATCHING_RTR))
		send_terminate(fd, err, params->crc || req.crc, dl);
	return ret < 0 ? ret : 0;
}

/* Responder: Request in, Reply (accept, or MPA's own reject) out. */
static int run_responder(int fd, const struct mpa_prefs *mp, int64_t dl,
			 uint8_t *buf, struct mpa_params *params)
{
	uint8_t out[GLUE_MPA_FRAME_MAX];
	struct mpa_rr req, reply;
	enum mpa_error err;
	int ret, len;

	len = glue_mpa_read(fd, MPA_REQUEST, buf, GLUE_MPA_FRAME_MAX,
			    ms_left(dl), &err);
	if (len < 0)
		return len;
	ret = mpa_nego_check_request(buf, (size_t)len, mp, &req, &reply, &err);
	if (ret == -ECONNREFUSED) {
		/* Markers or a broken enhanced Request: say no, then close. */
		len = mpa_rr_build(&reply, out, sizeof(out));
		if (len > 0)
			glue_mpa_write(fd, out, (size_t)len, ms_left(dl));
		return ret;
	}
	if (ret < 0)
		return ret;
	ret = mpa_nego_accept(&req, mp, &reply, params);
	if (ret)
		return ret;
	len = mpa_rr_build(&reply, out, sizeof(out));
	if (len < 0)
		return len;
	return glue_mpa_write(fd, out, (size_t)len, ms_left(dl));
}

int wisp_qp_connect_fd(struct ibv_qp *qp, int fd, bool active,
		       const struct wisp_mpa_prefs *prefs, int timeout_ms)
{
	int64_t dl = timeout_ms < 0 ? -1 : glue_mpa_now_ms() + timeout_ms;
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	struct wisp_stream_params sp;
	struct mpa_params params;
	struct mpa_prefs mp;
	int one = 1, ret;

	if (fd < 0)
		return EINVAL;
	if (!qp || !prefs) {
		close(fd);
		return EINVAL;
	}
	/* Small frames and RTRs must not wait for Nagle (siw disables it
	 * too). A socketpair in a test is not TCP: nothing to disable. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) &&
	    errno != EOPNOTSUPP && errno != ENOPROTOOPT) {
		ret = errno;
		close(fd);
		return ret;
	}

	to_mpa_prefs(prefs, &mp);
	if (active) {
		ret = run_initiator(fd, &mp, dl, buf, &params);
		/* siw reads nothing just after its Reply (glue_mpa.h). */
		if (!ret)
			glue_mpa_initiator_hold(GLUE_MPA_INITIATOR_HOLD_MS);
	}
	else
		ret = run_responder(fd, &mp, dl, buf, &params);
	if (ret) {
		close(fd);
		return -ret;
	}

	memset(&sp, 0, sizeof(sp));
	sp.mpa_rev = params.rev;
	sp.crc = params.crc;
	sp.markers = false;
	sp.ird = params.ird;
	sp.ord = params.ord;
	sp.rtr = rtr_of(&params, active);
	/* The socket is the QP's from here on, whatever the outcome. */
	return wisp_qp_attach_stream(qp, fd, &sp);
}
