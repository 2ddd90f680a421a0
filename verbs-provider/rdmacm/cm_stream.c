/* SPDX-License-Identifier: MIT */
/*
 * cm_stream.c - a connection once its MPA exchange is over: the socket
 * handed to the QP (or kept by the CM when there is none), ESTABLISHED,
 * the end of the stream reported by the QP's engine and DISCONNECTED once,
 * rdma_establish and rdma_disconnect; and what both the passive and the
 * active side need before that (the QP to use, IRD / ORD from a
 * conn_param).
 *
 * Either side learns of the end of the stream from the QP's engine
 * (wisp_qp_set_stream_end_cb) and raises DISCONNECTED once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

const char *wcm_addr_str(const struct sockaddr *sa, char *buf, size_t len)
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
	wcm_set_state(w, WCM_DISCONNECTED);
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

/*
 * The IRD and ORD the QP will run with, made explicit in sp so that
 * ESTABLISHED reports what is in force: where the exchange left a value
 * at 0 (MPA rev 1, or rev 2 without the enhanced words, negotiates
 * nothing) wisp_qp_attach_stream takes the QP's own attribute, and
 * rdmap_qp_start raises 0 to 1, since RDMAP has no way to refuse a Read.
 */
static void in_force(struct ibv_qp *qp, struct wisp_stream_params *sp)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;

	if ((!sp->ird || !sp->ord) &&
	    !ibv_query_qp(qp, &a, IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MAX_QP_RD_ATOMIC, &init)) {
		if (!sp->ird)
			sp->ird = a.max_dest_rd_atomic;
		if (!sp->ord)
			sp->ord = a.max_rd_atomic;
	}
	if (!sp->ird)
		sp->ird = 1;
	if (!sp->ord)
		sp->ord = 1;
}

static void *watch_thread(void *arg);

/*
 * Hand the connected socket fd to the QP of w (state WCM_ATTACHING, set by
 * the caller) and raise ESTABLISHED. Without a QP the CM keeps the socket
 * and watches it for the peer's close. On failure an active side raises
 * CONNECT_ERROR; a passive side gets the error back for rdma_accept.
 * fd is consumed either way. wcm.lock not held.
 */
int wcm_establish(struct wcm_id *w, struct ibv_qp *qp, int fd,
		     const struct mpa_params *p, bool active)
{
	struct wisp_stream_params sp = { 0 };
	struct wcm_conn *c;
	struct wcm_event *e;
	int ret;

	/* The initiator's hold (glue_mpa.h) is over: cm_active.c waits
	 * it out before calling here. */
	ret = wisp_startup_stream(p, active, &sp);
	if (!ret && qp)
		in_force(qp, &sp);
	/* Known since the connect or the accept: the statistics need not
	 * ask the socket (two system calls per connection). The id is
	 * ATTACHING: nothing changes them meanwhile. */
	sp.local = &w->id.route.addr.src_addr;
	sp.peer = &w->id.route.addr.dst_addr;
	/* Non-blocking since socket() or accept4(), TCP_NODELAY since the
	 * bind (wcm_sock_opts) or from the listener: the engine need not
	 * ask (two system calls per connection, issue 13). */
	sp.sock_ready = true;
	if (ret) {
		glue_tls_drop(fd);
		close(fd);
		goto out;
	}

	c = calloc(1, sizeof(*c));
	if (!c) {
		glue_tls_drop(fd);
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
			glue_tls_drop(fd);
			close(fd);
		}
		pthread_mutex_unlock(&wcm.lock);
		goto out;
	}
	c->refs++;               /* the callback's */
	pthread_mutex_unlock(&wcm.lock);

	ret = -wisp_qp_set_stream_end_cb(qp, stream_end, c);
	if (ret) {
		glue_tls_drop(fd);
		close(fd);
	} else {
		ret = -wisp_qp_attach_stream(qp, fd, &sp);
	}
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
		wcm_set_state(w, WCM_FAILED);
		if (active)
			wcm_event_queue(w, w, RDMA_CM_EVENT_CONNECT_ERROR, ret,
					NULL, 0);
		pthread_mutex_unlock(&wcm.lock);
		return ret;
	}
	wcm_set_state(w, WCM_CONNECTED);
	e = wcm_event_queue(w, w, RDMA_CM_EVENT_ESTABLISHED, 0,
			    active ? p->peer_pdata : NULL,
			    active ? p->peer_pdata_len : 0);
	if (e) {
		/* What the connection runs with (RFC 6581 9.1 asks that the
		 * peer's values reach the ULP: see the CONNECT_REQUEST and
		 * REJECTED events). */
		e->ev.param.conn.initiator_depth = (uint8_t)sp.ord;
		e->ev.param.conn.responder_resources = (uint8_t)sp.ird;
	}
	if (w->ended_early)
		raise_disconnected(w);
	wcm_log(WCM_LOG_INFO, "id %p: established, MPA rev %u, CRC %s, "
		"IRD %u ORD %u, RTR %s, big FPDUs %s", (void *)&w->id, p->rev,
		p->crc ? "on" : "off", sp.ird, sp.ord,
		!p->p2p ? "none" : p->rtr == MPA_RTR_READ ? "read" : "write",
		p->peer_max_ulpdu ? "on" : "off");
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

/* IRD / ORD from a conn_param as rdma-core reads it: RDMA_MAX_RESP_RES /
 * RDMA_MAX_INIT_DEPTH (0xff) or no conn_param mean "the default". */
int wcm_depth_of(uint8_t v, uint8_t dflt, uint16_t *out)
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
int wcm_resolve_qp(struct wcm_id *w, const struct rdma_conn_param *param,
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
