"""Benchmark of the batch trainer's history pull and fit. Prints a markdown table; asserts
nothing, but a run that measured nothing (no pod to write, nothing pulled back, fewer containers
pulled than written, nothing held out to score; with --replay no workload or no request found)
prints no table, says why in one line on stderr and exits 1 (issue 44).

    .venv/bin/python bench/bench_trainer.py [--pods 1000] [--hours 24] [--epochs 60]
                                            [--max-samples N] [--concurrency 2] [--replay]
                                            [--engine local,dask --workers 1,2]

--pods containers of synthetic DL jobs (ai4dl.method.synthetic.generate_fixed_length, cpu cores and
memory bytes; 200 distinct jobs shared round-robin) with --hours of 15 s samples each (6 h
jobs in a row: four container runs a day), ending ten minutes ago, are written as cAdvisor
series (e2e/prometheus/backfill.py: OpenMetrics, then ``promtool tsdb
create-blocks-from openmetrics``) into the storage of a real Prometheus (the test server,
install.sh). Then a fresh child process does what ``ai4dl train --prometheus`` does up to the
apply: the chunked pull (PrometheusHistory, newest chunks first, capped at --max-samples as
the trainer's default), the held-out split, the fit (PhaseModel defaults, CPU unless
--device), and the score on the held-out pods with the default policy; it reports its times
and its peak RSS.

``--replay``: the same history, but the child does what ``ai4dl evaluate --prometheus`` does:
the pull (no cap), the owners and requests lookup, the cross-fitted replay of every pod (two
folds: two fits, auto's choice and the head-room tables on each train side, every policy
replayed) and the per-workload table. Each container is then also given its author's
requests (kube-state-metrics' ``kube_pod_container_resource_requests``), so that the requests
lookup finds what it looks for.

``--replay --engine local,dask``: the same history replayed piece by piece (``ai4dl evaluate
--prometheus ... --engine``, issue 44), on each engine once per count of ``--workers``: a
PhaseModel is fitted on 20 of the synthetic jobs (``--epochs``) and given auto's choice as the
trainer does, written as a manifest, and replayed as served (``--phasemodel-file``) by the CLI
in a child process. Per engine and worker count: the wall time, samples replayed a second, the
speed-up over the first row, and the peak RSS of the child and its worker processes together
(sampled every 0.2 s: the pieces run in other processes). Measured nothing (no piece, fewer
containers than written, no workload) refuses.

Peak RSS is the child's ``VmHWM`` (/proc/self/status), not ``getrusage``'s ``ru_maxrss``:
Linux carries the parent's peak RSS over fork + exec into the child's ``ru_maxrss``, so that
figure was the backfill's memory (2.6 GiB), not the trainer's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_HOURS = 6   # one container run per 6 h (synthetic jobs are shorter than a day)
sys.path.insert(0, str(REPO))

from measured import refuse  # noqa: E402


def pod_name(i: int) -> str:
    """Pods of 100 Jobs of 10 pods each, named as the Job controller names them
    (``<job>-<5 letters>``), so the replay groups them into 100 workloads."""
    safe = "bcdfghjklmnpqrstvwxz2456789"
    suffix = "".join(safe[(i * 7 + k * 13) % len(safe)] for k in range(5))
    return f"train{i // 10:03d}-{suffix}"


def author_requests(runs) -> dict:
    """What each container's author asked for (--replay): its peak cpu rounded up to whole
    cores and its peak memory plus a quarter, as kube-state-metrics exports requests."""
    import numpy as np

    out = {}
    for key, execs in runs.items():
        peak = np.max([ex.values.max(axis=0) for ex in execs], axis=0)
        cpu, mem = (execs[0].features.index(f) for f in ("cpu", "memory"))
        out[key] = {"cpu": float(max(1, math.ceil(peak[cpu]))), "memory": float(peak[mem] * 1.25)}
    return out


def measured_nothing(m: dict, args) -> str | None:
    """Why the child's figures ``m`` measured nothing (None when they measured something):
    a pull that found nothing or only part of what was written, a score on no held-out pod,
    or (--replay) a table of no workload, a requests lookup that found none."""
    if m["executions"] == 0 or m["samples"] == 0:
        return (f"{m['executions']} executions, {m['samples']} samples pulled of {args.pods} "
                "pods written")
    if m["containers"] < args.pods:
        return f"{m['containers']} containers pulled of the {args.pods} written"
    if args.replay:
        if m["workloads"] == 0:
            return "the per-workload table has 0 workloads"
        if m["with_requests"] == 0:
            return f"requests found for 0 of {m['containers']} containers"
    elif m["held_out"] == 0:
        return "0 held-out executions scored" + (f" ({m['too_few']})" if "too_few" in m else "")
    return None


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM; see the module doc for why not ru_maxrss)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(url: str, hours: float, device: str, epochs: int, max_samples: int | None,
            concurrency: int) -> dict:
    from ai4dl import trainer as T
    from ai4dl.crd_spec import PhaseModelSpec, default_features
    from ai4dl.method.model import PhaseModel
    from ai4dl.sources.prometheus import PrometheusSource
    from ai4dl.sources.prometheus_types import FeatureQuery
    from ai4dl.sources.prometheus_history import PrometheusHistory
    from ai4dl.method.traces import TraceSet

    out: dict = {}
    now = time.time()
    with PrometheusSource(url, timeout=300) as src:
        hist = PrometheusHistory(src, [FeatureQuery(f.name, f.query) for f in default_features()],
                                 'namespace="bench"', 15.0, concurrency=concurrency)
        t = time.perf_counter()
        res = hist.executions(now - (hours + 1) * 3600, now, max_samples=max_samples)
        out["pull_s"] = time.perf_counter() - t
    out.update(containers=res.pods, series=res.series, queries=res.queries, points=res.points,
               executions=len(res.executions), samples=res.samples,
               skipped_chunks=res.skipped_chunks, dropped_executions=res.dropped_executions,
               dropped_samples=res.dropped_samples,
               pulled_hours=(now - res.pulled_from) / 3600 if res.pulled_from else 0.0)
    out["rss_after_pull_mib"] = peak_rss_mib()
    try:
        train, held = T.split_recent(res.executions)
    except T.TooFewExecutions as err:
        # the parent refuses with the reason: nothing to fit or to score
        out.update(held_out=0, too_few=str(err))
        return out
    t = time.perf_counter()
    model = PhaseModel(device=device, epochs=epochs, random_state=0).fit(TraceSet(train))
    out["fit_s"] = time.perf_counter() - t
    out["fit_timings"] = {k: round(v, 1) for k, v in model.fit_timings_.items()}
    out["epochs"] = model.fit_report_.crbm_epochs
    out["device"] = model.fit_report_.device
    out["phases"] = model.n_phases_
    t = time.perf_counter()
    score = T.score_model(model, held, PhaseModelSpec())
    out["score_s"] = time.perf_counter() - t
    out["held_out"] = score.executions
    out["doc_kib"] = T.document_bytes(json.loads(model.to_document().model_dump_json(
        by_alias=True, exclude_none=True))) / 1024
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def measure_replay(url: str, hours: float, epochs: int, concurrency: int) -> dict:
    """What ``ai4dl evaluate --prometheus URL --selector namespace="bench"`` does, timed."""
    from ai4dl.evaluation import workload_report as wr
    from ai4dl.evaluation.evaluate import EvaluationConfig, run_cross_fitted
    from ai4dl.sources import workloads
    from ai4dl.sources.prometheus import PrometheusSource
    from ai4dl.sources.prometheus_types import default_feature_queries
    from ai4dl.sources.prometheus_history import PrometheusHistory
    from ai4dl.method.traces import TraceSet

    out: dict = {}
    now = time.time()
    start = now - (hours + 1) * 3600
    t = time.perf_counter()
    with PrometheusSource(url, timeout=300) as src:
        hist = PrometheusHistory(src, default_feature_queries(("cpu", "memory")),
                                 'namespace="bench"', 15.0, concurrency=concurrency)
        res = hist.executions(start, now)
        out["pull_s"] = time.perf_counter() - t
        t = time.perf_counter()
        refs = workloads.containers_of(res.executions)
        owner_of, _ = workloads.owners(src, refs, start, now)
        requested = workloads.requests(src, refs, start, now)
        out["owners_s"] = time.perf_counter() - t
    out.update(containers=res.pods, queries=res.queries, executions=len(res.executions),
               samples=res.samples, with_requests=len(requested))
    out["rss_after_pull_mib"] = peak_rss_mib()
    if not res.executions:
        return out                  # the parent refuses: nothing pulled to replay
    stages: list[tuple[float, str]] = []
    t = time.perf_counter()
    result = run_cross_fitted(TraceSet(res.executions), EvaluationConfig(), 2,
                              {"epochs": epochs},
                              on_stage=lambda msg: stages.append((time.perf_counter(), msg)))
    out["replay_total_s"] = time.perf_counter() - t
    # the fits: from "fitting the phase model" to the next stage, in each fold
    out["fit_s"] = sum(stages[i + 1][0] - s for i, (s, msg) in enumerate(stages[:-1])
                       if msg.startswith("fitting the phase model"))
    t = time.perf_counter()
    rows, total = wr.rows_for(result, res.executions, owner_of)
    out["table_s"] = time.perf_counter() - t
    out["workloads"] = len(rows)
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def write_manifest(path: Path, jobs, epochs: int) -> None:
    """A PhaseModel fitted on ``jobs`` and given auto's choice, as the trainer does."""
    import yaml

    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    spec = {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 15,
            "windowSeconds": 600, "policy": {"mode": "Recommend"}}
    model = PhaseModel(epochs=epochs, random_state=0).fit(list(jobs))
    choose_served_policy(model, list(jobs), PhaseModelSpec.model_validate(spec))
    spec["model"] = json.loads(model.to_document().model_dump_json(by_alias=True,
                                                                  exclude_none=True))
    path.write_text(yaml.safe_dump({"apiVersion": "ai4dl.io/v1alpha1", "kind": "PhaseModel",
                                    "metadata": {"name": "bench"}, "spec": spec}))


def run_sampling_rss(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """(the finished command, its wall seconds, the peak RSS in MiB of it and every process
    below it, sampled every 0.2 s)."""
    import threading

    import psutil

    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0.0]
    done = threading.Event()

    def sample():
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                rss = 0
                for p in tree:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        pass
                peak[0] = max(peak[0], rss / 2 ** 20)
            except psutil.Error:
                pass
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    done.set()
    th.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), wall, peak[0]


def engine_table(args, srv, tmp: Path, fit_on, backfill_s: float, samples: int, load) -> int:
    """``--replay --engine``: the piece-by-piece replay per worker count, as a table."""
    manifest = tmp / "phasemodel.yaml"
    t = time.perf_counter()
    write_manifest(manifest, fit_on, args.epochs)
    fit_s = time.perf_counter() - t
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    rows = []
    for name in args.engine.split(","):
        for w in counts:
            out = tmp / f"replay-{name}-{w}.json"
            cmd = [sys.executable, "-m", "ai4dl", "-q", "evaluate", "--prometheus", srv.url,
                   "--selector", 'namespace="bench"', "--since", f"{int(args.hours + 1)}h",
                   "--engine", name, "--workers", str(w), "--piece-containers",
                   str(args.piece_containers), "--phasemodel-file", str(manifest),
                   "--prometheus-timeout", "300", "--json", str(out)]
            r, wall, peak = run_sampling_rss(cmd)
            if r.returncode != 0:
                return refuse("bench_trainer", f"ai4dl evaluate --engine {name} --workers {w} "
                              f"exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
            doc = json.loads(out.read_text())
            why = engine_measured_nothing(doc, args)
            if why:
                return refuse("bench_trainer", why)
            rows.append((f"{name} {w}", wall, peak, doc))
    print(f"\n## ai4dl evaluate --prometheus --engine {args.engine}: {args.pods} pods × "
          f"{args.hours:g} h of 15 s samples (Prometheus {srv.version}, {os.cpu_count()} cores, "
          f"load before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; backfill {backfill_s:.1f} s, "
          f"{samples:,} samples; PhaseModel fitted in {fit_s:.1f} s)\n")
    print("| engine, workers | pieces | containers | samples replayed | wall | samples/s | "
          "speed-up | peak RSS, all processes |\n|---|---|---|---|---|---|---|---|")
    base = rows[0][1]
    for w, wall, peak, doc in rows:
        n = doc["history"]["samples"]
        print(f"| {w} | {doc['engine']['pieces']} | {doc['history']['containers']} | {n:,} | "
              f"{wall:.1f} s | {n / wall:,.0f} | {base / wall:.2f} × | {peak:,.0f} MiB |")
    return 0


def engine_measured_nothing(doc: dict, args) -> str | None:
    """Why a piece-by-piece replay's document measured nothing (None: it measured)."""
    if doc["engine"]["pieces"] == 0 or doc["history"]["samples"] == 0:
        return f"{doc['engine']['pieces']} pieces, {doc['history']['samples']} samples replayed"
    if doc["history"]["containers"] < args.pods:
        return f"{doc['history']['containers']} containers replayed of the {args.pods} written"
    if not doc["workloads"]["rows"]:
        return "the per-workload table has 0 workloads"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--max-samples", type=int, default=None,
                    help="samples kept (default: the trainer's, ai4dl.trainer.MAX_SAMPLES; "
                    "0: no cap)")
    ap.add_argument("--concurrency", type=int, default=2, help="range queries in flight")
    ap.add_argument("--replay", action="store_true", help="time ai4dl evaluate --prometheus "
                    "(pull, cross-fitted fits and replay, per-workload table) instead")
    ap.add_argument("--engine", help="with --replay: the replay piece by piece on these "
                    "engines (ai4dl evaluate --engine; comma-separated: local, dask), each with "
                    "every count of --workers, against the same Prometheus")
    ap.add_argument("--workers", default="1,2", help="with --engine: worker counts, "
                    "comma-separated (default 1,2)")
    ap.add_argument("--piece-containers", type=int, default=50)
    ap.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.pods < 1:
        return refuse("bench_trainer", f"--pods {args.pods}: no pod to write")
    if args.engine and not args.replay:
        return refuse("bench_trainer", "--engine times the replay: give --replay")
    if args.engine and not set(args.engine.split(",")) <= {"local", "dask"}:
        return refuse("bench_trainer", f"--engine {args.engine}: the engines are local, dask")
    if args.max_samples is None:
        from ai4dl.trainer import MAX_SAMPLES

        args.max_samples = MAX_SAMPLES
    if args.measure and args.replay:
        print(json.dumps(measure_replay(args.measure, args.hours, args.epochs,
                                        args.concurrency)))
        return 0
    if args.measure:
        print(json.dumps(measure(args.measure, args.hours, args.device, args.epochs,
                                 args.max_samples or None, args.concurrency)))
        return 0

    import numpy as np

    from ai4dl.method.synthetic import generate_fixed_length
    from ai4dl.method.traces import Execution
    from e2e.prometheus.backfill import backfill, history_server, promtool_next_to
    from e2e.prometheus.server import find_prometheus

    load = os.getloadavg()
    n = int(args.hours * 3600 // 15)
    binary = find_prometheus(install=True)
    with tempfile.TemporaryDirectory(prefix="ai4dl-bench-trainer-") as tmp:
        t = time.perf_counter()
        # Synthetic jobs are shorter than a day: each pod runs one 6 h job after another
        # (container runs, as after restarts).
        part = int(RUN_HOURS * 3600 // 15)
        runs_per_pod = max(1, n // part)
        jobs = generate_fixed_length(min(200, runs_per_pod * args.pods), part, seed=0,
                                     n_features=2)
        end = time.time() // 15 * 15 - 600
        t0 = end - 15.0 * (runs_per_pod * part - 1)
        steps = 15.0 * np.arange(part)
        runs = {}
        for i in range(args.pods):
            runs[("bench", pod_name(i), "main")] = [
                Execution(j.name, t0 + 15.0 * part * r + steps, j.values, j.features, j.units,
                          step=15.0)
                for r, j in enumerate(jobs[(runs_per_pod * i + r) % len(jobs)]
                                      for r in range(runs_per_pod))]
        gen_s = time.perf_counter() - t
        srv = history_server(targets=[], workdir=Path(tmp) / "prom", binary=binary)
        t = time.perf_counter()
        kube_state = {"requests": author_requests(runs)} if args.replay else {}
        samples = backfill(runs, srv.storage_path, promtool_next_to(binary), **kube_state)
        backfill_s = time.perf_counter() - t
        fit_on = [j for j in jobs[:20]]
        del runs, jobs
        srv.start()
        if args.engine:
            try:
                return engine_table(args, srv, Path(tmp), fit_on, backfill_s, samples, load)
            finally:
                srv.cleanup()
        try:
            r = subprocess.run([sys.executable, __file__, "--measure", srv.url, "--hours",
                                str(args.hours), "--device", args.device, "--epochs",
                                str(args.epochs), "--max-samples", str(args.max_samples),
                                "--concurrency", str(args.concurrency)]
                               + (["--replay"] if args.replay else []),
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(r.stderr[-3000:])
            m = json.loads(r.stdout.strip().splitlines()[-1])
        finally:
            srv.cleanup()
    why = measured_nothing(m, args)
    if why:
        return refuse("bench_trainer", why)
    if args.replay:
        print(f"\n## ai4dl evaluate --prometheus: {args.pods} pods × {args.hours:g} h of 15 s "
              f"samples (Prometheus {srv.version}, {os.cpu_count()} cores, load before "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n")
        rows = [
            ("setup: backfill (OpenMetrics + promtool)", f"{backfill_s:.1f} s, {samples:,} "
                                                         "samples"),
            ("history pull", f"{m['pull_s']:.1f} s: {m['containers']} containers, "
                             f"{m['queries']} range queries, {m['samples']:,} samples"),
            ("owners and requests", f"{m['owners_s']:.1f} s, requests of "
                                    f"{m['with_requests']} containers"),
            ("fits (2 folds)", f"{m['fit_s']:.1f} s"),
            ("auto, head-room tables, replay of every policy",
             f"{m['replay_total_s'] - m['fit_s']:.1f} s"),
            ("per-workload table", f"{m['table_s']:.1f} s, {m['workloads']} workloads"),
            ("end to end", f"{m['pull_s'] + m['owners_s'] + m['replay_total_s'] + m['table_s']:.1f} s"),
            ("peak RSS after pull (VmHWM)", f"{m['rss_after_pull_mib']:.0f} MiB"),
            ("peak RSS (VmHWM)", f"{m['peak_rss_mib']:.0f} MiB"),
        ]
        print("| step | result |\n|---|---|")
        for k, v in rows:
            print(f"| {k} | {v} |")
        return 0
    print(f"\n## Batch trainer: {args.pods} pods × {args.hours:g} h of 15 s samples "
          f"(Prometheus {srv.version}, {os.cpu_count()} cores, load before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n")
    rows = [
        ("setup: synthesise jobs", f"{gen_s:.1f} s"),
        ("setup: backfill (OpenMetrics + promtool)", f"{backfill_s:.1f} s, {samples:,} samples"),
        ("history pull", f"{m['pull_s']:.1f} s ({args.concurrency} in flight): "
                         f"{m['containers']} containers, "
                         f"{m['series']} series, {m['queries']} range queries, "
                         f"{m['points']:,} points"),
        ("executions kept", f"{m['executions']} ({m['samples']:,} samples; cap "
                            f"{args.max_samples:,}: newest {m['pulled_hours']:.1f} h pulled, "
                            f"{m['skipped_chunks']} older chunks not read, "
                            f"{m['dropped_executions']} executions / "
                            f"{m['dropped_samples']:,} samples pulled but left out)"),
        ("fit (candidate, train side)", f"{m['fit_s']:.1f} s on {m['device']}, "
                                        f"{m['epochs']} epochs, {m['phases']} phases; "
                                        f"{m['fit_timings']}"),
        ("score on held-out pods", f"{m['score_s']:.1f} s, {m['held_out']} executions"),
        ("pull + fit", f"{m['pull_s'] + m['fit_s']:.1f} s"),
        ("peak RSS after pull (VmHWM)", f"{m['rss_after_pull_mib']:.0f} MiB"),
        ("peak RSS (pull + fit + score, VmHWM)", f"{m['peak_rss_mib']:.0f} MiB"),
        ("model document", f"{m['doc_kib']:.1f} KiB"),
    ]
    print("| step | result |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
