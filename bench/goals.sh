#!/usr/bin/env bash
# Every bandwidth and latency goal of docs/benchmarks.md, measured on both
# paths in one go: loopback, and a veth link at MTU 1500 between two
# network namespaces (scripts/netns-link.sh). Each figure is wisp next to
# raw TCP in the same run (wisp_bench alternates them), CRC on and off;
# then the connection rate. bench/goals.py turns the CSVs into the goals
# table and the chart.
#
#   bench/goals.sh [OUTDIR]        (root: the namespaces need it)
#
# OUTDIR (default /tmp/wisp-goals.<time>) gets loopback.csv, mtu1500.csv
# (two wisp peers: FPDUs up to 64 KiB through WISP_BIG_FPDU),
# mtu1500-mss.csv (WISP_BIG_FPDU=off: FPDUs that fit one segment, as a
# third-party peer gets them), loopback-busy.csv and mtu1500-busy.csv
# (WRITE 64 KiB beside a CPU-bound busy loop), connrate.txt, soak.txt
# (resident memory per idle QP, 1,000 connected QPs: tests/fault/
# run-soak.sh), the programs' output (*.log; every repeat's figure of
# each wisp_bench run in *.runs, where a SEND ratio that compares two
# scheduling levels shows: docs/performance-log.md, "Which level a run lands
# on"), goals.md and goals.png.
# Environment: WISP_BUILD_DIR (a Release build, default build/release;
# built if its binaries are missing), GOALS_REPEAT (default 3: best of
# three, wisp and TCP alternating), GOALS_SECONDS (default 2),
# GOALS_ENGINE (default uring; "both" doubles the time), GOALS_CONN
# (connections for wisp_connrate, default 1000; 0 leaves it out),
# GOALS_QPS (idle QPs for the memory figure, default 1000; 0 leaves it
# out).
# About 10 minutes with the defaults. Run it on a quiet machine: the
# ratios hold up under load better than the absolute figures, but not
# much better (docs/benchmarks.md, "Reading the figures").
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WISP_BUILD_DIR:-$top/build/release}
out=${1:-/tmp/wisp-goals.$(date -u +%Y%m%dT%H%M%S)}
repeat=${GOALS_REPEAT:-3}
seconds=${GOALS_SECONDS:-2}
engine=${GOALS_ENGINE:-uring}
nconn=${GOALS_CONN:-1000}
nqps=${GOALS_QPS:-1000}
srv=wgoal-srv cli=wgoal-cli

die() { echo "goals: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
case $repeat in '' | *[!0-9]*) die "GOALS_REPEAT: not a number: $repeat" ;; esac
case $nconn in '' | *[!0-9]*) die "GOALS_CONN: not a number: $nconn" ;; esac
case $nqps in '' | *[!0-9]*) die "GOALS_QPS: not a number: $nqps" ;; esac

fault_peer=$build/tests/fault/fault_peer
if [ ! -x "$build/bench/wisp_bench" ] || [ ! -x "$build/bench/wisp_connrate" ] ||
	{ [ "$nqps" != 0 ] && [ ! -x "$fault_peer" ]; }; then
	cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build "$build" --target wisp_bench wisp_connrate fault_peer >/dev/null
fi
mkdir -p "$out"
bench=("$build/bench/wisp_bench" --engine "$engine" --repeat "$repeat"
	--seconds "$seconds")

link_up=0
cleanup() { [ $link_up = 0 ] || "$top/scripts/netns-link.sh" down --srv $srv --cli $cli >/dev/null; }
trap cleanup EXIT

run() { # NAME CSV ARGS...: one wisp_bench run, its output kept
	local name=$1 csv=$2
	shift 2
	echo "goals: $name (load $(cut -d' ' -f1 /proc/loadavg))"
	# stderr (each run's figure as it ends) to the terminal and NAME.runs
	"${bench[@]}" --csv "$out/$csv" "$@" >"$out/$name.log" \
		2> >(tee "$out/$name.runs" >&2) ||
		die "$name failed: see $out/$name.log and $out/$name.runs"
}

run loopback-crc loopback.csv --crc
run loopback-nocrc loopback.csv --no-crc
# A busy host: one CPU-bound loop beside both wisp and TCP.
run loopback-busy loopback-busy.csv --no-crc --tests write_64k --background 1

netns=$("$top/scripts/netns-link.sh" up --srv $srv --cli $cli | tail -1)
link_up=1
read -ra netns_arg <<<"$netns"
run mtu1500-crc mtu1500.csv --crc "${netns_arg[@]}"
run mtu1500-nocrc mtu1500.csv --no-crc "${netns_arg[@]}"
# What a third-party peer (siw) gets: FPDUs that fit one segment.
WISP_BIG_FPDU=off run mtu1500-mss-crc mtu1500-mss.csv --crc "${netns_arg[@]}"
WISP_BIG_FPDU=off run mtu1500-mss-nocrc mtu1500-mss.csv --no-crc "${netns_arg[@]}"
run mtu1500-busy mtu1500-busy.csv --no-crc --tests write_64k --background 1 \
	"${netns_arg[@]}"
cleanup
link_up=0

if [ "$nconn" != 0 ]; then
	echo "goals: connection rate, $nconn connections (load $(cut -d' ' -f1 /proc/loadavg))"
	"$build/bench/wisp_connrate" -n "$nconn" --repeat "$repeat" \
		>"$out/connrate.txt" 2>"$out/connrate.log" ||
		die "wisp_connrate failed: see $out/connrate.log"
fi

if [ "$nqps" != 0 ]; then
	echo "goals: memory, $nqps idle QPs (load $(cut -d' ' -f1 /proc/loadavg))"
	"$top/tests/fault/run-soak.sh" "$fault_peer" "$nqps" 2 >"$out/soak.txt" 2>&1 ||
		die "the soak failed: see $out/soak.txt"
fi

py=/usr/bin/python3
"$py" "$top/bench/goals.py" "$out" --md "$out/goals.md" -o "$out/goals.png"
cat "$out/goals.md"
echo "goals: figures in $out"
