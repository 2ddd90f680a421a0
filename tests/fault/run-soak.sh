#!/usr/bin/env bash
# Soak: N connected QPs in one server process and one client process
# (fault_peer soak), idle, then all busy with a slow consumer (the server
# reposts receives once per sweep with a 5 ms pause; the client SENDs
# whenever it holds a credit). Each side prints its RSS per QP when idle
# (a figure, not asserted) and fails if RSS keeps growing while busy or
# nothing moved.
#
#   tests/fault/run-soak.sh FAULT_PEER [QPS [BUSY_SECONDS]]
#
# CI runs 200 QPs for 5 s; docs/testing.md has the 1,000-QP run.
# The descriptor limit is raised by fault_peer itself (setrlimit, up to
# the hard limit, as any user may).
set -uo pipefail

fp=${1:-}
n=${2:-200}
busy=${3:-5}
[ -x "$fp" ] || { echo "usage: $0 FAULT_PEER [QPS [BUSY_SECONDS]]" >&2; exit 2; }
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-soak.XXXXXX)}
mkdir -p "$logs"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../rdmacm/ports.sh
. "$here/../rdmacm/ports.sh"
pick_port || exit 1
limit=$((60 + n / 5 + busy))

hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt $((2 * n + 64)) ]; then
	echo "soak: the hard descriptor limit ($hard) is below $((2 * n + 64)): skipped"
	exit 77
fi

timeout $limit "$fp" -n "$n" -S "$busy" server 127.0.0.1 $port soak send \
	>"$logs/server" 2>&1 &
sp=$!
wait_listen $port $sp || echo "soak: the server does not listen on $port" >&2
timeout $limit "$fp" -n "$n" -S "$busy" client 127.0.0.1 $port soak send \
	>"$logs/client" 2>&1
crc=$?
wait $sp
src=$?
sed 's/^/server: /' "$logs/server"
sed 's/^/client: /' "$logs/client"
if [ $crc -eq 0 ] && [ $src -eq 0 ]; then
	echo "[PASS] soak::qps_$n"
	[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
	exit 0
fi
echo "[FAIL] soak::qps_$n (client exit $crc, server exit $src; logs in $logs)"
exit 1
