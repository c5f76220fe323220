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

from ai4dl.policy.catalog import servable
from ai4dl.policy.policies import serve_next
from ai4dl.policy.running import OwnHistory

__all__ = ["OwnHistory", "next_allocation", "next_allocations"]


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
    (P, W) or None, one :class:`OwnHistory` each -> (P, R). Each policy serves itself
    (its ``next_from_running`` method): the reactive policies and the tables
    in one vectorised pass (the operator's call, once per window for all pods of a
    PhaseModel), the phase policies container by container."""
    lasts = np.asarray(lasts, np.float64)
    P = len(lasts)
    if P == 0:
        return np.empty((0, lasts.shape[2] if lasts.ndim == 3 else 0))
    if getattr(policy, "next_from_running", None) is None:
        raise ValueError(f"policy {getattr(policy, 'name', policy)!r} cannot be served window "
                         f"by window (servable: {', '.join(servable())})")
    return serve_next(policy, lasts, last_phases, owns)
