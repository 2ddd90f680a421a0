/* SPDX-License-Identifier: MIT */
/*
 * The STag table (rdmap/rdmap_stag.h): the range and rights checks of an
 * MR, registration and lookup.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "rdmap_stag.h"
#include "test_util.h"

#define PD ((const void *)0x1)

static struct rdmap_mr mr_at(uint64_t iova, uint64_t length)
{
	struct rdmap_mr m = {
		.addr = NULL, .iova = iova, .length = length,
		.access = RDMAP_ACC_LOCAL_WRITE | RDMAP_ACC_REMOTE_WRITE |
			  RDMAP_ACC_REMOTE_READ,
		.pd = PD,
	};

	atomic_init(&m.valid, true);
	return m;
}

/* ---- rdmap_mr_check ------------------------------------------------ */

Test(stag, mr_check_order)
{
	struct rdmap_mr m = mr_at(0x1000, 0x100);

	cr_assert_eq(rdmap_mr_check(&m, PD, RDMAP_ACC_REMOTE_READ, 0x1000,
				    0x100), RDMAP_MR_OK);
	cr_assert_eq(rdmap_mr_check(&m, PD, 0, 0x1100, 1), RDMAP_MR_BOUNDS);
	cr_assert_eq(rdmap_mr_check(&m, PD, 0, UINT64_MAX, 1), RDMAP_MR_WRAP);
	/* rights, PD and validity come before the range */
	m.access = RDMAP_ACC_LOCAL_WRITE;
	cr_assert_eq(rdmap_mr_check(&m, PD, RDMAP_ACC_REMOTE_READ, UINT64_MAX,
				    1), RDMAP_MR_RIGHTS);
	cr_assert_eq(rdmap_mr_check(&m, (void *)2, 0, 0, 0), RDMAP_MR_WRONG_PD);
	atomic_store(&m.valid, false);
	cr_assert_eq(rdmap_mr_check(&m, PD, 0, 0, 0), RDMAP_MR_INVALID);
}

/*
 * RDMAP checks local SGEs and Read Request sources with the range check
 * DDP applies to placement (ddp_tagged_range): the two agree on every
 * edge, including an MR that ends at TO 2^64 - 1, where iova + length
 * itself wraps to 0.
 */
Test(stag, mr_check_is_the_ddp_range_check)
{
	static const uint64_t M = UINT64_MAX;
	static const struct { uint64_t iova, length; } mrs[] = {
		{ 0x1000, 0x100 }, { M - 0xff, 0x100 }, { 0, M },
		{ M - 0xffff, 0x10000 }, { 1, UINT32_MAX },
	};
	static const uint64_t tos[] = { 0, 1, 0xfff, 0x1000, 0x10ff, 0x1100,
					M - 0x100, M - 0xff, M - 1, M };
	static const uint64_t lens[] = { 0, 1, 2, 0xff, 0x100, 0x101,
					 UINT32_MAX, M };
	unsigned int n = 0;

	for (size_t a = 0; a < sizeof(mrs) / sizeof(mrs[0]); a++) {
		struct rdmap_mr m = mr_at(mrs[a].iova, mrs[a].length);

		for (size_t b = 0; b < sizeof(tos) / sizeof(tos[0]); b++) {
			for (size_t c = 0; c < sizeof(lens) / sizeof(lens[0]); c++) {
				enum ddp_error d = ddp_tagged_range(
					m.iova, m.length, tos[b], lens[c]);
				enum rdmap_mr_check want =
					d == DDP_ERR_NONE ? RDMAP_MR_OK :
					d == DDP_ERR_T_TO_WRAP ? RDMAP_MR_WRAP :
					RDMAP_MR_BOUNDS;

				cr_assert_eq(rdmap_mr_check(&m, PD, 0, tos[b],
							    lens[c]), want,
					     "MR [%#llx +%#llx) TO %#llx len %#llx",
					     (unsigned long long)m.iova,
					     (unsigned long long)m.length,
					     (unsigned long long)tos[b],
					     (unsigned long long)lens[c]);
				n++;
			}
		}
	}
	/* The case the old arithmetic got wrong: the last octets of an MR
	 * at the top of the TO space. */
	struct rdmap_mr top = mr_at(M - 0xff, 0x100);

	cr_assert_eq(rdmap_mr_check(&top, PD, 0, M - 0x10, 0x10), RDMAP_MR_OK);
	cr_log_info("%u (MR, TO, length) cases agree with ddp_tagged_range", n);
}
