/* SPDX-License-Identifier: MIT */
/*
 * wisp_verbs.h - internal to wisp's libibverbs.so.1.
 *
 * The verbs objects, each embedding its rdma-core base struct first, and
 * the split of work between the files of this folder:
 *
 *   verbs_device.c  device list, open/close and the ops tables,
 *                   query device/port/gid/pkey, PD
 *   verbs_context.c the context: engine, STag table, async events
 *   verbs_misc.c    string helpers, rates, fork, compat and private stubs
 *   verbs_mr.c      memory registration (STag table in rdmap/)
 *   verbs_cq.c      CQs, completion channels, poll and notify
 *   verbs_srq.c     SRQs
 *   verbs_qp.c      QPs, post send/recv, the lifetime of a QP's stream
 *   verbs_stream.c  a QP's stream as the engine sees it, and the private
 *                   calls that attach and end it
 *   verbs_gid.c     the GID table, from the host's network interfaces
 *   verbs_entry.c   the exported MR/CQ/QP/SRQ verbs, thin over the above
 *   verbs_compat.c  IBVERBS_1.0 compat, IBVERBS_PRIVATE_34, kernel-ABI
 *                   helpers
 *   verbs_abi.h     what the library exports and how (force-included)
 *
 * verbs_internal.h holds the data-path objects and the order in which
 * these files may call each other.
 *
 * Convention (rdma-core's): int-returning verbs return 0 or a positive
 * errno; constructors return NULL with errno set.
 */
#ifndef WISP_VERBS_H
#define WISP_VERBS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define WISP_DEV_NAME        "wisp0"
#define WISP_VENDOR_ID       0x626d74   /* the same as siw's ("bmt") */
#define WISP_VENDOR_PART_ID  0x7769     /* "wi" */

/* Limits: at least those of Linux siw. */
#define WISP_MAX_SGE         6
#define WISP_MAX_INLINE      80
#define WISP_MAX_ORD         128
#define WISP_MAX_IRD         128
#define WISP_MAX_QP_WR       (32 * 1024)
#define WISP_MAX_CQE         (1024 * 1024)
#define WISP_MAX_QP          (16 * 1024)
#define WISP_MAX_CQ          (16 * 1024)
#define WISP_MAX_MR          (1u << 20)
#define WISP_MAX_PD          (64 * 1024)
#define WISP_MAX_SRQ         (16 * 1024)
#define WISP_MAX_SRQ_WR      (32 * 1024)
#define WISP_MAX_MR_SIZE     (~0ull)    /* no limit beyond the address space */
/* An RDMA Read Request names one Data Sink STag (RFC 5040 section 4.4),
 * so the local sink of a Read is a single SGE, as in siw. */
#define WISP_MAX_SGE_RD      1
#define WISP_MAX_GIDS        256        /* interfaces beyond are ignored */

#ifndef container_of
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#endif

struct glue_engine;      /* tcp-glue: the progress engine of a context */
struct rdmap_stag_table; /* rdmap: MR table of a device */

/* One GID table entry: the MAC of a host interface (verbs_gid.c). */
struct wisp_gid {
	union ibv_gid gid;
	uint32_t ifindex;              /* 0: derived from the host name */
};

/* The one device, wisp0. */
struct wisp_device {
	struct ibv_device base;
};

struct wisp_context {
	struct verbs_context vctx;     /* vctx.context is the ibv_context */
	pthread_mutex_t lock;          /* engine start, object lists */
	struct glue_engine *engine;    /* started with the first stream */
	struct rdmap_stag_table *stags; /* MRs of this context (verbs_mr.c) */
	int async_efd;                 /* eventfd behind ibv_get_async_event */
	pthread_mutex_t async_lock;
	struct wisp_async_ev *async_head, *async_tail;
	struct wisp_gid *gid_tbl;      /* snapshot taken by ibv_open_device */
	int gid_cnt;                   /* >= 1 */
	unsigned int pd_cnt;           /* PDs allocated, under lock */
};

/* A queued asynchronous event (verbs_context.c owns the queue). */
struct wisp_async_ev {
	struct wisp_async_ev *next;
	struct ibv_async_event ev;
};

static inline struct wisp_context *to_wctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct wisp_context, vctx.context);
}

struct wisp_pd {
	struct ibv_pd base;
	/* MRs, QPs and SRQs created on this PD hold a reference (atomic,
	 * __atomic builtins); ibv_dealloc_pd fails with EBUSY while any is
	 * left, as the kernel's uverbs does. */
	unsigned int use_cnt;
};

static inline struct wisp_pd *to_wpd(struct ibv_pd *pd)
{
	return container_of(pd, struct wisp_pd, base);
}

/* Objects that hold a PD (MRs, QPs, SRQs) count themselves in it, so
 * that ibv_dealloc_pd refuses with EBUSY while they exist. */
static inline void wisp_pd_get(struct ibv_pd *pd)
{
	__atomic_add_fetch(&to_wpd(pd)->use_cnt, 1, __ATOMIC_ACQ_REL);
}

static inline void wisp_pd_put(struct ibv_pd *pd)
{
	__atomic_sub_fetch(&to_wpd(pd)->use_cnt, 1, __ATOMIC_ACQ_REL);
}

/* ---- verbs_context.c --------------------------------------------- */

/* Set up the context's own state (async queue, locks) in a zeroed
 * wctx. Returns 0 or a positive errno. */
int wisp_context_init(struct wisp_context *wctx);

/* Stop and free the context's engine and STag table, if any, and its
 * async queue (called by close_device after every QP and MR is gone). */
void wisp_context_fini(struct wisp_context *wctx);

/* Queue an asynchronous event for ibv_get_async_event (any thread). */
void wisp_async_event_push(struct ibv_context *ctx,
			   const struct ibv_async_event *ev);

/* The context's STag table / engine, created on first use; NULL with
 * errno set on failure. */
struct rdmap_stag_table *wisp_context_stags(struct wisp_context *wctx);
struct glue_engine *wisp_context_engine(struct wisp_context *wctx);

/* How long ibv_dereg_mr waits for the references zero-copy sends hold
 * (until the peer acknowledges them) before it aborts the streams that
 * hold them: WISP_ZC_DEREG_GRACE_MS while wctx's engine sends zero-copy
 * (WISP_SEND_ZC), else 0. */
#define WISP_ZC_DEREG_GRACE_MS 250
int wisp_context_zc_grace_ms(struct wisp_context *wctx);

/* ---- verbs_gid.c ------------------------------------------------- */
/*
 * Build the GID table: one entry per non-loopback interface with a 6-octet
 * MAC, in ifindex order, the GID being the MAC zero-padded to 16 octets
 * (siw's GID); if there is none, one entry derived from the host name as a
 * locally administered MAC. Returns the number of entries (>= 1) with
 * *tbl malloc'ed, or -ENOMEM.
 */
int wisp_gid_table_scan(struct wisp_gid **tbl);

/* The node GUID from a wisp GID (fe80::<EUI-64>, verbs_gid.c): its
 * EUI-64, network order, as siw derives the GUID from its netdev's MAC. */
__be64 wisp_gid_to_guid(const union ibv_gid *gid);

/* ---- verbs_mr.c -------------------------------------------------- */
struct ibv_mr *wisp_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			   uint64_t iova, unsigned int access);
int wisp_dereg_mr(struct ibv_mr *mr);
int wisp_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
		  void *addr, size_t length, int access);

/* ---- verbs_cq.c -------------------------------------------------- */
struct ibv_comp_channel *wisp_create_comp_channel(struct ibv_context *ctx);
int wisp_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *wisp_create_cq(struct ibv_context *ctx, int cqe,
			      void *cq_context, struct ibv_comp_channel *ch,
			      int comp_vector);
struct ibv_cq_ex *wisp_create_cq_ex(struct ibv_context *ctx,
				    struct ibv_cq_init_attr_ex *attr);
int wisp_resize_cq(struct ibv_cq *cq, int cqe);
int wisp_destroy_cq(struct ibv_cq *cq);
int wisp_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int wisp_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int wisp_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
		      void **cq_context);
void wisp_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);

/* ---- verbs_qp.c -------------------------------------------------- */
struct ibv_qp *wisp_create_qp(struct ibv_pd *pd,
			      struct ibv_qp_init_attr *attr);
struct ibv_qp *wisp_create_qp_ex(struct ibv_context *ctx,
				 struct ibv_qp_init_attr_ex *attr);
int wisp_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		  int attr_mask, struct ibv_qp_init_attr *init_attr);
int wisp_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		   int attr_mask);
int wisp_destroy_qp(struct ibv_qp *qp);
int wisp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad_wr);
int wisp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad_wr);

/* ---- verbs_srq.c ------------------------------------------------- */
struct ibv_srq *wisp_create_srq(struct ibv_pd *pd,
				struct ibv_srq_init_attr *attr);
struct ibv_srq *wisp_create_srq_ex(struct ibv_context *ctx,
				   struct ibv_srq_init_attr_ex *attr);
int wisp_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
		    int attr_mask);
int wisp_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int wisp_destroy_srq(struct ibv_srq *srq);
int wisp_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr);
/*
 * Optional (weak): the ibv_qp_ex of a QP created with send_ops_flags, or
 * NULL. ibv_qp_to_qp_ex (verbs_entry.c) calls it if verbs_qp.c defines it,
 * else fails with EOPNOTSUPP.
 */
struct ibv_qp_ex *wisp_qp_to_qp_ex(struct ibv_qp *qp) __attribute__((weak));

#endif /* WISP_VERBS_H */
