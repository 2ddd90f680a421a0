// SPDX-License-Identifier: MIT
/*
 * wisp-stat - show the statistics that running wisp processes publish
 * (verbs-provider/wisp_stats_shm.h): live, refreshing like top, or once
 * as JSON.
 *
 *   wisp-stat [-n N] [-d SECONDS] [-p PID] [--dir DIR]
 *   wisp-stat --json [-p PID] [--dir DIR]
 *
 * Only the files of the calling user are read (the folders are 0700).
 * The file of a process that is gone (killed before it could remove it,
 * or whose pid now belongs to another program) is removed.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "wisp_stats_shm.h"

#define MAX_PROCS 256
#define OP_READ_REQ 0x1    /* RFC 5040 4.2: its octets are asked, not sent */

/* One process, as read: a consistent copy of its file. */
struct proc {
	char path[400 + 256 + 2];
	struct wisp_stats_hdr hdr;
	struct wisp_stats_dev dev[WISP_STATS_MAX_DEV];
	struct wisp_stats_qp *qp;         /* hdr.qp_high entries */
	struct wisp_stats_counts total;   /* closed + devices + live QPs */
};

static const char *opt_dir;
static long opt_pid = -1;

/* ------------------------------------------------------------------ */
/* Reading                                                            */
/* ------------------------------------------------------------------ */

/* The start time of process pid (wisp_stats_start_ticks). */
static uint64_t start_ticks(long pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	return wisp_stats_start_ticks(path);
}

/* Is the process that wrote h still the one running under its pid? */
static bool alive(const struct wisp_stats_hdr *h)
{
	uint64_t t;

	if (kill(h->pid, 0) && errno == ESRCH)
		return false;
	t = start_ticks(h->pid);
	return !t || !h->start_ticks || t == h->start_ticks;
}

/* Copy the file at m into p under its seqlock. 0, or -1 if it kept
 * changing. */
static int snapshot(const struct wisp_stats_file *m, struct proc *p)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint32_t s1 = atomic_load_explicit(&m->hdr.seq,
						   memory_order_acquire);
		uint32_t high;

		if (s1 & 1) {
			usleep(100);
			continue;
		}
		memcpy(&p->hdr, &m->hdr, sizeof(p->hdr));
		memcpy(p->dev, m->dev, sizeof(p->dev));
		high = p->hdr.qp_high > WISP_STATS_MAX_QP ? WISP_STATS_MAX_QP
							   : p->hdr.qp_high;
		p->hdr.qp_high = high;
		memcpy(p->qp, m->qp, high * sizeof(*p->qp));
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&m->hdr.seq, memory_order_relaxed) ==
		    s1)
			return 0;
	}
	return -1;
}

static void sum(struct proc *p)
{
	memset(&p->total, 0, sizeof(p->total));
	wisp_stats_add(&p->total, &p->hdr.closed);
	for (int d = 0; d < WISP_STATS_MAX_DEV; d++)
		if (p->dev[d].in_use)
			wisp_stats_add(&p->total, &p->dev[d].retired);
	for (uint32_t i = 0; i < p->hdr.qp_high; i++)
		if (p->qp[i].in_use)
			wisp_stats_add(&p->total, &p->qp[i].c);
}

/* Read one file; 0 if p now holds a live process. */
static int read_proc(const char *path, struct proc *p)
{
	const struct wisp_stats_file *m;
	struct stat sb;
	int fd, ret = -1;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &sb) || sb.st_uid != getuid() ||
	    (size_t)sb.st_size < sizeof(struct wisp_stats_file)) {
		close(fd);
		return -1;
	}
	m = mmap(NULL, sizeof(*m), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	if (__atomic_load_n(&m->hdr.magic, __ATOMIC_ACQUIRE) !=
	    WISP_STATS_MAGIC || m->hdr.version != WISP_STATS_VERSION ||
	    m->hdr.size != sizeof(struct wisp_stats_file))
		goto out;
	if (!alive(&m->hdr)) {
		/* Its process is gone without removing it. */
		unlink(path);
		goto out;
	}
	if (opt_pid >= 0 && m->hdr.pid != opt_pid)
		goto out;
	p->qp = calloc(WISP_STATS_MAX_QP, sizeof(*p->qp));
	if (!p->qp)
		goto out;
	if (snprintf(p->path, sizeof(p->path), "%s", path) >=
	    (int)sizeof(p->path))
		p->path[0] = '\0';
	ret = snapshot(m, p);
	if (ret) {
		free(p->qp);
		p->qp = NULL;
	} else {
		sum(p);
	}
out:
	munmap((void *)m, sizeof(*m));
	return ret;
}

static int dirs(char out[2][400])
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	const char *env = getenv("WISP_STATS_DIR");
	int n = 0;

	if (opt_dir || (env && *env)) {
		snprintf(out[0], sizeof(out[0]), "%s", opt_dir ? opt_dir : env);
		return 1;
	}
	if (xdg && *xdg)
		snprintf(out[n++], sizeof(out[0]), "%s/wisp", xdg);
	snprintf(out[n++], sizeof(out[0]), "/dev/shm/wisp-%u",
		 (unsigned int)getuid());
	return n;
}

static int cmp_proc(const void *a, const void *b)
{
	return ((const struct proc *)a)->hdr.pid -
	       ((const struct proc *)b)->hdr.pid;
}

/* Every live wisp process of this user; returns how many. */
static int scan(struct proc *procs, int cap)
{
	char d[2][400];
	int nd = dirs(d), n = 0;

	for (int i = 0; i < nd; i++) {
		DIR *dir = opendir(d[i]);
		struct dirent *de;

		if (!dir)
			continue;
		while ((de = readdir(dir)) && n < cap) {
			char path[sizeof(d[0]) + 256 + 2];
			bool digits = de->d_name[0] != '\0';

			for (const char *c = de->d_name; *c; c++)
				digits &= isdigit((unsigned char)*c) != 0;
			if (!digits)
				continue;
			if (snprintf(path, sizeof(path), "%s/%s", d[i],
				     de->d_name) >= (int)sizeof(path))
				continue;
			if (!read_proc(path, &procs[n]))
				n++;
		}
		closedir(dir);
	}
	qsort(procs, (size_t)n, sizeof(*procs), cmp_proc);
	return n;
}

static void free_procs(struct proc *procs, int n)
{
	for (int i = 0; i < n; i++)
		free(procs[i].qp);
}

static uint64_t get(const struct wisp_stats_counts *c, size_t off)
{
	return wisp_stats_get(c, off);
}

#define CNT(c, m) get((c), offsetof(struct wisp_stats_counts, m))

static const char *state_name(uint32_t s)
{
	switch (s) {
	case WISP_STATS_QP_IDLE:
		return "idle";
	case WISP_STATS_QP_CONNECTED:
		return "connected";
	case WISP_STATS_QP_ENDED:
		return "ended";
	default:
		return "?";
	}
}

static const char *rtr_name(const struct wisp_stats_qp *q)
{
	/* mpa.h's enum mpa_rtr, one bit each (RFC 6581 9.2) */
	if (!q->p2p)
		return "none";
	switch (q->rtr) {
	case 1:
		return "send";
	case 2:
		return "write";
	case 4:
		return "read";
	default:
		return "?";
	}
}

/* ------------------------------------------------------------------ */
/* JSON                                                               */
/* ------------------------------------------------------------------ */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void json_counts(const struct wisp_stats_counts *c)
{
	bool first = true;

	printf("{\"ops\": {");
	for (unsigned int op = 0; op < RDMAP_STATS_OPS; op++) {
		if (!wisp_stats_ops[op])
			continue;
		printf("%s\"%s\": {\"tx_msgs\": %" PRIu64
		       ", \"tx_octets\": %" PRIu64 ", \"rx_msgs\": %" PRIu64
		       ", \"rx_octets\": %" PRIu64 "}",
		       first ? "" : ", ", wisp_stats_ops[op],
		       (uint64_t)atomic_load(&c->core.tx_msgs[op]),
		       (uint64_t)atomic_load(&c->core.tx_octets[op]),
		       (uint64_t)atomic_load(&c->core.rx_msgs[op]),
		       (uint64_t)atomic_load(&c->core.rx_octets[op]));
		first = false;
	}
	printf("}");
	for (size_t i = 0; i < sizeof(wisp_stats_fields) /
			       sizeof(wisp_stats_fields[0]); i++)
		printf(", \"%s\": %" PRIu64, wisp_stats_fields[i].name,
		       get(c, wisp_stats_fields[i].off));
	for (int dir = 0; dir < 2; dir++) {
		const _Atomic uint64_t *k = dir ? c->core.term_rx_kind
						: c->core.term_tx_kind;

		printf(", \"terminates_%s_by_kind\": {", dir ? "rx" : "tx");
		first = true;
		for (int i = 0; i < RDMAP_STATS_TERM_KINDS; i++) {
			uint64_t v = atomic_load(&k[i]);

			if (!v)
				continue;
			printf("%s\"%s\": %" PRIu64, first ? "" : ", ",
			       wisp_stats_term_kinds[i], v);
			first = false;
		}
		printf("}");
	}
	printf("}");
}

static void json_proc(const struct proc *p)
{
	bool first = true;

	printf("{\"pid\": %d, \"program\": ", (int)p->hdr.pid);
	json_str(p->hdr.comm);
	printf(", \"file\": ");
	json_str(p->path);
	printf(", \"started_ms\": %" PRIu64 ", \"cm\": {", p->hdr.created_ms);
	for (size_t i = 0; i < sizeof(wisp_stats_cm_fields) /
			       sizeof(wisp_stats_cm_fields[0]); i++)
		printf("%s\"%s\": %" PRIu64, i ? ", " : "",
		       wisp_stats_cm_fields[i].name,
		       (uint64_t)atomic_load((const _Atomic uint64_t *)(
			       (const char *)&p->hdr.cm +
			       wisp_stats_cm_fields[i].off)));
	printf("}, \"qps_unlisted\": %" PRIu64 ", \"totals\": ",
	       (uint64_t)atomic_load(&p->hdr.qp_unlisted));
	json_counts(&p->total);
	printf(", \"devices\": [");
	for (int d = 0; d < WISP_STATS_MAX_DEV; d++) {
		const struct wisp_stats_dev *dv = &p->dev[d];
		struct wisp_stats_counts t;

		if (!dv->in_use)
			continue;
		memset(&t, 0, sizeof(t));
		wisp_stats_add(&t, &dv->retired);
		for (uint32_t i = 0; i < p->hdr.qp_high; i++)
			if (p->qp[i].in_use && p->qp[i].dev == (uint32_t)d)
				wisp_stats_add(&t, &p->qp[i].c);
		printf("%s{\"name\": ", first ? "" : ", ");
		json_str(dv->name);
		printf(", \"context\": %u, \"opened_ms\": %" PRIu64
		       ", \"qps_created\": %" PRIu64 ", \"totals\": ",
		       dv->id, dv->opened_ms,
		       (uint64_t)atomic_load(&dv->qps_created));
		json_counts(&t);
		printf("}");
		first = false;
	}
	printf("], \"qps\": [");
	first = true;
	for (uint32_t i = 0; i < p->hdr.qp_high; i++) {
		const struct wisp_stats_qp *q = &p->qp[i];

		if (!q->in_use)
			continue;
		printf("%s{\"qp_num\": %u, \"context\": %u, \"state\": \"%s\""
		       ", \"end_reason\": %d, \"local\": ",
		       first ? "" : ", ", q->qp_num,
		       q->dev < WISP_STATS_MAX_DEV ? p->dev[q->dev].id : 0,
		       state_name(atomic_load(&q->state)),
		       (int)atomic_load(&q->end_reason));
		json_str(q->local);
		printf(", \"peer\": ");
		json_str(q->peer);
		printf(", \"connected_ms\": %" PRIu64 ", \"mpa\": {\"rev\": %u"
		       ", \"crc\": %s, \"markers\": %s, \"p2p\": %s"
		       ", \"initiator\": %s, \"rtr\": \"%s\", \"ird\": %u"
		       ", \"ord\": %u, \"mulpdu\": %u}, \"counters\": ",
		       q->connected_ms, q->mpa_rev, q->crc ? "true" : "false",
		       q->markers ? "true" : "false",
		       q->p2p ? "true" : "false",
		       q->initiator ? "true" : "false", rtr_name(q), q->ird,
		       q->ord, q->mulpdu);
		json_counts(&q->c);
		printf("}");
		first = false;
	}
	printf("]}");
}

static int run_json(void)
{
	static struct proc procs[MAX_PROCS];
	int n = scan(procs, MAX_PROCS);

	printf("{\"version\": %d, \"processes\": [", WISP_STATS_VERSION);
	for (int i = 0; i < n; i++) {
		if (i)
			printf(", ");
		json_proc(&procs[i]);
	}
	printf("]}\n");
	free_procs(procs, n);
	return fflush(stdout) ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* Live view                                                          */
/* ------------------------------------------------------------------ */

static uint64_t ops_sum(const _Atomic uint64_t *a)
{
	uint64_t s = 0;

	for (int i = 0; i < RDMAP_STATS_OPS; i++)
		s += atomic_load(&a[i]);
	return s;
}

/* 1234567 -> "1.2M" */
static const char *human(uint64_t v, char *buf, size_t cap)
{
	static const char units[] = " kMGTPE";
	double d = (double)v;
	int u = 0;

	while (d >= 1000.0 && u < 6) {
		d /= 1000.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64, v);
	else
		snprintf(buf, cap, "%.1f%c", d, units[u]);
	return buf;
}

/* What the previous refresh saw, for rates. */
struct prev {
	int pid;
	uint64_t txo, rxo;
};

static void show_counts_line(const struct wisp_stats_counts *c)
{
	char a[16], b[16], d[16], e[16];

	printf("  msgs tx %s rx %s  octets tx %s rx %s",
	       human(ops_sum(c->core.tx_msgs), a, sizeof(a)),
	       human(ops_sum(c->core.rx_msgs), b, sizeof(b)),
	       human(ops_sum(c->core.tx_octets) -
		     atomic_load(&c->core.tx_octets[OP_READ_REQ]),
		     d, sizeof(d)),
	       human(ops_sum(c->core.rx_octets) -
		     atomic_load(&c->core.rx_octets[OP_READ_REQ]),
		     e, sizeof(e)));
	printf("  crc %" PRIu64 " term tx %" PRIu64 " rx %" PRIu64
	       " flushed %" PRIu64 " wait %.1fms\n",
	       CNT(c, core.crc_errors), CNT(c, core.term_tx),
	       CNT(c, core.term_rx), CNT(c, core.flushed),
	       (double)CNT(c, sock.tx_wait_ns) / 1e6);
}

static void show(struct proc *procs, int n, struct prev *prev, int *nprev,
		 double secs)
{
	static struct prev cur[MAX_PROCS];

	printf("\033[H\033[2J");
	printf("wisp-stat: %d process%s  (q quits)\n", n, n == 1 ? "" : "es");
	for (int i = 0; i < n; i++) {
		const struct proc *p = &procs[i];
		uint64_t txo = CNT(&p->total, sock.tx_octets);
		uint64_t rxo = CNT(&p->total, sock.rx_octets);
		double rt = 0, rr = 0;
		char a[16], b[16];

		for (int j = 0; j < *nprev; j++) {
			if (prev[j].pid != p->hdr.pid || secs <= 0)
				continue;
			rt = (double)(txo - prev[j].txo) / secs;
			rr = (double)(rxo - prev[j].rxo) / secs;
		}
		cur[i] = (struct prev){ p->hdr.pid, txo, rxo };
		printf("\n%-8d %-20s tx %s/s rx %s/s  cm: est %" PRIu64
		       " disc %" PRIu64 " rej %" PRIu64 " refused %" PRIu64
		       " unreach %" PRIu64 "\n",
		       (int)p->hdr.pid, p->hdr.comm,
		       human((uint64_t)rt, a, sizeof(a)),
		       human((uint64_t)rr, b, sizeof(b)),
		       (uint64_t)atomic_load(&p->hdr.cm.established),
		       (uint64_t)atomic_load(&p->hdr.cm.disconnected),
		       (uint64_t)atomic_load(&p->hdr.cm.rejected),
		       (uint64_t)atomic_load(&p->hdr.cm.refused),
		       (uint64_t)atomic_load(&p->hdr.cm.unreachable));
		show_counts_line(&p->total);
		for (uint32_t k = 0; k < p->hdr.qp_high; k++) {
			const struct wisp_stats_qp *q = &p->qp[k];

			if (!q->in_use)
				continue;
			printf("  qp %-6u %-9s %-22s -> %-22s rev %u%s%s "
			       "ird %u ord %u\n", q->qp_num,
			       state_name(atomic_load(&q->state)), q->local,
			       q->peer, q->mpa_rev, q->crc ? " crc" : "",
			       q->p2p ? " p2p" : "", q->ird, q->ord);
			printf("  ");
			show_counts_line(&q->c);
		}
	}
	fflush(stdout);
	memcpy(prev, cur, (size_t)n * sizeof(*cur));
	*nprev = n;
}

static struct termios saved_tio;
static bool tio_saved;

static void restore_tty(void)
{
	if (tio_saved)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
}

/* q pressed within ms? */
static bool wait_quit(int ms)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	char ch;

	if (!tio_saved) {
		usleep((useconds_t)ms * 1000);
		return false;
	}
	while (poll(&pfd, 1, ms) > 0) {
		if (read(STDIN_FILENO, &ch, 1) != 1)
			return false;
		if (ch == 'q' || ch == 'Q')
			return true;
	}
	return false;
}

static int run_live(long iterations, double delay)
{
	static struct proc procs[MAX_PROCS];
	static struct prev prev[MAX_PROCS];
	int nprev = 0;

	if (isatty(STDIN_FILENO) && !tcgetattr(STDIN_FILENO, &saved_tio)) {
		struct termios t = saved_tio;

		t.c_lflag &= (tcflag_t)~(ICANON | ECHO);
		t.c_cc[VMIN] = 1;
		t.c_cc[VTIME] = 0;
		tio_saved = !tcsetattr(STDIN_FILENO, TCSANOW, &t);
		atexit(restore_tty);
	}
	for (long it = 0; iterations < 0 || it < iterations; it++) {
		int n = scan(procs, MAX_PROCS);

		show(procs, n, prev, &nprev, it ? delay : 0);
		free_procs(procs, n);
		if (iterations >= 0 && it + 1 >= iterations)
			break;
		if (wait_quit((int)(delay * 1000)))
			break;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wisp-stat [-n N] [-d SECONDS] [-p PID] [--dir DIR]\n"
		"       wisp-stat --json [-p PID] [--dir DIR]\n"
		"Shows the connections and counters of this user's running wisp\n"
		"processes, refreshed every -d seconds (1) until q is pressed\n"
		"or N refreshes were shown; --json prints them once.\n"
		"Files are read from --dir, else $WISP_STATS_DIR, else\n"
		"$XDG_RUNTIME_DIR/wisp and /dev/shm/wisp-<uid>.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "dir", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long iterations = -1;
	double delay = 1.0;
	bool json = false;
	int opt;

	while ((opt = getopt_long(argc, argv, "n:d:p:h", longopts, NULL)) !=
	       -1) {
		char *end;

		switch (opt) {
		case 'j':
			json = true;
			break;
		case 'D':
			opt_dir = optarg;
			break;
		case 'n':
			iterations = strtol(optarg, &end, 10);
			if (*end || iterations < 1)
				goto bad;
			break;
		case 'd':
			delay = strtod(optarg, &end);
			if (*end || delay < 0.05 || delay > 3600)
				goto bad;
			break;
		case 'p':
			opt_pid = strtol(optarg, &end, 10);
			if (*end || opt_pid < 0)
				goto bad;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	return json ? run_json() : run_live(iterations, delay);
bad:
	usage(stderr);
	return 2;
}
