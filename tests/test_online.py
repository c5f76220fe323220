"""The operator's window-by-window serving (ai4dl.policy.online) gives the same allocation as
the evaluator's replay of the whole history, for every servable policy: one policy code path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import copy

from ai4dl.policy.headroom import HeadroomPolicy
from ai4dl.policy.headroom_levels import ESTIMATORS
from ai4dl.policy.online import next_allocation, next_allocations
from ai4dl.policy.running import OwnHistory
from ai4dl.policy.peak import PeakRiskPolicy
from ai4dl.policy.policies import (AdaptiveMax, AdaptiveStat, Calibrated, PerResource,
                                   PhasePolicy, PhaseProactive)

K = 3


def _execution(rng, n):
    phases = np.repeat(rng.integers(0, K, n // 5 + 1), 5)[:n]
    scale = rng.uniform(0.5, 20.0)
    usage = np.abs(rng.normal(1.0 + phases[:, None], 0.3, (n, 2))) * scale
    return usage, phases


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(0)
    execs = [_execution(rng, int(rng.integers(60, 200))) for _ in range(40)]
    us, ps = [e[0] for e in execs], [e[1] for e in execs]
    out = {"phase": HeadroomPolicy(target=0.95, min_windows=4).fit(us, ps, 10, K),
           "burst": HeadroomPolicy(target=0.95, use_phase=False, min_windows=4)
           .fit(us, None, 10)}
    # the same table with every estimator in use (the fit picks what these data favour)
    every = copy.deepcopy(out["phase"])
    every.estimator_ = (np.arange(every.estimator_.size) % len(ESTIMATORS)).reshape(
        every.estimator_.shape)
    every.name = "every-estimator"
    out["every"] = every
    # peak-risk, with and without the phase (small min_windows: many states in use)
    out["peak"] = PeakRiskPolicy(max_risk=0.05, min_windows=8).fit(us, ps, 10, K)
    out["peak-blind"] = PeakRiskPolicy(max_risk=0.05, use_phase=False, min_windows=8).fit(
        us, None, 10)
    return out


def _policies(tables):
    levels = np.array([[1.0, 2.0], [3.0, 6.0], [8.0, 9.0]])
    P = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    dwell = np.array([4.0, 12.0, 7.0])
    out = [AdaptiveMax(), AdaptiveStat(), tables["phase"], tables["burst"], tables["every"],
           tables["peak"], tables["peak-blind"]]
    for scope in ("model", "execution"):
        for reader in ("last", "majority", "max"):
            out.append(PhasePolicy(levels, 0.05, reader, scope))
        for mode in ("worst-likely", "expected"):
            out.append(PhaseProactive(levels, P, dwell, 0.0, mode, 0.2, scope))
    out.append(PerResource((tables["phase"], AdaptiveMax())))
    # what auto serves for a resource judged by windows at risk
    out.append(Calibrated(tables["phase"], (1.0, 1.07)))
    out.append(PerResource((AdaptiveStat(), Calibrated(AdaptiveMax(), (1.0, 1.05)))))
    out.append(PerResource((AdaptiveMax(), tables["peak"])))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31), n=st.integers(10, 160))
def test_next_allocation_equals_the_replay(tables, seed, n):
    rng = np.random.default_rng(seed)
    usage, phases = _execution(rng, n)
    W = 10
    m = len(usage) // W
    for pol in _policies(tables):
        rows = pol.allocate(usage, phases if pol.needs_phases else None, W,
                            np.array([5.0, 5.0]), 15.0)
        hist = usage[: m * W]
        own = OwnHistory.of(hist, phases[: m * W], K, W)
        got = next_allocation(pol, hist[-W:], phases[(m - 1) * W: m * W], own)
        np.testing.assert_allclose(got, rows[m], rtol=1e-9, atol=1e-9,
                                   err_msg=getattr(pol, "name", str(pol)))


def test_own_history_adds_window_by_window_and_round_trips():
    rng = np.random.default_rng(3)
    usage, phases = _execution(rng, 95)
    whole = OwnHistory.of(usage, phases, K, 10)
    parts = OwnHistory(K, 2)
    for i in range(0, 95, 10):
        parts.add(usage[i:i + 10], phases[i:i + 10])
    for a, b in ((whole.count, parts.count), (whole.s1, parts.s1), (whole.s2, parts.s2),
                 (whole.t1, parts.t1), (whole.peak, parts.peak),
                 (whole.window_max, parts.window_max), (whole.previous_max, parts.previous_max),
                 (whole.ewma_max, parts.ewma_max)):
        np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(parts.window_max, usage[90:].max(0))
    np.testing.assert_allclose(parts.previous_max, usage[80:90].max(0))
    assert (whole.run_phase, whole.run_length) == (parts.run_phase, parts.run_length)
    back = OwnHistory.from_json(json.loads(json.dumps(parts.to_json())))
    np.testing.assert_allclose(back.s2, parts.s2, rtol=1e-8)
    np.testing.assert_allclose(back.ewma_max, parts.ewma_max, rtol=1e-8)
    np.testing.assert_allclose(back.previous_max, parts.previous_max, rtol=1e-8)
    # a record written before the window maxima were kept still loads: they start afresh
    old = {k: v for k, v in parts.to_json().items() if k not in ("wm", "wp", "ew")}
    assert np.isnan(OwnHistory.from_json(old).ewma_max).all()
    assert (back.run_phase, back.run_length, back.n) == (parts.run_phase, parts.run_length, 95)
    for bad in ({"k": 3}, {**parts.to_json(), "c": [1, 2]},
                {**parts.to_json(), "t1": [float("nan"), 1.0]}):
        with pytest.raises(ValueError, match="not an own-history record"):
            OwnHistory.from_json(bad)


def test_vpa_is_not_servable():
    from ai4dl.policy.policies import VpaPolicy

    with pytest.raises(ValueError, match="cannot be served window by window"):
        next_allocation(VpaPolicy(), np.ones((10, 2)), None, OwnHistory(1, 2))


def test_the_batched_call_gives_every_containers_row(tables):
    rng = np.random.default_rng(7)
    W = 10
    execs = [_execution(rng, int(rng.integers(10, 120))) for _ in range(12)]
    lasts, phases, owns = [], [], []
    for u, p in execs:
        m = len(u) // W
        lasts.append(u[(m - 1) * W: m * W])
        phases.append(p[(m - 1) * W: m * W])
        owns.append(OwnHistory.of(u[: m * W], p[: m * W], K, W))
    for pol in _policies(tables):
        got = next_allocations(pol, np.stack(lasts), np.stack(phases), owns)
        want = np.stack([next_allocation(pol, la, ph, o)
                         for la, ph, o in zip(lasts, phases, owns)])
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=getattr(pol, "name", ""))


def test_peak_risk_state_round_trips_and_an_old_record_is_served_cautiously(tables):
    pol = tables["peak"]
    rng = np.random.default_rng(5)
    usage, phases = _execution(rng, 120)
    W = 10
    own = OwnHistory.of(usage, phases, K, W)
    assert own.windows == 12
    back = OwnHistory.from_json(json.loads(json.dumps(own.to_json())))
    assert back.windows == 12
    np.testing.assert_array_equal(back.since_high, own.since_high)
    np.testing.assert_allclose(back.low_since_high, own.low_since_high, rtol=1e-8)
    last, last_ph = usage[-W:], phases[-W:]
    np.testing.assert_allclose(next_allocation(pol, last, last_ph, back),
                               pol.allocate(usage, phases, W, None, 15.0)[-1], rtol=1e-8)
    # a record written before peak-risk's state was kept: windows seen from its samples, and,
    # not knowing the windows since its last new high, the most cautious multiplier of any
    # state with that many windows and that phase -- never less than the table would give
    old = {k: v for k, v in own.to_json().items() if k not in ("nw", "hs", "hl")}
    rec = OwnHistory.from_json(old)
    assert rec.windows == -1 and (rec.since_high == -1).all()
    assert np.isnan(rec.low_since_high).all()
    got = next_allocation(pol, last, last_ph, rec)
    want = own.peak * pol.cautious(np.array([12]), np.array([last_ph[-1]]))[0]
    np.testing.assert_allclose(got, want)
    assert (got >= next_allocation(pol, last, last_ph, own) - 1e-9).all()
    # it stays unknown (and JSON keeps it so) until the next new high makes it known
    rec.add(np.minimum(usage[:W], own.peak), phases[:W])
    assert (rec.since_high == -1).all() and "hs" not in rec.to_json()
    rec.add(usage[:W] + own.peak + 1.0, phases[:W])
    assert (rec.since_high == 0).all() and rec.windows == -1
    np.testing.assert_allclose(rec.low_since_high, (usage[:W] + own.peak + 1.0).max(0))
    back = OwnHistory.from_json(json.loads(json.dumps(rec.to_json())))
    assert (back.since_high == 0).all() and back.windows == -1
    # a fresh history and one rebased to another model keep (or start) the state
    assert OwnHistory(K, 2).windows == 0
    rb = own.rebased(5)
    assert rb.windows == 12 and (rb.since_high == own.since_high).all()
    for bad in ({**own.to_json(), "hs": [1]}, {**own.to_json(), "hs": [-3, 0]},
                {k: v for k, v in own.to_json().items() if k != "hl"}):
        with pytest.raises(ValueError, match="not an own-history record"):
            OwnHistory.from_json(bad)
