"""The per-state head-room policy: which estimator of the next window to trust, and how much
head-room it needs, learned per *state* of the last window.

Why. Jobs differ in scale far more than their phases differ in shape (docs/results.md §4), so a
level pooled over jobs sizes nobody well. What a phase does tell is *how the next window relates
to the last one*: a steady epoch is well predicted by the last window's max, a checkpoint phase
needs head-room over its median, a bursty window needs more head-room than a flat one. Reactive
policies pay one global margin in every window; the matched-fulfilment protocol then scales it
until the worst windows are covered. This policy instead spends head-room where the training
executions showed it is needed.

State, per resource, at the start of window w (from samples before w only):

- the phase of the last sample (``use_phase=False``: none — the phase-blind control that
  measures what the phase adds);
- the burstiness of the last window, max ÷ mean, binned at quantiles of the training windows'
  burstiness.

Candidate levels (:data:`ai4dl.policy.headroom_levels.ESTIMATORS`), all from this execution's
own samples: the last window's max, mean + 2σ, last sample and median; from further back, the
max of the last two windows and an exponentially weighted average of the window maxima
(half-life one window: the last window weighs as much as all before it), which see a job's
recurring peaks that one window can miss; and the execution's own mean + 2σ over its samples of
the current phase so far (the phase-blind control: over all its samples so far). None of them
borrows another job's scale.

Fit (:meth:`HeadroomPolicy.fit`, on training executions, per resource): for every state, the
(estimator, multiplier) pair such that the total allocation is least while the share of
training samples covered (usage <= allocation) reaches ``target``. Solved as one Lagrangian
trade-off across states: for a price λ of one covered sample, each state independently picks
the pair minimising allocation − λ · covered samples, and λ is bisected until the target is
met. A coverage floor per state (at least ``floor`` of its samples; by default the target's
miss rate may at most double: ``floor = 1 − 2 (1 − target)``) keeps the optimiser from starving
a state to buy savings elsewhere, the trick that reached 0.979 × oracle on GCD memory with
sample fulfilment intact and many windows short.

Rare states are pooled by one rule: a (phase, burstiness) state with fewer than ``min_windows``
training windows falls back to its burstiness state pooled over phases, and that, if also rare,
to one global state. The default ``min_windows = ceil(10 / (1 − target))`` asks for about ten
windows beyond the target quantile, so the multiplier of a state is an estimate of its tail,
not one lucky window. The number of burstiness bins is the largest of 1..``max_bins`` that
leaves, on average, ``min_windows`` windows per (phase, bin) state.

Cold start (row 0, nothing observed): the ``target`` quantile of the training executions' first-
window peaks, in the resource's units — the level that would have covered that share of the
training executions' first windows. It does not use the pod's request (``initial`` is ignored
once fitted): the request is what users over-ask today.

Serving is numpy table lookup: the rows of :meth:`allocate` for the evaluator, or
:meth:`next_allocation` for the operator's next window (one pod, microseconds; see
bench/bench_policies.py). No torch, no I/O.

The candidate levels and training windows live in :mod:`ai4dl.policy.headroom_levels`, the
fit's search in :mod:`ai4dl.policy.headroom_fit`; this module holds the table itself.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ai4dl.method.document_tables import HeadroomTable, HeadroomResourceTable
from ai4dl.method.document import to_list
from ai4dl.policy.headroom_fit import lagrangian_fit
from ai4dl.policy.headroom_levels import (ESTIMATORS, burst_bin, burstiness, candidate_levels,
                                          first_window_level, training_windows,
                                          TrainingWindows)
from ai4dl.policy.registry import Declared, FitInputs, StoredTable, declare
from ai4dl.policy.running import K_STD, OwnHistory, window_levels

#: The two tables' names: with the phase, and phase-blind (burstiness bins only).
PHASE_HEADROOM, BURST_HEADROOM = "phase-headroom", "burst-headroom"

#: How a state's table entry was obtained (``pooled_`` codes).
POOL_LEVELS = ("state", "burstiness", "global")


def check_training(name: str, use_phase: bool, usages, phases, window, n_phases
                   ) -> tuple[list[np.ndarray], list, int]:
    """A table's training input (the head-room tables, peak-risk), checked: (usages as float
    arrays, phases as int arrays or Nones, the number of phase rows). One line per fault."""
    if not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be at least 1 sample, got {window!r}")
    usages = [np.asarray(u, np.float64) for u in usages]
    if not usages:
        raise ValueError("fit needs at least one training execution")
    R = usages[0].shape[1] if usages[0].ndim == 2 else -1
    if any(u.ndim != 2 or u.shape[1] != R for u in usages):
        raise ValueError(f"every usage array must be (n, {R})")
    if any(not np.all(np.isfinite(u)) or (u < 0).any() for u in usages):
        raise ValueError("usage must be finite and non-negative")
    if not use_phase:
        return usages, [None] * len(usages), 1
    if phases is None or len(phases) != len(usages) or any(p is None for p in phases):
        raise ValueError(f"{name} needs the phase of every training sample")
    phases = [np.asarray(p, np.int64) for p in phases]
    if any(len(p) != len(u) for p, u in zip(phases, usages)):
        raise ValueError("phases and usage must have one entry per sample")
    if any(len(p) and p.min() < 0 for p in phases):
        raise ValueError("phases must be non-negative")
    seen = max((int(p.max()) for p in phases if len(p)), default=0) + 1
    k = seen if n_phases is None else int(n_phases)
    if k < seen:
        raise ValueError(f"n_phases={k} but phase {seen - 1} occurs in the data")
    return usages, phases, k


def check_table_call(policy, usage, phases, window) -> tuple[np.ndarray, np.ndarray | None]:
    """The arguments of a fitted table's ``allocate`` (the head-room tables, peak-risk), checked
    against what it was fitted for (window, resources, phases): (usage, phases or None)."""
    policy._check_fitted()
    if window != policy.window_:
        raise ValueError(f"{policy.name} was fitted for windows of {policy.window_} samples, "
                         f"not {window}")
    usage = np.asarray(usage, np.float64)
    if usage.ndim != 2 or usage.shape[1] != len(policy.multiplier_):
        raise ValueError(f"usage must be (n, {len(policy.multiplier_)})")
    if not policy.use_phase:
        return usage, None
    if phases is None:
        raise ValueError(f"{policy.name} needs the phase of every sample")
    phases = np.asarray(phases)
    if len(phases) != len(usage):
        raise ValueError("phases and usage must have one entry per sample")
    return usage, phases


class HeadroomPolicy:
    """Per-state head-room table (see the module docstring). scikit-learn style: parameters in
    the constructor, :meth:`fit` learns the table (attributes ending in ``_``), :meth:`allocate`
    serves the evaluator's rows and :meth:`next_allocation` the operator's next window.

    Parameters are rules, not tuned constants: ``target`` is the fulfilment the table is fitted
    for; ``floor``, ``min_windows`` and the number of burstiness bins derive from it and from
    the amount of training data when left as None; so does the price of a covered window (the
    least price at which the table beats adaptive-max on windows short, see
    :func:`ai4dl.policy.headroom_fit.lagrangian_fit`). ``window_price`` fixes that price
    instead, in units of a typical window's adaptive-max allocation, and serves the table
    fitted at it even where it loses: for tracing the trade-off between allocation and windows
    short (docs/results/frontier.py), not for serving.
    """

    def __init__(self, *, target: float = 0.97, use_phase: bool = True,
                 max_bins: int = 4, min_windows: int | None = None,
                 floor: float | None = None, name: str | None = None,
                 window_price: float | None = None):
        self.target = target
        self.use_phase = use_phase
        self.max_bins = max_bins
        self.min_windows = min_windows
        self.floor = floor
        self.window_price = window_price
        self.name = name or (PHASE_HEADROOM if use_phase else BURST_HEADROOM)

    # ------------------------------------------------------------------ Policy protocol
    @property
    def needs_phases(self) -> bool:
        return bool(self.use_phase)

    # ------------------------------------------------------------------ derived rules
    def _check_params(self) -> None:
        if not (isinstance(self.target, (int, float)) and 0.0 < self.target < 1.0):
            raise ValueError(f"target must be in (0, 1), got {self.target!r}")
        if self.floor is not None and not 0.0 <= self.floor <= self.target:
            raise ValueError(f"floor must be in [0, target], got {self.floor!r}")
        if self.min_windows is not None and self.min_windows < 1:
            raise ValueError(f"min_windows must be at least 1, got {self.min_windows!r}")
        if self.max_bins < 1:
            raise ValueError(f"max_bins must be at least 1, got {self.max_bins!r}")
        if self.window_price is not None and not (
                isinstance(self.window_price, (int, float)) and math.isfinite(self.window_price)
                and self.window_price >= 0):
            raise ValueError(f"window_price must be a finite number >= 0, got "
                             f"{self.window_price!r}")

    def resolved_floor(self) -> float:
        """Coverage floor per state: the target's miss rate at most doubled."""
        if self.floor is not None:
            return float(self.floor)
        return max(0.0, 1.0 - 2.0 * (1.0 - self.target))

    def resolved_min_windows(self) -> int:
        """Training windows a state needs: about ten beyond its target quantile."""
        if self.min_windows is not None:
            return int(self.min_windows)
        return int(math.ceil(10.0 / (1.0 - self.target) - 1e-9))

    # ------------------------------------------------------------------ fit
    def fit(self, usages: Sequence[np.ndarray], phases: Sequence[np.ndarray | None] | None,
            window: int, n_phases: int | None = None,
            resources: Sequence[str] | None = None) -> "HeadroomPolicy":
        """Learn the table from training executions: ``usages`` one (n, R) array each (the
        managed resources' columns), ``phases`` one label array each (ignored, and may be None,
        for the phase-blind control), ``window`` samples per window, ``n_phases`` the phase
        model's k (default: the largest label seen + 1)."""
        self._check_params()
        usages, phases, k = check_training(self.name, self.use_phase, usages, phases, window,
                                           n_phases)
        R = usages[0].shape[1]
        names = tuple(resources) if resources is not None else tuple(f"r{j}" for j in range(R))
        if len(names) != R:
            raise ValueError(f"{len(names)} resource names for {R} usage columns")
        return self.fit_windows(training_windows(usages, phases, window), window, k, names,
                                first_window_level(usages, window, self.target))

    def fit_windows(self, tw: TrainingWindows | None, window: int, n_phases: int,
                    resources: Sequence[str], cold_start: np.ndarray) -> "HeadroomPolicy":
        """The table from training windows as :func:`training_windows` prepares them from
        checked executions (:meth:`fit`'s second half, where a caller may give the windows a
        state of its own, as docs/results/state_features.py adds a bit to the phase): ``n_phases``
        the states' count, ``cold_start`` the first window's level per resource."""
        R, k = len(resources), int(n_phases)
        self.window_ = int(window)
        self.n_phases_ = k
        self.resources_ = tuple(resources)
        self.cold_start_ = cold_start
        if tw is None:
            # nothing to learn from (every execution fits in its cold-start window): the last
            # window's max, as adaptive-max, everywhere
            self.bins_ = 1
            self.edges_ = np.empty((R, 0))
            self.estimator_ = np.zeros((R, k, 1), np.int64)
            self.multiplier_ = np.ones((R, k, 1))
            self.support_ = np.zeros((R, k, 1), np.int64)
            self.pooled_ = np.full((R, k, 1), 2, np.int64)
            self.fit_report_ = [{} for _ in range(R)]
            return self
        L, B, P, seg_len, execution_of, U = tw
        win_of = np.repeat(np.arange(len(seg_len)), seg_len)
        n_w = len(seg_len)

        min_w = self.resolved_min_windows()
        bins = max(1, min(self.max_bins, n_w // max(1, k * min_w)))
        self.bins_ = bins
        edges = np.empty((R, bins - 1))
        est = np.zeros((R, k, bins), np.int64)
        mult = np.ones((R, k, bins))
        support = np.zeros((R, k, bins), np.int64)
        pooled = np.zeros((R, k, bins), np.int64)
        reports = []
        for r in range(R):
            e_r = np.quantile(B[:, r], np.arange(1, bins) / bins) if bins > 1 else np.empty(0)
            # tied quantiles (a mass point) would leave empty bins: one edge per value, and
            # the bins past the distinct edges stay empty (pooled by the rare-state rule)
            u_r = np.unique(e_r)
            e_r = np.r_[u_r, np.full(len(e_r) - len(u_r), np.inf)]
            edges[r] = e_r
            b = burst_bin(e_r, B[:, r])
            fine = P * bins + b
            cnt_fine = np.bincount(fine, minlength=k * bins).reshape(k, bins)
            cnt_bin = np.bincount(b, minlength=bins)
            # resolved state ids: fine (p, b) -> p*bins+b; burstiness b -> k*bins+b; global
            level = np.where(cnt_fine >= min_w, 0, np.where(cnt_bin[None, :] >= min_w, 1, 2))
            sid_table = np.where(level == 0, np.arange(k * bins).reshape(k, bins),
                                 np.where(level == 1, k * bins + np.arange(bins)[None, :],
                                          k * bins + bins))
            sid = sid_table[P, b]                                    # (N_w,)
            n_states = k * bins + bins + 1
            choice_e, choice_m, rep = lagrangian_fit(
                L[:, :, r], U[:, r], win_of, seg_len, sid, n_states, self.target,
                self.resolved_floor(), execution_of, self.window_price)
            est[r] = choice_e[sid_table]
            mult[r] = choice_m[sid_table]
            support[r] = np.where(level == 0, cnt_fine, np.where(level == 1, cnt_bin[None, :],
                                                                  n_w))
            pooled[r] = level
            reports.append(rep)
        self.edges_ = edges
        self.estimator_ = est
        self.multiplier_ = mult
        self.support_ = support
        self.pooled_ = pooled
        self.fit_report_ = reports
        return self

    # ------------------------------------------------------------------ serving
    def _check_fitted(self) -> None:
        if not hasattr(self, "multiplier_"):
            raise ValueError(f"{self.name} is not fitted: call fit() or load its table")

    def lookup(self, levels: np.ndarray, burst: np.ndarray, last_phase) -> np.ndarray:
        """(rows, R) allocations from the estimators' levels (rows, E, R)."""
        rows, _, R = levels.shape
        out = np.empty((rows, R))
        if last_phase is None or not self.use_phase:
            p = np.zeros(rows, np.int64)
        else:
            p = np.asarray(last_phase, np.int64)
            if rows and (p.min() < 0 or p.max() >= self.n_phases_):
                raise ValueError(f"phase {int(p.max())} outside the table's "
                                 f"{self.n_phases_} phases")
        idx = np.arange(rows)
        for r in range(R):
            b = burst_bin(self.edges_[r], burst[:, r])
            e = self.estimator_[r][p, b]
            out[:, r] = self.multiplier_[r][p, b] * levels[idx, e, r]
        return out

    def _check_call(self, usage, phases, window):
        return check_table_call(self, usage, phases, window)

    def allocate(self, usage, phases, window, initial, step):
        """Rows 0..n//window: row 0 the learned cold-start level, row w the table's
        multiplier × estimator for the state of window w - 1 (samples before w only)."""
        usage, phases = self._check_call(usage, phases, window)
        lv, bu, lp = candidate_levels(usage, phases, window)
        return np.vstack([self.cold_start_[None, :], self.lookup(lv, bu, lp)])

    def next_allocation(self, usage, phases, window) -> np.ndarray:
        """The last row of :meth:`allocate` (the window about to start) for one pod, from its
        whole history: :meth:`next_allocations` for one."""
        return self.next_allocations([usage], None if phases is None else [phases], window)[0]

    def next_allocations(self, usages: Sequence[np.ndarray],
                         phases: Sequence[np.ndarray] | None, window: int) -> np.ndarray:
        """:meth:`next_allocation` for many pods at once, (pods, R), from whole histories:
        each one's last window and running statistics go through the operator's own serving
        call (:meth:`next_from_running`, what :func:`ai4dl.policy.online.next_allocations`
        calls), so there is one lookup path."""
        self._check_fitted()
        if window != self.window_:
            raise ValueError(f"{self.name} was fitted for windows of {self.window_} samples, "
                             f"not {window}")
        R = len(self.multiplier_)
        usages = [np.asarray(u, np.float64).reshape(-1, R) for u in usages]
        n = len(usages)
        if self.use_phase and (phases is None or len(phases) != n):
            raise ValueError(f"{self.name} needs the phase of every sample of every pod")
        m = np.array([len(u) // window for u in usages])
        out = np.repeat(self.cold_start_[None, :], n, 0)
        live = np.flatnonzero(m > 0)
        if not len(live):
            return out
        hist = [usages[i][: m[i] * window] for i in live]
        ph = [np.asarray(phases[i])[: m[i] * window] for i in live] if self.use_phase else None
        if ph is not None and any(len(p) != len(h) for p, h in zip(ph, hist)):
            raise ValueError("phases and usage must have one entry per sample")
        owns = [OwnHistory.of(h, None if ph is None else ph[j], self.n_phases_, window)
                for j, h in enumerate(hist)]
        out[live] = self.next_from_running(
            np.stack([h[-window:] for h in hist]),
            None if ph is None else np.stack([p[-window:] for p in ph]), owns)
        return out

    def next_from_running(self, lasts: np.ndarray, last_phases: np.ndarray | None,
                          owns: Sequence[OwnHistory]) -> np.ndarray:
        """(P, R) the next window's allocations of P containers from their last windows
        ``lasts`` (P, W, R), those windows' phases (P, W) or None, and each one's running
        statistics up to the end of its last window (the operator's serving call)."""
        P = len(lasts)
        cur = np.asarray(last_phases)[:, -1].astype(np.int64) if self.use_phase else None
        own = np.stack([o.own_phase_level(None if cur is None else int(c))
                        for o, c in zip(owns, cur if cur is not None else [None] * P)])
        last_max = lasts.max(1)
        max2, ewma = window_levels(last_max, np.stack([o.previous_max for o in owns]),
                                   np.stack([o.ewma_max for o in owns]))
        lv = np.stack([last_max, lasts.mean(1) + K_STD * lasts.std(1), lasts[:, -1],
                       np.median(lasts, 1), own, max2, ewma], 1)           # (P, E, R)
        return self.lookup(lv, burstiness(lasts), cur)

    # ------------------------------------------------------------------ description
    def max_multiplier(self) -> float:
        self._check_fitted()
        return float(self.multiplier_.max())

    def table_rows(self) -> list[dict]:
        """One dict per (resource, phase, burstiness bin): what describe prints."""
        self._check_fitted()
        out = []
        for r, res in enumerate(self.resources_):
            edges = self.edges_[r]
            for p in range(self.multiplier_.shape[1]):
                for b in range(self.multiplier_.shape[2]):
                    # bins are right-closed: (edges[b-1], edges[b]], the first from 1
                    lo = "[1" if b == 0 else f"({edges[b - 1]:.3g}"
                    hi = ("∞)" if b == len(edges) or not np.isfinite(edges[b])
                          else f"{edges[b]:.3g}]")
                    out.append({"resource": res, "phase": p if self.use_phase else None,
                                "burstiness": f"{lo}, {hi}",
                                "estimator": ESTIMATORS[int(self.estimator_[r, p, b])],
                                "multiplier": float(self.multiplier_[r, p, b]),
                                "windows": int(self.support_[r, p, b]),
                                "pooled": POOL_LEVELS[int(self.pooled_[r, p, b])]})
        return out



# ----------------------------------------------------------------------------- document
def to_table(policy: HeadroomPolicy):
    """The fitted policy as the model document's :class:`~ai4dl.method.document.HeadroomTable`
    (finite numbers only: the padding edges of tied quantiles and the bins past them, which no
    value can reach, are left out)."""
    policy._check_fitted()
    res = []
    for r, name in enumerate(policy.resources_):
        edges = policy.edges_[r]
        keep = int(np.count_nonzero(np.isfinite(edges)))
        bins = keep + 1
        res.append(HeadroomResourceTable(
            resource=name, burstEdges=to_list(edges[:keep]),
            estimators=[[ESTIMATORS[int(e)] for e in row[:bins]]
                        for row in policy.estimator_[r]],
            multipliers=to_list(policy.multiplier_[r][:, :bins]),
            windows=policy.support_[r][:, :bins].astype(int).tolist(),
            pooled=[[POOL_LEVELS[int(p)] for p in row[:bins]] for row in policy.pooled_[r]],
            coldStart=float(policy.cold_start_[r])))
    fit = [{k: float(v) for k, v in rep.items() if np.isfinite(v)}
           for rep in policy.fit_report_] if policy.fit_report_ else None
    return HeadroomTable(name=policy.name, usesPhase=policy.use_phase, target=policy.target,
                         windowSamples=policy.window_, resources=res, fit=fit)


def from_table(table) -> HeadroomPolicy:
    """A fitted :class:`HeadroomPolicy` from a validated document table."""
    pol = HeadroomPolicy(target=table.target, use_phase=table.uses_phase, name=table.name)
    bins = max(len(r.burst_edges) + 1 for r in table.resources)
    rows = len(table.resources[0].multipliers)
    R = len(table.resources)
    pol.window_ = table.window_samples
    pol.n_phases_ = rows
    pol.resources_ = tuple(r.resource for r in table.resources)
    pol.bins_ = bins
    # resources with fewer distinct edges get unreachable padding bins (edges at +inf)
    pol.edges_ = np.full((R, bins - 1), np.inf)
    pol.estimator_ = np.zeros((R, rows, bins), np.int64)
    pol.multiplier_ = np.ones((R, rows, bins))
    pol.support_ = np.zeros((R, rows, bins), np.int64)
    pol.pooled_ = np.full((R, rows, bins), 2, np.int64)
    pol.cold_start_ = np.empty(R)
    for j, r in enumerate(table.resources):
        b = len(r.burst_edges) + 1
        pol.edges_[j, : b - 1] = r.burst_edges
        pol.estimator_[j, :, :b] = [[ESTIMATORS.index(e) for e in row] for row in r.estimators]
        pol.multiplier_[j, :, :b] = r.multipliers
        pol.support_[j, :, :b] = r.windows
        pol.pooled_[j, :, :b] = [[POOL_LEVELS.index(p) for p in row] for row in r.pooled]
        pol.cold_start_[j] = r.cold_start
    pol.fit_report_ = [dict(d) for d in table.fit] if table.fit else [{} for _ in range(R)]
    return pol


def _fit_table(name: str):
    def fit(inputs: FitInputs) -> HeadroomPolicy:
        """The table fitted on the training executions ``only`` at the target fulfilment."""
        train, model = inputs.train, inputs.model
        if train is None:
            raise ValueError(f"policy {name!r} is fitted on training executions")
        idx = inputs.indices
        use_phase = name == PHASE_HEADROOM
        if use_phase and (model is None or any(train.phases[i] is None for i in idx)):
            raise ValueError(f"{name} needs a phase model and the phase of every sample")
        return HeadroomPolicy(target=inputs.target, use_phase=use_phase).fit(
            [train.usage[i] for i in idx], [train.phases[i] for i in idx] if use_phase else None,
            inputs.window, model.n_phases_ if use_phase else None, tuple(train.resources))
    return fit


_STORED = StoredTable("policyTables", "policy_tables_", from_table)
declare(Declared(
    PHASE_HEADROOM, "fitted", rank=50, build=_fit_table(PHASE_HEADROOM), table=_STORED,
    needs_phases=True, uses_training=True, fitted_per_target=True, fitted_for="objective",
    crd=True, candidate=2, colour="tab:cyan",
    summary="a multiplier per phase and burstiness bin, fitted for the target"))
declare(Declared(
    BURST_HEADROOM, "fitted", rank=60, build=_fit_table(BURST_HEADROOM), table=_STORED,
    uses_training=True, fitted_per_target=True, fitted_for="objective", crd=True, candidate=3,
    colour="tab:olive",
    summary="a multiplier per burstiness bin (phase-blind), fitted for the target"))
