#!/usr/bin/env bash
# Issue 29's GPU checks, in one run on a GPU machine (about 3 minutes; hard limits keep it under
# 6): CRBM and whole-fit times on cpu and cuda for the same data, the adjusted Rand index
# between them, what --device auto picks and the cost model's measured constants
# (bench/gpu_check.py), then `ai4dl record --gpu on` over a real PyTorch CUDA job
# (bench/gpu_job.py: a parent and a child doing matrix products).
#
#   bash bench/gpu_check.sh            # from the repository root; writes under $OUT
#
# The device machine has torch, numpy, scikit-learn, nvidia-ml-py but not pydantic: the wheels
# in .whl/ (pydantic, pydantic-core, annotated-types, typing-inspection, typing-extensions for
# Python 3.12) are installed into /tmp/site when present. Runs without a GPU too (the CUDA
# parts and the record check are skipped and said so): that is how it is tested before a GPU
# run.
#
# Exits with gpu_check.py's status when that is not 0 (1: it measured nothing, the reason on
# stderr), else 1 when the record check measured nothing (no rows, no gpu columns, or GPU
# memory or utilisation zero in every row) or ai4dl record failed, else 0 (issue 44).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || echo "gpu_check: installing .whl/ failed"
    export PYTHONPATH=/tmp/site:$PWD/operator
else
    export PYTHONPATH=$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
fi
echo "== $(date -u +%FT%TZ) $($PY --version 2>&1) on $(hostname), $(nproc) cores"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi
else
    echo "gpu_check: no nvidia-smi here: the CUDA parts will be skipped"
fi
$PY -c "import pynvml; print('nvidia-ml-py', getattr(pynvml, '__version__', '?'))" 2>&1 | tail -1

# the first non-zero status of the steps below is the script's
status=0
keep() { if [ "$status" -eq 0 ]; then status=$1; fi; }

echo "== CRBM and fit on cpu and cuda (bench/gpu_check.py)"
timeout 300 $PY bench/gpu_check.py --out "$OUT" --budget ${BUDGET:-230} \
    --executions ${EXECUTIONS:-1000} --samples ${SAMPLES:-2400}
rc=$?
echo "gpu_check.py exit $rc"
keep $rc

if ! command -v nvidia-smi >/dev/null; then
    echo "== record check: skipped, no GPU here (ai4dl record --gpu on needs one)"
    echo "== done $(date -u +%FT%TZ), exit $status"
    exit $status
fi
echo "== ai4dl record --gpu on over a real CUDA job (parent + child, ${JOB_SECONDS:-6} s of products)"
timeout 90 $PY -m ai4dl record -i 0.5 --gpu on -o "$OUT/record_gpu.csv" --name cuda-matmul \
    -- $PY bench/gpu_job.py ${JOB_SECONDS:-6}
rc=$?
echo "ai4dl record exit $rc"
keep $rc
cat "$OUT/record_gpu.csv"
$PY - "$OUT/record_gpu.csv" <<'PYEOF'
import csv, sys
try:
    with open(sys.argv[1], newline="") as fh:
        rows = list(csv.DictReader(fh))
except OSError as err:
    sys.exit(f"record check: measured nothing: {err}")
if not rows or "gpu_memory" not in rows[0]:
    sys.exit(f"record check: measured nothing: {len(rows)} rows, NO gpu columns")
mem = [int(r["gpu_memory"]) for r in rows]
util = [float(r["gpu_util"]) for r in rows]
ok = max(mem) > 0 and max(util) > 0
print(f"record check: {len(rows)} rows; gpu_memory max {max(mem) / 2**20:.0f} MiB, "
      f"non-zero in {sum(m > 0 for m in mem)}; gpu_util max {max(util):.0f} %, "
      f"non-zero in {sum(u > 0 for u in util)}: {'OK' if ok else 'ZERO'}")
sys.exit(0 if ok else 1)        # ZERO: the GPU job was not seen
PYEOF
rc=$?
keep $rc
echo "== done $(date -u +%FT%TZ), exit $status"
exit $status
