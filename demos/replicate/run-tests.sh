#!/usr/bin/env bash
# wisp-repl over wisp on loopback (docs/replication.md): the real binary,
# started through scripts/wisp-run, every process bounded in time.
#
#   demos/replicate/run-tests.sh            all cases
#   demos/replicate/run-tests.sh CASE...    some cases
#   demos/replicate/run-tests.sh --list     the case names
#
# Environment: WISP_REPL (the wisp-repl binary; default
# build/release/demos/replicate/wisp-repl), WISP_LIB_DIR (wisp's libraries,
# as for wisp-run), WISP_TEST_LOGS (where output goes; default a temporary
# folder, kept on failure), REPL_KILLS (kill -9 rounds per side, default 5).
# Exit status: 0 all passed, 1 some failed, 77 wisp-repl not built.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run="$top/scripts/wisp-run"
repl=${WISP_REPL:-$top/build/release/demos/replicate/wisp-repl}
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-repl-test.XXXXXX)}
mkdir -p "$logs"
work=$(mktemp -d /tmp/wisp-repl-data.XXXXXX)
kills=${REPL_KILLS:-5}
# shellcheck source=../../tests/rdmacm/ports.sh
. "$top/tests/rdmacm/ports.sh"

cases=(
	file_write file_read file_send tree_streams rerun_skips progress_tty
	kill_sender kill_receiver rerun_killed rerun_cut rerun_stopped
	image_loop corrupt_part corrupt_in_flight
	err_refused err_unreachable err_no_source err_vanished err_enospc
	err_eacces err_version tls_psk tls_cert
)

[ -x "$repl" ] || { echo "wisp-repl not built ($repl)"; exit 77; }

pids=()
loops=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill -CONT "$p" 2>/dev/null	# a stopped one dies too
		kill -9 "$p" 2>/dev/null
	done
	for p in "${loops[@]}"; do
		losetup -d "$p" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT
# ctest's timeout sends TERM: kill what we started and clean up
trap 'exit 143' TERM INT

# wait_idle: until every job the receiver started has ended (after a
# sender's death: it noticed and journalled what it had); 30 s at most.
wait_idle() {
	local started ended
	for _ in $(seq 300); do
		started=$(grep -c "job started" "$logs/$cur.server")
		ended=$(grep -cE "job ended early|job done" "$logs/$cur.server")
		[ "$started" -eq "$ended" ] && return 0
		sleep 0.1
	done
	echo "the receiver did not notice the sender's death" >&2
	return 1
}

# wait_count PATTERN N: until the receiver's log has PATTERN N times; 30 s
# at most.
wait_count() {
	for _ in $(seq 300); do
		[ "$(grep -c "$1" "$logs/$cur.server")" -ge "$2" ] && return 0
		sleep 0.1
	done
	echo "no '$1' ($2 times) from the receiver" >&2
	return 1
}

# wait_log PATTERN: until the receiver's log has PATTERN; 30 s at most.
wait_log() {
	wait_count "$1" 1 2>/dev/null && return 0
	echo "no '$1' from the receiver" >&2
	return 1
}

# serve DIR [ARGS]: a receiver in the background on a fresh $port; $spid.
serve() {
	local dir=$1
	shift
	pick_port || return 1
	"$run" "$repl" serve "$dir" --port "$port" -v "$@" \
		>>"$logs/$cur.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	wait_listen "$port" "$spid" ||
		{ echo "receiver did not listen on $port" >&2; return 1; }
}

stop_serve() {
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
}

# send ARGS: the sender, bounded; its exit status in $rc, stdout in $out
# (in the network namespace of the command prefix in_ns, if any).
in_ns=()
send() {
	out=$(timeout 120 "${in_ns[@]}" "$run" "$repl" send "$@" --port "$port" --json \
		2>>"$logs/$cur.client")
	rc=$?
	echo "$out" >>"$logs/$cur.client"
	[ "$rc" -ne 124 ] || echo "sender hung" >&2
}

json() {
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' \
		"$out" "$1"
}

mkfile() {
	head -c "$2" /dev/urandom >"$1"
}

# one file in MODE, byte for byte
file_mode() {
	local d=$work/$cur
	mkdir -p "$d/dst"
	mkfile "$d/src" $((20 * 1024 * 1024 + 12345))
	serve "$d/dst" || return 1
	send "$d/src" "127.0.0.1:in" --mode "$1" --chunk 256k
	stop_serve
	[ "$rc" -eq 0 ] || return 1
	cmp "$d/src" "$d/dst/in/src" || return 1
	[ -z "$(ls -A "$d/dst/.wisp-repl")" ] ||
		{ echo "leftovers in .wisp-repl" >&2; return 1; }
}
file_write() { file_mode write; }
file_read() { file_mode read; }
file_send() { file_mode send; }

# a tree (nested folders, an empty file, odd names) over 3 streams
tree_streams() {
	local d=$work/$cur
	mkdir -p "$d/dst" "$d/t/a/b c" "$d/t/d%2F"
	mkfile "$d/t/a/b c/x" $((5 * 1024 * 1024 + 1))
	mkfile "$d/t/d%2F/y" 4097
	: >"$d/t/empty"
	echo hi >"$d/t/a/z"
	chmod 640 "$d/t/a/z"
	serve "$d/dst" || return 1
	send "$d/t" 127.0.0.1: --streams 3 --chunk 64k --window 12
	stop_serve
	[ "$rc" -eq 0 ] || return 1
	diff -r "$d/t" "$d/dst/t" || return 1
	[ "$(stat -c %a "$d/dst/t/a/z")" = 640 ] || { echo "mode not kept" >&2; return 1; }
}

# the same command again: nothing sent, every file skipped
rerun_skips() {
	local d=$work/$cur
	mkdir -p "$d/dst"
	mkfile "$d/src" 3000000
	serve "$d/dst" || return 1
	send "$d/src" 127.0.0.1: && [ "$rc" -eq 0 ] || { stop_serve; return 1; }
	send "$d/src" 127.0.0.1:
	stop_serve
	[ "$rc" -eq 0 ] && [ "$(json bytes_sent)" = 0 ] &&
		[ "$(json files_skipped)" = 1 ] || return 1
}

# on a terminal (script(1) gives it one) the sender redraws a progress
# line in place: bytes done of total, rate, ETA, RTT, credits in flight
progress_tty() {
	local d=$work/$cur
	command -v script >/dev/null || { echo "SKIP: no script(1)"; return 0; }
	mkdir -p "$d/dst"
	mkfile "$d/src" $((8 * 1024 * 1024))
	serve "$d/dst" || return 1
	timeout 120 script -qec "$(printf '%q ' "$run" "$repl" send "$d/src" \
		127.0.0.1: --port "$port" --chunk 256k --limit 8M)" /dev/null \
		>"$logs/$cur.tty" 2>&1
	rc=$?
	stop_serve
	[ "$rc" -eq 0 ] && cmp "$d/src" "$d/dst/src" || return 1
	grep -aqE '8\.0 MiB / 8\.0 MiB +[0-9.]+ (B|KiB|MiB|GiB)/s +ETA [0-9]+s +RTT [0-9]+us +credits [0-9]+/[0-9]+' \
		"$logs/$cur.tty" || { echo "no final progress line" >&2; return 1; }
	# redrawn in place while it ran (8 MiB at 8 MB/s: a second, a
	# redraw each 0.2 s), not printed once at the end
	[ "$(tr -cd '\r' <"$logs/$cur.tty" | wc -c)" -ge 4 ] ||
		{ echo "the line was not redrawn" >&2; return 1; }
}

# verified chunks in a journal (header 40 bytes, records 24)
journal_chunks() {
	local f
	f=$(ls "$1"/.wisp-repl/*.journal 2>/dev/null | head -n1)
	[ -n "$f" ] || { echo 0; return; }
	echo $((($(stat -c %s "$f") - 40) / 24))
}

rand_ms() {
	echo $((($1) + RANDOM % ($2 - $1)))
}

# send_bg LOG SRC DEST ARG...: a sender to this run's receiver started
# in the background, its errors appended to LOG; its pid in $pid (the
# caller's) and in pids.
send_bg() {
	local log=$1 src=$2 dst=$3
	shift 3
	"$run" "$repl" send "$src" "$dst" --port "$port" "$@" >/dev/null 2>>"$log" &
	pid=$!
	pids+=("$pid")
}

# killed_round D I: round I of a kill -9 case in folder D: a new version
# of D/src (the receiver starts over), nothing under its final name, and
# its sender in the background (-v, its errors in the round's log).
killed_round() {
	rm -f "$1/dst/src"
	touch "$1/src"
	send_bg "$logs/$cur.killed$2" "$1/src" 127.0.0.1: -v \
		--chunk 256k --limit 32M
}

# kill_wait PID: kill -9 and reap it.
kill_wait() {
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# wait_journal DIR N: until the journal in DIR holds N chunks (10 s at
# most; the caller goes on either way).
wait_journal() {
	for _ in $(seq 100); do
		[ "$(journal_chunks "$1")" -ge "$2" ] && break
		sleep 0.1
	done
}

# check_window LOG J: the killed sender's last "credit: sent S credited
# M" (-v) against the J chunks in the journal: every credited chunk is
# journalled (M <= J), and what a rerun resends of what was sent is at
# most one window (S - J <= 64, the default window; S only grows after
# that line by chunks that are still within the window).
check_window() {
	local line s m
	line=$(grep "^credit: " "$1" | tail -n1)
	[ -n "$line" ] || return 0	# killed before any credit
	s=$(echo "$line" | awk '{print $3}')
	m=$(echo "$line" | awk '{print $5}')
	[ "$m" -le "$2" ] ||
		{ echo "the sender had $m chunks credited, the journal holds $2" >&2; return 1; }
	[ $((s - $2)) -le 64 ] ||
		{ echo "sent $s, journalled $2: more than a window to resend" >&2; return 1; }
}

big=$((64 * 1024 * 1024))
nchunks=$((big / (256 * 1024)))

# kill -9 of the sender at random moments; each rerun finishes, matches,
# and sends only what the journal lacks.
kill_sender() {
	local d=$work/$cur i pid ms j
	mkdir -p "$d/dst"
	mkfile "$d/src" $big
	serve "$d/dst" || return 1
	for i in $(seq "$kills"); do
		killed_round "$d" "$i"
		ms=$(rand_ms 100 1800)
		sleep_ms "$ms"
		kill_wait "$pid"
		wait_idle || { stop_serve; return 1; }
		j=$(journal_chunks "$d/dst")
		check_window "$logs/$cur.killed$i" "$j" || { stop_serve; return 1; }
		send "$d/src" 127.0.0.1: --chunk 256k
		echo "round $i: killed after ${ms} ms, $j chunks journalled, rerun: $out" \
			>>"$logs/$cur.rounds"
		[ "$rc" -eq 0 ] || { echo "rerun $i: exit $rc" >&2; stop_serve; return 1; }
		cmp "$d/src" "$d/dst/src" || { stop_serve; return 1; }
		[ "$(json chunks_repaired)" = 0 ] ||
			{ echo "rerun $i: the journal named chunks the data lacked" >&2; stop_serve; return 1; }
		[ "$(json chunks_sent)" -le $((nchunks - j)) ] ||
			{ echo "rerun $i: sent $(json chunks_sent), journal had $j of $nchunks" >&2; stop_serve; return 1; }
	done
	stop_serve
	cat "$logs/$cur.rounds"
}

# kill -9 of the receiver at random moments: the sender fails with
# "connection lost" (exit 6), the rerun against a new receiver finishes.
kill_receiver() {
	local d=$work/$cur i pid ms j crc
	mkdir -p "$d/dst"
	mkfile "$d/src" $big
	for i in $(seq "$kills"); do
		rm -f "$d/dst/src"
		touch "$d/src"
		serve "$d/dst" || return 1
		send_bg "$logs/$cur.killed$i" "$d/src" 127.0.0.1: --timeout 20 -v \
			--chunk 256k --limit 32M
		# from the moment this round's job is under way (on a loaded
		# machine the sender may take longer than the delay to connect,
		# and a receiver killed before that is a refused connection)
		# (each earlier round started two jobs: the killed one and the rerun)
		wait_count "job started" $((2 * i - 1)) || return 1
		ms=$(rand_ms 50 1500)
		sleep_ms "$ms"
		kill -9 "$spid"
		wait "$spid" 2>/dev/null
		wait "$pid"
		crc=$?
		[ "$crc" -eq 6 ] || [ "$crc" -eq 0 ] ||
			{ echo "round $i: sender exit $crc, not 6 (connection lost)" >&2; return 1; }
		[ "$crc" -eq 0 ] || [ ! -e "$d/dst/src" ] ||
			{ echo "round $i: a partial file under the final name" >&2; return 1; }
		j=$(journal_chunks "$d/dst")
		check_window "$logs/$cur.killed$i" "$j" || return 1
		serve "$d/dst" || return 1
		send "$d/src" 127.0.0.1: --chunk 256k
		stop_serve
		echo "round $i: killed after ${ms} ms, sender exit $crc, $j chunks journalled, rerun: $out" \
			>>"$logs/$cur.rounds"
		[ "$rc" -eq 0 ] || { echo "rerun $i: exit $rc" >&2; return 1; }
		cmp "$d/src" "$d/dst/src" || return 1
		[ "$(json chunks_repaired)" = 0 ] ||
			{ echo "rerun $i: the journal named chunks the data lacked" >&2; return 1; }
		[ "$(json chunks_sent)" -le $((nchunks - j)) ] ||
			{ echo "rerun $i: sent $(json chunks_sent), journal had $j of $nchunks" >&2; return 1; }
	done
	cat "$logs/$cur.rounds"
}

sleep_ms() {
	sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"
}

# alive PID: the process runs (or is stopped), and is not a zombie
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st#Z}" = "$st" ]
}

# wait_exit PID SECONDS: until PID (a child) ends, at most SECONDS (then
# it is killed); its status in $wrc, 124 if it had to be killed.
wait_exit() {
	local _
	for _ in $(seq $((10 * $2))); do
		alive "$1" || break
		sleep 0.1
	done
	if alive "$1"; then
		kill -CONT "$1" 2>/dev/null
		kill -9 "$1" 2>/dev/null
		wait "$1" 2>/dev/null
		wrc=124
		return
	fi
	wait "$1"
	wrc=$?
}

# have_chunks REL: what the receiver's last OPEN of REL found in its
# journal (its -v line "REL: H of N chunks already here")
have_chunks() {
	grep -F "wisp-repl: $1: " "$logs/$cur.server" |
		sed -n 's/.* \([0-9][0-9]*\) of [0-9][0-9]* chunks already here$/\1/p' |
		tail -n1
}

# check_rerun SRC COPY HAVE N [KILLED_LOG]: after a rerun ($out), the copy
# matches, the journal named nothing the data lacked, the rerun sent no
# more than the HAVE of N chunks the journal held at its OPEN lacked, and
# (with the killed sender's -v log) every chunk that sender had credited
# was journalled and at most a window of what it sent was not.
check_rerun() {
	cmp "$1" "$2" || return 1
	[ "$(json chunks_repaired)" = 0 ] ||
		{ echo "the journal named chunks the data lacked" >&2; return 1; }
	[ -n "$3" ] && [ "$(json chunks_sent)" -le $(($4 - $3)) ] ||
		{ echo "sent $(json chunks_sent), the journal had ${3:-?} of $4" >&2; return 1; }
	[ -z "${5:-}" ] || check_window "$5" "$3"
}

# kill -9 of the sender mid-transfer and the same command at once, with
# no wait for the receiver to notice: the rerun finishes, matches, and
# sends no more than the journal lacked. On loopback the dead sender's
# FIN often reaches the receiver before the rerun does (the rounds log
# says how often the rerun took the receiver over instead); rerun_cut
# makes the death silent, so that the takeover must happen.
rerun_killed() {
	local d=$work/$cur i pid ms have took
	mkdir -p "$d/dst"
	mkfile "$d/src" $big
	serve "$d/dst" || return 1
	for i in $(seq "$kills"); do
		killed_round "$d" "$i"
		wait_count "chunks already here" $((2 * i - 1)) || { stop_serve; return 1; }
		ms=$(rand_ms 100 1500)
		sleep_ms "$ms"
		kill_wait "$pid"
		send "$d/src" 127.0.0.1: --chunk 256k
		have=$(have_chunks src)
		took=$(grep -c "takes over" "$logs/$cur.server")
		echo "round $i: killed ${ms} ms into the file, rerun at once: the journal had $have, takeovers so far $took, rerun: $out" \
			>>"$logs/$cur.rounds"
		[ "$rc" -eq 0 ] || { echo "rerun $i: exit $rc" >&2; stop_serve; return 1; }
		check_rerun "$d/src" "$d/dst/src" "$have" "$nchunks" \
			"$logs/$cur.killed$i" || { stop_serve; return 1; }
	done
	stop_serve
	cat "$logs/$cur.rounds"
}

# The sender's connection goes silent (its packets dropped from then on,
# as on a cut link) and the sender is killed -9: the receiver hears
# nothing and, with --timeout 300, would hold the job for 5 minutes. The
# same command at once must take the receiver over (its log says so each
# round; a "busy" refusal fails), finish, match, and send no more than the
# journal lacked. The dead run had 2 streams (both cut), the rerun has 1.
# Everything runs in a private network namespace (root;
# the rules are iptables-legacy's, on its loopback only).
rerun_cut() {
	local d=$work/$cur i pid ms have h e eports ok=0
	if ! unshare -n true 2>/dev/null || ! command -v nsenter >/dev/null ||
	   ! command -v iptables-legacy >/dev/null; then
		echo "SKIP: needs root, network namespaces, nsenter and iptables-legacy"
		return 0
	fi
	mkdir -p "$d/dst"
	mkfile "$d/src" $big
	unshare -n sh -c 'ip link set lo up && exec sleep 900' &
	h=$!
	pids+=("$h")
	for _ in $(seq 50); do
		nsenter -t "$h" -n ip -o link show lo 2>/dev/null | grep -q "UP" && break
		sleep 0.1
	done
	if ! nsenter -t "$h" -n iptables-legacy -A INPUT -p tcp --dport 9 -j DROP 2>/dev/null; then
		kill "$h"
		echo "SKIP: iptables-legacy does not work in a network namespace here"
		return 0
	fi
	pick_port || return 1
	nsenter -t "$h" -n "$run" "$repl" serve "$d/dst" --port "$port" -v --timeout 300 \
		>>"$logs/$cur.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	for _ in $(seq 300); do
		[ -n "$(nsenter -t "$h" -n ss -Hltn "sport = :$port")" ] && break
		sleep 0.1
	done
	in_ns=(nsenter -t "$h" -n)
	for i in $(seq "$kills"); do
		rm -f "$d/dst/src"
		touch "$d/src"
		nsenter -t "$h" -n "$run" "$repl" send "$d/src" 127.0.0.1: --port "$port" -v \
			--chunk 256k --limit 32M --streams 2 >/dev/null 2>"$logs/$cur.killed$i" &
		pid=$!
		pids+=("$pid")
		wait_count "chunks already here" $((2 * i - 1)) || break
		ms=$(rand_ms 100 1200)
		sleep_ms "$ms"
		# the sender's ends of its connections (one per stream)
		eports=$(nsenter -t "$h" -n ss -Htn state established "( dport = :$port )" |
			awk '{n = split($3, a, ":"); print a[n]}')
		[ -n "$eports" ] || { echo "round $i: no connection to cut" >&2; break; }
		for e in $eports; do
			nsenter -t "$h" -n iptables-legacy -A INPUT -p tcp --sport "$e" -j DROP &&
			nsenter -t "$h" -n iptables-legacy -A INPUT -p tcp --dport "$e" -j DROP ||
				break 2
		done
		kill_wait "$pid"
		send "$d/src" 127.0.0.1: --chunk 256k
		have=$(have_chunks src)
		echo "round $i: cut and killed ${ms} ms into the file, rerun at once: the journal had $have, rerun: $out" \
			>>"$logs/$cur.rounds"
		[ "$rc" -eq 0 ] || { echo "rerun $i: exit $rc" >&2; break; }
		[ "$(grep -c "takes over" "$logs/$cur.server")" -eq "$i" ] ||
			{ echo "round $i: the rerun did not take the receiver over" >&2; break; }
		check_rerun "$d/src" "$d/dst/src" "$have" "$nchunks" \
			"$logs/$cur.killed$i" || break
		[ "$i" -lt "$kills" ] || ok=1
	done
	in_ns=()
	# let the dead connections' FINs through, so the namespace goes
	nsenter -t "$h" -n iptables-legacy -F INPUT 2>/dev/null
	stop_serve
	kill "$h" 2>/dev/null
	wait "$h" 2>/dev/null
	[ "$ok" = 1 ] || return 1
	cat "$logs/$cur.rounds"
}

# A sender stopped (SIGSTOP) mid-transfer keeps its connection: a sender
# for another destination is still refused (busy, exit 3), but the same
# command takes the receiver over and finishes; the stopped sender, when
# continued while the new one runs, fails clearly (exit 6, "took over")
# and changes nothing: the copy matches, no other job started.
rerun_stopped() {
	local d=$work/$cur apid cpid have
	mkdir -p "$d/dst"
	mkfile "$d/src" $big
	serve "$d/dst" || return 1
	"$run" "$repl" send "$d/src" 127.0.0.1: --port "$port" -v --json \
		--chunk 256k --limit 32M >"$logs/$cur.old.out" 2>"$logs/$cur.old" &
	apid=$!
	pids+=("$apid")
	wait_journal "$d/dst" 8
	kill -STOP "$apid"
	# another destination: refused as before, nothing written there
	send "$d/src" 127.0.0.1:other --chunk 256k
	expect_fail 3 "busy with" || { stop_serve; return 1; }
	[ ! -e "$d/dst/other" ] || { echo "the refused job wrote" >&2; stop_serve; return 1; }
	# the same command: takes over
	(timeout 120 "$run" "$repl" send "$d/src" 127.0.0.1: --port "$port" \
		--json --chunk 256k --limit 32M >"$logs/$cur.new.out" \
		2>>"$logs/$cur.client") &
	cpid=$!
	pids+=("$cpid")
	wait_log "takes over" || { stop_serve; return 1; }
	# the old one wakes up while the new one moves chunks
	kill -CONT "$apid"
	wait_exit "$apid" 30
	[ "$wrc" -eq 6 ] ||
		{ echo "the old sender: exit $wrc, not 6" >&2; stop_serve; return 1; }
	grep -q "took over" "$logs/$cur.old" ||
		{ echo "the old sender did not say why" >&2; tail -n 2 "$logs/$cur.old" >&2; stop_serve; return 1; }
	wait "$cpid"
	rc=$?
	out=$(cat "$logs/$cur.new.out")
	stop_serve
	[ "$rc" -eq 0 ] || { echo "the new sender: exit $rc" >&2; return 1; }
	have=$(have_chunks src)
	check_rerun "$d/src" "$d/dst/src" "$have" "$nchunks" || return 1
	[ "$(grep -c "job started" "$logs/$cur.server")" -eq 2 ] ||
		{ echo "a job other than the old and the new one started" >&2; return 1; }
	[ -z "$(ls -A "$d/dst/.wisp-repl")" ] ||
		{ echo "leftovers in .wisp-repl" >&2; return 1; }
	echo "old sender: $(tail -n 1 "$logs/$cur.old"); journal at takeover: $have of $nchunks; new: $out"
}

# A disk image: a block device as SRC (a loop device on a file of ours)
# arrives as a regular file, byte for byte, mode 600. A rerun sends it
# again, since an image has no mtime to tell its versions apart, and so
# picks up a change. After kill -9 the rerun resumes from the journal. A
# change between a kill and the rerun is caught by the whole-file check
# (exit 7, nothing published), and the next run starts over and matches.
image_loop() {
	local d=$work/$cur lo="" name pid have size=$((24 * 1024 * 1024 + 8192)) n
	if [ "$(id -u)" != 0 ] || ! command -v losetup >/dev/null ||
	   [ ! -e /dev/loop-control ]; then
		echo "SKIP: a loop device needs root, losetup and /dev/loop-control"
		return 0
	fi
	n=$(((size + 262143) / 262144))
	mkdir -p "$d/dst"
	mkfile "$d/img" "$size"
	# another user of the machine may take the free device first
	for _ in 1 2 3; do
		lo=$(losetup -f --show "$d/img" 2>>"$logs/$cur.client") && break
		lo=""
		sleep 0.2
	done
	if [ -z "$lo" ] || [ ! -b "$lo" ]; then
		echo "SKIP: no loop device could be set up here ($(tail -n 1 "$logs/$cur.client"))"
		return 0
	fi
	loops+=("$lo")
	name=images/$(basename "$lo")
	serve "$d/dst" || return 1
	send "$lo" 127.0.0.1:images --chunk 256k
	[ "$rc" -eq 0 ] && cmp "$lo" "$d/dst/$name" && [ -f "$d/dst/$name" ] ||
		{ echo "the image did not arrive: exit $rc" >&2; stop_serve; return 1; }
	[ "$(json bytes)" = "$size" ] && [ "$(stat -c %a "$d/dst/$name")" = 600 ] ||
		{ echo "size or mode: $out, $(stat -c %a "$d/dst/$name")" >&2; stop_serve; return 1; }
	# changed through the device: the rerun is not skipped, matches
	dd if=/dev/urandom of="$lo" bs=4096 seek=1000 count=2 conv=notrunc,fsync status=none
	send "$lo" 127.0.0.1:images --chunk 256k
	[ "$rc" -eq 0 ] && [ "$(json files_skipped)" = 0 ] && cmp "$lo" "$d/dst/$name" ||
		{ echo "rerun after a change: $out" >&2; stop_serve; return 1; }
	# kill -9 mid-transfer: the rerun resumes from the journal
	rm -f "$d/dst/$name"
	send_bg "$logs/$cur.killed1" "$lo" 127.0.0.1:images -v --chunk 256k \
		--limit 16M
	wait_count "chunks already here" 3 || { stop_serve; return 1; }
	sleep_ms "$(rand_ms 300 1000)"
	kill_wait "$pid"
	wait_idle || { stop_serve; return 1; }
	send "$lo" 127.0.0.1:images --chunk 256k
	have=$(have_chunks "$name")
	echo "resumed: the journal had $have of $n, rerun: $out"
	[ "$rc" -eq 0 ] || { echo "resume: exit $rc" >&2; stop_serve; return 1; }
	check_rerun "$lo" "$d/dst/$name" "$have" "$n" "$logs/$cur.killed1" ||
		{ stop_serve; return 1; }
	# kill -9 once chunk 0 is journalled, then change chunk 0: exit 7
	rm -f "$d/dst/$name"
	send_bg "$logs/$cur.client" "$lo" 127.0.0.1:images --chunk 256k \
		--limit 8M
	wait_journal "$d/dst" 4
	kill_wait "$pid"
	wait_idle || { stop_serve; return 1; }
	dd if=/dev/urandom of="$lo" bs=4096 seek=1 count=1 conv=notrunc,fsync status=none
	send "$lo" 127.0.0.1:images --chunk 256k
	expect_fail 7 "changed during the transfer" || { stop_serve; return 1; }
	[ ! -e "$d/dst/$name" ] || { echo "published after exit 7" >&2; stop_serve; return 1; }
	send "$lo" 127.0.0.1:images --chunk 256k
	stop_serve
	[ "$rc" -eq 0 ] && [ "$(json chunks_sent)" = "$n" ] && cmp "$lo" "$d/dst/$name" ||
		{ echo "after exit 7: $out" >&2; return 1; }
	losetup -d "$lo" && loops=()
}

# A journalled chunk damaged in the .part file is found by the final
# check and sent again, alone.
corrupt_part() {
	local d=$work/$cur pid part jr c
	mkdir -p "$d/dst"
	mkfile "$d/src" $((16 * 1024 * 1024))
	serve "$d/dst" || return 1
	send_bg "$logs/$cur.client" "$d/src" 127.0.0.1: --chunk 256k --limit 8M
	wait_journal "$d/dst" 4
	kill_wait "$pid"
	wait_idle || { stop_serve; return 1; }
	part=$(ls "$d/dst"/.wisp-repl/*.part)
	jr=$(ls "$d/dst"/.wisp-repl/*.journal)
	# the chunk named by the journal's second record
	c=$(od -An -t u8 -j $((40 + 24)) -N 8 "$jr" | tr -d ' ')
	printf '\xff\x00\xff' | dd of="$part" bs=1 seek=$((c * 256 * 1024 + 1000)) \
		conv=notrunc status=none
	send "$d/src" 127.0.0.1: --chunk 256k
	stop_serve
	[ "$rc" -eq 0 ] && cmp "$d/src" "$d/dst/src" || return 1
	[ "$(json chunks_repaired)" = 1 ] ||
		{ echo "expected 1 repaired chunk, got $(json chunks_repaired)" >&2; return 1; }
	grep -q "chunk $c on disk does not match its journal" "$logs/$cur.server"
}

# A chunk that fails its checksum on arrival is refused and sent again,
# alone (WISP_REPL_TEST_CORRUPT damages chunk 5 after the sender hashed it,
# in every mode).
corrupt_in_flight() {
	local d=$work/$cur mode
	mkdir -p "$d/dst"
	mkfile "$d/src" $((4 * 1024 * 1024 + 99))
	serve "$d/dst" || return 1
	for mode in write read send; do
		rm -f "$d/dst/src"
		WISP_REPL_TEST_CORRUPT=5 send "$d/src" 127.0.0.1: --chunk 64k --mode "$mode"
		[ "$rc" -eq 0 ] && cmp "$d/src" "$d/dst/src" || { stop_serve; return 1; }
		[ "$(json chunks_bad)" = 1 ] && [ "$(json chunks_sent)" = 66 ] ||
			{ echo "$mode: $out" >&2; stop_serve; return 1; }
	done
	stop_serve
	grep -q "chunk 5 failed its checksum" "$logs/$cur.server"
}

# expect_fail CODE PATTERN: the last send failed with CODE and PATTERN.
expect_fail() {
	[ "$rc" -eq "$1" ] ||
		{ echo "exit $rc, expected $1" >&2; tail -n 3 "$logs/$cur.client" >&2; return 1; }
	grep -q "$2" "$logs/$cur.client" ||
		{ echo "no '$2' in the message" >&2; tail -n 3 "$logs/$cur.client" >&2; return 1; }
	# --json: the summary says so too
	[ "$(json result)" = error ] && [ "$(json exit)" = "$1" ] ||
		{ echo "JSON summary: $out" >&2; return 1; }
}

# expect_unpublished CODE TEXT FILE: as expect_fail, and nothing stands
# under FILE, the final name.
expect_unpublished() {
	expect_fail "$1" "$2" || return 1
	[ ! -e "$3" ] || { echo "incomplete file published" >&2; return 1; }
}

err_refused() {
	pick_port || return 1
	mkfile "$work/$cur.src" 1000
	send "$work/$cur.src" 127.0.0.1:
	expect_fail 3 "Connection refused"
}

# An unreachable peer, in a private network namespace (nothing leaves the
# machine): with no route to it, and a silent host (a veth whose far end
# has no address, and a static neighbour entry so that the SYNs go out and
# nothing answers) bounded by --timeout 3. Exit 3, the reason named.
err_unreachable() {
	local src=$work/$cur.src
	if ! unshare -n true 2>/dev/null; then
		echo "SKIP: no network namespace (needs root)"
		return 0
	fi
	mkfile "$src" 1000
	out=$(timeout 60 unshare -n sh -c 'ip link set lo up && exec "$@"' sh \
		"$run" "$repl" send "$src" 192.0.2.1: --json 2>>"$logs/$cur.client")
	rc=$?
	echo "$out" >>"$logs/$cur.client"
	expect_fail 3 "192.0.2.1:7470: address: Network is unreachable" || return 1
	out=$(timeout 60 unshare -n sh -c '
		ip link set lo up &&
		ip link add wr-u0 type veth peer name wr-u1 &&
		ip link set wr-u0 up && ip link set wr-u1 up &&
		ip addr add 192.0.2.2/24 dev wr-u0 &&
		ip neigh add 192.0.2.1 lladdr 02:00:00:00:00:01 dev wr-u0 &&
		exec "$@"' sh \
		"$run" "$repl" send "$src" 192.0.2.1: --timeout 3 --json \
		2>>"$logs/$cur.client")
	rc=$?
	echo "$out" >>"$logs/$cur.client"
	expect_fail 3 "192.0.2.1:7470: connect: timed out"
}

err_no_source() {
	pick_port || return 1
	send "$work/nonexistent" 127.0.0.1:
	expect_fail 4 "No such file or directory"
}

# the source is removed mid-transfer: exit 4, nothing under the final name
err_vanished() {
	local d=$work/$cur
	mkdir -p "$d/dst"
	mkfile "$d/src" $((24 * 1024 * 1024))
	serve "$d/dst" || return 1
	local rmpid
	# removed once the receiver has opened it, while chunks move
	(wait_log "chunks already here" && rm -f "$d/src") &
	rmpid=$!
	send "$d/src" 127.0.0.1: --limit 16M --chunk 256k
	wait "$rmpid"
	stop_serve
	expect_unpublished 4 "source vanished" "$d/dst/src"
}

# the receiver's disk is full: a 4 MiB tmpfs in a private mount namespace
err_enospc() {
	local d=$work/$cur
	mkdir -p "$d/dst"
	if ! unshare -m true 2>/dev/null; then
		echo "SKIP: no mount namespace (needs root)"
		return 0
	fi
	mkfile "$d/src" $((16 * 1024 * 1024))
	pick_port || return 1
	unshare -m sh -c 'mount -t tmpfs -o size=4m tmpfs "$1" && shift && exec "$@"' \
		sh "$d/dst" "$run" "$repl" serve "$d/dst" --port "$port" -v \
		>>"$logs/$cur.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	wait_listen "$port" "$spid" || return 1
	send "$d/src" 127.0.0.1:
	stop_serve
	expect_unpublished 5 "No space left on device" "$d/dst/src"
}

# the receiver may not write where it is asked to
err_eacces() {
	local d=$work/$cur
	mkdir -p "$d/dst/ro"
	mkfile "$d/src" 100000
	pick_port || return 1
	if [ "$(id -u)" = 0 ]; then
		# root ignores mode bits: serve as nobody, ro/ stays root's
		command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; return 0; }
		chmod 755 "$work" "$d"
		chown 65534:65534 "$d/dst"
		setpriv --reuid=65534 --regid=65534 --clear-groups \
			"$run" "$repl" serve "$d/dst" --port "$port" -v \
			>>"$logs/$cur.server" 2>&1 &
	else
		chmod 555 "$d/dst/ro"
		"$run" "$repl" serve "$d/dst" --port "$port" -v \
			>>"$logs/$cur.server" 2>&1 &
	fi
	spid=$!
	pids+=("$spid")
	wait_listen "$port" "$spid" || { cat "$logs/$cur.server" >&2; return 1; }
	send "$d/src" 127.0.0.1:ro
	stop_serve
	expect_fail 5 "Permission denied"
}

# a sender of another protocol version (the test hook
# WISP_REPL_TEST_VERSION) is turned away, and both sides say why
err_version() {
	local d=$work/$cur
	mkdir -p "$d/dst"
	mkfile "$d/src" 100000
	serve "$d/dst" || return 1
	WISP_REPL_TEST_VERSION=9 send "$d/src" 127.0.0.1:
	stop_serve
	expect_fail 3 "speaks wisp-repl protocol 2 and turned away protocol 9" || return 1
	grep -q "a sender of wisp-repl protocol 9 turned away" "$logs/$cur.server" ||
		{ echo "the receiver did not say why" >&2; return 1; }
	[ ! -e "$d/dst/src" ]
}

# wisp's TLS (WISP_TLS*, docs/tls.md) under the unchanged program: the
# copy matches, and a plaintext sender is turned away by the TLS receiver.
tls_psk() {
	local d=$work/$cur
	mkdir -p "$d/dst"
	"$top/tests/tls/make-certs.sh" "$d/tls" >/dev/null 2>&1 ||
		{ echo "make-certs.sh failed" >&2; return 1; }
	mkfile "$d/src" $((8 * 1024 * 1024 + 3))
	export WISP_TLS=required WISP_TLS_PSK_FILE="$d/tls/psk" \
		WISP_TLS_PSK_IDENTITY=wisp-repl
	serve "$d/dst" || return 1
	send "$d/src" 127.0.0.1: --chunk 128k
	unset WISP_TLS WISP_TLS_PSK_FILE WISP_TLS_PSK_IDENTITY
	[ "$rc" -eq 0 ] && cmp "$d/src" "$d/dst/src" || { stop_serve; return 1; }
	rm -f "$d/dst/src"
	send "$d/src" 127.0.0.1: --timeout 10
	stop_serve
	[ "$rc" -eq 3 ] || { echo "plaintext sender: exit $rc, not 3" >&2; return 1; }
	[ ! -e "$d/dst/src" ]
}

# the same with certificates, both ends authenticated (WISP_TLS_MUTUAL):
# the copy matches; a sender that trusts another CA does not connect
tls_cert() {
	local d=$work/$cur c
	mkdir -p "$d/dst"
	"$top/tests/tls/make-certs.sh" "$d/tls" >/dev/null 2>&1 ||
		{ echo "make-certs.sh failed" >&2; return 1; }
	c=$d/tls
	mkfile "$d/src" $((8 * 1024 * 1024 + 5))
	export WISP_TLS=required WISP_TLS_CERT="$c/server.pem" \
		WISP_TLS_KEY="$c/server.key" WISP_TLS_CA="$c/ca.pem" WISP_TLS_MUTUAL=1
	serve "$d/dst" || return 1
	export WISP_TLS_CERT="$c/client.pem" WISP_TLS_KEY="$c/client.key"
	send "$d/src" 127.0.0.1: --chunk 128k
	[ "$rc" -eq 0 ] && cmp "$d/src" "$d/dst/src" ||
		{ unset WISP_TLS WISP_TLS_CERT WISP_TLS_KEY WISP_TLS_CA WISP_TLS_MUTUAL; stop_serve; return 1; }
	rm -f "$d/dst/src"
	export WISP_TLS_CA="$c/rogue-ca.pem"
	send "$d/src" 127.0.0.1: --timeout 10
	unset WISP_TLS WISP_TLS_CERT WISP_TLS_KEY WISP_TLS_CA WISP_TLS_MUTUAL
	stop_serve
	[ "$rc" -eq 3 ] || { echo "sender trusting another CA: exit $rc, not 3" >&2; return 1; }
	[ ! -e "$d/dst/src" ]
}

if [ "${1:-}" = --list ]; then
	printf '%s\n' "${cases[@]}"
	exit 0
fi
[ $# -gt 0 ] && cases=("$@")
failed=()
for cur in "${cases[@]}"; do
	start=$(date +%s.%N)
	if "$cur"; then
		printf 'PASS %-16s %.1fs\n' "$cur" "$(echo "$(date +%s.%N) - $start" | bc)"
	else
		printf 'FAIL %-16s (logs: %s/%s.*)\n' "$cur" "$logs" "$cur"
		failed+=("$cur")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "failed: ${failed[*]}"
	exit 1
fi
[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
exit 0
