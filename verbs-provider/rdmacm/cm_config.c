/* SPDX-License-Identifier: MIT */
/*
 * cm_config.c - configuration of unmodified programs through WISP_*
 * environment variables (docs/configuration.md), the per-id options of
 * rdma_set_option(WISP_OPTION_LEVEL), and logging.
 *
 * Values are parsed strictly: anything but the documented spellings is an
 * error that names the variable and the accepted values, and the call that
 * first needed the configuration fails with EINVAL. A typo must not
 * silently run a benchmark with other settings than intended.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_internal.h"
#include "glue_mpa.h"
#include "wisp_rdmacm.h"

#define TIMEOUT_MAX_MS 3600000

/* Defaults: rev 2 with IRD/ORD and peer-to-peer offering both RTRs (what
 * the issue asks of wisp as Initiator), no CRC unless asked (siw's
 * mpa_crc_required default), 10 s for the connect and each MPA frame
 * (siw's MPAREQ_TIMEOUT). */
static const struct wcm_opts opts_default = {
	.mpa_rev = 2,
	.crc = false,
	.p2p = true,
	.rtr_prefer = MPA_RTR_READ,
	.timeout_ms = 10000,
	.hold_ms = GLUE_MPA_INITIATOR_HOLD_MS,
	.afonly = -1,
};

/* Bounds of the passive side (docs/configuration.md): a slow or silent
 * peer costs a socket and a few hundred octets until its Request arrives
 * or WISP_MPA_TIMEOUT_MS passes, so these bound what hundreds of them can
 * hold. The backlog default is the kernel's (net.rdma_ucm.max_backlog). */
static const struct wcm_limits limits_default = {
	.max_pending = 256,
	.max_pending_addr = 32,
	.max_backlog = 1024,
};

void wcm_log(enum wcm_log_level level, const char *fmt, ...)
{
	static const char *const names[] = {
		[WCM_LOG_ERROR] = "error", [WCM_LOG_WARN] = "warning",
		[WCM_LOG_INFO] = "info", [WCM_LOG_DEBUG] = "debug",
	};
	char line[512];
	va_list ap;

	if (level > wcm.log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "wisp rdmacm %s: %s\n", names[level], line);
}

static int bad_value(const char *var, const char *val, const char *accepted)
{
	fprintf(stderr, "wisp: %s=\"%s\" is not valid; accepted values: %s\n",
		var, val, accepted);
	return -EINVAL;
}

/* One of words[] (NULL-terminated): its index, or -EINVAL. */
static int parse_word(const char *var, const char *val,
		      const char *const *words, const char *accepted)
{
	for (int i = 0; words[i]; i++)
		if (!strcmp(val, words[i]))
			return i;
	return bad_value(var, val, accepted);
}

/* A whole number of what (e.g. "milliseconds") in [min, max] into *out:
 * decimal digits only, no sign, no suffix. */
static int parse_whole(const char *var, const char *val, const char *what,
		       long min, long max, int *out)
{
	char *end;
	long v = -1;

	if (val[0] >= '0' && val[0] <= '9') {
		errno = 0;
		v = strtol(val, &end, 10);
		if (errno || *end)
			v = -1;
	}
	if (v < min || v > max) {
		char accepted[80];

		snprintf(accepted, sizeof(accepted),
			 "a whole number of %s, %ld to %ld", what, min, max);
		return bad_value(var, val, accepted);
	}
	*out = (int)v;
	return 0;
}

static int parse_ms(const char *var, const char *val, long min, long max,
		    int *out)
{
	return parse_whole(var, val, "milliseconds", min, max, out);
}

/* An optional WISP_* count in [1, WCM_LIMIT_MAX] into *out. */
static int parse_limit(const char *var, const char *what, int *out)
{
	const char *v = getenv(var);

	return v ? parse_whole(var, v, what, 1, WCM_LIMIT_MAX, out) : 0;
}

int wcm_config_load(void)
{
	static const char *const bits[] = { "0", "1", NULL };
	static const char *const revs[] = { "1", "2", NULL };
	static const char *const rtrs[] = { "read", "write", NULL };
	static const char *const logs[] = {
		[WCM_LOG_ERROR] = "error", [WCM_LOG_WARN] = "warn",
		[WCM_LOG_INFO] = "info", [WCM_LOG_DEBUG] = "debug", NULL,
	};
	struct wcm_opts o = opts_default;
	enum wcm_log_level level = WCM_LOG_WARN;
	struct wcm_limits lim = limits_default;
	const char *v;
	int r, ret = 0;

	v = getenv("WISP_LOG");
	if (v) {
		r = parse_word("WISP_LOG", v, logs, "error, warn, info, debug");
		if (r < 0)
			ret = r;
		else
			level = (enum wcm_log_level)r;
	}
	v = getenv("WISP_MPA_REV");
	if (v) {
		r = parse_word("WISP_MPA_REV", v, revs, "1, 2");
		if (r < 0)
			ret = r;
		else
			o.mpa_rev = (uint8_t)(r + 1);
	}
	v = getenv("WISP_CRC");
	if (v) {
		r = parse_word("WISP_CRC", v, bits, "0, 1");
		if (r < 0)
			ret = r;
		else
			o.crc = r;
	}
	v = getenv("WISP_P2P");
	if (v) {
		r = parse_word("WISP_P2P", v, bits, "0, 1");
		if (r < 0)
			ret = r;
		else
			o.p2p = r;
	}
	v = getenv("WISP_RTR");
	if (v) {
		r = parse_word("WISP_RTR", v, rtrs, "read, write");
		if (r < 0) {
			ret = r;
		} else {
			o.rtr_prefer = r ? MPA_RTR_WRITE : MPA_RTR_READ;
			o.rtr_only = true;
		}
	}
	v = getenv("WISP_MPA_TIMEOUT_MS");
	if (v) {
		r = parse_ms("WISP_MPA_TIMEOUT_MS", v, 1, TIMEOUT_MAX_MS,
			     &o.timeout_ms);
		if (r < 0)
			ret = r;
	}
	v = getenv("WISP_MPA_HOLD_MS");
	if (v) {
		r = parse_ms("WISP_MPA_HOLD_MS", v, 0,
			     GLUE_MPA_INITIATOR_HOLD_MAX_MS, &o.hold_ms);
		if (r < 0)
			ret = r;
	}
	r = parse_limit("WISP_MPA_MAX_PENDING", "connections",
			&lim.max_pending);
	if (r < 0)
		ret = r;
	r = parse_limit("WISP_MPA_MAX_PENDING_PER_ADDR", "connections",
			&lim.max_pending_addr);
	if (r < 0)
		ret = r;
	r = parse_limit("WISP_CM_MAX_BACKLOG", "connection requests",
			&lim.max_backlog);
	if (r < 0)
		ret = r;
	if (ret)
		return ret;
	/* Peer-to-peer is an RFC 6581 feature: with rev 1 it is off. */
	if (o.mpa_rev == 1)
		o.p2p = false;
	wcm.opts = o;
	wcm.limits = lim;
	wcm.log_level = level;
	return 0;
}

static int opt_int(const void *val, size_t len, int *out)
{
	if (!val || len != sizeof(int))
		return -EINVAL;
	memcpy(out, val, sizeof(int));
	return 0;
}

int wcm_opts_set(struct wcm_opts *o, int optname, const void *val,
		 size_t len)
{
	int v, ret;

	ret = opt_int(val, len, &v);
	if (ret)
		return ret;
	switch (optname) {
	case WISP_OPT_MPA_REV:
		if (v != 1 && v != 2)
			return -EINVAL;
		o->mpa_rev = (uint8_t)v;
		if (v == 1)
			o->p2p = false;
		return 0;
	case WISP_OPT_CRC:
		if (v != 0 && v != 1)
			return -EINVAL;
		o->crc = v;
		return 0;
	case WISP_OPT_P2P:
		if (v != 0 && v != 1)
			return -EINVAL;
		if (v && o->mpa_rev != 2)
			return -EINVAL;
		o->p2p = v;
		return 0;
	case WISP_OPT_RTR:
		if (v != WISP_RTR_PREFER_READ && v != WISP_RTR_PREFER_WRITE)
			return -EINVAL;
		o->rtr_prefer = v == WISP_RTR_PREFER_READ ? MPA_RTR_READ :
							    MPA_RTR_WRITE;
		o->rtr_only = true;
		return 0;
	case WISP_OPT_MPA_TIMEOUT_MS:
		if (v < 1 || v > TIMEOUT_MAX_MS)
			return -EINVAL;
		o->timeout_ms = v;
		return 0;
	default:
		return -ENOSYS;
	}
}

void wcm_opts_prefs(const struct wcm_opts *o, struct mpa_prefs *p)
{
	memset(p, 0, sizeof(*p));
	p->rev = o->mpa_rev;
	p->crc = o->crc;
	p->p2p = o->p2p && o->mpa_rev == 2;
	/* Unless one was named, both zero-length RTRs are offered (as
	 * Initiator) or accepted (as Responder), READ preferred; the SEND
	 * RTR needs a receive posted by the peer's ULP before it knows it
	 * is connected, which rdma_cm programs do not promise. */
	p->rtr = o->rtr_only ? o->rtr_prefer : MPA_RTR_WRITE | MPA_RTR_READ;
	p->rtr_prefer = o->rtr_prefer;
}
