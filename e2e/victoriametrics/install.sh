#!/usr/bin/env bash
# Make the single-node VictoriaMetrics server (`victoria-metrics`) available for tests, WITHOUT
# installing or starting any system service (e2e/debpkg.sh: the Debian package downloaded and
# unpacked) into
#
#     ${AI4DL_CACHE:-$HOME/.cache/ai4dl}/victoria-metrics/
#         bin/victoria-metrics   (a symlink into the unpacked package)
#         pkg/, VERSION
#
# Idempotent: a cache whose binary runs is reused at once. Offline:
# AI4DL_VICTORIA_METRICS_DEB=/path/to/victoria-metrics_*.deb unpacks that file instead.
# Prints the binary folder on the last line of stdout (`bin=/path`).
set -euo pipefail

CACHE="${AI4DL_CACHE:-$HOME/.cache/ai4dl}"
DEST="$CACHE/victoria-metrics"
BIN="$DEST/bin"

if ! { [ -x "$BIN/victoria-metrics" ] && "$BIN/victoria-metrics" --version >/dev/null 2>&1; }; then
    DEB_FILE="${AI4DL_VICTORIA_METRICS_DEB:-}" bash "$(dirname "$0")/../debpkg.sh" \
        victoria-metrics victoria-metrics
fi
echo "victoria-metrics $(cat "$DEST/VERSION")"
echo "bin=$BIN"
