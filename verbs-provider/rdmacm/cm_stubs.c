/* SPDX-License-Identifier: MIT */
/*
 * cm_stubs.c - entry points of librdmacm.so.1 that wisp does not offer,
 * so that every program linked against rdma-core's library still loads:
 * UD multicast (mckey) and InfiniBand's ECE. Each fails cleanly with
 * ENOSYS / EOPNOTSUPP. (rsockets: rsocket_*.c.)
 */
#include <errno.h>

#include "cm_internal.h"

static int nosys(void)
{
	errno = ENOSYS;
	return -1;
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr,
			void *context)
{
	(void)id; (void)addr; (void)context;
	return nosys();
}

int rdma_join_multicast_ex(struct rdma_cm_id *id,
			   struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	(void)id; (void)mc_join_attr; (void)context;
	return nosys();
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id; (void)addr;
	return nosys();
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id; (void)ece;
	errno = EOPNOTSUPP;
	return -1;
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id; (void)ece;
	errno = EOPNOTSUPP;
	return -1;
}
