#!/usr/bin/env bash
# A real link on one machine: two network namespaces joined by a veth
# pair at MTU 1500 (Ethernet's, instead of loopback's 64 KiB), with
# addresses from the benchmarking range 198.18.0.0/15.
#
#   scripts/netns-link.sh up [--mtu N] [--rate RATE] [NAMES]  make it (root)
#   scripts/netns-link.sh down [NAMES]                        remove it
#   scripts/netns-link.sh status [NAMES]                      print it
#
# NAMES: --srv NS --cli NS name the namespaces (default wisp-srv, wisp-cli);
# the emulated WAN (tests/wan/wan.sh) builds on this with its own names.
# up prints the --netns argument of bench/wisp_bench. --rate shapes both
# directions with tbf (e.g. 1gbit). It touches only what it made: the two
# namespaces (the veth pair wisp-v0/wisp-v1 lives and dies with them).
set -euo pipefail

srv=wisp-srv cli=wisp-cli
srv_addr=198.18.0.1 cli_addr=198.18.0.2
mtu=1500 rate=

die() { echo "netns-link: $*" >&2; exit 1; }
# exactly that name (grep -w would take wisp-srv for wisp-srv-x)
ns_exists() { ip netns list | awk '{print $1}' | grep -qxF "$1"; }

up() {
	[ "$(id -u)" = 0 ] || die "needs root (ip netns add)"
	ns_exists "$srv" && die "$srv exists: run '$0 down' first"
	ns_exists "$cli" && die "$cli exists: run '$0 down' first"
	ip netns add "$srv"
	ip netns add "$cli"
	ip link add wisp-v0 netns "$srv" type veth peer name wisp-v1 netns "$cli"
	ip -n "$srv" link set lo up
	ip -n "$cli" link set lo up
	ip -n "$srv" link set wisp-v0 mtu "$mtu" up
	ip -n "$cli" link set wisp-v1 mtu "$mtu" up
	ip -n "$srv" addr add "$srv_addr/24" dev wisp-v0
	ip -n "$cli" addr add "$cli_addr/24" dev wisp-v1
	if [ -n "$rate" ]; then
		# burst: at least one MTU and ~1 ms at the rate, as tbf wants
		ip netns exec "$srv" tc qdisc add dev wisp-v0 root tbf \
			rate "$rate" burst 256kb latency 50ms
		ip netns exec "$cli" tc qdisc add dev wisp-v1 root tbf \
			rate "$rate" burst 256kb latency 50ms
	fi
	# both ends carrier-up before anyone measures over it
	for _ in $(seq 50); do
		ip -n "$srv" link show wisp-v0 | grep -q LOWER_UP &&
			ip -n "$cli" link show wisp-v1 | grep -q LOWER_UP && break
		sleep 0.1
	done
	ip -n "$cli" link show wisp-v1 | grep -q LOWER_UP ||
		die "the veth pair did not come up"
	echo "--netns $srv,$cli,$srv_addr"
}

down() {
	ip netns del "$srv" 2>/dev/null || true
	ip netns del "$cli" 2>/dev/null || true
}

status() {
	for ns in "$srv" "$cli"; do
		ns_exists "$ns" || { echo "$ns: absent"; continue; }
		echo "$ns:"; ip -n "$ns" -br addr show
		ip netns exec "$ns" tc qdisc show | grep -v noqueue || true
	done
}

cmd=${1:-}
shift || true
while [ $# -gt 0 ]; do
	case $1 in
	--mtu) mtu=${2:?--mtu needs a value}; shift 2 ;;
	--rate) rate=${2:?--rate needs a value}; shift 2 ;;
	--srv) srv=${2:?--srv needs a name}; shift 2 ;;
	--cli) cli=${2:?--cli needs a name}; shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done
case $cmd in
up) up ;;
down) down ;;
status) status ;;
*) die "usage: $0 up [--mtu N] [--rate RATE] | down | status [--srv NS --cli NS]" ;;
esac
