"""What the Prometheus adapter is asked for and answers: the features' PromQL templates
(:class:`FeatureQuery`), the pods (:class:`PodRef`), their samples on a grid, and its errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from ai4dl.errors import Ai4dlError
from ai4dl.method.traces import CANONICAL_UNITS, Execution
from ai4dl.promql import TemplateError, render_template, sent_problem


DEFAULT_RATE_WINDOW = "1m"

# Templates: ``{selector}`` -> label matchers, ``{rate_window}`` -> a PromQL duration; literal
# braces are doubled (ai4dl.promql.render_template). Every expression must keep the
# labels namespace, pod and container and give at most one series per container.
# cpu and memory take the max over a container's series, not the sum (issue 43 item 6): one
# container scraped by two jobs is two equal series (a sum doubled it), and cAdvisor goes on
# exporting an exited container's last values for a minute or more beside its successor's (a
# container restarted in place, a pod re-created under its name: a sum added the dead one's).
DEFAULT_QUERIES: dict[str, str] = {
    "cpu": "max by (namespace, pod, container) "
           "(rate(container_cpu_usage_seconds_total{{{selector}}}[{rate_window}]))",
    "memory": "max by (namespace, pod, container) "
              "(container_memory_working_set_bytes{{{selector}}})",
    # Percent 0-100: a container with several GPUs gets their mean.
    "gpu_util": "avg by (namespace, pod, container) (DCGM_FI_DEV_GPU_UTIL{{{selector}}})",
    # DCGM reports MiB; the canonical unit is bytes.
    "gpu_memory": "sum by (namespace, pod, container) (DCGM_FI_DEV_FB_USED{{{selector}}}) * 1048576",
}


class PrometheusUnavailable(Ai4dlError):
    """Prometheus could not be reached or did not answer (after the retries). One line."""

    def __init__(self, url: str, reason: str, attempts: int = 1):
        self.url, self.reason, self.attempts = url, reason, attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"Prometheus at {url} unavailable{tries}: {reason}")

    def __reduce__(self):
        # rebuilt from its fields: a worker process of a cluster's replay sends it back pickled
        return type(self), (self.url, self.reason, self.attempts)


class PrometheusQueryError(Ai4dlError):
    """Prometheus rejected the query (HTTP 400/422); carries Prometheus's message. One line."""

    def __init__(self, url: str | None, error: str, error_type: str = "", status: int = 0):
        self.url, self.error, self.error_type, self.status = url, error, error_type, status
        kind = f" ({error_type})" if error_type else ""
        if url is None:  # refused before sending
            super().__init__(f"bad PromQL template: {error}")
        else:
            super().__init__(f"Prometheus at {url} rejected the query{kind}: {error}")

    def __reduce__(self):
        return type(self), (self.url, self.error, self.error_type, self.status)


class PrometheusQueryTimeout(PrometheusQueryError):
    """Prometheus gave up on the query at its ``timeout`` (errorType ``timeout``, HTTP 503): the
    query's own cost, not Prometheus's health (issue 43: a confined but expensive query was
    blamed on "Prometheus unavailable" and re-sent three times a window). Not retried."""


class SeriesLimitExceeded(PrometheusQueryError):
    """An answer with more series than the query may give: refused (one beyond the bytes
    that many series can take is refused before it is parsed)."""

    def __init__(self, url: str, message: str):
        self.url, self.error, self.error_type, self.status = url, message, "too many series", 0
        Ai4dlError.__init__(self, f"Prometheus at {url}: {message}")

    def __reduce__(self):
        return type(self), (self.url, self.error)


@dataclass(frozen=True)
class FeatureQuery:
    """A feature's name and its PromQL template (``{selector}``, ``{rate_window}``)."""

    name: str
    promql: str
    #: whether the text sent is checked to hold the selector's matchers in every selector
    #: (False only where the operator runs with ``--allow-free-promql``)
    confined: bool = True

    def render(self, selector: str, rate_window: str = DEFAULT_RATE_WINDOW) -> str:
        """The query sent for ``selector``: the template's tokens substituted
        (:func:`~ai4dl.promql.render_template`, never ``str.format``) and, ``confined``,
        the exact text checked to hold the selector's matchers in every selector
        (:func:`~ai4dl.promql.sent_problem`); :class:`PrometheusQueryError` naming the
        feature otherwise."""
        try:
            query = render_template(self.promql, selector, rate_window)
        except TemplateError as e:
            raise PrometheusQueryError(None, f"feature {self.name!r}: query is not a template: "
                                       f"{e}") from None
        problem = sent_problem(query, selector) if self.confined else None
        if problem is not None:
            raise PrometheusQueryError(None, f"feature {self.name!r}: query {problem} (refused "
                                       f"before it was sent)")
        return query


def default_feature_queries(names: Iterable[str] = ("cpu", "memory")) -> list[FeatureQuery]:
    """The default queries (cAdvisor / DCGM metric names) for canonical feature ``names``."""
    out = []
    for n in names:
        if n not in DEFAULT_QUERIES:
            raise ValueError(f"no default query for feature {n!r} "
                             f"(known: {', '.join(DEFAULT_QUERIES)})")
        out.append(FeatureQuery(n, DEFAULT_QUERIES[n]))
    return out


class PodRef(NamedTuple):
    """One container of one pod (the cAdvisor labels namespace, pod, container).

    A named tuple: equal to, and hashing like, the plain tuple ``(namespace, pod, container)``.
    """

    namespace: str
    pod: str
    container: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


@dataclass(frozen=True, eq=False)
class PodSeries:
    """One pod's samples: ``values[i, j]`` is feature ``features[j]`` at ``times[i]``."""

    pod: PodRef
    times: np.ndarray            # (n,) unix seconds, regular
    values: np.ndarray           # (n, F) float64, NaN = no sample
    features: tuple[str, ...]
    step: float
    end: float                   # the window's requested end

    @property
    def missing_fraction(self) -> float:
        """Fraction of (time, feature) cells with no sample (1.0: Prometheus has nothing)."""
        return float(np.isnan(self.values).mean()) if self.values.size else 1.0

    @property
    def missing_by_feature(self) -> dict[str, float]:
        if not len(self.times):
            return {f: 1.0 for f in self.features}
        frac = np.isnan(self.values).mean(axis=0)
        return {f: float(x) for f, x in zip(self.features, frac)}

    @property
    def newest_time(self) -> float | None:
        """Grid time of the newest point where any feature has a value (None: none has)."""
        have = np.flatnonzero(~np.isnan(self.values).all(axis=1)) if self.values.size else []
        return float(self.times[have[-1]]) if len(have) else None

    @property
    def newest_age(self) -> float:
        """Seconds from the window's end back to the newest sample (``inf`` if none).

        Measured on the grid (resolution: ``step``). Prometheus fills a grid point from a sample
        up to its lookback (5 min by default) old unless the series was marked stale (a failed
        scrape, or the series vanishing from the exporter, marks it at once).
        """
        t = self.newest_time
        return math.inf if t is None else max(0.0, self.end - t)

    def is_stale(self, max_age: float) -> bool:
        return self.newest_age > max_age

    def column(self, feature: str) -> np.ndarray:
        return self.values[:, self.features.index(feature)]

    def to_execution(self, name: str | None = None, units: Sequence[str] | None = None) -> Execution:
        """As an :class:`~ai4dl.method.traces.Execution` (float32; NaN kept), canonical units."""
        units = tuple(units) if units is not None else tuple(
            CANONICAL_UNITS.get(f, "") for f in self.features)
        return Execution(name or str(self.pod), self.times, self.values, self.features, units,
                         step=self.step, meta={"namespace": self.pod.namespace,
                                               "pod": self.pod.pod,
                                               "container": self.pod.container})


@dataclass(eq=False)
class PodSamples(Mapping[PodRef, PodSeries]):
    """The result of one :meth:`PrometheusSource.fetch`: a :class:`PodSeries` per pod asked for,
    in the order asked for, all on the same grid."""

    features: tuple[str, ...]
    times: np.ndarray
    start: float
    end: float
    step: float
    pods: tuple[PodRef, ...]
    values: np.ndarray                                       # (P, n, F)
    queries: int = 0                                         # range queries this fetch made
    warnings: list[str] = field(default_factory=list)
    # Pods for which some feature came in more than one series (a template that does not give
    # one series per container): {pod: features}. Their values are all NaN: which series is
    # right cannot be told, so none is used (never a max, never the first).
    duplicated: dict[PodRef, tuple[str, ...]] = field(default_factory=dict)
    _index: dict[PodRef, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._index = {p: i for i, p in enumerate(self.pods)}

    def __getitem__(self, pod: PodRef) -> PodSeries:
        i = self._index[pod]
        return PodSeries(pod, self.times, self.values[i], self.features, self.step, self.end)

    def __iter__(self) -> Iterator[PodRef]:
        return iter(self.pods)

    def __len__(self) -> int:
        return len(self.pods)

    def missing_fraction(self, pod: PodRef) -> float:
        return self[pod].missing_fraction

    def newest_age(self, pod: PodRef) -> float:
        return self[pod].newest_age

    def stale(self, max_age: float) -> list[PodRef]:
        """Pods whose newest sample is older than ``max_age`` seconds (or that have none)."""
        return [p for p in self.pods if self[p].newest_age > max_age]

