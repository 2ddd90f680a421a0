/* SPDX-License-Identifier: MIT */
/*
 * cm_internal.h - internal to wisp's librdmacm.so.1.
 *
 * rdma_cm on TCP (docs/architecture.md, DESIGN "Connection setup"): an
 * rdma_cm_id owns a TCP socket until its MPA exchange is over; then the
 * socket goes to the id's QP (wisp_qp_attach_stream) and the QP's engine
 * tells us when the stream ends.
 *
 *   cm_config.c  WISP_* environment, per-id options, logging
 *   cm_lib.c     the library's state and device, rdma_get_devices
 *   cm_event.c   event channels, events, get/ack, migrate
 *   cm_id.c      ids: create, bind, resolve, options, destroy, threads
 *   cm_stream.c  a connection after MPA: ESTABLISHED, DISCONNECTED,
 *                rdma_disconnect
 *   cm_passive.c rdma_listen, the Request, rdma_accept, rdma_reject
 *   cm_active.c  rdma_connect and its thread
 *   cm_qp.c      rdma_create_qp and friends
 *   cm_ep.c      rdma_getaddrinfo, rdma_create_ep, rdma_get_request
 *   cm_stubs.c   what wisp does not offer (multicast, ECE)
 *   rsocket_*.c  rsockets, on the public calls only (rsocket_internal.h)
 *
 * Each file calls only files listed above it (cm_qp.c, cm_ep.c and
 * cm_stubs.c sit on top); tests/rdmacm/check-deps.py checks that there
 * is no cycle.
 *
 * Locking: one mutex, wcm.lock, guards every id, channel and event. It is
 * never held across a socket call that can block, a verbs call or a
 * wisp_qp_* call (the QP's engine thread takes it in the stream-end
 * callback). wcm.cond is broadcast whenever an event is acked or a CM
 * thread lets go of an id.
 *
 * Convention (rdma-core's): int functions return 0 or -1 with errno set;
 * internal helpers return 0 or a negative errno.
 */
#ifndef WISP_CM_INTERNAL_H
#define WISP_CM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "glue_mpa.h"
#include "glue_tls.h"
#include "mpa.h"

#ifndef container_of
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#endif

/* rdma-core's maximum IRD / ORD for a device; wisp0 allows siw's. */
#define WCM_MAX_RD_ATOMIC  MPA_NEGO_IRD_ORD_LIMIT

/* ---- cm_config.c ------------------------------------------------- */

enum wcm_log_level {
	WCM_LOG_ERROR,
	WCM_LOG_WARN,
	WCM_LOG_INFO,
	WCM_LOG_DEBUG,
};

/* MPA preferences of an id (environment defaults, rdma_set_option). */
struct wcm_opts {
	uint8_t mpa_rev;          /* 1 or 2 */
	bool crc;
	bool p2p;
	bool big_fpdu;            /* offer wisp's large-FPDU extension */
	uint8_t rtr_prefer;       /* MPA_RTR_READ or MPA_RTR_WRITE */
	bool rtr_only;            /* set explicitly: offer/accept only it */
	int timeout_ms;           /* TCP connect and each MPA frame */
	int hold_ms;              /* initiator: after the Reply, before the
				   * first FPDU (glue_mpa.h) */
	/* RDMA_OPTION_ID */
	bool tos_set;
	uint8_t tos;
	bool reuseaddr;
	int afonly;               /* -1: system default */
	/* WISP_TLS*: TLS 1.3 under MPA (docs/tls.md); strings are
	 * process-lifetime copies (wcm_intern). */
	struct glue_tls_config tls;
};

/* Bounds of the passive side, process-wide (cm_passive.c). */
#define WCM_LIMIT_MAX 65536
struct wcm_limits {
	int max_pending;          /* connections whose MPA Request is being
				   * read, all listeners together */
	int max_pending_addr;     /* of them from one source address */
	int max_backlog;          /* rdma_listen backlog <= 0 or above: this */
};

/* Parse the WISP_* environment into wcm.opts, wcm.limits and
 * wcm.log_level. Prints a message naming the variable for a bad value
 * and returns -EINVAL. */
int wcm_config_load(void);

/* rdma_set_option at WISP_OPTION_LEVEL. Returns 0 or a negative errno. */
int wcm_opts_set(struct wcm_opts *o, int optname, const void *val,
		 size_t len);

/* The local MPA preferences of an id with these options. */
void wcm_opts_prefs(const struct wcm_opts *o, struct mpa_prefs *p);

void wcm_log(enum wcm_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- cm_lib.c ---------------------------------------------------- */

struct wcm_id;

/* Load the configuration and open the device on first use. 0 or a
 * negative errno (-EINVAL bad environment, -ENODEV no wisp0). */
int wcm_init(void);

/* ---- cm_event.c -------------------------------------------------- */

struct wcm_id;

struct wcm_event {
	struct rdma_cm_event ev;  /* what the application sees: first */
	struct wcm_event *next;
	struct wcm_id *owner;     /* counts this event until acked: ev.id,
				   * or the listener for CONNECT_REQUEST */
	/* The private data the application gets, and room for exactly
	 * that: most events carry none (wcm_event_size). */
	uint8_t pdata_len;
	uint8_t pdata[];
};

/* Octets of an event with n octets of private data. */
static inline size_t wcm_event_size(size_t n)
{
	return offsetof(struct wcm_event, pdata) + n;
}

struct wcm_channel {
	struct rdma_event_channel ch; /* ch.fd: eventfd, readable while
				       * events are queued */
	struct wcm_event *head, *tail;
	/* Threads inside rdma_get_cm_event() waiting on ch.fd; whether the
	 * channel was destroyed (it then sits in cm_event.c's dead ring);
	 * and whether it left that ring with waiters, the last of which
	 * frees it (wcm.lock). */
	unsigned int waiters;
	bool dead;
	bool orphan;
	/* The eventfd's counter is non-zero (level_up), which is never
	 * while the queue is empty; a queue with events is also without it
	 * for a moment while the thread that queued them holds its
	 * notifications (wcm_events_hold: then held, on cm_event.c's list
	 * of channels to raise). wcm.lock. */
	bool level;
	bool held;
	struct wcm_channel *held_next;
};

static inline struct wcm_channel *to_wch(struct rdma_event_channel *ch)
{
	return container_of(ch, struct wcm_channel, ch);
}

/* Allocate a channel (no lock needed). NULL with errno set. */
struct wcm_channel *wcm_channel_new(void);
void wcm_channel_free(struct wcm_channel *ch);

/*
 * Queue an event of id on owner's channel (wcm.lock held). Dropped if the
 * owner is being destroyed. pdata may be NULL. Returns the event (NULL if
 * dropped or out of memory: the caller cannot do better than log).
 */
struct wcm_event *wcm_event_queue(struct wcm_id *owner, struct wcm_id *id,
				  enum rdma_cm_event_type type, int status,
				  const void *pdata, size_t pdata_len);

/* Remove owner's queued events from its channel (wcm.lock held); the
 * child ids of removed CONNECT_REQUEST events are returned through
 * *orphans (linked by ->orphan_next) for the caller to destroy. */
void wcm_events_purge(struct wcm_id *owner, struct wcm_id **orphans);

/* Move owner's queued events to channel to (wcm.lock held). */
void wcm_events_move(struct wcm_id *owner, struct wcm_channel *to);

/*
 * The calling thread holds back the readiness of the channels it queues
 * events on until wcm_events_release (wcm.lock not held for either): a
 * thread that raises many events in one turn (the dialer, a burst of
 * ESTABLISHED) makes the application's channel readable once for all of
 * them instead of once per event, and wakes the application's thread
 * once. The events are queued at once and a reader that comes meanwhile
 * gets them; only the eventfd, and so a waiter in poll() or
 * rdma_get_cm_event, waits for the release.
 */
void wcm_events_hold(void);
void wcm_events_release(void);

/* For ids without a channel of their own (sync): wait for the reply to the
 * call just made, as rdma-core's ucma_complete(). 0 or -1 with errno. */
int wcm_complete(struct wcm_id *id);

/* ---- cm_id.c ----------------------------------------------------- */

/* The state of an id. Only wcm_set_state() changes it. */
enum wcm_state {
	WCM_IDLE,
	WCM_BOUND,
	WCM_ADDR_RESOLVED,
	WCM_ROUTE_RESOLVED,
	WCM_LISTEN,
	WCM_CONNECTING,       /* connect thread at work */
	WCM_CONNECT_REQ,      /* child: Request read, ULP to accept/reject */
	WCM_ATTACHING,        /* stream being handed to the QP */
	WCM_CONNECTED,
	WCM_DISCONNECTED,
	WCM_FAILED,
	WCM_STATE__COUNT
};

/* The state's name for logs ("IDLE", ...), "?" out of range. */
const char *wcm_state_str(enum wcm_state s);

/* What the QP's stream-end callback points at. It outlives the id and
 * the QP if need be: one reference is the id's, one the callback's, which
 * only the callback itself (or a failed attach) drops, since the engine
 * may call it after ibv_destroy_qp has returned. */
struct wcm_conn {
	struct wcm_id *id;        /* NULL once the id is gone */
	int refs;
	bool cb_done;             /* callback ran or can no longer run */
};

struct wcm_id {
	struct rdma_cm_id id;     /* what the application sees: first */
	enum wcm_state state;
	bool sync;                /* private channel, calls wait for events */
	bool dying;               /* rdma_destroy_id under way */
	int fd;                   /* the id's socket, or -1 */
	bool port_late;           /* fd bound without a port: connect or
				   * listen takes one (cm_id.c bind_port) */
	struct ibv_qp *ext_qp;    /* a QP named by rdma_conn_param.qp_num */
	int wake_fd;              /* listener: eventfd to stop its thread */
	int workers;              /* CM threads using this id */
	unsigned int events_out;  /* delivered, not yet acked */
	int backlog;              /* listener: CONNECT_REQUESTs that may wait */
	int req_queued;           /* listener: queued, not yet delivered */
	struct wcm_opts opts;

	/* Connection parameters. */
	uint16_t ird, ord;        /* responder_resources, initiator_depth */
	/* An id either connects (rdma_connect, from WCM_ROUTE_RESOLVED)
	 * or is a listener's child (WCM_CONNECT_REQ onwards), never both:
	 * the private data it sends and the Request it read share room. */
	union {
		uint8_t conn_pdata[MPA_PD_MAX];         /* active */
		uint8_t req_frame[GLUE_MPA_FRAME_MAX];  /* child: as read */
	};
	uint16_t conn_pdata_len;
	uint8_t *ep_connect;      /* rdma_create_ep: ai_connect data */
	size_t ep_connect_len;
	struct ibv_qp_init_attr *ep_qp_attr; /* rdma_create_ep passive */

	/* Child before accept: the Request (pdata into req_frame). */
	struct mpa_rr req;
	uint8_t req_ird, req_ord; /* offered in CONNECT_REQUEST */

	/* Connected. */
	struct wcm_conn *conn;
	bool no_qp;               /* connected without a QP: CM only */
	bool ended_early;         /* stream ended while attaching */
	int disc;                 /* DISCONNECTED: 0 no, 1 queued, 2 got */

	struct wcm_id *orphan_next;
};

static inline struct wcm_id *to_wid(struct rdma_cm_id *id)
{
	return container_of(id, struct wcm_id, id);
}

struct wcm_hs;                /* a handshake being read (cm_passive.c) */

struct wcm_lib {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool ready;
	struct ibv_device **devs;
	struct ibv_context *verbs; /* wisp0, opened once */
	struct ibv_pd *pd;         /* default PD of ids (rdma-core's too) */
	struct wcm_opts opts;      /* from the environment */
	struct wcm_limits limits;  /* from the environment */
	enum wcm_log_level log_level;
	/* Handshakes being read by listener threads (cm_passive.c). */
	struct wcm_hs *hs_all;
	int hs_count;
};

extern struct wcm_lib wcm;

/* New id on channel ch (wcm.lock not held). NULL with errno set. */
struct wcm_id *wcm_id_new(struct wcm_channel *ch, void *context,
			  enum rdma_port_space ps);

/* Attach the device to id: verbs, pd, port (wcm.lock held). */
void wcm_id_set_device(struct wcm_id *w);

/* Move w to state s, logged at debug level (wcm.lock held, or w not yet
 * visible to other threads). */
void wcm_set_state(struct wcm_id *w, enum wcm_state s);

/* Free an id that no thread or event refers to any more. */
void wcm_id_free(struct wcm_id *w);

/* Socket address length for a family, 0 if not IPv4/IPv6. */
socklen_t wcm_addrlen(const struct sockaddr *sa);

/* Bind a new socket of w (WCM_IDLE) to addr; the id becomes WCM_BOUND.
 * Port 0 with no port free to bind: the address alone, and the connect
 * or listen takes the port (w->port_late). wcm.lock held. 0 or a
 * negative errno. */
int wcm_bind_locked(struct wcm_id *w, const struct sockaddr *addr);

/* w's source address as its socket fd has it now (getsockname), into
 * w->id.route. wcm.lock held. */
void wcm_src_read(struct wcm_id *w, int fd);

/* TCP_NODELAY on fd, a warning if it cannot be set (cm_id.c). */
void wcm_no_delay(int fd);
/* Set the id's socket options (REUSEADDR, TOS, V6ONLY, TCP_NODELAY) on fd. */
void wcm_sock_opts(const struct wcm_id *w, int fd, int family);

/*
 * Room in the process's descriptor table up to well past fd, made ahead
 * of need (cm_id.c). Called where a burst of descriptors begins
 * (rdma_listen, the first connect) and with each accepted socket; a
 * check and nothing more while the table is far from full. Any thread,
 * wcm.lock held or not.
 */
void wcm_fd_room(int fd);

/* A CM thread: fn(arg) with w->workers counted (wcm.lock held). */
int wcm_thread_start(struct wcm_id *w, void *(*fn)(void *), void *arg);
/* Called by the thread as its last act (takes wcm.lock). */
void wcm_thread_done(struct wcm_id *w);

/* Drop a connection's reference (wcm.lock held). */
void wcm_conn_put(struct wcm_conn *c);

/* ---- cm_stream.c ------------------------------------------------- */

/* "a.b.c.d:port" or "[v6]:port" of sa into buf; returns buf. */
const char *wcm_addr_str(const struct sockaddr *sa, char *buf, size_t len);


/*
 * Hand the connected socket fd to the QP of w (state WCM_ATTACHING, set by
 * the caller) and raise ESTABLISHED. Without a QP the CM keeps the socket
 * and watches it for the peer's close. On failure an active side raises
 * CONNECT_ERROR; a passive side gets the error back for rdma_accept.
 * fd is consumed either way. wcm.lock not held. 0 or a negative errno.
 */
int wcm_establish(struct wcm_id *w, struct ibv_qp *qp, int fd,
		  const struct mpa_params *p, bool active);

/* IRD / ORD from a conn_param as rdma-core reads it: 0xff means dflt.
 * 0 or -EINVAL above WCM_MAX_RD_ATOMIC. */
int wcm_depth_of(uint8_t v, uint8_t dflt, uint16_t *out);

/* The QP a connection's stream goes to (w->ext_qp set if it is named by
 * param->qp_num); what names the caller in log lines. wcm.lock held.
 * 0 or -EINVAL. */
int wcm_resolve_qp(struct wcm_id *w, const struct rdma_conn_param *param,
		   const char *what);

/* ---- cm_qp.c ----------------------------------------------------- */

/* Move a new QP of id to INIT as rdma-core does for iWARP. */
int wcm_qp_init(struct rdma_cm_id *id, struct ibv_qp *qp);

#endif /* WISP_CM_INTERNAL_H */
