/* SPDX-License-Identifier: MIT */
/*
 * cm_passive.c - the passive side of a connection: rdma_listen's thread
 * accepts TCP connections, reads their MPA Requests within the timeout,
 * all of them at once without blocking (bounded: see struct wcm_hs), and
 * raises CONNECT_REQUEST on a new id carrying the Initiator's private
 * data, as long as the listen backlog has room. rdma_accept sends the
 * Reply and hands the socket to the QP (ESTABLISHED); rdma_reject sends a
 * Reply with R set and closes. The MPA steps are common/wisp_startup.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_internal.h"
#include "wisp_private.h"
#include "common/wisp_startup.h"
#include "wisp_mem.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

/*
 * Pending handshakes. A TCP connection costs nothing but its socket and
 * one struct wcm_hs until its MPA Request has arrived: the listener's own
 * thread reads every pending Request without blocking (glue_mpa_rd_step),
 * so hundreds of silent or slow peers (TCP connected, no Request, or one
 * octet a second) cost no thread each, and a legitimate Request is read
 * as soon as it arrives. They are bounded process-wide by
 * WISP_MPA_MAX_PENDING and per source address by
 * WISP_MPA_MAX_PENDING_PER_ADDR (docs/configuration.md): a connection
 * over the address bound is closed at once; one over the global bound
 * takes the place of the listener's oldest pending handshake (the one
 * that has had the most time), or is closed if the listener has none.
 * Each still has WISP_MPA_TIMEOUT_MS to complete its Request.
 */
struct wcm_hs {
	struct wcm_hs *next;       /* the listener's, oldest first */
	struct wcm_hs *all_next;   /* wcm.hs_all, for per-address counts */
	struct wcm_hs **all_pprev;
	int fd;
	int64_t deadline;
	struct in6_addr addr;      /* source address (IPv4 mapped) */
	struct sockaddr_storage peer; /* as accept() gave it */
	struct glue_mpa_rd rd;
	uint8_t frame[GLUE_MPA_FRAME_MAX];
	char who[64];
	/* TLS (docs/tls.md): the first octet says which (hs_sniff); the
	 * handshake runs here, without blocking, before the Request. */
	enum { HS_SNIFF, HS_TLS, HS_MPA } phase;
	bool plain_only;           /* WISP_TLS=off: no sniff (hs_sniff) */
	struct glue_tls *tls;      /* HS_TLS: not attached yet */
	short events;              /* what the next step waits for */
};

/* What one listener thread holds. */
struct listener {
	struct wcm_id *w;
	struct wcm_hs *head, **tail;
	int n;
	/* lfd, wake, then one per handshake: a listener never holds more
	 * than WISP_MPA_MAX_PENDING. */
	struct pollfd *pfd;
};

/* The source address as a key: IPv4 as its IPv4-mapped IPv6 form. */
static void addr_key(const struct sockaddr_storage *ss, struct in6_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)ss;

		out->s6_addr[10] = 0xff;
		out->s6_addr[11] = 0xff;
		memcpy(&out->s6_addr[12], &s->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		*out = ((const struct sockaddr_in6 *)ss)->sin6_addr;
	}
}

/* Pending handshakes from addr, all listeners (wcm.lock held). */
static int hs_from(const struct in6_addr *addr)
{
	int n = 0;

	for (const struct wcm_hs *h = wcm.hs_all; h; h = h->all_next)
		n += !memcmp(&h->addr, addr, sizeof(*addr));
	return n;
}

/* Unlink h from the global list and close it (wcm.lock not held). */
static void hs_close(struct wcm_hs *h)
{
	pthread_mutex_lock(&wcm.lock);
	*h->all_pprev = h->all_next;
	if (h->all_next)
		h->all_next->all_pprev = h->all_pprev;
	wcm.hs_count--;
	pthread_mutex_unlock(&wcm.lock);
	if (h->tls && h->fd >= 0) {
		/* A failed TLS handshake: OpenSSL has queued its alert. The
		 * initiator already sent its MPA Request after its Finished
		 * (TLS 1.3: the client is done first); closing with it
		 * unread would reset the connection and the alert, which
		 * names the reason, could be lost. Read what is there. */
		uint8_t sink[4096];

		shutdown(h->fd, SHUT_WR);
		for (int i = 0; i < 16; i++)
			if (recv(h->fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
				break;
	}
	glue_tls_free(h->tls);
	if (h->fd >= 0) {
		glue_tls_drop(h->fd);
		close(h->fd);
	}
	wisp_mem_free(h, sizeof(*h));
}

/* Take h out of the listener's list (it is not closed). */
static void hs_unlink(struct listener *ls, struct wcm_hs *h)
{
	struct wcm_hs **pp = &ls->head;

	while (*pp != h)
		pp = &(*pp)->next;
	*pp = h->next;
	if (ls->tail == &h->next)
		ls->tail = pp;
	ls->n--;
}

static void hs_drop(struct listener *ls, struct wcm_hs *h)
{
	hs_unlink(ls, h);
	hs_close(h);
}

static void hs_serve(struct listener *ls, struct wcm_hs *h);

/* Put h on the global list unless the bounds say no; the reason if they
 * do, else NULL with *evict the handshake whose place h takes, if any.
 * wcm.lock held. */
static const char *hs_bounds(struct listener *ls, struct wcm_hs *h,
			     struct wcm_hs **evict)
{
	*evict = NULL;
	if (hs_from(&h->addr) >= wcm.limits.max_pending_addr)
		return "too many pending from this address "
		       "(WISP_MPA_MAX_PENDING_PER_ADDR)";
	if (wcm.hs_count >= wcm.limits.max_pending) {
		*evict = ls->head;
		if (!*evict)
			return "too many pending (WISP_MPA_MAX_PENDING)";
	}
	h->all_next = wcm.hs_all;
	if (wcm.hs_all)
		wcm.hs_all->all_pprev = &h->all_next;
	wcm.hs_all = h;
	h->all_pprev = &wcm.hs_all;
	wcm.hs_count++;
	return NULL;
}

/*
 * Admit the accepted connection fd from peer as a pending handshake, or
 * close it when the bounds say no. Before saying no, the Requests that
 * have already arrived are read: a client that opens hundreds of
 * connections at once sends each Request right after its connect, and
 * those handshakes are over, not pending; only the silent ones count
 * against the bounds. wcm.lock not held.
 */
static struct wcm_hs *hs_admit(struct listener *ls, int fd,
				const struct sockaddr_storage *peer,
				int timeout_ms)
{
	struct wcm_hs *h = wisp_mem_zalloc(sizeof(*h)), *evict = NULL;
	const char *no = NULL;

	if (!h) {
		close(fd);
		return NULL;
	}
	h->fd = fd;
	h->events = POLLIN;
	addr_key(peer, &h->addr);
	h->peer = *peer;
	wcm_addr_str((const struct sockaddr *)peer, h->who, sizeof(h->who));
	pthread_mutex_lock(&wcm.lock);
	no = hs_bounds(ls, h, &evict);
	pthread_mutex_unlock(&wcm.lock);
	if (no || evict) {
		for (struct wcm_hs *o = ls->head, *next; o; o = next) {
			next = o->next;
			hs_serve(ls, o);
		}
		pthread_mutex_lock(&wcm.lock);
		if (no)
			no = hs_bounds(ls, h, &evict);
		else if (wcm.hs_count <= wcm.limits.max_pending)
			evict = NULL;     /* served ones made room */
		else
			evict = ls->head; /* the oldest still silent */
		pthread_mutex_unlock(&wcm.lock);
	}
	if (no) {
		wcm_log(WCM_LOG_INFO, "connection from %s closed: %s", h->who,
			no);
		close(fd);
		wisp_mem_free(h, sizeof(*h));
		return NULL;
	}
	if (evict) {
		wcm_log(WCM_LOG_INFO, "connection from %s closed: no MPA "
			"Request yet, its place taken (WISP_MPA_MAX_PENDING)",
			evict->who);
		hs_drop(ls, evict);
	}
	/* TCP_NODELAY waits for TLS (hs_sniff): plain MPA's Reply is the
	 * first data this end sends, which Nagle never holds back, and
	 * glue_conn_add sets it for the FPDUs. */
	/* RFC 5044 7.1.2 rule 8: "Implementations SHOULD put a timeout on
	 * waiting for the MPA Request Frame when started in Responder
	 * mode". */
	h->deadline = wisp_startup_deadline(timeout_ms);
	glue_mpa_rd_init(&h->rd, MPA_REQUEST, h->frame, sizeof(h->frame));
	*ls->tail = h;
	ls->tail = &h->next;
	ls->n++;
	return h;
}

/* A listener's address (getsockname after its bind) names one local
 * address, not a wildcard: IPv4's 0.0.0.0, IPv6's :: and ::ffff:0.0.0.0
 * (which binds to every IPv4 address) are wildcards. */
static bool bound_to_one(const struct sockaddr *sa)
{
	const struct in6_addr *a6;

	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr !=
		       htonl(INADDR_ANY);
	if (sa->sa_family != AF_INET6)
		return false;
	a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (IN6_IS_ADDR_UNSPECIFIED(a6))
		return false;
	return !(IN6_IS_ADDR_V4MAPPED(a6) && !a6->s6_addr32[3]);
}

/* The new id for an acceptable Request (wcm.lock held). */
static int raise_request(struct wcm_id *l, struct wcm_id *c, int fd,
			 const struct sockaddr_storage *peer,
			 const uint8_t *buf, int len, const struct mpa_rr *req)
{
	struct wcm_event *e;

	c->opts = l->opts;
	memcpy(c->req_frame, buf, (size_t)len);
	c->req = *req;
	if (req->pdata)
		c->req.pdata = c->req_frame + (req->pdata - buf);
	c->fd = fd;
	wcm_set_state(c, WCM_CONNECT_REQ);
	wcm_id_set_device(c);
	/* A listener bound to one address accepts on that address and its
	 * port: no getsockname (issue 13). The wildcard's connections tell
	 * which address they came to. */
	if (bound_to_one(&l->id.route.addr.src_addr))
		memcpy(&c->id.route.addr.src_storage,
		       &l->id.route.addr.src_storage,
		       sizeof(c->id.route.addr.src_storage));
	else
		wcm_src_read(c, fd);
	/* The peer's address as accept() gave it: no getpeername. */
	memcpy(&c->id.route.addr.dst_storage, peer,
	       sizeof(c->id.route.addr.dst_storage));

	/* What the application should accept with, as the kernel's iWARP
	 * CM proposes: our ORD up to the peer's IRD, our IRD up to its ORD
	 * (RFC 6581 9.1), capped like siw. A rev 1 or non-enhanced Request
	 * says nothing, and 0 is proposed (siw's measured behaviour: with
	 * rdma_accept(id, NULL) such a connection runs with IRD = ORD = 0;
	 * pass a conn_param to choose). */
	if (req->enhanced) {
		c->req_ird = (uint8_t)(req->ord > WCM_MAX_RD_ATOMIC ?
				       WCM_MAX_RD_ATOMIC : req->ord);
		c->req_ord = (uint8_t)(req->ird > WCM_MAX_RD_ATOMIC ?
				       WCM_MAX_RD_ATOMIC : req->ird);
	}
	e = wcm_event_queue(l, c, RDMA_CM_EVENT_CONNECT_REQUEST, 0,
			    c->req.pdata, c->req.pdata_len);
	if (!e)
		return -ENOMEM;
	e->ev.listen_id = &l->id;
	e->ev.param.conn.responder_resources = c->req_ird;
	e->ev.param.conn.initiator_depth = c->req_ord;
	return 0;
}

/* Refuse the Request req on h because the listener's backlog is full:
 * as the kernel's iWARP CM, a Reply with R set, then close. */
static void refuse_backlog(struct wcm_hs *h, const struct mpa_rr *req,
			   const struct mpa_prefs *prefs)
{
	struct wisp_startup_reply r;

	wcm_log(WCM_LOG_INFO, "connection from %s refused: listen backlog "
		"full", h->who);
	wisp_stats_cm_event(WISP_STATS_CM_REFUSED);
	if (!wisp_startup_build_reply(req, prefs, true, &r))
		wisp_startup_send_reply(h->fd, &r, wisp_startup_deadline(0));
}

/*
 * h's Request (len octets) is complete: refuse it, or raise
 * CONNECT_REQUEST on a new id that takes the socket. h is closed or its
 * socket taken; the caller frees it.
 */
static void hs_request(struct wcm_id *l, struct wcm_hs *h, int len)
{
	struct mpa_prefs prefs;
	struct wcm_id *c;
	enum mpa_error err;
	struct mpa_rr req;
	bool full;
	int ret;

	pthread_mutex_lock(&wcm.lock);
	wcm_opts_prefs(&l->opts, &prefs);
	pthread_mutex_unlock(&wcm.lock);
	/* MPA's own refusal is written without waiting: a fresh socket's
	 * send buffer holds it, and the listener serves others. */
	ret = wisp_startup_take_request(h->fd, h->frame, (size_t)len, &prefs,
					wisp_startup_deadline(0), &req, &err);
	if (ret == -ECONNREFUSED) {
		wcm_log(WCM_LOG_WARN, "connection from %s refused: %s",
			h->who, mpa_error_str(err));
		wisp_stats_cm_event(WISP_STATS_CM_REFUSED);
		return;
	}
	if (ret < 0) {
		/* RFC 5044 7.1.2 rule 2: "If the MPA Request Frame is
		 * improperly formatted, the implementation MUST close the
		 * TCP connection and exit MPA." */
		wcm_log(WCM_LOG_WARN, "connection from %s: bad MPA Request: %s",
			h->who, mpa_error_str(err));
		return;
	}

	c = wcm_id_new(to_wch(l->id.channel), l->id.context, l->id.ps);
	pthread_mutex_lock(&wcm.lock);
	full = l->req_queued >= l->backlog;
	if (!c || l->dying || full ||
	    raise_request(l, c, h->fd, &h->peer, h->frame, len, &req)) {
		pthread_mutex_unlock(&wcm.lock);
		if (c) {
			c->fd = -1;
			c->id.channel = NULL;
			wisp_mem_free(c, sizeof(*c));
		}
		if (full)
			refuse_backlog(h, &req, &prefs);
		return;
	}
	l->req_queued++;
	h->fd = -1;                /* the new id's now */
	pthread_mutex_unlock(&wcm.lock);
	wcm_log(WCM_LOG_INFO, "connection request from %s, MPA rev %u",
		h->who, req.rev);
}

/*
 * Which the peer speaks, from its first octet: a TLS record header
 * starts with 0x16 (RFC 8446 5.1, ContentType handshake), an MPA Request
 * with 'M' ("MPA ID Req Frame"). Nothing has been sent to the peer yet,
 * so a refusal here is a plain close, logged with the reason. Returns 0
 * (h->phase set), -EAGAIN, or a negative errno to drop h.
 */
static int hs_sniff(struct listener *ls, struct wcm_hs *h)
{
	struct glue_tls_config cfg;
	struct glue_tls_ctx *ctx;
	char why[256];
	uint8_t first;
	ssize_t n;

	pthread_mutex_lock(&wcm.lock);
	cfg = ls->w->opts.tls;
	pthread_mutex_unlock(&wcm.lock);
	/* Without TLS the first octet is the MPA reader's: it refuses
	 * anything but 'M' at once, and hs_serve tells a ClientHello from
	 * other garbage by the octet it read. A peek here cost a system
	 * call per connection (issue 13). */
	if (cfg.mode == GLUE_TLS_OFF) {
		h->plain_only = true;
		h->phase = HS_MPA;
		return 0;
	}
	do
		n = recv(h->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -EAGAIN;
	if (n <= 0)
		return n ? -errno : -ECONNRESET;
	if (first != 0x16) {
		if (cfg.mode == GLUE_TLS_REQUIRED) {
			wcm_log(WCM_LOG_WARN, "connection from %s refused: "
				"plaintext MPA, but WISP_TLS=required",
				h->who);
			return -EPROTONOSUPPORT;
		}
		h->phase = HS_MPA;
		return 0;
	}
	ctx = glue_tls_ctx_get(&cfg, true, why, sizeof(why));
	if (!ctx) {
		wcm_log(WCM_LOG_ERROR, "connection from %s refused: TLS: %s",
			h->who, why);
		return -EINVAL;
	}
	h->tls = glue_tls_new(ctx, h->fd, NULL);
	if (!h->tls)
		return -ENOMEM;
	/* Handshake records and then the Reply, each behind data not yet
	 * acknowledged: Nagle must not hold them. */
	wcm_no_delay(h->fd);
	h->phase = HS_TLS;
	return 0;
}

/* One step of h's TLS handshake; once done the session is attached to
 * the socket and the Request is read through it. */
static int hs_tls(struct wcm_hs *h)
{
	int ret = glue_tls_handshake_step(h->tls);

	if (ret == -EAGAIN) {
		h->events = glue_tls_events(h->tls);
		return ret;
	}
	if (ret) {
		wcm_log(WCM_LOG_WARN, "connection from %s refused: TLS: %s",
			h->who, glue_tls_fail_str(glue_tls_failure(h->tls)));
		return ret;
	}
	{
		char what[96];

		wcm_log(WCM_LOG_INFO, "connection from %s: %s", h->who,
			glue_tls_describe(h->tls, what, sizeof(what)));
	}
	ret = glue_tls_attach(h->fd, h->tls);
	if (ret)
		return ret;
	h->tls = NULL;
	h->events = POLLIN;
	h->phase = HS_MPA;
	return 0;
}

/* Read what h's peer sent; on a complete Request or a failure h leaves
 * the list. */
static void hs_serve(struct listener *ls, struct wcm_hs *h)
{
	enum mpa_error err = MPA_ERR_NONE;
	int len = 0;

	if (h->phase == HS_SNIFF)
		len = hs_sniff(ls, h);
	if (!len && h->phase == HS_TLS)
		len = hs_tls(h);
	if (len == -EAGAIN)
		return;
	if (len < 0) {
		wcm_log(WCM_LOG_INFO, "connection from %s: no MPA Request: %s",
			h->who, strerror(-len));
		hs_unlink(ls, h);
		hs_close(h);
		return;
	}
	len = glue_mpa_rd_step(h->fd, &h->rd, &err);
	if (len == -EAGAIN)
		return;
	if (len < 0 && h->plain_only && h->rd.got && h->frame[0] == 0x16) {
		/* A TLS record header (RFC 8446 5.1) where the Request
		 * should start: closed as before, nothing sent. */
		wcm_log(WCM_LOG_WARN, "connection from %s refused: TLS "
			"ClientHello, but WISP_TLS=off", h->who);
		len = -EPROTONOSUPPORT;
		err = MPA_ERR_NONE;
	}
	hs_unlink(ls, h);
	if (len < 0)
		wcm_log(WCM_LOG_INFO, "connection from %s: no MPA Request: "
			"%s%s%s", h->who, strerror(-len), err ? ", " : "",
			err ? mpa_error_str(err) : "");
	else
		hs_request(ls->w, h, len);
	hs_close(h);
}

/* Accept what the kernel has queued, a bounded number per round so that
 * pending handshakes are served in between. */
static void accept_some(struct listener *ls, int lfd, int timeout_ms)
{
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		struct wcm_hs *h;
		int fd;

		/* Non-blocking: the handshake reads never wait, and the
		 * engine takes the socket so (no fcntl there). */
		fd = accept4(lfd, (struct sockaddr *)&peer, &plen,
			     SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM) {
				wcm_log(WCM_LOG_WARN, "accept: %s",
					strerror(errno));
				poll(NULL, 0, 100);
			}
			return;
		}
		wcm_fd_room(fd);
		h = hs_admit(ls, fd, &peer, timeout_ms);
		/* The initiator sends its Request (or ClientHello) right
		 * after its connect: it is usually here already. Read it
		 * now rather than after another poll() of every pending
		 * handshake (issue 13); if not, poll() reports it. */
		if (h)
			hs_serve(ls, h);
	}
}

/* Fill ls->pfd; returns the poll timeout (the nearest deadline). */
static int poll_setup(struct listener *ls, int lfd, int wake)
{
	int64_t now = glue_mpa_now_ms(), first = -1;
	int i = 2;

	ls->pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
	ls->pfd[1] = (struct pollfd){ .fd = wake, .events = POLLIN };
	for (struct wcm_hs *h = ls->head; h; h = h->next, i++) {
		ls->pfd[i] = (struct pollfd){ .fd = h->fd,
					      .events = h->events };
		if (h->deadline >= 0 && (first < 0 || h->deadline < first))
			first = h->deadline;
	}
	if (first < 0)
		return -1;
	return first <= now ? 0 : (int)(first - now > 60000 ? 60000 :
					    first - now);
}

/* After poll: serve the ready handshakes, drop the expired ones. */
static void serve_all(struct listener *ls, int polled)
{
	int64_t now = glue_mpa_now_ms();
	struct wcm_hs *h = ls->head, *next;
	int i = 2;

	for (; h && i < polled; h = next, i++) {
		next = h->next;
		if (ls->pfd[i].revents) {
			hs_serve(ls, h);
		} else if (h->deadline >= 0 && h->deadline <= now) {
			wcm_log(WCM_LOG_INFO, "connection from %s: no MPA "
				"Request: %s", h->who, strerror(ETIMEDOUT));
			hs_drop(ls, h);
		}
	}
}

/* The state of w's listener thread (wcm.lock held). NULL if out of
 * memory. */
static struct listener *listener_new(struct wcm_id *w)
{
	struct listener *ls = calloc(1, sizeof(*ls));

	if (!ls)
		return NULL;
	ls->pfd = calloc((size_t)wcm.limits.max_pending + 2,
			 sizeof(*ls->pfd));
	if (!ls->pfd) {
		free(ls);
		return NULL;
	}
	ls->w = w;
	ls->tail = &ls->head;
	return ls;
}

static void *listen_thread(void *arg)
{
	struct listener *ls = arg;
	struct wcm_id *w = ls->w;
	int lfd, wake, timeout_ms;

	pthread_mutex_lock(&wcm.lock);
	lfd = w->fd;
	wake = w->wake_fd;
	timeout_ms = w->opts.timeout_ms;
	pthread_mutex_unlock(&wcm.lock);

	for (;;) {
		int tmo = poll_setup(ls, lfd, wake), polled = ls->n + 2;
		bool dying;

		if (poll(ls->pfd, (nfds_t)polled, tmo) < 0 && errno != EINTR)
			break;
		pthread_mutex_lock(&wcm.lock);
		dying = w->dying;
		pthread_mutex_unlock(&wcm.lock);
		if (dying)
			break;
		serve_all(ls, polled);
		if (ls->pfd[0].revents & (POLLIN | POLLERR | POLLHUP))
			accept_some(ls, lfd, timeout_ms);
	}
	while (ls->head)
		hs_drop(ls, ls->head);
	free(ls->pfd);
	free(ls);
	glue_tls_thread_done();
	wcm_thread_done(w);
	return NULL;
}

/*
 * TCP's accept queue is not the rdma_cm backlog: the listener thread
 * empties it at once, and the backlog is enforced on the Requests
 * (hs_request). A short queue only drops the SYNs of a burst of
 * connects, which the peers' TCP then sends again a second later
 * (issue 13: 200 connects at once took 1.25 s). So it is long whatever
 * the backlog; the kernel caps it at net.core.somaxconn, which is 4096
 * since Linux 5.4 and 128 before: say so once when it is shorter than
 * the backlog.
 */
#define WCM_TCP_BACKLOG 4096

static int tcp_backlog(int backlog)
{
	static bool told;
	int n = backlog > WCM_TCP_BACKLOG ? backlog : WCM_TCP_BACKLOG;
	FILE *f;
	int max;

	if (told)
		return n;
	told = true;
	f = fopen("/proc/sys/net/core/somaxconn", "re");
	if (!f)
		return n;
	if (fscanf(f, "%d", &max) == 1 && max < backlog)
		wcm_log(WCM_LOG_WARN, "net.core.somaxconn is %d: a burst of "
			"more connects than that at once loses SYNs (a 1 s "
			"retransmit); raise it to %d or more", max, backlog);
	fclose(f);
	return n;
}

/* A backlog from which a listener counts on many connections at once:
 * their state then comes from the pool's arenas (mem/wisp_mem.h), and
 * the first is made ahead. A listener that asks for a few (rping's 3)
 * does not pay for 2 MiB it will not use. */
#define EXPECT_MANY_BACKLOG 64

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct listener *ls;
	struct wcm_id *w;
	int ret, flags;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state == WCM_IDLE) {
		/* The kernel binds an unbound listener to the IPv4
		 * wildcard. */
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = wcm_bind_locked(w, (struct sockaddr *)&any);
		if (ret)
			goto out;
	}
	if (w->state != WCM_BOUND) {
		ret = -EINVAL;
		goto out;
	}
	/* As rdma-core over the kernel's ucma_listen: a backlog of 0 or
	 * less, or above the maximum, is the maximum; it bounds the
	 * CONNECT_REQUEST events not yet handed to the application. */
	if (backlog <= 0 || backlog > wcm.limits.max_backlog)
		backlog = wcm.limits.max_backlog;
	if (listen(w->fd, tcp_backlog(backlog))) {
		ret = -errno;
		goto out;
	}
	if (w->port_late) {
		/* listen took the port (cm_id.c bind_port) */
		wcm_src_read(w, w->fd);
		w->port_late = false;
	}
	w->backlog = backlog;
	/* Non-blocking: a connection that vanishes between poll() and
	 * accept() must not stall the listener. */
	flags = fcntl(w->fd, F_GETFL);
	fcntl(w->fd, F_SETFL, flags | O_NONBLOCK);
	w->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (w->wake_fd < 0) {
		ret = -errno;
		goto out;
	}
	ls = listener_new(w);
	if (!ls) {
		ret = -ENOMEM;
		goto out;
	}
	wcm_set_state(w, WCM_LISTEN);
	ret = wcm_thread_start(w, listen_thread, ls);
	if (ret) {
		wcm_set_state(w, WCM_BOUND);
		free(ls->pfd);
		free(ls);
	} else if (backlog >= EXPECT_MANY_BACKLOG) {
		wisp_mem_expect_many();
	}
out:
	pthread_mutex_unlock(&wcm.lock);
	return ret ? fail(ret) : 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct wisp_startup_reply reply;
	struct mpa_prefs prefs;
	struct ibv_qp *qp;
	struct wcm_id *w;
	int fd, ret, tmo;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_CONNECT_REQ) {
		ret = -EINVAL;
		goto err_unlock;
	}
	/* The stream goes to the id's QP, or to the one the application
	 * made itself and names by number (rdma_conn_param.qp_num). */
	ret = wcm_resolve_qp(w, param, "rdma_accept");
	if (ret)
		goto err_unlock;
	wcm_opts_prefs(&w->opts, &prefs);
	ret = wcm_depth_of(param ? param->responder_resources : 0xff, w->req_ird,
		       &prefs.ird);
	if (!ret)
		ret = wcm_depth_of(param ? param->initiator_depth : 0xff,
			       w->req_ord, &prefs.ord);
	if (ret)
		goto err_unlock;
	if (param && param->private_data_len) {
		prefs.pdata = param->private_data;
		prefs.pdata_len = param->private_data_len;
	}
	ret = wisp_startup_build_reply(&w->req, &prefs, false, &reply);
	if (ret)
		goto err_unlock;
	fd = w->fd;
	w->fd = -1;
	wcm_set_state(w, WCM_ATTACHING);
	qp = id->qp ? id->qp : w->ext_qp;
	tmo = w->opts.timeout_ms;
	pthread_mutex_unlock(&wcm.lock);

	ret = wisp_startup_send_reply(fd, &reply, wisp_startup_deadline(tmo));
	if (ret) {
		glue_tls_drop(fd);
		close(fd);
		pthread_mutex_lock(&wcm.lock);
		wcm_set_state(w, WCM_FAILED);
		pthread_mutex_unlock(&wcm.lock);
		return fail(ret);
	}
	ret = wcm_establish(w, qp, fd, &reply.params, false);
	if (ret)
		return fail(ret);
	return wcm_complete(w);

err_unlock:
	pthread_mutex_unlock(&wcm.lock);
	return fail(ret);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data,
		uint8_t private_data_len)
{
	struct wisp_startup_reply reply;
	struct mpa_prefs prefs;
	struct wcm_id *w;
	int fd, ret, tmo;

	if (!id || (private_data_len && !private_data))
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_CONNECT_REQ) {
		pthread_mutex_unlock(&wcm.lock);
		return fail(-EINVAL);
	}
	wcm_opts_prefs(&w->opts, &prefs);
	prefs.ird = w->req_ird;
	prefs.ord = w->req_ord;
	prefs.pdata = private_data;
	prefs.pdata_len = private_data_len;
	/* RFC 5044 7.1.2: "return an MPA Reply Frame with the Rejected
	 * Connection bit set to '1'; the MPA Reply Frame MAY include
	 * ULP-supplied Private Data". */
	ret = wisp_startup_build_reply(&w->req, &prefs, true, &reply);
	if (ret) {
		pthread_mutex_unlock(&wcm.lock);
		return fail(ret);
	}
	fd = w->fd;
	w->fd = -1;
	wcm_set_state(w, WCM_FAILED);
	tmo = w->opts.timeout_ms;
	pthread_mutex_unlock(&wcm.lock);

	wisp_stats_cm_event(WISP_STATS_CM_REFUSED);
	ret = wisp_startup_send_reply(fd, &reply, wisp_startup_deadline(tmo));
	if (ret)
		wcm_log(WCM_LOG_INFO, "reject: %s", strerror(-ret));
	/* MPA exits; the TCP connection is of no further use to rdma_cm.
	 * Over TLS the Reply is followed by close_notify, so that the
	 * peer reads an orderly end, not a truncation. */
	{
		struct glue_tls *t = glue_tls_take(fd);

		if (t)
			glue_tls_close_notify(t);
		glue_tls_free(t);
	}
	shutdown(fd, SHUT_WR);
	close(fd);
	return 0;
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
		    uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}
