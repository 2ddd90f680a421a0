# shellcheck shell=bash
# apt-ensure.sh: sourced by wisp's scripts (not run on its own).
#
#   apt_ensure PKG...   install those of the Debian packages PKG that are
#                       not installed yet (apt-get; through sudo unless
#                       root). Messages go to stderr; returns non-zero if
#                       they could not be installed. A dpkg run that was
#                       cut short earlier (a killed job leaves packages
#                       half-configured, and apt-get then refuses to run)
#                       is finished first with dpkg --configure -a.
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
	if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
		echo "finishing an interrupted dpkg run (dpkg --configure -a)" >&2
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" dpkg --configure -a >&2 ||
			return 1
		local still=()
		for p in "${missing[@]}"; do
			dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
				grep -q "install ok installed" || still+=("$p")
		done
		[ ${#still[@]} -eq 0 ] && return 0
		missing=("${still[@]}")
	fi
	echo "installing ${missing[*]}" >&2
	"${sudo[@]}" apt-get update -qq >&2 &&
		DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >&2
}
