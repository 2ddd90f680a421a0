/* SPDX-License-Identifier: MIT */
/*
 * cm_event.c - event channels and events with rdma-core's semantics:
 * the channel fd polls readable while events wait; rdma_get_cm_event
 * blocks unless the application made the fd non-blocking (then EAGAIN);
 * every event is acked with rdma_ack_cm_event, and rdma_destroy_id waits
 * until its delivered events are acked.
 *
 * The fd is an eventfd used as a level: its counter is non-zero exactly
 * while the queue is non-empty, so a poll() never announces an event
 * that a purge took away.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cm_internal.h"
#include "wisp_private.h"
#include "wisp_mem.h"

struct wcm_channel *wcm_channel_new(void)
{
	struct wcm_channel *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->ch.fd = eventfd(0, EFD_CLOEXEC);
	if (ch->ch.fd < 0) {
		free(ch);
		return NULL;
	}
	return ch;
}

/*
 * A destroyed channel stays allocated while the next WCM_DEAD_KEEP
 * channels are destroyed: a program's CM thread may be between two
 * rdma_get_cm_event() calls when its main thread destroys the channel
 * (rping does), and its next call must find a dead channel, not freed
 * memory. Over rdma-core that call reads a closed descriptor; here it
 * waits forever, as a waiter already inside does. wcm.lock held.
 */
#define WCM_DEAD_KEEP 64
static struct wcm_channel *dead_ring[WCM_DEAD_KEEP];
static unsigned int dead_next;

static void bury(struct wcm_channel *ch)
{
	struct wcm_channel *old = dead_ring[dead_next];

	dead_ring[dead_next] = ch;
	dead_next = (dead_next + 1) % WCM_DEAD_KEEP;
	if (!old)
		return;
	if (old->waiters)
		old->orphan = true;     /* its last waiter to wake frees it */
	else
		free(old);
}

static void unhold(struct wcm_channel *ch);

void wcm_channel_free(struct wcm_channel *ch)
{
	unhold(ch);
	while (ch->head) {
		struct wcm_event *e = ch->head;

		ch->head = e->next;
		wisp_mem_free(e, wcm_event_size(e->pdata_len));
	}
	ch->tail = NULL;
	if (ch->dead)
		return;
	close(ch->ch.fd);
	ch->ch.fd = -1;
	ch->dead = true;
	bury(ch);
}

static void level_up(struct wcm_channel *ch)
{
	uint64_t one = 1;

	if (ch->level)
		return;
	ch->level = true;
	if (write(ch->ch.fd, &one, sizeof(one)) != sizeof(one))
		wcm_log(WCM_LOG_ERROR, "event channel: %s", strerror(errno));
}

/* Reset the counter: it is 1 when level is set, so the read never
 * blocks; without level (the queue emptied while its readiness was
 * held) there is nothing to reset. */
static void level_down(struct wcm_channel *ch)
{
	uint64_t v;

	if (!ch->level)
		return;
	ch->level = false;
	if (read(ch->ch.fd, &v, sizeof(v)) != sizeof(v))
		wcm_log(WCM_LOG_ERROR, "event channel: %s", strerror(errno));
}

/* wcm_events_hold: whether this thread holds readiness back, and the
 * channels whose readiness waits for a release (wcm.lock). */
static _Thread_local bool holding, held_some;
static struct wcm_channel *held_list;

/* Take ch off the held list, if on it (wcm.lock held). */
static void unhold(struct wcm_channel *ch)
{
	struct wcm_channel **pp = &held_list;

	if (!ch->held)
		return;
	while (*pp != ch)
		pp = &(*pp)->held_next;
	*pp = ch->held_next;
	ch->held_next = NULL;
	ch->held = false;
}

static void enqueue(struct wcm_channel *ch, struct wcm_event *e)
{
	e->next = NULL;
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
	if (ch->level)
		return;
	if (!holding) {
		level_up(ch);         /* it may be held too: the release sees */
		return;
	}
	held_some = true;
	if (ch->held)
		return;
	ch->held = true;
	ch->held_next = held_list;
	held_list = ch;
}

void wcm_events_hold(void)
{
	holding = true;
}

void wcm_events_release(void)
{
	holding = false;
	if (!held_some)
		return;
	held_some = false;
	pthread_mutex_lock(&wcm.lock);
	while (held_list) {
		struct wcm_channel *ch = held_list;

		unhold(ch);
		/* A reader may have taken them all meanwhile. */
		if (ch->head)
			level_up(ch);
	}
	pthread_mutex_unlock(&wcm.lock);
}

/* The connection events wisp-stat shows (wisp_private.h). */
static void count_event(enum rdma_cm_event_type type)
{
	switch (type) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		wisp_stats_cm_event(WISP_STATS_CM_CONNECT_REQUEST);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		wisp_stats_cm_event(WISP_STATS_CM_ESTABLISHED);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		wisp_stats_cm_event(WISP_STATS_CM_DISCONNECTED);
		break;
	case RDMA_CM_EVENT_REJECTED:
		wisp_stats_cm_event(WISP_STATS_CM_REJECTED);
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		wisp_stats_cm_event(WISP_STATS_CM_UNREACHABLE);
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		wisp_stats_cm_event(WISP_STATS_CM_CONNECT_ERROR);
		break;
	default:
		break;    /* address and route steps: not counted */
	}
}

struct wcm_event *wcm_event_queue(struct wcm_id *owner, struct wcm_id *id,
				  enum rdma_cm_event_type type, int status,
				  const void *pdata, size_t pdata_len)
{
	struct wcm_event *e;

	if (owner->dying)
		return NULL;
	/* rdma_conn_param carries a uint8_t length: private data beyond
	 * 255 octets (rev 1 allows 512) is cut short. */
	if (!pdata)
		pdata_len = 0;
	else if (pdata_len > 255)
		pdata_len = 255;
	e = wisp_mem_zalloc(wcm_event_size(pdata_len));
	if (!e) {
		wcm_log(WCM_LOG_ERROR, "no memory for %s", rdma_event_str(type));
		return NULL;
	}
	e->owner = owner;
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	e->pdata_len = (uint8_t)pdata_len;
	if (pdata_len) {
		memcpy(e->pdata, pdata, pdata_len);
		e->ev.param.conn.private_data = e->pdata;
		e->ev.param.conn.private_data_len = e->pdata_len;
	}
	wcm_log(WCM_LOG_DEBUG, "id %p: %s, status %d", (void *)&id->id,
		rdma_event_str(type), status);
	enqueue(to_wch(owner->id.channel), e);
	count_event(type);
	return e;
}

/* Unlink the events of owner from ch; return them as a list. */
static struct wcm_event *unlink_owned(struct wcm_channel *ch,
				      const struct wcm_id *owner)
{
	struct wcm_event **pp = &ch->head, *taken = NULL, **tail = &taken;

	ch->tail = NULL;
	while (*pp) {
		struct wcm_event *e = *pp;

		if (e->owner == owner) {
			*pp = e->next;
			e->next = NULL;
			*tail = e;
			tail = &e->next;
			continue;
		}
		ch->tail = e;
		pp = &e->next;
	}
	if (!ch->head) {
		level_down(ch);
		unhold(ch);
	}
	return taken;
}

void wcm_events_purge(struct wcm_id *owner, struct wcm_id **orphans)
{
	struct wcm_event *e = unlink_owned(to_wch(owner->id.channel), owner);

	while (e) {
		struct wcm_event *next = e->next;

		/* A connection request never delivered: its child id was
		 * never seen by the application and goes with it. */
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
		    e->ev.id != &owner->id) {
			struct wcm_id *child = to_wid(e->ev.id);

			child->orphan_next = *orphans;
			*orphans = child;
		}
		wisp_mem_free(e, wcm_event_size(e->pdata_len));
		e = next;
	}
}

void wcm_events_move(struct wcm_id *owner, struct wcm_channel *to)
{
	struct wcm_event *e = unlink_owned(to_wch(owner->id.channel), owner);

	while (e) {
		struct wcm_event *next = e->next;

		enqueue(to, e);
		e = next;
	}
}

/* A listener with no channel of its own hands each new id a private
 * channel too (rdma-core: rdma_migrate_id(id, NULL) in
 * ucma_process_conn_req). wcm.lock held. */
static int give_private_channel(struct wcm_id *child)
{
	struct wcm_channel *ch = wcm_channel_new();

	if (!ch)
		return -errno;
	wcm_events_move(child, ch);
	child->id.channel = &ch->ch;
	child->sync = true;
	return 0;
}

/*
 * The channel was destroyed while this thread waited on it, or before
 * it called (rping does that: its main thread destroys the channel its
 * CM thread reads). Over rdma-core the thread is blocked in the kernel's
 * read() of a file whose descriptor was closed, and stays there until
 * the process ends; it never touches the freed channel. Do the same: no
 * caller returns. A waiter (counted, now left) frees the memory if it was
 * the last one of a channel already out of the dead ring. wcm.lock held.
 */
static _Noreturn void wait_forever(struct wcm_channel *ch, bool waited)
{
	if (waited && ch->orphan && !ch->waiters)
		free(ch);
	pthread_mutex_unlock(&wcm.lock);
	for (;;)
		pause();
}

int rdma_get_cm_event(struct rdma_event_channel *channel,
		      struct rdma_cm_event **event)
{
	struct wcm_channel *ch;

	if (!channel || !event) {
		errno = EINVAL;
		return -1;
	}
	ch = to_wch(channel);
	for (;;) {
		struct pollfd pfd = { .events = POLLIN };
		struct wcm_event *e;
		int flags, ret, err;

		pthread_mutex_lock(&wcm.lock);
		if (ch->dead)
			wait_forever(ch, false);
		pfd.fd = channel->fd;
		e = ch->head;
		if (e) {
			ch->head = e->next;
			if (!ch->head) {
				ch->tail = NULL;
				level_down(ch);
				unhold(ch);
			}
			e->next = NULL;
			e->owner->events_out++;
			/* rdma-core's backlog counts the requests not yet
			 * handed to the application (cm_passive.c). */
			if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
			    e->ev.id != &e->owner->id)
				e->owner->req_queued--;
			if (e->ev.event == RDMA_CM_EVENT_DISCONNECTED)
				to_wid(e->ev.id)->disc = 2;
			if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
			    e->owner->sync &&
			    give_private_channel(to_wid(e->ev.id)))
				wcm_log(WCM_LOG_ERROR, "no channel for new id");
			pthread_mutex_unlock(&wcm.lock);
			*event = &e->ev;
			return 0;
		}
		/* As the kernel's read() on rdma-core's channel: EAGAIN if
		 * the application set O_NONBLOCK, else wait. Asked without
		 * the lock: every thread that queues an event takes it, and
		 * an application polling its channel asked with it held
		 * (issue 13). */
		pthread_mutex_unlock(&wcm.lock);
		flags = fcntl(pfd.fd, F_GETFL);
		if (flags >= 0 && (flags & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		pthread_mutex_lock(&wcm.lock);
		if (ch->dead)
			wait_forever(ch, false);
		if (ch->head) {
			pthread_mutex_unlock(&wcm.lock);
			continue;     /* one came meanwhile */
		}
		ch->waiters++;
		pthread_mutex_unlock(&wcm.lock);
		ret = poll(&pfd, 1, -1);
		err = errno;
		pthread_mutex_lock(&wcm.lock);
		ch->waiters--;
		if (ch->dead)
			wait_forever(ch, true);
		pthread_mutex_unlock(&wcm.lock);
		if (ret < 0 && err != EINTR) {
			errno = err;
			return -1;
		}
	}
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct wcm_event *e;

	if (!event) {
		errno = EINVAL;
		return -1;
	}
	e = container_of(event, struct wcm_event, ev);
	pthread_mutex_lock(&wcm.lock);
	e->owner->events_out--;
	pthread_cond_broadcast(&wcm.cond);
	pthread_mutex_unlock(&wcm.lock);
	wisp_mem_free(e, wcm_event_size(e->pdata_len));
	return 0;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct wcm_channel *ch;
	int ret = wcm_init();

	if (ret) {
		errno = -ret;
		return NULL;
	}
	ch = wcm_channel_new();
	return ch ? &ch->ch : NULL;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	pthread_mutex_lock(&wcm.lock);
	wcm_channel_free(to_wch(channel));
	pthread_mutex_unlock(&wcm.lock);
}

int wcm_complete(struct wcm_id *w)
{
	struct rdma_cm_event *ev;
	int status;

	if (!w->sync)
		return 0;
	if (w->id.event) {
		rdma_ack_cm_event(w->id.event);
		w->id.event = NULL;
	}
	if (rdma_get_cm_event(w->id.channel, &w->id.event))
		return -1;
	ev = w->id.event;
	status = ev->status;
	if (!status)
		return 0;
	/* rdma-core maps a rejection to ECONNREFUSED, else the status. */
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		errno = ECONNREFUSED;
	else
		errno = status < 0 ? -status : status;
	return -1;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct wcm_channel *to, *old = NULL;
	struct wcm_id *w;

	if (!id) {
		errno = EINVAL;
		return -1;
	}
	w = to_wid(id);
	if (w->sync && !channel) {
		errno = EINVAL;
		return -1;
	}
	if (channel) {
		to = to_wch(channel);
	} else {
		to = wcm_channel_new();
		if (!to)
			return -1;
	}

	pthread_mutex_lock(&wcm.lock);
	if (w->sync && id->event) {
		struct rdma_cm_event *ev = id->event;

		id->event = NULL;
		pthread_mutex_unlock(&wcm.lock);
		rdma_ack_cm_event(ev);
		pthread_mutex_lock(&wcm.lock);
	}
	/* Events already handed out belong to the old channel's reader:
	 * wait for their acks, as rdma-core does, before the id moves. */
	while (w->events_out)
		pthread_cond_wait(&wcm.cond, &wcm.lock);
	wcm_events_move(w, to);
	if (w->sync)
		old = to_wch(id->channel);
	id->channel = &to->ch;
	w->sync = !channel;
	if (old)
		wcm_channel_free(old);
	pthread_mutex_unlock(&wcm.lock);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	/* rdma-core 44's header stops at TIMEWAIT_EXIT; newer ones add the
	 * ADDRINFO events (16, 17), which wisp never raises. */
	if ((unsigned int)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	if ((unsigned int)event == 16)
		return "RDMA_CM_EVENT_ADDRINFO_RESOLVED";
	if ((unsigned int)event == 17)
		return "RDMA_CM_EVENT_ADDRINFO_ERROR";
	return "UNKNOWN EVENT";
}
