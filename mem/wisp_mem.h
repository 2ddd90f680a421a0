/* SPDX-License-Identifier: MIT */
/*
 * wisp_mem.h - memory for the state of a connection: its QP core, rings,
 * CQ, rdma_cm id, events and socket wrapper.
 *
 * Each of those objects is allocated once per connection, inside the
 * connection setup. From a fresh heap every new page of them costs a page
 * fault at its first touch, which on a VM can take 10 us or more, and in a
 * burst of connections decides the slowest ones (issue 13). These objects
 * therefore come from chunks of memory populated ahead in one madvise
 * (MADV_POPULATE_WRITE), one size class per few sizes, and a freed object
 * goes on its class's free list for the next connection. A program with
 * hundreds of connections gets its chunks from 2 MiB arenas backed by
 * transparent huge pages where the kernel has them, each populated ahead
 * by a short-lived thread (wisp_mem.c).
 *
 * Contract, as calloc/free with the size passed back:
 *   - wisp_mem_zalloc(len) returns zeroed memory of at least len octets,
 *     aligned to 64 octets, or NULL with errno ENOMEM. len 0 is taken as 1.
 *   - wisp_mem_free(p, len) takes the len p was allocated with. NULL is a
 *     no-op. A different len is a bug; the ASan builds, which hand
 *     every object to calloc with its length beside it, abort on it.
 *   - Sizes above WISP_MEM_POOLED_MAX go to malloc and free.
 *   - The memory of the pool stays with the process at its peak, as with
 *     malloc's arenas; it is reused, never returned.
 *
 *   - wisp_mem_expect_many() says that many connections are to come (a
 *     listener): the pool has its first arena made ahead, so that the
 *     first of them do not wait for its populate. It costs the process
 *     2 MiB at once instead of when a few dozen connections need them.
 *
 * One pool per process, whichever of wisp's libraries allocates (see
 * wisp_mem.c). Thread-safe (one lock, held for a free-list push or pop,
 * or while a small chunk is mapped; arenas are made without it); not
 * async-signal-safe.
 */
#ifndef WISP_MEM_H
#define WISP_MEM_H

#include <stdbool.h>
#include <stddef.h>

#define WISP_MEM_POOLED_MAX (16u * 1024)

void *wisp_mem_zalloc(size_t len);
/* n objects of size octets each; NULL and ENOMEM when n * size overflows. */
void *wisp_mem_calloc(size_t n, size_t size);
void wisp_mem_free(void *p, size_t len);
/* wisp_mem_free(p, n * size) for what wisp_mem_calloc(n, size) gave. */
void wisp_mem_free_array(void *p, size_t n, size_t size);

void wisp_mem_expect_many(void);

/* Whether this build pools (false in the ASan and fuzz builds). */
bool wisp_mem_pooled(void);

#endif
