// SPDX-License-Identifier: MIT
/*
 * test_stats.c - the statistics (wisp_stats_shm.h): known traffic gives
 * exact counter values, read back from the file the process publishes;
 * a Terminate is counted with its code, flushes are counted; wisp-stat
 * --json lists a live process with its counters; the file is 0600 in a
 * 0700 folder and is gone once its process has exited (or, if the
 * process was killed, once wisp-stat has seen it).
 *
 * Every test points WISP_STATS_DIR at a fresh folder of its own before
 * the first verbs call, so nothing else on the machine interferes.
 */
#include "dp_util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ibverbs/verbs_internal.h"
#include "wisp_stats_shm.h"

static const struct dp_opts defaults = { 0 };
static char dir[128];

/* A new folder for the published files, under base. */
static void stats_dir_in(const char *base)
{
	snprintf(dir, sizeof(dir), "%s/wisp-stats-test.XXXXXX", base);
	cr_assert_not_null(mkdtemp(dir), "%s: %s", dir, strerror(errno));
	cr_assert_eq(setenv("WISP_STATS_DIR", dir, 1), 0);
}

static void stats_dir(void)
{
	stats_dir_in("/tmp");
}

static void stats_dir_rm(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/* This process's published file, mapped read-only. */
static const struct wisp_stats_file *own_file(void)
{
	char path[256];
	const struct wisp_stats_file *f;
	int fd;

	snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
	fd = open(path, O_RDONLY);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	f = mmap(NULL, sizeof(*f), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert(f != MAP_FAILED);
	cr_assert_eq(f->hdr.magic, WISP_STATS_MAGIC);
	cr_assert_eq(f->hdr.version, WISP_STATS_VERSION);
	cr_assert_eq(f->hdr.pid, (int32_t)getpid());
	return f;
}

/* The counters of QP qp in f. */
static const struct wisp_stats_counts *qp_counts(
	const struct wisp_stats_file *f, const struct ibv_qp *qp)
{
	for (uint32_t i = 0; i < f->hdr.qp_high; i++)
		if (f->qp[i].in_use && f->qp[i].qp_num == qp->qp_num)
			return &f->qp[i].c;
	cr_assert_fail("QP %u not published", qp->qp_num);
	return NULL;
}

#define V(c, m) ((uint64_t)atomic_load_explicit(&(c)->m, memory_order_relaxed))

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf,
		      uint32_t len, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	cr_assert_eq(ibv_post_recv(qp, &w, &bad), 0);
}

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr,
		 uint8_t *buf, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};
	struct ibv_send_wr *bad;

	cr_assert_eq(ibv_post_send(qp, &w, &bad), 0);
}

#define N_SEND  100
#define S_SEND  3000      /* more than one FPDU each */
#define N_WRITE 7
#define S_WRITE 5000
#define S_READ  9000

/* FPDUs of a message of len octets with hdr octets of DDP + RDMAP header. */
static uint64_t segs(uint32_t len, uint32_t mulpdu, uint32_t hdr)
{
	uint32_t per = mulpdu - hdr;

	return len ? (len + per - 1) / per : 1;
}

static void move_known_traffic(struct dp_pair *p, struct ibv_mr **mrs,
			       uint8_t **bufs)
{
	struct ibv_mr *ma, *mb;
	uint8_t *a, *b;
	size_t len = (size_t)N_SEND * S_SEND + S_READ;
	struct ibv_wc wc[N_SEND];

	ma = dp_mr(p->a.pd, len, DP_ALL_ACCESS, &a);
	mb = dp_mr(p->b.pd, len, DP_ALL_ACCESS, &b);
	memset(a, 0x5a, len);
	for (int i = 0; i < N_SEND; i++)
		post_recv(p->b.qp, mb, b + (size_t)i * S_SEND, S_SEND,
			  (uint64_t)i);
	for (int i = 0; i < N_WRITE; i++)
		post(p->a.qp, IBV_WR_RDMA_WRITE, ma, a, S_WRITE,
		     (uintptr_t)b, mb->rkey);
	for (int i = 0; i < N_SEND; i++)
		post(p->a.qp, IBV_WR_SEND, ma, a + (size_t)i * S_SEND, S_SEND,
		     0, 0);
	post(p->a.qp, IBV_WR_RDMA_READ, ma, a, S_READ, (uintptr_t)b,
	     mb->rkey);
	cr_assert_eq(dp_poll(p->a.scq, wc, N_WRITE), N_WRITE);
	cr_assert_eq(dp_poll(p->a.scq, wc, N_SEND), N_SEND);
	for (int i = 0; i < N_SEND; i++)
		cr_assert_eq(wc[i].status, IBV_WC_SUCCESS);
	cr_assert_eq(dp_poll(p->a.scq, wc, 1), 1);
	cr_assert_eq(wc[0].status, IBV_WC_SUCCESS);
	cr_assert_eq(wc[0].opcode, IBV_WC_RDMA_READ);
	cr_assert_eq(dp_poll(p->b.rcq, wc, N_SEND), N_SEND);
	mrs[0] = ma;
	mrs[1] = mb;
	bufs[0] = a;
	bufs[1] = b;
}

static void check_known_traffic(const struct dp_pair *p,
				const struct wisp_stats_file *f)
{
	const struct wisp_stats_counts *ca = qp_counts(f, p->a.qp);
	const struct wisp_stats_counts *cb = qp_counts(f, p->b.qp);
	uint64_t send_fpdus = N_SEND * segs(S_SEND, p->mulpdu, 18);
	uint64_t write_fpdus = N_WRITE * segs(S_WRITE, p->mulpdu, 14);
	uint64_t resp_fpdus = segs(S_READ, p->mulpdu, 14);

	/* SEND: N messages, N * S octets, each way. */
	cr_assert_eq(V(ca, core.tx_msgs[0x3]), N_SEND);
	cr_assert_eq(V(ca, core.tx_octets[0x3]), (uint64_t)N_SEND * S_SEND);
	cr_assert_eq(V(cb, core.rx_msgs[0x3]), N_SEND);
	cr_assert_eq(V(cb, core.rx_octets[0x3]), (uint64_t)N_SEND * S_SEND);
	cr_assert_eq(V(cb, core.tx_msgs[0x3]), 0);
	/* WRITE */
	cr_assert_eq(V(ca, core.tx_msgs[0x0]), N_WRITE);
	cr_assert_eq(V(ca, core.tx_octets[0x0]), (uint64_t)N_WRITE * S_WRITE);
	cr_assert_eq(V(cb, core.rx_msgs[0x0]), N_WRITE);
	cr_assert_eq(V(cb, core.rx_octets[0x0]), (uint64_t)N_WRITE * S_WRITE);
	/* READ: one request asking S_READ octets, one response carrying
	 * them. */
	cr_assert_eq(V(ca, core.tx_msgs[0x1]), 1);
	cr_assert_eq(V(ca, core.tx_octets[0x1]), S_READ);
	cr_assert_eq(V(cb, core.rx_msgs[0x1]), 1);
	cr_assert_eq(V(cb, core.rx_octets[0x1]), S_READ);
	cr_assert_eq(V(cb, core.tx_msgs[0x2]), 1);
	cr_assert_eq(V(cb, core.tx_octets[0x2]), S_READ);
	cr_assert_eq(V(ca, core.rx_msgs[0x2]), 1);
	cr_assert_eq(V(ca, core.rx_octets[0x2]), S_READ);
	/* FPDUs: every segment, each way, and nothing else (no RTR). */
	cr_assert_eq(V(ca, core.tx_fpdus), send_fpdus + write_fpdus + 1,
		     "a sent %llu FPDUs",
		     (unsigned long long)V(ca, core.tx_fpdus));
	cr_assert_eq(V(cb, core.rx_fpdus), V(ca, core.tx_fpdus));
	cr_assert_eq(V(cb, core.tx_fpdus), resp_fpdus);
	cr_assert_eq(V(ca, core.rx_fpdus), resp_fpdus);
	cr_assert_eq(V(ca, core.crc_errors) + V(cb, core.crc_errors), 0);
	cr_assert_eq(V(ca, core.term_tx) + V(cb, core.term_tx), 0);
	cr_assert_eq(V(ca, core.flushed) + V(cb, core.flushed), 0);
	cr_assert_eq(V(ca, streams), 1);
	cr_assert_eq(V(cb, streams), 1);
	/* The socket took what the core framed: every octet a received
	 * was sent by b and the other way round. */
	cr_assert_eq(V(cb, sock.rx_octets), V(ca, sock.tx_octets));
	cr_assert_eq(V(ca, sock.rx_octets), V(cb, sock.tx_octets));
	cr_assert(V(ca, sock.tx_octets) > (uint64_t)N_SEND * S_SEND);
	cr_assert(V(ca, sock.tx_sends) + V(ca, sock.tx_direct) > 0);
}

/* Read the QP's counters until the socket counters settle: the last
 * octets of the sender are counted once its send returned, which may be
 * just after the peer has processed them. */
static void settle(const struct wisp_stats_file *f, const struct dp_pair *p)
{
	const struct wisp_stats_counts *ca = qp_counts(f, p->a.qp);
	const struct wisp_stats_counts *cb = qp_counts(f, p->b.qp);
	int64_t end = dp_now_ms() + DP_TIMEOUT_MS;

	while (dp_now_ms() < end &&
	       (V(cb, sock.rx_octets) != V(ca, sock.tx_octets) ||
		V(ca, sock.rx_octets) != V(cb, sock.tx_octets)))
		usleep(1000);
}

Test(stats, exact_counts, .timeout = 60)
{
	struct dp_pair p;
	struct ibv_mr *mr[2];
	uint8_t *buf[2];
	const struct wisp_stats_file *f;

	stats_dir();
	dp_setup(&p, &defaults);
	move_known_traffic(&p, mr, buf);
	f = own_file();
	settle(f, &p);
	check_known_traffic(&p, f);
	/* The device totals add the QP's counters once it is destroyed. */
	ibv_dereg_mr(mr[0]);
	ibv_dereg_mr(mr[1]);
	free(buf[0]);
	free(buf[1]);
	dp_teardown(&p, &defaults);
	cr_assert_eq(V(&f->hdr.closed, core.tx_msgs[0x3]), N_SEND,
		     "closed contexts keep the SENDs");
	cr_assert_eq(V(&f->hdr.closed, core.rx_msgs[0x3]), N_SEND);
	stats_dir_rm();
}

/* The QP slots after the one a QP takes are in memory before any QP
 * writes them (verbs_stats.c, st_qp_ready): populated ahead by one
 * madvise instead of a page fault inside a later connection setup. */
Test(stats, qp_slots_populated_ahead, .timeout = 60)
{
	const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	const struct wisp_stats_file *f;
	uint32_t high;
	unsigned char vec[8];
	uintptr_t next;
	struct dp_pair p;

	/* tmpfs, where the default folder is (/dev/shm/wisp-UID): a disk
	 * file system reads pages around the touched ones into memory. */
	stats_dir_in("/dev/shm");
	dp_setup(&p, &defaults);
	f = own_file();
	high = atomic_load(&f->hdr.qp_high);
	cr_assert_eq(high, 2, "the pair's two QPs, slots 0 and 1");
	/* The first page wholly after the last slot taken, and the seven
	 * after it: nothing of this process has written them. The file's
	 * pages, whichever mapping asks. */
	next = ((uintptr_t)&f->qp[high] + page - 1) & ~(page - 1);
	cr_assert_eq(mincore((void *)next, sizeof(vec) * page, vec), 0,
		     "mincore: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(vec); i++)
		cr_assert(vec[i] & 1, "page %zu after the last QP slot is "
			  "not in memory", i);
	dp_teardown(&p, &defaults);
	stats_dir_rm();
}

/*
 * A thread that finds a CQ empty receives on the QP's socket itself (and
 * keeps the engine off it) only if what arrives can complete there: from
 * the receive CQ, yes, every poll; from the send CQ of a QP with no READ
 * out, no: such a thread may be about to wait for WRITEs by watching
 * memory (ib_write_lat), which only the engine can place.
 * Counted as sock_rx_empty, the receives that found the socket empty.
 */
#define EMPTY_POLLS 1000

Test(stats, empty_send_cq_leaves_the_socket_to_the_engine, .timeout = 60)
{
	const struct wisp_stats_counts *ca;
	const struct wisp_stats_file *f;
	struct dp_pair p;
	struct ibv_wc wc;
	uint64_t before, after_scq, after_rcq;

	stats_dir();
	dp_setup(&p, &defaults);
	f = own_file();
	ca = qp_counts(f, p.a.qp);
	before = V(ca, sock.rx_empty);
	for (int i = 0; i < EMPTY_POLLS; i++)
		cr_assert_eq(ibv_poll_cq(p.a.scq, 1, &wc), 0);
	after_scq = V(ca, sock.rx_empty);
	for (int i = 0; i < EMPTY_POLLS; i++)
		cr_assert_eq(ibv_poll_cq(p.a.rcq, 1, &wc), 0);
	after_rcq = V(ca, sock.rx_empty);
	cr_assert_lt(after_scq - before, EMPTY_POLLS,
		     "%llu empty receives while polling the send CQ",
		     (unsigned long long)(after_scq - before));
	/* Nearly every poll: one that finds the engine at the socket (its
	 * first visits after it adopted the connection) skips it. */
	cr_assert_geq(after_rcq - after_scq, EMPTY_POLLS * 9 / 10,
		      "%llu empty receives while polling the receive CQ",
		      (unsigned long long)(after_rcq - after_scq));
	dp_teardown(&p, &defaults);
	stats_dir_rm();
}

/*
 * An empty poll takes the CQ's list of streams with one exchange on a
 * flag (verbs_cq.c, "The list of streams"): it receives on the streams
 * only when no one else has the list, skips them while another poller
 * has it (conns_busy) or while a thread that changes the list waits for
 * it (conns_wanted, so that a thread polling without a pause cannot
 * keep a QP's creation or destruction out), and receives again once the
 * list is free. Counted as above, in sock_rx_empty.
 */
static uint64_t rcq_empty_polls(struct dp_pair *p,
				const struct wisp_stats_counts *ca)
{
	uint64_t before = V(ca, sock.rx_empty);
	struct ibv_wc wc;

	for (int i = 0; i < EMPTY_POLLS; i++)
		cr_assert_eq(ibv_poll_cq(p->a.rcq, 1, &wc), 0);
	return V(ca, sock.rx_empty) - before;
}

Test(stats, empty_poll_skips_a_list_someone_has, .timeout = 60)
{
	const struct wisp_stats_counts *ca;
	struct wisp_cq *cq;
	struct dp_pair p;
	uint64_t n;

	stats_dir();
	dp_setup(&p, &defaults);
	ca = qp_counts(own_file(), p.a.qp);
	cq = to_wcq(p.a.rcq);
	cr_assert_not(atomic_load(&cq->conns_busy));
	cr_assert_not(atomic_load(&cq->conns_wanted));
	n = rcq_empty_polls(&p, ca);
	cr_assert_geq(n, EMPTY_POLLS * 9 / 10, "%llu receives, list free",
		      (unsigned long long)n);
	/* Another poller has it. */
	atomic_store(&cq->conns_busy, true);
	n = rcq_empty_polls(&p, ca);
	cr_assert_eq(n, 0, "%llu receives with the list taken",
		     (unsigned long long)n);
	cr_assert(atomic_load(&cq->conns_busy), "a poller freed the list");
	atomic_store(&cq->conns_busy, false);
	/* A changer wants it (and waits for the poller it may meet). */
	atomic_store(&cq->conns_wanted, true);
	n = rcq_empty_polls(&p, ca);
	cr_assert_eq(n, 0, "%llu receives with the list wanted",
		     (unsigned long long)n);
	cr_assert_not(atomic_load(&cq->conns_busy),
		      "a poller took a wanted list");
	atomic_store(&cq->conns_wanted, false);
	n = rcq_empty_polls(&p, ca);
	cr_assert_geq(n, EMPTY_POLLS * 9 / 10, "%llu receives, free again",
		      (unsigned long long)n);
	/* A poller gives the list back: a QP's teardown (which takes it
	 * to take its stream off) does not wait for ever. */
	cr_assert_not(atomic_load(&cq->conns_busy));
	dp_teardown(&p, &defaults);
	stats_dir_rm();
}

/*
 * wisp's large-FPDU extension (docs/wire-formats.md) between two wisp
 * peers on a connection whose MSS is an Ethernet link's (1448, MTU 1500
 * with timestamps): with WISP_BIG_FPDU on (the default) a 64 KiB WRITE
 * takes two FPDUs, off it takes one per segment (46 or more).
 * Counted in the published statistics, with the data checked.
 */
#define BIG_MSS    1448
#define BIG_N      8
#define BIG_LEN    65536

static void big_fpdu_run(const char *setting, bool big)
{
	struct dp_opts o = { .mss = BIG_MSS };
	const struct wisp_stats_counts *ca, *cb;
	const struct wisp_stats_file *f;
	uint32_t mulpdu, seen_a = 0, seen_b = 0;
	struct ibv_mr *ma, *mb;
	struct ibv_wc wc[BIG_N];
	uint64_t want;
	uint8_t *a, *b;
	struct dp_pair p;

	if (setting)
		cr_assert_eq(setenv("WISP_BIG_FPDU", setting, 1), 0);
	stats_dir();
	dp_setup(&p, &o);
	cr_assert_leq(p.mulpdu, BIG_MSS, "TCP_MAXSEG took effect: MULPDU %u",
		      p.mulpdu);
	ma = dp_mr(p.a.pd, BIG_LEN, DP_ALL_ACCESS, &a);
	mb = dp_mr(p.b.pd, (size_t)BIG_N * BIG_LEN, DP_ALL_ACCESS, &b);
	for (size_t i = 0; i < BIG_LEN; i++)
		a[i] = (uint8_t)(i * 7 + i / 251);
	for (int i = 0; i < BIG_N; i++)
		post(p.a.qp, IBV_WR_RDMA_WRITE, ma, a, BIG_LEN,
		     (uintptr_t)(b + (size_t)i * BIG_LEN), mb->rkey);
	cr_assert_eq(dp_poll(p.a.scq, wc, BIG_N), BIG_N);
	for (int i = 0; i < BIG_N; i++)
		cr_assert_eq(wc[i].status, IBV_WC_SUCCESS);
	f = own_file();
	settle(f, &p);
	for (int i = 0; i < BIG_N; i++)
		cr_assert_arr_eq(b + (size_t)i * BIG_LEN, a, BIG_LEN);

	/* Both sides send up to what the peer accepts (65535), within
	 * what MPA sends (64768); off, up to the segment. */
	mulpdu = big ? MPA_ULPDU_SEND_MAX : p.mulpdu;
	for (uint32_t i = 0; i < f->hdr.qp_high; i++) {
		if (!f->qp[i].in_use)
			continue;
		if (f->qp[i].qp_num == p.a.qp->qp_num)
			seen_a = f->qp[i].mulpdu;
		if (f->qp[i].qp_num == p.b.qp->qp_num)
			seen_b = f->qp[i].mulpdu;
	}
	cr_assert_eq(seen_a, mulpdu, "initiator MULPDU %u", seen_a);
	cr_assert_eq(seen_b, mulpdu, "responder MULPDU %u", seen_b);
	ca = qp_counts(f, p.a.qp);
	cb = qp_counts(f, p.b.qp);
	want = BIG_N * segs(BIG_LEN, mulpdu, 14);
	cr_assert_eq(V(ca, core.tx_fpdus), want, "%s: %llu FPDUs, want %llu",
		     setting ? setting : "unset",
		     (unsigned long long)V(ca, core.tx_fpdus),
		     (unsigned long long)want);
	cr_assert_eq(V(cb, core.rx_fpdus), want);
	/* 64 KiB in 2 large FPDUs, or one per segment: 46 or more. */
	if (big)
		cr_assert_eq(want, 2 * BIG_N);
	else
		cr_assert_geq(want, 46 * BIG_N);
	ibv_dereg_mr(ma);
	ibv_dereg_mr(mb);
	free(a);
	free(b);
	dp_teardown(&p, &o);
	stats_dir_rm();
}

Test(stats, big_fpdu_default_on, .timeout = 60)
{
	cr_assert_eq(unsetenv("WISP_BIG_FPDU"), 0);
	big_fpdu_run(NULL, true);
}

Test(stats, big_fpdu_on, .timeout = 60)
{
	big_fpdu_run("on", true);
}

Test(stats, big_fpdu_off, .timeout = 60)
{
	big_fpdu_run("off", false);
}

/* A SEND with no receive posted: b answers with the DDP untagged "no
 * buffer" Terminate (RFC 5041 section 7.2, layer 1 etype 2 code 0x02),
 * counted on both sides with its code; the K receives a had posted are
 * flushed and counted. */
Test(stats, terminate_and_flush, .timeout = 60)
{
	enum { K = 5 };
	struct dp_pair p;
	struct ibv_mr *ma;
	uint8_t *a;
	struct ibv_wc wc[K];
	const struct wisp_stats_file *f;
	const struct wisp_stats_counts *ca, *cb;

	stats_dir();
	dp_setup(&p, &defaults);
	ma = dp_mr(p.a.pd, 64, DP_ALL_ACCESS, &a);
	for (int i = 0; i < K; i++)
		post_recv(p.a.qp, ma, a, 64, (uint64_t)i);
	post(p.a.qp, IBV_WR_SEND, ma, a, 8, 0, 0);
	cr_assert_eq(dp_poll(p.a.rcq, wc, K), K);
	for (int i = 0; i < K; i++)
		cr_assert_eq(wc[i].status, IBV_WC_WR_FLUSH_ERR);
	f = own_file();
	ca = qp_counts(f, p.a.qp);
	cb = qp_counts(f, p.b.qp);
	cr_assert_eq(V(cb, core.term_tx), 1);
	cr_assert_eq(V(cb, core.term_tx_last), 0x1202, "sent %#llx",
		     (unsigned long long)V(cb, core.term_tx_last));
	cr_assert_eq(V(cb, core.term_tx_kind[1 * 4 + 2]), 1);
	cr_assert_eq(V(cb, core.faults), 1);
	cr_assert_eq(V(cb, core.tx_msgs[0x7]), 1, "the Terminate message");
	cr_assert_eq(V(ca, core.term_rx), 1);
	cr_assert_eq(V(ca, core.term_rx_last), 0x1202);
	cr_assert_eq(V(ca, core.term_rx_kind[1 * 4 + 2]), 1);
	cr_assert_eq(V(ca, core.rx_msgs[0x7]), 1);
	cr_assert_eq(V(ca, core.term_tx), 0, "a Terminate is not answered");
	/* a's K receives; the SEND itself completed (or failed) but was
	 * not flushed. */
	cr_assert_eq(V(ca, core.flushed), K);
	cr_assert_eq(V(cb, core.flushed), 0);
	cr_assert_eq(V(ca, core.crc_errors), 0);
	ibv_dereg_mr(ma);
	free(a);
	dp_teardown(&p, &defaults);
	stats_dir_rm();
}

/* The RTR (RFC 6581) is counted on the initiator. */
Test(stats, rtr_counted, .timeout = 60)
{
	struct dp_opts o = { .prefs = { .mpa_rev = 2, .p2p = true } };
	struct dp_pair p;
	const struct wisp_stats_file *f;

	const struct wisp_stats_counts *ca, *cb;
	int64_t end;

	stats_dir();
	dp_setup(&p, &o);
	f = own_file();
	ca = qp_counts(f, p.a.qp);
	cb = qp_counts(f, p.b.qp);
	/* The initiator sends it WISP_MPA_HOLD_MS after the MPA Reply:
	 * wait until the responder has it. */
	end = dp_now_ms() + DP_TIMEOUT_MS;
	while (V(cb, core.rx_fpdus) == 0 && dp_now_ms() < end)
		usleep(1000);
	cr_assert_eq(V(ca, core.rtr_sent), 1);
	cr_assert_eq(V(cb, core.rtr_sent), 0);
	/* the WRITE RTR (wisp_mpa_prefs.read_rtr unset): a zero-length
	 * RDMA Write, perhaps already followed by nudges, since b never
	 * answers here */
	cr_assert_geq(V(cb, core.rx_msgs[0x0]), 1);
	cr_assert_eq(V(cb, core.rx_octets[0x0]), 0);
	cr_assert_eq(V(cb, core.rx_msgs[0x1]), 0);
	/* b answers: the nudges stop, and every octet either side sent,
	 * the RTR that left as soon as the stream was added included, is
	 * counted by the socket counters the file shows. */
	{
		struct ibv_mr *ma, *mb;
		uint8_t *ba, *bb;

		ma = dp_mr(p.a.pd, 64, DP_ALL_ACCESS, &ba);
		mb = dp_mr(p.b.pd, 64, DP_ALL_ACCESS, &bb);
		post_recv(p.a.qp, ma, ba, 64, 1);
		post(p.b.qp, IBV_WR_SEND, mb, bb, 16, 0, 0);
		dp_wait1(p.a.rcq);
		dp_wait1(p.b.scq);
		settle(f, &p);
		cr_assert_eq(V(cb, sock.rx_octets), V(ca, sock.tx_octets));
		cr_assert_eq(V(ca, sock.rx_octets), V(cb, sock.tx_octets));
		cr_assert_eq(V(ca, sock.tx_octets),
			     V(ca, core.tx_fpdus) * 20 +
			     V(ca, core.tx_octets[0x0]),
			     "zero-length Writes, 20 octets each (length, header, CRC): %llu",
			     (unsigned long long)V(ca, sock.tx_octets));
		ibv_dereg_mr(ma);
		ibv_dereg_mr(mb);
		free(ba);
		free(bb);
	}
	dp_teardown(&p, &o);
	stats_dir_rm();
}

/* Run a shell command, return its exit status. */
static int sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* As sh(), through bash (tests/rdmacm/ports.sh and $SECONDS need it). */
static int bash(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	pid_t pid;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	pid = fork();
	if (pid == 0) {
		execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* wisp-stat --json lists this process with the counters it moved. */
Test(stats, wisp_stat_json, .timeout = 60)
{
	struct dp_pair p;
	struct ibv_mr *mr[2];
	uint8_t *buf[2];
	char out[256];

	stats_dir();
	dp_setup(&p, &defaults);
	move_known_traffic(&p, mr, buf);
	snprintf(out, sizeof(out), "%s/out.json", dir);
	cr_assert_eq(sh("'%s' --json --dir '%s' > '%s'", WISP_STAT_BIN, dir,
			out), 0);
	cr_assert_eq(sh("python3 -m json.tool '%s' > /dev/null", out), 0,
		     "wisp-stat --json prints valid JSON");
	cr_assert_eq(sh("python3 -c 'import json,sys\n"
			"d = json.load(open(sys.argv[1]))\n"
			"p = [x for x in d[\"processes\"] if x[\"pid\"] == %d]\n"
			"assert len(p) == 1, p\n"
			"q = {x[\"qp_num\"]: x for x in p[0][\"qps\"]}\n"
			"a, b = q[%u], q[%u]\n"
			"assert a[\"state\"] == \"connected\"\n"
			"assert a[\"peer\"].startswith(\"127.0.0.1:\")\n"
			"assert a[\"mpa\"][\"rev\"] == 2\n"
			"assert a[\"counters\"][\"ops\"][\"send\"][\"tx_msgs\"] == %d\n"
			"assert b[\"counters\"][\"ops\"][\"send\"][\"rx_octets\"] == %d\n"
			"assert p[0][\"totals\"][\"ops\"][\"send\"][\"tx_msgs\"] == %d\n"
			"assert len(p[0][\"devices\"]) == 2\n"
			"' '%s'",
			(int)getpid(), p.a.qp->qp_num, p.b.qp->qp_num, N_SEND,
			N_SEND * S_SEND, N_SEND, out), 0,
		     "the JSON holds this process and its counters");
	/* The live view, bounded, runs and names the process. */
	cr_assert_eq(sh("'%s' -n 2 -d 0.1 --dir '%s' < /dev/null | "
			"grep -q 'test_stats'", WISP_STAT_BIN, dir), 0);
	ibv_dereg_mr(mr[0]);
	ibv_dereg_mr(mr[1]);
	free(buf[0]);
	free(buf[1]);
	dp_teardown(&p, &defaults);
	stats_dir_rm();
}

/* Start stats_child with its stdin on a pipe; returns its pid, *wfd the
 * pipe's write end. Waits for its "ready". */
static pid_t child_start(int *wfd)
{
	int in[2], out[2];
	char line[64] = { 0 };
	pid_t pid;
	FILE *f;

	cr_assert_eq(pipe(in), 0);
	cr_assert_eq(pipe(out), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		close(in[1]);
		close(out[0]);
		execl(STATS_CHILD_BIN, STATS_CHILD_BIN, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	f = fdopen(out[0], "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(line, sizeof(line), f), "child ready");
	cr_assert(!strncmp(line, "ready", 5), "child said %s", line);
	fclose(f);
	*wfd = in[1];
	return pid;
}

Test(stats, file_mode_and_removal, .timeout = 60)
{
	char path[256];
	struct stat sb;
	int wfd, st;
	pid_t pid;

	stats_dir();
	/* mkdtemp made the folder 0700; a fresh one is made 0700 too. */
	snprintf(path, sizeof(path), "%s/sub", dir);
	cr_assert_eq(setenv("WISP_STATS_DIR", path, 1), 0);
	pid = child_start(&wfd);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0700, "folder mode %o",
		     sb.st_mode & 0777);
	snprintf(path, sizeof(path), "%s/sub/%d", dir, (int)pid);
	cr_assert_eq(stat(path, &sb), 0, "%s exists", path);
	cr_assert_eq(sb.st_mode & 0777, 0600, "file mode %o",
		     sb.st_mode & 0777);
	cr_assert_eq(sb.st_uid, getuid());
	cr_assert_eq(sh("'%s' --json --dir '%s/sub' | python3 -c 'import "
			"json,sys; d = json.load(sys.stdin); assert [p for p "
			"in d[\"processes\"] if p[\"pid\"] == %d and "
			"p[\"program\"] == \"stats_child\" and len(p[\"qps\"]) "
			"== 1]'", WISP_STAT_BIN, dir, (int)pid), 0);
	/* A normal exit removes the file. */
	close(wfd);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d",
		  st);
	cr_assert_eq(stat(path, &sb), -1, "%s removed at exit", path);
	/* A killed process leaves it; wisp-stat ignores and removes it. */
	pid = child_start(&wfd);
	snprintf(path, sizeof(path), "%s/sub/%d", dir, (int)pid);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	close(wfd);
	cr_assert_eq(stat(path, &sb), 0, "a killed process leaves its file");
	cr_assert_eq(sh("'%s' --json --dir '%s/sub' | python3 -c 'import "
			"json,sys; d = json.load(sys.stdin); assert not [p for "
			"p in d[\"processes\"] if p[\"pid\"] == %d]'",
			WISP_STAT_BIN, dir, (int)pid), 0);
	cr_assert_eq(stat(path, &sb), -1, "wisp-stat removed the stale file");
	stats_dir_rm();
}

/* WISP_STATS=1 prints a summary on stderr at exit. */
Test(stats, summary_at_exit, .timeout = 60)
{
	stats_dir();
	cr_assert_eq(sh("echo | WISP_STATS=1 '%s' 2> '%s/err' > /dev/null && "
			"grep -q '^wisp: statistics of stats_child' '%s/err'",
			STATS_CHILD_BIN, dir, dir), 0);
	cr_assert_eq(sh("echo | WISP_STATS=0 WISP_STATS_DIR='%s/off' '%s' "
			"2> '%s/err' > /dev/null && ! grep -q statistics "
			"'%s/err' && ! test -e '%s/off'",
			dir, STATS_CHILD_BIN, dir, dir, dir), 0,
		     "WISP_STATS=0 publishes nothing");
	stats_dir_rm();
}

/* Shell prologue for an unmodified program over the built libraries:
 * an ASan build's libraries need the ASan runtime loaded first. */
#define OVER_WISP "export WISP_LIB_DIR='" WISP_LIB_DIR "' WISP_STATS=1; " \
	"asan=$(ldd \"$WISP_LIB_DIR/librdmacm.so.1\" | " \
	"awk '/libasan/ {print $3}'); if [ -n \"$asan\" ]; then " \
	"export LD_PRELOAD=\"$asan\" ASAN_OPTIONS=detect_leaks=0; fi; "

/* Connection manager events, counted through librdmacm: an rping pair
 * that connects and disconnects, and an rping towards a port where
 * nobody listens. Ports come from tests/rdmacm/ports.sh; the client
 * starts once the server listens. The DISCONNECTED count is asserted on
 * the server, whose rping waits for that event before it exits; the
 * client disconnects and exits without waiting for its own (rping's
 * design), so whether it counted one is a race of rping's. */
Test(stats, cm_events, .timeout = 90)
{
	stats_dir();
	cr_assert_eq(bash("cd '%s' && " OVER_WISP ". '" PORTS_SH "' && "
			"pick_port || exit 8; "
			"timeout 30 '%s' rping -s -a 127.0.0.1 -p $port -C 3 "
			"> /dev/null 2> s.err & end=$((SECONDS + 20)); "
			"until [ -n \"$(ss -Hltn \"sport = :$port\")\" ]; do "
			"[ $SECONDS -lt $end ] || exit 9; sleep 0.05; done; "
			"timeout 30 '%s' rping -c -a 127.0.0.1 -p $port -C 3 "
			"> /dev/null 2> c.err; wait; "
			"grep -q '^wisp:   cm_established 1$' c.err && "
			"grep -q '^wisp:   cm_connect_requests 1$' s.err && "
			"grep -q '^wisp:   cm_established 1$' s.err && "
			"grep -q '^wisp:   cm_disconnected 1$' s.err && "
			"grep -q '^wisp:   rtr_sent 1$' c.err",
			dir, WISP_RUN, WISP_RUN), 0,
		     "rping pair: see %s/c.err, s.err", dir);
	cr_assert_eq(bash("cd '%s' && " OVER_WISP ". '" PORTS_SH "' && "
			"pick_port && timeout 30 '%s' rping -c -a 127.0.0.1 "
			"-p $port -C 1 > /dev/null 2> u.err; "
			"grep -q '^wisp:   cm_unreachable 1$' u.err",
			dir, WISP_RUN), 0,
		     "rping to nobody: see %s/u.err", dir);
	stats_dir_rm();
}

/*
 * WISP_POST_POLL: in a WRITE ping-pong whose threads watch memory (as
 * ib_write_lat's do), the posting thread receives the peer's WRITE
 * itself, so that it is in place when ibv_post_send returns, counted in
 * sock_rx_post_hits. In a SEND ping-pong (answers complete receives) no
 * post ever waits: sock_rx_post_waits stays 0. Whether a given round
 * trip comes within the wait depends on the machine: the WRITE case
 * runs rounds until one shows it, within PP_SECONDS; without the
 * feature none ever does.
 */
#define PP_ROUNDS  500
#define PP_SECONDS 40

struct pp_side {
	struct ibv_qp *qp;
	struct ibv_cq *rcq;
	struct ibv_mr *mr;
	uint8_t *buf;             /* [0, 8): what the peer writes; [8, 16):
				   * what this side sends */
	uint64_t raddr;
	uint32_t rkey;
	long first, n;            /* round trips: numbers first .. n */
	long placed;              /* answers in place when the post returned */
	bool send;                /* SEND ping-pong (else WRITE) */
};

static uint64_t pp_word(const uint8_t *p)
{
	return __atomic_load_n((const uint64_t *)(const void *)p,
			       __ATOMIC_ACQUIRE);
}

/* Post the number i from buf[8..16): an unsignaled WRITE into the
 * peer's word, or a SEND; true if the peer's answer (i) was already in
 * place when the post returned. */
static bool pp_post(struct pp_side *s, uint64_t i)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + 8), 8, s->mr->lkey };
	struct ibv_send_wr w = {
		.sg_list = &sge, .num_sge = 1,
		.opcode = s->send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE,
		.wr.rdma = { .remote_addr = s->raddr, .rkey = s->rkey },
	};
	struct ibv_send_wr *bad;

	memcpy(s->buf + 8, &i, 8);
	cr_assert_eq(ibv_post_send(s->qp, &w, &bad), 0);
	return !s->send && pp_word(s->buf) == i;
}

/* Wait (bounded) for the peer's i: in memory, or as a receive. */
static void pp_wait(struct pp_side *s, uint64_t i)
{
	int64_t end = dp_now_ms() + DP_TIMEOUT_MS;
	struct ibv_wc wc;

	if (s->send) {
		cr_assert_eq(dp_poll(s->rcq, &wc, 1), 1);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS);
		cr_assert_eq(pp_word(s->buf), i);
		post_recv(s->qp, s->mr, s->buf, 8, i);
		return;
	}
	while (pp_word(s->buf) != i) {
		cr_assert_lt(dp_now_ms(), end, "no answer %llu",
			     (unsigned long long)i);
		sched_yield();
	}
}

/* b: answer each of a's numbers with the same number. */
static void *pp_echo(void *arg)
{
	struct pp_side *s = arg;

	for (long i = s->first; i <= s->n; i++) {
		pp_wait(s, (uint64_t)i);
		pp_post(s, (uint64_t)i);
	}
	return NULL;
}

/* What both ping-pong tests run on: WISP_POST_POLL at its largest bound
 * (so that a loaded machine still shows a wait), a connected pair with
 * its stats file, and a side of 16 octets on each QP. */
struct pp_rig {
	struct dp_pair p;
	struct pp_side a, b;
	const struct wisp_stats_counts *ca, *cb;
};

static void pp_start(struct pp_rig *r, bool send)
{
	struct pp_side *s[2] = { &r->a, &r->b };
	struct dp_side *d[2] = { &r->p.a, &r->p.b };
	const struct wisp_stats_file *f;

	cr_assert_eq(setenv("WISP_POST_POLL", "10000", 1), 0);
	stats_dir();
	dp_setup(&r->p, &defaults);
	f = own_file();
	r->ca = qp_counts(f, r->p.a.qp);
	r->cb = qp_counts(f, r->p.b.qp);
	for (int k = 0; k < 2; k++) {
		memset(s[k], 0, sizeof(*s[k]));
		s[k]->qp = d[k]->qp;
		s[k]->rcq = d[k]->rcq;
		s[k]->mr = dp_mr(d[k]->pd, 16, DP_ALL_ACCESS, &s[k]->buf);
		memset(s[k]->buf, 0, 16);
		s[k]->send = send;
		if (send)
			post_recv(s[k]->qp, s[k]->mr, s[k]->buf, 8, 0);
	}
	r->a.raddr = (uintptr_t)r->b.buf;
	r->a.rkey = r->b.mr->rkey;
	r->b.raddr = (uintptr_t)r->a.buf;
	r->b.rkey = r->a.mr->rkey;
}

static void pp_stop(struct pp_rig *r)
{
	ibv_dereg_mr(r->a.mr);
	ibv_dereg_mr(r->b.mr);
	free(r->a.buf);
	free(r->b.buf);
	dp_teardown(&r->p, &defaults);
	unsetenv("WISP_POST_POLL");
	stats_dir_rm();
}

/* One round of PP_ROUNDS round trips from a, numbered from first. */
static void pp_round(struct pp_side *a, struct pp_side *b, long first)
{
	pthread_t t;

	a->first = b->first = first;
	a->n = b->n = first + PP_ROUNDS - 1;
	cr_assert_eq(pthread_create(&t, NULL, pp_echo, b), 0);
	for (long i = first; i <= a->n; i++) {
		if (pp_post(a, (uint64_t)i))
			a->placed++;
		pp_wait(a, (uint64_t)i);
	}
	cr_assert_eq(pthread_join(t, NULL), 0);
}

Test(stats, write_ping_pong_answer_placed_by_the_poster, .timeout = 120)
{
	struct pp_rig r;
	long first = 1;
	int64_t end;

	pp_start(&r, false);
	/* A post may also return late enough (the thread descheduled) to
	 * find an answer the engine placed: what counts is the posting
	 * thread's own receive of a whole answer, sock_rx_post_hits. */
	for (end = dp_now_ms() + PP_SECONDS * 1000;
	     !(r.a.placed && V(r.ca, sock.rx_post_hits)) && dp_now_ms() < end;
	     first += PP_ROUNDS)
		pp_round(&r.a, &r.b, first);
	cr_assert_gt(V(r.ca, sock.rx_post_hits), 0, "%ld round trips, none "
		     "whose answer a's posting thread received", first - 1);
	cr_assert_gt(r.a.placed, 0);
	cr_assert_geq(V(r.ca, sock.rx_post_waits), V(r.ca, sock.rx_post_hits));
	cr_assert_geq(V(r.ca, sock.rx_direct), V(r.ca, sock.rx_post_hits));
	cr_assert_geq(V(r.cb, sock.rx_post_waits), V(r.cb, sock.rx_post_hits));
	cr_assert_eq(V(r.ca, core.flushed) + V(r.cb, core.flushed), 0);
	pp_stop(&r);
}

Test(stats, send_ping_pong_never_waits, .timeout = 120)
{
	struct pp_rig r;

	pp_start(&r, true);
	pp_round(&r.a, &r.b, 1);
	cr_assert_eq(V(r.ca, sock.rx_post_waits), 0,
		     "a SEND ping-pong's post waited for its answer");
	cr_assert_eq(V(r.cb, sock.rx_post_waits), 0);
	cr_assert_eq(V(r.ca, core.rx_msgs[0x3]), PP_ROUNDS);
	cr_assert_eq(V(r.cb, core.rx_msgs[0x3]), PP_ROUNDS);
	pp_stop(&r);
}
