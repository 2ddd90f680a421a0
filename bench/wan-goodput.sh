#!/usr/bin/env bash
# Goodput across the emulated WAN (tests/wan/wan.sh): wisp-repl over wisp
# (scripts/wisp-run) in each --mode against single-stream iperf3 through
# the same link, alternating in the same run, for each RTT; one CSV row
# per transfer. docs/replication.md, "Goodput against RTT".
#
#   bench/wan-goodput.sh [--size MIB] [--rtt "1 10 50 100"] [--reps N]
#       [--modes "write read send"] [--streams "1"] [--iperf 0|1]
#       [--rate 1gbit] [--loss PCT] [--cc ALGO] [--csv FILE]
#       [--srv NS --cli NS] [--timeout S] [--lock FILE] [--repl-args "..."]
#       [--tcp-max BYTES]
#
# Needs root (namespaces), iperf3, python3, a release build
# (build/release: wisp's libraries, wisp-repl, wisp-wan-delay). For each
# RTT and each repeat it brings the WAN up, runs iperf3 -n SIZE, then
# wisp-repl send of a SIZE file in each mode and stream count, and takes
# the WAN down; that group runs inside `flock LOCK` (default
# /work/bench.lock if it exists; --lock "" for none), so pick --size so
# that one group stays within the time a lock may be held.
#
# Figures: wisp-repl's is the whole job from its JSON (bytes / seconds,
# from before connecting to the rename at the receiver: connection, RTT
# probe, every chunk moved, checked, written and journalled, the copy read
# back and hashed). iperf3's is the receiver's own summary (bytes / the
# period timed at the receiver, from its first octet to its last:
# --get-server-output), as tests/wan/check.sh takes it; the wall time of
# both clients is in the CSV too (wall_s). Source and copy live in
# /dev/shm so that no disk is measured.
#
# Exit status: 1 if any wisp-repl transfer failed or its copy differs (a
# slow one fails nothing); an RTT whose emulated WAN cannot come up (no
# NFQUEUE in the kernel) is skipped with a line saying why.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WISP_BUILD_DIR:-$top/build/release}
run="$top/scripts/wisp-run"
repl=${WISP_REPL:-$build/demos/replicate/wisp-repl}
wan="$top/tests/wan/wan.sh"
size=1024 rtts="1 10 50 100" reps=1 modes="write read send" streams=1
rate=1gbit loss=0 cc='' csv='' srv=wisp-gp-srv cli=wisp-gp-cli
tmo='' iperf=1 repl_args='' tcp_max=''
failures=0 skipped=0
lock=/work/bench.lock
[ -e "$lock" ] || lock=''

die() { echo "wan-goodput: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
	case $1 in
	--size) size=${2:?}; shift 2 ;;
	--rtt) rtts=${2:?}; shift 2 ;;
	--reps) reps=${2:?}; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--streams) streams=${2:?}; shift 2 ;;
	--iperf) iperf=${2:?}; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--loss) loss=${2:?}; shift 2 ;;
	--cc) cc=${2:?}; shift 2 ;;
	--csv) csv=${2:?}; shift 2 ;;
	--srv) srv=${2:?}; shift 2 ;;
	--cli) cli=${2:?}; shift 2 ;;
	--timeout) tmo=${2:?}; shift 2 ;;
	--lock) lock=$2; shift 2 ;;
	--repl-args) repl_args=$2; shift 2 ;;
	--tcp-max) tcp_max=${2:?}; shift 2 ;;
	*) die "unknown option $1 (see the top of $0)" ;;
	esac
done
[ "$(id -u)" = 0 ] || die "needs root"
[[ $size =~ ^[0-9]+$ ]] || die "--size wants MiB"
for p in iperf3 python3 flock; do
	command -v $p >/dev/null || die "needs $p"
done
[ -x "$repl" ] || die "no $repl: build the release tree"
export WISP_WAN_DELAY=${WISP_WAN_DELAY:-$build/tests/wan/wisp-wan-delay}
bytes=$((size << 20))
# bound of one transfer: a floor of 2 MiB/s, plus a minute
[ -n "$tmo" ] || tmo=$((60 + size / 2))
read -ra extra <<<"$repl_args"
csv=${csv:-$top/bench/wan-goodput.csv}
work=$(mktemp -d /dev/shm/wisp-wan-goodput.XXXXXX)
spid=
cleanup() {
	[ -z "$spid" ] || kill "$spid" 2>/dev/null
	"$wan" down --srv "$srv" --cli "$cli" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

head -c "$bytes" /dev/urandom >"$work/src"
[ -s "$csv" ] || echo "date_utc,rtt_ms,loss_pct,rate,cc,rep,what,mode,streams,bytes,seconds,goodput_MBps,wall_s,window,chunk,rtt_min_us,data_s,load1" >"$csv"

in_srv=(ip netns exec "$srv")
in_cli=(ip netns exec "$cli")
port=7480

# shellcheck source=../tests/rdmacm/ports.sh
. "$top/tests/rdmacm/ports.sh"    # wait_listen

# row RTT REP WHAT MODE STREAMS SECONDS WALL WINDOW CHUNK RTT_US DATA_S [BYTES]
row() {
	local g b=${12:-$bytes}
	g=$(awk -v b="$b" -v s="$6" 'BEGIN { printf "%.1f", (s > 0 ? b / s / 1e6 : 0) }')
	echo "$(date -u +%FT%TZ),$1,$loss,$rate,$cc_now,$2,$3,$4,$5,$b,$6,$g,$7,$8,$9,${10},${11},$(cut -d' ' -f1 /proc/loadavg)" >>"$csv"
	printf '%6s ms  rep %s  %-10s %-6s x%-2s %8.1f MB/s  %7.2f s (wall %s s, data %s s)\n' \
		"$1" "$2" "$3" "$4" "$5" "$g" "$6" "$7" "${11}"
}

one_iperf() {
	local rtt=$1 rep=$2 j t0 t1
	port=$((port + 1))
	"${in_srv[@]}" timeout "$tmo" iperf3 -s -1 -J -p "$port" >/dev/null 2>&1 &
	spid=$!
	wait_listen "$port" "$spid" "$srv" || { echo "iperf3 -s did not start" >&2; return 1; }
	t0=$(date +%s.%N)
	j=$("${in_cli[@]}" timeout "$tmo" iperf3 -c 198.18.0.1 -p "$port" -n "$bytes" \
		-C "$cc_now" -J --get-server-output)
	t1=$(date +%s.%N)
	wait "$spid"
	spid=
	s=$(python3 -c '
import json, sys
j = json.loads(sys.argv[1])
r = j["server_output_json"]["end"]["sum_received"]
print("%.3f %d" % (r["seconds"], r["bytes"]))' "$j") ||
		{ echo "iperf3: no result" >&2; return 1; }
	read -r sec got <<<"$s"
	row "$rtt" "$rep" iperf3 tcp 1 "$sec" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" 0 0 0 "$sec" "$got"
}

one_repl() {
	local rtt=$1 rep=$2 mode=$3 st=$4 out t0 t1 s
	rm -rf "$work/dst"
	mkdir "$work/dst"
	port=$((port + 1))
	"${in_srv[@]}" timeout "$tmo" "$run" "$repl" serve "$work/dst" --port "$port" \
		--once >"$work/serve.log" 2>&1 &
	spid=$!
	wait_listen "$port" "$spid" "$srv" || { cat "$work/serve.log" >&2; return 1; }
	t0=$(date +%s.%N)
	out=$("${in_cli[@]}" timeout "$tmo" "$run" "$repl" send "$work/src" 198.18.0.1: \
		--port "$port" --mode "$mode" --streams "$st" --json ${extra[@]+"${extra[@]}"})
	t1=$(date +%s.%N)
	wait "$spid"
	spid=
	cmp -s "$work/src" "$work/dst/src" || { echo "$mode x$st: copy differs: $out" >&2; return 1; }
	s=$(python3 -c '
import json, sys
j = json.loads(sys.argv[1])
print("%.3f %d %d %d %.3f" % (j["seconds"], j["window"], j["chunk"],
                            j["rtt_min_us"], j.get("data_seconds", 0)))' "$out") ||
		{ echo "wisp-repl: no result: $out" >&2; return 1; }
	read -r sec win chunk rttus data <<<"$s"
	row "$rtt" "$rep" wisp-repl "$mode" "$st" "$sec" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$win" "$chunk" "$rttus" "$data"
}

# one group: the WAN at RTT up, iperf3 then each mode, the WAN down
group() {
	local rtt=$1 rep=$2 m st
	if ! "$wan" up --rate "$rate" --delay "$rtt" --loss "$loss" ${cc:+--cc "$cc"} ${tcp_max:+--tcp-max "$tcp_max"} \
		--srv "$srv" --cli "$cli" >"$work/wan.up" 2>&1; then
		# As wan_quick: a kernel without NFQUEUE cannot delay packets.
		echo "# RTT +$rtt ms: skipped, the emulated WAN did not come up: $(tail -n 1 "$work/wan.up")"
		skipped=$((skipped + 1))
		return 0
	fi
	cc_now=$("${in_cli[@]}" sysctl -n net.ipv4.tcp_congestion_control)
	echo "# RTT +$rtt ms, loss $loss %, $rate, $cc_now, $size MiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
	[ "$iperf" = 0 ] || one_iperf "$rtt" "$rep" || true
	for m in $modes; do
		for st in $streams; do
			one_repl "$rtt" "$rep" "$m" "$st" ||
				failures=$((failures + 1))
		done
	done
	"$wan" down --srv "$srv" --cli "$cli" >/dev/null
}

for rep in $(seq "$reps"); do
	for rtt in $rtts; do
		if [ -n "$lock" ]; then
			exec 9>"$lock"
			flock 9
			group "$rtt" "$rep"
			flock -u 9
			exec 9>&-
		else
			group "$rtt" "$rep"
		fi
	done
done
echo "rows in $csv"
# Figures only: a slow transfer fails nothing, a failed or wrong one does.
if [ "$failures" -gt 0 ]; then
	echo "wan-goodput: $failures wisp-repl transfer(s) failed or differed"
	exit 1
fi
