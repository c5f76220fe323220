"""Benchmark of the replay evaluator, the head-room table and the peak-risk table. Prints
markdown tables.

    .venv/bin/python bench/bench_policies.py [--executions 5000] [--samples 2400] [--window 40]
                                             [--fit-executions 1000] [--skip-replay]

Data: the synthetic DL-job generator (seed 0), cpu + memory, every execution cut to exactly
--samples samples at 15 s. The phase model is fitted once beforehand on 200 other synthetic
executions (its fit is the core benchmark's business, not this one's).

1. Replay: --executions through every policy (the head-room tables fitted on the
   --fit-executions set first; ``auto`` is a choice among the others, timed in 2). Target:
   5,000 executions × 2,400 samples through all policies in under 2 minutes on 2 cores.
2. Head-room table: what fitting it adds to a fit of --fit-executions × --samples (phase labels
   of every training sample, then the table; target < 10 s), what ``auto``'s choice costs, and
   the per-pod serving cost of the operator's call (``next_allocation``: the next window from
   the history so far), in microseconds, for a 1 h and a 10 h history.
3. Peak-risk table (memory, 1 % of windows at risk): its fit on the same --fit-executions x
   --samples (out-of-fold selection and calibration included; target < 10 s), and the
   operator's call for 2,000 pods at once from their running statistics (target: well under
   5 % of a 600 s window). Medians of repeated runs.

Too little data to measure (no execution, executions shorter than two windows, no window, no
epoch) exits 1 with the reason and no table (issue 44: a benchmark that measured nothing must
not print one).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from ai4dl.method import synthetic
from ai4dl.evaluation.evaluate import EvaluationConfig, build_policies, fitted_per_target, prepare
from ai4dl.judge import replay, score
from ai4dl.method.model import PhaseModel
from ai4dl.policy import catalog
from ai4dl.policy.auto import choose_policy
from ai4dl.policy.headroom import HeadroomPolicy
from ai4dl.policy.online import next_allocations
from ai4dl.policy.running import OwnHistory
from ai4dl.policy.peak import PeakRiskPolicy
from ai4dl.method.traces import TraceSet
from measured import refuse


def make(n: int, samples: int, seed: int) -> list:
    return list(synthetic.generate_fixed_length(n, samples, seed=seed, n_features=2))


def replay_bench(model, train, args) -> None:
    t = time.perf_counter()
    executions = make(args.executions, args.samples, 0)
    gen_s = time.perf_counter() - t
    timings: dict[str, float] = {}
    start = time.perf_counter()
    t = time.perf_counter()
    data = prepare(executions, ("cpu", "memory"), model)
    timings["prepare (phase detection for all samples)"] = time.perf_counter() - t
    names = tuple(p for p in catalog.names() if p != catalog.AUTO)
    cfg = EvaluationConfig(window=args.window, resources=("cpu", "memory"), policies=names)
    t = time.perf_counter()
    policies = build_policies(cfg, model, train)
    timings[f"fit the head-room tables ({len(train.usage)} executions)"] = \
        time.perf_counter() - t
    replays = {}
    for p in policies:
        t = time.perf_counter()
        replays[p.name] = replay(data, p, args.window, cfg.safety)
        timings[f"replay {p.name}"] = time.perf_counter() - t
    t = time.perf_counter()
    score(data, replays, args.window)
    timings["score (aggregate)"] = time.perf_counter() - t
    total = time.perf_counter() - start
    n = args.executions * args.samples
    print(f"## Replay\n\ndata: {args.executions} executions x {args.samples} samples = {n:,} "
          f"samples, window {args.window} (generated in {gen_s:.1f} s)\n")
    print("| stage | seconds |\n|---|---|")
    for k, v in timings.items():
        print(f"| {k} | {v:.2f} |")
    print(f"| **total: {len(names)} policies** | **{total:.1f}** (target < 120) |")
    print(f"| throughput | {n * len(names) / total:,.0f} policy-samples/s |")
    print(f"| peak RSS | {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB |\n")


def serving_us(pol: HeadroomPolicy, usage, phases, window: int, repeats: int = 2000) -> float:
    """Median microseconds of one next_allocation call (one pod, one window), one thread."""
    runs = []
    with threadpool_limits(1):
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(repeats):
                pol.next_allocation(usage, phases, window)
            runs.append((time.perf_counter() - t) / repeats * 1e6)
    return statistics.median(runs)


def headroom_bench(model, args) -> tuple:
    t = time.perf_counter()
    executions = make(args.fit_executions, args.samples, 2)
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    data = prepare(executions, ("cpu", "memory"), model)
    label_s = time.perf_counter() - t
    rows = [("data", f"{args.fit_executions} executions x {args.samples} samples, window "
                     f"{args.window} (generated in {gen_s:.1f} s)", "")]
    rows.append(("phase labels of every training sample", f"{label_s:.2f} s", ""))
    fits = {}
    for use_phase in (True, False):
        t = time.perf_counter()
        h = HeadroomPolicy(target=0.97, use_phase=use_phase).fit(
            data.usage, data.phases if use_phase else None, args.window,
            model.n_phases_ if use_phase else None, ("cpu", "memory"))
        fits[h.name] = (h, time.perf_counter() - t)
        rows.append((f"fit {h.name} (97 %)", f"{fits[h.name][1]:.2f} s "
                     f"({model.n_phases_ if use_phase else 1} phase rows x {h.bins_} bins)", ""))
    added = label_s + fits["phase-headroom"][1]
    rows.append(("**added to the fit: labels + phase-headroom**", f"**{added:.2f} s**",
                 "target < 10 s"))
    rows.append(("added with the control too (+ burst-headroom)",
                 f"{added + fits['burst-headroom'][1]:.2f} s", ""))
    t = time.perf_counter()
    choice = choose_policy(data, args.window, model, 0.97)
    rows.append(("auto: fit + score 7 candidates on the 30 % most recent, refit the winner",
                 f"{time.perf_counter() - t:.1f} s (winners: {', '.join(choice.winners)})", ""))
    t = time.perf_counter()
    choice = choose_policy(data, args.window, model, None)
    rows.append(("**auto under the served objectives** (cpu 97 % of samples; memory ≤ 1 % of "
                 "windows at risk: + peak-risk, every candidate calibrated)",
                 f"**{time.perf_counter() - t:.1f} s** (winners: {', '.join(choice.winners)}; "
                 f"memory × {choice.calibration[1]:.3f})", ""))
    from ai4dl.rules.safety import SafetyConfig

    t = time.perf_counter()
    choice = choose_policy(data, args.window, model, None,
                           safety=SafetyConfig.operator_defaults(2, 1))
    rows.append(("**... through the operator's default safety layer** (what the trainer does: "
                 "every candidate replayed through it, memory calibrated in the served order)",
                 f"**{time.perf_counter() - t:.1f} s** (winners: {', '.join(choice.winners)}; "
                 f"memory × {choice.calibration[1]:.3f})", ""))
    h = fits["phase-headroom"][0]
    u, p = data.usage[0], data.phases[0]
    for hours in (1, 10):
        n = min(len(u), int(hours * 3600 / 15))
        us = serving_us(h, u[:n], p[:n], args.window)
        rows.append((f"serve one pod, next window from a {hours} h history "
                     f"({n} samples)", f"{us:.0f} µs", ""))
    us = serving_us(fits["burst-headroom"][0], u[:240], None, args.window)
    rows.append(("serve one pod, burst-headroom, 1 h history", f"{us:.0f} µs", ""))
    pods = min(2000, len(data.usage) * 2)
    hists = [data.usage[i % len(data.usage)][:240] for i in range(pods)]
    labels = [data.phases[i % len(data.usage)][:240] for i in range(pods)]
    runs = []
    with threadpool_limits(1):
        for _ in range(5):
            t = time.perf_counter()
            h.next_allocations(hists, labels, args.window)
            runs.append(time.perf_counter() - t)
    batch = statistics.median(runs)
    rows.append((f"serve {pods} pods at once (next_allocations, 1 h histories)",
                 f"{batch * 1e3:.1f} ms = {batch / pods * 1e6:.1f} µs per pod", ""))
    print("## Head-room table\n\n| measure | value | target |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print()
    return data


def peak_bench(model, data, args) -> None:
    """Fit time of the peak-risk table on the training side and its batched serving cost."""
    mem = [u[:, 1:2] for u in data.usage]                       # (cpu, memory): memory
    rows = [("data", f"{len(mem)} executions x {args.samples} samples of memory, window "
                     f"{args.window}", "")]
    fits, pol = [], None
    for _ in range(3):
        t = time.perf_counter()
        pol = PeakRiskPolicy(max_risk=0.01).fit(mem, data.phases, args.window, model.n_phases_,
                                                ("memory",), groups=data.groups)
        fits.append(time.perf_counter() - t)
    rows.append(("**fit peak-risk (1 %: 5 folds x 3 min_windows x with and without the phase "
                 "+ the refit)**",
                 f"**{statistics.median(fits):.2f} s** (median of 3; min_windows "
                 f"{int(pol.min_windows_[0])}, phase "
                 f"{'used' if pol.phase_used_[0] else 'not used'}, "
                 f"{len(pol.states_[0])} states, calibration "
                 f"{pol.calibration_[0]:.3f})", "target < 10 s"))
    pods = 2000
    W = args.window
    hists = [mem[i % len(mem)][:240] for i in range(pods)]
    labels = [data.phases[i % len(mem)][:240] for i in range(pods)]
    owns = [OwnHistory.of(h, p, model.n_phases_, W) for h, p in zip(hists, labels)]
    lasts = np.stack([h[-W:] for h in hists])
    last_phases = np.stack([p[-W:] for p in labels])
    runs = []
    with threadpool_limits(1):
        for _ in range(5):
            t = time.perf_counter()
            next_allocations(pol, lasts, last_phases, owns)
            runs.append(time.perf_counter() - t)
    batch = statistics.median(runs)
    share = batch / (W * (data.step or 15.0))
    rows.append((f"serve {pods} pods at once (next_allocations from OwnHistory, 1 h histories)",
                 f"{batch * 1e3:.1f} ms = {batch / pods * 1e6:.1f} µs per pod, "
                 f"{100 * share:.4f} % of a window (median of 5)", "well under 5 %"))
    print("## Peak-risk table\n\n| measure | value | target |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print()


def too_little(args) -> str | None:
    """Why these sizes measure nothing (None when they measure something): every section replays
    or fits windows after a first one, on executions of the model's data as well, with a model
    trained for at least one epoch."""
    if args.window < 1:
        return f"--window {args.window}: no window to replay or serve"
    if args.epochs < 1:
        return f"--epochs {args.epochs}: a phase model trained on no epoch"
    if args.samples < 2 * args.window:
        return f"--samples {args.samples} < two windows of {args.window}: no window to score"
    if args.fit_executions < 2 or args.model_executions < 2:
        return (f"--fit-executions {args.fit_executions}, --model-executions "
                f"{args.model_executions}: at least 2 of each")
    if not args.skip_replay and args.executions < 1:
        return f"--executions {args.executions}: nothing to replay"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executions", type=int, default=5000)
    ap.add_argument("--samples", type=int, default=2400)
    ap.add_argument("--window", type=int, default=40)
    ap.add_argument("--fit-executions", type=int, default=1000)
    ap.add_argument("--model-executions", type=int, default=200,
                    help="executions the phase model is fitted on beforehand")
    ap.add_argument("--epochs", type=int, default=30, help="the phase model's CRBM epochs")
    ap.add_argument("--skip-replay", action="store_true",
                    help="only the head-room and peak-risk sections")
    args = ap.parse_args(argv)
    why = too_little(args)
    if why:
        return refuse("bench_policies", why)
    model = PhaseModel(random_state=0, epochs=args.epochs).fit(
        TraceSet(make(args.model_executions, args.samples, 1)))
    train = headroom_bench(model, args)
    peak_bench(model, train, args)
    if not args.skip_replay:
        replay_bench(model, train, args)
    assert set(fitted_per_target(catalog.names())) >= {"phase-headroom", "burst-headroom"}
    return 0


if __name__ == "__main__":
    sys.exit(main())
