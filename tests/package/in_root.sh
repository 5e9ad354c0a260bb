#!/usr/bin/env bash
# The package test's part inside PostgreSQL 17's Debian trixie root (called by
# tests/package/test_package.sh through scripts/chroot.sh; as root). A user's steps, with apt:
#   A. apt-get install NEW (nothing else installed or downloaded: Debian's postgresql-17 and
#      postgresql-17-pgvector are installed in the root), a new cluster with shared_preload_libraries = 'tributary',
#      CREATE EXTENSION tributary CASCADE, embeddings with no settings, a job that embeds a table,
#      then apt-get purge: every file dpkg -L listed is gone and no tributary* is left under /usr;
#   B. apt-get install OLD (the previous release's package), CREATE EXTENSION at its version,
#      apt-get install NEW over it, restart, ALTER EXTENSION tributary UPDATE, the same embedding
#      as before the update, and apt-get purge again.
#
#   tests/package/in_root.sh NEW.deb OLD.deb
#
# Prints one TAP line per check ("ok N - ..." / "not ok N - ..."); exits 1 if any failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
new=${1:?usage: in_root.sh NEW.deb OLD.deb} old=${2:?old package}
pkg=postgresql-17-tributary
version=$(dpkg-deb -f "$new" Version) pversion=$(dpkg-deb -f "$old" Version)
version=${version%-*} pversion=${pversion%-*}
export PGBIN=/usr/lib/postgresql/17/bin
export PATH=$PGBIN:$PATH
# shellcheck source=scripts/cluster.sh
source "$ROOT/scripts/cluster.sh"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp /tmp/tributary-package-test.XXXXXX)
trap 'cluster_destroy pkgtest; rm -f "$log"' EXIT

n=0 failed=0
check() {  # check DESCRIPTION CMD...: one TAP line; CMD's output is shown when it fails
  local d=$1; shift
  n=$((n + 1))
  if "$@" >"$log" 2>&1; then echo "ok $n - $d"; else
    echo "not ok $n - $d"; failed=$((failed + 1)); sed 's/^/# /' "$log" | tail -40; fi
}
q() { cluster_psql -At -d "${DB:-postgres}" -c "$1"; }
is() {  # is EXPECTED SQL
  local got; got=$(q "$2") || return 1
  [ "$got" = "$1" ] || { echo "expected '$1', got '$got' from: $2"; return 1; }
}
installed_version() {  # installed_version VERSION: dpkg says the package is installed at VERSION-1
  local s; s=$(dpkg-query -W -f='${Status} ${Version}' "$pkg" 2>&1)
  [ "$s" = "install ok installed $1-1" ] || { echo "dpkg-query: $s"; return 1; }
}
apt_install() {  # apt-get install FILE: nothing but the package itself is installed or upgraded
  # (its dependencies are already in the root: nothing is downloaded)
  local out; out=$(apt-get install -y -q "$1" 2>&1); local rc=$?
  echo "$out"
  [ $rc = 0 ] || return 1
  echo "$out" | grep -qE '^(0 upgraded, 1 newly installed|1 upgraded, 0 newly installed), 0 to remove' \
    || { echo "apt-get installed or upgraded more than $pkg"; return 1; }
}
no_tributary_under_usr() {
  local left; left=$(find /usr -name '*tributary*' 2>/dev/null)
  [ -z "$left" ] || { echo "left under /usr:"; echo "$left"; return 1; }
}
purge_and_check() {  # apt-get purge; every file dpkg -L listed before is gone
  local listed missing=0 f
  listed=$(dpkg -L "$pkg") || return 1
  echo "$listed" | grep -q '/tributary.so$' || { echo "dpkg -L lists no tributary.so"; return 1; }
  apt-get purge -y -q "$pkg" || return 1
  while IFS= read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    echo "still there after purge: $f"; missing=1
  done <<<"$listed"
  if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q installed; then
    echo "dpkg still lists $pkg: $(dpkg-query -W -f='${Status}' "$pkg")"; return 1
  fi
  [ "$missing" = 0 ]
}
start_cluster() {
  cluster_destroy pkgtest
  CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16" cluster_start pkgtest 55617
}
job_embeds_table() {  # a job over 40 rows, done within 3 minutes, every row embedded
  q "CREATE TABLE docs (id int PRIMARY KEY, body text, embedding vector(384))" || return 1
  q "INSERT INTO docs SELECT i, 'document number ' || i || ' about ' || (ARRAY['cats', 'tax law', 'rivers', 'jazz'])[i % 4 + 1] FROM generate_series(1, 40) i" || return 1
  local job i state
  job=$(q "SELECT tributary_job_create('docs', '{body}', 'embedding')") || return 1
  for i in $(seq 1 180); do
    state=$(q "SELECT state FROM tributary.jobs WHERE id = $job") || return 1
    case "$state" in done|failed|cancelled) break ;; esac
    sleep 1
  done
  q "SELECT id, state, rows_done, rows_failed, last_error FROM tributary.jobs"
  [ "$state" = done ] || { echo "job $job: $state after ${i} s"; return 1; }
  is "40|40|0" "SELECT count(embedding), (SELECT rows_done FROM tributary.jobs WHERE id = $job), (SELECT rows_failed FROM tributary.jobs WHERE id = $job) FROM docs WHERE vector_dims(embedding) = 384"
}
restart_cluster() {  # its configuration stays (cluster_start writes it only after initdb)
  cluster_stop pkgtest
  cluster_start pkgtest 55617 && is "tributary" "SHOW shared_preload_libraries"
}

# Leftovers of an interrupted run (test_package.sh also purges before it starts).
dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q ' installed' && apt-get purge -y -q "$pkg" >/dev/null
cluster_destroy pkgtest

check "no tributary file under /usr before the install (the test moved setup's aside)" no_tributary_under_usr
check "Debian's postgresql-17 and postgresql-17-pgvector are installed in the root" \
  dpkg-query -W postgresql-17 postgresql-17-pgvector

# A. A fresh install.
check "apt-get install $(basename "$new"): only it is installed" apt_install "$new"
check "dpkg: $pkg $version-1 installed" installed_version "$version"
check "a new cluster with shared_preload_libraries = 'tributary' starts" start_cluster
check "CREATE EXTENSION tributary CASCADE: tributary $version and vector" \
  is "tributary $version|vector" "CREATE EXTENSION tributary CASCADE; SELECT string_agg(extname || CASE extname WHEN 'tributary' THEN ' ' || extversion ELSE '' END, '|' ORDER BY extname) FROM pg_extension WHERE extname IN ('tributary', 'vector')"
check "no settings: tributary.ort_library and tributary.model_path are empty" \
  is "|" "SELECT current_setting('tributary.ort_library') || '|' || current_setting('tributary.model_path')"
check "tributary_embed('hello') is a vector(384) of norm 1" \
  is "384|t" "SELECT vector_dims(e), abs(vector_norm(e) - 1) < 1e-4 FROM (SELECT tributary_embed('hello') e) s"
check "the model ranks: 'a kitten on a rug' nearer 'a cat sits on the mat' than 'quarterly tax report'" \
  is "t" "SELECT (tributary_embed('a cat sits on the mat') <=> tributary_embed('a kitten on a rug')) < (tributary_embed('a cat sits on the mat') <=> tributary_embed('quarterly tax report'))"
# (The model can only be the package's: the root held no other tributary file, check 3.)
check "tributary_info(): ONNX Runtime 1.31.1 from the package's directory, the default model" \
  is "1.31.1|/usr/lib/postgresql/17/lib/tributary/libonnxruntime.so|all-MiniLM-L6-v2|384" "SELECT ort_version || '|' || ort_library || '|' || model || '|' || dimension FROM tributary_info()"
check "a job embeds a 40-row table in a background worker" job_embeds_table
cluster_destroy pkgtest
check "apt-get purge removes every file dpkg -L listed" purge_and_check
check "no tributary file under /usr after the purge" no_tributary_under_usr

# B. The update from the previous release's package.
check "apt-get install $(basename "$old") (the previous release)" apt_install "$old"
check "dpkg: $pkg $pversion-1 installed" installed_version "$pversion"
check "a new cluster with shared_preload_libraries = 'tributary' starts" start_cluster
check "CREATE EXTENSION tributary CASCADE at $pversion, one embedding kept in a table" \
  is "$pversion|384" "CREATE EXTENSION tributary CASCADE; CREATE TABLE kept AS SELECT tributary_embed('an embedding made before the update') e; SELECT (SELECT extversion FROM pg_extension WHERE extname = 'tributary') || '|' || vector_dims(e) FROM kept"
check "apt-get install $(basename "$new") over it (an upgrade)" apt_install "$new"
check "dpkg: $pkg $version-1 installed" installed_version "$version"
check "the cluster restarts with the new tributary.so preloaded" restart_cluster
check "ALTER EXTENSION tributary UPDATE: $pversion to $version" \
  is "$version" "ALTER EXTENSION tributary UPDATE; SELECT extversion FROM pg_extension WHERE extname = 'tributary'"
check "after the update, the same text embeds to the same vector" \
  is "t" "SELECT (e <=> tributary_embed('an embedding made before the update')) < 1e-6 FROM kept"
cluster_destroy pkgtest
check "apt-get purge removes every file dpkg -L listed" purge_and_check
check "no tributary file under /usr after the purge" no_tributary_under_usr

echo "# $n checks in the trixie root, $failed failed"
[ "$failed" = 0 ]
