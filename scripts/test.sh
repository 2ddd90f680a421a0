#!/usr/bin/env bash
# wisp's test command: what a newcomer pastes and what CI runs.
#
#   scripts/test.sh
#
# On a fresh Debian 12 machine it installs the packages it needs, then:
#   1. builds wisp with gcc and -Werror, runs every Criterion suite;
#   2. builds again with AddressSanitizer + UBSan, runs the same suites;
#   3. builds the libFuzzer targets with clang, runs each on its seed
#      corpus for WISP_FUZZ_SECONDS (default 30) seconds;
#   4. runs cppcheck over wisp's sources;
#   5. checks the ABI of the drop-in libibverbs.so.1 against Debian's and
#      runs Debian's ibv_devinfo over it (scripts/abi-check.sh); installs
#      wisp into a scratch prefix and as a Debian package (as root, with
#      apt-get, then removes it) and runs rping over the installed copy
#      (tests/install/run.sh, docs/install.md);
#   6. runs the side-by-side benchmark briefly (figures only: a slow run
#      fails nothing, a data mismatch does), and wisp-repl across the
#      emulated WAN next to iperf3 (bench/wan-goodput.sh, 64 MiB at 10
#      and 50 ms), then builds with
#      ThreadSanitizer and runs the data-path and rdma_cm suites (one
#      process per test, tests/tsan) and the benchmark there, where any
#      reported race fails;
#   7. runs the siw interop matrix against the Linux kernel's soft-iWARP
#      in a qemu guest (tests/interop/run.sh, docs/interop.md; its cases
#      skip, with the reason, only where qemu cannot run a guest at all).
# It ends with one line "wisp: N passed, M failed" (each unit test of each
# build counts once, and so does each build, fuzz target and cppcheck) and
# exits non-zero if anything failed.
#
# Environment: WISP_BUILD_DIR (default ./build), WISP_FUZZ_SECONDS,
# WISP_SKIP_DEPS=1 to skip the package check, WISP_INTEROP=0 to leave out
# the interop matrix (about 4 minutes) while iterating locally.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WISP_BUILD_DIR:-$top/build}
fuzz_seconds=${WISP_FUZZ_SECONDS:-30}
jobs=$(nproc 2>/dev/null || echo 2)

packages=(
	build-essential cmake ninja-build pkg-config
	clang llvm libclang-rt-14-dev
	libibverbs-dev librdmacm-dev liburing-dev libssl-dev libisal-dev
	libxxhash-dev
	libcriterion-dev cppcheck tcpdump openssl
	ibverbs-utils rdmacm-utils perftest
	iproute2 file man-db groff-base
	libnetfilter-queue-dev libmnl-dev iptables iperf3 iputils-ping
)

log() { printf '\n=== %s\n' "$*"; }

# shellcheck source=apt-ensure.sh
. "$top/scripts/apt-ensure.sh"
install_deps() { apt_ensure "${packages[@]}"; }

passed=0
failed=0
failures=()
failed_logs=()
nstep=0

# step NAME COMMAND...: run a step, count it, keep going on failure. Its
# output is kept in $build/steps/ so that the summary can name the cases
# that failed in it.
step() {
	local name=$1 out
	shift
	nstep=$((nstep + 1))
	out="$build/steps/$nstep.log"
	log "$name"
	# Not a pipeline: the step runs in this shell, so the counters that
	# run_suites keeps survive it.
	local rc=0
	"$@" > >(tee "$out") 2>&1 || rc=$?
	wait $! # the tee, so that its output comes before what follows
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures+=("$name")
		failed_logs+=("$out")
		echo "FAILED: $name" >&2
	fi
}

# The cases a failed step names: Criterion's and the program runners'
# "[FAIL] suite::case", a ctest entry that died without one, and the
# interop matrix's "FAIL <case>" lines.
failed_cases() {
	grep -hE '^\[FAIL\] |^FAIL  |^ctest FAILED: ' "$@" 2>/dev/null |
		sed -E 's/^\[FAIL\] //; s/^FAIL +//; s/^ctest FAILED: //' |
		awk '{print $1}' | sort -u | head -30
}

configure_build() {
	local dir=$1
	shift
	cmake -S "$top" -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 ||
		{ cat "$dir.configure.log"; return 1; }
	cmake --build "$dir" -j "$jobs"
}

# Unit tests counted one by one from Criterion's synthesis lines.
unit_passed=0
unit_failed=0

run_suites() {
	local log="$1.ctest.log" rc=0 sums

	ctest --test-dir "$1" -V >"$log" 2>&1 || rc=1
	# Per suite: its tests, what its vectors checked, its tally.
	sed -n 's/^[0-9]*: //p' "$log" | grep -E \
		"^\[====\] Running|^\[PASS\]|^\[FAIL\]|^\[----\] [^C]|Synthesis: Tested" |
		grep -v "Criterion v" | sed 's/: ([0-9.]*s)$//'
	grep -E "tests passed|tests failed out of" "$log"
	sums=$(grep -oE "Passing: [0-9]+ \| Failing: [0-9]+ \| Crashing: [0-9]+" "$log" |
		awk '{p += $2; f += $5 + $8} END {print p + 0, f + 0}')
	unit_passed=$((unit_passed + ${sums% *}))
	unit_failed=$((unit_failed + ${sums#* }))
	if [ $rc -ne 0 ]; then
		grep -E "\[FAIL\]|\[----\].*(Assertion|Unexpected|signal)|ERROR: |runtime error" "$log" | head -40
		sed -n '/The following tests FAILED/,$p' "$log" |
			sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+).*/ctest FAILED: \1/p'
	fi
	return $rc
}

run_suites_sanitized() {
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		run_suites "$1"
}

# tests/tsan/CMakeLists.txt sets the same options on each ctest entry.
run_suites_tsan() {
	TSAN_OPTIONS="halt_on_error=1:exitcode=66" run_suites "$1"
}

run_fuzzers() {
	local dir=$1 rc=0 t

	for t in "$top"/tests/fuzz/corpus/*/; do
		t=$(basename "$t")
		[ -x "$dir/tests/fuzz/$t" ] || { echo "no fuzz binary for corpus $t"; rc=1; continue; }
		mkdir -p "$dir/work-corpus/$t"
		echo "--- $t: ${fuzz_seconds}s on $(ls "$top/tests/fuzz/corpus/$t" | wc -l) seeds"
		# The first corpus folder receives new inputs; the seeds in the
		# repository stay untouched.
		"$dir/tests/fuzz/$t" -max_total_time="$fuzz_seconds" \
			-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
			-artifact_prefix="$dir/$t-" \
			"$dir/work-corpus/$t" "$top/tests/fuzz/corpus/$t" \
			>"$dir/$t.log" 2>&1 || { rc=1; tail -40 "$dir/$t.log"; }
		grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|Done [0-9]+ runs)" \
			"$dir/$t.log" | tail -2
	done
	return $rc
}

run_cppcheck() {
	local dirs=("$top/wire" "$top/mem" "$top/sync" "$top/mpa" "$top/ddp" "$top/rdmap" "$top/tcp-glue"
		    "$top/verbs-provider" "$top/tests/fuzz" "$top/tests/wan")

	[ -d "$top/bench" ] && dirs+=("$top/bench")
	[ -d "$top/tools" ] && dirs+=("$top/tools")
	[ -d "$top/demos" ] && dirs+=("$top/demos")
	cppcheck --quiet --error-exitcode=1 --std=c11 --inline-suppr \
		--enable=warning,style,performance,portability \
		--suppress=missingIncludeSystem \
		-I "$top/wire" -I "$top/mem" -I "$top/sync" -I "$top/mpa" -I "$top/ddp" -I "$top/rdmap" \
		-I "$top/tcp-glue" \
		-I "$top/verbs-provider" -I "$top/verbs-provider/ibverbs" \
		-I "$top/verbs-provider/rdmacm" \
		"${dirs[@]}"
}

run_bench() {
	"$1/bench/wisp_bench" --seconds 1 --iters 5000 --engine both
}

# wisp-repl across the emulated WAN (1 Gbit/s, 10 and 50 ms) in each mode
# next to iperf3, 64 MiB each (docs/replication.md, "Goodput against
# RTT", has the 4 GiB figures): figures only, but a transfer that fails
# or copies wrong fails the step.
run_wan_bench() {
	WISP_BUILD_DIR="$1" "$top/bench/wan-goodput.sh" --size 64 \
		--rtt "10 50" --reps 1 --lock "" --csv "$1/wan-goodput.csv"
}

if [ "${WISP_SKIP_DEPS:-0}" != 1 ]; then
	install_deps || { echo "wisp: 0 passed, 1 failed"; exit 1; }
fi
mkdir -p "$build"
rm -rf "$build/steps"
mkdir -p "$build/steps"

# Release (-O3), as users and the benchmarks build it: gcc finds more
# maybe-uninitialized paths at -O3 than at RelWithDebInfo's -O2, and
# -Werror must stop them here rather than in a user's build. -g keeps
# the stacks readable.
step "build (gcc, -Werror)" configure_build "$build/release" \
	-DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Release \
	-DCMAKE_C_FLAGS_RELEASE="-O3 -g -DNDEBUG"
step "unit suites" run_suites "$build/release"

step "build (ASan + UBSan)" configure_build "$build/asan" \
	-DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug -DWISP_ASAN=ON
step "unit suites under ASan + UBSan" run_suites_sanitized "$build/asan"

step "build fuzz targets (clang, libFuzzer)" configure_build "$build/fuzz" \
	-DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWISP_FUZZ=ON
step "fuzz each target for ${fuzz_seconds}s" run_fuzzers "$build/fuzz"

step "cppcheck" run_cppcheck

step "ABI of libibverbs.so.1, Debian's ibv_devinfo over wisp" \
	"$top/scripts/abi-check.sh" "$build/release"
step "install: a scratch prefix and the .deb, rping over the installed wisp" \
	"$top/tests/install/run.sh" "$build/release"
step "benchmark: wisp next to raw TCP on loopback" run_bench "$build/release"
step "benchmark: wisp-repl across the emulated WAN next to iperf3" \
	run_wan_bench "$build/release"

# wisp against the Linux kernel's siw in a qemu guest (docs/interop.md):
# both directions, rping / perftest / disconnects / rejects, every MPA mode.
if [ "${WISP_INTEROP:-1}" != 0 ]; then
	step "siw interop in a qemu guest" env WISP_LIB_DIR="$build/release/lib" \
		WISP_INTEROP_LOGDIR="$build/interop" "$top/tests/interop/run.sh"
else
	log "siw interop left out: WISP_INTEROP=0"
fi

# Criterion cannot start under TSan (docs/testing.md): the TSan build
# runs the data-path and rdma_cm suites with a runner of ours
# (tests/tsan), then the benchmark, a plain threaded program that drives
# both engines through every path of the data path.
step "build (TSan)" configure_build "$build/tsan" \
	-DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug -DWISP_TSAN=ON \
	-DWISP_TESTS=ON
step "data-path and rdma_cm suites under ThreadSanitizer (no race may be reported)" \
	run_suites_tsan "$build/tsan"
step "benchmark under ThreadSanitizer (no race may be reported)" \
	env TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
	"$build/tsan/bench/wisp_bench" --seconds 1 --iters 2000 --warmup 100 \
	--engine both
# The TLS path (docs/tls.md): the TLS benchmark, small, on both engines.
run_tls_tsan() {
	local e
	for e in uring epoll; do
		env WISP_ENGINE=$e TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
			LD_LIBRARY_PATH="$build/tsan/lib" \
			"$build/tsan/bench/wisp_tls_bench" --mib 16 --iters 500 || return 1
	done
}
step "TLS benchmark under ThreadSanitizer (no race may be reported)" \
	run_tls_tsan

echo
for f in "${failures[@]}"; do echo "failed step: $f"; done
if [ ${#failed_logs[@]} -gt 0 ]; then
	for c in $(failed_cases "${failed_logs[@]}"); do echo "failed case: $c"; done
fi
echo "unit tests: $unit_passed passed, $unit_failed failed (both builds)"
echo "wisp: $((passed + unit_passed)) passed, $((failed + unit_failed)) failed"
[ "$failed" -eq 0 ] && [ "$unit_failed" -eq 0 ]
