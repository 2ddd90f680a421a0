/* SPDX-License-Identifier: MIT */
/*
 * wisp_startup.c - the MPA startup phase over a connected socket, shared
 * by libibverbs.so.1 (wisp_qp_connect_fd) and librdmacm.so.1 (the
 * connection manager). Why it lives here: wisp_startup.h.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "common/wisp_startup.h"
#include "rdmap.h"
#include "rdmap_qp.h"

int64_t wisp_startup_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : glue_mpa_now_ms() + timeout_ms;
}

int wisp_startup_ms_left(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - glue_mpa_now_ms();
	if (left <= 0)
		return 0;
	return left > 0x7fffffff ? 0x7fffffff : (int)left;
}

int wisp_startup_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) &&
	    errno != EOPNOTSUPP && errno != ENOPROTOOPT)
		return -errno;
	return 0;
}

/* ---- Initiator -------------------------------------------------------- */

int wisp_startup_build_request(const struct mpa_prefs *prefs,
			       struct wisp_startup_init *x)
{
	int ret;

	if (!prefs || !x)
		return -EINVAL;
	ret = mpa_nego_request(prefs, &x->req);
	if (ret)
		return ret;
	return mpa_rr_build(&x->req, x->frame, sizeof(x->frame));
}

int wisp_startup_send_request(int fd, const struct mpa_prefs *prefs,
			      int64_t deadline, struct wisp_startup_init *x)
{
	int len;

	if (fd < 0)
		return -EINVAL;
	len = wisp_startup_build_request(prefs, x);
	if (len < 0)
		return len;
	return glue_mpa_write(fd, x->frame, (size_t)len,
			      wisp_startup_ms_left(deadline));
}

/* RFC 6581 9.1 / 9.2: an Initiator that cannot meet the Responder's ORD
 * or generate any RTR it names "MUST send a TERM message" before it
 * closes. Best effort: the connection is failing anyway. */
static void send_terminate(int fd, enum mpa_error err, bool crc,
			   int64_t deadline)
{
	uint8_t fpdu[RDMAP_STARTUP_TERM_MAX];
	int len = rdmap_startup_terminate(err, crc, fpdu, sizeof(fpdu));

	if (len > 0)
		glue_mpa_write(fd, fpdu, (size_t)len,
			       wisp_startup_ms_left(deadline));
}

int wisp_startup_read_reply(int fd, const struct mpa_prefs *prefs,
			    int64_t deadline, struct wisp_startup_init *x,
			    struct mpa_params *params, enum mpa_error *err)
{
	int len;

	if (fd < 0 || !prefs || !x || !params || !err)
		return -EINVAL;
	*err = MPA_ERR_NONE;
	/* RFC 5044 7.1.2 rule 10: "a reasonable timeout while waiting for
	 * the entire set of startup frames". */
	len = glue_mpa_read(fd, MPA_REPLY, x->frame, sizeof(x->frame),
			    wisp_startup_ms_left(deadline), err);
	if (len < 0)
		return len;
	return wisp_startup_take_reply(fd, prefs, deadline, x, (size_t)len,
				       params, err);
}

int wisp_startup_take_reply(int fd, const struct mpa_prefs *prefs,
			    int64_t deadline, struct wisp_startup_init *x,
			    size_t len, struct mpa_params *params,
			    enum mpa_error *err)
{
	int ret;

	if (fd < 0 || !prefs || !x || !params || !err ||
	    len > sizeof(x->frame))
		return -EINVAL;
	*err = MPA_ERR_NONE;
	ret = mpa_nego_reply(&x->req, prefs, x->frame, len, params, err);
	if (ret == -EPROTO && (*err == MPA_ERR_INSUFFICIENT_IRD ||
			       *err == MPA_ERR_NO_MATCHING_RTR))
		send_terminate(fd, *err, params->crc || x->req.crc, deadline);
	return ret < 0 ? ret : 0;
}

/* ---- Responder -------------------------------------------------------- */

int wisp_startup_take_request(int fd, const uint8_t *frame, size_t len,
			      const struct mpa_prefs *prefs, int64_t deadline,
			      struct mpa_rr *req, enum mpa_error *err)
{
	struct wisp_startup_reply r;
	struct mpa_rr refusal;
	int ret, n;

	if (fd < 0 || !frame || !prefs || !req || !err)
		return -EINVAL;
	ret = mpa_nego_check_request(frame, len, prefs, req, &refusal, err);
	if (ret != -ECONNREFUSED)
		return ret < 0 ? ret : 0;
	/* Markers asked for, or S without IRD/ORD words: refused by MPA
	 * with R set before the ULP hears of it (mpa_negotiate.c). */
	n = mpa_rr_build(&refusal, r.frame, sizeof(r.frame));
	if (n > 0)
		glue_mpa_write(fd, r.frame, (size_t)n,
			       wisp_startup_ms_left(deadline));
	return -ECONNREFUSED;
}

int wisp_startup_read_request(int fd, const struct mpa_prefs *prefs,
			      int64_t deadline,
			      uint8_t frame[GLUE_MPA_FRAME_MAX],
			      struct mpa_rr *req, enum mpa_error *err)
{
	int len, ret;

	if (fd < 0 || !prefs || !frame || !req || !err)
		return -EINVAL;
	/* RFC 5044 7.1.2 rule 8: "Implementations SHOULD put a timeout on
	 * waiting for the MPA Request Frame when started in Responder
	 * mode". */
	len = glue_mpa_read(fd, MPA_REQUEST, frame, GLUE_MPA_FRAME_MAX,
			    wisp_startup_ms_left(deadline), err);
	if (len < 0)
		return len;
	ret = wisp_startup_take_request(fd, frame, (size_t)len, prefs,
					deadline, req, err);
	return ret < 0 ? ret : len;
}

int wisp_startup_build_reply(const struct mpa_rr *req,
			     const struct mpa_prefs *prefs, bool reject,
			     struct wisp_startup_reply *r)
{
	struct mpa_rr reply;
	int ret, len;

	if (!req || !prefs || !r)
		return -EINVAL;
	memset(&r->params, 0, sizeof(r->params));
	if (reject)
		ret = mpa_nego_reject(req, prefs, &reply);
	else
		ret = mpa_nego_accept(req, prefs, &reply, &r->params);
	if (ret)
		return ret;
	len = mpa_rr_build(&reply, r->frame, sizeof(r->frame));
	if (len < 0)
		return len;
	r->len = (size_t)len;
	return 0;
}

int wisp_startup_send_reply(int fd, const struct wisp_startup_reply *r,
			    int64_t deadline)
{
	if (fd < 0 || !r)
		return -EINVAL;
	return glue_mpa_write(fd, r->frame, r->len,
			      wisp_startup_ms_left(deadline));
}

/* ---- Both ------------------------------------------------------------- */

int wisp_startup_stream(const struct mpa_params *p, bool initiator,
			struct wisp_stream_params *sp)
{
	if (!p || !sp)
		return -EINVAL;
	memset(sp, 0, sizeof(*sp));
	sp->mpa_rev = p->rev;
	sp->crc = p->crc;
	sp->markers = false;
	sp->ird = p->ird;
	sp->ord = p->ord;
	/* RFC 6581 9.3: the Initiator sends the first message of the
	 * negotiated RTR option; the Responder waits for it (RFC 5044 7.1.2
	 * rule 4: "MUST receive and validate at least one FPDU before
	 * sending any FPDUs"). wisp_qp_attach_stream() maps this. */
	sp->p2p = p->p2p;
	sp->initiator = initiator;
	sp->rtr = p->p2p ? p->rtr : 0;
	sp->peer_max_ulpdu = p->peer_max_ulpdu;
	return 0;
}

int wisp_startup_big_fpdu(const char *value)
{
	if (!value || !strcmp(value, "on"))
		return MPA_ULPDU_MAX;
	if (!strcmp(value, "off"))
		return 0;
	return -EINVAL;
}
