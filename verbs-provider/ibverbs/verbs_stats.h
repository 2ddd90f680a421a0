/* SPDX-License-Identifier: MIT */
/*
 * verbs_stats.h - internal to wisp's libibverbs.so.1: the statistics a
 * process publishes (wisp_stats_shm.h) and prints at exit (WISP_STATS=1).
 *
 * A QP takes a slot when it is created; its core and its stream count
 * straight into the slot's counters, so publishing costs nothing on the
 * data path. These calls happen only at creation, connection, the end of
 * a stream and destruction; they take one process-wide mutex.
 */
#ifndef WISP_VERBS_STATS_H
#define WISP_VERBS_STATS_H

#include <stdint.h>

#include <infiniband/verbs.h>

#include "wisp_private.h"

struct wisp_stats_qp;
struct rdmap_qp_stats;
struct glue_conn_stats;

/* A slot for a new QP of ctx, or NULL (statistics off, or all slots in
 * use: the QP then counts in its own core only). */
struct wisp_stats_qp *wisp_stats_qp_open(struct ibv_context *ctx);

/* Where the QP's core should count (rdmap_qp_cfg.stats): the slot's
 * counters, or NULL for s == NULL. */
struct rdmap_qp_stats *wisp_stats_qp_core(struct wisp_stats_qp *s);

/* The connected socket fd, with parameters p, is being attached; call
 * before the engine owns fd. s may be NULL. */
void wisp_stats_qp_attached(struct wisp_stats_qp *s, uint32_t qp_num, int fd,
			    const struct wisp_stream_params *p,
			    uint32_t mulpdu);

/* Where the stream should count (glue_conn_set_stats): NULL for NULL. */
struct glue_conn_stats *wisp_stats_qp_sock(struct wisp_stats_qp *s);

/* The stream ended (reason 0 orderly, else an errno). s may be NULL. */
void wisp_stats_qp_ended(struct wisp_stats_qp *s, int reason);

/* The QP is being destroyed: add its counters (core: those of its core,
 * when it had no slot) to its device's and free the slot. */
void wisp_stats_qp_close(struct ibv_context *ctx, struct wisp_stats_qp *s,
			 const struct rdmap_qp_stats *core);

/* A context was opened: the process appears in wisp-stat from now on. */
void wisp_stats_ctx_open(struct ibv_context *ctx);

/* The context is being closed: its totals move to the process's. */
void wisp_stats_ctx_close(const struct ibv_context *ctx);

#endif /* WISP_VERBS_STATS_H */
