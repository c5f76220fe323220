"""Live metric sources: where the operator and the batch trainer read pod resource usage.

Kept thin and free of kopf: each source turns a time window and a list of pods into numpy
arrays on a regular grid.
"""

from ai4dl.sources.prometheus import PrometheusSource
from ai4dl.sources.prometheus_types import (DEFAULT_QUERIES, FeatureQuery, PodRef, PodSamples,
                                            PodSeries, PrometheusQueryError, PrometheusUnavailable,
                                            default_feature_queries)

__all__ = ["DEFAULT_QUERIES", "FeatureQuery", "PodRef", "PodSamples", "PodSeries",
           "PrometheusQueryError", "PrometheusSource", "PrometheusUnavailable",
           "default_feature_queries"]
