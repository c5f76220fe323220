"""``logic/estimator.go``: the estimators that turn the histograms into recommended amounts.

* ``logic/recommender.go`` + ``logic/estimator.go``: target/lower/upper = P90/P50/P95 of the
  CPU histogram and of the memory-peak histogram, plus a 15 % margin, the upper bound times
  ``(1 + 1/conf) ** 1`` and the lower bound times ``(1 + 0.001/conf) ** -2`` with
  ``conf = min(lifespan / 24 h, samples / (24 h in minutes))``, then at least the pod
  minimums (25 millicores, 250 MiB) divided by the number of containers.  All amounts are
  integer ``ResourceAmount``s (millicores, bytes) with Go's truncating conversions and the
  1e14 cap (``model/types.go``).
"""

from __future__ import annotations

import functools
import math

from ai4dl.policy.vpa.amounts import amount_from_float, cpu_amount_from_cores, scale_resource
from ai4dl.policy.vpa.config import VpaConfig
from ai4dl.policy.vpa.histogram import ExponentialHistogram
from ai4dl.policy.vpa.numeric import go_pow


@functools.lru_cache(maxsize=1 << 14)
def confidence_multiplier(multiplier: float, exponent: float, confidence: float) -> float:
    """``getConfidenceMultiplier``: ``(1 + multiplier / confidence) ** exponent``.

    Memoised: replays of equally sampled executions meet the same confidences window after
    window.  (The cache may treat a confidence of -0.0 as 0.0; both give the same base.)
    """
    base = math.inf if confidence == 0 else 1.0 + multiplier / confidence
    return go_pow(base, exponent)


def estimator_constants(cfg: VpaConfig) -> tuple[int, int, tuple, tuple]:
    """The per-container minimum CPU (millicores) and memory (bytes) and the (target, lower,
    upper) CPU and memory percentiles of ``cfg``."""
    fraction = 1.0 / cfg.n_containers
    min_cpu = scale_resource(
        cpu_amount_from_cores(cfg.pod_min_cpu_millicores * 0.001), fraction)
    min_mem = scale_resource(
        amount_from_float(cfg.pod_min_memory_mb * 1024 * 1024), fraction)
    cpu_ps = (cfg.target_cpu_percentile, cfg.lower_bound_cpu_percentile,
              cfg.upper_bound_cpu_percentile)
    mem_ps = (cfg.target_memory_percentile, cfg.lower_bound_memory_percentile,
              cfg.upper_bound_memory_percentile)
    return min_cpu, min_mem, cpu_ps, mem_ps


def estimate(cpu: ExponentialHistogram, memory: ExponentialHistogram,
             constants: tuple[int, int, tuple, tuple], conf_cpu: float, conf_mem: float,
             margin: float) -> list[dict]:
    """Target, lower and upper bound, each ``{"cpu": cores, "memory": bytes}``: the
    percentile estimators on the CPU and memory-peak histograms, then the margin, the
    confidence multipliers (bounds only) and the minimum resources, as upstream chains them.
    ``constants`` are :func:`estimator_constants`; ``conf_*`` the history confidences."""
    min_cpu, min_mem, cpu_percentiles, mem_percentiles = constants
    # Target, lower and upper bound percentiles, each histogram's in one pass.
    cpu_ps = cpu.percentiles(cpu_percentiles)
    mem_ps = memory.percentiles(mem_percentiles)
    # Lower bound times (1 + 0.001/conf)**-2, upper bound times (1 + 1/conf)**1.
    multiplier = confidence_multiplier
    cpu_mults = (None, multiplier(0.001, -2.0, conf_cpu), multiplier(1.0, 1.0, conf_cpu))
    mem_mults = (None, multiplier(0.001, -2.0, conf_mem), multiplier(1.0, 1.0, conf_mem))

    # ``amount`` is resourceAmountFromFloat; ``amount(float(x) * f)`` is ScaleResource
    # and ``amount(cores * 1000.0)`` CPUAmountFromCores, inlined (this runs per window).
    amount = amount_from_float
    estimates = []
    for cores, bytes_, m_cpu, m_mem in zip(cpu_ps, mem_ps, cpu_mults, mem_mults):
        cpu = amount(cores * 1000.0)
        mem = amount(bytes_)
        cpu = cpu + amount(float(cpu) * margin)
        mem = mem + amount(float(mem) * margin)
        if m_cpu is not None:
            cpu = amount(float(cpu) * m_cpu)
            mem = amount(float(mem) * m_mem)
        cpu = cpu if cpu >= min_cpu else min_cpu
        mem = mem if mem >= min_mem else min_mem
        estimates.append({"cpu": cpu / 1000.0, "memory": float(mem)})
    return estimates
