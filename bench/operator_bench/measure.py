"""bench/bench_operator.py's measurements: the operator's counters and the API server's and
Prometheus' while it runs (table 1), one WindowRunner.run timed stage by stage (table 2) and the
what-if of its write path (table 3). Separate from the set-up and from the printing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .cluster import OperatorProcess
from .common import (NAMESPACE, PM_NAME, Timer, cpu_snapshot, fmt, log, parse_metrics,
                     proc_status, take_peak_rss)


WINDOW_LINE = re.compile(r"PhaseModel (\S+)/(\S+) window ([\d.]+): (\d+) pods, (\d+) resized, "
                         r"skipped (.*)$")


def operator_sample(op: OperatorProcess) -> dict:
    """The operator's counters for our PhaseModel."""
    want = {"ai4dl_window_duration_seconds_sum", "ai4dl_window_duration_seconds_count",
            "ai4dl_window_duration_seconds_bucket", "ai4dl_pods_tracked", "ai4dl_resizes_total",
            "ai4dl_errors_total", "ai4dl_skipped_windows_total",
            "ai4dl_pod_records_written_total"}
    out = {"sum": 0.0, "count": 0.0, "buckets": {}, "pods": 0.0, "resizes": 0.0, "errors": {},
           "skipped": {}, "records": {"needed": 0.0, "optional": 0.0}}
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
        elif name == "ai4dl_pod_records_written_total":
            out["records"][labels.get("why", "")] = v
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


# ----------------------------------------------------------------------------- measurement
def process_pids(cp, prom, op=None) -> dict[str, int]:
    pids = {"kube-apiserver": cp.apiserver.pid, "etcd": cp.etcd.pid,
            "prometheus": prom._proc.pid, "benchmark process": os.getpid()}
    if op is not None:
        pids = {"operator": op.proc.pid, **pids}
    return pids


#: How long after seeing a window's line its RSS is read (the round's trim follows the line)
TRIM_WAIT_SECONDS = 0.1


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
    # the peak RSS since the last window line (VmHWM, reset at each line): a window's own peak
    # (its pods, the answer and the plan are held then), which the RSS read at its line misses
    peaks: list[float] = []
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
            # the RSS once the window is done: its line is written just before the round's
            # trim, and the status read before the log may be of the window's last writes
            time.sleep(TRIM_WAIT_SECONDS)
            after = proc_status(op.proc.pid).get("VmRSS")
            peak = take_peak_rss(op.proc.pid)
            if peak is not None:
                peaks.append(peak)
            cur = operator_sample(op)
            for _, m in wins[seen_lines:]:
                wstart = float(m.group(3))
                rec = {"window_start": wstart, "pods": int(m.group(4)),
                       "resized": int(m.group(5)), "skipped": m.group(6).split("; started")[0],
                       "done_after_boundary": seen - wstart,
                       "seconds": None, "bucket": None, "rss": after,
                       "rss_window_peak": peak}
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
            records[-1]["records_written"] = {
                why: v - prev["records"].get(why, 0.0) for why, v in cur["records"].items()}
            prev = cur
            seen_lines = len(wins)
            r = records[-1]
            log(f"window {r['window_start']:.0f}: {r['pods']} pods, {r['resized']} resized, "
                f"{fmt(r['seconds'])} s processing (bucket <= {r['bucket']}), finished "
                f"{r['done_after_boundary']:.1f} s after the boundary; skipped {r['skipped']}; "
                f"operator RSS {fmt(after, 0)} MiB (peak since the last window "
                f"{fmt(r['rss_window_peak'], 0)})")
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
            "snap0": snap0, "snap1": snap1,
            "rss_peak": max([st.get("VmHWM", rss_max), *peaks]),
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
    from ai4dl.crd_spec import PhaseModelSpec

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
    """The window's annotation patches again (with a changing ``ai4dl.io/phase-since``, so
    every one is a real write): sequentially, and through a pool of ``threads``, with and
    without deserializing the answer into client models, and with ``_preload_content=False``
    but the raw answer never read (then urllib3 never gets the connection back: a new TLS connection per request)."""
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
            # the changing value goes into one of the operator's own annotations: the chart's
            # admission policy refuses it any other key (ai4dl-operator-pod-writes)
            ann = dict(body["metadata"]["annotations"], **{"ai4dl.io/phase-since": stamp})
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
