"""Figures (matplotlib, Agg): a trace with coloured phase bands under each feature (as AI4DL's
PrintTrace), per-phase distributions, and the phase graph. Functions return figures; saving is
the caller's business."""

from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Patch  # noqa: E402

from ai4dl.method.model import PhaseModel  # noqa: E402
from ai4dl.method.phases import runs  # noqa: E402
from ai4dl.method.traces import Execution  # noqa: E402
from ai4dl.policy.headroom_levels import ESTIMATORS  # noqa: E402
from ai4dl.policy.headroom import POOL_LEVELS  # noqa: E402

_SCALE = {"bytes": (1024.0 ** 3, "GiB")}


def phase_colour(j: int):
    return plt.get_cmap("tab10")(j % 10)


def _scaled(values: np.ndarray, unit: str) -> tuple[np.ndarray, str]:
    div, name = _SCALE.get(unit, (1.0, unit))
    return values / div, name


def draw_trace(axes: Sequence, execution: Execution, phases: np.ndarray,
               logged: tuple[np.ndarray, Sequence[str]] | None = None) -> None:
    """One panel per feature: the series, with the background coloured by phase. ``logged``
    (codes per sample, their names): the phases the program itself logged, drawn in one more
    panel (``axes`` holds one more) so detected and logged phases can be compared by eye."""
    t = (execution.times - execution.times[0]) / 60.0
    step = (execution.step or 0) / 60.0
    run_phase, run_length = runs(phases)
    run_start = np.r_[0, np.cumsum(run_length)[:-1]]
    feature_axes = axes[:-1] if logged is not None else axes
    for ax, f, u, col in zip(feature_axes, execution.features, execution.units,
                             execution.values.T):
        y, unit = _scaled(col, u)
        for p, s, n in zip(run_phase, run_start, run_length):
            ax.axvspan(t[s], t[s + n - 1] + step, color=phase_colour(int(p)), alpha=0.35, lw=0)
        ax.plot(t, y, color="black", lw=0.8)
        ax.set_ylabel(f"{f}\n[{unit}]", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.margins(x=0)
    if logged is not None:
        _draw_logged(axes[-1], t, step, *logged)
    axes[-1].set_xlabel("minutes since start", fontsize=8)
    axes[0].set_title(f"{execution.name}: phases over time"
                      + (" (bands: detected; bottom strip: logged by the program)"
                         if logged is not None else ""), fontsize=9)


def _draw_logged(ax, t: np.ndarray, step: float, codes: np.ndarray, names: Sequence[str]) -> None:
    """The program's own phases as a strip of named bands (a palette apart from the detected
    phases' colours: the two numberings are unrelated)."""
    cmap = plt.get_cmap("Pastel2")
    run_code, run_length = runs(np.asarray(codes))
    run_start = np.r_[0, np.cumsum(run_length)[:-1]]
    span = (t[-1] + step - t[0]) or 1.0
    for c, s, n in zip(run_code, run_start, run_length):
        x0, x1 = t[s], t[s + n - 1] + step
        ax.axvspan(x0, x1, color=cmap(int(c) % 8), lw=0)
        if (x1 - x0) / span > 0.04:   # a name only where it fits
            ax.text((x0 + x1) / 2, 0.5, names[int(c)], ha="center", va="center", fontsize=6,
                    transform=ax.get_xaxis_transform(), clip_on=True)
    ax.set_yticks([])
    ax.set_ylabel("logged\nphase", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.margins(x=0)


def trace_figure(execution: Execution, phases: np.ndarray, k: int,
                 logged: tuple[np.ndarray, Sequence[str]] | None = None):
    n = len(execution.features)
    rows = n + (logged is not None)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 1.6 * n + 0.5 * (rows - n) + 0.8),
                             sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [1.6] * n + [0.5] * (rows - n)})
    draw_trace(axes[:, 0], execution, phases, logged)
    _legend(fig, k)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    return fig


def _legend(fig, k: int) -> None:
    fig.legend(handles=[Patch(color=phase_colour(j), alpha=0.5, label=f"phase {j}")
                        for j in range(k)], loc="center right", fontsize=8, frameon=False)


def draw_distributions(axes: Sequence, model: PhaseModel, values: np.ndarray,
                       labels: np.ndarray) -> None:
    """Box plot per feature of each phase's samples (original units)."""
    k = model.n_phases_
    for ax, j, (f, u) in zip(axes, range(len(model.features_)), zip(model.features_, model.units_)):
        y, unit = _scaled(values[:, j], u)
        data = [y[labels == p] if np.any(labels == p) else np.array([np.nan]) for p in range(k)]
        bp = ax.boxplot(data, patch_artist=True, showfliers=False, widths=0.6)
        for p, box in enumerate(bp["boxes"]):
            box.set_facecolor(phase_colour(p))
            box.set_alpha(0.6)
        ax.set_xticks(range(1, k + 1), [str(p) for p in range(k)], fontsize=7)
        ax.set_title(f"{f} [{unit}]", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_xlabel("phase", fontsize=8)


def draw_phase_graph(ax, model: PhaseModel, min_probability: float = 0.005) -> None:
    """Phases on a circle (size ∝ share); arrows for phase changes, width ∝ probability of
    leaving i for j per step (self-loops left out: they are the dwell times)."""
    k = model.n_phases_
    ang = np.pi / 2 - 2 * np.pi * np.arange(k) / k
    pos = np.c_[np.cos(ang), np.sin(ang)]
    P = np.asarray(model.transitions_)
    off = P - np.diag(np.diag(P))
    scale = off.max() if off.max() > 0 else 1.0
    for i in range(k):
        for j in range(k):
            if i != j and P[i, j] >= min_probability:
                ax.add_patch(FancyArrowPatch(pos[i], pos[j], arrowstyle="-|>", mutation_scale=12,
                                             lw=0.5 + 4 * P[i, j] / scale, color="0.35",
                                             connectionstyle="arc3,rad=0.15", shrinkA=18,
                                             shrinkB=18, alpha=0.8))
    for j in range(k):
        share = model.phase_stats_[j]["share"]
        ax.scatter(*pos[j], s=300 + 2500 * share, color=phase_colour(j), alpha=0.8, zorder=3)
        ax.annotate(f"{j}\n{100 * share:.0f}%", pos[j], ha="center", va="center", fontsize=8,
                    zorder=4)
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.5, 1.5)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("phase graph (arrow width ∝ P(i→j))", fontsize=9)


def distributions_figure(model: PhaseModel, values: np.ndarray, labels: np.ndarray):
    n = len(model.features_)
    fig, axes = plt.subplots(1, n, figsize=(3.0 * n, 3.2), squeeze=False)
    draw_distributions(axes[0], model, values, labels)
    fig.tight_layout()
    return fig


def graph_figure(model: PhaseModel):
    fig, ax = plt.subplots(figsize=(5, 5))
    draw_phase_graph(ax, model)
    fig.tight_layout()
    return fig


def report_figure(model: PhaseModel, executions: Sequence[Execution],
                  phases: Sequence[np.ndarray], all_values: np.ndarray, all_labels: np.ndarray,
                  title: str = "", logged: Sequence[tuple[np.ndarray, Sequence[str]]] | None = None):
    """One page: example traces with phase bands (and, given ``logged``, the phases each program
    logged under it), per-phase distributions, the phase graph."""
    nf = len(model.features_)
    ne = len(executions)
    extra = 0.5 if logged is not None else 0.0
    fig = plt.figure(figsize=(13, (1.5 * nf + extra) * ne + 4.2))
    outer = fig.add_gridspec(ne + 1, 1, height_ratios=[1.5 * nf + extra] * ne + [4.0],
                             hspace=0.35)
    for i, (ex, lab) in enumerate(zip(executions, phases)):
        rows = nf + (logged is not None)
        sub = outer[i].subgridspec(rows, 1, hspace=0.08,
                                   height_ratios=[1.5] * nf + [0.5] * (rows - nf))
        axes = [fig.add_subplot(sub[j]) for j in range(rows)]
        for a in axes[1:]:
            a.sharex(axes[0])
        for a in axes[:-1]:
            a.tick_params(labelbottom=False)
        draw_trace(axes, ex, lab, logged[i] if logged is not None else None)
    bottom = outer[ne].subgridspec(1, nf + 2, wspace=0.45)
    draw_distributions([fig.add_subplot(bottom[j]) for j in range(nf)], model, all_values,
                       all_labels)
    draw_phase_graph(fig.add_subplot(bottom[nf:]), model)
    _legend(fig, model.n_phases_)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.subplots_adjust(left=0.07, right=0.9, top=0.95 if title else 0.97, bottom=0.05)
    return fig


def headroom_figure(policies):
    """Heat-map of the learned head-room per state: one panel per (table, resource), rows the
    phase of the last sample, columns the burstiness bin of the last window; colour the
    multiplier, each cell labelled with the estimator it multiplies. A panel whose states were
    all pooled (too few training windows per state) says so in its title: its one colour is
    the fit's, not a finding about the phases."""
    panels = [(p, r) for p in policies for r in range(len(p.resources_))]
    n = len(panels)
    fig, axes = plt.subplots(1, max(n, 1), figsize=(4.6 * max(n, 1), 3.6), squeeze=False)
    for ax, (p, r) in zip(axes[0], panels):
        edges = p.edges_[r]
        bins = int(np.count_nonzero(np.isfinite(edges))) + 1
        M = p.multiplier_[r][:, :bins]
        im = ax.imshow(M, cmap="viridis", aspect="auto")
        for i in range(M.shape[0]):
            for b in range(bins):
                pooled = int(p.pooled_[r, i, b])
                ax.text(b, i, f"{ESTIMATORS[int(p.estimator_[r, i, b])]}\n×{M[i, b]:.3f}"
                        + ("" if pooled == 0 else "\n(pooled)"), ha="center", va="center",
                        fontsize=6.5, color="white" if M[i, b] < M.mean() else "black")
        labels = ([f"≤{e:.3g}" for e in edges[:bins - 1]] + ["higher"]) if bins > 1 else ["any"]
        ax.set_xticks(range(bins), labels, fontsize=7)
        ax.set_yticks(range(M.shape[0]), [str(i) for i in range(M.shape[0])] if p.use_phase
                      else ["any"], fontsize=7)
        ax.set_xlabel("burstiness of the last window (max ÷ mean)", fontsize=8)
        ax.set_ylabel("phase of the last sample" if p.use_phase else "", fontsize=8)
        title = f"{p.name}: {p.resources_[r]} (fit {100 * p.target:g} %)"
        levels = set(np.asarray(p.pooled_[r][:, :bins]).ravel().tolist())
        if len(M) * bins > 1 and levels <= {1, 2}:
            title += (f"\nall states pooled ({POOL_LEVELS[max(levels)]}): "
                      f"< {p.resolved_min_windows()} windows each")
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    if len({int(e) for p, r in panels for e in np.asarray(p.estimator_[r]).ravel()}) > 1:
        fig.text(0.5, 0.005, "colour: the multiplier; cells multiply different estimators (named "
                 "in each cell): compare colours only between cells of one estimator",
                 ha="center", va="bottom", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig
