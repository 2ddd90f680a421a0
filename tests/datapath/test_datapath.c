// SPDX-License-Identifier: MIT
/*
 * test_datapath.c - SEND/RECV, RDMA WRITE and RDMA READ between two QPs
 * over TCP loopback, through wisp's libibverbs. ctest runs this suite
 * once per engine (WISP_ENGINE=uring and =epoll).
 */
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "dp_util.h"
#include "../unit/test_util.h"

static const struct dp_opts defaults = {
	.prefs = { .mpa_rev = 2, .crc = true, .ird = 16, .ord = 16 },
};

/* The message sizes the issue names, around both segment boundaries. */
static void sizes(const struct dp_pair *p, uint32_t hdr, size_t *out,
		  int *n)
{
	uint32_t seg = p->mulpdu - hdr;   /* payload of a full segment */
	size_t s[] = { 0, 1, p->mulpdu - 1, p->mulpdu, p->mulpdu + 1,
		       seg - 1, seg, seg + 1, 2 * seg, 1 << 20, 64u << 20 };

	memcpy(out, s, sizeof(s));
	*n = sizeof(s) / sizeof(s[0]);
}

static void check_equal(const uint8_t *a, const uint8_t *b, size_t len,
			const char *what, size_t size)
{
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(a[i], b[i], "%s of %zu: octet %zu differs", what,
			     size, i);
}

Test(datapath, send_recv_sizes, .timeout = 120)
{
	struct dp_pair p;
	size_t sz[16];
	int n;

	dp_setup(&p, &defaults);
	sizes(&p, 18, sz, &n);
	for (int i = 0; i < n; i++) {
		uint8_t *src, *dst;
		struct ibv_mr *ms = dp_mr(p.a.pd, sz[i], 0, &src);
		struct ibv_mr *md = dp_mr(p.b.pd, sz[i] + 64,
					  IBV_ACCESS_LOCAL_WRITE, &dst);
		struct ibv_sge ss = { (uintptr_t)src, (uint32_t)sz[i], ms->lkey };
		struct ibv_sge ds = { (uintptr_t)dst, (uint32_t)sz[i] + 64,
				      md->lkey };
		struct ibv_send_wr sw = { .wr_id = 7, .sg_list = &ss,
					  .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bs;
		struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &ds,
					  .num_sge = 1 }, *br;
		struct ibv_wc wc;

		fill_pattern(src, sz[i], (uint32_t)i + 1);
		memset(dst, 0xee, sz[i] + 64);
		cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &br), 0);
		cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), 0);
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "send %zu: %s", sz[i],
			     ibv_wc_status_str(wc.status));
		cr_assert_eq(wc.opcode, IBV_WC_SEND);
		cr_assert_eq(wc.wr_id, 7);
		wc = dp_wait1(p.b.rcq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "recv %zu: %s", sz[i],
			     ibv_wc_status_str(wc.status));
		cr_assert_eq(wc.opcode, IBV_WC_RECV);
		cr_assert_eq(wc.wr_id, 9);
		cr_assert_eq(wc.byte_len, sz[i]);
		cr_assert_eq(wc.qp_num, p.b.qp->qp_num);
		check_equal(src, dst, sz[i], "SEND", sz[i]);
		for (int k = 0; k < 64; k++)
			cr_assert_eq(dst[sz[i] + (size_t)k], 0xee,
				     "nothing placed past the message");
		cr_log_info("SEND %zu octets: placed and verified", sz[i]);
		ibv_dereg_mr(ms);
		ibv_dereg_mr(md);
		free(src);
		free(dst);
	}
	dp_teardown(&p, &defaults);
}

/* WRITE (then READ back into a third buffer) at every size. */
Test(datapath, write_read_sizes, .timeout = 120)
{
	struct dp_pair p;
	size_t sz[16];
	int n;

	dp_setup(&p, &defaults);
	sizes(&p, 14, sz, &n);
	for (int i = 0; i < n; i++) {
		uint8_t *src, *dst, *back;
		struct ibv_mr *ms = dp_mr(p.a.pd, sz[i], 0, &src);
		struct ibv_mr *mb = dp_mr(p.a.pd, sz[i],
					  IBV_ACCESS_LOCAL_WRITE, &back);
		struct ibv_mr *md = dp_mr(p.b.pd, sz[i], DP_ALL_ACCESS, &dst);
		struct ibv_sge ss = { (uintptr_t)src, (uint32_t)sz[i], ms->lkey };
		struct ibv_sge bs_ = { (uintptr_t)back, (uint32_t)sz[i],
				       mb->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &ss,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct ibv_send_wr r = { .wr_id = 2, .sg_list = &bs_,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_READ,
					 .send_flags = IBV_SEND_SIGNALED };
		struct ibv_wc wc;

		fill_pattern(src, sz[i], (uint32_t)i + 100);
		memset(back, 0, sz[i]);
		w.wr.rdma.remote_addr = (uintptr_t)dst;
		w.wr.rdma.rkey = md->rkey;
		r.wr.rdma = w.wr.rdma;
		w.next = &r;
		cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0);
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS);
		cr_assert_eq(wc.opcode, IBV_WC_RDMA_WRITE);
		wc = dp_wait1(p.a.scq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "read %zu: %s", sz[i],
			     ibv_wc_status_str(wc.status));
		cr_assert_eq(wc.opcode, IBV_WC_RDMA_READ);
		cr_assert_eq(wc.wr_id, 2);
		check_equal(src, dst, sz[i], "WRITE", sz[i]);
		check_equal(src, back, sz[i], "READ", sz[i]);
		cr_log_info("WRITE + READ %zu octets: verified", sz[i]);
		ibv_dereg_mr(ms);
		ibv_dereg_mr(mb);
		ibv_dereg_mr(md);
		free(src);
		free(dst);
		free(back);
	}
	dp_teardown(&p, &defaults);
}

/* Six SGEs gathered on send and scattered on receive. */
Test(datapath, six_sge, .timeout = 60)
{
	static const uint32_t len[6] = { 1, 4000, 0, 70000, 13, 100001 };
	struct dp_pair p;
	uint8_t *src, *dst, *wdst;
	size_t total = 0;
	struct ibv_mr *ms, *md, *mw;
	struct ibv_sge ss[6], ds[6];
	struct ibv_send_wr sw = { 0 }, ww = { 0 }, *bs;
	struct ibv_recv_wr rw = { 0 }, *br;
	struct ibv_wc wc;
	size_t off = 0;

	dp_setup(&p, &defaults);
	for (int i = 0; i < 6; i++)
		total += len[i];
	ms = dp_mr(p.a.pd, total, 0, &src);
	md = dp_mr(p.b.pd, total, IBV_ACCESS_LOCAL_WRITE, &dst);
	mw = dp_mr(p.b.pd, total, DP_ALL_ACCESS, &wdst);
	fill_pattern(src, total, 66);
	memset(dst, 0, total);
	/* The receive list is the send list in reverse order of sizes. */
	for (int i = 0; i < 6; i++) {
		ss[i] = (struct ibv_sge){ (uintptr_t)src + off, len[i],
					  ms->lkey };
		off += len[i];
	}
	off = 0;
	for (int i = 0; i < 6; i++) {
		ds[i] = (struct ibv_sge){ (uintptr_t)dst + off, len[5 - i],
					  md->lkey };
		off += len[5 - i];
	}
	rw.sg_list = ds;
	rw.num_sge = 6;
	cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &br), 0);
	sw.sg_list = ss;
	sw.num_sge = 6;
	sw.opcode = IBV_WR_SEND;
	sw.send_flags = IBV_SEND_SIGNALED;
	ww = sw;
	ww.opcode = IBV_WR_RDMA_WRITE;
	ww.wr.rdma.remote_addr = (uintptr_t)wdst;
	ww.wr.rdma.rkey = mw->rkey;
	/* WRITE first: the SEND's receive completion then guarantees the
	 * WRITE is placed (RFC 5040 5.5); a WRITE's own completion at the
	 * requester says nothing about the responder's memory. */
	ww.next = &sw;
	cr_assert_eq(ibv_post_send(p.a.qp, &ww, &bs), 0);
	cr_assert_eq(dp_wait1(p.a.scq).status, IBV_WC_SUCCESS);
	cr_assert_eq(dp_wait1(p.a.scq).status, IBV_WC_SUCCESS);
	wc = dp_wait1(p.b.rcq);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_eq(wc.byte_len, total);
	check_equal(src, dst, total, "6-SGE SEND", total);
	check_equal(src, wdst, total, "6-SGE WRITE", total);
	cr_log_info("6-SGE SEND and WRITE of %zu octets verified", total);
	/* Seven SGEs are refused at post time. */
	sw.num_sge = 7;
	cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), EINVAL);
	cr_assert_eq(bs, &sw);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	ibv_dereg_mr(mw);
	free(src);
	free(dst);
	free(wdst);
	dp_teardown(&p, &defaults);
}

/* Inline sends: the buffer is reusable as soon as post returns, and
 * needs no registration. */
Test(datapath, inline_send, .timeout = 60)
{
	struct dp_pair p;
	uint8_t msg[64], *dst;
	struct ibv_mr *md;
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	md = dp_mr(p.b.pd, 64 * 100, IBV_ACCESS_LOCAL_WRITE, &dst);
	for (int i = 0; i < 100; i++) {
		struct ibv_sge ds = { (uintptr_t)dst + 64 * (size_t)i, 64,
				      md->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i, .sg_list = &ds,
					  .num_sge = 1 }, *br;

		cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &br), 0);
	}
	for (int i = 0; i < 100; i++) {
		struct ibv_sge ss = { (uintptr_t)msg, (uint32_t)(i % 64) + 1,
				      0 /* no lkey */ };
		struct ibv_send_wr sw = { .wr_id = (uint64_t)i, .sg_list = &ss,
					  .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_INLINE |
							IBV_SEND_SIGNALED }, *bs;

		memset(msg, i, sizeof(msg));
		cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), 0);
		memset(msg, 0xff, sizeof(msg));   /* reuse at once */
	}
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(dp_wait1(p.a.scq).status, IBV_WC_SUCCESS);
		wc = dp_wait1(p.b.rcq);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS);
		cr_assert_eq(wc.wr_id, (uint64_t)i, "in order");
		cr_assert_eq(wc.byte_len, (uint32_t)(i % 64) + 1);
		for (uint32_t k = 0; k < wc.byte_len; k++)
			cr_assert_eq(dst[64 * i + (int)k], (uint8_t)i);
	}
	cr_log_info("100 inline SENDs of 1..64 octets verified in order");
	/* Above the inline limit: refused. */
	{
		uint8_t big[128];
		struct ibv_sge ss = { (uintptr_t)big, sizeof(big), 0 };
		struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_INLINE }, *bs;

		cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), EINVAL);
	}
	ibv_dereg_mr(md);
	free(dst);
	dp_teardown(&p, &defaults);
}

/* Long runs of unsignaled WRITEs: the SQ drains through the signaled
 * WR that ends each run, and every octet arrives. */
Test(datapath, unsignaled_runs, .timeout = 120)
{
	struct dp_opts o = defaults;
	struct dp_pair p;
	uint8_t *src, *dst;
	struct ibv_mr *ms, *md;
	const int runs = 50, per = 255;
	const size_t chunk = 256;

	o.sq = 256;
	dp_setup(&p, &o);
	ms = dp_mr(p.a.pd, chunk * per, 0, &src);
	md = dp_mr(p.b.pd, chunk * per, DP_ALL_ACCESS, &dst);
	for (int r = 0; r < runs; r++) {
		fill_pattern(src, chunk * per, (uint32_t)r + 5);
		for (int i = 0; i < per; i++) {
			struct ibv_sge ss = { (uintptr_t)src + chunk * (size_t)i,
					      (uint32_t)chunk, ms->lkey };
			struct ibv_send_wr w = {
				.wr_id = (uint64_t)r,
				.sg_list = &ss, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = i == per - 1 ? IBV_SEND_SIGNALED : 0,
			}, *bad;

			w.wr.rdma.remote_addr = (uintptr_t)dst + chunk * (size_t)i;
			w.wr.rdma.rkey = md->rkey;
			cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0,
				     "run %d WR %d", r, i);
		}
		struct ibv_wc wc = dp_wait1(p.a.scq);

		cr_assert_eq(wc.status, IBV_WC_SUCCESS);
		cr_assert_eq(wc.wr_id, (uint64_t)r);
		/* Only the signaled WR completes. */
		cr_assert_eq(ibv_poll_cq(p.a.scq, 1, &wc), 0);
		/* A READ fences the run so its data can be checked. */
		{
			uint8_t *back;
			struct ibv_mr *mb = dp_mr(p.a.pd, chunk * per,
						  IBV_ACCESS_LOCAL_WRITE, &back);
			struct ibv_sge bs = { (uintptr_t)back,
					      (uint32_t)(chunk * per), mb->lkey };
			struct ibv_send_wr rd = { .sg_list = &bs, .num_sge = 1,
						  .opcode = IBV_WR_RDMA_READ,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			rd.wr.rdma.remote_addr = (uintptr_t)dst;
			rd.wr.rdma.rkey = md->rkey;
			cr_assert_eq(ibv_post_send(p.a.qp, &rd, &bad), 0);
			cr_assert_eq(dp_wait1(p.a.scq).status, IBV_WC_SUCCESS);
			check_equal(src, back, chunk * per, "unsignaled run",
				    chunk * per);
			ibv_dereg_mr(mb);
			free(back);
		}
	}
	cr_log_info("%d runs of %d unsignaled WRITEs + 1 signaled: verified",
		    runs, per - 1);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	free(src);
	free(dst);
	dp_teardown(&p, &o);
}

/* Many READs outstanding with ORD 1 and ORD 128: extra READs wait for
 * credit, none fails. */
static void reads_with_ord(uint8_t ord)
{
	struct dp_opts o = defaults;
	struct dp_pair p;
	const int nreads = 300;
	const size_t len = 3000;
	uint8_t *src, *dst;
	struct ibv_mr *ms, *md;

	o.ord = ord;
	o.ird = ord;
	o.prefs.ird = ord;
	o.prefs.ord = ord;
	o.sq = 512;
	dp_setup(&p, &o);
	ms = dp_mr(p.b.pd, len * nreads, IBV_ACCESS_REMOTE_READ, &src);
	md = dp_mr(p.a.pd, len * nreads, IBV_ACCESS_LOCAL_WRITE, &dst);
	fill_pattern(src, len * nreads, ord);
	memset(dst, 0, len * nreads);
	for (int i = 0; i < nreads; i++) {
		struct ibv_sge s = { (uintptr_t)dst + len * (size_t)i,
				     (uint32_t)len, md->lkey };
		struct ibv_send_wr w = { .wr_id = (uint64_t)i, .sg_list = &s,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_READ,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;

		w.wr.rdma.remote_addr = (uintptr_t)src + len * (size_t)i;
		w.wr.rdma.rkey = ms->rkey;
		cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0);
	}
	for (int i = 0; i < nreads; i++) {
		struct ibv_wc wc = dp_wait1(p.a.scq);

		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "read %d: %s", i,
			     ibv_wc_status_str(wc.status));
		cr_assert_eq(wc.wr_id, (uint64_t)i, "READs complete in order");
	}
	check_equal(src, dst, len * nreads, "READs", len * nreads);
	cr_log_info("%d READs posted at once with ORD %u: all verified",
		    nreads, ord);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	free(src);
	free(dst);
	dp_teardown(&p, &o);
}

Test(datapath, read_ord_1, .timeout = 60)
{
	reads_with_ord(1);
}

Test(datapath, read_ord_128, .timeout = 60)
{
	reads_with_ord(128);
}

/* An SRQ shared by the receive sides of three connections. */
Test(datapath, srq_shared, .timeout = 60)
{
	struct ibv_context *cb = dp_open();
	struct ibv_pd *pdb = ibv_alloc_pd(cb);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pdb, &sa);
	struct dp_pair p[3];
	struct dp_opts o = defaults;
	uint8_t *rbuf;
	struct ibv_mr *mr;
	const int per = 20;
	int got[3] = { 0 };

	cr_assert_not_null(srq);
	mr = dp_mr(pdb, 64 * 256, IBV_ACCESS_LOCAL_WRITE, &rbuf);
	for (int i = 0; i < 60; i++) {
		struct ibv_sge s = { (uintptr_t)rbuf + 256 * (size_t)i, 256,
				     mr->lkey };
		struct ibv_recv_wr w = { .wr_id = (uint64_t)i, .sg_list = &s,
					 .num_sge = 1 }, *bad;

		cr_assert_eq(ibv_post_srq_recv(srq, &w, &bad), 0);
	}
	o.srq_b = srq;
	o.pd_b = pdb;
	for (int k = 0; k < 3; k++) {
		struct ibv_context *ca = dp_open();

		memset(&p[k], 0, sizeof(p[k]));
		dp_side_init(&p[k].a, ca, &o, NULL, NULL);
		dp_side_init(&p[k].b, cb, &o, pdb, srq);
		dp_connect(&p[k], &o);
	}
	for (int i = 0; i < per; i++) {
		for (int k = 0; k < 3; k++) {
			uint8_t msg[8] = { (uint8_t)k, (uint8_t)i };
			struct ibv_sge s = { (uintptr_t)msg, 8, 0 };
			struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1,
						 .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_INLINE |
							IBV_SEND_SIGNALED }, *bad;

			cr_assert_eq(ibv_post_send(p[k].a.qp, &w, &bad), 0);
		}
	}
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < per; i++) {
			struct ibv_wc wc = dp_wait1(p[k].b.rcq);
			uint8_t *m = rbuf + 256 * wc.wr_id;

			cr_assert_eq(wc.status, IBV_WC_SUCCESS);
			cr_assert_eq(wc.byte_len, 8);
			cr_assert_eq(m[0], k, "landed for the right QP");
			cr_assert_eq(m[1], got[k], "in order per QP");
			got[k]++;
		}
		cr_assert_eq(dp_wait1(p[k].a.scq).status, IBV_WC_SUCCESS);
	}
	cr_log_info("3 QPs x %d SENDs through one SRQ: each landed once", per);
	for (int k = 0; k < 3; k++) {
		dp_side_fini(&p[k].a, false, true);
		dp_side_fini(&p[k].b, true, false);
	}
	cr_assert_eq(ibv_destroy_srq(srq), 0);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pdb);
	ibv_close_device(cb);
	free(rbuf);
}

/* Completion channel: req_notify_cq, solicited-only arming, events and
 * their acknowledgement. */
Test(datapath, completion_events, .timeout = 60)
{
	struct dp_pair p;
	uint8_t *dst;
	struct ibv_mr *md;
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	struct pollfd pfd;
	struct ibv_wc wc;

	dp_setup(&p, &defaults);
	md = dp_mr(p.b.pd, 4 * 64, IBV_ACCESS_LOCAL_WRITE, &dst);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)dst + 64 * (size_t)i, 64,
				     md->lkey };
		struct ibv_recv_wr w = { .wr_id = (uint64_t)i, .sg_list = &s,
					 .num_sge = 1 }, *bad;

		cr_assert_eq(ibv_post_recv(p.b.qp, &w, &bad), 0);
	}
	pfd.fd = p.b.ch->fd;
	pfd.events = POLLIN;
	/* Armed for solicited events only: a plain SEND raises nothing... */
	cr_assert_eq(ibv_req_notify_cq(p.b.rcq, 1), 0);
	for (int i = 0; i < 2; i++) {
		uint8_t msg[4] = { (uint8_t)i };
		struct ibv_sge s = { (uintptr_t)msg, 4, 0 };
		struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_INLINE |
						       IBV_SEND_SIGNALED |
						       (i ? IBV_SEND_SOLICITED : 0) },
				   *bad;

		cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0);
		cr_assert_eq(dp_wait1(p.a.scq).status, IBV_WC_SUCCESS);
		wc = dp_wait1(p.b.rcq);
		cr_assert_eq(wc.wr_id, (uint64_t)i);
		if (i == 0) {
			cr_assert_eq(poll(&pfd, 1, 200), 0,
				     "no event for an unsolicited SEND");
			continue;
		}
		/* ... a SEND with Solicited Event does. */
		cr_assert_eq(poll(&pfd, 1, DP_TIMEOUT_MS), 1);
		cr_assert_eq(ibv_get_cq_event(p.b.ch, &ev_cq, &ev_ctx), 0);
		cr_assert_eq(ev_cq, p.b.rcq);
		ibv_ack_cq_events(ev_cq, 1);
	}
	/* Not re-armed: nothing more. Armed for any: the next one fires. */
	cr_assert_eq(poll(&pfd, 1, 0), 0);
	cr_assert_eq(ibv_req_notify_cq(p.b.rcq, 0), 0);
	{
		uint8_t msg[4] = { 9 };
		struct ibv_sge s = { (uintptr_t)msg, 4, 0 };
		struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_INLINE }, *bad;

		cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0);
	}
	cr_assert_eq(ibv_get_cq_event(p.b.ch, &ev_cq, &ev_ctx), 0,
		     "blocking get_cq_event returns the event");
	cr_assert_eq(ev_cq, p.b.rcq);
	ibv_ack_cq_events(ev_cq, 1);
	cr_assert_eq(dp_wait1(p.b.rcq).wr_id, 2);
	cr_log_info("solicited-only arming skipped a plain SEND, fired on SE;"
		    " any-arming fired on the next SEND");
	ibv_dereg_mr(md);
	free(dst);
	dp_teardown(&p, &defaults);
}

/* A full SQ that is refilled the moment a completion is polled (what
 * perftest -D does with tx_depth = max_send_wr): the slot of a polled
 * WR is free by then, so no post fails with ENOMEM. */
Test(datapath, sq_refill_on_completion, .timeout = 60)
{
	struct dp_opts o = defaults;
	struct dp_pair p;
	uint8_t *src, *dst;
	struct ibv_mr *ms, *md;
	const int depth = 16, total = 3000;
	int posted = 0, done = 0;

	o.sq = depth;
	dp_setup(&p, &o);
	ms = dp_mr(p.a.pd, 4096, 0, &src);
	md = dp_mr(p.b.pd, 4096, DP_ALL_ACCESS, &dst);
	while (done < total) {
		while (posted < total && posted - done < depth) {
			struct ibv_sge s = { (uintptr_t)src, 4096, ms->lkey };
			struct ibv_send_wr w = { .wr_id = (uint64_t)posted,
						 .sg_list = &s, .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			w.wr.rdma.remote_addr = (uintptr_t)dst;
			w.wr.rdma.rkey = md->rkey;
			cr_assert_eq(ibv_post_send(p.a.qp, &w, &bad), 0,
				     "post %d with %d completed", posted, done);
			posted++;
		}
		cr_assert_eq(dp_wait1(p.a.scq).status, IBV_WC_SUCCESS);
		done++;
	}
	cr_log_info("%d WRITEs through an SQ of %d, refilled on each "
		    "completion: no post refused", total, depth);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	free(src);
	free(dst);
	dp_teardown(&p, &o);
}

/* ------------------------------------------------------------------ */
/* A receive flushed while the kernel is copying into it              */
/* ------------------------------------------------------------------ */

/*
 * userfaultfd holds the kernel's copy into a receive buffer for as long
 * as the test wants: the buffer's pages are missing, and the first write
 * to them (recvmsg's copy) waits until the handler thread supplies them.
 */
struct uffd_pause {
	int fd;
	long page;
	atomic_bool faulted;      /* a copy is waiting on a missing page */
	atomic_bool release;      /* supply the pages from now on */
	atomic_bool stop;
	pthread_t th;
};

static void *uffd_main(void *arg)
{
	struct uffd_pause *u = arg;

	while (!atomic_load(&u->stop)) {
		struct pollfd pfd = { .fd = u->fd, .events = POLLIN };
		struct uffd_msg msg;
		struct uffdio_zeropage zp = { 0 };

		if (poll(&pfd, 1, 10) != 1 ||
		    read(u->fd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		atomic_store(&u->faulted, true);
		while (!atomic_load(&u->release))
			usleep(1000);
		zp.range.start = msg.arg.pagefault.address &
				 ~(uint64_t)(u->page - 1);
		zp.range.len = (uint64_t)u->page;
		ioctl(u->fd, UFFDIO_ZEROPAGE, &zp);
	}
	return NULL;
}

/* Missing pages at [buf, buf + len) whose first write waits; false if
 * userfaultfd is not available to this process. */
static bool uffd_pause_start(struct uffd_pause *u, void *buf, size_t len)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)buf, .len = len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	memset(u, 0, sizeof(*u));
	u->page = sysconf(_SC_PAGESIZE);
	u->fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (u->fd < 0)
		return false;
	if (ioctl(u->fd, UFFDIO_API, &api) || ioctl(u->fd, UFFDIO_REGISTER, &reg)) {
		close(u->fd);
		return false;
	}
	cr_assert_eq(pthread_create(&u->th, NULL, uffd_main, u), 0);
	return true;
}

static void uffd_pause_stop(struct uffd_pause *u)
{
	atomic_store(&u->release, true);
	atomic_store(&u->stop, true);
	pthread_join(u->th, NULL);
	close(u->fd);
}

/* Polls b's receive CQ until told to stop: the thread that receives on
 * the socket itself (glue_conn_recv_now), or that leaves it to the
 * engine; either way the copy waits on the missing page. */
struct rx_poller {
	struct ibv_cq *cq;
	atomic_bool stop;
	atomic_int n;
	struct ibv_wc wc[4];
	pthread_t th;
};

static void *rx_poll_main(void *arg)
{
	struct rx_poller *r = arg;

	while (!atomic_load(&r->stop)) {
		struct ibv_wc wc;

		if (ibv_poll_cq(r->cq, 1, &wc) == 1 && atomic_load(&r->n) < 4) {
			r->wc[atomic_load(&r->n)] = wc;
			atomic_fetch_add(&r->n, 1);
		}
	}
	return NULL;
}

enum flush_by { FLUSH_BY_BAD_SEND, FLUSH_BY_DISCONNECT };

struct flusher {
	struct ibv_qp *qp;
	enum flush_by how;
	struct ibv_mr *mr;
	pthread_t th;
};

static void *flush_main(void *arg)
{
	struct flusher *f = arg;
	uint8_t b[16] = { 0 };
	/* A send whose lkey names no MR: a local protection error, and
	 * with it the QP enters ERROR and flushes everything posted. */
	struct ibv_sge s = { (uintptr_t)b, sizeof(b), f->mr->lkey ^ 0xff };
	struct ibv_send_wr w = { .wr_id = 77, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (f->how == FLUSH_BY_DISCONNECT)
		wisp_qp_disconnect(f->qp);
	else
		ibv_post_send(f->qp, &w, &bad);
	return NULL;
}

/*
 * Issue 11 item 6: a receive WR whose buffer the kernel is still writing
 * (recvmsg, on a polling thread or the engine) is flushed by another
 * thread, by a send that fails on the posting thread or an orderly
 * disconnect on the engine. Its completion must not reach the
 * application before the copy has ended: the application would reuse or
 * free a buffer the kernel is writing. The copy is held on a missing
 * page (userfaultfd) while the flush is tried.
 *
 * Only the kernel's copy must be the one held: the first octets of each
 * FPDU come through the core's staging buffer and are copied in user
 * space, under the QP's lock. So a large message goes first (after
 * one, the core reads just 64 octets of the next FPDU into staging), the
 * buffer's first page is present (those octets land there), and the
 * pages held are those the rest of the FPDU goes to, straight from the
 * socket.
 */
static void flush_during_copy(enum flush_by how)
{
	const size_t len = 64 * 1024;
	struct dp_pair p;
	struct uffd_pause u;
	struct rx_poller r = { 0 };
	struct flusher f = { 0 };
	uint8_t *src, *dst;
	struct ibv_mr *ms, *md;
	struct ibv_wc wc[4];
	long page = sysconf(_SC_PAGESIZE);
	int got = 0, early = 0;

	dp_setup(&p, &defaults);
	if (p.mulpdu < 4 * (uint32_t)page)
		cr_skip_test("MULPDU %u: FPDUs too small for the buffer's "
			     "pages to be written by recvmsg alone", p.mulpdu);
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(dst, MAP_FAILED);
	memset(dst, 0, (size_t)page);
	if (!uffd_pause_start(&u, dst + page, len - (size_t)page)) {
		munmap(dst, len);
		cr_skip_test("userfaultfd is not available here (%s): the copy "
			     "cannot be held", strerror(errno));
	}
	md = ibv_reg_mr(p.b.pd, dst, len, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(md);
	ms = dp_mr(p.a.pd, len, 0, &src);
	fill_pattern(src, len, 6);
	{
		/* The large message before: its buffer is a's own. */
		uint8_t *warm;
		struct ibv_mr *mw = dp_mr(p.b.pd, 8192, IBV_ACCESS_LOCAL_WRITE,
					  &warm);
		struct ibv_sge ds = { (uintptr_t)warm, 8192, mw->lkey };
		struct ibv_recv_wr rw = { .wr_id = 4, .sg_list = &ds,
					  .num_sge = 1 }, *br;
		struct ibv_sge ss = { (uintptr_t)src, 8192, ms->lkey };
		struct ibv_send_wr sw = { .wr_id = 3, .sg_list = &ss,
					  .num_sge = 1, .opcode = IBV_WR_SEND },
				   *bs;

		cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &br), 0);
		cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), 0);
		cr_assert_eq(dp_wait1(p.b.rcq).status, IBV_WC_SUCCESS);
		ibv_dereg_mr(mw);
		free(warm);
	}
	{
		struct ibv_sge ds = { (uintptr_t)dst, (uint32_t)len, md->lkey };
		struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = &ds,
					  .num_sge = 1 }, *br;
		struct ibv_sge ss = { (uintptr_t)src, (uint32_t)len, ms->lkey };
		struct ibv_send_wr sw = { .wr_id = 6, .sg_list = &ss,
					  .num_sge = 1, .opcode = IBV_WR_SEND },
				   *bs;

		cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &br), 0);
		r.cq = p.b.rcq;
		cr_assert_eq(pthread_create(&r.th, NULL, rx_poll_main, &r), 0);
		cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), 0);
	}
	for (int i = 0; i < DP_TIMEOUT_MS && !atomic_load(&u.faulted); i++)
		usleep(1000);
	cr_assert(atomic_load(&u.faulted), "the copy reached the buffer");

	/* The copy is held: flush from another thread, give it time. */
	f.qp = p.b.qp;
	f.how = how;
	f.mr = md;
	cr_assert_eq(pthread_create(&f.th, NULL, flush_main, &f), 0);
	usleep(300 * 1000);
	early = atomic_load(&r.n);
	for (int k; (k = ibv_poll_cq(p.b.rcq, 4, wc)) > 0;)
		early += k;
	cr_expect_eq(early, 0, "no completion of the receive while the "
		     "kernel writes its buffer (got %d)", early);

	/* Let the copy end: now the receive completes (flushed, or done
	 * if its message was whole by then). */
	atomic_store(&u.release, true);
	pthread_join(f.th, NULL);
	atomic_store(&r.stop, true);
	pthread_join(r.th, NULL);
	got = atomic_load(&r.n) + early;
	if (!got) {
		wc[0] = dp_wait1(p.b.rcq);
		got = 1;
	} else if (atomic_load(&r.n)) {
		wc[0] = r.wc[0];
	}
	cr_assert_eq(wc[0].wr_id, 5);
	cr_assert(wc[0].status == IBV_WC_WR_FLUSH_ERR ||
		  wc[0].status == IBV_WC_SUCCESS, "%s",
		  ibv_wc_status_str(wc[0].status));
	cr_log_info("%s during the copy: the receive completed (%s) only "
		    "after it", how == FLUSH_BY_DISCONNECT ? "disconnect" :
		    "failed send", ibv_wc_status_str(wc[0].status));
	uffd_pause_stop(&u);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	free(src);
	munmap(dst, len);
	dp_teardown(&p, &defaults);
}

Test(datapath, flush_during_copy_by_failed_send, .timeout = 60)
{
	flush_during_copy(FLUSH_BY_BAD_SEND);
}

Test(datapath, flush_during_copy_by_disconnect, .timeout = 60)
{
	flush_during_copy(FLUSH_BY_DISCONNECT);
}

/*
 * A thread whose ibv_poll_cq finds the CQ empty receives itself, and the
 * completions it makes for that CQ go straight into its wc array while
 * the ring is empty, up to the num_entries it gave; the rest go through
 * the ring (verbs_cq.c, "A poller's own completions"). Bursts of SENDs,
 * each carrying its number, polled with 1, 2, 3 and 5 entries at a time:
 * every completion comes once, in order, with its own contents, whether
 * it was handed over or went through the ring; with one CQ for sends and
 * receives too (the receiver's own SENDs' completions between).
 */
#define BURST 12
#define BURSTS 40

static void poll_sizes_keep_order(bool one_cq)
{
	struct dp_opts o = defaults;
	struct dp_pair p;
	uint8_t *src, *dst;
	struct ibv_mr *ms, *md;
	const int total = BURST * BURSTS;
	static const int per_poll[] = { 1, 2, 3, 5 };
	int next = 0, polls = 0, echo_sent = 0, echo_done = 0;

	o.one_cq = one_cq;
	o.rq = 1024;
	dp_setup(&p, &o);
	ms = dp_mr(p.a.pd, (size_t)total * 8, 0, &src);
	md = dp_mr(p.b.pd, (size_t)total * 8 + 8, IBV_ACCESS_LOCAL_WRITE,
		   &dst);
	for (int i = 0; i < total; i++) {
		struct ibv_sge ds = { (uintptr_t)dst + 8 * (size_t)i, 8,
				      md->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i, .sg_list = &ds,
					  .num_sge = 1 }, *br;
		uint64_t v = 0x5e0d000000000000ull | (uint64_t)i;

		memcpy(src + 8 * (size_t)i, &v, 8);
		cr_assert_eq(ibv_post_recv(p.b.qp, &rw, &br), 0);
	}
	/* For b's empty SENDs (one CQ). */
	for (int i = 0; one_cq && i < BURSTS; i++) {
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i }, *br;

		cr_assert_eq(ibv_post_recv(p.a.qp, &rw, &br), 0);
	}
	for (int b = 0; b < BURSTS; b++) {
		int want = (b + 1) * BURST;

		for (int i = b * BURST; i < want; i++) {
			struct ibv_sge ss = { (uintptr_t)src + 8 * (size_t)i, 8,
					      ms->lkey };
			struct ibv_send_wr sw = {
				.wr_id = (uint64_t)i, .sg_list = &ss,
				.num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = i == want - 1 ?
					      IBV_SEND_SIGNALED : 0,
			}, *bs;

			cr_assert_eq(ibv_post_send(p.a.qp, &sw, &bs), 0);
		}
		for (int64_t end = dp_now_ms() + DP_TIMEOUT_MS;
		     next < want && dp_now_ms() < end;) {
			struct ibv_wc wc[5];
			int k = per_poll[polls++ % 4];
			int r = ibv_poll_cq(p.b.rcq, k, wc);

			cr_assert(r >= 0 && r <= k, "poll of %d gave %d", k, r);
			for (int j = 0; j < r; j++) {
				uint64_t v;

				cr_assert_eq(wc[j].status, IBV_WC_SUCCESS);
				if (wc[j].opcode == IBV_WC_SEND) {
					/* b's own SEND (one CQ): its
					 * number, in order too. */
					cr_assert(one_cq);
					cr_assert_eq(wc[j].wr_id,
						     (uint64_t)echo_done);
					echo_done++;
					continue;
				}
				cr_assert_eq(wc[j].opcode, IBV_WC_RECV);
				cr_assert_eq(wc[j].wr_id, (uint64_t)next,
					     "completion %d came as %llu", next,
					     (unsigned long long)wc[j].wr_id);
				cr_assert_eq(wc[j].byte_len, 8);
				cr_assert_eq(wc[j].qp_num, p.b.qp->qp_num);
				memcpy(&v, dst + 8 * (size_t)next, 8);
				cr_assert_eq(v, 0x5e0d000000000000ull |
						(uint64_t)next);
				next++;
			}
			if (!r)
				sched_yield();
			/* One CQ: b sends too now and then, so that its
			 * SENDs' completions come between the receives. */
			if (one_cq && echo_sent < BURSTS &&
			    next >= (echo_sent + 1) * (BURST / 2)) {
				struct ibv_send_wr sw = {
					.wr_id = (uint64_t)echo_sent,
					.opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED,
				}, *bs;

				cr_assert_eq(ibv_post_send(p.b.qp, &sw, &bs),
					     0);
				echo_sent++;
			}
		}
		cr_assert_eq(next, want, "burst %d: %d of %d completions", b,
			     next, want);
		/* a's signaled SEND (with one CQ, b's SENDs' receives come
		 * there too). */
		for (;;) {
			struct ibv_wc wc = dp_wait1(p.a.scq);

			cr_assert_eq(wc.status, IBV_WC_SUCCESS);
			if (wc.opcode == IBV_WC_RECV)
				continue;
			cr_assert_eq(wc.wr_id, (uint64_t)(want - 1));
			break;
		}
	}
	/* What b sent completes too, in order, then nothing more. */
	for (int64_t end = dp_now_ms() + DP_TIMEOUT_MS;
	     echo_done < echo_sent && dp_now_ms() < end;) {
		struct ibv_wc wc;
		int r = ibv_poll_cq(p.b.scq, 1, &wc);

		cr_assert(r >= 0);
		if (!r) {
			sched_yield();
			continue;
		}
		cr_assert_eq(wc.opcode, IBV_WC_SEND);
		cr_assert_eq(wc.wr_id, (uint64_t)echo_done);
		echo_done++;
	}
	cr_assert_eq(echo_done, echo_sent);
	{
		struct ibv_wc wc;

		cr_assert_eq(ibv_poll_cq(p.b.rcq, 1, &wc), 0);
	}
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	free(src);
	free(dst);
	dp_teardown(&p, &o);
}

Test(datapath, poll_sizes_keep_order, .timeout = 120)
{
	poll_sizes_keep_order(false);
}

Test(datapath, poll_sizes_keep_order_one_cq, .timeout = 120)
{
	poll_sizes_keep_order(true);
}

/*
 * Several threads post on one QP at once (the QP's post lock,
 * verbs_qp.c): two threads post the receives, four the Sends,
 * each Send carrying its thread and sequence number. Every WR must be
 * taken exactly once: each receive completes once, and each thread's
 * Sends all arrive, in that thread's order (its posts are in SQ order).
 * A lock that let two posters claim one ring slot loses a WR here.
 */
#define CP_SENDERS   4
#define CP_PER_SEND  1500
#define CP_RECVERS   2
#define CP_TOTAL     (CP_SENDERS * CP_PER_SEND)

struct cp_arg {
	pthread_t th;
	struct ibv_qp *qp;
	uint32_t id;
	uint8_t *dst;
	uint32_t lkey;
	int ret;
};

static void *cp_recv_main(void *arg)
{
	struct cp_arg *a = arg;

	for (uint32_t i = a->id; i < CP_TOTAL; i += CP_RECVERS) {
		struct ibv_sge ds = { (uintptr_t)a->dst + 16 * (size_t)i, 16,
				      a->lkey };
		struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &ds,
					  .num_sge = 1 }, *br;

		a->ret = ibv_post_recv(a->qp, &rw, &br);
		if (a->ret)
			break;
		if (i % 64 == a->id)
			sched_yield();
	}
	return NULL;
}

static void *cp_send_main(void *arg)
{
	struct cp_arg *a = arg;

	for (uint32_t i = 0; i < CP_PER_SEND; i++) {
		uint32_t msg[2] = { a->id, i };
		struct ibv_sge ss = { (uintptr_t)msg, sizeof(msg), 0 };
		struct ibv_send_wr sw = { .wr_id = (uint64_t)a->id << 32 | i,
					  .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_INLINE |
							IBV_SEND_SIGNALED }, *bs;

		a->ret = ibv_post_send(a->qp, &sw, &bs);
		if (a->ret)
			break;
		if (i % 64 == 0)
			sched_yield();
	}
	return NULL;
}

/* fn on each of a[0..n), all at once; each must end with ret 0. */
static void cp_run(struct cp_arg *a, uint32_t n, void *(*fn)(void *),
		   const char *what)
{
	for (uint32_t t = 0; t < n; t++)
		cr_assert_eq(pthread_create(&a[t].th, NULL, fn, &a[t]), 0);
	for (uint32_t t = 0; t < n; t++) {
		pthread_join(a[t].th, NULL);
		cr_assert_eq(a[t].ret, 0, "%s: %d", what, a[t].ret);
	}
}

Test(datapath, concurrent_posters, .timeout = 120)
{
	struct dp_opts o = defaults;
	struct cp_arg rs[CP_RECVERS], ss[CP_SENDERS];
	uint32_t next[CP_SENDERS] = { 0 };
	static bool seen[CP_TOTAL];
	struct dp_pair p;
	struct ibv_mr *md;
	uint8_t *dst;

	o.sq = o.rq = 8192;
	o.cqe = 2 * CP_TOTAL;
	memset(seen, 0, sizeof(seen));
	dp_setup(&p, &o);
	md = dp_mr(p.b.pd, 16 * (size_t)CP_TOTAL, IBV_ACCESS_LOCAL_WRITE,
		   &dst);
	for (uint32_t t = 0; t < CP_RECVERS; t++)
		rs[t] = (struct cp_arg){ .qp = p.b.qp, .id = t, .dst = dst,
					 .lkey = md->lkey };
	cp_run(rs, CP_RECVERS, cp_recv_main, "post_recv");
	for (uint32_t t = 0; t < CP_SENDERS; t++)
		ss[t] = (struct cp_arg){ .qp = p.a.qp, .id = t };
	cp_run(ss, CP_SENDERS, cp_send_main, "post_send");
	for (int i = 0; i < CP_TOTAL; i++) {
		struct ibv_wc wc = dp_wait1(p.a.scq);

		cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	}
	for (int i = 0; i < CP_TOTAL; i++) {
		struct ibv_wc wc = dp_wait1(p.b.rcq);
		uint32_t msg[2];

		cr_assert_eq(wc.status, IBV_WC_SUCCESS, "receive %d: %s", i,
			     ibv_wc_status_str(wc.status));
		cr_assert_lt(wc.wr_id, (uint64_t)CP_TOTAL);
		cr_assert(!seen[wc.wr_id], "receive %llu completed twice",
			  (unsigned long long)wc.wr_id);
		seen[wc.wr_id] = true;
		cr_assert_eq(wc.byte_len, sizeof(msg));
		memcpy(msg, dst + 16 * wc.wr_id, sizeof(msg));
		cr_assert_lt(msg[0], (uint32_t)CP_SENDERS);
		cr_assert_eq(msg[1], next[msg[0]],
			     "thread %u's Send %u arrived, %u expected",
			     msg[0], msg[1], next[msg[0]]);
		next[msg[0]]++;
	}
	cr_log_info("%d Sends from %d threads into receives posted by %d "
		    "threads: each once, in each thread's order", CP_TOTAL,
		    CP_SENDERS, CP_RECVERS);
	ibv_dereg_mr(md);
	free(dst);
	dp_teardown(&p, &o);
}
