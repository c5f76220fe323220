#!/usr/bin/env bash
# Make the real Prometheus server (`prometheus`) and `promtool` available for tests and demos,
# WITHOUT installing or starting any system service: the Debian package is downloaded
# (`apt-get download`) and unpacked (`dpkg -x`) into
#
#     ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/prometheus/
#         bin/prometheus, bin/promtool   (symlinks into the unpacked package)
#         pkg/                           (the unpacked .deb)
#         VERSION                        (the package version)
#
# Idempotent: a cache whose binaries run is reused at once (prints the versions and exits).
# Needs apt (Debian/Ubuntu); runs `apt-get update` once when apt knows no `prometheus` package
# (that step needs root). Offline: AI4DL_PROMETHEUS_DEB=/path/to/prometheus_*.deb unpacks that
# file instead of downloading. The binaries are Go programs linked only against libc, so no
# other package is needed at run time (the web UI's JavaScript, which Debian takes from
# libjs-* packages, is not installed: the HTTP API that tests use does not need it).
#
# Prints the binary folder on the last line of stdout (`bin=/path`), so callers can use it.
set -euo pipefail

CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
DEST="$CACHE/prometheus"
BIN="$DEST/bin"

log() { echo "install.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

report() {
    "$BIN/prometheus" --version 2>&1 | head -1
    "$BIN/promtool" --version 2>&1 | head -1
    echo "bin=$BIN"
}

cached_ok() {
    [ -x "$BIN/prometheus" ] && [ -x "$BIN/promtool" ] \
        && "$BIN/prometheus" --version >/dev/null 2>&1 \
        && "$BIN/promtool" --version >/dev/null 2>&1
}

if cached_ok; then
    report
    exit 0
fi

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/.prometheus-install.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

if [ -n "${AI4DL_PROMETHEUS_DEB:-}" ]; then
    [ -f "$AI4DL_PROMETHEUS_DEB" ] || die "AI4DL_PROMETHEUS_DEB=$AI4DL_PROMETHEUS_DEB: no such file"
    cp "$AI4DL_PROMETHEUS_DEB" "$WORK/"
else
    command -v apt-get >/dev/null 2>&1 \
        || die "apt-get not found: this script needs a Debian/Ubuntu machine (or set AI4DL_PROMETHEUS_DEB to a downloaded prometheus .deb, or put prometheus and promtool on PATH)"
    if ! apt-cache show prometheus >/dev/null 2>&1; then
        log "apt knows no 'prometheus' package; running apt-get update"
        if [ "$(id -u)" = 0 ]; then
            apt-get update -qq >&2 || die "apt-get update failed"
        elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo -n apt-get update -qq >&2 || die "sudo apt-get update failed"
        else
            die "apt has no package lists and this user cannot run 'apt-get update' (run it as root once)"
        fi
        apt-cache show prometheus >/dev/null 2>&1 || die "no 'prometheus' package in the apt sources"
    fi
    log "downloading the Debian package 'prometheus' ($(apt-cache policy prometheus | awk '/Candidate:/ {print $2}'))"
    # As root, apt drops privileges to _apt for downloads, which cannot write to our folder.
    sandbox=()
    [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
    (cd "$WORK" && apt-get download -qq "${sandbox[@]}" prometheus >&2) \
        || die "apt-get download prometheus failed"
fi

DEB="$(ls "$WORK"/prometheus_*.deb 2>/dev/null | head -1)"
[ -n "$DEB" ] || die "no prometheus_*.deb was downloaded"
VERSION="$(dpkg-deb -f "$DEB" Version)"
dpkg-deb -x "$DEB" "$WORK/pkg" || die "dpkg-deb -x failed on $DEB"
for b in prometheus promtool; do
    [ -x "$WORK/pkg/usr/bin/$b" ] || die "the package has no usr/bin/$b"
done
"$WORK/pkg/usr/bin/prometheus" --version >/dev/null 2>&1 \
    || die "the unpacked prometheus does not run: $("$WORK/pkg/usr/bin/prometheus" --version 2>&1 | head -1)"

# Swap the new tree in (another install running at the same time loses the race harmlessly).
NEW="$DEST.new.$$"
rm -rf "$NEW"
mkdir -p "$NEW/bin"
mv "$WORK/pkg" "$NEW/pkg"
ln -s ../pkg/usr/bin/prometheus "$NEW/bin/prometheus"
ln -s ../pkg/usr/bin/promtool "$NEW/bin/promtool"
echo "$VERSION" > "$NEW/VERSION"
rm -rf "$DEST.old.$$"
[ -e "$DEST" ] && mv "$DEST" "$DEST.old.$$"
mv "$NEW" "$DEST"
rm -rf "$DEST.old.$$"

# Smoke test: promtool parses a config.
cat > "$WORK/smoke.yml" <<'YML'
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: smoke
    static_configs:
      - targets: ['127.0.0.1:9']
YML
"$BIN/promtool" check config "$WORK/smoke.yml" >/dev/null 2>&1 || die "promtool check config failed"
log "installed prometheus $VERSION into $DEST"
report
