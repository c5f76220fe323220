"""Novelty-triggered refits, the operator's side (pure): count, per PhaseModel, the containers
whose window the model found novel (far from every phase it knows), over the last
``spec.refit.windows`` windows; when the share reaches ``spec.refit.noveltyShare`` the
PhaseModel gets the ``RefitRecommended`` condition and the trainer CronJob (``ai4dl train
--if-due``) refits early.

The counts live in the PhaseModel's status (``status.novelty``), not in the operator's memory:
a restart goes on counting, and a window handled twice is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ai4dl.crd_spec import RefitPolicy
from ai4dl.method.phases import mostly_novel_warning

CONDITION = "RefitRecommended"


@dataclass(frozen=True)
class NoveltyVerdict:
    status: dict            # the new status.novelty
    recommended: bool
    reason: str             # the condition's reason
    message: str


def update_novelty(previous: dict | None, model_key: str, window: float, novel: int, total: int,
                   refit: RefitPolicy) -> NoveltyVerdict:
    """Add one window's counts to ``previous`` (status.novelty) and decide on a refit.

    A new model starts a new count (the old windows say nothing about it); a window with no
    classified container is not counted; nor is a window already counted (``window`` equal to
    ``lastWindow``). A refit is recommended only over a full span of ``refit.windows`` windows,
    so one odd window does not trigger it."""
    prev = previous if previous and previous.get("model") == model_key else {}
    recent = list(prev.get("recent") or [])
    last = prev.get("lastWindow")
    if total > 0 and last != window:
        recent.append({"novel": int(novel), "total": int(total)})
        last = window
    recent = recent[-refit.windows:]
    n_novel = sum(w["novel"] for w in recent)
    n_total = sum(w["total"] for w in recent)
    share = n_novel / n_total if n_total else 0.0
    status = {"model": model_key, "lastWindow": last, "recent": recent, "share": round(share, 6)}
    # most windows novel from the first: say what that usually means, not only the count
    warning = mostly_novel_warning(share, "container windows") if n_total else None
    tail = f"; {warning}" if warning else ""
    if len(recent) < refit.windows:
        return NoveltyVerdict(status, False, "TooFewWindows",
                              f"{len(recent)} of {refit.windows} windows counted under this "
                              f"model (novel share so far {share:.3f}){tail}")
    if share >= refit.novelty_share:
        return NoveltyVerdict(status, True, "NoveltyAbove",
                              f"novel share {share:.3f} over the last {len(recent)} windows "
                              f"({n_novel} of {n_total} container windows) ≥ "
                              f"{refit.novelty_share:g}{tail}")
    return NoveltyVerdict(status, False, "NoveltyBelow",
                          f"novel share {share:.3f} over the last {len(recent)} windows < "
                          f"{refit.novelty_share:g}")
