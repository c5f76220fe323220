"""The policies' next window, served from running statistics instead of the whole history.

The evaluator replays a policy over an execution's whole history (``allocate``: one row per
window). The operator cannot: it reads one window (plus the encoder's context) per pod from
Prometheus, and a ten-hour job at 15 s has 2,400 samples per feature. What the policies need
from the past beyond the last window is small, and additive:

- per phase of the model: how many samples, their sum and sum of squares (the execution's own
  mean + kσ in a phase: ``scope: execution``, the head-room table's ``phase-level``);
- over all samples: the same, and the running maximum (the own-scale cap of model levels);
- the run of the current phase: which phase, how many samples so far (phase-proactive's
  dwell rule);
- per window: the maxima of the last two windows and their exponentially weighted average
  (the head-room table's ``max-2w`` and ``ewma-max``);
- per resource, the peak-risk policy's state (:class:`ai4dl.policy.peak.RunningPeak`): windows
  seen, windows since the last new high and the lowest window max since then.

:class:`OwnHistory` keeps exactly that (a few hundred bytes per container; the operator keeps
it in memory and in the pod's state annotation), and :func:`next_allocation` computes, from the
last window and an :class:`OwnHistory` of everything up to its end, the same row the policy's
``allocate`` gives for the window about to start. One code path: ``tests/test_online.py``
checks on random executions that both agree for every servable policy (as a test keeps the
numpy encoder equal to torch's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ai4dl.policy.auto import SERVABLE
from ai4dl.policy.headroom import EWMA_WEIGHT, K_STD, HeadroomPolicy, burstiness
from ai4dl.policy.peak import PeakRiskPolicy, state_codes
from ai4dl.policy.policies import (AdaptiveMax, AdaptiveStat, Calibrated, PerResource,
                                   PhasePolicy, PhaseProactive, read_phase, stat_bound)

# SERVABLE: the policies the operator can serve window by window (VPA needs days of per-pod
# decaying histograms: it is scored, never served).
__all__ = ["SERVABLE", "OwnHistory", "next_allocation", "next_allocations"]


@dataclass
class OwnHistory:
    """Running statistics of one execution's samples so far (see the module doc)."""
    n_phases: int
    n_resources: int
    count: np.ndarray = field(default=None)        # (k,) samples per phase
    s1: np.ndarray = field(default=None)           # (k, R)
    s2: np.ndarray = field(default=None)           # (k, R)
    n: float = 0.0                                 # all samples
    t1: np.ndarray = field(default=None)           # (R,)
    t2: np.ndarray = field(default=None)           # (R,)
    peak: np.ndarray = field(default=None)         # (R,) running maximum
    run_phase: int = -1                            # phase of the last sample (-1: none)
    run_length: int = 0                            # samples of its run so far
    window_max: np.ndarray = field(default=None)   # (R,) max of the last window (NaN: none)
    previous_max: np.ndarray = field(default=None)  # (R,) max of the window before it
    ewma_max: np.ndarray = field(default=None)     # (R,) EWMA of the window maxima
    # peak-risk's state; -1 / NaN: unknown (a record written before they were kept, see
    # from_json: served cautiously until known again)
    windows: int = 0                               # windows added (-1: unknown)
    since_high: np.ndarray = field(default=None)   # (R,) windows since the last new high
    low_since_high: np.ndarray = field(default=None)  # (R,) lowest window max since then

    def __post_init__(self):
        k, R = self.n_phases, self.n_resources
        self.count = np.zeros(k) if self.count is None else np.asarray(self.count, np.float64)
        self.s1 = np.zeros((k, R)) if self.s1 is None else np.asarray(self.s1, np.float64)
        self.s2 = np.zeros((k, R)) if self.s2 is None else np.asarray(self.s2, np.float64)
        self.t1 = np.zeros(R) if self.t1 is None else np.asarray(self.t1, np.float64)
        self.t2 = np.zeros(R) if self.t2 is None else np.asarray(self.t2, np.float64)
        self.peak = np.full(R, -np.inf) if self.peak is None else np.asarray(self.peak,
                                                                             np.float64)
        for name in ("window_max", "previous_max", "ewma_max"):
            v = getattr(self, name)
            setattr(self, name, np.full(R, np.nan) if v is None else np.asarray(v, np.float64))
        self.windows = int(self.windows)
        self.since_high = (np.zeros(R, np.int64) if self.since_high is None
                           else np.asarray(self.since_high, np.int64).reshape(R))
        self.low_since_high = (np.full(R, np.nan) if self.low_since_high is None
                               else np.asarray(self.low_since_high, np.float64).reshape(R))

    @classmethod
    def of(cls, usage: np.ndarray, phases: np.ndarray | None, n_phases: int,
           window: int | None = None) -> "OwnHistory":
        out = cls(max(1, n_phases), np.asarray(usage).shape[1])
        out.add(usage, phases, window)
        return out

    def _windows(self) -> dict:
        return {"window_max": self.window_max.copy(), "previous_max": self.previous_max.copy(),
                "ewma_max": self.ewma_max.copy(), "windows": self.windows,
                "since_high": self.since_high.copy(),
                "low_since_high": self.low_since_high.copy()}

    def copy(self) -> "OwnHistory":
        return OwnHistory(self.n_phases, self.n_resources, self.count.copy(), self.s1.copy(),
                          self.s2.copy(), self.n, self.t1.copy(), self.t2.copy(),
                          self.peak.copy(), self.run_phase, self.run_length, **self._windows())

    def rebased(self, n_phases: int) -> "OwnHistory":
        """The statistics that do not depend on a phase model (all samples, the peak, the
        window maxima), for a model with ``n_phases`` phases: per-phase sums of another model's
        phases mean nothing under this one."""
        return OwnHistory(n_phases, self.n_resources, n=self.n, t1=self.t1.copy(),
                          t2=self.t2.copy(), peak=self.peak.copy(), **self._windows())

    def add(self, usage: np.ndarray, phases: np.ndarray | None,
            window: int | None = None) -> "OwnHistory":
        """Add samples (n, R) in time order, with their phases (n,) or None (phase-blind).
        ``window``: samples per window, to cut them into windows for the window maxima (the
        last one may be partial); None: they are one window (the operator adds one per call)."""
        u = np.asarray(usage, np.float64)
        if not len(u):
            return self
        step = len(u) if window is None else int(window)
        peak = self.peak.copy()
        for lo in range(0, len(u), step):
            mx = u[lo: lo + step].max(0)
            # peak-risk's state (the running form of ai4dl.policy.peak.RunningPeak; an unknown
            # since_high (-1) stays unknown until the next new high)
            new = mx > peak
            known = self.since_high >= 0
            self.low_since_high = np.where(new, mx, np.where(
                known, np.fmin(self.low_since_high, mx), np.nan))
            self.since_high = np.where(new, 0, np.where(known, self.since_high + 1, -1))
            peak = np.maximum(peak, mx)
            if self.windows >= 0:
                self.windows += 1
            self.previous_max = self.window_max
            self.window_max = mx
            self.ewma_max = np.where(np.isfinite(self.ewma_max), EWMA_WEIGHT * mx
                                     + (1.0 - EWMA_WEIGHT) * self.ewma_max, mx)
        self.n += len(u)
        self.t1 += u.sum(0)
        self.t2 += (u * u).sum(0)
        self.peak = np.maximum(self.peak, u.max(0))
        if phases is None:
            return self
        p = np.asarray(phases, np.int64)
        if p.min() < 0 or p.max() >= self.n_phases:
            raise ValueError(f"phase {int(p.max())} outside the model's {self.n_phases} phases")
        self.count += np.bincount(p, minlength=self.n_phases)
        for r in range(self.n_resources):
            self.s1[:, r] += np.bincount(p, weights=u[:, r], minlength=self.n_phases)
            self.s2[:, r] += np.bincount(p, weights=u[:, r] ** 2, minlength=self.n_phases)
        # the current run: the last change inside these samples, or the run goes on
        changes = np.flatnonzero(p[1:] != p[:-1])
        if len(changes):
            self.run_phase, self.run_length = int(p[-1]), int(len(p) - 1 - changes[-1])
        elif int(p[0]) == self.run_phase:
            self.run_length += len(p)
        else:
            self.run_phase, self.run_length = int(p[0]), len(p)
        return self

    def overall_level(self, k: float) -> np.ndarray:
        mu = self.t1 / self.n
        return mu + k * np.sqrt(np.maximum(self.t2 / self.n - mu * mu, 0.0))

    def phase_levels(self, k: float, min_samples: int) -> np.ndarray:
        """(phases, R): mean + kσ of the samples in each phase; the overall level for a phase
        with fewer than ``min_samples`` (never another job's level)."""
        c = np.maximum(self.count, 1.0)[:, None]
        mu = self.s1 / c
        local = mu + k * np.sqrt(np.maximum(self.s2 / c - mu * mu, 0.0))
        return np.where((self.count >= min_samples)[:, None], local,
                        self.overall_level(k)[None, :])

    def own_phase_level(self, phase: int | None) -> np.ndarray:
        """The head-room table's ``phase-level``: mean + 2σ of the samples in ``phase`` (all
        samples when None)."""
        if phase is None:
            return self.overall_level(K_STD)
        c = self.count[phase]
        mu = self.s1[phase] / c
        return mu + K_STD * np.sqrt(np.maximum(self.s2[phase] / c - mu * mu, 0.0))

    # -------------------------------------------------------------- the pod annotation
    def to_json(self) -> dict:
        """Compact (9 significant digits; float32-exact is not needed for sums)."""
        def r(a):
            return [float(f"{v:.9g}") for v in np.asarray(a, np.float64).ravel()]
        return {"k": self.n_phases, "r": self.n_resources, "c": r(self.count), "s1": r(self.s1),
                "s2": r(self.s2), "n": self.n, "t1": r(self.t1), "t2": r(self.t2),
                "max": r(np.where(np.isfinite(self.peak), self.peak, 0.0)),
                "run": [self.run_phase, self.run_length],
                **{key: r(v) for key, v in (("wm", self.window_max), ("wp", self.previous_max),
                                            ("ew", self.ewma_max)) if np.all(np.isfinite(v))},
                # peak-risk's state, only where known (an absent key loads as unknown)
                **({"nw": self.windows} if self.windows >= 0 else {}),
                **({"hs": [int(v) for v in self.since_high],
                    "hl": r(self.low_since_high)}
                   if (self.since_high >= 0).all() and np.isfinite(self.low_since_high).all()
                   else {})}

    @classmethod
    def from_json(cls, d: dict) -> "OwnHistory":
        """ValueError when it is not one (an edited annotation: the operator starts afresh)."""
        try:
            k, R = int(d["k"]), int(d["r"])
            out = cls(k, R, np.asarray(d["c"], float).reshape(k),
                      np.asarray(d["s1"], float).reshape(k, R),
                      np.asarray(d["s2"], float).reshape(k, R), float(d["n"]),
                      np.asarray(d["t1"], float).reshape(R), np.asarray(d["t2"], float).reshape(R),
                      np.asarray(d["max"], float).reshape(R), int(d["run"][0]), int(d["run"][1]),
                      *(np.asarray(d[key], float).reshape(R) if key in d else None
                        for key in ("wm", "wp", "ew")),
                      # written before peak-risk's state was kept: unknown (-1, NaN), unless
                      # nothing was seen yet (then there is nothing to know)
                      windows=int(d["nw"]) if "nw" in d else (0 if float(d["n"]) == 0 else -1),
                      since_high=(np.asarray(d["hs"], np.int64).reshape(R) if "hs" in d else
                                  np.full(R, 0 if float(d["n"]) == 0 else -1, np.int64)),
                      low_since_high=(np.asarray(d["hl"], float).reshape(R) if "hl" in d
                                      else None))
            if ("hs" in d) != ("hl" in d) or out.windows < -1 or \
                    (out.since_high < -1).any() or \
                    ("hl" in d and not np.all(np.isfinite(out.low_since_high))):
                raise ValueError("peak-risk state incomplete or out of range")
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise ValueError(f"not an own-history record: {err}") from None
        arrays = (out.count, out.s1, out.s2, out.t1, out.t2, out.peak,
                  *(v for v in (out.window_max, out.previous_max, out.ewma_max)
                    if not np.all(np.isnan(v))))
        if not all(np.all(np.isfinite(a)) for a in arrays) or out.n < 0 or \
                (out.count < 0).any() or abs(out.count.sum() - out.n) > 0.5 and out.count.sum():
            raise ValueError("not an own-history record: inconsistent numbers")
        return out


def window_levels(last_max: np.ndarray, previous_max: np.ndarray, ewma_max: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The head-room table's ``max-2w`` and ``ewma-max`` once the window whose max is
    ``last_max`` has been added to the running statistics (any shape, elementwise). A record
    without window maxima (a pod annotation written before they were kept) starts them from
    that window."""
    prev = np.where(np.isfinite(previous_max), previous_max, last_max)
    ewma = np.where(np.isfinite(ewma_max), ewma_max, last_max)
    return np.maximum(last_max, prev), ewma


def _margin(p) -> float:
    return 1.0 + getattr(p, "margin", 0.0)


def next_allocation(policy, last: np.ndarray, last_phases: np.ndarray | None,
                    own: OwnHistory) -> np.ndarray:
    """(R,) the allocation for the window about to start, from the window that just ended
    (``last``, (W, R), and its phases) and ``own``, the running statistics of every sample up
    to its end (the last window included). Equal to ``policy.allocate(...)[-1]`` over the
    whole history (tests/test_online.py)."""
    return next_allocations(policy, np.asarray(last, np.float64)[None],
                            None if last_phases is None else np.asarray(last_phases)[None],
                            [own])[0]


def next_allocations(policy, lasts: np.ndarray, last_phases: np.ndarray | None,
                     owns: list[OwnHistory]) -> np.ndarray:
    """:func:`next_allocation` for many containers at once: ``lasts`` (P, W, R), their phases
    (P, W) or None, one :class:`OwnHistory` each -> (P, R). The reactive policies and the
    head-room tables are one vectorised pass (the operator's call, once per window for all pods
    of a PhaseModel); the phase policies go container by container."""
    lasts = np.asarray(lasts, np.float64)
    P = len(lasts)
    if P == 0:
        return np.empty((0, lasts.shape[2] if lasts.ndim == 3 else 0))
    if isinstance(policy, PerResource):
        out = np.empty((P, lasts.shape[2]))
        done: dict = {}
        for j, p in enumerate(policy.policies):
            if id(p) not in done:
                done[id(p)] = next_allocations(p, lasts, last_phases if p.needs_phases
                                               else None, owns)
            out[:, j] = done[id(p)][:, j]
        return out
    if isinstance(policy, Calibrated):
        inner = policy.policy
        return next_allocations(inner, lasts, last_phases if inner.needs_phases else None,
                                owns) * np.asarray(policy.factors, np.float64)[None, :]
    if isinstance(policy, AdaptiveMax):
        return lasts.max(1)
    if isinstance(policy, AdaptiveStat):
        return lasts.mean(1) + policy.k * lasts.std(1)
    if isinstance(policy, HeadroomPolicy):
        cur = np.asarray(last_phases)[:, -1].astype(np.int64) if policy.use_phase else None
        own = np.stack([o.own_phase_level(None if cur is None else int(c))
                        for o, c in zip(owns, cur if cur is not None else [None] * P)])
        last_max = lasts.max(1)
        max2, ewma = window_levels(last_max, np.stack([o.previous_max for o in owns]),
                                   np.stack([o.ewma_max for o in owns]))
        lv = np.stack([last_max, lasts.mean(1) + K_STD * lasts.std(1), lasts[:, -1],
                       np.median(lasts, 1), own, max2, ewma], 1)           # (P, E, R)
        return policy._lookup(lv, burstiness(lasts), cur)
    if isinstance(policy, PeakRiskPolicy):
        return _peak_risk(policy, lasts, last_phases, owns)
    if isinstance(policy, (PhasePolicy, PhaseProactive)):
        out = np.empty((P, lasts.shape[2]))
        for i in range(P):
            levels = _scoped(policy, owns[i])                              # (k, R)
            if isinstance(policy, PhasePolicy):
                out[i] = read_phase(np.asarray(last_phases[i])[None, :], levels[None],
                                    policy.reader)[0]
            else:
                out[i] = _proactive(policy, levels, owns[i], lasts.shape[1])
        return out * _margin(policy)
    raise ValueError(f"policy {getattr(policy, 'name', policy)!r} cannot be served window by "
                     f"window (servable: {', '.join(SERVABLE)})")


def _peak_risk(policy: PeakRiskPolicy, lasts: np.ndarray, last_phases: np.ndarray | None,
               owns: list[OwnHistory]) -> np.ndarray:
    """The peak-risk table for every container at once. A record that does not know its
    windows seen (written before they were kept) counts them from its samples; one that does
    not know its windows since the last new high gets, until its next new high, the largest
    multiplier of any state with its windows seen and phase (:meth:`PeakRiskPolicy.cautious`)."""
    W = lasts.shape[1]
    peak = np.stack([o.peak for o in owns])                                    # (P, R)
    since = np.stack([o.since_high for o in owns])
    low = np.stack([o.low_since_high for o in owns])
    windows = np.array([o.windows if o.windows >= 0 else max(1, int(o.n) // W)
                        for o in owns], np.int64)
    phase = (np.asarray(last_phases)[:, -1].astype(np.int64) if policy.use_phase else None)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(peak > 0, lasts.max(1) / np.where(peak > 0, peak, 1.0), 1.0)
        dip = np.where(peak > 0, low / np.where(peak > 0, peak, 1.0), 1.0)
    unknown = since < 0
    code = state_codes(windows[:, None], np.maximum(since, 0), ratio,
                       np.where(unknown, 1.0, dip))
    out = policy.lookup(peak, lasts.max(1), code, phase)
    if unknown.any():
        out = np.where(unknown, peak * policy.cautious(windows, phase), out)
    return out


def _scoped(policy, own: OwnHistory) -> np.ndarray:
    levels = np.asarray(policy.levels, np.float64)
    if policy.scope == "execution":
        return own.phase_levels(policy.k, policy.min_samples)
    if policy.scope == "model":
        return np.minimum(levels, stat_bound(policy.k) * own.peak[None, :])
    raise ValueError(f"scope must be 'model' or 'execution', not {policy.scope!r}")


def _proactive(policy: PhaseProactive, levels: np.ndarray, own: OwnHistory,
               window: int) -> np.ndarray:
    normal, overdue = policy._tables(window)
    cur = own.run_phase
    late = own.run_length > np.asarray(policy.dwell_p90)[cur]
    probs = overdue[cur] if late else normal[cur]
    if policy.mode == "worst-likely":
        ok = probs >= policy.threshold
        if not late:
            ok[cur] = True
        ok[int(probs.argmax())] = True
        return np.where(ok[:, None], levels, -np.inf).max(0)
    return probs @ levels
