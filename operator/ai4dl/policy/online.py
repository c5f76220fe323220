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
- per resource, the peak-risk policy's state (:class:`ai4dl.policy.peak_states.RunningPeak`): windows
  seen, windows since the last new high and the lowest window max since then.

:class:`OwnHistory` (:mod:`ai4dl.policy.running`, their one owner) keeps exactly that (a few
hundred bytes per container; the operator keeps it in memory and in the pod's state
annotation), and :func:`next_allocation` computes, from the last window and an
:class:`OwnHistory` of everything up to its end, the same row the policy's ``allocate`` gives
for the window about to start. One code path: ``tests/test_online.py`` checks on random
executions that both agree for every servable policy (as a test keeps the numpy encoder equal
to torch's).
"""

from __future__ import annotations

import numpy as np

from ai4dl.policy.headroom import HeadroomPolicy
from ai4dl.policy.peak import PeakRiskPolicy
from ai4dl.policy.peak_states import state_codes
from ai4dl.policy.policies import (AdaptiveMax, AdaptiveStat, Calibrated, PerResource,
                                   PhasePolicy, PhaseProactive, read_phase, stat_bound)
from ai4dl.policy.running import OwnHistory

#: The policies the operator can serve window by window (VPA needs days of per-pod decaying
#: histograms: it is scored, never served); ``auto`` chooses among them.
SERVABLE = ("adaptive-max", "adaptive-stat", "phase-headroom", "burst-headroom", "phase",
            "phase-proactive", "peak-risk")
__all__ = ["SERVABLE", "OwnHistory", "next_allocation", "next_allocations"]


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
        return policy.next_from_running(lasts, last_phases, owns)
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
