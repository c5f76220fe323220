"""Each benchmark's refusal (issue 44): the small pure function that says why a run measured
nothing, fed a result that measured nothing and one that measured, and the script's main
refusing a size that measures nothing before it starts anything. The runs themselves are the
smoke tests' (tests/test_bench_smoke.py, test_bench_operator.py, test_bench_profiles.py)."""

from __future__ import annotations

import copy
import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parent.parent


def bench(name: str):
    """bench/<name>.py as a module; the sys.path entries its import adds are taken back, so
    the repository's folders shadow nothing in the tests that follow."""
    saved = list(sys.path)
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


def refused(capsys, script: str, why: str) -> None:
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{script}: measured nothing, no table: {why}\n"


# ----------------------------------------------------------------------------- bench_trainer
TRAINED = {"executions": 4, "samples": 1760, "containers": 4, "held_out": 1}
REPLAYED = {"executions": 20, "samples": 8780, "containers": 20, "workloads": 2,
            "with_requests": 20}


def trainer_args(pods: int, replay: bool = False):
    return SimpleNamespace(pods=pods, replay=replay)


def test_trainer_measured_something():
    nothing = bench("bench_trainer").measured_nothing
    assert nothing(TRAINED, trainer_args(4)) is None
    assert nothing(REPLAYED, trainer_args(20, replay=True)) is None


@pytest.mark.parametrize("change, replay, why", [
    ({"executions": 0, "samples": 0}, False, "0 executions, 0 samples pulled of 4 pods written"),
    ({"containers": 3}, False, "3 containers pulled of the 4 written"),
    ({"held_out": 0, "too_few": "too few executions to fit"}, False,
     "0 held-out executions scored (too few executions to fit)"),
    ({"workloads": 0}, True, "the per-workload table has 0 workloads"),
    ({"with_requests": 0}, True, "requests found for 0 of 4 containers"),
], ids=["nothing-pulled", "part-pulled", "nothing-held-out", "no-workload", "no-requests"])
def test_trainer_measured_nothing(change, replay, why):
    nothing = bench("bench_trainer").measured_nothing
    m = {**(REPLAYED if replay else TRAINED), "containers": 4, **change}
    assert nothing(m, trainer_args(4, replay)) == why


def test_trainer_refuses_no_pod(capsys):
    assert bench("bench_trainer").main(["--pods", "0"]) == 1
    refused(capsys, "bench_trainer", "--pods 0: no pod to write")


def test_trainer_gives_every_container_its_authors_requests():
    """--replay's requests (so the lookup it times finds some): the peak cpu rounded up to
    whole cores, the peak memory plus a quarter, over the container's runs."""
    import numpy as np

    from ai4dl.method.traces import Execution

    def run(cpu, mem):
        return Execution("j", 15.0 * np.arange(3), np.array([cpu, mem], float).T,
                         ("cpu", "memory"), ("cores", "bytes"), step=15.0)
    got = bench("bench_trainer").author_requests(
        {("bench", "p", "main"): [run([0.2, 1.3, 0.5], [1e9, 2e9, 4e9]),
                                  run([0.1, 0.1, 0.1], [8e9, 1e9, 1e9])]})
    assert got == {("bench", "p", "main"): {"cpu": 2.0, "memory": 1e10}}


# ------------------------------------------------------------------ bench_fairness_operator
FAIR_ROWS = [("before", 3, 1.2, 4.0, 20.0, 80.0, 500),
             ("after, --min-window-seconds 0 (fair queue only)", 3, 0.4, 0.9, 9.0, 15.0, 510)]


def test_fairness_operator_measured_something():
    assert bench("bench_fairness_operator").measured_nothing(FAIR_ROWS) is None


@pytest.mark.parametrize("row, why", [
    (("after", 0, float("nan"), float("nan"), 9.0, 15.0, 510),
     "scenario 'after': 0 tenant windows, 510 webhook replies (the tenant's window is 12 s)"),
    (("after", 3, 0.4, 0.9, float("nan"), float("nan"), 0),
     "scenario 'after': 3 tenant windows, 0 webhook replies (the tenant's window is 12 s)"),
], ids=["no-tenant-window", "no-webhook-reply"])
def test_fairness_operator_measured_nothing(row, why):
    assert bench("bench_fairness_operator").measured_nothing([*FAIR_ROWS, row]) == why


def test_fairness_operator_refuses_no_flood(capsys):
    assert bench("bench_fairness_operator").main(["--flood", "0"]) == 1
    refused(capsys, "bench_fairness_operator", "--flood 0: no flood to measure the tenant "
                                               "against")


# ------------------------------------------------------------------- bench_idle_phasemodels
def test_idle_phasemodels_measured_something():
    nothing = bench("bench_idle_phasemodels").measured_nothing
    assert nothing(1000, 3, 3000) is None
    assert nothing(20, 2, 20) is None           # half of them: the operator served them


@pytest.mark.parametrize("size, why", [
    ((0, 3, 0), "--phasemodels 0: no PhaseModel to measure"),
    ((20, 0, 0), "--windows 0: no window to measure"),
    ((20, 2, 19), "19 windows served in the measured span, fewer than half of 20 PhaseModels "
                  "x 2 windows: the operator did not serve them"),
], ids=["no-phasemodel", "no-window", "not-served"])
def test_idle_phasemodels_measured_nothing(size, why):
    assert bench("bench_idle_phasemodels").measured_nothing(*size) == why


def test_idle_phasemodels_counts_the_operators_writes_apart_from_the_api_servers():
    from collections import Counter

    before = Counter({("LIST", "pods", ""): 5, ("PUT", "leases", ""): 1})
    after = Counter({("LIST", "pods", ""): 65, ("PUT", "leases", ""): 7,
                     ("PATCH", "phasemodels", "status"): 30, ("POST", "events", ""): 3,
                     ("PATCH", "phasemodels", ""): 6, ("GET", "phasemodels", ""): 9,
                     ("WATCH", "pods", ""): 2})
    got = bench("bench_idle_phasemodels").per_window(before, after, 3)
    assert got == {"pod_lists": 20.0, "writes": 13.0, "status_patches": 10.0, "events": 1.0,
                   "other": 2.0, "leases": 2.0, "other_writes": {"PATCH phasemodels": 2.0}}


def test_idle_phasemodels_refuses_no_phasemodel(capsys):
    assert bench("bench_idle_phasemodels").main(["--phasemodels", "0"]) == 1
    refused(capsys, "bench_idle_phasemodels", "--phasemodels 0: no PhaseModel to measure")


# ---------------------------------------------------------------------------- bench_real_node
@pytest.fixture(scope="module")
def real_node_run() -> dict:
    """The committed table's raw results: a run that measured something."""
    return json.loads((REPO / "docs" / "results" / "real-node.json").read_text())


def test_real_node_committed_run_measured_something(real_node_run):
    nothing = bench("bench_real_node").measured_nothing
    assert nothing(real_node_run["results"], real_node_run["meta"]) is None


def test_real_node_measured_nothing(real_node_run):
    nothing = bench("bench_real_node").measured_nothing
    meta = real_node_run["meta"]

    cut = copy.deepcopy(real_node_run["results"])
    for r in cut:
        for j in r["jobs"]:
            j["finished"] = False
    assert nothing(cut, meta) == "none of the 24 jobs finished"

    unrecorded = {**meta, "model": {"samples": {"cnn": 0, "transformer": 0}}}
    assert nothing(real_node_run["results"], unrecorded) == \
        "0 samples recorded from the static runs: no history, no model"

    idle = copy.deepcopy(real_node_run["results"])
    for r in idle:
        if r["policy"] == "auto":
            r["totals"]["resizes"] = 0
    assert nothing(idle, meta) == "the operator serving auto resized nothing in its 3 runs"
    # one run of it that resized is a run that measured
    idle[-1]["totals"]["resizes"] = 1
    assert nothing(idle, meta) is None


def test_real_node_refuses_no_run(capsys):
    assert bench("bench_real_node").main(["--runs", "0"]) == 1
    refused(capsys, "bench_real_node", "--runs 0: no run of any job")


# ---------------------------------------------------------------------------- bench_admission
ADMITTED = {"with_hook": [0.01] * 3, "mutated": 3, "direct": [0.002] * 3, "unpatched": 0,
            "without": [0.008] * 3, "plain_mutated": 0, "handler_calls": 10.0}


def test_admission_measured_something():
    assert bench("bench_admission").measured_nothing(ADMITTED) is None


@pytest.mark.parametrize("change, why", [
    ({"mutated": 2}, "the webhook sized 2 of 3 pods created with it on (every one is asked for)"),
    ({"unpatched": 1}, "1 of 3 AdmissionReviews sent straight to the webhook came back "
                       "without an allowed patch"),
    ({"direct": []}, "0 of 0 AdmissionReviews sent straight to the webhook came back without "
                     "an allowed patch"),
    ({"plain_mutated": 3}, "3 of 3 pods created with the webhook configuration deleted were "
                           "sized by it: no baseline without the webhook"),
    ({"handler_calls": 0.0}, "the operator's ai4dl_admission_duration_seconds counted 0 "
                             "handler calls"),
], ids=["hook-sized-fewer", "direct-unpatched", "no-direct", "plain-mutated", "no-handler-call"])
def test_admission_measured_nothing(change, why):
    assert bench("bench_admission").measured_nothing({**ADMITTED, **change}) == why


def test_admission_handler_histogram_reads_the_buckets():
    text = ("# TYPE ai4dl_admission_duration_seconds histogram\n"
            'ai4dl_admission_duration_seconds_bucket{le="0.005"} 7.0\n'
            'ai4dl_admission_duration_seconds_bucket{le="+Inf"} 9.0\n'
            "ai4dl_admission_duration_seconds_count 9.0\n")
    hist = bench("bench_admission").handler_histogram(text)
    assert hist == {"0.005": 7.0, "+Inf": 9.0}
    assert bench("bench_admission").handler_histogram("") == {}


# ------------------------------------------------------------------- bench_core, bench_policies
def core_args(**kw):
    return SimpleNamespace(**{"executions": 4, "samples": 200, "repeats": 1, "epochs": 2, **kw})


def policies_args(**kw):
    return SimpleNamespace(**{"executions": 4, "samples": 160, "window": 40,
                              "fit_executions": 6, "model_executions": 6, "epochs": 2,
                              "skip_replay": False, **kw})


def test_core_sizes():
    too_little = bench("bench_core").too_little
    assert too_little(core_args()) is None
    assert too_little(core_args(epochs=0)) == "--epochs 0: no CRBM epoch to time"
    assert "0 executions of 200 samples" in too_little(core_args(executions=0))


def test_policies_sizes():
    too_little = bench("bench_policies").too_little
    assert too_little(policies_args()) is None
    assert too_little(policies_args(window=0)) == "--window 0: no window to replay or serve"
    assert too_little(policies_args(epochs=0)) == "--epochs 0: a phase model trained on no epoch"
    assert too_little(policies_args(samples=79)) == ("--samples 79 < two windows of 40: no "
                                                     "window to score")


# ---------------------------------------------------------------------------------- gpu_check
def test_gpu_check_measured_something():
    results = {"data": {"executions": 4}, "fit_cpu": {"device": "cpu", "fit_s": 0.3}}
    assert bench("gpu_check").measured_nothing(results) is None


@pytest.mark.parametrize("results, why", [
    ({"data": {"executions": 0}, "fit_cpu": {"device": "cpu"}}, "0 executions: nothing to fit"),
    ({"data": {"executions": 4}}, "no CPU fit to compare with (not run)"),
    ({"data": {"executions": 4}, "fit_cpu": "failed: TraceError: too short\ntraceback"},
     "no CPU fit to compare with (failed: TraceError: too short)"),
], ids=["no-execution", "no-fit", "fit-failed"])
def test_gpu_check_measured_nothing(results, why):
    assert bench("gpu_check").measured_nothing(results) == why
