/* SPDX-License-Identifier: MIT */
/*
 * wisp-repl: command line.
 *
 *   wisp-repl serve DIR [--port P] [--bind ADDR] [--window N] [--once] [-v]
 *   wisp-repl send SRC HOST:[DIR] [--port P] [--mode write|read|send]
 *             [--chunk SIZE] [--window N] [--streams N] [--limit RATE]
 *             [--json] [--timeout S] [-v]
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "repl.h"

static void usage(FILE *f)
{
	fputs("usage: wisp-repl serve DIR [options]\n"
	      "       wisp-repl send SRC HOST:[DIR] [options]\n"
	      "\n"
	      "  --port P         TCP port (default 7470)\n"
	      "  --bind ADDR      serve: listen on ADDR (default all IPv4)\n"
	      "  --once           serve: exit after one job (status of that job)\n"
	      "  --mode M         send: write (RDMA WRITE + credits, default),\n"
	      "                   read (receiver pulls with RDMA READ), send (SEND/RECV)\n"
	      "  --chunk SIZE     send: chunk size (default 1M)\n"
	      "  --window N       chunk slots in flight (send: asked; serve: most granted)\n"
	      "  --streams N      send: QPs sharing the chunks (default 1, at most 16)\n"
	      "  --limit RATE     send: pace to RATE (e.g. 500M bytes/s, 1gbit)\n"
	      "  --json           send: print a JSON summary at the end\n"
	      "  --timeout S      connect and silence timeout in seconds (default 30)\n"
	      "  -v               say more on stderr\n"
	      "\n"
	      "SRC is a file, a folder or a block device (a disk image, copied to a\n"
	      "regular file), copied as DIR/basename(SRC). HOST may be\n"
	      "[v6addr]. Exit: 0 done, 2 usage, 3 cannot connect, 4 source error,\n"
	      "5 storage error, 6 connection lost, 7 integrity (source changed).\n", f);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "bind", required_argument, NULL, 'b' },
		{ "once", no_argument, NULL, 'o' },
		{ "mode", required_argument, NULL, 'm' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "window", required_argument, NULL, 'w' },
		{ "streams", required_argument, NULL, 's' },
		{ "limit", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct opts o = {
		.port = REPL_PORT, .chunk = 1u << 20, .streams = 1,
		.timeout_ms = 30000,
	};
	const char *cmd;
	double v;
	int c;

	if (argc < 2) {
		usage(stderr);
		return EX_USAGE;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		usage(stdout);
		return EX_OK;
	}
	optind = 2;
	while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			o.port = atoi(optarg);
			if (o.port <= 0 || o.port > 65535)
				die_msg(EX_USAGE, "bad port %s", optarg);
			break;
		case 'b':
			o.host = optarg;
			break;
		case 'o':
			o.once = 1;
			break;
		case 'm':
			if (!strcmp(optarg, "write"))
				o.mode = MODE_WRITE;
			else if (!strcmp(optarg, "read"))
				o.mode = MODE_READ;
			else if (!strcmp(optarg, "send"))
				o.mode = MODE_SEND;
			else
				die_msg(EX_USAGE, "--mode: write, read or send");
			break;
		case 'c':
			if (parse_size(optarg, &v) || v < 4096 || v > 64 << 20 ||
			    (uint64_t)v % 4096)
				die_msg(EX_USAGE, "--chunk: 4K..64M, a multiple of 4K");
			o.chunk = (uint32_t)v;
			break;
		case 'w':
			o.window = atoi(optarg);
			if (o.window < 1 || o.window > REPL_MAX_WINDOW)
				die_msg(EX_USAGE, "--window: 1..%d", REPL_MAX_WINDOW);
			break;
		case 's':
			o.streams = atoi(optarg);
			if (o.streams < 1 || o.streams > REPL_MAX_STREAMS)
				die_msg(EX_USAGE, "--streams: 1..%d", REPL_MAX_STREAMS);
			break;
		case 'l':
			if (parse_size(optarg, &o.limit) || o.limit <= 0)
				die_msg(EX_USAGE, "--limit: e.g. 100M (bytes/s) or 1gbit");
			break;
		case 'j':
			o.json = 1;
			break;
		case 't':
			o.timeout_ms = atoi(optarg) * 1000;
			if (o.timeout_ms <= 0)
				die_msg(EX_USAGE, "--timeout: seconds, > 0");
			break;
		case 'v':
			o.verbose = 1;
			break;
		case 'h':
			usage(stdout);
			return EX_OK;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (!strcmp(cmd, "serve")) {
		if (argc - optind != 1) {
			usage(stderr);
			return EX_USAGE;
		}
		o.dir = argv[optind];
		return run_receiver(&o);
	}
	if (!strcmp(cmd, "send")) {
		char *dst, *colon;

		if (argc - optind != 2) {
			usage(stderr);
			return EX_USAGE;
		}
		o.src = argv[optind];
		dst = strdup(argv[optind + 1]);
		if (dst[0] == '[') {
			char *rb = strchr(dst, ']');

			if (!rb || rb[1] != ':')
				die_msg(EX_USAGE, "destination: [ADDR]:DIR");
			*rb = 0;
			o.host = dst + 1;
			colon = rb + 1;
		} else {
			colon = strchr(dst, ':');
			if (!colon)
				die_msg(EX_USAGE, "destination: HOST:DIR");
			*colon = 0;
			o.host = dst;
		}
		o.rdir = colon[1] && strcmp(colon + 1, ".") ? colon + 1 : NULL;
		c = run_sender(&o);
		free(dst);
		return c;
	}
	usage(stderr);
	return EX_USAGE;
}
