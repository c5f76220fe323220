"""The fair queue and scheduler of window work (ai4dl.controller.fairness): pure, deterministic
unit tests (the integration test against a real API server is tests/test_faults_fairness.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ai4dl.controller.fairness import (FairQueue, WindowScheduler, late_condition,
                                       period_seconds, throttled_condition)


def drain(q: FairQueue, done_each: bool = True) -> list:
    out = []
    while (got := q.pop()) is not None:
        out.append(got)
        if done_each:
            q.done(got[0])
    return out


def test_round_robin_between_namespaces_fifo_within():
    q = FairQueue()
    for i in range(5):
        q.push("flood", f"f{i}")
    q.push("b", "b0")
    q.push("c", "c0")
    q.push("c", "c1")
    order = [item for _, item in drain(q)]
    assert order == ["f0", "b0", "c0", "f1", "c1", "f2", "f3", "f4"]
    assert len(q) == 0 and q.in_flight() == 0


def test_a_namespace_arriving_late_waits_one_turn_per_other_namespace():
    """300 windows of one namespace queued first; another namespace's window is next after at
    most one more of theirs (its turn comes before the flood's second)."""
    q = FairQueue()
    for i in range(300):
        q.push("flood", i)
    assert q.pop() == ("flood", 0)
    q.push("tenant", "mine")
    q.done("flood")
    assert q.pop() == ("tenant", "mine")
    q.done("tenant")
    assert [item for _, item in drain(q)] == list(range(1, 300))


def test_the_per_namespace_limit_keeps_workers_for_others():
    q = FairQueue(per_tenant_limit=2)
    for i in range(4):
        q.push("flood", i)
    assert [q.pop(), q.pop(), q.pop()] == [("flood", 0), ("flood", 1), None]   # limit reached
    assert q.in_flight("flood") == 2 and q.depth("flood") == 2
    q.push("tenant", "t")
    assert q.pop() == ("tenant", "t")          # a third worker was free for the other one
    q.done("flood")
    assert q.pop() == ("flood", 2)


def test_the_turn_survives_namespaces_that_go_idle():
    q = FairQueue()
    for t in ("a", "b", "c"):
        q.push(t, t + "0")
    q.push("c", "c1")
    assert q.pop() == ("a", "a0")
    q.done("a")                                # a is idle: dropped from the ring
    assert q.tenants_waiting() == 2
    assert q.pop() == ("b", "b0")
    q.done("b")
    q.push("a", "a1")                          # a comes back: at the end of the ring
    assert [item for _, item in drain(q)] == ["c0", "a1", "c1"]


def test_remove_withdraws_a_queued_item_only():
    q = FairQueue()
    q.push("a", 1)
    q.push("a", 2)
    assert q.remove("a", 1) is True and q.remove("a", 1) is False
    assert q.remove("nobody", 1) is False
    assert drain(q) == [("a", 2)]


@pytest.mark.parametrize("window, minimum, period", [
    (4, 60, 60), (7, 60, 63), (10, 60, 60), (60, 60, 60), (600, 60, 600), (4, 0, 4), (13, 10, 13),
])
def test_period_is_a_multiple_of_the_window_not_below_the_minimum(window, minimum, period):
    assert period_seconds(window, minimum) == period
    assert period % window == 0 and (period >= minimum or period == window)


def test_conditions_name_the_minimum_and_the_cause():
    t = throttled_condition(4, 60, 60.0)
    assert t[:3] == ("WindowThrottled", "True", "BelowMinimumWindow")
    assert "windowSeconds 4 is below the operator's minimum window of 60 s" in t[3]
    assert "served every 60 s" in t[3]
    assert throttled_condition(600, 600, 60.0)[1] == "False"
    late = late_condition(7.25, 5.0, "it waited")
    assert late[:3] == ("WindowsLate", "True", "WaitedForWorker")
    assert late[3].startswith("a window started 7.2 s after it was due "
                              "(tolerance 5 s): it waited")
    named = late_condition(7.25, 5.0, "it waited", "2026-12-05T10:00:00Z")
    assert named[3].startswith("the window of 2026-12-05T10:00:00Z started 7.2 s after")
    assert late_condition(4.9, 5.0, "x")[:3] == ("WindowsLate", "False", "OnTime")
    # on time, the condition is the same whatever the lateness: no status write per window
    assert late_condition(0.2, 5.0, "x") == late_condition(4.9, 5.0, "y")


def test_scheduler_runs_namespaces_in_turn_on_bounded_workers():
    """A flood of blocking jobs from one namespace, then one from another: the other's starts
    as soon as a worker is free for it (the flood holds at most workers - 1), and never more
    than ``workers`` jobs run at once."""
    started: list[str] = []
    running = [0]
    peak = [0]
    lock = threading.Lock()

    def job(name: str):
        def fn():
            with lock:
                started.append(name)
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.02)
            with lock:
                running[0] -= 1
            return name
        return fn

    async def main():
        depths = []
        s = WindowScheduler(3, on_change=lambda s: depths.append(len(s.queue)))
        flood = [asyncio.ensure_future(s.run("flood", job(f"f{i}"))) for i in range(20)]
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        mine = await s.run("tenant", job("t"))
        waited = time.perf_counter() - t0
        results = await asyncio.gather(*flood)
        return mine, waited, results, depths

    mine, waited, results, depths = asyncio.run(main())
    assert mine == "t" and results == [f"f{i}" for i in range(20)]
    assert started.index("t") <= 2          # behind at most the flood's two first jobs
    assert waited < 0.5                     # not behind 20 x 20 ms / 2 workers
    assert peak[0] <= 3
    assert max(depths) >= 17 and depths[-1] == 0


def test_scheduler_withdraws_cancelled_jobs_and_passes_errors():
    ran: list[str] = []
    gate = threading.Event()

    def blocker():
        gate.wait(5)
        ran.append("blocker")

    def boom():
        raise RuntimeError("bad window")

    async def main():
        s = WindowScheduler(1)
        first = asyncio.ensure_future(s.run("a", blocker))
        queued = asyncio.ensure_future(s.run("a", lambda: ran.append("never")))
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert len(s.queue) == 0
        gate.set()
        await first
        with pytest.raises(RuntimeError, match="bad window"):
            await s.run("a", boom)
        assert s.queue.in_flight() == 0

    asyncio.run(main())
    assert ran == ["blocker"]


@pytest.mark.parametrize("args, message", [
    (["--window-workers", "0"], "--window-workers 0: must be 1 or more"),
    (["--min-window-seconds", "-1"], "--min-window-seconds -1: must be a number of seconds"),
    (["--window-late-seconds", "nan"], "--window-late-seconds nan: must be a number of seconds"),
    # the write limit (ai4dl.controller.throttle)
    (["--kube-api-qps", "-1"], "--kube-api-qps -1: must be writes per second, 0 (no limit) or more"),
    (["--kube-api-qps", "nan"], "--kube-api-qps nan: must be writes per second"),
    (["--kube-api-burst", "0"], "--kube-api-burst 0: must be 1 or more"),
    # the window's writes besides resizes (ai4dl.controller.records)
    (["--pod-record-share", "1.5"], "--pod-record-share 1.5: must be a share of the pods"),
    (["--pod-record-share", "nan"], "--pod-record-share nan: must be a share of the pods"),
])
def test_bad_flags_are_one_line_errors(args, message, capsys):
    from ai4dl.controller.__main__ import main

    assert main(["--prometheus-url", "http://127.0.0.1:9", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ai4dl-operator: error: {message}") and err.count("\n") == 1, err


class _Runner:
    """Stands in for WindowRunner: records what one window's work was asked to do."""

    def __init__(self):
        self.namespace, self.name = "ns", "pm"
        self.conditions: list = []
        self.calls: list[float] = []
        self.deadlines: list[float] = []

    def run(self, snapshot, now=None, deadline=None):
        from ai4dl.controller.runtime_window import WindowReport

        self.calls.append(now)
        self.deadlines.append(deadline)
        return WindowReport(now)


def test_a_window_started_late_handles_the_latest_settled_window_and_says_why(monkeypatch):
    """The work of a window due at 1001 (boundary 1000 + settle 1) that only starts at 1013.5,
    for a PhaseModel served every 12 s: it handles the latest window of its period grid whose
    boundary + settle has passed (1008, not the stale 1000), and WindowsLate says how late and
    that it waited for a worker behind its own namespace's windows."""
    from ai4dl.controller import handlers, metrics

    runner = _Runner()
    monkeypatch.setattr(handlers.time, "time", lambda: 1013.5)
    monkeypatch.setitem(handlers.CONFIG, "window_late_seconds", 5.0)
    throttled = throttled_condition(4, 12, 10.0)
    boundary = handlers._run_window(runner, {}, due=1001.0, grid=12, settle=1.0,
                                    throttled=throttled, ahead=(40, 1, 40), workers=2,
                                    queued=1001.0)
    assert boundary == 1008.0 and runner.calls == [1009.0]
    # its pod writes end when the next window of its grid is due: its boundary + the settle
    assert runner.deadlines == [1021.0]
    assert runner.conditions[0] == throttled
    late = runner.conditions[1]
    assert late[:3] == ("WindowsLate", "True", "WaitedForWorker")
    assert "the window of 1970-01-01T00:16:48Z started 12.5 s after it was due" in late[3]
    assert "40 windows of 1 namespaces were queued when it was due, 40 of them from this " \
           "namespace" in late[3]
    assert metrics.WINDOW_LATENESS.labels("ns", "pm", "started")._value.get() == 12.5
    metrics.forget_phasemodel("ns", "pm")


def test_a_window_started_on_time_is_on_time(monkeypatch):
    from ai4dl.controller import handlers

    runner = _Runner()
    monkeypatch.setattr(handlers.time, "time", lambda: 1001.2)
    boundary = handlers._run_window(runner, {}, due=1001.0, grid=10, settle=1.0,
                                    throttled=throttled_condition(10, 10, 0.0),
                                    ahead=(0, 0, 0), workers=4, queued=1001.0)
    assert boundary == 1000.0 and runner.calls == [1001.0]
    assert runner.conditions[1][:3] == ("WindowsLate", "False", "OnTime")


def test_every_phasemodel_queries_through_one_connection_pool(monkeypatch):
    """One source and one HTTP session for all PhaseModels (a session each kept a connection
    to Prometheus open per PhaseModel that had queried), its pool as large as the window
    workers that query at once."""
    from ai4dl.controller import handlers

    monkeypatch.setattr(handlers, "_SESSION", [])
    monkeypatch.setattr(handlers, "_SOURCE", [])
    monkeypatch.setitem(handlers.CONFIG, "prometheus_url", "http://prometheus.example:9090")
    monkeypatch.setitem(handlers.CONFIG, "window_workers", 3)
    one, two = handlers._source(), handlers._source()
    assert one is two and one._session is handlers._prometheus_session()
    adapter = one._session.get_adapter("http://prometheus.example:9090")
    assert adapter._pool_maxsize == 3
