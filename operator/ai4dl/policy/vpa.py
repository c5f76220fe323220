"""A pure-Python/numpy re-implementation of the Kubernetes VPA *recommender* for trace replay.

It follows kubernetes/autoscaler ``vertical-pod-autoscaler/pkg/recommender`` (the
default recommender, no checkpoints, no Prometheus history) for the
aggregate of one workload's container:

* ``util/histogram_options.go``: exponential buckets.  Bucket ``n >= 1`` starts at
  ``first * (ratio**n - 1) / (ratio - 1)``; the last bucket start is >= ``max_value``.
  CPU: ``NewExponentialHistogramOptions(1000.0, 0.01, 1.05, 1e-4)`` (cores),
  memory: ``NewExponentialHistogramOptions(1e12, 1e7, 1.05, 1e-4)`` (bytes); both have
  176 buckets.  ``ratio**n`` is computed with a port of Go's ``math.Pow`` (current
  src/math/pow.go) so that the bucket boundaries match Go's to the bit.
* ``util/histogram.go``: ``Percentile`` returns the END of the bucket where the running
  weight first reaches ``p * totalWeight`` (the START of the last bucket, which has no end);
  a bucket counts as non-empty when its weight is >= epsilon (``0.001 * minSampleWeight``);
  ``minBucket``/``maxBucket`` bookkeeping and ``SubtractSample`` clamping are copied.
* ``util/decaying_histogram.go``: a sample's weight is multiplied by
  ``2 ** ((t - referenceTimestamp) / halfLife)``.  The reference timestamp starts at Go's
  zero time and is moved (rounded to a multiple of the half-life, halfway values up) to the
  sample time whenever a sample is more than ``100`` half-lives after it; the stored
  weights are then scaled by ``2 ** round((old - new) / halfLife)``.
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
* ``logic/recommender.go`` + ``logic/estimator.go``: target/lower/upper = P90/P50/P95 of the
  CPU histogram and of the memory-peak histogram, plus a 15 % margin, the upper bound times
  ``(1 + 1/conf) ** 1`` and the lower bound times ``(1 + 0.001/conf) ** -2`` with
  ``conf = min(lifespan / 24 h, samples / (24 h in minutes))``, then at least the pod
  minimums (25 millicores, 250 MiB) divided by the number of containers.  All amounts are
  integer ``ResourceAmount``s (millicores, bytes) with Go's truncating conversions and the
  1e14 cap (``model/types.go``).
* ``routines`` (``GetContainerNameToAggregateStateMap``): every aggregate of the VPA gets a
  recommendation, also one with no sample yet (the pod minimums): upstream dropped the
  ``TotalSamplesCount > 0`` filter in 2022, and ``AddOrUpdateContainer`` creates the aggregate
  when the container is first seen.  (Before, this replica returned no recommendation there,
  as VPA releases before 2022 did.)
* ``model/cluster.go``: ONE aggregate per workload (VPA's key: namespace, container name, pod
  labels) fed by one ``ContainerState`` per container of each pod: pass a ``container`` key
  (the pod) to the ``add``/``record_oom`` methods.  Each container drops only its own
  out-of-order samples and keeps its own memory peak per interval, so overlapping pods of
  one workload all count, as in VPA.

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

from __future__ import annotations

import bisect
import functools
import math
import operator
from dataclasses import dataclass

import numpy as np

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

#: ``model.MaxResourceAmount``: the cap of every recommended amount (millicores or bytes).
MAX_RESOURCE_AMOUNT = 10**14
# The same bound as a float (exact): comparing a float with a 47-bit int is much slower.
_MAX_RESOURCE_AMOUNT_F = float(MAX_RESOURCE_AMOUNT)
#: What Go's ``int64(NaN)`` gives on amd64 (``CVTTSD2SQ``); only ever compared with a minimum.
_GO_INT64_OF_NAN = -(2**63)
#: ``maxDecayExponent`` in decaying_histogram.go.
MAX_DECAY_EXPONENT = 100
#: ``minSampleWeight`` and ``epsilon = 0.001 * minSampleWeight`` (a Go constant: exactly 1e-4).
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 1e-4
_MIB = 1024 * 1024
#: Bucket lookups for up to this many values use a binary search (cheaper per call than the
#: log-guess path, which wins on large arrays), and sums over up to ``_SMALL_FOLD`` weights
#: a Python fold: for the evaluator's many 40-sample batches numpy's per-call overhead
#: dominates the arithmetic.
_SMALL_BATCH = 512
_SMALL_FOLD = 64


# --------------------------------------------------------------------------- small arrays
# On the evaluator's 40-element arrays a ufunc reduction (``a.min()``, ``mask.all()``) costs
# several times more than argmin/argmax plus ``item``, so the hot paths use these.


def _lowest(a: np.ndarray):
    """``a.min()`` of a non-empty array as a Python scalar; NaN if it holds one (argmin
    returns the first NaN)."""
    return a.item(a.argmin())


def _highest(a: np.ndarray):
    """``a.max()`` of a non-empty array as a Python scalar; NaN if it holds one."""
    return a.item(a.argmax())


def _all_true(mask: np.ndarray) -> bool:
    """``mask.all()`` for a non-empty boolean array: argmin finds the first False, if any."""
    return mask.item(mask.argmin())


# --------------------------------------------------------------------------- Go arithmetic


def _go_pow(x: float, y: float) -> float:
    """Go's ``math.Pow`` (src/math/pow.go) for integer-valued ``y``, bit for bit.

    Go multiplies out integer powers (an ``int8`` fast path, else repeated squaring) instead
    of calling a correctly rounded ``pow``, so ``ratio ** n`` may differ from C's in the
    last bit; bucket boundaries and confidence multipliers must use Go's value.
    """
    if y == 0 or x == 1:
        return 1.0
    if y == 1:  # Go: ``case y == 1: return x`` (the upper-bound multiplier's exponent)
        return x
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0:
        odd = y == int(y) and int(y) % 2 == 1 if math.isfinite(y) else False
        if y < 0:
            return math.copysign(math.inf, x) if odd else math.inf
        return x if odd else 0.0
    if math.isinf(y):
        if x == -1:
            return 1.0
        return 0.0 if (abs(x) < 1) == (y > 0) else math.inf
    if math.isinf(x):
        if x < 0:
            return _go_pow(1 / x, -y)
        return 0.0 if y < 0 else math.inf
    if y == 0.5:
        return math.sqrt(x)
    if y == -0.5:
        return 1 / math.sqrt(x)
    if y != int(y):
        raise ValueError("_go_pow is only ported for integer exponents")
    if -128 <= y <= 127:  # case float64(int8(y)) == y
        negative = y < 0
        n = int(-y if negative else y)
        r = 1.0
        while n > 1:
            tmp, c = x, 1
            while c <= n // 2:
                tmp *= tmp
                c *= 2
            n -= c
            r *= tmp
        for _ in range(n):
            r *= x
        return 1 / r if negative else r
    # General path with yf == 0: a1 * 2**ae by squaring the mantissa.
    a1, ae = 1.0, 0
    x1, xe = math.frexp(x)
    i = int(abs(y))
    while i != 0:
        if xe < -(1 << 12) or (1 << 12) < xe:
            ae += xe
            break
        if i & 1 == 1:
            a1 *= x1
            ae += xe
        x1 *= x1
        xe <<= 1
        if x1 < 0.5:
            x1 += x1
            xe -= 1
        i >>= 1
    if y < 0:
        a1 = 1 / a1
        ae = -ae
    try:
        return math.ldexp(a1, ae)
    except OverflowError:
        return math.inf


def _amount_from_float(amount: float) -> int:
    """``resourceAmountFromFloat``: truncate toward zero, clamp to [0, 1e14]."""
    if 0.0 <= amount <= _MAX_RESOURCE_AMOUNT_F:  # the usual case first (same result)
        return int(amount)
    if amount < 0:
        return 0
    if amount > _MAX_RESOURCE_AMOUNT_F:
        return MAX_RESOURCE_AMOUNT
    if math.isnan(amount):
        return _GO_INT64_OF_NAN
    return int(amount)


@functools.lru_cache(maxsize=1 << 14)
def _confidence_multiplier(multiplier: float, exponent: float, confidence: float) -> float:
    """``getConfidenceMultiplier``: ``(1 + multiplier / confidence) ** exponent``.

    Memoised: replays of equally sampled executions meet the same confidences window after
    window.  (The cache may treat a confidence of -0.0 as 0.0; both give the same base.)
    """
    base = math.inf if confidence == 0 else 1.0 + multiplier / confidence
    return _go_pow(base, exponent)


def _scale_resource(amount: int, factor: float) -> int:
    """``ScaleResource``."""
    return _amount_from_float(float(amount) * factor)


def _cpu_amount_from_cores(cores: float) -> int:
    """``CPUAmountFromCores``: millicores, truncated."""
    return _amount_from_float(cores * 1000.0)


def _go_round_half_up(x: float) -> float:
    """``round`` in decaying_histogram.go: ``math.Floor(x + 0.5)``."""
    return math.floor(x + 0.5)


def _usage_millicores(cores):
    """Usage in whole millicores as ``Quantity.MilliValue()`` gives it: nanocores, rounded up.

    Works on floats and on arrays (NaN stays NaN); both paths do the same IEEE operations.
    """
    return np.ceil(np.rint(np.multiply(cores, 1e9)) / 1e6)


# --------------------------------------------------------------------------- histograms


class ExponentialHistogramOptions:
    """``exponentialHistogramOptions``: buckets growing by ``ratio``; values in the same unit.

    ``find_bucket`` returns the bucket whose start is the largest one <= the value (values
    below ``first_bucket_size`` go to bucket 0, values past the last start to the last
    bucket).  Go evaluates ``int(log(v*(r-1)/first + 1) / log(r))`` instead, which agrees
    except possibly for a value within a rounding error of a boundary.
    """

    def __init__(self, max_value: float, first_bucket_size: float, ratio: float,
                 epsilon: float):
        if not (max_value > 0 and first_bucket_size > 0 and ratio > 1 and epsilon > 0):
            raise ValueError("max_value, first_bucket_size and epsilon must be > 0, ratio > 1")
        self.max_value = float(max_value)
        self.first_bucket_size = float(first_bucket_size)
        self.ratio = float(ratio)
        self.epsilon = float(epsilon)
        r, first = self.ratio, self.first_bucket_size
        self.num_buckets = int(math.ceil(
            math.log(self.max_value * (r - 1) / first + 1) / math.log(r))) + 1
        starts = [0.0] + [first * (_go_pow(r, float(b)) - 1) / (r - 1)
                          for b in range(1, self.num_buckets)]
        #: ``GetBucketStart(b)`` for every bucket (Go's arithmetic).
        self.bucket_starts = np.array(starts, dtype=np.float64)
        self.bucket_starts.setflags(write=False)
        # Lookup table: like the starts, but bucket 1 begins exactly at first_bucket_size
        # (Go: ``if value < firstBucketSize { return 0 }``).
        bounds = self.bucket_starts.copy()
        bounds[1] = first
        bounds.setflags(write=False)
        self._bounds = bounds
        #: ``get_bucket_end(b)`` for every bucket, as Python floats.
        self._bucket_ends_list = starts[1:] + starts[-1:]
        # Bucket b >= 1 starts at _bounds[b]: a value's bucket is the number of those starts
        # <= the value (0 below bucket 1, num_buckets - 1 past the last start), i.e.
        # searchsorted(side="right") on _bounds[1:], with no clamping needed.
        self._starts_from_1 = bounds[1:]
        self._starts_from_1_list = bounds[1:].tolist()  # for bisect (no numpy per value)

    def find_bucket(self, value: float) -> int:
        if math.isnan(value):
            raise ValueError("cannot bucket NaN")
        return bisect.bisect_right(self._starts_from_1_list, value)

    def find_buckets(self, values: np.ndarray) -> np.ndarray:
        """``find_bucket`` for an array of values (same results)."""
        values = np.asarray(values, dtype=np.float64)
        if np.isnan(values).any():
            raise ValueError("cannot bucket NaN")
        return self._find_buckets(values)

    def _find_buckets(self, values: np.ndarray) -> np.ndarray:
        """``find_buckets`` for a float64 array known to hold no NaN.

        Small arrays: one binary search (``find_bucket``'s lookup, vectorised).  Large
        ones: guess the bucket with the log formula, then move it by one where the guess is
        off (the guess is never off by more), which is several times faster than a binary
        search there.
        """
        if values.size <= _SMALL_BATCH:
            return self._starts_from_1.searchsorted(values, "right")
        last = self.num_buckets - 1
        r = self.ratio
        scaled = np.maximum(values, 0.0) * ((r - 1) / self.first_bucket_size)
        guess = np.floor(np.log(scaled + 1.0) / math.log(r))
        b = np.clip(guess, 0, last).astype(np.intp)
        bounds = self._bounds
        b -= (b > 0) & (bounds[b] > values)
        b += (b < last) & (bounds[np.minimum(b + 1, last)] <= values)
        return b

    def get_bucket_start(self, bucket: int) -> float:
        if not 0 <= bucket < self.num_buckets:
            raise IndexError(f"bucket {bucket} out of range [0..{self.num_buckets - 1}]")
        return float(self.bucket_starts[bucket])

    def get_bucket_end(self, bucket: int) -> float:
        """What ``Percentile`` returns when it stops in ``bucket``."""
        if bucket < self.num_buckets - 1:
            return self.get_bucket_start(bucket + 1)
        return self.get_bucket_start(bucket)


@functools.lru_cache(maxsize=8)
def cpu_histogram_options(growth: float = 0.05) -> ExponentialHistogramOptions:
    """``cpuHistogramOptions``: 0.01-core first bucket, up to 1000 cores (shared, read-only)."""
    return ExponentialHistogramOptions(1000.0, 0.01, 1.0 + growth, EPSILON)


@functools.lru_cache(maxsize=8)
def memory_histogram_options(growth: float = 0.05) -> ExponentialHistogramOptions:
    """``memoryHistogramOptions``: 10 MB (1e7 bytes) first bucket, up to 1 TB (1e12 bytes)."""
    return ExponentialHistogramOptions(1e12, 1e7, 1.0 + growth, EPSILON)


class ExponentialHistogram:
    """util/histogram.go ``histogram`` (no decay).

    ``bucket_weight`` holds the weight per bucket, ``total_weight`` their running sum (it
    also keeps weights of buckets that are below epsilon), ``min_bucket``/``max_bucket`` the
    first/last bucket that counts as non-empty (``num_buckets - 1``/``0`` when empty).
    """

    def __init__(self, options: ExponentialHistogramOptions):
        self.options = options
        n = options.num_buckets
        self.bucket_weight = np.zeros(n, dtype=np.float64)
        self.total_weight = 0.0
        self.min_bucket = n - 1
        self.max_bucket = 0

    # -- Go API ----------------------------------------------------------------------
    def add_sample(self, value: float, weight: float, time: float | None = None) -> None:
        if weight < 0.0:
            raise ValueError("sample weight must be non-negative")
        self._add_to_bucket(self.options.find_bucket(value), float(weight))

    def subtract_sample(self, value: float, weight: float, time: float | None = None) -> None:
        if weight < 0.0:
            raise ValueError("sample weight must be non-negative")
        self._subtract_from_bucket(self.options.find_bucket(value), float(weight))

    def percentile(self, percentile: float) -> float:
        """The end of the bucket where the running weight reaches ``percentile * total``.

        Returns 0.0 for an empty histogram.
        """
        return self.percentiles((percentile,))[0]

    def percentiles(self, percentiles) -> list[float]:
        """``[percentile(p) for p in percentiles]`` with one pass over the buckets."""
        lo, hi = self.min_bucket, self.max_bucket
        bw = self.bucket_weight
        if bw.item(lo) < self.options.epsilon:  # is_empty()
            return [0.0] * len(percentiles)
        ends = self.options._bucket_ends_list
        if hi <= lo:
            return [ends[hi]] * len(percentiles)
        # Go: partialSum += w[bucket] for bucket in [min, max), stop when >= threshold.
        # add.accumulate (cumsum) is a sequential fold: ``partial`` holds Go's running sums.
        partial = np.add.accumulate(bw[lo:hi])
        total = self.total_weight
        thresholds = [p * total for p in percentiles]
        n = hi - lo
        # Weights are never negative (adds are checked, subtractions clamp at the bucket's
        # weight, scale factors are >= 0), so with a finite sum the running sums are
        # non-decreasing and the first one >= threshold is a binary search away.
        if math.isfinite(partial.item(-1)) and all(map(math.isfinite, thresholds)):
            hits = partial.searchsorted(thresholds, "left").tolist()
        else:  # inf/NaN weights (only from inf sample weights): Go's loop verbatim
            sums = partial.tolist()
            hits = [next((k for k, s in enumerate(sums) if s >= threshold), n)
                    for threshold in thresholds]
        return [ends[lo + i] if i < n else ends[hi] for i in hits]

    def is_empty(self) -> bool:
        return self.bucket_weight.item(self.min_bucket) < self.options.epsilon

    # -- batch -----------------------------------------------------------------------
    def add_samples(self, values, weights, times=None) -> None:
        """``add_sample`` for each element in order (same floating-point result)."""
        values = np.asarray(values, dtype=np.float64)
        w = np.broadcast_to(np.asarray(weights, dtype=np.float64), values.shape)
        if np.any(w < 0) or np.any(np.isnan(w)):
            raise ValueError("sample weights must be non-negative")
        self._add_to_buckets(self.options.find_buckets(values), w)

    # -- internals -------------------------------------------------------------------
    def _add_to_bucket(self, bucket: int, weight: float) -> None:
        bw = self.bucket_weight
        bw[bucket] += weight
        self.total_weight += weight
        eps = self.options.epsilon
        if bucket < self.min_bucket and bw[bucket] >= eps:
            self.min_bucket = bucket
        if bucket > self.max_bucket and bw[bucket] >= eps:
            self.max_bucket = bucket

    def _add_to_buckets(self, buckets: np.ndarray, weights: np.ndarray,
                        bucket_range: tuple[int, int] | None = None) -> None:
        """Vectorised ``_add_to_bucket`` over a sequence (bit-identical).

        ``np.add.at`` adds in index order and ``cumsum`` is a sequential fold, so every
        bucket and the total see the same additions in the same order as Go's loop.  Within
        a batch weights only grow, so a bucket reaches epsilon at some add iff its final
        weight is >= epsilon: the min/max update can be done at the end.  ``bucket_range``:
        the lowest and highest of ``buckets``, if the caller knows them.
        """
        if buckets.size == 0:
            return
        bw = self.bucket_weight
        np.add.at(bw, buckets, weights)
        if buckets.size <= _SMALL_FOLD:  # the same sequential fold on Python floats
            self.total_weight = functools.reduce(operator.add, weights.ravel().tolist(),
                                                 self.total_weight)
        else:
            self.total_weight = float(
                np.cumsum(np.concatenate(([self.total_weight], np.ravel(weights))))[-1])
        # Only touched buckets can have become non-empty.  Usually the lowest and highest
        # touched bucket are themselves >= epsilon, and then they are the new candidates.
        eps = self.options.epsilon
        if bucket_range is None:
            bucket_range = _lowest(buckets), _highest(buckets)
        lo, hi = bucket_range
        if not (bw.item(lo) >= eps and bw.item(hi) >= eps):
            nonempty = buckets[bw[buckets] >= eps]
            if nonempty.size == 0:
                return
            lo, hi = _lowest(nonempty), _highest(nonempty)
        if lo < self.min_bucket:
            self.min_bucket = lo
        if hi > self.max_bucket:
            self.max_bucket = hi

    def _subtract_from_bucket(self, bucket: int, weight: float) -> None:
        bw = self.bucket_weight
        if weight > bw[bucket] - self.options.epsilon:
            weight = float(bw[bucket])
        self.total_weight -= weight
        bw[bucket] -= weight
        self._update_min_and_max_bucket()

    def _update_min_and_max_bucket(self) -> None:
        """Go's two ``for`` loops (move min up / max down past buckets below epsilon)."""
        eps = self.options.epsilon
        bw = self.bucket_weight
        if bw[self.min_bucket] < eps:
            ok = np.flatnonzero(bw[self.min_bucket:] >= eps)
            self.min_bucket = (self.min_bucket + int(ok[0]) if ok.size
                               else self.options.num_buckets - 1)
        if bw[self.max_bucket] < eps:
            ok = np.flatnonzero(bw[:self.max_bucket + 1] >= eps)
            self.max_bucket = int(ok[-1]) if ok.size else 0

    def _reset_min_and_max_bucket(self) -> None:
        """Set min/max from the weights alone.

        Every operation keeps ``min_bucket``/``max_bucket`` at the first/last bucket with
        weight >= epsilon (``num_buckets - 1``/``0`` when there is none): adds only extend
        the range to a bucket that reaches epsilon, subtractions and scaling shrink it to
        the buckets still at epsilon, and buckets outside the range are always below it.
        So after a sequence of adds and subtractions the Go bookkeeping equals this.
        """
        ok = np.flatnonzero(self.bucket_weight >= self.options.epsilon)
        if ok.size:
            self.min_bucket, self.max_bucket = int(ok[0]), int(ok[-1])
        else:
            self.min_bucket, self.max_bucket = self.options.num_buckets - 1, 0

    def _scale(self, factor: float) -> None:
        if factor < 0.0:
            raise ValueError("scale factor must be non-negative")
        lo, hi = self.min_bucket, self.max_bucket
        if hi >= lo:
            self.bucket_weight[lo:hi + 1] *= factor
        self.total_weight *= factor
        self._update_min_and_max_bucket()


class DecayingHistogram(ExponentialHistogram):
    """util/decaying_histogram.go: weights grow as ``2 ** ((t - reference) / half_life)``.

    ``reference_timestamp`` is ``None`` for Go's zero time (year 1): the first sample always
    moves it, scaling the (empty) histogram by 0.
    """

    def __init__(self, options: ExponentialHistogramOptions, half_life_s: float):
        super().__init__(options)
        if not half_life_s > 0:
            raise ValueError("half_life_s must be > 0")
        self.half_life_s = float(half_life_s)
        self.reference_timestamp: float | None = None

    def add_sample(self, value: float, weight: float, time: float) -> None:
        if weight < 0.0:
            raise ValueError("sample weight must be non-negative")
        self._add_to_bucket(self.options.find_bucket(value), weight * self.decay_factor(time))

    def subtract_sample(self, value: float, weight: float, time: float) -> None:
        if weight < 0.0:
            raise ValueError("sample weight must be non-negative")
        self._subtract_from_bucket(self.options.find_bucket(value),
                                   weight * self.decay_factor(time))

    def add_samples(self, values, weights, times) -> None:
        """``add_sample`` for each element in order (same floating-point result).

        The reference timestamp moves at the same samples as in the one-by-one path.
        """
        values = np.asarray(values, dtype=np.float64)
        times = np.asarray(times, dtype=np.float64)
        if times.shape != values.shape:
            raise ValueError("values and times must have the same shape")
        if not np.all(np.isfinite(times)):
            raise ValueError("times must be finite")
        w = np.broadcast_to(np.asarray(weights, dtype=np.float64), values.shape)
        if np.any(w < 0) or np.any(np.isnan(w)):
            raise ValueError("sample weights must be non-negative")
        self._add_decayed(self.options.find_buckets(values), w, times)

    def _add_decayed(self, buckets: np.ndarray, w, times: np.ndarray,
                     t_max: float | None = None,
                     bucket_range: tuple[int, int] | None = None) -> None:
        """``add_samples`` on checked input: bucket indices, weights (array or scalar),
        finite times (``t_max``: their maximum, ``bucket_range``: the lowest and highest
        bucket, if the caller knows them)."""
        start, n = 0, buckets.size
        if n == 0:
            return
        span = self.half_life_s * MAX_DECAY_EXPONENT
        ref = self.reference_timestamp
        if t_max is None:
            t_max = _highest(times)
        if ref is not None and t_max <= ref + span:
            # Usual case: no sample moves the reference, one segment.
            self._add_to_buckets(buckets, np.exp2((times - ref) / self.half_life_s) * w,
                                 bucket_range)
            return
        w = np.broadcast_to(w, times.shape)
        while start < n:
            if self.reference_timestamp is None:
                self.shift_reference_timestamp(float(times[start]))
            over = np.flatnonzero(times[start:] > self.reference_timestamp + span)
            if over.size and over[0] == 0:
                self.shift_reference_timestamp(float(times[start]))
                continue
            stop = start + int(over[0]) if over.size else n
            factors = np.exp2((times[start:stop] - self.reference_timestamp) / self.half_life_s)
            self._add_to_buckets(buckets[start:stop], w[start:stop] * factors)
            start = stop

    def decay_factor(self, timestamp: float) -> float:
        """``decayFactor``: may move the reference timestamp first."""
        ref = self.reference_timestamp
        if ref is None or timestamp > ref + self.half_life_s * MAX_DECAY_EXPONENT:
            self.shift_reference_timestamp(timestamp)
        return float(np.exp2((timestamp - self.reference_timestamp) / self.half_life_s))

    def shift_reference_timestamp(self, new_reference: float) -> None:
        """``shiftReferenceTimestamp``: round to a half-life multiple, rescale the weights."""
        hl = self.half_life_s
        new_reference = _go_round_half_up(new_reference / hl) * hl
        if self.reference_timestamp is None:
            factor = 0.0  # 2 ** (about -7e5) from Go's zero time
        else:
            exponent = int(_go_round_half_up((self.reference_timestamp - new_reference) / hl))
            factor = math.ldexp(1.0, exponent)
        self._scale(factor)
        self.reference_timestamp = new_reference


# --------------------------------------------------------------------------- recommender


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


class VpaRecommender:
    """VPA's recommender for one container aggregate (``AggregateContainerState``) and the
    ``ContainerState`` of each container (pod) feeding it, keyed by the ``container`` argument
    of the ``add``/``record_oom`` methods (default: one container, key None).

    Times are seconds (float, any epoch; feed each container's samples in the order VPA would
    see them).
    Samples VPA would discard (out of order, negative usage) are ignored, and so are NaN or
    infinite usages (which VPA cannot receive); the ``add``
    methods say whether/how many samples were taken.
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
        req = _usage_millicores(request_cores) / 1000.0
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
        millicores = float(_usage_millicores(float(cores)))
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
        millicores = _usage_millicores(c)  # NaN/inf propagate quietly (no FP "invalid")
        # Usual case: finite, strictly increasing times after the last sample and valid
        # usages, so every sample is taken (``lowest >= 0`` is False for a NaN).
        all_taken = t.item(0) > cs.last_cpu_sample_start and t.item(-1) < math.inf
        if all_taken:
            lowest, highest = _lowest(millicores), _highest(millicores)
            all_taken = (lowest >= 0 and highest < math.inf
                         and (t.size == 1 or _all_true(np.greater(t[1:], t[:-1]))))
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
        usage = np.ceil(v)
        # Usual case: finite, non-decreasing times not before the last sample and valid
        # usages, so every sample is taken (``_lowest(usage) >= 0`` is False for a NaN).
        t_first = t.item(0)
        all_taken = (-math.inf < t_first and t.item(-1) < math.inf
                     and t_first >= cs.last_memory_sample_start)
        if all_taken:
            highest = _highest(usage)  # then also the highest taken usage
            all_taken = (_lowest(usage) >= 0 and highest < math.inf
                         and (t.size == 1 or _all_true(np.greater_equal(t[1:], t[:-1]))))
        if all_taken:
            ts, us = t, usage
        else:
            if not np.all(np.isfinite(t)):
                raise ValueError("times must be finite")
            with np.errstate(invalid="ignore"):
                valid = np.isfinite(usage) & (usage >= 0)
            running = np.maximum.accumulate(np.where(valid, t, -np.inf))
            before = np.maximum(np.concatenate(([-np.inf], running[:-1])),
                                cs.last_memory_sample_start)
            taken = np.flatnonzero(valid & (t >= before))
            if taken.size == 0:
                return 0
            ts, us = t[taken], usage[taken]
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
            if old_max != 0 and (highest if all_taken and i == 0 and j == n
                                 else _highest(us[i:j])) > old_max:
                seg = us[i:j]
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
            i = j
        return int(ts.size)

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
        needed = max(used + _amount_from_float(cfg.oom_min_bump_up_bytes),
                     _scale_resource(used, cfg.oom_bump_up_ratio))
        if not self._add_memory_sample(cs, t, needed, is_oom=True):
            return None  # accepted by VPA but not above the interval's peak: no effect
        return needed

    # ------------------------------------------------------------------ recommendation
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

    def _estimator_constants(self) -> tuple[int, int, tuple, tuple]:
        """The per-container minimum CPU (millicores) and memory (bytes) and the (target,
        lower, upper) CPU and memory percentiles.  Fixed per config, so computed once (again
        only if ``self.config`` is replaced)."""
        cfg = self.config
        cached = self.__dict__.get("_estimator_constants_cache")
        if cached is None or cached[0] is not cfg:
            fraction = 1.0 / cfg.n_containers
            min_cpu = _scale_resource(
                _cpu_amount_from_cores(cfg.pod_min_cpu_millicores * 0.001), fraction)
            min_mem = _scale_resource(
                _amount_from_float(cfg.pod_min_memory_mb * 1024 * 1024), fraction)
            cpu_ps = (cfg.target_cpu_percentile, cfg.lower_bound_cpu_percentile,
                      cfg.upper_bound_cpu_percentile)
            mem_ps = (cfg.target_memory_percentile, cfg.lower_bound_memory_percentile,
                      cfg.upper_bound_memory_percentile)
            cached = (cfg, (min_cpu, min_mem, cpu_ps, mem_ps))
            self._estimator_constants_cache = cached
        return cached[1]

    @staticmethod
    def _confidence_multiplier(multiplier: float, exponent: float, confidence: float) -> float:
        return _confidence_multiplier(multiplier, exponent, confidence)

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
        min_cpu, min_mem, cpu_percentiles, mem_percentiles = self._estimator_constants()
        conf_cpu = self.confidence(cfg.confidence_interval_cpu_s)
        conf_mem = self.confidence(cfg.confidence_interval_memory_s)
        margin = cfg.safety_margin_fraction
        # Target, lower and upper bound percentiles, each histogram's in one pass.
        cpu_ps = self.cpu.percentiles(cpu_percentiles)
        mem_ps = self.memory.percentiles(mem_percentiles)
        # Lower bound times (1 + 0.001/conf)**-2, upper bound times (1 + 1/conf)**1.
        multiplier = _confidence_multiplier
        cpu_mults = (None, multiplier(0.001, -2.0, conf_cpu), multiplier(1.0, 1.0, conf_cpu))
        mem_mults = (None, multiplier(0.001, -2.0, conf_mem), multiplier(1.0, 1.0, conf_mem))

        # ``amount`` is resourceAmountFromFloat; ``amount(float(x) * f)`` is ScaleResource
        # and ``amount(cores * 1000.0)`` CPUAmountFromCores, inlined (this runs per window).
        amount = _amount_from_float
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

        return VpaRecommendation(
            target=estimates[0],
            lower_bound=estimates[1],
            upper_bound=estimates[2],
            confidence_cpu=conf_cpu,
            confidence_memory=conf_mem,
        )
