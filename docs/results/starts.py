"""Memory judged by risk with the start counted (issue 42; ../shared/docs/evaluation.md, "The
start counts"): the first window of each execution scored, and each execution started from the
request the operator would serve it. Two starts side by side, over split seeds:

- ``profile``: the workload's profile from its executions that ended before this one (the
  evaluator's default, ``--initial served``), the pooled first-window level for a workload
  never seen;
- ``pooled``: the pooled first-window level for every execution (``--initial model``), what the
  operator's admission gives every new pod today.

So the difference between the two is what workload memory buys at the start. Where a share of
windows at risk cannot be reached at any multiplier, the cell says at how many seeds and gives
the floor and the cost at it. The clairvoyant static peak (each execution's own lifetime peak,
at no window at risk) is given beside, as the yardstick users pick instead.

    .venv/bin/python docs/results/starts.py run [--sets synthetic-reruns,...] [--seeds 0,1,2,3,4]
    .venv/bin/python docs/results/starts.py table > docs/results/starts.md

``run`` writes one JSON per (data set, start, seed) under out/starts; ``table`` reads them all.
Data: as risk.py's, plus run.sh's synthetic jobs re-run four times each (``synthetic-reruns``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from risk import load_set, run_or_table, store

from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from verdict_stats import clustered_ratio, mean_se, side_of_one_se
from ai4dl.io import load_traces
from ai4dl.rules.objectives import RISKS
from ai4dl.rules.safety import SafetyConfig

OUT = Path("out/starts")
#: run.sh's synthetic jobs, each re-run four times (one group per job: its runs one after
#: another, one phase plan, another seed)
RERUN_ARGS = ("-q", "synthetic", "-o", "out/synthetic-reruns.csv", "--executions", "200",
              "--seed", "5", "--no-gpu", "--runs-per-workload", "4")
#: label -> (title, window in samples, what names a workload)
SETS = {
    "synthetic-reruns": ("Synthetic DL jobs, each re-run 4 times", 40, "group"),
    "dlcorpus": ("DL corpus: held-out jobs (a workload = a job)", 40, "group"),
    "dlcorpus-family": ("DL corpus: held-out jobs (a workload = a family: a sweep)", 40,
                        "family"),
    "gcd-1h": ("GCD_VMs, 1 h windows (a workload = a VM's group)", 12, "group"),
    "alibaba": ("Alibaba GenAI pods", 10, "group"),
}
STARTS = {"profile": "served", "pooled": "model"}
BASELINES = ("adaptive-max", "adaptive-stat", "vpa", "krr")
POLICIES = (*BASELINES, "auto", "oracle")
OBJECTIVE = RISKS[0]


def load(label: str):
    """One data set of :data:`SETS` (the re-run synthetic jobs written first if missing)."""
    if label == "synthetic-reruns":
        path = Path(RERUN_ARGS[RERUN_ARGS.index("-o") + 1])
        if not path.exists():
            from ai4dl.cli import main as cli

            path.parent.mkdir(parents=True, exist_ok=True)
            if cli(list(RERUN_ARGS)):
                raise SystemExit("could not write the re-run synthetic jobs")
        return load_traces(str(path))
    return load_set(label.removesuffix("-family"))


def run_one(label: str, start: str, seed: int, traces=None) -> dict:
    """One data set, start and split seed: every policy's memory at each share of windows at
    risk, served, the first window scored."""
    _, window, by = SETS[label]
    traces = load(label) if traces is None else traces
    cfg = EvaluationConfig(resources=("memory",), window=window, seed=seed, policies=POLICIES,
                           targets=(0.97,), risks=RISKS, include_cold_start=True,
                           initial=STARTS[start], workload_by=by,
                           safety=SafetyConfig.operator_defaults(1, 0))
    t0 = time.perf_counter()
    r = run_evaluation(traces, cfg)
    oracle = r.scores["oracle"][0]
    out = {"label": label, "start": start, "seed": seed, "window": window,
           "seconds": time.perf_counter() - t0, "executions": len(r.data.usage),
           "windows": oracle.scored_windows,
           "from_profile": r.starts.get("profile") if r.starts else 0,
           # the clairvoyant static peak at no window at risk: its allocation ÷ the oracle's
           "static_peak": 1.0 / oracle.vs_static_peak, "policies": {},
           # each held-out execution's workload: the clusters of the clustered comparison
           "groups": [str(g) for g in r.data.groups]}
    for name, rows in r.scores.items():
        s = rows[0]
        out["policies"][name] = {
            "risk_share": s.risk_share,
            "vs_oracle_risk": {str(k): v for k, v in s.vs_oracle_risk_at.items()},
            "floor": {str(k): v for k, v in s.risk_floor_at.items()},
            "at_floor": {str(k): v for k, v in s.vs_oracle_floor_at.items()},
            "by_execution": {str(k): list(v)
                             for k, v in s.allocation_by_execution_risk_at.items()}}
    return out


def cmd_run(sets: list[str], seeds: list[int]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for label in sets:
        traces = load(label)
        for seed in seeds:
            for start in STARTS:
                store(run_one(label, start, seed, traces),
                      OUT / f"{label}-{start}-s{seed}.json", f"{label} {start} seed {seed}")
    return 0


def cell(runs: list[dict], name: str, share: float) -> str:
    """mean ± s.e. over the seeds where every seed reaches the share; else at how many it does
    not, with the mean floor and the mean cost at it."""
    key = str(share)
    vals = [d["policies"][name]["vs_oracle_risk"][key] for d in runs]
    if all(math.isfinite(v) for v in vals):
        m, se = mean_se(vals)
        return f"{m:.3f}" + (f" ± {se:.3f}" if math.isfinite(se) else "")
    short = [d for d, v in zip(runs, vals) if not math.isfinite(v)]
    floor = mean_se([d["policies"][name]["floor"].get(key, math.nan) for d in short])[0]
    cost = mean_se([d["policies"][name]["at_floor"].get(key, math.nan) for d in short])[0]
    return (f"unreachable at {len(short)} of {len(runs)}: floor {100 * floor:.2f} % at "
            f"{cost:.3f}")


def gap_words(runs: list[dict], share: float) -> str:
    """auto against the cheapest baseline (per seed) at ``share``: the gap ± s.e. and what the
    noise allows; 'not comparable' where a seed's figure is a floor."""
    key = str(share)
    gaps = []
    for d in runs:
        pol = d["policies"]
        base = min(pol[b]["vs_oracle_risk"][key] for b in BASELINES)
        a = pol["auto"]["vs_oracle_risk"][key]
        if not (math.isfinite(a) and math.isfinite(base)):
            return "not comparable (a floor at some seed)"
        gaps.append(a / base - 1.0)
    g, se = mean_se(gaps)
    if not math.isfinite(se):
        return f"{100 * g:+.1f} % (one seed)"
    side = side_of_one_se(g, se)
    word = ("cheaper beyond one s.e." if side < 0 else "dearer beyond one s.e." if side > 0
            else "within one s.e. (not resolved)")
    return f"{100 * g:+.1f} % ± {100 * se:.1f} %: {word}"


def clustered_words(runs: list[dict], share: float) -> str | None:
    """auto against every baseline at ``share``, clustered by workload at each seed (the bar
    of issue 42: below each beyond one cluster-robust standard error): at how many seeds it is
    below all of them beyond one, and the least margin; None where runs lack the
    per-execution allocations (made before they were kept)."""
    key = str(share)
    below, worst = 0, []
    for d in runs:
        pol = d["policies"]
        if "groups" not in d:
            return None
        if any(key not in pol[n].get("by_execution", {}) for n in ("auto", *BASELINES)):
            return "not comparable (a floor at some seed)"
        sides = []
        for b in BASELINES:
            ratio, se = clustered_ratio(pol["auto"]["by_execution"][key],
                                        pol[b]["by_execution"][key], d["groups"])
            sides.append(side_of_one_se(ratio - 1.0, se))
            worst.append((ratio - 1.0 + se, b, ratio - 1.0, se))
        below += all(side < 0 for side in sides)
    _, b, gap, se = max(worst)
    return (f"below all four beyond one cluster-robust s.e. at {below} of {len(runs)} seeds "
            f"(closest: {b} {100 * gap:+.1f} % ± {100 * se:.1f} %)")


def cmd_table() -> int:
    docs: dict = {}
    for p in sorted(OUT.glob("*.json")):
        d = json.loads(p.read_text())
        docs.setdefault((d["label"], d["start"]), []).append(d)
    print("Memory judged by risk **with the start counted**: the first window of each execution "
          "scored, each execution started from the request the operator would serve it, the "
          "operator's default safety layer; allocation ÷ oracle at a matched share of windows at "
          "risk, mean ± standard error over the split seeds. *profile*: a workload seen before "
          "starts from its own profile (its executions that ended before this one), one never "
          "seen from the pooled first-window level; *pooled*: every execution from the pooled "
          "level (what admission serves today). A share no multiplier reaches is given as its "
          "floor of risk and the cost there. The clairvoyant static peak (each execution's own "
          "lifetime peak, no window at risk) is the yardstick. Produced by "
          "`docs/results/starts.py`.\n")
    for label, (title, window, _) in SETS.items():
        runs = {s: sorted(docs.get((label, s), []), key=lambda d: d["seed"]) for s in STARTS}
        if not all(runs.values()):
            continue
        r0 = runs["profile"][0]
        seeds = ", ".join(str(d["seed"]) for d in runs["profile"])
        static = mean_se([d["static_peak"] for d in runs["profile"]])
        print(f"### {title} (window {window} samples; seeds {seeds}; {r0['executions']} "
              f"held-out executions, {r0['from_profile']} of them started from their "
              f"workload's profile, {r0['windows']:,} scored windows at seed {r0['seed']}; "
              f"the clairvoyant static peak {static[0]:.3f})\n")
        head = ["policy", "start", *(f"at {100 * s:g} %" for s in RISKS),
                "windows at risk as served"]
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
        for name in ("auto", *BASELINES):
            for start in STARTS:
                share = mean_se([d["policies"][name]["risk_share"] for d in runs[start]])[0]
                print(f"| {name} | {start} | "
                      + " | ".join(cell(runs[start], name, s) for s in RISKS)
                      + f" | {100 * share:.2f} % |")
        print()
        for start in STARTS:
            gaps = "; ".join(f"at {100 * s:g} % {gap_words(runs[start], s)}" for s in RISKS)
            cal = mean_se([d["policies"]["auto"]["risk_share"] for d in runs[start]])
            print(f"- {start} start: auto against the cheapest of {', '.join(BASELINES)}: "
                  f"{gaps}. auto realised {100 * cal[0]:.2f} % of windows at risk against its "
                  f"{100 * OBJECTIVE:g} % objective.")
            clustered = [(s, clustered_words(runs[start], s)) for s in RISKS]
            if all(words is not None for _, words in clustered):
                print("  Clustered by workload, each seed: "
                      + "; ".join(f"at {100 * s:g} % {words}" for s, words in clustered) + ".")
        print()
    return 0


def main(argv: list[str]) -> int:
    return run_or_table(argv, __doc__.split("\n\n")[0], SETS, cmd_run, cmd_table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
