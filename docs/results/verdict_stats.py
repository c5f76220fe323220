"""The verdict over several runs: the default policy against the bar of docs/results.md, read
from ``ai4dl evaluate --json`` documents (several split seeds per data set), as rows and tables.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ai4dl.evaluation.report import (UNREACHABLE, fmt_pct, fmt_ratio, markdown_table, target_key,
                                     target_label)
from ai4dl.policy import catalog


# ----------------------------------------------------------------------------- over seeds
#: How far apart a gap and its standard error must be to count as on either side of it: both
#: come from the same few numbers, so an exact tie arrives with rounding in its last bits.
TIE_TOLERANCE = 1e-9


def mean_se(values: Sequence[float | None]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation ÷ √n) of the finite ``values``, e.g.
    one gap per split seed; nan for what cannot be computed (the error of a single value)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], float)
    if not len(x):
        return math.nan, math.nan
    return float(x.mean()), (float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1
                             else math.nan)


def side_of_one_se(gap: float, se: float) -> int:
    """-1 when ``gap`` is below zero by more than one standard error ``se``, +1 when above by
    more, 0 within one (ties included). A tie is not rare: when one seed of n differs and the
    others agree exactly (two policies that serve the same allocation there), the mean is d ÷ n
    and the standard error d ÷ n too, whatever d, so ``gap`` = ``se`` up to rounding. One
    seed alone is not evidence beyond one standard error; rounding must not decide it."""
    if not (math.isfinite(gap) and math.isfinite(se)):
        return 0
    margin = abs(gap) - se
    if margin <= TIE_TOLERANCE * max(abs(gap), se):
        return 0
    return -1 if gap < 0 else 1


def clustered_ratio(a: Sequence[float], b: Sequence[float], clusters: Sequence
                    ) -> tuple[float, float]:
    """(sum a ÷ sum b, its cluster-robust standard error): ``a`` and ``b`` two policies'
    allocations per execution at their matched share (the judge's
    ``allocation_by_execution_risk_at``), ``clusters`` the workload of each. The delta method
    on the workloads' sums, with the G ÷ (G - 1) small-sample factor: the re-runs of a workload
    start from one profile, so they are one draw, not several. The matched factors are taken
    as given (their own noise is not in it): a lower bound on the noise. nan with fewer than
    two workloads."""
    _, group = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    A = np.bincount(group, weights=np.asarray(a, float))
    B = np.bincount(group, weights=np.asarray(b, float))
    ratio = float(A.sum() / B.sum())
    G = len(A)
    if G < 2:
        return ratio, math.nan
    resid = A - ratio * B
    return ratio, float(math.sqrt(G / (G - 1) * float((resid ** 2).sum())) / B.sum())


# ----------------------------------------------------------------------------- the verdict
# The bar the default policy is held to (docs/results.md §3): at each matched target, auto's
# allocation ≤ the better of the two reactive policies (the catalogue's reactive references)
# and < VPA's, with no more windows short than the baseline's.


def _at(doc: dict, policy: str, resource: str, field: str, t: str):
    v = doc["scores"].get(policy, {}).get(resource, {}).get(field, {}).get(t)
    return math.inf if v == UNREACHABLE else v


def verdict_cell(doc: dict, resource: str, t: str, policy: str = "auto") -> dict | None:
    """One run, one resource, one target: ``policy`` against the bar (None when the run did not
    score it or one of the reactive references)."""
    cost = _at(doc, policy, resource, "vs_oracle_at", t)
    refs = [_at(doc, p, resource, "vs_oracle_at", t) for p in catalog.reactive_references()]
    short = _at(doc, policy, resource, "short_windows_at", t)
    ref_short = _at(doc, catalog.baseline(), resource, "short_windows_at", t)
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
    header = ["data set", "res.", "target", "auto (choice)",
              f"min({', '.join(catalog.reactive_references())})",
              "vpa", f"windows short: auto / {catalog.baseline()}", "bar", "met over seeds",
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
                refs = [_at(d, p, "cpu", "vs_oracle_at", key)
                        for p in catalog.reactive_references()]
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
            mean, se = mean_se(g)
            within = side_of_one_se(mean, se) <= 0 if math.isfinite(se) else mean <= 0
            below = {o: mean_se(gaps[o]) for o in ("vpa", "krr")}
            met = bool(within and all(not math.isfinite(m) or m < 0 for m, _ in below.values()))
            rows.append({"data": label, "target": t, "seeds": len(g), "gap": mean, "se": se,
                         "vs_vpa": below["vpa"][0], "vs_vpa_se": below["vpa"][1],
                         "vs_krr": below["krr"][0], "vs_krr_se": below["krr"][1],
                         "met": met})
    return rows


def _gap_se(mean: float, se: float) -> str:
    """A mean gap over seeds with its standard error, and whether the seeds resolve its side."""
    if not math.isfinite(mean):
        return "—"
    if not math.isfinite(se):
        return f"{fmt_pct(mean, True, 1)} (one seed)"
    side = side_of_one_se(mean, se)
    return (f"{fmt_pct(mean, True, 1)} ± {fmt_pct(se, digits=1)}"
            + ("" if side else " (not resolved)"))


def restated_cpu_table(rows: Sequence[dict]) -> str:
    """The restated bar per (data set, target). The gaps to VPA and the KRR replica carry their
    standard errors: the bar asks for a mean below them, and a reader should see when the
    seeds cannot tell which side the mean is on."""
    out = [[r["data"], target_label(r["target"]), str(r["seeds"]),
            f"{fmt_pct(r['gap'], True, 2)} ± {fmt_pct(r['se'], digits=2)}",
            _gap_se(r["vs_vpa"], r.get("vs_vpa_se", math.nan)),
            _gap_se(r["vs_krr"], r.get("vs_krr_se", math.nan)),
            "met" if r["met"] else "**missed**"] for r in rows]
    return markdown_table(["data set", "target", "seeds",
                           "gap to the better reactive: mean ± s.e.", "gap to VPA: mean ± s.e.",
                           "gap to KRR: mean ± s.e.", "restated bar"], out)
