"""The real-node tier: pods run on a real kubelet v1.35.4 + containerd 1.6 + runc (the
``real_node`` fixture, tests/e2e_fixtures_node.py), so an in-place resize reaches the
container's cgroup files, and Deferred/Infeasible come from the kubelet itself.

Opt-in (``AI4DL_REAL_NODE=1``, root, cgroup v1/hybrid; ``bash e2e/node/build.sh`` once): the
tests skip otherwise. Run only this tier::

    AI4DL_REAL_NODE=1 PYTHONPATH=$PWD/operator python -m pytest -q tests/test_real_node.py

Still not real here: the operator reads its usage from the trace exporter scraped by the real
Prometheus (not the kubelet's /metrics/cadvisor: the busybox pods use next to nothing, and the
model's phases need a DL job's usage), and the pods' processes are busybox loops.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ai4dl import synthetic
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.model import PhaseModel
from e2e_fixtures_node import SLEEP_FOREVER, NodePods
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401 (fixtures)
                                   wait_for, write_report)
from test_faults import apiserver_counts, pod_writes

from e2e.node import node as _node

REPO = Path(__file__).resolve().parent.parent
WINDOW, STEP = 10, 1
SPEED = 15.0

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

FIGURES: list[tuple[str, str, str]] = []


@pytest.fixture(scope="module", autouse=True)
def _report(request, real_node):
    FIGURES.append(("node", "Ready after start (sweep, containerd, image import, kubelet)",
                    f"{real_node.start_seconds:.1f} s"))
    yield
    write_report(request, "real node", "| case | measure | value |", FIGURES, append=True)


def iptables_rules() -> str | None:
    """``iptables -S`` (None where the machine has no iptables)."""
    exe = shutil.which("iptables")
    if exe is None:
        return None
    return subprocess.run([exe, "-S"], capture_output=True, text=True).stdout


# ----------------------------------------------------------------------------- the node itself
def test_node_is_ready_with_no_iptables_rules(real_node, kube_cluster):
    """The node registers and is Ready in seconds; its kubelet writes no iptables rule (a
    KUBE-FIREWALL DROP for 127.0.0.0/8 would break every loopback test on the machine)."""
    node = kube_cluster.core.read_node(real_node.name)
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert real_node.start_seconds < 30
    cfg = json.loads((real_node.dir / "kubelet" / "config.json").read_text())
    assert cfg["makeIPTablesUtilChains"] is False
    rules = iptables_rules()
    if rules is not None:
        assert "KUBE-" not in rules, rules


def test_inplace_resize_reaches_cgroups_without_restart(node_pods: NodePods):
    """A direct pods/resize of a running Guaranteed pod: the container's cgroup v1 files take
    the new cpu and memory (quota, shares, memory limit), the container is the same one
    (restartCount 0, same containerID) and the pod stays Guaranteed."""
    pod = node_pods.create("g", cpu="200m", memory="64Mi")
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 20000
    assert node_pods.cgroup_value(pod, "memory", "memory.limit_in_bytes") == 64 * 2**20
    t0 = time.monotonic()
    node_pods.resize("g", {"requests": {"cpu": "400m", "memory": "96Mi"},
                           "limits": {"cpu": "400m", "memory": "96Mi"}})
    wait_for(lambda: node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 40000
             and node_pods.cgroup_value(pod, "memory", "memory.limit_in_bytes") == 96 * 2**20,
             30, interval=0.1, what="the cgroup files to take the resize")
    applied = time.monotonic() - t0
    assert node_pods.cgroup_value(pod, "cpu", "cpu.shares") == 409  # 400m * 1024 / 1000
    after = wait_for(lambda: (lambda p: p if (p["status"]["containerStatuses"][0].get(
        "resources") or {}).get("limits", {}).get("cpu") == "400m" else None)(
        node_pods.get("g")), 15, interval=0.2, what="status.containerStatuses[].resources")
    st = after["status"]["containerStatuses"][0]
    assert st["restartCount"] == 0 and st["containerID"] == cid
    assert after["status"]["qosClass"] == "Guaranteed"
    assert not node_pods.resize_conditions("g")
    FIGURES.append(("direct resize", "seconds from PATCH pods/resize to the cgroup files",
                    f"{applied:.1f} s"))


def test_resize_above_allocatable_is_infeasible(node_pods: NodePods, real_node, kube_cluster):
    """A resize above the node's allocatable cpu: the kubelet answers PodResizePending
    Infeasible and leaves the cgroup as it was."""
    pod = node_pods.create("big", cpu="100m", memory="32Mi")
    cores = int(kube_cluster.core.read_node(real_node.name).status.allocatable["cpu"])
    want = f"{cores + 2}"
    node_pods.resize("big", {"requests": {"cpu": want}, "limits": {"cpu": want}})
    cond = wait_for(lambda: node_pods.resize_conditions("big").get("PodResizePending"), 20,
                    interval=0.2, what="PodResizePending")
    assert cond["reason"] == "Infeasible", cond
    assert node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 10000
    st = node_pods.get("big")["status"]["containerStatuses"][0]
    assert st["restartCount"] == 0 and st["resources"]["limits"]["cpu"] == "100m"


def test_teardown_and_sweep_leave_nothing(real_node, kube_cluster):
    """A second node with a running pod, stopped: no process, mount, cgroup, folder or
    /var/log/containers link left. A third one in a process SIGKILLed like a killed session
    (its kubelet and containerd die with it, the shims and containers do not): the next
    sweep removes all of it, and never touches the live node."""
    cp = kube_cluster.control_plane
    other = _node.RealNode(cp).start()
    try:
        pods = NodePods(kube_cluster, other, "default")
        kube_cluster.core.create_namespaced_pod("default", pods.manifest("teardown-probe"))
        pods.wait_running("teardown-probe")
        assert other.leftovers(), "a running node must own something"
    finally:
        problems = other.stop()
        kube_cluster.core.delete_namespaced_pod("teardown-probe", "default", grace_period_seconds=0)
    assert problems == [] and other.leftovers() == []

    # a session killed with its node up
    child = subprocess.Popen([sys.executable, "-c", _ORPHAN, str(REPO), str(cp.dir)],
                             stdout=subprocess.PIPE, text=True, cwd=REPO / "tests")
    try:
        line = child.stdout.readline()
        assert line.startswith("up "), f"the child's node did not start: {line!r}"
        node_id, folder = line.split()[1], Path(line.split()[2])
        assert _node.leftovers(node_id, folder)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    time.sleep(1)
    left = _node.leftovers(node_id, folder)
    assert any(x.startswith("process") for x in left), f"nothing survived the kill? {left}"
    # its lock file is older than the sweep's grace period once we wait; make it so
    lock = _node.base_dir() / f"{node_id}.lock"
    if lock.exists():
        os.utime(lock, (time.time() - 60, time.time() - 60))
    swept = _node.sweep()
    assert node_id in swept and real_node.id not in swept
    assert _node.leftovers(node_id, folder) == []
    assert real_node.ready() and real_node.leftovers(), "the sweep touched the live node"
    kube_cluster.core.delete_namespaced_pod(f"orphan-{node_id}", "default", grace_period_seconds=0)


_ORPHAN = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from e2e.controlplane import cluster as cpmod
from e2e.node.node import RealNode

class CP:  # the parent's control plane, seen from its folder (CA, admin cert, URL)
    dir = Path(sys.argv[2])
    pki = cpmod.PKI(dir / "pki")
    url = None
    def request(self, *a, **k):
        return cpmod.ControlPlane.request(self, *a, **k)
    def _ssl_context(self):
        return cpmod.ControlPlane._ssl_context(self)
cp = CP()
cp.admin_crt, cp.admin_key = cp.pki.dir / "admin.crt", cp.pki.dir / "admin.key"
import json
cp.url = json.loads((cp.dir / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
node = RealNode(cp).start()
import atexit; atexit.unregister(node.stop)
status, _ = cp.request("POST", "/api/v1/namespaces/default/pods", {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan-" + node.id},
    "spec": {"nodeName": node.name, "hostNetwork": True, "terminationGracePeriodSeconds": 0,
             "containers": [{"name": "main", "image": "localhost/ai4dl/busybox:1",
                             "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}})
assert status == 201, status
deadline = time.time() + 60
while time.time() < deadline:
    s, pod = cp.request("GET", "/api/v1/namespaces/default/pods/orphan-" + node.id)
    if pod.get("status", {}).get("phase") == "Running":
        break
    time.sleep(0.2)
print("up", node.id, node.dir, flush=True)
time.sleep(3600)
"""
