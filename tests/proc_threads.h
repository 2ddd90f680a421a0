/* SPDX-License-Identifier: MIT */
/*
 * proc_threads.h - the threads of this process as /proc/self/task shows
 * them, told apart by name: how many bear the given name, how many any
 * other. A thread that ends while the directory is read (its comm gone)
 * counts in neither. For the suites that watch mem/'s short-lived arena
 * helper ("wisp-mem") or count threads around it. Include after
 * <criterion/criterion.h>.
 */
#ifndef WISP_TESTS_PROC_THREADS_H
#define WISP_TESTS_PROC_THREADS_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

struct proc_threads {
	int named;     /* threads named name */
	int others;    /* every other live thread */
};

static inline struct proc_threads proc_threads(const char *name)
{
	struct proc_threads t = { 0, 0 };
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	cr_assert_not_null(d, "/proc/self/task: %s", strerror(errno));
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;     /* ended meanwhile */
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
		comm[strcspn(comm, "\n")] = 0;
		if (!comm[0])
			continue;
		if (!strcmp(comm, name))
			t.named++;
		else
			t.others++;
	}
	closedir(d);
	return t;
}

#endif
