// SPDX-License-Identifier: MIT
/*
 * await-listener.c - LD_PRELOAD shim for perftest -R clients on this host:
 * rdma_connect to a port of this machine first waits until something
 * listens there.
 *
 * Why: perftest 4.5 with -R makes two rdma_cm connections to the one port.
 * Its server accepts the first, destroys that listener, and creates a new
 * one for the second only after the last message of its handshake is sent
 * (src/perftest_communication.c: ctx_hand_shake, then
 * rdma_cm_server_connection's rdma_create_id / rdma_bind_addr /
 * rdma_listen), while its client connects as soon as that message has
 * arrived. Whenever the server's thread is descheduled in between, the
 * client is refused (UNREACHABLE -111 over wisp; REJECTED over a kernel
 * iWARP or IB CM), and perftest's retry loop then reads its freed array
 * of ids (docs/interop.md, finding 5). Nothing in wisp can close that
 * window: it is in perftest's protocol. The client is made to wait for
 * the event it depends on, the listener, instead of for a time.
 *
 * The listener is looked up in /proc/net/tcp and /proc/net/tcp6 (state
 * 0A, any local address, the destination port). A destination that is not
 * an address of this machine, or a listener that does not show within
 * AWAIT_LISTENER_MS (default 10000), lets the connect go ahead unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool listening_in(const char *table, unsigned int port)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(table, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned int lport, state;
		char *colon = strchr(line, ':');

		/* "sl: local_address:PORT rem_address:PORT st ..." */
		if (!colon || !(colon = strchr(colon + 1, ':')))
			continue;
		if (sscanf(colon + 1, "%x %*s %x", &lport, &state) == 2 &&
		    lport == port && state == 0x0A)
			found = true;
	}
	fclose(f);
	return found;
}

static bool listening(unsigned int port)
{
	return listening_in("/proc/net/tcp", port) ||
	       listening_in("/proc/net/tcp6", port);
}

/* The destination port if the destination is loopback, else 0. */
static unsigned int local_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;

		if ((ntohl(s->sin_addr.s_addr) >> 24) == 127)
			return ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;

		if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr))
			return ntohs(s->sin6_port);
	}
	return 0;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static int (*next)(struct rdma_cm_id *, struct rdma_conn_param *);
	const char *env = getenv("AWAIT_LISTENER_MS");
	long end = now_ms() + (env ? atol(env) : 10000);
	unsigned int port = id ? local_port(&id->route.addr.dst_addr) : 0;

	if (!next)
		next = (int (*)(struct rdma_cm_id *, struct rdma_conn_param *))
			dlsym(RTLD_NEXT, "rdma_connect");
	if (!next)
		return -1;
	/* Polled: nothing signals a listen() to another process. */
	while (port && !listening(port) && now_ms() < end) {
		struct timespec pause = { .tv_nsec = 1000000 };

		nanosleep(&pause, NULL);
	}
	return next(id, param);
}
