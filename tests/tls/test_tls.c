/* SPDX-License-Identifier: MIT */
/*
 * TLS 1.3 under MPA (docs/tls.md) through the public rdma_cma.h API, both
 * ends in one process on loopback: PSK and X.509 (mutual) connections
 * moving data under both engines over IPv4 and IPv6; every refusal with
 * its rdma_cm event and status, which say it came by its TLS reason and
 * not by a timeout (its time is logged, never asserted: the suite runs on
 * loaded machines); KeyUpdate many times during
 * a transfer; and a man in the middle that tampers with a record,
 * truncates the stream or injects an alert: the QP must flush and nothing
 * beyond the authenticated prefix may be placed.
 *
 * The certificates are made at test time (make-certs.sh, openssl CLI).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "cm_loopback.h"
#include "wisp_rdmacm.h"

/* How long a wait may take before the test calls it a hang: only a hang
 * comes near it, however loaded the machine. Every assertion on how a
 * connection ended is on its cause (event, status), never on the time it
 * took. */
#define WAIT_MS 20000

static char certdir[512];

static void certs(void)
{
	char cmd[1100];

	snprintf(certdir, sizeof(certdir), "%s", WISP_TLS_CERT_DIR);
	snprintf(cmd, sizeof(cmd), "%s %s", WISP_TLS_MAKE_CERTS, certdir);
	cr_assert_eq(system(cmd), 0, "make-certs.sh failed");
}

/* certdir/name in one of a few rotating buffers. */
static const char *f(const char *name)
{
	static char buf[16][600];
	static int i;
	char *b = buf[i++ % 16];

	snprintf(b, sizeof(buf[0]), "%s/%s", certdir, name);
	return b;
}

/* Inline strings ("" for none): Criterion hands parameters to a fresh
 * process image, where pointers into the parent's would not hold. */
struct tls_side {
	int mode;                  /* WISP_TLS_* */
	char psk[16], ident[16];   /* file names relative to certdir */
	char cert[16], key[16], ca[16];
	char name[16];             /* WISP_OPT_TLS_VERIFY_NAME */
	int mutual;
	int ku_kib;
};

static void set_str(struct rdma_cm_id *id, int opt, const char *v)
{
	if (!*v)
		return;
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL, opt, (void *)v,
				     strlen(v) + 1), 0, "option %d", opt);
}

static void apply(struct rdma_cm_id *id, const struct tls_side *s)
{
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_TLS,
				     (void *)&s->mode, sizeof(int)), 0);
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL,
				     WISP_OPT_TLS_MUTUAL, (void *)&s->mutual,
				     sizeof(int)), 0);
	cr_assert_eq(rdma_set_option(id, WISP_OPTION_LEVEL,
				     WISP_OPT_TLS_KEY_UPDATE_KIB,
				     (void *)&s->ku_kib, sizeof(int)), 0);
	if (*s->psk)
		set_str(id, WISP_OPT_TLS_PSK_FILE, f(s->psk));
	set_str(id, WISP_OPT_TLS_PSK_IDENTITY, s->ident);
	if (*s->cert)
		set_str(id, WISP_OPT_TLS_CERT, f(s->cert));
	if (*s->key)
		set_str(id, WISP_OPT_TLS_KEY, f(s->key));
	if (*s->ca)
		set_str(id, WISP_OPT_TLS_CA, f(s->ca));
	set_str(id, WISP_OPT_TLS_VERIFY_NAME, s->name);
}

static const struct tls_side psk_side = {
	WISP_TLS_REQUIRED, "psk", "wisp-test", "", "", "", "", 0, 0,
};
static const struct tls_side cert_server = {
	WISP_TLS_REQUIRED, "", "", "server.pem", "server.key", "ca.pem",
	"", 1, 0,
};
static const struct tls_side cert_client = {
	WISP_TLS_REQUIRED, "", "", "client.pem", "client.key", "ca.pem",
	"", 0, 0,
};

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch,
					int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) != 1)
		return NULL;
	cr_assert_eq(rdma_get_cm_event(ch, &ev), 0);
	return ev;
}

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want, int ms)
{
	struct rdma_cm_event *ev = next_event(ch, ms);

	cr_assert_not_null(ev, "no event within %d ms, wanted %s", ms,
			   rdma_event_str(want));
	cr_assert_eq(ev->event, want, "got %s (status %d), wanted %s",
		     rdma_event_str(ev->event), ev->status,
		     rdma_event_str(want));
	return ev;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {
		.cap = {
			.max_send_wr = 64, .max_recv_wr = 8,
			.max_send_sge = 1, .max_recv_sge = 1,
		},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};

	cr_assert_eq(rdma_create_qp(id, NULL, &a), 0, "rdma_create_qp: %s",
		     strerror(errno));
}

struct pair {
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *l, *cl, *sv;
	uint16_t port;             /* the listener's */
};

static void listen_on(struct pair *p, int family, const struct tls_side *s)
{
	struct sockaddr_storage ss;

	p->sch = rdma_create_event_channel();
	p->cch = rdma_create_event_channel();
	cr_assert(p->sch && p->cch);
	loopback(family, &ss, 0);
	cr_assert_eq(rdma_create_id(p->sch, &p->l, NULL, RDMA_PS_TCP), 0);
	apply(p->l, s);
	cr_assert_eq(rdma_bind_addr(p->l, (struct sockaddr *)&ss), 0);
	cr_assert_eq(rdma_listen(p->l, 8), 0);
	p->port = ntohs(rdma_get_src_port(p->l));
}

/* Connect towards port (the listener's, or a proxy's); returns the
 * client's first event after rdma_connect (ESTABLISHED or a failure),
 * accepting on the server side when a request comes. */
static struct rdma_cm_event *dial(struct pair *p, int family, uint16_t port,
				  const struct tls_side *c)
{
	struct sockaddr_storage dst;
	struct rdma_cm_event *ev;
	int64_t end;

	loopback(family, &dst, port);
	cr_assert_eq(rdma_create_id(p->cch, &p->cl, NULL, RDMA_PS_TCP), 0);
	apply(p->cl, c);
	cr_assert_eq(rdma_resolve_addr(p->cl, NULL, (struct sockaddr *)&dst,
				       2000), 0);
	rdma_ack_cm_event(expect_event(p->cch, RDMA_CM_EVENT_ADDR_RESOLVED,
				       WAIT_MS));
	cr_assert_eq(rdma_resolve_route(p->cl, 2000), 0);
	rdma_ack_cm_event(expect_event(p->cch, RDMA_CM_EVENT_ROUTE_RESOLVED,
				       WAIT_MS));
	make_qp(p->cl);
	cr_assert_eq(rdma_connect(p->cl, NULL), 0);
	end = now_ms() + WAIT_MS;
	while (now_ms() < end) {
		struct pollfd pf[2] = {
			{ .fd = p->cch->fd, .events = POLLIN },
			{ .fd = p->sch->fd, .events = POLLIN },
		};

		poll(pf, 2, 100);
		if (pf[1].revents) {
			ev = next_event(p->sch, 0);
			cr_assert_eq(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST,
				     "server: %s", rdma_event_str(ev->event));
			p->sv = ev->id;
			rdma_ack_cm_event(ev);
			make_qp(p->sv);
			cr_assert_eq(rdma_accept(p->sv, NULL), 0);
			rdma_ack_cm_event(expect_event(
				p->sch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
		}
		if (pf[0].revents)
			return next_event(p->cch, 0);
	}
	cr_assert_fail("no client event within %d ms", WAIT_MS);
	return NULL;
}

static void connect_ok(struct pair *p, int family, uint16_t port,
		       const struct tls_side *c)
{
	struct rdma_cm_event *ev = dial(p, family, port, c);

	cr_assert_eq(ev->event, RDMA_CM_EVENT_ESTABLISHED, "client: %s (%d)",
		     rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	cr_assert_not_null(p->sv);
}

static void pattern(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i * 7 + seed + i / 251) % 255 + 1);
}

/* RDMA WRITE total octets from -> to in chunk-sized WRs, then a SEND
 * that says so; checks what arrived. */
static void write_check(struct rdma_cm_id *from, struct rdma_cm_id *to,
			size_t total, size_t chunk, unsigned seed)
{
	uint8_t *src = malloc(total), *dst = calloc(1, total);
	char msg[8] = "done", got[8] = "";
	struct ibv_mr *smr, *dmr, *mmr, *gmr;
	struct ibv_wc wc;
	size_t off = 0;
	int inflight = 0;

	cr_assert(src && dst);
	pattern(src, total, seed);
	smr = rdma_reg_msgs(from, src, total);
	dmr = ibv_reg_mr(to->pd, dst, total, IBV_ACCESS_LOCAL_WRITE |
			 IBV_ACCESS_REMOTE_WRITE);
	mmr = rdma_reg_msgs(from, msg, sizeof(msg));
	gmr = rdma_reg_msgs(to, got, sizeof(got));
	cr_assert(smr && dmr && mmr && gmr);
	cr_assert_eq(rdma_post_recv(to, NULL, got, sizeof(got), gmr), 0);
	while (off < total) {
		size_t n = total - off < chunk ? total - off : chunk;

		if (inflight == 32) {
			cr_assert_eq(rdma_get_send_comp(from, &wc), 1);
			cr_assert_eq(wc.status, IBV_WC_SUCCESS, "write: %s",
				     ibv_wc_status_str(wc.status));
			inflight--;
		}
		cr_assert_eq(rdma_post_write(from, NULL, src + off, n, smr,
					     IBV_SEND_SIGNALED,
					     (uint64_t)(uintptr_t)dst + off,
					     dmr->rkey), 0);
		inflight++;
		off += n;
	}
	cr_assert_eq(rdma_post_send(from, NULL, msg, sizeof(msg), mmr,
				    IBV_SEND_SIGNALED), 0);
	inflight++;
	while (inflight--) {
		cr_assert_eq(rdma_get_send_comp(from, &wc), 1);
		cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	}
	cr_assert_eq(rdma_get_recv_comp(to, &wc), 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS);
	cr_assert_str_eq(got, "done");
	cr_assert_eq(memcmp(src, dst, total), 0, "payload differs");
	rdma_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	rdma_dereg_mr(mmr);
	rdma_dereg_mr(gmr);
	free(src);
	free(dst);
}

static void tear_down(struct pair *p)
{
	if (p->sv) {
		rdma_disconnect(p->cl);
		rdma_destroy_qp(p->cl);
		rdma_destroy_qp(p->sv);
		rdma_destroy_id(p->sv);
	} else if (p->cl) {
		rdma_destroy_qp(p->cl);
	}
	if (p->cl)
		rdma_destroy_id(p->cl);
	rdma_destroy_id(p->l);
	rdma_destroy_event_channel(p->cch);
	rdma_destroy_event_channel(p->sch);
}

/* ---- connections that work ------------------------------------------ */

struct run_cfg {
	int family;
	char engine[8];
	bool x509;
};

ParameterizedTestParameters(tls, connect_and_move_data)
{
	static struct run_cfg cfgs[] = {
		{ AF_INET, "uring", false }, { AF_INET6, "uring", false },
		{ AF_INET, "epoll", false }, { AF_INET6, "epoll", false },
		{ AF_INET, "uring", true }, { AF_INET6, "uring", true },
		{ AF_INET, "epoll", true }, { AF_INET6, "epoll", true },
	};

	return cr_make_param_array(struct run_cfg, cfgs,
				   sizeof(cfgs) / sizeof(cfgs[0]));
}

ParameterizedTest(struct run_cfg *c, tls, connect_and_move_data,
		  .timeout = 60)
{
	struct pair p = { 0 };

	cr_log_info("IPv%d, %s, %s", c->family == AF_INET ? 4 : 6, c->engine,
		    c->x509 ? "X.509 mutual" : "PSK");
	setenv("WISP_ENGINE", c->engine, 1);
	certs();
	listen_on(&p, c->family, c->x509 ? &cert_server : &psk_side);
	connect_ok(&p, c->family, p.port, c->x509 ? &cert_client : &psk_side);
	write_check(p.cl, p.sv, 1 << 20, 65536, 1);
	write_check(p.sv, p.cl, 300000, 4096, 2);
	write_check(p.cl, p.sv, 100, 8, 3);
	tear_down(&p);
}

Test(tls, optional_listener_takes_both, .timeout = 30)
{
	struct tls_side opt = psk_side, off = { WISP_TLS_OFF };
	struct pair p = { 0 }, q = { 0 };

	certs();
	opt.mode = WISP_TLS_OPTIONAL;
	listen_on(&p, AF_INET, &opt);
	connect_ok(&p, AF_INET, p.port, &psk_side);
	write_check(p.cl, p.sv, 65536, 65536, 4);
	q = p;
	q.cl = q.sv = NULL;
	connect_ok(&q, AF_INET, p.port, &off);
	write_check(q.cl, q.sv, 65536, 65536, 5);
	rdma_disconnect(q.cl);
	rdma_destroy_qp(q.cl);
	rdma_destroy_qp(q.sv);
	rdma_destroy_id(q.sv);
	rdma_destroy_id(q.cl);
	tear_down(&p);
}

/* KeyUpdate every 64 KiB both ways: 8 MiB is over a hundred updates in
 * one direction, in the middle of FPDUs. */
Test(tls, key_update_many_times, .timeout = 120)
{
	struct tls_side s = psk_side;
	struct pair p = { 0 };

	certs();
	s.ku_kib = 64;
	listen_on(&p, AF_INET, &s);
	connect_ok(&p, AF_INET, p.port, &s);
	write_check(p.cl, p.sv, 8 << 20, 65536, 6);
	write_check(p.sv, p.cl, 2 << 20, 12345, 7);
	tear_down(&p);
}

/* ---- refusals -------------------------------------------------------- */

struct refusal {
	char what[48];
	struct tls_side srv, cli;
	enum rdma_cm_event_type type;
	int status;
};

#define PSK(file, id) { WISP_TLS_REQUIRED, file, id, "", "", "", "", 0, 0 }
#define X509(crt, key, ca, name, mutual) { WISP_TLS_REQUIRED, "", "", \
		crt, key, ca, name, mutual, 0 }

ParameterizedTestParameters(tls, refused_quickly)
{
	static struct refusal r[] = {
		{ "wrong PSK", PSK("psk", "wisp-test"),
		  PSK("wrong.psk", "wisp-test"),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EACCES },
		{ "unknown PSK identity", PSK("psk", "wisp-test"),
		  PSK("psk", "somebody"),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EACCES },
		{ "untrusted certificate",
		  X509("rogue.pem", "rogue.key", "", "", 0),
		  X509("", "", "ca.pem", "", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EKEYREJECTED },
		{ "expired certificate",
		  X509("expired.pem", "expired.key", "", "", 0),
		  X509("", "", "ca.pem", "", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EKEYEXPIRED },
		{ "name mismatch",
		  X509("other.pem", "other.key", "", "", 0),
		  X509("", "", "ca.pem", "", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EREMCHG },
		{ "expected name not in certificate",
		  X509("server.pem", "server.key", "", "", 0),
		  X509("", "", "ca.pem", "db.example", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EREMCHG },
		{ "client without certificate, mutual",
		  X509("server.pem", "server.key", "ca.pem", "", 1),
		  X509("", "", "ca.pem", "", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -ENOKEY },
		{ "client certificate from another CA, mutual",
		  X509("server.pem", "server.key", "ca.pem", "", 1),
		  X509("rogue.pem", "rogue.key", "ca.pem", "", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EKEYREJECTED },
		{ "client certificate expired, mutual",
		  X509("server.pem", "server.key", "ca.pem", "", 1),
		  X509("expired.pem", "expired.key", "ca.pem", "", 0),
		  RDMA_CM_EVENT_CONNECT_ERROR, -EKEYEXPIRED },
		{ "TLS client, plaintext-only listener",
		  { WISP_TLS_OFF }, PSK("psk", "wisp-test"),
		  RDMA_CM_EVENT_REJECTED, -EPROTONOSUPPORT },
		{ "plaintext client, TLS required",
		  PSK("psk", "wisp-test"), { WISP_TLS_OFF },
		  RDMA_CM_EVENT_REJECTED, -ECONNRESET },
	};

	return cr_make_param_array(struct refusal, r, sizeof(r) / sizeof(r[0]));
}

ParameterizedTest(struct refusal *r, tls, refused_quickly, .timeout = 30)
{
	struct rdma_cm_event *ev;
	struct pair p = { 0 };
	int64_t t0;

	cr_log_info("%s", r->what);
	certs();
	listen_on(&p, AF_INET, &r->srv);
	t0 = now_ms();
	ev = dial(&p, AF_INET, p.port, &r->cli);
	cr_log_info("%s: %s (%d) after %lld ms", r->what,
		    rdma_event_str(ev->event), ev->status,
		    (long long)(now_ms() - t0));
	/* Quick means by its own cause: the TLS failure's event and status,
	 * not the MPA deadline's (UNREACHABLE, -ETIMEDOUT, which
	 * WISP_MPA_TIMEOUT_MS, 10 s by default, would bring well within
	 * WAIT_MS). */
	cr_assert(ev->event != RDMA_CM_EVENT_UNREACHABLE &&
		  ev->status != -ETIMEDOUT, "%s: ended by a timeout (%s, %d), "
		  "not by its TLS failure", r->what,
		  rdma_event_str(ev->event), ev->status);
	cr_assert_eq(ev->event, r->type, "%s: got %s, wanted %s", r->what,
		     rdma_event_str(ev->event), rdma_event_str(r->type));
	cr_assert_eq(ev->status, r->status, "%s: status %d (%s), wanted %d",
		     r->what, ev->status, strerror(-ev->status), r->status);
	cr_assert_null(p.sv, "no CONNECT_REQUEST reached the application");
	rdma_ack_cm_event(ev);
	tear_down(&p);
}

/* A listener that never answers the ClientHello: the handshake is bounded
 * by WISP_MPA_TIMEOUT_MS like the MPA frames, and ends UNREACHABLE. The
 * process's own bound is an hour here, so only the connection's option
 * (300 ms) can end it within WAIT_MS; and no earlier than that option
 * says (a deadline never fires early, whatever the load: this bound holds
 * on any machine). */
Test(tls, silent_listener_times_out, .timeout = 60)
{
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	struct pair p = { 0 };
	socklen_t len = sizeof(ss);
	int l = socket(AF_INET, SOCK_STREAM, 0), tmo = 300;
	int64_t t0;

	certs();
	/* Read with the rest of the configuration when the first channel
	 * is made (this test's own process: Criterion forks each). */
	cr_assert_eq(setenv("WISP_MPA_TIMEOUT_MS", "3600000", 1), 0);
	loopback(AF_INET, &ss, 0);
	cr_assert_eq(bind(l, (struct sockaddr *)&ss,
			  sizeof(struct sockaddr_in)), 0);
	cr_assert_eq(listen(l, 4), 0);
	getsockname(l, (struct sockaddr *)&ss, &len);
	listen_on(&p, AF_INET, &psk_side);     /* for the channels */
	{
		struct tls_side c = psk_side;
		struct sockaddr_storage dst;

		loopback(AF_INET, &dst,
			 ntohs(((struct sockaddr_in *)&ss)->sin_port));
		cr_assert_eq(rdma_create_id(p.cch, &p.cl, NULL, RDMA_PS_TCP),
			     0);
		apply(p.cl, &c);
		cr_assert_eq(rdma_set_option(p.cl, WISP_OPTION_LEVEL,
					     WISP_OPT_MPA_TIMEOUT_MS, &tmo,
					     sizeof(tmo)), 0);
		cr_assert_eq(rdma_resolve_addr(p.cl, NULL,
					       (struct sockaddr *)&dst, 2000),
			     0);
		rdma_ack_cm_event(expect_event(p.cch,
					       RDMA_CM_EVENT_ADDR_RESOLVED,
					       WAIT_MS));
		cr_assert_eq(rdma_resolve_route(p.cl, 2000), 0);
		rdma_ack_cm_event(expect_event(p.cch,
					       RDMA_CM_EVENT_ROUTE_RESOLVED,
					       WAIT_MS));
		make_qp(p.cl);
		t0 = now_ms();
		cr_assert_eq(rdma_connect(p.cl, NULL), 0);
	}
	ev = expect_event(p.cch, RDMA_CM_EVENT_UNREACHABLE, WAIT_MS);
	cr_assert_eq(ev->status, -ETIMEDOUT, "status %d", ev->status);
	cr_log_info("UNREACHABLE after %lld ms (option: %d ms)",
		    (long long)(now_ms() - t0), tmo);
	cr_assert_geq(now_ms() - t0, tmo - 50, "ended before its deadline");
	rdma_ack_cm_event(ev);
	close(l);
	tear_down(&p);
}

Test(tls, bad_environment_fails_with_einval)
{
	struct rdma_event_channel *ch;

	setenv("WISP_TLS", "yes", 1);
	errno = 0;
	cr_assert_null(rdma_create_event_channel());
	cr_assert_eq(errno, EINVAL);
	setenv("WISP_TLS", "required", 1);
	setenv("WISP_TLS_KEY_UPDATE_BYTES", "1k", 1);
	cr_assert_null(rdma_create_event_channel());
	setenv("WISP_TLS_KEY_UPDATE_BYTES", "1048576", 1);
	setenv("WISP_TLS_PSK_FILE", "/nonexistent/psk", 1);
	cr_assert_null(rdma_create_event_channel());
	unsetenv("WISP_TLS_PSK_FILE");
	setenv("WISP_TLS_MUTUAL", "2", 1);
	cr_assert_null(rdma_create_event_channel());
	setenv("WISP_TLS_MUTUAL", "1", 1);
	ch = rdma_create_event_channel();
	cr_assert_not_null(ch);
	rdma_destroy_event_channel(ch);
}

/* ---- a man in the middle --------------------------------------------- */

enum mitm_act { MITM_TAMPER, MITM_TRUNCATE, MITM_ALERT };

struct mitm {
	int lfd, port, family;
	uint16_t to;               /* the listener's port */
	enum mitm_act act;
	size_t after;              /* client->server octets before acting */
	pthread_t thr;
	bool acted;
};

/* Forward both ways; in the client -> server direction follow the TLS
 * records and act on the first record that starts after m->after. */
/* write(2) without SIGPIPE: the peers close under the man in the
 * middle's feet. */
static ssize_t xsend(int fd, const void *b, size_t n)
{
	return send(fd, b, n, MSG_NOSIGNAL);
}

static void *mitm_main(void *arg)
{
	struct mitm *m = arg;
	struct sockaddr_storage ss;
	uint8_t buf[65536], hdr[5];
	size_t seen = 0, hdr_got = 0, body_left = 0;
	bool cut = false;
	int c, s;

	c = accept(m->lfd, NULL, NULL);
	s = socket(m->family, SOCK_STREAM, 0);
	loopback(m->family, &ss, m->to);
	if (c < 0 || s < 0 ||
	    connect(s, (struct sockaddr *)&ss, m->family == AF_INET ?
		    sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)))
		return NULL;
	for (;;) {
		struct pollfd pf[2] = { { .fd = c, .events = POLLIN },
					{ .fd = s, .events = POLLIN } };
		ssize_t n;

		if (poll(pf, 2, WAIT_MS) <= 0)
			break;
		if (pf[1].revents) {
			n = read(s, buf, sizeof(buf));
			if (n <= 0 || xsend(c, buf, (size_t)n) != n)
				break;
		}
		if (!pf[0].revents)
			continue;
		n = read(c, buf, sizeof(buf));
		if (n <= 0)
			break;
		if (cut)
			continue;
		for (ssize_t i = 0; i < n; i++, seen++) {
			bool start = hdr_got == 0 && body_left == 0;

			if (start && !m->acted && seen >= m->after) {
				m->acted = true;
				if (m->act == MITM_TRUNCATE ||
				    m->act == MITM_ALERT) {
					/* A fatal bad_record_mac alert in
					 * clear where a record starts. */
					static const uint8_t alert[] = {
						0x15, 0x03, 0x03, 0x00, 0x02,
						0x02, 0x14,
					};

					if (xsend(s, buf, (size_t)i) < 0)
						goto out;
					if (m->act == MITM_ALERT &&
					    xsend(s, alert, sizeof(alert)) < 0)
						goto out;
					/* Truncate: half a record, then
					 * FIN. */
					if (m->act == MITM_TRUNCATE &&
					    xsend(s, buf + i,
						  (size_t)(n - i) / 2) < 0)
						goto out;
					shutdown(s, SHUT_WR);
					cut = true;
					break;
				}
			}
			if (hdr_got < 5) {
				hdr[hdr_got++] = buf[i];
				if (hdr_got == 5) {
					body_left = (size_t)(hdr[3] << 8 |
							     hdr[4]);
					hdr_got = body_left ? 5 : 0;
				}
				continue;
			}
			/* Flip one bit in the middle of the record. */
			if (m->act == MITM_TAMPER && m->acted &&
			    body_left == 100)
				buf[i] ^= 0x10;
			if (--body_left == 0)
				hdr_got = 0;
		}
		if (!cut && xsend(s, buf, (size_t)n) != n)
			break;
	}
out:
	close(c);
	close(s);
	return NULL;
}

static void mitm_start(struct mitm *m, int family, uint16_t to,
		       enum mitm_act act, size_t after)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	m->family = family;
	m->to = to;
	m->act = act;
	m->after = after;
	m->lfd = socket(family, SOCK_STREAM, 0);
	loopback(family, &ss, 0);
	cr_assert_eq(bind(m->lfd, (struct sockaddr *)&ss,
			  family == AF_INET ? sizeof(struct sockaddr_in) :
					      sizeof(struct sockaddr_in6)), 0);
	cr_assert_eq(listen(m->lfd, 1), 0);
	getsockname(m->lfd, (struct sockaddr *)&ss, &len);
	m->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	cr_assert_eq(pthread_create(&m->thr, NULL, mitm_main, m), 0);
}

/*
 * A 1 MiB WRITE of a zero-free pattern into a zeroed MR, through the man
 * in the middle who acts after 256 KiB: the server's QP must flush its
 * posted receive, and the MR must hold an exact prefix of the pattern
 * followed by zeros: nothing that failed authentication is placed.
 */
static void broken_stream(enum mitm_act act, int family)
{
	const size_t total = 1 << 20;
	uint8_t *src = malloc(total), *dst = calloc(1, total);
	char got[8];
	struct ibv_mr *smr, *dmr, *gmr;
	struct pair p = { 0 };
	struct mitm m = { 0 };
	struct ibv_wc wc;
	size_t prefix = 0;
	int64_t end;
	int n = 0;

	certs();
	cr_assert(src && dst);
	pattern(src, total, 9);
	listen_on(&p, family, &psk_side);
	mitm_start(&m, family, p.port, act, 256 << 10);
	connect_ok(&p, family, (uint16_t)m.port, &psk_side);
	smr = rdma_reg_msgs(p.cl, src, total);
	dmr = ibv_reg_mr(p.sv->pd, dst, total, IBV_ACCESS_LOCAL_WRITE |
			 IBV_ACCESS_REMOTE_WRITE);
	gmr = rdma_reg_msgs(p.sv, got, sizeof(got));
	cr_assert(smr && dmr && gmr);
	cr_assert_eq(rdma_post_recv(p.sv, NULL, got, sizeof(got), gmr), 0);
	for (size_t off = 0; off < total; off += 65536)
		cr_assert_eq(rdma_post_write(p.cl, NULL, src + off, 65536, smr,
					     IBV_SEND_SIGNALED,
					     (uint64_t)(uintptr_t)dst + off,
					     dmr->rkey), 0);
	/* The server's receive completes in error (flushed) in time. */
	end = now_ms() + WAIT_MS;
	while (!n && now_ms() < end) {
		n = ibv_poll_cq(p.sv->recv_cq, 1, &wc);
		if (!n)
			usleep(1000);
	}
	cr_assert_eq(n, 1, "no completion on the server's receive queue");
	cr_assert_neq(wc.status, IBV_WC_SUCCESS);
	cr_assert_eq(wc.status, IBV_WC_WR_FLUSH_ERR, "%s",
		     ibv_wc_status_str(wc.status));
	cr_assert(m.acted, "the man in the middle acted");
	while (prefix < total && dst[prefix] == src[prefix])
		prefix++;
	cr_assert_lt(prefix, total, "everything arrived despite the fault");
	for (size_t i = prefix; i < total; i++)
		cr_assert_eq(dst[i], 0, "octet %zu placed after the authenticated "
			     "prefix of %zu", i, prefix);
	cr_log_info("authenticated prefix %zu of %zu placed, rest untouched",
		    prefix, total);
	pthread_join(m.thr, NULL);
	close(m.lfd);
	rdma_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	rdma_dereg_mr(gmr);
	tear_down(&p);
	free(src);
	free(dst);
}

Test(tls, tampered_record_flushes, .timeout = 30)
{
	broken_stream(MITM_TAMPER, AF_INET);
}

Test(tls, truncated_stream_flushes, .timeout = 30)
{
	broken_stream(MITM_TRUNCATE, AF_INET6);
}

Test(tls, alert_mid_transfer_flushes, .timeout = 30)
{
	broken_stream(MITM_ALERT, AF_INET);
}
