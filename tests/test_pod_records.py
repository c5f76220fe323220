"""Which of a window's pod writes are sent, and the records kept in memory until they are
(ai4dl.controller.records; the writes: ai4dl.controller.runtime_writes). Unit tests with the
recording stand-in API of tests/test_write_order.py; on a real API server and Prometheus:
tests/test_operator_integration.py::test_pod_records_wait_in_memory_and_a_restart_leaves_the_window
(an operator with --pod-record-share 0, then restarted within a window it resized in)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from ai4dl.controller import runtime_writes
from ai4dl.controller.plan_types import ContainerPlan, PodPlan, WindowPlan
from ai4dl.controller.pods import (A_LAST_APPLIED, A_PHASE, A_STATE, Container, PodInfo)
from ai4dl.controller.records import (MARKER, PendingRecords, assume_raised, choose_writes,
                                      extra_writes, record_needed, unrecorded_window)
from ai4dl.controller.runtime_window import WindowReport
from ai4dl.controller.throttle import WriteBudget
from test_write_order import _Answer, _Api, _Key

ORIG = {"main": {"cpu": 2.0, "memory": 4 * 2**30}}


def _pod(name: str = "p", cpu: float = 2.0, limits: dict | None = None,
         state: dict | None = None, problem: str | None = None) -> PodInfo:
    pod = PodInfo("ns", name, f"uid-{name}", "pm",
                  [Container("main", {"cpu": cpu, "memory": 4 * 2**30}, limits or {})],
                  annotations={A_PHASE: "1"}, resource_version="7")
    pod._state = {"window": 600.0, "orig": ORIG} if state is None else state
    pod.state_problem = problem
    return pod


def _resize(pod: PodInfo, part: str = "requests", **values) -> PodPlan:
    cpu_now = pod.containers[0].requests["cpu"]
    target = float(values.get("cpu", cpu_now))
    return PodPlan(pod, [ContainerPlan("main", target={"cpu": target},
                                       current={"cpu": cpu_now})],
                   resize={"spec": {"containers": [{"name": "main", "resources": {
                       part: {r: str(v) for r, v in values.items()}}}]}},
                   annotations={A_STATE: json.dumps({"window": 1200.0, "orig": ORIG}),
                                A_LAST_APPLIED: "{}", A_PHASE: "2"},
                   events=[("Normal", "Resized", "cpu")])


# ------------------------------------------------------------------ which records are needed
def test_a_recorded_pods_resize_needs_no_record_first():
    assert not record_needed(_resize(_pod(), cpu=1))
    assert not record_needed(_resize(_pod(), cpu=3)), "an increase: the marker covers it"
    assert not record_needed(_resize(_pod(limits={"memory": 4 * 2**30}), part="limits",
                                      memory="8Gi"))


@pytest.mark.parametrize("why, plan", [
    ("no record of the operator's yet (the authors' requests)",
     lambda: _resize(_pod(state={}), cpu=1)),
    ("a record that is not the operator's", lambda: _resize(_pod(problem="forged"), cpu=1)),
    ("a memory limit lowered (the kubelet may refuse it)",
     lambda: _resize(_pod(limits={"memory": 4 * 2**30}), part="limits", memory="2Gi")),
])
def test_records_a_pod_needs_before_its_resize(why, plan):
    assert record_needed(plan()), why


def test_a_take_back_needs_its_record():
    p = _resize(_pod(), cpu=1)
    p.refused = "the kubelet refused it"
    assert record_needed(p)


# ------------------------------------------------------------------ the window's budget
def test_the_budget_is_a_share_of_the_pods_with_a_floor_and_zero_means_none():
    assert extra_writes(2000, 0.05) == 97           # 100, less the PhaseModel's own 3
    assert extra_writes(10_000, 0.05) == 497
    assert extra_writes(10, 0.05) == 47             # the floor: a small PhaseModel as before
    assert extra_writes(10_000, 0.0) == 0


def test_needed_records_and_warnings_go_first_then_records_then_resized_events():
    needs = _resize(_pod("new", state={}), cpu=1)             # needed: no record yet
    warned = _resize(_pod("warned"), cpu=1)
    warned.events.append(("Warning", "ResizeWaiting", "..."))
    optional = [_resize(_pod(f"o{i}"), cpu=1) for i in range(2)]
    alone_old = PodPlan(_pod("old"), [], annotations={A_PHASE: "3"})
    alone_new = PodPlan(_pod("young"), [], annotations={A_PHASE: "3"})
    work = [needs, warned, *optional, alone_new, alone_old]
    # 6 extra writes: the needed record and the Warning take 2; 4 are left: the resized pods'
    # records (warned, o0, o1), then the oldest record alone; none for the Resized Events
    choice = choose_writes(work, 6, since={"uid-old": 600.0})
    assert all(p.annotations for p in (needs, warned, *optional, alone_old))
    assert [p.pod.name for p in choice.deferred] == ["young"]
    assert alone_new.deferred[A_PHASE] == "3" and not alone_new.annotations
    assert choice.unrecorded == 0 and choice.unevented == 4
    assert choice.needed == {needs.pod.uid}     # what the metric counts as needed
    assert warned.events == [("Warning", "ResizeWaiting", "...")]
    assert not any(e[1] == "Resized" for p in work for e in p.events)


def test_a_resize_whose_record_does_not_fit_is_sent_alone():
    work = [_resize(_pod(f"p{i}"), cpu=1) for i in range(3)]
    choice = choose_writes(work, 1, since={})
    assert work[0].annotations and work[0].events == []
    assert [p.pod.name for p in choice.deferred] == ["p1", "p2"]
    assert choice.unrecorded == 2 and choice.unevented == 3


def test_with_room_everything_is_written_as_before():
    work = [_resize(_pod(f"p{i}"), cpu=1) for i in range(10)]
    choice = choose_writes(work, extra_writes(10, 0.05), since={})
    assert choice.deferred == [] and choice.unevented == 0 and choice.unrecorded == 0
    assert all(p.annotations and p.events for p in work)


# ------------------------------------------------------------------ records kept in memory
def test_a_pending_record_is_read_as_written_until_someone_changes_the_pod():
    pending = PendingRecords()
    pod = _pod()
    pending.defer(pod, {A_STATE: json.dumps({"window": 1200.0, "orig": ORIG,
                                             "lastIncrease": {"main": {"cpu": 600.0}}}),
                        A_PHASE: "2"}, 1200.0)
    again = _pod()                              # the next window's read of the same pod
    pending.overlay([again])
    assert again.annotations[A_PHASE] == "2"
    assert again.state()["window"] == 1200.0 and again.state()["lastIncrease"]
    tampered = _pod()
    tampered.annotations[A_PHASE] = "7"         # its owner changed an owned annotation
    pending.overlay([tampered])
    assert tampered.annotations[A_PHASE] == "7" and tampered.state()["window"] == 600.0
    assert len(pending) == 0, "a changed pod's pending record is dropped"


@pytest.mark.parametrize("written", [{}, {"window": 600.0}], ids=["none", "without-orig"])
def test_authors_requests_only_in_memory_still_need_their_record_before_the_first_resize(
        written):
    """A pod's first record left out (no resize then) is read back from memory the next
    window, the authors' requests with it; its first resize must still write it first, or a
    restart reads the lowered requests as the authors'."""
    pending = PendingRecords()
    pending.defer(_pod(state=written), {A_STATE: json.dumps({"window": 1200.0, "orig": ORIG}),
                                        A_PHASE: "2"}, 1200.0)
    again = _pod(state=dict(written))
    pending.overlay([again])
    assert again.state()["orig"] == ORIG            # planned from memory, as before
    assert record_needed(_resize(again, cpu=1))
    recorded = _pod()                               # its record written: memory changes nothing
    pending.defer(recorded, {A_STATE: json.dumps({"window": 1800.0, "orig": ORIG})}, 1800.0)
    again = _pod()
    pending.overlay([again])
    assert not record_needed(_resize(again, cpu=1))


def test_pending_records_of_gone_pods_are_dropped_and_merged_when_deferred_again():
    pending = PendingRecords()
    pending.defer(_pod("a"), {A_PHASE: "2"}, 600.0)
    pending.defer(_pod("b"), {A_PHASE: "2"}, 600.0)
    pending.defer(_pod("b"), {A_STATE: "{}"}, 1200.0)
    assert pending.since() == {"uid-a": 600.0, "uid-b": 600.0}
    pending.overlay([_pod("b")])
    assert len(pending) == 1
    plan = PodPlan(_pod("b"), [])
    pending.carry([plan])
    assert plan.annotations == {A_PHASE: "2", A_STATE: "{}"}


def test_after_a_restart_a_record_older_than_the_marker_reads_as_raised_in_that_window():
    """An increase sent without its record is lost with the process: a pod whose record is
    older than the last window with unrecorded resizes is read as raised in that window (its
    decreases wait the cool-down); a record as new as the marker, or read with its pending
    record, is as it says."""
    stale, fresh, pending = _pod("stale"), _pod("fresh"), _pod("pending")
    fresh._state = {"window": 1800.0, "orig": ORIG}
    assume_raised([stale, fresh, pending], 1800.0, overlaid={"uid-pending"})
    assert stale.state()["lastIncrease"] == {"main": {"cpu": 1800.0, "memory": 1800.0}}
    assert "lastIncrease" not in fresh.state() and "lastIncrease" not in pending.state()
    untouched = _pod("x")
    assume_raised([untouched], None, overlaid=set())
    assert "lastIncrease" not in untouched.state()


def test_only_an_earlier_processs_marker_reads_records_as_raised(monkeypatch):
    """The process that wrote the marker has every record it did not write in memory: its own
    marker must not hold the decreases of pods recorded long ago (every window would)."""
    monkeypatch.setattr(runtime_writes, "WRITERS", 1)
    w = _Writer(_StatusApi(), share=0.0)
    assert w.pending.earlier_marker(600.0, 1200.0) == 600.0    # a new process: not its own
    w._apply(WindowPlan([_resize(_pod("p"), cpu=1)], ("cpu",)), None, WindowReport(1200.0),
             [{}])
    assert w.pending.marked == 1200.0
    assert w.pending.earlier_marker(1200.0, 1800.0) is None
    assert w.pending.earlier_marker(None, 1800.0) is None
    # a marker after the window is no operator's (written by hand): it holds nothing
    assert w.pending.earlier_marker(9e9, 1800.0) is None


# ------------------------------------------------------------------ the writes
class _StatusApi(_Api):
    def __init__(self, fail: bool = False):
        super().__init__()
        self.fail = fail

    def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, body,
                                              _preload_content=False):
        self.calls.append(("status", None, body))
        if self.fail:
            raise ApiException(status=500, reason="boom")
        return _Answer({})


class _Writer(runtime_writes.PodWrites):
    def __init__(self, api, share: float):
        self.core = self.custom = api
        self.key, self.namespace, self.name = _Key(), "ns", "pm"
        self.write_budget, self.had_pods = WriteBudget(), True
        self.record_share, self.pending = share, PendingRecords()
        self._noticed = {}
        self.events: list[tuple[str, str]] = []

    def _event(self, pod, etype, reason, message):
        self.events.append((pod.name, reason))


def test_resizes_without_records_follow_the_window_marker_and_the_records_wait(monkeypatch):
    monkeypatch.setattr(runtime_writes, "WRITERS", 1)
    api = _StatusApi()
    w = _Writer(api, share=0.0)
    plans = [_resize(_pod(f"p{i}"), cpu=1) for i in range(3)]
    report = WindowReport(1200.0)
    w._apply(WindowPlan(plans, ("cpu",)), None, report, [{} for _ in plans])
    kinds = [k for k, *_ in api.calls if k != "read"]
    # (the stand-in has one resourceVersion for all its pods: a pod's resize may meet a 409
    # and be sent again after a read)
    assert kinds[0] == "status" and set(kinds[1:]) == {"resize"}, "the marker before any resize"
    assert api.calls[0][2] == {"status": {MARKER: 1200.0}}
    assert report.resized == 3 and report.unrecorded == 3 and report.unevented == 3
    assert w.events == [] and len(w.pending) == 3
    assert unrecorded_window({MARKER: 1200.0}) == 1200.0 and unrecorded_window({}) is None


def test_no_marker_no_resize_without_its_record(monkeypatch):
    monkeypatch.setattr(runtime_writes, "WRITERS", 1)
    api = _StatusApi(fail=True)
    w = _Writer(api, share=0.0)
    plans = [_resize(_pod("p"), cpu=1)]
    report = WindowReport(1200.0)
    w._apply(WindowPlan(plans, ("cpu",)), None, report, [{}])
    assert [k for k, *_ in api.calls] == ["status", "annotations", "resize"]
    assert report.resized == 1 and report.unrecorded == 0 and len(w.pending) == 0


def test_a_pending_record_is_sent_when_the_budget_has_room(monkeypatch):
    monkeypatch.setattr(runtime_writes, "WRITERS", 1)
    api = _StatusApi()
    w = _Writer(api, share=0.0)
    pod = _pod("p")
    w.pending.defer(pod, {A_PHASE: "2", A_STATE: json.dumps({"window": 600.0})}, 600.0)
    w.record_share = 0.05                       # room again: the record goes, alone
    w._apply(WindowPlan([PodPlan(_pod("p"), [])], ("cpu",)), None, WindowReport(1200.0), [{}])
    assert [(k, b["metadata"]["annotations"][A_PHASE]) for k, _, b in api.calls] == \
        [("annotations", "2")]
    assert len(w.pending) == 0


# ------------------------------------------------------------------ a restart within the window
def test_an_operator_started_within_a_marked_window_leaves_it():
    """The status names the window whose resizes went without their records: a runner (a new
    process's) that runs that window lists no pod and writes nothing; the next window is
    served as usual."""
    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.runtime import WindowRunner
    from test_idle import W, _Core, _Custom, body

    r = WindowRunner(_Core(), _Custom(), None, "ns", "pm", key=StateKey.generate(),
                     idle_after_seconds=float("inf"))
    r.period_seconds = int(W)
    b = body()
    b["status"] = {MARKER: 3 * W}
    report = r.run(b, now=3 * W + 1)
    assert report.skipped == {"restarted-mid-window": 1} and r.core.lists == 0
    report = r.run(b, now=4 * W + 1)
    assert "restarted-mid-window" not in report.skipped and r.core.lists == 1
