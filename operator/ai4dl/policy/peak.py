"""The peak-risk memory policy: the execution's running maximum times a multiplier learned per
state, fitted so that at most ``max_risk`` of windows are at risk.

Why. Memory is not compressible: a window in which any sample exceeds the request is a window
in which the container may be OOM-killed, however few samples exceed (../shared/docs/
evaluation.md, "Memory is judged by risk"). A policy that tracks the last window (adaptive-max)
pays for every recurring spike, and the clairvoyant constant (the execution's lifetime peak
held all along) is hard to beat. What can beat it is knowing, at the start of a window, whether
the execution has already shown the peak that comes back (then its running maximum is the level
to hold, or less right after the peak) or is still growing (then it needs head-room over it).

Allocation. Row 0 (cold start, nothing seen) is the ``1 − max_risk`` quantile of the training
executions' first-window peaks (:func:`ai4dl.policy.headroom_levels.first_window_level`), as the
head-room tables'. Row w >= 1 is, per resource, ``M_w × c[state_w]``: ``M_w`` the maximum of
every sample before window w, ``c`` a multiplier per state — or, in the states where the fit
finds it cheaper at the same risk, ``L_w × c[state_w]`` with ``L_w`` the last window's max
(:data:`ESTIMATORS`: where usage has left its peak for good, the peak is the wrong base).

State, per resource, from the windows before w only (the bins are :data:`ELAPSED_EDGES` ...):

- ``elapsed``: complete windows seen (1, 2, 3-5, 6+): memory ramps up early in a job's life;
- ``since``: windows since the last window that set a new running maximum (0, 1-2, 3+);
- ``ratio``: the last window's max ÷ M (below 0.7, 0.7-0.9, 0.9 and above): is the usage at its
  peak now, or below it;
- ``dip``: the lowest window max since the last new high ÷ M (the same bins; 1 when the last
  window set it): has the usage come down from its peak since it was set — a peak that came
  and went is one that can come back, a level that never came down is a plateau that can rise;
- with ``use_phase``, the phase of the last sample (the phase model's).

Rare states pool: the states are grouped along :data:`CHAIN` (the phase first, then ``dip``,
``ratio``, ``since``, ``elapsed`` are dropped in turn); a group with at least ``min_windows``
training windows not yet placed in a finer state gets its own multiplier, the rest fall to the
next coarser level, and what is left at the end shares one global multiplier. So every
multiplier but the global one is fitted on at least ``min_windows`` windows: an estimate of its
state's tail, not one lucky window.

Fit (per resource), a Lagrangian over states: minimise the total allocation Σ_w c[s_w] M_w n_w
(n_w the window's samples) subject to the share of training windows at risk (window max >
allocation) <= ``max_risk``. Per state the candidates are its sorted ratios window max ÷ base,
for each base (c = the j-th covers j windows); the lower convex hull of (windows covered, cost)
per state, and the hull's segments taken cheapest-per-covered-window first until the risk is
met, is the Lagrangian solution (every price λ of a covered window gives one point of it), but
for the last segment, which stops at the candidate that meets the risk exactly (see
:func:`risk_lagrangian`). A per-state cap (``state_risk``, default 5 × ``max_risk``) keeps the
optimiser from buying savings by leaving one state (e.g. every pod's second window) at risk
most of the time.

Calibration and ``min_windows``, out of fold. Multipliers fitted on the windows they are scored
on are optimistic (a state's max is a lucky draw of its tail). So the training executions are
split in ``folds`` by group (seeded); for each candidate ``min_windows`` (``ceil(f / max_risk)``
for f in :data:`MIN_WINDOWS_FACTORS`, unless one is given) the tables fitted on the other folds
allocate each fold's windows. Each candidate's out-of-fold ratios window max ÷ allocation give
its calibration factor (their ``1 − max_risk`` quantile: the one global factor at which exactly
``max_risk`` of the out-of-fold windows are at risk) and its cost at that factor; the cheapest
candidate is kept, refitted on every training execution, and its multipliers scaled by its
factor. ``min_windows`` and the factor are thus rules applied to the training data, not
constants tuned on results.

Serving is a table lookup (:meth:`PeakRiskPolicy.allocate` for the evaluator; the operator's
one-window call is :func:`ai4dl.policy.online.next_allocations`, from running statistics).
numpy only, no I/O.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from ai4dl.policy.headroom import check_table_call, check_training
from ai4dl.policy.headroom_levels import first_window_level

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
#: Candidate min_windows, as multiples of 1 / max_risk (selected out of fold).
MIN_WINDOWS_FACTORS = (1.0, 3.0, 10.0)
#: Relative nudge up of fitted multipliers: a product of a level and a ratio of two levels can
#: round just below the level it should reach.
_ULP = 1e-12
#: A state's own share of windows at risk may be at most this many times max_risk.
STATE_RISK_FACTOR = 5.0


def _bin(edges: Sequence[float], values) -> np.ndarray:
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
        code = code * len(edges) + _bin(edges, values)
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
    N, E = ratio.shape
    c = np.ones(n_states)
    est = np.zeros(n_states, np.int64)
    if N == 0:
        return c, est
    goal = int(math.ceil((1.0 - max_risk) * N - 1e-9))
    order = np.argsort(sid, kind="stable")
    bounds = np.searchsorted(sid[order], np.arange(n_states + 1))
    covered = 0
    segs_slope, segs_gain, segs_state, segs_c, segs_e, segs_from = [], [], [], [], [], []
    cands: dict = {}
    for s in range(n_states):
        lo, hi = bounds[s], bounds[s + 1]
        n = hi - lo
        if n == 0:
            continue
        need = (int(math.ceil((1.0 - state_risk) * n - 1e-9)) if state_risk is not None
                else 0)
        J, C, V, K = [], [], [], []
        for e in range(E):
            r = np.sort(ratio[order[lo:hi], e])
            vals, counts = np.unique(r, return_counts=True)
            cov = np.cumsum(counts)                                 # windows with ratio <= v
            # a ratio of inf (usage over a level of 0) is never covered
            n_fin = int(np.count_nonzero(np.isfinite(vals)))
            if n_fin == 0:
                continue
            first = min(int(np.searchsorted(cov, need, side="left")), n_fin - 1)
            U = float(unit[order[lo:hi], e].sum())
            J.append(cov[first:n_fin])
            V.append(vals[first:n_fin])
            C.append(vals[first:n_fin] * U)
            K.append(np.full(n_fin - first, e))
        if not J:
            continue
        J, C, V, K = (np.concatenate(a) for a in (J, C, V, K))
        o = np.lexsort((C, J))                    # by windows covered, then cost
        J, C, V, K = J[o].astype(np.float64), C[o], V[o], K[o]
        keep = np.r_[True, J[1:] != J[:-1]]       # the cheapest candidate per coverage
        J, C, V, K = J[keep], C[keep], V[keep], K[keep]
        hull = _lower_hull(J, C)
        c[s], est[s] = V[hull[0]], K[hull[0]]
        covered += int(J[hull[0]])
        cands[s] = (J, C, V, K)
        for a, b in zip(hull[:-1], hull[1:]):
            segs_slope.append((C[b] - C[a]) / (J[b] - J[a]))
            segs_gain.append(int(J[b] - J[a]))
            segs_state.append(s)
            segs_c.append(V[b])
            segs_e.append(K[b])
            segs_from.append(int(J[a]))
    for i in np.argsort(np.asarray(segs_slope), kind="stable"):
        if covered >= goal:
            break
        s = segs_state[i]
        if covered + segs_gain[i] > goal:
            # the last segment overshoots: stop inside it, at the cheapest candidate of its
            # state that meets the risk, so that the risk met on the training windows is the
            # objective, not a share of windows below it
            J, C, V, K = cands[s]
            ok = np.flatnonzero(J >= segs_from[i] + goal - covered)
            k = ok[int(np.argmin(C[ok]))]
            c[s], est[s] = V[k], K[k]
            break
        c[s], est[s] = segs_c[i], segs_e[i]
        covered += segs_gain[i]
    return c, est


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


def _order_statistic(r: np.ndarray, q: float) -> float:
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
    c = c * (1.0 + _ULP)
    return [State(li, key, float(ci), n, idx[int(ei)])
            for (li, key, n), ci, ei in zip(resolved, c, e)]


def _lookup(mult: np.ndarray, est: np.ndarray, peak: np.ndarray, last: np.ndarray,
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


class PeakRiskPolicy:
    """Running maximum × a multiplier per state, fitted for at most ``max_risk`` of windows at
    risk (see the module docstring). scikit-learn style: parameters in the constructor,
    :meth:`fit` learns the tables (attributes ending in ``_``), :meth:`allocate` serves the
    evaluator's rows (the operator's next window: :func:`ai4dl.policy.online.next_allocations`).

    ``min_windows`` None (the default) selects it out of fold among ``ceil(f / max_risk)`` for
    f in :data:`MIN_WINDOWS_FACTORS`; ``calibrate`` scales the multipliers by the out-of-fold
    factor; ``folds`` the executions are split in for both, by group, shuffled with ``seed``
    (fewer than 2 groups: no selection, no calibration); ``state_risk`` None is
    :data:`STATE_RISK_FACTOR` × ``max_risk`` (0 switches the cap off); ``estimators`` the bases
    a state may multiply (:data:`ESTIMATORS`); ``name`` defaults to ``peak-risk`` with or
    without the phase (the phase-blind control is named ``peak-risk-blind`` by whoever fits it
    as one: the probe, a document table of that name).
    """

    needs_phases: bool

    def __init__(self, *, max_risk: float = 0.01, use_phase: bool = True, folds: int = 5,
                 min_windows: int | None = None, calibrate: bool = True, seed: int = 0,
                 state_risk: float | None = None, estimators: Sequence[str] = ESTIMATORS,
                 name: str | None = None):
        self.max_risk = max_risk
        self.use_phase = use_phase
        self.folds = folds
        self.min_windows = min_windows
        self.calibrate = calibrate
        self.seed = seed
        self.state_risk = state_risk
        self.estimators = tuple(estimators)
        # one name with or without the phase (auto and the evaluator register "peak-risk" and
        # fit it phase-blind where there is no phase model); name the control explicitly
        self.name = name or "peak-risk"

    @property
    def needs_phases(self) -> bool:
        return bool(self.use_phase)

    # ------------------------------------------------------------------ rules
    def _check_params(self) -> None:
        if not (isinstance(self.max_risk, (int, float)) and not isinstance(self.max_risk, bool)
                and 0.0 < self.max_risk < 1.0):
            raise ValueError(f"max_risk must be in (0, 1), got {self.max_risk!r}")
        if self.min_windows is not None and (not isinstance(self.min_windows, (int, np.integer))
                                             or self.min_windows < 1):
            raise ValueError(f"min_windows must be an integer >= 1, got {self.min_windows!r}")
        if not isinstance(self.folds, (int, np.integer)) or self.folds < 2:
            raise ValueError(f"folds must be an integer >= 2, got {self.folds!r}")
        if self.state_risk is not None and not 0.0 <= self.state_risk <= 1.0:
            raise ValueError(f"state_risk must be in [0, 1], got {self.state_risk!r}")
        if not self.estimators or any(e not in ESTIMATORS for e in self.estimators):
            raise ValueError(f"estimators must be some of {', '.join(ESTIMATORS)}, got "
                             f"{self.estimators!r}")

    def resolved_state_risk(self) -> float | None:
        if self.state_risk is None:
            return min(1.0, STATE_RISK_FACTOR * self.max_risk)
        return None if self.state_risk == 0 else float(self.state_risk)

    def candidate_min_windows(self) -> list[int]:
        if self.min_windows is not None:
            return [int(self.min_windows)]
        return sorted({int(math.ceil(f / self.max_risk - 1e-9)) for f in MIN_WINDOWS_FACTORS})

    # ------------------------------------------------------------------ fit
    def fit(self, usages: Sequence[np.ndarray], phases: Sequence[np.ndarray | None] | None,
            window: int, n_phases: int | None = None, resources: Sequence[str] | None = None,
            groups: Sequence | None = None) -> "PeakRiskPolicy":
        """Learn the tables from training executions: ``usages`` one (n, R) array each,
        ``phases`` one label array each (ignored, may be None, when phase-blind), ``window``
        samples per window, ``n_phases`` the phase model's k (default: the largest label + 1),
        ``groups`` one workload key per execution for the out-of-fold split (default: each
        execution its own)."""
        self._check_params()
        usages, phases, k = check_training(self.name, self.use_phase, usages, phases, window,
                                           n_phases)
        R = usages[0].shape[1]
        if groups is None:
            groups = list(range(len(usages)))
        if len(groups) != len(usages):
            raise ValueError("groups must have one entry per execution")
        self.window_ = int(window)
        self.n_phases_ = k
        self.resources_ = tuple(resources) if resources is not None else tuple(
            f"r{j}" for j in range(R))
        if len(self.resources_) != R:
            raise ValueError(f"{len(self.resources_)} resource names for {R} usage columns")
        self.cold_start_ = first_window_level(usages, window, 1.0 - self.max_risk)
        rows = training_rows(usages, phases, window)
        shape = (R, k, N_CODES)
        self.multiplier_ = np.ones(shape)
        self.estimator_ = np.zeros(shape, np.int64)
        self.pooled_ = np.full(shape, len(levels(self.use_phase)), np.int64)
        self.support_ = np.zeros(shape, np.int64)
        self.states_: list[list[State]] = [[] for _ in range(R)]
        self.min_windows_ = np.zeros(R, np.int64)
        self.calibration_ = np.ones(R)
        self.fit_report_ = [{} for _ in range(R)]
        if rows is None:
            return self           # nothing to learn from: the running maximum, everywhere
        fold_of_exec = group_folds(groups, self.folds, self.seed)
        fold = fold_of_exec[rows.execution]
        n_folds = len(np.unique(fold))
        state_risk = self.resolved_state_risk()
        for r in range(R):
            cols = (rows.peak[:, r], rows.last[:, r], rows.code[:, r], rows.phase,
                    rows.target[:, r], rows.length)
            best = None
            report: dict = {"windows": float(len(fold))}
            for mw in self.candidate_min_windows():
                g, cost = 1.0, float("nan")
                if n_folds >= 2 and (self.calibrate or len(self.candidate_min_windows()) > 1):
                    alloc = np.empty(len(fold))
                    for f in range(self.folds):
                        test = fold == f
                        if not test.any():
                            continue
                        tr = ~test
                        st = fit_states(*(a[tr] for a in cols), mw, self.max_risk,
                                        self.use_phase, k, state_risk, self.estimators)
                        mult, est = cells_from_states(st, self.use_phase, k)[:2]
                        alloc[test] = _lookup(mult, est, *(a[test] for a in cols[:4]))
                    with np.errstate(divide="ignore", invalid="ignore"):
                        q = np.where(alloc > 0, cols[4] / np.where(alloc > 0, alloc, 1.0),
                                     np.where(cols[4] > 0, np.inf, 0.0))
                    g = _order_statistic(q, 1.0 - self.max_risk)
                    cost = g * float((alloc * cols[5]).sum())
                    report[f"oof_cost_mw{mw}"] = cost
                    report[f"oof_factor_mw{mw}"] = g
                    if not np.isfinite(g):
                        cost = float("inf")
                if best is None or cost < best[1] or not np.isfinite(best[1]):
                    best = (mw, cost, g)
            mw, _, g = best
            factor = g * (1.0 + _ULP) if (self.calibrate and np.isfinite(g) and g > 0) \
                else 1.0
            states = [st._replace(multiplier=st.multiplier * factor)
                      for st in fit_states(*cols, mw, self.max_risk, self.use_phase, k,
                                           state_risk, self.estimators)]
            self.states_[r] = states
            (self.multiplier_[r], self.estimator_[r], self.pooled_[r],
             self.support_[r]) = cells_from_states(states, self.use_phase, k)
            self.min_windows_[r] = mw
            self.calibration_[r] = factor
            fitted = _lookup(self.multiplier_[r], self.estimator_[r], *cols[:4])
            report.update({"min_windows": float(mw), "calibration": float(factor),
                           "train_risk": float(np.mean(cols[4] > fitted))})
            self.fit_report_[r] = report
        return self

    # ------------------------------------------------------------------ serving
    def _check_fitted(self) -> None:
        if not hasattr(self, "multiplier_"):
            raise ValueError(f"{self.name} is not fitted: call fit() or load its table")

    def lookup(self, peak: np.ndarray, last: np.ndarray, code: np.ndarray,
               phase: np.ndarray | None) -> np.ndarray:
        """(rows, R) allocations: the multiplier of each row's state (``code`` (rows, R),
        ``phase`` (rows,) or None) × its estimator's level (``peak``, the running maximum, or
        ``last``, the last window's max, each (rows, R))."""
        rows, R = np.shape(peak)
        p = np.zeros(rows, np.int64) if (phase is None or not self.use_phase) else \
            np.asarray(phase, np.int64)
        if rows and (p.min() < 0 or p.max() >= self.n_phases_):
            raise ValueError(f"phase {int(p.max())} outside the table's {self.n_phases_} phases")
        out = np.empty((rows, R))
        for r in range(R):
            out[:, r] = _lookup(self.multiplier_[r], self.estimator_[r], peak[:, r],
                                last[:, r], code[:, r], p)
        return out

    def cautious(self, elapsed: np.ndarray, phase: np.ndarray | None) -> np.ndarray:
        """(rows, R) the largest multiplier over every state with this many windows seen and
        this phase: what a container whose history lacks the state's other features gets, times
        its running maximum (never less than any of those states would give it: the last
        window's max is at most the running maximum)."""
        e = _bin(ELAPSED_EDGES, np.asarray(elapsed))
        p = np.zeros(len(e), np.int64) if (phase is None or not self.use_phase) else \
            np.asarray(phase, np.int64)
        per = N_CODES // SIZES[0]
        m = self.multiplier_.reshape(len(self.multiplier_), self.n_phases_, SIZES[0], per)
        return m.max(3)[:, p, e].T

    def _check_call(self, usage, phases, window):
        return check_table_call(self, usage, phases, window)

    def allocate(self, usage, phases, window, initial, step):
        """Rows 0..n//window: row 0 the learned cold-start level, row w the running maximum
        before window w × its state's multiplier (samples before w only)."""
        usage, phases = self._check_call(usage, phases, window)
        st = window_states(usage, phases, window)
        return np.vstack([self.cold_start_[None, :],
                          self.lookup(st.peak, st.last, st.code, st.last_phase)])

    # ------------------------------------------------------------------ description
    def state_rows(self) -> list[dict]:
        """One dict per fitted state (resource, pooling level, the bins that define it, the
        estimator and multiplier, the training windows behind it): what describe prints."""
        self._check_fitted()
        chain = levels(self.use_phase)
        out = []
        for r, res in enumerate(self.resources_):
            for st in self.states_[r]:
                lv = chain[st.level]
                bins = dict(zip(lv, key_digits(st.key, lv, self.n_phases_)))
                out.append({"resource": res, "level": " × ".join(lv) or "global",
                            "state": ", ".join(f"{f} {bin_label(f, b)}" for f, b in bins.items())
                            or "every other window",
                            "estimator": ESTIMATORS[st.estimator],
                            "multiplier": float(st.multiplier), "windows": int(st.windows)})
        return out


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


# ----------------------------------------------------------------------------- document
def to_table(policy: PeakRiskPolicy):
    """The fitted policy as the model document's :class:`~ai4dl.method.document.RiskTable`."""
    from ai4dl.method.document import (RiskFeature, RiskResourceTable, RiskState, RiskTable,
                                       to_list)

    policy._check_fitted()
    chain = levels(policy.use_phase)
    res = []
    for r, name in enumerate(policy.resources_):
        states = [RiskState(level=st.level, bins=key_digits(st.key, chain[st.level],
                                                            policy.n_phases_),
                            estimator=ESTIMATORS[st.estimator],
                            multiplier=float(to_list(st.multiplier)), windows=st.windows)
                  for st in policy.states_[r]]
        res.append(RiskResourceTable(resource=name, coldStart=float(to_list(
            policy.cold_start_[r])), minWindows=max(1, int(policy.min_windows_[r])),
            calibration=float(to_list(policy.calibration_[r])), states=states))
    fit = [{k: float(v) for k, v in rep.items() if np.isfinite(v)}
           for rep in policy.fit_report_] if policy.fit_report_ else None
    return RiskTable(name=policy.name, usesPhase=policy.use_phase, phases=policy.n_phases_,
                     maxRisk=policy.max_risk, windowSamples=policy.window_,
                     features=[RiskFeature(name=f, edges=list(map(float, e)))
                               for f, e in zip(FEATURES, EDGES)],
                     levels=[list(lv) for lv in chain], resources=res, fit=fit)


def from_table(table) -> PeakRiskPolicy:
    """A fitted :class:`PeakRiskPolicy` from a validated document table. ValueError (one line)
    when the table's features, bins or pooling chain are not this version's (refit)."""
    got = ([(f.name, tuple(f.edges)) for f in table.features],
           [tuple(lv) for lv in table.levels])
    want = ([(f, tuple(map(float, e))) for f, e in zip(FEATURES, EDGES)],
            list(levels(table.uses_phase)))
    if got != want:
        raise ValueError(f"the {table.name} table was fitted with other state features or "
                         f"pooling levels than this version uses: retrain")
    pol = PeakRiskPolicy(max_risk=table.max_risk, use_phase=table.uses_phase, name=table.name)
    k = table.phases
    chain = levels(table.uses_phase)
    R = len(table.resources)
    pol.window_ = table.window_samples
    pol.n_phases_ = k
    pol.resources_ = tuple(r.resource for r in table.resources)
    pol.cold_start_ = np.array([r.cold_start for r in table.resources], np.float64)
    pol.min_windows_ = np.array([r.min_windows for r in table.resources], np.int64)
    pol.calibration_ = np.array([r.calibration for r in table.resources], np.float64)
    pol.states_ = [[State(s.level, digits_key(s.bins, chain[s.level], k), s.multiplier,
                          s.windows, ESTIMATORS.index(s.estimator)) for s in r.states]
                   for r in table.resources]
    pol.estimators = tuple(sorted({ESTIMATORS[s.estimator] for st in pol.states_ for s in st},
                                  key=ESTIMATORS.index)) or ESTIMATORS[:1]
    shape = (R, k, N_CODES)
    pol.multiplier_ = np.empty(shape)
    pol.estimator_ = np.empty(shape, np.int64)
    pol.pooled_ = np.empty(shape, np.int64)
    pol.support_ = np.empty(shape, np.int64)
    for j, states in enumerate(pol.states_):
        pol.multiplier_[j], pol.estimator_[j], pol.pooled_[j], pol.support_[j] = \
            cells_from_states(states, table.uses_phase, k)
    pol.fit_report_ = [dict(d) for d in table.fit] if table.fit else [{} for _ in range(R)]
    return pol
