"""A recurrent forecaster (LSTM or GRU) trained on generated sensor series (CPU), with the
phases of a real training job (see ``_job.py``).

    python e2e/workloads/lstm.py --duration 200 --epochs 4 --cell gru --phase-log phases.csv

``datagen`` writes multichannel sensor series (seasonal patterns, drift, bursts) as ``.npy``
shards, ``--scale`` x ~60 MB; ``preprocess`` reads them back, normalises each channel with the
training shards' statistics and cuts overlapping windows (a copy: memory grows); the model
forecasts the next step of every channel from ``--seq-len`` steps.
"""

from __future__ import annotations

import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _job  # noqa: E402

NAME = "lstm"
CHANNELS = 16


def main(argv=None) -> int:
    p = _job.parser(__doc__.splitlines()[0])
    p.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=48)
    args = p.parse_args(argv)
    torch = _common.setup_torch(args.threads)
    import numpy as np
    from torch import nn
    from torch.utils.data import TensorDataset

    rng = np.random.default_rng(args.seed)
    series = max(8, int(64 * args.scale))
    length = 8_000

    class Forecaster(nn.Module):
        def __init__(self):
            super().__init__()
            cell = nn.LSTM if args.cell == "lstm" else nn.GRU
            self.rnn = cell(CHANNELS, args.hidden, num_layers=2, batch_first=True, dropout=0.1)
            self.head = nn.Linear(args.hidden, CHANNELS)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out[:, -1])

    def build(torch):
        model = Forecaster()
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)

    def fetch(folder):
        t = np.arange(length, dtype=np.float32)
        for s in range(series):
            period = rng.uniform(50, 400, CHANNELS)
            x = np.sin(2 * np.pi * t[:, None] / period + rng.uniform(0, 6.3, CHANNELS))
            x += np.cumsum(rng.normal(0, 0.02, (length, CHANNELS)), axis=0)  # drift
            bursts = rng.random((length, CHANNELS)) < 0.002
            x += bursts * rng.normal(0, 3, (length, CHANNELS))
            buf = io.BytesIO()
            np.save(buf, (x * rng.uniform(0.5, 20) + rng.uniform(-5, 5)).astype(np.float32))
            _job.write_shard(folder, f"series-{s:04d}.npy", buf.getvalue())

    def preprocess(folder):
        shards = [np.load(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
                  if f.endswith(".npy")]
        n_val = max(1, len(shards) // 8)
        train, val, test = shards[2 * n_val:], shards[:n_val], shards[n_val:2 * n_val]
        stacked = np.concatenate(train)
        mean, std = stacked.mean(0), stacked.std(0) + 1e-6
        del stacked

        def windows(group, stride):
            xs, ys = [], []
            for a in group:
                a = torch.from_numpy((a - mean) / std)
                w = a.unfold(0, args.seq_len + 1, stride).permute(0, 2, 1).contiguous()
                xs.append(w[:, :-1])
                ys.append(w[:, -1])
            return torch.cat(xs), torch.cat(ys)

        return {"train": TensorDataset(*windows(train, 8)), "val": windows(val, 16),
                "test": windows(test, 16)}

    def make_loader(train):
        return _common.loader(args, train, 64, shuffle=True,
                              generator=torch.Generator().manual_seed(args.seed))

    loss_fn = nn.MSELoss()

    train_loss = _job.supervised(loss_fn)
    eval_batches = _job.pair_batches(256)

    return _job.run(NAME, args, build=build, fetch=fetch, preprocess=preprocess,
                    train_loss=train_loss, score=lambda m, b: float(train_loss(m, b)),
                    make_loader=make_loader, eval_batches=eval_batches, torch=torch)


if __name__ == "__main__":
    sys.exit(main())
