"""A young container's rate read over its age, not over the rate's whole range (issue 42).

``rate(x[1m])`` of a container younger than its range is, on Prometheus, what the container
used since it started divided by the **whole** range: the extrapolation of a counter stops at
the counter's start. On the real node a static cnn run used 0.6 core in its first 20 s and
``rate(container_cpu_usage_seconds_total[1m])`` read 0.24-0.29 (docs/results.md §9): the first
window of every run was read low, the workload's profile learned that low level, and the next
run started on it (the start bar missed, 1.44-1.74 ×). VictoriaMetrics divides by the span of
the samples it has, and reads such a container right.

So, where the store dilutes (:func:`ai4dl.sources.prometheus.young_rates_diluted`, measured
once per store), :func:`undilute` multiplies a rate feature's samples younger than the rate's
range by range ÷ age (the age at least one step: a rate needs two samples). For a counter that
starts at the container's start, Prometheus's reading at age ``a`` is at most usage × a ÷ range
(less by up to half a scrape, and by cAdvisor's refresh lag), so the correction never reads
more than the container used at a steady rate. Which features are such rates:
:func:`~ai4dl.promql.rate_range_seconds` of each template (one range, a ``rate``'s). Pure.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from ai4dl.promql import TemplateError, rate_range_seconds, render_template

#: Put in for ``{selector}`` to read a template's shape (its matchers do not change its ranges)
_ANY_SELECTOR = 'namespace="ai4dl"'


def feature_rate_ranges(templates: Sequence[str], rate_window: str) -> np.ndarray:
    """Per template, the range in seconds of the one ``rate`` it reads, else 0 (F,)."""
    return np.array(_rate_ranges(tuple(templates), rate_window), dtype=np.float64)


@lru_cache(maxsize=1024)
def _rate_ranges(templates: tuple[str, ...], rate_window: str) -> tuple[float, ...]:
    # parsed once per set of templates, not at every window of every PhaseModel
    out = []
    for template in templates:
        try:
            out.append(rate_range_seconds(render_template(template, _ANY_SELECTOR, rate_window)))
        except TemplateError:
            out.append(0.0)
    return tuple(float(r) for r in out)


def undilute(values: np.ndarray, times: np.ndarray, started: float, ranges: np.ndarray,
             step: float) -> np.ndarray:
    """``values`` (T, F) at ``times`` (T,) of a container that started at ``started`` (unix
    s), with each rate feature's samples younger than its range (``ranges`` (F,), 0 for a
    feature that is not such a rate) read over the container's age: × range ÷ max(age,
    step). Samples from before the start (a predecessor's) are left as they are. A new array
    where anything changed, else ``values`` itself."""
    ranges = np.asarray(ranges, np.float64)
    age = np.asarray(times, np.float64) - float(started)
    young = (age[:, None] >= 0) & (age[:, None] < ranges[None, :]) & (ranges[None, :] > 0)
    if not young.any():
        return values
    factor = ranges[None, :] / np.maximum(age, float(step))[:, None]
    return values * np.where(young, np.maximum(factor, 1.0), 1.0)
