"""Benchmark of the kopf operator at scale. Prints markdown tables; asserts nothing, but a run
that measured nothing (see measured_nothing; --serving: a kind that sized no pod) prints no
table, says why in one line on stderr and exits 1 (issue 44).

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

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

# the parts live in bench/operator_bench (see its __init__); common also puts the repository
# and tests/ on sys.path, as this script always did
from operator_bench.cluster import (OperatorProcess, create_pods, exporter_jobs, fit_model_doc,
                                    load_jobs, make_phasemodel, setup_cluster)
from operator_bench.common import NAMESPACE, log, proc_status
from operator_bench.measure import (breakdown_window, process_pids, run_operator_phase,
                                    scrape_stats, whatif_patches)
from operator_bench.report import breakdown, report
from operator_bench.serving import serving_table
from measured import refuse


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
    ap.add_argument("--kube-api-qps", type=float, default=None,
                    help="the operator's --kube-api-qps (default: the chart's 50 a second scaled "
                         "by the compressed clock, 50 x 600 / --window: the writes a real "
                         "10-minute window may make, in this benchmark's window); burst 2 x")
    ap.add_argument("--serving", action="store_true",
                    help="only the in-process table of plan_window per spec.policy.kind "
                         "(phase, phase-headroom, burst-headroom, auto, adaptive-max): what "
                         "serving a policy costs per window, no cluster")
    args = ap.parse_args(argv)
    if args.pods < 1:
        return refuse("bench_operator", f"--pods {args.pods}: no pod to serve")
    if args.serving:
        why, text = serving_table(args.pods, args.window, ["phase", "phase-headroom",
                                                           "burst-headroom", "auto",
                                                           "adaptive-max"], traces=args.traces)
        if why:
            return refuse("bench_operator", why)
        print(text)
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

        qps = args.kube_api_qps if args.kube_api_qps is not None else 50 * 600 / args.window
        log(f"starting the operator (--kube-api-qps {qps:g}, --kube-api-burst "
            f"{max(1, int(2 * qps))})")
        op = OperatorProcess(op_kubeconfig, prom.url, workdir / "operator.log",
                             args.prometheus_timeout, args.settle,
                             ("--kube-api-qps", f"{qps:g}",
                              "--kube-api-burst", str(max(1, int(2 * qps))))).start()
        t_op = time.time()
        results["op"] = run_operator_phase(args, op, cp, prom)
        results["scrape"] = scrape_stats(prom, time.time() - t_op)
        results["render"] = exporter.last_render_seconds
        if op.alive:
            st = proc_status(op.proc.pid)
            # the peak since the last window's line (VmHWM is reset at each one) and before it
            results["op"]["rss_peak"] = max(st.get("VmHWM", 0.0), results["op"]["rss_peak"])
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

    why = measured_nothing(results, args.pods)
    if why:
        breakdown(results, sys.stderr)      # where the window went instead
        return refuse("bench_operator", why)
    report(args, results)
    return 0


def measured_nothing(results: dict, pods: int) -> str | None:
    """Why the run measured nothing (None when it measured something): no window served every
    pod created, a measured window served fewer, or no measured window resized anything (issue
    44: a model the operator refused read "0 pods, 0 resized" in every window, and a table was
    printed). The measured windows, not the warm-up ones: a first window that resized every
    pod says nothing of the windows the table reports."""
    op = results.get("op") or {}
    measured = op.get("measured") or []
    if op.get("first_full") is None:
        seen = max((r["pods"] for r in op.get("records") or []), default=0)
        return f"no window served all {pods} pods created (at most {seen})"
    if not measured:
        return "no window measured after the first full one"
    short = [r for r in measured if r["pods"] < pods]
    if short:
        return (f"{len(short)} of {len(measured)} measured windows served fewer than the "
                f"{pods} pods created (e.g. {short[0]['pods']})")
    if not any(r["resized"] for r in measured):
        late = sum("window-deadline" in r.get("skipped", "") for r in measured)
        why = (f"in {late} of them the resizes waited for the next window (window-deadline): "
               "listing, querying and planning took the window" if late else
               "a refused model serves nothing")
        return f"none of the {len(measured)} measured windows resized any pod ({why})"
    return None


if __name__ == "__main__":
    sys.exit(main())
