/* SPDX-License-Identifier: MIT */
/*
 * cm_conn.c - connections: the MPA startup phase (RFC 5044 7.1.2, RFC 6581
 * 9) split around the application's calls, on TCP sockets, and the
 * events rdma_cm programs expect from it.
 *
 * Passive side: rdma_listen's thread accepts TCP connections; for each a
 * request thread reads the MPA Request within the timeout and raises
 * CONNECT_REQUEST on a new id carrying the Initiator's private data.
 * rdma_accept sends the Reply and hands the socket to the QP
 * (ESTABLISHED); rdma_reject sends a Reply with R set and closes.
 *
 * Active side: rdma_connect starts a thread that connects TCP within the
 * timeout (refused or timed out: UNREACHABLE), sends the Request, reads
 * the Reply (R set: REJECTED with the Responder's private data; anything
 * unacceptable: CONNECT_ERROR) and hands the socket to the QP.
 *
 * Either side learns of the end of the stream from the QP's engine
 * (wisp_qp_set_stream_end_cb) and raises DISCONNECTED once.
 *
 * Status of the failure events follows the kernel's iWARP CM
 * (cma_iw_handler): -ECONNREFUSED for a rejection by the peer's
 * application and for a refused TCP connect, -ECONNRESET for a peer that
 * closed during the exchange, -ETIMEDOUT for a timeout, -EPROTO for an
 * MPA protocol fault.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../wisp_private.h"
#include "cm_internal.h"
#include "common/wisp_startup.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

static const char *addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned int port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;

		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		port = ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;

		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
		port = ntohs(s->sin6_port);
	}
	snprintf(buf, len, sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u",
		 ip, port);
	return buf;
}

static void no_delay(int fd)
{
	int ret = wisp_startup_nodelay(fd);

	if (ret)
		wcm_log(WCM_LOG_WARN, "TCP_NODELAY: %s", strerror(-ret));
}

/* ---- the connection object and the end of the stream ---------------- */

void wcm_conn_put(struct wcm_conn *c)
{
	if (--c->refs == 0)
		free(c);
}

/* The callback will not run (the attach failed): drop its reference. */
static void conn_cb_gone(struct wcm_id *w)
{
	if (w->conn && !w->conn->cb_done) {
		w->conn->cb_done = true;
		wcm_conn_put(w->conn);
	}
}

/* wcm.lock held. */
static void raise_disconnected(struct wcm_id *w)
{
	if (w->dying || w->state != WCM_CONNECTED)
		return;
	w->state = WCM_DISCONNECTED;
	w->disc = 1;
	wcm_event_queue(w, w, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
}

/* The QP's engine thread: the stream ended (peer closed, broke, a
 * Terminate, or our wisp_qp_disconnect). Runs once. */
static void stream_end(struct ibv_qp *qp, int reason, void *arg)
{
	struct wcm_conn *c = arg;

	(void)qp;
	pthread_mutex_lock(&wcm.lock);
	if (!c->cb_done) {
		struct wcm_id *w = c->id;

		c->cb_done = true;
		if (w) {
			wcm_log(WCM_LOG_INFO, "id %p: stream ended (%s)",
				(void *)&w->id, reason ? strerror(reason) :
				"closed");
			if (w->state == WCM_ATTACHING)
				w->ended_early = true;
			else
				raise_disconnected(w);
		}
		wcm_conn_put(c);
	}
	pthread_mutex_unlock(&wcm.lock);
}

static void *watch_thread(void *arg);

/*
 * Hand the connected socket fd to the QP of w (state WCM_ATTACHING, set by
 * the caller) and raise ESTABLISHED. Without a QP the CM keeps the socket
 * and watches it for the peer's close. On failure an active side raises
 * CONNECT_ERROR; a passive side gets the error back for rdma_accept.
 * fd is consumed either way. wcm.lock not held.
 */
static int establish(struct wcm_id *w, struct ibv_qp *qp, int fd,
		     const struct mpa_params *p, bool active)
{
	struct wisp_stream_params sp;
	struct wcm_conn *c;
	struct wcm_event *e;
	int ret;

	/* siw reads nothing just after its Reply (glue_mpa.h). */
	if (active)
		glue_mpa_initiator_hold(w->opts.hold_ms);
	ret = wisp_startup_stream(p, active, &sp);
	if (ret) {
		close(fd);
		goto out;
	}

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		ret = -ENOMEM;
		goto out;
	}
	pthread_mutex_lock(&wcm.lock);
	c->id = w;
	c->refs = 1;
	w->conn = c;
	w->ended_early = false;
	if (!qp) {
		/* Connected without a QP: CM only, no data can move. */
		c->cb_done = true;
		w->no_qp = true;
		w->fd = fd;
		ret = wcm_thread_start(w, watch_thread, w);
		if (ret) {
			w->fd = -1;
			close(fd);
		}
		pthread_mutex_unlock(&wcm.lock);
		goto out;
	}
	c->refs++;               /* the callback's */
	pthread_mutex_unlock(&wcm.lock);

	ret = -wisp_qp_set_stream_end_cb(qp, stream_end, c);
	if (ret)
		close(fd);
	else
		ret = -wisp_qp_attach_stream(qp, fd, &sp);
	if (ret) {
		pthread_mutex_lock(&wcm.lock);
		conn_cb_gone(w);
		pthread_mutex_unlock(&wcm.lock);
	}

out:
	pthread_mutex_lock(&wcm.lock);
	if (ret) {
		wcm_log(WCM_LOG_WARN, "id %p: cannot start the stream: %s",
			(void *)&w->id, strerror(-ret));
		w->state = WCM_FAILED;
		if (active)
			wcm_event_queue(w, w, RDMA_CM_EVENT_CONNECT_ERROR, ret,
					NULL, 0);
		pthread_mutex_unlock(&wcm.lock);
		return ret;
	}
	w->state = WCM_CONNECTED;
	e = wcm_event_queue(w, w, RDMA_CM_EVENT_ESTABLISHED, 0,
			    active ? p->peer_pdata : NULL,
			    active ? p->peer_pdata_len : 0);
	if (e) {
		/* What the connection runs with (RFC 6581 9.1 asks that the
		 * peer's values reach the ULP: see the CONNECT_REQUEST and
		 * REJECTED events). */
		e->ev.param.conn.initiator_depth = (uint8_t)p->ord;
		e->ev.param.conn.responder_resources = (uint8_t)p->ird;
	}
	if (w->ended_early)
		raise_disconnected(w);
	wcm_log(WCM_LOG_INFO, "id %p: established, MPA rev %u, CRC %s, "
		"IRD %u ORD %u, RTR %s", (void *)&w->id, p->rev,
		p->crc ? "on" : "off", p->ird, p->ord,
		!p->p2p ? "none" : p->rtr == MPA_RTR_READ ? "read" : "write");
	pthread_mutex_unlock(&wcm.lock);
	return 0;
}

/* Connected without a QP: the peer's close ends the connection. */
static void *watch_thread(void *arg)
{
	struct wcm_id *w = arg;
	uint8_t sink[512];
	int fd;

	pthread_mutex_lock(&wcm.lock);
	fd = w->fd;
	pthread_mutex_unlock(&wcm.lock);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
		ssize_t n;

		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			break;
		n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
			continue;
		break;
	}
	pthread_mutex_lock(&wcm.lock);
	raise_disconnected(w);
	pthread_mutex_unlock(&wcm.lock);
	wcm_thread_done(w);
	return NULL;
}

/* ---- passive side --------------------------------------------------- */

struct req_job {
	struct wcm_id *listener;
	int fd;
};

/* wcm.lock held. */
static int pending_add(struct wcm_id *w, int fd)
{
	struct wcm_pending *p = malloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->fd = fd;
	p->next = w->pending;
	w->pending = p;
	return 0;
}

/* wcm.lock held; before the fd is closed, so that rdma_destroy_id never
 * shuts down a number the process has reused. */
static void pending_del(struct wcm_id *w, int fd)
{
	for (struct wcm_pending **pp = &w->pending; *pp; pp = &(*pp)->next) {
		if ((*pp)->fd == fd) {
			struct wcm_pending *p = *pp;

			*pp = p->next;
			free(p);
			return;
		}
	}
}

/* The new id for an acceptable Request (wcm.lock held). */
static int raise_request(struct wcm_id *l, struct wcm_id *c, int fd,
			 const uint8_t *buf, int len, const struct mpa_rr *req)
{
	struct wcm_event *e;
	socklen_t alen;

	c->opts = l->opts;
	memcpy(c->req_frame, buf, (size_t)len);
	c->req = *req;
	if (req->pdata)
		c->req.pdata = c->req_frame + (req->pdata - buf);
	c->fd = fd;
	c->state = WCM_CONNECT_REQ;
	wcm_id_set_device(c);
	alen = sizeof(c->id.route.addr.src_storage);
	getsockname(fd, &c->id.route.addr.src_addr, &alen);
	alen = sizeof(c->id.route.addr.dst_storage);
	getpeername(fd, &c->id.route.addr.dst_addr, &alen);

	/* What the application should accept with, as the kernel's iWARP
	 * CM proposes: our ORD up to the peer's IRD, our IRD up to its ORD
	 * (RFC 6581 9.1), capped like siw. A rev 1 or non-enhanced Request
	 * says nothing, and 0 is proposed (siw's measured behaviour: with
	 * rdma_accept(id, NULL) such a connection runs with IRD = ORD = 0;
	 * pass a conn_param to choose). */
	if (req->enhanced) {
		c->req_ird = (uint8_t)(req->ord > WCM_MAX_RD_ATOMIC ?
				       WCM_MAX_RD_ATOMIC : req->ord);
		c->req_ord = (uint8_t)(req->ird > WCM_MAX_RD_ATOMIC ?
				       WCM_MAX_RD_ATOMIC : req->ird);
	}
	e = wcm_event_queue(l, c, RDMA_CM_EVENT_CONNECT_REQUEST, 0,
			    c->req.pdata, c->req.pdata_len);
	if (!e)
		return -ENOMEM;
	e->ev.listen_id = &l->id;
	e->ev.param.conn.responder_resources = c->req_ird;
	e->ev.param.conn.initiator_depth = c->req_ord;
	return 0;
}

static void *request_thread(void *arg)
{
	struct req_job *j = arg;
	struct wcm_id *l = j->listener, *c = NULL;
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	struct mpa_rr req;
	struct mpa_prefs prefs;
	struct wcm_opts opts;
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	enum mpa_error err;
	char who[64] = "?";
	int fd = j->fd, len, ret;

	free(j);
	no_delay(fd);
	if (!getpeername(fd, (struct sockaddr *)&peer, &plen))
		addr_str((struct sockaddr *)&peer, who, sizeof(who));
	pthread_mutex_lock(&wcm.lock);
	opts = l->opts;
	pthread_mutex_unlock(&wcm.lock);
	wcm_opts_prefs(&opts, &prefs);

	/* RFC 5044 7.1.2 rule 8: "Implementations SHOULD put a timeout on
	 * waiting for the MPA Request Frame when started in Responder
	 * mode". */
	len = glue_mpa_read(fd, MPA_REQUEST, buf, sizeof(buf), opts.timeout_ms,
			    &err);
	if (len < 0) {
		wcm_log(WCM_LOG_INFO, "connection from %s: no MPA Request: %s%s%s",
			who, strerror(-len), err ? ", " : "",
			err ? mpa_error_str(err) : "");
		goto drop;
	}
	ret = wisp_startup_take_request(fd, buf, (size_t)len, &prefs,
					wisp_startup_deadline(opts.timeout_ms),
					&req, &err);
	if (ret == -ECONNREFUSED) {
		wcm_log(WCM_LOG_WARN, "connection from %s refused: %s", who,
			mpa_error_str(err));
		goto drop;
	}
	if (ret < 0) {
		/* RFC 5044 7.1.2 rule 2: "If the MPA Request Frame is
		 * improperly formatted, the implementation MUST close the
		 * TCP connection and exit MPA." */
		wcm_log(WCM_LOG_WARN, "connection from %s: bad MPA Request: %s",
			who, mpa_error_str(err));
		goto drop;
	}

	c = wcm_id_new(to_wch(l->id.channel), l->id.context, l->id.ps);
	pthread_mutex_lock(&wcm.lock);
	pending_del(l, fd);
	if (!c || l->dying || raise_request(l, c, fd, buf, len, &req)) {
		pthread_mutex_unlock(&wcm.lock);
		if (c) {
			c->fd = -1;
			c->id.channel = NULL;
			free(c);
		}
		close(fd);
		goto done;
	}
	pthread_mutex_unlock(&wcm.lock);
	wcm_log(WCM_LOG_INFO, "connection request from %s, MPA rev %u",
		who, req.rev);
	goto done;

drop:
	pthread_mutex_lock(&wcm.lock);
	pending_del(l, fd);
	pthread_mutex_unlock(&wcm.lock);
	close(fd);
done:
	wcm_thread_done(l);
	return NULL;
}

void *wcm_listen_thread(void *arg)
{
	struct wcm_id *w = arg;
	int lfd, wake;

	pthread_mutex_lock(&wcm.lock);
	lfd = w->fd;
	wake = w->wake_fd;
	pthread_mutex_unlock(&wcm.lock);

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = lfd, .events = POLLIN },
			{ .fd = wake, .events = POLLIN },
		};
		struct req_job *j;
		bool dying;
		int fd, ret;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		pthread_mutex_lock(&wcm.lock);
		dying = w->dying;
		pthread_mutex_unlock(&wcm.lock);
		if (dying)
			break;
		if (!(p[0].revents & (POLLIN | POLLERR | POLLHUP)))
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM) {
				wcm_log(WCM_LOG_WARN, "accept: %s",
					strerror(errno));
				poll(NULL, 0, 100);
			}
			continue;
		}
		j = malloc(sizeof(*j));
		if (!j) {
			close(fd);
			continue;
		}
		j->listener = w;
		j->fd = fd;
		pthread_mutex_lock(&wcm.lock);
		ret = pending_add(w, fd);
		if (!ret) {
			ret = wcm_thread_start(w, request_thread, j);
			if (ret)
				pending_del(w, fd);
		}
		pthread_mutex_unlock(&wcm.lock);
		if (ret) {
			wcm_log(WCM_LOG_WARN, "no thread for a connection: %s",
				strerror(-ret));
			free(j);
			close(fd);
		}
	}
	wcm_thread_done(w);
	return NULL;
}

/* IRD / ORD from a conn_param as rdma-core reads it: RDMA_MAX_RESP_RES /
 * RDMA_MAX_INIT_DEPTH (0xff) or no conn_param mean "the default". */
static int depth_of(uint8_t v, uint8_t dflt, uint16_t *out)
{
	if (v == 0xff) {
		*out = dflt;
		return 0;
	}
	if (v > WCM_MAX_RD_ATOMIC)
		return -EINVAL;
	*out = v;
	return 0;
}

/*
 * The QP a connection's stream goes to: the id's (rdma_create_qp), else
 * the QP of this process that param->qp_num names. No QP and qp_num 0:
 * a connection for the CM alone. wcm.lock held.
 */
static int resolve_qp(struct wcm_id *w, const struct rdma_conn_param *param,
		      const char *what)
{
	w->ext_qp = NULL;
	if (w->id.qp)
		return 0;
	if (!param) {
		wcm_log(WCM_LOG_WARN, "%s: no QP on the id and no "
			"rdma_conn_param naming one", what);
		return -EINVAL;
	}
	if (!param->qp_num)
		return 0;
	w->ext_qp = wisp_qp_lookup(param->qp_num);
	if (!w->ext_qp) {
		wcm_log(WCM_LOG_WARN, "%s: no QP numbered %u in this process",
			what, param->qp_num);
		return -EINVAL;
	}
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct wisp_startup_reply reply;
	struct mpa_prefs prefs;
	struct ibv_qp *qp;
	struct wcm_id *w;
	int fd, ret, tmo;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_CONNECT_REQ) {
		ret = -EINVAL;
		goto err_unlock;
	}
	/* The stream goes to the id's QP, or to the one the application
	 * made itself and names by number (rdma_conn_param.qp_num). */
	ret = resolve_qp(w, param, "rdma_accept");
	if (ret)
		goto err_unlock;
	wcm_opts_prefs(&w->opts, &prefs);
	ret = depth_of(param ? param->responder_resources : 0xff, w->req_ird,
		       &prefs.ird);
	if (!ret)
		ret = depth_of(param ? param->initiator_depth : 0xff,
			       w->req_ord, &prefs.ord);
	if (ret)
		goto err_unlock;
	if (param && param->private_data_len) {
		prefs.pdata = param->private_data;
		prefs.pdata_len = param->private_data_len;
	}
	ret = wisp_startup_build_reply(&w->req, &prefs, false, &reply);
	if (ret)
		goto err_unlock;
	fd = w->fd;
	w->fd = -1;
	w->state = WCM_ATTACHING;
	qp = id->qp ? id->qp : w->ext_qp;
	tmo = w->opts.timeout_ms;
	pthread_mutex_unlock(&wcm.lock);

	ret = wisp_startup_send_reply(fd, &reply, wisp_startup_deadline(tmo));
	if (ret) {
		close(fd);
		pthread_mutex_lock(&wcm.lock);
		w->state = WCM_FAILED;
		pthread_mutex_unlock(&wcm.lock);
		return fail(ret);
	}
	ret = establish(w, qp, fd, &reply.params, false);
	if (ret)
		return fail(ret);
	return wcm_complete(w);

err_unlock:
	pthread_mutex_unlock(&wcm.lock);
	return fail(ret);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data,
		uint8_t private_data_len)
{
	struct wisp_startup_reply reply;
	struct mpa_prefs prefs;
	struct wcm_id *w;
	int fd, ret, tmo;

	if (!id || (private_data_len && !private_data))
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_CONNECT_REQ) {
		pthread_mutex_unlock(&wcm.lock);
		return fail(-EINVAL);
	}
	wcm_opts_prefs(&w->opts, &prefs);
	prefs.ird = w->req_ird;
	prefs.ord = w->req_ord;
	prefs.pdata = private_data;
	prefs.pdata_len = private_data_len;
	/* RFC 5044 7.1.2: "return an MPA Reply Frame with the Rejected
	 * Connection bit set to '1'; the MPA Reply Frame MAY include
	 * ULP-supplied Private Data". */
	ret = wisp_startup_build_reply(&w->req, &prefs, true, &reply);
	if (ret) {
		pthread_mutex_unlock(&wcm.lock);
		return fail(ret);
	}
	fd = w->fd;
	w->fd = -1;
	w->state = WCM_FAILED;
	tmo = w->opts.timeout_ms;
	pthread_mutex_unlock(&wcm.lock);

	ret = wisp_startup_send_reply(fd, &reply, wisp_startup_deadline(tmo));
	if (ret)
		wcm_log(WCM_LOG_INFO, "reject: %s", strerror(-ret));
	/* MPA exits; the TCP connection is of no further use to rdma_cm. */
	shutdown(fd, SHUT_WR);
	close(fd);
	return 0;
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
		    uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

/* ---- active side ---------------------------------------------------- */

static void connect_failed(struct wcm_id *w, int fd, int status,
			   const struct mpa_params *p)
{
	enum rdma_cm_event_type type;
	char who[64];

	switch (status) {
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
	pthread_mutex_lock(&wcm.lock);
	if (w->fd == fd)
		w->fd = -1;
	w->state = WCM_FAILED;
	wcm_log(WCM_LOG_INFO, "connect to %s: %s (%s)",
		addr_str(&w->id.route.addr.dst_addr, who, sizeof(who)),
		rdma_event_str(type), strerror(-status));
	wcm_event_queue(w, w, type, status, p ? p->peer_pdata : NULL,
			p ? p->peer_pdata_len : 0);
	pthread_mutex_unlock(&wcm.lock);
	if (fd >= 0)
		close(fd);
}

static void *connect_thread(void *arg)
{
	struct wcm_id *w = arg;
	struct wisp_startup_init x;
	struct sockaddr_storage dst;
	struct mpa_params params;
	struct mpa_prefs prefs;
	struct ibv_qp *qp;
	enum mpa_error err;
	socklen_t alen;
	int fd, ret, tmo;
	bool dying;

	pthread_mutex_lock(&wcm.lock);
	memcpy(&dst, &w->id.route.addr.dst_storage, sizeof(dst));
	wcm_opts_prefs(&w->opts, &prefs);
	prefs.ird = w->ird;
	prefs.ord = w->ord;
	prefs.pdata = w->conn_pdata_len ? w->conn_pdata : NULL;
	prefs.pdata_len = w->conn_pdata_len;
	tmo = w->opts.timeout_ms;
	qp = w->id.qp ? w->id.qp : w->ext_qp;
	fd = w->fd;
	pthread_mutex_unlock(&wcm.lock);

	ret = glue_mpa_connect(fd, (struct sockaddr *)&dst,
			       wcm_addrlen((struct sockaddr *)&dst), tmo);
	if (ret)
		goto fail;
	no_delay(fd);
	pthread_mutex_lock(&wcm.lock);
	alen = sizeof(w->id.route.addr.src_storage);
	getsockname(fd, &w->id.route.addr.src_addr, &alen);
	pthread_mutex_unlock(&wcm.lock);

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
	if (!dying) {
		w->fd = -1;
		w->state = WCM_ATTACHING;
	}
	pthread_mutex_unlock(&wcm.lock);
	if (dying) {
		ret = -ECANCELED;
		goto fail;
	}
	establish(w, qp, fd, &params, true);
	goto done;

fail:
	connect_failed(w, fd, ret, NULL);
done:
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
	ret = resolve_qp(w, param, "rdma_connect");
	if (ret)
		goto out;
	ret = depth_of(param ? param->responder_resources : 0xff,
		       WCM_MAX_RD_ATOMIC, &w->ird);
	if (!ret)
		ret = depth_of(param ? param->initiator_depth : 0xff,
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
	w->state = WCM_CONNECTING;
	ret = wcm_thread_start(w, connect_thread, w);
	if (ret)
		w->state = WCM_ROUTE_RESOLVED;
out:
	pthread_mutex_unlock(&wcm.lock);
	if (ret)
		return fail(ret);
	return wcm_complete(w);
}

int rdma_establish(struct rdma_cm_id *id)
{
	/* rdma-core: for a connection whose QP the application made
	 * itself, the step after CONNECT_RESPONSE. iWARP completes the MPA
	 * exchange before ESTABLISHED and never raises CONNECT_RESPONSE,
	 * so once connected there is nothing left to do; before, it is
	 * out of place. */
	struct wcm_id *w;
	int state;

	if (!id || id->qp)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	state = w->state;
	pthread_mutex_unlock(&wcm.lock);
	return state == WCM_CONNECTED ? 0 : fail(-EINVAL);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct ibv_qp *qp = NULL;
	struct wcm_id *w;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	switch (w->state) {
	case WCM_CONNECTED:
		if (w->no_qp)
			shutdown(w->fd, SHUT_RDWR);
		else
			qp = id->qp ? id->qp : w->ext_qp;
		break;
	case WCM_DISCONNECTED:
		/* The peer was first. A synchronous id still collects the
		 * DISCONNECTED event if it is waiting. */
		if (w->disc == 2 || !w->sync) {
			pthread_mutex_unlock(&wcm.lock);
			return 0;
		}
		pthread_mutex_unlock(&wcm.lock);
		return wcm_complete(w);
	default:
		pthread_mutex_unlock(&wcm.lock);
		return fail(-EINVAL);
	}
	pthread_mutex_unlock(&wcm.lock);

	if (qp) {
		/* The QP stops, flushes, closes the socket; its engine then
		 * calls stream_end, which raises DISCONNECTED. */
		int ret = wisp_qp_disconnect(qp);

		if (ret) {
			wcm_log(WCM_LOG_WARN, "disconnect: %s", strerror(ret));
			pthread_mutex_lock(&wcm.lock);
			raise_disconnected(w);
			pthread_mutex_unlock(&wcm.lock);
		}
	}
	return wcm_complete(w);
}
