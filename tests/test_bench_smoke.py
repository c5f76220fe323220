"""Each benchmark's smoke run (issue 44: benchmarks that cannot rot): at a small size it prints
its table, which shows it served what it created, and exits 0; given nothing to measure it
prints no table, says why in one line and exits 1. Not timings: bench/ measures, these check
that it still can. Those needing a real control plane or Prometheus are integration tests.
The operator's, the profiles' and the real node's have their own (tests/test_bench_operator.py,
tests/test_bench_profiles.py, tests/test_real_node_jobs.py); each refusal's reasons are
tests/test_bench_refusals.py's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def bench(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def table(stdout: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell: the other cells, stripped."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in stdout.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in rows}


def assert_refused(r: subprocess.CompletedProcess, script: str, why: str) -> None:
    """No table on stdout, one line on stderr naming ``why``, exit 1."""
    name = script.removesuffix(".py")
    assert r.returncode == 1 and r.stdout.strip() == "", (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"{name}: measured nothing, no table: ") and why in line, line


@pytest.mark.parametrize("script, args, rows", [
    ("bench_core.py", ("--executions", "4", "--samples", "200", "--repeats", "1",
                       "--epochs", "2"),
     ("| fit: total |", "| detect, operator windows (1 thread) | ")),
    ("bench_policies.py", ("--executions", "4", "--samples", "160", "--fit-executions", "6",
                           "--model-executions", "6", "--epochs", "2"),
     ("## Head-room table", "## Peak-risk table", "| **total: 11 policies** |")),
    ("bench_fairness.py", ("--flood", "3", "--seconds", "13"),
     ("| before | ", "| after | ")),
    # no cluster: plan_window in process, each kind planned for the 20 pods made
    ("bench_operator.py", ("--serving", "--pods", "20", "--traces", "synthetic"),
     ("| plan_window, 20 pods (median of 15) |", "| phase | phase | ",
      "| adaptive-max | adaptive-max | ")),
], ids=["core", "policies", "fairness", "operator-serving"])
def test_a_small_run_prints_its_table(script, args, rows):
    r = bench(script, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    for row in rows:
        assert row in r.stdout, (row, r.stdout[-2000:])
    assert "measured nothing" not in r.stderr


@pytest.mark.parametrize("script, args, why", [
    ("bench_core.py", ("--executions", "0"), "0 executions of 2400 samples"),
    ("bench_core.py", ("--epochs", "0"), "--epochs 0: no CRBM epoch to time"),
    ("bench_policies.py", ("--samples", "50"), "--samples 50 < two windows of 40"),
    ("bench_policies.py", ("--window", "0"), "--window 0: no window to replay or serve"),
    ("bench_policies.py", ("--epochs", "0"), "--epochs 0: a phase model trained on no epoch"),
    ("bench_fairness.py", ("--flood", "1", "--seconds", "0.5"), "0 tenant windows"),
    # refused before a cluster, a Prometheus or torch is started
    ("bench_admission.py", ("--pods", "0"), "--pods 0: nothing to create"),
    ("bench_trainer.py", ("--pods", "0"), "--pods 0: no pod to write"),
    ("bench_trainer.py", ("--engine", "local"), "--engine times the replay: give --replay"),
    ("bench_fairness_operator.py", ("--flood", "0"), "--flood 0: no flood to measure"),
    ("bench_operator.py", ("--pods", "0", "--serving"), "--pods 0: no pod to serve"),
    ("gpu_check.py", ("--out", "/nonexistent/gpu", "--executions", "0"),
     "--executions 0: nothing to fit"),
], ids=["core", "core-epochs", "policies", "policies-window", "policies-epochs", "fairness",
        "admission", "trainer", "trainer-engine", "fairness-operator", "operator-serving",
        "gpu-check"])
def test_nothing_to_measure_is_no_table_and_exit_1(script, args, why):
    assert_refused(bench(script, *args), script, why)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_the_gpu_check_fits_on_the_cpu(tmp_path):
    """bench/gpu_check.py without a GPU (its CUDA stages skipped): the CPU fit of what it
    generated, in its JSON; a fit that fails is no JSON and exit 1."""
    r = bench("gpu_check.py", "--out", str(tmp_path), "--executions", "4", "--samples", "200",
              "--budget", "30")
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    got = json.loads((tmp_path / "gpu_check.json").read_text())
    assert got["data"]["executions"] == 4 and got["data"]["samples"] == 200
    assert got["fit_cpu"]["device"] == "cpu" and got["fit_cpu"]["phases"] >= 1, got["fit_cpu"]
    assert isinstance(got["crbm_cpu_1"], dict), got["crbm_cpu_1"]
    # 8 samples cannot hold two phases: the fit fails, and nothing else is measured against it
    r = bench("gpu_check.py", "--out", str(tmp_path / "short"), "--executions", "2",
              "--samples", "4", "--budget", "5")
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr[-2000:])
    assert r.stderr.strip().splitlines()[-1].startswith(
        "gpu_check: measured nothing, no table: no CPU fit to compare with (failed: ")
    assert not (tmp_path / "short" / "gpu_check.json").exists()


@pytest.mark.integration
def test_the_trainer_benchmark_pulls_every_pod_it_wrote(prometheus_binary):
    r = bench("bench_trainer.py", "--pods", "4", "--hours", "1", "--epochs", "2")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rows = table(r.stdout)
    assert "4 containers" in rows["history pull"][0], rows
    assert rows["score on held-out pods"][0].endswith(", 1 executions"), rows
    # two pods are too few to train on and score: refused with the trainer's reason
    assert_refused(bench("bench_trainer.py", "--pods", "2", "--hours", "1", "--epochs", "2"),
                   "bench_trainer.py", "0 held-out executions scored (too few executions")


@pytest.mark.integration
def test_the_trainer_replay_finds_every_workload_and_request(prometheus_binary):
    r = bench("bench_trainer.py", "--pods", "20", "--hours", "1", "--epochs", "2", "--replay")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rows = table(r.stdout)
    assert "20 containers" in rows["history pull"][0], rows
    assert rows["owners and requests"][0].endswith("requests of 20 containers"), rows
    # pods of Jobs of 10 pods each (bench_trainer.pod_name): 2 workloads
    assert rows["per-workload table"][0].endswith(", 2 workloads"), rows


@pytest.mark.integration
def test_the_replay_piece_by_piece_replays_every_pod_on_every_worker_count(prometheus_binary):
    r = bench("bench_trainer.py", "--pods", "20", "--hours", "1", "--epochs", "2", "--replay",
              "--engine", "local", "--workers", "1,2", "--piece-containers", "10")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rows = table(r.stdout)
    # 20 pods of 2 Jobs (bench_trainer.pod_name), 10 containers a piece: 2 pieces
    assert [rows[w][:2] for w in ("local 1", "local 2")] == [["2", "20"], ["2", "20"]], rows
    assert rows["local 1"][5] == "1.00 ×" and rows["local 2"][5].endswith(" ×"), rows


@pytest.mark.integration
def test_the_admission_benchmark_sizes_every_pod_it_creates(kube_cluster):  # binaries built
    r = bench("bench_admission.py", "--pods", "3")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    assert "pods mutated with the webhook on: 3 of 3" in r.stdout
    rows = table(r.stdout)
    for series in ("pod creation, webhook on", "pod creation, no webhook",
                   "**webhook round trip (AdmissionReview over TLS, new connection)**"):
        assert rows[series][0] == "3", (series, rows)


@pytest.mark.integration
def test_the_fairness_operator_benchmark_serves_the_tenant_in_every_scenario(kube_cluster):
    # this tree's no-minimum scenario (the "before" one is the git history's code, not the
    # product's; the "defaults" one is the same code with the operator's default flags, and
    # takes 70 s to 145 s). One second: a scenario goes on past its length until the tenant
    # has finished a window after its start-up one (the script's grace), which is what is
    # asserted; webhook requests are sent all that time.
    r = bench("bench_fairness_operator.py", "--flood", "3", "--seconds", "1", "--skip-before",
              "--skip-defaults", timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rows = {k: v for k, v in table(r.stdout).items() if k != "operator"}
    assert list(rows) == ["after, --min-window-seconds 0 (fair queue only)"], r.stdout
    for label, (windows, *_, requests) in rows.items():
        # a tenant window after the start-up one, and webhook replies, in each scenario
        assert int(windows) >= 1 and int(requests) >= 1, (label, r.stdout)


@pytest.mark.integration
def test_the_idle_phasemodels_benchmark_serves_every_window(kube_cluster):
    r = bench("bench_idle_phasemodels.py", "--phasemodels", "20", "--namespaces", "2",
              "--window", "4", "--windows", "2", timeout=300)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rows = {k: v[0] for k, v in table(r.stdout).items()}
    # every PhaseModel's window in each of the 2 periods measured (4 s windows served every
    # window: --min-window-seconds 0)
    assert int(rows["windows served (log lines in the measured span)"]) >= 20 * 2, r.stdout
    assert float(rows["pod LISTs per window"]) >= 0, r.stdout
    writes, pct = rows["writes per window (% of PhaseModels)"].split(" (")
    assert float(writes) >= 0 and pct.endswith(" %)"), r.stdout
    assert float(rows["operator RSS end (MiB)"]) > float(
        rows["operator RSS baseline, no PhaseModel (MiB)"]) > 0, r.stdout
    for label, value in rows.items():
        if label.startswith("operator RSS per PhaseModel"):
            float(value)
        if label.startswith("bar: "):
            assert value in ("met", "**not met**"), (label, value)
