/*
 * split-send: LD_PRELOAD shim that reproduces finding 10 of
 * docs/interop.md on purpose. siw reads an MPA trailer (pad + CRC) that
 * reaches it in two skbs wrongly and reports a CRC error for a good FPDU.
 * In the matrix that happens only when the relays between wisp and the
 * guest cut the stream there by chance.
 *
 * In a process whose name (/proc/self/comm) starts with $SPLIT_SEND_COMM,
 * with SPLIT_SEND_OCTETS=K (1..3) set, every sendmsg(2) of 16 KiB or more
 * goes out as all but its last K octets, a pause of 30 ms, then those K
 * octets. A wisp batch ends with an FPDU, so the last FPDU's CRC arrives
 * in two pieces. wisp's io_uring engine does not send through libc, so
 * the wisp end needs WISP_ENGINE=epoll. Without both variables the shim
 * passes every call through. For instance:
 *
 *   cc -shared -fPIC -o /tmp/split-send.so tests/interop/split-send.c -ldl
 *   LD_PRELOAD=/tmp/split-send.so SPLIT_SEND_COMM=ib_read_bw \
 *     SPLIT_SEND_OCTETS=1 WISP_ENGINE=epoll WISP_INTEROP_REPEAT=3 \
 *     tests/interop/run.sh 's2w.crc.read-bw-65536'
 *
 * Diagnostic only: not part of the matrix.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SPLIT_MIN_LEN (16u * 1024u)
#define SPLIT_MAX_IOV 1024
#define SPLIT_PAUSE_US 30000

typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);

static int split_octets = -1;

/* K if this process is to split its sends, else 0. */
static int split_wanted(void)
{
	const char *k = getenv("SPLIT_SEND_OCTETS");
	const char *want = getenv("SPLIT_SEND_COMM");
	char comm[64] = "";
	FILE *f;

	if (split_octets >= 0)
		return split_octets;
	split_octets = 0;
	if (!k || !want || !*want)
		return 0;
	f = fopen("/proc/self/comm", "r");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	if (strncmp(comm, want, strlen(want)) == 0 && atoi(k) >= 1 &&
	    atoi(k) <= 3)
		split_octets = atoi(k);
	return split_octets;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static sendmsg_fn next;
	struct iovec head[SPLIT_MAX_IOV], tail[4];
	struct msghdr m;
	size_t total = 0, cut, at = 0;
	int nhead = 0, ntail = 0, k;
	ssize_t n, r;

	if (!next) {
		*(void **)&next = dlsym(RTLD_NEXT, "sendmsg");
		if (!next)
			return -1;
	}
	k = split_wanted();
	if (!k || msg->msg_iovlen > SPLIT_MAX_IOV)
		return next(fd, msg, flags);
	for (size_t i = 0; i < msg->msg_iovlen; i++)
		total += msg->msg_iov[i].iov_len;
	if (total < SPLIT_MIN_LEN)
		return next(fd, msg, flags);

	cut = total - (size_t)k;
	for (size_t i = 0; i < msg->msg_iovlen; i++) {
		const struct iovec *v = &msg->msg_iov[i];
		size_t keep = at >= cut ? 0 :
			      v->iov_len < cut - at ? v->iov_len : cut - at;

		if (keep)
			head[nhead++] = (struct iovec){ v->iov_base, keep };
		/* the last k (<= 3) octets lie in at most 3 iovecs */
		if (keep < v->iov_len && ntail < 4)
			tail[ntail++] = (struct iovec){
				(char *)v->iov_base + keep, v->iov_len - keep };
		at += v->iov_len;
	}
	m = *msg;
	m.msg_iov = head;
	m.msg_iovlen = (size_t)nhead;
	n = next(fd, &m, flags);
	if (n < (ssize_t)cut)
		return n; /* short or failed: the caller resumes as usual */
	usleep(SPLIT_PAUSE_US);
	m.msg_iov = tail;
	m.msg_iovlen = (size_t)ntail;
	r = next(fd, &m, flags);
	fprintf(stderr, "split-send: %zu + %zd of %zu octets\n", cut, r, total);
	return r > 0 ? n + r : n;
}
