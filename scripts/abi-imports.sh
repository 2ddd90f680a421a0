#!/usr/bin/env bash
# abi-imports.sh -- inventory of the versioned ABI that Debian's RDMA user
# tools import from libibverbs.so.1 and librdmacm.so.1, and of the ABI that
# Debian's own copies of those two libraries export.
#
# Purpose: wisp will ship drop-in replacements for rdma-core's
# libibverbs.so.1 / librdmacm.so.1; this tells us exactly which
# symbol@VERSION pairs (and which version nodes) the replacements must provide.
#
# Usage: scripts/abi-imports.sh        (no arguments; output on stdout)
#
# Requirements: Debian 12 with the packages listed in PKGS installed
# (apt-get install rdmacm-utils perftest ibverbs-utils qperf ibverbs-providers)
# plus binutils (readelf, objdump) and file.
#
# Output sections (all lists sorted with LC_ALL=C, one item per line):
#   0. Inputs            -- packages/versions and every ELF object examined
#   A. Imports           -- per library, unique symbol@VERSION imported by the
#                           ELF *executables*, each followed by its importers
#   A2. Provider imports -- same, for the ELF *shared objects* shipped by
#                           ibverbs-providers (they are loaded by libibverbs
#                           and use its IBVERBS_PRIVATE_* node)
#   B. Version nodes     -- verdef of Debian's libraries with parent chains
#   C. Exports           -- every defined dynamic symbol of Debian's libraries
#   D. Checks            -- unversioned imports, private-node imports, imports
#                           of non-default (compat, sym@VER) versions, imports
#                           not satisfied by Debian's libraries
set -euo pipefail
export LC_ALL=C

PKGS=(rdmacm-utils perftest ibverbs-utils qperf ibverbs-providers)
LIBDIR=/usr/lib/x86_64-linux-gnu
LIBS=(libibverbs.so.1 librdmacm.so.1)

for tool in readelf objdump file dpkg dpkg-query; do
    command -v "$tool" >/dev/null || { echo "abi-imports.sh: missing $tool" >&2; exit 1; }
done
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        { echo "abi-imports.sh: package $p is not installed" >&2; exit 1; }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# ---------------------------------------------------------------------------
# Collect ELF objects: "<kind>\t<pkg>\t<path>", kind = exe | lib.
# Symlinks are skipped (the real file is listed by dpkg as well).
# ---------------------------------------------------------------------------
for p in "${PKGS[@]}"; do
    dpkg -L "$p" | while IFS= read -r f; do
        [[ -f $f && ! -L $f ]] || continue
        desc=$(file -b "$f")
        case $desc in
            ELF*executable*)    printf 'exe\t%s\t%s\n' "$p" "$f" ;;
            ELF*shared\ object*) printf 'lib\t%s\t%s\n' "$p" "$f" ;;
        esac
    done
done | sort -u >"$TMP/objects"

# ---------------------------------------------------------------------------
# Exports of Debian's libraries, from objdump -T (defined symbols only).
# "<lib>\t<sym>\t<@|@@>\t<VERSION>\t<type>\t<section>"
#   @@ = default version (what new links bind to), @ = hidden/compat version
#   (objdump prints those in parentheses).
# ---------------------------------------------------------------------------
for lib in "${LIBS[@]}"; do
    objdump -T "$LIBDIR/$lib" | awk -v lib="$lib" -F'\t' '
        /^[0-9a-f]+ / {
            n = split($1, L, " "); sect = L[n]
            if (sect == "*UND*") next
            type = substr($1, 23, 2)          # DF (function) / DO (object)
            m = split($2, R, " ")             # size, version, name
            ver = R[2]; name = R[m]; at = "@@"
            if (ver ~ /^\(.*\)$/) { ver = substr(ver, 2, length(ver) - 2); at = "@" }
            printf "%s\t%s\t%s\t%s\t%s\t%s\n", lib, name, at, ver, type, sect
        }'
done | sort -u >"$TMP/exports"

# Version nodes each library defines: "<lib>\t<VERSION>"
for lib in "${LIBS[@]}"; do
    readelf -V -W "$LIBDIR/$lib" | awk -v lib="$lib" '
        /^Version definition section/ { d = 1; next }
        /^Version (needs|symbols) section/ { d = 0 }
        d && /Flags: none/ { for (i = 1; i <= NF; i++) if ($i == "Name:") print lib "\t" $(i+1) }'
done | sort -u >"$TMP/libvers"

# ---------------------------------------------------------------------------
# Imports. For each object: map every needed version name to the file that
# provides it (readelf -V, .gnu.version_r), then walk the undefined dynamic
# symbols (readelf --dyn-syms -W).  Versioned symbols are attributed via the
# version-needs map; unversioned ones are attributed to a target library only
# if Debian's library exports that name (flagged as UNVERSIONED).
# "<kind>\t<lib>\t<sym@VERSION>\t<path>\t<bind>"
# ---------------------------------------------------------------------------
while IFS=$'\t' read -r kind pkg path; do
    readelf -V -W "$path" | awk '
        /^Version needs section/ { n = 1; next }
        /^Version (definition|symbols) section/ { n = 0 }
        n && /File:/ { for (i = 1; i <= NF; i++) if ($i == "File:") file = $(i+1) }
        n && /Name:/ { for (i = 1; i <= NF; i++) if ($i == "Name:") print $(i+1) "\t" file }
    ' >"$TMP/vn"
    readelf --dyn-syms -W "$path" | awk -v kind="$kind" -v path="$path" \
        -v vnfile="$TMP/vn" -v expfile="$TMP/exports" '
        BEGIN {
            while ((getline l < vnfile) > 0) { split(l, a, "\t"); vfile[a[1]] = a[2] }
            while ((getline l < expfile) > 0) { split(l, a, "\t"); exported[a[2]] = a[1] }
            t["libibverbs.so.1"] = 1; t["librdmacm.so.1"] = 1
        }
        $7 == "UND" && NF >= 8 {
            sym = $8; bind = $5
            if (index(sym, "@")) {
                split(sym, s, "@"); ver = s[2]; lib = vfile[ver]
                if (!(lib in t)) next
                printf "%s\t%s\t%s\t%s\t%s\n", kind, lib, sym, path, bind
            } else if (sym in exported) {
                printf "%s\t%s\t%s@UNVERSIONED\t%s\t%s\n", kind, exported[sym], sym, path, bind
            }
        }'
done <"$TMP/objects" | sort -u >"$TMP/imports"

# Print section A/A2 for one object kind.
print_imports() {
    local kind=$1 lib syms
    for lib in "${LIBS[@]}"; do
        awk -F'\t' -v k="$kind" -v l="$lib" '$1 == k && $2 == l' "$TMP/imports" >"$TMP/sel"
        syms=$(cut -f3 "$TMP/sel" | sort -u | grep -c . || true)
        echo
        echo "### $lib: $syms distinct symbol@VERSION imported"
        echo "# version nodes used (symbols imported from each):"
        cut -f3 "$TMP/sel" | sort -u | sed 's/.*@//' | sort | uniq -c |
            awk '{ printf "#   %-24s %s\n", $2, $1 }'
        echo "# symbol@VERSION [number of importers]"
        echo "#     importer (\"weak\" if the reference is weak)"
        # two passes over the (sorted) selection: count importers, then print
        awk -F'\t' '
            NR == FNR { cnt[$3]++; next }
            $3 != prev { printf "%s [%d]\n", $3, cnt[$3]; prev = $3 }
            { printf "    %s%s\n", $4, ($5 == "WEAK") ? " weak" : "" }
        ' "$TMP/sel" "$TMP/sel"
    done
}

# ---------------------------------------------------------------------------
echo "# abi-imports.sh -- versioned ABI imported from libibverbs.so.1 / librdmacm.so.1"
echo "# generated on $(. /etc/os-release && echo "$PRETTY_NAME") ($(uname -m))"
echo
echo "## 0. Inputs"
echo "# packages:"
for p in "${PKGS[@]}" libibverbs1 librdmacm1; do
    printf '#   %s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p")"
done
echo "# reference libraries:"
for lib in "${LIBS[@]}"; do
    printf '#   %s -> %s\n' "$LIBDIR/$lib" "$(readlink -f "$LIBDIR/$lib")"
done
echo "# ELF objects examined (kind package path):"
awk -F'\t' '{ printf "%s %s %s\n", $1, $2, $3 }' "$TMP/objects" | sort

echo
echo "# DT_NEEDED entries of each executable other than libc/libm (a provider"
echo "# library listed here is loaded with the executable, so its own imports"
echo "# from libibverbs.so.1 -- section A2 -- must also resolve at start-up):"
awk -F'\t' '$1 == "exe" { print $3 }' "$TMP/objects" | while IFS= read -r f; do
    printf '%s:%s\n' "$f" "$(readelf -d -W "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
        grep -Ev '^(libc|libm)\.so' | sort | sed 's/^/ /' | tr -d '\n')"
done | sort

echo
echo "## A. Imports by ELF executables"
print_imports exe

echo
echo "## A2. Imports by ELF shared objects (ibverbs-providers)"
print_imports lib

echo
echo "## B. Version nodes defined by Debian's libraries (readelf -V verdef)"
echo "# index VERSION [<- parent] ; chain: VERSION -> parent -> ... (BASE = soname)"
for lib in "${LIBS[@]}"; do
    echo
    echo "### $lib"
    readelf -V -W "$LIBDIR/$lib" | awk '
        /^Version definition section/ { d = 1; next }
        /^Version (needs|symbols) section/ { d = 0 }
        !d { next }
        /Index:/ { for (i = 1; i <= NF; i++) { if ($i == "Index:") idx = $(i+1); if ($i == "Name:") nm = $(i+1) }
                   base = ($0 ~ /Flags: BASE/); name[idx] = nm; isbase[idx] = base; cur = idx; nidx++ }
        /Parent [0-9]+:/ { parent[name[cur]] = $NF }
        END {
            for (i = 1; i <= nidx; i++) {
                if (!(i in name)) continue
                n = name[i]
                if (isbase[i]) { printf "%2d %s (BASE, soname)\n", i, n; continue }
                chain = n; p = n
                while (p in parent) { p = parent[p]; chain = chain " -> " p }
                printf "%2d %s%s ; chain: %s\n", i, n, (n in parent) ? " <- " parent[n] : "", chain
            }
        }'
done

echo
echo "## C. Symbols exported by Debian's libraries (objdump -T, defined only)"
echo "# symbol@@VERSION = default version, symbol@VERSION = hidden compat version"
echo "# columns: symbol@[@]VERSION type(DF=func,DO=object) section"
for lib in "${LIBS[@]}"; do
    echo
    n=$(awk -F'\t' -v l="$lib" '$1 == l && $6 != "*ABS*"' "$TMP/exports" | wc -l)
    nu=$(awk -F'\t' -v l="$lib" '$1 == l && $6 != "*ABS*" { print $2 }' "$TMP/exports" | sort -u | wc -l)
    echo "### $lib: $n versioned definitions ($nu distinct names), plus one *ABS* marker per version node"
    awk -F'\t' -v l="$lib" '$1 == l { printf "%s%s%s %s %s\n", $2, $3, $4, $5, $6 }' "$TMP/exports" | sort
done

echo
echo "## D. Checks"
echo
echo "### D1. Unversioned imports of names exported by the target libraries"
grep -P '\t[^\t]*@UNVERSIONED\t' "$TMP/imports" | awk -F'\t' '{ print $1, $2, $3, $4 }' | sort || echo "(none)"
echo
echo "### D2. Imports from private version nodes (*PRIVATE*)"
echo "# executables: one line per import; provider shared objects: per-node totals"
echo "# (their full list is in section A2)"
awk -F'\t' '$3 ~ /@[A-Z_]*PRIVATE/ && $1 == "exe" { print $1, $2, $3, $4; f = 1 }
             $3 ~ /@[A-Z_]*PRIVATE/ && $1 == "lib" { split($3, s, "@"); k = $2 " " s[2]
                                                  n[k]++; if (!((k, s[1]) in u)) { u[k, s[1]] = 1; d[k]++ } }
             END { for (k in n) printf "lib %s: %d distinct symbols, %d imports\n", k, d[k], n[k]
                   if (!f && !length(n)) print "(none)" }' "$TMP/imports" | sort
echo
echo "### D3. Imports bound to a hidden (non-default, compat) version"
awk -F'\t' 'NR == FNR { if ($3 == "@") hid[$2 "@" $4] = 1; next }
            ($3 in hid) { print $1, $2, $3, $4; f = 1 }
            END { if (!f) print "(none)" }' "$TMP/exports" "$TMP/imports" | sort
echo
echo "### D4. Versioned imports NOT defined by Debian's library (should be none)"
awk -F'\t' 'NR == FNR { def[$1 "\t" $2 "@" $4] = 1; next }
            $3 !~ /@UNVERSIONED$/ && !(($2 "\t" $3) in def) { print $1, $2, $3, $4; f = 1 }
            END { if (!f) print "(none)" }' "$TMP/exports" "$TMP/imports" | sort
echo
echo "### D5. Imported version nodes not defined by Debian's library (should be none)"
awk -F'\t' 'NR == FNR { v[$1 "\t" $2] = 1; next }
            $3 !~ /@UNVERSIONED$/ { split($3, s, "@"); k = $2 "\t" s[2]; if (!(k in v) && !(k in seen)) { seen[k] = 1; print $2, s[2]; f = 1 } }
            END { if (!f) print "(none)" }' "$TMP/libvers" "$TMP/imports" | sort
echo
echo "### D6. Summary: distinct symbol@VERSION a replacement must export"
for lib in "${LIBS[@]}"; do
    e=$(awk -F'\t' -v l="$lib" '$1 == "exe" && $2 == l { print $3 }' "$TMP/imports" | sort -u | wc -l)
    a=$(awk -F'\t' -v l="$lib" '$2 == l { print $3 }' "$TMP/imports" | sort -u | wc -l)
    printf '%s: executables=%d executables+providers=%d\n' "$lib" "$e" "$a"
done
