"""A replay cut into pieces by workload (ai4dl.evaluation.partitioned): the merged sums are the
sums of the whole replay, the workload rows are the whole replay's, and the matched share of
windows at risk is the judge's factor rounded up to the grid (issue 44, item 5)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ai4dl.cli.replay_cluster import plan_pieces
from ai4dl.evaluation import partitioned as part
from ai4dl.evaluation.evaluate import EvaluationConfig, replay_served
from ai4dl.evaluation.workload_report import Owner
from ai4dl.judge import matched_risk_multiplier, served_risk_match
from ai4dl.method.synthetic import generate_fixed_length
from ai4dl.method.traces import TraceSet
from ai4dl.policy.policies import AdaptiveMax
from ai4dl.rules.safety import SafetyConfig
from ai4dl.sources.prometheus_types import PodRef

WINDOW = 40
STEP_UP = 2.0 ** (1 / 64)         # one step of the grid (auto.GRID_PER_OCTAVE)


@pytest.fixture(scope="module")
def traces():
    """24 synthetic DL jobs of 600 samples, six workloads of four runs each."""
    jobs = generate_fixed_length(24, 600, seed=1, n_features=2)
    return TraceSet([dataclasses.replace(j, group=f"w{i % 6}") for i, j in enumerate(jobs)])


def _config(safety: bool) -> EvaluationConfig:
    return EvaluationConfig(window=WINDOW, initial="served", workload_by="group",
                            include_cold_start=True,
                            safety=SafetyConfig.operator_defaults(2, 1) if safety else None)


def _summary(traces, cfg, groups=None) -> part.PieceSummary:
    piece = TraceSet([e for e in traces if groups is None or e.group in groups])
    res = replay_served(piece, cfg, AdaptiveMax(), "phasemodel")
    owners = [Owner("ml", "Job", e.group) for e in piece]
    requests = [np.array([4.0, 8 * 2.0 ** 30]) if e.group != "w5" else np.full(2, np.nan)
                for e in piece]
    return part.summarise(res, owners, requests, part.factor_grid())


@pytest.mark.parametrize("safety", [True, False])
def test_pieces_by_workload_add_up_to_the_whole(traces, safety):
    cfg = _config(safety)
    whole = _summary(traces, cfg)
    pieces = [_summary(traces, cfg, {f"w{k}", f"w{k + 1}"}) for k in (0, 2, 4)]
    merged = part.with_rows_sorted(pieces[0] + pieces[1] + pieces[2])
    assert merged.pieces == 3 and merged.executions == whole.executions == len(traces)
    assert merged.windows == whole.windows and merged.samples == whole.samples
    np.testing.assert_allclose(merged.oracle, whole.oracle, rtol=1e-12)
    assert set(merged.sums) == set(whole.sums) and "phasemodel" in merged.sums
    for name, per_resource in whole.sums.items():
        for a, b in zip(merged.sums[name], per_resource):
            np.testing.assert_array_equal(a.at_risk, b.at_risk)
            np.testing.assert_allclose(a.allocation, b.allocation, rtol=1e-12)
            np.testing.assert_allclose(a.worst, b.worst, rtol=1e-12)
    # the workloads' rows are the whole replay's (a workload never spans two pieces)...
    assert [r.key for r in merged.rows] == [r.key for r in whole.rows]
    for a, b in zip(merged.rows + [merged.total], whole.rows + [whole.total]):
        assert (a.pods, a.executions) == (b.pods, b.executions)
        assert a.hours == pytest.approx(b.hours) and a.usage == pytest.approx(b.usage)
        for name in b.policies:
            for r, fb in b.policies[name].items():
                fa = a.policies[name][r]
                assert (fa.short_windows, fa.windows) == (fb.short_windows, fb.windows)
                assert fa.allocation == pytest.approx(fb.allocation, rel=1e-12)
                assert fa.fulfilment == pytest.approx(fb.fulfilment, rel=1e-12)
                assert fa.savings == pytest.approx(fb.savings, rel=1e-12, nan_ok=True)
    # ... and the total's saving is over the known requests only (w5's are unknown)
    assert 0 < merged.total.known_hours["cpu"] < merged.total.hours


def test_the_matched_share_is_the_judges_factor_rounded_up_to_the_grid(traces):
    cfg = _config(True)
    res = replay_served(traces, cfg, AdaptiveMax(), "phasemodel")
    merged = _summary(traces, cfg, {"w0", "w1", "w2"}) + _summary(traces, cfg,
                                                                   {"w3", "w4", "w5"})
    checked = 0
    for m in part.matched(merged, (0.01, 0.05)):
        j = merged.resources.index(m.resource)
        judge = served_risk_match(res.data, res.own[m.policy].allocations, WINDOW, j, m.share,
                                  cfg.safety, include_cold_start=True)
        if not judge.met[0] or not 0.25 <= judge.factors[0] <= 4:
            continue
        f = float(judge.factors[0])
        assert f <= m.factor * (1 + 1e-9) and m.factor <= f * STEP_UP * (1 + 1e-9), m
        assert m.windows_at_risk <= math.floor(m.share * merged.windows + 1e-9)
        # the cost at the grid's factor: the judge's, or up to a step of the layer above it
        cost = float((np.concatenate([a[:, j] for a in judge.allocations]) *
                      np.concatenate([np.minimum(WINDOW, len(u) - np.arange(0, len(u), WINDOW))
                                      for u in res.data.usage])).sum())
        judge_cost = cost * res.data.step / 3600 / (2.0 ** 30 if j else 1.0)
        assert judge_cost <= m.vs_oracle * merged.oracle[j] * (1 + 1e-9)
        assert m.vs_oracle * merged.oracle[j] <= judge_cost * 1.06
        checked += 1
    assert checked >= 8


def test_without_a_safety_layer_the_factor_is_the_closed_form_on_the_grid(traces):
    cfg = _config(False)
    res = replay_served(traces, cfg, AdaptiveMax(), "phasemodel")
    merged = _summary(traces, cfg)
    grid = merged.grid
    checked = 0
    for m in part.matched(merged, (0.02,)):
        j = merged.resources.index(m.resource)
        wmax = np.concatenate([np.maximum.reduceat(u[:, j], np.arange(0, len(u), WINDOW))
                               for u in res.data.usage])
        alloc = np.concatenate([a[: len(w), j] for a, w in zip(
            res.replays[m.policy].allocations,
            [np.arange(0, len(u), WINDOW) for u in res.data.usage])])
        closed = matched_risk_multiplier(wmax, alloc, 0.02)
        k = np.searchsorted(grid, closed * (1 - 1e-12))
        assert m.factor == (grid[k] if k < grid.size else math.inf), m
        checked += k < grid.size
    assert checked >= 4


def test_a_share_no_factor_reaches_reports_its_floor(traces):
    """Windows at risk falling with the factor to a floor of half the windows: the floor, and
    the cost at the first factor from which on it holds."""
    cfg = _config(True)
    s = _summary(traces, cfg, {"w0"})
    K, floor = s.grid.size, s.windows // 2
    at_risk = np.maximum(np.arange(K)[::-1], floor)
    reached = K - 1 - floor
    never = dataclasses.replace(s, sums={"stuck": [part.RiskSums(
        at_risk, np.linspace(1, 2, K), np.full(K, 0.5))] * 2})
    (m, *_) = part.matched(never, (0.01,))
    assert m.factor == math.inf and m.floor == pytest.approx(floor / s.windows)
    assert m.grid_factor == s.grid[reached] and m.windows_at_risk == floor
    assert m.vs_oracle == pytest.approx(np.linspace(1, 2, K)[reached] / s.oracle[0])


def test_pieces_on_different_grids_are_not_merged(traces):
    cfg = _config(False)
    a = _summary(traces, cfg, {"w0"})
    b = dataclasses.replace(_summary(traces, cfg, {"w1"}), grid=part.factor_grid(32))
    with pytest.raises(ValueError, match="different grids"):
        a + b


def test_pieces_hold_whole_workloads():
    owner = {("ml", f"job-a-{k}"): Owner("ml", "Job", "a") for k in range(5)}
    owner |= {("ml", f"job-b-{k}"): Owner("ml", "Job", "b") for k in range(2)}
    owner |= {("ml", f"job-c-{k}"): Owner("ml", "Job", "c") for k in range(2)}
    containers = {PodRef(ns, pod, c): 1 for (ns, pod) in owner for c in ("main",)}
    containers[PodRef("ml", "job-c-0", "sidecar")] = 2
    pieces = plan_pieces(containers, owner, 3)
    # a: 5 containers, a piece of its own; b and c/main: 2 + 2 > 3, so apart; c/sidecar: 1
    assert [sorted({r.pod.rsplit("-", 1)[0] + "/" + r.container for r in p}) for p in pieces] \
        == [["job-a/main"], ["job-b/main"], ["job-c/main", "job-c/sidecar"]]
    assert sum(len(p) for p in pieces) == len(containers)
    assert pieces[2][PodRef("ml", "job-c-0", "sidecar")] == 2
