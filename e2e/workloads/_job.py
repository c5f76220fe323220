"""The loop the corpus families share: a training job's phases around a family's own work.

A family (``lstm.py``, ``tabular.py``, ``finetune.py``, ``ddp.py``) says what its data, model and
losses are; :func:`run` does what every training job does with them:

* ``startup``: import torch, build the model and optimizer;
* ``datagen``: write the raw data set to disk in shards, with fsync (the stand-in for a
  download: work and I/O grow with ``--scale``, no time box);
* ``preprocess``: read the shards back and turn them into tensors (parsing, normalising,
  windowing: the family's own work, no time box);
* ``restore`` (``--resume``): load the newest checkpoint of ``--checkpoint-dir`` and go on from
  its epoch, as a preempted job does when it is rescheduled;
* ``train``: optimizer steps on batches from DataLoader worker processes, for the epoch's share
  of ``--duration`` (the phases around it are not time-boxed, so what is left is split);
* ``validate`` every ``--eval-every`` epochs, in-process, passes over the held-out set for
  the phase's share of the time; with
  ``--patience`` the job stops early when validation has not improved that many times (not
  before 60 % of the epochs);
* ``checkpoint`` every ``--checkpoint-every`` epochs: model + optimizer through ``torch.save``;
  ``--preempt-after N`` exits after epoch N's checkpoint, as a preempted job does;
* ``evaluate``: the training data is dropped and the test set scored.

``--duty`` paces the training loop: after each step the program sleeps so that the CPU works
``duty`` of the time, standing in for the time a GPU job's CPU waits on the accelerator.

Distributed families pass a :class:`Collective`: the epoch's time box is decided by rank 0 and
shared every step (the ranks must take the same number of steps), rank 0 alone validates and
writes checkpoints while the others wait at a barrier, as DDP jobs do.
"""

from __future__ import annotations

import gc
import glob
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

import _common


class Collective:
    """What a distributed job shares between ranks (a single process: the identity)."""

    rank = 0
    world = 1

    def any(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def broadcast(self, value: float) -> float:
        return value


class TorchCollective(Collective):
    def __init__(self, torch, rank: int, world: int):
        self.torch, self.rank, self.world = torch, rank, world
        self.dist = torch.distributed

    def any(self, flag: bool) -> bool:
        t = self.torch.tensor([1.0 if flag else 0.0])
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def barrier(self) -> None:
        self.dist.barrier()

    def broadcast(self, value: float) -> float:
        t = self.torch.tensor([float(value)])
        self.dist.broadcast(t, src=0)
        return float(t.item())


def parser(description: str):
    p = _common.parser(description)
    p.add_argument("--patience", type=int, default=0, help="stop early after N validations "
                   "without improvement (default 0: never)")
    p.add_argument("--resume", action="store_true", help="start from the newest checkpoint in "
                   "--checkpoint-dir, if there is one")
    p.add_argument("--preempt-after", type=int, default=0, metavar="EPOCH",
                   help="exit after this epoch's checkpoint, as a preempted job (default 0: no)")
    p.add_argument("--data-dir", help="where the raw data set is written (default: a "
                   "temporary folder, removed at exit)")
    return p


def write_shard(folder: str, name: str, data: bytes) -> None:
    """One raw data file, written and fsynced (a download lands on disk)."""
    _common.write_durably(os.path.join(folder, name), data)


def run(name: str, args, *, build: Callable[[Any], tuple[Any, Any]],
        fetch: Callable[[str], None], preprocess: Callable[[str], dict],
        train_loss: Callable[[Any, Any], Any], score: Callable[[Any, Any], float],
        make_loader: Callable[[Any], Any], eval_batches: Callable[[Any], Callable],
        collective: Collective | None = None, torch=None,
        on_epoch: Callable[[int], None] | None = None) -> int:
    """The job (see the module's doc). ``build(torch) -> (model, optimizer)``; ``fetch(folder)``
    writes the raw data; ``preprocess(folder) -> {"train", "val", "test"}``; ``make_loader(train)``
    -> the training DataLoader; ``eval_batches(split)`` -> a function giving that split's
    batches; ``train_loss(model, batch)`` -> a loss tensor; ``score(model, batch)`` -> a float,
    lower is better. ``on_epoch(epoch)`` runs as each epoch's training starts (e.g. unfreezing)."""
    col = collective or Collective()
    phases = _common.PhaseReporter(name if col.world == 1 else f"{name}/{col.rank}",
                                   args.phase_log)
    phases.enter("startup")
    torch = torch or _common.setup_torch(args.threads)
    torch.manual_seed(args.seed + 1000 * col.rank)
    model, opt = build(torch)
    owned_data = args.data_dir is None
    folder = args.data_dir or tempfile.mkdtemp(prefix=f"ai4dl-{name}-data-")
    os.makedirs(folder, exist_ok=True)
    ckpt = _common.Checkpointer(args.checkpoint_dir)
    try:
        phases.enter("datagen")
        fetch(folder)
        phases.enter("preprocess")
        data = preprocess(folder)
        loader = make_loader(data["train"])
        first = 1
        if args.resume:
            found = sorted(glob.glob(os.path.join(ckpt.dir, "epoch-*.pt")))
            if found:
                phases.enter("restore")
                state = torch.load(found[-1], weights_only=False)
                if on_epoch is not None:  # the schedule up to the checkpoint (e.g. unfreezing)
                    for done in range(1, int(state["epoch"]) + 1):
                        on_epoch(done)
                plain(model).load_state_dict(state["model"])
                opt.load_state_dict(state["optimizer"])
                first = int(state["epoch"]) + 1
                del state
                gc.collect()
        epochs = range(first, args.epochs + 1)
        # a job that will be preempted plans the epochs it will run, not the ones it will not
        planned = range(first, min(args.epochs, args.preempt_after or args.epochs) + 1)
        left = args.duration - (time.time() - _common.START)
        left = col.broadcast(max(0.5 * args.duration, left))
        # the epochs and the evaluation share what is left (0.72 and 0.13 of a plan's body);
        # a run that will be preempted gives the evaluation's share to its epochs
        share = 0.72 if args.preempt_after and args.preempt_after < args.epochs else 0.85
        plan = _common.Plan.for_run(
            left / share, max(1, len(planned)), args.eval_every, args.checkpoint_every,
            sum(_common.due(e, args.epochs, args.eval_every) for e in planned),
            sum(_common.due(e, args.epochs, args.checkpoint_every) or e == args.preempt_after
                for e in planned))
        best, stale = float("inf"), 0
        for epoch in epochs:
            if on_epoch is not None:
                on_epoch(epoch)
            phases.enter("train", epoch=epoch)
            model.train()
            pacer, losses = _common.Pacer(args.duty), []
            end = time.monotonic() + plan.train
            stop = False
            while not stop:
                for batch in loader:
                    opt.zero_grad()
                    loss = train_loss(model, batch)
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
                    pacer.step()
                    if col.any(time.monotonic() >= end):
                        stop = True
                        break
            improved = True
            if _common.due(epoch, args.epochs, args.eval_every):
                phases.enter("validate", epoch=epoch)
                value = evaluate(plain(model), eval_batches(data["val"]), plan.validate,
                                 args.duty, score, torch) if col.rank == 0 else 0.0
                col.barrier()
                value = col.broadcast(value)
                improved = value < best - 1e-4
                best, stale = (value, 0) if improved else (best, stale + 1)
                print(f"[{name}] epoch {epoch}: {len(losses)} steps, loss "
                      f"{sum(losses) / max(1, len(losses)):.4f}, validation {value:.4f}",
                      file=sys.stderr, flush=True)
            # not before 60 % of the epochs: a warm-up, as early-stopping callbacks have
            early = (args.patience > 0 and stale >= args.patience
                     and epoch >= math.ceil(0.6 * args.epochs))
            if _common.due(epoch, args.epochs, args.checkpoint_every) or early or \
                    epoch == args.preempt_after:
                phases.enter("checkpoint", epoch=epoch)
                if col.rank == 0:
                    ckpt.save(plain(model), opt, epoch, plan.checkpoint)
                col.barrier()
            if epoch == args.preempt_after:
                print(f"[{name}] preempted after epoch {epoch}", file=sys.stderr, flush=True)
                phases.close()
                return 0
            if early:
                print(f"[{name}] early stop after epoch {epoch}", file=sys.stderr, flush=True)
                break

        phases.enter("evaluate")
        del loader
        data.pop("train", None)
        gc.collect()  # the job is done with its training data
        value = evaluate(plain(model), eval_batches(data["test"]), plan.evaluate, 0.5, score,
                         torch)
        print(f"[{name}] test {value:.4f}", file=sys.stderr, flush=True)
        col.barrier()
    finally:
        ckpt.close()  # removes the checkpoints only when the folder was ours (no --checkpoint-dir)
        if owned_data:
            shutil.rmtree(folder, ignore_errors=True)
    phases.enter("done")
    phases.close()
    return 0


def supervised(loss_fn) -> Callable:
    """``train_loss`` of a family whose batches are (inputs, targets) pairs."""
    def train_loss(model, batch):
        x, y = batch
        return loss_fn(model(x), y)
    return train_loss


def pair_batches(size: int) -> Callable:
    """``eval_batches`` of a family whose held-out splits are (inputs, targets) tensors: passes
    over them in batches of ``size``."""
    def eval_batches(split):
        x, y = split
        return lambda: zip(x.split(size), y.split(size))
    return eval_batches


def plain(model):
    """The model inside a DistributedDataParallel wrapper (the model itself otherwise)."""
    return model.module if hasattr(model, "module") else model


def evaluate(model, batches: Callable, seconds: float, duty: float, score, torch) -> float:
    """Mean ``score`` over a split's batches for ``seconds``, in passes over the split (the
    phase is time-boxed, like training: cnn.py and transformer.py score the same way)."""
    model.eval()
    pacer, total, n = _common.Pacer(duty), 0.0, 0
    with torch.no_grad():
        for batch in _common.timeboxed(batches, seconds):
            total += score(model, batch)
            n += 1
            pacer.step()
    model.train()
    return total / max(1, n)
