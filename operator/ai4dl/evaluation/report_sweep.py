"""The k/margin trade-off sweep behind the trade-off figure: the tunable policies re-replayed
on a run's prepared data over k x margin (and the head-room table over its fit target).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationResult, build_policies
from ai4dl.judge import ORACLE, replay, score
from ai4dl.policy.auto import build_candidate
from ai4dl.policy.headroom import PHASE_HEADROOM

SWEEP_K = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
SWEEP_MARGIN = (0.0, 0.05, 0.1)
SWEEP_FAMILIES = ("phase", "phase-proactive", "adaptive-stat")
#: The head-room table is swept over the fulfilment it is fitted for (no k, no margin).
SWEEP_TARGETS = (0.9, 0.93, 0.95, 0.97, 0.99)


# ----------------------------------------------------------------------------- the sweep
def run_sweep(result: EvaluationResult, ks: Sequence[float] = SWEEP_K,
              margins: Sequence[float] = SWEEP_MARGIN,
              on_stage: Callable[[str], None] | None = None) -> list[dict]:
    """Re-replay the tunable policies over k × margin on the same prepared data with the same
    fitted model (no refit): the phase policies (if evaluated) for every k and margin,
    adaptive-stat (if evaluated) for every k, and the phase head-room table (if evaluated)
    refitted on the train side for each fulfilment in SWEEP_TARGETS. Each point: {"policy",
    "k", "margin", "scores" (one ResourceScore per resource, against the run's oracle)}, and
    "target" for the head-room points (k None). When the phase statistic is not mean+kσ, k
    does not move the phase policies, which are then swept over margin only."""
    say = on_stage or (lambda msg: None)
    cfg, data = result.config, result.data
    oracle = result.replays.get(ORACLE)
    if oracle is None:
        raise ValueError("the sweep needs the run's oracle replay")
    families = [p for p in SWEEP_FAMILIES if p in cfg.policies]
    if result.model is None:
        families = [p for p in families if p == "adaptive-stat"]
    grid: list[tuple[str, float, float]] = []
    for fam in families:
        if fam == "adaptive-stat":
            grid += [(fam, float(k), 0.0) for k in ks]
        else:
            fam_ks = ks if cfg.statistic == "mean+kstd" else (cfg.k,)
            grid += [(fam, float(k), float(m)) for k in fam_ks for m in margins]
    fit_targets = (tuple(SWEEP_TARGETS) if PHASE_HEADROOM in cfg.policies
                   and result.train_data is not None and result.model is not None else ())
    points = []
    names = families + ([f"{PHASE_HEADROOM} (fit target)"] if fit_targets else [])
    say(f"sweep: {len(grid) + len(fit_targets)} replays ({', '.join(names) or 'nothing to sweep'})")
    for fam, k, m in grid:
        c = dataclasses.replace(cfg, policies=(fam,), k=k, margin=m)
        pol = build_policies(c, result.model, None)[0]
        rep = replay(data, pol, cfg.window, cfg.safety)
        sc = score(data, {fam: rep, ORACLE: oracle}, cfg.window, cfg.include_cold_start,
                   cfg.targets)
        points.append({"policy": fam, "k": k, "margin": m, "scores": sc[fam]})
    for t in fit_targets:
        pol = build_candidate(PHASE_HEADROOM, result.train_data, cfg.window, result.model, t)
        rep = replay(data, pol, cfg.window, cfg.safety)
        sc = score(data, {PHASE_HEADROOM: rep, ORACLE: oracle}, cfg.window,
                   cfg.include_cold_start, cfg.targets)
        points.append({"policy": PHASE_HEADROOM, "k": None, "margin": 0.0, "target": t,
                       "scores": sc[PHASE_HEADROOM]})
    return points


def pareto_front(fulfilment: Sequence[float], cost: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats (fulfilment at least as high and cost at
    most as low, one of them strictly), ordered by cost."""
    f = np.asarray(fulfilment, float)
    c = np.asarray(cost, float)
    ok = np.isfinite(f) & np.isfinite(c)
    order = sorted(np.flatnonzero(ok), key=lambda i: (c[i], -f[i]))
    front, best = [], -np.inf
    for i in order:
        if f[i] > best:
            front.append(int(i))
            best = f[i]
    return front
