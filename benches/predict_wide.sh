#!/usr/bin/env bash
# tributary_evaluate / tributary_predict on a wide, TOASTed table (Chinook tracks with two
# vector(384) columns), the 0.1.0 functions against the installed ones, on a throwaway cluster:
# prints the markdown table that BENCHMARKS.md quotes. Reports numbers; asserts nothing about speed
# (exits 1 only if old and new results differ).
# Usage: benches/predict_wide.sh [REPS=5]    (SKIP_SETUP=1 skips scripts/setup.sh; CLUSTER and
# PORT name the throwaway cluster, default predict-bench 55439; PGBIN as in scripts/cluster.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
REPS=${1:-5}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
CLUSTER=${CLUSTER:-predict-bench}
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy "$CLUSTER"
cluster_start "$CLUSTER" "${PORT:-55439}"
trap 'cluster_destroy "$CLUSTER"' EXIT
cluster_psql -c "CREATE DATABASE chinook"
.venv/bin/python benches/predict_wide.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=chinook" --reps "$REPS"
