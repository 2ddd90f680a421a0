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
GUEST_MONITOR=
GUEST_SILENT=
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
	GUEST_SILENT=$logdir/silent-$variant
	rm -f "$GUEST_SILENT"
	fwd="hostfwd=tcp:127.0.0.1:$b-:5000"
	for i in $(seq "$GUEST_PAIRS"); do
		fwd="$fwd,hostfwd=tcp:127.0.0.1:$((b + i))-:2000$i"
		fwd="$fwd,guestfwd=tcp:10.0.2.100:2000$i-cmd:socat - TCP:127.0.0.1:$((b + 10 + i))"
	done
	# qemu's monitor on a unix socket (connecting takes write permission
	# on it: with the usual umask 022, only its owner): the harness asks it for the guest's registers and sends SysRq keys
	# when the guest stops answering (guest_evidence). A unix socket
	# path has at most 107 octets: a long LOGDIR gets one under /tmp.
	GUEST_MONITOR=$logdir/monitor-$variant.sock
	if [ ${#GUEST_MONITOR} -gt 100 ]; then
		GUEST_MONITOR=$(mktemp -u "${TMPDIR:-/tmp}/wisp-mon.XXXXXX")
	fi
	rm -f "$GUEST_MONITOR"
	# sysrq_always_enabled: Debian's default kernel.sysrq (438) leaves
	# out the dumps (t, w, l); the hung-task detector is set to 10 s
	# once the guest is up (run.sh)
	qemu-system-x86_64 -accel tcg -cpu max -m 1G -smp 1 -nographic -no-reboot \
		-kernel "$GUEST_IMAGE/vmlinuz" -initrd "$GUEST_IMAGE/initrd-$variant.img" \
		-append "console=ttyS0 loglevel=5 panic=1 oops=panic sysrq_always_enabled=1 wisp.variant=$variant wisp.ctl=5000" \
		-netdev "user,id=n0,restrict=on,$fwd" -device virtio-net-pci,netdev=n0 \
		-monitor "unix:$GUEST_MONITOR,server,nowait" -serial "file:$GUEST_SERIAL" -display none \
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
# A script that gets no answer is followed by a probe ("echo up", 15 s);
# when that is not answered either, the guest is silent
# (frozen, run.sh): GUEST_SILENT (a file: gctl runs in subshells too)
# is created and every later gctl of this boot returns 255 at once.
gctl() {
	local t=60 rc
	if [ "$1" = -t ]; then t=$2; shift 2; fi
	[ -n "$GUEST_PID" ] || return 255
	[ -n "$GUEST_SILENT" ] && [ -e "$GUEST_SILENT" ] && return 255
	gctl_once "$t" "$1"
	rc=$?
	if [ $rc = 255 ] && [ -n "$GUEST_SILENT" ] && kill -0 "$GUEST_PID" 2>/dev/null &&
		[ "$(gctl_once 15 'echo up')" != up ]; then
		date -u +%T >"$GUEST_SILENT"
	fi
	return $rc
}

gctl_once() { # SECONDS SCRIPT
	local out rc
	out=$(printf '%s\n__WISP_END__\n' "$2" |
		timeout "$(($1 + 5))" socat -t "$1" -T "$1" - "TCP:127.0.0.1:$GUEST_PORT_BASE" 2>&1)
	rc=$(printf '%s\n' "$out" | sed -n 's/^__WISP_RC=\([0-9]*\)$/\1/p' | tail -1)
	printf '%s\n' "$out" | grep -v '^__WISP_RC='
	[ -n "$rc" ] || return 255
	return "$rc"
}

# guest_silent: a gctl of this boot found the guest silent
guest_silent() {
	[ -n "$GUEST_SILENT" ] && [ -e "$GUEST_SILENT" ]
}

# gmon CMD: one command to qemu's monitor, its answer on stdout (the
# monitor's prompt and echo left out)
gmon() {
	[ -n "$GUEST_MONITOR" ] && [ -S "$GUEST_MONITOR" ] || return 1
	printf '%s\n' "$1" | timeout 10 socat -t 2 - "UNIX-CONNECT:$GUEST_MONITOR" 2>/dev/null |
		tr -d '\r' | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' | grep -av '^(qemu)\|^QEMU .*monitor'
}

# guest_answers: the control port answers (a TCG guest on a loaded host
# may be slow, but not 10 s and then 15 s more slow: gctl's probe)
guest_answers() {
	[ -n "$GUEST_PID" ] && kill -0 "$GUEST_PID" 2>/dev/null || return 1
	[ "$(gctl -t 10 'echo up')" = up ] || ! guest_silent
}

# guest_evidence DIR OFFSET: the guest stopped answering while qemu runs.
# Keeps in DIR what tells a hung kernel from a stopped network or a
# stopped qemu:
#   monitor.txt  qemu's view: run state, the vCPU's registers twice
#                (HLT=1: idle; RIP: where it runs), libslirp's sockets
#                with their queues (info usernet)
#   sysrq.txt    what the guest's console printed after SysRq 9, w, l,
#                t and m sent as key presses (9 first: the dumps print
#                at KERN_INFO, below the guest's loglevel=5). A kernel
#                that prints them still takes interrupts and schedules.
#   serial.txt   the console from octet OFFSET (the case's start) on
#   after-bounce.txt  the guest's dmesg, interrupts and NIC counters,
#                when it answers again after its NIC's link was set off
#                and on (monitor set_link)
# and prints one line saying which: "qemu's monitor silent" (qemu's main
# loop, which also runs its network and the guest's timers, is stuck),
# else the vCPU (idle in HLT or running), "kernel answers SysRq" or
# "kernel silent to SysRq", and whether a link bounce revived it.
guest_evidence() { # DIR OFFSET
	local d=$1 off=$2 s0 s1 k i c cpu
	mkdir -p "$d"
	{
		for c in "info status" "info registers" "info registers" "info usernet"; do
			echo "== $c ($(date -u +%T.%N))"
			gmon "$c"
			sleep 0.5
		done
	} >"$d/monitor.txt" 2>&1
	if ! grep -q "^VM status" "$d/monitor.txt"; then
		tail -c +$((off + 1)) "$GUEST_SERIAL" >"$d/serial.txt" 2>/dev/null
		echo "qemu's monitor silent"
		return
	fi
	case $(grep -o "HLT=[01]" "$d/monitor.txt" | sort -u | tr '\n' ' ') in
	"HLT=1 ") cpu="vCPU idle (HLT)" ;;
	"HLT=0 ") cpu="vCPU running ($(grep -o "RIP=[0-9a-f]*" "$d/monitor.txt" | sort -u | tr '\n' ' ' | sed 's/ $//'))" ;;
	*) cpu="vCPU $(grep -o "HLT=[01]" "$d/monitor.txt" | tr '\n' ' ')" ;;
	esac
	grep -q "^VM status: running" "$d/monitor.txt" ||
		cpu="$(grep -m1 "^VM status" "$d/monitor.txt"), $cpu"
	s0=$(stat -c %s "$GUEST_SERIAL" 2>/dev/null || echo 0)
	for k in 9 w l t m; do
		gmon "sendkey alt-sysrq-$k" >/dev/null
		sleep 1
	done
	# the dumps, until the console has been quiet for 2 s (40 s at most)
	s1=-1
	for i in $(seq 20); do
		c=$(stat -c %s "$GUEST_SERIAL" 2>/dev/null || echo 0)
		[ "$c" = "$s1" ] && break
		s1=$c
		sleep 2
	done
	tail -c +$((s0 + 1)) "$GUEST_SERIAL" >"$d/sysrq.txt" 2>/dev/null
	tail -c +$((off + 1)) "$GUEST_SERIAL" >"$d/serial.txt" 2>/dev/null
	if grep -aq "sysrq: Show Blocked State\|sysrq: Show backtrace\|sysrq: Show State" "$d/sysrq.txt"; then
		cpu="$cpu, kernel answers SysRq"
	else
		cpu="$cpu, kernel silent to SysRq"
	fi
	# the virtio NIC's link off and on again (a config interrupt, and
	# virtio_net's link work): a guest that answers after that had its
	# network stopped, not its kernel; its dmesg is kept then
	gmon "set_link n0 off" >/dev/null
	sleep 1
	gmon "set_link n0 on" >/dev/null
	sleep 3
	if [ "$(gctl_once 10 'echo up')" = up ]; then
		gctl_once 20 'dmesg | tail -400; cat /proc/interrupts; cat /proc/net/dev' >"$d/after-bounce.txt" 2>&1
		echo "$cpu, answers again after a link bounce"
	else
		echo "$cpu, still silent after a link bounce"
	fi
}

guest_alive() {
	[ -n "$GUEST_PID" ] && kill -0 "$GUEST_PID" 2>/dev/null &&
		[ "$(gctl -t 20 'echo up')" = up ]
}

guest_stop() {
	local i
	[ -n "$GUEST_PID" ] || return 0
	if kill -0 "$GUEST_PID" 2>/dev/null; then
		gctl_once 5 'poweroff -f' >/dev/null 2>&1 &
		for i in $(seq 50); do
			kill -0 "$GUEST_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill "$GUEST_PID" 2>/dev/null
	fi
	wait "$GUEST_PID" 2>/dev/null
	GUEST_PID=
	[ -n "$GUEST_MONITOR" ] && rm -f "$GUEST_MONITOR"
	[ -n "$GUEST_SILENT" ] && rm -f "$GUEST_SILENT"
	GUEST_MONITOR= GUEST_SILENT=
}
