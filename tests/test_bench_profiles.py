"""The workload-profile benchmark's smoke run (bench/bench_profiles.py at 20 workloads): it
runs end to end on a real control plane and prints its table; the figures at 10,000 workloads
are the README's (Benchmark)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def test_smoke_run_prints_its_table(kube_cluster):    # kube_cluster: the binaries are built
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_profiles.py"),
                        "--workloads", "20", "--threads", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = dict(line.strip("|").split("|")[:2] for line in r.stdout.splitlines()
                if line.startswith("| ") and not line.startswith("| measure"))
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows["writes per execution end (API server's count)"] == "1.000"
    assert rows["writes when the same ends are reported again"].startswith("0 ")
    assert rows["after SIGKILL: profiles kept"] == "20 of 20"
    assert "10 deleted, 10 kept" in rows["bound 10: refresh deleting the least recently ended"]


def test_it_exits_non_zero_on_a_meaningless_size():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_profiles.py"),
                        "--workloads", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--workloads must be at least 2" in r.stderr
