/* SPDX-License-Identifier: MIT */
/*
 * rsocket_core.c - the sockets' table, their QP and buffers, the connect
 * data, completion processing, credits and waiting (rsocket_internal.h
 * describes the wire protocol).
 */
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rsocket_internal.h"

/* Local meaning of a send WR's id: its kind in bits 63-56, the octets of
 * the send ring it holds in the rest. Receives carry their message slot
 * with RSK_WR_RECV set. */
enum {
	RSK_WR_DATA = 1,          /* the Write of a data transfer */
	RSK_WR_MSG,               /* the Send after it */
	RSK_WR_CTRL,              /* a control Write or Send */
	RSK_WR_DIRECT,            /* riowrite's bare Write */
};
#define RSK_WR_RECV  (1ULL << 63)

static uint64_t wr_id(unsigned int kind, uint32_t len)
{
	return ((uint64_t)kind << 56) | len;
}

/* ---- the table --------------------------------------------------- */

static pthread_mutex_t tbl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **tbl;
static int tbl_len;

static int tbl_insert(struct rsk *rs)
{
	int ret = 0;

	pthread_mutex_lock(&tbl_lock);
	if (rs->fd >= tbl_len) {
		int n = tbl_len ? tbl_len : 64;
		struct rsk **t;

		while (n <= rs->fd)
			n *= 2;
		t = realloc(tbl, (size_t)n * sizeof(*t));
		if (!t) {
			ret = -ENOMEM;
			goto out;
		}
		memset(t + tbl_len, 0, (size_t)(n - tbl_len) * sizeof(*t));
		tbl = t;
		tbl_len = n;
	}
	tbl[rs->fd] = rs;
out:
	pthread_mutex_unlock(&tbl_lock);
	return ret;
}

struct rsk *rsk_get(int fd)
{
	struct rsk *rs = NULL;

	pthread_mutex_lock(&tbl_lock);
	if (fd >= 0 && fd < tbl_len)
		rs = tbl[fd];
	if (rs)
		pthread_mutex_lock(&rs->lock);
	pthread_mutex_unlock(&tbl_lock);
	if (!rs)
		errno = EBADF;
	return rs;
}

bool rsk_known(int fd)
{
	bool known;

	pthread_mutex_lock(&tbl_lock);
	known = fd >= 0 && fd < tbl_len && tbl[fd];
	pthread_mutex_unlock(&tbl_lock);
	return known;
}

void rsk_put(struct rsk *rs)
{
	pthread_mutex_unlock(&rs->lock);
}

static void *page_alloc(size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	void *p;

	len = (len + (size_t)page - 1) / (size_t)page * (size_t)page;
	if (posix_memalign(&p, (size_t)page, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

struct rsk *rsk_new(int domain, struct rdma_cm_id *id,
		    const struct rsk *inherit)
{
	struct rsk *rs = calloc(1, sizeof(*rs));
	int ret;

	if (!rs) {
		errno = ENOMEM;
		return NULL;
	}
	if (!id && rdma_create_id(NULL, &id, rs, RDMA_PS_TCP))
		goto err_free;
	rs->id = id;
	id->context = rs;
	rs->fd = id->channel->fd;
	rs->domain = domain;
	pthread_mutex_init(&rs->lock, NULL);
	pthread_cond_init(&rs->cond, NULL);
	if (inherit) {
		rs->sbuf_size = inherit->sbuf_size;
		rs->rbuf_size = inherit->rbuf_size;
		rs->sq_size = inherit->sq_size;
		rs->rq_size = inherit->rq_size;
		rs->sq_inline = inherit->sq_inline;
		rs->iomap_size = inherit->iomap_size;
		rs->fl_flags = inherit->fl_flags;
		rs->fd_flags = inherit->fd_flags;
		rs->tcp_nodelay = inherit->tcp_nodelay;
		rs->so_keepalive = inherit->so_keepalive;
		rs->keepalive_time = inherit->keepalive_time;
	} else {
		rs->sbuf_size = RSK_DEF_WMEM;
		rs->rbuf_size = RSK_DEF_MEM;
		rs->sq_size = RSK_DEF_SQSIZE;
		rs->rq_size = RSK_DEF_RQSIZE;
		rs->sq_inline = RSK_DEF_INLINE;
	}
	ret = tbl_insert(rs);
	if (ret) {
		errno = -ret;
		goto err_id;
	}
	return rs;
err_id:
	rdma_destroy_id(id);
err_free:
	free(rs);
	return NULL;
}

void rsk_free_iomaps(struct rsk *rs)
{
	while (rs->iomaps) {
		struct rsk_iomr *m = rs->iomaps;

		rs->iomaps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
}

void rsk_destroy(struct rsk *rs)
{
	struct rdma_cm_id *id = rs->id;

	pthread_mutex_lock(&tbl_lock);
	tbl[rs->fd] = NULL;
	pthread_mutex_unlock(&tbl_lock);
	pthread_mutex_unlock(&rs->lock);

	rsk_free_iomaps(rs);
	if (id->qp)
		rdma_destroy_qp(id);
	if (rs->cq) {
		ibv_ack_cq_events(rs->cq, rs->unacked);
		ibv_destroy_cq(rs->cq);
	}
	if (rs->cch)
		ibv_destroy_comp_channel(rs->cch);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->tmr)
		ibv_dereg_mr(rs->tmr);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->tlist);
	free(rs->rmsg_len);
	rdma_destroy_id(id);
	pthread_cond_destroy(&rs->cond);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

/* ---- endpoint ---------------------------------------------------- */

int rsk_value_to_scale(int value, int bits)
{
	return value <= (1 << (bits - 1)) ?
	       value : (1 << (bits - 1)) | (value >> bits);
}

int rsk_scale_to_value(int value, int bits)
{
	return value <= (1 << (bits - 1)) ?
	       value : (value & ~(1 << (bits - 1))) << bits;
}

static uint16_t clamp_qp(uint16_t v, int max)
{
	if (v > max)
		return (uint16_t)max;
	if (v < RSK_QP_MIN)
		return RSK_QP_MIN;
	return v;
}

static void set_sizes(struct rsk *rs)
{
	struct ibv_device_attr attr;
	int max = RSK_QP_MAX;

	if (!ibv_query_device(rs->id->verbs, &attr) && attr.max_qp_wr < max)
		max = attr.max_qp_wr;
	rs->sq_size = clamp_qp(rs->sq_size, max);
	rs->rq_size = clamp_qp(rs->rq_size, max - RSK_RQ_SPARE);
	if (rs->sbuf_size < 2 * RSK_SNDLOWAT)
		rs->sbuf_size = 2 * RSK_SNDLOWAT;
	if (rs->rbuf_size < 2 * RSK_SNDLOWAT)
		rs->rbuf_size = 2 * RSK_SNDLOWAT;
	rs->rbuf_size &= ~1U;
	/* iWARP: messages are inline Sends of 4 octets. */
	if (rs->sq_inline < RSK_MSG_SIZE)
		rs->sq_inline = RSK_MSG_SIZE;
}

static int create_cq(struct rsk *rs)
{
	int n = rs->sq_size + rs->rq_size + RSK_RQ_SPARE;
	int flags;

	rs->cch = ibv_create_comp_channel(rs->id->verbs);
	if (!rs->cch)
		return -errno;
	/* Waits poll(2) the fd; the reads never block. */
	flags = fcntl(rs->cch->fd, F_GETFL);
	if (flags < 0 || fcntl(rs->cch->fd, F_SETFL, flags | O_NONBLOCK))
		return -errno;
	rs->cq = ibv_create_cq(rs->id->verbs, n, rs, rs->cch, 0);
	if (!rs->cq)
		return -errno;
	return 0;
}

static int create_qp(struct rsk *rs)
{
	struct ibv_qp_init_attr a;
	uint32_t inl = rs->sq_inline;

	for (;;) {
		memset(&a, 0, sizeof(a));
		a.qp_context = rs;
		a.send_cq = rs->cq;
		a.recv_cq = rs->cq;
		a.qp_type = IBV_QPT_RC;
		a.sq_sig_all = 1;
		a.cap.max_send_wr = rs->sq_size;
		a.cap.max_recv_wr = rs->rq_size + RSK_RQ_SPARE;
		a.cap.max_send_sge = 2;
		a.cap.max_recv_sge = 1;
		a.cap.max_inline_data = inl;
		if (!rdma_create_qp(rs->id, NULL, &a))
			break;
		/* A device offering less inline data than asked: less. */
		if (errno != EINVAL || inl <= RSK_MSG_SIZE)
			return -errno;
		inl = inl / 2 < RSK_MSG_SIZE ? RSK_MSG_SIZE : inl / 2;
	}
	rs->sq_inline = (uint16_t)(a.cap.max_inline_data > 0xffff ?
				   0xffff : a.cap.max_inline_data);
	if (rs->sq_inline < RSK_MSG_SIZE)
		return -ENOTSUP;
	return 0;
}

/* The send ring is followed by a slot per control WR, for SGEs when
 * they cannot go inline. */
#define RSK_CTRL_SLOT sizeof(struct rsk_sge)

static int post_recv(struct rsk *rs, int slot)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;

	sge.addr = (uintptr_t)(rs->rbuf + rs->rbuf_size) +
		   (uint64_t)slot * RSK_MSG_SIZE;
	sge.length = RSK_MSG_SIZE;
	sge.lkey = rs->rmr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = RSK_WR_RECV | (uint64_t)slot;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(rs->id->qp, &wr, &bad) ? -errno : 0;
}

static int init_bufs(struct rsk *rs)
{
	struct ibv_pd *pd = rs->id->pd;
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	size_t tlen;

	rs->rq_posted = rs->rq_size + RSK_RQ_SPARE;
	rs->rmsg_cap = rs->rq_posted + 1;
	rs->rmsg_len = calloc((size_t)rs->rmsg_cap, sizeof(*rs->rmsg_len));
	rs->sbuf = page_alloc(rs->sbuf_size + RSK_CTRL_MAX * RSK_CTRL_SLOT);
	tlen = RSK_SGL_SIZE * sizeof(struct rsk_sge) +
	       (size_t)rs->iomap_size * sizeof(struct rsk_iomap);
	rs->tlist = page_alloc(tlen);
	rs->rbuf = page_alloc(rs->rbuf_size +
			      (size_t)rs->rq_posted * RSK_MSG_SIZE);
	if (!rs->rmsg_len || !rs->sbuf || !rs->tlist || !rs->rbuf)
		return -ENOMEM;
	rs->smr = ibv_reg_mr(pd, rs->sbuf,
			     rs->sbuf_size + RSK_CTRL_MAX * RSK_CTRL_SLOT,
			     IBV_ACCESS_LOCAL_WRITE);
	rs->tmr = ibv_reg_mr(pd, rs->tlist, tlen, rw);
	rs->rmr = ibv_reg_mr(pd, rs->rbuf,
			     rs->rbuf_size +
			     (size_t)rs->rq_posted * RSK_MSG_SIZE, rw);
	if (!rs->smr || !rs->tmr || !rs->rmr)
		return -errno;
	rs->tsgl = (struct rsk_sge *)rs->tlist;
	if (rs->iomap_size)
		rs->tiomap = (struct rsk_iomap *)(rs->tsgl + RSK_SGL_SIZE);

	rs->sbuf_avail = rs->sbuf_size;
	rs->sqe_avail = rs->sq_size - RSK_CTRL_MAX;
	rs->ctrl_avail = RSK_CTRL_MAX;
	/* The peer gets the first half of rbuf in the connect data, the
	 * second with the first credit update. */
	rs->rbuf_free_off = rs->rbuf_size / 2;
	rs->rbuf_avail = rs->rbuf_size / 2;
	rs->rseq_comp = rs->rq_size / 2;
	return 0;
}

int rsk_create_ep(struct rsk *rs)
{
	int ret;

	set_sizes(rs);
	ret = create_cq(rs);
	if (!ret)
		ret = create_qp(rs);
	if (!ret)
		ret = init_bufs(rs);
	for (int i = 0; !ret && i < rs->rq_posted; i++)
		ret = post_recv(rs, i);
	return ret;
}

void rsk_conn_data_fill(const struct rsk *rs, struct rsk_conn_data *cd)
{
	memset(cd, 0, sizeof(*cd));
	cd->version = RSK_CONN_VERSION;
	cd->flags = RSK_FLAG_IOMAP |
		    (__BYTE_ORDER == __BIG_ENDIAN ? RSK_FLAG_NET : 0);
	cd->credits = htobe16(rs->rq_size);
	cd->iomap_size = (uint8_t)rsk_value_to_scale(rs->iomap_size, 8);
	cd->target_sgl.addr = htobe64((uintptr_t)rs->tsgl);
	cd->target_sgl.key = htobe32(rs->tmr->rkey);
	cd->target_sgl.length = htobe32(RSK_SGL_SIZE);
	cd->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	cd->data_buf.key = htobe32(rs->rmr->rkey);
	cd->data_buf.length = htobe32(rs->rbuf_size / 2);
}

int rsk_conn_data_save(struct rsk *rs, const void *pdata, size_t len)
{
	struct rsk_conn_data cd;
	bool net;

	if (!pdata || len < sizeof(cd))
		return -ENOTSUP;
	memcpy(&cd, pdata, sizeof(cd));
	if (cd.version != RSK_CONN_VERSION)
		return -ENOTSUP;
	rs->remote_sgl.addr = be64toh(cd.target_sgl.addr);
	rs->remote_sgl.key = be32toh(cd.target_sgl.key);
	rs->remote_sgl.length = be32toh(cd.target_sgl.length);
	if (!rs->remote_sgl.length || rs->remote_sgl.length > 0xffff)
		return -EPROTO;
	rs->remote_sge = 1;
	net = cd.flags & RSK_FLAG_NET;
	rs->swap = net != (__BYTE_ORDER == __BIG_ENDIAN);
	if (cd.flags & RSK_FLAG_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr +
			sizeof(struct rsk_sge) * rs->remote_sgl.length;
		rs->remote_iomap.length =
			(uint32_t)rsk_scale_to_value(cd.iomap_size, 8);
		rs->remote_iomap.key = rs->remote_sgl.key;
	}
	rs->tsgl[0].addr = be64toh(cd.data_buf.addr);
	rs->tsgl[0].key = be32toh(cd.data_buf.key);
	rs->tsgl[0].length = be32toh(cd.data_buf.length);
	rs->sseq_comp = be16toh(cd.credits);
	rs->state = RSK_CONNECTED;
	rs->rd_open = rs->wr_open = true;
	return 0;
}

static void set_blocking(int fd, bool nonblock)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0)
		return;
	flags = nonblock ? flags | O_NONBLOCK : flags & ~O_NONBLOCK;
	(void)fcntl(fd, F_SETFL, flags);
}

int rsk_connect_step(struct rsk *rs)
{
	struct rdma_cm_event *ev;
	int err;

	if (rs->state != RSK_CONNECTING)
		return rs->state == RSK_CONNECTED ? 0 : -ENOTCONN;
	if (rs->id->event) {
		rdma_ack_cm_event(rs->id->event);
		rs->id->event = NULL;
	}
	if (rdma_get_cm_event(rs->id->channel, &ev))
		return errno == EAGAIN ? -EINPROGRESS : -errno;
	rs->id->event = ev;
	if (ev->event == RDMA_CM_EVENT_ESTABLISHED && !ev->status) {
		int ret = rsk_conn_data_save(rs, ev->param.conn.private_data,
					 ev->param.conn.private_data_len);
		if (!ret) {
			set_blocking(rs->fd, false);
			return 0;
		}
		err = -ret;
	} else if (ev->event == RDMA_CM_EVENT_REJECTED) {
		err = ECONNREFUSED;
	} else {
		err = ev->status < 0 ? -ev->status : ev->status;
		if (!err)
			err = ECONNREFUSED;
	}
	rs->state = RSK_CONNECT_ERROR;
	rs->err = err;
	return -err;
}

/* ---- posting ----------------------------------------------------- */

static int post(struct rsk *rs, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(rs->id->qp, wr, &bad) ? -errno : 0;
}

/* An RDMA Write of sge[0..n) to addr/rkey followed by the inline Send of
 * msg, both in one post. */
/* An RDMA Write of sge[0..n) to the peer's addr/rkey. */
static void write_wr(struct ibv_send_wr *w, uint64_t id, struct ibv_sge *sge,
		     int n, int flags, uint64_t addr, uint32_t rkey)
{
	memset(w, 0, sizeof(*w));
	w->wr_id = id;
	w->sg_list = sge;
	w->num_sge = n;
	w->opcode = IBV_WR_RDMA_WRITE;
	w->send_flags = flags;
	w->wr.rdma.remote_addr = addr;
	w->wr.rdma.rkey = rkey;
}

static int post_write_msg(struct rsk *rs, struct ibv_sge *sge, int n,
			  int flags, uint64_t addr, uint32_t rkey,
			  uint64_t id_write, uint64_t id_msg, uint32_t msg)
{
	struct ibv_send_wr w, s;
	struct ibv_sge ms = {
		.addr = (uintptr_t)&msg, .length = sizeof(msg), .lkey = 0,
	};

	write_wr(&w, id_write, sge, n, flags, addr, rkey);
	memset(&s, 0, sizeof(s));
	w.next = &s;
	s.wr_id = id_msg;
	s.sg_list = &ms;
	s.num_sge = 1;
	s.opcode = IBV_WR_SEND;
	s.send_flags = IBV_SEND_INLINE;
	return post(rs, &w);
}

static int post_msg(struct rsk *rs, uint32_t msg)
{
	struct ibv_send_wr s;
	struct ibv_sge ms = {
		.addr = (uintptr_t)&msg, .length = sizeof(msg), .lkey = 0,
	};

	memset(&s, 0, sizeof(s));
	s.wr_id = wr_id(RSK_WR_CTRL, 0);
	s.sg_list = &ms;
	s.num_sge = 1;
	s.opcode = IBV_WR_SEND;
	s.send_flags = IBV_SEND_INLINE;
	return post(rs, &s);
}

/* The target SGL entry in use, read once: the peer writes it. */
static struct rsk_sge tsge_read(struct rsk *rs)
{
	struct rsk_sge s;

	rsk_peer_fence();
	memcpy(&s, (const void *)&rs->tsgl[rs->tsge], sizeof(s));
	return s;
}

int rsk_post_data(struct rsk *rs, struct ibv_sge *sge, int n, uint32_t len,
		  int flags)
{
	struct rsk_sge t = tsge_read(rs);
	struct rsk_sge *e = &rs->tsgl[rs->tsge];

	rs->sseq_no++;
	rs->sqe_avail -= 2;
	rs->sbuf_avail -= len;
	/* Ours before the Write: the peer rewrites an entry only once its
	 * half is used up. */
	e->addr = t.addr + len;
	e->length = t.length - len;
	if (!e->length)
		rs->tsge = (rs->tsge + 1) % RSK_SGL_SIZE;
	return post_write_msg(rs, sge, n, flags, t.addr, t.key,
			      wr_id(RSK_WR_DATA, len), wr_id(RSK_WR_MSG, 0),
			      rsk_msg(RSK_OP_DATA, len));
}

int rsk_post_direct(struct rsk *rs, struct ibv_sge *sge, int n, uint32_t len,
		    int flags, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr w;

	rs->sqe_avail--;
	rs->sbuf_avail -= len;
	write_wr(&w, wr_id(RSK_WR_DIRECT, len), sge, n, flags, addr, rkey);
	return post(rs, &w);
}

int rsk_stage(struct rsk *rs, uint32_t len, struct ibv_sge sge[2])
{
	uint32_t first = rs->sbuf_size - rs->sbuf_head;

	sge[0].addr = (uintptr_t)(rs->sbuf + rs->sbuf_head);
	sge[0].lkey = rs->smr->lkey;
	if (len <= first) {
		sge[0].length = len;
		rs->sbuf_head = (rs->sbuf_head + len) % rs->sbuf_size;
		return 1;
	}
	sge[0].length = first;
	sge[1].addr = (uintptr_t)rs->sbuf;
	sge[1].length = len - first;
	sge[1].lkey = rs->smr->lkey;
	rs->sbuf_head = len - first;
	return 2;
}

int rsk_post_iomap(struct rsk *rs, const struct rsk_iomap *iom, int index)
{
	struct ibv_sge sge[2];
	int n = 1, flags = 0;
	uint32_t len = sizeof(*iom);

	/* Counted as a data transfer, as rdma-core does. */
	rs->sseq_no++;
	rs->sqe_avail -= 2;
	rs->sbuf_avail -= len;
	if (rs->sq_inline >= len) {
		sge[0].addr = (uintptr_t)iom;
		sge[0].length = len;
		sge[0].lkey = 0;
		flags = IBV_SEND_INLINE;
	} else {
		n = rsk_stage(rs, len, sge);
		memcpy((void *)(uintptr_t)sge[0].addr, iom, sge[0].length);
		if (n == 2)
			memcpy((void *)(uintptr_t)sge[1].addr,
			       (const uint8_t *)iom + sge[0].length,
			       sge[1].length);
	}
	return post_write_msg(rs, sge, n, flags,
			      rs->remote_iomap.addr +
			      (uint64_t)index * sizeof(*iom),
			      rs->remote_iomap.key,
			      wr_id(RSK_WR_DATA, len), wr_id(RSK_WR_MSG, 0),
			      rsk_msg(RSK_OP_IOMAP_SGL, (uint32_t)index));
}

int rsk_post_ctrl(struct rsk *rs, uint32_t ctrl)
{
	rs->ctrl_avail--;
	return post_msg(rs, rsk_msg(RSK_OP_CTRL, ctrl));
}

/* ---- credits ----------------------------------------------------- */

static bool give_credits(struct rsk *rs)
{
	return rs->state == RSK_CONNECTED && rs->ctrl_avail >= 2 &&
	       (rs->rbuf_avail >= rs->rbuf_size / 2 ||
		(int16_t)(rs->rseq_no - rs->rseq_comp) >= 0);
}

/* Hand the peer the next half of the receive buffer: its SGE written
 * into the peer's target SGL, then the credits. */
static int send_buffer(struct rsk *rs, uint32_t msg)
{
	uint32_t half = rs->rbuf_size / 2;
	struct rsk_sge s = {
		.addr = (uintptr_t)(rs->rbuf + rs->rbuf_free_off),
		.key = rs->rmr->rkey,
		.length = half,
	};
	struct ibv_sge sge = { .length = sizeof(s) };
	uint64_t raddr = rs->remote_sgl.addr +
			 (uint64_t)rs->remote_sge * sizeof(struct rsk_sge);
	int flags = 0;

	if (rs->swap) {
		s.addr = bswap_64(s.addr);
		s.key = bswap_32(s.key);
		s.length = bswap_32(s.length);
	}
	if (rs->sq_inline >= sizeof(s)) {
		sge.addr = (uintptr_t)&s;
		flags = IBV_SEND_INLINE;
	} else {
		/* At most RSK_CTRL_MAX / 2 of these are outstanding and
		 * they complete in order: a rotating slot is free. */
		uint8_t *slot = rs->sbuf + rs->sbuf_size +
				(rs->ctrl_seq++ % RSK_CTRL_MAX) * RSK_CTRL_SLOT;

		memcpy(slot, &s, sizeof(s));
		sge.addr = (uintptr_t)slot;
		sge.lkey = rs->smr->lkey;
	}
	rs->ctrl_avail -= 2;
	rs->rbuf_avail -= half;
	rs->rbuf_free_off = (rs->rbuf_free_off + half) % rs->rbuf_size;
	rs->remote_sge = (rs->remote_sge + 1) % (int)rs->remote_sgl.length;
	return post_write_msg(rs, &sge, 1, flags, raddr, rs->remote_sgl.key,
			      wr_id(RSK_WR_CTRL, 0), wr_id(RSK_WR_CTRL, 0), msg);
}

static void send_credits(struct rsk *rs)
{
	uint32_t msg = rsk_msg(RSK_OP_SGL, (uint16_t)(rs->rseq_no +
						       rs->rq_size));
	int ret;

	rs->rseq_comp = rs->rseq_no + rs->rq_size / 2;
	if (rs->rbuf_avail >= rs->rbuf_size / 2) {
		ret = send_buffer(rs, msg);
	} else {
		rs->ctrl_avail--;
		ret = post_msg(rs, msg);
	}
	if (ret) {
		rs->state = RSK_ERROR;
		rs->err = -ret;
	}
}

/* ---- completions ------------------------------------------------- */

static void fail(struct rsk *rs, int err)
{
	if (rs->state == RSK_CONNECTED) {
		rs->state = RSK_ERROR;
		rs->err = err;
	}
	rs->rd_open = rs->wr_open = false;
}

static void on_msg(struct rsk *rs, uint32_t msg)
{
	uint32_t data = rsk_msg_data(msg);

	switch (rsk_msg_op(msg)) {
	case RSK_OP_DATA:
		if (data > rs->rbuf_size ||
		    (rs->rmsg_tail + 1) % rs->rmsg_cap == rs->rmsg_head) {
			fail(rs, EPROTO);
			return;
		}
		rs->rmsg_len[rs->rmsg_tail] = data;
		rs->rmsg_tail = (rs->rmsg_tail + 1) % rs->rmsg_cap;
		return;
	case RSK_OP_SGL:
		rs->sseq_comp = (uint16_t)data;
		return;
	case RSK_OP_IOMAP_SGL:
		/* The entry is in our table already (Write before Send). */
		return;
	case RSK_OP_CTRL:
		if (data == RSK_CTRL_SHUTDOWN && rs->wr_open) {
			rs->rd_open = false;
			return;
		}
		if (data == RSK_CTRL_SHUTDOWN || data == RSK_CTRL_DISCONNECT) {
			rs->rd_open = rs->wr_open = false;
			if (rs->state == RSK_CONNECTED)
				rs->state = RSK_DISCONNECTED;
		}
		return;
	default:
		/* Reserved opcodes: rdma-core never sends them. */
		fail(rs, EPROTO);
		return;
	}
}

static void on_send(struct rsk *rs, const struct ibv_wc *wc)
{
	uint32_t len = (uint32_t)(wc->wr_id & 0xffffffffu);

	switch (wc->wr_id >> 56) {
	case RSK_WR_DATA:
	case RSK_WR_DIRECT:
		rs->sqe_avail++;
		rs->sbuf_avail += len;
		break;
	case RSK_WR_MSG:
		rs->sqe_avail++;
		break;
	default:
		rs->ctrl_avail++;
		break;
	}
	if (wc->status != IBV_WC_SUCCESS)
		fail(rs, EIO);
}

static void poll_cq(struct rsk *rs)
{
	struct ibv_wc wc[16];
	int n;

	if (!rs->cq)
		return;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			int slot;
			uint32_t msg;

			if (!(wc[i].wr_id & RSK_WR_RECV)) {
				on_send(rs, &wc[i]);
				continue;
			}
			if (wc[i].status != IBV_WC_SUCCESS) {
				/* Flushed: the connection is gone without
				 * a DISCONNECT message. */
				rs->rd_open = rs->wr_open = false;
				if (rs->state == RSK_CONNECTED)
					rs->state = RSK_DISCONNECTED;
				continue;
			}
			slot = (int)(wc[i].wr_id & 0xffff);
			memcpy(&msg, rs->rbuf + rs->rbuf_size +
			       (size_t)slot * RSK_MSG_SIZE, sizeof(msg));
			if (rs->state == RSK_CONNECTED &&
			    post_recv(rs, slot))
				fail(rs, EIO);
			on_msg(rs, msg);
		}
	}
}

void rsk_progress(struct rsk *rs)
{
	poll_cq(rs);
	if (give_credits(rs))
		send_credits(rs);
}

void rsk_drain_events(struct rsk *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	if (!rs->cch)
		return;
	while (!ibv_get_cq_event(rs->cch, &cq, &ctx)) {
		ibv_ack_cq_events(cq, 1);
		rs->cq_armed = false;
	}
}

bool rsk_arm(struct rsk *rs)
{
	if (!rs->cq || rs->cq_armed)
		return true;
	ibv_req_notify_cq(rs->cq, 0);
	rs->cq_armed = true;
	return false;
}

int rsk_wait(struct rsk *rs, bool nonblock, bool (*test)(struct rsk *rs))
{
	for (;;) {
		struct pollfd p;

		rsk_progress(rs);
		if (test(rs))
			return 0;
		if (nonblock)
			return -EAGAIN;
		if (!rs->cq)
			return -ENOTCONN;
		if (rs->cq_waiter) {
			pthread_cond_wait(&rs->cond, &rs->lock);
			continue;
		}
		if (!rs->cq_armed) {
			/* Armed, then polled again before sleeping. */
			ibv_req_notify_cq(rs->cq, 0);
			rs->cq_armed = true;
			continue;
		}
		rs->cq_waiter = true;
		p.fd = rs->cch->fd;
		p.events = POLLIN;
		pthread_mutex_unlock(&rs->lock);
		(void)poll(&p, 1, -1);
		pthread_mutex_lock(&rs->lock);
		rsk_drain_events(rs);
		rs->cq_waiter = false;
		pthread_cond_broadcast(&rs->cond);
	}
}

/* ---- conditions -------------------------------------------------- */

bool rsk_can_send(struct rsk *rs)
{
	return rs->state == RSK_CONNECTED && rs->wr_open &&
	       rs->sqe_avail >= 2 && rs->sbuf_avail >= RSK_SNDLOWAT &&
	       rs->sseq_no != rs->sseq_comp && tsge_read(rs).length != 0;
}

bool rsk_can_send_or_closed(struct rsk *rs)
{
	return rsk_can_send(rs) || rs->state != RSK_CONNECTED ||
	       !rs->wr_open;
}

bool rsk_have_data(struct rsk *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

bool rsk_have_data_or_closed(struct rsk *rs)
{
	return rsk_have_data(rs) || rs->state != RSK_CONNECTED ||
	       !rs->rd_open;
}

bool rsk_sends_done(struct rsk *rs)
{
	return rs->state != RSK_CONNECTED ||
	       (rs->ctrl_avail == RSK_CTRL_MAX &&
		rs->sqe_avail == rs->sq_size - RSK_CTRL_MAX);
}

bool rsk_ctrl_ready(struct rsk *rs)
{
	return rs->ctrl_avail > 0 || rs->state != RSK_CONNECTED;
}
