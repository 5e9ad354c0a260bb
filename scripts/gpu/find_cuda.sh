#!/usr/bin/env bash
# Finds the CUDA 13 / cuDNN 9 user-space libraries that ONNX Runtime 1.31's CUDA provider needs
# on this machine and prints the directories, ':'-separated, on stdout (the value for
# tributary.cuda_library_path and tributary-bench --cuda-library-path). What was found and what is
# missing goes to stderr. Exit status 0 when every needed library was found, 1 otherwise (the
# directories found are printed either way; empty when none).
#
# Where it looks, in this order (a group is one site-packages, one CUDA toolkit or ldconfig):
#   1. nvidia pip packages (nvidia-cublas, nvidia-cudnn-cu13, nvidia-cuda-runtime, ...):
#      <site-packages>/nvidia/*/lib of every python3 it can find (PATH, /opt/*, /root, this
#      checkout's .venv) and of the usual site-packages globs;
#   2. /usr/local/cuda*/lib64 and /usr/local/cuda*/targets/x86_64-linux/lib;
#   3. the directories of those libraries in `ldconfig -p`.
# The first group that has all of them wins (mixing libraries of two CUDA installs is how
# "undefined symbol" errors happen); if no group has all, every directory found is printed.
#
# Needed, from `readelf -d libonnxruntime_providers_cuda.so` (1.31.1) plus what it dlopens:
#   libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcufft.so.12 libcudnn.so.9
# The driver's libcuda.so.1 comes from the system (ldconfig) and is only reported.
# Usage: scripts/gpu/find_cuda.sh        (no arguments; reads nothing but the file system)
#   FIND_CUDA_SITE_PACKAGES=DIR:DIR adds site-packages directories to look in first.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NEEDED=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcufft.so.12 libcudnn.so.9)

declare -A seen_group=()
groups=()   # each entry: "label|dir:dir:..."

add_group() { # label dir...
  local label=$1; shift
  local dirs=() d
  for d in "$@"; do
    [ -d "$d" ] || continue
    d=$(cd "$d" && pwd -P)
    compgen -G "$d/lib*.so*" >/dev/null || continue
    dirs+=("$d")
  done
  [ ${#dirs[@]} -gt 0 ] || return 0
  local joined
  joined=$(printf '%s\n' "${dirs[@]}" | awk '!s[$0]++' | paste -sd:)
  [ -n "${seen_group[$joined]:-}" ] && return 0
  seen_group[$joined]=1
  groups+=("$label|$joined")
}

# 1. site-packages of every python3 found, plus the usual globs.
site_dirs=()
IFS=: read -r -a site_dirs <<<"${FIND_CUDA_SITE_PACKAGES:-}"
pythons=()
for py in "$(command -v python3 2>/dev/null)" /opt/*/.venv/bin/python /opt/*/bin/python3 /opt/*/*/bin/python3 \
          /root/.venv*/bin/python /root/*/.venv/bin/python "$ROOT/.venv/bin/python" /usr/local/bin/python3 /usr/bin/python3; do
  [ -n "$py" ] && [ -x "$py" ] && pythons+=("$py")
done
for py in "${pythons[@]}"; do
  while IFS= read -r sp; do
    [ -n "$sp" ] && site_dirs+=("$sp")
  done < <("$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
done
for sp in /opt/*/.venv/lib/python3*/site-packages /opt/*/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
          /usr/lib/python3/dist-packages /root/.local/lib/python3*/site-packages; do
  [ -d "$sp" ] && site_dirs+=("$sp")
done
while IFS= read -r sp; do
  [ -d "$sp/nvidia" ] || continue
  add_group "pip packages in $sp" "$sp"/nvidia/*/lib "$sp"/nvidia/*/lib64
done < <(printf '%s\n' "${site_dirs[@]}" | awk 'NF && !s[$0]++')

# 2. CUDA toolkits.
for c in /usr/local/cuda /usr/local/cuda-*; do
  [ -d "$c" ] && add_group "toolkit $c" "$c/lib64" "$c/targets/x86_64-linux/lib"
done

# 3. ldconfig's cache.
if command -v ldconfig >/dev/null || [ -x /sbin/ldconfig ]; then
  mapfile -t ld_dirs < <( { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } \
    | awk -F'=> ' '/lib(cudart|cublas|cudnn|curand|cufft)/ {print $2}' | xargs -r -n1 dirname | awk '!s[$0]++')
  [ ${#ld_dirs[@]} -gt 0 ] && add_group "ldconfig" "${ld_dirs[@]}"
fi

have() { # dirs(:-separated) soname -> 0 when some dir holds it
  local IFS=: d
  for d in $1; do [ -e "$d/$2" ] && return 0; done
  return 1
}

chosen=""; chosen_label=""
for g in "${groups[@]}"; do
  label=${g%%|*}; dirs=${g#*|}
  missing=()
  for so in "${NEEDED[@]}"; do have "$dirs" "$so" || missing+=("$so"); done
  echo "find_cuda: $label: ${#missing[@]} of ${#NEEDED[@]} missing${missing:+ (${missing[*]})}" >&2
  if [ ${#missing[@]} -eq 0 ] && [ -z "$chosen" ]; then
    chosen=$dirs; chosen_label=$label
  fi
done
status=0
if [ -z "$chosen" ]; then
  chosen=$(for g in "${groups[@]}"; do echo "${g#*|}" | tr : '\n'; done | awk 'NF && !s[$0]++' | paste -sd:)
  missing=()
  for so in "${NEEDED[@]}"; do have "$chosen" "$so" || missing+=("$so"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "find_cuda: not found anywhere: ${missing[*]}" >&2
    status=1
  fi
  chosen_label="all directories found"
fi
if { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libcuda\.so\.1 '; then
  echo "find_cuda: driver libcuda.so.1 is in ldconfig's cache" >&2
else
  echo "find_cuda: no driver library libcuda.so.1 in ldconfig's cache (no NVIDIA driver here?)" >&2
  status=1
fi
echo "find_cuda: using $chosen_label" >&2
echo "$chosen"
exit $status
