"""``auto`` (ai4dl.policy.auto): the rule (a candidate wins only when cheaper than adaptive-max
at the matched target AND no more windows short; never a loser), the recent hold-out, per-
resource choices and targets, the served policy, and one-line errors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from ai4dl.judge import ReplayInput, ResourceScore
from ai4dl.policy import catalog
from ai4dl.policy.auto import choose_policy, pick_winner, recent_split
from ai4dl.policy.headroom import HeadroomPolicy
from ai4dl.policy.policies import PerResource


def rs(cost: float, short: int) -> ResourceScore:
    s = ResourceScore(allocation=1.0, usage=1.0, vs_oracle=1.0, vs_static_peak=1.0,
                      fulfilment=1.0, fulfilment_10=1.0, under_samples=0, worst_shortfall=0.0,
                      worst_shortfall_rel=0.0, oom_windows=0, resizes=0, scored_windows=100)
    s.vs_oracle_at[0.97] = cost
    s.short_windows_at[0.97] = short
    return s


class TestRule:
    def test_cheapest_winner(self):
        sc = {"adaptive-max": [rs(1.10, 10)], "a": [rs(1.05, 10)], "b": [rs(1.02, 9)],
              "c": [rs(1.01, 11)]}
        # c is cheapest but has more windows short: it lost; b wins over a on cost
        assert pick_winner(sc, ["adaptive-max", "a", "b", "c"], 0, 0.97) == "b"

    def test_nobody_wins_the_baseline_is_served(self):
        sc = {"adaptive-max": [rs(1.10, 10)], "dearer": [rs(1.12, 5)],
              "more-short": [rs(1.00, 11)], "unreachable": [rs(math.inf, 0)]}
        assert pick_winner(sc, list(sc), 0, 0.97) == BASELINE

    def test_equal_cost_is_not_a_win(self):
        sc = {"adaptive-max": [rs(1.10, 10)], "same": [rs(1.10, 3)]}
        assert pick_winner(sc, list(sc), 0, 0.97) == BASELINE


def test_recent_split_holds_out_the_latest():
    fit, val = recent_split([5.0, 1.0, 3.0, 9.0, 7.0], 0.4)
    assert val == [3, 4] and fit == [0, 1, 2]
    assert recent_split([1.0, 2.0], 0.9) == ([0], [1])        # at least one on each side
    assert recent_split([1.0], 0.3) == ([0], [])


def replay_input(usages, phases) -> ReplayInput:
    """Executions one per group, started one after the other (the last is the most recent)."""
    n = len(usages)
    return ReplayInput([f"e{i}" for i in range(n)], usages, phases, [u.max(0) for u in usages],
                       15.0, ("cpu", "memory"), ("cores", "cores"), [f"g{i}" for i in range(n)],
                       [float(i) * 1e5 for i in range(n)])


def two_state(n_exec, seed, n=400, window=10):
    """Steady phase 0, phase 1 with one x3 spike per window (the phase tells where)."""
    rng = np.random.default_rng(seed)
    usages, phases = [], []
    for _ in range(n_exec):
        ph = np.repeat(rng.integers(0, 2, n // 50), 50)[:n]
        u = rng.uniform(1, 20) * (1 + 0.01 * rng.standard_normal((n, 2)))
        spikes = (ph == 1) & (np.arange(n) % window == rng.integers(0, window))
        u[spikes, 0] *= 3.0
        usages.append(np.clip(u, 0, None))
        phases.append(ph)
    return replay_input(usages, phases)


def spiky_phase(n_exec, seed, n=400):
    """Phase 1 spikes (x3 cpu, 30 % of its samples, at random), phase 0 is flat; phase runs of
    5-25 samples, not aligned with the windows: when a window ends in phase 1 the phase says
    the next one spikes, while a window that was flat until then does not."""
    rng = np.random.default_rng(seed)
    usages, phases = [], []
    for _ in range(n_exec):
        runs = rng.integers(5, 26, n)
        ph = np.resize(np.repeat(np.arange(len(runs)) % 2, runs), n)
        if rng.random() < 0.5:
            ph = 1 - ph
        u = rng.uniform(1, 20) * (1 + 0.01 * rng.standard_normal((n, 2)))
        u[(ph == 1) & (rng.random(n) < 0.3), 0] *= 3.0
        usages.append(np.clip(u, 0, None))
        phases.append(ph)
    return replay_input(usages, phases)


# a stand-in for a fitted PhaseModel: the head-room tables only need its number of phases
MODEL = SimpleNamespace(n_phases_=2)
LEARNING = ("adaptive-max", "adaptive-stat", "phase-headroom", "burst-headroom")


@pytest.fixture(scope="module")
def choice():
    return choose_policy(spiky_phase(60, 1), 10, MODEL, {"cpu": 0.97, "memory": 0.95},
                         candidates=LEARNING, holdout=0.3)


def test_choice_is_made_on_the_recent_executions(choice):
    assert choice.n_fit == 42 and choice.n_validation == 18
    assert choice.targets == (0.97, 0.95) and choice.resources == ("cpu", "memory")
    assert {(s.policy, s.resource) for s in choice.scores} == \
        {(p, r) for p in LEARNING for r in ("cpu", "memory")}
    for s in choice.scores:
        assert s.target == (0.97 if s.resource == "cpu" else 0.95)
        assert s.wins == (s.policy != BASELINE and s.vs_oracle < next(
            b.vs_oracle for b in choice.scores if b.policy == BASELINE
            and b.resource == s.resource) and s.short_windows <= next(
            b.short_windows for b in choice.scores if b.policy == BASELINE
            and b.resource == s.resource))


def test_winners_follow_the_rule_and_never_a_loser(choice):
    for j, res in enumerate(choice.resources):
        mine = [s for s in choice.scores if s.resource == res]
        winner = choice.winners[j]
        if winner != BASELINE:
            w = next(s for s in mine if s.policy == winner)
            assert w.wins
            assert w.vs_oracle == min(s.vs_oracle for s in mine if s.wins)
        else:
            assert not any(s.wins for s in mine)
    # on the spiky cpu the phase tells where the spikes are: the phase table is by far the
    # cheapest there, and wins
    cpu = {s.policy: s.vs_oracle for s in choice.scores if s.resource == "cpu"}
    assert cpu["phase-headroom"] < 0.9 * min(v for k, v in cpu.items() if k != "phase-headroom")
    assert choice.winners[0] == "phase-headroom"


def test_the_served_policy_is_the_winners_columns_refit_on_all(choice):
    pol = choice.policy
    assert isinstance(pol, PerResource) and pol.name == "auto"
    data = two_state(3, 9)
    rows = pol.allocate(data.usage[0], data.phases[0], 10, data.initial[0], 15.0)
    for j, w in enumerate(choice.winners):
        member = pol.policies[j]
        assert member.name == w
        if isinstance(member, HeadroomPolicy):
            assert member.target == choice.targets[j]
            assert member.support_.sum() > 0
        own = member.allocate(data.usage[0], data.phases[0] if member.needs_phases else None,
                              10, data.initial[0], 15.0)
        np.testing.assert_array_equal(rows[:, j], own[:, j])
    d = choice.as_dict()
    assert d["winners"] == list(choice.winners) and len(d["scores"]) == len(choice.scores)
    learned = {(w, t) for w, t in zip(choice.winners, choice.targets) if w.endswith("headroom")}
    assert len(choice.tables) == len(learned) and all(isinstance(t, HeadroomPolicy)
                                                      for t in choice.tables)


def test_too_few_executions_serve_the_baseline():
    c = choose_policy(two_state(1, 0), 10, MODEL, 0.97, candidates=LEARNING)
    assert c.winners == (BASELINE, BASELINE) and "too few" in c.reason and not c.scores


def test_without_phases_the_phase_candidates_are_skipped():
    data = two_state(20, 1)
    data.phases = [None] * len(data.usage)
    c = choose_policy(data, 10, None, 0.97)
    assert {s.policy for s in c.scores} == {"adaptive-max", "adaptive-stat", "burst-headroom",
                                            "vpa"}


@pytest.mark.parametrize("kw, message", [
    (dict(target=1.2), "target fulfilment"), (dict(target={"cpu": 0.9}), "memory"),
    (dict(target=(0.9,)), "1 targets for 2"), (dict(candidates=("magic",)), "magic"),
    (dict(holdout=0.0), "holdout"), (dict(window=0), "window")])
def test_bad_arguments_are_one_line_errors(kw, message):
    args = dict(window=10, model=MODEL, target=0.97, candidates=LEARNING)
    args.update(kw)
    with pytest.raises(ValueError, match=message) as err:
        choose_policy(two_state(4, 0), **args)
    assert "\n" not in str(err.value)


BASELINE = catalog.baseline()


def test_every_named_candidate_is_known():
    assert BASELINE == catalog.candidates()[0]
    assert set(catalog.candidates()) == {"adaptive-max", "adaptive-stat", "phase-headroom",
                               "burst-headroom", "phase", "phase-proactive", "vpa", "peak-risk"}
