#!/usr/bin/env bash
# Long fuzzing, outside CI: builds the libFuzzer targets with clang and runs
# every target for SECONDS of wall-clock time (default 3600), all at once,
# each on its own growing corpus seeded from tests/fuzz/corpus/.
#
#   scripts/fuzz-long.sh [SECONDS] [OUTDIR]
#
# OUTDIR (default build/fuzz-long) keeps, per target: the log, the corpus it
# grew, any crash artifact, and a summary line in OUTDIR/summary.txt with the
# wall and CPU seconds the target really got, executions, coverage and corpus
# size. The run is clean only if every target ends without an artifact.
# Environment: WISP_FUZZ_NICE (default 5), the niceness of the fuzzers, so
# that other work on the machine keeps priority.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-3600}
out=${2:-$top/build/fuzz-long}
bin=$out/bin
nice_level=${WISP_FUZZ_NICE:-5}

command -v clang >/dev/null || { echo "fuzz-long: clang is needed" >&2; exit 2; }
cmake -S "$top" -B "$bin" -G Ninja -DCMAKE_C_COMPILER=clang \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWISP_FUZZ=ON >/dev/null
cmake --build "$bin" >/dev/null

# utime + stime of a process, in seconds (fields 14 and 15 of /proc/PID/stat,
# counted after the parenthesised command name, which may hold spaces).
cpu_seconds() {
	local stat rest
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
	rest=${stat##*) }
	set -- $rest
	echo $(( (${12} + ${13}) / $(getconf CLK_TCK) ))
}

declare -A pid cpu
targets=()
for c in "$top"/tests/fuzz/corpus/*/; do
	t=$(basename "$c")
	[ -x "$bin/tests/fuzz/$t" ] || { echo "fuzz-long: no binary for $t" >&2; exit 2; }
	targets+=("$t")
	mkdir -p "$out/corpus/$t"
	nice -n "$nice_level" "$bin/tests/fuzz/$t" -max_total_time="$seconds" \
		-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$out/$t-" "$out/corpus/$t" "$c" \
		>"$out/$t.log" 2>&1 &
	pid[$t]=$!
	cpu[$t]=0
done

start=$(date +%s)
echo "fuzz-long: ${#targets[@]} targets for ${seconds}s each, logs in $out"
# Sample CPU time while the targets run: once a process has exited its
# /proc entry is gone, so the last sample is what it got.
while :; do
	alive=0
	for t in "${targets[@]}"; do
		if kill -0 "${pid[$t]}" 2>/dev/null; then
			alive=1
			s=$(cpu_seconds "${pid[$t]}")
			[ "$s" -gt "${cpu[$t]}" ] && cpu[$t]=$s
		fi
	done
	[ $alive = 1 ] || break
	sleep 5
done

rc=0
printf '%-20s %7s %7s %12s %8s %6s %7s %s\n' target wall_s cpu_s execs exec/s cov corpus result \
	| tee "$out/summary.txt"
for t in "${targets[@]}"; do
	wait "${pid[$t]}" && res=clean || { res=FAILED; rc=1; }
	ls "$out/$t-"* >/dev/null 2>&1 && { res=FAILED; rc=1; }
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log")
	cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1 | cut -d' ' -f2)
	printf '%-20s %7s %7s %12s %8s %6s %7s %s\n' "$t" "$(( $(date +%s) - start ))" \
		"${cpu[$t]}" "${execs:-?}" "$(( ${execs:-0} / (${cpu[$t]} > 0 ? ${cpu[$t]} : 1) ))" \
		"${cov:-?}" "$(ls "$out/corpus/$t" | wc -l)" "$res" | tee -a "$out/summary.txt"
done
exit $rc
