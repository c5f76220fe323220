"""A namespace with many tiny-window PhaseModels cannot delay another namespace's windows
(issue 26 item 4), and a late window is visible.

The operator (a subprocess, its own ServiceAccount, under the chart's admission policy) against
a real kube-apiserver + etcd and the fake Prometheus (e2e/prometheus/fake.py) answering each
range query after ``DELAY`` seconds, so a window's work takes time without burning the test
machine's CPU. One namespace (the flood) creates ``N_FLOOD`` PhaseModels with the smallest
window the CRD allows (4 s: 4 steps of 1 s), each serving one pod; another namespace (the
tenant) one PhaseModel with a 12 s window (due at the same instants as the flood's) and one
pod. The operator runs with
``--min-window-seconds 10`` (so the flood is served every 12 s), 2 window workers (the flood
may hold one) and ``--window-late-seconds 1``.

Without the fair queue the tenant's window would wait behind the flood's (N_FLOOD x DELAY / 2
workers, ~7 s: measured 8.2 s at start-up with a FIFO in place of the fair queue); with it,
it starts within ``BOUND`` seconds of its boundary + settle, and says so (WindowsLate False)
while the flood's windows are late and say why.

FakeKubelet, not the real node: many pods across namespaces, created in a second and fed by a
fake Prometheus; a real node adds seconds per pod and nothing to the scheduling of windows that
is tested.
"""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from e2e.prometheus.fake import FakePrometheus
from e2e_fixtures_k8s import FakeKubelet, create_namespace
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401
                                   wait_for, write_report)

pytestmark = pytest.mark.integration

N_FLOOD = 40           # PhaseModels of the flood namespace (one pod each)
DELAY = 0.3            # seconds the fake Prometheus takes per range query
MIN_WINDOW = 10        # --min-window-seconds: the flood's 4 s windows are served every 12 s
FLOOD_PERIOD = 12
TENANT_WINDOW = 12     # on the flood's period: every tenant window is due with 40 others
# The tenant's windows start at most this long after they are due: half of what the flood's
# queue makes a window wait without the fair queue (N_FLOOD x DELAY / 2 workers = 6 s), so
# that a loaded machine (start-up, a second CPU-bound job: 2.1 s seen) does not fail it while
# a FIFO still would.
BOUND = N_FLOOD * DELAY / 2 / 2
ROWS: list[tuple[str, str, str]] = []


@pytest.fixture(scope="module", autouse=True)
def table(request):
    yield
    write_report(request, "fair shares", "| bad input | wrong writes | signals raised |", ROWS,
                 append=True)


def phasemodel(name: str, window: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "stepSeconds": 1,
                     "windowSeconds": window,
                     "policy": {"mode": "InPlace", "minChange": 0.05, "cooldownWindows": 0}}}


def populate(kube_cluster, fake: FakePrometheus, ns: str, names: list[str], window: int) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_cluster.api_client)
    kubelet = FakeKubelet(kube_cluster.api_client, namespace=ns)
    kubelet.ensure_node()

    def one(name: str) -> None:
        kubelet.create_pod(name, requests={"cpu": "8", "memory": "32Gi"},
                           labels={OPT_IN_LABEL: "true", "app": name},
                           annotations={MODEL_ANNOTATION: name})
        fake.pods[(ns, name, "main")] = "good"
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, phasemodel(name, window))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))


def windows(op: Operator, ns: str) -> dict[str, list[tuple[float, float]]]:
    """{PhaseModel: [(window id, seconds its work started after it was due)]} from the log."""
    out: dict[str, list[tuple[float, float]]] = {}
    text = op.log.read_text() if op.log.exists() else ""
    for name, w, late in re.findall(
            rf"PhaseModel {ns}/(\S+) window ([0-9.]+): .*; started ([0-9.]+) s after due", text):
        out.setdefault(name, []).append((float(w), float(late)))
    return out


def gauge(text: str, name: str, **labels) -> float | None:
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def conditions(kube_cluster, ns: str) -> dict[str, dict[str, dict]]:
    from kubernetes import client

    items = client.CustomObjectsApi(kube_cluster.api_client).list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL)["items"]
    return {pm["metadata"]["name"]: {c["type"]: c for c in
                                     (pm.get("status") or {}).get("conditions") or []}
            for pm in items}


def resized(kube_cluster, ns: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in kube_cluster.core.list_namespaced_event(ns).items:
        if e.reason == "Resized":
            out[e.involved_object.name] = out.get(e.involved_object.name, 0) + (e.count or 1)
    return out


def test_a_flood_of_tiny_windows_cannot_delay_another_namespace(kube_cluster, operator_kubeconfig,
                                                                crd, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    flood, tenant = f"flood-{suffix}", f"tenant-{suffix}"
    for ns in (flood, tenant):
        create_namespace(kube_cluster, ns)
    fake = FakePrometheus().start()
    fake.delay = DELAY
    populate(kube_cluster, fake, flood, [f"pm{i}" for i in range(N_FLOOD)], 4)
    populate(kube_cluster, fake, tenant, ["pm"], TENANT_WINDOW)
    op = Operator(operator_kubeconfig, fake.url, tmp_path / "operator.log", extra_args=(
        "--min-window-seconds", str(MIN_WINDOW), "--window-workers", "2",
        "--window-late-seconds", "1")).start()
    started = time.time()
    depth = 0.0
    try:
        def tenant_windows():
            nonlocal depth
            try:
                depth = max(depth, gauge(op.metrics(), "ai4dl_window_queue_depth") or 0.0)
            except OSError:
                pass          # /metrics not up yet
            got = windows(op, tenant).get("pm", [])
            # and every flood PhaseModel had its turn at least once (its conditions written)
            return got if len(got) >= 3 and len(windows(op, flood)) == N_FLOOD else None
        try:
            mine = wait_for(tenant_windows, 3 * TENANT_WINDOW + 15, interval=0.5,
                            what="3 windows of the tenant's PhaseModel, one of each flood's")
        except AssertionError as err:
            raise AssertionError(f"{err}\n--- operator log:\n{op.tail(30)}") from None
        metrics = op.metrics()
        tenant_conds = wait_for(lambda: (lambda c: c if c.get("WindowsLate") else None)(
            conditions(kube_cluster, tenant)["pm"]), 5, what="tenant conditions")
        flood_conds = conditions(kube_cluster, flood)
    finally:
        op.stop()
        fake.stop()
    # read once the operator stopped: a window's writes come before its log line
    elapsed = time.time() - started
    flood_windows = windows(op, flood)
    tenant_all = windows(op, tenant).get("pm", [])

    # The tenant: every window handled on time, the start-up one (due with the flood's 40)
    # included.
    lateness = [late for _, late in mine]
    assert max(lateness) <= BOUND, mine
    assert all(w % TENANT_WINDOW == 0 for w, _ in mine[1:]), mine
    assert tenant_conds["WindowsLate"]["status"] == "False", tenant_conds["WindowsLate"]
    assert tenant_conds["WindowsLate"]["reason"] == "OnTime"
    assert tenant_conds["WindowThrottled"]["status"] == "False"
    tenant_gauge = gauge(metrics, "ai4dl_window_lateness_seconds", namespace=tenant,
                         phasemodel="pm", stage="started")
    assert tenant_gauge is not None and tenant_gauge <= BOUND

    # The flood: waited for its share, and says so; served every 12 s, not every 4 s.
    assert depth >= N_FLOOD / 2, depth                     # the queue really was full
    late = {n: c["WindowsLate"] for n, c in flood_conds.items()
            if c.get("WindowsLate", {}).get("status") == "True"}
    assert late, {n: c.get("WindowsLate") for n, c in flood_conds.items()}
    some = next(iter(late.values()))
    assert some["reason"] == "WaitedForWorker" and "from this namespace" in some["message"], some
    assert gauge(metrics, "ai4dl_windows_late_total", namespace=flood) >= 1
    throttled = [c.get("WindowThrottled", {}) for c in flood_conds.values()]
    assert all(t.get("status") == "True" and t.get("reason") == "BelowMinimumWindow"
               for t in throttled), throttled
    assert "served every 12 s" in throttled[0]["message"]

    # Zero wrong writes: the flood's windows (after the start-up one) only on the 12 s grid,
    # never more than one per period, and its pods resized only by its own windows.
    handled = sum(len(v) for v in flood_windows.values())
    for name, ws in flood_windows.items():
        assert all(w % FLOOD_PERIOD == 0 for w, _ in ws[1:]), (name, ws)
        assert len(ws) <= elapsed / FLOOD_PERIOD + 2, (name, ws)
    flood_resized = resized(kube_cluster, flood)
    for pod, n in flood_resized.items():
        assert n <= len(flood_windows.get(pod, [])), (pod, n, flood_windows.get(pod))
    tenant_resized = resized(kube_cluster, tenant)
    assert tenant_resized.get("pm", 0) <= len(tenant_all)
    flood_lateness = sorted(late for ws in flood_windows.values() for _, late in ws[1:])
    ROWS.append((
        f"one namespace creates {N_FLOOD} PhaseModels with 4 s windows (the CRD's smallest), "
        f"each window's query taking {DELAY} s; another namespace's PhaseModel (12 s window, due with the flood's)",
        f"0 (flood windows only every {FLOOD_PERIOD} s: {handled} in {elapsed:.0f} s; "
        f"{sum(flood_resized.values())} flood resizes, each by its own window)",
        f"tenant's windows started ≤ {max(lateness):.2f} s after due (bound {BOUND:g} s), "
        f"WindowsLate False; flood: WindowThrottled True on all {N_FLOOD}, WindowsLate True "
        f"(WaitedForWorker) on {len(late)}, median lateness "
        f"{flood_lateness[len(flood_lateness) // 2] if flood_lateness else 0:.1f} s, "
        f"ai4dl_window_queue_depth up to {depth:.0f}"))
