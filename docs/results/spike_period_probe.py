"""Does the spacing of a job's memory spikes say when the next one cannot come yet? A probe of
the "period of recurring spikes" that issue 25's item 4 names (a checkpoint every N epochs), not
a served policy.

If it did, a policy could serve less than the running maximum M in the windows right after a
spike and go back up before the next one is due. At 1 % of windows at risk that pays only if
some state read from the spacing has a tail below M: its 99th percentile of window max ÷ M
under 1.

Per execution and window (memory, the data set's window in samples, as in risk.py):

- a *spike window* is one whose max is at least ``SPIKE`` × the running maximum including it
  (``SPIKE`` is peak-risk's "at its peak" bin edge, :data:`ai4dl.policy.peak_states.RATIO_EDGES`);
  consecutive spike windows are one spike;
- a *gap* is the number of windows from one spike's last window to the next spike's first;
- the state at the start of window w, from the windows before it only: windows since the last
  spike window (1, 2, 3, 4+) and the shortest gap seen so far (2, 3, 4, 5+; "none" before the
  second spike). "Not due" is fewer windows since the last spike than the shortest gap seen.

For every state: its windows, and the quantiles of window max ÷ M (M the maximum of every sample
before the window). Every execution of the data set is pooled, with no train / test split: the
quantiles are what a table fitted on the very windows it serves would see, so the probe is
optimistic for the spacing, not against it.

    .venv/bin/python docs/results/spike_period_probe.py [--sets synthetic,dlcorpus]

Prints a markdown table per data set. Data: risk.py's (../shared/data, AI4DL_DATA; the synthetic
jobs are run.sh's).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from ai4dl.policy.peak_states import RATIO_EDGES

import risk

SPIKE = RATIO_EDGES[-1]
SINCE_CAP = 4                 # windows since the last spike: 1, 2, 3, 4+
GAP_CAP = 5                   # shortest gap seen: 2, 3, 4, 5+
QUANTILES = (0.5, 0.99, 1.0)
MIN_CELL = 100                # windows: 1 ÷ 1 %, the fewest in which one at risk can show


class WindowState(NamedTuple):
    since: int                # windows since the last spike window (>= 1)
    gap: int | None           # the shortest gap seen before the window (None: one spike so far)
    ratio: float              # the window's max ÷ M


def window_maxima(usage: np.ndarray, window: int) -> np.ndarray:
    """The max of each complete window of a 1-D series."""
    n = len(usage) // window
    return np.asarray(usage[:n * window], np.float64).reshape(n, window).max(axis=1)


def spike_states(maxima: Sequence[float]) -> Iterator[WindowState]:
    """The state of every window that follows a spike, from the windows before it."""
    peak = -np.inf
    last_spike = None
    shortest = None
    for w, x in enumerate(maxima):
        if last_spike is not None and peak > 0:
            yield WindowState(w - last_spike, shortest, x / peak)
        if x >= SPIKE * max(peak, x):
            if last_spike is not None and w - last_spike > 1:
                gap = w - last_spike
                shortest = gap if shortest is None else min(shortest, gap)
            last_spike = w
        peak = max(peak, x)


def state_label(s: WindowState) -> tuple[str, str]:
    since = f"{s.since}" if s.since < SINCE_CAP else f"{SINCE_CAP}+"
    if s.gap is None:
        return since, "none"
    return since, (f"{s.gap}" if s.gap < GAP_CAP else f"{GAP_CAP}+")


def not_due(s: WindowState) -> bool:
    return s.gap is not None and s.since < s.gap


def tabulate(label: str) -> tuple[dict, int]:
    window = risk.SETS[label][2]
    traces = risk.load_set(label)
    rows: dict = defaultdict(list)
    n_exec = 0
    for ex in traces:
        col = list(ex.features).index("memory")
        maxima = window_maxima(np.asarray(ex.values, np.float64)[:, col], window)
        n_exec += 1
        for s in spike_states(maxima):
            rows[state_label(s)].append(s.ratio)
            rows["not due" if not_due(s) else "due, or no gap seen"].append(s.ratio)
            rows["every window after a spike"].append(s.ratio)
    return rows, n_exec


def _q(values: list[float]) -> str:
    q = np.quantile(np.asarray(values), QUANTILES)
    return " | ".join(f"{v:.3f}" for v in q)


def table(label: str) -> str:
    rows, n_exec = tabulate(label)
    every = len(rows["every window after a spike"])
    name = risk.SETS[label][3].split(":")[0]     # every execution, not the held-out side
    out = [f"### {name} ({n_exec} executions, {every:,} windows after a spike, "
           f"window {risk.SETS[label][2]} samples)", "",
           "| windows since the last spike | shortest gap seen | windows | window max ÷ M: "
           "median | 99th percentile | max |", "|---|---|---:|---:|---:|---:|"]
    cells = sorted(k for k in rows if isinstance(k, tuple))
    for since, gap in cells:
        out.append(f"| {since} | {gap} | {len(rows[since, gap]):,} | {_q(rows[since, gap])} |")
    for agg in ("not due", "due, or no gap seen", "every window after a spike"):
        if rows[agg]:
            out.append(f"| **{agg}** | | {len(rows[agg]):,} | {_q(rows[agg])} |")
    low = [k for k in cells if len(rows[k]) >= MIN_CELL and np.quantile(rows[k], 0.99) < 1.0]
    n_low = sum(len(rows[k]) for k in low)
    out += ["", f"States of at least {MIN_CELL} windows (enough to see one at risk at 1 %) whose "
            f"99th percentile is below 1: {len(low)} ({n_low:,} of {every:,} windows)."]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="synthetic,dlcorpus")
    args = ap.parse_args(argv)
    sets = risk.probe_sets("spike_period_probe", args.sets)
    if sets is None:
        return 2
    print("The spacing of memory spikes, per state (`docs/results/spike_period_probe.py`; "
          "in-sample: every execution pooled). A state whose 99th percentile is at least 1 "
          "needs the running maximum M, or more, to leave at most 1 % of its windows at risk.\n")
    return risk.print_tables("spike_period_probe", sets, table)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
