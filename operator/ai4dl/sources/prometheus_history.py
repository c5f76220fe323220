"""Days of pod history from Prometheus, in bounded pieces, as one execution per container run.

:class:`PrometheusHistory` turns the PhaseModel's feature templates and a user's label matchers
into :class:`~ai4dl.traces.Execution` objects for the trainer::

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
shorter gaps are interpolated, as :func:`ai4dl.traces.regularise` does for trace files).
Pieces shorter than ``min_samples`` are dropped. Executions are named
``namespace/pod/container`` (``#2``... after a gap, ``~2``... after a restart) and grouped by
``namespace/pod``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ai4dl.sources.prometheus import FeatureQuery, PodRef, PrometheusSource
from ai4dl.traces import CANONICAL_UNITS, DEFAULT_MAX_GAP_STEPS, Execution, regularise

MAX_ANSWER_POINTS = 2_000_000
MAX_QUERY_SAMPLES = 20_000_000     # well under Prometheus's default query.max-samples (50M)
SAMPLES_PER_POINT = 5              # raw samples a 1m rate() window reads at a 15 s scrape
MIN_SAMPLES = 8

# Restart markers, fetched with the features (cAdvisor names; absent series are harmless).
START_MARKER = FeatureQuery(
    "__start", "max by (namespace, pod, container) (container_start_time_seconds{{{selector}}})")
RESET_MARKER = FeatureQuery(
    "__resets", "sum by (namespace, pod, container) "
                "(resets(container_cpu_usage_seconds_total{{{selector}}}[{rate_window}]))")

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
              max_query_samples: int = MAX_QUERY_SAMPLES) -> PullPlan:
    """Cut [start, end] into chunks of at most ``max_points`` grid points and the pods into
    batches whose answers stay within ``max_answer_points`` points (``n_columns`` series per
    pod: features and markers) and ``max_query_samples`` raw samples."""
    n_total = int((end - start) // step) + 1
    worst = max(series_per_pod.values(), default=1)
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
                         min_samples: int = MIN_SAMPLES) -> list[Execution]:
    """One container's grid (NaN = no sample) as executions: cut at restarts, then at long
    gaps; short pieces dropped."""
    name = f"{pod.namespace}/{pod.pod}/{pod.container}"
    group = f"{pod.namespace}/{pod.pod}"
    out: list[Execution] = []
    for k, run in enumerate(split_runs(times, values, start_marker, resets)):
        t, v = times[run], values[run]
        ok = np.isfinite(v).all(axis=1)
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


class PrometheusHistory:
    """History of the containers matching ``selector`` for ``features`` (see the module doc)."""

    def __init__(self, source: PrometheusSource, features: Sequence[FeatureQuery],
                 selector: str, step: float, *, units: Sequence[str] | None = None,
                 max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, min_samples: int = MIN_SAMPLES,
                 max_answer_points: int = MAX_ANSWER_POINTS,
                 max_query_samples: int = MAX_QUERY_SAMPLES, restart_markers: bool = True):
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
        self.markers = [START_MARKER, RESET_MARKER] if restart_markers else []

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

    def executions(self, start: float, end: float,
                   on_query: Callable[[int, int], None] | None = None) -> HistoryResult:
        """Pull [start, end] and cut it into executions. ``on_query(done, total)`` after each
        range query (progress)."""
        t0 = time.perf_counter()
        # grid aligned to the step, so repeated pulls see the same points
        start = float(np.ceil(start / self.step) * self.step)
        end = float(np.floor(end / self.step) * self.step)
        counts = self.discover(start, end)
        result = HistoryResult([], len(counts), sum(counts.values()), 0, 0, 0.0)
        if not counts:
            result.seconds = time.perf_counter() - t0
            return result
        queries = [self._with_user_selector(f) for f in self.features + self.markers]
        n_feat = len(self.features)
        plan = plan_pull(counts, start, end, self.step, len(queries), self.source.max_points,
                         self.max_answer_points, self.max_query_samples)
        names = tuple(f.name for f in self.features)
        done = 0
        for batch in plan.batches:
            parts_t, parts_v = [], []
            for c0, c1 in plan.chunks:
                got = self.source.fetch(queries, batch, c0, c1, self.step)
                done += 1
                result.queries += got.queries
                result.points += int(np.isfinite(got.values).sum())
                result.warnings.extend(got.warnings)
                parts_t.append(got.times)
                parts_v.append(got.values.astype(np.float32))   # (P, n, F + M)
                if on_query:
                    on_query(done, plan.queries)
            times = np.concatenate(parts_t)
            values = np.concatenate(parts_v, axis=1)
            del parts_v
            for i, pod in enumerate(batch):
                v = values[i].astype(np.float64)
                marks = {m.name: v[:, n_feat + j] for j, m in enumerate(self.markers)}
                result.executions.extend(container_executions(
                    pod, times, v[:, :n_feat], names, self.units, self.step,
                    marks.get("__start"), marks.get("__resets"), self.max_gap_steps,
                    self.min_samples))
        result.seconds = time.perf_counter() - t0
        return result
