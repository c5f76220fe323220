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

Calibration, ``min_windows`` and the phase, out of fold. Multipliers fitted on the windows they
are scored on are optimistic (a state's max is a lucky draw of its tail). So the training
executions are split in ``folds`` by group (seeded); for each candidate ``min_windows``
(``ceil(f / max_risk)`` for f in :data:`MIN_WINDOWS_FACTORS`, unless one is given), with and
(when ``use_phase``) without the phase slot, the tables fitted on the other folds allocate each
fold's windows. Each candidate's out-of-fold ratios window max ÷ allocation give its
calibration factor (their ``1 − max_risk`` quantile: the one global factor at which exactly
``max_risk`` of the out-of-fold windows are at risk) and its cost at that factor; the cheapest
candidate is kept (a tie: the phase-blind one), refitted on every training execution, and its
multipliers scaled by its factor. ``min_windows``, the phase slot and the factor are thus rules
applied to the training data, not constants tuned on results. The phase slot is chosen, not
assumed, because phase states split the windows: at 1 % a state needs hundreds of windows for
its tail, and where the phases do not tell the tails apart the split only adds noise (a table
without the phase, in a policy that may use it, holds its states below the phase's level: every
phase then reads the same multiplier, ``phase_used_`` False).

Serving is a table lookup (:meth:`PeakRiskPolicy.allocate` for the evaluator; the operator's
one-window call is :func:`ai4dl.policy.online.next_allocations`, from running statistics).
numpy only, no I/O.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ai4dl.method.document_tables import RiskTable, RiskFeature, RiskResourceTable, RiskState
from ai4dl.method.document import to_list
from ai4dl.policy.headroom import check_table_call, check_training
from ai4dl.policy.headroom_levels import first_window_level
from ai4dl.policy.peak_fit import (ULP, lookup_cells, order_statistic, fit_states, group_folds,
                                   training_rows)
from ai4dl.policy.peak_states import (EDGES, ELAPSED_EDGES, ESTIMATORS, FEATURES, N_CODES, SIZES,
                                      State, state_bin, bin_label, cells_from_states, digits_key,
                                      key_digits, levels, state_codes, window_states)
from ai4dl.policy.registry import Declared, FitInputs, StoredTable, declare

#: The policy's name (the phase-blind control is named ``peak-risk-blind`` by whoever fits it).
PEAK_RISK = "peak-risk"

#: Candidate min_windows, as multiples of 1 / max_risk (selected out of fold).
MIN_WINDOWS_FACTORS = (1.0, 3.0, 10.0)
#: A state's own share of windows at risk may be at most this many times max_risk.
STATE_RISK_FACTOR = 5.0


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
    a state may multiply (:data:`ESTIMATORS`); ``select_phase`` (with ``use_phase``) lets the
    same out-of-fold cost decide whether the phase slot is kept (False: always kept, for a
    caller whose question is what the slot carries); ``name`` defaults to ``peak-risk`` with or
    without the phase (the phase-blind control is named ``peak-risk-blind`` by whoever fits it
    as one: the probe, a document table of that name).
    """

    needs_phases: bool

    def __init__(self, *, max_risk: float = 0.01, use_phase: bool = True, folds: int = 5,
                 min_windows: int | None = None, calibrate: bool = True, seed: int = 0,
                 state_risk: float | None = None, estimators: Sequence[str] = ESTIMATORS,
                 name: str | None = None, select_phase: bool = True):
        self.max_risk = max_risk
        self.use_phase = use_phase
        self.select_phase = select_phase
        self.folds = folds
        self.min_windows = min_windows
        self.calibrate = calibrate
        self.seed = seed
        self.state_risk = state_risk
        self.estimators = tuple(estimators)
        # one name with or without the phase (auto and the evaluator register "peak-risk" and
        # fit it phase-blind where there is no phase model); name the control explicitly
        self.name = name or PEAK_RISK

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
        # (phase used, min_windows) pairs, phase-blind first: on a tie the simpler table wins,
        # and with no folds to choose by, the last (the phase, the most pooling) is kept
        if not self.use_phase:
            slots = (False,)
        else:
            slots = (False, True) if self.select_phase else (True,)
        candidates = [(ph, mw) for ph in slots for mw in self.candidate_min_windows()]
        for r in range(R):
            cols = (rows.peak[:, r], rows.last[:, r], rows.code[:, r], rows.phase,
                    rows.target[:, r], rows.length)
            self._fit_resource(r, cols, fold, n_folds, candidates, k, state_risk)
        return self

    def next_from_running(self, lasts: np.ndarray, last_phases: np.ndarray | None,
                         owns) -> np.ndarray:
        """(P, R): the table for every container at once, from their last windows and running
        statistics (ai4dl.policy.online). A record that does not know its windows seen
        (written before they were kept) counts them from its samples; one that does not know
        its windows since the last new high gets, until its next new high, the largest
        multiplier of any state with its windows seen and phase (:meth:`cautious`)."""
        W = lasts.shape[1]
        peak = np.stack([o.peak for o in owns])                                    # (P, R)
        since = np.stack([o.since_high for o in owns])
        low = np.stack([o.low_since_high for o in owns])
        windows = np.array([o.windows if o.windows >= 0 else max(1, int(o.n) // W)
                            for o in owns], np.int64)
        phase = (np.asarray(last_phases)[:, -1].astype(np.int64) if self.use_phase else None)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(peak > 0, lasts.max(1) / np.where(peak > 0, peak, 1.0), 1.0)
            dip = np.where(peak > 0, low / np.where(peak > 0, peak, 1.0), 1.0)
        unknown = since < 0
        code = state_codes(windows[:, None], np.maximum(since, 0), ratio,
                           np.where(unknown, 1.0, dip))
        out = self.lookup(peak, lasts.max(1), code, phase)
        if unknown.any():
            out = np.where(unknown, peak * self.cautious(windows, phase), out)
        return out

    def _fit_resource(self, r: int, cols, fold: np.ndarray, n_folds: int, candidates, k: int,
                      state_risk) -> None:
        """Resource ``r``'s table: the (phase used, min_windows) candidate cheapest out of
        fold, refit on every window and calibrated by its out-of-fold factor."""
        best = None
        report: dict = {"windows": float(len(fold))}
        for ph, mw in candidates:
            g, cost = 1.0, float("nan")
            if n_folds >= 2 and (self.calibrate or len(candidates) > 1):
                g, cost = self._out_of_fold(cols, fold, mw, ph, k, state_risk)
                tag = f"{'_phase' if ph else ''}_mw{mw}"
                report[f"oof_cost{tag}"] = cost
                report[f"oof_factor{tag}"] = g
                if not np.isfinite(g):
                    cost = float("inf")
            if best is None or cost < best[2] or not np.isfinite(best[2]):
                best = (ph, mw, cost, g)
        ph, mw, _, g = best
        factor = g * (1.0 + ULP) if (self.calibrate and np.isfinite(g) and g > 0) \
            else 1.0
        states = [st._replace(multiplier=st.multiplier * factor)
                  for st in self._states(cols, None, mw, ph, k, state_risk)]
        self.states_[r] = states
        (self.multiplier_[r], self.estimator_[r], self.pooled_[r],
         self.support_[r]) = cells_from_states(states, self.use_phase, k)
        self.min_windows_[r] = mw
        self.calibration_[r] = factor
        fitted = lookup_cells(self.multiplier_[r], self.estimator_[r], *cols[:4])
        report.update({"min_windows": float(mw), "calibration": float(factor),
                       "phase": float(ph),
                       "train_risk": float(np.mean(cols[4] > fitted))})
        self.fit_report_[r] = report

    def _out_of_fold(self, cols, fold: np.ndarray, min_windows: int, phase: bool, k: int,
                     state_risk) -> tuple[float, float]:
        """One candidate's out-of-fold calibration factor (the order statistic of usage ÷
        allocation at the share covered) and its cost at that factor."""
        alloc = np.empty(len(fold))
        for f in range(self.folds):
            test = fold == f
            if not test.any():
                continue
            tr = ~test
            st = self._states(cols, tr, min_windows, phase, k, state_risk)
            mult, est = cells_from_states(st, self.use_phase, k)[:2]
            alloc[test] = lookup_cells(mult, est, *(a[test] for a in cols[:4]))
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(alloc > 0, cols[4] / np.where(alloc > 0, alloc, 1.0),
                         np.where(cols[4] > 0, np.inf, 0.0))
        g = order_statistic(q, 1.0 - self.max_risk)
        return g, g * float((alloc * cols[5]).sum())

    def _states(self, cols, rows, min_windows: int, phase: bool, k: int,
                state_risk: float | None) -> list[State]:
        """One resource's states fitted on its training rows ``rows`` (a mask; None: all),
        with or without the ``phase`` slot, as states of this policy's pooling chain: a
        phase-blind fit in a table that may use the phase is its levels below the phase's
        (every phase row of a cell then holds the same state)."""
        sel = cols if rows is None else tuple(a[rows] for a in cols)
        states = fit_states(*sel, min_windows, self.max_risk, phase, k, state_risk,
                            self.estimators)
        if self.use_phase and not phase:
            states = [st._replace(level=st.level + 1) for st in states]
        return states

    @property
    def phase_used_(self) -> np.ndarray:
        """Per resource: whether its fitted states tell the phases apart (the fit chose the
        phase slot out of fold; a table without it serves every phase the same)."""
        self._check_fitted()
        return np.array([any(st.level == 0 for st in states) if self.use_phase else False
                         for states in self.states_], bool)

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
            out[:, r] = lookup_cells(self.multiplier_[r], self.estimator_[r], peak[:, r],
                                last[:, r], code[:, r], p)
        return out

    def cautious(self, elapsed: np.ndarray, phase: np.ndarray | None) -> np.ndarray:
        """(rows, R) the largest multiplier over every state with this many windows seen and
        this phase: what a container whose history lacks the state's other features gets, times
        its running maximum (never less than any of those states would give it: the last
        window's max is at most the running maximum)."""
        e = state_bin(ELAPSED_EDGES, np.asarray(elapsed))
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


# ----------------------------------------------------------------------------- document
def to_table(policy: PeakRiskPolicy):
    """The fitted policy as the model document's :class:`~ai4dl.method.document.RiskTable`."""
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


def _fit_peak_risk(inputs: FitInputs) -> PeakRiskPolicy:
    """The table fitted to a share of windows at risk (``inputs.target`` is the share covered,
    1 − risk) on the training executions ``only``, with the phase where every one has it;
    calibrated out of fold by workload (a job's executions never on both sides)."""
    train, model = inputs.train, inputs.model
    if train is None:
        raise ValueError(f"policy {PEAK_RISK!r} is fitted on training executions")
    idx = inputs.indices
    use_phase = model is not None and all(train.phases[i] is not None for i in idx)
    groups = [train.groups[i] for i in idx] if train.groups else None
    return PeakRiskPolicy(max_risk=1.0 - inputs.target, use_phase=use_phase).fit(
        [train.usage[i] for i in idx], [train.phases[i] for i in idx] if use_phase else None,
        inputs.window, model.n_phases_ if use_phase else None, tuple(train.resources),
        groups=groups)


declare(Declared(
    PEAK_RISK, "fitted", rank=70, build=_fit_peak_risk,
    table=StoredTable("riskTables", "risk_tables_", from_table), needs_phases=True,
    phase_optional=True, uses_training=True, fitted_per_target=True, fitted_for="risk",
    crd=True, candidate=7, colour="black", figures=("risk",),
    summary="the running maximum times a multiplier per state, fitted for a share of windows "
            "at risk"))
