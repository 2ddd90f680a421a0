/* SPDX-License-Identifier: MIT */
/*
 * crt_runner.c - the runner behind tests/tsan/criterion/criterion.h: the
 * smallest one ThreadSanitizer accepts. Without arguments it runs every
 * registered test (each parameter of a parameterized test counts as one
 * run), each in a fresh process: it execs its own binary with
 * "--crt-run INDEX PARAM" and waits, bounded by the test's .timeout times
 * WISP_TSAN_TIMEOUT_SCALE (default 4: TSan is slow). A child that exits
 * 0 passed, 77 was skipped, anything else (a failed assertion: 1; a race
 * TSan reported: TSAN_OPTIONS exitcode, 66 in scripts/test.sh; a signal)
 * failed. Output follows Criterion's: "[PASS] suite::name",
 * "[FAIL] suite::name", "[SKIP] suite::name" and one synthesis line.
 *
 *   test_x_tsan                  every test
 *   test_x_tsan --filter GLOB    the tests whose suite::name matches
 *   test_x_tsan --list           their names
 */
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#define EXIT_SKIP 77
#define DEFAULT_TIMEOUT_S 300.0

static struct crt_test *tests;
static unsigned ntests;
static bool expect_failed;

void crt_register(struct crt_test *t)
{
	struct crt_test **p = &tests;

	/* Sorted by suite, then name, as Criterion lists them. */
	while (*p && (strcmp((*p)->suite, t->suite) < 0 ||
		      (strcmp((*p)->suite, t->suite) == 0 &&
		       strcmp((*p)->name, t->name) < 0)))
		p = &(*p)->next;
	t->next = *p;
	*p = t;
	ntests++;
}

void crt_fail(bool fatal, const char *file, int line, const char *expr,
	      const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[----] %s:%d: Assertion failed: %s:", file, line,
		expr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (fatal)
		_exit(1);
	expect_failed = true;
}

void crt_log(const char *fmt, ...)
{
	va_list ap;

	fputs("[----] ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

void crt_skip(const char *fmt, ...)
{
	va_list ap;

	fputs("[----] skipped:", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
	_exit(EXIT_SKIP);
}

static struct crt_test *nth(unsigned i)
{
	struct crt_test *t = tests;

	while (t && i--)
		t = t->next;
	return t;
}

/* In the child: run one test (one parameter), exit with its verdict. */
static int run_one(unsigned index, size_t param)
{
	struct crt_test *t = nth(index);

	if (!t)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (t->pfn) {
		struct criterion_test_params p = t->params();

		if (param >= p.length)
			return 2;
		t->pfn((char *)p.params + param * p.size);
	} else {
		t->fn();
	}
	fflush(stdout);
	return expect_failed ? 1 : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* In the parent: exec the child, wait for it within limit seconds. */
static int spawn(const char *self, unsigned index, size_t param,
		 double limit, bool *timed_out)
{
	char idx[16], par[24];
	double end = now_s() + limit;
	int status;
	pid_t pid;

	snprintf(idx, sizeof(idx), "%u", index);
	snprintf(par, sizeof(par), "%zu", param);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execl(self, self, "--crt-run", idx, par, (char *)NULL);
		_exit(127);
	}
	*timed_out = false;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		if (r == pid)
			break;
		if (now_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			*timed_out = true;
			break;
		}
		nanosleep(&ts, NULL);
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	const char *filter = NULL, *scale_env = getenv("WISP_TSAN_TIMEOUT_SCALE");
	double scale = scale_env ? atof(scale_env) : 4.0;
	unsigned passed = 0, failed = 0, crashed = 0, skipped = 0, tested = 0;
	bool list = false;
	unsigned i = 0;

	if (argc == 4 && strcmp(argv[1], "--crt-run") == 0)
		return run_one((unsigned)strtoul(argv[2], NULL, 10),
			       (size_t)strtoul(argv[3], NULL, 10));
	for (int a = 1; a < argc; a++) {
		if (strcmp(argv[a], "--list") == 0)
			list = true;
		else if (strcmp(argv[a], "--filter") == 0 && a + 1 < argc)
			filter = argv[++a];
		else if (strncmp(argv[a], "--filter=", 9) == 0)
			filter = argv[a] + 9;
		/* Criterion's other options (--jobs, --verbose) mean nothing
		 * here: one test at a time, always verbose. */
	}
	if (scale <= 0)
		scale = 4.0;
	printf("[====] Running %u tests (wisp's TSan runner: one process each)\n",
	       ntests);
	for (struct crt_test *t = tests; t; t = t->next, i++) {
		char full[256];
		size_t nparam = 1;

		snprintf(full, sizeof(full), "%s/%s", t->suite, t->name);
		if (filter && fnmatch(filter, full, 0) != 0)
			continue;
		if (list) {
			printf("%s::%s\n", t->suite, t->name);
			continue;
		}
		if (t->pfn)
			nparam = t->params().length;
		for (size_t p = 0; p < nparam; p++) {
			double t0 = now_s(), limit;
			bool timed_out;
			int rc;

			limit = (t->timeout > 0 ? t->timeout : DEFAULT_TIMEOUT_S) *
				scale;
			rc = spawn("/proc/self/exe", i, p, limit, &timed_out);
			tested++;
			if (rc == 0) {
				passed++;
				printf("[PASS] %s::%s: (%.2fs)\n", t->suite,
				       t->name, now_s() - t0);
			} else if (rc == EXIT_SKIP) {
				skipped++;
				printf("[SKIP] %s::%s\n", t->suite, t->name);
			} else if (timed_out) {
				crashed++;
				printf("[FAIL] %s::%s: timed out after %.0f s\n",
				       t->suite, t->name, limit);
			} else if (rc > 128) {
				crashed++;
				printf("[FAIL] %s::%s: crashed (signal %d)\n",
				       t->suite, t->name, rc - 128);
			} else {
				failed++;
				printf("[FAIL] %s::%s: exit status %d%s\n",
				       t->suite, t->name, rc,
				       rc == 66 ? " (a race TSan reported)" : "");
			}
			fflush(stdout);
		}
	}
	if (list)
		return 0;
	printf("[====] Synthesis: Tested: %u | Passing: %u | Failing: %u | "
	       "Crashing: %u \n", tested, passed, failed, crashed);
	(void)skipped;
	return failed || crashed ? 1 : 0;
}
