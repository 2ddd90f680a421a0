/* SPDX-License-Identifier: MIT */
/*
 * glue_mpa.c - TCP connect and MPA Request/Reply frame I/O with deadlines
 * (RFC 5044 7.1.2 rule 10: "MPA implementations SHOULD implement a
 * reasonable timeout while waiting for the entire set of startup frames").
 *
 * Everything goes through poll() and MSG_DONTWAIT, so the caller's socket
 * may be blocking or not and a stalled peer never holds a thread longer
 * than its deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "glue_mpa.h"
#include "glue_tls.h"

int64_t glue_mpa_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : glue_mpa_now_ms() + timeout_ms;
}

/* Wait until fd is ready for events or the deadline (-1: none) passes.
 * Errors and hang-ups count as ready: the next socket call reports them. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };

	for (;;) {
		int timeout = -1, n;

		if (deadline >= 0) {
			int64_t left = deadline - glue_mpa_now_ms();

			if (left <= 0)
				return -ETIMEDOUT;
			timeout = left > 60000 ? 60000 : (int)left;
		}
		n = poll(&pfd, 1, timeout);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* The errors of a broken connection read the same to the caller. */
static int stream_errno(int e)
{
	switch (e) {
	case EPIPE:
	case ECONNRESET:
	case ECONNABORTED:
	case ESHUTDOWN:
		return -ECONNRESET;
	default:
		return -e;
	}
}

int glue_mpa_connect_start(int fd, const struct sockaddr *addr,
			   socklen_t addrlen)
{
	int flags;

	if (fd < 0 || !addr)
		return -EINVAL;
	flags = fcntl(fd, F_GETFL);
	if (flags < 0)
		return -errno;
	if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK))
		return -errno;
	return glue_mpa_connect_nb(fd, addr, addrlen);
}

int glue_mpa_connect_nb(int fd, const struct sockaddr *addr,
			socklen_t addrlen)
{
	if (!connect(fd, addr, addrlen))
		return 0;
	/* EINTR: the connect goes on in the background, as EINPROGRESS. */
	return errno == EINPROGRESS || errno == EINTR ? -EINPROGRESS : -errno;
}

long glue_mpa_send_some(int fd, const void *buf, size_t len)
{
	ssize_t n;

	do
		n = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n >= 0)
		return (long)n;
	if (errno == EWOULDBLOCK)
		return -EAGAIN;
	return errno == EPIPE ? -ECONNRESET : -errno;
}

int glue_mpa_connect_result(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int soerr = 0;

	if (poll(&p, 1, 0) <= 0)
		return -EINPROGRESS;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
		return -errno;
	return -soerr;
}

int glue_mpa_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
		     int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	int flags, ret;

	if (fd < 0 || !addr)
		return -EINVAL;
	flags = fcntl(fd, F_GETFL);
	if (flags < 0)
		return -errno;
	ret = glue_mpa_connect_start(fd, addr, addrlen);
	if (ret == -EINPROGRESS) {
		ret = wait_fd(fd, POLLOUT, deadline);
		if (!ret)
			ret = glue_mpa_connect_result(fd);
	}
	if (!(flags & O_NONBLOCK))
		fcntl(fd, F_SETFL, flags);
	return ret;
}

static int tls_write(struct glue_tls *t, int fd, const uint8_t *p,
		     size_t len, int64_t deadline)
{
	size_t done = 0;

	while (done < len) {
		long n = glue_tls_write(t, p + done, len - done);
		int ret;

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n != -EAGAIN)
			return n == -EPIPE ? -ECONNRESET : (int)n;
		ret = wait_fd(fd, glue_tls_events(t), deadline);
		if (ret)
			return ret;
	}
	return 0;
}

/* recv() of a startup frame, through TLS when the socket has it. */
static ssize_t frame_recv(int fd, void *buf, size_t len)
{
	struct glue_tls *t = glue_tls_of(fd);
	long n;

	if (!t)
		return recv(fd, buf, len, MSG_DONTWAIT);
	n = glue_tls_read(t, buf, len);
	if (n >= 0)
		return n;
	errno = (int)-n;
	return -1;
}

int glue_mpa_write(int fd, const void *buf, size_t len, int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	const uint8_t *p = buf;
	size_t done = 0;

	struct glue_tls *t;

	if (fd < 0 || (!buf && len))
		return -EINVAL;
	/* A socket with a TLS session: the frame goes out as records. */
	t = glue_tls_of(fd);
	if (t)
		return tls_write(t, fd, p, len, deadline);
	while (done < len) {
		ssize_t n = send(fd, p + done, len - done,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		int ret;

		if (n >= 0) {
			done += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return stream_errno(errno);
		ret = wait_fd(fd, POLLOUT, deadline);
		if (ret)
			return ret;
	}
	return 0;
}

void glue_mpa_rd_init(struct glue_mpa_rd *rd, enum mpa_frame_type type,
		      uint8_t *buf, size_t cap)
{
	memset(rd, 0, sizeof(*rd));
	rd->type = type;
	rd->buf = buf;
	rd->cap = cap;
	rd->total = MPA_RR_HDR_LEN;
}

/* The header octets buf[0..got) as far as they go: the key is checked
 * octet by octet as it arrives, so a peer speaking something else is
 * refused at once (RFC 5044 7.1.2 rule 5); then revision and PD_Length.
 * The contents of the private data are the negotiation's business: an S
 * flag without IRD/ORD words is not an error here. */
static int check_header(struct glue_mpa_rd *rd, enum mpa_error *err)
{
	struct mpa_rr rr;
	int ret;

	ret = mpa_rr_parse(rd->buf, rd->got < MPA_RR_HDR_LEN ? rd->got :
			   MPA_RR_HDR_LEN, rd->type, &rr, err);
	if (ret == -EPROTO && *err != MPA_ERR_ENHANCED)
		return ret;
	*err = MPA_ERR_NONE;
	if (rd->got < MPA_RR_HDR_LEN)
		return 0;
	rd->have_hdr = true;
	rd->total = MPA_RR_HDR_LEN + (size_t)mpa_rr_pd_len(rd->buf);
	return rd->total > rd->cap ? -ENOBUFS : 0;
}

int glue_mpa_rd_step(int fd, struct glue_mpa_rd *rd, enum mpa_error *err)
{
	enum mpa_error dummy;

	if (!err)
		err = &dummy;
	*err = MPA_ERR_NONE;
	if (fd < 0 || !rd || !rd->buf ||
	    (rd->type != MPA_REQUEST && rd->type != MPA_REPLY))
		return -EINVAL;
	if (rd->cap < MPA_RR_HDR_LEN)
		return -ENOBUFS;
	while (rd->got < rd->total) {
		/* Never ask for more than this frame: the octets after it
		 * are FPDUs for the engine. */
		ssize_t n = frame_recv(fd, rd->buf + rd->got,
				       rd->total - rd->got);
		int ret;

		/* RFC 5044 8, code 1: "TCP connection closed, terminated,
		 * or lost" - a frame cut short by FIN is no frame. */
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return -EAGAIN;
			return stream_errno(errno);
		}
		rd->got += (size_t)n;
		if (rd->have_hdr)
			continue;
		ret = check_header(rd, err);
		if (ret)
			return ret;
	}
	return (int)rd->total;
}

int glue_mpa_read(int fd, enum mpa_frame_type type, uint8_t *buf,
		  size_t cap, int timeout_ms, enum mpa_error *err)
{
	int64_t deadline = deadline_of(timeout_ms);
	struct glue_mpa_rd rd;
	enum mpa_error dummy;

	if (!err)
		err = &dummy;
	*err = MPA_ERR_NONE;
	if (fd < 0 || !buf)
		return -EINVAL;
	glue_mpa_rd_init(&rd, type, buf, cap);
	for (;;) {
		int ret = glue_mpa_rd_step(fd, &rd, err);

		if (ret != -EAGAIN)
			return ret;
		ret = wait_fd(fd, POLLIN, deadline);
		if (ret)
			return ret;
	}
}

void glue_mpa_initiator_hold(int ms)
{
	struct timespec ts = {
		.tv_sec = ms / 1000,
		.tv_nsec = ms % 1000 * 1000000L,
	};

	if (ms <= 0)
		return;
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}
