"""Reporting an :class:`~ai4dl.evaluation.evaluate.EvaluationResult`: the run's context, the
formatting helpers and the markdown report (score table, matched and risk tables, auto's choice,
the savings matrix, the cold start). The JSON document is in :mod:`ai4dl.evaluation.report_json`,
the k/margin trade-off sweep in :mod:`ai4dl.evaluation.report_sweep`, the verdict over several
runs in docs/results/verdict_stats.py (research, outside the package).

Read against ../shared/docs/evaluation.md: every policy is reported as allocation ÷ oracle,
raw and at matched fulfilment (95 %, 97 %), next to its raw fulfilment and allocation ÷ static
peak. A target no margin reaches is "unreachable" (never a number). Pure functions: no I/O,
no plotting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationResult, needs_phases
from ai4dl.judge import ORACLE, ResourceScore, resource_unit_scale, wins_at_risk, wins_over
from ai4dl.policy import catalog

UNREACHABLE = "unreachable"


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
    uses_phases = needs_phases(cfg.policies)
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
    """The catalogue's order, unknown names after them, the oracle last."""
    rank = {p: i for i, p in enumerate(catalog.names())}
    out = sorted(names, key=lambda n: (n == ORACLE, rank.get(n, len(rank)), n))
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
             f"initial request: {initial_label(result)}",
             "safety: " + ("none" if cfg.safety is None else "operator defaults")]
    if ctx.model_source:
        parts.append(f"phase model: {ctx.n_phases} phases, {ctx.model_source}")
    return "; ".join(parts) + "."


def initial_label(result: EvaluationResult) -> str:
    """Where the executions started, said so that a clairvoyant start cannot pass unnoticed."""
    cfg = result.config
    if cfg.initial == "peak":
        return "peak (clairvoyant: each execution's own lifetime peak)"
    if cfg.initial == "served" and result.starts is not None:
        by = "group" if cfg.workload_by == "group" else f"'{cfg.workload_by}'"
        held = ("; memory held at the workload's peak until its time under the safety layer"
                if cfg.safety is not None and result.starts.get("profile") else "")
        return (f"served, as the operator would (workload by {by}: "
                f"{result.starts.describe()}{held})")
    return cfg.initial


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
    if name in (catalog.baseline(), ORACLE):
        return "—"
    w = wins_over(result.scores, name, j, t, catalog.baseline())
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
    the policy wins against the baseline (cheaper and no more windows short)."""
    baseline = catalog.baseline()
    header = ["policy", "resource", "alloc ÷ oracle", "margin", "windows short",
              "OOM-risk windows", "worst shortfall (abs / ÷ usage)", f"wins vs {baseline}"]
    parts = []
    for t in result.config.targets:
        parts.append(f"At {target_label(t)} matched fulfilment (each policy at its own margin): "
                     f"windows with any sample above the allocation, of "
                     f"{_scored_windows(result):,} scored; memory OOM-risk windows (the same, "
                     f"memory); the worst shortfall; a policy wins when it is cheaper than "
                     f"{baseline} and has no more windows short.\n\n"
                     + markdown_table(header, matched_rows(result, t), set(range(2, 7))))
    return "\n\n".join(parts)


def risk_label(share: float) -> str:
    return f"{100 * share:g} %"


def risk_cost(s: ResourceScore, share: float) -> str:
    """Allocation ÷ oracle at ``share`` of windows at risk; where no multiplier reaches it, the
    floor of risk that one reaches and the cost there (evaluation.md: a result, not a blank)."""
    v = s.vs_oracle_risk_at.get(share, math.nan)
    floor = s.risk_floor_at.get(share, math.nan)
    if math.isinf(v) and _finite(floor):
        return (f"{UNREACHABLE}: floor {fmt_pct(floor, digits=2)} at "
                f"{fmt_ratio(s.vs_oracle_floor_at.get(share, math.nan))}")
    return fmt_ratio(v)


def risk_rows(result: EvaluationResult) -> list[list[str]]:
    data = result.data
    risks = result.config.risks
    rows = []
    for name in policy_order(list(result.scores)):
        for j, (res, unit) in enumerate(zip(data.resources, data.units)):
            s: ResourceScore = result.scores[name][j]
            cost = [risk_cost(s, r) for r in risks]
            r0 = risks[0]
            worst = (f"{fmt_amount(s.worst_shortfall_risk_at[r0])} {shortfall_unit(unit)} / "
                     f"{fmt_pct(s.worst_shortfall_risk_rel_at[r0])}"
                     if _finite(s.worst_shortfall_risk_at.get(r0, math.nan)) else UNREACHABLE)
            wins = ("—" if name in (catalog.baseline(), ORACLE) else
                    "/".join({None: "n/a", True: "yes", False: "no"}[
                        wins_at_risk(result.scores, name, j, r, catalog.baseline())]
                             for r in risks))
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
              f"cheaper than {catalog.baseline()} ({'/'.join(risk_label(r) for r in risks)})"]
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
