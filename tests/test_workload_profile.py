"""Workload profiles (ai4dl.rules.workload_profile) and the evaluator's served start
(ai4dl.evaluation.starts): what a workload's earlier executions give its next one.

- a run's summary (first-window peak, lifetime peak, when it came, the OOM bump) by hand;
- the weighted upper percentile: the largest of a few recent runs, an old outlier outweighed;
- a profile is bounded (MAX_RUNS runs, bytes independent of how many executions it saw) and
  reads back what it wrote; a stored profile that is not one is a one-line ProfileError;
- the served start: a workload's profile only from its runs that ended before, the pooled
  level for a workload never seen (and for ranks that run at once), the recorded request
  without a level, and the peak counted as clairvoyant;
- the synthetic generator's re-run workloads: one group, runs one after another, one plan.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ai4dl.evaluation.starts import served_starts, workload_of
from ai4dl.method import synthetic
from ai4dl.method.traces import Execution
from ai4dl.rules import workload_profile as wp

GiB = 1024.0 ** 3
MiB = 1024.0 ** 2


def execution(name, group, start, mem, step=15.0, meta=None, cpu=None):
    mem = np.asarray(mem, np.float64)
    cpu = np.full(len(mem), 1.0) if cpu is None else np.asarray(cpu, np.float64)
    times = start + step * np.arange(len(mem))
    return Execution(name, times, np.stack([cpu, mem], 1).astype(np.float32),
                     ("cpu", "memory"), ("cores", "bytes"), group=group, step=step,
                     meta=dict(meta or {}))


# ----------------------------------------------------------------------------- summaries
class TestSummarise:
    def test_by_hand(self):
        usage = np.array([[1.0, 2.0], [3.0, 1.0], [2.0, 5.0], [1.0, 5.0], [0.5, 4.0]])
        s = wp.summarise(usage, step=10.0, window=2, start=100.0)
        assert s.first == (3.0, 2.0)            # the first two samples' maxima
        assert s.peak == (3.0, 5.0)
        assert s.peak_at == (10.0, 20.0)        # the first sample at the peak, in seconds
        assert s.duration == 50.0 and s.end == 150.0 and not s.oom_killed

    def test_early_window_peaks(self):
        usage = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 4.0], [1.0, 3.0], [1.0, 6.0]])
        s = wp.summarise(usage, 15.0, 2, 0.0)
        assert s.early == ((1.0, 2.0), (1.0, 4.0), (1.0, 6.0))      # windows of 2 samples
        long = wp.summarise(np.ones((100, 2)), 15.0, 2, 0.0)
        assert len(long.early) == wp.EARLY_WINDOWS

    def test_oom_bump_is_vpas(self):
        usage = np.array([[1.0, 1.0 * GiB], [1.0, 2.0 * GiB]])
        s = wp.summarise(usage, 15.0, 1, 0.0, oom_killed=True, memory_index=1)
        assert s.peak[1] == pytest.approx(2.4 * GiB)           # ×1.2 beats +100 MiB
        assert s.first[1] == pytest.approx(1.2 * GiB)
        assert s.peak[0] == 1.0                                 # cpu untouched
        small = wp.summarise(np.array([[0.1, 200 * MiB]]), 15.0, 1, 0.0, True, 1)
        assert small.peak[1] == pytest.approx(300 * MiB)        # +100 MiB beats ×1.2

    def test_refuses_an_empty_run(self):
        with pytest.raises(ValueError, match="at least one sample"):
            wp.summarise(np.empty((0, 2)), 15.0, 4, 0.0)


# ----------------------------------------------------------------------------- the percentile
class TestWeightedUpper:
    def test_few_equal_runs_give_the_largest(self):
        v = np.array([[3.0], [5.0], [4.0]])
        assert wp.weighted_upper(v, np.ones(3))[0] == 5.0

    def test_an_old_outlier_is_outweighed(self):
        # 20 recent runs at 1 and one a week old at 9: its weight 2^-7 of one run is under 5 %
        v = np.array([[9.0]] + [[1.0]] * 20)
        w = np.array([0.5 ** 7] + [1.0] * 20)
        assert wp.weighted_upper(v, w)[0] == 1.0
        w[0] = 1.0 * 2                          # ... and counts when it is recent
        assert wp.weighted_upper(v, w)[0] == 9.0


# ----------------------------------------------------------------------------- the profile
def run(end, first, peak, oom=False):
    return wp.RunSummary(end, 60.0, (1.0, first), (1.0, peak), (0.0, 30.0), oom)


class TestProfile:
    def test_first_request_and_peak(self):
        p = wp.profile_from_runs(("cpu", "memory"), [run(100.0, 2.0, 8.0), run(200.0, 3.0, 6.0)])
        assert list(p.first_request(300.0)) == pytest.approx([1.15, 3.45])   # VPA's 15 %
        level, until = p.peak(300.0)
        assert list(level) == [1.0, 8.0] and list(until) == [0.0, 30.0]
        assert p.executions == 2 and p.oom_kills == 0

    def test_the_first_request_leaves_room_for_the_climb(self):
        """A run climbing 1, 4, 6 GiB in its first windows: a layer that at most doubles a
        window can follow it from 2 GiB (4 / 2, and 6 / 4 = 1.5 < 2), not from 1 GiB."""
        run = wp.RunSummary(100.0, 60.0, (1.0,), (6.0,), (40.0,), False,
                            ((1.0,), (4.0,), (6.0,)))
        p = wp.profile_from_runs(("memory",), [run])
        assert p.first_request(200.0)[0] == pytest.approx(1.15)          # nothing limits
        assert p.first_request(200.0, max_increase=1.0)[0] == pytest.approx(2.3)
        assert p.first_request(200.0, max_increase=3.0)[0] == pytest.approx(1.15)  # 4/4, 6/16

    def test_no_run_no_request(self):
        p = wp.WorkloadProfile(("cpu", "memory"))
        assert p.first_request(0.0) is None and p.peak(0.0) is None

    def test_decay_halves_per_half_life(self):
        p = wp.profile_from_runs(("cpu", "memory"), [run(0.0, 1.0, 1.0)])
        assert p.weights(wp.HALF_LIFE_S)[0] == pytest.approx(0.5)
        assert p.weights(3 * wp.HALF_LIFE_S)[0] == pytest.approx(0.125)

    def test_bounded_runs_and_bytes(self):
        p = wp.WorkloadProfile(("cpu", "memory"))
        sizes = []
        for k in range(50):
            p = p.observe(run(float(k), 1.0 + k, 2.0 + k, oom=k % 10 == 0))
            sizes.append(p.size_bytes())
        assert len(p.runs) == wp.MAX_RUNS and p.executions == 50 and p.oom_kills == 5
        assert [r.end for r in p.runs] == [float(k) for k in range(42, 50)]   # the newest
        assert max(sizes[wp.MAX_RUNS:]) - min(sizes[wp.MAX_RUNS:]) < 40      # digits only
        assert max(sizes) < 2048

    def test_round_trip(self):
        measured = wp.summarise(np.array([[1.0, 2.0], [2.0, 5.0], [1.0, 3.0]]), 15.0, 1, 0.0,
                                oom_killed=True, memory_index=1, bytes_unit=False)
        p = wp.profile_from_runs(("cpu", "memory"), [run(100.0, 2.0, 8.0, oom=True),
                                                     run(50.0, 1.0, 4.0), measured])
        back = wp.WorkloadProfile.from_dict(json.loads(p.to_json()))
        # stored to six significant digits: read back, written again, nothing moves
        assert back.to_dict() == p.to_dict() and len(back.runs) == 3
        assert np.allclose(back.runs[0].early, measured.early, rtol=5e-7, atol=0)
        assert back.runs[0].early != measured.early       # 2.4000000000000004 was rounded

    def test_a_run_seen_twice_counts_once(self):
        r = wp.RunSummary(10.0, 10.0, (1.0,), (2.0,), (5.0,), run_id="abc")
        p = wp.WorkloadProfile(("memory",)).observe(r)
        assert p.observe(r) is p and p.executions == 1
        other = wp.RunSummary(11.0, 10.0, (1.0,), (2.0,), (5.0,), run_id="abd")
        assert p.observe(other).executions == 2
        later = wp.RunSummary(4000.0, 10.0, (1.0,), (2.0,), (5.0,), run_id="abc")   # restarted
        assert p.observe(later).executions == 2
        back = wp.WorkloadProfile.from_dict(json.loads(p.to_json()))
        assert back.runs[0].run_id == "abc" and back.observe(r).executions == 1

    @pytest.mark.parametrize("doc,field", [
        ([], "mapping"),
        ({"resources": []}, "profile.resources"),
        ({"resources": ["memory"], "runs": {}}, "profile.runs"),
        ({"resources": ["memory"], "runs": [{"end": 1, "duration": 1, "first": [1, 2],
                                             "peak": [1], "peakAt": [0]}]},
         r"profile.runs\[0\].first"),
        ({"resources": ["memory"], "runs": [{"end": -1, "duration": 1, "first": [1],
                                             "peak": [1], "peakAt": [0]}]},
         r"profile.runs\[0\].end"),
        ({"resources": ["memory"], "runs": [{"end": 1, "duration": 1, "first": [float("nan")],
                                             "peak": [1], "peakAt": [0]}]},
         r"profile.runs\[0\].first"),
        ({"resources": ["memory"], "runs": [{"end": 1, "duration": 1, "first": [1],
                                             "peak": [1], "peakAt": [0], "early": [[1, 2]]}]},
         r"profile.runs\[0\].early"),
        ({"resources": ["memory"], "executions": -2}, "profile.executions"),
        ({"resources": ["memory"], "oomKills": True}, "profile.oomKills"),
    ])
    def test_a_stored_profile_that_is_not_one_is_named(self, doc, field):
        with pytest.raises(wp.ProfileError, match=field):
            wp.WorkloadProfile.from_dict(doc)

    def test_a_run_of_other_resources_is_refused(self):
        with pytest.raises(ValueError, match="a run of 1 resources"):
            wp.WorkloadProfile(("cpu", "memory")).observe(
                wp.RunSummary(1.0, 1.0, (1.0,), (1.0,), (0.0,)))


# ----------------------------------------------------------------------------- the hold
def _run(end: float, mem_per_window, window: int = 4, step: float = 15.0):
    """A run ending at ``end`` whose memory in window w is ``mem_per_window[w]``."""
    mem = np.repeat(np.asarray(mem_per_window, np.float64), window)
    return wp.summarise(np.column_stack([np.ones(len(mem)), mem]), step, window,
                        end - len(mem) * step, memory_index=1)


class TestShapeAndHold:
    def test_a_runs_shape_is_its_memory_per_stretch_doubled_to_fit(self):
        u = np.column_stack([np.ones(400), np.arange(400.0)])     # 100 windows of 4, rising
        r = wp.summarise(u, 15.0, 4, 0.0, memory_index=1)
        # 100 windows: stretches of 4 windows (the least power of two that fits 32), 25
        assert r.shape_seconds == 4 * 4 * 15.0 and len(r.shape) == 25
        assert r.shape == tuple(float(16 * k + 15) for k in range(25))
        killed = wp.summarise(u, 15.0, 4, 0.0, oom_killed=True, memory_index=1,
                              bytes_unit=False)
        assert killed.shape == pytest.approx(tuple(1.2 * v for v in r.shape))
        assert wp.summarise(u, 15.0, 4, 0.0).shape == ()          # no memory column
        assert [wp.shape_width(n) for n in (1, 32, 33, 64, 65, 1000)] == [1, 1, 2, 2, 4, 32]

    def test_the_hold_follows_when_the_runs_used_their_memory(self):
        # two runs that peaked late (4 and 3 GiB in their last two windows of eight, 1 GiB
        # before): a new run is held at 1 GiB until then, not at their peak from its start
        runs = [_run(1000.0, np.array([1] * 6 + [4] * 2) * GiB),
                _run(2000.0, np.array([1] * 6 + [3] * 2) * GiB)]
        h = wp.profile_from_runs(("cpu", "memory"), runs).hold(2000.0)
        levels = [wp.held_level(h, 60.0 * w, length=60.0) for w in range(9)]
        assert levels[:6] == pytest.approx([1 * GiB] * 6)
        assert levels[6:8] == pytest.approx([4 * GiB] * 2)       # their upper percentile
        assert np.isnan(levels[8])                                # past the runs' end
        # held as a limit (a Guaranteed pod: usage over it is an OOM kill), their peak with
        # VPA's margin until the point where the latest of them reached it (its 25th sample)
        assert wp.held_level(h, 0.0, as_limit=True) == pytest.approx(4 * GiB * 1.15)
        assert wp.held_level(h, 360.0, as_limit=True) == pytest.approx(4 * GiB * 1.15)
        assert np.isnan(wp.held_level(h, 361.0, as_limit=True))

    def test_a_shorter_run_stops_voting_where_it_ended(self):
        p = wp.profile_from_runs(("cpu", "memory"), [_run(1000.0, [2] * 16),
                                                     _run(1000.0, [5] * 4)])
        h = p.hold(1000.0)
        levels = [wp.held_level(h, 60.0 * w, length=60.0) for w in range(17)]
        assert levels[:4] == [5.0] * 4 and levels[4:16] == [2.0] * 12 and np.isnan(levels[16])
        # kept as two pieces, not as the runs' every stretch
        assert h.edges.tolist() == [0.0, 240.0, 960.0] and h.levels.tolist() == [5.0, 2.0]
        # one run (its own stretches, no percentile) as two identical runs give
        alone = wp.profile_from_runs(("cpu", "memory"), [_run(1000.0, [1, 3, 2, 2])])
        twice = wp.profile_from_runs(("cpu", "memory"), [
            _run(1000.0, [1, 3, 2, 2]), dataclasses.replace(_run(1000.0, [1, 3, 2, 2]),
                                                            run_id="other")])
        a, b = alone.hold(1000.0), twice.hold(1000.0)
        assert a.edges.tolist() == b.edges.tolist() == [0.0, 60.0, 120.0, 240.0]
        assert a.levels.tolist() == b.levels.tolist() == [1.0, 3.0, 2.0]
        assert wp.profile_from_runs(("cpu",), []).hold(0.0) is None
        assert p.hold(1000.0, "gpu") is None

    def test_many_windows_at_once_are_held_as_each_alone(self):
        # the evaluator's vector form against the window loop's scalar one, on random holds:
        # windows inside a stretch, over several, before the run's start, past its end
        rng = np.random.default_rng(1)
        for _ in range(200):
            k = int(rng.integers(1, 12))
            edges = np.concatenate([[0.0], np.cumsum(rng.choice([15.0, 30.0, 60.0, 90.0], k))])
            levels = rng.random(k)
            levels[rng.random(k) < 0.1] = np.nan
            h = wp.Hold(edges, levels)
            length = float(rng.choice([0.0, 30.0, 60.0, 100.0]))
            t = np.concatenate([rng.uniform(-200.0, edges[-1] + 100.0, 40), edges,
                                edges - length])
            np.testing.assert_array_equal(
                wp.held_levels(h, t, length),
                [wp.held_level(h, x, length=length) for x in t])
        assert np.isnan(wp.held_levels(None, np.zeros(3))).all()

    def test_a_run_stored_without_a_shape_holds_its_peak_until_where_it_came(self):
        old = wp.RunSummary(900.0, 600.0, (1.0, 1 * GiB), (1.0, 3 * GiB), (0.0, 120.0))
        h = wp.profile_from_runs(("cpu", "memory"), [old]).hold(1000.0)
        assert wp.held_level(h, 120.0) == 3 * GiB and np.isnan(wp.held_level(h, 121.0))
        assert wp.held_level(h, 0.0, length=60.0) == 3 * GiB

    def test_a_shape_is_stored_and_read_back_and_a_bad_one_refused(self):
        p = wp.profile_from_runs(("cpu", "memory"), [_run(1000.0, [1, 2, 3])])
        back = wp.WorkloadProfile.from_dict(json.loads(p.to_json()))
        assert back.runs[0].shape == p.runs[0].shape == (1.0, 2.0, 3.0)
        assert back.runs[0].shape_seconds == p.runs[0].shape_seconds == 60.0
        for key, value, field in (("shape", [1.0] * 33, "shape"), ("shape", [-1.0], "shape"),
                                  ("shapeSeconds", 0.0, "shapeSeconds")):
            doc = p.to_dict()
            doc["runs"][0][key] = value
            with pytest.raises(wp.ProfileError, match=rf"runs\[0\]\.{field}:"):
                wp.WorkloadProfile.from_dict(doc)


# ----------------------------------------------------------------------------- served starts
class TestServedStarts:
    level = np.array([2.0, 3.0 * GiB])

    def test_profile_from_ended_runs_of_the_same_workload_only(self):
        a1 = execution("a/1", "a", 0.0, [1 * GiB] * 4 + [5 * GiB] * 4)     # ends at 120 s
        a2 = execution("a/2", "a", 1000.0, [2 * GiB] * 8)
        a3 = execution("a/3", "a", 1050.0, [2 * GiB] * 8)                  # a2 still running
        b1 = execution("b/1", "b", 500.0, [9 * GiB] * 8)                   # another workload
        starts, counts, holds = served_starts([a2, a3, b1], [a1, a2, a3, b1],
                                              ("cpu", "memory"), 4, self.level)
        # a2 and a3 from a1's first window (1 GiB, cpu 1; VPA's 15 % margin), not its 5 GiB
        # peak nor b's 9 GiB
        assert [s[1] / GiB for s in starts] == pytest.approx([1.15, 1.15, 3.0])
        assert list(starts[0]) == pytest.approx([1.15, 1.15 * GiB])
        assert counts.get("profile") == 2 and counts.get("pooled") == 1 and counts.total == 3
        # memory held as a1 used it, window by window: 1 GiB in its first minute, 5 GiB in its
        # second, nothing past its end (a1 ran 120 s)
        held = [wp.held_level(holds[0], t, length=60.0) for t in (0.0, 60.0, 120.0)]
        assert held[:2] == pytest.approx([1 * GiB, 5 * GiB]) and np.isnan(held[2])
        assert holds[2] is None

    def test_later_runs_learn_from_all_earlier_ones(self):
        runs = [execution(f"a/{k}", "a", 1000.0 * k, [(k + 1) * GiB] * 8) for k in range(3)]
        starts, _, _ = served_starts(runs, runs, ("cpu", "memory"), 4, self.level)
        assert starts[0][1] == 3.0 * GiB                      # never seen: pooled
        # the largest earlier first window, with the margin
        assert [s[1] / GiB for s in starts[1:]] == pytest.approx([1.15, 2.3])

    def test_workload_by_a_meta_key(self):
        x = execution("x", "x", 0.0, [1 * GiB] * 4, meta={"family": "cnn"})
        y = execution("y", "y", 500.0, [7 * GiB] * 4, meta={"family": "cnn"})
        z = execution("z", "z", 600.0, [7 * GiB] * 4)               # no family: its group
        assert workload_of(y, "family") == "cnn" and workload_of(z, "family") == "z"
        starts, counts, _ = served_starts([y, z], [x, y, z], ("cpu", "memory"), 4, self.level,
                                       by="family")
        assert starts[0][1] == pytest.approx(1.15 * GiB) and starts[1][1] == 3 * GiB
        by_group, _, _ = served_starts([y], [x, y], ("cpu", "memory"), 4, self.level)
        assert by_group[0][1] == 3 * GiB                              # groups differ

    def test_a_profiles_cpu_start_stays_within_the_recorded_request(self):
        # the operator's admission rule (CAPPED_AT_REQUEST), in the replay too: runs that used
        # 2 cores of a pod that asked for 1.5 start at 1.5, memory above the request
        meta = {"cpu_limit_cores": 1.5, "memory_limit_bytes": 1 * GiB}
        runs = [execution(f"a/{k}", "a", 1000.0 * k, [2 * GiB] * 8, meta=meta,
                          cpu=[2.0] * 8) for k in range(2)]
        starts, _, _ = served_starts(runs, runs, ("cpu", "memory"), 4, self.level)
        assert list(starts[1]) == pytest.approx([1.5, 2.3 * GiB])
        free = [execution(f"b/{k}", "b", 1000.0 * k, [2 * GiB] * 8, cpu=[2.0] * 8)
                for k in range(2)]
        starts, _, _ = served_starts(free, free, ("cpu", "memory"), 4, self.level)
        assert list(starts[1]) == pytest.approx([2.3, 2.3 * GiB])     # no request recorded

    def test_without_a_level_the_recorded_request_then_the_peak(self):
        rec = execution("r", "r", 0.0, [1 * GiB] * 4,
                        meta={"cpu_limit_cores": 4.0, "memory_limit_bytes": 8 * GiB})
        bare = execution("n", "n", 0.0, [1 * GiB, 6 * GiB, 2 * GiB, 1 * GiB])
        starts, counts, _ = served_starts([rec, bare], [rec, bare], ("cpu", "memory"), 2, None)
        assert list(starts[0]) == [4.0, 8 * GiB]
        assert starts[1][1] == 6 * GiB                   # its own peak: clairvoyant, counted
        assert counts.get("request") == 1 and counts.get("peak") == 1
        assert "clairvoyant" in counts.describe()


# ----------------------------------------------------------------------------- re-run jobs
class TestSyntheticWorkloads:
    def test_runs_of_one_job_share_its_plan_one_after_another(self):
        cfg = synthetic.SyntheticConfig(n_features=2)
        traces, labels = synthetic.generate(7, seed=3, config=cfg, runs_per_workload=3)
        assert len(traces) == 7 and len(labels) == 7
        groups = [e.group for e in traces]
        assert groups == ["job-0000"] * 3 + ["job-0001"] * 3 + ["job-0002"]
        runs = [e for e in traces if e.group == "job-0000"]
        for a, b in zip(runs, runs[1:]):
            assert b.times[0] >= a.times[-1] + cfg.run_gap_s       # after the previous ended
        segments = [[p for i, p in enumerate(lab) if i == 0 or lab[i - 1] != p]
                    for lab in labels[:3]]
        assert segments[0] == segments[1] == segments[2]          # one phase plan
        lengths = np.array([len(e) for e in runs], float)
        assert lengths.max() / lengths.min() < 1.0 + 2.5 * cfg.run_jitter
        other = [e for e in traces if e.group == "job-0001"]
        assert len(other[0]) != len(runs[0])                      # another job, another plan
        assert runs[1].meta == {"workload": "job-0000", "run": 1}

    def test_one_run_per_workload_is_the_old_generator(self):
        a, _ = synthetic.generate(5, seed=2)
        b, _ = synthetic.generate(5, seed=2, runs_per_workload=1)
        assert all(np.array_equal(x.values, y.values) and x.group == x.name
                   for x, y in zip(a, b))

    def test_refuses_zero_runs(self):
        with pytest.raises(ValueError, match="at least 1"):
            synthetic.generate(3, runs_per_workload=0)


def test_the_compact_form_gives_the_same_first_request():
    """What admission keeps in memory (CompactProfile) answers exactly as the profile does."""
    runs = [wp.summarise(np.array([[1.0, 2.0 + k], [1.5, 4.0 + k], [1.0, 9.0 + 2 * k]]), 15.0,
                         1, 100.0 * k) for k in range(5)]
    p = wp.profile_from_runs(("cpu", "memory"), runs)
    c = p.compact()
    assert c.n_runs == p.n_runs == 5
    for now, mi in ((500.0, None), (500.0, 1.0), (90_000.0, 0.5)):
        assert np.array_equal(c.first_request(now, mi), p.first_request(now, mi))
    assert wp.WorkloadProfile(("cpu",)).compact().first_request(0.0) is None
