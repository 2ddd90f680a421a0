/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl: file replication over rdma_cm and verbs.
 *
 * Written only against rdma-core's public APIs (<rdma/rdma_cma.h>,
 * <infiniband/verbs.h>), linked by soname: the same binary runs over an
 * RDMA NIC, over siw, or over wisp through scripts/wisp-run. Nothing here
 * knows about wisp. Design and guarantees: docs/replication.md.
 *
 * Messages and connect private data travel in network byte order, at
 * fixed offsets (wire.h, wire.c); in memory they are the host-order
 * structs of wire.h.
 */
#ifndef WISP_REPL_H
#define WISP_REPL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include "wire.h"

#define REPL_PORT	7470
#define REPL_MAX_STREAMS 16
#define REPL_MAX_WINDOW	1024
#define REPL_NEED_MSGS	64	/* NEED messages per round, at most */
#define REPL_RX_EXTRA	96	/* receives beyond the data slots */
#define REPL_SQ_EXTRA	(REPL_NEED_MSGS + 96)

/* Exit codes (docs/replication.md). */
enum {
	EX_OK = 0,
	EX_FAIL = 1,		/* anything else */
	EX_USAGE = 2,
	EX_CONNECT = 3,		/* peer unreachable, refused, rejected */
	EX_SOURCE = 4,		/* source unreadable or vanished */
	EX_REMOTE = 5,		/* receiver could not store (ENOSPC, EACCES...) */
	EX_LOST = 6,		/* connection lost mid-transfer */
	EX_INTEGRITY = 7,	/* source changed under us / hashes differ */
};

enum repl_mode { MODE_WRITE = 0, MODE_READ = 1, MODE_SEND = 2 };

enum { ST_OK = 0, ST_BAD = 1, ST_SKIP = 2 };

/* A message's wire form, as posted to send and receive. */
struct wmsg {
	unsigned char b[REPL_MSG_LEN];
};

/* One QP of the job. */
struct stream {
	struct rdma_cm_id *id;
	int idx;
	int established;
	uint32_t slot_first, slot_count;
	uint32_t ord;		/* RDMA READs this side may have out */
	uint32_t rkey;		/* sender: the receiver's slot array */
	uint64_t remote;
	uint32_t reads_out;
	/* receive messages; data buffers in send mode */
	struct wmsg *rx;
	struct ibv_mr *rx_mr;
	uint32_t nrx;
	uint32_t rx_buf_first;	/* send mode: first data buffer */
	/* send messages, a free stack */
	struct wmsg *tx;
	struct ibv_mr *tx_mr;
	uint32_t ntx;
	uint32_t *tx_free;
	uint32_t ntx_free;
	/* sender: free slots (stack); receiver read mode: queued offers */
	uint32_t *slots;
	uint32_t nslots_free;
	struct msg *offers;
	uint32_t offer_head, offer_n;
};

struct net {
	struct rdma_event_channel *ec;
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int cqe;
	struct ibv_mr *data_mr;	/* chunk buffers */
	char *data;
	size_t data_len;
	struct stream st[REPL_MAX_STREAMS];
	int nstreams;
};

/* Options shared by both roles. */
struct opts {
	const char *dir;	/* serve */
	const char *src;	/* send */
	const char *host;
	const char *rdir;
	int port;
	enum repl_mode mode;
	uint32_t chunk;
	uint32_t window;	/* 0: auto */
	int streams;
	double limit;		/* bytes per second, 0: none */
	int json;
	int once;		/* serve: exit after one job */
	int verbose;
	int timeout_ms;		/* connect / silence */
};

/* util.c */
double now_s(void);
uint64_t now_us(void);
void die_msg(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
void warn_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int repl_verbose;
extern int repl_json;	/* die_msg also prints a JSON line */
extern int repl_progress_open;	/* a progress line awaits its newline */
const char *mode_name(enum repl_mode m);
int parse_size(const char *s, double *out);
void *xcalloc(size_t n, size_t sz);

/* net.c */
int net_setup_verbs(struct net *n, struct ibv_context *verbs, int cqe);
int stream_create_qp(struct net *n, struct stream *s, uint32_t sq, uint32_t rq);
int stream_alloc_msgs(struct net *n, struct stream *s, uint32_t nrx, uint32_t ntx,
		      char *rx_data, uint32_t chunk);
int stream_post_recv(struct net *n, struct stream *s, uint32_t i, char *data,
		     uint32_t chunk);
int stream_tx_get(struct stream *s, uint32_t *idx);
int stream_send(struct stream *s, uint32_t idx, const struct ibv_sge *extra);
int stream_send_msg(struct stream *s, const struct msg *m);
void stream_destroy(struct stream *s);
void net_destroy(struct net *n);
int net_wait(struct net *n, int timeout_ms,
	     void (*on_cm)(void *, struct rdma_cm_event *),
	     void (*on_wc)(void *, struct ibv_wc *), void *arg);

#define WR_KIND(id)	((uint32_t)((id) >> 56))
#define WR_STREAM(id)	((uint32_t)(((id) >> 32) & 0xff))
#define WR_INDEX(id)	((uint32_t)(id))
#define WR_ID(k, s, i)	(((uint64_t)(k) << 56) | ((uint64_t)(s) << 32) | (i))
enum { WK_RECV = 1, WK_SEND = 2, WK_WRITE = 3, WK_READ = 4 };

int run_sender(const struct opts *o);
int run_receiver(const struct opts *o);

#endif
