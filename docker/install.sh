#!/bin/sh
# Install ai4dl into a Python environment, as the Dockerfile does; tests/test_packaging.py runs
# the same command in a fresh virtual environment.
#
#   docker/install.sh operator PYTHON [SRC]   # the operator's runtime: numpy, kopf... no torch
#   docker/install.sh trainer  PYTHON [SRC]   # + the `train` extra (torch, scikit-learn, ...)
#
# A plain, non-editable `pip install SRC` (or SRC[train]), at the versions pinned in
# SRC/docker/constraints.txt when SRC has it. With UV=/path/to/uv set, uv installs
# it instead (same resolution, faster; the tests use the project's .venv/bin/uv and its cache).
set -eu
target="${1:?usage: install.sh operator|trainer PYTHON [SRC]}"
python="${2:?usage: install.sh operator|trainer PYTHON [SRC]}"
src="${3:-.}"
case "$target" in
  operator) spec="$src" ;;
  trainer) spec="$src[train]" ;;
  *) echo "install.sh: error: unknown target '$target' (operator|trainer)" >&2; exit 2 ;;
esac
# The pinned versions (SRC/docker/constraints.txt, as the Dockerfile copies it; `make lock`
# writes it): an image built next month gets the libraries the tests ran with.
set --
if [ -f "$src/docker/constraints.txt" ]; then
  set -- --constraint "$src/docker/constraints.txt"
fi
if [ -n "${UV:-}" ]; then
  exec "$UV" pip install --quiet --python "$python" --no-progress "$@" "$spec"
fi
exec "$python" -m pip install --quiet --no-cache-dir --disable-pip-version-check "$@" "$spec"
