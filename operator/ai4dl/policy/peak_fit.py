"""The peak-risk policy's fit: training rows, the Lagrangian over states, out-of-fold groups."""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from ai4dl.policy.peak_states import ESTIMATORS, State, resolve_states, window_states

#: Relative nudge up of fitted multipliers: a product of a level and a ratio of two levels can
#: round just below the level it should reach.
ULP = 1e-12


def risk_lagrangian(ratio: np.ndarray, unit: np.ndarray, sid: np.ndarray, n_states: int,
                    max_risk: float, state_risk: float | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per state the estimator e and multiplier c minimising Σ_w c[s_w] unit_w[e] subject to
    at most ``max_risk`` of the windows having ratio_w[e] > c[s_w] (and, when ``state_risk`` is
    given, at most that share of each state's own windows). ``ratio`` and ``unit`` are (N, E),
    one column per candidate estimator (ratio: window max ÷ the estimator's level; unit: the
    level × the window's samples), or (N,) for one.

    Per state, c = the j-th smallest ratio of an estimator covers j windows at cost c × Σ unit:
    the lower convex hull of those points (every estimator's, from the state's least admissible
    j), its segments merged over states cheapest per covered window first until the risk is
    met — the solution of the Lagrangian (min cost − λ × windows covered, λ the price of a
    covered window) at the least λ meeting the risk, except that the last segment taken stops
    at the cheapest candidate of its state that meets the risk (a hull segment can skip many
    candidates: stopping at its end would cover more windows than asked, and by how much would
    vary from fit to fit). A state whose windows all have ratio 0 gets 0; a state with no
    window, or none that can be covered, 1 × estimator 0. Returns (c, estimator) per state."""
    ratio = np.asarray(ratio, np.float64)
    unit = np.asarray(unit, np.float64)
    if ratio.ndim == 1:
        ratio, unit = ratio[:, None], unit[:, None]
    N, _ = ratio.shape
    c = np.ones(n_states)
    est = np.zeros(n_states, np.int64)
    if N == 0:
        return c, est
    goal = int(math.ceil((1.0 - max_risk) * N - 1e-9))
    order = np.argsort(sid, kind="stable")
    bounds = np.searchsorted(sid[order], np.arange(n_states + 1))
    covered = 0
    segs: list[_Segment] = []
    cands: dict = {}
    for s in range(n_states):
        lo, hi = bounds[s], bounds[s + 1]
        n = hi - lo
        if n == 0:
            continue
        need = (int(math.ceil((1.0 - state_risk) * n - 1e-9)) if state_risk is not None
                else 0)
        points = _state_candidates(ratio, unit, order[lo:hi], need)
        if points is None:
            continue
        J, C, V, K = cands[s] = points
        hull = _lower_hull(J, C)
        c[s], est[s] = V[hull[0]], K[hull[0]]
        covered += int(J[hull[0]])
        segs.extend(_hull_segments(s, hull, J, C, V, K))
    _take_segments(segs, cands, covered, goal, c, est)
    return c, est


class _Segment(NamedTuple):
    """One segment of a state's lower hull: from covering ``start`` windows to ``start`` +
    ``gain``, at ``slope`` cost per window, ending at multiplier ``c`` of estimator ``e``."""
    slope: float
    gain: int
    state: int
    c: float
    e: int
    start: int


def _state_candidates(ratio: np.ndarray, unit: np.ndarray, rows: np.ndarray, need: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """One state's candidates (its windows ``rows``), the cheapest per number of windows
    covered, by windows covered: (windows covered J, cost C, multiplier V, estimator K), from
    the least admissible coverage ``need``; None when no window can be covered."""
    J, C, V, K = [], [], [], []
    for e in range(ratio.shape[1]):
        r = np.sort(ratio[rows, e])
        vals, counts = np.unique(r, return_counts=True)
        cov = np.cumsum(counts)                                 # windows with ratio <= v
        # a ratio of inf (usage over a level of 0) is never covered
        n_fin = int(np.count_nonzero(np.isfinite(vals)))
        if n_fin == 0:
            continue
        first = min(int(np.searchsorted(cov, need, side="left")), n_fin - 1)
        U = float(unit[rows, e].sum())
        J.append(cov[first:n_fin])
        V.append(vals[first:n_fin])
        C.append(vals[first:n_fin] * U)
        K.append(np.full(n_fin - first, e))
    if not J:
        return None
    J, C, V, K = (np.concatenate(a) for a in (J, C, V, K))
    o = np.lexsort((C, J))                    # by windows covered, then cost
    J, C, V, K = J[o].astype(np.float64), C[o], V[o], K[o]
    keep = np.r_[True, J[1:] != J[:-1]]       # the cheapest candidate per coverage
    return J[keep], C[keep], V[keep], K[keep]


def _hull_segments(s: int, hull: list[int], J: np.ndarray, C: np.ndarray, V: np.ndarray,
                   K: np.ndarray) -> list[_Segment]:
    """The segments of state ``s``'s lower hull ``hull`` over its candidates, in order."""
    return [_Segment((C[b] - C[a]) / (J[b] - J[a]), int(J[b] - J[a]), s, V[b], K[b], int(J[a]))
            for a, b in zip(hull[:-1], hull[1:])]


def _take_segments(segs: list[_Segment], cands: dict, covered: int, goal: int, c: np.ndarray,
                   est: np.ndarray) -> None:
    """Take hull segments cheapest per covered window first until ``goal`` windows are
    covered, updating each state's multiplier ``c`` and estimator ``est`` in place."""
    for i in np.argsort(np.asarray([seg.slope for seg in segs]), kind="stable"):
        if covered >= goal:
            break
        seg = segs[i]
        s = seg.state
        if covered + seg.gain > goal:
            # the last segment overshoots: stop inside it, at the cheapest candidate of its
            # state that meets the risk, so that the risk met on the training windows is the
            # objective, not a share of windows below it
            J, C, V, K = cands[s]
            ok = np.flatnonzero(J >= seg.start + goal - covered)
            k = ok[int(np.argmin(C[ok]))]
            c[s], est[s] = V[k], K[k]
            break
        c[s], est[s] = seg.c, seg.e
        covered += seg.gain


def _lower_hull(x: np.ndarray, y: np.ndarray) -> list[int]:
    """Indices of the lower convex hull of points sorted by increasing x (monotone chain)."""
    hull: list[int] = []
    for i in range(len(x)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b is not below the segment a -> i: drop it
            if (y[b] - y[a]) * (x[i] - x[a]) >= (y[i] - y[a]) * (x[b] - x[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    return hull


def order_statistic(r: np.ndarray, q: float) -> float:
    """The least m with share(r <= m) >= q."""
    need = min(max(int(math.ceil(q * len(r) - 1e-9)), 1), len(r))
    return float(np.partition(r, need - 1)[need - 1])


class TrainingRows(NamedTuple):
    """Every training window after the cold start that has samples, as the fit sees it."""
    peak: np.ndarray          # (N, R) M at its start
    last: np.ndarray          # (N, R) the max of the window before it
    code: np.ndarray          # (N, R) phase-blind state code
    phase: np.ndarray         # (N,) phase of the last sample before it (0: phase-blind)
    target: np.ndarray        # (N, R) its own max
    length: np.ndarray        # (N,) its samples
    execution: np.ndarray     # (N,) which execution


def training_rows(usages: Sequence[np.ndarray], phases: Sequence[np.ndarray | None],
                  window: int) -> TrainingRows | None:
    P, X, C, PH, T, L, E = [], [], [], [], [], [], []
    for i, (u, p) in enumerate(zip(usages, phases)):
        if len(u) == 0:
            continue
        st = window_states(u, p, window)
        rows = min(len(st.peak), -(-len(u) // window) - 1)   # rows whose window has samples
        if rows <= 0:
            continue
        starts = np.arange(1, rows + 1) * window
        T.append(np.maximum.reduceat(u[window:], starts - window, axis=0)[:rows])
        P.append(st.peak[:rows])
        X.append(st.last[:rows])
        C.append(st.code[:rows])
        PH.append(st.last_phase[:rows])
        L.append(np.minimum(window, len(u) - starts))
        E.append(np.full(rows, i))
    if not P:
        return None
    return TrainingRows(*(np.concatenate(a) for a in (P, X, C, PH, T, L, E)))


def fit_states(peak: np.ndarray, last: np.ndarray, code: np.ndarray, phase: np.ndarray,
               target: np.ndarray, length: np.ndarray, min_windows: int, max_risk: float,
               use_phase: bool, n_phases: int, state_risk: float | None,
               estimators: Sequence[str] = ESTIMATORS) -> list[State]:
    """One resource's states from its training rows: the pooling rule, then the Lagrangian
    over the ``estimators`` (names in :data:`ESTIMATORS`)."""
    sid, resolved = resolve_states(code, phase, min_windows, use_phase, n_phases)
    idx = [ESTIMATORS.index(e) for e in estimators]
    base = np.stack([peak, last], 1)[:, idx]                        # (N, E)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(base > 0, target[:, None] / np.where(base > 0, base, 1.0),
                         np.where(target[:, None] > 0, np.inf, 0.0))
    c, e = risk_lagrangian(ratio, base * length[:, None], sid, len(resolved), max_risk,
                           state_risk)
    # a level × (window max ÷ level) can round a hair below the window max it should cover
    c = c * (1.0 + ULP)
    return [State(li, key, float(ci), n, idx[int(ei)])
            for (li, key, n), ci, ei in zip(resolved, c, e)]


def lookup_cells(mult: np.ndarray, est: np.ndarray, peak: np.ndarray, last: np.ndarray,
            code: np.ndarray, phase: np.ndarray) -> np.ndarray:
    e = est[phase, code]
    return np.where(e == 0, peak, last) * mult[phase, code]


def group_folds(groups: Sequence, folds: int, seed: int) -> np.ndarray:
    """A fold number per execution: whole groups per fold, groups shuffled (seeded)."""
    keys = np.asarray([str(g) for g in groups], dtype=object)
    uniq = np.array(sorted(set(keys)), dtype=object)
    rng = np.random.default_rng(seed)
    rng.shuffle(uniq)
    of = {g: i % folds for i, g in enumerate(uniq)}
    return np.array([of[g] for g in keys], np.int64)

