#!/usr/bin/env bash
# Chinook genre prediction from neighbours, with and without foreign-key context, on a throwaway
# cluster: prints the markdown table that BENCHMARKS.md quotes. Reports numbers; asserts nothing.
# Usage: benches/chinook.sh [SEEDS=0,1,2] [K=10]    (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SEEDS=${1:-0,1,2}
K=${2:-10}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy chinook-bench
cluster_start chinook-bench 55436
trap 'cluster_stop chinook-bench' EXIT
cluster_psql -c "CREATE DATABASE chinook"
.venv/bin/python benches/chinook_predict.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=chinook" \
  --seeds "$SEEDS" --k "$K"
