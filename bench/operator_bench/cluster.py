"""bench/bench_operator.py's set-up: the operator as a subprocess, the cluster's CRD, RBAC and
pods, the traces the pods play and the model fitted on them. Separate from the measurement so
that other benchmarks (bench/bench_real_node.py) can reuse it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from .common import NAMESPACE, PACKAGE_ROOT, PM_NAME, REPO, http_text, log


# ----------------------------------------------------------------------------- the operator
class OperatorProcess:
    """``python -m ai4dl.controller`` with the ServiceAccount kubeconfig, as the image runs it."""

    def __init__(self, kubeconfig: Path, prometheus_url: str, logfile: Path, timeout: float,
                 settle: float, extra_args: tuple[str, ...] = ()):
        self.kubeconfig, self.prometheus_url, self.logfile = kubeconfig, prometheus_url, logfile
        self.timeout, self.settle, self.extra_args = timeout, settle, tuple(extra_args)
        from e2e_fixtures_operator import free_port

        self.metrics_port = free_port()
        self.proc: subprocess.Popen | None = None
        self._out = None

    def start(self) -> "OperatorProcess":
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(filter(None, (str(PACKAGE_ROOT),
                                                            os.environ.get("PYTHONPATH")))))
        cmd = [sys.executable, "-m", "ai4dl.controller", "--prometheus-url", self.prometheus_url,
               "--metrics-port", str(self.metrics_port), "--health-port", "0",
               "--prometheus-timeout", str(self.timeout), "--prometheus-retries", "1",
               "--settle-seconds", str(self.settle),
               "--min-window-seconds", "0",     # --window (10 s) is below the default minimum
               *self.extra_args]
        self._out = open(self.logfile, "ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        from e2e_fixtures_operator import stop_process

        stop_process(self.proc, timeout=20)
        if self._out is not None:
            self._out.close()
            self._out = None

    def metrics(self) -> str:
        return http_text(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10)

    def log_lines(self) -> list[str]:
        try:
            return self.logfile.read_text(errors="replace").splitlines()
        except OSError:
            return []


# ----------------------------------------------------------------------------- set-up
def setup_cluster(cp, kubeconfig_dir: Path):
    """CRD (Established), namespaces, RBAC; returns (admin ApiClient, operator kubeconfig)."""
    from kubernetes import client, config, utils
    from kubernetes.client.exceptions import ApiException

    from ai4dl.crd import crd_manifest
    from ai4dl.crd_profile import crd_manifest as profile_crd_manifest

    api = config.new_client_from_config(config_file=str(cp.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
    ext = client.ApiextensionsV1Api(api)
    for body in (profile_crd_manifest(), crd_manifest()):
        ext.create_custom_resource_definition(body)
        deadline = time.time() + 60
        while not any(c.type == "Established" and c.status == "True"
                      for c in (ext.read_custom_resource_definition(body["metadata"]["name"])
                                .status.conditions or [])):
            if time.time() > deadline:
                raise RuntimeError(f"CRD {body['metadata']['name']} not Established after 60 s")
            time.sleep(0.3)
    core = client.CoreV1Api(api)
    for ns in ("ai4dl-system", NAMESPACE):
        core.create_namespace({"metadata": {"name": ns}})
    for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()):
        if not doc:
            continue
        try:
            utils.create_from_dict(api, doc)
        except utils.FailToCreateError as err:
            if not all(getattr(e, "status", None) == 409 for e in err.api_exceptions):
                raise
        except ApiException as err:
            if err.status != 409:
                raise
    token = cp.service_account_token("ai4dl-system", "ai4dl-operator", create=False,
                                     expiration_seconds=24 * 3600)
    kubeconfig = cp.token_kubeconfig(token, kubeconfig_dir / "operator-kubeconfig",
                                     name="ai4dl-operator")
    return api, kubeconfig


REAL_TRACES = ("ai4dl_samples/sample-dlaas.csv", "ai4dl_samples/sample-vr.csv")


def load_jobs(kind: str):
    """The executions the pods play, and the traces the model is fitted on.

    ``ai4dl-samples`` (default): the 5 real IBM DLaaS training containers of
    ``$AI4DL_DATA/ai4dl_samples`` (cpu cores and memory working set at 15 s; the AI4DL paper's
    own samples), played by the pods and also the model's training set: a benchmark of the
    operator's cost, not of the model's quality. ``synthetic``: 6 long synthetic 2-feature DL
    jobs played, 30 others fitted (``ai4dl.method.synthetic``)."""
    from ai4dl.method import synthetic

    if kind == "synthetic":
        cfg = synthetic.SyntheticConfig(n_features=2)
        fit_on, _ = synthetic.generate(30, seed=21, config=cfg)
        played, truth = synthetic.generate(
            6, seed=33, config=synthetic.SyntheticConfig(n_features=2, epochs=(10, 12)))
        # the first epoch (phase 2) of each, for --in-phase
        first = [float(np.flatnonzero(t == 2)[0]) * ex.step for ex, t in zip(played, truth)]
        return list(played), fit_on, first
    from ai4dl.io.loaders import load_traces

    data = Path(os.environ.get("AI4DL_DATA", REPO.parent / "shared" / "data"))
    played = []
    for rel in REAL_TRACES:
        if not (data / rel).is_file():
            raise SystemExit(f"bench_operator: real trace {data / rel} not found (set AI4DL_DATA "
                             "to the data folder, or use --traces synthetic)")
        played += list(load_traces(data / rel).select(["cpu", "memory"]))
    from ai4dl.method.traces import TraceSet

    # --in-phase: a quarter into each execution (DLaaS traces carry no phase labels)
    first = [0.25 * float(ex.times[-1] - ex.times[0]) for ex in played]
    return played, TraceSet(played, source="ai4dl_samples"), first


def fit_model_doc(fit_on, window: int = 10) -> tuple[dict, float]:
    """The model, with auto's choice and both head-room tables fitted as the trainer does
    (windows of ``window`` samples), so every --kind can be served."""
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    from dataclasses import replace

    from ai4dl.method.traces import TraceSet

    # the exporter plays one sample a wall second, whatever step the traces were recorded at:
    # the model's step is the PhaseModel's (stepSeconds 1), which its step check holds it to
    fit_on = TraceSet([replace(e, step=1.0) for e in fit_on])
    t = time.perf_counter()
    model = PhaseModel(n_phases=4, epochs=10, random_state=0).fit(fit_on)
    choose_served_policy(model, list(fit_on), PhaseModelSpec.model_validate(
        {"stepSeconds": 1, "windowSeconds": window}))
    doc = json.loads(model.to_document().model_dump_json(by_alias=True, exclude_none=True))
    return doc, time.perf_counter() - t


def make_phasemodel(api, model_doc: dict, window: int, step: int, kind: str = "auto") -> None:
    from kubernetes import client

    from ai4dl.crd import GROUP, PLURAL, VERSION

    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": PM_NAME},
            "spec": {"selector": {"matchLabels": {"app": "train"}},
                     "stepSeconds": step, "windowSeconds": window,
                     "policy": {"mode": "InPlace", "minChange": 0.05, "cooldownWindows": 0,
                                "kind": kind},
                     "model": model_doc}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, body)


def create_pods(api, names: list[str], threads: int) -> float:
    """Pods bound to the fake node and marked Running (FakeKubelet's status), ``threads`` at a
    time: one create and one status patch each. Returns the seconds taken."""
    from e2e_fixtures_k8s import FakeKubelet, _now

    from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL

    kubelet = FakeKubelet(api, namespace=NAMESPACE)
    kubelet.ensure_node(pods="100000")
    core = kubelet.core
    node = kubelet.node_name

    def one(name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name,
                             "labels": {OPT_IN_LABEL: "true", "app": "train"},
                             "annotations": {MODEL_ANNOTATION: PM_NAME}},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "8",
                                                                    "memory": "32Gi"}}}]}}
        pod = core.create_namespaced_pod(NAMESPACE, body)
        now = _now()
        conds = [{"type": t, "status": "True", "lastTransitionTime": now,
                  "observedGeneration": pod.metadata.generation}
                 for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady",
                           "Ready", "PodScheduled")]
        status = {"phase": "Running", "conditions": conds, "hostIP": "127.0.0.1",
                  "hostIPs": [{"ip": "127.0.0.1"}], "podIP": "10.244.0.10",
                  "podIPs": [{"ip": "10.244.0.10"}], "startTime": now,
                  "observedGeneration": pod.metadata.generation,
                  "containerStatuses": kubelet._container_statuses(pod, started_at=now,
                                                                   previous={})}
        # the answer is not needed: skip the client's (slow) model deserialization
        core.patch_namespaced_pod_status(name, NAMESPACE, {"status": status},
                                         _preload_content=False).read()

    t = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, names):
            done += 1
            if done % 500 == 0:
                log(f"  {done}/{len(names)} pods created ({time.perf_counter() - t:.1f} s)")
    return time.perf_counter() - t


def exporter_jobs(played, first, in_phase: bool, n_pods: int):
    """Each pod's execution (round robin over ``played``) and its start offset into it: ``first``
    for every pod with ``in_phase`` (as the integration test does: all pods change phase
    together), else seeded random offsets over the first 80 % of the execution (a fleet of jobs
    at different points)."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(n_pods):
        k = i % len(played)
        ex = played[k]
        span = float(ex.times[-1] - ex.times[0])
        out.append((ex, first[k] if in_phase else float(rng.uniform(0.0, 0.8 * span))))
    return out


def admitting_phasemodel(custom, namespace: str, executions: int = 24, epochs: int = 20,
                         name: str = "pm") -> dict:
    """A PhaseModel (InPlace, 15 s steps, 600 s windows) whose model carries the trainer's
    tables, hence a learned first-window level: what admission serves from. Returns it."""
    import json

    from ai4dl.crd import GROUP, PLURAL, VERSION
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method import synthetic
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    traces, _ = synthetic.generate(executions, seed=11)
    model = PhaseModel(random_state=3, epochs=epochs).fit(traces)
    features = [{"name": f, "query": f + "{{{selector}}}"} for f in model.features_]
    spec = {"features": features, "stepSeconds": 15, "windowSeconds": 600,
            "selector": {"matchLabels": {"app": "train"}}, "policy": {"mode": "InPlace"}}
    choose_served_policy(model, list(traces), PhaseModelSpec.model_validate(spec))
    spec["model"] = json.loads(model.to_document().model_dump_json(by_alias=True))
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
        "metadata": {"name": name}, "spec": spec})
