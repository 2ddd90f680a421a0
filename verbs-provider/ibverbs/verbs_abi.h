/* SPDX-License-Identifier: MIT */
/*
 * verbs_abi.h - what wisp's libibverbs.so.1 exports, and how.
 *
 * The library is built with -fvisibility=hidden and exports only what
 * libibverbs.map lists; the linker cannot export a hidden symbol, so every
 * exported function must be declared with default visibility before it is
 * defined. The CMake target force-includes this header (-include) into
 * every source of the library, so that holds whatever order a file
 * includes its headers in:
 *
 *   - rdma-core's public API (<infiniband/verbs.h>) and wisp's private
 *     API (wisp_private.h, node WISP_PRIVATE_1) are included here with
 *     default visibility;
 *   - rdma-core's IBVERBS_PRIVATE_34 functions, which no installed header
 *     declares (they live in rdma-core's driver.h), are declared here with
 *     rdma-core 44's signatures; the struct types only the kernel command
 *     path uses stay incomplete;
 *   - the 33 verbs rdma-core exports twice (name@IBVERBS_1.0, the 2006
 *     ABI, and name@@IBVERBS_1.1) are defined under internal names and
 *     bound to name+version with .symver, as rdma-core's
 *     LATEST_SYMVER_FUNC does; libibverbs.map lists such a name in both
 *     nodes.
 */
#ifndef WISP_VERBS_ABI_H
#define WISP_VERBS_ABI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WISP_EXPORT __attribute__((visibility("default")))

/*
 * Bind the (default-visible) function impl to the versioned name sym,
 * "name@@NODE" for the default version, "name@NODE" for a compat one.
 * Plain .symver rather than GCC's symver attribute, so clang builds too.
 */
#define WISP_SYMVER(impl, sym) __asm__(".symver " #impl "," sym)

#pragma GCC visibility push(default)

#include <infiniband/verbs.h>
#include "../wisp_private.h"

/* ---- name@@IBVERBS_1.1 (implementations of the doubly exported verbs) */

/* verbs_device.c */
struct ibv_device **wisp_get_device_list_1_1(int *num);
void wisp_free_device_list_1_1(struct ibv_device **list);
const char *wisp_get_device_name_1_1(struct ibv_device *device);
__be64 wisp_get_device_guid_1_1(struct ibv_device *device);
struct ibv_context *wisp_open_device_1_1(struct ibv_device *device);
int wisp_close_device_1_1(struct ibv_context *context);
int wisp_get_async_event_1_1(struct ibv_context *context,
			     struct ibv_async_event *event);
void wisp_ack_async_event_1_1(struct ibv_async_event *event);
int wisp_query_device_1_1(struct ibv_context *context,
			  struct ibv_device_attr *device_attr);
int wisp_query_port_1_1(struct ibv_context *context, uint8_t port_num,
			struct _compat_ibv_port_attr *port_attr);
int wisp_query_gid_1_1(struct ibv_context *context, uint8_t port_num,
		       int index, union ibv_gid *gid);
int wisp_query_pkey_1_1(struct ibv_context *context, uint8_t port_num,
			int index, __be16 *pkey);
struct ibv_pd *wisp_alloc_pd_1_1(struct ibv_context *context);
int wisp_dealloc_pd_1_1(struct ibv_pd *pd);

/* verbs_entry.c */
struct ibv_mr *wisp_reg_mr_1_1(struct ibv_pd *pd, void *addr, size_t length,
			       int access);
int wisp_dereg_mr_1_1(struct ibv_mr *mr);
struct ibv_cq *wisp_create_cq_1_1(struct ibv_context *context, int cqe,
				  void *cq_context,
				  struct ibv_comp_channel *channel,
				  int comp_vector);
int wisp_resize_cq_1_1(struct ibv_cq *cq, int cqe);
int wisp_destroy_cq_1_1(struct ibv_cq *cq);
int wisp_get_cq_event_1_1(struct ibv_comp_channel *channel,
			  struct ibv_cq **cq, void **cq_context);
void wisp_ack_cq_events_1_1(struct ibv_cq *cq, unsigned int nevents);
struct ibv_srq *wisp_create_srq_1_1(struct ibv_pd *pd,
				    struct ibv_srq_init_attr *srq_init_attr);
int wisp_modify_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
			int srq_attr_mask);
int wisp_query_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr);
int wisp_destroy_srq_1_1(struct ibv_srq *srq);
struct ibv_qp *wisp_create_qp_1_1(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *qp_init_attr);
int wisp_query_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_qp_init_attr *init_attr);
int wisp_modify_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		       int attr_mask);
int wisp_destroy_qp_1_1(struct ibv_qp *qp);

/* verbs_misc.c */
struct ibv_ah *wisp_create_ah_1_1(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int wisp_destroy_ah_1_1(struct ibv_ah *ah);
int wisp_attach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid,
			  uint16_t lid);
int wisp_detach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid,
			  uint16_t lid);

/* ---- name@IBVERBS_1.0 and ibv_register_driver@IBVERBS_1.1 ------------
 * (verbs_compat.c). The 1.0 structs (ibv_device_1_0 and friends) differ
 * from today's; wisp never hands one out, so the compat entry points take
 * them as void pointers and fail cleanly. */
void **wisp_get_device_list_1_0(int *num);
void wisp_free_device_list_1_0(void **list);
const char *wisp_get_device_name_1_0(void *device);
__be64 wisp_get_device_guid_1_0(void *device);
void *wisp_open_device_1_0(void *device);
int wisp_close_device_1_0(void *context);
int wisp_get_async_event_1_0(void *context, void *event);
void wisp_ack_async_event_1_0(void *event);
int wisp_query_device_1_0(void *context, struct ibv_device_attr *attr);
int wisp_query_port_1_0(void *context, uint8_t port_num, void *port_attr);
int wisp_query_gid_1_0(void *context, uint8_t port_num, int index,
		       union ibv_gid *gid);
int wisp_query_pkey_1_0(void *context, uint8_t port_num, int index,
			__be16 *pkey);
void *wisp_alloc_pd_1_0(void *context);
int wisp_dealloc_pd_1_0(void *pd);
void *wisp_reg_mr_1_0(void *pd, void *addr, size_t length, int access);
int wisp_dereg_mr_1_0(void *mr);
void *wisp_create_cq_1_0(void *context, int cqe, void *cq_context,
			 void *channel, int comp_vector);
int wisp_resize_cq_1_0(void *cq, int cqe);
int wisp_destroy_cq_1_0(void *cq);
int wisp_get_cq_event_1_0(void *channel, void **cq, void **cq_context);
void wisp_ack_cq_events_1_0(void *cq, unsigned int nevents);
void *wisp_create_srq_1_0(void *pd, void *srq_init_attr);
int wisp_modify_srq_1_0(void *srq, void *srq_attr, int srq_attr_mask);
int wisp_query_srq_1_0(void *srq, void *srq_attr);
int wisp_destroy_srq_1_0(void *srq);
void *wisp_create_qp_1_0(void *pd, void *qp_init_attr);
int wisp_query_qp_1_0(void *qp, void *attr, int attr_mask, void *init_attr);
int wisp_modify_qp_1_0(void *qp, void *attr, int attr_mask);
int wisp_destroy_qp_1_0(void *qp);
void *wisp_create_ah_1_0(void *pd, void *attr);
int wisp_destroy_ah_1_0(void *ah);
int wisp_attach_mcast_1_0(void *qp, const union ibv_gid *gid, uint16_t lid);
int wisp_detach_mcast_1_0(void *qp, const union ibv_gid *gid, uint16_t lid);
void wisp_register_driver_1_1(const char *name, void *init_func);

/* ---- IBVERBS_1.0 .. 1.1 symbols no installed header declares -------- */
struct ib_uverbs_ah_attr;
struct ib_uverbs_qp_attr;
struct ib_user_path_rec;
struct ibv_sa_path_rec;

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
				 struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
			       struct ibv_sa_path_rec *src);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			size_t size);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

/* ---- IBVERBS_PRIVATE_34 (rdma-core's driver.h, 44.0) -----------------
 * Used by the rdma-core providers (libmlx5, libefa, ...) that perftest
 * links: they are loaded and their constructors run, but the device list
 * holds wisp0 only, so none of them ever gets a context. */

/* The GID type as sysfs names it (rdma-core's enum, same values). */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

struct verbs_device_ops;
struct verbs_sysfs_dev;
struct verbs_context_ops;
struct verbs_xrcd;
struct verbs_srq;
struct verbs_mr;
struct verbs_qp;
struct verbs_cq;
struct verbs_dm;
struct verbs_counters;
struct verbs_flow_action;
struct ibv_command_buffer;
/* rdma-core's kern-abi.h command structs and the kernel's responses */
struct ibv_get_context;
struct ib_uverbs_get_context_resp;
struct ib_uverbs_ex_query_device_resp;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ib_uverbs_alloc_pd_resp;
struct ibv_open_xrcd;
struct ib_uverbs_open_xrcd_resp;
struct ibv_reg_mr;
struct ib_uverbs_reg_mr_resp;
struct ibv_rereg_mr;
struct ib_uverbs_rereg_mr_resp;
struct ibv_alloc_mw;
struct ib_uverbs_alloc_mw_resp;
struct ibv_create_cq;
struct ib_uverbs_create_cq_resp;
struct ibv_create_cq_ex;
struct ib_uverbs_ex_create_cq_resp;
struct ibv_resize_cq;
struct ib_uverbs_resize_cq_resp;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ib_uverbs_create_srq_resp;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ib_uverbs_create_qp_resp;
struct ibv_create_qp_ex;
struct ib_uverbs_ex_create_qp_resp;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ib_uverbs_ex_modify_qp_resp;
struct ib_uverbs_create_ah_resp;
struct ibv_create_wq;
struct ib_uverbs_ex_create_wq_resp;
struct ibv_modify_wq;
struct ib_uverbs_ex_create_rwq_ind_table_resp;

extern bool verbs_allow_disassociate_destroy;

unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
				     struct ibv_command_buffer *link);
void __verbs_log(struct verbs_context *ctx, uint32_t level,
		 const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id);
int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum ibv_gid_type_sysfs *type);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size,
			      struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...)
	__attribute__((format(printf, 4, 5)));
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context);
struct ibv_context *verbs_open_device(struct ibv_device *device,
				      void *private_data);
void verbs_register_driver_34(const struct verbs_device_ops *ops);
void verbs_set_ops(struct verbs_context *vctx,
		   const struct verbs_context_ops *ops);
void verbs_uninit_context(struct verbs_context *context);

int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		      uint32_t flags, struct ibv_sge *sg_list,
		      uint32_t num_sge);
int ibv_cmd_alloc_dm(struct ibv_context *ctx,
		     const struct ibv_alloc_dm_attr *dm_attr,
		     struct verbs_dm *dm, struct ibv_command_buffer *link);
int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type,
		     struct ibv_mw *mw, struct ibv_alloc_mw *cmd,
		     size_t cmd_size, struct ib_uverbs_alloc_mw_resp *resp,
		     size_t resp_size);
int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
		     struct ibv_alloc_pd *cmd, size_t cmd_size,
		     struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size);
int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			 uint16_t lid);
int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd);
int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah,
		      struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp,
		      size_t resp_size);
int ibv_cmd_create_counters(struct ibv_context *context,
			    struct ibv_counters_init_attr *init_attr,
			    struct verbs_counters *vcounters,
			    struct ibv_command_buffer *link);
int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
		      struct ibv_comp_channel *channel, int comp_vector,
		      struct ibv_cq *cq, struct ibv_create_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_create_cq_resp *resp,
		      size_t resp_size);
int ibv_cmd_create_cq_ex(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *cq_attr,
			 struct verbs_cq *cq, struct ibv_create_cq_ex *cmd,
			 size_t cmd_size,
			 struct ib_uverbs_ex_create_cq_resp *resp,
			 size_t resp_size, uint32_t cmd_flags);
int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id,
			struct ibv_flow_attr *flow_attr, void *ucmd,
			size_t ucmd_size);
int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx,
				   struct ibv_flow_action_esp_attr *attr,
				   struct verbs_flow_action *flow_action,
				   struct ibv_command_buffer *driver);
int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
		      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd,
		      size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size);
int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
			 struct ibv_qp_init_attr_ex *attr_ex,
			 struct ibv_create_qp *cmd, size_t cmd_size,
			 struct ib_uverbs_create_qp_resp *resp,
			 size_t resp_size);
int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp,
			  struct ibv_qp_init_attr_ex *qp_attr,
			  struct ibv_create_qp_ex *cmd, size_t cmd_size,
			  struct ib_uverbs_ex_create_qp_resp *resp,
			  size_t resp_size);
int ibv_cmd_create_rwq_ind_table(struct ibv_context *context,
				 struct ibv_rwq_ind_table_init_attr *init_attr,
				 struct ibv_rwq_ind_table *rwq_ind_table,
				 struct ib_uverbs_ex_create_rwq_ind_table_resp *resp,
				 size_t resp_size);
int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr,
		       struct ibv_create_srq *cmd, size_t cmd_size,
		       struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size);
int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
			  struct ibv_srq_init_attr_ex *attr_ex,
			  struct ibv_create_xsrq *cmd, size_t cmd_size,
			  struct ib_uverbs_create_srq_resp *resp,
			  size_t resp_size);
int ibv_cmd_create_wq(struct ibv_context *context,
		      struct ibv_wq_init_attr *wq_init_attr, struct ibv_wq *wq,
		      struct ibv_create_wq *cmd, size_t cmd_size,
		      struct ib_uverbs_ex_create_wq_resp *resp,
		      size_t resp_size);
int ibv_cmd_dealloc_mw(struct ibv_mw *mw);
int ibv_cmd_dealloc_pd(struct ibv_pd *pd);
int ibv_cmd_dereg_mr(struct verbs_mr *vmr);
int ibv_cmd_destroy_ah(struct ibv_ah *ah);
int ibv_cmd_destroy_counters(struct verbs_counters *vcounters);
int ibv_cmd_destroy_cq(struct ibv_cq *cq);
int ibv_cmd_destroy_flow(struct ibv_flow *flow_id);
int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action);
int ibv_cmd_destroy_qp(struct ibv_qp *qp);
int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table);
int ibv_cmd_destroy_srq(struct ibv_srq *srq);
int ibv_cmd_destroy_wq(struct ibv_wq *wq);
int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			 uint16_t lid);
int ibv_cmd_free_dm(struct verbs_dm *dm);
int ibv_cmd_get_context(struct verbs_context *context,
			struct ibv_get_context *cmd, size_t cmd_size,
			struct ib_uverbs_get_context_resp *resp,
			size_t resp_size);
int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr,
		      struct ibv_modify_cq *cmd, size_t cmd_size);
int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action,
				   struct ibv_flow_action_esp_attr *attr,
				   struct ibv_command_buffer *driver);
int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_modify_qp *cmd,
		      size_t cmd_size);
int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			 int attr_mask, struct ibv_modify_qp_ex *cmd,
			 size_t cmd_size,
			 struct ib_uverbs_ex_modify_qp_resp *resp,
			 size_t resp_size);
int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd,
		       size_t cmd_size);
int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr,
		      struct ibv_modify_wq *cmd, size_t cmd_size);
int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp,
		    int vqp_sz, struct ibv_qp_open_attr *attr,
		    struct ibv_open_qp *cmd, size_t cmd_size,
		    struct ib_uverbs_create_qp_resp *resp, size_t resp_size);
int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd,
		      int vxrcd_size, struct ibv_xrcd_init_attr *attr,
		      struct ibv_open_xrcd *cmd, size_t cmd_size,
		      struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size);
int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr);
int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr);
int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr);
int ibv_cmd_query_context(struct ibv_context *ctx,
			  struct ibv_command_buffer *driver);
int ibv_cmd_query_device_any(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp,
			     size_t *resp_size);
int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr,
		     uint32_t mr_handle);
int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr,
		       struct ibv_query_port *cmd, size_t cmd_size);
int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr,
		     int attr_mask, struct ibv_qp_init_attr *qp_init_attr,
		     struct ibv_query_qp *cmd, size_t cmd_size);
int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size);
int ibv_cmd_read_counters(struct verbs_counters *vcounters,
			  uint64_t *counters_value, uint32_t ncounters,
			  uint32_t flags, struct ibv_command_buffer *link);
int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm,
		      uint64_t offset, size_t length, unsigned int access,
		      struct verbs_mr *vmr, struct ibv_command_buffer *link);
int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
			  uint64_t iova, int fd, int access,
			  struct verbs_mr *vmr);
int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
		   uint64_t hca_va, int access, struct verbs_mr *vmr,
		   struct ibv_reg_mr *cmd, size_t cmd_size,
		   struct ib_uverbs_reg_mr_resp *resp, size_t resp_size);
int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr,
		     size_t length, uint64_t hca_va, int access,
		     struct ibv_pd *pd, struct ibv_rereg_mr *cmd,
		     size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp,
		     size_t resp_sz);
int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size);

/* ---- WISP_PRIVATE_1 beyond wisp_private.h ----------------------------
 * Exported so that the test suite can inject an asynchronous event into
 * a context (rdma-core's API has no way to); see wisp_verbs.h. */
struct ibv_async_event;
void wisp_async_event_push(struct ibv_context *ctx,
			   const struct ibv_async_event *ev);

#pragma GCC visibility pop

#endif /* WISP_VERBS_ABI_H */
