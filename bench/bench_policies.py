"""Benchmark of the replay evaluator: executions through every policy. Prints a markdown table.

    .venv/bin/python bench/bench_policies.py [--executions 5000] [--samples 2400] [--window 40]

Data: the synthetic DL-job generator (seed 0), cpu + memory, every execution cut to exactly
--samples samples at 15 s. The phase model is fitted once beforehand on 200 other synthetic
executions (its fit is the core benchmark's business, not this one's). Target: 5,000
executions × 2,400 samples through all policies in under 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import resource
import time


from ai4dl import synthetic
from ai4dl.evaluate import POLICIES, EvaluationConfig, build_policies, prepare, replay, score
from ai4dl.model import PhaseModel
from ai4dl.traces import TraceSet


def make(n: int, samples: int, seed: int) -> list:
    return list(synthetic.generate_fixed_length(n, samples, seed=seed, n_features=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executions", type=int, default=5000)
    ap.add_argument("--samples", type=int, default=2400)
    ap.add_argument("--window", type=int, default=40)
    args = ap.parse_args()

    model = PhaseModel(random_state=0, epochs=30).fit(TraceSet(make(200, args.samples, 1)))
    t = time.perf_counter()
    executions = make(args.executions, args.samples, 0)
    gen_s = time.perf_counter() - t

    timings: dict[str, float] = {}
    start = time.perf_counter()
    t = time.perf_counter()
    data = prepare(executions, ("cpu", "memory"), model)
    timings["prepare (phase detection for all samples)"] = time.perf_counter() - t
    cfg = EvaluationConfig(window=args.window, resources=("cpu", "memory"))
    replays = {}
    for p in build_policies(cfg, model, data):
        t = time.perf_counter()
        replays[p.name] = replay(data, p, args.window, cfg.safety)
        timings[f"replay {p.name}"] = time.perf_counter() - t
    t = time.perf_counter()
    score(data, replays, args.window)
    timings["score (aggregate)"] = time.perf_counter() - t
    total = time.perf_counter() - start

    n = args.executions * args.samples
    print(f"data: {args.executions} executions x {args.samples} samples = {n:,} samples, "
          f"window {args.window} (generated in {gen_s:.1f} s)\n")
    print("| stage | seconds |\n|---|---|")
    for k, v in timings.items():
        print(f"| {k} | {v:.2f} |")
    print(f"| **total: {len(POLICIES)} policies** | **{total:.1f}** (target < 120) |")
    print(f"| throughput | {n * len(POLICIES) / total:,.0f} policy-samples/s |")
    print(f"| peak RSS | {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB |")


if __name__ == "__main__":
    main()
