"""``logic/recommender.go``: VpaRecommender, a workload aggregate's target, lower and upper bound.

* ``routines`` (``GetContainerNameToAggregateStateMap``): every aggregate of the VPA gets a
  recommendation, also one with no sample yet (the pod minimums): upstream dropped the
  ``TotalSamplesCount > 0`` filter in 2022, and ``AddOrUpdateContainer`` creates the aggregate
  when the container is first seen.  (Before, this replica returned no recommendation there,
  as VPA releases before 2022 did.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ai4dl.policy.vpa.aggregate_container_state import AggregateContainerState
from ai4dl.policy.vpa.estimator import confidence_multiplier, estimate, estimator_constants


@dataclass(frozen=True)
class VpaRecommendation:
    """One container's recommendation; each dict is ``{"cpu": cores, "memory": bytes}``.

    CPU is a whole number of millicores expressed in cores, memory a whole number of bytes
    (as a float).  ``confidence_cpu``/``confidence_memory`` are the history confidences used
    for the bounds (in units of the confidence intervals, i.e. days by default).
    """

    target: dict
    lower_bound: dict
    upper_bound: dict
    confidence_cpu: float
    confidence_memory: float


class VpaRecommender(AggregateContainerState):
    """VPA's recommender for one container aggregate (``AggregateContainerState``) and the
    ``ContainerState`` of each container (pod) feeding it, keyed by the ``container`` argument
    of the ``add``/``record_oom`` methods (default: one container, key None).

    Times are seconds (float, any epoch; feed each container's samples in the order VPA would
    see them).
    Samples VPA would discard (out of order, negative usage) are ignored, and so are NaN or
    infinite usages (which VPA cannot receive); the ``add``
    methods say whether/how many samples were taken.  The aggregate and container state live
    in :class:`AggregateContainerState`; :meth:`recommend` runs the estimators on them.
    """

    def _estimator_constants(self) -> tuple[int, int, tuple, tuple]:
        """The per-container minimum CPU (millicores) and memory (bytes) and the (target,
        lower, upper) CPU and memory percentiles.  Fixed per config, so computed once (again
        only if ``self.config`` is replaced)."""
        cfg = self.config
        cached = self.__dict__.get("_estimator_constants_cache")
        if cached is None or cached[0] is not cfg:
            cached = (cfg, estimator_constants(cfg))
            self._estimator_constants_cache = cached
        return cached[1]

    @staticmethod
    def _confidence_multiplier(multiplier: float, exponent: float, confidence: float) -> float:
        return confidence_multiplier(multiplier, exponent, confidence)

    def recommend(self, t_seconds: float | None = None) -> VpaRecommendation:
        """Target, lower and upper bound as VPA computes them now.

        An aggregate with no sample yet gets the pod minimums (empty histograms give 0, the
        confidence of 0 makes the lower bound 0 and the upper bound NaN, and the minimums
        apply), as upstream since 2022: ``GetContainerNameToAggregateStateMap`` no longer
        filters aggregates with ``TotalSamplesCount == 0``, and the cluster state creates the
        aggregate when it first sees the container, before any sample. With CPU samples but no
        memory sample the memory values are the minimum, and with memory samples only the
        memory target comes from them. The estimator does not look at the clock, so
        ``t_seconds`` does not change the result; it is accepted so callers can pass the
        replay time.
        """
        cfg = self.config
        conf_cpu = self.confidence(cfg.confidence_interval_cpu_s)
        conf_mem = self.confidence(cfg.confidence_interval_memory_s)
        target, lower_bound, upper_bound = estimate(
            self.cpu, self.memory, self._estimator_constants(), conf_cpu, conf_mem,
            cfg.safety_margin_fraction)
        return VpaRecommendation(
            target=target,
            lower_bound=lower_bound,
            upper_bound=upper_bound,
            confidence_cpu=conf_cpu,
            confidence_memory=conf_mem,
        )
