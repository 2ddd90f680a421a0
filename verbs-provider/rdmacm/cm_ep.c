/* SPDX-License-Identifier: MIT */
/*
 * cm_ep.c - the "endpoint" calls of rdma_cma.h: rdma_getaddrinfo and its
 * free, rdma_create_ep / rdma_destroy_ep, rdma_get_request. These run the
 * asynchronous calls synchronously on ids with a private channel, as in
 * rdma-core; rdma_client and rdma_server use nothing else.
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cm_internal.h"

static int fail(int neg_errno)
{
	errno = -neg_errno;
	return -1;
}

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len,
		     const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return -ENOMEM;
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}

/*
 * Like rdma-core: one result, from getaddrinfo(3) on node/service with the
 * hints translated (RAI_PASSIVE, RAI_NUMERICHOST, family; RC means
 * SOCK_STREAM, RDMA_PS_TCP means TCP). A getaddrinfo failure is returned
 * as its EAI_* code (for gai_strerror), other failures as -1 with errno.
 */
int rdma_getaddrinfo(const char *node, const char *service,
		     const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct addrinfo ai_hints, *ai = NULL;
	struct rdma_addrinfo *rai;
	int ret;

	if (!res || (!node && !service && !hints))
		return fail(-EINVAL);
	ret = wcm_init();
	if (ret)
		return fail(ret);
	if (!hints)
		hints = &nohints;
	if (hints->ai_family && hints->ai_family != AF_INET &&
	    hints->ai_family != AF_INET6)
		return fail(-EAFNOSUPPORT);
	rai = calloc(1, sizeof(*rai));
	if (!rai)
		return fail(-ENOMEM);
	rai->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space :
						    RDMA_PS_TCP;

	if (node || service) {
		memset(&ai_hints, 0, sizeof(ai_hints));
		ai_hints.ai_family = hints->ai_family;
		ai_hints.ai_socktype = SOCK_STREAM;
		ai_hints.ai_protocol = IPPROTO_TCP;
		if (hints->ai_flags & RAI_PASSIVE)
			ai_hints.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ai_hints.ai_flags |= AI_NUMERICHOST;
		ret = getaddrinfo(node, service, &ai_hints, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		rai->ai_family = ai->ai_family;
		if (hints->ai_flags & RAI_PASSIVE) {
			rai->ai_flags = RAI_PASSIVE;
			ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
					ai->ai_addr, ai->ai_addrlen);
			if (!ret && ai->ai_canonname)
				rai->ai_src_canonname = strdup(ai->ai_canonname);
		} else {
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					ai->ai_addr, ai->ai_addrlen);
			if (!ret && ai->ai_canonname)
				rai->ai_dst_canonname = strdup(ai->ai_canonname);
		}
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		if (hints->ai_dst_len && hints->ai_dst_addr)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints->ai_src_len && hints->ai_src_addr)
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
				hints->ai_src_addr, hints->ai_src_len);
	if (ret) {
		rdma_freeaddrinfo(rai);
		return fail(ret);
	}
	*res = rai;
	return 0;
}

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
		   struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct wcm_id *w;
	int ret;

	if (!id || !res)
		return fail(-EINVAL);
	if (res->ai_qp_type && res->ai_qp_type != IBV_QPT_RC)
		return fail(-ENOSYS);
	ret = rdma_create_id(NULL, &cm_id, NULL,
			     res->ai_port_space ? res->ai_port_space :
						  RDMA_PS_TCP);
	if (ret)
		return ret;
	w = to_wid(cm_id);

	if (res->ai_flags & RAI_PASSIVE) {
		/* Bound now; rdma_listen and rdma_get_request follow, the QP
		 * is made for each new id from these attributes. */
		ret = rdma_bind_addr(cm_id, res->ai_src_addr);
		if (ret)
			goto err;
		if (pd)
			cm_id->pd = pd;
		if (qp_init_attr) {
			w->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!w->ep_qp_attr) {
				ret = fail(-ENOMEM);
				goto err;
			}
			*w->ep_qp_attr = *qp_init_attr;
			w->ep_qp_attr->qp_type = IBV_QPT_RC;
		}
		*id = cm_id;
		return 0;
	}

	ret = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	ret = rdma_resolve_route(cm_id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = IBV_QPT_RC;
		ret = rdma_create_qp(cm_id, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	if (res->ai_connect_len && res->ai_connect) {
		w->ep_connect = malloc(res->ai_connect_len);
		if (!w->ep_connect) {
			ret = fail(-ENOMEM);
			goto err;
		}
		memcpy(w->ep_connect, res->ai_connect, res->ai_connect_len);
		w->ep_connect_len = res->ai_connect_len;
	}
	*id = cm_id;
	return 0;

err:
	ret = errno;
	rdma_destroy_ep(cm_id);
	errno = ret;
	return -1;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct rdma_cm_event *event;
	struct wcm_id *l;
	int ret;

	if (!listen || !id)
		return fail(-EINVAL);
	l = to_wid(listen);
	if (!l->sync)
		return fail(-EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(listen->channel, &event);
	if (ret)
		return ret;
	if (event->event == RDMA_CM_EVENT_REJECTED) {
		ret = fail(-ECONNREFUSED);
		goto err;
	}
	if (event->status) {
		ret = fail(event->status < 0 ? event->status : -event->status);
		goto err;
	}
	if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = fail(-EINVAL);
		goto err;
	}
	if (l->ep_qp_attr) {
		struct ibv_qp_init_attr attr = *l->ep_qp_attr;

		ret = rdma_create_qp(event->id, listen->pd, &attr);
		if (ret)
			goto err;
	}
	/* The new id keeps its CONNECT_REQUEST: acked by its next
	 * synchronous call or by rdma_destroy_id, as in rdma-core. */
	*id = event->id;
	(*id)->event = event;
	return 0;
err:
	listen->event = event;
	return ret;
}
