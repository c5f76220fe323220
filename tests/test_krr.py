"""Tests of the KRR ``simple``-strategy history rightsizer (ai4dl.policy.krr).

- the defaults are KRR's (95th percentile, 15 % buffer, 336 h, 100 points, 1.25 min);
- cpu = max over earlier executions of each one's percentile, memory = max × (1 + buffer),
  against hand computations (and not the pooled percentile);
- causal: no sample at or after an execution's start (its own, a later execution's, the tail
  of an overlapping one) changes its request;
- the history window: older samples are ignored, the boundary sample counts;
- too few points (in KRR's 1.25-min points) keep the initial request, per resource;
- input order does not matter (time order); the state carries a workload across calls;
- KRR's rounding and minimums in native units only; other resources by the memory-like rule;
- end to end through run_evaluation on a slice of the real GCD traces.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ai4dl.evaluation.evaluate import EvaluationConfig, build_policies, run_evaluation
from ai4dl.judge import ReplayInput
from ai4dl.policy import catalog
from ai4dl.policy.krr import KrrHistory, KrrPolicy, is_memory_like
from ai4dl.policy.policies import Policy
from ai4dl.method.traces import TraceSet

FRAME = 75.0  # KRR's 1.25-min timeframe in seconds: at this step one sample is one KRR point


def group(policy, execs, step=FRAME, window=4, initials=None, state=None):
    """Rows of ``policy`` for executions ``[(start, usage), ...]`` of one workload."""
    usages = [np.asarray(u, np.float64) for _, u in execs]
    initials = initials or [np.full(u.shape[1], -1.0) for u in usages]
    return policy.allocate_group(usages, [None] * len(usages), window, initials, step,
                                 [s for s, _ in execs], [f"p{i}" for i in range(len(execs))],
                                 state)


def col(*cols):
    return np.column_stack([np.asarray(c, np.float64) for c in cols])


# ----------------------------------------------------------------------------- defaults
def test_defaults_are_krrs():
    p = KrrPolicy()
    assert (p.cpu_percentile, p.memory_buffer_percentage, p.history_duration_hours,
            p.points_required, p.timeframe_minutes) == (95.0, 15.0, 336.0, 100, 1.25)
    assert (p.cpu_min_millicores, p.memory_min_mb) == (10.0, 100.0)
    assert (p.name, p.needs_phases, p.uses_workload_state) == ("krr", False, True)
    # the Policy protocol (not runtime-checkable): allocate(usage, phases, window, initial, step)
    params = list(inspect.signature(p.allocate).parameters)
    assert params[:5] == list(inspect.signature(Policy.allocate).parameters)[1:]
    names = catalog.names()
    assert names.index("krr") == names.index("vpa") + 1


@pytest.mark.parametrize("kwargs, words", [
    ({"cpu_percentile": 0}, "cpu_percentile"),
    ({"cpu_percentile": 101}, "cpu_percentile"),
    ({"memory_buffer_percentage": -1}, "memory_buffer_percentage"),
    ({"history_duration_hours": 0}, "history_duration_hours"),
    ({"points_required": 0}, "points_required"),
    ({"timeframe_minutes": float("nan")}, "timeframe_minutes"),
    ({"units": ("cores",)}, "1 units for 2 resources"),
])
def test_bad_parameters_are_one_line(kwargs, words):
    with pytest.raises(ValueError, match=words) as err:
        KrrPolicy(**kwargs)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- the rule
def test_percentile_and_buffer_by_hand():
    # two pods of the workload, then a third one after them (one KRR point per sample)
    a = col([1, 2, 3, 4, 5], [10, 30, 20, 10, 10])
    b = col([10, 0, 0, 0, 0], [5, 5, 5, 5, 40])
    c = col([7, 7], [7, 7])
    rows = group(KrrPolicy(points_required=3), [(0.0, a), (0.0, b), (5 * FRAME, c)])
    # per pod p95 (linear, rank 0.95 x 4 = 3.8): a 4 + 0.8 = 4.8, b 0 + 0.8 x 10 = 8; max 8
    # (the pooled p95 of the ten samples would be 5 + 0.55 x 5 = 7.75: KRR takes per-pod maxima)
    np.testing.assert_allclose(rows[2], [[8.0, 40 * 1.15]])
    # a and b started together: neither saw anything, both keep their initial request
    np.testing.assert_array_equal(rows[0], [[-1.0, -1.0], [-1.0, -1.0]])
    np.testing.assert_array_equal(rows[1], rows[0])


def test_one_constant_request_per_execution():
    a = col(np.arange(40.0), np.arange(40.0))
    b = col(np.arange(30.0), np.arange(30.0))
    rows = group(KrrPolicy(points_required=1), [(0.0, a), (40 * FRAME, b)], window=4)
    assert rows[1].shape == (30 // 4 + 1, 2)
    assert np.all(rows[1] == rows[1][0])
    np.testing.assert_allclose(rows[1][0], [np.percentile(np.arange(40.0), 95), 39 * 1.15])


def test_percentile_and_buffer_parameters():
    a = col(np.arange(101.0), np.arange(101.0))
    pol = KrrPolicy(cpu_percentile=50, memory_buffer_percentage=0, points_required=1)
    rows = group(pol, [(0.0, a), (101 * FRAME, a[:1])])
    np.testing.assert_allclose(rows[1][0], [50.0, 100.0])


def test_krr_rounds_the_percentile_to_two_decimals_of_a_fraction():
    # KRR's query is quantile_over_time(round(p / 100, 2), ...): 95.4 asks for 0.95
    a = col(np.arange(101.0), np.arange(101.0))
    rows = group(KrrPolicy(cpu_percentile=95.4, points_required=1),
                 [(0.0, a), (101 * FRAME, a[:1])])
    assert rows[1][0, 0] == pytest.approx(95.0)


# ----------------------------------------------------------------------------- causality
@st.composite
def workloads(draw):
    n = draw(st.integers(2, 5))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    execs = []
    for _ in range(n):
        length = int(rng.integers(1, 60))
        start = float(rng.integers(0, 120)) * FRAME      # overlapping and back-to-back pods
        execs.append((start, rng.gamma(2.0, 1.0, (length, 2)) * rng.uniform(0.5, 5.0, 2)))
    return execs


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_causal_no_sample_at_or_after_the_start_counts(execs):
    pol = KrrPolicy(points_required=5, history_duration_hours=1.0)
    full = group(pol, execs)
    rng = np.random.default_rng(0)
    for i, (start, _) in enumerate(execs):
        # alter every sample at or after this start, in every execution (its own, later ones,
        # the tail of an overlapping earlier one), and cut some executions short there
        altered = []
        for s, u in execs:
            t = s + FRAME * np.arange(len(u))
            v = u.copy()
            v[t >= start] = rng.uniform(0, 1e6, v[t >= start].shape)
            if s >= start and len(v) > 1 and rng.random() < 0.5:
                v = v[: len(v) // 2]
            altered.append((s, v))
        again = group(pol, altered)
        np.testing.assert_array_equal(again[i][0], full[i][0])


def test_a_later_pods_samples_never_reach_an_earlier_one():
    early = col(np.ones(200), np.ones(200))
    late = col(np.full(200, 50.0), np.full(200, 50.0))
    first, second = group(KrrPolicy(points_required=1), [(0.0, early), (200 * FRAME, late)])
    np.testing.assert_array_equal(first[0], [-1.0, -1.0])
    np.testing.assert_allclose(second[0], [1.0, 1.15])


# ----------------------------------------------------------------------------- history window
def test_samples_older_than_the_history_are_ignored():
    H = 3600.0                                  # one hour: 48 samples of 75 s
    old = col(np.r_[np.full(5, 99.0), np.ones(43)], np.r_[np.full(5, 99.0), 3.0, np.ones(42)])
    now = H + 5 * FRAME                         # the window begins at old's sample 5
    rows = group(KrrPolicy(history_duration_hours=1.0, points_required=1),
                 [(0.0, old), (now, col([0.0], [0.0]))])
    # samples 0-4 (t < now - H) are out, sample 5 (t == now - H) is in
    np.testing.assert_allclose(rows[1][0], [1.0, 3.0 * 1.15])
    # with 14 days of history (the default) the old peak counts
    rows = group(KrrPolicy(points_required=1), [(0.0, old), (now, col([0.0], [0.0]))])
    np.testing.assert_allclose(rows[1][0], [np.percentile(old[:, 0], 95), 99 * 1.15])


def test_an_execution_entirely_older_than_the_history_gives_no_recommendation():
    old = col(np.full(200, 9.0), np.full(200, 9.0))
    start = 200 * FRAME + 336 * 3600.0          # 14 days after old ended
    rows = group(KrrPolicy(), [(0.0, old), (start, col([1.0], [1.0]))],
                 initials=[np.zeros(2), np.array([4.0, 5.0])])
    np.testing.assert_array_equal(rows[1][0], [4.0, 5.0])


# ----------------------------------------------------------------------------- not enough data
@pytest.mark.parametrize("samples, recommended", [(499, False), (500, True)])
def test_points_required_in_krr_points(samples, recommended):
    # 15 s samples: 5 make one 1.25-min KRR point, so 100 points need 500 samples (125 min)
    prev = col(np.full(samples, 2.0), np.full(samples, 3.0))
    rows = group(KrrPolicy(), [(0.0, prev), (samples * 15.0, col([1.0], [1.0]))], step=15.0,
                 initials=[np.zeros(2), np.array([8.0, 9.0])])
    expected = [2.0, 3.0 * 1.15] if recommended else [8.0, 9.0]
    np.testing.assert_allclose(rows[1][0], expected)


def test_points_counted_in_samples_when_the_timeframe_is_the_step():
    prev = col(np.full(100, 2.0), np.full(100, 3.0))
    rows = group(KrrPolicy(timeframe_minutes=15.0 / 60), [(0.0, prev), (1500.0, col([1], [1]))],
                 step=15.0, initials=[np.zeros(2), np.array([8.0, 9.0])])
    np.testing.assert_allclose(rows[1][0], [2.0, 3.45])


def test_points_add_up_over_pods_and_count_per_resource():
    # two concurrent pods of 60 points each make 120 >= 100 (KRR sums its per-pod counts);
    # memory has 30 NaN samples in each pod: 60 points, not enough, memory keeps its request
    mem = np.r_[np.full(30, np.nan), np.full(30, 6.0)]
    a = col(np.full(60, 1.0), mem)
    b = col(np.full(60, 2.0), mem)
    rows = group(KrrPolicy(), [(0.0, a), (0.0, b), (60 * FRAME, col([1], [1]))],
                 initials=[np.zeros(2), np.zeros(2), np.array([8.0, 9.0])])
    np.testing.assert_allclose(rows[2][0], [2.0, 9.0])


def test_single_execution_without_history_keeps_its_initial_request():
    u = col(np.arange(500.0), np.arange(500.0))
    init = np.array([3.0, 4.0])
    out = KrrPolicy().allocate(u, None, 40, init, 15.0)
    assert out.shape == (500 // 40 + 1, 2)
    np.testing.assert_array_equal(out, np.repeat(init[None], len(out), 0))


# ----------------------------------------------------------------------------- time order, state
def test_input_order_does_not_matter():
    rng = np.random.default_rng(3)
    execs = [(float(s) * FRAME, rng.gamma(2.0, 1.0, (int(n), 2)))
             for s, n in zip(rng.integers(0, 300, 6), rng.integers(50, 200, 6))]
    pol = KrrPolicy(points_required=20)
    ref = group(pol, execs)
    for perm in (np.arange(6)[::-1], rng.permutation(6)):
        rows = group(pol, [execs[i] for i in perm])
        for k, i in enumerate(perm):
            np.testing.assert_array_equal(rows[k], ref[i])
    assert any(not np.array_equal(r[0], [-1.0, -1.0]) for r in ref)   # some had history


def test_state_carries_the_workload_across_calls():
    rng = np.random.default_rng(4)
    execs = [(i * 150 * FRAME, rng.gamma(2.0, 1.0, (150, 2))) for i in range(4)]
    pol = KrrPolicy()
    together = group(pol, execs)
    state = pol.new_state()
    assert isinstance(state, KrrHistory)
    apart = group(pol, execs[:2], state=state) + group(pol, execs[2:], state=state)
    for x, y in zip(together, apart):
        np.testing.assert_array_equal(x, y)
    # via allocate, one pod at a time
    state = pol.new_state()
    one = [pol.allocate(u, None, 4, np.full(2, -1.0), FRAME, state=state, t0=s)
           for s, u in execs]
    for x, y in zip(together, one):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(together[1][0], [-1.0, -1.0])


def test_a_step_that_cannot_place_samples_is_refused():
    with pytest.raises(ValueError, match="step"):
        KrrPolicy().allocate(col([1.0], [1.0]), None, 4, np.ones(2), 0.0)


# ----------------------------------------------------------------------------- units, resources
def test_rounding_and_minimums_in_native_units():
    pol = KrrPolicy(units=("cores", "bytes"), points_required=1)
    tiny = col(np.full(10, 0.001), np.full(10, 5e6))
    rows = group(pol, [(0.0, tiny), (10 * FRAME, tiny[:1])])
    np.testing.assert_array_equal(rows[1][0], [0.010, 100e6])     # 10 millicores, 100 MB
    big = col(np.full(10, 0.1234), np.full(10, 2e9 + 1))
    rows = group(pol, [(0.0, big), (10 * FRAME, big[:1])])
    # up to a whole millicore and a whole megabyte, written as KRR's runner writes it
    assert rows[1][0, 0] == math.ceil(0.1234 * 1000) / 1000 == 0.124
    assert rows[1][0, 1] == math.ceil((2e9 + 1) * 1.15 * (1 / 1e6)) / (1 / 1e6)
    # percent (GCD) or unknown units: no floor, no rounding
    for units in (("percent", "percent"), None):
        rows = group(KrrPolicy(units=units, points_required=1),
                     [(0.0, tiny), (10 * FRAME, tiny[:1])])
        np.testing.assert_allclose(rows[1][0], [0.001, 5e6 * 1.15])


def test_other_resources_follow_the_memory_like_rule():
    assert is_memory_like("gpu_memory") and is_memory_like("memory") and is_memory_like("mem")
    assert not is_memory_like("gpu_util", "percent") and is_memory_like("scratch", "bytes")
    u = col(np.arange(101.0), np.arange(101.0), np.arange(101.0), np.arange(101.0))
    pol = KrrPolicy(resources=("gpu_util", "gpu_memory", "scratch", "cpu"),
                    units=("percent", "bytes", "bytes", "cores"), points_required=1)
    rows = group(pol, [(0.0, u), (101 * FRAME, u[:1])],
                 initials=[np.zeros(4), np.zeros(4)])
    np.testing.assert_allclose(rows[1][0], [95.0, 115.0, 115.0, 95.0])


def test_build_policies_gives_krr_the_trace_units():
    train = ReplayInput(["a"], [np.ones((3, 2))], [None], [np.ones(2)], 15.0,
                        ("cpu", "memory"), ("cores", "bytes"))
    (pol,) = build_policies(EvaluationConfig(policies=("krr",)), None, train)
    assert isinstance(pol, KrrPolicy) and pol.units == ("cores", "bytes")
    assert pol.resources == ("cpu", "memory")


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def gcd_slice(shared_data):
    from ai4dl.io import load_traces

    path = shared_data / "gcd_vms" / "GCD_VMs.tar.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    ts = load_traces(path)
    days: dict = {}
    for e in ts:
        days.setdefault(e.group, []).append(e)
    jobs = sorted(g for g, es in days.items() if len(es) >= 4)[:10]
    return TraceSet([e for g in jobs for e in days[g]], source=ts.source)


def test_run_evaluation_scores_krr_on_real_traces(gcd_slice):
    cfg = EvaluationConfig(window=12, policies=("static", "krr", "oracle"), test_fraction=0.5,
                           seed=0)
    res = run_evaluation(gcd_slice, cfg)
    assert "krr" in res.scores and len(res.scores["krr"]) == 2
    assert all(math.isfinite(s.vs_oracle) for s in res.scores["krr"])
    data = res.data
    H = 336 * 3600.0
    with_history = 0
    for i, (name, g, start) in enumerate(zip(data.names, data.groups, data.starts)):
        # the GCD days are whole 288-sample days of 300 s: in the history or not
        prev = [data.usage[k] for k in range(len(data.names))
                if data.groups[k] == g and start - H <= data.starts[k] < start]
        if prev:
            with_history += 1
            expected = [max(np.percentile(u[:, 0], 95) for u in prev),
                        max(u[:, 1].max() for u in prev) * 1.15]
        else:
            expected = data.initial[i]                     # the peak: static's request
        np.testing.assert_allclose(res.replays["krr"].allocations[i],
                                   np.repeat(np.asarray(expected)[None], len(
                                       res.replays["krr"].allocations[i]), 0), rtol=1e-12)
    assert 0 < with_history < len(data.names)
    # without the workload's history (vpa_prewarm off) KRR has nothing: it is static
    cold = run_evaluation(gcd_slice, EvaluationConfig(
        window=12, policies=("static", "krr", "oracle"), test_fraction=0.5, seed=0,
        vpa_prewarm=False))
    for a, b in zip(cold.replays["krr"].allocations, cold.replays["static"].allocations):
        np.testing.assert_array_equal(a, b)


def test_reports_list_krr(gcd_slice):
    from ai4dl.evaluation import report, report_json

    cfg = EvaluationConfig(window=12, policies=("static", "vpa", "krr", "oracle"),
                           test_fraction=0.5, seed=0)
    res = run_evaluation(gcd_slice, cfg)
    ctx = report.make_context(gcd_slice, res, "gcd slice", None)
    rows = report.score_rows(res)
    assert [r[0] for r in rows] == ["static"] * 2 + ["vpa"] * 2 + ["krr"] * 2 + ["oracle"] * 2
    doc = report_json.to_json(res, ctx)
    assert set(doc["scores"]["krr"]) == {"cpu", "memory"}
