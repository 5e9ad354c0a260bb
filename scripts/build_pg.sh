#!/usr/bin/env bash
# Builds PostgreSQL MAJOR (17 or 18) from Debian's source package into a private prefix, once:
# bookworm has binary packages for PostgreSQL 15 only; 17 is a source package in trixie, 18 in
# sid. scripts/setup.sh uses it for 18; 17 comes from trixie's binary packages in a root of its own
# (scripts/pg17_chroot.sh), since the archive stopped serving trixie's source package. Nothing from trixie or sid is installed as a binary package; only source packages are
# downloaded. (pgvector is added by scripts/setup.sh.)
#
#   scripts/build_pg.sh MAJOR        prints the prefix's pg_config path on its last line
#
# The prefix is $TRIBUTARY_PG_CACHE/pgMAJOR (default /var/cache/tributary/pgMAJOR), outside the
# checkout, so that a second run (or another checkout) reuses it. A stamp file written only after
# `make install` succeeded marks it as done; an interrupted build is started over. Remove the
# prefix to rebuild. Needs root or sudo (apt, the cache directory).
set -euo pipefail
major=${1:?usage: build_pg.sh MAJOR}
case "$major" in
  17) suite=trixie ;;
  18) suite=sid ;;
  *) echo "build_pg.sh: PostgreSQL $major is not built from source here (15 is Debian's binary package)" >&2; exit 2 ;;
esac
cache=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}
prefix=$cache/pg$major
stamp=$prefix/.tributary-built
jobs=${TRIBUTARY_BUILD_JOBS:-$(nproc)}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
log() { printf '\n== %s\n' "$*" >&2; }

if [ -f "$stamp" ] && [ -x "$prefix/bin/pg_config" ]; then
  log "PostgreSQL $major: cached in $prefix ($(cat "$stamp"))"
  echo "$prefix/bin/pg_config"
  exit 0
fi

# Build dependencies, from bookworm. Since PostgreSQL 17 the release tarball no longer ships the
# generated parser and scanner files: bison and flex are needed.
need=()
for p in build-essential dpkg-dev pkg-config bison flex libreadline-dev zlib1g-dev libicu-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# A deb-src stanza (source packages only) for the suite, reusing the URIs and keyring of the
# machine's own Debian archive.
add_src() {  # add_src SUITE
  local list=/etc/apt/sources.list.d/tributary-$1-src.sources uris key
  [ -f "$list" ] && return 1
  uris=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  key=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
    "$uris" "$1" "$key" | $SUDO tee "$list" >/dev/null
}
updated=0
add_src "$suite" && updated=1
[ $updated = 1 ] && $SUDO apt-get update -qq

$SUDO mkdir -p "$cache"
[ "$(id -u)" = 0 ] || $SUDO chown "$(id -u):$(id -g)" "$cache"
work=$cache/build-pg$major
rm -rf "$work" "$prefix"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
cd "$work"

log "PostgreSQL $major: source package from $suite"
# Exit status 3 when the archive does not serve the source package (seen on 2026-11-23 for
# postgresql-17: listed by apt-cache showsrc, 404 on every file): scripts/test.sh then reports that
# major's steps as skipped, with this reason, instead of failing them.
if ! apt-get source --download-only "postgresql-$major/$suite" >/dev/null 2>&1 \
   && ! apt-get source --download-only "postgresql-$major" >"$work/download.log" 2>&1; then
  reason="the archive does not serve postgresql-$major's source package: $(grep -m1 -o '[0-9]\{3\} *Not Found' "$work/download.log" || tail -1 "$work/download.log")"
  echo "build_pg.sh: $reason" >&2
  cd / && rm -rf "$work"
  echo "$reason" > "$cache/pg$major.unavailable"
  exit 3
fi
rm -f "$cache/pg$major.unavailable"
orig=$(ls postgresql-"$major"_*.orig.tar.* | head -1)
version=$(basename "$orig" | sed -E 's/^postgresql-[0-9]+_([^.]+\.[^.]+)\.orig.*/\1/')
tar -xf "$orig"
src=$(find . -maxdepth 1 -type d -name "postgresql-$major*" | head -1)

log "PostgreSQL $version: configure, make -j$jobs, make install into $prefix"
started=$(date +%s)
(
  cd "$src"
  ./configure --prefix="$prefix" --with-icu --with-readline --with-zlib >configure.log 2>&1 \
    || { tail -40 configure.log; exit 1; }
  make -s -j"$jobs" >make.log 2>&1 || { tail -60 make.log; exit 1; }
  make -s install >install.log 2>&1 || { tail -40 install.log; exit 1; }
)
log "PostgreSQL $version built in $(( $(date +%s) - started )) s"

cd "$cache"
rm -rf "$work"
# Readable by the postgres OS user, which runs the test clusters.
chmod -R a+rX "$prefix"
echo "postgresql $version" >"$stamp"
echo "$prefix/bin/pg_config"
