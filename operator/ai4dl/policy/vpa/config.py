"""The recommender's settings: VPA's flags, aggregation constants and histogram options.

Defaults and constants are upstream's ``config/config.go`` and ``model/aggregations_config.go``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ai4dl.policy.vpa.histogram import ExponentialHistogramOptions

#: ``minSampleWeight`` and ``epsilon = 0.001 * minSampleWeight`` (a Go constant: exactly 1e-4).
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 1e-4
_MIB = 1024 * 1024


@functools.lru_cache(maxsize=8)
def cpu_histogram_options(growth: float = 0.05) -> ExponentialHistogramOptions:
    """``cpuHistogramOptions``: 0.01-core first bucket, up to 1000 cores (shared, read-only)."""
    return ExponentialHistogramOptions(1000.0, 0.01, 1.0 + growth, EPSILON)


@functools.lru_cache(maxsize=8)
def memory_histogram_options(growth: float = 0.05) -> ExponentialHistogramOptions:
    """``memoryHistogramOptions``: 10 MB (1e7 bytes) first bucket, up to 1 TB (1e12 bytes)."""
    return ExponentialHistogramOptions(1e12, 1e7, 1.0 + growth, EPSILON)


@dataclass(frozen=True)
class VpaConfig:
    """Recommender settings; defaults are VPA's (config/config.go, aggregations_config.go)."""

    cpu_half_life_s: float = 24 * 3600.0             # --cpu-histogram-decay-half-life
    memory_half_life_s: float = 24 * 3600.0          # --memory-histogram-decay-half-life
    target_cpu_percentile: float = 0.9               # --target-cpu-percentile
    lower_bound_cpu_percentile: float = 0.5          # --recommendation-lower-bound-cpu-percentile
    upper_bound_cpu_percentile: float = 0.95         # --recommendation-upper-bound-cpu-percentile
    target_memory_percentile: float = 0.9            # --target-memory-percentile
    lower_bound_memory_percentile: float = 0.5
    upper_bound_memory_percentile: float = 0.95
    safety_margin_fraction: float = 0.15             # --recommendation-margin-fraction
    pod_min_cpu_millicores: float = 25.0             # --pod-recommendation-min-cpu-millicores
    pod_min_memory_mb: float = 250.0                 # --pod-recommendation-min-memory-mb (MiB)
    n_containers: int = 1                            # the pod minimums are split across these
    cpu_sample_weight: float = MIN_SAMPLE_WEIGHT     # constant CPU sample weight
    cpu_weight_from_request: bool = False            # legacy: weight = max(request, 0.1)
    memory_aggregation_interval_s: float = 24 * 3600.0   # --memory-aggregation-interval
    memory_aggregation_interval_count: int = 8       # --memory-aggregation-interval-count
    oom_bump_up_ratio: float = 1.2                   # --oom-bump-up-ratio
    oom_min_bump_up_bytes: float = 100.0 * _MIB      # --oom-min-bump-up-bytes
    confidence_interval_cpu_s: float = 24 * 3600.0   # --confidence-interval-cpu
    confidence_interval_memory_s: float = 24 * 3600.0  # --confidence-interval-memory
    histogram_bucket_size_growth: float = 0.05

    def __post_init__(self):
        positive = ("cpu_half_life_s", "memory_half_life_s", "memory_aggregation_interval_s",
                    "confidence_interval_cpu_s", "confidence_interval_memory_s",
                    "histogram_bucket_size_growth", "cpu_sample_weight")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"VpaConfig.{name} must be > 0")
        if self.n_containers < 1:
            raise ValueError("VpaConfig.n_containers must be >= 1")

    @property
    def memory_aggregation_window_s(self) -> float:
        """``GetMemoryAggregationWindowLength`` (8 days by default)."""
        return self.memory_aggregation_interval_s * self.memory_aggregation_interval_count
