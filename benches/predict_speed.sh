#!/usr/bin/env bash
# Predictions in time, the speed half: one row's tributary_predict (p50/p99, and the whole-table
# path of 0.11.0 as the baseline in the same run), a predict job's new-row latency and the rows
# each refresh writes, and training time and peak memory, at 10k and 100k films (scaled by
# repetition), on a throwaway cluster. Prints a markdown table; writes
# benches/results/predict_speed.json. Reports numbers; asserts nothing. See benches/predict_speed.py.
# Usage: benches/predict_speed.sh [SIZES=10000,100000]    (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SIZES=${1:-10000,100000}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
.venv/bin/pip install -q -r benches/requirements.txt
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
NAME=predict-speed
cluster_destroy "$NAME"
CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'" cluster_start "$NAME" 55487
trap 'cluster_destroy "$NAME"' EXIT
cluster_psql -c "CREATE DATABASE speed"
cluster_psql -d speed -c "CREATE EXTENSION tributary CASCADE"
.venv/bin/python benches/predict_speed.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=speed" --sizes "$SIZES"
