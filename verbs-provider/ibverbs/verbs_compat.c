/* SPDX-License-Identifier: MIT */
/*
 * verbs_compat.c - the exports that exist for binary compatibility only:
 *
 *   - the IBVERBS_1.0 versions of 33 verbs (libibverbs 1.0, 2006), and
 *     ibv_register_driver@IBVERBS_1.1;
 *   - rdma-core's kernel-ABI helpers (ibv_copy_*_kern, sysfs readers)
 *     that other rdma-core libraries import from IBVERBS_1.0 / 1.1;
 *   - IBVERBS_PRIVATE_34, the interface between rdma-core and its
 *     providers (libmlx5, libefa, ...).
 *
 * None can do anything useful over wisp: the 1.0 ABI has other struct
 * layouts and wisp never hands out a 1.0 device, and no provider ever gets
 * a wisp context. They only have to be there for the dynamic linker (a
 * missing versioned symbol stops a program from starting; perftest pulls
 * in libmlx5 and libefa) and to fail cleanly if called anyway.
 */
#include "verbs_abi.h"
#include "wisp_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/* The stubs below take rdma-core's exact parameter lists and use none. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* ---- IBVERBS_1.0 ----------------------------------------------------- */

/* No 1.0 device exists: the list is empty, everything else fails. */
void **wisp_get_device_list_1_0(int *num)
{
	if (num)
		*num = 0;
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_get_device_list_1_0, "ibv_get_device_list@IBVERBS_1.0");

void wisp_free_device_list_1_0(void **list)
{
}
WISP_SYMVER(wisp_free_device_list_1_0, "ibv_free_device_list@IBVERBS_1.0");

const char *wisp_get_device_name_1_0(void *device)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_get_device_name_1_0, "ibv_get_device_name@IBVERBS_1.0");

__be64 wisp_get_device_guid_1_0(void *device)
{
	return 0;
}
WISP_SYMVER(wisp_get_device_guid_1_0, "ibv_get_device_guid@IBVERBS_1.0");

void *wisp_open_device_1_0(void *device)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_open_device_1_0, "ibv_open_device@IBVERBS_1.0");

int wisp_close_device_1_0(void *context)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_close_device_1_0, "ibv_close_device@IBVERBS_1.0");

int wisp_get_async_event_1_0(void *context, void *event)
{
	errno = EOPNOTSUPP;
	return -1;
}
WISP_SYMVER(wisp_get_async_event_1_0, "ibv_get_async_event@IBVERBS_1.0");

void wisp_ack_async_event_1_0(void *event)
{
}
WISP_SYMVER(wisp_ack_async_event_1_0, "ibv_ack_async_event@IBVERBS_1.0");

int wisp_query_device_1_0(void *context, struct ibv_device_attr *attr)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_query_device_1_0, "ibv_query_device@IBVERBS_1.0");

int wisp_query_port_1_0(void *context, uint8_t port_num, void *port_attr)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_query_port_1_0, "ibv_query_port@IBVERBS_1.0");

int wisp_query_gid_1_0(void *context, uint8_t port_num, int index,
		       union ibv_gid *gid)
{
	errno = EOPNOTSUPP;
	return -1;
}
WISP_SYMVER(wisp_query_gid_1_0, "ibv_query_gid@IBVERBS_1.0");

int wisp_query_pkey_1_0(void *context, uint8_t port_num, int index,
			__be16 *pkey)
{
	errno = EOPNOTSUPP;
	return -1;
}
WISP_SYMVER(wisp_query_pkey_1_0, "ibv_query_pkey@IBVERBS_1.0");

void *wisp_alloc_pd_1_0(void *context)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_alloc_pd_1_0, "ibv_alloc_pd@IBVERBS_1.0");

int wisp_dealloc_pd_1_0(void *pd)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_dealloc_pd_1_0, "ibv_dealloc_pd@IBVERBS_1.0");

void *wisp_reg_mr_1_0(void *pd, void *addr, size_t length, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_reg_mr_1_0, "ibv_reg_mr@IBVERBS_1.0");

int wisp_dereg_mr_1_0(void *mr)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_dereg_mr_1_0, "ibv_dereg_mr@IBVERBS_1.0");

void *wisp_create_cq_1_0(void *context, int cqe, void *cq_context,
			 void *channel, int comp_vector)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_create_cq_1_0, "ibv_create_cq@IBVERBS_1.0");

int wisp_resize_cq_1_0(void *cq, int cqe)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_resize_cq_1_0, "ibv_resize_cq@IBVERBS_1.0");

int wisp_destroy_cq_1_0(void *cq)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_destroy_cq_1_0, "ibv_destroy_cq@IBVERBS_1.0");

int wisp_get_cq_event_1_0(void *channel, void **cq, void **cq_context)
{
	errno = EOPNOTSUPP;
	return -1;
}
WISP_SYMVER(wisp_get_cq_event_1_0, "ibv_get_cq_event@IBVERBS_1.0");

void wisp_ack_cq_events_1_0(void *cq, unsigned int nevents)
{
}
WISP_SYMVER(wisp_ack_cq_events_1_0, "ibv_ack_cq_events@IBVERBS_1.0");

void *wisp_create_srq_1_0(void *pd, void *srq_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_create_srq_1_0, "ibv_create_srq@IBVERBS_1.0");

int wisp_modify_srq_1_0(void *srq, void *srq_attr, int srq_attr_mask)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_modify_srq_1_0, "ibv_modify_srq@IBVERBS_1.0");

int wisp_query_srq_1_0(void *srq, void *srq_attr)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_query_srq_1_0, "ibv_query_srq@IBVERBS_1.0");

int wisp_destroy_srq_1_0(void *srq)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_destroy_srq_1_0, "ibv_destroy_srq@IBVERBS_1.0");

void *wisp_create_qp_1_0(void *pd, void *qp_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_create_qp_1_0, "ibv_create_qp@IBVERBS_1.0");

int wisp_query_qp_1_0(void *qp, void *attr, int attr_mask, void *init_attr)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_query_qp_1_0, "ibv_query_qp@IBVERBS_1.0");

int wisp_modify_qp_1_0(void *qp, void *attr, int attr_mask)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_modify_qp_1_0, "ibv_modify_qp@IBVERBS_1.0");

int wisp_destroy_qp_1_0(void *qp)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_destroy_qp_1_0, "ibv_destroy_qp@IBVERBS_1.0");

void *wisp_create_ah_1_0(void *pd, void *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}
WISP_SYMVER(wisp_create_ah_1_0, "ibv_create_ah@IBVERBS_1.0");

int wisp_destroy_ah_1_0(void *ah)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_destroy_ah_1_0, "ibv_destroy_ah@IBVERBS_1.0");

int wisp_attach_mcast_1_0(void *qp, const union ibv_gid *gid, uint16_t lid)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_attach_mcast_1_0, "ibv_attach_mcast@IBVERBS_1.0");

int wisp_detach_mcast_1_0(void *qp, const union ibv_gid *gid, uint16_t lid)
{
	return EOPNOTSUPP;
}
WISP_SYMVER(wisp_detach_mcast_1_0, "ibv_detach_mcast@IBVERBS_1.0");

/* Providers of libibverbs <= 1.1.8 registered themselves with this;
 * rdma-core keeps it, obsolete, as a compat-only symbol. */
void wisp_register_driver_1_1(const char *name, void *init_func)
{
}
WISP_SYMVER(wisp_register_driver_1_1, "ibv_register_driver@IBVERBS_1.1");

/* ---- kernel-ABI conversions -------------------------------------------
 * Used with the kernel's ucma by rdma-core's librdmacm; pure copies,
 * implemented for real since they cost nothing. */

static void copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				   const struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				struct ib_uverbs_ah_attr *src)
{
	copy_ah_attr_from_kern(dst, src);
}

/* The fields ib_uverbs_qp_attr and ibv_qp_attr share by name. */
#define QP_ATTR_SCALARS(X) \
	X(qp_state) X(cur_qp_state) X(path_mtu) X(path_mig_state) X(qkey) \
	X(rq_psn) X(sq_psn) X(dest_qp_num) X(qp_access_flags) \
	X(pkey_index) X(alt_pkey_index) X(en_sqd_async_notify) \
	X(sq_draining) X(max_rd_atomic) X(max_dest_rd_atomic) \
	X(min_rnr_timer) X(port_num) X(timeout) X(retry_cnt) X(rnr_retry) \
	X(alt_port_num) X(alt_timeout)
#define QP_CAP_SCALARS(X) \
	X(max_send_wr) X(max_recv_wr) X(max_send_sge) X(max_recv_sge) \
	X(max_inline_data)

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				struct ib_uverbs_qp_attr *src)
{
#define COPY(f) dst->f = src->f;
#define COPY_CAP(f) dst->cap.f = src->f;
	QP_ATTR_SCALARS(COPY)
	QP_CAP_SCALARS(COPY_CAP)
#undef COPY
#undef COPY_CAP
	copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
}

/* The fields ib_user_path_rec and ibv_sa_path_rec share by name; both
 * hold the wire (big-endian) values. */
#define PATH_REC_SCALARS(X) \
	X(dlid) X(slid) X(raw_traffic) X(flow_label) X(hop_limit) \
	X(traffic_class) X(reversible) X(numb_path) X(pkey) X(sl) \
	X(mtu_selector) X(mtu) X(rate_selector) X(rate) \
	X(packet_life_time_selector) X(packet_life_time) X(preference)

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
				 struct ib_user_path_rec *src)
{
#define COPY(f) dst->f = src->f;
	PATH_REC_SCALARS(COPY)
#undef COPY
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
			       struct ibv_sa_path_rec *src)
{
#define COPY(f) dst->f = src->f;
	PATH_REC_SCALARS(COPY)
#undef COPY
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
}

/* ---- sysfs -------------------------------------------------------------- */

const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

/*
 * Read dir/file into buf as a string, trailing newline dropped: its
 * length, or -1 with errno set. ibv_devinfo reads board_id from wisp0's
 * ibdev_path, which does not exist, and prints nothing.
 */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size)
{
	char path[512];
	ssize_t len;
	int fd;

	if (!buf || size == 0 ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >=
		    sizeof(path)) {
		errno = EINVAL;
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size - 1);
	close(fd);
	if (len < 0)
		return -1;
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	buf[len] = '\0';
	return (int)len;
}

/* ---- IBVERBS_PRIVATE_34 ------------------------------------------------ */

/* rdma-core: set from RDMAV_ALLOW_DISASSOC_DESTROY; only the kernel
 * command path reads it. */
bool verbs_allow_disassociate_destroy;

/* A provider's constructor registers its driver here when it is loaded
 * (perftest links libmlx5 and libefa); wisp has no use for it. */
void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
}

/* rdma-core's logging, off unless VERBS_LOG_LEVEL is set: stays off. */
void __verbs_log(struct verbs_context *ctx, uint32_t level,
		 const char *fmt, ...)
{
}

/* rdma-core's provider-facing CQ initialisation: what its
 * ibv_create_cq does to a provider's new CQ. Harmless, so real. */
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context)
{
	cq->context = context;
	cq->channel = channel;
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	cq->cq_context = cq_context;
	cq->comp_events_completed = 0;
	cq->async_events_completed = 0;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
}

/* The attribute count of a command buffer: the provider's own part, as no
 * wisp command buffer is ever linked to one. */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
				     struct ibv_command_buffer *link)
{
	return num_attrs;
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_context *verbs_open_device(struct ibv_device *device,
				      void *private_data)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_set_ops(struct verbs_context *vctx,
		   const struct verbs_context_ops *ops)
{
}

void verbs_uninit_context(struct verbs_context *context)
{
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size,
			      struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...)
{
	errno = EOPNOTSUPP;
	return -1;
}

int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd)
{
	return EOPNOTSUPP;
}

/*
 * The kernel command wrappers. Each answers EOPNOTSUPP the way its own
 * callers read a failure: a positive errno, except ibv_cmd_poll_cq, whose
 * result is a completion count and whose failure is negative.
 */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		      uint32_t flags, struct ibv_sge *sg_list,
		      uint32_t num_sge)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_dm(struct ibv_context *ctx,
		     const struct ibv_alloc_dm_attr *dm_attr,
		     struct verbs_dm *dm, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type,
		     struct ibv_mw *mw, struct ibv_alloc_mw *cmd,
		     size_t cmd_size, struct ib_uverbs_alloc_mw_resp *resp,
		     size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
		     struct ibv_alloc_pd *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			 uint16_t lid)
{
	return EOPNOTSUPP;
}

int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah,
		      struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_counters(struct ibv_context *context,
			    struct ibv_counters_init_attr *init_attr,
			    struct verbs_counters *vcounters,
			    struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
		      struct ibv_comp_channel *channel, int comp_vector,
		      struct ibv_cq *cq, struct ibv_create_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_create_cq_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_cq_ex(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *cq_attr,
			 struct verbs_cq *cq, struct ibv_create_cq_ex *cmd,
			 size_t cmd_size,
			 struct ib_uverbs_ex_create_cq_resp *resp,
			 size_t resp_size, uint32_t cmd_flags)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id,
			struct ibv_flow_attr *flow_attr, void *ucmd,
			size_t ucmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx,
				   struct ibv_flow_action_esp_attr *attr,
				   struct verbs_flow_action *flow_action,
				   struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
		      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd,
		      size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
			 struct ibv_qp_init_attr_ex *attr_ex,
			 struct ibv_create_qp *cmd, size_t cmd_size,
			 struct ib_uverbs_create_qp_resp *resp,
			 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp,
			  struct ibv_qp_init_attr_ex *qp_attr,
			  struct ibv_create_qp_ex *cmd, size_t cmd_size,
			  struct ib_uverbs_ex_create_qp_resp *resp,
			  size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_rwq_ind_table(struct ibv_context *context,
				 struct ibv_rwq_ind_table_init_attr *init_attr,
				 struct ibv_rwq_ind_table *rwq_ind_table,
				 struct ib_uverbs_ex_create_rwq_ind_table_resp *resp,
				 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr,
		       struct ibv_create_srq *cmd, size_t cmd_size,
		       struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
			  struct ibv_srq_init_attr_ex *attr_ex,
			  struct ibv_create_xsrq *cmd, size_t cmd_size,
			  struct ib_uverbs_create_srq_resp *resp,
			  size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_wq(struct ibv_context *context,
		      struct ibv_wq_init_attr *wq_init_attr, struct ibv_wq *wq,
		      struct ibv_create_wq *cmd, size_t cmd_size,
		      struct ib_uverbs_ex_create_wq_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_mw(struct ibv_mw *mw)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_pd(struct ibv_pd *pd)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dereg_mr(struct verbs_mr *vmr)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_ah(struct ibv_ah *ah)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_counters(struct verbs_counters *vcounters)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow(struct ibv_flow *flow_id)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_wq(struct ibv_wq *wq)
{
	return EOPNOTSUPP;
}

int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			 uint16_t lid)
{
	return EOPNOTSUPP;
}

int ibv_cmd_free_dm(struct verbs_dm *dm)
{
	return EOPNOTSUPP;
}

int ibv_cmd_get_context(struct verbs_context *context,
			struct ibv_get_context *cmd, size_t cmd_size,
			struct ib_uverbs_get_context_resp *resp,
			size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr,
		      struct ibv_modify_cq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action,
				   struct ibv_flow_action_esp_attr *attr,
				   struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_modify_qp *cmd,
		      size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			 int attr_mask, struct ibv_modify_qp_ex *cmd,
			 size_t cmd_size,
			 struct ib_uverbs_ex_modify_qp_resp *resp,
			 size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd,
		       size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr,
		      struct ibv_modify_wq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp,
		    int vqp_sz, struct ibv_qp_open_attr *attr,
		    struct ibv_open_qp *cmd, size_t cmd_size,
		    struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd,
		      int vxrcd_size, struct ibv_xrcd_init_attr *attr,
		      struct ibv_open_xrcd *cmd, size_t cmd_size,
		      struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	errno = EOPNOTSUPP;
	return -1;
}

int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return EOPNOTSUPP;
}

int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr)
{
	*bad_wr = wr;
	return EOPNOTSUPP;
}

int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return EOPNOTSUPP;
}

int ibv_cmd_query_context(struct ibv_context *ctx,
			  struct ibv_command_buffer *driver)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_device_any(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp,
			     size_t *resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr,
		     uint32_t mr_handle)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr,
		       struct ibv_query_port *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr,
		     int attr_mask, struct ibv_qp_init_attr *qp_init_attr,
		     struct ibv_query_qp *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_read_counters(struct verbs_counters *vcounters,
			  uint64_t *counters_value, uint32_t ncounters,
			  uint32_t flags, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm,
		      uint64_t offset, size_t length, unsigned int access,
		      struct verbs_mr *vmr, struct ibv_command_buffer *link)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
			  uint64_t iova, int fd, int access,
			  struct verbs_mr *vmr)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
		   uint64_t hca_va, int access, struct verbs_mr *vmr,
		   struct ibv_reg_mr *cmd, size_t cmd_size,
		   struct ib_uverbs_reg_mr_resp *resp, size_t resp_size)
{
	return EOPNOTSUPP;
}

int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return EOPNOTSUPP;
}

int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr,
		     size_t length, uint64_t hca_va, int access,
		     struct ibv_pd *pd, struct ibv_rereg_mr *cmd,
		     size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp,
		     size_t resp_sz)
{
	return EOPNOTSUPP;
}

int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size)
{
	return EOPNOTSUPP;
}
