#!/usr/bin/env bash
# Priority benchmark (benches/priority.py): one-sentence queries, 64-text bulk calls and a running
# job on one throwaway cluster (tributary in shared_preload_libraries, the release build), phase
# by phase: bulk alone, no priorities, priorities without a kept slot, the defaults. Writes
# benches/results/priority.{json,txt} and benches/priority.png. A benchmark: it asserts nothing.
# Usage: benches/priority.sh [SECONDS=120] [BULK_CLIENTS=8]   (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy priority-bench
CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16
max_connections = 64
tributary.job_poll_interval = 200" cluster_start priority-bench 55446
trap 'cluster_destroy priority-bench' EXIT
cluster_psql -c "CREATE EXTENSION IF NOT EXISTS tributary CASCADE"
mkdir -p benches/results
.venv/bin/python benches/priority.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=postgres" \
  --seconds "${1:-120}" --bulk "${2:-8}" ${PHASES:+--phases "$PHASES"} --out benches/results/priority.json \
  | tee benches/results/priority.txt
.venv/bin/python benches/priority.py --plot benches/results/priority.json --png benches/priority.png
