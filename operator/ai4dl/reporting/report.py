"""Human-readable descriptions of a fitted model: phase table, prototypes, transitions, fit."""

from __future__ import annotations

import numpy as np

from ai4dl.method.model import PhaseModel
from ai4dl.policy.peak import from_table as risk_from_table
from ai4dl.policy.headroom import from_table
from ai4dl.policy.headroom_levels import ESTIMATORS

_BINARY = (("TiB", 1024.0 ** 4), ("GiB", 1024.0 ** 3), ("MiB", 1024.0 ** 2), ("KiB", 1024.0))


def fmt_value(v: float, unit: str) -> str:
    """A value in its unit, scaled for reading (bytes in binary units, cores to 2 decimals)."""
    if unit == "bytes":
        for name, size in _BINARY:
            if abs(v) >= size:
                return f"{v / size:.2f} {name}"
        return f"{v:.0f} B"
    if unit == "cores":
        return f"{v:.2f}"
    if unit in ("percent",):
        return f"{v:.1f}%"
    return f"{v:.3g}"


def fmt_seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in rows])


def describe(model: PhaseModel) -> str:
    """Markdown: phases (mean ± std and p95 per feature, share, dwell), prototypes,
    transition matrix and the fit report."""
    step = model.step_seconds_
    feats = list(zip(model.features_, model.units_))
    header = ["phase", "share", "samples"] + [f"{f} mean±std (p95)" for f, _ in feats] + \
        ["dwell mean", "dwell p90", "runs"]
    rows = []
    for s in model.phase_stats_:
        cells = [str(s["phase"]), f"{100 * s['share']:.1f}%", str(s["samples"])]
        for j, (_, u) in enumerate(feats):
            cells.append(f"{fmt_value(s['mean'][j], u)} ± {fmt_value(s['std'][j], u)} "
                         f"({fmt_value(s['p95'][j], u)})")
        d = s["dwell"]
        cells += [fmt_seconds(d["mean"] * step), fmt_seconds(d["p90"] * step), str(d["runs"])]
        rows.append(cells)
    out = [f"# Phase model: {model.n_phases_} phases over "
           f"{', '.join(f'{f} [{u}]' for f, u in feats)} at {step:g} s", "", "## Phases", "",
           _table(header, rows), ""]

    out += ["## Prototypes (most common phase sequences; cycles collapsed)", ""]
    cum = 0.0
    prow = []
    for p in model.prototypes_:
        cum += p["share"]
        prow.append([" → ".join(map(str, p["sequence"])), str(p["executions"]),
                     f"{100 * p['share']:.1f}%", f"{100 * cum:.1f}%"])
    out += [_table(["sequence", "executions", "share", "cumulative"], prow), ""]

    k = model.n_phases_
    P = np.asarray(model.transitions_)
    out += ["## Transition matrix (per step; row = from, column = to)", "",
            _table(["from \\ to"] + [str(j) for j in range(k)],
                   [[str(i)] + [f"{P[i, j]:.3f}" for j in range(k)] for i in range(k)]), ""]

    if getattr(model, "policy_tables_", None):
        for t in model.policy_tables_:
            out += headroom_section(from_table(t))

    if getattr(model, "risk_tables_", None):
        for t in model.risk_tables_:
            try:
                out += risk_section(risk_from_table(t))
            except ValueError as err:         # a table of another version's bins
                out += [f"## Risk table: {t.name}", "", f"not readable here: {err}", ""]

    r = model.fit_report_
    if r is not None:
        out += ["## Fit", "",
                f"- {r.n_executions} executions, {r.n_samples} samples, seed {r.seed}, "
                f"device {r.device}",
                f"- CRBM: {model.crbm_.n_hidden} hidden units, history {model.crbm_.n_history} "
                f"steps, {r.crbm_epochs} epochs (best {r.crbm_best_epoch}), reconstruction error "
                f"{r.reconstruction_error:.4f} (validation {r.validation_error:.4f})",
                f"- silhouette {r.silhouette:.3f}" if r.silhouette is not None else "- silhouette n/a",
                f"- novelty rate on training data {100 * r.novelty_rate:.2f}% "
                f"(threshold: per-phase distance quantile)"]
        ks = r.k_selection
        if ks is not None:
            out += [f"- k chosen by {ks.rule}: {ks.chosen_k} (elbow on WCSS: {ks.elbow_k}, "
                    f"best silhouette: {ks.silhouette_k})", "",
                    _table(["k", "WCSS", "silhouette"],
                           [[str(kk), f"{w:.5f}", f"{s:.3f}"]
                            for kk, w, s in zip(ks.ks, ks.wcss, ks.silhouette)])]
    return "\n".join(out) + "\n"


def headroom_section(policy) -> list[str]:
    """Markdown lines: a fitted head-room table, one grid per resource (rows: phase of the
    last sample; columns: burstiness bins of the last window, max ÷ mean), each cell the
    estimator trusted in that state × its multiplier, with the training windows behind it
    (and where a rare state was pooled)."""
    out = [f"## Policy table: {policy.name} (fitted for {100 * policy.target:g} % fulfilment, "
           f"windows of {policy.window_} samples)", "",
           "Each cell: the estimator of the next window trusted in that state × the head-room "
           "it gets (the multiplier); in brackets the training windows behind it, and where "
           "a rare state was pooled (b: over phases, g: globally).", ""]
    for r, res in enumerate(policy.resources_):
        edges = policy.edges_[r]
        bins = int(np.count_nonzero(np.isfinite(edges))) + 1
        lo = ["1"] + [f"{e:.3g}" for e in edges[:bins - 1]]
        hi = [f"{e:.3g}" for e in edges[:bins - 1]] + ["∞"]
        cols = [f"burst ({a}, {b}]" if i else f"burst [1, {b}]"
                for i, (a, b) in enumerate(zip(lo, hi))]
        rows = []
        for p in range(policy.multiplier_.shape[1]):
            cells = []
            for b in range(bins):
                tag = {0: "", 1: ", b", 2: ", g"}[int(policy.pooled_[r, p, b])]
                cells.append(f"{ESTIMATORS[int(policy.estimator_[r, p, b])]} × "
                             f"{policy.multiplier_[r, p, b]:.3f} "
                             f"({int(policy.support_[r, p, b])}{tag})")
            rows.append([str(p) if policy.use_phase else "any"] + cells)
        rep = policy.fit_report_[r] if policy.fit_report_ else {}
        extra = ""
        if rep.get("reference_fallback"):
            extra = (f"; no table was cheaper than adaptive-max on the training windows "
                     f"(the best: {rep['table_allocation_vs_reference']:.3f} × its allocation): "
                     f"adaptive-max itself")
        elif rep.get("short_windows") is not None and rep.get("reference_short_windows"):
            extra = (f"; on the training windows at its matched margin: allocation "
                     f"{rep['allocation_vs_reference']:.3f} × adaptive-max's, "
                     f"{int(rep['short_windows'])} windows short against adaptive-max's "
                     f"{int(rep['reference_short_windows'])}")
        out += [f"### {res} (cold start: {policy.cold_start_[r]:.4g}{extra})", "",
                _table(["phase"] + cols, rows), ""]
    return out


def risk_section(policy) -> list[str]:
    """Markdown lines: a fitted peak-risk table, per resource one row per fitted state (the
    pooling level and bins that define it, the level it multiplies, the multiplier, the
    training windows behind it); a window takes the first state along the rows' levels that
    holds it."""
    out = [f"## Risk table: {policy.name} (fitted for at most {100 * policy.max_risk:g} % of "
           f"windows at risk, windows of {policy.window_} samples)", "",
           "Each row: a state (the bins of its pooling level's features; finer levels first), "
           "the level its multiplier multiplies (peak: the running maximum; last: the last "
           "window's max), the multiplier (out-of-fold calibration included) and the training "
           "windows it was fitted on.", ""]
    rows_by_res: dict = {}
    for row in policy.state_rows():
        rows_by_res.setdefault(row["resource"], []).append(
            [row["level"], row["state"], row["estimator"], f"{row['multiplier']:.3f}",
             str(row["windows"])])
    for r, res in enumerate(policy.resources_):
        rep = policy.fit_report_[r] if policy.fit_report_ else {}
        risk = rep.get("train_risk")
        extra = f"; at risk on its training windows: {100 * risk:.2f} %" if risk is not None \
            else ""
        phase = ""
        if policy.use_phase:            # a phase-blind fit has no slot to speak of
            phase = "; the phase: " + ("used" if policy.phase_used_[r] else "not used")
            if getattr(policy, "select_phase", False):
                phase += " (chosen out of fold)"
        out += [f"### {res} (cold start: {policy.cold_start_[r]:.4g}; min_windows "
                f"{int(policy.min_windows_[r])}{phase}; calibration × "
                f"{policy.calibration_[r]:.3f}"
                f"{extra})", "",
                _table(["level", "state", "estimator", "multiplier", "windows"],
                       rows_by_res.get(res, [])), ""]
    return out
