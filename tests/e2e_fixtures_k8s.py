"""pytest plugin: a real Kubernetes API server for tests (no Docker), and a fake kubelet.

Registered from ``tests/conftest.py`` (``pytest_plugins = ["e2e_fixtures_k8s"]``).

Fixtures
--------
``kube_cluster`` (session)
    A :class:`KubeCluster`: ``.kubeconfig`` (admin), ``.api_client`` (``kubernetes.client.ApiClient``),
    ``.control_plane`` (the :class:`e2e.controlplane.cluster.ControlPlane`, or ``None`` for an
    existing cluster). With ``AI4DL_USE_EXISTING_CLUSTER=1`` and ``KUBECONFIG`` pointing at a file,
    that cluster is used. Otherwise ``e2e/controlplane/build.sh`` runs (a cold build takes minutes
    once per machine; log in ``~/.cache/ai4dl/build.log``) and a local etcd + kube-apiserver start
    once per session. If the binaries cannot be built the tests are skipped, unless ``CI`` is set
    (then they fail). ``AI4DL_E2E=0`` skips them outright.
``k8s_namespace`` (function)
    A fresh namespace name; its pods are force-deleted and the namespace deleted afterwards.
``fake_kubelet`` (function)
    A :class:`FakeKubelet` bound to ``k8s_namespace``: creates pods on a fake Node, marks them
    Running, "applies" in-place resizes, deletes pods with grace period 0.

Without kube-controller-manager, a deleted namespace stays Terminating and there is no default
ServiceAccount; without a kubelet, nothing changes pod status but ``FakeKubelet``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `e2e` lives at the repo root, which pytest does not add
    sys.path.insert(0, str(REPO_ROOT))

from e2e.controlplane import cluster as _cp  # noqa: E402

FAKE_NODE = "ai4dl-fake-node"


#: Where pytest-xdist's workers leave the figures tables of ``write_report``
#: (tests/e2e_fixtures_operator.py): a worker's terminal is shown nowhere, so the controller
#: prints them after the tests (``pytest_terminal_summary``).
WORKER_REPORTS = "AI4DL_WORKER_REPORTS"
_REPORTS = pytest.StashKey[str]()       # the controller's folder of them


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "k8s: needs a Kubernetes API server (the kube_cluster fixture; AI4DL_E2E=0 skips)")
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        import tempfile    # the workers start after this, with this environment

        config.stash[_REPORTS] = os.environ[WORKER_REPORTS] = \
            tempfile.mkdtemp(prefix="ai4dl-reports-")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    folder = config.stash.get(_REPORTS, None)
    if folder is None:
        return
    for table in sorted(Path(folder).iterdir()):      # in the order they were written
        terminalreporter.write_line("\n" + table.read_text())


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_REPORTS, None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(WORKER_REPORTS, None)


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _in_ci() -> bool:
    return _truthy("CI")


def _unavailable(reason: str) -> None:
    """Skip locally; fail loudly in CI."""
    if _in_ci():
        pytest.fail(f"Kubernetes test cluster unavailable in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class KubeCluster:
    kubeconfig: Path
    api_client: Any  # kubernetes.client.ApiClient
    control_plane: _cp.ControlPlane | None = None
    expected_version: str | None = None  # e.g. "v1.35.4" when we built it
    startup_seconds: float | None = None
    _extra_clients: list = field(default_factory=list, repr=False)

    @property
    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    def impersonating(self, user: str, group: str | None = None):
        """A new ApiClient (admin credentials) whose requests act as ``user`` (and ``group``).

        The Python client ignores ``as:`` in kubeconfigs, so this sets ``Impersonate-User`` /
        ``Impersonate-Group`` headers; it can send one group only (its headers are a dict).
        For a ServiceAccount with its real groups, prefer :meth:`as_service_account`.
        """
        from kubernetes import config

        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        api.set_default_header("Impersonate-User", user)
        if group:
            api.set_default_header("Impersonate-Group", group)
        self._extra_clients.append(api)
        return api

    def as_token(self, token: str):
        """A new ApiClient for the same server that authenticates with a bearer token only."""
        import copy

        from kubernetes import client

        cfg = copy.deepcopy(self.api_client.configuration)
        cfg.cert_file = cfg.key_file = None
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        api = client.ApiClient(cfg)
        self._extra_clients.append(api)
        return api

    def service_account_token(self, namespace: str, name: str, *, create: bool = True,
                              expiration_seconds: int = 3600) -> str:
        """A bound token (TokenRequest API) for ServiceAccount ``namespace/name`` (created if asked)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core = self.core
        if create:
            try:
                core.create_namespaced_service_account(
                    namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
            except ApiException as exc:
                if exc.status != 409:
                    raise
        tr = core.create_namespaced_service_account_token(
            name, namespace, client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)))
        return tr.status.token

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path | str, *,
                                   create: bool = True) -> Path:
        """The admin kubeconfig with its user replaced by a real token of ServiceAccount
        ``namespace/name`` (works for the local control plane and an existing cluster alike),
        for processes we start as that ServiceAccount."""
        token = self.service_account_token(namespace, name, create=create)
        cfg = yaml.safe_load(Path(self.kubeconfig).read_text())
        cfg["users"] = [{"name": name, "user": {"token": token}}]
        for ctx in cfg["contexts"]:
            ctx["context"]["user"] = name
        Path(path).write_text(yaml.safe_dump(cfg))
        return Path(path)

    def as_service_account(self, namespace: str, name: str, *, create: bool = True):
        """A new ApiClient authenticated as the ServiceAccount (a real token: real SA groups)."""
        return self.as_token(self.service_account_token(namespace, name, create=create))

    def close(self) -> None:
        for api in self._extra_clients:
            api.close()
        self.api_client.close()


def _existing_kubeconfig() -> Path | None:
    if not _truthy("AI4DL_USE_EXISTING_CLUSTER"):
        return None
    for part in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if part and Path(part).expanduser().is_file():
            return Path(part).expanduser()
    return None


@pytest.fixture(scope="session")
def kube_cluster(request: pytest.FixtureRequest) -> Iterator[KubeCluster]:
    if os.environ.get("AI4DL_E2E", "").strip().lower() in ("0", "false", "no"):
        pytest.skip("Kubernetes e2e tests disabled (AI4DL_E2E=0)")
    try:
        from kubernetes import config as k8s_config
    except ImportError as exc:
        _unavailable(f"python package `kubernetes` not installed ({exc})")

    existing = _existing_kubeconfig()
    if existing is not None:
        api = k8s_config.new_client_from_config(config_file=str(existing))
        kc = KubeCluster(kubeconfig=existing, api_client=api)
        yield kc
        kc.close()
        return

    if not _cp.BUILD_SCRIPT.is_file():
        _unavailable(f"{_cp.BUILD_SCRIPT} missing")
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and not _binaries_look_present():
        log = _cp.cache_dir() / "build.log"
        msg = (f"\n[kube_cluster] building kube-apiserver/etcd/kubectl from the Go proxy into "
               f"{_cp.bin_dir()} (first run on this machine: several minutes; log: {log})")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(msg)
        else:
            tr.write_line(msg)
    t0 = time.monotonic()
    try:
        _cp.ensure_binaries(quiet=True)
    except (_cp.BuildError, OSError) as exc:
        _unavailable(f"cannot build the test control plane: {exc}")
    build_s = time.monotonic() - t0

    # kubernetes>=35 imports its API modules lazily; core_v1_api alone takes 1-5 s to import.
    # Do it while kube-apiserver starts (that wait is mostly idle for this process).
    preload = threading.Thread(target=_preload_client_modules, daemon=True)
    preload.start()
    # webhook_client_cert: the API server presents a client certificate to webhooks that ask for
    # one (tests/test_admission_webhook.py's operator does; no other webhook asks, so nothing
    # else changes)
    cp = _cp.ControlPlane(startup_timeout=float(os.environ.get("AI4DL_CP_TIMEOUT", "90")),
                          webhook_client_cert=True)
    try:
        cp.start()  # a start failure after a good build is a real error: never skipped
    finally:
        preload.join()
    try:
        api = k8s_config.new_client_from_config(config_file=str(cp.kubeconfig))
        kc = KubeCluster(kubeconfig=cp.kubeconfig, api_client=api, control_plane=cp,
                         expected_version="v" + _cp.KUBE_VERSION, startup_seconds=cp.startup_seconds)
        if tr is not None and capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(f"\n[kube_cluster] {kc.expected_version} at {cp.url}: binaries checked in "
                              f"{build_s:.1f} s, control plane ready in {cp.startup_seconds:.1f} s")
        _SESSION_CLUSTER.append(kc)
        yield kc
        _SESSION_CLUSTER.clear()
        kc.close()
    finally:
        cp.stop()


def _preload_client_modules() -> None:
    import importlib

    for mod in ("kubernetes.client.api.core_v1_api", "kubernetes.client.api.rbac_authorization_v1_api"):
        with contextlib.suppress(Exception):
            importlib.import_module(mod)


def _binaries_look_present() -> bool:
    b = _cp.bin_dir()
    return (b / "kube-apiserver").is_file() and (b / "etcd").is_file()


# ----------------------------------------------------------------------------- clean-up
#: Controller processes the tests started (tests/e2e_fixtures_operator.Operator registers its
#: process here): while one runs, a deleted custom object is left to it to release (its
#: deletion handler and finalizer, as in a cluster); when none runs, nobody ever would.
LIVE_CONTROLLERS: list = []
#: How long a running controller is given to release a deleted custom object.
RELEASE_SECONDS = 10.0


def controller_running() -> bool:
    return any(p.poll() is None for p in LIVE_CONTROLLERS)


def _namespaced_crds(api_client, group: str | None = None) -> list[tuple[str, str, str]]:
    """(group, served version, plural) of every namespaced CRD (of ``group``)."""
    from kubernetes import client

    out = []
    for crd in client.ApiextensionsV1Api(api_client).list_custom_resource_definition().items:
        if crd.spec.scope != "Namespaced" or group not in (None, crd.spec.group):
            continue
        version = next((v.name for v in crd.spec.versions if v.storage), crd.spec.versions[0].name)
        out.append((crd.spec.group, version, crd.spec.names.plural))
    return out


def delete_custom_objects(kube_cluster: KubeCluster, namespace: str | None = None,
                          group: str | None = None) -> list[str]:
    """Delete every namespaced custom object (of API ``group``) in ``namespace`` (every
    namespace: None) and wait until they are gone; returns ``plural/namespace/name`` of those
    found.

    Without kube-controller-manager a deleted namespace keeps its objects forever, and an
    operator started later (by another test module) serves every PhaseModel it can see,
    cluster-wide: leftovers slow its windows and add writes to the ones a test counts. A
    finalizer (kopf's) that no running controller releases within :data:`RELEASE_SECONDS`
    (none at all when no controller runs) is removed here."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom = client.CustomObjectsApi(kube_cluster.api_client)

    def listed(g, v, plural):
        try:
            if namespace is None:
                return custom.list_cluster_custom_object(g, v, plural)["items"]
            return custom.list_namespaced_custom_object(g, v, namespace, plural)["items"]
        except ApiException as err:
            if err.status == 404:       # the CRD went away meanwhile
                return []
            raise

    found: list[str] = []
    crds = _namespaced_crds(kube_cluster.api_client, group)
    for g, v, plural in crds:
        for obj in listed(g, v, plural):
            meta = obj["metadata"]
            found.append(f"{plural}/{meta['namespace']}/{meta['name']}")
            with contextlib.suppress(ApiException):     # 404: gone meanwhile
                custom.delete_namespaced_custom_object(g, v, meta["namespace"], plural,
                                                       meta["name"])
    if not found:
        return found
    deadline = time.time() + (RELEASE_SECONDS if controller_running() else 0.0)
    while True:
        left = [(g, v, p, o) for g, v, p in crds for o in listed(g, v, p)]
        if not left:
            return found
        if time.time() >= deadline:
            break
        time.sleep(0.2)
    for g, v, plural, obj in left:
        meta = obj["metadata"]
        with contextlib.suppress(ApiException):     # 404: released meanwhile
            custom.patch_namespaced_custom_object(g, v, meta["namespace"], plural, meta["name"],
                                                  {"metadata": {"finalizers": None}})
    end = time.time() + 10
    while any(listed(g, v, p) for g, v, p in crds) and time.time() < end:
        time.sleep(0.1)
    return found


def delete_namespace(kube_cluster: KubeCluster, name: str) -> None:
    """What a namespace controller would do, as far as the tests need: its custom objects
    deleted (:func:`delete_custom_objects`), its pods force-deleted (no kubelet: pods bound to
    a node would stay Terminating with a grace period), and the namespace deleted (it stays
    Terminating, empty)."""
    from kubernetes.client.rest import ApiException

    delete_custom_objects(kube_cluster, name)
    try:
        kube_cluster.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        kube_cluster.core.delete_namespace(name)
    except ApiException as err:
        if err.status != 404:
            raise


#: Namespaces made by :func:`create_namespace` in the running test module.
_MODULE_NAMESPACES: list[str] = []


def create_namespace(kube_cluster: KubeCluster, name: str, labels: dict | None = None) -> str:
    """Create namespace ``name``, removed (:func:`delete_namespace`) when the test module
    ends: for a module's own namespaces that outlive a test."""
    meta: dict = {"name": name, **({"labels": labels} if labels else {})}
    kube_cluster.core.create_namespace({"metadata": meta})
    _MODULE_NAMESPACES.append(name)
    return name


@pytest.fixture(scope="module", autouse=True)
def _no_leftover_custom_objects(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test module removes what it created: once its fixtures are torn down (and with
    them its operators), the namespaces of :func:`create_namespace` are removed, and then no
    custom object (PhaseModel) may be left in the test control plane. Leftovers are removed,
    so that the next module's operator does not serve them, and reported as this module's
    error. (Not on an existing cluster: its objects are not the tests'.)"""
    _MODULE_NAMESPACES.clear()
    yield
    kc = _SESSION_CLUSTER[0] if _SESSION_CLUSTER else None
    made = list(_MODULE_NAMESPACES)
    _MODULE_NAMESPACES.clear()
    if kc is None:
        return
    for ns in made:
        delete_namespace(kc, ns)
    if kc.control_plane is None or not kc.control_plane.running:
        return
    from ai4dl.crd import GROUP

    # the operator's own objects (kopf's peering objects of tests/test_helm.py are left alone)
    left = delete_custom_objects(kc, group=GROUP)
    assert not left, (f"{request.module.__name__} left {len(left)} custom object(s) behind "
                      f"(removed now): {left[:10]}")


_SESSION_CLUSTER: list[KubeCluster] = []


@pytest.fixture()
def k8s_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace; afterwards what it holds is removed (:func:`delete_namespace`)."""
    from kubernetes import client

    core = kube_cluster.core
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        delete_namespace(kube_cluster, name)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubelet:
    """Plays kubelet (and scheduler) for pods on one fake Node.

    * :meth:`create_pod` creates a pod with ``spec.nodeName`` set and (by default) marks it Running;
    * :meth:`mark_running` patches ``pods/<n>/status``: phase Running, Ready conditions,
      ``containerStatuses[]`` with ``resources`` (= spec) and ``allocatedResources`` (= requests);
    * :meth:`apply_resize` does what a kubelet does after a ``pods/<n>/resize``: copies the spec
      resources into the container statuses (and bumps ``observedGeneration``);
    * :meth:`auto_apply_resizes` does that in a background thread (for operator tests);
      :meth:`set_resize_pending` refuses one instead (PodResizePending: Infeasible/Deferred);
    * :meth:`delete_pod` deletes with grace period 0 and waits until it is gone.

    Pods made by :meth:`create_pod` have ``terminationGracePeriodSeconds: 0`` unless ``body``
    says otherwise, so any delete (by an operator too) removes them at once; with a grace
    period, a pod on a node stays Terminating forever (no kubelet): use :meth:`delete_pod`.
    """

    def __init__(self, api_client: Any, namespace: str | None = None, node_name: str = FAKE_NODE):
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.node_name = node_name

    def _to_dict(self, obj: Any) -> Any:
        """A kubernetes model (or dict) as its JSON dict (camelCase keys)."""
        if obj is None or isinstance(obj, dict):
            return obj
        return self.api_client.sanitize_for_serialization(obj)

    def _ns(self, namespace: str | None) -> str:
        ns = namespace or self.namespace
        if not ns:
            raise ValueError("namespace required")
        return ns

    # ------------------------------------------------------------------ node
    def ensure_node(self, *, cpu: str = "64", memory: str = "256Gi", pods: str = "250") -> None:
        """Create the fake Node (idempotent) and mark it Ready with the given capacity."""
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_node({"apiVersion": "v1", "kind": "Node",
                                   "metadata": {"name": self.node_name,
                                                "labels": {"kubernetes.io/hostname": self.node_name,
                                                           "type": "ai4dl-fake"}}})
        except ApiException as exc:
            if exc.status != 409:
                raise
            return
        cap = {"cpu": cpu, "memory": memory, "pods": pods}
        now = _now()
        self.core.patch_node_status(self.node_name, {"status": {
            "capacity": cap, "allocatable": cap,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake kubelet", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": self.node_name}],
            "nodeInfo": {"kubeletVersion": "v1.35.0", "containerRuntimeVersion": "fake://0",
                         "architecture": "amd64", "operatingSystem": "linux", "osImage": "fake",
                         "kernelVersion": "0", "kubeProxyVersion": "", "bootID": "", "machineID": "",
                         "systemUUID": ""},
        }})

    # ------------------------------------------------------------------ pods
    def create_pod(
        self,
        name: str,
        *,
        namespace: str | None = None,
        requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        containers: list[dict] | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        resize_policy: list[dict] | None = None,
        image: str = "registry.k8s.io/pause:3.10",
        running: bool = True,
        body: dict | None = None,
    ):
        """Create a pod bound to the fake node. One container ``main`` unless ``containers``/``body``.

        ``requests``/``limits``, e.g. ``{"cpu": "500m", "memory": "256Mi"}``; equal requests and
        limits for every container make it Guaranteed.
        """
        ns = self._ns(namespace)
        self.ensure_node()
        if body is None:
            if containers is None:
                resources: dict[str, dict] = {}
                if requests:
                    resources["requests"] = dict(requests)
                if limits:
                    resources["limits"] = dict(limits)
                c: dict[str, Any] = {"name": "main", "image": image, "resources": resources}
                if resize_policy:
                    c["resizePolicy"] = resize_policy
                containers = [c]
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                    "spec": {"containers": containers, "terminationGracePeriodSeconds": 0}}
        body = copy.deepcopy(self._to_dict(body))
        body.setdefault("metadata", {})["name"] = name
        body.setdefault("spec", {})["nodeName"] = self.node_name
        self.core.create_namespaced_pod(ns, body)
        if running:
            return self.mark_running(name, namespace=ns)
        return self.core.read_namespaced_pod(name, ns)

    def _container_statuses(self, pod: Any, *, started_at: str, previous: dict[str, dict]) -> list[dict]:
        spec = self._to_dict(pod)["spec"]
        out = []
        for i, c in enumerate(spec.get("containers", [])):
            res = c.get("resources") or {}
            st: dict[str, Any] = {
                "name": c["name"], "image": c.get("image", ""),
                "imageID": f"fake://{c.get('image', '')}",
                "containerID": f"fake://{pod.metadata.uid}-{i}",
                "ready": True, "started": True, "restartCount": 0,
                "state": {"running": {"startedAt": previous.get(c["name"], {}).get("startedAt", started_at)}},
                "resources": {k: v for k, v in (("requests", res.get("requests")),
                                               ("limits", res.get("limits"))) if v},
            }
            if res.get("requests"):
                st["allocatedResources"] = dict(res["requests"])
            out.append(st)
        return out

    def mark_running(self, name: str, *, namespace: str | None = None):
        """Patch the pod's status as a kubelet would once all containers run. Returns the pod."""
        ns = self._ns(namespace)
        pod = self.core.read_namespaced_pod(name, ns)
        now = _now()
        conds = [{"type": t, "status": "True", "lastTransitionTime": now,
                  "observedGeneration": pod.metadata.generation}
                 for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready",
                           "PodScheduled")]
        status = {
            "phase": "Running", "conditions": conds, "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "podIP": "10.244.0.10", "podIPs": [{"ip": "10.244.0.10"}],
            "startTime": now, "observedGeneration": pod.metadata.generation,
            "containerStatuses": self._container_statuses(pod, started_at=now, previous={}),
        }
        return self.core.patch_namespaced_pod_status(name, ns, {"status": status})

    def apply_resize(self, name: str, *, namespace: str | None = None):
        """After a ``pods/<n>/resize`` patch: make status reflect the new spec resources.

        Copies ``spec.containers[].resources`` into ``status.containerStatuses[].resources``
        (and ``allocatedResources``), drops PodResizePending/PodResizeInProgress conditions and
        sets ``observedGeneration``. Returns the pod.
        """
        ns = self._ns(namespace)
        pod = self.core.read_namespaced_pod(name, ns)
        d = self._to_dict(pod)
        status = d.get("status") or {}
        previous = {}
        for cs in status.get("containerStatuses") or []:
            running = (cs.get("state") or {}).get("running") or {}
            previous[cs["name"]] = {"startedAt": running.get("startedAt")} if running else {}
        conds = [c for c in status.get("conditions") or []
                 if c.get("type") not in ("PodResizePending", "PodResizeInProgress")]
        for c in conds:
            c["observedGeneration"] = pod.metadata.generation
        patch = {"status": {
            "conditions": conds,
            "observedGeneration": pod.metadata.generation,
            "containerStatuses": self._container_statuses(pod, started_at=_now(), previous=previous),
        }}
        # JSON merge patch: replaces the lists whole (strategic merge would keep stale conditions).
        return self.core.patch_namespaced_pod_status(
            name, ns, patch, _content_type="application/merge-patch+json")

    def pending_resizes(self, *, namespace: str | None = None) -> list[str]:
        """Names of pods on the fake node whose spec resources differ from their status."""
        ns = self._ns(namespace)
        out = []
        for pod in self.core.list_namespaced_pod(
                ns, field_selector=f"spec.nodeName={self.node_name}").items:
            d = self._to_dict(pod)
            if (d.get("status") or {}).get("phase") != "Running" or d["metadata"].get("deletionTimestamp"):
                continue
            have = {cs["name"]: cs.get("resources") or {}
                    for cs in d["status"].get("containerStatuses") or []}
            for c in d["spec"]["containers"]:
                res = c.get("resources") or {}
                want = {k: v for k, v in res.items() if k in ("requests", "limits") and v}
                if have.get(c["name"], {}) != want:
                    out.append(d["metadata"]["name"])
                    break
        return out

    def apply_pending_resizes(self, *, namespace: str | None = None) -> list[str]:
        """:meth:`apply_resize` every pod in :meth:`pending_resizes`; returns their names."""
        from kubernetes.client.rest import ApiException

        done = []
        for name in self.pending_resizes(namespace=namespace):
            try:
                self.apply_resize(name, namespace=namespace)
                done.append(name)
            except ApiException as exc:
                if exc.status not in (404, 409):  # deleted / changed meanwhile: next round
                    raise
        return done

    @contextlib.contextmanager
    def auto_apply_resizes(self, *, interval: float = 0.2, namespace: str | None = None):
        """Within the block, a thread applies resizes like a kubelet would (every ``interval`` s).

        For tests where something else (the operator) resizes pods. Errors in the thread are
        re-raised when the block exits.
        """
        ns = self._ns(namespace)
        stop = threading.Event()
        errors: list[BaseException] = []

        def loop() -> None:
            while not stop.wait(interval):
                try:
                    self.apply_pending_resizes(namespace=ns)
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)
                    return

        t = threading.Thread(target=loop, name=f"fake-kubelet-{ns}", daemon=True)
        t.start()
        try:
            yield self
        finally:
            stop.set()
            t.join(timeout=10)
        if errors:
            raise errors[0]

    def set_resize_pending(self, name: str, reason: str = "Infeasible", message: str = "",
                           *, namespace: str | None = None):
        """Refuse/defer a resize as a kubelet would: condition PodResizePending (Infeasible|Deferred).

        The status resources stay as they were. Returns the pod.
        """
        ns = self._ns(namespace)
        pod = self.core.read_namespaced_pod(name, ns)
        conds = [c for c in (self._to_dict(pod).get("status") or {}).get("conditions") or []
                 if c.get("type") not in ("PodResizePending", "PodResizeInProgress")]
        conds.append({"type": "PodResizePending", "status": "True", "reason": reason,
                      "message": message or f"fake kubelet: resize {reason.lower()}",
                      "lastTransitionTime": _now(), "observedGeneration": pod.metadata.generation})
        return self.core.patch_namespaced_pod_status(
            name, ns, {"status": {"conditions": conds}}, _content_type="application/merge-patch+json")

    def set_phase(self, name: str, phase: str, *, namespace: str | None = None):
        """E.g. ``Succeeded``/``Failed``: containers terminated (then a graceful delete is instant)."""
        ns = self._ns(namespace)
        return self.core.patch_namespaced_pod_status(name, ns, {"status": {"phase": phase}})

    def delete_pod(self, name: str, *, namespace: str | None = None, wait: bool = True,
                   timeout: float = 10.0) -> None:
        """Delete with grace period 0 (no kubelet would finish a graceful delete); wait until gone."""
        from kubernetes.client.rest import ApiException

        ns = self._ns(namespace)
        try:
            self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.core.read_namespaced_pod(name, ns)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {ns}/{name} still exists {timeout} s after delete")
            time.sleep(0.05)


@pytest.fixture()
def fake_kubelet(kube_cluster: KubeCluster, k8s_namespace: str) -> FakeKubelet:
    kl = FakeKubelet(kube_cluster.api_client, namespace=k8s_namespace)
    kl.ensure_node()
    return kl
