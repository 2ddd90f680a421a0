/*
 * delay-connect: LD_PRELOAD shim for the interop tests. Every rdma_connect
 * after a process's first one waits $INTEROP_CONNECT_DELAY_MS (default 300)
 * before going on. perftest -R makes two connections and its server closes
 * and reopens its listener between them; under qemu's TCG the guest takes
 * tens of milliseconds to reopen it and a host client is refused meanwhile.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <unistd.h>

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static int (*next)(struct rdma_cm_id *, struct rdma_conn_param *);
	static int calls;
	const char *ms = getenv("INTEROP_CONNECT_DELAY_MS");

	if (!next)
		next = (int (*)(struct rdma_cm_id *, struct rdma_conn_param *))
			dlsym(RTLD_NEXT, "rdma_connect");
	if (calls++ > 0)
		usleep(1000 * (ms ? atoi(ms) : 300));
	return next(id, param);
}
