#!/usr/bin/env bash
# Goodput of wisp-repl over wisp on loopback, each --mode, next to raw TCP
# measured in the same run: iperf3 memory to memory, and iperf3 -F (a
# file read on one side, written on the other: a raw TCP file copy).
#
#   demos/replicate/bench.sh [SIZE_MIB] [DIR]
#
# SIZE_MIB defaults to 1024; DIR (where source and copies go) defaults to
# a folder in /dev/shm so that the figures are the network path's, not a
# disk's. Needs iperf3 for the baselines. Run by hand; not in the tests.
#
# Across the emulated WAN (tests/wan/wan.sh up ... --srv S --cli C):
# REPL_SRV_NS=S REPL_CLI_NS=C REPL_HOST=198.18.0.1 demos/replicate/bench.sh
# runs the receivers and iperf3 -s in S, the senders and iperf3 -c in C.
# REPL_ARGS: more options for every send (e.g. "--window 4").
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run="$top/scripts/wisp-run"
repl=${WISP_REPL:-$top/build/release/demos/replicate/wisp-repl}
size=${1:-1024}
base=${2:-/dev/shm}
work=$(mktemp -d "$base/wisp-repl-bench.XXXXXX")
# shellcheck source=../../tests/rdmacm/ports.sh
. "$top/tests/rdmacm/ports.sh"
host=${REPL_HOST:-127.0.0.1}
read -ra extra <<<"${REPL_ARGS:-}"
in_srv=() in_cli=()
[ -z "${REPL_SRV_NS:-}" ] || in_srv=(ip netns exec "$REPL_SRV_NS")
[ -z "${REPL_CLI_NS:-}" ] || in_cli=(ip netns exec "$REPL_CLI_NS")
spid=
trap '[ -z "$spid" ] || kill "$spid" 2>/dev/null; rm -rf "$work"' EXIT


head -c $((size * 1024 * 1024)) /dev/urandom >"$work/src"
bytes=$((size * 1024 * 1024))
printf '%-28s %10s %8s\n' "what" "MB/s" "seconds"

for mode in write read send; do
	for streams in 1 4; do
		rm -rf "$work/dst"
		mkdir "$work/dst"
		pick_port || exit 1
		"${in_srv[@]}" "$run" "$repl" serve "$work/dst" --port "$port" --once \
			>/dev/null 2>&1 &
		spid=$!
		wait_listen "$port" "$spid" "${REPL_SRV_NS:-}" || exit 1
		out=$(timeout 600 "${in_cli[@]}" "$run" "$repl" send "$work/src" "$host": \
			--port "$port" --mode "$mode" --streams "$streams" --json "${extra[@]}")
		wait "$spid"
		spid=
		cmp -s "$work/src" "$work/dst/src" || { echo "$mode: copy differs"; exit 1; }
		python3 - "$out" "wisp-repl $mode x$streams" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])
print("%-28s %10.1f %8.2f" % (sys.argv[2], j["bytes_sent"] / j["seconds"] / 1e6, j["seconds"]))
EOF
	done
done

if command -v iperf3 >/dev/null; then
	for what in mem file; do
		pick_port || exit 1
		rm -f "$work/iperf.out"
		if [ $what = file ]; then
			"${in_srv[@]}" iperf3 -s -1 -p "$port" -F "$work/iperf.out" >/dev/null 2>&1 &
		else
			"${in_srv[@]}" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
		fi
		spid=$!
		wait_listen "$port" "$spid" "${REPL_SRV_NS:-}" || exit 1
		if [ $what = file ]; then
			j=$("${in_cli[@]}" iperf3 -c "$host" -p "$port" -F "$work/src" -n "$bytes" -J)
		else
			j=$("${in_cli[@]}" iperf3 -c "$host" -p "$port" -n "$bytes" -J)
		fi
		wait "$spid"
		spid=
		python3 - "$j" "iperf3 TCP ($what)" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])["end"]["sum_received"]
print("%-28s %10.1f %8.2f" % (sys.argv[2], j["bits_per_second"] / 8e6, j["seconds"]))
EOF
	done
fi
