#!/usr/bin/env bash
# Benchmark: tributary_embed_column against the pipeline a user would write without tributary
# (ONNX Runtime's Python API + HF tokenizers, reading rows from and writing vectors back to
# PostgreSQL), same model, same texts, same thread count, in one run on one throwaway cluster.
# Reports numbers; asserts nothing about them.
# Usage: benches/embed_column.sh [ROWS=10000] [THREADS=$(nproc)]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ROWS=${1:-10000}
THREADS=${2:-$(nproc)}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy bench
cluster_start bench 55435
trap 'cluster_stop bench' EXIT

.venv/bin/python scripts/debian_data.py --drop --vector-dim 384 --limit "$ROWS" >/dev/null
cluster_psql -c "CREATE EXTENSION IF NOT EXISTS tributary CASCADE" \
  -c "DROP TABLE IF EXISTS bench_python" \
  -c "CREATE TABLE bench_python AS SELECT package, description, NULL::vector(384) AS embedding FROM debian_packages" \
  -c "ALTER TABLE bench_python ADD PRIMARY KEY (package)" \
  -c "VACUUM ANALYZE debian_packages, bench_python"

# tributary: one backend, session warmed first (model loading is excluded on both sides).
tributary_json=$(cluster_psql -At <<SQL
SET tributary.intra_op_threads = $THREADS;
SET tributary.progress_interval = 0;
SELECT tributary_embed('warm up') IS NOT NULL AS warmed \gset
SELECT sum(cardinality(tributary_tokenize(description))) AS tokens FROM debian_packages \gset
SELECT clock_timestamp() AS t0 \gset
SELECT tributary_embed_column('debian_packages', ARRAY['description'], 'embedding') AS n \gset
SELECT json_build_object('pipeline', 'tributary_embed_column', 'rows', :n, 'tokens', :tokens,
  'seconds', extract(epoch FROM clock_timestamp() - :'t0'::timestamptz), 'threads', $THREADS,
  'provider', (SELECT execution_provider FROM tributary_info()),
  'left_null', (SELECT count(*) FROM debian_packages WHERE embedding IS NULL));
SQL
)
python_json=$(.venv/bin/python benches/python_baseline.py --table bench_python --threads "$THREADS" | tail -1)

# Agreement: the two pipelines should produce the same vectors for the same rows.
agree=$(cluster_psql -At -c "SELECT round(avg(1 - (a.embedding <=> b.embedding))::numeric, 6) || ' / ' || round(min(1 - (a.embedding <=> b.embedding))::numeric, 6)
  FROM debian_packages a JOIN bench_python b USING (package)")

# tributary.max_batch_tokens sweep: engine batches of tributary_embed(text[]) over 2,000 rows.
sweep=$(for budget in 2048 4096 8192 16384 32768; do
  cluster_psql -At <<SQL
SET tributary.intra_op_threads = $THREADS;
SET tributary.max_batch_tokens = $budget;
SELECT tributary_embed('warm up') IS NOT NULL AS warmed \gset
SELECT array_agg(description ORDER BY package) AS texts FROM (SELECT * FROM debian_packages ORDER BY package LIMIT 2000) s \gset
SELECT clock_timestamp() AS t0 \gset
SELECT cardinality(tributary_embed(:'texts'::text[])) AS n \gset
SELECT $budget || ' ' || :n || ' ' || extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);
SQL
done)

.venv/bin/python - "$tributary_json" "$python_json" "$agree" "$sweep" <<'PY'
import json, os, platform, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"machine: {cpu}, {os.cpu_count()} vCPUs; threads: {t['threads']}; provider: {t['provider']}")
print(f"rows: {t['rows']} (left NULL: {t['left_null']}); tokens (tributary_tokenize): {t['tokens']}; python counted: {p['tokens']}")
print()
print("| pipeline | rows | seconds | rows/s | tokens/s | vs python |")
print("|---|---:|---:|---:|---:|---:|")
base = p["rows"] / p["seconds"]
for name, r in (("tributary_embed_column", t), ("python: onnxruntime + tokenizers + psycopg", p)):
    rps = r["rows"] / r["seconds"]
    tps = int(r["tokens"]) / r["seconds"]
    print(f"| {name} | {r['rows']} | {r['seconds']:.1f} | {rps:.1f} | {tps:.0f} | {rps / base:.2f}x |")
print()
print(f"cosine between the two pipelines' vectors (mean / min): {sys.argv[3]}")
print()
print("| tributary.max_batch_tokens | rows | seconds | rows/s |")
print("|---:|---:|---:|---:|")
for line in sys.argv[4].split("\n"):
    if line.strip():
        b, n, sec = line.split()
        print(f"| {b} | {n} | {float(sec):.1f} | {int(n) / float(sec):.1f} |")
print()
if "read_s" in p or "tokenize_s" in p:
    print("python time split: " + ", ".join(f"{k[:-2]} {p[k]:.1f}s" for k in ("read_s", "tokenize_s", "infer_s", "write_s")))
PY
