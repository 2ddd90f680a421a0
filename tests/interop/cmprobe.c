/*
 * cmprobe: a small rdma_cm peer for wisp's interop tests.
 *
 * Built against the host's rdma-core headers and run unchanged on both
 * ends: in the siw guest over rdma-core's libraries, and on the host over
 * wisp's (LD_LIBRARY_PATH). It covers what rping and perftest cannot:
 * rejecting with private data, the passive side disconnecting first, and
 * the passive side sending first (the peer-to-peer model).
 *
 *   cmprobe -s [-a ADDR] -p PORT [-n N] [-r] [-S] [-R] [-D] [-t MS] [-T MS]
 *   cmprobe -c  -a ADDR  -p PORT [-n N] [-S] [-R] [-D] [-t MS] [-e EVENT]
 *
 *   -s / -c   passive (listen) / active (connect) side
 *   -n N      connections, one after the other (default 1)
 *   -r        passive side: reject every request (private data
 *             "cmprobe-reject")
 *   -S        send one message ("<side>-hello-<k>") once established
 *   -R        receive one message once established (a receive is always
 *             posted before connect/accept); with -S too, the active side
 *             sends first and the passive side answers
 *   -D        disconnect first once done; without it, wait for the peer's
 *   -t MS     timeout of each wait (default 10000), but the passive side's
 *             wait for a connection request (-T MS, default 30000)
 *   -e EVENT  active side: the connect outcome expected (ESTABLISHED,
 *             REJECTED, UNREACHABLE, CONNECT_ERROR, any); default ESTABLISHED
 *
 * Every step prints one line "CMPROBE k=<k> t=<ms> <what> ..." on stdout; the
 * last line is "CMPROBE RESULT ok=<n> bad=<m>". Exit status 0 only if all
 * N connections went as asked.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUFSZ 256

static int timeout_ms = 10000;
static int accept_ms = 30000;
static int k;
static long t0;
static long now_ms(void);

#define say(...)                                                    \
	do {                                                        \
		printf("CMPROBE k=%d t=%ld ", k, now_ms() - t0);    \
		printf(__VA_ARGS__);                                \
		printf("\n");                                       \
		fflush(stdout);                                     \
	} while (0)

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Next CM event within ms, or NULL. */
static struct rdma_cm_event *next_event_ms(struct rdma_event_channel *ec, int ms)
{
	struct pollfd p = { .fd = ec->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) <= 0)
		return NULL;
	if (rdma_get_cm_event(ec, &ev))
		return NULL;
	return ev;
}

static struct rdma_cm_event *next_event(struct rdma_event_channel *ec)
{
	return next_event_ms(ec, timeout_ms);
}

static void print_pdata(const char *what, const void *pd, int len)
{
	char s[BUFSZ];
	int i, n = 0;

	for (i = 0; i < len && n < BUFSZ - 1; i++) {
		char c = ((const char *)pd)[i];

		if (c == 0)
			break;
		s[n++] = (c >= 32 && c < 127) ? c : '.';
	}
	s[n] = 0;
	say("%s pdata_len=%d pdata=\"%s\"", what, len, s);
}

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[2][BUFSZ]; /* 0: receive, 1: send */
	int seen[3];	    /* completions seen, by wr_id */
};

static int setup_qp(struct conn *c)
{
	struct ibv_qp_init_attr a;
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { 0 }, *bad;

	c->pd = ibv_alloc_pd(c->id->verbs);
	c->cq = c->pd ? ibv_create_cq(c->id->verbs, 16, NULL, NULL, 0) : NULL;
	if (!c->cq) {
		say("ERROR pd/cq: %s", strerror(errno));
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.send_cq = a.recv_cq = c->cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_create_qp(c->id, c->pd, &a)) {
		say("ERROR rdma_create_qp: %s", strerror(errno));
		return -1;
	}
	c->mr = ibv_reg_mr(c->pd, c->buf, sizeof(c->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr) {
		say("ERROR ibv_reg_mr: %s", strerror(errno));
		return -1;
	}
	memset(c->buf, 0, sizeof(c->buf));
	sge.addr = (uintptr_t)c->buf[0];
	sge.length = BUFSZ;
	sge.lkey = c->mr->lkey;
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	if (ibv_post_recv(c->id->qp, &wr, &bad)) {
		say("ERROR ibv_post_recv: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static void teardown(struct conn *c)
{
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	memset(c, 0, sizeof(*c));
}

/* Wait for a completion of wr_id (1 receive, 2 send). */
static int wait_wc(struct conn *c, uint64_t wr_id)
{
	long end = now_ms() + timeout_ms;
	struct ibv_wc wc;
	int n;

	while (!c->seen[wr_id] && now_ms() < end) {
		n = ibv_poll_cq(c->cq, 1, &wc);
		if (n < 0) {
			say("ERROR ibv_poll_cq");
			return -1;
		}
		if (n == 0) {
			usleep(1000);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			say("WC-ERROR wr_id=%llu status=%s", (unsigned long long)wc.wr_id,
			    ibv_wc_status_str(wc.status));
			return -1;
		}
		if (wc.wr_id == 1)
			say("RECV len=%u data=\"%.*s\"", wc.byte_len, (int)wc.byte_len,
			    c->buf[0]);
		else
			say("SENT len=%u", (unsigned)strlen(c->buf[1]));
		if (wc.wr_id < 3)
			c->seen[wc.wr_id] = 1;
	}
	if (c->seen[wr_id])
		return 0;
	say("TIMEOUT waiting for %s completion", wr_id == 1 ? "receive" : "send");
	return -1;
}

static int do_send(struct conn *c, const char *side)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = { 0 }, *bad;

	snprintf(c->buf[1], BUFSZ, "%s-hello-%d", side, k);
	sge.addr = (uintptr_t)c->buf[1];
	sge.length = strlen(c->buf[1]);
	sge.lkey = c->mr->lkey;
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(c->id->qp, &wr, &bad)) {
		say("ERROR ibv_post_send: %s", strerror(errno));
		return -1;
	}
	return wait_wc(c, 2);
}

/*
 * Passive side: the next connection's request, when it came while this
 * one still waited for an event of its own. rdma_cm keeps no order between
 * the events of different ids, and the guestfwd relay (a socat each
 * connection) can pass the client's next request on before its close of
 * the last: the request is the next connection's, not an error.
 */
static struct rdma_cm_id *early_id;
static char early_pd[BUFSZ];
static int early_len;

/* Wait for a given event on id; other events are reported. */
static int wait_for(struct rdma_event_channel *ec, struct rdma_cm_id *id,
		    enum rdma_cm_event_type want, const char *label)
{
	struct rdma_cm_event *ev;
	long end = now_ms() + timeout_ms;

	while (now_ms() < end) {
		ev = next_event(ec);
		if (!ev)
			break;
		if (ev->id == id && ev->event == want) {
			say("%s status=%d", rdma_event_str(ev->event), ev->status);
			rdma_ack_cm_event(ev);
			return 0;
		}
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->id != id && !early_id) {
			early_id = ev->id;
			early_len = ev->param.conn.private_data_len;
			if (early_len > BUFSZ)
				early_len = BUFSZ;
			memcpy(early_pd, ev->param.conn.private_data, early_len);
			say("EARLY CONNECT_REQUEST while waiting for %s: kept for the next connection",
			    label);
			rdma_ack_cm_event(ev);
			continue;
		}
		say("UNEXPECTED %s status=%d while waiting for %s",
		    rdma_event_str(ev->event), ev->status, label);
		rdma_ack_cm_event(ev);
		if (ev->id == id)
			return -1;
	}
	say("TIMEOUT waiting for %s", label);
	return -1;
}

/*
 * After ESTABLISHED: exchange (with both -S and -R the active side sends
 * first and the passive side answers), then disconnect, first or second.
 */
static int session(struct rdma_event_channel *ec, struct conn *c, const char *side,
		   int snd, int rcv, int disc_first)
{
	int server = side[0] == 's';

	if (rcv && (!snd || server) && wait_wc(c, 1))
		return -1;
	if (snd && do_send(c, side))
		return -1;
	if (rcv && wait_wc(c, 1))
		return -1;
	if (disc_first) {
		if (rdma_disconnect(c->id)) {
			say("ERROR rdma_disconnect: %s", strerror(errno));
			return -1;
		}
		say("DISCONNECT-SENT");
	}
	return wait_for(ec, c->id, RDMA_CM_EVENT_DISCONNECTED, "DISCONNECTED");
}

static int get_addr(const char *host, const char *port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST }, *res;

	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static int run_server(const char *addr, const char *port, int n, int reject, int snd,
		      int rcv, int disc_first)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	struct sockaddr_storage ss;
	int ok = 0, bad = 0;

	if (!ec || rdma_create_id(ec, &lid, NULL, RDMA_PS_TCP) ||
	    get_addr(addr ? addr : "0.0.0.0", port, &ss) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&ss) || rdma_listen(lid, 8)) {
		printf("CMPROBE ERROR listen: %s\n", strerror(errno));
		return 2;
	}
	printf("CMPROBE LISTENING port=%s\n", port);
	fflush(stdout);
	for (k = 1; k <= n; k++) {
		struct rdma_cm_event *ev;
		struct conn c = { 0 };
		struct rdma_conn_param p = { 0 };
		static const char rej[] = "cmprobe-reject", acc[] = "cmprobe-accept";
		int r = -1;

		if (early_id) {
			c.id = early_id;
			early_id = NULL;
			print_pdata("CONNECT_REQUEST", early_pd, early_len);
		} else {
			ev = next_event_ms(ec, accept_ms);
			if (!ev) {
				say("TIMEOUT waiting for CONNECT_REQUEST");
				bad += n - k + 1;
				break;
			}
			if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
				say("UNEXPECTED %s status=%d", rdma_event_str(ev->event),
				    ev->status);
				rdma_ack_cm_event(ev);
				bad++;
				continue;
			}
			c.id = ev->id;
			print_pdata("CONNECT_REQUEST", ev->param.conn.private_data,
				    ev->param.conn.private_data_len);
			rdma_ack_cm_event(ev);
		}
		if (reject) {
			if (rdma_reject(c.id, rej, sizeof(rej)))
				say("ERROR rdma_reject: %s", strerror(errno));
			else {
				say("REJECT-SENT");
				r = 0;
			}
			teardown(&c);
		} else if (setup_qp(&c) == 0) {
			p.initiator_depth = p.responder_resources = 1;
			p.private_data = acc;
			p.private_data_len = sizeof(acc);
			if (rdma_accept(c.id, &p))
				say("ERROR rdma_accept: %s", strerror(errno));
			else if (wait_for(ec, c.id, RDMA_CM_EVENT_ESTABLISHED, "ESTABLISHED") == 0)
				r = session(ec, &c, "server", snd, rcv, disc_first);
			teardown(&c);
		} else {
			teardown(&c);
		}
		if (r == 0) {
			ok++;
			say("OK");
		} else {
			bad++;
			say("BAD");
		}
	}
	if (early_id) {
		say("UNEXPECTED CONNECT_REQUEST beyond the %d asked for", n);
		rdma_reject(early_id, NULL, 0);
		rdma_destroy_id(early_id);
		bad++;
	}
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ec);
	k = 0;
	printf("CMPROBE RESULT ok=%d bad=%d\n", ok, bad);
	return bad ? 1 : 0;
}

static int run_client(const char *addr, const char *port, int n, int snd, int rcv,
		      int disc_first, const char *expect)
{
	struct sockaddr_storage ss;
	int ok = 0, bad = 0;

	if (get_addr(addr, port, &ss)) {
		printf("CMPROBE ERROR bad address %s:%s\n", addr, port);
		return 2;
	}
	for (k = 1; k <= n; k++) {
		struct rdma_event_channel *ec = rdma_create_event_channel();
		struct conn c = { 0 };
		struct rdma_conn_param p = { 0 };
		struct rdma_cm_event *ev;
		static const char req[] = "cmprobe-connect";
		const char *got = "TIMEOUT";
		int r = -1;

		if (!ec || rdma_create_id(ec, &c.id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(c.id, NULL, (struct sockaddr *)&ss, timeout_ms) ||
		    wait_for(ec, c.id, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED") ||
		    rdma_resolve_route(c.id, timeout_ms) ||
		    wait_for(ec, c.id, RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED") ||
		    setup_qp(&c))
			goto next;
		p.initiator_depth = p.responder_resources = 1;
		p.private_data = req;
		p.private_data_len = sizeof(req);
		if (rdma_connect(c.id, &p)) {
			say("ERROR rdma_connect: %s", strerror(errno));
			goto next;
		}
		ev = next_event(ec);
		if (ev) {
			got = rdma_event_str(ev->event);
			say("%s status=%d", got, ev->status);
			if (ev->param.conn.private_data_len)
				print_pdata(got, ev->param.conn.private_data,
					    ev->param.conn.private_data_len);
			rdma_ack_cm_event(ev);
		} else {
			say("TIMEOUT waiting for the connect outcome");
		}
		/* rdma_event_str gives "RDMA_CM_EVENT_X": compare the tail */
		if (strcmp(expect, "any") && (strlen(got) < strlen(expect) ||
					      strcmp(got + strlen(got) - strlen(expect), expect)))
			goto next;
		if (strcmp(got, "RDMA_CM_EVENT_ESTABLISHED") == 0)
			r = session(ec, &c, "client", snd, rcv, disc_first);
		else
			r = 0;
next:
		teardown(&c);
		if (ec)
			rdma_destroy_event_channel(ec);
		if (r == 0) {
			ok++;
			say("OK");
		} else {
			bad++;
			say("BAD");
		}
	}
	k = 0;
	printf("CMPROBE RESULT ok=%d bad=%d\n", ok, bad);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = NULL, *expect = "ESTABLISHED";
	int server = -1, n = 1, reject = 0, snd = 0, rcv = 0, disc = 0, o;

	while ((o = getopt(argc, argv, "sca:p:n:rSRDt:T:e:")) != -1) {
		switch (o) {
		case 's': server = 1; break;
		case 'c': server = 0; break;
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 'r': reject = 1; break;
		case 'S': snd = 1; break;
		case 'R': rcv = 1; break;
		case 'D': disc = 1; break;
		case 't': timeout_ms = atoi(optarg); break;
		case 'T': accept_ms = atoi(optarg); break;
		case 'e': expect = optarg; break;
		default: server = -1; optind = argc; break;
		}
	}
	if (server < 0 || !port || (!server && !addr) || n < 1) {
		fprintf(stderr, "usage: cmprobe -s|-c [-a ADDR] -p PORT [-n N] [-r] [-S] [-R] [-D] [-t MS] [-T MS] [-e EVENT]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	t0 = now_ms();
	return server ? run_server(addr, port, n, reject, snd, rcv, disc)
		      : run_client(addr, port, n, snd, rcv, disc, expect);
}
