"""The operator's window planning (pure): phases, recommendations, resizes and their rules."""

import json

import numpy as np
import pytest

from ai4dl.controller.plan import plan_window
from ai4dl.controller.pods import A_PHASE, A_RECOMMENDATION, A_STATE, pod_info
from ai4dl.controller.quantity import format_cpu, format_memory, parse_quantity
from ai4dl.crd import MODEL_ANNOTATION, PhaseModelSpec

GiB = 2 ** 30
WINDOW_START = 1_800_000_000.0


def spec_for(model, **policy) -> PhaseModelSpec:
    return PhaseModelSpec.model_validate({
        "features": [{"name": f, "query": f + "{{{selector}}}"} for f in model.features_],
        "stepSeconds": 15, "windowSeconds": 600,
        "policy": {"mode": "InPlace", **policy}})


def pod(name, requests=None, limits=None, annotations=None, conditions=None, containers=None):
    containers = containers or [("main", requests, limits)]
    return pod_info({
        "metadata": {"name": name, "namespace": "ns", "uid": name + "-uid",
                     "annotations": {MODEL_ANNOTATION: "pm", **(annotations or {})}},
        "spec": {"containers": [{"name": c, "resources": {
            **({"requests": r} if r else {}), **({"limits": lim} if lim else {})}}
            for c, r, lim in containers]},
        "status": {"phase": "Running", "conditions": conditions or []}})


@pytest.fixture(scope="module")
def window(synthetic_test):
    """Samples of a training phase: 3 history samples + one 40-sample window."""
    traces, truth = synthetic_test
    ex, lab = traces[0], truth[0]
    start = int(np.flatnonzero(lab == 2)[0]) + 5     # inside the first epoch
    return ex.values[start - 3:start + 40].astype(np.float64)


def run(model, spec, pods, samples, n_context=3):
    return plan_window(spec, model, pods, samples, n_context, WINDOW_START, "2027-01-01T00:00:00Z")


def test_quantities_round_trip():
    assert parse_quantity("250m") == 0.25 and parse_quantity("2Gi") == 2 * GiB
    assert parse_quantity("1.5") == 1.5 and parse_quantity("1e3") == 1000
    assert format_cpu(0.2501) == "251m" and format_memory(GiB + 1) == "1025Mi"
    with pytest.raises(ValueError):
        parse_quantity("lots")


def test_burstable_pod_is_resized_on_requests_only(fitted_model, window):
    spec = spec_for(fitted_model)
    p = pod("a", {"cpu": "8", "memory": "32Gi"}, {"memory": "64Gi"})
    plan = run(fitted_model, spec, [p], {("ns", "a", "main"): window}).pods[0]
    assert plan.skipped is None and plan.resize is not None
    body = plan.resize["spec"]["containers"]
    assert [c["name"] for c in body] == ["main"]
    assert set(body[0]["resources"]) == {"requests"}          # limits untouched
    cpu = parse_quantity(body[0]["resources"]["requests"]["cpu"])
    mem = parse_quantity(body[0]["resources"]["requests"]["memory"])
    # the phase's level: well under the 8 cores asked for, at least the window's mean
    assert window[-40:, 0].mean() < cpu < 8
    assert window[-1, 1] * 1.1 <= mem < 32 * GiB              # never below working set x 1.1
    assert plan.annotations[A_PHASE] == str(plan.containers[0].phase)
    rec = json.loads(plan.annotations[A_RECOMMENDATION])["main"]
    assert parse_quantity(rec["cpu"]) == cpu
    state = json.loads(plan.annotations[A_STATE])
    assert state["window"] == WINDOW_START and "lastIncrease" not in state  # both went down
    assert [e[1] for e in plan.events] == ["Resized"] and "cpu 8000m→" in plan.events[0][2]


def test_recommend_mode_only_annotates(fitted_model, window):
    plan = run(fitted_model, spec_for(fitted_model, mode="Recommend"),
               [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): window}).pods[0]
    assert plan.resize is None and not plan.events
    assert A_PHASE in plan.annotations and A_RECOMMENDATION in plan.annotations


def test_off_mode_does_nothing(fitted_model, window):
    plan = run(fitted_model, spec_for(fitted_model, mode="Off"),
               [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): window}).pods[0]
    assert plan.skipped == "mode-off" and plan.resize is None and not plan.annotations


def test_guaranteed_pod_moves_limits_with_requests(fitted_model, window):
    r = {"cpu": "8", "memory": "32Gi"}
    plan = run(fitted_model, spec_for(fitted_model), [pod("g", r, dict(r))],
               {("ns", "g", "main"): window}).pods[0]
    res = plan.resize["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"]


def test_burstable_request_capped_at_its_limit(fitted_model, window):
    # limits below what the phase needs: requests rise only to the limits -> that would make
    # requests == limits for every resource, i.e. Guaranteed: skipped with an event instead
    p = pod("c", {"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m", "memory": "200Mi"})
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "c", "main"): window}).pods[0]
    assert plan.resize is None and plan.skipped == "qos"
    assert "QoS class from Burstable to Guaranteed" in plan.events[0][2]
    # with a cpu limit only, the cpu request is capped at it and memory is free to rise
    p = pod("d", {"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m"})
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "d", "main"): window}).pods[0]
    req = plan.resize["spec"]["containers"][0]["resources"]["requests"]
    assert req["cpu"] == "200m" and parse_quantity(req["memory"]) > 100 * 2 ** 20


def test_missing_samples_mean_no_resize(fitted_model, window):
    holey = window.copy()
    holey[-5, 1] = np.nan
    pods = [pod("h", {"cpu": "8", "memory": "32Gi"}), pod("m", {"cpu": "8", "memory": "32Gi"})]
    out = run(fitted_model, spec_for(fitted_model), pods, {("ns", "h", "main"): holey})
    assert [p.skipped for p in out.pods] == ["no-data", "no-data"]
    assert all(p.resize is None and not p.annotations for p in out.pods)


def test_a_window_is_handled_once(fitted_model, window):
    state = json.dumps({"window": WINDOW_START})
    p = pod("a", {"cpu": "8", "memory": "32Gi"}, annotations={A_STATE: state})
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "a", "main"): window}).pods[0]
    assert plan.skipped == "already-handled" and plan.resize is None


def test_best_effort_and_pending_resizes_are_left_alone(fitted_model, window):
    pods = [pod("be"),
            pod("inf", {"cpu": "8", "memory": "32Gi"}, conditions=[
                {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]),
            pod("prog", {"cpu": "8", "memory": "32Gi"}, conditions=[
                {"type": "PodResizeInProgress", "status": "True"}])]
    samples = {("ns", p.name, "main"): window for p in pods}
    out = run(fitted_model, spec_for(fitted_model), pods, samples)
    be, inf, prog = out.pods
    assert be.skipped == "no-data"       # no request to size from: nothing planned
    assert inf.skipped == "resize-pending" and inf.events[0][0] == "Warning"
    assert "Infeasible" in inf.events[0][2]
    assert prog.skipped == "resize-pending" and prog.resize is None


def test_cooldown_holds_a_decrease_right_after_an_increase(fitted_model, window):
    state = json.dumps({"window": WINDOW_START - 600,
                        "lastIncrease": {"main": {"cpu": WINDOW_START - 600}}})
    p = pod("a", {"cpu": "8", "memory": "32Gi"}, annotations={A_STATE: state})
    plan = run(fitted_model, spec_for(fitted_model, cooldownWindows=1), [p],
               {("ns", "a", "main"): window}).pods[0]
    req = plan.resize["spec"]["containers"][0]["resources"]["requests"]
    assert "cpu" not in req and "memory" in req      # cpu held, memory free to go down


def test_only_named_containers_are_managed(fitted_model, window):
    p = pod("two", containers=[("main", {"cpu": "8", "memory": "32Gi"}, None),
                               ("sidecar", {"cpu": "8", "memory": "32Gi"}, None)])
    samples = {("ns", "two", "main"): window, ("ns", "two", "sidecar"): window}
    plan = run(fitted_model, spec_for(fitted_model, containers=["main"]), [p], samples).pods[0]
    assert [c["name"] for c in plan.resize["spec"]["containers"]] == ["main"]


def test_all_pods_are_encoded_in_one_batch(fitted_model, window):
    calls = []
    original = type(fitted_model).detect

    class Counting(type(fitted_model)):
        def detect(self, X, n_context=0):
            calls.append(len(X))
            return original(self, X, n_context)

    counting = Counting.from_document(fitted_model.to_document())
    pods = [pod(f"p{i}", {"cpu": "8", "memory": "32Gi"}) for i in range(50)]
    out = run(counting, spec_for(counting), pods, {("ns", f"p{i}", "main"): window
                                                   for i in range(50)})
    assert calls == [50]
    assert sum(p.resize is not None for p in out.pods) == 50
    assert out.pods_per_phase() == {str(out.pods[0].phase): 50}


def test_no_write_when_nothing_visible_changed(fitted_model, window):
    spec = spec_for(fitted_model, mode="Recommend")
    first = run(fitted_model, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})],
                {("ns", "a", "main"): window}).pods[0]
    assert first.annotations                       # first window: phase and recommendation
    seen = {k: v for k, v in first.annotations.items() if k != A_STATE}   # a later window
    again = run(fitted_model, spec, [pod("a", {"cpu": "8", "memory": "32Gi"},
                                         annotations=seen)],
                {("ns", "a", "main"): window}).pods[0]
    assert again.skipped == "unchanged" and not again.annotations and again.resize is None


def test_resizes_are_rate_limited_largest_change_first(fitted_model, window):
    pods = [pod(f"p{i}", {"cpu": str(2 + 2 * i), "memory": "7.5Gi"}) for i in range(5)]
    out = run(fitted_model, spec_for(fitted_model, maxResizesPerWindow=2, maxDecrease=None), pods,
              {("ns", f"p{i}", "main"): window for i in range(5)})
    resized = [p.pod.name for p in out.pods if p.resize is not None]
    assert resized == ["p3", "p4"]                    # 8 and 10 cores: the largest cuts
    assert out.pods[0].resize is None and out.pods[0].skipped != "rate-limited"  # < minChange
    for p in out.pods[1:]:
        if p.resize is None:
            assert p.skipped == "rate-limited" and not p.events
            assert A_STATE not in p.annotations       # the window is not marked handled
            assert A_PHASE in p.annotations           # a new phase is still shown
            assert A_RECOMMENDATION not in p.annotations   # (in the metrics: saves a write)
    # Deferred again with its phase already shown: no write at all.
    deferred = next(p for p in out.pods if p.skipped == "rate-limited")
    seen = {A_PHASE: deferred.annotations[A_PHASE]}
    pods2 = [pod(p.pod.name, {"cpu": str(2 + 2 * i), "memory": "7.5Gi"},
                 annotations=seen if p is deferred else None) for i, p in enumerate(out.pods)]
    again = run(fitted_model, spec_for(fitted_model, maxResizesPerWindow=2, maxDecrease=None),
                pods2, {("ns", f"p{i}", "main"): window for i in range(5)})
    same = next(p for p in again.pods if p.pod.name == deferred.pod.name)
    assert same.skipped == "rate-limited" and not same.annotations and not same.events


def test_label_selector_pushes_the_phasemodel_selector_to_the_api_server():
    from ai4dl.controller.runtime import label_selector, selector_matches
    from ai4dl.crd import LabelSelector

    sel = LabelSelector.model_validate({
        "matchLabels": {"app": "train", "team": "a"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]},
                             {"key": "debug", "operator": "DoesNotExist"},
                             {"key": "owner", "operator": "Exists"},
                             {"key": "zone", "operator": "NotIn", "values": ["x"]}]})
    assert label_selector(sel) == ("ai4dl.io/managed=true,app=train,team=a,tier in (gpu,cpu),"
                                   "!debug,owner,zone notin (x)")
    assert label_selector(LabelSelector()) == "ai4dl.io/managed=true"
    ok = {"app": "train", "team": "a", "tier": "gpu", "owner": "me"}
    assert selector_matches(sel, ok) and not selector_matches(sel, {**ok, "debug": "1"})
