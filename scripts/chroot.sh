# Helpers for the Debian trixie root that carries PostgreSQL 17 (scripts/pg17_chroot.sh). Source
# this file, then:
#   chroot_run ROOT CMD...   runs CMD in ROOT as root, with /proc, /dev, the Rust toolchain
#                            (~/.cargo, ~/.rustup) and this checkout bind-mounted at their own
#                            paths, and unmounts them all afterwards (also on failure)
#   chroot_umount ROOT       unmounts whatever is still mounted under ROOT (deepest first)
# Every bind mount must be gone before ROOT is removed: `rm -rf` through a live bind mount deletes
# the host's toolchain or checkout. scripts/pg17_chroot.sh and scripts/test.sh call chroot_umount
# before they remove anything.
_chroot_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# The checkout's root (this file is in its scripts/).
CHROOT_CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

chroot_umount() {  # chroot_umount ROOT
  local root m
  root=$(readlink -f "$1")
  # Never the host's own mounts (an empty ROOT would match every one): only a root inside a
  # tributary cache directory.
  case "$root" in
    */tributary/?*|*/tributary-*/?*) ;;
    *) echo "chroot_umount: refusing '$1': not a root in a tributary cache directory" >&2; return 1 ;;
  esac
  [ -r /proc/mounts ] || { echo "chroot_umount: /proc/mounts is not readable" >&2; return 1; }
  # /proc/mounts escapes spaces as \040; tributary's paths have none.
  for m in $(awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    case "$m" in "$root"/*) ;; *) continue ;; esac
    _chroot_sudo umount "$m" 2>/dev/null || _chroot_sudo umount -l "$m"
  done
}

_chroot_bind() {  # _chroot_bind ROOT HOST_PATH: HOST_PATH at the same path inside ROOT
  local root=$1 p=$2
  _chroot_sudo mkdir -p "$root$p"
  _chroot_sudo mount --bind "$p" "$root$p"
}

chroot_run() {  # chroot_run ROOT CMD...
  local root rc=0
  root=$(readlink -f "$1"); shift
  chroot_umount "$root" || return 1
  _chroot_sudo mount -t proc proc "$root/proc"
  _chroot_sudo mount --bind /dev "$root/dev"
  _chroot_sudo mount --bind /dev/pts "$root/dev/pts" 2>/dev/null || true
  _chroot_bind "$root" "$HOME/.cargo"
  _chroot_bind "$root" "$HOME/.rustup"
  _chroot_bind "$root" "$CHROOT_CHECKOUT"
  _chroot_sudo cp /etc/resolv.conf /etc/hosts "$root/etc/" 2>/dev/null || true
  _chroot_sudo env -i HOME="$HOME" PATH="$HOME/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin" LANG=C.UTF-8 TERM=dumb \
    CARGO_HOME="$HOME/.cargo" RUSTUP_HOME="$HOME/.rustup" \
    chroot "$root" "$@" || rc=$?
  chroot_umount "$root"
  return $rc
}
