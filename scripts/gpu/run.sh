#!/usr/bin/env bash
# The GPU check. Runs ON the GPU machine, in the repository root, one phase per `run` call
# (a call may run 10 minutes at most); scripts/gpu/prepare.sh (run here first) packs the inputs
# and prints the exact calls. Every phase writes Markdown and CSV under $OUT and keeps a
# cumulative copy in .gpu/results/ (so each $OUT also holds report.md / sweep.csv / check.csv with
# everything measured so far in this lease).
#
#   receive       checks the parts carried so far against .gpu/carry/manifest (sha256); when all
#                 are there: unpacks them (tributary-bench, ort/lib-gpu, all-MiniLM-L6-v2, texts),
#                 generates the bge-base-shaped model (random weights, ort/scripts/random_bert.py)
#                 and records the machine (GPU, driver, cores, CUDA libraries found)
#   check         per-row cosine of the GPU (fp16 graph, and fp32) vs CPU fp32 on real texts, both
#                 models; must be >= 0.999 for every row (exit status 1 otherwise); plus
#                 `auto` picking CUDA, and IoBinding off agreeing
#   sweep-minilm  throughput of all-MiniLM-L6-v2 on the GPU: batch sizes x real texts (IoBinding
#   sweep-bge     on and off) and --fixed-tokens lengths; the same for bge-base-shaped
#   cpu           the CPU provider on this machine's cores, same texts: the same-run baseline
#   all           check, sweep-minilm, sweep-bge, cpu (for a CPU-only rehearsal; on the GPU
#                 machine use one phase per call)
#
# Knobs (environment): GPU_CHECK_PROVIDER (cuda; `cpu` rehearses everything on a machine without
# a GPU), GPU_CHECK_ROWS (texts per sweep point, 4096), GPU_CHECK_CHECK_ROWS (2000),
# GPU_CHECK_BATCHES (1,8,32,128,512,1024), GPU_CHECK_TOKENS ("16 64 128 256"),
# GPU_CHECK_CPU_ROWS (512), GPU_CHECK_CPU_BATCHES (1,32,128), GPU_CHECK_BUDGET (padded tokens per
# ORT run, 16384), GPU_CHECK_PYTHON (python with onnx + onnxruntime + safetensors for the bge
# export: /opt/torch/.venv/bin/python when present, else .venv/bin/python), CUDA_LIBRARY_PATH
# (default: what scripts/gpu/find_cuda.sh finds), OUT (default /tmp/tributary-gpu-out).
# Rehearsal here: GPU_CHECK_PROVIDER=cpu OUT=/tmp/gpuout GPU_CHECK_ROWS=16 ... bash scripts/gpu/run.sh all
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PHASE=${1:-all}
OUT=${OUT:-/tmp/tributary-gpu-out}
RESULTS=.gpu/results
mkdir -p "$OUT" "$RESULTS"
PROVIDER=${GPU_CHECK_PROVIDER:-cuda}
BENCH=${BENCH:-tools/bench/target/release/tributary-bench}
ORT_LIB=${ORT_LIB:-ort/lib-gpu/libonnxruntime.so.1.31.1}
TEXTS=${GPU_CHECK_TEXTS:-.gpu/texts/debian.txt}
MINILM=ort/models/all-MiniLM-L6-v2
BGE=.gpu/models/bge-base-shaped
ROWS=${GPU_CHECK_ROWS:-4096}
CHECK_ROWS=${GPU_CHECK_CHECK_ROWS:-2000}
BATCHES=${GPU_CHECK_BATCHES:-1,8,32,128,512,1024}
TOKENS=${GPU_CHECK_TOKENS:-16 64 128 256}
CPU_ROWS=${GPU_CHECK_CPU_ROWS:-512}
CPU_BATCHES=${GPU_CHECK_CPU_BATCHES:-1,32,128}
BUDGET=${GPU_CHECK_BUDGET:-16384}
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then PY=$GPU_CHECK_PYTHON
elif [ -x /opt/torch/.venv/bin/python ]; then PY=/opt/torch/.venv/bin/python
else PY=.venv/bin/python; fi
# A phase stops starting new sweeps after this many seconds (a call is killed at 600).
SOFT_LIMIT=${GPU_CHECK_SOFT_LIMIT:-480}
STARTED=$(date +%s)
FAILED=0

say() { printf '%s\n' "$*" | tee -a "$RESULTS/$PHASE.md"; }
elapsed() { echo $(( $(date +%s) - STARTED )); }

# Copies the results so far to $OUT, with report.md = every phase's Markdown in order.
publish() {
  {
    echo "# tributary GPU check ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    for p in machine check sweep-minilm sweep-bge cpu; do
      [ -f "$RESULTS/$p.md" ] && { echo; cat "$RESULTS/$p.md"; }
    done
  } > "$RESULTS/report.md"
  cp "$RESULTS"/*.md "$RESULTS"/*.csv "$RESULTS"/*.log "$OUT/" 2>/dev/null || true
}

unpack_tool() { # decompresses xz from stdin to stdout: xz if installed, else python's lzma
  if command -v xz >/dev/null; then xz -dc
  else "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 20)'
  fi
}

receive() {
  local manifest=.gpu/carry/manifest missing=0 bad=0 name sum
  [ -f "$manifest" ] || { echo "receive: no $manifest: carry it with every part (see scripts/gpu/prepare.sh)"; return 1; }
  while read -r kind name sum; do
    [ "$kind" = part ] || continue
    if [ ! -f ".gpu/carry/$name" ]; then echo "receive: $name missing"; missing=$((missing + 1))
    elif [ "$(sha256sum ".gpu/carry/$name" | cut -d' ' -f1)" != "$sum" ]; then echo "receive: $name BAD sha256"; bad=$((bad + 1))
    else echo "receive: $name ok"; fi
  done < "$manifest"
  [ $bad = 0 ] || return 1
  [ $missing = 0 ] || { echo "receive: $missing part(s) still to carry"; return 0; }
  local archive; archive=$(awk '$1 == "archive" {print $2}' "$manifest")
  if [ "$(cat .gpu/unpacked 2>/dev/null)" != "$archive" ]; then
    echo "receive: all parts here; unpacking"
    [ "$(cat .gpu/carry/part.* | sha256sum | cut -d' ' -f1)" = "$archive" ] || { echo "receive: archive sha256 mismatch"; return 1; }
    cat .gpu/carry/part.* | unpack_tool | tar -xf - || { echo "receive: unpacking failed"; return 1; }
    echo "$archive" > .gpu/unpacked
  else
    echo "receive: already unpacked"
  fi
  machine
  make_bge
}

make_bge() {
  if [ -f "$BGE/tributary.json" ]; then return 0; fi
  if ! "$PY" -c 'import numpy, onnx, onnxruntime, safetensors, sympy' 2>/dev/null; then
    echo "bge-base-shaped: $PY lacks numpy/onnx/onnxruntime/safetensors/sympy; that model is skipped"
    return 0
  fi
  local t=$(date +%s)
  "$PY" ort/scripts/random_bert.py --out .gpu/models --name bge-base-shaped \
    && echo "bge-base-shaped: generated and exported in $(( $(date +%s) - t )) s with $("$PY" -c 'import onnxruntime; print("onnxruntime", onnxruntime.__version__)')" \
    || echo "bge-base-shaped: export FAILED (see above); that model is skipped"
}

machine() {
  local f="$RESULTS/machine.md"
  {
    echo "## Machine"
    echo '```'
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv 2>&1
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores visible"
    echo "bench: $BENCH; onnx runtime: $ORT_LIB; provider asked: $PROVIDER"
    echo "cuda libraries (scripts/gpu/find_cuda.sh):"
    cuda_dirs 2>&1 | sed 's/^/  /'
    echo '```'
  } > "$f"
  cat "$f"
}

# The CUDA 13 / cuDNN 9 directories: $CUDA_LIBRARY_PATH, else find_cuda.sh looking first in
# /opt/torch/.venv's site-packages (nvidia/*/lib from the nvidia-* pip packages).
cuda_dirs() {
  if [ -n "${CUDA_LIBRARY_PATH:-}" ]; then echo "$CUDA_LIBRARY_PATH"; return; fi
  FIND_CUDA_SITE_PACKAGES=$(ls -d /opt/torch/.venv/lib/python3*/site-packages 2>/dev/null | paste -sd:) \
    bash scripts/gpu/find_cuda.sh || true
}

ready() {
  local f
  for f in "$BENCH" "$ORT_LIB" "$MINILM/tributary.json" "$TEXTS"; do
    [ -e "$f" ] || { echo "run.sh: missing $f: run \`receive\` with every part first"; exit 1; }
  done
  [ -f "$RESULTS/machine.md" ] || machine >/dev/null
  [ -f "$BGE/tributary.json" ] || make_bge
  CUDA_DIRS=$(cuda_dirs 2>/dev/null)
  COMMON=(--ort "$ORT_LIB" --texts "$TEXTS")
  [ -n "$CUDA_DIRS" ] && COMMON+=(--cuda-library-path "$CUDA_DIRS")
  : > "$RESULTS/$PHASE.md"
}

models() { # name dir pairs that exist
  echo "minilm $MINILM"
  [ -f "$BGE/tributary.json" ] && echo "bge-base-shaped $BGE"
}

# One check; its output lines go to the phase's Markdown, a failed threshold marks the run failed.
one_check() { # label args...
  local label=$1; shift
  say ""; say "\`check $label\`"; say '```'
  "$BENCH" check "${COMMON[@]}" --rows "$CHECK_ROWS" --label "$label" --csv "$RESULTS/check.csv" "$@" 2>&1 | tee -a "$RESULTS/$PHASE.md"
  local rc=${PIPESTATUS[0]}
  say '```'
  [ "$rc" = 0 ] || { say "**FAILED** (exit status $rc)"; FAILED=1; }
}

check() {
  ready
  say "## Correctness: $PROVIDER vs CPU fp32, per-row cosine on real texts (threshold 0.999)"
  local rows name dir
  while read -r name dir; do
    # bge-base-shaped costs ~8x MiniLM per token on the CPU reference: a quarter of the rows.
    rows=$CHECK_ROWS; [ "$name" = minilm ] || rows=$(( (CHECK_ROWS + 3) / 4 ))
    CHECK_ROWS=$rows one_check "$name $PROVIDER fp16" --model-dir "$dir" --provider "$PROVIDER" --graph fp16
    CHECK_ROWS=$rows one_check "$name $PROVIDER fp32" --model-dir "$dir" --provider "$PROVIDER" --graph fp32
  done < <(models)
  one_check "minilm $PROVIDER fp16 io-binding off" --model-dir "$MINILM" --provider "$PROVIDER" --graph fp16 --io-binding off
  # `auto` must pick the GPU where there is one (the device session line says which it got).
  CHECK_ROWS=64 one_check "minilm auto" --model-dir "$MINILM" --provider auto
  if [ "$PROVIDER" = cuda ] && ! sed -n '/^`check minilm auto`/,$p' "$RESULTS/$PHASE.md" | grep -q 'device session: provider cuda'; then
    say "**FAILED**: \`auto\` did not pick CUDA (see its device session line)"; FAILED=1
  fi
}

# One sweep unless the phase is past its soft limit.
one_sweep() { # label args...
  local label=$1; shift
  if [ "$(elapsed)" -ge "$SOFT_LIMIT" ]; then say "skipped \`$label\`: phase past ${SOFT_LIMIT} s"; return; fi
  say ""; say "\`sweep $label\` ($*)"
  local t=$(date +%s)
  "$BENCH" sweep "${COMMON[@]}" --label "$label" --csv "$RESULTS/sweep.csv" "$@" 2>>"$RESULTS/$PHASE.log" | tee -a "$RESULTS/$PHASE.md"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { say "**FAILED** (exit status $rc): $(tail -n 2 "$RESULTS/$PHASE.log")"; FAILED=1; }
  say "($(( $(date +%s) - t )) s)"
}

sweep_model() { # name dir
  local name=$1 dir=$2 k
  ready
  [ -f "$dir/tributary.json" ] || { say "no $dir: skipped"; return; }
  say "## Throughput: $name on $PROVIDER (fp16 graph unless said), $ROWS texts per point, budget $BUDGET padded tokens per run"
  local base=(--model-dir "$dir" --provider "$PROVIDER" --rows "$ROWS" --batches "$BATCHES" --budget "$BUDGET")
  one_sweep "$name texts" "${base[@]}" --graph fp16 --io-binding on
  one_sweep "$name texts io-binding off" "${base[@]}" --graph fp16 --io-binding off
  for k in $TOKENS; do
    one_sweep "$name ${k} tokens" "${base[@]}" --graph fp16 --io-binding on --fixed-tokens "$k"
  done
  if [ "$name" = minilm ]; then
    one_sweep "$name texts fp32" "${base[@]}" --graph fp32 --io-binding on
    one_sweep "$name texts budget 2048" --model-dir "$dir" --provider "$PROVIDER" --rows "$ROWS" --batches "$BATCHES" --budget 2048 --graph fp16
    one_sweep "$name texts budget 65536" --model-dir "$dir" --provider "$PROVIDER" --rows "$ROWS" --batches "$BATCHES" --budget 65536 --graph fp16
  fi
}

cpu() {
  ready
  say "## Same-run baseline: CPU provider, fp32 graph, $(nproc) cores (ORT's default threads), $CPU_ROWS texts per point"
  one_sweep "minilm cpu texts" --model-dir "$MINILM" --provider cpu --graph fp32 --rows "$CPU_ROWS" --batches "$CPU_BATCHES" --budget "$BUDGET"
  one_sweep "minilm cpu 128 tokens" --model-dir "$MINILM" --provider cpu --graph fp32 --rows "$CPU_ROWS" --batches 32 --budget "$BUDGET" --fixed-tokens 128
  if [ -f "$BGE/tributary.json" ]; then
    one_sweep "bge-base-shaped cpu texts" --model-dir "$BGE" --provider cpu --graph fp32 --rows $(( (CPU_ROWS + 3) / 4 )) --batches "$CPU_BATCHES" --budget "$BUDGET"
  fi
}

case "$PHASE" in
  receive) receive; rc=$? ;;
  check) check ;;
  sweep-minilm) sweep_model minilm "$MINILM" ;;
  sweep-bge) sweep_model bge-base-shaped "$BGE" ;;
  cpu) cpu ;;
  all)
    for PHASE in check sweep-minilm sweep-bge cpu; do
      STARTED=$(date +%s)
      case $PHASE in
        check) check ;; sweep-minilm) sweep_model minilm "$MINILM" ;; sweep-bge) sweep_model bge-base-shaped "$BGE" ;; cpu) cpu ;;
      esac
    done ;;
  *) echo "usage: scripts/gpu/run.sh receive|check|sweep-minilm|sweep-bge|cpu|all" >&2; exit 2 ;;
esac
publish
echo "run.sh: results in $OUT ($(ls "$OUT" | tr '\n' ' '))"
[ "$PHASE" = receive ] && exit "${rc:-0}"
exit $FAILED
