"""A pod's owner cannot forge the operator's records (issue 26, item 2), on the real API server
and Prometheus, with the operator as its own ServiceAccount.

The owner of pods in a namespace can write every annotation of their pods. The probe wrote:
a forged ``ai4dl.io/admitted`` (1000 cores, 100Ti: the savings reported 10,000 x the truth), a
malformed ``ai4dl.io/state`` (``"soon"``: the whole PhaseModel went Degraded/InvalidModel for 19
windows) and a state record copied from another pod. Each is now read as absent: the pod is
planned as a new one, a Warning Event names the pod and the annotation, the metric counts it,
the PhaseModel and the other pods go on, and the savings are never inflated.

FakeKubelet, not the real node: records forged on pods' annotations are tested; no kubelet
behaviour takes part.
"""

from __future__ import annotations

import json
import re

import pytest

from ai4dl.controller.podstate import StateKey, peek, state_scope
from ai4dl.controller.pods import A_ADMITTED, A_STATE
from e2e_fixtures_operator import (STATE_KEY, crd, operator_kubeconfig,  # noqa: F401
                                   wait_for, write_report)
from test_operator_integration import (WINDOW, condition, events, jobs,  # noqa: F401
                                       make_phasemodel, model_doc, operator, read_pm,
                                       requests_of, stack, start_pods, wait_condition)

pytestmark = pytest.mark.integration
ROWS: list[tuple[str, str, str]] = []
REQUESTS = {"cpu": "8", "memory": "32Gi"}


@pytest.fixture(scope="module", autouse=True)
def table(request):
    yield
    write_report(request, "forged records", "| bad input | wrong writes | signals raised |",
                 ROWS, append=True)


def metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_forged_copied_and_malformed_records_are_not_the_operators(
        kube_cluster, k8s_namespace, fake_kubelet, stack, jobs, model_doc, operator):
    exporter, _ = stack
    ns = k8s_namespace
    core = kube_cluster.core
    start_pods(fake_kubelet, exporter, jobs, ns, ["honest", "forged-admitted", "bad-state",
                                                  "copied"], requests=REQUESTS)
    # what the pods' owner writes (as the pod's author may: plain annotation patches)
    core.patch_namespaced_pod("forged-admitted", ns, {"metadata": {"annotations": {
        A_ADMITTED: json.dumps({"main": {"cpu": "1000", "memory": "100Ti"}})}}})
    core.patch_namespaced_pod("bad-state", ns, {"metadata": {"annotations": {
        A_STATE: json.dumps({"window": "soon"})}}})
    make_phasemodel(kube_cluster, ns, "pm", model_doc, mode="InPlace")
    wait_for(lambda: (core.read_namespaced_pod("honest", ns).metadata.annotations or {})
             .get(A_STATE), 3 * WINDOW + 10, what="the honest pod's first record")
    # the owner copies the honest pod's (valid, sealed) record onto another pod
    honest_state = core.read_namespaced_pod("honest", ns).metadata.annotations[A_STATE]
    core.patch_namespaced_pod("copied", ns, {"metadata": {"annotations": {
        A_STATE: honest_state}}})
    key = StateKey(STATE_KEY)

    def rejected_and_replaced():
        evs = {e.involved_object.name for e in events(kube_cluster, ns, "StateRejected")}
        if not {"forged-admitted", "bad-state", "copied"} <= evs:
            return False
        # the records that were not the operator's are replaced by its own, sealed for the pod
        for name in ("bad-state", "copied"):
            pod = core.read_namespaced_pod(name, ns)
            opened = key.open(state_scope(ns, name, pod.metadata.uid),
                              pod.metadata.annotations.get(A_STATE))
            if opened.problem is not None:
                return False
        return True
    wait_for(rejected_and_replaced, 4 * WINDOW + 10, interval=1.0,
             what="StateRejected Events on the three pods and their records replaced")
    msgs = {e.involved_object.name: e.message for e in events(kube_cluster, ns, "StateRejected")}
    assert "ai4dl.io/state" in msgs["bad-state"] and "ai4dl.io/state" in msgs["copied"]
    assert "ai4dl.io/admitted" in msgs["forged-admitted"]
    assert "left out of the savings" in msgs["forged-admitted"]
    # the PhaseModel was never stopped by one pod's record
    pm = wait_condition(kube_cluster, ns, "Ready", "True", 2 * WINDOW)
    assert condition(pm, "Ready")["reason"] == "WindowProcessed"
    assert (condition(pm, "Degraded") or {}).get("reason") not in ("InvalidModel",
                                                                   "InvalidSpec")
    # every pod was served (the malformed and copied ones as new pods)
    resized = {e.involved_object.name for e in events(kube_cluster, ns, "Resized")}
    assert "honest" in resized
    # the savings: never the forged 1000 cores; the forged pod is left out of them
    wait_for(lambda: (read_pm(kube_cluster, ns, "pm").get("status") or {}).get("savings"),
             2 * WINDOW, what="status.savings")
    savings = read_pm(kube_cluster, ns, "pm")["status"]["savings"]
    windows = savings["windows"]
    original_cpu = savings["resources"]["cpu"]["original"]
    assert original_cpu <= 8.0 * 4 * WINDOW * windows * 1.001, savings
    text = operator.metrics()
    assert metric(text, "ai4dl_pod_original_request", pod="forged-admitted") == 0.0
    assert not re.search(r'ai4dl_pod_original_request\{[^}]*pod="forged-admitted"', text)
    assert metric(text, "ai4dl_pod_original_request", pod="honest", resource="cpu") == 8.0
    unsigned = metric(text, "ai4dl_pod_state_rejected_total", namespace=ns, reason="unsigned")
    forged = metric(text, "ai4dl_pod_state_rejected_total", namespace=ns, reason="forged")
    assert unsigned >= 2 and forged >= 1
    # nothing was sized from the forged records: no request above the authors' own
    for name in ("honest", "forged-admitted", "bad-state", "copied"):
        got = requests_of(kube_cluster, ns, name)
        assert got["cpu"] <= 8.0 and got["memory"] <= 32 * 2 ** 30, (name, got)
    assert peek(core.read_namespaced_pod("bad-state", ns).metadata.annotations[A_STATE])["window"] \
        % WINDOW == 0
    ROWS.extend([
        ("pod created with a forged ai4dl.io/admitted (1000 cores, 100Ti)",
         f"0 (savings original cpu {original_cpu / (windows * WINDOW):.1f} core-s/s over 4 "
         f"pods of 8 cores; the pod left out)", "StateRejected Event on the pod, "
         "ai4dl_pod_state_rejected_total{reason=unsigned}"),
        ('malformed ai4dl.io/state ("soon") on one pod', "0 (PhaseModel Ready, "
         "WindowProcessed; the pod planned as new, decreases held one cool-down)",
         "StateRejected Event, metric; record replaced by a sealed one"),
        ("another pod's sealed state copied onto a pod", "0 (not read: sealed for another uid)",
         "StateRejected Event, ai4dl_pod_state_rejected_total{reason=forged}"),
    ])
