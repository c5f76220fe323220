"""Does a richer state move GCD_VMs 1 h cpu (docs/results.md §3)? The head-room tables' state
(phase of the last sample × burstiness of the last window) gains one more bit per resource, and
both tables are refitted and scored as `ai4dl evaluate --window 12 --seed S` scores them, for
split seeds S = 0..4. Prints docs/results/gcd-state-features.md:

    .venv/bin/python docs/results/state_features.py ../shared/data/gcd_vms/GCD_VMs.tar.gz \\
        > docs/results/gcd-state-features.md

The bits (:data:`FEATURES`), each known at the window's start (from its own execution's samples
before it):

- ``peak-late``: the last window's maximum fell in its second half (a rise may still be under
  way);
- ``new-high``: the last window's maximum is above the one before it;
- ``rising``: the last third of the last window averages above the whole window;
- ``jumpy-history``: the execution's mean upward jump of its window maxima so far (the mean of
  max(0, log(max_i ÷ max_i-1))) is above the training windows' median (the execution's own
  record of outgrowing its last window);
- ``control``: a bit that is always 0, with the state space doubled as for the others: what the
  change in the number of burstiness bins alone does.

Every other part of the fit is unchanged (candidate levels, the rule's price, pooling of rare
states); the bit enters through the phase index the table looks up, as ``2 × phase + bit``.
A cell (resource, target, seed) is met by a table when it is at most the cheaper reactive
policy's allocation and has at most adaptive-max's windows short.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from ai4dl.judge import replay, score
from ai4dl.io.loaders import load_traces
from ai4dl.policy.headroom import (PHASE_HEADROOM, HeadroomPolicy, check_table_call,
                                   check_training)
from ai4dl.policy.headroom_levels import (candidate_levels, first_window_level,
                                          training_windows, windows)
# the sibling script (its folder is on sys.path when either runs): the same targets, tables
# and bar
from frontier import REACTIVE, TABLES, TARGETS, gaps

FEATURES = ("peak-late", "new-high", "rising", "jumpy-history", "control")


def _upward_jumps(win: np.ndarray) -> np.ndarray:
    """(m, W) windows of one resource -> (m,): the mean of max(0, log(max_i ÷ max_i-1)) over
    windows 1..i (0 for the first window)."""
    mx = np.maximum(win.max(1), 1e-12)
    out = np.zeros(len(mx))
    if len(mx) > 1:
        jumps = np.maximum(0.0, np.log(mx[1:] / mx[:-1]))
        out[1:] = np.cumsum(jumps) / np.arange(1, len(mx))
    return out


def feature_value(name: str, win: np.ndarray) -> np.ndarray:
    """(m, W) windows of one resource -> (m,) the feature after each window (a float; the bit
    is ``value > threshold``)."""
    if name == "peak-late":
        return (win.argmax(1) >= win.shape[1] // 2).astype(float)
    if name == "new-high":
        mx = win.max(1)
        return np.r_[0.0, (mx[1:] > mx[:-1]).astype(float)]
    if name == "rising":
        k = max(1, win.shape[1] // 3)
        return (win[:, -k:].mean(1) > win.mean(1)).astype(float)
    if name == "jumpy-history":
        return _upward_jumps(win)
    if name == "control":
        return np.zeros(len(win))
    raise ValueError(f"unknown feature {name!r}; known: {', '.join(FEATURES)}")


def threshold(name: str, usages, window: int) -> float:
    """The bit's threshold, from the training executions: the median of ``jumpy-history``
    over their windows; 0.5 for the yes/no features."""
    if name != "jumpy-history":
        return 0.5
    vals = [feature_value(name, windows(u, window)) for u in usages]
    vals = np.concatenate([v for v in vals if len(v)] or [np.zeros(1)])
    return float(np.median(vals))


def with_bit(name: str, thr: float, usage, phases, window: int):
    """:func:`candidate_levels` with the state read as 2 × the phase of the last sample + the
    bit of the last window."""
    lv, bu, lp = candidate_levels(usage, phases, window)
    win = windows(np.asarray(usage, np.float64)[:, 0], window)[: len(lv)]
    bit = (feature_value(name, win) > thr).astype(np.int64)
    base = np.zeros(len(lv), np.int64) if lp is None else np.asarray(lp, np.int64)
    return lv, bu, 2 * base + bit


def fit_with_bit(name: str, thr: float, usages, phases, window: int, n_states: int, res: str,
                 target: float, **params) -> HeadroomPolicy:
    """A head-room table fitted as :meth:`HeadroomPolicy.fit` fits one, its training windows'
    state carrying the bit (:func:`training_windows` keeps, per execution, the first rows of
    :func:`candidate_levels` whose window has samples; the same rows get their bit here)."""
    usages, phases, k = check_training(PHASE_HEADROOM, True, usages, phases, window, n_states)
    tw = training_windows(usages, phases, window)
    if tw is not None:
        states = []
        for u, p in zip(usages, phases):
            if len(u) == 0:
                continue
            _, _, lp = with_bit(name, thr, u, p, window)
            n_rows = min(len(lp), -(-len(u) // window) - 1)
            if n_rows > 0:
                states.append(lp[:n_rows])
        tw = tw._replace(last_phase=np.concatenate(states))
    return HeadroomPolicy(target=target, use_phase=True, **params).fit_windows(
        tw, window, k, (res,), first_window_level(usages, window, target))


@dataclass
class WithStateBit:
    """One head-room table per resource, each fitted and served with the state bit."""
    feature: str
    tables: list
    thresholds: list
    phased: bool
    name: str
    needs_phases: bool = True

    @classmethod
    def fit(cls, feature: str, train, window: int, target: float, phased: bool,
            n_phases: int, resources) -> "WithStateBit":
        tables, thresholds = [], []
        for j, res in enumerate(resources):
            usages = [u[:, [j]] for u in train.usage]
            # the phase-blind table gets phase 0 everywhere, so its state is (bit, burstiness)
            phases = (train.phases if phased else
                      [np.zeros(len(u), np.int64) for u in usages])
            thr = threshold(feature, [u[:, 0] for u in usages], window)
            tables.append(fit_with_bit(feature, thr, usages, phases, window,
                                       2 * (n_phases if phased else 1), res, target))
            thresholds.append(thr)
        family = "phase" if phased else "burst"
        return cls(feature, tables, thresholds, phased, f"{family}-headroom + {feature}")

    def allocate(self, usage, phases, window, initial, step):
        usage = np.asarray(usage, np.float64)
        if not self.phased:
            phases = np.zeros(len(usage), np.int64)
        cols = []
        for j, (table, thr) in enumerate(zip(self.tables, self.thresholds)):
            u, p = check_table_call(table, usage[:, [j]], phases, window)
            cols.append(np.vstack([table.cold_start_[None, :],
                                   table.lookup(*with_bit(self.feature, thr, u, p, window))]))
        return np.hstack(cols)


def run_seed(traces, window: int, seed: int, features=FEATURES):
    """One split: per target, the scores of the reactive policies, of each table as `ai4dl
    evaluate` fits it, and of each table with each feature's bit, on the held-out executions.
    Returns (result, [(target, scores)])."""
    cfg = EvaluationConfig(window=window, seed=seed, policies=(*REACTIVE, *TABLES, "oracle"))
    r = run_evaluation(traces, cfg)
    out = []
    for t in TARGETS:
        reps = {n: r.replays[n] for n in (*REACTIVE, "oracle")}
        for name in TABLES:
            reps[name] = r.per_target[name][t]
            for f in features:
                pol = WithStateBit.fit(f, r.train_data, cfg.window, t, name == "phase-headroom",
                                       r.model.n_phases_, cfg.resources)
                reps[pol.name] = replay(r.data, pol, cfg.window, cfg.safety)
        out.append((t, score(r.data, reps, cfg.window, targets=(t,))))
    return r, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", help="GCD_VMs.tar.gz")
    ap.add_argument("--window", type=int, default=12)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="split seeds (default: 0,1,2,3,4)")
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    traces = load_traces(args.traces)
    runs = [(seed, *run_seed(traces, args.window, seed)) for seed in seeds]
    R = runs[0][1].config.resources
    variants = [("(as fitted today)", "")] + [(f"+ {f}", f" + {f}") for f in FEATURES]
    print(f"The head-room tables with one more state bit, on `{args.traces.split('/')[-1]}`, "
          f"{args.window}-sample windows, split seeds {', '.join(map(str, seeds))}. Produced by "
          "`docs/results/state_features.py` (see its docstring for the bits). A (resource, "
          "target, seed) cell is met by a table when its allocation at the matched target is at "
          "most the cheaper reactive policy's and its windows short at most adaptive-max's; "
          "*either*: by phase-headroom or burst-headroom.\n")
    cells = len(seeds) * len(TARGETS)
    print(f"### Cells met, of {cells} per resource\n")
    print("| state | " + " | ".join(f"{res}: phase-headroom | {res}: burst-headroom | "
                                     f"{res}: either" for res in R) + " |")
    print("|---|" + "---|" * (3 * len(R)))
    for label, suffix in variants:
        row = []
        for j in range(len(R)):
            met = {n: set() for n in TABLES}
            for seed, _, out in runs:
                for t, s in out:
                    for n in TABLES:
                        if max(gaps(s, n + suffix, j, t)) <= 0:
                            met[n].add((seed, t))
            either = met[TABLES[0]] | met[TABLES[1]]
            row += [str(len(met[TABLES[0]])), str(len(met[TABLES[1]])), str(len(either))]
        print(f"| {label} | " + " | ".join(row) + " |")
    print("\n### Every cell: allocation gap / windows-short gap\n")
    print("| resource | target | seed | " + " | ".join(
        f"{n.split('-')[0]} {label}" for label, _ in variants for n in TABLES) + " |")
    print("|---|---|---|" + "---|" * (2 * len(variants)))
    for j, res in enumerate(R):
        for k, t in enumerate(TARGETS):
            for seed, _, out in runs:
                s = out[k][1]
                cols = []
                for _, suffix in variants:
                    for n in TABLES:
                        ga, gw = gaps(s, n + suffix, j, t)
                        c = f"{ga:+.2%} / {gw:+.1%}"
                        cols.append(f"**{c}**" if ga <= 0 and gw <= 0 else c)
                print(f"| {res} | {t:.0%} | {seed} | " + " | ".join(cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
