/* SPDX-License-Identifier: MIT */
/*
 * wisp_stats_shm.h - the layout of the statistics file each wisp process
 * publishes, shared by wisp's libibverbs (the writer, verbs_stats.c) and
 * wisp-stat (the reader).
 *
 * Where: $WISP_STATS_DIR if set, else $XDG_RUNTIME_DIR/wisp when
 * XDG_RUNTIME_DIR is set, else /dev/shm/wisp-<uid>. The folder is made
 * with mode 0700, the file (named by the process id) with 0600: only the
 * same user reads it. The file is removed when the process exits; a
 * reader ignores (and removes) the file of a process that is gone.
 *
 * What: a header, then max_dev device entries (one per open ibv_context),
 * then max_qp QP slots. Counters are 64-bit fields that the owning
 * process updates in place with relaxed atomic stores: nothing is
 * copied, nothing wakes up to publish, the data path makes no system
 * call. Everything else (which slots are in use, their description, the
 * totals of destroyed QPs) changes under the header's seqlock: a reader
 * that finds seq odd, or changed across its read, reads again.
 *
 * A device's totals are its retired counters (QPs already destroyed)
 * plus the counters of its live QP slots; the process totals add those
 * of closed contexts (closed). Version: bump WISP_STATS_VERSION whenever
 * the layout changes; a reader refuses other versions.
 */
#ifndef WISP_STATS_SHM_H
#define WISP_STATS_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "glue_stats.h"
#include "rdmap_qp_stats.h"

#define WISP_STATS_MAGIC    0x5453534950534957ULL   /* "WISPSSTT" */
#define WISP_STATS_VERSION  5
#define WISP_STATS_MAX_DEV  16
#define WISP_STATS_MAX_QP   1024

/* Connection manager events of the process (librdmacm). */
struct wisp_stats_cm {
	_Atomic uint64_t connect_requests;   /* CONNECT_REQUEST raised */
	_Atomic uint64_t established;        /* ESTABLISHED, either side */
	_Atomic uint64_t disconnected;       /* DISCONNECTED */
	_Atomic uint64_t rejected;           /* REJECTED: the peer said no */
	_Atomic uint64_t refused;            /* we said no (rdma_reject,
					      * backlog, bad Request) */
	_Atomic uint64_t unreachable;        /* UNREACHABLE */
	_Atomic uint64_t connect_errors;     /* CONNECT_ERROR */
};

/* What a QP (or a sum of QPs) counts. */
struct wisp_stats_counts {
	struct rdmap_qp_stats core;          /* protocol: rdmap_qp_stats.h */
	struct glue_conn_stats sock;         /* socket: glue_stats.h */
	_Atomic uint64_t streams;            /* streams attached */
	_Atomic uint64_t streams_ended;      /* ended in order (FIN) */
	_Atomic uint64_t streams_broken;     /* ended with an error */
};

enum wisp_stats_qp_state {
	WISP_STATS_QP_IDLE,                  /* no stream yet */
	WISP_STATS_QP_CONNECTED,
	WISP_STATS_QP_ENDED,                 /* stream over: see end_reason */
};

struct wisp_stats_qp {
	/* Under the header's seqlock. */
	uint32_t in_use;
	uint32_t dev;                        /* index of its device entry */
	uint32_t qp_num;
	_Atomic uint32_t state;              /* enum wisp_stats_qp_state */
	_Atomic int32_t end_reason;          /* errno, 0 orderly */
	uint8_t mpa_rev, crc, markers, p2p, initiator, rtr;
	uint16_t ird, ord;
	uint32_t mulpdu;
	char local[64];                      /* "address:port" */
	char peer[64];
	uint64_t connected_ms;               /* CLOCK_REALTIME */
	struct wisp_stats_counts c;          /* updated in place */
};

struct wisp_stats_dev {
	/* Under the header's seqlock. */
	uint32_t in_use;
	uint32_t id;                         /* contexts opened before it */
	char name[16];                       /* "wisp0" */
	uint64_t opened_ms;                  /* CLOCK_REALTIME */
	_Atomic uint64_t qps_created;
	struct wisp_stats_counts retired;    /* destroyed QPs, summed */
};

struct wisp_stats_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t size;                       /* of the whole file */
	uint32_t max_dev, max_qp;
	uint32_t dev_off, qp_off;            /* offsets of the arrays */
	uint32_t dev_size, qp_size;          /* of one entry */
	int32_t pid;
	uint32_t pad;
	uint64_t start_ticks;                /* /proc/<pid>/stat field 22 */
	uint64_t created_ms;                 /* CLOCK_REALTIME */
	char comm[32];                       /* program name */
	_Atomic uint32_t seq;                /* seqlock: odd while changing */
	_Atomic uint32_t qp_high;            /* slots [0, qp_high) were used */
	_Atomic uint64_t qp_unlisted;        /* QPs that found no free slot */
	struct wisp_stats_cm cm;
	struct wisp_stats_counts closed;     /* contexts already closed */
};

struct wisp_stats_file {
	struct wisp_stats_hdr hdr;
	struct wisp_stats_dev dev[WISP_STATS_MAX_DEV];
	struct wisp_stats_qp qp[WISP_STATS_MAX_QP];
};

/* ---- names, for printing ---- */

struct wisp_stats_field {
	const char *name;
	size_t off;               /* in struct wisp_stats_counts */
};

#define WISP_STATS_F(n, m) { n, offsetof(struct wisp_stats_counts, m) }

/* Scalar counters, in the order they are printed. */
static const struct wisp_stats_field wisp_stats_fields[] = {
	WISP_STATS_F("fpdus_tx", core.tx_fpdus),
	WISP_STATS_F("fpdus_rx", core.rx_fpdus),
	WISP_STATS_F("crc_errors", core.crc_errors),
	WISP_STATS_F("faults", core.faults),
	WISP_STATS_F("terminates_tx", core.term_tx),
	WISP_STATS_F("terminates_rx", core.term_rx),
	WISP_STATS_F("terminate_tx_last", core.term_tx_last),
	WISP_STATS_F("terminate_rx_last", core.term_rx_last),
	WISP_STATS_F("flushed", core.flushed),
	WISP_STATS_F("rtr_sent", core.rtr_sent),
	WISP_STATS_F("rtr_nudges", core.rtr_nudges),
	WISP_STATS_F("sock_tx_sends", sock.tx_sends),
	WISP_STATS_F("sock_tx_direct", sock.tx_direct),
	WISP_STATS_F("sock_tx_octets", sock.tx_octets),
	WISP_STATS_F("sock_tx_short", sock.tx_short),
	WISP_STATS_F("sock_tx_eagain", sock.tx_eagain),
	WISP_STATS_F("sock_tx_wait_ns", sock.tx_wait_ns),
	WISP_STATS_F("sock_tx_wait_max_ns", sock.tx_wait_max_ns),
	WISP_STATS_F("sock_rx_recvs", sock.rx_recvs),
	WISP_STATS_F("sock_rx_direct", sock.rx_direct),
	WISP_STATS_F("sock_rx_octets", sock.rx_octets),
	WISP_STATS_F("sock_rx_empty", sock.rx_empty),
	WISP_STATS_F("sock_rx_busy_hits", sock.rx_busy_hits),
	WISP_STATS_F("sock_tx_corked", sock.tx_corked),
	WISP_STATS_F("sock_tx_held", sock.tx_held),
	WISP_STATS_F("sock_tx_pushes", sock.tx_pushes),
	WISP_STATS_F("sock_tx_push_engine", sock.tx_push_engine),
	WISP_STATS_F("sock_rx_post_waits", sock.rx_post_waits),
	WISP_STATS_F("sock_rx_post_hits", sock.rx_post_hits),
	WISP_STATS_F("sock_tx_poll_waits", sock.tx_poll_waits),
	WISP_STATS_F("sock_tx_poll_woken", sock.tx_poll_woken),
	WISP_STATS_F("streams", streams),
	WISP_STATS_F("streams_ended", streams_ended),
	WISP_STATS_F("streams_broken", streams_broken),
};

/* The opcodes named in the per-opcode arrays (RFC 5040 section 4). */
static const char *const wisp_stats_ops[RDMAP_STATS_OPS] = {
	[0x0] = "write", [0x1] = "read_req", [0x2] = "read_resp",
	[0x3] = "send", [0x4] = "send_inv", [0x5] = "send_se",
	[0x6] = "send_se_inv", [0x7] = "terminate",
};

/* The slots of term_*_kind. */
static const char *const wisp_stats_term_kinds[RDMAP_STATS_TERM_KINDS] = {
	"rdmap_catastrophic", "rdmap_remote_protection",
	"rdmap_remote_operation", "rdmap_etype3",
	"ddp_catastrophic", "ddp_tagged", "ddp_untagged", "ddp_etype3",
	"llp_0", "llp_1", "llp_2", "llp_3", "other",
};

static const struct wisp_stats_field wisp_stats_cm_fields[] = {
	{ "connect_requests", offsetof(struct wisp_stats_cm, connect_requests) },
	{ "established", offsetof(struct wisp_stats_cm, established) },
	{ "disconnected", offsetof(struct wisp_stats_cm, disconnected) },
	{ "rejected", offsetof(struct wisp_stats_cm, rejected) },
	{ "refused", offsetof(struct wisp_stats_cm, refused) },
	{ "unreachable", offsetof(struct wisp_stats_cm, unreachable) },
	{ "connect_errors", offsetof(struct wisp_stats_cm, connect_errors) },
};

/* Every counter of struct wisp_stats_counts is a _Atomic uint64_t: the
 * whole struct can be walked as an array of them. */
#define WISP_STATS_NCOUNTS \
	(sizeof(struct wisp_stats_counts) / sizeof(_Atomic uint64_t))
_Static_assert(sizeof(struct wisp_stats_counts) % sizeof(uint64_t) == 0,
	       "counts are whole 64-bit words");

static inline uint64_t wisp_stats_get(const struct wisp_stats_counts *c,
				      size_t off)
{
	return atomic_load_explicit(
		(const _Atomic uint64_t *)((const char *)c + off),
		memory_order_relaxed);
}

/* dst += src, word by word (relaxed: each word is a counter, except the
 * last Terminate codes and the wait maximum, which take src's if set). */
static inline void wisp_stats_add(struct wisp_stats_counts *dst,
				  const struct wisp_stats_counts *src)
{
	_Atomic uint64_t *d = (_Atomic uint64_t *)dst;
	const _Atomic uint64_t *s = (const _Atomic uint64_t *)src;
	const size_t keep[] = {
		offsetof(struct wisp_stats_counts, core.term_tx_last),
		offsetof(struct wisp_stats_counts, core.term_rx_last),
		offsetof(struct wisp_stats_counts, sock.tx_wait_max_ns),
	};

	for (size_t i = 0; i < WISP_STATS_NCOUNTS; i++) {
		uint64_t v = atomic_load_explicit(&s[i], memory_order_relaxed);
		uint64_t o = atomic_load_explicit(&d[i], memory_order_relaxed);
		int last = 0;

		for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++)
			last |= keep[k] == i * sizeof(uint64_t);
		if (last) {
			if (v && (i * sizeof(uint64_t) != keep[2] || v > o))
				atomic_store_explicit(&d[i], v,
						      memory_order_relaxed);
			continue;
		}
		atomic_store_explicit(&d[i], o + v, memory_order_relaxed);
	}
}

/*
 * Field 22 of /proc/<pid>/stat (the start time in clock ticks), 0 if it
 * cannot be read: with the pid it names one process, so a reader tells a
 * file's writer from a later process that reused its pid. The writer and
 * the reader must read it the same way, hence one function for both.
 * comm may hold spaces and parentheses: count from the last ')'.
 */
static inline uint64_t wisp_stats_start_ticks(const char *stat_path)
{
	char buf[1024], *p;
	unsigned long long v = 0;
	FILE *f = fopen(stat_path, "re");
	size_t n;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%*u %*u %*d %*d %*d %*d %*d %*d %llu", &v) != 1)
		return 0;
	return v;
}

#endif /* WISP_STATS_SHM_H */
