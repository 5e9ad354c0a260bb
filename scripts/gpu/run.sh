#!/usr/bin/env bash
# The GPU check. Runs ON the GPU machine, in the repository root, one phase per `run` call
# (a call may run 10 minutes at most); scripts/gpu/prepare.sh (run here first) packs the inputs
# and prints the exact calls. Every phase writes Markdown and CSV under $OUT and keeps a
# cumulative copy in .gpu/results/ (so each $OUT also holds report.md / sweep.csv / check.csv with
# everything measured so far in this lease).
#
#   receive       checks the parts carried so far against .gpu/carry/manifest (sha256) and unpacks
#                 each archive whose parts are all there (once per sha256): part.NN (static:
#                 ort/lib-gpu, the all-MiniLM-L6-v2 ONNX files; then generates the bge-base-shaped
#                 model, random weights, ort/scripts/random_bert.py, and records the machine: GPU,
#                 driver, cores, CUDA libraries found), small.NN (tributary-bench, the texts, the
#                 sentence-transformers model folder), pg.NN (the relocatable PostgreSQL 15 +
#                 pgvector, tributary.so, the libraries it links, into $GPU_CHECK_PG_DIR/root)
#   check         per-row cosine of the GPU (fp16 graph, and fp32) vs CPU fp32 on real texts, both
#                 models; must be >= 0.999 for every row (exit status 1 otherwise); plus
#                 `auto` picking CUDA, and IoBinding off agreeing
#   sweep-minilm  throughput of all-MiniLM-L6-v2 on the GPU: batch sizes x real texts (IoBinding
#   sweep-bge     on and off) and --fixed-tokens lengths; the same for bge-base-shaped
#   cpu           the CPU provider on this machine's cores, same texts: the same-run baseline
#   pg            through PostgreSQL: a throwaway cluster of the relocated PG 15 (unix socket in
#                 $GPU_CHECK_PG_DIR/run, OS user postgres when root: created if missing), CREATE
#                 EXTENSION tributary CASCADE with the GPU ONNX Runtime, then timed
#                 tributary_embed_column on real texts, each in a fresh backend after a 64-row
#                 warm-up, the runs of pg_runs (GPU_CHECK_PG_RUNS): fp32 graph, fp16 graph with
#                 shape buckets, fp16 without (1,024 rows), fp32 without the pipeline, cpu; each
#                 with the split of tributary.sessions (run ms, tokenize wait, read, write ms); a
#                 run whose tributary.* setting this tributary.so lacks is skipped with a line;
#                 cosine of each vs the cpu rows, which also go to .gpu/cpu-rows.tsv for `st`
#   st            scripts/gpu/st_baseline.py with /opt/torch/.venv's python: sentence-transformers
#                 all-MiniLM-L6-v2 on the same texts, fp16 and fp32, batch 128-1024 (~90 s)
#   probe         scripts/gpu/fp16_probe.sh (the fp16 graph's cost per new input shape)
#   sitting       pg, st, probe, check in one call (~520 s; soft limit per step), then a summary
#                 (rows/s of every pg run, the best CUDA run / sentence-transformers' best)
#   all           check, sweep-minilm, sweep-bge, cpu, pg (for a CPU-only rehearsal; on the GPU
#                 machine use one phase per call)
#
# Knobs (environment): GPU_CHECK_PROVIDER (cuda; `cpu` rehearses everything on a machine without
# a GPU), GPU_CHECK_ROWS (texts per sweep point, 4096), GPU_CHECK_CHECK_ROWS (2000),
# GPU_CHECK_BATCHES (1,8,32,128,512,1024), GPU_CHECK_TOKENS ("16 64 128 256"),
# GPU_CHECK_CPU_ROWS (512), GPU_CHECK_CPU_BATCHES (1,32,128), GPU_CHECK_BUDGET (padded tokens per
# ORT run, 16384), GPU_CHECK_PYTHON (python with onnx + onnxruntime + safetensors for the bge
# export: /opt/torch/.venv/bin/python when present, else .venv/bin/python), CUDA_LIBRARY_PATH
# (default: what scripts/gpu/find_cuda.sh finds), OUT (default /tmp/tributary-gpu-out);
# for `pg`: GPU_CHECK_PG_ROWS (rows for the $PROVIDER runs, 16384), GPU_CHECK_PG_CPU_ROWS (4096),
# GPU_CHECK_PG_FP16_ROWS (the fp16-graph run, 1024: about 25 s on an H200),
# GPU_CHECK_PG_FP16_CAP (seconds for an fp16-graph run's timed call, 60), GPU_CHECK_PG_RUNS (the run
# list: lines or `;`-separated runs of label|provider|type|rows|settings|cap, settings as
# space-separated NAME=VALUE of tributary.NAME), GPU_CHECK_PG_BATCH (batch_size, 1024), GPU_CHECK_PG_SET (SQL before each timed run, e.g.
# "SET tributary.max_batch_tokens = 65536;"), GPU_CHECK_PG_DIR (/tmp/tributary-gpu-pg),
# GPU_CHECK_PG_LIBS (`missing`: only the bundled libraries whose soname ldconfig does not know go
# on LD_LIBRARY_PATH; `all`: every one, to rehearse the bundle on a machine that has them all);
# for `st`: GPU_CHECK_ST_PYTHON (/opt/torch/.venv/bin/python), GPU_CHECK_ST_ROWS (= the pg rows),
# GPU_CHECK_ST_BATCHES (128,256,512,1024), GPU_CHECK_ST_LIMIT (85 s); for `sitting`:
# GPU_SITTING_LIMIT (520 s), GPU_SITTING_STEPS ("pg st probe check"), GPU_SITTING_PG / _ST /
# _PROBE / _CHECK (each step's soft limit: 200 / 90 / 130 / 120 s); PROBE_* (fp16_probe.sh).
# Rehearsal here: GPU_CHECK_PROVIDER=cpu OUT=/tmp/gpuout GPU_CHECK_ROWS=16 ... bash scripts/gpu/run.sh all
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PHASE=${1:-all}
OUT=${OUT:-/tmp/tributary-gpu-out}
RESULTS=.gpu/results
mkdir -p "$OUT" "$RESULTS"
PROVIDER=${GPU_CHECK_PROVIDER:-cuda}
BENCH=${BENCH:-target/release/tributary-bench}
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
# The `pg` phase: the relocatable PostgreSQL 15 from pg.NN and its throwaway cluster.
PGDIR=${GPU_CHECK_PG_DIR:-/tmp/tributary-gpu-pg}
PGROOT=$PGDIR/root
PG_ROWS=${GPU_CHECK_PG_ROWS:-16384}
PG_CPU_ROWS=${GPU_CHECK_PG_CPU_ROWS:-4096}
PG_FP16_ROWS=${GPU_CHECK_PG_FP16_ROWS:-1024}
PG_BATCH=${GPU_CHECK_PG_BATCH:-1024}
PG_LIBS=${GPU_CHECK_PG_LIBS:-missing}
PG_SET=${GPU_CHECK_PG_SET:-}   # extra SQL run before each timed run, e.g. "SET tributary.max_batch_tokens = 65536;"
PG_FP16_CAP=${GPU_CHECK_PG_FP16_CAP:-60}   # seconds for each fp16-graph run's timed call
PG_GRACE=${GPU_CHECK_PG_GRACE:-60}   # a run started before the soft limit may go on this long past it
PG_PORT=5499
# The `st` phase: sentence-transformers on the same texts (scripts/gpu/st_baseline.py).
ST_MODEL=${GPU_CHECK_ST_MODEL:-.gpu/st-model/all-MiniLM-L6-v2}
ST_ROWS=${GPU_CHECK_ST_ROWS:-$PG_ROWS}
ST_BATCHES=${GPU_CHECK_ST_BATCHES:-128,256,512,1024}
ST_LIMIT=${GPU_CHECK_ST_LIMIT:-85}   # seconds for the whole st_baseline.py run (no new measurement after)
if [ -n "${GPU_CHECK_ST_PYTHON:-}" ]; then ST_PY=$GPU_CHECK_ST_PYTHON
elif [ -x /opt/torch/.venv/bin/python ]; then ST_PY=/opt/torch/.venv/bin/python
else ST_PY=.venv/bin/python; fi
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then PY=$GPU_CHECK_PYTHON
elif [ -x /opt/torch/.venv/bin/python ]; then PY=/opt/torch/.venv/bin/python
else PY=.venv/bin/python; fi
# A phase stops starting new sweeps after this many seconds (a call is killed at 600).
SOFT_LIMIT=${GPU_CHECK_SOFT_LIMIT:-480}
STARTED=$(date +%s)
FAILED=0

say() { printf '%s\n' "$*" | tee -a "$RESULTS/$PHASE.md"; }
elapsed() { echo $(( $(date +%s) - STARTED )); }

# Copies the results so far to $OUT: report.md (every phase's Markdown in order: all the
# numbers), the CSVs (check, sweep, pg, st), pg.log, pg-server.log and logs.txt (every other log
# of .gpu/results); 8 files at most, what a call brings back.
publish() {
  local p f
  {
    echo "# tributary GPU check ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    for p in machine sitting summary pg st probe check sweep-minilm sweep-bge cpu; do
      [ -f "$RESULTS/$p.md" ] && { echo; cat "$RESULTS/$p.md"; }
    done
  } > "$RESULTS/report.md"
  for f in "$RESULTS"/*.log; do
    case ${f##*/} in pg.log|pg-server.log) ;; *) [ -f "$f" ] && { echo "==== ${f##*/}"; tail -n 200 "$f"; } ;; esac
  done > "$RESULTS/logs.txt"
  [ -s "$RESULTS/logs.txt" ] || rm -f "$RESULTS/logs.txt"
  rm -f "$OUT"/*.md "$OUT"/*.csv "$OUT"/*.log "$OUT"/logs.txt
  for f in report.md check.csv sweep.csv pg.csv st.csv pg.log pg-server.log logs.txt; do
    [ -f "$RESULTS/$f" ] && cp "$RESULTS/$f" "$OUT/"
  done
}

unpack_tool() { # decompresses xz from stdin to stdout: xz if installed, else python's lzma
  if command -v xz >/dev/null; then xz -dc
  else "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 20)'
  fi
}

# Unpacks one archive (its parts' names start with PREFIX) into DEST unless the same archive
# (sha256) was unpacked there already. Prints `fresh` as its last line when it did unpack.
unpack_archive() { # manifest-key prefix dest
  local key=$1 prefix=$2 dest=$3 archive mark t
  archive=$(awk -v k="$key" '$1 == k {print $2}' .gpu/carry/manifest)
  case $prefix in part.) mark=.gpu/unpacked ;; *) mark=.gpu/unpacked-${prefix%.} ;; esac
  if [ "$(cat "$mark" 2>/dev/null)" = "$archive" ] && [ "$dest" = . -o -d "$dest" ]; then
    echo "receive: ${prefix}NN already unpacked"; return 0
  fi
  echo "receive: all ${prefix}NN here; unpacking into $dest"
  t=$(date +%s)
  [ "$(cat .gpu/carry/"$prefix"[0-9]* | sha256sum | cut -d' ' -f1)" = "$archive" ] || { echo "receive: ${prefix}NN archive sha256 mismatch"; return 1; }
  mkdir -p "$dest"
  cat .gpu/carry/"$prefix"[0-9]* | unpack_tool | tar -C "$dest" -xf - || { echo "receive: unpacking ${prefix}NN failed"; return 1; }
  echo "$archive" > "$mark"
  echo "receive: ${prefix}NN unpacked in $(( $(date +%s) - t )) s"
}

# The archives of .gpu/carry/manifest (scripts/gpu/prepare.sh): KIND is the manifest keys' prefix
# (KINDarchive, KINDpart lines), PREFIX the parts' names:
#   part.NN  (keys archive/part)            static: ort/lib-gpu, the ONNX model; unpacked into .
#   small.NN (smallarchive/smallpart)       tributary-bench, the texts, the ST model; into .
#   pg.NN    (pgarchive/pgpart)             the relocatable PostgreSQL 15; into $PGROOT
# Each is unpacked as soon as all its parts are here (by any receive call), once per sha256.
receive() {
  local manifest=.gpu/carry/manifest bad=0 missing_all=0 kind prefix dest name sum total missing
  [ -f "$manifest" ] || { echo "receive: no $manifest: carry it with every part (see scripts/gpu/prepare.sh)"; return 1; }
  for spec in ":part.:." "small:small.:." "pg:pg.:$PGROOT"; do
    IFS=: read -r kind prefix dest <<<"$spec"
    total=0; missing=0
    while read -r name sum; do
      total=$((total + 1))
      if [ ! -f ".gpu/carry/$name" ]; then echo "receive: $name missing"; missing=$((missing + 1))
      elif [ "$(sha256sum ".gpu/carry/$name" | cut -d' ' -f1)" != "$sum" ]; then echo "receive: $name BAD sha256"; bad=$((bad + 1))
      else echo "receive: $name ok"; fi
    done < <(awk -v k="${kind}part" '$1 == k {print $2, $3}' "$manifest")
    missing_all=$((missing_all + missing))
    [ $bad = 0 ] || return 1
    [ $total -gt 0 ] && [ $missing = 0 ] || continue
    unpack_archive "${kind}archive" "$prefix" "$dest" || return 1
    case $prefix in
      part.) machine; make_bge ;;
      small.) echo "receive: $(ls -l "$BENCH" | awk '{print $5, $6, $7, $8, $9}'); $(wc -l < "$TEXTS") texts; $(ls "$ST_MODEL" 2>/dev/null | wc -l) files in $ST_MODEL" ;;
      pg.) echo "receive: PostgreSQL 15 in $PGROOT ($(head -n1 "$PGROOT/PACKED" 2>/dev/null)); $(sed -n 2p "$PGROOT/PACKED" 2>/dev/null); glibc here: $(ldd --version 2>/dev/null | head -n1)" ;;
    esac
  done
  [ $missing_all = 0 ] && echo "receive: every archive is here" || echo "receive: $missing_all part(s) still to carry"
  return 0
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
  if [ "$(elapsed)" -ge "$SOFT_LIMIT" ]; then say "skipped \`check $label\`: phase past ${SOFT_LIMIT} s"; return; fi
  say ""; say "\`check $label\`"; say '```'
  timeout $(( SOFT_LIMIT + PG_GRACE - $(elapsed) )) "$BENCH" check "${COMMON[@]}" --rows "$CHECK_ROWS" --label "$label" --csv "$RESULTS/check.csv" "$@" 2>&1 | tee -a "$RESULTS/$PHASE.md"
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

# ---- the `pg` phase: tributary_embed_column through PostgreSQL ----------------------------------
# PostgreSQL refuses to run as root: as root, the cluster belongs to the OS user postgres
# (created with useradd when missing, else `nobody`); otherwise to the current user.
pg_user() {
  [ "$(id -u)" = 0 ] || { id -un; return; }
  if id postgres >/dev/null 2>&1; then echo postgres; return; fi
  if command -v useradd >/dev/null && useradd -r -M -d "$PGDIR" -s /bin/sh postgres >/dev/null 2>&1; then echo postgres; return; fi
  echo nobody
}

as_pg() { # command... as $PGOS (environment passed explicitly through env)
  # setpriv first: no PAM session (runuser/su need /etc/pam.d, which minimal images may lack)
  if [ "$(id -u)" != 0 ]; then "$@"
  elif command -v setpriv >/dev/null; then setpriv --reuid "$(id -u "$PGOS")" --regid "$(id -g "$PGOS")" --clear-groups -- "$@"
  elif command -v runuser >/dev/null; then runuser -u "$PGOS" -- "$@"
  elif command -v sudo >/dev/null; then sudo -u "$PGOS" -- "$@"
  else su -s /bin/sh "$PGOS" -c "$(printf '%q ' "$@")"
  fi
}

pgsql() { # psql args... (client as the current user, superuser postgres, trust over the socket)
  env LD_LIBRARY_PATH="$PGDIR/libs" TZ=GMT "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PGDIR/run" -p "$PG_PORT" -U postgres -d postgres "$@"
}

# Installs the GPU ONNX Runtime and the model into the relocated tree, links the bundled libraries
# this machine lacks, makes the cluster and starts it. Idempotent.
pg_up() {
  PGBIN=$PGROOT/usr/lib/postgresql/15/bin
  local pglib=$PGROOT/usr/lib/postgresql/15/lib pgshare=$PGROOT/usr/share/postgresql/15 f so d i=0
  # (a rehearsal with every part in .gpu/carry needs no `receive`: pg.NN is unpacked here)
  if [ ! -x "$PGBIN/postgres" ] && grep -q '^pgarchive ' .gpu/carry/manifest 2>/dev/null && ls .gpu/carry/pg.* >/dev/null 2>&1; then
    unpack_archive pgarchive pg. "$PGROOT" | tee -a "$RESULTS/$PHASE.md"
  fi
  [ -x "$PGBIN/postgres" ] || { say "no $PGBIN/postgres: carry pg.NN with \`receive\` first"; return 1; }
  PGOS=$(pg_user)
  # the GPU ONNX Runtime as $pkglibdir/tributary/libonnxruntime.so (the extension's default) and
  # the model as $sharedir/tributary/models/all-MiniLM-L6-v2 (default model path): both copied, so
  # that $PGOS can read them wherever this checkout is
  mkdir -p "$pglib/tributary" "$pgshare/tributary/models" "$PGDIR/libs" "$PGDIR/run"
  for f in libonnxruntime.so.1.31.1 libonnxruntime_providers_shared.so libonnxruntime_providers_cuda.so; do
    [ -s "$pglib/tributary/$f" ] || cp "ort/lib-gpu/$f" "$pglib/tributary/$f" || return 1
  done
  ln -sf libonnxruntime.so.1.31.1 "$pglib/tributary/libonnxruntime.so"
  [ -f "$pgshare/tributary/models/all-MiniLM-L6-v2/tributary.json" ] || cp -r "$MINILM" "$pgshare/tributary/models/" || return 1
  # bundled libraries: only those whose soname this machine's loader does not know (or all of them)
  rm -f "$PGDIR"/libs/*
  local linked=()
  for f in "$PGROOT"/deps/*; do
    so=$(basename "$f")
    if [ "$PG_LIBS" = all ] || ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q "^[[:space:]]*$so "; then
      ln -s "$f" "$PGDIR/libs/$so"; linked+=("$so")
    fi
  done
  PG_LINKED="${#linked[@]} of $(ls "$PGROOT/deps" | wc -l) bundled libraries on LD_LIBRARY_PATH ($PG_LIBS): ${linked[*]:-none}"
  # the CUDA directories, copied when $PGOS cannot read them
  PG_CUDA=""
  for d in ${CUDA_DIRS//:/ }; do
    if ! as_pg test -r "$d" -a -x "$d"; then
      mkdir -p "$PGDIR/cuda/$i"; cp -a "$d"/. "$PGDIR/cuda/$i/"; d=$PGDIR/cuda/$i; i=$((i + 1))
    fi
    PG_CUDA=${PG_CUDA:+$PG_CUDA:}$d
  done
  chmod a+rx "$PGDIR"; chmod -R a+rX "$PGROOT" "$PGDIR/libs"; [ -d "$PGDIR/cuda" ] && chmod -R a+rX "$PGDIR/cuda"
  [ "$(id -u)" = 0 ] && chown "$PGOS" "$PGDIR/run"   # socket and server log
  if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
    rm -rf "$PGDIR/data"; mkdir -p "$PGDIR/data"; [ "$(id -u)" = 0 ] && chown "$PGOS" "$PGDIR/data"
    as_pg env LD_LIBRARY_PATH="$PGDIR/libs" TZ=GMT LC_ALL=C "$PGBIN/initdb" -D "$PGDIR/data" -U postgres -A trust \
      -E UTF8 --locale=C --no-sync >"$PGDIR/initdb.log" 2>&1 || { say "initdb FAILED:"; tail -n 20 "$PGDIR/initdb.log" | tee -a "$RESULTS/$PHASE.md"; return 1; }
    cat >>"$PGDIR/data/postgresql.conf" <<CONF
listen_addresses = ''
port = $PG_PORT
unix_socket_directories = '$PGDIR/run'
timezone = 'GMT'
log_timezone = 'GMT'
jit = off
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 1GB
max_wal_size = 8GB
maintenance_work_mem = 1GB
tributary.ort_library = '$pglib/tributary/libonnxruntime.so.1.31.1'
tributary.cuda_library_path = '$PG_CUDA'
CONF
  fi
  if ! as_pg env LD_LIBRARY_PATH="$PGDIR/libs" "$PGBIN/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; then
    as_pg env LD_LIBRARY_PATH="$PGDIR/libs" TZ=GMT LC_ALL=C "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/run/server.log" -w -t 60 start >/dev/null \
      || { say "PostgreSQL did not start:"; tail -n 20 "$PGDIR/run/server.log" | tee -a "$RESULTS/$PHASE.md"; return 1; }
  fi
}

pg_down() {
  as_pg env LD_LIBRARY_PATH="$PGDIR/libs" "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null 2>&1 || true
  cp "$PGDIR/run/server.log" "$RESULTS/pg-server.log" 2>/dev/null || true
}

# Does this tributary.so define tributary.NAME? (SHOW in a fresh session after LOAD: SET would
# only make a placeholder.) Cached.
declare -A PG_HAS=()
pg_has() { # name (without the tributary. prefix)
  if [ -z "${PG_HAS[$1]:-}" ]; then
    if pgsql -At -c "LOAD 'tributary'" -c "SHOW tributary.$1" >/dev/null 2>>"$RESULTS/pg.log"; then PG_HAS[$1]=1; else PG_HAS[$1]=0; fi
  fi
  [ "${PG_HAS[$1]}" = 1 ]
}

# One timed tributary_embed_column in a fresh backend: a 64-row warm-up table first (loads the
# session: ORT, CUDA, the model), then ROWS rows, timed with clock_timestamp() around the call.
# SETTINGS: space-separated NAME=VALUE of tributary.NAME; a run whose setting this tributary.so
# lacks is skipped (with a line saying so). CAP: seconds for the timed call (statement_timeout;
# never more than what is left of the phase); a run cut by it reports the rows ORT embedded by
# then (tributary.sessions' rows) over its time, marked `timeout`.
pg_embed() { # label provider type rows [settings] [cap]
  local label=$1 prov=$2 type=$3 rows=$4 settings=${5:-} cap=${6:-} tbl left out rc kv name missing="" set_sql=""
  tbl=t_$(echo "$label" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' _)
  if [ "$(elapsed)" -ge "$SOFT_LIMIT" ]; then say "| $label | skipped: phase past ${SOFT_LIMIT} s |"; return; fi
  for kv in $settings; do
    name=${kv%%=*}
    if pg_has "$name"; then set_sql+="SET tributary.$name = '${kv#*=}'; "
    else missing+=" tributary.$name"; fi
  done
  if [ -n "$missing" ]; then
    say "| $label | skipped: \`SHOW$missing\` fails (not in this tributary.so) |"; return
  fi
  left=$(( SOFT_LIMIT + PG_GRACE - $(elapsed) ))
  [ -n "$cap" ] && [ "$cap" -lt "$left" ] && left=$cap
  [ "$left" -lt 5 ] && left=5
  pgsql >>"$RESULTS/pg.log" 2>&1 <<SQL || { say "| $label | **FAILED** to make $tbl (see pg.log) |"; FAILED=1; return; }
DROP TABLE IF EXISTS ${tbl}, w_${tbl};
CREATE TABLE ${tbl} (id int PRIMARY KEY, description text, embedding ${type}(384));
INSERT INTO ${tbl} (id, description) SELECT id, description FROM src WHERE id <= ${rows};
CREATE TABLE w_${tbl} (LIKE ${tbl} INCLUDING ALL);
INSERT INTO w_${tbl} (id, description) SELECT id, description FROM src WHERE id <= 64;
VACUUM ANALYZE ${tbl};
VACUUM ANALYZE w_${tbl};
SQL
  echo "-- $label: $set_sql statement_timeout ${left}s" >> "$RESULTS/pg.log"
  out=$(pgsql -At -F '|' 2>"$PGDIR/err" <<SQL
SET tributary.execution_provider = '$prov';
$PG_SET
$set_sql
SET statement_timeout = '${left}s';
SELECT 'WARM', tributary_embed_column('w_${tbl}', ARRAY['description'], 'embedding', batch_size => $PG_BATCH);
SET statement_timeout = '${left}s';
SELECT 'BEFORE', $PG_SPLIT_SQL FROM tributary.sessions;
\set n -1
SELECT clock_timestamp() AS t0 \gset
\set ON_ERROR_STOP off
SELECT tributary_embed_column('${tbl}', ARRAY['description'], 'embedding', batch_size => $PG_BATCH) AS n \gset
\set ON_ERROR_STOP on
SELECT 'RESULT', :n, extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);
RESET statement_timeout;
SELECT 'AFTER', $PG_SPLIT_SQL FROM tributary.sessions;
SELECT 'SESSION', execution_provider, provider_note, io_binding, io_binding_note, runs, rows, tokens, padded_tokens, round(run_ms::numeric, 1), round(tokenize_wait_ms::numeric, 1), model_file FROM tributary.sessions;
SELECT 'FILLED', count(*) FILTER (WHERE embedding IS NOT NULL), count(*) FROM ${tbl};
\set ON_ERROR_STOP off
SELECT 'SHAPES', shapes, round(warm_up_ms::numeric, 1), runs, round(run_ms::numeric, 1) FROM tributary.sessions;
SQL
)
  rc=$?
  cat "$PGDIR/err" >> "$RESULTS/pg.log"
  echo "$out" >> "$RESULTS/pg.log"
  [ $rc = 0 ] || { say "| $label | **FAILED** (psql exit $rc): $(tail -n 3 "$RESULTS/pg.log" | tr '\n|' '  ') |"; FAILED=1; return; }
  echo "$out" | awk -F'|' -v label="$label" -v prov="$prov" -v type="$type" -v csv="$RESULTS/pg.csv" -v md="$RESULTS/$PHASE.md" \
      -v settings="$settings" -v rw="$PG_HAS_RW" -v cap="$left" -v asked="$rows" \
      -v err="$(grep -m1 'ERROR' "$PGDIR/err" | tr '|' ' ')" '
    function ms(x) { return rw ? sprintf("%.0f", x) : "n/a" }
    $1 == "RESULT" { n = $2; s = $3 }
    $1 == "SESSION" { used = $2; iob = $4 }
    $1 == "BEFORE" { runs = -$2; tok = -$3; pad = -$4; ort = -$5; tw = -$6; rd = -$7; wr = -$8; done = -$9 }
    $1 == "AFTER" { runs += $2; tok += $3; pad += $4; ort += $5; tw += $6; rd += $7; wr += $8; done += $9 }
    $1 == "FILLED" { filled = $2; total = $3 }
    END {
      status = "ok"
      if (n + 0 < 0 && err ~ /statement timeout/) { status = "timeout"; n = done }   # ORT rows so far
      else if (n + 0 < 0) { print "| " label " | **FAILED**: " err " |" >> md; exit 1 }
      else if (filled != total) status = "only " filled " of " total " filled"
      if (s <= 0 || n + 0 == 0) { print "| " label " | **FAILED**: " n " rows in " s " s (" status ") |" >> md; exit 1 }
      note = (status == "ok" ? "" : " (" status (status == "timeout" ? " after " cap " s, of " asked " rows" : "") ")")
      printf "| %s%s | %s | %s | %s | %d | %.2f | %.0f | %d | %.0f | %.0f | %s | %s | %.0f%% | %.1f | %s |\n", label, note, prov, used, type, n, s, n / s, runs, ort, tw, ms(rd), ms(wr), 100 * ort / (1000 * s), (pad > 0 ? 100 * (1 - tok / pad) : 0), settings >> md
      printf "%s,%s,%s,%s,%s,%d,%.4f,%.1f,%d,%d,%d,%.1f,%.1f,%s,%s,%s,%s\n", label, prov, used, iob, type, n, s, n / s, runs, tok, pad, ort, tw, (rw ? sprintf("%.1f", rd) : ""), (rw ? sprintf("%.1f", wr) : ""), settings, status >> csv
      if (status != "ok") exit 2
    }'
  rc=$?
  [ $rc = 1 ] && FAILED=1
  [ $rc = 0 ] && PG_DONE+=("$tbl|$label|$prov|$type")
  # The session's input shapes and warm-up (columns of 0.12.0; absent before), after the run.
  echo "$out" | awk -F'|' -v label="$label" '$1 == "SHAPES" { printf "- %s: %s input shapes, %s ms warming them, %s runs, %s ms in ORT (the session, warm-up table included)\n", label, $2, $3, $4, $5 }' >> "$RESULTS/pg-shapes.txt"
  tail -n 1 "$RESULTS/$PHASE.md"
}

# The runs of the `pg` phase, one per line: label|provider|type|rows|settings|cap (s). Override
# with GPU_CHECK_PG_RUNS (same format; `;` may separate runs too).
pg_runs() {
  if [ -n "${GPU_CHECK_PG_RUNS:-}" ]; then printf '%s\n' "$GPU_CHECK_PG_RUNS" | tr ';' '\n'; return; fi
  cat <<RUNS
$PROVIDER fp32|$PROVIDER|vector|$PG_ROWS|gpu_fp16=off|
$PROVIDER fp16 buckets|$PROVIDER|vector|$PG_ROWS|gpu_fp16=on gpu_shape_buckets=on|$PG_FP16_CAP
$PROVIDER fp16 buckets halfvec|$PROVIDER|halfvec|$PG_ROWS|gpu_fp16=on gpu_shape_buckets=on|$PG_FP16_CAP
$PROVIDER fp32 no pipeline|$PROVIDER|vector|$PG_ROWS|gpu_fp16=off pipeline=off|
$PROVIDER fp32 no buckets|$PROVIDER|vector|$PG_ROWS|gpu_fp16=off gpu_shape_buckets=off|
cpu baseline|cpu|vector|$PG_CPU_ROWS||
$PROVIDER fp16 no buckets|$PROVIDER|vector|$PG_FP16_ROWS|gpu_fp16=on gpu_shape_buckets=off|$PG_FP16_CAP
RUNS
}

pg() {
  ready
  say "## Through PostgreSQL: tributary_embed_column, all-MiniLM-L6-v2, real texts"
  pg_up || { FAILED=1; pg_down; return; }
  local v
  v=$(pgsql -At -c "SELECT version()" 2>&1)
  say ""; say '```'
  say "server: $v"
  say "relocated: $(pgsql -At -F ' = ' -c "SELECT name, setting FROM pg_config WHERE name IN ('BINDIR', 'SHAREDIR', 'PKGLIBDIR') ORDER BY name" | paste -sd';' | sed 's/;/; /g')"
  say "OS user: $PGOS; $PG_LINKED"
  say "tributary.cuda_library_path = '$PG_CUDA'"
  say "$(sed -n 2p "$PGROOT/PACKED" 2>/dev/null)"
  say "settings: $(pgsql -At -c "LOAD 'tributary'" -c "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name LIKE 'tributary.%' AND name NOT IN ('tributary.ort_library', 'tributary.cuda_library_path')")${PG_SET:+; before each run: $PG_SET}"
  say '```'
  if ! pgsql -c "DROP EXTENSION IF EXISTS tributary CASCADE; CREATE EXTENSION tributary CASCADE" >>"$RESULTS/pg.log" 2>&1; then
    say "**FAILED**: CREATE EXTENSION tributary CASCADE: $(tail -n 3 "$RESULTS/pg.log" | tr '\n' ' ')"; FAILED=1; pg_down; return
  fi
  say "extensions: $(pgsql -At -c "SELECT string_agg(e.extname || ' ' || e.extversion, ', ' ORDER BY e.extname) FROM pg_extension e")"
  # tributary.sessions' split of a run's time: read_ms / write_ms where this tributary.so has them
  PG_HAS_RW=0
  pgsql -At -c "SELECT read_ms, write_ms FROM tributary.sessions LIMIT 0" >/dev/null 2>>"$RESULTS/pg.log" && PG_HAS_RW=1
  PG_SPLIT_SQL="coalesce(sum(runs), 0), coalesce(sum(tokens), 0), coalesce(sum(padded_tokens), 0), coalesce(sum(run_ms), 0), coalesce(sum(tokenize_wait_ms), 0)"
  if [ $PG_HAS_RW = 1 ]; then PG_SPLIT_SQL+=", coalesce(sum(read_ms), 0), coalesce(sum(write_ms), 0)"; else PG_SPLIT_SQL+=", 0, 0"; fi
  PG_SPLIT_SQL+=", coalesce(sum(rows), 0)"
  local runs n=$PG_CPU_ROWS label prov type rows settings cap
  runs=$(pg_runs | grep -v '^[[:space:]]*$')
  while IFS='|' read -r label prov type rows settings cap; do [ "$rows" -gt "$n" ] && n=$rows; done <<<"$runs"
  pgsql -c "DROP TABLE IF EXISTS src; CREATE TABLE src (id int PRIMARY KEY, description text)" >>"$RESULTS/pg.log" 2>&1
  awk -v n="$n" 'NR > n { exit } { t = $0; gsub(/"/, "\"\"", t); gsub(/\\n/, "\n", t); printf "%d,\"%s\"\n", NR, t }' "$TEXTS" \
    | pgsql -c "COPY src FROM STDIN WITH (FORMAT csv)" >>"$RESULTS/pg.log" 2>&1 || { say "**FAILED** loading texts (pg.log)"; FAILED=1; pg_down; return; }
  say "texts: $(pgsql -At -c "SELECT count(*) || ' rows, ' || round(avg(length(description))) || ' characters on average' FROM src")"
  say ""
  say "Each run in a fresh backend after a 64-row warm-up (session load excluded); batch_size $PG_BATCH; s = wall time of the one call (clock_timestamp()); from tributary.sessions (after - before): ORT ms = time inside ORT runs (run_ms), tokenize wait ms (tokenize_wait_ms), read ms / write ms (read_ms / write_ms: $([ $PG_HAS_RW = 1 ] && echo present || echo 'not in this tributary.so: n/a')); ORT share = ORT ms / s; padding = 1 - tokens / padded tokens."
  say ""
  say "| run | asked | used | target | rows | s | rows/s | ORT runs | ORT ms | tokenize wait ms | read ms | write ms | ORT share | padding % | settings |"
  say "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
  local header="label,provider_asked,provider_used,io_binding,target,rows,seconds,rows_per_s,ort_runs,tokens,padded_tokens,run_ms,tokenize_wait_ms,read_ms,write_ms,settings,status"
  [ "$(head -n1 "$RESULTS/pg.csv" 2>/dev/null)" = "$header" ] || echo "$header" > "$RESULTS/pg.csv"
  PG_DONE=()
  rm -f "$RESULTS/pg-shapes.txt"
  while IFS='|' read -r -u 3 label prov type rows settings cap; do
    pg_embed "$label" "$prov" "$type" "$rows" "$settings" "$cap"
  done 3<<<"$runs"
  if [ -s "$RESULTS/pg-shapes.txt" ]; then
    say ""; say "Input shapes (tributary.sessions.shapes, warm_up_ms) of each run's session:"
    while IFS= read -r line; do say "$line"; done < "$RESULTS/pg-shapes.txt"
  fi
  # every run's vectors against the CPU provider's (the same 0.999 as `check`), row by row
  local ref="" r tbl rtype q
  for r in "${PG_DONE[@]}"; do IFS='|' read -r tbl label prov type <<<"$r"; [ "$label" = "cpu baseline" ] && ref=$tbl; done
  [ -z "$ref" ] && for r in "${PG_DONE[@]}"; do IFS='|' read -r tbl label prov type <<<"$r"; [ "$prov" = cpu ] && [ "$type" = vector ] && { ref=$tbl; break; }; done
  say ""
  if [ -z "$ref" ]; then
    say "no CPU run finished: no cosine"
  else
    pgsql -At -c "COPY (SELECT id, embedding FROM $ref ORDER BY id) TO STDOUT" > .gpu/cpu-rows.tsv 2>>"$RESULTS/pg.log" || rm -f .gpu/cpu-rows.tsv
    for r in "${PG_DONE[@]}"; do
      IFS='|' read -r tbl label prov type <<<"$r"
      [ "$tbl" = "$ref" ] && continue
      rtype=$type
      q=$(pgsql -At -F '|' -c "SELECT count(*), min(1 - (a.embedding <=> b.embedding::$rtype)), avg(1 - (a.embedding <=> b.embedding::$rtype))
            FROM $tbl a JOIN $ref b USING (id) WHERE a.embedding IS NOT NULL" 2>>"$RESULTS/pg.log")
      echo "$q" | awk -F'|' -v label="$label" -v md="$RESULTS/$PHASE.md" '
        NF >= 3 { printf "cosine `%s` vs cpu baseline: %d rows, min %.6f, mean %.6f%s\n", label, $1, $2, $3, ($1 > 0 && $2 < 0.999 ? " **BELOW 0.999**" : "") >> md
                  if ($1 > 0 && $2 < 0.999) bad = 1 }
        END { exit bad }' || FAILED=1
      tail -n 1 "$RESULTS/$PHASE.md"
    done
  fi
  say ""; say "tributary.sessions of each run (model_file under the relocated share dir):"; say '```'
  grep '^SESSION|' "$RESULTS/pg.log" | cut -d'|' -f2- | tail -n "$(echo "$runs" | wc -l)" | tee -a "$RESULTS/$PHASE.md"
  say '```'
  pg_down
  [ -f "$RESULTS/st.csv" ] && summary
}

# ---- the `st` phase: the sentence-transformers baseline on the same texts ---------------------
st() {
  : > "$RESULTS/st.md"
  local f
  for f in "$ST_MODEL/config.json" "$ST_MODEL/model.safetensors" "$TEXTS"; do
    [ -e "$f" ] || { say "## sentence-transformers baseline"; say ""; say "skipped: no $f (carry small.NN with \`receive\`)"; return; }
  done
  # find_spec: present or not without paying torch's import twice
  if ! "$ST_PY" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("torch", "sentence_transformers", "transformers", "numpy", "safetensors")))' 2>/dev/null; then
    say "## sentence-transformers baseline"; say ""; say "skipped: $ST_PY lacks torch / sentence_transformers / transformers / numpy / safetensors"; return
  fi
  local limit=$ST_LIMIT dev=cuda rc
  [ "$limit" -gt "$(( SOFT_LIMIT - $(elapsed) ))" ] && limit=$(( SOFT_LIMIT - $(elapsed) ))
  [ "$PROVIDER" = cpu ] && dev=cpu
  # st_baseline.py writes st.md itself; its progress lines go to st.log
  timeout $(( limit + 20 )) "$ST_PY" scripts/gpu/st_baseline.py --model "$ST_MODEL" --texts "$TEXTS" \
    --out "$RESULTS" --rows "$ST_ROWS" --batches "$ST_BATCHES" --time-limit "$limit" --device "$dev" \
    --cpu-rows .gpu/cpu-rows.tsv >"$RESULTS/st.log" 2>&1
  rc=$?
  if [ $rc != 0 ]; then
    { echo; echo "**FAILED**: st_baseline.py exit status $rc$([ $rc = 124 ] && echo ' (timeout)'):"; echo '```'; tail -n 15 "$RESULTS/st.log"; echo '```'; } >> "$RESULTS/st.md"
    FAILED=1
  fi
  cat "$RESULTS/st.md"
  [ -f "$RESULTS/pg.csv" ] && summary
}

# ---- the `probe` phase: scripts/gpu/fp16_probe.sh with its output in report.md ------------------
probe() {
  ready
  say "## fp16 probe (scripts/gpu/fp16_probe.sh): three points of batch ${PROBE_BATCH:-1024} over the same ${PROBE_ROWS:-2048} texts per session, budget ${PROBE_BUDGET:-16384}"
  say ""
  say "(is a new input shape's cost paid once? points two and three see point one's shapes again)"
  say '```'
  CUDA_LIBRARY_PATH="$CUDA_DIRS" PROBE_PROVIDER="$PROVIDER" PROBE_UNTIL=$(( STARTED + SOFT_LIMIT )) \
    PROBE_CSV="$RESULTS/sweep.csv" OUT="$RESULTS" BENCH="$BENCH" bash scripts/gpu/fp16_probe.sh 2>&1 | tee -a "$RESULTS/$PHASE.md"
  say '```'
}

# ---- summary: rows/s of every pg run and the best CUDA run against sentence-transformers' best --
summary() {
  local f="$RESULTS/summary.md"
  awk -F, -v st="$RESULTS/st.csv" -v prov="$PROVIDER" '
    BEGIN {
      while ((getline line < st) > 0) {
        split(line, c, ","); if (c[1] == "dtype") continue
        if (c[6] + 0 > best) { best = c[6] + 0; bcfg = c[1] " batch " c[2]; dev = c[8]; gsub(/"/, "", dev) }
      }
      print "## Summary"; print ""
      print "| run | rows | rows/s | status | vs sentence-transformers best |"
      print "|---|---:|---:|---|---:|"
    }
    NR > 1 && $1 != "label" {
      printf "| %s | %d | %.0f | %s | %s |\n", $1, $6, $8, $17, (best > 0 ? sprintf("%.2fx", $8 / best) : "n/a")
      if ($2 != "cpu" && $17 == "ok" && $8 + 0 > top) { top = $8 + 0; topl = $1 }
    }
    END {
      print ""
      if (best > 0) printf "sentence-transformers best: %.0f rows/s (%s) on %s\n", best, bcfg, dev
      else print "sentence-transformers: no st.csv figures (st did not run, or not yet)"
      if (top > 0 && best > 0) printf "\n**best %s run: `%s`, %.0f rows/s = %.2fx sentence-transformers best (%.0f rows/s)**\n", prov, topl, top, top / best, best
      else if (top > 0) printf "\nbest %s run: `%s`, %.0f rows/s\n", prov, topl, top
    }' "$RESULTS/pg.csv" > "$f" 2>/dev/null || echo "## Summary: no pg.csv" > "$f"
  cat "$f"
}

# ---- the `sitting` phase: everything a 15-minute lease has time for, in one call -----------------
# pg (the runs above), st, the fp16 probe, check (MiniLM only when GPU_CHECK_PYTHON=/bin/false),
# each with a soft time limit: its own budget, cut so that the steps after it keep their minimum.
# The whole stays under GPU_SITTING_LIMIT seconds (520; the call's limit is 600 and `receive`
# comes first in the same call).
sitting() {
  local t0=$(date +%s) total=${GPU_SITTING_LIMIT:-520} step budget reserve left
  local -A BUDGET=([pg]=${GPU_SITTING_PG:-200} [st]=${GPU_SITTING_ST:-90} [probe]=${GPU_SITTING_PROBE:-160} [check]=${GPU_SITTING_CHECK:-60})
  local -A RESERVE=([pg]=220 [st]=130 [probe]=40 [check]=0)   # what the later steps need at least
  # the probe smaller than alone: 1,024 texts in calls of 512, 40 s per variant at most (the fp16
  # graph ran 49-70 rows/s through PostgreSQL when each new shape cost it)
  export PROBE_ROWS=${PROBE_ROWS:-2048} PROBE_BATCH=${PROBE_BATCH:-1024} PROBE_TIMEOUT=${PROBE_TIMEOUT:-55}
  rm -f "$RESULTS"/{pg,st,probe,check,summary}.md "$RESULTS"/{pg,st,check,sweep}.csv "$RESULTS"/*.log .gpu/cpu-rows.tsv
  for step in ${GPU_SITTING_STEPS:-pg st probe check}; do
    left=$(( total - ($(date +%s) - t0) - ${RESERVE[$step]:-0} ))
    budget=${BUDGET[$step]:-120}; [ "$left" -lt "$budget" ] && budget=$left
    echo; echo "==== sitting: $step, soft limit $budget s ($(( $(date +%s) - t0 )) s into the sitting)"
    if [ "$budget" -lt 20 ]; then
      echo "## $step: skipped (sitting time box: $budget s left for it)" > "$RESULTS/$step.md"; continue
    fi
    PHASE=$step; STARTED=$(date +%s); SOFT_LIMIT=$budget; PG_GRACE=15
    case $step in pg) pg ;; st) ST_LIMIT=$(( budget - 5 )); st ;; probe) probe ;; check) check ;; esac
    echo "==== sitting: $step took $(( $(date +%s) - STARTED )) s"
    echo "- $step: $(( $(date +%s) - STARTED )) s (soft limit $budget s)" >> "$RESULTS/sitting-steps"
  done
  PHASE=sitting
  summary >/dev/null
  { echo "## The sitting's steps"; echo; cat "$RESULTS/sitting-steps"; echo "- in all: $(( $(date +%s) - t0 )) s"; } > "$RESULTS/sitting.md"
  rm -f "$RESULTS/sitting-steps"
}

case "$PHASE" in
  receive) receive; rc=$? ;;
  check) check ;;
  sweep-minilm) sweep_model minilm "$MINILM" ;;
  sweep-bge) sweep_model bge-base-shaped "$BGE" ;;
  cpu) cpu ;;
  pg) pg ;;
  st) st ;;
  probe) probe ;;
  sitting) sitting ;;
  all)
    for PHASE in check sweep-minilm sweep-bge cpu pg; do
      STARTED=$(date +%s)
      case $PHASE in
        check) check ;; sweep-minilm) sweep_model minilm "$MINILM" ;; sweep-bge) sweep_model bge-base-shaped "$BGE" ;; cpu) cpu ;; pg) pg ;;
      esac
    done ;;
  *) echo "usage: scripts/gpu/run.sh receive|check|sweep-minilm|sweep-bge|cpu|pg|st|probe|sitting|all" >&2; exit 2 ;;
esac
publish
echo "run.sh: results in $OUT ($(ls "$OUT" | tr '\n' ' '))"
[ "$PHASE" = receive ] && exit "${rc:-0}"
exit $FAILED
