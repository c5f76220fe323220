"""The state key made in the cluster (operator.stateKey.createInCluster, issue 43 item 5), on the
real kube-apiserver + etcd: the chart's hook objects rendered by `helm template`, the hook's
ServiceAccount, Role and RoleBinding applied as rendered, and the Job's own command
(``python -m ai4dl.kube.state_key_secret``, its arguments as the chart renders them) run with
that ServiceAccount's token, as the Job's pod would:

* the first run creates the Secret with a random key the operator loads;
* every later run (each upgrade, each GitOps sync) keeps it as it is, a rotated key and its
  ``previous`` included, without reading it;
* the token can create Secrets and nothing else: it cannot read, list or replace one;
* a namespace where it may not create one: exit 1, one line.

No kubelet: the Job's pod would run the same command with the same token."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from ai4dl.controller.podstate import StateKey
from e2e_fixtures_k8s import create_namespace
from test_helm import REPO, by_kind, helm, helm_env, template  # noqa: F401

pytestmark = pytest.mark.integration


def run_job(kubeconfig, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run([sys.executable, "-m", "ai4dl.kube.state_key_secret", *args,
                           f"--kubeconfig={kubeconfig}"], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.fixture(scope="module")
def hook(kube_cluster, helm, helm_env, tmp_path_factory):  # noqa: F811
    from kubernetes import utils

    ns = f"key-{uuid.uuid4().hex[:6]}"
    create_namespace(kube_cluster, ns)
    docs = template(helm, helm_env, "--set", "prometheus.url=http://p:9090",
                    "--set", "operator.stateKey.createInCluster=true", namespace=ns)
    hooks = [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    for d in hooks:
        if d["kind"] != "Job":
            utils.create_from_dict(kube_cluster.api_client, d)
    (job,) = by_kind(hooks, "Job")
    pod = job["spec"]["template"]["spec"]
    kubeconfig = kube_cluster.service_account_kubeconfig(
        ns, pod["serviceAccountName"], tmp_path_factory.mktemp("key") / "kubeconfig",
        create=False)
    args = pod["containers"][0]["args"]
    name = next(a.split("=", 1)[1] for a in args if a.startswith("--name="))
    return {"ns": ns, "args": args, "name": name, "kubeconfig": kubeconfig}


def secret_data(kube_cluster, ns, name) -> dict[str, bytes]:
    s = kube_cluster.core.read_namespaced_secret(name, ns)
    return {k: base64.b64decode(v) for k, v in (s.data or {}).items()}


def test_the_hook_makes_the_key_once_and_keeps_it(kube_cluster, hook, tmp_path):
    ns, name = hook["ns"], hook["name"]
    first = run_job(hook["kubeconfig"], hook["args"])
    assert first.returncode == 0 and "created with a new random key" in first.stdout, first
    made = secret_data(kube_cluster, ns, name)
    assert set(made) == {"key"} and len(made["key"]) >= 48
    # what the operator mounts and loads
    (tmp_path / "key").write_bytes(made["key"])
    assert StateKey.from_file(tmp_path / "key") is not None
    labels = kube_cluster.core.read_namespaced_secret(name, ns).metadata.labels
    assert labels["app.kubernetes.io/component"] == "operator"
    # every later run (upgrade, sync) keeps it
    again = run_job(hook["kubeconfig"], hook["args"])
    assert again.returncode == 0 and "exists: kept as it is" in again.stdout, again
    assert secret_data(kube_cluster, ns, name) == made
    # a rotation (docs/reference.md): the new key and the previous one, both kept
    rotated = {"key": base64.b64encode(b"n" * 40).decode(), "previous": base64.b64encode(
        made["key"]).decode()}
    kube_cluster.core.patch_namespaced_secret(name, ns, {"data": rotated})
    assert run_job(hook["kubeconfig"], hook["args"]).returncode == 0
    assert secret_data(kube_cluster, ns, name) == {"key": b"n" * 40, "previous": made["key"]}


def test_the_hook_token_creates_secrets_and_reads_none(kube_cluster, hook):
    from kubernetes import client, config

    ns, name = hook["ns"], hook["name"]
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(hook["kubeconfig"])))
    if not kube_cluster.core.list_namespaced_secret(ns, field_selector=f"metadata.name={name}"
                                                   ).items:
        assert run_job(hook["kubeconfig"], hook["args"]).returncode == 0
    for call in (lambda: core.read_namespaced_secret(name, ns),
                 lambda: core.list_namespaced_secret(ns),
                 lambda: core.patch_namespaced_secret(name, ns, {"data": {}}),
                 lambda: core.delete_namespaced_secret(name, ns),
                 lambda: core.list_namespaced_pod(ns)):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403
    # a namespace it may not write to: one line, exit 1
    other = f"key-other-{uuid.uuid4().hex[:6]}"
    create_namespace(kube_cluster, other)
    args = [a if not a.startswith("--namespace=") else f"--namespace={other}"
            for a in hook["args"]]
    denied = run_job(hook["kubeconfig"], args)
    assert denied.returncode == 1 and "Traceback" not in denied.stderr
    assert denied.stderr.strip().count("\n") == 0 and "HTTP 403" in denied.stderr, denied.stderr
    assert not kube_cluster.core.list_namespaced_secret(other).items
