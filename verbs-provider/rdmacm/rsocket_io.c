/* SPDX-License-Identifier: MIT */
/*
 * rsocket_io.c - moving bytes: rsend / rrecv and their variants, and the
 * iomap calls (riomap, riounmap, riowrite).
 */
#include <byteswap.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rsocket_internal.h"

static bool nonblocking(const struct rsk *rs, int flags)
{
	return (rs->fl_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/* A socket whose non-blocking rconnect may have finished. 0 or a
 * negative errno (-EAGAIN while in progress). */
static int ready(struct rsk *rs)
{
	int ret;

	if (rs->state != RSK_CONNECTING)
		return 0;
	ret = rsk_connect_step(rs);
	return ret == -EINPROGRESS ? -EAGAIN : ret;
}

/* A cursor over an iovec array. */
struct iocur {
	const struct iovec *iov;
	int cnt;
	size_t off;
};

static void cur_copy_out(struct iocur *c, void *dst, size_t len)
{
	uint8_t *d = dst;

	while (len) {
		size_t n = c->iov->iov_len - c->off;

		if (n > len)
			n = len;
		memcpy(d, (const uint8_t *)c->iov->iov_base + c->off, n);
		d += n;
		len -= n;
		c->off += n;
		if (c->off == c->iov->iov_len) {
			c->iov++;
			c->cnt--;
			c->off = 0;
		}
	}
}

static void cur_copy_in(struct iocur *c, const void *src, size_t len)
{
	const uint8_t *s = src;

	while (len) {
		size_t n = c->iov->iov_len - c->off;

		if (n > len)
			n = len;
		memcpy((uint8_t *)c->iov->iov_base + c->off, s, n);
		s += n;
		len -= n;
		c->off += n;
		if (c->off == c->iov->iov_len) {
			c->iov++;
			c->cnt--;
			c->off = 0;
		}
	}
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
	size_t t = 0;

	for (int i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* The next len octets of c for a Write: inline from inl if they fit,
 * else copied into the send ring. The SGEs; their count. */
static int gather(struct rsk *rs, struct iocur *c, uint32_t len,
		  uint8_t *inl, size_t inl_len, struct ibv_sge sge[2],
		  int *flags)
{
	int n;

	if (len <= rs->sq_inline && len <= inl_len) {
		cur_copy_out(c, inl, len);
		sge[0].addr = (uintptr_t)inl;
		sge[0].length = len;
		sge[0].lkey = 0;
		*flags = IBV_SEND_INLINE;
		return 1;
	}
	*flags = 0;
	n = rsk_stage(rs, len, sge);
	for (int i = 0; i < n; i++)
		cur_copy_out(c, (void *)(uintptr_t)sge[i].addr, sge[i].length);
	return n;
}

static int send_iomaps(struct rsk *rs, bool nonblock);

/*
 * The size of the next transfer of a send that has left octets to go:
 * waits for credits and send-buffer room (or fails: -EAGAIN when
 * non-blocking, the socket's error, -ECONNRESET once closed), then
 * takes the overlap size, which doubles up to RSK_MAX_XFER on each call
 * (*olen), capped by left and the send buffer. 0 with *xfer set, or
 * -errno.
 */
static int next_xfer(struct rsk *rs, int flags, uint32_t *olen, size_t left,
		     uint32_t *xfer)
{
	if (!rsk_can_send(rs)) {
		int ret = rsk_wait(rs, nonblocking(rs, flags),
				   rsk_can_send_or_closed);

		if (ret)
			return ret;
		if (rs->state != RSK_CONNECTED || !rs->wr_open)
			return rs->state == RSK_ERROR ? -rs->err : -ECONNRESET;
	}
	if (*olen < left) {
		*xfer = *olen;
		if (*olen < RSK_MAX_XFER)
			*olen <<= 1;
	} else {
		*xfer = (uint32_t)left;
	}
	if (*xfer > rs->sbuf_avail)
		*xfer = rs->sbuf_avail;
	return 0;
}

static ssize_t do_sendv(int fd, const struct iovec *iov, int cnt, int flags)
{
	struct rsk *rs = rsk_get(fd);
	struct iocur c = { .iov = iov, .cnt = cnt };
	uint32_t olen = RSK_OLAP_START;
	size_t len, left;
	int ret;

	if (!rs)
		return -1;
	ret = ready(rs);
	if (!ret && rs->iomap_pending)
		ret = send_iomaps(rs, nonblocking(rs, flags));
	len = left = iov_total(iov, cnt);
	while (!ret && left) {
		struct ibv_sge sge[2];
		uint8_t inl[256];
		uint32_t xfer = 0;
		int n, sflags;

		ret = next_xfer(rs, flags, &olen, left, &xfer);
		if (ret)
			break;
		if (xfer > rs->tsgl[rs->tsge].length)
			xfer = rs->tsgl[rs->tsge].length;
		n = gather(rs, &c, xfer, inl, sizeof(inl), sge, &sflags);
		ret = rsk_post_data(rs, sge, n, xfer, sflags);
		if (ret)
			break;
		left -= xfer;
	}
	rsk_put(rs);
	if (ret && left == len) {
		errno = ret == -EAGAIN ? EWOULDBLOCK : -ret;
		return -1;
	}
	return (ssize_t)(len - left);
}

/* Copy up to len octets of received data to c; consume unless peek. */
static size_t copy_data(struct rsk *rs, struct iocur *c, size_t len,
			bool peek)
{
	int head = rs->rmsg_head;
	uint32_t off = rs->rbuf_off;
	size_t done = 0;

	while (done < len && head != rs->rmsg_tail) {
		uint32_t n = rs->rmsg_len[head];
		uint32_t end = rs->rbuf_size - off;

		if (n > len - done)
			n = (uint32_t)(len - done);
		if (n > end) {
			cur_copy_in(c, rs->rbuf + off, end);
			cur_copy_in(c, rs->rbuf, n - end);
		} else {
			cur_copy_in(c, rs->rbuf + off, n);
		}
		off = (off + n) % rs->rbuf_size;
		done += n;
		if (peek) {
			if (n == rs->rmsg_len[head])
				head = (head + 1) % rs->rmsg_cap;
			continue;
		}
		rs->rbuf_avail += n;
		if (n < rs->rmsg_len[head]) {
			rs->rmsg_len[head] -= n;
			continue;
		}
		rs->rseq_no++;
		head = (head + 1) % rs->rmsg_cap;
	}
	if (!peek) {
		rs->rmsg_head = head;
		rs->rbuf_off = off;
	}
	return done;
}

static ssize_t do_recvv(int fd, const struct iovec *iov, int cnt, int flags)
{
	struct rsk *rs = rsk_get(fd);
	struct iocur c = { .iov = iov, .cnt = cnt };
	size_t len, left;
	int ret;

	if (!rs)
		return -1;
	ret = ready(rs);
	len = left = iov_total(iov, cnt);
	while (!ret && left) {
		if (!rsk_have_data(rs)) {
			ret = rsk_wait(rs, nonblocking(rs, flags),
				       rsk_have_data_or_closed);
			if (ret)
				break;
		}
		if (!rsk_have_data(rs)) {
			/* End of stream, or an error. */
			if (rs->state == RSK_ERROR)
				ret = -rs->err;
			break;
		}
		left -= copy_data(rs, &c, left, flags & MSG_PEEK);
		if ((flags & MSG_PEEK) || !(flags & MSG_WAITALL))
			break;
	}
	/* Hand back buffer space at once, not at the next call. */
	if (left != len)
		rsk_progress(rs);
	rsk_put(rs);
	if (ret && left == len) {
		errno = ret == -EAGAIN ? EWOULDBLOCK : -ret;
		return -1;
	}
	return (ssize_t)(len - left);
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct iovec v = { .iov_base = (void *)buf, .iov_len = len };

	return do_sendv(socket, &v, 1, flags);
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rsend(socket, buf, count, 0);
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	return do_sendv(socket, iov, iovcnt, 0);
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen) {
		errno = ENOTSUP;
		return -1;
	}
	return do_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
		const struct sockaddr *dest_addr, socklen_t addrlen)
{
	if (dest_addr || addrlen) {
		errno = EISCONN;
		return -1;
	}
	return rsend(socket, buf, len, flags);
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct iovec v = { .iov_base = buf, .iov_len = len };

	return do_recvv(socket, &v, 1, flags);
}

ssize_t rread(int socket, void *buf, size_t count)
{
	return rrecv(socket, buf, count, 0);
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return do_recvv(socket, iov, iovcnt, 0);
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen) {
		errno = ENOTSUP;
		return -1;
	}
	msg->msg_flags = 0;
	return do_recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
		  struct sockaddr *src_addr, socklen_t *addrlen)
{
	ssize_t ret = rrecv(socket, buf, len, flags);

	if (ret >= 0 && src_addr && addrlen)
		rgetpeername(socket, src_addr, addrlen);
	return ret;
}

/* ---- iomap ------------------------------------------------------- */

static int send_iomaps(struct rsk *rs, bool nonblock)
{
	for (struct rsk_iomr *m = rs->iomaps; m; m = m->next) {
		struct rsk_iomap iom;
		int ret;

		if (m->sent || m->index < 0)
			continue;
		if (!rsk_can_send(rs)) {
			ret = rsk_wait(rs, nonblock, rsk_can_send_or_closed);
			if (ret)
				return ret;
			if (rs->state != RSK_CONNECTED || !rs->wr_open)
				return -ECONNRESET;
		}
		iom.offset = m->offset;
		iom.sge.addr = (uintptr_t)m->mr->addr;
		iom.sge.key = m->mr->rkey;
		iom.sge.length = (uint32_t)m->mr->length;
		if (rs->swap) {
			iom.offset = bswap_64(iom.offset);
			iom.sge.addr = bswap_64(iom.sge.addr);
			iom.sge.key = bswap_32(iom.sge.key);
			iom.sge.length = bswap_32(iom.sge.length);
		}
		ret = rsk_post_iomap(rs, &iom, m->index);
		if (ret)
			return ret;
		m->sent = true;
	}
	rs->iomap_pending = false;
	return 0;
}

/* A free slot of the peer's iomap table, -1 if none. */
static int free_slot(const struct rsk *rs)
{
	for (int i = 0; i < (int)rs->remote_iomap.length; i++) {
		bool used = false;

		for (const struct rsk_iomr *m = rs->iomaps; m; m = m->next)
			used |= m->index == i;
		if (!used)
			return i;
	}
	return -1;
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags,
	     off_t offset)
{
	struct rsk *rs = rsk_get(socket);
	int access = IBV_ACCESS_LOCAL_WRITE;
	struct rsk_iomr *m;
	int err = 0;

	(void)flags;
	if (!rs)
		return -1;
	if (rs->state != RSK_CONNECTED || (prot & ~PROT_WRITE)) {
		err = EINVAL;
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		err = ENOMEM;
		goto out;
	}
	m->index = -1;
	if (prot & PROT_WRITE) {
		m->index = free_slot(rs);
		access |= IBV_ACCESS_REMOTE_WRITE;
		if (m->index < 0) {
			free(m);
			err = ENOMEM;
			goto out;
		}
	}
	m->mr = ibv_reg_mr(rs->id->pd, buf, len, access);
	if (!m->mr) {
		err = errno;
		free(m);
		goto out;
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	m->next = rs->iomaps;
	rs->iomaps = m;
	if (m->index >= 0)
		rs->iomap_pending = true;
out:
	rsk_put(rs);
	if (err) {
		errno = err;
		return -1;
	}
	return offset;
}

/* The prototype is rsocket.h's. */
/* cppcheck-suppress constParameter */
int riounmap(int socket, void *buf, size_t len)
{
	struct rsk *rs = rsk_get(socket);
	struct rsk_iomr **pp;

	if (!rs)
		return -1;
	for (pp = &rs->iomaps; *pp; pp = &(*pp)->next) {
		struct rsk_iomr *m = *pp;

		if (m->mr->addr != buf || m->mr->length != len)
			continue;
		*pp = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
		rsk_put(rs);
		return 0;
	}
	rsk_put(rs);
	errno = EINVAL;
	return -1;
}

/* The peer's table entry covering offset, read once (the peer writes
 * the table). false if none. */
static bool find_iomap(struct rsk *rs, uint64_t offset, struct rsk_iomap *out)
{
	for (int i = 0; i < rs->iomap_size; i++) {
		struct rsk_iomap e;

		rsk_peer_fence();
		memcpy(&e, (const void *)&rs->tiomap[i], sizeof(e));
		if (e.sge.length && offset >= e.offset &&
		    offset < e.offset + e.sge.length) {
			*out = e;
			return true;
		}
	}
	return false;
}

size_t riowrite(int socket, const void *buf, size_t count, off_t offset,
		int flags)
{
	struct rsk *rs = rsk_get(socket);
	struct iovec v = { .iov_base = (void *)buf, .iov_len = count };
	struct iocur c = { .iov = &v, .cnt = 1 };
	uint32_t olen = RSK_OLAP_START;
	uint64_t off = (uint64_t)offset;
	size_t left = count;
	int ret;

	if (!rs)
		return (size_t)-1;
	ret = ready(rs);
	if (!ret && rs->iomap_pending)
		ret = send_iomaps(rs, nonblocking(rs, flags));
	while (!ret && left) {
		struct rsk_iomap iom;
		struct ibv_sge sge[2];
		uint8_t inl[256];
		uint32_t xfer = 0;
		int n, sflags;

		if (!find_iomap(rs, off, &iom)) {
			ret = -EINVAL;
			break;
		}
		ret = next_xfer(rs, flags, &olen, left, &xfer);
		if (ret)
			break;
		if (xfer > iom.offset + iom.sge.length - off)
			xfer = (uint32_t)(iom.offset + iom.sge.length - off);
		n = gather(rs, &c, xfer, inl, sizeof(inl), sge, &sflags);
		ret = rsk_post_direct(rs, sge, n, xfer, sflags,
				      iom.sge.addr + off - iom.offset,
				      iom.sge.key);
		if (ret)
			break;
		left -= xfer;
		off += xfer;
	}
	/* riowrite's users wait for the peer's writes by watching memory,
	 * not by calling us: hand the socket back to wisp's engine now
	 * (arming does), or it waits for this thread to stop polling. */
	rsk_drain_events(rs);
	(void)rsk_arm(rs);
	rsk_put(rs);
	if (ret && left == count) {
		errno = ret == -EAGAIN ? EWOULDBLOCK : -ret;
		return (size_t)-1;
	}
	return count - left;
}
