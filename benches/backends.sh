#!/usr/bin/env bash
# Many backends before and after shared weights (benches/backends.py): private memory per
# backend, cold start, short-query latency and throughput, both in one run on one throwaway
# cluster with the release build. A benchmark: it asserts nothing.
# Usage: benches/backends.sh [BACKENDS=8] [REPEATS=3]   (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy backends-bench
cluster_start backends-bench 55443
trap 'cluster_destroy backends-bench' EXIT
.venv/bin/python scripts/debian_data.py --drop --limit 2000 >/dev/null
cluster_psql -c "CREATE EXTENSION IF NOT EXISTS tributary CASCADE"
# Reads /proc/PID/smaps_rollup of the backends: run as root or as the postgres OS user.
.venv/bin/python benches/backends.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=postgres" \
  --backends "${1:-8}" --repeats "${2:-3}"
