// SPDX-License-Identifier: MIT
/*
 * wisp_fpdu_bench - what each FPDU costs the QP core in user space,
 * without sockets: one QP core's tx_fill output for a run of RDMA WRITEs
 * is gathered into a buffer (the copy a sendmsg would make), and a
 * second core receives it through rx_want / rx_done in reads of a fixed
 * size (the copy a recvmsg would make). Both copies are counted, as the
 * kernel's would be. CPU time of this thread (CLOCK_THREAD_CPUTIME_ID),
 * so other processes on the machine change the figure less than they
 * change a wall clock; the best of the rounds is printed.
 *
 *   wisp_fpdu_bench [--crc|--no-crc] [--mulpdu N] [--msg OCTETS]
 *                   [--window N] [--read OCTETS] [--rounds N] [--tcp]
 *
 * Default: 1 MiB WRITEs at MULPDU 1442 (one segment at MTU 1500), a
 * window of 32 messages whose sources and targets rotate through
 * 32 MiB each (as wisp_bench's do, so neither is in the cache when
 * an FPDU reaches it), reads of 64 KiB, 8 rounds.
 * docs/performance-log.md, "FPDUs that fit one segment: stalls".
 *
 * --tcp hands each tx_fill's iovecs to sendmsg(2) on a TCP connection
 * over 127.0.0.1 instead (a second thread reads and discards the
 * stream), so that the send figure is the sending thread's CPU, user
 * and kernel, as the thread that posts and sends pays it: what the
 * kernel costs per iovec shows there (docs/performance-log.md,
 * "One-segment FPDUs: the sending thread"). Nothing is received by the
 * second QP then.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mpa.h"
#include "rdmap_qp.h"
#include "rdmap_stag.h"

#define PD_ID ((const void *)0x1)

struct opts {
	bool crc, tcp;
	uint32_t mulpdu, window, rounds;
	size_t msg, read;
};

static int ncqe;

static void on_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	if (c->status != RDMAP_WC_SUCCESS) {
		fprintf(stderr, "wisp_fpdu_bench: completion status %d\n",
			(int)c->status);
		exit(1);
	}
	ncqe++;
}

static const struct rdmap_qp_ops ops = { .complete = on_complete };

static double cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);

	if (!p) {
		fprintf(stderr, "wisp_fpdu_bench: out of memory\n");
		exit(1);
	}
	return p;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: wisp_fpdu_bench [--crc|--no-crc] [--mulpdu N] [--msg OCTETS]\n"
"                       [--window N] [--read OCTETS] [--rounds N] [--tcp]\n"
"User-space cost per FPDU of the QP core, sending and receiving RDMA\n"
"WRITEs in memory (no sockets). Defaults: --crc, MULPDU 1442 (one\n"
"segment at MTU 1500), 1 MiB messages, a window of 32, reads of 64 KiB,\n"
"8 rounds. --tcp: send over a loopback TCP connection instead, the\n"
"send figure then the sending thread's CPU including the kernel's.\n");
}

static unsigned long num(const char *s, const char *what, unsigned long lo,
			 unsigned long hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s ? s : "", &end, 10);
	if (!s || errno || *end || v < lo || v > hi) {
		fprintf(stderr, "wisp_fpdu_bench: %s: %s not in %lu..%lu\n",
			what, s ? s : "(missing)", lo, hi);
		exit(2);
	}
	return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .crc = true, .mulpdu = 1442, .window = 32,
			    .rounds = 8, .msg = 1u << 20, .read = 65536 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--crc")) {
			o->crc = true;
		} else if (!strcmp(a, "--no-crc")) {
			o->crc = false;
		} else if (!strcmp(a, "--tcp")) {
			o->tcp = true;
		} else if (!strcmp(a, "--mulpdu")) {
			o->mulpdu = (uint32_t)num(v, a, 128,
						  MPA_ULPDU_SEND_MAX);
			i++;
		} else if (!strcmp(a, "--msg")) {
			o->msg = num(v, a, 1, 16u << 20);
			i++;
		} else if (!strcmp(a, "--window")) {
			o->window = (uint32_t)num(v, a, 1, 64);
			i++;
		} else if (!strcmp(a, "--read")) {
			o->read = num(v, a, 1, 1u << 20);
			i++;
		} else if (!strcmp(a, "--rounds")) {
			o->rounds = (uint32_t)num(v, a, 1, 1000);
			i++;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else {
			usage(stderr);
			exit(2);
		}
	}
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* The reading end of --tcp: reads until the sender closes. */
static void *drain(void *arg)
{
	static uint8_t buf[1u << 20];
	int fd = *(int *)arg;

	while (read(fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

/* A connected pair over 127.0.0.1: *w to write, *r to read. */
static void tcp_pair(int *w, int *r)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al))
		die("wisp_fpdu_bench: listen");
	*w = socket(AF_INET, SOCK_STREAM, 0);
	if (*w < 0 || connect(*w, (struct sockaddr *)&a, sizeof(a)))
		die("wisp_fpdu_bench: connect");
	*r = accept(l, NULL, NULL);
	if (*r < 0)
		die("wisp_fpdu_bench: accept");
	close(l);
}

/* sendmsg of iov[0..n) whole (blocking; a partial send goes on). */
static void send_all(int fd, struct iovec *iov, int n)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };

	while (m.msg_iovlen) {
		ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);

		if (k < 0)
			die("wisp_fpdu_bench: sendmsg");
		while (m.msg_iovlen && (size_t)k >= m.msg_iov->iov_len) {
			k -= (ssize_t)m.msg_iov->iov_len;
			m.msg_iov++;
			m.msg_iovlen--;
		}
		if (m.msg_iovlen) {
			m.msg_iov->iov_base =
				(uint8_t *)m.msg_iov->iov_base + k;
			m.msg_iov->iov_len -= (size_t)k;
		}
	}
}

int main(int argc, char **argv)
{
	static struct iovec iov[1024];
	struct rdmap_stag_table t;
	struct rdmap_mr smr, dmr;
	struct rdmap_qp *tx, *rx;
	struct opts o;
	size_t span, wire_cap, fpdus = 0;
	uint8_t *src, *dst, *wire;
	double best_tx = 0, best_rx = 0;
	uint32_t tail = 0;
	int wfd = -1, rfd = -1;
	pthread_t reader;

	parse(argc, argv, &o);
	if (o.tcp) {
		tcp_pair(&wfd, &rfd);
		if (pthread_create(&reader, NULL, drain, &rfd))
			die("wisp_fpdu_bench: pthread_create");
	}
	span = (size_t)o.window * o.msg;
	src = xalloc(span);
	dst = xalloc(span);
	/* each FPDU adds at most 2 + 14 + 3 + 4 octets to its payload */
	wire_cap = span + (span / (o.mulpdu - 14) + o.window) * 24;
	wire = xalloc(wire_cap);
	for (size_t i = 0; i < span; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 11));
	memset(dst, 0, span);
	memset(wire, 0, wire_cap);

	smr = (struct rdmap_mr){ .addr = src, .iova = 0x10000, .length = span,
				 .pd = PD_ID };
	dmr = (struct rdmap_mr){ .addr = dst, .iova = 0x40000000,
				 .length = span, .pd = PD_ID,
				 .access = RDMAP_ACC_REMOTE_WRITE };
	if (rdmap_stag_table_init(&t, 16) || rdmap_stag_insert(&t, &smr) ||
	    rdmap_stag_insert(&t, &dmr)) {
		fprintf(stderr, "wisp_fpdu_bench: STag table\n");
		return 1;
	}
	atomic_store(&smr.valid, true);
	atomic_store(&dmr.valid, true);
	{
		struct rdmap_qp_cfg cfg = {
			.pd = PD_ID, .stags = &t, .ops = &ops, .sq_size = 64,
			.rq_size = 4, .access = RDMAP_ACC_REMOTE_WRITE,
		};
		struct rdmap_stream_cfg s = {
			.ird = 4, .ord = 4, .crc = o.crc, .mulpdu = o.mulpdu,
			.emss = o.mulpdu + 6,
		};

		tx = rdmap_qp_create(&cfg);
		rx = rdmap_qp_create(&cfg);
		if (!tx || !rx || rdmap_qp_start(tx, &s) ||
		    rdmap_qp_start(rx, &s)) {
			fprintf(stderr, "wisp_fpdu_bench: QP setup\n");
			return 1;
		}
	}

	for (uint32_t r = 0; r < o.rounds; r++) {
		size_t wire_len = 0, off = 0, n_fpdu = 0;
		double t0, t1, t2;

		for (uint32_t i = 0; i < o.window; i++, tail++) {
			struct rdmap_send_wr *w =
				rdmap_ring_slot(rdmap_qp_sq(tx), tail);

			memset(w, 0, sizeof(*w));
			w->wr_id = tail;
			w->opcode = RDMAP_WR_WRITE;
			w->flags = RDMAP_WR_SIGNALED;
			w->num_sge = 1;
			w->sge[0] = (struct rdmap_sge){
				smr.iova + (uint64_t)i * o.msg,
				(uint32_t)o.msg, smr.stag };
			w->length = o.msg;
			w->rkey = dmr.stag;
			w->remote_addr = dmr.iova + (uint64_t)i * o.msg;
		}
		ncqe = 0;
		atomic_store(&rdmap_qp_sq(tx)->tail, tail);
		t0 = cpu_now();
		for (int n; (n = rdmap_qp_tx_fill(tx, iov, 1024)) > 0;) {
			size_t bytes = 0;

			if (o.tcp) {
				for (int i = 0; i < n; i++)
					bytes += iov[i].iov_len;
				send_all(wfd, iov, n);
				wire_len += bytes;
				rdmap_qp_tx_done(tx, bytes);
				continue;
			}
			for (int i = 0; i < n; i++) {
				if (wire_len + iov[i].iov_len > wire_cap) {
					fprintf(stderr, "wisp_fpdu_bench: "
						"wire buffer too small\n");
					return 1;
				}
				memcpy(wire + wire_len, iov[i].iov_base,
				       iov[i].iov_len);
				wire_len += iov[i].iov_len;
				bytes += iov[i].iov_len;
			}
			rdmap_qp_tx_done(tx, bytes);
		}
		t1 = cpu_now();
		if (o.tcp) {
			/* DDP tagged header: 14 octets per segment. */
			size_t per = o.mulpdu - 14;

			if (ncqe != (int)o.window) {
				fprintf(stderr, "wisp_fpdu_bench: round %u: "
					"%d completions\n", r, ncqe);
				return 1;
			}
			fpdus = o.window * ((o.msg + per - 1) / per);
			if (!r || t1 - t0 < best_tx)
				best_tx = t1 - t0;
			continue;
		}
		while (off < wire_len) {
			struct iovec v[8];
			int n = rdmap_qp_rx_want(rx, v, 8);
			size_t got = 0, lim = o.read;

			for (int i = 0; i < n && off < wire_len && lim; i++) {
				size_t k = v[i].iov_len;

				if (k > wire_len - off)
					k = wire_len - off;
				if (k > lim)
					k = lim;
				memcpy(v[i].iov_base, wire + off, k);
				off += k;
				got += k;
				lim -= k;
				if (k < v[i].iov_len)
					break;
			}
			rdmap_qp_rx_done(rx, got);
		}
		t2 = cpu_now();
		/* The target starts zeroed and is not reset between rounds
		 * (that would bring it into the cache): checked whole after
		 * the first round, then for the completions and the state. */
		if (ncqe != (int)o.window || rdmap_qp_state(rx) != RDMAP_QP_RTS ||
		    (!r && memcmp(src, dst, span))) {
			fprintf(stderr, "wisp_fpdu_bench: round %u: %d "
				"completions, the target %s\n", r, ncqe,
				memcmp(src, dst, span) ? "differs" : "matches");
			return 1;
		}
		for (size_t at = 0; at < wire_len; n_fpdu++) {
			uint16_t ul = (uint16_t)(wire[at] << 8 | wire[at + 1]);

			at += MPA_LEN_FIELD + ul + mpa_pad_len(ul) + MPA_CRC_LEN;
		}
		fpdus = n_fpdu;
		if (!r || t1 - t0 < best_tx)
			best_tx = t1 - t0;
		if (!r || t2 - t1 < best_rx)
			best_rx = t2 - t1;
	}
	if (o.tcp) {
		shutdown(wfd, SHUT_WR);
		pthread_join(reader, NULL);
		close(wfd);
		close(rfd);
		printf("CRC %s, MULPDU %u, %zu-octet WRITEs x %u over TCP "
		       "(127.0.0.1): %zu FPDUs per round; best of %u rounds: "
		       "send %.1f ns per FPDU (the sending thread's CPU, "
		       "kernel included)\n",
		       o.crc ? "on" : "off", o.mulpdu, o.msg, o.window, fpdus,
		       o.rounds, best_tx * 1e9 / (double)fpdus);
	} else {
		printf("CRC %s, MULPDU %u, %zu-octet WRITEs x %u, reads of "
		       "%zu: %zu FPDUs per round; best of %u rounds: send "
		       "%.1f ns, receive %.1f ns per FPDU (CPU time)\n",
		       o.crc ? "on" : "off", o.mulpdu, o.msg, o.window, o.read,
		       fpdus, o.rounds, best_tx * 1e9 / (double)fpdus,
		       best_rx * 1e9 / (double)fpdus);
	}
	rdmap_qp_destroy(tx);
	rdmap_qp_destroy(rx);
	rdmap_stag_table_fini(&t);
	free(src);
	free(dst);
	free(wire);
	return 0;
}
