/* SPDX-License-Identifier: MIT */
/*
 * cm_id.c - the rdma_cm_id life cycle up to the connection: create, bind,
 * resolve (addresses are IP addresses and the route is TCP's, so
 * resolution is immediate), options, destroy; the CM threads that work
 * for an id. rdma_listen is the passive side's (cm_passive.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_internal.h"
#include "wisp_rdmacm.h"
#include "common/wisp_startup.h"
#include "wisp_mem.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

socklen_t wcm_addrlen(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

const char *wcm_state_str(enum wcm_state s)
{
	static const char *const names[] = {
		[WCM_IDLE] = "IDLE",
		[WCM_BOUND] = "BOUND",
		[WCM_ADDR_RESOLVED] = "ADDR_RESOLVED",
		[WCM_ROUTE_RESOLVED] = "ROUTE_RESOLVED",
		[WCM_LISTEN] = "LISTEN",
		[WCM_CONNECTING] = "CONNECTING",
		[WCM_CONNECT_REQ] = "CONNECT_REQ",
		[WCM_ATTACHING] = "ATTACHING",
		[WCM_CONNECTED] = "CONNECTED",
		[WCM_DISCONNECTED] = "DISCONNECTED",
		[WCM_FAILED] = "FAILED",
	};
	_Static_assert(sizeof(names) / sizeof(names[0]) == WCM_STATE__COUNT,
		       "one name per enum wcm_state");

	if ((unsigned int)s >= WCM_STATE__COUNT)
		return "?";
	return names[s];
}

void wcm_set_state(struct wcm_id *w, enum wcm_state s)
{
	if (w->state == s)
		return;
	wcm_log(WCM_LOG_DEBUG, "id %p: %s -> %s", (void *)&w->id,
		wcm_state_str(w->state), wcm_state_str(s));
	/* rdma_destroy_qp waits for the end of ATTACHING. */
	if (w->state == WCM_ATTACHING)
		pthread_cond_broadcast(&wcm.cond);
	w->state = s;
}

void wcm_id_set_device(struct wcm_id *w)
{
	w->id.verbs = wcm.verbs;
	w->id.port_num = 1;
	if (!w->id.pd)
		w->id.pd = wcm.pd;
}

struct wcm_id *wcm_id_new(struct wcm_channel *ch, void *context,
			  enum rdma_port_space ps)
{
	struct wcm_id *w = wisp_mem_zalloc(sizeof(*w));

	if (!w)
		return NULL;
	if (!ch) {
		ch = wcm_channel_new();
		if (!ch) {
			wisp_mem_free(w, sizeof(*w));
			return NULL;
		}
		w->sync = true;
	}
	w->id.channel = &ch->ch;
	w->id.context = context;
	w->id.ps = ps;
	w->id.qp_type = IBV_QPT_RC;
	w->fd = -1;
	w->wake_fd = -1;
	pthread_mutex_lock(&wcm.lock);
	w->opts = wcm.opts;
	pthread_mutex_unlock(&wcm.lock);
	return w;
}

void wcm_id_free(struct wcm_id *w)
{
	if (w->fd >= 0) {
		glue_tls_drop(w->fd);
		close(w->fd);
	}
	if (w->wake_fd >= 0)
		close(w->wake_fd);
	if (w->sync)
		wcm_channel_free(to_wch(w->id.channel));
	free(w->ep_connect);
	free(w->ep_qp_attr);
	wisp_mem_free(w, sizeof(*w));
}

int rdma_create_id(struct rdma_event_channel *channel,
		   struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	struct wcm_id *w;
	int ret;

	if (!id)
		return fail(-EINVAL);
	/* iWARP connects over TCP only; UDP and IB port spaces are real
	 * rdma_cm features wisp does not have. */
	if (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB || ps == RDMA_PS_IB) {
		wcm_log(WCM_LOG_WARN, "rdma_create_id: port space 0x%x not "
			"supported, only RDMA_PS_TCP", (unsigned int)ps);
		return fail(-ENOSYS);
	}
	if (ps != RDMA_PS_TCP)
		return fail(-EINVAL);
	ret = wcm_init();
	if (ret)
		return fail(ret);
	w = wcm_id_new(channel ? to_wch(channel) : NULL, context, ps);
	if (!w)
		return -1;
	*id = &w->id;
	return 0;
}

int wcm_thread_start(struct wcm_id *w, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	w->workers++;
	ret = pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (ret) {
		w->workers--;
		return -ret;
	}
	return 0;
}

void wcm_thread_done(struct wcm_id *w)
{
	pthread_mutex_lock(&wcm.lock);
	w->workers--;
	pthread_cond_broadcast(&wcm.cond);
	pthread_mutex_unlock(&wcm.lock);
}

void wcm_conn_put(struct wcm_conn *c)
{
	if (--c->refs == 0)
		free(c);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct wcm_id *w, *orphans = NULL;
	struct rdma_cm_event *ev;

	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);

	pthread_mutex_lock(&wcm.lock);
	w->dying = true;
	wcm_events_purge(w, &orphans);
	/* Wake the CM threads of the id: they see dying and let go. */
	if (w->fd >= 0)
		shutdown(w->fd, SHUT_RDWR);
	if (w->wake_fd >= 0) {
		uint64_t one = 1;

		if (write(w->wake_fd, &one, sizeof(one)) < 0)
			wcm_log(WCM_LOG_ERROR, "wake listener: %s",
				strerror(errno));
	}
	while (w->workers)
		pthread_cond_wait(&wcm.cond, &wcm.lock);
	ev = id->event;
	id->event = NULL;
	pthread_mutex_unlock(&wcm.lock);

	if (ev)
		rdma_ack_cm_event(ev);

	pthread_mutex_lock(&wcm.lock);
	/* rdma-core: "rdma_destroy_id waits for all events of the id to be
	 * acknowledged". */
	while (w->events_out)
		pthread_cond_wait(&wcm.cond, &wcm.lock);
	if (w->conn) {
		w->conn->id = NULL;
		wcm_conn_put(w->conn);
		w->conn = NULL;
	}
	pthread_mutex_unlock(&wcm.lock);
	wcm_id_free(w);

	while (orphans) {
		struct wcm_id *c = orphans;

		orphans = c->orphan_next;
		wcm_id_free(c);
	}
	return 0;
}

/*
 * The descriptor table, grown ahead (issue 13). Linux doubles a process's
 * table when a descriptor beyond it is wanted (64, 128, ... 4096), and
 * in a process with more than one thread each growth waits for an RCU
 * grace period (expand_fdtable: synchronize_rcu), milliseconds to tens
 * of them on a busy host; meanwhile any other thread that wants a
 * descriptor beyond the old table waits as well. A burst of 1,000
 * accepted connections (a socket and an application's two completion
 * channels each) grew the listener's table six times mid-burst: in one
 * profile the listener and the application thread spent 46 ms of an
 * 86 ms burst blocked in accept4() and eventfd(), both CPUs idle 15 ms
 * of it. So the table is grown in one step to WCM_FD_ROOM descriptors
 * when a burst may begin, before the listener's and dialer's threads
 * exist when the process has none of its own, and from then on to four
 * times the highest descriptor seen once that passes half of what was
 * made: a growth then happens rarely and while others still have room,
 * so nobody waits on it. F_DUPFD takes the lowest free descriptor at or
 * above its argument, so nothing the application holds is touched; the
 * duplicate is closed at once. Bounded by RLIMIT_NOFILE. A table of
 * 8,192 costs the kernel 64 KiB.
 */
#define WCM_FD_ROOM 8192

void wcm_fd_room(int fd)
{
	static _Atomic int made;       /* the table holds [0, made) */
	static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;
	struct rlimit rl;
	int want;

	if (fd < 0 || (long)fd * 2 < atomic_load(&made))
		return;
	pthread_mutex_lock(&grow_lock);
	want = fd >= WCM_FD_ROOM / 4 ? fd * 4 : WCM_FD_ROOM;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    (rlim_t)want > rl.rlim_cur)
		want = (int)rl.rlim_cur;
	if (want > atomic_load(&made)) {
		int dup = fcntl(fd, F_DUPFD_CLOEXEC, want - 1);

		if (dup >= 0)
			close(dup);
		/* Failed (EMFILE: the top is taken, or the limit shrank):
		 * the kernel grows the table on demand as before. */
		atomic_store(&made, want);
	}
	pthread_mutex_unlock(&grow_lock);
}

void wcm_no_delay(int fd)
{
	int ret = wisp_startup_nodelay(fd);

	if (ret)
		wcm_log(WCM_LOG_WARN, "TCP_NODELAY: %s", strerror(-ret));
}

void wcm_sock_opts(const struct wcm_id *w, int fd, int family)
{
	int one = 1;

	/* A server restarted on its port must not wait out TIME_WAIT (siw
	 * sets SO_REUSEADDR on every socket it binds, too). */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		wcm_log(WCM_LOG_WARN, "SO_REUSEADDR: %s", strerror(errno));
	/* FPDUs are whole messages (glue_conn_add would set it at the
	 * hand-off). Set here once: a connection keeps it, and a
	 * listener's accepted sockets inherit it, so the engine adopts
	 * them without a setsockopt each (issue 13). The MPA Request and
	 * Reply are each the first data of their side, which Nagle never
	 * holds back either way. */
	wcm_no_delay(fd);
	if (family == AF_INET6 && w->opts.afonly >= 0) {
		int v = w->opts.afonly;

		if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, sizeof(v)))
			wcm_log(WCM_LOG_WARN, "IPV6_V6ONLY: %s",
				strerror(errno));
	}
	if (w->opts.tos_set) {
		int tos = w->opts.tos;

		if (family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos,
				   sizeof(tos));
		else
			setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
	}
}

static bool is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		       htonl(INADDR_ANY);
	return !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
		       &in6addr_any, sizeof(in6addr_any));
}

static __be16 port_of(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

/*
 * Port 0: the kernel's choice at bind(2) (inet_csk_find_open_port) takes
 * only a port that no socket holds at all, one in TIME_WAIT included,
 * SO_REUSEADDR or not, while connect(2) on a socket without a port
 * shares a port with sockets of other address pairs and takes over
 * TIME_WAIT as net.ipv4.tcp_tw_reuse lets it. A burst of connections
 * closed leaves the whole range in TIME_WAIT for a minute: bind then
 * fails with EADDRINUSE where connect would not (rdma_resolve_addr did,
 * after a few runs of bench/wisp_connrate). So the port is taken at bind
 * while one is free, which keeps rdma_get_src_port right from
 * ADDR_RESOLVED on, as with the kernel's rdma_cm; with none free, the
 * address alone is bound (IP_BIND_ADDRESS_NO_PORT) and the port is the
 * connect's (cm_active.c) or the listen's (cm_passive.c), whose own
 * error then tells that the range is really exhausted. A failed search
 * costs a pass over the whole range (about 1 ms per 10,000 ports, under
 * wcm.lock): for WCM_PORTS_FULL_MS after one, binds skip it.
 */
#define WCM_PORTS_FULL_MS 1000
static _Atomic int64_t ports_full_until = -1;

static int bind_port(struct wcm_id *w, int fd, const struct sockaddr *addr,
		     socklen_t len)
{
	int64_t now;
	int one = 1;

	w->port_late = false;
	if (port_of(addr))
		return bind(fd, addr, len) ? -errno : 0;
	now = glue_mpa_now_ms();
	if (now >= atomic_load(&ports_full_until)) {
		if (!bind(fd, addr, len))
			return 0;
		if (errno != EADDRINUSE)
			return -errno;
		atomic_store(&ports_full_until, now + WCM_PORTS_FULL_MS);
		wcm_log(WCM_LOG_INFO, "no local port is free to bind (every "
			"one held, TIME_WAIT included): ids take theirs at "
			"rdma_connect or rdma_listen");
	}
	/* The failed bind left the socket unbound. */
	if (setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
		       sizeof(one)))
		return -errno;
	if (bind(fd, addr, len))
		return -errno;
	w->port_late = true;
	return 0;
}

void wcm_src_read(struct wcm_id *w, int fd)
{
	socklen_t len = sizeof(w->id.route.addr.src_storage);

	getsockname(fd, &w->id.route.addr.src_addr, &len);
}

/* Bind a new socket of w to addr (wcm.lock held). */
int wcm_bind_locked(struct wcm_id *w, const struct sockaddr *addr)
{
	socklen_t len = wcm_addrlen(addr);
	int fd, ret;

	if (!len)
		return -EAFNOSUPPORT;
	if (w->state != WCM_IDLE || w->fd >= 0)
		return -EINVAL;
	/* Non-blocking from the start: a listener's accept and a
	 * connection's MPA steps never wait in a system call
	 * (cm_passive.c, cm_active.c), and the engine takes the socket so. */
	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    IPPROTO_TCP);
	if (fd < 0)
		return -errno;
	wcm_fd_room(fd);
	wcm_sock_opts(w, fd, addr->sa_family);
	ret = bind_port(w, fd, addr, len);
	if (ret) {
		close(fd);
		return ret;
	}
	wcm_src_read(w, fd);
	w->fd = fd;
	wcm_set_state(w, WCM_BOUND);
	/* As the kernel's rdma_cm: a specific address binds the id to the
	 * device that owns it (wisp0 owns them all), the wildcard does
	 * not. */
	if (!is_wildcard(addr))
		wcm_id_set_device(w);
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int ret;

	if (!id || !addr)
		return fail(-EINVAL);
	if (!wcm_addrlen(addr))
		return fail(-EINVAL);
	pthread_mutex_lock(&wcm.lock);
	ret = wcm_bind_locked(to_wid(id), addr);
	pthread_mutex_unlock(&wcm.lock);
	return ret ? fail(ret) : 0;
}

/* The source address the kernel would use towards dst, by asking it
 * through a connected UDP socket (nothing is sent). */
static int route_source(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	socklen_t len = wcm_addrlen(dst);
	int fd, ret = 0;

	fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, dst, len)) {
		ret = -errno;
	} else {
		len = sizeof(*src);
		if (getsockname(fd, (struct sockaddr *)src, &len))
			ret = -errno;
	}
	close(fd);
	return ret;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
		      struct sockaddr *dst_addr, int timeout_ms)
{
	struct sockaddr_storage src;
	struct wcm_id *w;
	socklen_t dlen;
	int ret, status;

	(void)timeout_ms; /* resolution needs no network round trip */
	if (!id || !dst_addr)
		return fail(-EINVAL);
	dlen = wcm_addrlen(dst_addr);
	if (!dlen || (src_addr && !wcm_addrlen(src_addr)))
		return fail(-EINVAL);
	w = to_wid(id);

	/* Where TCP would leave from: an unreachable destination is an
	 * ADDR_ERROR event, as with the kernel's resolver. */
	status = route_source(dst_addr, &src);

	pthread_mutex_lock(&wcm.lock);
	if (w->state == WCM_IDLE) {
		/* Bind now, to src_addr or the wildcard, so that the source
		 * port is known from ADDR_RESOLVED on (the kernel binds at
		 * this point too), unless no port is free (bind_port). */
		struct sockaddr_storage any = { .ss_family = dst_addr->sa_family };

		ret = wcm_bind_locked(w, src_addr ? src_addr : (struct sockaddr *)&any);
		if (ret)
			goto out;
	}
	if (w->state != WCM_IDLE && w->state != WCM_BOUND &&
	    w->state != WCM_ADDR_RESOLVED) {
		ret = -EINVAL;
		goto out;
	}
	if (w->fd >= 0 && id->route.addr.src_addr.sa_family !=
			  dst_addr->sa_family) {
		ret = -EINVAL;
		goto out;
	}
	memset(&id->route.addr.dst_storage, 0,
	       sizeof(id->route.addr.dst_storage));
	memcpy(&id->route.addr.dst_storage, dst_addr, dlen);
	if (!status) {
		/* Keep a bound port; take the address the route gives. */
		in_port_t port = 0;

		if (w->fd >= 0)
			port = rdma_get_src_port(id);
		memcpy(&id->route.addr.src_storage, &src, sizeof(src));
		if (src.ss_family == AF_INET)
			id->route.addr.src_sin.sin_port = port;
		else
			id->route.addr.src_sin6.sin6_port = port;
		wcm_id_set_device(w);
		wcm_set_state(w, WCM_ADDR_RESOLVED);
		wcm_event_queue(w, w, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	} else {
		wcm_event_queue(w, w, RDMA_CM_EVENT_ADDR_ERROR, status, NULL, 0);
	}
	ret = 0;
out:
	pthread_mutex_unlock(&wcm.lock);
	if (ret)
		return fail(ret);
	return wcm_complete(w);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct wcm_id *w;

	(void)timeout_ms; /* TCP's route is the kernel's: nothing to ask */
	if (!id)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (w->state != WCM_ADDR_RESOLVED) {
		pthread_mutex_unlock(&wcm.lock);
		return fail(-EINVAL);
	}
	wcm_set_state(w, WCM_ROUTE_RESOLVED);
	wcm_event_queue(w, w, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	pthread_mutex_unlock(&wcm.lock);
	return wcm_complete(w);
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? port_of(&id->route.addr.src_addr) : 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? port_of(&id->route.addr.dst_addr) : 0;
}

/* The prototype is rdma_cma.h's. */
/* cppcheck-suppress constParameter */
int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	/* The kernel does nothing here for iWARP: the connection is
	 * established when the MPA exchange is. */
	(void)event;
	return id ? 0 : fail(-EINVAL);
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname,
		    void *optval, size_t optlen)
{
	struct wcm_id *w;
	int ret = 0;

	if (!id || !optval)
		return fail(-EINVAL);
	w = to_wid(id);
	pthread_mutex_lock(&wcm.lock);
	if (level == WISP_OPTION_LEVEL) {
		ret = wcm_opts_set(&w->opts, optname, optval, optlen);
	} else if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t)) {
				ret = -EINVAL;
				break;
			}
			w->opts.tos = *(uint8_t *)optval;
			w->opts.tos_set = true;
			break;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				ret = -EINVAL;
			else
				w->opts.reuseaddr = *(int *)optval != 0;
			break;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				ret = -EINVAL;
			else
				w->opts.afonly = *(int *)optval != 0;
			break;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			/* An InfiniBand transport timer: nothing to set on
			 * TCP. Accepted so that portable programs run. */
			if (optlen != sizeof(uint8_t))
				ret = -EINVAL;
			break;
		default:
			ret = -ENOSYS;
		}
		if (!ret && w->fd >= 0)
			wcm_sock_opts(w, w->fd,
				      id->route.addr.src_addr.sa_family);
	} else {
		/* RDMA_OPTION_IB (path records) has no meaning on TCP. */
		ret = -ENOSYS;
	}
	pthread_mutex_unlock(&wcm.lock);
	return ret ? fail(ret) : 0;
}
