"""Savings so far (ai4dl.controller.savings): the authors' requests against what was held."""

from __future__ import annotations

import json

from ai4dl.controller.admission import A_ADMITTED
from ai4dl.controller.plan import ContainerPlan, PodPlan
from ai4dl.controller.pods import A_STATE, pod_info
from ai4dl.controller.savings import add_window, original_requests, summary, window_amounts


def pod(requests, annotations=None):
    return pod_info({"metadata": {"name": "p", "namespace": "ml", "uid": "u",
                                  "annotations": annotations or {}},
                     "spec": {"containers": [{"name": "main",
                                              "resources": {"requests": requests}}]},
                     "status": {"phase": "Running"}})


def test_original_requests_prefer_admission_then_the_first_write():
    # never written: the current requests are the author's
    assert original_requests(pod({"cpu": "2", "memory": "4Gi"}))["main"] == \
        {"cpu": 2.0, "memory": 4 * 2 ** 30}
    # resized since: the state's record of the requests before the first write
    p = pod({"cpu": "500m"}, {A_STATE: json.dumps({"orig": {"main": {"cpu": 2.0}}})})
    assert original_requests(p)["main"]["cpu"] == 2.0
    # admitted: admission's record wins; a request the author never gave is no baseline
    p = pod({"cpu": "500m", "memory": "1Gi"},
            {A_ADMITTED: json.dumps({"main": {"cpu": "4", "memory": None}}),
             A_STATE: json.dumps({"orig": {"main": {"cpu": 0.5}}})})
    assert original_requests(p)["main"] == {"cpu": 4.0}
    # garbage in the annotations: the current requests, no error
    p = pod({"cpu": "1"}, {A_ADMITTED: "{not json", A_STATE: "[]"})
    assert original_requests(p)["main"] == {"cpu": 1.0}


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
