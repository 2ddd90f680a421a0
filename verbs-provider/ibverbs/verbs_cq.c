// SPDX-License-Identifier: MIT
/*
 * verbs_cq.c - completion queues and completion channels.
 *
 * A CQ is a ring of struct ibv_wc. Producers (engine threads, and a
 * posting thread flushing a QP in ERROR) serialise on a producer lock;
 * ibv_poll_cq reads under a consumer lock. Neither lock is contended on
 * the fast path, so polling costs no system call. A completion channel
 * is a semaphore eventfd: one read per CQ event.
 *
 * A CQ also lists the TCP streams whose completions it collects: a
 * thread that finds it empty receives on them itself (tcp-glue's
 * glue_conn_recv_now). The CQ knows the streams, not the QPs behind
 * them, so nothing here calls into verbs_qp.c.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "glue.h"
#include "verbs_internal.h"
#include "wisp_mem.h"

/*
 * The CQs with events not yet read, oldest first, each on the list once
 * with its count (ev_pending): a CQ may fire again before its event is
 * read (armed again, then a new completion) and must not be linked
 * twice. ibv_get_cq_event takes one event of the head CQ and, if it has
 * more, moves it to the tail, so the events of several CQs come out
 * interleaved, as the kernel's per-event list gives them.
 */
struct wisp_channel {
	struct ibv_comp_channel base;
	pthread_mutex_t lock;
	struct wisp_cq *head, *tail;
};

static struct wisp_channel *to_wch(struct ibv_comp_channel *ch)
{
	return container_of(ch, struct wisp_channel, base);
}

struct ibv_comp_channel *wisp_create_comp_channel(struct ibv_context *ctx)
{
	struct wisp_channel *ch = wisp_mem_zalloc(sizeof(*ch));

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->base.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->base.fd < 0) {
		wisp_mem_free(ch, sizeof(*ch));
		return NULL;
	}
	ch->base.context = ctx;
	ch->base.refcnt = 0;
	pthread_mutex_init(&ch->lock, NULL);
	return &ch->base;
}

int wisp_destroy_comp_channel(struct ibv_comp_channel *ibch)
{
	struct wisp_channel *ch;

	if (!ibch)
		return EINVAL;
	ch = to_wch(ibch);
	/* rdma-core refuses while CQs still use the channel. */
	if (ibch->refcnt)
		return EBUSY;
	close(ibch->fd);
	pthread_mutex_destroy(&ch->lock);
	wisp_mem_free(ch, sizeof(*ch));
	return 0;
}

/* Append cq to ch's list; ch->lock held, cq not on it. */
static void ch_append(struct wisp_channel *ch, struct wisp_cq *cq)
{
	cq->ev_next = NULL;
	if (ch->tail)
		ch->tail->ev_next = cq;
	else
		ch->head = cq;
	ch->tail = cq;
}

/* Take the head CQ off ch's list; ch->lock held. */
static struct wisp_cq *ch_pop(struct wisp_channel *ch)
{
	struct wisp_cq *cq = ch->head;

	if (cq) {
		ch->head = cq->ev_next;
		if (!ch->head)
			ch->tail = NULL;
		cq->ev_next = NULL;
	}
	return cq;
}

/* Raise the CQ's event on its channel (any thread). */
static void cq_event(struct wisp_cq *cq)
{
	struct wisp_channel *ch;
	uint64_t one = 1;

	if (!cq->base.cq.channel)
		return;
	ch = to_wch(cq->base.cq.channel);
	pthread_mutex_lock(&ch->lock);
	if (!cq->ev_pending++)
		ch_append(ch, cq);
	pthread_mutex_unlock(&ch->lock);
	if (write(ch->base.fd, &one, sizeof(one)) < 0) {
		/* cannot fail short of counter overflow */
	}
}

/*
 * A poller's own completions. A thread whose ibv_poll_cq found the CQ
 * empty receives on its streams itself (wisp_poll_cq), and what it
 * receives mostly completes into that very CQ: pushed into the ring
 * under the producers' lock, then taken out again under the consumers'
 * lock a moment later by the same thread. Instead, while the ring is
 * empty, the completion goes straight into the caller's array (up to
 * the num_entries it gave), without either lock or the ring.
 *
 * Order is kept: completions of one QP are made under its core lock,
 * one at a time, so none of this QP's can be on its way into the ring
 * meanwhile; an empty ring holds none older than this one; and once one
 * has gone to the ring (the ring was not empty, or the caller's array
 * was full), so do all that follow, since the ring is then not empty.
 * Other QPs' completions have no order with these. The channel event is
 * raised as for a push into the ring.
 */
struct cq_hand {
	struct wisp_cq *cq;
	struct ibv_wc *wc;
	int cap, n;
};

static _Thread_local struct cq_hand *cq_hand;

/* Inlined in wisp_cq_push: once per completion, and nearly always it
 * only finds the CQ disarmed. */
static inline __attribute__((always_inline))
void cq_armed_event(struct wisp_cq *cq, const struct ibv_wc *wc,
		    bool solicited)
{
	int armed = atomic_load(&cq->armed);

	/* IBTA 11.4.2.2: a solicited-only request fires on a solicited
	 * completion or an unsuccessful one. */
	if (armed == CQ_ARMED_ANY ||
	    (armed == CQ_ARMED_SOLICITED &&
	     (solicited || wc->status != IBV_WC_SUCCESS))) {
		if (atomic_exchange(&cq->armed, CQ_DISARMED) != CQ_DISARMED)
			cq_event(cq);
	}
}

void wisp_cq_push(struct wisp_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	struct cq_hand *h = cq_hand;
	uint32_t tail, head;

	if (h && h->cq == cq && h->n < h->cap &&
	    atomic_load_explicit(&cq->tail, memory_order_acquire) ==
	    atomic_load_explicit(&cq->head, memory_order_acquire)) {
		h->wc[h->n++] = *wc;
		cq_armed_event(cq, wc, solicited);
		return;
	}
	wisp_lock_take(&cq->prod_lock);
	tail = atomic_load_explicit(&cq->tail, memory_order_relaxed);
	head = atomic_load_explicit(&cq->head, memory_order_acquire);
	if (tail - head >= cq->size) {
		/* Overrun: the application sized its CQ too small. Report it
		 * as rdma-core devices do, with IBV_EVENT_CQ_ERR. */
		wisp_lock_give(&cq->prod_lock);
		if (!atomic_exchange(&cq->overrun, true)) {
			struct ibv_async_event ev = {
				.element.cq = &cq->base.cq,
				.event_type = IBV_EVENT_CQ_ERR,
			};
			wisp_async_event_push(cq->base.cq.context, &ev);
		}
		return;
	}
	cq->ring[tail & (cq->size - 1)] = *wc;
	atomic_store_explicit(&cq->tail, tail + 1, memory_order_release);
	wisp_lock_give(&cq->prod_lock);
	cq_armed_event(cq, wc, solicited);
}

static int cq_init(struct wisp_cq *cq, struct ibv_context *ctx, int cqe,
		   void *cq_context, struct ibv_comp_channel *ch)
{
	uint32_t size = 1;

	if (cqe < 1 || cqe > WISP_MAX_CQE)
		return EINVAL;
	while (size < (uint32_t)cqe)
		size <<= 1;
	cq->ring = wisp_mem_calloc(size, sizeof(*cq->ring));
	if (!cq->ring)
		return ENOMEM;
	cq->size = size;
	cq->base.cq.context = ctx;
	cq->base.cq.channel = ch;
	cq->base.cq.cq_context = cq_context;
	cq->base.cq.cqe = (int)size;
	pthread_mutex_init(&cq->base.cq.mutex, NULL);
	pthread_cond_init(&cq->base.cq.cond, NULL);
	wisp_lock_init(&cq->prod_lock);
	wisp_lock_init(&cq->cons_lock);
	pthread_mutex_init(&cq->conns_lock, NULL);
	atomic_init(&cq->conns_busy, false);
	atomic_init(&cq->conns_wanted, false);
	if (ch) {
		pthread_mutex_lock(&to_wch(ch)->lock);
		ch->refcnt++;
		pthread_mutex_unlock(&to_wch(ch)->lock);
	}
	return 0;
}

struct ibv_cq *wisp_create_cq(struct ibv_context *ctx, int cqe,
			      void *cq_context, struct ibv_comp_channel *ch,
			      int comp_vector)
{
	struct wisp_cq *cq;
	int ret;

	if (!ctx || comp_vector < 0 ||
	    comp_vector >= ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = wisp_mem_zalloc(sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	ret = cq_init(cq, ctx, cqe, cq_context, ch);
	if (ret) {
		wisp_mem_free(cq, sizeof(*cq));
		errno = ret;
		return NULL;
	}
	return &cq->base.cq;
}

int wisp_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return EOPNOTSUPP;
}

int wisp_destroy_cq(struct ibv_cq *ibcq)
{
	struct wisp_cq *cq;

	if (!ibcq)
		return EINVAL;
	cq = to_wcq(ibcq);
	if (atomic_load(&cq->users))
		return EBUSY;     /* QPs still use it, as rdma-core says */
	if (ibcq->channel) {
		struct wisp_channel *ch = to_wch(ibcq->channel);
		struct wisp_cq *c, *prev = NULL;

		pthread_mutex_lock(&ch->lock);
		/* Drop events not yet read, as the kernel does: off the
		 * list, and one count of the eventfd each. */
		for (c = ch->head; c && c != cq; c = c->ev_next)
			prev = c;
		if (c) {
			if (prev)
				prev->ev_next = c->ev_next;
			else
				ch->head = c->ev_next;
			if (ch->tail == c)
				ch->tail = prev;
		}
		for (; cq->ev_pending; cq->ev_pending--) {
			uint64_t v;

			if (read(ch->base.fd, &v, sizeof(v)) < 0) {
				/* the count was already taken */
			}
		}
		ibcq->channel->refcnt--;
		pthread_mutex_unlock(&ch->lock);
	}
	pthread_mutex_destroy(&cq->conns_lock);
	free(cq->conns);
	wisp_mem_free_array(cq->ring, cq->size, sizeof(*cq->ring));
	wisp_mem_free(cq, sizeof(*cq));
	return 0;
}

/*
 * The list of streams, as a poller uses it. An empty poll took
 * conns_lock with a trylock and gave it back, a pair of calls that was
 * a tenth of its instructions in user space (issue 13). A poller never
 * waits for the list, it skips it when someone else has it, so a flag
 * does the same, inline: conns_try takes conns_busy with one exchange
 * (acquire: what the last holder did to the list is seen) or says no,
 * conns_done gives it back with a plain store (release). Those who
 * change the list are rare (a QP made or destroyed, a CQ armed): they
 * serialise among themselves on conns_lock, say that they want the list
 * (conns_wanted: no poller takes it from then on, so a thread that
 * polls without a pause cannot keep them out) and wait, yielding the
 * CPU, until the poller that has it is done (conns_hold; they waited on
 * conns_lock in the poller's hands before). A poller that read
 * conns_wanted clear just before it was set may still take the list
 * once; the changer then waits for that poll. A poller holds it for one
 * poll: its receives and at most one bounded wait for room
 * (WISP_POLL_WAIT_US).
 */
static bool conns_try(struct wisp_cq *cq)
{
	return !atomic_load_explicit(&cq->conns_wanted, memory_order_relaxed) &&
	       !atomic_exchange_explicit(&cq->conns_busy, true,
					 memory_order_acquire);
}

static void conns_done(struct wisp_cq *cq)
{
	atomic_store_explicit(&cq->conns_busy, false, memory_order_release);
}

/* conns_lock held: wait until no poller uses the list, then hold it. */
static void conns_hold(struct wisp_cq *cq)
{
	atomic_store_explicit(&cq->conns_wanted, true, memory_order_relaxed);
	while (atomic_exchange_explicit(&cq->conns_busy, true,
					memory_order_acquire))
		sched_yield();
}

/* conns_hold's holder, done: pollers may take the list again. */
static void conns_unhold(struct wisp_cq *cq)
{
	atomic_store_explicit(&cq->conns_busy, false, memory_order_release);
	atomic_store_explicit(&cq->conns_wanted, false, memory_order_relaxed);
}

int wisp_cq_get(struct wisp_cq *cq)
{
	int ret = 0;

	pthread_mutex_lock(&cq->conns_lock);
	conns_hold(cq);
	if (atomic_load(&cq->users) == cq->conns_cap) {
		int cap = cq->conns_cap ? 2 * cq->conns_cap : 4;
		struct wisp_cq_stream *n = realloc(cq->conns,
						   (size_t)cap * sizeof(*n));

		if (!n) {
			ret = ENOMEM;
			goto out;
		}
		cq->conns = n;
		cq->conns_cap = cap;
	}
	atomic_fetch_add(&cq->users, 1);
out:
	conns_unhold(cq);
	pthread_mutex_unlock(&cq->conns_lock);
	return ret;
}

void wisp_cq_put(struct wisp_cq *cq)
{
	atomic_fetch_sub(&cq->users, 1);
}

void wisp_cq_add_conn(struct wisp_cq *cq, struct glue_conn *c,
		      const struct rdmap_qp *sends)
{
	int n;

	pthread_mutex_lock(&cq->conns_lock);
	conns_hold(cq);
	n = atomic_load(&cq->nconns);
	cq->conns[n].conn = c;
	cq->conns[n].sends = sends;
	atomic_store(&cq->nconns, n + 1);
	conns_unhold(cq);
	pthread_mutex_unlock(&cq->conns_lock);
}

void wisp_cq_del_conn(struct wisp_cq *cq, const struct glue_conn *c)
{
	int n;

	/* A poller receives on the list holding conns_busy: once we hold
	 * it, none is using c. */
	pthread_mutex_lock(&cq->conns_lock);
	conns_hold(cq);
	n = atomic_load(&cq->nconns);
	for (int i = 0; i < n; i++) {
		if (cq->conns[i].conn == c) {
			cq->conns[i] = cq->conns[n - 1];
			atomic_store(&cq->nconns, n - 1);
			break;
		}
	}
	conns_unhold(cq);
	pthread_mutex_unlock(&cq->conns_lock);
}

static int cq_take(struct wisp_cq *cq, int num_entries, struct ibv_wc *wc)
{
	uint32_t head, tail;
	int n = 0;

	wisp_lock_take(&cq->cons_lock);
	head = atomic_load_explicit(&cq->head, memory_order_relaxed);
	tail = atomic_load_explicit(&cq->tail, memory_order_acquire);
	while (head != tail && n < num_entries)
		wc[n++] = cq->ring[head++ & (cq->size - 1)];
	atomic_store_explicit(&cq->head, head, memory_order_release);
	wisp_lock_give(&cq->cons_lock);
	return n;
}

static bool cq_empty(struct wisp_cq *cq)
{
	return atomic_load_explicit(&cq->tail, memory_order_acquire) ==
	       atomic_load_explicit(&cq->head, memory_order_relaxed);
}

int wisp_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct wisp_cq *cq = to_wcq(ibcq);

	if (num_entries <= 0)
		return 0;
	if (!cq_empty(cq)) {
		/* Still a polling thread for these streams, though it does
		 * not receive this time (TLS: it keeps sending for them). */
		if (atomic_load(&cq->nconns) &&
		    atomic_load(&cq->armed) == CQ_DISARMED && conns_try(cq)) {
			int n = atomic_load(&cq->nconns);

			for (int i = 0; i < n; i++) {
				glue_conn_polled(cq->conns[i].conn);
				/* It waits for room when it finds none
				 * (below): sends on full sockets stay its. */
				if (n <= GLUE_WAIT_MAX)
					glue_conn_tx_polled(cq->conns[i].conn);
			}
			conns_done(cq);
		}
		return cq_take(cq, num_entries, wc);
	}
	/* Empty: a polling thread receives for its QPs itself rather than
	 * wait for the engine to wake up, which is most of a small
	 * message's latency, on the streams that can complete here
	 * (struct wisp_cq_stream). Not when the CQ is armed: that thread
	 * is about to sleep on the channel and the engine must keep going.
	 * Another poller at it: skip. */
	if (atomic_load(&cq->nconns) &&
	    atomic_load(&cq->armed) == CQ_DISARMED && conns_try(cq)) {
		struct glue_conn *wc_conn[GLUE_WAIT_MAX];
		bool wc_rx[GLUE_WAIT_MAX];
		int n = atomic_load(&cq->nconns);
		/* What completes here meanwhile goes straight to wc (A
		 * poller's own completions, above). The thread-local's
		 * address is looked up once, for its set and its clear: in
		 * a shared library each lookup is a __tls_get_addr call,
		 * which the compiler would repeat rather than keep the
		 * address across the calls between (volatile: kept). */
		struct cq_hand hand = {
			.cq = cq, .wc = wc, .cap = num_entries,
		};
		struct cq_hand **volatile mine = &cq_hand;
		/* One clock reading for the whole poll: its stamps on every
		 * stream and the wait for room (glue_conn_recv_at). */
		int64_t now = glue_poll_clock_ms();

		*mine = &hand;
		for (int i = 0; i < n; i++) {
			const struct wisp_cq_stream *s = &cq->conns[i];
			bool rx = !s->sends || rdmap_qp_reads_out(s->sends);

			if (rx)
				glue_conn_recv_at(s->conn, now);
			else
				glue_conn_send_poll(s->conn);
			if (i < GLUE_WAIT_MAX) {
				wc_conn[i] = s->conn;
				wc_rx[i] = rx;
			}
		}
		/* Still empty, and what can complete here next waits for
		 * room in full sockets: wait for it, bounded, instead of
		 * returning to a caller that can only poll again
		 * (glue_engine.c "Waiting for room"; it returns at once
		 * unless every stream's sends are blocked so). */
		if (n <= GLUE_WAIT_MAX && !hand.n && cq_empty(cq))
			glue_conns_wait_tx_at(wc_conn, wc_rx, n, now);
		*mine = NULL;
		conns_done(cq);
		/* Anything in the ring came after what was handed. */
		if (hand.n)
			return hand.n + (hand.n < num_entries && !cq_empty(cq) ?
					 cq_take(cq, num_entries - hand.n,
						 wc + hand.n) : 0);
	}
	return cq_empty(cq) ? 0 : cq_take(cq, num_entries, wc);
}

int wisp_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct wisp_cq *cq = to_wcq(ibcq);

	if (!ibcq->channel)
		return EINVAL;
	/* Whoever polled this CQ's QPs' sockets now waits for an event:
	 * hand them back to the engine. */
	if (atomic_load(&cq->nconns)) {
		pthread_mutex_lock(&cq->conns_lock);
		conns_hold(cq);
		for (int i = 0; i < atomic_load(&cq->nconns); i++)
			glue_conn_release(cq->conns[i].conn);
		conns_unhold(cq);
		pthread_mutex_unlock(&cq->conns_lock);
	}
	/* Arming "any" over "solicited" widens it; never narrow it. */
	if (solicited_only) {
		int exp = CQ_DISARMED;

		atomic_compare_exchange_strong(&cq->armed, &exp,
					       CQ_ARMED_SOLICITED);
	} else {
		atomic_store(&cq->armed, CQ_ARMED_ANY);
	}
	return 0;
}

int wisp_get_cq_event(struct ibv_comp_channel *ibch, struct ibv_cq **out,
		      void **cq_context)
{
	struct wisp_channel *ch = to_wch(ibch);
	struct wisp_cq *cq;
	uint64_t v;

	/* Blocks unless the application made the fd non-blocking, then
	 * fails with EAGAIN, as rdma-core's does. */
	if (read(ibch->fd, &v, sizeof(v)) != sizeof(v))
		return -1;
	pthread_mutex_lock(&ch->lock);
	cq = ch_pop(ch);
	if (cq && --cq->ev_pending)
		ch_append(ch, cq);    /* its next event, after the others' */
	pthread_mutex_unlock(&ch->lock);
	if (!cq) {
		errno = EAGAIN;
		return -1;
	}
	*out = &cq->base.cq;
	*cq_context = cq->base.cq.cq_context;
	return 0;
}

void wisp_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ------------------------------------------------------------------ */
/* The extended CQ (ibv_create_cq_ex): polling one entry at a time    */
/* ------------------------------------------------------------------ */

static struct wisp_cq *cqx_to_wcq(struct ibv_cq_ex *cqx)
{
	return container_of(cqx, struct wisp_cq, base.cqx);
}

static int cqx_next(struct ibv_cq_ex *cqx)
{
	struct wisp_cq *cq = cqx_to_wcq(cqx);

	if (wisp_poll_cq(&cq->base.cq, 1, &cq->cur) != 1)
		return ENOENT;
	cqx->wr_id = cq->cur.wr_id;
	cqx->status = cq->cur.status;
	return 0;
}

static int cqx_start(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	if (attr->comp_mask)
		return EINVAL;
	return cqx_next(cqx);
}

static void cqx_end(struct ibv_cq_ex *cqx)
{
	(void)cqx;
}

static enum ibv_wc_opcode cqx_opcode(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.opcode;
}

static uint32_t cqx_vendor_err(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.vendor_err;
}

static uint32_t cqx_byte_len(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.byte_len;
}

static __be32 cqx_imm(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.imm_data;
}

static uint32_t cqx_qp_num(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.qp_num;
}

static uint32_t cqx_src_qp(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.src_qp;
}

static unsigned int cqx_wc_flags(struct ibv_cq_ex *cqx)
{
	return cqx_to_wcq(cqx)->cur.wc_flags;
}

static uint32_t cqx_zero32(struct ibv_cq_ex *cqx)
{
	(void)cqx;
	return 0;
}

static uint8_t cqx_zero8(struct ibv_cq_ex *cqx)
{
	(void)cqx;
	return 0;
}


#define CQX_SUPPORTED (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | \
		       IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
		       IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | \
		       IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *wisp_create_cq_ex(struct ibv_context *ctx,
				    struct ibv_cq_init_attr_ex *attr)
{
	struct wisp_cq *cq;
	int ret;

	if (!ctx || !attr) {
		errno = EINVAL;
		return NULL;
	}
	/* A vector the device does not have is a bad argument, as with
	 * ibv_create_cq (the kernel's EINVAL). */
	if (attr->comp_vector >= (uint32_t)ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	/* Time stamps, flow tags and parent domains are not offered. */
	if ((attr->wc_flags & ~(uint64_t)CQX_SUPPORTED) ||
	    (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = wisp_mem_zalloc(sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	ret = cq_init(cq, ctx, (int)attr->cqe, attr->cq_context,
		      attr->channel);
	if (ret) {
		wisp_mem_free(cq, sizeof(*cq));
		errno = ret;
		return NULL;
	}
	cq->base.cqx.start_poll = cqx_start;
	cq->base.cqx.next_poll = cqx_next;
	cq->base.cqx.end_poll = cqx_end;
	cq->base.cqx.read_opcode = cqx_opcode;
	cq->base.cqx.read_vendor_err = cqx_vendor_err;
	cq->base.cqx.read_byte_len = cqx_byte_len;
	cq->base.cqx.read_imm_data = cqx_imm;
	cq->base.cqx.read_qp_num = cqx_qp_num;
	cq->base.cqx.read_src_qp = cqx_src_qp;
	cq->base.cqx.read_wc_flags = cqx_wc_flags;
	cq->base.cqx.read_slid = cqx_zero32;
	cq->base.cqx.read_sl = cqx_zero8;
	cq->base.cqx.read_dlid_path_bits = cqx_zero8;
	return &cq->base.cqx;
}
