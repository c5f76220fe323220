"""Which memory hold costs least at a matched share of windows at risk? The probe behind the
hold the operator serves (issue 42; docs/results.md §9), not a served policy.

A workload's profile holds a new run's memory (:meth:`ai4dl.rules.workload_profile
.WorkloadProfile.hold`, under the safety layer, in the operator and in the evaluator alike).
Four holds, each the weighted upper percentile over the workload's 8 most recent runs that
ended before the run starts (VPA's half-life and 95th percentile, the profile's own rule):

- ``peak-until`` (served until 2026-12-07): the runs' peak from the start until the latest
  point in a run where a run reached its own peak; where the peak comes late that holds a
  history's static peak nearly all along;
- ``shape`` (served since): per stretch of the run, what the runs used in that stretch (at most
  32 stretches a run, each a power of two of windows: ``RunSummary.shape``); nothing past
  the runs' end;
- ``window``: the same window by window (a run's every window remembered: unbounded, the
  limit of ``shape``);
- ``none``: no hold (the profile's first request only).

Everything else is starts.py's profile start: the first window scored, each execution started
from its workload's profile (its executions that ended before it), the operator's default
safety layer, auto fitted on the train side (with the same holds), five split seeds. Nothing
here is tuned: 32 stretches is a storage bound, not read off a result.

    .venv/bin/python docs/results/hold_shape_probe.py [--sets synthetic-reruns,gcd-1h,...]
        [--seeds 0,1,2,3,4] [--holds peak-until,shape,window,none]

Prints a markdown table: auto's allocation ÷ oracle at 1 / 2 / 5 % of windows at risk (mean ±
s.e. over the seeds; "floor" where a seed reaches no multiplier) and its realised share as
served; per seed on stderr. Data: starts.py's (run.sh's synthetic re-runs; ../shared/data,
AI4DL_DATA).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

import numpy as np

import ai4dl.evaluation.evaluate as evaluate_mod
from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from ai4dl.evaluation.starts import run_summaries, workload_of
from ai4dl.rules.objectives import RISKS
from ai4dl.rules.safety import SafetyConfig
from ai4dl.rules.workload_profile import (MAX_RUNS, WorkloadProfile, combined_hold,
                                           profile_from_runs)
from starts import SETS, STARTS, load
from verdict_stats import mean_se

HOLDS = ("peak-until", "shape", "window", "none")


def window_stretches(run, memory: np.ndarray, window: int):
    """A run's stretches window by window: their ends (clipped at its end) and peaks."""
    peaks = np.maximum.reduceat(memory, np.arange(0, len(memory), window))
    seconds = window * run.duration / len(memory)
    return np.minimum(seconds * np.arange(1, len(peaks) + 1), run.duration), peaks


def patched(kind: str, window: int, by: str):
    """served_starts with its holds replaced by ``kind``'s (``shape``: as served)."""
    original = evaluate_mod.served_starts

    def served_starts(executions, history, resources, *args, **kw):
        starts, counts, holds = original(executions, history, resources, *args, **kw)
        if kind == "shape":
            return starts, counts, holds
        if kind == "none":
            return starts, counts, [None] * len(holds)
        seen = list({id(h): h for h in history}.values())
        j = list(resources).index("memory")
        runs: dict[str, list] = {}
        for h, s in zip(seen, run_summaries(seen, resources, window)):
            if s is not None:
                mem = np.nan_to_num(h.select(resources).values[:, j].astype(np.float64))
                runs.setdefault(workload_of(h, by), []).append((s, mem))
        out = []
        for e, hold in zip(executions, holds):
            begin = float(e.times[0]) if len(e) else 0.0
            past = sorted([(s, m) for s, m in runs.get(workload_of(e, by), [])
                           if s.end <= begin], key=lambda x: x[0].end)[-MAX_RUNS:]
            if hold is None or not past:
                out.append(None)
            elif kind == "peak-until":      # the runs without their shapes: the old rule
                out.append(profile_from_runs(resources, [dataclasses.replace(s, shape=())
                                                         for s, _ in past]).hold(begin))
            else:                            # window by window: stretches of one window
                profile = WorkloadProfile(tuple(resources), tuple(s for s, _ in past))
                out.append(combined_hold([window_stretches(s, m, window) for s, m in past],
                                         profile.weights(begin)))
        return starts, counts, out

    return served_starts


def run_one(label: str, kind: str, seed: int, traces) -> dict:
    _, window, by = SETS[label]
    cfg = EvaluationConfig(resources=("memory",), window=window, seed=seed,
                           policies=("auto", "oracle"), targets=(0.97,), risks=RISKS,
                           include_cold_start=True, initial=STARTS["profile"], workload_by=by,
                           safety=SafetyConfig.operator_defaults(1, 0))
    saved = evaluate_mod.served_starts
    evaluate_mod.served_starts = patched(kind, window, by)
    try:
        r = run_evaluation(traces, cfg)
    finally:
        evaluate_mod.served_starts = saved
    s = r.scores["auto"][0]
    return {"risk": s.risk_share,
            **{share: s.vs_oracle_risk_at.get(share, math.nan) for share in RISKS}}


def cell(vals: list[float]) -> str:
    if not all(math.isfinite(v) for v in vals):
        return f"floor at {sum(not math.isfinite(v) for v in vals)} of {len(vals)}"
    m, se = mean_se(vals)
    return f"{m:.3f} ± {se:.3f}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="synthetic-reruns,gcd-1h,dlcorpus-family")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--holds", default=",".join(HOLDS))
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    kinds = args.holds.split(",")
    print("| data set | hold | at 1 % | at 2 % | at 5 % | realised, as served |")
    print("|---|---|---:|---:|---:|---:|")
    for label in args.sets.split(","):
        traces = load(label)
        for kind in kinds:
            t0 = time.perf_counter()
            runs = [run_one(label, kind, seed, traces) for seed in seeds]
            risk = mean_se([r["risk"] for r in runs])[0]
            print(f"| {SETS[label][0]} | {kind} | "
                  + " | ".join(cell([r[s] for r in runs]) for s in RISKS)
                  + f" | {100 * risk:.2f} % |", flush=True)
            print(f"({label} {kind}: {time.perf_counter() - t0:.0f} s; per seed "
                  + "; ".join(" / ".join(f"{r[s]:.3f}" for s in RISKS) for r in runs) + ")",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
