/* SPDX-License-Identifier: MIT */
/*
 * verbs_misc.c - the device-independent verbs (names, rates, fork), and
 * the verbs an iWARP RNIC like wisp0 has no use for: address handles and
 * multicast (UD only), ECE, object import, dma-buf MRs.
 *
 * An unsupported verb fails the way its caller already handles: NULL with
 * errno EOPNOTSUPP from a constructor, EOPNOTSUPP from an int verb, or
 * rdma-core's own convention where a verb has one (noted).
 */
#include "verbs_abi.h"
#include "wisp_verbs.h"

#include <errno.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- names -------------------------------------------------------------
 * The strings are rdma-core's: programs print them and people grep logs
 * for them. Out-of-range values read "unknown", as there. */

const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	static const char *const names[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};

	if ((unsigned int)node_type >= ARRAY_SIZE(names) || !names[node_type])
		return "unknown";
	return names[node_type];
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
	static const char *const names[] = {
		[IBV_PORT_NOP] = "no state change (NOP)",
		[IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",
		[IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",
		[IBV_PORT_ACTIVE_DEFER] = "active defer",
	};

	if ((unsigned int)port_state >= ARRAY_SIZE(names))
		return "unknown";
	return names[port_state];
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const names[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] =
			"invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] =
			"local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};

	if ((unsigned int)event >= ARRAY_SIZE(names))
		return "unknown";
	return names[event];
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};

	if ((unsigned int)status >= ARRAY_SIZE(names))
		return "unknown";
	return names[status];
}

/* ---- static rates ------------------------------------------------------
 * One row per enum ibv_rate value: its multiple of 2.5 Gb/s (-1 for the
 * rates that are none: FDR, EDR and HDR-era signalling) and its data rate
 * in Mb/s after line coding. */

static const struct {
	enum ibv_rate rate;
	int mult;
	int mbps;
} rate_tbl[] = {
	{ IBV_RATE_2_5_GBPS,   1,    2500 },
	{ IBV_RATE_5_GBPS,     2,    5000 },
	{ IBV_RATE_10_GBPS,    4,   10000 },
	{ IBV_RATE_20_GBPS,    8,   20000 },
	{ IBV_RATE_30_GBPS,   12,   30000 },
	{ IBV_RATE_40_GBPS,   16,   40000 },
	{ IBV_RATE_60_GBPS,   24,   60000 },
	{ IBV_RATE_80_GBPS,   32,   80000 },
	{ IBV_RATE_120_GBPS,  48,  120000 },
	{ IBV_RATE_14_GBPS,   -1,   14062 },
	{ IBV_RATE_56_GBPS,   -1,   56250 },
	{ IBV_RATE_112_GBPS,  -1,  112500 },
	{ IBV_RATE_168_GBPS,  -1,  168750 },
	{ IBV_RATE_25_GBPS,   -1,   25781 },
	{ IBV_RATE_100_GBPS,  -1,  103125 },
	{ IBV_RATE_200_GBPS,  -1,  206250 },
	{ IBV_RATE_300_GBPS,  -1,  309375 },
	{ IBV_RATE_28_GBPS,   11,   28125 },
	{ IBV_RATE_50_GBPS,   20,   53125 },
	{ IBV_RATE_400_GBPS, 160,  425000 },
	{ IBV_RATE_600_GBPS, 240,  637500 },
	{ IBV_RATE_800_GBPS, 320,  850000 },
	{ IBV_RATE_1200_GBPS, 480, 1275000 },
};

/* -1 for IBV_RATE_MAX and unknown values */
int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < ARRAY_SIZE(rate_tbl); i++)
		if (rate_tbl[i].rate == rate)
			return rate_tbl[i].mult;
	return -1;
}

/* IBV_RATE_MAX when no rate is that multiple */
enum ibv_rate mult_to_ibv_rate(int mult)
{
	if (mult <= 0)          /* not the table's -1 */
		return IBV_RATE_MAX;
	for (size_t i = 0; i < ARRAY_SIZE(rate_tbl); i++)
		if (rate_tbl[i].mult == mult)
			return rate_tbl[i].rate;
	return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < ARRAY_SIZE(rate_tbl); i++)
		if (rate_tbl[i].rate == rate)
			return rate_tbl[i].mbps;
	return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < ARRAY_SIZE(rate_tbl); i++)
		if (rate_tbl[i].mbps == mbps)
			return rate_tbl[i].rate;
	return IBV_RATE_MAX;
}

/* ---- fork ---------------------------------------------------------------
 * rdma-core madvise()s registered memory DONTFORK so that a child's
 * copy-on-write cannot pull pages from under the pinned DMA. wisp pins
 * nothing: the engine reads and writes the parent's memory through the
 * parent's own mappings, so fork needs no care; rdma-core reports such a
 * kernel as IBV_FORK_UNNEEDED. */

int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

/* ---- address handles and multicast: UD only ---------------------------- */

struct ibv_ah *wisp_create_ah_1_1(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	(void)pd;
	(void)attr;
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_create_ah_1_1, "ibv_create_ah@@IBVERBS_1.1");

int wisp_destroy_ah_1_1(struct ibv_ah *ah)
{
	(void)ah;
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_destroy_ah_1_1, "ibv_destroy_ah@@IBVERBS_1.1");

/* rdma-core: 0 or -1 (errno set) */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
			struct ibv_wc *wc, struct ibv_grh *grh,
			struct ibv_ah_attr *ah_attr)
{
	(void)context;
	(void)port_num;
	(void)wc;
	(void)grh;
	(void)ah_attr;
	errno = EOPNOTSUPP;
	return -1;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
				     struct ibv_grh *grh, uint8_t port_num)
{
	(void)pd;
	(void)wc;
	(void)grh;
	(void)port_num;
	errno = EOPNOTSUPP;
	return NULL;
}

int wisp_attach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid,
			  uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_attach_mcast_1_1, "ibv_attach_mcast@@IBVERBS_1.1");

int wisp_detach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid,
			  uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_detach_mcast_1_1, "ibv_detach_mcast@@IBVERBS_1.1");

/* RoCE's neighbour lookup for an AH; rdma-core returns a negative errno. */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
				struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE],
				uint16_t *vid)
{
	(void)context;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	errno = EOPNOTSUPP;
	return -EOPNOTSUPP;
}

/* ---- ECE (enhanced connection establishment, an RDMA-CM option) ------- */

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

/* ---- import: objects shared through a kernel uverbs fd ------------------ */

struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* ---- dma-buf MRs: device memory has no meaning to a software RNIC ------ */

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				 size_t length, uint64_t iova, int fd,
				 int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	errno = EOPNOTSUPP;
	return NULL;
}
