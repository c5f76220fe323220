"""The real-node tier, part two: the kubelet's answers the operator must handle, on a real
kubelet v1.35.4 + containerd 1.6 (the ``real_node`` fixture, tests/e2e_fixtures_node.py; see
tests/test_real_node.py for the tier itself and how to run it)::

    AI4DL_REAL_NODE=1 PYTHONPATH=$PWD/operator python -m pytest -q tests/test_real_node_answers.py

* a memory decrease below the container's usage: the kubelet refuses it (PodResizeInProgress,
  reason Error); the operator takes it back once, with an Event and a metric, and does not ask
  for that level again during its back-off;
* a ``resizePolicy`` RestartContainer for memory: the kubelet restarts the container on a
  memory resize, so the operator leaves memory alone (cpu, NotRequired, is resized in place);
* the admission webhook's requests are what the container gets (cgroup files, the kubelet's
  allocation).

As in tests/test_real_node.py the operator's usage comes from the trace exporter through the
real Prometheus (busybox pods use nothing a model can phase); FakeKubelet is not used here.
"""

from __future__ import annotations

import re
import time

import pytest

from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
from ai4dl.quantity import parse_quantity
from e2e_fixtures_node import NodePods
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401 (fixtures)
                                   wait_for, write_report)
from test_faults import apiserver_counts, pod_writes, window_lines
from test_operator_integration import events, make_phasemodel, model_doc, stack  # noqa: F401
from test_real_node import WINDOW, jobs, operator  # noqa: F401 (jobs, operator: fixtures)
# the webhook's module fixtures: the chart's configuration + an operator serving it, a model
from test_admission_webhook import doc, webhook  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

FIGURES: list[tuple[str, str, str]] = []
MiB = 2 ** 20


@pytest.fixture(scope="module", autouse=True)
def _report(request, real_node):
    yield
    write_report(request, "real node: the kubelet's answers", "| case | measure | value |",
                 FIGURES, append=True)


def memory_of(pod: dict) -> float:
    return parse_quantity(pod["spec"]["containers"][0]["resources"]["limits"]["memory"])


def metric(op: Operator, name: str, namespace: str) -> float:
    """The operator's counter ``name`` for ``namespace``, summed over its other labels (0 when
    absent)."""
    return sum(float(v) for v in re.findall(
        rf'^{name}{{[^}}]*namespace="{namespace}"[^}}]*}} (\S+)$', op.metrics(), re.M))


# ----------------------------------------------------------------------------- 1. Error
#: 48 MiB in /dev/shm (the sandbox's tmpfs, 64 MiB): shmem is charged to the writer's memory
#: cgroup and cannot be reclaimed without swap, so a limit below it cannot be set.
HOLD_48MI = ["sh", "-c", "dd if=/dev/zero of=/dev/shm/hold bs=1M count=48 2>/dev/null; "
                         "trap 'exit 0' TERM; while true; do sleep 1; done"]


def test_a_refused_memory_decrease_is_taken_back_once(kube_cluster, k8s_namespace, node_pods,
                                                      stack, jobs, model_doc, operator):
    """A pod holding 48 MiB that cannot be reclaimed; a PhaseModel whose memory ceiling (16Mi)
    is below it (its cpu held at 500m): the operator's decrease is refused by the kubelet
    (PodResizeInProgress, reason Error, "attempting to set ... memory limit below current
    usage"; the kubelet retries it by itself, a ResizeError Event each time) and the cgroup
    keeps its limit. The operator then, in its next window, sets the spec back to what the container
    has (left in place, the kubelet would apply it at the first dip in usage and the job would
    be OOM-killed when it rises again), posts one Warning ResizeRefused Event naming the pod
    and the kubelet's message, counts ai4dl_resizes_refused_total, and in the window after
    sends no pods/resize at all (the refused level is held for a back-off of two windows;
    tests/test_plan.py proves the retry after it and the doubling). The container is never
    restarted and the pod stays Guaranteed."""
    exporter, _ = stack
    ns = k8s_namespace
    # its series first: the operator's first full window comes a pod start sooner
    opted_in_pod_usage(node_pods, exporter, jobs, "mem")
    pod = node_pods.create("mem", cpu="500m", memory="128Mi", command=HOLD_48MI,
                           labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: "pm"})
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    # what the kernel charges to the container: the held tmpfs pages
    used = wait_for(lambda: (lambda u: u if u >= 48 * MiB else None)(
        node_pods.cgroup_value(pod, "memory", "memory.usage_in_bytes")), 15, interval=0.2,
        what="48 MiB charged to the container's memory cgroup")
    make_phasemodel(kube_cluster, ns, "pm", model_doc, maxDecrease=0.9,
                    # cpu held where it is: only memory moves
                    resources={"cpu": {"floor": "500m", "ceiling": "500m"},
                               "memory": {"ceiling": "16Mi"}})
    t0 = time.monotonic()
    try:
        lowered = wait_for(lambda: (lambda p: p if memory_of(p) < 48 * MiB else None)(
            node_pods.get("mem")), 2 * WINDOW + 15, interval=0.2,
            what="the operator's memory decrease")
        t_lowered = time.monotonic() - t0
        cond = wait_for(lambda: (lambda c: c if c and c.get("reason") == "Error" else None)(
            node_pods.resize_conditions("mem").get("PodResizeInProgress")), 15, interval=0.2,
            what="the kubelet's PodResizeInProgress Error")
    except AssertionError:
        print(operator.tail(60))
        raise
    asked = memory_of(lowered)
    assert node_pods.cgroup_value(pod, "memory", "memory.limit_in_bytes") == 128 * MiB
    try:
        back = wait_for(lambda: (lambda p: p if memory_of(p) == 128 * MiB else None)(
            node_pods.get("mem")), WINDOW + 10, interval=0.2,
            what="the operator setting the refused decrease back")
        t_back = time.monotonic() - t0
        wait_for(lambda: not node_pods.resize_conditions("mem"), 15, interval=0.2,
                 what="the kubelet's condition to clear once the spec is what it has")
    except AssertionError:
        print(operator.tail(60))
        raise
    res = back["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"], res
    refused = [e for e in events(kube_cluster, ns, "ResizeRefused")
               if e.involved_object.name == "mem"]
    assert len(refused) == 1 and refused[0].type == "Warning", refused
    # the kubelet's words (it retries, and the usage it prints, the pod's and/or the
    # container's, differs from one try to the next: the limit refused does not)
    said = re.search(r"memory limit \(\d+\) below current usage", cond["message"])
    assert said, cond
    assert f"pod {ns}/mem" in refused[0].message and said.group(0) in refused[0].message, \
        (refused[0].message, cond)
    assert metric(operator, "ai4dl_resizes_refused_total", ns) == 1
    # the next window: the refused level is held, nothing is sent
    time.sleep(0.5)                     # the take-back's window logs after its writes
    c0, seen = apiserver_counts(kube_cluster), set(window_lines(operator, ns))
    try:
        wait_for(lambda: set(window_lines(operator, ns)) - seen, WINDOW + 10,
                 interval=0.5, what="a window after the take-back")
    except AssertionError:
        print(operator.tail(60))
        raise
    time.sleep(0.5)
    writes = pod_writes(c0, apiserver_counts(kube_cluster))
    assert writes["PATCH pods/resize"] == 0, "\n".join(map(str, [writes, *[
        (e.reason, e.message) for e in events(kube_cluster, ns)
        if e.involved_object.name == "mem"], operator.tail(20)]))
    now = node_pods.get("mem")
    st = now["status"]["containerStatuses"][0]
    assert memory_of(now) == 128 * MiB and not node_pods.resize_conditions("mem")
    assert st["restartCount"] == 0 and st["containerID"] == cid
    assert now["status"]["qosClass"] == "Guaranteed"
    assert node_pods.cgroup_value(now, "memory", "memory.limit_in_bytes") == 128 * MiB
    assert len([e for e in events(kube_cluster, ns, "ResizeRefused")
                if e.involved_object.name == "mem"]) == 1
    assert metric(operator, "ai4dl_resizes_refused_total", ns) == 1
    FIGURES.extend([
        ("memory below usage", "charged to the container / the operator's decrease",
         f"{used / MiB:.0f} MiB / {asked / MiB:.0f} MiB"),
        ("memory below usage", "the kubelet's answer", f"{cond['reason']}: {cond['message']}"),
        ("memory below usage", "seconds from PhaseModel to decrease / to take-back",
         f"{t_lowered:.1f} s / {t_back:.1f} s"),
        ("memory below usage", "pods/resize PATCHes in the window after the take-back",
         f"{writes['PATCH pods/resize']}"),
    ])


def opted_in_pod_usage(node_pods: NodePods, exporter, jobs, name: str, i: int = 2) -> None:
    """The exporter plays the pod's usage (a synthetic job's first training epoch), as
    :func:`test_real_node.opted_in_pod` does for the pods it creates."""
    import numpy as np

    traces, truth = jobs
    ex = traces[i % len(traces)]
    offset = float(np.flatnonzero(truth[i % len(traces)] == 2)[0]) * ex.step
    exporter.add_pod((node_pods.namespace, name, "main"), ex, offset=offset)


# ----------------------------------------------------------------------------- 2. restart
RESTART_MEMORY = [{"resourceName": "memory", "restartPolicy": "RestartContainer"},
                  {"resourceName": "cpu", "restartPolicy": "NotRequired"}]


def test_restart_container_policy_is_respected(kube_cluster, k8s_namespace, node_pods, stack,
                                               jobs, model_doc, operator):
    """A container whose resizePolicy says RestartContainer for memory (NotRequired for cpu).

    The choice: the operator does not resize a resource whose resizePolicy is
    RestartContainer. The kubelet would restart the container to apply it, and for a training
    job that is its progress since the last checkpoint, once per phase change (a restarted job
    starts again in its first phase, which asks for other memory: a loop of restarts). The
    author said a change needs a restart; a platform engineer expects an operator sold as
    "in place" never to cause one. So: cpu is resized in place (same container, restartCount
    0, the cgroup quota moves), memory stays as written, and the owner gets one Warning
    ResizeRestartsContainer naming the container and the recommended level (to set
    NotRequired, or size it themselves).

    The kubelet's side, on the real node: when the pod's owner resizes memory themselves, the
    container is restarted (restartCount 1, a new container) with the new limit in its cgroup;
    the operator does not fight it: in its next window it sends no memory resize, posts no
    ResizeFailed and counts no error."""
    exporter, _ = stack
    ns = k8s_namespace
    opted_in_pod_usage(node_pods, exporter, jobs, "rc", i=0)
    pod = node_pods.create("rc", cpu="500m", memory="64Mi", resize_policy=RESTART_MEMORY,
                           labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: "pm"})
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    make_phasemodel(kube_cluster, ns, "pm", model_doc,
                    resources={"cpu": {"ceiling": "1500m"}, "memory": {"ceiling": "256Mi"}})
    t0 = time.monotonic()
    try:
        resized = wait_for(lambda: (lambda p: p if p["spec"]["containers"][0]["resources"]
                                    ["limits"]["cpu"] != "500m" else None)(node_pods.get("rc")),
                           2 * WINDOW + 15, interval=0.2, what="the operator's cpu resize")
    except AssertionError:
        print(operator.tail(60))
        raise
    t_cpu = time.monotonic() - t0
    res = resized["spec"]["containers"][0]["resources"]
    assert res["limits"]["memory"] == res["requests"]["memory"] == "64Mi", res
    # the memory recommendation may come a window after the cpu resize: a container that
    # started during a window grew from nothing in it, and the safety layer lowers no memory
    # after a window of growth (hold_memory_while_rising)
    try:
        recommended = wait_for(
            lambda: [e for e in events(kube_cluster, ns, "ResizeRestartsContainer")
                     if e.involved_object.name == "rc"], WINDOW + 15, interval=0.5,
            what="the ResizeRestartsContainer Warning")
    except AssertionError:
        print(operator.tail(60))
        raise
    res = node_pods.get("rc")["spec"]["containers"][0]["resources"]
    assert res["limits"]["memory"] == res["requests"]["memory"] == "64Mi", res
    assert len(recommended) == 1 and recommended[0].type == "Warning", recommended
    assert "RestartContainer" in recommended[0].message and "main" in recommended[0].message
    cpu = parse_quantity(res["limits"]["cpu"])
    wait_for(lambda: node_pods.cgroup_value(node_pods.get("rc"), "cpu", "cpu.cfs_quota_us")
             == round(cpu * 100000), 30, interval=0.2, what="the cpu resize in the cgroup")
    st = node_pods.get("rc")["status"]["containerStatuses"][0]
    assert st["restartCount"] == 0 and st["containerID"] == cid      # in place
    assert node_pods.cgroup_value(pod, "memory", "memory.limit_in_bytes") == 64 * MiB

    # the owner resizes memory: the kubelet restarts the container to apply it
    t1 = time.monotonic()
    node_pods.resize("rc", {"requests": {"memory": "96Mi"}, "limits": {"memory": "96Mi"}})
    after = wait_for(lambda: (lambda p: p if p["status"]["containerStatuses"][0]
                              ["restartCount"] == 1 and p["status"]["containerStatuses"][0]
                              .get("state", {}).get("running") else None)(node_pods.get("rc")),
                     30, interval=0.2, what="the kubelet's restart for the memory resize")
    t_restart = time.monotonic() - t1
    assert after["status"]["containerStatuses"][0]["containerID"] != cid
    wait_for(lambda: node_pods.cgroup_value(node_pods.get("rc"), "memory",
                                            "memory.limit_in_bytes") == 96 * MiB, 15,
             interval=0.2, what="the new container's memory limit")
    errors0 = metric(operator, "ai4dl_errors_total", ns)
    time.sleep(0.5)
    seen = set(window_lines(operator, ns))
    try:
        wait_for(lambda: set(window_lines(operator, ns)) - seen, WINDOW + 10, interval=0.5,
                 what="a window after the restart")
    except AssertionError:
        print(operator.tail(60))
        raise
    time.sleep(0.5)
    now = node_pods.get("rc")
    res = now["spec"]["containers"][0]["resources"]
    assert res["limits"]["memory"] == res["requests"]["memory"] == "96Mi", res
    assert now["status"]["containerStatuses"][0]["restartCount"] == 1
    assert not [e for e in events(kube_cluster, ns, "ResizeFailed")]
    assert metric(operator, "ai4dl_errors_total", ns) == errors0 == 0
    assert len([e for e in events(kube_cluster, ns, "ResizeRestartsContainer")]) == 1
    assert now["status"]["qosClass"] == "Guaranteed"
    FIGURES.extend([
        ("RestartContainer memory", "the operator's resize (seconds from PhaseModel)",
         f"cpu 500m -> {res['limits']['cpu']} in place ({t_cpu:.1f} s); memory left at 64Mi"),
        ("RestartContainer memory", "the owner's memory resize: restartCount, seconds",
         f"1, {t_restart:.1f} s"),
    ])


# ----------------------------------------------------------------------------- 3. admission
def test_the_webhooks_requests_are_what_the_container_gets(kube_cluster, k8s_namespace,
                                                           node_pods, webhook, doc):
    """A Burstable pod (1 core / 256Mi asked, limits 1500m / 512Mi) created through the
    operator's admission webhook (the chart's configuration, registered by URL with the
    harness API server: tests/test_admission_webhook.py) runs on the real node with the
    requests admission set (the model's first-window level, clamped to the PhaseModel's
    ceilings 700m / 64Mi): the kubelet allocates them (allocatedResources) and the container's
    cgroup has them: cpu.shares from the cpu request (cgroup v1 has no file for a memory
    request: its memory limit stays the author's). Mode Initial: no window resizes it after."""
    from test_admission_webhook import make_pm, names, spec_of, wait_admitted

    ns = k8s_namespace
    make_pm(kube_cluster, ns, "pm", spec_of(names(doc), {
        "mode": "Initial", "resources": {"cpu": {"ceiling": "700m"},
                                         "memory": {"ceiling": "64Mi"}}}, doc))
    wait_admitted(kube_cluster, ns)
    cold = {r["resource"]: r["coldStart"] for r in doc["policyTables"][0]["resources"]}
    want = {"cpu": min(cold["cpu"], 0.7), "memory": min(cold["memory"], 64 * MiB)}
    manifest = node_pods.manifest("adm", cpu="1", memory="256Mi", guaranteed=False,
                                  labels={OPT_IN_LABEL: "true", "app": "train"},
                                  annotations={MODEL_ANNOTATION: "pm"})
    manifest["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1500m",
                                                                "memory": "512Mi"}
    kube_cluster.core.create_namespaced_pod(ns, manifest)
    pod = node_pods.wait_running("adm")
    req = pod["spec"]["containers"][0]["resources"]["requests"]
    got = {r: parse_quantity(q) for r, q in req.items()}
    assert got == pytest.approx(want, rel=1e-3), (req, pod["metadata"]["annotations"])
    assert got["cpu"] < 1 and got["memory"] < 256 * MiB        # admission changed them
    st = pod["status"]["containerStatuses"][0]
    allocated = {r: parse_quantity(q) for r, q in st["allocatedResources"].items()}
    assert allocated == got, st
    assert pod["status"]["qosClass"] == "Burstable"
    shares = node_pods.cgroup_value(pod, "cpu", "cpu.shares")
    assert shares == int(got["cpu"] * 1000) * 1024 // 1000, shares
    assert node_pods.cgroup_value(pod, "cpu", "cpu.cfs_quota_us") == 150000
    assert node_pods.cgroup_value(pod, "memory", "memory.limit_in_bytes") == 512 * MiB
    FIGURES.append(("admission webhook", "requests set at creation / in the container's cgroup",
                    f"{req['cpu']} / {req['memory']}; cpu.shares {shares}"))
