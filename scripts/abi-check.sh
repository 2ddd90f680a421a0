#!/usr/bin/env bash
# abi-check.sh -- is <build>/lib/libibverbs.so.1 a drop-in for rdma-core 44's?
#
#   scripts/abi-check.sh <build-dir>
#
# Builds nothing. Checks, printing what each covered:
#   1. every libibverbs symbol@VERSION that Debian's RDMA programs and
#      providers import (verbs-provider/abi-imports.txt, sections A and A2)
#      is exported by wisp's library;
#   2. wisp's exports against every export of Debian's libibverbs.so.1,
#      default (@@) and compat (@) versions alike, and the version nodes
#      with their parents;
#   3. that the dynamic linker resolves every symbol of those programs and
#      providers against wisp's library (ldd -r);
#   4. that Debian's ibv_devices and ibv_devinfo -v, run over wisp, show
#      wisp0, transport iWARP, PORT_ACTIVE and link_layer Ethernet.
# Exits non-zero if an import is missing (1), a program does not link (3)
# or the tools' output is wrong (4). Exports of Debian's library that wisp
# lacks (2) are listed as warnings: only the imports are required.
#
# Installs ibverbs-utils and the other packages abi-imports.txt was made
# from on a fresh Debian machine, as scripts/test.sh does; WISP_SKIP_DEPS=1
# skips that (step 3 then skips the programs that are not installed).
set -uo pipefail
export LC_ALL=C

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-}
if [ -z "$build" ] || [ ! -d "$build" ]; then
	echo "usage: $0 <build-dir>" >&2
	exit 2
fi
build=$(cd "$build" && pwd)
lib=$build/lib/libibverbs.so.1
ref=/usr/lib/x86_64-linux-gnu/libibverbs.so.1
imports=$top/verbs-provider/abi-imports.txt

# the reference library, the tools of step 4, the importers of step 3
packages=(binutils libibverbs1 ibverbs-utils ibverbs-providers perftest
	  rdmacm-utils qperf)

# shellcheck source=apt-ensure.sh
. "$top/scripts/apt-ensure.sh"
install_deps() { apt_ensure "${packages[@]}"; }

failed=0
fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}
log() { printf '\n=== %s\n' "$*"; }

if [ "${WISP_SKIP_DEPS:-0}" != 1 ]; then
	install_deps || exit 1
fi
[ -f "$lib" ] || { echo "FAIL: no $lib (build wisp first)"; exit 1; }
[ -f "$ref" ] || { echo "FAIL: no reference $ref"; exit 1; }
[ -f "$imports" ] || { echo "FAIL: no $imports"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Defined dynamic symbols as "name@VERSION" (compat) / "name@@VERSION"
# (default); objdump prints a compat version in parentheses. The *ABS*
# version-node markers are left out.
exports() {
	objdump -T "$1" | awk '
		/^[0-9a-f]+ / && $0 !~ /\*UND\*/ && $0 !~ /\*ABS\*/ {
			name = $NF; ver = $(NF - 1); at = "@@"
			if (ver ~ /^\(.*\)$/) { ver = substr(ver, 2, length(ver) - 2); at = "@" }
			print name at ver
		}' | sort -u
}
exports "$lib" >"$tmp/wisp"
exports "$ref" >"$tmp/ref"
# either version kind satisfies an import of name@VERSION
sed 's/@@/@/' "$tmp/wisp" | sort -u >"$tmp/wisp.any"

log "1. imports of Debian's programs and providers ($imports)"
# Sections A and A2, libibverbs.so.1 part: lines "sym@VERSION [importers]".
awk '
	/^## / { sect = $2 }
	/^### / { lib = $2 }
	(sect == "A." || sect == "A2.") && lib == "libibverbs.so.1:" &&
	    /^[^ #].*@[A-Za-z0-9_.]+ \[[0-9]+\]$/ { print $1 }
' "$imports" | sort -u >"$tmp/imports"
n_imp=$(wc -l <"$tmp/imports")
comm -23 "$tmp/imports" "$tmp/wisp.any" >"$tmp/imp.missing"
n_miss=$(wc -l <"$tmp/imp.missing")
echo "imported symbol@VERSION: $n_imp, exported by wisp: $((n_imp - n_miss)), missing: $n_miss"
[ "$n_imp" -gt 0 ] || fail "no imports parsed from $imports"
while read -r s; do fail "import $s not exported"; done <"$tmp/imp.missing"

log "2. exports against Debian's $(readlink -f "$ref")"
comm -23 "$tmp/ref" "$tmp/wisp" >"$tmp/ref.missing"
comm -13 "$tmp/ref" "$tmp/wisp" >"$tmp/wisp.extra"
echo "Debian exports: $(wc -l <"$tmp/ref") ($(grep -c '@@' "$tmp/ref") default," \
	"$(grep -vc '@@' "$tmp/ref") compat); wisp exports: $(wc -l <"$tmp/wisp")" \
	"($(grep -c '@@' "$tmp/wisp") default, $(grep -vc '@@' "$tmp/wisp") compat)"
echo "Debian's exported by wisp with the same version: $(($(wc -l <"$tmp/ref") - $(wc -l <"$tmp/ref.missing"))), missing: $(wc -l <"$tmp/ref.missing")"
while read -r s; do echo "WARNING: Debian exports $s, wisp does not"; done <"$tmp/ref.missing"
echo "wisp's own exports:"
sed 's/^/  /' "$tmp/wisp.extra"
grep -v '@@WISP_PRIVATE_1$' "$tmp/wisp.extra" |
	while read -r s; do echo "WARNING: $s is not in Debian's library"; done

# Version definitions with their parents, "NODE <- PARENT".
verdefs() {
	objdump -p "$1" | awk '
		/^Version definitions:/ { d = 1; next }
		/^Version References:/ { d = 0 }
		d && /^[0-9]+ / { if (node != "") print node; node = $4; if ($2 == "0x01") node = "" ; next }
		d && /^\t/ { node = node " <- " $1 }
		END { if (node != "") print node }' | sort
}
verdefs "$ref" >"$tmp/ref.vd"
verdefs "$lib" >"$tmp/wisp.vd"
echo "version nodes: Debian $(wc -l <"$tmp/ref.vd"), wisp $(wc -l <"$tmp/wisp.vd")"
comm -23 "$tmp/ref.vd" "$tmp/wisp.vd" | while read -r v; do
	fail "version node $v missing or with another parent"
done >"$tmp/vd.fail"
cat "$tmp/vd.fail"
failed=$((failed + $(grep -c '^FAIL' "$tmp/vd.fail")))

log "3. Debian's programs and providers resolve against wisp (ldd -r)"
# The objects abi-imports.sh examined: "exe <pkg> <path>", "lib <pkg> <path>".
n_obj=0
n_ok=0
n_skip=0
while read -r _kind _pkg path; do
	if [ ! -f "$path" ]; then
		n_skip=$((n_skip + 1))
		continue
	fi
	n_obj=$((n_obj + 1))
	out=$(LD_LIBRARY_PATH=$build/lib ldd -r "$path" 2>&1)
	# Only what concerns libibverbs: librdmacm is another check's.
	bad=$(grep -E "undefined symbol|not defined in file|not found" <<<"$out" |
		grep -E "libibverbs|IBVERBS_|WISP_PRIVATE")
	used=$(awk '/libibverbs\.so\.1 =>/ { print $3 }' <<<"$out")
	if [ -n "$bad" ]; then
		fail "$path:"
		head -10 <<<"$bad" | sed 's/^/    /'
	elif [ -n "$used" ] && [ "$used" != "$build/lib/libibverbs.so.1" ]; then
		fail "$path loads $used, not wisp's"
	else
		n_ok=$((n_ok + 1))
	fi
done < <(grep -E '^(exe|lib) [^ ]+ /' "$imports")
echo "objects: $n_obj, resolving every symbol: $n_ok, not installed: $n_skip"

log "4. ibv_devices and ibv_devinfo -v over wisp"
run_env=(env LD_LIBRARY_PATH="$build/lib")
# A sanitizer build needs its runtime first in the (uninstrumented) tool.
if readelf -d "$lib" | grep -q 'NEEDED.*libasan'; then
	run_env+=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)"
		  ASAN_OPTIONS=detect_leaks=0)
fi

check_out() { # check_out <tool> <file> <extended regex> <what>
	if grep -Eq "$3" "$2"; then
		echo "ok: $1 shows $4"
	else
		fail "$1 does not show $4 (/$3/)"
	fi
}

for tool in ibv_devices ibv_devinfo; do
	command -v "$tool" >/dev/null || fail "$tool not installed"
done
if command -v ibv_devices >/dev/null; then
	"${run_env[@]}" ibv_devices >"$tmp/devices" 2>&1 || fail "ibv_devices exited $?"
	echo "--- ibv_devices"
	cat "$tmp/devices"
	check_out ibv_devices "$tmp/devices" '^[[:space:]]+wisp0[[:space:]]+[0-9a-f]{16}$' "wisp0 and its GUID"
	[ "$(grep -Ec '[[:space:]][0-9a-f]{16}$' "$tmp/devices")" -eq 1 ] ||
		fail "ibv_devices lists other devices than wisp0"
fi
if command -v ibv_devinfo >/dev/null; then
	"${run_env[@]}" ibv_devinfo -v >"$tmp/devinfo" 2>&1 || fail "ibv_devinfo -v exited $?"
	echo "--- ibv_devinfo -v"
	cat "$tmp/devinfo"
	check_out ibv_devinfo "$tmp/devinfo" $'^hca_id:\twisp0$' "hca_id wisp0"
	check_out ibv_devinfo "$tmp/devinfo" '^[[:space:]]+transport:[[:space:]]+iWARP \(1\)$' "transport iWARP"
	check_out ibv_devinfo "$tmp/devinfo" '^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$' "PORT_ACTIVE"
	check_out ibv_devinfo "$tmp/devinfo" '^[[:space:]]+link_layer:[[:space:]]+Ethernet$' "link_layer Ethernet"
	check_out ibv_devinfo "$tmp/devinfo" '^[[:space:]]+phys_port_cnt:[[:space:]]+1$' "one port"
	check_out ibv_devinfo "$tmp/devinfo" '^[[:space:]]+gid_tbl_len:[[:space:]]+[1-9][0-9]*$' "a GID table"
	# Like siw's, wisp0's GIDs are MACs padded with zeros, and ibv_devinfo
	# skips a GID whose interface ID (octets 8..15) is zero: it prints none.
fi

echo
if [ "$failed" -ne 0 ]; then
	echo "abi-check: $failed failure(s)"
	exit 1
fi
echo "abi-check: ok ($n_imp imports, $n_obj objects, tools' output as expected)"
