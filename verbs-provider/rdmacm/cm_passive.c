/* SPDX-License-Identifier: MIT */
/*
 * cm_passive.c - the passive side of a connection: rdma_listen's thread
 * accepts TCP connections; for each a request thread reads the MPA
 * Request within the timeout and raises CONNECT_REQUEST on a new id
 * carrying the Initiator's private data. rdma_accept sends the Reply and
 * hands the socket to the QP (ESTABLISHED); rdma_reject sends a Reply
 * with R set and closes. The MPA steps are common/wisp_startup.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_internal.h"
#include "common/wisp_startup.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

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
	wcm_set_state(c, WCM_CONNECT_REQ);
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
	wcm_no_delay(fd);
	if (!getpeername(fd, (struct sockaddr *)&peer, &plen))
		wcm_addr_str((struct sockaddr *)&peer, who, sizeof(who));
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

static void *listen_thread(void *arg)
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

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct wcm_id *w;
	int ret, flags;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state == WCM_IDLE) {
		/* The kernel binds an unbound listener to the IPv4
		 * wildcard. */
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = wcm_bind_locked(w, (struct sockaddr *)&any);
		if (ret)
			goto out;
	}
	if (w->state != WCM_BOUND) {
		ret = -EINVAL;
		goto out;
	}
	if (listen(w->fd, backlog > 0 ? backlog : 16)) {
		ret = -errno;
		goto out;
	}
	/* Non-blocking: a connection that vanishes between poll() and
	 * accept() must not stall the listener. */
	flags = fcntl(w->fd, F_GETFL);
	fcntl(w->fd, F_SETFL, flags | O_NONBLOCK);
	w->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (w->wake_fd < 0) {
		ret = -errno;
		goto out;
	}
	wcm_set_state(w, WCM_LISTEN);
	ret = wcm_thread_start(w, listen_thread, w);
	if (ret)
		wcm_set_state(w, WCM_BOUND);
out:
	pthread_mutex_unlock(&wcm.lock);
	return ret ? fail(ret) : 0;
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
	ret = wcm_resolve_qp(w, param, "rdma_accept");
	if (ret)
		goto err_unlock;
	wcm_opts_prefs(&w->opts, &prefs);
	ret = wcm_depth_of(param ? param->responder_resources : 0xff, w->req_ird,
		       &prefs.ird);
	if (!ret)
		ret = wcm_depth_of(param ? param->initiator_depth : 0xff,
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
	wcm_set_state(w, WCM_ATTACHING);
	qp = id->qp ? id->qp : w->ext_qp;
	tmo = w->opts.timeout_ms;
	pthread_mutex_unlock(&wcm.lock);

	ret = wisp_startup_send_reply(fd, &reply, wisp_startup_deadline(tmo));
	if (ret) {
		close(fd);
		pthread_mutex_lock(&wcm.lock);
		wcm_set_state(w, WCM_FAILED);
		pthread_mutex_unlock(&wcm.lock);
		return fail(ret);
	}
	ret = wcm_establish(w, qp, fd, &reply.params, false);
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
	wcm_set_state(w, WCM_FAILED);
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
