#!/usr/bin/env bash
# Fault injection with a real rdma_cm program (fault_peer, linked against
# wisp's librdmacm / libibverbs) over TCP loopback. Each case runs a
# "survivor" through three connections: a good one (the baseline of its
# fds, threads and malloc'd bytes is taken after it), the fault, and a
# good one again (it must connect and move verified data). The survivor
# itself checks the fault's outcome (fault_peer.c): every WR completes,
# successes then only IBV_WC_WR_FLUSH_ERR, RDMA_CM_EVENT_DISCONNECTED,
# a bounded teardown, nothing leaked.
#
#   tests/fault/run-faults.sh FAULT_PEER            all cases
#   tests/fault/run-faults.sh FAULT_PEER CASE...    some cases
#   tests/fault/run-faults.sh FAULT_PEER --list     the case names
#
# Cases:
#   kill_OP_END      the peer at END (client/server) is SIGKILLed while OP
#                    (write/read/send) streams both ways; the other end
#                    is the survivor.
#   reset_OP         a relay of ours (rst-relay.py) between the two cuts
#                    the connection with a TCP RST both ways mid-stream;
#                    both ends are survivors.
#   zero_window_disconnect  the server is SIGSTOPped mid-WRITE stream: the
#                    client's WRs stall behind a zero window for 4 s,
#                    longer than every wisp timeout (MPA 1 s here, close
#                    deadline 2 s, RTR nudges 3.15 s); nothing may break;
#                    then the client disconnects, bounded, and its WRs
#                    flush. The stopped server is then killed.
#   zero_window_resume      the same mid-READ, but the server is let run
#                    again (SIGCONT): every outstanding WR must complete
#                    successfully, then a clean disconnect.
# Every process is bounded in time: a hang is a failure.
# Environment: WISP_TEST_LOGS (keep the logs there), WISP_ENGINE.
# Exit status: 0 all passed, 1 some failed, 2 usage.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fp=${1:-}
[ -x "$fp" ] || { echo "usage: $0 FAULT_PEER [CASE...|--list]" >&2; exit 2; }
shift
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-fault.XXXXXX)}
mkdir -p "$logs"
# shellcheck source=../rdmacm/ports.sh
. "$here/../rdmacm/ports.sh"
addr=127.0.0.1
pids=()

cases=(
	kill_write_client kill_write_server
	kill_read_client kill_read_server
	kill_send_client kill_send_server
	reset_write reset_read reset_send
	zero_window_disconnect zero_window_resume
)

# Under ASan wisp's libraries need the runtime first (as run-programs.sh).
asan=$(ldd "$fp" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$asan" ]; then
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
fi

# next_port: a pair (port, port + 1) that this runner holds (ports.sh).
next_port() {
	pick_port 2
}

# start NAME ARGS...: fault_peer in the background, output to a log;
# its pid in $last.
start() {
	local name=$1
	shift
	"$fp" "$@" >"$logs/$case.$name" 2>&1 &
	last=$!
	pids+=("$last")
}

# wait_line NAME REGEX SECONDS: until the log NAME has a matching line.
wait_line() {
	local f="$logs/$case.$1" end=$((SECONDS + $3))
	while [ $SECONDS -lt "$end" ]; do
		grep -qE "$2" "$f" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "no line /$2/ in $1 within $3 s" >&2
	return 1
}

# listening PORT PID: until PID listens on TCP PORT (ports.sh's
# wait_listen: 30 s at most, and not once PID has died).
listening() {
	wait_listen "$1" "$2" && return 0
	echo "nothing listens on $1" >&2
	return 1
}

# finish PID NAME SECONDS: the process must exit 0 within SECONDS.
finish() {
	local pid=$1 end=$((SECONDS + $3)) rc
	while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt "$end" ]; do
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$2 hung (killed after $3 s); its log:" >&2
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		tail -n 8 "$logs/$case.$2" >&2
		return 1
	fi
	wait "$pid"
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "$2 exited $rc; its log:" >&2
		tail -n 8 "$logs/$case.$2" >&2
		return 1
	fi
	return 0
}

# Whatever a case left running is killed before the next.
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	pids=()
}
trap cleanup EXIT

# kill_case OP END: END's process is the victim.
kill_case() {
	local op=$1 end=$2 sv vp gp
	next_port || return 1
	if [ "$end" = client ]; then
		start survivor server $addr $port survivor "$op"; sv=$last
		listening $port $sv || return 1
		start good1 client $addr $port good "$op"
		finish $last good1 30 || return 1
		wait_line survivor '^baseline' 30 || return 1
		start victim client $addr $port victim "$op"; vp=$last
	else
		start good1 server $addr $port good "$op"; gp=$last
		listening $port $gp || return 1
		start survivor client $addr $port survivor "$op"; sv=$last
		finish $gp good1 30 || return 1
		wait_line survivor '^baseline' 30 || return 1
		start victim server $addr $port victim "$op"; vp=$last
	fi
	wait_line victim '^flowing' 30 || return 1
	kill -9 "$vp"
	wait "$vp" 2>/dev/null
	wait_line survivor '^reconnect' 30 || { finish $sv survivor 1; return 1; }
	if [ "$end" = client ]; then
		start good3 client $addr $port good "$op"
	else
		start good3 server $addr $port good "$op"
	fi
	gp=$last
	finish $sv survivor 30 || return 1
	finish $gp good3 30 || return 1
	grep -E '^(fault|usage)' "$logs/$case.survivor"
}

kill_write_client() { kill_case write client; }
kill_write_server() { kill_case write server; }
kill_read_client() { kill_case read client; }
kill_read_server() { kill_case read server; }
kill_send_client() { kill_case send client; }
kill_send_server() { kill_case send server; }

# reset_case OP: client -> relay -> server; the relay resets the second
# connection after 8 MiB; both ends are survivors.
reset_case() {
	local op=$1 rp sp cp rport gate="$logs/$case.gate"
	next_port || return 1
	rport=$((port + 1))
	rm -f "$gate".*
	python3 "$here/rst-relay.py" $rport $port 2 $((8 << 20)) $addr \
		>"$logs/$case.relay" 2>&1 &
	rp=$!
	pids+=("$rp")
	wait_line relay '^listening' 10 || return 1
	start server server $addr $port survivor "$op"; sp=$last
	listening $port $sp || return 1
	# The client connects again only once the server has counted what
	# it holds (a connection it accepted would count as a leak).
	touch "$gate.1"
	start client -G "$gate" client $addr $rport survivor "$op"; cp=$last
	wait_line server '^baseline' 30 || return 1
	touch "$gate.2"
	wait_line server '^reconnect' 30 || { finish $sp server 1; return 1; }
	touch "$gate.3"
	finish $sp server 30 || return 1
	finish $cp client 30 || return 1
	grep -q '^reset' "$logs/$case.relay" ||
		{ echo "the relay never reset" >&2; return 1; }
	grep -E '^(fault|usage)' "$logs/$case.server" "$logs/$case.client"
}

reset_write() { reset_case write; }
reset_read() { reset_case read; }
reset_send() { reset_case send; }

# zero_window_case OP RESUME: the server stops (SIGSTOP) mid-stream.
zero_window_case() {
	local op=$1 resume=$2 sv vp gp flags=(-Z -W 4000)
	[ "$resume" = 1 ] && flags+=(-R)
	next_port || return 1
	export WISP_MPA_TIMEOUT_MS=1000
	start good1 server $addr $port good "$op"; gp=$last
	listening $port $gp || return 1
	start survivor "${flags[@]}" client $addr $port survivor "$op"; sv=$last
	finish $gp good1 30 || return 1
	wait_line survivor '^baseline' 30 || return 1
	start victim server $addr $port victim "$op"; vp=$last
	wait_line victim '^flowing' 30 || return 1
	# The survivor counts a stall only once its own stream has flowed:
	# stopped before that (a loaded machine), it would never say so.
	wait_line survivor '^flowing' 30 || { kill -9 "$vp"; return 1; }
	kill -STOP "$vp"
	wait_line survivor '^stalled' 30 || { kill -9 "$vp"; return 1; }
	if [ "$resume" = 1 ]; then
		kill -CONT "$vp"
		# The survivor disconnects once all completed; the victim's
		# stream then breaks and it exits 0.
		finish $vp victim 30 || return 1
	else
		wait_line survivor '^reconnect' 30 || { kill -9 "$vp"; return 1; }
		kill -9 "$vp"
		wait "$vp" 2>/dev/null
	fi
	wait_line survivor '^reconnect' 30 || return 1
	start good3 server $addr $port good "$op"; gp=$last
	finish $sv survivor 30 || return 1
	finish $gp good3 30 || return 1
	unset WISP_MPA_TIMEOUT_MS
	grep -E '^(stalled|resumed|disconnect|fault|usage)' \
		"$logs/$case.survivor"
}

zero_window_disconnect() { zero_window_case write 0; }
zero_window_resume() { zero_window_case read 1; }

case "${1:-}" in
--list)
	printf '%s\n' "${cases[@]}"
	exit 0
	;;
esac

command -v ss >/dev/null || { echo "fault programs: ss not installed: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "fault programs: python3 not installed: skipped"; exit 77; }

selected=("$@")
[ ${#selected[@]} -gt 0 ] || selected=("${cases[@]}")
passed=0
failed=0
for case in "${selected[@]}"; do
	if ! declare -F "$case" >/dev/null; then
		echo "unknown case $case (--list shows them)" >&2
		failed=$((failed + 1))
		continue
	fi
	t0=$(date +%s%N)
	if "$case"; then
		echo "[PASS] fault_programs::$case ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
		passed=$((passed + 1))
	else
		echo "[FAIL] fault_programs::$case"
		failed=$((failed + 1))
	fi
	unset WISP_MPA_TIMEOUT_MS
	cleanup
done
if [ "$failed" -eq 0 ]; then
	echo "fault programs: $passed passed, 0 failed"
	[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
	exit 0
fi
echo "fault programs: $passed passed, $failed failed (logs in $logs)"
exit 1
