"""Does a workload's previous execution lower the memory cost at a matched share of windows at
risk? A probe of the lever issue 25 names (a workload's history), not a served policy.

The control is ``peak-risk`` phase-blind, as fitted and served today. The probe,
``peak-risk-prior``, is the same policy with the same fit, told one thing more about an
execution whose workload (its trace group) ran before it: the previous execution's memory peak P.
It is given the way the running statistics would carry it, as a window seen before the first
one:

- the execution's usage is preceded by one window at level P, so the running maximum M starts
  at P (the base of every multiplier is max(P, the maximum seen since));
- the state's phase slot says how far the execution has come towards P: 0 no history, 5 nothing
  of its own seen yet, 1-4 its own running maximum ÷ P below 0.7, 0.7-0.9, 0.9-1, 1 and over.

The multipliers are fitted by the policy's own rule (Lagrangian over states, rare states
pooled, calibrated out of fold by workload) on the train side's executions, each with its own
group's previous execution, in time order; nothing is tuned here. The cold start of an execution
without history is the control's (the train side's first-window level). Both are replayed
through the operator's default safety layer and matched in the served order
(:func:`ai4dl.judge.score`, as risk.py does), split seeds 0-4.

    .venv/bin/python docs/results/workload_prior_probe.py [--sets gcd-1h,...] [--seeds 0,1,2,3,4]

Prints a markdown table (allocation ÷ oracle at 1 / 2 / 5 % of windows at risk, mean ± s.e.
over the seeds, and the probe's gap to the control). Data: risk.py's (../shared/data, AI4DL_DATA).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationConfig, prepare
from verdict_stats import mean_se
from ai4dl.io import load_traces
from ai4dl.judge import replay, score, serve
from ai4dl.policy.headroom_levels import first_window_level
from ai4dl.rules.objectives import RISKS
from ai4dl.policy.peak import PeakRiskPolicy
from ai4dl.policy.policies import Oracle, Static
from ai4dl.rules.safety import SafetyConfig
from risk import SETS as RISK_SETS

#: risk.py's data sets (what to load, load options, window, title), those with workloads that
#: run more than once (the synthetic jobs never do).
SETS = {k: RISK_SETS[k] for k in ("gcd-1h", "gcd-15min", "alibaba", "dlcorpus")}
#: Own running maximum ÷ P: bins 1-4 of the phase slot (0: no history, 5: nothing seen yet).
PRIOR_EDGES = (0.7, 0.9, 1.0)
NO_HISTORY, NOTHING_SEEN = 0, 5
N_TAGS = 6


def previous_peaks(usages, groups, starts) -> list[np.ndarray | None]:
    """Per execution, the memory peak (R,) of the previous execution of its group (in start
    order), None for a group's first."""
    out: list = [None] * len(usages)
    last: dict = {}
    for i in sorted(range(len(usages)), key=lambda i: (starts[i], i)):
        out[i] = last.get(groups[i])
        if len(usages[i]):
            last[groups[i]] = np.asarray(usages[i], np.float64).max(0)
    return out


def with_prior(u: np.ndarray, prior: np.ndarray | None, window: int):
    """The usage as the probe's policy sees it (one window at the prior in front) and the tag
    of every sample (the phase slot)."""
    u = np.asarray(u, np.float64)
    if prior is None:
        return u, np.full(len(u), NO_HISTORY, np.int64)
    own = np.maximum.accumulate(u[:, 0]) if len(u) else np.zeros(0)
    p = float(prior[0])
    ratio = own / p if p > 0 else np.full(len(own), np.inf)
    tags = 1 + np.searchsorted(np.asarray(PRIOR_EDGES), ratio, side="right")
    return (np.vstack([np.tile(prior, (window, 1)), u]),
            np.concatenate([np.full(window, NOTHING_SEEN, np.int64), tags]))


class PeakRiskPrior:
    """peak-risk told the previous execution's peak of the same workload (module docstring)."""

    needs_phases = False
    uses_workload_state = True

    def __init__(self, max_risk: float, seed: int = 0):
        self.name = "peak-risk-prior"
        # the tag slot always kept: the probe asks what the prior carries, not whether the
        # folds would keep it (they may drop a slot, as they drop a phase that tells nothing)
        self.inner = PeakRiskPolicy(max_risk=max_risk, use_phase=True, seed=seed,
                                    name=self.name, select_phase=False)

    def fit(self, usages, groups, starts, window: int) -> "PeakRiskPrior":
        priors = previous_peaks(usages, groups, starts)
        aug = [with_prior(u, p, window) for u, p in zip(usages, priors)]
        self.inner.fit([a for a, _ in aug], [t for _, t in aug], window, N_TAGS,
                       groups=list(groups))
        # an execution without history starts cold, as the control does
        self.inner.cold_start_ = first_window_level(usages, window, 1.0 - self.inner.max_risk)
        return self

    def new_state(self) -> dict:
        return {}

    def allocate_group(self, usages, phases, window, initials, step, starts, pods, state=None):
        priors = previous_peaks(usages, ["g"] * len(usages), starts)
        out = []
        for u, p, init in zip(usages, priors, initials):
            a, tags = with_prior(u, p, window)
            rows = self.inner.allocate(a, tags, window, init, step)
            out.append(rows if p is None else rows[1:])
        return out

    def allocate(self, usage, phases, window, initial, step):
        return self.allocate_group([usage], [phases], window, [initial], step, [0.0], [""])[0]


@functools.lru_cache(maxsize=1)
def _traces(label: str):
    """One data set, loaded once for all its seeds."""
    src, opts, _, _ = SETS[label]
    return load_traces(str(src), **opts)


def run_one(label: str, seed: int) -> dict:
    window = SETS[label][2]
    traces = _traces(label)
    cfg = EvaluationConfig(resources=("memory",), window=window, seed=seed)
    safety = SafetyConfig.operator_defaults(1, 0)
    train, test = traces.split_by_group(cfg.test_fraction, seed, cfg.split_by)
    tr = prepare(list(train), cfg.resources, None, cfg.initial, np.zeros(1))
    data = prepare(list(test), cfg.resources, None, cfg.initial, np.zeros(1))
    own, served, per_own, per_served, fits = {}, {}, {}, {}, {}
    for p in (Static(), Oracle()):
        own[p.name] = replay(data, p, window, None)
        served[p.name] = serve(data, own[p.name], window, safety)
    for share in RISKS:
        control = PeakRiskPolicy(max_risk=share, use_phase=False, seed=seed).fit(
            tr.usage, None, window, groups=tr.groups)
        prior = fits[share] = PeakRiskPrior(share, seed).fit(tr.usage, tr.groups, tr.starts,
                                                             window)
        for pol in (control, prior):
            r = replay(data, pol, window, None)
            per_own.setdefault(pol.name, {})[share] = r
            per_served.setdefault(pol.name, {})[share] = serve(data, r, window, safety)
    for name, by in per_served.items():
        own[name], served[name] = per_own[name][RISKS[0]], by[RISKS[0]]
    scores = score(data, served, window, False, (0.97,), risks=RISKS, per_risk=per_served,
                   safety=safety, own=own, per_risk_own=per_own)
    history = sum(p is not None for p in previous_peaks(data.usage, data.groups, data.starts))
    # the 1 % fit: how many training windows the first window after a prior gives, against the
    # least windows a state needs (fewer: it pools into coarser states)
    first = sum(p is not None for p in previous_peaks(tr.usage, tr.groups, tr.starts))
    return {"executions": len(data.usage), "with_history": history,
            "first_windows": first, "min_windows": int(fits[RISKS[0]].inner.min_windows_[0]),
            "next_over_previous": next_over_previous(label),
            "figures": {n: {s: rows[0].vs_oracle_risk_at[s] for s in RISKS}
                        for n, rows in scores.items() if n != "oracle"}}


@functools.lru_cache(maxsize=None)
def next_over_previous(label: str) -> list[float]:
    """Over the whole data set, each execution's memory peak ÷ its group's previous one's: the
    5th, 50th and 95th percentiles (empty when no group ran twice)."""
    traces = _traces(label)
    usage = [e.select(("memory",)).values.astype(np.float64) for e in traces]
    groups = [e.group for e in traces]
    starts = [float(e.times[0]) if len(e) else 0.0 for e in traces]
    ratios = [float(u.max()) / float(p[0]) for u, p in
              zip(usage, previous_peaks(usage, groups, starts))
              if p is not None and len(u) and p[0] > 0]
    return [float(q) for q in np.quantile(ratios, [0.05, 0.5, 0.95])] if ratios else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--seeds", default="0,1,2,3,4")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("Memory allocation ÷ oracle at a matched share of windows at risk, served through the "
          "operator's default safety layer (the served order), mean ± s.e. over split seeds "
          f"{', '.join(map(str, seeds))}: `peak-risk` phase-blind (the control) against the same "
          "policy told the previous execution's peak of the execution's workload "
          "(`peak-risk-prior`; `docs/results/workload_prior_probe.py`). `static` is the "
          "clairvoyant static peak.\n")
    print("| data set | held-out executions with history | policy | at 1 % | at 2 % | at 5 % |")
    print("|---|---|---|---:|---:|---:|")
    notes = []
    for label in args.sets.split(","):
        title = SETS[label][3]
        runs = []
        for seed in seeds:
            t0 = time.perf_counter()
            runs.append(run_one(label, seed))
            print(f"{label} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        hist = f"{runs[0]['with_history']} of {runs[0]['executions']} (seed {seeds[0]})"
        for name in ("static", "peak-risk", "peak-risk-prior"):
            cells = []
            for s in RISKS:
                m, se = mean_se([r["figures"][name][s] for r in runs])
                cells.append(f"{m:.3f} ± {se:.3f}" if math.isfinite(se) else f"{m:.3f}")
            print(f"| {title} | {hist} | {name} | " + " | ".join(cells) + " |")
        gaps = []
        for s in RISKS:
            m, se = mean_se([r["figures"]["peak-risk-prior"][s] / r["figures"]["peak-risk"][s]
                              - 1.0 for r in runs])
            gaps.append(f"{100 * m:+.1f} % ± {100 * se:.1f} %")
        print(f"| {title} | | prior ÷ control − 1 | " + " | ".join(gaps) + " |")
        r0, q = runs[0], runs[0]["next_over_previous"]
        notes.append(f"- {title}: an execution's memory peak ÷ its workload's previous one's "
                     + (f"{q[1]:.2f} at the median, {q[0]:.2f}-{q[2]:.2f} from the 5th to the "
                        f"95th percentile (the whole data set)" if q else "(no workload ran "
                                                                          "twice)")
                     + f"; at seed {seeds[0]} the 1 % fit's first windows after a prior are "
                     f"{r0['first_windows']} training windows, a state needs "
                     f"{r0['min_windows']}.")
    print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
