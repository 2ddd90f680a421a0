/* SPDX-License-Identifier: MIT */
/*
 * Shared by the verbs suites: wisp0, the one device wisp's
 * libibverbs.so.1 lists, opened before each test and closed after it.
 */
#ifndef WISP_TEST_VERBS_OPEN_H
#define WISP_TEST_VERBS_OPEN_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <criterion/criterion.h>
#include <infiniband/verbs.h>

static struct ibv_device **dev_list;
static struct ibv_context *ctx;

/* The device list holds exactly one device, and it opens. */
static inline void wisp0_open(void)
{
	int n = -1;

	dev_list = ibv_get_device_list(&n);
	cr_assert_not_null(dev_list, "ibv_get_device_list: %s", strerror(errno));
	cr_assert_eq(n, 1);
	ctx = ibv_open_device(dev_list[0]);
	cr_assert_not_null(ctx, "ibv_open_device: %s", strerror(errno));
}

/* Closes what wisp0_open opened, as far as it got. */
static inline void wisp0_close(void)
{
	if (ctx)
		cr_expect_eq(ibv_close_device(ctx), 0);
	if (dev_list)
		ibv_free_device_list(dev_list);
	ctx = NULL;
	dev_list = NULL;
}

#endif
