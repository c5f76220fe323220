"""The operator as a subprocess against the test API server: the PhaseModel CRD, a kubeconfig
for the operator's own ServiceAccount (bound by deploy/rbac.yaml), and :class:`Operator`.

Import the fixtures into a test module (``from e2e_fixtures_operator import crd, ...``).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from ai4dl.crd import crd_manifest
from e2e_fixtures_k8s import LIVE_CONTROLLERS, WORKER_REPORTS

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


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition",
             reason=None):
    """``predicate()`` once truthy, polled every ``interval`` s for ``timeout`` s; else an
    AssertionError naming ``what``, the last value, and ``reason()`` (why it ran out) if given."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    why = f"\n{reason()}" if reason is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} "
                         f"(last: {last!r}){why}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install_crd(api_client, body: dict) -> dict:
    """Create a CRD (or bring an older one up to date) and wait until it is Established."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api_client)
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
def crd(kube_cluster):
    """The operator's CRDs (PhaseModel, WorkloadProfile), created (or already there) and
    Established; the PhaseModel's is returned."""
    from ai4dl.crd_profile import crd_manifest as profile_crd_manifest

    install_crd(kube_cluster.api_client, profile_crd_manifest())
    return install_crd(kube_cluster.api_client, crd_manifest())


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

    from ai4dl.crd_profile import crd_manifest as profile_crd_manifest

    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd_manifest())
    client.ApiextensionsV1Api(api).create_custom_resource_definition(profile_crd_manifest())
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
                 extra_args: tuple[str, ...] = (), window: float = 10.0):
        self.kubeconfig, self.prometheus_url, self.log = kubeconfig, prometheus_url, log
        #: the tests' PhaseModels' windowSeconds: what the waits' deadlines are made of
        self.window = window
        self.started_at = time.time()
        self.extra_args = tuple(extra_args)
        self.metrics_port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Operator":
        # its temporary files (the webhook's self-signed key) beside its log: a test that
        # SIGKILLs the operator leaves nothing in the machine's /tmp
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1",
                   TMPDIR=str(self.log.parent))
        cmd = [sys.executable, "-m", "ai4dl.controller", "--prometheus-url", self.prometheus_url,
               "--metrics-port", str(self.metrics_port), "--health-port", "0",
               "--prometheus-timeout", "2", "--prometheus-retries", "1",
               "--settle-seconds", "1.5",
               "--state-key-file", str(state_key_file(self.log.parent)),
               # the tests' windows (10 s, some 4 s) are below the operator's default minimum
               # (60 s): every window is served unless a test sets a minimum in extra_args
               "--min-window-seconds", "0", *self.extra_args]
        self.started_at = time.time()
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(self.log, "a"),
                                     stderr=subprocess.STDOUT)
        LIVE_CONTROLLERS[:] = [p for p in LIVE_CONTROLLERS if p.poll() is None] + [self.proc]
        return self

    def stop(self, sig=signal.SIGTERM) -> None:
        stop_process(self.proc, sig)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text().splitlines()[-n:]) if self.log.exists() else ""

    def windows(self, namespace: str | None = None, name: str | None = None) -> list["Window"]:
        """The windows the operator logged (every PhaseModel's, or ``namespace``/``name``'s)."""
        text = self.log.read_text() if self.log.exists() else ""
        return [w for w in map(Window.parse, WINDOW_LINE.finditer(text))
                if (namespace is None or w.namespace == namespace)
                and (name is None or w.name == name)]

    def why_slow(self, namespace: str | None = None, name: str | None = None,
                 tail: int = 15) -> str:
        """Why windows did not come in time, from the operator's log: its last windows'
        durations and lateness against its window, how many PhaseModels it serves, and
        its log tail (or that it logged none, or has exited)."""
        lines = []
        if self.proc is not None and self.proc.poll() is not None:
            lines.append(f"the operator has exited ({self.proc.returncode})")
        every = self.windows()
        own = [w for w in every if (namespace is None or w.namespace == namespace)
               and (name is None or w.name == name)]
        if namespace is not None:
            lines.append(f"{len(own)} window(s) of {namespace}/{name or '*'} logged")
        if every:
            last = every[-8:]
            served = sorted({f"{w.namespace}/{w.name}" for w in every})
            lines.append(
                f"the operator's last windows took {', '.join(f'{w.took:.1f}' for w in last)} s "
                f"and started {', '.join(f'{w.late:.1f}' for w in last)} s after due, against a "
                f"{self.window:g} s window; it served {len(served)} PhaseModel(s): {served[:12]}")
        else:
            lines.append(f"no window logged {time.time() - self.started_at:.0f} s after the "
                         f"operator's start")
        return "; ".join(lines) + f"\n--- operator log tail:\n{self.tail(tail)}"

    def wait_for(self, predicate, timeout: float, what: str, *, namespace: str | None = None,
                 name: str | None = "pm", interval: float = 0.5, cap: float = 4.0):
        """``predicate()`` once truthy. The deadline follows the measured window time rather
        than a constant: ``timeout`` s from now (what an unloaded operator needs), pushed back
        by how slow this operator was meanwhile, by its own log: its start-up beyond a window
        until it logs its first window, then each logged window's lateness and duration; at
        most ``cap`` times ``timeout``. A timeout says why (:meth:`why_slow`, about
        ``namespace``/``name``), not just that it ran out."""
        t0 = time.time()
        while True:
            last = predicate()
            if last:
                return last
            now = time.time()
            mine = [w for w in self.windows() if w.logged >= self.started_at]   # this process
            slack = sum(w.late + w.took for w in mine if w.logged > t0)
            if not any(w.logged <= t0 for w in mine):
                # its start-up (imports, kopf's first listings) beyond a window, until it
                # logged its first window
                first = min((w.logged for w in mine), default=now)
                slack += max(0.0, first - max(t0, self.started_at) - self.window)
            if now >= t0 + min(cap * timeout, timeout + slack):
                raise AssertionError(
                    f"waited {now - t0:.0f} s ({timeout:.0f} s + {slack:.1f} s of the operator's "
                    f"measured slowness) for {what} (last: {last!r}): "
                    f"{self.why_slow(namespace, name)}")
            time.sleep(interval)

    def wait_until(self, predicate, windows: int, what: str, *, margin: float = 8.0, **kw):
        """:meth:`wait_for` ``predicate``, due within ``windows`` of the operator's windows:
        ``(windows + 1) * window + margin`` s unloaded (the first boundary can be up to a
        window away)."""
        return self.wait_for(predicate, (windows + 1) * self.window + margin, what, **kw)

    def wait_windows(self, n: int, namespace: str, name: str = "pm", *, after: float = 0.0,
                     logged_after: float = 0.0, **kw) -> list["Window"]:
        """The first ``n`` windows of ``namespace``/``name`` that start at or after ``after``
        and were logged at or after ``logged_after`` (epoch s; :attr:`started_at`: this
        process's, where a restarted operator appends to the log of the one before), once
        logged (:meth:`wait_until`)."""
        def got():
            ws = [w for w in self.windows(namespace, name)
                  if w.start >= after and w.logged >= logged_after]
            return ws[:n] if len(ws) >= n else None
        return self.wait_until(got, n, f"{n} window(s) of {namespace}/{name}",
                               namespace=namespace, name=name, interval=0.25, **kw)


WINDOW_LINE = re.compile(
    r"^(\S+ \S+) \S+ \S+: PhaseModel (\S+?)/(\S+) window ([0-9.]+): (.*); started ([0-9.]+) s "
    r"after due(?:, took ([0-9.]+) s)?$", re.M)


class Window:
    """One window's summary line of the operator's log."""

    __slots__ = ("logged", "namespace", "name", "start", "summary", "late", "took")

    @classmethod
    def parse(cls, m) -> "Window":
        w = cls()
        stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        w.logged = stamp.timestamp()        # the operator logs local time, as time.time() reads
        w.namespace, w.name, w.start = m.group(2), m.group(3), float(m.group(4))
        w.summary, w.late, w.took = m.group(5), float(m.group(6)), float(m.group(7) or 0.0)
        return w

    def __repr__(self) -> str:
        return (f"Window({self.namespace}/{self.name} {self.start:.0f}: {self.summary}; "
                f"late {self.late:.2f} s, took {self.took:.2f} s)")


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
    worker, folder = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(WORKER_REPORTS)
    if worker and folder:   # a pytest-xdist worker's terminal is shown nowhere: the controller
        # prints the folder's tables (tests/e2e_fixtures_k8s.py)
        (Path(folder) / f"{time.time_ns()}-{worker}.md").write_text(f"[{title}]\n{text}")
        return
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(f"\n[{title}]\n" + text)
    else:
        print(text)
