"""The executions the window loop is watching, summarised as they run, and handed to their
workload's profile when they end (issue 42: the profile is updated online, so a job re-run an
hour later starts from it before the next refit).

Pure: the runtime feeds it each window's plan (:meth:`RunTracker.observe`) and the pods it
listed (:meth:`RunTracker.ended`); it keeps, per (pod uid, container), the peaks of the run's
first ``EARLY_WINDOWS`` windows, its peak and when it came, and its memory's shape (the peak of
each of at most ``SHAPE_BINS`` stretches from its start, a stretch doubled as the run grows) —
a few floats, not samples.

A run is handed on when its pod ends (Succeeded, Failed, being deleted), vanishes from the
PhaseModel's pods, or its container restarts (an OOM kill: the run is marked, and its memory
bumped as VPA bumps it). Only a run watched from its first window is: a run the operator first
saw mid-way (it started before the operator did) has no first window to learn from, and is
left to the trainer's batch fill from Prometheus history. What a restarted operator loses is
the runs in progress (memory only): their pods end unprofiled, never wrongly profiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ai4dl.controller.pods import PodInfo
from ai4dl.rules.workload_profile import (EARLY_WINDOWS, SHAPE_BINS, RunSummary,
                                           bump_for_oom, bump_stretches, container_run_id)

#: A container that started this long before the first window the operator saw of it still
#: counts as watched from its start (the cpu feature's rate needs two scrapes).
START_SLACK_SECONDS = 60.0


@dataclass
class RunInProgress:
    workload: str
    run_id: str
    started: float                    # the container's start (unix s)
    restarts: int                     # its restart count when this run began
    complete: bool                    # watched from its first window
    #: (EARLY_WINDOWS, R): per run-relative window (its row: seconds since ``started`` ÷ the
    #: window's length), the largest sample seen in it; NaN rows: no sample (yet). One array a
    #: run, not a dict of one array per window (several times the memory: issue 44 item 3).
    early: np.ndarray | None = None
    peak: np.ndarray | None = None
    peak_at: np.ndarray | None = None
    last_window: float | None = None  # the end of the last window it was fed
    #: (SHAPE_BINS,): the memory's peak per stretch of ``shape_seconds`` from ``started`` (NaN:
    #: no sample yet); a stretch doubles when the run outgrows ``SHAPE_BINS`` of them
    shape: np.ndarray | None = None
    shape_seconds: float = 0.0

    def add(self, usage: np.ndarray, window_end: float, step: float,
            window_seconds: float, memory_index: int | None = None) -> None:
        """One window's samples (W, R), the last at ``window_end``.

        The early peaks are kept per window of the *run* (``window_seconds`` from the
        container's start), not of the operator's window grid: the first request of the next
        run must hold from its start until its first resize, which comes at most one window
        later wherever the grid falls; the grid's first window of a run is only the part of one
        in which it started (5 s in one run, 25 s in the next). The trainer's batch fill
        (:func:`~ai4dl.rules.workload_profile.summarise`) counts from the start too. Samples
        from before the container started (more than a step: a restarted container's
        predecessor) are not its run's."""
        add_windows([self], [usage], window_end, step, window_seconds, memory_index)

    def early_windows(self) -> list[np.ndarray]:
        """The early peaks from the run's first window on, in order; a window with no sample
        (a scrape gap) carries the one before it (at least what the run had reached)."""
        if self.early is None or np.isnan(self.early[0]).all():
            return []
        seen = ~np.isnan(self.early).all(1)
        out: list[np.ndarray] = []
        for k in range(int(np.flatnonzero(seen)[-1]) + 1):
            out.append(self.early[k].copy() if seen[k] else out[-1])
        return out

    def summary(self, run_id: str, end: float, oom_killed: bool,
                memory_index: int | None) -> RunSummary | None:
        early = self.early_windows()
        if not self.complete or not early or self.peak is None:
            return None
        peak = self.peak
        if oom_killed:
            early = [bump_for_oom(w, memory_index, True) for w in early]
            peak = bump_for_oom(peak, memory_index, True)
        shape = self.shape_stretches()
        if oom_killed and len(shape):
            shape = bump_stretches(shape)
        return RunSummary(float(end), max(float(end) - self.started, 0.0),
                          tuple(map(float, early[0])), tuple(map(float, peak)),
                          tuple(map(float, self.peak_at)), bool(oom_killed),
                          tuple(tuple(map(float, w)) for w in early), run_id,
                          tuple(map(float, shape)), self.shape_seconds if len(shape) else 0.0)

    def shape_stretches(self) -> np.ndarray:
        """The memory's peak per stretch up to the last one seen; a stretch with no sample (a
        scrape gap) carries the one before it."""
        if self.shape is None or np.isnan(self.shape).all():
            return np.empty(0)
        seen = np.flatnonzero(~np.isnan(self.shape))
        out = self.shape[: seen[-1] + 1].copy()
        out[: seen[0]] = out[seen[0]]          # none in its first stretches: its first seen
        for k in range(1, len(out)):
            if np.isnan(out[k]):
                out[k] = out[k - 1]
        return out


def add_windows(runs: Sequence[RunInProgress], usages: Sequence, window_end: float,
                step: float, window_seconds: float, memory_index: int | None = None) -> None:
    """:meth:`RunInProgress.add` of one window to many runs at once (at 10,000 pods one run
    at a time was ~0.6 s of numpy on arrays of a few values a window): runs whose windows have
    one shape are stacked."""
    groups: dict[tuple, tuple[list, list]] = {}
    for run, usage in zip(runs, usages):
        u = np.asarray(usage, np.float64)
        if run.last_window == window_end or u.ndim != 2 or not len(u):
            continue
        run.last_window = window_end
        group = groups.setdefault(u.shape, ([], []))
        group[0].append(run)
        group[1].append(u)
    for (length, _), (group, us) in groups.items():
        _add_stacked(group, np.stack(us), window_end - step * np.arange(
            length - 1, -1, -1, dtype=np.float64), step, float(window_seconds), memory_index)


def _add_stacked(runs: list[RunInProgress], u: np.ndarray, times: np.ndarray, step: float,
                 window_seconds: float, memory_index: int | None = None) -> None:
    """One window (n, W, R) of ``runs``, its samples at ``times`` (W,)."""
    started = np.array([r.started for r in runs], np.float64)[:, None]
    mine = times[None, :] >= started - step                       # (n, W)
    seen = np.isfinite(u) & mine[:, :, None]
    masked = np.where(seen, u, -np.inf)
    top = masked.max(1)
    top = np.where(np.isfinite(top), top, 0.0)
    index = (np.maximum(times[None, :] - started, 0.0) // window_seconds).astype(int)
    early = mine & (index < EARLY_WINDOWS) & seen.any(2)
    at = np.maximum(times[np.argmax(masked, axis=1)] - started, 0.0)     # (n, R)
    for k in np.unique(index[early]):           # a run's early windows, k at a time
        rows = early & (index == k)
        have = np.flatnonzero(rows.any(1))
        parts = np.where(rows[have][:, :, None], masked[have], -np.inf).max(1)
        parts = np.where(np.isfinite(parts), parts, 0.0)
        for i, part in zip(have, parts):
            run = runs[i]
            if run.early is None:
                run.early = np.full((EARLY_WINDOWS, len(part)), np.nan)
            # fmax: a window not seen yet (NaN) takes the part as it is
            run.early[k] = np.fmax(run.early[k], part)
    fed = seen.any((1, 2))              # runs with a sample of theirs in the window
    _raise_peaks([runs[i] for i in np.flatnonzero(fed)], top[fed], at[fed])
    if memory_index is not None and 0 <= memory_index < u.shape[2]:
        _add_shapes(runs, u[:, :, memory_index], seen[:, :, memory_index],
                    np.maximum(times[None, :] - started, 0.0), window_seconds)


def _add_shapes(runs: list[RunInProgress], memory: np.ndarray, seen: np.ndarray,
                elapsed: np.ndarray, window_seconds: float) -> None:
    """The window's memory samples (n, W), ``elapsed`` seconds after each run's start, into
    the runs' shapes: each sample's stretch keeps its largest."""
    fed = np.flatnonzero(seen.any(1))
    if not len(fed):
        return
    last = np.where(seen[fed], elapsed[fed], 0.0).max(1)
    width = np.array([runs[i].shape_seconds for i in fed])
    # new runs get their first stretches; a run that outgrew its stretches gets them doubled
    # (a run's stretches double about log2(its windows ÷ SHAPE_BINS) times in its life)
    for k in np.flatnonzero((width == 0) | (last >= SHAPE_BINS * width)):
        run = runs[fed[k]]
        if run.shape is None:
            run.shape, run.shape_seconds = np.full(SHAPE_BINS, np.nan), float(window_seconds)
        while last[k] // run.shape_seconds >= SHAPE_BINS:
            merged = np.fmax.reduce(run.shape.reshape(SHAPE_BINS // 2, 2), axis=1)
            run.shape = np.concatenate([merged, np.full(SHAPE_BINS // 2, np.nan)])
            run.shape_seconds *= 2.0
        width[k] = run.shape_seconds
    stack = np.stack([runs[i].shape for i in fed])
    width = width[:, None]
    index = np.minimum((elapsed[fed] // width).astype(int), SHAPE_BINS - 1)
    rows = np.broadcast_to(np.arange(len(fed))[:, None], index.shape)
    ok = seen[fed]
    np.fmax.at(stack, (rows[ok], index[ok]), memory[fed][ok])
    for k, i in enumerate(fed):
        runs[i].shape = stack[k].copy()


def _raise_peaks(runs: list[RunInProgress], top: np.ndarray, at: np.ndarray) -> None:
    """Each run's peak and when it came, raised where this window's ``top`` is higher."""
    known = [i for i, r in enumerate(runs) if r.peak is not None]
    higher = np.zeros(top.shape, bool)
    if known:
        higher[known] = top[known] > np.stack([runs[i].peak for i in known])
    for i, run in enumerate(runs):
        if run.peak is None:
            run.peak, run.peak_at = top[i].copy(), at[i].copy()
        elif higher[i].any():
            run.peak = np.where(higher[i], top[i], run.peak)
            run.peak_at = np.where(higher[i], at[i], run.peak_at)


@dataclass(frozen=True)
class EndedRun:
    workload: str
    container: str
    run: RunSummary
    uid: str = ""             # the pod's
    restarted: bool = False   # its container restarted (the pod runs on)


class RunTracker:
    """Runs in progress of one PhaseModel's containers, by (pod uid, container)."""

    def __init__(self, resources: Sequence[str] = ()):
        self.runs: dict[tuple[str, str], RunInProgress] = {}
        self.resources = tuple(resources)

    def observe(self, plan, window_end: float, window_samples: int, step: float) -> None:
        """Feed the window's plan (:class:`ai4dl.controller.plan_types.WindowPlan`)."""
        if tuple(plan.resources) != self.resources:
            self.runs.clear()            # other resources served: summaries would not match
            self.resources = tuple(plan.resources)
        first_sample = window_end - (window_samples - 1) * step
        fed: list[RunInProgress] = []
        usages: list[np.ndarray] = []
        for p in plan.pods:
            pod = p.pod
            for c in p.containers:
                if c.usage is None:
                    continue
                key = (pod.uid, c.name)
                run = self.runs.get(key)
                if run is None:
                    started = pod.started.get(c.name)
                    if started is None:
                        continue
                    run = self.runs[key] = RunInProgress(
                        pod.workload, container_run_id(pod.namespace, pod.name, c.name), started,
                        pod.restarts.get(c.name, 0),
                        complete=started >= first_sample - step - START_SLACK_SECONDS)
                if run.complete:        # a run seen mid-way is never summarised: not fed
                    fed.append(run)
                    usages.append(c.usage)
        memory = self.resources.index("memory") if "memory" in self.resources else None
        add_windows(fed, usages, window_end, step, window_samples * step, memory)

    def ended(self, listed: Sequence[PodInfo], now: float) -> list[EndedRun]:
        """The runs that ended since the last call: those of ``listed`` pods that ended or
        restarted a container, and those whose pod is no longer listed. Only runs watched from
        their start are returned (:meth:`RunInProgress.summary`); every ended one is
        forgotten."""
        memory = self.resources.index("memory") if "memory" in self.resources else None
        by_uid = {p.uid: p for p in listed}
        out: list[EndedRun] = []
        for key in list(self.runs):
            uid, container = key
            run = self.runs[key]
            pod = by_uid.get(uid)
            restarts = pod.restarts.get(container, run.restarts) if pod is not None else None
            if pod is not None and not pod.ended and restarts == run.restarts:
                continue
            del self.runs[key]
            restarted = pod is not None and restarts != run.restarts
            if pod is None:
                end, oom = run.last_window or now, False
            elif restarted:                     # the container restarted: that run is over
                end, oom = run.last_window or now, pod.oom_killed.get(container, False)
            else:
                end = pod.finished.get(container, now)
                oom = pod.oom_killed.get(container, False)
            summary = run.summary(run.run_id, end, oom, memory)
            if summary is not None:
                out.append(EndedRun(run.workload, container, summary, uid, restarted))
        return out


def oom_floors(ended: Sequence[EndedRun], resources: Sequence[str]
               ) -> dict[tuple[str, str], dict[str, float]]:
    """For each container restarted after an OOM kill: its memory request from now on, at
    least the run's bumped peak (VPA's bump on the usage the kill stopped at), set at once by
    the window's plan (:func:`ai4dl.controller.plan.plan_window`'s ``floors``)."""
    if "memory" not in resources:
        return {}
    m = list(resources).index("memory")
    return {(e.uid, e.container): {"memory": float(e.run.peak[m])}
            for e in ended if e.restarted and e.run.oom_killed}
