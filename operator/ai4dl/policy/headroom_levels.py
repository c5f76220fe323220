"""The head-room tables' inputs: every estimator's candidate level at each window's start, the
burstiness state, the cold-start level, and the training windows the fit learns from. Separate
from :mod:`ai4dl.policy.headroom` so that these per-window features (read by peak-risk, the
evaluator and the result scripts too) come without the table or its fit."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ai4dl.policy.running import EWMA_WEIGHT, K_STD

#: Candidate estimators of the next window's need, in table order (the document stores names,
#: so new ones go at the end).
ESTIMATORS = ("max", "mean+2std", "last", "median", "phase-level", "max-2w", "ewma-max")


def windows(x: np.ndarray, window: int) -> np.ndarray:
    m = len(x) // window
    return x[: m * window].reshape(m, window, *x.shape[1:])


def burstiness(win: np.ndarray) -> np.ndarray:
    """max ÷ mean of each window (rows, W, R) -> (rows, R); 1 for a window whose mean is 0
    (an idle window is as flat as a window can be). Never below 1: a constant window's mean
    can round a hair above its max, and constant windows must all land in one bin."""
    mx = win.max(1)
    mu = win.mean(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.maximum(np.where(mu > 0, mx / np.where(mu > 0, mu, 1.0), 1.0), 1.0)


def burst_bin(edges: np.ndarray, burst: np.ndarray) -> np.ndarray:
    """Bin b holds (edges[b-1], edges[b]]: right-closed, so a mass point at an edge (the
    constant windows at exactly 1) stays together in the lower bin."""
    return np.searchsorted(edges, burst, side="left")


def _own_phase_levels(usage: np.ndarray, phases: np.ndarray | None, window: int) -> np.ndarray:
    """(rows, R): at the start of each window w >= 1, mean + 2σ of this execution's samples so
    far that share the phase of the last sample; all its samples so far when ``phases`` is None.
    The last sample's phase always has at least that sample, so there is no fallback to any
    level outside the execution."""
    m = len(usage) // window
    u = usage[: m * window]
    ends = np.arange(window, m * window + 1, window) - 1
    if phases is None:
        c = np.arange(1, m * window + 1, dtype=np.float64)[ends, None]
        s1 = np.cumsum(u, 0)[ends]
        s2 = np.cumsum(u * u, 0)[ends]
    else:
        p = np.asarray(phases)[: m * window]
        cur = p[ends]                                            # phase of each row's last sample
        # running sums of the samples in each row's current phase, without a (n, k) one-hot:
        # sort samples by phase, cumulate per phase, read the count at each row's end.
        c = np.empty((m, 1))
        s1 = np.empty((m, u.shape[1]))
        s2 = np.empty_like(s1)
        for ph in np.unique(cur):
            rows = np.flatnonzero(cur == ph)
            mask = (p == ph)
            cm = np.cumsum(mask)
            um = np.where(mask[:, None], u, 0.0)
            c[rows, 0] = cm[ends[rows]]
            s1[rows] = np.cumsum(um, 0)[ends[rows]]
            s2[rows] = np.cumsum(um * um, 0)[ends[rows]]
    mean = s1 / c
    var = np.maximum(s2 / c - mean * mean, 0.0)
    return mean + K_STD * np.sqrt(var)


def first_window_level(usages: Sequence[np.ndarray], window: int, target: float) -> np.ndarray:
    """The cold-start level (R,): the ``target`` quantile of the executions' first-window
    peaks, the level that would have covered that share of their first windows (zeros when
    there is no execution). What the head-room tables serve a new container, what the admission
    webhook sets at pod creation, and what the evaluator's ``--initial model`` scores."""
    peaks = [np.asarray(u, np.float64)[:window].max(0) for u in usages if len(u)]
    if not peaks:
        R = np.asarray(usages[0]).shape[1] if len(usages) else 0
        return np.zeros(R)
    return np.quantile(np.stack(peaks), target, axis=0, method="higher")


def ewma_of_maxima(maxima: np.ndarray) -> np.ndarray:
    """(rows, R) -> (rows, R): ``ewma-max`` after each window, started at the first window's max
    (the running form is :meth:`ai4dl.policy.running.OwnHistory.add`)."""
    out = np.empty_like(maxima)
    if len(maxima):
        out[0] = maxima[0]
        for i in range(1, len(maxima)):
            out[i] = EWMA_WEIGHT * maxima[i] + (1.0 - EWMA_WEIGHT) * out[i - 1]
    return out


def candidate_levels(usage: np.ndarray, phases: np.ndarray | None, window: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For rows 1..m (m = complete windows): the levels of every estimator (m, E, R), the
    burstiness of the last window (m, R) and the phase of the last sample (m,) or None."""
    usage = np.asarray(usage, np.float64)
    win = windows(usage, window)
    m, R = len(win), usage.shape[1]
    out = np.empty((m, len(ESTIMATORS), R))
    if m == 0:
        return out, np.empty((0, R)), None if phases is None else np.empty(0, int)
    out[:, 0] = win.max(1)
    out[:, 1] = win.mean(1) + K_STD * win.std(1)
    out[:, 2] = win[:, -1]
    out[:, 3] = np.median(win, 1)
    out[:, 4] = _own_phase_levels(usage, phases, window)
    out[:, 5] = np.maximum(out[:, 0], np.vstack([out[:1, 0], out[:-1, 0]]))
    out[:, 6] = ewma_of_maxima(out[:, 0])
    last_phase = None if phases is None else np.asarray(phases)[window - 1: m * window: window]
    return out, burstiness(win), last_phase


class TrainingWindows(NamedTuple):
    """Every training window after the cold start that has samples, as the fit sees it."""
    levels: np.ndarray        # (N_w, E, R) candidate levels at the window's start
    burst: np.ndarray         # (N_w, R) burstiness of the window before it
    last_phase: np.ndarray    # (N_w,) phase of the last sample before it (0: phase-blind)
    seg_len: np.ndarray       # (N_w,) its samples (the last window of an execution can be short)
    execution_of: np.ndarray  # (N_w,) which execution it is of
    usage: np.ndarray         # (N_s, R) its samples, window after window


def training_windows(usages: Sequence[np.ndarray], phases: Sequence[np.ndarray | None],
                     window: int) -> TrainingWindows | None:
    """The windows :meth:`ai4dl.policy.headroom.HeadroomPolicy.fit` learns from (rows >= 1 of
    each execution whose window has samples), with the features known at their start; None
    when there is none.
    ``phases``: one label array per execution, or None each for the phase-blind estimators."""
    L, B, P, seg_len, samples, execution_of = [], [], [], [], [], []
    for u, p in zip(usages, phases):
        if len(u) == 0:
            continue
        lv, bu, lp = candidate_levels(u, p, window)
        n_rows = min(len(lv), -(-len(u) // window) - 1)      # rows whose window has samples
        if n_rows <= 0:
            continue
        execution_of.append(np.full(n_rows, len(L)))
        L.append(lv[:n_rows])
        B.append(bu[:n_rows])
        P.append(np.zeros(n_rows, np.int64) if lp is None else lp[:n_rows])
        samples.append(u[window: (n_rows + 1) * window])
        seg_len.append(np.minimum(window, len(u) - window * np.arange(1, n_rows + 1)))
    if not L:
        return None
    return TrainingWindows(np.concatenate(L), np.concatenate(B), np.concatenate(P),
                           np.concatenate(seg_len), np.concatenate(execution_of),
                           np.concatenate(samples))
