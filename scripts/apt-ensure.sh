# apt-ensure.sh: sourced by wisp's scripts (not run on its own).
#
#   apt_ensure PKG...   install those of the Debian packages PKG that are
#                       not installed yet (apt-get; through sudo unless
#                       root). Messages go to stderr; returns non-zero if
#                       they could not be installed.
apt_ensure() {
	local missing=() sudo=() p

	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || {
			echo "missing packages: ${missing[*]} (run as root or install sudo)" >&2
			return 1
		}
		sudo=(sudo)
	fi
	echo "installing ${missing[*]}" >&2
	"${sudo[@]}" apt-get update -qq >&2 &&
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >&2
}
