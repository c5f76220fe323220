"""The operator as a subprocess against the test API server: the PhaseModel CRD, a kubeconfig
for the operator's own ServiceAccount (bound by deploy/rbac.yaml), and :class:`Operator`.

Import the fixtures into a test module (``from e2e_fixtures_operator import crd, ...``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ai4dl.crd import crd_manifest

REPO = Path(__file__).resolve().parent.parent
#: The key that seals the operator's records on pods, one per test session, so that an
#: operator restarted by a test reads the records of the one before (as the chart's Secret
#: makes it in a cluster).
STATE_KEY = b"ai4dl-test-state-key-" + os.urandom(16).hex().encode()


def state_key_file(folder: Path) -> Path:
    path = folder / "state-key"
    if not path.exists():
        path.write_bytes(STATE_KEY)
        path.chmod(0o600)
    return path


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def crd(kube_cluster):
    """The PhaseModel CRD, created (or already there) and Established."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(kube_cluster.api_client)
    body = crd_manifest()
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as err:
        if err.status != 409:
            raise
        # an older test session may have left an older schema: bring it up to date
        current = ext.read_custom_resource_definition(body["metadata"]["name"])
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(body["metadata"]["name"], body)
    wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                         (ext.read_custom_resource_definition(body["metadata"]["name"])
                          .status.conditions or [])), 30, what="CRD Established")
    return body


@pytest.fixture(scope="module")
def operator_kubeconfig(kube_cluster, tmp_path_factory):
    """A kubeconfig for the operator's ServiceAccount, bound by deploy/rbac.yaml."""
    from kubernetes import utils
    from kubernetes.client.exceptions import ApiException

    try:
        kube_cluster.core.create_namespace({"metadata": {"name": "ai4dl-system"}})
    except ApiException as err:
        if err.status != 409:
            raise
    for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()):
        try:
            utils.create_from_dict(kube_cluster.api_client, doc)
        except utils.FailToCreateError as err:
            if not all(e.status == 409 for e in err.api_exceptions):
                raise
    path = kube_cluster.service_account_kubeconfig(
        "ai4dl-system", "ai4dl-operator", tmp_path_factory.mktemp("operator") / "kubeconfig",
        create=False)
    wait_admission_policy(kube_cluster, path)
    return path


def wait_admission_policy(kube_cluster, kubeconfig: Path, namespace: str = "ai4dl-system",
                          timeout: float = 30) -> None:
    """Until the chart's ValidatingAdmissionPolicy is in force for the ServiceAccount of
    ``kubeconfig`` (the API server loads a new policy within a second or so): a dry-run label
    patch of a pod without the opt-in label must be denied by it."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    probe = "ai4dl-admission-probe"
    try:
        kube_cluster.core.create_namespaced_pod(namespace, {
            "metadata": {"name": probe},
            "spec": {"nodeName": "ai4dl-no-node", "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    except ApiException as err:
        if err.status != 409:
            raise
    api = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api)

    def denied():
        try:
            core.patch_namespaced_pod(probe, namespace, {"metadata": {"labels": {"probe": "1"}}},
                                      dry_run="All")
        except ApiException as err:
            return err.status == 422 and "ValidatingAdmissionPolicy" in (err.body or "")
        return False
    try:
        wait_for(denied, timeout, interval=0.2, what="the admission policy in force")
    finally:
        api.close()


def install_for_operator(control_plane, api, folder: Path, namespaces,
                         webhook_port: int) -> tuple[Path, dict]:
    """What the chart installs, on a bare control plane (the benchmarks): the CRD, the
    namespaces, the operator's ServiceAccount, RBAC and admission policies (deploy/rbac.yaml),
    and the chart's webhook configuration pointed at 127.0.0.1:``webhook_port``. Returns the
    operator's kubeconfig (its own ServiceAccount) and the webhook configuration created."""
    from kubernetes import client, utils

    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd_manifest())
    core = client.CoreV1Api(api)
    for ns in ("ai4dl-system", *namespaces):
        core.create_namespace({"metadata": {"name": ns}})
    for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()):
        utils.create_from_dict(api, doc)
    kubeconfig = control_plane.service_account_kubeconfig("ai4dl-system", "ai4dl-operator",
                                                          folder / "operator.kubeconfig")
    docs = yaml.safe_load_all((REPO / "deploy" / "ai4dl-operator.yaml").read_text())
    mwc = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    for hook in mwc["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}/admission"}
    client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(mwc)
    return kubeconfig, mwc


def stop_process(proc: subprocess.Popen | None, sig=signal.SIGTERM, timeout: float = 15) -> None:
    """Send ``sig`` and wait; SIGKILL when it has not ended after ``timeout`` seconds."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Operator:
    """The operator process, started from its console entrypoint."""

    def __init__(self, kubeconfig: Path, prometheus_url: str, log: Path,
                 extra_args: tuple[str, ...] = ()):
        self.kubeconfig, self.prometheus_url, self.log = kubeconfig, prometheus_url, log
        self.extra_args = tuple(extra_args)
        self.metrics_port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Operator":
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "ai4dl.controller", "--prometheus-url", self.prometheus_url,
               "--metrics-port", str(self.metrics_port), "--health-port", "0",
               "--prometheus-timeout", "2", "--prometheus-retries", "1",
               "--settle-seconds", "1.5",
               "--state-key-file", str(state_key_file(self.log.parent)),
               # the tests' windows (10 s, some 4 s) are below the operator's default minimum
               # (60 s): every window is served unless a test sets a minimum in extra_args
               "--min-window-seconds", "0", *self.extra_args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(self.log, "a"),
                                     stderr=subprocess.STDOUT)
        return self

    def stop(self, sig=signal.SIGTERM) -> None:
        stop_process(self.proc, sig)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text().splitlines()[-n:]) if self.log.exists() else ""


def write_report(request, title: str, header: str, rows, append: bool = False) -> None:
    """A figures table at the end of a test module: printed past pytest's capture, and
    written to ``$AI4DL_FAULT_REPORT`` (appended with ``append``) when set."""
    if not rows:
        return
    cols = header.count("|") - 1
    table = [header, "|" + "---|" * cols] + ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    text = "\n".join(table) + "\n"
    if os.environ.get("AI4DL_FAULT_REPORT"):
        with open(os.environ["AI4DL_FAULT_REPORT"], "a" if append else "w") as f:
            f.write(("\n" if append else "") + text)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(f"\n[{title}]\n" + text)
    else:
        print(text)
