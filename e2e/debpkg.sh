#!/usr/bin/env bash
# Unpack a Debian package's programs into the ai4dl cache, WITHOUT installing the package or
# starting any service: `apt-get download` (or a given .deb) and `dpkg-deb -x`.
#
#     bash e2e/debpkg.sh PACKAGE BINARY [BINARY...]
#
# makes ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/PACKAGE/ with bin/BINARY (symlinks into pkg/, the
# unpacked package) and VERSION. DEB_FILE=/path/to/PACKAGE_*.deb unpacks that file instead of
# downloading (offline). Runs `apt-get update` once (as root, or with passwordless sudo) when
# apt knows no such package. Each BINARY must answer `--version`. Used by
# e2e/prometheus/install.sh and e2e/victoriametrics/install.sh, which check their cache first.
set -euo pipefail

PACKAGE="$1"
shift
CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
DEST="$CACHE/$PACKAGE"

log() { echo "debpkg.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/.$PACKAGE-install.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

if [ -n "${DEB_FILE:-}" ]; then
    [ -f "$DEB_FILE" ] || die "$DEB_FILE: no such file"
    cp "$DEB_FILE" "$WORK/"
else
    command -v apt-get >/dev/null 2>&1 \
        || die "apt-get not found: this needs a Debian/Ubuntu machine (or a downloaded $PACKAGE .deb)"
    if ! apt-cache show "$PACKAGE" >/dev/null 2>&1; then
        log "apt knows no '$PACKAGE' package; running apt-get update"
        if [ "$(id -u)" = 0 ]; then
            apt-get update -qq >&2 || die "apt-get update failed"
        elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo -n apt-get update -qq >&2 || die "sudo apt-get update failed"
        else
            die "apt has no package lists and this user cannot run 'apt-get update' (run it as root once)"
        fi
        apt-cache show "$PACKAGE" >/dev/null 2>&1 || die "no '$PACKAGE' package in the apt sources"
    fi
    log "downloading the Debian package '$PACKAGE' ($(apt-cache policy "$PACKAGE" | awk '/Candidate:/ {print $2}'))"
    # As root, apt drops privileges to _apt for downloads, which cannot write to our folder.
    sandbox=()
    [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
    (cd "$WORK" && apt-get download -qq "${sandbox[@]}" "$PACKAGE" >&2) \
        || die "apt-get download $PACKAGE failed"
fi

DEB="$(ls "$WORK/${PACKAGE}"_*.deb 2>/dev/null | head -1)"
[ -n "$DEB" ] || die "no ${PACKAGE}_*.deb was downloaded"
VERSION="$(dpkg-deb -f "$DEB" Version)"
dpkg-deb -x "$DEB" "$WORK/pkg" || die "dpkg-deb -x failed on $DEB"
for b in "$@"; do
    [ -x "$WORK/pkg/usr/bin/$b" ] || die "the package has no usr/bin/$b"
    "$WORK/pkg/usr/bin/$b" --version >/dev/null 2>&1 \
        || die "the unpacked $b does not run: $("$WORK/pkg/usr/bin/$b" --version 2>&1 | head -1)"
done

# Swap the new tree in (another install running at the same time loses the race harmlessly).
NEW="$DEST.new.$$"
rm -rf "$NEW"
mkdir -p "$NEW/bin"
mv "$WORK/pkg" "$NEW/pkg"
for b in "$@"; do
    ln -s "../pkg/usr/bin/$b" "$NEW/bin/$b"
done
echo "$VERSION" > "$NEW/VERSION"
rm -rf "$DEST.old.$$"
[ -e "$DEST" ] && mv "$DEST" "$DEST.old.$$"
mv "$NEW" "$DEST"
rm -rf "$DEST.old.$$"
log "installed $PACKAGE $VERSION into $DEST"
