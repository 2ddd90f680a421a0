#!/usr/bin/env bash
# rping-demo.sh -- wisp's main job in one command: build wisp, then run
# Debian's unmodified rping server and client over it on loopback, with
# data verification, and say what happened.
#
#   scripts/rping-demo.sh [COUNT [SIZE]]     (defaults: 100 pings of 1000 B)
#
# On a fresh Debian 12 machine it installs what it needs with apt (run it
# as root or with sudo available). Both rping processes load wisp's
# libibverbs.so.1 and librdmacm.so.1 through scripts/wisp-run; the client
# checks every ping's data (-V) and the script checks both ends' output.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
count=${1:-100}
size=${2:-1000}
build=${WISP_BUILD_DIR:-$top/build}/release
port=${WISP_DEMO_PORT:-7999}
packages=(build-essential cmake ninja-build pkg-config libibverbs-dev
	  librdmacm-dev liburing-dev libssl-dev libisal-dev rdmacm-utils)

case "$count$size" in
*[!0-9]*) echo "usage: $0 [COUNT [SIZE]]  (numbers)" >&2; exit 2 ;;
esac

# shellcheck source=apt-ensure.sh
. "$top/scripts/apt-ensure.sh"
apt_ensure "${packages[@]}" || exit 1

echo "== building wisp in $build"
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DWISP_TESTS=OFF >/dev/null && ninja -C "$build" >/dev/null || exit 1

logs=$(mktemp -d /tmp/wisp-demo.XXXXXX)
export WISP_LIB_DIR=$build/lib
echo "== rping server and client over wisp on 127.0.0.1:$port" \
     "($count pings of $size octets, data verified)"
timeout 60 "$top/scripts/wisp-run" rping -s -a 127.0.0.1 -p "$port" \
	-C "$count" -S "$size" -V >"$logs/server" 2>&1 &
server=$!
for _ in $(seq 50); do
	ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
	sleep 0.1
done
timeout 60 "$top/scripts/wisp-run" rping -c -a 127.0.0.1 -p "$port" \
	-C "$count" -S "$size" -v -V >"$logs/client" 2>&1
crc=$?
wait "$server"
src=$?

pings=$(grep -c "^ping data: rdma-ping-" "$logs/client")
errors=$(grep -ciE "error|fail|mismatch|invalid" "$logs/client" "$logs/server" |
	 awk -F: '{s += $NF} END {print s + 0}')
echo "   libraries:  $(LD_LIBRARY_PATH=$WISP_LIB_DIR ldd "$(command -v rping)" |
	grep -E 'lib(ibverbs|rdmacm)' | awk '{print $3}' | xargs)"
echo "   client:     exit $crc, $pings pings received and verified"
echo "   server:     exit $src"
echo "   last ping:  $(grep '^ping data' "$logs/client" | tail -1 | cut -c1-60)..."
if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && [ "$pings" -eq "$count" ] &&
   [ "$errors" -eq 0 ]; then
	echo "== OK: rping ran over wisp (iWARP over TCP, no RDMA NIC, no kernel module)"
	rm -rf "$logs"
	exit 0
fi
echo "== FAILED: output kept in $logs"
exit 1
