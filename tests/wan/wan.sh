#!/usr/bin/env bash
# The emulated WAN: two namespaces joined by a veth pair at MTU 1500
# (scripts/netns-link.sh), tbf rate limits on both ends, and at each end a
# wisp-wan-delay holding every IPv4 packet that arrives for half the
# round-trip delay and dropping some (ping needs -U to see it all: see
# tests/wan/wan_delay.c). docs/replication.md, "The emulated WAN".
#
#   tests/wan/wan.sh up [--rate RATE] [--delay MS] [--loss PCT] [NAMES]
#                       [--bin PATH] [--gso on|off] [--tcp-max BYTES]
#                       [--rt PRIO] [--cc ALGO]
#   tests/wan/wan.sh down [NAMES]        stop the program, remove both ns
#   tests/wan/wan.sh drop SECONDS [NAMES]  the link forwards nothing for
#                                        SECONDS (blocks that long)
#   tests/wan/wan.sh stats [NAMES]       the delay program's counters
#   tests/wan/wan.sh status [NAMES]
#   tests/wan/wan.sh probe [NAMES]       can this kernel delay packets?
#                                        0, or 1 with the reason on stdout
#
# NAMES: --srv NS --cli NS (default wisp-wan-srv, wisp-wan-srv's peer
# wisp-wan-cli); the server end is 198.18.0.1, the client end 198.18.0.2.
# --delay is the round-trip time added (ms, decimals allowed): each
# direction gets half. --loss is per packet, each direction. --rate
# (tbf, each direction; default 1gbit, "" for none). --gso on hands
# whole GSO packets to the delay program (cheaper; a loss then drops a
# whole burst), default on without loss and off with. --tcp-max sets the
# top of tcp_rmem/tcp_wmem in both namespaces (default 64 MiB). --rt runs
# the delay programs SCHED_FIFO at PRIO (default 10; 0: not), so that on a
# busy machine they still release packets on time: they are the wire.
# --cc sets TCP's congestion control in both namespaces; without it they
# inherit the host's default (Debian's is cubic; bbr on the machine whose
# figures docs/replication.md shows). A program can still pick its own
# (TCP_CONGESTION; iperf3 -C).
# Needs root. Touches only the two namespaces it makes: the delay programs
# and their iptables rules live in them, so `down` (or the namespaces'
# deletion) leaves nothing behind even after a crash.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
srv=wisp-wan-srv cli=wisp-wan-cli
rate=1gbit delay=0 loss=0 gso='' tcp_max=$((64 << 20)) rt=10 cc=''
bin=${WISP_WAN_DELAY:-${WISP_BUILD_DIR:-$top/build}/tests/wan/wisp-wan-delay}
state=${WISP_WAN_STATE:-/run/wisp-wan}

die() { echo "wan: $*" >&2; exit 1; }

# pid_of NS: the delay program running in NS
pid_of() {
	local pid
	pid=$(cat "$state/$1.pid" 2>/dev/null) || return 1
	# the pid is ours only while it still runs our program
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = wisp-wan-delay ] || return 1
	echo "$pid"
}

stop_delay() {
	local ns=$1 pid
	pid=$(pid_of "$ns") || { rm -f "$state/$ns.pid"; return 0; }
	kill -TERM "$pid"
	for _ in $(seq 50); do
		[ -e "/proc/$pid" ] || break
		sleep 0.1
	done
	[ -e "/proc/$pid" ] && echo "wan: wisp-wan-delay $pid did not stop" >&2
	sed -n "s/^wisp-wan-delay: \(exit:\|UNINTENDED\)/$ns: \1/p" \
		"$state/$ns.log" 2>/dev/null || true
	rm -f "$state/$ns.pid"
}

# start_delay NS IFACE SEED HALF: the program for NS's way in
start_delay() {
	local ns=$1 pid g=()
	[ "$gso" = on ] && g=(--gso)
	rm -f "$state/$ns.pid"
	ip netns exec "$ns" ${rtcmd[@]+"${rtcmd[@]}"} "$bin" --iface "$2" --seed "$3" --delay "$4" \
		--loss "$loss" ${g[@]+"${g[@]}"} \
		--pidfile "$state/$ns.pid" </dev/null >"$state/$ns.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		[ -s "$state/$ns.pid" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	pid_of "$ns" >/dev/null && return 0
	cat "$state/$ns.log" >&2
	return 1
}

up() {
	local half
	[ "$(id -u)" = 0 ] || die "needs root"
	[ -x "$bin" ] || die "no $bin: build it (cmake --build build) or pass --bin"
	for ns in "$srv" "$cli"; do
		ip netns list | awk '{print $1}' | grep -qxF "$ns" &&
			die "$ns exists: run '$0 down' first"
	done
	[[ $delay =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--delay wants milliseconds, not '$delay'"
	[[ $loss =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--loss wants a percentage, not '$loss'"
	[ -n "$gso" ] || { [ "$loss" = 0 ] && gso=on || gso=off; }
	rtcmd=()
	if [ "$rt" != 0 ]; then
		if chrt -f "$rt" true 2>/dev/null; then
			rtcmd=(chrt -f "$rt")
		else
			echo "wan: no SCHED_FIFO here: the delay programs run at normal priority" >&2
		fi
	fi
	mkdir -p "$state"
	# a step that fails takes down what up made (set -e ends the script)
	trap 'echo "wan: up failed; removing what it made" >&2; down' ERR
	"$top/scripts/netns-link.sh" up --srv "$srv" --cli "$cli" \
		${rate:+--rate "$rate"} >/dev/null
	# a known window: autotuning up to tcp_max (docs/replication.md)
	for ns in "$srv" "$cli"; do
		ip netns exec "$ns" sysctl -q -w \
			net.ipv4.tcp_rmem="4096 131072 $tcp_max" \
			net.ipv4.tcp_wmem="4096 16384 $tcp_max"
		[ -z "$cc" ] || ip netns exec "$ns" sysctl -q -w \
			net.ipv4.tcp_congestion_control="$cc" || {
			echo "wan: cannot set $cc (not in tcp_allowed_congestion_control, and no CAP_SYS_MODULE?)" >&2
			false
		}
	done
	half=$(awk -v d="$delay" 'BEGIN { printf "%.6f", d / 2 }')
	start_delay "$srv" wisp-v0 1 "$half" && start_delay "$cli" wisp-v1 2 "$half" ||
		{ echo "wan: wisp-wan-delay did not start" >&2; false; }
	trap - ERR
	echo "wan: $srv 198.18.0.1 <-> $cli 198.18.0.2: rate ${rate:-unlimited}," \
		"RTT +${delay} ms, loss ${loss} %, gso $gso, tcp $(ip netns exec "$cli" sysctl -n net.ipv4.tcp_congestion_control) (logs $state/{$srv,$cli}.log)"
}

down() {
	stop_delay "$srv"
	stop_delay "$cli"
	"$top/scripts/netns-link.sh" down --srv "$srv" --cli "$cli"
}

drop() {
	local secs=$1
	p1=$(pid_of "$srv") && p2=$(pid_of "$cli") ||
		die "no wisp-wan-delay running for $srv/$cli"
	# up again even if this script is stopped early (p1, p2 are global:
	# the EXIT trap runs after drop's locals are gone)
	trap 'kill -USR2 "$p1" "$p2" 2>/dev/null || true' EXIT
	trap 'exit 1' INT TERM
	kill -USR1 "$p1" "$p2"
	sleep "$secs"
}

stats() {
	local ns pid
	for ns in "$srv" "$cli"; do
		pid=$(pid_of "$ns") || die "no wisp-wan-delay running in $ns"
		kill -HUP "$pid"
	done
	sleep 0.2
	for ns in "$srv" "$cli"; do
		grep "stats:" "$state/$ns.log" | tail -1 | sed "s/^wisp-wan-delay:/$ns:/"
	done
}

# probe: the kernel must have the NFQUEUE target (xt_NFQUEUE,
# nfnetlink_queue) for the delay program: a rule in an empty namespace of
# that name, gone with it. Prints why not, and fails, if it cannot.
probe() {
	local out
	ip netns add "$srv" 2>/dev/null ||
		{ echo "cannot create a network namespace"; return 1; }
	if ! out=$(ip netns exec "$srv" iptables-legacy -w -A INPUT -j NFQUEUE \
		--queue-num 0 2>&1); then
		ip netns del "$srv"
		echo "no NFQUEUE in this kernel (iptables-legacy: $(head -n1 <<<"${out:-failed}"))"
		return 1
	fi
	ip netns del "$srv"
}

cmd=${1:-}
shift || true
secs=
[ "$cmd" = drop ] && { secs=${1:?drop needs SECONDS}; shift; }
while [ $# -gt 0 ]; do
	case $1 in
	--rate) rate=$2; shift 2 ;;
	--delay) delay=${2:?}; shift 2 ;;
	--loss) loss=${2:?}; shift 2 ;;
	--srv) srv=${2:?}; shift 2 ;;
	--cli) cli=${2:?}; shift 2 ;;
	--bin) bin=${2:?}; shift 2 ;;
	--gso) gso=${2:?}; shift 2 ;;
	--tcp-max) tcp_max=${2:?}; shift 2 ;;
	--rt) rt=${2:?}; shift 2 ;;
	--cc) cc=${2:?}; shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done
case $cmd in
up) up ;;
down) down ;;
drop) drop "$secs" ;;
stats) stats ;;
probe) probe ;;
status) "$top/scripts/netns-link.sh" status --srv "$srv" --cli "$cli"
	for ns in "$srv" "$cli"; do
		echo "wisp-wan-delay in $ns: $(pid_of "$ns" || echo not running)"
	done ;;
*) die "usage: $0 up|down|drop SECONDS|stats|status|probe [options] (see the top of $0)" ;;
esac
