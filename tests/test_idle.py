"""Idle PhaseModels list their pods less often (issue 43 item 10): ai4dl.controller.idle on its
own, and the window runner that skips the LIST of an idle PhaseModel (a stand-in API that
counts LISTs; the operator's own count on a real API server is bench/bench_idle_phasemodels.py)."""

from __future__ import annotations

import json

import pytest

from ai4dl.controller import idle
from ai4dl.controller.idle import IDLE_AFTER, IDLE_AFTER_SECONDS, IDLE_EVERY, IdleLists
from fake_api import RawAnswer

W = 60.0


def lists(state: IdleLists, windows, woken=()) -> list[bool]:
    """Which of ``windows`` (their times) list, each LIST finding no pod."""
    out = []
    for t in windows:
        did = state.should_list(t, t in woken)
        if did:
            state.listed(t, 0)
        out.append(did)
    return out


def test_an_empty_phasemodel_lists_every_window_until_it_is_idle():
    state = IdleLists()
    first = int(IDLE_AFTER_SECONDS // W)            # windows listed before 300 s have passed
    assert all(lists(state, [i * W for i in range(first)]))
    assert state.idle(first * W)
    # idle: one LIST every IDLE_EVERY windows
    done = lists(state, [(first + i) * W for i in range(3 * IDLE_EVERY)])
    assert sum(done) == 3 and done[IDLE_EVERY - 1] and not any(done[:IDLE_EVERY - 1])


def test_three_windows_are_not_enough_without_the_seconds_nor_the_seconds_without_three():
    short = IdleLists()
    assert all(lists(short, [0, 10, 20, 30, 40]))            # 5 windows of 10 s: 40 s
    assert not short.idle(40)
    slow = IdleLists()
    assert all(lists(slow, [0, 3600]))                       # 2 windows, an hour apart
    assert not slow.idle(3600) and IDLE_AFTER == 3


def test_a_pod_found_ends_the_idleness():
    state = IdleLists(after_seconds=0)
    lists(state, [0, 60, 120])
    assert state.idle(120) and not state.should_list(180, False)
    assert state.should_list(240, True)                      # woken by admission
    state.listed(240, 2)
    assert not state.idle(300) and state.should_list(300, False)


def test_phasemodels_created_together_list_in_different_windows():
    """1,000 PhaseModels created at once go idle in the same window; their LISTs then spread
    over the IDLE_EVERY windows instead of all falling in every 10th one."""
    states = [IdleLists(offset=idle.spread(f"ns{k % 10}", f"pm{k}")) for k in range(1000)]
    first = int(IDLE_AFTER_SECONDS // W)            # windows listed before 300 s have passed
    per_window = [sum(lists(s, [t * W])[0] for s in states) for t in range(first + 5 * IDLE_EVERY)]
    assert per_window[:first] == [1000] * first         # not idle yet: every window
    steady = per_window[first + IDLE_EVERY:]
    assert max(steady) <= 150 and min(steady) >= 50, steady    # about 100 a window
    assert sum(steady) == 1000 * len(steady) // IDLE_EVERY      # each once every 10 windows
    assert len({idle.spread(f"ns{k % 10}", f"pm{k}") for k in range(1000)}) == IDLE_EVERY


def test_never_idle_with_an_infinite_delay():
    state = IdleLists(after_seconds=float("inf"))
    assert all(lists(state, [i * W for i in range(100)]))


def test_only_served_phasemodels_are_woken_and_once():
    idle.serve("ns", "pm")
    try:
        idle.wake("ns", "pm")
        idle.wake("ns", "not-served")                        # a forged review: nothing kept
        assert idle.take_woken("ns", "pm") and not idle.take_woken("ns", "pm")
        assert ("ns", "not-served") not in idle._WOKEN
    finally:
        idle.forget("ns", "pm")
    idle.wake("ns", "pm")
    assert not idle.take_woken("ns", "pm")


# ------------------------------------------------------------------ the window runner
class _Answer:
    def __init__(self, items):
        self.data = json.dumps({"items": items, "metadata": {}}).encode()

    def release_conn(self):
        pass


class _Core:
    def __init__(self):
        self.lists, self.items = 0, []

    def list_namespaced_pod(self, namespace, **_):
        self.lists += 1
        return _Answer(self.items)


class _Custom:
    def patch_namespaced_custom_object_status(self, *args, **_):
        return RawAnswer()


@pytest.fixture()
def runner():
    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.runtime import WindowRunner

    r = WindowRunner(_Core(), _Custom(), None, "ns", "pm", key=StateKey.generate(),
                     idle_after_seconds=0)
    r.period_seconds = int(W)
    r.idle.offset = 0       # its place among the IDLE_EVERY windows: the first, for the counts
    idle.serve("ns", "pm")
    yield r
    idle.forget("ns", "pm")


def body():
    return {"metadata": {"name": "pm", "namespace": "ns", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "stepSeconds": 15,
                     "windowSeconds": int(W), "policy": {"mode": "InPlace"}}, "status": {}}


def test_an_idle_phasemodel_skips_its_list_until_admission_wakes_it(runner):
    for i in range(IDLE_AFTER):
        runner.run(body(), now=(i + 1) * W + 1)
    assert runner.core.lists == IDLE_AFTER
    for i in range(IDLE_AFTER, IDLE_AFTER + 4):
        report = runner.run(body(), now=(i + 1) * W + 1)
        assert report.pods == 0
    assert runner.core.lists == IDLE_AFTER                  # idle: no LIST
    idle.wake("ns", "pm")                                    # admission saw a pod created
    runner.run(body(), now=(IDLE_AFTER + 5) * W + 1)
    assert runner.core.lists == IDLE_AFTER + 1


def test_an_empty_phasemodel_writes_its_status_once():
    """Issue 43 item 10: every window of an empty PhaseModel wrote its status — the savings
    counted a window of nothing (all amounts 0) and WindowsLate's message carried the
    lateness — so 1,000 empty PhaseModels were 1,000 status PATCHes a window."""
    from ai4dl.controller.fairness import late_condition, throttled_condition
    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.runtime import WindowRunner

    class Custom:
        def __init__(self):
            self.statuses = []

        def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, b,
                                                  **_):
            self.statuses.append(b["status"])
            return RawAnswer()

        def list_namespaced_custom_object(self, *args, **_):
            return {"items": []}

    r = WindowRunner(_Core(), Custom(), None, "ns", "pm", key=StateKey.generate(),
                     idle_after_seconds=float("inf"))
    r.period_seconds = int(W)
    b = body()
    for i, lateness in enumerate((0.3, 1.7, 0.9, 4.2, 0.1)):
        r.conditions = [throttled_condition(int(W), int(W), 0.0),
                        late_condition(lateness, 5.0, "x")]
        r.run(b, now=(i + 1) * W + 1)
        b["status"] = r.custom.statuses[-1]
    assert r.core.lists == 5 and len(r.custom.statuses) == 1, r.custom.statuses
    assert "savings" not in r.custom.statuses[0]
    # Late windows, each with its own figures (a queue of 1,000 windows for 4 workers): the
    # status is written when WindowsLate turns True and when it turns back, not per window.
    for i, lateness in enumerate((12.5, 25.1, 7.0, 0.4), start=6):
        r.conditions = [throttled_condition(int(W), int(W), 0.0),
                        late_condition(lateness, 5.0, f"waited behind {i} windows",
                                       f"window {i}")]
        r.run(b, now=i * W + 1)
        b["status"] = r.custom.statuses[-1]
    late = [next(c for c in s["conditions"] if c["type"] == "WindowsLate")
            for s in r.custom.statuses]
    assert [(c["status"], c["reason"]) for c in late] == [
        ("False", "OnTime"), ("True", "WaitedForWorker"), ("False", "OnTime")], late
    assert late[1]["message"].startswith("the window of window 6 started 12.5 s")
