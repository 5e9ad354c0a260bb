#!/usr/bin/env bash
# The benchmark suite: one command reproduces BENCHMARKS.md's suite table and the throughput plot.
# Reports numbers, asserts none. Every ratio it quotes comes from runs made by this same command,
# on the same rows, with the same ONNX Runtime thread count.
#
# Usage: benches/suite.sh [--rows 10000,50000] [--only METHODS] [--threads N] [--naive-rows 2000]
#                         [--out DIR] [--no-report]
#   METHODS (comma-separated; default all):
#     flops        machine's measured FLOP/s vs the engine's, and the int8 graph's speed-up (flops.py)
#     sweep        engine-only rows/s and tokens/s against batch size and input length (the plot)
#     criterion    tools/bench's criterion benchmark (chunk size, input length, rows per call)
#     engine       engine-only (tools/bench, no PostgreSQL) over the same N texts, 1024 per call
#     column       tributary_embed_column, fp32
#     column_int8  tributary_embed_column with all-MiniLM-L6-v2-int8, and its fidelity to fp32
#     array        tributary_embed(text[]) in chunks of 1024 rows from a DO loop, one UPDATE each
#     row          UPDATE t SET embedding = tributary_embed(description): one call per row
#     job          a job (mode once, batch 256, one worker), create to last commit
#     python       the user's pipeline: ONNX Runtime's Python API + tokenizers + psycopg (fp32)
#     python_int8  the same pipeline on the int8 graph
#     naive        the one-row-per-call Python loop, on the first --naive-rows rows
#   --out DIR adds to an earlier run's results (e.g. the 50k rows run apart from the 10k rows).
# Results: benches/results/<UTC time>/results.jsonl (one JSON line per measurement), the sweep CSV,
# then benches/report.py writes report.md there, benches/throughput.png, and the suite section of
# BENCHMARKS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ARGS="$*"
ROWS_LIST=10000,50000
ONLY=flops,sweep,criterion,engine,column,column_int8,array,row,job,python,python_int8,naive
THREADS=$(nproc)
NAIVE_ROWS=2000
REPORT=1
OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --rows) ROWS_LIST=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --naive-rows) NAIVE_ROWS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-report) REPORT=0; shift ;;
    *) echo "usage: benches/suite.sh [--rows 10000,50000] [--only METHODS] [--threads N] [--naive-rows N] [--no-report]" >&2; exit 2 ;;
  esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }
log() { printf '\n== %s  (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
# Absolute: cargo bench runs the criterion binary from tools/bench.
OUT=$(realpath -m "${OUT:-benches/results/$(date -u +%Y%m%dT%H%M%SZ)}")
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
touch "$RESULTS"
echo "bash benches/suite.sh${ARGS:+ $ARGS}" >>"$OUT/command.txt"
ORT_LIB=$ROOT/ort/lib/libonnxruntime.so.1.31.1
MODEL_DIR=$ROOT/ort/models/all-MiniLM-L6-v2
BENCH_BIN=$ROOT/target/release/tributary-bench
record() { echo "$1" >>"$RESULTS"; echo "$1"; }

if want sweep || want engine || want criterion; then
  log "building tools/bench (release)"
  cargo build -q --release --manifest-path tools/bench/Cargo.toml
fi

if want flops; then
  log "flops: measured machine peak vs the engine, int8 speed-up"
  .venv/bin/python benches/flops.py --threads "$THREADS" --json "$RESULTS" | tee "$OUT/flops.md"
fi

source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy suite
CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
tributary.intra_op_threads = $THREADS
tributary.progress_interval = 0
tributary.job_poll_interval = 100" cluster_start suite 55438
trap 'cluster_stop suite' EXIT
cluster_psql -c "CREATE EXTENSION IF NOT EXISTS tributary CASCADE"

# A fresh copy of the rows for one method: key, text, an empty vector(384).
fresh() {
  cluster_psql -c "DROP TABLE IF EXISTS $1" \
    -c "CREATE TABLE $1 AS SELECT package, description, NULL::vector(384) AS embedding FROM debian_packages" \
    -c "ALTER TABLE $1 ADD PRIMARY KEY (package)" -c "VACUUM ANALYZE $1"
}
# Runs SQL in one session after warming the model's session; prints the SQL's wall time in s.
timed_sql() {
  local model=$1 body=$2
  cluster_psql -At <<SQL
SELECT tributary_embed('warm up', '$model') IS NOT NULL AS warmed \gset
SELECT clock_timestamp() AS t0 \gset
$body
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);
SQL
}
left_null() { cluster_psql -At -c "SELECT count(*) FROM $1 WHERE embedding IS NULL"; }

IFS=, read -ra ROWS_ARR <<<"$ROWS_LIST"
for N in "${ROWS_ARR[@]}"; do
  log "rows: $N Debian package descriptions"
  .venv/bin/python scripts/debian_data.py --drop --limit "$N" >/dev/null
  TOKENS=$(cluster_psql -At -c "SELECT sum(cardinality(tributary_tokenize(description))) FROM debian_packages")
  common="\"rows\": $N, \"tokens\": $TOKENS, \"threads\": $THREADS"

  if want engine; then
    log "engine-only (tools/bench), $N texts"
    texts=$OUT/texts_$N.txt
    cluster_psql -At -c "SELECT replace(description, E'\\n', '\\n') FROM debian_packages ORDER BY package" >"$texts"
    line=$("$BENCH_BIN" embed --ort "$ORT_LIB" --model-dir "$MODEL_DIR" --texts "$texts" --threads "$THREADS" --chunk 1024 --budget 2048 | tail -1)
    record "{\"bench\": \"engine\", $common, \"result\": $line}"
  fi
  if want column; then
    log "tributary_embed_column (fp32)"
    fresh b_column
    s=$(timed_sql all-MiniLM-L6-v2 "SELECT tributary_embed_column('b_column', ARRAY['description'], 'embedding') AS n \gset")
    record "{\"bench\": \"column\", $common, \"seconds\": $s, \"left_null\": $(left_null b_column)}"
  fi
  if want column_int8; then
    log "tributary_embed_column (int8)"
    fresh b_int8
    s=$(timed_sql all-MiniLM-L6-v2-int8 "SELECT tributary_embed_column('b_int8', ARRAY['description'], 'embedding', model => 'all-MiniLM-L6-v2-int8') AS n \gset")
    record "{\"bench\": \"column_int8\", $common, \"seconds\": $s, \"left_null\": $(left_null b_int8)}"
    if want column; then
      # Fidelity: per-row cosine to fp32, and top-10 retrieval overlap for 200 query rows (exact
      # search over all N rows, each model's queries against its own vectors).
      fid=$(cluster_psql -At <<'SQL'
WITH c AS (SELECT 1 - (a.embedding <=> b.embedding) AS cos FROM b_column a JOIN b_int8 b USING (package)),
q AS (SELECT a.package, a.embedding AS e32, b.embedding AS e8 FROM b_column a JOIN b_int8 b USING (package)
      ORDER BY md5(a.package) LIMIT 200),
o AS (SELECT (SELECT count(*) FROM
               (SELECT package FROM b_column t WHERE t.package <> q.package ORDER BY t.embedding <=> q.e32 LIMIT 10) x
               JOIN (SELECT package FROM b_int8 t WHERE t.package <> q.package ORDER BY t.embedding <=> q.e8 LIMIT 10) y
               USING (package)) / 10.0 AS overlap FROM q)
SELECT json_build_object('cosine_mean', (SELECT avg(cos) FROM c), 'cosine_min', (SELECT min(cos) FROM c),
  'rows_below_0_99', (SELECT count(*) FROM c WHERE cos < 0.99), 'queries', (SELECT count(*) FROM o),
  'top10_overlap_mean', (SELECT avg(overlap) FROM o), 'top10_overlap_min', (SELECT min(overlap) FROM o));
SQL
)
      record "{\"bench\": \"int8_fidelity\", $common, \"result\": $fid}"
    fi
  fi
  if want array; then
    log "tributary_embed(text[]) in chunks of 1024"
    fresh b_array
    s=$(timed_sql all-MiniLM-L6-v2 "DO \$\$
DECLARE k text[]; d text[];
BEGIN
  FOR k, d IN SELECT array_agg(package ORDER BY package), array_agg(description ORDER BY package)
              FROM (SELECT package, description, (row_number() OVER (ORDER BY package) - 1) / 1024 AS g FROM b_array) s
              GROUP BY g ORDER BY g
  LOOP
    UPDATE b_array t SET embedding = u.e FROM unnest(k, tributary_embed(d)) AS u(pk, e) WHERE t.package = u.pk;
  END LOOP;
END \$\$;")
    record "{\"bench\": \"array\", $common, \"seconds\": $s, \"left_null\": $(left_null b_array)}"
  fi
  if want row; then
    log "tributary_embed(text), one call per row"
    fresh b_row
    s=$(timed_sql all-MiniLM-L6-v2 "UPDATE b_row SET embedding = tributary_embed(description);")
    record "{\"bench\": \"row\", $common, \"seconds\": $s, \"left_null\": $(left_null b_row)}"
  fi
  if want job; then
    log "job (once, batch 256, 1 worker)"
    fresh b_job
    # Polled every 5 s: on few vCPUs a client connecting often takes CPU from the worker it measures.
    job=$(cluster_psql -At -c "SELECT tributary_job_create('b_job', '{description}', batch_size => 256)")
    while [ "$(cluster_psql -At -c "SELECT state FROM tributary.jobs WHERE id = $job")" != done ]; do sleep 5; done
    s=$(cluster_psql -At -c "SELECT extract(epoch FROM max(b.finished_at) - j.created_at)
      FROM tributary.jobs j JOIN tributary._job_batches b ON b.job_id = j.id WHERE j.id = $job GROUP BY j.created_at")
    record "{\"bench\": \"job\", $common, \"seconds\": $s, \"left_null\": $(left_null b_job)}"
    cluster_psql -c "SELECT tributary_job_drop($job)" >/dev/null
  fi
  if want python; then
    log "python pipeline (fp32)"
    fresh b_python
    line=$(.venv/bin/python benches/python_baseline.py --table b_python --threads "$THREADS" | tail -1)
    record "{\"bench\": \"python\", $common, \"left_null\": $(left_null b_python), \"result\": $line}"
  fi
  if want python_int8; then
    log "python pipeline (int8)"
    fresh b_python8
    line=$(.venv/bin/python benches/python_baseline.py --table b_python8 --threads "$THREADS" --precision int8 | tail -1)
    record "{\"bench\": \"python_int8\", $common, \"result\": $line}"
  fi
  if want naive; then
    log "naive one-row-per-call loop ($NAIVE_ROWS rows)"
    fresh b_naive
    line=$(.venv/bin/python benches/python_baseline.py --table b_naive --threads "$THREADS" --naive --limit "$NAIVE_ROWS" | tail -1)
    record "{\"bench\": \"naive\", $common, \"result\": $line}"
  fi
  if want column && want python; then
    agree=$(cluster_psql -At -c "SELECT json_build_object('min', min(1 - (a.embedding <=> b.embedding)))
      FROM b_column a JOIN b_python b USING (package)")
    record "{\"bench\": \"agreement_column_python\", $common, \"result\": $agree}"
  fi
done
cluster_stop suite
trap - EXIT

texts=$OUT/texts_sweep.txt
if want sweep || want criterion; then
  # 4,096 real descriptions (deterministic sample), one per line, newlines written as \n.
  .venv/bin/python - "$texts" <<'PY'
import sys
sys.path.insert(0, "scripts")
import debian_data as d
packages, _ = d.load_index(d.CACHE)
with open(sys.argv[1], "w") as f:
    for name in sorted(d.sample(packages, 4096)):
        f.write(packages[name][5].replace("\n", "\\n") + "\n")
PY
fi

if want sweep; then
  log "sweep: engine-only throughput against batch size and input length"
  csv=$OUT/sweep.csv
  "$BENCH_BIN" sweep --ort "$ORT_LIB" --model-dir "$MODEL_DIR" --texts "$texts" --provider cpu --threads "$THREADS" \
    --batches 1,8,32,128,512,1024 --rows 2048 --budget 2048 --label debian --csv "$csv"
  for k in 16 64 128 256; do
    "$BENCH_BIN" sweep --ort "$ORT_LIB" --model-dir "$MODEL_DIR" --texts "$texts" --provider cpu --threads "$THREADS" \
      --batches 1,8,32,128 --rows 512 --budget 2048 --fixed-tokens "$k" --label "fixed $k" --csv "$csv"
  done
fi

if want criterion; then
  log "criterion: tools/bench --bench engine"
  rm -rf target/criterion
  TRIBUTARY_ORT=$ORT_LIB TRIBUTARY_MODEL_DIR=$MODEL_DIR TRIBUTARY_TEXTS=$texts \
    cargo bench -q --manifest-path tools/bench/Cargo.toml --bench engine 2>&1 | tee "$OUT/criterion.txt"
  cp -r target/criterion "$OUT/criterion"
fi

if [ "$REPORT" = 1 ]; then
  .venv/bin/python benches/report.py "$OUT"
fi
echo "results: $OUT"
