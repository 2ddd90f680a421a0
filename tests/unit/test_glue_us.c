/* SPDX-License-Identifier: MIT */
/*
 * The three settings in microseconds (WISP_SEND_CORK, WISP_POST_POLL,
 * WISP_POLL_WAIT_US) share one grammar and one reader (tcp-glue
 * parse_us, us_setting): "on", "off", or decimal digits only from 1 to
 * the setting's bound. One table of values runs through each setting's
 * parser, with that setting's "on" and bound; and each setting's
 * variable, set to nonsense, keeps the engine from starting.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "glue.h"

struct us_setting {
	const char *name;          /* the environment variable */
	int (*parse)(const char *s, unsigned *us);
	unsigned on_us, max_us;
	const char *nonsense;      /* a value the engine refuses */
};

static const struct us_setting settings[] = {
	{ "WISP_SEND_CORK", glue_send_cork_parse,
	  GLUE_SEND_CORK_ON_US, GLUE_SEND_CORK_MAX_US, "sometimes" },
	{ "WISP_POST_POLL", glue_post_poll_parse,
	  GLUE_POST_POLL_ON_US, GLUE_POST_POLL_MAX_US, "always" },
	{ "WISP_POLL_WAIT_US", glue_poll_wait_parse,
	  GLUE_POLL_WAIT_ON_US, GLUE_POLL_WAIT_MAX_US, "soon" },
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

/* Refused by every one of them, whatever its bound. */
static const char *const refused[] = {
	"", "0", "10001", "-1", "+5", " 5", "5 ", "5us", "0x10", "1e3",
	"ON", "Off", "auto", "on ", "1.5", "99999999999999999999999",
};

Test(glue_us, grammar_and_bounds_of_each_setting)
{
	for (size_t k = 0; k < NSETTINGS; k++) {
		const struct us_setting *s = &settings[k];
		char max[16], over[16];
		unsigned us = 12345;

		snprintf(max, sizeof(max), "%u", s->max_us);
		snprintf(over, sizeof(over), "%u", s->max_us + 1);

		cr_assert_eq(s->parse("on", &us), 0, "%s: on", s->name);
		cr_assert_eq(us, s->on_us, "%s: on gave %u", s->name, us);
		cr_assert_eq(s->parse("off", &us), 0, "%s: off", s->name);
		cr_assert_eq(us, 0, "%s: off gave %u", s->name, us);
		cr_assert_eq(s->parse("1", &us), 0, "%s: 1", s->name);
		cr_assert_eq(us, 1, "%s: 1 gave %u", s->name, us);
		cr_assert_eq(s->parse(max, &us), 0, "%s: %s", s->name, max);
		cr_assert_eq(us, s->max_us, "%s: %s gave %u", s->name, max,
			     us);

		us = 777;
		cr_assert_eq(s->parse(NULL, &us), -EINVAL, "%s: NULL", s->name);
		cr_assert_eq(s->parse(over, &us), -EINVAL, "%s: \"%s\" was "
			     "accepted", s->name, over);
		for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]);
		     i++)
			cr_assert_eq(s->parse(refused[i], &us), -EINVAL,
				     "%s: \"%s\" was accepted", s->name,
				     refused[i]);
		cr_assert_eq(us, 777, "%s: a refused value left *us alone",
			     s->name);
	}
}

Test(glue_us, bad_environment_value_fails_the_engine)
{
	for (size_t k = 0; k < NSETTINGS; k++) {
		const struct us_setting *s = &settings[k];
		struct glue_engine *e;

		cr_assert_eq(setenv(s->name, s->nonsense, 1), 0);
		e = glue_engine_create(GLUE_EPOLL);
		unsetenv(s->name);
		cr_assert_null(e, "%s=%s started an engine", s->name,
			       s->nonsense);
		cr_assert_eq(errno, EINVAL, "%s: errno %d", s->name, errno);
	}
}
