// SPDX-License-Identifier: MIT
/*
 * stats_child.c - a wisp process for test_stats: opens wisp0, creates a
 * QP, prints "ready" and waits until its standard input ends, then exits
 * normally (which must remove its statistics file).
 */
#include <stdio.h>
#include <unistd.h>

#include <infiniband/verbs.h>

int main(void)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC };
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char buf[64];
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return 2;
	ctx = ibv_open_device(list[0]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	cq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!pd || !cq)
		return 3;
	ia.send_cq = ia.recv_cq = cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return 4;
	printf("ready %u\n", qp->qp_num);
	fflush(stdout);
	while (read(STDIN_FILENO, buf, sizeof(buf)) > 0)
		;
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
