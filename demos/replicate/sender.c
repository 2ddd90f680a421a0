/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl send: the sender.
 *
 * Why WRITE + SEND credits (the default) beats the other two patterns
 * at high RTT: goodput ~ window * chunk / (how long a slot is busy).
 *  - WRITE + credits: WRITE and DATA go out back to back (RTT/2), the
 *    CREDIT returns (RTT/2): one RTT per slot cycle.
 *  - READ-pull: OFFER (RTT/2), READ Request and Response (RTT), CREDIT
 *    to free the sender's buffer (RTT/2): two RTTs per slot cycle, so
 *    half the goodput from the same window; and at most ORD READs out
 *    per QP (siw clamps to 128, many NICs 16 or fewer).
 *  - SEND/RECV: one RTT like WRITE, but a SEND that finds no receive
 *    posted is fatal on iWARP, so it needs the same credits, and every
 *    posted receive pins a whole chunk; it matches WRITE at best.
 * The three are measured side by side (docs/replication.md).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>
#include <xxhash.h>
#include "repl.h"

enum fstate { FS_WAIT_NEED, FS_SENDING, FS_WAIT_VERIFY, FS_WAIT_COMMIT, FS_DONE };

struct sfile {
	char *abs;
	char *rel;
};

struct sjob {
	const struct opts *o;
	struct net n;
	uint32_t window, chunk, inflight_max;
	uint64_t dest_key;	/* names the job's destination to the receiver */
	struct sfile *files;
	size_t nfiles, cap;
	/* current file */
	int fd;
	const char *abs;
	uint64_t file_id, size, nchunks, cursor, outstanding;
	uint8_t *need;
	uint64_t *retry;
	uint64_t nretry;
	uint64_t *slot_chunk;
	enum fstate state;
	XXH128_hash_t src_hash;	/* of the source, taken after DONE */
	/* the source's hash as its chunks are first read, in order: chunks
	 * [0, hnext) are in hstate; st_open is the source as opened */
	XXH3_state_t *hstate;
	uint64_t hnext;
	struct stat st_open;
	bool image;		/* a block device: its stat tells no change */
	int64_t corrupt_chunk;	/* test hook: damage its first sending */
	/* pacing, stats */
	double tokens, t_tokens;
	uint64_t bytes_total, bytes_done, bytes_sent, chunks_sent, chunks_bad;
	uint64_t chunks_repaired, files_skipped, files_sent, chunks_credited;
	uint64_t rtt_us, rtt_min_us, ping_out;
	double t_start, t_last_event, t_ping, t_progress;
	double t_data, data_s;	/* this file's first chunk; all files' */
	int tty;
};

static void add_file(struct sjob *j, const char *abs, const char *rel)
{
	if (j->nfiles == j->cap) {
		j->cap = j->cap ? 2 * j->cap : 64;
		j->files = realloc(j->files, j->cap * sizeof(*j->files));
		if (!j->files)
			die_msg(EX_FAIL, "out of memory");
	}
	j->files[j->nfiles].abs = strdup(abs);
	j->files[j->nfiles].rel = strdup(rel);
	j->nfiles++;
}

/* A disk image's size: a block device's st_size is 0. */
static uint64_t image_size(int fd, const char *abs)
{
	uint64_t size;

	if (ioctl(fd, BLKGETSIZE64, &size))
		die_msg(EX_SOURCE, "%s: size of the block device: %s", abs,
			strerror(errno));
	return size;
}

static void walk(struct sjob *j, const char *abs, const char *rel)
{
	struct stat st;
	DIR *d;
	struct dirent *e;
	int top = !strchr(rel, '/');

	if (lstat(abs, &st))
		die_msg(EX_SOURCE, "%s: %s", abs, strerror(errno));
	/* SRC may name a disk by a link (/dev/disk/by-id/...) */
	if (top && S_ISLNK(st.st_mode)) {
		struct stat t;

		if (!stat(abs, &t) && S_ISBLK(t.st_mode))
			st = t;
	}
	if (S_ISREG(st.st_mode)) {
		add_file(j, abs, rel);
		j->bytes_total += st.st_size;
		return;
	}
	if (S_ISBLK(st.st_mode) && top) {
		/* a disk image, sent as a regular file; only as SRC itself,
		 * never the devices inside a folder */
		int fd = open(abs, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			die_msg(EX_SOURCE, "%s: %s", abs, strerror(errno));
		add_file(j, abs, rel);
		j->bytes_total += image_size(fd, abs);
		close(fd);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		warn_msg("%s: not a regular file or folder, skipped", abs);
		return;
	}
	d = opendir(abs);
	if (!d)
		die_msg(EX_SOURCE, "%s: %s", abs, strerror(errno));
	while ((e = readdir(d))) {
		char a[PATH_MAX], r[PATH_MAX];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(a, sizeof(a), "%s/%s", abs, e->d_name);
		snprintf(r, sizeof(r), "%s/%s", rel, e->d_name);
		walk(j, a, r);
	}
	closedir(d);
}

static void send_ctl(struct sjob *j, const struct msg *m)
{
	int rc = stream_send_msg(&j->n.st[0], m);

	if (rc)
		die_msg(EX_LOST, "cannot post a send: %s", strerror(-rc));
}

/* One CM event, at most timeout_ms away (connection setup only). */
static struct rdma_cm_event *wait_cm(struct sjob *j, int timeout_ms)
{
	struct pollfd p = { .fd = j->n.ec->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, timeout_ms) <= 0 || rdma_get_cm_event(j->n.ec, &ev))
		return NULL;
	return ev;
}

/* A reject that carries a wisp-repl reply: say why. */
static void rejected(const char *host, int port, struct rdma_cm_event *ev,
		     uint16_t asked)
{
	struct conn_rep rp;
	enum wire_check c = rep_decode(ev->param.conn.private_data,
				       ev->param.conn.private_data_len, &rp);

	if (c == WIRE_V1 || c == WIRE_VERSION)
		die_msg(EX_CONNECT, "%s:%d: the receiver speaks %s (protocol %u here)",
			host, port, c == WIRE_VERSION ? "another wisp-repl protocol version"
			: "wisp-repl protocol 1, in host byte order", REPL_VERSION);
	if (c != WIRE_OK)
		die_msg(EX_CONNECT, "%s:%d: connection refused", host, port);
	switch (rp.reason) {
	case REJ_BUSY:
		die_msg(EX_CONNECT, "%s:%d: the receiver is busy with another job, for another destination (a rerun for the same destination takes over from a run that died); try again when it is done",
			host, port);
	case REJ_VERSION:
		die_msg(EX_CONNECT, "%s:%d: the receiver speaks wisp-repl protocol %u and turned away protocol %u: install the same wisp-repl on both hosts",
			host, port, rp.version, asked);
	case REJ_BAD_REQUEST:
		die_msg(EX_CONNECT, "%s:%d: the receiver refused the job's parameters",
			host, port);
	default:
		die_msg(EX_CONNECT, "%s:%d: receiver refused the job: %s", host,
			port, rp.status ? strerror((int)rp.status) : "no reason given");
	}
}

static void cm_fail(const char *host, int port, const char *what,
		    struct rdma_cm_event *ev, uint16_t asked)
{
	int st = ev ? ev->status : ETIMEDOUT;

	if (ev && ev->event == RDMA_CM_EVENT_REJECTED)
		rejected(host, port, ev, asked);
	if (st < 0)
		st = -st;
	die_msg(EX_CONNECT, "%s:%d: %s: %s", host, port, what,
		ev ? (st ? strerror(st) : rdma_event_str(ev->event))
		   : "timed out");
}

/* Connect stream i; fills its slots from the accept private data. */
static void connect_stream(struct sjob *j, int i, uint64_t nonce,
			   struct sockaddr *dst)
{
	const struct opts *o = j->o;
	struct stream *s = &j->n.st[i];
	struct rdma_cm_event *ev;
	struct ibv_device_attr attr;
	struct conn_req rq = {
		.magic = REPL_MAGIC, .version = REPL_VERSION, .stream = i,
		.nstreams = o->streams, .mode = o->mode, .chunk = o->chunk,
		.window = j->window, .nonce = nonce, .dest = j->dest_key,
	};
	struct conn_rep rp;
	unsigned char rqw[REPL_REQ_LEN];
	struct rdma_conn_param cp = {
		.private_data = rqw, .private_data_len = sizeof(rqw),
		.retry_count = 7, .rnr_retry_count = 7,
	};
	uint32_t per = j->window / o->streams, cnt, k;
	enum wire_check wc;
	int rc;

	/* test hook: as a sender of another protocol version would */
	if (getenv("WISP_REPL_TEST_VERSION"))
		rq.version = (uint16_t)atoi(getenv("WISP_REPL_TEST_VERSION"));
	req_encode(&rq, rqw);
	s->idx = i;
	if (rdma_create_id(j->n.ec, &s->id, NULL, RDMA_PS_TCP))
		die_msg(EX_FAIL, "rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(s->id, NULL, dst, o->timeout_ms))
		die_msg(EX_CONNECT, "%s: %s", o->host, strerror(errno));
	ev = wait_cm(j, o->timeout_ms);
	if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		cm_fail(o->host, o->port, "address", ev, rq.version);
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(s->id, o->timeout_ms))
		die_msg(EX_CONNECT, "%s: %s", o->host, strerror(errno));
	ev = wait_cm(j, o->timeout_ms);
	if (!ev || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		cm_fail(o->host, o->port, "route", ev, rq.version);
	rdma_ack_cm_event(ev);
	rc = net_setup_verbs(&j->n, s->id->verbs,
			     o->streams * (3 * j->window / o->streams +
					   REPL_SQ_EXTRA + REPL_RX_EXTRA));
	if (rc)
		die_msg(EX_FAIL, "verbs setup: %s", strerror(-rc));
	cnt = i == o->streams - 1 ? j->window - i * per : per;
	rc = stream_create_qp(&j->n, s, 2 * cnt + REPL_SQ_EXTRA,
			      cnt + REPL_RX_EXTRA);
	if (!rc)
		rc = stream_alloc_msgs(&j->n, s, cnt + REPL_RX_EXTRA,
				       2 * cnt + REPL_SQ_EXTRA, NULL, 0);
	if (rc)
		die_msg(EX_FAIL, "QP setup: %s", strerror(-rc));
	if (ibv_query_device(s->id->verbs, &attr))
		die_msg(EX_FAIL, "ibv_query_device: %s", strerror(errno));
	cp.initiator_depth = attr.max_qp_init_rd_atom;
	cp.responder_resources = attr.max_qp_rd_atom;
	if (rdma_connect(s->id, &cp))
		die_msg(EX_CONNECT, "%s:%d: %s", o->host, o->port, strerror(errno));
	ev = wait_cm(j, o->timeout_ms);
	if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED)
		cm_fail(o->host, o->port, "connect", ev, rq.version);
	wc = rep_decode(ev->param.conn.private_data,
			ev->param.conn.private_data_len, &rp);
	rdma_ack_cm_event(ev);
	if (wc != WIRE_OK)
		die_msg(EX_CONNECT, "%s:%d: the receiver's reply: %s", o->host,
			o->port, wire_check_str(wc));
	if (rp.chunk != o->chunk || !rp.slot_count)
		die_msg(EX_CONNECT, "%s:%d: not a wisp-repl receiver", o->host, o->port);
	s->established = 1;
	s->slot_first = rp.slot_first;
	s->slot_count = rp.slot_count;
	s->rkey = rp.rkey;
	s->remote = rp.addr;
	s->slots = xcalloc(rp.slot_count, sizeof(*s->slots));
	for (k = 0; k < rp.slot_count; k++)
		s->slots[k] = rp.slot_first + rp.slot_count - 1 - k;
	s->nslots_free = rp.slot_count;
}

static void setup(struct sjob *j)
{
	const struct opts *o = j->o;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	char port[16];
	uint64_t nonce = now_us() ^ ((uint64_t)getpid() << 40);
	uint32_t total = 0;
	int i, rc;

	snprintf(port, sizeof(port), "%d", o->port);
	rc = getaddrinfo(o->host, port, &hints, &ai);
	if (rc)
		die_msg(EX_CONNECT, "%s: %s", o->host, gai_strerror(rc));
	j->n.ec = rdma_create_event_channel();
	if (!j->n.ec)
		die_msg(EX_FAIL, "rdma_create_event_channel: %s", strerror(errno));
	j->n.nstreams = o->streams;
	for (i = 0; i < o->streams; i++) {
		connect_stream(j, i, nonce, ai->ai_addr);
		total += j->n.st[i].slot_count;
	}
	freeaddrinfo(ai);
	j->window = total;
	j->n.data_len = (size_t)total * j->chunk;
	j->n.data = aligned_alloc(4096, j->n.data_len);
	if (!j->n.data)
		die_msg(EX_FAIL, "out of memory for %u chunks", total);
	j->n.data_mr = ibv_reg_mr(j->n.pd, j->n.data, j->n.data_len,
				  IBV_ACCESS_LOCAL_WRITE |
				  (o->mode == MODE_READ ? IBV_ACCESS_REMOTE_READ : 0));
	if (!j->n.data_mr)
		die_msg(EX_FAIL, "ibv_reg_mr: %s", strerror(errno));
	j->slot_chunk = xcalloc(total, sizeof(*j->slot_chunk));
	j->inflight_max = total;
}

/* --- the event handlers -------------------------------------------- */

static void on_need(struct sjob *j, const struct msg *m)
{
	uint32_t i;

	if (m->file_id != j->file_id || m->nruns > REPL_RUNS)
		die_msg(EX_LOST, "protocol error: stray NEED");
	for (i = 0; i < m->nruns; i++) {
		const struct run *r = &m->u.runs[i];
		uint64_t c;

		if (r->first > j->nchunks || r->count > j->nchunks - r->first)
			die_msg(EX_LOST, "protocol error: NEED past the end");
		for (c = r->first; c < r->first + r->count; c++)
			j->need[c] = 1;
		if (r->first < j->cursor)
			j->cursor = r->first;
	}
}

static void on_credit(struct sjob *j, struct stream *s, const struct msg *m)
{
	uint64_t c;

	if (m->slot < s->slot_first || m->slot >= s->slot_first + s->slot_count ||
	    s->nslots_free >= s->slot_count || !j->outstanding)
		die_msg(EX_LOST, "protocol error: stray credit");
	c = j->slot_chunk[m->slot];
	s->slots[s->nslots_free++] = m->slot;
	j->outstanding--;
	if (m->status == ST_BAD) {
		j->chunks_bad++;
		j->retry[j->nretry++] = c;
		return;
	}
	j->bytes_done += (c + 1) * j->chunk > j->size ?
			 j->size - c * j->chunk : j->chunk;
	j->chunks_credited++;
	/* -v: what a test compares with the receiver's journal after a
	 * kill -9 (every credited chunk must be there) */
	if (repl_verbose)
		fprintf(stderr, "credit: sent %llu credited %llu\n",
			(unsigned long long)j->chunks_sent,
			(unsigned long long)j->chunks_credited);
}

/*
 * The whole source's XXH3-128, after DONE. The chunks read for sending in
 * order from the first are in hstate already; the rest are read now. If
 * the source is no longer the file as opened (size, mtime, ctime, inode:
 * any write() or rename over it changes one), all of it is read again, so
 * that a change during the transfer shows as a hash the receiver does not
 * have. A disk image is always read again: writes through a block device
 * change none of its node's times.
 */
static void source_hash(struct sjob *j, XXH128_hash_t *h)
{
	char *buf = j->n.data;	/* nothing in flight now */
	struct stat st;
	uint64_t off;

	if (j->image || stat(j->abs, &st) ||
	    st.st_size != j->st_open.st_size ||
	    st.st_ino != j->st_open.st_ino || st.st_dev != j->st_open.st_dev ||
	    st.st_mtim.tv_sec != j->st_open.st_mtim.tv_sec ||
	    st.st_mtim.tv_nsec != j->st_open.st_mtim.tv_nsec ||
	    st.st_ctim.tv_sec != j->st_open.st_ctim.tv_sec ||
	    st.st_ctim.tv_nsec != j->st_open.st_ctim.tv_nsec) {
		XXH3_128bits_reset(j->hstate);
		j->hnext = 0;
	}
	off = j->hnext * j->chunk;
	while (off < j->size) {
		ssize_t k = pread(j->fd, buf, j->chunk, off);

		if (k <= 0)
			die_msg(EX_SOURCE, "%s: %s", j->abs,
				k < 0 ? strerror(errno) : "shrank during the transfer");
		XXH3_128bits_update(j->hstate, buf, k);
		off += k;
	}
	/* all in: a later DONE (after a NEED) only digests again */
	j->hnext = j->nchunks;
	*h = XXH3_128bits_digest(j->hstate);
}

static void on_verify(struct sjob *j, const struct msg *m)
{
	XXH128_hash_t h;
	struct msg r = { .file_id = j->file_id };

	if (m->file_id != j->file_id || j->state != FS_WAIT_VERIFY)
		die_msg(EX_LOST, "protocol error: stray VERIFY");
	j->chunks_repaired += m->chunk;
	h = j->src_hash;
	if (h.low64 != m->hash || h.high64 != m->hash_hi) {
		r.type = M_ABORT;
		send_ctl(j, &r);
		die_msg(EX_INTEGRITY, "%s: changed during the transfer; the receiver keeps it partial, rerun to finish",
			j->abs);
	}
	r.type = M_COMMIT;
	send_ctl(j, &r);
	j->state = FS_WAIT_COMMIT;
}

static void window_from_rtt(struct sjob *j);

static void on_recv(struct sjob *j, struct stream *s, uint32_t i)
{
	struct msg m;

	msg_decode(s->rx[i].b, &m);
	switch (m.type) {
	case M_CREDIT:
		on_credit(j, s, &m);
		break;
	case M_NEED:
		on_need(j, &m);
		break;
	case M_NEED_END:
		if (m.file_id != j->file_id)
			die_msg(EX_LOST, "protocol error: stray NEED_END");
		if (m.status == ST_SKIP) {
			j->files_skipped++;
			j->bytes_done += j->size;
			j->state = FS_DONE;
		} else {
			j->state = FS_SENDING;
			j->t_data = now_s();
		}
		break;
	case M_VERIFY:
		on_verify(j, &m);
		break;
	case M_COMMITTED:
		j->files_sent++;
		j->state = FS_DONE;
		break;
	case M_ERROR:
		die_msg(m.status == ERR_TAKEN_OVER ? EX_LOST : EX_REMOTE,
			"receiver: %s", m.u.text);
	case M_PONG: {
		uint64_t rtt = now_us() - m.stamp;

		j->ping_out = 0;
		j->rtt_us = j->rtt_us ? (7 * j->rtt_us + rtt) / 8 : rtt;
		if (!j->rtt_min_us || rtt < j->rtt_min_us)
			j->rtt_min_us = rtt;
		window_from_rtt(j);
		break;
	}
	default:
		die_msg(EX_LOST, "protocol error: message type %u", m.type);
	}
	if (stream_post_recv(&j->n, s, i, NULL, 0))
		die_msg(EX_LOST, "cannot post a receive: %s", strerror(errno));
}

static void on_wc(void *arg, struct ibv_wc *wc)
{
	struct sjob *j = arg;
	struct stream *s = &j->n.st[WR_STREAM(wc->wr_id)];

	if (wc->status != IBV_WC_SUCCESS)
		die_msg(EX_LOST, "connection lost (stream %d: %s)", s->idx,
			ibv_wc_status_str(wc->status));
	j->t_last_event = now_s();
	if (WR_KIND(wc->wr_id) == WK_RECV)
		on_recv(j, s, WR_INDEX(wc->wr_id));
	else if (WR_KIND(wc->wr_id) == WK_SEND)
		s->tx_free[s->ntx_free++] = WR_INDEX(wc->wr_id);
}

static void on_cm(void *arg, struct rdma_cm_event *ev)
{
	enum rdma_cm_event_type t = ev->event;

	(void)arg;
	rdma_ack_cm_event(ev);
	die_msg(EX_LOST, "connection lost (%s)", rdma_event_str(t));
}

/* --- sending ---------------------------------------------------------- */

static int next_chunk(struct sjob *j, uint64_t *c)
{
	if (j->nretry) {
		*c = j->retry[--j->nretry];
		return 1;
	}
	while (j->cursor < j->nchunks && !j->need[j->cursor])
		j->cursor++;
	if (j->cursor == j->nchunks)
		return 0;
	*c = j->cursor;
	j->need[j->cursor++] = 0;
	return 1;
}

static void post_chunk(struct sjob *j, struct stream *s, uint64_t c)
{
	const struct opts *o = j->o;
	uint32_t slot = s->slots[--s->nslots_free], idx;
	uint64_t off = c * j->chunk;
	uint64_t len = j->size - off < j->chunk ? j->size - off : j->chunk;
	char *buf = j->n.data + (size_t)slot * j->chunk;
	struct msg mm = { 0 }, *m = &mm;
	struct ibv_sge data = { .addr = (uintptr_t)buf, .length = len,
				.lkey = j->n.data_mr->lkey };
	uint64_t got = 0;

	if (stream_tx_get(s, &idx))
		die_msg(EX_FAIL, "send queue exhausted");
	while (got < len) {
		ssize_t k = pread(j->fd, buf + got, len - got, off + got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			die_msg(EX_SOURCE, "%s: %s", j->abs,
				k < 0 ? strerror(errno) : "shrank during the transfer");
		got += k;
	}
	m->type = o->mode == MODE_READ ? M_OFFER : M_DATA;
	m->slot = slot;
	m->file_id = j->file_id;
	m->chunk = c;
	m->offset = off;
	m->len = len;
	m->hash = XXH3_64bits(buf, len);
	if (c == j->hnext && len == j->chunk) {
		XXH3_128bits_update(j->hstate, buf, len);
		j->hnext++;
	}
	if ((int64_t)c == j->corrupt_chunk) {
		/* WISP_REPL_TEST_CORRUPT: as if the chunk were damaged
		 * between our hash and the receiver's */
		buf[len / 2] ^= 0x5a;
		j->corrupt_chunk = -1;
	}
	m->addr = (uintptr_t)buf;
	m->rkey = j->n.data_mr->rkey;
	msg_encode(m, s->tx[idx].b);
	j->slot_chunk[slot] = c;
	if (o->mode == MODE_WRITE) {
		/* WRITE unsignalled, then the signalled SEND: RDMAP places
		 * the WRITE before the SEND completes at the receiver */
		struct ibv_send_wr w = {
			.wr_id = WR_ID(WK_WRITE, s->idx, slot),
			.sg_list = &data, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.wr.rdma = { .remote_addr = s->remote +
					(uint64_t)slot * j->chunk,
				     .rkey = s->rkey },
		}, *bad;

		if (ibv_post_send(s->id->qp, &w, &bad))
			die_msg(EX_LOST, "RDMA WRITE: %s", strerror(errno));
	}
	if (stream_send(s, idx, o->mode == MODE_SEND ? &data : NULL))
		die_msg(EX_LOST, "SEND: %s", strerror(errno));
	j->outstanding++;
	j->chunks_sent++;
	j->bytes_sent += len;
	if (o->limit > 0)
		j->tokens -= len;
}

/* Most free credits first, so streams share the load. */
static struct stream *pick_stream(struct sjob *j)
{
	struct stream *best = NULL;
	int i;

	for (i = 0; i < j->n.nstreams; i++) {
		struct stream *s = &j->n.st[i];

		if (s->nslots_free && s->ntx_free &&
		    (!best || s->nslots_free > best->nslots_free))
			best = s;
	}
	return best;
}

static void refill_tokens(struct sjob *j)
{
	double t = now_s(), cap = 2.0 * j->chunk;

	j->tokens += (t - j->t_tokens) * j->o->limit;
	if (j->tokens > cap)
		j->tokens = cap;
	j->t_tokens = t;
}

/* Returns ms until pacing allows the next chunk, or -1. */
static int pump(struct sjob *j)
{
	uint64_t c;

	while (j->state == FS_SENDING && j->outstanding < j->inflight_max) {
		struct stream *s;

		if (j->o->limit > 0) {
			refill_tokens(j);
			if (j->tokens < 0)
				return (int)(-j->tokens / j->o->limit * 1000) + 1;
		}
		s = pick_stream(j);
		if (!s || !next_chunk(j, &c))
			break;
		post_chunk(j, s, c);
	}
	return -1;
}

static void window_from_rtt(struct sjob *j)
{
	double rate = j->o->limit > 0 ? j->o->limit : 0, w;

	/* with a known rate: 2 x bandwidth-delay product, in chunks; the
	 * idle RTT, not the loaded one, which grows with the queue */
	if (!rate || !j->rtt_min_us || j->o->window)
		return;
	w = ceil(2 * rate * (j->rtt_min_us / 1e6) / j->chunk) + 2;
	if (w < 4)
		w = 4;
	if (w < j->window)
		j->inflight_max = (uint32_t)w;
}

static void fmt_bytes(char *b, size_t n, double v)
{
	const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(b, n, "%.1f %s", v, u[i]);
}

static void progress(struct sjob *j, int final)
{
	double t = now_s(), el = t - j->t_start, rate, eta;
	char done[32], total[32], r[32];

	if (!j->tty || (!final && t - j->t_progress < 0.2))
		return;
	j->t_progress = t;
	rate = el > 0 ? j->bytes_done / el : 0;
	eta = rate > 0 ? (j->bytes_total - j->bytes_done) / rate : 0;
	fmt_bytes(done, sizeof(done), j->bytes_done);
	fmt_bytes(total, sizeof(total), j->bytes_total);
	fmt_bytes(r, sizeof(r), rate);
	printf("\r%s / %s  %s/s  ETA %.0fs  RTT %.0fus  credits %llu/%u   %s",
	       done, total, r, eta, (double)j->rtt_us,
	       (unsigned long long)j->outstanding, j->inflight_max,
	       final ? "\n" : "");
	repl_progress_open = !final;
	fflush(stdout);
}

static void wait_events(struct sjob *j, int timeout_ms)
{
	int rc = net_wait(&j->n, timeout_ms, on_cm, on_wc, j);
	double t = now_s();

	if (rc)
		die_msg(EX_FAIL, "event loop: %s", strerror(-rc));
	if (t - j->t_last_event > j->o->timeout_ms / 1000.0)
		die_msg(EX_LOST, "receiver silent for %d s", j->o->timeout_ms / 1000);
	if (!j->ping_out && t - j->t_ping > 1.0) {
		struct msg p = { .type = M_PING, .stamp = now_us() };

		j->ping_out = 1;
		j->t_ping = t;
		send_ctl(j, &p);
	}
	progress(j, 0);
}

/*
 * The RTT the window is sized by (with --limit): a PING sent ahead of the
 * first OPEN, not waited for. The receiver answers messages in order, so
 * its PONG arrives before the NEED_END that lets data move, and the job
 * does not spend round trips on the probe (PINGs continue once a second:
 * the minimum is kept).
 */
static void probe_rtt(struct sjob *j)
{
	struct msg p = { .type = M_PING, .stamp = now_us() };

	j->ping_out = 1;
	j->t_ping = now_s();
	send_ctl(j, &p);
}

static void send_file(struct sjob *j, const struct sfile *f)
{
	struct msg m = { .type = M_OPEN };
	struct stat st;
	int n;

	j->abs = f->abs;
	j->fd = open(f->abs, O_RDONLY | O_CLOEXEC);
	if (j->fd < 0 || fstat(j->fd, &st))
		die_msg(EX_SOURCE, "%s: %s%s", f->abs, strerror(errno),
			errno == ENOENT ? " (source vanished)" : "");
	j->st_open = st;
	if (!j->hstate && !(j->hstate = XXH3_createState()))
		die_msg(EX_FAIL, "out of memory");
	XXH3_128bits_reset(j->hstate);
	j->hnext = 0;
	j->file_id++;
	j->size = st.st_size;
	j->image = S_ISBLK(st.st_mode);
	if (j->image) {
		/* a disk image: its size from the device; no mtime (the
		 * node's says nothing of the contents), so the receiver
		 * never skips it and the whole-file check alone tells
		 * versions apart; private to its owner on arrival */
		j->size = image_size(j->fd, f->abs);
		m.status = OPEN_IMAGE;
		st.st_mtim.tv_sec = st.st_mtim.tv_nsec = 0;
		st.st_mode = 0600;
	}
	j->nchunks = (j->size + j->chunk - 1) / j->chunk;
	j->need = xcalloc(j->nchunks, 1);
	j->retry = xcalloc(j->window + 1, sizeof(*j->retry));
	j->nretry = j->cursor = j->outstanding = 0;
	m.file_id = j->file_id;
	m.size = j->size;
	m.mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + st.st_mtim.tv_nsec;
	m.fmode = st.st_mode & 07777;
	n = snprintf(m.u.path, sizeof(m.u.path), "%s%s%s",
		     j->o->rdir ? j->o->rdir : "", j->o->rdir ? "/" : "", f->rel);
	if (n >= (int)sizeof(m.u.path))
		die_msg(EX_USAGE, "%s: path too long", f->rel);
	send_ctl(j, &m);
	j->state = FS_WAIT_NEED;
	while (j->state != FS_DONE) {
		int t = pump(j);

		if (j->state == FS_SENDING && !j->outstanding && !j->nretry &&
		    j->cursor >= j->nchunks) {
			struct msg d = { .type = M_DONE, .file_id = j->file_id };

			/* the file must still be there to be called complete */
			if (stat(f->abs, &st))
				die_msg(EX_SOURCE, "%s: %s (source vanished)", f->abs,
					strerror(errno));
			send_ctl(j, &d);
			j->state = FS_WAIT_VERIFY;
			j->data_s += now_s() - j->t_data;
			/* while the receiver reads its copy back */
			source_hash(j, &j->src_hash);
		}
		wait_events(j, t >= 0 && t < 100 ? t : 100);
	}
	close(j->fd);
	free(j->need);
	free(j->retry);
	j->need = NULL;
	j->retry = NULL;
}

static void finish(struct sjob *j)
{
	struct msg m = { .type = M_BYE };
	int i;

	send_ctl(j, &m);
	/* wait for every send to complete before leaving */
	while (j->n.st[0].ntx_free < j->n.st[0].ntx)
		wait_events(j, 100);
	for (i = 0; i < j->n.nstreams; i++)
		rdma_disconnect(j->n.st[i].id);
}

int run_sender(const struct opts *o)
{
	struct sjob j = { .o = o, .chunk = o->chunk, .fd = -1 };
	char *src = strdup(o->src), *base;
	size_t i;
	double el;

	repl_verbose = o->verbose;
	repl_json = o->json;
	while (strlen(src) > 1 && src[strlen(src) - 1] == '/')
		src[strlen(src) - 1] = 0;
	base = strrchr(src, '/');
	walk(&j, src, base ? base + 1 : src);
	{
		/* the job's destination, as its first OPEN will name it: a
		 * rerun for the same one may take over the receiver from a
		 * run that died without a word */
		char dest[REPL_PATH_MAX * 2];

		snprintf(dest, sizeof(dest), "%s%s%s", o->rdir ? o->rdir : "",
			 o->rdir ? "/" : "", base ? base + 1 : src);
		j.dest_key = XXH3_64bits(dest, strlen(dest));
		if (!j.dest_key)
			j.dest_key = 1;
	}
	j.window = o->window ? o->window : 64;
	if (j.window < (uint32_t)o->streams)
		j.window = o->streams;
	j.tty = isatty(STDOUT_FILENO);
	j.corrupt_chunk = getenv("WISP_REPL_TEST_CORRUPT") ?
			  atoll(getenv("WISP_REPL_TEST_CORRUPT")) : -1;
	j.t_start = j.t_last_event = j.t_tokens = now_s();
	setup(&j);
	probe_rtt(&j);
	for (i = 0; i < j.nfiles; i++)
		send_file(&j, &j.files[i]);
	finish(&j);
	progress(&j, 1);
	el = now_s() - j.t_start;
	if (o->json)
		printf("{\"result\":\"ok\",\"mode\":\"%s\",\"streams\":%d,"
		       "\"chunk\":%u,\"window\":%u,\"files\":%zu,"
		       "\"files_sent\":%llu,\"files_skipped\":%llu,"
		       "\"bytes\":%llu,\"bytes_sent\":%llu,\"chunks_sent\":%llu,"
		       "\"chunks_bad\":%llu,\"chunks_repaired\":%llu,"
		       "\"seconds\":%.3f,\"goodput_MBps\":%.1f,"
		       "\"data_seconds\":%.3f,\"rtt_us\":%llu,"
		       "\"rtt_min_us\":%llu,\"inflight_max\":%u}\n",
		       mode_name(o->mode), o->streams, j.chunk, j.window, j.nfiles,
		       (unsigned long long)j.files_sent,
		       (unsigned long long)j.files_skipped,
		       (unsigned long long)j.bytes_total,
		       (unsigned long long)j.bytes_sent,
		       (unsigned long long)j.chunks_sent,
		       (unsigned long long)j.chunks_bad,
		       (unsigned long long)j.chunks_repaired, el,
		       el > 0 ? j.bytes_sent / el / 1e6 : 0.0, j.data_s,
		       (unsigned long long)j.rtt_us,
		       (unsigned long long)j.rtt_min_us, j.inflight_max);
	for (i = 0; i < j.nfiles; i++) {
		free(j.files[i].abs);
		free(j.files[i].rel);
	}
	free(j.files);
	free(j.slot_chunk);
	if (j.hstate)
		XXH3_freeState(j.hstate);
	for (i = 0; i < REPL_MAX_STREAMS; i++)
		if (j.n.st[i].id)
			stream_destroy(&j.n.st[i]);
	ibv_dereg_mr(j.n.data_mr);
	free(j.n.data);
	net_destroy(&j.n);
	rdma_destroy_event_channel(j.n.ec);
	free(src);
	return EX_OK;
}
