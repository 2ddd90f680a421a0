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
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_internal.h"
#include "common/wisp_startup.h"
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
	.big_fpdu = true,
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

/*
 * A copy of str that lives as long as the process, one per distinct
 * string: TLS contexts are cached for the process (glue_tls_ctx_get) and
 * keep pointers to their file names, so an id's options may not free
 * them. NULL for NULL or "".
 */
static const char *wcm_intern(const char *str)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct istr { struct istr *next; char s[]; } *list;
	struct istr *i;
	size_t len;

	if (!str || !*str)
		return NULL;
	len = strlen(str);
	pthread_mutex_lock(&lock);
	for (i = list; i; i = i->next)
		if (!strcmp(i->s, str))
			goto out;
	i = malloc(sizeof(*i) + len + 1);
	if (i) {
		memcpy(i->s, str, len + 1);
		i->next = list;
		list = i;
	}
out:
	pthread_mutex_unlock(&lock);
	return i ? i->s : NULL;
}

/* A WISP_TLS_* file variable: set, non-empty and readable. */
static int tls_file(const char *var, const char **out)
{
	const char *v = getenv(var);

	if (!v)
		return 0;
	if (!*v || access(v, R_OK))
		return bad_value(var, v, "a readable file");
	*out = wcm_intern(v);
	return *out ? 0 : -ENOMEM;
}

/* WISP_TLS_KEY_UPDATE_BYTES: a whole number of octets, 0 (never) or
 * 65536 to 2^62: an interval below 64 KiB would rotate keys every few
 * records for no gain. */
static int tls_key_update(uint64_t *out)
{
	const char *v = getenv("WISP_TLS_KEY_UPDATE_BYTES");
	unsigned long long n;
	char *end;

	if (!v)
		return 0;
	if (v[0] < '0' || v[0] > '9')
		goto bad;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || (n && (n < 65536 || n > (1ULL << 62))))
		goto bad;
	*out = n;
	return 0;
bad:
	return bad_value("WISP_TLS_KEY_UPDATE_BYTES", v, "0 (never) or a whole "
			 "number of octets, 65536 to 4611686018427387904");
}

/* The WISP_TLS* variables into *t (docs/configuration.md, docs/tls.md). */
static int tls_config_load(struct glue_tls_config *t)
{
	static const char *const modes[] = {
		[GLUE_TLS_OFF] = "off", [GLUE_TLS_OPTIONAL] = "optional",
		[GLUE_TLS_REQUIRED] = "required", NULL,
	};
	static const char *const bits[] = { "0", "1", NULL };
	const char *v;
	int r, ret = 0;

	memset(t, 0, sizeof(*t));
	v = getenv("WISP_TLS");
	if (v) {
		r = parse_word("WISP_TLS", v, modes,
			       "off, optional, required");
		if (r < 0)
			ret = r;
		else
			t->mode = (enum glue_tls_mode)r;
	}
	v = getenv("WISP_TLS_MUTUAL");
	if (v) {
		r = parse_word("WISP_TLS_MUTUAL", v, bits, "0, 1");
		if (r < 0)
			ret = r;
		else
			t->mutual = r;
	}
	v = getenv("WISP_TLS_PSK_IDENTITY");
	if (v) {
		/* RFC 8446 4.2.11: identity<1..2^16-1>; printable here so
		 * that it can be logged. */
		bool ok = *v && strlen(v) < 256;

		for (const char *p = v; ok && *p; p++)
			ok = *p > ' ' && *p < 0x7f;
		if (!ok)
			ret = bad_value("WISP_TLS_PSK_IDENTITY", v, "1 to 255 "
					"printable ASCII characters, no "
					"spaces");
		else
			t->psk_identity = wcm_intern(v);
	}
	v = getenv("WISP_TLS_VERIFY_NAME");
	if (v) {
		if (!*v || strlen(v) > 253)
			ret = bad_value("WISP_TLS_VERIFY_NAME", v, "a host name "
					"or an IPv4 / IPv6 address");
		else
			t->verify_name = wcm_intern(v);
	}
	r = tls_file("WISP_TLS_PSK_FILE", &t->psk_file);
	if (r)
		ret = r;
	r = tls_file("WISP_TLS_CERT", &t->cert);
	if (r)
		ret = r;
	r = tls_file("WISP_TLS_KEY", &t->key);
	if (r)
		ret = r;
	r = tls_file("WISP_TLS_CA", &t->ca);
	if (r)
		ret = r;
	r = tls_key_update(&t->key_update_bytes);
	if (r)
		ret = r;
	if (!ret && t->psk_file && !t->psk_identity) {
		fprintf(stderr, "wisp: WISP_TLS_PSK_FILE needs "
			"WISP_TLS_PSK_IDENTITY\n");
		ret = -EINVAL;
	}
	if (!ret && t->mode != GLUE_TLS_OFF && !t->psk_file &&
	    !!t->cert != !!t->key) {
		fprintf(stderr, "wisp: WISP_TLS_CERT and WISP_TLS_KEY go "
			"together\n");
		ret = -EINVAL;
	}
	return ret;
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
	v = getenv("WISP_BIG_FPDU");
	if (v) {
		r = wisp_startup_big_fpdu(v);
		if (r < 0)
			ret = bad_value("WISP_BIG_FPDU", v, "on, off");
		else
			o.big_fpdu = r > 0;
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
	r = tls_config_load(&o.tls);
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

/* A string option: NUL-terminated within len. */
static int opt_str(const void *val, size_t len, const char **out)
{
	const char *s = val;

	if (!val || !len || len > 4096 || s[len - 1] || strlen(s) != len - 1)
		return -EINVAL;
	*out = wcm_intern(s);
	return *out || !*s ? 0 : -ENOMEM;
}

static int tls_opt_set(struct glue_tls_config *t, int optname,
		       const void *val, size_t len)
{
	switch (optname) {
	case WISP_OPT_TLS_PSK_FILE:
		return opt_str(val, len, &t->psk_file);
	case WISP_OPT_TLS_PSK_IDENTITY:
		return opt_str(val, len, &t->psk_identity);
	case WISP_OPT_TLS_CERT:
		return opt_str(val, len, &t->cert);
	case WISP_OPT_TLS_KEY:
		return opt_str(val, len, &t->key);
	case WISP_OPT_TLS_CA:
		return opt_str(val, len, &t->ca);
	case WISP_OPT_TLS_VERIFY_NAME:
		return opt_str(val, len, &t->verify_name);
	default:
		return -ENOSYS;
	}
}

int wcm_opts_set(struct wcm_opts *o, int optname, const void *val,
		 size_t len)
{
	int v, ret;

	if (optname >= WISP_OPT_TLS_PSK_FILE &&
	    optname <= WISP_OPT_TLS_VERIFY_NAME)
		return tls_opt_set(&o->tls, optname, val, len);
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
	case WISP_OPT_TLS:
		if (v != WISP_TLS_OFF && v != WISP_TLS_OPTIONAL &&
		    v != WISP_TLS_REQUIRED)
			return -EINVAL;
		o->tls.mode = v == WISP_TLS_OFF ? GLUE_TLS_OFF :
			      v == WISP_TLS_OPTIONAL ? GLUE_TLS_OPTIONAL :
						       GLUE_TLS_REQUIRED;
		return 0;
	case WISP_OPT_TLS_MUTUAL:
		if (v != 0 && v != 1)
			return -EINVAL;
		o->tls.mutual = v;
		return 0;
	case WISP_OPT_TLS_KEY_UPDATE_KIB:
		if (v < 0 || (v > 0 && v < 64))
			return -EINVAL;
		o->tls.key_update_bytes = (uint64_t)v * 1024;
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
	p->ext_max_ulpdu = o->big_fpdu ?
			   (uint16_t)wisp_startup_big_fpdu(NULL) : 0;
}
