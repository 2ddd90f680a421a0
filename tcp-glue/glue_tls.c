// SPDX-License-Identifier: MIT
/*
 * glue_tls.c - TLS 1.3 under MPA with OpenSSL (glue_tls.h, docs/tls.md).
 *
 * OpenSSL does the handshake and the records of the MPA exchange; once
 * the engine carries the stream, wisp seals and opens the application
 * data records itself with the traffic secrets OpenSSL derived ("Sealing"
 * and "Opening" below, docs/tls.md "Sealing and opening").
 *
 * Copies of each payload octet (docs/tls.md "Copies"):
 *  - receive: the kernel copies the record into the session's read
 *    buffer (OpenSSL's, then wisp's; as recv() into the MR does without
 *    TLS); it is decrypted in place and its tag checked, and only then is
 *    the plaintext copied into the iovecs the QP gave (rx_want: the MR,
 *    or the receive buffer). One user-space copy, and nothing that failed
 *    authentication is ever written into an MR.
 *    One recv takes what the socket holds (several records) into that
 *    buffer rather than each record's header and body apart.
 *  - transmit: records of 16 KiB (bulk traffic in full records, not one
 *    small record per iovec). A record whose octets lie in one iovec
 *    (inside a large FPDU's payload: the user's buffer) is encrypted
 *    straight from there, no copy; one that straddles iovecs (an FPDU
 *    header and the start of its payload, small FPDUs) is gathered into
 *    a 16 KiB plaintext buffer first, the one user-space copy. It is
 *    encrypted into the session's write buffer, which send() hands to
 *    the kernel.
 */
#include "glue_tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define PSK_MAX 64
/* TLS 1.3 records as wisp seals them (RFC 8446 5.1, 5.2). */
#define REC_HDR 5
#define REC_TAG 16
#define REC_IV 12
#define REC_CT_ALERT 21
#define REC_CT_HANDSHAKE 22
#define REC_CT_APPDATA 23
/* OpenSSL's read buffer with read-ahead: four full records. */
#define GLUE_TLS_READ_BUF (4 * (GLUE_TLS_RECORD + 256))

struct glue_tls_ctx {
	struct glue_tls_ctx *next;
	struct glue_tls_config cfg;
	bool server;
	SSL_CTX *ssl_ctx;
	uint8_t psk[PSK_MAX];
	size_t psk_len;
};

struct glue_tls {
	struct glue_tls_ctx *ctx;
	/* An SSL object is not safe for an SSL_read on one thread and an
	 * SSL_write on another (they share the record layer's state and
	 * SSL_get_error's view of it); the engine's receive and transmit
	 * sides run on different threads at times, so every call into
	 * OpenSSL on a session, with its SSL_get_error, holds this. */
	pthread_mutex_t lock;
	SSL *ssl;
	int fd;
	short events;
	enum glue_tls_fail fail;
	int verify_err;           /* first X509_V_ERR_* of the peer's chain */
	bool closed;              /* close_notify sent */
	uint64_t since_update;
	unsigned updates_sent;
	uint8_t stage[GLUE_TLS_RECORD]; /* gathered plaintext */
	size_t pend;              /* > 0: OpenSSL holds a record of this
				   * many octets, partly sent (retry) */
	/* OpenSSL holds octets of a record (SSL_has_pending) after the
	 * last SSL_read: glue_tls_rx_idle must not look at the socket
	 * alone then. Written under lock, read without it. */
	_Atomic bool rx_buffered;

	/* Sealing (docs/tls.md "Sealing and opening"): from the first
	 * glue_tls_tx on, wisp makes the application data records it
	 * sends itself, with the traffic secret OpenSSL derived
	 * (keylog_cb) and the sequence number OpenSSL reached (msg_cb).
	 * All under lock. */
	bool seal;                /* wisp seals; OpenSSL writes nothing */
	bool seal_tried;
	bool os_rekeyed;          /* OpenSSL sent a KeyUpdate itself */
	bool os_wpend;            /* OpenSSL holds a record half sent */
	bool ku_owed;             /* a KeyUpdate before the next record */
	uint64_t os_wseq;         /* records OpenSSL sent after the
				   * handshake */
	uint8_t tx_secret[EVP_MAX_MD_SIZE];
	size_t tx_secret_len;
	const EVP_MD *seal_md;
	EVP_CIPHER *seal_cipher;
	EVP_CIPHER_CTX *seal_ctx;
	uint8_t seal_iv[REC_IV];
	uint64_t seal_seq;
	size_t wbuf_off, wbuf_len; /* sealed octets not sent yet */
	uint8_t wbuf[REC_HDR + GLUE_TLS_RECORD + 1 + REC_TAG];

	/* Opening (docs/tls.md "Sealing and opening"): from the first
	 * glue_tls_readv that finds OpenSSL holding nothing, wisp opens
	 * the records it receives itself. Under lock (and the caller's
	 * receive side). */
	bool open;
	bool open_tried;
	bool os_rkeyupd;          /* OpenSSL took a KeyUpdate itself */
	bool rx_eof;              /* close_notify received */
	int rx_err;               /* the stream failed: this, for ever */
	uint64_t os_rseq;         /* records OpenSSL read after the
				   * handshake */
	uint8_t rx_secret[EVP_MAX_MD_SIZE];
	size_t rx_secret_len;
	EVP_CIPHER_CTX *open_ctx;
	uint8_t open_iv[REC_IV];
	uint64_t open_seq;
	uint8_t *rbuf;            /* GLUE_TLS_READ_BUF: records received */
	size_t rb_head, rb_tail;  /* not opened yet: [head, tail) */
	size_t pt_off, pt_end;    /* plaintext not read yet, in rbuf */
};

static const char *const fail_names[] = {
	[GLUE_TLS_OK] = "no failure",
	[GLUE_TLS_F_CONFIG] = "local TLS configuration",
	[GLUE_TLS_F_PSK] = "wrong pre-shared key or unknown PSK identity",
	[GLUE_TLS_F_UNTRUSTED] = "peer certificate not trusted",
	[GLUE_TLS_F_EXPIRED] = "peer certificate expired or not yet valid",
	[GLUE_TLS_F_NAME] = "peer certificate does not match the expected "
			    "name or address",
	[GLUE_TLS_F_NO_CERT] = "peer sent no certificate",
	[GLUE_TLS_F_ALPN] = "ALPN: peer does not speak \"iwarp\"",
	[GLUE_TLS_F_PLAINTEXT] = "peer closed at the TLS ClientHello "
				 "(a plaintext-only listener?)",
	[GLUE_TLS_F_PROTOCOL] = "TLS handshake failed",
	[GLUE_TLS_F_BAD_RECORD] = "TLS record failed authentication",
	[GLUE_TLS_F_TRUNCATED] = "TLS stream truncated (no close_notify)",
	[GLUE_TLS_F_ALERT] = "TLS alert from the peer",
	[GLUE_TLS_F_TIMEOUT] = "TLS handshake timed out",
	[GLUE_TLS_F_PEER_UNTRUSTED] = "the peer does not trust our "
				      "certificate",
	[GLUE_TLS_F_PEER_EXPIRED] = "the peer finds our certificate expired",
};
_Static_assert(sizeof(fail_names) / sizeof(fail_names[0]) ==
	       GLUE_TLS_F__COUNT, "a name for every TLS failure");

const char *glue_tls_fail_str(enum glue_tls_fail f)
{
	return (unsigned)f < GLUE_TLS_F__COUNT ? fail_names[f] : "?";
}

int glue_tls_fail_errno(enum glue_tls_fail f)
{
	switch (f) {
	case GLUE_TLS_OK:
		return 0;
	case GLUE_TLS_F_CONFIG:
		return -EINVAL;
	case GLUE_TLS_F_PSK:
		return -EACCES;
	case GLUE_TLS_F_UNTRUSTED:
	case GLUE_TLS_F_PEER_UNTRUSTED:
		return -EKEYREJECTED;
	case GLUE_TLS_F_EXPIRED:
	case GLUE_TLS_F_PEER_EXPIRED:
		return -EKEYEXPIRED;
	case GLUE_TLS_F_NAME:
		return -EREMCHG;
	case GLUE_TLS_F_NO_CERT:
		return -ENOKEY;
	case GLUE_TLS_F_ALPN:
		return -ENOPROTOOPT;
	case GLUE_TLS_F_PLAINTEXT:
		return -EPROTONOSUPPORT;
	case GLUE_TLS_F_BAD_RECORD:
	case GLUE_TLS_F_ALERT:
		return -EBADMSG;
	case GLUE_TLS_F_TRUNCATED:
		return -ECONNRESET;
	case GLUE_TLS_F_TIMEOUT:
		return -ETIMEDOUT;
	case GLUE_TLS_F_PROTOCOL:
	default:
		return -EPROTO;
	}
}

/* ------------------------------------------------------------------ */
/* The BIO: non-blocking recv / send on the fd                        */
/* ------------------------------------------------------------------ */

static int bio_write(BIO *b, const char *buf, size_t len, size_t *done)
{
	const struct glue_tls *t = BIO_get_data(b);
	int fd = t->fd;
	ssize_t n;

	BIO_clear_retry_flags(b);
	if (t->seal) {
		/* wisp seals this session's records now: whatever OpenSSL
		 * would still write (an alert as it fails, an answer to a
		 * KeyUpdate) carries a sequence number wisp has used, and
		 * never reaches the wire. */
		*done = len;
		return 1;
	}
	do
		n = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			BIO_set_retry_write(b);
		return 0;
	}
	*done = (size_t)n;
	return 1;
}

static int bio_read(BIO *b, char *buf, size_t len, size_t *done)
{
	const struct glue_tls *t = BIO_get_data(b);
	int fd = t->fd;
	ssize_t n;

	BIO_clear_retry_flags(b);
	do
		n = recv(fd, buf, len, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			BIO_set_retry_read(b);
		return 0;
	}
	if (n == 0) {
		BIO_set_flags(b, BIO_FLAGS_IN_EOF);
		return 0;
	}
	*done = (size_t)n;
	return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_CTRL_EOF:
		return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
	default:
		return 0;
	}
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void)
{
	bio_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
				  "wisp-socket");
	if (!bio_method)
		return;
	BIO_meth_set_write_ex(bio_method, bio_write);
	BIO_meth_set_read_ex(bio_method, bio_read);
	BIO_meth_set_ctrl(bio_method, bio_ctrl);
}

/* ------------------------------------------------------------------ */
/* Contexts                                                           */
/* ------------------------------------------------------------------ */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct glue_tls_ctx *ctx_list;
static int ex_index = -1;

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

static bool cfg_eq(const struct glue_tls_config *a,
		   const struct glue_tls_config *b)
{
	return str_eq(a->psk_file, b->psk_file) &&
	       str_eq(a->psk_identity, b->psk_identity) &&
	       str_eq(a->cert, b->cert) && str_eq(a->key, b->key) &&
	       str_eq(a->ca, b->ca) && str_eq(a->verify_name, b->verify_name) &&
	       a->mutual == b->mutual &&
	       a->key_update_bytes == b->key_update_bytes;
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* The PSK file: 32 to 64 octets as hex digits, optional final newline
 * (scripts/wisp-tls-psk writes 32). */
static int load_psk(struct glue_tls_ctx *x, char *why, size_t whylen)
{
	char text[2 * PSK_MAX + 4];
	FILE *f = fopen(x->cfg.psk_file, "re");
	size_t n, i;

	if (!f) {
		snprintf(why, whylen, "WISP_TLS_PSK_FILE %s: %s",
			 x->cfg.psk_file, strerror(errno));
		return -EINVAL;
	}
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		n--;
	if (n % 2 || n < 64 || n > 2 * PSK_MAX)
		goto bad;
	for (i = 0; i < n / 2; i++) {
		int hi = hexval(text[2 * i]), lo = hexval(text[2 * i + 1]);

		if (hi < 0 || lo < 0)
			goto bad;
		x->psk[i] = (uint8_t)(hi << 4 | lo);
	}
	x->psk_len = n / 2;
	OPENSSL_cleanse(text, sizeof(text));
	return 0;
bad:
	OPENSSL_cleanse(text, sizeof(text));
	snprintf(why, whylen, "WISP_TLS_PSK_FILE %s: expected 32 to 64 "
		 "octets as hex digits", x->cfg.psk_file);
	return -EINVAL;
}

static struct glue_tls *tls_of_ssl(const SSL *ssl)
{
	return SSL_get_ex_data(ssl, ex_index);
}

/* OpenSSL's key log: the lines wisp keeps are the two application
 * traffic secrets (RFC 8446 7.1, client_/server_application_traffic_
 * secret_0): this side's for sealing, the peer's for opening. */
static void keylog_cb(const SSL *ssl, const char *line)
{
	static const char srv[] = "SERVER_TRAFFIC_SECRET_0 ",
			  cli[] = "CLIENT_TRAFFIC_SECRET_0 ";
	struct glue_tls *t = tls_of_ssl(ssl);
	uint8_t *secret;
	size_t *slen, n = 0;
	const char *p;

	if (!t)
		return;
	if (!strncmp(line, srv, sizeof(srv) - 1)) {
		secret = t->ctx->server ? t->tx_secret : t->rx_secret;
		slen = t->ctx->server ? &t->tx_secret_len : &t->rx_secret_len;
	} else if (!strncmp(line, cli, sizeof(cli) - 1)) {
		secret = t->ctx->server ? t->rx_secret : t->tx_secret;
		slen = t->ctx->server ? &t->rx_secret_len : &t->tx_secret_len;
	} else {
		return;
	}
	p = strchr(line + sizeof(srv) - 1, ' ');  /* past the client random */
	if (!p)
		return;
	for (p++; p[0] && p[1] && n < EVP_MAX_MD_SIZE; p += 2) {
		int hi = hexval(p[0]), lo = hexval(p[1]);

		if (hi < 0 || lo < 0)
			break;
		secret[n++] = (uint8_t)(hi << 4 | lo);
	}
	*slen = *p ? 0 : n;                   /* all of it, or nothing */
}

/* Records as OpenSSL sends and receives them: how many it sent with
 * the application traffic key (the sequence number sealing goes on
 * from), whether it rotated that key itself, and a peer's KeyUpdate
 * that asks for ours (RFC 8446 4.6.3). */
static void msg_cb(int write_p, int version, int content_type,
		   const void *buf, size_t len, SSL *ssl, void *arg)
{
	struct glue_tls *t = tls_of_ssl(ssl);
	const uint8_t *b = buf;

	(void)version;
	(void)arg;
	if (!t)
		return;
	if (content_type == SSL3_RT_HEADER && SSL_is_init_finished(ssl)) {
		if (write_p)
			t->os_wseq++;
		else
			t->os_rseq++;
	}
	if (content_type != SSL3_RT_HANDSHAKE || len < 5 ||
	    b[0] != SSL3_MT_KEY_UPDATE)
		return;
	if (write_p) {
		t->os_rekeyed = true;
		return;
	}
	t->os_rkeyupd = true;
	if (b[4] == SSL_KEY_UPDATE_REQUESTED)
		t->ku_owed = true;
}

/* TLS_AES_128_GCM_SHA256 (RFC 8446 B.4: 0x13,0x01): the PSK's hash. */
static SSL_SESSION *psk_session(SSL *ssl, const struct glue_tls_ctx *x)
{
	static const unsigned char aes128gcm[] = { 0x13, 0x01 };
	const SSL_CIPHER *c = SSL_CIPHER_find(ssl, aes128gcm);
	SSL_SESSION *s = SSL_SESSION_new();

	if (!s || !c || !SSL_SESSION_set1_master_key(s, x->psk, x->psk_len) ||
	    !SSL_SESSION_set_cipher(s, c) ||
	    !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
		SSL_SESSION_free(s);
		return NULL;
	}
	return s;
}

static int psk_use_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id,
		      size_t *idlen, SSL_SESSION **sess)
{
	struct glue_tls *t = tls_of_ssl(ssl);
	const struct glue_tls_ctx *x = t->ctx;

	*sess = NULL;
	/* A HelloRetryRequest may fix another hash: offer nothing then. */
	if (md && md != EVP_sha256())
		return 1;
	*sess = psk_session(ssl, x);
	if (!*sess)
		return 0;
	*id = (const unsigned char *)x->cfg.psk_identity;
	*idlen = strlen(x->cfg.psk_identity);
	return 1;
}

static int psk_find_cb(SSL *ssl, const unsigned char *id, size_t idlen,
		       SSL_SESSION **sess)
{
	struct glue_tls *t = tls_of_ssl(ssl);
	const struct glue_tls_ctx *x = t->ctx;

	*sess = NULL;
	if (idlen != strlen(x->cfg.psk_identity) ||
	    memcmp(id, x->cfg.psk_identity, idlen)) {
		/* Not ours: no session, and without a certificate the
		 * handshake fails; say why. */
		t->fail = GLUE_TLS_F_PSK;
		return 1;
	}
	*sess = psk_session(ssl, x);
	return *sess ? 1 : 0;
}

/* ALPN (RFC 7301 3.2): a server that supports none of the client's
 * protocols "MUST respond with a fatal no_application_protocol alert". */
static int alpn_select_cb(SSL *ssl, const unsigned char **out,
			  unsigned char *outlen, const unsigned char *in,
			  unsigned int inlen, void *arg)
{
	static const unsigned char ours[] = "\x05" GLUE_TLS_ALPN;
	unsigned char *sel;

	(void)arg;
	if (SSL_select_next_proto(&sel, outlen, ours, sizeof(ours) - 1, in,
				  inlen) != OPENSSL_NPN_NEGOTIATED) {
		struct glue_tls *t = tls_of_ssl(ssl);

		if (t)
			t->fail = GLUE_TLS_F_ALPN;
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	}
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

/* OpenSSL's verdict on each certificate of the peer's chain, kept: the
 * first error is the reason a refusal names. */
static int verify_cb(int ok, X509_STORE_CTX *store)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(store,
				SSL_get_ex_data_X509_STORE_CTX_idx());
	struct glue_tls *t = ssl ? tls_of_ssl(ssl) : NULL;

	if (!ok && t && t->verify_err == X509_V_OK)
		t->verify_err = X509_STORE_CTX_get_error(store);
	return ok;
}

static int ctx_setup(struct glue_tls_ctx *x, char *why, size_t whylen)
{
	SSL_CTX *s = SSL_CTX_new(x->server ? TLS_server_method() :
					     TLS_client_method());
	const struct glue_tls_config *c = &x->cfg;

	if (!s) {
		snprintf(why, whylen, "SSL_CTX_new failed");
		return -ENOMEM;
	}
	x->ssl_ctx = s;
	SSL_CTX_set_min_proto_version(s, TLS1_3_VERSION);
	/* AES-128-GCM first: AES-NI makes it the cheapest AEAD here. */
	SSL_CTX_set_ciphersuites(s, "TLS_AES_128_GCM_SHA256:"
				 "TLS_AES_256_GCM_SHA384:"
				 "TLS_CHACHA20_POLY1305_SHA256");
	SSL_CTX_set_mode(s, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
			 SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_clear_mode(s, SSL_MODE_RELEASE_BUFFERS);
	/* Read ahead: one recv takes whatever the socket holds, several
	 * records at a time, rather than a 5-octet header and then the
	 * body of each record (two system calls per record). */
	SSL_CTX_set_read_ahead(s, 1);
	SSL_CTX_set_default_read_buffer_len(s, GLUE_TLS_READ_BUF);
	/* No resumption tickets: every connection authenticates afresh,
	 * and no extra record follows the handshake. */
	SSL_CTX_set_num_tickets(s, 0);
	SSL_CTX_set_session_cache_mode(s, SSL_SESS_CACHE_OFF);
	/* What sealing needs: this side's traffic secret and how many
	 * records OpenSSL sent with it. */
	SSL_CTX_set_keylog_callback(s, keylog_cb);
	SSL_CTX_set_msg_callback(s, msg_cb);
	/* psk_dhe_ke only (RFC 8446 4.2.9): OpenSSL offers and accepts
	 * psk_ke only with SSL_OP_ALLOW_NO_DHE_KEX, which stays clear, so
	 * a stolen PSK does not open recorded traffic. */
	SSL_CTX_clear_options(s, SSL_OP_ALLOW_NO_DHE_KEX);
	if (x->server)
		SSL_CTX_set_alpn_select_cb(s, alpn_select_cb, NULL);
	else if (SSL_CTX_set_alpn_protos(s, (const unsigned char *)
					 "\x05" GLUE_TLS_ALPN, 6))
		goto err_ssl;

	if (c->psk_file) {
		if (!c->psk_identity || !*c->psk_identity) {
			snprintf(why, whylen, "WISP_TLS_PSK_FILE needs "
				 "WISP_TLS_PSK_IDENTITY");
			return -EINVAL;
		}
		if (load_psk(x, why, whylen))
			return -EINVAL;
		if (x->server)
			SSL_CTX_set_psk_find_session_callback(s, psk_find_cb);
		else
			SSL_CTX_set_psk_use_session_callback(s, psk_use_cb);
		return 0;
	}
	if (c->cert || c->key || x->server) {
		if (!c->cert || !c->key) {
			snprintf(why, whylen, "TLS needs WISP_TLS_CERT and "
				 "WISP_TLS_KEY%s, or WISP_TLS_PSK_FILE",
				 x->server ? " on a listener" : "");
			return -EINVAL;
		}
		if (SSL_CTX_use_certificate_chain_file(s, c->cert) != 1 ||
		    SSL_CTX_use_PrivateKey_file(s, c->key, SSL_FILETYPE_PEM)
		    != 1 || SSL_CTX_check_private_key(s) != 1) {
			snprintf(why, whylen, "WISP_TLS_CERT %s / WISP_TLS_KEY "
				 "%s do not load or do not match", c->cert,
				 c->key);
			return -EINVAL;
		}
	}
	if (c->ca ? SSL_CTX_load_verify_locations(s, c->ca, NULL) != 1 :
		    SSL_CTX_set_default_verify_paths(s) != 1) {
		snprintf(why, whylen, "WISP_TLS_CA %s does not load",
			 c->ca ? c->ca : "(system)");
		return -EINVAL;
	}
	/* Verification is on by default: an initiator always verifies the
	 * listener; a listener verifies clients with WISP_TLS_MUTUAL=1. */
	if (!x->server)
		SSL_CTX_set_verify(s, SSL_VERIFY_PEER, verify_cb);
	else if (c->mutual)
		SSL_CTX_set_verify(s, SSL_VERIFY_PEER |
				   SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
	return 0;
err_ssl:
	snprintf(why, whylen, "OpenSSL setup failed");
	return -ENOMEM;
}

static void global_init(void)
{
	/* No OPENSSL_cleanup at exit: an unmodified program exits with
	 * connections open, and the engine thread (or a destructor) may
	 * still touch a session after atexit handlers ran; OpenSSL's
	 * cleanup under its feet crashed rping at exit. */
	OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, NULL);
	pthread_once(&bio_once, bio_method_init);
	pthread_mutex_lock(&ctx_lock);
	if (ex_index < 0)
		ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	pthread_mutex_unlock(&ctx_lock);
}

struct glue_tls_ctx *glue_tls_ctx_get(const struct glue_tls_config *cfg,
				      bool server, char *why, size_t whylen)
{
	struct glue_tls_ctx *x;

	global_init();
	if (!bio_method || ex_index < 0) {
		snprintf(why, whylen, "OpenSSL initialisation failed");
		return NULL;
	}
	pthread_mutex_lock(&ctx_lock);
	for (x = ctx_list; x; x = x->next)
		if (x->server == server && cfg_eq(&x->cfg, cfg))
			goto out;
	x = calloc(1, sizeof(*x));
	if (!x) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	x->cfg = *cfg;
	x->server = server;
	if (ctx_setup(x, why, whylen)) {
		SSL_CTX_free(x->ssl_ctx);
		OPENSSL_cleanse(x->psk, sizeof(x->psk));
		free(x);
		x = NULL;
		goto out;
	}
	/* Kept for the process: listeners and connections share it. */
	x->next = ctx_list;
	ctx_list = x;
out:
	pthread_mutex_unlock(&ctx_lock);
	return x;
}

/* ------------------------------------------------------------------ */
/* Sessions                                                           */
/* ------------------------------------------------------------------ */

struct glue_tls *glue_tls_new(struct glue_tls_ctx *ctx, int fd,
			      const char *peer_addr)
{
	struct glue_tls *t = calloc(1, sizeof(*t));
	const char *name = ctx->cfg.verify_name ? ctx->cfg.verify_name :
						  peer_addr;
	BIO *b;

	if (!t)
		goto err;
	t->ctx = ctx;
	t->fd = fd;
	pthread_mutex_init(&t->lock, NULL);
	t->events = POLLIN;
	t->ssl = SSL_new(ctx->ssl_ctx);
	b = BIO_new(bio_method);
	if (!t->ssl || !b) {
		BIO_free(b);
		goto err_free;
	}
	BIO_set_data(b, t);
	BIO_set_init(b, 1);
	SSL_set_bio(t->ssl, b, b);
	SSL_set_ex_data(t->ssl, ex_index, t);
	if (ctx->server) {
		SSL_set_accept_state(t->ssl);
		return t;
	}
	SSL_set_connect_state(t->ssl);
	if (!ctx->cfg.psk_file && name && *name) {
		/* An address is checked against IP SANs, a name against
		 * DNS SANs / CN (RFC 6125). */
		X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
		unsigned char bin[16];
		bool ip = inet_pton(AF_INET, name, bin) == 1 ||
			  inet_pton(AF_INET6, name, bin) == 1;

		if (ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, name) != 1 :
			 SSL_set1_host(t->ssl, name) != 1)
			goto err_free;
		if (!ip)
			SSL_set_tlsext_host_name(t->ssl, name);
	}
	return t;
err_free:
	SSL_free(t->ssl);
	pthread_mutex_destroy(&t->lock);
	free(t);
err:
	errno = ENOMEM;
	return NULL;
}

void glue_tls_free(struct glue_tls *t)
{
	if (!t)
		return;
	SSL_free(t->ssl);
	EVP_CIPHER_CTX_free(t->seal_ctx);
	EVP_CIPHER_CTX_free(t->open_ctx);
	EVP_CIPHER_free(t->seal_cipher);
	if (t->rbuf) {
		OPENSSL_cleanse(t->rbuf, GLUE_TLS_READ_BUF);
		free(t->rbuf);
	}
	OPENSSL_cleanse(t->rx_secret, sizeof(t->rx_secret));
	OPENSSL_cleanse(t->open_iv, sizeof(t->open_iv));
	pthread_mutex_destroy(&t->lock);
	OPENSSL_cleanse(t->stage, sizeof(t->stage));
	OPENSSL_cleanse(t->tx_secret, sizeof(t->tx_secret));
	OPENSSL_cleanse(t->seal_iv, sizeof(t->seal_iv));
	free(t);
}

short glue_tls_events(const struct glue_tls *t)
{
	return t->events;
}

enum glue_tls_fail glue_tls_failure(const struct glue_tls *t)
{
	return t ? t->fail : GLUE_TLS_OK;
}

/* The failure behind an SSL error, from the verify result and the
 * reason of the first queued OpenSSL error (a received alert has its own
 * reason code). */
static enum glue_tls_fail classify(struct glue_tls *t, bool handshake)
{
	unsigned long e = ERR_peek_error();
	int reason = ERR_GET_REASON(e);
	long v = t->verify_err;

	if (t->fail != GLUE_TLS_OK)
		return t->fail;
	/* What verify_cb saw, not SSL_get_verify_result(): a session made
	 * for a PSK, or one whose peer sent no certificate, carries
	 * OpenSSL's initial "unspecified" result, which would blame any
	 * later failure on a certificate. */
	if (v != X509_V_OK) {
		switch (v) {
		case X509_V_ERR_CERT_HAS_EXPIRED:
		case X509_V_ERR_CERT_NOT_YET_VALID:
			return GLUE_TLS_F_EXPIRED;
		case X509_V_ERR_HOSTNAME_MISMATCH:
		case X509_V_ERR_IP_ADDRESS_MISMATCH:
			return GLUE_TLS_F_NAME;
		default:
			return GLUE_TLS_F_UNTRUSTED;
		}
	}
	/* Alerts received: the peer's verdict on our certificate. */
	switch (reason) {
	case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
		return GLUE_TLS_F_PEER_EXPIRED;
	case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
	case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
		return GLUE_TLS_F_PEER_UNTRUSTED;
	case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
	case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
		return GLUE_TLS_F_NO_CERT;
	case SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL:
		return GLUE_TLS_F_ALPN;
	case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
	case SSL_R_BAD_PSK:
	case SSL_R_BINDER_DOES_NOT_VERIFY:
	case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
		return handshake ? GLUE_TLS_F_PSK : GLUE_TLS_F_ALERT;
	case SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC:
	case SSL_R_DECRYPTION_FAILED:
		return GLUE_TLS_F_BAD_RECORD;
	case SSL_R_UNEXPECTED_EOF_WHILE_READING:
		return handshake ? GLUE_TLS_F_PLAINTEXT : GLUE_TLS_F_TRUNCATED;
	case SSL_R_NO_SHARED_CIPHER:
		/* A listener with a PSK only that got a ClientHello
		 * without its identity. */
		return t->ctx->cfg.psk_file ? GLUE_TLS_F_PSK :
					      GLUE_TLS_F_PROTOCOL;
	default:
		if (ERR_GET_LIB(e) != ERR_LIB_SSL || reason < 1000)
			break;
		/* An alert (SSL_AD_REASON_OFFSET + its code). Against a PSK
		 * the listener alerts at the binder it cannot verify, or at
		 * an identity it does not know (OpenSSL's alert differs
		 * between versions): in PSK mode that is the reason. */
		if (handshake && t->ctx->cfg.psk_file && !t->ctx->server)
			return GLUE_TLS_F_PSK;
		return GLUE_TLS_F_ALERT;
	}
	return handshake ? GLUE_TLS_F_PROTOCOL : GLUE_TLS_F_BAD_RECORD;
}

/* The result of an SSL call that returned r <= 0: -EAGAIN (events set),
 * 0 for close_notify, or a failure. */
static long ssl_fail(struct glue_tls *t, int r, bool handshake)
{
	int err = SSL_get_error(t->ssl, r);
	int sys = errno;

	switch (err) {
	case SSL_ERROR_WANT_READ:
		t->events = POLLIN;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		t->events = POLLOUT;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		if (!ERR_peek_error()) {
			/* The socket itself failed (reset). */
			if (t->fail == GLUE_TLS_OK)
				t->fail = handshake ? GLUE_TLS_F_PLAINTEXT :
						      GLUE_TLS_F_TRUNCATED;
			ERR_clear_error();
			return sys == EPIPE || !sys ? -ECONNRESET : -sys;
		}
		/* fall through */
	case SSL_ERROR_SSL:
	default:
		t->fail = classify(t, handshake);
		ERR_clear_error();
		if (t->fail == GLUE_TLS_F_TRUNCATED ||
		    t->fail == GLUE_TLS_F_PLAINTEXT)
			return -ECONNRESET;
		return handshake ? -EPROTO : -EBADMSG;
	}
}

int glue_tls_handshake_step(struct glue_tls *t)
{
	const unsigned char *alpn;
	unsigned int alpn_len;
	int r;

	ERR_clear_error();
	r = SSL_do_handshake(t->ssl);
	if (r <= 0) {
		long ret = ssl_fail(t, r, true);

		return ret ? (int)ret : -ECONNRESET;
	}
	/* RFC 7301: the client must be sure the server chose "iwarp" (a
	 * server that ignores ALPN selects nothing). */
	SSL_get0_alpn_selected(t->ssl, &alpn, &alpn_len);
	if (alpn_len != sizeof(GLUE_TLS_ALPN) - 1 ||
	    memcmp(alpn, GLUE_TLS_ALPN, alpn_len)) {
		t->fail = GLUE_TLS_F_ALPN;
		return -EPROTO;
	}
	t->events = POLLIN;
	return 0;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for t->events on the fd until deadline (-1: none). */
static int wait_events(struct glue_tls *t, int64_t deadline)
{
	struct pollfd pfd = { .fd = t->fd, .events = t->events };

	for (;;) {
		int tmo = -1, n;

		if (deadline >= 0) {
			int64_t left = deadline - mono_ms();

			if (left <= 0)
				return -ETIMEDOUT;
			tmo = left > 60000 ? 60000 : (int)left;
		}
		n = poll(&pfd, 1, tmo);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int glue_tls_handshake(struct glue_tls *t, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;

	for (;;) {
		int r = glue_tls_handshake_step(t);

		if (r != -EAGAIN)
			return r;
		r = wait_events(t, deadline);
		if (r) {
			if (r == -ETIMEDOUT)
				t->fail = GLUE_TLS_F_TIMEOUT;
			return r;
		}
	}
}

/* Before an SSL call whose failure SSL_get_error will classify: an
 * empty error queue. Clearing one costs more than looking at it, and it
 * is nearly always empty already (every failure path clears it). */
static void err_fresh(void)
{
	if (ERR_peek_error())
		ERR_clear_error();
}

static int open_setup(struct glue_tls *t);
static long open_read(struct glue_tls *t, void *buf, size_t len);
static void os_buffers_drop(struct glue_tls *t);

long glue_tls_read(struct glue_tls *t, void *buf, size_t len)
{
	size_t n = 0;
	int r;

	long ret;

	if (!len)
		return 0;
	pthread_mutex_lock(&t->lock);
	if (t->open) {
		ret = open_read(t, buf, len);
		atomic_store_explicit(&t->rx_buffered, t->pt_off < t->pt_end ||
				      t->rb_head < t->rb_tail,
				      memory_order_release);
		pthread_mutex_unlock(&t->lock);
		return ret;
	}
	err_fresh();
	r = SSL_read_ex(t->ssl, buf, len, &n);
	ret = r == 1 ? (long)n : ssl_fail(t, r, false);
	atomic_store_explicit(&t->rx_buffered, SSL_has_pending(t->ssl) == 1,
			      memory_order_release);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

bool glue_tls_rx_buffered(const struct glue_tls *t)
{
	return atomic_load_explicit(&t->rx_buffered, memory_order_acquire);
}

bool glue_tls_rx_idle(struct glue_tls *t)
{
	char octet;
	ssize_t n;

	if (atomic_load_explicit(&t->rx_buffered, memory_order_acquire))
		return false;
	n = recv(t->fd, &octet, 1, MSG_PEEK | MSG_DONTWAIT);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

long glue_tls_readv(struct glue_tls *t, const struct iovec *iov, int n)
{
	long total = 0;

	/* The engine's (or a polling thread's) stream: wisp opens its
	 * records once OpenSSL holds none ("Opening" below). */
	if (!t->open_tried) {
		pthread_mutex_lock(&t->lock);
		if (!t->open && !SSL_has_pending(t->ssl)) {
			t->open_tried = true;
			t->open = !open_setup(t);
			os_buffers_drop(t);
		}
		pthread_mutex_unlock(&t->lock);
	}

	for (int i = 0; i < n; i++) {
		size_t off = 0;

		while (off < iov[i].iov_len) {
			long r = glue_tls_read(t, (uint8_t *)iov[i].iov_base +
					       off, iov[i].iov_len - off);

			if (r <= 0)
				return total ? total : r;
			off += (size_t)r;
			total += r;
			/* Short, and OpenSSL holds nothing more: the next
			 * read would only find the socket empty (a system
			 * call), or find what just arrived, as the next
			 * call will. A short count is as recvmsg's. */
			if (off < iov[i].iov_len && !glue_tls_rx_buffered(t))
				return total;
		}
	}
	return total;
}

static long seal_tx(struct glue_tls *t, const struct iovec *iov, int n);

long glue_tls_write(struct glue_tls *t, const void *buf, size_t len)
{
	size_t n = 0;
	int r;

	long ret;

	if (!len)
		return 0;
	pthread_mutex_lock(&t->lock);
	if (t->seal) {
		/* iov_base is not const; seal_tx only reads it. */
		struct iovec v = { .iov_base = (void *)(uintptr_t)buf,
				   .iov_len = len };

		ret = seal_tx(t, &v, 1);
		pthread_mutex_unlock(&t->lock);
		return ret;
	}
	err_fresh();
	r = SSL_write_ex(t->ssl, buf, len, &n);
	ret = r == 1 ? (long)n : ssl_fail(t, r, false);
	/* A record OpenSSL holds half sent: no taking over now. */
	t->os_wpend = ret == -EAGAIN;
	pthread_mutex_unlock(&t->lock);
	return ret ? ret : -ECONNRESET;
}

/* A walk over the iovecs glue_tls_tx was given. */
struct tx_cur {
	const struct iovec *iov;
	int n, i;
	size_t off;
};

static void cur_skip_empty(struct tx_cur *c)
{
	while (c->i < c->n && c->off >= c->iov[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
}

/*
 * The next record's plaintext, want octets (0: as many as a record
 * holds, fewer if the iovecs end first): a pointer into the iovec when
 * it holds them all (no copy), else gathered into t->stage. NULL when
 * nothing is left, or fewer than want.
 */
static const void *cur_take(struct glue_tls *t, struct tx_cur *c,
			    size_t want, size_t *len)
{
	size_t cap = want ? want : GLUE_TLS_RECORD, got = 0;

	cur_skip_empty(c);
	if (c->i >= c->n)
		return NULL;
	if (c->iov[c->i].iov_len - c->off >= cap) {
		const uint8_t *p = (const uint8_t *)c->iov[c->i].iov_base +
				   c->off;

		c->off += cap;
		*len = cap;
		return p;
	}
	while (c->i < c->n && got < cap) {
		size_t take = c->iov[c->i].iov_len - c->off;

		if (take > cap - got)
			take = cap - got;
		memcpy(t->stage + got, (const uint8_t *)c->iov[c->i].iov_base +
		       c->off, take);
		got += take;
		c->off += take;
		cur_skip_empty(c);
	}
	if (want && got < want)
		return NULL;
	*len = got;
	return t->stage;
}

/* ------------------------------------------------------------------ */
/* Sealing                                                            */
/* ------------------------------------------------------------------ */

/*
 * OpenSSL 3.0 spends several hundred nanoseconds per record around the
 * AEAD itself (cipher re-initialisation through the provider layer,
 * parameter look-ups by name, the record layer's bookkeeping), which is
 * most of what TLS adds to a small message's round trip. So wisp seals
 * the application data records it sends itself, as kernel TLS would:
 * OpenSSL still does the handshake and everything received (each record
 * it opens is checked there: tamper, truncation and alerts are its
 * business), and wisp takes over the sending side at the first
 * glue_tls_tx, with the traffic secret of this side (keylog_cb) and the
 * sequence number OpenSSL reached (msg_cb). From then on OpenSSL writes
 * nothing (bio_write drops it: its state would reuse a nonce). Only for
 * AES-GCM; with another cipher, or when OpenSSL rotated its key itself
 * before the takeover, OpenSSL keeps sealing.
 */

/* HKDF-Expand-Label(secret, label, "", len) (RFC 8446 7.1), len at most
 * the hash's length: one HMAC (RFC 5869 2.3, T(1)). */
static int expand_label(const EVP_MD *md, const uint8_t *secret,
			size_t slen, const char *label, uint8_t *out,
			size_t len)
{
	uint8_t info[2 + 1 + 6 + 16 + 1 + 1], t1[EVP_MAX_MD_SIZE];
	size_t ll = strlen(label), n = 0;
	unsigned int mdlen = 0;

	if (ll > 16 || len > (size_t)EVP_MD_get_size(md))
		return -1;
	info[n++] = (uint8_t)(len >> 8);
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + ll);
	memcpy(info + n, "tls13 ", 6);
	n += 6;
	memcpy(info + n, label, ll);
	n += ll;
	info[n++] = 0;                /* Context: empty */
	info[n++] = 1;                /* HKDF-Expand's counter */
	if (!HMAC(md, secret, (int)slen, info, n, t1, &mdlen) || mdlen < len)
		return -1;
	memcpy(out, t1, len);
	OPENSSL_cleanse(t1, sizeof(t1));
	return 0;
}

/* The key and IV of a traffic secret (RFC 8446 7.3) into x and iv;
 * enc: for sealing, else for opening. */
static int aead_keys(struct glue_tls *t, EVP_CIPHER_CTX *x,
		     const uint8_t *secret, size_t slen, uint8_t *iv,
		     bool enc)
{
	uint8_t key[32];
	int klen = EVP_CIPHER_get_key_length(t->seal_cipher), r;

	if (klen <= 0 || (size_t)klen > sizeof(key) ||
	    expand_label(t->seal_md, secret, slen, "key", key,
			 (size_t)klen) ||
	    expand_label(t->seal_md, secret, slen, "iv", iv, REC_IV))
		return -1;
	r = EVP_CipherInit_ex(x, t->seal_cipher, NULL, key, NULL, enc);
	OPENSSL_cleanse(key, sizeof(key));
	return r == 1 ? 0 : -1;
}

static int seal_keys(struct glue_tls *t)
{
	return aead_keys(t, t->seal_ctx, t->tx_secret, t->tx_secret_len,
			 t->seal_iv, true);
}

/* The next traffic secret (RFC 8446 7.2), in place. */
static int next_secret(struct glue_tls *t, uint8_t *secret, size_t slen)
{
	uint8_t next[EVP_MAX_MD_SIZE];

	if (expand_label(t->seal_md, secret, slen, "traffic upd", next, slen))
		return -1;
	memcpy(secret, next, slen);
	OPENSSL_cleanse(next, sizeof(next));
	return 0;
}

/* The nonce of record seq (RFC 8446 5.3): the 64-bit sequence number,
 * left-padded, XORed into the static IV. */
static void rec_nonce(uint8_t *nonce, const uint8_t *iv, uint64_t seq)
{
	memcpy(nonce, iv, REC_IV);
	for (int i = 0; i < 8; i++)
		nonce[REC_IV - 1 - i] ^= (uint8_t)(seq >> (8 * i));
}

/* The session's AEAD, once (t->seal_cipher, t->seal_md): 0, or -1 if
 * wisp does not seal or open with it. */
static int aead_pick(struct glue_tls *t)
{
	const SSL_CIPHER *c = SSL_get_current_cipher(t->ssl);
	const char *name;

	if (t->seal_cipher)
		return 0;
	switch (c ? SSL_CIPHER_get_id(c) : 0) {
	case TLS1_3_CK_AES_128_GCM_SHA256:
		name = "AES-128-GCM";
		t->seal_md = EVP_sha256();
		break;
	case TLS1_3_CK_AES_256_GCM_SHA384:
		name = "AES-256-GCM";
		t->seal_md = EVP_sha384();
		break;
	default:
		return -1;
	}
	t->seal_cipher = EVP_CIPHER_fetch(NULL, name, NULL);
	if (!t->seal_cipher) {
		ERR_clear_error();
		return -1;
	}
	return 0;
}

/* Both sides taken over (lock held): OpenSSL's record buffers (a 65 KiB
 * read-ahead buffer among them) serve nothing any more; wisp's own take
 * their place. OpenSSL before 3.0.14 could touch freed buffers after
 * SSL_free_buffers (CVE-2024-4741): kept there. */
static void os_buffers_drop(struct glue_tls *t)
{
	if (t->seal && t->open && OpenSSL_version_num() >= 0x300000e0L &&
	    !SSL_free_buffers(t->ssl))
		ERR_clear_error();
}

/* Take the sending side over from OpenSSL: 0, or -1 to leave it there. */
static int seal_setup(struct glue_tls *t)
{
	if (!SSL_is_init_finished(t->ssl) || t->os_rekeyed || t->os_wpend ||
	    t->closed || t->pend || aead_pick(t) ||
	    t->tx_secret_len != (size_t)EVP_MD_get_size(t->seal_md))
		return -1;
	t->seal_ctx = EVP_CIPHER_CTX_new();
	if (!t->seal_ctx || seal_keys(t)) {
		ERR_clear_error();
		return -1;
	}
	t->seal_seq = t->os_wseq;
	/* A KeyUpdate that OpenSSL answered already is not owed again. */
	t->ku_owed = false;
	return 0;
}

/* Seal one record of inner type ct into t->wbuf (empty). */
static int seal_record(struct glue_tls *t, uint8_t ct, const void *data,
		       size_t len)
{
	size_t clen = len + 1 + REC_TAG;
	uint8_t *h = t->wbuf, nonce[REC_IV];
	int out = 0, fin = 0;

	if (len > GLUE_TLS_RECORD)
		return -EINVAL;
	/* RFC 8446 5.1, 5.2: opaque_type application_data, legacy
	 * version 0x0303, the length of what follows. */
	h[0] = REC_CT_APPDATA;
	h[1] = 3;
	h[2] = 3;
	h[3] = (uint8_t)(clen >> 8);
	h[4] = (uint8_t)clen;
	rec_nonce(nonce, t->seal_iv, t->seal_seq);
	if (EVP_EncryptInit_ex(t->seal_ctx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_EncryptUpdate(t->seal_ctx, NULL, &out, h, REC_HDR) != 1 ||
	    (len && (EVP_EncryptUpdate(t->seal_ctx, h + REC_HDR, &out, data,
				       (int)len) != 1 || (size_t)out != len)) ||
	    EVP_EncryptUpdate(t->seal_ctx, h + REC_HDR + len, &out, &ct, 1) !=
	    1 || out != 1 ||
	    EVP_EncryptFinal_ex(t->seal_ctx, h + REC_HDR + len + 1, &fin) !=
	    1 || fin != 0 ||
	    EVP_CIPHER_CTX_ctrl(t->seal_ctx, EVP_CTRL_AEAD_GET_TAG, REC_TAG,
				h + REC_HDR + len + 1) != 1) {
		ERR_clear_error();
		t->fail = GLUE_TLS_F_PROTOCOL;
		return -EPROTO;
	}
	t->seal_seq++;
	t->wbuf_off = 0;
	t->wbuf_len = REC_HDR + clen;
	return 0;
}

/* Send what t->wbuf holds: 0 once it is all out, -EAGAIN, or -errno. */
static int seal_flush(struct glue_tls *t)
{
	while (t->wbuf_off < t->wbuf_len) {
		ssize_t n = send(t->fd, t->wbuf + t->wbuf_off,
				 t->wbuf_len - t->wbuf_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			t->events = POLLOUT;
			return -EAGAIN;
		}
		if (n < 0) {
			int err = errno;

			if (t->fail == GLUE_TLS_OK)
				t->fail = GLUE_TLS_F_TRUNCATED;
			return err == EPIPE ? -ECONNRESET : -err;
		}
		t->wbuf_off += (size_t)n;
	}
	return 0;
}

/* RFC 8446 4.6.3: KeyUpdate, update_not_requested, sealed with the
 * current key; then the next traffic secret and its keys (7.2). */
static int seal_key_update(struct glue_tls *t)
{
	static const uint8_t ku[] = { SSL3_MT_KEY_UPDATE, 0, 0, 1,
				      SSL_KEY_UPDATE_NOT_REQUESTED };
	int r = seal_record(t, REC_CT_HANDSHAKE, ku, sizeof(ku));

	if (r)
		return r;
	if (next_secret(t, t->tx_secret, t->tx_secret_len) || seal_keys(t))
		goto err;
	t->seal_seq = 0;
	t->ku_owed = false;
	t->since_update = 0;
	t->updates_sent++;
	return 0;
err:
	ERR_clear_error();
	t->fail = GLUE_TLS_F_PROTOCOL;
	return -EPROTO;
}

/*
 * glue_tls_tx when wisp seals (lock held), with the same contract: a
 * record that met a full socket is not taken, and the next call passes
 * its octets again; they are skipped then (the record is sealed, its
 * sequence number spent) while the rest of it goes out.
 */
static long seal_tx(struct glue_tls *t, const struct iovec *iov, int n)
{
	struct tx_cur cur = { .iov = iov, .n = n };
	uint64_t limit = t->ctx->cfg.key_update_bytes;
	long taken = 0;
	int r;

	/* After close_notify, or the alert of a failed stream: nothing. */
	if (t->closed)
		return t->rx_err ? t->rx_err : -EPIPE;
	if (t->wbuf_off < t->wbuf_len) {
		size_t len = 0;

		/* The caller's octets of a record half sent: skip them. */
		if (t->pend && !cur_take(t, &cur, t->pend, &len))
			return -EINVAL;
		r = seal_flush(t);
		if (r)
			return r;
		taken = (long)t->pend;
		t->pend = 0;
	}
	for (int rec = 0; rec < GLUE_TLS_TX_RECORDS; rec++) {
		size_t len = 0;
		const void *p;

		/* RFC 8446 4.6.3: after key_update_bytes (the peer rotates
		 * its own keys by its own count), or when the peer asked;
		 * ahead of the next record. */
		if (t->ku_owed || (limit && t->since_update >= limit)) {
			r = seal_key_update(t);
			if (!r)
				r = seal_flush(t);
			if (r)
				return taken ? taken : r;
		}
		p = cur_take(t, &cur, 0, &len);
		if (!p)
			break;
		r = seal_record(t, REC_CT_APPDATA, p, len);
		if (r)
			return taken ? taken : r;
		t->since_update += len;
		r = seal_flush(t);
		if (r == -EAGAIN) {
			t->pend = len;
			return taken ? taken : r;
		}
		if (r)
			return taken ? taken : r;
		taken += (long)len;
	}
	return taken;
}

/* ------------------------------------------------------------------ */
/* Opening                                                            */
/* ------------------------------------------------------------------ */

/*
 * The receiving side, taken over from OpenSSL the same way (docs/tls.md
 * "Sealing"): at a glue_tls_readv that finds OpenSSL holding nothing (no
 * record, not even part of one), with the peer's traffic secret
 * (keylog_cb) and the number of records OpenSSL opened (msg_cb). Each
 * record is checked as RFC 8446 5 asks: type application_data, version
 * 0x0303, a length within 2^14 + 256, the AEAD tag over the header
 * before a plaintext octet is used, the inner content type. Application
 * data is read out; close_notify ends the stream; any other alert, a
 * record that does not authenticate or a stream that ends without
 * close_notify fails it, for good; a KeyUpdate moves to the peer's next
 * key (and, if it asks, ours follows it).
 */

/* The stream failed (lock held): why, for good; best effort, the alert
 * the peer is owed (RFC 8446 6.2), when wisp seals. */
static long open_fail(struct glue_tls *t, enum glue_tls_fail why, int err,
		      uint8_t alert)
{
	const uint8_t msg[] = { 2, alert };     /* fatal */

	if (t->fail == GLUE_TLS_OK)
		t->fail = why;
	t->rx_err = err;
	if (alert && t->seal && !t->closed && t->wbuf_off >= t->wbuf_len &&
	    !seal_record(t, REC_CT_ALERT, msg, sizeof(msg))) {
		t->closed = true;
		seal_flush(t);
	}
	return err;
}

static int open_setup(struct glue_tls *t)
{
	if (!SSL_is_init_finished(t->ssl) || t->os_rkeyupd ||
	    SSL_has_pending(t->ssl) || t->fail != GLUE_TLS_OK ||
	    aead_pick(t) ||
	    t->rx_secret_len != (size_t)EVP_MD_get_size(t->seal_md))
		return -1;
	t->rbuf = malloc(GLUE_TLS_READ_BUF);
	t->open_ctx = EVP_CIPHER_CTX_new();
	if (!t->rbuf || !t->open_ctx ||
	    aead_keys(t, t->open_ctx, t->rx_secret, t->rx_secret_len,
		      t->open_iv, false)) {
		ERR_clear_error();
		free(t->rbuf);
		t->rbuf = NULL;
		return -1;
	}
	t->open_seq = t->os_rseq;
	return 0;
}

/* A handshake message after the handshake (RFC 8446 4.6): KeyUpdate
 * only, alone in its record (5.1: it must end a record). */
static long open_handshake(struct glue_tls *t, const uint8_t *m, size_t len)
{
	if (len != 5 || m[0] != SSL3_MT_KEY_UPDATE || m[1] || m[2] ||
	    m[3] != 1 || m[4] > SSL_KEY_UPDATE_REQUESTED)
		return open_fail(t, GLUE_TLS_F_BAD_RECORD, -EBADMSG,
				 SSL_AD_UNEXPECTED_MESSAGE);
	if (next_secret(t, t->rx_secret, t->rx_secret_len) ||
	    aead_keys(t, t->open_ctx, t->rx_secret, t->rx_secret_len,
		      t->open_iv, false)) {
		ERR_clear_error();
		return open_fail(t, GLUE_TLS_F_PROTOCOL, -EPROTO,
				 SSL_AD_INTERNAL_ERROR);
	}
	t->open_seq = 0;
	/* 4.6.3: update_requested asks for ours before our next record. */
	if (m[4] == SSL_KEY_UPDATE_REQUESTED) {
		if (t->seal)
			t->ku_owed = true;
		else
			SSL_key_update(t->ssl, SSL_KEY_UPDATE_NOT_REQUESTED);
	}
	return 0;
}

/* Open the record at rb_head, whole in rbuf (rlen octets after its
 * header): 0 with its plaintext at pt_off..pt_end, or a failure. */
static long open_record(struct glue_tls *t, size_t rlen)
{
	uint8_t *h = t->rbuf + t->rb_head, *p = h + REC_HDR, nonce[REC_IV];
	size_t clen = rlen - REC_TAG, n;
	int out = 0;

	rec_nonce(nonce, t->open_iv, t->open_seq);
	if (EVP_DecryptInit_ex(t->open_ctx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_CIPHER_CTX_ctrl(t->open_ctx, EVP_CTRL_AEAD_SET_TAG, REC_TAG,
				p + clen) != 1 ||
	    EVP_DecryptUpdate(t->open_ctx, NULL, &out, h, REC_HDR) != 1 ||
	    EVP_DecryptUpdate(t->open_ctx, p, &out, p, (int)clen) != 1 ||
	    (size_t)out != clen ||
	    EVP_DecryptFinal_ex(t->open_ctx, p + clen, &out) != 1) {
		/* 5.2: bad_record_mac; nothing of it is read out. */
		ERR_clear_error();
		OPENSSL_cleanse(p, clen);
		return open_fail(t, GLUE_TLS_F_BAD_RECORD, -EBADMSG,
				 SSL_AD_BAD_RECORD_MAC);
	}
	t->open_seq++;
	t->rb_head += REC_HDR + rlen;
	/* 5.4: TLSInnerPlaintext (content, type, padding) "MUST NOT
	 * exceed 2^14 + 1 octets". */
	if (clen > GLUE_TLS_RECORD + 1)
		return open_fail(t, GLUE_TLS_F_BAD_RECORD, -EBADMSG,
				 SSL_AD_RECORD_OVERFLOW);
	/* 5.4: the inner content type is the last non-zero octet. */
	for (n = clen; n && !p[n - 1]; n--)
		;
	if (!n)
		return open_fail(t, GLUE_TLS_F_BAD_RECORD, -EBADMSG,
				 SSL_AD_UNEXPECTED_MESSAGE);
	n--;
	switch (p[n]) {
	case REC_CT_APPDATA:
		t->pt_off = (size_t)(p - t->rbuf);
		t->pt_end = t->pt_off + n;
		return 0;
	case REC_CT_ALERT:
		/* 6: close_notify ends the stream; user_canceled is a
		 * warning; every other alert is fatal. */
		if (n != 2)
			return open_fail(t, GLUE_TLS_F_BAD_RECORD, -EBADMSG,
					 SSL_AD_DECODE_ERROR);
		if (p[1] == SSL_AD_CLOSE_NOTIFY) {
			t->rx_eof = true;
			return 0;
		}
		if (p[1] == SSL_AD_USER_CANCELLED)
			return 0;
		return open_fail(t, GLUE_TLS_F_ALERT, -EBADMSG, 0);
	case REC_CT_HANDSHAKE:
		return open_handshake(t, p, n);
	default:
		return open_fail(t, GLUE_TLS_F_BAD_RECORD, -EBADMSG,
				 SSL_AD_UNEXPECTED_MESSAGE);
	}
}

/* glue_tls_read when wisp opens (lock held): as SSL_read, one record's
 * plaintext at most. */
static long open_read(struct glue_tls *t, void *buf, size_t len)
{
	for (;;) {
		size_t have = t->rb_tail - t->rb_head;
		ssize_t n;

		if (t->pt_off < t->pt_end) {
			n = (ssize_t)(t->pt_end - t->pt_off);
			if ((size_t)n > len)
				n = (ssize_t)len;
			memcpy(buf, t->rbuf + t->pt_off, (size_t)n);
			t->pt_off += (size_t)n;
			return (long)n;
		}
		if (t->rx_err)
			return t->rx_err;
		if (t->rx_eof)
			return 0;
		if (have >= REC_HDR) {
			const uint8_t *h = t->rbuf + t->rb_head;
			size_t rlen = (size_t)h[3] << 8 | h[4];

			/* 5.1, 5.2: after the handshake every record is
			 * application_data, 0x0303, at most 2^14 + 256. */
			if (h[0] != REC_CT_APPDATA || h[1] != 3 || h[2] != 3)
				return open_fail(t, GLUE_TLS_F_BAD_RECORD,
						 -EBADMSG,
						 SSL_AD_UNEXPECTED_MESSAGE);
			if (rlen > GLUE_TLS_RECORD + 256)
				return open_fail(t, GLUE_TLS_F_BAD_RECORD,
						 -EBADMSG,
						 SSL_AD_RECORD_OVERFLOW);
			/* Shorter than a tag and a content type: a length
			 * out of range (6.2, decode_error). */
			if (rlen < REC_TAG + 1)
				return open_fail(t, GLUE_TLS_F_BAD_RECORD,
						 -EBADMSG, SSL_AD_DECODE_ERROR);
			if (have >= REC_HDR + rlen) {
				long r = open_record(t, rlen);
				if (r)
					return r;
				continue;
			}
		}
		/* More octets: room for a whole record after what is
		 * left (moved to the front when there is not), then recv. */
		if (t->rb_head == t->rb_tail) {
			t->rb_head = t->rb_tail = 0;
		} else if (GLUE_TLS_READ_BUF - t->rb_tail <
			   REC_HDR + GLUE_TLS_RECORD + 256) {
			memmove(t->rbuf, t->rbuf + t->rb_head, have);
			t->rb_head = 0;
			t->rb_tail = have;
		}
		do
			n = recv(t->fd, t->rbuf + t->rb_tail,
				 GLUE_TLS_READ_BUF - t->rb_tail, MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n > 0) {
			t->rb_tail += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			t->events = POLLIN;
			return -EAGAIN;
		}
		/* 6.1: the end of the stream without close_notify (or a
		 * reset) is a truncation. */
		return open_fail(t, GLUE_TLS_F_TRUNCATED,
				 n < 0 && errno != EPIPE ? -errno :
				 -ECONNRESET, 0);
	}
}

/* glue_tls.h: a session that seals and opens from the start, with
 * given secrets and sequence numbers, no OpenSSL session (fuzz target). */
struct glue_tls *glue_tls_new_keyed(int fd, bool aes256,
				    const uint8_t *tx_secret, uint64_t tx_seq,
				    const uint8_t *rx_secret, uint64_t rx_seq)
{
	/* No KeyUpdate by count. */
	static struct glue_tls_ctx keyed_ctx;
	struct glue_tls *t = calloc(1, sizeof(*t));
	size_t slen;

	if (!t)
		goto err;
	t->ctx = &keyed_ctx;
	t->fd = fd;
	pthread_mutex_init(&t->lock, NULL);
	t->events = POLLIN;
	t->seal_md = aes256 ? EVP_sha384() : EVP_sha256();
	t->seal_cipher = EVP_CIPHER_fetch(NULL, aes256 ? "AES-256-GCM" :
					  "AES-128-GCM", NULL);
	slen = (size_t)EVP_MD_get_size(t->seal_md);
	memcpy(t->tx_secret, tx_secret, slen);
	memcpy(t->rx_secret, rx_secret, slen);
	t->tx_secret_len = t->rx_secret_len = slen;
	t->seal_ctx = EVP_CIPHER_CTX_new();
	t->open_ctx = EVP_CIPHER_CTX_new();
	t->rbuf = malloc(GLUE_TLS_READ_BUF);
	if (!t->seal_cipher || !t->seal_ctx || !t->open_ctx || !t->rbuf ||
	    seal_keys(t) ||
	    aead_keys(t, t->open_ctx, t->rx_secret, t->rx_secret_len,
		      t->open_iv, false)) {
		ERR_clear_error();
		glue_tls_free(t);
		goto err;
	}
	t->seal = t->seal_tried = true;
	t->open = t->open_tried = true;
	t->seal_seq = tx_seq;
	t->open_seq = rx_seq;
	return t;
err:
	errno = ENOMEM;
	return NULL;
}

long glue_tls_tx(struct glue_tls *t, const struct iovec *iov, int n)
{
	struct tx_cur cur = { .iov = iov, .n = n };
	uint64_t limit = t->ctx->cfg.key_update_bytes;
	long taken = 0, ret;

	pthread_mutex_lock(&t->lock);
	if (!t->seal && !t->seal_tried) {
		t->seal_tried = true;
		t->seal = !seal_setup(t);
		os_buffers_drop(t);
	}
	if (t->seal) {
		ret = seal_tx(t, iov, n);
		pthread_mutex_unlock(&t->lock);
		return ret;
	}
	for (int rec = 0; rec < GLUE_TLS_TX_RECORDS; rec++) {
		size_t len = 0, w = 0;
		const void *p = cur_take(t, &cur, t->pend, &len);
		int r;

		if (!p) {
			/* A record to retry needs the octets it was made
			 * of: the caller passes them again (glue_tls.h). */
			ret = t->pend && !taken ? -EINVAL : taken;
			goto out;
		}
		err_fresh();
		r = SSL_write_ex(t->ssl, p, len, &w);
		if (r != 1) {
			ret = ssl_fail(t, r, false);
			if (ret == -EAGAIN) {
				/* OpenSSL holds the record, partly sent: the
				 * next call passes the same octets again. */
				t->pend = len;
				if (taken)
					ret = taken;
			} else if (!ret) {
				ret = -ECONNRESET;
			}
			goto out;
		}
		t->pend = 0;
		taken += (long)len;
	}
	ret = taken;
out:
	/* RFC 8446 4.6.3: KeyUpdate after key_update_bytes,
	 * update_not_requested (the peer rotates its own keys by its own
	 * count); sent ahead of the next record. Not while a record waits
	 * for its retry (OpenSSL refuses then): at the next call. */
	if (taken > 0 && limit) {
		t->since_update += (uint64_t)taken;
		if (t->since_update >= limit && !t->pend &&
		    SSL_key_update(t->ssl, SSL_KEY_UPDATE_NOT_REQUESTED) == 1) {
			t->updates_sent++;
			t->since_update = 0;
		}
		err_fresh();
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

bool glue_tls_sealing(const struct glue_tls *t)
{
	return t->seal;
}

bool glue_tls_opening(const struct glue_tls *t)
{
	return t->open;
}

bool glue_tls_tx_pending(struct glue_tls *t)
{
	bool pending;

	pthread_mutex_lock(&t->lock);
	pending = t->pend > 0 || t->wbuf_off < t->wbuf_len;
	pthread_mutex_unlock(&t->lock);
	return pending;
}

void glue_tls_close_notify(struct glue_tls *t)
{
	/* RFC 8446 6.1: close_notify, level warning. */
	static const uint8_t alert[] = { 1, 0 };

	pthread_mutex_lock(&t->lock);
	if (t->closed || t->pend) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	t->closed = true;
	if (t->seal) {
		/* Best effort, after a record still half sent. */
		if (!seal_flush(t) &&
		    !seal_record(t, REC_CT_ALERT, alert, sizeof(alert)))
			seal_flush(t);
	} else {
		ERR_clear_error();
		SSL_shutdown(t->ssl);
		ERR_clear_error();
	}
	pthread_mutex_unlock(&t->lock);
}

const char *glue_tls_describe(const struct glue_tls *t, char *buf,
			      size_t len)
{
	const SSL_CIPHER *c = SSL_get_current_cipher(t->ssl);

	snprintf(buf, len, "%s %s, %s", SSL_get_version(t->ssl),
		 c ? SSL_CIPHER_get_name(c) : "?",
		 t->ctx->cfg.psk_file ? "PSK with ECDHE" : "X.509");
	return buf;
}

void glue_tls_key_updates(const struct glue_tls *t, unsigned *sent,
			  unsigned *received)
{
	*sent = t->updates_sent;
	/* OpenSSL does not count them; the receive side is observed by
	 * the peer's count in the tests. */
	*received = 0;
}

void glue_tls_thread_done(void)
{
	OPENSSL_thread_stop();
}

/* ------------------------------------------------------------------ */
/* The fd registry                                                    */
/* ------------------------------------------------------------------ */

struct reg {
	struct reg *next;
	int fd;
	dev_t dev;
	ino_t ino;
	struct glue_tls *t;
};

/*
 * One registry per process. tcp-glue is a static library linked into
 * both libibverbs.so.1 and librdmacm.so.1 (and into tests), so each has
 * its own copy of this file; the connection manager attaches a session
 * in its copy and the engine of libibverbs.so.1 takes it in the other.
 * libibverbs.so.1 exports its registry as wisp_glue_tls_registry
 * (WISP_PRIVATE_1); every copy uses that one when it is there (dlsym),
 * its own otherwise. Sessions made by one copy may be used and freed by
 * another: the code and the struct layout are the same build's.
 */
struct glue_tls_registry {
	pthread_mutex_t lock;
	struct reg *list;
	/* Set at the first attach: until then no lookup takes the lock,
	 * so the plaintext path pays one load. */
	_Atomic bool used;
};

extern struct glue_tls_registry wisp_glue_tls_registry;
struct glue_tls_registry wisp_glue_tls_registry = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

static struct glue_tls_registry *reg_shared;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void reg_init(void)
{
	reg_shared = dlsym(RTLD_DEFAULT, "wisp_glue_tls_registry");
	if (!reg_shared)
		reg_shared = &wisp_glue_tls_registry;
}

static struct glue_tls_registry *registry(void)
{
	pthread_once(&reg_once, reg_init);
	return reg_shared;
}

static bool same_socket(const struct reg *r)
{
	struct stat st;

	return !fstat(r->fd, &st) && st.st_dev == r->dev && st.st_ino == r->ino;
}

/* The entry for fd (the registry's lock held); a stale one (the fd was
 * closed and its number reused) is freed on the way. */
static struct reg **reg_find(struct glue_tls_registry *g, int fd)
{
	struct reg **pp;

	for (pp = &g->list; *pp; pp = &(*pp)->next) {
		struct reg *r = *pp;

		if (r->fd != fd)
			continue;
		if (same_socket(r))
			return pp;
		*pp = r->next;
		glue_tls_free(r->t);
		free(r);
		return NULL;
	}
	return NULL;
}

int glue_tls_attach(int fd, struct glue_tls *t)
{
	struct reg *r = calloc(1, sizeof(*r));
	struct glue_tls_registry *g;
	struct stat st;

	if (!r)
		return -ENOMEM;
	if (fstat(fd, &st)) {
		free(r);
		return -errno;
	}
	r->fd = fd;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->t = t;
	g = registry();
	pthread_mutex_lock(&g->lock);
	atomic_store(&g->used, true);
	reg_find(g, fd);           /* frees a stale entry */
	r->next = g->list;
	g->list = r;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

struct glue_tls *glue_tls_of(int fd)
{
	struct glue_tls_registry *g = registry();
	struct glue_tls *t = NULL;
	struct reg **pp;

	if (!atomic_load(&g->used))
		return NULL;      /* no TLS in this process: no lock */
	pthread_mutex_lock(&g->lock);
	pp = reg_find(g, fd);
	if (pp)
		t = (*pp)->t;
	pthread_mutex_unlock(&g->lock);
	return t;
}

struct glue_tls *glue_tls_take(int fd)
{
	struct glue_tls_registry *g = registry();
	struct glue_tls *t = NULL;
	struct reg **pp;

	if (!atomic_load(&g->used))
		return NULL;
	pthread_mutex_lock(&g->lock);
	pp = reg_find(g, fd);
	if (pp) {
		struct reg *r = *pp;

		*pp = r->next;
		t = r->t;
		free(r);
	}
	pthread_mutex_unlock(&g->lock);
	return t;
}

void glue_tls_drop(int fd)
{
	glue_tls_free(glue_tls_take(fd));
}
