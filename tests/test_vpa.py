"""Known-answer tests for the VPA recommender re-implementation (ai4dl.policy.vpa).

Expected values are computed here from the documented formulas (bucket starts
``first * (1.05**n - 1) / 0.05``, decay ``2 ** (dt / half_life)``, margin, confidence
multipliers, Go's truncating integer conversions), not by calling the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai4dl.policy.vpa import (
    MAX_RESOURCE_AMOUNT,
    DecayingHistogram,
    ExponentialHistogram,
    VpaConfig,
    VpaRecommender,
    cpu_histogram_options,
    memory_histogram_options,
)
from ai4dl.policy.vpa.numeric import go_pow

DAY = 86400.0
MIB = 1024 * 1024
GIB = 1024 * MIB
CPU_FIRST, MEM_FIRST, RATIO = 0.01, 1e7, 1.05


# ----------------------------------------------------------------- independent formulas

def bucket_of(value: float, first: float) -> int:
    """Go's FindBucket formula (util/histogram_options.go)."""
    if value < first:
        return 0
    return min(int(math.log(value * (RATIO - 1) / first + 1) / math.log(RATIO)), 175)


def bucket_start(b: int, first: float) -> float:
    return 0.0 if b == 0 else first * (RATIO ** b - 1) / (RATIO - 1)


def bucket_end(value: float, first: float) -> float:
    """What Percentile returns for a bucket holding ``value``: the start of the next one."""
    return bucket_start(bucket_of(value, first) + 1, first)


def millicores_with_margin(cores_bucket_end: float, margin: float = 0.15) -> int:
    base = int(cores_bucket_end * 1000.0)
    return base + int(base * margin)


def bytes_with_margin(bytes_bucket_end: float, margin: float = 0.15) -> int:
    base = int(bytes_bucket_end)
    return base + int(base * margin)


def naive_percentile(values, weights, p, first):
    """Percentile of a weighted sample set: end of the first bucket whose cumulative weight
    reaches p * total (buckets in increasing order)."""
    per_bucket: dict[int, float] = {}
    for v, w in zip(values, weights):
        b = bucket_of(v, first)
        per_bucket[b] = per_bucket.get(b, 0.0) + w
    total = sum(per_bucket.values())
    acc = 0.0
    for b in sorted(per_bucket):
        acc += per_bucket[b]
        if acc >= p * total:
            return bucket_start(b + 1, first)
    return bucket_start(max(per_bucket) + 1, first)


# ----------------------------------------------------------------- histogram layout

def test_bucket_layout_matches_go_options():
    for opts, first, max_value in ((cpu_histogram_options(), CPU_FIRST, 1000.0),
                                   (memory_histogram_options(), MEM_FIRST, 1e12)):
        # ceil(log_1.05(max * 0.05 / first + 1)) + 1 = ceil(174.57) + 1
        assert opts.num_buckets == 176
        assert opts.get_bucket_start(0) == 0.0
        assert opts.get_bucket_start(1) == pytest.approx(first, rel=1e-12)
        for b in (2, 10, 100, 175):
            assert opts.get_bucket_start(b) == pytest.approx(bucket_start(b, first), rel=1e-12)
        # "The last bucket start is larger or equal to maxValue", the one before is not.
        assert opts.get_bucket_start(175) >= max_value > opts.get_bucket_start(174)
    assert cpu_histogram_options().get_bucket_start(2) == pytest.approx(0.0205, rel=1e-12)
    assert memory_histogram_options().get_bucket_start(3) == pytest.approx(31_525_000.0, rel=1e-12)


def test_vectorised_bucket_lookup_equals_scalar_lookup():
    rng = np.random.default_rng(0)
    for opts in (cpu_histogram_options(), memory_histogram_options()):
        starts = opts.bucket_starts
        values = np.concatenate([
            [-5.0, 0.0, np.inf], rng.uniform(0, 2 * opts.max_value, 2000),
            np.exp(rng.uniform(-20, math.log(2 * opts.max_value), 2000)),
            starts, np.nextafter(starts, np.inf), np.nextafter(starts, -np.inf)])
        assert opts.find_buckets(values).tolist() == [opts.find_bucket(v) for v in values]
        # Each value lies in [start(b), start(b + 1)).
        b = opts.find_buckets(values[3:4003])
        inner = b < opts.num_buckets - 1
        assert np.all(starts[b] <= values[3:4003])
        assert np.all(values[3:4003][inner] < starts[b[inner] + 1])


@pytest.mark.parametrize(("value", "first", "options", "expected_end"), [
    (0.5, CPU_FIRST, cpu_histogram_options, 0.5111345375888715),      # bucket 25
    (0.123, CPU_FIRST, cpu_histogram_options, 0.1257789253554884),    # bucket 9
    (3.7, CPU_FIRST, cpu_histogram_options, 3.7226290377658287),      # bucket 60
    (1e9, MEM_FIRST, memory_histogram_options, 1016281388.5540926),   # bucket 36
    (123456789.0, MEM_FIRST, memory_histogram_options, 125778925.35548839),  # bucket 9
])
def test_single_sample_percentile_is_end_of_its_bucket(value, first, options, expected_end):
    assert bucket_end(value, first) == pytest.approx(expected_end, rel=1e-12)
    h = DecayingHistogram(options(), 24 * 3600.0)
    h.add_sample(value, 0.1, 1000.0)
    assert not h.is_empty()
    for p in (0.0, 0.5, 0.9, 0.95, 1.0):
        assert h.percentile(p) == pytest.approx(expected_end, rel=1e-12)
    # Rounded UP, by less than one bucket (5 %).
    assert value < h.percentile(0.9) <= value * 1.05


def test_percentile_below_first_bucket_and_beyond_last_bucket():
    h = ExponentialHistogram(cpu_histogram_options())
    assert h.is_empty() and h.percentile(0.9) == 0.0
    h.add_sample(0.004, 1.0)  # bucket 0 -> its end is the first bucket size
    assert h.percentile(0.5) == pytest.approx(CPU_FIRST, rel=1e-12)
    h2 = ExponentialHistogram(cpu_histogram_options())
    h2.add_sample(5000.0, 1.0)  # past 1000 cores: last bucket, which has no end -> its start
    assert h2.percentile(0.5) == pytest.approx(bucket_start(175, CPU_FIRST), rel=1e-12)
    assert h2.percentile(0.5) == pytest.approx(1021.1094089048659, rel=1e-12)


def test_bucket_under_epsilon_counts_as_empty_but_stays_in_total():
    h = ExponentialHistogram(cpu_histogram_options())
    h.add_sample(1.0, 5e-5)        # below epsilon (1e-4): min/max do not move
    assert h.is_empty() and h.percentile(0.5) == 0.0
    h.add_sample(3.0, 1.0)
    # Threshold 0.5 * 1.00005 is reached in the 3.0 bucket; the 1.0 bucket is ignored.
    assert h.percentile(0.0) == pytest.approx(bucket_end(3.0, CPU_FIRST), rel=1e-12)
    assert h.total_weight == pytest.approx(1.00005, rel=1e-15)


# ----------------------------------------------------------------- decay

def test_half_life_doubles_the_weight_of_a_sample_one_half_life_later():
    h = DecayingHistogram(cpu_histogram_options(), DAY)
    h.add_sample(1.0, 0.1, 0.0)
    h.add_sample(2.0, 0.1, DAY)
    w1 = h.bucket_weight[bucket_of(1.0, CPU_FIRST)]
    w2 = h.bucket_weight[bucket_of(2.0, CPU_FIRST)]
    assert w2 / w1 == 2.0
    # Weights 1 : 2, so the 1.0 bucket holds exactly 1/3 of the total.
    assert h.percentile(0.32) == pytest.approx(bucket_end(1.0, CPU_FIRST), rel=1e-12)
    assert h.percentile(0.34) == pytest.approx(bucket_end(2.0, CPU_FIRST), rel=1e-12)
    assert h.percentile(0.49) == pytest.approx(bucket_end(2.0, CPU_FIRST), rel=1e-12)
    # Without decay (equal weights) P49 would be the 1.0 bucket.
    flat = DecayingHistogram(cpu_histogram_options(), 1e15)
    flat.add_sample(1.0, 0.1, 0.0)
    flat.add_sample(2.0, 0.1, DAY)
    assert flat.percentile(0.49) == pytest.approx(bucket_end(1.0, CPU_FIRST), rel=1e-12)


def test_reference_timestamp_shift_keeps_percentiles():
    rng = np.random.default_rng(7)
    values = rng.uniform(0.05, 20.0, 60)
    times = np.sort(rng.uniform(0, 10 * 3600.0, 60))
    a = DecayingHistogram(cpu_histogram_options(), 3600.0)
    b = DecayingHistogram(cpu_histogram_options(), 3600.0)
    for v, t in zip(values, times):
        a.add_sample(v, 0.1, t)
        b.add_sample(v, 0.1, t)
    ref_before = b.reference_timestamp
    b.shift_reference_timestamp(ref_before + 5 * 3600.0)  # weights scaled by 2**-5
    assert b.reference_timestamp == ref_before + 5 * 3600.0
    assert b.total_weight == a.total_weight / 32
    ps = np.linspace(0, 1, 41)
    assert [a.percentile(p) for p in ps] == [b.percentile(p) for p in ps]
    for v, t in zip(rng.uniform(0.05, 20.0, 20), np.linspace(11 * 3600.0, 12 * 3600.0, 20)):
        a.add_sample(v, 0.1, t)
        b.add_sample(v, 0.1, t)
    assert [a.percentile(p) for p in ps] == [b.percentile(p) for p in ps]


def test_shift_scales_only_the_nonempty_range_as_in_go():
    hl = 60.0
    h = DecayingHistogram(cpu_histogram_options(), hl)
    h.add_sample(1.0, 0.1, 0.0)
    h.add_sample(50.0, 5e-5, 0.0)      # below epsilon: outside [min_bucket, max_bucket]
    h.add_sample(2.0, 0.1, 101 * hl)   # shift by 101 half-lives: scale(2**-101)
    assert h.bucket_weight[bucket_of(1.0, CPU_FIRST)] == 0.1 * 2.0 ** -101
    assert h.bucket_weight[bucket_of(50.0, CPU_FIRST)] == 5e-5      # not scaled
    assert h.percentile(1.0) == pytest.approx(bucket_end(2.0, CPU_FIRST), rel=1e-12)


def test_automatic_reference_shift_after_100_half_lives():
    hl = 60.0
    h = DecayingHistogram(cpu_histogram_options(), hl)
    h.add_sample(50.0, 0.1, 0.0)
    assert h.reference_timestamp == 0.0
    rng = np.random.default_rng(3)
    values = rng.uniform(0.05, 5.0, 25)
    times = 101 * hl + 10.0 * np.arange(25) + 25.0   # all past ref + 100 half-lives
    for v, t in zip(values, times):
        h.add_sample(v, 0.1, t)
    # Moved to the first late sample (6085 s), rounded to a half-life multiple (6060 s).
    assert h.reference_timestamp == 101 * hl
    # The old sample was scaled by 2**-101: below epsilon, it no longer counts.
    assert h.percentile(1.0) < 50.0
    weights = [0.1 * 2 ** ((t - 101 * hl) / hl) for t in times]
    for p in (0.1, 0.3, 0.5, 0.77, 0.9, 0.95):
        assert h.percentile(p) == pytest.approx(
            naive_percentile(values, weights, p, CPU_FIRST), rel=1e-12)


# ----------------------------------------------------------------- recommender basics

def test_an_empty_aggregate_recommends_the_minimums():
    # Upstream since 2022: GetContainerNameToAggregateStateMap no longer filters aggregates
    # with TotalSamplesCount == 0, so a VPA recommends the pod minimums before its first
    # sample. (This replica returned no recommendation there before, as older VPA did.)
    r = VpaRecommender()
    rec = r.recommend(0.0)
    minimums = {"cpu": 0.025, "memory": 250.0 * MIB}
    assert rec.target == rec.lower_bound == rec.upper_bound == minimums
    assert rec.confidence_cpu == rec.confidence_memory == 0.0
    # memory samples alone (no CPU sample counted) give a memory target
    r.add_memory_sample(0.0, 1e9)
    assert r.total_samples_count == 0
    assert r.recommend(10.0).target == {"cpu": 0.025,
                                        "memory": bytes_with_margin(bucket_end(1e9, MEM_FIRST))}


def test_one_container_state_per_pod_in_one_aggregate():
    # model/cluster.go: pods of one workload share the aggregate but each has its own
    # ContainerState, so an overlapping second pod's samples are not "out of order".
    r = VpaRecommender()
    assert r.add_cpu_samples([0.0, 60.0, 120.0], [1.0, 1.0, 1.0], container="a") == 3
    assert r.add_cpu_samples([30.0, 90.0], [2.0, 2.0], container="b") == 2
    assert not r.add_cpu_sample(100.0, 2.0, container="a")      # a's own order still holds
    assert r.total_samples_count == 5
    assert (r.first_sample_start, r.last_sample_start) == (0.0, 120.0)
    # each container adds its own memory peak per interval to the shared histogram
    assert r.add_memory_sample(0.0, 1e9, container="a")
    assert r.add_memory_sample(30.0, 3e9, container="b")
    # two peaks, at each container's own interval end (b's 30 s later: weight 2**(30/day))
    assert r.memory.total_weight == pytest.approx(1.0 + 2.0 ** (30.0 / DAY), rel=1e-12)
    assert r.container("a").memory_peak == int(1e9)
    assert r.container("b").memory_peak == int(3e9)
    assert r.memory.percentile(0.4) == pytest.approx(bucket_end(1e9, MEM_FIRST), rel=1e-12)
    assert r.memory.percentile(0.9) == pytest.approx(bucket_end(3e9, MEM_FIRST), rel=1e-12)
    # a's higher sample replaces a's peak only
    assert r.add_memory_sample(60.0, 2e9, container="a")
    assert r.memory.total_weight == pytest.approx(1.0 + 2.0 ** (30.0 / DAY), rel=1e-12)
    assert r.memory.bucket_weight[bucket_of(1e9, MEM_FIRST)] == 0.0
    # the default container (no key) is a third one, and the single-container names read it
    r.add_cpu_sample(10.0, 1.0)
    assert r.last_cpu_sample_start == 10.0 and set(r.containers) == {"a", "b", None}


def test_cpu_samples_must_be_strictly_after_the_previous_one():
    r = VpaRecommender()
    assert r.add_cpu_sample(100.0, 1.0)
    assert not r.add_cpu_sample(100.0, 2.0)      # duplicate start
    assert not r.add_cpu_sample(50.0, 2.0)       # out of order
    assert not r.add_cpu_sample(200.0, -0.1)     # invalid usage
    assert r.add_cpu_sample(200.0, 0.0)
    assert r.total_samples_count == 2
    assert (r.first_sample_start, r.last_sample_start) == (100.0, 200.0)


def test_first_bucket_boundary_is_exact():
    # Go: value < firstBucketSize -> bucket 0, and log(1.05)/log(1.05) = 1 at the boundary.
    r = VpaRecommender()
    r.add_cpu_sample(0.0, 0.010)                  # exactly 10 m: bucket 1, end 20.5 m
    r.add_memory_sample(0.0, 1e7)                 # exactly 10 MB: bucket 1, end 20.5 MB
    assert r.cpu.percentile(0.5) == pytest.approx(0.0205, rel=1e-12)
    assert r.memory.percentile(0.5) == pytest.approx(20.5e6, rel=1e-12)
    r.add_cpu_sample(1.0, 0.009)                  # 9 m: bucket 0, end 10 m
    assert r.cpu.percentile(0.1) == pytest.approx(0.01, rel=1e-12)


def test_cpu_usage_is_taken_in_whole_millicores_rounded_up():
    r = VpaRecommender()
    r.add_cpu_sample(0.0, 0.0100001)   # 10.0001 m -> 11 m, bucket 1 (0.01 .. 0.0205)
    assert r.cpu.percentile(0.5) == pytest.approx(bucket_start(2, CPU_FIRST), rel=1e-12)
    r2 = VpaRecommender()
    r2.add_cpu_sample(0.0, 0.57)       # 0.57 * 1000 = 570.0000000000001 in floats: still 570 m
    assert r2.cpu.bucket_weight.nonzero()[0].tolist() == [bucket_of(0.570, CPU_FIRST)]


@pytest.mark.parametrize(("n_containers", "cpu", "memory"), [
    (1, 0.025, 250.0 * MIB),
    (2, 0.012, 125.0 * MIB),   # 25 m / 2 = 12.5 m, truncated to 12 m
])
def test_pod_minimums_split_across_containers(n_containers, cpu, memory):
    r = VpaRecommender(VpaConfig(n_containers=n_containers))
    t = np.arange(0.0, 2 * DAY + 1, 60.0)     # 2 days at 1/min: upper bound x1.5
    r.add_cpu_samples(t, np.full(t.size, 0.001))
    r.add_memory_samples(t, np.full(t.size, 1e6))
    rec = r.recommend(t[-1])
    # 1 m -> bucket 0, whose end is 10 m; + 15 % = 11 m < minimum.  1 MB -> 11.5 MB < minimum.
    assert rec.target == rec.lower_bound == {"cpu": cpu, "memory": memory}
    # Upper: 11 m * 1.5 = 16 m, above the 12 m of a two-container pod, below 25 m.
    assert rec.upper_bound == {"cpu": max(int(11 * 1.5) / 1000, cpu), "memory": memory}


def test_margin_and_target_is_p90():
    rng = np.random.default_rng(11)
    cores = np.array([1.0] * 80 + [2.0] * 12 + [3.0] * 8)
    rng.shuffle(cores)
    t = np.arange(100, dtype=float)            # weights differ by < 0.1 %: no ties
    mem = rng.uniform(1e9, 3e9, 100)
    for margin in (0.15, 0.0):
        r = VpaRecommender(VpaConfig(safety_margin_fraction=margin))
        r.add_cpu_samples(t, cores)
        r.add_memory_samples(t, mem)
        target = r.recommend(t[-1]).target
        # Cumulative weight: 80 % in the 1.0 bucket, 92 % up to the 2.0 bucket -> P90 = 2.0's.
        assert target["cpu"] * 1000 == millicores_with_margin(bucket_end(2.0, CPU_FIRST), margin)
        # One memory peak (all samples in one 24 h interval): the maximum.
        assert target["memory"] == bytes_with_margin(bucket_end(mem.max(), MEM_FIRST), margin)
    # 2093 m + 313 m
    assert millicores_with_margin(bucket_end(2.0, CPU_FIRST)) == 2406


# ----------------------------------------------------------------- confidence

def test_upper_bound_is_huge_and_lower_bound_minimal_without_history():
    r = VpaRecommender()
    r.add_cpu_sample(0.0, 2.0)
    r.add_memory_sample(0.0, 4e9)
    rec = r.recommend(0.0)
    assert rec.confidence_cpu == 0.0
    # (1 + 1/0) = +Inf -> capped at MaxResourceAmount (1e14 millicores / bytes).
    assert rec.upper_bound == {"cpu": MAX_RESOURCE_AMOUNT / 1000, "memory": float(MAX_RESOURCE_AMOUNT)}
    # (1 + 0.001/0)**-2 = 0 -> the minimums.
    assert rec.lower_bound == {"cpu": 0.025, "memory": 250.0 * MIB}
    assert rec.target["cpu"] * 1000 == millicores_with_margin(bucket_end(2.0, CPU_FIRST))


def test_upper_bound_doubles_after_24h_and_triples_after_12h():
    for hours, factor in ((24, 2.0), (12, 3.0)):
        t = np.arange(0.0, hours * 3600.0 + 1, 60.0)     # one sample per minute
        r = VpaRecommender()
        r.add_cpu_samples(t, np.full(t.size, 0.5))
        r.add_memory_samples(t, np.full(t.size, float(GIB)))
        rec = r.recommend(t[-1])
        assert rec.confidence_cpu == pytest.approx(hours / 24)
        cpu_u = millicores_with_margin(bucket_end(0.5, CPU_FIRST))       # 511 + 76 = 587
        mem_u = bytes_with_margin(bucket_end(GIB, MEM_FIRST))
        assert rec.upper_bound["cpu"] * 1000 == int(cpu_u * (1 + 1 / (hours / 24)))
        assert rec.upper_bound["memory"] == int(mem_u * (1 + 1 / (hours / 24)))
        assert rec.upper_bound["cpu"] / rec.target["cpu"] == pytest.approx(factor, abs=0.01)
    assert cpu_u == 587


def test_lower_bound_is_about_095_after_60_minutes():
    t = np.arange(0.0, 3600.0 + 1, 60.0)   # 61 samples over 60 min: conf = 1/24 day
    r = VpaRecommender()
    r.add_cpu_samples(t, np.full(t.size, 0.5))
    rec = r.recommend(t[-1])
    conf = 1 / 24
    assert rec.confidence_cpu == pytest.approx(conf)
    multiplier = (1 + 0.001 / conf) ** -2
    assert multiplier == pytest.approx(0.9537, abs=1e-4)
    base = millicores_with_margin(bucket_end(0.5, CPU_FIRST))
    assert rec.lower_bound["cpu"] * 1000 == int(base * multiplier)        # 559 m
    assert rec.lower_bound["cpu"] == 0.559
    assert rec.lower_bound["cpu"] / rec.target["cpu"] == pytest.approx(0.95, abs=0.005)


def test_confidence_is_limited_by_the_sample_count():
    r = VpaRecommender()
    r.add_cpu_samples([0.0, 2 * DAY], [1.0, 1.0])   # 2 days apart but only 2 samples
    assert r.confidence() == pytest.approx(2 / 1440)


# ----------------------------------------------------------------- memory peaks and OOM

def test_memory_keeps_one_peak_per_interval():
    r = VpaRecommender()
    h = r.memory
    assert r.add_memory_sample(0.0, 1e9)
    assert r.window_end == DAY
    # Lower samples in the same 24 h interval change nothing.
    assert r.add_memory_sample(60.0, 5e8) and r.add_memory_sample(120.0, 7e8)
    assert h.total_weight == 1.0      # one peak, stored at the window end = reference time
    assert h.percentile(0.0) == pytest.approx(bucket_end(1e9, MEM_FIRST), rel=1e-12)
    # A higher sample replaces the peak.
    assert r.add_memory_sample(180.0, 1.5e9)
    assert h.total_weight == 1.0
    assert h.bucket_weight[bucket_of(1e9, MEM_FIRST)] == 0.0
    assert h.percentile(0.0) == pytest.approx(bucket_end(1.5e9, MEM_FIRST), rel=1e-12)
    # Next interval: a new peak, stored at the next window end, so it weighs 2.
    assert r.add_memory_sample(DAY + 10, 4e8)
    assert r.window_end == 2 * DAY
    assert h.total_weight == 3.0
    assert h.percentile(0.6) == pytest.approx(bucket_end(4e8, MEM_FIRST), rel=1e-12)
    assert h.percentile(0.7) == pytest.approx(bucket_end(1.5e9, MEM_FIRST), rel=1e-12)
    # Out-of-order samples are dropped.
    assert not r.add_memory_sample(100.0, 9e9)
    assert h.total_weight == 3.0


def test_replacing_a_peak_clears_sub_epsilon_leftovers_in_its_bucket():
    # SubtractSample: if weight > bucketWeight - epsilon, the whole bucket is removed.
    cfg = VpaConfig(memory_half_life_s=60.0, memory_aggregation_interval_s=60.0)
    t = np.array([0.0, 5750.0, 6630.0, 6640.0])
    mem = np.array([1e9, 3e9, 3e9, 5e9])
    for batch in (True, False):
        r = VpaRecommender(cfg)
        if batch:
            r.add_memory_samples(t, mem)
        else:
            for ti, mi in zip(t, mem):
                r.add_memory_sample(ti, mi)
        # Reference 60 s (first window end).  The 3e9 peak of the window ending at 5760 s
        # weighed 2**95; the window ending at 6660 s moved the reference by 110
        # half-lives, leaving 2**-15 (< epsilon) in that bucket.
        assert r.memory.reference_timestamp == 6660.0
        # The third sample added 1 to that bucket; the fourth replaced it, and the
        # subtraction took the whole 1 + 2**-15: the bucket is cleared.
        assert r.memory.bucket_weight[bucket_of(3e9, MEM_FIRST)] == 0.0
        before = 2.0 ** -110 * (1 + 2.0 ** 95) + 1
        assert r.memory.total_weight == pytest.approx(before - (1 + 2.0 ** -15) + 1, abs=1e-15)
        assert r.memory.percentile(0.0) == pytest.approx(bucket_end(5e9, MEM_FIRST), rel=1e-12)


def test_memory_window_skips_empty_intervals():
    r = VpaRecommender()
    r.add_memory_sample(0.0, 1e9)
    r.add_memory_sample(3 * DAY + 5, 2e9)
    assert r.window_end == 4 * DAY       # end of the interval holding the sample


def test_zero_first_peak_freezes_the_interval_as_in_go():
    # container.go only replaces a peak when oldMaxMem != 0.
    r = VpaRecommender()
    r.add_memory_sample(0.0, 0.0)
    r.add_memory_sample(10.0, 3e9)
    assert r.memory.percentile(1.0) == pytest.approx(bucket_end(0.0, MEM_FIRST), rel=1e-12)


@pytest.mark.parametrize(("request_bytes", "expected"), [
    (256 * MIB, 256 * MIB + 100 * MIB),        # +100 MiB > x1.2 (307.2 MiB)
    (1 * GIB, int(GIB * 1.2)),                 # x1.2 (1288490188) > +100 MiB (1124 MiB)
])
def test_oom_bump_both_branches(request_bytes, expected):
    r = VpaRecommender()
    assert r.record_oom(0.0, request_bytes) == expected
    assert r.memory.percentile(0.9) == pytest.approx(bucket_end(expected, MEM_FIRST), rel=1e-12)
    r.add_cpu_sample(0.0, 0.1)
    assert r.recommend(0.0).target["memory"] == bytes_with_margin(bucket_end(expected, MEM_FIRST))


def test_oom_bump_uses_the_interval_peak_and_replaces_it():
    r = VpaRecommender()
    r.add_memory_sample(0.0, 2 * GIB)
    bumped = int(2 * GIB * 1.2)                 # used = max(1 GiB request, 2 GiB peak)
    assert r.record_oom(60.0, 1 * GIB) == bumped == 2576980377
    assert r.memory.total_weight == 1.0        # still one peak in the interval
    assert r.memory.percentile(0.0) == pytest.approx(bucket_end(bumped, MEM_FIRST), rel=1e-12)
    # A second OOM in the interval computes the same bump (the OOM peak is not reused) and
    # is not above the current peak: no effect.
    assert r.record_oom(120.0, 1 * GIB) is None
    assert r.memory.total_weight == 1.0


def test_oom_older_than_one_interval_is_dropped():
    r = VpaRecommender()
    r.add_memory_sample(0.0, 1e9)
    r.add_memory_sample(3 * DAY, 1e9)
    assert r.window_end == 4 * DAY
    assert r.record_oom(2.5 * DAY, 1e9) is None              # before window end - 24 h
    assert r.record_oom(3.5 * DAY, 1e9) == max(int(1e9) + 100 * MIB, int(1e9 * 1.2))


# ----------------------------------------------------------------- batch == one by one

def _assert_same_state(a: VpaRecommender, b: VpaRecommender) -> None:
    for ha, hb in ((a.cpu, b.cpu), (a.memory, b.memory)):
        assert np.array_equal(ha.bucket_weight, hb.bucket_weight)
        assert ha.total_weight == hb.total_weight
        assert (ha.min_bucket, ha.max_bucket) == (hb.min_bucket, hb.max_bucket)
        assert ha.reference_timestamp == hb.reference_timestamp
    keys = ("first_sample_start", "last_sample_start", "total_samples_count",
            "last_cpu_sample_start", "last_memory_sample_start", "window_end",
            "memory_peak", "oom_peak")
    assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys]
    assert a.recommend() == b.recommend()


def _replay(config, chunks, batch: bool) -> VpaRecommender:
    r = VpaRecommender(config)
    for t, cores, mem, oom in chunks:
        if batch:
            r.add_cpu_samples(t, cores)
            r.add_memory_samples(t, mem)
        else:
            for ti, ci in zip(t, cores):
                r.add_cpu_sample(ti, ci)
            for ti, mi in zip(t, mem):
                r.add_memory_sample(ti, mi)
        if oom is not None:
            r.record_oom(*oom)
    return r


# Short half-lives and intervals so that reference shifts, window changes, epsilon
# effects and peak replacements all happen within a few hundred samples.
_FAST = VpaConfig(cpu_half_life_s=600.0, memory_half_life_s=900.0,
                  memory_aggregation_interval_s=1800.0)

_step = st.one_of(st.just(0.0), st.floats(-50, 0), st.floats(0.1, 120),
                  st.floats(120, 90_000))
_cores = st.one_of(st.floats(0, 64), st.just(0.0), st.floats(-1, 0), st.just(math.nan))
_mem = st.one_of(st.floats(0, 4e10), st.just(0.0), st.floats(-1e6, 0))


@st.composite
def _chunks(draw):
    chunks, t0 = [], draw(st.floats(-1e6, 1e6))
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 60))
        steps = draw(st.lists(_step, min_size=n, max_size=n))
        t = t0 + np.cumsum(np.asarray(steps, dtype=float))
        t0 = float(t[-1]) if n else t0
        cores = np.asarray(draw(st.lists(_cores, min_size=n, max_size=n)), dtype=float)
        mem = np.asarray(draw(st.lists(_mem, min_size=n, max_size=n)), dtype=float)
        oom = None
        if draw(st.booleans()):
            oom = (t0 + draw(st.floats(-4000, 2000)), draw(st.floats(0, 8e9)))
        chunks.append((t, cores, mem, oom))
    return chunks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_chunks())
def test_batch_path_equals_one_by_one_path(chunks):
    _assert_same_state(_replay(_FAST, chunks, batch=True), _replay(_FAST, chunks, batch=False))


def test_batch_equals_one_by_one_on_a_realistic_trace():
    rng = np.random.default_rng(2024)
    t = np.cumsum(rng.uniform(10, 60, 2400))                    # ~ 24 h, irregular
    cores = np.clip(rng.gamma(2.0, 0.8, 2400), 0, None)
    mem = 2e9 + np.cumsum(rng.normal(2e5, 5e6, 2400))            # drifting up: many peaks
    for cfg in (VpaConfig(), VpaConfig(cpu_weight_from_request=True)):
        req = rng.uniform(0.0, 4.0, 2400)
        a, b = VpaRecommender(cfg), VpaRecommender(cfg)
        a.add_cpu_samples(t, cores, req)
        a.add_memory_samples(t, mem)
        for ti, ci, ri, mi in zip(t, cores, req, mem):
            b.add_cpu_sample(ti, ci, ri)
            b.add_memory_sample(ti, mi)
        _assert_same_state(a, b)


def test_go_pow_port():
    assert go_pow(1.05, 2.0) == 1.05 * 1.05
    assert go_pow(1.05, 3.0) == (1.05 * 1.05) * 1.05
    assert go_pow(1.024, -2.0) == 1 / (1.024 * 1.024)
    assert go_pow(math.inf, 1.0) == math.inf and go_pow(math.inf, -2.0) == 0.0
    for n in (1, 50, 127, 128, 150, 175):
        assert go_pow(1.05, float(n)) == pytest.approx(1.05 ** n, rel=1e-13)


def test_small_and_large_batch_bucket_lookups_agree():
    """find_buckets uses a binary search for small arrays and the log guess for large ones."""
    rng = np.random.default_rng(1)
    for opts in (cpu_histogram_options(), memory_histogram_options()):
        starts = opts.bucket_starts
        values = np.concatenate([
            [-5.0, -0.0, 0.0, np.inf, opts.first_bucket_size,
             np.nextafter(opts.first_bucket_size, 0.0)],
            np.exp(rng.uniform(-25, math.log(2 * opts.max_value), 1500)),
            starts, np.nextafter(starts, np.inf), np.nextafter(starts, -np.inf)])
        whole = opts.find_buckets(values).tolist()                       # large path
        small = [b for i in range(0, values.size, 37)                    # small path
                 for b in opts.find_buckets(values[i:i + 37]).tolist()]
        assert whole == small == [opts.find_bucket(v) for v in values]


def test_percentiles_equal_percentile_calls():
    rng = np.random.default_rng(3)
    h = DecayingHistogram(cpu_histogram_options(), DAY)
    ps = (0.0, 0.5, 0.9, 0.95, 1.0)
    assert h.percentiles(ps) == [0.0] * len(ps)
    for k in range(5):
        h.add_samples(rng.gamma(2.0, 0.8, 40), 0.1, k * 600.0 + 15.0 * np.arange(40))
        assert h.percentiles(ps) == [h.percentile(p) for p in ps]


def test_windowed_replay_equals_one_by_one():
    """The evaluator's pattern: recommend, then a 40-sample batch, per window (fast paths)."""
    rng = np.random.default_rng(7)
    cores = rng.gamma(2.0, 0.8, 2400)
    mem = 6e9 * (1 + 0.05 * rng.standard_normal(2400)) + np.linspace(0, 2e9, 2400)
    a, b = VpaRecommender(), VpaRecommender()
    for w in range(60):
        now = 1.7e9 + w * 600.0
        assert a.recommend(now) == b.recommend(now)
        t = now + 15.0 * np.arange(40)
        sl = slice(40 * w, 40 * w + 40)
        a.add_cpu_samples(t, cores[sl])
        a.add_memory_samples(t, mem[sl])
        for ti, ci, mi in zip(t, cores[sl], mem[sl]):
            b.add_cpu_sample(ti, ci)
            b.add_memory_sample(ti, mi)
        if w % 7 == 3:
            assert a.record_oom(now + 600.0, 5e9) == b.record_oom(now + 600.0, 5e9)
        _assert_same_state(a, b)
