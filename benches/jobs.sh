#!/usr/bin/env bash
# Benchmark: a job in a background worker against tributary_embed_column on the same rows (Debian
# package descriptions), same model, same ONNX Runtime threads, in one run on one throwaway
# cluster with tributary in shared_preload_libraries. Reports numbers; asserts nothing.
# Usage: benches/jobs.sh [ROWS=10000] [THREADS=$(nproc)] [BATCH_SIZE=256]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ROWS=${1:-10000}
THREADS=${2:-$(nproc)}
BATCH=${3:-256}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy jobbench
CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
tributary.intra_op_threads = $THREADS
tributary.job_poll_interval = 100" cluster_start jobbench 55436
trap 'cluster_stop jobbench' EXIT

.venv/bin/python scripts/debian_data.py --drop --limit "$ROWS" >/dev/null
cluster_psql -c "CREATE EXTENSION IF NOT EXISTS tributary CASCADE" \
  -c "DROP TABLE IF EXISTS by_column, by_job" \
  -c "CREATE TABLE by_column AS SELECT package, description, NULL::vector(384) AS embedding FROM debian_packages" \
  -c "CREATE TABLE by_job AS SELECT * FROM by_column" \
  -c "ALTER TABLE by_column ADD PRIMARY KEY (package)" \
  -c "ALTER TABLE by_job ADD PRIMARY KEY (package)" \
  -c "VACUUM ANALYZE by_column, by_job"

column_s=$(cluster_psql -At <<SQL
SET tributary.intra_op_threads = $THREADS;
SET tributary.progress_interval = 0;
SELECT tributary_embed('warm up') IS NOT NULL AS warmed \gset
SELECT clock_timestamp() AS t0 \gset
SELECT tributary_embed_column('by_column', ARRAY['description'], 'embedding') AS n \gset
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz);
SQL
)

# The job: from tributary_job_create (queue filled, worker started, model loaded in the worker)
# to its last batch's commit, by the server's clock. Polled every 5 s only: on 2 vCPUs a client
# connecting several times a second takes CPU from the worker it measures.
job=$(cluster_psql -At -c "SELECT tributary_job_create('by_job', '{description}', batch_size => $BATCH)")
while [ "$(cluster_psql -At -c "SELECT state FROM tributary.jobs WHERE id = $job")" != done ]; do sleep 5; done
read -r job_rows wall batch_s first_to_last embed_s <<<"$(cluster_psql -At -F ' ' -c "
  SELECT j.rows_done,
         (SELECT extract(epoch FROM max(finished_at) - j.created_at) FROM tributary._job_batches WHERE job_id = j.id),
         (SELECT sum(ms) / 1000 FROM tributary._job_batches WHERE job_id = j.id),
         (SELECT extract(epoch FROM max(finished_at) - j.started_at) FROM tributary._job_batches WHERE job_id = j.id),
         (SELECT sum(embed_ms) / 1000 FROM tributary._job_batches WHERE job_id = j.id)
  FROM tributary.jobs j WHERE j.id = $job")"
agree=$(cluster_psql -At -c "SELECT round(min(1 - (a.embedding <=> b.embedding))::numeric, 6)
  FROM by_column a JOIN by_job b USING (package)")
left=$(cluster_psql -At -c "SELECT (SELECT count(*) FROM by_column WHERE embedding IS NULL) + (SELECT count(*) FROM by_job WHERE embedding IS NULL)")

.venv/bin/python - "$ROWS" "$THREADS" "$BATCH" "$column_s" "$job_rows" "$wall" "$first_to_last" "$batch_s" "$agree" "$left" "$embed_s" <<'PY'
import os, platform, sys
rows, threads, batch, col_s, job_rows, job_wall, job_steady, job_batches, agree, left, embed_s = sys.argv[1:]
rows, job_rows = int(rows), int(job_rows)
col_s, job_wall, job_steady, job_batches = map(float, (col_s, job_wall, job_steady, job_batches))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"machine: {cpu}, {os.cpu_count()} vCPUs; ONNX Runtime threads: {threads}; job batch_size: {batch}")
print(f"rows: {rows}; rows left NULL: {left}; min cosine job vs embed_column: {agree}")
print()
print("| pipeline | rows | seconds | rows/s | vs tributary_embed_column |")
print("|---|---:|---:|---:|---:|")
base = rows / col_s
for name, n, s in (("tributary_embed_column (one backend, session warmed)", rows, col_s),
                   ("job, create to done (queue fill, worker start, model load included)", job_rows, job_wall),
                   ("job, picked by its worker to last commit (model load included)", job_rows, job_steady),
                   ("job, sum of batch transactions", job_rows, job_batches)):
    print(f"| {name} | {n} | {s:.1f} | {n / s:.1f} | {n / s / base:.3f}x |")
print()
print(f"job: {float(embed_s):.1f} s of {job_batches:.1f} s in batch transactions were tokenizing and running the model")
PY
