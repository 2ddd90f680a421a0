/* SPDX-License-Identifier: MIT */
/*
 * glue_mpa.h - blocking socket I/O of the MPA startup phase (RFC 5044
 * section 7.1): the TCP connect of the Initiator and the exchange of one
 * MPA Request or Reply frame, each bounded by a timeout.
 *
 * The connection manager uses these before it hands the socket to a QP
 * (wisp_qp_attach_stream), so they never read past the end of a frame:
 * what follows it is the first FPDU and belongs to the engine.
 *
 * Every function returns 0 (or a length) or a negative errno:
 *   -ETIMEDOUT    the deadline passed;
 *   -ECONNRESET   the peer closed or reset the connection (a frame cut
 *                 short by the peer's close is reported this way);
 *   -EPROTO       not an MPA frame of the expected type (bad key,
 *                 revision or PD_Length; *err names it);
 *   other         what the socket call reported.
 * A timeout_ms below 0 waits forever. The socket may be blocking or not;
 * its file status flags are left as they were.
 */
#ifndef WISP_GLUE_MPA_H
#define WISP_GLUE_MPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "mpa.h"

/* Room for any Request or Reply frame. */
#define GLUE_MPA_FRAME_MAX  (MPA_RR_HDR_LEN + MPA_PD_MAX)

/* Milliseconds of CLOCK_MONOTONIC, for deadlines. */
int64_t glue_mpa_now_ms(void);

/*
 * Connect the TCP socket fd (fresh, possibly bound) to addr within
 * timeout_ms. Returns 0, -ETIMEDOUT, -ECONNREFUSED (nobody listens),
 * -ENETUNREACH / -EHOSTUNREACH, or another connect(2) error.
 */
int glue_mpa_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
		     int timeout_ms);

/*
 * The same in two steps, for a caller that serves many sockets without
 * blocking: glue_mpa_connect_start() makes fd non-blocking (it stays so)
 * and starts the connect; glue_mpa_connect_result() tells, once fd is
 * writable, how it ended. Both return 0 (connected), -EINPROGRESS (not
 * yet) or the connect(2) error as -errno.
 */
int glue_mpa_connect_start(int fd, const struct sockaddr *addr,
			   socklen_t addrlen);
int glue_mpa_connect_result(int fd);

/* glue_mpa_connect_start() for a socket known to be non-blocking: the
 * connect alone, no F_GETFL. Same returns. */
int glue_mpa_connect_nb(int fd, const struct sockaddr *addr,
			socklen_t addrlen);

/* One non-blocking send of up to len octets of buf: the octets taken,
 * -EAGAIN (no room, or the connect still under way), or the error as
 * -errno (-ECONNRESET for EPIPE; a failed connect's own error). */
long glue_mpa_send_some(int fd, const void *buf, size_t len);

/* Write all len octets of buf (one frame) within timeout_ms. Returns 0,
 * -ETIMEDOUT or -ECONNRESET (also for EPIPE). */
int glue_mpa_write(int fd, const void *buf, size_t len, int timeout_ms);

/*
 * Read exactly one frame of the given type into buf[0..cap): the 20-octet
 * header, then PD_Length octets (at most MPA_PD_MAX). The header is
 * checked as it arrives (key, revision, PD_Length, RFC 5044 7.1.1); the
 * private data is not interpreted. Returns the frame length, -ETIMEDOUT,
 * -ECONNRESET, -EPROTO with *err set, -ENOBUFS if cap cannot hold the
 * frame, -EINVAL for bad arguments. err may be NULL.
 */
int glue_mpa_read(int fd, enum mpa_frame_type type, uint8_t *buf,
		  size_t cap, int timeout_ms, enum mpa_error *err);

/*
 * The same without blocking, for a thread that serves many connections:
 * a frame read in steps. glue_mpa_rd_init() prepares rd to read one frame
 * of type into buf[0..cap); each glue_mpa_rd_step() receives what the
 * socket holds (never past the frame) and returns the frame length once
 * it is complete, -EAGAIN while more is needed (wait for POLLIN), or
 * glue_mpa_read()'s errors. The caller keeps its own deadline.
 */
struct glue_mpa_rd {
	enum mpa_frame_type type;
	uint8_t *buf;
	size_t cap;
	size_t got;               /* octets in buf */
	size_t total;             /* frame length once the header is in */
	bool have_hdr;
};
void glue_mpa_rd_init(struct glue_mpa_rd *rd, enum mpa_frame_type type,
		      uint8_t *buf, size_t cap);
int glue_mpa_rd_step(int fd, struct glue_mpa_rd *rd, enum mpa_error *err);

/*
 * How long an initiator waits by default after a good MPA Reply before its
 * first FPDU (the RTR, or the first ULP message), and the call that waits
 * (ms 0: not at all).
 *
 * RFC 5044 7.1.2 and RFC 6581 9.3 allow the first FPDU right after the
 * Reply. Linux siw (6.1, siw_accept) only starts reading FPDUs a moment
 * after it sent its Reply: an FPDU that lands in between is left unread
 * until more data comes, so a peer-to-peer RTR goes unanswered and the
 * connection hangs (docs/interop.md measured 8-16 of 20 at once, none of
 * 20 with 1, 5 or 20 ms). 10 ms costs a connection little. An RTR that
 * still goes unanswered is nudged by the QP (rdmap_qp_tick).
 */
#define GLUE_MPA_INITIATOR_HOLD_MS 10
#define GLUE_MPA_INITIATOR_HOLD_MAX_MS 1000
void glue_mpa_initiator_hold(int ms);

#endif /* WISP_GLUE_MPA_H */
