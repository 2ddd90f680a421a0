#!/usr/bin/env bash
# build-image.sh: build (once per machine) the qemu guest that runs the
# Linux kernel's soft-iWARP driver (siw) for wisp's interop tests.
#
#   tests/interop/build-image.sh          build if needed, print the image dir
#   tests/interop/build-image.sh --force  rebuild even if cached
#
# Everything comes from Debian 12 packages:
#   - linux-image-6.1.0-NN-amd64 (the bzImage and the in-tree modules),
#     linux-headers-6.1.0-NN-{amd64,common}, linux-kbuild-6.1 and
#     linux-source-6.1, all of one version, the newest NN the archive has
#     (or $WISP_INTEROP_KERNEL=6.1.0-NN-amd64), fetched with apt-get
#     download and unpacked with dpkg -x;
#   - siw is not built by Debian (CONFIG_RDMA_SIW is not set): it is built
#     out of tree from linux-source against those headers, twice: "default"
#     (siw as shipped) and "p2p" (its peer_to_peer constant switched on,
#     as siw has no module parameters);
#   - busybox-static (downloaded, not installed) and the host's rdma-core
#     userspace (rping, perftest, iproute2's rdma, libibverbs with the siw
#     provider, librdmacm) with every library ldd lists plus libgcc_s;
#   - libxxhash.so.0 (libxxhash0), which wisp-repl needs besides rdma-core:
#     run.sh copies the host's wisp-repl into the guest at run time, so
#     the image does not depend on wisp's build.
#
# The image is cached in $WISP_INTEROP_CACHE (default /var/cache/wisp-interop,
# or ~/.cache/wisp-interop when that is not writable) under a key made of the
# kernel package version, the rdma-core version and a hash of this script,
# so a change to any of them builds a new one. The directory holds:
#   vmlinuz  initrd-default.img  initrd-p2p.img  cmprobe  manifest.txt
# The last line printed on stdout is that directory; progress goes to stderr.
#
# Guest contract (what run.sh relies on; see docs/interop.md):
#   kernel command line   console=ttyS0 wisp.ctl=PORT  -> control server on
#                         TCP PORT: each connection sends a shell script
#                         ended by a line "__WISP_END__", gets its output
#                         and the line "__WISP_RC=N" back;
#                         wisp.cmd=BASE64  -> run that script once instead,
#                         print "WISP-DONE rc=N", power off.
#   serial markers        WISP-BOOT, WISP-READY siw0=<variant>, WISP-ERROR ...,
#                         WISP-DONE rc=N, WISP-POWEROFF
#   guest network         eth0 10.0.2.15/24 (qemu user networking), siw0 on it
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
force=0
[ "${1:-}" = "--force" ] && force=1

log() { printf 'build-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

# ---------------------------------------------------------------- host tools
host_packages=(
	qemu-system-x86 socat cpio kmod xz-utils gzip
	make gcc gcc-12 libc6-dev libelf-dev python3
	rdmacm-utils perftest ibverbs-providers ibverbs-utils libibverbs1
	librdmacm1 iproute2 libibverbs-dev librdmacm-dev libxxhash0
)
apt_updated=0
apt_update_once() {
	[ "$apt_updated" = 1 ] && return 0
	"${sudo_cmd[@]}" apt-get update -qq >&2 || return 1
	apt_updated=1
}
# shellcheck source=../../scripts/apt-ensure.sh
. "$here/../../scripts/apt-ensure.sh"
ensure_host_packages() { apt_ensure "${host_packages[@]}"; }

# ------------------------------------------------------ kernel version choice
# Prints "KREL VERSION" (6.1.0-NN-amd64 6.1.x-y) for the newest NN whose
# image, headers, kbuild and source all exist at one version.
candidate_version() { # PACKAGE VERSION -> succeeds if apt can fetch it
	apt-cache madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' |
		grep -qxF "$2"
}
pick_kernel() {
	local rels rel ver
	if [ -n "${WISP_INTEROP_KERNEL:-}" ]; then
		rels=$WISP_INTEROP_KERNEL
	else
		rels=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
			awk '{print $1}' | sed 's/^linux-image-//' | sort -t- -k2,2nr)
	fi
	for rel in $rels; do
		ver=$(apt-cache madison "linux-image-$rel" 2>/dev/null |
			awk -F'|' 'NR==1 {gsub(/ /,"",$2); print $2}')
		[ -n "$ver" ] || continue
		local common=${rel%-amd64}-common
		candidate_version "linux-headers-$rel" "$ver" &&
			candidate_version "linux-headers-$common" "$ver" &&
			candidate_version linux-kbuild-6.1 "$ver" &&
			candidate_version linux-source-6.1 "$ver" || continue
		echo "$rel $ver"
		return 0
	done
	return 1
}

ensure_host_packages || die "cannot install host packages"
pick=$(pick_kernel || true)
if [ -z "$pick" ]; then
	apt_update_once || true
	pick=$(pick_kernel || true)
fi

cache_root=${WISP_INTEROP_CACHE:-/var/cache/wisp-interop}
if ! mkdir -p "$cache_root" 2>/dev/null || [ ! -w "$cache_root" ]; then
	cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/wisp-interop
	mkdir -p "$cache_root"
fi

if [ -z "$pick" ]; then
	# No archive answer (offline?): use the newest image already built.
	last=$(ls -1dt "$cache_root"/*/manifest.txt 2>/dev/null | head -1 || true)
	[ -n "$last" ] || die "no linux-image-6.1.0-NN-amd64 with matching headers, kbuild and source in the archive, and no cached image"
	log "archive gives no kernel; using cached $(dirname "$last")"
	dirname "$last"
	exit 0
fi
krel=${pick% *}
kver=${pick#* }
rdma_ver=$(dpkg-query -W -f='${Version}' libibverbs1)
script_hash=$(cat "$here/build-image.sh" "$here/cmprobe.c" | sha256sum | cut -c1-10)
key="${krel}_${kver}_rdma-${rdma_ver}_${script_hash}"
out="$cache_root/$key"

if [ "$force" = 0 ] && [ -f "$out/manifest.txt" ]; then
	log "cached: $out"
	echo "$out"
	exit 0
fi

exec 9>"$cache_root/.lock"
flock 9
if [ "$force" = 0 ] && [ -f "$out/manifest.txt" ]; then
	echo "$out"
	exit 0
fi

t0=$(date +%s)
work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building $key in $work"

# ------------------------------------------------------------- kernel debs
mkdir -p "$work/debs" "$work/root"
common=${krel%-amd64}-common
(
	cd "$work/debs"
	apt-get download -q "linux-image-$krel=$kver" "linux-headers-$krel=$kver" \
		"linux-headers-$common=$kver" "linux-kbuild-6.1=$kver" \
		"linux-source-6.1=$kver" busybox-static >&2 2>"$work/download.log" ||
		{ cat "$work/download.log" >&2; exit 1; }
) || die "apt-get download failed"
bbver=$(dpkg-deb -f "$work"/debs/busybox-static_*.deb Version)
for deb in "$work"/debs/*.deb; do
	case $deb in
	*/busybox-static_*) dpkg -x "$deb" "$work/busybox" ;;
	*/linux-source-6.1_*) dpkg -x "$deb" "$work/src" ;;
	*) dpkg -x "$deb" "$work/root" ;;
	esac
done
rm -f "$work"/debs/*.deb

hdr=$work/root/usr/src/linux-headers-$krel
[ -f "$hdr/Makefile" ] || die "no $hdr/Makefile"
# The headers' Makefile includes the -common tree by absolute path.
sed -i "s#/usr/src/linux-headers-#$work/root/usr/src/linux-headers-#g" "$hdr/Makefile"
grep -q "$work/root/usr/src/linux-headers-$common/Makefile" "$hdr/Makefile" ||
	die "unexpected headers Makefile: $(cat "$hdr/Makefile")"

# -------------------------------------------------------------- siw modules
log "extracting siw from linux-source-6.1 $kver"
tar -xJf "$work"/src/usr/src/linux-source-6.1.tar.xz -C "$work/src" \
	linux-source-6.1/drivers/infiniband/sw/siw
siwsrc=$work/src/linux-source-6.1/drivers/infiniband/sw/siw
rm -f "$work"/src/usr/src/linux-source-6.1.tar.xz

build_siw() { # VARIANT
	local d=$work/siw-$1
	cp -a "$siwsrc" "$d"
	if [ "$1" = p2p ]; then
		# peer_to_peer is a const bool in siw_main.c (6.1) or siw_cm.c;
		# switch it on, and prove the edit took.
		local f
		f=$(grep -lE '^(static )?const bool peer_to_peer( = false)?;' "$d"/*.c) ||
			die "cannot find siw's peer_to_peer constant"
		sed -i -E 's/^((static )?const bool peer_to_peer)( = false)?;/\1 = true;/' $f
		grep -qE '^(static )?const bool peer_to_peer = true;' $f ||
			die "peer_to_peer edit failed"
		log "siw-p2p: $(grep -hE 'const bool peer_to_peer' $f) in $(basename $f)"
	fi
	make -C "$hdr" M="$d" CONFIG_RDMA_SIW=m modules >"$work/siw-$1.log" 2>&1 ||
		{ cat "$work/siw-$1.log" >&2; die "siw ($1) build failed"; }
	[ -f "$d/siw.ko" ] || die "siw ($1): no siw.ko"
}
build_siw default
build_siw p2p

# ------------------------------------------------------------ module closure
mods=$work/root/lib/modules/$krel
mkdir -p "$mods/extra"
cp "$work/siw-default/siw.ko" "$mods/extra/siw.ko"
depmod -b "$work/root" "$krel"
order=()
for m in virtio_pci virtio_net crc32c_generic crc32c-intel siw ib_uverbs rdma_ucm; do
	while read -r verb path _; do
		[ "$verb" = insmod ] || continue
		case $path in */extra/siw.ko) continue ;; esac
		rel=${path#"$mods"/}
		case " ${order[*]} " in *" $rel "*) ;; *) order+=("$rel") ;; esac
	done < <(modprobe -d "$work/root" -S "$krel" --show-depends "$m")
done

# ----------------------------------------------------------------- initramfs
ir=$work/initramfs
mkdir -p "$ir"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc/wisp,etc/libibverbs.d,lib/modules/"$krel"}
cp "$work/busybox/bin/busybox" "$ir/bin/busybox"
cp "$work/busybox/bin/busybox" "$ir/bin/sh" # a real shell before --install
for rel in "${order[@]}"; do
	mkdir -p "$ir/lib/modules/$krel/$(dirname "$rel")"
	cp "$mods/$rel" "$ir/lib/modules/$krel/$rel"
done
printf '%s\n' "${order[@]}" >"$ir/etc/wisp/modules"
echo "$krel" >"$ir/etc/wisp/kernel"

# cmprobe (tests/interop/cmprobe.c): wisp's own rdma_cm probe, run on
# both ends; the host uses the same binary from the image directory.
gcc -O2 -Wall -o "$work/cmprobe" "$here/cmprobe.c" -lrdmacm -libverbs ||
	die "cmprobe build failed"

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
progs=(rping ib_send_bw ib_write_bw ib_read_bw rdma ibv_devices ibv_devinfo)
files=()
for p in "${progs[@]}"; do
	f=$(command -v "$p") || die "$p not found on the host"
	files+=("$f")
done
siwprov=/usr/lib/$multiarch/libibverbs/libsiw-rdmav34.so
[ -f "$siwprov" ] || siwprov=$(ls /usr/lib/"$multiarch"/libibverbs/libsiw-rdmav*.so | head -1)
[ -f "$siwprov" ] || die "siw provider (ibverbs-providers) not found"
libgcc=$(ls /lib/"$multiarch"/libgcc_s.so.1 /usr/lib/"$multiarch"/libgcc_s.so.1 2>/dev/null | head -1)
[ -n "$libgcc" ] || die "libgcc_s.so.1 not found"
files+=("$work/cmprobe")
for f in "${files[@]}"; do cp -L "$f" "$ir/usr/bin/"; done
libs=("$siwprov" "$libgcc")
for f in "${files[@]}" "$siwprov" "$libgcc"; do
	while read -r lib; do libs+=("$lib"); done < <(ldd "$f" | awk '
		/=> \// {print $3; next}
		/^\t\// {print $1}')
done
# Libraries of programs run.sh copies into the guest at run time
# (demos/replicate/wisp-repl, built on the host), beyond rdma-core's.
extra_libs=(libxxhash.so.0)
for s in "${extra_libs[@]}"; do
	f=$(ls /lib/"$multiarch"/"$s" /usr/lib/"$multiarch"/"$s" 2>/dev/null | head -1)
	[ -n "$f" ] || die "$s not found on the host"
	libs+=("$f")
	while read -r lib; do libs+=("$lib"); done < <(ldd "$f" | awk '
		/=> \// {print $3; next}
		/^\t\// {print $1}')
done
for lib in $(printf '%s\n' "${libs[@]}" | sort -u); do
	mkdir -p "$ir$(dirname "$lib")"
	cp -L "$lib" "$ir$lib"
done
# /lib64 and /lib may be links on the host (merged /usr): make the loader
# reachable at the path the binaries name.
ldso=$(readelf -l "$(command -v rping)" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
if [ ! -e "$ir$ldso" ]; then
	mkdir -p "$ir$(dirname "$ldso")"
	cp -L "$ldso" "$ir$ldso"
fi
drv=$(ls /etc/libibverbs.d/siw.driver) || die "no /etc/libibverbs.d/siw.driver"
cp "$drv" "$ir/etc/libibverbs.d/"
echo "root:x:0:0:root:/:/bin/sh" >"$ir/etc/passwd"
echo "root:x:0:" >"$ir/etc/group"
printf '127.0.0.1 localhost\n10.0.2.15 guest\n10.0.2.100 host\n' >"$ir/etc/hosts"

cat >"$ir/init" <<'INIT'
#!/bin/sh
# wisp interop guest: siw0 on eth0, then a control server or one script.
/bin/busybox --install -s
export PATH=/usr/bin:/usr/sbin:/bin:/sbin LD_LIBRARY_PATH=
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts
echo "WISP-BOOT $(uname -r)"
krel=$(cat /etc/wisp/kernel)
for m in $(cat /etc/wisp/modules) extra/siw.ko; do
	insmod "/lib/modules/$krel/$m" 2>/tmp/insmod.err ||
		grep -q "File exists" /tmp/insmod.err ||
		echo "WISP-ERROR insmod $m: $(cat /tmp/insmod.err)"
done
variant=default ctl= cmd=
for w in $(cat /proc/cmdline); do
	case $w in
	wisp.variant=*) variant=${w#wisp.variant=} ;;
	wisp.ctl=*) ctl=${w#wisp.ctl=} ;;
	wisp.cmd=*) cmd=${w#wisp.cmd=} ;;
	esac
done
ip link set lo up
ip addr add 10.0.2.15/24 dev eth0 && ip link set eth0 up ||
	echo "WISP-ERROR eth0"
ip route add default via 10.0.2.2 2>/dev/null
sysctl -qw net.ipv4.tcp_fin_timeout=5 2>/dev/null
rdma link add siw0 type siw netdev eth0 || echo "WISP-ERROR rdma link add"
if [ -e /sys/class/infiniband/siw0 ]; then
	echo "WISP-READY siw0=$variant $(rdma link show siw0/1 2>&1 | tr -s ' ')"
else
	echo "WISP-ERROR no siw0"
fi
if [ -n "$cmd" ]; then
	echo "$cmd" | base64 -d >/tmp/cmd.sh
	sh /tmp/cmd.sh </dev/null
	echo "WISP-DONE rc=$?"
elif [ -n "$ctl" ]; then
	cat >/tmp/ctl.sh <<'CTL'
#!/bin/sh
# one control connection: read a script up to __WISP_END__, run it
: >/tmp/ctl.$$
while IFS= read -r line; do
	[ "$line" = "__WISP_END__" ] && break
	printf '%s\n' "$line" >>/tmp/ctl.$$
done
sh /tmp/ctl.$$ </dev/null 2>&1
echo "__WISP_RC=$?"
rm -f /tmp/ctl.$$
CTL
	chmod +x /tmp/ctl.sh
	# -ll: keep listening, one child per connection
	nc -ll -p "$ctl" -e /tmp/ctl.sh &
	hex=$(printf ':%04X ' "$ctl")
	for i in $(seq 100); do
		cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "$hex.* 0A " && break
		sleep 0.05
	done
	echo "WISP-CTL port=$ctl"
	wait
	echo "WISP-ERROR control server ended"
else
	echo "WISP-ERROR neither wisp.ctl nor wisp.cmd given"
fi
echo WISP-POWEROFF
sync
poweroff -f
INIT
chmod +x "$ir/init"

log "initramfs: $(du -sh "$ir" | cut -f1), modules: ${order[*]}"
mkdir -p "$work/out"
(cd "$ir" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
	gzip -6 >"$work/out/base.cpio.gz"
for v in default p2p; do
	s=$work/siwcpio-$v
	mkdir -p "$s/lib/modules/$krel/extra"
	cp "$work/siw-$v/siw.ko" "$s/lib/modules/$krel/extra/siw.ko"
	# later archives overwrite earlier ones: this siw.ko is the one loaded
	(cd "$s" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
		gzip -6 >"$work/out/siw-$v.cpio.gz"
	cat "$work/out/base.cpio.gz" "$work/out/siw-$v.cpio.gz" >"$work/out/initrd-$v.img"
done
rm -f "$work"/out/*.cpio.gz
cp "$work/root/boot/vmlinuz-$krel" "$work/out/vmlinuz"
cp "$work/cmprobe" "$work/out/cmprobe"
{
	echo "key: $key"
	echo "kernel: linux-image-$krel $kver"
	echo "siw: built from linux-source-6.1 $kver (default, p2p: peer_to_peer = true)"
	echo "modules: ${order[*]}"
	echo "userspace: ${progs[*]} (rdma-core $rdma_ver, perftest $(dpkg-query -W -f='${Version}' perftest), iproute2 $(dpkg-query -W -f='${Version}' iproute2))"
	echo "libraries for run-time programs (wisp-repl): ${extra_libs[*]} (libxxhash0 $(dpkg-query -W -f='${Version}' libxxhash0))"
	echo "busybox-static: $bbver"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - t0)) s"
} >"$work/out/manifest.txt"
rm -rf "$out"
mv "$work/out" "$out"
# one image per machine: drop the ones older keys left behind
find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build.*' \
	-exec rm -rf {} + 2>/dev/null || true
log "done in $(($(date +%s) - t0)) s: $out"
echo "$out"
