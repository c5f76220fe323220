"""A young container's rate read over its age (ai4dl.sources.young_rates, issue 42): which
templates are such rates, the correction, the store probe, and the window loop's use of them.
The real stores' readings are in tests/test_victoriametrics.py."""

from __future__ import annotations

import numpy as np
import pytest

from ai4dl.controller.pods import Container, PodInfo
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.runtime import WindowRunner
from ai4dl.crd_spec import PhaseModelSpec, default_features
from ai4dl.errors import Ai4dlError
from ai4dl.promql import rate_range_seconds
from ai4dl.sources import prometheus as prom
from ai4dl.sources.prometheus_types import DEFAULT_QUERIES
from ai4dl.sources.young_rates import feature_rate_ranges, undilute


@pytest.mark.parametrize("query, seconds", [
    ('max by (namespace, pod, container) (rate(x{a="b"}[1m]))', 60.0),
    ("rate(x[30s]) * 2", 30.0),
    ("sum(rate(x[2m])) / on () y", 120.0),      # a rate over a gauge: diluted all the same
    ("rate(x[30s]) / rate(y[30s])", 0.0),       # a ratio of two rates is not
    ("rate(x[30s]) + rate(y[1m])", 0.0),
    ("increase(x[1m])", 0.0),
    ("irate(x[1m])", 0.0),
    ("max_over_time(x[1m])", 0.0),
    ("rate(x[1m:5s])", 0.0),
    ("x", 0.0),
    ("not promql (", 0.0),
])
def test_the_range_of_a_templates_one_rate(query, seconds):
    assert rate_range_seconds(query) == seconds


def test_the_default_cpu_feature_is_a_rate_and_memory_is_not():
    ranges = feature_rate_ranges([f.query for f in default_features()], "1m")
    np.testing.assert_array_equal(ranges, [60.0, 0.0])
    ranges = feature_rate_ranges([DEFAULT_QUERIES["cpu"], DEFAULT_QUERIES["memory"]], "2m")
    np.testing.assert_array_equal(ranges, [120.0, 0.0])
    assert feature_rate_ranges(["rate(x{{{selector}}}[1m]) {bad}"], "1m")[0] == 0.0


def test_undilute_reads_a_young_rate_over_its_age_and_nothing_else():
    step, started = 15.0, 1000.0
    times = started + step * np.arange(-2, 7)              # two of a predecessor, then 0..90 s
    true = 0.6
    age = times - started
    cpu = np.where(age >= 0, true * np.minimum(age, 60.0) / 60.0, 0.9)   # Prometheus's reading
    memory = np.full(len(times), 5e8)
    got = undilute(np.c_[cpu, memory], times, started, np.array([60.0, 0.0]), step)
    young = (age > 0) & (age < 60)
    np.testing.assert_allclose(got[young, 0], true)
    np.testing.assert_array_equal(got[~young, 0], cpu[~young])     # its predecessor, full windows
    np.testing.assert_array_equal(got[:, 1], memory)               # not a rate
    # at age 0 the floor is a step: a reading there is never scaled past range ÷ step
    assert undilute(np.array([[0.1]]), np.array([started]), started, np.array([60.0]),
                    step)[0, 0] == pytest.approx(0.4)
    old = np.c_[cpu, memory]
    assert undilute(old, times, started - 3600, np.array([60.0, 0.0]), step) is old


class _Store:
    """An instant-query answer as a store gives it (one function's input, not a store)."""

    def __init__(self, url: str, answer):
        self.url, self.answer, self.asked = url, answer, []

    def instant(self, query, at):
        self.asked.append((query, at))
        if isinstance(self.answer, Exception):
            raise self.answer
        return [({}, v) for v in self.answer]


@pytest.mark.parametrize("answer, diluted", [
    ([0.458], True), ([1.0], False), ([], None), ([0.4, 0.4], None), ([5.0], None),
    (Ai4dlError("down"), None)])
def test_the_store_probe_is_asked_once_an_hour(answer, diluted):
    store = _Store(f"http://probe-{id(answer)}", answer)
    assert prom.young_rates_diluted(store, now=10_000.0) is diluted
    assert prom.young_rates_diluted(store, now=10_000.0 + 3599) is diluted
    assert len(store.asked) == 1 and "time()" in store.asked[0][0]
    prom.young_rates_diluted(store, now=10_000.0 + 3601)
    assert len(store.asked) == 2


def _pod(name: str, started: float) -> PodInfo:
    return PodInfo("ns", name, name + "-uid", "pm", [Container("main", {}, {})],
                   running=True, started={"main": started})


@pytest.mark.parametrize("answer, scaled", [([0.46], True), ([1.0], False)])
def test_the_window_loop_reads_young_containers_over_their_age_where_the_store_dilutes(
        answer, scaled):
    spec = PhaseModelSpec.model_validate({"stepSeconds": 15, "windowSeconds": 60})
    runner = WindowRunner(None, None, _Store(f"http://loop-{answer[0]}", answer), "ns", "pm",
                          key=StateKey.generate())
    begin, step = 10_000.0, 15.0
    reading = np.c_[np.full(8, 0.2), np.full(8, 5e8)]
    samples = {("ns", "young", "main"): reading.copy(), ("ns", "old", "main"): reading.copy()}
    young_start = begin + 4 * step                      # rows 4..7: ages 0, 15, 30, 45 s
    got = runner._undiluted(spec, [_pod("young", young_start), _pod("old", begin - 600)],
                            samples, begin, step)
    np.testing.assert_array_equal(got[("ns", "old", "main")], reading)
    young = got[("ns", "young", "main")]
    np.testing.assert_array_equal(young[:4], reading[:4])          # before it started
    np.testing.assert_array_equal(young[:, 1], reading[:, 1])      # memory is not a rate
    want = [0.2 * 60 / 15, 0.2 * 60 / 15, 0.2 * 60 / 30, 0.2 * 60 / 45] if scaled \
        else [0.2] * 4
    np.testing.assert_allclose(young[4:, 0], want)
