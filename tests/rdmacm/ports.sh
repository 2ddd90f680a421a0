# shellcheck shell=bash
# ports.sh: TCP ports for the program runners, and waiting for a server
# to listen on one (sourced by the runners in tests/rdmacm and by
# demos/replicate/run-tests.sh).
#
# pick_port sets $port to a port that, at that moment, no socket of this
# machine uses and the kernel lets us bind, and that no other runner of
# this tree (another build, another checkout, another user of the machine)
# holds: each runner takes an flock on a file named after the port for as
# long as it uses it (until its next pick_port, or its exit). pick_port N
# holds N consecutive ports from $port on. Ports are
# drawn at random below the kernel's ephemeral range, so outgoing
# connections (which take ephemeral ports) never land on them meanwhile.

port=
port_lock_fds=()
port_lock_dir=${TMPDIR:-/tmp}/wisp-test-ports

# port_in_use PORT: any TCP socket (listening, connected, TIME-WAIT...)
# on it, or the kernel refuses to bind it (IPv4 and IPv6 wildcards, no
# SO_REUSEADDR: the strictest test).
port_in_use() {
	if command -v ss >/dev/null 2>&1; then
		[ -z "$(ss -Htan "sport = :$1" 2>/dev/null)" ] || return 0
	fi
	command -v python3 >/dev/null 2>&1 || return 1
	! python3 - "$1" <<'EOF' 2>/dev/null
import socket, sys
p = int(sys.argv[1])
a = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
a.bind(("0.0.0.0", p))
if socket.has_ipv6:
    b = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    b.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    b.bind(("::", p))
EOF
}

# release_ports: give up the ports this runner holds.
release_ports() {
	local fd
	for fd in "${port_lock_fds[@]}"; do
		exec {fd}>&-
	done
	port_lock_fds=()
}

# lock_port P: hold P (its lock file) if nobody else does and it is free.
lock_port() {
	local fd
	exec {fd}>>"$port_lock_dir/$1" || return 1
	if flock -n "$fd" && ! port_in_use "$1"; then
		port_lock_fds+=("$fd")
		return 0
	fi
	exec {fd}>&-
	return 1
}

# pick_port [N]: $port and the N - 1 ports after it (default N = 1), all
# free and held until the next pick_port or the runner's exit.
pick_port() {
	local n=${1:-1} lo hi first last p i _

	release_ports
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null ||
		{ lo=32768; hi=60999; }
	if [ "$lo" -gt 12000 ]; then
		first=10000 last=$((lo - n))
	else
		first=$((hi + 1)) last=$((65536 - n))
	fi
	mkdir -p "$port_lock_dir" 2>/dev/null
	chmod 1777 "$port_lock_dir" 2>/dev/null
	for _ in $(seq 200); do
		p=$((first + ((RANDOM << 15) | RANDOM) % (last - first + 1)))
		for ((i = 0; i < n; i++)); do
			lock_port $((p + i)) || break
		done
		if [ "$i" = "$n" ]; then
			port=$p
			return 0
		fi
		release_ports
	done
	echo "no $n free TCP port(s) found in $first-$last" >&2
	return 1
}

# wait_listen PORT [PID [NETNS]]: until something listens on TCP PORT
# (in network namespace NETNS, if given), while process PID (if given)
# lives; 30 s at most, a hang guard.
wait_listen() {
	local _ in=()
	[ -z "${3:-}" ] || in=(ip netns exec "$3")
	for _ in $(seq 300); do
		[ -z "${2:-}" ] || kill -0 "$2" 2>/dev/null || return 1
		[ -n "$("${in[@]}" ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	return 1
}
