#!/usr/bin/env bash
# Why is the fp16 graph slow on CUDA with real texts (varied input shapes) and fast at fixed
# shapes? One session per run of tools/bench `sweep`, three points of the same batch size over the
# same texts: if each new (batch, tokens) shape costs once (kernel selection, lazy module loading),
# the second and third points, which see the same shapes again, are fast. Also with
# CUDA_MODULE_LOADING=EAGER (every CUDA module loaded at start instead of at first use), with ORT's
# fused and TensorRT flash attention kernels off (ORT_DISABLE_FUSED_ATTENTION=1
# ORT_DISABLE_TRT_FLASH_ATTENTION=1: the unfused attention path), with input lengths bucketed
# (`sweep --buckets on`, only when this tributary-bench has that option), and the fp32 graph the
# same way for contrast. After `run.sh receive` with every part (scripts/gpu/README.md).
#
# When the bench has --buckets (its default is on), every variant but "buckets on" passes
# --buckets off, so they measure what they measured before bucketing existed.
# Knobs: PROBE_PROVIDER (cuda), PROBE_ROWS (2048), PROBE_BATCH (1024), PROBE_BUDGET (16384),
# PROBE_TIMEOUT (seconds per variant, 90), PROBE_UNTIL (epoch seconds: no variant starts after it,
# and none runs past it), PROBE_CSV (append the bench's CSV lines there), OUT (probe.log's folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BENCH:-target/release/tributary-bench}
CUDA_DIRS=${CUDA_LIBRARY_PATH:-$(FIND_CUDA_SITE_PACKAGES=$(ls -d /opt/torch/.venv/lib/python3*/site-packages 2>/dev/null | paste -sd:) bash scripts/gpu/find_cuda.sh 2>/dev/null)}
C=(--ort ort/lib-gpu/libonnxruntime.so.1.31.1 --texts .gpu/texts/debian.txt --model-dir ort/models/all-MiniLM-L6-v2 --provider "${PROBE_PROVIDER:-cuda}" --rows "${PROBE_ROWS:-2048}" --batches "${PROBE_BATCH:-1024},${PROBE_BATCH:-1024},${PROBE_BATCH:-1024}")
[ -n "$CUDA_DIRS" ] && C+=(--cuda-library-path "$CUDA_DIRS")
[ -n "${PROBE_CSV:-}" ] && C+=(--csv "$PROBE_CSV")
OUTD=${OUT:-/tmp/probe}; mkdir -p "$OUTD"
UNTIL=${PROBE_UNTIL:-0}
# the bench's option parser takes any --key value, so ask the binary whether it knows --buckets
if grep -a -q -- '--buckets' "$B"; then BUCKETS=1; OFF=(--buckets off); else BUCKETS=0; OFF=(); fi
echo "probe: $B; --buckets $([ $BUCKETS = 1 ] && echo supported || echo 'not in this tributary-bench: the bucketed variant is skipped')"
run() { # label graph budget [bench options ...] [-- VAR=value ...]
  local label=$1 graph=$2 budget=$3 limit=${PROBE_TIMEOUT:-90} t now; shift 3
  local opts=() envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ "${1:-}" = -- ] && { shift; envs=("$@"); }
  now=$(date +%s)
  if [ "$UNTIL" -gt 0 ]; then
    [ $(( UNTIL - now )) -lt 15 ] && { echo "### $label: skipped (probe time box)"; return; }
    [ $(( UNTIL - now )) -lt "$limit" ] && limit=$(( UNTIL - now ))
  fi
  echo "### $label"
  t=$(date +%s%N)
  env "${envs[@]}" timeout "$limit" "$B" sweep "${C[@]}" --budget "$budget" --graph "$graph" --label "$label" "${opts[@]}" 2>>"$OUTD/probe.log" | grep -v '^|---'
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "(cut after $limit s: the points above are those finished)"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && echo "(exit status $rc: $(tail -n 1 "$OUTD/probe.log"))"
  echo "($(( ($(date +%s%N) - t) / 1000000 )) ms in all, the session's creation included)"
  # the bench's line per point: input shapes the session has run, time spent warming them
  grep -a "^$label: " "$OUTD/probe.log" | tail -n 3 | sed 's/^/  /'
}
BUDGET=${PROBE_BUDGET:-16384}
if grep -a -q -- '--warm' "$B"; then WARM_OFF=(--warm off); else WARM_OFF=(); fi
# Most telling first (the sitting's probe step has about two minutes): the fp16 graph with shape
# buckets, every shape warmed first (the bench's default) and not; the fp32 graph the same way;
# then the fp16 graph as it ran before buckets, and with every CUDA module loaded at start.
[ $BUCKETS = 1 ] && run "fp16 buckets warmed" fp16 "$BUDGET" --buckets on
[ $BUCKETS = 1 ] && run "fp16 buckets not warmed" fp16 "$BUDGET" --buckets on "${WARM_OFF[@]}"
[ $BUCKETS = 1 ] && run "fp32 buckets warmed" fp32 "$BUDGET" --buckets on
run "fp32" fp32 "$BUDGET" "${OFF[@]}"
run "fp16" fp16 "$BUDGET" "${OFF[@]}"
run "fp16 CUDA_MODULE_LOADING=EAGER" fp16 "$BUDGET" "${OFF[@]}" -- CUDA_MODULE_LOADING=EAGER
echo "probe.log (stderr of the runs), last lines:"
tail -n 8 "$OUTD/probe.log"
