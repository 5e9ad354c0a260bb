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
#      (sha256 of every part and of the whole archive);
#   5. a relocatable PostgreSQL 15 (this machine's binaries, pgvector, the installed tributary.so
#      and extension SQL, the non-glibc libraries they link) for run.sh's `pg` phase: its own
#      archive, .gpu/carry/pg.NN (xz -1, one part of ~25 MiB), in the same manifest.
# The bge-base-shaped model (random weights, ~440 MB fp32 + ~220 MB fp16, ~8 more parts) is NOT
# packed: run.sh generates it on the device with ort/scripts/random_bert.py and export_model.py
# under /opt/torch/.venv's python (onnx, onnxruntime 1.30 with its transformer optimizer, numpy,
# safetensors), which takes about a minute there instead of eight extra calls.
# Idempotent: the archive is rebuilt only when one of its inputs changed (size + mtime stamp).
# Usage: scripts/gpu/prepare.sh [--force]
#   GPU_PREPARE_PG_ONLY=1 rebuilds only the PostgreSQL parts (pg.NN), leaving part.NN as packed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PART_MIB=${PART_MIB:-56}
ORT_VERSION=1.31.1
CARRY=.gpu/carry
log() { printf '\n== %s\n' "$*"; }

mkdir -p "$CARRY"
if [ "${GPU_PREPARE_PG_ONLY:-0}" = 1 ]; then
  log "GPU_PREPARE_PG_ONLY=1: tools/bench, ort/lib-gpu, texts and part.NN left as they are"
  grep -E '^(stamp|archive|part) ' "$CARRY/manifest" > "$CARRY/lines.main"
else
  log "tools/bench (release)"
  (cd tools/bench && nice cargo build --release -j 2 2>&1 | grep -E '^(warning|error)|Finished' || true)
  [ -x target/release/tributary-bench ] || { echo "prepare: tools/bench did not build" >&2; exit 1; }

  log "onnxruntime-gpu $ORT_VERSION into ort/lib-gpu"
  bash scripts/gpu/setup_gpu.sh | grep -v '^  tributary\.' || true
  [ -f ort/models/all-MiniLM-L6-v2/tributary.json ] || { echo "prepare: no ort/models/all-MiniLM-L6-v2 (run scripts/setup.sh)" >&2; exit 1; }

  log "texts: real Debian package descriptions"
  [ -s .gpu/texts/debian.txt ] || .venv/bin/python scripts/gpu/texts.py .gpu/texts/debian.txt --limit 16384
  wc -l .gpu/texts/debian.txt

  FILES=(target/release/tributary-bench
         "ort/lib-gpu/libonnxruntime.so.$ORT_VERSION" ort/lib-gpu/libonnxruntime_providers_shared.so
         ort/lib-gpu/libonnxruntime_providers_cuda.so ort/lib-gpu/libonnxruntime_providers_tensorrt.so
         ort/models/all-MiniLM-L6-v2/model.onnx ort/models/all-MiniLM-L6-v2/model_fp16.onnx
         ort/models/all-MiniLM-L6-v2/tokenizer.json ort/models/all-MiniLM-L6-v2/tributary.json
         .gpu/texts/debian.txt)
  stamp=$(stat -c '%n %s %Y' "${FILES[@]}" | sha256sum | cut -c1-16)
  if [ "${1:-}" = --force ] || [ ! -f "$CARRY/manifest" ] || ! grep -q "^stamp $stamp$" "$CARRY/manifest"; then
    log "packing $(du -ch "${FILES[@]}" | tail -n1 | cut -f1) into $PART_MIB MiB parts (xz -6; a few minutes on 2 cores)"
    rm -f "$CARRY"/part.*
    started=$(date +%s)
    tar -cf - "${FILES[@]}" | nice xz -T2 -6 -c | split -b "${PART_MIB}M" -d -a 2 - "$CARRY/part."
    {
      echo "stamp $stamp"
      echo "archive $(cat "$CARRY"/part.* | sha256sum | cut -d' ' -f1)"
      (cd "$CARRY" && sha256sum part.* | awk '{print "part", $2, $1}')
    } > "$CARRY/lines.main"
    echo "packed in $(( $(date +%s) - started )) s"
  else
    log "packed archive is up to date ($CARRY/manifest)"
    grep -E '^(stamp|archive|part) ' "$CARRY/manifest" > "$CARRY/lines.main"
  fi
fi

# 5. A relocatable PostgreSQL 15 for run.sh's `pg` phase (tributary_embed_column through
#    PostgreSQL on the GPU): this machine's PG 15 binaries, the modules (pgvector, plpgsql,
#    tributary.so as `cargo pgrx install --release` left it, debug info stripped), the share dir
#    (extension SQL of vector and tributary, catalogs, tsearch data; not share/tributary/models nor
#    lib/tributary/: the model and the GPU ONNX Runtime come from the main archive) and the
#    shared libraries they need apart from glibc and libstdc++/libgcc_s (run.sh puts on
#    LD_LIBRARY_PATH only those the device lacks). PostgreSQL finds its share and lib dirs
#    relative to its binary, so the tree works wherever it is unpacked. No LLVM JIT (jit = off).
#    Packed as pg.NN (xz -1), separate from part.NN so either can be rebuilt alone.
PG=${PG_PREFIX:-/usr/lib/postgresql/15}
PGSHARE=${PG_SHARE:-/usr/share/postgresql/15}
PG_BINS=(postgres initdb pg_ctl psql pg_config pg_isready)
PG_INPUTS=("${PG_BINS[@]/#/$PG/bin/}" "$PG/lib/tributary.so" "$PG/lib/vector.so" "$PG/lib/plpgsql.so"
           "$PGSHARE/extension/tributary.control" "$PGSHARE/extension/vector.control"
           $(ls "$PGSHARE"/extension/tributary--*.sql))
for f in "${PG_INPUTS[@]}"; do
  [ -e "$f" ] || { echo "prepare: no $f (PostgreSQL 15 + pgvector installed? \`cargo pgrx install --release\` run?)" >&2; exit 1; }
done
pgstamp=$(stat -c '%n %s %Y' "${PG_INPUTS[@]}" "$0" | sha256sum | cut -c1-16)
if [ "${1:-}" = --force ] || ! grep -q "^pgstamp $pgstamp$" "$CARRY/manifest" 2>/dev/null; then
  log "PostgreSQL 15 (relocatable) from $PG and $PGSHARE"
  started=$(date +%s)
  STAGE=.gpu/pgstage
  rm -rf "$STAGE" "$CARRY"/pg.*; mkdir -p "$STAGE/usr/lib/postgresql/15/bin" "$STAGE/usr/lib/postgresql/15/lib" \
    "$STAGE/usr/share/postgresql" "$STAGE/deps"
  for b in "${PG_BINS[@]}"; do cp -a "$PG/bin/$b" "$STAGE/usr/lib/postgresql/15/bin/"; done
  # every module but the LLVM JIT, the bitcode, PGXS, static libraries and tributary's own ORT copy
  find "$PG/lib" -maxdepth 1 -name '*.so' ! -name llvmjit.so ! -name tributary.so -exec cp -a {} "$STAGE/usr/lib/postgresql/15/lib/" \;
  objcopy --strip-debug "$PG/lib/tributary.so" "$STAGE/usr/lib/postgresql/15/lib/tributary.so"
  cp -a "$PGSHARE" "$STAGE/usr/share/postgresql/15"
  rm -rf "$STAGE/usr/share/postgresql/15/tributary" "$STAGE/usr/share/postgresql/15/man"
  # the libraries they link, but glibc's and the C++ runtime's (the device has its own)
  find "$STAGE/usr/lib/postgresql/15" -type f \( -name '*.so' -o -perm -u+x \) -exec ldd {} \; 2>/dev/null \
    | awk '/=> \// {print $3}' | sort -u \
    | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|libmvec|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' \
    | while read -r lib; do cp -L "$lib" "$STAGE/deps/"; done
  {
    echo "packed from $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -n1)"
    echo "tributary.so: $(stat -c '%y' "$PG/lib/tributary.so") (mtime of $PG/lib/tributary.so)"
    echo "highest glibc symbol version needed: $(find "$STAGE" -type f -name '*.so*' -o -type f -perm -u+x | xargs objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)"
  } > "$STAGE/PACKED"
  cat "$STAGE/PACKED"
  echo "staged $(du -sh "$STAGE" | cut -f1): $(ls "$STAGE/deps" | wc -l) libraries in deps/ ($(du -sh "$STAGE/deps" | cut -f1))"
  tar -C "$STAGE" -cf - . | nice xz -T2 -1 -c | split -b "${PART_MIB}M" -d -a 2 - "$CARRY/pg."
  {
    echo "pgstamp $pgstamp"
    echo "pgarchive $(cat "$CARRY"/pg.* | sha256sum | cut -d' ' -f1)"
    (cd "$CARRY" && sha256sum pg.* | awk '{print "pgpart", $2, $1}')
  } > "$CARRY/lines.pg"
  rm -rf "$STAGE"
  echo "packed in $(( $(date +%s) - started )) s"
else
  log "packed PostgreSQL is up to date ($CARRY/manifest)"
  grep -E '^pg(stamp|archive|part) ' "$CARRY/manifest" > "$CARRY/lines.pg"
fi
cat "$CARRY/lines.main" "$CARRY/lines.pg" > "$CARRY/manifest.tmp"
rm -f "$CARRY/lines.main" "$CARRY/lines.pg"
mv "$CARRY/manifest.tmp" "$CARRY/manifest"
ls -l "$CARRY"

tree_kib=$(git ls-files -co --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -n1 | cut -f1)
echo "git working tree (tracked + untracked, not ignored): ${tree_kib} KiB; a part is $PART_MIB MiB"
if [ $(( tree_kib / 1024 + PART_MIB + 1 )) -gt 64 ]; then
  echo "prepare: WARNING: working tree + one part exceed 64 MiB; rerun with a smaller PART_MIB" >&2
fi

parts=$(cd "$CARRY" && ls part.* pg.* | wc -l)
log "the GPU check: $(( parts + 5 )) \`run\` calls, back to back (the machine is given back after 30 s idle, and"
echo "   then everything carried so far is lost: start again from the first call)"
n=1
for p in $(cd "$CARRY" && ls part.* pg.*); do
  echo "$n. run(command=\"bash scripts/gpu/run.sh receive\", carry=[\"$CARRY/manifest\", \"$CARRY/$p\"], timeout_s=300)"
  n=$((n + 1))
done
cat <<EOF
   (the receive that completes part.NN unpacks them, generates the bge-base-shaped model and prints
   the machine; the one that completes pg.NN unpacks PostgreSQL into /tmp/tributary-gpu-pg)
$n. run(command="bash scripts/gpu/run.sh check", timeout_s=600)           # cosine vs CPU fp32, both models
$((n + 1)). run(command="bash scripts/gpu/run.sh sweep-minilm", timeout_s=600)    # GPU throughput, all-MiniLM-L6-v2
$((n + 2)). run(command="bash scripts/gpu/run.sh sweep-bge", timeout_s=600)       # GPU throughput, bge-base-shaped
$((n + 3)). run(command="bash scripts/gpu/run.sh cpu", timeout_s=600)             # same-run CPU baseline, 16 cores
$((n + 4)). run(command="bash scripts/gpu/run.sh pg", timeout_s=600)              # tributary_embed_column through PostgreSQL, cuda vs cpu
Each call writes its Markdown and CSV under \$OUT (and keeps a cumulative copy in .gpu/results/ on
the device: every call's \$OUT also has report.md and sweep.csv with all results so far).
EOF
