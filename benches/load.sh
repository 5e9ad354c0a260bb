#!/usr/bin/env bash
# Load benchmark (benches/load.py): 16 clients for 10 minutes per phase, before and after shared
# weights, arena shrinking and CPU run admission, on one throwaway cluster with tributary in
# shared_preload_libraries (the job's worker) and the release build. Writes
# benches/results/load.json and benches/load.png. A benchmark: it asserts nothing.
# Usage: benches/load.sh [MINUTES=10] [CLIENTS=16]   (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy load-bench
CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16
max_connections = 64
tributary.job_poll_interval = 200" cluster_start load-bench 55445
trap 'cluster_destroy load-bench' EXIT
.venv/bin/python scripts/debian_data.py --drop --limit 2000 >/dev/null
cluster_psql -c "CREATE EXTENSION IF NOT EXISTS tributary CASCADE"
mkdir -p benches/results
# Reads /proc/PID/smaps_rollup of the backends: run as root or as the postgres OS user.
.venv/bin/python benches/load.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=postgres" \
  --minutes "${1:-10}" --clients "${2:-16}" --phases "${PHASES:-before,after}" --out benches/results/load.json
.venv/bin/python benches/load.py --plot benches/results/load.json --png benches/load.png
