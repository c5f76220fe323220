"""Benchmark of the batch trainer's history pull and fit. Prints a markdown table; asserts
nothing.

    .venv/bin/python bench/bench_trainer.py [--pods 1000] [--hours 24] [--epochs 60]

--pods containers of synthetic DL jobs (ai4dl.synthetic.generate_fixed_length, cpu cores and
memory bytes; 100 distinct jobs shared round-robin) with --hours of 15 s samples each (four 6 h jobs in a row: four container runs), ending
ten minutes ago, are written as cAdvisor series (e2e/prometheus/backfill.py: OpenMetrics, then
``promtool tsdb create-blocks-from openmetrics``) into the storage of a real Prometheus (the
test server, install.sh). Then a fresh child process does what ``ai4dl train --prometheus``
does up to the apply: the chunked pull (PrometheusHistory), the held-out split, the fit
(PhaseModel defaults, CPU unless --device), and the score on the held-out pods with the
default policy; it reports its times and its peak RSS (getrusage), so the backfill's memory
does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS = 4   # container runs per pod (synthetic jobs last 8-20 h)
sys.path.insert(0, str(REPO))


def measure(url: str, hours: float, device: str, epochs: int) -> dict:
    from ai4dl import trainer as T
    from ai4dl.crd import PhaseModelSpec, default_features
    from ai4dl.model import PhaseModel
    from ai4dl.sources.prometheus import FeatureQuery, PrometheusSource
    from ai4dl.sources.prometheus_history import PrometheusHistory
    from ai4dl.traces import TraceSet

    out: dict = {}
    now = time.time()
    with PrometheusSource(url, timeout=300) as src:
        hist = PrometheusHistory(src, [FeatureQuery(f.name, f.query) for f in default_features()],
                                 'namespace="bench"', 15.0)
        t = time.perf_counter()
        res = hist.executions(now - (hours + 1) * 3600, now)
        out["pull_s"] = time.perf_counter() - t
    out.update(containers=res.pods, series=res.series, queries=res.queries, points=res.points,
               executions=len(res.executions),
               samples=sum(len(e) for e in res.executions))
    out["rss_after_pull_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    train, held = T.split_recent(res.executions)
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
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.hours, args.device, args.epochs)))
        return

    import numpy as np

    from ai4dl.synthetic import generate_fixed_length
    from ai4dl.traces import Execution
    from e2e.prometheus.backfill import backfill, history_server, promtool_next_to
    from e2e.prometheus.server import find_prometheus

    load = os.getloadavg()
    n = int(args.hours * 3600 // 15)
    binary = find_prometheus(install=True)
    with tempfile.TemporaryDirectory(prefix="ai4dl-bench-trainer-") as tmp:
        t = time.perf_counter()
        # Synthetic jobs are shorter than a day: each pod runs RUNS in a row (container runs,
        # as after restarts), n // RUNS samples each.
        part = n // RUNS
        jobs = generate_fixed_length(min(200, RUNS * args.pods), part, seed=0, n_features=2)
        end = time.time() // 15 * 15 - 600
        t0 = end - 15.0 * (RUNS * part - 1)
        steps = 15.0 * np.arange(part)
        runs = {}
        for i in range(args.pods):
            runs[("bench", f"job-{i:05d}", "main")] = [
                Execution(j.name, t0 + 15.0 * part * r + steps, j.values, j.features, j.units,
                          step=15.0)
                for r, j in enumerate(jobs[(RUNS * i + r) % len(jobs)] for r in range(RUNS))]
        gen_s = time.perf_counter() - t
        srv = history_server(targets=[], workdir=Path(tmp) / "prom", binary=binary)
        t = time.perf_counter()
        samples = backfill(runs, srv.storage_path, promtool_next_to(binary))
        backfill_s = time.perf_counter() - t
        del runs, jobs
        srv.start()
        try:
            r = subprocess.run([sys.executable, __file__, "--measure", srv.url, "--hours",
                                str(args.hours), "--device", args.device, "--epochs",
                                str(args.epochs)], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(r.stderr[-3000:])
            m = json.loads(r.stdout.strip().splitlines()[-1])
        finally:
            srv.cleanup()
    print(f"\n## Batch trainer: {args.pods} pods × {args.hours:g} h of 15 s samples "
          f"(Prometheus {srv.version}, {os.cpu_count()} cores, load before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n")
    rows = [
        ("setup: synthesise jobs", f"{gen_s:.1f} s"),
        ("setup: backfill (OpenMetrics + promtool)", f"{backfill_s:.1f} s, {samples:,} samples"),
        ("history pull", f"{m['pull_s']:.1f} s: {m['containers']} containers, "
                         f"{m['series']} series, {m['queries']} range queries, "
                         f"{m['points']:,} points"),
        ("executions", f"{m['executions']} ({m['samples']:,} samples)"),
        ("fit (candidate, train side)", f"{m['fit_s']:.1f} s on {m['device']}, "
                                        f"{m['epochs']} epochs, {m['phases']} phases; "
                                        f"{m['fit_timings']}"),
        ("score on held-out pods", f"{m['score_s']:.1f} s, {m['held_out']} executions"),
        ("pull + fit", f"{m['pull_s'] + m['fit_s']:.1f} s"),
        ("peak RSS after pull", f"{m['rss_after_pull_mib']:.0f} MiB"),
        ("peak RSS (pull + fit + score)", f"{m['peak_rss_mib']:.0f} MiB"),
        ("model document", f"{m['doc_kib']:.1f} KiB"),
    ]
    print("| step | result |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
