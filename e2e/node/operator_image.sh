#!/usr/bin/env bash
# The operator's image for the real node, built from the repository's Dockerfile (`operator`
# target) WITHOUT a Docker engine or a registry: Debian's buildah (vfs storage, chroot isolation)
# FROM a Debian 12 root made here with debootstrap (python3, python3-venv, ca-certificates),
# since docker.io (python:3.12-slim) cannot be reached. RUN pip reaches PyPI (--network host).
#
#     ${AI4DL_OPERATOR_IMAGE_DIR:-${AI4DL_CACHE:-$HOME/.cache/ai4dl}/operator-image}/
#         image.tar     docker-save archive of $(cat IMAGE): `ctr -n k8s.io images import` takes it
#         IMAGE         the image's name, localhost/ai4dl/ai4dl-operator:<key>
#         KEY           hash of pyproject.toml, operator/, docker/, Dockerfile and this script:
#                       the archive is rebuilt when one of them changes, reused at once otherwise
#         base.tar      the Debian root (rebuilt when BASE_KEY, the suite and packages, changes)
#         storage/ run/ buildah's own storage (nothing in /var/lib/containers)
#         build.log     the last build's output
#
# Needs root (buildah as root, debootstrap) and apt: buildah and debootstrap are installed with
# apt-get when missing (buildah pulls in containernetworking-plugins and iptables; no rule is
# written: the build runs with the host's network). Takes the lock operator-image.lock.
set -euo pipefail

CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
DEST="${AI4DL_OPERATOR_IMAGE_DIR:-$CACHE/operator-image}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
SUITE="${AI4DL_BASE_SUITE:-bookworm}"
BASE_PACKAGES="python3,python3-venv,ca-certificates"
BASE_IMAGE="localhost/ai4dl/debian-python:$SUITE"
BASE_KEY="$SUITE $BASE_PACKAGES minbase python-link v1"

log() { printf '[node/operator_image.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

source_key() {
  # what goes into the image: the files the Dockerfile copies (README.md aside: only the
  # wheel's long description), the Dockerfile itself and this script (the base's recipe)
  (cd "$REPO" && find pyproject.toml Dockerfile docker operator "$HERE/operator_image.sh" -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sed "s#  $REPO/#  #" | sha256sum | cut -c1-16)
}

KEY="$(source_key)"
IMAGE="localhost/ai4dl/ai4dl-operator:$KEY"
cached_ok() { [[ -s "$DEST/image.tar" && "$(cat "$DEST/KEY" 2>/dev/null)" == "$KEY" ]]; }

if cached_ok; then
  log "up to date: $(cat "$DEST/IMAGE") in $DEST/image.tar ($(du -m "$DEST/image.tar" | cut -f1) MB)"
  exit 0
fi
[[ "$(id -u)" == 0 ]] || die "building the operator image needs root (buildah, debootstrap)"
mkdir -p "$DEST"
exec 9>"$CACHE/operator-image.lock"
if ! flock -n 9; then log "another build holds $CACHE/operator-image.lock; waiting"; flock 9; fi
if cached_ok; then log "built meanwhile by another process"; exit 0; fi

if ! command -v buildah >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "no buildah/debootstrap and no apt-get to install them"
  log "installing buildah and debootstrap (apt-get)"
  apt-cache show buildah >/dev/null 2>&1 || apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap >&2 \
    || die "apt-get install buildah debootstrap failed"
fi

# buildah's chroot isolation binds the host's /dev/null into each RUN step: a /dev/null that
# is not the character device (seen once on this machine: something replaced it with a regular
# file, and every RUN step then failed with "cannot create /dev/null: Read-only file system")
# is put back, and said so.
if [[ ! -c /dev/null ]]; then
  log "WARNING: /dev/null is not a character device ($(stat -c %F /dev/null 2>&1)): recreating it"
  rm -f /dev/null && mknod -m 666 /dev/null c 1 3 || die "cannot recreate /dev/null"
fi

B=(buildah --root "$DEST/storage" --runroot "$DEST/run" --storage-driver vfs)
t0=$SECONDS

# ---------------------------------------------------------------- the base: a Debian root
if [[ ! -s "$DEST/base.tar" || "$(cat "$DEST/BASE_KEY" 2>/dev/null)" != "$BASE_KEY" ]] \
    || ! "${B[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  if [[ ! -s "$DEST/base.tar" || "$(cat "$DEST/BASE_KEY" 2>/dev/null)" != "$BASE_KEY" ]]; then
    # the mirror apt uses (deb822 or one-line sources), else Debian's CDN
    mirror="${AI4DL_DEBIAN_MIRROR:-$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
      | grep -Eo 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ' || true)}"
    mirror="${mirror:-http://deb.debian.org/debian}"
    root="$(mktemp -d "$DEST/.rootfs.XXXXXX")"
    trap 'rm -rf "$root"' EXIT
    log "debootstrap --variant=minbase $SUITE from $mirror (+ $BASE_PACKAGES)"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$root" "$mirror" \
      > "$DEST/debootstrap.log" 2>&1 || die "debootstrap failed: $(tail -3 "$DEST/debootstrap.log")"
    ln -sf python3 "$root/usr/bin/python"   # the Dockerfile runs `python -m venv`
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
    # device nodes, /proc and /sys come from the runtime
    tar -C "$root" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
      -cf "$DEST/base.tar.new" .
    mv "$DEST/base.tar.new" "$DEST/base.tar"
    echo "$BASE_KEY" > "$DEST/BASE_KEY"
    rm -rf "$root"; trap - EXIT
  fi
  log "importing the Debian root as $BASE_IMAGE"
  "${B[@]}" rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
  c="$("${B[@]}" from --pull=false scratch)"
  mnt="$("${B[@]}" mount "$c")"
  tar -C "$mnt" --numeric-owner -xpf "$DEST/base.tar"
  "${B[@]}" umount "$c" >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 --created-by "e2e/node/operator_image.sh: debootstrap $SUITE" "$c"
  "${B[@]}" commit --rm -q "$c" "$BASE_IMAGE" >/dev/null
  log "base ready in $((SECONDS - t0)) s"
fi

# ---------------------------------------------------------------- the Dockerfile's operator target
t1=$SECONDS
# RUN steps trust what the host trusts (a TLS-intercepting proxy's CA, as on this project's
# machines): the host's bundle is mounted over Debian's for the build only, not copied in.
trust=()
bundle="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -s "$bundle" ]] && trust=(--volume "$(readlink -f "$bundle"):/etc/ssl/certs/ca-certificates.crt:ro")
log "buildah build --target operator -t $IMAGE (log: $DEST/build.log)"
"${B[@]}" build --isolation chroot --network host --pull=false --target operator "${trust[@]}" \
  --build-arg BASE_IMAGE="$BASE_IMAGE" -f "$REPO/Dockerfile" -t "$IMAGE" "$REPO" \
  > "$DEST/build.log" 2>&1 || die "buildah build failed: $(tail -5 "$DEST/build.log")"
user="$("${B[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")"
[[ "$user" == "65532:65532" ]] || die "the image runs as '$user', not 65532:65532"
"${B[@]}" push -q "$IMAGE" "docker-archive:$DEST/image.tar.new:$IMAGE" >/dev/null 2>&1 \
  || { rm -f "$DEST/image.tar.new"; die "buildah push to a docker-archive failed"; }
mv "$DEST/image.tar.new" "$DEST/image.tar"
echo "$IMAGE" > "$DEST/IMAGE"
echo "$KEY" > "$DEST/KEY"
# keep only the base in buildah's storage (vfs copies every layer in full)
"${B[@]}" rmi -f "$IMAGE" >/dev/null 2>&1 || true
"${B[@]}" rmi --prune >/dev/null 2>&1 || true
log "built $IMAGE in $((SECONDS - t1)) s (total $((SECONDS - t0)) s): $DEST/image.tar ($(du -m "$DEST/image.tar" | cut -f1) MB)"
