/* SPDX-License-Identifier: MIT */
/*
 * wisp_private.h - wisp's private interface between its libibverbs.so.1,
 * its librdmacm.so.1, the tests and the benchmark.
 *
 * These functions are exported from wisp's libibverbs.so.1 under the
 * version node WISP_PRIVATE_1. They are not part of any rdma-core API and
 * may change with any release.
 *
 * The connection manager (librdmacm, or a test that connects two QPs
 * itself) owns the TCP connection until the MPA exchange is complete. It
 * then hands the connected socket to the QP with wisp_qp_attach_stream();
 * from then on the QP's engine thread owns the socket and closes it.
 */
#ifndef WISP_PRIVATE_H
#define WISP_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The outcome of an MPA exchange, as the QP's data path needs it.
 *
 * The RFC 6581 peer-to-peer ready-to-receive message is described as
 * negotiated, not as an action: with p2p, the initiator sends the RTR
 * named by rtr (one of mpa.h's enum mpa_rtr: MPA_RTR_WRITE or
 * MPA_RTR_READ; the SEND RTR is refused with EOPNOTSUPP) and the
 * responder sends nothing before the peer's first FPDU has arrived. The
 * QP maps this, with a checked switch, onto rdmap_qp.h's enum rdmap_rtr,
 * so mpa's enum and rdmap's are the only two RTR types.
 */
struct wisp_stream_params {
	uint8_t mpa_rev;      /* 1 or 2 */
	bool crc;             /* CRC32c in every FPDU, both directions */
	bool markers;         /* must be false: markers are not implemented */
	uint16_t ird;         /* Read Requests we accept in flight */
	uint16_t ord;         /* Read Requests we may have in flight */
	bool p2p;             /* RFC 6581 peer-to-peer: an RTR comes first */
	bool initiator;       /* this end sent the MPA Request */
	uint8_t rtr;          /* with p2p: the negotiated enum mpa_rtr */
	uint16_t peer_max_ulpdu; /* wisp peer, large-FPDU extension
				  * negotiated: the largest ULPDU it
				  * accepts; 0: FPDUs fit one TCP segment */
	/* The socket's addresses if the caller knows them (the connection
	 * manager does), for the statistics; NULL: asked of the socket. */
	const struct sockaddr *local, *peer;
	/* The socket is non-blocking and has TCP_NODELAY already (the
	 * connection manager's): the engine adopts it without asking
	 * (glue_conn_adopt). false: it checks and sets both. */
	bool sock_ready;
};

/*
 * Hand a connected TCP socket to qp, which must be in INIT, RTR or RTS;
 * the QP moves to RTS and its engine starts moving FPDUs. The socket
 * belongs to the QP from now on, whatever the result: on failure it has
 * been closed. Returns 0 or a positive errno (EINVAL bad parameters or QP
 * state, EOPNOTSUPP markers or a SEND RTR, ENOMEM, EBUSY if a stream is
 * attached).
 */
int wisp_qp_attach_stream(struct ibv_qp *qp, int fd,
			  const struct wisp_stream_params *params);

/*
 * Called on the engine thread, once, when the stream of an attached QP
 * ends for whatever reason: the peer closed it, it broke, a Terminate was
 * sent or received, or wisp_qp_disconnect() was called. reason is 0 for an
 * orderly close, else a positive errno (ECONNRESET, EPROTO, ...). The
 * callback must not call back into the QP; it may queue an event.
 */
typedef void (*wisp_stream_end_fn)(struct ibv_qp *qp, int reason, void *arg);

/* Register fn (NULL to clear). Returns 0 or a positive errno. */
int wisp_qp_set_stream_end_cb(struct ibv_qp *qp, wisp_stream_end_fn fn,
			      void *arg);

/*
 * Orderly disconnect: stop sending, shut the socket down, move the QP to
 * ERROR and flush its outstanding work requests. Idempotent. Returns 0
 * or a positive errno.
 */
int wisp_qp_disconnect(struct ibv_qp *qp);

/*
 * The QP of this process numbered qp_num (ibv_qp->qp_num), or NULL. For
 * rdma_connect / rdma_accept given a QP by number (rdma_conn_param
 * qp_num) rather than made with rdma_create_qp.
 */
struct ibv_qp *wisp_qp_lookup(uint32_t qp_num);

/*
 * Test and benchmark helper: run the MPA exchange over the connected
 * socket fd (as initiator if active, else responder) with the given
 * preferences and attach the stream to qp. Blocks up to timeout_ms.
 * Returns 0 or a positive errno; fd is consumed either way.
 */
struct wisp_mpa_prefs {
	uint8_t mpa_rev;      /* 1 or 2 (0: 2) */
	bool crc;
	bool p2p;             /* rev 2 peer-to-peer with an RTR */
	bool read_rtr;        /* initiator: READ RTR rather than WRITE RTR */
	uint16_t ird, ord;
};
int wisp_qp_connect_fd(struct ibv_qp *qp, int fd, bool active,
		       const struct wisp_mpa_prefs *prefs, int timeout_ms);

/*
 * Test and benchmark helper: of the sends ctx's engine made, how many
 * went zero-copy (WISP_SEND_ZC, docs/configuration.md) and of those how
 * many the kernel said it copied after all. Returns 0, or ENOENT if ctx
 * has no engine yet (no QP has been connected).
 */
int wisp_context_zc_stats(struct ibv_context *ctx, uint64_t *sends,
			  uint64_t *copied);

/*
 * Statistics (wisp_stats_shm.h): librdmacm reports each connection
 * manager event the application sees, and each connection it refuses,
 * so that wisp-stat can show them. Any thread; costs one atomic add.
 */
enum wisp_stats_cm_event {
	WISP_STATS_CM_CONNECT_REQUEST,
	WISP_STATS_CM_ESTABLISHED,
	WISP_STATS_CM_DISCONNECTED,
	WISP_STATS_CM_REJECTED,       /* the peer refused us */
	WISP_STATS_CM_REFUSED,        /* we refused the peer */
	WISP_STATS_CM_UNREACHABLE,
	WISP_STATS_CM_CONNECT_ERROR,
};
void wisp_stats_cm_event(enum wisp_stats_cm_event ev);

#ifdef __cplusplus
}
#endif

#endif /* WISP_PRIVATE_H */
