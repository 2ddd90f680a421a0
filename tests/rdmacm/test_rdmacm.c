/* SPDX-License-Identifier: MIT */
/*
 * wisp's librdmacm.so.1 through the public rdma_cma.h API, both ends in
 * one process on loopback (IPv4 and IPv6): the event sequences rdma_cm
 * programs expect, private data both ways, refusals (TCP refused, MPA
 * timeout, the application's reject, MPA's own reject of markers, a
 * non-MPA peer), the CONNECT_REQUEST values for rev 1 / rev 2 Requests,
 * and rdma-core's channel and destroy semantics. Every wait is bounded.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "cm_loopback.h"
#include "proc_threads.h"
#include "wisp_rdmacm.h"

#define WAIT_MS 5000

#define KEY_REQ 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', \
		'F', 'r', 'a', 'm', 'e'
#define KEY_REP "MPA ID Rep Frame"

/* The next event of ch within ms, which must be of type want. */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	cr_assert_eq(poll(&p, 1, ms), 1, "no event within %d ms, wanted %s",
		     ms, rdma_event_str(want));
	cr_assert_eq(rdma_get_cm_event(ch, &ev), 0, "rdma_get_cm_event: %s",
		     strerror(errno));
	cr_assert_eq(ev->event, want, "got %s (status %d), wanted %s",
		     rdma_event_str(ev->event), ev->status,
		     rdma_event_str(want));
	return ev;
}

static void expect_no_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	cr_assert_eq(poll(&p, 1, ms), 0, "unexpected event");
}

static socklen_t sslen(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) :
					  sizeof(struct sockaddr_in6);
}

/* A listening id on loopback with that backlog, port chosen by the
 * kernel. */
static struct rdma_cm_id *listener_backlog(struct rdma_event_channel *ch,
					   int family, int backlog,
					   uint16_t *port)
{
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;

	loopback(family, &ss, 0);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(rdma_bind_addr(id, (struct sockaddr *)&ss), 0,
		     "bind: %s", strerror(errno));
	cr_assert_not_null(id->verbs, "a specific address binds the device");
	cr_assert_eq(rdma_listen(id, backlog), 0, "listen: %s",
		     strerror(errno));
	*port = ntohs(rdma_get_src_port(id));
	cr_assert_neq(*port, 0);
	return id;
}

/* A listening id on loopback, port chosen by the kernel. */
static struct rdma_cm_id *listener(struct rdma_event_channel *ch, int family,
				   uint16_t *port)
{
	return listener_backlog(ch, family, 8, port);
}

/* An active id resolved towards loopback port. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, int family,
				   uint16_t port)
{
	struct sockaddr_storage dst;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	loopback(family, &dst, port);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst,
				       2000), 0);
	ev = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, WAIT_MS);
	cr_assert_eq(ev->id, id);
	rdma_ack_cm_event(ev);
	cr_assert_not_null(id->verbs);
	cr_assert_not_null(id->pd);
	cr_assert_eq(id->route.addr.src_addr.sa_family, family);
	cr_assert_neq(rdma_get_src_port(id), 0, "bound at resolution");
	cr_assert_eq(ntohs(rdma_get_dst_port(id)), port);
	cr_assert_eq(rdma_resolve_route(id, 2000), 0);
	rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED,
				       WAIT_MS));
	return id;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {
		.cap = {
			.max_send_wr = 4, .max_recv_wr = 4,
			.max_send_sge = 1, .max_recv_sge = 1,
		},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};

	cr_assert_eq(rdma_create_qp(id, NULL, &a), 0, "rdma_create_qp: %s",
		     strerror(errno));
	cr_assert_not_null(id->qp);
	cr_assert_not_null(id->send_cq, "CQs made for the id");
	cr_assert_not_null(id->recv_cq_channel);
}

/* cl (resolved, with a QP made for it if qp) connects with p; the
 * listener on sch gets the CONNECT_REQUEST. Returns the server's id. */
static struct rdma_cm_id *requested(struct rdma_event_channel *sch,
				    struct rdma_cm_id *cl,
				    struct rdma_conn_param *p, bool qp)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *sv;

	if (qp)
		make_qp(cl);
	cr_assert_eq(rdma_connect(cl, p), 0, "connect: %s", strerror(errno));
	ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	sv = ev->id;
	rdma_ack_cm_event(ev);
	return sv;
}

/* The listener l and both channels destroyed, the channels' other ids
 * already gone. */
static void close_listener(struct rdma_event_channel *sch,
			   struct rdma_event_channel *cch, struct rdma_cm_id *l)
{
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* Both ends of a connection (their QPs already destroyed), then the
 * listener and both channels. */
static void close_pair(struct rdma_event_channel *sch,
		       struct rdma_event_channel *cch, struct rdma_cm_id *l,
		       struct rdma_cm_id *cl, struct rdma_cm_id *sv)
{
	rdma_destroy_id(cl);
	rdma_destroy_id(sv);
	close_listener(sch, cch, l);
}

/* ---- plain API --------------------------------------------------------- */

Test(rdmacm, event_names)
{
	cr_assert_str_eq(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED),
			 "RDMA_CM_EVENT_ESTABLISHED");
	cr_assert_str_eq(rdma_event_str(RDMA_CM_EVENT_UNREACHABLE),
			 "RDMA_CM_EVENT_UNREACHABLE");
	cr_assert_str_eq(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT),
			 "RDMA_CM_EVENT_TIMEWAIT_EXIT");
	cr_assert_str_eq(rdma_event_str((enum rdma_cm_event_type)99),
			 "UNKNOWN EVENT");
}

Test(rdmacm, port_spaces)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;

	cr_assert_not_null(ch);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), -1);
	cr_assert_eq(errno, ENOSYS);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_IB), -1);
	cr_assert_eq(errno, ENOSYS);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)7),
		     -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(id->qp_type, IBV_QPT_RC);
	cr_assert_eq(rdma_resolve_route(id, 100), -1, "route before address");
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, devices)
{
	int n = -1;
	struct ibv_context **list = rdma_get_devices(&n);

	cr_assert_not_null(list);
	cr_assert_eq(n, 1);
	cr_assert_not_null(list[0]);
	cr_assert_null(list[1]);
	cr_assert_str_eq(ibv_get_device_name(list[0]->device), "wisp0");
	rdma_free_devices(list);
}

Test(rdmacm, set_option)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	uint8_t tos = 0x10;
	int v;

	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS,
				     &tos, sizeof(tos)), 0);
	v = 1;
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_CRC, &v,
				     sizeof(v)), 0);
	v = 3;
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_MPA_REV,
				     &v, sizeof(v)), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_CRC, &v,
				     1), -1, "optlen must be sizeof(int)");
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL, 77, &v,
				     sizeof(v)), -1);
	cr_assert_eq(errno, ENOSYS);
	cr_assert_eq(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH,
				     &v, sizeof(v)), -1);
	cr_assert_eq(errno, ENOSYS);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, bad_environment_fails_with_einval)
{
	struct rdma_event_channel *ch;

	/* Criterion runs each test in its own process: the library reads
	 * the environment here for the first time. */
	setenv("WISP_CRC", "yes", 1);
	errno = 0;
	cr_assert_null(rdma_create_event_channel());
	cr_assert_eq(errno, EINVAL);
	setenv("WISP_CRC", "1", 1);
	ch = rdma_create_event_channel();
	cr_assert_not_null(ch);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, nonblocking_channel)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;

	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	cr_assert_eq(rdma_get_cm_event(ch, &ev), -1);
	cr_assert_eq(errno, EAGAIN);
	rdma_destroy_event_channel(ch);
}

static atomic_bool waiter_returned;

static void on_usr1(int sig)
{
	(void)sig;
}

static void *channel_waiter(void *arg)
{
	struct rdma_cm_event *ev;

	rdma_get_cm_event(arg, &ev);
	atomic_store(&waiter_returned, true);
	return NULL;
}

/*
 * rping destroys its event channel while its CM thread still waits in
 * rdma_get_cm_event(). Over rdma-core that thread stays blocked in the
 * kernel's read() until the process ends. A signal then wakes wisp's
 * waiter (EINTR, or POLLNVAL on the closed descriptor): it must neither
 * touch the freed channel (ASan) nor return as if it had an event.
 */
Test(rdmacm, channel_destroyed_under_a_waiter)
{
	struct sigaction sa = { .sa_handler = on_usr1 };  /* no SA_RESTART */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	pthread_t t;

	cr_assert_not_null(ch);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	cr_assert_eq(pthread_create(&t, NULL, channel_waiter, ch), 0);
	usleep(50 * 1000);    /* where it waits does not matter: see above */
	rdma_destroy_event_channel(ch);
	for (int i = 0; i < 5; i++) {
		pthread_kill(t, SIGUSR1);
		usleep(20 * 1000);
	}
	cr_assert(!atomic_load(&waiter_returned),
		  "rdma_get_cm_event returned from a destroyed channel");
	pthread_detach(t);
}

/*
 * The other order, which crashed rping's client in 1 run of ~100 under
 * load (SIGBUS in rdma_get_cm_event): its CM thread is between two calls
 * when the main thread destroys the channel, and calls again afterwards.
 * That call must find a dead channel (not freed memory: ASan) and wait
 * like the waiter above, never return.
 */
Test(rdmacm, channel_destroyed_before_the_next_call)
{
	struct sigaction sa = { .sa_handler = on_usr1 };  /* no SA_RESTART */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	pthread_t t;

	cr_assert_not_null(ch);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	rdma_destroy_event_channel(ch);
	atomic_store(&waiter_returned, false);
	cr_assert_eq(pthread_create(&t, NULL, channel_waiter, ch), 0);
	for (int i = 0; i < 5; i++) {
		usleep(20 * 1000);
		pthread_kill(t, SIGUSR1);
	}
	cr_assert(!atomic_load(&waiter_returned),
		  "rdma_get_cm_event returned from a destroyed channel");
	pthread_detach(t);
}

Test(rdmacm, getaddrinfo)
{
	struct rdma_addrinfo hints = {
		.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST,
		.ai_port_space = RDMA_PS_TCP,
	};
	struct rdma_addrinfo *res;

	cr_assert_eq(rdma_getaddrinfo("::1", "7471", &hints, &res), 0);
	cr_assert_eq(res->ai_family, AF_INET6);
	cr_assert(res->ai_flags & RAI_PASSIVE);
	cr_assert_eq(res->ai_src_len, sizeof(struct sockaddr_in6));
	cr_assert_eq(res->ai_qp_type, IBV_QPT_RC);
	rdma_freeaddrinfo(res);
	hints.ai_flags = RAI_NUMERICHOST;
	cr_assert_eq(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
	cr_assert_eq(res->ai_dst_len, sizeof(struct sockaddr_in));
	cr_assert_null(res->ai_src_addr);
	rdma_freeaddrinfo(res);
	cr_assert_neq(rdma_getaddrinfo("not an address", "1", &hints, &res),
		      0);
}

/* ---- connections ----------------------------------------------------- */

struct conn_cfg {
	int family;
	int rev;
	int crc;
	int p2p;
	int rtr;
	/* 0: "hello" and "welcome"; else this many octets of private data
	 * both ways (255, the most rdma_conn_param carries: each event
	 * holds exactly its private data, cm_internal.h wcm_event_size, and
	 * the ASan build aborts a free of the wrong size) */
	int pd_len;
};

static void send_recv(struct rdma_cm_id *from, struct rdma_cm_id *to)
{
	char out[32] = "over wisp", in[32] = "";
	struct ibv_mr *omr = rdma_reg_msgs(from, out, sizeof(out));
	struct ibv_mr *imr = rdma_reg_msgs(to, in, sizeof(in));
	struct ibv_wc wc;

	cr_assert(omr && imr);
	cr_assert_eq(rdma_post_recv(to, NULL, in, sizeof(in), imr), 0);
	cr_assert_eq(rdma_post_send(from, NULL, out, sizeof(out), omr,
				    IBV_SEND_SIGNALED), 0);
	cr_assert_eq(rdma_get_send_comp(from, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "send: %s",
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(rdma_get_recv_comp(to, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_str_eq(in, "over wisp");
	rdma_dereg_mr(omr);
	rdma_dereg_mr(imr);
}

static void run_connection(const struct conn_cfg *c)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	uint8_t req[255] = "hello", rep[255] = "welcome";
	struct rdma_conn_param cp = {
		.private_data = req, .private_data_len = 6,
		.responder_resources = 2, .initiator_depth = 3,
	};
	struct rdma_conn_param ap = {
		.private_data = rep, .private_data_len = 8,
		.responder_resources = 3, .initiator_depth = 2,
	};
	struct rdma_cm_id *l, *cl, *sv;
	struct rdma_cm_event *ev;
	uint16_t port;

	cr_assert(sch && cch);
	cr_assert(c->pd_len >= 0 && c->pd_len <= (int)sizeof(req));
	if (c->pd_len) {
		for (int i = 0; i < c->pd_len; i++) {
			req[i] = (uint8_t)(i * 7 + 1);
			rep[i] = (uint8_t)(255 - i);
		}
		cp.private_data_len = ap.private_data_len = (uint8_t)c->pd_len;
	}
	l = listener(sch, c->family, &port);
	cl = resolved(cch, c->family, port);
	cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL, WISP_OPT_MPA_REV,
				     (void *)&c->rev, sizeof(int)), 0);
	cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL, WISP_OPT_CRC,
				     (void *)&c->crc, sizeof(int)), 0);
	if (c->rev == 2)
		cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL,
					     WISP_OPT_P2P, (void *)&c->p2p,
					     sizeof(int)), 0);
	if (c->rtr)
		cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL,
					     WISP_OPT_RTR, (void *)&c->rtr,
					     sizeof(int)), 0);
	make_qp(cl);
	cr_assert_eq(rdma_connect(cl, &cp), 0, "connect: %s", strerror(errno));

	ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	sv = ev->id;
	cr_assert_eq(ev->listen_id, l);
	cr_assert_eq(ev->param.conn.private_data_len, cp.private_data_len);
	cr_assert_eq(memcmp(ev->param.conn.private_data, req,
			    cp.private_data_len), 0);
	/* RFC 6581 9.1 values of a rev 2 Request; nothing after rev 1. */
	cr_assert_eq(ev->param.conn.responder_resources, c->rev == 2 ? 3 : 0);
	cr_assert_eq(ev->param.conn.initiator_depth, c->rev == 2 ? 2 : 0);
	cr_assert_not_null(sv->verbs);
	cr_assert_eq(rdma_get_dst_port(sv), rdma_get_src_port(cl));
	rdma_ack_cm_event(ev);

	make_qp(sv);
	cr_assert_eq(rdma_accept(sv, &ap), 0, "accept: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED,
				       WAIT_MS));
	ev = expect_event(cch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	cr_assert_eq(ev->param.conn.private_data_len, ap.private_data_len);
	cr_assert_eq(memcmp(ev->param.conn.private_data, rep,
			    ap.private_data_len), 0);
	rdma_ack_cm_event(ev);

	send_recv(cl, sv);
	send_recv(sv, cl);

	cr_assert_eq(rdma_disconnect(cl), 0);
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	cr_assert_eq(rdma_disconnect(sv), 0, "after the peer: a no-op");

	rdma_destroy_qp(cl);
	rdma_destroy_qp(sv);
	cr_assert_eq(rdma_destroy_id(cl), 0);
	cr_assert_eq(rdma_destroy_id(sv), 0);
	cr_assert_eq(rdma_destroy_id(l), 0);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

ParameterizedTestParameters(rdmacm, connect_accept_disconnect)
{
	static struct conn_cfg cfgs[] = {
		{ AF_INET, 2, 0, 1, 0, 0 },
		{ AF_INET6, 2, 0, 1, 0, 0 },
		{ AF_INET, 2, 1, 1, WISP_RTR_PREFER_WRITE, 0 },
		{ AF_INET, 2, 0, 0, 0, 0 },
		{ AF_INET6, 2, 1, 0, 0, 0 },
		{ AF_INET, 1, 0, 0, 0, 0 },
		{ AF_INET6, 1, 1, 0, 0, 0 },
		{ AF_INET, 2, 1, 1, 0, 255 },
	};

	return cr_make_param_array(struct conn_cfg, cfgs,
				   sizeof(cfgs) / sizeof(cfgs[0]));
}

ParameterizedTest(struct conn_cfg *c, rdmacm, connect_accept_disconnect)
{
	cr_log_info("IPv%d, MPA rev %d, CRC %d, p2p %d, RTR %s, private "
		    "data %d", c->family == AF_INET ? 4 : 6, c->rev, c->crc,
		    c->p2p, c->rtr == WISP_RTR_PREFER_WRITE ? "write" :
		    "default", c->pd_len);
	run_connection(c);
}

static void refused(int family)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	socklen_t len;
	uint16_t port;
	int s;

	/* A port just closed: nobody listens there. */
	loopback(family, &ss, 0);
	s = socket(family, SOCK_STREAM, 0);
	cr_assert_eq(bind(s, (struct sockaddr *)&ss, sslen(&ss)), 0);
	len = sizeof(ss);
	getsockname(s, (struct sockaddr *)&ss, &len);
	port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
				       ((struct sockaddr_in6 *)&ss)->sin6_port);
	close(s);

	id = resolved(ch, family, port);
	make_qp(id);
	cr_assert_eq(rdma_connect(id, NULL), 0);
	ev = expect_event(ch, RDMA_CM_EVENT_UNREACHABLE, WAIT_MS);
	/* -ECONNREFUSED, not -ETIMEDOUT: the refusal was taken as it came
	 * (no bound on the time: a loaded machine decides that). */
	cr_assert_eq(ev->status, -ECONNREFUSED);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, refused_ipv4) { refused(AF_INET); }
Test(rdmacm, refused_ipv6) { refused(AF_INET6); }

Test(rdmacm, mpa_timeout_is_unreachable)
{
	/* A TCP listener that never speaks MPA: the kernel completes the
	 * handshake, no Reply ever comes. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	socklen_t len = sizeof(ss);
	int s, ms = 300;
	int64_t t0;

	loopback(AF_INET, &ss, 0);
	s = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(bind(s, (struct sockaddr *)&ss, sslen(&ss)), 0);
	cr_assert_eq(listen(s, 4), 0);
	getsockname(s, (struct sockaddr *)&ss, &len);

	id = resolved(ch, AF_INET, ntohs(((struct sockaddr_in *)&ss)->sin_port));
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL,
				     WISP_OPT_MPA_TIMEOUT_MS, &ms, sizeof(ms)),
		     0);
	make_qp(id);
	t0 = now_ms();
	cr_assert_eq(rdma_connect(id, NULL), 0);
	ev = expect_event(ch, RDMA_CM_EVENT_UNREACHABLE, WAIT_MS);
	cr_assert_eq(ev->status, -ETIMEDOUT);
	/* Not before the 300 ms asked for; and the option, not the 10 s
	 * default, ended the wait (a bound at half the default, so only a
	 * process stalled for seconds could fail it). */
	cr_assert_geq(now_ms() - t0, 250);
	cr_assert_lt(now_ms() - t0, 5000);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	close(s);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, reject_with_private_data)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *cl;
	struct rdma_cm_event *ev;
	uint16_t port;

	l = listener(sch, AF_INET, &port);
	cl = resolved(cch, AF_INET, port);
	make_qp(cl);
	cr_assert_eq(rdma_connect(cl, NULL), 0);
	ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	cr_assert_eq(rdma_reject(ev->id, "no thanks", 10), 0);
	cr_assert_eq(rdma_destroy_id(ev->id), 0);
	rdma_ack_cm_event(ev);

	ev = expect_event(cch, RDMA_CM_EVENT_REJECTED, WAIT_MS);
	cr_assert_eq(ev->status, -ECONNREFUSED);
	cr_assert_eq(ev->param.conn.private_data_len, 10);
	cr_assert_str_eq(ev->param.conn.private_data, "no thanks");
	rdma_ack_cm_event(ev);
	expect_no_event(sch, 100);
	rdma_destroy_qp(cl);
	rdma_destroy_id(cl);
	close_listener(sch, cch, l);
}

/* Server side of the synchronous test: reject the first request. */
static void *reject_first(void *arg)
{
	struct rdma_event_channel *ch = arg;
	struct rdma_cm_event *ev = expect_event(ch,
						RDMA_CM_EVENT_CONNECT_REQUEST,
						WAIT_MS);
	struct rdma_cm_id *id = ev->id;

	rdma_reject(id, NULL, 0);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	return NULL;
}

Test(rdmacm, rejected_sync_connect_is_econnrefused)
{
	/* rdma_create_ep makes an id without a channel of its own: its
	 * rdma_connect waits, and a rejection fails it with ECONNREFUSED
	 * (rdma-core's ucma_complete). */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_addrinfo hints = {
		.ai_flags = RAI_NUMERICHOST, .ai_port_space = RDMA_PS_TCP,
	};
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct rdma_addrinfo *res;
	struct rdma_cm_id *l, *cl;
	char port[8];
	uint16_t p;
	pthread_t t;

	l = listener(sch, AF_INET, &p);
	snprintf(port, sizeof(port), "%u", p);
	cr_assert_eq(rdma_getaddrinfo("127.0.0.1", port, &hints, &res), 0);
	cr_assert_eq(rdma_create_ep(&cl, res, NULL, &qa), 0, "create_ep: %s",
		     strerror(errno));
	rdma_freeaddrinfo(res);
	cr_assert_not_null(cl->qp);
	cr_assert_eq(pthread_create(&t, NULL, reject_first, sch), 0);
	errno = 0;
	cr_assert_eq(rdma_connect(cl, NULL), -1);
	cr_assert_eq(errno, ECONNREFUSED);
	pthread_join(t, NULL);
	rdma_destroy_ep(cl);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(sch);
}

/* ---- what a raw peer sees -------------------------------------------- */

static int raw_connect(int family, uint16_t port)
{
	struct sockaddr_storage ss;
	int s = socket(family, SOCK_STREAM, 0);

	loopback(family, &ss, port);
	cr_assert_eq(connect(s, (struct sockaddr *)&ss, sslen(&ss)), 0);
	return s;
}

/* A raw peer connected to loopback port that has sent req[0..len). */
static int raw_request(int family, uint16_t port, const uint8_t *req,
		       size_t len)
{
	int s = raw_connect(family, port);

	cr_assert_eq(write(s, req, len), (ssize_t)len);
	return s;
}

/* Read n octets within 2 s; returns what came (0 on EOF). */
static ssize_t raw_read(int s, uint8_t *buf, size_t n)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	size_t got = 0;

	while (got < n) {
		ssize_t r;

		cr_assert_eq(poll(&p, 1, 2000), 1, "peer silent");
		r = recv(s, buf + got, n - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

Test(rdmacm, markers_refused_by_mpa)
{
	/* M in a rev 1 Request with C: wisp cannot send markers; MPA
	 * answers with R set, C echoed, M clear, no event reaches the
	 * application (RFC 5044 7.1.1). */
	static const uint8_t req[] = { KEY_REQ, 0xc0, 0x01, 0x00, 0x00 };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l;
	uint8_t rep[64];
	uint16_t port;
	int s;

	l = listener(ch, AF_INET, &port);
	s = raw_request(AF_INET, port, req, sizeof(req));
	cr_assert_eq(raw_read(s, rep, 20), 20);
	cr_assert_eq(memcmp(rep, KEY_REP, 16), 0);
	cr_assert_eq(rep[16], 0x60, "C and R, no M: 0x%02x", rep[16]);
	cr_assert_eq(rep[17], 1);
	cr_assert_eq(rep[18] << 8 | rep[19], 0);
	cr_assert_eq(raw_read(s, rep, 1), 0, "closed after the reject");
	expect_no_event(ch, 200);
	close(s);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, non_mpa_peer_closed)
{
	/* RFC 5044 7.1.2 rule 5: a wrong key closes the connection. */
	static const char http[] = "GET / HTTP/1.0\r\n\r\n";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l;
	uint8_t rep[8];
	uint16_t port;
	int s;

	l = listener(ch, AF_INET6, &port);
	s = raw_connect(AF_INET6, port);
	cr_assert_eq(write(s, http, sizeof(http) - 1), (ssize_t)sizeof(http) - 1);
	cr_assert_eq(raw_read(s, rep, 1), 0);
	expect_no_event(ch, 200);
	close(s);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, rev1_request_and_reject_reply)
{
	/* A rev 1 Request: CONNECT_REQUEST proposes IRD = ORD = 0 (nothing
	 * was advertised); the Reject comes back in rev 1 with the private
	 * data. */
	static const uint8_t req[] = {
		KEY_REQ, 0x00, 0x01, 0x00, 0x03, 'a', 'b', 'c',
	};
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *c;
	uint8_t rep[64];
	uint16_t port;
	int s;

	l = listener(ch, AF_INET, &port);
	s = raw_request(AF_INET, port, req, sizeof(req));
	ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	c = ev->id;
	cr_assert_eq(ev->param.conn.private_data_len, 3);
	cr_assert_eq(memcmp(ev->param.conn.private_data, "abc", 3), 0);
	cr_assert_eq(ev->param.conn.responder_resources, 0);
	cr_assert_eq(ev->param.conn.initiator_depth, 0);
	rdma_ack_cm_event(ev);
	cr_assert_eq(rdma_reject(c, "nope", 4), 0);
	cr_assert_eq(raw_read(s, rep, 24), 24);
	cr_assert_eq(memcmp(rep, KEY_REP, 16), 0);
	cr_assert_eq(rep[16], 0x20);
	cr_assert_eq(rep[17], 1);
	cr_assert_eq(rep[19], 4);
	cr_assert_eq(memcmp(rep + 20, "nope", 4), 0);
	close(s);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

/* ---- wisp's large-FPDU extension (docs/wire-formats.md) ------------- */

#define EXT_V1(hi, lo) hi, lo, 0, 0, 1, 0, 0, 16, \
		'W', 'I', 'S', 'P', '-', 'E', 'X', 'T'

/*
 * A peer that speaks like wisp: its Request ends with the extension. The
 * application sees its private data without it; the Reply carries wisp's
 * own extension after the application's data, unless WISP_BIG_FPDU=off.
 */
static void ext_request_answered(const char *setting, bool answered)
{
	static const uint8_t req[] = {
		KEY_REQ, 0x10, 0x02, 0x00, 4 + 3 + 16,
		0x00, 0x01, 0x00, 0x01, 'a', 'b', 'c', EXT_V1(0xff, 0xff),
	};
	static const uint8_t ext[] = { EXT_V1(0xff, 0xff) };
	struct rdma_conn_param cp = {
		.responder_resources = 1, .initiator_depth = 1,
		.private_data = "welcome", .private_data_len = 8,
	};
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *c;
	uint8_t rep[64];
	size_t pd = 4 + 8 + (answered ? 16 : 0);
	uint16_t port;
	int s;

	if (setting)
		setenv("WISP_BIG_FPDU", setting, 1);
	ch = rdma_create_event_channel();
	cr_assert_not_null(ch);
	l = listener(ch, AF_INET, &port);
	s = raw_request(AF_INET, port, req, sizeof(req));
	ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	c = ev->id;
	cr_assert_eq(ev->param.conn.private_data_len, 3,
		     "the extension is not the application's");
	cr_assert_eq(memcmp(ev->param.conn.private_data, "abc", 3), 0);
	rdma_ack_cm_event(ev);
	make_qp(c);
	cr_assert_eq(rdma_accept(c, &cp), 0);
	cr_assert_eq(raw_read(s, rep, 20 + pd), (ssize_t)(20 + pd));
	cr_assert_eq(memcmp(rep, KEY_REP, 16), 0);
	cr_assert_eq(rep[18] << 8 | rep[19], (int)pd);
	cr_assert_eq(memcmp(rep + 24, "welcome", 8), 0);
	if (answered)
		cr_assert_eq(memcmp(rep + 32, ext, sizeof(ext)), 0);
	close(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, big_fpdu_request_answered)
{
	ext_request_answered(NULL, true);
}

Test(rdmacm, big_fpdu_off_request_stripped_not_answered)
{
	ext_request_answered("off", false);
}

Test(rdmacm, big_fpdu_bad_value_fails_with_einval)
{
	setenv("WISP_BIG_FPDU", "yes", 1);
	errno = 0;
	cr_assert_null(rdma_create_event_channel());
	cr_assert_eq(errno, EINVAL);
}

/* A third-party responder (a raw socket here, siw in tests/interop): it
 * sees the extension as the last 16 octets of the Request's private data,
 * after the application's; its Reject carries none, and the application
 * gets the Reject's private data as sent. */
static void *third_party_rejects(void *arg)
{
	static const uint8_t rej[] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ',
		'F', 'r', 'a', 'm', 'e', 0x30, 0x02, 0x00, 4 + 4,
		0x00, 0x01, 0x00, 0x01, 'n', 'o', 'p', 'e',
	};
	static const uint8_t ext[] = { EXT_V1(0xff, 0xff) };
	int l = *(int *)arg, s;
	uint8_t req[20 + 4 + 5 + 16];
	bool ok;

	s = accept(l, NULL, NULL);
	if (s < 0)
		return (void *)"accept";
	ok = raw_read(s, req, sizeof(req)) == (ssize_t)sizeof(req) &&
	     (req[18] << 8 | req[19]) == 4 + 5 + 16 &&
	     !memcmp(req + 24, "hello", 5) &&
	     !memcmp(req + 29, ext, sizeof(ext));
	if (write(s, rej, sizeof(rej)) != (ssize_t)sizeof(rej))
		ok = false;
	usleep(100 * 1000);
	close(s);
	return ok ? NULL : (void *)"Request without the trailing extension";
}

Test(rdmacm, big_fpdu_offer_is_trailing_private_data)
{
	struct rdma_conn_param cp = {
		.responder_resources = 1, .initiator_depth = 1,
		.private_data = "hello", .private_data_len = 5,
	};
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *cl;
	socklen_t len = sizeof(ss);
	pthread_t th;
	void *why;
	int l;

	loopback(AF_INET, &ss, 0);
	l = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(bind(l, (struct sockaddr *)&ss, sslen(&ss)), 0);
	cr_assert_eq(listen(l, 1), 0);
	cr_assert_eq(getsockname(l, (struct sockaddr *)&ss, &len), 0);
	cr_assert_eq(pthread_create(&th, NULL, third_party_rejects, &l), 0);
	cl = resolved(ch, AF_INET, ntohs(((struct sockaddr_in *)&ss)->sin_port));
	make_qp(cl);
	cr_assert_eq(rdma_connect(cl, &cp), 0);
	ev = expect_event(ch, RDMA_CM_EVENT_REJECTED, WAIT_MS);
	cr_assert_eq(ev->param.conn.private_data_len, 4);
	cr_assert_eq(memcmp(ev->param.conn.private_data, "nope", 4), 0);
	rdma_ack_cm_event(ev);
	pthread_join(th, &why);
	cr_assert_null(why, "third party: %s", (const char *)why);
	close(l);
	rdma_destroy_qp(cl);
	rdma_destroy_id(cl);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, rev2_request_values_clamped)
{
	/* IRD 200, ORD 5 in the Request: the application is offered ORD
	 * min(200, 128) and IRD 5. */
	static const uint8_t req[] = {
		KEY_REQ, 0x10, 0x02, 0x00, 0x04, 0x00, 0xc8, 0x00, 0x05,
	};
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l;
	uint16_t port;
	int s;

	l = listener(ch, AF_INET, &port);
	s = raw_request(AF_INET, port, req, sizeof(req));
	ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	cr_assert_eq(ev->param.conn.responder_resources, 5);
	cr_assert_eq(ev->param.conn.initiator_depth, 128);
	cr_assert_eq(ev->param.conn.private_data_len, 0);
	rdma_destroy_id(ev->id);
	rdma_ack_cm_event(ev);
	close(s);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, destroy_listener_with_pending_work)
{
	/* One peer connected but silent (a request thread waits on it), one
	 * Request queued and never fetched: destroying the listener must
	 * neither hang nor leak the queued id. */
	static const uint8_t req[] = { KEY_REQ, 0x00, 0x01, 0x00, 0x00 };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct pollfd p;
	struct rdma_cm_id *l;
	uint16_t port;
	uint8_t b;
	int quiet, talker;
	int64_t t0;

	l = listener(ch, AF_INET, &port);
	quiet = raw_connect(AF_INET, port);
	talker = raw_request(AF_INET, port, req, sizeof(req));
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	cr_assert_eq(poll(&p, 1, WAIT_MS), 1);
	t0 = now_ms();
	cr_assert_eq(rdma_destroy_id(l), 0);
	/* Did not wait out the silent peer's MPA timeout (10 s): a bound at
	 * half of it, which only a process stalled for seconds could miss. */
	cr_assert_lt(now_ms() - t0, 5000);
	cr_assert_eq(raw_read(talker, &b, 1), 0, "queued id's socket closed");
	cr_assert_eq(raw_read(quiet, &b, 1), 0, "pending socket closed");
	close(quiet);
	close(talker);
	rdma_destroy_event_channel(ch);
}

struct late_ack {
	struct rdma_cm_event *ev;
	int64_t acked_at;
};

static void *ack_later(void *arg)
{
	struct late_ack *a = arg;

	usleep(200 * 1000);
	a->acked_at = now_ms();
	rdma_ack_cm_event(a->ev);
	return NULL;
}

Test(rdmacm, destroy_id_waits_for_acks)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage dst;
	struct late_ack a = { 0 };
	struct rdma_cm_id *id;
	pthread_t t;

	loopback(AF_INET, &dst, 9);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst,
				       100), 0);
	a.ev = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, WAIT_MS);
	cr_assert_eq(pthread_create(&t, NULL, ack_later, &a), 0);
	cr_assert_eq(rdma_destroy_id(id), 0);
	cr_assert_neq(a.acked_at, 0, "destroy returned before the ack");
	pthread_join(t, NULL);
	rdma_destroy_event_channel(ch);
}

/* Connect two ids on loopback; returns the server-side id. */
static struct rdma_cm_id *pair_up(struct rdma_event_channel *sch,
				  struct rdma_event_channel *cch,
				  struct rdma_cm_id **l, struct rdma_cm_id **cl,
				  bool qps)
{
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1 };
	struct rdma_cm_id *sv;
	uint16_t port;

	*l = listener(sch, AF_INET, &port);
	*cl = resolved(cch, AF_INET, port);
	sv = requested(sch, *cl, &p, qps);
	if (qps)
		make_qp(sv);
	cr_assert_eq(rdma_accept(sv, &p), 0, "accept: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	return sv;
}

Test(rdmacm, connection_without_qp_is_cm_only)
{
	/* No QP and no QP number: the CM still connects (events only) and
	 * the close of either side reaches the other. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *cl, *sv;

	sv = pair_up(sch, cch, &l, &cl, false);
	cr_assert_eq(rdma_disconnect(sv), 0);
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	close_pair(sch, cch, l, cl, sv);
}

Test(rdmacm, qp_number_without_qp_is_refused)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = { .qp_num = 42 };
	struct rdma_cm_id *id;

	id = resolved(ch, AF_INET, 9);
	cr_assert_eq(rdma_connect(id, &p), -1);
	cr_assert_eq(errno, EINVAL);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, destroy_qp_while_connected_disconnects)
{
	/* Tearing the QP down ends its stream: both ids hear of it. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *cl, *sv;

	sv = pair_up(sch, cch, &l, &cl, true);
	rdma_destroy_qp(cl);
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_destroy_qp(sv);
	close_pair(sch, cch, l, cl, sv);
}

Test(rdmacm, destroy_ids_while_connected)
{
	/* No disconnect, no QP teardown by the application first: destroy
	 * the ids and the QPs in the "wrong" order without hanging. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *cl, *sv, saved[2];

	sv = pair_up(sch, cch, &l, &cl, true);
	saved[0] = *cl;
	saved[1] = *sv;
	cr_assert_eq(rdma_destroy_id(l), 0);
	cr_assert_eq(rdma_destroy_id(sv), 0);
	cr_assert_eq(rdma_destroy_id(cl), 0);
	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(saved[i].qp);
		ibv_destroy_cq(saved[i].send_cq);
		ibv_destroy_cq(saved[i].recv_cq);
		ibv_destroy_comp_channel(saved[i].send_cq_channel);
		ibv_destroy_comp_channel(saved[i].recv_cq_channel);
	}
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

Test(rdmacm, no_common_rtr_is_connect_error)
{
	/* The initiator offers only the READ RTR, the responder takes only
	 * WRITE and names it (RFC 6581 9.2): the initiator cannot send it,
	 * sends a Terminate (code 7) and reports CONNECT_ERROR; the
	 * responder's stream ends. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *cl, *sv;
	struct rdma_cm_event *ev;
	int rd = WISP_RTR_PREFER_READ, wr = WISP_RTR_PREFER_WRITE;
	uint16_t port;

	l = listener(sch, AF_INET, &port);
	cr_assert_eq(rdma_set_option(l, WISP_OPTION_LEVEL, WISP_OPT_RTR, &wr,
				     sizeof(wr)), 0);
	cl = resolved(cch, AF_INET, port);
	cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL, WISP_OPT_RTR, &rd,
				     sizeof(rd)), 0);
	sv = requested(sch, cl, NULL, true);
	make_qp(sv);
	cr_assert_eq(rdma_accept(sv, NULL), 0);
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	ev = expect_event(cch, RDMA_CM_EVENT_CONNECT_ERROR, WAIT_MS);
	cr_assert_eq(ev->status, -EPROTO);
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_destroy_qp(cl);
	rdma_destroy_qp(sv);
	close_pair(sch, cch, l, cl, sv);
}

/* ---- hardening: pending handshakes, backlog, IRD in force ------------- */

/* Entries of a /proc directory, less the one descriptor reading it
 * takes when it is our own fd directory (fd_dir). */
static int count_dir(const char *path, bool fd_dir)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d, "%s: %s", path, strerror(errno));
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return fd_dir ? n - 1 : n;
}

/* Our threads but the memory pool's helper ("wisp-mem", mem/wisp_mem.c),
 * which populates an arena and ends, whenever the pool runs low: it
 * comes and goes with allocations, not with connections. */
static int threads_but_pool(void)
{
	return proc_threads("wisp-mem").others;
}

/* Our threads (threads_but_pool), once two readings 20 ms apart agree.
 * A new thread bears its creator's name until it names itself, so a
 * pool helper caught in that moment counts in one reading, never in
 * two; nor does one that ends between them. */
static int self_threads(void)
{
	int n = threads_but_pool(), again;

	for (int i = 0; i < 100; i++, n = again) {
		poll(NULL, 0, 20);
		again = threads_but_pool();
		if (again == n)
			break;
	}
	return n;
}

static int self_fds(void)
{
	return count_dir("/proc/self/fd", true);
}

/* Wait up to ms for threads and fds to come back to want_t / want_f. */
static bool settles_at(int want_t, int want_f, int ms)
{
	int64_t end = now_ms() + ms;

	do {
		if (self_threads() == want_t && self_fds() == want_f)
			return true;
		poll(NULL, 0, 50);
	} while (now_ms() < end);
	return false;
}

/* A TCP connection to 127.0.0.1:port from 127.0.0.<host>, or -1 if the
 * listener's kernel queue refused it. */
static int raw_connect_from(int host, uint16_t port)
{
	struct sockaddr_in src = { .sin_family = AF_INET };
	struct sockaddr_in dst = { .sin_family = AF_INET };
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(s, 0);
	src.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)host);
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	dst.sin_port = htons(port);
	cr_assert_eq(bind(s, (struct sockaddr *)&src, sizeof(src)), 0,
		     "bind 127.0.0.%d: %s", host, strerror(errno));
	if (connect(s, (struct sockaddr *)&dst, sizeof(dst))) {
		close(s);
		return -1;
	}
	return s;
}

/* Connect cl to the listener on sch, accept, both ESTABLISHED; returns
 * the server's id. */
static struct rdma_cm_id *connect_one(struct rdma_event_channel *sch,
				      struct rdma_event_channel *cch,
				      struct rdma_cm_id *cl)
{
	struct rdma_cm_id *sv;

	sv = requested(sch, cl, NULL, true);
	make_qp(sv);
	cr_assert_eq(rdma_accept(sv, NULL), 0, "accept: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED,
				       WAIT_MS));
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED,
				       WAIT_MS));
	return sv;
}

static void tear_down(struct rdma_event_channel *sch,
		      struct rdma_event_channel *cch, struct rdma_cm_id *cl,
		      struct rdma_cm_id *sv)
{
	cr_assert_eq(rdma_disconnect(cl), 0);
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_destroy_qp(cl);
	rdma_destroy_qp(sv);
	cr_assert_eq(rdma_destroy_id(cl), 0);
	cr_assert_eq(rdma_destroy_id(sv), 0);
}

#define SLOW_CONNS 300
#define SLOW_HOSTS 10          /* from 127.0.0.10 .. 127.0.0.19 */

struct drip {
	int *fds;
	int n;
	int stop;                 /* atomic: the test sets it, the thread reads */
};

/* One octet of a Request key per second on every other connection (the
 * rest stay silent: TCP connected, no MPA Request). */
static void *drip_thread(void *arg)
{
	static const uint8_t key[] = { KEY_REQ };
	struct drip *d = arg;

	for (int i = 0; !__atomic_load_n(&d->stop, __ATOMIC_RELAXED) &&
	     i < (int)sizeof(key); i++) {
		for (int k = 0; k < d->n; k += 2)
			if (d->fds[k] >= 0)
				send(d->fds[k], &key[i], 1,
				     MSG_NOSIGNAL | MSG_DONTWAIT);
		for (int t = 0;
		     t < 20 && !__atomic_load_n(&d->stop, __ATOMIC_RELAXED); t++)
			poll(NULL, 0, 50);
	}
	return NULL;
}

Test(rdmacm, slow_handshakes_do_not_starve_clients, .timeout = 60)
{
	static int fds[SLOW_CONNS];
	struct rdma_event_channel *sch, *cch;
	struct drip d = { .fds = fds, .n = SLOW_CONNS };
	struct rdma_cm_id *l, *cl, *sv;
	int base_t, base_f, t, f, opened = 0;
	int64_t t0, took;
	pthread_t drip;
	uint16_t port;

	/* At most 16 handshakes per source address and 64 in all. */
	setenv("WISP_MPA_MAX_PENDING", "64", 1);
	setenv("WISP_MPA_MAX_PENDING_PER_ADDR", "16", 1);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	cr_assert(sch && cch);
	l = listener(sch, AF_INET, &port);

	/* One connection first, so that the engine thread and whatever the
	 * device keeps open are in the baseline. */
	cl = resolved(cch, AF_INET, port);
	sv = connect_one(sch, cch, cl);
	tear_down(sch, cch, cl, sv);
	poll(NULL, 0, 200);
	base_t = self_threads();
	base_f = self_fds();

	for (int i = 0; i < SLOW_CONNS; i++) {
		fds[i] = raw_connect_from(10 + i % SLOW_HOSTS, port);
		opened += fds[i] >= 0;
	}
	cr_assert_geq(opened, SLOW_CONNS * 9 / 10, "only %d connected",
		      opened);
	cr_assert_eq(pthread_create(&drip, NULL, drip_thread, &d), 0);
	poll(NULL, 0, 500);

	/* No thread per pending handshake, and no more sockets held than
	 * the bounds allow (ours: opened; the listener's: at most 64). */
	t = self_threads();
	f = self_fds();
	cr_log_info("baseline %d threads %d fds; held: %d threads %d fds",
		    base_t, base_f, t, f);
	cr_assert_leq(t, base_t + 1, "threads %d, baseline %d", t, base_t);
	cr_assert_leq(f, base_f + opened + 64, "fds %d, baseline %d + %d",
		      f, base_f, opened);

	/* A real client from 127.0.0.1 still gets in at once. */
	t0 = now_ms();
	cl = resolved(cch, AF_INET, port);
	sv = connect_one(sch, cch, cl);
	took = now_ms() - t0;
	/* Not queued behind the slow ones, which hold their slots for the
	 * 10 s MPA timeout: a bound at half of it (scheduling on a loaded
	 * machine can add a second, not five). */
	cr_assert_lt(took, 5000, "connecting took %lld ms", (long long)took);
	send_recv(cl, sv);
	tear_down(sch, cch, cl, sv);

	__atomic_store_n(&d.stop, 1, __ATOMIC_RELAXED);
	pthread_join(drip, NULL);
	for (int i = 0; i < SLOW_CONNS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	cr_assert(settles_at(base_t, base_f, 5000),
		  "back to %d threads %d fds? now %d, %d", base_t, base_f,
		  self_threads(), self_fds());
	cr_assert_eq(rdma_destroy_id(l), 0);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* The next event of ch is a CONNECT_REQUEST; its id is destroyed
 * (the Request refused). */
static void drop_request(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = expect_event(ch,
						RDMA_CM_EVENT_CONNECT_REQUEST,
						WAIT_MS);

	rdma_destroy_id(ev->id);
	rdma_ack_cm_event(ev);
}

/* The raw peers s[0..n) closed, then the listener l and its channel. */
static void close_raw_listener(int *s, int n, struct rdma_event_channel *ch,
			       struct rdma_cm_id *l)
{
	for (int i = 0; i < n; i++)
		close(s[i]);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, listen_backlog_bounds_queued_requests)
{
	/* rdma_listen(id, 2): two CONNECT_REQUESTs wait for the
	 * application, a third Request is refused by MPA with R set (as the
	 * kernel's iWARP CM when its backlog is full); once one is taken,
	 * there is room again. */
	static const uint8_t req[] = { KEY_REQ, 0x00, 0x01, 0x00, 0x00 };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l;
	uint8_t rep[20];
	int s[4];
	uint16_t port;

	l = listener_backlog(ch, AF_INET, 2, &port);
	for (int i = 0; i < 3; i++) {
		s[i] = raw_request(AF_INET, port, req, sizeof(req));
		poll(NULL, 0, 100);
	}
	cr_assert_eq(raw_read(s[2], rep, sizeof(rep)), (ssize_t)sizeof(rep),
		     "the third Request is answered");
	cr_assert_eq(memcmp(rep, KEY_REP, 16), 0);
	cr_assert_eq(rep[16] & 0x20, 0x20, "with R set");

	drop_request(ch);
	s[3] = raw_request(AF_INET, port, req, sizeof(req));
	drop_request(ch);
	drop_request(ch);
	expect_no_event(ch, 200);
	close_raw_listener(s, 4, ch, l);
}

Test(rdmacm, listen_backlog_zero_is_the_default)
{
	/* As rdma-core (the kernel's ucma_listen): 0 or less means the
	 * default, here WISP_CM_MAX_BACKLOG; 3 Requests then all wait. */
	static const uint8_t req[] = { KEY_REQ, 0x00, 0x01, 0x00, 0x00 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *l;
	uint16_t port;
	int s[4];

	setenv("WISP_CM_MAX_BACKLOG", "3", 1);
	ch = rdma_create_event_channel();
	cr_assert_not_null(ch);
	l = listener_backlog(ch, AF_INET, 0, &port);
	for (int i = 0; i < 4; i++) {
		s[i] = raw_request(AF_INET, port, req, sizeof(req));
		poll(NULL, 0, 100);
	}
	for (int i = 0; i < 3; i++)
		drop_request(ch);
	expect_no_event(ch, 200);
	close_raw_listener(s, 4, ch, l);
}

Test(rdmacm, pending_limits_environment_is_strict)
{
	static const char *const vars[] = {
		"WISP_MPA_MAX_PENDING", "WISP_MPA_MAX_PENDING_PER_ADDR",
		"WISP_CM_MAX_BACKLOG",
	};
	static const char *const bad[] = { "0", "-1", "12x", "", "65537" };

	for (size_t v = 0; v < sizeof(vars) / sizeof(vars[0]); v++) {
		for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
			pid_t pid = fork();
			int st;

			cr_assert_geq(pid, 0);
			if (!pid) {
				/* A fresh library in a child each time. */
				setenv(vars[v], bad[b], 1);
				_exit(rdma_create_event_channel() ? 1 :
				      errno == EINVAL ? 0 : 2);
			}
			cr_assert_eq(waitpid(pid, &st, 0), pid);
			cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
				  "%s=\"%s\" accepted", vars[v], bad[b]);
		}
	}
}

Test(rdmacm, rev1_established_reports_ird_in_force)
{
	/* A rev 1 connection negotiates no IRD/ORD: accepted without a
	 * conn_param, it runs with the QP's own limits (at least 1), and
	 * ESTABLISHED says so rather than 0. An RDMA Read then works. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = {
		.responder_resources = 1, .initiator_depth = 1,
	};
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr qa;
	struct rdma_cm_id *l, *cl, *sv;
	struct rdma_cm_event *ev;
	char src[16] = "read me", dst[16] = "";
	struct ibv_mr *smr, *dmr;
	struct ibv_wc wc;
	int rev = 1;
	uint16_t port;

	l = listener(sch, AF_INET, &port);
	cl = resolved(cch, AF_INET, port);
	cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL, WISP_OPT_MPA_REV,
				     &rev, sizeof(rev)), 0);
	make_qp(cl);
	cr_assert_eq(rdma_connect(cl, &cp), 0);
	ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	sv = ev->id;
	cr_assert_eq(ev->param.conn.responder_resources, 0, "nothing offered");
	rdma_ack_cm_event(ev);
	make_qp(sv);
	cr_assert_eq(ibv_query_qp(sv->qp, &qa, IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MAX_QP_RD_ATOMIC, &init), 0);
	cr_assert_eq(rdma_accept(sv, NULL), 0);
	ev = expect_event(sch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	cr_assert_geq(ev->param.conn.responder_resources, 1);
	cr_assert_eq(ev->param.conn.responder_resources,
		     qa.max_dest_rd_atomic ? qa.max_dest_rd_atomic : 1);
	cr_assert_eq(ev->param.conn.initiator_depth,
		     qa.max_rd_atomic ? qa.max_rd_atomic : 1);
	rdma_ack_cm_event(ev);
	ev = expect_event(cch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	cr_assert_eq(ev->param.conn.responder_resources, 1);
	cr_assert_eq(ev->param.conn.initiator_depth, 1);
	rdma_ack_cm_event(ev);

	smr = rdma_reg_read(sv, src, sizeof(src));
	dmr = rdma_reg_msgs(cl, dst, sizeof(dst));
	cr_assert(smr && dmr);
	cr_assert_eq(rdma_post_read(cl, NULL, dst, sizeof(src), dmr,
				    IBV_SEND_SIGNALED, (uintptr_t)src,
				    smr->rkey), 0);
	cr_assert_eq(rdma_get_send_comp(cl, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "read: %s",
		     ibv_wc_status_str(wc.status));
	cr_assert_str_eq(dst, "read me");
	rdma_dereg_mr(smr);
	rdma_dereg_mr(dmr);
	tear_down(sch, cch, cl, sv);
	close_listener(sch, cch, l);
}

/*
 * RFC 5044 7.1.2, rule 4: the MPA Responder "MUST receive and validate
 * at least one FPDU before sending any FPDUs", in the client-server model
 * too (MPA rev 1, or rev 2 without peer-to-peer). A server that posts a
 * SEND right after ESTABLISHED therefore waits for the client: its SEND
 * neither arrives nor completes while the client is silent, and goes out
 * as soon as the client's first message arrives.
 */
static void responder_waits_for_client(int rev)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .responder_resources = 1,
				      .initiator_depth = 1 };
	char s_out[16] = "server first", s_in[16] = "";
	char c_out[16] = "client", c_in[16] = "";
	struct ibv_mr *s_omr, *s_imr, *c_omr, *c_imr;
	struct rdma_cm_id *l, *cl, *sv;
	struct ibv_wc wc;
	int p2p = 0;
	uint16_t port;

	l = listener(sch, AF_INET, &port);
	cl = resolved(cch, AF_INET, port);
	cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL, WISP_OPT_MPA_REV,
				     &rev, sizeof(rev)), 0);
	if (rev == 2)
		cr_assert_eq(rdma_set_option(cl, WISP_OPTION_LEVEL,
					     WISP_OPT_P2P, &p2p, sizeof(p2p)),
			     0);
	sv = requested(sch, cl, &cp, true);
	make_qp(sv);
	s_omr = rdma_reg_msgs(sv, s_out, sizeof(s_out));
	s_imr = rdma_reg_msgs(sv, s_in, sizeof(s_in));
	c_omr = rdma_reg_msgs(cl, c_out, sizeof(c_out));
	c_imr = rdma_reg_msgs(cl, c_in, sizeof(c_in));
	cr_assert(s_omr && s_imr && c_omr && c_imr);
	cr_assert_eq(rdma_post_recv(sv, NULL, s_in, sizeof(s_in), s_imr), 0);
	cr_assert_eq(rdma_accept(sv, &cp), 0);
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED,
				       WAIT_MS));
	/* The server sends at once. */
	cr_assert_eq(rdma_post_send(sv, NULL, s_out, sizeof(s_out), s_omr,
				    IBV_SEND_SIGNALED), 0);
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED,
				       WAIT_MS));
	cr_assert_eq(rdma_post_recv(cl, NULL, c_in, sizeof(c_in), c_imr), 0);
	/* The client stays silent for 200 ms: nothing arrives, the server's
	 * SEND is still outstanding. */
	usleep(200 * 1000);
	cr_assert_eq(ibv_poll_cq(cl->recv_cq, 1, &wc), 0,
		     "the server's SEND arrived before the client sent");
	cr_assert_eq(ibv_poll_cq(sv->send_cq, 1, &wc), 0,
		     "the server's SEND completed before the client sent");
	/* The client speaks: both messages arrive. */
	cr_assert_eq(rdma_post_send(cl, NULL, c_out, sizeof(c_out), c_omr,
				    IBV_SEND_SIGNALED), 0);
	cr_assert_eq(rdma_get_recv_comp(sv, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_str_eq(s_in, "client");
	cr_assert_eq(rdma_get_recv_comp(cl, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_str_eq(c_in, "server first");
	cr_assert_eq(rdma_get_send_comp(sv, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_eq(rdma_get_send_comp(cl, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	rdma_dereg_mr(s_omr);
	rdma_dereg_mr(s_imr);
	rdma_dereg_mr(c_omr);
	rdma_dereg_mr(c_imr);
	tear_down(sch, cch, cl, sv);
	close_listener(sch, cch, l);
}

Test(rdmacm, client_server_responder_waits_for_client_rev2)
{
	responder_waits_for_client(2);
}

Test(rdmacm, client_server_responder_waits_for_client_rev1)
{
	responder_waits_for_client(1);
}

Test(rdmacm, destroy_qp_while_connecting)
{
	/* ucmatose and others tear every connection down as soon as one
	 * fails, while the others are still connecting. The QP destroyed
	 * while the id waits for the MPA Reply is never attached to: the
	 * connection fails with CONNECT_ERROR instead of using freed
	 * memory, and the passive side learns of the close. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *cl, *sv;
	uint16_t port;

	l = listener(sch, AF_INET, &port);
	cl = resolved(cch, AF_INET, port);
	sv = requested(sch, cl, &p, true);
	/* The Request is here, so the active side is reading the Reply. */
	rdma_destroy_qp(cl);
	cr_assert_null(cl->qp);
	make_qp(sv);
	cr_assert_eq(rdma_accept(sv, &p), 0, "accept: %s", strerror(errno));
	ev = expect_event(cch, RDMA_CM_EVENT_CONNECT_ERROR, WAIT_MS);
	cr_expect_eq(ev->status, -ECANCELED);
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED,
				       WAIT_MS));
	rdma_destroy_qp(sv);
	close_pair(sch, cch, l, cl, sv);
}

#define MANY 200
#define BURST_MAX 300

/* The next event of either channel within WAIT_MS. */
static struct rdma_cm_event *next_of_two(struct rdma_event_channel *a,
					 struct rdma_event_channel *b,
					 bool *from_a)
{
	struct pollfd p[2] = {
		{ .fd = a->fd, .events = POLLIN },
		{ .fd = b->fd, .events = POLLIN },
	};
	struct rdma_cm_event *ev;

	cr_assert_gt(poll(p, 2, WAIT_MS), 0, "no event within %d ms",
		     WAIT_MS);
	*from_a = p[0].revents != 0;
	cr_assert_eq(rdma_get_cm_event(*from_a ? a : b, &ev), 0);
	return ev;
}

/*
 * A server (rdma_listen with backlog) accepts n connections that one
 * client host opens at once, and then waits for the client to
 * disconnect every one: each connection is accepted (none refused while
 * its Request is already on its way) and each DISCONNECTED reaches the
 * server.
 */
static void burst(int n, int backlog)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1 };
	static struct rdma_cm_id *cl[BURST_MAX], *sv[BURST_MAX];
	int s_est = 0, c_est = 0, s_disc = 0, c_disc = 0, nsv = 0;
	struct rdma_cm_id *l;
	uint16_t port;

	cr_assert_leq(n, BURST_MAX);
	l = listener_backlog(sch, AF_INET, backlog, &port);
	for (int i = 0; i < n; i++) {
		cl[i] = resolved(cch, AF_INET, port);
		make_qp(cl[i]);
	}
	for (int i = 0; i < n; i++)
		cr_assert_eq(rdma_connect(cl[i], &p), 0);
	while (s_est < n || c_est < n) {
		bool srv;
		struct rdma_cm_event *ev = next_of_two(sch, cch, &srv);
		enum rdma_cm_event_type t = ev->event;
		struct rdma_cm_id *id = ev->id;

		cr_assert(t == RDMA_CM_EVENT_CONNECT_REQUEST ||
			  t == RDMA_CM_EVENT_ESTABLISHED,
			  "%s side: %s (status %d) with %d/%d established",
			  srv ? "server" : "client", rdma_event_str(t),
			  ev->status, srv ? s_est : c_est, n);
		rdma_ack_cm_event(ev);
		if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
			sv[nsv++] = id;
			make_qp(id);
			cr_assert_eq(rdma_accept(id, &p), 0);
		} else if (srv) {
			s_est++;
		} else {
			c_est++;
		}
	}
	for (int i = 0; i < n; i++)
		cr_assert_eq(rdma_disconnect(cl[i]), 0);
	while (s_disc < n || c_disc < n) {
		bool srv;
		struct rdma_cm_event *ev = next_of_two(sch, cch, &srv);

		cr_assert_eq(ev->event, RDMA_CM_EVENT_DISCONNECTED,
			     "%s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
		if (srv)
			s_disc++;
		else
			c_disc++;
	}
	for (int i = 0; i < n; i++) {
		rdma_destroy_qp(cl[i]);
		rdma_destroy_id(cl[i]);
		rdma_destroy_qp(sv[i]);
		rdma_destroy_id(sv[i]);
	}
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

Test(rdmacm, many_simultaneous_connections_all_disconnected,
     .timeout = 120)
{
	burst(MANY, MANY);
}

Test(rdmacm, backlog_zero_takes_a_burst_of_connects, .timeout = 120)
{
	/* rdma_listen(id, 0) is the default backlog (rdma-core, the
	 * kernel's ucma_listen), not "none": 300 connects at once, more
	 * than WISP_MPA_MAX_PENDING (256) and than one address may have
	 * pending (32), all end ESTABLISHED on both sides. */
	burst(BURST_MAX, 0);
}

/* The listening TCP socket of the rdma_cm listener on port. */
static int listening_fd(uint16_t port)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int found = -1;

	cr_assert_not_null(d);
	while ((e = readdir(d)) && found < 0) {
		struct sockaddr_in a;
		socklen_t alen = sizeof(a);
		int fd = atoi(e->d_name), on = 0;
		socklen_t olen = sizeof(on);

		if (e->d_name[0] == '.' || fd == dirfd(d))
			continue;
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &olen) ||
		    !on || getsockname(fd, (struct sockaddr *)&a, &alen) ||
		    a.sin_family != AF_INET || ntohs(a.sin_port) != port)
			continue;
		found = fd;
	}
	closedir(d);
	cr_assert_geq(found, 0, "no listening socket on port %u", port);
	return found;
}

Test(rdmacm, listen_tcp_queue_is_long_whatever_the_backlog)
{
	/* The rdma_cm backlog bounds the CONNECT_REQUESTs the application
	 * has not taken (listen_backlog_bounds_queued_requests); TCP's
	 * accept queue must still take a burst of connects, or their SYNs
	 * are dropped and retransmitted a second later. For a listening
	 * socket, TCP_INFO's tcpi_sacked is the accept queue's length. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	struct rdma_cm_id *l;
	unsigned int want = 1024;
	FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
	int somaxconn;

	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%d", &somaxconn), 1);
	fclose(f);
	if ((unsigned int)somaxconn < want)
		want = (unsigned int)somaxconn;
	loopback(AF_INET, &ss, 0);
	cr_assert_eq(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(rdma_bind_addr(l, (struct sockaddr *)&ss), 0);
	cr_assert_eq(rdma_listen(l, 1), 0);
	cr_assert_eq(getsockopt(listening_fd(ntohs(rdma_get_src_port(l))),
				IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	cr_assert_geq(ti.tcpi_sacked, want, "accept queue %u, want >= %u",
		      ti.tcpi_sacked, want);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

/* Wait until the listening socket s has n connections in its accept
 * queue (TCP_INFO's tcpi_unacked, for a listener). */
static void accept_queue_reaches(int s, unsigned int n)
{
	int64_t end = now_ms() + 20000;

	for (;;) {
		struct tcp_info ti;
		socklen_t len = sizeof(ti);

		cr_assert_eq(getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len),
			     0);
		if (ti.tcpi_unacked >= n)
			return;
		cr_assert_lt(now_ms(), end, "%u of %u connected",
			     ti.tcpi_unacked, n);
		poll(NULL, 0, 20);
	}
}

Test(rdmacm, pending_connects_share_one_thread, .timeout = 60)
{
	/* rdma_connect towards a peer that accepts TCP and never answers
	 * the MPA Request: with 200 connects waiting for their Reply the
	 * process has exactly as many threads as with one waiting (the
	 * CM's dialer serves them all), not one per connection;
	 * destroying the ids ends the waits and the dialer goes away. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	static struct rdma_cm_id *cl[200];
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one, many;
	int64_t end;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(s, 1024), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &alen), 0);
	for (int i = 0; i < 200; i++) {
		cl[i] = resolved(ch, AF_INET, ntohs(a.sin_port));
		make_qp(cl[i]);
	}
	cr_assert_eq(rdma_connect(cl[0], NULL), 0);
	accept_queue_reaches(s, 1);
	one = self_threads();
	for (int i = 1; i < 200; i++)
		cr_assert_eq(rdma_connect(cl[i], NULL), 0);
	/* All 200 in the silent peer's accept queue: each has sent its
	 * Request and waits for the Reply. */
	accept_queue_reaches(s, 200);
	many = self_threads();
	cr_assert_eq(many, one, "%d threads with 200 pending connects, %d "
		     "with one", many, one);
	expect_no_event(ch, 100);
	for (int i = 0; i < 200; i++) {
		rdma_destroy_qp(cl[i]);
		cr_assert_eq(rdma_destroy_id(cl[i]), 0);
	}
	end = now_ms() + 5000;
	while (self_threads() >= one && now_ms() < end)
		poll(NULL, 0, 20);
	cr_assert_lt(self_threads(), one, "the dialer did not end");
	close(s);
	rdma_destroy_event_channel(ch);
}

Test(rdmacm, init_qp_attr_walk_before_connect)
{
	/* rping -q walks its own QP through rdma_init_qp_attr's INIT, RTR
	 * and RTS before rdma_accept / rdma_connect. As from the kernel's
	 * iWARP CM, RTR and RTS name no state change (the connection moves
	 * the QP to RTS), so every step succeeds on the unconnected QP. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	static const enum ibv_qp_state walk[] = {
		IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
	};
	struct ibv_qp_init_attr ia = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_cm_id *id = resolved(ch, AF_INET, 9);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_qp *qp;

	cr_assert_not_null(cq);
	ia.send_cq = cq;
	ia.recv_cq = cq;
	qp = ibv_create_qp(id->pd, &ia);
	cr_assert_not_null(qp);
	for (size_t i = 0; i < sizeof(walk) / sizeof(walk[0]); i++) {
		struct ibv_qp_attr a = { .qp_state = walk[i] };
		int mask = 0;

		cr_assert_eq(rdma_init_qp_attr(id, &a, &mask), 0);
		if (walk[i] != IBV_QPS_INIT)
			cr_expect_eq(mask & IBV_QP_STATE, 0,
				     "no state change for %d", walk[i]);
		cr_expect_eq(ibv_modify_qp(qp, &a, mask), 0, "step %d: %s",
			     walk[i], strerror(errno));
	}
	cr_expect_eq(ibv_destroy_qp(qp), 0);
	cr_expect_eq(ibv_destroy_cq(cq), 0);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* The kernel's descriptor table size, /proc/self/status "FDSize". */
static int fd_table_size(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "FDSize: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* How many descriptors this process has open. */
static int fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;           /* the directory's own */
}

Test(rdmacm, descriptor_table_grown_ahead)
{
	/* Each growth of a threaded process's descriptor table waits for
	 * an RCU grace period: the CM grows it ahead, in one step, when
	 * the first socket is bound (cm_id.c, wcm_fd_room), so that a
	 * burst of accepts does not stall on it six times. It must not
	 * take or change any descriptor meanwhile. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss;
	struct rdma_cm_id *l;
	struct rlimit rl;
	struct stat top_before, top_after;
	int want = 8192, open_before, top;

	cr_assert_not_null(ch);
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)want + 2)
		cr_skip_test("RLIMIT_NOFILE %lu is below the room the CM makes",
			     (unsigned long)rl.rlim_cur);
	if (fd_table_size() >= want)
		cr_skip_test("this process's table holds %d already",
			     fd_table_size());
	/* A descriptor of the application's far up, which the growth
	 * must leave alone (F_DUPFD takes a free one). Not as far as
	 * want / 2: the kernel rounds the table up to a power of two,
	 * and this one alone would make it want. */
	top = fcntl(0, F_DUPFD, want / 4);
	cr_assert_geq(top, want / 4);
	cr_assert_lt(fd_table_size(), want);
	cr_assert_eq(fstat(top, &top_before), 0);
	loopback(AF_INET, &ss, 0);
	cr_assert_eq(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP), 0);
	open_before = fds_open();

	cr_assert_eq(rdma_bind_addr(l, (struct sockaddr *)&ss), 0);
	cr_assert_geq(fd_table_size(), want, "FDSize %d, want >= %d",
		      fd_table_size(), want);
	/* The bound socket, and nothing else left open. */
	cr_assert_eq(fds_open(), open_before + 1);
	cr_assert_eq(fstat(top, &top_after), 0);
	cr_assert_eq(top_after.st_ino, top_before.st_ino);
	cr_assert_eq(top_after.st_dev, top_before.st_dev);

	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
	close(top);
}

/*
 * The sockets of an established connection, found by their ports in
 * /proc/self/fd: each has TCP_NODELAY and is non-blocking (the engine
 * adopts the CM's sockets without setting either, glue_conn_adopt), and
 * the ids' addresses are the sockets' own (a listener bound to one
 * address gives it to its children without getsockname; the wildcard's
 * children ask). Returns how many of the connection's sockets it saw.
 */
static int check_conn_sockets(struct rdma_cm_id *cl, struct rdma_cm_id *sv)
{
	uint16_t cport = rdma_get_src_port(cl), sport = rdma_get_src_port(sv);
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int seen = 0;

	cr_assert_not_null(d);
	cr_assert_eq(rdma_get_dst_port(sv), cport);
	cr_assert_eq(rdma_get_dst_port(cl), sport);
	while ((de = readdir(d))) {
		struct sockaddr_in me, peer;
		socklen_t ml = sizeof(me), pl = sizeof(peer), ol;
		struct rdma_cm_id *id;
		int fd = atoi(de->d_name), one = 0, fl;

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		if (getsockname(fd, (struct sockaddr *)&me, &ml) ||
		    getpeername(fd, (struct sockaddr *)&peer, &pl) ||
		    me.sin_family != AF_INET)
			continue;
		if (me.sin_port == cport && peer.sin_port == sport)
			id = cl;
		else if (me.sin_port == sport && peer.sin_port == cport)
			id = sv;
		else
			continue;
		seen++;
		ol = sizeof(one);
		cr_assert_eq(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
					&ol), 0);
		cr_assert_eq(one, 1, "TCP_NODELAY on fd %d", fd);
		fl = fcntl(fd, F_GETFL);
		cr_assert(fl >= 0 && (fl & O_NONBLOCK), "O_NONBLOCK on fd %d",
			  fd);
		cr_assert_eq(((struct sockaddr_in *)rdma_get_local_addr(id))
				     ->sin_addr.s_addr, me.sin_addr.s_addr,
			     "the id's local address is its socket's");
		cr_assert_eq(((struct sockaddr_in *)rdma_get_peer_addr(id))
				     ->sin_addr.s_addr, peer.sin_addr.s_addr);
	}
	closedir(d);
	return seen;
}

static void conn_sockets_ready(bool wildcard)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct sockaddr_in any = { .sin_family = AF_INET };
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1 };
	struct rdma_cm_id *l, *cl, *sv;
	uint16_t port;

	if (wildcard) {
		cr_assert_eq(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP), 0);
		cr_assert_eq(rdma_bind_addr(l, (struct sockaddr *)&any), 0);
		cr_assert_eq(rdma_listen(l, 8), 0);
		port = ntohs(rdma_get_src_port(l));
	} else {
		l = listener(sch, AF_INET, &port);
	}
	cl = resolved(cch, AF_INET, port);
	sv = requested(sch, cl, &p, true);
	/* The child's address is the one the connection came to, never
	 * the listener's wildcard. */
	cr_assert_eq(((struct sockaddr_in *)rdma_get_local_addr(sv))
			     ->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	cr_assert_eq(ntohs(rdma_get_src_port(sv)), port);
	make_qp(sv);
	cr_assert_eq(rdma_accept(sv, &p), 0, "accept: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	cr_assert_eq(check_conn_sockets(cl, sv), 2, "both ends' sockets");
	send_recv(cl, sv);
	send_recv(sv, cl);
	tear_down(sch, cch, cl, sv);
	close_listener(sch, cch, l);
}

Test(rdmacm, connection_sockets_nodelay_nonblocking_addressed)
{
	conn_sockets_ready(false);
}

Test(rdmacm, wildcard_listener_children_have_their_address)
{
	conn_sockets_ready(true);
}

/* The server side of burst_events_ready_exactly_while_queued: accept
 * every request on its channel until n are ESTABLISHED. No assertions
 * off the test's thread: a failure is counted for it. */
struct acceptor {
	struct rdma_event_channel *ch;
	struct rdma_cm_id **sv;
	int n, nsv, established, failed;
};

static void *accept_all(void *arg)
{
	struct acceptor *a = arg;

	while (a->established < a->n && !a->failed) {
		/* Afresh for each: rdma_create_qp fills in the CQs it made. */
		struct ibv_qp_init_attr qa = {
			.cap = { .max_send_wr = 4, .max_recv_wr = 4,
				 .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct pollfd p = { .fd = a->ch->fd, .events = POLLIN };
		struct rdma_cm_event *ev;
		struct rdma_cm_id *id;
		enum rdma_cm_event_type t;

		if (poll(&p, 1, WAIT_MS) != 1 ||
		    rdma_get_cm_event(a->ch, &ev)) {
			a->failed = 1;
			break;
		}
		t = ev->event;
		id = ev->id;
		rdma_ack_cm_event(ev);
		if (t == RDMA_CM_EVENT_ESTABLISHED) {
			a->established++;
		} else if (t != RDMA_CM_EVENT_CONNECT_REQUEST ||
			   a->nsv >= a->n) {
			a->failed = 2;
		} else {
			a->sv[a->nsv++] = id;
			if (rdma_create_qp(id, NULL, &qa) ||
			    rdma_accept(id, NULL))
				a->failed = 3;
		}
	}
	return NULL;
}

Test(rdmacm, burst_events_ready_exactly_while_queued, .timeout = 120)
{
	/* The dialer makes a channel readable once for the ESTABLISHED
	 * events of one of its turns (wcm_events_hold): 100 connects at
	 * once, and the client's channel, non-blocking, must still be
	 * readable exactly while events wait in it. Every time poll()
	 * says readable there is an event to take (none announced that is
	 * not there); every event is announced (none waits in the queue
	 * unannounced: poll would time out); and once all are taken it is
	 * not readable and rdma_get_cm_event says EAGAIN. */
	enum { N = 100 };
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	static struct rdma_cm_id *cl[N], *sv[N];
	struct acceptor a = { .ch = sch, .sv = sv, .n = N };
	struct rdma_cm_id *l;
	struct rdma_cm_event *ev;
	struct pollfd p = { .events = POLLIN };
	pthread_t t;
	uint16_t port;
	int est = 0, wakes = 0;

	l = listener_backlog(sch, AF_INET, 0, &port);
	for (int i = 0; i < N; i++) {
		cl[i] = resolved(cch, AF_INET, port);
		make_qp(cl[i]);
	}
	cr_assert_eq(pthread_create(&t, NULL, accept_all, &a), 0);
	fcntl(cch->fd, F_SETFL, fcntl(cch->fd, F_GETFL) | O_NONBLOCK);
	for (int i = 0; i < N; i++)
		cr_assert_eq(rdma_connect(cl[i], NULL), 0);
	p.fd = cch->fd;
	while (est < N) {
		int got = 0;

		cr_assert_eq(poll(&p, 1, WAIT_MS), 1, "%d of %d ESTABLISHED "
			     "announced within %d ms", est, N, WAIT_MS);
		wakes++;
		while (!rdma_get_cm_event(cch, &ev)) {
			cr_assert_eq(ev->event, RDMA_CM_EVENT_ESTABLISHED,
				     "%s", rdma_event_str(ev->event));
			rdma_ack_cm_event(ev);
			got++;
		}
		cr_assert_eq(errno, EAGAIN);
		cr_assert_gt(got, 0, "readable with no event (after %d)", est);
		est += got;
	}
	cr_assert_eq(est, N);
	p.revents = 0;
	cr_assert_eq(poll(&p, 1, 0), 0, "readable with every event taken");
	cr_assert_eq(rdma_get_cm_event(cch, &ev), -1);
	cr_assert_eq(errno, EAGAIN);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(a.failed, 0, "server side: failure %d", a.failed);
	cr_assert_eq(a.established, N);
	cr_log_info("%d ESTABLISHED in %d readable turns", N, wakes);
	for (int i = 0; i < N; i++) {
		rdma_destroy_qp(cl[i]);
		cr_assert_eq(rdma_destroy_id(cl[i]), 0);
	}
	for (int i = 0; i < a.nsv; i++) {
		rdma_destroy_qp(sv[i]);
		cr_assert_eq(rdma_destroy_id(sv[i]), 0);
	}
	cr_assert_eq(rdma_destroy_id(l), 0);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* The TCP state of this process's socket bound to local port (network
 * order), or -1 if there is none. */
static int tcp_state_of_port(uint16_t port)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int state = -1;

	cr_assert_not_null(d);
	while ((de = readdir(d))) {
		struct sockaddr_in me;
		socklen_t ml = sizeof(me), tl;
		struct tcp_info ti;
		int fd = atoi(de->d_name);

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		if (getsockname(fd, (struct sockaddr *)&me, &ml) ||
		    me.sin_family != AF_INET || me.sin_port != port)
			continue;
		tl = sizeof(ti);
		if (!getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl))
			state = ti.tcpi_state;
	}
	closedir(d);
	return state;
}

Test(rdmacm, rdma_connect_starts_the_tcp_connect, .timeout = 60)
{
	/* Plain MPA: rdma_connect makes the TCP connect on the caller's
	 * thread (and sends the Request), as the kernel's CM starts it
	 * within the call, instead of leaving both to the dialer thread:
	 * the moment it returns, the id's socket is connecting or
	 * connected, not still closed. The peer is a TCP listener that
	 * never answers. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), st;
	struct rdma_cm_id *cl;
	uint16_t port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(s, 16), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &alen), 0);
	cl = resolved(ch, AF_INET, ntohs(a.sin_port));
	make_qp(cl);
	port = rdma_get_src_port(cl);
	st = tcp_state_of_port(port);
	cr_assert_eq(st, TCP_CLOSE, "bound, not connecting yet: state %d",
		     st);
	cr_assert_eq(rdma_connect(cl, NULL), 0);
	st = tcp_state_of_port(port);
	cr_assert(st == TCP_SYN_SENT || st == TCP_ESTABLISHED,
		  "TCP state %d when rdma_connect returned", st);
	accept_queue_reaches(s, 1);
	expect_no_event(ch, 50);
	rdma_destroy_qp(cl);
	cr_assert_eq(rdma_destroy_id(cl), 0);
	close(s);
	rdma_destroy_event_channel(ch);
}
