/* SPDX-License-Identifier: MIT */
/*
 * glue_tls.h - TLS 1.3 (OpenSSL) as a byte-stream stage of tcp-glue
 * (docs/tls.md). The session starts at the first octet of the TCP
 * connection: TCP -> TLS 1.3 -> MPA (Request/Reply, FPDUs unchanged).
 *
 * A session belongs to a socket: once its handshake is done it is
 * attached to the fd (glue_tls_attach), and from then on glue_mpa.h's
 * frame I/O on that fd and the engine (glue_conn_add takes the session
 * over) read and write through it. The layers above keep passing the fd
 * and never see TLS.
 *
 * OpenSSL moves records through a BIO of tcp-glue's own that calls
 * recv / send with MSG_DONTWAIT (and MSG_NOSIGNAL): no call on a session
 * ever blocks, whatever the socket's flags, so the engine thread never
 * waits in OpenSSL. From the first glue_tls_tx / glue_tls_readv on
 * (AES-GCM), tcp-glue seals and opens the records itself with the keys
 * OpenSSL negotiated (glue_tls_sealing, glue_tls_opening), with the same
 * non-blocking calls.
 *
 * Functions return 0 (or a length) or a negative errno; -EAGAIN means
 * "wait for glue_tls_events() on the fd, then call again".
 */
#ifndef WISP_GLUE_TLS_H
#define WISP_GLUE_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* WISP_TLS: off | optional (listener only: TLS and plaintext) |
 * required. */
enum glue_tls_mode {
	GLUE_TLS_OFF,
	GLUE_TLS_OPTIONAL,
	GLUE_TLS_REQUIRED,
};

/* What a side is configured with (docs/configuration.md). Strings are
 * file names or names, NULL when unset; they must outlive the contexts
 * built from them (the environment's do). */
struct glue_tls_config {
	enum glue_tls_mode mode;
	const char *psk_file;        /* set: PSK mode (psk_dhe_ke only) */
	const char *psk_identity;
	const char *cert, *key;      /* X.509 mode: own certificate + key */
	const char *ca;              /* trust anchors (PEM); NULL: system */
	const char *verify_name;     /* initiator: expected name or address
				      * of the peer; NULL: the address
				      * connected to */
	bool mutual;                 /* listener asks for and verifies a
				      * client certificate */
	uint64_t key_update_bytes;   /* KeyUpdate after this many octets
				      * sent; 0: never */
};

/* Why a handshake or a session failed; each has a log string
 * (glue_tls_fail_str) and the status rdma_cm reports
 * (glue_tls_fail_errno). */
enum glue_tls_fail {
	GLUE_TLS_OK,
	GLUE_TLS_F_CONFIG,           /* bad file, key or setting here */
	GLUE_TLS_F_PSK,              /* wrong PSK or unknown identity */
	GLUE_TLS_F_UNTRUSTED,        /* certificate chain not trusted */
	GLUE_TLS_F_EXPIRED,          /* certificate expired / not yet valid */
	GLUE_TLS_F_NAME,             /* name or address mismatch */
	GLUE_TLS_F_NO_CERT,          /* peer sent no certificate (mutual) */
	GLUE_TLS_F_ALPN,             /* not "iwarp" */
	GLUE_TLS_F_PLAINTEXT,        /* peer closed at the ClientHello: a
				      * plaintext-only listener */
	GLUE_TLS_F_PROTOCOL,         /* any other handshake failure */
	GLUE_TLS_F_BAD_RECORD,       /* record failed authentication */
	GLUE_TLS_F_TRUNCATED,        /* TCP closed without close_notify */
	GLUE_TLS_F_ALERT,            /* the peer sent a fatal alert */
	GLUE_TLS_F_TIMEOUT,          /* handshake deadline passed */
	GLUE_TLS_F_PEER_UNTRUSTED,   /* the peer's alert: it does not trust
				      * our certificate */
	GLUE_TLS_F_PEER_EXPIRED,     /* the peer's alert: it finds our
				      * certificate expired */
	GLUE_TLS_F__COUNT
};

const char *glue_tls_fail_str(enum glue_tls_fail f);
/* A negative errno, distinct per failure class. */
int glue_tls_fail_errno(enum glue_tls_fail f);

/* The ALPN protocol name wisp offers and requires. */
#define GLUE_TLS_ALPN "iwarp"

/* Bulk plaintext goes out in records of this size (the TLS maximum). */
#define GLUE_TLS_RECORD 16384

struct glue_tls_ctx;
struct glue_tls;

/*
 * A context for one side and configuration, cached for the process (the
 * same cfg contents give the same context). Returns NULL with *why
 * naming the problem (a file that does not load, a PSK file that is not
 * 32..64 octets of hex, a listener without certificate nor PSK).
 */
struct glue_tls_ctx *glue_tls_ctx_get(const struct glue_tls_config *cfg,
				      bool server, char *why, size_t whylen);

/*
 * A session on the connected socket fd (not attached yet). peer_addr:
 * the numeric address connected to, for the initiator's default name
 * check. NULL with errno set (ENOMEM).
 */
struct glue_tls *glue_tls_new(struct glue_tls_ctx *ctx, int fd,
			      const char *peer_addr);

void glue_tls_free(struct glue_tls *t);

/* One non-blocking handshake step: 0 done (ALPN checked), -EAGAIN, or
 * -EPROTO / -ECONNRESET with glue_tls_failure() set. */
int glue_tls_handshake_step(struct glue_tls *t);

/* The handshake within timeout_ms (-1: none); -ETIMEDOUT if it passes. */
int glue_tls_handshake(struct glue_tls *t, int timeout_ms);

/* POLLIN or POLLOUT: what the last -EAGAIN waits for. */
short glue_tls_events(const struct glue_tls *t);

/* Why t failed (GLUE_TLS_OK while it has not). */
enum glue_tls_fail glue_tls_failure(const struct glue_tls *t);

/* Read up to len plaintext octets: n > 0, 0 at the peer's close_notify,
 * -EAGAIN, or -EBADMSG (bad record, alert) / -ECONNRESET (truncated). */
long glue_tls_read(struct glue_tls *t, void *buf, size_t len);

/* Read into iov[0..n) in order until it is full, nothing more is
 * there, or a read came back short with nothing left inside OpenSSL
 * (no read that would only find the socket empty); returns as
 * glue_tls_read (n > 0 if anything arrived). Drains what OpenSSL holds
 * decrypted before touching the socket. */
long glue_tls_readv(struct glue_tls *t, const struct iovec *iov, int n);

/*
 * True if a read now would certainly find nothing: OpenSSL holds no
 * octet of a record and the socket has none (a MSG_PEEK, without the
 * session's lock). A thread that polls for completions asks this first,
 * so that its empty reads never hold the lock the engine's SSL_write
 * needs. False is only "maybe": an error or the end of the stream also
 * answers false, for glue_tls_read to report.
 */
bool glue_tls_rx_idle(struct glue_tls *t);

/* OpenSSL held octets of a record after the last glue_tls_read (read
 * ahead, or plaintext not taken yet): the next read finds them without
 * the socket. */
bool glue_tls_rx_buffered(const struct glue_tls *t);

/* Write len octets as records: n > 0 taken, or -EAGAIN / -errno. A call
 * after -EAGAIN must pass the same octets again (OpenSSL's retry rule). */
long glue_tls_write(struct glue_tls *t, const void *buf, size_t len);

/* glue_tls_tx makes at most this many records per call. */
#define GLUE_TLS_TX_RECORDS 4

/*
 * The engine's transmit step: iov[0..n) as up to GLUE_TLS_TX_RECORDS
 * records of GLUE_TLS_RECORD octets (the last one shorter if the iovecs
 * end), each sent as it is made. A record whose octets lie in one iovec
 * is encrypted from there; one that straddles iovecs (an FPDU header and
 * its payload, small FPDUs) is gathered into the session's buffer first.
 * Returns the plaintext octets now handed to TLS (> 0), -EAGAIN (wait
 * for POLLOUT; nothing taken), or -errno. After a record met a full
 * socket, OpenSSL holds it and the next call must pass the same octets
 * again from the first one not taken (as after a partial sendmsg); a
 * call that passes fewer gets -EINVAL. Counts octets for KeyUpdate.
 */
long glue_tls_tx(struct glue_tls *t, const struct iovec *iov, int n);

/* True if a record made by glue_tls_tx (or a KeyUpdate, an alert of
 * wisp's) waits to be sent. */
bool glue_tls_tx_pending(struct glue_tls *t);

/* True once wisp seals the records this session sends itself (from the
 * first glue_tls_tx on, AES-GCM; docs/tls.md "Sealing"); false while
 * OpenSSL does. For tests and logs; call from the sending side. */
bool glue_tls_sealing(const struct glue_tls *t);

/* True once wisp opens the records this session receives itself (from
 * the first glue_tls_readv that finds OpenSSL holding none, AES-GCM);
 * false while OpenSSL does. For tests; call from the receiving side. */
bool glue_tls_opening(const struct glue_tls *t);

/* Send close_notify (best effort, non-blocking). */
void glue_tls_close_notify(struct glue_tls *t);

/* "TLS 1.3 TLS_AES_128_GCM_SHA256, PSK" or "..., X.509": for logs. */
const char *glue_tls_describe(const struct glue_tls *t, char *buf,
			      size_t len);

/* KeyUpdates sent and received so far (tests). */
void glue_tls_key_updates(const struct glue_tls *t, unsigned *sent,
			  unsigned *received);

/* A thread that used sessions is about to end: free OpenSSL's state of
 * this thread now (OPENSSL_thread_stop) rather than in a thread-exit
 * destructor that may run after the process has reported leaks. */
void glue_tls_thread_done(void);

/*
 * A session on fd that seals and opens from the start (no OpenSSL
 * session, no handshake): AES-128-GCM with SHA-256 secrets, or with aes256
 * AES-256-GCM with SHA-384 ones; tx_secret / rx_secret are this side's and
 * the peer's application traffic secrets (32 or 48 octets), the sequence
 * numbers those of the next record each way. No KeyUpdate by count. For
 * the fuzz target of the record opener (tests/fuzz/fuzz_tls_open.c); NULL
 * with errno set.
 */
struct glue_tls *glue_tls_new_keyed(int fd, bool aes256,
				    const uint8_t *tx_secret, uint64_t tx_seq,
				    const uint8_t *rx_secret, uint64_t rx_seq);

/* ---- the fd registry ------------------------------------------------ */

/* Attach t to its socket fd: glue_mpa.h and glue_conn_add use it. 0 or
 * -ENOMEM. A session left on a socket that was closed is freed when its
 * fd number is attached or looked up again (the socket's inode no longer
 * matches). */
int glue_tls_attach(int fd, struct glue_tls *t);

/* The session attached to fd, or NULL. */
struct glue_tls *glue_tls_of(int fd);

/* Detach and return the session of fd (the caller owns it), or NULL. */
struct glue_tls *glue_tls_take(int fd);

/* Detach and free the session of fd, if any (before close(fd)). */
void glue_tls_drop(int fd);

#endif /* WISP_GLUE_TLS_H */
