/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the receive path of a whole RDMAP queue pair
 * (rdmap_qp_rx_want / rdmap_qp_rx_done), i.e. everything a peer's octets
 * reach: MPA framing and CRC, DDP and RDMAP headers, tagged placement
 * into a registered buffer, untagged placement into posted receives,
 * Read Requests answered through tx_fill, Terminates.
 *
 * A whole one-segment Send into the one-SGE receive takes the one-pass
 * path (rx_send_small); with three SGEs it takes the general one.
 *
 * Input: octet 0 is the configuration (bit 0 CRC, bit 1 a posted receive
 * of 3 SGEs rather than 1, bits 2-3 the chunk size the stream is cut
 * into, bit 4 a QP that grants no remote access); the rest is the TCP
 * byte stream after the MPA exchange.
 *
 * Checks (beyond ASan / UBSan): placement never writes outside the
 * registered buffers: their guard zones are poisoned for ASan, so the
 * first octet placed there stops the run at the writing instruction, and
 * the guard pattern is checked once more at the end for builds without
 * ASan. The QP answers with bounded output; every completion is
 * well-formed.
 *
 * The buffers are 32 KiB, so that a WRITE's payload can be large enough
 * (DIRECT_MIN, 8 KiB, or more) to be read straight into the MR: the
 * direct read, the stage's tail read after it (RX_TAIL) and the staged
 * read of the rest after a direct read that stopped short (rx_short) all
 * take the fuzzer's octets, in chunks of 512 or 1 MiB.
 *
 * Speed: the harness itself is instrumented like the library, so a check
 * run after every chunk (256 compares, each traced by libFuzzer) cost more
 * than the QP it checked and held the target near 1,400 inputs/s. The
 * poisoned guards catch a stray write as it happens, so the end check
 * alone is enough.
 */
#include <sanitizer/asan_interface.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap_qp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define GUARD   64
#define BUF     (32 * 1024)
#define PD_ID   ((const void *)0x1)

static _Alignas(64) uint8_t mem[2][GUARD + BUF + GUARD];
static int ncqe;

static void on_complete(void *arg, const struct rdmap_cqe *c)
{
	(void)arg;
	if (c->status > RDMAP_WC_GENERAL_ERR || c->opcode > RDMAP_WC_RECV)
		abort();
	if (c->recv && c->status == RDMAP_WC_SUCCESS && c->byte_len > BUF)
		abort();            /* more than the receive buffer holds */
	ncqe++;
}

static const struct rdmap_qp_ops ops = { .complete = on_complete };

/* Poison (or unpoison) both guard zones of both buffers. */
static void guards(bool poison)
{
	for (int b = 0; b < 2; b++) {
		if (poison) {
			ASAN_POISON_MEMORY_REGION(mem[b], GUARD);
			ASAN_POISON_MEMORY_REGION(mem[b] + GUARD + BUF, GUARD);
		} else {
			ASAN_UNPOISON_MEMORY_REGION(mem[b], GUARD);
			ASAN_UNPOISON_MEMORY_REGION(mem[b] + GUARD + BUF, GUARD);
		}
	}
}

static void check_guards(void)
{
	guards(false);
	for (int b = 0; b < 2; b++)
		for (int i = 0; i < GUARD; i++)
			if (mem[b][i] != 0xa5 || mem[b][GUARD + BUF + i] != 0xa5)
				abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[4] = { 1, 7, 512, 1 << 20 };
	struct rdmap_stag_table t;
	struct rdmap_mr mr[2] = { 0 };
	struct rdmap_qp_cfg cfg = { .pd = PD_ID, .stags = &t, .ops = &ops,
				    .sq_size = 8, .rq_size = 8 };
	struct rdmap_stream_cfg s = { .ird = 4, .ord = 4, .mulpdu = 1024 };
	struct rdmap_qp *qp;
	struct rdmap_ring *rq;
	size_t chunk;

	if (size < 1)
		return 0;
	s.crc = data[0] & 1;
	chunk = chunks[(data[0] >> 2) & 3];
	/* 0x10: the QP grants no remote access (qp_access_flags 0), so
	 * every WRITE and Read Request with octets must be refused. */
	cfg.access = data[0] & 0x10 ? 0 : RDMAP_ACC_REMOTE_WRITE |
					  RDMAP_ACC_REMOTE_READ;
	data++;
	size--;

	guards(false);          /* an earlier run may have left them on */
	memset(mem, 0xa5, sizeof(mem));
	guards(true);
	if (rdmap_stag_table_init(&t, 16))
		return 0;
	/* Known STags (0x15a, 0x25a) so that seeds can name them. */
	t.fixed_key = 0x5a;
	for (int b = 0; b < 2; b++) {
		mr[b].addr = mem[b] + GUARD;
		mr[b].iova = 0x10000 * (uint64_t)(b + 1);
		mr[b].length = BUF;
		mr[b].access = RDMAP_ACC_LOCAL_WRITE | RDMAP_ACC_REMOTE_WRITE |
			       RDMAP_ACC_REMOTE_READ;
		mr[b].pd = PD_ID;
		if (rdmap_stag_insert(&t, &mr[b]) ||
		    mr[b].stag != ((uint32_t)(b + 1) << 8 | 0x5a))
			abort();
	}
	qp = rdmap_qp_create(&cfg);
	if (!qp || rdmap_qp_start(qp, &s))
		abort();

	/* Two receives into buffer 1: one SGE, or three. */
	rq = rdmap_qp_rq(qp);
	for (uint32_t i = 0; i < 2; i++) {
		struct rdmap_recv_wr *r = rdmap_ring_slot(rq, i);

		memset(r, 0, sizeof(*r));
		r->wr_id = i;
		if (data[-1] & 2) {
			r->num_sge = 3;
			for (int k = 0; k < 3; k++)
				r->sge[k] = (struct rdmap_sge){
					mr[1].iova + 1024 * (uint64_t)k + 2048 * i,
					700, mr[1].stag };
			r->length = 2100;
		} else {
			r->num_sge = 1;
			r->sge[0] = (struct rdmap_sge){ mr[1].iova + 2048 * i,
							2048, mr[1].stag };
			r->length = 2048;
		}
	}
	atomic_store(&rq->tail, 2);

	/* Feed the stream the way the engine would, in chunks: the
	 * verbs provider asks rdmap_qp_rx_want_staged first, and
	 * rdmap_qp_rx_want (its lock taken) when that says 0. */
	while (size) {
		struct iovec iov[RDMAP_MAX_SGE + 1], tx[64];
		int n = rdmap_qp_rx_want_staged(qp, iov, RDMAP_MAX_SGE + 1);
		size_t got = 0;

		if (!n)
			n = rdmap_qp_rx_want(qp, iov, RDMAP_MAX_SGE + 1);

		for (int i = 0; i < n && size; i++) {
			size_t take = iov[i].iov_len;

			if (take > size)
				take = size;
			if (take > chunk - got)
				take = chunk - got;
			memcpy(iov[i].iov_base, data, take);
			data += take;
			size -= take;
			got += take;
			if (got == chunk)
				break;
		}
		if (!got)
			break;
		rdmap_qp_rx_done(qp, got);
		/* Let responses (Read Responses, a Terminate) go out. */
		for (int rounds = 0; rounds < 64; rounds++) {
			size_t bytes = 0;

			n = rdmap_qp_tx_fill(qp, tx, 64);
			if (n <= 0)
				break;
			for (int i = 0; i < n; i++)
				bytes += tx[i].iov_len;
			rdmap_qp_tx_done(qp, bytes);
		}
	}
	rdmap_qp_stream_ended(qp, 0);
	check_guards();
	/* No right to write: buffer 0 (no receive lies there) is as it was. */
	if (!cfg.access)
		for (int i = 0; i < BUF; i++)
			if (mem[0][GUARD + i] != 0xa5)
				abort();
	rdmap_qp_destroy(qp);
	rdmap_stag_table_fini(&t);
	return 0;
}
