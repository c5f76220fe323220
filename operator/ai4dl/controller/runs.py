"""The executions the window loop is watching, summarised as they run, and handed to their
workload's profile when they end (issue 42: the profile is updated online, so a job re-run an
hour later starts from it before the next refit).

Pure: the runtime feeds it each window's plan (:meth:`RunTracker.observe`) and the pods it
listed (:meth:`RunTracker.ended`); it keeps, per (pod uid, container), the peaks of the run's
first ``EARLY_WINDOWS`` windows, its peak and when it came — a few floats, not samples.

A run is handed on when its pod ends (Succeeded, Failed, being deleted), vanishes from the
PhaseModel's pods, or its container restarts (an OOM kill: the run is marked, and its memory
bumped as VPA bumps it). Only a run watched from its first window is: a run the operator first
saw mid-way (it started before the operator did) has no first window to learn from, and is
left to the trainer's batch fill from Prometheus history. What a restarted operator loses is
the runs in progress (memory only): their pods end unprofiled, never wrongly profiled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ai4dl.controller.pods import PodInfo
from ai4dl.rules.workload_profile import (EARLY_WINDOWS, RunSummary, bump_for_oom,
                                           container_run_id)

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
    #: per run-relative window (its index: seconds since ``started`` ÷ the window's length),
    #: the largest sample seen in it
    early: dict[int, np.ndarray] = field(default_factory=dict)
    peak: np.ndarray | None = None
    peak_at: np.ndarray | None = None
    last_window: float | None = None  # the end of the last window it was fed

    def add(self, usage: np.ndarray, window_end: float, step: float,
            window_seconds: float) -> None:
        """One window's samples (W, R), the last at ``window_end``.

        The early peaks are kept per window of the *run* (``window_seconds`` from the
        container's start), not of the operator's window grid: the first request of the next
        run must hold from its start until its first resize, which comes at most one window
        later wherever the grid falls; the grid's first window of a run is only the part of one
        in which it started (5 s in one run, 25 s in the next). The trainer's batch fill
        (:func:`~ai4dl.rules.workload_profile.summarise`) counts from the start too. Samples
        from before the container started (more than a step: a restarted container's
        predecessor) are not its run's."""
        u = np.asarray(usage, np.float64)
        if self.last_window == window_end or u.ndim != 2 or not len(u):
            return
        self.last_window = window_end
        times = window_end - step * np.arange(len(u) - 1, -1, -1, dtype=np.float64)
        mine = times >= self.started - step
        seen = np.isfinite(u) & mine[:, None]
        if not seen.any():
            return
        masked = np.where(seen, u, -np.inf)
        top = masked.max(0)
        top = np.where(np.isfinite(top), top, 0.0)
        index = (np.maximum(times - self.started, 0.0) // float(window_seconds)).astype(int)
        for k in np.unique(index[mine & (index < EARLY_WINDOWS) & seen.any(1)]):
            part = masked[index == k].max(0)
            part = np.where(np.isfinite(part), part, 0.0)
            have = self.early.get(int(k))
            self.early[int(k)] = part if have is None else np.maximum(have, part)
        at = times[np.argmax(masked, axis=0)] - self.started
        if self.peak is None:
            self.peak, self.peak_at = top.copy(), np.maximum(at, 0.0)
        else:
            higher = top > self.peak
            self.peak = np.where(higher, top, self.peak)
            self.peak_at = np.where(higher, np.maximum(at, 0.0), self.peak_at)

    def early_windows(self) -> list[np.ndarray]:
        """The early peaks from the run's first window on, in order; a window with no sample
        (a scrape gap) carries the one before it (at least what the run had reached)."""
        if 0 not in self.early:
            return []
        out = []
        for k in range(max(self.early) + 1):
            out.append(self.early.get(k, out[-1] if out else None))
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
        return RunSummary(float(end), max(float(end) - self.started, 0.0),
                          tuple(map(float, early[0])), tuple(map(float, peak)),
                          tuple(map(float, self.peak_at)), bool(oom_killed),
                          tuple(tuple(map(float, w)) for w in early), run_id)


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
                    run.add(c.usage, window_end, step, window_samples * step)

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
