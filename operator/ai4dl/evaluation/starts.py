"""Where each replayed execution starts: the request its pod would have had before anything of
it was observed (../shared/docs/evaluation.md, "The start counts").

``served`` (the default of ``ai4dl evaluate``) is what the operator serves a new pod: a workload
seen before starts from its own profile (:mod:`ai4dl.rules.workload_profile`), learned from the
executions of the same workload that *ended* before this one started (runs still going, such as
the other ranks of one job, have taught it nothing yet); a workload never seen starts from the
pooled first-window level that admission sets; without a learned level, from the request the
trace records (the author's); and only where that is missing too, from the execution's own peak,
which is clairvoyant and counted as such (:class:`StartCounts`).

``peak`` starts every execution at its own lifetime peak: clairvoyant, kept for the tables made
that way. ``trace`` and ``model`` start every execution from the recorded request or the pooled
level. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ai4dl.method.traces import Execution
from ai4dl.rules.workload_profile import (Hold, RunSummary, profile_from_runs,
                                           start_within_request, summarise)

#: How a start was chosen, in the order ``served`` tries them.
SOURCES = ("profile", "pooled", "request", "peak")


@dataclass(frozen=True)
class StartCounts:
    """How many executions started from each source (``SOURCES``)."""
    counts: tuple[tuple[str, int], ...]

    def get(self, source: str) -> int:
        return dict(self.counts).get(source, 0)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)

    def describe(self) -> str:
        return ", ".join(f"{n} from {'its own peak (clairvoyant)' if s == 'peak' else s}"
                         for s, n in self.counts if n)


def workload_of(ex: Execution, by: str = "group") -> str:
    """The workload an execution belongs to: its group (default), or the attribute ``by`` of
    its format (e.g. the DL corpus's ``family``); the group where it has none."""
    if by == "group":
        return ex.group
    value = ex.meta.get(by)
    return str(value) if value not in (None, "") else ex.group


def _step(ex: Execution) -> float:
    if ex.step:
        return float(ex.step)
    t = np.asarray(ex.times, np.float64)
    return float(np.median(np.diff(t))) if len(t) > 1 else 0.0


def run_summaries(executions: Sequence[Execution], resources: Sequence[str], window: int
                  ) -> list[RunSummary | None]:
    """Each execution's :class:`RunSummary` (None for an execution without samples)."""
    mem = list(resources).index("memory") if "memory" in resources else None
    out: list[RunSummary | None] = []
    for e in executions:
        if not len(e):
            out.append(None)
            continue
        sel = e.select(resources)
        bytes_unit = mem is not None and tuple(sel.units)[mem] == "bytes"
        out.append(summarise(sel.values, _step(e), window, float(e.times[0]),
                             memory_index=mem, bytes_unit=bytes_unit))
    return out


def served_starts(executions: Sequence[Execution], history: Sequence[Execution],
                  resources: Sequence[str], window: int, level: np.ndarray | None,
                  by: str = "group", max_increase: float | None = None
                  ) -> tuple[list[np.ndarray], StartCounts, list[Hold | None]]:
    """Each execution's served start (see the module docstring) and how many came from each
    source. ``history``: every execution the replay has in its past (the train side and the
    held-out side; only those of the same workload that ended before an execution started
    count for it). ``max_increase``: the safety layer's growth limit per window, which the
    profile's first request leaves room for (:meth:`WorkloadProfile.first_request`). Also each
    execution's memory hold (:meth:`WorkloadProfile.hold`: what its workload's runs used,
    stretch by stretch of a run; None without a profile), which the safety layer keeps."""
    summaries = run_summaries(history, resources, window)
    by_workload: dict[str, list[RunSummary]] = {}
    for h, s in zip(history, summaries):
        if s is not None:
            by_workload.setdefault(workload_of(h, by), []).append(s)
    starts, sources, holds = [], Counter(), []
    for e in executions:
        begin = float(e.times[0]) if len(e) else 0.0
        past = [s for s in by_workload.get(workload_of(e, by), []) if s.end <= begin]
        profile = profile_from_runs(resources, past) if past else None
        request = profile.first_request(begin, max_increase) if profile is not None else None
        if request is not None:     # its cpu within the author's request, as admission sets it
            request = start_within_request(request, resources, _recorded(e, resources))
        holds.append(profile.hold(begin) if profile is not None else None)
        source = "profile"
        if request is None and level is not None:
            request, source = np.asarray(level, np.float64).copy(), "pooled"
        if request is None:
            request, source = _recorded_or_peak(e, resources)
        starts.append(np.asarray(request, np.float64))
        sources[source] += 1
    return starts, StartCounts(tuple((s, sources[s]) for s in SOURCES)), holds


def _recorded(ex: Execution, resources: Sequence[str]) -> dict[str, float]:
    """The requests the trace records for the pod, by resource (none where it records none)."""
    return {r: float(v) for r, v in zip(resources, trace_request(ex, resources))
            if np.isfinite(v)}


def trace_request(ex: Execution, resources: Sequence[str]) -> np.ndarray:
    """The request the trace records for the pod (AI4DL: cpu.num.cores, mem.limit), NaN where
    it records none."""
    meta = {"cpu": ex.meta.get("cpu_limit_cores"), "memory": ex.meta.get("memory_limit_bytes")}
    return np.array([meta.get(r) or np.nan for r in resources], np.float64)


def initial_request(ex: Execution, usage: np.ndarray, resources: Sequence[str]) -> np.ndarray:
    """The pod's request before any resize: the trace's own request/limit where it has one,
    else the execution's peak (a generous stand-in for a hand-set request)."""
    req = trace_request(ex, resources)
    return np.where(np.isfinite(req), req, usage.max(0))


def _recorded_or_peak(ex: Execution, resources: Sequence[str]) -> tuple[np.ndarray, str]:
    """The request the trace records; per resource where it records none, the execution's own
    peak (clairvoyant: the source is then ``peak`` if any resource needed it)."""
    req = trace_request(ex, resources)
    if np.isfinite(req).all():
        return req, "request"
    usage = (ex.select(resources).values.astype(np.float64) if len(ex)
             else np.zeros((1, len(resources))))
    return initial_request(ex, usage, resources), "peak"
