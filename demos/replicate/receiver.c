/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl serve: the receiver.
 *
 * It advertises chunk slots (registered memory) in the accept private
 * data; the sender WRITEs a chunk into a free slot and SENDs a DATA
 * message naming it. RDMAP delivers a SEND only after the WRITEs posted
 * before it on that QP are placed (RFC 5040, 5.5), so when DATA arrives
 * the slot holds the chunk. We check its XXH3-64, pwrite it into
 * .wisp-repl/<name>.part, and journal it; the slot is granted back
 * (CREDIT) only once the chunk is in the journal, so a sender can never
 * have more than one window of chunks the journal does not hold.
 *
 * Journal: a header, then 24-byte records {chunk, hash, check}. A record
 * is written only after fdatasync() of the data file, and the journal is
 * fdatasync()ed before the credits go out: the journal never names a
 * chunk the data file does not hold, whatever moment the process dies.
 * A torn or foreign record ends the journal (its check fails).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include "repl.h"

#define JOURNAL_MAGIC	0x314c4e524a4c5052ull	/* "RPLJRNL1" */
#define REVOKED		(1ull << 63)

struct jhdr {
	uint64_t magic;
	uint64_t size;
	uint64_t mtime_ns;
	uint64_t chunk;
	uint64_t check;
};

struct jrec {
	uint64_t chunk;		/* REVOKED: the chunk failed the final check */
	uint64_t hash;
	uint64_t check;
};

struct rfile {
	int active;
	uint64_t file_id;
	char rel[REPL_PATH_MAX];
	char final[PATH_MAX];
	char part[PATH_MAX];
	char jpath[PATH_MAX];
	int part_fd, j_fd;
	uint64_t size, mtime_ns, nchunks, nhave, repaired;
	uint32_t fmode;
	int image;		/* a disk image: no mtime, never skipped */
	uint8_t *have;		/* in the journal */
	uint8_t *pend;		/* written, journal record not yet durable */
	uint64_t *hashes;
	/* the copy read back and checked in order, as chunks reach the
	 * journal: chunks [0, vnext) matched their hashes and are in vstate */
	XXH3_state_t *vstate;
	uint64_t vnext;
	char *vbuf;
};

struct pending {
	uint64_t chunk, hash;
	uint32_t stream, slot;
};

struct rjob {
	const struct opts *o;
	struct net n;
	struct rdma_cm_id *listen;
	int active, dead, bye, failed, finished;
	uint64_t nonce;
	uint64_t dest;		/* the sender's destination key, 0: none */
	enum repl_mode mode;
	uint32_t chunk, window;
	struct rfile f;
	struct pending *pend;
	uint32_t npend;
	uint64_t files_done, bytes_done;
	double t_last;		/* last completion: the sender PINGs each second */
};

static const char *meta_dir = ".wisp-repl";

static uint64_t rec_check(uint64_t a, uint64_t b)
{
	uint64_t v[2] = { a, b };

	return XXH3_64bits(v, sizeof(v)) ^ JOURNAL_MAGIC;
}

static int write_full(int fd, const void *p, size_t len, off_t off)
{
	const char *c = p;

	while (len) {
		ssize_t k = pwrite(fd, c, len, off);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += k;
		len -= k;
		off += k;
	}
	return 0;
}

static ssize_t read_full(int fd, void *p, size_t len, off_t off)
{
	char *c = p;
	size_t got = 0;

	while (got < len) {
		ssize_t k = pread(fd, c + got, len - got, off + got);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!k)
			break;
		got += k;
	}
	return got;
}

static uint64_t chunk_len(const struct rjob *j, uint64_t c)
{
	uint64_t off = c * j->chunk;

	return j->f.size - off < j->chunk ? j->f.size - off : j->chunk;
}

static void send_or_fail(struct rjob *j, struct stream *s, const struct msg *m)
{
	int rc = stream_send_msg(s, m);

	if (rc) {
		warn_msg("cannot post a send: %s", strerror(-rc));
		j->dead = 1;
	}
}

/* Tell the sender we cannot go on; it prints the text and exits. The
 * text says why in words: errno numbers differ between systems. */
static void job_error(struct rjob *j, int err, const char *what)
{
	struct msg m = { .type = M_ERROR, .status = err };

	warn_msg("%s: %s", what, strerror(err));
	snprintf(m.u.text, sizeof(m.u.text), "%.*s: %s", REPL_PATH_MAX - 64,
		 what, strerror(err));
	if (j->active && j->n.st[0].id)
		send_or_fail(j, &j->n.st[0], &m);
	j->failed = 1;
}

/* A relative path without "..", ".", empty parts or our own folder. */
static int path_ok(const char *p)
{
	const char *c = p;

	if (!*p || *p == '/' || strlen(p) >= REPL_PATH_MAX - 1)
		return 0;
	while (*c) {
		const char *e = strchrnul(c, '/');
		size_t l = e - c;

		if (!l || (l == 1 && c[0] == '.') ||
		    (l == 2 && c[0] == '.' && c[1] == '.') ||
		    (l == strlen(meta_dir) && !memcmp(c, meta_dir, l)))
			return 0;
		c = *e ? e + 1 : e;
	}
	return 1;
}

static int mkdirs(char *path)
{
	char *c;

	for (c = path + 1; *c; c++) {
		if (*c != '/')
			continue;
		*c = 0;
		if (mkdir(path, 0755) && errno != EEXIST) {
			int e = errno;

			*c = '/';
			return -e;
		}
		*c = '/';
	}
	return 0;
}

static void file_close(struct rjob *j)
{
	struct rfile *f = &j->f;

	if (!f->active)
		return;
	close(f->part_fd);
	close(f->j_fd);
	free(f->have);
	free(f->pend);
	free(f->hashes);
	if (f->vstate)
		XXH3_freeState(f->vstate);
	free(f->vbuf);
	memset(f, 0, sizeof(*f));
}

static void verify_ahead(struct rjob *j, uint64_t max);

/* Make the written chunks durable, then the journal records naming
 * them, then grant their slots back; then read back as many chunks
 * again (twice as many: a resumed file's older chunks catch up). */
static void journal_flush(struct rjob *j)
{
	struct rfile *f = &j->f;
	struct jrec *r;
	struct stat st;
	uint32_t i, n = 0;

	if (!j->npend)
		return;
	r = xcalloc(j->npend, sizeof(*r));
	if (f->active) {
		if (fdatasync(f->part_fd)) {
			job_error(j, errno, f->rel);
			goto out;
		}
		for (i = 0; i < j->npend; i++) {
			struct pending *p = &j->pend[i];

			if (!f->pend[p->chunk])
				continue;
			r[n].chunk = p->chunk;
			r[n].hash = p->hash;
			r[n].check = rec_check(p->chunk, p->hash);
			n++;
		}
		if (fstat(f->j_fd, &st) ||
		    write_full(f->j_fd, r, n * sizeof(*r), st.st_size) ||
		    fdatasync(f->j_fd)) {
			job_error(j, errno ? errno : EIO, f->jpath);
			goto out;
		}
		for (i = 0; i < j->npend; i++) {
			struct pending *p = &j->pend[i];

			if (!f->pend[p->chunk])
				continue;
			f->pend[p->chunk] = 0;
			f->have[p->chunk] = 1;
			f->hashes[p->chunk] = p->hash;
			f->nhave++;
			j->bytes_done += chunk_len(j, p->chunk);
		}
	}
	for (i = 0; i < j->npend && !j->dead; i++) {
		struct msg m = { .type = M_CREDIT, .slot = j->pend[i].slot,
				 .chunk = j->pend[i].chunk, .status = ST_OK };

		send_or_fail(j, &j->n.st[j->pend[i].stream], &m);
	}
	free(r);
	j->npend = 0;
	verify_ahead(j, 2 * (uint64_t)n);
	return;
out:
	free(r);
	j->npend = 0;
}

static void credit_now(struct rjob *j, struct stream *s, uint32_t slot,
		       uint64_t chunk, uint32_t status)
{
	struct msg m = { .type = M_CREDIT, .slot = slot, .chunk = chunk,
			 .status = status };

	send_or_fail(j, s, &m);
}

static void send_need(struct rjob *j, struct stream *s)
{
	struct rfile *f = &j->f;
	struct msg m = { .type = M_NEED, .file_id = f->file_id };
	uint64_t c = 0;
	int msgs = 0;

	while (c < f->nchunks) {
		uint64_t first;

		while (c < f->nchunks && f->have[c])
			c++;
		if (c == f->nchunks)
			break;
		first = c;
		/* out of message budget: ask for everything from here on;
		 * chunks we already hold are credited and dropped */
		if (msgs == REPL_NEED_MSGS - 1 && m.nruns == REPL_RUNS - 1)
			c = f->nchunks;
		while (c < f->nchunks && !f->have[c])
			c++;
		m.u.runs[m.nruns].first = first;
		m.u.runs[m.nruns].count = c - first;
		if (++m.nruns == REPL_RUNS) {
			send_or_fail(j, s, &m);
			msgs++;
			m.nruns = 0;
		}
	}
	if (m.nruns)
		send_or_fail(j, s, &m);
	memset(&m, 0, sizeof(m));
	m.type = M_NEED_END;
	m.file_id = f->file_id;
	m.status = ST_OK;
	send_or_fail(j, s, &m);
}

/* Replay the journal; start over when it describes another file. */
static int journal_load(struct rjob *j)
{
	struct rfile *f = &j->f;
	struct jhdr h, want = {
		.magic = JOURNAL_MAGIC, .size = f->size,
		.mtime_ns = f->mtime_ns, .chunk = j->chunk,
	};
	struct jrec r;
	off_t off = sizeof(h);

	want.check = rec_check(want.size ^ want.chunk, want.mtime_ns);
	if (read_full(f->j_fd, &h, sizeof(h), 0) != sizeof(h) ||
	    h.magic != want.magic || h.size != want.size ||
	    h.mtime_ns != want.mtime_ns || h.chunk != want.chunk ||
	    h.check != want.check) {
		if (ftruncate(f->part_fd, 0) || ftruncate(f->j_fd, 0) ||
		    write_full(f->j_fd, &want, sizeof(want), 0) ||
		    fdatasync(f->j_fd))
			return -errno;
		return 0;
	}
	while (read_full(f->j_fd, &r, sizeof(r), off) == sizeof(r) &&
	       r.check == rec_check(r.chunk, r.hash)) {
		uint64_t c = r.chunk & ~REVOKED;

		if (c >= f->nchunks)
			break;
		if (r.chunk & REVOKED) {
			f->nhave -= f->have[c];
			f->have[c] = 0;
		} else {
			f->nhave += !f->have[c];
			f->have[c] = 1;
			f->hashes[c] = r.hash;
		}
		off += sizeof(r);
	}
	/* drop a torn tail so new records follow good ones */
	if (ftruncate(f->j_fd, off))
		return -errno;
	return 0;
}

static int fsync_dir_of(const char *path)
{
	char d[PATH_MAX], *sl;
	int fd, rc = 0;

	snprintf(d, sizeof(d), "%s", path);
	sl = strrchr(d, '/');
	if (sl)
		*sl = 0;
	fd = open(sl ? d : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd))
		rc = -errno;
	close(fd);
	return rc;
}

/* The folder that will hold path must take the rename (fail early,
 * before any data moves). */
static int access_dir_of(const char *path)
{
	char d[PATH_MAX], *sl;

	snprintf(d, sizeof(d), "%s", path);
	sl = strrchr(d, '/');
	if (sl)
		*sl = 0;
	return access(sl ? d : ".", W_OK | X_OK);
}

static void on_open(struct rjob *j, struct stream *s, const struct msg *m)
{
	struct rfile *f = &j->f;
	char enc[REPL_PATH_MAX * 3], *e = enc;
	const char *c;
	struct stat st;
	int rc;

	file_close(j);
	if (!path_ok(m->u.path)) {
		job_error(j, EINVAL, "bad path from sender");
		return;
	}
	f->file_id = m->file_id;
	f->size = m->size;
	f->mtime_ns = m->mtime_ns;
	f->fmode = m->fmode;
	f->image = !!(m->status & OPEN_IMAGE);
	f->nchunks = (m->size + j->chunk - 1) / j->chunk;
	snprintf(f->rel, sizeof(f->rel), "%s", m->u.path);
	snprintf(f->final, sizeof(f->final), "%s/%s", j->o->dir, f->rel);
	/* the journal and data file live flat in .wisp-repl: '/' -> %2F */
	for (c = f->rel; *c; c++) {
		if (*c == '/' || *c == '%') {
			e += sprintf(e, "%%%02X", *c);
			continue;
		}
		*e++ = *c;
	}
	*e = 0;
	snprintf(f->part, sizeof(f->part), "%s/%s/%s.part", j->o->dir, meta_dir, enc);
	snprintf(f->jpath, sizeof(f->jpath), "%s/%s/%s.journal", j->o->dir,
		 meta_dir, enc);
	f->part_fd = f->j_fd = -1;

	/* already there, same size and mtime: nothing to do (an image has
	 * no mtime that tells its versions apart: always sent) */
	if (!f->image && !stat(f->final, &st) && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size == f->size &&
	    (uint64_t)st.st_mtim.tv_sec * 1000000000u + st.st_mtim.tv_nsec ==
	    f->mtime_ns) {
		struct msg r = { .type = M_NEED_END, .file_id = f->file_id,
				 .status = ST_SKIP };

		send_or_fail(j, s, &r);
		return;
	}
	rc = mkdirs(f->final);
	if (!rc && access_dir_of(f->final))
		rc = -errno;
	if (rc) {
		job_error(j, -rc, f->rel);
		return;
	}
	f->part_fd = open(f->part, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (f->part_fd < 0) {
		job_error(j, errno, f->rel);
		return;
	}
	f->j_fd = open(f->jpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (f->j_fd < 0) {
		job_error(j, errno, f->rel);
		close(f->part_fd);
		return;
	}
	f->have = xcalloc(f->nchunks, 1);
	f->pend = xcalloc(f->nchunks, 1);
	f->hashes = xcalloc(f->nchunks, sizeof(*f->hashes));
	f->vbuf = xcalloc(1, j->chunk);
	f->vstate = XXH3_createState();
	if (!f->vstate)
		die_msg(EX_FAIL, "out of memory");
	XXH3_128bits_reset(f->vstate);
	f->vnext = 0;
	f->active = 1;
	rc = journal_load(j);
	if (rc) {
		job_error(j, -rc, f->jpath);
		return;
	}
	if (repl_verbose)
		warn_msg("%s: %llu of %llu chunks already here", f->rel,
			 (unsigned long long)f->nhave,
			 (unsigned long long)f->nchunks);
	send_need(j, s);
}

/* A chunk is in memory (slot, read target or receive buffer). */
static void on_chunk(struct rjob *j, struct stream *s, const struct msg *m,
		     const char *data)
{
	struct rfile *f = &j->f;
	int rc;

	if (j->failed)
		return;	/* the sender has been told; it is leaving */
	if (!f->active || m->file_id != f->file_id || m->chunk >= f->nchunks ||
	    m->len != chunk_len(j, m->chunk) ||
	    m->offset != m->chunk * j->chunk) {
		warn_msg("protocol error: chunk %llu does not fit",
			 (unsigned long long)m->chunk);
		j->dead = 1;
		return;
	}
	if (XXH3_64bits(data, m->len) != m->hash) {
		warn_msg("%s: chunk %llu failed its checksum; asking again",
			 f->rel, (unsigned long long)m->chunk);
		credit_now(j, s, m->slot, m->chunk, ST_BAD);
		return;
	}
	if (f->have[m->chunk] || f->pend[m->chunk]) {
		credit_now(j, s, m->slot, m->chunk, ST_OK);
		return;
	}
	rc = write_full(f->part_fd, data, m->len, m->offset);
	if (rc) {
		job_error(j, -rc, f->rel);
		return;
	}
	f->pend[m->chunk] = 1;
	j->pend[j->npend++] = (struct pending){
		.chunk = m->chunk, .hash = m->hash, .stream = s->idx,
		.slot = m->slot,
	};
	/* small batches keep credits flowing; the syncs are per batch */
	if (j->npend >= (j->window + 1) / 2 || j->npend >= 16)
		journal_flush(j);
}

static void chunk_revoke(struct rjob *j, uint64_t c)
{
	struct rfile *f = &j->f;
	struct jrec r = { .chunk = c | REVOKED, .hash = 0 };
	struct stat st;

	r.check = rec_check(r.chunk, r.hash);
	f->have[c] = 0;
	f->nhave--;
	f->repaired++;
	if (fstat(f->j_fd, &st) ||
	    write_full(f->j_fd, &r, sizeof(r), st.st_size))
		job_error(j, errno ? errno : EIO, f->jpath);
}

/*
 * Read the copy back from the .part, in order from vnext, while the
 * journal has the chunks (at most max of them): each must match its
 * journalled hash, and goes into the file's hash. A chunk that does not
 * (damaged on our disk) is revoked, to be asked for again, alone, at
 * DONE; the reading stops there until it is back. Done as chunks reach
 * the journal, so that at DONE only what came last is left to read.
 */
static void verify_ahead(struct rjob *j, uint64_t max)
{
	struct rfile *f = &j->f;

	for (; max && f->active && !j->failed && f->vnext < f->nchunks &&
	       f->have[f->vnext]; max--) {
		uint64_t c = f->vnext, len = chunk_len(j, c);
		ssize_t k = read_full(f->part_fd, f->vbuf, len, c * j->chunk);

		if (k < 0) {
			job_error(j, (int)-k, f->rel);
			return;
		}
		if ((uint64_t)k != len || XXH3_64bits(f->vbuf, len) != f->hashes[c]) {
			warn_msg("%s: chunk %llu on disk does not match its journal; asking again",
				 f->rel, (unsigned long long)c);
			chunk_revoke(j, c);
			return;
		}
		XXH3_128bits_update(f->vstate, f->vbuf, len);
		f->vnext++;
	}
}

/* The sender has nothing more in flight: finish reading the .part back
 * (verify_ahead) and send the file's hash, or NEED for the chunks
 * missing or revoked. */
static void on_done(struct rjob *j, struct stream *s, const struct msg *m)
{
	struct rfile *f = &j->f;
	struct msg r = { .type = M_VERIFY };

	journal_flush(j);
	if (!f->active || m->file_id != f->file_id || j->failed)
		return;
	verify_ahead(j, UINT64_MAX);
	if (j->failed)
		return;
	if (f->vnext < f->nchunks) {
		if (fdatasync(f->j_fd))
			job_error(j, errno, f->jpath);
		send_need(j, s);
		return;
	}
	{
		XXH128_hash_t h = XXH3_128bits_digest(f->vstate);

		r.file_id = f->file_id;
		r.hash = h.low64;
		r.hash_hi = h.high64;
		r.chunk = f->repaired;
		send_or_fail(j, s, &r);
	}
}

/* Whole-file hashes agree: publish under the final name. */
static void on_commit(struct rjob *j, struct stream *s, const struct msg *m)
{
	struct rfile *f = &j->f;
	struct timespec ts[2];
	struct msg r = { .type = M_COMMITTED, .file_id = m->file_id };

	if (!f->active || m->file_id != f->file_id)
		return;
	ts[0].tv_sec = ts[1].tv_sec = f->mtime_ns / 1000000000u;
	ts[0].tv_nsec = ts[1].tv_nsec = f->mtime_ns % 1000000000u;
	if (f->image)
		ts[0].tv_nsec = ts[1].tv_nsec = UTIME_NOW;
	if (fchmod(f->part_fd, f->fmode & 07777) || futimens(f->part_fd, ts) ||
	    fsync(f->part_fd) || rename(f->part, f->final) ||
	    fsync_dir_of(f->final)) {
		job_error(j, errno, f->rel);
		return;
	}
	unlink(f->jpath);
	j->files_done++;
	if (repl_verbose)
		warn_msg("%s: complete (%llu chunks repaired)", f->rel,
			 (unsigned long long)f->repaired);
	file_close(j);
	send_or_fail(j, s, &r);
}

static void on_recv(struct rjob *j, struct stream *s, uint32_t i, uint32_t len)
{
	struct msg m;
	char *data = NULL;

	if (len < REPL_MSG_LEN) {
		warn_msg("protocol error: short message (%u bytes)", len);
		j->dead = 1;
		return;
	}
	msg_decode(s->rx[i].b, &m);
	if (j->mode == MODE_SEND)
		data = j->n.data + (size_t)(s->rx_buf_first + i) * j->chunk;
	switch (m.type) {
	case M_OPEN:
		on_open(j, s, &m);
		break;
	case M_DATA:
		if (j->mode == MODE_WRITE) {
			if (m.slot < s->slot_first ||
			    m.slot >= s->slot_first + s->slot_count) {
				j->dead = 1;
				break;
			}
			data = j->n.data + (size_t)m.slot * j->chunk;
		}
		if (!data || len - REPL_MSG_LEN != (j->mode == MODE_SEND ? m.len : 0)) {
			warn_msg("protocol error: DATA in %s mode", mode_name(j->mode));
			j->dead = 1;
			break;
		}
		on_chunk(j, s, &m, data);
		break;
	case M_OFFER:
		if (j->mode != MODE_READ || s->offer_n >= s->slot_count ||
		    m.slot < s->slot_first || m.slot >= s->slot_first + s->slot_count ||
		    m.len > j->chunk) {
			j->dead = 1;
			break;
		}
		s->offers[(s->offer_head + s->offer_n++) % s->slot_count] = m;
		break;
	case M_DONE:
		on_done(j, s, &m);
		break;
	case M_COMMIT:
		on_commit(j, s, &m);
		break;
	case M_ABORT:
		warn_msg("%s: sender aborted it (source changed); the rerun starts it over",
			 j->f.rel);
		journal_flush(j);
		/* the journal's chunks may be of another version of the
		 * source (an image has no mtime to tell): forget them */
		if (j->f.active && (ftruncate(j->f.j_fd, 0) || fdatasync(j->f.j_fd)))
			warn_msg("%s: %s", j->f.jpath, strerror(errno));
		file_close(j);
		break;
	case M_PING:
		m.type = M_PONG;
		send_or_fail(j, s, &m);
		break;
	case M_BYE:
		j->bye = 1;
		break;
	default:
		warn_msg("protocol error: message type %u", m.type);
		j->dead = 1;
		return;
	}
	if (!j->dead && stream_post_recv(&j->n, s, i, data && j->mode == MODE_SEND ?
					 data : NULL, j->chunk)) {
		warn_msg("cannot post a receive: %s", strerror(errno));
		j->dead = 1;
	}
}

/* READ-pull: issue queued offers while the ORD allows. */
static void pump_reads(struct rjob *j, struct stream *s)
{
	while (s->offer_n && s->reads_out < s->ord && !j->dead) {
		struct msg *m = &s->offers[s->offer_head];
		struct ibv_sge sge = {
			.addr = (uintptr_t)(j->n.data + (size_t)m->slot * j->chunk),
			.length = m->len, .lkey = j->n.data_mr->lkey,
		};
		struct ibv_send_wr wr = {
			.wr_id = WR_ID(WK_READ, s->idx, s->offer_head),
			.sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_RDMA_READ,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = m->addr, .rkey = m->rkey },
		}, *bad;

		if (ibv_post_send(s->id->qp, &wr, &bad)) {
			warn_msg("RDMA READ: %s", strerror(errno));
			j->dead = 1;
			return;
		}
		s->reads_out++;
		/* the offer stays in place until its READ completes */
		s->offer_head = (s->offer_head + 1) % s->slot_count;
		s->offer_n--;
	}
}

static void on_wc(void *arg, struct ibv_wc *wc)
{
	struct rjob *j = arg;
	struct stream *s;

	if (j->dead || WR_STREAM(wc->wr_id) >= (uint32_t)j->n.nstreams)
		return;
	s = &j->n.st[WR_STREAM(wc->wr_id)];
	j->t_last = now_s();
	if (wc->status != IBV_WC_SUCCESS) {
		if (!j->bye && !j->failed)
			warn_msg("stream %d: %s", s->idx, ibv_wc_status_str(wc->status));
		j->dead = 1;
		return;
	}
	switch (WR_KIND(wc->wr_id)) {
	case WK_RECV:
		on_recv(j, s, WR_INDEX(wc->wr_id), wc->byte_len);
		break;
	case WK_SEND:
		s->tx_free[s->ntx_free++] = WR_INDEX(wc->wr_id);
		break;
	case WK_READ: {
		struct msg m = s->offers[WR_INDEX(wc->wr_id)];

		s->reads_out--;
		on_chunk(j, s, &m, j->n.data + (size_t)m.slot * j->chunk);
		break;
	}
	default:
		break;
	}
	if (j->mode == MODE_READ)
		pump_reads(j, s);
}

static int job_start(struct rjob *j, struct rdma_cm_id *id,
		     const struct conn_req *rq)
{
	struct net *n = &j->n;
	uint32_t nbufs;
	int acc = IBV_ACCESS_LOCAL_WRITE, rc;

	if (rq->chunk < 4096 || rq->chunk > (64u << 20) || rq->nstreams < 1 ||
	    rq->nstreams > REPL_MAX_STREAMS || rq->mode > MODE_SEND)
		return -EINVAL;
	j->nonce = rq->nonce;
	j->dest = rq->dest;
	j->mode = rq->mode;
	j->chunk = rq->chunk;
	j->window = rq->window;
	if (j->o->window && j->window > j->o->window)
		j->window = j->o->window;
	if (j->window > REPL_MAX_WINDOW)
		j->window = REPL_MAX_WINDOW;
	if (j->window < rq->nstreams)
		j->window = rq->nstreams;
	n->nstreams = rq->nstreams;
	rc = net_setup_verbs(n, id->verbs,
			     n->nstreams * (3 * REPL_MAX_WINDOW / n->nstreams +
					    REPL_SQ_EXTRA + REPL_RX_EXTRA));
	if (rc)
		return rc;
	nbufs = j->window + (j->mode == MODE_SEND ? 8 * n->nstreams : 0);
	n->data_len = (size_t)nbufs * j->chunk;
	n->data = aligned_alloc(4096, n->data_len);
	if (!n->data)
		return -ENOMEM;
	if (j->mode == MODE_WRITE)
		acc |= IBV_ACCESS_REMOTE_WRITE;
	n->data_mr = ibv_reg_mr(n->pd, n->data, n->data_len, acc);
	if (!n->data_mr)
		return -errno;
	j->pend = xcalloc(j->window + 1, sizeof(*j->pend));
	if (repl_verbose)
		warn_msg("job started (%s, %u streams, %u x %u bytes)",
			 mode_name(j->mode), rq->nstreams, j->window, j->chunk);
	j->active = 1;
	j->bye = j->failed = j->dead = 0;
	j->t_last = now_s();
	return 0;
}

static void job_teardown(struct rjob *j)
{
	struct net *n = &j->n;
	int i;

	journal_flush(j);
	j->finished = j->active && j->bye && !j->failed;
	if (j->active && !j->finished)
		warn_msg("job ended early%s", j->failed ? " (error)" : " (peer gone)");
	else if (j->finished && repl_verbose)
		warn_msg("job done");
	file_close(j);
	for (i = 0; i < REPL_MAX_STREAMS; i++)
		if (n->st[i].id && n->st[i].established)
			rdma_disconnect(n->st[i].id);
	for (i = 0; i < REPL_MAX_STREAMS; i++)
		if (n->st[i].id)
			stream_destroy(&n->st[i]);
	if (n->data_mr)
		ibv_dereg_mr(n->data_mr);
	free(n->data);
	n->data = NULL;
	n->data_mr = NULL;
	free(j->pend);
	j->pend = NULL;
	j->npend = 0;
	net_destroy(n);
	j->active = 0;
	j->dead = 0;
}

/* A new run of the job we hold (stream 0, another nonce, the same
 * destination key): the old run's sender was killed or cut off without
 * a word, or stopped. Tell it (if it can still hear), journal what it
 * delivered and verified, and drop its connections, CQ and slots: none
 * of its later completions can reach the new job, and its rkey dies
 * with the old slot array. */
static void job_take_over(struct rjob *j)
{
	struct msg m = { .type = M_ERROR, .status = ERR_TAKEN_OVER };

	warn_msg("a new run of the job (same destination) takes over; dropping the old connection");
	snprintf(m.u.text, sizeof(m.u.text),
		 "a newer run of this job (same destination) took over the receiver; this run stops");
	if (!j->dead && j->n.st[0].id && j->n.st[0].established)
		send_or_fail(j, &j->n.st[0], &m);
	j->failed = 1;
	job_teardown(j);
}

static void on_connect_request(struct rjob *j, struct rdma_cm_id *id,
			       const struct rdma_conn_param *cp)
{
	struct conn_req rq;
	struct conn_rep rp = { .magic = REPL_MAGIC, .version = REPL_VERSION };
	unsigned char rpw[REPL_REP_LEN];
	struct rdma_conn_param ap = { 0 };
	struct ibv_device_attr attr;
	struct stream *s;
	uint32_t per, rq_depth;
	enum wire_check wc;
	int rc = 0;

	wc = req_decode(cp->private_data, cp->private_data_len, &rq);
	if (wc != WIRE_OK) {
		if (wc == WIRE_VERSION)
			warn_msg("a sender of wisp-repl protocol %u turned away (this receiver speaks %u)",
				 rq.version, REPL_VERSION);
		else
			warn_msg("a connection turned away: %s", wire_check_str(wc));
		rp.reason = wc == WIRE_VERSION || wc == WIRE_V1 ? REJ_VERSION :
			    REJ_BAD_REQUEST;
		goto reject;
	}
	if (j->active && rq.stream == 0 && rq.dest && rq.dest == j->dest &&
	    rq.nonce != j->nonce)
		job_take_over(j);
	if (!j->active && rq.stream == 0) {
		rc = job_start(j, id, &rq);
		if (rc)
			goto reject_job;
	} else if (!j->active || rq.nonce != j->nonce ||
		   rq.stream >= j->n.nstreams || j->n.st[rq.stream].id) {
		if (j->active && rq.nonce != j->nonce)
			warn_msg("a new job turned away: busy with another");
		rp.reason = REJ_BUSY;
		goto reject;
	}
	rc = net_setup_verbs(&j->n, id->verbs, 0);
	if (rc)
		goto reject_rc;
	s = &j->n.st[rq.stream];
	s->id = id;
	s->idx = rq.stream;
	per = j->window / j->n.nstreams;
	s->slot_first = rq.stream * per;
	s->slot_count = rq.stream == j->n.nstreams - 1 ?
			j->window - s->slot_first : per;
	s->rx_buf_first = s->slot_first + 8 * rq.stream;
	rq_depth = s->slot_count + 8;
	rc = stream_create_qp(&j->n, s, 2 * s->slot_count + REPL_SQ_EXTRA,
			      rq_depth);
	if (!rc)
		rc = stream_alloc_msgs(&j->n, s, rq_depth,
				       2 * s->slot_count + REPL_SQ_EXTRA,
				       j->mode == MODE_SEND ? j->n.data : NULL,
				       j->chunk);
	if (rc)
		goto reject_stream;
	if (j->mode == MODE_READ)
		s->offers = xcalloc(s->slot_count, sizeof(*s->offers));
	if (ibv_query_device(id->verbs, &attr)) {
		rc = -errno;
		goto reject_stream;
	}
	ap.initiator_depth = cp->responder_resources;
	if (ap.initiator_depth > attr.max_qp_init_rd_atom)
		ap.initiator_depth = attr.max_qp_init_rd_atom;
	ap.responder_resources = cp->initiator_depth;
	if (ap.responder_resources > attr.max_qp_rd_atom)
		ap.responder_resources = attr.max_qp_rd_atom;
	s->ord = ap.initiator_depth ? ap.initiator_depth : 1;
	rp.addr = (uintptr_t)j->n.data;
	rp.rkey = j->n.data_mr->rkey;
	rp.slot_first = s->slot_first;
	rp.slot_count = s->slot_count;
	rp.chunk = j->chunk;
	rep_encode(&rp, rpw);
	ap.private_data = rpw;
	ap.private_data_len = sizeof(rpw);
	if (rdma_accept(id, &ap)) {
		warn_msg("rdma_accept: %s", strerror(errno));
		j->dead = 1;
	}
	return;
reject_stream:
	warn_msg("cannot set up stream %u: %s", rq.stream, strerror(-rc));
	if (id->qp)
		rdma_destroy_qp(id);
	s->id = NULL;
	stream_destroy(s);
	j->dead = 1;
	goto reject_rc;
reject_job:
	warn_msg("cannot start a job: %s", strerror(-rc));
	job_teardown(j);
reject_rc:
	rp.reason = rc == -EINVAL ? REJ_BAD_REQUEST : REJ_RESOURCES;
	rp.status = (uint32_t)-rc;
reject:
	rep_encode(&rp, rpw);
	rdma_reject(id, rpw, sizeof(rpw));
	rdma_destroy_id(id);
}

static void on_cm(void *arg, struct rdma_cm_event *ev)
{
	struct rjob *j = arg;
	struct rdma_cm_id *id = ev->id;
	enum rdma_cm_event_type type = ev->event;
	struct rdma_conn_param cp = ev->param.conn;
	char pd[64];
	int i;

	if (cp.private_data_len > sizeof(pd))
		cp.private_data_len = sizeof(pd);
	if (cp.private_data)
		memcpy(pd, cp.private_data, cp.private_data_len);
	cp.private_data = pd;
	rdma_ack_cm_event(ev);
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		on_connect_request(j, id, &cp);
		return;
	}
	for (i = 0; i < REPL_MAX_STREAMS; i++)
		if (j->n.st[i].id == id)
			break;
	if (i == REPL_MAX_STREAMS)
		return;
	if (type == RDMA_CM_EVENT_ESTABLISHED) {
		j->n.st[i].established = 1;
		return;
	}
	/* anything else (DISCONNECTED, errors) ends the job */
	j->dead = 1;
}

int run_receiver(const struct opts *o)
{
	struct rjob j = { .o = o };
	struct sockaddr_storage ss;
	struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	char meta[PATH_MAX], port[16];
	struct stat st;

	repl_verbose = o->verbose;
	if (stat(o->dir, &st) || !S_ISDIR(st.st_mode))
		die_msg(EX_USAGE, "%s: %s", o->dir,
			errno ? strerror(errno) : "not a directory");
	snprintf(meta, sizeof(meta), "%s/%s", o->dir, meta_dir);
	if ((mkdir(meta, 0700) && errno != EEXIST) || access(meta, W_OK))
		die_msg(EX_REMOTE, "%s: %s", meta, strerror(errno));
	snprintf(port, sizeof(port), "%d", o->port);
	if (getaddrinfo(o->host, port, &hints, &ai))
		die_msg(EX_USAGE, "cannot resolve %s", o->host ? o->host : "*");
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	j.n.ec = rdma_create_event_channel();
	if (!j.n.ec)
		die_msg(EX_FAIL, "rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(j.n.ec, &j.listen, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(j.listen, (struct sockaddr *)&ss) ||
	    rdma_listen(j.listen, 16))
		die_msg(EX_CONNECT, "listen on port %d: %s", o->port, strerror(errno));
	if (o->verbose)
		warn_msg("serving %s on port %d", o->dir, o->port);
	for (;;) {
		int rc = net_wait(&j.n, 200, on_cm, on_wc, &j);

		if (rc)
			die_msg(EX_FAIL, "event loop: %s", strerror(-rc));
		if (j.active && !j.dead)
			journal_flush(&j);
		/* a sender that vanished without a FIN must not hold the
		 * receiver forever */
		if (j.active && !j.dead && now_s() - j.t_last > o->timeout_ms / 1000.0) {
			warn_msg("sender silent for %d s", o->timeout_ms / 1000);
			j.dead = 1;
		}
		if (j.dead) {
			job_teardown(&j);
			if (o->once)
				break;
		}
	}
	rdma_destroy_id(j.listen);
	rdma_destroy_event_channel(j.n.ec);
	return j.finished ? EX_OK : EX_FAIL;
}
