"""Pod resource usage from Prometheus: one range query per window for all pods and features.

:class:`PrometheusSource` asks Prometheus's HTTP API (``/api/v1/query_range``) for the
features of many pods at once and returns them on a regular time grid::

    src = PrometheusSource("http://prometheus:9090")
    pods = [PodRef("team-a", "train-0", "main"), PodRef("team-a", "train-1", "main")]
    samples = src.fetch(["cpu", "memory"], pods, start=now - 900, end=now, step=15)
    s = samples[pods[0]]
    s.times           # (n,) unix seconds: start, start + step, ... <= end
    s.values          # (n, 2) float64, NaN where Prometheus has no sample
    s.missing_fraction, s.newest_age

**One query.** Each feature is a PromQL template (:class:`FeatureQuery`) in which
``{selector}`` stands for the label matchers and ``{rate_window}`` for the ``rate()`` window.
All features are put into ONE expression, each tagged with a label::

    label_replace(<cpu expr>, "ai4dl_feature", "cpu", "", "")
      or label_replace(<memory expr>, "ai4dl_feature", "memory", "", "")

and the pods are selected with ``namespace=~"ns1|ns2", pod=~"a|b|...", container=~"..."``
(names regex-escaped). The query goes as a POST form (2,000 pod names make ~100 kB, too long
for a URL). Series Prometheus returns for pods not asked for (the regexes select the cross
product of namespaces, pods and containers) are dropped. Several series for one pod's feature
are an error for that pod: its samples are all NaN and it is named in
``PodSamples.duplicated`` (never a max, never the first series). With ``max_series`` or
``max_series_factor`` an answer with more series than that is refused
(:class:`SeriesLimitExceeded`), and one larger in bytes than they can take is not read further
(the operator's window query; the templates themselves are confined to the PhaseModel's own
pods by :mod:`ai4dl.promql`). A window longer than ``max_points``
grid points (Prometheus refuses more than 11,000 points per series) is split into consecutive
queries, one per chunk.

**Failures.** Connection errors, timeouts, HTTP 5xx / 408 / 429 are retried with exponential
backoff (``backoff``, ``2 * backoff``, ...); when the retries are spent
:class:`PrometheusUnavailable` says so in one line (URL and reason). A query Prometheus rejects
(HTTP 400 / 422: PromQL syntax, too many samples...) raises :class:`PrometheusQueryError` with
Prometheus's own message, without retrying; one Prometheus gave up on at its own timeout
(errorType ``timeout``) raises :class:`PrometheusQueryTimeout`, without retrying either. That
timeout is sent as a share of ours (``SERVER_TIMEOUT_SHARE``), so that a slow query is answered
as one before the connection's own timeout reads as an unreachable Prometheus. No exception of
the HTTP library escapes.

Why plain ``requests`` rather than ``prometheus-api-client``: that client's ``POST`` mode
still puts the query in the URL's query string (``params=``), not in the form body, so a
2,000-pod selector would make a ~100 kB URL; it also rounds start/end to whole seconds, retries
through urllib3 with its own policy and reports errors as a generic exception carrying the raw
body. What we need from it is one HTTP call, so we make that call ourselves.

The types it takes and returns (:class:`FeatureQuery`, :class:`PodRef`, :class:`PodSamples`,
the errors) are in :mod:`ai4dl.sources.prometheus_types`; the answers' bytes are read by
:mod:`ai4dl.sources.prometheus_answers`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from typing import Iterable, Mapping, Sequence

import numpy as np
import requests

from ai4dl.errors import Ai4dlError
from ai4dl.sources.prometheus_answers import (LeanMatrix, connection_reason, one_line,
                                              parse_matrix, read_capped)
from ai4dl.sources.prometheus_types import (DEFAULT_RATE_WINDOW, FeatureQuery, PodRef, PodSamples,
                                            PrometheusQueryError, PrometheusQueryTimeout,
                                            PrometheusUnavailable, SeriesLimitExceeded,
                                            default_feature_queries)
from ai4dl.promql import (check_template, duplicate_check, promql_string, sent_problem,
                          template_problem)

__all__ = ["MAX_POINTS", "PrometheusSource", "check_template", "pod_selector",
           "template_problem"]

MAX_POINTS = 11000  # Prometheus's limit of points per series in one range query
FEATURE_LABEL = "ai4dl_feature"
#: The label that tells a feature's duplicate check (:func:`ai4dl.promql.duplicate_check`) from
#: the feature's own series in the answer.
CHECK_LABEL = "ai4dl_check"


#: The operator's bound on the series one window query may answer (--max-series-per-query 0):
#: this many per (container, feature) asked for, plus a few. A template aggregated by
#: (namespace, pod, container) gives one; cAdvisor's raw series a few more (a restarted
#: container's old series); far more is a template reading what it was not asked for.
SERIES_FACTOR = 4
SERIES_SLACK = 16
#: Prometheus's own query timeout, as a share of the client's read timeout (see the module doc)
SERVER_TIMEOUT_SHARE = 0.8
# A bounded answer is also bounded in bytes before anything is parsed: a point is written
# as [1700000000.123,"12345.678"] (well under this many bytes), a series' labels below the
# other figure unless a template keeps every label of a raw series.
_BYTES_PER_POINT = 64
_BYTES_PER_SERIES = 16384
#: How long the answer of the young-rate probe (:func:`young_rates_diluted`) is kept per store
#: URL: the store behind a URL does not change between windows, but may in a migration.
YOUNG_RATE_PROBE_TTL = 3600.0
#: A reading of the probe below this share of its true rate (1) is a diluted one: Prometheus
#: reads 0.46 at the probe's 30-s age, VictoriaMetrics 1.0.
_DILUTED_BELOW = 0.75
_young_rate_answers: dict[str, tuple[float, bool | None]] = {}


# ----------------------------------------------------------------------------- helpers

_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _re_literal(text: str) -> str:
    """``text`` as an RE2 regex matching exactly it."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def alternation(values: Iterable[str]) -> str:
    """A PromQL regex string matching exactly ``values`` (each a literal), sorted."""
    return promql_string("|".join(_re_literal(v) for v in sorted(set(values))))


def pod_selector(pods: Sequence[PodRef]) -> str:
    """Label matchers selecting ``pods`` (and possibly other combinations of their labels).
    Pods of one namespace (a PhaseModel's, always) get ``namespace="<ns>"``: an equality, so
    that what the query may read is that namespace and nothing a regex could widen."""
    namespaces = {p.namespace for p in pods}
    if len(namespaces) == 1:
        return (f"namespace={promql_string(next(iter(namespaces)))},"
                f"pod=~{alternation(p.pod for p in pods)},"
                f"container=~{alternation(p.container for p in pods)}")
    return (f"namespace=~{alternation(p.namespace for p in pods)},"
            f"pod=~{alternation(p.pod for p in pods)},"
            f"container=~{alternation(p.container for p in pods)}")


def _seconds(t, what: str) -> float:
    if isinstance(t, _dt.datetime):
        return t.timestamp()
    if isinstance(t, _dt.timedelta):
        return t.total_seconds()
    try:
        x = float(t)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of seconds or a datetime, not {t!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{what} must be finite, not {t!r}")
    return x


def _grid_ms(start, end, step) -> tuple[int, int, int]:
    """(start, end, step) of a range query's grid in whole milliseconds, checked."""
    start_ms = round(_seconds(start, "start") * 1000)
    end_ms = round(_seconds(end, "end") * 1000)
    step_ms = round(_seconds(step, "step") * 1000)
    if step_ms <= 0:
        raise ValueError(f"step must be at least 1 ms, not {step!r}")
    if end_ms < start_ms:
        raise ValueError(f"end ({end}) is before start ({start})")
    return start_ms, end_ms, step_ms


def _cell_finder(pods: Sequence[PodRef], names: Sequence[str]):
    """A series' labels -> its cell (row * F + col) in the grid, or None when not asked for."""
    pod_index = {(p.namespace, p.pod, p.container): i for i, p in enumerate(pods)}
    feat_index = {name: j for j, name in enumerate(names)}
    n_feat = len(names)

    def cell_of(m: dict) -> int | None:
        """A series' cell (row * F + col) in ``values``, or None when not asked for."""
        row = pod_index.get((m.get("namespace", ""), m.get("pod", ""),
                             m.get("container", "")))
        col = feat_index.get(m.get(FEATURE_LABEL, ""))
        return None if row is None or col is None else row * n_feat + col
    return cell_of


def _tagged(query: str, label: str, value: str) -> str:
    """``query`` with ``label`` set to ``value`` on every series."""
    return f"label_replace({query}, {promql_string(label)}, {promql_string(value)}, \"\", \"\")"


def _lean_parts(payload: LeanMatrix, cell_of, flagged: list[int]
                ) -> tuple[list[int], list[int], list, list]:
    """(cells, points per cell, time arrays, value arrays) of a :class:`LeanMatrix`'s wanted
    series; the cells of duplicate checks that answered are added to ``flagged``."""
    cells: list[int] = []
    lengths: list[int] = []
    ts_parts, ys_parts = [], []
    for m, pts in payload.series:
        at = cell_of(m)
        if at is None or not len(pts):
            continue
        if CHECK_LABEL in m:
            flagged.append(at)
            continue
        cells.append(at)
        lengths.append(len(pts))
        ts_parts.append(pts[:, 0])
        ys_parts.append(pts[:, 1])
    return cells, lengths, ts_parts, ys_parts


def _blank_doubled(values: np.ndarray, doubled: set[int], names: Sequence[str],
                   pods: Sequence[PodRef], warnings: list[str]) -> dict[PodRef, tuple[str, ...]]:
    """Blank the rows of containers with a ``doubled`` cell, said in ``warnings``: those
    containers and their features."""
    n_feat = len(names)
    by_row: dict[int, list[str]] = {}
    for c in sorted(doubled):
        by_row.setdefault(c // n_feat, []).append(names[c % n_feat])
    for row in by_row:
        values[row] = np.nan
    duplicated = {pods[row]: tuple(fs) for row, fs in by_row.items()}
    if duplicated:
        warnings.append(f"{len(duplicated)} containers got more than one series for one "
                        f"feature (scraped twice, or a template that does not aggregate by "
                        f"namespace, pod, container?), e.g. {next(iter(duplicated))} "
                        f"({', '.join(next(iter(duplicated.values())))}): their samples "
                        f"are not used")
    return duplicated

# ----------------------------------------------------------------------------- the source

class PrometheusSource:
    """Read pod features from a Prometheus server (see the module doc).

    ``timeout``: seconds for connecting and for each read (also sent to Prometheus as the
    query's own timeout). ``retries``: attempts after the first, waiting ``backoff * 2**k``
    seconds (capped at ``max_backoff``) before retry ``k + 1``. ``max_points``: grid points per
    range query (Prometheus allows 11,000). ``rate_window``: the default ``{rate_window}``.

    ``query_count`` counts range queries sent (a retried query counts once), ``attempt_count``
    HTTP requests (retries included).
    """

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 3, backoff: float = 0.5,
                 max_points: int = MAX_POINTS, *, rate_window: str = DEFAULT_RATE_WINDOW,
                 max_backoff: float = 30.0, headers: Mapping[str, str] | None = None,
                 verify: bool | str = True, session: requests.Session | None = None,
                 max_series: int | None = None, max_series_factor: float | None = None):
        if not isinstance(url, str) or not re.match(r"^https?://[^/]", url):
            raise ValueError(f"Prometheus URL must start with http:// or https://, not {url!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        if int(retries) < 0 or backoff < 0:
            raise ValueError("retries and backoff must not be negative")
        if int(max_points) < 1:
            raise ValueError(f"max_points must be at least 1, not {max_points!r}")
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_points = int(max_points)
        self.rate_window = rate_window
        # Bound on the series of one range query's answer: ``max_series``, else
        # ``max_series_factor`` x pods x features + SERIES_SLACK, else none (the trainer's
        # history: its own templates, sizes planned by ai4dl.sources.prometheus_history).
        if max_series is not None and int(max_series) < 1:
            raise ValueError(f"max_series must be at least 1, not {max_series!r}")
        self.max_series = int(max_series) if max_series is not None else None
        self.max_series_factor = max_series_factor
        self.headers = dict(headers or {})
        self._session = session or requests.Session()
        self._session.verify = verify
        self.query_count = 0
        self.attempt_count = 0
        self.last_warnings: list[str] = []

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "PrometheusSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PrometheusSource({self.url!r})"

    # ------------------------------------------------------------------------ queries

    @staticmethod
    def _feature_queries(features: Sequence[FeatureQuery | str]) -> list[FeatureQuery]:
        out: list[FeatureQuery] = []
        for f in features:
            fq = f if isinstance(f, FeatureQuery) else default_feature_queries([f])[0]
            out.append(fq)
        names = [f.name for f in out]
        if len(set(names)) != len(names):
            raise ValueError(f"feature names repeat: {names}")
        if not out:
            raise ValueError("no features asked for")
        return out

    def build_query(self, features: Sequence[FeatureQuery | str], pods: Sequence[PodRef],
                    rate_window: str | None = None) -> str:
        """The single PromQL expression :meth:`fetch` sends for ``features`` x ``pods``."""
        fqs = self._feature_queries(features)
        selector = pod_selector(pods)
        window = rate_window or self.rate_window
        parts = []
        for fq in fqs:
            query = fq.render(selector, window)
            parts.append(_tagged(query, FEATURE_LABEL, fq.name))
            check = duplicate_check(query)
            problem = sent_problem(check, selector) if check and fq.confined else None
            if problem is not None:     # restated from a checked query: never expected
                raise PrometheusQueryError(None, f"feature {fq.name!r}: duplicate check "
                                           f"{problem} (refused before it was sent)")
            if check is not None:
                parts.append(_tagged(_tagged(check, FEATURE_LABEL, fq.name), CHECK_LABEL,
                                     "duplicates"))
        return " or ".join(parts)

    def fetch(self, features: Sequence[FeatureQuery | str], pods: Sequence[PodRef],
              start, end, step, *, rate_window: str | None = None) -> PodSamples:
        """Features of ``pods`` on the grid ``start, start + step, ... <= end``.

        ``features``: :class:`FeatureQuery` objects or default names (``"cpu"``...). ``start``,
        ``end``: unix seconds or datetimes (millisecond precision); ``step``: seconds or a
        timedelta. One range query for all pods and features, more only when the grid has more
        than ``max_points`` points. Raises :class:`PrometheusUnavailable`,
        :class:`PrometheusQueryError`.

        The answer's points are parsed straight into numpy arrays (:func:`parse_matrix`; a
        ``json.loads`` object tree, the fallback, holds ~180 bytes a point: at 10,000 pods a
        window's answer was ~150 MB of it, the operator's peak, and slower to build).
        """
        return self._fetch(features, pods, start, end, step, rate_window, lean=True)

    def _fetch_lean(self, features: Sequence[FeatureQuery | str], pods: Sequence[PodRef],
                    start, end, step, *, rate_window: str | None = None,
                    compress: bool = False) -> PodSamples:
        """:meth:`fetch` for big history answers (the batch trainer): the same result, the
        answer's bytes parsed series by series straight into numpy arrays
        (:func:`parse_matrix`, ~25 bytes a point held instead of the ~180 of a ``json.loads``
        object tree), falling back to ``json.loads`` for an answer it does not recognise.
        ``compress`` False asks for an uncompressed answer (``Accept-Encoding: identity``):
        gzip costs Prometheus ~20 % of a big range query's time, more than the transfer saves
        inside a cluster."""
        return self._fetch(features, pods, start, end, step, rate_window, lean=True,
                           compress=compress)

    def series_limit(self, n_pods: int, n_features: int) -> int | None:
        """The most series one range query for ``n_pods`` x ``n_features`` may answer."""
        if self.max_series is not None:
            return self.max_series
        if self.max_series_factor is not None:
            return int(self.max_series_factor * n_pods * n_features) + SERIES_SLACK
        return None

    def _fetch(self, features, pods, start, end, step, rate_window, *, lean: bool,
               compress: bool = True) -> PodSamples:
        fqs = self._feature_queries(features)
        names = tuple(f.name for f in fqs)
        pods = tuple(dict.fromkeys(PodRef(*p) for p in pods))
        start_ms, end_ms, step_ms = _grid_ms(start, end, step)
        n = (end_ms - start_ms) // step_ms + 1
        times = (start_ms + step_ms * np.arange(n, dtype=np.int64)) / 1000.0
        values = np.full((len(pods), n, len(fqs)), np.nan)
        warnings: list[str] = []
        if pods:
            n_queries, doubled = self._fill_grid(values, fqs, pods, rate_window, start_ms,
                                                 step_ms, lean, compress, warnings)
            duplicated = _blank_doubled(values, doubled, names, pods, warnings)
        else:
            n_queries, duplicated = 0, {}
        self.last_warnings = warnings
        return PodSamples(names, times, start_ms / 1000.0, end_ms / 1000.0, step_ms / 1000.0,
                          pods, values, n_queries, warnings, duplicated)

    def _fill_grid(self, values: np.ndarray, fqs: list[FeatureQuery], pods: tuple[PodRef, ...],
                   rate_window: str | None, start_ms: int, step_ms: int, lean: bool,
                   compress: bool, warnings: list[str]) -> tuple[int, set[int]]:
        """Query ``values``' grid chunk by chunk and write the points in: (range queries sent,
        cells (row * F + col) that came in more than one series of one answer)."""
        query = self.build_query(fqs, pods, rate_window)
        n = values.shape[1]
        n_feat = len(fqs)
        cell_of = _cell_finder(pods, tuple(f.name for f in fqs))
        limit = self.series_limit(len(pods), n_feat)
        # cells (row * F + col) that came in more than one series of one answer
        doubled: set[int] = set()
        flagged: list[int] = []     # cells a duplicate check answered for
        flat = values.reshape(-1)
        headers = None if compress else {"Accept-Encoding": "identity"}
        n_queries = 0
        for i0 in range(0, n, self.max_points):
            i1 = min(n, i0 + self.max_points) - 1
            q_start = start_ms + i0 * step_ms
            max_bytes = (None if limit is None else
                         limit * ((i1 - i0 + 1) * _BYTES_PER_POINT + _BYTES_PER_SERIES))
            # The answer is handed straight on, so that it is let go before its points are
            # joined (a big history answer would otherwise be held twice).
            found = self._wanted_points(self._post("/api/v1/query_range", {
                "query": query, "start": f"{q_start / 1000:.3f}",
                "end": f"{(start_ms + i1 * step_ms) / 1000:.3f}",
                "step": f"{step_ms / 1000:.3f}",
                "timeout": f"{self.timeout * SERVER_TIMEOUT_SHARE:.6f}"},
                lean=lean, headers=headers, max_bytes=max_bytes),
                cell_of, limit, len(pods), n_feat, warnings, flagged)
            n_queries += 1
            if found is None:
                continue
            cells, lengths, ts, ys = found
            seen, counts = np.unique(np.asarray(cells, dtype=np.int64), return_counts=True)
            doubled.update(int(c) for c in seen[counts > 1])
            idx = np.rint((ts * 1000.0 - q_start) / step_ms).astype(np.int64) + i0
            cell = np.repeat(np.asarray(cells, dtype=np.int64), lengths)
            ok = (idx >= i0) & (idx <= i1)
            # values[row, idx, col] is flat[(row * n + idx) * F + col]
            lin = (cell // n_feat * n + idx) * n_feat + cell % n_feat
            lin, ys = lin[ok], ys[ok]
            flat[lin] = ys    # a doubled cell's row is blanked below, whichever came last
        doubled.update(flagged)
        return n_queries, doubled

    def _wanted_points(self, payload, cell_of, limit: int | None, n_pods: int, n_feat: int,
                       warnings: list[str], flagged: list[int]):
        """(cells, points per cell, times, values) of the series asked for in one range query's
        answer, or None when it has none; refuses an answer with more series than ``limit``.
        The cells duplicate checks answered for are added to ``flagged``."""
        got = (len(payload.series) if isinstance(payload, LeanMatrix) else
               len(((payload.get("data") or {}).get("result") or ())
                   if isinstance(payload.get("data"), dict) else ()))
        if limit is not None and got > limit:
            raise SeriesLimitExceeded(self.url, f"the answer has {got} series, more "
                                      f"than the {limit} a query for {n_pods} "
                                      f"containers x {n_feat} features may give "
                                      f"(--max-series-per-query)")
        if not isinstance(payload, LeanMatrix):
            return self._json_points(payload, cell_of, warnings, flagged)
        warnings.extend(one_line(w, 300) for w in payload.warnings)
        cells, lengths, ts_parts, ys_parts = _lean_parts(payload, cell_of, flagged)
        del payload
        if not cells:
            return None
        ts = np.concatenate(ts_parts)
        ys = np.concatenate(ys_parts)
        del ts_parts, ys_parts
        return cells, lengths, ts, ys

    def _json_points(self, payload: dict, cell_of, warnings: list[str], flagged: list[int]):
        """:meth:`_wanted_points` of a ``json.loads`` answer."""
        warnings.extend(one_line(w, 300) for w in payload.get("warnings") or [])
        data = payload.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            got = data.get("resultType") if isinstance(data, dict) else None
            raise PrometheusUnavailable(
                self.url, f"unexpected answer to a range query (resultType {got!r})")
        # Gather every point of every wanted series, then place them in one go: the
        # per-point work is a few list operations, the per-series work is nil.
        points: list = []
        cells = []     # (row * F + col) per series
        lengths = []
        for series in data.get("result") or ():
            metric = series.get("metric") or {}
            at = cell_of(metric)
            pts = series.get("values")
            if at is None or not pts:
                continue
            if CHECK_LABEL in metric:
                flagged.append(at)
                continue
            points.extend(pts)
            cells.append(at)
            lengths.append(len(pts))
        if not points:
            return None
        ts = np.fromiter((p[0] for p in points), dtype=np.float64, count=len(points))
        ys = np.array([p[1] for p in points], dtype=np.float64)
        del points
        return cells, lengths, ts, ys

    def series(self, matchers: Sequence[str], start, end) -> list[dict[str, str]]:
        """Label sets of the series matching any of ``matchers`` (PromQL series selectors such as
        ``container_memory_working_set_bytes{namespace="ml"}``) between ``start`` and ``end``
        (``/api/v1/series``, POSTed); raises like :meth:`fetch`."""
        payload = self._post("/api/v1/series", {
            "match[]": list(matchers), "start": f"{_seconds(start, 'start'):.3f}",
            "end": f"{_seconds(end, 'end'):.3f}"})
        data = payload.get("data")
        if not isinstance(data, list):
            raise PrometheusUnavailable(self.url, "unexpected answer to a series query")
        return [d for d in data if isinstance(d, dict)]

    def instant(self, query: str, at) -> list[tuple[dict[str, str], float]]:
        """(labels, value) of each series an instant query returns at time ``at``
        (``/api/v1/query``, POSTed); raises like :meth:`fetch`."""
        payload = self._post("/api/v1/query", {"query": query,
                                                "time": f"{_seconds(at, 'time'):.3f}"})
        data = payload.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusUnavailable(self.url, "unexpected answer to an instant query")
        out = []
        for r in data.get("result") or []:
            try:
                out.append((dict(r.get("metric") or {}), float(r["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return out

    def version(self) -> str:
        """The server's version (``/api/v1/status/buildinfo``); raises like :meth:`fetch`."""
        payload = self._send("GET", "/api/v1/status/buildinfo", None, count=False)
        return str((payload.get("data") or {}).get("version", "unknown"))

    # ------------------------------------------------------------------------ HTTP

    def _post(self, path: str, form: dict, *, lean: bool = False,
              headers: Mapping[str, str] | None = None, max_bytes: int | None = None):
        return self._send("POST", path, form, lean=lean, headers=headers, max_bytes=max_bytes)

    def _send(self, method: str, path: str, form: dict | None, count: bool = True, *,
              lean: bool = False, headers: Mapping[str, str] | None = None,
              max_bytes: int | None = None):
        """The answer's JSON payload; with ``lean``, a :class:`LeanMatrix` when the answer is a
        successful range query :func:`parse_matrix` recognises (else the payload, as without)."""
        url = self.url + path
        if count:
            self.query_count += 1
        reason = "no attempt made"
        attempts = 0
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))
            attempts += 1
            self.attempt_count += 1
            try:
                r = self._session.request(method, url, data=form,
                                          headers={**self.headers, **(headers or {})},
                                          timeout=self.timeout,
                                          **({"stream": True} if max_bytes is not None else {}))
                if max_bytes is not None and r.status_code == 200:
                    body = read_capped(r, max_bytes)
                    if body is None:
                        raise SeriesLimitExceeded(self.url, f"the answer to {path} is larger "
                                                  f"than {max_bytes} bytes (more series than "
                                                  f"asked for?): refused unparsed")
                    r._content = body   # what r.content / r.json() read below
            except requests.Timeout:
                reason = f"no answer within {self.timeout:g} s"
                continue
            except requests.ConnectionError as e:
                reason = connection_reason(e)
                continue
            except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                    requests.exceptions.InvalidSchema) as e:
                raise PrometheusUnavailable(self.url, f"invalid URL: {one_line(e, 200)}") from None
            except requests.RequestException as e:  # broken answer (chunked encoding...), retry
                reason = f"{type(e).__name__}: {one_line(e, 200)}"
                continue
            code = r.status_code
            if code == 200:
                if lean:
                    parsed = parse_matrix(r.content)
                    if parsed is not None:
                        return parsed
                try:
                    payload = r.json()
                except ValueError:
                    raise PrometheusUnavailable(
                        self.url, f"the answer to {path} is not JSON (is this Prometheus's URL?)"
                    ) from None
                if not isinstance(payload, dict) or payload.get("status") != "success":
                    raise PrometheusQueryError(self.url, one_line(
                        payload.get("error", payload) if isinstance(payload, dict) else payload),
                        payload.get("errorType", "") if isinstance(payload, dict) else "", code)
                return payload
            error, error_type = self._error_of(r)
            if error_type == "timeout":      # the query's cost: sending it again costs as much
                raise PrometheusQueryTimeout(self.url, error, error_type, code)
            if code in (400, 422):
                raise PrometheusQueryError(self.url, error, error_type, code)
            reason = f"HTTP {code}" + (f" ({error_type})" if error_type else "") + \
                (f": {error}" if error else "")
            if code >= 500 or code in (408, 429):
                continue
            raise PrometheusUnavailable(self.url, reason, attempts)
        raise PrometheusUnavailable(self.url, reason, attempts)

    @staticmethod
    def _error_of(r: requests.Response) -> tuple[str, str]:
        """(message, errorType) of an error answer: Prometheus's JSON, else the body's text."""
        try:
            payload = r.json()
            if isinstance(payload, dict) and "error" in payload:
                return one_line(payload["error"]), str(payload.get("errorType", ""))
        except ValueError:
            pass
        return one_line(r.text or r.reason or "", 300), ""


def young_rate_probe(at: float) -> str:
    """A query of ``time()`` alone (no series read) whose answer at ``at`` tells how the store
    reads the rate of a series younger than the rate's range: the counter ``time()``, slope 1,
    kept for its last 30 s only, read by ``rate(...[60s])``. 1 where the store divides by the
    span of the samples it has (VictoriaMetrics); about 0.46 where it divides by the whole
    range (Prometheus: :mod:`ai4dl.sources.young_rates`)."""
    return f"rate((vector(time()) > {at - 30:.0f})[60s:5s])"


def young_rates_diluted(source, now: float | None = None) -> bool | None:
    """Whether ``source``'s store reads a young series' rate over the rate's whole range (see
    :func:`young_rate_probe`): True, False, or None when it could not say (no ``instant``, an
    error, an odd answer; nothing is then corrected). Asked once per store URL and kept
    ``YOUNG_RATE_PROBE_TTL`` seconds, an unknown answer too: one instant query an hour, not
    one a window."""
    now = time.time() if now is None else float(now)
    url = str(getattr(source, "url", ""))
    kept = _young_rate_answers.get(url)
    if kept is not None and now - kept[0] < YOUNG_RATE_PROBE_TTL:
        return kept[1]
    answer: bool | None = None
    ask = getattr(source, "instant", None)
    if ask is not None:
        at = math.floor(now)
        try:
            got = [v for _, v in ask(young_rate_probe(at), at)]
        except Ai4dlError:
            got = []
        if len(got) == 1 and 0 < got[0] < 2:
            answer = bool(got[0] < _DILUTED_BELOW)
    _young_rate_answers[url] = (now, answer)
    return answer
