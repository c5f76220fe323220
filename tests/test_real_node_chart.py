"""The chart on the real node: the operator runs as a pod, from the image built here without a
Docker engine or a registry (``e2e/node/operator_image.sh``: the Dockerfile's ``operator``
target, buildah, a local Debian root), installed by ``helm install charts/ai4dl-operator`` with
the README quick start's values (tests/test_readme_quickstart.py), and resizes a pod beside it
in place; then the rest of the quick start (steps 3-6) runs from the README's own text, from
`kubectl apply -f deploy/examples/job.yaml` and `ai4dl train` to a Resized Event
(test_the_readme_quick_start_from_helm_install_to_a_resized_pod).

Runs with ``AI4DL_REAL_NODE=1`` like tests/test_real_node.py (root; ``make e2e-deps`` builds
the image once: about 2.5 min cold, then a 0.1 s check). An image that cannot be built skips
the module with the reason, or fails it under ``CI`` (as the ``real_node`` fixture does)::

    AI4DL_REAL_NODE=1 PYTHONPATH=$PWD/operator python -m pytest -q tests/test_real_node_chart.py

What this harness lacks, and what the test does in its place (the operator, its image, the
chart's Deployment, ServiceAccount, RBAC, admission policy and Secret are all real):

* no kube-controller-manager or scheduler: the test creates the Deployment's pod from its
  template, bound to the node (what the ReplicaSet controller and the scheduler would do), and
  the ``kube-root-ca.crt`` ConfigMap of the namespace (the root-ca-cert publisher's);
* no ServiceAccount admission plugin (off: nothing makes the ``default`` ServiceAccounts it
  requires): the test adds the ``kube-api-access`` projected volume it would add; the kubelet
  then requests the chart's ServiceAccount's token (TokenRequest) as on any cluster;
* no Job controller either: the quick start's Job is applied as written and its pods are
  created from its stored template, as the Job controller would (``pods_of_the_job``); the
  namespace, image, sizes and windows the harness forces are in ``example_on_this_node``;
* no kube-proxy and no Service endpoints: the pod runs with the chart's ``operator.hostNetwork``
  and ``operator.env`` pointing ``KUBERNETES_SERVICE_HOST`` at the API server on 127.0.0.1;
  for the same reason the chart's webhook is off (the API server would call its Service's
  ClusterIP, which nothing routes; with failurePolicy Ignore that would pass unseen): the
  webhook is proven by tests/test_admission_webhook.py.

Usage comes from the trace exporter through the real Prometheus, as in tests/test_real_node.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml
from kubernetes import client

from ai4dl.crd import GROUP, PLURAL, VERSION
from ai4dl.crd_spec import default_features
from ai4dl.quantity import parse_quantity
from e2e_fixtures_k8s import create_namespace
from e2e_fixtures_node import BUSYBOX_IMAGE, SLEEP_FOREVER, NodePods, _unavailable
from e2e_fixtures_operator import crd, free_port, wait_for, write_report  # noqa: F401 (fixtures)
from test_helm import CHART, helm, helm_env, kubectl, run  # noqa: F401 (fixtures)
from test_operator_integration import STEP, make_phasemodel, model_doc, read_pm  # noqa: F401
from test_operator_integration import stack  # noqa: F401 (fixture)
from test_readme_quickstart import command, helm_install_sets
from test_real_node import cgroup_matches_spec, jobs, opted_in_pod  # noqa: F401

from e2e.controlplane import cluster as _cp

REPO = Path(__file__).resolve().parent.parent
IMAGE_SCRIPT = REPO / "e2e" / "node" / "operator_image.sh"
WINDOW = 10
#: The quick start's job runs here at this fraction of its size (example_on_this_node)
EXAMPLE_SCALE = 16
#: Samples of each of the job's pods in Prometheus before step 4's `ai4dl train`
QUICKSTART_HISTORY = 3 * WINDOW
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
NONROOT = 65532

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

FIGURES: list[tuple[str, str, str]] = []


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    if FIGURES:
        write_report(request, "operator pod on the real node (chart)",
                     "| case | measure | value |", FIGURES, append=True)


def image_dir() -> Path:
    return Path(os.environ.get("AI4DL_OPERATOR_IMAGE_DIR") or _cp.cache_dir() / "operator-image")


@pytest.fixture(scope="module")
def operator_image(real_node) -> str:
    """The operator's image, built (or found cached) by operator_image.sh and imported into the
    node's containerd; its name."""
    log = _cp.cache_dir() / "operator-image-build.log"
    t0 = time.monotonic()
    try:
        with open(log, "wb") as out:
            r = subprocess.run(["bash", str(IMAGE_SCRIPT)], stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"cannot build the operator image ({IMAGE_SCRIPT}): {exc}")
    if r.returncode != 0:
        last = (log.read_text(errors="replace").strip().splitlines() or ["?"])[-1]
        _unavailable(f"cannot build the operator image ({IMAGE_SCRIPT} exit {r.returncode}): "
                     f"{last} (log {log})")
    built = time.monotonic() - t0
    archive = image_dir() / "image.tar"
    image = (image_dir() / "IMAGE").read_text().strip()
    imported = real_node.import_image(archive)   # stays in the node, torn down with it
    FIGURES.extend([
        ("image", "operator_image.sh (cached unless the sources changed)", f"{built:.1f} s"),
        ("image", "archive size / ctr import", f"{archive.stat().st_size / 2**20:.0f} MiB / "
                                               f"{imported:.1f} s"),
    ])
    return image


def kube_api_access(name: str) -> tuple[dict, dict]:
    """The volume and mount the ServiceAccount admission plugin adds to a pod (its token
    requested by the kubelet, the cluster's CA, the namespace)."""
    volume = {"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt",
                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
    return volume, {"name": name, "mountPath": SA_MOUNT, "readOnly": True}


def pod_from_deployment(dep: dict, node: str) -> dict:
    """The pod a ReplicaSet would make from ``dep``'s template, bound to ``node`` as the
    scheduler would, with the ServiceAccount admission plugin's token volume."""
    tmpl = dep["spec"]["template"]
    spec = json.loads(json.dumps(tmpl["spec"]))
    volume, mount = kube_api_access(f"kube-api-access-{uuid.uuid4().hex[:5]}")
    spec["volumes"] = [*spec.get("volumes", []), volume]
    for c in spec["containers"]:
        c["volumeMounts"] = [*c.get("volumeMounts", []), mount]
    spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{dep['metadata']['name']}-{uuid.uuid4().hex[:5]}",
                         "namespace": dep["metadata"]["namespace"],
                         "labels": tmpl["metadata"].get("labels", {}),
                         "annotations": tmpl["metadata"].get("annotations", {})},
            "spec": spec}


class Release:
    """The chart installed in ``namespace``, serving ``workloads``; its operator pod."""

    def __init__(self, kube_cluster, node, namespace, workloads, full, metrics_port):
        self.kube_cluster, self.node = kube_cluster, node
        self.namespace, self.workloads, self.full = namespace, workloads, full
        self.metrics_port = metrics_port
        self.pod_name = ""
        self.pods = NodePods(kube_cluster, node, namespace)

    def pod(self) -> dict:
        return self.pods.get(self.pod_name)

    def log_files(self) -> list[Path]:
        """The kubelet's files of the operator container's output, one per start (read here:
        the API server's log proxy cannot resolve this node's name)."""
        return sorted((self.node.dir / "pod-logs").glob(
            f"{self.namespace}_{self.pod_name}_*/operator/*.log"))

    def log(self) -> str:
        return "".join(f.read_text(errors="replace") for f in self.log_files())

    def why_not_ready(self) -> str:
        """The pod's status and its Events (for a failure message)."""
        events = self.kube_cluster.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={self.pod_name}").items
        status = self.pod().get("status", {})
        logs = "\n".join(f"{f.name}: ...{f.read_text(errors='replace')[-1500:]}"
                         for f in self.log_files())
        return (f"pod status: {json.dumps(status.get('containerStatuses') or status)[:1500]}\n"
                "events:\n" + "\n".join(f"  {e.reason}: {e.message}" for e in events[-10:])
                + f"\ncontainer logs:\n{logs}")

    def main_pid(self) -> int:
        """The operator's process on this machine (PID 1 of the container)."""
        procs = self.pods.cgroup(self.pod(), "cpu", container="operator") / "cgroup.procs"
        return min(int(p) for p in procs.read_text().split())


@pytest.fixture(scope="module")
def release(real_node, operator_image, kube_cluster, crd, stack, helm, helm_env):  # noqa: F811
    """``helm install`` of the chart with the image built here; the operator's pod on the node."""
    _, prom = stack
    core = kube_cluster.core
    ns = create_namespace(kube_cluster, f"ai4dl-chart-{uuid.uuid4().hex[:6]}")
    work = create_namespace(kube_cluster, f"chart-work-{uuid.uuid4().hex[:6]}")
    name, full = "node", "node-ai4dl-operator"
    repo, tag = operator_image.rsplit(":", 1)
    metrics_port, health_port = free_port(), free_port()
    api_port = kube_cluster.control_plane.port
    helm_cmd = [helm, "--kubeconfig", kube_cluster.kubeconfig]
    # the README quick start's own values (issue 45), its image and Prometheus mapped to the
    # ones built and started here; then what this harness lacks (the module's docstring)
    readme = {**helm_install_sets(), "image.repository": repo, "image.tag": tag,
              "prometheus.url": prom.url}
    run([*helm_cmd, "install", name, CHART, "--namespace", ns, "--timeout", "60s",
         *[a for k, v in readme.items() for a in ("--set", f"{k}={v}")],
         "--set", "image.pullPolicy=Never",
         "--set", f"operator.watchNamespaces={{{work}}}",
         "--set", "operator.hostNetwork=true",
         # no kube-proxy: the in-cluster config's Service address, replaced by the API server's
         "--set", "operator.env[0].name=KUBERNETES_SERVICE_HOST",
         "--set", "operator.env[0].value=127.0.0.1",
         "--set", "operator.env[1].name=KUBERNETES_SERVICE_PORT",
         "--set-string", f"operator.env[1].value={api_port}",
         # the node's network is the machine's: free ports
         "--set", f"metrics.port={metrics_port}", "--set", f"probes.port={health_port}",
         "--set", "webhook.enabled=false",   # see the module's docstring
         "--set", "probes.readiness.initialDelaySeconds=1",
         "--set", "probes.readiness.periodSeconds=1",
         # the test's 10 s windows are below the default minimum (60 s)
         "--set", "operator.minWindowSeconds=0"], helm_env)
    apps = client.AppsV1Api(kube_cluster.api_client)
    rel = Release(kube_cluster, real_node, ns, work, full, metrics_port)
    try:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "kube-root-ca.crt"}, "data": {
            "ca.crt": kube_cluster.control_plane.pki.ca_crt.read_text()}})
        dep = kube_cluster.api_client.sanitize_for_serialization(
            apps.read_namespaced_deployment(full, ns))
        pod = pod_from_deployment(dep, real_node.name)
        rel.pod_name = pod["metadata"]["name"]
        t0 = time.monotonic()
        core.create_namespaced_pod(ns, pod)
        yield rel, t0
    finally:
        if rel.pod_name:
            with _suppress_api():
                print(f"--- operator pod log (tail):\n{rel.log()[-3000:]}")
            with _suppress_api():
                core.delete_namespaced_pod(rel.pod_name, ns, grace_period_seconds=0)
        run([*helm_cmd, "uninstall", name, "--namespace", ns, "--wait", "--timeout", "60s"],
            helm_env, check=False)
        with _suppress_api():
            core.delete_namespaced_config_map("kube-root-ca.crt", ns)
        # the namespaces go at the module's end (create_namespace)


class _suppress_api:
    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        from kubernetes.client.exceptions import ApiException

        return typ is not None and issubclass(typ, ApiException)


def in_container(root: Path, path: str) -> Path:
    """``path`` in the container whose root is ``root`` (/proc/PID/root), its symlinks
    resolved inside the container (Debian's /var/run -> /run would lead to the host's)."""
    out = root
    for part in Path(path).relative_to("/").parts:
        out = out / part
        for _ in range(8):
            if not out.is_symlink():
                break
            target = os.readlink(out)
            out = root / target.lstrip("/") if target.startswith("/") else out.parent / target
    return out


def _jwt_claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_operator_pod_is_ready_non_root_under_the_charts_serviceaccount(release,
                                                                      operator_image):
    """The chart's operator runs as a pod of the image built here: Ready by its health probe,
    its process uid/gid 65532 (the image's USER and the chart's securityContext), no torch in
    the image, talking to the API server with the chart's ServiceAccount's token (its RBAC:
    no Forbidden in its log) and serving /metrics on the node."""
    rel, t0 = release
    pod = wait_for(lambda: (lambda p: p if any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in p["status"].get("conditions") or []) else None)(rel.pod()),
        90, interval=0.25, what="the operator pod Ready (its readiness probe)",
        reason=rel.why_not_ready)
    ready = time.monotonic() - t0
    st = pod["status"]["containerStatuses"][0]
    assert st["image"] == operator_image and st["restartCount"] == 0, st
    assert pod["spec"]["serviceAccountName"] == rel.full
    pid = rel.main_pid()
    status = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    assert status["Uid"].split()[:2] == [str(NONROOT)] * 2, status["Uid"]
    assert status["Gid"].split()[:2] == [str(NONROOT)] * 2, status["Gid"]
    root = Path(f"/proc/{pid}/root")
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert any(b"ai4dl-operator" in a for a in cmdline), cmdline
    site = next((root / "opt" / "ai4dl" / "lib").glob("python3*/site-packages"))
    assert (site / "ai4dl").is_dir() and not (site / "torch").exists()
    claims = _jwt_claims((in_container(root, SA_MOUNT) / "token").read_text())
    assert claims["sub"] == f"system:serviceaccount:{rel.namespace}:{rel.full}", claims
    with urllib.request.urlopen(f"http://127.0.0.1:{rel.metrics_port}/metrics", timeout=5) as r:
        assert "# TYPE ai4dl_pod_phase gauge" in r.read().decode()
    log = rel.log()
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]
    FIGURES.append(("operator pod", "seconds from pod created to Ready (image already in "
                    "containerd)", f"{ready:.1f} s"))


def test_operator_pod_resizes_a_pod_beside_it_in_place(release, kube_cluster, stack, jobs,
                                                       model_doc):
    """The chart's operator (InPlace mode, watching one namespace) resizes a running
    Guaranteed busybox pod on the same node: the kubelet applies it to the cgroup files, the
    container is not restarted and the pod stays Guaranteed; the operator's log shows no
    Forbidden (the chart's RBAC and admission policy let it do exactly this)."""
    rel, _ = release
    exporter, _ = stack
    wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                         for c in rel.pod()["status"].get("conditions") or []),
             90, interval=0.25, what="the operator pod Ready", reason=rel.why_not_ready)
    pods = NodePods(kube_cluster, rel.node, rel.workloads)
    try:
        pod = opted_in_pod(pods, exporter, jobs, "beside", 0, cpu="500m", memory="512Mi")
        cid = pod["status"]["containerStatuses"][0]["containerID"]
        before = pod["spec"]["containers"][0]["resources"]
        make_phasemodel(kube_cluster, rel.workloads, "pm", model_doc,
                        resources={"cpu": {"ceiling": "1500m"}, "memory": {"ceiling": "2Gi"}})
        t0 = time.monotonic()
        resized = wait_for(lambda: (lambda p: p if p["spec"]["containers"][0]["resources"]
                                    != before else None)(pods.get("beside")),
                           3 * WINDOW + 15, what="the operator pod's resize of pod beside")
        t_resize = time.monotonic() - t0
        res = resized["spec"]["containers"][0]["resources"]
        assert res["requests"] == res["limits"], res      # Guaranteed: limits moved too
        wait_for(lambda: cgroup_matches_spec(pods, pods.get("beside")), 30, interval=0.2,
                 what="the cgroup files to take the operator's resize")
        t_cgroup = time.monotonic() - t0
        after = pods.get("beside")
        st = after["status"]["containerStatuses"][0]
        assert st["restartCount"] == 0 and st["containerID"] == cid
        assert after["status"]["qosClass"] == "Guaranteed"
        # it was this pod's operator (the only one serving this namespace) that resized it; its
        # window line is written when the window's work is done, which can be after the kubelet
        # has already applied the resize (a race CI lost once), so it is waited for
        wait_for(lambda: any(f"PhaseModel {rel.workloads}/pm window" in line
                             and " 1 resized" in line for line in rel.log().splitlines()),
                 WINDOW, interval=0.25, what="the operator's window line with 1 resized",
                 reason=lambda: rel.log()[-3000:])
        log = rel.log()
        assert "Forbidden" not in log and " 403" not in log, log[-3000:]
        assert rel.pod()["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        with _suppress_api():
            client.CustomObjectsApi(kube_cluster.api_client).delete_namespaced_custom_object(
                GROUP, VERSION, rel.workloads, PLURAL, "pm")
        exporter.remove_pod((rel.workloads, "beside", "main"))
        with _suppress_api():         # its cpu is the quick start's room on this 2-core node
            pods.core.delete_namespaced_pod("beside", rel.workloads, grace_period_seconds=0)
    FIGURES.extend([
        ("operator pod InPlace", "requests/limits before -> after",
         f"{before['limits']} -> {res['limits']}"),
        ("operator pod InPlace", "seconds from PhaseModel created to resize / to cgroup files",
         f"{t_resize:.1f} s / {t_cgroup:.1f} s"),
    ])


# ----------------------------------------------------------------------------- the quick start
def scaled(resource: str, value: str) -> str:
    """``value`` of ``resource`` divided by EXAMPLE_SCALE, as a quantity."""
    q = parse_quantity(value) / EXAMPLE_SCALE
    return f"{round(q * 1000)}m" if resource == "cpu" else f"{round(q / 2**20)}Mi"


def example_on_this_node(docs: list[dict], namespace: str) -> list[dict]:
    """The quick start's ``kubectl apply -f`` file as this harness can run it: the same
    documents, with only what the harness forces changed, each named below."""
    docs = json.loads(json.dumps(docs))
    for d in docs:
        # `kubectl create namespace ml` -> the namespace the release watches (its fixture's)
        d["metadata"]["namespace"] = namespace
    (pm,) = [d for d in docs if d["kind"] == "PhaseModel"]
    # windows of WINDOW one-second steps, not 600 s of 15 s steps: the exporter plays its 15 s
    # traces 15 times faster (a trace step a second), and a test cannot wait for 10-min windows
    pm["spec"].update(stepSeconds=STEP, windowSeconds=WINDOW)
    # and the default features' cpu rate() over 4 steps, as their [1m] is at 15 s: a [1m] of
    # these one-second steps would smooth 60 of them, and the trainer drops a run's first rate
    # window (a minute more of history to wait for)
    assert "features" not in pm["spec"], "the example names its features: scale their windows"
    pm["spec"]["features"] = [
        {**f.model_dump(by_alias=True, exclude_none=True),
         "query": f.query.replace("[1m]", f"[{4 * STEP}s]")} for f in default_features()]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    spec = job["spec"]["template"]["spec"]
    spec["hostNetwork"] = True                  # no CNI on this node (as NodePods' pods)
    for c in spec["containers"]:
        # pytorch's image cannot be pulled offline: the node's busybox, asleep; the training's
        # usage is played by the trace exporter (usage_of_the_job)
        c.update(image=BUSYBOX_IMAGE, imagePullPolicy="Never", command=SLEEP_FOREVER)
        # 4 pods of 4 cores and 16 Gi do not fit this 2-core node: the job at 1/EXAMPLE_SCALE,
        # its requests and limits here and its usage in usage_of_the_job
        c["resources"] = {kind: {r: scaled(r, v) for r, v in values.items()}
                          for kind, values in c["resources"].items()}
    return docs


def pods_of_the_job(pods: NodePods, job: dict) -> list[dict]:
    """The pods the Job controller would create from ``job`` as the API server stored it (its
    template with the labels the API server adds, ``generateName`` and its controller
    reference; not its tracking finalizer, which nothing here would remove), one per
    ``parallelism``, bound to the node as the scheduler would; once Running."""
    tmpl, meta = job["spec"]["template"], job["metadata"]
    made = []
    for _ in range(job["spec"].get("parallelism", 1)):
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": f"{meta['name']}-",
                             "labels": tmpl["metadata"].get("labels", {}),
                             "annotations": tmpl["metadata"].get("annotations", {}),
                             "ownerReferences": [{
                                 "apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                 "uid": meta["uid"], "controller": True,
                                 "blockOwnerDeletion": True}]},
                "spec": {**json.loads(json.dumps(tmpl["spec"])), "nodeName": pods.node.name}}
        made.append(pods.core.create_namespaced_pod(meta["namespace"], body).metadata.name)
    return [pods.wait_running(name) for name in made]


def usage_of_the_job(exporter, jobs, pods: list[dict]) -> None:
    """Each pod's training container plays one of ``jobs`` from its first training epoch (as
    opted_in_pod), at 1/EXAMPLE_SCALE like its requests (example_on_this_node)."""
    traces, truth = jobs
    for i, pod in enumerate(pods):
        ex = traces[i % len(traces)]
        offset = float(np.flatnonzero(truth[i % len(traces)] == 2)[0]) * ex.step
        container = pod["spec"]["containers"][0]["name"]          # `train`
        exporter.add_pod((pod["metadata"]["namespace"], pod["metadata"]["name"], container),
                         dataclasses.replace(ex, values=ex.values / EXAMPLE_SCALE),
                         offset=offset)


def quickstart(*head: str, namespace: str, **values: str) -> list[str]:
    """The README quick start's command that starts with ``head``, its namespace ``ml``
    replaced by ``namespace`` (-n, --phasemodel, the selector) and the flags in ``values``
    (``--prometheus``) by the harness's."""
    cmd = command(*head)
    ns = command("kubectl", "create", "namespace")[3]
    out = []
    for i, arg in enumerate(cmd):
        flag = cmd[i - 1] if i else ""
        if flag in ("-n", "--namespace") and arg == ns:
            arg = namespace
        elif flag == "--phasemodel":
            arg = arg.replace(f"{ns}/", f"{namespace}/", 1)
        elif flag == "--selector":
            arg = arg.replace(f'namespace="{ns}"', f'namespace="{namespace}"')
        elif flag.startswith("--") and flag[2:] in values:
            arg = values[flag[2:]]
        out.append(arg)
    return out


def resnet_recommendations(kubectl, namespace: str) -> list[dict]:
    """Step 5's jsonpath read: each pod's recommendation annotation, parsed."""
    out = kubectl(*quickstart("kubectl", "get", "pod", namespace=namespace)[1:]).stdout
    docs, pos, dec = [], 0, json.JSONDecoder()
    while pos < len(out.strip()):
        doc, end = dec.raw_decode(out, pos)
        docs.append(doc)
        pos = end + len(out[end:]) - len(out[end:].lstrip())
    return docs


def apply_the_example(kubectl, namespace: str, folder: Path) -> list[dict]:
    """Step 3's `kubectl apply -f deploy/examples/job.yaml`, of the file as this harness runs
    it (example_on_this_node); the documents applied."""
    apply = command("kubectl", "apply")
    i = apply.index("-f") + 1
    src = REPO / apply[i]
    docs = example_on_this_node(list(yaml.safe_load_all(src.read_text())), namespace)
    path = folder / src.name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    kubectl(*apply[1:i], path, *apply[i + 1:])
    return docs


def train_as_the_readme_says(kube_cluster, namespace: str, prometheus: str) -> tuple:
    """Step 4's `ai4dl train`, against the tier's Prometheus and API server; (its command,
    its seconds)."""
    train = quickstart("ai4dl", "train", namespace=namespace, prometheus=prometheus)
    env = {**os.environ, "KUBECONFIG": str(kube_cluster.kubeconfig),
           "PYTHONPATH": os.pathsep.join([str(REPO / "operator"),
                                          os.environ.get("PYTHONPATH", "")])}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ai4dl", *train[1:]], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, f"{' '.join(train)}: exit {r.returncode}\n{r.stderr[-4000:]}"
    return train, time.monotonic() - t0


def resized_pods(kubectl, namespace: str, names: list[str]) -> list[str]:
    """Step 6's `kubectl get events ... --field-selector reason=Resized`: which of ``names``
    it shows."""
    out = kubectl(*quickstart("kubectl", "get", "events", namespace=namespace)[1:]).stdout
    return [n for n in names if f"pod/{n}" in out]


def test_the_readme_quick_start_from_helm_install_to_a_resized_pod(
        release, kube_cluster, stack, jobs, kubectl, tmp_path):
    """The README's quick start as written, on this node, after the release (step 2, the
    ``release`` fixture): step 3 applies deploy/examples/job.yaml (the Job's pods made from
    its stored template: no Job controller here); step 4 runs `ai4dl train` once the pods'
    usage is in Prometheus, which writes the PhaseModel's model; step 5 lists the PhaseModel
    and reads the pods' recommendations, from the model's phases, while mode Recommend
    resizes nothing; step 6's patch to InPlace makes the operator resize a pod in place: a
    Resized Event, new requests the kubelet applies, the same container. What the harness
    changes is named where it does (example_on_this_node, quickstart)."""
    rel, _ = release
    exporter, prom = stack
    ns = rel.workloads
    wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                         for c in rel.pod()["status"].get("conditions") or []),
             90, interval=0.25, what="the operator pod Ready", reason=rel.why_not_ready)
    t0 = time.monotonic()
    docs = apply_the_example(kubectl, ns, tmp_path)
    pm_name = next(d for d in docs if d["kind"] == "PhaseModel")["metadata"]["name"]
    job_name = next(d for d in docs if d["kind"] == "Job")["metadata"]["name"]
    pods = NodePods(kube_cluster, rel.node, ns)
    running: list[dict] = []
    try:
        job = kube_cluster.api_client.sanitize_for_serialization(
            client.BatchV1Api(kube_cluster.api_client).read_namespaced_job(job_name, ns))
        running = pods_of_the_job(pods, job)
        usage_of_the_job(exporter, jobs, running)
        t_pods = time.monotonic() - t0
        _steps_4_to_6(kubectl, kube_cluster, prom, pods, pm_name, running, t0, t_pods)
    finally:
        for pod in running:
            name = pod["metadata"]["name"]
            exporter.remove_pod((ns, name, pod["spec"]["containers"][0]["name"]))
            with _suppress_api():
                pods.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        with _suppress_api():
            client.BatchV1Api(kube_cluster.api_client).delete_namespaced_job(job_name, ns)
        with _suppress_api():
            client.CustomObjectsApi(kube_cluster.api_client).delete_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, pm_name)


def _steps_4_to_6(kubectl, kube_cluster, prom, pods: NodePods, pm_name: str,
                  running: list[dict], t0: float, t_pods: float) -> None:
    ns, names = pods.namespace, [p["metadata"]["name"] for p in running]
    # step 4, once every pod has QUICKSTART_HISTORY samples (a few windows, as the README says)
    sel = f'namespace="{ns}",pod=~"{"|".join(names)}"'
    wait_for(lambda: (lambda r: len(r) == len(names) and min(
        float(x["value"][1]) for x in r) >= QUICKSTART_HISTORY)(prom.query(
            f"count_over_time(container_memory_working_set_bytes{{{sel}}}[10m])")),
        QUICKSTART_HISTORY + 30, interval=1, what=f"{QUICKSTART_HISTORY} samples of each pod")
    t_history = time.monotonic() - t0
    train, t_train = train_as_the_readme_says(kube_cluster, ns, prom.url)
    pm = read_pm(kube_cluster, ns, pm_name)
    assert pm["spec"].get("model"), pm.get("status")
    assert pm["status"]["training"]["decision"] == "applied", pm["status"]["training"]
    # step 5: `kubectl get pm -n ml -w` lists it (once: a watch does not end)
    listing = kubectl(*[a for a in quickstart("kubectl", "get", "pm", namespace=ns)[1:]
                        if a != "-w"]).stdout
    assert any(line.split()[:1] == [pm_name] and "Recommend" in line.split()
               for line in listing.splitlines()), listing
    recs = wait_for(lambda: (lambda r: r if len(r) == len(names) and all(
        c.get("phase") is not None for doc in r for c in doc.values()) else None)(
            resnet_recommendations(kubectl, ns)),
        3 * WINDOW + 15, interval=0.5, what="each pod's recommendation from the model's phases",
        reason=lambda: read_pm(kube_cluster, ns, pm_name).get("status"))
    t_recommend = time.monotonic() - t0
    now = {n: pods.get(n) for n in names}
    assert all(now[p["metadata"]["name"]]["spec"]["containers"] == p["spec"]["containers"]
               for p in running), "mode Recommend changed a pod"
    assert resized_pods(kubectl, ns, names) == []
    # step 6
    kubectl(*quickstart("kubectl", "patch", namespace=ns)[1:])
    resized = wait_for(lambda: resized_pods(kubectl, ns, names), 3 * WINDOW + 15, interval=0.5,
                       what="a Resized Event of a pod of the job (`kubectl get events`)",
                       reason=lambda: read_pm(kube_cluster, ns, pm_name).get("status"))
    t_resized = time.monotonic() - t0
    before = next(p for p in running if p["metadata"]["name"] == resized[0])
    after = wait_for(lambda: (lambda p: p if (p["status"]["containerStatuses"][0].get(
        "resources") or {}).get("requests") == p["spec"]["containers"][0]["resources"][
            "requests"] else None)(pods.get(resized[0])), 30, interval=0.2,
        what="the kubelet to report the resize done")
    res0, res1 = (p["spec"]["containers"][0]["resources"] for p in (before, after))
    assert res1 != res0
    st0, st1 = (p["status"]["containerStatuses"][0] for p in (before, after))
    assert st1["restartCount"] == 0 and st1["containerID"] == st0["containerID"]
    assert after["status"]["qosClass"] == before["status"]["qosClass"]
    FIGURES.extend([
        ("quick start", "`ai4dl train` (as the README writes it, the harness's namespace and "
         "Prometheus)", f"{t_train:.1f} s: {' '.join(train[1:])}"),
        ("quick start", "seconds from `kubectl apply` to: pods Running / history / model / "
         "recommendations / first Resized", f"{t_pods:.1f} / {t_history:.1f} / "
         f"{t_history + t_train:.1f} / {t_recommend:.1f} / {t_resized:.1f} s"),
        ("quick start", f"pod {resized[0]}: requests before -> after",
         f"{res0['requests']} -> {res1['requests']}"),
        ("quick start", "recommendations (Recommend mode)", json.dumps(recs)[:300]),
    ])
