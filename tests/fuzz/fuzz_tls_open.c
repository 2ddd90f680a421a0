/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the TLS 1.3 record opener (tcp-glue/glue_tls.c,
 * "Opening"), through glue_tls_read on a session made by
 * glue_tls_new_keyed with fixed traffic secrets, fed over a socket pair.
 *
 * Input: octet 0 is the configuration: bit 0 AES-256-GCM / SHA-384 (else
 * AES-128-GCM / SHA-256), bits 1-7 a seed for the chunking and the read
 * sizes; octet 1 the sequence number of the first record. The rest is a
 * script of operations that build the stream ("the wire"), each an
 * operation octet (taken modulo 6) and its operands (missing operand
 * octets are 0):
 *   0 SEAL     type, pad (2 octets), len (2 octets), then len octets of
 *              data (fewer if the input ends): one record whose inner
 *              plaintext is data, type, pad zero octets, sealed by this
 *              file's own sealer (OpenSSL's TLS13-KDF and AES-GCM, written
 *              apart from glue_tls.c) with the current key and sequence
 *              number. Reaches every check after authentication: inner
 *              content type, padding, alerts, KeyUpdate, record_overflow.
 *   1 APPDATA  len (2 octets, modulo 2^14 + 1), fill: len octets fill,
 *              fill + 1, ... as application data, sealed both by wisp's
 *              sealer (glue_tls_tx on a keyed session) and by this file's;
 *              the two records must be equal.
 *   2 KEYUPD   request: a KeyUpdate record (request taken modulo 3, so
 *              that 2 is an invalid value).
 *   3 FLIP     offset (2 octets), mask: the wire's octet at offset modulo
 *              its length is XORed with mask.
 *   4 CUT      length (2 octets): the wire is cut to length modulo its
 *              length + 1.
 *   5 RAW      len, then len octets appended as they are.
 * A model of RFC 8446 5 (written here) says what each authentic record
 * must do: deliver its data, end the stream (close_notify), change the
 * key (a valid KeyUpdate, which this file's sealer follows), or fail it.
 *
 * The wire is then written into the socket in chunks of pseudo-random
 * size, each followed by reads of pseudo-random size (each into a heap
 * buffer of exactly that size) until -EAGAIN; at the end the writing side
 * is shut down. Checks: no crash, UB or leak (ASan, UBSan); every octet
 * read out is the next octet of the model's plaintext, and none comes
 * from the first record the wire's changes touched (FLIP, CUT, RAW) or
 * any after it; a failure is -EBADMSG with glue_tls_failure set, and
 * every later read returns it again, with no plaintext; after
 * close_notify every read returns 0; an unchanged wire yields all of the
 * model's plaintext and ends as the model says (a stream shut down
 * without close_notify: -ECONNRESET, TRUNCATED). What the opener sends
 * back is one fatal alert (bad_record_mac, unexpected_message,
 * record_overflow or decode_error, sealed with its own key) if it found
 * a bad record, else nothing.
 *
 * Seeds: corpus/fuzz_tls_open, written by make-seeds.py (scripts only:
 * the records are sealed here, at run time).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "glue_tls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR 5
#define TAG 16
#define PT_MAX 16384
#define CT_MAX (PT_MAX + 256)
#define WIRE_MAX (1u << 19)
#define RECS_MAX 4096
#define PAD_MAX 17000

/* ---- this file's sealer (RFC 8446 5.2, 5.3, 7.1, 7.3) ---------------- */

struct sealer {
	bool aes256;
	uint8_t secret[48];
	size_t slen;
	uint8_t key[32], iv[12];
	uint64_t seq;
};

static void kdf_label(const struct sealer *s, const char *label,
		      uint8_t *out, size_t len)
{
	static EVP_KDF *kdf;
	EVP_KDF_CTX *k;
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
	OSSL_PARAM p[6];

	if (!kdf)
		kdf = EVP_KDF_fetch(NULL, "TLS13-KDF", NULL);
	k = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	if (!k)
		abort();
	p[0] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
	p[1] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
		s->aes256 ? (char *)"SHA384" : (char *)"SHA256", 0);
	p[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
		(void *)s->secret, s->slen);
	p[3] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX,
		(void *)"tls13 ", 6);
	p[4] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL,
		(void *)label, strlen(label));
	p[5] = OSSL_PARAM_construct_end();
	if (EVP_KDF_derive(k, out, len, p) != 1)
		abort();
	EVP_KDF_CTX_free(k);
}

static void sealer_keys(struct sealer *s)
{
	kdf_label(s, "key", s->key, s->aes256 ? 32 : 16);
	kdf_label(s, "iv", s->iv, 12);
}

static void sealer_init(struct sealer *s, bool aes256, const uint8_t *secret,
			uint64_t seq)
{
	s->aes256 = aes256;
	s->slen = aes256 ? 48 : 32;
	memcpy(s->secret, secret, s->slen);
	s->seq = seq;
	sealer_keys(s);
}

static void sealer_update(struct sealer *s)
{
	uint8_t next[48];

	kdf_label(s, "traffic upd", next, s->slen);
	memcpy(s->secret, next, s->slen);
	s->seq = 0;
	sealer_keys(s);
}

/* The record of inner plaintext in[0..n) at out; its length. */
static size_t seal(struct sealer *s, const uint8_t *in, size_t n,
		   uint8_t *out)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	uint8_t nonce[12];
	int len = 0;

	memcpy(nonce, s->iv, 12);
	for (int i = 0; i < 8; i++)
		nonce[11 - i] ^= (uint8_t)(s->seq >> (8 * i));
	out[0] = 23;
	out[1] = 3;
	out[2] = 3;
	out[3] = (uint8_t)((n + TAG) >> 8);
	out[4] = (uint8_t)(n + TAG);
	if (!c || EVP_EncryptInit_ex(c, s->aes256 ? EVP_aes_256_gcm() :
				     EVP_aes_128_gcm(), NULL, s->key,
				     nonce) != 1 ||
	    EVP_EncryptUpdate(c, NULL, &len, out, HDR) != 1 ||
	    EVP_EncryptUpdate(c, out + HDR, &len, in, (int)n) != 1 ||
	    EVP_EncryptFinal_ex(c, out + HDR + n, &len) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, TAG,
				out + HDR + n) != 1)
		abort();
	EVP_CIPHER_CTX_free(c);
	s->seq++;
	return HDR + n + TAG;
}

/* Open the record at in (len octets, header included) into out: the
 * inner plaintext's length, or -1 if it does not authenticate. */
static long unseal(struct sealer *s, const uint8_t *in, size_t len,
		   uint8_t *out)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	uint8_t nonce[12], tag[TAG];
	size_t n = len - HDR - TAG;
	int l = 0, ok;

	if (!c || len < HDR + TAG + 1)
		abort();
	memcpy(nonce, s->iv, 12);
	for (int i = 0; i < 8; i++)
		nonce[11 - i] ^= (uint8_t)(s->seq >> (8 * i));
	memcpy(tag, in + len - TAG, TAG);
	ok = EVP_DecryptInit_ex(c, s->aes256 ? EVP_aes_256_gcm() :
				EVP_aes_128_gcm(), NULL, s->key, nonce) == 1 &&
	     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, TAG, tag) == 1 &&
	     EVP_DecryptUpdate(c, NULL, &l, in, HDR) == 1 &&
	     EVP_DecryptUpdate(c, out, &l, in + HDR, (int)n) == 1 &&
	     EVP_DecryptFinal_ex(c, out + n, &l) == 1;
	EVP_CIPHER_CTX_free(c);
	s->seq++;
	return ok ? (long)n : -1;
}

/* ---- the run ------------------------------------------------------- */

enum model { M_OPEN, M_EOF, M_FAIL };

struct run {
	const uint8_t *in;
	size_t in_len, in_off;
	struct sealer tx;
	uint8_t *wire;
	size_t wire_len;
	/* The records in the order sealed, without FLIP, CUT or RAW: the
	 * wire agrees with it up to dirty. */
	uint8_t *ref;
	size_t ref_len;
	size_t dirty;
	/* The model's plaintext, and after each record its length. */
	uint8_t *exp;
	size_t exp_len;
	size_t rec_end[RECS_MAX], rec_exp[RECS_MAX];
	size_t nrec;
	enum model m;
	enum glue_tls_fail m_why;
	/* wisp's sealer, in step with tx while s_sync. */
	struct glue_tls *s;
	int s_fd[2];
	bool s_sync;
	uint32_t x;
};

static const uint8_t rx_secret0[48] = {
	0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a,
	0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55,
	0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60,
	0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b,
	0x6c, 0x6d, 0x6e, 0x6f,
};
static const uint8_t tx_secret0[48] = { 0x80, 0x81, 0x82, 0x83 };

static unsigned take(struct run *r)
{
	return r->in_off < r->in_len ? r->in[r->in_off++] : 0;
}

static unsigned take16(struct run *r)
{
	unsigned hi = take(r);

	return hi << 8 | take(r);
}

static uint32_t rnd(struct run *r)
{
	r->x ^= r->x << 13;
	r->x ^= r->x >> 17;
	r->x ^= r->x << 5;
	return r->x;
}

static void mark_dirty(struct run *r, size_t off)
{
	if (off < r->dirty)
		r->dirty = off;
}

/* What the opener must do with this authentic inner plaintext (5.4, 6,
 * 4.6.3), applied to the model; true if it changes the key. */
static bool model_record(struct run *r, const uint8_t *p, size_t n)
{
	size_t ct = n + TAG;

	if (r->m != M_OPEN)
		return false;
	if (ct > CT_MAX || n > PT_MAX + 1)
		goto fail;
	while (n && !p[n - 1])
		n--;
	if (!n)
		goto fail;
	n--;
	switch (p[n]) {
	case 23:
		memcpy(r->exp + r->exp_len, p, n);
		r->exp_len += n;
		return false;
	case 21:
		if (n != 2)
			goto fail;
		if (p[1] == 0)
			r->m = M_EOF;
		else if (p[1] != 90) {
			r->m = M_FAIL;
			r->m_why = GLUE_TLS_F_ALERT;
		}
		return false;
	case 22:
		if (n != 5 || p[0] != 24 || p[1] || p[2] || p[3] != 1 ||
		    p[4] > 1)
			goto fail;
		return true;
	default:
		goto fail;
	}
fail:
	r->m = M_FAIL;
	r->m_why = GLUE_TLS_F_BAD_RECORD;
	return false;
}

/* Append the record of inner plaintext p[0..n), sealed here. */
static void add_record(struct run *r, const uint8_t *p, size_t n)
{
	bool upd;

	if (r->wire_len + HDR + n + TAG > WIRE_MAX ||
	    r->ref_len + HDR + n + TAG > WIRE_MAX || r->nrec == RECS_MAX)
		return;
	memcpy(r->wire + r->wire_len, r->ref + r->ref_len,
	       seal(&r->tx, p, n, r->ref + r->ref_len));
	r->wire_len += HDR + n + TAG;
	r->ref_len += HDR + n + TAG;
	upd = model_record(r, p, n);
	r->rec_end[r->nrec] = r->ref_len;
	r->rec_exp[r->nrec++] = r->exp_len;
	/* The opener moves to the next key; so does the sealer. */
	if (upd)
		sealer_update(&r->tx);
	r->s_sync = false;
}

/* Application data through wisp's sealer too: the same record. */
static void add_appdata(struct run *r, const uint8_t *p, size_t n)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	size_t want = HDR + n + 1 + TAG, have = 0;
	uint64_t seq = r->tx.seq;
	size_t at = r->wire_len;
	uint8_t *got;
	long sent;

	if (r->wire_len + want > WIRE_MAX || r->ref_len + want > WIRE_MAX ||
	    r->nrec == RECS_MAX)
		return;
	if (!n) {
		/* glue_tls_tx makes no empty record. */
		uint8_t ct = 23;

		add_record(r, &ct, 1);
		return;
	}
	if (!r->s_sync) {
		glue_tls_free(r->s);
		r->s = glue_tls_new_keyed(r->s_fd[0], r->tx.aes256,
					  r->tx.secret, seq, tx_secret0, 0);
		if (!r->s)
			abort();
	}
	sent = glue_tls_tx(r->s, &iov, 1);
	got = malloc(want);
	if (sent != (long)n || !got)
		abort();
	while (have < want) {
		ssize_t g = recv(r->s_fd[1], got + have, want - have,
				 MSG_DONTWAIT);

		if (g <= 0)
			abort();
		have += (size_t)g;
	}
	{
		uint8_t inner[PT_MAX + 1];

		memcpy(inner, p, n);
		inner[n] = 23;
		add_record(r, inner, n + 1);
	}
	/* Not memcmp: libFuzzer would learn sealed records from it. */
	if (r->wire_len != at + want)
		abort();
	for (size_t i = 0; i < want; i++)
		if (r->wire[at + i] != got[i])
			abort();
	free(got);
	r->s_sync = r->tx.seq == seq + 1;
}

static void build(struct run *r)
{
	static uint8_t inner[PT_MAX + PAD_MAX + 1];

	while (r->in_off < r->in_len && r->wire_len < WIRE_MAX) {
		unsigned op = take(r) % 6, type, pad, len, i;

		switch (op) {
		case 0:
			type = take(r);
			pad = take16(r);
			len = take16(r);
			if (pad > PAD_MAX)
				pad = PAD_MAX;
			if (len > PT_MAX)
				len = PT_MAX;
			if (len > r->in_len - r->in_off)
				len = (unsigned)(r->in_len - r->in_off);
			memcpy(inner, r->in + r->in_off, len);
			r->in_off += len;
			inner[len] = (uint8_t)type;
			memset(inner + len + 1, 0, pad);
			add_record(r, inner, len + 1 + pad);
			break;
		case 1:
			len = take16(r) % (PT_MAX + 1);
			type = take(r);
			for (i = 0; i < len; i++)
				inner[i] = (uint8_t)(type + i);
			add_appdata(r, inner, len);
			break;
		case 2:
			inner[0] = 24;
			inner[1] = inner[2] = 0;
			inner[3] = 1;
			inner[4] = (uint8_t)(take(r) % 3);
			inner[5] = 22;
			add_record(r, inner, 6);
			break;
		case 3:
			pad = take16(r);
			type = take(r);
			if (r->wire_len)
				r->wire[pad % r->wire_len] ^= (uint8_t)type;
			break;
		case 4:
			len = take16(r);
			if (r->wire_len) {
				size_t keep = len % (r->wire_len + 1);

				if (keep < r->wire_len)
					r->wire_len = keep;
			}
			break;
		default:
			len = take(r);
			if (len > r->in_len - r->in_off)
				len = (unsigned)(r->in_len - r->in_off);
			if (len && r->wire_len + len <= WIRE_MAX) {
				memcpy(r->wire + r->wire_len,
				       r->in + r->in_off, len);
				r->wire_len += len;
			}
			r->in_off += len;
			r->s_sync = false;
			break;
		}
	}
	/* Where the wire first differs from the records sealed (FLIPs may
	 * undo each other, a CUT may take away a RAW's octets), or ends
	 * before them or goes on after them. */
	for (size_t i = 0; i < r->wire_len && i < r->ref_len; i++) {
		if (r->wire[i] != r->ref[i]) {
			mark_dirty(r, i);
			break;
		}
	}
	if (r->wire_len != r->ref_len)
		mark_dirty(r, r->wire_len < r->ref_len ? r->wire_len :
			   r->ref_len);
}

/* ---- the opener ---------------------------------------------------- */

struct reader {
	struct glue_tls *t;
	size_t got;                  /* plaintext octets read out */
	size_t bound;                /* at most this many may come */
	long end;                    /* 1: reading; else 0 or -errno */
};

static void check_end(struct reader *rd, long v)
{
	if (v == 0) {
		if (glue_tls_failure(rd->t) != GLUE_TLS_OK)
			abort();
	} else if (v != -EBADMSG && v != -ECONNRESET) {
		abort();
	} else if (glue_tls_failure(rd->t) == GLUE_TLS_OK) {
		abort();
	}
}

/* Read until -EAGAIN (or the end, or the shut-down stream's end). */
static void drain(struct run *r, struct reader *rd, bool shut)
{
	for (;;) {
		size_t len = 1 + rnd(r) % (rnd(r) & 1 ? 64 : 20000);
		uint8_t *buf = malloc(len);
		long v;

		if (!buf)
			abort();
		v = glue_tls_read(rd->t, buf, len);
		if (v > 0) {
			if (rd->end != 1 || (size_t)v > len ||
			    rd->got + (size_t)v > rd->bound ||
			    memcmp(buf, r->exp + rd->got, (size_t)v))
				abort();
			rd->got += (size_t)v;
			free(buf);
			continue;
		}
		free(buf);
		if (v == -EAGAIN) {
			if (shut || rd->end != 1)
				abort();
			return;
		}
		check_end(rd, v);
		if (rd->end != 1 && rd->end != v)
			abort();
		rd->end = v;
		/* For good: once more, the same. */
		buf = malloc(7);
		if (!buf || glue_tls_read(rd->t, buf, 7) != v)
			abort();
		free(buf);
		return;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct run r;
	struct reader rd = { .end = 1 };
	int sv[2];
	size_t off = 0;

	if (size < 2)
		return 0;
	memset(&r, 0, sizeof(r));
	r.in = data;
	r.in_len = size;
	r.in_off = 2;
	r.dirty = SIZE_MAX;
	r.x = (uint32_t)(data[0] >> 1) * 2654435761u + 1;
	r.wire = malloc(WIRE_MAX);
	r.ref = malloc(WIRE_MAX);
	r.exp = malloc(WIRE_MAX);
	if (!r.wire || !r.ref || !r.exp ||
	    socketpair(AF_UNIX, SOCK_STREAM, 0, r.s_fd) ||
	    socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		abort();
	sealer_init(&r.tx, data[0] & 1, rx_secret0, data[1]);
	build(&r);

	/* The opener: this side's secret is tx_secret0 (the alerts it
	 * sends as it fails), the peer's rx_secret0. */
	rd.t = glue_tls_new_keyed(sv[1], data[0] & 1, tx_secret0, 0,
				  rx_secret0, data[1]);
	if (!rd.t || fcntl(sv[0], F_SETFL, O_NONBLOCK))
		abort();
	rd.bound = r.exp_len;
	for (size_t i = 0; i < r.nrec; i++) {
		if (r.rec_end[i] > r.dirty) {
			rd.bound = i ? r.rec_exp[i - 1] : 0;
			break;
		}
	}
	while (off < r.wire_len) {
		size_t n = 1 + rnd(&r) % (rnd(&r) & 3 ? 700 : 40000);
		ssize_t w;

		if (n > r.wire_len - off)
			n = r.wire_len - off;
		w = send(sv[0], r.wire + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w <= 0) {
			/* Only a stream that ended leaves octets unread. */
			if (rd.end == 1)
				abort();
			break;
		}
		off += (size_t)w;
		drain(&r, &rd, false);
	}
	shutdown(sv[0], SHUT_WR);
	drain(&r, &rd, true);

	if (r.dirty == SIZE_MAX) {
		/* Nothing changed: all of it, and the model's end. */
		if (rd.got != r.exp_len)
			abort();
		switch (r.m) {
		case M_OPEN:
			if (rd.end != -ECONNRESET || glue_tls_failure(rd.t) !=
			    GLUE_TLS_F_TRUNCATED)
				abort();
			break;
		case M_EOF:
			if (rd.end != 0)
				abort();
			break;
		case M_FAIL:
			if (rd.end != -EBADMSG ||
			    glue_tls_failure(rd.t) != r.m_why)
				abort();
			break;
		}
	}
	/* What the opener sent back: one fatal alert, sealed with its own
	 * key, if it found a bad record (RFC 8446 6.2), and nothing else. */
	{
		uint8_t back[64], inner[64];
		struct sealer os;
		ssize_t n = recv(sv[0], back, sizeof(back), MSG_DONTWAIT);
		bool bad = glue_tls_failure(rd.t) == GLUE_TLS_F_BAD_RECORD;

		sealer_init(&os, data[0] & 1, tx_secret0, 0);
		if (bad != (n == HDR + 3 + TAG))
			abort();
		if (bad && (back[0] != 23 || back[1] != 3 || back[2] != 3 ||
			    back[3] != 0 || back[4] != 3 + TAG ||
			    unseal(&os, back, (size_t)n, inner) != 3 ||
			    inner[0] != 2 || inner[2] != 21 ||
			    (inner[1] != 10 && inner[1] != 20 &&
			     inner[1] != 22 && inner[1] != 50)))
			abort();
	}
	glue_tls_free(rd.t);
	glue_tls_free(r.s);
	close(sv[0]);
	close(sv[1]);
	close(r.s_fd[0]);
	close(r.s_fd[1]);
	free(r.wire);
	free(r.ref);
	free(r.exp);
	return 0;
}
