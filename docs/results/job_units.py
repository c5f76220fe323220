"""Do the workers of one distributed job share phases, and does sizing them as one unit pay?
Reads the DL corpus's two-rank DDP jobs and prints docs/results/dl-corpus-job-units.md.

    .venv/bin/python docs/results/job_units.py > docs/results/dl-corpus-job-units.md

1. Phases. A phase model is fitted on every other job; the phases it detects on the two ranks of
   a job are compared sample by sample (aligned on the clock), against ranks of *different* DDP
   jobs aligned from their start (what agreement phase frequencies alone give).
2. Sizing. The DDP jobs are scored in two folds (fitted on every non-DDP job and the other
   fold's DDP jobs). Per pod (what the operator does) against two job-unit variants:
   *shared phase*: each worker's policy reads the phase detected on the job's envelope (the
   sample-wise max of its workers), and *coherent*: each window, every worker gets the largest
   of the workers' shared-phase allocations. Allocation ÷ oracle at matched fulfilment and the
   windows with a shortfall, per resource, through the evaluator's own replay and scoring.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np
from sklearn.metrics import adjusted_rand_score

from ai4dl.evaluation.evaluate import EvaluationConfig, build_policies, run_evaluation
from ai4dl.judge import Replay, replay, score
from ai4dl.io.loaders import DL_CORPUS, load_dl_corpus
from ai4dl.method.model import PhaseModel
from ai4dl.method.traces import Execution, TraceSet

POLICIES = ("adaptive-max", "phase", "phase-headroom", "auto", "oracle")
TARGETS = (0.95, 0.97)


def by_job(traces) -> dict[str, list[Execution]]:
    out: dict[str, list[Execution]] = {}
    for e in traces:
        if e.meta["family"] == "ddp":
            out.setdefault(e.group, []).append(e)
    return {g: sorted(es, key=lambda e: e.meta["rank"]) for g, es in sorted(out.items())}


def aligned(a: Execution, b: Execution) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a's and b's samples at the same time (the nearest of b within a step)."""
    j = np.clip(np.searchsorted(b.times, a.times), 0, len(b) - 1)
    prev = np.clip(j - 1, 0, len(b) - 1)
    j = np.where(np.abs(b.times[prev] - a.times) < np.abs(b.times[j] - a.times), prev, j)
    ok = np.abs(b.times[j] - a.times) <= (a.step or 1.0) / 2 + 1e-6
    return np.flatnonzero(ok), j[ok]


def envelope(workers: list[Execution]) -> Execution:
    """The job's envelope: rank 0's clock, the sample-wise max over the workers."""
    first = workers[0]
    values = first.values.copy()
    for other in workers[1:]:
        i, j = aligned(first, other)
        values[i] = np.maximum(values[i], other.values[j])
    return Execution(first.group + "/envelope", first.times, values, first.features,
                     first.units, first.group, first.step, {})


def phase_agreement(traces, seed: int) -> tuple[list[tuple[str, float, float]],
                                                tuple[float, float], float, float, int]:
    """Per job the share of aligned samples where the ranks are in the same detected phase, and
    the adjusted Rand index of the two phase sequences (0 = chance); both for ranks of different
    jobs; the mean CPU correlation of a job's ranks, and of
    different jobs'; the model's number of phases."""
    jobs = by_job(traces)
    others = TraceSet([e for e in traces if e.meta["family"] != "ddp"])
    model = PhaseModel(random_state=seed).fit(others)
    workers = [e for es in jobs.values() for e in es]
    detected = {e.name: p for e, p in zip(workers, model.predict(workers))}
    pairs, cpu_r = [], []
    for g, (a, b) in jobs.items():
        i, j = aligned(a, b)
        pa, pb = detected[a.name][i], detected[b.name][j]
        pairs.append((g, float(np.mean(pa == pb)), adjusted_rand_score(pa, pb)))
        cpu_r.append(np.corrcoef(a.column("cpu")[i], b.column("cpu")[j])[0, 1])
    base, base_ari, base_r = [], [], []
    names = list(jobs)
    for x in range(len(names)):
        for y in range(len(names)):
            if x == y:
                continue
            a, b = jobs[names[x]][0], jobs[names[y]][1]
            n = min(len(a), len(b))
            pa, pb = detected[a.name][:n], detected[b.name][:n]
            base.append(float(np.mean(pa == pb)))
            base_ari.append(adjusted_rand_score(pa, pb))
            base_r.append(np.corrcoef(a.column("cpu")[:n], b.column("cpu")[:n])[0, 1])
    return (pairs, (float(np.mean(base)), float(np.mean(base_ari))), float(np.nanmean(cpu_r)),
            float(np.nanmean(base_r)), model.n_phases_)


def sizing(traces, seed: int) -> tuple[dict, int]:
    """Per pod, shared phase, coherent: scores over both folds' DDP executions."""
    jobs = by_job(traces)
    names = list(jobs)
    np.random.default_rng(seed).shuffle(names)
    folds = [set(names[: len(names) // 2]), set(names[len(names) // 2:])]
    cfg = EvaluationConfig(window=40, seed=seed, policies=POLICIES, targets=TARGETS,
                           test_fraction=0.0)
    datas, allocs = [], []  # per fold: its ReplayInput; (variant, policy, target) -> Replay
    for fold in folds:
        test = TraceSet([e for g in sorted(fold) for e in jobs[g]])
        train = TraceSet([e for e in traces if e.group not in fold])
        res = run_evaluation(traces, cfg, split=(train, test))
        data = res.data
        index = {n: k for k, n in enumerate(data.names)}
        # shared phase: every worker reads the phase detected on its job's envelope
        shared_phases = list(data.phases)
        for g in sorted(fold):
            env_phase = res.model.predict([envelope(jobs[g])])[0]
            for w in jobs[g]:
                i, j = aligned(w, jobs[g][0])
                p = shared_phases[index[w.name]].copy()
                p[i] = env_phase[j]
                shared_phases[index[w.name]] = p
        shared_data = dataclasses.replace(data, phases=shared_phases)
        reps: dict = {}
        for name in POLICIES:
            for t in TARGETS:
                if name in res.fitted:
                    pol, per_pod = res.fitted[name][t], res.per_target[name][t]
                else:
                    pol = build_policies(dataclasses.replace(cfg, policies=(name,)), res.model,
                                         res.train_data, t)[0]
                    per_pod = res.replays[name]
                shared = replay(shared_data, pol, cfg.window, cfg.safety)
                # coherent: each window, every worker gets the largest of its job's allocations
                coherent = [a.copy() for a in shared.allocations]
                for g in sorted(fold):
                    ks = [index[w.name] for w in jobs[g]]
                    top = np.full((max(len(coherent[k]) for k in ks), coherent[ks[0]].shape[1]),
                                  -np.inf)
                    for k in ks:
                        n = len(coherent[k])
                        top[:n] = np.maximum(top[:n], shared.allocations[k])
                    for k in ks:
                        coherent[k] = top[: len(coherent[k])].copy()
                reps[("per pod", name, t)] = per_pod
                reps[("shared phase", name, t)] = shared
                reps[("coherent", name, t)] = Replay(name, coherent)
        datas.append(data)
        allocs.append(reps)
    # one scoring over both folds: their executions and allocations concatenated
    data = dataclasses.replace(datas[0], **{f: sum((getattr(d, f) for d in datas), []) for f in
                                            ("names", "usage", "phases", "initial", "groups",
                                             "starts")})
    oracle = Replay("oracle", sum((r[("per pod", "oracle", TARGETS[0])].allocations
                                   for r in allocs), []))
    out: dict = {}
    for key in allocs[0]:
        variant, name, t = key
        rep = Replay(name, sum((r[key].allocations for r in allocs), []))
        out[key] = score(data, {name: rep, "oracle": oracle}, cfg.window, False, (t,))[name]
    return out, len(data.names)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", default=str(DL_CORPUS), help="corpus folder (default: the "
                   "bundled one)")
    args = p.parse_args(argv)
    traces = load_dl_corpus(args.corpus)
    pairs, base, r_same, r_base, k = phase_agreement(traces, args.seed)
    print("Workers of one DDP job (the DL corpus, `operator/ai4dl/data/dlcorpus`, 1 s samples): "
          f"phases detected by a {k}-phase model fitted on the other five families. Produced "
          "by `docs/results/job_units.py` (run by `docs/results/run.sh`).\n")
    print("| job | rank 0 and rank 1 in the same phase (share of aligned samples) | adjusted Rand "
          "index (0: chance, 1: the same phases) |")
    print("|---|---|---|")
    for g, a, ari in pairs:
        print(f"| {g} | {a:.3f} | {ari:.3f} |")
    print(f"| **mean** | **{np.mean([a for _, a, _ in pairs]):.3f}** | "
          f"**{np.mean([x for _, _, x in pairs]):.3f}** |")
    print(f"| ranks of different jobs, aligned from their start | {base[0]:.3f} | "
          f"{base[1]:.3f} |\n")
    print(f"CPU correlation of the two ranks of a job: {r_same:.2f} (different jobs: "
          f"{r_base:.2f}).\n")
    rows, n = sizing(traces, args.seed)
    print(f"Sizing the {n} DDP executions (two folds by job; window 40 samples): allocation ÷ "
          "oracle at matched fulfilment, and windows with a shortfall at that margin.\n")
    print("| policy | resource | target | per pod | shared phase | coherent |")
    print("|---|---|---|---|---|---|")
    for name in POLICIES[:-1]:
        for j, res in enumerate(("cpu", "memory")):
            for t in TARGETS:
                cells = []
                for variant in ("per pod", "shared phase", "coherent"):
                    s = rows[(variant, name, t)][j]
                    cells.append(f"{s.vs_oracle_at[t]:.3f} ({s.short_windows_at[t]})")
                print(f"| {name} | {res} | {100 * t:g} % | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
