// SPDX-License-Identifier: MIT
/*
 * wisp-wan-delay: the delay and loss half of the emulated WAN (tests/wan/,
 * docs/replication.md). The kernel here has no netem, so this program takes
 * its place: iptables hands every IPv4 packet that arrives by one interface
 * to NFQUEUE; we hold each one for a fixed delay and then accept it, or drop
 * it with a given probability, or drop it because the link is "down"
 * (SIGUSR1 .. SIGUSR2, or --outage seconds). One runs at each end of a link,
 * one for each direction.
 *
 * Why on the way in: a packet held on the way out still belongs to its
 * sender's socket, and TCP Small Queues then stalls the sender at a few
 * packets in flight (a 20 ms delay gave 4 Mbit/s). Once across the veth
 * pair it belongs to no one. The cost: the kernel stamps a packet's arrival
 * (SO_TIMESTAMP) before the INPUT hook, so ping must be run with -U to see
 * the delay of its replies; TCP measures at ACK processing and sees it all.
 *
 *   wisp-wan-delay --iface IF --delay MS [--loss PCT] [--queue N]
 *                  [--seed N] [--outage S] [--qmaxlen N] [--rcvbuf BYTES]
 *                  [--gso] [--pidfile F] [--iptables PROG]
 *
 * Run it inside the namespace that owns IF (ip netns exec). It adds its
 * iptables rule once its queue is bound and removes them on SIGINT/SIGTERM;
 * the rules have no --queue-bypass, so if it dies the link stops rather than
 * silently losing its delay.
 *
 * The delay is the same for every packet, so the packets fall due in the
 * order they arrived: the time-ordered queue is a FIFO ring, and one batch
 * verdict (NFQNL_MSG_VERDICT_BATCH: every id up to N) releases all that are
 * due. We sleep until the head falls due, never per packet. The kernel keeps
 * the packets; only their ids and due times live here (copy mode META).
 *
 * The queue is sized for a bandwidth-delay product of 1 Gbit/s x 200 ms with
 * room for the ACKs, and fail-open is off: a full queue drops, and the
 * kernel's counters of those drops (queue_dropped, user_dropped) are read
 * from /proc and reported, as are ENOBUFS on our socket.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

extern char **environ;

struct held {
	uint32_t id;
	uint64_t due_ns;
};

struct opts {
	const char *iface;
	const char *pidfile;
	const char *iptables;
	uint64_t delay_ns;
	double loss;		/* probability, 0..1 */
	uint64_t seed;
	unsigned outage_s;	/* 0: until SIGUSR2 */
	uint16_t queue;
	uint32_t qmaxlen;
	int rcvbuf;
	bool gso;
};

struct stats {
	uint64_t queued, accepted, lost, outage_dropped, enobufs, max_held;
};

static struct opts o = {
	.iptables = "iptables-legacy",
	.seed = 1,
	.queue = 0,
	.qmaxlen = 65536,
	.rcvbuf = 64 << 20,
};
static struct stats st;
static struct mnl_socket *nl;
static unsigned int portid;
static struct held *ring;
static uint32_t ring_mask, head, tail;	/* held = ring[head .. tail) */
static uint64_t down_until_ns;		/* link down while now < this */

__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("wisp-wan-delay: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: small, seedable, good enough to decide a loss */
static uint64_t rnd_state;
static double rnd01(void)
{
	uint64_t z = (rnd_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / (double)(1ull << 53);
}

static bool link_down(uint64_t now)
{
	return now < down_until_ns;
}

/* ---- the iptables rule: the same argument vector adds and deletes it ---- */

static int run(const char *const argv[])
{
	pid_t pid;
	int status, err;

	/* posix_spawn's argv is not const for historical reasons only */
	err = posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv,
			   environ);
	if (err) {
		say("cannot run %s: %s", argv[0], strerror(err));
		return -err;
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

static int rule(const char *op, const char *chain, const char *dirflag)
{
	char q[8];
	const char *argv[] = { o.iptables, "-w", op, chain, dirflag, o.iface,
			       "-j", "NFQUEUE", "--queue-num", q, NULL };

	snprintf(q, sizeof(q), "%u", o.queue);
	return run(argv);
}

static int rules_add(void)
{
	return rule("-A", "INPUT", "-i");
}

static void rules_del(void)
{
	if (rule("-D", "INPUT", "-i"))
		say("could not remove the rule");
}

/* ---- netlink ---- */

static int nl_send(struct nlmsghdr *nlh)
{
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	return 0;
}

static int nl_config(void)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh;
	uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
	uint32_t want = o.gso ? NFQA_CFG_F_GSO : 0;

	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, o.queue);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	if (nl_send(nlh))
		return -errno;

	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, o.queue);
	nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_META, 0);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, o.qmaxlen);
	/* fail-open off: a full queue must drop (and be counted), not pass */
	mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(want));
	mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(flags));
	return nl_send(nlh);
}

static void verdict(uint32_t id, int v, bool batch)
{
	char buf[256];
	struct nlmsghdr *nlh;

	nlh = nfq_nlmsg_put(buf, batch ? NFQNL_MSG_VERDICT_BATCH :
			    NFQNL_MSG_VERDICT, o.queue);
	nfq_nlmsg_verdict_put(nlh, (int)id, v);
	if (nl_send(nlh))
		say("verdict for %" PRIu32 ": %s", id, strerror(errno));
}

/* Release (or, if the link is down now, drop) every packet that is due. */
/*
 * Our lag: from waking for a due packet to the end of its verdict (which
 * delivers it) takes tens of microseconds, a few percent of a 1 ms RTT. We
 * learn it (a moving average of how late a lone packet's release landed)
 * and start that much early, never by more than a quarter of the delay nor
 * by more than 200 us.
 */
static int64_t lead_ns;

static void learn_lead(uint64_t due, uint64_t done)
{
	int64_t late = (int64_t)(done - due), cap = (int64_t)o.delay_ns / 4;

	lead_ns += late / 4;
	if (lead_ns > cap)
		lead_ns = cap;
	if (lead_ns > 200000)
		lead_ns = 200000;
	if (lead_ns < 0)
		lead_ns = 0;
}

static uint64_t start_at(uint64_t due)
{
	return due > (uint64_t)lead_ns ? due - (uint64_t)lead_ns : 0;
}

static void release_due(uint64_t now)
{
	uint32_t last = 0, n = 0;
	uint64_t due = 0;

	while (head != tail && start_at(ring[head & ring_mask].due_ns) <= now) {
		last = ring[head & ring_mask].id;
		due = ring[head & ring_mask].due_ns;
		head++;
		n++;
	}
	if (!n)
		return;
	if (link_down(now)) {
		verdict(last, NF_DROP, true);
		st.outage_dropped += n;
		return;
	}
	verdict(last, NF_ACCEPT, true);
	st.accepted += n;
	/* a batch's verdict takes as long as delivering all of it: learn
	 * from single packets only, or bulk traffic would go out early */
	if (n == 1)
		learn_lead(due, now_ns());
}

/*
 * When the packet arrived, on CLOCK_MONOTONIC: the kernel's stamp (taken
 * as it entered the stack; see timestamps_on) rather than when we got to
 * read it, so that our own wake-up lag is not added to the delay.
 */
static uint64_t arrival_ns(struct nlattr *tsattr, uint64_t now)
{
	struct nfqnl_msg_packet_timestamp t;
	struct timespec rt;
	uint64_t real, at;

	if (!tsattr || mnl_attr_get_payload_len(tsattr) < sizeof(t))
		return now;
	/* attributes are 4-aligned, the stamp's fields 8: copy it out */
	memcpy(&t, mnl_attr_get_payload(tsattr), sizeof(t));
	clock_gettime(CLOCK_REALTIME, &rt);
	real = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
	at = be64toh(t.sec) * 1000000000u + be64toh(t.usec) * 1000u;
	/* a stamp from the future or over 1 s old: a clock step; ignore */
	if (at > real || real - at > 1000000000u || real - at > now)
		return now;
	return now - (real - at);
}

static int on_packet(const struct nlmsghdr *nlh, void *data)
{
	struct nlattr *attr[NFQA_MAX + 1] = { 0 };
	struct nfqnl_msg_packet_hdr ph;
	uint64_t now = *(uint64_t *)data, at;
	uint32_t id;

	if (nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR])
		return MNL_CB_OK;
	if (mnl_attr_get_payload_len(attr[NFQA_PACKET_HDR]) < sizeof(ph))
		return MNL_CB_OK;
	memcpy(&ph, mnl_attr_get_payload(attr[NFQA_PACKET_HDR]), sizeof(ph));
	id = ntohl(ph.packet_id);
	at = arrival_ns(attr[NFQA_TIMESTAMP], now);
	st.queued++;
	if (link_down(now)) {
		verdict(id, NF_DROP, false);
		st.outage_dropped++;
		return MNL_CB_OK;
	}
	if (o.loss > 0 && rnd01() < o.loss) {
		verdict(id, NF_DROP, false);
		st.lost++;
		return MNL_CB_OK;
	}
	/* The kernel holds at most qmaxlen packets and the ring is that big. */
	if (tail - head > ring_mask) {
		say("internal: ring full at %" PRIu32, tail - head);
		verdict(id, NF_DROP, false);
		return MNL_CB_OK;
	}
	/* due times must not go backwards: the ring is released in order */
	if (head != tail && at < ring[(tail - 1) & ring_mask].due_ns - o.delay_ns)
		at = ring[(tail - 1) & ring_mask].due_ns - o.delay_ns;
	ring[tail & ring_mask] = (struct held){ id, at + o.delay_ns };
	tail++;
	if (tail - head > st.max_held)
		st.max_held = tail - head;
	return MNL_CB_OK;
}

/* Read what is queued now, without blocking; -1 on a fatal error. */
static int read_packets(char *buf, size_t len)
{
	for (int i = 0; i < 256; i++) {
		ssize_t n = mnl_socket_recvfrom(nl, buf, len);
		uint64_t now = now_ns();

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == ENOBUFS) {
				/* the kernel dropped packets it could not
				 * tell us about: counted in user_dropped */
				st.enobufs++;
				continue;
			}
			if (errno == EINTR)
				continue;
			say("recv: %s", strerror(errno));
			return -1;
		}
		if (mnl_cb_run(buf, (size_t)n, 0, portid, on_packet, &now) < 0) {
			say("netlink: %s", strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* queue_dropped + user_dropped of our queue, from the kernel's table. */
static void kernel_drops(uint64_t *qdrop, uint64_t *udrop)
{
	FILE *f = fopen("/proc/net/netfilter/nfnetlink_queue", "r");
	unsigned qn, portid_, total, mode, range, q, u, seq, one;

	*qdrop = *udrop = 0;
	if (!f)
		return;
	while (fscanf(f, "%u %u %u %u %u %u %u %u %u", &qn, &portid_, &total,
		      &mode, &range, &q, &u, &seq, &one) == 9) {
		if (qn == o.queue) {
			*qdrop = q;
			*udrop = u;
		}
	}
	fclose(f);
}

static void print_stats(const char *when)
{
	uint64_t qd, ud;

	kernel_drops(&qd, &ud);
	say("%s: queued=%" PRIu64 " accepted=%" PRIu64 " lost=%" PRIu64
	    " outage_dropped=%" PRIu64 " held=%" PRIu32 " max_held=%" PRIu64
	    " lead_us=%.1f unintended_drops=%" PRIu64 " (queue_full=%" PRIu64
	    " socket_full=%" PRIu64 " enobufs=%" PRIu64 ")",
	    when, st.queued, st.accepted, st.lost, st.outage_dropped,
	    tail - head, st.max_held, lead_ns / 1e3, qd + ud, qd, ud,
	    st.enobufs);
}

static void check_drops(uint64_t *seen)
{
	uint64_t qd, ud;

	kernel_drops(&qd, &ud);
	if (qd + ud > *seen) {
		say("UNINTENDED DROPS: %" PRIu64 " packets (queue full %"
		    PRIu64 ", socket buffer full %" PRIu64 ") so far",
		    qd + ud, qd, ud);
		*seen = qd + ud;
	}
}

/*
 * Accept what we still hold, so a clean stop loses nothing: the rule is
 * gone, so take in what was queued before it went, then let all go.
 */
static void release_all(char *buf, size_t len)
{
	if (read_packets(buf, len) < 0)
		say("some held packets may be dropped");
	if (head != tail) {
		verdict(ring[(tail - 1) & ring_mask].id, NF_ACCEPT, true);
		st.accepted += tail - head;
		head = tail;
	}
}

static void on_signal(int sfd, bool *stop)
{
	struct signalfd_siginfo si;

	while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGUSR1:
			down_until_ns = o.outage_s ?
				now_ns() + o.outage_s * 1000000000ull : UINT64_MAX;
			say("link down (%us; 0 = until SIGUSR2)", o.outage_s);
			break;
		case SIGUSR2:
			down_until_ns = 0;	/* the loop says "link up" */
			break;
		case SIGHUP:
			print_stats("stats");
			break;
		default:
			*stop = true;
		}
	}
}

static int loop(int sfd, char *buf, size_t buflen)
{
	uint64_t seen_drops, qd, ud, next_check = 0;
	bool stop = false, was_down = false;
	struct pollfd pfd[2] = {
		{ .fd = mnl_socket_get_fd(nl), .events = POLLIN },
		{ .fd = sfd, .events = POLLIN },
	};

	/* the counters are the queue number's, maybe from an earlier run */
	kernel_drops(&qd, &ud);
	seen_drops = qd + ud;
	while (!stop) {
		uint64_t now = now_ns(), wake = UINT64_MAX;
		struct timespec ts, *tsp = NULL;

		release_due(now);
		if (was_down && !link_down(now))
			say("link up");
		was_down = link_down(now);
		if (now >= next_check) {
			check_drops(&seen_drops);
			next_check = now + 1000000000ull;
		}
		if (head != tail)
			wake = start_at(ring[head & ring_mask].due_ns);
		if (was_down && down_until_ns < wake)
			wake = down_until_ns;
		if (next_check < wake)
			wake = next_check;
		if (wake != UINT64_MAX) {
			uint64_t d = wake > now ? wake - now : 0;

			ts.tv_sec = (time_t)(d / 1000000000u);
			ts.tv_nsec = (long)(d % 1000000000u);
			tsp = &ts;
		}
		if (ppoll(pfd, 2, tsp, NULL) < 0 && errno != EINTR) {
			say("poll: %s", strerror(errno));
			break;
		}
		if ((pfd[0].revents & POLLIN) && read_packets(buf, buflen) < 0)
			break;
		if (pfd[1].revents & POLLIN)
			on_signal(sfd, &stop);
	}
	return stop ? 0 : -1;
}

static void usage(void)
{
	fputs("usage: wisp-wan-delay --iface IF --delay MS [--loss PCT]\n"
	      "  [--queue N] [--seed N] [--outage S] [--qmaxlen N]\n"
	      "  [--rcvbuf BYTES] [--gso] [--pidfile F] [--iptables PROG]\n"
	      "Holds each IPv4 packet that arrives by IF for MS milliseconds;\n"
	      "drops PCT %; SIGUSR1 stops forwarding (for --outage S, 0 =\n"
	      "until SIGUSR2), SIGHUP prints counters, SIGTERM stops.\n",
	      stderr);
	exit(2);
}

static double num(const char *s, double lo, double hi)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v >= lo && v <= hi)) {
		say("bad number '%s' (want %g..%g)", s, lo, hi);
		usage();
	}
	return v;
}

static void parse(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "iface", 1, NULL, 'i' }, { "delay", 1, NULL, 'd' },
		{ "loss", 1, NULL, 'l' }, { "queue", 1, NULL, 'q' },
		{ "seed", 1, NULL, 's' }, { "outage", 1, NULL, 'o' },
		{ "qmaxlen", 1, NULL, 'm' }, { "rcvbuf", 1, NULL, 'r' },
		{ "gso", 0, NULL, 'g' }, { "pidfile", 1, NULL, 'p' },
		{ "iptables", 1, NULL, 't' }, { "help", 0, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool have_delay = false;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'i': o.iface = optarg; break;
		case 'd':
			o.delay_ns = (uint64_t)(num(optarg, 0, 10000) * 1e6);
			have_delay = true;
			break;
		case 'l': o.loss = num(optarg, 0, 100) / 100; break;
		case 'q': o.queue = (uint16_t)num(optarg, 0, 65535); break;
		case 's': o.seed = (uint64_t)num(optarg, 0, 1e18); break;
		case 'o': o.outage_s = (unsigned)num(optarg, 0, 86400); break;
		case 'm': o.qmaxlen = (uint32_t)num(optarg, 64, 1 << 22); break;
		case 'r': o.rcvbuf = (int)num(optarg, 1 << 16, 1 << 30); break;
		case 'g': o.gso = true; break;
		case 'p': o.pidfile = optarg; break;
		case 't': o.iptables = optarg; break;
		default: usage();
		}
	}
	if (!o.iface || !have_delay || optind != argc)
		usage();
}

static int nl_open(void)
{
	int fd;

	nl = mnl_socket_open(NETLINK_NETFILTER);
	if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		say("netlink: %s", strerror(errno));
		return -1;
	}
	portid = mnl_socket_get_portid(nl);
	fd = mnl_socket_get_fd(nl);
	/* room for a burst of a whole queue's worth of notices */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &o.rcvbuf,
		       sizeof(o.rcvbuf)) < 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.rcvbuf,
		       sizeof(o.rcvbuf)) < 0)
		say("SO_RCVBUF: %s", strerror(errno));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (nl_config() < 0) {
		say("binding queue %u: %s", o.queue, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The kernel stamps arriving packets only while some socket asks for it;
 * this one (kept open, never read) does, so every packet we are handed
 * carries NFQA_TIMESTAMP. -1 if not possible (we then use read times).
 */
static int timestamps_on(void)
{
	int one = 1, fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one,
				  sizeof(one)) == 0)
		return fd;
	say("no kernel arrival stamps (%s): the delay counts from our reads",
	    strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static int write_pidfile(void)
{
	FILE *f;

	if (!o.pidfile)
		return 0;
	f = fopen(o.pidfile, "w");
	if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f)) {
		say("%s: %s", o.pidfile, strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	sigset_t ss;
	uint32_t cap = 1;
	static char buf[1 << 16];	/* one netlink message at a time */
	int sfd, tsfd, rc = 1;

	parse(argc, argv);
	rnd_state = o.seed;
	while (cap < o.qmaxlen)
		cap <<= 1;
	ring = calloc(cap, sizeof(*ring));
	if (!ring)
		return 1;
	ring_mask = cap - 1;
	/* wake at the due time, not up to 50 us later */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

	sigemptyset(&ss);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGHUP);
	sigaddset(&ss, SIGUSR1);
	sigaddset(&ss, SIGUSR2);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	tsfd = timestamps_on();
	if (sfd < 0 || nl_open() < 0)
		goto out;
	if (rules_add() < 0) {
		say("could not add the iptables rule");
		goto out;
	}
	say("queue %u, into %s: delay %.3f ms, loss %.3f %%, qmaxlen %"
	    PRIu32 ", rcvbuf %d, gso %s", o.queue, o.iface, o.delay_ns / 1e6,
	    o.loss * 100, o.qmaxlen, o.rcvbuf, o.gso ? "on" : "off");
	if (write_pidfile() == 0 && loop(sfd, buf, sizeof(buf)) == 0)
		rc = 0;
	rules_del();
	release_all(buf, sizeof(buf));
	print_stats("exit");
out:
	if (nl)
		mnl_socket_close(nl);
	if (tsfd >= 0)
		close(tsfd);
	free(ring);
	return rc;
}
