"""The operator's window planning (pure): phases, recommendations, resizes and their rules."""

import json

import numpy as np
import pytest

from ai4dl.controller.plan import plan_window
from ai4dl.controller.podstate import StateKey, state_scope
from ai4dl.controller.pods import (A_LAST_APPLIED, A_PHASE, A_RECOMMENDATION, A_STATE,
                                   pod_info, verify_pod)
from ai4dl.quantity import format_cpu, format_memory, parse_quantity
from ai4dl.crd import MODEL_ANNOTATION
from ai4dl.crd_spec import PhaseModelSpec
from fake_api import RawAnswer

GiB = 2 ** 30
WINDOW_START = 1_800_000_000.0
KEY = StateKey(b"k" * 32)       # the operator's key in these tests


def spec_for(model, **policy) -> PhaseModelSpec:
    return PhaseModelSpec.model_validate({
        "features": [{"name": f, "query": f + "{{{selector}}}"} for f in model.features_],
        "stepSeconds": 15, "windowSeconds": 600,
        "policy": {"mode": "InPlace", "kind": "phase", **policy}})


def pod(name, requests=None, limits=None, annotations=None, conditions=None, containers=None,
        started=None):
    """A pod as the runtime hands it to the planner: its records verified (a state given as
    plain JSON is sealed first, as the operator would have written it)."""
    containers = containers or [("main", requests, limits)]
    annotations = dict(annotations or {})
    if A_STATE in annotations:
        annotations[A_STATE] = KEY.seal(state_scope("ns", name, name + "-uid"),
                                        json.loads(annotations[A_STATE]))
    return verify_pod(pod_info({
        "metadata": {"name": name, "namespace": "ns", "uid": name + "-uid",
                     "annotations": {MODEL_ANNOTATION: "pm", **annotations}},
        "spec": {"containers": [{"name": c, "resources": {
            **({"requests": r} if r else {}), **({"limits": lim} if lim else {})}}
            for c, r, lim in containers]},
        "status": {"phase": "Running", "conditions": conditions or [],
                   **({"startTime": started} if started else {})}}), KEY)


@pytest.fixture(scope="module")
def window(synthetic_test):
    """Samples of a training phase: 3 history samples + one 40-sample window."""
    traces, truth = synthetic_test
    ex, lab = traces[0], truth[0]
    start = int(np.flatnonzero(lab == 2)[0]) + 5     # inside the first epoch
    return ex.values[start - 3:start + 40].astype(np.float64)


def run(model, spec, pods, samples, n_context=3, max_value=None):
    return plan_window(spec, model, pods, samples, n_context, WINDOW_START, "2027-01-01T00:00:00Z",
                       max_value=max_value)


def test_quantities_round_trip():
    assert parse_quantity("250m") == 0.25 and parse_quantity("2Gi") == 2 * GiB
    assert parse_quantity("1.5") == 1.5 and parse_quantity("1e3") == 1000
    assert format_cpu(0.2501) == "251m" and format_memory(GiB + 1) == "1025Mi"
    with pytest.raises(ValueError):
        parse_quantity("lots")


def test_a_parsed_quantity_text_is_kept_and_a_bad_one_refused_every_time():
    """The texts' cache gives a repeated text its own value (not another's) and keeps no
    failure: a bad text is refused at each call, naming itself."""
    for _ in range(3):
        assert parse_quantity("750m") == 0.75 and parse_quantity(" 3Gi ") == 3 * GiB
        assert parse_quantity("3G") == 3e9 and parse_quantity(7) == 7.0
        with pytest.raises(ValueError, match="'12 cores'"):
            parse_quantity("12 cores")


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
    empty = np.full_like(window, np.nan)
    pods = [pod(n, {"cpu": "8", "memory": "32Gi"}) for n in ("h", "m", "e")]
    out = run(fitted_model, spec_for(fitted_model), pods,
              {("ns", "h", "main"): holey, ("ns", "e", "main"): empty})
    assert [p.skipped for p in out.pods] == ["partial-data", "no-data", "no-data"]
    assert all(p.resize is None and not p.annotations and not p.events for p in out.pods)
    assert out.data_skips() == {"partial-data": 1, "no-data": 2} and out.considered() == 3
    assert out.pods[0].containers[0].detail == "1 of 40 samples missing"


def test_a_container_that_started_during_the_window_is_warming_up(fitted_model, window):
    import datetime as dt

    recent = dt.datetime.fromtimestamp(WINDOW_START - 120, dt.timezone.utc).isoformat()
    old = dt.datetime.fromtimestamp(WINDOW_START - 3600, dt.timezone.utc).isoformat()
    partial = window.copy()
    partial[:10] = np.nan
    pods = [pod("new", {"cpu": "8", "memory": "32Gi"}, started=recent),
            pod("old", {"cpu": "8", "memory": "32Gi"}, started=old)]
    out = run(fitted_model, spec_for(fitted_model), pods,
              {("ns", "new", "main"): partial, ("ns", "old", "main"): partial})
    assert [p.skipped for p in out.pods] == ["warming-up", "partial-data"]
    assert out.data_skips() == {"partial-data": 1}      # a new pod is not a metrics gap


@pytest.mark.parametrize("garbage, what", [
    (lambda w: w.__setitem__((slice(-40, None), 1), -w[-40:, 1]), "negative"),
    (lambda w: w.__setitem__((-3, 1), 1e30), "above the physical maximum"),
    (lambda w: w.__setitem__((-3, 0), np.inf), "infinite"),
    (lambda w: w.__setitem__((-3, 0), 1e6), "above the physical maximum"),
])
def test_absurd_samples_never_reach_a_resize(fitted_model, window, garbage, what):
    bad = window.copy()
    garbage(bad)
    limits = {"cpu": 256.0, "memory": 4.0 * 2 ** 40}
    out = run(fitted_model, spec_for(fitted_model),
              [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): bad},
              max_value=limits).pods[0]
    assert out.skipped == "bad-sample" and out.resize is None and not out.annotations
    assert what in out.containers[0].detail


def test_garbage_in_the_history_is_not_encoded(fitted_model, window):
    # the history rows before the window are only the encoder's context: dropped, not a skip
    bad = window.copy()
    bad[0, 1] = -5.0
    limits = {"cpu": 256.0, "memory": 4.0 * 2 ** 40}
    clean = run(fitted_model, spec_for(fitted_model), [pod("a", {"cpu": "8", "memory": "32Gi"})],
                {("ns", "a", "main"): window[3:]}, n_context=0, max_value=limits).pods[0]
    out = run(fitted_model, spec_for(fitted_model), [pod("a", {"cpu": "8", "memory": "32Gi"})],
              {("ns", "a", "main"): bad}, max_value=limits).pods[0]
    assert out.skipped is None and out.resize == clean.resize


def test_no_request_above_the_physical_maximum(fitted_model, window):
    # a working set near the bound: memory x 1.1 would pass it; the request stops at the bound
    big = window.copy()
    big[-1, 1] = 30 * GiB
    out = run(fitted_model, spec_for(fitted_model, maxIncrease=None),
              [pod("a", {"cpu": "8", "memory": "8Gi"})], {("ns", "a", "main"): big},
              max_value={"cpu": 256.0, "memory": 32.0 * GiB}).pods[0]
    req = out.resize["spec"]["containers"][0]["resources"]["requests"]
    assert parse_quantity(req["memory"]) == 32 * GiB


def test_a_write_the_api_server_would_cap_is_never_sent(fitted_model, window):
    huge = window.copy()
    huge[-1, 1] = 1e30                      # no physical bound configured: only int64 stops it
    out = run(fitted_model, spec_for(fitted_model, maxIncrease=None),
              [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): huge}).pods[0]
    assert out.resize is None and out.skipped == "unrepresentable" and not out.annotations


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_the_quick_representable_check_agrees_with_formatting_and_parsing(resource):
    from ai4dl.controller.plan_pod import INT64_MAX, _representable
    from ai4dl.quantity import format_resource

    for value in [0.0, 1e-9, 0.5, 3.0, 2.0 ** 40, *np.logspace(10, 20, 61), 9.2e15, 9.3e15,
                  9.2e18, 9.3e18, -1.0, np.inf, np.nan]:
        slow = (bool(np.isfinite(value)) and value >= 0 and
                parse_quantity(format_resource(resource, value))
                * (1000 if resource == "cpu" else 1) <= INT64_MAX)
        assert _representable(resource, value) == slow, value


def test_a_resize_that_did_not_take_is_not_sent_again(fitted_model, window):
    spec = spec_for(fitted_model)
    first = run(fitted_model, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})],
                {("ns", "a", "main"): window}).pods[0]
    body = {b["name"]: b["resources"] for b in first.resize["spec"]["containers"]}
    # the runtime saw the API server answer with other values: it recorded the resize
    state = json.dumps({"window": WINDOW_START - 600, "untaken": {"containers": body}})
    again = run(fitted_model, spec, [pod("a", {"cpu": "8", "memory": "32Gi"},
                                         annotations={A_STATE: state})],
                {("ns", "a", "main"): window}).pods[0]
    assert again.resize is None and again.skipped == "resize-not-taken" and not again.events
    # another target: sent again, and the record is dropped
    moved = run(fitted_model, spec_for(fitted_model, maxDecrease=0.75),
                [pod("a", {"cpu": "8", "memory": "32Gi"}, annotations={A_STATE: state})],
                {("ns", "a", "main"): window}).pods[0]
    assert moved.resize is not None and "untaken" not in json.loads(moved.annotations[A_STATE])


def test_a_ceiling_below_the_working_set_warns_and_still_steps_down(fitted_model, window):
    spec = spec_for(fitted_model, resources={"memory": {"ceiling": "1Gi"}})
    out = run(fitted_model, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})],
              {("ns", "a", "main"): window})
    plan = out.pods[0]
    req = plan.resize["spec"]["containers"][0]["resources"]["requests"]
    assert parse_quantity(req["memory"]) == 16 * GiB        # maxDecrease 0.5, not 1Gi at once
    assert [n[0] for n in plan.notices] == ["CeilingBelowUsage"] and out.ceiling_below_usage == 1
    assert "below its working set" in plan.notices[0][1]


def test_floor_above_ceiling_holds_the_resource_and_is_reported(fitted_model, window):
    spec = spec_for(fitted_model, resources={"cpu": {"floor": "8", "ceiling": "1"}})
    out = run(fitted_model, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})],
              {("ns", "a", "main"): window})
    req = out.pods[0].resize["spec"]["containers"][0]["resources"]["requests"]
    assert "cpu" not in req and "memory" in req              # cpu held, memory sized
    assert out.bound_conflicts == ["policy.resources.cpu: floor 8 > ceiling 1; cpu requests "
                                   "are left as they are"]


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
    assert be.skipped == "best-effort" and be.notices[0][0] == "BestEffortPod"
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
    plan = run(fitted_model, spec_for(fitted_model, containers=["nope"]), [p], samples).pods[0]
    assert plan.skipped == "no-managed-container" and plan.resize is None
    assert plan.notices[0][0] == "NoManagedContainer" and "['nope']" in plan.notices[0][1]


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


def _outcome(plan):
    return (plan.resize, plan.annotations, plan.events, plan.skipped, plan.notices,
            plan.refused)


def test_pods_past_the_cut_are_deferred_as_the_rate_limit_defers_them(fitted_model, window,
                                                                      monkeypatch):
    """finish_pods defers a pod surely resized past maxResizesPerWindow without building its
    resize and recommendation: every plan is the one that finishing every pod and then
    cutting gives (the largest changes kept, ties in pod order; the rest deferred, a new
    phase still shown), for a mix of pods whose resize is sure and is not (pending, in
    progress, refused, untaken, Guaranteed, a phase already shown)."""
    import ai4dl.controller.plan_pod as plan_pod

    spec_free = spec_for(fitted_model, maxResizesPerWindow=10 ** 6, maxDecrease=None)
    first = run(fitted_model, spec_free, [pod("seen", {"cpu": "6", "memory": "32Gi"})],
                {("ns", "seen", "main"): window}).pods[0]
    shown = {k: first.annotations[k] for k in (A_PHASE, "ai4dl.io/phase-since")}
    body = {b["name"]: b["resources"] for b in first.resize["spec"]["containers"]}
    untaken = json.dumps({"window": WINDOW_START - 600, "untaken": {"containers": {
        "main": {"requests": {"cpu": "1"}}}}})
    pods = [pod(f"b{i}", {"cpu": str(cpu), "memory": "32Gi"})
            for i, cpu in enumerate((4, 8, 8, 12, 16, 16, 6, 3))]
    pods += [pod("g", {"cpu": "8", "memory": "32Gi"}, {"cpu": "8", "memory": "32Gi"}),
             pod("seen", {"cpu": "6", "memory": "32Gi"}, annotations=shown),
             pod("pending", {"cpu": "12", "memory": "32Gi"}, conditions=[
                 {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]),
             pod("moving", {"cpu": "12", "memory": "32Gi"}, conditions=[
                 {"type": "PodResizeInProgress", "status": "True"}]),
             pod("untaken", {"cpu": "16", "memory": "32Gi"}, annotations={A_STATE: untaken}),
             pod("same", {"cpu": "6", "memory": "32Gi"}, annotations={A_STATE: json.dumps(
                 {"window": WINDOW_START - 600, "untaken": {"containers": body}})}),
             node_pod("refused", {"cpu": "8", "memory": "16Gi"},
                      {"cpu": "8", "memory": "32Gi"}, REFUSED)]
    samples = {("ns", p.name, "main"): window for p in pods}
    full = run(fitted_model, spec_free, pods, samples).pods
    resizing = sorted((p for p in full if p.resize is not None),
                      key=lambda p: p.largest_change(), reverse=True)
    assert len(resizing) >= 8 and {"seen", "untaken", "refused"} <= {
        p.pod.name for p in resizing}
    original, built = plan_pod._annotate_recommendation, []

    def counted(plan, *args):
        built.append(plan.pod.name)
        original(plan, *args)

    monkeypatch.setattr(plan_pod, "_annotate_recommendation", counted)
    sure = {p.name for p in pods if p.name.startswith("b")} | {"g", "seen"}
    for limit in (1, 2, 4, 7):
        built.clear()
        cut = run(fitted_model, spec_for(fitted_model, maxResizesPerWindow=limit,
                                         maxDecrease=None), pods, samples).pods
        kept = {p.pod.name for p in resizing[:limit]}
        for want, got in zip(full, cut):
            name = want.pod.name
            if want.resize is None or name in kept:
                assert _outcome(got) == _outcome(want), name
                continue
            phase_new = want.annotations.get(A_PHASE) != want.pod.annotations.get(A_PHASE)
            assert _outcome(got) == (None, {k: want.annotations[k] for k in shown}
                                     if phase_new else {}, [], "rate-limited", want.notices,
                                     want.refused), name
        assert sum(p.resize is not None for p in cut) == limit
        # the resize and recommendation were built for every pod but those surely deferred
        deferred = [p.pod.name for p in cut if p.skipped == "rate-limited"]
        assert sorted(built) == sorted(p.name for p in pods if p.name not in
                                       set(deferred) & sure), limit
        assert set(deferred) - sure, "no doubtful pod was cut after it was built"


def test_label_selector_pushes_the_phasemodel_selector_to_the_api_server():
    from ai4dl.controller.runtime_window import label_selector
    from ai4dl.crd_spec import LabelSelector

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
    assert sel.matches(ok) and not sel.matches({**ok, "debug": "1"})


def test_what_the_api_server_stored_is_compared_as_quantities():
    from ai4dl.controller.runtime_writes import _stored_differs

    sent = {"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "1500m", "memory": "1024Mi"}}}]}}
    same = {"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "1.5", "memory": "1Gi"}}}, {"name": "side", "resources": {}}]}}
    assert _stored_differs(sent, same) is None          # respelled, not changed
    capped = {"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "1500m", "memory": "9223372036854775807"}}}]}}
    assert _stored_differs(sent, capped) == {
        "main": {"requests": {"memory": "9223372036854775807"}}}
    assert _stored_differs(sent, {"spec": {"containers": []}}) == {
        "main": {"requests": {"cpu": None, "memory": None}}}


def test_orphans_are_told_apart():
    from ai4dl.controller.orphans import find_orphans
    from ai4dl.crd_spec import LabelSelector

    def p(name, model, labels):
        info = pod(name)
        info.phasemodel, info.labels = model, labels
        return info

    sel = LabelSelector.model_validate({"matchLabels": {"app": "train"}})
    pods = [p("ok", "pm", {"app": "train"}), p("none", "", {"app": "train"}),
            p("ghost", "gone", {"app": "train"}), p("other", "pm", {"app": "infer"}),
            p("unreadable", "broken", {})]
    got = {o.pod.name: o.reason for o in find_orphans(pods, {("ns", "pm"): sel,
                                                              ("ns", "broken"): None})}
    assert got == {"none": "NoPhaseModel", "ghost": "PhaseModelNotFound",
                   "other": "SelectorMismatch"}


def test_the_sweeps_view_of_a_pod_finds_what_the_whole_pod_finds():
    from ai4dl.controller.orphans import find_orphans, sweep_view
    from ai4dl.crd_spec import LabelSelector

    def item(name, model, labels, deleting=False):
        meta = {"name": name, "namespace": "ns", "uid": name + "-uid", "labels": labels,
                "annotations": {**({MODEL_ANNOTATION: model} if model else {}),
                                A_STATE: "x" * 100},
                **({"deletionTimestamp": "2026-12-06T00:00:00Z"} if deleting else {})}
        return {"metadata": meta, "spec": {"containers": [{"name": "main"}]},
                "status": {"phase": "Running"}}

    items = [item("ok", "pm", {"app": "train"}), item("none", "", {"app": "train"}),
             item("ghost", "gone", {"app": "train"}), item("other", "pm", {"app": "infer"}),
             item("going", "", {}, deleting=True)]
    selectors = {("ns", "pm"): LabelSelector.model_validate({"matchLabels": {"app": "train"}})}
    whole = find_orphans([pod_info(i) for i in items], selectors)
    slim = find_orphans([sweep_view(i) for i in items], selectors)
    assert [(o.pod.namespace, o.pod.name, o.pod.uid, o.reason, o.message) for o in slim] == \
        [(o.pod.namespace, o.pod.name, o.pod.uid, o.reason, o.message) for o in whole]
    assert {o.pod.name for o in slim} == {"none", "ghost", "other"}
    assert sweep_view(items[0]).annotations == {}     # the records are not held


def test_a_sweep_asks_for_the_pods_metadata_only_and_reads_that_list():
    """The sweep LISTs PartialObjectMetadata (it needs names, labels and one annotation, not
    whole pods); the API server's answer, items of metadata only, finds the orphans the whole
    pods find (the real API server's answer: tests/test_faults_bad_input)."""
    import json

    from ai4dl.controller import orphans

    asked = []

    class Answer:
        def __init__(self, body):
            self.data = json.dumps(body).encode()

        def release_conn(self):
            pass

    class Core:
        def list_pod_for_all_namespaces(self, **kwargs):
            asked.append(kwargs)
            return Answer({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                           "metadata": {}, "items": [
                               {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                "metadata": {"name": n, "namespace": "ns", "uid": n,
                                             "labels": {"app": "train"},
                                             "annotations": {MODEL_ANNOTATION: m}}}
                               for n, m in (("ok", "pm"), ("ghost", "gone"))]})

    class Custom:
        def list_cluster_custom_object(self, *args):
            return {"items": [{"metadata": {"namespace": "ns", "name": "pm"},
                               "spec": {"selector": {"matchLabels": {"app": "train"}}}}]}

    events = []
    found = orphans.OrphanSweep(Core(), Custom(), [], lambda *a: events.append(a)).run()
    assert [(o.pod.name, o.reason) for o in found] == [("ghost", "PhaseModelNotFound")]
    assert "as=PartialObjectMetadataList" in asked[0]["_headers"]["Accept"]
    assert asked[0]["_headers"]["Accept"].endswith(",application/json")   # else whole pods


# ----------------------------------------------------------------------------- served policy
def auto_spec(model_or_none, **policy):
    feats = (model_or_none.features_ if model_or_none is not None else ("cpu", "memory"))
    return PhaseModelSpec.model_validate({
        "features": [{"name": f, "query": f + "{{{selector}}}",
                      "unit": {"cpu": "cores", "memory": "bytes"}.get(f, "unknown")}
                     for f in feats],
        "stepSeconds": 15, "windowSeconds": 600,
        "policy": {"mode": "InPlace", "minChange": 0.0, **policy}})


def test_auto_before_any_model_serves_the_reactive_baseline(window):
    spec = auto_spec(None)
    x = window[:, :2]                                   # cpu, memory only
    out = run(None, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): x},
              n_context=0)
    assert out.served.baseline and out.served.names == ("adaptive-max", "adaptive-max")
    plan = out.pods[0]
    req = plan.resize["spec"]["containers"][0]["resources"]["requests"]
    # the last window's max (halving at most, maxDecrease 0.5), memory above the working set
    assert parse_quantity(req["cpu"]) == pytest.approx(max(x[-40:, 0].max(), 4.0), abs=1e-3)
    assert A_PHASE not in plan.annotations                 # no model, no phase
    assert plan.events[0][2].startswith("no phase model: ")


@pytest.fixture(scope="module")
def chosen_model(fitted_model, synthetic_train):
    """The session's model with auto's choice and both head-room tables, as the trainer
    stores them (windows of 40 samples)."""
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    traces, _ = synthetic_train
    m = PhaseModel.from_document(fitted_model.to_document())
    choice = choose_served_policy(m, list(traces), spec_for(m, kind="auto"))
    return m, choice


def test_auto_serves_the_trainers_choice_from_the_document(chosen_model, window):
    from ai4dl.method.model import PhaseModel
    from ai4dl.serving import served_policy

    m, choice = chosen_model
    m = PhaseModel.from_document(json.loads(m.to_document().model_dump_json(by_alias=True)))
    spec = spec_for(m, kind="auto")
    served = served_policy(spec, m)
    assert served.names == tuple(choice.winners) and not served.baseline
    assert served.reason.startswith("auto: ")
    out = run(m, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): window})
    assert out.pods[0].containers[0].proposal       # planned by the served policy
    # explicit kinds serve the stored tables too; a window the table was not fitted for is
    # refused with one line
    for kind in ("phase-headroom", "burst-headroom"):
        assert served_policy(spec_for(m, kind=kind), m).names == (kind, kind)
    with pytest.raises(ValueError, match="fitted for windows of 40 samples"):
        served_policy(PhaseModelSpec.model_validate(
            {**spec.model_dump(by_alias=True, exclude_none=True), "windowSeconds": 300}), m)


def test_running_statistics_travel_with_the_pod(chosen_model, window):
    m, _ = chosen_model
    spec = spec_for(m, kind="phase-headroom")
    first = run(m, spec, [pod("a", {"cpu": "8", "memory": "32Gi"})], {("ns", "a", "main"): window})
    own1 = first.pods[0].containers[0].own
    assert own1.n == 40                                  # the window, not its context
    state = json.loads(first.pods[0].annotations[A_STATE])
    assert state["own"]["main"]["n"] == own1.n and state["model"] == ""
    # a restarted operator (no histories in memory) resumes from the pod's annotation
    later = plan_window(spec, m, [pod("a", {"cpu": "8", "memory": "32Gi"},
                                      annotations={A_STATE: json.dumps(
                                          {**state, "window": WINDOW_START - 600})})],
                        {("ns", "a", "main"): window}, 3, WINDOW_START + 600, "2027-01-01T00:10:00Z")
    assert later.pods[0].containers[0].own.n == own1.n + 40


def test_a_new_container_gets_the_learned_cold_start(chosen_model, window):
    import datetime as dt

    m, _ = chosen_model
    spec = spec_for(m, kind="phase-headroom")
    recent = dt.datetime.fromtimestamp(WINDOW_START - 60, dt.timezone.utc).isoformat()
    partial = window.copy()
    partial[:-5] = np.nan                                # five samples so far
    out = run(m, spec, [pod("new", {"cpu": "8", "memory": "32Gi"}, started=recent)],
              {("ns", "new", "main"): partial})
    c = out.pods[0].containers[0]
    from ai4dl.policy.headroom import from_table

    table = from_table(m.policy_tables_[0])
    assert c.cold_start and c.proposal["cpu"] == pytest.approx(table.cold_start_[0])
    assert out.pods[0].resize is not None
    assert "coldStart" in out.pods[0].annotations[A_RECOMMENDATION]
    # no sample at all: memory is not lowered (no working set to protect)
    out = run(m, spec, [pod("new", {"cpu": "8", "memory": "1Gi"}, started=recent)], {})
    t = out.pods[0].containers[0].target
    assert t["memory"] >= GiB



def test_a_known_workloads_new_container_keeps_its_profiles_start(chosen_model, window):
    """Issue 42: a container of a known workload with no full window yet keeps the first
    request its profile gives (what admission set) instead of the pooled cold-start level: the
    evaluator serves a run's first window at its start (the pooled level is other workloads')."""
    import datetime as dt

    m, _ = chosen_model
    spec = spec_for(m, kind="phase-headroom")
    recent = dt.datetime.fromtimestamp(WINDOW_START - 60, dt.timezone.utc).isoformat()
    partial = window.copy()
    partial[:-5] = np.nan
    p = pod("new", {"cpu": "3", "memory": "6Gi"}, started=recent)
    own = np.array([3.0, 6 * GiB])
    out = plan_window(spec, m, [p], {("ns", "new", "main"): partial}, 3, WINDOW_START,
                      "2027-01-01T00:00:00Z", starts={("new-uid", "main"): own}).pods[0]
    c = out.containers[0]
    assert c.cold_start and c.proposal == {"cpu": 3.0, "memory": 6 * GiB}
    # its cpu start stands; memory only rises (to the working set seen, with its margin)
    assert c.target["cpu"] == 3.0 and c.target["memory"] >= 6 * GiB
    # another pod's start is not this one's: the pooled level, as before
    pooled = plan_window(spec, m, [p], {("ns", "new", "main"): partial}, 3, WINDOW_START,
                         "2027-01-01T00:00:00Z", starts={("x-uid", "main"): own}).pods[0]
    from ai4dl.policy.headroom import from_table

    table = from_table(m.policy_tables_[0])
    assert pooled.containers[0].proposal["cpu"] == pytest.approx(table.cold_start_[0])
    # a container with a full window is planned by the policy, whatever its profile says
    full = plan_window(spec, m, [pod("old", {"cpu": "3", "memory": "6Gi"})],
                       {("ns", "old", "main"): window}, 3, WINDOW_START, "2027-01-01T00:00:00Z",
                       starts={("old-uid", "main"): own}).pods[0]
    assert not full.containers[0].cold_start


def test_the_runtime_gives_a_started_container_its_workloads_first_request():
    """What the window loop hands the plan as ``starts``: only containers started within the
    window (and grace) of a workload with a profile of the served resources; the profile's
    own first request (admission's, same growth limit)."""
    from ai4dl.controller.profiles import first_requests
    from ai4dl.rules.workload_profile import RunSummary, profile_from_runs

    run_ = RunSummary(end=WINDOW_START - 3600, duration=600.0, first=(2.0, 3 * GiB),
                      peak=(2.0, 5 * GiB), peak_at=(10.0, 300.0),
                      early=((2.0, 3 * GiB), (2.0, 8 * GiB)))
    profile = profile_from_runs(("cpu", "memory"), [run_])
    firsts = {("Job/train", "main"): profile.compact()}
    p = pod("r", {"cpu": "1", "memory": "2Gi"})
    p.workload, p.started = "Job/train", {"main": WINDOW_START - 20.0}
    got = first_requests([p], firsts, WINDOW_START, 90.0, ("cpu", "memory"), 1.0)
    assert list(got) == [("r-uid", "main")]
    # its cpu no higher than the container's own request (CAPPED_AT_REQUEST); memory above
    assert profile.first_request(WINDOW_START, 1.0)[0] == pytest.approx(2.3)
    np.testing.assert_allclose(got[("r-uid", "main")],
                               [1.0, profile.first_request(WINDOW_START, 1.0)[1]])
    assert got[("r-uid", "main")][1] == pytest.approx(4 * GiB * 1.15)   # the climb: 8 GiB / 2
    p.containers[0].requests["cpu"] = 4.0                                # room: the profile's
    np.testing.assert_allclose(
        first_requests([p], firsts, WINDOW_START, 90.0, ("cpu", "memory"), 1.0)[
            ("r-uid", "main")], profile.first_request(WINDOW_START, 1.0))
    p.started = {"main": WINDOW_START - 91.0}                              # a full window since
    assert first_requests([p], firsts, WINDOW_START, 90.0, ("cpu", "memory"), 1.0) == {}
    p.started = {"main": WINDOW_START - 20.0}
    assert first_requests([p], firsts, WINDOW_START, 90.0, ("memory", "cpu"), 1.0) == {}
    p.workload = "Job/other"
    assert first_requests([p], firsts, WINDOW_START, 90.0, ("cpu", "memory"), 1.0) == {}

# ----------------------------------------------------------------------------- kubelet answers
def node_pod(name, spec_res, actual_res=None, conditions=None, state=None, resize_policy=None,
             ours=True):
    """A Guaranteed pod as a kubelet reports it: ``actual_res`` in its container status (what
    the container has), ``spec_res`` what was asked for (by the operator, ``ours``: its
    last-applied record says so)."""
    annotations = {}
    if ours:
        annotations[A_LAST_APPLIED] = json.dumps({"window": 0, "containers": {"main": {
            "requests": spec_res, "limits": spec_res}}})
    if state is not None:
        annotations[A_STATE] = KEY.seal(state_scope("ns", name, name + "-uid"), state)
    container = {"name": "main", "resources": {"requests": spec_res, "limits": spec_res}}
    if resize_policy:
        container["resizePolicy"] = resize_policy
    status = {"phase": "Running", "conditions": conditions or []}
    if actual_res:
        status["containerStatuses"] = [{"name": "main", "resources": {
            "requests": actual_res, "limits": actual_res}}]
    return verify_pod(pod_info({
        "metadata": {"name": name, "namespace": "ns", "uid": name + "-uid",
                     "annotations": {MODEL_ANNOTATION: "pm", **annotations}},
        "spec": {"containers": [container]}, "status": status}), KEY)


REFUSED = [{"type": "PodResizeInProgress", "status": "True", "reason": "Error",
            "message": "attempting to set pod memory limit (17179869184) below current usage "
                       "(0)"}]


def test_a_refused_memory_decrease_is_taken_back_once_with_an_event(fitted_model, window):
    """PodResizeInProgress Error (the kubelet 1.34+ refuses a memory limit below usage): the
    spec is set back to what the container has (left in place, the kubelet would apply it at a
    dip in usage), one Warning Event names the pod and the kubelet's message, and the refused
    level is held for a back-off; this window's own target is not sent."""
    p = node_pod("r", {"cpu": "8", "memory": "16Gi"}, {"cpu": "8", "memory": "32Gi"}, REFUSED)
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "r", "main"): window}).pods[0]
    (body,) = plan.resize["spec"]["containers"]
    assert body["name"] == "main" and {part: {r: parse_quantity(q) for r, q in v.items()}
                                       for part, v in body["resources"].items()} == {
        "requests": {"memory": 32 * GiB}, "limits": {"memory": 32 * GiB}}, plan.resize
    assert plan.refused and "below current usage" in plan.refused
    (etype, reason, msg), = plan.events
    assert (etype, reason) == ("Warning", "ResizeRefused")
    assert "pod ns/r" in msg and "below current usage" in msg and \
        f"memory {format_memory(16 * GiB)}→{format_memory(32 * GiB)}" in msg, msg
    hold = json.loads(plan.annotations[A_STATE])["refused"]["main"]["memory"]
    assert hold["value"] == 16 * GiB and hold["n"] == 1
    assert hold["until"] == WINDOW_START + 3 * 600          # two windows held, then free


def test_a_refused_level_is_held_for_the_back_off_then_tried_again(fitted_model, window):
    """After a take-back the same (or a lower) memory is not asked for during the back-off, so
    the kubelet's refusal is not provoked every window; once it has passed the decrease is
    planned again; a refusal in a row doubles the back-off."""
    spec = spec_for(fitted_model)
    samples = {("ns", "h", "main"): window}
    first = run(fitted_model, spec, [node_pod("h", {"cpu": "8", "memory": "32Gi"})],
                samples).pods[0]
    want = first.resize["spec"]["containers"][0]["resources"]["requests"]
    assert parse_quantity(want["memory"]) < 32 * GiB, want     # the plan lowers memory
    hold = {"main": {"memory": {"value": 32 * GiB, "n": 1, "until": WINDOW_START + 600}}}
    held = run(fitted_model, spec, [node_pod("h", {"cpu": "8", "memory": "32Gi"},
                                             state={"refused": hold})], samples).pods[0]
    req = held.resize["spec"]["containers"][0]["resources"]["requests"]
    assert "memory" not in req and "cpu" in req                 # cpu still served
    hold["main"]["memory"]["until"] = WINDOW_START
    again = run(fitted_model, spec, [node_pod("h", {"cpu": "8", "memory": "32Gi"},
                                              state={"refused": hold})], samples).pods[0]
    assert again.resize["spec"]["containers"][0]["resources"]["requests"] == want
    # refused again: the next back-off is twice as long
    p = node_pod("h", {"cpu": "8", "memory": "16Gi"}, {"cpu": "8", "memory": "32Gi"}, REFUSED,
                 state={"refused": hold})
    plan = run(fitted_model, spec, [p], samples).pods[0]
    hold2 = json.loads(plan.annotations[A_STATE])["refused"]["main"]["memory"]
    assert hold2["n"] == 2 and hold2["until"] == WINDOW_START + 5 * 600


@pytest.mark.parametrize("actual, ours", [(None, True), ({"cpu": "8", "memory": "32Gi"}, False)],
                         ids=["no-status-resources", "not-the-operators-resize"])
def test_a_refusal_not_to_take_back_waits_with_the_kubelets_words(fitted_model, window, actual,
                                                                  ours):
    """Nothing to take back (the kubelet reports no resources), or the refused resize is not
    the operator's (its owner's own: the spec is not the operator's last-applied): no resize,
    a ResizeWaiting Warning with the kubelet's message."""
    p = node_pod("n", {"cpu": "8", "memory": "16Gi"}, actual, REFUSED, ours=ours)
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "n", "main"): window}).pods[0]
    assert plan.resize is None and plan.skipped == "resize-pending" and not plan.refused
    assert plan.events[0][:2] == ("Warning", "ResizeWaiting")
    assert "below current usage" in plan.events[0][2] and "pod ns/n" in plan.events[0][2]


def test_infeasible_at_the_planned_target_still_says_so(fitted_model, window):
    """A real Infeasible whose pending resize is this window's own target (the spec holds
    it): a ResizeWaiting Warning with the kubelet's message, not silence."""
    spec = spec_for(fitted_model)
    samples = {("ns", "i", "main"): window}
    first = run(fitted_model, spec, [node_pod("i", {"cpu": "8", "memory": "32Gi"})],
                samples).pods[0]
    target = first.resize["spec"]["containers"][0]["resources"]["requests"]
    p = node_pod("i", target, None, [{"type": "PodResizePending", "status": "True",
                                      "reason": "Infeasible",
                                      "message": "Node didn't have enough capacity"}])
    plan = run(fitted_model, spec, [p], samples).pods[0]
    assert plan.resize is None and plan.skipped == "resize-pending"
    assert plan.events == [("Warning", "ResizeWaiting", "a resize is still pending "
                            "(Infeasible): Node didn't have enough capacity")]


def test_restart_container_resources_are_not_resized(fitted_model, window):
    """resizePolicy RestartContainer for memory: memory is left as it is (an in-place resize
    would restart the training job), with a notice once; cpu (NotRequired) is resized."""
    p = node_pod("rc", {"cpu": "8", "memory": "32Gi"}, resize_policy=[
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
        {"resourceName": "cpu", "restartPolicy": "NotRequired"}])
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "rc", "main"): window}).pods[0]
    res = plan.resize["spec"]["containers"][0]["resources"]
    assert set(res["requests"]) == {"cpu"} and set(res["limits"]) == {"cpu"}, res
    assert [n[0] for n in plan.notices] == ["ResizeRestartsContainer"]
    assert "RestartContainer" in plan.notices[0][1]


def test_a_held_level_once_taken_is_forgotten(fitted_model, window):
    """The kubelet applied a level it had refused before (the pod's requests are at or below
    it, no error): the hold is dropped, so a later refusal starts the back-off afresh."""
    hold = {"main": {"memory": {"value": 16 * GiB, "n": 3, "until": WINDOW_START - 600},
                     "cpu": {"value": 2.0, "n": 1, "until": WINDOW_START - 600}}}
    p = node_pod("f", {"cpu": "8", "memory": "16Gi"}, {"cpu": "8", "memory": "16Gi"},
                 state={"refused": hold})
    plan = run(fitted_model, spec_for(fitted_model), [p], {("ns", "f", "main"): window}).pods[0]
    state = json.loads(plan.annotations[A_STATE])
    assert state["refused"] == {"main": {"cpu": hold["main"]["cpu"]}}, state


def test_memory_is_not_lowered_while_the_working_set_rises(fitted_model, window):
    """The safety layer's hold in the operator's plan: of two pods asking far more than they
    use, the one whose working set climbed over the window (doubling: a job still loading its
    data) keeps its memory request, the flat one is lowered; cpu comes down for both. The same
    rule as the evaluator's replay (tests/test_safety.py)."""
    spec = spec_for(fitted_model, kind="adaptive-max")
    flat, climbing = window.copy(), window.copy()
    top = float(window[-40:, 1].max())
    flat[-40:, 1] = top
    climbing[-40:, 1] = np.linspace(0.5, 1.0, 40) * top
    asked = {"cpu": "8", "memory": "64Gi"}
    out = run(fitted_model, spec, [pod("flat", asked), pod("climbing", asked)],
              {("ns", "flat", "main"): flat, ("ns", "climbing", "main"): climbing})
    t = {p.pod.name: p.containers[0].target for p in out.pods}
    assert t["flat"]["memory"] < 64 * GiB and t["flat"]["cpu"] < 8
    assert t["climbing"]["memory"] == 64 * GiB and t["climbing"]["cpu"] < 8


def test_an_oom_killed_container_gets_its_floor_at_once(fitted_model, window):
    """Issue 42: a container restarted after an OOM kill has its memory raised to its run's
    bumped peak in the same window, past the growth limit, within the ceiling."""
    spec = spec_for(fitted_model, maxIncrease=0.1, resources={"memory": {"ceiling": "40Gi"}})
    p = pod("o", {"cpu": "1", "memory": "2Gi"})
    base = plan_window(spec, fitted_model, [p], {("ns", "o", "main"): window}, 3, WINDOW_START,
                       "2027-01-01T00:00:00Z")
    # without it: the working-set rule (x1.1), not more
    assert base.pods[0].containers[0].target["memory"] < 9 * GiB
    floors = {("o-uid", "main"): {"memory": 12 * GiB}}
    plan = plan_window(spec, fitted_model, [p], {("ns", "o", "main"): window}, 3, WINDOW_START,
                       "2027-01-01T00:00:00Z", floors=floors).pods[0]
    assert plan.containers[0].target["memory"] == 12 * GiB
    req = plan.resize["spec"]["containers"][0]["resources"]["requests"]
    assert parse_quantity(req["memory"]) == 12 * GiB
    assert any(n[0] == "OOMKilled" and "12288Mi" in n[1] for n in plan.notices)
    # never past the ceiling
    floors = {("o-uid", "main"): {"memory": 100 * GiB}}
    plan = plan_window(spec, fitted_model, [p], {("ns", "o", "main"): window}, 3, WINDOW_START,
                       "2027-01-01T00:00:00Z", floors=floors).pods[0]
    assert plan.containers[0].target["memory"] == 40 * GiB


def test_a_workload_peak_is_held_through_the_safety_layer(fitted_model, window):
    """Issue 42: the memory a workload's profile holds this window (the runtime's ``held``)
    is kept by the safety layer: at once, within the ceiling, memory only."""
    spec = spec_for(fitted_model, maxIncrease=0.1)
    p = pod("h", {"cpu": "1", "memory": "2Gi"})
    held = {("h-uid", "main"): 20 * GiB}
    plan = plan_window(spec, fitted_model, [p], {("ns", "h", "main"): window}, 3, WINDOW_START,
                       "2027-01-01T00:00:00Z", held=held).pods[0]
    assert plan.containers[0].target["memory"] == 20 * GiB
    other = plan_window(spec, fitted_model, [p], {("ns", "h", "main"): window}, 3,
                        WINDOW_START, "2027-01-01T00:00:00Z",
                        held={("another-uid", "main"): 20 * GiB}).pods[0]
    assert other.containers[0].target["memory"] < 9 * GiB
    assert other.containers[0].target["cpu"] == plan.containers[0].target["cpu"]


def test_the_runtime_holds_a_known_workloads_stretches_in_their_windows():
    from ai4dl.controller.runtime import WindowRunner
    from ai4dl.rules.workload_profile import Hold

    runner = WindowRunner(None, None, None, "ns", "pm", key=KEY)
    # the workload's runs used 8 GiB in their first 5 minutes, 12 GiB in the next 5
    runner.holds = {("Job/train", "main"): Hold(np.array([0.0, 300.0, 600.0]),
                                                np.array([8 * GiB, 12 * GiB]), 12 * GiB, 350.0)}
    p = pod("r", {"cpu": "1", "memory": "2Gi"})
    p.workload, p.started = "Job/train", {"main": WINDOW_START - 200.0}
    assert runner._held([p], WINDOW_START, 60.0) == {("r-uid", "main"): 8 * GiB}
    # a window that reaches into the next stretch holds that stretch's level
    assert runner._held([p], WINDOW_START + 60.0, 60.0) == {("r-uid", "main"): 12 * GiB}
    assert runner._held([p], WINDOW_START + 400.0, 60.0) == {}   # past the runs' end
    p.workload = "Job/other"
    assert runner._held([p], WINDOW_START, 60.0) == {}
    # a Guaranteed pod: what is held is also its limit, so it holds the runs' peak until the
    # point where they reached it (usage over a limit is an OOM kill), with VPA's margin
    g = pod("g", {"cpu": "1", "memory": "2Gi"}, {"cpu": "1", "memory": "2Gi"})
    g.workload, g.started = "Job/train", {"main": WINDOW_START - 200.0}
    assert runner._held([g], WINDOW_START, 60.0) == {
        ("g-uid", "main"): pytest.approx(12 * GiB * 1.15)}
    assert runner._held([g], WINDOW_START + 151.0, 60.0) == {}   # past 350 s into its run


def test_a_window_that_changes_nothing_writes_no_status():
    """Issue 43: 1,000 idle PhaseModels made a status PATCH each per window. Written on change
    only (lastWindowTime alone is no change); a new process writes at its first window."""
    from ai4dl.controller.runtime import WindowRunner
    from ai4dl.controller.runtime_window import WindowReport

    class Custom:
        def __init__(self):
            self.patches = []

        def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, body,
                                                  **_):
            self.patches.append(body["status"])
            return RawAnswer()

    custom = Custom()
    runner = WindowRunner(None, custom, None, "ns", "pm", key=KEY)
    body = {"metadata": {"generation": 1}, "status": {}}
    for start in (600.0, 1200.0, 1800.0):
        runner._status(body, WindowReport(start), ready=True, reason="WindowProcessed",
                       message="0 pods, 0 resized", per_phase={})
    assert len(custom.patches) == 1 and custom.patches[0]["lastWindowTime"]
    runner._status(body, WindowReport(2400.0), ready=True, reason="WindowProcessed",
                   message="1 pods, 0 resized", per_phase={"0": 1})
    assert len(custom.patches) == 2 and custom.patches[1]["podsTracked"] == 0
    runner._status(body, WindowReport(3000.0), ready=False, reason="PrometheusUnavailable",
                   message="down")
    assert len(custom.patches) == 3
    again = WindowRunner(None, custom, None, "ns", "pm", key=KEY)      # a restart
    again._status(body, WindowReport(3600.0), ready=False, reason="PrometheusUnavailable",
                  message="down")
    assert len(custom.patches) == 4


def test_the_batch_judgement_passes_exactly_the_windows_classify_window_passes():
    from ai4dl.controller.plan import classify_window, plannable_windows, usable_context

    rng = np.random.default_rng(3)
    W, n_ctx, order, cols, limits = 10, 3, np.array([1, 0, 2]), [0, 1], [8.0, 1e12]
    samples = {}
    for i in range(300):
        x = rng.uniform(0, 4, (W + n_ctx, 3))
        x[:, 0] *= 1e9
        where = (rng.integers(0, W + n_ctx), rng.integers(0, 3))
        kind = i % 6
        if kind == 1:
            x[where] = np.nan
        elif kind == 2:
            x[where] = np.inf
        elif kind == 3:
            x[where] = -1.0
        elif kind == 4:
            x[where] = 1e13                  # above the memory maximum (column 0 here)
        samples[("ns", f"p{i}", "main")] = x
    samples[("ns", "short", "main")] = np.ones((W - 1, 3))
    samples[("ns", "none", "main")] = None
    judged = plannable_windows(samples, order, W, n_ctx, cols, limits)
    for ref, x in samples.items():
        if x is None or len(x) < W:
            assert ref not in judged
            continue
        xo = x[:, order]
        reason, _ = classify_window(xo, W, cols, limits)
        assert (ref in judged) == (reason is None), ref
        if reason is None:
            assert judged[ref].ctx == usable_context(xo[:-W][-n_ctx:], cols, limits)
            np.testing.assert_array_equal(judged[ref].x, xo)
    assert 0 < len(judged) < 300 and any(j.ctx == 0 for j in judged.values())
