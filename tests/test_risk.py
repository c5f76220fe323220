"""Judged by risk (../shared/docs/evaluation.md, "Memory is judged by risk"): the matched share
of windows at risk in the evaluator, and auto choosing a resource under a risk objective."""

from __future__ import annotations


import numpy as np
import pytest

from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from ai4dl.judge import Replay, ReplayInput, replay, score
from ai4dl.judge import matched_risk_multiplier, wins_at_risk
from ai4dl.policy.auto import calibration_factor, choose_policy
from ai4dl.rules.objectives import Objective
from ai4dl.policy.online import next_allocations
from ai4dl.policy.running import OwnHistory
from ai4dl.policy.policies import AdaptiveMax, Calibrated, Oracle, PerResource


def test_matched_risk_multiplier_leaves_exactly_the_share_at_risk():
    rng = np.random.default_rng(0)
    wm = rng.uniform(1, 10, 200)
    al = rng.uniform(1, 10, 200)
    for s in (0.01, 0.02, 0.05, 0.2):
        m = matched_risk_multiplier(wm, al, s)
        at_risk = int(np.count_nonzero(wm > al * m))
        assert at_risk <= int(np.floor(s * 200))
        # the smallest such multiplier: a hair less puts one more window at risk
        assert np.count_nonzero(wm > al * np.nextafter(m, 0) * (1 - 1e-12)) > at_risk
    # by hand: ratios 1..10, 10 % may be at risk -> the 9th ratio
    assert matched_risk_multiplier(np.arange(1.0, 11.0), np.ones(10), 0.1) == 9.0
    # a zero allocation under a positive maximum is an infinite ratio
    assert matched_risk_multiplier(np.array([1.0, 1.0]), np.array([0.0, 1.0]), 0.0) == np.inf
    assert np.isnan(matched_risk_multiplier(np.array([]), np.array([]), 0.01))


def _input(usages, step=60.0):
    n = len(usages)
    return ReplayInput([f"e{i}" for i in range(n)], usages, [None] * n,
                       [u.max(0) for u in usages], step, ("cpu", "memory"),
                       ("cores", "bytes"), [f"g{i}" for i in range(n)],
                       [float(i) * 1e5 for i in range(n)])


def test_score_reports_cost_at_a_matched_share_of_windows_at_risk():
    # windows of 2 samples; memory maxima 1, 4, 2, 8 (window 0 is the cold start)
    u = np.array([[1, 1], [1, 1], [1, 4], [1, 3], [1, 2], [1, 1], [1, 8], [1, 1.0]])
    data = _input([u])
    alloc = np.array([[1, 1], [1, 2], [1, 2], [1, 2.0]])     # windows at risk: 1 and 3
    reps = {"p": Replay("p", [alloc]), "oracle": replay(data, Oracle(), 2)}
    sc = score(data, reps, 2, targets=(), risks=(0.34, 0.5))["p"][1]
    assert sc.risk_share == pytest.approx(2 / 3)
    # one window of three may be at risk at 34 %: ratios 2, 1, 4 -> multiplier 2
    assert sc.risk_multiplier_at[0.34] == 2.0
    oracle = (4 + 2 + 8) * 2
    assert sc.vs_oracle_risk_at[0.34] == pytest.approx(2 * (2 + 2 + 2) * 2 / oracle)
    # at that multiplier only the last window is short, by 8 - 4 at its worst sample
    assert sc.worst_shortfall_risk_at[0.34] == pytest.approx(4 / 1024 ** 3)
    assert sc.worst_shortfall_risk_rel_at[0.34] == pytest.approx(0.5)
    assert sc.fulfilment_risk_at[0.34] == pytest.approx(5 / 6)
    assert sc.risk_multiplier_at[0.5] == 2.0          # floor(1.5) = 1 window at risk too
    # the execution's allocation there (GiB-hours of the 6 scored samples of a minute)
    assert sc.allocation_by_execution_risk_at[0.34] == pytest.approx(
        (2 * (2 + 2 + 2) * 2 / 60 / 1024 ** 3,))


def test_wins_at_risk_is_cheaper_at_the_matched_share():
    rng = np.random.default_rng(1)
    usages = [rng.uniform(1, 2, (40, 2)) for _ in range(5)]
    data = _input(usages)
    reps = {"adaptive-max": replay(data, AdaptiveMax(), 4), "oracle": replay(data, Oracle(), 4)}
    reps["double"] = Replay("double", [a * 2 for a in reps["adaptive-max"].allocations])
    reps["flat"] = Replay("flat", [np.full_like(a, 2.0) for a in reps["adaptive-max"].allocations])
    sc = score(data, reps, 4, targets=(), risks=(0.01,))
    # a constant multiple is the same policy at a matched share: not cheaper
    assert sc["double"][1].vs_oracle_risk_at[0.01] == pytest.approx(
        sc["adaptive-max"][1].vs_oracle_risk_at[0.01])
    assert wins_at_risk(sc, "double", 1, 0.01, "adaptive-max") is False
    # the known ceiling 2 beats chasing a uniform(1, 2) series window by window at 1 %
    assert wins_at_risk(sc, "flat", 1, 0.01, "adaptive-max") is True
    assert wins_at_risk(sc, "missing", 1, 0.01, "adaptive-max") is None


def _bursty(n_exec, seed, n=400, window=10):
    """A job's memory steps to a checkpoint peak every 8 windows (x1.6) and is flat otherwise;
    the scale differs by job."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_exec):
        scale = rng.uniform(1, 20)
        mem = scale * (1 + 0.02 * rng.standard_normal(n))
        at = (np.arange(n) // window) % 8 == 7
        mem[at & (np.arange(n) % window < 3)] *= 1.6
        cpu = scale * (1 + 0.05 * rng.standard_normal(n))
        out.append(np.clip(np.stack([cpu, mem], 1), 0, None))
    return _input(out, 15.0)


def test_calibration_factor_meets_the_share_on_the_executions_it_saw():
    data = _bursty(30, 0)
    rep = replay(data, AdaptiveMax(), 10)
    f = calibration_factor(data, rep, 10, 1, 0.02, range(30))
    scaled = [a.copy() for a in rep.allocations]
    for a in scaled:
        a[1:] *= f
    sc = score(data, {"s": Replay("s", scaled), "oracle": replay(data, Oracle(), 10)}, 10,
               targets=(), risks=())
    assert sc["s"][1].risk_share <= 0.02
    assert f > 1.5          # adaptive-max must cover the checkpoint peak it cannot see coming


@pytest.fixture(scope="module")
def risk_choice():
    data = _bursty(60, 2)
    return data, choose_policy(
        data, 10, None, {"cpu": 0.97, "memory": Objective("memory", "risk", 0.02)},
        candidates=("adaptive-max", "adaptive-stat", "burst-headroom"))


def test_auto_chooses_memory_under_its_risk_objective(risk_choice):
    data, c = risk_choice
    assert [o.kind for o in c.objectives] == ["fulfilment", "risk"]
    mem = [s for s in c.scores if s.resource == "memory"]
    assert {s.policy for s in mem} == {"adaptive-max", "adaptive-stat", "burst-headroom"}
    # judged at the matched share: the winner is the cheapest there that beats the baseline
    won = [s for s in mem if s.wins]
    if won:
        assert c.winners[1] == min(won, key=lambda s: s.vs_oracle).policy
    else:
        assert c.winners[1] == "adaptive-max"
    # what a pod would get: calibrated on the older executions, realised on the recent ones
    assert c.achieved[1]["riskWindows"] == pytest.approx(
        next(s for s in mem if s.policy == c.winners[1]).short_window_share)
    assert "memory ≤ 2 % of windows at risk" in c.reason
    d = c.as_dict()
    assert d["objectives"][1] == {"resource": "memory", "kind": "risk", "value": 0.02}
    assert d["achieved"][1]["resource"] == "memory"


def test_the_served_memory_policy_is_calibrated_on_every_training_execution(risk_choice):
    data, c = risk_choice
    assert isinstance(c.policy, PerResource)
    mem = c.policy.policies[1]
    assert isinstance(mem, Calibrated) and mem.factors[0] == 1.0
    assert mem.factors[1] == c.calibration[1] > 1.0
    rep = replay(data, c.policy, 10)
    sc = score(data, {"auto": rep, "oracle": replay(data, Oracle(), 10)}, 10, targets=(),
               risks=())
    assert sc["auto"][1].risk_share <= 0.02 + 1e-12
    # the operator serves the same rows (one policy code path)
    u = data.usage[0]
    W = 10
    m = len(u) // W - 1          # the last window the replay scores
    own = OwnHistory.of(u[: m * W], None, 1, W)
    got = next_allocations(c.policy, u[(m - 1) * W: m * W][None], None, [own])[0]
    np.testing.assert_allclose(got, rep.allocations[0][m], rtol=1e-9)


def test_run_evaluation_reports_the_risk_view(synthetic_train):
    cfg = EvaluationConfig(window=40, policies=("static", "adaptive-max", "burst-headroom",
                                                "oracle"), risks=(0.02, 0.05))
    r = run_evaluation(synthetic_train[0], cfg)
    for name in ("static", "adaptive-max", "burst-headroom"):
        for s in r.scores[name]:
            assert set(s.vs_oracle_risk_at) == {0.02, 0.05}
            # more windows allowed at risk never costs more
            assert s.vs_oracle_risk_at[0.05] <= s.vs_oracle_risk_at[0.02]
    assert set(r.per_risk["burst-headroom"]) == {0.02, 0.05}


def test_pick_at_risk_keeps_the_policy_fitted_to_the_share_unless_another_is_clearly_cheaper():
    from ai4dl.policy.auto import bootstrap_risk_costs, pick_at_risk

    rng = np.random.default_rng(3)
    W, n_exec = 10, 30
    scale = rng.uniform(1, 5, n_exec)
    scale[1] = scale[0]
    peak_windows = np.isin(np.arange(20), (5, 15))
    usages = []
    for L in scale:          # flat memory with a x2 peak in windows 5 and 15
        mem = L * (1 + 0.001 * rng.random(200))
        mem[np.repeat(peak_windows, W)] *= 2.0
        usages.append(np.stack([np.full(200, 1.0), mem], 1))
    data = _input(usages)

    def rows(level_of):      # (21 rows: the replay keeps 20) per job
        return Replay("x", [np.stack([np.ones(21), level_of(k)], 1) for k in range(n_exec)])

    hold = lambda k: np.full(21, 2.1 * scale[k])                       # noqa: E731
    knows = lambda k: np.where(np.append(peak_windows, False), 2.1, 1.05) * scale[k]  # noqa
    reps = {"peak-risk": rows(hold),
            # knows the peaks of every job: clearly cheaper
            "far": rows(knows),
            # knows them for one job and over-asks for another: cheaper on the point estimate,
            # by less than the noise of which jobs were held out
            "near": rows(lambda k: knows(k) if k == 0 else hold(k) * (1.3 if k == 1 else 1))}
    only = list(range(n_exec))
    sc = score(data, {**reps, "oracle": replay(data, Oracle(), W)}, W, targets=(),
               risks=(0.02,))
    costs = {n: sc[n][1].vs_oracle_risk_at[0.02] for n in reps}
    assert costs["far"] < costs["near"] < costs["peak-risk"]
    boot = bootstrap_risk_costs(data, reps, W, 1, 0.02, only, list(reps))
    assert all(len(v) == 200 and np.isfinite(v).all() for v in boot.values())
    assert costs["near"] - costs["peak-risk"] + np.std(boot["near"] - boot["peak-risk"]) > 0
    assert pick_at_risk(data, reps, W, 1, 0.02, only, ["peak-risk", "near"], costs) == \
        "peak-risk"
    assert pick_at_risk(data, reps, W, 1, 0.02, only, ["peak-risk", "near", "far"],
                        costs) == "far"
    # without the fitted policy among the winners: the cheapest; none: the baseline
    assert pick_at_risk(data, reps, W, 1, 0.02, only, ["near", "far"], costs) == "far"
    assert pick_at_risk(data, reps, W, 1, 0.02, only, [], costs) == "adaptive-max"


def _starting(n_exec, seed, n=300, window=10):
    """:func:`_bursty` jobs whose memory first climbs from a fifth of its level over three
    windows (a job's start: imports, data loading), the growth the safety layer holds for."""
    data = _bursty(n_exec, seed, n, window)
    for u in data.usage:
        u[:3 * window, 1] *= np.linspace(0.2, 1.0, 3 * window)
    return data


def test_auto_is_calibrated_through_the_safety_layer_it_is_served_under():
    """The layer's holds (memory kept while the working set rises) leave fewer windows at
    risk than the bare policy: a choice calibrated on the bare replays is served safer and
    dearer than its objective; calibrated through the layer, it realises its share."""
    from ai4dl.rules.safety import SafetyConfig

    data = _starting(60, 3)
    safety = SafetyConfig(max_decrease=0.5, memory_margin=0.1, memory_index=1)
    obj = {"cpu": 0.97, "memory": Objective("memory", "risk", 0.05)}
    bare = choose_policy(data, 10, None, obj, candidates=("adaptive-max",))
    aware = choose_policy(data, 10, None, obj, candidates=("adaptive-max",), safety=safety)

    def served(c):
        sc = score(data, {"s": replay(data, c.policy, 10, safety),
                          "oracle": replay(data, Oracle(), 10)}, 10, targets=(), risks=())
        return sc["s"][1].risk_share, sc["s"][1].allocation

    (r_bare, a_bare), (r_aware, a_aware) = served(bare), served(aware)
    assert aware.calibration[1] < bare.calibration[1]
    # calibrated on every training execution as served: exactly the share (the smallest
    # factor meeting it), where the bare calibration over-delivers
    assert r_bare < r_aware <= 0.05 and r_aware > 0.05 - 1 / 60
    assert a_aware < a_bare


def test_a_matched_share_under_a_safety_layer_is_found_in_the_served_order():
    """Under a layer, the factor goes on the policy's own rows and the layer serves the
    result, as the operator does: the served rows at the factor leave at most the share at
    risk and a hair less leaves more; multiplying the served rows instead multiplies the
    layer's floors too (the working-set cover, memory held while it rises): allocations that
    no factor on the policy's rows would get served."""
    from ai4dl.judge import served_risk_match, through_safety
    from ai4dl.rules.safety import SafetyConfig

    data = _starting(40, 5)
    safety = SafetyConfig(max_decrease=0.5, memory_margin=0.1, memory_index=1)
    own = replay(data, AdaptiveMax(), 10)
    served = through_safety(data, own.allocations, 10, safety)
    wmax = [np.maximum.reduceat(u[:, 1], np.arange(0, len(u), 10))[1:] for u in data.usage]
    maxima = np.concatenate(wmax)
    allowed = int(np.floor(0.05 * len(maxima)))

    def at_risk(rows):
        return int(np.count_nonzero(maxima > np.concatenate(
            [r[1: 1 + len(w), 1] for r, w in zip(rows, wmax)])))

    def scaled(f):
        out = []
        for r in own.allocations:
            r = r.copy()
            r[1:, 1] *= f
            out.append(r)
        return through_safety(data, out, 10, safety)

    got = served_risk_match(data, own.allocations, 10, 1, 0.05, safety)
    f = float(got.factors[0])
    assert got.met[0] and at_risk(got.allocations) <= allowed
    assert at_risk(scaled(f * (1 - 1e-4))) > allowed
    for a, b in zip(got.allocations, scaled(f)):
        np.testing.assert_array_equal(a, b)
    # the served rows multiplied to the same share: other rows, at another cost
    m = matched_risk_multiplier(maxima, np.concatenate(
        [r[1: 1 + len(w), 1] for r, w in zip(served, wmax)]), 0.05)
    post = sum(float((r[1:, 1] * m).sum()) for r in served)
    assert abs(post / sum(float(g[1:, 1].sum()) for g in got.allocations) - 1) > 0.01
    # one factor per execution, found together, is each execution's own match
    each = served_risk_match(data, own.allocations, 10, 1, 0.2, safety, per_execution=True)
    for i in (0, 7, 23):
        alone = served_risk_match(data, own.allocations, 10, 1, 0.2, safety, [i])
        assert each.factors[i] == alone.factors[0]
        np.testing.assert_array_equal(each.allocations[i], alone.allocations[0])


def test_score_under_a_layer_reports_the_served_rows_at_the_matched_share():
    """``score`` with the policy's own rows and the layer: the cost at a share is that of the
    served rows at the served-order factor, the same for a one-execution score from the
    precomputed per-execution matches; without the own rows, the closed form as before."""
    from ai4dl.judge import served_matches, served_risk_match, subset
    from ai4dl.rules.safety import SafetyConfig

    data = _starting(30, 6)
    safety = SafetyConfig(max_decrease=0.5, memory_margin=0.1, memory_index=1)
    own = {"a": replay(data, AdaptiveMax(), 10), "oracle": replay(data, Oracle(), 10)}
    reps = {"a": replay(data, AdaptiveMax(), 10, safety), "oracle": own["oracle"]}
    closed = score(data, reps, 10, targets=(), risks=(0.05,))["a"][1]
    served = score(data, reps, 10, targets=(), risks=(0.05,), safety=safety, own=own)["a"][1]
    got = served_risk_match(data, own["a"].allocations, 10, 1, 0.05, safety)
    assert served.risk_multiplier_at[0.05] == got.factors[0]
    mem = replay(data, Oracle(), 10)
    oracle = sum(float(np.repeat(r[1:, 1], 10)[: len(u) - 10].sum())
                 for r, u in zip(mem.allocations, data.usage))
    cost = sum(float(np.repeat(r[1:, 1], 10)[: len(u) - 10].sum())
               for r, u in zip(got.allocations, data.usage))
    assert served.vs_oracle_risk_at[0.05] == pytest.approx(cost / oracle)
    # per execution, in the order scored: what sums to that cost (GiB-hours)
    per = [float(np.repeat(r[1:, 1], 10)[: len(u) - 10].sum()) * data.step / 3600 / 1024 ** 3
           for r, u in zip(got.allocations, data.usage)]
    assert served.allocation_by_execution_risk_at[0.05] == pytest.approx(per)
    assert served.vs_oracle_risk_at[0.05] != pytest.approx(closed.vs_oracle_risk_at[0.05])
    assert served.risk_share == closed.risk_share          # as served: the same rows
    matches = served_matches(data, own, 10, (1,), (0.05,), safety)
    for i in (0, 11):
        one = score(data, reps, 10, targets=(), risks=(0.05,), only=[i], safety=safety,
                    own=own, matches=matches)["a"][1]
        alone = score(subset(data, [i]), {n: Replay(n, [r.allocations[i]])
                                          for n, r in reps.items()}, 10, targets=(),
                      risks=(0.05,), safety=safety,
                      own={n: Replay(n, [r.allocations[i]]) for n, r in own.items()})["a"][1]
        assert one.vs_oracle_risk_at[0.05] == pytest.approx(alone.vs_oracle_risk_at[0.05])
        assert one.risk_multiplier_at[0.05] == alone.risk_multiplier_at[0.05]


def test_a_challenger_must_be_cheaper_beyond_more_errors_the_more_there_are():
    from ai4dl.policy.auto import challenge_z

    assert challenge_z(1) == pytest.approx(1.0)
    assert challenge_z(0) == pytest.approx(1.0)
    zs = [challenge_z(k) for k in range(1, 8)]
    assert all(a < b for a, b in zip(zs, zs[1:]))
    # five challengers together pass on noise as often as one alone at one standard error
    assert challenge_z(5) == pytest.approx(1.856, abs=1e-3)


def test_the_bootstrap_under_a_layer_matches_each_resample_in_the_served_order():
    """With a layer that changes nothing, the served-order bootstrap (a grid of factors)
    agrees with the closed form to the grid's step; with the working-set cover it is the
    served rows' cost, which the closed form on the served rows is not."""
    from ai4dl.policy.auto import GRID_PER_OCTAVE, bootstrap_risk_costs
    from ai4dl.rules.safety import SafetyConfig

    data = _starting(30, 8)
    own = {"a": replay(data, AdaptiveMax(), 10)}
    only = list(range(30))
    inert = SafetyConfig(memory_margin=None, memory_index=1)
    closed = bootstrap_risk_costs(data, own, 10, 1, 0.05, only, ["a"], n=50)["a"]
    grid = bootstrap_risk_costs(data, own, 10, 1, 0.05, only, ["a"], n=50, safety=inert,
                                own=own)["a"]
    step = 2.0 ** (1 / GRID_PER_OCTAVE)
    assert np.all(grid >= closed * (1 - 1e-9)) and np.all(grid <= closed * step * (1 + 1e-9))
    cover = SafetyConfig(max_decrease=0.5, memory_margin=0.1, memory_index=1)
    served = {"a": Replay("a", through_safety_rows(data, own["a"], cover))}
    as_served = bootstrap_risk_costs(data, own, 10, 1, 0.05, only, ["a"], n=50, safety=cover,
                                     own=own)["a"]
    scaled = bootstrap_risk_costs(data, served, 10, 1, 0.05, only, ["a"], n=50)["a"]
    assert np.isfinite(as_served).all() and np.abs(as_served / scaled - 1).max() > 0.01


def through_safety_rows(data, rep, safety):
    from ai4dl.judge import through_safety

    return through_safety(data, rep.allocations, 10, safety)
