"""Distributed data-parallel training, one process per rank (torch.distributed on gloo over
127.0.0.1), with the phases of a real training job (see ``_job.py``): a 1-D convolutional
audio classifier on generated clips.

    python e2e/workloads/ddp.py --rank 0 --world-size 2 --master-port 29511 &
    python e2e/workloads/ddp.py --rank 1 --world-size 2 --master-port 29511

Each rank is what one pod of a training job runs (``ai4dl record`` follows one rank). Each
writes its own shard of clips (``datagen``) and turns it into log-spectrograms with
``torch.stft`` (``preprocess``). Training steps are synchronous: DistributedDataParallel
all-reduces the gradients, and the epoch's time box is rank 0's, shared every step. Rank 0 alone
validates and writes checkpoints while the other ranks wait at a barrier, as DDP jobs do.
"""

from __future__ import annotations

import io
import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _job  # noqa: E402

NAME = "ddp"
CLASSES = 10
SAMPLES = 8000  # one second at 8 kHz


def main(argv=None) -> int:
    p = _job.parser(__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--master-port", type=int, default=29511)
    args = p.parse_args(argv)
    torch = _common.setup_torch(args.threads)
    import numpy as np
    from torch import nn
    from torch.nn import functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.master_port}", rank=args.rank,
        world_size=args.world_size, timeout=timedelta(minutes=10))
    col = _job.TorchCollective(torch, args.rank, args.world_size)
    rng = np.random.default_rng(args.seed * 100 + args.rank)
    clips = max(400, int(3000 * args.scale))

    def build(torch):
        torch.manual_seed(args.seed)  # the same initial weights on every rank
        net = nn.Sequential(
            nn.Conv1d(65, 128, 5, padding=2), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Conv1d(128, 128, 5, padding=2), nn.BatchNorm1d(128), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(128, 256, 3, padding=1), nn.BatchNorm1d(256), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(256, CLASSES))
        model = DistributedDataParallel(net)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def fetch(folder):
        t = np.arange(SAMPLES) / 8000.0
        pitch = 200 * 1.25 ** np.arange(CLASSES)
        for s in range(6):
            n = clips // 6
            y = rng.integers(0, CLASSES, n)
            f = pitch[y][:, None] * rng.uniform(0.95, 1.05, (n, 1))
            env = np.exp(-rng.uniform(1, 6, (n, 1)) * t)
            x = env * np.sin(2 * np.pi * f * t) + 0.3 * rng.normal(size=(n, SAMPLES))
            buf = io.BytesIO()
            np.savez(buf, x=(x * 8000).astype(np.int16), y=y)
            _job.write_shard(folder, f"clips-{args.rank}-{s}.npz", buf.getvalue())

    def preprocess(folder):
        xs, ys = [], []
        window = torch.hann_window(128)
        for s in range(6):
            with np.load(os.path.join(folder, f"clips-{args.rank}-{s}.npz")) as z:
                audio = torch.from_numpy(z["x"].astype(np.float32) / 8000)
                spec = torch.stft(audio, 128, hop_length=64, window=window, return_complex=True)
                xs.append(torch.log1p(spec.abs()))
                ys.append(torch.from_numpy(z["y"]))
        x, y = torch.cat(xs), torch.cat(ys)
        x = (x - x.mean()) / x.std()
        n_val = len(x) // 8
        return {"train": TensorDataset(x[2 * n_val:], y[2 * n_val:]),
                "val": (x[:n_val], y[:n_val]), "test": (x[n_val:2 * n_val], y[n_val:2 * n_val])}

    def make_loader(train):
        # every rank holds its own shard; the sampler only shuffles it (one replica each)
        sampler = DistributedSampler(train, num_replicas=1, rank=0, seed=args.seed)
        return _common.loader(args, train, 32, sampler=sampler, drop_last=True)

    train_loss = _job.supervised(F.cross_entropy)
    eval_batches = _job.pair_batches(128)

    try:
        return _job.run(NAME, args, build=build, fetch=fetch, preprocess=preprocess,
                        train_loss=train_loss, score=lambda m, b: float(train_loss(m, b)),
                        make_loader=make_loader, eval_batches=eval_batches, torch=torch,
                        collective=col)
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
