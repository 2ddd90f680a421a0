/* SPDX-License-Identifier: MIT */
/*
 * cm_active.c - the active side of a connection: rdma_connect starts a
 * thread that connects TCP within the timeout (refused or timed out:
 * UNREACHABLE), sends the Request, reads the Reply (R set: REJECTED with
 * the Responder's private data; anything unacceptable: CONNECT_ERROR)
 * and hands the socket to the QP. The MPA steps are
 * common/wisp_startup.c's.
 *
 * Status of the failure events follows the kernel's iWARP CM
 * (cma_iw_handler): -ECONNREFUSED for a rejection by the peer's
 * application and for a refused TCP connect, -ECONNRESET for a peer that
 * closed during the exchange, -ETIMEDOUT for a timeout, -EPROTO for an
 * MPA protocol fault. With TLS (docs/tls.md) a failed handshake, or a
 * TLS failure met while the Reply is read (a client certificate the
 * listener refused arrives as an alert then), is reported with
 * glue_tls_fail_errno()'s status: REJECTED with -EPROTONOSUPPORT when the
 * peer closed at the ClientHello (a plaintext-only listener),
 * UNREACHABLE with -ETIMEDOUT, CONNECT_ERROR with a status per reason
 * otherwise; one warning names the reason.
 */
#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_internal.h"
#include "common/wisp_startup.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

static void connect_failed(struct wcm_id *w, int fd, int status,
			   const struct mpa_params *p)
{
	enum rdma_cm_event_type type;
	struct glue_tls *t = fd >= 0 ? glue_tls_of(fd) : NULL;
	char who[64];

	if (t && glue_tls_failure(t) != GLUE_TLS_OK) {
		status = glue_tls_fail_errno(glue_tls_failure(t));
		p = NULL;
		wcm_log(WCM_LOG_WARN, "connect to %s: TLS: %s",
			wcm_addr_str(&w->id.route.addr.dst_addr, who,
				     sizeof(who)),
			glue_tls_fail_str(glue_tls_failure(t)));
	}
	switch (status) {
	case -EPROTONOSUPPORT:
		type = RDMA_CM_EVENT_REJECTED;
		break;
	case -ECONNREFUSED:
		/* Refused by TCP (nobody listens) or, with p, by the
		 * peer's application with an MPA Reject. */
		type = p ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_UNREACHABLE;
		break;
	case -ETIMEDOUT:
	case -ENETUNREACH:
	case -EHOSTUNREACH:
	case -EADDRNOTAVAIL:
		type = RDMA_CM_EVENT_UNREACHABLE;
		break;
	case -ECONNRESET:
		type = RDMA_CM_EVENT_REJECTED;
		break;
	default:
		type = RDMA_CM_EVENT_CONNECT_ERROR;
	}
	if (t) {
		/* Before the event: the application may exit on it. */
		glue_tls_drop(fd);
		glue_tls_thread_done();
	}
	pthread_mutex_lock(&wcm.lock);
	if (w->fd == fd)
		w->fd = -1;
	wcm_set_state(w, WCM_FAILED);
	wcm_log(WCM_LOG_INFO, "connect to %s: %s (%s)",
		wcm_addr_str(&w->id.route.addr.dst_addr, who, sizeof(who)),
		rdma_event_str(type), strerror(-status));
	wcm_event_queue(w, w, type, status, p ? p->peer_pdata : NULL,
			p ? p->peer_pdata_len : 0);
	pthread_mutex_unlock(&wcm.lock);
	if (fd >= 0) {
		glue_tls_drop(fd);
		close(fd);
	}
}

/*
 * The TLS handshake as initiator on the connected fd, within tmo
 * (docs/tls.md): the session is attached to fd first, so that the MPA
 * exchange runs inside it and connect_failed() finds why it failed.
 * An initiator never falls back to plaintext (WISP_TLS=optional counts
 * as required here). Returns 0 or a negative errno.
 */
static int tls_connect(int fd, const struct glue_tls_config *cfg,
		       const struct sockaddr *dst, int tmo)
{
	char why[256], addr[INET6_ADDRSTRLEN + 8];
	struct glue_tls_ctx *ctx;
	struct glue_tls *t;
	int ret;

	ctx = glue_tls_ctx_get(cfg, false, why, sizeof(why));
	if (!ctx) {
		wcm_log(WCM_LOG_ERROR, "TLS: %s", why);
		return -EINVAL;
	}
	if (getnameinfo(dst, wcm_addrlen(dst), addr, sizeof(addr), NULL, 0,
			NI_NUMERICHOST))
		addr[0] = 0;
	/* A link-local scope ("%eth0") is no part of an IP SAN. */
	addr[strcspn(addr, "%")] = 0;
	t = glue_tls_new(ctx, fd, addr[0] ? addr : NULL);
	if (!t)
		return -ENOMEM;
	ret = glue_tls_attach(fd, t);
	if (ret) {
		glue_tls_free(t);
		return ret;
	}
	ret = glue_tls_handshake(t, tmo);
	if (!ret)
		wcm_log(WCM_LOG_INFO, "connect to %s: %s", addr,
			glue_tls_describe(t, why, sizeof(why)));
	return ret;
}

static void *connect_thread(void *arg)
{
	struct wcm_id *w = arg;
	struct wisp_startup_init x;
	struct sockaddr_storage dst;
	struct mpa_params params;
	struct mpa_prefs prefs;
	struct glue_tls_config tls;
	struct ibv_qp *qp;
	enum mpa_error err;
	socklen_t alen;
	int fd, ret, tmo;
	bool dying, had_qp;

	pthread_mutex_lock(&wcm.lock);
	memcpy(&dst, &w->id.route.addr.dst_storage, sizeof(dst));
	wcm_opts_prefs(&w->opts, &prefs);
	prefs.ird = w->ird;
	prefs.ord = w->ord;
	prefs.pdata = w->conn_pdata_len ? w->conn_pdata : NULL;
	prefs.pdata_len = w->conn_pdata_len;
	tmo = w->opts.timeout_ms;
	tls = w->opts.tls;
	had_qp = w->id.qp || w->ext_qp;
	fd = w->fd;
	pthread_mutex_unlock(&wcm.lock);

	ret = glue_mpa_connect(fd, (struct sockaddr *)&dst,
			       wcm_addrlen((struct sockaddr *)&dst), tmo);
	if (ret)
		goto fail;
	wcm_no_delay(fd);
	pthread_mutex_lock(&wcm.lock);
	alen = sizeof(w->id.route.addr.src_storage);
	getsockname(fd, &w->id.route.addr.src_addr, &alen);
	pthread_mutex_unlock(&wcm.lock);
	if (tls.mode != GLUE_TLS_OFF) {
		ret = tls_connect(fd, &tls, (struct sockaddr *)&dst, tmo);
		if (ret)
			goto fail;
	}

	/* The Request and the Reply each within the timeout, as the
	 * connect. */
	ret = wisp_startup_send_request(fd, &prefs,
					wisp_startup_deadline(tmo), &x);
	if (ret)
		goto fail;
	ret = wisp_startup_read_reply(fd, &prefs, wisp_startup_deadline(tmo),
				      &x, &params, &err);
	if (ret == -ECONNREFUSED) {
		connect_failed(w, fd, ret, &params);
		goto done;
	}
	if (ret < 0) {
		if (err)
			wcm_log(WCM_LOG_WARN, "MPA Reply refused: %s",
				mpa_error_str(err));
		goto fail;
	}

	pthread_mutex_lock(&wcm.lock);
	dying = w->dying;
	/* The application may have destroyed the QP while the exchange
	 * went on (rdma_destroy_qp): take it again now, and from here on
	 * rdma_destroy_qp waits until the stream is attached. */
	if (had_qp && !w->id.qp && !w->ext_qp)
		dying = true;
	qp = w->id.qp ? w->id.qp : w->ext_qp;
	if (!dying) {
		w->fd = -1;
		wcm_set_state(w, WCM_ATTACHING);
	}
	pthread_mutex_unlock(&wcm.lock);
	if (dying) {
		ret = -ECANCELED;
		goto fail;
	}
	wcm_establish(w, qp, fd, &params, true);
	goto done;

fail:
	connect_failed(w, fd, ret, NULL);
done:
	glue_tls_thread_done();
	wcm_thread_done(w);
	return NULL;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct wcm_id *w;
	size_t pd_len = 0;
	int ret, fd;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_ROUTE_RESOLVED) {
		ret = -EINVAL;
		goto out;
	}
	/* As rdma_accept. Without a QP and without a QP number the
	 * connection is made for the CM alone (events, no data). */
	ret = wcm_resolve_qp(w, param, "rdma_connect");
	if (ret)
		goto out;
	ret = wcm_depth_of(param ? param->responder_resources : 0xff,
		       WCM_MAX_RD_ATOMIC, &w->ird);
	if (!ret)
		ret = wcm_depth_of(param ? param->initiator_depth : 0xff,
			       WCM_MAX_RD_ATOMIC, &w->ord);
	if (ret)
		goto out;
	/* rdma_create_ep's ai_connect data goes first (rdma-core). */
	if (w->ep_connect_len) {
		pd_len = w->ep_connect_len > MPA_PD_MAX ? MPA_PD_MAX :
							  w->ep_connect_len;
		memcpy(w->conn_pdata, w->ep_connect, pd_len);
	}
	if (param && param->private_data_len) {
		if (!param->private_data ||
		    pd_len + param->private_data_len > MPA_PD_MAX) {
			ret = -EINVAL;
			goto out;
		}
		memcpy(w->conn_pdata + pd_len, param->private_data,
		       param->private_data_len);
		pd_len += param->private_data_len;
	}
	w->conn_pdata_len = (uint16_t)pd_len;
	if (w->fd < 0) {
		int family = id->route.addr.dst_addr.sa_family;

		fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
		if (fd < 0) {
			ret = -errno;
			goto out;
		}
		wcm_sock_opts(w, fd, family);
		w->fd = fd;
	}
	wcm_set_state(w, WCM_CONNECTING);
	ret = wcm_thread_start(w, connect_thread, w);
	if (ret)
		wcm_set_state(w, WCM_ROUTE_RESOLVED);
out:
	pthread_mutex_unlock(&wcm.lock);
	if (ret)
		return fail(ret);
	return wcm_complete(w);
}
