/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm's local ports when the ephemeral range is full, in a network
 * namespace of the test's own (made in a user namespace: no root needed)
 * whose net.ipv4.ip_local_port_range is narrowed to PORTS ports, so that
 * filling it takes PORTS sockets and nothing else on the machine sees
 * them. No timing is involved: a port held by any socket, one in
 * TIME_WAIT included, is one that bind(2) with port 0 does not take,
 * however long the test runs.
 *
 *   - Every port of the range held by a TCP connection now in TIME_WAIT
 *     (the test's client closed first), to another destination: bind
 *     with port 0 fails with EADDRINUSE, while connect(2) may still
 *     share each port with them. rdma_resolve_addr and rdma_connect of
 *     several ids succeed, and the ids report the port TCP took.
 *   - Every port of the range bound by a socket: no connect can have
 *     one. rdma_connect fails with EADDRNOTAVAIL (as the kernel's
 *     rdma_connect does when its iWARP driver cannot bind), with no
 *     event; the id stays resolved, and once a port is free again the
 *     same id connects.
 *   - The range narrowed to one port, P, on which nothing listens: a
 *     connect to loopback port P takes P as its source port too, and
 *     TCP's simultaneous open connects the socket to itself. rdma_connect
 *     and rconnect end as a refused connect does (UNREACHABLE with
 *     -ECONNREFUSED; ECONNREFUSED), not in an MPA exchange with their own
 *     Request (CONNECT_ERROR, -EPROTO).
 *
 * A user namespace cannot be made by a process with threads, which
 * Criterion's worker has: each case runs in a child forked for it, whose
 * checks report to the test through a pipe. Skipped where neither a user
 * namespace nor a network namespace can be made.
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "cm_loopback.h"
#include "wisp_rdmacm.h"

#define WAIT_MS 5000
#define CHILD_S 20             /* the child's alarm */
#define PORT_LO 40000
#define PORTS 8
#define PORT_HI (PORT_LO + PORTS - 1)
/* Outside the range: listeners bound to these leave it whole. */
#define TCP_PORT 20000
#define CM_PORT 20001
#define IDS 4
#define SKIP 77

/* No QP: the connection is the CM's alone (events, no data). */
static struct rdma_conn_param cm_only;

/* ---- the child's checks ----------------------------------------------- */

static int report_fd = -1;

static void __attribute__((format(printf, 3, 4), noreturn))
child_exit(int code, int line, const char *fmt, ...)
{
	va_list ap;

	dprintf(report_fd, "line %d: ", line);
	va_start(ap, fmt);
	vdprintf(report_fd, fmt, ap);
	va_end(ap);
	_exit(code);
}

#define check(cond, ...)                                                  \
	do {                                                              \
		if (!(cond))                                              \
			child_exit(1, __LINE__, __VA_ARGS__);             \
	} while (0)

/* Run body(family) in a child of its own; its verdict is the test's. */
static void in_child(void (*body)(int), int family)
{
	char msg[512];
	ssize_t n, got = 0;
	int p[2], st;
	pid_t pid;

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		close(p[0]);
		report_fd = p[1];
		alarm(CHILD_S);
		body(family);
		_exit(0);
	}
	close(p[1]);
	while (got < (ssize_t)sizeof(msg) - 1 &&
	       (n = read(p[0], msg + got, sizeof(msg) - 1 - (size_t)got)) > 0)
		got += n;
	msg[got] = 0;
	close(p[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP)
		cr_skip_test("%s", msg);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s%s", msg,
		  WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "");
}

/* ---- the namespace ---------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	check(fd >= 0, "open %s: %s", path, strerror(errno));
	n = write(fd, text, strlen(text));
	check(n == (ssize_t)strlen(text), "write %s: %s", path,
	      strerror(errno));
	close(fd);
}

/* This process in a network namespace of its own, loopback up, the
 * ephemeral range PORT_LO..PORT_HI. */
static void private_net(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	struct ifreq ifr = { 0 };
	char map[64];
	int s;

	if (!unshare(CLONE_NEWUSER | CLONE_NEWNET)) {
		/* root of the new user namespace, so that the network
		 * namespace's sysctls are ours to write */
		write_file("/proc/self/setgroups", "deny");
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
		write_file("/proc/self/uid_map", map);
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
		write_file("/proc/self/gid_map", map);
	} else if (unshare(CLONE_NEWNET)) {
		child_exit(SKIP, __LINE__, "no network namespace here: %s",
			   strerror(errno));
	}
	snprintf(map, sizeof(map), "%d %d", PORT_LO, PORT_HI);
	write_file("/proc/sys/net/ipv4/ip_local_port_range", map);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	check(s >= 0, "socket: %s", strerror(errno));
	strcpy(ifr.ifr_name, "lo");
	check(!ioctl(s, SIOCGIFFLAGS, &ifr), "lo: %s", strerror(errno));
	ifr.ifr_flags |= IFF_UP;
	check(!ioctl(s, SIOCSIFFLAGS, &ifr), "lo up: %s", strerror(errno));
	close(s);
}

/* ---- TCP -------------------------------------------------------------- */

static socklen_t sslen(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) :
				   sizeof(struct sockaddr_in6);
}

static uint16_t port_of_fd(int fd)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);

	check(!getsockname(fd, (struct sockaddr *)&a, &len), "getsockname");
	return ntohs(a.ss_family == AF_INET ?
		     ((struct sockaddr_in *)&a)->sin_port :
		     ((struct sockaddr_in6 *)&a)->sin6_port);
}

/* The error of a socket bound to loopback with port 0, 0 if it gets a
 * port: EADDRINUSE when every port of the range is held by some socket,
 * TIME_WAIT or not, SO_REUSEADDR or not. */
static int bind_any_errno(int family)
{
	struct sockaddr_storage a;
	int one = 1, s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), e = 0;

	check(s >= 0, "socket: %s", strerror(errno));
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	loopback(family, &a, 0);
	if (bind(s, (struct sockaddr *)&a, sslen(family)))
		e = errno;
	close(s);
	return e;
}

/* A TCP listener on loopback, that port. */
static int tcp_listener(int family, uint16_t port)
{
	struct sockaddr_storage a;
	int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	check(s >= 0, "socket: %s", strerror(errno));
	loopback(family, &a, port);
	check(!bind(s, (struct sockaddr *)&a, sslen(family)), "bind %u: %s",
	      port, strerror(errno));
	check(!listen(s, PORTS), "listen: %s", strerror(errno));
	return s;
}

/* How many TCP sockets of the range are in TIME_WAIT, from this
 * namespace's /proc/net/tcp or tcp6. */
static int time_wait_in_range(int family)
{
	FILE *f = fopen(family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6",
			"re");
	char line[256];
	int n = 0;

	check(f, "/proc/net/tcp: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char local[64], *colon;
		unsigned int port, st;

		if (sscanf(line, " %*d: %63s %*s %x", local, &st) != 2)
			continue;
		colon = strrchr(local, ':');
		if (!colon || sscanf(colon + 1, "%x", &port) != 1)
			continue;
		if (st == 6 && port >= PORT_LO && port <= PORT_HI)
			n++;   /* 6: TCP_TIME_WAIT */
	}
	fclose(f);
	return n;
}

/* Every port of the range in TIME_WAIT: PORTS connections to a TCP
 * listener, each closed by its client first, then by the server. */
static void fill_with_time_wait(int family)
{
	struct sockaddr_storage dst;
	int l = tcp_listener(family, TCP_PORT), tw = 0;

	loopback(family, &dst, TCP_PORT);
	for (int i = 0; i < PORTS; i++) {
		int c = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), a;
		uint16_t p;
		char b;

		check(c >= 0, "socket: %s", strerror(errno));
		check(!connect(c, (struct sockaddr *)&dst, sslen(family)),
		      "connect %d: %s", i, strerror(errno));
		p = port_of_fd(c);
		check(p >= PORT_LO && p <= PORT_HI, "port %u", p);
		a = accept(l, NULL, NULL);
		check(a >= 0, "accept: %s", strerror(errno));
		close(c);
		check(read(a, &b, 1) == 0, "the client's FIN");
		close(a);
	}
	close(l);
	/* The server's FIN takes each client socket from FIN_WAIT2 to
	 * TIME_WAIT (both hold the port): on loopback before close()
	 * returns, as a rule; looked at for a bounded while. */
	for (int k = 0; k < 200 && (tw = time_wait_in_range(family)) < PORTS;
	     k++)
		usleep(10000);
	check(tw == PORTS, "%d of %d ports in TIME_WAIT", tw, PORTS);
	check(bind_any_errno(family) == EADDRINUSE,
	      "bind with port 0 while every port is in TIME_WAIT: %s",
	      strerror(bind_any_errno(family)));
}

/* ---- rdma_cm ---------------------------------------------------------- */

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	check(poll(&p, 1, WAIT_MS) == 1, "no event within %d ms, wanted %s",
	      WAIT_MS, rdma_event_str(want));
	check(!rdma_get_cm_event(ch, &ev), "rdma_get_cm_event: %s",
	      strerror(errno));
	check(ev->event == want, "got %s (status %d), wanted %s",
	      rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	return ev;
}

static struct rdma_cm_id *cm_listener(struct rdma_event_channel *ch,
				      int family)
{
	struct sockaddr_storage a;
	struct rdma_cm_id *l;

	loopback(family, &a, CM_PORT);
	check(!rdma_create_id(ch, &l, NULL, RDMA_PS_TCP), "rdma_create_id");
	check(!rdma_bind_addr(l, (struct sockaddr *)&a), "rdma_bind_addr: %s",
	      strerror(errno));
	check(!rdma_listen(l, 0), "rdma_listen: %s", strerror(errno));
	return l;
}

/* An id resolved (address and route) towards loopback port. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch,
				   int family, uint16_t port)
{
	struct sockaddr_storage dst;
	struct rdma_cm_id *id;

	loopback(family, &dst, port);
	check(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id");
	check(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000),
	      "rdma_resolve_addr to port %u: %s", port, strerror(errno));
	rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	check(!rdma_resolve_route(id, 2000), "rdma_resolve_route: %s",
	      strerror(errno));
	rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	return id;
}

/* The port TCP took for cl, from rdma_connect's return on: one of the
 * range. */
static void check_src_port(struct rdma_cm_id *cl)
{
	uint16_t p = ntohs(rdma_get_src_port(cl));

	check(p >= PORT_LO && p <= PORT_HI, "source port %u", p);
}

/* The listener's CONNECT_REQUEST accepted (no QP: the CM alone), both
 * ends ESTABLISHED; the server's id returned. */
static struct rdma_cm_id *accept_one(struct rdma_event_channel *sch,
				     struct rdma_event_channel *cch,
				     struct rdma_cm_id *cl)
{
	struct rdma_cm_event *ev = expect_event(sch,
						RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *sv = ev->id;

	rdma_ack_cm_event(ev);
	check(!rdma_accept(sv, &cm_only), "rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED));
	check_src_port(cl);
	check(rdma_get_dst_port(sv) == rdma_get_src_port(cl),
	      "the server sees port %u", ntohs(rdma_get_dst_port(sv)));
	return sv;
}

/* ---- the cases -------------------------------------------------------- */

/* IDS ids resolved, then connected one by one, each accepted. */
static void connect_in_time_wait(int family)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *l, *cl[IDS], *sv[IDS];

	private_net();
	fill_with_time_wait(family);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	check(sch && cch, "rdma_create_event_channel");
	l = cm_listener(sch, family);
	/* All resolved first, as a burst of connections is made. */
	for (int i = 0; i < IDS; i++)
		cl[i] = resolved(cch, family, CM_PORT);
	for (int i = 0; i < IDS; i++) {
		check(!rdma_connect(cl[i], &cm_only), "rdma_connect %d: %s", i,
		      strerror(errno));
		check_src_port(cl[i]);
		sv[i] = accept_one(sch, cch, cl[i]);
	}
	for (int i = 0; i < IDS; i++) {
		check(!rdma_destroy_id(cl[i]), "rdma_destroy_id");
		check(!rdma_destroy_id(sv[i]), "rdma_destroy_id");
	}
	check(!rdma_destroy_id(l), "rdma_destroy_id");
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

Test(cm_ports, connects_while_every_port_is_in_time_wait, .timeout = 30)
{
	in_child(connect_in_time_wait, AF_INET);
}

Test(cm_ports, connects_while_every_port_is_in_time_wait_ipv6,
     .timeout = 30)
{
	in_child(connect_in_time_wait, AF_INET6);
}

/* Every port of the range bound by a socket of its own (held[PORTS]):
 * connect(2) shares no port that bind(2) took. */
static void hold_every_port(int family, int *held)
{
	for (int i = 0; i < PORTS; i++) {
		struct sockaddr_storage a;

		held[i] = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		check(held[i] >= 0, "socket: %s", strerror(errno));
		loopback(family, &a, (uint16_t)(PORT_LO + i));
		check(!bind(held[i], (struct sockaddr *)&a, sslen(family)),
		      "bind: %s", strerror(errno));
	}
}

/* A connection's two ids, its listener and both channels, destroyed. */
static void end_all(struct rdma_cm_id *cl, struct rdma_cm_id *sv,
		    struct rdma_cm_id *l, struct rdma_event_channel *cch,
		    struct rdma_event_channel *sch)
{
	check(!rdma_destroy_id(cl), "rdma_destroy_id");
	check(!rdma_destroy_id(sv), "rdma_destroy_id");
	check(!rdma_destroy_id(l), "rdma_destroy_id");
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

static void connect_without_port(int family)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *l, *cl, *sv;
	struct pollfd p;
	int held[PORTS];

	private_net();
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	check(sch && cch, "rdma_create_event_channel");
	l = cm_listener(sch, family);
	hold_every_port(family, held);
	cl = resolved(cch, family, CM_PORT);
	errno = 0;
	check(rdma_connect(cl, &cm_only) == -1, "connected without a port");
	check(errno == EADDRNOTAVAIL, "rdma_connect: %s, wanted %s",
	      strerror(errno), strerror(EADDRNOTAVAIL));
	/* No event for the failed call, and the id is still resolved:
	 * with a port free again, it connects. */
	p = (struct pollfd){ .fd = cch->fd, .events = POLLIN };
	check(poll(&p, 1, 50) == 0, "an event for the failed rdma_connect");
	close(held[PORTS - 1]);
	check(!rdma_connect(cl, &cm_only), "rdma_connect again: %s",
	      strerror(errno));
	check(ntohs(rdma_get_src_port(cl)) == PORT_HI, "source port %u",
	      ntohs(rdma_get_src_port(cl)));
	sv = accept_one(sch, cch, cl);
	for (int i = 0; i < PORTS - 1; i++)
		close(held[i]);
	end_all(cl, sv, l, cch, sch);
}

Test(cm_ports, no_port_left_fails_rdma_connect_with_eaddrnotavail,
     .timeout = 30)
{
	in_child(connect_without_port, AF_INET);
}

/* A listener bound with port 0 while every port is held takes its port
 * at rdma_listen, and reports it. */
static void listen_without_port(int family)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *l, *cl, *sv;
	struct sockaddr_storage a;
	int held[PORTS];
	uint16_t port;

	private_net();
	hold_every_port(family, held);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	check(sch && cch, "rdma_create_event_channel");
	check(!rdma_create_id(sch, &l, NULL, RDMA_PS_TCP), "rdma_create_id");
	loopback(family, &a, 0);
	check(!rdma_bind_addr(l, (struct sockaddr *)&a),
	      "rdma_bind_addr, port 0, every port held: %s", strerror(errno));
	/* Still none free: listen has none to take either. */
	errno = 0;
	check(rdma_listen(l, 0) == -1 && errno == EADDRINUSE,
	      "rdma_listen with no port free: %s", strerror(errno));
	check(!rdma_destroy_id(l), "rdma_destroy_id");
	check(!rdma_create_id(sch, &l, NULL, RDMA_PS_TCP), "rdma_create_id");
	check(!rdma_bind_addr(l, (struct sockaddr *)&a), "rdma_bind_addr: %s",
	      strerror(errno));
	close(held[0]);
	check(!rdma_listen(l, 0), "rdma_listen: %s", strerror(errno));
	port = ntohs(rdma_get_src_port(l));
	check(port == PORT_LO, "the listener reports port %u", port);
	/* Connectable there (the client's port from the one the listener
	 * does not hold, with another peer address pair). */
	cl = resolved(cch, family, port);
	close(held[1]);
	check(!rdma_connect(cl, &cm_only), "rdma_connect: %s",
	      strerror(errno));
	sv = accept_one(sch, cch, cl);
	for (int i = 2; i < PORTS; i++)
		close(held[i]);
	end_all(cl, sv, l, cch, sch);
}

Test(cm_ports, listener_bound_with_no_port_free_takes_one_at_listen,
     .timeout = 30)
{
	in_child(listen_without_port, AF_INET);
}

/* ---- a connect to itself ---------------------------------------------- */

/* The range narrowed to the one port PORT_LO. */
static void one_port_range(void)
{
	char range[32];

	snprintf(range, sizeof(range), "%d %d", PORT_LO, PORT_LO);
	write_file("/proc/sys/net/ipv4/ip_local_port_range", range);
}

/* A plain TCP connect to loopback port PORT_LO connects to itself: the
 * case the checks below are about, made sure of here. */
static void tcp_connects_to_itself(int family)
{
	struct sockaddr_storage dst, src, peer;
	socklen_t slen = sizeof(src), plen = sizeof(peer);
	struct linger reset = { .l_onoff = 1, .l_linger = 0 };
	int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	check(s >= 0, "socket: %s", strerror(errno));
	loopback(family, &dst, PORT_LO);
	check(!connect(s, (struct sockaddr *)&dst, sslen(family)),
	      "TCP connect to port %d, the range's one port: %s", PORT_LO,
	      strerror(errno));
	check(!getsockname(s, (struct sockaddr *)&src, &slen) &&
	      !getpeername(s, (struct sockaddr *)&peer, &plen),
	      "getsockname / getpeername: %s", strerror(errno));
	check(slen == plen && !memcmp(&src, &peer, slen),
	      "the TCP connect did not connect to itself");
	/* Reset, not closed: no TIME_WAIT holds the range's one port. */
	check(!setsockopt(s, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)),
	      "SO_LINGER: %s", strerror(errno));
	close(s);
}

/* A PSK file of the child's for TLS (docs/tls.md), its name in psk. */
static void psk_file(char *psk, size_t len)
{
	static const char key[] = "000102030405060708090a0b0c0d0e0f"
				  "101112131415161718191a1b1c1d1e1f\n";
	int fd;

	snprintf(psk, len, "/tmp/wisp-cm-ports-psk.XXXXXX");
	fd = mkstemp(psk);
	check(fd >= 0, "mkstemp: %s", strerror(errno));
	check(write(fd, key, strlen(key)) == (ssize_t)strlen(key), "write: %s",
	      strerror(errno));
	close(fd);
}

/* TLS required on id, with the PSK in file psk. */
static void tls_on(struct rdma_cm_id *id, const char *psk)
{
	static const char ident[] = "cm-ports";
	int mode = WISP_TLS_REQUIRED;

	check(!rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_TLS, &mode,
			       sizeof(mode)) &&
	      !rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_TLS_PSK_FILE,
			       (void *)psk, strlen(psk) + 1) &&
	      !rdma_set_option(id, WISP_OPTION_LEVEL,
			       WISP_OPT_TLS_PSK_IDENTITY, (void *)ident,
			       sizeof(ident)),
	      "rdma_set_option, TLS: %s", strerror(errno));
}

/* rdma_connect of a fresh id to loopback port (with TLS under the PSK in
 * file psk, unless NULL), the event it ends in (its status in *status). */
static enum rdma_cm_event_type connect_outcome(struct rdma_event_channel *ch,
					       int family, uint16_t port,
					       const char *psk, int *status)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	enum rdma_cm_event_type type;

	id = resolved(ch, family, port);
	if (psk)
		tls_on(id, psk);
	check(!rdma_connect(id, &cm_only), "rdma_connect to port %u: %s", port,
	      strerror(errno));
	check(poll(&p, 1, WAIT_MS) == 1, "no event within %d ms", WAIT_MS);
	check(!rdma_get_cm_event(ch, &ev), "rdma_get_cm_event: %s",
	      strerror(errno));
	type = ev->event;
	*status = ev->status;
	rdma_ack_cm_event(ev);
	check(!rdma_destroy_id(id), "rdma_destroy_id");
	return type;
}

/* Plain MPA sends its Request as the connect completes (cm_active.c's
 * dial_early_request); with TLS (psk) the dialer sees the connect done
 * first (dial_connected). */
static void connect_to_itself_with(int family, const char *psk)
{
	struct rdma_event_channel *ch;
	enum rdma_cm_event_type want, got;
	int want_st, got_st;

	ch = rdma_create_event_channel();
	check(ch, "rdma_create_event_channel");
	/* What a refused connect ends in: to a port outside the range, on
	 * which nothing listens. */
	want = connect_outcome(ch, family, CM_PORT, psk, &want_st);
	check(want == RDMA_CM_EVENT_UNREACHABLE && want_st == -ECONNREFUSED,
	      "a refused connect: %s (status %d)", rdma_event_str(want),
	      want_st);
	tcp_connects_to_itself(family);
	/* Twice: the first connect leaves nothing behind that changes the
	 * second. */
	for (int i = 0; i < 2; i++) {
		got = connect_outcome(ch, family, PORT_LO, psk, &got_st);
		check(got == want && got_st == want_st,
		      "rdma_connect %d to port %d (the range's one port, "
		      "nobody listening): %s (status %d), a refused connect: "
		      "%s (status %d)", i, PORT_LO, rdma_event_str(got),
		      got_st, rdma_event_str(want), want_st);
	}
	rdma_destroy_event_channel(ch);
}

static void connect_to_itself(int family)
{
	private_net();
	one_port_range();
	connect_to_itself_with(family, NULL);
}

static void connect_to_itself_tls(int family)
{
	char psk[64];

	private_net();
	one_port_range();
	psk_file(psk, sizeof(psk));
	connect_to_itself_with(family, psk);
	unlink(psk);
}

Test(cm_ports, connect_to_itself_is_refused, .timeout = 30)
{
	in_child(connect_to_itself, AF_INET);
}

Test(cm_ports, connect_to_itself_is_refused_ipv6, .timeout = 30)
{
	in_child(connect_to_itself, AF_INET6);
}

Test(cm_ports, connect_to_itself_is_refused_tls, .timeout = 30)
{
	in_child(connect_to_itself_tls, AF_INET);
}

/* rconnect to port, blocking: its errno (0 if it connected). */
static int rconnect_errno(int family, uint16_t port)
{
	struct sockaddr_storage dst;
	int s = rsocket(family, SOCK_STREAM, 0), e = 0;

	check(s >= 0, "rsocket: %s", strerror(errno));
	loopback(family, &dst, port);
	if (rconnect(s, (struct sockaddr *)&dst, sslen(family)))
		e = errno;
	rclose(s);
	return e;
}

static void rconnect_to_itself(int family)
{
	int e;

	private_net();
	one_port_range();
	e = rconnect_errno(family, CM_PORT);
	check(e == ECONNREFUSED, "rconnect, refused: %s", strerror(e));
	tcp_connects_to_itself(family);
	for (int i = 0; i < 2; i++) {
		e = rconnect_errno(family, PORT_LO);
		check(e == ECONNREFUSED,
		      "rconnect %d to port %d (the range's one port, nobody "
		      "listening): %s, wanted %s", i, PORT_LO, strerror(e),
		      strerror(ECONNREFUSED));
	}
}

Test(cm_ports, rconnect_to_itself_is_refused, .timeout = 30)
{
	in_child(rconnect_to_itself, AF_INET);
}
