"""Tests of the replay evaluator (ai4dl.evaluation.evaluate).

- matched_margin: known answers (order statistics of usage ÷ allocation), reaching the target;
- the oracle is the floor: 100 % fulfilment, and no policy that fulfils 100 % allocates less;
- score() details computed by hand (OOM windows, resizes, cold start, units, margins, and
  the windows short / worst shortfall at the matched margin);
- the calibration figures of shared/docs/evaluation.md reproduced on the real GCD traces;
- run_evaluation end to end on synthetic executions, with a group-disjoint split.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai4dl.evaluation.evaluate import EvaluationConfig, prepare, run_evaluation
from ai4dl.judge import Replay, ReplayInput, replay, score
from ai4dl.judge import matched_margin, wins_over
from ai4dl.policy.policies import AdaptiveMax, AdaptiveStat, Oracle, Static
from ai4dl.rules.safety import SafetyConfig
from ai4dl.method.traces import Execution, TraceSet

GiB = 1024.0 ** 3


def share(u, a, m):
    return float(np.mean(u <= a * (1.0 + m)))


# ----------------------------------------------------------------------------- matched margin
class TestMatchedMargin:
    # ratios 0.50, 0.51, ..., 1.50 against an allocation of 4 (a power of two, and ratios in
    # [0.5, 2], so 4 x (1 + (r - 1)) == 4 r exactly)
    ratios = np.round(np.linspace(0.5, 1.5, 101), 10)
    alloc = np.full(101, 4.0)
    usage = 4.0 * ratios

    @pytest.mark.parametrize("target,expected", [
        (0.95, 0.45),    # the 96th of 101 (ceil(95.95)): 0.5 + 0.95
        (0.97, 0.47),    # the 98th
        (1.0, 0.5),      # the largest
        (0.5, 0.0),      # the 51st: ratio 1.0
        (0.0, -0.5),     # at least one sample: the smallest
    ])
    def test_known_answers(self, target, expected):
        rng = np.random.default_rng(1)
        order = rng.permutation(101)          # the order of the samples does not matter
        m = matched_margin(self.usage[order], self.alloc[order], target)
        assert m == pytest.approx(expected, abs=1e-12)

    @pytest.mark.parametrize("target", [0.5, 0.9, 0.95, 0.97, 1.0])
    def test_reaches_target_and_smaller_does_not(self, target):
        m = matched_margin(self.usage, self.alloc, target)
        assert share(self.usage, self.alloc, m) >= target
        assert share(self.usage, self.alloc, m - 1e-6) < target

    def test_target_exactly_on_a_sample_count(self):
        # 20 samples, 95 % = exactly 19 of them: the 19th ratio, not the 20th
        r = np.arange(1, 21) / 16.0               # 1/16 .. 20/16, exact
        m = matched_margin(r, np.ones(20), 0.95)
        assert m == 19 / 16.0 - 1.0

    def test_float_product_just_above_a_sample_count(self):
        # 0.55 x 100 = 55.00000000000001 in floating point: 55 samples are 55 %, not 56
        r = np.arange(1, 101) / 64.0
        assert 0.55 * 100 > 55
        assert matched_margin(r, np.ones(100), 0.55) == 55 / 64.0 - 1.0

    def test_zero_allocation(self):
        u, a = np.array([1.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0])
        assert matched_margin(u, a, 1.0) == np.inf            # 1 > 0 x (1 + m) for any m
        assert matched_margin(u, a, 0.6) == 0.0               # ratios {0, 1, inf}: 2nd
        assert matched_margin(u, a, 0.3) == -1.0              # 0 <= 0 needs no allocation

    def test_empty(self):
        assert np.isnan(matched_margin(np.empty(0), np.empty(0), 0.95))

    @settings(max_examples=200, deadline=None)
    @given(st.integers(0, 2 ** 32 - 1), st.integers(1, 60), st.floats(0.01, 1.0))
    def test_property_smallest_margin(self, seed, n, target):
        rng = np.random.default_rng(seed)
        u = rng.uniform(0.0, 10.0, n)
        a = rng.uniform(0.1, 10.0, n)
        m = matched_margin(u, a, target)
        # up to rounding of a x (1 + m): reaches the target, and any smaller margin
        # (beyond the next distinct ratio) does not
        assert share(u, a * (1 + 1e-12), m) >= target
        r = np.sort(u / a)
        below = r[r < (1 + m) * (1 - 1e-9)]
        if len(below):
            assert share(u, a * (1 - 1e-12), below.max() - 1.0) < target

    def test_returned_margin_reaches_target_exactly(self):
        u, a = np.array([1.0]), np.array([3.0])
        m = matched_margin(u, a, 1.0)
        assert share(u, a, m) == 1.0


# ----------------------------------------------------------------------------- the oracle floor
class Scaled:
    """A test policy: another policy's rows times a factor (a margin on any policy)."""
    needs_phases = False

    def __init__(self, inner, factor):
        self.inner, self.factor, self.name = inner, factor, f"{inner.name}x{factor}"

    def allocate(self, usage, phases, window, initial, step):
        return self.inner.allocate(usage, phases, window, initial, step) * self.factor


def hand_input(usages, units=("cores", "bytes"), step=300.0, initial=None):
    R = usages[0].shape[1]
    return ReplayInput([f"e{i}" for i in range(len(usages))], list(usages),
                       [None] * len(usages),
                       [u.max(0) if initial is None else initial[i] for i, u in enumerate(usages)],
                       step, ("cpu", "memory")[:R], tuple(units[:R]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 4), st.integers(1, 10), st.booleans())
def test_oracle_is_the_floor(seed, n_exec, window, cold):
    rng = np.random.default_rng(seed)
    usages = [rng.gamma(2.0, 1.0, (int(rng.integers(1, 80)), 2)) * [1.0, GiB] + [0.01, 1e6]
              for _ in range(n_exec)]
    data = hand_input(usages)
    policies = {"oracle": Oracle(), "static": Static(), "adaptive-max": AdaptiveMax(),
                "adaptive-stat": AdaptiveStat(),
                "amx3": Scaled(AdaptiveMax(), 3.0), "statx2": Scaled(AdaptiveStat(), 2.0),
                "static/2": Scaled(Static(), 0.5)}
    replays = {k: replay(data, p, window) for k, p in policies.items()}
    safe = SafetyConfig(memory_margin=0.5, max_decrease=0.2, cooldown_windows=1)
    replays["adaptive-max+safety"] = replay(data, AdaptiveMax(), window, safe)
    if not cold and all(len(u) <= window for u in usages):
        return   # nothing is scored when every execution fits in its cold-start window
    s = score(data, replays, window, include_cold_start=cold, targets=(0.95, 1.0))
    for j in range(2):
        o = s["oracle"][j]
        assert o.fulfilment == 1.0 and o.under_samples == 0 and o.oom_windows == 0
        assert o.vs_oracle == pytest.approx(1.0)
        assert o.margin_at[1.0] == 0.0
        for name, rows in s.items():
            r = rows[j]
            # at its own 100 % margin every per-window policy allocates at least the oracle
            assert r.vs_oracle_at[1.0] >= 1.0 - 1e-9, name
            if r.fulfilment == 1.0:
                assert r.allocation >= o.allocation * (1 - 1e-12), name
    # static at the peak always fulfils 100 %
    assert s["static"][0].fulfilment == 1.0 and s["static"][1].fulfilment == 1.0
    assert s["static"][0].vs_static_peak == pytest.approx(1.0)


# ----------------------------------------------------------------------------- score details
class TestScoreDetails:
    window = 3
    usage = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0],
                      [2.0, 2.0], [2.0, 2.0], [4.3, 2.0],
                      [1.0, 2.2]]) * [1.0, GiB]
    alloc = np.array([[2.5, 1.0], [4.0, 2.0], [1.0, 2.0]]) * [1.0, GiB]
    oracle = np.array([[3.0, 1.0], [4.3, 2.0], [1.0, 2.2]]) * [1.0, GiB]

    def _score(self, cold, targets=(0.95, 0.5)):
        data = hand_input([self.usage], step=300.0)
        reps = {"p": Replay("p", [self.alloc]), "oracle": Replay("oracle", [self.oracle])}
        return score(data, reps, self.window, include_cold_start=cold, targets=targets)

    def test_cold_start_excluded(self):
        s = self._score(False)
        cpu, mem = s["p"]
        h = 300.0 / 3600.0
        # scored samples 3..6: cpu usage [2, 2, 4.3, 1] vs allocation [4, 4, 4, 1]
        assert cpu.allocation == pytest.approx(13 * h)
        assert cpu.usage == pytest.approx(9.3 * h)
        assert cpu.fulfilment == 0.75 and cpu.fulfilment_10 == 1.0
        assert cpu.under_samples == 1
        assert cpu.worst_shortfall == pytest.approx(0.3)
        assert cpu.worst_shortfall_rel == pytest.approx(0.075)
        assert cpu.oom_windows == 1            # window 1 (4.3 > 4); window 0 not scored
        assert cpu.resizes == 2                # 2.5 -> 4 (the first resize) -> 1
        assert cpu.vs_oracle == pytest.approx(13 / 13.9)
        assert cpu.vs_static_peak == pytest.approx(13 / (4 * 4.3))
        assert cpu.margin_at[0.95] == pytest.approx(0.075)      # 4.3 / 4 - 1
        assert cpu.margin_at[0.5] == pytest.approx(-0.5)        # 2nd of {.5, .5, 1, 1.075}
        assert cpu.vs_oracle_at[0.95] == pytest.approx(13 * 1.075 / 13.9)
        # memory in bytes is reported in GiB-hours: usage [2, 2, 2, 2.2] vs [2, 2, 2, 2] GiB
        assert mem.allocation == pytest.approx(8 * h)
        assert mem.fulfilment == 0.75
        assert mem.fulfilment_10 == 1.0                           # 2.2 <= 1.1 x 2 (inclusive)
        assert mem.worst_shortfall == pytest.approx(0.2)         # GiB
        assert mem.worst_shortfall_rel == pytest.approx(0.1)
        assert mem.oom_windows == 1 and mem.resizes == 1     # 1 -> 2 GiB at window 1
        assert mem.vs_oracle == pytest.approx(8 / 8.2)

    def test_figures_at_the_matched_margin(self):
        # the windows short, OOM risk and worst shortfall are taken at each policy's matched
        # margin, not at its raw allocation (so that they compare across policies)
        cpu, mem = self._score(False)["p"]
        assert cpu.scored_windows == mem.scored_windows == 2
        # 95 %: all 4 scored samples must be covered: margin 4.3 / 4 - 1, nothing short
        assert cpu.short_windows_at[0.95] == 0 and cpu.worst_shortfall_at[0.95] == 0.0
        assert mem.short_windows_at[0.95] == 0 and mem.short_window_share_at[0.95] == 0.0
        # 50 %: margin -0.5 -> cpu allocation [2, 2, 2 | 0.5]: both windows short, the worst
        # by 2.3 cores (2.3 / 4.3 of the usage)
        assert cpu.short_windows_at[0.5] == 2 and cpu.short_window_share_at[0.5] == 1.0
        assert cpu.worst_shortfall_at[0.5] == pytest.approx(2.3)
        assert cpu.worst_shortfall_rel_at[0.5] == pytest.approx(2.3 / 4.3)
        # memory at 50 %: margin 0, window 2 (2.2 GiB over 2 GiB) is the one OOM-risk window
        assert mem.short_windows_at[0.5] == 1 == mem.oom_windows
        assert mem.worst_shortfall_at[0.5] == pytest.approx(0.2)            # GiB
        assert mem.worst_shortfall_rel_at[0.5] == pytest.approx(0.2 / 2.2)
        # the rule: cheaper than adaptive-max with no more windows short
        other = self._score(False)
        other["adaptive-max"] = other["p"]
        assert wins_over(other, "p", 0, 0.95, "adaptive-max") is False     # equal cost
        assert wins_over(other, "nope", 0, 0.95, "adaptive-max") is None

    def test_an_idle_resource_has_no_static_peak_ratio(self):
        # an execution that never used a resource: its static peak is 0 (no division by zero,
        # which numpy warns about and pytest turns into an error for ai4dl)
        idle = np.array([[1.0, 0.0]] * 6)
        data = hand_input([idle])
        reps = {"p": Replay("p", [np.array([[1.0, 0.0], [1.0, 0.0]])]),
                "oracle": Replay("oracle", [np.array([[1.0, 0.0], [1.0, 0.0]])])}
        cpu, mem = score(data, reps, 3)["p"]
        assert cpu.vs_static_peak == 1.0 and math.isnan(mem.vs_static_peak)

    def test_cold_start_included(self):
        s = self._score(True)
        cpu, mem = s["p"]
        h = 300.0 / 3600.0
        # all 7 samples: cpu allocation [2.5 x3, 4 x3, 1]
        assert cpu.allocation == pytest.approx(20.5 * h)
        assert cpu.fulfilment == pytest.approx(5 / 7)
        assert cpu.under_samples == 2
        assert cpu.worst_shortfall == pytest.approx(0.5)
        assert cpu.worst_shortfall_rel == pytest.approx(0.2)
        assert cpu.oom_windows == 2            # windows 0 (3 > 2.5) and 1
        assert cpu.resizes == 2                # 2.5 -> 4 -> 1
        assert cpu.vs_oracle == pytest.approx(20.5 / 22.9)
        assert mem.oom_windows == 1 and mem.resizes == 1
        assert mem.allocation == pytest.approx(11 * h)

    def test_oracle_scores(self):
        for cold in (False, True):
            o = self._score(cold)["oracle"]
            assert all(r.fulfilment == 1.0 and r.oom_windows == 0 for r in o)

    def test_only(self):
        other = np.array([[5.0, GiB]] * 4)
        data = hand_input([self.usage, other])
        reps = {"p": Replay("p", [self.alloc, np.array([[5.0, GiB], [5.0, GiB]])]),
                "oracle": Replay("oracle", [self.oracle, np.array([[5.0, GiB], [5.0, GiB]])])}
        both = score(data, reps, 3)
        first = score(data, reps, 3, only=[0])
        second = score(data, reps, 3, only=[1])
        h = 300.0 / 3600.0
        assert first["p"][0].allocation == pytest.approx(13 * h)
        assert second["p"][0].allocation == pytest.approx(5 * h)   # 1 scored sample
        assert both["p"][0].allocation == pytest.approx(18 * h)
        assert both["p"][0].under_samples == 1


# ----------------------------------------------------------------------------- replay + safety
def test_replay_safety_uses_latest_working_set():
    # Static at 1 everywhere; memory must cover the last sample before each window x 1.5
    u1 = np.array([[1.0, 1.0], [1.0, 3.0], [1.0, 2.0], [1.0, 7.0], [1.0, 1.0], [1.0, 1.0]])
    u2 = np.array([[1.0, 4.0], [1.0, 6.0], [1.0, 9.0]])          # shorter: padded windows
    data = hand_input([u1, u2], units=("cores", "cores"),
                      initial=[np.array([1.0, 1.0]), np.array([1.0, 1.0])])
    cfg = SafetyConfig(memory_margin=0.5, memory_index=1)
    rep = replay(data, Static(), 2, cfg)
    np.testing.assert_allclose(rep.allocations[0], [[1, 1], [1, 4.5], [1, 10.5]])
    np.testing.assert_allclose(rep.allocations[1], [[1, 1], [1, 9.0]])
    # the oracle is the yardstick: never wrapped
    orc = replay(data, Oracle(), 2, cfg)
    np.testing.assert_array_equal(orc.allocations[0], [[1, 3], [1, 7], [1, 1]])
    # no safety: the policy's rows, cut to the execution's windows
    raw = replay(data, AdaptiveMax(), 2)
    np.testing.assert_array_equal(raw.allocations[0], [[1, 1], [1, 3], [1, 7]])
    np.testing.assert_array_equal(raw.allocations[1], [[1, 1], [1, 6]])


# ----------------------------------------------------------------------------- calibration
DOC = {  # shared/docs/evaluation.md, "Calibration figures" (cpu, memory)
    "adaptive-max": dict(raw=(1.000, 1.000), fulfil=(85.6, 80.4), margin=(5.3, 0.9),
                         at95=(1.053, 1.008), at97=(1.091, 1.015)),
    "adaptive-stat": dict(raw=(1.008, 0.999), fulfil=(88.6, 83.5), margin=(4.1, 0.7),
                          at95=(1.049, 1.006), at97=(1.086, 1.012)),
    "static": dict(raw=(1.330, 1.130), fulfil=(100.0, 100.0), margin=(-4.5, -0.3),
                   at95=(1.270, 1.126), at97=(1.286, 1.127)),
}


@pytest.fixture(scope="module")
def gcd_scores(shared_data):
    from ai4dl.io.loaders import load_traces

    path = shared_data / "gcd_vms" / "GCD_VMs.tar.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    traces = load_traces(path)
    assert len(traces) == 1600
    data = prepare(list(traces), ("cpu", "memory"))
    reps = {p.name: replay(data, p, 12, safety=None)
            for p in (Oracle(), AdaptiveMax(), AdaptiveStat(), Static())}
    return score(data, reps, 12)


@pytest.mark.parametrize("policy", sorted(DOC))
@pytest.mark.parametrize("j", [0, 1], ids=["cpu", "memory"])
def test_calibration_figures(gcd_scores, policy, j):
    r, d = gcd_scores[policy][j], DOC[policy]
    assert r.vs_oracle == pytest.approx(d["raw"][j], abs=0.002)
    assert 100 * r.fulfilment == pytest.approx(d["fulfil"][j], abs=0.15)
    assert 100 * r.margin_at[0.95] == pytest.approx(d["margin"][j], abs=0.15)
    assert r.vs_oracle_at[0.95] == pytest.approx(d["at95"][j], abs=0.002)
    assert r.vs_oracle_at[0.97] == pytest.approx(d["at97"][j], abs=0.002)


def test_calibration_static_is_the_peak(gcd_scores):
    for j in range(2):
        assert gcd_scores["static"][j].vs_static_peak == pytest.approx(1.0)
        assert gcd_scores["oracle"][j].fulfilment == 1.0
        assert gcd_scores["oracle"][j].vs_static_peak == pytest.approx(
            1 / DOC["static"]["raw"][j], abs=0.002)


# ----------------------------------------------------------------------------- run_evaluation
@pytest.fixture(scope="module")
def grouped_run(synthetic_train):
    traces, _ = synthetic_train
    # three executions per group (like restarts of one job): a group must stay on one side
    grouped = TraceSet([Execution(e.name, e.times, e.values, e.features, e.units,
                                  group=f"g{i // 3}", step=e.step)
                        for i, e in enumerate(traces)])
    cfg = EvaluationConfig(window=20, policies=("static", "adaptive-max", "phase", "oracle"),
                           test_fraction=0.3, seed=0)
    res = run_evaluation(grouped, cfg, model_params={"epochs": 5, "n_phases": 4})
    return grouped, res


def test_run_evaluation_scores(grouped_run):
    grouped, res = grouped_run
    names = ("static", "adaptive-max", "phase", "oracle")
    assert set(res.scores) == set(names)
    assert all(len(res.scores[p]) == 2 for p in names)
    assert len(res.per_execution) == len(res.data.names) > 0
    for per in res.per_execution:
        assert set(per) == set(names) and all(len(per[p]) == 2 for p in names)
    for j in range(2):
        assert res.scores["oracle"][j].fulfilment == 1.0
        assert res.scores["oracle"][j].vs_oracle == pytest.approx(1.0)
        assert res.scores["static"][j].fulfilment == 1.0
        assert res.scores["static"][j].vs_static_peak == pytest.approx(1.0)
        for p in names:
            # resource-time adds up over executions
            total = sum(per[p][j].allocation for per in res.per_execution)
            assert total == pytest.approx(res.scores[p][j].allocation, rel=1e-9)
    assert res.model is not None and res.model.n_phases_ == 4
    for p in names:
        for a, u in zip(res.replays[p].allocations, res.data.usage):
            assert a.shape == (-(-len(u) // 20), 2)


def test_run_evaluation_split_by_group(grouped_run):
    grouped, res = grouped_run
    group_of = {e.name: e.group for e in grouped}
    test_groups = {group_of[n] for n in res.data.names}
    assert res.n_train + len(res.data.names) == len(grouped)
    # every execution of a test group is in the test set: no group on both sides
    in_test = [e.name for e in grouped if e.group in test_groups]
    assert sorted(in_test) == sorted(res.data.names)
    assert 0 < len(test_groups) < len(grouped.groups())
    assert len(test_groups) == round(0.3 * 8)


# ----------------------------------------------------------------------------- cold start
def test_cold_start_scores_by_hand():
    from ai4dl.evaluation.evaluate import cold_start_scores

    W = 4
    usage = [np.array([[1.0, 10.0], [2.0, 10.0], [1.0, 10.0], [1.0, 10.0], [9.0, 99.0]]),
             np.array([[4.0, 20.0], [4.0, 40.0], [3.0, 20.0], [3.0, 20.0]])]
    data = ReplayInput(["a", "b"], usage, [None, None], [u.max(0) for u in usage], 15.0,
                       ("cpu", "memory"), ("cores", "bytes"))
    requests = [np.array([8.0, np.nan]), np.array([8.0, np.nan])]   # no memory request traced
    rows = {(c.resource, c.source): c for c in cold_start_scores(
        data, requests, W, {0.97: np.array([3.0, 30.0])})}
    assert set(rows) == {("cpu", "request"), ("cpu", "static peak"), ("cpu", "model @ 97 %"),
                         ("memory", "static peak"), ("memory", "model @ 97 %")}
    # first windows' maxima: cpu 2 and 4 (oracle 4 x 2 + 4 x 4 = 24 core-samples)
    assert rows["cpu", "request"].vs_oracle == pytest.approx((8 * 4 + 8 * 4) / 24)
    assert rows["cpu", "model @ 97 %"].vs_oracle == pytest.approx((3 * 4 + 3 * 4) / 24)
    assert rows["cpu", "model @ 97 %"].vs_request == pytest.approx(3 / 8)
    # the model's 3 cores cover the first window of a (max 2) but not all of b's (4, 4, 3, 3)
    assert rows["cpu", "model @ 97 %"].fulfilment == pytest.approx(6 / 8)
    assert rows["cpu", "model @ 97 %"].short_windows == pytest.approx(0.5)
    # the static peak holds the whole execution's peak (a's 9 cores, from its second window)
    assert rows["cpu", "static peak"].vs_oracle == pytest.approx((9 * 4 + 4 * 4) / 24)
    assert math.isnan(rows["memory", "model @ 97 %"].vs_request)
    assert rows["memory", "model @ 97 %"].short_windows == pytest.approx(0.5)   # b's 40 > 30


def test_initial_model_sets_the_learned_level_for_every_execution(grouped_run):
    from ai4dl.policy.headroom_levels import first_window_level

    grouped, res = grouped_run
    cfg = EvaluationConfig(window=20, policies=("adaptive-max", "oracle"), test_fraction=0.3,
                           seed=0, initial="model", include_cold_start=True)
    out = run_evaluation(grouped, cfg)
    train = [e for e in grouped if e.name not in set(out.data.names)]
    level = first_window_level([e.select(("cpu", "memory")).values for e in train], 20, 0.97)
    for init, alloc in zip(out.data.initial, out.replays["adaptive-max"].allocations):
        np.testing.assert_allclose(init, level)
        np.testing.assert_allclose(alloc[0], level)        # the cold-start row is scored
    assert {c.source for c in out.cold_start} == {"static peak", "model @ 95 %",
                                                  "model @ 97 %"}
    with pytest.raises(ValueError, match="needs the learned first-window level"):
        prepare(list(grouped)[:2], ("cpu", "memory"), initial="model")
