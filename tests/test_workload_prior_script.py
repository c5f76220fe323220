"""docs/results/workload_prior_probe.py (docs/results.md §7): the prior is the previous
execution of the same workload in time order, it is known before the execution's first window,
an execution without one is served as the control serves it, and one run scores the control,
the probe and the clairvoyant static peak at every share."""

from __future__ import annotations

import numpy as np
import pytest

from ai4dl.method import synthetic
from ai4dl.policy.peak import PeakRiskPolicy

RESULTS_SCRIPT = "workload_prior_probe.py"


@pytest.fixture(scope="module")
def wp(results_script):
    return results_script


def _usages(n=12, seed=5):
    traces, _ = synthetic.generate(n, seed=seed)
    return [np.asarray(ex.values, np.float64)[:, :1] for ex in traces]


def test_the_prior_is_the_previous_execution_of_the_same_group_in_time_order(wp):
    u = [np.array([[3.0]]), np.array([[5.0]]), np.array([[7.0]]), np.array([[2.0]])]
    groups = ["a", "b", "a", "a"]
    starts = [10.0, 0.0, 30.0, 20.0]          # a runs 3.0 (t 10), 2.0 (t 20), 7.0 (t 30)
    got = wp.previous_peaks(u, groups, starts)
    assert got[0] is None and got[1] is None
    assert got[3][0] == 3.0 and got[2][0] == 2.0


def test_the_prior_is_one_window_in_front_and_the_tags_read_the_own_maximum(wp):
    u = np.array([[1.0], [5.0], [2.0], [9.5], [11.0]])
    plain, tags = wp.with_prior(u, None, 3)
    np.testing.assert_array_equal(plain, u)
    assert (tags == wp.NO_HISTORY).all()
    aug, tags = wp.with_prior(u, np.array([10.0]), 3)
    np.testing.assert_array_equal(aug[:3], 10.0)
    np.testing.assert_array_equal(aug[3:], u)
    # own running maximum ÷ 10: 0.1, 0.5, 0.5 (below 0.7), 0.95 (0.9-1), 1.1 (1 and over)
    assert tags.tolist() == [wp.NOTHING_SEEN] * 3 + [1, 1, 1, 3, 4]


def test_without_history_the_probe_serves_what_the_control_serves(wp):
    """Every execution its own workload: no prior anywhere, and the probe's fit and rows are
    the phase-blind peak-risk's (the tag slot is constant, so it pools as the control does)."""
    usages = _usages()
    groups = [f"g{i}" for i in range(len(usages))]
    starts = [float(i) for i in range(len(usages))]
    control = PeakRiskPolicy(max_risk=0.05, use_phase=False).fit(usages, None, 40,
                                                                 groups=groups)
    probe = wp.PeakRiskPrior(0.05).fit(usages, groups, starts, 40)
    for u in usages[:3]:
        np.testing.assert_allclose(probe.allocate(u, None, 40, np.ones(1), 15.0),
                                   control.allocate(u, None, 40, np.ones(1), 15.0))


def test_a_known_workload_starts_from_its_previous_peak(wp):
    """The second execution of a group is sized from the first one's peak at its first window
    (not the cold start), whatever order the executions are given in."""
    usages = _usages()
    groups = [f"g{i // 2}" for i in range(len(usages))]           # pairs
    starts = [float(i) for i in range(len(usages))]
    probe = wp.PeakRiskPrior(0.05).fit(usages, groups, starts, 40)
    first, second = usages[0], usages[1]
    rows = probe.allocate_group([second, first], [None, None], 40, [np.ones(1)] * 2, 15.0,
                                [1.0, 0.0], ["b", "a"])
    np.testing.assert_array_equal(rows[1][0], probe.inner.cold_start_)
    c = rows[0][0][0] / first.max()
    assert np.isclose(c, probe.inner.multiplier_.ravel(), rtol=1e-12).any(), c
    assert len(rows[0]) == len(probe.allocate(second, None, 40, np.ones(1), 15.0))


def test_one_run_scores_the_control_the_probe_and_the_static_peak(wp):
    doc = wp.run_one("dlcorpus", 0)
    assert 0 <= doc["with_history"] <= doc["executions"]
    assert set(doc["figures"]) == {"static", "peak-risk", "peak-risk-prior"}
    for name, by in doc["figures"].items():
        assert set(by) == set(wp.RISKS)
        assert all(v >= 1.0 - 1e-9 for v in by.values()), name
    assert len(doc["next_over_previous"]) in (0, 3)
