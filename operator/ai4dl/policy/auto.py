"""``auto``: the policy a PhaseModel serves is the one that wins on its own workload.

:func:`choose_policy` is pure (no I/O, no clock): given the training executions (usage,
phases, starts, groups as :class:`ai4dl.evaluate.ReplayInput`, e.g. from
:func:`ai4dl.evaluate.prepare`), the fitted phase model, the window and a target fulfilment
(one, or one per resource), it

1. holds out the most recent executions (by start time; ``holdout`` of them),
2. fits every candidate that learns (the head-room tables) on the older ones,
3. replays every candidate over all training executions (so VPA's workload history is warm)
   and scores the held-out ones as the evaluator does: allocation ÷ oracle at the matched
   target and windows with a shortfall there,
4. picks per resource the cheapest candidate that *wins* against the reactive baseline
   (adaptive-max): cheaper at the target and no more windows short. A candidate that lost to
   the baseline is never chosen; when none wins, the baseline itself is served.
5. refits the winner(s) on all training executions and returns them as one policy
   (:class:`~ai4dl.policy.policies.PerResource` when cpu and memory differ).

The trainer calls this and stores :class:`AutoChoice` (``winners``, ``scores``) in the
PhaseModel's status; the operator serves ``AutoChoice.policy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

#: What auto considers, in the order ties are broken (the baseline first).
CANDIDATES = ("adaptive-max", "adaptive-stat", "phase-headroom", "burst-headroom", "phase",
              "phase-proactive", "vpa")
BASELINE = "adaptive-max"
LEARNED = ("phase-headroom", "burst-headroom")
DEFAULT_TARGET = 0.97
#: What the operator can serve window by window (ai4dl.policy.online.SERVABLE).
SERVABLE = ("adaptive-max", "adaptive-stat", "phase-headroom", "burst-headroom", "phase",
            "phase-proactive")


@dataclass
class CandidateScore:
    """One candidate on one resource, on the held-out executions at the resource's target."""
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

    @property
    def tables(self) -> list:
        """The fitted head-room tables among the winners (distinct; refit on all training
        executions): what the trainer stores in the model document (``policy_tables_``)."""
        from ai4dl.policy.headroom import HeadroomPolicy

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
                "winners": list(self.winners), "nFit": self.n_fit,
                "nValidation": self.n_validation, "reason": self.reason,
                "scores": [{"policy": s.policy, "resource": s.resource, "target": s.target,
                            "vsOracle": num(float(s.vs_oracle)),
                            "shortWindows": num(float(s.short_windows)),
                            "shortWindowShare": num(float(s.short_window_share)),
                            "wins": s.wins} for s in self.scores]}


def _targets(target, resources: Sequence[str]) -> tuple[float, ...]:
    if isinstance(target, (int, float)):
        out = (float(target),) * len(resources)
    elif isinstance(target, dict):
        missing = [r for r in resources if r not in target]
        if missing:
            raise ValueError(f"no target fulfilment for resource {missing[0]!r}")
        out = tuple(float(target[r]) for r in resources)
    else:
        out = tuple(float(t) for t in target)
        if len(out) != len(resources):
            raise ValueError(f"{len(out)} targets for {len(resources)} resources")
    for t in out:
        if not 0.0 < t < 1.0:
            raise ValueError(f"target fulfilment must be in (0, 1), got {t:g}")
    return out


def build_candidate(name: str, train, window: int, model=None, target: float = DEFAULT_TARGET,
                    phase_options: dict | None = None, only: Sequence[int] | None = None):
    """One candidate policy, fitted on the executions ``only`` of ``train`` when it learns
    (the head-room tables: at ``target``). Phase policies take their levels from ``model``
    (execution scope unless ``phase_options`` says otherwise)."""
    from ai4dl.evaluate import vpa_scale
    from ai4dl.policy import policies as P
    from ai4dl.policy.headroom import HeadroomPolicy

    resources = tuple(train.resources)
    idx = list(range(len(train.usage))) if only is None else list(only)
    if name == "adaptive-max":
        return P.AdaptiveMax()
    if name == "adaptive-stat":
        return P.AdaptiveStat()
    if name in LEARNED:
        use_phase = name == "phase-headroom"
        if use_phase and (model is None or any(train.phases[i] is None for i in idx)):
            raise ValueError(f"{name} needs a phase model and the phase of every sample")
        return HeadroomPolicy(target=target, use_phase=use_phase).fit(
            [train.usage[i] for i in idx], [train.phases[i] for i in idx] if use_phase else None,
            window, model.n_phases_ if use_phase else None, resources)
    if name in ("phase", "phase-proactive"):
        if model is None:
            raise ValueError(f"{name} needs a phase model")
        opts = {"scope": "execution", **(phase_options or {})}
        return P.make_phase_policy(model, resources, name, **opts)
    if name == "vpa":
        pooled = np.concatenate([train.usage[i] for i in idx]) if idx else \
            np.ones((1, len(resources)))
        scales = [vpa_scale(r, u, pooled[:, j]) for j, (r, u) in
                  enumerate(zip(resources, train.units))]
        return P.VpaPolicy(resources=resources, scale=tuple(s for s, _ in scales),
                           native_units=all(n for _, n in scales))
    raise ValueError(f"unknown candidate policy {name!r} (known: {', '.join(CANDIDATES)})")


def pick_winner(scores: dict, candidates: Sequence[str], j: int, target: float,
                baseline: str = BASELINE, servable: Sequence[str] | None = None) -> str:
    """The rule: of the candidates that win against ``baseline`` on resource ``j`` at
    ``target`` (cheaper at the matched margin, no more windows short), the cheapest; the
    baseline when none does (ties go to the earlier candidate)."""
    from ai4dl.evaluate import wins_over

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


def choose_policy(train, window: int, model=None, target=DEFAULT_TARGET,
                  candidates: Sequence[str] = CANDIDATES, holdout: float = 0.3,
                  phase_options: dict | None = None,
                  servable: Sequence[str] | None = SERVABLE) -> AutoChoice:
    """Score the candidates on the most recent training executions and choose per resource
    (see the module docstring). ``train`` is a :class:`ai4dl.evaluate.ReplayInput` of the
    training executions (with phases when a phase candidate is considered); ``target`` a
    fulfilment, or one per resource (sequence or {resource: target}). Only ``servable``
    policies can win (what the operator can serve window by window: not VPA, which is scored
    for the record); None: any."""
    from ai4dl.evaluate import replay, score
    from ai4dl.policy.policies import Oracle, PerResource

    if window < 1:
        raise ValueError(f"window must be at least 1 sample, got {window}")
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout:g}")
    resources = tuple(train.resources)
    targets = _targets(target, resources)
    candidates = list(dict.fromkeys(candidates))
    unknown = [c for c in candidates if c not in CANDIDATES]
    if unknown:
        raise ValueError(f"unknown candidate policy {unknown[0]!r} (known: "
                         f"{', '.join(CANDIDATES)})")
    if BASELINE not in candidates:
        candidates.insert(0, BASELINE)
    if model is None or any(p is None for p in train.phases):
        candidates = [c for c in candidates if c not in ("phase-headroom", "phase",
                                                         "phase-proactive")]
    starts = train.starts or [0.0] * len(train.usage)
    fit_idx, val_idx = recent_split(starts, holdout)
    # executions that end inside their cold-start window are never scored
    val_idx = [i for i in val_idx if len(train.usage[i]) > window]

    scores: list[CandidateScore] = []
    winners: list[str] = []
    if not fit_idx or not val_idx:
        reason = (f"too few training executions to hold any out ({len(train.usage)}): "
                  f"serving the baseline {BASELINE}")
        winners = [BASELINE] * len(resources)
    else:
        # every execution is replayed (VPA's workload history stays warm) and the held-out
        # ones scored; only the learned candidates depend on the target
        fixed = {"oracle": replay(train, Oracle(), window)}
        for name in candidates:
            if name not in LEARNED:
                pol = build_candidate(name, train, window, model, targets[0], phase_options,
                                      fit_idx)
                fixed[name] = replay(train, pol, window)
        by_target: dict[float, dict] = {}
        for t in sorted(set(targets)):
            replays = dict(fixed)
            for name in candidates:
                if name in LEARNED:
                    pol = build_candidate(name, train, window, model, t, phase_options, fit_idx)
                    replays[name] = replay(train, pol, window)
            by_target[t] = score(train, replays, window, targets=(t,), only=val_idx)
        from ai4dl.evaluate import wins_over

        for j, (res, t) in enumerate(zip(resources, targets)):
            sc = by_target[t]
            for name in candidates:
                r = sc[name][j]
                win = name != BASELINE and bool(wins_over(sc, name, j, t, BASELINE))
                scores.append(CandidateScore(name, res, t, float(r.vs_oracle_at[t]),
                                             float(r.short_windows_at[t]),
                                             float(r.short_window_share_at[t]), win))
            winners.append(pick_winner(sc, candidates, j, t, servable=servable))
        reason = "; ".join(
            f"{res}: {w}" + ("" if w != BASELINE else " (no servable candidate was cheaper "
                             "with no more windows short)") for res, w in zip(resources, winners))
        reason = (f"scored on the {len(val_idx)} most recent of {len(train.usage)} training "
                  f"executions at {'/'.join(f'{t:g}' for t in targets)}: {reason}")

    # the winners, refit on every training execution
    fitted: dict = {}
    chosen = []
    for res, w, t in zip(resources, winners, targets):
        key = (w, t if w in LEARNED else None)
        if key not in fitted:
            fitted[key] = build_candidate(w, train, window, model, t, phase_options)
        chosen.append(fitted[key])
    policy = PerResource(tuple(chosen), name="auto")
    return AutoChoice(resources, targets, tuple(winners), scores, len(fit_idx), len(val_idx),
                      reason, policy)
