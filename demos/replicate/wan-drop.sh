#!/usr/bin/env bash
# wisp-repl across the emulated WAN (tests/wan/wan.sh) while the link
# drops for 30 s mid-transfer (both delay programs stop forwarding:
# `wan.sh drop 30`). docs/replication.md, "How it is tested".
#
#   demos/replicate/wan-drop.sh [--bin WISP_WAN_DELAY] [--drop SECONDS]
#                               [--timeout S]
#
# The receiver runs in one namespace, the sender in the other, over wisp
# (scripts/wisp-run), with the program's default silence limit (30 s;
# --timeout S gives both ends another):
#  1. a 24 MiB file, paced to 4 MB/s, is sent over a 100 Mbit/s link with
#     20 ms RTT; once the receiver has journalled some chunks the link
#     drops for 30 s;
#  2. the sender must end in one of the two allowed ways, within a bound
#     (a hang fails the test): it rides the drop out (exit 0, the copy
#     matches), or it fails with a clear error (exit 6, "connection lost"
#     or "receiver silent") and nothing is under the final name;
#  3. after a failure the same command, rerun once the link is back and
#     the receiver has let go of the dead job, completes: the copy matches
#     byte for byte, no chunk needed repair, and it sends no more chunks
#     than the journal lacked.
# Exit: 0 passed, 1 failed, 77 skipped (the reason is printed): not root,
# no network namespaces, no iptables-legacy/tc, or a program not built.
#
# Environment: WISP_REPL, WISP_LIB_DIR (as for run-tests.sh),
# WISP_WAN_DELAY (or --bin), REPL_WAN_SRV / REPL_WAN_CLI (namespace
# names; default wisp-rdrop<pid>-s/-c), WISP_TEST_LOGS (kept on failure).
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run="$top/scripts/wisp-run"
wan="$top/tests/wan/wan.sh"
repl=${WISP_REPL:-$top/build/release/demos/replicate/wisp-repl}
bin=${WISP_WAN_DELAY:-$top/build/release/tests/wan/wisp-wan-delay}
drop=30
tmo=()
while [ $# -gt 0 ]; do
	case $1 in
	--bin) bin=${2:?}; shift 2 ;;
	--drop) drop=${2:?}; shift 2 ;;
	--timeout) tmo=(--timeout "${2:?}"); shift 2 ;;
	*) echo "usage: $0 [--bin PATH] [--drop SECONDS] [--timeout S]" >&2; exit 2 ;;
	esac
done
srv=${REPL_WAN_SRV:-wisp-rdrop$$-s}
cli=${REPL_WAN_CLI:-wisp-rdrop$$-c}
port=7470 # inside our own namespaces: nothing else listens there
host=198.18.0.1

skip() { echo "SKIP repl_wan_drop: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, iptables)"
[ -x "$repl" ] || skip "wisp-repl not built ($repl)"
[ -x "$bin" ] || skip "wisp-wan-delay not built ($bin)"
for p in iptables-legacy tc ss; do
	command -v "$p" >/dev/null || skip "no $p (scripts/test.sh installs it)"
done
why=$("$wan" probe --srv "$srv") || skip "$why"

logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-rdrop-logs.XXXXXX)}
mkdir -p "$logs"
work=$(mktemp -d /tmp/wisp-rdrop.XXXXXX)
WISP_WAN_STATE=$work/wan
export WISP_WAN_STATE
names=(--srv "$srv" --cli "$cli" --bin "$bin")
spid='' pid='' dpid=''
cleanup() {
	local p
	# TERM: timeout(1) passes it on to the sender; wan.sh drop's own
	# trap brings the link back up
	for p in $pid $dpid $spid; do
		kill "$p" 2>/dev/null
	done
	wait 2>/dev/null
	"$wan" down "${names[@]}" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

fail() {
	echo "FAIL repl_wan_drop: $*"
	echo "     logs: $logs"
	exit 1
}

# in NS CMD...: CMD in namespace NS
in_srv() { ip netns exec "$srv" "$@"; }
in_cli() { ip netns exec "$cli" "$@"; }

# verified chunks in the receiver's journal (header 40 bytes, records 24)
journal_chunks() {
	local f
	f=$(ls "$work"/dst/.wisp-repl/*.journal 2>/dev/null | head -n1)
	[ -n "$f" ] || { echo 0; return; }
	echo $((($(stat -c %s "$f") - 40) / 24))
}

json() {
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' \
		"$1" "$2"
}

if ! "$wan" up "${names[@]}" --rate 100mbit --delay 20 >"$logs/wan.up" 2>&1; then
	# the delay program could not bind its queue: no nfnetlink_queue
	grep -q "binding queue" "$logs/wan.up" &&
		skip "no NFQUEUE queue here ($(grep -m1 "binding queue" "$logs/wan.up"))"
	fail "wan.sh up: $(cat "$logs/wan.up")"
fi

chunk=$((256 * 1024))
size=$((24 * 1024 * 1024))
nchunks=$((size / chunk))
mkdir -p "$work/dst"
head -c "$size" /dev/urandom >"$work/src"
send_cmd=("$run" "$repl" send "$work/src" "$host": --port "$port" --json
	--chunk 256k --limit 4M -v ${tmo[@]+"${tmo[@]}"})

# Not through in_srv: a function run with & is a subshell, and $! would
# be that subshell's, leaving the receiver behind when cleanup kills it
# (an orphan that held the test's output open). ip netns exec, wisp-run
# and timeout exec or wait, so $! is the program's own process here.
ip netns exec "$srv" "$run" "$repl" serve "$work/dst" --port "$port" -v \
	${tmo[@]+"${tmo[@]}"} >"$logs/server" 2>&1 &
spid=$!
for _ in $(seq 300); do
	kill -0 "$spid" 2>/dev/null || break
	[ -n "$(in_srv ss -Hltn "sport = :$port")" ] && break
	sleep 0.1
done
[ -n "$(in_srv ss -Hltn "sport = :$port")" ] ||
	fail "the receiver did not listen: $(tail -n 5 "$logs/server")"

# 1. the transfer, and the drop once chunks are arriving
ip netns exec "$cli" timeout 180 "${send_cmd[@]}" >"$logs/send1.out" \
	2>"$logs/send1.err" &
pid=$!
for _ in $(seq 300); do
	[ "$(journal_chunks)" -ge 8 ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
j0=$(journal_chunks)
[ "$j0" -ge 8 ] && [ "$j0" -lt "$nchunks" ] ||
	fail "no transfer under way to drop ($j0 of $nchunks chunks journalled)"
t0=$(date +%s)
"$wan" drop "$drop" "${names[@]}" &
dpid=$!
for _ in $(seq 100); do
	[ "$(grep -l "link down" "$WISP_WAN_STATE"/*.log 2>/dev/null | wc -l)" = 2 ] &&
		break
	sleep 0.05
done
[ "$(grep -l "link down" "$WISP_WAN_STATE"/*.log 2>/dev/null | wc -l)" = 2 ] ||
	fail "the link did not go down"
echo "link down at $j0 of $nchunks chunks journalled"

# 2. one of the two outcomes; `timeout 180` makes a hang exit 124
wait "$pid"
rc=$?
pid=''
t1=$(date +%s)
out=$(cat "$logs/send1.out")
case $rc in
0)
	cmp -s "$work/src" "$work/dst/src" ||
		fail "rode the drop out (exit 0) but the copy differs"
	echo "rode the drop out: exit 0 after $((t1 - t0)) s, copy matches"
	wait "$dpid"
	dpid=''
	exit 0
	;;
6)
	grep -qE "connection lost|receiver silent" "$logs/send1.err" ||
		fail "exit 6 without a clear message: $(tail -n 2 "$logs/send1.err")"
	[ "$(json "$out" result)" = error ] && [ "$(json "$out" exit)" = 6 ] ||
		fail "JSON summary: $out"
	[ ! -e "$work/dst/src" ] || fail "a partial file under the final name"
	echo "failed clearly after $((t1 - t0)) s of drop: $(tail -n 1 "$logs/send1.err")"
	;;
124) fail "the sender hung (still running 180 s after it started)" ;;
*) fail "sender exit $rc: $(tail -n 2 "$logs/send1.err")" ;;
esac

# 3. the link back, the receiver done with the dead job (its own
# silence limit), then the same command again
wait "$dpid"
dpid=''
for _ in $(seq 600); do
	started=$(grep -c "job started" "$logs/server")
	ended=$(grep -cE "job ended early|job done" "$logs/server")
	[ "$started" -eq "$ended" ] && break
	kill -0 "$spid" 2>/dev/null || fail "the receiver died: $(tail -n 3 "$logs/server")"
	sleep 0.1
done
[ "$started" -eq "$ended" ] || fail "the receiver still holds the dead job 60 s after the drop"
[ ! -e "$work/dst/src" ] || fail "a partial file under the final name"
j1=$(journal_chunks)
in_cli timeout 120 "${send_cmd[@]}" >"$logs/send2.out" 2>"$logs/send2.err"
rc=$?
out=$(cat "$logs/send2.out")
[ "$rc" -eq 0 ] || fail "rerun: exit $rc: $(tail -n 2 "$logs/send2.err")"
cmp "$work/src" "$work/dst/src" || fail "rerun: the copy differs"
[ "$(json "$out" chunks_repaired)" = 0 ] ||
	fail "rerun: the journal named chunks the data lacked: $out"
[ "$(json "$out" chunks_sent)" -le $((nchunks - j1)) ] ||
	fail "rerun sent $(json "$out" chunks_sent) chunks, the journal lacked $((nchunks - j1))"
echo "rerun completed: $j1 of $nchunks chunks were journalled, sent $(json "$out" chunks_sent), copy matches"
[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
exit 0
