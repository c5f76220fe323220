"""Reporting an :class:`~ai4dl.evaluation.evaluate.EvaluationResult`: the markdown table, the savings
matrix, the JSON document, and the k/margin trade-off sweep behind the trade-off figure.

Read against ../shared/docs/evaluation.md: every policy is reported as allocation ÷ oracle,
raw and at matched fulfilment (95 %, 97 %), next to its raw fulfilment and allocation ÷ static
peak. A target no margin reaches is "unreachable" (never a number). Pure functions: no I/O,
no plotting; the JSON document is strict (no NaN/Infinity: ``null`` or a string instead).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ai4dl.evaluation.evaluate import (PHASE_POLICIES, POLICIES, EvaluationResult, ResourceScore,
                                       build_policies, replay, resource_unit_scale, score,
                                       wins_at_risk, wins_over)

UNREACHABLE = "unreachable"
SWEEP_K = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
SWEEP_MARGIN = (0.0, 0.05, 0.1)
SWEEP_FAMILIES = ("phase", "phase-proactive", "adaptive-stat")
#: The head-room table is swept over the fulfilment it is fitted for (no k, no margin).
SWEEP_TARGETS = (0.9, 0.93, 0.95, 0.97, 0.99)


# ----------------------------------------------------------------------------- context
@dataclass
class RunContext:
    """What the result alone does not say: where the data came from and how it was split."""
    source: str
    n_train: int
    train_groups: int
    n_test: int
    test_groups: int
    split: bool                      # False: no split, everything is both fitted and scored
    model_source: str | None = None  # model file, "fitted on the train executions", or None
    n_phases: int | None = None
    folds: int = 0                   # cross-fitted in this many folds (every execution scored)
    #: split by a meta key (not group): the key's values held out, named in the header
    held_out: tuple[str, ...] = ()


def make_context(traces, result: EvaluationResult, source: str,
                 model_path: str | None = None) -> RunContext:
    """Counts of the split run_evaluation made (the same seeded split, redone)."""
    cfg = result.config
    if cfg.test_fraction > 0:
        train, test = traces.split_by_group(cfg.test_fraction, cfg.seed, cfg.split_by)
    else:
        train = test = traces
    uses_phases = any(p in PHASE_POLICIES for p in cfg.policies)
    model = result.model if uses_phases else None
    n_phases = getattr(model, "n_phases_", None) if model is not None else None
    if model is None:
        origin = None
    elif model_path:
        origin = f"from {model_path}"
    else:
        origin = "fitted on the train executions" if cfg.test_fraction > 0 else \
            "fitted on all executions"
    held_out = ()
    if cfg.test_fraction > 0 and cfg.split_by != "group":
        held_out = tuple(sorted({str(e.meta[cfg.split_by]) for e in test}))
    return RunContext(source, len(train), len(train.groups()), len(test), len(test.groups()),
                      cfg.test_fraction > 0, origin, n_phases, held_out=held_out)


# ----------------------------------------------------------------------------- formatting
def policy_order(names: Sequence[str]) -> list[str]:
    """POLICIES order, unknown names after them, the oracle last."""
    rank = {p: i for i, p in enumerate(POLICIES)}
    out = sorted(names, key=lambda n: (n == "oracle", rank.get(n, len(rank)), n))
    return out


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating, np.integer)) \
        and math.isfinite(float(x))


def fmt_ratio(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return UNREACHABLE
    return f"{x:.{digits}f}"


def fmt_pct(x: float, signed: bool = False, digits: int = 1) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return UNREACHABLE
    return f"{100 * x:{'+' if signed else ''}.{digits}f} %"


def fmt_amount(x: float) -> str:
    if not _finite(x):
        return "n/a"
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def shortfall_unit(unit: str) -> str:
    """The unit ResourceScore.worst_shortfall is expressed in (bytes are scored in GiB)."""
    return resource_unit_scale(unit)[1][:-2] if unit == "bytes" else unit


def target_key(t: float) -> str:
    return f"{t:g}"


def target_label(t: float) -> str:
    return f"{100 * t:g} %"


def _is_memory(resource: str) -> bool:
    return "memory" in resource or resource == "mem"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                   right: Sequence[int] = ()) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def cell(c, i):
        return str(c).rjust(widths[i]) if i in right else str(c).ljust(widths[i])

    def line(r):
        return "| " + " | ".join(cell(c, i) for i, c in enumerate(r)) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if i in right else "-" * (w + 2)
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def primary_target(result: EvaluationResult) -> float:
    targets = tuple(result.config.targets)
    return 0.95 if 0.95 in targets else targets[0]


# ----------------------------------------------------------------------------- the text
def header_line(result: EvaluationResult, ctx: RunContext) -> str:
    cfg = result.config
    step = result.data.step
    minutes = cfg.window * step / 60.0
    if ctx.folds:
        split = (f"all {ctx.n_test} executions ({ctx.test_groups} groups) scored, "
                 f"cross-fitted in {ctx.folds} folds by group (seed {cfg.seed}): each replayed "
                 f"by what was fitted on the other folds (~{ctx.n_train} executions)")
    elif ctx.split:
        split = (f"{ctx.n_test} test executions ({ctx.test_groups} groups) held out from "
                 f"{ctx.n_train} train executions ({ctx.train_groups} groups) "
                 f"[split by {cfg.split_by}, test fraction {cfg.test_fraction:g}, "
                 f"seed {cfg.seed}]")
        if ctx.held_out:
            shown = ", ".join(ctx.held_out[:12]) + (", ..." if len(ctx.held_out) > 12 else "")
            split += f"; {cfg.split_by} held out: {shown}"
    else:
        split = (f"no train/test split: all {ctx.n_test} executions ({ctx.test_groups} groups) "
                 f"scored")
    cold = ("cold start (first window of each execution) included" if cfg.include_cold_start
            else "cold start (first window of each execution) excluded")
    parts = [f"Data: {ctx.source}", split,
             f"window {cfg.window} samples = " + (f"{minutes:g} min" if minutes >= 1 else
                                                 f"{minutes * 60:g} s") + f" at {step:g} s", cold,
             f"initial request: {cfg.initial}",
             "safety: " + ("none" if cfg.safety is None else "operator defaults")]
    if ctx.model_source:
        parts.append(f"phase model: {ctx.n_phases} phases, {ctx.model_source}")
    return "; ".join(parts) + "."


def score_rows(result: EvaluationResult, scores: dict | None = None) -> list[list[str]]:
    scores = result.scores if scores is None else scores
    data, cfg = result.data, result.config
    t0 = primary_target(result)
    rows = []
    for name in policy_order(list(scores)):
        for j, (res, unit) in enumerate(zip(data.resources, data.units)):
            s: ResourceScore = scores[name][j]
            alloc_unit = resource_unit_scale(unit)[1]
            row = [name, res, fmt_ratio(s.vs_oracle),
                   f"{fmt_pct(s.fulfilment)} / {fmt_pct(s.fulfilment_10)}",
                   fmt_pct(s.margin_at.get(t0, math.nan), signed=True)]
            row += [fmt_ratio(s.vs_oracle_at.get(t, math.nan)) for t in cfg.targets]
            row += [fmt_ratio(s.vs_static_peak),
                    f"{fmt_amount(s.allocation)} {alloc_unit}",
                    f"{s.under_samples:,}",
                    f"{s.resizes:,}"]
            rows.append(row)
    return rows


def score_header(result: EvaluationResult) -> list[str]:
    t0 = primary_target(result)
    return (["policy", "resource", "alloc ÷ oracle", "fulfilment (0 % / 10 % tol.)",
             f"margin for {target_label(t0)}"]
            + [f"alloc ÷ oracle at {target_label(t)}" for t in result.config.targets]
            + ["alloc ÷ static peak", "allocation", "under-prov. samples", "resizes"])


def score_table(result: EvaluationResult) -> str:
    header = score_header(result)
    right = set(range(2, len(header)))
    return markdown_table(header, score_rows(result), right)


def _wins_cell(result: EvaluationResult, name: str, j: int, t: float) -> str:
    if name in ("adaptive-max", "oracle"):
        return "—"
    w = wins_over(result.scores, name, j, t)
    return "n/a" if w is None else ("yes" if w else "no")


def matched_rows(result: EvaluationResult, t: float) -> list[list[str]]:
    data = result.data
    rows = []
    for name in policy_order(list(result.scores)):
        for j, (res, unit) in enumerate(zip(data.resources, data.units)):
            s: ResourceScore = result.scores[name][j]
            n = s.short_windows_at.get(t, math.nan)
            share = s.short_window_share_at.get(t, math.nan)
            reach = math.isfinite(s.vs_oracle_at.get(t, math.inf))
            short = (f"{fmt_pct(share, digits=2)} ({int(n):,})" if reach and _finite(n)
                     else UNREACHABLE)
            oom = (f"{int(n):,}" if reach and _finite(n) else UNREACHABLE) \
                if _is_memory(res) else "-"
            worst = (f"{fmt_amount(s.worst_shortfall_at[t])} {shortfall_unit(unit)} / "
                     f"{fmt_pct(s.worst_shortfall_rel_at[t])}" if reach else UNREACHABLE)
            rows.append([name, res, fmt_ratio(s.vs_oracle_at.get(t, math.nan)),
                         fmt_pct(s.margin_at.get(t, math.nan), signed=True), short, oom, worst,
                         _wins_cell(result, name, j, t)])
    return rows


def matched_tables(result: EvaluationResult) -> str:
    """Per target: what a matched margin can hide (../shared/docs/evaluation.md) — windows with
    any shortfall, memory OOM-risk windows, the worst shortfall — at that margin, and whether
    the policy wins against adaptive-max (cheaper and no more windows short)."""
    header = ["policy", "resource", "alloc ÷ oracle", "margin", "windows short",
              "OOM-risk windows", "worst shortfall (abs / ÷ usage)", "wins vs adaptive-max"]
    parts = []
    for t in result.config.targets:
        parts.append(f"At {target_label(t)} matched fulfilment (each policy at its own margin): "
                     f"windows with any sample above the allocation, of "
                     f"{_scored_windows(result):,} scored; memory OOM-risk windows (the same, "
                     f"memory); the worst shortfall; a policy wins when it is cheaper than "
                     f"adaptive-max and has no more windows short.\n\n"
                     + markdown_table(header, matched_rows(result, t), set(range(2, 7))))
    return "\n\n".join(parts)


def risk_label(share: float) -> str:
    return f"{100 * share:g} %"


def risk_rows(result: EvaluationResult) -> list[list[str]]:
    data = result.data
    risks = result.config.risks
    rows = []
    for name in policy_order(list(result.scores)):
        for j, (res, unit) in enumerate(zip(data.resources, data.units)):
            s: ResourceScore = result.scores[name][j]
            cost = [fmt_ratio(s.vs_oracle_risk_at.get(r, math.nan)) for r in risks]
            r0 = risks[0]
            worst = (f"{fmt_amount(s.worst_shortfall_risk_at[r0])} {shortfall_unit(unit)} / "
                     f"{fmt_pct(s.worst_shortfall_risk_rel_at[r0])}"
                     if _finite(s.worst_shortfall_risk_at.get(r0, math.nan)) else UNREACHABLE)
            wins = ("—" if name in ("adaptive-max", "oracle") else
                    "/".join({None: "n/a", True: "yes", False: "no"}[
                        wins_at_risk(result.scores, name, j, r)] for r in risks))
            rows.append([name, res, fmt_pct(s.risk_share, digits=2), *cost,
                         fmt_pct(s.fulfilment_risk_at.get(r0, math.nan), digits=2), worst, wins])
    return rows


def risk_table(result: EvaluationResult) -> str:
    """Judged by risk (../shared/docs/evaluation.md, "Memory is judged by risk"): each policy
    at the multiplier that leaves exactly a share s of the scored windows with any sample above
    its allocation, its allocation ÷ oracle there; the windows it leaves at risk as replayed
    (no multiplier); at the smallest s, the sample fulfilment and the worst shortfall there."""
    risks = result.config.risks
    if not risks:
        return ""
    r0 = risk_label(risks[0])
    header = ["policy", "resource", "windows at risk (as replayed)",
              *(f"alloc ÷ oracle at {risk_label(r)} at risk" for r in risks),
              f"fulfilment at {r0}", f"worst shortfall at {r0} (abs / ÷ usage)",
              f"cheaper than adaptive-max ({'/'.join(risk_label(r) for r in risks)})"]
    fitted = [n for n in result.per_risk if n in result.scores]
    note = (f" Fitted policies ({', '.join(fitted)}) are fitted for each share (the head-room "
            f"tables at the fulfilment 1 − s; auto under the served objectives with memory at "
            f"s); their 'as replayed' column is their fit for "
            f"{risk_label(risks[0])}." if fitted else "")
    served = (" Under the safety layer the multiplier is on each policy's own proposals and "
              "the layer serves the result, as the operator does; the figures are the served "
              "allocation's." if result.config.safety is not None else "")
    return (f"Judged by windows at risk (each policy at its own multiplier, so that exactly the "
            f"given share of the {_scored_windows(result):,} scored windows has any sample "
            f"above the allocation; for memory such a window may be an OOM kill).{served}"
            f"{note}\n\n"
            + markdown_table(header, risk_rows(result), set(range(2, 5 + len(risks)))))


def _scored_windows(result: EvaluationResult) -> int:
    first = next(iter(result.scores.values()), None)
    return first[0].scored_windows if first else 0


def auto_lines(result: EvaluationResult) -> str:
    """What auto chose at each target (fitted and chosen on the train side only)."""
    folds = result.folds or ([result.auto] if result.auto else [])
    if not any(folds) and not result.auto_risk:
        return ""
    out = ["auto (chosen on the train side only: candidates fitted on the older train "
           "executions, scored on the most recent ones):", ""]
    for k, autos in enumerate(folds):
        fold = f"fold {k + 1}, " if len(folds) > 1 else ""
        for t, c in sorted(autos.items()):
            w = ", ".join(f"{r} → {p}" for r, p in zip(c.resources, c.winners))
            out.append(f"- {fold}at {target_label(t)}: {w} ({c.n_validation} held-out of "
                       f"{c.n_fit + c.n_validation} train executions)")
    for s, c in sorted(result.auto_risk.items()):
        w = ", ".join(
            f"{r} → {p}" + (f" × {f:.3f}" if f != 1.0 else "") +
            (f" (realised {fmt_pct(a.get('riskWindows', math.nan), digits=2)} of windows at "
             f"risk)" if o.is_risk and a else "")
            for r, p, f, a, o in zip(c.resources, c.winners, c.calibration, c.achieved,
                                     c.objectives))
        out.append(f"- under the served objectives with memory at {risk_label(s)} of windows "
                   f"at risk: {w}")
    return "\n".join(out)


def savings_matrix(result: EvaluationResult, target: float | None = None
                   ) -> dict[str, dict[str, dict[str, float]]]:
    """resource -> a -> b -> 1 - a/b, where a, b are the allocations (÷ oracle) each policy
    needs to reach ``target`` fulfilment: the share of b's allocation that a saves. inf when
    either cannot reach the target; the diagonal is left out."""
    t = primary_target(result) if target is None else target
    names = policy_order(list(result.scores))
    out: dict = {}
    for j, res in enumerate(result.data.resources):
        m: dict = {}
        for a in names:
            row = {}
            va = result.scores[a][j].vs_oracle_at.get(t, math.nan)
            for b in names:
                if a == b:
                    continue
                vb = result.scores[b][j].vs_oracle_at.get(t, math.nan)
                if math.isinf(va) or math.isinf(vb):
                    row[b] = math.inf
                elif math.isnan(va) or math.isnan(vb) or vb <= 0:
                    row[b] = math.nan
                else:
                    row[b] = 1.0 - va / vb
            m[a] = row
        out[res] = m
    return out


def savings_tables(result: EvaluationResult, target: float | None = None) -> str:
    t = primary_target(result) if target is None else target
    matrix = savings_matrix(result, t)
    names = policy_order(list(result.scores))
    parts = [f"Savings at {target_label(t)} matched fulfilment: 1 − a ÷ b, the share of the "
             f"column policy b's allocation that the row policy a saves when both get the "
             f"margin that reaches {target_label(t)} (negative: a needs more)."]
    for res, m in matrix.items():
        rows = [[a] + ["—" if a == b else fmt_pct(m[a][b], signed=True) for b in names]
                for a in names]
        parts.append(f"{res}:\n\n" + markdown_table([r"policy \ vs", *names], rows,
                                                    set(range(1, len(names) + 1))))
    return "\n\n".join(parts)


def render_markdown(result: EvaluationResult, ctx: RunContext) -> str:
    """The whole printed report: one context line, the score table, the figures at each
    matched target (windows short, OOM risk, worst shortfall, the wins rule), auto's choice,
    the savings matrices."""
    parts = [header_line(result, ctx), score_table(result), matched_tables(result)]
    if result.config.risks:
        parts.append(risk_table(result))
    if result.auto or any(result.folds) or result.auto_risk:
        parts.append(auto_lines(result))
    parts.append(savings_tables(result))
    if result.cold_start:
        parts.append(cold_start_table(result))
    return "\n\n".join(parts) + "\n"


def cold_start_table(result: EvaluationResult) -> str:
    """The first window of every held-out execution, before anything was observed: the
    trace's request, the static peak, and the learned first-window level (admission)."""
    W = result.config.window
    rows = [[c.resource, c.source, str(c.executions), fmt_ratio(c.vs_oracle),
             fmt_ratio(c.vs_request) if c.vs_request == c.vs_request else "—",
             fmt_pct(c.fulfilment), fmt_pct(c.short_windows)] for c in result.cold_start]
    return (f"Cold start (the first {W} samples of each held-out execution, sized before "
            f"anything was observed: the trace's own request where it records one, the "
            f"execution's static peak, and the learned first-window level of the train side — "
            f"the target quantile of its executions' first-window peaks, what the admission "
            f"webhook sets at pod creation):\n\n"
            + markdown_table(["resource", "first window sized by", "executions",
                              "alloc ÷ oracle", "alloc ÷ request", "fulfilment",
                              "first windows short"], rows, right=(2, 3, 4, 5, 6)))


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
            out[f.name] = {target_key(t): _num(x, UNREACHABLE) for t, x in v.items()}
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
        "wins": {p: {r: {target_key(t): wins_over(result.scores, p, j, t)
                         for t in result.config.targets}
                     for j, r in enumerate(data.resources)}
                 for p in policy_order(list(result.scores)) if p not in ("adaptive-max",
                                                                         "oracle")},
        "wins_at_risk": {p: {r: {target_key(s): wins_at_risk(result.scores, p, j, s)
                                 for s in result.config.risks}
                             for j, r in enumerate(data.resources)}
                         for p in policy_order(list(result.scores)) if p not in ("adaptive-max",
                                                                                 "oracle")},
        "auto": {target_key(t): c.as_dict() for t, c in sorted(result.auto.items())},
        "auto_at_risk": {target_key(s): c.as_dict() for s, c in sorted(result.auto_risk.items())},
        **({"auto_per_fold": [{target_key(t): c.as_dict() for t, c in sorted(a.items())}
                              for a in result.folds]} if result.folds else {}),
        "per_execution": [{"name": name, "scores": _scores_dict(sc, data.resources)}
                          for name, sc in zip(data.names, result.per_execution)],
        "cold_start": [_plain(c) for c in result.cold_start],
    }
    if sweep is not None:
        doc["sweep"] = [{"policy": p["policy"], "k": p["k"], "margin": p["margin"],
                         **({"target": p["target"]} if "target" in p else {}),
                         "scores": {r: score_dict(s) for r, s in zip(data.resources,
                                                                     p["scores"])}}
                        for p in sweep]
    return doc


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
    oracle = result.replays.get("oracle")
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
    fit_targets = (tuple(SWEEP_TARGETS) if "phase-headroom" in cfg.policies
                   and result.train_data is not None and result.model is not None else ())
    points = []
    names = families + (["phase-headroom (fit target)"] if fit_targets else [])
    say(f"sweep: {len(grid) + len(fit_targets)} replays ({', '.join(names) or 'nothing to sweep'})")
    for fam, k, m in grid:
        c = dataclasses.replace(cfg, policies=(fam,), k=k, margin=m)
        pol = build_policies(c, result.model, None)[0]
        rep = replay(data, pol, cfg.window, cfg.safety)
        sc = score(data, {fam: rep, "oracle": oracle}, cfg.window, cfg.include_cold_start,
                   cfg.targets)
        points.append({"policy": fam, "k": k, "margin": m, "scores": sc[fam]})
    for t in fit_targets:
        from ai4dl.policy.auto import build_candidate

        pol = build_candidate("phase-headroom", result.train_data, cfg.window, result.model, t)
        rep = replay(data, pol, cfg.window, cfg.safety)
        sc = score(data, {"phase-headroom": rep, "oracle": oracle}, cfg.window,
                   cfg.include_cold_start, cfg.targets)
        points.append({"policy": "phase-headroom", "k": None, "margin": 0.0, "target": t,
                       "scores": sc["phase-headroom"]})
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


# ----------------------------------------------------------------------------- the verdict
#: The bar the default policy is held to (docs/results.md §3): at each matched target, auto's
#: allocation ≤ the better of the two reactive policies and < VPA's, with no more windows short
#: than adaptive-max's.
VERDICT_REFERENCES = ("adaptive-max", "adaptive-stat")


def _at(doc: dict, policy: str, resource: str, field: str, t: str):
    v = doc["scores"].get(policy, {}).get(resource, {}).get(field, {}).get(t)
    return math.inf if v == UNREACHABLE else v


def verdict_cell(doc: dict, resource: str, t: str, policy: str = "auto") -> dict | None:
    """One run, one resource, one target: ``policy`` against the bar (None when the run did not
    score it, adaptive-max or adaptive-stat)."""
    cost = _at(doc, policy, resource, "vs_oracle_at", t)
    refs = [_at(doc, p, resource, "vs_oracle_at", t) for p in VERDICT_REFERENCES]
    short = _at(doc, policy, resource, "short_windows_at", t)
    ref_short = _at(doc, "adaptive-max", resource, "short_windows_at", t)
    if cost is None or short is None or ref_short is None or any(r is None for r in refs):
        return None
    vpa = _at(doc, "vpa", resource, "vs_oracle_at", t)
    best = min(refs)
    j = doc["resources"].index(resource)
    choice = (doc.get("auto", {}).get(t, {}).get("winners") or [None] * (j + 1))[j]
    met = bool(cost <= best and short <= ref_short and (vpa is None or cost < vpa))
    return {"cost": cost, "reactive": best, "vpa": vpa, "short": short, "ref_short": ref_short,
            "choice": choice, "met": met,
            "cost_gap": cost / best - 1.0 if best and math.isfinite(best) else math.nan,
            "short_gap": (short - ref_short) / ref_short if ref_short else math.nan}


def _runs_by_label(runs: Sequence[tuple[str, dict]]) -> dict[str, list[dict]]:
    """label -> its documents in seed order."""
    by_label: dict[str, list[dict]] = {}
    for label, doc in runs:
        by_label.setdefault(label, []).append(doc)
    return {label: sorted(docs, key=lambda d: d["config"]["seed"])
            for label, docs in by_label.items()}


def verdict_rows(runs: Sequence[tuple[str, dict]], policy: str = "auto") -> list[dict]:
    """``runs``: (data-set label, ``ai4dl evaluate --json`` document), several split seeds per
    label. One row per (label, resource, target): the first seed's figures (the one the
    results tables show) and, over every seed, how often ``policy`` met the bar and its mean
    gaps (allocation vs the better reactive policy, windows short vs adaptive-max)."""
    rows = []
    for label, docs in _runs_by_label(runs).items():
        for resource in docs[0]["resources"]:
            for t in docs[0]["config"]["targets"]:
                key = target_key(t)
                cells = [c for c in (verdict_cell(d, resource, key, policy) for d in docs)
                         if c is not None]
                if not cells:
                    continue
                rows.append({"data": label, "resource": resource, "target": t,
                             "first": cells[0], "seeds": [d["config"]["seed"] for d in docs],
                             "met": sum(c["met"] for c in cells), "runs": len(cells),
                             **{f"{gap}{stat}": float(fn([c[gap] for c in cells]))
                                for gap in ("cost_gap", "short_gap")
                                for stat, fn in (("", np.mean), ("_min", np.min),
                                                 ("_max", np.max))}})
    return rows


def verdict_table(rows: Sequence[dict]) -> str:
    """The verdict as markdown: first seed's cell, then the tally over seeds."""
    header = ["data set", "res.", "target", "auto (choice)", "min(adaptive-max, adaptive-stat)",
              "vpa", "windows short: auto / adaptive-max", "bar", "met over seeds",
              "allocation gap: mean (range)", "windows-short gap: mean (range)"]
    out = []
    for r in rows:
        c = r["first"]
        out.append([r["data"], r["resource"], target_label(r["target"]),
                    f"{fmt_ratio(c['cost'])} ({c['choice'] or '—'})", fmt_ratio(c["reactive"]),
                    fmt_ratio(c["vpa"]) if c["vpa"] is not None else "—",
                    f"{c['short']:.0f} / {c['ref_short']:.0f}",
                    "met" if c["met"] else "**missed**", f"{r['met']} of {r['runs']}",
                    f"{fmt_pct(r['cost_gap'], signed=True, digits=2)} "
                    f"({fmt_pct(r['cost_gap_min'], True, 2)} … {fmt_pct(r['cost_gap_max'], True, 2)})",
                    f"{fmt_pct(r['short_gap'], signed=True)} "
                    f"({fmt_pct(r['short_gap_min'], True)} … {fmt_pct(r['short_gap_max'], True)})"])
    return markdown_table(header, out)


def verdict_tally(rows: Sequence[dict], bar: Sequence[str] | None = None) -> str:
    """How many cells met the bar, per data set and in all: over every seed, and on the first
    seed alone (the cells of :func:`verdict_table`). ``bar``: the data sets the bar is set on
    (the total counts only those; default: all)."""
    order = list(dict.fromkeys(r["data"] for r in rows))
    bar = order if bar is None else [d for d in order if d in bar]

    def counts(labels) -> list[int]:
        rs = [r for r in rows if r["data"] in labels]
        return [sum(r["met"] for r in rs), sum(r["runs"] for r in rs),
                sum(bool(r["first"]["met"]) for r in rs), len(rs)]

    out = [[d, "{} of {}".format(*c[:2]), "{} of {}".format(*c[2:])]
           for d in order for c in [counts([d])]]
    c = counts(bar)
    out.append([f"**the bar's data sets** ({len(bar)})", f"**{c[0]} of {c[1]}**",
                f"**{c[2]} of {c[3]}**"])
    return markdown_table(["data set", "cells met, every seed", "cells met, first seed"], out)


def restated_cpu_rows(runs: Sequence[tuple[str, dict]], policy: str = "auto") -> list[dict]:
    """Issue 12's cpu bar at the resolution the data allows (issue 25): per (data set, target),
    ``policy``'s allocation gap to the better reactive policy, mean over the split seeds with
    its standard error over them (each seed holds out other jobs: the spread is the
    job-sampling noise), and its mean gaps to VPA and the KRR replica. Met when the mean gap is
    ≤ 0 within one standard error and ``policy`` is below VPA and the KRR replica on average."""
    rows = []
    for label, docs in _runs_by_label(runs).items():
        if "cpu" not in docs[0]["resources"]:
            continue
        for t in docs[0]["config"]["targets"]:
            key = target_key(t)
            gaps: dict[str, list[float]] = {"reactive": [], "vpa": [], "krr": []}
            for d in docs:
                cost = _at(d, policy, "cpu", "vs_oracle_at", key)
                refs = [_at(d, p, "cpu", "vs_oracle_at", key) for p in VERDICT_REFERENCES]
                if cost is None or any(r is None for r in refs):
                    continue
                gaps["reactive"].append(cost / min(refs) - 1.0)
                for other in ("vpa", "krr"):
                    v = _at(d, other, "cpu", "vs_oracle_at", key)
                    if v is not None and math.isfinite(v) and v > 0:
                        gaps[other].append(cost / v - 1.0)
            g = gaps["reactive"]
            if not g:
                continue
            mean = float(np.mean(g))
            se = float(np.std(g, ddof=1) / math.sqrt(len(g))) if len(g) > 1 else math.nan
            below = {o: (float(np.mean(gaps[o])) if gaps[o] else math.nan) for o in ("vpa", "krr")}
            met = bool(mean <= (se if math.isfinite(se) else 0.0)
                       and all(not math.isfinite(v) or v < 0 for v in below.values()))
            rows.append({"data": label, "target": t, "seeds": len(g), "gap": mean, "se": se,
                         "vs_vpa": below["vpa"], "vs_krr": below["krr"], "met": met})
    return rows


def restated_cpu_table(rows: Sequence[dict]) -> str:
    out = [[r["data"], target_label(r["target"]), str(r["seeds"]),
            f"{fmt_pct(r['gap'], True, 2)} ± {fmt_pct(r['se'], digits=2)}",
            fmt_pct(r["vs_vpa"], True, 1) if math.isfinite(r["vs_vpa"]) else "—",
            fmt_pct(r["vs_krr"], True, 1) if math.isfinite(r["vs_krr"]) else "—",
            "met" if r["met"] else "**missed**"] for r in rows]
    return markdown_table(["data set", "target", "seeds",
                           "gap to the better reactive: mean ± s.e.", "gap to VPA (mean)",
                           "gap to KRR (mean)", "restated bar"], out)
