"""Savings so far (ai4dl.controller.savings): the authors' requests against what was held."""

from __future__ import annotations

import json

from ai4dl.controller.plan_types import ContainerPlan, PodPlan
from ai4dl.controller.podstate import (StateKey, admitted_identity, admitted_scope,
                                       state_scope)
from ai4dl.controller.pods import A_ADMITTED, A_STATE, pod_info, verify_pod
from ai4dl.crd import MODEL_ANNOTATION
from ai4dl.controller.savings import add_window, original_requests, summary, window_amounts


KEY = StateKey(b"k" * 32)
#: admission's record of pod "p" of PhaseModel ml/pm (no generated name, no owner)
ADMITTED_SCOPE = admitted_scope("ml", "pm", admitted_identity({"name": "p"}))


def pod(requests, annotations=None, seal=True):
    """A pod as the runtime reads it: records given as plain JSON are sealed with the
    operator's key first (``seal``), then verified."""
    ann = dict(annotations or {})
    if seal and A_STATE in ann:
        ann[A_STATE] = KEY.seal(state_scope("ml", "p", "u"), json.loads(ann[A_STATE]))
    if seal and A_ADMITTED in ann:
        ann[A_ADMITTED] = KEY.seal(ADMITTED_SCOPE, json.loads(ann[A_ADMITTED]))
    return verify_pod(pod_info({
        "metadata": {"name": "p", "namespace": "ml", "uid": "u",
                     "annotations": {MODEL_ANNOTATION: "pm", **ann}},
        "spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": "Running"}}), KEY)


def test_original_requests_from_the_operators_own_records():
    # never written: the current requests are the author's
    assert original_requests(pod({"cpu": "2", "memory": "4Gi"}))["main"] == \
        {"cpu": 2.0, "memory": 4 * 2 ** 30}
    # resized since: the state's record of the requests before the first write
    p = pod({"cpu": "500m"}, {A_STATE: json.dumps({"orig": {"main": {"cpu": 2.0}}})})
    assert original_requests(p)["main"] == {"cpu": 2.0}
    # admitted, not yet written: admission's record; a request the author never gave is no
    # baseline
    p = pod({"cpu": "500m", "memory": "1Gi"},
            {A_ADMITTED: json.dumps({"main": {"cpu": "4", "memory": None}})})
    assert original_requests(p)["main"] == {"cpu": 4.0}
    # once the operator wrote the pod, its own record (which took admission's) decides
    p = pod({"cpu": "500m", "memory": "1Gi"},
            {A_ADMITTED: json.dumps({"main": {"cpu": "4", "memory": None}}),
             A_STATE: json.dumps({"orig": {"main": {"cpu": 4.0}}})})
    assert original_requests(p)["main"] == {"cpu": 4.0}


def test_forged_records_never_become_a_baseline():
    # a pod's owner writes an "original" of 1000 cores: not sealed, so not read, and the pod
    # has no known baseline (left out of the savings, not counted at a made-up request)
    p = pod({"cpu": "1"}, {A_ADMITTED: json.dumps({"main": {"cpu": "1000"}})}, seal=False)
    assert p.admitted_problem == "unsigned" and original_requests(p)["main"] == {}
    # ... nor in a state record, nor copied from another pod (sealed for another uid)
    p = pod({"cpu": "1"}, {A_STATE: json.dumps({"orig": {"main": {"cpu": 1000.0}}})},
            seal=False)
    assert p.state_problem == "unsigned" and original_requests(p)["main"] == {"cpu": 1.0}
    other = KEY.seal(state_scope("ml", "q", "u2"), {"orig": {"main": {"cpu": 1000.0}}})
    p = pod({"cpu": "1"}, {A_STATE: other}, seal=False)
    assert p.state_problem == "forged" and original_requests(p)["main"] == {"cpu": 1.0}
    # garbage: the current requests, no error
    p = pod({"cpu": "1"}, {A_STATE: "[]"}, seal=False)
    assert p.state_problem == "unsigned" and original_requests(p)["main"] == {"cpu": 1.0}
    # sealed by a key this process does not hold (an earlier process): the operator's own, but
    # unknown: no baseline from it
    old = StateKey(b"o" * 32).seal(ADMITTED_SCOPE, {"main": {"cpu": "4"}})
    p = pod({"cpu": "1"}, {A_ADMITTED: old}, seal=False)
    assert p.admitted_problem == "other-key" and original_requests(p)["main"] == {}


def plans(mode_target):
    p = pod({"cpu": "1"}, {A_STATE: json.dumps({"orig": {"main": {"cpu": 4.0}}})})
    cp = ContainerPlan("main", current={"cpu": 1.0, "memory": float("nan")},
                       target=mode_target)
    return [PodPlan(p, [cp]), PodPlan(pod({"cpu": "1"}), [])]   # the second: not planned


def test_window_amounts_in_place_and_recommend():
    got = window_amounts(plans({"cpu": 0.5}), ("cpu", "memory"), "InPlace", 600)
    assert got["cpu"] == (4.0 * 600, 1.0 * 600)     # held: the current request
    assert got["memory"] == (0.0, 0.0)              # no request: nothing to save against
    got = window_amounts(plans({"cpu": 0.5}), ("cpu",), "Recommend", 600)
    assert got["cpu"] == (4.0 * 600, 0.5 * 600)     # would have held: the recommendation
    got = window_amounts(plans({}), ("cpu",), "Recommend", 600)
    assert got["cpu"] == (4.0 * 600, 1.0 * 600)     # nothing recommended: the current request


def test_add_window_sums_counts_each_window_once_and_summarises():
    s1 = add_window(None, {"cpu": (100.0, 40.0)}, 600.0, "t0")
    assert s1["windows"] == 1 and s1["summary"] == "cpu 60%" and s1["since"] == "t0"
    s2 = add_window(s1, {"cpu": (100.0, 60.0), "memory": (10.0, 10.0)}, 1200.0, "t1")
    assert s2["resources"]["cpu"] == {"original": 200.0, "allocated": 100.0}
    assert s2["since"] == "t0" and s2["windows"] == 2
    assert s2["summary"] == "cpu 50%, memory 0%"
    assert add_window(s2, {"cpu": (1.0, 1.0)}, 1200.0, "t1") is None    # counted already
    assert summary({"cpu": {"original": 0.0, "allocated": 0.0}}) == ""


def test_originals_above_the_largest_container_are_counted_at_it():
    """Issue 43: an honest `cpu: 1000` request is sealed as the original, and a pod admitted
    at its workload's level runs: counted at 1000 cores the savings were about 1,000x the
    truth. The sums count it at the largest a container can have (the operator's
    --max-container-*), and say which were clamped; the record keeps what the author wrote."""
    from ai4dl.controller.savings import clamp_originals

    p = pod({"cpu": "1"}, {A_ADMITTED: json.dumps({"main": {"cpu": "1000", "memory": None}})})
    assert original_requests(p)["main"] == {"cpu": 1000.0}          # as written
    capped, clamped = clamp_originals(original_requests(p), {"cpu": 64.0, "memory": 2.0 ** 40})
    assert capped == {"main": {"cpu": 64.0}} and clamped == [("main", "cpu", 1000.0)]
    assert clamp_originals({"main": {"cpu": 4.0}}, {"cpu": 64.0}) == ({"main": {"cpu": 4.0}}, [])
