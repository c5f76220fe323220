"""The real-node tier: pods run on a real kubelet v1.35.4 + containerd 1.6 + runc (the
``real_node`` fixture, tests/e2e_fixtures_node.py), so an in-place resize reaches the
container's cgroup files, and Deferred/Infeasible come from the kubelet itself.

Runs with ``AI4DL_REAL_NODE=1`` (``make test`` sets it as root; root, cgroup v1/hybrid;
``bash e2e/node/build.sh`` once, which ``make e2e-deps`` runs); skipped otherwise. Only this tier::

    AI4DL_REAL_NODE=1 PYTHONPATH=$PWD/operator python -m pytest -q tests/test_real_node.py

The real Prometheus scrapes the kubelet's /metrics/cadvisor here (real usage, real cpu
throttling). The operator's tests here feed it from the trace exporter scraped by the real
Prometheus, not from cAdvisor (the busybox pods use next to nothing, and the model's phases
need a DL job's usage); tests/test_real_node_jobs.py runs real training jobs with the operator
reading cAdvisor. FakeKubelet is not used in this module.

The kubelet's answers the operator must handle (a memory decrease below usage refused, a
RestartContainer resize policy, the admission webhook's requests in the cgroups) are in
tests/test_real_node_answers.py.
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

from ai4dl.method import synthetic
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from e2e_fixtures_node import NodePods
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401 (fixtures)
                                   wait_for, write_report)
from test_faults import apiserver_counts, pod_writes, window_lines
# the integration tests' model and trace exporter + Prometheus (module fixtures)
from test_operator_integration import model_doc, stack  # noqa: F401

from e2e.node import node as _node

REPO = Path(__file__).resolve().parent.parent
WINDOW, STEP = 10, 1

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


def test_resize_above_free_allocatable_is_deferred_then_applied(node_pods: NodePods, real_node,
                                                               kube_cluster):
    """A resize that fits the node but not beside another pod: the kubelet answers
    PodResizePending Deferred; once the other pod is gone it applies the resize by itself
    (same container)."""
    cores = int(kube_cluster.core.read_node(real_node.name).status.allocatable["cpu"])
    node_pods.create("hog", cpu=f"{cores * 1000 - 600}m", memory="32Mi")
    pod = node_pods.create("small", cpu="100m", memory="32Mi")
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    node_pods.resize("small", {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})
    cond = wait_for(lambda: node_pods.resize_conditions("small").get("PodResizePending"), 20,
                    interval=0.2, what="PodResizePending")
    assert cond["reason"] == "Deferred", cond
    assert node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 10000
    t0 = time.monotonic()
    node_pods.core.delete_namespaced_pod("hog", node_pods.namespace, grace_period_seconds=0)
    wait_for(lambda: node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 100000, 60,
             interval=0.2, what="the deferred resize applied once the other pod was gone")
    st = node_pods.get("small")["status"]["containerStatuses"][0]
    assert st["restartCount"] == 0 and st["containerID"] == cid
    FIGURES.append(("direct resize", "Deferred, then applied after the other pod left",
                    f"{time.monotonic() - t0:.1f} s"))


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



_FAILING = r"""
import json, os
from pathlib import Path


def test_fails_with_a_pod_running(node_pods):
    node_pods.create("doomed")
    node = node_pods.node
    Path(os.environ["AI4DL_CHILD_OUT"]).write_text(json.dumps(
        {"id": node.id, "dir": str(node.dir), "leftovers": node.leftovers()}))
    assert False, "forced failure with a pod running"
"""


def test_a_failing_test_leaves_nothing(real_node, tmp_path):
    """A pytest session whose real-node test FAILS with a pod running (a child pytest, its own
    control plane and node): the session's teardown still removes every process, mount,
    cgroup, folder and /var/log/containers link of its node (``real_node``: only for the
    tier's skip when it is off)."""
    (tmp_path / "test_child.py").write_text(_FAILING)
    out = tmp_path / "node.json"
    env = {**os.environ, "AI4DL_REAL_NODE": "1", "AI4DL_CHILD_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "tests"),
                                          os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "conftest", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 1 and "forced failure with a pod running" in run.stdout, \
        run.stdout[-3000:] + run.stderr[-2000:]
    child = json.loads(out.read_text())
    assert child["leftovers"], "the child's node owned nothing while its pod ran?"
    left = _node.leftovers(child["id"], Path(child["dir"]))
    assert left == [], left
    FIGURES.append(("teardown", "leftovers after a session whose test failed with a pod "
                    "running", f"{len(left)} (had {len(child['leftovers'])} while it ran)"))


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


# ----------------------------------------------------------------------------- the operator
@pytest.fixture(scope="module")
def jobs():
    cfg = synthetic.SyntheticConfig(n_features=2, epochs=(10, 12))
    traces, truth = synthetic.generate(4, seed=33, config=cfg)
    return list(traces), truth


@pytest.fixture(scope="module")
def operator(stack, operator_kubeconfig, crd, tmp_path_factory):  # noqa: F811
    """One operator (its own ServiceAccount, the chart's RBAC and admission policy) per module."""
    _, prom = stack
    op = Operator(operator_kubeconfig, prom.url,
                  tmp_path_factory.mktemp("operator") / "operator.log").start()
    yield op
    op.stop()


def opted_in_pod(node_pods: NodePods, exporter, jobs, name: str, i: int, *, cpu: str,
                 memory: str) -> dict:
    """A Guaranteed pod opted in to PhaseModel ``pm``, its usage played by the exporter from
    inside a synthetic job's first training epoch."""
    traces, truth = jobs
    pod = node_pods.create(name, cpu=cpu, memory=memory,
                           labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: "pm"})
    ex = traces[i % len(traces)]
    offset = float(np.flatnonzero(truth[i % len(traces)] == 2)[0]) * ex.step
    exporter.add_pod((node_pods.namespace, name, "main"), ex, offset=offset)
    return pod


def cgroup_matches_spec(node_pods: NodePods, pod: dict) -> bool:
    """The container's cgroup files are what its spec's limits say (cpu quota at the default
    100 ms period; the memory limit rounded down to a page by the kernel)."""
    from ai4dl.quantity import parse_quantity

    lim = pod["spec"]["containers"][0]["resources"]["limits"]
    quota = node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us")
    mem = node_pods.cgroup_value(pod, "memory", "memory.limit_in_bytes")
    return (quota == round(parse_quantity(lim["cpu"]) * 100000)
            and 0 <= parse_quantity(lim["memory"]) - mem < 4096)


def test_operator_inplace_resize_reaches_cgroups(kube_cluster, k8s_namespace, node_pods, stack,
                                                 jobs, model_doc, operator):
    """The operator (InPlace mode, its own ServiceAccount) resizes a running Guaranteed pod on
    the real node: the kubelet applies it, the container's cgroup files take the new limits,
    the container is not restarted and the pod stays Guaranteed (limits moved with requests).
    Usage comes from the trace exporter through the real Prometheus (see the module's
    docstring); the ceilings keep the target inside this 2-core node."""
    from test_operator_integration import make_phasemodel

    exporter, _ = stack
    pod = opted_in_pod(node_pods, exporter, jobs, "a", 0, cpu="500m", memory="512Mi")
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    before = pod["spec"]["containers"][0]["resources"]
    make_phasemodel(kube_cluster, k8s_namespace, "pm", model_doc,
                    resources={"cpu": {"ceiling": "1500m"}, "memory": {"ceiling": "2Gi"}})
    t0 = time.monotonic()
    try:
        resized = wait_for(lambda: (lambda p: p if p["spec"]["containers"][0]["resources"]
                                    != before else None)(node_pods.get("a")),
                           2 * WINDOW + 15, what="the operator's resize of pod a")
    except AssertionError:
        print(operator.tail())
        raise
    t_resize = time.monotonic() - t0
    res = resized["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"], res          # Guaranteed: limits moved too
    wait_for(lambda: cgroup_matches_spec(node_pods, node_pods.get("a")), 30, interval=0.2,
             what="the cgroup files to take the operator's resize")
    t_cgroup = time.monotonic() - t0
    after = wait_for(lambda: (lambda p: p if not node_pods.resize_conditions("a") and
                              (p["status"]["containerStatuses"][0].get("resources") or {})
                              .get("limits") == res["limits"] else None)(node_pods.get("a")),
                     15, interval=0.2, what="the kubelet to report the resize done")
    st = after["status"]["containerStatuses"][0]
    assert st["restartCount"] == 0 and st["containerID"] == cid
    assert after["status"]["qosClass"] == "Guaranteed"
    FIGURES.extend([
        ("operator InPlace", "requests/limits before -> after",
         f"{before['limits']} -> {res['limits']}"),
        ("operator InPlace", "seconds from PhaseModel created to resize / to cgroup files",
         f"{t_resize:.1f} s / {t_cgroup:.1f} s"),
    ])


def test_operator_waits_on_a_real_infeasible_resize(kube_cluster, k8s_namespace, node_pods,
                                                    stack, jobs, model_doc, operator):
    """A cpu floor above the node's allocatable: the operator's resize gets a real
    PodResizePending Infeasible from the kubelet (cgroup unchanged, no restart; the kubelet's
    own ResizeInfeasible Warning Event); the operator then waits: the pod is planned each
    window but no pods/resize PATCH is sent again for two windows, each window posts a Warning
    ResizeWaiting with the kubelet's message (even though its plan is the pending target
    itself), and the pod stays Guaranteed."""
    from test_operator_integration import events, make_phasemodel

    exporter, _ = stack
    pod = opted_in_pod(node_pods, exporter, jobs, "inf", 1, cpu="500m", memory="512Mi")
    quota0 = node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us")
    cores = int(kube_cluster.core.read_node(node_pods.node.name).status.allocatable["cpu"])
    make_phasemodel(kube_cluster, k8s_namespace, "pm", model_doc, maxIncrease=None,
                    resources={"cpu": {"floor": f"{cores + 1}"}, "memory": {"ceiling": "1Gi"}})
    try:
        cond = wait_for(lambda: node_pods.resize_conditions("inf").get("PodResizePending"),
                        2 * WINDOW + 15, interval=0.25, what="the kubelet's PodResizePending")
    except AssertionError:
        print(operator.tail())
        raise
    assert cond["reason"] == "Infeasible", cond
    c0 = apiserver_counts(kube_cluster)
    t0 = time.time()

    def later_windows():
        return {w: line for w, line in window_lines(operator, k8s_namespace).items()
                if w > t0 - 1}
    try:
        wait_for(lambda: len(later_windows()) >= 2, 3 * WINDOW + 5, interval=0.5,
                 what="two windows of the operator after the Infeasible")
    except AssertionError:
        print(operator.tail(60))
        raise
    windows = later_windows()
    writes = pod_writes(c0, apiserver_counts(kube_cluster))
    assert writes["PATCH pods/resize"] == 0, (writes, windows)
    assert all(line.startswith("1 pods, 0 resized") for line in windows.values()), windows
    # the user hears of it from the kubelet and from the operator, in the kubelet's words
    kubelet_says = [e for e in events(kube_cluster, k8s_namespace, "ResizeInfeasible")
                    if e.involved_object.name == "inf"]
    assert kubelet_says and kubelet_says[0].type == "Warning", kubelet_says
    waiting = [e for e in events(kube_cluster, k8s_namespace, "ResizeWaiting")
               if e.involved_object.name == "inf"]
    assert waiting and all(e.type == "Warning" and "Infeasible" in e.message
                           for e in waiting), [(e.type, e.message) for e in waiting]
    assert cond.get("message", "") in waiting[0].message, (cond, waiting[0].message)
    now = node_pods.get("inf")
    st = now["status"]["containerStatuses"][0]
    assert node_pods.cgroup_value(now, "cpu", "cpu.cfs_quota_us") == quota0
    assert st["restartCount"] == 0 and now["status"]["qosClass"] == "Guaranteed"
    assert node_pods.resize_conditions("inf")["PodResizePending"]["reason"] == "Infeasible"
    FIGURES.extend([
        ("operator Infeasible", "kubelet's answer to a resize above allocatable",
         f"{cond['reason']}: {cond.get('message', '')}"),
        ("operator Infeasible", f"pods/resize PATCHes in the {len(windows)} windows after it",
         f"{writes['PATCH pods/resize']}"),
    ])


# ----------------------------------------------------------------------------- cAdvisor
def test_prometheus_scrapes_the_kubelets_cadvisor(node_pods: NodePods, real_node, kube_cluster,
                                                  prometheus_binary, tmp_path):
    """The real Prometheus scrapes the kubelet's /metrics/cadvisor (HTTPS, a client
    certificate of the harness CA): a busy pod's cpu usage comes back with its namespace, pod
    and container labels (containerd's, through --containerd), and its cpu limit really
    throttles it (cAdvisor's throttled periods grow)."""
    from e2e.prometheus.server import PrometheusServer

    pod = node_pods.create("busy", cpu="100m", memory="32Mi",
                           command=["sh", "-c", "trap 'exit 0' TERM; while :; do :; done"])
    crt, key = kube_cluster.control_plane.pki.client_cert("prometheus-scraper", "ai4dl-prometheus")
    prom = PrometheusServer([], workdir=tmp_path / "prometheus", scrape_interval="2s",
                            binary=prometheus_binary)
    prom.config_path.write_text(json.dumps({
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s"},
        "scrape_configs": [{
            "job_name": "kubelet-cadvisor", "scheme": "https", "metrics_path": "/metrics/cadvisor",
            "honor_labels": True,
            # the kubelet serves a self-signed certificate; the client certificate is what counts
            "tls_config": {"insecure_skip_verify": True, "cert_file": str(crt),
                           "key_file": str(key)},
            "static_configs": [{"targets": [f"127.0.0.1:{real_node.kubelet_port}"]}]}]}))
    prom.start()
    try:
        sel = f'namespace="{node_pods.namespace}",pod="busy",container="main"'
        t0 = time.monotonic()
        usage = wait_for(lambda: prom.query(f"container_cpu_usage_seconds_total{{{sel}}}"), 60,
                         interval=1, what="the busy pod's cpu usage scraped from the kubelet")
        seen = time.monotonic() - t0
        assert float(usage[0]["value"][1]) > 0
        throttled = wait_for(lambda: [r for r in prom.query(
            f"container_cpu_cfs_throttled_periods_total{{{sel}}}") if float(r["value"][1]) > 0],
            60, interval=1, what="throttled periods of a pod busy above its 100m limit")
        up = prom.query('up{job="kubelet-cadvisor"}')
        assert up and up[0]["value"][1] == "1", up
    finally:
        prom.cleanup()
    assert node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 10000
    FIGURES.extend([
        ("cAdvisor", "seconds from pod Running to its cpu usage in Prometheus", f"{seen:.1f} s"),
        ("cAdvisor", "throttled periods of a busy 100m pod (first seen)",
         f"{float(throttled[0]['value'][1]):.0f}"),
    ])
