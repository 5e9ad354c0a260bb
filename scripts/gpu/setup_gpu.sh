#!/usr/bin/env bash
# The optional GPU part of scripts/setup.sh (run by it when TRIBUTARY_GPU=1, or on its own):
#   1. downloads the onnxruntime-gpu 1.31.1 wheel (CUDA 13 + cuDNN 9 build, ~256 MB) once into
#      a cache (.gpu/cache, or $TRIBUTARY_GPU_CACHE) with the venv's pip;
#   2. extracts libonnxruntime.so.1.31.1 (the GPU build), libonnxruntime_providers_shared.so,
#      libonnxruntime_providers_cuda.so (~284 MB) and libonnxruntime_providers_tensorrt.so into
#      ort/lib-gpu/ (git-ignored);
#   3. looks for the CUDA 13 / cuDNN 9 libraries on this machine (scripts/gpu/find_cuda.sh) and
#      prints the settings to use.
# Idempotent: nothing is downloaded or extracted again when ort/lib-gpu/ is complete.
# Nothing here needs a GPU; without one the GPU library still loads and runs the CPU provider.
# Usage: scripts/gpu/setup_gpu.sh        (needs .venv from scripts/setup.sh step 4)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
ORT_VERSION=${ORT_VERSION:-1.31.1}
CACHE=${TRIBUTARY_GPU_CACHE:-$ROOT/.gpu/cache}
LIBS=("libonnxruntime.so.$ORT_VERSION" libonnxruntime_providers_shared.so libonnxruntime_providers_cuda.so libonnxruntime_providers_tensorrt.so)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || { echo "setup_gpu: no $PY (run scripts/setup.sh first)" >&2; exit 1; }

complete=1
for f in "${LIBS[@]}"; do [ -s "ort/lib-gpu/$f" ] || complete=0; done
if [ $complete = 0 ]; then
  mkdir -p "$CACHE" ort/lib-gpu
  whl=$(ls "$CACHE"/onnxruntime_gpu-"$ORT_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$whl" ]; then
    echo "setup_gpu: downloading onnxruntime-gpu==$ORT_VERSION into $CACHE"
    started=$(date +%s.%N)
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$CACHE" "onnxruntime-gpu==$ORT_VERSION"
    whl=$(ls "$CACHE"/onnxruntime_gpu-"$ORT_VERSION"-*.whl | head -n1)
    echo "setup_gpu: $(basename "$whl"): $(du -m "$whl" | cut -f1) MB in $(echo "$(date +%s.%N) - $started" | bc) s"
  fi
  "$PY" - "$whl" "$ROOT/ort/lib-gpu" "$ORT_VERSION" <<'PY'
import os, sys, zipfile
whl, out, ver = sys.argv[1:]
want = {f"libonnxruntime.so.{ver}", "libonnxruntime_providers_shared.so",
        "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_tensorrt.so"}
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        base = os.path.basename(info.filename)
        if info.filename.startswith("onnxruntime/capi/") and base in want:
            tmp = os.path.join(out, base + ".tmp")
            with z.open(info) as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.replace(tmp, os.path.join(out, base))
            print(f"setup_gpu: ort/lib-gpu/{base} ({info.file_size >> 20} MiB)")
PY
  for f in "${LIBS[@]}"; do [ -s "ort/lib-gpu/$f" ] || { echo "setup_gpu: $f is not in $whl" >&2; exit 1; }; done
  ln -sf "libonnxruntime.so.$ORT_VERSION" ort/lib-gpu/libonnxruntime.so
else
  echo "setup_gpu: ort/lib-gpu is complete (onnxruntime-gpu $ORT_VERSION)"
fi

cuda_dirs=$(bash scripts/gpu/find_cuda.sh) && found=1 || found=0
echo
echo "ONNX Runtime with the CUDA provider: set (as a superuser, then reconnect)"
echo "  tributary.ort_library = '$ROOT/ort/lib-gpu/libonnxruntime.so.$ORT_VERSION'"
if [ -n "$cuda_dirs" ]; then
  echo "  tributary.cuda_library_path = '$cuda_dirs'"
fi
if [ $found = 0 ]; then
  echo "No complete CUDA 13 / cuDNN 9 set or no NVIDIA driver here (see find_cuda above): the GPU library"
  echo "still runs the CPU provider; tributary.execution_provider = auto falls back to it."
fi
