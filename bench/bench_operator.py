"""Benchmark of the kopf operator at scale. Prints markdown tables; asserts nothing.

    .venv/bin/python bench/bench_operator.py [--pods 2000] [--window 10] [--windows 4] [--speed 15]

The whole stack of tests/test_operator_integration.py, with many pods: a real kube-apiserver +
etcd (e2e/controlplane), the CRD, the operator's RBAC (deploy/rbac.yaml) and a kubeconfig for
its ServiceAccount; a small model fitted on the traces the pods play; ONE PhaseModel (InPlace,
stepSeconds 1, windowSeconds --window); --pods opted-in pods bound to a fake node and marked
Running (FakeKubelet's status); the TraceExporter serving all of them (--traces: by default the
5 real IBM DLaaS training containers of $AI4DL_DATA/ai4dl_samples, cpu cores and memory working
set, shared round robin by the pods at seeded random offsets; --speed trace seconds per wall
second); a real Prometheus scraping it
every second; then the operator as a subprocess (`python -m ai4dl.controller`), run until
--windows windows have been handled after the first window that saw every pod.

Measured (table 1): per-window processing time from the operator's own histogram
(ai4dl_window_duration_seconds: _sum/_count deltas read right after each window's log line,
so each delta is exactly one window), when each window finished after its boundary, the
operator's peak and current RSS (/proc/<pid>/status VmHWM, VmRSS), Prometheus range queries per
window (prometheus_http_requests_total{handler="/api/v1/query_range"}), writes per window as the
API server counted them (apiserver_request_total deltas by verb/resource/subresource),
resizes per window, the exporter's scrape duration, pod creation and control-plane start time.

Then (table 2) the operator is stopped and ONE WindowRunner.run is done in this process against
the same cluster and Prometheus, with timers around source.fetch, plan_window and each API
call, to show where a window's time goes; and (table 3) the same annotation patches are sent
again sequentially and through a thread pool, with and without the client's model
deserialization, and with raw answers left unread (``_preload_content=False`` without
``.read()``: urllib3 then opens a new TLS connection per request), as a what-if for the write
path (none of this changes operator code).

Everything started here is stopped and every temporary folder removed at the end, also on
Ctrl-C / SIGTERM (--keep keeps the logs folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.append(str(_p))

NAMESPACE = "bench"
PM_NAME = "pm"
MIB = 1024.0 * 1024.0


# ----------------------------------------------------------------------------- small helpers
def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, names: set[str] | None = None) -> list[tuple[str, dict, float]]:
    """Prometheus text format -> [(name, labels, value)] (only ``names`` when given)."""
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m or (names is not None and m.group(1) not in names):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def http_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS / VmHWM of a process, MiB (empty when it is gone)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, val = line.split(":", 1)
                out[key] = float(val.split()[0]) / 1024.0
    except OSError:
        pass
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children: none here), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used (busy time in /proc/stat)."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return (sum(f[:8]) - idle) / _TICK


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of our processes, and of everything else on the machine ("other")."""
    out = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out["other processes"] = machine_busy_seconds() - sum(out.values())
    return out


def fmt(x, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if x != x:
            return "n/a"
        return f"{x:.{digits}f}"
    return str(x)


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Timer:
    """Accumulates calls and seconds of wrapped callables, by stage name."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.lock = threading.Lock()

    def wrap(self, stage: str, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                with self.lock:
                    self.calls[stage] = self.calls.get(stage, 0) + 1
                    self.seconds[stage] = self.seconds.get(stage, 0.0) + dt
        return timed


# ----------------------------------------------------------------------------- the operator
class OperatorProcess:
    """``python -m ai4dl.controller`` with the ServiceAccount kubeconfig, as the image runs it."""

    def __init__(self, kubeconfig: Path, prometheus_url: str, logfile: Path, timeout: float,
                 settle: float):
        self.kubeconfig, self.prometheus_url, self.logfile = kubeconfig, prometheus_url, logfile
        self.timeout, self.settle = timeout, settle
        from e2e_fixtures_operator import free_port

        self.metrics_port = free_port()
        self.proc: subprocess.Popen | None = None
        self._out = None

    def start(self) -> "OperatorProcess":
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "ai4dl.controller", "--prometheus-url", self.prometheus_url,
               "--metrics-port", str(self.metrics_port), "--health-port", "0",
               "--prometheus-timeout", str(self.timeout), "--prometheus-retries", "1",
               "--settle-seconds", str(self.settle),
               "--min-window-seconds", "0"]     # --window (10 s) is below the default minimum
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


WINDOW_LINE = re.compile(r"PhaseModel (\S+)/(\S+) window ([\d.]+): (\d+) pods, (\d+) resized, "
                         r"skipped (.*)$")


def operator_sample(op: OperatorProcess) -> dict:
    """The operator's counters for our PhaseModel."""
    want = {"ai4dl_window_duration_seconds_sum", "ai4dl_window_duration_seconds_count",
            "ai4dl_window_duration_seconds_bucket", "ai4dl_pods_tracked", "ai4dl_resizes_total",
            "ai4dl_errors_total", "ai4dl_skipped_windows_total"}
    out = {"sum": 0.0, "count": 0.0, "buckets": {}, "pods": 0.0, "resizes": 0.0, "errors": {},
           "skipped": {}}
    for name, labels, v in parse_metrics(op.metrics(), want):
        if labels.get("namespace") != NAMESPACE or labels.get("phasemodel") != PM_NAME:
            continue
        if name.endswith("_sum"):
            out["sum"] = v
        elif name.endswith("_count"):
            out["count"] = v
        elif name.endswith("_bucket"):
            out["buckets"][float(labels["le"])] = v
        elif name == "ai4dl_pods_tracked":
            out["pods"] = v
        elif name == "ai4dl_resizes_total":
            out["resizes"] = v
        elif name == "ai4dl_errors_total":
            out["errors"][labels.get("kind", "")] = v
        elif name == "ai4dl_skipped_windows_total":
            out["skipped"][labels.get("reason", "")] = v
    return out


def apiserver_counts(cp) -> dict[tuple[str, str, str], float]:
    """apiserver_request_total summed by (verb, resource, subresource)."""
    status, text = cp.request("GET", "/metrics", headers={"Accept": "text/plain"})
    if status != 200 or not isinstance(text, str):
        return {}
    out: dict[tuple[str, str, str], float] = {}
    for _, labels, v in parse_metrics(text, {"apiserver_request_total"}):
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        out[key] = out.get(key, 0.0) + v
    return out


def prom_counter(prom, name: str, handler: str) -> float:
    return prom.self_metric(name, handler=handler)


# ----------------------------------------------------------------------------- set-up
def setup_cluster(cp, kubeconfig_dir: Path):
    """CRD (Established), namespaces, RBAC; returns (admin ApiClient, operator kubeconfig)."""
    from kubernetes import client, config, utils
    from kubernetes.client.exceptions import ApiException

    from ai4dl.crd import crd_manifest

    api = config.new_client_from_config(config_file=str(cp.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
    ext = client.ApiextensionsV1Api(api)
    body = crd_manifest()
    ext.create_custom_resource_definition(body)
    deadline = time.time() + 60
    while not any(c.type == "Established" and c.status == "True"
                  for c in (ext.read_custom_resource_definition(body["metadata"]["name"])
                            .status.conditions or [])):
        if time.time() > deadline:
            raise RuntimeError("CRD not Established after 60 s")
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
    jobs played, 30 others fitted (``ai4dl.synthetic``)."""
    from ai4dl import synthetic

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
    from ai4dl.traces import TraceSet

    # --in-phase: a quarter into each execution (DLaaS traces carry no phase labels)
    first = [0.25 * float(ex.times[-1] - ex.times[0]) for ex in played]
    return played, TraceSet(played, source="ai4dl_samples"), first


def fit_model_doc(fit_on, window: int = 10) -> tuple[dict, float]:
    """The model, with auto's choice and both head-room tables fitted as the trainer does
    (windows of ``window`` samples), so every --kind can be served."""
    from ai4dl.crd import PhaseModelSpec
    from ai4dl.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

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


# ----------------------------------------------------------------------------- measurement
def process_pids(cp, prom, op=None) -> dict[str, int]:
    pids = {"kube-apiserver": cp.apiserver.pid, "etcd": cp.etcd.pid,
            "prometheus": prom._proc.pid, "benchmark process": os.getpid()}
    if op is not None:
        pids = {"operator": op.proc.pid, **pids}
    return pids


def run_operator_phase(args, op: OperatorProcess, cp, prom) -> dict:
    """Watch the operator's log and /metrics until --windows windows after the first window
    that saw every pod. Returns the per-window records and the deltas over the measured span."""
    n = args.pods
    started = time.time()
    pids = process_pids(cp, prom, op)
    seen_lines = 0
    prev = None
    records: list[dict] = []
    first_full: int | None = None
    snap0 = snap1 = None
    rss_max = 0.0
    deadline = time.time() + args.timeout
    while True:
        if not op.alive:
            raise RuntimeError("the operator exited; log tail:\n" + "\n".join(op.log_lines()[-30:]))
        if time.time() > deadline:
            log(f"timed out after {args.timeout:.0f} s; log tail:\n"
                + "\n".join(op.log_lines()[-15:]))
            break
        st = proc_status(op.proc.pid)
        rss_max = max(rss_max, st.get("VmRSS", 0.0))
        lines = op.log_lines()
        wins = [(i, WINDOW_LINE.search(l)) for i, l in enumerate(lines)]
        wins = [(i, m) for i, m in wins if m and m.group(2) == PM_NAME]
        if prev is None:
            with contextlib.suppress(OSError):
                prev = operator_sample(op)
        if len(wins) > seen_lines and prev is not None:
            seen = time.time()
            cur = operator_sample(op)
            for _, m in wins[seen_lines:]:
                wstart = float(m.group(3))
                rec = {"window_start": wstart, "pods": int(m.group(4)),
                       "resized": int(m.group(5)), "skipped": m.group(6),
                       "done_after_boundary": seen - wstart,
                       "seconds": None, "bucket": None}
                records.append(rec)
            # one PhaseModel: the histogram grows by one per processed window (a degraded
            # window returns before observing it)
            dcount = cur["count"] - prev["count"]
            if dcount >= 1 and len(wins) - seen_lines == 1:
                records[-1]["seconds"] = (cur["sum"] - prev["sum"]) / dcount
                for le in sorted(cur["buckets"]):
                    if cur["buckets"][le] - prev["buckets"].get(le, 0.0) > 0:
                        records[-1]["bucket"] = le
                        break
            records[-1]["pods_tracked_gauge"] = cur["pods"]
            records[-1]["resizes_counter_delta"] = cur["resizes"] - prev["resizes"]
            prev = cur
            seen_lines = len(wins)
            r = records[-1]
            log(f"window {r['window_start']:.0f}: {r['pods']} pods, {r['resized']} resized, "
                f"{fmt(r['seconds'])} s processing (bucket <= {r['bucket']}), finished "
                f"{r['done_after_boundary']:.1f} s after the boundary; skipped {r['skipped']}; "
                f"operator RSS {st.get('VmRSS', 0):.0f} MiB")
            if first_full is None and r["pods"] >= n:
                first_full = len(records) - 1
                snap0 = measurement_snapshot(cp, prom, pids)
                log(f"first window with all {n} pods: {r['window_start']:.0f}; measuring the "
                    f"next {args.windows}")
            elif first_full is not None and len(records) - 1 - first_full >= args.windows:
                snap1 = measurement_snapshot(cp, prom, pids)
                break
        time.sleep(0.25)
    st = proc_status(op.proc.pid) if op.alive else {}
    measured = records[first_full + 1:] if first_full is not None else []
    first_line = next((rec for rec in records), None)
    return {"records": records, "first_full": first_full, "measured": measured,
            "snap0": snap0, "snap1": snap1, "rss_peak": st.get("VmHWM", rss_max),
            "rss_now": st.get("VmRSS", float("nan")), "rss_max_sampled": rss_max,
            "first_window_start": first_line["window_start"] if first_line else None,
            "first_window_done": (first_line["window_start"] + first_line["done_after_boundary"]
                                  if first_line else None),
            "started": started, "load": os.getloadavg()}


def measurement_snapshot(cp, prom, pids: dict[str, int]) -> dict:
    return {"t": time.time(), "api": apiserver_counts(cp), "cpu": cpu_snapshot(pids),
            "qr": prom_counter(prom, "prometheus_http_requests_total", "/api/v1/query_range"),
            "qr_sum": prom_counter(prom, "prometheus_http_request_duration_seconds_sum",
                                   "/api/v1/query_range"),
            "qr_count": prom_counter(prom, "prometheus_http_request_duration_seconds_count",
                                     "/api/v1/query_range")}


def scrape_stats(prom, span_s: float) -> dict:
    span = f"{max(10, int(span_s))}s"
    out = {}
    for key, q in (("avg", f"avg_over_time(scrape_duration_seconds[{span}])"),
                   ("max", f"max_over_time(scrape_duration_seconds[{span}])"),
                   ("samples", "scrape_samples_scraped")):
        try:
            res = prom.query(q)
            out[key] = max(float(r["value"][1]) for r in res) if res else float("nan")
        except Exception as err:  # noqa: BLE001 - a benchmark reports what it can
            out[key] = float("nan")
            log(f"query {q!r} failed: {err}")
    return out


# ----------------------------------------------------------------------------- breakdown
def breakdown_window(args, api_admin, op_kubeconfig: Path, prom_url: str,
                     pids: dict[str, int]) -> dict:
    """One WindowRunner.run in this process, with timers around its stages and API calls."""
    from kubernetes import client, config

    from ai4dl.controller import runtime
    from ai4dl.controller.pods import pod_info
    from ai4dl.crd import GROUP, OPT_IN_LABEL, PLURAL, VERSION
    from ai4dl.sources.prometheus import PrometheusSource

    # the operator's client (handlers._clients): a connection pool for its parallel writers
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(op_kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = getattr(runtime, "WRITERS", 1) + 2
    api = client.ApiClient(cfg)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    source = PrometheusSource(prom_url, timeout=args.prometheus_timeout, retries=1)
    runner = runtime.WindowRunner(core, custom, source, NAMESPACE, PM_NAME)
    admin_custom = client.CustomObjectsApi(api_admin)
    admin_core = client.CoreV1Api(api_admin)

    def snapshot():
        pm = admin_custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, PM_NAME)
        raw = admin_core.list_namespaced_pod(NAMESPACE, label_selector=f"{OPT_IN_LABEL}=true",
                                             _preload_content=False)
        pods = [pod_info(p) for p in json.loads(raw.data)["items"]]
        return pm, pods

    # warm the model cache (the operator builds the model once, at its first window)
    pm, _ = snapshot()
    from ai4dl.crd import PhaseModelSpec

    t = time.perf_counter()
    runner.models.get(PhaseModelSpec.model_validate(pm["spec"]))
    model_build = time.perf_counter() - t

    # as the operator's daemon: wake just after the next boundary + settle
    now = time.time()
    wake = runtime.window_start(now, args.window) + args.window + args.settle
    log(f"breakdown: waiting {wake - now:.1f} s for the next window boundary")
    time.sleep(max(0.0, wake - time.time()))
    t = time.perf_counter()
    pm, pods = snapshot()
    snapshot_s = time.perf_counter() - t

    tm = Timer()
    patches: list[tuple[str, str, dict]] = []
    orig_plan = runtime.plan_window
    saved = {}

    def wrap_attr(obj, attr, stage):
        saved[(id(obj), attr)] = (obj, attr, getattr(obj, attr))
        setattr(obj, attr, tm.wrap(stage, getattr(obj, attr)))

    orig_patch_pod = core.patch_namespaced_pod

    def patch_pod(name, namespace, body, **kw):
        patches.append((name, namespace, body))
        return orig_patch_pod(name, namespace, body, **kw)

    core.patch_namespaced_pod = patch_pod
    wrap_attr(source, "fetch", "fetch")
    wrap_attr(source, "_post", "fetch: HTTP + JSON decode")
    wrap_attr(runner, "_apply", "_apply")
    wrap_attr(runner, "_status", "status patch (PhaseModel)")
    wrap_attr(core, "patch_namespaced_pod_resize", "resize patches")
    wrap_attr(core, "patch_namespaced_pod", "annotation patches")
    wrap_attr(core, "create_namespaced_event", "events")
    wrap_attr(api, "response_deserialize", "client: response -> models")
    runtime.plan_window = tm.wrap("plan_window", orig_plan)
    try:
        cpu0 = cpu_snapshot(pids)
        t = time.perf_counter()
        report = runner.run(pm, pods)
        total = time.perf_counter() - t
        cpu1 = cpu_snapshot(pids)
    finally:
        runtime.plan_window = orig_plan
        for obj, attr, fn in saved.values():
            setattr(obj, attr, fn)
        core.patch_namespaced_pod = orig_patch_pod
    return {"report": report, "total": total, "timer": tm, "patches": patches,
            "model_build": model_build, "snapshot": snapshot_s, "pods": len(pods),
            "queries": source.query_count, "api": api,
            "cpu": {k: cpu1[k] - cpu0[k] for k in cpu0}}


def whatif_patches(api_op, patches: list[tuple[str, str, dict]], threads: int) -> list[list]:
    """The window's annotation patches again (plus a changing key, so every one is a real
    write): sequentially, and through a pool of ``threads``, with and without deserializing
    the answer into client models, and with ``_preload_content=False`` but the raw answer never
    read (then urllib3 never gets the connection back: a new TLS connection per request)."""
    from kubernetes import client

    api_op.configuration.connection_pool_maxsize = 2 * threads + 2
    api_op.rest_client.pool_manager.connection_pool_kw["maxsize"] = 2 * threads + 2
    core = client.CoreV1Api(api_op)
    rows = []
    def connections() -> int:
        """Connections the client's pools have opened so far (each one a TLS handshake)."""
        return sum(pool.num_connections
                   for pool in api_op.rest_client.pool_manager.pools._container.values())

    # (label, threads, _preload_content, read the raw answer)
    variants = (("1 thread, answer -> V1Pod", 1, True, True),
                ("1 thread, raw answer read", 1, False, True),
                (f"{threads} threads, answer -> V1Pod", threads, True, True),
                (f"{threads} threads, raw answer read", threads, False, True),
                (f"{threads} threads, raw answer never read (connection not reused)", threads,
                 False, False),
                (f"{2 * threads} threads, raw answer read", 2 * threads, False, True))
    for label, n_threads, preload, read in variants:
        stamp = f"{time.time():.3f}"

        def one(p, preload=preload, read=read, stamp=stamp):
            name, ns, body = p
            ann = dict(body["metadata"]["annotations"], **{"bench.ai4dl.io/replay": stamp})
            r = core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": ann}},
                                          _preload_content=preload)
            if not preload and read:
                r.read()        # drains the body: urllib3 then returns the connection to the pool

        c0, cpu0 = connections(), time.process_time()
        t = time.perf_counter()
        if n_threads == 1:
            for p in patches:
                one(p)
        else:
            with ThreadPoolExecutor(n_threads) as pool:
                list(pool.map(one, patches))
        dt = time.perf_counter() - t
        cpu = time.process_time() - cpu0
        rows.append([label, len(patches), dt, len(patches) / dt if dt else float("nan"),
                     1000.0 * cpu / len(patches) if patches else float("nan"),
                     connections() - c0])
        log(f"what-if {label}: {len(patches)} patches in {dt:.2f} s")
    return rows


# ----------------------------------------------------------------------------- main
def serving_table(pods: int, window: int, kinds: list[str], repeats: int = 15,
                  traces: str = "ai4dl-samples") -> str:
    """--serving: what choosing a policy costs per window, in-process and without a cluster:
    plan_window (detect + serve + safety + QoS rules) for ``pods`` pods of one PhaseModel, per
    spec.policy.kind, on the same samples and running statistics (median of ``repeats``)."""
    from ai4dl.controller.plan import plan_window
    from ai4dl.controller.pods import pod_info
    from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL, PhaseModelSpec
    from ai4dl.model import PhaseModel

    played, fit_on, _ = load_jobs(traces)
    doc, _ = fit_model_doc(fit_on, window)
    model = PhaseModel.from_document(doc)
    n_ctx = model.crbm_.n_history
    rng = np.random.default_rng(0)
    samples, infos = {}, []
    for i in range(pods):
        ex = played[i % len(played)]
        at = int(rng.integers(0, max(1, len(ex) - window - n_ctx)))
        x = ex.select(model.features_).values[at: at + window + n_ctx]
        samples[(NAMESPACE, f"job-{i:05d}", "main")] = x
        infos.append(pod_info({
            "metadata": {"name": f"job-{i:05d}", "namespace": NAMESPACE, "uid": f"u{i}",
                         "labels": {OPT_IN_LABEL: "true", "app": "train"},
                         "annotations": {MODEL_ANNOTATION: PM_NAME}},
            "spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": "4", "memory": "16Gi"}}}]},
            "status": {"phase": "Running"}}))
    from ai4dl.policy.online import next_allocations

    rows = [f"| spec.policy.kind | served | plan_window, {pods:,} pods (median of {repeats}) "
            f"| of it, the served policy (next_allocations) | per pod |", "|---|---|---|---|---|"]
    base = None
    for kind in kinds:
        spec = PhaseModelSpec.model_validate({
            "selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 1,
            "windowSeconds": window, "policy": {"mode": "InPlace", "kind": kind},
            "model": doc})
        histories: dict = {}
        times = []
        for r in range(repeats + 1):
            t = time.perf_counter()
            plan = plan_window(spec, model, infos, samples, n_ctx, 1.8e9 + r * window,
                               "2027-01-01T00:00:00Z", histories=histories, model_key="k")
            times.append(time.perf_counter() - t)
            for p in plan.pods:          # the runtime keeps the running statistics
                for c in p.containers:
                    if c.own is not None:
                        histories[(p.pod.uid, c.name)] = ("k", c.own)
        med = statistics.median(times[1:])
        base = med if base is None else base
        planned = [(p, c) for p in plan.pods for c in p.containers if c.own is not None]
        lasts = np.stack([samples[(NAMESPACE, p.pod.name, c.name)][-window:][
            :, [model.features_.index(r) for r in plan.resources]] for p, c in planned])
        phases = np.stack([model.predict(samples[(NAMESPACE, p.pod.name, c.name)],
                                         n_context=n_ctx) for p, c in planned])
        owns = [c.own for _, c in planned]
        serve = []
        for _ in range(repeats):
            t = time.perf_counter()
            next_allocations(plan.served.policy, lasts, phases, owns)
            serve.append(time.perf_counter() - t)
        sv = statistics.median(serve)
        rows.append(f"| {kind} | {plan.served.summary()} | {med * 1000:.0f} ms "
                    f"({med / base:.2f} ×) | {sv * 1000:.1f} ms | {sv / pods * 1e6:.1f} µs |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--window", type=int, default=10, help="windowSeconds (wall s); step 1 s")
    ap.add_argument("--windows", type=int, default=4, help="windows to measure")
    ap.add_argument("--speed", type=float, default=15.0, help="trace seconds per wall second")
    ap.add_argument("--threads", type=int, default=8, help="threads creating pods (and in the "
                    "what-if)")
    ap.add_argument("--prometheus-timeout", type=float, default=10.0,
                    help="the operator's --prometheus-timeout (default 10, its own default)")
    ap.add_argument("--settle", type=float, default=1.5, help="the operator's --settle-seconds")
    ap.add_argument("--timeout", type=float, default=0.0,
                    help="give up measuring after this many s (default: 300 s + 10 windows "
                         "per window measured)")
    ap.add_argument("--in-phase", action="store_true",
                    help="start every pod in the first epoch of its execution (as the "
                         "integration test does), so all change phase together; default: "
                         "random points of the executions")
    ap.add_argument("--traces", choices=("ai4dl-samples", "synthetic"), default="ai4dl-samples",
                    help="what the pods play: the real DLaaS training containers of "
                         "$AI4DL_DATA/ai4dl_samples (default) or synthetic DL jobs")
    ap.add_argument("--no-breakdown", action="store_true", help="skip tables 2 and 3")
    ap.add_argument("--kind", default="auto", help="the PhaseModel's spec.policy.kind "
                    "(auto: the choice fitted with the model; phase, phase-headroom, ...)")
    ap.add_argument("--keep", action="store_true", help="keep the logs folder")
    ap.add_argument("--serving", action="store_true",
                    help="only the in-process table of plan_window per spec.policy.kind "
                         "(phase, phase-headroom, burst-headroom, auto, adaptive-max): what "
                         "serving a policy costs per window, no cluster")
    args = ap.parse_args(argv)
    if args.serving:
        print(serving_table(args.pods, args.window, ["phase", "phase-headroom",
                                                     "burst-headroom", "auto", "adaptive-max"]))
        return 0
    if not args.timeout:
        args.timeout = 300 + 10 * args.window * (args.windows + 2)

    # Ctrl-C and SIGTERM unwind through the finally below
    def on_term(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)

    from e2e.controlplane import cluster as cpmod
    from e2e.prometheus.exporter import TraceExporter
    from e2e.prometheus.server import PrometheusServer, find_prometheus

    workdir = Path(tempfile.mkdtemp(prefix="ai4dl-bench-op-"))
    cp = prom = exporter = op = None
    results: dict = {}
    try:
        log("checking binaries (e2e/controlplane/build.sh, e2e/prometheus/install.sh)")
        cpmod.ensure_binaries(quiet=True)
        prom_bin = find_prometheus(install=True)

        results["load_before"] = os.getloadavg()[0]
        log(f"load average {results['load_before']:.2f}; fitting the model")
        if results["load_before"] > 0.5:
            log("WARNING: something else is using the CPU: the numbers will be pessimistic "
                "(see 'other processes' in the CPU row)")
        played, fit_on, first = load_jobs(args.traces)
        model_doc, fit_s = fit_model_doc(fit_on, args.window)
        results["fit"] = fit_s

        log("starting etcd + kube-apiserver")
        cp = cpmod.ControlPlane(startup_timeout=120)
        cp.start()
        results["cp_start"] = cp.startup_seconds
        api, op_kubeconfig = setup_cluster(cp, workdir)

        log("starting the exporter and Prometheus")
        exporter = TraceExporter({}, speed=args.speed, loop=True)
        exporter.start()
        prom = PrometheusServer([exporter.url], scrape_interval="1s", binary=prom_bin)
        prom.start()

        names = [f"job-{i:05d}" for i in range(args.pods)]
        log(f"creating {args.pods} pods ({args.threads} threads)")
        results["pod_create"] = create_pods(api, names, args.threads)
        log(f"pods created in {results['pod_create']:.1f} s")
        for name, (ex, offset) in zip(names, exporter_jobs(played, first, args.in_phase,
                                                                     args.pods)):
            exporter.add_pod((NAMESPACE, name, "main"), ex, offset=offset)
        make_phasemodel(api, model_doc, args.window, 1, args.kind)

        log("waiting for Prometheus to scrape every pod")
        deadline = time.time() + 120
        while True:
            res = prom.query(f'count(container_memory_working_set_bytes{{namespace="{NAMESPACE}"}})')
            got = int(float(res[0]["value"][1])) if res else 0
            if got >= args.pods or time.time() > deadline:
                break
            time.sleep(0.5)
        log(f"Prometheus has {got} pods")

        if not args.no_breakdown:
            # a window needs its W samples plus the model's history in Prometheus
            crbm = model_doc.get("crbm", {})
            need = args.window + int(crbm.get("n_history") or crbm.get("nHistory") or 3) + 3
            log(f"breakdown: waiting for {need} scrapes")
            prom.wait_for_samples("container_memory_working_set_bytes", count=need,
                                  timeout=need + 60, selector=f'namespace="{NAMESPACE}"')
            log("breakdown: one WindowRunner.run in this process, before the operator starts "
                "(every pod is new: the heaviest window)")
            bd = breakdown_window(args, api, op_kubeconfig, prom.url, process_pids(cp, prom))
            results["bd"] = bd
            results["whatif"] = whatif_patches(bd["api"], bd["patches"], args.threads)

        log("starting the operator")

        op = OperatorProcess(op_kubeconfig, prom.url, workdir / "operator.log",
                             args.prometheus_timeout, args.settle).start()
        t_op = time.time()
        results["op"] = run_operator_phase(args, op, cp, prom)
        results["scrape"] = scrape_stats(prom, time.time() - t_op)
        results["render"] = exporter.last_render_seconds
        if op.alive:
            st = proc_status(op.proc.pid)
            results["op"]["rss_peak"] = st.get("VmHWM", results["op"]["rss_peak"])
        op.stop()
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        return 130
    finally:
        if op is not None:
            op.stop()
            if args.keep or "op" not in results:
                tail = "\n".join(op.log_lines()[-20:])
                log(f"operator log tail:\n{tail}")
        if prom is not None:
            with contextlib.suppress(Exception):
                prom.cleanup()
        if exporter is not None:
            with contextlib.suppress(Exception):
                exporter.stop()
        if cp is not None:
            with contextlib.suppress(Exception):
                cp.stop()
        if args.keep:
            log(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    report(args, results)
    return 0


def report(args, results: dict) -> None:
    op = results["op"]
    measured = op["measured"]
    secs = [r["seconds"] for r in measured if r["seconds"] is not None]
    done = [r["done_after_boundary"] for r in measured]
    n = len(measured)
    s0, s1 = op["snap0"], op["snap1"]
    writes = {}
    qr = qr_lat = float("nan")
    if s0 and s1 and n:
        for key, v in s1["api"].items():
            # leases: the API server's own heartbeat, not the operator's
            if key[0] in ("POST", "PUT", "PATCH", "DELETE", "APPLY") and key[1] != "leases":
                d = v - s0["api"].get(key, 0.0)
                if d > 0:
                    writes[key] = d / n
        qr = (s1["qr"] - s0["qr"]) / n
        dc = s1["qr_count"] - s0["qr_count"]
        qr_lat = (s1["qr_sum"] - s0["qr_sum"]) / dc if dc else float("nan")
    starts = [r["window_start"] for r in measured]
    if op["first_full"] is not None:
        starts = [op["records"][op["first_full"]]["window_start"]] + starts
    missed = sum(int(round((b - a) / args.window)) - 1 for a, b in zip(starts, starts[1:]))
    first = op["records"][op["first_full"]] if op["first_full"] is not None else None
    resized = [r["resized"] for r in measured]

    def write_str():
        if not writes:
            return "n/a"
        parts = [f"{v:.0f} {verb} {res}{'/' + sub if sub else ''}"
                 for (verb, res, sub), v in sorted(writes.items(), key=lambda kv: -kv[1])]
        return f"{sum(writes.values()):.0f} ({', '.join(parts)})"

    def cpu_str():
        if not (s0 and s1 and n):
            return "n/a"
        span = s1["t"] - s0["t"]
        d = {k: (s1["cpu"][k] - s0["cpu"][k]) / span for k in s0["cpu"]}
        return (f"{sum(d.values()):.2f} over {span:.0f} s (" +
                ", ".join(f"{k} {v:.2f}" for k, v in d.items()) + ")")

    def op_cpu_per_write():
        if not (s0 and s1 and n and writes):
            return "n/a"
        cpu = s1["cpu"]["operator"] - s0["cpu"]["operator"]
        return 1000.0 * cpu / (sum(writes.values()) * n)

    sc = results.get("scrape", {})
    rows = [
        ["pods", args.pods, ""],
        ["what the pods play", "5 real DLaaS training containers (ai4dl_samples)"
         if args.traces == "ai4dl-samples" else "6 synthetic DL jobs", f"at {args.speed:g}x"],
        ["load average before the benchmark started (1 min)",
         results.get("load_before", float("nan")), "< 1 for clean numbers"],
        ["windows measured (after the first with all pods)", f"{n} of {args.windows}", ""],
        ["window processing, median (s)", statistics.median(secs) if secs else None,
         f"<= {args.window}"],
        ["window processing, max (s)", max(secs) if secs else None, f"<= {args.window}"],
        ["window processing, first window with all pods (s)",
         first["seconds"] if first else None, ""],
        ["window done after its boundary, median / max (s) (incl. settle "
         f"{args.settle} s)", f"{fmt(statistics.median(done)) if done else 'n/a'} / "
                              f"{fmt(max(done)) if done else 'n/a'}", f"< {args.window}"],
        ["window boundaries missed while measuring", missed, "0"],
        ["operator start -> first window begins / ends (s)",
         f"{fmt(op['first_window_start'] + args.settle - op['started'], 1)} / "
         f"{fmt(op['first_window_done'] - op['started'], 1)}"
         if op.get("first_window_start") else "n/a", ""],
        ["operator RSS peak, VmHWM (MiB)", op["rss_peak"], "<= 286 (300 MB)"],
        ["operator RSS at end, VmRSS (MiB)", op["rss_now"], ""],
        ["Prometheus range queries per window", qr, "1"],
        ["query_range latency in Prometheus, mean (s)", qr_lat, ""],
        ["resizes per window, mean (min-max)",
         f"{statistics.mean(resized):.0f} ({min(resized)}-{max(resized)})" if resized else "n/a",
         ""],
        ["API writes per window (apiserver_request_total)", write_str(), ""],
        [f"CPU used while measuring, cores (of {os.cpu_count()})", cpu_str(), ""],
        ["operator CPU per API write (ms)", op_cpu_per_write(), ""],
        ["exporter scrape duration, mean / max (s)",
         f"{fmt(sc.get('avg'), 3)} / {fmt(sc.get('max'), 3)}", "< 1 (scrape interval)"],
        ["samples per scrape", sc.get("samples"), ""],
        ["exporter render time, last (s)", results.get("render"), ""],
        [f"pod creation ({args.threads} threads) (s)", results.get("pod_create"), ""],
        ["control-plane start (s)", results.get("cp_start"), ""],
        ["model fit (s)", results.get("fit"), ""],
    ]
    print(f"\n## Operator at {args.pods} pods, window {args.window} s, step 1 s, "
          f"speed {args.speed:g}x ({os.cpu_count()} cores)\n")
    print(table(["metric", "value", "target"], rows))

    print("\nPer window (the operator's log and histogram):\n")
    wrows = []
    for i, r in enumerate(op["records"]):
        role = ("first full" if i == op["first_full"] else
                "measured" if op["first_full"] is not None and i > op["first_full"] else "warm-up")
        wrows.append([time.strftime("%H:%M:%S", time.localtime(r["window_start"])), role,
                      r["pods"], r["resized"], r["seconds"],
                      f"<= {r['bucket']:g}" if r["bucket"] else "n/a",
                      r["done_after_boundary"], r["skipped"]])
    print(table(["window", "role", "pods", "resized", "processing (s)", "histogram bucket",
                 "done after boundary (s)", "skipped"], wrows))

    bd = results.get("bd")
    if bd:
        tm, total = bd["timer"], bd["total"]
        sec, calls = tm.seconds, tm.calls
        rep = bd["report"]
        apply_s = sec.get("_apply", 0.0)
        fetch = sec.get("fetch", 0.0)
        http = sec.get("fetch: HTTP + JSON decode", 0.0)
        status_s = sec.get("status patch (PhaseModel)", 0.0)
        writers = getattr(__import__("ai4dl.controller.runtime", fromlist=["x"]), "WRITERS", 1)

        def row(stage, key=None, wall=None):
            c = calls.get(key, 0) if key else ""
            v = sec.get(key, 0.0) if key else None
            if wall is not None:
                v = wall
            share = f"{100 * v / total:.0f} %" if (wall is not None or key in (
                "fetch", "plan_window", "_apply", "status patch (PhaseModel)")) and total else ""
            per = f"{1000 * sec.get(key, 0.0) / c:.1f}" if key and c else ""
            return [stage, c, v, share, per]

        brows = [
            row("source.fetch (one range query)", "fetch"),
            row("  of which HTTP + JSON decode (_post)", "fetch: HTTP + JSON decode"),
            ["  of which placing points (numpy)", "", fetch - http, "", ""],
            row("plan_window (detect + policy + safety)", "plan_window"),
            row(f"_apply: pod writes ({writers} writer threads), wall", "_apply"),
            row("  resize patches (pods/resize), thread-seconds", "resize patches"),
            row("  annotation patches (pods), thread-seconds", "annotation patches"),
            row("  events (Resized), thread-seconds", "events"),
            row("  client answer -> models, all calls, thread-seconds",
                "client: response -> models"),
            row("status patch (PhaseModel)", "status patch (PhaseModel)"),
            row("rest of run (spec, selector, model cache, own metrics)",
                wall=total - fetch - sec.get("plan_window", 0.0) - apply_s - status_s),
            row("**WindowRunner.run total (wall)**", wall=total),
        ]
        print(f"\n## Where one window's time goes ({bd['pods']} pods, {rep.resized} resized, "
              f"skipped {rep.skipped}; one WindowRunner.run in the benchmark process before the "
              "operator starts)\n")
        print(table(["stage", "calls", "seconds", "share of wall", "ms per call"], brows))
        cpu = bd.get("cpu") or {}
        print(f"\nCPU seconds during that run ({total:.2f} s wall, 2 cores): "
              + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
              + f". Not in the window above: model built from the document once "
              f"{bd['model_build']:.2f} s (first window only); list + pod_info of {bd['pods']} "
              f"pods {bd['snapshot']:.2f} s (the operator does the same LIST at the start of "
              f"each window). Range queries sent: {bd['queries']}.")
    wi = results.get("whatif")
    if wi:
        print("\n## What-if: the same annotation patches (+1 changing key), other ways\n")
        print(table(["how", "patches", "seconds", "patches/s",
                     "client CPU per patch (ms, incl. exporter)", "new TLS connections"], wi))


if __name__ == "__main__":
    sys.exit(main())
