/* SPDX-License-Identifier: MIT */
/*
 * verbs_context.c - the context object: what every other object of a
 * context hangs off. Its progress engine and STag table, both created on
 * first use, and the queue behind ibv_get_async_event (which, as
 * rdma-core's, returns -1 with errno set).
 *
 * Nothing here calls into another file of this folder: MRs, CQs, SRQs
 * and QPs call in.
 */
#include "verbs_abi.h"
#include "wisp_verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "glue.h"
#include "rdmap_stag.h"
#include "verbs_stats.h"
#include "../wisp_private.h"

int wisp_context_init(struct wisp_context *wctx)
{
	wctx->async_efd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (wctx->async_efd < 0)
		return errno;
	pthread_mutex_init(&wctx->lock, NULL);
	pthread_mutex_init(&wctx->async_lock, NULL);
	wisp_stats_ctx_open(&wctx->vctx.context);
	return 0;
}

void wisp_context_fini(struct wisp_context *wctx)
{
	struct wisp_async_ev *e, *next;

	wisp_stats_ctx_close(&wctx->vctx.context);
	glue_engine_destroy(wctx->engine);
	wctx->engine = NULL;
	if (wctx->stags) {
		rdmap_stag_table_fini(wctx->stags);
		free(wctx->stags);
		wctx->stags = NULL;
	}
	for (e = wctx->async_head; e; e = next) {
		next = e->next;
		free(e);
	}
	close(wctx->async_efd);
	pthread_mutex_destroy(&wctx->async_lock);
	pthread_mutex_destroy(&wctx->lock);
}

/* ---- the engine and the STag table, on first use ----------------------- */

struct glue_engine *wisp_context_engine(struct wisp_context *wctx)
{
	struct glue_engine *e;

	pthread_mutex_lock(&wctx->lock);
	if (!wctx->engine)
		wctx->engine = glue_engine_create(GLUE_AUTO);
	e = wctx->engine;
	pthread_mutex_unlock(&wctx->lock);
	return e;
}

int wisp_context_zc_grace_ms(struct wisp_context *wctx)
{
	struct glue_engine_stats st = { 0 };

	pthread_mutex_lock(&wctx->lock);
	if (wctx->engine)
		glue_engine_get_stats(wctx->engine, &st);
	pthread_mutex_unlock(&wctx->lock);
	return st.zc_min && st.zc_avail ? WISP_ZC_DEREG_GRACE_MS : 0;
}

int wisp_context_zc_stats(struct ibv_context *ctx, uint64_t *sends,
			  uint64_t *copied)
{
	struct wisp_context *wctx = to_wctx(ctx);
	struct glue_engine_stats st;
	int ret = ENOENT;

	pthread_mutex_lock(&wctx->lock);
	if (wctx->engine) {
		glue_engine_get_stats(wctx->engine, &st);
		*sends = st.zc_sends;
		*copied = st.zc_copied;
		ret = 0;
	}
	pthread_mutex_unlock(&wctx->lock);
	return ret;
}

struct rdmap_stag_table *wisp_context_stags(struct wisp_context *wctx)
{
	struct rdmap_stag_table *t;

	pthread_mutex_lock(&wctx->lock);
	t = wctx->stags;
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (t && rdmap_stag_table_init(t, WISP_MAX_MR)) {
			free(t);
			t = NULL;
		}
		wctx->stags = t;
	}
	pthread_mutex_unlock(&wctx->lock);
	if (!t)
		errno = ENOMEM;
	return t;
}

/* ---- asynchronous events ----------------------------------------------- */

void wisp_async_event_push(struct ibv_context *ctx,
			   const struct ibv_async_event *ev)
{
	struct wisp_context *wctx = to_wctx(ctx);
	struct wisp_async_ev *e = malloc(sizeof(*e));
	uint64_t one = 1;
	ssize_t r;

	/* Nobody to report to: the event is lost, as the kernel's uverbs
	 * drops one it cannot allocate. */
	if (!e)
		return;
	e->next = NULL;
	e->ev = *ev;

	pthread_mutex_lock(&wctx->async_lock);
	if (wctx->async_tail)
		wctx->async_tail->next = e;
	else
		wctx->async_head = e;
	wctx->async_tail = e;
	pthread_mutex_unlock(&wctx->async_lock);

	/* One count per queued event (EFD_SEMAPHORE): async_fd polls
	 * readable while any is queued and each read takes one. Only 2^64-2
	 * unread events could make the write fail. */
	r = write(wctx->async_efd, &one, sizeof(one));
	(void)r;
}

/*
 * Blocks, like a read of the kernel's async fd, until an event is queued;
 * -1 with errno EAGAIN if the caller made async_fd non-blocking and none
 * is (rdma-core: the read's result).
 */
int wisp_get_async_event_1_1(struct ibv_context *context,
			     struct ibv_async_event *event)
{
	struct wisp_context *wctx = to_wctx(context);
	struct wisp_async_ev *e;
	uint64_t cnt;

	if (read(wctx->async_efd, &cnt, sizeof(cnt)) != sizeof(cnt))
		return -1;

	pthread_mutex_lock(&wctx->async_lock);
	e = wctx->async_head;
	if (e) {
		wctx->async_head = e->next;
		if (!wctx->async_head)
			wctx->async_tail = NULL;
	}
	pthread_mutex_unlock(&wctx->async_lock);

	/* Each count is written after its event is queued. */
	if (!e) {
		errno = EIO;
		return -1;
	}
	*event = e->ev;
	free(e);
	return 0;
}
WISP_SYMVER(wisp_get_async_event_1_1, "ibv_get_async_event@@IBVERBS_1.1");

/*
 * Count the event as handled on its object: a destroy verb may wait for
 * events_completed to catch up with the events it delivered (rdma-core's
 * contract). Port and device events belong to no object.
 */
void wisp_ack_async_event_1_1(struct ibv_async_event *event)
{
	pthread_mutex_t *mutex;
	pthread_cond_t *cond;
	uint32_t *done;

	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		mutex = &event->element.cq->mutex;
		cond = &event->element.cq->cond;
		done = &event->element.cq->async_events_completed;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		mutex = &event->element.qp->mutex;
		cond = &event->element.qp->cond;
		done = &event->element.qp->events_completed;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		mutex = &event->element.srq->mutex;
		cond = &event->element.srq->cond;
		done = &event->element.srq->events_completed;
		break;
	case IBV_EVENT_WQ_FATAL:
		mutex = &event->element.wq->mutex;
		cond = &event->element.wq->cond;
		done = &event->element.wq->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(mutex);
	++*done;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mutex);
}
WISP_SYMVER(wisp_ack_async_event_1_1, "ibv_ack_async_event@@IBVERBS_1.1");
