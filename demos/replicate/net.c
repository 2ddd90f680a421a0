/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl: the verbs plumbing both roles share. One PD, one CQ and one
 * completion channel serve every QP of a job; completions name their QP
 * through the stream index in wr_id.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "repl.h"

int repl_verbose;
int repl_json;
int repl_progress_open;

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + ts.tv_nsec / 1000;
}

void die_msg(int code, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (repl_progress_open)
		putchar('\n');	/* end the progress line first */
	fflush(stdout);
	fprintf(stderr, "wisp-repl: %s\n", text);
	if (repl_json) {
		const char *c;

		/* scripts get a summary on failure too */
		printf("{\"result\":\"error\",\"exit\":%d,\"message\":\"", code);
		for (c = text; *c; c++) {
			if (*c == '"' || *c == '\\')
				putchar('\\');
			if ((unsigned char)*c >= 0x20)
				putchar(*c);
		}
		printf("\"}\n");
	}
	fflush(stdout);
	exit(code);
}

void warn_msg(const char *fmt, ...)
{
	va_list ap;

	fputs("wisp-repl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *mode_name(enum repl_mode m)
{
	static const char *const names[] = {
		[MODE_WRITE] = "write", [MODE_READ] = "read", [MODE_SEND] = "send",
	};

	return names[m];
}

/* "1G", "512k", "100M" (bytes; powers of 1024); "1gbit", "100mbit"
 * (bits per second, powers of 1000) for --limit. */
int parse_size(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return -EINVAL;
	if (!strcasecmp(end, "gbit"))
		v *= 1e9 / 8;
	else if (!strcasecmp(end, "mbit"))
		v *= 1e6 / 8;
	else if (!strcasecmp(end, "kbit"))
		v *= 1e3 / 8;
	else if (*end == 'k' || *end == 'K')
		v *= 1024;
	else if (*end == 'm' || *end == 'M')
		v *= 1024 * 1024;
	else if (*end == 'g' || *end == 'G')
		v *= 1024.0 * 1024 * 1024;
	else if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);

	if (!p)
		die_msg(EX_FAIL, "out of memory");
	return p;
}

int net_setup_verbs(struct net *n, struct ibv_context *verbs, int cqe)
{
	struct ibv_device_attr attr;

	if (n->verbs) {
		/* every stream must land on the same device */
		return n->verbs == verbs ? 0 : -EXDEV;
	}
	if (ibv_query_device(verbs, &attr))
		return -errno;
	if (cqe > attr.max_cqe)
		cqe = attr.max_cqe;
	n->verbs = verbs;
	n->pd = ibv_alloc_pd(verbs);
	if (!n->pd)
		return -errno;
	n->ch = ibv_create_comp_channel(verbs);
	if (!n->ch)
		return -errno;
	n->cq = ibv_create_cq(verbs, cqe, NULL, n->ch, 0);
	if (!n->cq)
		return -errno;
	n->cqe = cqe;
	if (ibv_req_notify_cq(n->cq, 0))
		return -errno;
	return 0;
}

int stream_create_qp(struct net *n, struct stream *s, uint32_t sq, uint32_t rq)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = n->cq,
		.recv_cq = n->cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = sq,
			.max_recv_wr = rq,
			.max_send_sge = 2,
			.max_recv_sge = 2,
		},
	};

	if (rdma_create_qp(s->id, n->pd, &qa))
		return -errno;
	return 0;
}

/* nrx receive messages (in send mode each with a chunk-sized data buffer
 * taken from rx_data), ntx send messages. */
int stream_alloc_msgs(struct net *n, struct stream *s, uint32_t nrx, uint32_t ntx,
		      char *rx_data, uint32_t chunk)
{
	uint32_t i;

	s->nrx = nrx;
	s->rx = xcalloc(nrx, sizeof(*s->rx));
	s->rx_mr = ibv_reg_mr(n->pd, s->rx, (size_t)nrx * sizeof(*s->rx),
			      IBV_ACCESS_LOCAL_WRITE);
	if (!s->rx_mr)
		return -errno;
	s->ntx = ntx;
	s->tx = xcalloc(ntx, sizeof(*s->tx));
	s->tx_mr = ibv_reg_mr(n->pd, s->tx, (size_t)ntx * sizeof(*s->tx), 0);
	if (!s->tx_mr)
		return -errno;
	s->tx_free = xcalloc(ntx, sizeof(*s->tx_free));
	for (i = 0; i < ntx; i++)
		s->tx_free[i] = ntx - 1 - i;
	s->ntx_free = ntx;
	for (i = 0; i < nrx; i++) {
		int rc = stream_post_recv(n, s, i,
			rx_data ? rx_data + (size_t)(s->rx_buf_first + i) * chunk : NULL,
			chunk);
		if (rc)
			return rc;
	}
	return 0;
}

/* Post receive i; in send mode with a chunk-sized data buffer from
 * n->data_mr behind the message. */
int stream_post_recv(struct net *n, struct stream *s, uint32_t i, char *data,
		     uint32_t chunk)
{
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)&s->rx[i], .length = sizeof(s->rx[i]),
		  .lkey = s->rx_mr->lkey },
	};
	struct ibv_recv_wr wr = {
		.wr_id = WR_ID(WK_RECV, s->idx, i),
		.sg_list = sge,
		.num_sge = 1,
	}, *bad;

	if (data) {
		sge[1].addr = (uintptr_t)data;
		sge[1].length = chunk;
		/* cppcheck-suppress unreadVariable ; read through wr.sg_list */
		sge[1].lkey = n->data_mr->lkey;
		wr.num_sge = 2;
	}
	if (ibv_post_recv(s->id->qp, &wr, &bad))
		return -errno;
	return 0;
}

/* A free send message's index; -ENOBUFS if none. */
int stream_tx_get(struct stream *s, uint32_t *idx)
{
	if (!s->ntx_free)
		return -ENOBUFS;
	*idx = s->tx_free[--s->ntx_free];
	return 0;
}

/* Post send message idx (signalled), with an optional second SGE. */
int stream_send(struct stream *s, uint32_t idx, const struct ibv_sge *extra)
{
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)&s->tx[idx], .length = sizeof(s->tx[idx]),
		  .lkey = s->tx_mr->lkey },
	};
	struct ibv_send_wr wr = {
		.wr_id = WR_ID(WK_SEND, s->idx, idx),
		.sg_list = sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	if (extra) {
		/* cppcheck-suppress unreadVariable ; read through wr.sg_list */
		sge[1] = *extra;
		wr.num_sge = 2;
	}
	if (ibv_post_send(s->id->qp, &wr, &bad))
		return -errno;
	return 0;
}

int stream_send_msg(struct stream *s, const struct msg *m)
{
	uint32_t idx;

	if (stream_tx_get(s, &idx))
		return -ENOBUFS;
	msg_encode(m, s->tx[idx].b);
	return stream_send(s, idx, NULL);
}

void stream_destroy(struct stream *s)
{
	if (s->id) {
		if (s->id->qp)
			rdma_destroy_qp(s->id);
		rdma_destroy_id(s->id);
	}
	if (s->rx_mr)
		ibv_dereg_mr(s->rx_mr);
	if (s->tx_mr)
		ibv_dereg_mr(s->tx_mr);
	free(s->rx);
	free(s->tx);
	free(s->tx_free);
	free(s->slots);
	free(s->offers);
	memset(s, 0, sizeof(*s));
}

void net_destroy(struct net *n)
{
	int i;

	for (i = 0; i < REPL_MAX_STREAMS; i++)
		if (n->st[i].id)
			stream_destroy(&n->st[i]);
	if (n->cq)
		ibv_destroy_cq(n->cq);
	if (n->ch)
		ibv_destroy_comp_channel(n->ch);
	if (n->pd)
		ibv_dealloc_pd(n->pd);
	n->cq = NULL;
	n->ch = NULL;
	n->pd = NULL;
	n->verbs = NULL;
	n->nstreams = 0;
}

static void drain_cq(struct net *n, void (*on_wc)(void *, struct ibv_wc *),
		     void *arg)
{
	struct ibv_wc wc[32];
	int k, i;

	while ((k = ibv_poll_cq(n->cq, 32, wc)) > 0)
		for (i = 0; i < k; i++)
			on_wc(arg, &wc[i]);
}

/* Wait up to timeout_ms for a CM event or completions and hand them out.
 * Returns 0, or -errno. */
int net_wait(struct net *n, int timeout_ms,
	     void (*on_cm)(void *, struct rdma_cm_event *),
	     void (*on_wc)(void *, struct ibv_wc *), void *arg)
{
	struct pollfd pfd[2] = {
		{ .fd = n->ec->fd, .events = POLLIN },
		{ .fd = n->ch ? n->ch->fd : -1, .events = POLLIN },
	};
	struct rdma_cm_event *ev;
	int rc;

	/* completions that arrived before the CQ was armed */
	if (n->cq)
		drain_cq(n, on_wc, arg);
	rc = poll(pfd, 2, timeout_ms);
	if (rc < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[1].revents & POLLIN) {
		struct ibv_cq *cq;
		void *ctx;

		if (!ibv_get_cq_event(n->ch, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			if (ibv_req_notify_cq(cq, 0))
				return -errno;
		}
		drain_cq(n, on_wc, arg);
	}
	if (pfd[0].revents & POLLIN) {
		if (rdma_get_cm_event(n->ec, &ev))
			return -errno;
		on_cm(arg, ev);
	}
	return 0;
}
