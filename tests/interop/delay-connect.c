/*
 * delay-connect: LD_PRELOAD shim for the interop tests. perftest -R makes
 * two connections to one port, and its server destroys its first listener
 * and creates the second only after sending the handshake message that
 * sends the client to connect (tests/rdmacm/await-listener.c has the
 * details); a client that connects before that is refused, and perftest
 * 4.5's retry then uses freed memory (docs/interop.md, finding 5). Under
 * qemu's TCG the guest's server is tens of milliseconds late, or more on a
 * loaded host.
 *
 * The guest's listener cannot be seen from the host (qemu's forward
 * listens all the time), so the harness looks for it: every rdma_connect
 * after a process's first one creates $INTEROP_AWAIT_DIR/want and waits
 * until the harness, having seen the guest's listener, creates
 * $INTEROP_AWAIT_DIR/go (then removes both), 20 s at most. Without
 * INTEROP_AWAIT_DIR the shim does nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void await_go(const char *dir)
{
	char want[PATH_MAX], go[PATH_MAX];
	int fd, i;

	snprintf(want, sizeof(want), "%s/want", dir);
	snprintf(go, sizeof(go), "%s/go", dir);
	fd = open(want, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	close(fd);
	/* Polled every 5 ms: the harness signals through the file system. */
	for (i = 0; i < 4000 && access(go, F_OK); i++) {
		struct timespec pause = { .tv_nsec = 5000000 };

		nanosleep(&pause, NULL);
	}
	unlink(go);
	unlink(want);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static int (*next)(struct rdma_cm_id *, struct rdma_conn_param *);
	static int calls;
	const char *dir = getenv("INTEROP_AWAIT_DIR");

	if (!next)
		next = (int (*)(struct rdma_cm_id *, struct rdma_conn_param *))
			dlsym(RTLD_NEXT, "rdma_connect");
	if (calls++ > 0 && dir)
		await_go(dir);
	return next(id, param);
}
