/* SPDX-License-Identifier: MIT */
/*
 * verbs_device.c - the device wisp0: the device list, open/close of a
 * context with its ops tables (the one place that names every object's
 * verbs), query device/port/GID/P_Key, and PDs. The context's own state
 * lives in verbs_context.c.
 *
 * Return conventions are rdma-core 44's, verb by verb: most int verbs
 * return 0 or a positive errno, but ibv_query_gid, ibv_query_pkey,
 * ibv_get_pkey_index return -1 with errno set, and
 * _ibv_query_gid_table a negative errno, as rdma-core's do.
 */
#include "verbs_abi.h"
#include "wisp_verbs.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef WISP_VERSION_STRING
#define WISP_VERSION_STRING "0.0.0"
#endif

#define WISP_PORT_NUM        1
#define WISP_PKEY_DEFAULT    0xffff  /* full-membership default P_Key */

/*
 * What wisp0 claims beyond the limits of wisp_verbs.h. siw's device flags
 * are IB_DEVICE_MEM_MGT_EXTENSIONS alone (RFC 5040 Send with Invalidate,
 * local invalidate); its port flags CM and device management support.
 */
#define WISP_DEVICE_CAP_FLAGS IBV_DEVICE_MEM_MGT_EXTENSIONS
#define WISP_PORT_CAP_FLAGS   (IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP)

/* IB PortInfo encodings (no ibv_ enum names them): 1X, EDR (25 Gb/s per
 * lane), physical state LinkUp. A plausible link for TCP; nothing
 * depends on it. */
#define WISP_PORT_WIDTH_1X   1
#define WISP_PORT_SPEED_EDR  32
#define WISP_PORT_PHYS_UP    5

/*
 * rdma-core 44's struct _compat_ibv_port_attr, which the exported
 * ibv_query_port fills, is struct ibv_port_attr without port_cap_flags2;
 * a caller built against an older verbs.h has no room for the rest.
 */
#define COMPAT_PORT_ATTR_SIZE offsetof(struct ibv_port_attr, port_cap_flags2)
_Static_assert(COMPAT_PORT_ATTR_SIZE == 48,
	       "rdma-core 44's struct _compat_ibv_port_attr is 48 octets");

/*
 * No kernel uverbs device exists behind wisp0: the sysfs paths name where
 * rdma-core would look for one and lead nowhere (ibv_devinfo reads
 * board_id there and prints nothing when it is missing).
 */
static struct wisp_device wisp_dev = {
	.base = {
		.node_type = IBV_NODE_RNIC,
		.transport_type = IBV_TRANSPORT_IWARP,
		.name = WISP_DEV_NAME,
		.dev_name = WISP_DEV_NAME,
		.dev_path = "/sys/class/infiniband_verbs/" WISP_DEV_NAME,
		.ibdev_path = "/sys/class/infiniband/" WISP_DEV_NAME,
	},
};

static bool is_wisp_dev(const struct ibv_device *device)
{
	return device == &wisp_dev.base;
}

/* ---- device list ----------------------------------------------------- */

struct ibv_device **wisp_get_device_list_1_1(int *num)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (num)
		*num = 0;
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &wisp_dev.base;
	if (num)
		*num = 1;
	return list;
}
WISP_SYMVER(wisp_get_device_list_1_1, "ibv_get_device_list@@IBVERBS_1.1");

/* wisp0 is static: devices stay valid after the list is freed. */
void wisp_free_device_list_1_1(struct ibv_device **list)
{
	free(list);
}
WISP_SYMVER(wisp_free_device_list_1_1, "ibv_free_device_list@@IBVERBS_1.1");

const char *wisp_get_device_name_1_1(struct ibv_device *device)
{
	return device->name;
}
WISP_SYMVER(wisp_get_device_name_1_1, "ibv_get_device_name@@IBVERBS_1.1");

/* rdma-core returns 0 when it cannot read the node GUID. */
__be64 wisp_get_device_guid_1_1(struct ibv_device *device)
{
	struct wisp_gid *tbl;
	__be64 guid;

	if (!is_wisp_dev(device) || wisp_gid_table_scan(&tbl) < 0)
		return 0;
	guid = wisp_gid_to_guid(&tbl[0].gid);
	free(tbl);
	return guid;
}
WISP_SYMVER(wisp_get_device_guid_1_1, "ibv_get_device_guid@@IBVERBS_1.1");

/* The kernel's index of the device; -1 for one rdma-core does not know. */
int ibv_get_device_index(struct ibv_device *device)
{
	return is_wisp_dev(device) ? 0 : -1;
}

/* ---- queries ----------------------------------------------------------- */

static void fill_device_attr(const struct wisp_context *wctx,
			     struct ibv_device_attr_ex *ex)
{
	struct ibv_device_attr *a = &ex->orig_attr;
	long page = sysconf(_SC_PAGESIZE);

	memset(ex, 0, sizeof(*ex));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", WISP_VERSION_STRING);
	/* siw: node and system image GUID are both its MAC's EUI-64. */
	a->node_guid = wisp_gid_to_guid(&wctx->gid_tbl[0].gid);
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = WISP_MAX_MR_SIZE;
	a->page_size_cap = page > 0 ? (uint64_t)page : 4096; /* siw: PAGE_SIZE */
	a->vendor_id = WISP_VENDOR_ID;
	a->vendor_part_id = WISP_VENDOR_PART_ID;
	a->max_qp = WISP_MAX_QP;
	a->max_qp_wr = WISP_MAX_QP_WR;
	a->device_cap_flags = WISP_DEVICE_CAP_FLAGS;
	a->max_sge = WISP_MAX_SGE;
	a->max_sge_rd = WISP_MAX_SGE_RD;
	a->max_cq = WISP_MAX_CQ;
	a->max_cqe = WISP_MAX_CQE;
	a->max_mr = (int)WISP_MAX_MR;
	a->max_pd = WISP_MAX_PD;
	/* Responder side (inbound Read Requests, the IRD) and initiator side
	 * (the ORD), in the verbs' sense; the device-wide responder total is
	 * every QP's IRD, as siw computes it. */
	a->max_qp_rd_atom = WISP_MAX_IRD;
	a->max_qp_init_rd_atom = WISP_MAX_ORD;
	a->max_res_rd_atom = WISP_MAX_QP * WISP_MAX_IRD;
	a->atomic_cap = IBV_ATOMIC_NONE;        /* no RFC 7306 atomics */
	a->max_srq = WISP_MAX_SRQ;
	a->max_srq_wr = WISP_MAX_SRQ_WR;
	a->max_srq_sge = WISP_MAX_SGE;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	ex->phys_port_cnt_ex = 1;
}

/* verbs_context->query_device_ex, which the inline ibv_query_device_ex
 * calls with the caller's sizeof(*attr). */
static int wisp_query_device_ex(struct ibv_context *context,
				const struct ibv_query_device_ex_input *input,
				struct ibv_device_attr_ex *attr,
				size_t attr_size)
{
	struct ibv_device_attr_ex full;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	fill_device_attr(to_wctx(context), &full);
	/* A caller built against an older verbs.h passes a shorter struct,
	 * one built against a newer one a longer struct: fill what both
	 * know, zero the rest. */
	if (attr_size <= sizeof(full)) {
		memcpy(attr, &full, attr_size);
		return 0;
	}
	memcpy(attr, &full, sizeof(full));
	memset((char *)attr + sizeof(full), 0, attr_size - sizeof(full));
	return 0;
}

int wisp_query_device_1_1(struct ibv_context *context,
			  struct ibv_device_attr *device_attr)
{
	struct ibv_device_attr_ex full;

	fill_device_attr(to_wctx(context), &full);
	*device_attr = full.orig_attr;
	return 0;
}
WISP_SYMVER(wisp_query_device_1_1, "ibv_query_device@@IBVERBS_1.1");

static void fill_port_attr(const struct wisp_context *wctx,
			   struct ibv_port_attr *p)
{
	memset(p, 0, sizeof(*p));
	p->state = IBV_PORT_ACTIVE;
	/* iWARP has no path MTU: FPDUs are sized from the TCP MSS. 4096
	 * is the largest value the enum can carry. */
	p->max_mtu = IBV_MTU_4096;
	p->active_mtu = IBV_MTU_4096;
	p->gid_tbl_len = wctx->gid_cnt;
	p->port_cap_flags = WISP_PORT_CAP_FLAGS;
	p->max_msg_sz = UINT32_MAX;             /* siw: -1 */
	p->pkey_tbl_len = 1;
	p->active_width = WISP_PORT_WIDTH_1X;
	p->active_speed = WISP_PORT_SPEED_EDR;
	p->phys_state = WISP_PORT_PHYS_UP;
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
}

/*
 * verbs_context->query_port, reached by the inline ibv_query_port of
 * rdma-core >= 16 with the caller's sizeof(struct ibv_port_attr).
 */
static int wisp_query_port(struct ibv_context *context, uint8_t port_num,
			   struct ibv_port_attr *port_attr, size_t port_attr_len)
{
	struct ibv_port_attr full;

	if (port_num != WISP_PORT_NUM)
		return EINVAL;
	fill_port_attr(to_wctx(context), &full);
	if (port_attr_len <= sizeof(full)) {
		memcpy(port_attr, &full, port_attr_len);
		return 0;
	}
	memcpy(port_attr, &full, sizeof(full));
	memset((char *)port_attr + sizeof(full), 0,
	       port_attr_len - sizeof(full));
	return 0;
}

/* The exported ibv_query_port: binaries built before the inline existed,
 * and the inline's fallback for contexts without the op. */
int wisp_query_port_1_1(struct ibv_context *context, uint8_t port_num,
			struct _compat_ibv_port_attr *port_attr)
{
	return wisp_query_port(context, port_num,
			       (struct ibv_port_attr *)(void *)port_attr,
			       COMPAT_PORT_ATTR_SIZE);
}
WISP_SYMVER(wisp_query_port_1_1, "ibv_query_port@@IBVERBS_1.1");

static const struct wisp_gid *gid_lookup(struct ibv_context *context,
					 uint32_t port_num, uint32_t index)
{
	const struct wisp_context *wctx = to_wctx(context);

	if (port_num != WISP_PORT_NUM || index >= (uint32_t)wctx->gid_cnt)
		return NULL;
	return &wctx->gid_tbl[index];
}

int wisp_query_gid_1_1(struct ibv_context *context, uint8_t port_num,
		       int index, union ibv_gid *gid)
{
	const struct wisp_gid *e = NULL;

	if (index >= 0)
		e = gid_lookup(context, port_num, (uint32_t)index);
	if (!e) {
		errno = EINVAL;
		return -1;
	}
	*gid = e->gid;
	return 0;
}
WISP_SYMVER(wisp_query_gid_1_1, "ibv_query_gid@@IBVERBS_1.1");

/* entry_size >= sizeof(struct ibv_gid_entry): fill, zero any tail. */
static void fill_gid_entry(const struct wisp_gid *e, uint32_t index,
			   void *entry, size_t entry_size)
{
	const struct ibv_gid_entry full = {
		.gid = e->gid,
		.gid_index = index,
		.port_num = WISP_PORT_NUM,
		/* The kernel's GID cache types an iWARP port's GIDs
		 * IB_GID_TYPE_IB, with the netdev's ifindex. */
		.gid_type = IBV_GID_TYPE_IB,
		.ndev_ifindex = e->ifindex,
	};

	memcpy(entry, &full, sizeof(full));
	memset((char *)entry + sizeof(full), 0, entry_size - sizeof(full));
}

/* Behind the inline ibv_query_gid_ex. Flags are reserved: rdma-core
 * answers EOPNOTSUPP to those it cannot pass on. */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
		      uint32_t gid_index, struct ibv_gid_entry *entry,
		      uint32_t flags, size_t entry_size)
{
	const struct wisp_gid *e;

	if (flags)
		return EOPNOTSUPP;
	if (!entry || entry_size < sizeof(*entry))
		return EINVAL;
	e = gid_lookup(context, port_num, gid_index);
	if (!e)
		return EINVAL;
	fill_gid_entry(e, gid_index, entry, entry_size);
	return 0;
}

/* Behind the inline ibv_query_gid_table: the number of entries, or a
 * negative errno (EINVAL if they do not all fit, as in rdma-core). */
ssize_t _ibv_query_gid_table(struct ibv_context *context,
			     struct ibv_gid_entry *entries, size_t max_entries,
			     uint32_t flags, size_t entry_size)
{
	const struct wisp_context *wctx = to_wctx(context);

	if (flags)
		return -EOPNOTSUPP;
	if (entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	if (!entries || max_entries < (size_t)wctx->gid_cnt)
		return -EINVAL;
	for (int i = 0; i < wctx->gid_cnt; i++)
		fill_gid_entry(&wctx->gid_tbl[i], (uint32_t)i,
			       (char *)entries + (size_t)i * entry_size,
			       entry_size);
	return wctx->gid_cnt;
}

/* IBVERBS_PRIVATE_34, used by ibv_devinfo to label each GID. An IB-typed
 * GID reads "IB/RoCE v1" in sysfs. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type)
{
	if (!gid_lookup(context, port_num, index)) {
		errno = EINVAL;
		return -1;
	}
	*type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

/* P_Keys are InfiniBand's: wisp0 has one, the default, at index 0. */
int wisp_query_pkey_1_1(struct ibv_context *context, uint8_t port_num,
			int index, __be16 *pkey)
{
	(void)context;
	if (port_num != WISP_PORT_NUM || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(WISP_PKEY_DEFAULT);
	return 0;
}
WISP_SYMVER(wisp_query_pkey_1_1, "ibv_query_pkey@@IBVERBS_1.1");

/* The index of pkey, or -1 with errno ENOENT (what rdma-core's walk of
 * the sysfs P_Key table ends with). */
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
		       __be16 pkey)
{
	__be16 p;

	for (int i = 0; wisp_query_pkey_1_1(context, port_num, i, &p) == 0; i++)
		if (p == pkey)
			return i;
	errno = ENOENT;
	return -1;
}

/* ---- protection domains ------------------------------------------------ */

struct ibv_pd *wisp_alloc_pd_1_1(struct ibv_context *context)
{
	static uint32_t next_handle;
	struct wisp_context *wctx = to_wctx(context);
	struct wisp_pd *pd;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		goto err_nomem;
	pthread_mutex_lock(&wctx->lock);
	if (wctx->pd_cnt >= WISP_MAX_PD) {
		/* siw's answer past SIW_MAX_PD */
		pthread_mutex_unlock(&wctx->lock);
		goto err_free_pd;
	}
	wctx->pd_cnt++;
	pthread_mutex_unlock(&wctx->lock);

	pd->base.context = context;
	pd->base.handle = __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
	return &pd->base;

err_free_pd:
	free(pd);
err_nomem:
	errno = ENOMEM;
	return NULL;
}
WISP_SYMVER(wisp_alloc_pd_1_1, "ibv_alloc_pd@@IBVERBS_1.1");

int wisp_dealloc_pd_1_1(struct ibv_pd *pd)
{
	struct wisp_context *wctx = to_wctx(pd->context);
	struct wisp_pd *wpd = to_wpd(pd);

	if (__atomic_load_n(&wpd->use_cnt, __ATOMIC_ACQUIRE))
		return EBUSY;
	pthread_mutex_lock(&wctx->lock);
	wctx->pd_cnt--;
	pthread_mutex_unlock(&wctx->lock);
	free(wpd);
	return 0;
}
WISP_SYMVER(wisp_dealloc_pd_1_1, "ibv_dealloc_pd@@IBVERBS_1.1");

/* ---- contexts ---------------------------------------------------------- */

/* Memory windows are not supported: alloc_mw stays NULL, so the inline
 * ibv_alloc_mw fails with EOPNOTSUPP and these are never reached. */
static int bind_mw_unsupported(struct ibv_qp *qp, struct ibv_mw *mw,
			       struct ibv_mw_bind *mw_bind)
{
	(void)qp;
	(void)mw;
	(void)mw_bind;
	return EOPNOTSUPP;
}

static int dealloc_mw_unsupported(struct ibv_mw *mw)
{
	(void)mw;
	return EOPNOTSUPP;
}

static void *compat_op_unsupported(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/*
 * rdma-core points the _compat_ slots at its provider's ops "just in
 * case" an old binary calls through them, and two of them at the exported
 * query verbs (set_lib_ops). wisp does the latter; the others fail.
 */
static const struct ibv_context_ops wisp_ctx_ops = {
	._compat_alloc_pd = compat_op_unsupported,
	._compat_async_event = compat_op_unsupported,
	._compat_attach_mcast = compat_op_unsupported,
	._compat_cq_event = compat_op_unsupported,
	._compat_create_ah = compat_op_unsupported,
	._compat_create_cq = compat_op_unsupported,
	._compat_create_qp = compat_op_unsupported,
	._compat_create_srq = compat_op_unsupported,
	._compat_dealloc_pd = compat_op_unsupported,
	._compat_dereg_mr = compat_op_unsupported,
	._compat_destroy_ah = compat_op_unsupported,
	._compat_destroy_cq = compat_op_unsupported,
	._compat_destroy_qp = compat_op_unsupported,
	._compat_destroy_srq = compat_op_unsupported,
	._compat_detach_mcast = compat_op_unsupported,
	._compat_modify_qp = compat_op_unsupported,
	._compat_modify_srq = compat_op_unsupported,
	._compat_query_device = wisp_query_device_1_1,
	._compat_query_port = wisp_query_port_1_1,
	._compat_query_qp = compat_op_unsupported,
	._compat_query_srq = compat_op_unsupported,
	._compat_reg_mr = compat_op_unsupported,
	._compat_rereg_mr = compat_op_unsupported,
	._compat_resize_cq = compat_op_unsupported,
	.bind_mw = bind_mw_unsupported,
	.dealloc_mw = dealloc_mw_unsupported,
	.poll_cq = wisp_poll_cq,
	.post_recv = wisp_post_recv,
	.post_send = wisp_post_send,
	.post_srq_recv = wisp_post_srq_recv,
	.req_notify_cq = wisp_req_notify_cq,
};

struct ibv_context *wisp_open_device_1_1(struct ibv_device *device)
{
	struct wisp_context *wctx;
	int n, err;

	if (!is_wisp_dev(device)) {
		errno = ENODEV;
		return NULL;
	}
	wctx = calloc(1, sizeof(*wctx));
	if (!wctx) {
		errno = ENOMEM;
		return NULL;
	}
	n = wisp_gid_table_scan(&wctx->gid_tbl);
	if (n < 0) {
		err = -n;
		goto err_free_ctx;
	}
	wctx->gid_cnt = n;
	err = wisp_context_init(wctx);
	if (err)
		goto err_free_gids;

	/*
	 * An extended context: abi_compat and sz let the inline verbs of
	 * verbs.h (verbs_get_ctx_op) find the ops set here; those left NULL
	 * (open_xrcd, create_flow, alloc_td, ...) make them fail with
	 * EOPNOTSUPP. cmd_fd is -1, as rdma-core leaves it for a device
	 * without a kernel uverbs node: wisp has no command channel.
	 */
	wctx->vctx = (struct verbs_context){
		.create_cq_ex = wisp_create_cq_ex,
		.create_qp_ex = wisp_create_qp_ex,
		.create_srq_ex = wisp_create_srq_ex,
		.query_device_ex = wisp_query_device_ex,
		.query_port = wisp_query_port,
		.sz = sizeof(struct verbs_context),
		.context = {
			.abi_compat = __VERBS_ABI_IS_EXTENDED,
			.async_fd = wctx->async_efd,
			.cmd_fd = -1,
			.device = device,
			/* one engine thread per context */
			.num_comp_vectors = 1,
			.ops = wisp_ctx_ops,
		},
	};
	pthread_mutex_init(&wctx->vctx.context.mutex, NULL);
	return &wctx->vctx.context;

err_free_gids:
	free(wctx->gid_tbl);
err_free_ctx:
	free(wctx);
	errno = err;
	return NULL;
}
WISP_SYMVER(wisp_open_device_1_1, "ibv_open_device@@IBVERBS_1.1");

/* Like rdma-core, always 0; objects still open with it are the caller's
 * leak. */
int wisp_close_device_1_1(struct ibv_context *context)
{
	struct wisp_context *wctx = to_wctx(context);

	wisp_context_fini(wctx);
	pthread_mutex_destroy(&wctx->vctx.context.mutex);
	free(wctx->gid_tbl);
	free(wctx);
	return 0;
}
WISP_SYMVER(wisp_close_device_1_1, "ibv_close_device@@IBVERBS_1.1");
