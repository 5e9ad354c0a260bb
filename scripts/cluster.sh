# Throwaway PostgreSQL 15 cluster helpers. Source this file, then:
#   cluster_start NAME PORT   -> initdb (first time) + start; exports PGHOST, PGPORT, PGUSER, PGDATABASE
#   cluster_stop NAME         -> stop (fast)
#   cluster_psql ARGS...      -> psql against the running cluster, ON_ERROR_STOP
# The cluster lives in /tmp/tributary-NAME (data in ./data, socket in ./sock), owned by the
# postgres OS user (initdb refuses to run as root). It never touches the system's clusters.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

_as_pg() {
  if [ "$(id -u)" = 0 ]; then sudo -u postgres -- "$@"; else "$@"; fi
}

cluster_start() {
  local name=$1 port=$2
  local base=/tmp/tributary-$name
  mkdir -p "$base/sock"
  if [ "$(id -u)" = 0 ]; then chown -R postgres:postgres "$base"; fi
  if [ ! -f "$base/data/PG_VERSION" ]; then
    _as_pg "$PGBIN/initdb" -D "$base/data" -U postgres -A trust --no-sync >"$base/initdb.log" 2>&1 \
      || { cat "$base/initdb.log"; return 1; }
    cat >>"$base/data/postgresql.conf" <<CONF
listen_addresses = ''
port = $port
unix_socket_directories = '$base/sock'
fsync = off
shared_buffers = 512MB
max_wal_size = 4GB
maintenance_work_mem = 1GB
${CLUSTER_EXTRA_CONF:-}
CONF
  fi
  if ! _as_pg "$PGBIN/pg_ctl" -D "$base/data" status >/dev/null 2>&1; then
    _as_pg "$PGBIN/pg_ctl" -D "$base/data" -l "$base/server.log" -w -t 60 start >/dev/null \
      || { tail -50 "$base/server.log"; return 1; }
  fi
  export PGHOST=$base/sock PGPORT=$port PGUSER=postgres PGDATABASE=postgres
}

cluster_stop() {
  local base=/tmp/tributary-$1
  _as_pg "$PGBIN/pg_ctl" -D "$base/data" -m fast -w stop >/dev/null 2>&1 || true
}

cluster_destroy() {
  cluster_stop "$1"
  rm -rf "/tmp/tributary-$1"
}

cluster_psql() {
  psql -X -v ON_ERROR_STOP=1 -q "$@"
}
