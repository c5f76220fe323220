"""A history rightsizer in the manner of Robusta KRR's ``simple`` strategy, for trace replay.

KRR (github.com/robusta-dev/krr) reads a workload's pods' usage history from Prometheus and
recommends one request per container. What is replicated here was read in KRR's source:

* ``robusta_krr/strategies/simple.py`` at commit 6cef9fa0f19c0608921bf87a2a7ed7a0acb50365
  (the release line with ``points_required`` and the OOMKill option; earlier versions had a
  99th percentile and a 5 % buffer): ``SimpleStrategySettings`` defaults
  ``cpu_percentile = 95``, ``memory_buffer_percentage = 15``, ``points_required = 100``.
  CPU: ``PercentileCPULoader(95)`` asks Prometheus for ``quantile_over_time(0.95, ...)``
  *per pod* over the whole history, and ``calculate_cpu_proposal`` takes the **maximum over the
  pods** of those per-pod percentiles. Memory: ``MaxMemoryLoader`` gives each pod's
  ``max_over_time`` and ``calculate_memory_proposal`` returns ``max over pods × (1 + 15/100)``
  (request = limit). When the points counted by ``CPUAmountLoader`` /
  ``MemoryAmountLoader`` (``count_over_time`` of the pods' series, summed over the pods) are
  fewer than ``points_required``, the resource gets no recommendation ("Not enough data").
  Not modelled: the HPA refusal (``allow_hpa``) and the experimental OOMKill bump
  (``use_oomkill_data``, off by default).
* ``robusta_krr/core/abstract/strategies.py`` at commit bb1f3dd01d1486ebe0f80e586f0c0cda6f644da2:
  ``StrategySettings.history_duration = 24 * 7 * 2`` hours (336 h, 14 days) and
  ``timeframe_duration = 1.25`` minutes (the Prometheus subquery step).
* ``robusta_krr/core/runner.py`` (stored version of commit 00a184952733167541d72fb7d64dabeb5cd44dfc)
  and ``robusta_krr/core/models/config.py``: the runner rounds every recommendation up to whole
  millicores (cpu) and whole megabytes (10**6 bytes, memory) and raises it to at least
  ``cpu_min_value = 10`` millicores and ``memory_min_value = 100`` MB. Applied here only where
  the trace is in those units (cpu in cores, memory in bytes); a trace in percent or fractions
  has no such floor.

Mapping onto the replay. A workload is an execution group, a pod one execution. An execution
gets ONE request for its whole life (KRR recommends, the pod is created with it; KRR does not
resize a running pod), computed from the samples of the group's executions that lie in the
``history_duration_hours`` before the execution starts (``starts`` and ``step`` place sample
``m`` of an execution at ``start + m * step``; a sample at ``t < start`` has been observed by
then). The own and later executions' samples are all at or after the start, so they never
count. CPU is the maximum over those executions of each one's percentile of its in-window
samples (numpy's linear interpolation, which is PromQL's ``quantile_over_time``; the
percentile rounded to two decimals of a fraction, as KRR's query does); memory is the maximum of
the in-window samples × (1 + buffer).

``points_required`` is counted in KRR's points, not in trace samples: KRR counts the 1.25-min
subquery steps at which a pod's series has a value, so 100 points mean about 125 minutes of
observed pod-time whatever the scrape interval (a pod that lived 100 s gives KRR one or two
points, not 100). A trace sample stands for ``step`` seconds, so the history's points are
``finite samples × step ÷ (timeframe_minutes × 60)``, summed over the executions as KRR sums
over pods. Counting trace samples instead is ``timeframe_minutes = step / 60``. With fewer
points (KRR: no recommendation) the execution keeps its initial request, per resource.

Resources other than cpu and memory get a KRR rule by what they are (see
:func:`is_memory_like`): a memory-like quantity (incompressible: an under-request OOMs) the
memory rule, anything else (compressible, like cpu: an under-request throttles) the cpu rule.
Scored by the evaluator for the record; never served by the operator.

Other deviations: KRR's cpu sample is ``rate(container_cpu_usage_seconds_total[1.25m])`` on a
1.25-min grid, ours the trace's sample at its own step; memory is the trace's value rather
than ``container_memory_working_set_bytes`` at the grid points. Pure numpy.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ai4dl.policy.policies import n_rows
from ai4dl.policy.registry import Declared, FitInputs, declare

__all__ = ["KrrPolicy", "KrrHistory", "is_memory_like", "KRR_SOURCE"]

#: Where the defaults were read (module docstring has the details).
KRR_SOURCE = ("robusta-dev/krr robusta_krr/strategies/simple.py @ 6cef9fa0f19c; "
              "core/abstract/strategies.py @ bb1f3dd01d14")

_MB = 1_000_000.0  # KRR's memory unit: megabytes (10**6), not MiB


def is_memory_like(resource: str, unit: str | None = None) -> bool:
    """Whether ``resource`` is a memory-like (incompressible) quantity: its name says memory
    (``memory``, ``gpu_memory``, ``mem``) or it is counted in bytes."""
    return "memory" in resource or resource == "mem" or unit == "bytes"


@dataclass
class KrrHistory:
    """The samples KRR's Prometheus would hold for one workload: per execution its sample
    times, usage (samples × resources) and step, in the order they were added."""
    runs: list[tuple[np.ndarray, np.ndarray, float]] = field(default_factory=list)

    def add(self, start: float, step: float, usage: np.ndarray) -> None:
        usage = np.asarray(usage, np.float64)
        self.runs.append((float(start) + float(step) * np.arange(len(usage)), usage,
                          float(step)))


@dataclass
class KrrPolicy:
    """One constant request per execution from its workload's earlier executions (KRR's
    ``simple`` strategy; see the module docstring for the source and the mapping).

    ``units`` (per resource, as the trace gives them) only decides where KRR's rounding and
    minimums apply (cpu in cores, memory in bytes) and, for resources other than cpu and
    memory, whether bytes make them memory-like; ``None``: not known, neither applies.
    The evaluator replays a group's executions together with one state
    (``EvaluationConfig.vpa_prewarm``); without it every execution has no history and keeps its
    initial request.
    """
    resources: tuple[str, ...] = ("cpu", "memory")
    units: tuple[str, ...] | None = None
    cpu_percentile: float = 95.0
    memory_buffer_percentage: float = 15.0
    history_duration_hours: float = 336.0
    points_required: int = 100
    timeframe_minutes: float = 1.25
    cpu_min_millicores: float = 10.0
    memory_min_mb: float = 100.0
    name: str = "krr"
    needs_phases: bool = False
    uses_workload_state: bool = True

    def __post_init__(self):
        def bad(what: str) -> None:
            raise ValueError(f"KrrPolicy: {what}")

        if not 0 < self.cpu_percentile <= 100:
            bad(f"cpu_percentile must be in (0, 100], not {self.cpu_percentile!r}")
        if not self.memory_buffer_percentage >= 0:
            bad(f"memory_buffer_percentage must be >= 0, not {self.memory_buffer_percentage!r}")
        if not (self.history_duration_hours > 0 and math.isfinite(self.history_duration_hours)):
            bad(f"history_duration_hours must be positive, not {self.history_duration_hours!r}")
        if not self.points_required >= 1:
            bad(f"points_required must be >= 1, not {self.points_required!r}")
        if not (self.timeframe_minutes > 0 and math.isfinite(self.timeframe_minutes)):
            bad(f"timeframe_minutes must be positive, not {self.timeframe_minutes!r}")
        if not (self.cpu_min_millicores >= 0 and self.memory_min_mb >= 0):
            bad("cpu_min_millicores and memory_min_mb must be >= 0")
        if self.units is not None and len(self.units) != len(self.resources):
            bad(f"{len(self.units)} units for {len(self.resources)} resources")

    # ------------------------------------------------------------------ per resource
    def _unit(self, j: int) -> str | None:
        return self.units[j] if self.units is not None else None

    def _memory_rule(self, R: int) -> np.ndarray:
        """Per column: True where the memory rule applies (max × buffer), else the cpu rule."""
        out = np.zeros(R, bool)
        for j in range(min(R, len(self.resources))):
            r = self.resources[j]
            out[j] = r == "memory" or (r != "cpu" and is_memory_like(r, self._unit(j)))
        return out

    def _finish(self, rec: np.ndarray) -> np.ndarray:
        """KRR's runner: round up to 1 millicore / 1 MB and apply the minimums, where the
        trace is in KRR's units (elsewhere those numbers mean nothing)."""
        out = rec.copy()
        for j in range(min(len(out), len(self.resources))):
            r, u = self.resources[j], self._unit(j)
            if r == "cpu" and u == "cores":
                out[j] = max(np.ceil(out[j] * 1000) / 1000, self.cpu_min_millicores / 1000)
            elif r == "memory" and u == "bytes":
                # as KRR writes it: ceil(value * 1e-6) / 1e-6
                out[j] = max(np.ceil(out[j] * (1 / _MB)) / (1 / _MB), self.memory_min_mb * _MB)
        return out

    # ------------------------------------------------------------------ the recommendation
    def recommend(self, history: KrrHistory, now: float, initial: np.ndarray) -> np.ndarray:
        """The request at ``now`` from the samples of ``history`` in the
        ``history_duration_hours`` before it; per resource, ``initial`` where they hold fewer
        than ``points_required`` points (KRR: "Not enough data")."""
        initial = np.asarray(initial, np.float64)
        R = len(initial)
        begin = now - self.history_duration_hours * 3600.0
        # as KRR's query asks for it: quantile_over_time(round(percentile / 100, 2), ...)
        q = round(self.cpu_percentile / 100, 2)
        frame_s = self.timeframe_minutes * 60.0
        pcts, maxes, points = [], [], np.zeros(R)
        for times, usage, step in history.runs:
            if not len(times) or times[0] >= now or times[-1] < begin:
                continue
            lo, hi = np.searchsorted(times, (begin, now), side="left")
            if hi <= lo:
                continue
            seg = usage[lo:hi, :R]
            finite = np.isfinite(seg)
            if finite.all():
                pcts.append(np.quantile(seg, q, axis=0))
                maxes.append(seg.max(0))
                n = np.full(R, len(seg), np.float64)
            else:
                with warnings.catch_warnings():  # a column with no finite sample gives NaN
                    warnings.simplefilter("ignore", RuntimeWarning)
                    pcts.append(np.nanquantile(seg, q, axis=0))
                    maxes.append(np.nanmax(np.where(finite, seg, -np.inf), 0))
                maxes[-1][~finite.any(0)] = np.nan
                n = finite.sum(0).astype(np.float64)
            # KRR counts 1.25-min subquery points, i.e. observed pod-time, not scrapes: a
            # sample stands for `step` seconds of it (see the module docstring)
            points += n * (step / frame_s)
        if not pcts:
            return initial.copy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cpu_rule = np.nanmax(np.vstack(pcts), 0)
            memory_rule = np.nanmax(np.vstack(maxes), 0) * (1 + self.memory_buffer_percentage
                                                             / 100)
        rec = np.where(self._memory_rule(R), memory_rule, cpu_rule)
        enough = (points >= self.points_required - 1e-9) & np.isfinite(rec)
        return np.where(enough, self._finish(np.where(enough, rec, 0.0)), initial)

    # ------------------------------------------------------------------ the replay interface
    def new_state(self) -> KrrHistory:
        return KrrHistory()

    def allocate_group(self, usages, phases, window, initials, step, starts, pods,
                       state=None) -> list[np.ndarray]:
        """Rows for several executions of one workload: each execution's one request, from
        ``state``'s history and the group's samples before its start, on every row. Executions
        are taken in time order (start, then input order) and added to ``state`` afterwards,
        so a later call continues the workload's history."""
        if not (step > 0 and math.isfinite(step)):
            raise ValueError(f"policy 'krr' places samples in time by the trace's step, "
                             f"which must be positive, not {step!r}")
        history = state if state is not None else self.new_state()
        usages = [np.asarray(u, np.float64) for u in usages]
        order = sorted(range(len(usages)), key=lambda i: (float(starts[i]), i))
        pool = KrrHistory(list(history.runs))
        for i in order:
            pool.add(starts[i], step, usages[i])
        outs: list = [None] * len(usages)
        for i in order:
            u = usages[i]
            # the pool holds the whole group, but only samples before this start count
            request = self.recommend(pool, float(starts[i]), initials[i])
            outs[i] = np.repeat(request[None, :], n_rows(len(u), window), 0)
        history.runs[:] = pool.runs
        return outs

    def allocate(self, usage, phases, window, initial, step, state=None, t0: float = 0.0,
                 pod=None):
        """One execution; with no ``state`` (no workload history) the initial request."""
        return self.allocate_group([usage], [phases], window, [initial], step, [t0], [pod],
                                   state)[0]


def _fit_krr(inputs: FitInputs) -> KrrPolicy:
    """Scored for the record, never served; the units decide where KRR's rounding and minimums
    apply (cpu in cores, memory in bytes)."""
    train = inputs.train
    return KrrPolicy(resources=tuple(inputs.resources),
                     units=tuple(train.units) if train is not None else None)


declare(Declared(
    KrrPolicy.name, "reference", rank=90, build=_fit_krr, uses_training=True, colour="tab:gray",
    figures=("execution", "risk"),
    summary="a history rightsizer (KRR-style): a percentile of the workload's earlier runs"))
