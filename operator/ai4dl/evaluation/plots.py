"""Figures of an :class:`~ai4dl.evaluation.evaluate.EvaluationResult` (matplotlib, Agg): usage and every
policy's allocation for chosen executions, the k/margin trade-off with its Pareto frontier,
allocation ÷ oracle at matched fulfilment per policy, and cost versus windows at risk. Figure functions return figures;
:func:`write_evaluation_plots` saves them as PNG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ai4dl.evaluation.evaluate import EvaluationResult  # noqa: E402
from ai4dl.io.writers import save_figure  # noqa: E402
from ai4dl.evaluation.report import policy_order, primary_target, target_label  # noqa: E402
from ai4dl.evaluation.report_sweep import pareto_front  # noqa: E402
from ai4dl.evaluation.workload_report import level_unit  # noqa: E402
from ai4dl.judge import ORACLE, score  # noqa: E402
from ai4dl.policy import catalog  # noqa: E402

DPI = 110
#: Besides the declared policies' own colours: a served PhaseModel (``evaluate --phasemodel``).
_OTHER_COLOURS = {"phasemodel": "tab:pink"}
_MARGIN_MARKERS = ("o", "s", "^", "D", "v", "P")
_DISPLAY = {"bytes": (1024.0 ** 3, "GiB"), "percent": (1.0, "%")}


def policy_colour(name: str):
    colours = {**catalog.colours(), **_OTHER_COLOURS}
    if name in colours:
        return colours[name]
    return plt.get_cmap("tab10")((hash(name) % 7) + 3)


def _display(unit: str) -> tuple[float, str]:
    return _DISPLAY.get(unit, (1.0, unit))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


# ----------------------------------------------------------------------------- executions
def shown_policies(names: Sequence[str], most: int = 6) -> list[str]:
    """The policies an execution's figure draws: those declared for it present in the run
    (what a user would pick instead: the author's static request, VPA, KRR; the reactive
    baseline, auto's choice and the oracle: ten step lines over one usage line read as none;
    every policy is in the tables), else the first ``most`` in the tables' order."""
    ordered = policy_order(list(names))
    shown = catalog.names(figure="execution")
    chosen = [n for n in ordered if n in shown]
    return chosen if len(chosen) >= 2 else ordered[:most]


def duration_text(seconds: float) -> str:
    """``40 s``, ``10 min``, ``1.5 h``: a duration in the unit a person reads it in."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def time_axis(seconds: float) -> tuple[float, str]:
    """(divisor, name) for an axis spanning ``seconds``: seconds, minutes or hours."""
    if seconds < 120:
        return 1.0, "seconds"
    if seconds < 2 * 3600:
        return 60.0, "minutes"
    return 3600.0, "hours"


def execution_figure(result: EvaluationResult, i: int):
    """One panel per resource: usage (black) and a few policies' allocations as step lines
    (:func:`shown_policies`; oracle dashed), time since the start on x in the unit the run's
    length reads best in; the legend gives each policy's allocation ÷ oracle on this
    execution."""
    data, cfg = result.data, result.config
    u = data.usage[i]
    n, W, step = len(u), cfg.window, data.step
    div_t, t_unit = time_axis(n * step)
    per_sample = step / div_t
    t = np.arange(n) * per_sample
    n_win = -(-n // W)
    edges = np.minimum(np.arange(n_win + 1) * W, n) * per_sample
    R = len(data.resources)
    fig, axes = plt.subplots(R, 1, figsize=(11.5, 2.5 * R + 0.9), sharex=True, squeeze=False)
    names = shown_policies(list(result.replays))
    left_out = [n for n in policy_order(list(result.replays)) if n not in names]
    per = result.per_execution[i] if i < len(result.per_execution) else {}
    for j, ax in enumerate(axes[:, 0]):
        div, unit = _display(data.units[j])
        if not cfg.include_cold_start and n_win > 1:
            ax.axvspan(0, edges[1], color="0.85", alpha=0.6, lw=0,
                       label="cold start (not scored)")
        ax.plot(t, u[:, j] / div, color="black", lw=0.8, label="usage", zorder=5)
        for name in names:
            alloc = result.replays[name].allocations[i][:n_win, j] / div
            s = per[name][j] if name in per else None
            tag = (f" (×{s.vs_oracle:.2f} oracle)"
                   if s is not None and name != ORACLE and math.isfinite(s.vs_oracle) else "")
            ax.stairs(alloc, edges, color=policy_colour(name), lw=1.6 if name == ORACLE else 1.2,
                      ls="--" if name == ORACLE else "-", label=name + tag,
                      zorder=6 if name == ORACLE else 4, baseline=None)
        ax.set_ylabel(f"{data.resources[j]} [{unit}]", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.margins(x=0)
        ax.grid(alpha=0.25, lw=0.5)
        ax.tick_params(labelsize=8)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7.5, frameon=False)
    axes[-1, 0].set_xlabel(f"{t_unit} since the execution started", fontsize=9)
    axes[0, 0].set_title(f"{data.names[i]}: usage and allocation per policy "
                         f"(window {W} samples = {duration_text(W * step)}; legend: allocation "
                         f"÷ oracle on this execution)", fontsize=10)
    if left_out:
        fig.text(0.01, 0.005, "not drawn (in the tables): " + ", ".join(left_out), fontsize=7,
                 ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.025 if left_out else 0, 1, 1))
    return fig


def chosen_executions(result: EvaluationResult, n: int) -> list[int]:
    """The ``n`` longest held-out executions (most windows to look at)."""
    lengths = [len(u) for u in result.data.usage]
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))[: max(n, 0)]


# ----------------------------------------------------------------------------- trade-off
def _swept(p: dict) -> float:
    """What a sweep point varies: k, or the fulfilment a head-room table was fitted for."""
    return p["target"] if "target" in p else p["k"]


def _swept_label(p: dict) -> str:
    return f"fit {100 * p['target']:g}%" if "target" in p else f"k={p['k']:g}"


def sweep_figure(result: EvaluationResult, sweep: Sequence[dict]):
    """Allocation ÷ oracle against raw fulfilment per resource: the swept policies (colour
    per policy, marker per margin, a line through the k values), the run's policies as
    stars, the oracle, and the Pareto frontier of everything but the oracle."""
    data = result.data
    R = len(data.resources)
    fig, axes = plt.subplots(1, R, figsize=(6.4 * R, 5.4), squeeze=False)
    margins = sorted({p["margin"] for p in sweep})
    marker = {m: _MARGIN_MARKERS[i % len(_MARGIN_MARKERS)] for i, m in enumerate(margins)}
    families = list(dict.fromkeys(p["policy"] for p in sweep))
    for j, ax in enumerate(axes[0]):
        xs, ys, labels = [], [], []
        for fam in families:
            for m in margins:
                pts = sorted((p for p in sweep if p["policy"] == fam and p["margin"] == m),
                             key=_swept)
                if not pts:
                    continue
                x = [100 * p["scores"][j].fulfilment for p in pts]
                y = [p["scores"][j].vs_oracle for p in pts]
                ax.plot(x, y, color=policy_colour(fam), lw=0.8, alpha=0.6)
                ax.scatter(x, y, color=policy_colour(fam), marker=marker[m], s=28, zorder=3,
                           edgecolor="white", linewidth=0.4)
                for p, xi, yi in zip(pts, x, y):
                    xs.append(xi)
                    ys.append(yi)
                    labels.append(f"{fam} {_swept_label(p)} m={p['margin']:g}")
                if m == margins[0]:
                    for p, xi, yi in ((pts[0], x[0], y[0]), (pts[-1], x[-1], y[-1])):
                        if len(pts) > 1:
                            ax.annotate(_swept_label(p), (xi, yi), textcoords="offset points",
                                        xytext=(4, -9), fontsize=6.5, color=policy_colour(fam))
        for name in policy_order(list(result.scores)):
            s = result.scores[name][j]
            if name == ORACLE:
                ax.scatter([100 * s.fulfilment], [s.vs_oracle], marker="X", s=90, color="black",
                           zorder=6)
                continue
            ax.scatter([100 * s.fulfilment], [s.vs_oracle], marker="*", s=170,
                       color=policy_colour(name), edgecolor="black", linewidth=0.6, zorder=5)
            xs.append(100 * s.fulfilment)
            ys.append(s.vs_oracle)
            labels.append(name)
        front = pareto_front(xs, ys)
        if front:
            fx = [xs[i] for i in front]
            fy = [ys[i] for i in front]
            # between two frontier points, the cheaper way to the higher fulfilment is the
            # next point: the attainable boundary steps up first, then runs right
            ax.step(fx, fy, where="pre", color="black", ls=":", lw=1.2, zorder=2)
            ax.scatter(fx, fy, s=110, facecolor="none", edgecolor="black", lw=1.0, zorder=4)
        for t in result.config.targets:
            ax.axvline(100 * t, color="0.6", lw=0.7, ls="--")
            ax.text(100 * t, 0.01, f"{target_label(t)} ", rotation=90, va="bottom",
                    ha="right", fontsize=7, color="0.45", transform=ax.get_xaxis_transform())
        ax.axhline(1.0, color="0.6", lw=0.7)
        ax.set_xlabel("fulfilment: samples with usage ≤ allocation [%]", fontsize=9)
        ax.set_ylabel("allocation ÷ oracle allocation", fontsize=9)
        ax.set_title(f"{data.resources[j]}: cost vs fulfilment (lower right is better)",
                     fontsize=10)
        ax.grid(alpha=0.25, lw=0.5)
        ax.tick_params(labelsize=8)
    def swept_what(f: str) -> str:
        return "fit target" if any("target" in p for p in sweep if p["policy"] == f) else "k"

    handles = [Line2D([], [], color=policy_colour(f), marker="o", lw=0.8,
                      label=f"{f} ({swept_what(f)} swept)") for f in families]
    handles += [Line2D([], [], color="0.4", marker=marker[m], lw=0, label=f"margin {m:g}")
                for m in margins]
    handles += [Line2D([], [], color=policy_colour(n), marker="*", markersize=11, lw=0,
                       markeredgecolor="black", label=f"{n} (as run)")
                for n in policy_order(list(result.scores)) if n != ORACLE]
    handles += [Line2D([], [], color="black", marker="X", lw=0, label=ORACLE),
                Line2D([], [], color="black", ls=":", marker="o", markerfacecolor="none",
                       label="Pareto frontier")]
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.83, 1))
    return fig


# ----------------------------------------------------------------------------- bars
def matched_bars_figure(result: EvaluationResult, target: float | None = None):
    """Allocation ÷ oracle at matched fulfilment, one group of bars per policy (one bar per
    resource); a target no margin reaches is a hatched bar marked "unreachable"."""
    t = primary_target(result) if target is None else target
    data = result.data
    names = policy_order(list(result.scores))
    R = len(data.resources)
    vals = np.array([[result.scores[n][j].vs_oracle_at.get(t, math.nan) for j in range(R)]
                     for n in names], float)
    finite = vals[np.isfinite(vals)]
    top = (finite.max() if len(finite) else 1.0) * 1.15
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(names) + 2), 4.4))
    width = 0.8 / max(R, 1)
    x = np.arange(len(names))
    shades = plt.get_cmap("tab20c")
    for j in range(R):
        pos = x - 0.4 + width * (j + 0.5)
        v = vals[:, j]
        ok = np.isfinite(v)
        ax.bar(pos[ok], v[ok], width * 0.92, color=shades(4 * j), edgecolor="black",
               linewidth=0.5, label=data.resources[j])
        ax.bar(pos[~ok], np.full((~ok).sum(), top * 0.95), width * 0.92, color="white",
               edgecolor=shades(4 * j), hatch="//", linewidth=0.8)
        for p, val in zip(pos, v):
            txt = f"{val:.3f}" if np.isfinite(val) else "unreachable"
            y = val if np.isfinite(val) else top * 0.95
            ax.text(p, y, txt, ha="center", va="bottom", fontsize=7,
                    rotation=90 if not np.isfinite(val) or R > 2 else 0)
    ax.axhline(1.0, color="black", lw=0.8, ls="--", label="oracle allocation (raw)")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylim(0, top * 1.08)
    ax.set_ylabel(f"allocation ÷ oracle at {target_label(t)} fulfilment", fontsize=9)
    ax.set_title(f"Allocation needed for {target_label(t)} fulfilment (own margin per "
                 "policy), ÷ oracle — lower is better", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.25, lw=0.5)
    fig.tight_layout()
    return fig


def workloads_figure(rows, policy: str, resources: Sequence[str], units: Sequence[str],
                     top: int = 20):
    """Per workload (the ``top`` largest), per resource: the mean request, usage and
    ``policy``'s mean allocation (the report of ``ai4dl evaluate --prometheus``)."""
    shown = list(rows[:top])
    R = len(resources)
    fig, axes = plt.subplots(1, R, figsize=(5.5 * R, 0.9 + 0.38 * max(1, len(shown))),
                             squeeze=False)
    y = np.arange(len(shown))
    h = 0.27
    for j, (res, unit) in enumerate(zip(resources, units)):
        ax = axes[0, j]
        label = level_unit(unit)        # levels are resource-hours ÷ hours
        req = np.array([w.request_level(res) for w in shown])
        used = np.array([w.level(w.usage[res]) for w in shown])
        alloc = np.array([w.level(w.policies[policy][res].allocation) if policy in w.policies
                          else np.nan for w in shown])
        ax.barh(y - h, np.nan_to_num(req), h, color="#999999", label="current request")
        ax.barh(y, alloc, h, color=policy_colour(policy), label=policy)
        ax.barh(y + h, used, h, color="#333333", label="mean usage")
        for i, r in enumerate(req):
            if not np.isfinite(r):
                ax.text(0, y[i] - h, " request unknown", va="center", fontsize=7)
        ax.set_yticks(y)
        ax.set_yticklabels([f"{w.kind}/{w.name}" for w in shown] if j == 0 else [], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"{res} [{label}] (mean over the replay)")
        ax.grid(axis="x", alpha=0.3)
        if j == 0:
            ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Per workload: current requests, {policy}, usage", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- risk
#: Shares of windows at risk the cost-versus-risk curves are drawn at.
RISK_GRID = tuple(np.round(np.concatenate([np.arange(0.0025, 0.05, 0.0025),
                                           np.arange(0.05, 0.201, 0.01)]), 4))


def risk_curves(result: EvaluationResult, shares: Sequence[float] = RISK_GRID) -> dict:
    """policy -> (R, len(shares)) allocation ÷ oracle at each matched share of windows at risk
    (the evaluator's own scoring; a policy fitted per share is drawn with its fit for the
    smallest share it was fitted for)."""
    reps = dict(result.replays)
    for name, by_share in result.per_risk.items():
        if name in reps and by_share:
            reps[name] = by_share[min(by_share)]
    sc = score(result.data, reps, result.config.window, result.config.include_cold_start,
               targets=(), risks=tuple(shares))
    return {n: np.array([[rows[j].vs_oracle_risk_at[s] for s in shares]
                         for j in range(len(rows))]) for n, rows in sc.items()}


def risk_curve_figure(result: EvaluationResult, shares: Sequence[float] = RISK_GRID):
    """Cost versus risk, one panel per resource: each policy's allocation ÷ oracle at the
    multiplier that leaves a given share of windows at risk (lower and further left is
    better); the objectives the evaluator reports are marked. The policies declared for it
    (the baselines users pick, the reactive ones, the policy fitted to the risk and the
    default; ten lines read as none) that were scored (all when none was)."""
    curves = risk_curves(result, shares)
    data = result.data
    R = len(data.resources)
    fig, axes = plt.subplots(1, R, figsize=(6.0 * R, 4.4), squeeze=False)
    x = 100 * np.asarray(shares)
    clairvoyant = result.config.initial == "peak"
    for j, res in enumerate(data.resources):
        ax = axes[0, j]
        finite = np.concatenate([c[j][np.isfinite(c[j])] for c in curves.values()])
        shown = [n for n in policy_order(list(curves)) if n in catalog.names(figure="risk")] or \
            [n for n in policy_order(list(curves)) if n != ORACLE]
        for name in shown:
            y = curves[name][j]
            ok = np.isfinite(y)
            label = "static (clairvoyant peak)" if name == "static" and clairvoyant else name
            # the constants on top, dashed: KRR is the static peak wherever a job has no history
            ax.plot(x[ok], y[ok], color=policy_colour(name), label=label,
                    lw=2.2 if name == "static" else 1.4,
                    ls={"static": "--", "krr": ":"}.get(name, "-"),
                    zorder=3 if name in ("static", "krr") else 2)
        if len(finite):
            # the smallest shares can cost a reactive policy many times the oracle: keep the
            # range where the policies differ readable
            ax.set_ylim(0.9, min(finite.max(), 1.25 * np.percentile(finite, 90)) * 1.05)
        for r in result.config.risks:
            ax.axvline(100 * r, color="0.6", lw=0.6, ls=":")
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xlabel("share of windows at risk [%] (any sample above the allocation)")
        ax.set_ylabel("allocation ÷ oracle at that share")
        ax.set_title(f"{res}: cost versus risk (lower is better)", fontsize=10)
        ax.grid(alpha=0.25, lw=0.5)
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- saving
def write_evaluation_plots(result: EvaluationResult, outdir: str | Path, n_executions: int = 2,
                           sweep: Sequence[dict] | None = None) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig, name: str) -> None:
        path = save_figure(fig, outdir / name, dpi=DPI)
        plt.close(fig)
        written.append(path)

    for i in chosen_executions(result, n_executions):
        save(execution_figure(result, i), f"allocation-{_safe(result.data.names[i])}.png")
    if sweep:
        save(sweep_figure(result, sweep), "tradeoff.png")
    save(matched_bars_figure(result), "matched-fulfilment.png")
    if result.config.risks:
        save(risk_curve_figure(result), "cost-vs-risk.png")
    return written
