"""The operator's one window loop over the PhaseModels' index (ai4dl.controller.window_loop):
when each PhaseModel's window is due, one in flight per PhaseModel, PhaseModels that come, go
or are created anew under the same name. The loop on the real operator is exercised by every
operator integration test; tests/test_idle_phasemodels.py measures what it keeps."""

from __future__ import annotations

import asyncio

import pytest

from ai4dl.controller.runtime_window import window_start
from ai4dl.controller.window_loop import TICK_SECONDS, Due, WindowLoop, next_due


def entry(uid: str = "u1", window: int = 10) -> dict:
    return {"spec": {"windowSeconds": window}, "status": {}, "metadata": {"uid": uid}}


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Recorder:
    """make_runner / run_window / forget, recording their calls; a window returns its
    boundary, or waits for ``release`` when ``hold`` is set."""

    def __init__(self, refuse: set | None = None):
        self.made, self.windows, self.forgotten = [], [], []
        self.refuse = refuse or set()
        self.hold = False
        self.release = None

    def make_runner(self, ns: str, name: str):
        if (ns, name) in self.refuse:
            raise RuntimeError("no source")
        self.made.append((ns, name))
        return (ns, name, len(self.made))

    async def run_window(self, served, got: dict, due: Due) -> float:
        self.windows.append((served.runner, due))
        if self.hold:
            await self.release.wait()
        return window_start(due.at - due.settle, due.grid)

    def forget(self, ns: str, name: str) -> None:
        self.forgotten.append((ns, name))


def loop_with(entries: dict, clock: Clock, rec: Recorder, **kw) -> WindowLoop:
    return WindowLoop(entries, rec.make_runner, rec.run_window, rec.forget, clock=clock, **kw)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_next_due_handles_the_window_just_ended_after_a_start_near_a_boundary():
    got = next_due(10, 0.0, 1.0, None, now=1002.0)
    assert got == Due(1002.0, 10, 10, 1.0)


def test_next_due_waits_for_the_next_boundary_late_in_a_window_and_after_a_window():
    assert next_due(10, 0.0, 1.0, None, now=1007.0) == Due(1011.0, 10, 10, 1.0)
    assert next_due(10, 0.0, 1.0, 1000.0, now=1002.0) == Due(1011.0, 10, 10, 1.0)


def test_next_due_handles_at_once_a_boundary_an_overrun_passed():
    # the window of 1000 ran until 1011.5: the boundary of 1010 is handled now (due at 1011)
    assert next_due(10, 0.0, 1.0, 1000.0, now=1011.5) == Due(1011.0, 10, 10, 1.0)


def test_next_due_serves_a_short_window_once_per_period_of_the_minimum():
    got = next_due(5, 30.0, 1.0, 990.0, now=1003.0)
    assert (got.at, got.grid, got.period) == (1021.0, 30, 30)


def test_a_phasemodel_gets_a_runner_and_its_windows_one_at_a_time():
    async def go():
        clock, rec = Clock(1002.0), Recorder()
        entries = {("ns", "pm"): [entry()]}
        loop = loop_with(entries, clock, rec)
        rec.hold, rec.release = True, asyncio.Event()
        loop.step()
        await settle()
        assert rec.made == [("ns", "pm")] and len(rec.windows) == 1
        clock.t = 1030.0            # still in flight: no second window
        loop.step()
        await settle()
        assert len(rec.windows) == 1
        rec.release.set()
        await settle()
        served = loop.served[("ns", "pm")]
        assert served.task is None and served.done == 1000.0
        # it ran past two boundaries, late in the third window: the next boundary's is next
        assert served.due.at == 1031.0
        clock.t = 1031.0
        loop.step()
        await settle()
        assert [w[1].at for w in rec.windows] == [1002.0, 1031.0]
        assert rec.made == [("ns", "pm")]       # one runner for its whole life
    asyncio.run(go())


def test_the_loop_sleeps_until_the_next_due_window_at_most_a_tick():
    async def go():
        clock, rec = Clock(1007.0), Recorder()
        loop = loop_with({("ns", "pm"): [entry(window=10)]}, clock, rec)
        assert loop.step() == pytest.approx(TICK_SECONDS)
        clock.t = 1010.5
        assert loop.step() == pytest.approx(0.5)     # due at 1011 (boundary + settle)
        assert rec.windows == []
    asyncio.run(go())


def test_a_phasemodel_gone_is_forgotten_and_its_queued_window_withdrawn():
    async def go():
        clock, rec = Clock(1002.0), Recorder()
        entries = {("ns", "pm"): [entry()], ("ns", "other"): [entry("u2")]}
        loop = loop_with(entries, clock, rec)
        rec.hold, rec.release = True, asyncio.Event()
        loop.step()
        await settle()
        task = loop.served[("ns", "pm")].task
        del entries[("ns", "pm")]
        loop.step()
        await settle()
        assert rec.forgotten == [("ns", "pm")] and task.cancelled()
        assert set(loop.served) == {("ns", "other")}
    asyncio.run(go())


def test_a_phasemodel_created_anew_under_its_name_starts_with_a_new_runner():
    async def go():
        clock, rec = Clock(1002.0), Recorder()
        entries = {("ns", "pm"): [entry("u1")]}
        loop = loop_with(entries, clock, rec)
        loop.step()
        await settle()
        entries[("ns", "pm")] = [entry("u2")]
        loop.step()
        await settle()
        assert rec.forgotten == [("ns", "pm")]
        assert [r[2] for r, _ in rec.windows] == [1, 2]     # the second window: a new runner
    asyncio.run(go())


def test_a_phasemodel_that_cannot_be_served_is_said_once_and_stops_no_other(caplog):
    async def go():
        clock, rec = Clock(1002.0), Recorder(refuse={("ns", "bad")})
        entries = {("ns", "bad"): [entry("u1")], ("ns", "good"): [entry("u2")]}
        loop = loop_with(entries, clock, rec)
        loop.step()
        loop.step()
        await settle()
        assert rec.made == [("ns", "good")] and len(rec.windows) == 1
    with caplog.at_level("ERROR", logger="ai4dl.operator"):
        asyncio.run(go())
    assert sum("ns/bad: cannot be served" in r.getMessage() for r in caplog.records) == 1


def test_a_failed_window_keeps_its_phasemodel_served():
    async def go():
        clock, rec = Clock(1002.0), Recorder()

        async def failing(served, got, due):
            raise RuntimeError("boom")
        loop = WindowLoop({("ns", "pm"): [entry()]}, rec.make_runner, failing, rec.forget,
                          clock=clock)
        loop.step()
        await settle()
        served = loop.served[("ns", "pm")]
        assert served.task is None and served.due.at == 1011.0
    asyncio.run(go())


def test_cancelling_the_loop_forgets_every_phasemodel():
    async def go():
        clock, rec = Clock(1007.0), Recorder()
        loop = loop_with({("ns", "a"): [entry("u1")], ("ns", "b"): [entry("u2")]}, clock, rec)
        task = asyncio.create_task(loop.run())
        await settle()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sorted(rec.forgotten) == [("ns", "a"), ("ns", "b")]
    asyncio.run(go())
