"""``auto``: the policy a PhaseModel serves is the one that wins on its own workload.

:func:`choose_policy` is pure (no I/O, no clock): given the training executions (usage,
phases, starts, groups as :class:`ai4dl.judge.ReplayInput`, e.g. from
:func:`ai4dl.evaluation.evaluate.prepare`), the fitted phase model, the window and an objective per
resource (:mod:`ai4dl.rules.objectives`: cpu a fulfilment of samples, memory a share of
windows at risk), it

1. holds out the most recent executions (by start time; ``holdout`` of them),
2. fits every candidate that learns (the head-room tables; for a resource judged by risk also
   ``peak-risk``) on the older ones,
3. replays every candidate over all training executions (so VPA's workload history is warm)
   and scores the held-out ones as the evaluator does. A fulfilment: allocation ÷ oracle at
   the matched target and windows with a shortfall there. A share of windows at risk: each
   candidate calibrated on the older executions (the factor that leaves that share of their
   windows at risk), then its cost at the matched share and the risk it realised as served,
4. picks per resource the cheapest candidate that *wins* against the reactive baseline
   (adaptive-max): cheaper at the target and no more windows short (judged by risk: cheaper
   at the matched share; among those, ``peak-risk`` unless another is cheaper beyond
   :func:`challenge_z` standard errors, :func:`pick_at_risk`). A candidate that lost to the
   baseline is never chosen; when none wins, the baseline itself is served. Under a safety
   layer every share is matched in the served order, as the judge does.
5. refits the winner(s) on all training executions (judged by risk: calibrated on all of
   them) and returns them as one policy (:class:`~ai4dl.policy.policies.PerResource` when cpu
   and memory differ).

The trainer calls this and stores :class:`AutoChoice` (``winners``, ``scores``) in the
PhaseModel's status; the operator serves ``AutoChoice.policy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Sequence

import numpy as np

from ai4dl.judge import (ORACLE, Replay, matched_risk_multiplier, replay, score,
                         served_risk_match, subset, through_safety, wins_at_risk, wins_over,
                         working_set_inputs)
from ai4dl.policy import catalog
from ai4dl.policy.headroom import HeadroomPolicy
from ai4dl.rules.objectives import Objective, resolve
from ai4dl.policy.peak import PeakRiskPolicy
from ai4dl.policy.policies import Calibrated, Oracle, PerResource
from ai4dl.policy.registry import FitInputs, lookup

#: ``servable``'s default: what the catalogue serves (ai4dl.policy.catalog.servable).
DECLARED = "declared"
DEFAULT_TARGET = 0.97

@dataclass
class CandidateScore:
    """One candidate on one resource, on the held-out executions at the resource's objective:
    for a fulfilment, at the matched margin; for a share of windows at risk, calibrated on the
    executions it was fitted on (``short_windows``: the windows it left at risk, as served),
    its cost at the matched share."""
    policy: str
    resource: str
    target: float
    vs_oracle: float            # allocation ÷ oracle at the matched target (inf: unreachable)
    short_windows: float        # windows with a shortfall at that margin (count; nan: n/a)
    short_window_share: float   # ... ÷ scored windows
    wins: bool                  # cheaper than the baseline and no more windows short


@dataclass
class AutoChoice:
    """What :func:`choose_policy` decided, and why."""
    resources: tuple[str, ...]
    targets: tuple[float, ...]          # per resource
    winners: tuple[str, ...]            # per resource
    scores: list[CandidateScore]
    n_fit: int                          # executions the candidates were fitted on
    n_validation: int                   # held-out (most recent) executions scored
    reason: str                         # one line
    policy: object = field(default=None, repr=False)   # the served policy (refit on all)
    objectives: tuple = ()              # per resource: the Objective it was chosen under
    #: per resource, what the winner realised on the held-out recent executions, as served
    #: (calibrated): {"fulfilment": share of samples, "riskWindows": share of windows at risk}
    achieved: tuple = ()
    calibration: tuple = ()             # per resource: the served factor (1: none)

    @property
    def risk_tables(self) -> list:
        """The fitted peak-risk tables among the winners (distinct; refit on all training
        executions, seen through a calibration): what the trainer stores in the model document
        (``risk_tables_``)."""
        out: list = []
        for p in getattr(self.policy, "policies", None) or (self.policy,):
            p = getattr(p, "policy", p)          # Calibrated wraps; peak-risk never is
            if isinstance(p, PeakRiskPolicy) and all(p is not q for q in out):
                out.append(p)
        return out

    @property
    def tables(self) -> list:
        """The fitted head-room tables among the winners (distinct; refit on all training
        executions): what the trainer stores in the model document (``policy_tables_``)."""
        out: list = []
        for p in getattr(self.policy, "policies", ()):
            if isinstance(p, HeadroomPolicy) and all(p is not q for q in out):
                out.append(p)
        return out

    def as_dict(self) -> dict:
        """JSON-safe summary (for the PhaseModel status)."""
        def num(x):
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else (
                "unreachable" if isinstance(x, float) and math.isinf(x) else x)
        return {"resources": list(self.resources), "targets": list(self.targets),
                "objectives": [o.as_dict() for o in self.objectives],
                "achieved": [{"resource": r, **{k: num(float(v)) for k, v in a.items()}}
                             for r, a in zip(self.resources, self.achieved)],
                "calibration": [float(c) for c in self.calibration],
                "winners": list(self.winners), "nFit": self.n_fit,
                "nValidation": self.n_validation, "reason": self.reason,
                "scores": [{"policy": s.policy, "resource": s.resource, "target": s.target,
                            "vsOracle": num(float(s.vs_oracle)),
                            "shortWindows": num(float(s.short_windows)),
                            "shortWindowShare": num(float(s.short_window_share)),
                            "wins": s.wins} for s in self.scores]}


def build_candidate(name: str, train, window: int, model=None, target: float = DEFAULT_TARGET,
                    phase_options: dict | None = None, only: Sequence[int] | None = None):
    """One candidate policy, fitted on the executions ``only`` of ``train`` when it learns
    (the head-room tables: at ``target``; peak-risk: ``target`` is the share of windows
    covered). Phase policies take their levels from ``model`` (execution scope unless
    ``phase_options`` says otherwise)."""
    known = catalog.candidates()
    if name not in known:
        raise ValueError(f"unknown candidate policy {name!r} (known: {', '.join(known)})")
    return catalog.build(name, FitInputs(
        train, window, tuple(train.resources), model, target,
        {"scope": "execution", **(phase_options or {})}, only))


def _fitted_for(name: str) -> str | None:
    """What ``auto`` fits candidate ``name`` for (ai4dl.policy.registry.Declared.fitted_for;
    None for a name not declared: a caller's own replay)."""
    e = lookup(name)
    return None if e is None else e.fitted_for


def pick_winner(scores: dict, candidates: Sequence[str], j: int, target: float,
                baseline: str | None = None, servable: Sequence[str] | None = None) -> str:
    """The rule: of the candidates that win against ``baseline`` on resource ``j`` at
    ``target`` (cheaper at the matched margin, no more windows short), the cheapest; the
    baseline (default: the catalogue's) when none does (ties go to the earlier candidate)."""
    baseline = catalog.baseline() if baseline is None else baseline
    best, best_cost = baseline, None
    for name in candidates:
        if name == baseline or not wins_over(scores, name, j, target, baseline):
            continue
        if servable is not None and name not in servable:
            continue                 # scored for the record, never served (VPA)
        cost = scores[name][j].vs_oracle_at[target]
        if best_cost is None or cost < best_cost:
            best, best_cost = name, cost
    return best


def recent_split(starts: Sequence[float], holdout: float) -> tuple[list[int], list[int]]:
    """Indices of the older executions and of the most recent ``holdout`` share (by start
    time; at least one on each side when there are two or more)."""
    n = len(starts)
    order = sorted(range(n), key=lambda i: (starts[i], i))
    n_val = min(max(int(round(holdout * n)), 1), n - 1) if n >= 2 else 0
    return sorted(order[: n - n_val]), sorted(order[n - n_val:])


def calibration_factor(data, rep, window: int, j: int, share: float,
                       only: Sequence[int]) -> float:
    """The factor that leaves ``share`` of the windows of the executions ``only`` at risk on
    resource ``j`` when it multiplies ``rep``'s rows after the cold start: the (1 − share)
    order statistic of window max ÷ allocation over their scored windows (the first window of
    each is the cold start, not a policy's). 1 when there is no such window."""
    wm, al, _ = _scored_windows(data, rep, window, j, only)
    if not wm:
        return 1.0
    m = matched_risk_multiplier(np.concatenate(wm), np.concatenate(al), share)
    return float(m) if np.isfinite(m) and m > 0 else 1.0


def served_calibration(data, raw, window: int, j: int, share: float, only: Sequence[int],
                       safety):
    """:func:`calibration_factor` for a policy served through ``safety``: the smallest factor
    on the raw allocations ``raw``'s resource ``j`` that, served through the layer, leaves at
    most ``share`` of the scored windows of ``only`` at risk — the order the operator applies
    them in (the policy's factor, then the layer), found by the judge's
    :func:`~ai4dl.judge.served_risk_match`. Returns (factor, the served Replay of every
    execution at it, ``raw`` with resource ``j`` scaled by it)."""
    factor = float(served_risk_match(data, raw.allocations, window, j, share, safety,
                                     only).factors[0])
    own = _scaled(raw, factor, j)
    return factor, Replay(raw.policy, through_safety(data, own.allocations, window, safety)), own


def _scored_windows(data, rep, window: int, j: int, only: Sequence[int]):
    """Per execution of ``only`` longer than its cold-start window: the scored windows' maxima
    of resource ``j``, ``rep``'s allocations for them, and their sizes in samples."""
    wm, al, size = [], [], []
    for i in only:
        u = data.usage[i][:, j]
        if len(u) <= window:
            continue
        starts = np.arange(0, len(u), window)
        mx = np.maximum.reduceat(u, starts)[1:]
        wm.append(mx)
        al.append(rep.allocations[i][1: 1 + len(mx), j])
        size.append(np.diff(np.append(starts, len(u)))[1:])
    return wm, al, size


def _scaled(rep, factor: float, j: int | None = None):
    """``rep`` with its rows after the cold start (resource ``j``'s only, if given) multiplied
    by ``factor``."""
    out = []
    for a in rep.allocations:
        a = np.array(a, np.float64)
        if j is None:
            a[1:] *= factor
        else:
            a[1:, j] *= factor
        out.append(a)
    return Replay(rep.policy, out)


#: Bootstrap resamples (of the held-out executions) behind :func:`pick_at_risk`'s standard
#: errors, and their seed.
BOOTSTRAP = 200
BOOTSTRAP_SEED = 0


#: Under a safety layer, :func:`bootstrap_risk_costs` matches each resample on a grid of
#: factors on the calibrated rows: 2^(k / GRID_PER_OCTAVE) for |k| <= GRID_OCTAVES x
#: GRID_PER_OCTAVE (steps of 1.1 %, over a quarter to four times the calibration).
GRID_PER_OCTAVE = 64
GRID_OCTAVES = 2


def bootstrap_risk_costs(data, replays: dict, window: int, j: int, share: float,
                         only: Sequence[int], names: Sequence[str], n: int = BOOTSTRAP,
                         seed: int = BOOTSTRAP_SEED, safety=None,
                         own: dict | None = None) -> dict:
    """name -> (n,) allocation ÷ oracle at the matched ``share`` of windows at risk on
    resource ``j``, over ``n`` resamples (with replacement, seeded) of the executions ``only``:
    the executions are the clusters (a job that peaks peaks in many of its windows), so the
    spread of these costs is the cluster-robust noise of a comparison on these executions.

    Matched as the judge matches (:func:`ai4dl.judge.score`): with a ``safety`` layer and the
    policies' ``own`` rows, in the served order — each resample's factor is the first of a
    grid of factors on the own rows (:data:`GRID_PER_OCTAVE`) whose served rows leave at most
    the share at risk, the layer run once per grid factor for all executions (a resample
    beyond the grid costs inf). Without them, the closed form on ``replays``."""
    execs = [i for i in only if len(data.usage[i]) > window]
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, len(execs), len(execs)) for _ in range(n)] if execs else []
    out = {}
    if safety is not None and own is not None:
        sub = subset(data, execs)
        wm, _, size = _scored_windows(sub, own[names[0]], window, j, range(len(execs)))
        windows = np.array([len(m) for m in wm])
        orc = np.array([float((m * z).sum()) for m, z in zip(wm, size)])
        grid = 2.0 ** (np.arange(-GRID_OCTAVES * GRID_PER_OCTAVE,
                                 GRID_OCTAVES * GRID_PER_OCTAVE + 1) / GRID_PER_OCTAVE)
        for name in names:
            rows = [np.array(own[name].allocations[i], np.float64) for i in execs]
            counts = np.empty((len(grid), len(execs)))
            costs = np.empty((len(grid), len(execs)))
            inputs = working_set_inputs(sub, [len(r) for r in rows], window, safety)
            for k, f in enumerate(grid):
                scaled = []
                for r in rows:
                    r = r.copy()
                    r[1:, j] *= f
                    scaled.append(r)
                final = through_safety(sub, scaled, window, safety, inputs)
                for e, (fr, m, z) in enumerate(zip(final, wm, size)):
                    al = fr[1: 1 + len(m), j]
                    counts[k, e] = np.count_nonzero(m > al)
                    costs[k, e] = float((al * z).sum())
            vals = np.empty(len(draws))
            for b, d in enumerate(draws):
                allowed = np.floor(share * windows[d].sum() + 1e-9)
                ok = np.flatnonzero(counts[:, d].sum(1) <= allowed)
                o = orc[d].sum()
                vals[b] = costs[ok[0], d].sum() / o if len(ok) and o > 0 else np.inf
            out[name] = vals
        return out

    def parts(rep):
        wm, al, size = _scored_windows(data, rep, window, j, execs)
        return (wm, al, np.array([float((a * z).sum()) for a, z in zip(al, size)]),
                np.array([float((m * z).sum()) for m, z in zip(wm, size)]))

    for name in names:
        wm, al, cost, orc = parts(replays[name])
        vals = np.empty(len(draws))
        for b, d in enumerate(draws):
            m = matched_risk_multiplier(np.concatenate([wm[k] for k in d]),
                                        np.concatenate([al[k] for k in d]), share)
            o = orc[d].sum()
            vals[b] = m * cost[d].sum() / o if o > 0 and np.isfinite(m) else np.inf
        out[name] = vals
    return out


def challenge_z(challengers: int) -> float:
    """How many standard errors cheaper a challenger of the fitted candidate must be, with
    ``challengers`` of them: one standard error alone (a 16 % chance that a candidate no
    cheaper passes), and with several the same 16 % for all of them together (Bonferroni:
    the one-sided normal quantile at 16 % ÷ challengers). Without it, the more candidates
    auto considers, the likelier one of them passes on the noise of a few recent jobs."""
    one = 1.0 - NormalDist().cdf(1.0)
    return NormalDist().inv_cdf(1.0 - one / max(challengers, 1))


def pick_at_risk(data, replays: dict, window: int, j: int, share: float,
                 only: Sequence[int], won: Sequence[str], costs: dict, safety=None,
                 own: dict | None = None) -> str:
    """Among the candidates that won against the baseline at the matched ``share`` (``won``,
    their costs ``costs``), the one served. The candidate fitted to the share itself
    (declared ``fitted_for="risk"``), when it won, is kept unless another is cheaper beyond
    :func:`challenge_z` cluster-robust standard errors (one with a single challenger;
    :func:`bootstrap_risk_costs`, matched in the served order under ``safety`` with the
    ``own`` rows): the others are fitted to a share of samples and only rescaled, and a few
    windows decide a matched share on the most recent executions.
    Without it, the cheapest. None won: the baseline."""
    if not won:
        return catalog.baseline()
    prior = next((n for n in won if _fitted_for(n) == "risk"), None)
    cheapest = min(won, key=lambda n: costs[n])
    if prior is None or cheapest == prior:
        return cheapest
    boot = bootstrap_risk_costs(data, replays, window, j, share, only, won, safety=safety,
                                own=own)
    z = challenge_z(len(won) - 1)
    better = []
    for name in won:
        if name == prior:
            continue
        with np.errstate(invalid="ignore"):      # inf - inf: a resample neither matched
            diff = boot[name] - boot[prior]
        diff = diff[np.isfinite(diff)]
        if len(diff) and costs[name] < costs[prior] and \
                costs[name] - costs[prior] + z * float(np.std(diff)) < 0:
            better.append(name)
    return min(better, key=lambda n: costs[n]) if better else prior


def choose_policy(train, window: int, model=None, target=DEFAULT_TARGET,
                  candidates: Sequence[str] | None = None, holdout: float = 0.3,
                  phase_options: dict | None = None,
                  servable: Sequence[str] | str | None = DECLARED, safety=None) -> AutoChoice:
    """Score the candidates on the most recent training executions and choose per resource
    (see the module docstring). ``train`` is a :class:`ai4dl.judge.ReplayInput` of the
    training executions (with phases when a phase candidate is considered); ``target`` what
    each resource must achieve: a fulfilment (float), one per resource (sequence or
    {resource: target}), :class:`~ai4dl.rules.objectives.Objective` s, or None (the
    defaults: cpu 97 % of samples, memory at most 1 % of windows at risk). Only ``servable``
    policies can win (what the operator can serve window by window: not VPA, which is scored
    for the record; the default: the catalogue's); None: any. ``candidates``: the catalogue's
    by default.

    A resource judged by risk is chosen at a matched share of windows at risk, each candidate
    first calibrated (:func:`calibration_factor`) on the executions it was fitted on, so that
    what it realises on the held-out recent ones (``achieved``) is what a pod would get; the
    served winner is calibrated again on every training execution (``calibration``).

    ``safety`` (a :class:`~ai4dl.rules.safety.SafetyConfig`): the safety layer the choice
    will be served under; every candidate is replayed through it, and for a share of windows
    at risk every one (peak-risk too, whose own calibration knows no safety layer) is
    calibrated on what it realises through it. The layer's holds (a cool-down, memory held
    while the working set rises) put fewer windows at risk than the bare policy: calibrated
    without them, the choice would be served dearer and safer than its objective."""
    if window < 1:
        raise ValueError(f"window must be at least 1 sample, got {window}")
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout:g}")
    resources = tuple(train.resources)
    objectives = resolve(target, resources)
    baseline = catalog.baseline()
    candidates = _candidate_list(catalog.candidates() if candidates is None else candidates,
                                 model, train)
    if servable == DECLARED:
        servable = catalog.servable()
    starts = train.starts or [0.0] * len(train.usage)
    fit_idx, val_idx = recent_split(starts, holdout)
    # executions that end inside their cold-start window are never scored
    val_idx = [i for i in val_idx if len(train.usage[i]) > window]

    scores: list[CandidateScore] = []
    winners: list[str] = []
    achieved: list[dict] = []
    if not fit_idx or not val_idx:
        reason = (f"too few training executions to hold any out ({len(train.usage)}): "
                  f"serving the baseline {baseline}")
        winners = [baseline] * len(resources)
        achieved = [{} for _ in resources]
    else:
        by_objective = _candidate_replays(train, window, model, candidates, objectives,
                                          phase_options, fit_idx)
        for j, (res, o) in enumerate(zip(resources, objectives)):
            replays = by_objective[(o.kind, o.value)]
            names = [c for c in candidates if c in replays]
            choose = _choose_at_risk if o.is_risk else _choose_at_fulfilment
            best, found, realised = choose(train, replays, window, j, res, o, names,
                                           fit_idx, val_idx, servable, safety)
            scores += found
            winners.append(best)
            achieved.append(realised)
        reason = _choice_reason(resources, winners, objectives, len(val_idx), len(train.usage))
    policy, calibration = _refit_winners(train, window, model, resources, winners, objectives,
                                         phase_options, safety)
    return AutoChoice(resources, tuple(float(o.value) for o in objectives), tuple(winners),
                      scores, len(fit_idx), len(val_idx), reason, policy, objectives,
                      tuple(achieved), tuple(calibration))


def _candidate_list(candidates: Sequence[str], model, train) -> list[str]:
    """The candidates asked for, checked, with the baseline; the phase candidates left out
    without a model or a phase for every sample."""
    candidates = list(dict.fromkeys(candidates))
    known = catalog.candidates()
    unknown = [c for c in candidates if c not in known]
    if unknown:
        raise ValueError(f"unknown candidate policy {unknown[0]!r} (known: "
                         f"{', '.join(known)})")
    if catalog.baseline() not in candidates:
        candidates.insert(0, catalog.baseline())
    if model is None or any(p is None for p in train.phases):
        # the phase candidates need the phase of every sample (peak-risk goes phase-blind)
        candidates = [c for c in candidates
                      if not catalog.entry(c).needs_phases or catalog.entry(c).phase_optional]
    return candidates


def _candidate_replays(train, window: int, model, candidates: list[str], objectives,
                       phase_options: dict | None, fit_idx: list[int]) -> dict:
    """(objective kind, value) -> candidate -> its replay over every training execution (VPA's
    workload history stays warm), fitted on ``fit_idx``; only the learned candidates depend on
    the objective."""
    fixed = {ORACLE: replay(train, Oracle(), window)}
    for name in candidates:
        if _fitted_for(name) is None:
            pol = build_candidate(name, train, window, model, objectives[0].quantile,
                                  phase_options, fit_idx)
            fixed[name] = replay(train, pol, window)
    by_objective: dict = {}
    for o in dict.fromkeys((o.kind, o.value) for o in objectives):
        kind, value = o
        obj = Objective("x", kind, value)
        replays = dict(fixed)
        for name in candidates:
            if _fitted_for(name) == "objective" or (_fitted_for(name) == "risk" and
                                                     kind == "risk"):
                pol = build_candidate(name, train, window, model, obj.quantile,
                                      phase_options, fit_idx)
                replays[name] = replay(train, pol, window)
        by_objective[o] = replays
    return by_objective


def _choose_at_risk(train, replays: dict, window: int, j: int, res: str, o: Objective,
                    names: list[str], fit_idx, val_idx, servable, safety):
    """Resource ``j`` judged by a share of windows at risk: each candidate calibrated on the
    executions it was fitted on (peak-risk calibrates itself out of fold, but not through a
    safety layer), matched in the served order under the layer as the evaluator judges.
    Returns (winner, its CandidateScores, what the winner realised)."""
    if safety is None:
        cal = {n: (replays[n] if n == ORACLE or _fitted_for(n) == "risk" else
                   _scaled(replays[n], calibration_factor(
                       train, replays[n], window, j, o.value, fit_idx)))
               for n in (*names, ORACLE)}
        own = None
    else:
        served = {n: served_calibration(train, replays[n], window, j, o.value,
                                        fit_idx, safety) for n in names}
        cal = {n: v[1] for n, v in served.items()}
        own = {n: v[2] for n, v in served.items()}
        cal[ORACLE] = replays[ORACLE]
    sc = score(train, cal, window, targets=(), only=val_idx, risks=(o.value,),
               safety=safety, own=own)
    won, found, baseline = [], [], catalog.baseline()
    for name in names:
        r = sc[name][j]
        win = name != baseline and bool(wins_at_risk(sc, name, j, o.value, baseline))
        found.append(CandidateScore(name, res, o.value, float(r.vs_oracle_risk_at[o.value]),
                                    float(r.oom_windows), float(r.risk_share), win))
        if win and (servable is None or name in servable):
            won.append(name)
    best = pick_at_risk(train, cal, window, j, o.value, val_idx, won,
                        {n: sc[n][j].vs_oracle_risk_at[o.value] for n in won}, safety, own)
    w = sc[best][j]
    return best, found, {"fulfilment": float(w.fulfilment), "riskWindows": float(w.risk_share)}


def _choose_at_fulfilment(train, replays: dict, window: int, j: int, res: str, o: Objective,
                          names: list[str], fit_idx, val_idx, servable, safety):
    """Resource ``j`` judged by a fulfilment of samples: matched margins, judged as served
    (through the layer). Returns (winner, its CandidateScores, what the winner realised)."""
    t = o.value
    if safety is not None:
        replays = {n: (r if n == ORACLE else Replay(
            r.policy, through_safety(train, r.allocations, window, safety)))
            for n, r in replays.items()}
    sc = score(train, replays, window, targets=(t,), only=val_idx, risks=())
    baseline = catalog.baseline()
    eligible, found = [baseline], []
    for name in names:
        r = sc[name][j]
        win = name != baseline and bool(wins_over(sc, name, j, t, baseline))
        if win and o.max_short_windows is not None:
            win = bool(r.short_window_share_at[t] <= o.max_short_windows)
        found.append(CandidateScore(name, res, t, float(r.vs_oracle_at[t]),
                                    float(r.short_windows_at[t]),
                                    float(r.short_window_share_at[t]), win))
        if win:
            eligible.append(name)
    best = pick_winner(sc, eligible, j, t, servable=servable)
    w = sc[best][j]
    return best, found, {"fulfilment": float(w.fulfilment), "riskWindows": float(w.risk_share)}


def _choice_reason(resources, winners, objectives, n_val: int, n_train: int) -> str:
    """The choice in one line: where it was scored, and per resource its winner."""
    baseline = catalog.baseline()
    reason = "; ".join(
        f"{res}: {w}" + ("" if w != baseline else " (no servable candidate was cheaper "
                         + ("at matched risk)" if o.is_risk else
                            "with no more windows short)"))
        for res, w, o in zip(resources, winners, objectives))
    return (f"scored on the {n_val} most recent of {n_train} training "
            f"executions ({'; '.join(f'{o.resource} {o.label()}' for o in objectives)})"
            f": {reason}")


def _refit_winners(train, window: int, model, resources, winners, objectives,
                   phase_options: dict | None, safety):
    """The winners refit on every training execution; a resource judged by risk gets its
    calibration factor from every training execution. Returns (the served policy, per
    resource its factor)."""
    fitted: dict = {}
    chosen = []
    calibration = []
    every = list(range(len(train.usage)))
    for j, (res, w, o) in enumerate(zip(resources, winners, objectives)):
        key = (w, o.quantile if _fitted_for(w) is not None else None)
        if key not in fitted:
            fitted[key] = build_candidate(w, train, window, model, o.quantile, phase_options)
        pol, factor = fitted[key], 1.0
        calibrated = o.is_risk and (safety is not None or _fitted_for(w) != "risk")
        if calibrated and safety is not None:
            factor = served_calibration(train, replay(train, pol, window), window, j, o.value,
                                        every, safety)[0]
        elif calibrated:
            factor = calibration_factor(train, replay(train, pol, window), window, j, o.value,
                                        every)
        if calibrated:
            factors = np.ones(len(resources))
            factors[j] = factor
            pol = Calibrated(pol, tuple(float(f) for f in factors), name=w)
        calibration.append(factor)
        chosen.append(pol)
    return PerResource(tuple(chosen), name="auto"), calibration
