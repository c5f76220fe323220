"""The local test control plane (e2e/controlplane) and the fake kubelet (tests/e2e_fixtures_k8s.py).

Needs the kube-apiserver/etcd binaries (built once per machine by e2e/controlplane/build.sh);
skipped when they cannot be built (outside CI).

FakeKubelet is what this module tests (the stand-in the other modules use), with the API
server's own resize validation (QoS, Burstable); the kubelet's real answers (cgroups, Deferred,
Infeasible, Error, restarts) are tests/test_real_node.py's and
tests/test_real_node_answers.py's.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.k8s

client = pytest.importorskip("kubernetes.client")
from kubernetes.client.rest import ApiException  # noqa: E402

GUARANTEED = {"cpu": "500m", "memory": "128Mi"}
SA_NAME = "ai4dl-operator"


def _resize_body(requests=None, limits=None, container="main") -> dict:
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"spec": {"containers": [{"name": container, "resources": res}]}}


def _res(pod, which: str) -> dict:
    return dict(getattr(pod.spec.containers[0].resources, which) or {})


def test_version(kube_cluster):
    v = client.VersionApi(kube_cluster.api_client).get_code()
    assert (int(v.major), int(v.minor.rstrip("+"))) >= (1, 33), v.git_version
    if kube_cluster.expected_version:
        assert v.git_version == kube_cluster.expected_version
    if kube_cluster.control_plane is not None:  # the stdlib path agrees
        assert kube_cluster.control_plane.version()["gitVersion"] == v.git_version


def test_pod_becomes_running(fake_kubelet, kube_cluster, k8s_namespace):
    fake_kubelet.create_pod("web", requests=GUARANTEED, limits=GUARANTEED, labels={"app": "web"})
    pod = kube_cluster.core.read_namespaced_pod("web", k8s_namespace)
    assert pod.spec.node_name == fake_kubelet.node_name
    assert pod.status.phase == "Running"
    assert pod.status.qos_class == "Guaranteed"
    conds = {c.type: c.status for c in pod.status.conditions}
    assert conds["Ready"] == "True" and conds["ContainersReady"] == "True"
    (cs,) = pod.status.container_statuses
    assert cs.ready and cs.state.running is not None
    assert cs.resources.requests == GUARANTEED and cs.resources.limits == GUARANTEED
    # Listing by label (what an operator's selector does) sees it Running.
    pods = kube_cluster.core.list_namespaced_pod(k8s_namespace, label_selector="app=web").items
    assert [p.status.phase for p in pods] == ["Running"]


def test_resize_guaranteed_keeps_qos(fake_kubelet, kube_cluster, k8s_namespace):
    core = kube_cluster.core
    before = fake_kubelet.create_pod("g", requests=GUARANTEED, limits=GUARANTEED)
    new = {"cpu": "750m"}
    after = core.patch_namespaced_pod_resize("g", k8s_namespace, _resize_body(new, new))
    assert _res(after, "requests") == {"cpu": "750m", "memory": "128Mi"}
    assert _res(after, "limits") == {"cpu": "750m", "memory": "128Mi"}
    assert after.status.qos_class == "Guaranteed"
    assert after.metadata.generation > before.metadata.generation
    # Until the "kubelet" acts, status still shows the old allocation...
    assert after.status.container_statuses[0].resources.requests["cpu"] == "500m"
    # ...then it does.
    applied = fake_kubelet.apply_resize("g")
    cs = applied.status.container_statuses[0]
    assert cs.resources.requests["cpu"] == "750m" and cs.resources.limits["cpu"] == "750m"
    assert core.read_namespaced_pod("g", k8s_namespace).status.phase == "Running"


def test_resize_burstable_requests_only(fake_kubelet, kube_cluster, k8s_namespace):
    fake_kubelet.create_pod("b", requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "1"})
    after = kube_cluster.core.patch_namespaced_pod_resize(
        "b", k8s_namespace, _resize_body({"cpu": "400m"}))
    assert _res(after, "requests") == {"cpu": "400m", "memory": "64Mi"}
    assert _res(after, "limits") == {"cpu": "1"}
    assert after.status.qos_class == "Burstable"
    fake_kubelet.apply_resize("b")
    pod = kube_cluster.core.read_namespaced_pod("b", k8s_namespace)
    assert pod.status.container_statuses[0].resources.requests["cpu"] == "400m"


@pytest.mark.parametrize(
    "requests, limits, patch",
    [
        # Guaranteed -> requests below limits would make it Burstable.
        (GUARANTEED, GUARANTEED, _resize_body({"cpu": "250m"})),
        # Burstable -> cpu requests == limits (memory already equal) would make it Guaranteed.
        ({"cpu": "250m", "memory": "128Mi"}, {"cpu": "500m", "memory": "128Mi"},
         _resize_body({"cpu": "500m"})),
    ],
    ids=["guaranteed-to-burstable", "burstable-to-guaranteed"],
)
def test_resize_changing_qos_is_rejected(fake_kubelet, kube_cluster, k8s_namespace,
                                         requests, limits, patch):
    core = kube_cluster.core
    pod = fake_kubelet.create_pod("q", requests=requests, limits=limits)
    qos = pod.status.qos_class
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod_resize("q", k8s_namespace, patch)
    assert err.value.status == 422, err.value.body
    assert "qos" in (err.value.body or "").lower()
    unchanged = core.read_namespaced_pod("q", k8s_namespace)
    assert _res(unchanged, "requests") == requests and unchanged.status.qos_class == qos


def test_delete_with_grace_zero(fake_kubelet, kube_cluster, k8s_namespace):
    fake_kubelet.create_pod("gone", requests=GUARANTEED, limits=GUARANTEED)
    fake_kubelet.delete_pod("gone")
    with pytest.raises(ApiException) as err:
        kube_cluster.core.read_namespaced_pod("gone", k8s_namespace)
    assert err.value.status == 404


def test_fake_kubelet_auto_apply_and_pending(fake_kubelet, kube_cluster, k8s_namespace):
    core, ns = kube_cluster.core, k8s_namespace
    for name in ("x", "y"):
        fake_kubelet.create_pod(name, requests={"cpu": "100m"}, limits={"cpu": "1"})
    with fake_kubelet.auto_apply_resizes(interval=0.05):
        core.patch_namespaced_pod_resize("x", ns, _resize_body({"cpu": "300m"}))
        deadline = time.monotonic() + 10

        def applied_cpu():
            return core.read_namespaced_pod("x", ns).status.container_statuses[0].resources.requests["cpu"]

        while applied_cpu() != "300m":
            assert time.monotonic() < deadline, "auto_apply_resizes did not apply the resize"
            time.sleep(0.05)
    assert fake_kubelet.pending_resizes() == []
    # A resize the "kubelet" refuses: spec changes, status keeps the old allocation.
    core.patch_namespaced_pod_resize("y", ns, _resize_body({"cpu": "900m"}))
    assert fake_kubelet.pending_resizes() == ["y"]
    pod = fake_kubelet.set_resize_pending("y", "Infeasible", "Node didn't have enough capacity")
    cond = {c.type: c for c in pod.status.conditions}["PodResizePending"]
    assert (cond.status, cond.reason) == ("True", "Infeasible")
    assert pod.status.container_statuses[0].resources.requests["cpu"] == "100m"
    assert _res(pod, "requests")["cpu"] == "900m"
    # ...and accepted after all: the condition goes away.
    pod = fake_kubelet.apply_resize("y")
    assert "PodResizePending" not in {c.type for c in pod.status.conditions}
    assert pod.status.container_statuses[0].resources.requests["cpu"] == "900m"


# ---------------------------------------------------------------------------- RBAC
def _operator_rbac(kube_cluster, ns: str) -> None:
    """SA + Role (pods: get/list/watch; pods/resize: patch; nothing on secrets) + RoleBinding."""
    rbac = client.RbacAuthorizationV1Api(kube_cluster.api_client)
    kube_cluster.core.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SA_NAME)))
    rbac.create_namespaced_role(ns, client.V1Role(
        metadata=client.V1ObjectMeta(name=SA_NAME),
        rules=[
            client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"]),
            client.V1PolicyRule(api_groups=[""], resources=["pods/resize"], verbs=["patch"]),
        ]))
    rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=SA_NAME),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=SA_NAME),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=SA_NAME, namespace=ns)]))


def _sar_allowed(kube_cluster, ns, verb, resource, subresource=None) -> bool:
    authz = client.AuthorizationV1Api(kube_cluster.api_client)
    sar = authz.create_subject_access_review(client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{ns}:{SA_NAME}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=ns, verb=verb, group="", resource=resource, subresource=subresource))))
    return bool(sar.status.allowed)


def test_rbac_subject_access_review(kube_cluster, k8s_namespace):
    ns = k8s_namespace
    _operator_rbac(kube_cluster, ns)
    assert _sar_allowed(kube_cluster, ns, "patch", "pods", "resize")
    assert _sar_allowed(kube_cluster, ns, "watch", "pods")
    assert not _sar_allowed(kube_cluster, ns, "get", "secrets")
    assert not _sar_allowed(kube_cluster, ns, "patch", "pods")  # only the resize subresource
    assert not _sar_allowed(kube_cluster, ns, "patch", "pods", "status")


def test_rbac_service_account_token(fake_kubelet, kube_cluster, k8s_namespace):
    """The same Role, exercised with a real ServiceAccount token (TokenRequest API)."""
    ns = k8s_namespace
    _operator_rbac(kube_cluster, ns)
    fake_kubelet.create_pod("t", requests={"cpu": "100m"}, limits={"cpu": "200m"})
    sa = client.CoreV1Api(kube_cluster.as_service_account(ns, SA_NAME, create=False))
    assert [p.metadata.name for p in sa.list_namespaced_pod(ns).items] == ["t"]
    pod = sa.patch_namespaced_pod_resize("t", ns, _resize_body({"cpu": "150m"}))
    assert _res(pod, "requests")["cpu"] == "150m"
    for forbidden in (lambda: sa.list_namespaced_secret(ns),
                      lambda: sa.patch_namespaced_pod("t", ns, {"metadata": {"labels": {"x": "y"}}})):
        with pytest.raises(ApiException) as err:
            forbidden()
        assert err.value.status == 403


def test_kubectl_auth_can_i_with_impersonation(kube_cluster, k8s_namespace):
    from e2e.controlplane.cluster import bin_dir

    cp = kube_cluster.control_plane
    kubectl = bin_dir() / "kubectl"
    if not kubectl.exists():
        kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("no kubectl (build.sh builds it unless AI4DL_SKIP_KUBECTL=1)")
    ns = k8s_namespace
    _operator_rbac(kube_cluster, ns)
    who = f"system:serviceaccount:{ns}:{SA_NAME}"

    def can_i(*args: str, kubeconfig=kube_cluster.kubeconfig, as_user: str | None = who) -> str:
        cmd = [str(kubectl), f"--kubeconfig={kubeconfig}", "auth", "can-i", *args, "-n", ns]
        if as_user:
            cmd.append(f"--as={as_user}")
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()

    assert can_i("patch", "pods", "--subresource=resize") == "yes"
    assert can_i("get", "secrets") == "no"
    if cp is not None:  # the same through a kubeconfig with `as:` (ControlPlane helper)
        kc = cp.impersonation_kubeconfig(who)
        assert can_i("patch", "pods", "--subresource=resize", kubeconfig=kc, as_user=None) == "yes"
        assert can_i("list", "secrets", kubeconfig=kc, as_user=None) == "no"
