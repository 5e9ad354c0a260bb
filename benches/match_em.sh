#!/usr/bin/env bash
# Issue 36's matching benchmark in one command: tributary_match as a new user calls it (no labels, no
# threshold; min_precision => 0.99 when the installed version has it; a labelled variant; the oracle
# best-threshold F1 over its own scores) against recordlinkage 0.16 (ECM, logistic regression) and
# Splink's EM (DuckDB), same run, on a throwaway cluster. Prints markdown tables; writes
# benches/results/match_em_DATASET.json. Reports numbers; asserts nothing. See benches/match_em.py.
# Usage: benches/match_em.sh [DATASET|all] [SKIP=plain,minprec,oracle,labels,dedup,rl,splink]
#   DATASET: febrl4_10 febrl4_5 febrl3 debian_suites debian_sparse (all five: `all`)
#   The Debian sets are real (bookworm x trixie package records, scripts/debian_em_data.py) and read the
#   apt lists offline: the host's bookworm lists and the trixie root that scripts/setup.sh makes.
#   py_entitymatching's restaurant and bibliography sets, run by an earlier version, are not used: they
#   look like the held-out benchmarks of issue 36 (see scripts/em_data.py).
#   Run the tributary side under the install lock: flock -s /tmp/tributary-install.lock bash benches/match_em.sh all
#   It measures the tributary installed in PostgreSQL 15: scripts/setup.sh (which builds and installs the
#   working tree) runs only when none is installed or SETUP=1. PORT (55495) picks the cluster's port.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WHAT=${1:-all}
SKIP=${2:-}
case "$WHAT" in
  all) SETS="febrl4_10 febrl4_5 febrl3 debian_suites debian_sparse" ;;
  febrl4_10|febrl4_5|febrl3|debian_suites|debian_sparse) SETS=$WHAT ;;
  *) echo "unknown dataset $WHAT (febrl4_10 febrl4_5 febrl3 debian_suites debian_sparse all)" >&2; exit 2 ;;
esac
if [ "${SETUP:-0}" = 1 ] || [ ! -f /usr/share/postgresql/15/extension/tributary.control ]; then
  bash scripts/setup.sh >/dev/null
fi
# The baselines' packages (pinned in benches/requirements.txt: recordlinkage, scikit-learn, splink, duckdb).
.venv/bin/pip install -q -r benches/requirements.txt || echo "pip install -r benches/requirements.txt failed: the run goes on with what is installed" >&2
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
NAME=match-em
cluster_destroy "$NAME"
cluster_start "$NAME" "${PORT:-55495}"
# the server log outlives the cluster (a crashed backend is diagnosed there)
trap 'cp "/tmp/tributary-$NAME/server.log" /tmp/match_em_server.log 2>/dev/null; cluster_destroy "$NAME"' EXIT
cluster_psql -c "CREATE DATABASE matchem"
for D in $SETS; do
  .venv/bin/python benches/match_em.py "$D" --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=matchem" --skip "$SKIP"
done
