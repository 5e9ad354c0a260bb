#!/usr/bin/env bash
# Models that learn: tributary_train (GBDT over k-NN votes, a TF-IDF model, the as-of label history
# of rows related through foreign keys, typed columns) against the baselines a data scientist would
# write with the same information (majority class, TF-IDF + logistic regression, a GBDT stack over
# out-of-fold text probabilities, hand-built as-of history per foreign-key path and the columns),
# forward in time, all in one command on a throwaway cluster. Prints a markdown table; writes
# benches/results/learn_DATASET.json. Reports numbers; asserts nothing. See benches/learn.py.
# Usage: benches/learn.sh films|lahman|lahman-100k|chinook|chinook-basket|cold-pynews [K=10]    (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DATASET=${1:?usage: benches/learn.sh films|lahman|lahman-100k|chinook|chinook-basket|cold-pynews [K]}
K=${2:-10}
case "$DATASET" in
  films) PORT=55481 ;;
  lahman) PORT=55482 ;;
  lahman-100k) PORT=55485 ;;
  chinook) PORT=55483 ;;
  chinook-basket) PORT=55484 ;;
  cold-pynews) PORT=55486 ;;
  *) echo "unknown dataset $DATASET (films, lahman, lahman-100k, chinook, chinook-basket, cold-pynews)" >&2; exit 2 ;;
esac
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
# The baselines' packages and the data (pinned in benches/requirements.txt).
.venv/bin/pip install -q -r benches/requirements.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
NAME=learn-$DATASET
cluster_destroy "$NAME"
cluster_start "$NAME" "$PORT"
trap 'cluster_destroy "$NAME"' EXIT
cluster_psql -c "CREATE DATABASE learn"
.venv/bin/python benches/learn.py "$DATASET" --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=learn" --k "$K"
