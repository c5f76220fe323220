"""Each offline benchmark's smoke run (issue 44: benchmarks that cannot rot): at a small size it
prints its table and exits 0; given nothing to measure it prints no table, says why in one line
and exits 1. Not timings: bench/ measures, these check that it still can.
The operator's, the profiles' and the real node's have their own (tests/test_bench_operator.py,
tests/test_bench_profiles.py, tests/test_real_node_jobs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.mark.parametrize("script, args, rows", [
    ("bench_core.py", ("--executions", "4", "--samples", "200", "--repeats", "1",
                       "--epochs", "2"),
     ("| fit: total |", "| detect, operator windows (1 thread) | ")),
    ("bench_policies.py", ("--executions", "4", "--samples", "160", "--fit-executions", "6",
                           "--model-executions", "6", "--epochs", "2"),
     ("## Head-room table", "## Peak-risk table", "| **total: 11 policies** |")),
    ("bench_fairness.py", ("--flood", "3", "--seconds", "13"),
     ("| before | ", "| after | ")),
], ids=["core", "policies", "fairness"])
def test_a_small_run_prints_its_table(script, args, rows):
    r = bench(script, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    for row in rows:
        assert row in r.stdout, (row, r.stdout[-2000:])
    assert "measured nothing" not in r.stderr


@pytest.mark.parametrize("script, args, why", [
    ("bench_core.py", ("--executions", "0"), "0 executions of 2400 samples"),
    ("bench_policies.py", ("--samples", "50"), "--samples 50 < two windows of 40"),
    ("bench_fairness.py", ("--flood", "1", "--seconds", "0.5"), "0 tenant windows"),
], ids=["core", "policies", "fairness"])
def test_nothing_to_measure_is_no_table_and_exit_1(script, args, why):
    r = bench(script, *args)
    name = script.removesuffix(".py")
    assert r.returncode == 1 and r.stdout.strip() == "", (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"{name}: measured nothing, no table: ") and why in line, line


@pytest.mark.integration
def test_the_admission_benchmark_sizes_every_pod_it_creates(kube_cluster):  # binaries built
    r = bench("bench_admission.py", "--pods", "3")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    assert "pods mutated with the webhook on: 3 of 3" in r.stdout
    r = bench("bench_admission.py", "--pods", "0")
    assert r.returncode == 1 and r.stdout.strip() == ""
    assert r.stderr.strip() == "bench_admission: measured nothing, no table: --pods 0: nothing " \
                               "to create"
