#!/usr/bin/env bash
# One PostgreSQL major's test steps, called by scripts/test.sh. They run on the host (15, 16, 18)
# or inside PostgreSQL 17's Debian trixie root (scripts/pg17_chroot.sh, through scripts/chroot.sh,
# which mounts this checkout at the same path), so they use only that major's own binaries.
#
#   scripts/major_steps.sh STEP MAJOR PG_CONFIG
#
# STEP is one of:
#   clippy   cargo clippy -D warnings with that major's Cargo feature (pgMAJOR)
#   golden   the SQL golden tests (tests/pg_regress, pg_regress of that major) on a throwaway
#            cluster (port 55400+MAJOR); on every major but 15 (whose release build setup
#            installed) the debug build of the extension is installed first
#   jobs     the update from 0.1.0, dump and restore with a job, the jobs' crash test, and the
#            hostile search_path, hostile types and context trust tests
#            (tests/integration/test_upgrade.py, test_dump_restore.py, test_jobs.py's crash test,
#            test_search_path.py, test_hostile_types.py, test_context_trust.py) on a cluster with tributary in
#            shared_preload_libraries (port 55500+MAJOR)
#   pgrx     the in-backend tests (#[pg_test]), cargo pgrx test pgMAJOR
#
# Environment: TRIBUTARY_PYTHON, a Python with psycopg 3 and pytest (default: the checkout's
# .venv/bin/python); TRIBUTARY_COUNTS, a file to which each step appends one line
# "MAJOR<TAB>STEP<TAB>N" with the number of tests that ran (passed or failed), read by test.sh.
# Exit status: that of the tests.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
step=${1:?usage: major_steps.sh STEP MAJOR PG_CONFIG} major=${2:?major} pgc=${3:?pg_config}
[ -x "$pgc" ] || { echo "major_steps.sh: no PostgreSQL $major: $pgc is missing (scripts/setup.sh provides it)" >&2; exit 1; }
export PATH="$HOME/.cargo/bin:$PATH"
PGBIN=$("$pgc" --bindir)
export PATH="$PGBIN:$PATH"  # psql and pg_dump of this major
python=${TRIBUTARY_PYTHON:-$ROOT/.venv/bin/python}
counts=${TRIBUTARY_COUNTS:-/dev/null}
source scripts/cluster.sh
source scripts/test_counts.sh
log=$(mktemp /tmp/tributary-major-steps.XXXXXX)
trap 'rm -f "$log"' EXIT

count() {  # count N: records that N tests ran in this step
  printf '%s\t%s\t%s\n' "$major" "$step" "${1:-0}" >>"$counts"
}

step_golden() {
  if [ "$major" != 15 ]; then
    cargo pgrx install --pg-config "$pgc" >/dev/null || return 1
  fi
  local name="test$major" out rc tests pg_regress
  cluster_destroy "$name"
  cluster_start "$name" "$((55400 + major))" || return 1
  out=/tmp/tributary-$name/regress
  mkdir -p "$out"
  [ "$(id -u)" = 0 ] && chown postgres "$out"
  cluster_psql -c "CREATE DATABASE tributary_regress"
  tests=$(cd tests/pg_regress/sql && ls *.sql | sed 's/\.sql$//' | grep -v '^setup$' | tr '\n' ' ')
  pg_regress=$("$pgc" --pkglibdir)/pgxs/src/test/regress/pg_regress
  # --bindir: psql of that major (the PyPI build of 16 was configured for another prefix).
  # shellcheck disable=SC2086
  "$pg_regress" --bindir="$PGBIN" --use-existing --host="$PGHOST" --port="$PGPORT" --user=postgres \
    --dbname=tributary_regress --inputdir=tests/pg_regress --outputdir="$out" setup $tests | tee "$log"
  rc=${PIPESTATUS[0]}
  count "$(tests_ran pg_regress "$log")"
  [ $rc -ne 0 ] && [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"
  cluster_destroy "$name"
  return $rc
}

step_jobs() {
  local name="jobs$major" rc
  cluster_destroy "$name"
  CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16" cluster_start "$name" "$((55500 + major))" || return 1
  cluster_psql -c "CREATE DATABASE tributary_jobs"
  TRIBUTARY_JOBS_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=tributary_jobs" \
  TRIBUTARY_JOBS_PGDATA=/tmp/tributary-$name/data TRIBUTARY_PGBIN=$PGBIN \
    "$python" -m pytest -q -p no:cacheprovider tests/integration/test_upgrade.py tests/integration/test_dump_restore.py \
      "tests/integration/test_jobs.py::test_crash_kill9_and_immediate_stop_embed_every_row_exactly_once" \
      tests/integration/test_search_path.py tests/integration/test_hostile_types.py tests/integration/test_context_trust.py | tee "$log"
  rc=${PIPESTATUS[0]}
  count "$(tests_ran pytest "$log")"
  cluster_destroy "$name"
  return $rc
}

step_pgrx() {  # cargo pgrx test refuses to run initdb as root: --runas.
  local args=("pg$major") src=$ROOT rc
  if [ "$(id -u)" = 0 ]; then
    args+=(--runas postgres --pgdata "/tmp/tributary-pgrx-test-$major")
    # The postgres user must be able to read the crate; a checkout under a private directory
    # (such as /root) is copied to /tmp first, build outputs left behind.
    if ! sudo -u postgres test -r "$ROOT/Cargo.toml"; then
      src=/tmp/tributary-pgrx-src-$major
      rm -rf "$src" && mkdir -p "$src"
      tar -C "$ROOT" --exclude=./target --exclude=./.venv -cf - . | tar -C "$src" -xf -
      chmod -R a+rX "$src"
    fi
  fi
  rm -rf "/tmp/tributary-pgrx-test-$major"
  # On 15 this installs the debug (pg_test) build into the system's PostgreSQL: test.sh puts back
  # what setup installed.
  (cd "$src" && cargo pgrx test "${args[@]}") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count "$(tests_ran cargo "$log")"
  return $rc
}

case "$step" in
  clippy) cargo clippy -p tributary --no-default-features --features "pg$major" --all-targets -- -D warnings ;;
  golden) step_golden ;;
  jobs) step_jobs ;;
  pgrx) step_pgrx ;;
  *) echo "major_steps.sh: unknown step $step" >&2; exit 2 ;;
esac
