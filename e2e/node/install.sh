#!/usr/bin/env bash
# The container runtime of the real-node tier, WITHOUT installing packages or starting any
# system service: Debian's containerd, runc and busybox-static are downloaded (`apt-get
# download`) and unpacked (`dpkg-deb -x`) into
#
#     ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/node-runtime/
#         bin/{containerd,containerd-shim-runc-v2,ctr,runc,busybox}  (symlinks into pkg/)
#         pkg/                  the unpacked packages
#         images/busybox.tar    a docker-save archive made here from busybox's static binary
#                               (no registry: imported with `ctr -n k8s.io images import`)
#         VERSION               the package versions
#
# The test fixture (tests/e2e_fixtures_node.py) runs containerd from bin/ with its own config,
# root, state and socket under a temporary folder; nothing here touches /etc or /var/lib.
# Idempotent: a cache whose programs run and whose archive exists is reused at once.
# Needs apt (Debian 12: containerd 1.6, runc 1.1); `apt-get update` once if apt knows none.
set -euo pipefail

CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
DEST="$CACHE/node-runtime"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PACKAGES=(containerd runc busybox-static)
# program -> path inside the unpacked packages
declare -A PROGS=(
  [containerd]=usr/bin/containerd [containerd-shim-runc-v2]=usr/bin/containerd-shim-runc-v2
  [ctr]=usr/bin/ctr [runc]=usr/sbin/runc [busybox]=bin/busybox
)

log() { printf '[node/install.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cached_ok() {
  [[ -s "$DEST/images/busybox.tar" && -s "$DEST/VERSION" ]] || return 1
  "$DEST/bin/containerd" --version >/dev/null 2>&1 && "$DEST/bin/runc" --version >/dev/null 2>&1 \
    && "$DEST/bin/ctr" --version >/dev/null 2>&1 && [[ -x "$DEST/bin/containerd-shim-runc-v2" ]] \
    && "$DEST/bin/busybox" true >/dev/null 2>&1
}

if cached_ok; then
  log "up to date: $(tr '\n' ' ' < "$DEST/VERSION")in $DEST"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/node-runtime.lock"
if ! flock -n 9; then log "another install holds $CACHE/node-runtime.lock; waiting"; flock 9; fi
if cached_ok; then log "installed meanwhile by another process"; exit 0; fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: the real-node tier needs Debian's containerd/runc"
WORK="$(mktemp -d "$CACHE/.node-runtime.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
for p in "${PACKAGES[@]}"; do
  if ! apt-cache show "$p" >/dev/null 2>&1; then
    [[ "$(id -u)" == 0 ]] || die "apt knows no '$p' package and this user cannot run apt-get update"
    log "apt knows no '$p'; running apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    apt-cache show "$p" >/dev/null 2>&1 || die "no '$p' package in the apt sources"
  fi
done
sandbox=()
[[ "$(id -u)" == 0 ]] && sandbox=(-o APT::Sandbox::User=root)  # root: apt drops to _apt otherwise
log "downloading ${PACKAGES[*]}"
(cd "$WORK" && apt-get download -qq "${sandbox[@]}" "${PACKAGES[@]}" >&2) || die "apt-get download failed"
mkdir -p "$WORK/new/bin" "$WORK/new/images"
for p in "${PACKAGES[@]}"; do
  deb="$(ls "$WORK/${p}"_*.deb | head -1)"
  dpkg-deb -x "$deb" "$WORK/new/pkg"
  echo "$p $(dpkg-deb -f "$deb" Version)" >> "$WORK/new/VERSION"
done
for b in "${!PROGS[@]}"; do
  [[ -x "$WORK/new/pkg/${PROGS[$b]}" ]] || die "no ${PROGS[$b]} in the unpacked packages"
  ln -s "../pkg/${PROGS[$b]}" "$WORK/new/bin/$b"
done
"$WORK/new/bin/runc" --version >/dev/null 2>&1 \
  || die "the unpacked runc does not run (missing libseccomp2?): $("$WORK/new/bin/runc" --version 2>&1 | head -1)"
"$WORK/new/bin/containerd" --version >/dev/null 2>&1 || die "the unpacked containerd does not run"
python3 "$HERE/image.py" "$WORK/new/pkg/bin/busybox" "$WORK/new/images/busybox.tar"

# Swap the new tree in (a concurrent reader sees the old or the new one, never half).
rm -rf "$DEST.old"
[[ -e "$DEST" ]] && mv "$DEST" "$DEST.old"
mv "$WORK/new" "$DEST"
rm -rf "$DEST.old"
cached_ok || die "installed into $DEST but the programs do not run"
log "installed $(tr '\n' ' ' < "$DEST/VERSION")into $DEST"
