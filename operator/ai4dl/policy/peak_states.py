"""The peak-risk policy's state features: bins, running state, pooling levels, lookup cells."""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

#: Bin edges of the state features (a bin holds [edge, next edge); values below the first
#: edge fall in the first bin).
ELAPSED_EDGES = (1, 2, 3, 6)          # windows seen: 1 | 2 | 3-5 | 6+
SINCE_EDGES = (0, 1, 3)               # windows since the last new high: 0 | 1-2 | 3+
RATIO_EDGES = (0, 0.7, 0.9)           # last window's max ÷ M: <0.7 | 0.7-0.9 | >=0.9
DIP_EDGES = (0, 0.7, 0.9)             # lowest window max since the last new high ÷ M
FEATURES = ("elapsed", "since", "ratio", "dip")
#: What a state's multiplier multiplies: the running maximum M, or the last window's max.
ESTIMATORS = ("peak", "last")
EDGES = (ELAPSED_EDGES, SINCE_EDGES, RATIO_EDGES, DIP_EDGES)
SIZES = tuple(len(e) for e in EDGES)
#: States per phase row (every combination of the features).
N_CODES = int(np.prod(SIZES))
#: The pooling chain, finest first (the phase, when used, is in front of the first level).
CHAIN = (("elapsed", "since", "ratio", "dip"), ("elapsed", "since", "ratio"),
         ("elapsed", "since"), ("elapsed",), ())


def state_bin(edges: Sequence[float], values) -> np.ndarray:
    """Bin of each value: bin b holds [edges[b], edges[b+1]); below edges[0], bin 0."""
    return np.maximum(np.searchsorted(np.asarray(edges, np.float64), values, side="right") - 1,
                      0)


def state_codes(elapsed, since, ratio, dip) -> np.ndarray:
    """The phase-blind state code (mixed radix of the bins, ``elapsed`` the most significant)
    from raw feature values: ``elapsed`` windows seen, ``since`` windows since the last new
    high, ``ratio`` last window max ÷ M, ``dip`` lowest window max since the high ÷ M (any
    shapes that broadcast)."""
    code = 0
    for edges, values in zip(EDGES, (elapsed, since, ratio, dip)):
        code = code * len(edges) + state_bin(edges, values)
    return np.asarray(code, np.int64)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num ÷ den, 1 where den is 0 (an idle execution is at its peak)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)


class RunningPeak:
    """The running form of one resource's state features, window max after window max (what
    :class:`ai4dl.policy.running.OwnHistory` keeps per resource): the peak M, windows since the
    last new high (a window max above M), the lowest window max since then (M itself right
    after it)."""
    __slots__ = ("peak", "since", "low")

    def __init__(self, peak: float = -math.inf, since: int = 0, low: float = -math.inf):
        self.peak, self.since, self.low = peak, since, low

    def add(self, x: float) -> None:
        if x > self.peak:
            self.peak, self.since, self.low = x, 0, x
        else:
            self.since += 1
            self.low = min(self.low, x)


class WindowStates(NamedTuple):
    """For rows 1..m of one execution (m complete windows): what row w knows."""
    peak: np.ndarray          # (m, R) M: the maximum of every sample before the row's window
    last: np.ndarray          # (m, R) the last window's max
    code: np.ndarray          # (m, R) phase-blind state code
    last_phase: np.ndarray    # (m,) phase of the last sample before it (0 when phase-blind)


def window_states(usage: np.ndarray, phases: np.ndarray | None, window: int) -> WindowStates:
    """The state at the start of each window w = 1..m from the complete windows before it
    (the running form is :class:`ai4dl.policy.running.OwnHistory`)."""
    usage = np.asarray(usage, np.float64)
    m = len(usage) // window
    R = usage.shape[1]
    x = usage[: m * window].reshape(m, window, R).max(1)                 # window maxima
    M = np.empty((m, R))
    since = np.empty((m, R), np.int64)
    low = np.empty((m, R))
    for j in range(R):
        run = RunningPeak()
        for i in range(m):
            run.add(float(x[i, j]))
            M[i, j], since[i, j], low[i, j] = run.peak, run.since, run.low
    code = state_codes(np.arange(1, m + 1)[:, None], since, _ratio(x, M), _ratio(low, M))
    lp = (np.zeros(m, np.int64) if phases is None
          else np.asarray(phases, np.int64)[window - 1: m * window: window])
    return WindowStates(M, x, code, lp)


def levels(use_phase: bool) -> tuple[tuple[str, ...], ...]:
    """The pooling chain as feature-name tuples, finest first (``phase`` in front of the first
    level when the phase is used)."""
    return ((("phase",) + CHAIN[0],) if use_phase else ()) + CHAIN


def _digits(code: np.ndarray, phase: np.ndarray) -> dict[str, np.ndarray]:
    """Each feature's bin (and the phase) from state codes."""
    out = {"phase": np.asarray(phase, np.int64)}
    rest = np.asarray(code, np.int64)
    for f, size in zip(reversed(FEATURES), reversed(SIZES)):
        out[f] = rest % size
        rest = rest // size
    return out


def _sizes(n_phases: int) -> dict[str, int]:
    return {"phase": int(n_phases), **dict(zip(FEATURES, SIZES))}


def _level_key(digits: dict[str, np.ndarray], level: Sequence[str], n_phases: int
               ) -> np.ndarray:
    """Key of each state at a pooling level (mixed radix of the level's bins): unique within
    the level."""
    sizes = _sizes(n_phases)
    key = np.zeros_like(digits["phase"])
    for f in level:
        key = key * sizes[f] + digits[f]
    return key


def key_digits(key: int, level: Sequence[str], n_phases: int) -> list[int]:
    """The bins of a level key, in the level's feature order."""
    sizes = _sizes(n_phases)
    out = []
    for f in reversed(level):
        out.append(int(key % sizes[f]))
        key //= sizes[f]
    return out[::-1]


def digits_key(digits: Sequence[int], level: Sequence[str], n_phases: int) -> int:
    sizes = _sizes(n_phases)
    key = 0
    for f, d in zip(level, digits):
        if not 0 <= int(d) < sizes[f]:
            raise ValueError(f"bin {d} of {f} outside 0..{sizes[f] - 1}")
        key = key * sizes[f] + int(d)
    return key


class State(NamedTuple):
    """A fitted state: the pooling level (index into :func:`levels`), its key there, the
    multiplier, the training windows it was fitted on and the base it multiplies (index into
    :data:`ESTIMATORS`)."""
    level: int
    key: int
    multiplier: float
    windows: int
    estimator: int = 0


def resolve_states(code: np.ndarray, phase: np.ndarray, min_windows: int, use_phase: bool,
                   n_phases: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """The rare-state rule. ``code``/``phase`` per training window. A group of windows at the
    finest level with at least ``min_windows`` windows is a state; the others fall to the next
    coarser level, where groups of the fallen windows are judged the same way, and what falls
    through every level is one global state.

    Returns the state of each window (N,) and the states as (level, key, windows)."""
    chain = levels(use_phase)
    digits = _digits(code, phase)
    N = len(code)
    sid = np.full(N, -1, np.int64)
    states: list[tuple[int, int, int]] = []
    for li, level in enumerate(chain):
        left = sid < 0
        if not left.any():
            break
        key = _level_key(digits, level, n_phases)
        uniq, inverse, cnt = np.unique(key[left], return_inverse=True, return_counts=True)
        keep = np.ones(len(uniq), bool) if li == len(chain) - 1 else cnt >= min_windows
        ids = np.full(len(uniq), -1, np.int64)
        ids[keep] = len(states) + np.arange(int(keep.sum()))
        sid[left] = ids[inverse]
        states.extend((li, int(k), int(c)) for k, c in zip(uniq[keep], cnt[keep]))
    return sid, states


def cells_from_states(states: Sequence[State], use_phase: bool, n_phases: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lookup table of every (phase row, state code) cell: the multiplier, the estimator,
    the level and the windows of the first state along the pooling chain that holds it; a cell
    no state holds (no training window had it, down to the coarsest level that was fitted)
    gets the running maximum × the largest multiplier of the table, level ``len(levels)`` and
    0 windows. The fit and a table read from the model document both build their lookup table
    here."""
    chain = levels(use_phase)
    rows = n_phases if use_phase else 1
    digits = _digits(np.tile(np.arange(N_CODES), rows), np.repeat(np.arange(rows), N_CODES))
    mult = np.full(rows * N_CODES, np.nan)
    est = np.zeros(rows * N_CODES, np.int64)
    level = np.full(rows * N_CODES, len(chain), np.int64)
    windows = np.zeros(rows * N_CODES, np.int64)
    for li, lv in enumerate(chain):
        at = [s for s in states if s.level == li]
        if not at:
            continue
        keys = np.array([s.key for s in at], np.int64)
        order = np.argsort(keys)
        keys = keys[order]
        ck = _level_key(digits, lv, n_phases)
        pos = np.minimum(np.searchsorted(keys, ck), len(keys) - 1)
        hit = np.isnan(mult) & (keys[pos] == ck)
        sel = order[pos[hit]]
        mult[hit] = np.array([at[i].multiplier for i in sel])
        est[hit] = np.array([at[i].estimator for i in sel], np.int64)
        windows[hit] = np.array([at[i].windows for i in sel])
        level[hit] = li
    top = max((s.multiplier for s in states), default=1.0)
    mult[np.isnan(mult)] = top
    shape = (rows, N_CODES)
    return (mult.reshape(shape), est.reshape(shape), level.reshape(shape),
            windows.reshape(shape))



def bin_label(feature: str, b: int) -> str:
    """A bin as a reader wants it: ``3-5`` windows, ``>= 0.9`` of the peak, phase ``2``."""
    if feature == "phase":
        return str(b)
    edges = EDGES[FEATURES.index(feature)]
    lo = edges[b]
    if feature in ("elapsed", "since"):
        hi = edges[b + 1] - 1 if b + 1 < len(edges) else None
        return f"{lo}+" if hi is None else (str(lo) if hi == lo else f"{lo}-{hi}")
    if b + 1 == len(edges):
        return f">= {lo:g}"
    return f"< {edges[b + 1]:g}" if b == 0 else f"{lo:g}-{edges[b + 1]:g}"
