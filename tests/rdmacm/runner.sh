# shellcheck shell=bash
# runner.sh: what the program runners of tests/rdmacm (run-programs.sh,
# run-rsockets.sh, run-perftest.sh) share, sourced by each: whether a
# program is installed, the AddressSanitizer runtime for programs that
# are not instrumented, a server and its client run as a pair, and the
# loop that runs the selected cases; and ports.sh, which it sources.

# shellcheck source=ports.sh
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

# need PROGRAM: PROGRAM is on PATH.
need() {
	command -v "$1" >/dev/null 2>&1
}

# asan_preload LIBDIR: where wisp's librdmacm.so.1 in LIBDIR is an
# AddressSanitizer build, the programs it loads into are not
# instrumented: its runtime must come first (LD_PRELOAD), and their own
# leaks at exit are not ours to report.
asan_preload() {
	local asan
	asan=$(ldd "$1/librdmacm.so.1" 2>/dev/null | awk '/libasan/ {print $3}')
	if [ -n "$asan" ]; then
		export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
		export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	fi
}

# pair NAME LIMIT SERVER_CMD... -- CLIENT_CMD...: start the server
# through $run (wisp-run), wait for it to listen on $port (ports.sh), run
# the client; both must exit 0 within LIMIT seconds. Their output in
# $logs/NAME.server and $logs/NAME.client.
# shellcheck disable=SC2154 # run, logs: the sourcing runner's; port: ports.sh
pair() {
	local name=$1 limit=$2 srv=() cli=() spid src crc
	shift 2
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	timeout "$limit" "$run" "${srv[@]}" >"$logs/$name.server" 2>&1 &
	spid=$!
	if ! wait_listen "$port" "$spid"; then
		echo "server did not listen on $port" >&2
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		return 1
	fi
	timeout "$limit" "$run" "${cli[@]}" >"$logs/$name.client" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
		echo "client exit $crc, server exit $src (logs: $logs/$name.*)" >&2
		tail -n 5 "$logs/$name.client" "$logs/$name.server" >&2
		return 1
	fi
}

# run_cases SUITE SKIP_RC CASE...: run each CASE (a function named in
# the runner's cases array), print "[PASS] SUITE::CASE (N ms)",
# "[FAIL] SUITE::CASE" or, where SKIP_RC is not empty and the case
# returned it, "[SKIP] SUITE::CASE"; an unknown name fails. Counts in
# passed, failed and skipped. Its own variables start with _, so that a
# case that sets rc, c or t0 without local leaves them alone.
# shellcheck disable=SC2154 # cases: the sourcing runner's array
run_cases() {
	local _suite=$1 _skip=$2 _case _rc _t0
	shift 2
	passed=0 failed=0 skipped=0
	for _case in "$@"; do
		if ! declare -F "$_case" >/dev/null ||
			[[ " ${cases[*]} " != *" $_case "* ]]; then
			echo "unknown case $_case (--list shows them)" >&2
			failed=$((failed + 1))
			continue
		fi
		_t0=$(date +%s%N)
		"$_case"
		_rc=$?
		if [ "$_rc" -eq 0 ]; then
			echo "[PASS] $_suite::$_case ($(( ($(date +%s%N) - _t0) / 1000000 )) ms)"
			passed=$((passed + 1))
		elif [ -n "$_skip" ] && [ "$_rc" -eq "$_skip" ]; then
			echo "[SKIP] $_suite::$_case"
			skipped=$((skipped + 1))
		else
			echo "[FAIL] $_suite::$_case"
			failed=$((failed + 1))
		fi
	done
}
