"""Benchmark of the phase-discovery core. Prints a markdown table; asserts nothing, but
sizes that measure nothing (no execution, runs shorter than a detection window, no repeat,
no epoch) exit 1 with the reason and no table.

    .venv/bin/python bench/bench_core.py [--executions 1000] [--samples 2400] [--repeats 5]

Data: the synthetic DL-job generator (ai4dl.method.synthetic, seed 0), 4 features (cpu, memory,
gpu_util, gpu_memory), every execution cut to exactly --samples samples at 15 s.
Measured: PhaseModel.fit time by stage (targets: CRBM + k-means < 60 s on 2 cores), online
detection throughput of the numpy encoder + nearest centroid on ONE thread (target
>= 1,000,000 samples/s), and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

from threadpoolctl import threadpool_limits

from ai4dl.method import synthetic
from ai4dl.method.model import PhaseModel
from ai4dl.method.traces import TraceSet
from measured import refuse


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_traces(n: int, samples: int) -> TraceSet:
    return synthetic.generate_fixed_length(n, samples, seed=0)


def detection_throughput(model: PhaseModel, traces: TraceSet, pods: int, window: int,
                         repeats: int) -> tuple[float, float]:
    """Samples/s for (a) the operator's shape: `pods` windows of `window` samples plus
    n_history context samples each, and (b) whole executions; one thread, median of repeats."""
    ctx = model.n_history
    windows = [e.values[100:100 + window + ctx] for e in traces[:pods]]
    whole = [e.values for e in traces[:50]]
    rates = {"window": [], "whole": []}
    with threadpool_limits(1):
        for _ in range(repeats):
            t = time.perf_counter()
            model.detect(windows, n_context=ctx)
            rates["window"].append(pods * window / (time.perf_counter() - t))
            t = time.perf_counter()
            model.detect(whole)
            rates["whole"].append(sum(len(w) for w in whole) / (time.perf_counter() - t))
    return statistics.median(rates["window"]), statistics.median(rates["whole"])


def too_little(args) -> str | None:
    """Why these sizes measure nothing (None when they measure): no execution, runs shorter
    than a detection window, no repeat, or a model trained on no epoch."""
    # the detection windows start 100 samples in and take 40 + the model's history (3)
    if args.executions < 1 or args.samples < 143 or args.repeats < 1:
        return (f"{args.executions} executions of {args.samples} samples, {args.repeats} "
                f"repeats: at least 1 execution of 143 samples and 1 repeat are measured")
    if args.epochs < 1:
        return f"--epochs {args.epochs}: no CRBM epoch to time"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executions", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=2400)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=60, help="CRBM epochs (the model's default)")
    args = ap.parse_args(argv)
    why = too_little(args)
    if why:
        return refuse("bench_core", why)

    rss_start = rss_mib()
    t = time.perf_counter()
    traces = make_traces(args.executions, args.samples)
    gen_s = time.perf_counter() - t
    rss_data = rss_mib()

    model = PhaseModel(random_state=0, epochs=args.epochs)
    t = time.perf_counter()
    model.fit(traces)
    fit_s = time.perf_counter() - t
    rss_fit = rss_mib()
    tm = model.fit_timings_
    win_rate, whole_rate = detection_throughput(model, traces, min(2000, args.executions), 40,
                                                args.repeats)

    n = traces.n_samples
    rows = [
        ("data", f"{args.executions} executions x {args.samples} samples x "
                 f"{len(traces.features)} features = {n:,} samples (generated in {gen_s:.1f} s)",
         ""),
        ("fit: total", f"{fit_s:.1f} s", ""),
        ("fit: CRBM training", f"{tm['crbm']:.1f} s ({model.fit_report_.crbm_epochs} epochs, "
                               f"{model.max_samples_per_epoch:,} samples/epoch)", ""),
        ("fit: encode all samples", f"{tm['encode']:.1f} s", ""),
        ("fit: k-means + k selection", f"{tm['kmeans']:.1f} s (k={model.n_phases_}, "
                                       f"tried {model.k_range[0]}-{model.k_range[1]})", ""),
        ("fit: CRBM + k-means", f"{tm['crbm'] + tm['encode'] + tm['kmeans']:.1f} s",
         "target < 60 s"),
        ("fit: statistics", f"{tm['stats']:.1f} s", ""),
        ("detect, operator windows (1 thread)",
         f"{win_rate:,.0f} samples/s ({min(2000, args.executions)} pods x 40 samples + "
         f"{model.n_history} context)", "target >= 1,000,000"),
        ("detect, whole executions (1 thread)", f"{whole_rate:,.0f} samples/s", ""),
        ("peak RSS", f"{rss_fit:.0f} MiB (at start {rss_start:.0f}, with data {rss_data:.0f})",
         ""),
    ]
    print("| measure | value | target |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
