/* SPDX-License-Identifier: MIT */
/*
 * rsocket_poll.c - rpoll and rselect over rsockets and ordinary file
 * descriptors together.
 *
 * Each round looks at every rsocket (completions processed, a pending
 * rconnect advanced) and polls the ordinary fds without waiting. With
 * nothing ready it arms the rsockets' CQs, looks once more (a completion
 * that came before the arm raises no event), then sleeps in poll(2) on
 * what wakes each one: the completion channel of a connected socket, the
 * rdma_cm channel of a listening or connecting one.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rsocket_internal.h"

/* revents of one rsocket for events; *wake the fd that signals it. */
static short rsk_revents(struct rsk *rs, short events, int *wake)
{
	short rev = 0;

	*wake = -1;
	switch (rs->state) {
	case RSK_LISTENING: {
		struct pollfd p = { .fd = rs->fd, .events = POLLIN };

		*wake = rs->fd;
		if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
			rev |= POLLIN;
		return rev & events;
	}
	case RSK_CONNECTING:
		if (rsk_connect_step(rs) == -EINPROGRESS) {
			*wake = rs->fd;
			return 0;
		}
		break;
	default:
		break;
	}
	switch (rs->state) {
	case RSK_CONNECTED:
	case RSK_DISCONNECTED:
	case RSK_ERROR:
		rsk_progress(rs);
		if ((events & POLLIN) && rsk_have_data_or_closed(rs))
			rev |= POLLIN;
		if ((events & POLLOUT) && rsk_can_send(rs))
			rev |= POLLOUT;
		/* As TCP: data the peer sent before it left is read first;
		 * the hang-up shows once it is (rstream's do_poll treats
		 * POLLHUP as an error even next to POLLIN). */
		if (rs->state == RSK_DISCONNECTED && !rsk_have_data(rs))
			rev |= POLLHUP;
		else if (rs->state == RSK_ERROR)
			rev |= POLLERR;
		if (rs->cch)
			*wake = rs->cch->fd;
		return rev;
	case RSK_CONNECT_ERROR:
		return (short)((events & (POLLIN | POLLOUT)) | POLLERR);
	default:
		/* Not connected, not listening: nothing will happen. */
		return 0;
	}
}

/* One look at all: the count of ready entries. If arm, also arm the
 * CQs and fill wait[] (*all_armed false if an arm was new). */
static int scan(struct pollfd *fds, nfds_t n, struct pollfd *wait, bool arm,
		bool *all_armed)
{
	int ready = 0;

	for (nfds_t i = 0; i < n; i++) {
		int wake;

		fds[i].revents = 0;
		wait[i].fd = -1;
		wait[i].events = POLLIN;
		wait[i].revents = 0;
		if (fds[i].fd < 0)
			continue;
		if (!rsk_known(fds[i].fd)) {
			struct pollfd p = fds[i];

			if (poll(&p, 1, 0) > 0)
				fds[i].revents = p.revents;
			wait[i] = fds[i];
			wait[i].revents = 0;
		} else {
			struct rsk *rs = rsk_get(fds[i].fd);

			if (!rs) {
				fds[i].revents = POLLNVAL;
			} else {
				fds[i].revents = rsk_revents(rs, fds[i].events,
							     &wake);
				if (arm && !fds[i].revents &&
				    wake == (rs->cch ? rs->cch->fd : -2) &&
				    !rsk_arm(rs))
					*all_armed = false;
				wait[i].fd = wake;
				rsk_put(rs);
			}
		}
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

static void drain(struct pollfd *fds, nfds_t n, const struct pollfd *wait)
{
	for (nfds_t i = 0; i < n; i++) {
		struct rsk *rs;

		if (!wait[i].revents || !rsk_known(fds[i].fd))
			continue;
		rs = rsk_get(fds[i].fd);
		if (!rs)
			continue;
		if (rs->cch && wait[i].fd == rs->cch->fd)
			rsk_drain_events(rs);
		rsk_put(rs);
	}
}

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	int64_t end = timeout > 0 ? now_ms() + timeout : 0;
	struct pollfd *wait;
	int ready = 0;

	wait = calloc(nfds ? nfds : 1, sizeof(*wait));
	if (!wait) {
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		bool all_armed = true;
		int left = -1, ret;

		ready = scan(fds, nfds, wait, false, &all_armed);
		if (ready || !timeout)
			break;
		ready = scan(fds, nfds, wait, true, &all_armed);
		if (ready)
			break;
		if (!all_armed)
			continue;
		if (timeout > 0) {
			left = (int)(end - now_ms());
			if (left <= 0)
				break;
		}
		ret = poll(wait, nfds, left);
		if (ret < 0) {
			ready = -1;
			break;
		}
		drain(fds, nfds, wait);
	}
	free(wait);
	return ready;
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	    struct timeval *timeout)
{
	struct pollfd *fds;
	int n = 0, ret, to = -1;

	if (nfds < 0 || nfds > FD_SETSIZE) {
		errno = EINVAL;
		return -1;
	}
	fds = calloc(nfds ? (size_t)nfds : 1, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (!ev)
			continue;
		fds[n].fd = fd;
		fds[n].events = ev;
		n++;
	}
	if (timeout)
		to = (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
	ret = rpoll(fds, (nfds_t)n, to);
	if (ret < 0)
		goto out;
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	/* select(2) counts the bits it leaves set. */
	ret = 0;
	for (int i = 0; i < n; i++) {
		if (readfds && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(fds[i].fd, readfds);
			ret++;
		}
		if (writefds && (fds[i].revents & (POLLOUT | POLLERR))) {
			FD_SET(fds[i].fd, writefds);
			ret++;
		}
		if (exceptfds && (fds[i].revents & POLLPRI)) {
			FD_SET(fds[i].fd, exceptfds);
			ret++;
		}
	}
out:
	free(fds);
	return ret;
}
