"""VPA's model: one workload's aggregate of usage histograms, fed by each of its containers.

* ``model/aggregate_container_state.go``: CPU samples are added with a constant weight of
  ``minSampleWeight = 0.1``.  Older releases used ``max(request, 0.1)``, which is 0.1 in
  practice because the feeder's samples carry no request (kubernetes/autoscaler#7818);
  the project notes date the switch to the constant to ca812b36a3 (Feb 2025).  The old rule
  is available as ``VpaConfig.cpu_weight_from_request``.  Memory peaks have weight 1.
  First/last sample start and the sample count come from CPU samples only.
* ``model/container.go``: CPU samples that are not strictly after the previous accepted one
  are dropped; memory samples before the previous one are dropped; memory keeps ONE peak
  per aggregation interval (24 h), stored at the interval's end time: a higher sample in the
  same interval subtracts the old peak and adds the new one, lower samples change nothing.
  ``RecordOOM`` adds ``max(used + 100 MiB, used * 1.2)`` with ``used = max(request,
  memory peak of the current interval)`` as a memory sample; OOMs older than one interval
  before the current window end are dropped.
* ``model/cluster.go``: ONE aggregate per workload (VPA's key: namespace, container name, pod
  labels) fed by one ``ContainerState`` per container of each pod: pass a ``container`` key
  (the pod) to the ``add``/``record_oom`` methods.  Each container drops only its own
  out-of-order samples and keeps its own memory peak per interval, so overlapping pods of
  one workload all count, as in VPA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ai4dl.policy.vpa.amounts import amount_from_float, scale_resource, usage_millicores
from ai4dl.policy.vpa.config import (MIN_SAMPLE_WEIGHT, VpaConfig, cpu_histogram_options,
                                     memory_histogram_options)
from ai4dl.policy.vpa.histogram import DecayingHistogram
from ai4dl.policy.vpa.numeric import all_true, highest_item, lowest_item


@dataclass
class ContainerState:
    """``model/container.go`` ContainerState: what one container remembers on its own — the
    start of its last CPU and memory samples (out-of-order samples are dropped per container)
    and the peak of its current memory aggregation interval, which it adds to (and replaces
    in) the shared aggregate's memory histogram."""
    last_cpu_sample_start: float = -math.inf
    last_memory_sample_start: float = -math.inf
    window_end: float | None = None
    memory_peak: int = 0    # bytes, current interval, from usage samples
    oom_peak: int = 0       # bytes, current interval, from OOM samples


class AggregateContainerState:
    """``AggregateContainerState`` (one workload's CPU and memory-peak histograms, first/last
    CPU sample start and sample count) and the ``ContainerState`` of each container (pod)
    feeding it, keyed by the ``container`` argument of the ``add``/``record_oom`` methods
    (default: one container, key None).  :class:`~ai4dl.policy.vpa.recommender.VpaRecommender`
    adds the estimation on top.
    """

    def __init__(self, config: VpaConfig | None = None):
        self.config = cfg = config or VpaConfig()
        growth = cfg.histogram_bucket_size_growth
        self.cpu = DecayingHistogram(cpu_histogram_options(growth), cfg.cpu_half_life_s)
        self.memory = DecayingHistogram(memory_histogram_options(growth), cfg.memory_half_life_s)
        # AggregateContainerState (first/last/count come from CPU samples only).
        self.first_sample_start: float | None = None
        self.last_sample_start: float | None = None
        self.total_samples_count = 0
        # One ContainerState per container (pod) feeding this aggregate, as VPA keeps one per
        # pod: overlapping pods of one workload each keep their own sample order and memory
        # peaks. Calls without a ``container`` key use the default one (key None).
        self.containers: dict = {}

    def container(self, key=None) -> "ContainerState":
        """The ContainerState of container ``key`` (created on first use)."""
        c = self.containers.get(key)
        if c is None:
            c = self.containers[key] = ContainerState()
        return c

    # The default container's state, under the names the single-container replica used.
    def _default_field(name):  # noqa: N805 (a property factory, run at class creation)
        def get(self):
            return getattr(self.container(None), name)

        def set_(self, value):
            setattr(self.container(None), name, value)
        return property(get, set_)

    last_cpu_sample_start = _default_field("last_cpu_sample_start")
    last_memory_sample_start = _default_field("last_memory_sample_start")
    window_end = _default_field("window_end")
    memory_peak = _default_field("memory_peak")
    oom_peak = _default_field("oom_peak")
    del _default_field

    # ------------------------------------------------------------------ CPU
    def _cpu_weight(self, request_cores):
        cfg = self.config
        if not cfg.cpu_weight_from_request or request_cores is None:
            return cfg.cpu_sample_weight
        req = usage_millicores(request_cores) / 1000.0
        return np.maximum(np.nan_to_num(req, nan=0.0), MIN_SAMPLE_WEIGHT)

    def add_cpu_sample(self, t_seconds: float, cores: float,
                       request_cores: float | None = None, container=None) -> bool:
        """Add one CPU usage sample (average cores over the interval starting at ``t``).

        ``request_cores`` only matters with ``VpaConfig.cpu_weight_from_request``.
        Returns False when VPA would drop the sample.
        """
        cs = self.container(container)
        t = float(t_seconds)
        if not math.isfinite(t):
            raise ValueError("t_seconds must be finite")
        millicores = float(usage_millicores(float(cores)))
        if not (math.isfinite(millicores) and millicores >= 0) or not t > cs.last_cpu_sample_start:
            return False
        weight = float(self._cpu_weight(None if request_cores is None else float(request_cores)))
        self.cpu.add_sample(millicores / 1000.0, weight, t)
        cs.last_cpu_sample_start = t
        self._note_cpu_times(t, t, 1)
        return True

    def add_cpu_samples(self, times, cores, request_cores=None, container=None) -> int:
        """Vectorised :meth:`add_cpu_sample` over samples in feed order; returns how many
        were taken.  The histogram ends up bit-identical to the one-by-one path."""
        cs = self.container(container)
        t = np.asarray(times, dtype=np.float64).ravel()
        c = np.asarray(cores, dtype=np.float64).ravel()
        if t.shape != c.shape:
            raise ValueError("times and cores must have the same length")
        if t.size == 0:
            return 0
        millicores = usage_millicores(c)  # NaN/inf propagate quietly (no FP "invalid")
        # Usual case: finite, strictly increasing times after the last sample and valid
        # usages, so every sample is taken (``lowest >= 0`` is False for a NaN).
        all_taken = t.item(0) > cs.last_cpu_sample_start and t.item(-1) < math.inf
        if all_taken:
            lowest, highest = lowest_item(millicores), highest_item(millicores)
            all_taken = (lowest >= 0 and highest < math.inf
                         and (t.size == 1 or all_true(np.greater(t[1:], t[:-1]))))
        if all_taken:
            taken = None
            tt, cores_taken = t, millicores / 1000.0
            # Bucketing is monotone, so the extreme usages give the extreme buckets.
            find = self.cpu.options.find_bucket
            bucket_range = find(lowest / 1000.0), find(highest / 1000.0)
        else:
            if not np.all(np.isfinite(t)):
                raise ValueError("times must be finite")
            with np.errstate(invalid="ignore"):
                valid = np.isfinite(millicores) & (millicores >= 0)
            # A valid sample is taken iff it is strictly after every earlier valid sample
            # (a rejected one never raises the running maximum, a taken one is the maximum).
            running = np.maximum.accumulate(np.where(valid, t, -np.inf))
            before = np.maximum(np.concatenate(([-np.inf], running[:-1])),
                                cs.last_cpu_sample_start)
            taken = np.flatnonzero(valid & (t > before))
            if taken.size == 0:
                return 0
            tt, cores_taken = t[taken], millicores[taken] / 1000.0
            bucket_range = None
        if request_cores is None:
            weights = self._cpu_weight(None)
        else:
            req = np.broadcast_to(np.asarray(request_cores, dtype=np.float64).ravel(), t.shape)
            weights = self._cpu_weight(req if taken is None else req[taken])
        # Inputs are checked here (finite times, valid usages, weights >= 0.1 or the
        # positive configured constant), so skip DecayingHistogram.add_samples' checks.
        first, last, n = tt.item(0), tt.item(-1), tt.size
        self.cpu._add_decayed(self.cpu.options._find_buckets(cores_taken),
                              weights, tt, t_max=last, bucket_range=bucket_range)
        cs.last_cpu_sample_start = last
        self._note_cpu_times(first, last, n)
        return n

    def _note_cpu_times(self, first: float, last: float, count: int) -> None:
        if self.first_sample_start is None or first < self.first_sample_start:
            self.first_sample_start = first
        if self.last_sample_start is None or last > self.last_sample_start:
            self.last_sample_start = last
        self.total_samples_count += count

    # ------------------------------------------------------------------ memory
    def add_memory_sample(self, t_seconds: float, bytes_: float, container=None) -> bool:
        """Add one memory usage sample (working set, bytes).  Returns False if dropped."""
        cs = self.container(container)
        t = float(t_seconds)
        if not math.isfinite(t):
            raise ValueError("t_seconds must be finite")
        usage = float(np.ceil(float(bytes_)))
        if not (math.isfinite(usage) and usage >= 0):
            return False
        return self._add_memory_sample(cs, t, int(usage), is_oom=False) is not None

    def _add_memory_sample(self, cs: "ContainerState", ts: float, usage: int,
                           is_oom: bool) -> bool | None:
        """``ContainerState.addMemorySample``: None if dropped, else whether a peak was added."""
        if not is_oom and ts < cs.last_memory_sample_start:
            return None
        cs.last_memory_sample_start = ts
        if cs.window_end is None:
            cs.window_end = ts
        add_new_peak = False
        if ts < cs.window_end:
            old_max = max(cs.memory_peak, cs.oom_peak)
            if old_max != 0 and usage > old_max:
                self.memory.subtract_sample(float(old_max), 1.0, cs.window_end)
                add_new_peak = True
        else:
            self._shift_window(cs, ts)
            add_new_peak = True
        if add_new_peak:
            self.memory.add_sample(float(usage), 1.0, cs.window_end)
            if is_oom:
                cs.oom_peak = usage
            else:
                cs.memory_peak = usage
        return add_new_peak

    def _shift_window(self, cs: "ContainerState", ts: float) -> None:
        interval = self.config.memory_aggregation_interval_s
        d = ts - cs.window_end
        cs.window_end = cs.window_end + ((d - d % interval) + interval)
        cs.memory_peak = 0
        cs.oom_peak = 0

    def add_memory_samples(self, times, bytes_, container=None) -> int:
        """Vectorised :meth:`add_memory_sample` over samples in feed order; returns how many
        were taken.  Same histogram, to the bit, as the one-by-one path: it loops in Python
        only over aggregation windows and over the samples that raise a window's peak."""
        cs = self.container(container)
        t = np.asarray(times, dtype=np.float64).ravel()
        v = np.asarray(bytes_, dtype=np.float64).ravel()
        if t.shape != v.shape:
            raise ValueError("times and bytes_ must have the same length")
        if t.size == 0:
            return 0
        taken = self._taken_memory_samples(cs, t, np.ceil(v))
        if taken is None:
            return 0
        ts, us, highest = taken
        self._add_taken_memory_samples(cs, ts, us, highest)
        return int(ts.size)

    @staticmethod
    def _taken_memory_samples(cs: "ContainerState", t: np.ndarray, usage: np.ndarray):
        """The samples ``cs`` takes, as (times, usages, highest usage if all were taken else
        None), or None when it takes none."""
        # Usual case: finite, non-decreasing times not before the last sample and valid
        # usages, so every sample is taken (``lowest_item(usage) >= 0`` is False for a NaN).
        t_first = t.item(0)
        all_taken = (-math.inf < t_first and t.item(-1) < math.inf
                     and t_first >= cs.last_memory_sample_start)
        if all_taken:
            highest = highest_item(usage)  # then also the highest taken usage
            all_taken = (lowest_item(usage) >= 0 and highest < math.inf
                         and (t.size == 1 or all_true(np.greater_equal(t[1:], t[:-1]))))
        if all_taken:
            return t, usage, highest
        if not np.all(np.isfinite(t)):
            raise ValueError("times must be finite")
        with np.errstate(invalid="ignore"):
            valid = np.isfinite(usage) & (usage >= 0)
        running = np.maximum.accumulate(np.where(valid, t, -np.inf))
        before = np.maximum(np.concatenate(([-np.inf], running[:-1])),
                            cs.last_memory_sample_start)
        taken = np.flatnonzero(valid & (t >= before))
        if taken.size == 0:
            return None
        return t[taken], usage[taken], None

    def _add_taken_memory_samples(self, cs: "ContainerState", ts: np.ndarray, us: np.ndarray,
                                  highest: float | None) -> None:
        """Add the taken samples (times ``ts`` non-decreasing, ``highest``: their largest usage
        if known) window by window: a new window's first sample is its peak, later ones only
        matter where they raise it."""
        ts_last = ts.item(-1)  # ts is non-decreasing: the last taken time is the latest
        cs.last_memory_sample_start = ts_last
        hist = self.memory
        i, n = 0, ts.size
        while i < n:
            t_i = ts.item(i)
            if cs.window_end is None:
                cs.window_end = t_i
            if t_i >= cs.window_end:  # opens the next window: always a new peak
                self._shift_window(cs, t_i)
                u_i = us.item(i)
                hist.add_sample(u_i, 1.0, cs.window_end)
                cs.memory_peak = int(u_i)
                i += 1
                continue
            if ts_last < cs.window_end:  # usual case: the rest stays in this window
                j = n
            else:
                j = i + int(np.searchsorted(ts[i:], cs.window_end, side="left"))
            old_max = max(cs.memory_peak, cs.oom_peak)
            # Only samples above the window's peak change anything (lower ones are no-ops
            # in Go), so a segment whose maximum does not exceed the peak is skipped.
            if old_max != 0 and (highest if highest is not None and i == 0 and j == n
                                 else highest_item(us[i:j])) > old_max:
                self._raise_memory_peak(cs, us[i:j], old_max)
            i = j

    def _raise_memory_peak(self, cs: "ContainerState", seg: np.ndarray, old_max: int) -> None:
        """Replay the samples ``seg`` of the current window on its peak ``old_max``: each one
        above the running peak replaces it in the memory histogram."""
        hist = self.memory
        prior = np.maximum(np.concatenate(([-np.inf], np.maximum.accumulate(seg)[:-1])),
                           float(old_max))
        raises = np.flatnonzero(seg > prior)
        if raises.size:
            # Each raise subtracts the old peak and adds the new one, both at the
            # window end (no reference shift: the window's first add made it).
            # Replayed on Python floats with Go's arithmetic and clamping; the
            # min/max bookkeeping is a function of the weights (see
            # _reset_min_and_max_bucket), so it is set once at the end.
            f = 1.0 * hist.decay_factor(cs.window_end)
            eps = hist.options.epsilon
            bw = hist.bucket_weight.tolist()
            total = hist.total_weight
            old_bucket = hist.options.find_bucket(float(old_max))
            for new_bucket in hist.options._find_buckets(seg[raises]).tolist():
                w = f
                if w > bw[old_bucket] - eps:
                    w = bw[old_bucket]
                total -= w
                bw[old_bucket] -= w
                bw[new_bucket] += f
                total += f
                old_bucket = new_bucket
            hist.bucket_weight[:] = bw
            hist.total_weight = total
            hist._reset_min_and_max_bucket()
            cs.memory_peak = int(seg[raises[-1]])

    def record_oom(self, t_seconds: float, memory_request_bytes: float,
                   container=None) -> int | None:
        """``RecordOOM``: add ``max(used + 100 MiB, used * 1.2)`` as a memory sample, with
        ``used = max(request, memory peak of the current interval)``.

        Returns the bytes recorded, or None when VPA drops the event (older than one
        interval before the current window end, or not above the interval's OOM peak it
        would replace).
        """
        cs = self.container(container)
        t = float(t_seconds)
        if not math.isfinite(t):
            raise ValueError("t_seconds must be finite")
        cfg = self.config
        if cs.window_end is not None and t < cs.window_end - cfg.memory_aggregation_interval_s:
            return None
        request = int(np.ceil(float(memory_request_bytes)))
        used = max(request, cs.memory_peak)
        needed = max(used + amount_from_float(cfg.oom_min_bump_up_bytes),
                     scale_resource(used, cfg.oom_bump_up_ratio))
        if not self._add_memory_sample(cs, t, needed, is_oom=True):
            return None  # accepted by VPA but not above the interval's peak: no effect
        return needed

    # ------------------------------------------------------------------ confidence, expiry
    def confidence(self, interval_s: float | None = None) -> float:
        """``getConfidence``: min(lifespan, samples/minutes) in units of ``interval_s``."""
        interval = self.config.confidence_interval_cpu_s if interval_s is None else interval_s
        if self.total_samples_count == 0:
            return 0.0
        lifespan = (self.last_sample_start - self.first_sample_start) / interval
        samples = self.total_samples_count / (interval / 60.0)
        return min(lifespan, samples)

    def is_expired(self, t_seconds: float) -> bool:
        """``isExpired``: no CPU sample for one memory aggregation window (8 days); VPA's
        garbage collector would then delete the aggregate.  ``recommend`` ignores this."""
        if self.last_sample_start is None:
            return False
        return t_seconds - self.last_sample_start >= self.config.memory_aggregation_window_s
