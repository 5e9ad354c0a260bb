#!/usr/bin/env bash
# The main job, on real data: set everything up, start a throwaway cluster of our own, load the
# Debian package descriptions (~64k rows), embed them inside PostgreSQL with
# tributary_embed_column, build an HNSW index, run a few semantic searches, and leave a continuous
# job (background workers: tributary is in this cluster's shared_preload_libraries) keeping the
# embeddings in step with a new package.
# Usage: scripts/demo.sh [ROWS]     (ROWS limits the rows loaded; default: all)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# The demo runs on the system's PostgreSQL 15: the other majors (built from source for the tests)
# are not needed, unless TRIBUTARY_PG_MAJORS asks for them.
TRIBUTARY_PG_MAJORS=${TRIBUTARY_PG_MAJORS:-15} bash scripts/setup.sh
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy demo
CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'" cluster_start demo 55434
trap 'cluster_stop demo' EXIT
echo "== cluster: PGHOST=$PGHOST PGPORT=$PGPORT (own data directory, socket and port)"

limit=()
[ $# -ge 1 ] && limit=(--limit "$1")
.venv/bin/python scripts/debian_data.py --drop --vector-dim 384 "${limit[@]}"

cluster_psql <<'SQL'
CREATE EXTENSION IF NOT EXISTS tributary CASCADE;
\echo == the model and the execution provider in use
SELECT model, dimension, max_length, execution_provider, intra_op_threads, ort_version FROM tributary_info();
\echo == embedding every description with tributary_embed_column
SET tributary.progress_interval = 15000;
SELECT clock_timestamp() AS t0 \gset
SELECT tributary_embed_column('debian_packages', ARRAY['description'], 'embedding') AS n \gset
SELECT :n AS rows_embedded,
       round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz)::numeric, 1) AS seconds,
       round(:n / extract(epoch FROM clock_timestamp() - :'t0'::timestamptz)::numeric) AS rows_per_s,
       (SELECT count(*) FROM debian_packages WHERE embedding IS NULL) AS left_null;
SQL

cluster_psql <<'SQL'
\echo == HNSW index (cosine)
\timing on
CREATE INDEX IF NOT EXISTS debian_packages_embedding_idx ON debian_packages USING hnsw (embedding vector_cosine_ops);
\timing off
ANALYZE debian_packages;
SQL

for q in 'tool to resize photos' 'time series database' 'play music from the command line' \
         'encrypt files with a password' 'Japanese input method'; do
  echo
  echo "== search: '$q'"
  cluster_psql -v q="$q" <<'SQL'
SELECT package, section, round((1 - (embedding <=> tributary_embed(:'q')))::numeric, 3) AS similarity,
       left(split_part(description, E'\n', 1), 70) AS summary
FROM debian_packages
ORDER BY embedding <=> tributary_embed(:'q')
LIMIT 5;
SQL
done

echo
cluster_psql <<'SQL'
\echo == a continuous job: new and changed rows are embedded by a background worker
SELECT tributary_job_create('debian_packages', '{description}', mode => 'continuous') AS job \gset
INSERT INTO debian_packages (package, source, section, description)
VALUES ('tributary-demo', 'tributary-demo', 'database',
        E'run transformer models inside PostgreSQL\nEmbeds text, rows and columns into pgvector columns in the database.');
DO $$
BEGIN
    FOR i IN 1..240 LOOP
        EXIT WHEN (SELECT embedding IS NOT NULL FROM debian_packages WHERE package = 'tributary-demo');
        PERFORM pg_sleep(0.25);
    END LOOP;
END $$;
SELECT id, state, mode, rows_done, rows_queued, rows_failed FROM tributary.jobs WHERE id = :job;
\echo == search: 'transformer models inside the database'
SELECT package, section, round((1 - (embedding <=> tributary_embed('transformer models inside the database')))::numeric, 3) AS similarity,
       left(split_part(description, E'\n', 1), 70) AS summary
FROM debian_packages
ORDER BY embedding <=> tributary_embed('transformer models inside the database')
LIMIT 3;
SELECT tributary_job_drop(:job);
SQL
