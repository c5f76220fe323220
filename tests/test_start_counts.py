"""The start counts (../shared/docs/evaluation.md, last section): ``ai4dl evaluate`` scores the
first window and starts each execution as the operator would serve it by default; a clairvoyant
start says so; a share of windows at risk that no multiplier reaches reports its floor and the
cost there instead of a blank.

- the judge's floor by hand, with the operator's safety layer (a start below the first window's
  usage, which no multiplier on the policy's rows moves) and without one (a zero allocation);
- the CLI: the defaults, the labels, --exclude-cold-start, --workload-by and its error;
- on re-run synthetic jobs, the served start comes from the workload's profile for every run
  after a workload's first, and scores its first windows in the cold-start table.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from ai4dl.cli import main
from ai4dl.judge import Replay, ReplayInput, score
from ai4dl.policy.policies import AdaptiveMax, Oracle
from ai4dl.rules.safety import SafetyConfig
from ai4dl.judge import replay

GiB = 1024.0 ** 3


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def one_execution(initial_gib: float) -> ReplayInput:
    # four windows of 4 samples: 4, 4, 4, 4 GiB; the start is ``initial_gib``
    usage = np.full((16, 1), 4.0 * GiB)
    return ReplayInput(["e"], [usage], [None], [np.array([initial_gib * GiB])], 15.0,
                       ("memory",), ("bytes",), ["e"], [0.0])


class TestFloor:
    def test_a_start_below_the_first_window_is_a_floor_with_the_layer(self):
        data = one_execution(1.0)            # window 0 served at 1 GiB: at risk, whatever
        safety = SafetyConfig.operator_defaults(1, 0)
        own = {p.name: replay(data, p, 4) for p in (AdaptiveMax(), Oracle())}
        served = {n: Replay(n, r.allocations) if n == "oracle" else
                  Replay(n, replay(data, AdaptiveMax(), 4, safety).allocations)
                  for n, r in own.items()}
        s = score(data, served, 4, include_cold_start=True, risks=(0.01, 0.5),
                  safety=safety, own=own)["adaptive-max"][0]
        assert s.vs_oracle_risk_at[0.01] == np.inf
        assert s.risk_floor_at[0.01] == pytest.approx(0.25)     # 1 window of 4, for good
        # at the floor: window 0 at the 1 GiB start, windows 1-3 at the layer's working-set
        # cover (4 GiB x 1.1, above any smaller factor's proposal): 14.2 of the oracle's 16
        assert s.vs_oracle_floor_at[0.01] == pytest.approx((1 + 3 * 4.4) / 16)
        assert s.vs_oracle_risk_at[0.5] == pytest.approx((1 + 3 * 4.4) / 16)  # reached there
        assert 0.5 not in s.risk_floor_at            # reachable: no floor reported

    def test_the_cold_start_excluded_has_no_such_floor(self):
        data = one_execution(1.0)
        safety = SafetyConfig.operator_defaults(1, 0)
        own = {p.name: replay(data, p, 4) for p in (AdaptiveMax(), Oracle())}
        served = {"adaptive-max": replay(data, AdaptiveMax(), 4, safety),
                  "oracle": own["oracle"]}
        s = score(data, served, 4, include_cold_start=False, risks=(0.01,),
                  safety=safety, own=own)["adaptive-max"][0]
        assert s.risk_floor_at == {} and s.vs_oracle_risk_at[0.01] == pytest.approx(1.1)

    def test_a_zero_allocation_is_a_floor_without_a_layer(self):
        data = one_execution(0.0)           # adaptive-max's row 0 is the start: 0
        reps = {p.name: replay(data, p, 4) for p in (AdaptiveMax(), Oracle())}
        s = score(data, reps, 4, include_cold_start=True, risks=(0.01,))["adaptive-max"][0]
        assert s.vs_oracle_risk_at[0.01] == np.inf
        assert s.risk_floor_at[0.01] == pytest.approx(0.25)
        # at the floor, windows 1-3 at 4 GiB: oracle's 16 window-GiB against 12
        assert s.vs_oracle_floor_at[0.01] == pytest.approx(0.75)


# ----------------------------------------------------------------------------- the CLI
@pytest.fixture(scope="module")
def rerun_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("starts") / "reruns.csv"
    rc, _, err = _run(["-q", "synthetic", "-o", str(path), "--executions", "24", "--seed", "4",
                       "--no-gpu", "--runs-per-workload", "3"])
    assert rc == 0, err
    return path


BASE = ["--window", "20", "--resources", "memory", "--policies", "adaptive-max,krr,oracle",
        "--safety", "operator"]


def test_defaults_count_the_start_as_served(rerun_csv):
    rc, out, err = _run(["-q", "evaluate", str(rerun_csv), *BASE])
    assert rc == 0, err
    head = out.splitlines()[0]
    assert "cold start (first window of each execution) included" in head
    # 3 runs a job, groups held out whole: 2 of every 3 held-out runs have an earlier one
    assert "initial request: served, as the operator would (workload by group: " in head
    n_test = int(head.split(" test executions")[0].rsplit(" ", 1)[1])
    assert f"{2 * n_test // 3} from profile, {n_test // 3} from pooled; " in head
    # under the operator's safety layer a known workload's memory is held at its peak
    assert "memory held at the workload's peak until its time under the safety layer)" in head
    assert "served (workload profile, else pooled)" in out     # its cold-start row


def test_the_json_counts_the_starts(rerun_csv, tmp_path):
    import json

    rc, _, err = _run(["-q", "evaluate", str(rerun_csv), *BASE, "--json", str(tmp_path / "r.json")])
    assert rc == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["config"]["initial"] == "served" and doc["config"]["include_cold_start"] is True
    n = doc["counts"]["test_executions"]
    assert doc["starts"] == {"profile": 2 * n // 3, "pooled": n // 3, "request": 0, "peak": 0}


def test_the_clairvoyant_start_says_so(rerun_csv):
    rc, out, _ = _run(["-q", "evaluate", str(rerun_csv), *BASE, "--initial", "peak",
                       "--exclude-cold-start"])
    assert rc == 0
    head = out.splitlines()[0]
    assert "initial request: peak (clairvoyant: each execution's own lifetime peak)" in head
    assert "cold start (first window of each execution) excluded" in head


def test_the_served_start_moves_the_figures(rerun_csv):
    """KRR keeps the request it was served where it has too few points: with the start served
    it is not the clairvoyant peak any more."""
    def krr_cost(*flags):
        rc, out, _ = _run(["-q", "evaluate", str(rerun_csv), *BASE, *flags])
        assert rc == 0
        row = next(line for line in out.splitlines() if line.startswith("| krr "))
        return row
    assert krr_cost("--initial", "peak") != krr_cost()


def test_workload_by_a_key_no_execution_has_is_one_line(rerun_csv):
    rc, out, err = _run(["evaluate", str(rerun_csv), *BASE, "--workload-by", "famly"])
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--workload-by famly: no execution has that attribute" in lines[0]


def test_workload_by_a_key_the_corpus_has():
    rc, out, err = _run(["-q", "evaluate", "dl-corpus", "--window", "40", "--resources",
                         "memory", "--policies", "adaptive-max,oracle", "--workload-by",
                         "family", "--risks", "none"])
    assert rc == 0, err
    assert "initial request: served, as the operator would (workload by 'family': " in \
        out.splitlines()[0]
