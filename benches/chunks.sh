#!/usr/bin/env bash
# Chunked search against the truncated single vector on Debian's manual pages (benches/chunks.py):
# prints the table that BENCHMARKS.md quotes. A benchmark: it asserts nothing.
# Usage: benches/chunks.sh [DOCS=60]   (SKIP_SETUP=1 skips scripts/setup.sh; CLUSTER and PORT name
# the throwaway cluster, default chunks-bench 55441)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
# man and groff render the pages (Debian's man-db and groff-base).
command -v man >/dev/null && command -v groff >/dev/null || {
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq man-db groff-base >/dev/null; }
source scripts/cluster.sh
CLUSTER=${CLUSTER:-chunks-bench}
chmod -R a+rX "$ROOT" 2>/dev/null || true
cluster_destroy "$CLUSTER"
cluster_start "$CLUSTER" "${PORT:-55441}"
trap 'cluster_destroy "$CLUSTER"' EXIT
cluster_psql -c "CREATE DATABASE chunks" -d postgres
cluster_psql -d chunks -c "CREATE EXTENSION tributary CASCADE"
.venv/bin/python benches/chunks.py --dsn "host=$PGHOST port=$PGPORT user=postgres dbname=chunks" --docs "${1:-60}"
