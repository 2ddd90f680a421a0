// SPDX-License-Identifier: MIT
/*
 * test_rtr.c - wisp's MPA initiator against a scripted responder that
 * leaves the peer-to-peer RTR unanswered, as Linux siw 6.1 does when the
 * RTR lands just after its MPA Reply (docs/interop.md, finding 1).
 *
 * wisp must then send zero-length RDMA Writes, 50 ms after the stream
 * started and twice as long after each, until the first FPDU comes back,
 * and nothing more after that; the QP must stay usable throughout.
 *
 * Only what the code guarantees is asserted, so that a loaded machine
 * cannot fail the test: a nudge is never sent before its time (a lower
 * bound, measured from a moment known to precede the stream's start), and
 * none follows an answer that wisp has provably taken in. Nothing bounds
 * how late anything happens.
 */
#include <poll.h>

#include "dp_util.h"

/* Read exactly len octets from fd within ms; false if the time ran out. */
static bool read_exact(int fd, uint8_t *buf, size_t len, int ms)
{
	int64_t end = dp_now_ms() + ms;

	while (len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = end - dp_now_ms();
		ssize_t r;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		r = read(fd, buf, len);
		cr_assert_gt(r, 0, "the initiator closed the stream");
		buf += r;
		len -= (size_t)r;
	}
	return true;
}

struct fpdu {
	unsigned ulpdu;           /* ULPDU_Length */
	uint8_t ddp, rdmap;       /* control octets */
	int64_t at;               /* when it was complete, ms */
};

/* The next FPDU (CRC off) within ms; false if none came. */
static bool next_fpdu(int fd, struct fpdu *f, int ms)
{
	uint8_t b[2 + 65535 + 3 + MPA_CRC_LEN];
	size_t rest;

	if (!read_exact(fd, b, 2, ms))
		return false;
	f->ulpdu = (unsigned)(b[0] << 8 | b[1]);
	rest = (2 + f->ulpdu + 3) / 4 * 4 - 2 + MPA_CRC_LEN;
	cr_assert(read_exact(fd, b + 2, rest, DP_TIMEOUT_MS),
		  "an FPDU cut short");
	f->ddp = b[2];
	f->rdmap = b[3];
	f->at = dp_now_ms();
	return true;
}

#define IS_READ_REQ(f)   ((f).ulpdu == 46 && (f).ddp == 0x41 && (f).rdmap == 0x41)
#define IS_ZERO_WRITE(f) ((f).ulpdu == 14 && (f).ddp == 0xc1 && (f).rdmap == 0x40)

struct initiator {
	struct ibv_qp *qp;
	int fd;
	int ret;
};

static void *initiator_main(void *arg)
{
	struct initiator *in = arg;
	struct wisp_mpa_prefs prefs = { .mpa_rev = 2, .p2p = true,
					.read_rtr = true, .ird = 4, .ord = 4 };

	in->ret = wisp_qp_connect_fd(in->qp, in->fd, true, &prefs,
				     DP_TIMEOUT_MS);
	return NULL;
}

/* The scripted responder's side of the MPA exchange: accept with the
 * READ RTR, CRC off. */
static void accept_request(int fd, int64_t *replied_ms)
{
	uint8_t buf[MPA_RR_HDR_LEN + MPA_PD_MAX], out[sizeof(buf)];
	struct mpa_prefs local = { .rev = 2, .p2p = true, .rtr = MPA_RTR_READ,
				   .ird = 4, .ord = 4 };
	struct mpa_rr req, rej, reply;
	struct mpa_params params;
	enum mpa_error err;
	size_t pd;
	int n;

	cr_assert(read_exact(fd, buf, MPA_RR_HDR_LEN, DP_TIMEOUT_MS));
	pd = (size_t)(buf[18] << 8 | buf[19]);
	cr_assert(read_exact(fd, buf + MPA_RR_HDR_LEN, pd, DP_TIMEOUT_MS));
	cr_assert_gt(mpa_nego_check_request(buf, MPA_RR_HDR_LEN + pd, &local,
					    &req, &rej, &err), 0);
	cr_assert_eq(mpa_nego_accept(&req, &local, &reply, &params), 0);
	cr_assert(params.p2p && params.rtr == MPA_RTR_READ && !params.crc);
	n = mpa_rr_build(&reply, out, sizeof(out));
	cr_assert_gt(n, 0);
	/* The initiator's stream, and its nudge timer, can only start once
	 * it has read the Reply: after this moment. */
	*replied_ms = dp_now_ms();
	cr_assert_eq(write(fd, out, (size_t)n), n);
}

Test(rtr, unanswered_rtr_is_nudged_until_answered)
{
	struct dp_opts o = { 0 };
	struct dp_side s;
	struct initiator in;
	struct fpdu rtr, n1, n2, f;
	/* The answer: the zero-length Read Response (tagged, Last, opcode
	 * 2, STag unchecked at zero length, TO 0, CRC field off), then a
	 * Send of "peer-ok!" (untagged, Last, opcode 3, QN 0, MSN 1, MO 0)
	 * whose receive completion proves that wisp took the answer in. */
	static const uint8_t resp[20 + 32] = {
		0, 14, 0xc1, 0x42, 0, 0, 1, 0, [20] = 0, 26, 0x41, 0x43,
		[35] = 1, [40] = 'p', 'e', 'e', 'r', '-', 'o', 'k', '!' };
	uint8_t *in_buf;
	struct ibv_recv_wr rwr = { .num_sge = 1 }, *rbad;
	struct ibv_sge rsge;
	struct ibv_mr *rmr;
	int64_t replied;
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE |
						IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	char msg[8] = "wisp-ok";
	pthread_t th;
	int sv[2];

	dp_side_init(&s, dp_open(), &o, NULL, NULL);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	in = (struct initiator){ .qp = s.qp, .fd = sv[0] };
	cr_assert_eq(pthread_create(&th, NULL, initiator_main, &in), 0);
	rmr = dp_mr(s.pd, 8, IBV_ACCESS_LOCAL_WRITE, &in_buf);
	rsge = (struct ibv_sge){ .addr = (uintptr_t)in_buf, .length = 8,
				 .lkey = rmr->lkey };
	rwr.sg_list = &rsge;
	cr_assert_eq(ibv_post_recv(s.qp, &rwr, &rbad), 0);
	accept_request(sv[1], &replied);
	pthread_join(th, NULL);
	cr_assert_eq(in.ret, 0, "initiator: %s", strerror(in.ret));

	cr_assert(next_fpdu(sv[1], &rtr, DP_TIMEOUT_MS), "no RTR");
	cr_assert(IS_READ_REQ(rtr), "RTR: ULPDU %u, control %#x %#x",
		  rtr.ulpdu, rtr.ddp, rtr.rdmap);
	cr_assert(next_fpdu(sv[1], &n1, DP_TIMEOUT_MS), "no first nudge");
	cr_assert(IS_ZERO_WRITE(n1), "nudge: ULPDU %u, control %#x %#x",
		  n1.ulpdu, n1.ddp, n1.rdmap);
	cr_assert(next_fpdu(sv[1], &n2, DP_TIMEOUT_MS), "no second nudge");
	cr_assert(IS_ZERO_WRITE(n2));
	/* Never early: the first is timed 50 ms after the stream started,
	 * the second 100 ms after the first was sent, and the stream
	 * started after the Reply was written (same clock, whole
	 * milliseconds rounded down on both sides). When they arrive is up
	 * to the scheduler, so where the RTR was read is no reference. */
	cr_assert_geq(n1.at - replied, 50, "first nudge %lld ms after the Reply",
		      (long long)(n1.at - replied));
	cr_assert_geq(n2.at - replied, 150, "second nudge %lld ms after the Reply",
		      (long long)(n2.at - replied));
	cr_log_info("RTR unanswered: nudges read %lld and %lld ms after the Reply",
		    (long long)(n1.at - replied), (long long)(n2.at - replied));

	/* The answer. Until wisp has read it, a third nudge may still be
	 * due (200 ms after the second); once the Send behind it has
	 * completed, no nudge may follow. What was sent before that
	 * completion is already in the socket: drain it (zero-length
	 * Writes only), then nothing may come while the nudges would have
	 * gone on (the fourth 400 ms after the third). */
	cr_assert_eq(write(sv[1], resp, sizeof(resp)), (ssize_t)sizeof(resp));
	wc = dp_wait1(s.rcq);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "%s",
		     ibv_wc_status_str(wc.status));
	cr_assert(wc.opcode == IBV_WC_RECV && wc.byte_len == 8 &&
		  !memcmp(in_buf, "peer-ok!", 8), "the peer's Send");
	while (next_fpdu(sv[1], &f, 1))
		cr_assert(IS_ZERO_WRITE(f), "ULPDU %u, control %#x %#x before "
			  "the answer was taken", f.ulpdu, f.ddp, f.rdmap);
	cr_assert(!next_fpdu(sv[1], &f, 1000),
		  "an FPDU (ULPDU %u, control %#x %#x) after the answer",
		  f.ulpdu, f.ddp, f.rdmap);

	/* and the QP works: a Send goes out as an FPDU and completes */
	sge = (struct ibv_sge){ .addr = (uintptr_t)msg, .length = 8 };
	wr.sg_list = &sge;
	wr.num_sge = 1;
	cr_assert_eq(ibv_post_send(s.qp, &wr, &bad), 0);
	cr_assert(next_fpdu(sv[1], &f, DP_TIMEOUT_MS), "no Send");
	cr_assert(f.ulpdu == 18 + 8 && f.ddp == 0x41 && f.rdmap == 0x43,
		  "Send: ULPDU %u, control %#x %#x", f.ulpdu, f.ddp, f.rdmap);
	wc = dp_wait1(s.scq);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "%s",
		     ibv_wc_status_str(wc.status));
	close(sv[1]);
	cr_assert_eq(ibv_dereg_mr(rmr), 0);
	free(in_buf);
	dp_side_fini(&s, false, true);
}
