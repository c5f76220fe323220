"""The query budget (issue 43 item 2): ai4dl.controller.query_budget on its own, and the window
runner that holds a PhaseModel's query to it (a stand-in source: the time and the timeout are
the point here; the real Prometheus's timeout answer is in tests/test_prometheus_source.py and
the operator's in tests/test_faults_query_budget.py)."""

from __future__ import annotations

import time

import pytest

from ai4dl.controller.query_budget import (MAX_SKIPPED, OVER_BUDGET, QueryBudget)
from fake_api import RawAnswer

Q = (("memory", "max by (namespace, pod, container) (m{{{selector}}})"),)
P = 60.0


def rests(budget: QueryBudget, starts, queries=Q) -> list[bool]:
    return [budget.resting(w, queries) is not None for w in starts]


def test_a_query_within_the_budget_never_rests():
    b = QueryBudget(5.0)
    for w in range(0, 600, 60):
        assert b.resting(w, Q) is None
        assert b.charge(w, 4.9, False, P) is None


def test_strikes_in_a_row_double_the_rest_up_to_the_bound():
    b = QueryBudget(5.0)
    w, skipped = 0.0, []
    for _ in range(8):
        assert b.resting(w, Q) is None
        strike = b.charge(w, 7.0, False, P)
        assert strike is not None
        n = 0
        w += P
        while b.resting(w, Q) is not None:
            n, w = n + 1, w + P
        skipped.append(n)
    assert skipped == [1, 2, 4, 8, 16, 16, 16, 16] and MAX_SKIPPED == 16
    assert b.last.strikes == 8


def test_a_window_within_the_budget_clears_the_strikes():
    b = QueryBudget(5.0)
    b.charge(0, 9, False, P)
    b.charge(120, 9, False, P)                 # second in a row: 2 windows rest
    assert rests(b, [180, 240, 300]) == [True, True, False]
    assert b.charge(300, 1, False, P) is None
    b.charge(360, 9, False, P)                 # a first strike again: 1 window
    assert rests(b, [420, 480]) == [True, False]


def test_a_timeout_is_a_strike_whatever_the_budget():
    b = QueryBudget(0)                          # 0: only Prometheus's timeout counts
    assert b.charge(0, 100.0, False, P) is None
    strike = b.charge(60, 8.0, True, P)
    assert strike.timed_out and rests(b, [120, 180]) == [True, False]
    assert "Prometheus gave up on it at its timeout after 8.0 s" in b.message(strike, 120, P)


def test_new_queries_are_tried_at_once():
    b = QueryBudget(5.0)
    b.charge(0, 9, False, P)
    b.charge(60, 9, False, P)
    fixed = (("memory", "m{{{selector}}}"),)
    assert rests(b, [120]) == [True]
    assert rests(b, [180], fixed) == [False] and b.last is None


def test_the_rest_is_at_most_an_hour():
    b = QueryBudget(5.0)
    w = 0.0
    for _ in range(6):
        b.charge(w, 9, False, 600.0)
        w = b.last.skip_until
    assert b.last.skip_until - b.last.window_start == (6 + 1) * 600.0


def test_the_message_names_the_cost_the_flag_and_what_happens():
    b = QueryBudget(5.0)
    strike = b.charge(1200, 41.7, False, P)
    msg = b.message(strike, 1260, P)
    assert msg == ("the query of window 1200: it took 41.7 s, over its budget of 5 s "
                   "(--query-budget-seconds 5 + 2 ms per container); 1 such window(s) in a row, "
                   "so 1 window(s) from 1260 on are not queried and nothing is resized; make "
                   "spec.features' queries cheaper (new queries are tried at the next window)")


def test_the_budget_grows_with_the_containers_asked_for():
    b = QueryBudget(5.0)
    assert b.allowed(0) == 5.0 and b.allowed(10_000) == pytest.approx(25.0)
    assert b.charge(0, 20.0, False, P, containers=10_000) is None
    strike = b.charge(60, 20.0, False, P, containers=100)
    assert strike is not None and strike.allowed == pytest.approx(5.2)
    assert "over its budget of 5.2 s" in b.message(strike, 120, P)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_budget_must_be_a_number_of_seconds(bad):
    with pytest.raises(ValueError, match="query budget must be 0"):
        QueryBudget(bad)


# ------------------------------------------------------------------ the window runner
class _Source:
    """Answers after ``delay`` seconds, or raises ``error``: records the windows it was asked."""

    def __init__(self, delay=0.0, error=None):
        self.delay, self.error, self.asked = delay, error, 0

    def fetch(self, features, refs, begin, end, step):
        from ai4dl.sources.prometheus_types import PodSamples

        self.asked += 1
        time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        import numpy as np
        return PodSamples(tuple(f.name for f in features), np.zeros(0), begin, end, step, (),
                          np.zeros((0, 0, len(features))), 1, [], {})


def _runner(source, budget):
    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.runtime import WindowRunner
    from ai4dl.controller.runtime_window import WindowReport

    class Custom:
        def __init__(self):
            self.statuses = []

        def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, body,
                                                  **_):
            self.statuses.append(body["status"])
            return RawAnswer()

    r = WindowRunner(None, Custom(), source, "ns", "pm", key=StateKey.generate(),
                     query_budget_seconds=budget)
    r.period_seconds = int(P)
    return r, WindowReport


def _spec():
    from ai4dl.crd_spec import PhaseModelSpec

    return PhaseModelSpec.model_validate({"selector": {"matchLabels": {"app": "x"}},
                                          "stepSeconds": 15, "windowSeconds": int(P)})


def _fetch(runner, report_cls, start):
    from ai4dl.controller.pods import Container, PodInfo

    pod = PodInfo(namespace="ns", name="p", uid="u", phasemodel="pm",
                  containers=[Container("main", {}, {})], labels={"app": "x"}, running=True)
    report = report_cls(start)
    return runner._fetch({"status": {}}, _spec(), report, [pod], 4, 0), report


def test_a_slow_query_is_used_then_its_phasemodel_rests_with_the_cause():
    source = _Source(delay=0.3)
    runner, report_cls = _runner(source, budget=0.1)
    (samples, _, failed), _ = _fetch(runner, report_cls, 600.0)
    assert failed is None and samples == {}             # the answer paid for is used
    resting = runner._resting({"status": {}}, _spec(), report_cls(660.0))
    assert resting is not None and resting.degraded_reason == OVER_BUDGET
    assert "over its budget of 0.102 s (--query-budget-seconds 0.1 + 2 ms per container)" in \
        resting.error, resting.error
    status = runner.custom.statuses[-1]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", OVER_BUDGET)
    assert runner._resting({"status": {}}, _spec(), report_cls(720.0)) is None
    assert source.asked == 1


def test_a_query_prometheus_timed_out_is_the_phasemodels_cause_not_prometheus():
    from ai4dl.sources.prometheus_types import PrometheusQueryTimeout

    source = _Source(error=PrometheusQueryTimeout("http://prom", "query timed out in query "
                                                  "execution", "timeout", 503))
    runner, report_cls = _runner(source, budget=5.0)
    (_, _, failed), _ = _fetch(runner, report_cls, 600.0)
    assert failed.degraded_reason == "QueryTimeout"
    assert failed.error.startswith("Prometheus at http://prom rejected the query (timeout): "
                                   "query timed out in query execution; the query of window "
                                   "600: Prometheus gave up on it at its timeout")
    assert "1 window(s) from 660 on are not queried" in failed.error
    assert runner._resting({"status": {}}, _spec(), report_cls(660.0)) is not None
