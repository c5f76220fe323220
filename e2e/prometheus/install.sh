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

DEB_FILE="${AI4DL_PROMETHEUS_DEB:-}" bash "$(dirname "$0")/../debpkg.sh" prometheus \
    prometheus promtool || die "could not unpack the Debian package 'prometheus'"
VERSION="$(cat "$DEST/VERSION")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

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
