"""A small CNN trained on generated images (CPU), with the phases of a real training job.

    python e2e/workloads/cnn.py --duration 60 --epochs 2 --phase-log phases.csv

Phases (one stderr line each, ``[cnn] phase=... t=...``):

* ``startup``: importing torch;
* ``datagen``: builds a labelled image set (10 classes: smooth class patterns + noise) chunk by
  chunk, so memory grows through the phase (~75 MB per ``--scale``);
* ``train``: epochs of Adam steps, batches prepared (augmented) by DataLoader worker processes;
* ``validate``: after each epoch, a no-grad pass over a held-out set (lighter CPU);
* ``checkpoint``: after each epoch, a snapshot of model + optimizer state written with
  ``torch.save`` (memory spike of ~3x the state: copy, serialised bytes);
* ``evaluate``: the training set is dropped (memory falls) and a test set is scored.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

NAME = "cnn"
IMAGE = (3, 32, 32)
CLASSES = 10


def main(argv=None) -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args(argv)
    phases = _common.PhaseReporter(NAME, args.phase_log)
    phases.enter("startup")
    torch = _common.setup_torch(args.threads)
    from torch import nn
    from torch.utils.data import Dataset

    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    # the model and optimizer first: building the optimizer imports a lot of torch (seconds of
    # CPU), which belongs to start-up, not to data generation
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 1024), nn.ReLU(), nn.Linear(1024, CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    plan = _common.Plan.for_run(args.duration - (time.time() - _common.START), args.epochs,
                                args.eval_every, args.checkpoint_every)

    # ------------------------------------------------------------------ datagen
    phases.enter("datagen")
    n_train = max(512, int(6000 * args.scale))
    n_val = n_test = max(128, n_train // 6)
    protos = torch.nn.functional.avg_pool2d(torch.randn(CLASSES, *IMAGE, generator=g) * 3, 5,
                                            stride=1, padding=2)

    def generate(n: int, share: float) -> tuple:
        """n images, built in chunks paced over share x the datagen time."""
        x = torch.empty(0, *IMAGE)
        y = torch.empty(0, dtype=torch.long)
        chunks = 12
        per_chunk = plan.datagen * share / chunks
        xs, ys = [], []
        for i in range(chunks):
            t0 = time.monotonic()
            m = n // chunks + (1 if i < n % chunks else 0)
            labels = torch.randint(0, CLASSES, (m,), generator=g)
            noise = torch.randn(m, *IMAGE, generator=g)
            img = protos[labels] + nn.functional.avg_pool2d(noise, 3, stride=1, padding=1)
            xs.append(img)
            ys.append(labels)
            time.sleep(max(0.0, per_chunk - (time.monotonic() - t0)))
        if xs:
            x, y = torch.cat(xs), torch.cat(ys)
        return x, y

    train_x, train_y = generate(n_train, 0.7)
    val_x, val_y = generate(n_val, 0.15)
    test_x, test_y = generate(n_test, 0.15)

    class Augmented(Dataset):
        """Random flips and shifts, applied per sample in the worker processes."""

        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            img = self.x[i]
            if torch.rand(1).item() < 0.5:
                img = img.flip(-1)
            shift = int(torch.randint(-2, 3, (1,)).item())
            return img.roll(shift, -2), self.y[i]

    train_loader = _common.loader(args, Augmented(train_x, train_y), 64, shuffle=True,
                                  generator=g)

    ckpt = _common.Checkpointer(args.checkpoint_dir)

    def score(x, y, seconds: float, duty: float) -> float:
        model.eval()
        pacer, correct, seen = _common.Pacer(duty), 0, 0
        batches = lambda: zip(x.split(128), y.split(128))  # noqa: E731
        with torch.no_grad():
            for xb, yb in _common.timeboxed(batches, seconds):
                correct += int((model(xb).argmax(1) == yb).sum())
                seen += len(yb)
                pacer.step()
        model.train()
        return correct / max(1, seen)

    try:
        for epoch in range(1, args.epochs + 1):
            phases.enter("train", epoch=epoch)
            pacer, losses = _common.Pacer(args.duty), []
            for xb, yb in _common.timeboxed(lambda: train_loader, plan.train):
                opt.zero_grad()
                loss = loss_fn(model(xb), yb)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                pacer.step()
            _common.end_of_epoch(NAME, args, phases, ckpt, model, opt, plan, epoch, losses,
                                 lambda s, d: f"val acc {score(val_x, val_y, s, d):.3f}")

        # ------------------------------------------------------------------ evaluate
        phases.enter("evaluate")
        del train_loader, train_x, train_y  # the job is done with its training data
        import gc

        gc.collect()
        acc = score(test_x, test_y, plan.evaluate, 0.5)
        print(f"[{NAME}] test acc {acc:.3f}", file=sys.stderr, flush=True)
    finally:
        ckpt.close()
    phases.enter("done")
    phases.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
