/* SPDX-License-Identifier: MIT */
/*
 * fault_peer - an rdma_cm program for the fault-injection and soak tests
 * (tests/fault/run-faults.sh, docs/testing.md). It uses only the public
 * rdma_cm and verbs API, so it runs over any provider; the tests link it
 * against wisp's librdmacm / libibverbs.
 *
 *   fault_peer server|client ADDR PORT MODE OP [options]
 *
 * MODE
 *   good      one connection: a verified exchange, then disconnect, exit 0.
 *   victim    one connection: a stream of OP both ways until killed. Prints
 *             "flowing" once completions have been seen.
 *   survivor  three connections: good, fault, good. The fault connection
 *             runs the stream until the peer dies or the link breaks, then
 *             checks: every WR completes (successes, then only
 *             IBV_WC_WR_FLUSH_ERR), RDMA_CM_EVENT_DISCONNECTED arrives,
 *             teardown is bounded, and the process's fds, threads and
 *             malloc'd bytes are back to what they were after the first
 *             connection. The third connection must move and verify data.
 *   soak      N connections at once (-n N): idle, then all busy with a
 *             slow consumer; prints RSS per QP (see run-soak.sh).
 * OP: write, read or send (the stream's operation).
 * Options: -n N (soak QPs), -Z (survivor: the peer is stopped, not killed;
 *   the survivor disconnects while its sends are blocked by a zero window;
 *   with -R it waits instead until the peer runs again (SIGCONT) and
 *   checks that everything outstanding completes),
 *   -W MS (survivor -Z: how long the stream must stay stalled first),
 *   -S SECONDS (soak: busy phase), -G PREFIX (wait until the file
 *   PREFIX.N exists before connection N: the driver orders two survivors),
 *   -F N (survivor: N fault connections in a row, each checked against
 *   the baseline; by hand, to see whether memory grows per fault).
 * Exit status: 0 pass, 1 a check failed (the reason on stderr), 2 usage.
 * Every wait is bounded; nothing here can hang for long.
 */

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHUNK (64u * 1024u)        /* each WR of the stream */
#define DEPTH 16u                  /* WRITE/READ WRs kept outstanding */
#define NRECV 32u                  /* receives posted (2 x the SEND window) */
#define SWIN 16u                   /* SENDs in flight, both ways together */
/*
 * The MR: the target region the peer WRITEs and READs, the source of our
 * WRITEs and SENDs, the sink of our READs, then the receive buffers.
 */
#define RDMA_LEN (DEPTH * CHUNK)
#define SRC_OFF RDMA_LEN
#define SINK_OFF (2 * RDMA_LEN)
#define RECV_OFF (3 * RDMA_LEN)
#define MR_LEN (3 * RDMA_LEN + NRECV * CHUNK)
#define WAIT_MS 10000              /* bound of every single wait */

/*
 * A work completion's opcode is defined only for a successful one, and
 * sends and receives share a CQ here: a receive's wr_id carries this
 * bit, so that a flushed completion is still known for what it is.
 */
#define RECV_TAG (1ull << 63)
#define IS_RECV(wc) (((wc)->wr_id & RECV_TAG) != 0)
#define RECV_SLOT(wc) ((uint32_t)((wc)->wr_id & ~RECV_TAG))

struct peer_info {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct peer_info remote;
	uint64_t posted_send, done_send, posted_recv, done_recv;
	uint64_t flushed, ok;
	bool send_err_seen, recv_err_seen, disconnected;
	uint32_t credits;          /* SEND stream: sends this side may post */
	int recv_ready;            /* exchange: receives not yet waited for */
};

static struct rdma_event_channel *chan;
static bool is_server;
static const char *opt_addr, *opt_port;
static enum { OP_WRITE, OP_READ, OP_SEND } op;
static struct rdma_cm_id *listen_id;
static const char *gate;
static int nfaults = 1;           /* -F: fault connections in a row */           /* -G: wait for gate.N before connection N */

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "fault_peer: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* --- what the process holds ------------------------------------------ */

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - (strcmp(path, "/proc/self/fd") == 0); /* opendir's own */
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

struct usage {
	int fds, tasks;
	size_t heap;
	long rss;
};

static struct usage usage_now(void)
{
	struct usage u;
	struct mallinfo2 mi = mallinfo2();

	u.fds = count_dir("/proc/self/fd");
	u.tasks = count_dir("/proc/self/task");
	u.heap = mi.uordblks + mi.hblkhd;
	u.rss = rss_kib();
	return u;
}

/*
 * After a teardown, threads and descriptors may take a moment to go (an
 * engine thread ends after its last QP): wait, bounded, until they are
 * back to base, then compare.
 */
static void check_no_leak(const struct usage *base, const char *when)
{
	int64_t end = now_ms() + WAIT_MS;
	struct usage u;

	for (;;) {
		u = usage_now();
		if ((u.fds <= base->fds && u.tasks <= base->tasks) ||
		    now_ms() > end)
			break;
		sleep_ms(20);
	}
	printf("usage %s: fds %d (base %d), threads %d (base %d), "
	       "heap %zu (base %zu), rss %ld KiB (base %ld)\n", when, u.fds,
	       base->fds, u.tasks, base->tasks, u.heap, base->heap, u.rss,
	       base->rss);
	if (u.fds != base->fds)
		die("%s: %d descriptors, %d before", when, u.fds, base->fds);
	if (u.tasks != base->tasks)
		die("%s: %d threads, %d before", when, u.tasks, base->tasks);
	/*
	 * malloc'd bytes: a connection holds megabytes (its MR alone is
	 * MR_LEN, plus its rings); what may stay is allocator noise and
	 * what the first fault's paths allocate once (about 20 KB was
	 * seen), far below one connection's worth.
	 */
	if (base->heap && u.heap > base->heap + 64 * 1024)
		die("%s: %zu octets malloc'd, %zu before", when, u.heap,
		    base->heap);
}

/* --- rdma_cm ---------------------------------------------------------- */

/* The next event (any id) within ms, or NULL. */
static struct rdma_cm_event *next_event(int ms)
{
	struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int r;

	r = poll(&pfd, 1, ms);
	if (r < 0 && errno != EINTR)
		die("poll on the event channel: %s", strerror(errno));
	if (r <= 0)
		return NULL;
	if (rdma_get_cm_event(chan, &ev))
		die("rdma_get_cm_event: %s", strerror(errno));
	return ev;
}

static struct rdma_cm_event *expect_event(enum rdma_cm_event_type t,
					  const char *what)
{
	struct rdma_cm_event *ev = next_event(WAIT_MS);

	if (!ev)
		die("%s: no event in %d ms", what, WAIT_MS);
	if (ev->event != t)
		die("%s: %s (status %d), not %s", what,
		    rdma_event_str(ev->event), ev->status, rdma_event_str(t));
	return ev;
}

static void conn_resources(struct conn *c)
{
	struct ibv_qp_init_attr qa = { 0 };

	c->pd = ibv_alloc_pd(c->id->verbs);
	if (!c->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	c->cq = ibv_create_cq(c->id->verbs, 256, NULL, NULL, 0);
	if (!c->cq)
		die("ibv_create_cq: %s", strerror(errno));
	c->buf = aligned_alloc(4096, MR_LEN);
	if (!c->buf)
		die("no memory");
	memset(c->buf, 0, MR_LEN);
	c->mr = ibv_reg_mr(c->pd, c->buf, MR_LEN, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!c->mr)
		die("ibv_reg_mr: %s", strerror(errno));
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 64;
	qa.cap.max_recv_wr = 64;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(c->id, c->pd, &qa))
		die("rdma_create_qp: %s", strerror(errno));
}

static void conn_param(struct conn *c, struct rdma_conn_param *p,
		       struct peer_info *mine)
{
	mine->addr = (uintptr_t)c->buf;
	mine->rkey = c->mr->rkey;
	mine->len = RDMA_LEN;
	memset(p, 0, sizeof(*p));
	p->private_data = mine;
	p->private_data_len = sizeof(*mine);
	p->responder_resources = 16;
	p->initiator_depth = 16;
}

static void take_remote(struct conn *c, const struct rdma_cm_event *ev)
{
	if (ev->param.conn.private_data_len < sizeof(c->remote))
		die("private data of %u octets", ev->param.conn.private_data_len);
	memcpy(&c->remote, ev->param.conn.private_data, sizeof(c->remote));
}

static void post_recv(struct conn *c, uint32_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)c->buf + RECV_OFF + (uint64_t)slot * CHUNK,
		.length = CHUNK, .lkey = c->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = RECV_TAG | slot, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	if (ibv_post_recv(c->id->qp, &wr, &bad) == 0)
		c->posted_recv++;
}

static void post_recvs(struct conn *c)
{
	for (uint32_t i = 0; i < NRECV; i++)
		post_recv(c, i);
}

static void start_listen(void)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE }, *res;

	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(opt_addr, opt_port, &hints, &res))
		die("rdma_getaddrinfo %s:%s: %s", opt_addr, opt_port,
		    strerror(errno));
	if (rdma_create_id(chan, &listen_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(listen_id, res->ai_src_addr))
		die("rdma_bind_addr: %s", strerror(errno));
	rdma_freeaddrinfo(res);
	if (rdma_listen(listen_id, 1024))
		die("rdma_listen: %s", strerror(errno));
}

/* Server: take one CONNECT_REQUEST and accept it. */
static void server_accept(struct conn *c, bool close_listener)
{
	struct rdma_cm_event *ev = expect_event(RDMA_CM_EVENT_CONNECT_REQUEST,
						"connect request");
	struct rdma_conn_param p;
	struct peer_info mine;

	memset(c, 0, sizeof(*c));
	c->id = ev->id;
	take_remote(c, ev);
	rdma_ack_cm_event(ev);
	if (close_listener) {
		rdma_destroy_id(listen_id);
		listen_id = NULL;
	}
	conn_resources(c);
	post_recvs(c);
	conn_param(c, &p, &mine);
	if (rdma_accept(c->id, &p))
		die("rdma_accept: %s", strerror(errno));
	ev = expect_event(RDMA_CM_EVENT_ESTABLISHED, "established (server)");
	rdma_ack_cm_event(ev);
}

static void conn_free(struct conn *c);

/*
 * Client: connect, retrying (bounded) while nobody listens yet: the
 * driver starts the next server only once the previous one has gone.
 */
static void client_connect(struct conn *c)
{
	int64_t end = now_ms() + 2 * WAIT_MS;
	struct rdma_addrinfo hints = { 0 }, *res;
	struct rdma_conn_param p;
	struct peer_info mine;

	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(opt_addr, opt_port, &hints, &res))
		die("rdma_getaddrinfo %s:%s: %s", opt_addr, opt_port,
		    strerror(errno));
	for (;;) {
		struct rdma_cm_event *ev;

		memset(c, 0, sizeof(*c));
		if (rdma_create_id(chan, &c->id, NULL, RDMA_PS_TCP))
			die("rdma_create_id: %s", strerror(errno));
		if (rdma_resolve_addr(c->id, NULL, res->ai_dst_addr, 2000))
			die("rdma_resolve_addr: %s", strerror(errno));
		rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ADDR_RESOLVED,
					       "address"));
		if (rdma_resolve_route(c->id, 2000))
			die("rdma_resolve_route: %s", strerror(errno));
		rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED,
					       "route"));
		conn_resources(c);
		post_recvs(c);
		conn_param(c, &p, &mine);
		if (rdma_connect(c->id, &p))
			die("rdma_connect: %s", strerror(errno));
		ev = next_event(WAIT_MS);
		if (!ev)
			die("connect: no event in %d ms", WAIT_MS);
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
			take_remote(c, ev);
			rdma_ack_cm_event(ev);
			break;
		}
		if (ev->event != RDMA_CM_EVENT_UNREACHABLE &&
		    ev->event != RDMA_CM_EVENT_REJECTED &&
		    ev->event != RDMA_CM_EVENT_CONNECT_ERROR)
			die("connect: %s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
		/* The receives posted were flushed: forget them. */
		c->posted_recv = 0;
		conn_free(c);
		if (now_ms() > end)
			die("no server accepted within %d ms", 2 * WAIT_MS);
		sleep_ms(50);
	}
	rdma_freeaddrinfo(res);
}

static void conn_free(struct conn *c)
{
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->mr && ibv_dereg_mr(c->mr))
		die("ibv_dereg_mr: %s", strerror(errno));
	if (c->cq && ibv_destroy_cq(c->cq))
		die("ibv_destroy_cq: %s", strerror(errno));
	if (c->pd && ibv_dealloc_pd(c->pd))
		die("ibv_dealloc_pd: %s", strerror(errno));
	free(c->buf);
	if (c->id && rdma_destroy_id(c->id))
		die("rdma_destroy_id: %s", strerror(errno));
	memset(c, 0, sizeof(*c));
}

/* --- work requests ---------------------------------------------------- */

/* Post a WR of kind at slot (CHUNK-sized) of the regions, len octets. */
static int post_op(struct conn *c, int kind, uint32_t slot, uint32_t len)
{
	uint64_t off = (kind == OP_READ ? SINK_OFF : SRC_OFF) +
		       (uint64_t)slot * CHUNK;
	struct ibv_sge sge = {
		.addr = (uintptr_t)c->buf + off, .length = len,
		.lkey = c->mr->lkey,
	};
	struct ibv_send_wr wr = { 0 }, *bad;
	int r;

	wr.wr_id = c->posted_send;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	switch (kind) {
	case OP_WRITE:
		wr.opcode = IBV_WR_RDMA_WRITE;
		break;
	case OP_READ:
		wr.opcode = IBV_WR_RDMA_READ;
		break;
	default:
		wr.opcode = IBV_WR_SEND;
		break;
	}
	if (kind != OP_SEND) {
		wr.wr.rdma.remote_addr = c->remote.addr + (uint64_t)slot * CHUNK;
		wr.wr.rdma.rkey = c->remote.rkey;
	}
	r = ibv_post_send(c->id->qp, &wr, &bad);
	if (r == 0)
		c->posted_send++;
	return r;
}

/*
 * Account for one completion. Send-queue completions come in order: only
 * successes, then only IBV_WC_WR_FLUSH_ERR once the connection broke.
 * Receives the same. Returns true for a success.
 */
static bool account(struct conn *c, const struct ibv_wc *wc)
{
	bool recv = IS_RECV(wc);

	if (recv)
		c->done_recv++;
	else
		c->done_send++;
	if (wc->status == IBV_WC_SUCCESS) {
		if (recv ? c->recv_err_seen : c->send_err_seen)
			die("a %s succeeded after a flush",
			    recv ? "receive" : "send WR");
		c->ok++;
		return true;
	}
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		die("%s completed with %s (vendor_err 0x%x), not FLUSH_ERR",
		    recv ? "receive" : "send WR", ibv_wc_status_str(wc->status),
		    wc->vendor_err);
	if (recv)
		c->recv_err_seen = true;
	else
		c->send_err_seen = true;
	c->flushed++;
	return false;
}

/* A DISCONNECTED for this connection, if one is waiting (no wait). */
static void poll_disconnect(struct conn *c, int ms)
{
	struct rdma_cm_event *ev = next_event(ms);

	if (!ev)
		return;
	if (ev->id != c->id || ev->event != RDMA_CM_EVENT_DISCONNECTED)
		die("unexpected %s (status %d)", rdma_event_str(ev->event),
		    ev->status);
	c->disconnected = true;
	rdma_ack_cm_event(ev);
}

enum stream_end { STREAM_BROKEN, STREAM_STALLED };

/*
 * The stream: OP both ways until the connection breaks (a flush or
 * DISCONNECTED) or, with stall_ms > 0, until no completion came for that
 * long (the peer stopped reading). WRITE/READ keep DEPTH WRs outstanding;
 * SEND is a window of SWIN messages both ways together (each side answers
 * a message with one of its own), so a SEND always finds a receive.
 * Prints "flowing" after 'flowing' successful WRs.
 */
static enum stream_end run_stream(struct conn *c, uint64_t flowing,
				  int stall_ms)
{
	uint64_t succeeded = 0;
	int64_t last = now_ms();
	bool said = false;
	struct ibv_wc wc[32];
	uint32_t slot = 0;

	if (op == OP_SEND)
		c->credits = is_server ? 0 : SWIN;
	else
		c->credits = DEPTH;
	for (;;) {
		bool broken = false;
		int n;

		while (c->credits) {
			int r = post_op(c, op, slot, CHUNK);

			if (r) {
				/* A QP in ERROR flushes what is posted; a
				 * refusal is worth knowing about. */
				printf("ibv_post_send: %s\n", strerror(r));
				return STREAM_BROKEN;
			}
			slot = (slot + 1) % DEPTH;
			c->credits--;
		}
		n = ibv_poll_cq(c->cq, 32, wc);
		if (n < 0)
			die("ibv_poll_cq: %d", n);
		for (int i = 0; i < n; i++) {
			bool recv = IS_RECV(&wc[i]);

			if (!account(c, &wc[i])) {
				broken = true;
				continue;
			}
			last = now_ms();
			if (recv) {
				post_recv(c, RECV_SLOT(&wc[i]));
				c->credits++;
			} else {
				succeeded++;
				if (op != OP_SEND)
					c->credits++;
			}
		}
		if (broken)
			return STREAM_BROKEN;
		if (!said && succeeded >= flowing) {
			printf("flowing\n");
			said = true;
		}
		if (n == 0) {
			poll_disconnect(c, 1);
			if (c->disconnected)
				return STREAM_BROKEN;
			if (stall_ms > 0 && said && now_ms() - last > stall_ms)
				return STREAM_STALLED;
			if (now_ms() - last > 4 * WAIT_MS)
				die("no completion in %d ms, connection up",
				    4 * WAIT_MS);
		}
	}
}

/* After a stall: the WRs outstanding complete, successfully, in time. */
static void wait_resumed(struct conn *c)
{
	int64_t end = now_ms() + WAIT_MS;
	struct ibv_wc wc[32];

	while (c->done_send < c->posted_send) {
		int n = ibv_poll_cq(c->cq, 32, wc);

		if (n < 0)
			die("ibv_poll_cq: %d", n);
		for (int i = 0; i < n; i++) {
			if (!account(c, &wc[i]))
				die("a WR was flushed after the peer resumed");
			if (IS_RECV(&wc[i]))
				post_recv(c, RECV_SLOT(&wc[i]));
		}
		if (now_ms() > end)
			die("%" PRIu64 " WRs still outstanding %d ms after the "
			    "peer resumed", c->posted_send - c->done_send,
			    WAIT_MS);
	}
}

/* Every WR posted must complete, in bounded time. */
static void drain(struct conn *c)
{
	int64_t end = now_ms() + WAIT_MS;
	struct ibv_wc wc[32];

	while (c->done_send < c->posted_send || c->done_recv < c->posted_recv) {
		int n = ibv_poll_cq(c->cq, 32, wc);

		if (n < 0)
			die("ibv_poll_cq: %d", n);
		for (int i = 0; i < n; i++)
			account(c, &wc[i]);
		if (now_ms() > end)
			die("%" PRIu64 "/%" PRIu64 " send and %" PRIu64 "/%"
			    PRIu64 " receive WRs never completed", c->done_send,
			    c->posted_send, c->done_recv, c->posted_recv);
		if (n == 0)
			sleep_ms(1);
	}
}

static void wait_disconnected(struct conn *c)
{
	int64_t end = now_ms() + WAIT_MS;

	while (!c->disconnected) {
		if (now_ms() > end)
			die("no DISCONNECTED event within %d ms", WAIT_MS);
		poll_disconnect(c, 100);
	}
}

/* --- a verified exchange --------------------------------------------- */

static uint8_t pattern(uint32_t i, uint8_t seed)
{
	return (uint8_t)(i * 131u + seed);
}

/*
 * Wait until nsend send-queue completions and nrecv receives came (in any
 * order), all successful; receives are reposted. A receive that comes
 * early (the peer is a step ahead) counts for the next wait.
 */
static void wait_for(struct conn *c, int nsend, int nrecv)
{
	int64_t end = now_ms() + WAIT_MS;
	struct ibv_wc wc;

	while (nsend > 0 || c->recv_ready < nrecv) {
		int n = ibv_poll_cq(c->cq, 1, &wc);

		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1) {
			if (!account(c, &wc))
				die("verified exchange: a %s was flushed (%d "
				    "sends, %d receives still awaited)",
				    IS_RECV(&wc) ? "receive" :
				    "send WR", nsend, nrecv);
			if (IS_RECV(&wc)) {
				c->recv_ready++;
				post_recv(c, RECV_SLOT(&wc));
			} else {
				nsend--;
			}
			continue;
		}
		if (now_ms() > end)
			die("verified exchange: %d sends, %d receives missing "
			    "after %d ms", nsend, nrecv - c->recv_ready, WAIT_MS);
	}
	c->recv_ready -= nrecv;
}

/*
 * Each side WRITEs its pattern into the other's target region, then
 * SENDs; once the other's SEND came (its WRITE was placed before: RDMAP
 * delivers messages in order) it checks its target region, then READs
 * the other's target region (its own pattern) into its sink and compares.
 * A last SEND each way keeps both up until both READs are done.
 */
static void verified_exchange(struct conn *c)
{
	uint8_t mine = is_server ? 0x5a : 0xa5, theirs = mine ^ 0xff;
	const uint8_t *target = c->buf, *sink = c->buf + SINK_OFF;

	for (uint32_t i = 0; i < RDMA_LEN; i++)
		c->buf[SRC_OFF + i] = pattern(i, mine);
	if (post_op(c, OP_WRITE, 0, RDMA_LEN) || post_op(c, OP_SEND, 0, 8))
		die("post: %s", strerror(errno));
	wait_for(c, 2, 1);
	for (uint32_t i = 0; i < RDMA_LEN; i++)
		if (target[i] != pattern(i, theirs))
			die("WRITE: octet %u is 0x%02x, not 0x%02x", i,
			    target[i], pattern(i, theirs));
	if (post_op(c, OP_READ, 0, RDMA_LEN))
		die("post READ: %s", strerror(errno));
	wait_for(c, 1, 0);
	for (uint32_t i = 0; i < RDMA_LEN; i++)
		if (sink[i] != pattern(i, mine))
			die("READ: octet %u is 0x%02x, not 0x%02x", i,
			    sink[i], pattern(i, mine));
	if (post_op(c, OP_SEND, 0, 8))
		die("post: %s", strerror(errno));
	wait_for(c, 1, 1);
}

/* A clean end: disconnect, DISCONNECTED, every receive flushed. */
static void clean_end(struct conn *c)
{
	if (rdma_disconnect(c->id))
		die("rdma_disconnect: %s", strerror(errno));
	wait_disconnected(c);
	drain(c);
}

static void do_good(struct conn *c)
{
	verified_exchange(c);
	clean_end(c);
	conn_free(c);
}

static void connect_one(struct conn *c, bool last, int nth)
{
	if (gate) {
		char path[4096];
		int64_t end = now_ms() + 3 * WAIT_MS;

		snprintf(path, sizeof(path), "%s.%d", gate, nth);
		while (access(path, F_OK) != 0) {
			if (now_ms() > end)
				die("%s did not appear", path);
			sleep_ms(10);
		}
	}
	if (is_server)
		server_accept(c, last);
	else
		client_connect(c);
}

/* --- modes ------------------------------------------------------------ */

static int mode_good(void)
{
	struct conn c;

	connect_one(&c, true, 1);
	do_good(&c);
	printf("good: exchange verified\n");
	return 0;
}

static int mode_victim(void)
{
	struct conn c;

	connect_one(&c, true, 1);
	/* Flowing after a few megabytes both ways; then run until killed
	 * (or stopped). Should the survivor end first, exit quietly. */
	run_stream(&c, 64, 0);
	/* The survivor ended it (a stopped victim let run again): every
	 * WR completes, then everything is freed (LeakSanitizer). */
	drain(&c);
	if (!c.disconnected)
		wait_disconnected(&c);
	conn_free(&c);
	return 0;
}

/*
 * One fault connection of the survivor: the stream until the fault, then
 * its checks, then the teardown (bounded).
 */
static void fault_round(struct conn *c, bool zero_window, bool resume,
			int stall_ms)
{
	int64_t t0;

	connect_one(c, false, 2);
	printf("fault connection up\n");
	fflush(stdout);
	if (zero_window) {
		/* The peer stops: our WRs stall behind a zero window, for
		 * longer than every timeout of wisp's. Nothing may break. */
		if (run_stream(c, 64, stall_ms) != STREAM_STALLED)
			die("the connection broke while the peer was stopped");
		printf("stalled for %d ms\n", stall_ms);
		if (resume) {
			/* The driver lets the peer run again: everything
			 * outstanding completes, then a clean end. */
			wait_resumed(c);
			printf("resumed: %" PRIu64 " WRs completed\n", c->ok);
			clean_end(c);
		} else {
			t0 = now_ms();
			if (rdma_disconnect(c->id))
				die("rdma_disconnect: %s", strerror(errno));
			wait_disconnected(c);
			drain(c);
			printf("disconnect under a zero window: %" PRId64
			       " ms\n", now_ms() - t0);
		}
	} else {
		if (run_stream(c, 64, 0) != STREAM_BROKEN)
			die("the stream did not break");
		drain(c);
		wait_disconnected(c);
	}
	printf("fault: %" PRIu64 " WRs succeeded, %" PRIu64 " flushed "
	       "(send %" PRIu64 ", receive %" PRIu64 ")\n", c->ok, c->flushed,
	       c->posted_send, c->posted_recv);
	/* Every WR posted has completed exactly once (drain). WRITE and
	 * READ keep WRs outstanding, but the kernel may have taken every
	 * outstanding WRITE before the break, and those complete with
	 * success. Either way a WR posted now, on the broken QP, must be
	 * flushed (verbs: a QP in ERROR flushes what is posted). A SEND
	 * stream at least has its receives. (After a resume, nothing is
	 * broken.) */
	if ((!zero_window || !resume) && op != OP_SEND && !c->send_err_seen) {
		int r = post_op(c, op, 0, CHUNK);

		if (r)
			die("ibv_post_send on the broken QP: %s", strerror(r));
		drain(c);
		if (!c->send_err_seen)
			die("a WR posted after the break was not flushed");
		printf("fault: every outstanding WR had completed; one posted "
		       "after the break was flushed\n");
	}
	if (!c->recv_err_seen)
		die("no receive was flushed");
	/* Disconnecting an id already disconnected is harmless. */
	(void)rdma_disconnect(c->id);
	t0 = now_ms();
	conn_free(c);
	if (now_ms() - t0 > WAIT_MS)
		die("teardown took %" PRId64 " ms", now_ms() - t0);
}

static int mode_survivor(bool zero_window, bool resume, int stall_ms)
{
	struct usage base;
	struct conn c;

	/* 1: a good connection, so that whatever a process keeps once (the
	 * device context, its engine thread) exists before the baseline. */
	connect_one(&c, false, 1);
	do_good(&c);
	sleep_ms(100);
	base = usage_now();
	base.fds = count_dir("/proc/self/fd");
	printf("baseline: fds %d, threads %d, heap %zu, rss %ld KiB\n",
	       base.fds, base.tasks, base.heap, base.rss);

	/* 2: the fault (nfaults times, -F). */
	for (int f = 0; f < nfaults; f++) {
		fault_round(&c, zero_window, resume, stall_ms);
		check_no_leak(&base, "after the fault");
		if (f + 1 < nfaults)
			printf("again\n");
	}
	printf("reconnect\n");
	fflush(stdout);

	/* 3: the survivor connects again and moves data (a server keeps
	 * its listener: it was there at the baseline). */
	connect_one(&c, false, 3);
	do_good(&c);
	check_no_leak(&base, "after reconnecting");
	printf("survivor: all checks passed\n");
	return 0;
}

/* --- soak ------------------------------------------------------------- */

static void raise_fd_limit(unsigned need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur >= need)
		return;
	/* A normal user may raise the soft limit up to the hard one. */
	rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
		fprintf(stderr, "fault_peer: only %lu descriptors allowed\n",
			(unsigned long)rl.rlim_cur);
}

/*
 * Soak: n connections in one process. Each has its own PD, CQ and a
 * small MR (SEND only: the consumer's pace is the point). Idle RSS per QP
 * is measured against the process before the first connection; then
 * every client QP SENDs continuously while the server consumes slowly
 * (it reposts receives at most every 'slow' ms); RSS is sampled and must
 * not keep growing.
 */
#define SOAK_MSG 4096u
#define SOAK_RECV 8u

struct sconn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	uint32_t credits;
};

static void sconn_resources(struct sconn *s)
{
	struct ibv_qp_init_attr qa = { 0 };
	size_t len = SOAK_RECV * SOAK_MSG;

	s->pd = ibv_alloc_pd(s->id->verbs);
	s->cq = ibv_create_cq(s->id->verbs, 32, NULL, NULL, 0);
	s->buf = aligned_alloc(4096, len);
	if (!s->pd || !s->cq || !s->buf)
		die("soak resources: %s", strerror(errno));
	memset(s->buf, 0, len);
	s->mr = ibv_reg_mr(s->pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr)
		die("ibv_reg_mr: %s", strerror(errno));
	qa.send_cq = s->cq;
	qa.recv_cq = s->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = SOAK_RECV;
	qa.cap.max_recv_wr = SOAK_RECV;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(s->id, s->pd, &qa))
		die("rdma_create_qp: %s", strerror(errno));
}

static void sconn_recv(struct sconn *s, uint32_t slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + slot * SOAK_MSG,
			       .length = SOAK_MSG, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	if (ibv_post_recv(s->id->qp, &wr, &bad))
		die("ibv_post_recv: %s", strerror(errno));
}

static void sconn_send(struct sconn *s, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = len,
			       .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (ibv_post_send(s->id->qp, &wr, &bad))
		die("ibv_post_send: %s", strerror(errno));
}

static int mode_soak(unsigned n, int busy_s)
{
	struct sconn *s = calloc(n, sizeof(*s));
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1 };
	long rss0, rss_idle, peak_first = 0, peak_last = 0;
	unsigned up = 0, resolving = 0;
	int64_t end;
	uint64_t moved = 0;

	if (!s)
		die("no memory");
	raise_fd_limit(4 * n + 64);
	rss0 = rss_kib();
	if (is_server) {
		start_listen();
	} else {
		hints.ai_port_space = RDMA_PS_TCP;
		if (rdma_getaddrinfo(opt_addr, opt_port, &hints, &res))
			die("rdma_getaddrinfo: %s", strerror(errno));
	}
	/*
	 * Connect all n. The client keeps up to 32 attempts in flight (the
	 * server's listen backlog and MPA bounds are not what is soaked).
	 */
	end = now_ms() + 60000 + (int64_t)n * 100;
	while (up < n) {
		struct rdma_cm_event *ev;

		if (!is_server) {
			while (resolving < 32 && up + resolving < n) {
				struct sconn *x = &s[up + resolving];

				if (rdma_create_id(chan, &x->id, x, RDMA_PS_TCP) ||
				    rdma_resolve_addr(x->id, NULL, res->ai_dst_addr,
						      2000))
					die("connect %u: %s", up + resolving,
					    strerror(errno));
				resolving++;
			}
		}
		ev = next_event(1000);
		if (now_ms() > end)
			die("only %u of %u connected", up, n);
		if (!ev)
			continue;
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(ev->id, 2000))
				die("rdma_resolve_route: %s", strerror(errno));
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED: {
			struct sconn *x = ev->id->context;

			sconn_resources(x);
			for (uint32_t i = 0; i < SOAK_RECV; i++)
				sconn_recv(x, i);
			if (rdma_connect(ev->id, &p))
				die("rdma_connect: %s", strerror(errno));
			break;
		}
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			struct sconn *x = &s[up + resolving];

			x->id = ev->id;
			ev->id->context = x;
			sconn_resources(x);
			for (uint32_t i = 0; i < SOAK_RECV; i++)
				sconn_recv(x, i);
			if (rdma_accept(ev->id, &p))
				die("rdma_accept: %s", strerror(errno));
			resolving++;
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			up++;
			resolving--;
			break;
		default:
			die("soak: %s (status %d) after %u connections",
			    rdma_event_str(ev->event), ev->status, up);
		}
		rdma_ack_cm_event(ev);
	}
	if (res)
		rdma_freeaddrinfo(res);
	sleep_ms(500);
	rss_idle = rss_kib();
	printf("soak: %u QPs connected; RSS %ld KiB before, %ld KiB idle: "
	       "%.1f KiB per QP (idle, with its %u KiB of buffers)\n", n, rss0,
	       rss_idle, (double)(rss_idle - rss0) / n,
	       SOAK_RECV * SOAK_MSG / 1024);
	fflush(stdout);

	/*
	 * Busy: the client keeps SOAK_RECV SENDs posted on every QP (all
	 * busy); the server polls each CQ but reposts a receive only every
	 * few ms per QP, so most senders find no credit... a SEND without
	 * a receive is a protocol error in iWARP, so the client holds as
	 * many credits as the server posted and gets one back per echo.
	 * The server echoes a 1-octet SEND per message it consumed.
	 */
	for (unsigned i = 0; i < n; i++)
		s[i].credits = is_server ? 0 : SOAK_RECV / 2;
	end = now_ms() + (int64_t)busy_s * 1000;
	{
		int64_t half = now_ms() + (int64_t)busy_s * 500, next = 0;

		while (now_ms() < end) {
			for (unsigned i = 0; i < n; i++) {
				struct ibv_wc wc[8];
				int k;

				while (s[i].credits) {
					sconn_send(&s[i], is_server ? 1 : SOAK_MSG);
					s[i].credits--;
				}
				k = ibv_poll_cq(s[i].cq, 8, wc);
				for (int j = 0; j < k; j++) {
					if (wc[j].status != IBV_WC_SUCCESS)
						die("soak QP %u: %s", i,
						    ibv_wc_status_str(wc[j].status));
					if (!(wc[j].opcode & IBV_WC_RECV))
						continue;
					moved += wc[j].byte_len;
					sconn_recv(&s[i], (uint32_t)wc[j].wr_id);
					s[i].credits++;
				}
			}
			if (is_server)
				sleep_ms(5); /* the slow consumer */
			if (now_ms() >= next) {
				long r = rss_kib();

				if (now_ms() < half) {
					if (r > peak_first)
						peak_first = r;
				} else if (r > peak_last) {
					peak_last = r;
				}
				next = now_ms() + 200;
			}
		}
	}
	printf("soak: busy %d s, %" PRIu64 " octets received; RSS peak %ld KiB "
	       "in the first half, %ld KiB in the second (idle %ld)\n", busy_s,
	       moved, peak_first, peak_last, rss_idle);
	if (moved == 0)
		die("soak: nothing moved");
	/* Bounded: the second half may not keep growing past the first. */
	if (peak_last > peak_first + peak_first / 10 + 4096)
		die("soak: RSS grew from %ld to %ld KiB while busy", peak_first,
		    peak_last);
	/* Let the other side finish its busy phase; then, quiet again for
	 * longer than wisp waits before it gives back a busy connection's
	 * large buffers (GLUE_IDLE_MS, at most twice 1 s), the idle RSS
	 * once more (a figure, not asserted); then tear down. */
	sleep_ms(2000 + 2500);
	{
		long r = rss_kib();

		printf("soak: idle again after the busy phase: RSS %ld KiB: "
		       "%.1f KiB per QP\n", r, (double)(r - rss0) / n);
	}
	for (unsigned i = 0; i < n; i++) {
		rdma_disconnect(s[i].id);
		rdma_destroy_qp(s[i].id);
		ibv_dereg_mr(s[i].mr);
		ibv_destroy_cq(s[i].cq);
		ibv_dealloc_pd(s[i].pd);
		free(s[i].buf);
	}
	/* Events may still come for the ids: drop them, bounded. */
	{
		struct rdma_cm_event *ev;

		while ((ev = next_event(200)))
			rdma_ack_cm_event(ev);
	}
	for (unsigned i = 0; i < n; i++)
		rdma_destroy_id(s[i].id);
	free(s);
	printf("soak: passed\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode, *ops;
	bool zero_window = false, resume = false;
	int stall_ms = 4000, busy_s = 5, opt, ret;
	unsigned nqp = 200;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "n:ZRW:S:G:F:")) != -1) {
		switch (opt) {
		case 'n':
			nqp = (unsigned)atoi(optarg);
			break;
		case 'Z':
			zero_window = true;
			break;
		case 'F':
			nfaults = atoi(optarg) > 0 ? atoi(optarg) : 1;
			break;
		case 'G':
			gate = optarg;
			break;
		case 'R':
			resume = true;
			break;
		case 'W':
			stall_ms = atoi(optarg);
			break;
		case 'S':
			busy_s = atoi(optarg);
			break;
		default:
			return 2;
		}
	}
	if (argc - optind != 5) {
		fprintf(stderr, "usage: fault_peer [-n N] [-Z [-R]] [-W MS] [-S S] [-G PREFIX] [-F N] "
			"server|client ADDR PORT good|victim|survivor|soak "
			"write|read|send\n");
		return 2;
	}
	is_server = strcmp(argv[optind], "server") == 0;
	opt_addr = argv[optind + 1];
	opt_port = argv[optind + 2];
	mode = argv[optind + 3];
	ops = argv[optind + 4];
	op = strcmp(ops, "write") == 0 ? OP_WRITE :
	     strcmp(ops, "read") == 0 ? OP_READ : OP_SEND;
	chan = rdma_create_event_channel();
	if (!chan)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (is_server && strcmp(mode, "soak") != 0)
		start_listen();
	if (strcmp(mode, "good") == 0)
		ret = mode_good();
	else if (strcmp(mode, "victim") == 0)
		ret = mode_victim();
	else if (strcmp(mode, "survivor") == 0)
		ret = mode_survivor(zero_window, resume, stall_ms);
	else if (strcmp(mode, "soak") == 0)
		ret = mode_soak(nqp, busy_s);
	else
		return 2;
	if (listen_id)
		rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(chan);
	return ret;
}
