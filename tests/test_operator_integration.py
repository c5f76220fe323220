"""The operator against a real kube-apiserver + etcd and a real Prometheus server.

The operator runs as a subprocess from its console entrypoint (as in the image), with a
kubeconfig for its own ServiceAccount bound to deploy/rbac.yaml, so every test also proves the
least-privilege RBAC is enough. Pods are bound to a fake node; a kubelet stand-in marks them
Running; the exporter plays synthetic DL jobs as cAdvisor metrics on a compressed clock
(15 trace seconds per wall second), so one PhaseModel window is 10 s of wall time
(stepSeconds 1, windowSeconds 10).

FakeKubelet, not the real node: the usage is trace-driven (a DL job's phases played by the
exporter; busybox pods on the real node use nothing a model can phase) and these tests run
without root. That the operator's resize reaches the cgroups on a real kubelet is
tests/test_real_node.py's (test_operator_inplace_resize_reaches_cgroups).
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from ai4dl.method import synthetic
from ai4dl.controller.podstate import peek
from ai4dl.controller.pods import A_PHASE, A_RECOMMENDATION, A_STATE
from ai4dl.quantity import parse_quantity
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.method.model import PhaseModel
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401 (fixtures)
                                   wait_for)

REPO = Path(__file__).resolve().parent.parent
WINDOW, STEP = 10, 1
SPEED = 15.0

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model_doc(synthetic_jobs_doc):
    """A small model of synthetic DL jobs (cpu cores, memory bytes), 15 s trace step: this
    module's copy of the session's fit (tests/conftest.py)."""
    doc = copy.deepcopy(synthetic_jobs_doc)
    # The exporter plays these 15 s traces 15 times faster (SPEED): one trace step is one
    # second of the cluster's time, the PhaseModels' stepSeconds, which the operator requires
    # the model's step to equal.
    doc["stepSeconds"] = float(STEP)
    return doc


@pytest.fixture(scope="module")
def chosen_doc(model_doc):
    """The same model with auto's choice and both head-room tables, as the trainer stores
    them, fitted on synthetic jobs for this module's 10-sample windows."""
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.trainer import choose_served_policy

    cfg = synthetic.SyntheticConfig(n_features=2)
    traces, _ = synthetic.generate(30, seed=21, config=cfg)
    model = PhaseModel.from_document(model_doc)
    spec = PhaseModelSpec.model_validate({"stepSeconds": STEP, "windowSeconds": WINDOW})
    choose_served_policy(model, list(traces), spec)
    return json.loads(model.to_document().model_dump_json(by_alias=True, exclude_none=True))


@pytest.fixture(scope="module")
def jobs():
    """Executions the exporter plays (long ones, so they do not end during a test)."""
    cfg = synthetic.SyntheticConfig(n_features=2, epochs=(10, 12))
    traces, truth = synthetic.generate(6, seed=33, config=cfg)
    return list(traces), truth


@pytest.fixture(scope="module")
def stack(trace_exporter, prometheus_server):
    exporter = trace_exporter({}, speed=SPEED, loop=True)
    prom = prometheus_server([exporter], scrape_interval="1s")
    return exporter, prom


@pytest.fixture()
def operator(stack, operator_kubeconfig, crd, tmp_path):
    _, prom = stack
    op = Operator(operator_kubeconfig, prom.url, tmp_path / "operator.log").start()
    yield op
    op.stop()
    if os.environ.get("AI4DL_SHOW_OPERATOR_LOG"):
        print(op.tail(200))


# ----------------------------------------------------------------------------- helpers
def make_phasemodel(kube_cluster, namespace, name, model_doc, mode="InPlace", **policy):
    from kubernetes import client

    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "train"}},
                     "stepSeconds": STEP, "windowSeconds": WINDOW,
                     "policy": {"mode": mode, "minChange": 0.05, "cooldownWindows": 0,
                                **policy},
                     "model": model_doc}}
    return client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body)


def read_pm(kube_cluster, namespace, name):
    from kubernetes import client

    return client.CustomObjectsApi(kube_cluster.api_client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name)


def condition(pm, ctype):
    return next((c for c in (pm.get("status") or {}).get("conditions", [])
                 if c["type"] == ctype), None)


def wait_condition(kube_cluster, ns: str, ctype: str, status: str, timeout: float = 10,
                   name: str = "pm"):
    """The PhaseModel once its ``ctype`` condition has ``status``. The operator writes the
    status after a window's pod writes, so a test that saw the resizes polls for it."""
    last = {}

    def settled():
        last["pm"] = read_pm(kube_cluster, ns, name)
        return (condition(last["pm"], ctype) or {}).get("status") == status and last["pm"]
    try:
        return wait_for(settled, timeout, interval=0.25, what=f"{ctype}={status}")
    except AssertionError as err:
        raise AssertionError(f"{err}: {(last.get('pm') or {}).get('status')}") from None


def start_pods(fake_kubelet, exporter, jobs, namespace, names, model="pm", requests=None):
    traces, truth = jobs
    for i, name in enumerate(names):
        fake_kubelet.create_pod(
            name, namespace=namespace, requests=requests or {"cpu": "8", "memory": "32Gi"},
            labels={OPT_IN_LABEL: "true", "app": "train"},
            annotations={MODEL_ANNOTATION: model})
        ex = traces[i % len(traces)]
        # start inside the first epoch, so the pod is in a clear phase from the start
        offset = float(np.flatnonzero(truth[i % len(traces)] == 2)[0]) * ex.step
        exporter.add_pod((namespace, name, "main"), ex, offset=offset)


def requests_of(kube_cluster, namespace, name):
    pod = kube_cluster.core.read_namespaced_pod(name, namespace)
    return {k: parse_quantity(v) for k, v in pod.spec.containers[0].resources.requests.items()}


def events(kube_cluster, namespace, reason=None):
    evs = kube_cluster.core.list_namespaced_event(namespace).items
    return [e for e in evs if reason is None or e.reason == reason]


# ----------------------------------------------------------------------------- tests
def test_inplace_resizes_within_two_windows(kube_cluster, k8s_namespace, fake_kubelet, stack,
                                            jobs, model_doc, operator):
    exporter, _ = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["a", "b", "c"])
    make_phasemodel(kube_cluster, ns, "pm", model_doc)
    before = requests_of(kube_cluster, ns, "a")

    def lowered(resource):
        return lambda: all(requests_of(kube_cluster, ns, p)[resource] < before[resource]
                           for p in ("a", "b", "c"))

    try:
        operator.wait_for(lowered("cpu"), timeout=2 * WINDOW + 12,
                          what="all three pods' cpu lowered", namespace=ns)
        # memory can lag cpu by a window: it is not lowered while the working set rises over a
        # window, nor from a cold-start window without a working-set sample (the safety
        # chain's rules), and which window the pods' start lands in depends on the load
        operator.wait_for(lowered("memory"), timeout=2 * WINDOW + 5,
                          what="all three pods' memory lowered", namespace=ns)
    except AssertionError:
        print(operator.tail())
        raise
    after = requests_of(kube_cluster, ns, "a")
    assert 0.2 < after["cpu"] < 8 and after["memory"] < 32 * 2 ** 30
    pod = kube_cluster.core.read_namespaced_pod("a", ns)
    ann = pod.metadata.annotations
    assert ann[A_PHASE].isdigit() and "main" in json.loads(ann[A_RECOMMENDATION])
    # kopf wrote none of its own bookkeeping onto the pod
    assert not any(k.startswith("kopf.zalando.org") for k in ann)
    # each pod's Resized Event is posted after its resize and annotation writes, so the last
    # pod's can still be in flight when its new requests are first seen
    wait_for(lambda: {e.involved_object.name for e in events(kube_cluster, ns, "Resized")}
             >= {"a", "b", "c"}, timeout=10, what="a Resized Event for each pod")
    # the status of the window that resized them is written after its pod writes: until then
    # it is the first window's (all three warming up: tracked, no phase yet)
    pm = operator.wait_for(lambda: (lambda o: o if (o.get("status") or {}).get("podsTracked") == 3
                                    and sum((o["status"].get("podsPerPhase") or {}).values()) == 3
                                    else None)(read_pm(kube_cluster, ns, "pm")), WINDOW + 5,
                           what="status podsTracked 3, each with a phase", namespace=ns)
    assert condition(pm, "Ready")["status"] == "True"
    m = operator.metrics()
    assert "ai4dl_resizes_total" in m and f'namespace="{ns}"' in m
    # savings so far: the pods' original requests against what they held, once resized
    pm = operator.wait_for(lambda: (lambda o: o if ((o.get("status") or {}).get("savings") or {})
                                    .get("resources", {}).get("cpu", {}).get("allocated", 1e18)
                                    < o["status"]["savings"]["resources"]["cpu"]["original"]
                                    else None)(read_pm(kube_cluster, ns, "pm")), 2 * WINDOW + 5,
                           what="status.savings below the original requests", namespace=ns)
    sv = pm["status"]["savings"]
    assert sv["windows"] >= 1 and sv["summary"].startswith("cpu ")
    assert pm["status"]["policy"]
    m = operator.metrics()
    for series in ("ai4dl_request_seconds_total", "ai4dl_pod_request{",
                   "ai4dl_pod_original_request{"):
        assert series in m, series


def test_recommend_mode_never_resizes(kube_cluster, k8s_namespace, fake_kubelet, stack, jobs,
                                      model_doc, operator):
    exporter, _ = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["r1", "r2"])
    make_phasemodel(kube_cluster, ns, "pm", model_doc, mode="Recommend")
    before = requests_of(kube_cluster, ns, "r1")
    operator.wait_for(lambda: A_RECOMMENDATION in (kube_cluster.core.read_namespaced_pod("r1", ns)
                                                   .metadata.annotations or {}),
                      2 * WINDOW + 12, what="a recommendation annotation", namespace=ns)
    operator.wait_windows(1, ns, after=time.time())     # one more window, logged
    assert requests_of(kube_cluster, ns, "r1") == before
    assert requests_of(kube_cluster, ns, "r2") == before
    assert not events(kube_cluster, ns, "Resized")


def test_prometheus_outage_skips_and_recovers(kube_cluster, k8s_namespace, fake_kubelet, stack,
                                              jobs, model_doc, operator):
    exporter, prom = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["o1"])
    make_phasemodel(kube_cluster, ns, "pm", model_doc, mode="Recommend")
    state_before = operator.wait_for(
        lambda: (kube_cluster.core.read_namespaced_pod("o1", ns).metadata.annotations or {})
        .get(A_STATE), 3 * WINDOW + 12, what="a first window handled before the outage",
        namespace=ns)
    prom.stop()
    try:
        pm = wait_condition(kube_cluster, ns, "Degraded", "True", 2 * WINDOW + 10)
        assert condition(pm, "Degraded")["reason"] == "PrometheusUnavailable"
        assert "\n" not in pm["status"]["lastError"]
        # nothing was written to the pod during the outage
        ann = kube_cluster.core.read_namespaced_pod("o1", ns).metadata.annotations
        assert ann[A_STATE] == state_before
    finally:
        prom.start()
    wait_condition(kube_cluster, ns, "Ready", "True", 3 * WINDOW + 15)
    assert 'reason="PrometheusUnavailable"' in operator.metrics()


def test_restart_mid_run_loses_and_duplicates_no_resize(kube_cluster, k8s_namespace,
                                                        fake_kubelet, stack, jobs, model_doc,
                                                        operator):
    exporter, _ = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["s1", "s2"])
    make_phasemodel(kube_cluster, ns, "pm", model_doc)
    operator.wait_for(lambda: len(events(kube_cluster, ns, "Resized")) >= 2, 2 * WINDOW + 12,
                      what="first resizes", namespace=ns)
    operator.stop(signal.SIGKILL)       # mid-window, no goodbye
    time.sleep(WINDOW / 2)
    operator.start()
    # its first window catches up on the last one that ended, however long its start-up took
    # (long under load), and may meet the killed one's writes; then the next one (the writes
    # of two windows that no operator was killed between)
    first = operator.wait_windows(1, ns, logged_after=operator.started_at)[0]
    operator.wait_windows(1, ns, after=first.start + WINDOW, logged_after=operator.started_at)
    # Each pod: at most one resize per window, and every handled window recorded once.
    for pod in ("s1", "s2"):
        evs = [e for e in events(kube_cluster, ns, "Resized") if e.involved_object.name == pod]
        state = peek(kube_cluster.core.read_namespaced_pod(pod, ns)
                     .metadata.annotations[A_STATE])
        assert state["window"] % WINDOW == 0
        times = sorted(e.first_timestamp.timestamp() for e in evs)   # whole seconds

        def window(t):
            # the restarted operator's catch-up run handles a window that ended a while ago:
            # its Events (posted before its log line) belong to that window, not their time's
            if operator.started_at - 1 <= t <= first.logged:
                return int(first.start // WINDOW)
            return int(t // WINDOW)
        windows = [window(t) for t in times]
        assert len(windows) == len(set(windows)), \
            f"{pod}: two resizes in one window {times} (restarted operator's first window " \
            f"{first})"


def test_an_ended_execution_feeds_its_workload_profile_once(kube_cluster, k8s_namespace,
                                                           fake_kubelet, stack, jobs,
                                                           model_doc, operator):
    """Issue 42, online: a pod watched from its start ends (Succeeded); within a window its
    workload's WorkloadProfile holds the run (one write), the PhaseModel's status counts it,
    and a SIGKILLed operator, restarted, keeps it and counts nothing twice."""
    from kubernetes import client

    from ai4dl.controller.profiles import profile_name
    from ai4dl.crd_profile import PROFILE_PLURAL

    exporter, _ = stack
    ns = k8s_namespace
    make_phasemodel(kube_cluster, ns, "pm", model_doc)
    operator.wait_windows(1, ns, logged_after=operator.started_at)
    traces, truth = jobs
    fake_kubelet.create_pod("w1", namespace=ns, requests={"cpu": "8", "memory": "32Gi"},
                            labels={OPT_IN_LABEL: "true", "app": "train",
                                    "ai4dl.io/workload": "train"},
                            annotations={MODEL_ANNOTATION: "pm"})
    exporter.add_pod((ns, "w1", "main"), traces[0], offset=0.0)
    created = time.time()
    operator.wait_windows(2, ns, after=created, logged_after=operator.started_at)
    fake_kubelet.set_phase("w1", "Succeeded", namespace=ns)
    custom = client.CustomObjectsApi(kube_cluster.api_client)
    name = profile_name("pm", "Label/train")

    def profile():
        try:
            return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PROFILE_PLURAL, name)
        except client.exceptions.ApiException as err:
            if err.status == 404:
                return None
            raise
    body = operator.wait_for(profile, 3 * WINDOW, what="the WorkloadProfile", namespace=ns)
    status = body["status"]
    assert status["executions"] == 1 and status["oomKills"] == 0
    (c,) = status["containers"]
    assert c["name"] == "main" and c["runs"] == 1
    assert parse_quantity(c["firstRequest"]["memory"]) > 0
    assert parse_quantity(c["peak"]["memory"]) >= parse_quantity(c["firstRequest"]["memory"]) \
        / 1.15 * 0.99
    assert body["metadata"]["ownerReferences"][0]["name"] == "pm"
    pm_status = operator.wait_for(
        lambda: ((read_pm(kube_cluster, ns, "pm").get("status") or {}).get("workloads") or {})
        .get("profileWrites") == 1 and read_pm(kube_cluster, ns, "pm")["status"],
        2 * WINDOW, what="the status counting the profile", namespace=ns)
    assert pm_status["workloads"]["stored"] == 1
    assert 'ai4dl_profile_writes_total{namespace="%s",phasemodel="pm"} 1.0' % ns \
        in operator.metrics()

    operator.stop(signal.SIGKILL)
    operator.start()
    operator.wait_windows(2, ns, logged_after=operator.started_at)
    kept = profile()
    assert kept["status"]["executions"] == 1, "the run was counted again after the restart"
    assert kept["status"]["record"] == body["status"]["record"]
    status = read_pm(kube_cluster, ns, "pm")["status"]["workloads"]
    assert status["stored"] == 1 and status["profileWrites"] == 0


def test_deleted_pod_mid_window_is_no_error(kube_cluster, k8s_namespace, fake_kubelet, stack,
                                            jobs, model_doc, operator):
    exporter, _ = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["d1", "d2"])
    make_phasemodel(kube_cluster, ns, "pm", model_doc)
    operator.wait_for(lambda: events(kube_cluster, ns, "Resized"), 2 * WINDOW + 12,
                      what="a resize", namespace=ns)
    fake_kubelet.delete_pod("d1", namespace=ns)
    exporter.remove_pod((ns, "d1", "main"))
    # the window the pod was deleted in, and the next, which no longer lists it (its status
    # is written before its log line)
    operator.wait_windows(1, ns, after=time.time())
    m = operator.metrics()
    errors = [line for line in m.splitlines()
              if line.startswith("ai4dl_errors_total") and f'namespace="{ns}"' in line]
    assert not errors, errors
    assert (condition(read_pm(kube_cluster, ns, "pm"), "Ready") or {}).get("status") == "True"
    # the vanished pod's series are gone from /metrics, the live one's are still there
    assert 'pod="d2"' in m and 'pod="d1"' not in m


def test_malformed_phasemodels_are_refused_or_degraded(kube_cluster, k8s_namespace,
                                                       fake_kubelet, stack, jobs, model_doc,
                                                       operator):
    from kubernetes.client.exceptions import ApiException

    exporter, _ = stack
    ns = k8s_namespace
    # the schema refuses what it can see
    with pytest.raises(ApiException) as err:
        make_phasemodel(kube_cluster, ns, "bad-mode", model_doc, mode="Sometimes")
    assert err.value.status == 422
    broken = json.loads(json.dumps(model_doc))
    broken["crbm"]["W"] = broken["crbm"]["W"][:-1]           # shapes disagree: schema can't tell
    start_pods(fake_kubelet, exporter, jobs, ns, ["m1"], model="bad-shape")
    before = requests_of(kube_cluster, ns, "m1")
    make_phasemodel(kube_cluster, ns, "bad-shape", broken)
    pm = wait_condition(kube_cluster, ns, "Degraded", "True", 2 * WINDOW + 12, name="bad-shape")
    assert condition(pm, "Degraded")["reason"] == "InvalidModel"
    assert "crbm.W has shape" in condition(pm, "Degraded")["message"]
    assert requests_of(kube_cluster, ns, "m1") == before


def test_phasemodel_selector_shards_phasemodels(kube_cluster, k8s_namespace, fake_kubelet, stack,
                                                 jobs, model_doc, operator_kubeconfig, crd,
                                                 tmp_path):
    """Two replicas with disjoint --phasemodel-selector never serve the same PhaseModel."""
    from kubernetes import client

    exporter, prom = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["s1"], model="pm-a")
    start_pods(fake_kubelet, exporter, jobs, ns, ["s2"], model="pm-b")
    custom = client.CustomObjectsApi(kube_cluster.api_client)
    for name, shard in (("pm-a", "a"), ("pm-b", "b")):
        make_phasemodel(kube_cluster, ns, name, model_doc, mode="Recommend")
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                              {"metadata": {"labels": {"shard": shard}}})
    op = Operator(operator_kubeconfig, prom.url, tmp_path / "shard-a.log",
                  extra_args=("--phasemodel-selector", "shard=a")).start()
    try:
        op.wait_for(lambda: (read_pm(kube_cluster, ns, "pm-a").get("status") or {})
                    .get("podsTracked") == 1, 2 * WINDOW + 12, what="shard a served",
                    namespace=ns, name="pm-a")
        # its pod gets a phase once it has a full window of metrics (the first may not be)
        op.wait_for(lambda: A_PHASE in (kube_cluster.core.read_namespaced_pod("s1", ns).metadata
                                        .annotations or {}), 2 * WINDOW + 12, what="s1's phase",
                    namespace=ns, name="pm-a")
        op.wait_windows(1, ns, "pm-a", after=time.time())    # one more window of shard a
        assert not (read_pm(kube_cluster, ns, "pm-b").get("status") or {}).get("conditions")
        ann = kube_cluster.core.read_namespaced_pod("s2", ns).metadata.annotations or {}
        assert A_PHASE not in ann
    finally:
        op.stop()


def test_a_namespace_removed_without_its_operator_leaves_no_phasemodel(
        kube_cluster, stack, model_doc, operator_kubeconfig, crd, tmp_path):
    """Without kube-controller-manager nothing deletes a deleted namespace's objects, and a
    PhaseModel keeps kopf's finalizer once an operator has seen it: the tests' namespace
    clean-up (e2e_fixtures_k8s.delete_namespace) deletes the PhaseModels and, when no operator
    runs to release them, removes the finalizer, so that a later test's operator (cluster-wide)
    does not serve them."""
    import uuid

    from e2e_fixtures_k8s import delete_namespace

    _, prom = stack
    ns = f"e2e-left-{uuid.uuid4().hex[:6]}"
    kube_cluster.core.create_namespace({"metadata": {"name": ns}})
    try:
        make_phasemodel(kube_cluster, ns, "pm", model_doc, mode="Recommend")
        op = Operator(operator_kubeconfig, prom.url, tmp_path / "operator.log").start()
        try:
            op.wait_for(lambda: (read_pm(kube_cluster, ns, "pm")["metadata"]
                                 .get("finalizers")), WINDOW + 12,
                        what="the operator's finalizer on the PhaseModel", namespace=ns)
        finally:
            op.stop()
        t0 = time.time()
    finally:
        delete_namespace(kube_cluster, ns)
    took = time.time() - t0
    from kubernetes import client

    left = client.CustomObjectsApi(kube_cluster.api_client).list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL)["items"]
    assert not left, [o["metadata"] for o in left]
    assert took < 5, f"{took:.1f} s: waited for an operator that does not run"


def test_operator_rbac_is_least_privilege(kube_cluster, operator_kubeconfig):
    from kubernetes import client

    authz = client.AuthorizationV1Api(kube_cluster.api_client)

    def can(verb, resource, sub=None, group=""):
        review = {"spec": {"user": "system:serviceaccount:ai4dl-system:ai4dl-operator",
                           "groups": ["system:serviceaccounts",
                                      "system:serviceaccounts:ai4dl-system",
                                      "system:authenticated"],
                           "resourceAttributes": {"verb": verb, "resource": resource,
                                                  "subresource": sub or "", "group": group,
                                                  "namespace": "default"}}}
        return authz.create_subject_access_review(review).status.allowed

    assert can("patch", "pods", "resize")
    assert can("list", "pods") and can("patch", "pods") and not can("watch", "pods")
    assert can("patch", "phasemodels", "status", group=GROUP)
    assert not can("get", "secrets") and not can("list", "secrets")
    assert not can("delete", "pods") and not can("create", "pods")
    assert not can("update", "pods", "resize")

    # The same as a user checks it: kubectl, authenticated with the ServiceAccount's own token.
    from e2e.controlplane.cluster import bin_dir

    def kubectl_can(*args):
        out = subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig", str(operator_kubeconfig),
                              "auth", "can-i", *args, "-n", "default"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() in ("yes", "no"), out.stderr
        return out.stdout.strip() == "yes"

    assert kubectl_can("patch", "pods", "--subresource=resize")
    assert kubectl_can("list", "pods") and kubectl_can("create", "events")
    assert not kubectl_can("get", "secrets") and not kubectl_can("list", "secrets")
    assert not kubectl_can("delete", "pods")


def test_the_head_room_table_and_auto_are_served(kube_cluster, k8s_namespace, fake_kubelet,
                                                 stack, jobs, chosen_doc, operator):
    """kind phase-headroom serves the model's table (resizes); auto serves the choice the
    trainer stored with the model, and says which in the status."""
    exporter, _ = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["h1", "h2"])
    make_phasemodel(kube_cluster, ns, "pm", chosen_doc, kind="phase-headroom")
    before = requests_of(kube_cluster, ns, "h1")
    try:
        operator.wait_for(lambda: all(requests_of(kube_cluster, ns, p) != before
                                      for p in ("h1", "h2")),
                          3 * WINDOW + 12, what="both pods resized by the head-room table",
                          namespace=ns)
        pm = operator.wait_for(lambda: (lambda o: o if (o.get("status") or {}).get("servedPolicy")
                                        else None)(read_pm(kube_cluster, ns, "pm")), WINDOW + 5,
                               what="status.servedPolicy", namespace=ns)
        assert pm["status"]["servedPolicy"] == "phase-headroom (spec.policy.kind)"
        from kubernetes import client

        client.CustomObjectsApi(kube_cluster.api_client).patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "pm", {"spec": {"policy": {"kind": "auto"}}})
        winners = chosen_doc["policyChoice"]["winners"]
        pm = operator.wait_for(
            lambda: (lambda o: o if ((o.get("status") or {}).get("servedPolicy") or "")
                     .startswith("auto: ") else None)(read_pm(kube_cluster, ns, "pm")),
            2 * WINDOW + 10, what="auto served", namespace=ns)
        assert all(w in pm["status"]["servedPolicy"] for w in winners), pm["status"]
        assert condition(pm, "Ready")["status"] == "True"
    except AssertionError:
        print(operator.tail())
        raise


def dashboard_queries(ns: str, pods: list[str]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and variable of the chart's Grafana dashboard,
    with its variables as Grafana substitutes them for this namespace, PhaseModel and pods."""
    doc = json.loads((REPO / "charts" / "ai4dl-operator" / "dashboards"
                      / "ai4dl-operator.json").read_text())
    subs = {"$namespace": ns, "$phasemodel": "pm", "$pod": "|".join(pods),
            "$__rate_interval": "30s"}

    def fill(expr: str) -> str:
        for k, v in subs.items():
            expr = expr.replace(k, v)
        assert "$" not in expr, expr
        return expr
    out = [(f"panel {p['title']!r} {t['refId']}", fill(t["expr"]))
           for p in doc["panels"] for t in p["targets"]]
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            # label_values(SELECTOR, LABEL): the series of SELECTOR that carry LABEL
            sel, label = v["query"]["query"][len("label_values("):-1].rsplit(",", 1)
            out.append((f"variable {v['name']}", f"count by ({label.strip()}) ({fill(sel)})"))
    return out


def test_grafana_dashboard_queries_all_return_data(kube_cluster, k8s_namespace, fake_kubelet,
                                                   stack, jobs, model_doc, operator):
    """Every PromQL expression of the chart's dashboard, against the test Prometheus scraping
    the running operator and the pods' cAdvisor metrics: none errors, none comes back empty.
    A pod without metrics makes windows skip (the skipped-windows panel has data)."""
    exporter, prom = stack
    ns = k8s_namespace
    start_pods(fake_kubelet, exporter, jobs, ns, ["d1", "d2"])
    fake_kubelet.create_pod("quiet", namespace=ns, requests={"cpu": "8", "memory": "32Gi"},
                            labels={OPT_IN_LABEL: "true", "app": "train"},
                            annotations={MODEL_ANNOTATION: "pm"})
    make_phasemodel(kube_cluster, ns, "pm", model_doc)
    prom.set_targets([exporter.url, f"127.0.0.1:{operator.metrics_port}"])
    try:
        before = requests_of(kube_cluster, ns, "d1")
        operator.wait_for(lambda: requests_of(kube_cluster, ns, "d1") != before,
                          2 * WINDOW + 12, what="d1 resized", namespace=ns)
        # scraped a few times since the resize (increase() needs two samples in its range)
        for metric in ("ai4dl_resizes_total", "ai4dl_recommendation",
                       "ai4dl_skipped_windows_total", "ai4dl_request_seconds_total"):
            prom.wait_for_samples(metric, 3, 2 * WINDOW + 10, f'namespace="{ns}"')
        failed = []
        queries = dashboard_queries(ns, ["d1", "d2", "quiet"])
        for where, expr in queries:
            try:
                if not prom.query(expr):
                    failed.append(f"{where}: no data: {expr}")
            except Exception as err:       # noqa: BLE001 (an HTTP 400: the query is wrong)
                failed.append(f"{where}: {type(err).__name__} {err}: {expr}")
        assert not failed, "\n".join(failed) + "\n" + "\n".join(
            x for x in operator.metrics().splitlines() if ns in x) + operator.tail(30)
        assert len(queries) >= 20
    finally:
        prom.set_targets([exporter.url])


def test_write_limit_spreads_resizes_and_defers_to_the_next_window(
        kube_cluster, k8s_namespace, fake_kubelet, stack, jobs, model_doc, operator_kubeconfig,
        crd, tmp_path):
    """--kube-api-qps 0.5 --kube-api-burst 3: a resized pod takes 3 writes (record, resize,
    Event), so a 10 s window can write at most 2 pods ((3 + 0.5 × 10) / 3); the others are
    counted as window-deadline and resized in a later window. Unlimited, all four are resized
    in one window (as in test_inplace_resizes_within_two_windows)."""
    exporter, prom = stack
    ns = k8s_namespace
    names = ["w1", "w2", "w3", "w4"]
    op = Operator(operator_kubeconfig, prom.url, tmp_path / "operator.log",
                  extra_args=("--kube-api-qps", "0.5", "--kube-api-burst", "3")).start()
    try:
        start_pods(fake_kubelet, exporter, jobs, ns, names)
        make_phasemodel(kube_cluster, ns, "pm", model_doc)

        def resized_pods():
            return {e.involved_object.name for e in events(kube_cluster, ns, "Resized")}

        op.wait_for(lambda: resized_pods() >= set(names), 8 * WINDOW + 12,
                    what="every pod resized, a few a window", namespace=ns)
        per_window = [int(re.match(r"\d+ pods, (\d+) resized", w.summary).group(1))
                      for w in op.windows(ns, "pm")]
        assert max(per_window) <= 2, f"resized per window {per_window}: above the write limit"
        assert sum(1 for n in per_window if n) >= 2, per_window
        deferred = [line for line in op.metrics().splitlines()
                    if line.startswith("ai4dl_skipped_windows_total{") and f'namespace="{ns}"'
                    in line and 'reason="window-deadline"' in line]
        assert deferred and float(deferred[0].rsplit(" ", 1)[1]) >= 1, op.tail()
        assert "left for the next window" in op.log.read_text()
        assert "ai4dl_api_write_wait_seconds_total" in op.metrics()
    finally:
        op.stop()


def test_pod_records_wait_in_memory_and_a_restart_leaves_the_window(
        kube_cluster, k8s_namespace, fake_kubelet, stack, jobs, model_doc, operator_kubeconfig,
        crd, tmp_path):
    """--pod-record-share 0 (only the records a pod needs): a pod's first resize goes with its
    record (the authors' requests); a later decrease of a recorded pod goes alone, after the
    window marker in the PhaseModel's status (the real API server keeps the field), and its
    Resized Event is one summary Event on the PhaseModel; the record waits in memory
    (ai4dl_pod_records_pending; ai4dl_pod_records_written_total counts only needed ones).
    A window the status names (as an operator killed within it
    leaves it) is left by the operator and counted; the next one is served."""
    from kubernetes import client

    exporter, prom = stack
    ns = k8s_namespace
    names = ["r1", "r2", "r3"]
    custom = client.CustomObjectsApi(kube_cluster.api_client)
    op = Operator(operator_kubeconfig, prom.url, tmp_path / "operator.log",
                  extra_args=("--pod-record-share", "0")).start()
    try:
        start_pods(fake_kubelet, exporter, jobs, ns, names)
        make_phasemodel(kube_cluster, ns, "pm", model_doc)

        def marked():
            return (read_pm(kube_cluster, ns, "pm").get("status") or {}).get(
                "unrecordedWindow")

        marker = op.wait_for(marked, 6 * WINDOW + 12, what="a window whose resizes went "
                             "without their records (the status marker)", namespace=ns)
        win = op.wait_for(lambda: next((w for w in op.windows(ns, "pm") if w.start == marker),
                                       None), 2 * WINDOW, what="the marked window's log line",
                          namespace=ns)
        assert re.match(r"\d+ pods, [1-9]\d* resized", win.summary), win
        pending = [line for line in op.metrics().splitlines()
                   if line.startswith("ai4dl_pod_records_pending{") and f'namespace="{ns}"' in line]
        assert pending and float(pending[0].rsplit(" ", 1)[1]) >= 1, pending
        written = {why: float(line.rsplit(" ", 1)[1]) for line in op.metrics().splitlines()
                   for why in ("needed", "optional")
                   if line.startswith("ai4dl_pod_records_written_total{")
                   and f'namespace="{ns}"' in line and f'why="{why}"' in line}
        # only the records the pods need: the first resizes' (share 0 leaves out every other)
        assert written.get("needed", 0) >= 1 and written.get("optional", 0) == 0, written
        summary = [e for e in events(kube_cluster, ns, "Resized")
                   if e.involved_object.kind == "PhaseModel"]
        assert summary and "no Resized Event of their own" in summary[-1].message, summary
        # a pod resized alone: its record (last-applied) is not what it now has
        stale = []
        for name in names:
            pod = kube_cluster.core.read_namespaced_pod(name, ns)
            ann = pod.metadata.annotations or {}
            assert "orig" in peek(ann.get(A_STATE)), f"{name}: its first resize went unrecorded"
            last = json.loads(ann.get("ai4dl.io/last-applied", "{}"))
            sent = last.get("containers", {}).get("main", {}).get("requests", {})
            if any(parse_quantity(v) != requests_of(kube_cluster, ns, name)[r]
                   for r, v in sent.items()):
                stale.append(name)
        assert stale, "no pod was resized without its record"
        # the next boundary's window named by the status, as a killed operator leaves it
        now = time.time()
        nxt = (int(now // WINDOW) + 1) * WINDOW
        if nxt - now < 2.0:         # too close to the boundary to write it before
            nxt += WINDOW
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "pm",
                                                     {"status": {"unrecordedWindow": nxt}})
        op.wait_for(lambda: "without their pods' records: the window is left"
                    in op.log.read_text(), 3 * WINDOW, what="the marked window left",
                    namespace=ns)
        marked_run = [w for w in op.windows(ns, "pm") if w.start == nxt]
        assert marked_run and all(w.summary.startswith("0 pods, 0 resized")
                                  and "restarted-mid-window" in w.summary
                                  for w in marked_run), marked_run
        left = [line for line in op.metrics().splitlines()
                if line.startswith("ai4dl_skipped_windows_total{") and f'namespace="{ns}"' in line
                and 'reason="restarted-mid-window"' in line]
        assert left and float(left[0].rsplit(" ", 1)[1]) == 1, left
        op.wait_windows(1, ns, after=nxt + WINDOW)
    finally:
        op.stop()
