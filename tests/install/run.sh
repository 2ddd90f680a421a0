#!/usr/bin/env bash
# wisp installed: into a scratch prefix with cmake --install, and as the
# Debian package built with CPack (docs/install.md). Every process runs
# under timeout(1).
#
#   tests/install/run.sh [BUILD_DIR]       (default build/release)
#
# Cases (each prints [PASS], [FAIL] or [SKIP] and its name):
#   prefix_files    cmake --install --prefix: the files expected, and no
#                   library outside <libdir>/wisp
#   wisp_run_prefix the installed wisp-run: --help, its errors, a link to it
#   rping_prefix    Debian's rping over the installed copy, run from /
#                   through the installed wisp-run; the server's
#                   /proc/PID/maps shows both libraries from the prefix
#   pkgconfig       wisp.pc: version, cflags, wisplibdir; a program built
#                   with them and an rpath runs over wisp's librdmacm
#   man_pages       man -l, lexgrog, groff -man -ww -z without a warning;
#                   every WISP_* name of docs/configuration.md in wisp(7)
#   deb_build       cpack in a build configured for /usr (WISP_DEB_BUILD_DIR,
#                   default BUILD_DIR/../deb): dpkg-deb -c, no file in
#                   common with Debian's rdma-core packages, dependencies,
#                   no maintainer scripts
#   deb_apt         as root only, and only when no wisp package is
#                   installed: apt-get install ./wisp_*.deb, rping over
#                   /usr/bin/wisp-run, apt-get remove, nothing left
#
# Exit status: 0 when nothing failed, 1 otherwise. Output of failed cases
# stays in WISP_TEST_LOGS (default a temporary folder).
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$top/build/release}" && pwd) || exit 1
debbuild=${WISP_DEB_BUILD_DIR:-$(dirname "$build")/deb}
logs=${WISP_TEST_LOGS:-$(mktemp -d /tmp/wisp-install.XXXXXX)}
mkdir -p "$logs"
scratch=$(mktemp -d /tmp/wisp-prefix.XXXXXX)
prefix=$scratch/prefix
# shellcheck source=../rdmacm/ports.sh
. "$top/tests/rdmacm/ports.sh"
version=$(sed -nE 's/^project\(wisp VERSION ([0-9.]+).*/\1/p' "$top/CMakeLists.txt")
npass=0
nfail=0
nskip=0

# The drop-in libraries must come from the installation, never from the
# caller's settings or the build tree.
unset WISP_LIB_DIR LD_LIBRARY_PATH LD_PRELOAD

pass() { echo "[PASS] install::$1"; npass=$((npass + 1)); }
fail() { echo "[FAIL] install::$1"; echo "  $2"; nfail=$((nfail + 1)); }
skip() { echo "[SKIP] install::$1: $2"; nskip=$((nskip + 1)); }

need() { command -v "$1" >/dev/null 2>&1; }

# listener_pid PORT STARTER: the process listening on 127.0.0.1:PORT,
# while STARTER (the pid that starts it) lives; 30 s at most.
listener_pid() {
	local pid
	for _ in $(seq 300); do
		kill -0 "$2" 2>/dev/null || return 1
		pid=$(ss -Hltnp "sport = :$1" 2>/dev/null |
			grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
		[ -n "$pid" ] && { echo "$pid"; return 0; }
		sleep 0.1
	done
	return 1
}

# rping_over NAME WISP_RUN LIBDIR: an rping server and client through
# WISP_RUN, started from / so that nothing is found relative to the
# source tree; 10 pings of 100 octets, verified. The server's maps must
# show libibverbs.so.1 and librdmacm.so.1 from LIBDIR and from nowhere
# else.
rping_over() {
	local name=$1 run=$2 libdir srv cli spid pid src crc pings maps lib
	libdir=$(readlink -f "$3")
	srv=$logs/$name.server
	cli=$logs/$name.client
	pick_port || return 1
	(cd / && exec timeout 30 "$run" rping -s -a 127.0.0.1 -p "$port" \
		-C 10 -S 100 -V) >"$srv" 2>&1 &
	spid=$!
	if ! pid=$(listener_pid "$port" "$spid"); then
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		echo "the rping server did not listen on $port: $(tail -3 "$srv")"
		return 1
	fi
	maps=$(awk '$6 ~ /lib(ibverbs|rdmacm)\.so/ {print $6}' "/proc/$pid/maps" | sort -u)
	(cd / && exec timeout 30 "$run" rping -c -a 127.0.0.1 -p "$port" \
		-C 10 -S 100 -v -V) >"$cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	pings=$(grep -c '^ping data: rdma-ping-' "$cli")
	if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ] || [ "$pings" -ne 10 ]; then
		echo "client exit $crc, server exit $src, $pings of 10 pings"
		return 1
	fi
	for lib in libibverbs.so.1 librdmacm.so.1; do
		if ! grep -qx "$libdir/${lib}[.0-9]*" <<<"$maps"; then
			echo "$lib not mapped from $libdir; maps: ${maps//$'\n'/ }"
			return 1
		fi
	done
	if grep -vq "^$libdir/" <<<"$maps"; then
		echo "a library mapped from outside $libdir: ${maps//$'\n'/ }"
		return 1
	fi
	echo "rping over $run: 10 pings verified; server mapped ${maps//$'\n'/ }"
}

# --- prefix_files -------------------------------------------------------
case_prefix_files() {
	local out=$logs/prefix_files files stray
	if ! cmake --install "$build" --prefix "$prefix" >"$out" 2>&1; then
		fail prefix_files "cmake --install failed: $(tail -3 "$out")"
		return
	fi
	pc=$(find "$prefix" -name wisp.pc -path '*/pkgconfig/*' | head -1)
	wisplibdir=$(dirname "$(find "$prefix" -name libibverbs.so.1 | head -1)")
	files=$(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort)
	for f in bin/wisp-run bin/wisp-stat include/wisp/wisp_rdmacm.h \
		 share/man/man7/wisp.7.gz share/man/man1/wisp-run.1.gz \
		 share/man/man1/wisp-stat.1.gz \
		 share/doc/wisp/install.md share/doc/wisp/copyright; do
		grep -qx "$f" <<<"$files" || { fail prefix_files "$f not installed"; return; }
	done
	if [ -z "$pc" ] || [ "$(basename "$wisplibdir")" != wisp ]; then
		fail prefix_files "no wisp.pc, or libibverbs.so.1 outside a wisp folder ($wisplibdir)"
		return
	fi
	for f in libibverbs.so.1 librdmacm.so.1 libibverbs.so librdmacm.so; do
		[ -e "$wisplibdir/$f" ] || { fail prefix_files "$wisplibdir/$f missing"; return; }
	done
	# What would shadow rdma-core: a shared object outside lib*/wisp.
	stray=$(grep -E '\.so(\.|$)' <<<"$files" | grep -vE '^lib[^/]*(/[^/]+)?/wisp/' || true)
	if [ -n "$stray" ]; then
		fail prefix_files "libraries outside the private folder: $stray"
		return
	fi
	# The installed wisp-run is the source's but for the library folder.
	if ! diff <(grep -v '^wisp_installed_libdir=' "$top/scripts/wisp-run") \
		  <(grep -v '^wisp_installed_libdir=' "$prefix/bin/wisp-run") >/dev/null ||
	   ! grep -q '^wisp_installed_libdir="..*"$' "$prefix/bin/wisp-run"; then
		fail prefix_files "the installed wisp-run differs from scripts/wisp-run"
		return
	fi
	if readelf -d "$wisplibdir/librdmacm.so.1" | grep -q "$build"; then
		fail prefix_files "installed librdmacm.so.1 still points into the build tree"
		return
	fi
	pass prefix_files
	echo "  $(wc -l <<<"$files") files in $prefix, libraries in ${wisplibdir#"$prefix"/}"
}

# --- wisp_run_prefix ----------------------------------------------------
case_wisp_run_prefix() {
	local run=$prefix/bin/wisp-run rc out
	"$run" --help >/dev/null || { fail wisp_run_prefix "--help exits $?"; return; }
	"$run" >/dev/null 2>&1
	rc=$?
	[ $rc -eq 2 ] || { fail wisp_run_prefix "no program: exit $rc, not 2"; return; }
	"$run" wisp-no-such-program >/dev/null 2>&1
	rc=$?
	[ $rc -eq 127 ] || { fail wisp_run_prefix "unknown program: exit $rc, not 127"; return; }
	# Through a symbolic link from elsewhere, it still finds its libraries.
	mkdir -p "$scratch/elsewhere"
	ln -s "$run" "$scratch/elsewhere/wisp-run"
	# shellcheck disable=SC2016 # the inner shell expands it
	out=$(cd / && "$scratch/elsewhere/wisp-run" sh -c 'echo "$LD_LIBRARY_PATH"')
	if [ "$out" != "$(readlink -f "$wisplibdir")" ]; then
		fail wisp_run_prefix "through a link LD_LIBRARY_PATH is '$out', not $wisplibdir"
		return
	fi
	out=$(WISP_LIB_DIR=/nonexistent "$run" true 2>&1)
	rc=$?
	if [ $rc -ne 127 ] || ! grep -q WISP_LIB_DIR <<<"$out"; then
		fail wisp_run_prefix "a bad WISP_LIB_DIR: exit $rc, '$out'"
		return
	fi
	pass wisp_run_prefix
}

# --- rping_prefix -------------------------------------------------------
case_rping_prefix() {
	local out
	if ! need rping; then
		skip rping_prefix "rping not installed (Debian package rdmacm-utils)"
		return
	fi
	if out=$(rping_over rping_prefix "$prefix/bin/wisp-run" "$wisplibdir"); then
		pass rping_prefix
		echo "  $out"
	else
		fail rping_prefix "$out (logs: $logs/rping_prefix.*)"
	fi
}

# --- pkgconfig ----------------------------------------------------------
case_pkgconfig() {
	local pcdir cflags v libdir src=$scratch/probe.c bin=$scratch/probe out
	pcdir=$(dirname "$pc")
	v=$(PKG_CONFIG_PATH=$pcdir pkg-config --modversion wisp 2>&1)
	[ "$v" = "$version" ] || { fail pkgconfig "--modversion gives '$v', not $version"; return; }
	cflags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags wisp | sed 's/ *$//')
	[ "$cflags" = "-I$prefix/include/wisp" ] ||
		{ fail pkgconfig "--cflags gives '$cflags'"; return; }
	libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=wisplibdir wisp)
	[ "$libdir" = "$wisplibdir" ] ||
		{ fail pkgconfig "wisplibdir is '$libdir', not $wisplibdir"; return; }
	v=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=wisp_run wisp)
	[ -x "$v" ] || { fail pkgconfig "wisp_run '$v' is not a program"; return; }
	# A program that knows wisp, linked against the installed librdmacm
	# with an rpath: wisp's option level must be accepted, which
	# rdma-core's librdmacm refuses with ENOSYS.
	cat >"$src" <<'EOF'
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <wisp_rdmacm.h>

_Static_assert(WISP_OPTION_LEVEL == 0x77697370, "wisp's level");

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	int rev = 1;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (rdma_set_option(id, WISP_OPTION_LEVEL, WISP_OPT_MPA_REV,
			    &rev, sizeof(rev))) {
		printf("not over wisp: %s\n", strerror(errno));
		return 1;
	}
	printf("over wisp: WISP_OPT_MPA_REV accepted\n");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return 0;
}
EOF
	# shellcheck disable=SC2086 # cflags is a list of flags
	if ! out=$(cc -std=c11 -Wall -Werror $cflags -o "$bin" "$src" \
		  -L"$libdir" -Wl,-rpath,"$libdir" -lrdmacm 2>&1); then
		fail pkgconfig "building against wisp.pc failed: $out"
		return
	fi
	if ! out=$(cd / && timeout 10 "$bin" 2>&1); then
		fail pkgconfig "the program linked with wisplibdir: $out"
		return
	fi
	pass pkgconfig
	echo "  $cflags; $out"
}

# --- man_pages ----------------------------------------------------------
case_man_pages() {
	local page out name missing=()
	for page in "$prefix"/share/man/man*/*; do
		name=$(basename "$page")
		out=$(zcat -f "$page" | groff -man -ww -z 2>&1)
		[ -z "$out" ] || { fail man_pages "$name: groff: $out"; return; }
		out=$(lexgrog "$page" 2>&1) ||
			{ fail man_pages "$name: lexgrog: $out"; return; }
		out=$(MANWIDTH=80 man -l "$page" 2>&1 >/dev/null)
		[ -z "$out" ] || { fail man_pages "$name: man -l: $out"; return; }
		MANWIDTH=80 man -l "$page" 2>/dev/null | grep -q '^NAME' ||
			{ fail man_pages "$name: man -l shows no NAME"; return; }
	done
	# Every setting that docs/configuration.md documents is in wisp(7).
	while read -r name; do
		zcat "$prefix/share/man/man7/wisp.7.gz" | grep -q "$name" || missing+=("$name")
	done < <(grep -oE '\bWISP_[A-Z0-9_]*[A-Z0-9]' "$top/docs/configuration.md" | sort -u)
	if [ ${#missing[@]} -gt 0 ]; then
		fail man_pages "wisp(7) does not document ${missing[*]}"
		return
	fi
	pass man_pages
	echo "  $(find "$prefix/share/man" -type f | wc -l) pages, no groff warning"
}

# --- deb_build ----------------------------------------------------------
deb=
case_deb_build() {
	local out=$logs/deb_build contents ours theirs common pkg
	if ! need cpack || ! need dpkg-deb; then
		skip deb_build "cpack or dpkg-deb not installed"
		return
	fi
	if ! { cmake -S "$top" -B "$debbuild" -G Ninja -DCMAKE_C_COMPILER=gcc \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
		-DWISP_TESTS=OFF && cmake --build "$debbuild" -j 2 &&
		rm -rf "$debbuild/package" &&
		cpack --config "$debbuild/CPackConfig.cmake"; } >"$out" 2>&1; then
		fail deb_build "building the package failed: $(tail -5 "$out")"
		return
	fi
	deb=$(find "$debbuild/package" -maxdepth 1 -name 'wisp_*.deb' | head -1)
	[ -n "$deb" ] || { fail deb_build "cpack made no wisp_*.deb"; return; }
	if grep -q "CMake Warning" "$out"; then
		fail deb_build "cpack warned: $(grep -A3 'CMake Warning' "$out")"
		return
	fi
	contents=$(dpkg-deb -c "$deb")
	echo "$contents" >"$logs/deb_contents"
	ours=$(awk '$1 !~ /^d/ {print $6}' <<<"$contents" | sed 's|^\.||' | sort)
	for f in /usr/bin/wisp-run /usr/include/wisp/wisp_rdmacm.h \
		 /usr/share/man/man7/wisp.7.gz /usr/share/man/man1/wisp-run.1.gz; do
		grep -qx "$f" <<<"$ours" || { fail deb_build "$f not in the package"; return; }
	done
	grep -qE '^/usr/lib/[^/]+/pkgconfig/wisp\.pc$' <<<"$ours" ||
		{ fail deb_build "no /usr/lib/<triplet>/pkgconfig/wisp.pc"; return; }
	for f in libibverbs.so.1 librdmacm.so.1; do
		grep -qE "^/usr/lib/[^/]+/wisp/$f\$" <<<"$ours" ||
			{ fail deb_build "no /usr/lib/<triplet>/wisp/$f"; return; }
	done
	if grep -E '\.so(\.|$)' <<<"$ours" | grep -vqE '^/usr/lib/[^/]+/wisp/'; then
		fail deb_build "a library outside /usr/lib/<triplet>/wisp"
		return
	fi
	# No file in common with Debian's rdma-core (those installed here).
	theirs=$(for pkg in libibverbs1 librdmacm1 ibverbs-providers libibverbs-dev \
			     librdmacm-dev rdmacm-utils ibverbs-utils; do
		dpkg -L "$pkg" 2>/dev/null
	done | sort -u)
	[ -n "$theirs" ] || echo "  (no rdma-core package installed to compare with)"
	common=$(comm -12 <(echo "$ours") <(echo "$theirs") | grep -v '^$' || true)
	[ -z "$common" ] || { fail deb_build "files in common with rdma-core: $common"; return; }
	out=$(dpkg-deb -f "$deb" Package Depends)
	grep -qx 'Package: wisp' <<<"$out" || { fail deb_build "package name: $out"; return; }
	for pkg in liburing2 libisal2; do
		grep -q "$pkg" <<<"$out" || { fail deb_build "Depends lacks $pkg: $out"; return; }
	done
	# wisp's librdmacm takes wisp's libibverbs, next to it.
	if grep -qE 'libibverbs1|librdmacm1' <<<"$out"; then
		fail deb_build "Depends names rdma-core: $out"
		return
	fi
	# Maintainer scripts would keep the package in state rc after remove.
	if dpkg-deb -I "$deb" | grep -qE '^ +[0-9]+ bytes, +[0-9]+ lines +\*? *(pre|post)(inst|rm)'; then
		fail deb_build "the package has maintainer scripts"
		return
	fi
	pass deb_build
	echo "  $(basename "$deb"): $(wc -l <<<"$ours") files, $(grep Depends <<<"$out")"
}

# --- deb_apt ------------------------------------------------------------
apt_installed=0
apt_cleanup() {
	[ "$apt_installed" = 1 ] || return 0
	apt-get -o DPkg::Lock::Timeout=120 remove -y wisp >>"$logs/deb_apt" 2>&1
	apt_installed=0
}
trap apt_cleanup EXIT

case_deb_apt() {
	local out=$logs/deb_apt libdir status left msg
	if [ -z "$deb" ]; then
		skip deb_apt "no package was built"
		return
	fi
	if [ "$(id -u)" != 0 ]; then
		skip deb_apt "not root: apt-get install ./$(basename "$deb") needs root (CI runs it)"
		return
	fi
	if dpkg-query -W -f='${db:Status-Status}' wisp 2>/dev/null | grep -qv '^not-installed$'; then
		skip deb_apt "a wisp package is already installed here; not replacing it"
		return
	fi
	# apt-get wants a path with a slash to take a file.
	if ! timeout 300 apt-get -o DPkg::Lock::Timeout=120 install -y \
		"$(readlink -f "$deb")" >"$out" 2>&1; then
		fail deb_apt "apt-get install failed: $(tail -5 "$out")"
		return
	fi
	apt_installed=1
	libdir=$(dirname "$(dpkg -L wisp | grep '/wisp/libibverbs.so.1$')")
	if ! need rping; then
		skip deb_apt "rping not installed (rdmacm-utils)"
		apt_cleanup
		return
	fi
	if ! msg=$(rping_over deb_apt /usr/bin/wisp-run "$libdir"); then
		fail deb_apt "$msg (logs: $logs/deb_apt.*)"
		apt_cleanup
		return
	fi
	if [ "$(pkg-config --cflags wisp | sed 's/ *$//')" != "-I/usr/include/wisp" ] ||
	   [ "$(man -w wisp 2>/dev/null)" != /usr/share/man/man7/wisp.7.gz ]; then
		fail deb_apt "installed: pkg-config --cflags wisp or man -w wisp wrong"
		apt_cleanup
		return
	fi
	local files
	files=$(dpkg -L wisp)
	if ! timeout 300 apt-get -o DPkg::Lock::Timeout=120 remove -y wisp >>"$out" 2>&1; then
		fail deb_apt "apt-get remove failed: $(tail -5 "$out")"
		return
	fi
	apt_installed=0
	status=$(dpkg-query -W -f='${db:Status-Status}' wisp 2>/dev/null || echo not-installed)
	left=$(dpkg -L wisp 2>/dev/null || true)
	if [ "$status" != not-installed ] || [ -n "$left" ]; then
		fail deb_apt "after apt-get remove: status '$status', dpkg -L: $left"
		return
	fi
	left=$(grep -E '/wisp(/|$|-run|\.pc|\.7)' <<<"$files" |
		while read -r f; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done)
	if [ -n "$left" ]; then
		fail deb_apt "left on disk after remove: $left"
		return
	fi
	pass deb_apt
	echo "  $msg"
	echo "  removed: dpkg -L wisp empty, status not-installed, no file left"
}

for need_cmd in cmake ss readelf pkg-config cc; do
	need "$need_cmd" || { echo "[FAIL] install::setup: $need_cmd not installed"; exit 1; }
done

case_prefix_files
if [ -n "${wisplibdir:-}" ]; then
	case_wisp_run_prefix
	case_rping_prefix
	case_pkgconfig
	case_man_pages
else
	for c in wisp_run_prefix rping_prefix pkgconfig man_pages; do
		skip "$c" "nothing installed"
	done
fi
case_deb_build
case_deb_apt

echo "install: $npass passed, $nfail failed, $nskip skipped"
if [ "$nfail" -eq 0 ]; then
	rm -rf "$scratch"
	[ -z "${WISP_TEST_LOGS:-}" ] && rm -rf "$logs"
	exit 0
fi
echo "install: logs in $logs, installed tree in $prefix"
exit 1
