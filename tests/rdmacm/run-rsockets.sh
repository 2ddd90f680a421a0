#!/usr/bin/env bash
# Debian's unmodified rsockets programs (rdmacm-utils: rstream, rcopy,
# riostream) over wisp's librdmacm, through scripts/wisp-run, server and
# client on loopback. Every process runs under timeout(1): a hang is a
# failure, never a stuck test run.
#
#   tests/rdmacm/run-rsockets.sh             all cases
#   tests/rdmacm/run-rsockets.sh CASE...     some cases
#   tests/rdmacm/run-rsockets.sh --list      the case names
#
# Environment: WISP_LIB_DIR (wisp's libibverbs.so.1 and librdmacm.so.1;
# default build/release/lib), WISP_TEST_LOGS (where the programs' output
# goes; default a temporary folder, kept on failure).
# Exit status: 0 all passed, 1 some failed, 77 rdmacm-utils not installed.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run="$top/scripts/wisp-run"
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-rsockets.XXXXXX)}
mkdir -p "$logs"
# shellcheck source=runner.sh
. "$top/tests/rdmacm/runner.sh"

# rstream's -T options: b blocking (MSG_WAITALL), n non-blocking sockets
# (O_NONBLOCK; without b every call is MSG_DONTWAIT), a rpoll before each
# call, v verify the data. Sizes are given (-S, -C) so that every case is
# bounded: rstream's own list of sizes runs 100000 round trips of each
# small size.
cases=(
	rstream_blocking_sizes rstream_blocking_all rstream_nonblocking
	rstream_dontwait rstream_async rstream_ipv6 rstream_rgai
	rcopy_file riostream_blocking riostream_latency
)

# rstream_case NAME LIMIT LINES ARGS...: rstream server and client with
# the same ARGS; each must print LINES result lines (after the header).
rstream_case() {
	local name=$1 limit=$2 lines=$3 n
	shift 3
	pick_port || return 1
	pair "$name" "$limit" rstream -p "$port" "$@" -- \
		rstream -s 127.0.0.1 -p "$port" "$@" || return 1
	for side in client server; do
		n=$(grep -cE '^[0-9a-z_]+ +[0-9.]+[kmg]? +[0-9.]+[kmg]? ' \
			"$logs/$name.$side")
		[ "$n" -eq "$lines" ] || {
			echo "$side printed $n result lines, not $lines" >&2
			return 1
		}
	done
}

# Blocking calls, data verified, sizes from 16 octets to 1 MiB (crossing
# the 64 KiB transfer limit and the send and receive buffers). Not below
# 16: rstream's start-up exchange sends 16 octets from a buffer of the
# size asked (AddressSanitizer reports rstream's own overflow).
rstream_blocking_sizes() {
	local s
	for s in 16 64 4000 65536 100000 1048576; do
		rstream_case "rstream_blocking_$s" 120 1 -T b -T v -S "$s" \
			-C 200 || return 1
	done
}

# rstream's own list (latency then bandwidth tests, 8 results) with
# blocking calls and verification.
rstream_blocking_all() {
	rstream_case rstream_blocking_all 300 8 -T b -T v
}

# O_NONBLOCK sockets: non-blocking rconnect (rpoll for POLLOUT, then
# SO_ERROR), raccept until it stops failing with EAGAIN, and every
# rsend / rrecv retried on EAGAIN.
rstream_nonblocking() {
	rstream_case rstream_nonblocking 120 1 -T n -T v -S 4096 -C 2000
}

# rstream's default: blocking sockets, every call MSG_DONTWAIT.
rstream_dontwait() {
	rstream_case rstream_dontwait 120 1 -T v -S 100000 -C 500
}

# rpoll before every call, on non-blocking sockets.
rstream_async() {
	rstream_case rstream_async 120 1 -T n -T a -T v -S 65536 -C 500
}

rstream_ipv6() {
	local n
	pick_port || return 1
	pair rstream_ipv6 120 rstream -b ::1 -p "$port" -T b -T v -S 4096 \
		-C 500 -- rstream -s ::1 -p "$port" -T b -T v -S 4096 -C 500 ||
		return 1
	n=$(grep -c '^custom' "$logs/rstream_ipv6.client")
	[ "$n" -eq 1 ] || { echo "client printed no result" >&2; return 1; }
}

# Addresses from rdma_getaddrinfo (-T r), which also hands rstream an
# RDMA_ROUTE option to set.
rstream_rgai() {
	rstream_case rstream_rgai 120 1 -T r -T b -T v -S 1000 -C 500
}

# rcopy: a file of random octets copied to the server, compared. The
# server serves until it is killed, by design.
rcopy_file() {
	local src="$logs/rcopy.src" dst="$logs/rcopy.dst" spid rc
	pick_port || return 1
	head -c 3000001 /dev/urandom >"$src"
	rm -f "$dst"
	timeout 120 "$run" rcopy -p "$port" >"$logs/rcopy.server" 2>&1 &
	spid=$!
	if ! wait_listen "$port" "$spid"; then
		echo "rcopy server did not listen on $port" >&2
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		return 1
	fi
	timeout 120 "$run" rcopy "$src" "127.0.0.1:$dst" -p "$port" \
		>"$logs/rcopy.client" 2>&1
	rc=$?
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	[ "$rc" -eq 0 ] || { echo "rcopy client exit $rc" >&2; cat "$logs/rcopy.client" >&2; return 1; }
	cmp "$src" "$dst" || return 1
	grep -q "3000001 bytes" "$logs/rcopy.server" || {
		echo "the server did not report the file" >&2
		return 1
	}
}

# riostream: riomap on both sides, riowrite into the peer's mapping, the
# receiver watching its memory for the last octet.
riostream_blocking() {
	local n
	pick_port || return 1
	pair riostream_blocking 120 riostream -p "$port" -T b -T v \
		-S 100000 -C 200 -- riostream -s 127.0.0.1 -p "$port" -T b \
		-T v -S 100000 -C 200 || return 1
	n=$(grep -c '^custom' "$logs/riostream_blocking.client")
	[ "$n" -eq 1 ] || { echo "client printed no result" >&2; return 1; }
}

riostream_latency() {
	pick_port || return 1
	pair riostream_latency 120 riostream -p "$port" -S 64 -C 1 -I 500 -- \
		riostream -s 127.0.0.1 -p "$port" -S 64 -C 1 -I 500
}

if [ "${1:-}" = --list ]; then
	printf '%s\n' "${cases[@]}"
	exit 0
fi
if ! need rstream || ! need rcopy || ! need riostream; then
	echo "rdmacm-utils (rstream, rcopy, riostream) not installed: skipped"
	exit 77
fi
if ! need ss; then
	echo "ss (iproute2) not installed: skipped"
	exit 77
fi
export WISP_LIB_DIR=${WISP_LIB_DIR:-$top/build/release/lib}

asan_preload "$WISP_LIB_DIR"

selected=("${cases[@]}")
[ $# -gt 0 ] && selected=("$@")
passed=0 failed=0
run_cases rsockets_programs "" "${selected[@]}"
echo "rsockets programs: $passed passed, $failed failed (logs: $logs)"
[ "$failed" -eq 0 ] || exit 1
[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
exit 0
