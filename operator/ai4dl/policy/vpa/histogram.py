"""``util/histogram*.go``: VPA's histograms with exponential buckets, plain and decaying.

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
"""

from __future__ import annotations

import bisect
import functools
import math
import operator

import numpy as np

from ai4dl.policy.vpa.numeric import go_pow, go_round_half_up, highest_item, lowest_item

#: ``maxDecayExponent`` in decaying_histogram.go.
MAX_DECAY_EXPONENT = 100
#: Bucket lookups for up to this many values use a binary search (cheaper per call than the
#: log-guess path, which wins on large arrays), and sums over up to ``_SMALL_FOLD`` weights
#: a Python fold: for the evaluator's many 40-sample batches numpy's per-call overhead
#: dominates the arithmetic.
_SMALL_BATCH = 512
_SMALL_FOLD = 64


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
        starts = [0.0] + [first * (go_pow(r, float(b)) - 1) / (r - 1)
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
            bucket_range = lowest_item(buckets), highest_item(buckets)
        lo, hi = bucket_range
        if not (bw.item(lo) >= eps and bw.item(hi) >= eps):
            nonempty = buckets[bw[buckets] >= eps]
            if nonempty.size == 0:
                return
            lo, hi = lowest_item(nonempty), highest_item(nonempty)
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
            t_max = highest_item(times)
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
        new_reference = go_round_half_up(new_reference / hl) * hl
        if self.reference_timestamp is None:
            factor = 0.0  # 2 ** (about -7e5) from Go's zero time
        else:
            exponent = int(go_round_half_up((self.reference_timestamp - new_reference) / hl))
            factor = math.ldexp(1.0, exponent)
        self._scale(factor)
        self.reference_timestamp = new_reference
