"""A pure-Python/numpy re-implementation of the Kubernetes VPA *recommender* for trace replay.

It follows kubernetes/autoscaler ``vertical-pod-autoscaler/pkg/recommender`` (the
default recommender, no checkpoints, no Prometheus history) for the
aggregate of one workload's container.

The package follows upstream's own seams (one module each; their docstrings map the Go files):

* :mod:`~ai4dl.policy.vpa.histogram`: ``util/histogram_options.go``, ``util/histogram.go``,
  ``util/decaying_histogram.go``;
* :mod:`~ai4dl.policy.vpa.aggregate_container_state`: ``model/aggregate_container_state.go``,
  ``model/container.go``, ``model/cluster.go``;
* :mod:`~ai4dl.policy.vpa.estimator`: ``logic/estimator.go``;
* :mod:`~ai4dl.policy.vpa.recommender`: ``logic/recommender.go``, ``routines``;
* :mod:`~ai4dl.policy.vpa.config`: ``config/config.go``, ``model/aggregations_config.go``;
* :mod:`~ai4dl.policy.vpa.amounts`: ``model/types.go``;
* :mod:`~ai4dl.policy.vpa.numeric`: Go's ``math.Pow`` and rounding, small-array reductions.

Inputs are quantised as the live metrics path does: CPU usage to whole millicores
(``Quantity.MilliValue()`` rounds up; we first round to nanocores, the resolution
metrics-server reports, so that float noise such as ``0.57 * 1000 = 570.0000000000001``
does not add a millicore) and memory to whole bytes (rounded up).

Deviations.  Last-bit level: ``FindBucket`` compares against the bucket-start table
instead of evaluating ``log(v * (r - 1) / first + 1) / log(r)`` (see
:class:`ExponentialHistogramOptions`); decay factors use ``numpy.exp2`` instead of Go's
``math.Exp2``; times are float seconds rather than integer nanoseconds.  The reference
timestamp is rounded relative to ``t = 0`` of the caller's clock (identical to Go for Unix
times when the half-life divides 24 h).  Not modelled: aggregate garbage collection (see
:meth:`VpaRecommender.is_expired`), checkpoints, merging several aggregates (pods with
different labels under one VPA),
per-VPA policies (min/max allowed, controlled resources) and post-processors (the default
rounding to 1 millicore / 1 byte is a no-op).  NaN or infinite usages, which VPA cannot
receive, are dropped like invalid samples.
"""

# The package's public API (``__all__``), imported from the modules that define it.
from ai4dl.policy.vpa.amounts import MAX_RESOURCE_AMOUNT
from ai4dl.policy.vpa.config import VpaConfig, cpu_histogram_options, memory_histogram_options
from ai4dl.policy.vpa.histogram import (DecayingHistogram, ExponentialHistogram,
                                        ExponentialHistogramOptions)
from ai4dl.policy.vpa.recommender import VpaRecommendation, VpaRecommender

__all__ = [
    "ExponentialHistogramOptions",
    "ExponentialHistogram",
    "DecayingHistogram",
    "VpaConfig",
    "VpaRecommendation",
    "VpaRecommender",
    "cpu_histogram_options",
    "memory_histogram_options",
    "MAX_RESOURCE_AMOUNT",
]

