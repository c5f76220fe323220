"""What the workloads share: command-line flags, the time plan, phase reporting, CPU pacing,
checkpoints.

The workloads are real PyTorch training programs, shrunk to run for a chosen time on a shared
CPU. Each phase does its real work (generate data, step an optimizer, evaluate, serialise a
checkpoint) inside a time box, and its CPU is capped by *pacing*: after each batch the program
sleeps so that busy / (busy + sleep) equals the phase's duty cycle. That keeps the phases apart
in CPU (training ~0.7 core, validation ~0.25) whatever the machine, and a run lasts
``--duration`` seconds on a fast or a slow machine alike.
"""

from __future__ import annotations

import argparse
import copy
import gc
import io
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

START = time.time()

PHASES = ("startup", "datagen", "preprocess", "restore", "train", "validate", "checkpoint",
          "evaluate", "done")


class PhaseReporter:
    """One stderr line per phase change (``[cnn] phase=train epoch=1 t=12.31``) and, with a
    path, one ``timestamp,phase`` row per change (unix seconds): the ground truth tests compare
    detected phases with."""

    def __init__(self, program: str, log_path: str | None = None):
        self.program = program
        self.current: str | None = None
        self._log = None
        if log_path:
            self._log = open(log_path, "w")
            self._log.write("timestamp,phase\n")

    def enter(self, phase: str, **info) -> None:
        assert phase in PHASES, phase
        if phase == self.current:
            return
        self.current = phase
        now = time.time()
        extra = "".join(f" {k}={v}" for k, v in info.items())
        print(f"[{self.program}] phase={phase}{extra} t={now - START:.2f}", file=sys.stderr,
              flush=True)
        if self._log is not None:
            self._log.write(f"{now:.3f},{phase}\n")
            self._log.flush()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class Pacer:
    """Caps a loop's CPU at ``duty`` of one core: call :meth:`step` after each unit of work."""

    def __init__(self, duty: float):
        self.duty = min(1.0, max(0.01, duty))
        self._t = time.perf_counter()

    def step(self) -> None:
        busy = time.perf_counter() - self._t
        if self.duty < 1.0:
            time.sleep(busy * (1.0 / self.duty - 1.0))
        self._t = time.perf_counter()


@dataclass
class Plan:
    """Seconds per phase for a run of ``duration`` seconds with ``epochs`` epochs."""

    datagen: float
    train: float        # per epoch
    validate: float     # per epoch
    checkpoint: float   # per checkpoint (every epoch)
    evaluate: float

    @classmethod
    def for_run(cls, duration: float, epochs: int, eval_every: int = 1,
                checkpoint_every: int = 1, n_validations: int | None = None,
                n_checkpoints: int | None = None) -> "Plan":
        # ``duration``: what is left of the run once start-up (imports, model) is done. The
        # epochs that skip validation or the checkpoint train for the time those would take.
        # ``n_validations``/``n_checkpoints``: how many the run will do, when not one per
        # ``eval_every``/``checkpoint_every`` epochs from 1 (a resumed or preempted run).
        body = max(6.0, duration)
        per_epoch = 0.72 * body / epochs
        validate, checkpoint = 0.22 * per_epoch, 0.16 * per_epoch
        if n_validations is None:
            n_validations = validations(epochs, eval_every)
        if n_checkpoints is None:
            n_checkpoints = validations(epochs, checkpoint_every)
        skipped = (validate * (epochs - n_validations) + checkpoint * (epochs - n_checkpoints))
        return cls(datagen=max(4.0, 0.15 * body), train=0.62 * per_epoch + skipped / epochs,
                   validate=validate, checkpoint=checkpoint, evaluate=0.13 * body)


def end_of_epoch(name: str, args, phases: "PhaseReporter", ckpt: "Checkpointer", model, opt,
                 plan: Plan, epoch: int, losses: list, validate) -> None:
    """What cnn.py and transformer.py do after an epoch's training: validate when due (
    ``validate(seconds, duty)`` -> the metric's text for the log line), checkpoint when due."""
    if due(epoch, args.epochs, args.eval_every):
        phases.enter("validate", epoch=epoch)
        metric = validate(plan.validate, args.duty / 3)
        print(f"[{name}] epoch {epoch}: {len(losses)} batches, loss "
              f"{sum(losses) / max(1, len(losses)):.3f}, {metric}", file=sys.stderr, flush=True)
    if due(epoch, args.epochs, args.checkpoint_every):
        phases.enter("checkpoint", epoch=epoch)
        ckpt.save(model, opt, epoch, plan.checkpoint)


def due(epoch: int, epochs: int, every: int) -> bool:
    """Validate / checkpoint after this epoch? Every ``every`` epochs, and always after the
    last (a job keeps its final state)."""
    return epoch == epochs or (every > 0 and epoch % every == 0)


def validations(epochs: int, every: int) -> int:
    return sum(due(e, epochs, every) for e in range(1, epochs + 1))


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--duration", type=float, default=90.0,
                   help="target run time in seconds (default 90); every phase is time-boxed")
    p.add_argument("--epochs", type=int, default=3, help="training epochs (default 3)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="data-set size factor (default 1: ~100 MB of generated data)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes "
                   "for training (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--duty", type=float, default=0.7, help="share of a core the training loop "
                   "may use (default 0.7); validation uses a third of it")
    p.add_argument("--batch-size", type=int, help="training batch size (default: the "
                   "program's own)")
    p.add_argument("--eval-every", type=int, default=1, help="validate every N epochs (and "
                   "after the last; default 1)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="checkpoint every N epochs "
                   "(and after the last; default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--phase-log", help="write 'timestamp,phase' rows (unix seconds) here")
    p.add_argument("--checkpoint-dir", help="where checkpoints go (default: a temporary "
                   "folder, removed at exit)")
    return p


def setup_torch(threads: int):
    import torch

    torch.set_num_threads(max(1, threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (imported twice in one process)
        pass
    return torch


def loader(args, dataset, default_batch: int, **kw):
    """The training DataLoader every program builds: ``--batch-size`` (else the program's own),
    ``--workers`` worker processes kept across epochs, one thread each (``kw``: shuffle,
    sampler, drop_last, generator)."""
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=args.batch_size or default_batch,
                      num_workers=args.workers, persistent_workers=args.workers > 0,
                      worker_init_fn=worker_init, **kw)


def worker_init(_worker_id: int) -> None:
    """DataLoader workers: one thread each, like the parent (their CPU counts in the pod)."""
    import torch

    torch.set_num_threads(1)


class Checkpointer:
    """``torch.save`` of a snapshot of model + optimizer state, as asynchronous checkpointers
    do: copy the state (the memory spike), serialise it, write it to disk with fsync. The
    phase is held for ``min_seconds`` with the snapshot in memory, standing in for the write
    time of a model many times this size (the spike then spans a few samples)."""

    def __init__(self, directory: str | None):
        self.owned = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="ai4dl-ckpt-")
        os.makedirs(self.dir, exist_ok=True)

    def save(self, model, optimizer, epoch: int, min_seconds: float) -> int:
        import torch

        t0 = time.monotonic()
        snapshot = {"epoch": epoch,
                    "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                    "optimizer": copy.deepcopy(optimizer.state_dict())}
        buf = io.BytesIO()
        torch.save(snapshot, buf)
        data = buf.getbuffer()
        write_durably(os.path.join(self.dir, f"epoch-{epoch:03d}.pt"), data)
        size = len(data)
        time.sleep(max(0.0, min_seconds - (time.monotonic() - t0)))
        del data, buf, snapshot
        gc.collect()
        return size

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.dir, ignore_errors=True)


def write_durably(path: str, data) -> None:
    """Write ``data`` (bytes-like) to ``path`` in 4 MiB pieces, fsync, then rename into place."""
    with open(path + ".tmp", "wb") as fh:
        for i in range(0, len(data), 1 << 22):
            fh.write(data[i:i + (1 << 22)])
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(path + ".tmp", path)


def timeboxed(make_iter, seconds: float):
    """Items from ``make_iter()`` until ``seconds`` pass, starting a new pass when one ends."""
    end = time.monotonic() + seconds
    while True:
        got = False
        for item in make_iter():
            got = True
            yield item
            if time.monotonic() >= end:
                return
        if not got or time.monotonic() >= end:
            return
