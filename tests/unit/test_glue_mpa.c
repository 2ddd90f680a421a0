/* SPDX-License-Identifier: MIT */
/*
 * Blocking MPA frame I/O (tcp-glue/glue_mpa.c) over socketpairs and
 * loopback TCP: whole frames in pieces, never a byte past the frame,
 * timeouts, frames cut short, bad keys, refused connects.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "glue_mpa.h"
#include "glue_pair.h"
#include "test_util.h"

#define KEY_REQ 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', \
		'F', 'r', 'a', 'm', 'e'
#define KEY_REP 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', \
		'F', 'r', 'a', 'm', 'e'

static const uint8_t request[] = {
	KEY_REQ, 0x10, 0x02, 0x00, 0x06, 0x80, 0x01, 0xc0, 0x01, 'r', 'p',
};

static void pair(int sv[2])
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

struct dribble {
	int fd;
	const uint8_t *p;
	size_t len;
	size_t step;
	bool close_after;
};

/* Writes p in step-sized pieces, 5 ms apart. */
static void *dribble_thread(void *arg)
{
	struct dribble *d = arg;

	for (size_t off = 0; off < d->len; off += d->step) {
		size_t n = d->len - off < d->step ? d->len - off : d->step;

		cr_assert_eq(write(d->fd, d->p + off, n), (ssize_t)n);
		usleep(5000);
	}
	if (d->close_after)
		close(d->fd);
	return NULL;
}

Test(glue_mpa, reads_one_frame_in_pieces_and_no_more)
{
	uint8_t stream[sizeof(request) + 6];
	uint8_t buf[GLUE_MPA_FRAME_MAX], rest[16];
	struct dribble d;
	enum mpa_error err;
	pthread_t t;
	int sv[2];

	/* The frame is followed by an FPDU's first octets: they must stay
	 * in the socket for the engine. */
	memcpy(stream, request, sizeof(request));
	memcpy(stream + sizeof(request), "\x00\x04FPDU", 6);
	pair(sv);
	d = (struct dribble){ sv[1], stream, sizeof(stream), 3, false };
	cr_assert_eq(pthread_create(&t, NULL, dribble_thread, &d), 0);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, sizeof(buf), 2000,
				   &err), (int)sizeof(request));
	cr_assert_arr_eq(buf, request, sizeof(request));
	pthread_join(t, NULL);
	cr_assert_eq(read(sv[0], rest, sizeof(rest)), 6);
	cr_assert_arr_eq(rest, "\x00\x04FPDU", 6);
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, write_then_read_round_trip)
{
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	int sv[2];

	pair(sv);
	cr_assert_eq(glue_mpa_write(sv[1], request, sizeof(request), 1000), 0);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, sizeof(buf), 1000,
				   NULL), (int)sizeof(request));
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, timeout_when_nothing_comes)
{
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	int64_t t0;
	int sv[2];

	pair(sv);
	t0 = glue_mpa_now_ms();
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REPLY, buf, sizeof(buf), 100,
				   NULL), -ETIMEDOUT);
	/* Not before the deadline. (How long after it is the scheduler's
	 * business: -ETIMEDOUT says the deadline ended the wait.) */
	cr_assert_geq(glue_mpa_now_ms() - t0, 95);
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, timeout_in_the_middle_of_a_frame)
{
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	int sv[2];

	pair(sv);
	cr_assert_eq(write(sv[1], request, 22), 22);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, sizeof(buf), 100,
				   NULL), -ETIMEDOUT);
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, truncated_frame_is_a_reset)
{
	/* Header and half of the private data, then the peer closes. */
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	struct dribble d;
	pthread_t t;
	int sv[2];

	pair(sv);
	d = (struct dribble){ sv[1], request, 23, 7, true };
	cr_assert_eq(pthread_create(&t, NULL, dribble_thread, &d), 0);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, sizeof(buf), 2000,
				   NULL), -ECONNRESET);
	pthread_join(t, NULL);
	close(sv[0]);
}

Test(glue_mpa, truncated_header_is_a_reset)
{
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	int sv[2];

	pair(sv);
	cr_assert_eq(write(sv[1], request, 10), 10);
	close(sv[1]);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, sizeof(buf), 1000,
				   NULL), -ECONNRESET);
	close(sv[0]);
}

Test(glue_mpa, bad_key_revision_length_refused_early)
{
	static const struct {
		uint8_t frame[20];
		size_t len;
		enum mpa_frame_type type;
		enum mpa_error err;
	} v[] = {
		/* Only "GET " of an HTTP request: refused without waiting
		 * for 20 octets. */
		{ { 'G', 'E', 'T', ' ' }, 4, MPA_REQUEST, MPA_ERR_BAD_KEY },
		{ { KEY_REQ, 0x00, 0x01, 0, 0 }, 20, MPA_REPLY,
		  MPA_ERR_BAD_KEY },
		{ { KEY_REP, 0x00, 0x07, 0, 0 }, 20, MPA_REPLY,
		  MPA_ERR_BAD_REV },
		{ { KEY_REP, 0x00, 0x02, 0x02, 0x01 }, 20, MPA_REPLY,
		  MPA_ERR_PD_LEN },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint8_t buf[GLUE_MPA_FRAME_MAX];
		enum mpa_error err;
		int sv[2];

		pair(sv);
		cr_assert_eq(write(sv[1], v[i].frame, v[i].len),
			     (ssize_t)v[i].len);
		cr_assert_eq(glue_mpa_read(sv[0], v[i].type, buf, sizeof(buf),
					   1000, &err), -EPROTO, "vector %zu", i);
		cr_assert_eq(err, v[i].err, "vector %zu", i);
		close(sv[0]);
		close(sv[1]);
	}
}

Test(glue_mpa, enhanced_flag_without_words_is_still_a_frame)
{
	/* S with PD_Length 0: the negotiation decides (a Reject Reply). */
	static const uint8_t frame[] = { KEY_REQ, 0x10, 0x02, 0x00, 0x00 };
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	enum mpa_error err;
	int sv[2];

	pair(sv);
	cr_assert_eq(write(sv[1], frame, sizeof(frame)), (ssize_t)sizeof(frame));
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, sizeof(buf), 1000,
				   &err), (int)sizeof(frame));
	cr_assert_eq(err, MPA_ERR_NONE);
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, small_buffer_and_bad_arguments)
{
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	int sv[2];

	pair(sv);
	cr_assert_eq(write(sv[1], request, sizeof(request)),
		     (ssize_t)sizeof(request));
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, 24, 1000, NULL),
		     -ENOBUFS);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, buf, 10, 1000, NULL),
		     -ENOBUFS);
	cr_assert_eq(glue_mpa_read(-1, MPA_REQUEST, buf, 64, 1000, NULL),
		     -EINVAL);
	cr_assert_eq(glue_mpa_read(sv[0], MPA_REQUEST, NULL, 64, 1000, NULL),
		     -EINVAL);
	cr_assert_eq(glue_mpa_write(-1, buf, 1, 1000), -EINVAL);
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, write_to_closed_peer_is_a_reset)
{
	int sv[2];

	pair(sv);
	close(sv[0]);
	cr_assert_eq(glue_mpa_write(sv[1], request, sizeof(request), 1000),
		     -ECONNRESET);
	close(sv[1]);
}

Test(glue_mpa, write_times_out_when_peer_does_not_read)
{
	static uint8_t big[8 << 20];
	int64_t t0;
	int sv[2];

	pair(sv);
	t0 = glue_mpa_now_ms();
	cr_assert_eq(glue_mpa_write(sv[1], big, sizeof(big), 100), -ETIMEDOUT);
	cr_assert_geq(glue_mpa_now_ms() - t0, 95);
	close(sv[0]);
	close(sv[1]);
}

Test(glue_mpa, connect_and_exchange_over_loopback)
{
	struct sockaddr_in sin;
	uint8_t buf[GLUE_MPA_FRAME_MAX];
	int l = loopback_listener(&sin, 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	int a;

	cr_assert_eq(glue_mpa_connect(c, (struct sockaddr *)&sin, sizeof(sin),
				      1000), 0);
	a = accept(l, NULL, NULL);
	cr_assert_geq(a, 0);
	cr_assert_eq(glue_mpa_write(c, request, sizeof(request), 1000), 0);
	cr_assert_eq(glue_mpa_read(a, MPA_REQUEST, buf, sizeof(buf), 1000,
				   NULL), (int)sizeof(request));
	close(a);
	close(c);
	close(l);
}

Test(glue_mpa, connect_refused_promptly)
{
	struct sockaddr_in sin;
	int l = loopback_listener(&sin, 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);

	/* The port was just in use and is now closed: nobody listens. */
	close(l);
	cr_assert_eq(glue_mpa_connect(c, (struct sockaddr *)&sin, sizeof(sin),
				      5000), -ECONNREFUSED);
	/* -ECONNREFUSED, not -ETIMEDOUT: the refusal ended the wait, not
	 * the 5 s deadline (no bound on the time: a loaded machine is slow). */
	close(c);
}

Test(glue_mpa, step_reader_never_blocks_and_stops_at_the_frame)
{
	/* The non-blocking reader a listener uses for many connections:
	 * -EAGAIN while the frame is incomplete (one octet at a time, as a
	 * slow peer sends it), then the frame, and the octets after it left
	 * in the socket. */
	static const uint8_t bad[] = { 'M', 'P', 'X' };
	uint8_t buf[GLUE_MPA_FRAME_MAX], next;
	struct glue_mpa_rd rd;
	enum mpa_error err;
	int sv[2];

	pair(sv);
	glue_mpa_rd_init(&rd, MPA_REQUEST, buf, sizeof(buf));
	cr_assert_eq(glue_mpa_rd_step(sv[0], &rd, &err), -EAGAIN);
	for (size_t i = 0; i + 1 < sizeof(request); i++) {
		cr_assert_eq(write(sv[1], &request[i], 1), 1);
		cr_assert_eq(glue_mpa_rd_step(sv[0], &rd, &err), -EAGAIN,
			     "after %zu octets", i + 1);
	}
	cr_assert_eq(write(sv[1], &request[sizeof(request) - 1], 1), 1);
	cr_assert_eq(write(sv[1], "F", 1), 1);
	cr_assert_eq(glue_mpa_rd_step(sv[0], &rd, &err),
		     (int)sizeof(request));
	cr_assert_eq(memcmp(buf, request, sizeof(request)), 0);
	cr_assert_eq(read(sv[0], &next, 1), 1);
	cr_assert_eq(next, 'F', "the next octet stays for the engine");

	/* A wrong key is refused at its first wrong octet. */
	glue_mpa_rd_init(&rd, MPA_REQUEST, buf, sizeof(buf));
	cr_assert_eq(write(sv[1], bad, sizeof(bad)), (ssize_t)sizeof(bad));
	cr_assert_eq(glue_mpa_rd_step(sv[0], &rd, &err), -EPROTO);
	cr_assert_eq(err, MPA_ERR_BAD_KEY);
	close(sv[1]);
	glue_mpa_rd_init(&rd, MPA_REQUEST, buf, sizeof(buf));
	cr_assert_eq(glue_mpa_rd_step(sv[0], &rd, &err), -ECONNRESET);
	close(sv[0]);
}
