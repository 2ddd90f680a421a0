/* SPDX-License-Identifier: MIT */
/*
 * wisp's libibverbs.so.1, device side, through rdma-core's public API
 * only (the inline verbs of verbs.h included): the device list, the
 * context and its ops, query device/port/GID/P_Key against siw's values
 * and the host's interfaces, PDs, the verbs wisp refuses, the name and
 * rate helpers, and the asynchronous event queue. The data path (MRs,
 * CQs, QPs) has its own suite.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <infiniband/verbs.h>

#include "wisp_verbs.h"
/* after wisp_verbs.h, whose prototypes name a parameter ctx */
#include "verbs_open.h"

/* Exports that rdma-core declares only in its uninstalled driver.h:
 * ibv_query_gid_type (IBVERBS_PRIVATE_34) is imported by ibv_devinfo,
 * the others (IBVERBS_1.0 / 1.1) by ibv_devinfo and the providers. */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

/* Linux siw's limits (drivers/infiniband/sw/siw/siw.h, siw-abi.h): per-QP
 * and per-WR limits wisp must match at least. */
#define SIW_MAX_QP_WR     (1024 * 32)
#define SIW_MAX_SGE       6
#define SIW_MAX_SGE_RD    1
#define SIW_MAX_ORD_QP    128
#define SIW_MAX_IRD_QP    128
#define SIW_VENDOR_ID     0x626d74

TestSuite(verbs_device, .init = wisp0_open, .fini = wisp0_close);

/*
 * What GID 0 must be, found independently: the MAC of the non-loopback
 * interface with a 6-octet MAC and the lowest ifindex; false if there is
 * none (then wisp derives one from the host name).
 */
static bool host_first_mac(uint8_t mac[6], unsigned int *ifindex)
{
	static const uint8_t zero[6];
	struct ifaddrs *ifas, *ifa;
	bool found = false;

	cr_assert_eq(getifaddrs(&ifas), 0);
	for (ifa = ifas; ifa; ifa = ifa->ifa_next) {
		const struct sockaddr_ll *sll;

		if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_PACKET ||
		    (ifa->ifa_flags & IFF_LOOPBACK))
			continue;
		sll = (const struct sockaddr_ll *)(const void *)ifa->ifa_addr;
		if (sll->sll_halen != 6 || !memcmp(sll->sll_addr, zero, 6))
			continue;
		if (found && (unsigned int)sll->sll_ifindex >= *ifindex)
			continue;
		memcpy(mac, sll->sll_addr, 6);
		*ifindex = (unsigned int)sll->sll_ifindex;
		found = true;
	}
	freeifaddrs(ifas);
	return found;
}

/* ---- device list ------------------------------------------------------- */

Test(verbs_device, one_device_wisp0)
{
	struct ibv_device *dev = dev_list[0];
	struct ibv_device **again;
	int n = -1;

	cr_assert_null(dev_list[1], "the list is NULL-terminated");
	cr_assert_str_eq(ibv_get_device_name(dev), "wisp0");
	cr_assert_str_eq(dev->name, "wisp0");
	cr_assert_str_eq(dev->dev_name, "wisp0");
	cr_assert_str_eq(dev->ibdev_path, "/sys/class/infiniband/wisp0");
	cr_assert_eq(dev->node_type, IBV_NODE_RNIC);
	cr_assert_eq(dev->transport_type, IBV_TRANSPORT_IWARP);
	cr_assert_eq(ibv_get_device_index(dev), 0);

	/* Each call returns its own array; the device is the same. */
	again = ibv_get_device_list(&n);
	cr_assert_not_null(again);
	cr_assert_eq(n, 1);
	cr_assert_neq(again, dev_list);
	cr_assert_eq(again[0], dev);
	ibv_free_device_list(again);
	again = ibv_get_device_list(NULL);
	cr_assert_not_null(again, "num is optional");
	ibv_free_device_list(again);
}

Test(verbs_device, guid_is_eui64_of_first_mac)
{
	uint8_t mac[6], eui[8];
	unsigned int ifindex;
	__be64 guid = ibv_get_device_guid(dev_list[0]);
	struct ibv_device_attr attr;

	memcpy(eui, &guid, sizeof(eui));
	if (host_first_mac(mac, &ifindex)) {
		const uint8_t want[8] = { mac[0] ^ 0x02, mac[1], mac[2], 0xff,
					  0xfe, mac[3], mac[4], mac[5] };

		cr_assert_arr_eq(eui, want, sizeof(want));
	} else {
		cr_assert_eq(eui[3], 0xff);
		cr_assert_eq(eui[4], 0xfe);
	}
	cr_assert_eq(ibv_query_device(ctx, &attr), 0);
	cr_assert_eq(attr.node_guid, guid);
	cr_assert_eq(attr.sys_image_guid, guid);
}

/* ---- context ------------------------------------------------------------ */

Test(verbs_device, extended_context)
{
	struct verbs_context *vctx = verbs_get_ctx(ctx);

	cr_assert_eq(ctx->device, dev_list[0]);
	cr_assert_geq(ctx->async_fd, 0);
	cr_assert_eq(ctx->cmd_fd, -1, "no kernel command channel");
	cr_assert_geq(ctx->num_comp_vectors, 1);
	cr_assert_not_null(vctx, "abi_compat marks an extended context");
	cr_assert_eq(vctx->sz, sizeof(struct verbs_context));

	/* The inline verbs find the ops wisp provides ... */
	cr_assert_not_null(verbs_get_ctx_op(ctx, query_port));
	cr_assert_not_null(verbs_get_ctx_op(ctx, query_device_ex));
	cr_assert_not_null(verbs_get_ctx_op(ctx, create_cq_ex));
	cr_assert_not_null(verbs_get_ctx_op(ctx, create_qp_ex));
	cr_assert_not_null(verbs_get_ctx_op(ctx, create_srq_ex));
	/* ... and not those it lacks. */
	cr_assert_null(verbs_get_ctx_op(ctx, open_xrcd));
	cr_assert_null(verbs_get_ctx_op(ctx, open_qp));
	cr_assert_null(verbs_get_ctx_op(ctx, ibv_create_flow));
	cr_assert_null(verbs_get_ctx_op(ctx, alloc_td));

	/* ibv_post_send & co. are inline calls through ctx->ops. */
	cr_assert_not_null(ctx->ops.post_send);
	cr_assert_not_null(ctx->ops.post_recv);
	cr_assert_not_null(ctx->ops.post_srq_recv);
	cr_assert_not_null(ctx->ops.poll_cq);
	cr_assert_not_null(ctx->ops.req_notify_cq);
	cr_assert_null(ctx->ops.alloc_mw, "no memory windows");
	cr_assert_not_null(ctx->ops._compat_query_port);
	cr_assert_not_null(ctx->ops._compat_query_device);
}

Test(verbs_device, open_twice_independent)
{
	struct ibv_context *c2 = ibv_open_device(dev_list[0]);

	cr_assert_not_null(c2);
	cr_assert_neq(c2, ctx);
	cr_assert_neq(c2->async_fd, ctx->async_fd);
	cr_assert_eq(ibv_close_device(c2), 0);
}

/* ---- query_device --------------------------------------------------------- */

Test(verbs_device, query_device_limits)
{
	struct ibv_device_attr a;

	memset(&a, 0xa5, sizeof(a));
	cr_assert_eq(ibv_query_device(ctx, &a), 0);
	cr_assert_str_not_empty(a.fw_ver);
	cr_assert_eq(a.vendor_id, WISP_VENDOR_ID);
	cr_assert_eq(a.vendor_id, SIW_VENDOR_ID);
	cr_assert_eq(a.vendor_part_id, WISP_VENDOR_PART_ID);
	cr_assert_eq(a.hw_ver, 0);
	cr_assert_eq(a.phys_port_cnt, 1);
	cr_assert_eq(a.max_mr_size, ~0ull);
	cr_assert_eq(a.page_size_cap, (uint64_t)sysconf(_SC_PAGESIZE));
	cr_assert_eq(a.atomic_cap, IBV_ATOMIC_NONE);
	cr_assert_eq(a.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS,
		     IBV_DEVICE_MEM_MGT_EXTENSIONS);

	/* Per QP and per WR: at least siw. */
	cr_assert_geq(a.max_qp_wr, SIW_MAX_QP_WR);
	cr_assert_geq(a.max_sge, SIW_MAX_SGE);
	cr_assert_geq(a.max_sge_rd, SIW_MAX_SGE_RD);
	cr_assert_geq(a.max_qp_rd_atom, SIW_MAX_IRD_QP);
	cr_assert_geq(a.max_qp_init_rd_atom, SIW_MAX_ORD_QP);
	cr_assert_geq(a.max_srq_sge, SIW_MAX_SGE);

	/* Object counts: wisp_verbs.h's. */
	cr_assert_eq(a.max_qp, WISP_MAX_QP);
	cr_assert_eq(a.max_qp_wr, WISP_MAX_QP_WR);
	cr_assert_eq(a.max_sge, WISP_MAX_SGE);
	cr_assert_eq(a.max_sge_rd, WISP_MAX_SGE_RD);
	cr_assert_eq(a.max_cq, WISP_MAX_CQ);
	cr_assert_eq(a.max_cqe, WISP_MAX_CQE);
	cr_assert_eq(a.max_mr, (int)WISP_MAX_MR);
	cr_assert_eq(a.max_pd, WISP_MAX_PD);
	cr_assert_eq(a.max_srq, WISP_MAX_SRQ);
	cr_assert_eq(a.max_srq_wr, WISP_MAX_SRQ_WR);
	cr_assert_eq(a.max_res_rd_atom, WISP_MAX_QP * WISP_MAX_IRD);

	/* Nothing of InfiniBand's or UD's. */
	cr_assert_eq(a.max_ah, 0);
	cr_assert_eq(a.max_mw, 0);
	cr_assert_eq(a.max_mcast_grp, 0);
	cr_assert_eq(a.max_ee, 0);
	cr_assert_eq(a.max_rdd, 0);
	cr_assert_eq(a.max_fmr, 0);
}

Test(verbs_device, query_device_ex)
{
	struct ibv_device_attr_ex ex;
	struct ibv_device_attr a;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };

	memset(&ex, 0xa5, sizeof(ex));
	cr_assert_eq(ibv_query_device_ex(ctx, NULL, &ex), 0);
	cr_assert_eq(ibv_query_device(ctx, &a), 0);
	cr_assert_arr_eq(&ex.orig_attr, &a, sizeof(a));
	cr_assert_eq(ex.comp_mask, 0);
	cr_assert_eq(ex.odp_caps.general_caps, 0);
	cr_assert_eq(ex.device_cap_flags_ex, 0);
	cr_assert_eq(ex.completion_timestamp_mask, 0);
	cr_assert_eq(ex.max_dm_size, 0);
	cr_assert_eq(ex.phys_port_cnt_ex, 1);

	cr_assert_eq(ibv_query_device_ex(ctx, &in, &ex), EINVAL,
		     "unknown input comp_mask");
}

/* ---- query_port ------------------------------------------------------------ */

static void check_port(const struct ibv_port_attr *p)
{
	cr_assert_eq(p->state, IBV_PORT_ACTIVE);
	cr_assert_str_eq(ibv_port_state_str(p->state), "active");
	cr_assert_eq(p->link_layer, IBV_LINK_LAYER_ETHERNET);
	cr_assert_eq(p->max_mtu, IBV_MTU_4096);
	cr_assert_eq(p->active_mtu, IBV_MTU_4096);
	cr_assert_geq(p->gid_tbl_len, 1);
	cr_assert_eq(p->pkey_tbl_len, 1);
	cr_assert_eq(p->lid, 0);
	cr_assert_eq(p->sm_lid, 0);
	cr_assert_eq(p->lmc, 0);
	cr_assert_eq(p->max_msg_sz, UINT32_MAX);
	cr_assert_eq(p->port_cap_flags & IBV_PORT_CM_SUP, IBV_PORT_CM_SUP);
	cr_assert_neq(p->active_width, 0);
	cr_assert_neq(p->active_speed, 0);
	cr_assert_eq(p->phys_state, 5, "LinkUp");
}

/* The inline ibv_query_port of today's verbs.h: verbs_context's op. */
Test(verbs_device, query_port_inline)
{
	struct ibv_port_attr p;

	memset(&p, 0xa5, sizeof(p));
	cr_assert_eq(ibv_query_port(ctx, 1, &p), 0);
	check_port(&p);
	cr_assert_eq(p.port_cap_flags2, 0);
	cr_assert_eq(ibv_query_port(ctx, 0, &p), EINVAL);
	cr_assert_eq(ibv_query_port(ctx, 2, &p), EINVAL);
}

/* The exported ibv_query_port, as a binary built before the inline calls
 * it: it fills rdma-core 44's 48-octet _compat_ibv_port_attr and no
 * more. */
Test(verbs_device, query_port_exported)
{
	unsigned char buf[sizeof(struct ibv_port_attr) + 16];
	struct ibv_port_attr p;
	int (*compat_query_port)(struct ibv_context *, uint8_t,
				 struct _compat_ibv_port_attr *);

	memset(buf, 0xa5, sizeof(buf));
	cr_assert_eq((ibv_query_port)(ctx, 1,
				      (struct _compat_ibv_port_attr *)buf), 0);
	for (size_t i = 48; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xa5, "octet %zu written", i);
	memset(&p, 0, sizeof(p));
	memcpy(&p, buf, 48);
	check_port(&p);
	cr_assert_eq((ibv_query_port)(ctx, 7,
				      (struct _compat_ibv_port_attr *)buf),
		     EINVAL);

	/* rdma-core also wires the exported verb into ops._compat_query_port. */
	compat_query_port = ctx->ops._compat_query_port;
	memset(buf, 0, sizeof(buf));
	cr_assert_eq(compat_query_port(ctx, 1,
				       (struct _compat_ibv_port_attr *)buf), 0);
	memcpy(&p, buf, 48);
	cr_assert_eq(p.state, IBV_PORT_ACTIVE);
}

/* ---- GIDs ---------------------------------------------------------------- */

/*
 * GID 0 is the IPv6 link-local form of the first interface's MAC,
 * fe80::<EUI-64> (RFC 4291 section 2.5.6 and appendix A). siw puts the
 * bare MAC in the first 6 octets, which leaves the interface identifier
 * zero: ibv_devinfo and rdma-core's Python tests take such a GID for an
 * empty slot and find none. The node GUID is the same EUI-64.
 */
Test(verbs_device, gid0_from_host_interfaces)
{
	static const uint8_t prefix[8] = { 0xfe, 0x80 };
	union ibv_gid gid;
	uint8_t mac[6];
	unsigned int ifindex = 0;
	struct ibv_gid_entry e;
	__be64 guid = ibv_get_device_guid(dev_list[0]);

	cr_assert_eq(ibv_query_gid(ctx, 1, 0, &gid), 0);
	cr_assert_arr_eq(gid.raw, prefix, 8, "link-local prefix");
	cr_assert_arr_eq(gid.raw + 8, &guid, 8, "the node GUID's EUI-64");
	cr_assert_eq(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
	cr_assert_arr_eq(e.gid.raw, gid.raw, 16);
	if (host_first_mac(mac, &ifindex)) {
		const uint8_t eui[8] = { mac[0] ^ 0x02, mac[1], mac[2], 0xff,
					 0xfe, mac[3], mac[4], mac[5] };

		cr_assert_arr_eq(gid.raw + 8, eui, 8);
		cr_assert_eq(e.ndev_ifindex, ifindex);
	} else {
		cr_log_info("no interface with a MAC: host-name GID");
		cr_assert_eq(gid.raw[8] & 0x03, 0x00,
			     "a locally administered MAC, bit inverted");
		cr_assert_eq(e.ndev_ifindex, 0);
	}
}

Test(verbs_device, gid_table)
{
	struct ibv_port_attr p;
	struct ibv_gid_entry *t;
	union ibv_gid gid;
	ssize_t n;

	cr_assert_eq(ibv_query_port(ctx, 1, &p), 0);
	t = calloc((size_t)p.gid_tbl_len, sizeof(*t));
	cr_assert_not_null(t);
	n = ibv_query_gid_table(ctx, t, (size_t)p.gid_tbl_len, 0);
	cr_assert_eq(n, p.gid_tbl_len);
	for (int i = 0; i < p.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		cr_assert_eq(ibv_query_gid(ctx, 1, i, &gid), 0);
		cr_assert_arr_eq(t[i].gid.raw, gid.raw, 16, "GID %d", i);
		cr_assert_eq(t[i].gid_index, (uint32_t)i);
		cr_assert_eq(t[i].port_num, 1);
		cr_assert_eq(t[i].gid_type, IBV_GID_TYPE_IB,
			     "iWARP GIDs are IB-typed");
		cr_assert_eq(ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0), 0);
		cr_assert_arr_eq(&e, &t[i], sizeof(e));
		if (i > 0)
			cr_assert_gt(t[i].ndev_ifindex, t[i - 1].ndev_ifindex,
				     "ifindex order");
	}

	/* Out of range: rdma-core's conventions, verb by verb. */
	errno = 0;
	cr_assert_eq(ibv_query_gid(ctx, 1, p.gid_tbl_len, &gid), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(ibv_query_gid(ctx, 1, -1, &gid), -1);
	cr_assert_eq(ibv_query_gid(ctx, 2, 0, &gid), -1);
	cr_assert_eq(ibv_query_gid_ex(ctx, 1, (uint32_t)p.gid_tbl_len, t, 0),
		     EINVAL);
	cr_assert_eq(ibv_query_gid_ex(ctx, 1, 0, t, 1), EOPNOTSUPP);
	cr_assert_eq(ibv_query_gid_table(ctx, t, (size_t)p.gid_tbl_len - 1, 0),
		     -EINVAL, "a table that does not fit");
	cr_assert_eq(ibv_query_gid_table(ctx, t, (size_t)p.gid_tbl_len, 1),
		     -EOPNOTSUPP);
	free(t);
}

/* A caller built against a newer verbs.h passes a larger entry: the tail
 * is zeroed, the stride respected. */
Test(verbs_device, gid_entry_size_larger)
{
	struct big {
		struct ibv_gid_entry e;
		uint64_t future;
	} t[WISP_MAX_GIDS];
	ssize_t n;

	memset(t, 0xa5, sizeof(t));
	n = _ibv_query_gid_table(ctx, &t[0].e, WISP_MAX_GIDS, 0, sizeof(t[0]));
	cr_assert_geq(n, 1);
	for (ssize_t i = 0; i < n; i++) {
		cr_assert_eq(t[i].future, 0);
		cr_assert_eq(t[i].e.gid_index, (uint32_t)i);
	}
	cr_assert_eq(_ibv_query_gid_ex(ctx, 1, 0, &t[0].e, 0,
				       sizeof(t[0].e) - 1), EINVAL);
}

Test(verbs_device, gid_type)
{
	enum ibv_gid_type_sysfs type = IBV_GID_TYPE_SYSFS_ROCE_V2;

	/* ibv_devinfo prints a GID only if this succeeds. */
	cr_assert_eq(ibv_query_gid_type(ctx, 1, 0, &type), 0);
	cr_assert_eq(type, IBV_GID_TYPE_SYSFS_IB_ROCE_V1);
	cr_assert_eq(ibv_query_gid_type(ctx, 1, WISP_MAX_GIDS, &type), -1);
	cr_assert_eq(ibv_query_gid_type(ctx, 3, 0, &type), -1);
}

/* ---- P_Key ------------------------------------------------------------------ */

Test(verbs_device, pkey)
{
	__be16 pkey = 0;

	cr_assert_eq(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
	cr_assert_eq(pkey, htobe16(0xffff));
	cr_assert_eq(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
	cr_assert_eq(ibv_query_pkey(ctx, 2, 0, &pkey), -1);
	cr_assert_eq(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
	cr_assert_eq(ibv_get_pkey_index(ctx, 1, htobe16(0x7fff)), -1);
}

/* ---- PDs -------------------------------------------------------------------- */

Test(verbs_device, pd_alloc_dealloc)
{
	struct ibv_pd *a = ibv_alloc_pd(ctx);
	struct ibv_pd *b = ibv_alloc_pd(ctx);

	cr_assert_not_null(a);
	cr_assert_not_null(b);
	cr_assert_eq(a->context, ctx);
	cr_assert_eq(b->context, ctx);
	cr_assert_neq(a->handle, b->handle);
	cr_assert_eq(ibv_dealloc_pd(a), 0);
	cr_assert_eq(ibv_dealloc_pd(b), 0);
}

/* ---- what wisp refuses ------------------------------------------------------- */

Test(verbs_device, unsupported_verbs)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_qp qp = { .context = ctx, .pd = pd };
	struct ibv_ah_attr ah_attr = { .port_num = 1 };
	struct ibv_wc wc = { 0 };
	struct ibv_grh grh = { 0 };
	struct ibv_xrcd_init_attr xrcd_attr = { 0 };
	struct ibv_td_init_attr td_attr = { 0 };
	struct ibv_alloc_dm_attr dm_attr = { .length = 64 };
	struct ibv_values_ex values = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	struct ibv_counters_init_attr cnt_attr = { 0 };
	struct ibv_ece ece = { 0 };
	union ibv_gid gid = { .raw = { 0xff } };
	uint8_t mac[ETHERNET_LL_SIZE];
	uint16_t vid;
	char buf[64];

	cr_assert_not_null(pd);

#define EXPECT_NULL_EOPNOTSUPP(call)                                         \
	do {                                                                 \
		errno = 0;                                                   \
		cr_assert_null(call, #call);                                 \
		cr_assert_eq(errno, EOPNOTSUPP, #call ": errno %d", errno);  \
	} while (0)

	/* UD: address handles and multicast */
	EXPECT_NULL_EOPNOTSUPP(ibv_create_ah(pd, &ah_attr));
	EXPECT_NULL_EOPNOTSUPP(ibv_create_ah_from_wc(pd, &wc, &grh, 1));
	cr_assert_eq(ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &ah_attr), -1);
	cr_assert_eq(ibv_attach_mcast(&qp, &gid, 0), EOPNOTSUPP);
	cr_assert_eq(ibv_detach_mcast(&qp, &gid, 0), EOPNOTSUPP);
	cr_assert_lt(ibv_resolve_eth_l2_from_gid(ctx, &ah_attr, mac, &vid), 0);

	/* verbs_context ops left NULL: the inline verbs refuse */
	EXPECT_NULL_EOPNOTSUPP(ibv_alloc_mw(pd, IBV_MW_TYPE_1));
	EXPECT_NULL_EOPNOTSUPP(ibv_open_xrcd(ctx, &xrcd_attr));
	EXPECT_NULL_EOPNOTSUPP(ibv_alloc_td(ctx, &td_attr));
	EXPECT_NULL_EOPNOTSUPP(ibv_alloc_dm(ctx, &dm_attr));
	EXPECT_NULL_EOPNOTSUPP(ibv_alloc_null_mr(pd));
	EXPECT_NULL_EOPNOTSUPP(ibv_create_counters(ctx, &cnt_attr));
	cr_assert_eq(ibv_query_rt_values_ex(ctx, &values), EOPNOTSUPP);
	cr_assert_eq(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0,
				   NULL, 0), EOPNOTSUPP);

	/* the kernel's object sharing and dma-buf */
	EXPECT_NULL_EOPNOTSUPP(ibv_import_device(-1));
	EXPECT_NULL_EOPNOTSUPP(ibv_import_pd(ctx, 1));
	EXPECT_NULL_EOPNOTSUPP(ibv_import_mr(pd, 1));
	EXPECT_NULL_EOPNOTSUPP(ibv_import_dm(ctx, 1));
	EXPECT_NULL_EOPNOTSUPP(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, 0));

	/* ECE */
	cr_assert_eq(ibv_set_ece(&qp, &ece), EOPNOTSUPP);
	cr_assert_eq(ibv_query_ece(&qp, &ece), EOPNOTSUPP);
	cr_assert_eq(ibv_query_qp_data_in_order(&qp, IBV_WR_SEND, 0), 0);

	/* board_id and friends: no sysfs node behind wisp0 */
	cr_assert_eq(ibv_read_sysfs_file(dev_list[0]->ibdev_path, "board_id",
					 buf, sizeof(buf)), -1);
#undef EXPECT_NULL_EOPNOTSUPP
	cr_assert_eq(ibv_dealloc_pd(pd), 0);
}

/* ---- names and rates ---------------------------------------------------------- */

Test(verbs_device, strings)
{
	cr_assert_str_eq(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
	cr_assert_str_eq(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR),
			 "Work Request Flushed Error");
	cr_assert_str_eq(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR),
			 "remote access error");
	cr_assert_str_eq(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR),
			 "transport retry counter exceeded");
	cr_assert_str_eq(ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE),
			 "TM software rendezvous");
	cr_assert_str_eq(ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE + 1),
			 "unknown");
	cr_assert_str_eq(ibv_wc_status_str((enum ibv_wc_status)-1), "unknown");

	cr_assert_str_eq(ibv_node_type_str(IBV_NODE_RNIC), "iWARP NIC");
	cr_assert_str_eq(ibv_node_type_str(IBV_NODE_CA),
			 "InfiniBand channel adapter");
	cr_assert_str_eq(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");

	cr_assert_str_eq(ibv_port_state_str(IBV_PORT_DOWN), "down");
	cr_assert_str_eq(ibv_port_state_str(IBV_PORT_ACTIVE_DEFER),
			 "active defer");
	cr_assert_str_eq(ibv_port_state_str(IBV_PORT_ACTIVE_DEFER + 1),
			 "unknown");

	cr_assert_str_eq(ibv_event_type_str(IBV_EVENT_QP_FATAL),
			 "local work queue catastrophic error");
	cr_assert_str_eq(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE),
			 "port active");
	cr_assert_str_eq(ibv_event_type_str(IBV_EVENT_WQ_FATAL), "WQ fatal");
	cr_assert_str_eq(ibv_event_type_str(IBV_EVENT_WQ_FATAL + 1),
			 "unknown");
}

Test(verbs_device, rates)
{
	static const struct {
		enum ibv_rate rate;
		int mult, mbps;
	} v[] = {
		{ IBV_RATE_2_5_GBPS, 1, 2500 },
		{ IBV_RATE_10_GBPS, 4, 10000 },
		{ IBV_RATE_120_GBPS, 48, 120000 },
		{ IBV_RATE_14_GBPS, -1, 14062 },
		{ IBV_RATE_25_GBPS, -1, 25781 },
		{ IBV_RATE_100_GBPS, -1, 103125 },
		{ IBV_RATE_50_GBPS, 20, 53125 },
		{ IBV_RATE_1200_GBPS, 480, 1275000 },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		cr_assert_eq(ibv_rate_to_mult(v[i].rate), v[i].mult, "%zu", i);
		cr_assert_eq(ibv_rate_to_mbps(v[i].rate), v[i].mbps, "%zu", i);
		cr_assert_eq(mbps_to_ibv_rate(v[i].mbps), v[i].rate, "%zu", i);
		if (v[i].mult > 0)
			cr_assert_eq(mult_to_ibv_rate(v[i].mult), v[i].rate);
	}
	/* Every rate round-trips through Mb/s, and through its multiple
	 * when it has one. */
	for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; r++) {
		int mult = ibv_rate_to_mult((enum ibv_rate)r);

		cr_assert_eq(mbps_to_ibv_rate(ibv_rate_to_mbps((enum ibv_rate)r)),
			     (enum ibv_rate)r, "rate %d", r);
		if (mult > 0)
			cr_assert_eq(mult_to_ibv_rate(mult), (enum ibv_rate)r);
	}
	cr_assert_eq(ibv_rate_to_mult(IBV_RATE_MAX), -1);
	cr_assert_eq(ibv_rate_to_mbps(IBV_RATE_MAX), -1);
	cr_assert_eq(mult_to_ibv_rate(-1), IBV_RATE_MAX);
	cr_assert_eq(mult_to_ibv_rate(3), IBV_RATE_MAX);
	cr_assert_eq(mbps_to_ibv_rate(12345), IBV_RATE_MAX);
}

Test(verbs_device, fork)
{
	char page[64];

	cr_assert_eq(ibv_fork_init(), 0);
	cr_assert_eq(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
	cr_assert_eq(ibv_dontfork_range(page, sizeof(page)), 0);
	cr_assert_eq(ibv_dofork_range(page, sizeof(page)), 0);
}

/* ---- asynchronous events -------------------------------------------------------- */

static int poll_async(int timeout_ms)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

	return poll(&pfd, 1, timeout_ms);
}

Test(verbs_device, async_event_via_poll)
{
	struct ibv_async_event in[3] = {
		{ .event_type = IBV_EVENT_PORT_ACTIVE, .element.port_num = 1 },
		{ .event_type = IBV_EVENT_GID_CHANGE, .element.port_num = 1 },
		{ .event_type = IBV_EVENT_DEVICE_FATAL },
	};
	struct ibv_async_event out;

	cr_assert_eq(poll_async(0), 0, "nothing queued yet");
	for (int i = 0; i < 3; i++)
		wisp_async_event_push(ctx, &in[i]);

	/* Each event in order; async_fd readable until the last is taken. */
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(poll_async(1000), 1, "event %d", i);
		cr_assert_eq(ibv_get_async_event(ctx, &out), 0);
		cr_assert_eq(out.event_type, in[i].event_type);
		if (i < 2)
			cr_assert_eq(out.element.port_num, 1);
		ibv_ack_async_event(&out);
	}
	cr_assert_eq(poll_async(0), 0);

	/* Non-blocking, as an event loop sets it: -1/EAGAIN when empty. */
	cr_assert_eq(fcntl(ctx->async_fd, F_SETFL,
			   fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
	errno = 0;
	cr_assert_eq(ibv_get_async_event(ctx, &out), -1);
	cr_assert_eq(errno, EAGAIN);
}

/* Acknowledging counts the event on its object, under its mutex. */
Test(verbs_device, async_event_ack_counts)
{
	struct ibv_qp qp = { .context = ctx };
	struct ibv_cq cq = { .context = ctx };
	struct ibv_srq srq = { .context = ctx };
	struct ibv_async_event ev[] = {
		{ .event_type = IBV_EVENT_QP_FATAL, .element.qp = &qp },
		{ .event_type = IBV_EVENT_COMM_EST, .element.qp = &qp },
		{ .event_type = IBV_EVENT_CQ_ERR, .element.cq = &cq },
		{ .event_type = IBV_EVENT_SRQ_LIMIT_REACHED, .element.srq = &srq },
	};
	struct ibv_async_event out;

	pthread_mutex_init(&qp.mutex, NULL);
	pthread_cond_init(&qp.cond, NULL);
	pthread_mutex_init(&cq.mutex, NULL);
	pthread_cond_init(&cq.cond, NULL);
	pthread_mutex_init(&srq.mutex, NULL);
	pthread_cond_init(&srq.cond, NULL);

	for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++) {
		wisp_async_event_push(ctx, &ev[i]);
		cr_assert_eq(ibv_get_async_event(ctx, &out), 0);
		cr_assert_eq(out.event_type, ev[i].event_type);
		cr_assert_eq(out.element.qp, ev[i].element.qp);
		ibv_ack_async_event(&out);
	}
	cr_assert_eq(qp.events_completed, 2);
	cr_assert_eq(cq.async_events_completed, 1);
	cr_assert_eq(srq.events_completed, 1);
}

/* Events still queued when the context closes are freed with it (the
 * ASan build checks for the leak). */
Test(verbs_device, async_events_dropped_on_close)
{
	struct ibv_async_event ev = { .event_type = IBV_EVENT_PORT_ERR,
				      .element.port_num = 1 };
	struct ibv_context *c2 = ibv_open_device(dev_list[0]);

	cr_assert_not_null(c2);
	wisp_async_event_push(c2, &ev);
	wisp_async_event_push(c2, &ev);
	cr_assert_eq(ibv_close_device(c2), 0);
}
