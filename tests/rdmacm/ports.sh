# shellcheck shell=bash
# ports.sh: TCP ports for the program runners, and waiting for a server
# to listen on one (sourced by the runners in tests/rdmacm and by
# demos/replicate/run-tests.sh).
#
# pick_port sets $port to a port that, at that moment, no socket of this
# machine uses and the kernel lets us bind, and that no other runner of
# this tree (another build, another checkout, another user of the machine)
# holds: each runner takes an flock on a file named after the port for as
# long as it uses it (until its next pick_port, or its exit). Ports are
# drawn at random below the kernel's ephemeral range, so outgoing
# connections (which take ephemeral ports) never land on them meanwhile.

port=
port_lock_fd=
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

pick_port() {
	local lo hi first last p _

	if [ -n "$port_lock_fd" ]; then
		exec {port_lock_fd}>&-
		port_lock_fd=
	fi
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null ||
		{ lo=32768; hi=60999; }
	if [ "$lo" -gt 12000 ]; then
		first=10000 last=$((lo - 1))
	else
		first=$((hi + 1)) last=65535
	fi
	mkdir -p "$port_lock_dir" 2>/dev/null
	chmod 1777 "$port_lock_dir" 2>/dev/null
	for _ in $(seq 200); do
		p=$((first + ((RANDOM << 15) | RANDOM) % (last - first + 1)))
		exec {port_lock_fd}>>"$port_lock_dir/$p" || { port_lock_fd=; continue; }
		if flock -n "$port_lock_fd" && ! port_in_use "$p"; then
			port=$p
			return 0
		fi
		exec {port_lock_fd}>&-
		port_lock_fd=
	done
	echo "no free TCP port found in $first-$last" >&2
	return 1
}

# wait_listen PORT [PID]: until something listens on TCP PORT, while
# process PID (if given) lives; 30 s at most, a hang guard.
wait_listen() {
	local _
	for _ in $(seq 300); do
		[ -z "${2:-}" ] || kill -0 "$2" 2>/dev/null || return 1
		[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	return 1
}
