"""CRBM fit time on the CPU and on CUDA for the same data, what ``--device auto`` picks, and the
measurements behind its cost model (issue 29). Run by bench/gpu_check.sh on a GPU machine;
runs its CPU part anywhere (CUDA parts are skipped, said so). Prints as it goes and writes a
JSON of every figure to ``--out``.

    python3 bench/gpu_check.py --out DIR [--executions 1000] [--samples 2400] [--budget 280]

Stages (each timed, each failing alone, reported and skipped):

1. data: ai4dl.method.synthetic.generate_fixed_length(executions, samples, seed 0), 4 features;
2. whole ``PhaseModel.fit`` on cpu, then on cuda (the first CUDA work of the process: its
   context start is in that figure, as for one CLI run), the adjusted Rand index between the
   two models' phases on all samples, and what auto picks for this size;
3. the CRBM alone on the same standardised data: cpu (the default fused loop) twice, cpu with
   the reference loop once (bit-identical weights expected), cuda with the graph loop twice,
   cuda fused (no graph) once, cuda reference (the loop issue 29 measured) once;
4. calibration: 10 fixed epochs at batch 512 and 128 on cpu and on cuda (graph), and the CUDA
   start-up in a fresh process -> the cost model's constants (ai4dl.method.crbm_train);
5. a sweep of smaller fits (cpu against cuda, and auto's pick before and after calibration).

Without the CPU fit (every other figure is compared with it, and the CRBM stages need its
standardisation), or with no execution to fit, it measured nothing: no JSON, the reason in one
line on stderr, exit 1 (issue 44).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from measured import refuse

RESULTS: dict = {}
START = time.perf_counter()


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - START:6.1f} s] {msg}", flush=True)


def stage(name: str, budget: float):
    """Decorator-ish runner: run fn, store its result under name, never raise."""
    def run(fn, *a, **kw):
        if time.perf_counter() - START > budget:
            say(f"SKIP {name}: over the {budget:.0f} s budget")
            RESULTS[name] = "skipped (budget)"
            return None
        say(f"-- {name}")
        try:
            out = fn(*a, **kw)
        except Exception as err:  # noqa: BLE001 - a bench: report and go on
            say(f"FAILED {name}: {type(err).__name__}: {err}")
            traceback.print_exc(file=sys.stdout)
            RESULTS[name] = f"failed: {type(err).__name__}: {err}"
            return None
        RESULTS[name] = out
        say(f"   {name}: {json.dumps(out, default=str)}")
        return out
    return run


def env() -> dict:
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cuda": torch.cuda.is_available(), "cpus": os.cpu_count(),
           "torch_threads": torch.get_num_threads()}
    if out["cuda"]:
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def whole_fit(traces, device: str) -> dict:
    """One PhaseModel.fit; the model is kept in whole_fit.models[device]."""
    from ai4dl.method.model import PhaseModel

    t = time.perf_counter()
    m = PhaseModel(device=device, random_state=0).fit(traces)
    wall = time.perf_counter() - t
    r = m.fit_report_
    whole_fit.models[device] = m
    return ({"device": r.device, "fit_s": round(wall, 2),
             "stages_s": {k: round(v, 2) for k, v in m.fit_timings_.items()},
             "crbm_epochs": r.crbm_epochs, "phases": int(len(m.centroids_)),
             "validation_error": r.validation_error,
             "reconstruction_error": r.reconstruction_error})


whole_fit.models = {}


def crbm(xs, device: str, method: str, n_hidden: int = 10, **kw) -> dict:
    from ai4dl.method.crbm_train import train_crbm

    t = time.perf_counter()
    params, rep = train_crbm(xs, n_hidden=n_hidden, n_history=3, seed=0, device=device,
                             method=method, **kw)
    wall = time.perf_counter() - t
    crbm.last = params
    return {"device": rep.device, "method": rep.method, "s": round(wall, 3),
            "epochs": rep.epochs, "validation_error": round(rep.validation_error, 6),
            "s_per_epoch": round(wall / rep.epochs, 4)}


def cuda_cold_start() -> float:
    """Seconds from nothing to a first cuBLAS product on CUDA, in a fresh process (torch
    import excluded): the start-up a one-shot CLI fit pays."""
    code = ("import time, torch\nt = time.perf_counter()\n"
            "a = torch.randn(512, 16, device='cuda'); b = torch.randn(16, 10, device='cuda')\n"
            "torch.sigmoid(torch.addmm(torch.zeros(10, device='cuda'), a, b)).sum().item()\n"
            "print(time.perf_counter() - t)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--executions", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=2400)
    ap.add_argument("--budget", type=float, default=280.0,
                    help="seconds after which optional stages are skipped (default 280)")
    args = ap.parse_args()
    if args.executions < 1:     # before torch's import: nothing to fit
        return refuse("gpu_check", f"--executions {args.executions}: nothing to fit")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    B = args.budget

    import torch

    from ai4dl.method import crbm_train
    from ai4dl.method import synthetic
    from ai4dl.method.crbm_train import FitSize, resolve_device

    e = stage("env", math.inf)(env)
    has_cuda = bool(e and e["cuda"])

    t = time.perf_counter()
    traces = synthetic.generate_fixed_length(args.executions, args.samples, seed=0)
    RESULTS["data"] = {"executions": args.executions, "samples": args.samples,
                       "features": list(traces.features), "generate_s": round(time.perf_counter() - t, 1)}
    say(f"data: {RESULTS['data']}")

    # ---- 2. whole fits
    stage("fit_cpu", math.inf)(whole_fit, traces, "cpu")
    if has_cuda:
        stage("fit_cuda", math.inf)(whole_fit, traces, "cuda")
    cpu_model, cuda_model = whole_fit.models.get("cpu"), whole_fit.models.get("cuda")
    if cpu_model is not None and cuda_model is not None:
        def ari():
            from sklearn.metrics import adjusted_rand_score

            a = np.concatenate([d.phase for d in cpu_model.detect(list(traces))])
            b = np.concatenate([d.phase for d in cuda_model.detect(list(traces))])
            return round(float(adjusted_rand_score(a, b)), 4)
        stage("ari_cpu_vs_cuda", math.inf)(ari)
    if cpu_model is None:
        say("no CPU model: the CRBM stages need its standardisation; stopping")
        return finish(out_dir)
    raw = [ex.values for ex in traces]
    xs = cpu_model._standardise(raw)
    n_train = sum(len(x) for x in xs) - sum(
        len(xs[i]) for i in np.random.default_rng(0).permutation(len(xs))[:round(0.1 * len(xs))])
    size = FitSize(min(n_train, 200_000), 16, 10, 512, 60)
    RESULTS["size"] = dataclasses.asdict(size)

    def auto_pick(s: FitSize) -> dict:
        import unittest.mock as um

        with um.patch.object(torch.cuda, "is_available", lambda: True):
            pick = resolve_device("auto", s)
        return {"pick_if_cuda": pick, "here": resolve_device("auto", s),
                "cpu_estimate_s": round(s.cpu_seconds(), 2),
                "cuda_estimate_s": round(s.cuda_seconds(), 2)}
    stage("auto_issue_size", math.inf)(auto_pick, size)

    # ---- 3. the CRBM alone
    runs = {}

    def run(name, device, method, **kw):
        res = stage(name, B)(crbm, xs, device, method, **kw)
        if res:
            runs[name] = crbm.last
        return res

    run("crbm_cpu_1", "cpu", "auto")
    run("crbm_cpu_2", "cpu", "auto")
    run("crbm_cpu_reference", "cpu", "reference")
    if "crbm_cpu_1" in runs and "crbm_cpu_reference" in runs:
        a, b = runs["crbm_cpu_1"], runs["crbm_cpu_reference"]
        RESULTS["cpu_fused_equals_reference"] = all(
            np.array_equal(getattr(a, n), getattr(b, n)) for n in ("W", "B", "A", "b_visible", "b_hidden"))
        say(f"cpu fused == reference, bit for bit: {RESULTS['cpu_fused_equals_reference']}")
    if has_cuda:
        run("crbm_cuda_graph_1", "cuda", "auto")
        run("crbm_cuda_graph_2", "cuda", "auto")
        run("crbm_cuda_fused", "cuda", "fused")
        if "crbm_cuda_graph_2" in runs and "crbm_cuda_fused" in runs:
            a, b = runs["crbm_cuda_graph_2"], runs["crbm_cuda_fused"]
            RESULTS["cuda_graph_vs_fused_max_abs"] = float(max(
                np.max(np.abs(getattr(a, n) - getattr(b, n))) for n in ("W", "B", "A")))
            say(f"cuda graph vs fused, max |dW|: {RESULTS['cuda_graph_vs_fused_max_abs']:.3g}")
        run("crbm_cuda_reference", "cuda", "reference")

    # ---- 4. calibration of the cost model: per-epoch time at 10 and at 200 hidden units (the
    # same batches, 20x the arithmetic) separates the per-batch cost from the per-unit one
    cal = {}
    for dev, method in [("cpu", "auto")] + ([("cuda", "graph")] if has_cuda else []):
        for hidden, epochs in ((10, 10), (200, 4)):
            res = stage(f"cal_{dev}_h{hidden}", B)(crbm, xs, dev, method, n_hidden=hidden,
                                                   epochs=epochs, patience=10**6)
            if res:
                cal[(dev, hidden)] = res["s_per_epoch"]
    cold = stage("cuda_cold_start_s", B)(cuda_cold_start) if has_cuda else None

    def constants() -> dict:
        units = size.samples_per_epoch * size.columns
        batches = size.batches
        out = {"current": {"CPU_SECONDS_PER_UNIT": crbm_train.CPU_SECONDS_PER_UNIT,
                           "CPU_SECONDS_PER_BATCH": crbm_train.CPU_SECONDS_PER_BATCH,
                           "CUDA_START_SECONDS": crbm_train.CUDA_START_SECONDS,
                           "CUDA_SECONDS_PER_BATCH": crbm_train.CUDA_SECONDS_PER_BATCH}}
        for dev in ("cpu", "cuda"):
            if (dev, 10) in cal and (dev, 200) in cal:
                # time an epoch = units * hidden * c + batches * b, at hidden 10 and 200
                t1, t2 = cal[(dev, 10)], cal[(dev, 200)]
                c = max((t2 - t1) / (units * 190), 0.0)
                b = max((t1 - units * 10 * c) / batches, 0.0)
                out[f"{dev}_per_unit"], out[f"{dev}_per_batch"] = float(f"{c:.3g}"), float(f"{b:.3g}")
        if "cpu_per_unit" in out:
            out["CPU_SECONDS_PER_UNIT"] = out["cpu_per_unit"]
            out["CPU_SECONDS_PER_BATCH"] = out["cpu_per_batch"]
        if "cuda_per_batch" in out:
            # warm (the context is up); the graph capture is in the run's time. The arithmetic
            # term on CUDA (cuda_per_unit) should be ~0 at these widths: launch-bound
            out["CUDA_SECONDS_PER_BATCH"] = float(f"{cal[('cuda', 10)] / batches:.3g}")
        if cold is not None:
            out["CUDA_START_SECONDS"] = float(f"{cold:.3g}")
        return out
    consts = stage("suggested_constants", math.inf)(constants)

    # ---- 5. smaller fits: who is faster, and what auto picks (current and suggested constants)
    def sweep() -> list:
        rows = []
        for n in (5, 20, 60):
            sub = xs[:n]
            if len(sub) < n:
                break
            c = crbm(sub, "cpu", "auto")
            row = {"executions": n, "cpu_s": c["s"], "epochs_cpu": c["epochs"]}
            if has_cuda:
                g = crbm(sub, "cuda", "graph")
                row.update(cuda_warm_s=g["s"], cuda_cold_s=round(g["s"] + (cold or 0.0), 3),
                           epochs_cuda=g["epochs"])
                row["faster_one_shot"] = "cuda" if row["cuda_cold_s"] < c["s"] else "cpu"
            per = sum(len(x) for x in sub[:n - round(0.1 * n)])  # all of one length
            s = FitSize(min(per, 200_000), 16, 10, 512, 60)
            row["auto_current"] = "cuda" if s.cuda_pays() else "cpu"
            if consts and "CPU_SECONDS_PER_UNIT" in consts and "CUDA_SECONDS_PER_BATCH" in consts:
                saved = {k: getattr(crbm_train, k) for k in consts["current"]}
                try:
                    for k in consts["current"]:
                        setattr(crbm_train, k, consts.get(k, saved[k]))
                    row["auto_suggested"] = "cuda" if s.cuda_pays() else "cpu"
                finally:
                    for k, v in saved.items():
                        setattr(crbm_train, k, v)
            rows.append(row)
            say(f"   sweep {row}")
        return rows
    stage("sweep", B)(sweep)
    return finish(out_dir)


def measured_nothing(results: dict) -> str | None:
    """Why ``results`` measured nothing (None when they did): no execution generated, or no
    CPU fit (a stage's failure is stored as its text), which the CUDA figures and the CRBM
    stages are measured against."""
    executions = (results.get("data") or {}).get("executions", 0)
    if executions < 1:
        return f"{executions} executions: nothing to fit"
    fit = results.get("fit_cpu")
    if not isinstance(fit, dict):       # the refusal is one line: the error's first
        return f"no CPU fit to compare with ({(str(fit or '') or 'not run').splitlines()[0]})"
    return None


def finish(out_dir: Path) -> int:
    why = measured_nothing(RESULTS)
    if why:
        return refuse("gpu_check", why)
    RESULTS["total_s"] = round(time.perf_counter() - START, 1)
    path = out_dir / "gpu_check.json"
    path.write_text(json.dumps(RESULTS, indent=1, default=str) + "\n")
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
