/* SPDX-License-Identifier: MIT */
/*
 * rsocket_api.c - the socket calls of rsockets: rsocket, rbind, rlisten,
 * raccept, rconnect, rshutdown, rclose, rgetpeername, rgetsockname,
 * rsetsockopt, rgetsockopt, rfcntl.
 *
 * Listening uses a synchronous rdma_cm id: raccept takes the next
 * CONNECT_REQUEST with rdma_get_request (EAGAIN on a non-blocking socket)
 * and accepts it at once. A non-blocking rconnect resolves the address
 * and route (local over wisp) and leaves rdma_connect's reply to be
 * picked up by rpoll or the next call.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <string.h>

#include "rsocket_internal.h"

static int fail(int err)
{
	errno = err;
	return -1;
}

static int put_fail(struct rsk *rs, int err)
{
	rsk_put(rs);
	return fail(err);
}

static void set_nonblock(int fd, bool on)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0)
		return;
	(void)fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

int rsocket(int domain, int type, int protocol)
{
	struct rsk *rs;
	int fd;

	if ((domain != AF_INET && domain != AF_INET6) ||
	    (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM ||
	    (protocol && protocol != IPPROTO_TCP))
		return fail(type == SOCK_DGRAM ? ENOTSUP : EINVAL);
	rs = rsk_new(domain, NULL, NULL);
	if (!rs)
		return -1;
	if (type & SOCK_NONBLOCK)
		rs->fl_flags |= O_NONBLOCK;
	if (type & SOCK_CLOEXEC)
		rs->fd_flags |= FD_CLOEXEC;
	fd = rs->fd;
	return fd;
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsk *rs = rsk_get(socket);
	int ret;

	(void)addrlen;
	if (!rs)
		return -1;
	ret = rdma_bind_addr(rs->id, (struct sockaddr *)addr);
	if (!ret)
		rs->state = RSK_BOUND;
	rsk_put(rs);
	return ret;
}

int rlisten(int socket, int backlog)
{
	struct rsk *rs = rsk_get(socket);
	int ret = 0;

	if (!rs)
		return -1;
	if (rs->state != RSK_LISTENING) {
		ret = rdma_listen(rs->id, backlog);
		if (!ret) {
			rs->state = RSK_LISTENING;
			set_nonblock(rs->fd, rs->fl_flags & O_NONBLOCK);
		}
	}
	rsk_put(rs);
	return ret;
}

/* Accept the request of id: a new socket, connected. */
static struct rsk *accept_one(struct rsk *l, struct rdma_cm_id *id)
{
	struct rdma_conn_param param;
	struct rsk_conn_data cd;
	struct rsk *rs;
	int ret;

	rs = rsk_new(l->domain, id, l);
	if (!rs) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return NULL;
	}
	pthread_mutex_lock(&rs->lock);
	ret = rsk_create_ep(rs);
	if (!ret)
		ret = rsk_conn_data_save(rs, id->event->param.conn.private_data,
					 id->event->param.conn.private_data_len);
	if (ret) {
		rdma_reject(id, NULL, 0);
		goto err;
	}
	param = id->event->param.conn;
	rsk_conn_data_fill(rs, &cd);
	param.private_data = &cd;
	param.private_data_len = sizeof(cd);
	if (rdma_accept(id, &param)) {
		ret = -errno;
		goto err;
	}
	pthread_mutex_unlock(&rs->lock);
	return rs;
err:
	rsk_destroy(rs);
	errno = -ret;
	return NULL;
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsk *l = rsk_get(socket);
	struct rdma_cm_id *id;
	struct rsk *rs;
	int fd;

	if (!l)
		return -1;
	if (l->state != RSK_LISTENING)
		return put_fail(l, EINVAL);
	for (;;) {
		if (rdma_get_request(l->id, &id)) {
			/* A connection that failed before it was taken:
			 * not this caller's error, take the next. */
			if (errno == ECONNREFUSED || errno == ECONNRESET ||
			    errno == ETIMEDOUT)
				continue;
			rsk_put(l);
			return -1;
		}
		rs = accept_one(l, id);
		if (rs)
			break;
		if (errno == ENOMEM || errno == EMFILE || errno == ENFILE) {
			rsk_put(l);
			return -1;
		}
	}
	rsk_put(l);
	fd = rs->fd;
	if (addr && addrlen)
		rgetpeername(fd, addr, addrlen);
	return fd;
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsk *rs = rsk_get(socket);
	struct rdma_conn_param param;
	struct rsk_conn_data cd;
	int ret;

	(void)addrlen;
	if (!rs)
		return -1;
	if (rs->state == RSK_CONNECTING) {
		ret = rsk_connect_step(rs);
		rsk_put(rs);
		if (ret == -EINPROGRESS)
			return fail(EALREADY);
		return ret ? fail(-ret) : 0;
	}
	if (rs->state == RSK_CONNECTED)
		return put_fail(rs, EISCONN);
	if (rs->state != RSK_INIT && rs->state != RSK_BOUND)
		return put_fail(rs, EINVAL);
	/* Address and route are local work over wisp: done blocking. */
	set_nonblock(rs->fd, false);
	if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr, 2000) ||
	    rdma_resolve_route(rs->id, 2000))
		goto err;
	ret = rsk_create_ep(rs);
	if (ret) {
		errno = -ret;
		goto err;
	}
	rsk_conn_data_fill(rs, &cd);
	memset(&param, 0, sizeof(param));
	param.private_data = &cd;
	param.private_data_len = sizeof(cd);
	param.flow_control = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	/* iWARP: the initiator's ready-to-receive may be an RDMA Read. */
	param.initiator_depth = 1;
	rs->state = RSK_CONNECTING;
	if (rs->fl_flags & O_NONBLOCK)
		set_nonblock(rs->fd, true);
	if (rdma_connect(rs->id, &param)) {
		if (errno == EAGAIN) {
			rsk_put(rs);
			return fail(EINPROGRESS);
		}
		goto err;
	}
	ret = rsk_conn_data_save(rs, rs->id->event->param.conn.private_data,
				 rs->id->event->param.conn.private_data_len);
	if (ret) {
		errno = -ret;
		goto err;
	}
	set_nonblock(rs->fd, false);
	rsk_put(rs);
	return 0;
err:
	ret = errno;
	rs->state = RSK_CONNECT_ERROR;
	rs->err = ret;
	return put_fail(rs, ret);
}

/* rdma-core's rshutdown: a control message tells the peer, then the
 * socket waits until its sends are done. */
static int do_shutdown(struct rsk *rs, int how)
{
	uint32_t ctrl;
	int ret = 0;

	if (rs->state != RSK_CONNECTED)
		goto out;
	if (how == SHUT_RDWR) {
		ctrl = RSK_CTRL_DISCONNECT;
		rs->rd_open = rs->wr_open = false;
	} else if (how == SHUT_WR) {
		rs->wr_open = false;
		ctrl = rs->rd_open ? RSK_CTRL_SHUTDOWN : RSK_CTRL_DISCONNECT;
	} else {
		rs->rd_open = false;
		if (rs->wr_open)
			return 0;
		ctrl = RSK_CTRL_DISCONNECT;
	}
	ret = rsk_wait(rs, false, rsk_ctrl_ready);
	if (!ret && rs->state == RSK_CONNECTED)
		ret = rsk_post_ctrl(rs, ctrl);
	if (!ret)
		ret = rsk_wait(rs, false, rsk_sends_done);
	if (ctrl == RSK_CTRL_DISCONNECT && rs->state == RSK_CONNECTED)
		rs->state = RSK_DISCONNECTED;
out:
	if (rs->state == RSK_DISCONNECTED || rs->state == RSK_ERROR)
		rdma_disconnect(rs->id);
	return ret;
}

int rshutdown(int socket, int how)
{
	struct rsk *rs = rsk_get(socket);
	int ret;

	if (!rs)
		return -1;
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return put_fail(rs, EINVAL);
	ret = do_shutdown(rs, how);
	rsk_put(rs);
	return ret ? fail(-ret) : 0;
}

int rclose(int socket)
{
	struct rsk *rs = rsk_get(socket);

	if (!rs)
		return -1;
	if (rs->state == RSK_CONNECTED)
		(void)do_shutdown(rs, SHUT_RDWR);
	rsk_destroy(rs);
	return 0;
}

static int copy_addr(struct sockaddr *dst, socklen_t *len,
		     const struct sockaddr *src)
{
	socklen_t n = src->sa_family == AF_INET6 ?
		      sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

	if (!dst || !len)
		return fail(EFAULT);
	memcpy(dst, src, *len < n ? *len : n);
	*len = n;
	return 0;
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsk *rs = rsk_get(socket);
	int ret;

	if (!rs)
		return -1;
	if (rs->state != RSK_CONNECTED && rs->state != RSK_DISCONNECTED)
		return put_fail(rs, ENOTCONN);
	ret = copy_addr(addr, addrlen, rdma_get_peer_addr(rs->id));
	rsk_put(rs);
	return ret;
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsk *rs = rsk_get(socket);
	int ret;

	if (!rs)
		return -1;
	ret = copy_addr(addr, addrlen, rdma_get_local_addr(rs->id));
	rsk_put(rs);
	return ret;
}

static int int_opt(const void *optval, socklen_t optlen, int *out)
{
	if (!optval || optlen < sizeof(int))
		return -EINVAL;
	memcpy(out, optval, sizeof(int));
	return 0;
}

static int set_sol_socket(struct rsk *rs, int name, const void *val,
			  socklen_t len)
{
	int v, ret;

	if (name == SO_LINGER) {
		struct linger l;

		if (!val || len < sizeof(l))
			return -EINVAL;
		memcpy(&l, val, sizeof(l));
		rs->so_linger = l.l_onoff;
		return 0;
	}
	ret = int_opt(val, len, &v);
	if (ret)
		return ret;
	switch (name) {
	case SO_REUSEADDR:
		rs->so_reuseaddr = !!v;
		return rdma_set_option(rs->id, RDMA_OPTION_ID,
				       RDMA_OPTION_ID_REUSEADDR, &v,
				       sizeof(v)) ? -errno : 0;
	case SO_RCVBUF:
		/* Like Linux, the buffer holds twice what is asked. */
		if (!rs->rbuf)
			rs->rbuf_size = (uint32_t)v << 1;
		return 0;
	case SO_SNDBUF:
		if (!rs->sbuf)
			rs->sbuf_size = (uint32_t)v << 1;
		if (rs->sbuf_size < RSK_SNDLOWAT)
			rs->sbuf_size = RSK_SNDLOWAT << 1;
		return 0;
	case SO_KEEPALIVE:
		/* Kept and reported; wisp's QP does not idle out (the TCP
		 * stream under it carries no keepalive probes of rsockets). */
		rs->so_keepalive = !!v;
		return 0;
	case SO_OOBINLINE:
		rs->so_oobinline = !!v;
		return 0;
	default:
		return -ENOTSUP;
	}
}

static int set_sol_rdma(struct rsk *rs, int name, const void *val,
			socklen_t len)
{
	int v, ret;

	if (rs->state >= RSK_CONNECTING)
		return -EINVAL;
	if (name == RDMA_ROUTE)
		return 0; /* an iWARP route is the IP route: nothing to set */
	ret = int_opt(val, len, &v);
	if (ret)
		return ret;
	if (v < 0)
		return -EINVAL;
	if (v > RSK_QP_MAX)
		v = RSK_QP_MAX;
	switch (name) {
	case RDMA_SQSIZE:
		rs->sq_size = (uint16_t)v;
		return 0;
	case RDMA_RQSIZE:
		rs->rq_size = (uint16_t)v;
		return 0;
	case RDMA_INLINE:
		rs->sq_inline = (uint16_t)v;
		return 0;
	case RDMA_IOMAPSIZE:
		rs->iomap_size = (uint16_t)rsk_scale_to_value(
			(uint8_t)rsk_value_to_scale(v, 8), 8);
		return 0;
	default:
		return -ENOTSUP;
	}
}

int rsetsockopt(int socket, int level, int optname, const void *optval,
		socklen_t optlen)
{
	struct rsk *rs = rsk_get(socket);
	int v, ret;

	if (!rs)
		return -1;
	switch (level) {
	case SOL_SOCKET:
		ret = set_sol_socket(rs, optname, optval, optlen);
		break;
	case IPPROTO_TCP:
		ret = int_opt(optval, optlen, &v);
		if (ret)
			break;
		if (optname == TCP_NODELAY)
			rs->tcp_nodelay = !!v;
		else if (optname == TCP_KEEPIDLE)
			rs->keepalive_time = (unsigned int)v;
		else if (optname != TCP_KEEPCNT && optname != TCP_KEEPINTVL)
			ret = -ENOTSUP;
		break;
	case IPPROTO_IP:
		ret = int_opt(optval, optlen, &v);
		if (ret || optname != IP_TOS) {
			ret = ret ? ret : -ENOTSUP;
			break;
		}
		rs->ip_tos = v;
		{
			uint8_t tos = (uint8_t)v;

			ret = rdma_set_option(rs->id, RDMA_OPTION_ID,
					      RDMA_OPTION_ID_TOS, &tos,
					      sizeof(tos)) ? -errno : 0;
		}
		break;
	case IPPROTO_IPV6:
		ret = int_opt(optval, optlen, &v);
		if (ret || optname != IPV6_V6ONLY) {
			ret = ret ? ret : -ENOTSUP;
			break;
		}
		ret = rdma_set_option(rs->id, RDMA_OPTION_ID,
				      RDMA_OPTION_ID_AFONLY, &v,
				      sizeof(v)) ? -errno : 0;
		break;
	case SOL_RDMA:
		ret = set_sol_rdma(rs, optname, optval, optlen);
		break;
	default:
		ret = -ENOTSUP;
		break;
	}
	rsk_put(rs);
	return ret ? fail(-ret) : 0;
}

static int get_int(struct rsk *rs, int level, int name, int *v)
{
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR: *v = rs->so_reuseaddr; return 0;
		case SO_KEEPALIVE: *v = rs->so_keepalive; return 0;
		case SO_OOBINLINE: *v = rs->so_oobinline; return 0;
		case SO_RCVBUF: *v = (int)rs->rbuf_size; return 0;
		case SO_SNDBUF: *v = (int)rs->sbuf_size; return 0;
		case SO_TYPE: *v = SOCK_STREAM; return 0;
		case SO_ERROR:
			*v = rs->err;
			rs->err = 0;
			return 0;
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY: *v = rs->tcp_nodelay; return 0;
		case TCP_KEEPIDLE: *v = (int)rs->keepalive_time; return 0;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL: *v = 1; return 0;
		case TCP_MAXSEG: *v = RSK_SNDLOWAT; return 0;
		}
		break;
	case IPPROTO_IP:
		if (name == IP_TOS) {
			*v = rs->ip_tos;
			return 0;
		}
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE: *v = rs->sq_size; return 0;
		case RDMA_RQSIZE: *v = rs->rq_size; return 0;
		case RDMA_INLINE: *v = rs->sq_inline; return 0;
		case RDMA_IOMAPSIZE: *v = rs->iomap_size; return 0;
		}
		break;
	}
	return -ENOTSUP;
}

int rgetsockopt(int socket, int level, int optname, void *optval,
		socklen_t *optlen)
{
	struct rsk *rs = rsk_get(socket);
	int v, ret;

	if (!rs)
		return -1;
	if (!optval || !optlen) {
		ret = -EFAULT;
	} else if (level == SOL_SOCKET && optname == SO_LINGER) {
		struct linger l = { .l_onoff = rs->so_linger };

		ret = *optlen < sizeof(l) ? -EINVAL : 0;
		if (!ret) {
			memcpy(optval, &l, sizeof(l));
			*optlen = sizeof(l);
		}
	} else {
		ret = get_int(rs, level, optname, &v);
		if (!ret && *optlen < sizeof(v))
			ret = -EINVAL;
		if (!ret) {
			memcpy(optval, &v, sizeof(v));
			*optlen = sizeof(v);
		}
	}
	rsk_put(rs);
	return ret ? fail(-ret) : 0;
}

int rfcntl(int socket, int cmd, ...)
{
	struct rsk *rs = rsk_get(socket);
	va_list ap;
	int arg, ret = 0;

	if (!rs)
		return -1;
	va_start(ap, cmd);
	switch (cmd) {
	case F_GETFL:
		ret = rs->fl_flags;
		break;
	case F_SETFL:
		arg = va_arg(ap, int);
		rs->fl_flags = arg;
		/* The listener's and a connecting socket's channel is what
		 * raccept / rconnect read. */
		if (rs->state == RSK_LISTENING || rs->state == RSK_CONNECTING)
			set_nonblock(rs->fd, arg & O_NONBLOCK);
		break;
	case F_GETFD:
		ret = rs->fd_flags;
		break;
	case F_SETFD:
		rs->fd_flags = va_arg(ap, int);
		break;
	default:
		ret = -1;
		errno = ENOTSUP;
		break;
	}
	va_end(ap);
	rsk_put(rs);
	return ret;
}
