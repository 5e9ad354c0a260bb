#!/usr/bin/env bash
# PostgreSQL 17 for the tests: a Debian trixie root (debootstrap) with trixie's own binary
# packages postgresql-17, postgresql-server-dev-17 and postgresql-17-pgvector, and what building
# and testing tributary inside it needs (clang, python3-psycopg, python3-pytest, sudo). bookworm
# has no PostgreSQL 17 and the archive no longer serves trixie's source package (../shared/
# PLATFORM.md), but it serves trixie's binary packages; they are installed into the root only,
# never on the host (mixing suites would upgrade the host's libc). The host's Rust toolchain and
# this checkout are bind-mounted in when something runs inside (scripts/chroot.sh).
#
#   scripts/pg17_chroot.sh      prints the root's path on its last line
#
# The root is $TRIBUTARY_PG_CACHE/pg17-trixie (default /var/cache/tributary/pg17-trixie), made
# once (about 5 minutes) and then reused; a stamp written last marks it complete, and an
# incomplete one is unmounted, removed and made again. Needs root or sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/chroot.sh
cache=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}
root=$cache/pg17-trixie
stamp=$root/.tributary-built
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
log() { printf '\n== %s\n' "$*" >&2; }
packages=(postgresql-17 postgresql-server-dev-17 postgresql-17-pgvector build-essential clang
  libclang-dev pkg-config python3 python3-psycopg python3-pytest sudo ca-certificates)

if [ -f "$stamp" ] && [ -x "$root/usr/lib/postgresql/17/bin/pg_config" ]; then
  log "PostgreSQL 17: Debian trixie root cached in $root ($(cat "$stamp"))"
  echo "$root"
  exit 0
fi

if ! dpkg-query -W -f='${Status}' debootstrap 2>/dev/null | grep -q 'install ok installed'; then
  log "apt-get install debootstrap"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
# The machine's own Debian archive (deb822 or one-line sources).
uri=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=$(awk '$1 == "deb" && !/security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$uri" ] || { echo "pg17_chroot.sh: no Debian archive URI in /etc/apt/sources.list(.d)" >&2; exit 1; }

$SUDO mkdir -p "$cache"
if [ -e "$root" ]; then
  log "PostgreSQL 17: an incomplete trixie root in $root: unmounting and removing it"
  chroot_umount "$root"
  if awk -v r="$(readlink -f "$root")/" 'index($2, r) == 1 {found = 1} END {exit !found}' /proc/mounts; then
    echo "pg17_chroot.sh: something is still mounted under $root; not removing it" >&2; exit 1
  fi
  $SUDO rm -rf "$root"
fi
started=$(date +%s)
log "PostgreSQL 17: debootstrap --variant=minbase trixie $root $uri"
$SUDO debootstrap --variant=minbase trixie "$root" "$uri" >"$cache/pg17-debootstrap.log" 2>&1 \
  || { tail -30 "$cache/pg17-debootstrap.log"; exit 1; }
# No services start inside, and Debian's postgresql-common makes no cluster of its own.
printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$root/usr/sbin/policy-rc.d" >/dev/null
$SUDO chmod +x "$root/usr/sbin/policy-rc.d"
$SUDO mkdir -p "$root/etc/postgresql-common/createcluster.d"
echo "create_main_cluster = false" | $SUDO tee "$root/etc/postgresql-common/createcluster.d/tributary.conf" >/dev/null
log "PostgreSQL 17: apt-get install ${packages[*]} (inside the root)"
chroot_run "$root" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${packages[*]} >/dev/null" \
  || { echo "pg17_chroot.sh: installing the packages in the trixie root failed" >&2; exit 1; }
version=$(chroot_run "$root" /usr/lib/postgresql/17/bin/pg_config --version)
log "PostgreSQL 17: $version in $root ($(( $(date +%s) - started )) s)"
echo "$version, Debian trixie root" | $SUDO tee "$stamp" >/dev/null
echo "$root"
