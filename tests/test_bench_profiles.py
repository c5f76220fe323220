"""The workload-profile benchmark's smoke run (bench/bench_profiles.py at 20 workloads): it
runs end to end on a real control plane and prints its table; the figures at 10,000 workloads
are the README's (Benchmark). Sizes that measure nothing, and a run that measured nothing, are
refused (issue 44): no table, one line on stderr, exit 1."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.integration
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


@pytest.mark.parametrize("args, why", [
    (("--workloads", "1"), "--workloads 1: at least 2 (the bound deletes half of them)"),
    (("--threads", "0"), "--threads 0: no thread to write with"),
], ids=["workloads", "threads"])
def test_a_meaningless_size_is_refused(args, why):
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_profiles.py"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr == f"bench_profiles: measured nothing, no table: {why}\n"


def test_measured_nothing_names_why():
    saved = list(sys.path)          # its import puts the repository's folders first: undone
    sys.path.insert(0, str(REPO / "bench"))
    try:
        measured_nothing = importlib.import_module("bench_profiles").measured_nothing
    finally:
        sys.path[:] = saved

    assert measured_nothing(20, 20.0, 20, 10) is None
    assert measured_nothing(20, 19.0, 20, 10) == (
        "20 workloads: 19 writes, 20 profiles kept after a SIGKILL, 10 deleted by a bound of 10")
    assert "0 profiles kept" in measured_nothing(20, 20.0, 0, 10)
    assert "0 deleted by a bound of 10" in measured_nothing(20, 20.0, 20, 0)
