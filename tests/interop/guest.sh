# guest.sh: boot and drive the siw guest (sourced by run.sh).
#
#   guest_boot VARIANT LOGDIR   start qemu with initrd-VARIANT.img
#   gctl [-t SECONDS] SCRIPT    run SCRIPT in the guest, print its output,
#                               return its exit status (255: no answer)
#   guest_alive                 qemu still running and answering
#   guest_stop                  power the guest off (kill it if it must)
#
# Ports (all on 127.0.0.1 of the host), from GUEST_PORT_BASE = B:
#   B      -> guest :5000      control server
#   B+1..9 -> guest :20001..9  siw servers (hostfwd)
#   guest 10.0.2.100:20001..9 -> host B+11..19  wisp servers (guestfwd,
#          each connection runs "socat - TCP:127.0.0.1:B+1x")
# (GUEST_PAIRS = 9; run.sh uses pairs 1..8 in turn and keeps 9 for
# "nobody listens")
# With restrict=on the guest reaches nothing but these forwards.

GUEST_IMAGE=${GUEST_IMAGE:-}
GUEST_PID=
GUEST_SERIAL=
GUEST_PORT_BASE=
GUEST_PAIRS=9

# no socket at all on PORT (a listener, a connection, TIME-WAIT)
port_free() { # PORT
	! ss -Htan "sport = :$1" 2>/dev/null | grep -q .
}

# B in 10000..32000, below the kernel's ephemeral range (32768 up by
# default), where outgoing connections of any process take their ports
pick_port_base() {
	local b p ok
	for b in $(shuf -i 100-320 -n 40); do
		b=$((b * 100))
		ok=1
		for p in $b $(seq $((b + 1)) $((b + GUEST_PAIRS))) \
			$(seq $((b + 11)) $((b + 10 + GUEST_PAIRS))); do
			port_free "$p" || { ok=0; break; }
		done
		[ $ok = 1 ] && { echo "$b"; return 0; }
	done
	return 1
}

guest_boot() { # VARIANT LOGDIR
	local variant=$1 logdir=$2 b i fwd
	b=$(pick_port_base) || { echo "no free ports" >&2; return 1; }
	GUEST_PORT_BASE=$b
	GUEST_SERIAL=$logdir/serial-$variant.log
	# keep the log of an earlier boot of this variant (a crash, say), and
	# never read its markers as this boot's
	[ -f "$GUEST_SERIAL" ] && mv -f "$GUEST_SERIAL" "$GUEST_SERIAL.prev"
	fwd="hostfwd=tcp:127.0.0.1:$b-:5000"
	for i in $(seq "$GUEST_PAIRS"); do
		fwd="$fwd,hostfwd=tcp:127.0.0.1:$((b + i))-:2000$i"
		fwd="$fwd,guestfwd=tcp:10.0.2.100:2000$i-cmd:socat - TCP:127.0.0.1:$((b + 10 + i))"
	done
	qemu-system-x86_64 -accel tcg -cpu max -m 1G -smp 1 -nographic -no-reboot \
		-kernel "$GUEST_IMAGE/vmlinuz" -initrd "$GUEST_IMAGE/initrd-$variant.img" \
		-append "console=ttyS0 loglevel=5 panic=1 oops=panic wisp.variant=$variant wisp.ctl=5000" \
		-netdev "user,id=n0,restrict=on,$fwd" -device virtio-net-pci,netdev=n0 \
		-monitor none -serial "file:$GUEST_SERIAL" -display none \
		</dev/null >"$logdir/qemu-$variant.log" 2>&1 &
	GUEST_PID=$!
	for i in $(seq 1200); do
		if ! kill -0 "$GUEST_PID" 2>/dev/null; then
			echo "qemu exited during boot: $(tail -3 "$logdir/qemu-$variant.log")" >&2
			GUEST_PID=
			return 1
		fi
		grep -q "WISP-ERROR" "$GUEST_SERIAL" 2>/dev/null && {
			grep "WISP-ERROR" "$GUEST_SERIAL" >&2
			guest_stop
			return 1
		}
		grep -q "^WISP-CTL" "$GUEST_SERIAL" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "guest did not come up in 120 s" >&2
	guest_stop
	return 1
}

# gctl [-t SECONDS] SCRIPT
gctl() {
	local t=60 out rc
	if [ "$1" = -t ]; then t=$2; shift 2; fi
	[ -n "$GUEST_PID" ] || return 255
	out=$(printf '%s\n__WISP_END__\n' "$1" |
		timeout "$((t + 5))" socat -t "$t" -T "$t" - "TCP:127.0.0.1:$GUEST_PORT_BASE" 2>&1)
	rc=$(printf '%s\n' "$out" | sed -n 's/^__WISP_RC=\([0-9]*\)$/\1/p' | tail -1)
	printf '%s\n' "$out" | grep -v '^__WISP_RC='
	[ -n "$rc" ] || return 255
	return "$rc"
}

guest_alive() {
	[ -n "$GUEST_PID" ] && kill -0 "$GUEST_PID" 2>/dev/null &&
		[ "$(gctl -t 20 'echo up')" = up ]
}

guest_stop() {
	local i
	[ -n "$GUEST_PID" ] || return 0
	if kill -0 "$GUEST_PID" 2>/dev/null; then
		gctl -t 5 'poweroff -f' >/dev/null 2>&1 &
		for i in $(seq 50); do
			kill -0 "$GUEST_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill "$GUEST_PID" 2>/dev/null
	fi
	wait "$GUEST_PID" 2>/dev/null
	GUEST_PID=
}
