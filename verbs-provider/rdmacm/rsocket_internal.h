/* SPDX-License-Identifier: MIT */
/*
 * rsocket_internal.h - rsockets (rdma-core's <rdma/rsocket.h>) over wisp's
 * own rdma_cm and verbs entry points.
 *
 * An rsocket is a byte stream on an RC QP. The wire protocol is that of
 * rdma-core's rsockets on an iWARP device, which has no RDMA Write with
 * immediate data:
 *
 * - Connect private data (struct rsk_conn_data, big-endian): version 1,
 *   flags, the receive credits (messages), the size of the iomap table,
 *   where the peer may write buffer advertisements (the "target SGL", two
 *   entries) and the first half of the receive buffer.
 * - Every message is a 32-bit word: opcode in bits 31-29, data in 28-0,
 *   carried by an inline Send of 4 octets in the sender's byte order (both
 *   peers little-endian here; the connect flags tell). A data transfer is
 *   an RDMA Write into the peer's receive buffer followed by the Send
 *   OP_DATA | length; the Write is placed before the Send completes.
 * - Credits: OP_SGL | n lets the peer send data messages up to sequence
 *   number n; an RDMA Write of a struct rsk_sge (host order) into the
 *   peer's target SGL before it hands over the next half of the receive
 *   buffer.
 * - OP_CTRL | DISCONNECT / SHUTDOWN end the stream; OP_IOMAP_SGL | index
 *   follows the RDMA Write of a struct rsk_iomap into the peer's iomap
 *   table (riomap); riowrite is a bare RDMA Write into a mapped region.
 *
 * Files, each calling only those above it (tests/rdmacm/check-deps.py):
 *   rsocket_core.c   the table of sockets, buffers, QP, connection data,
 *                    completion processing, credits, waiting
 *   rsocket_api.c    rsocket, rbind, rlisten, raccept, rconnect,
 *                    rshutdown, rclose, names, options, rfcntl
 *   rsocket_io.c     rsend / rrecv and their variants, riowrite, riomap
 *   rsocket_poll.c   rpoll, rselect
 *
 * Locking: each socket has a mutex guarding all of it; a thread waiting
 * for completions drops it while it sleeps in poll(2) on the completion
 * channel (one such thread at a time, the others wait on the socket's
 * condition variable). The table of sockets has its own lock.
 */
#ifndef WISP_RSOCKET_INTERNAL_H
#define WISP_RSOCKET_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

/* Protocol constants (rdma-core's values: a peer assumes them). */
#define RSK_SNDLOWAT      2048   /* smallest send buffer space to send */
#define RSK_OLAP_START    2048   /* first transfer of a large send */
#define RSK_MAX_XFER      65536  /* largest single transfer */
#define RSK_QP_MIN        16
#define RSK_QP_MAX        0xfffe
#define RSK_CTRL_MAX      4      /* control WRs outstanding */
#define RSK_SGL_SIZE      2      /* target SGL entries */
#define RSK_MSG_SIZE      4
#define RSK_CONN_VERSION  1
#define RSK_FLAG_NET      0x01   /* sender is big-endian */
#define RSK_FLAG_IOMAP    0x02   /* iomap table offered */

/* Defaults, as rdma-core's (no /etc/rdma/rsocket files over wisp). */
#define RSK_DEF_INLINE    64
#define RSK_DEF_SQSIZE    384
#define RSK_DEF_RQSIZE    384
#define RSK_DEF_MEM       (1 << 17)
#define RSK_DEF_WMEM      (1 << 17)

/* Receives posted beyond the advertised credits: an iWARP Send without a
 * posted receive ends the connection, and control messages are not
 * counted by credits. */
#define RSK_RQ_SPARE      (2 * RSK_CTRL_MAX + 8)

enum rsk_op {
	RSK_OP_DATA = 0,
	RSK_OP_WRITE = 2,        /* never sent: riowrite's local marker */
	RSK_OP_SGL = 4,
	RSK_OP_IOMAP_SGL = 6,
	RSK_OP_CTRL = 7,
};

enum rsk_ctrl {
	RSK_CTRL_DISCONNECT = 0,
	RSK_CTRL_KEEPALIVE = 1,
	RSK_CTRL_SHUTDOWN = 2,
};

static inline uint32_t rsk_msg(uint32_t op, uint32_t data)
{
	return (op << 29) | (data & 0x1fffffff);
}

static inline uint32_t rsk_msg_op(uint32_t msg)
{
	return msg >> 29;
}

static inline uint32_t rsk_msg_data(uint32_t msg)
{
	return msg & 0x1fffffff;
}

/* A buffer advertisement, as written into the peer's memory. */
struct rsk_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};
_Static_assert(sizeof(struct rsk_sge) == 16, "rsockets SGE is 16 octets");

/* An iomap table entry: writes at [offset, offset + sge.length) land at
 * sge.addr. */
struct rsk_iomap {
	uint64_t offset;
	struct rsk_sge sge;
};
_Static_assert(sizeof(struct rsk_iomap) == 24, "rsockets iomap is 24 octets");

/* Connect request / reply private data; multi-octet fields big-endian. */
struct rsk_conn_data {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;
	uint8_t reserved[3];
	uint8_t iomap_size;       /* scaled: rsk_scale_to_value(, 8) */
	struct rsk_sge target_sgl;
	struct rsk_sge data_buf;
};
_Static_assert(sizeof(struct rsk_conn_data) == 40, "rsockets conn data");

enum rsk_state {
	RSK_INIT,
	RSK_BOUND,
	RSK_LISTENING,
	RSK_CONNECTING,           /* non-blocking rconnect under way */
	RSK_CONNECTED,            /* see rd_open / wr_open */
	RSK_CONNECT_ERROR,
	RSK_DISCONNECTED,
	RSK_ERROR,
};

/* A local iomap region (riomap). */
struct rsk_iomr {
	struct rsk_iomr *next;
	struct ibv_mr *mr;
	uint64_t offset;
	int index;                /* slot in the peer's table, -1 local only */
	bool sent;                /* advertised to the peer */
};

struct rsk {
	int fd;                   /* socket number: the id's channel fd */
	int domain;
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* a waiter on the CQ finished */
	bool cq_waiter;           /* a thread sleeps on the CQ channel */
	bool cq_armed;

	struct rdma_cm_id *id;
	enum rsk_state state;
	bool rd_open, wr_open;
	int err;                  /* SO_ERROR */
	int fl_flags;             /* F_GETFL / F_SETFL (O_NONBLOCK) */
	int fd_flags;             /* F_GETFD / F_SETFD */
	bool swap;                /* peer of the other byte order */

	/* Options. */
	int so_reuseaddr, so_keepalive, so_oobinline, so_linger;
	int tcp_nodelay, ip_tos;
	unsigned int keepalive_time;

	/* Sizes (set before connecting). */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	uint16_t iomap_size;      /* entries of our iomap table */

	/* Send side. */
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t sbuf_head;       /* next free octet of the ring */
	uint32_t sbuf_avail;
	int sqe_avail;            /* data WRs that may be posted */
	int ctrl_avail;           /* control WRs that may be posted */
	unsigned int ctrl_seq;    /* rotating control slot */
	uint16_t sseq_no, sseq_comp;
	struct rsk_sge *tsgl;     /* target SGL: written by the peer */
	struct rsk_iomap *tiomap; /* iomap table: written by the peer */
	uint8_t *tlist;
	struct ibv_mr *tmr;
	int tsge;                 /* entry of tsgl in use */
	struct rsk_sge remote_sgl;   /* the peer's target SGL */
	struct rsk_sge remote_iomap; /* the peer's iomap table */
	int remote_sge;           /* next entry of the peer's SGL to fill */

	/* Receive side. */
	uint8_t *rbuf;            /* rbuf_size of data, then the messages */
	struct ibv_mr *rmr;
	uint32_t rbuf_off;        /* next octet to read */
	uint32_t rbuf_free_off;   /* next half to hand to the peer */
	uint32_t rbuf_avail;      /* read, not yet handed back */
	uint16_t rseq_no, rseq_comp;
	int rq_posted;            /* receive WRs: rq_size + RSK_RQ_SPARE */
	int rmsg_idx;             /* next message slot to post */
	uint32_t *rmsg_len;       /* ring of data message lengths */
	int rmsg_head, rmsg_tail, rmsg_cap;

	/* iomap (riomap on our side, the peer's table on the other). */
	struct rsk_iomr *iomaps;
	bool iomap_pending;

	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	unsigned int unacked;     /* CQ events to ack */
};

/* ---- rsocket_core.c ---------------------------------------------- */

/* A new socket on a new synchronous rdma_cm id, entered in the table;
 * NULL with errno set. inherit: the listener whose sizes it takes. */
struct rsk *rsk_new(int domain, struct rdma_cm_id *id,
		    const struct rsk *inherit);

/* The socket numbered fd, locked; NULL with errno EBADF. */
struct rsk *rsk_get(int fd);

/* Whether fd is an rsocket (for rpoll's mixed sets). */
bool rsk_known(int fd);

void rsk_put(struct rsk *rs);

/* Remove from the table and free everything (lock held; freed). */
void rsk_destroy(struct rsk *rs);

/* QP, CQ, buffers and receives for a socket whose id has its route /
 * request. 0 or a negative errno. */
int rsk_create_ep(struct rsk *rs);

void rsk_conn_data_fill(const struct rsk *rs, struct rsk_conn_data *cd);

/* Take the peer's connect data; 0 or -ENOTSUP for an unknown version. */
int rsk_conn_data_save(struct rsk *rs, const void *pdata, size_t len);

/* Finish a non-blocking rconnect if its reply is in: 0 connected,
 * -EINPROGRESS not yet, other negative errno failed. */
int rsk_connect_step(struct rsk *rs);

/* Poll the CQ, repost receives, give credits. */
void rsk_progress(struct rsk *rs);

/*
 * Wait (lock held, dropped while asleep) until test(rs) is true: 0; or
 * -EAGAIN when nonblock and not yet; or another negative errno.
 */
int rsk_wait(struct rsk *rs, bool nonblock, bool (*test)(struct rsk *rs));

/* Arm the CQ for rpoll: false if it was not armed (the caller looks
 * again before it sleeps), true if it was (or there is no CQ). */
bool rsk_arm(struct rsk *rs);

/* Take the CQ events rpoll woke for (non-blocking). */
void rsk_drain_events(struct rsk *rs);

bool rsk_can_send(struct rsk *rs);
bool rsk_can_send_or_closed(struct rsk *rs);
bool rsk_have_data(struct rsk *rs);
bool rsk_have_data_or_closed(struct rsk *rs);
bool rsk_sends_done(struct rsk *rs);
bool rsk_ctrl_ready(struct rsk *rs);

/* Post a data Write (and its Send) of sge[0..n) of length len into the
 * peer's receive buffer. Caller checked rsk_can_send. */
int rsk_post_data(struct rsk *rs, struct ibv_sge *sge, int n, uint32_t len,
		  int flags);

/* Post a bare RDMA Write (riowrite) of len to addr/rkey. */
int rsk_post_direct(struct rsk *rs, struct ibv_sge *sge, int n, uint32_t len,
		    int flags, uint64_t addr, uint32_t rkey);

/* Post an iomap entry for slot index (caller checked rsk_can_send). */
int rsk_post_iomap(struct rsk *rs, const struct rsk_iomap *iom, int index);

/* Post OP_CTRL | ctrl. 0 or a negative errno. */
int rsk_post_ctrl(struct rsk *rs, uint32_t ctrl);

/* Take len octets of the send ring (len <= sbuf_avail); the 1 or 2 SGEs
 * covering them, for the caller to fill. Returns the SGE count. */
int rsk_stage(struct rsk *rs, uint32_t len, struct ibv_sge sge[2]);

/* Free iomap registrations. */
void rsk_free_iomaps(struct rsk *rs);

/* Scale of the iomap size in the connect data. */
int rsk_value_to_scale(int value, int bits);
int rsk_scale_to_value(int value, int bits);

/*
 * Before reading memory the peer writes by RDMA WRITE (its SGL offers,
 * its iomap entries): the completion that announced the write was taken
 * from a CQ under the CQ's lock, which orders the placement before this
 * read for ThreadSanitizer; the fence keeps the compiler and CPU from
 * reading early. gcc refuses fences under -fsanitize=thread, and TSan
 * needs none here.
 */
static inline void rsk_peer_fence(void)
{
#ifndef __SANITIZE_THREAD__
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

#endif /* WISP_RSOCKET_INTERNAL_H */
