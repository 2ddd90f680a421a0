#!/usr/bin/env bash
# Debian's unmodified perftest programs (ib_send_bw, ib_write_bw,
# ib_read_bw, ib_send_lat, ib_write_lat) over wisp with -R (rdma_cm),
# through scripts/wisp-run, on 127.0.0.1. Every process runs under
# timeout(1) and every run is bounded by -n: a hang is a failure, never a
# stuck test run.
#
#   tests/rdmacm/run-perftest.sh             all cases
#   tests/rdmacm/run-perftest.sh CASE...     some cases
#   tests/rdmacm/run-perftest.sh --list      the case names
#
# Environment: WISP_LIB_DIR (the folder with wisp's libibverbs.so.1 and
# librdmacm.so.1; default build/release/lib), WISP_TEST_LOGS (where the
# programs' output goes; default a temporary folder, kept on failure).
# Exit status: 0 all passed (or skipped), 1 some failed, 77 perftest not
# installed.
#
# IPv6: perftest 4.5 (Debian 12's 4.5+0.17) connects over rdma_cm with
# IPv4 only: it resolves the server name with getaddrinfo(ai_family =
# AF_INET) into a struct sockaddr_in (rdma_client_connect and
# rdma_cm_get_rdma_address in src/perftest_communication.c), and its server
# binds 0.0.0.0. Given ::1 the client stops before any rdma_cm call with
# "Address family for hostname not supported". The *_ipv6 cases check for
# exactly that and are then SKIPPED; with a perftest that takes ::1 they
# run for real.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run="$top/scripts/wisp-run"
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-perftest.XXXXXX)}
mkdir -p "$logs"
# shellcheck source=runner.sh
. "$top/tests/rdmacm/runner.sh"

cases=(
	send_bw_8 send_bw_4k send_bw_64k send_bw_1m
	write_bw_8 write_bw_4k write_bw_64k write_bw_1m
	read_bw_8 read_bw_4k read_bw_64k read_bw_1m
	send_lat_8 send_lat_4k write_lat_8 write_lat_4k
	write_bw_crc read_bw_epoll send_lat_crc_epoll
	send_bw_ipv6 write_lat_ipv6
	tls_write_bw_64k tls_read_bw_64k tls_send_bw_64k tls_send_lat_8
)

# Skipped, not failed: a case function returns this.
SKIP=77

# wait_listen PORT PID: until something listens on TCP PORT (while
# process PID lives; 30 s at most, a hang guard).
wait_listen() {
	for _ in $(seq 300); do
		kill -0 "$2" 2>/dev/null || return 1
		if need ss; then
			[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
		fi
		sleep 0.1
	done
	need ss || return 0
	return 1
}

# A fresh port for each server (ports.sh): never one that another
# program, or a runner of another build, uses.
next_port() {
	pick_port
}

# result_line FILE: the line under perftest's " #bytes ..." header.
result_line() {
	awk '/^ *#bytes/ { if ((getline l) > 0) print l; exit }' "$1"
}

# untimed NAME: perftest could not time the run. It converts cycles to
# time with a clock rate it measures at the end (get_cpu_mhz in
# src/get_clock.c: a linear fit of TSC against gettimeofday over short busy
# waits); when the process is descheduled during that fit it prints
# "Correlation coefficient r^2: X < 0.9", and with -F goes on with a rate
# of 0: bandwidths of 0, latencies of inf. A loaded machine does that, not
# the transport; the figures are then not checked, the row's size and
# iteration count still are (perftest prints the row only after the
# last iteration completed).
untimed() {
	grep -qh "Correlation coefficient r^2" "$logs/$1".*.err
}

# check_bw FILE SIZE ITERS [untimed]: "#bytes #iterations BW-peak
# BW-average MsgRate" with the right size and count and a non-zero average
# and message rate (the figures unchecked if untimed).
check_bw() {
	local line
	line=$(result_line "$1")
	[ -n "$line" ] || { echo "$1: no result table" >&2; return 1; }
	awk -v s="$2" -v n="$3" -v u="${4:-}" '{
		if ($1 != s || $2 != n) exit 1
		if (u == "" && (!($4 > 0) || !($5 > 0))) exit 1
	}' <<<"$line" || {
		echo "$1: bad result line (want $2 bytes, $3 iterations," \
			"non-zero BW and rate): $line" >&2
		return 1
	}
}

# check_lat FILE SIZE ITERS [untimed]: "#bytes #iterations t_min t_max
# t_typical t_avg ..." in microseconds: right size and count, 0 < t_min <=
# t_typical <= t_max (the figures unchecked if untimed). No upper bound:
# how long a round trip takes on a loaded machine is the scheduler's.
check_lat() {
	local line
	line=$(result_line "$1")
	[ -n "$line" ] || { echo "$1: no result table" >&2; return 1; }
	awk -v s="$2" -v n="$3" -v u="${4:-}" '{
		if ($1 != s || $2 != n) exit 1
		if (u == "" && (!($3 > 0) || $3 > $5 || $5 > $4)) exit 1
	}' <<<"$line" || {
		echo "$1: bad result line (want $2 bytes, $3 iterations," \
			"0 < t_min <= t_typical <= t_max): $line" >&2
		return 1
	}
}

# no_errors FILE...: none of perftest's failure lines.
no_errors() {
	if grep -E "Failed|Couldn't|Unable|[Ee]rror|ERR" "$@" >&2; then
		echo "(failure lines above, from $*)" >&2
		return 1
	fi
}

# perf_pair NAME PROGRAM SIZE ITERS ADDR [VAR=VALUE...]: server and client
# of PROGRAM -R, both with the environment given; both must exit 0 in time,
# print a sane result table and no failure line. stdout and stderr are kept
# apart (NAME.{server,client}.{out,err}) so that wisp's log lines never
# split a table line.
perf_pair() {
	local name=$1 prog=$2 size=$3 iters=$4 addr=$5 spid src crc f kind u
	shift 5
	next_port || return 1
	env "$@" true || return 1
	# -F: a failed clock calibration (see untimed) is not an exit.
	local args=(-R -F -p "$port" -s "$size" -n "$iters")
	timeout 30 env "$@" "$run" "$prog" "${args[@]}" \
		>"$logs/$name.server.out" 2>"$logs/$name.server.err" &
	spid=$!
	if ! wait_listen "$port" "$spid"; then
		echo "server did not listen on $port" >&2
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		cat "$logs/$name.server.err" >&2
		return 1
	fi
	# The client's second connection waits for the server's second
	# listener (await-listener.c says why).
	timeout 30 env "$@" ${await:+LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$await"} \
		"$run" "$prog" "${args[@]}" "$addr" \
		>"$logs/$name.client.out" 2>"$logs/$name.client.err"
	crc=$?
	# A client that failed leaves its server waiting: 10 s more at most.
	for _ in $(seq 100); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$spid" 2>/dev/null
	wait "$spid"
	src=$?
	if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
		echo "client exit $crc, server exit $src (logs: $logs/$name.*)" >&2
		tail -n 5 "$logs/$name".* >&2
		return 1
	fi
	no_errors "$logs/$name".* || return 1
	case $prog in
	*_lat) kind=check_lat ;;
	*) kind=check_bw ;;
	esac
	u=
	if untimed "$name"; then
		u=untimed
		echo "($name: perftest could not calibrate its clock under load:" \
			"$(grep -h -m1 'Correlation coefficient' "$logs/$name".*.err);" \
			"figures not checked)"
	fi
	for f in "$logs/$name.client.out" "$logs/$name.server.out"; do
		$kind "$f" "$size" "$iters" $u || return 1
	done
}

# Iterations: enough for a steady figure, few enough that the whole run
# stays well under 3 minutes on 2 cores (each pair takes 0.5 s to 2 s).
bw() { perf_pair "$1" "$2" "$3" "$4" 127.0.0.1; }
send_bw_8() { bw send_bw_8 ib_send_bw 8 1000; }
send_bw_4k() { bw send_bw_4k ib_send_bw 4096 1000; }
send_bw_64k() { bw send_bw_64k ib_send_bw 65536 500; }
send_bw_1m() { bw send_bw_1m ib_send_bw 1048576 200; }
write_bw_8() { bw write_bw_8 ib_write_bw 8 1000; }
write_bw_4k() { bw write_bw_4k ib_write_bw 4096 1000; }
write_bw_64k() { bw write_bw_64k ib_write_bw 65536 500; }
write_bw_1m() { bw write_bw_1m ib_write_bw 1048576 200; }
read_bw_8() { bw read_bw_8 ib_read_bw 8 1000; }
read_bw_4k() { bw read_bw_4k ib_read_bw 4096 1000; }
read_bw_64k() { bw read_bw_64k ib_read_bw 65536 500; }
read_bw_1m() { bw read_bw_1m ib_read_bw 1048576 200; }
send_lat_8() { bw send_lat_8 ib_send_lat 8 1000; }
send_lat_4k() { bw send_lat_4k ib_send_lat 4096 1000; }
# ib_write_lat waits for the peer's Write by spinning on memory, not on a
# CQ, so over wisp each Write is placed by the receiver's engine thread,
# which a loaded machine schedules late (and which leaves a socket alone
# for GLUE_APP_POLL_MS after the application last polled a CQ itself).
# Measured with two busy loops beside: median round trip 9-25 ms against
# 5 us for ib_send_lat, so 1000 iterations ran into the 30 s hang guard.
# 200 iterations keep the guard a guard against hangs.
write_lat_8() { bw write_lat_8 ib_write_lat 8 200; }
write_lat_4k() { bw write_lat_4k ib_write_lat 4096 200; }

# crc_on NAME: every connection of both sides ran with CRC32c (WISP_LOG=info
# prints "established, MPA rev 2, CRC on|off, ..." per connection; perftest
# 4.5 makes two, the control id and the data QP).
crc_on() {
	local f n
	for f in "$logs/$1.server.err" "$logs/$1.client.err"; do
		n=$(grep -c "established, .*CRC on" "$f")
		[ "$n" -ge 1 ] && ! grep -q "established, .*CRC off" "$f" ||
			{ echo "$f: not every connection has CRC on" >&2; return 1; }
	done
}

# CRC asked for by the client only: the server must honour it.
write_bw_crc() {
	perf_pair write_bw_crc ib_write_bw 65536 500 127.0.0.1 \
		WISP_CRC=1 WISP_LOG=info || return 1
	crc_on write_bw_crc
}
read_bw_epoll() {
	perf_pair read_bw_epoll ib_read_bw 65536 500 127.0.0.1 WISP_ENGINE=epoll
}
send_lat_crc_epoll() {
	perf_pair send_lat_crc_epoll ib_send_lat 8 1000 127.0.0.1 \
		WISP_ENGINE=epoll WISP_CRC=1 WISP_LOG=info || return 1
	crc_on send_lat_crc_epoll
}

# ::1: perftest 4.5 refuses it itself (see the top of this file). Ask the
# client alone first; only a perftest that gets past name resolution (it
# then fails to connect, nobody listens yet) is run as a pair.
ipv6() {
	local name=$1 prog=$2 size=$3 iters=$4
	next_port || return 1
	timeout 10 "$run" "$prog" -R -p "$port" -n 5 ::1 \
		>"$logs/$name.probe" 2>&1
	if grep -q "Address family for hostname not supported" "$logs/$name.probe"; then
		echo "($prog: perftest $(perftest_version) takes IPv4 only with -R:" \
			"\"$(grep -m1 'Address family' "$logs/$name.probe")\")"
		return $SKIP
	fi
	perf_pair "$name" "$prog" "$size" "$iters" ::1
}
send_bw_ipv6() { ipv6 send_bw_ipv6 ib_send_bw 65536 500; }
write_lat_ipv6() { ipv6 write_lat_ipv6 ib_write_lat 8 200; }

# TLS 1.3 under MPA (docs/tls.md) with a PSK made by scripts/wisp-tls-psk;
# WISP_LOG=info logs each connection's TLS version and cipher: both sides
# must show TLS 1.3 with AES-128-GCM for every connection.
tls_env() {
	local psk=$logs/tls.psk
	[ -f "$psk" ] || "$top/scripts/wisp-tls-psk" "$psk" >&2 || return 1
	echo WISP_TLS=required WISP_TLS_PSK_FILE="$psk" \
		WISP_TLS_PSK_IDENTITY=wisp-perftest
}
tls_pair() {
	local env
	env=$(tls_env) || return 1
	# shellcheck disable=SC2086
	perf_pair "$1" "$2" "$3" "$4" 127.0.0.1 $env WISP_LOG=info || return 1
	grep -q "TLSv1.3 TLS_AES_128_GCM_SHA256" "$logs/$1.server.err" &&
		grep -q "TLSv1.3 TLS_AES_128_GCM_SHA256" "$logs/$1.client.err" ||
		{ echo "$1: no TLS 1.3 AES-128-GCM connection logged" >&2; return 1; }
}
tls_write_bw_64k() { tls_pair tls_write_bw_64k ib_write_bw 65536 500; }
tls_read_bw_64k() { tls_pair tls_read_bw_64k ib_read_bw 65536 500; }
tls_send_bw_64k() { tls_pair tls_send_bw_64k ib_send_bw 65536 500; }
tls_send_lat_8() { tls_pair tls_send_lat_8 ib_send_lat 8 1000; }

perftest_version() {
	dpkg-query -W -f '${Version}' perftest 2>/dev/null || echo "?"
}

case "${1:-}" in
--list)
	printf '%s\n' "${cases[@]}"
	exit 0
	;;
-h|--help)
	sed -n '2,25p' "$0"
	exit 0
	;;
esac

for p in ib_send_bw ib_write_bw ib_read_bw ib_send_lat ib_write_lat; do
	if ! need "$p"; then
		echo "perftest: $p not installed (apt-get install perftest): skipped"
		exit 77
	fi
done

libdir=${WISP_LIB_DIR:-$top/build/release/lib}
asan_preload "$libdir"

# perftest's clients get await-listener.so (built next to the suites:
# tests/rdmacm/CMakeLists.txt passes it as WISP_AWAIT_LISTENER).
await=${WISP_AWAIT_LISTENER:-$libdir/../tests/rdmacm/await-listener.so}
if [ ! -e "$await" ]; then
	echo "warning: $await missing: perftest's second connection may be" \
		"refused when its server is slow to listen again" >&2
	await=
fi

selected=("$@")
[ ${#selected[@]} -gt 0 ] || selected=("${cases[@]}")
passed=0
failed=0
skipped=0
run_cases perftest_programs "$SKIP" "${selected[@]}"
if [ "$failed" -eq 0 ]; then
	echo "perftest: $passed passed, 0 failed, $skipped skipped"
	[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
	exit 0
fi
echo "perftest: $passed passed, $failed failed, $skipped skipped (logs in $logs)"
exit 1
