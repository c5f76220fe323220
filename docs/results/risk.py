"""Memory judged by risk, over split seeds (issue 25's bars; ../shared/docs/evaluation.md,
"Memory is judged by risk"): per data set, every policy's memory allocation ÷ oracle at a
matched share of windows at risk (1, 2, 5 %), with the operator's default safety layer (what a
pod gets), the default's (``auto``'s) realised share of windows at risk against its 1 %
objective, and the bars.

    .venv/bin/python docs/results/risk.py run [--sets gcd-1h,...] [--seeds 0,1,2,3,4]
    .venv/bin/python docs/results/risk.py table > docs/results/risk.md

``run`` writes one JSON per (data set, seed) under out/risk (a data set and seed at a time, so
a long run can be resumed or split); ``table`` reads them all. Data: ../shared/data (override
with AI4DL_DATA); the synthetic jobs are the generator's 200 executions at seed 5, as in
docs/results/run.sh.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from ai4dl.errors import Ai4dlError
from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from verdict_stats import mean_se, side_of_one_se
from ai4dl.io import load_traces
from ai4dl.rules.objectives import RISKS
from ai4dl.rules.safety import SafetyConfig

DATA = Path(os.environ.get("AI4DL_DATA", "../shared/data"))
OUT = Path("out/risk")
#: label -> (what to load, load options, window in samples, label for the table)
SETS = {
    "gcd-1h": (DATA / "gcd_vms" / "GCD_VMs.tar.gz", {}, 12, "GCD_VMs, 1 h windows"),
    "gcd-15min": (DATA / "gcd_vms" / "GCD_VMs.tar.gz", {}, 3, "GCD_VMs, 15 min windows"),
    "alibaba": (DATA / "alibaba_genai2026_pods", {}, 10, "Alibaba GenAI pods"),
    "synthetic": ("out/synthetic-dl.csv", {}, 40, "Synthetic DL jobs"),
    "dlcorpus": ("dl-corpus", {}, 40, "DL corpus: held-out jobs"),
}
#: The baselines the default must beat (reactive, VPA, the KRR replica), and the constant that
#: knows each job's future.
BASELINES = ("adaptive-max", "adaptive-stat", "vpa", "krr")
POLICIES = ("static", *BASELINES, "peak-risk", "auto", "oracle")
SHOWN = ("static", *BASELINES, "peak-risk", "auto")
OBJECTIVE = RISKS[0]         # the default objective: at most 1 % of windows at risk


#: run.sh's command for the synthetic jobs (its arguments after ``ai4dl``; a test holds the two
#: the same: without ``--no-gpu`` the generator draws other memory series)
SYNTHETIC_ARGS = ("-q", "synthetic", "-o", "out/synthetic-dl.csv", "--executions", "200",
                  "--seed", "5", "--no-gpu")


def _synthetic() -> None:
    """run.sh's synthetic jobs (the same command), when run.sh has not written them."""
    path = Path(SYNTHETIC_ARGS[SYNTHETIC_ARGS.index("-o") + 1])
    if not path.exists():
        from ai4dl.cli import main as cli

        path.parent.mkdir(parents=True, exist_ok=True)
        if cli(list(SYNTHETIC_ARGS)):
            raise SystemExit("could not write the synthetic jobs")


def load_set(label: str):
    """One data set of :data:`SETS`, the synthetic jobs written first when run.sh has not."""
    src, opts, _, _ = SETS[label]
    if label == "synthetic":
        _synthetic()
    return load_traces(str(src), **opts)


def unknown_set(sets: list[str]) -> str | None:
    """One line naming the first of ``sets`` that is not a label of :data:`SETS`, or None."""
    bad = [s for s in sets if s not in SETS]
    return f"unknown data set {bad[0]!r} (known: {', '.join(SETS)})" if bad else None


def probe_sets(prog: str, text: str) -> list[str] | None:
    """A probe's ``--sets`` (labels separated by commas); None, after one line on stderr
    naming the first unknown one, when one is not a label of :data:`SETS`."""
    sets = text.split(",")
    if unknown_set(sets):
        print(f"{prog}: {unknown_set(sets)}", file=sys.stderr)
        return None
    return sets


def seed_list(text: str) -> list[int]:
    """``--seeds``: split seeds separated by commas (ValueError, one line, otherwise)."""
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise ValueError(f"--seeds must be integers separated by commas, not {text!r}") \
            from None


def print_tables(prog: str, sets: list[str], table) -> int:
    """A probe's tables: ``table(label)`` printed for each of ``sets``; a missing or unreadable
    data set is one line naming it (exit 2), not a traceback."""
    for label in sets:
        try:
            print(table(label))
        except Ai4dlError as e:
            print(f"{prog}: {label}: {e}", file=sys.stderr)
            return 2
    return 0


def run_one(label: str, seed: int) -> dict:
    window = SETS[label][2]
    traces = load_set(label)
    cfg = EvaluationConfig(resources=("memory",), window=window, seed=seed, policies=POLICIES,
                           targets=(0.97,), risks=RISKS,
                           safety=SafetyConfig.operator_defaults(1, 0))
    t0 = time.perf_counter()
    r = run_evaluation(traces, cfg)
    out = {"label": label, "seed": seed, "window": window, "seconds": time.perf_counter() - t0,
           "executions": len(r.data.usage), "windows": r.scores["oracle"][0].scored_windows,
           "policies": {}}
    for name, rows in r.scores.items():
        s = rows[0]
        out["policies"][name] = {
            "risk_share": s.risk_share,
            "vs_oracle_risk": {str(k): v for k, v in s.vs_oracle_risk_at.items()},
            "worst_rel": {str(k): v for k, v in s.worst_shortfall_risk_rel_at.items()}}
    out["auto_winner"] = {str(k): c.winners[0] for k, c in r.auto_risk.items()}
    # held-out executions with workload history (an earlier execution of their group on the
    # held-out side): the only ones the KRR replica can size from history
    first: dict = {}
    for g, t in zip(r.data.groups, r.data.starts):
        first[g] = min(first.get(g, t), t)
    out["with_history"] = int(sum(t > first[g] for g, t in zip(r.data.groups, r.data.starts)))
    return out


def store(doc: dict, path: Path, what: str) -> None:
    """One run's JSON, written whole (a temporary file renamed onto it), and its time said."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, default=float))
    tmp.replace(path)
    print(f"{what}: {doc['seconds']:.0f} s", file=sys.stderr)


def cmd_run(sets: list[str], seeds: list[int]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for label in sets:
        for seed in seeds:
            store(run_one(label, seed), OUT / f"{label}-s{seed}.json", f"{label} seed {seed}")
    return 0


def _fmt(m: float, se: float) -> str:
    if not math.isfinite(m):
        return "—"
    return f"{m:.3f}" + (f" ± {se:.3f}" if math.isfinite(se) else "")


def cmd_table() -> int:
    docs: dict = {}
    for p in sorted(OUT.glob("*.json")):
        d = json.loads(p.read_text())
        docs.setdefault(d["label"], []).append(d)
    print("Memory judged by risk: allocation ÷ oracle at a matched share of windows at risk "
          "(each policy at its own multiplier, so that exactly that share of the scored "
          "windows has any sample above its allocation), with the operator's default safety "
          "layer: the multiplier goes on the policy's own proposals and the layer serves the "
          "result, as the operator does (the served order; the layer's floors, such as the "
          "working-set cover, are not multiplied with it), mean ± standard error over the split seeds (each seed holds out other jobs, "
          "so the spread is the job-sampling noise). `static` is the clairvoyant static peak "
          "(each execution's own lifetime peak, held all along); `auto` is the default, chosen "
          "under the served objectives (cpu 97 % of samples, memory at most s of windows at "
          "risk); `peak-risk` the anticipating policy alone. Produced by "
          "`docs/results/risk.py`.\n")
    verdicts, notes = [], []
    for label, (_, _, window, title) in SETS.items():
        runs = sorted(docs.get(label, []), key=lambda d: d["seed"])
        if not runs:
            continue
        seeds = [d["seed"] for d in runs]
        print(f"### {title} (window {window} samples; seeds {', '.join(map(str, seeds))}; "
              f"{runs[0]['executions']} held-out executions, {runs[0]['windows']:,} scored "
              f"windows at seed {seeds[0]})\n")
        head = ["policy", *(f"at {100 * s:g} %" for s in RISKS),
                "windows at risk as served", f"worst shortfall at {100 * OBJECTIVE:g} % (÷ usage)"]
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for name in SHOWN:
            if name not in runs[0]["policies"]:
                continue
            cells = [_fmt(*mean_se([d["policies"][name]["vs_oracle_risk"][str(s)]
                                     for d in runs])) for s in RISKS]
            share = mean_se([d["policies"][name]["risk_share"] for d in runs])
            worst = mean_se([d["policies"][name]["worst_rel"][str(OBJECTIVE)] for d in runs])
            print(f"| {name} | " + " | ".join(cells)
                  + f" | {100 * share[0]:.2f} % | {100 * worst[0]:.1f} % |")
        print()
        for s in RISKS:
            key = str(s)
            rows = []
            for d in runs:
                pol = d["policies"]
                reactive = min(pol[b]["vs_oracle_risk"][key] for b in BASELINES[:3] if b in pol)
                rows.append((pol["auto"]["vs_oracle_risk"][key] / reactive - 1.0,
                             pol["auto"]["vs_oracle_risk"][key] / pol["krr"]["vs_oracle_risk"][key]
                             - 1.0,
                             pol["auto"]["vs_oracle_risk"][key]
                             / pol["static"]["vs_oracle_risk"][key]))
            g, se = mean_se([x[0] for x in rows])
            gk, sek = mean_se([x[1] for x in rows])
            vs_static = mean_se([x[2] for x in rows])
            verdicts.append(f"| {title} | {100 * s:g} % | {_gap(g, se)} | {_word(g, se)} | "
                            f"{_gap(gk, sek)} | {_word(gk, sek)} | {_fmt(*vs_static)} |")
        cal = mean_se([d["policies"]["auto"]["risk_share"] for d in runs])
        hist = runs[0].get("with_history")
        notes.append(f"- {title}: auto realised {100 * cal[0]:.2f} %"
                     + (f" ± {100 * cal[1]:.2f} %" if math.isfinite(cal[1]) else "")
                     + f" of windows at risk against its {100 * OBJECTIVE:g} % objective ("
                     + ("within" if abs(cal[0] - OBJECTIVE) <= 0.005 else "outside")
                     + f" ±0.5 points; one window is {100 / runs[0]['windows']:.3f} points at "
                     f"seed {seeds[0]}); {hist} of {runs[0]['executions']} held-out executions "
                     f"have workload history for the KRR replica at seed {seeds[0]}.")
    print("### The bars\n")
    print("The default's gap (allocation at the matched share ÷ the other's − 1, mean ± standard "
          "error over seeds) to the cheapest of adaptive-max, adaptive-stat and VPA, and to the "
          "KRR replica; and its allocation ÷ the clairvoyant static peak's. An execution without "
          "workload history keeps its request under the KRR replica, and where the trace records "
          "none that request is the execution's own peak: there the replica *is* the clairvoyant "
          "static peak.\n")
    print("| data set | share at risk | gap to reactive/VPA | verdict | gap to KRR | verdict "
          "| ÷ clairvoyant static |")
    print("|---|---|---:|---|---:|---|---:|")
    for v in verdicts:
        print(v)
    print("\nCalibration and history:\n")
    print("\n".join(notes))
    return 0


def _gap(g: float, se: float) -> str:
    return f"{100 * g:+.1f} %" + (f" ± {100 * se:.1f} %" if math.isfinite(se) else "")


def _word(g: float, se: float) -> str:
    if not math.isfinite(se):
        return "cheaper (one seed)" if g < 0 else "dearer (one seed)"
    side = side_of_one_se(g, se)
    if side < 0:
        return "cheaper beyond one s.e."
    if g < 0:
        return "cheaper within one s.e. (not resolved)"
    if side > 0:
        return "dearer beyond one s.e."
    return "dearer within one s.e. (not resolved)"


def run_or_table(argv: list[str], description: str, sets, cmd_run, cmd_table) -> int:
    """The ``run [--sets A,B] [--seeds 0,1,...]`` / ``table`` command line of a script that
    stores one JSON per run and tabulates them (this one, starts.py); an unknown set or a bad
    seed is argparse's usage error."""
    ap = argparse.ArgumentParser(description=description)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--sets", default=",".join(sets))
    r.add_argument("--seeds", default="0,1,2,3,4", type=seed_list)
    sub.add_parser("table")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        chosen = args.sets.split(",")
        bad = [s for s in chosen if s not in sets]
        if bad:
            ap.error(f"unknown data set {bad[0]!r} (known: {', '.join(sets)})")
        return cmd_run(chosen, args.seeds)
    return cmd_table()


def main(argv: list[str]) -> int:
    return run_or_table(argv, __doc__.split("\n\n")[0], SETS, cmd_run, cmd_table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
