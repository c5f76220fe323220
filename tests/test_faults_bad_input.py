"""Bad input never becomes a resize, and every skipped pod is visible (issue 11 items 2-4 and 7).

The operator (a subprocess, its own ServiceAccount, under the chart's admission policy) against
a real kube-apiserver + etcd and:

1. a fake Prometheus on 127.0.0.1 answering garbage on purpose (negative usage, 1e30 bytes,
   +Inf, NaN, empty and partial results, broken series, an answer that is not JSON);
2. the real Prometheus for bounds that cannot hold (a memory ceiling far below the working
   set; floor > ceiling), pods no PhaseModel serves (a missing PhaseModel, no PhaseModel, a
   selector mismatch; a BestEffort pod; a container list matching nothing) and a PhaseModel
   that is deleted;
3. the API server itself for model documents with absurd numbers.

Each case adds rows to one table (bad input, resizes from bad data — must be 0 — and the
signals raised), printed at the end and appended to ``$AI4DL_FAULT_REPORT`` when set.
Window 10 s, step 1 s (tests/test_operator_integration.py).

FakeKubelet, not the real node: the usage is garbage a fake Prometheus serves on purpose and
the pods only have to exist and be Running; a real node would add root and seconds per pod,
nothing to what is checked (zero writes, counted at the API server).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import re
import time
import uuid

import pytest

from ai4dl.controller.pods import A_PHASE, OWNED_ANNOTATIONS
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION, crd_manifest
from e2e.prometheus.fake import FakePrometheus
from e2e_fixtures_k8s import FakeKubelet, create_namespace
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401
                                   wait_for, write_report)
from test_operator_integration import (WINDOW, condition, events, jobs,  # noqa: F401
                                       make_phasemodel, model_doc, read_pm, requests_of, stack,
                                       start_pods, wait_condition)

pytestmark = pytest.mark.integration

REQUESTS = {"cpu": "8", "memory": "32Gi"}
ROWS: list[tuple[str, str, str]] = []     # (bad input, resizes from bad data, signals)


@pytest.fixture(scope="module", autouse=True)
def table(request):
    yield
    write_report(request, "bad input", "| bad input | resizes from bad data | signals raised |",
                 ROWS, append=True)


def new_namespace(kube_cluster, what: str) -> tuple[str, FakeKubelet]:
    ns = f"bad-{what}-{uuid.uuid4().hex[:6]}"
    create_namespace(kube_cluster, ns)
    return ns, FakeKubelet(kube_cluster.api_client, namespace=ns)


def age(kube_cluster, ns: str, name: str, seconds: float = 3600) -> None:
    """Say the pod's containers started ``seconds`` ago (as a kubelet would after a restart of
    the operator): its missing metrics are then a gap, not a container warming up."""
    pod = kube_cluster.api_client.sanitize_for_serialization(
        kube_cluster.core.read_namespaced_pod(name, ns))
    then = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")
    statuses = pod["status"].get("containerStatuses") or []
    for cs in statuses:          # keep the rest (resources: the node supports resize)
        cs["state"] = {"running": {"startedAt": then}}
    kube_cluster.core.patch_namespaced_pod_status(name, ns, {"status": {
        "startTime": then, "containerStatuses": statuses}})


def metric_values(text: str, name: str, **labels) -> dict[str, float]:
    """{reason label (or the whole label set): value} of a metric's lines matching labels."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.rindex("}")]))
        if all(got.get(k) == v for k, v in labels.items()):
            out[got.get("reason", line)] = float(line.rsplit(" ", 1)[1])
    return out


def warnings_by_pod(kube_cluster, ns) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in events(kube_cluster, ns):
        if e.type == "Warning":
            out.setdefault(e.involved_object.name, []).append(e.reason)
    return out


@pytest.fixture(scope="module")
def module_operator(stack, operator_kubeconfig, crd, tmp_path_factory):
    """One operator on the real Prometheus for the tests of part 2, sweeping for orphans
    every 2 s."""
    _, prom = stack
    op = Operator(operator_kubeconfig, prom.url,
                  tmp_path_factory.mktemp("bad-input") / "operator.log",
                  extra_args=("--orphan-check-seconds", "2")).start()
    yield op
    op.stop()
    if os.environ.get("AI4DL_SHOW_OPERATOR_LOG"):
        print(op.tail(200))


def window_lines(op: Operator, ns: str) -> list[str]:
    text = op.log.read_text() if op.log.exists() else ""
    return re.findall(rf"PhaseModel {ns}/pm window [0-9.]+: (.*)", text)


def wait_windows(op: Operator, ns: str, n: int, timeout: float) -> list[str]:
    try:
        return wait_for(lambda: (lambda w: w if len(w) >= n else None)(window_lines(op, ns)),
                        timeout, what=f"{n} windows of {ns}/pm")
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- operator log:\n{op.tail(30)}") from None


# ----------------------------------------------------------------------------- 1. garbage
def test_garbage_metrics_never_resize(kube_cluster, model_doc, operator_kubeconfig, crd,
                                      tmp_path):
    """Each pod gets one kind of garbage from the fake Prometheus; only the pod with good
    samples is resized, the others are skipped with their reason, and the PhaseModel says so
    (MetricsIncomplete, the share; Degraded) and /metrics counts them."""
    ns, kubelet = new_namespace(kube_cluster, "garbage")
    fake = FakePrometheus().start()
    names = {mode: f"p-{mode}" for mode in ("good", "negative", "huge", "inf", "nan", "empty",
                                            "partial", "broken")}
    for mode, pod in names.items():
        kubelet.create_pod(pod, requests=REQUESTS, labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: "pm"})
        age(kube_cluster, ns, pod)
        fake.pods[(ns, pod, "main")] = mode
    before = {pod: requests_of(kube_cluster, ns, pod) for pod in names.values()}
    make_phasemodel(kube_cluster, ns, "pm", model_doc, minChange=0.05)
    op = Operator(operator_kubeconfig, fake.url, tmp_path / "operator.log").start()
    try:
        wait_windows(op, ns, 3, 4 * WINDOW + 15)
        pm = wait_condition(kube_cluster, ns, "MetricsIncomplete", "True", WINDOW)
        metrics = op.metrics()
        # an answer that is not JSON at all: the window is skipped, Degraded says why
        fake.answer = "not-json"
        unavailable = wait_for(lambda: (lambda pm: pm if condition(pm, "Ready")["reason"]
                                        == "PrometheusUnavailable" else None)(
            read_pm(kube_cluster, ns, "pm")), 2 * WINDOW + 10, what="Ready False")
    finally:
        op.stop()
        fake.stop()
    after = {pod: requests_of(kube_cluster, ns, pod) for pod in names.values()}
    resized = {pod for pod in names.values() if after[pod] != before[pod]}
    assert resized == {"p-good"}, resized            # the operator worked, on good data only
    resize_events = {e.involved_object.name for e in events(kube_cluster, ns, "Resized")}
    assert resize_events == {"p-good"}

    msg = condition(pm, "MetricsIncomplete")["message"]
    assert msg.startswith("7 of 8 pods (88 %) skipped this window"), msg
    assert "bad-sample 3" in msg and "no-data 3" in msg and "partial-data 1" in msg, msg
    assert condition(pm, "Degraded")["status"] == "True"
    assert condition(pm, "Degraded")["reason"] == "MetricsIncomplete"
    assert condition(pm, "Ready")["status"] == "True"          # the window itself was processed
    skipped_now = metric_values(metrics, "ai4dl_pods_skipped", namespace=ns)
    assert skipped_now == {"bad-sample": 3.0, "no-data": 3.0, "partial-data": 1.0,
                           "duplicate-series": 0.0}, skipped_now
    totals = metric_values(metrics, "ai4dl_skipped_windows_total", namespace=ns)
    assert totals.get("bad-sample", 0) >= 3 * 2 and totals.get("no-data", 0) >= 3 * 2, totals
    assert condition(unavailable, "Degraded")["message"].endswith(
        "is not JSON (is this Prometheus's URL?)")
    assert condition(unavailable, "Ready")["status"] == "False"

    reason_of = {"negative": "bad-sample", "huge": "bad-sample", "inf": "bad-sample",
                 "nan": "no-data", "empty": "no-data", "partial": "partial-data",
                 "broken": "no-data"}
    what = {"negative": "negative usage (cpu and memory)", "huge": "memory 1e30 bytes",
            "inf": "memory +Inf", "nan": "NaN samples", "empty": "empty result",
            "partial": "every other sample missing", "broken": "series without a container"}
    for mode, reason in reason_of.items():
        pod = names[mode]
        n = int(pod in resized)
        assert n == 0
        ROWS.append((f"Prometheus answers {what[mode]}", str(n),
                     f"skipped `{reason}`; MetricsIncomplete 7 of 8 pods (88 %); Degraded; "
                     f"ai4dl_pods_skipped{{reason=\"{reason}\"}}"))
    ROWS.append(("Prometheus answers something that is not JSON", "0",
                 "window skipped; Ready False, Degraded PrometheusUnavailable"))


# ----------------------------------------------------------------------------- 2. bounds
def test_a_ceiling_below_the_working_set_is_approached_step_by_step(
        kube_cluster, stack, jobs, model_doc, module_operator):
    exporter, _ = stack
    ns, kubelet = new_namespace(kube_cluster, "ceiling")
    start_pods(kubelet, exporter, jobs, ns, ["c1", "c2"], requests=REQUESTS)
    make_phasemodel(kube_cluster, ns, "pm", model_doc, minChange=0.05,
                    resources={"memory": {"ceiling": "256Mi"}})
    GiB = 2 ** 30

    history = {p: [32 * GiB] for p in ("c1", "c2")}

    def reached():
        for p in history:
            m = requests_of(kube_cluster, ns, p)["memory"]
            if m != history[p][-1]:
                history[p].append(m)
        return all(h[-1] <= 4 * GiB for h in history.values()) and history
    wait_for(reached, 7 * WINDOW + 15, interval=0.5, what="memory stepped down to 4Gi")
    for p, steps in history.items():
        for a, b in zip(steps, steps[1:]):
            assert b >= a * 0.5 - 1, (p, steps)          # never more than maxDecrease 0.5
    pm = wait_condition(kube_cluster, ns, "BoundsConflict", "True", WINDOW)
    assert condition(pm, "BoundsConflict")["reason"] == "CeilingBelowUsage"
    warned = warnings_by_pod(kube_cluster, ns)
    assert warned.get("c1", []).count("CeilingBelowUsage") == 1        # once, not per window
    assert warned.get("c2", []).count("CeilingBelowUsage") == 1
    ROWS.append(("memory ceiling 256Mi on pods using GiBs (32Gi requested)",
                 "0 beyond maxDecrease (" + "→".join(f"{s / GiB:g}" for s in history["c1"])
                 + " GiB)",
                 "Warning CeilingBelowUsage once per pod; BoundsConflict CeilingBelowUsage"))


def bounds_rule_in_force(kube_cluster, ns: str) -> bool:
    """Whether the API server refuses a PhaseModel whose cpu floor is above its ceiling (a
    dry-run create: the schema it holds now)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": "bounds-probe"},
            "spec": {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 1,
                     "windowSeconds": WINDOW,
                     "policy": {"resources": {"cpu": {"floor": "8", "ceiling": "1"}}}}}
    try:
        client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, body, dry_run="All")
    except ApiException as err:
        if err.status == 422 and "floor must not be above ceiling" in (err.body or ""):
            return True
        raise
    return False


@contextlib.contextmanager
def crd_without_bounds_rule(kube_cluster, ns: str):
    """The PhaseModel CRD as it was before the floor <= ceiling rule, put back afterwards (the
    API server keeps objects stored under the older schema, and lets their status change).
    Each change is waited for until the API server applies it (within a second or so), as
    a dry-run create in ``ns`` shows."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube_cluster.api_client)

    def replace(body):
        current = ext.read_custom_resource_definition(body["metadata"]["name"])
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(body["metadata"]["name"], body)

    older = crd_manifest()
    bounds = (older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
              ["properties"]["policy"]["properties"]["resources"]["additionalProperties"])
    del bounds["x-kubernetes-validations"]
    replace(older)
    wait_for(lambda: not bounds_rule_in_force(kube_cluster, ns), 30, interval=0.1,
             what="the CRD without its floor <= ceiling rule in force")
    try:
        yield
    finally:
        replace(crd_manifest())
        wait_for(lambda: bounds_rule_in_force(kube_cluster, ns), 30, interval=0.1,
                 what="the CRD's floor <= ceiling rule in force again")


def test_floor_above_ceiling_holds_the_resource(kube_cluster, stack, jobs, model_doc,
                                                module_operator):
    exporter, _ = stack
    ns, kubelet = new_namespace(kube_cluster, "floor")
    start_pods(kubelet, exporter, jobs, ns, ["f1"], requests=REQUESTS)
    # The CRD refuses floor > ceiling at apply time (a CEL rule): this is an object stored
    # before the rule existed, which the operator must still handle on its own.
    with crd_without_bounds_rule(kube_cluster, ns):
        make_phasemodel(kube_cluster, ns, "pm", model_doc, minChange=0.05,
                        resources={"cpu": {"floor": "8", "ceiling": "1"}})
    wait_windows(module_operator, ns, 3, 5 * WINDOW + 15)
    req = requests_of(kube_cluster, ns, "f1")
    assert req["cpu"] == 8.0 and req["memory"] < 32 * 2 ** 30     # cpu held, memory sized
    pm = wait_condition(kube_cluster, ns, "BoundsConflict", "True", WINDOW)
    assert condition(pm, "BoundsConflict")["reason"] == "FloorAboveCeiling"
    assert "floor 8 > ceiling 1" in condition(pm, "BoundsConflict")["message"]
    on_pm = [e for e in events(kube_cluster, ns, "FloorAboveCeiling")
             if e.involved_object.kind == "PhaseModel"]
    assert len(on_pm) == 1 and on_pm[0].type == "Warning"         # once, when it appeared
    ROWS.append(("cpu floor 8 > ceiling 1", "0 (cpu left at 8000m)",
                 "Warning FloorAboveCeiling on the PhaseModel once; BoundsConflict "
                 "FloorAboveCeiling"))


def test_a_model_fitted_at_another_step_resizes_nothing(kube_cluster, stack, jobs, model_doc,
                                                        module_operator):
    """A model fitted at 15 s in a PhaseModel served at stepSeconds 1 (what `ai4dl train
    --phasemodel` wrote before it compared them): its history and phases would be read at
    another step. The operator says so (Degraded/InvalidModel) and writes nothing."""
    exporter, _ = stack
    ns, kubelet = new_namespace(kube_cluster, "step")
    start_pods(kubelet, exporter, jobs, ns, ["s1"], requests=REQUESTS)
    before = requests_of(kube_cluster, ns, "s1")
    make_phasemodel(kube_cluster, ns, "pm", {**model_doc, "stepSeconds": 15.0},
                    minChange=0.05)
    pm = wait_condition(kube_cluster, ns, "Degraded", "True", 2 * WINDOW + 15)
    degraded = condition(pm, "Degraded")
    assert degraded["reason"] == "InvalidModel", degraded
    assert "spec.model was fitted at a step of 15 s, spec.stepSeconds is 1" in \
        degraded["message"], degraded
    time.sleep(WINDOW)                          # one more window: still nothing written
    assert requests_of(kube_cluster, ns, "s1") == before
    assert not events(kube_cluster, ns, "Resized")
    annotations = kube_cluster.core.read_namespaced_pod("s1", ns).metadata.annotations or {}
    assert not set(annotations) & set(OWNED_ANNOTATIONS), annotations
    ROWS.append(("model fitted at a 15 s step in a PhaseModel of stepSeconds 1", "0",
                 f"Ready False, Degraded InvalidModel: {degraded['message'][:80]}"))


# ----------------------------------------------------------------------------- 3. unserved pods
def test_pods_no_phasemodel_serves_are_told_once(kube_cluster, stack, jobs, model_doc,
                                                 module_operator):
    exporter, _ = stack
    ns, kubelet = new_namespace(kube_cluster, "orphans")
    make_phasemodel(kube_cluster, ns, "pm", model_doc)
    serving = {OPT_IN_LABEL: "true", "app": "train"}
    start_pods(kubelet, exporter, jobs, ns, ["ghost"], model="no-such-model")
    kubelet.create_pod("unnamed", requests=REQUESTS, labels=serving)
    kubelet.create_pod("mismatch", requests=REQUESTS, labels={OPT_IN_LABEL: "true", "app": "x"},
                       annotations={MODEL_ANNOTATION: "pm"})
    kubelet.create_pod("besteffort", labels=serving, annotations={MODEL_ANNOTATION: "pm"})
    exporter.add_pod((ns, "besteffort", "main"), jobs[0][0])
    ns2, kubelet2 = new_namespace(kube_cluster, "nope")
    make_phasemodel(kube_cluster, ns2, "pm", model_doc, containers=["nope"])
    start_pods(kubelet2, exporter, jobs, ns2, ["nope"], requests=REQUESTS)
    expected = {(ns, "ghost"): "PhaseModelNotFound", (ns, "unnamed"): "NoPhaseModel",
                (ns, "mismatch"): "SelectorMismatch", (ns, "besteffort"): "BestEffortPod",
                (ns2, "nope"): "NoManagedContainer"}

    def told():
        got = {**{(ns, p): r for p, r in _flat(warnings_by_pod(kube_cluster, ns))},
               **{(ns2, p): r for p, r in _flat(warnings_by_pod(kube_cluster, ns2))}}
        return got if all(got.get(k) == v for k, v in expected.items()) else None
    wait_for(told, 3 * WINDOW + 15, what="a Warning Event for every pod nobody serves")
    time.sleep(2 * WINDOW)                          # more windows and sweeps: still one each
    for (where, pod), reason in expected.items():
        got = warnings_by_pod(kube_cluster, where).get(pod, [])
        assert got == [reason], (pod, got)
        ROWS.append((_ORPHAN_CASES[reason], "0", f"Warning {reason} once (after 3+ windows)"))
    orphans = metric_values(module_operator.metrics(), "ai4dl_orphan_pods", namespace=ns)
    assert orphans == {"PhaseModelNotFound": 1.0, "NoPhaseModel": 1.0, "SelectorMismatch": 1.0}


_ORPHAN_CASES = {
    "PhaseModelNotFound": "pod names a PhaseModel that does not exist",
    "NoPhaseModel": "opted-in pod names no PhaseModel",
    "SelectorMismatch": "pod names a PhaseModel whose selector it does not match",
    "BestEffortPod": "BestEffort pod (no requests)",
    "NoManagedContainer": "policy.containers [nope] matches none of the pod's containers",
}


def _flat(by_pod: dict[str, list[str]]):
    for pod, reasons in by_pod.items():
        for r in reasons:
            yield pod, r


def test_deleting_a_phasemodel_removes_its_annotations(kube_cluster, stack, jobs, model_doc,
                                                       module_operator):
    from kubernetes import client

    exporter, _ = stack
    ns, kubelet = new_namespace(kube_cluster, "delete")
    start_pods(kubelet, exporter, jobs, ns, ["d1", "d2"], requests=REQUESTS)
    make_phasemodel(kube_cluster, ns, "pm", model_doc, mode="Recommend")
    wait_for(lambda: all(A_PHASE in (kube_cluster.core.read_namespaced_pod(p, ns).metadata
                                     .annotations or {}) for p in ("d1", "d2")),
             3 * WINDOW + 15, what="annotations on both pods")
    client.CustomObjectsApi(kube_cluster.api_client).delete_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "pm")

    def gone():
        return not client.CustomObjectsApi(kube_cluster.api_client).list_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL)["items"]
    wait_for(gone, 30, what="the PhaseModel deleted (finalizer released)")
    time.sleep(WINDOW)       # a late window must not write them back
    for p in ("d1", "d2"):
        ann = kube_cluster.core.read_namespaced_pod(p, ns).metadata.annotations or {}
        assert not set(ann) & set(OWNED_ANNOTATIONS), ann
        assert ann[MODEL_ANNOTATION] == "pm"            # the user's own annotation stays
    ROWS.append(("PhaseModel deleted", "0", "its ai4dl.io/ annotations removed from its 2 pods"))


# ----------------------------------------------------------------------------- 4. documents
@pytest.mark.parametrize("what, mutate, message", [
    ("phase mean 1e6 cores", lambda d: d["phases"][0]["mean"].__setitem__(0, 1e6),
     "phase statistics must be those of real samples"),
    ("phase std -3", lambda d: d["phases"][0]["std"].__setitem__(0, -3.0),
     "should be greater than or equal to 0"),
    ("scaler mean 1e300", lambda d: d["scaler"]["mean"].__setitem__(0, 1e300),
     "scaler.mean must lie within the training data's range"),
    ("negative usage in every phase", lambda d: [p["min"].__setitem__(1, -1.0)
                                                 for p in d["phases"]],
     "cannot be negative"),
    ("statistics beyond any machine (x1e5)",
     lambda d: [p.__setitem__(f, [v * 1e5 for v in p[f]]) for p in d["phases"]
                for f in ("mean", "std", "min", "max", "p50", "p90", "p95", "p99")],
     "beyond any machine"),
    ("a transition row summing to 0.5",
     lambda d: d["transitions"].__setitem__(0, [v * 0.5 for v in d["transitions"][0]]),
     "every row must be probabilities summing to 1"),
])
def test_absurd_model_documents_are_refused_by_kubectl_apply(kube_cluster, k8s_namespace, crd,
                                                             model_doc, what, mutate, message):
    """The CRD's CEL rules (generated from the pydantic validators) refuse the document at
    the API server, so `kubectl apply` (or the trainer) fails, never a window."""
    import subprocess

    from e2e.controlplane.cluster import bin_dir

    doc = copy.deepcopy(model_doc)
    mutate(doc)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": "forged", "namespace": k8s_namespace},
            "spec": {"model": doc}}
    r = subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig", str(kube_cluster.kubeconfig),
                        "apply", "-f", "-"], input=json.dumps(body), text=True,
                       capture_output=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    ROWS.append((f"model document: {what}", "0", "kubectl apply refused: " + message))
