"""Record the DL training corpus: real PyTorch runs of this folder's six families, drawn from
their parameters, each sampled once a second by ``ai4dl record``.

    python e2e/workloads/corpus.py plan                       # the draws, one line each
    python e2e/workloads/corpus.py record --out runs/ --slots 4
    python e2e/workloads/corpus.py build runs/ --out operator/ai4dl/data/dlcorpus

``record`` runs every job of the plan that ``--out`` does not hold yet (an interrupted recording
goes on where it stopped), ``--slots`` at a time (a two-rank job takes two), every workload at
``nice 19`` so the machine stays usable. A job is one execution group: the two ranks of a
``ddp`` job, and the two parts of a preempted-then-resumed job, are executions of one group.
``build`` writes the corpus: ``traces.csv.gz`` (the long trace format plus ``group``),
``phases.csv.gz`` (each run's own phase log: the ground truth) and ``manifest.json`` (per
execution: family, job, parameters, seed, wall time, exit status, the load average around it;
and the machine).

The plan is a pure function of ``--seed``: the same seed gives the same jobs and parameters
(not the same samples: these are real runs on a shared machine).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import platform
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAMILIES = ("cnn", "transformer", "lstm", "tabular", "finetune", "ddp")
# the families built on _job.py know --patience, --resume and --preempt-after
JOB_FAMILIES = ("lstm", "tabular", "finetune", "ddp")
FORMAT_VERSION = 1


@dataclass
class Run:
    """One recorded process: an execution of the corpus."""

    execution: str          # e.g. "lstm-04", "ddp-02/rank1", "tabular-07/part2"
    job: str                # the execution group
    family: str
    args: list[str]
    rank: int = 0
    part: int = 1


@dataclass
class Job:
    name: str
    family: str
    params: dict
    runs: list[Run] = field(default_factory=list)

    @property
    def slots(self) -> int:
        return 2 if self.family == "ddp" else 1


def draw(family: str, index: int, rng: random.Random) -> dict:
    """One parameter draw of a family: what a user of that program might pick."""
    p = {"duration": round(rng.uniform(185, 235)), "epochs": rng.randint(3, 7),
         "workers": rng.choice([0, 1, 2, 2, 3]), "duty": round(rng.uniform(0.45, 1.0), 2),
         "eval-every": rng.choice([1, 1, 2]), "checkpoint-every": rng.choice([1, 2, 3]),
         "scale": round(rng.uniform(0.5, 1.5 if family in ("cnn", "transformer") else 2.0), 2),
         "seed": 1000 * FAMILIES.index(family) + index}
    p["batch-size"] = {"cnn": rng.choice([32, 64, 128]), "transformer": rng.choice([8, 16, 32]),
                       "lstm": rng.choice([32, 64, 128]), "tabular": rng.choice([256, 512, 1024]),
                       "finetune": rng.choice([16, 32, 64]), "ddp": rng.choice([16, 32, 64])
                       }[family]
    if family in JOB_FAMILIES and rng.random() < 0.3:
        # early stopping: planned for more time than it may need (a max-epochs budget), so a
        # run that stops early still lasts over 3 minutes
        p["patience"] = rng.choice([1, 2])
        p["duration"] = round(1.8 * p["duration"])
    if family == "lstm":
        p.update({"cell": rng.choice(["lstm", "gru"]), "hidden": rng.choice([64, 128, 192]),
                  "seq-len": rng.choice([32, 48, 64])})
    elif family == "tabular":
        p["width"] = rng.choice([128, 256, 512])
    elif family == "finetune":
        p["freeze-epochs"] = rng.randint(1, max(1, p["epochs"] - 2))
    return p


def plan(seed: int = 0, per_family: int = 10, preempted: int = 1) -> list[Job]:
    """``per_family`` jobs of each family; in each family built on ``_job.py`` except ddp,
    ``preempted`` of them are stopped after an epoch's checkpoint and resumed as a second run."""
    rng = random.Random(seed)
    jobs = []
    for family in FAMILIES:
        for i in range(per_family):
            params = draw(family, i, rng)
            name = f"{family}-{i:02d}"
            job = Job(name, family, params)
            base = [f"--{k}={v}" for k, v in params.items()]
            if family == "ddp":
                port = 29600 + i
                job.runs = [Run(f"{name}/rank{r}", name, family,
                                base + [f"--rank={r}", "--world-size=2", f"--master-port={port}"],
                                rank=r) for r in (0, 1)]
            elif family in JOB_FAMILIES and i < preempted:
                stop = max(1, params["epochs"] // 2)
                job.params["preempt-after"] = stop
                job.runs = [Run(f"{name}/part1", name, family, base + [f"--preempt-after={stop}"]),
                            Run(f"{name}/part2", name, family, base + ["--resume"], part=2)]
            else:
                job.runs = [Run(name, name, family, base)]
            jobs.append(job)
    return jobs


def _file(out: Path, execution: str, suffix: str) -> Path:
    return out / (execution.replace("/", "__") + suffix)


def _machine() -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch_version, "kernel": platform.release()}


@dataclass(frozen=True)
class QuickCheck:
    """What a quick check beside a recording changes in every run (nothing by default)."""

    max_duration: float | None = None   # cap on --duration (s)
    max_scale: float | None = None      # cap on --scale (the data set's size)
    port_offset: int = 0                # moves the ddp jobs' ports


def _clamped(args: list[str], quick: QuickCheck) -> list[str]:
    """The run's arguments with ``--duration`` and ``--scale`` at most ``quick``'s caps and
    the ddp port moved by its ``port_offset`` (a quick check beside a recording)."""
    out = []
    for a in args:
        if a.startswith("--duration=") and quick.max_duration:
            a = f"--duration={min(float(a.split('=', 1)[1]), quick.max_duration):g}"
        elif a.startswith("--scale=") and quick.max_scale:
            a = f"--scale={min(float(a.split('=', 1)[1]), quick.max_scale):g}"
        elif a.startswith("--master-port=") and quick.port_offset:
            a = f"--master-port={int(a.split('=', 1)[1]) + quick.port_offset}"
        out.append(a)
    return out


def _record_run(run: Run, out: Path, interval: float, shared_dirs: dict,
                quick: QuickCheck = QuickCheck()) -> dict:
    trace, phases = _file(out, run.execution, ".csv"), _file(out, run.execution, ".phases.csv")
    log = _file(out, run.execution, ".log")
    extra = []
    if run.job in shared_dirs:  # the parts of a preempted job share their checkpoints
        extra = [f"--checkpoint-dir={shared_dirs[run.job]}"]
    cmd = [sys.executable, "-m", "ai4dl", "record", "-i", f"{interval:g}", "-o", str(trace),
           "--name", run.execution, "--", "nice", "-n", "19", sys.executable,
           str(HERE / f"{run.family}.py"), *_clamped(run.args, quick), *extra,
           f"--phase-log={phases}"]
    load0, t0 = os.getloadavg()[0], time.time()
    with open(log, "wb") as fh:
        code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
    return {"execution": run.execution, "exit": code, "wall_seconds": round(time.time() - t0, 1),
            "started": round(t0, 3), "load_before": round(load0, 2),
            "load_after": round(os.getloadavg()[0], 2)}


def _record_job(job: Job, out: Path, interval: float,
                quick: QuickCheck = QuickCheck()) -> None:
    meta = _file(out, job.name, ".json")
    shared = {}
    if len(job.runs) > 1 and job.family != "ddp":
        shared[job.name] = str(out / (job.name + ".checkpoints"))
    if job.family == "ddp":  # the ranks run at once, each followed by its own recorder
        results: list[dict] = [{}, {}]
        threads = [threading.Thread(target=lambda r=r: results.__setitem__(
            r.rank, _record_run(r, out, interval, shared, quick))) for r in job.runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        results = [_record_run(r, out, interval, shared, quick) for r in job.runs]
    doc = {"job": job.name, "family": job.family, "params": job.params, "runs": results}
    meta.write_text(json.dumps(doc, indent=1) + "\n")
    for d in shared.values():
        subprocess.call(["rm", "-rf", d])


def cmd_record(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [j for j in plan(args.seed, args.per_family)
            if not _file(out, j.name, ".json").exists()
            and (not args.only or j.family in args.only.split(","))
            and (not args.jobs or j.name in args.jobs.split(","))]
    # the long jobs first, two-slot jobs interleaved, so the slots stay full to the end
    todo.sort(key=lambda j: -j.params["duration"] * len(j.runs))
    free = threading.Semaphore(args.slots)
    lock = threading.Lock()
    done = [0]
    print(f"corpus: {len(todo)} jobs to record into {out}, {args.slots} slots", flush=True)

    def work(job: Job) -> None:
        try:
            _record_job(job, out, args.interval,
                        QuickCheck(args.max_duration, args.max_scale, args.port_offset))
        finally:
            for _ in range(job.slots):
                free.release()
            with lock:
                done[0] += 1
                print(f"corpus: {done[0]}/{len(todo)} {job.name} done", flush=True)

    threads = []
    for job in todo:
        for _ in range(job.slots):
            free.acquire()
        t = threading.Thread(target=work, args=(job,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return 0


def cmd_build(args) -> int:
    src, dst = Path(args.runs), Path(args.out)
    jobs = {j.name: j for j in plan(args.seed, args.per_family)}
    traces, phase_rows, executions, missing = [], [], [], []
    for name, job in jobs.items():
        meta_path = _file(src, name, ".json")
        if not meta_path.exists():
            missing.append(name)
            continue
        meta = json.loads(meta_path.read_text())
        for run, result in zip(job.runs, meta["runs"]):
            trace = _file(src, run.execution, ".csv")
            with open(trace, newline="") as fh:
                rows = list(csv.DictReader(fh))
            for r in rows:
                traces.append([r["execution"], r["timestamp"], job.name, r["cpu"], r["memory"]])
            ph = _file(src, run.execution, ".phases.csv")
            if ph.exists():
                with open(ph, newline="") as fh:
                    phase_rows += [[run.execution, r["timestamp"], r["phase"]]
                                   for r in csv.DictReader(fh)]
            executions.append({"execution": run.execution, "job": job.name,
                               "family": job.family, "rank": run.rank, "part": run.part,
                               "samples": len(rows), "params": job.params,
                               "command": f"e2e/workloads/{job.family}.py " + " ".join(run.args),
                               **{k: v for k, v in result.items() if k != "execution"}})
    if missing:
        print(f"corpus: {len(missing)} jobs not recorded yet: {', '.join(missing)}",
              file=sys.stderr)
    dst.mkdir(parents=True, exist_ok=True)

    def write_gz(path: Path, header: list[str], rows: list[list]) -> None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        # mtime 0: the same rows give the same bytes
        path.write_bytes(gzip.compress(buf.getvalue().encode(), 9, mtime=0))

    write_gz(dst / "traces.csv.gz", ["execution", "timestamp", "group", "cpu", "memory"], traces)
    write_gz(dst / "phases.csv.gz", ["execution", "timestamp", "phase"], phase_rows)
    manifest = {"format": "ai4dl-dl-corpus", "version": FORMAT_VERSION,
                "step_seconds": args.interval, "plan_seed": args.seed,
                "recorded_with": "python e2e/workloads/corpus.py record --slots "
                                 f"{args.slots} --interval {args.interval:g}",
                "slots": args.slots, "machine": json.loads(args.machine) if args.machine
                else _machine(), "executions": executions}
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"corpus: {len(executions)} executions of {len(jobs) - len(missing)} jobs, "
          f"{len(traces)} samples -> {dst}", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "record", "build"):
        s = sub.add_parser(name)
        s.add_argument("--seed", type=int, default=0, help="plan seed (default 0)")
        s.add_argument("--per-family", type=int, default=10, help="jobs per family (default 10)")
        s.add_argument("--interval", type=float, default=1.0, help="sampling interval (s)")
        s.add_argument("--slots", type=int, default=4, help="processes recorded at once")
        if name == "record":
            s.add_argument("--out", required=True, help="folder of per-run files")
            s.add_argument("--only", help="comma-separated families to record")
            s.add_argument("--jobs", help="comma-separated jobs to record (e.g. lstm-00)")
            s.add_argument("--max-duration", type=float, help="cap every run's --duration "
                           "(seconds; for a quick check, not for the corpus)")
            s.add_argument("--max-scale", type=float, help="cap every run's --scale (the size "
                           "of its data set; for a quick check, not for the corpus)")
            s.add_argument("--port-offset", type=int, default=0, help="move the ddp jobs' "
                           "ports (29600 + job) by this much")
        if name == "build":
            s.add_argument("runs", help="the folder 'record' wrote")
            s.add_argument("--out", required=True, help="the corpus folder")
            s.add_argument("--machine", help="machine description (JSON) instead of this one's")
    args = p.parse_args(argv)
    if args.cmd == "plan":
        for j in plan(args.seed, args.per_family):
            print(j.name, " ".join(f"{k}={v}" for k, v in j.params.items()),
                  f"({len(j.runs)} runs)")
        return 0
    return cmd_record(args) if args.cmd == "record" else cmd_build(args)


if __name__ == "__main__":
    sys.exit(main())
