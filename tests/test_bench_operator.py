"""The operator benchmark's smoke run (bench/bench_operator.py at 50 pods, 2 windows): it serves
every pod it created on a real control plane, Prometheus and the operator, and prints its
table; and it refuses to print one when it measured nothing (issue 44: a model the operator
refused read "0 pods, 0 resized" in every window, and the script exited 0 with a table)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))


def test_measured_nothing_names_why():
    from bench_operator import measured_nothing

    ok = {"op": {"first_full": 0, "records": [{"pods": 50, "resized": 50}] * 3,
                 "measured": [{"pods": 50, "resized": 0}] * 2}}
    assert measured_nothing(ok, 50) == ""
    refused = {"op": {"first_full": None, "measured": [],
                      "records": [{"pods": 0, "resized": 0}] * 4}}
    assert measured_nothing(refused, 50) == "no window served all 50 pods created (at most 0)"
    short = {"op": {"first_full": 0, "records": [{"pods": 50, "resized": 3}],
                    "measured": [{"pods": 50, "resized": 0}, {"pods": 49, "resized": 0}]}}
    assert "1 of 2 measured windows served fewer than the 50 pods" in measured_nothing(short, 50)
    idle = {"op": {"first_full": 0, "records": [{"pods": 50, "resized": 0}] * 3,
                   "measured": [{"pods": 50, "resized": 0}] * 2}}
    assert "no window resized any pod" in measured_nothing(idle, 50)


@pytest.mark.integration
def test_smoke_run_serves_every_pod_it_created(kube_cluster):   # the binaries are built
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_operator.py"),
                        "--pods", "50", "--windows", "2", "--window", "10", "--no-breakdown",
                        "--threads", "2", "--timeout", "420"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    assert "measured nothing" not in r.stderr
    assert "50 pods" in r.stdout + r.stderr
