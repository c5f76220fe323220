"""Where does the clairvoyant static peak win? The held-out allocation at the matched share of
memory windows at risk, split by where each window stands against its execution's lifetime
peak: a probe of why the one cell of issue 25's bar that fails (the synthetic jobs at 1 %,
against the KRR replica, which with no workload history is the clairvoyant static peak) fails,
not a served policy.

An online policy can beat a constant that knows each job's lifetime peak only where usage is
still below that peak and the policy need not cover it yet; it pays wherever it must cover a
peak it has not seen, or a recurrence above the running maximum it has seen. Each scored
window of a held-out execution is, from the execution's own series (hindsight, for this split
only: no policy sees it):

- **before the peak**: before the first window whose max is at least ``AT_PEAK`` × the
  lifetime peak (``AT_PEAK`` is peak-risk's "at its peak" bin edge,
  :data:`ai4dl.policy.peak_states.RATIO_EDGES`);
- **at the peak**: from that window on, a window whose max is at least ``AT_PEAK`` × the peak;
- **after, below it**: the other windows after the first peak.

Per policy, the served allocation at the matched share (the evaluator's own match, in the
served order through the operator's default safety layer, as ``risk.py``) summed over each
kind of window, ÷ the oracle's allocation over every scored window: the three parts add up to
the policy's figure in ``risk.md``. Mean ± standard error over split seeds, and each kind's
share of the scored windows.

    .venv/bin/python docs/results/peak_side_probe.py [--sets synthetic,dlcorpus] [--seeds 0,1,2,3,4]

Prints a markdown table per data set. Data: risk.py's (../shared/data, AI4DL_DATA; the synthetic
jobs are run.sh's).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from verdict_stats import mean_se
from ai4dl.judge import per_sample_allocation, scored_mask, served_risk_match
from ai4dl.policy.peak_states import RATIO_EDGES
from ai4dl.rules.safety import SafetyConfig

import risk

AT_PEAK = RATIO_EDGES[-1]
KINDS = ("before the peak", "at the peak", "after, below it")
SHARE = risk.OBJECTIVE                   # 1 % of windows at risk: the default objective
SHOWN = ("static", "krr", "peak-risk", "auto")


def window_kinds(usage: np.ndarray, window: int) -> np.ndarray:
    """Per window of a 1-D series (the last one may be partial): 0 before the first window at
    ``AT_PEAK`` × the lifetime peak or above, 1 such a window, 2 a window after it below."""
    u = np.asarray(usage, np.float64)
    wmax = np.maximum.reduceat(u, np.arange(0, len(u), window)) if len(u) else u
    if not len(wmax):
        return np.zeros(0, np.int64)
    high = wmax >= AT_PEAK * wmax.max()
    first = int(np.argmax(high))
    kinds = np.where(high, 1, 2)
    kinds[:first] = 0
    return kinds


def sample_kinds(data, window: int, j: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per execution, once per split: the mask of its scored samples (the cold-start window
    left out, as the scorer does) and the kind of each sample's window (resource ``j``)."""
    out = []
    for u in data.usage:
        n = len(u)
        kind = np.repeat(window_kinds(u[:, j], window), window)[:n]
        out.append((scored_mask(n, window, False), kind))
    return out


def split_cost(kinds, rows: list[np.ndarray], window: int, j: int) -> np.ndarray:
    """Per kind of window: the summed per-sample allocation of resource ``j`` (``rows`` one
    (windows, R) array per execution) over the scored samples (``kinds``: :func:`sample_kinds`)."""
    out = np.zeros(len(KINDS))
    for (mask, kind), r in zip(kinds, rows):
        alloc = per_sample_allocation(r, len(kind), window)[:, j]
        out += np.bincount(kind[mask], weights=alloc[mask], minlength=len(KINDS))
    return out


def window_shares(kinds, window: int) -> np.ndarray:
    """Each kind's share of the scored windows (a window's kind is its first sample's)."""
    counts = np.zeros(len(KINDS))
    for _, kind in kinds:
        counts += np.bincount(kind[::window][1:], minlength=len(KINDS))
    return counts / counts.sum()


def run_seed(label: str, seed: int, traces=None) -> dict:
    """One split seed: per policy, its allocation per kind of window ÷ the oracle's total, and
    the scorer's own figure (``risk.md``'s) for the check that the parts add up."""
    window = risk.SETS[label][2]
    traces = risk.load_set(label) if traces is None else traces
    safety = SafetyConfig.operator_defaults(1, 0)
    cfg = EvaluationConfig(resources=("memory",), window=window, seed=seed,
                           policies=(*SHOWN, "oracle"), targets=(0.97,), risks=(SHARE,),
                           safety=safety)
    r = run_evaluation(traces, cfg)
    kinds = sample_kinds(r.data, window, 0)
    oracle = split_cost(kinds, r.replays["oracle"].allocations, window, 0).sum()
    out = {"shares": window_shares(kinds, window), "policies": {}}
    for name in SHOWN:
        own = r.per_risk_own.get(name, {}).get(SHARE) or r.own[name]
        match = served_risk_match(r.data, own.allocations, window, 0, SHARE, safety)
        parts = split_cost(kinds, match.allocations, window, 0) / oracle
        out["policies"][name] = {"parts": parts,
                                 "scored": r.scores[name][0].vs_oracle_risk_at[SHARE]}
    return out


def runs_for(label: str, seeds: list[int]) -> list[dict]:
    """:func:`run_seed` for every split seed (the data set loaded once)."""
    traces = risk.load_set(label)
    return [run_seed(label, s, traces) for s in seeds]


def table(label: str, seeds: list[int], runs: list[dict] | None = None) -> str:
    """The markdown table of one data set (``runs``: :func:`runs_for`'s, when already run)."""
    runs = runs_for(label, seeds) if runs is None else runs
    name = risk.SETS[label][3]
    shares = np.mean([r["shares"] for r in runs], axis=0)
    out = [f"### {name} (window {risk.SETS[label][2]} samples, split seeds "
           f"{', '.join(map(str, seeds))}; memory at {100 * SHARE:g} % of windows at risk)", "",
           "| policy | " + " | ".join(f"{k} ({100 * s:.0f} % of windows)"
                                      for k, s in zip(KINDS, shares)) + " | total |",
           "|---|" + "---:|" * (len(KINDS) + 1)]
    base = np.array([r["policies"]["static"]["parts"] for r in runs])
    for policy in SHOWN:
        parts = np.array([r["policies"][policy]["parts"] for r in runs])
        columns = [parts[:, k] for k in range(len(KINDS))] + [parts.sum(1)]
        against = [base[:, k] for k in range(len(KINDS))] + [base.sum(1)]
        cells = []
        for col, ref in zip(columns, against):
            cell = f"{mean_se(col)[0]:.3f}"
            if policy != "static":
                g, se = mean_se(col - ref)
                cell += f" ({g:+.3f} ± {se:.3f})"
            cells.append(cell)
        out.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="synthetic,dlcorpus")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    args = ap.parse_args(argv)
    sets = risk.probe_sets("peak_side_probe", args.sets)
    if sets is None:
        return 2
    try:
        seeds = risk.seed_list(args.seeds)
    except ValueError as e:
        print(f"peak_side_probe: {e}", file=sys.stderr)
        return 2
    print("Memory allocation ÷ oracle at the matched share of windows at risk, by where the "
          "window stands against its execution's lifetime peak (`docs/results/"
          "peak_side_probe.py`; held-out executions, the operator's default safety layer). "
          "Each cell: mean over split seeds, and in brackets the gap to the clairvoyant "
          "static peak ± its standard error; the parts add up to the total.\n")
    return risk.print_tables("peak_side_probe", sets, lambda label: table(label, seeds))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
