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
#                 warm-up: $PROVIDER into vector(384), $PROVIDER into halfvec(384), cpu into
#                 vector(384); cosine of those vs the cpu rows; tributary.sessions of each
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
# GPU_CHECK_PG_BATCH (batch_size, 1024), GPU_CHECK_PG_SET (SQL before each timed run, e.g.
# "SET tributary.max_batch_tokens = 65536;"), GPU_CHECK_PG_DIR (/tmp/tributary-gpu-pg),
# GPU_CHECK_PG_LIBS (`missing`: only the bundled libraries whose soname ldconfig does not know go
# on LD_LIBRARY_PATH; `all`: every one, to rehearse the bundle on a machine that has them all).
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
PG_PORT=5499
# the sentence-transformers baseline's model folder (small.NN)
ST_MODEL=${GPU_CHECK_ST_MODEL:-.gpu/st-model/all-MiniLM-L6-v2}
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
    for p in machine check sweep-minilm sweep-bge cpu pg; do
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

# One timed tributary_embed_column in a fresh backend: a 64-row warm-up table first (loads the
# session: ORT, CUDA, the model), then ROWS rows, timed with clock_timestamp() around the call.
pg_embed() { # label provider type rows [SQL before the runs]
  local label=$1 prov=$2 type=$3 rows=$4 extra=${5:-} tbl left out rc
  tbl=t_$(echo "$label" | tr -c 'a-z0-9\n' _)
  if [ "$(elapsed)" -ge "$SOFT_LIMIT" ]; then say "skipped \`$label\`: phase past ${SOFT_LIMIT} s"; return; fi
  left=$(( SOFT_LIMIT + 60 - $(elapsed) ))
  pgsql >>"$RESULTS/pg.log" 2>&1 <<SQL || { say "**FAILED** to make $tbl (see pg.log)"; FAILED=1; return; }
DROP TABLE IF EXISTS ${tbl}, w_${tbl};
CREATE TABLE ${tbl} (id int PRIMARY KEY, description text, embedding ${type}(384));
INSERT INTO ${tbl} (id, description) SELECT id, description FROM src WHERE id <= ${rows};
CREATE TABLE w_${tbl} (LIKE ${tbl} INCLUDING ALL);
INSERT INTO w_${tbl} (id, description) SELECT id, description FROM src WHERE id <= 64;
VACUUM ANALYZE ${tbl};
VACUUM ANALYZE w_${tbl};
SQL
  out=$(pgsql -At -F '|' 2>>"$RESULTS/pg.log" <<SQL
SET tributary.execution_provider = '$prov';
SET statement_timeout = '${left}s';
$PG_SET
$extra
SELECT 'WARM', tributary_embed_column('w_${tbl}', ARRAY['description'], 'embedding', batch_size => $PG_BATCH);
SELECT 'BEFORE', coalesce(sum(runs), 0), coalesce(sum(tokens), 0), coalesce(sum(padded_tokens), 0), coalesce(sum(run_ms), 0) FROM tributary.sessions;
SELECT clock_timestamp() AS t0 \gset
SELECT tributary_embed_column('${tbl}', ARRAY['description'], 'embedding', batch_size => $PG_BATCH) AS n \gset
SELECT 'RESULT', :n, extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);
SELECT 'AFTER', sum(runs), sum(tokens), sum(padded_tokens), sum(run_ms) FROM tributary.sessions;
SELECT 'SESSION', execution_provider, provider_note, io_binding, io_binding_note, runs, rows, tokens, padded_tokens, round(run_ms::numeric, 1), round(tokenize_wait_ms::numeric, 1), model_file FROM tributary.sessions;
SELECT 'FILLED', count(*) FILTER (WHERE embedding IS NOT NULL), count(*) FROM ${tbl};
SQL
)
  rc=$?
  echo "$out" >> "$RESULTS/pg.log"
  [ $rc = 0 ] || { say "**FAILED** \`$label\` (psql exit $rc): $(tail -n 3 "$RESULTS/pg.log" | tr '\n' ' ')"; FAILED=1; return; }
  echo "$out" | awk -F'|' -v label="$label" -v prov="$prov" -v type="$type" -v csv="$RESULTS/pg.csv" -v md="$RESULTS/$PHASE.md" '
    $1 == "RESULT" { n = $2; s = $3 }
    $1 == "SESSION" { used = $2; iob = $4 }
    $1 == "BEFORE" { runs = -$2; tok = -$3; pad = -$4; ms = -$5 }
    $1 == "AFTER" { runs += $2; tok += $3; pad += $4; ms += $5 }
    $1 == "FILLED" { filled = $2; total = $3 }
    END {
      if (s <= 0 || n + 0 == 0) { print "**FAILED** `" label "`: " n " rows in " s " s" >> md; exit 1 }
      if (filled != total) { print "**FAILED** `" label "`: only " filled " of " total " rows filled" >> md; exit 1 }
      printf "| %s | %s | %s | %s | %s | %d | %.2f | %.0f | %d | %.0f | %.0f%% | %.1f |\n", label, prov, used, iob, type, n, s, n / s, runs, ms, 100 * ms / (1000 * s), (pad > 0 ? 100 * (1 - tok / pad) : 0) >> md
      printf "%s,%s,%s,%s,%s,%d,%.4f,%.1f,%d,%d,%d,%.1f\n", label, prov, used, iob, type, n, s, n / s, runs, tok, pad, ms >> csv
    }' || FAILED=1
  tail -n 1 "$RESULTS/$PHASE.md"
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
  say "settings: $(pgsql -At -c "LOAD 'tributary'" -c "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('tributary.io_binding', 'tributary.gpu_fp16', 'tributary.max_batch_tokens', 'tributary.intra_op_threads', 'tributary.gpu_device')")${PG_SET:+; before each run: $PG_SET}"
  say '```'
  if ! pgsql -c "DROP EXTENSION IF EXISTS tributary CASCADE; CREATE EXTENSION tributary CASCADE" >>"$RESULTS/pg.log" 2>&1; then
    say "**FAILED**: CREATE EXTENSION tributary CASCADE: $(tail -n 3 "$RESULTS/pg.log" | tr '\n' ' ')"; FAILED=1; pg_down; return
  fi
  say "extensions: $(pgsql -At -c "SELECT string_agg(e.extname || ' ' || e.extversion, ', ' ORDER BY e.extname) FROM pg_extension e")"
  local n=$PG_ROWS; [ "$PG_CPU_ROWS" -gt "$n" ] && n=$PG_CPU_ROWS
  pgsql -c "DROP TABLE IF EXISTS src; CREATE TABLE src (id int PRIMARY KEY, description text)" >>"$RESULTS/pg.log" 2>&1
  awk -v n="$n" 'NR > n { exit } { t = $0; gsub(/"/, "\"\"", t); gsub(/\\n/, "\n", t); printf "%d,\"%s\"\n", NR, t }' "$TEXTS" \
    | pgsql -c "COPY src FROM STDIN WITH (FORMAT csv)" >>"$RESULTS/pg.log" 2>&1 || { say "**FAILED** loading texts (pg.log)"; FAILED=1; pg_down; return; }
  say "texts: $(pgsql -At -c "SELECT count(*) || ' rows, ' || round(avg(length(description))) || ' characters on average' FROM src")"
  say ""
  say "Each run in a fresh backend after a 64-row warm-up (session load excluded); batch_size $PG_BATCH; ORT = time inside ORT runs (tributary.sessions.run_ms); padding = 1 - tokens / padded tokens."
  say ""
  say "| run | asked | used | io_binding | target | rows | s | rows/s | ORT runs | ORT ms | ORT share | padding % |"
  say "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
  [ -f "$RESULTS/pg.csv" ] || echo "label,provider_asked,provider_used,io_binding,target,rows,seconds,rows_per_s,ort_runs,tokens,padded_tokens,run_ms" > "$RESULTS/pg.csv"
  pg_embed "$PROVIDER vector" "$PROVIDER" vector "$PG_ROWS"
  pg_embed "$PROVIDER halfvec" "$PROVIDER" halfvec "$PG_ROWS"
  pg_embed "cpu baseline vector" cpu vector "$PG_CPU_ROWS"
  # the fp16 graph (off by default: each new input shape cost it 100-600 ms on an H200), few rows
  pg_embed "$PROVIDER vector fp16" "$PROVIDER" vector "$PG_FP16_ROWS" "SET tributary.gpu_fp16 = on;"
  # the engine sweeps' default budget (16384 padded tokens per ORT run) vs the extension's 2048
  pg_embed "$PROVIDER vector max_batch_tokens 16384" "$PROVIDER" vector "$PG_ROWS" "SET tributary.max_batch_tokens = 16384;"
  # the GPU's vectors against the CPU provider's, row by row (the same 0.999 as `check`)
  say ""
  local q
  q=$(pgsql -At -F '|' -c "
    SELECT 'vector', count(*), min(1 - (a.embedding <=> b.embedding)), avg(1 - (a.embedding <=> b.embedding))
      FROM \"t_${PROVIDER}_vector\" a JOIN t_cpu_baseline_vector b USING (id)
    UNION ALL
    SELECT 'halfvec', count(*), min(1 - (a.embedding <=> b.embedding::halfvec)), avg(1 - (a.embedding <=> b.embedding::halfvec))
      FROM \"t_${PROVIDER}_halfvec\" a JOIN t_cpu_baseline_vector b USING (id)" 2>>"$RESULTS/pg.log")
  echo "$q" | awk -F'|' -v prov="$PROVIDER" -v md="$RESULTS/$PHASE.md" '
    NF >= 4 { printf "cosine %s %s vs cpu: %d rows, min %.6f, mean %.6f%s\n", prov, $1, $2, $3, $4, ($2 > 0 && $3 < 0.999 ? " **BELOW 0.999**" : "") >> md
              if ($2 > 0 && $3 < 0.999) bad = 1 }
    END { exit bad }' || FAILED=1
  grep '^cosine' "$RESULTS/$PHASE.md" | tail -n 2
  say ""; say "tributary.sessions of each run (model_file under the relocated share dir):"; say '```'
  grep '^SESSION|' "$RESULTS/pg.log" | cut -d'|' -f2- | tail -n 5 | tee -a "$RESULTS/$PHASE.md"
  say '```'
  pg_down
}

case "$PHASE" in
  receive) receive; rc=$? ;;
  check) check ;;
  sweep-minilm) sweep_model minilm "$MINILM" ;;
  sweep-bge) sweep_model bge-base-shaped "$BGE" ;;
  cpu) cpu ;;
  pg) pg ;;
  all)
    for PHASE in check sweep-minilm sweep-bge cpu pg; do
      STARTED=$(date +%s)
      case $PHASE in
        check) check ;; sweep-minilm) sweep_model minilm "$MINILM" ;; sweep-bge) sweep_model bge-base-shaped "$BGE" ;; cpu) cpu ;; pg) pg ;;
      esac
    done ;;
  *) echo "usage: scripts/gpu/run.sh receive|check|sweep-minilm|sweep-bge|cpu|pg|all" >&2; exit 2 ;;
esac
publish
echo "run.sh: results in $OUT ($(ls "$OUT" | tr '\n' ' '))"
[ "$PHASE" = receive ] && exit "${rc:-0}"
exit $FAILED
