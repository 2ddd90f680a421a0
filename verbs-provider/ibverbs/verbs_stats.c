// SPDX-License-Identifier: MIT
/*
 * verbs_stats.c - the statistics file of this process (wisp_stats_shm.h)
 * and the summary that WISP_STATS=1 prints at exit.
 *
 * WISP_STATS unset: publish. 1: publish, and print a summary on stderr
 * at exit. 0: publish nothing (the QPs still count, in memory of their
 * own). The file is made on first use (the first QP or rdma_cm event),
 * mapped shared and never unmapped: counters keep a valid home until the
 * process is gone. It is removed at exit by the process that made it.
 */
#include "verbs_stats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "glue_stats.h"
#include "rdmap_qp_stats.h"
#include "wisp_stats_shm.h"
#include "wisp_verbs.h"

static pthread_once_t st_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wisp_stats_file *st_file;   /* shared map, or private */
static char st_path[512];                 /* "" when not published */
static bool st_summary;
static pid_t st_pid;
/* Which context each device entry belongs to (process memory only). */
static const struct ibv_context *st_ctx[WISP_STATS_MAX_DEV];
static uint32_t st_ctx_next;
/* No QP slot below this one is free (st_lock): wisp_stats_qp_open takes
 * the lowest free slot without walking the used ones below it, each a
 * cache line or more apart (with a thousand QPs open, that walk was a
 * visible part of every QP creation; issue 13). Only this process's
 * closes lower it: a forked child sharing the map may free slots below
 * it, which a search that finds nothing above looks for again. */
static uint32_t st_qp_low;

/* The QP slots below this one are populated (st_lock). A slot's memset
 * on a page not yet touched cost a page fault inside each connection
 * setup; populating 64 KiB of slots ahead with one madvise costs a
 * fraction of that (issue 13, as mem/wisp_mem.h does for the rest of
 * a connection's state). */
static uint32_t st_qp_ready;
#define ST_POPULATE_AHEAD (64u << 10)

static uint64_t realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void read_comm(char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/comm", "re");

	out[0] = '\0';
	if (!f)
		return;
	if (fgets(out, (int)cap, f))
		out[strcspn(out, "\n")] = '\0';
	fclose(f);
}

/* A folder only we can enter: made 0700 if missing, refused if it is
 * not a folder of ours closed to others. */
static int own_dir(const char *dir)
{
	struct stat sb;

	if (mkdir(dir, 0700) && errno != EEXIST)
		return -1;
	if (lstat(dir, &sb) || !S_ISDIR(sb.st_mode) ||
	    sb.st_uid != getuid() || (sb.st_mode & 077))
		return -1;
	return 0;
}

static int stats_dir(char *out, size_t cap)
{
	const char *d = getenv("WISP_STATS_DIR");
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (d && *d)
		snprintf(out, cap, "%s", d);
	else if (xdg && *xdg)
		snprintf(out, cap, "%s/wisp", xdg);
	else
		snprintf(out, cap, "/dev/shm/wisp-%u", (unsigned int)getuid());
	return own_dir(out);
}

/* Map the file of this process; NULL (nothing published) on failure. */
static struct wisp_stats_file *map_file(void)
{
	char dir[400];
	void *m;
	int fd;

	if (stats_dir(dir, sizeof(dir)))
		return NULL;
	snprintf(st_path, sizeof(st_path), "%s/%d", dir, (int)st_pid);
	fd = open(st_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		  0600);
	if (fd < 0)
		goto err;
	if (fchmod(fd, 0600) || ftruncate(fd, sizeof(struct wisp_stats_file)))
		goto err_close;
	m = mmap(NULL, sizeof(struct wisp_stats_file), PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto err_close;
	close(fd);
	return m;

err_close:
	close(fd);
	unlink(st_path);
err:
	st_path[0] = '\0';
	return NULL;
}

static void st_init(void)
{
	const char *v = getenv("WISP_STATS");
	struct wisp_stats_hdr *h;
	bool publish = true;

	st_pid = getpid();
	if (v && strcmp(v, "0") && strcmp(v, "1"))
		fprintf(stderr, "wisp: WISP_STATS=\"%s\" is not valid; "
			"accepted values: 0, 1\n", v);
	if (v && !strcmp(v, "0"))
		publish = false;
	st_summary = v && !strcmp(v, "1");
	if (publish)
		st_file = map_file();
	if (!st_file)
		st_file = calloc(1, sizeof(*st_file));
	if (!st_file)
		return;
	h = &st_file->hdr;
	h->version = WISP_STATS_VERSION;
	h->size = sizeof(struct wisp_stats_file);
	h->max_dev = WISP_STATS_MAX_DEV;
	h->max_qp = WISP_STATS_MAX_QP;
	h->dev_off = offsetof(struct wisp_stats_file, dev);
	h->qp_off = offsetof(struct wisp_stats_file, qp);
	h->dev_size = sizeof(struct wisp_stats_dev);
	h->qp_size = sizeof(struct wisp_stats_qp);
	h->pid = (int32_t)st_pid;
	h->start_ticks = wisp_stats_start_ticks("/proc/self/stat");
	h->created_ms = realtime_ms();
	read_comm(h->comm, sizeof(h->comm));
	/* Last: a reader takes the file as valid once the magic is there. */
	atomic_thread_fence(memory_order_release);
	__atomic_store_n(&h->magic, WISP_STATS_MAGIC, __ATOMIC_RELEASE);
}

static struct wisp_stats_file *file(void)
{
	pthread_once(&st_once, st_init);
	return st_file;
}

/* The seqlock around changes of the layout; st_lock held. */
static void write_begin(struct wisp_stats_file *f)
{
	atomic_fetch_add_explicit(&f->hdr.seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void write_end(struct wisp_stats_file *f)
{
	atomic_fetch_add_explicit(&f->hdr.seq, 1, memory_order_release);
}

/* The device entry of ctx, made on first use; st_lock held. -1: none. */
static int dev_index(struct wisp_stats_file *f, const struct ibv_context *ctx)
{
	int free_i = -1;

	for (int i = 0; i < WISP_STATS_MAX_DEV; i++) {
		if (st_ctx[i] == ctx && f->dev[i].in_use)
			return i;
		if (!f->dev[i].in_use && free_i < 0)
			free_i = i;
	}
	if (free_i < 0)
		return -1;
	write_begin(f);
	memset(&f->dev[free_i], 0, sizeof(f->dev[free_i]));
	f->dev[free_i].in_use = 1;
	f->dev[free_i].id = st_ctx_next++;
	snprintf(f->dev[free_i].name, sizeof(f->dev[free_i].name), "%s",
		 WISP_DEV_NAME);
	f->dev[free_i].opened_ms = realtime_ms();
	st_ctx[free_i] = ctx;
	write_end(f);
	return free_i;
}

/* Populate the QP slots from slot i on, ST_POPULATE_AHEAD octets of
 * them, unless slot i already is (st_lock). Best effort: on failure the
 * pages fault in as they are touched. */
static void qp_slots_populate(struct wisp_stats_file *f, uint32_t i)
{
	uintptr_t page, lo, hi, top = (uintptr_t)&f->qp[WISP_STATS_MAX_QP];

	if (i < st_qp_ready)
		return;
	page = (uintptr_t)sysconf(_SC_PAGESIZE);
	lo = (uintptr_t)&f->qp[i] & ~(page - 1);
	hi = lo + ST_POPULATE_AHEAD;
	if (hi > top)
		hi = top;
	(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
	st_qp_ready = (uint32_t)((hi - (uintptr_t)f->qp) / sizeof(f->qp[0]));
}

/* The first free QP slot from index from on, or NULL (st_lock). */
static struct wisp_stats_qp *qp_slot(struct wisp_stats_file *f,
				     uint32_t from)
{
	for (uint32_t i = from; i < WISP_STATS_MAX_QP; i++)
		if (!f->qp[i].in_use)
			return &f->qp[i];
	return NULL;
}

struct wisp_stats_qp *wisp_stats_qp_open(struct ibv_context *ctx)
{
	struct wisp_stats_file *f = file();
	struct wisp_stats_qp *s = NULL;
	int d;

	if (!f)
		return NULL;
	pthread_mutex_lock(&st_lock);
	d = dev_index(f, ctx);
	if (d < 0)
		goto out;
	atomic_fetch_add_explicit(&f->dev[d].qps_created, 1,
				  memory_order_relaxed);
	s = qp_slot(f, st_qp_low);
	if (!s && st_qp_low)
		s = qp_slot(f, 0);
	if (s) {
		uint32_t i = (uint32_t)(s - f->qp);

		qp_slots_populate(f, i);
		st_qp_low = i + 1;
		write_begin(f);
		memset(s, 0, sizeof(*s));
		s->in_use = 1;
		s->dev = (uint32_t)d;
		if (atomic_load(&f->hdr.qp_high) <= i)
			atomic_store(&f->hdr.qp_high, i + 1);
		write_end(f);
	}
out:
	if (!s)
		atomic_fetch_add(&f->hdr.qp_unlisted, 1);
	pthread_mutex_unlock(&st_lock);
	return s;
}

struct rdmap_qp_stats *wisp_stats_qp_core(struct wisp_stats_qp *s)
{
	return s ? &s->c.core : NULL;
}

struct glue_conn_stats *wisp_stats_qp_sock(struct wisp_stats_qp *s)
{
	return s ? &s->c.sock : NULL;
}

/* The address known (sa), else the socket's own, as text. */
static void sock_name(char *out, size_t cap, int fd, bool peer,
		      const struct sockaddr *sa)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "?";
	unsigned int port;

	out[0] = '\0';
	if (sa && sa->sa_family == AF_INET)
		memcpy(&ss, sa, sizeof(struct sockaddr_in));
	else if (sa && sa->sa_family == AF_INET6)
		memcpy(&ss, sa, sizeof(struct sockaddr_in6));
	else if ((peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
		       : getsockname(fd, (struct sockaddr *)&ss, &len)))
		return;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
		port = ntohs(in->sin_port);
		snprintf(out, cap, "%s:%u", a, port);
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
			(const struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
		port = ntohs(in6->sin6_port);
		snprintf(out, cap, "[%s]:%u", a, port);
	}
}

void wisp_stats_qp_attached(struct wisp_stats_qp *s, uint32_t qp_num, int fd,
			    const struct wisp_stream_params *p,
			    uint32_t mulpdu)
{
	struct wisp_stats_file *f = file();

	if (!s || !f)
		return;
	pthread_mutex_lock(&st_lock);
	write_begin(f);
	s->qp_num = qp_num;
	s->mpa_rev = p->mpa_rev;
	s->crc = p->crc;
	s->markers = p->markers;
	s->p2p = p->p2p;
	s->initiator = p->initiator;
	s->rtr = p->rtr;
	s->ird = p->ird;
	s->ord = p->ord;
	s->mulpdu = mulpdu;
	sock_name(s->local, sizeof(s->local), fd, false, p->local);
	sock_name(s->peer, sizeof(s->peer), fd, true, p->peer);
	s->connected_ms = realtime_ms();
	atomic_store(&s->end_reason, 0);
	atomic_store(&s->state, WISP_STATS_QP_CONNECTED);
	write_end(f);
	pthread_mutex_unlock(&st_lock);
	RDMAP_STAT_ADD(s->c.streams, 1);
}

void wisp_stats_qp_ended(struct wisp_stats_qp *s, int reason)
{
	if (!s)
		return;
	atomic_store(&s->end_reason, reason);
	atomic_store(&s->state, WISP_STATS_QP_ENDED);
	/* ECONNABORTED: the QP was destroyed or reset while connected, a
	 * local decision rather than a broken stream. */
	if (reason && reason != ECONNABORTED)
		atomic_fetch_add(&s->c.streams_broken, 1);
	else
		atomic_fetch_add(&s->c.streams_ended, 1);
}

void wisp_stats_qp_close(struct ibv_context *ctx, struct wisp_stats_qp *s,
			 const struct rdmap_qp_stats *core)
{
	struct wisp_stats_file *f = file();
	int d;

	if (!f)
		return;
	pthread_mutex_lock(&st_lock);
	d = s ? (int)s->dev : dev_index(f, ctx);
	write_begin(f);
	if (d >= 0 && s) {
		wisp_stats_add(&f->dev[d].retired, &s->c);
	} else if (d >= 0 && core) {
		struct wisp_stats_counts c;

		memset(&c, 0, sizeof(c));
		memcpy(&c.core, core, sizeof(c.core));
		wisp_stats_add(&f->dev[d].retired, &c);
	}
	if (s) {
		uint32_t i = (uint32_t)(s - f->qp);

		s->in_use = 0;
		if (i < st_qp_low)
			st_qp_low = i;
	}
	write_end(f);
	pthread_mutex_unlock(&st_lock);
}

void wisp_stats_ctx_open(struct ibv_context *ctx)
{
	struct wisp_stats_file *f = file();

	if (!f)
		return;
	pthread_mutex_lock(&st_lock);
	dev_index(f, ctx);
	pthread_mutex_unlock(&st_lock);
}

void wisp_stats_ctx_close(const struct ibv_context *ctx)
{
	struct wisp_stats_file *f = st_file;

	if (!f)
		return;
	pthread_mutex_lock(&st_lock);
	for (int i = 0; i < WISP_STATS_MAX_DEV; i++) {
		if (st_ctx[i] != ctx || !f->dev[i].in_use)
			continue;
		write_begin(f);
		wisp_stats_add(&f->hdr.closed, &f->dev[i].retired);
		f->dev[i].in_use = 0;
		st_ctx[i] = NULL;
		write_end(f);
	}
	pthread_mutex_unlock(&st_lock);
}

void wisp_stats_cm_event(enum wisp_stats_cm_event ev)
{
	struct wisp_stats_file *f = file();
	_Atomic uint64_t *c;

	if (!f)
		return;
	switch (ev) {
	case WISP_STATS_CM_CONNECT_REQUEST:
		c = &f->hdr.cm.connect_requests;
		break;
	case WISP_STATS_CM_ESTABLISHED:
		c = &f->hdr.cm.established;
		break;
	case WISP_STATS_CM_DISCONNECTED:
		c = &f->hdr.cm.disconnected;
		break;
	case WISP_STATS_CM_REJECTED:
		c = &f->hdr.cm.rejected;
		break;
	case WISP_STATS_CM_REFUSED:
		c = &f->hdr.cm.refused;
		break;
	case WISP_STATS_CM_UNREACHABLE:
		c = &f->hdr.cm.unreachable;
		break;
	case WISP_STATS_CM_CONNECT_ERROR:
		c = &f->hdr.cm.connect_errors;
		break;
	default:
		return;
	}
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* WISP_STATS=1: the summary at exit                                  */
/* ------------------------------------------------------------------ */

static void print_counts(const struct wisp_stats_counts *c)
{
	for (unsigned int op = 0; op < RDMAP_STATS_OPS; op++) {
		uint64_t tm = atomic_load(&c->core.tx_msgs[op]);
		uint64_t rm = atomic_load(&c->core.rx_msgs[op]);

		if (!wisp_stats_ops[op] || (!tm && !rm))
			continue;
		fprintf(stderr, "wisp:   %-12s tx %" PRIu64 " msgs %" PRIu64
			" octets, rx %" PRIu64 " msgs %" PRIu64 " octets\n",
			wisp_stats_ops[op], tm,
			(uint64_t)atomic_load(&c->core.tx_octets[op]), rm,
			(uint64_t)atomic_load(&c->core.rx_octets[op]));
	}
	for (size_t i = 0; i < sizeof(wisp_stats_fields) /
			       sizeof(wisp_stats_fields[0]); i++) {
		uint64_t v = wisp_stats_get(c, wisp_stats_fields[i].off);

		if (!v)
			continue;
		if (strstr(wisp_stats_fields[i].name, "terminate_"))
			fprintf(stderr, "wisp:   %s 0x%04" PRIx64 "\n",
				wisp_stats_fields[i].name, v);
		else
			fprintf(stderr, "wisp:   %s %" PRIu64 "\n",
				wisp_stats_fields[i].name, v);
	}
}

static void print_summary(struct wisp_stats_file *f)
{
	struct wisp_stats_counts all;

	memset(&all, 0, sizeof(all));
	wisp_stats_add(&all, &f->hdr.closed);
	for (int d = 0; d < WISP_STATS_MAX_DEV; d++)
		if (f->dev[d].in_use)
			wisp_stats_add(&all, &f->dev[d].retired);
	for (uint32_t i = 0; i < WISP_STATS_MAX_QP; i++)
		if (f->qp[i].in_use)
			wisp_stats_add(&all, &f->qp[i].c);
	fprintf(stderr, "wisp: statistics of %s (pid %d), all devices:\n",
		f->hdr.comm, (int)f->hdr.pid);
	print_counts(&all);
	for (size_t i = 0; i < sizeof(wisp_stats_cm_fields) /
			       sizeof(wisp_stats_cm_fields[0]); i++) {
		uint64_t v = atomic_load((const _Atomic uint64_t *)(
			(const char *)&f->hdr.cm + wisp_stats_cm_fields[i].off));

		if (v)
			fprintf(stderr, "wisp:   cm_%s %" PRIu64 "\n",
				wisp_stats_cm_fields[i].name, v);
	}
}

__attribute__((destructor)) static void st_exit(void)
{
	struct wisp_stats_file *f = st_file;

	/* A forked child shares the map: only its maker reports and
	 * removes it. */
	if (!f || getpid() != st_pid)
		return;
	if (st_summary)
		print_summary(f);
	if (st_path[0])
		unlink(st_path);
}
