"""The evaluator's result as a strict JSON document (``ai4dl evaluate --json``): no NaN or
Infinity, ``null`` or a string instead, so ``json.dumps(..., allow_nan=False)`` works.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationResult
from ai4dl.judge import ORACLE, ResourceScore, resource_unit_scale, wins_at_risk, wins_over
from ai4dl.evaluation.report import (UNREACHABLE, RunContext, policy_order, primary_target,
                                     savings_matrix, shortfall_unit, target_key)
from ai4dl.policy import catalog


# ----------------------------------------------------------------------------- JSON
def _num(x, inf: str | None = None):
    """A JSON-safe number: NaN -> None; ±inf -> ``inf`` string (or "inf"/"-inf")."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return inf if inf is not None else ("inf" if x > 0 else "-inf")
    return x


def _plain(obj):
    """Dataclasses, tuples, numpy values -> JSON-safe Python (no NaN/inf)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_plain(v) for v in obj.tolist()]
    if isinstance(obj, (float, int, np.floating, np.integer, np.bool_)):
        return _num(obj)
    return obj


def score_dict(s: ResourceScore) -> dict:
    """Every ResourceScore field; target maps keyed "0.95"; unreachable targets as strings."""
    out = {}
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        if f.name.endswith("_at"):
            # (a value per execution where the field keeps one: allocation_by_execution_*)
            out[f.name] = {target_key(t): [_num(e) for e in x] if isinstance(x, tuple)
                           else _num(x, UNREACHABLE) for t, x in v.items()}
        else:
            out[f.name] = _num(v)
    return out


def _scores_dict(scores: dict, resources: Sequence[str]) -> dict:
    return {p: {r: score_dict(s) for r, s in zip(resources, scores[p])}
            for p in policy_order(list(scores))}


def counts(result: EvaluationResult, ctx: RunContext) -> dict:
    cfg, data = result.config, result.data
    first = 0 if cfg.include_cold_start else cfg.window
    return {"train_executions": ctx.n_train, "train_groups": ctx.train_groups,
            "test_executions": ctx.n_test, "test_groups": ctx.test_groups,
            "split": ctx.split, **({"held_out": {cfg.split_by: list(ctx.held_out)}}
                                   if ctx.held_out else {}),
            "samples": int(sum(len(u) for u in data.usage)),
            "scored_samples": int(sum(max(len(u) - first, 0) for u in data.usage)),
            "step_seconds": _num(data.step),
            "window_samples": cfg.window,
            "window_minutes": _num(cfg.window * data.step / 60.0)}


def to_json(result: EvaluationResult, ctx: RunContext, sweep: list[dict] | None = None,
            model_params: dict | None = None) -> dict:
    """The full result as a JSON-safe dict (``json.dumps(..., allow_nan=False)`` works)."""
    data = result.data
    t0 = primary_target(result)
    baseline = catalog.baseline()
    units = {r: {"unit": u, "allocation_unit": resource_unit_scale(u)[1],
                 "shortfall_unit": shortfall_unit(u)} for r, u in zip(data.resources, data.units)}
    savings = {res: {a: {b: _num(v, UNREACHABLE) for b, v in row.items()}
                     for a, row in m.items()}
               for res, m in savings_matrix(result, t0).items()}
    doc = {
        "data": ctx.source,
        "config": _plain(result.config),
        "model": None if ctx.model_source is None else {
            "source": ctx.model_source, "n_phases": ctx.n_phases,
            "features": list(getattr(result.model, "features_", ()) or ()),
            "params": _plain(model_params or {})},
        "counts": counts(result, ctx),
        "resources": list(data.resources),
        "units": units,
        "policies": policy_order(list(result.scores)),
        "scores": _scores_dict(result.scores, data.resources),
        "savings": {"target": target_key(t0), "definition": "1 - a/b at matched fulfilment "
                    "(row a vs column b)", "matrix": savings},
        "wins": {p: {r: {target_key(t): wins_over(result.scores, p, j, t, baseline)
                         for t in result.config.targets}
                     for j, r in enumerate(data.resources)}
                 for p in policy_order(list(result.scores)) if p not in (baseline, ORACLE)},
        "wins_at_risk": {p: {r: {target_key(s): wins_at_risk(result.scores, p, j, s, baseline)
                                 for s in result.config.risks}
                             for j, r in enumerate(data.resources)}
                         for p in policy_order(list(result.scores))
                         if p not in (baseline, ORACLE)},
        "auto": {target_key(t): c.as_dict() for t, c in sorted(result.auto.items())},
        "auto_at_risk": {target_key(s): c.as_dict() for s, c in sorted(result.auto_risk.items())},
        **({"auto_per_fold": [{target_key(t): c.as_dict() for t, c in sorted(a.items())}
                              for a in result.folds]} if result.folds else {}),
        "per_execution": [{"name": name, "scores": _scores_dict(sc, data.resources)}
                          for name, sc in zip(data.names, result.per_execution)],
        "cold_start": [_plain(c) for c in result.cold_start],
        # where the held-out executions started (initial "served"): how many from each source
        "starts": dict(result.starts.counts) if result.starts is not None else None,
    }
    if sweep is not None:
        doc["sweep"] = [{"policy": p["policy"], "k": p["k"], "margin": p["margin"],
                         **({"target": p["target"]} if "target" in p else {}),
                         "scores": {r: score_dict(s) for r, s in zip(data.resources,
                                                                     p["scores"])}}
                        for p in sweep]
    return doc
