#!/usr/bin/env bash
# Past one server (benches/shards.py): a coordinator and two shard clusters on this machine (the
# release build, tributary in shared_preload_libraries everywhere), on 1 and then 2 shards:
# embedding the coordinator's table with tributary_embed_column there against a job that runs on
# the shards, and search latency through the coordinator against one server. Writes
# benches/results/shards.{json,txt}. A benchmark: it asserts nothing.
# Usage: benches/shards.sh [ROWS=8000]   (SKIP_SETUP=1 skips scripts/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
source scripts/cluster.sh
chmod -R a+rX "$ROOT" 2>/dev/null || true
names=(shards-bench-coord shards-bench-1 shards-bench-2)
ports=(55471 55472 55473)
cleanup() { for n in "${names[@]}"; do cluster_destroy "$n"; done; }
trap cleanup EXIT
for i in 0 1 2; do
  cluster_destroy "${names[$i]}"
  CLUSTER_EXTRA_CONF="shared_preload_libraries = 'tributary'
max_worker_processes = 16
tributary.job_poll_interval = 200" cluster_start "${names[$i]}" "${ports[$i]}"
done
dsn() { echo "host=/tmp/tributary-$1/sock port=$2 user=postgres dbname=postgres"; }
mkdir -p benches/results
.venv/bin/python benches/shards.py --coord "$(dsn "${names[0]}" "${ports[0]}")" \
  --shards "$(dsn "${names[1]}" "${ports[1]}"),$(dsn "${names[2]}" "${ports[2]}")" \
  --sockets "/tmp/tributary-${names[1]}/sock:${ports[1]},/tmp/tributary-${names[2]}/sock:${ports[2]}" \
  --rows "${1:-8000}" --out benches/results/shards.json | tee benches/results/shards.txt
