"""pytest plugin: a real node (containerd + kubelet v1.35.4) registered with the session's
test API server, so pods really run and in-place resizes really reach cgroups.

Registered from ``tests/conftest.py``. The tier runs only with ``AI4DL_REAL_NODE=1`` (``make
test`` sets it when run as root); it needs root, cgroup v1/hybrid, and ``bash
e2e/node/build.sh`` once (``make e2e-deps``: 2 min for the kubelet on a warm Go cache, 20 s for
the Debian packages). Without it, or without root, the tests skip; with ``AI4DL_REAL_NODE=1``
and ``CI`` set, a node that cannot be built or started fails them.

Fixtures
--------
``real_node`` (session)
    A started :class:`e2e.node.node.RealNode` (``.name``, ``.start_seconds``, ``.cgroup_root``,
    ``.dir``). Before it starts, the leftovers of killed sessions are swept; when the session
    ends, everything is killed, unmounted and removed (see ``e2e/node/node.py``). The Node
    object is never deleted between tests.
``node_pods`` (function)
    A :class:`NodePods` bound to ``k8s_namespace``: pods on the real node, their cgroup files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e_fixtures_k8s import _truthy  # noqa: F401  (also puts the repo root on sys.path)

from e2e.node import node as _node  # noqa: E402

BUSYBOX_IMAGE = _node.BUSYBOX_IMAGE
#: Stops on SIGTERM at once (PID 1 ignores signals it does not handle).
SLEEP_FOREVER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_node: needs the real node tier (AI4DL_REAL_NODE=1, root)")


#: The files of the tests on the real node: ``make test``'s integration tier runs them on one
#: pytest-xdist worker (``--dist loadfile``, below), one after the other.
REAL_NODE_FILES = "tests/test_real_node"
#: Files that train real PyTorch models in several processes at once: on the real node's worker
#: too, so that they never run beside its jobs, whose cpu limits are timed (a 30-s job under
#: 300m ends within 90 s more: tests/test_real_node_jobs.py).
BESIDE_THE_REAL_NODE = ("tests/test_corpus.py", "tests/test_workloads.py")


def real_node_scope(nodeid: str) -> str:
    """A test's unit of work under ``--dist loadfile``: its file, but one for every file of
    tests on the real node, so that one worker starts the one kubelet the machine can hold (its
    paths, cgroups and containerd are the machine's), and runs the heavy training beside it."""
    path = nodeid.split("::", 1)[0]
    return REAL_NODE_FILES if path.startswith(REAL_NODE_FILES) \
        or path in BESIDE_THE_REAL_NODE else path


@pytest.hookimpl(optionalhook=True)    # pytest-xdist's hook: known only with it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` with the real node's files as one file (xdist's ``xdist_group``
    marks no test under pytest 9: it renames a node id that pytest no longer reads)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RealNodeFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return real_node_scope(nodeid)

    return RealNodeFileScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of this folder on the real node outside its files would start a second kubelet
    beside the first under ``--dist loadfile``: refused at collection."""
    here = Path(__file__).resolve().parent
    for item in items:
        if "real_node" in getattr(item, "fixturenames", ()) \
                and Path(item.path).resolve().parent == here \
                and not Path(item.path).name.startswith(Path(REAL_NODE_FILES).name):
            raise pytest.UsageError(f"{item.nodeid} runs on the real node: its place is a "
                                    f"{REAL_NODE_FILES}*.py file (make test runs those on one "
                                    "worker)")


def _unavailable(reason: str) -> None:
    if _truthy("CI") and _truthy("AI4DL_REAL_NODE"):
        pytest.fail(f"real node unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


#: What the session's node left on the machine after its teardown (processes, mounts, cgroups,
#: files): tests/conftest.py's leak check fails the session on any.
NODE_LEFTOVERS: list[str] = []


@pytest.fixture(scope="session")
def real_node(request: pytest.FixtureRequest) -> Iterator[_node.RealNode]:
    if not _truthy("AI4DL_REAL_NODE"):
        pytest.skip("real-node tier off: AI4DL_REAL_NODE=1 runs it (make test sets it as root)")
    # asked for only now, so that a skipped tier starts no control plane
    kube_cluster = request.getfixturevalue("kube_cluster")
    if kube_cluster.control_plane is None:  # a cluster of one's own cannot take this node
        pytest.skip("the real node needs the harness's own control plane (its CA)")
    if os.geteuid() != 0:
        _unavailable("the real node needs root (cgroups, mounts)")
    try:
        _node.ensure_programs()
    except (_node.NodeError, OSError) as exc:
        _unavailable(f"cannot build/install the node's programs: {exc}")
    node = _node.RealNode(kube_cluster.control_plane)
    node.start()  # a start failure after a good build is a real error: never skipped
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(f"\n[real_node] {node.name} Ready in {node.start_seconds:.1f} s"
                          + (f" (swept leftovers of {node.swept})" if node.swept else ""))
    try:
        yield node
    finally:
        problems = node.stop() + node.leftovers()
        if problems:  # the session's leak check fails on them; the next session's sweep retries
            print(f"[real_node] teardown left: {problems}")
            NODE_LEFTOVERS.extend(problems)


class NodePods:
    """Pods on the real node in one namespace (hostNetwork, local busybox image)."""

    def __init__(self, kube_cluster, node: _node.RealNode, namespace: str):
        self.cluster, self.node, self.namespace = kube_cluster, node, namespace
        self.core = kube_cluster.core

    def manifest(self, name: str, *, cpu: str = "100m", memory: str = "32Mi",
                 guaranteed: bool = True, labels: dict | None = None,
                 annotations: dict | None = None, resize_policy: list | None = None, command: list | None = None) -> dict:
        res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
        if guaranteed:
            res["limits"] = dict(res["requests"])
        container = {"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                     "command": command or SLEEP_FOREVER, "resources": res}
        if resize_policy:
            container["resizePolicy"] = resize_policy
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {},
                             "annotations": annotations or {}},
                "spec": {"nodeName": self.node.name, "hostNetwork": True,
                         "terminationGracePeriodSeconds": 1, "containers": [container]}}

    def create(self, name: str, **kw) -> dict:
        self.core.create_namespaced_pod(self.namespace, self.manifest(name, **kw))
        return self.wait_running(name)

    def get(self, name: str) -> dict:
        return self.cluster.api_client.sanitize_for_serialization(
            self.core.read_namespaced_pod(name, self.namespace))

    def wait_running(self, name: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            pod = self.get(name)
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if pod["status"].get("phase") == "Running" and statuses and all(
                    s.get("state", {}).get("running") for s in statuses):
                return pod
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {name} not Running after {timeout:g} s: {pod.get('status')}")
            time.sleep(0.2)

    def resize(self, name: str, container_resources: dict, container: str = "main") -> dict:
        return self.cluster.api_client.sanitize_for_serialization(
            self.core.patch_namespaced_pod_resize(
                name, self.namespace,
                {"spec": {"containers": [{"name": container, "resources": container_resources}]}}))

    def cgroup(self, pod: dict, controller: str, container: str = "main") -> Path:
        """The container's cgroup folder in ``controller`` (cpu, memory...), cgroup v1."""
        uid = pod["metadata"]["uid"]
        cid = next(s["containerID"] for s in pod["status"]["containerStatuses"]
                   if s["name"] == container).split("//", 1)[1]
        qos = pod["status"]["qosClass"]
        parts = ["kubepods"] + ([] if qos == "Guaranteed" else [qos.lower()]) + [f"pod{uid}", cid]
        return Path("/sys/fs/cgroup", controller, self.node.cgroup_root.lstrip("/"), *parts)

    def cgroup_value(self, pod: dict, controller: str, file: str, container: str = "main") -> int:
        return int((self.cgroup(pod, controller, container) / file).read_text())

    def resize_conditions(self, name: str) -> dict[str, dict]:
        pod = self.get(name)
        return {c["type"]: c for c in pod["status"].get("conditions") or []
                if c["type"].startswith("PodResize")}


@pytest.fixture()
def node_pods(kube_cluster, real_node, k8s_namespace) -> NodePods:
    return NodePods(kube_cluster, real_node, k8s_namespace)
