"""The client-side write limit (ai4dl.controller.throttle.WriteBudget) and the window's write
deadline (ai4dl.controller.runtime_writes.PodWrites._apply): unit tests with a stand-in clock
and a recording stand-in for the API. On a real API server: tests/test_write_budget_integration.py
(an operator at 1 write a second leaves pods for the next window, counted, and serves them
there)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ai4dl.controller import runtime_writes
from ai4dl.controller.plan_types import ContainerPlan, PodPlan, WindowPlan
from ai4dl.controller.pods import A_STATE, Container, PodInfo
from ai4dl.controller.records import PendingRecords
from ai4dl.controller.runtime_window import WindowReport
from ai4dl.controller.throttle import WriteBudget
from test_write_order import _Api, _Key


class _Clock:
    """Monotonic and wall clock in one; ``sleep`` moves both."""

    def __init__(self, t: float = 1000.0):
        self.t = t
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


def _budget(qps: float, burst: int) -> tuple[WriteBudget, _Clock]:
    clock = _Clock()
    return WriteBudget(qps, burst, clock=clock, sleep=clock.sleep, wall=clock), clock


def test_the_burst_is_free_then_writes_wait_their_turn():
    budget, clock = _budget(qps=10, burst=5)
    assert budget.take(5) and clock.slept == []          # a quiet bucket: the burst at once
    assert budget.take(3)
    assert clock.slept == [pytest.approx(0.3)]           # 3 tokens at 10/s
    assert budget.take(1)
    assert clock.slept[-1] == pytest.approx(0.1)
    assert budget.waited == pytest.approx(0.4)
    clock.t += 100                                       # a quiet spell refills to the burst
    assert budget.take(5) and len(clock.slept) == 2


def test_tokens_that_come_after_the_deadline_are_neither_waited_for_nor_taken():
    budget, clock = _budget(qps=1, burst=3)
    assert budget.take(3)
    assert not budget.take(2, deadline=clock.t + 1.5)    # 2 s of waiting: past the deadline
    assert clock.slept == []                             # no wait, nothing reserved
    assert budget.take(1, deadline=clock.t + 1.5)        # 1 s: in time
    assert clock.slept == [pytest.approx(1.0)]
    assert not budget.take(1, deadline=clock.t)          # the window is already over
    assert WriteBudget(0, 1, wall=clock).take(1000, deadline=clock.t + 0.1)   # qps 0: no limit
    assert not WriteBudget(0, 1, wall=clock).take(1, deadline=clock.t)


def test_a_pod_with_more_writes_than_the_burst_takes_a_full_bucket():
    budget, clock = _budget(qps=2, burst=4)
    assert budget.take(10)
    assert budget.take(4)
    assert clock.slept == [pytest.approx(2.0)]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        WriteBudget(-1, 5)
    with pytest.raises(ValueError):
        WriteBudget(5, 0)


def test_threads_share_one_budget():
    """Reservations are taken under the lock: 4 threads x 5 tokens at 10/s past a burst of 10
    wait 1 s in all, whoever goes first."""
    budget, clock = _budget(qps=10, burst=10)
    lock = threading.Lock()
    slept: list[float] = []

    def sleep(seconds):          # records only: the threads must not move the shared clock
        with lock:
            slept.append(seconds)

    budget._sleep = sleep
    threads = [threading.Thread(target=budget.take, args=(5,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(slept) == [pytest.approx(0.5), pytest.approx(1.0)]
    assert budget.waited == pytest.approx(1.5)


# ------------------------------------------------------------------ the window's deadline
class _Writer(runtime_writes.PodWrites):
    def __init__(self, api, budget):
        self.core, self.key, self.namespace, self.name = api, _Key(), "ns", "pm"
        self.write_budget, self.had_pods = budget, True
        self.record_share, self.pending = 0.05, PendingRecords()
        self._noticed = {}
        self.events: list[tuple[str, str]] = []

    def _event(self, pod, etype, reason, message):
        self.events.append((pod.name, reason))


def _resize_plan(name: str, cpu_now: float, cpu_target: float) -> PodPlan:
    pod = PodInfo("ns", name, f"uid-{name}", "ns/pm",
                  [Container("main", {"cpu": cpu_now, "memory": 4 * 2**30}, {})],
                  resource_version="7")
    return PodPlan(pod, [ContainerPlan("main", target={"cpu": cpu_target},
                                       current={"cpu": cpu_now})],
                   resize={"spec": {"containers": [{"name": "main", "resources": {
                       "requests": {"cpu": f"{cpu_target:g}"}}}]}},
                   annotations={A_STATE: json.dumps({"window": 1200.0})},
                   events=[("Normal", "Resized", f"cpu {cpu_now:g}→{cpu_target:g}")])


def test_pods_the_deadline_does_not_reach_wait_for_the_next_window_largest_changes_first(
        monkeypatch):
    """A limit of 6 writes (the burst) then 1 a second, and a deadline 0.5 s away: the two pods
    with the largest changes get their 3 writes each (record, resize, Event); the other two are
    left whole for the next window and counted as window-deadline."""
    monkeypatch.setattr(runtime_writes, "WRITERS", 1)    # one writer: a deterministic order
    api = _Api()
    w = _Writer(api, WriteBudget(qps=1, burst=6))
    plans = [_resize_plan("small", 2.0, 1.8), _resize_plan("large", 2.0, 0.5),
             _resize_plan("medium", 2.0, 1.0), _resize_plan("tiny", 2.0, 1.9)]
    report = WindowReport(1200.0)
    w._apply(WindowPlan(plans, ("cpu",)), None, report, [{} for _ in plans],
             deadline=time.time() + 0.5)
    assert report.resized == 2
    assert report.skipped == {"window-deadline": 2}
    assert [e for e in w.events] == [("large", "Resized"), ("medium", "Resized")]
    # (the stand-in API has one resourceVersion for all its pods: the second pod's writes
    # meet a 409 and re-read first, as on a real pod someone else wrote)
    assert [k for k, *_ in api.calls if k == "resize"] == ["resize"] * 2
    assert report.error is None


def test_a_window_past_its_deadline_writes_nothing(monkeypatch):
    api = _Api()
    w = _Writer(api, WriteBudget())                       # no rate limit: the deadline alone
    plans = [_resize_plan("a", 2.0, 1.0)]
    report = WindowReport(1200.0)
    w._apply(WindowPlan(plans, ("cpu",)), None, report, [{}], deadline=time.time() - 0.01)
    assert api.calls == [] and w.events == []
    assert report.skipped == {"window-deadline": 1} and report.resized == 0
    report = WindowReport(1200.0)
    w._apply(WindowPlan(plans, ("cpu",)), None, report, [{}], deadline=None)
    assert report.resized == 1
