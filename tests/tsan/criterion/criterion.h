/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for the part of Criterion's API that wisp's data-path and
 * rdma_cm suites use, so that the same test sources run under
 * ThreadSanitizer. Criterion 2.4's runner cannot start there: its
 * boxfort arena is mapped at a random address in [0x2000'0000'0000,
 * 0x6000'0000'0000), which TSan's shadow, meta and protected ranges
 * occupy almost entirely (docs/testing.md). tests/tsan/crt_runner.c runs
 * every test in a process of its own (an exec of the binary, not a fork)
 * and prints Criterion's lines ([PASS] / [FAIL] suite::name, the
 * synthesis) so that scripts/test.sh reads it as it reads Criterion.
 *
 * Covered: Test(suite, name, .timeout = s), ParameterizedTest with
 * ParameterizedTestParameters and cr_make_param_array, cr_assert and the
 * comparison family, cr_expect_eq, cr_log_info, cr_skip_test. An
 * assertion that fails ends the test's process (in whatever thread).
 */
#ifndef WISP_TSAN_CRITERION_H
#define WISP_TSAN_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct criterion_test_params {
	size_t size;              /* of one parameter */
	void *params;
	size_t length;
};

struct crt_test {
	const char *suite, *name;
	void (*fn)(void);                           /* plain tests */
	void (*pfn)(void *);                        /* parameterized */
	struct criterion_test_params (*params)(void);
	double timeout;                             /* seconds, 0: default */
	struct crt_test *next;
};

/* Record a test (from a constructor). */
void crt_register(struct crt_test *t);

/* A failed assertion: report file, line, expression and message, then
 * end the test (fatal) or mark it failed and go on (!fatal). */
void crt_fail(bool fatal, const char *file, int line, const char *expr,
	      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Criterion's cr_log_info: one "[----]" line. */
void crt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* End the test as skipped, with the reason. */
void crt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2),
						    noreturn));

#define CRT_REG(S, N, ...)                                         \
	static struct crt_test crt_desc_##S##_##N = {              \
		.suite = #S, .name = #N, __VA_ARGS__ };             \
	__attribute__((constructor)) static void                         \
	crt_reg_##S##_##N(void)                                    \
	{                                                                  \
		crt_register(&crt_desc_##S##_##N);                  \
	}

#define Test(S, N, ...)                                            \
	static void crt_fn_##S##_##N(void);                        \
	CRT_REG(S, N, .fn = crt_fn_##S##_##N, __VA_ARGS__)  \
	static void crt_fn_##S##_##N(void)

#define ParameterizedTestParameters(S, N)                          \
	static struct criterion_test_params crt_params_##S##_##N(void)

#define ParameterizedTest(param, S, N, ...)                        \
	static void crt_pfn_##S##_##N(param);                      \
	static void crt_pwrap_##S##_##N(void *p)                   \
	{                                                                  \
		crt_pfn_##S##_##N(p);                               \
	}                                                                  \
	CRT_REG(S, N, .pfn = crt_pwrap_##S##_##N,           \
		.params = crt_params_##S##_##N, __VA_ARGS__)        \
	static void crt_pfn_##S##_##N(param)

#define cr_make_param_array(type, array, len)                             \
	((struct criterion_test_params){ sizeof(type), (void *)(array), (len) })

/* The message is optional, as in Criterion; " " keeps the format
 * string non-empty when it is left out. */
#define CRT_CHECK(fatal, cond, text, ...)                                 \
	do {                                                               \
		if (!(cond))                                               \
			crt_fail(fatal, __FILE__, __LINE__, text,          \
				 " " __VA_ARGS__);                         \
	} while (0)

#define cr_assert(cond, ...) CRT_CHECK(true, cond, #cond, __VA_ARGS__)
#define cr_assert_eq(a, b, ...)                                           \
	CRT_CHECK(true, (a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)                                          \
	CRT_CHECK(true, (a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)                                           \
	CRT_CHECK(true, (a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)                                          \
	CRT_CHECK(true, (a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)                                           \
	CRT_CHECK(true, (a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)                                          \
	CRT_CHECK(true, (a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_null(p, ...)                                            \
	CRT_CHECK(true, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...)                                        \
	CRT_CHECK(true, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_not(cond, ...)                                          \
	CRT_CHECK(true, !(cond), "!(" #cond ")", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)                                       \
	CRT_CHECK(true, strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...)                                    \
	CRT_CHECK(true, memcmp((a), (b), (n)) == 0, #a " equals " #b,      \
		  __VA_ARGS__)
#define cr_expect_eq(a, b, ...)                                           \
	CRT_CHECK(false, (a) == (b), #a " == " #b, __VA_ARGS__)

#define cr_log_info(...) crt_log(__VA_ARGS__)
#define cr_skip_test(...) crt_skip(" " __VA_ARGS__)

#endif /* WISP_TSAN_CRITERION_H */
