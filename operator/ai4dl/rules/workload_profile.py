"""What a workload's earlier executions say about its next one (issue 42: every job started
blind). A *workload* is one job re-run: a sweep's trials, a retry, a nightly retrain, the ranks
of one job. Its profile is learned from the executions that ended before the next one starts,
and gives that one its first request instead of the pooled first-window level that a workload
never seen gets.

Per execution the profile keeps one small summary (:class:`RunSummary`): the peaks of its first
few windows, the lifetime peak, when that peak came, how long the run lasted, whether it was
OOM-killed, and its memory's *shape*: the peak of each of at most ``SHAPE_BINS`` stretches from
its start (a stretch a power of two of windows, the least that fits the run). Under the safety
layer a new run's memory is **held** stretch by stretch at what the workload's runs used there
(:meth:`WorkloadProfile.hold`, :func:`held_level`): a run that peaked late is held low until
its peak's stretch, not at its peak from the start.

The profile keeps the ``MAX_RUNS`` most recent runs and weighs them by age with VPA's half-life
(24 h): the first request is the weighted ``UPPER_PERCENTILE`` quantile, over the remembered
runs, of the least start from which the safety layer could follow the run's early climb (its
first-window peak when nothing limits the growth), VPA's upper-bound percentile, so a run a week old counts for less than
yesterday's, and with a few recent runs it is the largest of them; plus VPA's 15 % safety
margin, since a re-run's first window varies with its seed. An OOM-killed run's memory
is bumped as VPA bumps it (×1.2, at least +100 MiB), since its usage stopped at the limit.
Every constant is VPA's (``SHAPE_BINS`` is a storage bound), none was chosen by looking at
results.

Bounded: a profile of ``MAX_RUNS`` runs of R resources is a fixed number of floats (its JSON
:meth:`WorkloadProfile.size_bytes`). Pure: numpy only, imports nothing from the package.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

#: VPA's decay half-life of its usage histograms (recommender ``--memory-histogram-decay-half-life``
#: and ``--cpu-histogram-decay-half-life``, both 24 h).
HALF_LIFE_S = 24 * 3600.0
#: Executions remembered per workload (VPA keeps 8 days of history; 8 recent runs here).
MAX_RUNS = 8
#: VPA's upper-bound percentile (``--upper-bound-*-percentile`` 0.95).
UPPER_PERCENTILE = 0.95
#: VPA's safety margin on a recommendation (recommender ``--recommendation-margin-fraction``
#: 0.15; KRR's memory buffer is 15 % too): a re-run's first window varies with its seed.
RECOMMENDATION_MARGIN = 0.15
#: VPA's OOM bump: ``OOMBumpUpRatio`` 1.2 and ``OOMMinBumpUp`` 100 MiB.
OOM_BUMP_RATIO = 1.2
OOM_MIN_BUMP_BYTES = 100 * 1024.0 ** 2


class ProfileError(ValueError):
    """A stored profile that cannot be read back (one line, naming the field)."""


#: Windows whose peaks a run summary keeps from its start: enough for the first request to
#: leave room for the climb that follows it (:meth:`WorkloadProfile.first_request`); past them
#: the safety layer's growth (at its default, ×2 a window: ×256 after 8) covers any climb.
EARLY_WINDOWS = 8


@dataclass(frozen=True)
class RunSummary:
    """One execution of a workload, as its profile remembers it (per resource)."""
    end: float                    # when it ended (unix seconds)
    duration: float               # seconds it ran
    first: tuple[float, ...]      # the first window's peak
    peak: tuple[float, ...]       # the lifetime peak
    peak_at: tuple[float, ...]    # seconds from its start to the first sample at that peak
    oom_killed: bool = False
    #: the peaks of its first ``EARLY_WINDOWS`` windows (the first is ``first``), oldest first
    early: tuple[tuple[float, ...], ...] = ()
    #: which container it was (a hash of namespace, pod and container name): with its start,
    #: what makes an execution reported twice — by the window loop and by the trainer's batch
    #: fill, or by an operator restarted before its write was seen — count once
    run_id: str = ""
    #: the memory (:data:`SHAPE_RESOURCE`) it used, stretch by stretch from its start: the peak
    #: in each of at most ``SHAPE_BINS`` stretches of ``shape_seconds`` (:func:`run_shape`);
    #: empty where unknown (a profile stored before shapes were kept)
    shape: tuple[float, ...] = ()
    shape_seconds: float = 0.0

    @property
    def start(self) -> float:
        return self.end - self.duration

    def same_execution(self, other: "RunSummary") -> bool:
        """The same container's run: one id, and their times overlap (two runs of one container
        never do; two reports of one run do, though the window loop knows its start from the
        kubelet and its end from the pod, Prometheus both from its samples)."""
        return bool(self.run_id) and self.run_id == other.run_id and (
            (self.start < other.end and other.start < self.end)
            or (self.start, self.end) == (other.start, other.end))

    def windows(self) -> np.ndarray:
        """(windows, R): its early window peaks, at least the first."""
        return np.array(self.early if self.early else (self.first,), np.float64)


def container_run_id(namespace: str, pod: str, container: str) -> str:
    """A container's run id: its namespace, pod and name, hashed (the window loop computes it
    from the pod, the trainer's batch fill from Prometheus' labels; with the run's times it
    tells one execution from another: :meth:`RunSummary.same_execution`)."""
    return hashlib.sha256(f"{namespace}\0{pod}\0{container}".encode()).hexdigest()[:16]


#: The resource a hold keeps, and whose shape a run summary remembers.
SHAPE_RESOURCE = "memory"
#: Stretches a run's memory is remembered in (its shape, which the hold follows): at most this
#: many, each a power of two of windows long, the least that fits the run. A storage bound (32
#: values a run, 256 a profile), not a figure read off a result.
SHAPE_BINS = 32


def shape_width(n_windows: int) -> int:
    """Windows per stretch of a run ``n_windows`` long: the least power of two that fits it in
    ``SHAPE_BINS`` stretches (the window loop doubles it as the run grows)."""
    width = 1
    while n_windows > SHAPE_BINS * width:
        width *= 2
    return width


def run_shape(window_peaks: np.ndarray) -> tuple[np.ndarray, int]:
    """(the peak of each stretch, windows per stretch) of a run whose windows peaked at
    ``window_peaks`` (oldest first)."""
    peaks = np.asarray(window_peaks, np.float64)
    width = shape_width(len(peaks))
    return np.maximum.reduceat(peaks, np.arange(0, len(peaks), width)), width


@dataclass(frozen=True, eq=False)
class Hold:
    """The memory a workload's profile holds in a new run, seconds from its start.

    As a request, stretch by stretch: ``levels[k]`` from ``edges[k]`` to ``edges[k + 1]``
    (NaN: nothing held), nothing after the last edge. As a limit (a Guaranteed pod, whose
    request is its limit): usage over it is an OOM kill, not a window at risk that the
    policy's objective prices, so a limit keeps the runs' ``peak`` (with VPA's margin) from the
    start until ``until``, the latest point where a run reached its own."""
    edges: np.ndarray
    levels: np.ndarray
    peak: float = math.nan
    until: float = -math.inf


def held_level(hold: Hold | None, elapsed: float, as_limit: bool = False,
               length: float = 0.0) -> float:
    """The level a hold keeps for the window that starts ``elapsed`` seconds into a run and
    lasts ``length`` seconds: the highest level held in any stretch the window overlaps, NaN
    where it overlaps none (past the last, and without a hold). The window loop and the
    evaluator's replay both ask this function.

    ``as_limit``: the request held is also the container's limit (a Guaranteed pod, whose
    limits follow its requests): the runs' peak while the window starts at or before the point
    where the latest of them reached it (the window that holds that point is held too), with
    VPA's safety margin (``RECOMMENDATION_MARGIN``), since a re-run's peak varies with its seed
    and the largest of a few runs is exceeded by the next one about once in (runs + 1). Usage
    over a request is a window at risk, which the policy's own objective prices; usage over a
    limit is an OOM kill. On the real node the bare peak was one: a transformer run peaked at
    808 MiB over its one earlier run's 775 MiB, held at 793 MiB (docs/results.md §9). The
    evaluator replays requests only (risk), so it asks for a request; priced there, the margin
    cost 5-15 % on the synthetic re-runs and GCD (docs/results/starts.py, 2026-12-04)."""
    if hold is None:
        return math.nan
    if as_limit:
        ok = elapsed <= hold.until and math.isfinite(hold.peak)
        return hold.peak * (1.0 + RECOMMENDATION_MARGIN) if ok else math.nan
    if not len(hold.levels) or elapsed >= hold.edges[-1]:
        return math.nan
    first = max(int(np.searchsorted(hold.edges, elapsed, "right")) - 1, 0)
    last = (int(np.searchsorted(hold.edges, elapsed + length, "left")) - 1 if length > 0
            else first)
    last = min(last, len(hold.levels) - 1)
    if last < first:                    # a window that ends before the run starts
        return math.nan
    level = np.fmax.reduce(hold.levels[first: last + 1])
    return float(level) if math.isfinite(level) else math.nan


def held_levels(hold: Hold | None, elapsed: np.ndarray, length: float = 0.0) -> np.ndarray:
    """:func:`held_level` (as a request) of many windows of one run at once, each starting
    ``elapsed`` seconds into it: what the evaluator asks for every window of an execution."""
    t = np.asarray(elapsed, np.float64)
    out = np.full(t.shape, np.nan)
    if hold is None or not len(hold.levels):
        return out
    n = len(hold.levels)
    first = np.maximum(np.searchsorted(hold.edges, t, "right") - 1, 0)
    last = (np.searchsorted(hold.edges, t + length, "left") - 1 if length > 0 else first)
    last = np.minimum(last, n - 1)
    inside = (t < hold.edges[-1]) & (last >= first)
    out[inside] = hold.levels[first[inside]]
    for i in np.flatnonzero(inside & (last > first)):     # a window over several stretches
        out[i] = np.fmax.reduce(hold.levels[first[i]: last[i] + 1])
    return out


def combined_hold(stretches: Sequence[tuple[np.ndarray, np.ndarray]],
                  weights: np.ndarray, q: float = UPPER_PERCENTILE) -> Hold:
    """One hold from each run's stretches (their ends in seconds from the run's start and their
    levels; a run's first stretch starts at 0): on every piece between two ends, the weighted
    upper percentile (:func:`weighted_upper`) over the runs still running there."""
    if len(stretches) == 1:            # one run: its own stretches (the usual profile)
        edges = np.concatenate([[0.0], stretches[0][0]])
        held = np.asarray(stretches[0][1], np.float64)
    else:
        edges = np.unique(np.concatenate([[0.0], *[e for e, _ in stretches]]))
        mids = (edges[:-1] + edges[1:]) / 2.0
        grid = np.full((len(stretches), len(mids)), np.nan)
        for i, (ends, levels) in enumerate(stretches):
            k = np.searchsorted(ends, mids, "right")
            inside = k < len(ends)
            grid[i, inside] = levels[k[inside]]
        held = _weighted_upper_columns(grid, weights, q)
    # a piece at the level of the one before it is one with it (what the operator keeps per
    # workload: a few dozen numbers, not every run's every stretch)
    same = np.concatenate([[False], (held[1:] == held[:-1])
                           | (np.isnan(held[1:]) & np.isnan(held[:-1]))])
    return Hold(np.append(edges[:-1][~same], edges[-1]), held[~same])


def _weighted_upper_columns(grid: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """:func:`weighted_upper` of every column of ``grid`` (runs × pieces) at once, a NaN not
    counted (all NaN: NaN)."""
    finite = np.isfinite(grid)
    w = np.where(finite, np.asarray(weights, np.float64)[:, None], 0.0)
    order = np.argsort(np.where(finite, grid, np.inf), axis=0, kind="stable")
    v = np.take_along_axis(grid, order, axis=0)
    cum = np.cumsum(np.take_along_axis(w, order, axis=0), axis=0)
    total = cum[-1]
    k = (cum < (q * total - 1e-12 * total)[None, :]).sum(axis=0)
    out = v[np.minimum(k, len(grid) - 1), np.arange(grid.shape[1])]
    return np.where(total > 0, out, np.nan)


#: Resources a start from a workload's profile never raises above the container's own request.
#: cpu short of need only slows a run, and the window loop raises it in place, which a node
#: without room defers; a raise at the pod's start can make it a pod the node refuses, or no
#: node fits. And a run held at its cpu limit shows only that it used all it had: the
#: profile's margin above that is a guess. On the real node two jobs each asking for 1 of the
#: node's 2 cores, started at 1.10 core from profiles of runs that used 0.96 at their 1-core
#: limit: the second was refused (OutOfcpu) and failed. Memory may start above the request:
#: an OOM kill ends the run.
CAPPED_AT_REQUEST = ("cpu",)


def start_within_request(first: Sequence[float], resources: Sequence[str],
                         requests: Mapping[str, float] | None) -> np.ndarray:
    """``first`` (a profile's first request, in ``resources`` order) with each resource of
    ``CAPPED_AT_REQUEST`` at most the container's own request (``requests``: resource ->
    value; a resource it does not request is left as it is)."""
    out = np.array(first, np.float64)
    for j, r in enumerate(resources):
        cap = (requests or {}).get(r)
        if r in CAPPED_AT_REQUEST and cap is not None and cap > 0 and out[j] > cap:
            out[j] = float(cap)
    return out


def bump_for_oom(values: np.ndarray, memory_index: int | None, bytes_unit: bool) -> np.ndarray:
    """VPA's OOM bump on the memory column: ×1.2, and at least +100 MiB where memory is in
    bytes (the usage an OOM kill recorded stopped at the limit, below what the run needed)."""
    out = np.array(values, np.float64)
    if memory_index is not None and 0 <= memory_index < len(out):
        v = out[memory_index]
        bumped = v * OOM_BUMP_RATIO
        if bytes_unit:
            bumped = max(bumped, v + OOM_MIN_BUMP_BYTES)
        out[memory_index] = bumped
    return out


def bump_stretches(levels: np.ndarray, bytes_unit: bool = True) -> np.ndarray:
    """A memory shape's stretches each bumped as an OOM kill bumps memory
    (:func:`bump_for_oom`)."""
    return np.array([bump_for_oom(np.array([v]), 0, bytes_unit)[0] for v in levels])


def summarise(usage: np.ndarray, step: float, window: int, start: float,
              oom_killed: bool = False, memory_index: int | None = None,
              bytes_unit: bool = True) -> RunSummary:
    """One execution's summary from its usage (samples × resources, ``step`` seconds apart,
    the first at ``start``); ``oom_killed`` bumps its memory (:func:`bump_for_oom`)."""
    u = np.asarray(usage, np.float64)
    if u.ndim != 2 or len(u) == 0:
        raise ValueError("a run summary needs at least one sample of every resource")
    if window < 1:
        raise ValueError(f"window must be at least 1 sample, got {window}")
    u = np.where(np.isfinite(u), u, 0.0)
    early = np.maximum.reduceat(u[: window * EARLY_WINDOWS],
                                np.arange(0, min(len(u), window * EARLY_WINDOWS), window), axis=0)
    peak = u.max(0)
    peak_at = np.argmax(u >= peak[None, :], axis=0).astype(np.float64) * float(step)
    if oom_killed:
        early = np.array([bump_for_oom(w, memory_index, bytes_unit) for w in early])
        peak = bump_for_oom(peak, memory_index, bytes_unit)
    duration = float(len(u)) * float(step)
    shape, shape_seconds = (), 0.0
    if memory_index is not None and 0 <= memory_index < u.shape[1]:
        mem = u[:, memory_index]
        bins, width = run_shape(np.maximum.reduceat(mem, np.arange(0, len(mem), window)))
        if oom_killed:
            bins = bump_stretches(bins, bytes_unit)
        shape, shape_seconds = tuple(map(float, bins)), float(width * window * step)
    return RunSummary(float(start) + duration, duration, tuple(map(float, early[0])),
                      tuple(map(float, peak)), tuple(map(float, peak_at)), bool(oom_killed),
                      tuple(tuple(map(float, w)) for w in early), shape=shape,
                      shape_seconds=shape_seconds)


def weighted_upper(values: np.ndarray, weights: np.ndarray,
                   q: float = UPPER_PERCENTILE) -> np.ndarray:
    """Per column of ``values`` (runs × R): the smallest value whose cumulative weight (runs
    sorted by value) reaches ``q`` of the total, VPA's histogram percentile over a handful of
    runs. Equal weights and fewer than 20 runs: the largest value."""
    v = np.asarray(values, np.float64)
    w = np.asarray(weights, np.float64)
    out = np.empty(v.shape[1])
    for j in range(v.shape[1]):
        order = np.argsort(v[:, j], kind="stable")
        cum = np.cumsum(w[order])
        k = int(np.searchsorted(cum, q * cum[-1] - 1e-12 * cum[-1]))
        out[j] = v[order[min(k, len(order) - 1)], j]
    return out


@dataclass(frozen=True)
class WorkloadProfile:
    """A workload's remembered executions (the ``MAX_RUNS`` most recent, oldest first) and its
    counts. Immutable: :meth:`observe` returns the next profile."""
    resources: tuple[str, ...]
    runs: tuple[RunSummary, ...] = ()
    executions: int = 0            # executions ever observed (not only those remembered)
    oom_kills: int = 0
    max_runs: int = MAX_RUNS
    half_life_s: float = HALF_LIFE_S

    def observe(self, run: RunSummary) -> "WorkloadProfile":
        """This profile with ``run`` added (kept in order of end; the oldest forgotten past
        ``max_runs``)."""
        if len(run.first) != len(self.resources):
            raise ValueError(f"a run of {len(run.first)} resources for a profile of "
                             f"{len(self.resources)} ({', '.join(self.resources)})")
        if any(r.same_execution(run) for r in self.runs):
            return self
        runs = sorted((*self.runs, run), key=lambda r: r.end)[-self.max_runs:]
        return WorkloadProfile(self.resources, tuple(runs), self.executions + 1,
                               self.oom_kills + int(run.oom_killed), self.max_runs,
                               self.half_life_s)

    def weights(self, now: float) -> np.ndarray:
        """Each remembered run's weight at ``now``: halved every ``half_life_s`` since it
        ended (a run that ends after ``now`` weighs as one that just ended)."""
        age = np.array([max(now - r.end, 0.0) for r in self.runs], np.float64)
        return np.power(0.5, age / self.half_life_s)

    def first_request(self, now: float, max_increase: float | None = None
                      ) -> np.ndarray | None:
        """The first request for the workload's next execution, per resource, with VPA's
        safety margin (``RECOMMENDATION_MARGIN``); None when it has no run.

        Per run, the least start from which the safety layer, growing the request by at most
        ``max_increase`` a window, can still follow that run's climb: the largest of its early
        window peaks ``p_w`` over ``(1 + max_increase)^w`` (its first-window peak when nothing
        limits the growth, ``max_increase`` None). A start cut to the first window alone
        would leave the next windows short whatever a policy proposed, since the layer could
        not raise it fast enough. Then the weighted upper percentile over the runs.

        The early windows are the run's own (counted from its start, not the operator's grid),
        so the first one is what the start must hold until the first resize, which comes at
        most one window after the start: a Guaranteed pod, whose request is its limit, needs
        no more than that (from the first resize on, the workload's hold, :meth:`hold`, keeps
        its memory at its runs' peak)."""
        return self.compact().first_request(now, max_increase)

    @property
    def n_runs(self) -> int:
        return len(self.runs)

    def compact(self) -> "CompactProfile":
        """The arrays :meth:`first_request` reads, without the rest (what admission keeps in
        memory per workload: a few hundred bytes instead of a few thousand)."""
        early = np.full((len(self.runs), EARLY_WINDOWS, len(self.resources)), np.nan)
        for i, r in enumerate(self.runs):
            w = r.windows()[:EARLY_WINDOWS]
            early[i, :len(w)] = w
        return CompactProfile(self.resources, early,
                              np.array([r.end for r in self.runs], np.float64),
                              self.half_life_s)

    def peak(self, now: float) -> tuple[np.ndarray, np.ndarray] | None:
        """The peak its runs reached (weighted upper percentile, per resource) and the latest
        point in a run at which a run reached its own peak (seconds from its start): what the
        in-place policy would hold until that point has passed. None when it has no run."""
        if not self.runs:
            return None
        level = weighted_upper(np.array([r.peak for r in self.runs]), self.weights(now))
        return level, np.array([r.peak_at for r in self.runs]).max(0)

    def hold(self, now: float, resource: str = SHAPE_RESOURCE) -> Hold | None:
        """What the safety layer holds of ``resource`` in a new run of the workload, stretch by
        stretch from its start (:func:`combined_hold`): where its runs were still running, the
        weighted upper percentile of what they used in that stretch (:attr:`RunSummary.shape`:
        a run that peaked late is held low until its peak's stretch, not at its peak from the
        start); a run stored without a shape (before shapes were kept), its peak until the
        point where it reached it. Held as a limit (a Guaranteed pod), the runs' peak until the
        latest point where one reached its own (:class:`Hold`). None without a run or the
        resource. :func:`held_level` reads it per window."""
        if not self.runs or resource not in self.resources:
            return None
        j = self.resources.index(resource)
        weights = self.weights(now)
        # a limit's hold: their peak until the latest point where a run reached its own
        level, latest = self.peak(now)
        peak, until = float(level[j]), float(latest[j])
        if resource != SHAPE_RESOURCE or not any(r.shape for r in self.runs):
            # no shapes (stored before they were kept): a request's hold is the limit's
            return Hold(np.array([0.0, np.nextafter(until, math.inf)]), np.array([peak]),
                        peak, until)
        shaped = combined_hold([_stretches(r, j) for r in self.runs], weights)
        return Hold(shaped.edges, shaped.levels, peak, until)

    # ------------------------------------------------------------------ storage
    def to_dict(self) -> dict:
        """Plain data; every measured value to ``SIGNIFICANT_DIGITS`` (a relative change of at
        most 5e-7, far below any margin: about half the bytes of full floats)."""
        def run(r: RunSummary) -> dict:
            out = {"end": round(r.end, 1), "duration": round(r.duration, 1),
                   "first": _rounded(r.first), "peak": _rounded(r.peak),
                   "peakAt": _rounded(r.peak_at), "oomKilled": r.oom_killed,
                   "early": [_rounded(w) for w in r.early]}
            if r.shape:
                out["shape"] = _rounded(r.shape)
                out["shapeSeconds"] = round(r.shape_seconds, 1)
            if r.run_id:
                out["id"] = r.run_id
            return out
        return {"resources": list(self.resources), "executions": self.executions,
                "oomKills": self.oom_kills, "runs": [run(r) for r in self.runs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    def size_bytes(self) -> int:
        """Bytes of its compact JSON form (what a stored profile takes)."""
        return len(self.to_json().encode())

    @classmethod
    def from_dict(cls, doc: dict, max_runs: int = MAX_RUNS) -> "WorkloadProfile":
        """The profile a :meth:`to_dict` wrote; :class:`ProfileError` naming the field for
        anything else (a stored profile is read back, never trusted blindly)."""
        if not isinstance(doc, dict):
            raise ProfileError("a workload profile must be a mapping")
        res = doc.get("resources")
        if not (isinstance(res, list) and res and all(isinstance(r, str) for r in res)):
            raise ProfileError("profile.resources: a non-empty list of names expected")
        R = len(res)
        runs = []
        raw_runs = doc.get("runs", [])
        if not isinstance(raw_runs, list):
            raise ProfileError("profile.runs: a list expected")
        for i, r in enumerate(raw_runs[-max_runs:]):
            where = f"profile.runs[{i}]"
            if not isinstance(r, dict):
                raise ProfileError(f"{where}: a mapping expected")
            vec = {}
            for key in ("first", "peak", "peakAt"):
                v = r.get(key)
                if not (isinstance(v, list) and len(v) == R
                        and all(_finite_non_negative(x) for x in v)):
                    raise ProfileError(f"{where}.{key}: {R} finite non-negative numbers "
                                       f"expected")
                vec[key] = tuple(float(x) for x in v)
            for key in ("end", "duration"):
                if not _finite_non_negative(r.get(key)):
                    raise ProfileError(f"{where}.{key}: a finite non-negative number expected")
            early = r.get("early", [])
            if not (isinstance(early, list) and len(early) <= EARLY_WINDOWS and all(
                    isinstance(w, list) and len(w) == R and all(_finite_non_negative(x)
                                                                for x in w) for w in early)):
                raise ProfileError(f"{where}.early: at most {EARLY_WINDOWS} lists of {R} finite "
                                   f"non-negative numbers expected")
            shape = r.get("shape", [])
            if not (isinstance(shape, list) and len(shape) <= SHAPE_BINS
                    and all(_finite_non_negative(x) for x in shape)):
                raise ProfileError(f"{where}.shape: at most {SHAPE_BINS} finite non-negative "
                                   f"numbers expected")
            shape_seconds = r.get("shapeSeconds", 0.0)
            if not _finite_non_negative(shape_seconds) or (shape and not shape_seconds > 0):
                raise ProfileError(f"{where}.shapeSeconds: a positive number expected with a "
                                   f"shape")
            run_id = r.get("id", "")
            if not (isinstance(run_id, str) and len(run_id) <= 64):
                raise ProfileError(f"{where}.id: a string of at most 64 characters expected")
            runs.append(RunSummary(float(r["end"]), float(r["duration"]), vec["first"],
                                   vec["peak"], vec["peakAt"], bool(r.get("oomKilled", False)),
                                   tuple(tuple(float(x) for x in w) for w in early), run_id,
                                   tuple(float(x) for x in shape), float(shape_seconds)))
        counts = {}
        for key in ("executions", "oomKills"):
            v = doc.get(key, 0)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise ProfileError(f"profile.{key}: a non-negative integer expected")
            counts[key] = v
        return cls(tuple(res), tuple(sorted(runs, key=lambda x: x.end)),
                   max(counts["executions"], len(runs)), counts["oomKills"], max_runs)


#: Significant digits a stored profile keeps of each measured value.
SIGNIFICANT_DIGITS = 6


def _rounded(values: Sequence[float]) -> list[float]:
    return [float(f"{x:.{SIGNIFICANT_DIGITS}g}") for x in values]


@dataclass(frozen=True, eq=False)
class CompactProfile:
    """What :meth:`WorkloadProfile.first_request` reads: per remembered run its early window
    peaks (runs, ``EARLY_WINDOWS``, R; NaN past a run's last) and its end."""
    resources: tuple[str, ...]
    early: np.ndarray
    ends: np.ndarray
    half_life_s: float = HALF_LIFE_S

    @property
    def n_runs(self) -> int:
        return len(self.ends)

    def first_request(self, now: float, max_increase: float | None = None
                      ) -> np.ndarray | None:
        """See :meth:`WorkloadProfile.first_request` (which calls this)."""
        if not len(self.ends):
            return None
        need = self.early[:, 0, :]
        if max_increase is not None and self.early.shape[1] > 1:
            # from the first resize on, the layer can raise it by (1 + max_increase) a window
            growth = np.power(1.0 + float(max_increase),
                              np.arange(1, self.early.shape[1]))[None, :, None]
            need = np.fmax(need, np.fmax.reduce(self.early[:, 1:, :] / growth, axis=1))
        weights = np.power(0.5, np.maximum(now - self.ends, 0.0) / self.half_life_s)
        return weighted_upper(need, weights) * (1.0 + RECOMMENDATION_MARGIN)


def _stretches(run: RunSummary, j: int) -> tuple[np.ndarray, np.ndarray]:
    """A run's memory stretches (their ends, seconds from its start, and levels): its shape up
    to its end; a run without one (stored before shapes were kept, beside runs with one), its
    peak up to and including the point where it came."""
    if run.shape and run.shape_seconds > 0:
        ends = np.minimum(run.shape_seconds * np.arange(1, len(run.shape) + 1), run.duration)
        keep = np.concatenate([[True], ends[1:] > ends[:-1]]) & (ends > 0)
        return ends[keep], np.asarray(run.shape, np.float64)[keep]
    return (np.array([np.nextafter(run.peak_at[j], math.inf)]),
            np.array([run.peak[j]], np.float64))


def _finite_non_negative(x) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and x >= 0)


def profile_from_runs(resources: Sequence[str], runs: Sequence[RunSummary],
                      max_runs: int = MAX_RUNS) -> WorkloadProfile:
    """A profile that has observed ``runs`` (any order)."""
    p = WorkloadProfile(tuple(resources), max_runs=max_runs)
    for r in sorted(runs, key=lambda x: x.end):
        p = p.observe(r)
    return p
