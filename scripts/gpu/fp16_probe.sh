#!/usr/bin/env bash
# Why is the fp16 graph slow on CUDA with real texts (varied input shapes) and fast at fixed
# shapes? One session per run of tools/bench `sweep`, three points of the same batch size over the
# same texts: if each new (batch, tokens) shape costs once (kernel selection, lazy module loading),
# the second and third points, which see the same shapes again, are fast. Also with
# CUDA_MODULE_LOADING=EAGER (every CUDA module loaded at start instead of at first use), and the
# fp32 graph the same way for contrast. After `run.sh receive` with every part (scripts/gpu/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=target/release/tributary-bench
CUDA_DIRS=$(FIND_CUDA_SITE_PACKAGES=$(ls -d /opt/torch/.venv/lib/python3*/site-packages 2>/dev/null | paste -sd:) bash scripts/gpu/find_cuda.sh 2>/dev/null)
C=(--ort ort/lib-gpu/libonnxruntime.so.1.31.1 --texts .gpu/texts/debian.txt --model-dir ort/models/all-MiniLM-L6-v2 --provider "${PROBE_PROVIDER:-cuda}" --rows "${PROBE_ROWS:-2048}" --batches "${PROBE_BATCH:-1024},${PROBE_BATCH:-1024},${PROBE_BATCH:-1024}" --budget "${PROBE_BUDGET:-2048}")
[ -n "$CUDA_DIRS" ] && C+=(--cuda-library-path "$CUDA_DIRS")
OUTD=${OUT:-/tmp/probe}; mkdir -p "$OUTD"
run() { # label graph [VAR=value ...]
  local label=$1 graph=$2; shift 2
  echo "### $label"
  local t=$(date +%s%N)
  env "$@" "$B" sweep "${C[@]}" --graph "$graph" --label "$label" 2>>"$OUTD/probe.log" | grep -v '^|---'
  echo "($(( ($(date +%s%N) - t) / 1000000 )) ms in all, the session's creation included)"
}
run "fp16" fp16
run "fp16 CUDA_MODULE_LOADING=EAGER" fp16 CUDA_MODULE_LOADING=EAGER
run "fp32" fp32
PROBE_BUDGET=16384 run "fp16 budget 16384" fp16
tail -n 20 "$OUTD/probe.log"
