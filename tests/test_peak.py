"""The peak-risk memory policy (ai4dl.policy.peak): known answers for the running state, the
pooling rule and the Lagrangian, causality and the cold start, the risk met on the training
windows and calibrated out of fold on held-out ones, the model document's riskTables (round
trip, strict validation, old documents) and serving.build."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai4dl.method.document_bounds import SCHEMA_V1
from ai4dl.method.document_tables import RiskTable
from ai4dl.method.model import PhaseModel
from ai4dl.policy.peak import PeakRiskPolicy, from_table, to_table
from ai4dl.policy.peak_fit import risk_lagrangian, training_rows
from ai4dl.policy.peak_states import (CHAIN, N_CODES, State, cells_from_states, levels,
                                      resolve_states, state_codes, window_states)


def col(*v):
    return np.array(v, np.float64)[:, None]


def jobs(n_exec: int, seed: int, n: int = 150, k: int = 3):
    """Flat jobs of different sizes with log-normal window maxima and a phase that shifts the
    level by 10 % a step: plenty of states, every one with an i.i.d. tail."""
    rng = np.random.default_rng(seed)
    usages, phases = [], []
    for _ in range(n_exec):
        ph = np.repeat(rng.integers(0, k, n // 10 + 1), 10)[:n]
        u = rng.uniform(1, 10) * (1 + 0.1 * ph) * np.exp(0.15 * rng.standard_normal(n))
        usages.append(u[:, None])
        phases.append(ph)
    return usages, phases


def spike_jobs(n_exec: int = 40, seed: int = 0, n: int = 300, window: int = 10):
    """Memory-like jobs: a ramp over the first windows, then a plateau with a checkpoint spike
    (phase 1, 1.6 x the plateau) every few windows."""
    rng = np.random.default_rng(seed)
    usages, phases = [], []
    for _ in range(n_exec):
        base = rng.uniform(1, 20)
        t = np.arange(n)
        u = base * np.minimum(1.0, 0.3 + t / (3 * window)) * (1 + 0.02 * rng.standard_normal(n))
        ph = np.zeros(n, np.int64)
        every = int(rng.integers(3, 6)) * window
        spike = (t % every >= every - 4) & (t > 3 * window)
        u[spike] *= 1.6
        ph[spike] = 1
        usages.append(np.clip(u, 0, None)[:, None])
        phases.append(ph)
    return usages, phases


def held_out_risk(policy, usages, phases, window):
    rows = training_rows(usages, phases, window)
    alloc = policy.lookup(rows.peak, rows.last, rows.code, rows.phase)
    return float(np.mean(rows.target > alloc))


# ----------------------------------------------------------------------------- state
class TestState:
    def test_running_state_known_answers(self):
        # window maxima 2 5 3 5 1 6 (windows of one sample): after each window
        st = window_states(col(2, 5, 3, 5, 1, 6), None, 1)
        np.testing.assert_array_equal(st.peak[:, 0], [2, 5, 5, 5, 5, 6])
        since = [0, 0, 1, 2, 3, 0]                  # a tie (5 after 5) is not a new high
        low = np.array([2, 5, 3, 3, 1, 6.0])        # the lowest since the last new high
        x = np.array([2, 5, 3, 5, 1, 6.0])
        want = state_codes(np.arange(1, 7), since, x / st.peak[:, 0], low / st.peak[:, 0])
        np.testing.assert_array_equal(st.code[:, 0], want)
        np.testing.assert_array_equal(st.last_phase, np.zeros(6))

    def test_bins(self):
        # elapsed 1 | 2 | 3-5 | 6+, since 0 | 1-2 | 3+, ratio and dip < 0.7 | 0.7-0.9 | >= 0.9
        def digits(*args):
            c = int(state_codes(*args))
            return [c // 27, (c // 9) % 3, (c // 3) % 3, c % 3]
        assert digits(1, 0, 1.0, 1.0) == [0, 0, 2, 2]
        assert digits(5, 2, 0.9, 0.69) == [2, 1, 2, 0]
        assert digits(6, 3, 0.7, 0.89) == [3, 2, 1, 1]
        assert digits(100, 40, 0.0, 0.0) == [3, 2, 0, 0]

    def test_phase_of_the_last_sample(self):
        st = window_states(col(1, 2, 3, 4, 5, 6, 7), np.array([0, 1, 2, 2, 1, 0, 2]), 2)
        np.testing.assert_array_equal(st.last_phase, [1, 2, 0])

    def test_allocation_is_the_running_max_times_the_states_multiplier(self):
        usages, phases = spike_jobs()
        p = PeakRiskPolicy(max_risk=0.05, min_windows=30).fit(usages, phases, 10, 2)
        u, ph = usages[0], phases[0]
        rows = p.allocate(u, ph, 10, np.array([123.0]), 15.0)
        st = window_states(u, ph, 10)
        cell = (st.last_phase, st.code[:, 0])
        base = np.where(p.estimator_[0][cell] == 0, st.peak[:, 0], st.last[:, 0])
        np.testing.assert_allclose(rows[1:, 0], base * p.multiplier_[0][cell])
        np.testing.assert_array_equal(st.last[:, 0], u[: len(u) // 10 * 10, 0].reshape(-1, 10)
                                      .max(1))
        assert rows.shape == (len(u) // 10 + 1, 1)


# ----------------------------------------------------------------------------- pooling
class TestPooling:
    @staticmethod
    def code(e, s, r, d):
        return ((e * 3 + s) * 3 + r) * 3 + d

    def test_rare_states_fall_to_the_coarser_level(self):
        a, b, c, d = (self.code(3, 2, 0, 0), self.code(3, 2, 1, 0), self.code(3, 2, 1, 1),
                      self.code(0, 0, 2, 2))
        codes = np.array([a] * 100 + [b] * 30 + [c] * 30 + [d] * 5)
        sid, states = resolve_states(codes, np.zeros(len(codes), np.int64), 50, False, 1)
        chain = levels(False)
        by = {(chain[lv], key): n for lv, key, n in states}
        # a alone; b and c (both rare) share their level without the dip; d is left over
        assert len(states) == 3
        assert by[(CHAIN[0], a)] == 100
        assert by[(CHAIN[1], b // 3)] == 60
        assert by[((), 0)] == 5
        assert len(set(sid[100:160])) == 1 and sid[0] != sid[100]
        # every state but the global one has at least min_windows windows
        assert all(n >= 50 for lv, _, n in states if chain[lv])

    def test_the_phase_level_pools_to_the_phase_blind_one(self):
        a = self.code(3, 2, 0, 0)
        codes = np.full(160, a)
        phase = np.r_[np.zeros(100, np.int64), np.ones(30, np.int64), np.full(30, 2)]
        sid, states = resolve_states(codes, phase, 50, True, 3)
        assert [(lv, n) for lv, _, n in states] == [(0, 100), (1, 60)]
        mult, _, level, windows = cells_from_states(
            [State(lv, key, float(i + 2), n) for i, (lv, key, n) in enumerate(states)], True, 3)
        # phase 0 has its own multiplier, phases 1 and 2 (30 windows each) pool to the
        # phase-blind state
        assert (mult[0, a], mult[1, a], mult[2, a]) == (2.0, 3.0, 3.0)
        assert (level[0, a], level[1, a], windows[0, a], windows[2, a]) == (0, 1, 100, 60)
        # a cell no state holds (no window down to the global level): the largest multiplier
        other = self.code(0, 0, 2, 2)
        assert mult[0, other] == 3.0 and level[0, other] == len(levels(True))

    def test_a_fitted_policy_pools_what_it_did_not_see_often(self):
        usages, phases = spike_jobs(n_exec=8)
        p = PeakRiskPolicy(max_risk=0.05, min_windows=60, calibrate=False).fit(
            usages, phases, 10, 2)
        chain = levels(True)
        for s in p.states_[0]:
            assert s.windows >= 60 or chain[s.level] == ()
        assert (p.support_ > 0).any() and p.pooled_.max() <= len(chain)
        assert p.state_rows() and all(r["windows"] >= 0 for r in p.state_rows())


# ----------------------------------------------------------------------------- Lagrangian
class TestLagrangian:
    def two_states(self):
        # state 0: ten windows far above its base (ratio 5) -- dear to cover; state 1: ten
        # windows a little above (1.1) -- cheap; 200 windows, unit 1 each
        ratio = np.r_[np.ones(90), np.full(10, 5.0), np.ones(90), np.full(10, 1.1)]
        sid = np.r_[np.zeros(100, np.int64), np.ones(100, np.int64)]
        return ratio, np.ones(200), sid

    def test_spends_the_risk_where_covering_costs_most(self):
        ratio, unit, sid = self.two_states()
        c, e = risk_lagrangian(ratio, unit, sid, 2, 0.05)
        np.testing.assert_allclose(c, [1.0, 1.1])
        np.testing.assert_array_equal(e, [0, 0])
        assert np.mean(ratio > c[sid]) <= 0.05
        # half the risk: both tails must be covered
        np.testing.assert_allclose(risk_lagrangian(ratio, unit, sid, 2, 0.02)[0], [5.0, 1.1])

    def test_the_per_state_cap_keeps_one_state_from_taking_all_the_risk(self):
        ratio, unit, sid = self.two_states()
        # at most 5 % of a state's own windows: state 0's ten windows at risk are too many
        np.testing.assert_allclose(risk_lagrangian(ratio, unit, sid, 2, 0.05, 0.05)[0],
                                   [5.0, 1.1])

    def test_stops_inside_a_long_hull_segment_at_the_risk(self):
        # one state, ratios 1..100: the hull is one straight segment; at 10 % the fit covers
        # exactly 90 windows, not all of them
        ratio = np.arange(1.0, 101.0)
        c, _ = risk_lagrangian(ratio, np.ones(100), np.zeros(100, np.int64), 1, 0.1)
        np.testing.assert_allclose(c, [90.0])

    def test_each_state_takes_the_cheaper_estimator(self):
        # two estimators per window: state 0's windows are 1.0 x estimator 0 (cheap level 1)
        # and 1.0 x estimator 1 (dear level 3); state 1's the other way round
        ratio = np.ones((100, 2))
        unit = np.r_[np.tile([1.0, 3.0], (50, 1)), np.tile([3.0, 1.0], (50, 1))]
        sid = np.r_[np.zeros(50, np.int64), np.ones(50, np.int64)]
        c, e = risk_lagrangian(ratio, unit, sid, 2, 0.01)
        np.testing.assert_array_equal(e, [0, 1])
        np.testing.assert_allclose(c, [1.0, 1.0])

    def test_meets_the_risk_on_the_training_windows(self):
        usages, phases = jobs(80, 0)
        for risk in (0.01, 0.05, 0.2):
            p = PeakRiskPolicy(max_risk=risk, min_windows=40, calibrate=False).fit(
                usages, phases, 5, 3)
            got = held_out_risk(p, usages, phases, 5)
            assert risk / 3 <= got <= risk, (risk, got)
            assert p.fit_report_[0]["train_risk"] == pytest.approx(got)

    def test_empty_and_degenerate_states(self):
        # idle windows (ratio 0) and a state without windows
        c, _ = risk_lagrangian(np.zeros(10), np.ones(10), np.zeros(10, np.int64), 2, 0.01)
        np.testing.assert_array_equal(c, [0.0, 1.0])
        # usage over an allocation base of 0 can never be covered: left at 1
        c, _ = risk_lagrangian(np.full(10, np.inf), np.zeros(10), np.zeros(10, np.int64), 1,
                               0.01)
        np.testing.assert_array_equal(c, [1.0])


# ----------------------------------------------------------------------------- calibration
def test_out_of_fold_calibration_corrects_an_optimistic_fit():
    train, test = jobs(150, 0), jobs(600, 1)
    raw = PeakRiskPolicy(max_risk=0.05, min_windows=20, calibrate=False).fit(*train, 5, 3)
    cal = PeakRiskPolicy(max_risk=0.05, min_windows=20).fit(*train, 5, 3)
    # fitted on the windows it is scored on, the table meets 5 %; on new jobs it does not
    assert held_out_risk(raw, *train, 5) <= 0.05
    assert held_out_risk(raw, *test, 5) > 0.065
    # one factor > 1 from the out-of-fold ratios brings it back to the objective
    assert cal.calibration_[0] > 1.0
    np.testing.assert_allclose(cal.multiplier_, raw.multiplier_ * cal.calibration_[0])
    assert abs(held_out_risk(cal, *test, 5) - 0.05) < 0.01


def test_min_windows_and_the_phase_slot_are_selected_out_of_fold_and_reported():
    usages, phases = jobs(60, 2)
    p = PeakRiskPolicy(max_risk=0.05).fit(usages, phases, 5, 3)
    grid = p.candidate_min_windows()
    assert grid == [20, 60, 200]
    assert p.min_windows_[0] in grid
    rep = p.fit_report_[0]
    costs = {(ph, mw): rep[f"oof_cost{'_phase' if ph else ''}_mw{mw}"]
             for ph in (False, True) for mw in grid}
    chosen = min(costs, key=costs.get)
    assert (bool(p.phase_used_[0]), int(p.min_windows_[0])) == chosen
    assert rep["phase"] == float(chosen[0])
    tag = f"{'_phase' if chosen[0] else ''}_mw{chosen[1]}"
    assert rep["calibration"] == pytest.approx(rep[f"oof_factor{tag}"])


def warning_jobs(n_exec: int, seed: int, n: int = 200, window: int = 10):
    """Flat jobs whose last sample's phase warns of the next window: phase 1 in a window's
    last sample, then a spike of 1.5 x the plateau in the next window (30 % of windows)."""
    rng = np.random.default_rng(seed)
    usages, phases = [], []
    for _ in range(n_exec):
        base = rng.uniform(1, 20)
        u = base * (1 + 0.02 * rng.standard_normal(n))
        ph = np.zeros(n, np.int64)
        for w in range(2, n // window):
            if rng.random() < 0.3:
                ph[w * window - 1] = 1
                u[w * window + 3] = 1.5 * base
        usages.append(u[:, None])
        phases.append(ph)
    return usages, phases


def test_the_phase_slot_is_kept_where_the_phase_tells_the_tails_apart():
    usages, phases = warning_jobs(60, 0)
    p = PeakRiskPolicy(max_risk=0.05).fit(usages, phases, 10, 2)
    rep = p.fit_report_[0]
    assert p.phase_used_[0] and rep["phase"] == 1.0
    # the phase buys a tenth or more out of fold: the warned windows alone get the spike's room
    assert rep[f"oof_cost_phase_mw{p.min_windows_[0]}"] < 0.9 * min(
        rep[f"oof_cost_mw{mw}"] for mw in p.candidate_min_windows())
    u = usages[0][:50]
    warned, quiet = np.zeros(50, np.int64), np.zeros(50, np.int64)
    warned[-1] = 1                    # the last sample before the served window
    assert p.allocate(u, warned, 10, None, 15.0)[-1, 0] > \
        1.3 * p.allocate(u, quiet, 10, None, 15.0)[-1, 0]


def test_phases_that_tell_nothing_are_dropped_and_served_as_the_phase_blind_table():
    usages, _ = warning_jobs(60, 0)
    rng = np.random.default_rng(1)
    noise = [rng.integers(0, 3, len(u)) for u in usages]      # labels unrelated to usage
    p = PeakRiskPolicy(max_risk=0.05).fit(usages, noise, 10, 3)
    blind = PeakRiskPolicy(max_risk=0.05, use_phase=False).fit(usages, None, 10)
    assert not p.phase_used_[0] and p.fit_report_[0]["phase"] == 0.0
    assert p.needs_phases                     # still a table that may use phases (the model's)
    assert p.min_windows_[0] == blind.min_windows_[0]
    for u, ph in zip(usages[:5], noise[:5]):
        served = p.allocate(u, ph, 10, None, 15.0)
        np.testing.assert_array_equal(served, p.allocate(u, np.zeros_like(ph), 10, None, 15.0))
        np.testing.assert_allclose(served, blind.allocate(u, None, 10, None, 15.0), rtol=1e-12)
    # a caller that asks what the slot carries keeps it: no phase-blind candidate is costed
    kept = PeakRiskPolicy(max_risk=0.05, select_phase=False).fit(usages, noise, 10, 3)
    assert kept.fit_report_[0]["phase"] == 1.0 and kept.phase_used_[0]
    assert not any(k.startswith("oof_cost_mw") for k in kept.fit_report_[0])
    # the model document holds it as it is served
    back = from_table(RiskTable.model_validate(json.loads(
        to_table(p).model_dump_json(by_alias=True))))
    assert not back.phase_used_[0]
    np.testing.assert_allclose(back.allocate(usages[0], noise[0], 10, None, 15.0),
                               p.allocate(usages[0], noise[0], 10, None, 15.0), rtol=1e-8)


def test_groups_keep_a_workload_in_one_fold():
    usages, phases = jobs(30, 3)
    groups = [f"w{i // 3}" for i in range(30)]
    a = PeakRiskPolicy(max_risk=0.05, seed=1).fit(usages, phases, 5, 3, groups=groups)
    b = PeakRiskPolicy(max_risk=0.05, seed=1).fit(usages, phases, 5, 3, groups=groups)
    np.testing.assert_array_equal(a.multiplier_, b.multiplier_)      # seeded
    with pytest.raises(ValueError, match="groups"):
        PeakRiskPolicy().fit(usages, phases, 5, 3, groups=groups[:3])


# ----------------------------------------------------------------------------- rows
@pytest.fixture(scope="module")
def fitted():
    usages, phases = spike_jobs()
    return (PeakRiskPolicy(max_risk=0.02, min_windows=40).fit(usages, phases, 10, 2,
                                                              ("memory",)), usages, phases)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 39), st.integers(0, 300))
def test_causal_truncating_the_future_never_changes_a_row(fitted, i, m):
    p, usages, phases = fitted
    u, ph = usages[i], phases[i]
    full = p.allocate(u, ph, 10, None, 15.0)
    part = p.allocate(u[:m], ph[:m], 10, None, 15.0)
    np.testing.assert_array_equal(part, full[: m // 10 + 1])
    assert np.isfinite(full).all() and (full >= 0).all()


def test_cold_start_is_the_quantile_of_first_window_peaks():
    usages = [col(*([v] * 10 + [1.0] * 10)) for v in (3.0, 1.0, 2.0, 8.0)]
    phases = [np.zeros(20, np.int64)] * 4
    p = PeakRiskPolicy(max_risk=0.5, min_windows=1).fit(usages, phases, 10, 1)
    # the median ("higher") of 1, 2, 3, 8
    assert p.cold_start_[0] == 3.0
    # row 0 ignores the pod's request, and an execution shorter than a window is all cold start
    out = p.allocate(col(1, 2), np.zeros(2, np.int64), 10, np.array([99.0]), 15.0)
    np.testing.assert_array_equal(out, [[3.0]])
    assert PeakRiskPolicy(max_risk=0.01, min_windows=1).fit(
        usages, phases, 10, 1).cold_start_[0] == 8.0


def test_nothing_to_learn_is_the_running_max():
    p = PeakRiskPolicy(max_risk=0.05).fit([col(1, 2, 3)], [np.zeros(3, np.int64)], 5, 1)
    assert (p.multiplier_ == 1).all() and p.cold_start_[0] == 3.0
    out = p.allocate(col(1, 9, 2, 2, 2, 7), np.zeros(6, np.int64), 5, None, 15.0)
    np.testing.assert_array_equal(out, col(3.0, 9.0))


def test_phase_blind_ignores_phases():
    usages, phases = spike_jobs(n_exec=20)
    p = PeakRiskPolicy(max_risk=0.05, use_phase=False, min_windows=30).fit(usages, None, 10)
    assert p.name == "peak-risk" and not p.needs_phases and p.multiplier_.shape[1] == 1
    np.testing.assert_array_equal(p.allocate(usages[0], None, 10, None, 15.0),
                                  p.allocate(usages[0], phases[0], 10, None, 15.0))


@pytest.mark.parametrize("kwargs, message", [
    ({"max_risk": 0.0}, "max_risk"), ({"max_risk": 1.0}, "max_risk"),
    ({"max_risk": True}, "max_risk"), ({"min_windows": 0}, "min_windows"),
    ({"folds": 1}, "folds"), ({"state_risk": 2.0}, "state_risk"),
    ({"estimators": ("median",)}, "estimators"), ({"estimators": ()}, "estimators"),
])
def test_bad_parameters_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PeakRiskPolicy(**kwargs).fit([col(1, 2, 3)], [np.zeros(3, np.int64)], 1, 1)


def test_bad_input(fitted):
    p, usages, phases = fitted
    with pytest.raises(ValueError, match="phase of every"):
        PeakRiskPolicy().fit(usages, None, 10)
    with pytest.raises(ValueError, match="non-negative"):
        PeakRiskPolicy().fit([col(1, -1)], [np.zeros(2, np.int64)], 1)
    with pytest.raises(ValueError, match="n_phases"):
        PeakRiskPolicy().fit(usages, phases, 10, 1)
    with pytest.raises(ValueError, match="windows of 10 samples, not 5"):
        p.allocate(usages[0], phases[0], 5, None, 15.0)
    with pytest.raises(ValueError, match="outside the table"):
        p.allocate(usages[0], np.full(len(usages[0]), 7), 10, None, 15.0)
    with pytest.raises(ValueError, match="not fitted"):
        PeakRiskPolicy().allocate(usages[0], phases[0], 10, None, 15.0)


# ----------------------------------------------------------------------------- document
def test_table_round_trip_and_served_the_same(fitted):
    p, usages, phases = fitted
    t = to_table(p)
    back = from_table(RiskTable.model_validate(json.loads(t.model_dump_json(by_alias=True))))
    for u, ph in zip(usages[:5], phases[:5]):
        np.testing.assert_allclose(back.allocate(u, ph, 10, None, 15.0),
                                   p.allocate(u, ph, 10, None, 15.0), rtol=1e-8)
    assert back.state_rows() == [dict(r, multiplier=pytest.approx(r["multiplier"], rel=1e-8))
                                 for r in p.state_rows()]
    assert len(t.model_dump_json(by_alias=True)) < 20_000


def test_a_table_of_other_bins_is_refused(fitted):
    p, *_ = fitted
    doc = json.loads(to_table(p).model_dump_json(by_alias=True))
    doc["features"][0]["edges"] = [1, 2, 4, 8]
    with pytest.raises(ValueError, match="retrain"):
        from_table(RiskTable.model_validate(doc))


@pytest.fixture(scope="module")
def model_with_risk_tables(fitted_model, synthetic_train):
    from ai4dl.evaluation.evaluate import prepare

    traces, _ = synthetic_train
    data = prepare(list(traces), ("memory",), fitted_model)
    m = PhaseModel.from_document(fitted_model.to_document())
    m.risk_tables_ = [to_table(p) for p in (
        PeakRiskPolicy(max_risk=0.05, min_windows=20).fit(
            data.usage, data.phases, 20, m.n_phases_, ("memory",)),
        PeakRiskPolicy(max_risk=0.05, use_phase=False, min_windows=20,
                       name="peak-risk-blind").fit(data.usage, None, 20, None, ("memory",)))]
    return m, data


def test_document_holds_the_risk_tables(model_with_risk_tables):
    from ai4dl.serving import build

    m, data = model_with_risk_tables
    doc = json.loads(m.to_document().model_dump_json(by_alias=True, exclude_none=True))
    assert [t["name"] for t in doc["riskTables"]] == ["peak-risk", "peak-risk-blind"]
    loaded = PhaseModel.from_document(doc)
    for name in ("peak-risk", "peak-risk-blind"):
        a = from_table(next(t for t in m.risk_tables_ if t.name == name))
        # peak-risk as the operator serves it; the phase-blind control (a table a research
        # fit may store, never served) straight from the loaded document
        b = (build(name, loaded, ("memory",), 20) if name == "peak-risk" else
             from_table(next(t for t in loaded.risk_tables_ if t.name == name)))
        assert isinstance(b, PeakRiskPolicy) and b.name == name
        for u, ph in zip(data.usage[:4], data.phases[:4]):
            np.testing.assert_allclose(b.allocate(u, ph, 20, None, 15.0),
                                       a.allocate(u, ph, 20, None, 15.0), rtol=1e-8)


def test_documents_without_risk_tables_still_load(fitted_model):
    doc = json.loads(fitted_model.to_document().model_dump_json(by_alias=True,
                                                                exclude_none=True))
    assert "riskTables" not in doc
    assert PhaseModel.from_document(doc).risk_tables_ == []
    doc["schemaVersion"] = SCHEMA_V1
    assert PhaseModel.from_document(doc).risk_tables_ == []


def test_a_v1_document_cannot_carry_risk_tables(model_with_risk_tables):
    from ai4dl.errors import ModelError

    m, _ = model_with_risk_tables
    doc = json.loads(m.to_document().model_dump_json(by_alias=True, exclude_none=True))
    doc["schemaVersion"] = SCHEMA_V1
    with pytest.raises(ModelError, match="riskTables needs schemaVersion"):
        PhaseModel.from_document(doc)


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t["resources"][0]["states"][0].__setitem__("multiplier", -1.0),
     "greater than or equal to 0"),
    (lambda t: t["resources"][0]["states"][0].__setitem__("level", 99), "level 99"),
    (lambda t: t["resources"][0]["states"][0]["bins"].pop(), "do not fit level"),
    (lambda t: t["resources"][0]["states"].append(t["resources"][0]["states"][0]),
     "listed twice"),
    (lambda t: t["resources"][0].__setitem__("resource", "gpu"), "no feature 'gpu'"),
    (lambda t: t["resources"][0].__setitem__("coldStart", -1.0), "coldStart"),
    (lambda t: t.__setitem__("maxRisk", 1.5), "maxRisk"),
    (lambda t: t.__setitem__("phases", t["phases"] + 1), "phase rows"),
    (lambda t: t["features"][0]["edges"].reverse(), "increase"),
    (lambda t: t["levels"][0].append("burstiness"), "levels"),
    (lambda t: t.__setitem__("surprise", 1), "surprise"),
])
def test_malformed_risk_tables_are_refused_in_one_line(model_with_risk_tables, mutate,
                                                       message):
    from ai4dl.errors import ModelError

    m, _ = model_with_risk_tables
    doc = json.loads(m.to_document().model_dump_json(by_alias=True, exclude_none=True))
    mutate(doc["riskTables"][0])
    with pytest.raises(ModelError, match=message) as err:
        PhaseModel.from_document(doc)
    assert "\n" not in str(err.value)


def test_serving_build_refuses_a_wrong_window_resources_or_a_missing_table(
        model_with_risk_tables, fitted_model):
    from ai4dl.serving import build

    m, _ = model_with_risk_tables
    with pytest.raises(ValueError, match="windows of 20 samples, the PhaseModel's window is 40"):
        build("peak-risk", m, ("memory",), 40)
    with pytest.raises(ValueError, match="is for memory, the PhaseModel manages cpu, memory"):
        build("peak-risk", m, ("cpu", "memory"), 20)
    with pytest.raises(ValueError, match="no peak-risk table"):
        build("peak-risk", fitted_model, ("memory",), 20)


def test_served_cold_start_is_the_tables(model_with_risk_tables):
    from ai4dl.serving import Served, build

    m, _ = model_with_risk_tables
    pol = build("peak-risk", m, ("memory",), 20)
    served = Served(pol, ("peak-risk",), ("memory",), "")
    np.testing.assert_array_equal(served.cold_start, pol.cold_start_)
    assert N_CODES == 108


def test_describe_shows_the_risk_tables(model_with_risk_tables, tmp_path, capsys):
    from ai4dl.cli import main
    from ai4dl.io.modelfile import save_model

    m, _ = model_with_risk_tables
    path = save_model(m, tmp_path / "m.json")
    assert main(["describe", str(path)]) == 0
    out = capsys.readouterr().out
    assert "## Risk table: peak-risk (fitted for at most 5 % of windows at risk" in out
    assert "## Risk table: peak-risk-blind" in out and "min_windows 20" in out
    assert "every other window" in out
    # whether the fit kept the phase slot is said for the table that may use it, not the other
    used = from_table(m.risk_tables_[0]).phase_used_[0]
    assert out.count("the phase: ") == 1
    assert ("the phase: used" in out) == bool(used)


def test_a_choice_of_peak_risk_needs_its_table(model_with_risk_tables):
    from ai4dl.method.document import PhaseModelDocument
    from ai4dl.policy import catalog
    from ai4dl.serving import build

    m, _ = model_with_risk_tables
    doc = json.loads(m.to_document().model_dump_json(by_alias=True, exclude_none=True))
    doc["policyChoice"] = {"resources": ["memory"], "winners": ["peak-risk"], "targets": [0.99]}
    assert PhaseModel.from_document(doc).policy_choice_.winners == ["peak-risk"]
    assert catalog.choice_problem(PhaseModelDocument.model_validate(doc)) is None
    doc.pop("riskTables")
    # the pure method loads it (it names no policy); the policies refuse it, where a
    # PhaseModel's spec is validated (InvalidModel) and where it would be served
    assert "riskTables has no peak-risk table for it" in \
        catalog.choice_problem(PhaseModelDocument.model_validate(doc))
    with pytest.raises(ValueError, match="has no peak-risk table"):
        build("peak-risk", PhaseModel.from_document(doc), ("memory",), 20)
    doc["policyChoice"]["winners"] = ["vpa"]
    assert "'vpa', which no policy serves" in \
        catalog.choice_problem(PhaseModelDocument.model_validate(doc))
