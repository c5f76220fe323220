"""The order of a window's writes to one pod (ai4dl.controller.runtime_writes.PodWrites): the
record (annotations: the window's id, what is sent) before pods/resize, each with a
resourceVersion precondition. A unit test of that one function with a recording stand-in for
the API; the proof on a real API server is tests/test_faults.py (the operator SIGKILLed
mid-writes, then caught up on the same window: no pod resized twice in it)."""

from __future__ import annotations

import json

import pytest

from ai4dl.controller.plan_types import PodPlan
from ai4dl.controller.pods import A_LAST_APPLIED, A_STATE, Container, PodInfo
from ai4dl.controller.runtime_writes import PodWrites


class _Answer:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()

    def read(self):
        return self.data

    def release_conn(self):
        pass


def _conflict():
    from kubernetes.client.exceptions import ApiException

    return ApiException(status=409, reason="Conflict")


class _Api:
    """Records calls; the pod's resourceVersion moves with every accepted write, and a write
    whose precondition is stale is refused with 409, as the API server does."""

    def __init__(self, version: str = "7", containers_changed_by: dict | None = None):
        self.version, self.calls = int(version), []
        self.main = {"cpu": "2", "memory": "4Gi"}
        self.containers_changed_by = containers_changed_by
        self.sidecar = None     # a second container's requests, when the pod has one

    def _accept(self, kind, body):
        want = (body.get("metadata") or {}).get("resourceVersion")
        self.calls.append((kind, want, body))
        if self.containers_changed_by and kind == self.containers_changed_by.get("before"):
            # someone else resized the pod just before this write
            self.main = dict(self.containers_changed_by["to"])
            self.version += 1
            self.containers_changed_by = None
        if want is not None and int(want) != self.version:
            raise _conflict()
        self.version += 1
        return _Answer({"metadata": {"resourceVersion": str(self.version)},
                        "spec": {"containers": [{"name": "main", "resources": {
                            "requests": (body.get("spec") or {}).get("containers", [{}])[0]
                            .get("resources", {}).get("requests", self.main)}}]}})

    def patch_namespaced_pod(self, name, ns, body, _preload_content=False):
        return self._accept("annotations", body)

    def patch_namespaced_pod_resize(self, name, ns, body, _preload_content=False):
        return self._accept("resize", body)

    def read_namespaced_pod(self, name, ns, _preload_content=False):
        self.calls.append(("read", None, None))
        return _Answer({"metadata": {"name": name, "namespace": ns, "uid": "u1",
                                     "resourceVersion": str(self.version)},
                        "spec": {"containers": [{"name": "main", "resources": {
                            "requests": self.main}}] + ([{"name": "sidecar", "resources": {
                                "requests": self.sidecar}}] if self.sidecar else [])}})


class _Key:
    def seal(self, scope, state):
        return json.dumps(state, sort_keys=True)


class _Writer(PodWrites):
    def __init__(self, api):
        self.core, self.key, self.namespace, self.name = api, _Key(), "ns", "pm"
        self.events = []

    def _event(self, pod, etype, reason, message):
        self.events.append(reason)


def _plan() -> PodPlan:
    pod = PodInfo("ns", "p", "u1", "ns/pm",
                  [Container("main", {"cpu": 2.0, "memory": 4 * 2**30}, {})],
                  resource_version="7")
    state = {"window": 1200.0}
    return PodPlan(pod, [], resize={"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]}},
        annotations={A_STATE: json.dumps(state),
                     A_LAST_APPLIED: json.dumps({"window": 1200.0, "containers": {
                         "main": {"requests": {"cpu": "1"}}}})},
        events=[("Normal", "Resized", "cpu 2→1")])


def test_a_resize_is_recorded_before_it_is_sent():
    """Killed between the two PATCHes, the pod either carries the window's record (and no
    resize yet: done next window) or both: never a resize the restarted operator cannot see."""
    api = _Api()
    w = _Writer(api)
    assert w._write_pod(_plan()) == "resized"
    kinds = [k for k, *_ in api.calls]
    assert kinds == ["annotations", "resize"]
    record, resize = api.calls
    assert record[1] == "7", "the record carries the read's resourceVersion (a precondition)"
    assert json.loads(record[2]["metadata"]["annotations"][A_STATE])["window"] == 1200.0
    assert resize[1] == "8", "the resize's precondition is the version the record left"
    assert w.events == ["Resized"]                  # the Event after both


def test_a_pod_resized_by_someone_else_before_the_record_gets_nothing():
    api = _Api(containers_changed_by={"before": "annotations",
                                      "to": {"cpu": "8", "memory": "4Gi"}})
    w = _Writer(api)
    assert w._write_pod(_plan()) == "conflict"
    assert [k for k, *_ in api.calls] == ["annotations", "read"]     # refused; nothing written
    assert w.events == []


def test_a_pod_resized_by_someone_else_between_record_and_resize_is_not_overwritten():
    api = _Api(containers_changed_by={"before": "resize", "to": {"cpu": "8", "memory": "4Gi"}})
    w = _Writer(api)
    assert w._write_pod(_plan()) == "conflict"
    assert [k for k, *_ in api.calls] == ["annotations", "resize", "read"]
    assert w.events == []


@pytest.mark.parametrize("what", ["annotations", "resize"])
def test_a_conflict_over_other_fields_is_retried_at_the_new_version(what):
    class _Busy(_Api):
        """Another writer touches the pod's labels once, just before our ``what``."""
        bumped = False

        def _accept(self, kind, body):
            if kind == what and not self.bumped:
                self.bumped = True
                self.version += 1
            return super()._accept(kind, body)

    api = _Busy()
    w = _Writer(api)
    assert w._write_pod(_plan()) == "resized"
    kinds = [k for k, *_ in api.calls]
    assert kinds == (["annotations", "read", "annotations", "resize"] if what == "annotations"
                     else ["annotations", "resize", "read", "resize"])


@pytest.mark.parametrize("what", ["annotations", "resize"])
def test_a_sidecar_resized_by_someone_else_does_not_stale_the_plan(what):
    """Another writer resizes the pod's unmanaged sidecar just before our ``what``: the plan
    for main still stands, so the write is sent again at the new version (it used to be
    dropped as a conflict until the next window, and a busy sidecar writer could starve the
    managed container for many windows)."""
    class _SidecarWriter(_Api):
        bumped = False

        def _accept(self, kind, body):
            if kind == what and not self.bumped:
                self.bumped = True
                self.sidecar = {"cpu": "700m"}
                self.version += 1
            return super()._accept(kind, body)

    api = _SidecarWriter()
    api.sidecar = {"cpu": "500m"}
    plan = _plan()
    plan.pod.containers.append(Container("sidecar", {"cpu": 0.5}, {}))
    w = _Writer(api)
    assert w._write_pod(plan) == "resized"
    kinds = [k for k, *_ in api.calls]
    assert kinds == (["annotations", "read", "annotations", "resize"] if what == "annotations"
                     else ["annotations", "resize", "read", "resize"])
    assert w.events == ["Resized"]


def test_a_resize_stored_otherwise_is_recorded_as_not_taken():
    """The API server stored other values than sent (it capped them): a second record says so,
    and the Event is ResizeNotApplied instead of Resized."""
    class _Capping(_Api):
        def patch_namespaced_pod_resize(self, name, ns, body, _preload_content=False):
            super()._accept("resize", body)
            return _Answer({"spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": "1500m", "memory": "4Gi"}}}]}})

    api = _Capping()
    w = _Writer(api)
    assert w._write_pod(_plan()) == "untaken"
    assert [k for k, *_ in api.calls] == ["annotations", "resize", "annotations"]
    state = json.loads(api.calls[-1][2]["metadata"]["annotations"][A_STATE])
    assert state["window"] == 1200.0
    assert state["untaken"] == {"containers": {"main": {"requests": {"cpu": "1", "memory": "4Gi"}}}}
    assert w.events == ["ResizeNotApplied"]
