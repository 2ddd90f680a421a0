#!/usr/bin/env bash
# Debian's unmodified rdma_cm programs (rdmacm-utils) over wisp, through
# scripts/wisp-run, on 127.0.0.1 and ::1. Every process runs under
# timeout(1): a hang is a failure, never a stuck test run.
#
#   tests/rdmacm/run-programs.sh             all cases
#   tests/rdmacm/run-programs.sh CASE...     some cases
#   tests/rdmacm/run-programs.sh --list      the case names
#
# Environment: WISP_LIB_DIR (the folder with wisp's libibverbs.so.1 and
# librdmacm.so.1; default build/release/lib), WISP_TEST_LOGS (where the
# programs' output goes; default a temporary folder, kept on failure).
# Exit status: 0 all passed, 1 some failed, 77 rdmacm-utils not installed.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run="$top/scripts/wisp-run"
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-rdmacm.XXXXXX)}
mkdir -p "$logs"
# shellcheck source=runner.sh
. "$top/tests/rdmacm/runner.sh"

cases=(
	rping_ipv4 rping_ipv6 rping_sizes rping_mpa_rev1 rping_crc
	rping_rtr_write rping_no_p2p rping_self_qp
	rdma_server_client_ipv4 rdma_server_client_ipv6
	ucmatose_ipv4 ucmatose_ipv6_migrate
	refused_rping_ipv4 refused_rping_ipv6 refused_rdma_client
	rejected_ucmatose mpa_timeout_rping bad_config
	tls_rping_psk_sizes tls_rping_x509_ipv6 tls_rdma_server_client
	tls_rping_epoll tls_capture
)

# A fresh port for each server (ports.sh): never one that another
# program, or a runner of another build, uses.
next_port() {
	pick_port
}

# server_client NAME SERVER_CMD... -- CLIENT_CMD...: pair (runner.sh)
# with 60 s for each side.
server_client() {
	local name=$1
	shift
	pair "$name" 60 "$@"
}

# rping with data verification: COUNT pings of SIZE must arrive both ways.
rping_pair() {
	local name=$1 addr=$2 size=$3 count=10 n
	shift 3
	next_port || return 1
	env "$@" true || return 1
	server_client "$name" env "$@" rping -s -a "$addr" -p "$port" -C $count \
		-v -V -S "$size" -- \
		env "$@" rping -c -a "$addr" -p "$port" -C $count -v -V -S "$size" ||
		return 1
	n=$(grep -c "^ping data" "$logs/$name.client")
	[ "$n" -eq $count ] || { echo "client printed $n pings, not $count" >&2; return 1; }
	n=$(grep -c "^server ping data" "$logs/$name.server")
	[ "$n" -eq $count ] || { echo "server printed $n pings, not $count" >&2; return 1; }
}

rping_ipv4() { rping_pair rping_ipv4 127.0.0.1 100; }
rping_ipv6() { rping_pair rping_ipv6 ::1 100; }
rping_sizes() {
	local s
	for s in 64 1000 4096 65000; do
		rping_pair "rping_size_$s" 127.0.0.1 "$s" || return 1
	done
}
rping_mpa_rev1() { rping_pair rping_mpa_rev1 127.0.0.1 1000 WISP_MPA_REV=1; }
rping_crc() { rping_pair rping_crc ::1 1000 WISP_CRC=1; }
rping_rtr_write() { rping_pair rping_rtr_write 127.0.0.1 1000 WISP_RTR=write; }
rping_no_p2p() { rping_pair rping_no_p2p 127.0.0.1 1000 WISP_P2P=0; }

# rping -q: QPs made with ibv_create_qp, named to rdma_accept/rdma_connect
# by number, walked through INIT/RTR/RTS by rping, then rdma_establish.
rping_self_qp() {
	local n
	next_port || return 1
	server_client rping_self_qp rping -s -q -a 127.0.0.1 -p "$port" -C 10 \
		-v -V -S 500 -- \
		rping -c -q -a 127.0.0.1 -p "$port" -C 10 -v -V -S 500 || return 1
	# rping's stdout and stderr interleave (the DISCONNECT line may cut a
	# ping line in two): take that line out, then count the pings' ids.
	n=$(sed -z 's/client DISCONNECT EVENT\.\.\.\n//g' \
		"$logs/rping_self_qp.client" |
		grep -o "ping data: rdma-ping-[0-9]*" | sort -u | wc -l)
	[ "$n" -eq 10 ] || { echo "client printed $n pings, not 10" >&2; return 1; }
}

rdma_pair() {
	next_port || return 1
	server_client "$1" rdma_server -s "$2" -p "$port" -- \
		rdma_client -s "$2" -p "$port" || return 1
	grep -q "rdma_client: end 0" "$logs/$1.client"
}
rdma_server_client_ipv4() { rdma_pair rdma_server_client_ipv4 127.0.0.1; }
rdma_server_client_ipv6() { rdma_pair rdma_server_client_ipv6 ::1; }

ucmatose_ipv4() {
	next_port || return 1
	server_client ucmatose_ipv4 ucmatose -p "$port" -c 2 -C 20 -- \
		ucmatose -s 127.0.0.1 -p "$port" -c 2 -C 20
}
ucmatose_ipv6_migrate() {
	next_port || return 1
	server_client ucmatose_ipv6_migrate ucmatose -b ::1 -p "$port" -m \
		-c 2 -C 20 -- ucmatose -s ::1 -p "$port" -m -c 2 -C 20 || return 1
	grep -q "migrating to new event channel" "$logs/ucmatose_ipv6_migrate.server"
}

# A port nobody listens on: UNREACHABLE with -111 (connection refused),
# not -110 (a timeout), so the refusal was taken as it came. (No bound on
# the time it took: a loaded machine decides that, not wisp.)
refused_rping() {
	local name=$1 addr=$2 rc
	next_port || return 1
	timeout 10 "$run" rping -c -a "$addr" -p "$port" -C 1 >"$logs/$name" 2>&1
	rc=$?
	[ "$rc" -ne 124 ] || { echo "rping hung" >&2; return 1; }
	grep -q "RDMA_CM_EVENT_UNREACHABLE, error -111" "$logs/$name" ||
		{ cat "$logs/$name" >&2; return 1; }
}
refused_rping_ipv4() { refused_rping refused_rping_ipv4 127.0.0.1; }
refused_rping_ipv6() { refused_rping refused_rping_ipv6 ::1; }
refused_rdma_client() {
	local rc
	next_port || return 1
	timeout 10 "$run" rdma_client -s 127.0.0.1 -p "$port" \
		>"$logs/refused_rdma_client" 2>&1
	rc=$?
	[ "$rc" -ne 124 ] && [ "$rc" -ne 0 ] &&
		grep -q "rdma_connect: Connection refused" "$logs/refused_rdma_client" ||
		{ cat "$logs/refused_rdma_client" >&2; return 1; }
}

# cmatose's connect_handler rejects a request it cannot serve: asked for
# 40000 messages, the server cannot make a QP that deep (wisp0 allows
# 32768 WRs) and calls rdma_reject. The client must see REJECTED (the
# MPA Reply with R set) at once, and nobody may hang.
rejected_ucmatose() {
	local spid rc
	next_port || return 1
	timeout 20 "$run" ucmatose -p "$port" -c 1 -C 40000 \
		>"$logs/rejected_ucmatose.server" 2>&1 &
	spid=$!
	wait_listen "$port" "$spid" || { kill "$spid"; return 1; }
	timeout 20 "$run" ucmatose -s 127.0.0.1 -p "$port" -c 1 -C 10 \
		>"$logs/rejected_ucmatose.client" 2>&1
	rc=$?
	wait "$spid"
	[ "$rc" -ne 124 ] || { echo "client hung" >&2; return 1; }
	grep -q "RDMA_CM_EVENT_REJECTED, error: -111" "$logs/rejected_ucmatose.client" &&
		grep -q "failing connection request" "$logs/rejected_ucmatose.server" ||
		{ cat "$logs"/rejected_ucmatose.* >&2; return 1; }
}

# A TCP listener that never answers the MPA Request: UNREACHABLE
# (timed out) after WISP_MPA_TIMEOUT_MS, not a hang.
mpa_timeout_rping() {
	local lpid rc
	need python3 || { echo "(python3 missing: skipped)"; return 0; }
	next_port || return 1
	python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4); time.sleep(20)' "$port" &
	lpid=$!
	wait_listen "$port" "$lpid" || { kill "$lpid"; return 1; }
	WISP_MPA_TIMEOUT_MS=500 timeout 10 "$run" rping -c -a 127.0.0.1 \
		-p "$port" -C 1 >"$logs/mpa_timeout_rping" 2>&1
	rc=$?
	kill "$lpid" 2>/dev/null
	wait "$lpid" 2>/dev/null
	[ "$rc" -ne 124 ] &&
		grep -q "RDMA_CM_EVENT_UNREACHABLE, error -110" "$logs/mpa_timeout_rping" ||
		{ cat "$logs/mpa_timeout_rping" >&2; return 1; }
}

# A bad WISP_* value names the variable and fails the program cleanly.
bad_config() {
	WISP_CRC=yes timeout 10 "$run" rping -c -a 127.0.0.1 -p 1 \
		>"$logs/bad_config" 2>&1
	grep -q 'WISP_CRC="yes" is not valid; accepted values: 0, 1' \
		"$logs/bad_config" || { cat "$logs/bad_config" >&2; return 1; }
}

case "${1:-}" in
--list)
	printf '%s\n' "${cases[@]}"
	exit 0
	;;
-h|--help)
	sed -n '2,15p' "$0"
	exit 0
	;;
esac

for p in rping rdma_server rdma_client ucmatose; do
	if ! need "$p"; then
		echo "rdmacm programs: $p not installed (apt-get install rdmacm-utils): skipped"
		exit 77
	fi
done

libdir=${WISP_LIB_DIR:-$top/build/release/lib}
asan_preload "$libdir"

selected=("$@")
[ ${#selected[@]} -gt 0 ] || selected=("${cases[@]}")
passed=0
failed=0

# ---- TLS 1.3 under MPA (docs/tls.md) -----------------------------------
# Keys and certificates made at test time (tests/tls/make-certs.sh).
tls_dir=
tls_files() {
	[ -n "$tls_dir" ] && return 0
	tls_dir=$logs/tls-certs
	"$top/tests/tls/make-certs.sh" "$tls_dir" >/dev/null 2>&1 ||
		{ echo "make-certs.sh failed" >&2; return 1; }
}
tls_psk_env() {
	echo WISP_TLS=required WISP_TLS_PSK_FILE="$tls_dir/psk" \
		WISP_TLS_PSK_IDENTITY=wisp-programs
}
tls_rping_psk_sizes() {
	local s
	tls_files || return 1
	for s in 64 4096 65000; do
		# shellcheck disable=SC2046
		rping_pair "tls_rping_psk_$s" 127.0.0.1 "$s" $(tls_psk_env) ||
			return 1
	done
}
# The client verifies the listener's certificate against ::1 (an IP SAN);
# the listener asks for the client's (mutual).
tls_rping_x509_ipv6() {
	local name=tls_rping_x509_ipv6 n
	tls_files || return 1
	next_port
	server_client "$name" env WISP_TLS=required \
		WISP_TLS_CERT="$tls_dir/server.pem" WISP_TLS_KEY="$tls_dir/server.key" \
		WISP_TLS_CA="$tls_dir/ca.pem" WISP_TLS_MUTUAL=1 \
		rping -s -a ::1 -p "$port" -C 10 -v -V -S 1000 -- \
		env WISP_TLS=required WISP_TLS_CA="$tls_dir/ca.pem" \
		WISP_TLS_CERT="$tls_dir/client.pem" WISP_TLS_KEY="$tls_dir/client.key" \
		rping -c -a ::1 -p "$port" -C 10 -v -V -S 1000 || return 1
	n=$(grep -c "^ping data" "$logs/$name.client")
	[ "$n" -eq 10 ] || { echo "client printed $n pings, not 10" >&2; return 1; }
}
tls_rdma_server_client() {
	tls_files || return 1
	next_port
	# shellcheck disable=SC2046
	server_client tls_rdma_server_client env $(tls_psk_env) \
		rdma_server -s 127.0.0.1 -p "$port" -- \
		env $(tls_psk_env) rdma_client -s 127.0.0.1 -p "$port" || return 1
	grep -q "rdma_client: end 0" "$logs/tls_rdma_server_client.client"
}
tls_rping_epoll() {
	tls_files || return 1
	# shellcheck disable=SC2046
	rping_pair tls_rping_epoll ::1 4096 $(tls_psk_env) WISP_ENGINE=epoll
}

# A capture of a TLS rping on lo (capture filter: the test's port): the
# client's stream opens with a TLS handshake record offering ALPN
# "iwarp"; neither direction holds the MPA key ("MPA ID Req Frame",
# "MPA ID Rep Frame": the Request with its private data is inside TLS)
# or rping's payload pattern in clear.
tls_capture() {
	local name=tls_capture cap tpid
	need tcpdump && need python3 ||
		{ echo "(tcpdump or python3 missing: skipped)"; return 0; }
	tls_files || return 1
	next_port
	cap=$logs/$name.pcap
	timeout 60 tcpdump -i lo --immediate-mode -U -s 0 -w "$cap" "tcp port $port" \
		>"$logs/$name.tcpdump" 2>&1 &
	tpid=$!
	for _ in $(seq 50); do
		grep -q "listening on" "$logs/$name.tcpdump" && break
		sleep 0.1
	done
	if ! grep -q "listening on" "$logs/$name.tcpdump"; then
		kill "$tpid" 2>/dev/null
		wait "$tpid" 2>/dev/null
		echo "(tcpdump cannot capture here: skipped)"
		cat "$logs/$name.tcpdump"
		return 0
	fi
	# The pair runs on the port the capture filters (not rping_pair,
	# which would pick another one).
	# shellcheck disable=SC2046
	server_client "$name" env $(tls_psk_env) rping -s -a 127.0.0.1 \
		-p "$port" -C 10 -v -V -S 4096 -- \
		env $(tls_psk_env) rping -c -a 127.0.0.1 -p "$port" -C 10 -v -V \
		-S 4096
	local rc=$?
	sleep 1
	kill -INT "$tpid" 2>/dev/null
	wait "$tpid" 2>/dev/null
	[ "$rc" -eq 0 ] || return 1
	python3 - "$cap" "$port" <<'PY'
import struct, sys
cap, port = sys.argv[1], int(sys.argv[2])
data = open(cap, "rb").read()
magic = struct.unpack("<I", data[:4])[0]
end = "<" if magic in (0xa1b2c3d4, 0xa1b23c4d) else ">"
link = struct.unpack(end + "I", data[20:24])[0]
off, flows = 24, {}
while off + 16 <= len(data):
    _, _, incl, _ = struct.unpack(end + "IIII", data[off:off + 16])
    pkt = data[off + 16:off + 16 + incl]
    off += 16 + incl
    if link == 1:
        et, pkt = struct.unpack(">H", pkt[12:14])[0], pkt[14:]
    elif link == 113:
        et, pkt = struct.unpack(">H", pkt[14:16])[0], pkt[16:]
    else:
        sys.exit("link type %d not handled" % link)
    if et == 0x0800:
        ihl, proto, pkt = (pkt[0] & 15) * 4, pkt[9], pkt
        tcp = pkt[ihl:]
    elif et == 0x86dd:
        proto, tcp = pkt[6], pkt[40:]
    else:
        continue
    if proto != 6:
        continue
    sp, dp, seq = struct.unpack(">HHI", tcp[:8])
    payload = tcp[(tcp[12] >> 4) * 4:]
    if payload:
        flows.setdefault((sp, dp), {})[seq] = payload
def stream(k):
    segs = flows.get(k, {})
    return b"".join(segs[s] for s in sorted(segs))
keys = list(flows)
cli = [k for k in keys if k[1] == port]
srv = [k for k in keys if k[0] == port]
if not cli or not srv:
    sys.exit("no traffic captured on port %d" % port)
c, s = stream(cli[0]), stream(srv[0])
problems = []
if not c.startswith(b"\x16\x03"):
    problems.append("client stream does not open with a TLS handshake record")
if b"\x05iwarp" not in c[:2048]:
    problems.append("no ALPN iwarp in the ClientHello")
if not s.startswith(b"\x16\x03"):
    problems.append("server stream does not open with a TLS handshake record")
for name, buf in (("client", c), ("server", s)):
    for needle in (b"MPA ID Req Frame", b"MPA ID Rep Frame", b"MPA ID",
                   b"rdma-ping-", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
        if needle in buf:
            problems.append("%s stream holds %r in clear" % (name, needle))
print("captured %d + %d octets; TLS handshake with ALPN iwarp; nothing in clear"
      % (len(c), len(s)) if not problems else "\n".join(problems))
sys.exit(1 if problems else 0)
PY
}

run_cases rdmacm_programs "" "${selected[@]}"
if [ "$failed" -eq 0 ]; then
	echo "rdmacm programs: $passed passed, 0 failed"
	[ -n "${WISP_TEST_LOGS:-}" ] || rm -rf "$logs"
	exit 0
fi
echo "rdmacm programs: $passed passed, $failed failed (logs in $logs)"
exit 1
