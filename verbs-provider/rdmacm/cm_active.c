/* SPDX-License-Identifier: MIT */
/*
 * cm_active.c - the active side of a connection: rdma_connect starts the
 * TCP connect and sends the Request (with TLS it hands the id over
 * first), and the dialer (one thread for all connects, below) takes it
 * from there: the connect within the timeout (refused, to itself, or
 * timed out: UNREACHABLE), the Reply (R set: REJECTED with the
 * Responder's private data; anything unacceptable: CONNECT_ERROR), and
 * the socket to the QP.
 * The MPA steps are common/wisp_startup.c's.
 *
 * Status of the failure events follows the kernel's iWARP CM
 * (cma_iw_handler): -ECONNREFUSED for a rejection by the peer's
 * application and for a refused TCP connect, -ECONNRESET for a peer that
 * closed during the exchange, -ETIMEDOUT for a timeout, -EPROTO for an
 * MPA protocol fault. With TLS (docs/tls.md) a failed handshake, or a
 * TLS failure met while the Reply is read (a client certificate the
 * listener refused arrives as an alert then), is reported with
 * glue_tls_fail_errno()'s status: REJECTED with -EPROTONOSUPPORT when the
 * peer closed at the ClientHello (a plaintext-only listener),
 * UNREACHABLE with -ETIMEDOUT, CONNECT_ERROR with a status per reason
 * otherwise; one warning names the reason.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_internal.h"
#include "common/wisp_startup.h"
#include "wisp_mem.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

static void connect_failed(struct wcm_id *w, int fd, int status,
			   const struct mpa_params *p)
{
	enum rdma_cm_event_type type;
	struct glue_tls *t = fd >= 0 ? glue_tls_of(fd) : NULL;
	char who[64];

	if (t && glue_tls_failure(t) != GLUE_TLS_OK) {
		status = glue_tls_fail_errno(glue_tls_failure(t));
		p = NULL;
		wcm_log(WCM_LOG_WARN, "connect to %s: TLS: %s",
			wcm_addr_str(&w->id.route.addr.dst_addr, who,
				     sizeof(who)),
			glue_tls_fail_str(glue_tls_failure(t)));
	}
	switch (status) {
	case -EPROTONOSUPPORT:
		type = RDMA_CM_EVENT_REJECTED;
		break;
	case -ECONNREFUSED:
		/* Refused by TCP (nobody listens) or, with p, by the
		 * peer's application with an MPA Reject. */
		type = p ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_UNREACHABLE;
		break;
	case -ETIMEDOUT:
	case -ENETUNREACH:
	case -EHOSTUNREACH:
	case -EADDRNOTAVAIL:
		type = RDMA_CM_EVENT_UNREACHABLE;
		break;
	case -ECONNRESET:
		type = RDMA_CM_EVENT_REJECTED;
		break;
	default:
		type = RDMA_CM_EVENT_CONNECT_ERROR;
	}
	if (t) {
		/* Before the event: the application may exit on it. */
		glue_tls_drop(fd);
		glue_tls_thread_done();
	}
	pthread_mutex_lock(&wcm.lock);
	if (w->fd == fd)
		w->fd = -1;
	wcm_set_state(w, WCM_FAILED);
	wcm_log(WCM_LOG_INFO, "connect to %s: %s (%s)",
		wcm_addr_str(&w->id.route.addr.dst_addr, who, sizeof(who)),
		rdma_event_str(type), strerror(-status));
	wcm_event_queue(w, w, type, status, p ? p->peer_pdata : NULL,
			p ? p->peer_pdata_len : 0);
	pthread_mutex_unlock(&wcm.lock);
	if (fd >= 0) {
		glue_tls_drop(fd);
		close(fd);
	}
}

/*
 * The dialer: one thread for every rdma_connect under way in the
 * process, however many (issue 13: a thread per connection made 1,000
 * simultaneous connects cost 1,000 thread creations, and their stacks).
 * It runs each connection as a state machine over non-blocking sockets
 * in one epoll set: the TCP connect, the TLS handshake, the Request and
 * the Reply, then the initiator's hold (glue_mpa.h) as a timer. Each
 * step has the id's timeout from its start, as the blocking calls had.
 * A wake-up costs what is ready, not a poll() of every connection under
 * way (with 1,000 at once that made the burst O(N^2) in the dialer):
 * each socket is armed one-shot for what its phase waits for, and the
 * list of connections is walked only when the nearest deadline passes.
 * The thread starts with the first connect and ends when none is left.
 * A plain MPA connection comes to it with its connect made and its
 * Request sent by rdma_connect (dial_begin), TLS ones before their
 * connect.
 */
struct dial {
	struct dial *next, *prev;  /* the dialer's list (incoming: next) */
	struct wcm_id *w;
	int fd;
	enum { DIAL_TCP, DIAL_TLS, DIAL_REPLY, DIAL_HOLD } phase;
	int64_t deadline;          /* of the phase; -1: none */
	short events;              /* what the phase polls for */
	int tmo;
	struct sockaddr_storage dst;
	struct mpa_prefs prefs;
	struct glue_tls_config tls;
	struct glue_tls *t;        /* the session, attached to fd */
	bool had_qp;
	bool started;              /* connect made by rdma_connect's caller */
	bool port_late;            /* the connect takes the port (cm_id.c) */
	struct wisp_startup_init x;
	struct glue_mpa_rd rd;
	struct mpa_params params;
};

static struct {
	struct dial *incoming;     /* from rdma_connect (wcm.lock) */
	bool running;              /* the thread exists (wcm.lock) */
	int wake;                  /* eventfd: incoming has more */
	int ep;                    /* epoll: wake, and each dial's socket */
} dialer = { .wake = -1, .ep = -1 };

/*
 * Every step below returns true while d is still under way, false once
 * it has ended (its event queued, its fd given away or closed, d freed).
 */
static bool dial_done(struct dial *d)
{
	struct wcm_id *w = d->w;

	wisp_mem_free(d, sizeof(*d));
	wcm_thread_done(w);
	return false;
}

static bool dial_fail(struct dial *d, int status)
{
	connect_failed(d->w, d->fd, status, NULL);
	return dial_done(d);
}

static void dial_set(struct dial *d, int phase, short events, int ms)
{
	d->phase = phase;
	d->events = events;
	d->deadline = wisp_startup_deadline(ms);
}

/* A good Reply and the hold over: the stream goes to the QP. */
static bool dial_establish(struct dial *d)
{
	struct wcm_id *w = d->w;
	struct ibv_qp *qp;
	bool dying;

	pthread_mutex_lock(&wcm.lock);
	dying = w->dying;
	/* The application may have destroyed the QP while the exchange
	 * went on (rdma_destroy_qp): take it again now, and from here on
	 * rdma_destroy_qp waits until the stream is attached. */
	if (d->had_qp && !w->id.qp && !w->ext_qp)
		dying = true;
	qp = w->id.qp ? w->id.qp : w->ext_qp;
	if (!dying) {
		w->fd = -1;
		wcm_set_state(w, WCM_ATTACHING);
	}
	pthread_mutex_unlock(&wcm.lock);
	if (dying)
		return dial_fail(d, -ECANCELED);
	if (d->t)
		glue_tls_thread_done();
	wcm_establish(w, qp, d->fd, &d->params, true);
	return dial_done(d);
}

/* The Reply, as far as it has come. */
static bool dial_reply(struct dial *d)
{
	enum mpa_error err = MPA_ERR_NONE;
	int len, ret, hold;

	len = glue_mpa_rd_step(d->fd, &d->rd, &err);
	if (len == -EAGAIN)
		return true;
	ret = len;
	if (len >= 0) {
		ret = wisp_startup_take_reply(d->fd, &d->prefs, d->deadline,
					      &d->x, (size_t)len, &d->params,
					      &err);
		if (ret == -ECONNREFUSED) {
			connect_failed(d->w, d->fd, ret, &d->params);
			return dial_done(d);
		}
	}
	if (ret < 0) {
		if (err)
			wcm_log(WCM_LOG_WARN, "MPA Reply refused: %s",
				mpa_error_str(err));
		return dial_fail(d, ret);
	}
	/* siw reads nothing just after its Reply (glue_mpa.h): wait before
	 * the first FPDU, as a timer, not holding up other connections. A
	 * peer that answered wisp's extension is wisp, whose engine reads
	 * whatever arrived before it took the socket: no wait (a burst of
	 * connects waited 10 ms each; issue 13). */
	pthread_mutex_lock(&wcm.lock);
	hold = d->w->opts.hold_ms;
	pthread_mutex_unlock(&wcm.lock);
	if (hold <= 0 || d->params.peer_max_ulpdu)
		return dial_establish(d);
	dial_set(d, DIAL_HOLD, 0, hold);
	return true;
}

/* Send the Request; then wait for the Reply, within the timeout again. */
static bool dial_request(struct dial *d)
{
	int ret;

	dial_set(d, DIAL_REPLY, POLLIN, d->tmo);
	/* A fresh socket's send buffer holds the frame: this does not
	 * wait. */
	ret = wisp_startup_send_request(d->fd, &d->prefs, d->deadline, &d->x);
	if (ret)
		return dial_fail(d, ret);
	glue_mpa_rd_init(&d->rd, MPA_REPLY, d->x.frame, sizeof(d->x.frame));
	/* With TLS, OpenSSL may already hold what arrived. Without, the
	 * Reply cannot be there yet (the peer's application answers it):
	 * the epoll set reports it, and a recv now would only fail. */
	if (!d->t)
		return true;
	return dial_reply(d);
}

/* A TLS handshake step, then the Request once it is done. */
static bool dial_tls(struct dial *d, bool late)
{
	char what[96], who[64];
	int ret;

	/* Past the deadline: one last step, and the session records the
	 * timeout (glue_tls_fail_errno: UNREACHABLE, -ETIMEDOUT). */
	ret = late ? glue_tls_handshake(d->t, 0) :
		     glue_tls_handshake_step(d->t);
	if (ret == -EAGAIN) {
		d->events = glue_tls_events(d->t);
		return true;
	}
	if (ret)
		return dial_fail(d, ret);
	wcm_log(WCM_LOG_INFO, "connect to %s: %s",
		wcm_addr_str((const struct sockaddr *)&d->dst, who,
			     sizeof(who)),
		glue_tls_describe(d->t, what, sizeof(what)));
	return dial_request(d);
}

/*
 * The TLS session as initiator on the connected fd (docs/tls.md): it is
 * attached to fd first, so that the MPA exchange runs inside it and
 * connect_failed() finds why it failed. An initiator never falls back
 * to plaintext (WISP_TLS=optional counts as required here). Returns 0 or
 * a negative errno.
 */
static int dial_tls_start(struct dial *d)
{
	char why[256], addr[INET6_ADDRSTRLEN + 8];
	const struct sockaddr *dst = (const struct sockaddr *)&d->dst;
	struct glue_tls_ctx *ctx;
	int ret;

	ctx = glue_tls_ctx_get(&d->tls, false, why, sizeof(why));
	if (!ctx) {
		wcm_log(WCM_LOG_ERROR, "TLS: %s", why);
		return -EINVAL;
	}
	if (getnameinfo(dst, wcm_addrlen(dst), addr, sizeof(addr), NULL, 0,
			NI_NUMERICHOST))
		addr[0] = 0;
	/* A link-local scope ("%eth0") is no part of an IP SAN. */
	addr[strcspn(addr, "%")] = 0;
	d->t = glue_tls_new(ctx, d->fd, addr[0] ? addr : NULL);
	if (!d->t)
		return -ENOMEM;
	ret = glue_tls_attach(d->fd, d->t);
	if (ret) {
		glue_tls_free(d->t);
		d->t = NULL;
	}
	return ret;
}

/* TCP is connected: the source address as it is now. */
static void dial_source(struct dial *d)
{
	pthread_mutex_lock(&wcm.lock);
	wcm_src_read(d->w, d->fd);
	pthread_mutex_unlock(&wcm.lock);
}

/* The same family, address and port. */
static bool same_endpoint(const struct sockaddr_storage *a,
			  const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a,
					 *y = (const void *)b;

		return x->sin_port == y->sin_port &&
		       x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a,
					  *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr,
			       sizeof(x->sin6_addr));
	}
	return false;
}

/*
 * TCP is connected: the source address as it is now (dial_source), unless
 * the socket is connected to itself. A connect to a local port on which
 * nobody listens may get that same port as its source (one in
 * net.ipv4.ip_local_port_range, and the only one free: a listener there
 * just closed), and TCP's simultaneous open then connects the socket to
 * itself, as Linux allows. The MPA exchange would read back its own
 * Request (CONNECT_ERROR, -EPROTO). It is a refused connect: the same
 * event, and the socket reset, not closed, so that no TIME_WAIT keeps the
 * port from the next connect or from a listener (a refused connect leaves
 * nothing behind either). False if d has ended so.
 */
static bool dial_up(struct dial *d)
{
	struct linger reset = { .l_onoff = 1, .l_linger = 0 };
	char who[64];

	dial_source(d);
	/* The peer of a connected TCP socket is the address it connected
	 * to: no getpeername. The source is only written by this thread
	 * while the connect is under way. */
	if (!same_endpoint(&d->w->id.route.addr.src_storage, &d->dst))
		return true;
	wcm_log(WCM_LOG_INFO, "connect to %s: connected to itself (the "
		"source port is the destination's, where nobody listens): "
		"refused",
		wcm_addr_str((const struct sockaddr *)&d->dst, who,
			     sizeof(who)));
	setsockopt(d->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
	return dial_fail(d, -ECONNREFUSED);
}

/* TCP is connected: TLS if asked for, then the Request. */
static bool dial_connected(struct dial *d)
{
	int ret;

	/* The socket stays non-blocking, as the engine wants it
	 * (glue_conn_add): every call on it until then passes MSG_DONTWAIT
	 * or polls itself, TLS's included. Switching it to blocking and
	 * back cost two fcntl calls per connection (issue 13). */
	if (!dial_up(d))
		return false;
	/* Plain MPA sends one frame, the first data on the connection,
	 * which Nagle never holds back; glue_conn_add sets TCP_NODELAY for
	 * the FPDUs. TLS sends its MPA Request right behind its Finished,
	 * which Nagle would hold until the Finished is acknowledged. */
	if (d->tls.mode == GLUE_TLS_OFF)
		return dial_request(d);
	wcm_no_delay(d->fd);
	ret = dial_tls_start(d);
	if (ret)
		return dial_fail(d, ret);
	dial_set(d, DIAL_TLS, POLLOUT, d->tmo);
	return dial_tls(d, false);
}

/* The TCP connect's outcome, once the socket is writable (or failed). */
static bool dial_tcp(struct dial *d, bool late)
{
	int ret = glue_mpa_connect_result(d->fd);

	if (ret == -EINPROGRESS)
		return late ? dial_fail(d, -ETIMEDOUT) : true;
	if (ret)
		return dial_fail(d, ret);
	return dial_connected(d);
}

/*
 * Plain MPA, the connect under way: try the Request at once. A send on
 * a socket still connecting fails with EAGAIN and one whose connect
 * failed with the connect's error (TCP's sk_stream_wait_connect), so the
 * send tells what poll() and SO_ERROR did, in one system call instead of
 * three (issue 13). Not connected yet: wait for it as before.
 */
static bool dial_early_request(struct dial *d)
{
	int len = wisp_startup_build_request(&d->prefs, &d->x);
	long n;

	if (len < 0)
		return dial_fail(d, len);
	n = glue_mpa_send_some(d->fd, d->x.frame, (size_t)len);
	if (n == -EAGAIN)
		return true;              /* DIAL_TCP: wait for POLLOUT */
	if (n < 0)
		return dial_fail(d, (int)n);
	/* Connected: the Request went out, to itself perhaps. */
	if (!dial_up(d))
		return false;
	dial_set(d, DIAL_REPLY, POLLIN, d->tmo);
	/* A fresh socket's send buffer takes the whole frame; should it
	 * not, the rest goes as dial_request sends, within the timeout. */
	if (n < len) {
		int ret = glue_mpa_write(d->fd, d->x.frame + n,
					 (size_t)(len - n),
					 wisp_startup_ms_left(d->deadline));

		if (ret)
			return dial_fail(d, ret);
	}
	glue_mpa_rd_init(&d->rd, MPA_REPLY, d->x.frame, sizeof(d->x.frame));
	return true;
}

/* connect(2) said EADDRNOTAVAIL: no local port free for dst (or the
 * bound source address gone). Say which range, once per process (then at
 * debug level). */
static void ports_exhausted(const struct sockaddr *dst)
{
	static _Atomic bool told;
	char who[64];
	int lo = 0, hi = 0;
	FILE *f;

	f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = hi = 0;
		fclose(f);
	}
	wcm_log(atomic_exchange(&told, true) ? WCM_LOG_DEBUG : WCM_LOG_WARN,
		"connect to %s: no local port free (net.ipv4."
		"ip_local_port_range %d-%d exhausted?) or the source address "
		"gone: EADDRNOTAVAIL",
		wcm_addr_str(dst, who, sizeof(who)), lo, hi);
}

/* A new connection's non-blocking TCP connect: 0, -EINPROGRESS, or a
 * negative errno (-ECANCELED: the id is being destroyed). */
static int dial_connect(struct dial *d)
{
	const struct sockaddr *dst = (const struct sockaddr *)&d->dst;
	int ret;
	bool dying;

	pthread_mutex_lock(&wcm.lock);
	dying = d->w->dying;
	pthread_mutex_unlock(&wcm.lock);
	if (dying)
		return -ECANCELED;
	dial_set(d, DIAL_TCP, POLLOUT, d->tmo);
	/* The socket is non-blocking from socket() on (rdma_connect,
	 * wcm_bind_locked): no F_GETFL, as glue_mpa_connect_start() makes
	 * for any socket. */
	ret = glue_mpa_connect_nb(d->fd, dst, wcm_addrlen(dst));
	if (ret == -EADDRNOTAVAIL)
		ports_exhausted(dst);
	else if (ret == -EINPROGRESS && d->port_late)
		dial_source(d);           /* the port connect took */
	return ret;
}

/* What follows the connect (ret: dial_connect's). */
static bool dial_connect_went(struct dial *d, int ret)
{
	if (!ret)
		return dial_connected(d);
	if (ret != -EINPROGRESS)
		return dial_fail(d, ret);
	/* On loopback the handshake is usually over already: send the
	 * Request now, so that a listener never sees a burst of silent
	 * connections (WISP_MPA_MAX_PENDING_PER_ADDR). */
	if (d->tls.mode == GLUE_TLS_OFF)
		return dial_early_request(d);
	return dial_tcp(d, false);
}

/* A new connection, on the dialer. */
static bool dial_start(struct dial *d)
{
	return dial_connect_went(d, dial_connect(d));
}

/* One connection's turn: its socket is ready, or its deadline passed. */
static bool dial_step(struct dial *d, bool late)
{
	switch (d->phase) {
	case DIAL_TCP:
		return dial_tcp(d, late);
	case DIAL_TLS:
		return dial_tls(d, late);
	case DIAL_REPLY:
		return late ? dial_fail(d, -ETIMEDOUT) : dial_reply(d);
	case DIAL_HOLD:
		return late ? dial_establish(d) : true;
	}
	return true;
}

static void dial_link(struct dial **head, struct dial *d)
{
	d->prev = NULL;
	d->next = *head;
	if (*head)
		(*head)->prev = d;
	*head = d;
}

static void dial_unlink(struct dial **head, struct dial *d)
{
	if (d->prev)
		d->prev->next = d->next;
	else
		*head = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->next = d->prev = NULL;
}

/* Arm d's socket, once, for what its phase waits for (a hold: for
 * nothing but a hang-up, reported once). 0 or -errno. */
static int dial_arm(struct dial *d, int op)
{
	struct epoll_event ev = {
		.events = EPOLLONESHOT |
			  (d->phase == DIAL_HOLD ? 0 : (uint32_t)d->events),
		.data.ptr = d,
	};

	return epoll_ctl(dialer.ep, op, d->fd, &ev) ? -errno : 0;
}

/* d joins the list under way, its socket the epoll set. */
static void dial_add(struct dial **head, struct dial *d, int64_t *first)
{
	int ret = dial_arm(d, EPOLL_CTL_ADD);

	if (ret) {
		dial_fail(d, ret);
		return;
	}
	dial_link(head, d);
	if (d->deadline >= 0 && (*first < 0 || d->deadline < *first))
		*first = d->deadline;
}

/* Step d (on the list); *first takes its next deadline. */
static void dial_run(struct dial **head, struct dial *d, bool late,
		     int64_t *first)
{
	int ret;

	dial_unlink(head, d);
	/* Disarmed before the step: a step that ends d hands its socket on
	 * (closed, or the QP's now, which the application may close at
	 * once on another thread), and this thread must not touch the
	 * descriptor after that. A socket whose event came is disarmed
	 * already (EPOLLONESHOT): it stays in the set, silent, until its
	 * file is closed, and is armed again with a MOD if d goes on (one
	 * epoll_ctl per connection less, issue 13). One whose deadline
	 * passed is still armed and leaves the set. */
	if (late)
		epoll_ctl(dialer.ep, EPOLL_CTL_DEL, d->fd, NULL);
	if (!dial_step(d, late))
		return;
	ret = dial_arm(d, late ? EPOLL_CTL_ADD : EPOLL_CTL_MOD);
	if (ret) {
		dial_fail(d, ret);
		return;
	}
	dial_link(head, d);
	if (d->deadline >= 0 && (*first < 0 || d->deadline < *first))
		*first = d->deadline;
}

/* Connects started per turn: between turns the dialer serves the
 * Replies that came, so that a burst of connects does not keep the
 * first ones waiting until the last has started. */
#define DIAL_START_BATCH 32

/*
 * Start what rdma_connect queued (*in: taken, not started yet; oldest
 * first), at most DIAL_START_BATCH, and put it on *head. False when
 * nothing is left to do: the thread then ends, and the next rdma_connect
 * starts another (both decided under wcm.lock).
 */
static bool dial_take(struct dial **head, struct dial **in, int64_t *first)
{
	struct dial *new, *d;
	uint64_t v;

	if (read(dialer.wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
		wcm_log(WCM_LOG_DEBUG, "dialer: %s", strerror(errno));
	pthread_mutex_lock(&wcm.lock);
	new = dialer.incoming;
	dialer.incoming = NULL;
	if (!new && !*in && !*head)
		dialer.running = false;
	pthread_mutex_unlock(&wcm.lock);
	if (!new && !*in && !*head)
		return false;
	/* rdma_connect pushes in front: the newest come first. Put them
	 * behind the ones already waiting, oldest first; those whose
	 * connect rdma_connect made join the set at once. */
	if (new) {
		struct dial *rev = NULL, **tail = in;

		while ((d = new)) {
			new = d->next;
			d->next = rev;
			rev = d;
		}
		while (*tail)
			tail = &(*tail)->next;
		while ((d = rev)) {
			rev = d->next;
			d->next = NULL;
			if (d->started) {
				dial_add(head, d, first);
			} else {
				*tail = d;
				tail = &d->next;
			}
		}
	}
	for (int i = 0; i < DIAL_START_BATCH && (d = *in); i++) {
		*in = d->next;
		if (dial_start(d))
			dial_add(head, d, first);
	}
	return true;
}

/* Step every connection whose deadline has passed; *first becomes the
 * nearest deadline left. */
static void dial_expire(struct dial **head, int64_t *first)
{
	int64_t now = glue_mpa_now_ms();
	struct dial *d, *next;

	if (*first < 0 || *first > now)
		return;
	*first = -1;
	for (d = *head; d; d = next) {
		next = d->next;
		if (d->deadline >= 0 && d->deadline <= now)
			dial_run(head, d, true, first);   /* relinked in front */
		else if (d->deadline >= 0 &&
			 (*first < 0 || d->deadline < *first))
			*first = d->deadline;
	}
}

static void *dial_thread(void *arg)
{
	struct dial *head = NULL, *in = NULL;
	int64_t first = -1;
	bool take = true;

	(void)arg;
	pthread_setname_np(pthread_self(), "wisp-dialer");
	for (;;) {
		struct epoll_event evs[64];
		int64_t now;
		int n, tmo = -1;

		if (take || in || !head) {
			take = false;
			if (!dial_take(&head, &in, &first))
				break;
			/* Every one it started is over already (the Reply was
			 * there at once): look again, which ends the thread if
			 * nothing new came, rather than wait for the next
			 * rdma_connect. */
			if (!head && !in)
				continue;
		}
		now = glue_mpa_now_ms();
		if (first >= 0)
			tmo = first <= now ? 0 : (int)(first - now > 60000 ?
						       60000 : first - now);
		if (in)
			tmo = 0;          /* more to start: only look */
		n = epoll_wait(dialer.ep, evs, 64, tmo);
		/* The events of this turn (a burst's ESTABLISHED, mostly)
		 * make the application's channel readable once, at its end:
		 * one wake-up of the application's thread, not one per
		 * event, each of which then also wanted wcm.lock while this
		 * thread took it for the next connection (issue 13). */
		wcm_events_hold();
		for (int i = 0; i < n; i++) {
			struct dial *d = evs[i].data.ptr;

			if (!d)
				take = true;    /* the wake eventfd */
			else
				dial_run(&head, d, false, &first);
		}
		dial_expire(&head, &first);
		wcm_events_release();
	}
	glue_tls_thread_done();
	return NULL;
}

/* The dialer's thread, unless it runs (wcm.lock held). 0 or -errno. */
static int dial_thread_start(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	if (dialer.wake < 0) {
		dialer.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (dialer.wake < 0)
			return -errno;
	}
	if (dialer.ep < 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
		int ep = epoll_create1(EPOLL_CLOEXEC);

		if (ep < 0)
			return -errno;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, dialer.wake, &ev)) {
			ret = -errno;
			close(ep);
			return ret;
		}
		dialer.ep = ep;
	}
	if (dialer.running)
		return 0;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ret = pthread_create(&t, &attr, dial_thread, NULL);
	pthread_attr_destroy(&attr);
	if (ret)
		return -ret;
	dialer.running = true;
	return 0;
}

/* Hand d to the dialer, starting its thread if need be (wcm.lock
 * held). */
static int dial_hand(struct dial *d)
{
	uint64_t one = 1;
	int ret = dial_thread_start();

	if (ret)
		return ret;
	/* One wake-up per batch, not per connect: a non-empty list has had
	 * its write since the dialer last took it (both under wcm.lock; the
	 * dialer reads the eventfd before it takes the list), so the
	 * dialer will take d with the others. */
	d->next = dialer.incoming;
	dialer.incoming = d;
	if (!d->next && write(dialer.wake, &one, sizeof(one)) < 0)
		wcm_log(WCM_LOG_ERROR, "dialer: %s", strerror(errno));
	return 0;
}

/* The connect of w, to be started (wcm.lock held); w->workers counts it
 * from here on. NULL if out of memory. */
static struct dial *dial_new(struct wcm_id *w)
{
	struct dial *d = wisp_mem_zalloc(sizeof(*d));

	if (!d)
		return NULL;
	d->w = w;
	d->fd = w->fd;
	d->deadline = -1;
	memcpy(&d->dst, &w->id.route.addr.dst_storage, sizeof(d->dst));
	wcm_opts_prefs(&w->opts, &d->prefs);
	d->prefs.ird = w->ird;
	d->prefs.ord = w->ord;
	d->prefs.pdata = w->conn_pdata_len ? w->conn_pdata : NULL;
	d->prefs.pdata_len = w->conn_pdata_len;
	d->tmo = w->opts.timeout_ms;
	d->tls = w->opts.tls;
	d->had_qp = w->id.qp || w->ext_qp;
	d->port_late = w->port_late;
	w->workers++;
	return d;
}

/*
 * Plain MPA: the TCP connect and the Request on the caller's thread, as
 * the kernel's CM starts the connect within rdma_connect; the dialer
 * takes the connection from there (the Reply, or the rest of a connect
 * still under way). Neither call waits: the socket is non-blocking and a
 * fresh one's send buffer takes the Request. A burst of rdma_connect
 * calls then makes its connects one by one as raw TCP does, each
 * connection's time counted from its own call, instead of queueing them
 * all at once in front of one dialer thread that made every connect and
 * read every Reply (issue 13). A failure is the same event as from the
 * dialer, but for a connect without a local port, which is rdma_connect's
 * own error: 0 or -EADDRNOTAVAIL.
 */
static int dial_begin(struct dial *d)
{
	struct wcm_id *w = d->w;
	int ret = dial_connect(d);

	if (ret == -EADDRNOTAVAIL) {
		/* No local port (or address) for the connect: rdma_connect
		 * fails with EADDRNOTAVAIL, no event, and the id is
		 * resolved again, socket and all, as the kernel's
		 * rdma_connect leaves it when its iWARP driver cannot bind
		 * or connect (siw_connect). The application may try again
		 * or destroy it. */
		pthread_mutex_lock(&wcm.lock);
		if (w->state == WCM_CONNECTING)
			wcm_set_state(w, WCM_ROUTE_RESOLVED);
		w->workers--;
		pthread_cond_broadcast(&wcm.cond);
		pthread_mutex_unlock(&wcm.lock);
		wisp_mem_free(d, sizeof(*d));
		return ret;
	}
	if (!dial_connect_went(d, ret))
		return 0;                 /* over: its event is queued */
	d->started = true;
	pthread_mutex_lock(&wcm.lock);
	ret = dial_hand(d);
	pthread_mutex_unlock(&wcm.lock);
	if (ret)
		dial_fail(d, ret);
	return 0;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct dial *d = NULL;
	struct wcm_id *w;
	size_t pd_len = 0;
	int ret, fd;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_ROUTE_RESOLVED) {
		ret = -EINVAL;
		goto out;
	}
	/* As rdma_accept. Without a QP and without a QP number the
	 * connection is made for the CM alone (events, no data). */
	ret = wcm_resolve_qp(w, param, "rdma_connect");
	if (ret)
		goto out;
	ret = wcm_depth_of(param ? param->responder_resources : 0xff,
		       WCM_MAX_RD_ATOMIC, &w->ird);
	if (!ret)
		ret = wcm_depth_of(param ? param->initiator_depth : 0xff,
			       WCM_MAX_RD_ATOMIC, &w->ord);
	if (ret)
		goto out;
	/* rdma_create_ep's ai_connect data goes first (rdma-core). */
	if (w->ep_connect_len) {
		pd_len = w->ep_connect_len > MPA_PD_MAX ? MPA_PD_MAX :
							  w->ep_connect_len;
		memcpy(w->conn_pdata, w->ep_connect, pd_len);
	}
	if (param && param->private_data_len) {
		if (!param->private_data ||
		    pd_len + param->private_data_len > MPA_PD_MAX) {
			ret = -EINVAL;
			goto out;
		}
		memcpy(w->conn_pdata + pd_len, param->private_data,
		       param->private_data_len);
		pd_len += param->private_data_len;
	}
	w->conn_pdata_len = (uint16_t)pd_len;
	if (w->fd < 0) {
		int family = id->route.addr.dst_addr.sa_family;

		fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    IPPROTO_TCP);
		if (fd < 0) {
			ret = -errno;
			goto out;
		}
		wcm_fd_room(fd);
		wcm_sock_opts(w, fd, family);
		w->fd = fd;
	}
	d = dial_new(w);
	if (!d) {
		ret = -ENOMEM;
		goto out;
	}
	wcm_set_state(w, WCM_CONNECTING);
	/* TLS's handshake takes turns: the dialer makes the whole connect. */
	if (d->tls.mode != GLUE_TLS_OFF) {
		ret = dial_hand(d);
		if (ret) {
			w->workers--;
			pthread_cond_broadcast(&wcm.cond);
			wisp_mem_free(d, sizeof(*d));
			wcm_set_state(w, WCM_ROUTE_RESOLVED);
		}
		d = NULL;
	}
out:
	pthread_mutex_unlock(&wcm.lock);
	if (ret)
		return fail(ret);
	if (d) {
		ret = dial_begin(d);
		if (ret)
			return fail(ret);
	}
	return wcm_complete(w);
}
