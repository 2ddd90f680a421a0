/* SPDX-License-Identifier: MIT */
/*
 * cm_lib.c - the library: its one lock and state (struct wcm_lib), the
 * configuration loaded and the device wisp0 opened on first use, and the
 * device list of rdma_get_devices.
 *
 * Call order of the library's files, with no cycles (tests/rdmacm/
 * check-deps.py):
 *   cm_config.c <- cm_lib.c <- cm_event.c <- cm_id.c <- cm_stream.c
 *     <- {cm_passive.c, cm_active.c} ; cm_qp.c, cm_ep.c, cm_stubs.c on top.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cm_internal.h"

struct wcm_lib wcm = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.log_level = WCM_LOG_WARN,
};

int wcm_init(void)
{
	struct ibv_device **devs = NULL;
	struct ibv_context *verbs = NULL;
	struct ibv_pd *pd = NULL;
	int ret, n = 0;

	pthread_mutex_lock(&wcm.lock);
	if (wcm.ready) {
		pthread_mutex_unlock(&wcm.lock);
		return 0;
	}
	ret = wcm_config_load();
	pthread_mutex_unlock(&wcm.lock);
	if (ret)
		return ret;

	/* The device list of the libibverbs.so.1 that was loaded with us:
	 * wisp's, whose one device is wisp0. */
	devs = ibv_get_device_list(&n);
	if (!devs || n < 1) {
		wcm_log(WCM_LOG_ERROR, "no RDMA device (is wisp's "
			"libibverbs.so.1 the one loaded? see wisp-run)");
		ret = -ENODEV;
		goto err;
	}
	for (int i = 0; i < n; i++) {
		if (!strcmp(ibv_get_device_name(devs[i]), "wisp0")) {
			verbs = ibv_open_device(devs[i]);
			break;
		}
	}
	if (!verbs)
		verbs = ibv_open_device(devs[0]);
	if (!verbs) {
		ret = errno ? -errno : -ENODEV;
		goto err;
	}
	pd = ibv_alloc_pd(verbs);
	if (!pd) {
		ret = errno ? -errno : -ENOMEM;
		goto err;
	}

	pthread_mutex_lock(&wcm.lock);
	if (wcm.ready) {
		/* Another thread won the race: use its device. */
		pthread_mutex_unlock(&wcm.lock);
		ibv_dealloc_pd(pd);
		ibv_close_device(verbs);
		ibv_free_device_list(devs);
		return 0;
	}
	wcm.devs = devs;
	wcm.verbs = verbs;
	wcm.pd = pd;
	wcm.ready = true;
	pthread_mutex_unlock(&wcm.lock);
	return 0;

err:
	if (verbs)
		ibv_close_device(verbs);
	if (devs)
		ibv_free_device_list(devs);
	return ret;
}


struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list;
	int ret = wcm_init();

	if (ret) {
		if (num_devices)
			*num_devices = 0;
		errno = -ret;
		return NULL;
	}
	list = calloc(2, sizeof(*list));
	if (!list)
		return NULL;
	list[0] = wcm.verbs;
	if (num_devices)
		*num_devices = 1;
	return list;
}


void rdma_free_devices(struct ibv_context **list)
{
	/* The contexts stay open for the ids, as in rdma-core. */
	free(list);
}
