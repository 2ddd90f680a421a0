/* SPDX-License-Identifier: MIT */
/*
 * tcp-glue's TLS stage alone (tcp-glue/glue_tls.h) over socket pairs:
 * KeyUpdate counted and the data intact across many updates (records
 * sealed by wisp, opened by OpenSSL); records sealed by OpenSSL opened
 * by wisp, a plain OpenSSL peer's KeyUpdates too (and the one that asks
 * for it answered); a record altered on the way fails with -EBADMSG and
 * leaves the destination untouched, whoever opens it; truncation; ALPN
 * other than "iwarp" fails on either side; the fd registry's
 * stale-entry rule.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <openssl/ssl.h>

#include "glue_tls.h"

static char dir[512], psk[600], cert[600], key[600], ca[600];

static void setup(void)
{
	char cmd[1100];

	/* The plain OpenSSL peers write to sockets the other end closed. */
	signal(SIGPIPE, SIG_IGN);
	snprintf(dir, sizeof(dir), "%s", WISP_TLS_CERT_DIR);
	snprintf(cmd, sizeof(cmd), "%s %s", WISP_TLS_MAKE_CERTS, dir);
	cr_assert_eq(system(cmd), 0);
	snprintf(psk, sizeof(psk), "%s/psk", dir);
	snprintf(cert, sizeof(cert), "%s/server.pem", dir);
	snprintf(key, sizeof(key), "%s/server.key", dir);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
}

struct hs {
	struct glue_tls *t;
	int ret;
};

static void *hs_main(void *arg)
{
	struct hs *h = arg;

	h->ret = glue_tls_handshake(h->t, 2000);
	return NULL;
}

/* A PSK session pair over a fresh socket pair (sv[0] client). */
static void psk_pair(uint64_t ku, int sv[2], struct glue_tls **c,
		     struct glue_tls **s)
{
	struct glue_tls_config cfg = {
		.mode = GLUE_TLS_REQUIRED, .psk_file = psk,
		.psk_identity = "unit", .key_update_bytes = ku,
	};
	char why[256];
	struct glue_tls_ctx *cx = glue_tls_ctx_get(&cfg, false, why, 256);
	struct glue_tls_ctx *sx = glue_tls_ctx_get(&cfg, true, why, 256);
	struct hs h;
	pthread_t th;

	cr_assert(cx && sx, "%s", why);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	*c = glue_tls_new(cx, sv[0], NULL);
	*s = glue_tls_new(sx, sv[1], NULL);
	cr_assert(*c && *s);
	h.t = *s;
	cr_assert_eq(pthread_create(&th, NULL, hs_main, &h), 0);
	cr_assert_eq(glue_tls_handshake(*c, 2000), 0, "client: %s",
		     glue_tls_fail_str(glue_tls_failure(*c)));
	pthread_join(th, NULL);
	cr_assert_eq(h.ret, 0);
}

struct rd {
	struct glue_tls *t;
	int fd;
	size_t total;
	uint8_t *buf;
};

static void *reader(void *arg)
{
	struct rd *r = arg;
	size_t got = 0;

	while (got < r->total) {
		long n = glue_tls_read(r->t, r->buf + got, r->total - got);

		if (n == -EAGAIN) {
			struct pollfd p = { .fd = r->fd, .events = POLLIN };

			poll(&p, 1, 1000);
			continue;
		}
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r->total = got;
	return NULL;
}

Test(glue_tls, key_update_every_64k, .init = setup, .timeout = 60)
{
	const size_t total = 8 << 20;
	uint8_t *src = malloc(total);
	struct glue_tls *c, *s;
	struct rd r;
	pthread_t th;
	unsigned sent, rcvd;
	size_t off = 0;
	int sv[2];

	cr_assert_not_null(src);
	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 31 + i / 4099);
	psk_pair(65536, sv, &c, &s);
	r = (struct rd){ .t = s, .fd = sv[1], .total = total,
			 .buf = calloc(1, total) };
	cr_assert_eq(pthread_create(&th, NULL, reader, &r), 0);
	while (off < total) {
		/* FPDU-like pieces, so records straddle them. */
		struct iovec iov[3] = {
			{ src + off, 18 }, { src + off + 18, 4000 },
			{ src + off + 4018, 78 },
		};
		long n;

		if (total - off < 4096) {
			iov[0].iov_len = total - off;
			n = glue_tls_tx(c, iov, 1);
		} else {
			n = glue_tls_tx(c, iov, 3);
		}
		if (n == -EAGAIN) {
			struct pollfd p = { .fd = sv[0], .events = POLLOUT };

			poll(&p, 1, 1000);
			continue;
		}
		cr_assert_gt(n, 0);
		off += (size_t)n;
	}
	pthread_join(th, NULL);
	cr_assert_eq(r.total, total);
	cr_assert_eq(memcmp(src, r.buf, total), 0, "data intact");
	/* wisp sealed the records and rotated its keys itself; the
	 * OpenSSL reader checked every one of them. */
	cr_assert(glue_tls_sealing(c), "records sealed by wisp");
	glue_tls_key_updates(c, &sent, &rcvd);
	cr_assert_geq(sent, 120, "KeyUpdates sent: %u", sent);
	cr_log_info("%u KeyUpdates over 8 MiB, data intact", sent);
	glue_tls_free(c);
	glue_tls_free(s);
	close(sv[0]);
	close(sv[1]);
	free(src);
	free(r.buf);
}

Test(glue_tls, tampered_record_is_not_delivered, .init = setup)
{
	struct glue_tls *c, *s;
	uint8_t rec[256], dst[64];
	int sv[2], raw[2];
	ssize_t n;
	long r;

	psk_pair(0, sv, &c, &s);
	cr_assert_eq(glue_tls_write(c, "sixty-four octets of payload that must not arrive altered......",
				    64), 64);
	n = recv(sv[1], rec, sizeof(rec), 0);
	cr_assert_gt(n, 64, "one record: header, 64 + 1 octets, tag");
	rec[20] ^= 0x01;
	/* Hand the altered record to the server through a new pair. */
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, raw), 0);
	cr_assert_eq(write(raw[0], rec, (size_t)n), n);
	cr_assert_eq(dup2(raw[1], sv[1]), sv[1]);
	memset(dst, 0xee, sizeof(dst));
	r = glue_tls_read(s, dst, sizeof(dst));
	cr_assert_eq(r, -EBADMSG, "got %ld", r);
	cr_assert_eq(glue_tls_failure(s), GLUE_TLS_F_BAD_RECORD, "%s",
		     glue_tls_fail_str(glue_tls_failure(s)));
	for (size_t i = 0; i < sizeof(dst); i++)
		cr_assert_eq(dst[i], 0xee, "octet %zu written", i);
	glue_tls_free(c);
	glue_tls_free(s);
}

/* Through glue_tls_readv (the engine's read), wisp opens the records
 * itself: what OpenSSL sealed (glue_tls_write) arrives intact, in
 * pieces of odd sizes, followed by close_notify. */
struct wr {
	struct glue_tls *t;
	int fd;
	size_t total;
	const uint8_t *buf;
	long err;
};

static void *writer(void *arg)
{
	struct wr *w = arg;
	size_t off = 0;

	while (off < w->total) {
		size_t len = w->total - off < 3001 ? w->total - off : 3001;
		long n = glue_tls_write(w->t, w->buf + off, len);

		if (n == -EAGAIN) {
			struct pollfd p = { .fd = w->fd, .events = POLLOUT };

			poll(&p, 1, 1000);
			continue;
		}
		if (n <= 0) {
			w->err = n;
			return NULL;
		}
		off += (size_t)n;
	}
	return NULL;
}

/* glue_tls_readv until want octets arrived, it returns 0 or it fails:
 * the octets read, the last result in *end. */
static size_t readv_all(struct glue_tls *s, int fd, uint8_t *dst,
			size_t cap, size_t want, long *end)
{
	size_t got = 0;

	while (got < want) {
		size_t a = cap - got < 17 ? cap - got : 17;
		struct iovec iov[2] = {
			{ dst + got, a }, { dst + got + a, cap - got - a },
		};
		long n = glue_tls_readv(s, iov, 2);

		if (n == -EAGAIN) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			poll(&p, 1, 1000);
			continue;
		}
		if (n <= 0) {
			*end = n;
			return got;
		}
		got += (size_t)n;
	}
	return got;
}

Test(glue_tls, opens_what_openssl_seals, .init = setup, .timeout = 60)
{
	const size_t total = 4 << 20;
	uint8_t *src = malloc(total), *dst = calloc(1, total + 1);
	struct glue_tls *c, *s;
	struct wr w;
	pthread_t th;
	long end = 1;
	size_t got;
	int sv[2];

	cr_assert(src && dst);
	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 7 + i / 1021);
	psk_pair(0, sv, &c, &s);
	w = (struct wr){ .t = c, .fd = sv[0], .total = total, .buf = src };
	cr_assert_eq(pthread_create(&th, NULL, writer, &w), 0);
	got = readv_all(s, sv[1], dst, total + 1, total, &end);
	pthread_join(th, NULL);
	cr_assert_eq(w.err, 0);
	/* close_notify once the socket is empty (it is best effort: one
	 * that finds the socket full is not sent). */
	glue_tls_close_notify(c);
	readv_all(s, sv[1], dst + got, total + 1 - got, 1, &end);
	cr_assert(glue_tls_opening(s), "records opened by wisp");
	cr_assert(!glue_tls_sealing(c), "the writer is OpenSSL's");
	cr_assert_eq(got, total);
	cr_assert_eq(memcmp(src, dst, total), 0, "data intact");
	cr_assert_eq(end, 0, "close_notify: %ld", end);
	glue_tls_free(c);
	glue_tls_free(s);
	close(sv[0]);
	close(sv[1]);
	free(src);
	free(dst);
}

/* wisp's opening: an altered record fails with -EBADMSG and nothing of
 * it reaches the destination; a stream that ends without close_notify
 * is a truncation. */
Test(glue_tls, opened_record_tampered_or_truncated, .init = setup)
{
	static const char msg[] = "sixty-four octets of payload that must "
				  "not arrive altered.......";
	struct glue_tls *c, *s;
	uint8_t rec[256], dst[64];
	struct iovec iov = { dst, sizeof(dst) };
	int sv[2], raw[2];
	ssize_t n;
	long r;

	/* Tampered: as tampered_record_is_not_delivered, read by wisp. */
	psk_pair(0, sv, &c, &s);
	cr_assert_eq(glue_tls_write(c, msg, 64), 64);
	n = recv(sv[1], rec, sizeof(rec), 0);
	cr_assert_gt(n, 64, "one record: header, 64 + 1 octets, tag");
	rec[20] ^= 0x01;
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, raw), 0);
	cr_assert_eq(write(raw[0], rec, (size_t)n), n);
	cr_assert_eq(dup2(raw[1], sv[1]), sv[1]);
	memset(dst, 0xee, sizeof(dst));
	r = glue_tls_readv(s, &iov, 1);
	cr_assert(glue_tls_opening(s));
	cr_assert_eq(r, -EBADMSG, "got %ld", r);
	cr_assert_eq(glue_tls_failure(s), GLUE_TLS_F_BAD_RECORD, "%s",
		     glue_tls_fail_str(glue_tls_failure(s)));
	for (size_t i = 0; i < sizeof(dst); i++)
		cr_assert_eq(dst[i], 0xee, "octet %zu written", i);
	cr_assert_eq(glue_tls_readv(s, &iov, 1), -EBADMSG, "for good");
	glue_tls_free(c);
	glue_tls_free(s);
	close(sv[0]);
	close(sv[1]);
	close(raw[0]);
	close(raw[1]);

	/* Truncated: the record arrives, then the end without
	 * close_notify. */
	psk_pair(0, sv, &c, &s);
	cr_assert_eq(glue_tls_write(c, msg, 64), 64);
	cr_assert_eq(shutdown(sv[0], SHUT_WR), 0);
	r = glue_tls_readv(s, &iov, 1);
	cr_assert(glue_tls_opening(s));
	cr_assert_eq(r, 64, "got %ld", r);
	cr_assert_eq(memcmp(dst, msg, 64), 0);
	r = glue_tls_readv(s, &iov, 1);
	cr_assert_eq(r, -ECONNRESET, "got %ld", r);
	cr_assert_eq(glue_tls_failure(s), GLUE_TLS_F_TRUNCATED, "%s",
		     glue_tls_fail_str(glue_tls_failure(s)));
	glue_tls_free(c);
	glue_tls_free(s);
	close(sv[0]);
	close(sv[1]);
}

/* A plain OpenSSL peer whose ALPN is not "iwarp". */
struct other {
	int fd;
	bool server;
	const char *alpn;          /* client: offered; server: NULL = none */
	int ok;
};

static void *other_main(void *arg)
{
	struct other *o = arg;
	SSL_CTX *x = SSL_CTX_new(o->server ? TLS_server_method() :
					     TLS_client_method());
	SSL *ssl;

	SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION);
	if (o->server) {
		SSL_CTX_use_certificate_chain_file(x, cert);
		SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM);
	} else {
		SSL_CTX_set_alpn_protos(x, (const unsigned char *)o->alpn,
					(unsigned)strlen(o->alpn));
	}
	ssl = SSL_new(x);
	SSL_set_fd(ssl, o->fd);
	o->ok = o->server ? SSL_accept(ssl) : SSL_connect(ssl);
	if (o->ok == 1)
		SSL_read(ssl, (char[1]){ 0 }, 1);   /* wait for the alert */
	SSL_free(ssl);
	SSL_CTX_free(x);
	return NULL;
}

Test(glue_tls, alpn_mismatch_fails_both_ways, .init = setup)
{
	struct glue_tls_config scfg = { .mode = GLUE_TLS_REQUIRED,
					.cert = cert, .key = key };
	struct glue_tls_config ccfg = { .mode = GLUE_TLS_REQUIRED, .ca = ca };
	char why[256];
	struct glue_tls_ctx *sx = glue_tls_ctx_get(&scfg, true, why, 256);
	struct glue_tls_ctx *cx = glue_tls_ctx_get(&ccfg, false, why, 256);
	struct other o;
	struct glue_tls *t;
	pthread_t th;
	int sv[2];

	cr_assert(sx && cx, "%s", why);
	/* A client offering "\x02h2" only: the wisp listener refuses. */
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	o = (struct other){ .fd = sv[0], .server = false, .alpn = "\x02h2" };
	cr_assert_eq(pthread_create(&th, NULL, other_main, &o), 0);
	t = glue_tls_new(sx, sv[1], NULL);
	cr_assert_lt(glue_tls_handshake(t, 2000), 0);
	cr_assert_eq(glue_tls_failure(t), GLUE_TLS_F_ALPN);
	shutdown(sv[1], SHUT_RDWR);
	pthread_join(th, NULL);
	glue_tls_free(t);
	close(sv[0]);
	close(sv[1]);

	/* A server that selects no protocol: the wisp initiator refuses. */
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	o = (struct other){ .fd = sv[1], .server = true };
	cr_assert_eq(pthread_create(&th, NULL, other_main, &o), 0);
	t = glue_tls_new(cx, sv[0], "127.0.0.1");
	cr_assert_lt(glue_tls_handshake(t, 2000), 0);
	cr_assert_eq(glue_tls_failure(t), GLUE_TLS_F_ALPN, "%s",
		     glue_tls_fail_str(glue_tls_failure(t)));
	shutdown(sv[0], SHUT_RDWR);
	pthread_join(th, NULL);
	glue_tls_free(t);
	close(sv[0]);
	close(sv[1]);
}

/* A plain OpenSSL client that sends 256 KiB with KeyUpdates on the way,
 * one of them update_requested, then reads a reply and counts the
 * KeyUpdates it received. */
struct kuc {
	int fd, go;
	const uint8_t *src;
	size_t total;
	int updates_in;
	int ok;
	char reply[64];
};

static void kuc_msg(int write_p, int version, int type, const void *buf,
		    size_t len, SSL *ssl, void *arg)
{
	const uint8_t *b = buf;
	struct kuc *k = arg;

	(void)version;
	(void)ssl;
	if (!write_p && type == SSL3_RT_HANDSHAKE && len >= 1 &&
	    b[0] == SSL3_MT_KEY_UPDATE)
		k->updates_in++;
}

static void *kuc_main(void *arg)
{
	struct kuc *k = arg;
	SSL_CTX *x = SSL_CTX_new(TLS_client_method());
	SSL *ssl;

	SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION);
	SSL_CTX_set_ciphersuites(x, "TLS_AES_128_GCM_SHA256");
	SSL_CTX_set_alpn_protos(x, (const unsigned char *)"\x05iwarp", 6);
	ssl = SSL_new(x);
	SSL_set_fd(ssl, k->fd);
	SSL_set_msg_callback(ssl, kuc_msg);
	SSL_set_msg_callback_arg(ssl, k);
	if (SSL_connect(ssl) != 1 || read(k->go, (char[1]){ 0 }, 1) != 1)
		goto out;
	for (size_t off = 0; off < k->total; off += 4096) {
		/* Every 32 KiB a KeyUpdate (sent ahead of the next write);
		 * the fourth asks for the peer's. */
		if (off && off % 32768 == 0 &&
		    SSL_key_update(ssl, off == 4 * 32768 ?
				   SSL_KEY_UPDATE_REQUESTED :
				   SSL_KEY_UPDATE_NOT_REQUESTED) != 1)
			goto out;
		if (SSL_write(ssl, k->src + off, 4096) != 4096)
			goto out;
	}
	k->ok = SSL_read(ssl, k->reply, sizeof(k->reply)) ==
		(int)sizeof(k->reply);
	SSL_shutdown(ssl);
out:
	SSL_free(ssl);
	SSL_CTX_free(x);
	return NULL;
}

Test(glue_tls, opens_openssl_key_updates_and_answers, .init = setup,
     .timeout = 30)
{
	struct glue_tls_config scfg = { .mode = GLUE_TLS_REQUIRED,
					.cert = cert, .key = key };
	const size_t total = 256 << 10;
	uint8_t *src = malloc(total), *dst = calloc(1, total);
	char why[256];
	struct glue_tls_ctx *sx = glue_tls_ctx_get(&scfg, true, why, 256);
	struct glue_tls *t;
	struct kuc k;
	pthread_t th;
	struct iovec one = { dst, 1 };
	long end = 1;
	size_t got, off = 0;
	int sv[2], go[2];

	cr_assert(sx && src && dst, "%s", why);
	cr_assert_eq(pipe(go), 0);
	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 13 + i / 509);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	k = (struct kuc){ .fd = sv[0], .go = go[0], .src = src,
			  .total = total };
	cr_assert_eq(pthread_create(&th, NULL, kuc_main, &k), 0);
	t = glue_tls_new(sx, sv[1], NULL);
	cr_assert_eq(glue_tls_handshake(t, 2000), 0, "%s",
		     glue_tls_fail_str(glue_tls_failure(t)));
	/* wisp opens from a read that finds OpenSSL holding nothing: the
	 * client sends once that read is made. */
	cr_assert_eq(glue_tls_readv(t, &one, 1), -EAGAIN);
	cr_assert(glue_tls_opening(t), "records opened by wisp");
	cr_assert_eq(write(go[1], "g", 1), 1);
	got = readv_all(t, sv[1], dst, total, total, &end);
	cr_assert_eq(got, total, "got %zu, end %ld (%s)", got, end,
		     glue_tls_fail_str(glue_tls_failure(t)));
	cr_assert_eq(memcmp(src, dst, total), 0, "data intact across "
		     "the peer's KeyUpdates");
	/* The reply: after the KeyUpdate the peer asked for. */
	while (off < sizeof(k.reply)) {
		struct iovec iov = { (void *)(src + off),
				     sizeof(k.reply) - off };
		long n = glue_tls_tx(t, &iov, 1);

		if (n == -EAGAIN) {
			struct pollfd p = { .fd = sv[1], .events = POLLOUT };

			poll(&p, 1, 1000);
			continue;
		}
		cr_assert_gt(n, 0);
		off += (size_t)n;
	}
	pthread_join(th, NULL);
	cr_assert(k.ok, "the client read the reply");
	cr_assert_eq(memcmp(k.reply, src, sizeof(k.reply)), 0);
	cr_assert_eq(k.updates_in, 1, "KeyUpdates the client received: %d",
		     k.updates_in);
	glue_tls_free(t);
	close(sv[0]);
	close(sv[1]);
	close(go[0]);
	close(go[1]);
	free(src);
	free(dst);
}

Test(glue_tls, registry_forgets_a_closed_socket, .init = setup)
{
	struct glue_tls *c, *s;
	int sv[2], fd, again[2];

	psk_pair(0, sv, &c, &s);
	fd = sv[0];
	cr_assert_eq(glue_tls_attach(fd, c), 0);
	cr_assert_eq(glue_tls_of(fd), c);
	/* The number now names another socket (as after close and a new
	 * socket): no session there, and the stale one is freed. */
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, again), 0);
	cr_assert_eq(dup2(again[0], fd), fd);
	cr_assert_null(glue_tls_of(fd));
	close(fd);
	glue_tls_free(s);
	close(sv[1]);
	close(again[0]);
	close(again[1]);
}
