#!/usr/bin/env bash
# Zero-copy sends (WISP_SEND_ZC, docs/configuration.md) against wisp's
# copying sends and raw TCP, on one path, RDMA WRITE 64 KiB and 1 MiB:
# every repeat runs wisp_bench once with WISP_SEND_ZC=off and once with
# =on (the order alternates from repeat to repeat), and each wisp_bench
# run measures raw TCP beside wisp. bench/zc_summary.py turns the CSVs
# into the table of docs/benchmarks.md ("Zero-copy sends").
#
#   bench/zc.sh PATH CRC [OUTDIR]
#
# PATH: loopback, mtu1500 (two network namespaces joined by a veth pair
# at MTU 1500, scripts/netns-link.sh; FPDUs up to 64 KiB between the two
# wisp ends) or mtu1500-mss (the same link with WISP_BIG_FPDU=off: FPDUs
# that fit one segment). CRC: crc or nocrc. The namespaces (root) are
# made and removed by the script. OUTDIR (default /tmp/wisp-zc.<time>)
# gets PATH-CRC-ENGINE-zcoff.csv, PATH-CRC-ENGINE-zcon.csv and the
# programs' output.
# Environment: WISP_BUILD_DIR (a Release build, default build/release),
# ZC_REPEAT (3), ZC_SECONDS (2), ZC_ENGINE (uring), ZC_SRV / ZC_CLI (the
# namespaces' names, default zc-srv / zc-cli). About three
# minutes with the defaults.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WISP_BUILD_DIR:-$top/build/release}
path=${1:-}
crc=${2:-}
out=${3:-/tmp/wisp-zc.$(date -u +%Y%m%dT%H%M%S)}
repeat=${ZC_REPEAT:-3}
seconds=${ZC_SECONDS:-2}
engine=${ZC_ENGINE:-uring}
srv=${ZC_SRV:-zc-srv} cli=${ZC_CLI:-zc-cli}

die() { echo "zc: $*" >&2; exit 1; }
case $path in loopback | mtu1500 | mtu1500-mss) ;;
*) die "PATH: loopback, mtu1500 or mtu1500-mss, not '$path'" ;; esac
case $crc in crc | nocrc) ;; *) die "CRC: crc or nocrc, not '$crc'" ;; esac
case $repeat in '' | *[!0-9]*) die "ZC_REPEAT: not a number: $repeat" ;; esac
[ -x "$build/bench/wisp_bench" ] || die "no $build/bench/wisp_bench"
mkdir -p "$out"

netns_arg=()
link_up=0
cleanup() { [ $link_up = 0 ] || "$top/scripts/netns-link.sh" down --srv "$srv" --cli "$cli" >/dev/null; }
trap cleanup EXIT
if [ "$path" != loopback ]; then
	[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
	netns=$("$top/scripts/netns-link.sh" up --srv "$srv" --cli "$cli" | tail -1)
	link_up=1
	read -ra netns_arg <<<"$netns"
fi
big=on
[ "$path" = mtu1500-mss ] && big=off
crc_arg=--crc
[ "$crc" = nocrc ] && crc_arg=--no-crc

run() { # ZC REPEAT: one wisp_bench run, its output kept
	local zc=$1 r=$2 name="$path-$crc-$engine-zc$1"
	echo "zc: $name repeat $r (load $(cut -d' ' -f1 /proc/loadavg))"
	WISP_SEND_ZC=$zc WISP_BIG_FPDU=$big "$build/bench/wisp_bench" \
		--engine "$engine" --tests write_64k,write_1m \
		--seconds "$seconds" --repeat 1 "$crc_arg" \
		--csv "$out/$name.csv" "${netns_arg[@]}" \
		>>"$out/$name.log" 2>&1 || die "$name failed: see $out/$name.log"
}

for r in $(seq 1 "$repeat"); do
	if [ $((r % 2)) = 1 ]; then run off "$r"; run on "$r"
	else run on "$r"; run off "$r"; fi
done
echo "zc: $out"
