#!/usr/bin/env bash
# perftest over wisp next to raw TCP, on 127.0.0.1, in one run; writes a
# CSV and draws docs/img/perftest.png. docs/perftest.md explains every
# figure and holds those of the reference machine.
#
#   bench/perftest-plot.sh [--seconds S] [--iters N] [--csv FILE] [--png FILE]
#   bench/perftest-plot.sh --plot-only [--csv FILE] [--png FILE]
#
# Measures, each client against its own server, both on this machine:
#   wisp     ib_write_bw, ib_read_bw, ib_send_bw -R -D S -s SIZE
#            (8 B .. 1 MiB): "BW average", MiB/s, shown in Gbit/s;
#            ib_send_lat, ib_write_lat -R -n N -s SIZE (8 B .. 64 KiB):
#            t_typical (median), t_avg and 99% of round trip / 2, in us;
#   raw TCP  iperf3 -c 127.0.0.1 -l SIZE -t S (one stream, SIZE-octet
#            writes): received bits/s;
#            qperf -m SIZE -t S 127.0.0.1 tcp_lat (a SIZE-octet TCP
#            ping-pong between two processes): mean round trip / 2, in us.
# wisp runs with its defaults (MPA rev 2, CRC off, io_uring engine) through
# scripts/wisp-run: WISP_LIB_DIR as there (default build/release/lib);
# other WISP_* variables in the environment apply.
#
# Needs: perftest iperf3 qperf python3-matplotlib (apt-get install -y ...).
# Defaults: --seconds 2, --iters 20000, --csv bench/perftest.csv (rewritten),
# --png docs/img/perftest.png. Takes about 3 minutes on 2 cores.
# Exit status: 0, or 1 if a measurement failed (its value is left empty).
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run="$top/scripts/wisp-run"
seconds=2
iters=20000
csv="$top/bench/perftest.csv"
png="$top/docs/img/perftest.png"
plot_only=0
bw_sizes=(8 64 512 4096 16384 65536 262144 1048576)
lat_sizes=(8 64 512 4096 16384 65536)

while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--csv) csv=$2; shift 2 ;;
	--png) png=$2; shift 2 ;;
	--plot-only) plot_only=1; shift ;;
	-h|--help) sed -n '2,26p' "$0"; exit 0 ;;
	*) echo "perftest-plot: unknown option $1 (--help)" >&2; exit 2 ;;
	esac
done

need() {
	command -v "$1" >/dev/null 2>&1
}

missing=()
if [ "$plot_only" -eq 0 ]; then
	for p in ib_write_bw:perftest iperf3:iperf3 qperf:qperf; do
		need "${p%%:*}" || missing+=("${p#*:}")
	done
fi
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || missing+=(python3-matplotlib)
if [ ${#missing[@]} -gt 0 ]; then
	echo "perftest-plot: missing, apt-get install -y ${missing[*]}" >&2
	exit 1
fi

plot() {
	/usr/bin/python3 - "$csv" "$png" <<'EOF'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

path, png = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(path, newline="")))
if not rows:
    sys.exit(f"perftest-plot: {path}: no rows")

def series(transport, test, metric):
    pts = sorted((int(r["size"]), float(r["value"])) for r in rows
                 if r["transport"] == transport and r["test"] == test
                 and r["metric"] == metric and r["value"] != "")
    return [p[0] for p in pts], [p[1] for p in pts]

def label(n):
    n = int(n)
    return f"{n >> 20} MiB" if n >= 1 << 20 else \
        f"{n >> 10} KiB" if n >= 1024 else f"{n} B"

r0 = rows[0]
fig, (bw, lat) = plt.subplots(1, 2, figsize=(13, 5.2))
for test, name, style in [("write_bw", "wisp ib_write_bw -R", "o-"),
                          ("read_bw", "wisp ib_read_bw -R", "s-"),
                          ("send_bw", "wisp ib_send_bw -R", "^-")]:
    x, y = series("wisp", test, "bw_avg")
    bw.plot(x, y, style, label=name)
x, y = series("tcp", "tcp_bw", "bw")
bw.plot(x, y, "k--", marker="x", label="raw TCP, iperf3 -l SIZE")
bw.set_xscale("log", base=2)
bw.set_yscale("log")
bw.set_xlabel("message size")
bw.set_ylabel("Gbit/s (10^9 bit/s of payload)")
bw.set_title("bandwidth, one QP / one TCP stream (higher is better)")

for test, name, color in [("send_lat", "ib_send_lat -R", "C0"),
                          ("write_lat", "ib_write_lat -R", "C1")]:
    x, y = series("wisp", test, "lat_typical")
    lat.plot(x, y, "o-", color=color, label=f"wisp {name}, median")
    x, y = series("wisp", test, "lat_avg")
    lat.plot(x, y, ":", marker=".", color=color, label=f"wisp {name}, mean")
x, y = series("tcp", "tcp_lat", "lat_avg")
lat.plot(x, y, "k--", marker="x", label="raw TCP ping-pong, qperf tcp_lat, mean")
lat.set_xscale("log", base=2)
lat.set_yscale("log")
lat.set_xlabel("message size")
lat.set_ylabel("microseconds, round trip / 2")
lat.set_title("latency, ping-pong (lower is better)")

for ax in (bw, lat):
    ticks = sorted({int(r["size"]) for r in rows if
                    (r["test"].endswith("bw")) == (ax is bw)})
    ax.set_xticks(ticks)
    ax.set_xticklabels([label(t) for t in ticks], rotation=30)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle(f"perftest 4.5 over wisp vs raw TCP, 127.0.0.1 — {r0['host']}, "
             f"{r0['cpus']} CPUs, {r0['cpu']}, load {r0['load']}, {r0['run']}",
             fontsize=9)
fig.tight_layout()
fig.savefig(png, dpi=110)
print(f"perftest-plot: wrote {png}")
EOF
}

if [ "$plot_only" -eq 1 ]; then
	plot
	exit $?
fi

work=$(mktemp -d /tmp/wisp-perftest-plot.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=../tests/rdmacm/ports.sh
. "$top/tests/rdmacm/ports.sh"
failed=0
run_id=$(date +%Y-%m-%dT%H:%M:%S)
host=$(uname -n)
cpus=$(nproc)
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
cpu=${cpu//,/ }
load=$(cut -d' ' -f1 /proc/loadavg)
mkdir -p "$(dirname "$csv")" "$(dirname "$png")"
echo "run,host,cpus,cpu,load,transport,tool,test,size,metric,unit,value" >"$csv"

# row TRANSPORT TOOL TEST SIZE METRIC UNIT VALUE
row() {
	echo "$run_id,$host,$cpus,$cpu,$load,$1,$2,$3,$4,$5,$6,$7" >>"$csv"
	[ -n "$7" ] || failed=1
}

# perftest PROGRAM ARGS...: server and client over wisp on 127.0.0.1; the
# client's result line (under " #bytes") on stdout, empty on failure.
perftest() {
	local prog=$1 spid
	shift
	pick_port || return 1
	timeout 120 "$run" "$prog" -R -p "$port" "$@" >"$work/server" 2>&1 &
	spid=$!
	wait_listen "$port"
	if ! timeout 120 "$run" "$prog" -R -p "$port" "$@" 127.0.0.1 \
		>"$work/client" 2>&1; then
		echo "  $prog $*: client failed:" >&2
		tail -n 3 "$work/client" "$work/server" >&2
		kill "$spid" 2>/dev/null
	fi
	wait "$spid" 2>/dev/null
	awk '/^ *#bytes/ { if ((getline l) > 0) print l; exit }' "$work/client"
}

echo "perftest-plot: $host, $cpus CPUs, $cpu, load $load"
echo "perftest-plot: wisp libraries from ${WISP_LIB_DIR:-$top/build/release/lib}"

for t in write read send; do
	for s in "${bw_sizes[@]}"; do
		line=$(perftest "ib_${t}_bw" -D "$seconds" -s "$s")
		# MiB/s (perftest's MB = 2^20 octets) to Gbit/s.
		v=$(awk '{ if ($4 > 0) printf "%.4f", $4 * 1048576 * 8 / 1e9 }' <<<"$line")
		printf '  wisp ib_%s_bw  %8s B  %10s Gbit/s\n' "$t" "$s" "${v:-FAILED}"
		row wisp "ib_${t}_bw" "${t}_bw" "$s" bw_avg Gbit/s "$v"
	done
done

for s in "${bw_sizes[@]}"; do
	pick_port || return 1
	timeout 60 iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
	spid=$!
	wait_listen "$port"
	timeout 60 iperf3 -c 127.0.0.1 -p "$port" -l "$s" -t "$seconds" -J \
		>"$work/iperf3.json" 2>&1
	wait "$spid" 2>/dev/null
	v=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("%.4f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9))' \
		"$work/iperf3.json" 2>/dev/null)
	printf '  TCP  iperf3 -l   %8s B  %10s Gbit/s\n' "$s" "${v:-FAILED}"
	row tcp iperf3 tcp_bw "$s" bw Gbit/s "$v"
done

for t in send write; do
	for s in "${lat_sizes[@]}"; do
		line=$(perftest "ib_${t}_lat" -n "$iters" -s "$s")
		# t_min t_max t_typical t_avg t_stdev 99% 99.9%, in us.
		read -r typ avg p99 < <(awk '{ if ($5 > 0) print $5, $6, $8 }' <<<"$line")
		printf '  wisp ib_%s_lat %8s B  median %8s us  mean %8s us  p99 %8s us\n' \
			"$t" "$s" "${typ:-FAILED}" "${avg:-FAILED}" "${p99:-FAILED}"
		row wisp "ib_${t}_lat" "${t}_lat" "$s" lat_typical us "${typ:-}"
		row wisp "ib_${t}_lat" "${t}_lat" "$s" lat_avg us "${avg:-}"
		row wisp "ib_${t}_lat" "${t}_lat" "$s" lat_p99 us "${p99:-}"
	done
done

pick_port || exit 1
qperf -lp "$port" >/dev/null 2>&1 &
qpid=$!
wait_listen "$port"
for s in "${lat_sizes[@]}"; do
	# -uu: every latency in ns.
	v=$(timeout 60 qperf -lp "$port" -uu -t "$seconds" -m "$s" 127.0.0.1 tcp_lat |
		awk '/latency/ && $4 == "ns" { printf "%.3f", $3 / 1000 }')
	printf '  TCP  qperf tcp_lat %6s B  mean %8s us\n' "$s" "${v:-FAILED}"
	row tcp qperf tcp_lat "$s" lat_avg us "$v"
done
timeout 10 qperf -lp "$port" 127.0.0.1 quit >/dev/null 2>&1
kill "$qpid" 2>/dev/null
wait "$qpid" 2>/dev/null

echo "perftest-plot: wrote $csv (load at the end: $(cut -d' ' -f1 /proc/loadavg))"
plot || failed=1
exit "$failed"
