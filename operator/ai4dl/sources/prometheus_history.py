"""Days of pod history from Prometheus, in bounded pieces, as one execution per container run.

:class:`PrometheusHistory` turns the PhaseModel's feature templates and a user's label matchers
into :class:`~ai4dl.method.traces.Execution` objects for the trainer::

    src = PrometheusSource("http://prometheus:9090")
    hist = PrometheusHistory(src, features, 'namespace="ml",pod=~"resnet-.*"', step=15)
    result = hist.executions(start=now - 14 * 86400, end=now)
    result.executions, result.queries, result.points

**Bounded queries.** The pods are found first (``/api/v1/series`` for the metrics the
templates name, with the user's matchers), with how many raw series each has (restarts and
cAdvisor's per-container ids make several). Then the pull is cut two ways:

* in time, at most ``max_points`` grid points per range query (Prometheus refuses more than
  11,000 points per series);
* by pods, so that one answer carries at most ``max_answer_points`` points (JSON answers cost
  ~30 bytes a point to parse) and loads at most ``max_query_samples`` raw samples (Prometheus
  stops a query at ``--query.max-samples``, 50M by default; each raw series is counted with
  the samples a ``rate()`` window reads per grid point).

Each query is :meth:`PrometheusSource.fetch` (one POSTed range query for all features of a
batch of pods); the templates' ``{selector}`` gets the user's matchers and the batch's pod
matchers.

**Executions.** A container's grid is cut where it restarted — cAdvisor's
``container_start_time_seconds`` changes (a new container id) or the CPU counter resets — and
at gaps longer than ``max_gap_steps`` steps (rows where a feature is missing count as gaps;
shorter gaps are interpolated, as :func:`ai4dl.method.traces.regularise` does for trace files).
Pieces shorter than ``min_samples`` are dropped. Two edges of a container run are not
measurements and are dropped too, so that every Prometheus-API store reads the same samples
(docs/reference.md, "Past one Prometheus"):

* the first rate window of a run (``warmup``: the longest ``[range]`` of the templates): a
  ``rate()`` whose window starts before the container's first sample is extrapolated by
  Prometheus and computed from a partial window by VictoriaMetrics, and the two disagree —
  unless the store's reading is known (:func:`~ai4dl.sources.prometheus.young_rates_diluted`,
  asked once) and every ranged template is one ``rate``: then a run whose start is known keeps
  its first minute, read over the container's age (:mod:`ai4dl.sources.young_rates`: what the
  window loop does live), so its first window is the one the operator saw (issue 42);
* trailing points where the memory gauge has no sample in the last step (the ``__stale``
  marker): a lookback repeat after the container stopped, where no staleness marker ended the
  series (backfilled history, a store without staleness markers).

Executions are named
``namespace/pod/container`` (``#2``... after a gap, ``~2``... after a restart) and grouped by
``namespace/pod``.
"""

from __future__ import annotations

import re
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ai4dl.crd_spec import parse_duration
from ai4dl.sources.prometheus import PrometheusSource, young_rates_diluted
from ai4dl.sources.prometheus_types import DEFAULT_RATE_WINDOW, FeatureQuery, PodRef
from ai4dl.method.traces import CANONICAL_UNITS, DEFAULT_MAX_GAP_STEPS, Execution, regularise
from ai4dl.sources.young_rates import feature_rate_ranges, undilute

MAX_ANSWER_POINTS = 500_000
MAX_QUERY_SAMPLES = 20_000_000     # well under Prometheus's default query.max-samples (50M)
SAMPLES_PER_POINT = 5              # raw samples a 1m rate() window reads at a 15 s scrape
MIN_SAMPLES = 8
_RANGE = re.compile(r"\[([0-9]+[smhdw])\]")
# Time chunks of at most a day: a pull capped by max_samples stops at a chunk's end, so a
# shorter chunk reads less past the cap (the answers' size is bounded by the pod batches).
MAX_CHUNK_SECONDS = 86400.0
# Range queries in flight: Prometheus evaluates each query on one core, and the answer is
# parsed here meanwhile; two keep both busy without holding more than two answers.
CONCURRENCY = 2

# Restart markers, fetched with the features (cAdvisor names; absent series are harmless).
# As the container's age at each grid point (time() - start), not its start time: the grid is
# held in float32, which rounds a unix time to 128 s but an age of days to a few ms.
START_MARKER = FeatureQuery(
    "__start", "max by (namespace, pod, container) "
               "(time() - container_start_time_seconds{{{selector}}})")
# Only the points with a reset come back (``> 0``): a missing point counts as no reset, so the
# cuts are the same and a quarter of the answer's points are not encoded, sent and parsed.
RESET_MARKER = FeatureQuery(
    "__resets", "sum by (namespace, pod, container) "
                "(resets(container_cpu_usage_seconds_total{{{selector}}}[{rate_window}])) > 0")



def stale_marker(step: float) -> FeatureQuery:
    """Grid points where the memory gauge is only a lookback repeat: present, but no sample of
    it in the last step (only those come back). ``timestamp()`` would say the same, at ten times
    the cost in Prometheus 2.42. The window is a step less a millisecond: Prometheus 2's range
    includes its left end (a sample exactly a step old would count as fresh), VictoriaMetrics'
    does not."""
    w = f"{max(1, int(round(step * 1000)) - 1)}ms"
    return FeatureQuery(
        "__stale", "max by (namespace, pod, container) "
                   "(container_memory_working_set_bytes{{{selector}}}) unless "
                   "max by (namespace, pod, container) "
                   "(count_over_time(container_memory_working_set_bytes{{{selector}}}"
                   f"[{w}]))")


def young_rate_ranges(features: Sequence[FeatureQuery], rate_window: str) -> np.ndarray | None:
    """Per feature, the range of the one ``rate`` it reads (0: a feature that reads no range),
    when every template that reads a range is such a rate; else None (a young run's first
    window cannot be read right: it is dropped)."""
    ranges = feature_rate_ranges([f.promql for f in features], rate_window)
    for f, r in zip(features, ranges):
        if r <= 0 and _RANGE.findall(f.promql.replace("{rate_window}", rate_window)):
            return None
    return ranges


def warmup_seconds(features: Sequence[FeatureQuery], rate_window: str) -> float:
    """The longest range selector of the templates (``[1m]``, or ``{rate_window}``), in seconds:
    how long a rate() needs before it reads a whole window of the container's own samples."""
    out = 0.0
    for f in features:
        for d in _RANGE.findall(f.promql.replace("{rate_window}", rate_window)):
            out = max(out, parse_duration(d))
    return out


_METRIC_BEFORE_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{\{\{selector\}\}\}")


def normalise_selector(selector: str) -> str:
    """The user's label matchers without surrounding braces; ValueError when empty."""
    text = (selector or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text:
        raise ValueError("the selector is empty: give label matchers, e.g. "
                         "'namespace=\"ml\",pod=~\"resnet-.*\"'")
    return text


def metric_names(features: Sequence[FeatureQuery]) -> list[str] | None:
    """Metrics the templates read (the name right before ``{{{selector}}}``); None when some
    template names none that way (then every series of the selected pods is looked at)."""
    names: list[str] = []
    for f in features:
        found = _METRIC_BEFORE_SELECTOR.findall(f.promql)
        if not found:
            return None
        names.extend(found)
    return list(dict.fromkeys(names))


@dataclass
class PullPlan:
    """The pieces of a pull: pod batches × time chunks."""
    batches: list[list[PodRef]]
    chunks: list[tuple[float, float]]     # (first grid time, last grid time), inclusive

    @property
    def queries(self) -> int:
        return len(self.batches) * len(self.chunks)


def plan_pull(series_per_pod: dict[PodRef, int], start: float, end: float, step: float,
              n_columns: int, max_points: int = 11000,
              max_answer_points: int = MAX_ANSWER_POINTS,
              max_query_samples: int = MAX_QUERY_SAMPLES,
              max_chunk_seconds: float | None = MAX_CHUNK_SECONDS) -> PullPlan:
    """Cut [start, end] into chunks of at most ``max_points`` grid points (and
    ``max_chunk_seconds``) and the pods into batches whose answers stay within
    ``max_answer_points`` points (``n_columns`` series per pod: features and markers) and
    ``max_query_samples`` raw samples."""
    n_total = int((end - start) // step) + 1
    worst = max(series_per_pod.values(), default=1)
    if max_chunk_seconds:
        max_points = min(max_points, max(1, int(max_chunk_seconds // step)))
    per_chunk = min(max_points, n_total,
                    max(1, max_answer_points // n_columns),
                    max(1, max_query_samples // (worst * SAMPLES_PER_POINT)))
    chunks = []
    for i0 in range(0, n_total, per_chunk):
        i1 = min(n_total, i0 + per_chunk) - 1
        chunks.append((start + i0 * step, start + i1 * step))
    batches: list[list[PodRef]] = []
    cur: list[PodRef] = []
    answer = samples = 0
    for pod in sorted(series_per_pod):
        a = n_columns * per_chunk
        s = series_per_pod[pod] * per_chunk * SAMPLES_PER_POINT
        if cur and (answer + a > max_answer_points or samples + s > max_query_samples):
            batches.append(cur)
            cur, answer, samples = [], 0, 0
        cur.append(pod)
        answer += a
        samples += s
    if cur:
        batches.append(cur)
    return PullPlan(batches, chunks)


def split_runs(times: np.ndarray, values: np.ndarray, start_marker: np.ndarray | None,
               resets: np.ndarray | None) -> list[slice]:
    """Slices of the grid between restarts: a change of the container's start time, or a
    counter reset (the first flagged point of a run of flagged points)."""
    n = len(times)
    cuts: list[int] = []
    if start_marker is not None:
        have = np.flatnonzero(np.isfinite(start_marker))
        if len(have) > 1:
            changed = have[1:][np.abs(np.diff(start_marker[have])) > 0.5]
            cuts.extend(int(i) for i in changed)
    if resets is not None:
        flagged = np.nan_to_num(resets, nan=0.0) > 0
        rising = np.flatnonzero(flagged[1:] & ~flagged[:-1]) + 1
        cuts.extend(int(i) for i in rising)
    bounds = [0] + sorted(set(c for c in cuts if 0 < c < n)) + [n]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def container_executions(pod: PodRef, times: np.ndarray, values: np.ndarray,
                         features: Sequence[str], units: Sequence[str], step: float,
                         start_marker: np.ndarray | None = None,
                         resets: np.ndarray | None = None,
                         max_gap_steps: float = DEFAULT_MAX_GAP_STEPS,
                         min_samples: int = MIN_SAMPLES, warmup: float = 0.0,
                         stale: np.ndarray | None = None,
                         young: tuple[bool, np.ndarray] | None = None) -> list[Execution]:
    """One container's grid (NaN = no sample) as executions: cut at restarts, then at long
    gaps; short pieces dropped. ``warmup``: the first seconds of each run whose rate() window
    reaches back before the container started (from the start marker, else from the run's
    first point when the run begins inside the pull) are dropped, unless ``young`` (whether the
    store dilutes a young rate, each feature's rate range) says how to read them and the run's
    start is known: then they are kept, read over the container's age where the store dilutes
    them; ``stale``: grid points flagged as lookback repeats, dropped where they end a run."""
    name = f"{pod.namespace}/{pod.pod}/{pod.container}"
    group = f"{pod.namespace}/{pod.pod}"
    out: list[Execution] = []
    flagged = (np.nan_to_num(stale, nan=0.0) > 0) if stale is not None else None
    for k, run in enumerate(split_runs(times, values, start_marker, resets)):
        t, v = times[run], values[run]
        ok = np.isfinite(v).all(axis=1)
        if ok.any() and (warmup > 0 or flagged is not None):
            have = np.flatnonzero(ok)
            keep = ok.copy()
            if warmup > 0:
                mark = (start_marker[run][have[0]] if start_marker is not None
                        else float("nan"))
                if np.isfinite(mark) and young is not None:
                    # the store's reading of a young rate is known: kept from the start
                    if young[0]:
                        v = undilute(v, t, mark, young[1], step)
                elif np.isfinite(mark):
                    # the container's start: a rate window is its own from start + warmup
                    # (+ a step: its first sample may come up to a scrape later)
                    keep &= t >= mark + warmup + step
                elif run.start + have[0] > 0:
                    # it began inside the pull: its first rate read two samples
                    keep &= t >= t[have[0]] + warmup - step
                # else it was running when the pull began: its first rate is a whole window
            if flagged is not None:
                f = flagged[run]
                last = have[-1]
                while last >= 0 and (f[last] or not ok[last]):
                    keep[last] = False
                    last -= 1
            ok = keep
        if ok.sum() < min_samples:
            continue
        run_name = name if k == 0 else f"{name}~{k + 1}"
        meta = {"namespace": pod.namespace, "pod": pod.pod, "container": pod.container}
        for ex in regularise(run_name, t[ok], v[ok], features, units, step=step,
                             max_gap_steps=max_gap_steps, group=group, meta=meta):
            if len(ex) >= min_samples:
                out.append(ex)
    return out


@dataclass
class HistoryResult:
    executions: list[Execution]
    pods: int                 # containers found by the series lookup
    series: int               # raw series behind them
    queries: int              # range queries sent
    points: int               # grid points received (all columns)
    seconds: float
    warnings: list[str] = field(default_factory=list)
    # the cap (max_samples): what was left out
    pulled_from: float | None = None      # oldest grid time pulled (None: nothing pulled)
    skipped_chunks: int = 0               # older time chunks not pulled (the cap was reached)
    dropped_executions: int = 0           # pulled, but all older than the newest max_samples
    dropped_samples: int = 0              # samples pulled but not kept
    trimmed: bool = False                 # executions were cut at the cap's time
    # containers found but not pulled (``select``): not served by the PhaseModel, or unknown
    not_served: int = 0
    unknown: int = 0
    membership: str = ""                  # where the verdict came from
    found: int = 0                        # containers the series lookup found

    @property
    def samples(self) -> int:
        return sum(len(e) for e in self.executions)


def keep_newest(executions: Sequence[Execution], max_samples: int,
                min_samples: int = MIN_SAMPLES) -> tuple[list[Execution], int, int, bool]:
    """The newest ``max_samples`` samples (at most) of ``executions``, across all of them:
    every sample from the earliest time ``T`` (a multiple of the step after the oldest sample)
    such that at most ``max_samples`` samples are at or after ``T``. Executions that end before
    ``T`` are dropped, one that spans it keeps its part from ``T`` on (dropped when that is
    under ``min_samples``). The order is kept. Returns (kept, executions dropped, samples
    dropped, whether one was trimmed).

    The newest data rather than a random subset: a refit is about what runs now (drift), and
    the newest time slice keeps every pod that ran in it, the way a pull that stops at the
    newest chunks does."""
    total = sum(len(e) for e in executions)
    if total <= max_samples:
        return list(executions), 0, 0, False
    step = float(executions[0].step) or 1.0
    t_min = min(float(e.times[0]) for e in executions if len(e))
    t_max = max(float(e.times[-1]) for e in executions if len(e))
    n_bins = int((t_max - t_min) // step) + 1
    counts = np.zeros(n_bins, dtype=np.int64)
    for e in executions:
        bins = ((np.asarray(e.times, np.float64) - t_min) // step).astype(np.int64)
        counts += np.bincount(np.minimum(bins, n_bins - 1), minlength=n_bins)
    from_end = np.cumsum(counts[::-1])[::-1]           # samples in bins >= b
    first = int(np.argmax(from_end <= max_samples)) if from_end[-1] <= max_samples else n_bins
    cut = t_min + first * step
    kept: list[Execution] = []
    trimmed = False
    for e in executions:
        if not len(e) or float(e.times[-1]) < cut:
            continue
        if float(e.times[0]) >= cut:
            kept.append(e)
            continue
        i = int(np.searchsorted(e.times, cut, side="left"))
        if len(e) - i >= min_samples:
            kept.append(Execution(e.name, e.times[i:].copy(), e.values[i:].copy(), e.features,
                                  e.units, e.group, e.step, dict(e.meta)))   # frees the rest
            trimmed = True
    return kept, len(executions) - len(kept), total - sum(len(e) for e in kept), trimmed


class PrometheusHistory:
    """History of the containers matching ``selector`` for ``features`` (see the module doc)."""

    def __init__(self, source: PrometheusSource, features: Sequence[FeatureQuery],
                 selector: str, step: float, *, units: Sequence[str] | None = None,
                 max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, min_samples: int = MIN_SAMPLES,
                 max_answer_points: int = MAX_ANSWER_POINTS,
                 max_query_samples: int = MAX_QUERY_SAMPLES, restart_markers: bool = True,
                 compress: bool = False, concurrency: int = CONCURRENCY,
                 max_chunk_seconds: float | None = MAX_CHUNK_SECONDS):
        if not step > 0:
            raise ValueError(f"step must be positive, got {step}")
        self.source = source
        self.features = list(features)
        self.selector = normalise_selector(selector)
        self.step = float(step)
        self.units = tuple(units) if units is not None else tuple(
            CANONICAL_UNITS.get(f.name, "unknown") for f in self.features)
        self.max_gap_steps = max_gap_steps
        self.min_samples = min_samples
        self.max_answer_points = max_answer_points
        self.max_query_samples = max_query_samples
        self.markers = ([START_MARKER, RESET_MARKER, stale_marker(self.step)]
                        if restart_markers else [])
        rate_window = getattr(source, "rate_window", DEFAULT_RATE_WINDOW)
        self.warmup = warmup_seconds(self.features, rate_window)
        self.rate_ranges = young_rate_ranges(self.features, rate_window)
        self.compress = compress
        if int(concurrency) < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = int(concurrency)
        self.max_chunk_seconds = max_chunk_seconds

    def _with_user_selector(self, fq: FeatureQuery) -> FeatureQuery:
        # The user's matchers go before the pod matchers; braces doubled for str.format.
        user = self.selector.replace("{", "{{").replace("}", "}}")
        return FeatureQuery(fq.name, fq.promql.replace("{selector}", user + ",{selector}"))

    def discover(self, start: float, end: float) -> dict[PodRef, int]:
        """Containers with data in [start, end] and their raw series counts."""
        names = metric_names(self.features)
        matchers = ([f"{n}{{{self.selector}}}" for n in names] if names
                    else [f"{{{self.selector}}}"])
        counts: dict[PodRef, int] = {}
        for labels in self.source.series(matchers, start, end):
            ns, pod, ctr = labels.get("namespace"), labels.get("pod"), labels.get("container")
            if not ns or not pod or not ctr or ctr == "POD":   # "POD": the pause container
                continue
            ref = PodRef(ns, pod, ctr)
            counts[ref] = counts.get(ref, 0) + 1
        return counts

    def _fetch(self, queries, batch, c0, c1):
        return self.source._fetch_lean(queries, batch, c0, c1, self.step, compress=self.compress)

    def _chunk(self, pool, queries, batches, c0, c1):
        """The answers for every batch over one chunk, in order; with a pool, up to
        ``concurrency`` queries in flight (Prometheus evaluates them in parallel while the last
        answer is parsed) and never more answers held than that."""
        if pool is None:
            for batch in batches:
                yield self._fetch(queries, batch, c0, c1)
            return
        pending: deque = deque()
        it = iter(batches)
        for batch in it:
            pending.append(pool.submit(self._fetch, queries, batch, c0, c1))
            if len(pending) >= self.concurrency:
                break
        while pending:
            got = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(self._fetch, queries, nxt, c0, c1))
            yield got

    def executions(self, start: float, end: float,
                   on_query: Callable[[int, int], None] | None = None,
                   max_samples: int | None = None,
                   select: Callable[[list[PodRef], float, float],
                                    tuple[list[PodRef], int, int, str]] | None = None,
                   containers: dict[PodRef, int] | None = None) -> HistoryResult:
        """Pull [start, end] and cut it into executions. ``on_query(done, total)`` after each
        range query (progress).

        ``select(containers, start, end)`` -> (kept, not served, unknown, how decided): only
        the kept containers are pulled (:mod:`ai4dl.sources.membership`).

        ``containers`` (container -> raw series, as :meth:`discover` returns them): pull these
        and no discovery (a partition of a cluster's replay, whose containers were found
        once for all partitions).

        ``max_samples``: keep at most this many samples, the newest (:func:`keep_newest`).
        The time chunks are pulled newest first and the pull stops once the chunks pulled hold
        ``max_samples`` complete rows (every feature present): older history is not read at
        all. What was left out is in the result
        (``skipped_chunks``, ``dropped_executions``, ``dropped_samples``)."""
        if max_samples is not None and max_samples < 1:
            raise ValueError(f"max_samples must be at least 1, got {max_samples}")
        t0 = time.perf_counter()
        # grid aligned to the step, so repeated pulls see the same points
        start = float(np.ceil(start / self.step) * self.step)
        end = float(np.floor(end / self.step) * self.step)
        counts, result = self._selected_containers(start, end, select, containers)
        if not counts:
            result.seconds = time.perf_counter() - t0
            return result
        queries = [self._with_user_selector(f) for f in self.features + self.markers]
        plan = plan_pull(counts, start, end, self.step, len(queries), self.source.max_points,
                         self.max_answer_points, self.max_query_samples,
                         self.max_chunk_seconds)
        chunk_times, grids = self._pull_newest_first(plan, queries, result, on_query,
                                                     max_samples)
        result.skipped_chunks = len(plan.chunks) - len(chunk_times)
        result.pulled_from = float(chunk_times[-1][0])
        times = np.concatenate(chunk_times[::-1])
        del chunk_times
        self._cut_into_executions(plan, grids, times, result, self._young())
        if max_samples is not None:
            (result.executions, result.dropped_executions, result.dropped_samples,
             result.trimmed) = keep_newest(result.executions, max_samples, self.min_samples)
        result.seconds = time.perf_counter() - t0
        return result

    def _selected_containers(self, start: float, end: float, select,
                             containers: dict[PodRef, int] | None = None
                             ) -> tuple[dict[PodRef, int], HistoryResult]:
        """The containers to pull (with their raw series counts) and the result to fill."""
        counts = dict(containers) if containers is not None else self.discover(start, end)
        found = len(counts)
        not_served = unknown = 0
        how = ""
        if select is not None and counts:
            kept, not_served, unknown, how = select(list(counts), start, end)
            counts = {r: counts[r] for r in kept}
        result = HistoryResult([], len(counts), sum(counts.values()), 0, 0, 0.0,
                               not_served=not_served, unknown=unknown, membership=how,
                               found=found)
        return counts, result

    def _pull_newest_first(self, plan: PullPlan, queries: list[FeatureQuery],
                           result: HistoryResult,
                           on_query: Callable[[int, int], None] | None,
                           max_samples: int | None
                           ) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """(grid times per chunk, float32 grids per batch per chunk), both newest chunk first;
        stops after the chunk that brings ``max_samples`` complete rows."""
        n_feat = len(self.features)
        done = 0
        # Newest chunk first, every batch of pods; float32 grids kept per batch (newest first).
        grids: list[list[np.ndarray]] = [[] for _ in plan.batches]
        chunk_times: list[np.ndarray] = []
        complete_rows = 0
        pool = ThreadPoolExecutor(self.concurrency) if self.concurrency > 1 else None
        try:
            for c0, c1 in reversed(plan.chunks):
                for b, got in enumerate(self._chunk(pool, queries, plan.batches, c0, c1)):
                    done += 1
                    result.queries += got.queries
                    result.points += int(np.isfinite(got.values).sum())
                    result.warnings.extend(got.warnings)
                    if b == 0:
                        chunk_times.append(got.times)
                    v = got.values.astype(np.float32)          # (P, n, F + M)
                    del got
                    complete_rows += int(np.isfinite(v[:, :, :n_feat]).all(axis=2).sum())
                    grids[b].append(v)
                    if on_query:
                        on_query(done, plan.queries)
                if max_samples is not None and complete_rows >= max_samples:
                    break
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        return chunk_times, grids

    def _young(self) -> tuple[bool, np.ndarray] | None:
        """How a run's first rate window is read (container_executions' ``young``), where
        the store's reading is known and the runs' starts are pulled; else None."""
        if self.rate_ranges is None or not self.markers or self.warmup <= 0:
            return None
        diluted = young_rates_diluted(self.source)
        return None if diluted is None else (diluted, self.rate_ranges)

    def _cut_into_executions(self, plan: PullPlan, grids: list[list[np.ndarray]],
                             times: np.ndarray, result: HistoryResult,
                             young: tuple[bool, np.ndarray] | None = None) -> None:
        """Each container's pulled grid as executions, into ``result.executions``; every
        batch's grids are let go once cut."""
        n_feat = len(self.features)
        names = tuple(f.name for f in self.features)
        for b, batch in enumerate(plan.batches):
            parts, grids[b] = grids[b], []
            values = np.concatenate(parts[::-1], axis=1) if len(parts) > 1 else parts[0]
            del parts
            for i, pod in enumerate(batch):
                v = values[i].astype(np.float64)
                marks = {m.name: v[:, n_feat + j] for j, m in enumerate(self.markers)}
                if "__start" in marks:
                    marks["__start"] = times - marks["__start"]     # age -> start time
                result.executions.extend(container_executions(
                    pod, times, v[:, :n_feat], names, self.units, self.step,
                    marks.get("__start"), marks.get("__resets"), self.max_gap_steps,
                    self.min_samples, self.warmup, marks.get("__stale"), young))
            del values
