/* SPDX-License-Identifier: MIT */
/*
 * Shared by the rdma_cm suites (tests/rdmacm/test_rdmacm.c,
 * tests/tls/test_tls.c): a monotonic clock in milliseconds and a
 * loopback address of either family.
 */
#ifndef WISP_TEST_CM_LOOPBACK_H
#define WISP_TEST_CM_LOOPBACK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static inline int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 127.0.0.1 or ::1 (family AF_INET or AF_INET6), port port. */
static inline void loopback(int family, struct sockaddr_storage *ss,
			    uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	ss->ss_family = (sa_family_t)family;
	if (family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;

		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		s->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;

		s->sin6_addr = in6addr_loopback;
		s->sin6_port = htons(port);
	}
}

#endif
