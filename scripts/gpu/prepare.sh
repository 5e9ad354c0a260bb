#!/usr/bin/env bash
# Runs HERE (the build machine, no GPU needed): builds and packs everything the GPU machine needs
# for scripts/gpu/run.sh into parts small enough for one `run` call each, and prints the calls.
#
#   1. tools/bench in release (tributary-bench: the engine outside PostgreSQL);
#   2. ort/lib-gpu/ (onnxruntime-gpu 1.31.1: scripts/gpu/setup_gpu.sh) and the default model
#      ort/models/all-MiniLM-L6-v2 (scripts/setup.sh);
#   3. .gpu/texts/debian.txt: 16,384 real Debian package descriptions (scripts/gpu/texts.py);
#   4. one tar of those, xz-compressed, split into .gpu/carry/part.NN of PART_MIB MiB (default 56:
#      a call carries at most 64 MiB including the git working tree) plus .gpu/carry/manifest
#      (sha256 of every part and of the whole archive).
# The bge-base-shaped model (random weights, ~440 MB fp32 + ~220 MB fp16, ~8 more parts) is NOT
# packed: run.sh generates it on the device with ort/scripts/random_bert.py and export_model.py
# under /opt/torch/.venv's python (onnx, onnxruntime 1.30 with its transformer optimizer, numpy,
# safetensors), which takes about a minute there instead of eight extra calls.
# Idempotent: the archive is rebuilt only when one of its inputs changed (size + mtime stamp).
# Usage: scripts/gpu/prepare.sh [--force]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PART_MIB=${PART_MIB:-56}
ORT_VERSION=1.31.1
CARRY=.gpu/carry
log() { printf '\n== %s\n' "$*"; }

log "tools/bench (release)"
(cd tools/bench && nice cargo build --release -j 2 2>&1 | grep -E '^(warning|error)|Finished' || true)
[ -x tools/bench/target/release/tributary-bench ] || { echo "prepare: tools/bench did not build" >&2; exit 1; }

log "onnxruntime-gpu $ORT_VERSION into ort/lib-gpu"
bash scripts/gpu/setup_gpu.sh | grep -v '^  tributary\.' || true
[ -f ort/models/all-MiniLM-L6-v2/tributary.json ] || { echo "prepare: no ort/models/all-MiniLM-L6-v2 (run scripts/setup.sh)" >&2; exit 1; }

log "texts: real Debian package descriptions"
[ -s .gpu/texts/debian.txt ] || .venv/bin/python scripts/gpu/texts.py .gpu/texts/debian.txt --limit 16384
wc -l .gpu/texts/debian.txt

FILES=(tools/bench/target/release/tributary-bench
       "ort/lib-gpu/libonnxruntime.so.$ORT_VERSION" ort/lib-gpu/libonnxruntime_providers_shared.so
       ort/lib-gpu/libonnxruntime_providers_cuda.so ort/lib-gpu/libonnxruntime_providers_tensorrt.so
       ort/models/all-MiniLM-L6-v2/model.onnx ort/models/all-MiniLM-L6-v2/model_fp16.onnx
       ort/models/all-MiniLM-L6-v2/tokenizer.json ort/models/all-MiniLM-L6-v2/tributary.json
       .gpu/texts/debian.txt)
stamp=$(stat -c '%n %s %Y' "${FILES[@]}" | sha256sum | cut -c1-16)
if [ "${1:-}" = --force ] || [ ! -f "$CARRY/manifest" ] || ! grep -q "^stamp $stamp$" "$CARRY/manifest"; then
  log "packing $(du -ch "${FILES[@]}" | tail -n1 | cut -f1) into $PART_MIB MiB parts (xz -6; a few minutes on 2 cores)"
  rm -rf "$CARRY"; mkdir -p "$CARRY"
  started=$(date +%s)
  tar -cf - "${FILES[@]}" | nice xz -T2 -6 -c | split -b "${PART_MIB}M" -d -a 2 - "$CARRY/part."
  {
    echo "stamp $stamp"
    echo "archive $(cat "$CARRY"/part.* | sha256sum | cut -d' ' -f1)"
    (cd "$CARRY" && sha256sum part.* | awk '{print "part", $2, $1}')
  } > "$CARRY/manifest.tmp"
  mv "$CARRY/manifest.tmp" "$CARRY/manifest"
  echo "packed in $(( $(date +%s) - started )) s"
else
  log "packed archive is up to date ($CARRY/manifest)"
fi
ls -l "$CARRY"

tree_kib=$(git ls-files -co --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -n1 | cut -f1)
echo "git working tree (tracked + untracked, not ignored): ${tree_kib} KiB; a part is $PART_MIB MiB"
if [ $(( tree_kib / 1024 + PART_MIB + 1 )) -gt 64 ]; then
  echo "prepare: WARNING: working tree + one part exceed 64 MiB; rerun with a smaller PART_MIB" >&2
fi

parts=$(cd "$CARRY" && ls part.* | wc -l)
log "the GPU check: $(( parts + 4 )) \`run\` calls, back to back (the machine is given back after 30 s idle, and"
echo "   then everything carried so far is lost: start again from the first call)"
n=1
for p in $(cd "$CARRY" && ls part.*); do
  echo "$n. run(command=\"bash scripts/gpu/run.sh receive\", carry=[\"$CARRY/manifest\", \"$CARRY/$p\"], timeout_s=300)"
  n=$((n + 1))
done
cat <<EOF
   (the last receive unpacks everything, generates the bge-base-shaped model and prints the machine)
$n. run(command="bash scripts/gpu/run.sh check", timeout_s=600)           # cosine vs CPU fp32, both models
$((n + 1)). run(command="bash scripts/gpu/run.sh sweep-minilm", timeout_s=600)    # GPU throughput, all-MiniLM-L6-v2
$((n + 2)). run(command="bash scripts/gpu/run.sh sweep-bge", timeout_s=600)       # GPU throughput, bge-base-shaped
$((n + 3)). run(command="bash scripts/gpu/run.sh cpu", timeout_s=600)             # same-run CPU baseline, 16 cores
Each call writes its Markdown and CSV under \$OUT (and keeps a cumulative copy in .gpu/results/ on
the device: every call's \$OUT also has report.md and sweep.csv with all results so far).
EOF
