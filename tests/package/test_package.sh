#!/usr/bin/env bash
# The Debian packages, tested as a user installs them (scripts/test.sh's package step; as root or
# with sudo, after scripts/setup.sh):
#   1. builds PostgreSQL 17's package of this checkout and of the previous release
#      (scripts/package.sh --majors 17 [--previous]; the previous one is cached by commit);
#   2. inside PostgreSQL 17's Debian trixie root (scripts/pg17_chroot.sh): installs, uses, updates
#      and purges them with apt (tests/package/in_root.sh). Setup's own tributary files in the root
#      (its runtime and models, the test steps' builds) are moved aside first and put back at the
#      end, also on an interrupt, so the root ends as it was;
#   3. checks the file list (dpkg-deb -c), the fields (dpkg-deb -f) and the copyright file of
#      each package of this version under target/packages (17's always; 15, 16 and 18 where
#      scripts/package.sh built them: it says which it checked).
# Prints TAP lines (ok N / not ok N); exits 1 if any check failed.
#
# TRIBUTARY_PACKAGE_PROFILE (scripts/package.sh) chooses the build of the packages it installs; the
# test command sets debug (the build its golden step made of the same sources).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/chroot.sh
source scripts/chroot.sh
PG17_ROOT=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg17-trixie
ASIDE=$PG17_ROOT/var/cache/tributary-package-test-aside
pkg=postgresql-17-tributary
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }

[ -f "$PG17_ROOT/.tributary-built" ] || { not_ok "PostgreSQL 17's trixie root exists ($PG17_ROOT; scripts/setup.sh)"; exit 1; }

# Setup's tributary files in the root, moved to $ASIDE (same file system: a rename) and back.
put_back() {
  [ -f "$ASIDE/.list" ] || return 0
  local rel
  while IFS= read -r rel; do
    [ -e "$ASIDE$rel" ] || [ -L "$ASIDE$rel" ] || continue
    if [ -e "$PG17_ROOT$rel" ]; then echo "# not put back, something is in its place: $rel"; continue; fi
    $SUDO mkdir -p "$(dirname "$PG17_ROOT$rel")"
    $SUDO mv "$ASIDE$rel" "$PG17_ROOT$rel"
  done <"$ASIDE/.list"
  $SUDO rm -rf "$ASIDE"
}
move_aside() {
  local p rel
  $SUDO mkdir -p "$ASIDE"
  find "$PG17_ROOT/usr" -name '*tributary*' -prune | while IFS= read -r p; do
    rel=${p#"$PG17_ROOT"}
    echo "$rel" | $SUDO tee -a "$ASIDE/.list" >/dev/null
    $SUDO mkdir -p "$(dirname "$ASIDE$rel")"
    $SUDO mv "$p" "$ASIDE$rel"
  done
}
purge_in_root() {  # a package left installed by an interrupted run
  if $SUDO chroot "$PG17_ROOT" dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q ' installed'; then
    chroot_run "$PG17_ROOT" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "$pkg" >/dev/null
  fi
}
cleanup() {
  purge_in_root
  put_back
  chroot_umount "$PG17_ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. The packages.
t0=$(date +%s)
new=$(bash scripts/package.sh --majors 17 | tail -1)
if [ -f "$new" ]; then ok "scripts/package.sh --majors 17: $(basename "$new"), $(du -m "$new" | cut -f1) MB ($(( $(date +%s) - t0 )) s)"
else not_ok "scripts/package.sh --majors 17 built a package"; exit 1; fi
t0=$(date +%s)
old=$(bash scripts/package.sh --majors 17 --previous | tail -1)
if [ -f "$old" ]; then ok "scripts/package.sh --majors 17 --previous: $(basename "$old") ($(( $(date +%s) - t0 )) s)"
else not_ok "scripts/package.sh --majors 17 --previous built a package"; exit 1; fi
version=$(dpkg-deb -f "$new" Version); version=${version%-1}

# 2. In the trixie root: from an interrupted run, a package to purge and files to put back; then
# setup's files aside, the user's steps, and setup's files back.
exec 9>"${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg17-trixie.package.lock"
flock 9  # scripts/package.sh's build in the root waits (chroot_run unmounts what others mounted)
purge_in_root
put_back
move_aside
out=$(mktemp /tmp/tributary-package-test.XXXXXX)
chroot_run "$PG17_ROOT" bash "$ROOT/tests/package/in_root.sh" "$new" "$old" >"$out" 2>&1
rc_in=$?
while IFS= read -r line; do  # its checks, numbered on with this script's
  case "$line" in
    "ok "*) ok "${line#ok * - }" ;;
    "not ok "*) not_ok "${line#not ok * - }" ;;
    *) echo "$line" ;;
  esac
done <"$out"
rm -f "$out"
[ "$rc_in" = 0 ] || [ "$failed" -gt 0 ] || not_ok "tests/package/in_root.sh exited with $rc_in"
purge_in_root
put_back
left=$(find "$PG17_ROOT/usr" -name '*tributary*' -prune | sed "s|^$PG17_ROOT||" | sort)
if [ -f "$ASIDE/.list" ] || [ -e "$ASIDE" ]; then not_ok "setup's tributary files put back in the root ($ASIDE remains)"
else ok "setup's tributary files put back in the root ($(echo "$left" | grep -c .) paths under /usr)"; fi

# 3. Each package of this version: its files, fields and copyright.
check_deb() {  # check_deb MAJOR DEB
  local m=$1 deb=$2 files want f fields copyright problems=() dep sqls
  files=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|') || { not_ok "dpkg-deb -c $deb"; return; }
  want=(
    "/usr/lib/postgresql/$m/lib/tributary.so"
    "/usr/lib/postgresql/$m/lib/tributary/libonnxruntime.so.1.31.1"
    "/usr/lib/postgresql/$m/lib/tributary/libonnxruntime.so"
    "/usr/lib/postgresql/$m/lib/tributary/libonnxruntime_providers_shared.so"
    "/usr/share/postgresql/$m/extension/tributary.control"
    "/usr/share/postgresql/$m/extension/tributary--$version.sql"
    "/usr/share/postgresql/$m/tributary/models/all-MiniLM-L6-v2/model.onnx"
    "/usr/share/postgresql/$m/tributary/models/all-MiniLM-L6-v2/tokenizer.json"
    "/usr/share/postgresql/$m/tributary/models/all-MiniLM-L6-v2/tributary.json"
    "/usr/share/doc/postgresql-$m-tributary/copyright"
    "/usr/share/doc/postgresql-$m-tributary/changelog.Debian.gz"
    "/usr/share/doc/postgresql-$m-tributary/onnxruntime/LICENSE"
  )
  # Every update script of this checkout (sql/tributary--A--B.sql).
  sqls=$(cd sql && ls tributary--*--*.sql)
  for f in $sqls; do want+=("/usr/share/postgresql/$m/extension/$f"); done
  for f in "${want[@]}"; do grep -qxF "$f" <<<"$files" || problems+=("missing $f"); done
  # Nothing outside the three directories a PostgreSQL extension package of major m owns.
  f=$(grep -vE "^/(|usr/?|usr/lib/?|usr/lib/postgresql/?|usr/lib/postgresql/$m/?|usr/share/?|usr/share/postgresql/?|usr/share/postgresql/$m/?|usr/share/doc/?|usr/lib/postgresql/$m/lib/.*|usr/share/postgresql/$m/(extension|tributary)(/.*)?|usr/share/doc/postgresql-$m-tributary(/.*)?)$" <<<"$files" || true)
  [ -z "$f" ] || problems+=("outside its directories: $(echo $f)")
  [ "$(dpkg-deb -f "$deb" Package)" = "postgresql-$m-tributary" ] || problems+=("Package: $(dpkg-deb -f "$deb" Package)")
  [ "$(dpkg-deb -f "$deb" Version)" = "$version-1" ] || problems+=("Version: $(dpkg-deb -f "$deb" Version)")
  [ "$(dpkg-deb -f "$deb" Architecture)" = amd64 ] || problems+=("Architecture: $(dpkg-deb -f "$deb" Architecture)")
  dep=$(dpkg-deb -f "$deb" Depends)
  for f in "postgresql-$m" "postgresql-$m-pgvector (>= 0.7.0)" "libc6 (>= 2."; do
    [[ ", $dep" == *", $f"* ]] || problems+=("Depends lacks $f: $dep")
  done
  copyright=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/share/doc/postgresql-$m-tributary/copyright")
  for f in "License: Apache-2.0" "License: MIT" "Files: usr/share/postgresql/$m/tributary/models/all-MiniLM-L6-v2/*" \
    "Files: usr/lib/postgresql/$m/lib/tributary/*" " pgrx 0.18.0: MIT" " ort 2.0.0-rc.15: " " tokenizers 0.22.2: " "License: BSD-2-Clause" " Oniguruma LICENSE"; do
    grep -qF -- "$f" <<<"$copyright" || problems+=("copyright lacks '$f'")
  done
  dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/share/postgresql/$m/extension/tributary.control" \
    | grep -qx "default_version = '$version'" || problems+=("tributary.control's default_version is not $version")
  if [ ${#problems[@]} = 0 ]; then
    ok "${deb#"$ROOT"/target/packages/}: $(grep -c . <<<"$files") entries, $(du -m "$deb" | cut -f1) MB; Depends: $dep"
  else
    not_ok "${deb#"$ROOT"/target/packages/}"; printf '#   %s\n' "${problems[@]}"
  fi
}
# The one tested above (built with TRIBUTARY_PACKAGE_PROFILE), and the packages to ship
# (scripts/package.sh's release builds) of this version that exist.
check_deb 17 "$new"
checked=() absent=()
for m in 15 16 17 18; do
  deb=$ROOT/target/packages/postgresql-$m-tributary_${version}-1_amd64.deb
  [ "$deb" = "$new" ] && { checked+=("$m"); continue; }
  if [ -f "$deb" ]; then check_deb "$m" "$deb"; checked+=("$m"); else absent+=("$m"); fi
done
echo "# release packages checked (file list, fields, copyright) in target/packages: PostgreSQL ${checked[*]:-none}${absent:+; not built (bash scripts/package.sh builds them): ${absent[*]}}"
echo "# $n checks, $failed failed"
[ "$failed" = 0 ]
